/* uiw_netlink on loopback and on a namespace pair this test creates
 * (uiwp-nl<pid>a / b, veth, 198.51.100.0/24 and 2001:db8:51::/64, a route to
 * 203.0.113.0/24 with mtu 1280), deleted at the end. The namespace part
 * needs root and iproute2; it is skipped otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/rtnetlink.h>
#include <net/if_arp.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "netlink/uiw_netlink.h"

static char ns_a[32], ns_b[32], veth_a[16], veth_b[16];
static int home_ns = -1;
static bool ns_ready;

static struct sockaddr_storage sa(const char *ip)
{
	struct sockaddr_storage ss = {0};

	if (strchr(ip, ':')) {
		ss.ss_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)&ss)->sin6_addr),
				 1);
	} else {
		ss.ss_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, ip, &((struct sockaddr_in *)&ss)->sin_addr), 1);
	}
	return ss;
}

static bool sa_is(const struct sockaddr_storage *ss, const char *ip)
{
	struct sockaddr_storage want = sa(ip);

	if (ss->ss_family != want.ss_family)
		return false;
	if (ss->ss_family == AF_INET)
		return !memcmp(&((struct sockaddr_in *)ss)->sin_addr,
			       &((struct sockaddr_in *)&want)->sin_addr, 4);
	return !memcmp(&((struct sockaddr_in6 *)ss)->sin6_addr,
		       &((struct sockaddr_in6 *)&want)->sin6_addr, 16);
}

static const struct uiw_nl_link *find_link(const struct uiw_nl_link *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

static bool has_addr(const struct uiw_nl_link *l, const char *ip, int prefixlen)
{
	struct sockaddr_storage want = sa(ip);
	const void *w = want.ss_family == AF_INET
			    ? (const void *)&((struct sockaddr_in *)&want)->sin_addr
			    : (const void *)&((struct sockaddr_in6 *)&want)->sin6_addr;

	for (size_t i = 0; i < l->n_addrs; i++)
		if (l->addrs[i].family == want.ss_family && l->addrs[i].prefixlen == prefixlen &&
		    !memcmp(l->addrs[i].addr, w, want.ss_family == AF_INET ? 4 : 16))
			return true;
	return false;
}

/* ------------------------------------------------------------- loopback */

static void test_loopback_links(void **state)
{
	struct uiw_nl_link *v, one;
	const struct uiw_nl_link *lo;
	size_t n;

	(void)state;
	assert_int_equal(uiw_nl_links(&v, &n), 0);
	assert_true(n >= 1);
	lo = find_link(v, n, "lo");
	assert_non_null(lo);
	assert_true(lo->flags & IFF_LOOPBACK);
	assert_int_equal(lo->type, ARPHRD_LOOPBACK);
	assert_true(lo->mtu >= 1280);
	assert_true(has_addr(lo, "127.0.0.1", 8));
	for (size_t i = 1; i < n; i++)
		assert_true(v[i - 1].ifindex < v[i].ifindex);

	assert_int_equal(uiw_nl_link_get(lo->ifindex, &one), 0);
	assert_string_equal(one.name, "lo");
	assert_int_equal(one.mtu, lo->mtu);
	assert_int_equal(one.n_addrs, 0);
	assert_int_equal(uiw_nl_link_get(0x7ffffff0, &one), -ENODEV);
	uiw_nl_links_free(v, n);
}

