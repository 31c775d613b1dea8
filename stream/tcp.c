/* The byte stream as a kernel TCP socket (RFC 5044 §2: the LLP), and the
 * TCP socket calls of connection setup (connect, listen, options).
 *
 * The socket is always non-blocking: sendv and recvv take or give what the
 * kernel has room or bytes for and say -EAGAIN otherwise; whoever drives
 * the stream waits for readiness on the descriptor. TCP_NODELAY is on, so a
 * batch of FPDUs goes out when it is handed over (the engine batches FPDUs
 * itself). abort() is shutdown(SHUT_RDWR): a thread waiting on the
 * descriptor wakes up, and the descriptor stays valid until destroy().
 *
 * With uiw_tcp_opts.mptcp the sockets are IPPROTO_MPTCP (RFC 8684): the
 * same calls, one byte stream over as many TCP subflows as the kernel's
 * path manager opens (`ip mptcp endpoint`, docs/wan.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mptcp.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "netlink/uiw_netlink.h"
#include "stream/stream.h"
#include "util/log.h"

/* Most iovecs handed to one sendmsg/recvmsg (the kernel's UIO_MAXIOV). */
#define TCP_IOV_MAX 1024
/* Consecutive EINTR before giving up (a bound; never reached in practice). */
#define TCP_MAX_EINTR 1000

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left before deadline (>= 0), or -1 when timeout_ms < 0. */
static int left_ms(int timeout_ms, int64_t deadline)
{
	if (timeout_ms < 0)
		return -1;
	int64_t left = deadline - now_ms();
	return left > 0 ? (int)(left > INT_MAX ? INT_MAX : left) : 0;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* sendv: see stream/stream.h. MSG_NOSIGNAL: a closed peer gives -EPIPE,
 * not SIGPIPE. */
static ssize_t tcp_sendv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	return uiw_tcp_sendv(s->fd, iov, n);
}

/* See stream/stream.h. */
ssize_t uiw_tcp_sendv(int fd, const struct iovec *iov, int n)
{
	struct msghdr msg = {0};

	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;
	msg.msg_iov = (struct iovec *)(uintptr_t)iov; /* sendmsg only reads the array */
	msg.msg_iovlen = (size_t)(n > TCP_IOV_MAX ? TCP_IOV_MAX : n);
	for (int i = 0; i < TCP_MAX_EINTR; i++) {
		ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r >= 0)
			return r == 0 && n > 0 ? -EAGAIN : r;
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	return -EINTR;
}

/* recvv: see stream/stream.h. */
static ssize_t tcp_recvv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	return uiw_tcp_recvv(s->fd, iov, n, NULL, NULL);
}

