/* The byte stream as TLS 1.3 over a kernel TCP socket (OpenSSL), behind the
 * same operations as stream/tcp.c, so MPA and everything above it runs
 * unchanged on the decrypted bytes (docs/configuration.md, UIWARP_TLS).
 *
 * The handshake runs before the MPA Request (RFC 5044 §7.1), blocking with
 * a deadline, on the connected socket: uiw_tls_client on the initiator,
 * uiw_tls_accept on the listener's side, which looks at the first byte the
 * peer sent (a TLS record of type handshake, 0x16, or the "M" of "MPA ID
 * Req Frame") so one port serves TLS and plain peers (siw and RNICs never
 * speak TLS). After it the socket stays non-blocking and the engine waits
 * on it as on a TCP stream:
 *   - sendv SSL_write_ex's (one record of up to 16 KiB per call) each
 *     large piece of the gathered bytes from where it is and the small
 *     ones between through a 64 KiB staging buffer, topped up to a whole
 *     record with the head of the large piece that follows (so an FPDU's
 *     header costs no record of its own). The records are collected in a
 *     256 KiB buffer under the BIO and go to the socket with one send()
 *     per buffer, not one per record (a 64 KiB FPDU is four records);
 *     what the socket does not take stays there and goes first at the
 *     next call. The plaintext of records not wholly in the socket is
 *     not reported as accepted: the caller offers those bytes again (it
 *     must: the engine waits for POLLOUT and re-offers the rest of its
 *     batch), and the next call skips them once their records are out,
 *     so nothing is encrypted twice and nothing stays behind without a
 *     caller to send it.
 *   - recvv SSL_read_ex's until the caller's buffers are full or OpenSSL
 *     wants to read (read-ahead on: one read() takes up to 128 KiB of
 *     records). OpenSSL asks for more only when what it holds is no whole
 *     record and the socket had nothing (EAGAIN), so after -EAGAIN the
 *     socket is dry and an edge-triggered waiter misses nothing; when the
 *     caller's buffers fill first, a later call takes the rest (a short
 *     read is never taken for a dry stream). rx_buffered is SSL_pending,
 *     the plaintext decrypted ahead of the reader.
 *   - Only bytes of records that authenticated (AES-GCM / ChaCha20-Poly1305
 *     tags) reach the caller; a record that fails gives -EBADMSG and the
 *     connection ends (the QP goes to ERR, its WRs flushed).
 * The receive and send sides of a QP run in different threads; one SSL
 * object is not safe for concurrent SSL_read and SSL_write, so each call
 * holds the stream's mutex (per batch of FPDUs, not per FPDU).
 * Where the kernel has TLS (kTLS, CONFIG_TLS) the keys go to it after the
 * handshake (ktls_try) and sendv / recvv become sendmsg / recvmsg on the
 * socket: the kernel seals and opens the records (docs/design.md "TLS").
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <linux/tls.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stream/stream.h"
#include "util/log.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif
#ifndef SOL_TLS
#define SOL_TLS 282
#endif
/* TLS 1.3 content types (RFC 8446 §5.1) */
#define TLS_CT_ALERT 21
#define TLS_CT_APPDATA 23

/* Bytes gathered into one staging buffer (SSL_write_ex cuts 16 KiB records). */
#define TLS_STAGE (64 * 1024)
/* OpenSSL's read buffer with read-ahead (bytes). */
#define TLS_READ_BUF (128 * 1024)
/* A piece of an iovec this long or longer is encrypted in place, not staged. */
#define TLS_DIRECT 4096
/* The largest TLS 1.3 record's plaintext (RFC 8446 §5.1). */
#define TLS_RECORD 16384
/* The largest record on the wire: header, plaintext, content type,
 * padding and AEAD tag (RFC 8446 §5.2: at most 2^14 + 256 after the
 * 5-byte header). */
#define TLS_RECORD_WIRE (5 + TLS_RECORD + 256)
/* Records collected for one send() (bytes of ciphertext). */
#define TLS_OUT (256 * 1024)
/* Data records the collection tracks at once (see struct tls_out). */
#define TLS_OUT_RECS 64
/* The first byte of a TLS record that carries a handshake (RFC 8446 §5.1). */
#define TLS_CT_HANDSHAKE 0x16

/* Records on their way to the socket. sendv has OpenSSL write its records
 * here and sends them with one send() per TLS_OUT bytes, not one per
 * record (a 64 KiB FPDU is four records). What the socket did not take
 * stays here, sent first by the next call; the plaintext of the data
 * records not wholly sent (held) was not reported as accepted, so the
 * caller offers those bytes again and the next call, once this buffer is
 * out, skips them instead of encrypting them twice. */
struct tls_out {
	uint8_t *buf;	  /* TLS_OUT bytes */
	size_t head, len; /* unsent ciphertext: buf[head, head + len) */
	uint64_t queued;  /* bytes ever appended */
	uint64_t sent;	  /* bytes ever sent */
	bool collect;	  /* sendv is writing: append, do not send */
	size_t held;	  /* plaintext of the last sendv not reported */
	int nrec, rec0;	  /* data records not yet wholly sent (a ring) */
	struct {
		uint64_t end; /* queued at the end of the record */
		size_t plain; /* its plaintext bytes */
	} rec[TLS_OUT_RECS];
};

