/* The TLS byte stream (stream/tls.c) through a real loopback TCP
 * connection with small socket buffers, so that most sends find the socket
 * full: every byte must come out once and in order, whether the records
 * it went in were sent at once, held in the stream's collection of records
 * and sent by a later call, or the caller offered it again after a short
 * count (the plaintext of records the socket did not take is offered again
 * and must be neither encrypted twice nor lost). The sender offers
 * FPDU-shaped gathers (a small header, a large payload, a small trailer)
 * and runs of tiny pieces; the receiver reads in sizes that cut records
 * anywhere and pauses now and then so the sender's socket fills up. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "stream/stream.h"

/* Bytes the sender moves in each test. */
#define TOTAL (24u * 1024 * 1024)

/* The byte at stream offset x: not periodic in any record or FPDU size. */
static uint8_t pat(uint64_t x)
{
	return (uint8_t)((x * 2654435761u) >> 13 ^ x >> 20);
}

struct side {
	struct uiw_stream *s;
	const struct uiw_tls_opts *o;
	int rc;
	/* sender */
	int shape;	 /* 0: FPDU-like gathers, 1: tiny pieces */
	bool shorter;	 /* may offer less than a short count left */
	unsigned shorts; /* calls that took less than offered or nothing */
	unsigned calls;
	/* receiver */
	uint64_t got;
	uint64_t bad_at; /* first mismatching offset + 1, 0 for none */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *client_hs(void *arg)
{
	struct side *c = arg;
	c->rc = uiw_tls_client(&c->s, c->o, 5000);
	return NULL;
}

/* Fills iov (at most max entries) with pieces covering [at, at + want) of
 * the stream, cut where shape says; the bytes live in buf (want bytes). */
static int build_iov(struct iovec *iov, int max, uint8_t *buf, uint64_t at, size_t want, int shape,
		     unsigned *seed)
{
	for (size_t k = 0; k < want; k++)
		buf[k] = pat(at + k);
	int n = 0;
	size_t off = 0;
	while (off < want && n < max) {
		size_t piece;
		if (shape == 0) {
			/* header 16, payload up to 65 512, trailer 8, by the
			 * position in a 65 536-byte frame */
			uint64_t f = (at + off) % 65536;
			if (f < 16)
				piece = 16 - f;
			else if (f < 65528)
				piece = 65528 - f;
			else
				piece = 65536 - f;
		} else {
			piece = 1 + rand_r(seed) % 300;
			if (rand_r(seed) % 8 == 0)
				piece = 4096 + rand_r(seed) % 9000;
		}
		if (piece > want - off || n == max - 1)
			piece = want - off; /* the whole of want is covered */
		iov[n].iov_base = buf + off;
		iov[n].iov_len = piece;
		n++;
		off += piece;
	}
	return n;
}

static void *sender(void *arg)
{
	struct side *c = arg;
	enum { MAXV = 256, CHUNK = 300 * 1024 };
	struct iovec iov[MAXV];
	uint8_t *buf = malloc(CHUNK);
	unsigned seed = 7;
	uint64_t at = 0, again = 0; /* offered before up to again */
	int64_t end = now_ms() + 60000;

	c->rc = 0;
	while (buf && at < TOTAL && now_ms() < end) {
		size_t want = TOTAL - at < CHUNK ? (size_t)(TOTAL - at) : CHUNK;
		want = 1 + (size_t)rand_r(&seed) % want;
		/* what a short count left is offered again, whole (as MPA
		 * does: the rest of its batch) and possibly more; or, with
		 * shorter, as little as one byte of it */
		if (!c->shorter && at + want < again)
			want = (size_t)(again - at);
		int n = build_iov(iov, MAXV, buf, at, want, c->shape, &seed);
		size_t offered = 0;
		for (int i = 0; i < n; i++)
			offered += iov[i].iov_len;
		ssize_t r = uiw_stream_sendv(c->s, iov, n);
		c->calls++;
		again = at + offered;
		if (r == -EAGAIN || (r > 0 && (size_t)r < offered)) {
			c->shorts++;
			struct pollfd p = {.fd = uiw_stream_fd(c->s), .events = POLLOUT};
			(void)poll(&p, 1, 100);
		}
		if (r == -EAGAIN)
			continue;
		if (r <= 0) {
			c->rc = r < 0 ? (int)r : -EPIPE;
			break;
		}
		at += (uint64_t)r;
	}
	if (at != TOTAL && !c->rc)
		c->rc = -ETIMEDOUT;
	free(buf);
	return NULL;
}

static void *receiver(void *arg)
{
	struct side *c = arg;
	enum { RBUF = 200 * 1024 };
	uint8_t *buf = malloc(RBUF);
	unsigned seed = 11;
	int64_t end = now_ms() + 60000;

	c->rc = 0;
	while (buf && c->got < TOTAL && now_ms() < end) {
		/* pause now and then: the sender's socket fills up */
		if (rand_r(&seed) % 64 == 0) {
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
		size_t len = 1 + (size_t)rand_r(&seed) % RBUF;
		struct iovec iov = {buf, len};
		ssize_t r = uiw_stream_recvv(c->s, &iov, 1);
		if (r == -EAGAIN) {
			if (!c->s->ops->rx_buffered(c->s)) {
				struct pollfd p = {.fd = uiw_stream_fd(c->s), .events = POLLIN};
				(void)poll(&p, 1, 100);
			}
			continue;
		}
		if (r <= 0) {
			c->rc = r < 0 ? (int)r : -ECONNRESET;
			break;
		}
		for (ssize_t k = 0; k < r && !c->bad_at; k++)
			if (buf[k] != pat(c->got + (uint64_t)k))
				c->bad_at = c->got + (uint64_t)k + 1;
		c->got += (uint64_t)r;
		if (c->bad_at)
			break;
	}
	free(buf);
	return NULL;
}

/* One connection over loopback with socket buffers of 8 KiB (the kernel
 * doubles and rounds them), TLS with a PSK, TOTAL bytes client to server
 * in the given shape. */
static void run(int shape, bool shorter)
{
	/* the process's TLS options: the stream keeps a pointer to the
	 * first ones it sees (the engine's configuration) */
	static struct uiw_tls_opts o;
	memset(&o, 0, sizeof(o));
	o.mode = UIW_TLS_ON;
	o.ciphers = "TLS_AES_128_GCM_SHA256";
	o.psk_len = 32;
	for (int i = 0; i < o.psk_len; i++)
		o.psk[i] = (uint8_t)(i * 7 + 1);

	struct uiw_tcp_opts t;
	memset(&t, 0, sizeof(t));
	t.sndbuf = 8192;
	t.rcvbuf = 8192;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int l = uiw_tcp_listen((struct sockaddr *)&a, 4, false, &t);
	assert_true(l >= 0);
	socklen_t al = sizeof(a);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	int cfd = uiw_tcp_connect(NULL, (struct sockaddr *)&a, 5000, 0, &t);
	assert_true(cfd >= 0);
	struct pollfd p = {.fd = l, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 5000), 1);
	int sfd = accept(l, NULL, NULL);
	assert_true(sfd >= 0);
	close(l);

	struct side c = {.s = uiw_stream_tcp(cfd), .o = &o, .shape = shape, .shorter = shorter};
	struct side s = {.s = uiw_stream_tcp(sfd), .o = &o};
	assert_non_null(c.s);
	assert_non_null(s.s);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, client_hs, &c), 0);
	s.rc = uiw_tls_accept(&s.s, &o, 5000);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);
	assert_int_equal(s.rc, 0);
	assert_true(uiw_stream_is_tls(c.s));
	assert_true(uiw_stream_is_tls(s.s));

	pthread_t ts, tr;
	assert_int_equal(pthread_create(&tr, NULL, receiver, &s), 0);
	assert_int_equal(pthread_create(&ts, NULL, sender, &c), 0);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	print_message("shape %d%s: %u sendv calls, %u short, %llu bytes received\n", shape,
		      shorter ? " (shorter offers)" : "", c.calls, c.shorts,
		      (unsigned long long)s.got);
	assert_int_equal(c.rc, 0);
	assert_int_equal(s.rc, 0);
	assert_int_equal(s.bad_at, 0);
	assert_int_equal(s.got, TOTAL);
	/* the socket was full often: the held records were exercised */
	assert_true(c.shorts > 10);
	c.s->ops->destroy(c.s);
	s.s->ops->destroy(s.s);
}

static void test_fpdu_gathers(void **state)
{
	(void)state;
	run(0, false);
}

static void test_tiny_pieces(void **state)
{
	(void)state;
	run(1, false);
}

/* A caller that offers less than what it offered before (the stream does
 * not depend on seeing the same bytes, only on their order). */
static void test_shorter_offers(void **state)
{
	(void)state;
	run(0, true);
	run(1, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fpdu_gathers),
	    cmocka_unit_test(test_tiny_pieces),
	    cmocka_unit_test(test_shorter_offers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
