/* iwpm client and responder on loopback, on kernel-chosen UDP ports (never
 * 3935, so test runs can go in parallel): ACCEPT / ACK, REJECT, mapped
 * listeners, duplicate REQUESTs, retransmission, the timeout bound, ICMP
 * unreachable, fork. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "iwpm/iwpm.h"
#include "iwpm/iwpm_wire.h"

static uint16_t resp_port; /* the responder under test */

/* Upper time bounds allow this much scheduling delay (loaded CI machines,
 * sanitizers); the library itself returns within a few ms of its budget. */
#define SLACK_MS 100

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct sockaddr_storage sa(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss = {0};

	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (void *)&ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (void *)&ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	}
	return ss;
}

#define SA(x) ((struct sockaddr *)&(x))

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	uint16_t p = 0;

	iwpm_sockaddr_to_wire((const struct sockaddr *)ss, NULL, NULL, &p);
	return p;
}

/* A UDP socket on family's loopback with a kernel-chosen port. */
static int udp_bound(int family, uint16_t *port)
{
	struct sockaddr_storage ss = sa(family == AF_INET ? "127.0.0.1" : "::1", 0);
	socklen_t len = sizeof(ss);
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(
	    bind(fd, SA(ss),
		 family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)),
	    0);
	assert_int_equal(getsockname(fd, SA(ss), &len), 0);
	*port = port_of(&ss);
	return fd;
}

static struct iwpm_responder_stats stats(void)
{
	struct iwpm_responder_stats s;

	iwpm_responder_get_stats(&s);
	return s;
}

/* Waits up to 1 s for the responder's ACK counter to reach n. */
static void wait_acks(uint64_t n)
{
	for (int i = 0; i < 100 && stats().acks < n; i++)
		usleep(10000);
	assert_true(stats().acks >= n);
}

static int group_setup(void **state)
{
	(void)state;
	/* never let a test bind the real port 3935 */
	setenv("UIWARP_IWPM_RESPONDER", "0", 1);
	unsetenv("UIWARP_IWPM");
	unsetenv("UIWARP_IWPM_TIMEOUT_MS");
	if (iwpm_responder_start_port(0) != 0)
		return -1;
	resp_port = iwpm_responder_port();
	return resp_port ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	iwpm_responder_stop();
	return 0;
}

static void test_accept_v4(void **state)
{
	struct sockaddr_storage l = sa("127.0.0.1", 5555), local = sa("127.0.0.1", 40001),
				remote = sa("127.0.0.1", 5555), out;
	struct iwpm_responder_stats before = stats();
	enum iwpm_outcome o;

	(void)state;
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0);
	assert_int_equal(iwpm_query_ex(SA(local), SA(remote), 1000, resp_port, &out, &o), 5555);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_memory_equal(&out, &remote, sizeof(struct sockaddr_in));
	wait_acks(before.acks + 1);
	assert_int_equal(stats().accepts, before.accepts + 1);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), -ENOENT);
}

static void test_reject(void **state)
{
	struct sockaddr_storage remote = sa("127.0.0.1", 5556), out;
	struct iwpm_responder_stats before = stats();
	enum iwpm_outcome o;
	int64_t t0 = now_ms();

	(void)state;
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 1000, resp_port, &out, &o), 5556);
	assert_int_equal(o, IWPM_REJECTED);
	assert_true(now_ms() - t0 < 100 + SLACK_MS);
	assert_int_equal(port_of(&out), 5556);
	assert_int_equal(stats().rejects, before.rejects + 1);
}