/* What the socket BIO below OpenSSL needs: the descriptor, whether the
 * peer's FIN was read (BIO_CTRL_EOF), and the records collected for it. */
struct tls_sock {
	int fd;
	bool eof;
	struct tls_out out;
};

struct tls_stream {
	struct uiw_stream base; /* first: the ops see a struct uiw_stream */
	SSL *ssl;
	pthread_mutex_t lock; /* SSL_read / SSL_write / SSL_pending / SSL_shutdown */
	uint8_t *stage;	      /* TLS_STAGE bytes */
	struct tls_sock sock; /* the BIO's */
	/* kTLS: the kernel's TLS does the records of that direction (the
	 * socket is then read / written as a TCP socket) */
	bool ktls_tx, ktls_rx;
	/* the handshake's traffic secrets (RFC 8446 §7.1), kept from
	 * OpenSSL's key log only until kTLS has the keys: [0] the
	 * client's, [1] the server's */
	bool want_ktls;
	uint8_t secret[2][64];
	size_t secret_len[2];
};

/* ------------------------------------------------ the socket under TLS */

/* Sends what k->out holds until it is empty or the socket is full.
 * Returns 0 (everything or part sent, or nothing: the socket is full) or
 * -errno of a socket that failed (-EPIPE, -ECONNRESET, ...). */
static int out_flush(struct tls_sock *k)
{
	struct tls_out *o = &k->out;
	int rc = 0;
	while (o->len) {
		ssize_t r = send(k->fd, o->buf + o->head, o->len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				rc = -errno;
			break;
		}
		o->head += (size_t)r;
		o->len -= (size_t)r;
		o->sent += (uint64_t)r;
	}
	if (!o->len)
		o->head = 0;
	/* the data records wholly sent are no longer held back */
	while (o->nrec && o->rec[o->rec0].end <= o->sent) {
		o->rec0 = (o->rec0 + 1) % TLS_OUT_RECS;
		o->nrec--;
	}
	return rc;
}

/* Whether k->out takes one more record of data without a send. */
static bool out_room(const struct tls_out *o)
{
	return o->nrec < TLS_OUT_RECS && TLS_OUT - o->len >= TLS_RECORD_WIRE;
}

/* Appends len bytes OpenSSL wrote to k->out (moving what is unsent to the
 * front first when the tail is short). Returns false when they do not
 * fit. */
static bool out_append(struct tls_out *o, const void *data, size_t len)
{
	if (TLS_OUT - o->head - o->len < len && o->head) {
		memmove(o->buf, o->buf + o->head, o->len);
		o->head = 0;
	}
	if (TLS_OUT - o->len < len)
		return false;
	memcpy(o->buf + o->head + o->len, data, len);
	o->len += len;
	o->queued += len;
	return true;
}

/* OpenSSL's own socket BIO writes with write(): a peer that is gone would
 * raise SIGPIPE in the application (a library must not; uiwarp's TCP
 * stream sends with MSG_NOSIGNAL). This BIO sends with MSG_NOSIGNAL and
 * receives with recv, non-blocking, and says "retry" on EAGAIN / EINTR.
 * Within sendv it collects the records in k->out instead (sendv sends
 * them); outside it (a handshake, close_notify) it sends at once, behind
 * whatever k->out still holds. */
static int sock_write(BIO *b, const char *data, size_t len, size_t *written)
{
	struct tls_sock *k = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	if (k->out.collect || k->out.len) {
		if (!k->out.collect && out_flush(k) < 0)
			return 0;
		if (k->out.collect || k->out.len) {
			if (!out_append(&k->out, data, len)) {
				BIO_set_retry_write(b);
				return 0;
			}
			if (!k->out.collect)
				(void)out_flush(k);
			*written = len;
			return 1;
		}
	}
	ssize_t r = send(k->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			BIO_set_retry_write(b);
		return 0;
	}
	*written = (size_t)r;
	return 1;
}

static int sock_read(BIO *b, char *data, size_t len, size_t *readbytes)
{
	struct tls_sock *k = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	ssize_t r = recv(k->fd, data, len, MSG_DONTWAIT);
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			BIO_set_retry_read(b);
		return 0;
	}
	if (r == 0) {
		k->eof = true;
		return 0;
	}
	*readbytes = (size_t)r;
	return 1;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	struct tls_sock *k = BIO_get_data(b);
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_EOF:
		return k && k->eof;
	default:
		return 0;
	}
}

static BIO_METHOD *sock_method;

static void sock_method_make(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "uiwarp socket");
	if (m && BIO_meth_set_write_ex(m, sock_write) && BIO_meth_set_read_ex(m, sock_read) &&
	    BIO_meth_set_ctrl(m, sock_ctrl))
		sock_method = m;
	else
		BIO_meth_free(m);
}

