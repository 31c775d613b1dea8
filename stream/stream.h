/* The byte stream under MPA (RFC 5044 §2 calls it the LLP): one reliable,
 * ordered, full-duplex stream behind one small table of operations.
 *
 * Nothing above this header knows the stream is a socket: MPA frames on it,
 * the engine waits for it through uiw_stream_fd() (readiness) and never
 * touches the descriptor otherwise. The stream is a kernel TCP socket
 * (stream/tcp.c), or TLS 1.3 over one (stream/tls.c, OpenSSL) behind the
 * same operations.
 *
 * Every operation is non-blocking: a stream that cannot take or give a byte
 * now answers -EAGAIN, and the caller waits for readiness (POLLIN / POLLOUT
 * on the descriptor, or rx_buffered() > 0 for a stream that holds decoded
 * bytes of its own). The blocking helpers at the end (connection setup and
 * tests) wait with poll() and a deadline.
 */
#ifndef UIWARP_STREAM_H
#define UIWARP_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct uiw_stream;

struct uiw_stream_ops {
	/* Hands up to the sum of iov[0..n) bytes to the stream without
	 * blocking. Returns the count accepted (> 0; fewer than offered when
	 * the stream is full), -EAGAIN when it takes nothing now, or -errno
	 * (-EPIPE, -ECONNRESET, ...). */
	ssize_t (*sendv)(struct uiw_stream *s, const struct iovec *iov, int n);
	/* Takes up to the sum of iov[0..n) bytes without blocking. Returns
	 * the count (> 0), 0 at the orderly end of the stream, -EAGAIN when
	 * nothing is there now, or -errno (-ECONNRESET: the peer reset). */
	ssize_t (*recvv)(struct uiw_stream *s, const struct iovec *iov, int n);
	/* Bytes the stream already holds for recvv beyond what its descriptor
	 * shows as readable (a TLS record decoded ahead); 0 for TCP. */
	size_t (*rx_buffered)(struct uiw_stream *s);
	/* Effective maximum segment size in bytes (RFC 5044 §4.1's EMSS), or
	 * -errno. */
	int (*emss)(struct uiw_stream *s);
	/* Readiness (POLLIN) is worth reporting only once bytes bytes are
	 * readable (>= 1): the reader is in the middle of an FPDU and that
	 * many must come before it can finish it. Only the readiness changes:
	 * recvv still takes what there is, and the end of the stream or an
	 * error are reported at once. Best effort (TCP: SO_RCVLOWAT); may be
	 * NULL. */
	void (*rx_lowat)(struct uiw_stream *s, int bytes);
	/* For a dead-peer watchdog where the kernel does not enforce the
	 * bound itself (Multipath TCP ignores TCP_USER_TIMEOUT and keeps an
	 * MPTCP connection after its subflows' keepalive gave up): the
	 * milliseconds since the last segment from the peer on any path
	 * (data or ACK; keepalive makes an idle live peer answer). Returns
	 * them (>= 0), or -EOPNOTSUPP when the kernel keeps the bound (plain
	 * TCP) or cannot tell. May be NULL. */
	int (*silent_ms)(struct uiw_stream *s);
	/* Half-closes the send direction (graceful close: TCP FIN). */
	void (*shutdown_send)(struct uiw_stream *s);
	/* Aborts both directions: later calls fail, a waiter on the descriptor
	 * wakes up. The descriptor stays valid until destroy. */
	void (*abort)(struct uiw_stream *s);
	/* Releases the stream (closes the socket). */
	void (*destroy)(struct uiw_stream *s);
	/* The size in bytes of the segments the stream cuts what sendv takes
	 * into, the last one where each send ends (TCP: TCP_MAXSEG, its
	 * current MSS), or -errno. NULL when the stream frames the bytes
	 * itself (TLS records). */
	int (*seg_size)(struct uiw_stream *s);
};

struct uiw_stream {
	const struct uiw_stream_ops *ops;
	int fd;		    /* what readiness is waited on; owned by the stream */
	int lowat;	    /* rx_lowat's last value (0: never set, i.e. 1) */
	int rcvbuf;	    /* TCP: SO_RCVBUF as last read (rx_lowat's cap), 0 not yet */
	int rcvbuf_recheck; /* TCP: capped marks left before SO_RCVBUF is read again */
};