/* See stream/stream.h. */
ssize_t uiw_tcp_recvv(int fd, const struct iovec *iov, int n, void *control, size_t *control_len)
{
	struct msghdr msg = {0};

	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;
	msg.msg_iov = (struct iovec *)(uintptr_t)iov; /* recvmsg does not write the array */
	msg.msg_iovlen = (size_t)(n > TCP_IOV_MAX ? TCP_IOV_MAX : n);
	msg.msg_control = control;
	msg.msg_controllen = control_len ? *control_len : 0;
	for (int i = 0; i < TCP_MAX_EINTR; i++) {
		ssize_t r = recvmsg(fd, &msg, MSG_DONTWAIT);
		if (r >= 0 && control_len)
			*control_len = msg.msg_controllen;
		if (r >= 0)
			return r;
		if (errno != EINTR)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	return -EINTR;
}

/* seg_size: see stream/stream.h. */
static int tcp_seg_size(struct uiw_stream *s)
{
	int mss = 0;
	socklen_t len = sizeof(mss);
	if (getsockopt(s->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) < 0)
		return -errno;
	return mss;
}

static int tcp_emss(struct uiw_stream *s)
{
	return uiw_tcp_emss(s->fd);
}

static int tcp_silent_ms(struct uiw_stream *s)
{
	return uiw_tcp_silent_ms(s->fd);
}

static size_t tcp_rx_buffered(struct uiw_stream *s)
{
	(void)s;
	return 0;
}

/* emss (RFC 5044 §4.1: MULPDU comes from the EMSS): TCP_MAXSEG in bytes
 * (the kernel's current MSS, net of options), bounded by the payload one
 * segment can carry on the route's path MTU (rtnetlink RTM_GETROUTE toward
 * the peer from our address: a route's `mtu lock`, a learned PMTU or the
 * output interface's MTU) when that lookup works; silently TCP_MAXSEG alone
 * otherwise. UIWARP_LOG=debug says which bound won (util/log.h).
 * Returns the EMSS or -errno. (See stream/stream.h.) */
int uiw_tcp_emss(int fd)
{
	int mss = 0;
	socklen_t len = sizeof(mss);

	if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) < 0)
		return -errno;
	int maxseg = mss;
	unsigned int pmtu = 0, bound = 0;
	struct sockaddr_storage peer, self;
	socklen_t pl = sizeof(peer), sl = sizeof(self);
	if (getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 &&
	    getsockname(fd, (struct sockaddr *)&self, &sl) == 0 &&
	    (peer.ss_family == AF_INET || peer.ss_family == AF_INET6)) {
		struct uiw_nl_route rt;
		if (uiw_nl_route_get((struct sockaddr *)&peer, (struct sockaddr *)&self, &rt) ==
		    0) {
			pmtu = rt.path_mtu;
			bound = uiw_nl_tcp_payload_bound(pmtu, peer.ss_family);
			if (bound > 0 && bound < (unsigned int)mss)
				mss = (int)bound;
		}
	}
	if (uiw_log_on(UIW_LOG_DEBUG)) {
		char t[128];
		uiw_log(UIW_LOG_DEBUG, uiw_log_tuple(fd, t, sizeof(t)),
			"stream: EMSS %d from %s (TCP_MAXSEG %d, route path MTU %u -> "
			"segment payload bound %u)",
			mss, mss != maxseg ? "the route's path MTU" : "TCP_MAXSEG", maxseg, pmtu,
			bound);
	}
	return mss;
}

/* rx_lowat: see stream/stream.h. SO_RCVLOWAT: epoll and poll report
 * POLLIN when that many bytes are queued (or the receive buffer is under
 * pressure, or the stream ended), and setting it signals readiness at once
 * if the bytes are already there (tcp_set_rcvlowat), so no wake-up is
 * lost. */
static void tcp_rx_lowat(struct uiw_stream *s, int bytes)
{
	/* Linux (tcp_set_rcvlowat) grows the receive buffer to hold a low
	 * water mark larger than it and then clamps the receive window to the
	 * mark: the window stops autotuning at ~64 KiB and a long path runs at
	 * 64 KiB per RTT (a 20 ms path: 8 instead of 22 MiB/s with bbr). So
	 * the mark stays within a quarter of the buffer, which autotuning
	 * grows as the path needs (SO_RCVBUF, read again when a mark would
	 * pass the cap, at most every 64th time: not a syscall per FPDU on a
	 * socket whose buffer stays small). */
	if (bytes > s->rcvbuf / 4) {
		if (s->rcvbuf_recheck-- <= 0) {
			int rb = 0;
			socklen_t len = sizeof(rb);
			if (getsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &rb, &len) == 0)
				s->rcvbuf = rb;
			s->rcvbuf_recheck = 64;
		}
		if (bytes > s->rcvbuf / 4)
			bytes = s->rcvbuf / 4 > 1 ? s->rcvbuf / 4 : 1;
	}
	if (bytes == (s->lowat ? s->lowat : 1))
		return;
	if (setsockopt(s->fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) == 0)
		s->lowat = bytes;
}

static void tcp_shutdown_send(struct uiw_stream *s)
{
	(void)shutdown(s->fd, SHUT_WR);
}

static void tcp_abort(struct uiw_stream *s)
{
	(void)shutdown(s->fd, SHUT_RDWR);
}

static void tcp_destroy(struct uiw_stream *s)
{
	if (!s)
		return;
	if (s->fd >= 0)
		(void)close(s->fd);
	free(s);
}

static const struct uiw_stream_ops tcp_ops = {
    .sendv = tcp_sendv,
    .recvv = tcp_recvv,
    .rx_buffered = tcp_rx_buffered,
    .emss = tcp_emss,
    .seg_size = tcp_seg_size,
    .rx_lowat = tcp_rx_lowat,
    .silent_ms = tcp_silent_ms,
    .shutdown_send = tcp_shutdown_send,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
};

