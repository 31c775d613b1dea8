/* The TCP LLP (mpa/llp_tcp.c) over real loopback sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>

#include "mpa/llp.h"
#include "mpa_test_util.h"

struct pair {
	struct uiw_llp *a, *b; /* a: connecting end, b: accepted end */
};

static int setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	int fds[2] = {-1, -1};

	if (!p || tcp_pair(fds) < 0)
		return -1;
	p->a = uiw_llp_tcp_wrap(fds[0]);
	p->b = uiw_llp_tcp_wrap(fds[1]);
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
	struct uiw_llp *l;

	(void)state;
	assert_int_equal(tcp_pair(fds), 0);
	assert_int_equal(fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK), 0);
	l = uiw_llp_tcp_wrap(fds[0]);
	assert_non_null(l);
	assert_int_equal(l->fd, fds[0]);
	assert_int_equal(fcntl(fds[0], F_GETFL) & O_NONBLOCK, 0);
	assert_int_equal(getsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, &len), 0);
	assert_true(one != 0);
	l->ops->destroy(l);
	close(fds[1]);
	assert_null(uiw_llp_tcp_wrap(-1));
}

static void test_emss(void **state)
{
	struct pair *p = *state;
	int m = p->a->ops->emss(p->a);

	assert_true(m >= 536);
	assert_true(m <= 65535);
}

/* Gathered send (with an empty iovec) and scattered receive. */
static void test_small_iov(void **state)
{
	struct pair *p = *state;
	char a[] = "hello", b[] = ", ", c[] = "world";
	struct iovec out[4] = {{a, 5}, {NULL, 0}, {b, 2}, {c, 5}};
	char r1[3], r2[20];
	struct iovec in[2] = {{r1, 3}, {r2, 20}};
	int queued = 0;

	assert_int_equal(uiw_llp_sendv(p->a, out, 4), 12);
	for (int i = 0; i < 200 && queued < 12; i++) {
		if (ioctl(p->b->fd, FIONREAD, &queued) < 0 || queued < 12)
			usleep(5000);
	}
	assert_int_equal(queued, 12);
	assert_int_equal(uiw_llp_recvv(p->b, in, 2, 1000), 12);
	assert_memory_equal(r1, "hel", 3);
	assert_memory_equal(r2, "lo, world", 9);
	assert_int_equal(uiw_llp_sendv(p->a, out, 0), 0);
}

struct bulk {
	struct uiw_llp *llp;
	uint8_t *buf;
	size_t len;
	int rc;
};

/* Reads in 64 KiB pieces with short pauses, so the sender's socket buffer
 * fills and its sendmsg calls time out part-way. */
static void *bulk_reader(void *arg)
{
	struct bulk *k = arg;
	size_t got = 0;

	k->rc = 0;
	while (got < k->len && k->rc == 0) {
		size_t n = k->len - got > 65536 ? 65536 : k->len - got;

		k->rc = uiw_llp_recv_exact(k->llp, k->buf + got, n, 10000);
		got += n;
		usleep(200);
	}
	if (k->rc)
		k->llp->ops->abort(k->llp); /* unblock the sender */
	return NULL;
}

/* 8 MiB through 600 uneven iovecs. The sender has SO_SNDTIMEO set, so a
 * blocked sendmsg returns a partial count (or EAGAIN) and sendv must carry
 * on from inside an iovec. */
static void test_bulk_partial_writes(void **state)
{
	struct pair *p = *state;
	const size_t total = 8u << 20;
	const int n = 600;
	uint8_t *src = malloc(total), *dst = calloc(1, total);
	struct iovec *iov = calloc((size_t)n, sizeof(*iov));
	struct bulk k = {.llp = p->b, .buf = dst, .len = total, .rc = 1};
	struct timeval tv = {.tv_sec = 0, .tv_usec = 2000};
	size_t off = 0;
	pthread_t t;

	assert_non_null(src);
	assert_non_null(dst);
	assert_non_null(iov);
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 31 + (i >> 12));
	assert_int_equal(setsockopt(p->a->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	/* uneven pieces: 1, 7920, ... up to 27001 bytes */
	for (int i = 0; i < n; i++) {
		size_t len = i == n - 1 ? total - off : (size_t)((i * 7919) % 27001 + 1);

		iov[i].iov_base = src + off;
		iov[i].iov_len = len;
		off += len;
	}
	assert_int_equal(off, total);
	assert_int_equal(pthread_create(&t, NULL, bulk_reader, &k), 0);
	assert_int_equal(uiw_llp_sendv(p->a, iov, n), (ssize_t)total);
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

	assert_int_equal(uiw_llp_recvv(p->b, &v, 1, 100), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 90 && dt < 2000);
	assert_int_equal(uiw_llp_recvv(p->b, &v, 1, 0), -ETIMEDOUT);
}

/* recv_exact: pieces arriving apart are joined; the timeout covers the
 * whole read; end of stream first is -ECONNRESET. */
static void test_recv_exact(void **state)
{
	struct pair *p = *state;
	char buf[8];
	struct iovec v1 = {"abc", 3}, v2 = {"defgh", 5};
	int64_t t0, dt;

	assert_int_equal(uiw_llp_sendv(p->a, &v1, 1), 3);
	t0 = test_now_ms();
	assert_int_equal(uiw_llp_recv_exact(p->b, buf, 8, 200), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
	/* the 3 bytes were consumed by the failed call; send the rest */
	assert_int_equal(uiw_llp_sendv(p->a, &v1, 1), 3);
	assert_int_equal(uiw_llp_sendv(p->a, &v2, 1), 5);
	assert_int_equal(uiw_llp_recv_exact(p->b, buf, 8, 1000), 0);
	assert_memory_equal(buf, "abcdefgh", 8);
	assert_int_equal(uiw_llp_sendv(p->a, &v1, 1), 3);
	p->a->ops->shutdown_send(p->a);
	assert_int_equal(uiw_llp_recv_exact(p->b, buf, 8, 1000), -ECONNRESET);
	assert_int_equal(uiw_llp_recv_exact(p->b, buf, 0, 0), 0);
}

struct blocked {
	struct uiw_llp *llp;
	atomic_long r;
};

static void *blocked_reader(void *arg)
{
	struct blocked *b = arg;
	char c;
	struct iovec v = {&c, 1};

	atomic_store(&b->r, (long)uiw_llp_recvv(b->llp, &v, 1, -1));
	return NULL;
}

/* abort() from another thread wakes a recvv blocked without a timeout. */
static void test_abort_wakes_reader(void **state)
{
	struct pair *p = *state;
	struct blocked b = {.llp = p->b};
	struct timespec ts;
	pthread_t t;

	atomic_init(&b.r, 99);
	assert_int_equal(pthread_create(&t, NULL, blocked_reader, &b), 0);
	usleep(100 * 1000);
	assert_int_equal(atomic_load(&b.r), 99); /* still blocked */
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
	for (int i = 0; i < 200 && r >= 0; i++)
		r = uiw_llp_sendv(p->a, &v, 1);
	assert_true(r == -EPIPE || r == -ECONNRESET);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wrap_options),
	    cmocka_unit_test_setup_teardown(test_emss, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_small_iov, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bulk_partial_writes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recv_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recv_exact, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_wakes_reader, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_send_after_peer_close, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