static inline ssize_t uiw_stream_sendv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	return s->ops->sendv(s, iov, n);
}
static inline ssize_t uiw_stream_recvv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	return s->ops->recvv(s, iov, n);
}
/* See rx_lowat above; a call that changes nothing costs nothing. */
static inline void uiw_stream_rx_lowat(struct uiw_stream *s, int bytes)
{
	if (bytes < 1)
		bytes = 1;
	if (s->ops->rx_lowat && bytes != (s->lowat ? s->lowat : 1))
		s->ops->rx_lowat(s, bytes);
}
static inline int uiw_stream_fd(const struct uiw_stream *s)
{
	return s->fd;
}

/* ------------------------------------------------------------------ TCP */

/* Socket options uiwarp applies to its TCP sockets (from the engine's
 * configuration, docs/configuration.md). */
struct uiw_tcp_opts {
	char cc[16];	   /* TCP_CONGESTION, "" for the system's */
	int maxseg;	   /* TCP_MAXSEG in bytes, 0 for the path's */
	int sndbuf;	   /* SO_SNDBUF in bytes, 0 for the kernel's autotuning */
	int rcvbuf;	   /* SO_RCVBUF in bytes, 0 for the kernel's autotuning */
	int notsent_lowat; /* TCP_NOTSENT_LOWAT in bytes, 0 for the system's */
	/* The dead-peer bound in ms, 0 for the kernel's defaults (about 15
	 * minutes of retransmissions; no keepalive): TCP_USER_TIMEOUT (sent
	 * data unacknowledged this long fails the socket with ETIMEDOUT) and
	 * keepalive probes from half of it on, every tenth of it (an idle
	 * socket whose peer stopped answering fails the same way, within the
	 * bound plus one probe interval). RFC 5482, RFC 1122 §4.2.3.6. */
	int dead_peer_ms;
	int tos; /* IP_TOS / IPV6_TCLASS byte (0..255), -1 for the system's */
	/* Multipath TCP (RFC 8684; UIWARP_MPTCP): uiw_tcp_connect and
	 * uiw_tcp_listen create IPPROTO_MPTCP sockets, plain TCP when the
	 * kernel refuses (net.mptcp.enabled=0, no CONFIG_MPTCP). A connection
	 * whose peer does not speak MPTCP falls back to plain TCP in the
	 * kernel. Under MPTCP TCP_USER_TIMEOUT is not honoured (the engine
	 * keeps the dead-peer bound through silent_ms): docs/wan.md. */
	bool mptcp;
	/* rcvbuf 0 and this set (UIWARP_TCP_RCVBUF unset): a connected
	 * socket on a short path gets a fixed receive buffer
	 * (uiw_tcp_short_path_rcvbuf); false: autotuning always (-1) */
	bool short_rcvbuf;
};

/* Wraps a connected TCP socket: sets O_NONBLOCK and TCP_NODELAY (best
 * effort: a socketpair in a test has no TCP options). Returns the stream,
 * which owns fd from then on, or NULL with errno EBADF (fd < 0) or ENOMEM
 * (the caller still owns fd). RFC 5044 §2. */
struct uiw_stream *uiw_stream_tcp(int fd);

/* Applies o (congestion control, MSS clamp, buffer sizes, not-sent low
 * water mark, the dead-peer bound, TOS / traffic class) to a TCP socket, before connect or
 * listen so that the window scale follows the receive buffer; a listener's
 * options are inherited by the sockets it accepts. NULL o does nothing.
 * Errors are ignored (an unknown algorithm keeps the default; SO_SNDBUF /
 * SO_RCVBUF are capped by net.core.wmem_max / rmem_max). */
void uiw_tcp_apply_opts(int fd, const struct uiw_tcp_opts *o);

/* Whether the connected socket fd carries Multipath TCP now: 1 with
 * *subflows (when not NULL) the count of TCP subflows the path manager
 * added to the first (opened or being opened; struct mptcp_info
 * mptcpi_subflows, getsockopt SOL_MPTCP MPTCP_INFO, linux/mptcp.h; ss -M
 * shows it as subflows:N), 0 for plain TCP (not an
 * IPPROTO_MPTCP socket, or one that fell back because the peer or a
 * middlebox does not speak MPTCP, RFC 8684 §3.7), or -errno from
 * getsockopt (-EBADF, -ENOTSOCK). */
int uiw_tcp_mptcp_state(int fd, int *subflows);

