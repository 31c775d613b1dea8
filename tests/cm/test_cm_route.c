/* Address and route resolution against the kernel's routing table (the
 * rtnetlink lookup of rdma_resolve_addr / rdma_resolve_route), in a private
 * network namespace (unshare; root only, else skipped with 77) whose
 * routes the test sets with ip(8): no route, unreachable, prohibit and
 * blackhole routes give ADDR_ERROR with the kernel's errno promptly (never
 * a hang), a route removed after rdma_resolve_addr gives ROUTE_ERROR, and
 * reachable destinations (IPv4, IPv6, IPv6 link-local with a scope id)
 * resolve with the source address the route prefers; which binds give the
 * id the device (a loopback address only while the port is on lo). */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "cm_util.h"

static int sh(const char *cmd)
{
	int r = system(cmd);

	if (r != 0)
		fprintf(stderr, "command failed (%d): %s\n", r, cmd);
	return r;
}

static struct sockaddr_storage addr(const char *ip, const char *scope)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(7471);
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
		if (scope)
			s6->sin6_scope_id = if_nametoindex(scope);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(7471);
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	}
	return ss;
}

/* rdma_resolve_addr toward ip; returns the event (the caller acks) after
 * checking it came within 2 s. */
static struct rdma_cm_event *resolve(struct rdma_event_channel *ch, struct rdma_cm_id **id,
				     const char *ip, const char *scope)
{
	struct sockaddr_storage dst = addr(ip, scope);
	struct rdma_cm_event *ev;

	assert_int_equal(rdma_create_id(ch, id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(*id, NULL, (struct sockaddr *)&dst, 2000), 0);
	ev = cm_wait_event(ch, 2000);
	assert_non_null(ev);
	assert_ptr_equal(ev->id, *id);
	return ev;
}

static void expect_addr_error(const char *ip, int status)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	assert_non_null(ch);
	ev = resolve(ch, &id, ip, NULL);
	if (ev->event != RDMA_CM_EVENT_ADDR_ERROR || ev->status != status)
		fail_msg("%s: got %s status %d, wanted ADDR_ERROR %d", ip,
			 rdma_event_str(ev->event), ev->status, status);
	rdma_ack_cm_event(ev);
	errno = 0;
	assert_int_equal(rdma_resolve_route(id, 2000), -1); /* no address */
	assert_int_equal(errno, EINVAL);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void test_unreachable(void **state)
{
	(void)state;
	expect_addr_error("203.0.113.200", -ENETUNREACH); /* no route at all */
	expect_addr_error("203.0.113.5", -EHOSTUNREACH);
	expect_addr_error("203.0.113.70", -EACCES);
	expect_addr_error("203.0.113.130", -EINVAL);
	expect_addr_error("2001:db8:99::1", -ENETUNREACH);
}

/* A synchronous id (rdma_create_ep) fails with the errno at once. */
static void test_unreachable_sync(void **state)
{
	struct rdma_addrinfo hints, *res;
	struct rdma_cm_id *id;

	(void)state;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	assert_int_equal(rdma_getaddrinfo("203.0.113.9", "7471", &hints, &res), 0);
	errno = 0;
	assert_int_equal(rdma_create_ep(&id, res, NULL, NULL), -1);
	assert_int_equal(errno, EHOSTUNREACH);
	rdma_freeaddrinfo(res);
}

static void expect_resolved(const char *ip, const char *scope, const char *want_src)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	char got[INET6_ADDRSTRLEN] = "";
	struct sockaddr *src;

	assert_non_null(ch);
	ev = resolve(ch, &id, ip, scope);
	if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		fail_msg("%s: got %s status %d", ip, rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	src = rdma_get_local_addr(id);
	if (src->sa_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)src;

		inet_ntop(AF_INET6, &s6->sin6_addr, got, sizeof(got));
		if (scope) /* a link-local source carries the interface */
			assert_int_equal(s6->sin6_scope_id, if_nametoindex(scope));
	} else {
		inet_ntop(AF_INET, &((struct sockaddr_in *)src)->sin_addr, got, sizeof(got));
	}
	assert_string_equal(got, want_src);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ev = cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 2000);
	assert_non_null(ev);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void test_resolved_source(void **state)
{
	(void)state;
	expect_resolved("127.0.0.1", NULL, "127.0.0.1");
	expect_resolved("198.51.100.9", NULL, "198.51.100.1"); /* on-link, uiwrt0 */
	expect_resolved("2001:db8:77::9", NULL, "2001:db8:77::1");
	expect_resolved("fe80::99", "uiwrt0", "fe80::1"); /* link-local, scope id */
	expect_resolved("::1", NULL, "::1");
}