/* Logs msg once per process at level (the first caller's who). */
static void log_once(atomic_flag *said, int level, const char *who, const char *msg)
{
	if (!atomic_flag_test_and_set(said))
		uiw_log(level, who, "%s", msg);
}

/* True when fd is an IPPROTO_MPTCP socket (SO_PROTOCOL), fallback or not. */
static bool is_mptcp_socket(int fd)
{
	int proto = 0;
	socklen_t len = sizeof(proto);

	return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) == 0 && proto == IPPROTO_MPTCP;
}

/* A non-blocking stream socket of family: IPPROTO_MPTCP when mptcp and
 * the kernel has it, plain TCP otherwise (said once in the log: socket()
 * fails with EPROTONOSUPPORT without CONFIG_MPTCP, ENOPROTOOPT when
 * net.mptcp.enabled=0, EINVAL on old kernels). Returns it or -errno. */
static int stream_socket(int family, bool mptcp)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	int type = SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK;

	if (mptcp) {
		int fd = socket(family, type, IPPROTO_MPTCP);
		if (fd >= 0)
			return fd;
		if (errno != EPROTONOSUPPORT && errno != ENOPROTOOPT && errno != EINVAL)
			return -errno;
		char msg[160];
		snprintf(msg, sizeof(msg),
			 "stream: UIWARP_MPTCP: no Multipath TCP socket (%s: "
			 "net.mptcp.enabled=0 or no CONFIG_MPTCP); plain TCP",
			 strerror(errno));
		log_once(&said, UIW_LOG_WARN, NULL, msg);
	}
	int fd = socket(family, type, 0);
	return fd < 0 ? -errno : fd;
}

/* See stream/stream.h. */
int uiw_tcp_mptcp_state(int fd, int *subflows)
{
	struct mptcp_info mi;
	socklen_t len = sizeof(mi);
	int proto = 0;
	socklen_t pl = sizeof(proto);

	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) < 0)
		return -errno;
	if (proto != IPPROTO_MPTCP)
		return 0;
	memset(&mi, 0, sizeof(mi));
	/* a fallen-back socket passes SOL_MPTCP on to its one TCP subflow,
	 * which knows no such level (EOPNOTSUPP / ENOPROTOOPT) */
	if (getsockopt(fd, SOL_MPTCP, MPTCP_INFO, &mi, &len) < 0 ||
	    (mi.mptcpi_flags & MPTCP_INFO_FLAG_FALLBACK))
		return 0;
	if (subflows)
		*subflows = mi.mptcpi_subflows;
	return 1;
}

/* See stream/stream.h. */
int uiw_tcp_silent_ms(int fd)
{
	enum { MAX_SUBFLOWS = 8 };
	struct {
		struct mptcp_subflow_data d;
		struct tcp_info ti[MAX_SUBFLOWS];
	} b;
	socklen_t len = sizeof(b);

	if (!is_mptcp_socket(fd))
		return -EOPNOTSUPP;
	memset(&b, 0, sizeof(b));
	b.d.size_subflow_data = sizeof(b.d);
	b.d.size_user = sizeof(b.ti[0]);
	if (getsockopt(fd, SOL_MPTCP, MPTCP_TCPINFO, &b, &len) < 0)
		return errno == EOPNOTSUPP || errno == ENOPROTOOPT ? -EOPNOTSUPP : -errno;
	unsigned int n = b.d.num_subflows < MAX_SUBFLOWS ? b.d.num_subflows : MAX_SUBFLOWS;
	int quiet = INT_MAX;
	for (unsigned int i = 0; i < n; i++) {
		const struct tcp_info *t = &b.ti[i];
		unsigned int q = t->tcpi_last_data_recv < t->tcpi_last_ack_recv
				     ? t->tcpi_last_data_recv
				     : t->tcpi_last_ack_recv;
		if (q < (unsigned int)quiet)
			quiet = (int)q;
	}
	return quiet;
}

/* See stream/stream.h. */
struct uiw_stream *uiw_stream_tcp(int fd)
{
	int one = 1, fl;

	if (fd < 0) {
		errno = EBADF;
		return NULL;
	}
	struct uiw_stream *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	s->ops = &tcp_ops;
	s->fd = fd;
	return s;
}