static void test_wildcards_and_v6(void **state)
{
	struct sockaddr_storage any4 = sa("0.0.0.0", 6000), any6 = sa("::", 6001),
				one6 = sa("::1", 6002), out;
	struct sockaddr_storage r4 = sa("127.0.0.1", 6000), r4b = sa("127.0.0.1", 6001),
				r6 = sa("::1", 6001), r6b = sa("::1", 6002), r6c = sa("::1", 6000),
				mapped = sa("::ffff:127.0.0.1", 6000);
	enum iwpm_outcome o;

	(void)state;
	assert_int_equal(iwpm_responder_add_listener(SA(any4)), 0);
	assert_int_equal(iwpm_responder_add_listener(SA(any6)), 0);
	assert_int_equal(iwpm_responder_add_listener(SA(one6)), 0);
	assert_int_equal(iwpm_query_ex(NULL, SA(r4), 1000, resp_port, &out, &o), 6000);
	assert_int_equal(o, IWPM_ACCEPTED);
	/* [::] is dual-stack */
	assert_int_equal(iwpm_query_ex(NULL, SA(r4b), 1000, resp_port, &out, &o), 6001);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_query_ex(NULL, SA(r6), 1000, resp_port, &out, &o), 6001);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_memory_equal(&out, &r6, sizeof(struct sockaddr_in6));
	assert_int_equal(iwpm_query_ex(NULL, SA(r6b), 1000, resp_port, &out, &o), 6002);
	assert_int_equal(o, IWPM_ACCEPTED);
	/* 0.0.0.0 is IPv4 only */
	assert_int_equal(iwpm_query_ex(NULL, SA(r6c), 1000, resp_port, &out, &o), 6000);
	assert_int_equal(o, IWPM_REJECTED);
	/* an IPv4-mapped destination is queried as IPv4; the answer keeps
	 * the caller's form */
	assert_int_equal(iwpm_query_ex(NULL, SA(mapped), 1000, resp_port, &out, &o), 6000);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_memory_equal(&out, &mapped, sizeof(struct sockaddr_in6));
	assert_int_equal(iwpm_responder_remove_listener(SA(any4)), 0);
	assert_int_equal(iwpm_responder_remove_listener(SA(any6)), 0);
	assert_int_equal(iwpm_responder_remove_listener(SA(one6)), 0);
	assert_int_equal(iwpm_query_ex(NULL, SA(r4), 1000, resp_port, &out, &o), 6000);
	assert_int_equal(o, IWPM_REJECTED);
}

static void test_specific_ip(void **state)
{
	struct sockaddr_storage l = sa("127.0.0.2", 6100), r1 = sa("127.0.0.2", 6100),
				r2 = sa("127.0.0.1", 6100), out;
	enum iwpm_outcome o;

	(void)state;
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0);
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0); /* counted twice */
	assert_int_equal(iwpm_query_ex(NULL, SA(r1), 1000, resp_port, &out, &o), 6100);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_query_ex(NULL, SA(r2), 1000, resp_port, &out, &o), 6100);
	assert_int_equal(o, IWPM_REJECTED);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
	assert_int_equal(iwpm_query_ex(NULL, SA(r1), 1000, resp_port, &out, &o), 6100);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
	assert_int_equal(iwpm_query_ex(NULL, SA(r1), 1000, resp_port, &out, &o), 6100);
	assert_int_equal(o, IWPM_REJECTED);
}

/* Mapped listeners (tgtd: 0.0.0.0:P and an AFONLY [::]:P, both held by its
 * iSCSI/TCP portal, listen on ports of their own): a query for P gets the
 * mapped port of the listener of its IP version; the v6only one answers no
 * IPv4 query; iwpm_responder_holds follows TCP's bind clashes. */
static void test_mapping(void **state)
{
	struct sockaddr_storage any4 = sa("0.0.0.0", 6200), any6 = sa("::", 6200),
				r4 = sa("127.0.0.1", 6200), r6 = sa("::1", 6200),
				lo4 = sa("127.0.0.1", 6200), one6 = sa("::1", 6200), out;
	enum iwpm_outcome o;

	(void)state;
	assert_false(iwpm_responder_holds(SA(lo4), false));
	assert_int_equal(iwpm_responder_add_mapping(SA(any6), 6202, true), 0);
	/* v6only: IPv4 queries are not its */
	assert_int_equal(iwpm_query_ex(NULL, SA(r4), 1000, resp_port, &out, &o), 6200);
	assert_int_equal(o, IWPM_REJECTED);
	assert_false(iwpm_responder_holds(SA(lo4), false));
	assert_int_equal(iwpm_responder_add_mapping(SA(any4), 6201, false), 0);
	assert_int_equal(iwpm_query_ex(NULL, SA(r4), 1000, resp_port, &out, &o), 6201);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(port_of(&out), 6201);
	assert_int_equal(iwpm_query_ex(NULL, SA(r6), 1000, resp_port, &out, &o), 6202);
	assert_int_equal(o, IWPM_ACCEPTED);
	/* the clashes of TCP binds */
	assert_true(iwpm_responder_holds(SA(lo4), false));
	assert_true(iwpm_responder_holds(SA(one6), true));
	assert_true(iwpm_responder_holds(SA(any6), false));
	assert_int_equal(iwpm_responder_add_mapping(SA(any4), 0, false), -EINVAL);
	assert_int_equal(iwpm_responder_remove_listener(SA(any4)), 0);
	assert_false(iwpm_responder_holds(SA(lo4), false));
	/* a dual-stack [::] takes IPv4 and clashes with it */
	assert_int_equal(iwpm_responder_remove_listener(SA(any6)), 0);
	assert_int_equal(iwpm_responder_add_mapping(SA(any6), 6203, false), 0);
	assert_true(iwpm_responder_holds(SA(lo4), false));
	assert_int_equal(iwpm_query_ex(NULL, SA(r4), 1000, resp_port, &out, &o), 6203);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_responder_remove_listener(SA(any6)), 0);
	assert_false(iwpm_responder_holds(SA(one6), true));
	assert_int_equal(iwpm_query_ex(NULL, SA(r6), 1000, resp_port, &out, &o), 6200);
	assert_int_equal(o, IWPM_REJECTED);
}

