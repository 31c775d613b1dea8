/* The LLP (RFC 5044 §2) as a connected kernel TCP socket.
 *
 * The socket is kept in blocking mode: sendv blocks until every byte is in
 * the socket buffer, recvv blocks (or polls with a timeout) for at least one
 * byte. TCP_NODELAY is on so a small FPDU goes out at once. abort() is a
 * shutdown(SHUT_RDWR), which wakes a thread blocked in recvv/poll on the
 * same socket in another thread; the descriptor stays valid until destroy().
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mpa/llp.h"
#include "netlink/uiw_netlink.h"

/* Most iovecs handed to one sendmsg/recvmsg (the kernel's UIO_MAXIOV). */
#define LLP_IOV_MAX 1024
/* iovecs rebuilt on the stack after a partial write. */
#define LLP_IOV_REBUILD 64
/* Consecutive EINTR/EAGAIN without progress before giving up (a bound on
 * the retry loops; never reached in practice). */
#define LLP_MAX_RETRY 100000

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd has a write slot (only if someone made it non-blocking). */
static void wait_writable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};

	(void)poll(&p, 1, 1000);
}

/* sendv: all of iov[0..n) (n >= 0) or -errno. Partial writes continue where
 * they stopped; EINTR is retried. MSG_NOSIGNAL: a closed peer gives -EPIPE,
 * not SIGPIPE. Returns the byte count. */
static ssize_t tcp_sendv(struct uiw_llp *llp, const struct iovec *iov, int n)
{
	struct iovec tmp[LLP_IOV_REBUILD];
	size_t total = 0, done = 0;
	int idx = 0, retry = 0;
	size_t off = 0; /* bytes of iov[idx] already sent */

	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total > SSIZE_MAX)
		return -EINVAL;

	while (done < total) {
		struct msghdr msg = {0};
		ssize_t r;

		/* skip empty and finished entries */
		while (idx < n && off >= iov[idx].iov_len) {
			off = 0;
			idx++;
		}
		if (off == 0) {
			/* sendmsg only reads the array */
			msg.msg_iov = (struct iovec *)(uintptr_t)&iov[idx];
			msg.msg_iovlen = (size_t)(n - idx > LLP_IOV_MAX ? LLP_IOV_MAX : n - idx);
		} else {
			int k = n - idx > LLP_IOV_REBUILD ? LLP_IOV_REBUILD : n - idx;

			memcpy(tmp, &iov[idx], (size_t)k * sizeof(tmp[0]));
			tmp[0].iov_base = (char *)tmp[0].iov_base + off;
			tmp[0].iov_len -= off;
			msg.msg_iov = tmp;
			msg.msg_iovlen = (size_t)k;
		}
		r = sendmsg(llp->fd, &msg, MSG_NOSIGNAL);
		if (r < 0) {
			int e = errno;

			if ((e == EINTR || e == EAGAIN || e == EWOULDBLOCK) &&
			    ++retry < LLP_MAX_RETRY) {
				if (e != EINTR)
					wait_writable(llp->fd);
				continue;
			}
			return -e;
		}
		if (r == 0) {
			/* no progress without an error: bounded like EINTR */
			if (++retry >= LLP_MAX_RETRY)
				return -EIO;
			continue;
		}
		retry = 0;
		done += (size_t)r;
		/* advance (idx, off) by r bytes */
		while (r > 0 && idx < n) {
			size_t left = iov[idx].iov_len - off;

			if ((size_t)r < left) {
				off += (size_t)r;
				r = 0;
			} else {
				r -= (ssize_t)left;
				off = 0;
				idx++;
			}
		}
	}
	return (ssize_t)total;
}

/* recvv: up to the sum of iov[0..n) bytes. With timeout_ms >= 0 waits at
 * most that long for the first byte (-ETIMEDOUT). Returns the count, 0 on
 * end of stream (or after abort()), or -errno. EINTR is retried. */
static ssize_t tcp_recvv(struct uiw_llp *llp, const struct iovec *iov, int n, int timeout_ms)
{
	struct msghdr msg = {0};
	int retry = 0;

	if (n < 0 || (n > 0 && !iov))
		return -EINVAL;

	if (timeout_ms >= 0) {
		int64_t deadline = now_ms() + timeout_ms;

		for (;;) {
			struct pollfd p = {.fd = llp->fd, .events = POLLIN};
			int64_t left = deadline - now_ms();
			int r;

			if (left < 0)
				left = 0;
			r = poll(&p, 1, (int)left);
			if (r > 0)
				break; /* data, end of stream or error: recvmsg tells */
			if (r == 0)
				return -ETIMEDOUT;
			if (errno != EINTR || ++retry >= LLP_MAX_RETRY)
				return -errno;
		}
	}

	msg.msg_iov = (struct iovec *)(uintptr_t)iov; /* recvmsg does not write the array */
	msg.msg_iovlen = (size_t)(n > LLP_IOV_MAX ? LLP_IOV_MAX : n);
	for (retry = 0;; retry++) {
		ssize_t r = recvmsg(llp->fd, &msg, 0);

		if (r >= 0)
			return r;
		if (errno != EINTR || retry >= LLP_MAX_RETRY)
			return -errno;
	}
}