/* A connected TCP socket to dst (from src when not NULL, SO_REUSEADDR),
 * within timeout_ms; IPPROTO_MPTCP when o->mptcp (see there). A refused
 * connect (nothing listens yet) is retried with backoff (1, 2, 4 .. 64 ms)
 * for up to retry_ms. Returns the socket (non-blocking, CLOEXEC) or
 * -errno: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -ENETUNREACH, ... */
int uiw_tcp_connect(const struct sockaddr *src, const struct sockaddr *dst, int timeout_ms,
		    int retry_ms, const struct uiw_tcp_opts *o);

/* A listening TCP socket on addr (SO_REUSEADDR; an IPv6 address also takes
 * IPv4 unless v6only), backlog connections (<= 0: 64); IPPROTO_MPTCP when
 * o->mptcp (it accepts plain TCP clients too, as fallback connections).
 * Returns the socket (non-blocking, CLOEXEC) or -errno (-EADDRINUSE,
 * -EADDRNOTAVAIL, ...). */
int uiw_tcp_listen(const struct sockaddr *addr, int backlog, bool v6only,
		   const struct uiw_tcp_opts *o);

/* The EMSS of the connected TCP socket fd (RFC 5044 §4.1): TCP_MAXSEG in
 * bytes, bounded by the payload one segment carries on the route's path
 * MTU (rtnetlink) when that lookup works. Returns it or -errno from
 * getsockopt (-EBADF, -ENOTSOCK). */
int uiw_tcp_emss(int fd);

/* The handshake RTT (TCP_INFO tcpi_rtt, µs) under which a path counts as
 * short, and the receive buffer (bytes, SO_RCVBUF) such a path gets. */
#define UIW_SHORT_PATH_RTT_US 200
#define UIW_SHORT_PATH_RCVBUF (4 << 20)
/* A connected TCP socket whose handshake RTT is under
 * UIW_SHORT_PATH_RTT_US (one host, a LAN) gets a UIW_SHORT_PATH_RCVBUF
 * receive buffer when net.core.rmem_max allows that much, instead of the
 * kernel's autotuning: Linux grows an autotuned buffer only when the bytes
 * read within one receiver RTT exceed the last such count
 * (tcp_rcv_space_adjust), which one recvmsg of at most one 64 KiB FPDU
 * at a few µs of RTT never does, so a connection that did not grow at its
 * start stayed near 0.5 MB for its life (1 MiB RDMA Writes on loopback at
 * 39-50 instead of 59-67 Gbit/s, docs/performance.md). A 4 MiB buffer
 * covers 160 Gbit/s at 200 µs; a longer path keeps autotuning (up to
 * tcp_rmem's maximum). Returns 1 when the buffer was set, 0 when the
 * socket was left as it was (a long path, an RTT not known yet, rmem_max
 * too small), -errno when TCP_INFO or SO_RCVBUF failed. */
int uiw_tcp_short_path_rcvbuf(int fd);

/* The TCP stream's sendv and recvv on a connected socket fd, for a stream
 * that keeps the kernel socket underneath (TLS records sealed by the
 * kernel, kTLS): non-blocking, at most 1024 iovecs a call, EINTR retried.
 * sendv returns the bytes taken (> 0), -EAGAIN, or -errno (-EPIPE,
 * -ECONNRESET; MSG_NOSIGNAL). recvv returns the bytes read, 0 at the end
 * of the stream, -EAGAIN, or -errno; control (may be NULL) takes the
 * ancillary data, *control_len bytes of room in, the length used out
 * (recvmsg(2) msg_control). */
ssize_t uiw_tcp_sendv(int fd, const struct iovec *iov, int n);
ssize_t uiw_tcp_recvv(int fd, const struct iovec *iov, int n, void *control, size_t *control_len);

/* silent_ms of a stream on socket fd (see uiw_stream_ops): for an
 * IPPROTO_MPTCP socket that did not fall back, the least over its subflows
 * of tcpi_last_data_recv and tcpi_last_ack_recv (getsockopt SOL_MPTCP
 * MPTCP_TCPINFO, linux/mptcp.h; a connection with no subflow left is
 * INT_MAX: silent); anything else -EOPNOTSUPP, or -errno from
 * getsockopt. */
int uiw_tcp_silent_ms(int fd);

/* ------------------------------------------------------------------ TLS */

/* UIWARP_TLS (docs/configuration.md). off: plain MPA only. on: a client
 * speaks TLS; a listener takes TLS and plain peers (by the first byte).
 * required: as on, and a listener refuses plain peers. */
enum uiw_tls_mode { UIW_TLS_OFF = 0, UIW_TLS_ON, UIW_TLS_REQUIRED };