/* Sends a raw datagram to the responder from fd and returns the answer's
 * length (0 if none within 1 s). */
static int exchange(int fd, const uint8_t *msg, int len, uint8_t *ans, bool want_answer)
{
	struct sockaddr_storage to = sa("127.0.0.1", resp_port);
	struct pollfd p = {fd, POLLIN, 0};

	assert_int_equal(sendto(fd, msg, (size_t)len, 0, SA(to), sizeof(struct sockaddr_in)), len);
	if (poll(&p, 1, want_answer ? 1000 : 200) != 1)
		return 0;
	return (int)recv(fd, ans, 128, 0);
}

static void test_duplicate_request(void **state)
{
	struct sockaddr_storage l = sa("127.0.0.1", 6200);
	struct iwpm_msg m = {.type = IWPM_MT_REQ,
			     .ip_ver = 4,
			     .apport = 6200,
			     .cpport = 41000,
			     .mapped_cpport = 41000,
			     .assochandle = 0x1122334455667788ull};
	uint8_t req[64], a1[128], a2[128], a3[128];
	struct iwpm_responder_stats s0 = stats(), s1;
	struct iwpm_msg d;
	uint16_t myport;
	int fd = udp_bound(AF_INET, &myport);

	(void)state;
	inet_pton(AF_INET, "127.0.0.1", m.apipaddr);
	inet_pton(AF_INET, "127.0.0.1", m.cpipaddr);
	memcpy(m.mapped_cpipaddr, m.cpipaddr, 16);
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0);
	assert_int_equal(iwpm_msg_encode(&m, req), 64);

	assert_int_equal(exchange(fd, req, 64, a1, true), 48);
	/* the listener goes away; a retransmitted REQUEST (same handle) still
	 * gets the same ACCEPT */
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
	assert_int_equal(exchange(fd, req, 64, a2, true), 48);
	assert_memory_equal(a1, a2, 48);
	assert_int_equal(iwpm_msg_decode(a1, 48, &d), 0);
	assert_int_equal(d.type, IWPM_MT_ACCEPT);
	assert_int_equal(d.apport, 6200);
	assert_int_equal(d.cpport, 41000);
	assert_true(d.assochandle == m.assochandle);
	assert_memory_equal(a1 + 4, req + 4, 44); /* everything but magic and reserved echoed */
	assert_int_equal(a1[0], 0x14);
	s1 = stats();
	assert_int_equal(s1.duplicates, s0.duplicates + 1);
	assert_int_equal(s1.accepts, s0.accepts + 2);

	/* a new handle is a new question: REJECT now */
	m.assochandle++;
	assert_int_equal(iwpm_msg_encode(&m, req), 64);
	assert_int_equal(exchange(fd, req, 64, a3, true), 48);
	assert_int_equal(a3[0], 0x34);

	/* ACK for the first: no answer; the handle is forgotten, so asking
	 * again is answered afresh (REJECT) */
	m.assochandle--;
	m.type = IWPM_MT_ACK;
	assert_int_equal(iwpm_msg_encode(&m, req), 48);
	assert_int_equal(exchange(fd, req, 48, a3, false), 0);
	wait_acks(s0.acks + 1);
	m.type = IWPM_MT_REQ;
	assert_int_equal(iwpm_msg_encode(&m, req), 64);
	assert_int_equal(exchange(fd, req, 64, a3, true), 48);
	assert_int_equal(a3[0], 0x34);
	assert_int_equal(stats().duplicates, s0.duplicates + 1);

	/* a 48-byte REQUEST (iwpmd accepts it) is answered too; garbage is not */
	m.assochandle += 10;
	assert_int_equal(iwpm_msg_encode(&m, req), 64);
	assert_int_equal(exchange(fd, req, 48, a3, true), 48);
	req[0] = 0x05;
	assert_int_equal(exchange(fd, req, 64, a3, false), 0);
	assert_int_equal(exchange(fd, req, 20, a3, false), 0);
	assert_true(stats().bad >= s0.bad + 2);
	close(fd);
}

