/* The TCP byte stream (stream/tcp.c) over real loopback sockets: the
 * non-blocking operations, the blocking helpers connection setup uses, and
 * the socket calls of connect and listen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "mpa_test_util.h"
#include "stream/stream.h"

struct pair {
	struct uiw_stream *a, *b; /* a: connecting end, b: accepted end */
};

/* A loopback connection is a short path (its handshake RTT is µs): both
 * ends get UIW_SHORT_PATH_RCVBUF (the kernel reports twice what was set)
 * when net.core.rmem_max allows it, and are left as they were when it
 * does not; a descriptor that is no TCP socket is an error. */
static void test_short_path_rcvbuf(void **state)
{
	(void)state;
	int fds[2] = {-1, -1};
	assert_int_equal(tcp_pair(fds), 0);
	long rmax = -1;
	FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");
	if (f) {
		if (fscanf(f, "%ld", &rmax) != 1)
			rmax = -1;
		fclose(f);
	}
	for (int i = 0; i < 2; i++) {
		int before = 0, after = 0;
		socklen_t len = sizeof(int);
		assert_int_equal(getsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &before, &len), 0);
		int r = uiw_tcp_short_path_rcvbuf(fds[i]);
		assert_int_equal(getsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &after, &len), 0);
		if (rmax >= UIW_SHORT_PATH_RCVBUF) {
			assert_int_equal(r, 1);
			assert_true(after >= UIW_SHORT_PATH_RCVBUF);
		} else {
			print_message("rmem_max %ld: the buffer stays autotuned\n", rmax);
			assert_int_equal(r, 0);
			assert_int_equal(after, before);
		}
	}
	close(fds[0]);
	close(fds[1]);
	int u[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, u), 0);
	assert_true(uiw_tcp_short_path_rcvbuf(u[0]) < 0);
	close(u[0]);
	close(u[1]);
}

static int setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	int fds[2] = {-1, -1};

	if (!p || tcp_pair(fds) < 0)
		return -1;
	p->a = uiw_stream_tcp(fds[0]);
	p->b = uiw_stream_tcp(fds[1]);
	if (!p->a || !p->b)
		return -1;
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	p->a->ops->destroy(p->a);
	p->b->ops->destroy(p->b);
	free(p);
	return 0;
}

static void test_wrap_options(void **state)
{
	int fds[2] = {-1, -1}, one = 0;
	socklen_t len = sizeof(one);
	struct uiw_stream *s;

	(void)state;
	assert_int_equal(tcp_pair(fds), 0);
	s = uiw_stream_tcp(fds[0]);
	assert_non_null(s);
	assert_int_equal(uiw_stream_fd(s), fds[0]);
	assert_int_equal(fcntl(fds[0], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
	assert_int_equal(getsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, &len), 0);
	assert_true(one != 0);
	assert_int_equal(s->ops->rx_buffered(s), 0);
	s->ops->destroy(s);
	close(fds[1]);
	assert_null(uiw_stream_tcp(-1));
}

static void test_emss(void **state)
{
	struct pair *p = *state;
	int m = p->a->ops->emss(p->a);

	assert_true(m >= 536);
	assert_true(m <= 65535);
}

/* Gathered send (with an empty iovec) and scattered receive; nothing there
 * is -EAGAIN, not a wait. */
static void test_small_iov(void **state)
{
	struct pair *p = *state;
	char a[] = "hello", b[] = ", ", c[] = "world";
	struct iovec out[4] = {{a, 5}, {NULL, 0}, {b, 2}, {c, 5}};
	char r1[3], r2[20];
	struct iovec in[2] = {{r1, 3}, {r2, 20}};

	assert_int_equal(uiw_stream_recvv(p->b, in, 2), -EAGAIN);
	assert_int_equal(uiw_stream_sendv(p->a, out, 4), 12);
	assert_int_equal(uiw_stream_recv_wait(p->b, in, 2, 1000), 12);
	assert_memory_equal(r1, "hel", 3);
	assert_memory_equal(r2, "lo, world", 9);
	assert_int_equal(uiw_stream_recvv(p->b, in, 2), -EAGAIN);
}

/* A full stream takes part of a send, then nothing (-EAGAIN), never
 * blocks. */
static void test_sendv_never_blocks(void **state)
{
	struct pair *p = *state;
	static uint8_t big[1 << 20];
	struct iovec v = {big, sizeof(big)};
	ssize_t r = 0, total = 0;
	int partial = 0;

	for (int i = 0; i < 1000; i++) {
		r = uiw_stream_sendv(p->a, &v, 1);
		if (r == -EAGAIN)
			break;
		assert_true(r > 0);
		total += r;
		partial += r < (ssize_t)sizeof(big);
	}
	assert_int_equal(r, -EAGAIN);
	assert_true(total > 0);
	assert_true(partial > 0);
	assert_int_equal(uiw_stream_wait(p->a, POLLOUT, 50), -ETIMEDOUT);
}

struct bulk {
	struct uiw_stream *s;
	uint8_t *buf;
	size_t len;
	int rc;
};

/* Reads in 64 KiB pieces with short pauses, so the sender's socket buffer
 * fills and its sends are partial. */
static void *bulk_reader(void *arg)
{
	struct bulk *k = arg;
	size_t got = 0;

	k->rc = 0;
	while (got < k->len && k->rc == 0) {
		size_t n = k->len - got > 65536 ? 65536 : k->len - got;

		k->rc = uiw_stream_recv_exact(k->s, k->buf + got, n, 10000);
		got += n;
		usleep(200);
	}
	if (k->rc)
		k->s->ops->abort(k->s); /* unblock the sender */
	return NULL;
}

/* 8 MiB through 60 uneven iovecs with uiw_stream_send_all: partial sends
 * carry on from inside an iovec. */
static void test_bulk_partial_writes(void **state)
{
	struct pair *p = *state;
	const size_t total = 8u << 20;
	const int n = 60;
	uint8_t *src = malloc(total), *dst = calloc(1, total);
	struct iovec *iov = calloc((size_t)n, sizeof(*iov));
	struct bulk k = {.s = p->b, .buf = dst, .len = total, .rc = 1};
	size_t off = 0;
	pthread_t t;

	assert_non_null(src);
	assert_non_null(dst);
	assert_non_null(iov);
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 31 + (i >> 12));
	for (int i = 0; i < n; i++) {
		size_t len = i == n - 1 ? total - off : (size_t)((i * 7919) % 270001 + 1);

		iov[i].iov_base = src + off;
		iov[i].iov_len = len;
		off += len;
	}
	assert_int_equal(off, total);
	assert_int_equal(pthread_create(&t, NULL, bulk_reader, &k), 0);
	assert_int_equal(uiw_stream_send_all(p->a, iov, n, 20000), 0);
	pthread_join(t, NULL);
	assert_int_equal(k.rc, 0);
	assert_memory_equal(src, dst, total);
	free(src);
	free(dst);
	free(iov);
}