/* A BIO over t->sock (set up by the caller), or NULL. */
static BIO *sock_bio(struct tls_stream *t)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, sock_method_make);
	BIO *b = sock_method ? BIO_new(sock_method) : NULL;
	if (b) {
		BIO_set_data(b, &t->sock);
		BIO_set_init(b, 1);
	}
	return b;
}

static struct tls_stream *tls_of(struct uiw_stream *s)
{
	return (struct tls_stream *)s;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The reason of OpenSSL's oldest queued error into buf ("" if none); clears
 * the thread's error queue. */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();
	buf[0] = 0;
	if (e)
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

/* An SSL_read / SSL_write failure as -errno: -EAGAIN when the socket has no
 * room or bytes now, -EBADMSG for a record that failed authentication or
 * any other TLS protocol error, the socket's errno otherwise. Logs what
 * failed (UIWARP_LOG=warn). Caller holds t->lock. */
static int ssl_errno(struct tls_stream *t, int ret, const char *op)
{
	int e = SSL_get_error(t->ssl, ret);
	int err = errno;
	char why[256];
	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		return err ? -err : -ECONNRESET;
	default:
		ssl_reason(why, sizeof(why));
		if (uiw_log_on(UIW_LOG_WARN)) {
			char tup[128];
			uiw_log(UIW_LOG_WARN, uiw_log_tuple(t->base.fd, tup, sizeof(tup)),
				"TLS %s failed: %s", op, why[0] ? why : "protocol error");
		}
		return -EBADMSG;
	}
}

/* Copies k bytes of iov[*i] from *at to the staging buffer at len, moves
 * (*i, *at) past them; returns the staged length. */
static size_t stage_take(struct tls_stream *t, size_t len, const struct iovec *iov, int *i,
			 size_t *at, size_t k)
{
	memcpy(t->stage + len, (const uint8_t *)iov[*i].iov_base + *at, k);
	*at += k;
	if (*at == iov[*i].iov_len) {
		(*i)++;
		*at = 0;
	}
	return len + k;
}

/* Moves (*i, *at) k bytes further through iov. */
static void iov_skip(const struct iovec *iov, int n, int *i, size_t *at, size_t k)
{
	while (k && *i < n) {
		size_t m = iov[*i].iov_len - *at;
		if (k < m) {
			*at += k;
			return;
		}
		k -= m;
		(*i)++;
		*at = 0;
	}
}

/* Has OpenSSL encrypt len bytes at p, one record (TLS_RECORD) per call,
 * into t->sock.out, sending it whenever it has no room for another
 * record. Returns the bytes encrypted (< len when the socket is full), or
 * -errno. */
static ssize_t encrypt_out(struct tls_stream *t, const uint8_t *p, size_t len)
{
	struct tls_out *o = &t->sock.out;
	size_t off = 0;
	while (off < len) {
		if (!out_room(o)) {
			int r = out_flush(&t->sock);
			if (r < 0)
				return r;
			if (!out_room(o))
				break;
		}
		size_t w = 0, k = len - off < TLS_RECORD ? len - off : TLS_RECORD;
		if (!SSL_write_ex(t->ssl, p + off, k, &w)) {
			int r = ssl_errno(t, 0, "write");
			if (r == -EAGAIN || r == 0)
				break;
			return r;
		}
		int j = (o->rec0 + o->nrec++) % TLS_OUT_RECS;
		o->rec[j].end = o->queued;
		o->rec[j].plain = w;
		off += w;
	}
	return (ssize_t)off;
}

/* sendv: see stream/stream.h. A piece of at least TLS_DIRECT bytes (an
 * FPDU's payload) is encrypted straight from the caller's memory; the small
 * pieces between (headers, pad, CRC) are gathered into the staging buffer
 * first, with the head of the next large piece up to a whole record.
 * Record boundaries follow from the bytes offered. The records go to the
 * socket together (t->sock.out), one send() per TLS_OUT bytes; the
 * plaintext of records the socket did not wholly take is not reported as
 * accepted (the caller offers it again, and the next call skips it once
 * those records are out). t->lock held. */