/* net.core.rmem_max in bytes, read once (-1: not readable). */
static long rmem_max(void)
{
	static long v = -2;
	long cur = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (cur != -2)
		return cur;
	long r = -1;
	FILE *f = fopen("/proc/sys/net/core/rmem_max", "re");
	if (f) {
		if (fscanf(f, "%ld", &r) != 1)
			r = -1;
		fclose(f);
	}
	__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	return r;
}

/* See stream/stream.h. */
int uiw_tcp_short_path_rcvbuf(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return -errno;
	if (ti.tcpi_rtt == 0 || ti.tcpi_rtt >= UIW_SHORT_PATH_RTT_US)
		return 0;
	if (rmem_max() < UIW_SHORT_PATH_RCVBUF)
		return 0;
	int b = UIW_SHORT_PATH_RCVBUF;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b)) < 0)
		return -errno;
	return 1;
}

/* See stream/stream.h. */
void uiw_tcp_apply_opts(int fd, const struct uiw_tcp_opts *o)
{
	if (!o)
		return;
	if (o->maxseg)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &o->maxseg, sizeof(o->maxseg));
	if (o->cc[0])
		(void)setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o->cc,
				 (socklen_t)strnlen(o->cc, sizeof(o->cc)));
	if (o->sndbuf > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf, sizeof(o->sndbuf));
	if (o->rcvbuf > 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof(o->rcvbuf));
	if (o->notsent_lowat > 0)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &o->notsent_lowat,
				 sizeof(o->notsent_lowat));
	if (o->tos >= 0 && o->tos <= 255) {
		(void)setsockopt(fd, IPPROTO_IP, IP_TOS, &o->tos, sizeof(o->tos));
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &o->tos, sizeof(o->tos));
	}
	if (o->dead_peer_ms > 0) {
		unsigned ut = (unsigned)o->dead_peer_ms;
		/* keepalive times are whole seconds, at least 1 */
		int idle = o->dead_peer_ms / 2000, intvl = o->dead_peer_ms / 10000, one = 1;
		int cnt = 10; /* unused: with TCP_USER_TIMEOUT set, the bound ends it */
		idle = idle < 1 ? 1 : idle;
		intvl = intvl < 1 ? 1 : intvl;
		if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut)) < 0 &&
		    is_mptcp_socket(fd)) {
			static atomic_flag said = ATOMIC_FLAG_INIT;
			log_once(&said, UIW_LOG_INFO, NULL,
				 "stream: MPTCP sockets take no TCP_USER_TIMEOUT: the dead-peer "
				 "bound is keepalive's only (an idle connection); unacknowledged "
				 "data waits for the kernel's retransmission limit");
		}
		(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
}

/* A non-blocking TCP socket for dst's family, bound to src if given.
 * Returns it or -errno. */
static int tcp_socket(const struct sockaddr *src, const struct sockaddr *dst,
		      const struct uiw_tcp_opts *o)
{
	int fd = stream_socket(dst->sa_family, o && o->mptcp);
	if (fd < 0)
		return fd;
	uiw_tcp_apply_opts(fd, o);
	if (src) {
		int one = 1;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, src, sa_len(src)) < 0) {
			int e = errno;
			close(fd);
			return -e;
		}
	}
	return fd;
}

/* Connects fd to dst within timeout_ms. Returns fd, or -errno after
 * closing it. */
static int tcp_connect_fd(int fd, const struct sockaddr *dst, int timeout_ms)
{
	if (connect(fd, dst, sa_len(dst)) < 0) {
		if (errno != EINPROGRESS) {
			int e = errno;
			close(fd);
			return -e;
		}
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int r;
		do
			r = poll(&p, 1, timeout_ms);
		while (r < 0 && errno == EINTR);
		if (r == 0) {
			close(fd);
			return -ETIMEDOUT;
		}
		int err = 0;
		socklen_t l = sizeof(err);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err) {
			close(fd);
			return -err;
		}
	}
	return fd;
}

/* See stream/stream.h. The retry covers programs that tell the peer their
 * port just before they listen on it (qperf 0.4.11, docs/configuration.md
 * UIWARP_CONNECT_RETRY_MS). */