static void test_recv_timeout(void **state)
{
	struct pair *p = *state;
	char c;
	struct iovec v = {&c, 1};
	int64_t t0 = test_now_ms(), dt;

	assert_int_equal(uiw_stream_recv_wait(p->b, &v, 1, 100), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 90 && dt < 2000);
	assert_int_equal(uiw_stream_recv_wait(p->b, &v, 1, 0), -ETIMEDOUT);
}

/* recv_exact: pieces arriving apart are joined; the timeout covers the
 * whole read; end of stream first is -ECONNRESET. */
static void test_recv_exact(void **state)
{
	struct pair *p = *state;
	char buf[8];
	struct iovec v1 = {"abc", 3}, v2 = {"defgh", 5};
	int64_t t0, dt;

	assert_int_equal(uiw_stream_sendv(p->a, &v1, 1), 3);
	t0 = test_now_ms();
	assert_int_equal(uiw_stream_recv_exact(p->b, buf, 8, 200), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
	/* the 3 bytes were consumed by the failed call; send the rest */
	assert_int_equal(uiw_stream_sendv(p->a, &v1, 1), 3);
	assert_int_equal(uiw_stream_sendv(p->a, &v2, 1), 5);
	assert_int_equal(uiw_stream_recv_exact(p->b, buf, 8, 1000), 0);
	assert_memory_equal(buf, "abcdefgh", 8);
	assert_int_equal(uiw_stream_sendv(p->a, &v1, 1), 3);
	p->a->ops->shutdown_send(p->a);
	assert_int_equal(uiw_stream_recv_exact(p->b, buf, 8, 1000), -ECONNRESET);
	assert_int_equal(uiw_stream_recv_exact(p->b, buf, 0, 0), 0);
}

struct blocked {
	struct uiw_stream *s;
	atomic_long r;
};

static void *blocked_waiter(void *arg)
{
	struct blocked *b = arg;
	char c;
	struct iovec v = {&c, 1};

	atomic_store(&b->r, (long)uiw_stream_recv_wait(b->s, &v, 1, -1));
	return NULL;
}

/* abort() from another thread wakes a thread waiting without a timeout. */
static void test_abort_wakes_waiter(void **state)
{
	struct pair *p = *state;
	struct blocked b = {.s = p->b};
	struct timespec ts;
	pthread_t t;

	atomic_init(&b.r, 99);
	assert_int_equal(pthread_create(&t, NULL, blocked_waiter, &b), 0);
	usleep(100 * 1000);
	assert_int_equal(atomic_load(&b.r), 99); /* still waiting */
	p->b->ops->abort(p->b);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 3;
	assert_int_equal(pthread_timedjoin_np(t, NULL, &ts), 0);
	assert_true(atomic_load(&b.r) <= 0);
}

/* Writing to a stream the peer has closed gives -EPIPE/-ECONNRESET, not
 * SIGPIPE (the test would die). */
static void test_send_after_peer_close(void **state)
{
	struct pair *p = *state;
	static char big[65536];
	struct iovec v = {big, sizeof(big)};
	ssize_t r = 0;

	p->b->ops->abort(p->b);
	close(p->b->fd);
	p->b->fd = -1;
	for (int i = 0; i < 200 && (r >= 0 || r == -EAGAIN); i++) {
		r = uiw_stream_sendv(p->a, &v, 1);
		if (r == -EAGAIN)
			usleep(1000);
	}
	assert_true(r == -EPIPE || r == -ECONNRESET);
}

/* uiw_tcp_listen / uiw_tcp_connect: a connect that is refused at first
 * (nothing listens yet) is retried for retry_ms; without retry it is
 * refused at once; a socket option reaches both sockets. */
struct late {
	struct sockaddr_in a;
	int lfd;
};

static void *late_listen(void *arg)
{
	struct late *l = arg;
	usleep(60 * 1000);
	l->lfd = uiw_tcp_listen((struct sockaddr *)&l->a, 4, false, NULL);
	return NULL;
}

/* The readiness mark never clamps the receive window: Linux grows the
 * buffer for a mark larger than it and clamps the window to the mark
 * (tcp_set_rcvlowat), which held a 20 ms path to 64 KiB per round trip.
 * A mark of 200000 bytes on a fresh socket (131072-byte buffer) is cut to
 * a quarter of the buffer and the window clamp stays where it was; the
 * mark still reports readiness once that many bytes are there. */
static void test_rx_lowat_keeps_window(void **state)
{
	struct pair *p = *state;
	int fd = uiw_stream_fd(p->b), clamp0 = 0, clamp = 0, lowat = 0, rb = 0;
	socklen_t len = sizeof(int);

	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_WINDOW_CLAMP, &clamp0, &len), 0);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rb, &len), 0);
	uiw_stream_rx_lowat(p->b, 200000);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len), 0);
	assert_true(lowat > 1);
	assert_true(lowat <= rb / 4);
	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_WINDOW_CLAMP, &clamp, &len), 0);
	assert_int_equal(clamp, clamp0);

	/* readiness at the mark, not before */
	static char buf[1 << 16];
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	assert_int_equal(send(uiw_stream_fd(p->a), buf, (size_t)lowat - 1, 0), lowat - 1);
	assert_int_equal(poll(&pfd, 1, 100), 0);
	assert_int_equal(send(uiw_stream_fd(p->a), buf, 1, 0), 1);
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	uiw_stream_rx_lowat(p->b, 1);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len), 0);
	assert_int_equal(lowat, 1);
}