static ssize_t sendv_locked(struct tls_stream *t, const struct iovec *iov, int n)
{
	struct tls_out *o = &t->sock.out;
	size_t done = 0, at = 0; /* bytes of iov[i] already taken */
	int i = 0;

	/* first what the last call left: its held plaintext is the head of
	 * what is offered again */
	int rc = out_flush(&t->sock);
	if (rc < 0)
		return rc;
	if (o->len)
		return -EAGAIN;
	if (o->held) {
		size_t total = 0;
		for (int j = 0; j < n; j++)
			total += iov[j].iov_len;
		done = o->held < total ? o->held : total;
		o->held -= done;
		iov_skip(iov, n, &i, &at, done);
	}

	o->collect = true;
	while (i < n) {
		const uint8_t *p = (const uint8_t *)iov[i].iov_base + at;
		size_t len = iov[i].iov_len - at;
		if (len >= TLS_DIRECT) {
			i++;
			at = 0;
		} else {
			len = 0;
			while (i < n && len < TLS_STAGE && iov[i].iov_len - at < TLS_DIRECT) {
				size_t k = iov[i].iov_len - at;
				if (k > TLS_STAGE - len)
					k = TLS_STAGE - len;
				len = stage_take(t, len, iov, &i, &at, k);
			}
			/* the small pieces alone would make a record of a few
			 * bytes (an FPDU's header and the pad before it): the
			 * head of the large piece that follows fills it up to a
			 * whole record, and the rest of that piece is encrypted
			 * from where it is in whole records */
			if (i < n && len % TLS_RECORD) {
				size_t rest = iov[i].iov_len - at;
				size_t fill = TLS_RECORD - len % TLS_RECORD;
				if (fill >= rest || rest - fill < TLS_DIRECT)
					fill = rest; /* no small tail left behind */
				if (fill > TLS_STAGE - len)
					fill = TLS_STAGE - len;
				len = stage_take(t, len, iov, &i, &at, fill);
			}
			p = t->stage;
		}
		ssize_t w = encrypt_out(t, p, len);
		if (w < 0) {
			rc = (int)w;
			break;
		}
		done += (size_t)w;
		if ((size_t)w < len)
			break; /* the socket is full: the rest is offered again */
	}
	o->collect = false;
	if (rc == 0)
		rc = out_flush(&t->sock);
	if (rc < 0 && !done)
		return rc;
	/* the data records not wholly sent: offered again. Something else
	 * left unsent with no data of its own behind it (a record OpenSSL
	 * wrote on its own) holds back one byte, so the caller comes back
	 * to send it. */
	size_t held = 0;
	for (int j = 0; j < o->nrec; j++)
		held += o->rec[(o->rec0 + j) % TLS_OUT_RECS].plain;
	if (!held && !o->held && o->len && done)
		held = 1;
	if (held > done)
		held = done; /* cannot happen: records come from this call */
	o->held += held;     /* what an offer shorter than the last one left */
	done -= held;
	return done ? (ssize_t)done : -EAGAIN;
}

/* recvv when the kernel does the records (kTLS): the TCP stream's, with
 * room for the record type the kernel reports. A record of another type
 * than application data (RFC 8446 §5.1) ends the stream: an alert (the
 * peer's close_notify: 0; any other: -ECONNRESET), a handshake message
 * (a KeyUpdate, which the kernel cannot follow: -EPROTO). (sendv is the
 * TCP stream's: the kernel makes application data records of it.) */
static ssize_t ktls_recvv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(unsigned char))];
	} c;
	size_t clen = sizeof(c.buf);
	ssize_t r = uiw_tcp_recvv(s->fd, iov, n, c.buf, &clen);
	if (r < 0 && r != -EAGAIN && uiw_log_on(UIW_LOG_WARN)) {
		char tup[128];
		uiw_log(UIW_LOG_WARN, uiw_log_tuple(s->fd, tup, sizeof(tup)),
			"TLS read failed (kTLS): %s",
			r == -EBADMSG ? "bad record mac" : strerror((int)-r));
	}
	struct msghdr m = {.msg_control = c.buf, .msg_controllen = clen};
	struct cmsghdr *h = r > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (!h || h->cmsg_level != SOL_TLS || h->cmsg_type != TLS_GET_RECORD_TYPE ||
	    *CMSG_DATA(h) == TLS_CT_APPDATA)
		return r;
	unsigned char type = *CMSG_DATA(h);
	const uint8_t *a = iov[0].iov_base;
	if (type == TLS_CT_ALERT && r >= 2 && iov[0].iov_len >= 2 && a[1] == 0)
		return 0; /* close_notify */
	if (uiw_log_on(UIW_LOG_WARN)) {
		char tup[128];
		uiw_log(UIW_LOG_WARN, uiw_log_tuple(s->fd, tup, sizeof(tup)),
			"TLS (kTLS): a record of type %u from the peer (%s)", type,
			type == TLS_CT_ALERT ? "an alert" : "not application data");
	}
	return type == TLS_CT_ALERT ? -ECONNRESET : -EPROTO;
}

static ssize_t tls_sendv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	struct tls_stream *t = tls_of(s);
	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;
	if (t->ktls_tx)
		return uiw_tcp_sendv(s->fd, iov, n);
	pthread_mutex_lock(&t->lock);
	ssize_t r = sendv_locked(t, iov, n);
	pthread_mutex_unlock(&t->lock);
	return r;
}

/* recvv: see stream/stream.h. Reads until iov is full or nothing is left. */
static ssize_t tls_recvv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	struct tls_stream *t = tls_of(s);
	size_t got = 0;
	ssize_t rc = 0;

	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;
	if (t->ktls_rx)
		return ktls_recvv(s, iov, n);
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < n; i++) {
		size_t at = 0;
		while (at < iov[i].iov_len) {
			size_t r = 0;
			int ok = SSL_read_ex(t->ssl, (uint8_t *)iov[i].iov_base + at,
					     iov[i].iov_len - at, &r);
			if (ok) {
				at += r;
				continue;
			}
			rc = ssl_errno(t, ok, "read");
			got += at;
			goto out;
		}
		got += at;
	}