/* TLS settings of the process (strings owned by the caller, for the
 * process's lifetime: the first handshake of each side builds its OpenSSL
 * context from them). */
struct uiw_tls_opts {
	enum uiw_tls_mode mode;
	const char *cert;	  /* PEM certificate chain file, NULL for none */
	const char *key;	  /* PEM private key file (NULL: in cert) */
	const char *ca;		  /* PEM CA file that verifies the peer (NULL: the
				   * system's, client side; no client check, server) */
	const char *peer_name;	  /* client: the name the server's certificate
				   * must carry (RFC 6125), NULL for any */
	const char *ciphers;	  /* TLS 1.3 suites (SSL_CTX_set_ciphersuites), NULL default */
	const char *psk_identity; /* external PSK identity (NULL: "uiwarp") */
	uint8_t psk[64];	  /* external PSK (RFC 8446 §2.2), psk_len bytes */
	int psk_len;		  /* 0: no PSK */
	bool no_ktls;		  /* never hand the keys to the kernel (kTLS) */
};

/* The TLS 1.3 handshake as client on the connected stream *s (a TCP
 * stream of uiw_stream_tcp), blocking up to timeout_ms (< 0: no limit),
 * before the MPA Request. On success *s is replaced by the TLS stream
 * (which owns the socket; the TCP stream is freed). Returns 0, or -errno
 * with *s unchanged (the caller still destroys it): -ETIMEDOUT, -ECONNRESET
 * (the peer closed: not a TLS peer?), -EKEYREJECTED (the server's
 * certificate did not verify: its CA, its name, its dates), -ECONNREFUSED
 * (another handshake failure: the peer's alert, no common cipher, PSK
 * mismatch), -EINVAL (a certificate, key or CA file that does not load),
 * -ENOMEM. Logged (UIWARP_LOG=warn). After the handshake the keys go to
 * the kernel's TLS when it has it and o->no_ktls is not set (kTLS:
 * TCP_ULP "tls", SOL_TLS TLS_TX / TLS_RX; UIWARP_LOG=info says so); the
 * stream's operations are the same either way. RFC 8446. */
int uiw_tls_client(struct uiw_stream **s, const struct uiw_tls_opts *o, int timeout_ms);

/* The listener's side: with o->mode off does nothing; otherwise waits up
 * to timeout_ms for the peer's first byte and, when it starts a TLS
 * handshake record (0x16, RFC 8446 §5.1; an MPA Request starts with "M"),
 * runs the handshake as server and replaces *s as uiw_tls_client does.
 * Returns 0 (TLS or not: uiw_stream_is_tls says which) or -errno as
 * uiw_tls_client (-EKEYREJECTED: the client's certificate did not verify
 * against o->ca). */
int uiw_tls_accept(struct uiw_stream **s, const struct uiw_tls_opts *o, int timeout_ms);

/* Whether s is a TLS stream (uiw_tls_client / uiw_tls_accept made it). */
bool uiw_stream_is_tls(const struct uiw_stream *s);

/* --------------------------------------------- blocking helpers (setup) */

/* Waits until the stream can take bytes (POLLOUT) or has some (POLLIN,
 * or rx_buffered), at most timeout_ms (< 0: no limit). Returns the
 * revents (> 0), -ETIMEDOUT, or -errno. */
int uiw_stream_wait(struct uiw_stream *s, short events, int timeout_ms);

/* Sends every byte of iov[0..n), waiting for room, within timeout_ms
 * (< 0: no limit). Returns 0, -ETIMEDOUT, or -errno from the stream. */
int uiw_stream_send_all(struct uiw_stream *s, const struct iovec *iov, int n, int timeout_ms);

/* Reads exactly len bytes into buf within timeout_ms (< 0: no limit; the
 * bound covers the whole read). Returns 0, -ETIMEDOUT, -ECONNRESET (the
 * stream ended first) or -errno. Used for the MPA Request/Reply frames
 * (RFC 5044 §7.1), which must be read exactly. */
int uiw_stream_recv_exact(struct uiw_stream *s, void *buf, size_t len, int timeout_ms);

/* Receives up to the sum of iov[0..n) bytes, waiting at most timeout_ms
 * (< 0: no limit) for the first. Returns the count, 0 at end of stream,
 * -ETIMEDOUT or -errno. */
ssize_t uiw_stream_recv_wait(struct uiw_stream *s, const struct iovec *iov, int n, int timeout_ms);

#endif