static void test_connect_listen(void **state)
{
	(void)state;
	struct uiw_tcp_opts o = {.cc = "reno"};
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int l = uiw_tcp_listen((struct sockaddr *)&a, 4, false, &o);
	assert_true(l >= 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	int c = uiw_tcp_connect(NULL, (struct sockaddr *)&a, 2000, 0, &o);
	assert_true(c >= 0);
	char cc[16] = "";
	socklen_t ccl = sizeof(cc);
	assert_int_equal(getsockopt(c, IPPROTO_TCP, TCP_CONGESTION, cc, &ccl), 0);
	assert_string_equal(cc, "reno");
	close(c);
	close(l);
	/* nothing listens: refused at once without retry ... */
	assert_int_equal(uiw_tcp_connect(NULL, (struct sockaddr *)&a, 2000, 0, NULL),
			 -ECONNREFUSED);
	/* ... and connected when the listener comes within the retry time */
	struct late late = {.a = a, .lfd = -1};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, late_listen, &late), 0);
	c = uiw_tcp_connect(NULL, (struct sockaddr *)&a, 2000, 1000, NULL);
	pthread_join(t, NULL);
	assert_true(c >= 0);
	close(c);
	close(late.lfd);
}

/* One connection from a client with o.mptcp = cli_mp to a listener with
 * o.mptcp = srv_mp, on loopback: 64 KiB each way, checked. Both ends are
 * Multipath TCP only when both asked for it (the kernel falls back to
 * plain TCP otherwise, RFC 8684 §3.7); the options the kernel takes on an
 * MPTCP socket are there (cc, keepalive) although it refuses
 * TCP_USER_TIMEOUT. */
