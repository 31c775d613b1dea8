/* Helpers for the MPA tests: loopback TCP pairs and a peer thread.
 *
 * Everything is on 127.0.0.1 with a kernel-chosen port. Every wait in the
 * tests is bounded (socket timeouts, poll timeouts), so a broken peer fails
 * a test instead of hanging it.
 */
#ifndef UIWARP_TESTS_MPA_TEST_UTIL_H
#define UIWARP_TESTS_MPA_TEST_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Makes a connected loopback TCP pair: fds[0] the connecting end, fds[1]
 * the accepted end. Returns 0 or -errno. */
static inline int tcp_pair(int fds[2])
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
	socklen_t alen = sizeof(a);
	int l, c, s, e;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -errno;
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) < 0)
		goto fail_l;
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0)
		goto fail_l;
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0) {
		e = errno;
		close(c);
		close(l);
		return -e;
	}
	s = accept(l, NULL, NULL);
	if (s < 0) {
		e = errno;
		close(c);
		close(l);
		return -e;
	}
	close(l);
	fds[0] = c;
	fds[1] = s;
	return 0;
fail_l:
	e = errno;
	close(l);
	return -e;
}

/* Bounds blocking reads/writes on a raw test socket to ms milliseconds. */
static inline void sock_timeouts(int fd, int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Reads exactly n bytes from a raw socket (bounded by its SO_RCVTIMEO and a
 * pass limit). Returns 0, or -1 on end of stream / error / timeout. */
static inline int raw_read(int fd, void *buf, size_t n)
{
	size_t got = 0;

	for (int pass = 0; got < n && pass < 100000; pass++) {
		ssize_t r = recv(fd, (char *)buf + got, n - got, 0);

		if (r > 0)
			got += (size_t)r;
		else if (r < 0 && errno == EINTR)
			continue;
		else
			return -1;
	}
	return got == n ? 0 : -1;
}

/* Writes all n bytes to a raw socket. Returns 0 or -1. */
static inline int raw_write(int fd, const void *buf, size_t n)
{
	size_t done = 0;

	for (int pass = 0; done < n && pass < 100000; pass++) {
		ssize_t r = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);

		if (r > 0)
			done += (size_t)r;
		else if (r < 0 && errno == EINTR)
			continue;
		else
			return -1;
	}
	return done == n ? 0 : -1;
}

/* True when fd has nothing to read within ms (no data, no end of stream). */
static inline int raw_quiet(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 0;
}

static inline int64_t test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Builds a raw Request/Reply frame into out (room for 20 + pd_len bytes):
 * key (16 chars), flags, rev, PD_Length = pd_len, then pd. Returns its
 * length. */
static inline size_t build_frame(uint8_t *out, const char *key, uint8_t flags, uint8_t rev,
				 const void *pd, uint16_t pd_len)
{
	memcpy(out, key, 16);
	out[16] = flags;
	out[17] = rev;
	out[18] = (uint8_t)(pd_len >> 8);
	out[19] = (uint8_t)pd_len;
	if (pd_len)
		memcpy(out + 20, pd, pd_len);
	return 20u + pd_len;
}

/* ------------------------------------------------ blocking adapters
 * The framing calls are non-blocking (mpa/mpa.h); the tests read them in
 * order, so these wait (bounded: 5 s per call) for the stream to be ready
 * and repeat a call that said -EAGAIN. */
#ifdef UIWARP_MPA_H
static inline void t_wait_in(struct mpa_conn *c)
{
	struct pollfd p = {.fd = c->s->fd, .events = POLLIN};
	(void)poll(&p, 1, 50);
}

#define T_RETRY(c, call)                                                                           \
	({                                                                                         \
		__typeof__(call) _r = -EAGAIN;                                                     \
		for (int _i = 0; _i < 100 && _r == -EAGAIN; _i++) {                                \
			_r = (call);                                                               \
			if (_r == -EAGAIN)                                                         \
				t_wait_in(c);                                                      \
		}                                                                                  \
		_r;                                                                                \
	})

/* mpa_rx_begin until it is not -EAGAIN */
static inline int t_rx_begin(struct mpa_conn *c, void *hdr, size_t hl)
{
	return T_RETRY(c, mpa_rx_begin(c, hdr, hl));
}
static inline int t_rx_small(struct mpa_conn *c, const struct iovec *v, int n, size_t len)
{
	return T_RETRY(c, mpa_rx_small(c, v, n, len));
}
static inline int t_rx_end(struct mpa_conn *c)
{
	return T_RETRY(c, mpa_rx_end(c));
}
/* places all len bytes (iov NULL: discards); 0 or the first error */
static inline int t_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	struct iovec v[32];
	int nv = 0;
	for (int i = 0; i < n && nv < 32; i++)
		v[nv++] = iov[i];
	size_t done = 0;
	for (int k = 0; k < 100000 && done < len; k++) {
		ssize_t r = mpa_rx_payload(c, iov ? v : NULL, nv, len - done);
		if (r == -EAGAIN) {
			t_wait_in(c);
			continue;
		}
		if (r < 0)
			return (int)r;
		done += (size_t)r;
		size_t adv = (size_t)r;
		while (iov && nv && adv >= v[0].iov_len) {
			adv -= v[0].iov_len;
			memmove(v, v + 1, (size_t)(--nv) * sizeof(v[0]));
		}
		if (iov && nv) {
			v[0].iov_base = (uint8_t *)v[0].iov_base + adv;
			v[0].iov_len -= adv;
		}
	}
	return done == len ? 0 : -ETIMEDOUT;
}
static inline int t_tx_flush(struct mpa_conn *c)
{
	return mpa_tx_push_wait(c, 5000);
}
#endif

#endif
