/* rdma_cm event channels: fd semantics (pollable, readable exactly while
 * events are queued, O_NONBLOCK gives EAGAIN, blocking wakes up), event
 * fields, rdma_destroy_id waiting for acks, a channel destroyed under a
 * waiting thread (churn), and the calls that must fail cleanly (rsocket
 * family, multicast, SRQ, unknown options). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <arpa/inet.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include "cm_util.h"

static struct sockaddr_in lo(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void test_fd_semantics(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = lo(4791);
	int fl;

	(void)state;
	assert_non_null(ch);
	assert_true(ch->fd >= 0);
	assert_false(readable(ch->fd));
	fl = fcntl(ch->fd, F_GETFL);
	assert_int_equal(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	errno = 0;
	assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
	assert_int_equal(errno, EAGAIN);

	assert_int_equal(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP), 0);
	assert_ptr_equal(id->channel, ch);
	assert_ptr_equal(id->context, (void *)0x1234);
	assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
	assert_true(readable(ch->fd));
	assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_int_equal(ev->status, 0);
	assert_false(readable(ch->fd));
	assert_non_null(id->verbs);
	assert_int_equal(rdma_get_local_addr(id)->sa_family, AF_INET);
	assert_int_equal(((struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr.s_addr,
			 htonl(INADDR_LOOPBACK));
	assert_int_equal(rdma_get_dst_port(id), htons(4791));
	assert_int_equal(rdma_ack_cm_event(ev), 0);

	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 1000);
	assert_non_null(ev);
	rdma_ack_cm_event(ev);
	errno = 0;
	assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
	assert_int_equal(errno, EAGAIN);

	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

struct waiter {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	int ret;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->ret = rdma_get_cm_event(w->ch, &w->ev);
	return NULL;
}

/* A thread blocked in rdma_get_cm_event wakes up when another thread's
 * call queues an event (rping's CM thread). */