/* emss (RFC 5044 §4.1: MULPDU comes from the EMSS): TCP_MAXSEG in bytes
 * (the kernel's current MSS, net of options), bounded by the payload one
 * segment can carry on the route's path MTU (rtnetlink RTM_GETROUTE toward
 * the peer from our address: a route's `mtu lock`, a learned PMTU or the
 * output interface's MTU) when that lookup works; silently TCP_MAXSEG alone
 * otherwise. With UIWARP_DEBUG set, says on stderr which bound won.
 * Returns the EMSS or -errno. */
static int tcp_emss(struct uiw_llp *llp)
{
	int mss = 0;
	socklen_t len = sizeof(mss);

	if (getsockopt(llp->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) < 0)
		return -errno;
	int maxseg = mss;
	unsigned int pmtu = 0, bound = 0;
	struct sockaddr_storage peer, self;
	socklen_t pl = sizeof(peer), sl = sizeof(self);
	if (getpeername(llp->fd, (struct sockaddr *)&peer, &pl) == 0 &&
	    getsockname(llp->fd, (struct sockaddr *)&self, &sl) == 0 &&
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
	const char *dbg = getenv("UIWARP_DEBUG");
	if (dbg && *dbg && *dbg != '0')
		fprintf(stderr,
			"uiwarp: mpa: EMSS %d from %s (TCP_MAXSEG %d, route path MTU %u -> "
			"segment payload bound %u)\n",
			mss, mss != maxseg ? "the route's path MTU" : "TCP_MAXSEG", maxseg, pmtu,
			bound);
	return mss;
}

static void tcp_shutdown_send(struct uiw_llp *llp)
{
	(void)shutdown(llp->fd, SHUT_WR);
}

static void tcp_abort(struct uiw_llp *llp)
{
	(void)shutdown(llp->fd, SHUT_RDWR);
}

static void tcp_destroy(struct uiw_llp *llp)
{
	if (!llp)
		return;
	if (llp->fd >= 0)
		(void)close(llp->fd);
	free(llp);
}

static const struct uiw_llp_ops tcp_ops = {
    .sendv = tcp_sendv,
    .recvv = tcp_recvv,
    .emss = tcp_emss,
    .shutdown_send = tcp_shutdown_send,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
};

/* See mpa/llp.h. fd: a connected stream socket. Clears O_NONBLOCK and sets
 * TCP_NODELAY (best effort: a non-TCP stream such as a socketpair in a test
 * has no TCP_NODELAY). Returns the llp, which owns fd from then on, or NULL
 * with errno ENOMEM (or EBADF for fd < 0); on NULL the caller still owns fd.
 * RFC 5044 §2 (the LLP). */
struct uiw_llp *uiw_llp_tcp_wrap(int fd)
{
	struct uiw_llp *llp;
	int one = 1, fl;

	if (fd < 0) {
		errno = EBADF;
		return NULL;
	}
	llp = calloc(1, sizeof(*llp));
	if (!llp) {
		errno = ENOMEM;
		return NULL;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && (fl & O_NONBLOCK))
		(void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	llp->ops = &tcp_ops;
	llp->fd = fd;
	return llp;
}

/* See mpa/llp.h. Reads exactly len bytes into buf. timeout_ms >= 0 bounds
 * the whole read (not each piece); < 0 waits forever. Returns 0,
 * -ETIMEDOUT, -ECONNRESET (end of stream before len bytes) or -errno from
 * the stream. Every pass reads >= 1 byte or ends the loop. Used for the
 * RFC 5044 §7.1 Request/Reply frames, which must be read exactly. */
int uiw_llp_recv_exact(struct uiw_llp *llp, void *buf, size_t len, int timeout_ms)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
	size_t got = 0;

	while (got < len) {
		struct iovec v = {.iov_base = (char *)buf + got, .iov_len = len - got};
		int tmo = -1;
		ssize_t r;

		if (timeout_ms >= 0) {
			int64_t left = deadline - now_ms();

			tmo = left > 0 ? (int)(left > INT_MAX ? INT_MAX : left) : 0;
		}
		r = uiw_llp_recvv(llp, &v, 1, tmo);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -ECONNRESET;
		got += (size_t)r;
	}
	return 0;
}