/* A scripted port mapper on a loopback UDP port. */
struct fake {
	int fd;
	uint16_t port;
	int drop;   /* REQUESTs to ignore before answering */
	int answer; /* IWPM_MT_ACCEPT / IWPM_MT_REJECT, or -1: never */
	uint16_t apport;
	bool noise; /* first send answers with a wrong handle and from a wrong port */
	int reqs;   /* REQUESTs seen */
	uint64_t handles[16];
	int acks;
	uint8_t ack[64];
	int ack_len;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int64_t end = now_ms() + 3000;

	while (now_ms() < end) {
		struct pollfd p = {f->fd, POLLIN, 0};
		uint8_t buf[128], out[64];
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		struct iwpm_msg m;
		ssize_t n;

		if (poll(&p, 1, 100) != 1)
			continue;
		n = recvfrom(f->fd, buf, sizeof(buf), 0, SA(from), &flen);
		if (n < 0 || iwpm_msg_decode(buf, (size_t)n, &m))
			continue;
		if (m.type == IWPM_MT_ACK) {
			f->acks++;
			memcpy(f->ack, buf, (size_t)n);
			f->ack_len = (int)n;
			break;
		}
		if (m.type != IWPM_MT_REQ || n != 64)
			continue;
		if (f->reqs < 16)
			f->handles[f->reqs] = m.assochandle;
		if (f->reqs++ < f->drop || f->answer < 0)
			continue;
		m.type = (uint8_t)f->answer;
		if (f->answer == IWPM_MT_ACCEPT)
			m.apport = f->apport;
		if (f->noise) {
			uint16_t other_port;
			int other = udp_bound(AF_INET, &other_port);
			struct iwpm_msg w = m;

			/* right handle, wrong source port */
			iwpm_msg_encode(&m, out);
			sendto(other, out, 48, 0, SA(from), flen);
			close(other);
			/* wrong handle, right port */
			w.assochandle ^= 1;
			w.apport = 1;
			iwpm_msg_encode(&w, out);
			sendto(f->fd, out, 48, 0, SA(from), flen);
		}
		iwpm_msg_encode(&m, out);
		sendto(f->fd, out, 48, 0, SA(from), flen);
		if (f->answer == IWPM_MT_REJECT)
			break;
	}
	return NULL;
}

static void run_fake(struct fake *f, pthread_t *t)
{
	f->fd = udp_bound(AF_INET, &f->port);
	assert_int_equal(pthread_create(t, NULL, fake_main, f), 0);
}

static void test_retransmission(void **state)
{
	struct fake f = {.drop = 2, .answer = IWPM_MT_ACCEPT, .apport = 50123};
	struct sockaddr_storage local = sa("127.0.0.1", 42000), remote = sa("127.0.0.1", 7000), out;
	enum iwpm_outcome o;
	struct iwpm_msg ack;
	pthread_t t;
	int64_t t0;

	(void)state;
	run_fake(&f, &t);
	t0 = now_ms();
	/* sends at 0, 50, 150 ms: the third is answered */
	assert_int_equal(iwpm_query_ex(SA(local), SA(remote), 1000, f.port, &out, &o), 50123);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_true(now_ms() - t0 >= 140);
	assert_true(now_ms() - t0 < 400 + SLACK_MS);
	assert_int_equal(port_of(&out), 50123);
	pthread_join(t, NULL);
	close(f.fd);
	assert_int_equal(f.reqs, 3);
	assert_true(f.handles[0] == f.handles[1] && f.handles[1] == f.handles[2]);
	assert_true(f.handles[0] != 0);
	/* the ACK: 48 bytes, the ACCEPT echoed with type ACK */
	assert_int_equal(f.acks, 1);
	assert_int_equal(f.ack_len, 48);
	assert_int_equal(f.ack[0], 0x24);
	assert_int_equal(iwpm_msg_decode(f.ack, 48, &ack), 0);
	assert_true(ack.assochandle == f.handles[0]);
	assert_int_equal(ack.apport, 50123);
	assert_int_equal(ack.cpport, 42000);
}