out:
	pthread_mutex_unlock(&t->lock);
	if (got)
		return (ssize_t)got;
	return rc; /* -EAGAIN, 0 (close_notify or FIN), or -errno */
}

static size_t tls_rx_buffered(struct uiw_stream *s)
{
	struct tls_stream *t = tls_of(s);
	if (t->ktls_rx)
		return 0;
	pthread_mutex_lock(&t->lock);
	int p = SSL_pending(t->ssl);
	pthread_mutex_unlock(&t->lock);
	return p > 0 ? (size_t)p : 0;
}

/* emss: the TCP socket's (uiw_tcp_emss). MPA frames the plaintext; the
 * records around it are the stream's business. */
static int tls_emss(struct uiw_stream *s)
{
	return uiw_tcp_emss(s->fd);
}

/* silent_ms: the socket's (uiw_tcp_silent_ms). */
static int tls_silent_ms(struct uiw_stream *s)
{
	return uiw_tcp_silent_ms(s->fd);
}

/* close_notify (best effort: a full socket drops it), then TCP FIN. */
static void tls_shutdown_send(struct uiw_stream *s)
{
	struct tls_stream *t = tls_of(s);
	if (t->ktls_tx) {
		/* close_notify as a record of type alert (RFC 8446 §6.1) */
		union {
			struct cmsghdr align;
			char buf[CMSG_SPACE(sizeof(unsigned char))];
		} c;
		unsigned char alert[2] = {1, 0}; /* warning, close_notify */
		struct iovec v = {alert, sizeof(alert)};
		struct msghdr m = {.msg_iov = &v,
				   .msg_iovlen = 1,
				   .msg_control = c.buf,
				   .msg_controllen = sizeof(c.buf)};
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_TLS;
		h->cmsg_type = TLS_SET_RECORD_TYPE;
		h->cmsg_len = CMSG_LEN(sizeof(unsigned char));
		*CMSG_DATA(h) = TLS_CT_ALERT;
		(void)sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		(void)shutdown(s->fd, SHUT_WR);
		return;
	}
	pthread_mutex_lock(&t->lock);
	(void)SSL_shutdown(t->ssl);
	ERR_clear_error();
	pthread_mutex_unlock(&t->lock);
	(void)shutdown(s->fd, SHUT_WR);
}

static void tls_abort(struct uiw_stream *s)
{
	(void)shutdown(s->fd, SHUT_RDWR);
}

static void tls_destroy(struct uiw_stream *s)
{
	if (!s)
		return;
	struct tls_stream *t = tls_of(s);
	SSL_free(t->ssl);
	pthread_mutex_destroy(&t->lock);
	if (s->fd >= 0)
		(void)close(s->fd);
	free(t->sock.out.buf);
	free(t->stage);
	free(t);
}

static const struct uiw_stream_ops tls_ops = {
    .sendv = tls_sendv,
    .recvv = tls_recvv,
    .rx_buffered = tls_rx_buffered,
    .emss = tls_emss,
    .rx_lowat = NULL, /* SO_RCVLOWAT counts ciphertext: not used */
    .silent_ms = tls_silent_ms,
    .shutdown_send = tls_shutdown_send,
    .abort = tls_abort,
    .destroy = tls_destroy,
};

/* ----------------------------------------------------------------- kTLS */

/* OpenSSL's key log (SSL_CTX_set_keylog_callback): keeps the two
 * application traffic secrets of a stream that will hand them to the
 * kernel ("CLIENT_TRAFFIC_SECRET_0 <client random> <secret>" in hex, the
 * NSS key log format). */
static void keylog_cb(const SSL *ssl, const char *line)
{
	struct tls_stream *t = SSL_get_app_data(ssl);
	static const char *const label[2] = {"CLIENT_TRAFFIC_SECRET_0 ",
					     "SERVER_TRAFFIC_SECRET_0 "};
	if (!t || !t->want_ktls)
		return;
	for (int k = 0; k < 2; k++) {
		if (strncmp(line, label[k], strlen(label[k])))
			continue;
		size_t n = 0;
		if (OPENSSL_hexstr2buf_ex(t->secret[k], sizeof(t->secret[k]), &n,
					  strrchr(line, ' ') + 1, '\0') == 1)
			t->secret_len[k] = n;
	}
}

/* HKDF-Expand-Label(secret, label, "", len) of RFC 8446 §7.1 with the
 * suite's hash md into out: OpenSSL's TLS13-KDF, expand only. Returns 0
 * or -1. */
static int hkdf_expand_label(const char *md, const uint8_t *secret, size_t slen, const char *label,
			     uint8_t *out, size_t len)
{
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_TLS1_3_KDF, NULL);
	EVP_KDF_CTX *k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	EVP_KDF_free(kdf);
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	OSSL_PARAM p[] = {
	    OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
	    OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)md, 0),
	    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret, slen),
	    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX, "tls13 ", 6),
	    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL, (void *)label, strlen(label)),
	    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_DATA, "", 0),
	    OSSL_PARAM_construct_end(),
	};
	int ok = k && EVP_KDF_derive(k, out, len, p) == 1;
	EVP_KDF_CTX_free(k);
	return ok ? 0 : -1;
}