static void test_loopback_route(void **state)
{
	struct sockaddr_storage dst = sa("127.0.0.1"), src = sa("127.0.0.1"), d6 = sa("::1");
	struct uiw_nl_route r;
	struct uiw_nl_link lo;

	(void)state;
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&dst, NULL, &r), 0);
	assert_int_equal(r.type, RTN_LOCAL);
	assert_string_equal(r.ifname, "lo");
	assert_true(sa_is(&r.src, "127.0.0.1"));
	assert_int_equal(r.gateway.ss_family, 0);
	assert_int_equal(uiw_nl_link_get(r.ifindex, &lo), 0);
	assert_int_equal(r.link_mtu, lo.mtu);
	assert_int_equal(r.path_mtu, r.route_mtu ? r.route_mtu : lo.mtu);
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&dst, (struct sockaddr *)&src, &r), 0);
	assert_string_equal(r.ifname, "lo");

	/* ::1 if this namespace has IPv6 */
	if (access("/proc/sys/net/ipv6", F_OK) == 0) {
		int e = uiw_nl_route_get((struct sockaddr *)&d6, NULL, &r);

		if (e == 0) {
			assert_string_equal(r.ifname, "lo");
			assert_true(r.path_mtu > 0);
		}
	}
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&dst, (struct sockaddr *)&d6, &r),
			 -EINVAL);
	dst.ss_family = AF_UNIX;
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&dst, NULL, &r), -EAFNOSUPPORT);
}

static void test_payload_bound(void **state)
{
	(void)state;
	assert_int_equal(uiw_nl_tcp_payload_bound(1500, AF_INET), 1448);
	assert_int_equal(uiw_nl_tcp_payload_bound(1500, AF_INET6), 1428);
	assert_int_equal(uiw_nl_tcp_payload_bound(9000, AF_INET), 8948);
	assert_int_equal(uiw_nl_tcp_payload_bound(40, AF_INET), 0);
}

/* ---------------------------------------------------------- namespaces */

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void ns_cleanup(void)
{
	if (home_ns >= 0) {
		setns(home_ns, CLONE_NEWNET);
		close(home_ns);
		home_ns = -1;
	}
	if (ns_a[0]) {
		sh("ip netns del %s 2>/dev/null", ns_a);
		sh("ip netns del %s 2>/dev/null", ns_b);
		ns_a[0] = 0;
	}
}

static int ns_setup(void **state)
{
	int pid = (int)getpid() % 100000, fd;

	(void)state;
	if (geteuid() != 0 || sh("ip -V >/dev/null 2>&1") != 0)
		return 0;
	snprintf(ns_a, sizeof(ns_a), "uiwp-nl%da", pid);
	snprintf(ns_b, sizeof(ns_b), "uiwp-nl%db", pid);
	snprintf(veth_a, sizeof(veth_a), "uiwpa%d", pid);
	snprintf(veth_b, sizeof(veth_b), "uiwpb%d", pid);
	atexit(ns_cleanup);
	if (sh("ip netns add %s && ip netns add %s", ns_a, ns_b) ||
	    sh("ip -n %s link add name %s mtu 1400 type veth peer name %s mtu 1400 netns %s", ns_a,
	       veth_a, veth_b, ns_b) ||
	    sh("ip -n %s addr add 198.51.100.1/24 dev %s && ip -n %s addr add 2001:db8:51::1/64 "
	       "dev %s nodad && ip -n %s link set %s up && ip -n %s link set lo up",
	       ns_a, veth_a, ns_a, veth_a, ns_a, veth_a, ns_a) ||
	    sh("ip -n %s addr add 198.51.100.2/24 dev %s && ip -n %s addr add 2001:db8:51::2/64 "
	       "dev %s nodad && ip -n %s link set %s up",
	       ns_b, veth_b, ns_b, veth_b, ns_b, veth_b) ||
	    sh("ip -n %s route add 203.0.113.0/24 via 198.51.100.2 mtu lock 1280", ns_a)) {
		ns_cleanup();
		return 0;
	}
	home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	char path[64];

	snprintf(path, sizeof(path), "/run/netns/%s", ns_a);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (home_ns < 0 || fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
		if (fd >= 0)
			close(fd);
		ns_cleanup();
		return 0;
	}
	close(fd);
	ns_ready = true;
	return 0;
}

static int ns_teardown(void **state)
{
	(void)state;
	ns_cleanup();
	return 0;
}