int uiw_tcp_connect(const struct sockaddr *src, const struct sockaddr *dst, int timeout_ms,
		    int retry_ms, const struct uiw_tcp_opts *o)
{
	int64_t t0 = now_ms();
	unsigned backoff_ms = 1;

	for (;;) {
		int fd = tcp_socket(src, dst, o);
		if (fd < 0)
			return fd;
		int64_t spent = now_ms() - t0;
		fd = tcp_connect_fd(fd, dst, spent >= timeout_ms ? 1 : timeout_ms - (int)spent);
		if (fd != -ECONNREFUSED)
			return fd;
		spent = now_ms() - t0;
		if (spent + backoff_ms > (int64_t)retry_ms || spent + backoff_ms >= timeout_ms)
			return fd;
		struct timespec nap = {0, (long)backoff_ms * 1000000};
		nanosleep(&nap, NULL);
		backoff_ms = backoff_ms >= 32 ? 64 : backoff_ms * 2;
	}
}

/* See stream/stream.h. */
int uiw_tcp_listen(const struct sockaddr *addr, int backlog, bool v6only,
		   const struct uiw_tcp_opts *o)
{
	int fd = stream_socket(addr->sa_family, o && o->mptcp);
	if (fd < 0)
		return fd;
	int one = 1, v6 = v6only ? 1 : 0;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	uiw_tcp_apply_opts(fd, o);
	if (addr->sa_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof(v6));
	if (bind(fd, addr, sa_len(addr)) < 0 || listen(fd, backlog > 0 ? backlog : 64) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* ------------------------------------------------------ blocking helpers */

/* See stream/stream.h. */
int uiw_stream_wait(struct uiw_stream *s, short events, int timeout_ms)
{
	if ((events & POLLIN) && s->ops->rx_buffered && s->ops->rx_buffered(s) > 0)
		return POLLIN;
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
	for (int i = 0; i < TCP_MAX_EINTR; i++) {
		struct pollfd p = {.fd = s->fd, .events = events};
		int r = poll(&p, 1, left_ms(timeout_ms, deadline));
		if (r > 0)
			return p.revents;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
	return -EINTR;
}

/* See stream/stream.h. */
int uiw_stream_send_all(struct uiw_stream *s, const struct iovec *iov, int n, int timeout_ms)
{
	enum { MAXV = 64 };
	struct iovec v[MAXV];
	int nv = 0;
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;

	if (n > MAXV)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (iov[i].iov_len)
			v[nv++] = iov[i];
	while (nv) {
		ssize_t r = uiw_stream_sendv(s, v, nv);
		if (r == -EAGAIN) {
			int w = uiw_stream_wait(s, POLLOUT, left_ms(timeout_ms, deadline));
			if (w < 0)
				return w;
			continue;
		}
		if (r < 0)
			return (int)r;
		size_t k = (size_t)r;
		int i = 0;
		while (i < nv && k >= v[i].iov_len)
			k -= v[i++].iov_len;
		if (i < nv) {
			v[i].iov_base = (uint8_t *)v[i].iov_base + k;
			v[i].iov_len -= k;
		}
		memmove(v, v + i, (size_t)(nv - i) * sizeof(v[0]));
		nv -= i;
	}
	return 0;
}

/* See stream/stream.h. */
ssize_t uiw_stream_recv_wait(struct uiw_stream *s, const struct iovec *iov, int n, int timeout_ms)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
	for (int i = 0; i < TCP_MAX_EINTR; i++) {
		ssize_t r = uiw_stream_recvv(s, iov, n);
		if (r != -EAGAIN)
			return r;
		int w = uiw_stream_wait(s, POLLIN, left_ms(timeout_ms, deadline));
		if (w < 0)
			return w;
	}
	return -EINTR;
}

/* See stream/stream.h. */
int uiw_stream_recv_exact(struct uiw_stream *s, void *buf, size_t len, int timeout_ms)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
	size_t got = 0;

	while (got < len) {
		struct iovec v = {.iov_base = (char *)buf + got, .iov_len = len - got};
		ssize_t r = uiw_stream_recv_wait(s, &v, 1, left_ms(timeout_ms, deadline));
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -ECONNRESET;
		got += (size_t)r;
	}
	return 0;
}