/* The kernel's crypto parameters for one direction (linux/tls.h). */
union ktls_info {
	struct tls_crypto_info info;
	struct tls12_crypto_info_aes_gcm_128 g128;
	struct tls12_crypto_info_aes_gcm_256 g256;
	struct tls12_crypto_info_chacha20_poly1305 cc;
};

/* Fills u for the suite id (0x1301..0x1303) from a traffic secret: the
 * write key and IV (RFC 8446 §7.3), the record sequence number 0 (no
 * application data record has gone either way yet). Returns its size, or
 * 0 for a suite the kernel does not take. */
static socklen_t ktls_info_make(union ktls_info *u, uint16_t id, const char *md,
				const uint8_t *secret, size_t slen)
{
	uint8_t key[32], iv[12];
	size_t klen = id == 0x1301 ? 16 : 32;
	socklen_t size = 0;
	memset(u, 0, sizeof(*u));
	if ((id != 0x1301 && id != 0x1302 && id != 0x1303) ||
	    hkdf_expand_label(md, secret, slen, "key", key, klen) ||
	    hkdf_expand_label(md, secret, slen, "iv", iv, sizeof(iv)))
		return 0;
	u->info.version = TLS_1_3_VERSION;
	if (id == 0x1301) {
		u->info.cipher_type = TLS_CIPHER_AES_GCM_128;
		memcpy(u->g128.key, key, 16);
		memcpy(u->g128.salt, iv, 4);
		memcpy(u->g128.iv, iv + 4, 8);
		size = sizeof(u->g128);
	} else if (id == 0x1302) {
		u->info.cipher_type = TLS_CIPHER_AES_GCM_256;
		memcpy(u->g256.key, key, 32);
		memcpy(u->g256.salt, iv, 4);
		memcpy(u->g256.iv, iv + 4, 8);
		size = sizeof(u->g256);
	} else {
		u->info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
		memcpy(u->cc.key, key, 32);
		memcpy(u->cc.iv, iv, 12);
		size = sizeof(u->cc);
	}
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(iv, sizeof(iv));
	return size;
}

/* After the handshake: hands the keys to the kernel's TLS (kTLS) when it
 * has it (setsockopt TCP_ULP "tls"; this needs CONFIG_TLS, and its module
 * loads on first use), so records are sealed and opened in the kernel and
 * the socket is read and written as a TCP socket from then on. Each
 * direction separately: one the kernel refuses stays with OpenSSL. Nothing
 * is handed over when OpenSSL already holds bytes past the handshake (it
 * read no further: read-ahead is off until here). Returns a word for the
 * log ("tx+rx", "tx", "rx", or why not). */
static const char *ktls_try(struct tls_stream *t, int server, char *why, size_t wlen)
{
	int fd = t->sock.fd;
	const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);
	const EVP_MD *md = c ? SSL_CIPHER_get_handshake_digest(c) : NULL;
	uint16_t id = c ? (uint16_t)(SSL_CIPHER_get_id(c) & 0xffff) : 0;
	const char *res = why;

	if (!t->secret_len[0] || !t->secret_len[1] || !md) {
		snprintf(why, wlen, "off (no traffic secrets)");
		goto out;
	}
	if (SSL_has_pending(t->ssl)) {
		snprintf(why, wlen, "off (bytes read past the handshake)");
		goto out;
	}
	if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls"))) {
		snprintf(why, wlen, "not in this kernel (TCP_ULP tls: %s)", strerror(errno));
		goto out;
	}
	union ktls_info u;
	const char *mdn = EVP_MD_get0_name(md);
	/* ours to send with: the server's secret on the server */
	socklen_t n = ktls_info_make(&u, id, mdn, t->secret[server], t->secret_len[server]);
	if (n && !setsockopt(fd, SOL_TLS, TLS_TX, &u, n))
		t->ktls_tx = true;
	int etx = errno;
	n = ktls_info_make(&u, id, mdn, t->secret[!server], t->secret_len[!server]);
	if (n && !setsockopt(fd, SOL_TLS, TLS_RX, &u, n))
		t->ktls_rx = true;
	int erx = errno;
	OPENSSL_cleanse(&u, sizeof(u));
	if (t->ktls_tx && t->ktls_rx)
		res = "tx+rx";
	else if (t->ktls_tx || t->ktls_rx)
		snprintf(why, wlen, "%s only (%s: %s)", t->ktls_tx ? "tx" : "rx",
			 t->ktls_tx ? "rx" : "tx", n ? strerror(t->ktls_tx ? erx : etx) : "suite");
	else
		snprintf(why, wlen, "off (%s)", n ? strerror(etx) : "suite not in the kernel");
out:
	OPENSSL_cleanse(t->secret, sizeof(t->secret));
	t->want_ktls = false;
	return res;
}

/* ------------------------------------------------------------- contexts */

/* One client and one server context per process, made on first use from
 * the options of that first call (the process's configuration). */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *ctx_made[2];