static void test_ignores_foreign_answers(void **state)
{
	struct fake f = {.answer = IWPM_MT_ACCEPT, .apport = 50124, .noise = true};
	struct sockaddr_storage remote = sa("127.0.0.1", 7001), out;
	enum iwpm_outcome o;
	pthread_t t;

	(void)state;
	run_fake(&f, &t);
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 1000, f.port, &out, &o), 50124);
	assert_int_equal(o, IWPM_ACCEPTED);
	pthread_join(t, NULL);
	close(f.fd);
	assert_int_equal(f.reqs, 1);
}

static void test_fake_reject(void **state)
{
	struct fake f = {.answer = IWPM_MT_REJECT};
	struct sockaddr_storage remote = sa("127.0.0.1", 7002), out;
	enum iwpm_outcome o;
	pthread_t t;

	(void)state;
	run_fake(&f, &t);
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 1000, f.port, &out, &o), 7002);
	assert_int_equal(o, IWPM_REJECTED);
	pthread_join(t, NULL);
	close(f.fd);
	assert_int_equal(f.acks, 0);
}

/* A mapper port that swallows everything (bound, never answers: no ICMP),
 * as a firewall that drops UDP 3935 does. */
static void test_timeout_bound(void **state)
{
	uint16_t port;
	int fd = udp_bound(AF_INET, &port);
	struct sockaddr_storage remote = sa("127.0.0.1", 7003), out;
	enum iwpm_outcome o;
	int64_t t0, dt;

	(void)state;
	t0 = now_ms();
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 300, port, &out, &o), 7003);
	dt = now_ms() - t0;
	assert_int_equal(o, IWPM_TIMEDOUT);
	assert_true(dt >= 295 && dt < 300 + SLACK_MS);

	/* the default comes from UIWARP_IWPM_TIMEOUT_MS */
	setenv("UIWARP_IWPM_TIMEOUT_MS", "120", 1);
	t0 = now_ms();
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), -1, port, &out, &o), 7003);
	dt = now_ms() - t0;
	assert_int_equal(o, IWPM_TIMEDOUT);
	assert_true(dt >= 115 && dt < 120 + SLACK_MS);
	unsetenv("UIWARP_IWPM_TIMEOUT_MS");
	assert_int_equal(iwpm_timeout_ms(), IWPM_DEFAULT_TIMEOUT_MS);
	setenv("UIWARP_IWPM_TIMEOUT_MS", "999999", 1);
	assert_int_equal(iwpm_timeout_ms(), IWPM_MAX_TIMEOUT_MS);
	unsetenv("UIWARP_IWPM_TIMEOUT_MS");

	/* 3 REQUESTs in 300 ms (0, 50, 150) */
	int n = 0;
	uint8_t buf[128];

	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		n++;
	/* + 2 in 120 ms (0, 50); fewer if the scheduler delayed a send past the
	 * deadline, never more */
	assert_true(n >= 2 && n <= 3 + 2);
	close(fd);
}

/* Nothing bound on the mapper port: the ICMP port unreachable ends the
 * query at once. */
static void test_no_mapper(void **state)
{
	uint16_t port;
	int fd = udp_bound(AF_INET, &port);
	struct sockaddr_storage remote = sa("127.0.0.1", 7004), out;
	enum iwpm_outcome o;
	int64_t t0;

	(void)state;
	close(fd);
	t0 = now_ms();
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 2000, port, &out, &o), 7004);
	assert_int_equal(o, IWPM_NO_MAPPER);
	assert_true(now_ms() - t0 < 100 + SLACK_MS); /* vs the 2 s budget */
}