static void test_blocking_wakeup(void **state)
{
	struct waiter w = {.ret = -2};
	struct rdma_cm_id *id;
	struct sockaddr_in dst = lo(4791);
	pthread_t t;
	struct timespec ts = {0, 50 * 1000 * 1000};

	(void)state;
	w.ch = rdma_create_event_channel();
	assert_non_null(w.ch);
	assert_int_equal(rdma_create_id(w.ch, &id, NULL, RDMA_PS_IB), 0);
	assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(w.ret, -2);
	assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.ret, 0);
	assert_int_equal(w.ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(w.ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(w.ch);
}

struct destroyer {
	struct rdma_cm_id *id;
	volatile int done;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

/* rdma_destroy_id waits until the events it delivered are acked; queued
 * ones are dropped. */
static void test_destroy_waits_for_ack(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct destroyer d = {0};
	struct sockaddr_in dst = lo(4791);
	struct rdma_cm_event *ev;
	struct timespec ts = {0, 100 * 1000 * 1000};
	pthread_t t;

	(void)state;
	assert_int_equal(rdma_create_id(ch, &d.id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(d.id, NULL, (struct sockaddr *)&dst, 2000), 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1000);
	assert_non_null(ev);
	assert_int_equal(rdma_resolve_route(d.id, 2000), 0); /* stays queued */
	assert_true(readable(ch->fd));
	assert_int_equal(pthread_create(&t, NULL, destroy_thread, &d), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(d.done, 0);
	rdma_ack_cm_event(ev);
	pthread_join(t, NULL);
	assert_int_equal(d.done, 1);
	assert_false(readable(ch->fd)); /* the queued ROUTE_RESOLVED went with the id */
	rdma_destroy_event_channel(ch);
}

struct churn_reader {
	struct rdma_event_channel *ch;
	volatile pid_t tid;
	int err; /* errno of a failed rdma_get_cm_event: must stay 0 */
	int got;
};

/* One call of rdma_get_cm_event, as rping's CM thread makes it; acks what
 * it gets. Never calls again: a call made after the channel is destroyed
 * would be the caller's use-after-free with any librdmacm. */
static void *churn_thread(void *arg)
{
	struct churn_reader *r = arg;
	struct rdma_cm_event *ev;

	r->tid = (pid_t)syscall(SYS_gettid);
	if (rdma_get_cm_event(r->ch, &ev)) {
		r->err = errno ? errno : -1;
		return NULL;
	}
	r->got = 1;
	rdma_ack_cm_event(ev);
	return NULL;
}

/* Whether thread tid of this process sleeps in read(2) now. */
static bool blocked_in_read(pid_t tid)
{
	char path[64];
	long nr = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fscanf(f, "%ld", &nr) != 1)
		nr = -1;
	fclose(f);
	return nr == SYS_read;
}

/* Churn of the pattern that crashed in rdma_get_cm_event's retry loop
 * (rping, iscsi-test-cu): a thread waits on the channel, an event is
 * queued, and the main thread destroys the id (dropping the event whose
 * token the waiter may just have read) and the channel at once. The waiter
 * must never touch the freed channel: it returns the event, or stays
 * blocked (as on the kernel rdma_cm) and is cancelled; it never fails, and
 * the channel's descriptor is closed once the channel is gone. */
static void test_destroy_channel_under_reader(void **state)
{
	struct sockaddr_in dst = lo(4791);
	int got = 0;

	(void)state;
	for (int i = 0; i < 2000; i++) {
		struct churn_reader r = {0};
		struct timespec nap = {0, 20000};
		struct rdma_cm_id *id;
		pthread_t t;
		int fd, waited = 0;

		r.ch = rdma_create_event_channel();
		assert_non_null(r.ch);
		fd = r.ch->fd;
		assert_int_equal(rdma_create_id(r.ch, &id, NULL, RDMA_PS_TCP), 0);
		assert_int_equal(pthread_create(&t, NULL, churn_thread, &r), 0);
		while (!r.tid || !blocked_in_read(r.tid)) {
			nanosleep(&nap, NULL);
			if (++waited > 100000)
				fail_msg("the waiter never blocked in read()");
		}
		assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
		for (volatile int spin = 0; spin < (i % 64) * 40; spin++)
			; /* vary where the waiter is when the id goes */
		assert_int_equal(rdma_destroy_id(id), 0);
		rdma_destroy_event_channel(r.ch);
		pthread_cancel(t); /* ESRCH if it returned: fine */
		assert_int_equal(pthread_join(t, NULL), 0);
		if (r.err)
			fail_msg("round %d: rdma_get_cm_event failed: %s", i, strerror(r.err));
		errno = 0;
		assert_int_equal(fcntl(fd, F_GETFD), -1); /* closed with the channel */
		assert_int_equal(errno, EBADF);
		got += r.got;
	}
	print_message("2000 rounds, %d events taken before the destroy\n", got);
}

static void *late_thread(void *arg)
{
	struct waiter *w = arg;

	w->ret = rdma_get_cm_event(w->ch, &w->ev);
	w->ev = (void *)(intptr_t)errno;
	return NULL;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* rping's client, once in ~2500 runs: its CM thread acks DISCONNECTED,
 * which lets main's rdma_destroy_id return; main destroys the channel and
 * returns while the CM thread loops back into rdma_get_cm_event on it. That
 * call must read no freed memory (ASan) and not fail at once (rping exits
 * 255 on the error before main's exit): it waits 2 s, then EINVAL; with the
 * fd O_NONBLOCK the EINVAL is immediate. Channels destroyed in between (the
 * quarantine keeps the last 64) do not change that. */
static void test_late_caller_after_destroy(void **state)
{
	struct waiter w = {.ret = -2};
	struct timespec ts = {0, 300 * 1000 * 1000};
	struct rdma_cm_event *ev;
	pthread_t t;
	long long t0;

	(void)state;
	w.ch = rdma_create_event_channel();
	assert_non_null(w.ch);
	rdma_destroy_event_channel(w.ch);
	for (int i = 0; i < 10; i++) {
		struct rdma_event_channel *o = rdma_create_event_channel();

		assert_non_null(o);
		rdma_destroy_event_channel(o);
	}
	t0 = now_ms();
	assert_int_equal(pthread_create(&t, NULL, late_thread, &w), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(w.ret, -2); /* still waiting */
	pthread_join(t, NULL);
	assert_int_equal(w.ret, -1);
	assert_int_equal((int)(intptr_t)w.ev, EINVAL);
	assert_true(now_ms() - t0 >= 1900);
	print_message("late caller: EINVAL after %lld ms\n", now_ms() - t0);

	/* cancellable while it waits, like a blocked reader */
	w.ch = rdma_create_event_channel();
	assert_non_null(w.ch);
	rdma_destroy_event_channel(w.ch);
	w.ret = -2;
	t0 = now_ms();
	assert_int_equal(pthread_create(&t, NULL, late_thread, &w), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(pthread_cancel(t), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.ret, -2);
	assert_true(now_ms() - t0 < 1500);

	w.ch = rdma_create_event_channel();
	assert_non_null(w.ch);
	assert_int_equal(fcntl(w.ch->fd, F_SETFL, fcntl(w.ch->fd, F_GETFL) | O_NONBLOCK), 0);
	rdma_destroy_event_channel(w.ch);
	t0 = now_ms();
	errno = 0;
	assert_int_equal(rdma_get_cm_event(w.ch, &ev), -1);
	assert_int_equal(errno, EINVAL);
	assert_true(now_ms() - t0 < 500);
}

/* 2000 events queued with none read (an application that connects many
 * ids before it reads its channel): queueing never blocks, the descriptor
 * stays readable until the last one is taken, and every event arrives.
 * A token byte per event filled the channel's socket after a few hundred
 * and blocked the queueing thread while it held the CM lock, so the reader
 * could never drain it (a 1000-QP teardown hung that way); the alarm turns
 * such a hang into a failure. */
static void test_many_unread_events(void **state)
{
	enum { N = 2000 };
	static struct rdma_cm_id *ids[N];
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = lo(4791);
	struct rdma_cm_event *ev;
	int got = 0;

	(void)state;
	assert_non_null(ch);
	alarm(60);
	for (int i = 0; i < N; i++) {
		assert_int_equal(rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP), 0);
		assert_int_equal(rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&dst, 2000), 0);
	}
	for (int i = 0; i < N; i++) {
		assert_true(readable(ch->fd));
		assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
		got += ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
		assert_int_equal(rdma_ack_cm_event(ev), 0);
	}
	alarm(0);
	assert_int_equal(got, N);
	assert_false(readable(ch->fd));
	for (int i = 0; i < N; i++)
		assert_int_equal(rdma_destroy_id(ids[i]), 0);
	rdma_destroy_event_channel(ch);
}

static void test_event_str(void **state)
{
	(void)state;
	assert_string_equal(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED),
			    "RDMA_CM_EVENT_ADDR_RESOLVED");
	assert_string_equal(rdma_event_str(RDMA_CM_EVENT_DISCONNECTED),
			    "RDMA_CM_EVENT_DISCONNECTED");
	assert_string_equal(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT),
			    "RDMA_CM_EVENT_TIMEWAIT_EXIT");
	assert_string_equal(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT");
}

static void test_unsupported(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in a = lo(0);
	uint8_t tos = 0;
	int one = 1;

	(void)state;
	errno = 0;
	assert_int_equal(rsocket(AF_INET, SOCK_STREAM, 0), -1);
	assert_int_equal(errno, ENOSYS);
	errno = 0;
	assert_int_equal(rbind(3, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(errno, ENOSYS);
	errno = 0;
	assert_int_equal(rsend(3, "x", 1, 0), -1);
	assert_int_equal(errno, ENOSYS);
	assert_int_equal(rpoll(NULL, 0, 0), 0);

	errno = 0;
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), -1);
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	errno = 0;
	assert_int_equal(rdma_join_multicast(id, (struct sockaddr *)&a, NULL), -1);
	assert_int_equal(errno, ENOSYS);
	errno = 0;
	assert_int_equal(rdma_create_srq(id, NULL, NULL), -1);
	assert_int_equal(errno, ENOSYS);
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0);
	assert_int_equal(
	    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)), 0);
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, 4), 0);
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, 1),
			 0);
	errno = 0;
	assert_int_equal(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &one, 4), -1);
	assert_int_equal(errno, ENOSYS);
	errno = 0;
	assert_int_equal(rdma_connect(id, NULL), -1); /* no route, no QP */
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(rdma_disconnect(id), -1);
	assert_int_equal(errno, EINVAL);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fd_semantics),
	    cmocka_unit_test(test_blocking_wakeup),
	    cmocka_unit_test(test_destroy_waits_for_ack),
	    cmocka_unit_test(test_event_str),
	    cmocka_unit_test(test_unsupported),
	    cmocka_unit_test(test_destroy_channel_under_reader),
	    cmocka_unit_test(test_many_unread_events),
	    cmocka_unit_test(test_late_caller_after_destroy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