static const struct uiw_tls_opts *psk_opts[2];

static unsigned int psk_client_cb(SSL *ssl, const char *hint, char *identity,
				  unsigned int max_identity_len, unsigned char *psk,
				  unsigned int max_psk_len)
{
	(void)ssl;
	(void)hint;
	const struct uiw_tls_opts *o = psk_opts[0];
	if (!o || o->psk_len <= 0 || (unsigned int)o->psk_len > max_psk_len)
		return 0;
	const char *id = o->psk_identity ? o->psk_identity : "uiwarp";
	if (strlen(id) + 1 > max_identity_len)
		return 0;
	memcpy(identity, id, strlen(id) + 1);
	memcpy(psk, o->psk, (size_t)o->psk_len);
	return (unsigned int)o->psk_len;
}

static unsigned int psk_server_cb(SSL *ssl, const char *identity, unsigned char *psk,
				  unsigned int max_psk_len)
{
	(void)ssl;
	const struct uiw_tls_opts *o = psk_opts[1];
	const char *id = o && o->psk_identity ? o->psk_identity : "uiwarp";
	if (!o || o->psk_len <= 0 || (unsigned int)o->psk_len > max_psk_len || !identity ||
	    strcmp(identity, id) != 0)
		return 0;
	memcpy(psk, o->psk, (size_t)o->psk_len);
	return (unsigned int)o->psk_len;
}

/* The context for server (1) or client (0), or NULL with the reason
 * logged. */