static void test_ns_links(void **state)
{
	struct uiw_nl_link *v;
	const struct uiw_nl_link *l, *lo;
	size_t n;

	(void)state;
	if (!ns_ready)
		skip();
	assert_int_equal(uiw_nl_links(&v, &n), 0);
	assert_int_equal(n, 2); /* lo and our veth: a fresh namespace */
	lo = find_link(v, n, "lo");
	l = find_link(v, n, veth_a);
	assert_non_null(lo);
	assert_non_null(l);
	assert_int_equal(l->mtu, 1400);
	assert_int_equal(l->type, ARPHRD_ETHER);
	assert_int_equal(l->hwaddr_len, 6);
	assert_true(l->flags & IFF_UP);
	assert_true(has_addr(l, "198.51.100.1", 24));
	assert_true(has_addr(l, "2001:db8:51::1", 64));
	assert_false(has_addr(l, "198.51.100.2", 24));
	uiw_nl_links_free(v, n);
}

static void test_ns_routes(void **state)
{
	struct sockaddr_storage peer = sa("198.51.100.2"), far = sa("203.0.113.5"),
				none = sa("192.0.2.1"), peer6 = sa("2001:db8:51::2"),
				self = sa("198.51.100.1");
	struct uiw_nl_route r;

	(void)state;
	if (!ns_ready)
		skip();
	/* on-link peer: the link's MTU */
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&peer, NULL, &r), 0);
	assert_int_equal(r.type, RTN_UNICAST);
	assert_string_equal(r.ifname, veth_a);
	assert_true(sa_is(&r.src, "198.51.100.1"));
	assert_int_equal(r.gateway.ss_family, 0);
	assert_int_equal(r.route_mtu, 0);
	assert_int_equal(r.link_mtu, 1400);
	assert_int_equal(r.path_mtu, 1400);
	assert_int_equal(uiw_nl_tcp_payload_bound(r.path_mtu, AF_INET), 1348);

	/* through a gateway on a route with mtu 1280 */
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&far, NULL, &r), 0);
	assert_string_equal(r.ifname, veth_a);
	assert_true(sa_is(&r.gateway, "198.51.100.2"));
	assert_true(sa_is(&r.src, "198.51.100.1"));
	assert_int_equal(r.route_mtu, 1280);
	assert_int_equal(r.path_mtu, 1280);

	/* no default route here */
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&none, NULL, &r), -ENETUNREACH);

	/* IPv6 on-link */
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&peer6, NULL, &r), 0);
	assert_string_equal(r.ifname, veth_a);
	assert_int_equal(r.path_mtu, 1400);
	assert_true(sa_is(&r.src, "2001:db8:51::1"));

	/* IPv6 link-local with a scope id: that interface */
	struct sockaddr_storage ll = sa("fe80::1");

	((struct sockaddr_in6 *)&ll)->sin6_scope_id = if_nametoindex(veth_a);
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&ll, NULL, &r), 0);
	assert_string_equal(r.ifname, veth_a);

	/* our own address: local, through lo */
	assert_int_equal(uiw_nl_route_get((struct sockaddr *)&self, NULL, &r), 0);
	assert_int_equal(r.type, RTN_LOCAL);
	assert_string_equal(r.ifname, "lo");
}

int main(void)
{
	const struct CMUnitTest lo_tests[] = {
	    cmocka_unit_test(test_loopback_links),
	    cmocka_unit_test(test_loopback_route),
	    cmocka_unit_test(test_payload_bound),
	};
	const struct CMUnitTest ns_tests[] = {
	    cmocka_unit_test(test_ns_links),
	    cmocka_unit_test(test_ns_routes),
	};
	int r = cmocka_run_group_tests_name("loopback", lo_tests, NULL, NULL);

	r += cmocka_run_group_tests_name("namespaces", ns_tests, ns_setup, ns_teardown);
	return r;
}