static void test_disabled_and_errors(void **state)
{
	struct sockaddr_storage remote = sa("127.0.0.1", 7005), zero = sa("127.0.0.1", 0),
				l6 = sa("::1", 1), out;
	struct sockaddr_storage unix_sa = {.ss_family = AF_UNIX};
	enum iwpm_outcome o;
	int64_t t0 = now_ms();

	(void)state;
	setenv("UIWARP_IWPM", "0", 1);
	assert_false(iwpm_enabled());
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 1000, resp_port, &out, &o), 7005);
	assert_int_equal(o, IWPM_DISABLED);
	assert_int_equal(iwpm_query(NULL, SA(remote), -1, &out), 7005);
	assert_int_equal(iwpm_responder_start(), IWPM_RESPONDER_DISABLED);
	unsetenv("UIWARP_IWPM");
	assert_true(iwpm_enabled());
	assert_int_equal(iwpm_query_ex(NULL, SA(remote), 0, resp_port, &out, &o), 7005);
	assert_int_equal(o, IWPM_DISABLED);
	assert_true(now_ms() - t0 < 20 + SLACK_MS);

	assert_int_equal(iwpm_query(NULL, NULL, 100, &out), -EINVAL);
	assert_int_equal(iwpm_query(NULL, SA(remote), 100, NULL), -EINVAL);
	assert_int_equal(iwpm_query(NULL, SA(zero), 100, &out), -EINVAL);
	assert_int_equal(iwpm_query(NULL, SA(unix_sa), 100, &out), -EAFNOSUPPORT);
	assert_int_equal(iwpm_query(SA(l6), SA(remote), 100, &out), -EINVAL);
	assert_int_equal(iwpm_responder_add_listener(SA(zero)), -EINVAL);
	assert_int_equal(iwpm_responder_add_listener(SA(unix_sa)), -EAFNOSUPPORT);
	assert_int_equal(iwpm_responder_add_listener(NULL), -EINVAL);
	assert_string_equal(iwpm_outcome_str(IWPM_ACCEPTED), "accepted");
}

static void test_busy_and_restart(void **state)
{
	uint16_t port;
	int fd = udp_bound(AF_INET, &port);
	struct sockaddr_storage l = sa("127.0.0.1", 6300), r = sa("127.0.0.1", 6300), out;
	enum iwpm_outcome o;

	(void)state;
	/* running: same port or 0 is fine, another port is not */
	assert_int_equal(iwpm_responder_start_port(resp_port), 0);
	assert_int_equal(iwpm_responder_start_port(0), 0);
	assert_int_equal(iwpm_responder_start_port(port), -EALREADY);

	iwpm_responder_stop();
	assert_int_equal(iwpm_responder_port(), 0);
	iwpm_responder_stop(); /* idempotent */
	/* someone else owns the port (as iwpmd owns 3935) */
	assert_int_equal(iwpm_responder_start_port(port), IWPM_RESPONDER_BUSY);
	assert_int_equal(iwpm_responder_port(), 0);
	close(fd);

	/* listeners registered while stopped are answered after a start */
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0);
	assert_int_equal(iwpm_responder_start_port(resp_port), 0);
	assert_int_equal(iwpm_responder_port(), resp_port);
	assert_int_equal(iwpm_query_ex(NULL, SA(r), 1000, resp_port, &out, &o), 6300);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
}

/* A fork child does not inherit a running responder; the parent's keeps
 * answering. */
static void test_fork(void **state)
{
	struct sockaddr_storage l = sa("127.0.0.1", 6400), r = sa("127.0.0.1", 6400), out;
	enum iwpm_outcome o;
	int status;
	pid_t pid;

	(void)state;
	assert_int_equal(iwpm_responder_add_listener(SA(l)), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int ok = iwpm_responder_port() == 0;

		iwpm_responder_stop(); /* must not touch the parent's thread */
		/* the parent still holds the port: busy */
		ok = ok && iwpm_responder_start_port(resp_port) == IWPM_RESPONDER_BUSY;
		_exit(ok ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(iwpm_responder_port(), resp_port);
	assert_int_equal(iwpm_query_ex(NULL, SA(r), 1000, resp_port, &out, &o), 6400);
	assert_int_equal(o, IWPM_ACCEPTED);
	assert_int_equal(iwpm_responder_remove_listener(SA(l)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_accept_v4),	     cmocka_unit_test(test_reject),
	    cmocka_unit_test(test_wildcards_and_v6), cmocka_unit_test(test_specific_ip),
	    cmocka_unit_test(test_mapping),	     cmocka_unit_test(test_duplicate_request),
	    cmocka_unit_test(test_retransmission),   cmocka_unit_test(test_ignores_foreign_answers),
	    cmocka_unit_test(test_fake_reject),	     cmocka_unit_test(test_timeout_bound),
	    cmocka_unit_test(test_no_mapper),	     cmocka_unit_test(test_disabled_and_errors),
	    cmocka_unit_test(test_busy_and_restart), cmocka_unit_test(test_fork),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