static SSL_CTX *tls_ctx(const struct uiw_tls_opts *o, int server)
{
	char why[256];
	pthread_mutex_lock(&ctx_lock);
	SSL_CTX *c = ctx_made[server];
	if (c) {
		pthread_mutex_unlock(&ctx_lock);
		return c;
	}
	c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	const char *step = "SSL_CTX_new";
	if (!c)
		goto fail;
	step = "TLS 1.3 only";
	if (!SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION))
		goto fail;
	step = "UIWARP_TLS_CIPHERS";
	if (o->ciphers && *o->ciphers && !SSL_CTX_set_ciphersuites(c, o->ciphers))
		goto fail;
	SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* a TCP FIN without close_notify is the end of the stream; MPA's
	 * framing finds a stream cut inside an FPDU */
	SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET);
	/* read-ahead: one read() takes up to TLS_READ_BUF bytes of records,
	 * not two per record (header, then body) */
	SSL_CTX_set_read_ahead(c, 1);
	SSL_CTX_set_default_read_buffer_len(c, TLS_READ_BUF);
	SSL_CTX_set_keylog_callback(c, keylog_cb);
	if (server)
		(void)SSL_CTX_set_num_tickets(c, 0);
	if (o->cert && *o->cert) {
		step = "UIWARP_TLS_CERT";
		if (SSL_CTX_use_certificate_chain_file(c, o->cert) != 1)
			goto fail;
		step = "UIWARP_TLS_KEY";
		if (SSL_CTX_use_PrivateKey_file(c, o->key && *o->key ? o->key : o->cert,
						SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(c) != 1)
			goto fail;
	}
	step = "UIWARP_TLS_CA";
	if (o->ca && *o->ca) {
		if (SSL_CTX_load_verify_locations(c, o->ca, NULL) != 1)
			goto fail;
		/* a server with a CA asks for the client's certificate too */
		SSL_CTX_set_verify(
		    c, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
	} else if (!server) {
		/* a client always checks the server's certificate (a PSK
		 * handshake has none): the system's CAs without UIWARP_TLS_CA */
		if (SSL_CTX_set_default_verify_paths(c) != 1)
			goto fail;
		SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
	}
	if (o->psk_len > 0) {
		psk_opts[server] = o;
		if (server)
			SSL_CTX_set_psk_server_callback(c, psk_server_cb);
		else
			SSL_CTX_set_psk_client_callback(c, psk_client_cb);
	}
	ctx_made[server] = c;
	pthread_mutex_unlock(&ctx_lock);
	return c;
fail:
	ssl_reason(why, sizeof(why));
	uiw_log(UIW_LOG_ERROR, NULL, "TLS: %s: %s", step, why[0] ? why : "failed");
	SSL_CTX_free(c);
	pthread_mutex_unlock(&ctx_lock);
	return NULL;
}

/* ------------------------------------------------------------ handshake */

/* Runs the handshake on *s's socket (blocking until deadline) and, when it
 * completes, replaces *s by the TLS stream (which takes the socket over).
 * Returns 0 or -errno (see stream/stream.h). */
static int tls_handshake(struct uiw_stream **s, const struct uiw_tls_opts *o, int server,
			 int timeout_ms)
{
	int fd = (*s)->fd;
	SSL_CTX *c = tls_ctx(o, server);
	if (!c)
		return -EINVAL;
	struct tls_stream *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->stage = malloc(TLS_STAGE);
	t->sock.out.buf = malloc(TLS_OUT);
	t->ssl = SSL_new(c);
	t->sock.fd = fd;
	BIO *bio = t->ssl ? sock_bio(t) : NULL;
	if (bio)
		SSL_set_bio(t->ssl, bio, bio); /* the SSL owns it from here */
	if (!t->stage || !t->sock.out.buf || !t->ssl || !bio) {
		SSL_free(t->ssl);
		free(t->sock.out.buf);
		free(t->stage);
		free(t);
		return -ENOMEM;
	}
	if (!server && o->peer_name && *o->peer_name) {
		/* RFC 6125: the server's certificate must name peer_name */
		(void)SSL_set_tlsext_host_name(t->ssl, o->peer_name);
		(void)SSL_set1_host(t->ssl, o->peer_name);
	}
	pthread_mutex_init(&t->lock, NULL);
	/* kTLS needs the traffic secrets and nothing read past the
	 * handshake */
	t->want_ktls = !o->no_ktls;
	SSL_set_app_data(t->ssl, t);
	if (t->want_ktls)
		SSL_set_read_ahead(t->ssl, 0);
	int64_t deadline = now_ms() + (timeout_ms >= 0 ? timeout_ms : INT_MAX);
	int rc = 0;
	char why[256];
	for (;;) {
		int r = server ? SSL_accept(t->ssl) : SSL_connect(t->ssl);
		if (r == 1)
			break;
		int e = SSL_get_error(t->ssl, r);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			int64_t left = deadline - now_ms();
			if (left <= 0) {
				rc = -ETIMEDOUT;
				snprintf(why, sizeof(why), "no answer within %d ms", timeout_ms);
				break;
			}
			struct pollfd p = {.fd = fd,
					   .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};
			if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 &&
			    errno != EINTR) {
				rc = -errno;
				snprintf(why, sizeof(why), "poll: %s", strerror(errno));
				break;
			}
			continue;
		}
		long v = SSL_get_verify_result(t->ssl);
		if (e == SSL_ERROR_SYSCALL || (e == SSL_ERROR_SSL && ERR_peek_error() == 0)) {
			rc = errno ? -errno : -ECONNRESET;
			snprintf(why, sizeof(why), "the peer closed the connection (%s)%s",
				 strerror(-rc), server ? "" : "; not a TLS peer?");
			ERR_clear_error();
		} else if (v != X509_V_OK) {
			rc = -EKEYREJECTED;
			snprintf(why, sizeof(why), "the peer's certificate: %s",
				 X509_verify_cert_error_string(v));
			ERR_clear_error();
		} else {
			rc = -ECONNREFUSED;
			ssl_reason(why, sizeof(why));
		}
		break;
	}
	if (rc) {
		if (uiw_log_on(UIW_LOG_WARN)) {
			char tup[128];
			uiw_log(UIW_LOG_WARN, uiw_log_tuple(fd, tup, sizeof(tup)),
				"TLS handshake failed: %s", why);
		}
		SSL_free(t->ssl);
		pthread_mutex_destroy(&t->lock);
		OPENSSL_cleanse(t->secret, sizeof(t->secret));
		free(t->sock.out.buf);
		free(t->stage);
		free(t);
		return rc;
	}
	char kwhy[160];
	const char *k = "off (UIWARP_TLS_KTLS=0)";
	if (t->want_ktls)
		k = ktls_try(t, server, kwhy, sizeof(kwhy));
	if (!t->ktls_rx)
		SSL_set_read_ahead(t->ssl, 1);
	if (uiw_log_on(UIW_LOG_INFO)) {
		char tup[128];
		uiw_log(UIW_LOG_INFO, uiw_log_tuple(fd, tup, sizeof(tup)),
			"stream: %s, %s, kTLS %s", SSL_get_version(t->ssl),
			SSL_get_cipher_name(t->ssl), k);
	}
	t->base = **s;
	t->base.ops = &tls_ops;
	(*s)->fd = -1; /* the TLS stream owns the socket now */
	(*s)->ops->destroy(*s);
	*s = &t->base;
	return 0;
}

/* See stream/stream.h. */
int uiw_tls_client(struct uiw_stream **s, const struct uiw_tls_opts *o, int timeout_ms)
{
	if (!s || !*s || !o)
		return -EINVAL;
	return tls_handshake(s, o, 0, timeout_ms);
}

/* See stream/stream.h. */
int uiw_tls_accept(struct uiw_stream **s, const struct uiw_tls_opts *o, int timeout_ms)
{
	if (!s || !*s || !o)
		return -EINVAL;
	if (o->mode == UIW_TLS_OFF)
		return 0;
	int w = uiw_stream_wait(*s, POLLIN, timeout_ms);
	if (w < 0)
		return w;
	uint8_t first = 0;
	ssize_t r = recv((*s)->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	if (r == 0)
		return -ECONNRESET;
	if (first != TLS_CT_HANDSHAKE)
		return 0; /* a plain MPA peer: the caller decides (UIWARP_TLS=required) */
	return tls_handshake(s, o, 1, timeout_ms);
}

/* See stream/stream.h. */
bool uiw_stream_is_tls(const struct uiw_stream *s)
{
	return s && s->ops == &tls_ops;
}