static void mptcp_case(bool srv_mp, bool cli_mp)
{
	struct uiw_tcp_opts o = {.cc = "reno", .dead_peer_ms = 3000, .tos = -1};
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	o.mptcp = srv_mp;
	int l = uiw_tcp_listen((struct sockaddr *)&a, 4, false, &o);
	assert_true(l >= 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	o.mptcp = cli_mp;
	int c = uiw_tcp_connect(NULL, (struct sockaddr *)&a, 2000, 0, &o);
	assert_true(c >= 0);
	struct pollfd pl = {.fd = l, .events = POLLIN};
	assert_int_equal(poll(&pl, 1, 2000), 1);
	int d = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(d >= 0);

	int proto = 0, ka = 0;
	socklen_t len = sizeof(proto);
	assert_int_equal(getsockopt(c, SOL_SOCKET, SO_PROTOCOL, &proto, &len), 0);
	assert_int_equal(proto, cli_mp ? IPPROTO_MPTCP : IPPROTO_TCP);
	int want = srv_mp && cli_mp, sub = -1;
	assert_int_equal(uiw_tcp_mptcp_state(c, &sub), want);
	assert_int_equal(uiw_tcp_mptcp_state(d, NULL), want);
	if (want)
		assert_int_equal(sub, 0); /* no endpoints on loopback: the first only */
	char cc[16] = "";
	socklen_t ccl = sizeof(cc);
	assert_int_equal(getsockopt(c, IPPROTO_TCP, TCP_CONGESTION, cc, &ccl), 0);
	assert_string_equal(cc, "reno");
	len = sizeof(ka);
	assert_int_equal(getsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &ka, &len), 0);
	assert_int_equal(ka, 1);

	struct uiw_stream *sc = uiw_stream_tcp(c), *sd = uiw_stream_tcp(d);
	assert_non_null(sc);
	assert_non_null(sd);
	enum { N = 65536 };
	static uint8_t out[N], in[N];
	for (size_t i = 0; i < N; i++)
		out[i] = (uint8_t)(i * 7 + srv_mp * 3 + cli_mp);
	struct iovec v = {.iov_base = out, .iov_len = N};
	assert_int_equal(uiw_stream_send_all(sc, &v, 1, 5000), 0);
	assert_int_equal(uiw_stream_recv_exact(sd, in, N, 5000), 0);
	assert_memory_equal(in, out, N);
	memset(in, 0, N);
	assert_int_equal(uiw_stream_send_all(sd, &v, 1, 5000), 0);
	assert_int_equal(uiw_stream_recv_exact(sc, in, N, 5000), 0);
	assert_memory_equal(in, out, N);
	sc->ops->destroy(sc);
	sd->ops->destroy(sd);
	close(l);
}

/* UIWARP_MPTCP (uiw_tcp_opts.mptcp) on loopback: MPTCP to MPTCP, and the
 * fallback both ways; uiw_tcp_mptcp_state's errors. Where this kernel has
 * no MPTCP socket (CONFIG_MPTCP off, net.mptcp.enabled=0) only the plain
 * TCP listener it gets instead is checked, and the test says skipped. */
static void test_mptcp(void **state)
{
	(void)state;
	int probe = socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP);
	if (probe < 0) {
		/* the fallback of a kernel that refuses: plain TCP sockets */
		struct uiw_tcp_opts o = {.mptcp = true, .tos = -1};
		struct sockaddr_in a = {.sin_family = AF_INET};
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int l = uiw_tcp_listen((struct sockaddr *)&a, 4, false, &o), proto = 0;
		socklen_t len = sizeof(proto);
		assert_true(l >= 0);
		assert_int_equal(getsockopt(l, SOL_SOCKET, SO_PROTOCOL, &proto, &len), 0);
		assert_int_equal(proto, IPPROTO_TCP);
		close(l);
		skip();
	}
	close(probe);
	mptcp_case(true, true);
	mptcp_case(true, false);
	mptcp_case(false, true);
	assert_int_equal(uiw_tcp_mptcp_state(-1, NULL), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wrap_options),
	    cmocka_unit_test(test_short_path_rcvbuf),
	    cmocka_unit_test_setup_teardown(test_emss, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_small_iov, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sendv_never_blocks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bulk_partial_writes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recv_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recv_exact, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_wakes_waiter, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_send_after_peer_close, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rx_lowat_keeps_window, setup, teardown),
	    cmocka_unit_test(test_connect_listen),
	    cmocka_unit_test(test_mptcp),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