/* The route goes away between rdma_resolve_addr and rdma_resolve_route. */
static void test_route_error(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	(void)state;
	assert_non_null(ch);
	assert_int_equal(sh("ip route add 10.88.0.0/16 dev uiwrt0"), 0);
	ev = resolve(ch, &id, "10.88.1.1", NULL);
	assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	assert_int_equal(sh("ip route del 10.88.0.0/16 dev uiwrt0"), 0);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	ev = cm_wait_event(ch, 2000);
	assert_non_null(ev);
	assert_int_equal(ev->event, RDMA_CM_EVENT_ROUTE_ERROR);
	assert_int_equal(ev->status, -ENETUNREACH);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* Binds a new id to ip; returns whether it got the device (id->verbs),
 * after checking that id->pd goes with it. */
static bool bind_has_device(const char *ip)
{
	struct sockaddr_storage a = addr(ip, NULL);
	struct rdma_cm_id *id;
	bool dev;

	assert_int_equal(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
	dev = id->verbs != NULL;
	assert_true((id->pd != NULL) == dev);
	rdma_destroy_id(id);
	return dev;
}

/* rdma_bind_addr and the device: an address of an Ethernet interface gets
 * it; a loopback address gets it only while the device's port is on lo
 * (no Ethernet interface up), as with a kernel whose RNIC is not on lo,
 * which libfabric's verbs provider relies on; connecting to a loopback
 * address still gets it (rdma_resolve_addr). */
static void test_bind_device(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	(void)state;
	assert_true(bind_has_device("198.51.100.1"));
	assert_true(bind_has_device("2001:db8:77::1"));
	assert_false(bind_has_device("127.0.0.1"));
	assert_false(bind_has_device("::1"));
	assert_false(bind_has_device("0.0.0.0"));
	ev = resolve(ch, &id, "127.0.0.1", NULL);
	assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_non_null(id->verbs);
	assert_non_null(id->pd);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	/* only lo up: the port is on lo, a loopback bind gets the device */
	assert_int_equal(sh("ip link set uiwrt0 down && ip link set uiwrt1 down"), 0);
	assert_true(bind_has_device("127.0.0.1"));
	assert_true(bind_has_device("::1"));
	assert_int_equal(sh("ip link set uiwrt0 up && ip link set uiwrt1 up"), 0);
	assert_false(bind_has_device("127.0.0.1"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_unreachable),	    cmocka_unit_test(test_unreachable_sync),
	    cmocka_unit_test(test_resolved_source), cmocka_unit_test(test_route_error),
	    cmocka_unit_test(test_bind_device),
	};

	if (unshare(CLONE_NEWNET) != 0) {
		fprintf(stderr, "SKIP: unshare(CLONE_NEWNET): %s (needs root)\n", strerror(errno));
		return 77;
	}
	if (system("command -v ip >/dev/null") != 0) {
		fprintf(stderr, "SKIP: ip(8) (iproute2) is not installed\n");
		return 77;
	}
	/* lo, a veth link with IPv4, IPv6 and a link-local address (nodad:
	 * usable at once), and the three kinds of unusable routes */
	if (sh("ip link set lo up") || sh("ip link add uiwrt0 type veth peer name uiwrt1") ||
	    sh("ip link set uiwrt0 up") || sh("ip link set uiwrt1 up") ||
	    sh("ip addr add 198.51.100.1/26 dev uiwrt0") ||
	    sh("ip -6 addr add 2001:db8:77::1/64 dev uiwrt0 nodad") ||
	    sh("ip -6 addr add fe80::1/64 dev uiwrt0 nodad") ||
	    sh("ip route add unreachable 203.0.113.0/26") ||
	    sh("ip route add prohibit 203.0.113.64/26") ||
	    sh("ip route add blackhole 203.0.113.128/26")) {
		fprintf(stderr, "SKIP: cannot set up the namespace\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
