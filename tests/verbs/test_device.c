/* libibverbs.so.1 (ours): device list, device/port/GID/pkey queries, the
 * string and rate helpers, fork support. Built against the system
 * <infiniband/verbs.h>, linked to our library (as an application would be).
 *
 * The interface-derived answers (GID[0], node GUID, MTU, port state) are
 * checked in network namespaces this test creates (uiwdev<pid>a / b with
 * veth pairs, uiwdev<pid>c with only lo, uiwdev<pid>d with interfaces
 * coming and going), deleted with their veths by each test's teardown, pass
 * or fail; that part needs root and iproute2 and is skipped otherwise. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

/* Exported by libibverbs under IBVERBS_PRIVATE_34 / IBVERBS_1.0, no public
 * prototype. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static struct ibv_context *open_dev(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;

	assert_non_null(l);
	assert_non_null(l[0]);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(ctx);
	return ctx;
}

static void test_device_list(void **state)
{
	struct ibv_device **l;
	int n = -1;

	(void)state;
	unsetenv("UIWARP_DEV_NAME");
	l = ibv_get_device_list(&n);
	assert_non_null(l);
	assert_int_equal(n, 1);
	assert_null(l[1]);
	assert_string_equal(ibv_get_device_name(l[0]), "uiw0");
	assert_int_equal(l[0]->node_type, IBV_NODE_RNIC);
	assert_int_equal(l[0]->transport_type, IBV_TRANSPORT_IWARP);
	assert_int_equal(ibv_get_device_index(l[0]), 0);
	assert_true(ibv_get_device_guid(l[0]) != 0);
	assert_int_equal(ibv_get_device_guid(l[0]), ibv_get_device_guid(l[0]));
	ibv_free_device_list(l);
	/* NULL count pointer is allowed */
	l = ibv_get_device_list(NULL);
	assert_non_null(l);
	ibv_free_device_list(l);
}

static void test_open_close(void **state)
{
	struct ibv_context *ctx = open_dev();
	int fl;

	(void)state;
	assert_true(ctx->abi_compat == __VERBS_ABI_IS_EXTENDED);
	assert_non_null(verbs_get_ctx(ctx));
	assert_int_equal(verbs_get_ctx(ctx)->sz, sizeof(struct verbs_context));
	assert_non_null(ctx->ops.poll_cq);
	assert_non_null(ctx->ops.req_notify_cq);
	assert_non_null(ctx->ops.post_send);
	assert_non_null(ctx->ops.post_recv);
	assert_non_null(ctx->ops.post_srq_recv);
	assert_non_null(ctx->ops._compat_query_device);
	assert_non_null(ctx->ops._compat_query_port);
	assert_non_null(verbs_get_ctx_op(ctx, query_port));
	assert_non_null(verbs_get_ctx_op(ctx, query_device_ex));
	assert_int_equal(ctx->num_comp_vectors, 1);
	/* async_fd is a real fd */
	fl = fcntl(ctx->async_fd, F_GETFL);
	assert_true(fl >= 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

static void test_query_device(void **state)
{
	struct ibv_context *ctx = open_dev();
	struct ibv_device_attr a;
	struct ibv_device_attr_ex ax;

	(void)state;
	assert_int_equal(ibv_query_device(ctx, &a), 0);
	assert_int_equal(a.max_qp_rd_atom, 128);
	assert_int_equal(a.max_qp_init_rd_atom, 128);
	assert_int_equal(a.max_sge, 16);
	assert_int_equal(a.max_qp_wr, 16384);
	assert_int_equal(a.max_cqe, 262144);
	/* atomics only when RFC 7306 is offered (UIWARP_RFC7306=1) */
	if (!getenv("UIWARP_RFC7306") || strcmp(getenv("UIWARP_RFC7306"), "1") != 0)
		assert_int_equal(a.atomic_cap, IBV_ATOMIC_NONE);
	/* SRQs exactly when the engine has them */
	assert_true(a.max_srq == 0 || (a.max_srq_wr == 16384 && a.max_srq_sge == 16));
	assert_int_equal(a.phys_port_cnt, 1);
	/* Chelsio T6 identity (docs/verbs.md), unless overridden */
	if (!getenv("UIWARP_VENDOR_ID")) {
		assert_int_equal(a.vendor_id, 0x1425);
		assert_int_equal(a.vendor_part_id >> 12, 6);
	}
	assert_true(a.node_guid == ibv_get_device_guid(ctx->device));
	assert_int_equal(a.max_pkeys, 1);

	memset(&ax, 0xa5, sizeof(ax));
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &ax), 0);
	assert_memory_equal(&ax.orig_attr, &a, sizeof(a));
	assert_int_equal(ax.odp_caps.general_caps, 0);
	/* rdma-core's test_device.py test_phys_port_cnt_ex */
	assert_int_equal(ax.phys_port_cnt_ex, a.phys_port_cnt);
	assert_int_equal(ibv_close_device(ctx), 0);
}

static void check_port(const struct ibv_port_attr *p)
{
	assert_int_equal(p->state, IBV_PORT_ACTIVE);
	assert_int_equal(p->phys_state, 5);
	assert_int_equal(p->link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(p->gid_tbl_len, 1);
	assert_int_equal(p->pkey_tbl_len, 1);
	assert_true(p->max_msg_sz > 0);
}

#define COMPAT_PORT_ATTR_SZ offsetof(struct ibv_port_attr, port_cap_flags2)

static void test_query_port(void **state)
{
	struct ibv_context *ctx = open_dev();
	struct ibv_port_attr p;
	unsigned char raw[sizeof(struct ibv_port_attr) + 8];

	(void)state;
	/* the inline macro path: verbs_context.query_port */
	memset(&p, 0xff, sizeof(p));
	assert_int_equal(ibv_query_port(ctx, 1, &p), 0);
	check_port(&p);
	assert_int_equal(p.port_cap_flags2, 0);
	assert_int_not_equal(ibv_query_port(ctx, 2, &p), 0);
	assert_int_not_equal(ibv_query_port(ctx, 0, &p), 0);

	/* the exported compat path writes exactly 48 bytes */
	assert_int_equal(COMPAT_PORT_ATTR_SZ, 48);
	memset(raw, 0xee, sizeof(raw));
	assert_int_equal(ctx->ops._compat_query_port(ctx, 1, (struct _compat_ibv_port_attr *)raw),
			 0);
	check_port((struct ibv_port_attr *)raw);
	for (size_t i = COMPAT_PORT_ATTR_SZ; i < sizeof(raw); i++)
		assert_int_equal(raw[i], 0xee);
	assert_int_equal(ibv_close_device(ctx), 0);
}

static void test_gid_pkey(void **state)
{
	struct ibv_context *ctx = open_dev();
	union ibv_gid g, g2;
	struct ibv_gid_entry e, tbl[4];
	__be16 pkey;
	int type = -1;
	static const uint8_t zero[10];

	(void)state;
	assert_int_equal(ibv_query_gid(ctx, 1, 0, &g), 0);
	/* MAC in bytes 0..5 (all zero with only lo: test_netns_lo_only), the
	 * rest zero */
	assert_memory_equal(g.raw + 6, zero, 10);
	assert_int_equal(ibv_query_gid(ctx, 1, 0, &g2), 0);
	assert_memory_equal(&g, &g2, sizeof(g));
	assert_int_equal(ibv_query_gid(ctx, 1, 1, &g), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_query_gid(ctx, 2, 0, &g), -1);

	assert_int_equal(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
	assert_memory_equal(&e.gid, &g2, sizeof(g2));
	assert_int_equal(e.port_num, 1);
	assert_int_equal(e.gid_index, 0);
	assert_int_equal(e.gid_type, IBV_GID_TYPE_IB);
	assert_int_equal(ibv_query_gid_ex(ctx, 1, 1, &e, 0), EINVAL);
	assert_int_equal(ibv_query_gid_table(ctx, tbl, 4, 0), 1);
	assert_memory_equal(&tbl[0], &e, sizeof(e));

	assert_int_equal(ibv_query_gid_type(ctx, 1, 0, &type), 0);
	assert_int_equal(type, 0);

	assert_int_equal(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	assert_int_equal(pkey, 0xffff);
	assert_int_equal(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
	assert_int_equal(ibv_get_pkey_index(ctx, 1, 0xffff), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

static void test_strings_rates_fork(void **state)
{
	(void)state;
	assert_string_equal(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
	assert_string_equal(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
	assert_string_equal(ibv_wc_status_str((enum ibv_wc_status)999), "unknown");
	assert_string_equal(ibv_event_type_str(IBV_EVENT_QP_FATAL),
			    "local work queue catastrophic error");
	assert_string_equal(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC");
	assert_string_equal(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE");
	assert_int_equal(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
	assert_int_equal(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
	assert_int_equal(ibv_rate_to_mult(IBV_RATE_MAX), -1);
	assert_int_equal(ibv_rate_to_mbps(IBV_RATE_40_GBPS), 40000);
	assert_int_equal(mbps_to_ibv_rate(40000), IBV_RATE_40_GBPS);
	assert_int_equal(mbps_to_ibv_rate(1), IBV_RATE_MAX);
	assert_int_equal(ibv_fork_init(), 0);
	assert_int_equal(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	{
		char buf[16];

		assert_int_equal(ibv_read_sysfs_file("/nonexistent", "x", buf, sizeof(buf)), -1);
	}
}

static void test_async_fd_nonblocking(void **state)
{
	struct ibv_context *ctx = open_dev();
	struct ibv_async_event ev;
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};

	(void)state;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	assert_int_equal(fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(ibv_get_async_event(ctx, &ev), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(ibv_close_device(ctx), 0);
}

static void test_unsupported(void **state)
{
	struct ibv_context *ctx = open_dev();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_ah_attr aa = {.port_num = 1};

	(void)state;
	assert_non_null(pd);
	errno = 0;
	assert_null(ibv_create_ah(pd, &aa));
	assert_int_equal(errno, EOPNOTSUPP);
	/* memory windows exist (test_data.c binds and uses them) */
	{
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);

		assert_non_null(mw);
		assert_int_equal(ibv_dealloc_mw(mw), 0);
	}
	assert_null(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_null(ibv_import_device(3));
	/* cmd_fd is a descriptor (rdma-core's test_shared_pd.py dup()s it to
	 * import the context), and importing it is EOPNOTSUPP */
	{
		int fd = dup(ctx->cmd_fd);

		assert_true(ctx->cmd_fd >= 0);
		assert_true(fd >= 0);
		errno = 0;
		assert_null(ibv_import_device(fd));
		assert_int_equal(errno, EOPNOTSUPP);
		close(fd);
	}
	/* completion timestamps: no clock on this device */
	errno = 0;
	assert_null(
	    ibv_create_cq_ex(ctx, &(struct ibv_cq_init_attr_ex){
				      .cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP}));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* The IBVERBS_1.15 .. 1.17 calls (rdma-core v59 / v62 / v64), reached by
 * version as a binary linked against a newer libibverbs would. */
static void test_newer_nodes(void **state)
{
	typedef int (*speed_fn)(struct ibv_context *, uint32_t, uint64_t *);
	typedef void *(*alloc_buf_fn)(struct ibv_pd *, size_t, void **);
	typedef struct ibv_mr *(*reg_buf_fn)(struct ibv_pd *, void *, void *, size_t, int);
	typedef void (*free_buf_fn)(void *);
	typedef void *(*alloc_dmah_fn)(struct ibv_context *, void *);
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	speed_fn speed = (speed_fn)dlvsym(RTLD_DEFAULT, "ibv_query_port_speed", "IBVERBS_1.16");
	alloc_buf_fn ab = (alloc_buf_fn)dlvsym(RTLD_DEFAULT, "ibv_alloc_buf", "IBVERBS_1.17");
	reg_buf_fn rb = (reg_buf_fn)dlvsym(RTLD_DEFAULT, "ibv_reg_buf_mr", "IBVERBS_1.17");
	free_buf_fn fb = (free_buf_fn)dlvsym(RTLD_DEFAULT, "ibv_free_buf", "IBVERBS_1.17");
	alloc_dmah_fn ad = (alloc_dmah_fn)dlvsym(RTLD_DEFAULT, "ibv_alloc_dmah", "IBVERBS_1.15");
	uint64_t sp = 0;
	void *buf = NULL;
	char *p;
	struct ibv_mr *mr;

	(void)state;
	ibv_free_device_list(l);
	assert_non_null(pd);
	assert_non_null(speed);
	assert_non_null(ab);
	assert_non_null(rb);
	assert_non_null(fb);
	assert_non_null(ad);
	assert_non_null(dlvsym(RTLD_DEFAULT, "ibv_reg_mr_ex", "IBVERBS_1.15"));
	assert_non_null(dlvsym(RTLD_DEFAULT, "ibv_dm_export_dmabuf_fd", "IBVERBS_1.16"));
	assert_int_equal(speed(ctx, 1, &sp), 0);
	assert_int_equal(sp, 1000); /* 100 Gb/s in 100 Mb/s units */
	assert_int_equal(speed(ctx, 2, &sp), EINVAL);
	p = ab(pd, 8192, &buf);
	assert_non_null(p);
	assert_non_null(buf);
	assert_int_equal((uintptr_t)p % 4096, 0);
	mr = rb(pd, buf, p + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, p + 4096);
	errno = 0;
	assert_null(rb(pd, buf, p + 4096, 8192, IBV_ACCESS_LOCAL_WRITE)); /* past the end */
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	fb(buf);
	errno = 0;
	assert_null(ad(ctx, NULL));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
}

/* ------------------------------------------------ interfaces (namespaces) */

static char ns_a[32], ns_b[32], ns_c[32], ns_d[32];

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static bool ns_possible(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "not root: namespace tests skipped\n");
		return false;
	}
	if (sh("ip -V >/dev/null 2>&1") != 0) {
		fprintf(stderr, "no iproute2: namespace tests skipped\n");
		return false;
	}
	return true;
}

static bool ns_exists(const char *ns)
{
	char path[64];

	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	return access(path, F_OK) == 0;
}

/* Names ns uiwdev<pid><tag> and creates it. One of that name can only be
 * left over from a dead process that had our pid (killed before its
 * teardown): it is deleted first, so it neither makes us skip nor lingers. */
static int ns_add(char *ns, size_t sz, char tag)
{
	snprintf(ns, sz, "uiwdev%d%c", (int)getpid(), tag);
	if (ns_exists(ns))
		sh("ip netns del %s 2>/dev/null", ns);
	return sh("ip netns add %s", ns);
}

/* Deletes ns and every veth in it (each end deleted takes its peer along,
 * wherever it is), so that none outlives the test even if a process were
 * still in the namespace and kept it alive. */
static int ns_del(char *ns)
{
	int r = 0;

	if (!ns[0])
		return 0;
	if (ns_exists(ns)) {
		sh("ip -n %s -o link show type veth 2>/dev/null | "
		   "sed -n 's/^[0-9]*: \\([^:@]*\\).*/\\1/p' | "
		   "while read -r d; do ip -n %s link del \"$d\" 2>/dev/null; done",
		   ns, ns);
		if (sh("ip netns del %s", ns) != 0 || ns_exists(ns)) {
			fprintf(stderr, "cannot delete namespace %s\n", ns);
			r = -1;
		}
	}
	ns[0] = 0;
	return r;
}

/* cmocka runs it after the test, also when an assertion failed. */
static int ns_teardown(void **state)
{
	int r = 0;

	(void)state;
	r |= ns_del(ns_a);
	r |= ns_del(ns_b);
	r |= ns_del(ns_c);
	r |= ns_del(ns_d);
	return r;
}

/* The MAC of dev in ns, as `ip -o link` shows it ("link/ether xx:..."). */
static bool ip_link_mac(const char *ns, const char *dev, uint8_t mac[6])
{
	char cmd[160], line[1024], *p;
	unsigned int b[6];
	FILE *f;
	bool ok = false;

	snprintf(cmd, sizeof(cmd), "ip -n %s -o link show dev %s", ns, dev);
	f = popen(cmd, "r");
	if (!f)
		return false;
	if (fgets(line, sizeof(line), f) && (p = strstr(line, "link/ether ")) &&
	    sscanf(p + 11, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) == 6) {
		for (int i = 0; i < 6; i++)
			mac[i] = (uint8_t)b[i];
		ok = true;
	}
	pclose(f);
	return ok;
}

/* In a forked child (cmocka's asserts must not run there): CHECK prints
 * the failed condition and exits 1. */
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);      \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

/* The child's view of the device: GID[0] / ndev_ifindex, node GUID, port. */
struct dev_view {
	uint8_t gid[16];
	uint32_t ndev_ifindex;
	uint8_t guid[8];
	struct ibv_port_attr port;
	struct ibv_port_attr compat_port; /* through the exported IBVERBS_1.1 call */
};

static void view(struct ibv_context *ctx, struct dev_view *v)
{
	union ibv_gid g;
	struct ibv_gid_entry e;
	struct ibv_device_attr a;
	__be64 guid;

	memset(v, 0, sizeof(*v));
	CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0);
	memcpy(v->gid, g.raw, 16);
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0);
	CHECK(memcmp(e.gid.raw, g.raw, 16) == 0);
	v->ndev_ifindex = e.ndev_ifindex;
	CHECK(ibv_query_device(ctx, &a) == 0);
	guid = ibv_get_device_guid(ctx->device);
	CHECK(a.node_guid == guid && a.sys_image_guid == guid);
	memcpy(v->guid, &guid, 8);
	CHECK(ibv_query_port(ctx, 1, &v->port) == 0);
	CHECK(ctx->ops._compat_query_port(ctx, 1,
					  (struct _compat_ibv_port_attr *)&v->compat_port) == 0);
	CHECK(v->compat_port.state == v->port.state);
	CHECK(v->compat_port.active_mtu == v->port.active_mtu);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* view(), repeated until the port state is want, for at most
 * STATE_WAIT_S: the kernel updates an interface's operational state
 * (IFF_RUNNING) from its linkwatch work, after `ip link set` returns
 * (rate-limited, and later still on a loaded machine). Not reaching it in
 * time fails. */
#define STATE_WAIT_S 10.0
static void view_state(struct ibv_context *ctx, struct dev_view *v, enum ibv_port_state want)
{
	double end = now_s() + STATE_WAIT_S;

	for (;;) {
		view(ctx, v);
		if (v->port.state == want)
			return;
		if (now_s() > end) {
			fprintf(stderr, "port state %d, want %d after %.0f s\n", v->port.state,
				want, STATE_WAIT_S);
			CHECK(v->port.state == want);
		}
		usleep(10000);
	}
}

/* EUI-64 of a MAC, as the node GUID is made (siw: addrconf_addr_eui48). */
static void eui64(const uint8_t mac[6], uint8_t out[8])
{
	out[0] = mac[0] ^ 0x02;
	out[1] = mac[1];
	out[2] = mac[2];
	out[3] = 0xff;
	out[4] = 0xfe;
	out[5] = mac[3];
	out[6] = mac[4];
	out[7] = mac[5];
}

static void check_view(const struct dev_view *v, const uint8_t mac[6], enum ibv_mtu mtu,
		       enum ibv_port_state state)
{
	static const uint8_t zero[10];
	uint8_t want_guid[8];

	CHECK(memcmp(v->gid, mac, 6) == 0);
	CHECK(memcmp(v->gid + 6, zero, 10) == 0);
	eui64(mac, want_guid);
	CHECK(memcmp(v->guid, want_guid, 8) == 0);
	if (v->port.active_mtu != mtu || v->port.max_mtu != mtu)
		fprintf(stderr, "active_mtu %d max_mtu %d, want %d\n", v->port.active_mtu,
			v->port.max_mtu, mtu);
	CHECK(v->port.active_mtu == mtu);
	CHECK(v->port.max_mtu == mtu);
	CHECK(v->port.state == state);
	CHECK(v->port.phys_state == (state == IBV_PORT_ACTIVE ? 5 : 3));
	CHECK(v->port.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(v->port.gid_tbl_len == 1);
}

static int if_index(const char *ns, const char *dev)
{
	char cmd[160];
	FILE *f;
	int idx = -1;

	snprintf(cmd, sizeof(cmd), "ip -n %s -o link show dev %s", ns, dev);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d:", &idx) != 1)
		idx = -1;
	pclose(f);
	return idx;
}

/* Runs fn in a child that joined ns; returns its exit status (0 = pass).
 * A child still running after CHILD_WAIT_S (which no state wait comes
 * near) is killed and fails, so that the teardown still runs (ctest's
 * TIMEOUT would kill us before it) and no process keeps a namespace. */
#define CHILD_WAIT_S 45.0
static int in_ns(const char *ns, void (*fn)(void))
{
	char path[64];
	pid_t pid, w;
	int st;
	double end;

	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		CHECK(fd >= 0);
		CHECK(setns(fd, CLONE_NEWNET) == 0);
		close(fd);
		fn();
		_exit(0);
	}
	end = now_s() + CHILD_WAIT_S;
	while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_s() < end)
		usleep(10000);
	if (w == 0) {
		fprintf(stderr, "child in %s still running after %.0f s: killed\n", ns,
			CHILD_WAIT_S);
		kill(pid, SIGKILL);
	}
	if (w <= 0)
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				return -1;
	if (w == 0)
		return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The veth ends of ns_a: vx0 (created first: lowest ifindex, peer vx1 in
 * ns_a too), va (peer vb in ns_b). */
static const uint8_t mac_vx0[6] = {0x02, 0x55, 0x49, 0x57, 0x0a, 0x00};
static const uint8_t mac_va[6] = {0x02, 0x55, 0x49, 0x57, 0x0a, 0x01};
static const uint8_t mac_vb[6] = {0x02, 0x55, 0x49, 0x57, 0x0b, 0x01};

/* Each step changes ns_a from outside (ip -n) and checks what the same
 * open context reports next: nothing may be cached. */
static void child_veth(void)
{
	static const struct {
		unsigned int mtu;
		enum ibv_mtu want;
	} mtus[] = {
	    {1500, IBV_MTU_1024}, {9000, IBV_MTU_4096}, {4096, IBV_MTU_4096}, {4095, IBV_MTU_2048},
	    {2048, IBV_MTU_2048}, {2047, IBV_MTU_1024}, {1024, IBV_MTU_1024}, {1023, IBV_MTU_512},
	    {576, IBV_MTU_512},	  {300, IBV_MTU_256},
	};
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct dev_view v;
	uint8_t mac[6];
	int va = if_index(ns_a, "va"), vx0 = if_index(ns_a, "vx0");

	CHECK(l && l[0]);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(ctx);
	CHECK(va > 0 && vx0 > 0 && vx0 < va);

	/* vx0 is down (skipped), va is up with a running peer, lo down */
	CHECK(ip_link_mac(ns_a, "va", mac));
	CHECK(memcmp(mac, mac_va, 6) == 0);
	view_state(ctx, &v, IBV_PORT_ACTIVE);
	check_view(&v, mac, IBV_MTU_1024, IBV_PORT_ACTIVE);
	CHECK(v.ndev_ifindex == (uint32_t)va);

	/* the MTU mapping, re-read on every query */
	for (size_t i = 0; i < sizeof(mtus) / sizeof(mtus[0]); i++) {
		CHECK(sh("ip -n %s link set dev va mtu %u", ns_a, mtus[i].mtu) == 0);
		view(ctx, &v);
		if (v.port.active_mtu != mtus[i].want)
			fprintf(stderr, "MTU %u\n", mtus[i].mtu);
		check_view(&v, mac_va, mtus[i].want, IBV_PORT_ACTIVE);
	}
	CHECK(sh("ip -n %s link set dev va mtu 1500", ns_a) == 0);

	/* the peer goes down: va loses its carrier (not running); with lo down
	 * too, no interface is running: DOWN, still va's GID and MTU */
	CHECK(sh("ip -n %s link set dev vb down", ns_b) == 0);
	view_state(ctx, &v, IBV_PORT_DOWN);
	check_view(&v, mac_va, IBV_MTU_1024, IBV_PORT_DOWN);
	/* lo up: the device serves it, so the port is ACTIVE again */
	CHECK(sh("ip -n %s link set dev lo up", ns_a) == 0);
	view_state(ctx, &v, IBV_PORT_ACTIVE);
	check_view(&v, mac_va, IBV_MTU_1024, IBV_PORT_ACTIVE);

	/* vx0 up (lower ifindex than va, no carrier: its peer is down): it is
	 * now the first up Ethernet interface, GID and MTU follow it */
	CHECK(sh("ip -n %s link set dev vx0 up mtu 9000", ns_a) == 0);
	view(ctx, &v);
	check_view(&v, mac_vx0, IBV_MTU_4096, IBV_PORT_ACTIVE);
	CHECK(v.ndev_ifindex == (uint32_t)vx0);
	CHECK(ibv_close_device(ctx) == 0);

	/* a context opened now sees the same */
	l = ibv_get_device_list(NULL);
	CHECK(l && l[0]);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(ctx);
	view(ctx, &v);
	check_view(&v, mac_vx0, IBV_MTU_4096, IBV_PORT_ACTIVE);
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_netns_veth(void **state)
{
	(void)state;
	if (!ns_possible())
		skip();
	if (ns_add(ns_a, sizeof(ns_a), 'a') != 0 || ns_add(ns_b, sizeof(ns_b), 'b') != 0) {
		fprintf(stderr, "cannot create namespaces: skipped\n");
		skip();
	}
	assert_int_equal(
	    sh("ip -n %s link add vx0 address 02:55:49:57:0a:00 type veth peer name vx1 "
	       "address 02:55:49:57:0a:10",
	       ns_a),
	    0);
	assert_int_equal(sh("ip -n %s link add va address 02:55:49:57:0a:01 mtu 1500 type veth "
			    "peer name vb address 02:55:49:57:0b:01 mtu 1500 netns %s",
			    ns_a, ns_b),
			 0);
	assert_int_equal(
	    sh("ip -n %s addr add 198.51.100.1/24 dev va && ip -n %s link set va up", ns_a, ns_a),
	    0);
	assert_int_equal(
	    sh("ip -n %s addr add 198.51.100.2/24 dev vb && ip -n %s link set vb up", ns_b, ns_b),
	    0);
	{
		uint8_t m[6];

		assert_true(ip_link_mac(ns_b, "vb", m));
		assert_memory_equal(m, mac_vb, 6);
	}
	assert_int_equal(in_ns(ns_a, child_veth), 0);
}

/* A namespace with only lo: the device opens and answers, GID[0] is zero
 * (lo's MAC, ndev lo), the MTU is lo's (65536: IBV_MTU_4096), the port is
 * DOWN while lo is down and ACTIVE once it is up (rdma_cm over lo). */
static void child_lo_only(void)
{
	static const uint8_t zero[6];
	struct ibv_device **l;
	struct ibv_context *ctx;
	struct dev_view v;
	int n = 0, lo = if_index(ns_c, "lo");

	l = ibv_get_device_list(&n);
	CHECK(l && l[0] && n == 1);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(ctx);
	CHECK(lo > 0);
	view(ctx, &v);
	check_view(&v, zero, IBV_MTU_4096, IBV_PORT_DOWN);
	CHECK(v.ndev_ifindex == (uint32_t)lo);
	CHECK(sh("ip -n %s link set dev lo up", ns_c) == 0);
	view_state(ctx, &v, IBV_PORT_ACTIVE);
	check_view(&v, zero, IBV_MTU_4096, IBV_PORT_ACTIVE);
	/* lo's MTU, mapped */
	CHECK(sh("ip -n %s link set dev lo mtu 1500", ns_c) == 0);
	view(ctx, &v);
	check_view(&v, zero, IBV_MTU_1024, IBV_PORT_ACTIVE);
	/* objects still work */
	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq;

		CHECK(pd);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		CHECK(cq);
		CHECK(ibv_destroy_cq(cq) == 0);
		CHECK(ibv_dealloc_pd(pd) == 0);
	}
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_netns_lo_only(void **state)
{
	(void)state;
	if (!ns_possible())
		skip();
	if (ns_add(ns_c, sizeof(ns_c), 'c') != 0) {
		fprintf(stderr, "cannot create a namespace: skipped\n");
		skip();
	}
	assert_int_equal(in_ns(ns_c, child_lo_only), 0);
}

/* Interfaces coming and going while the device is asked: a dump that
 * races with a change is marked interrupted by the kernel (NLM_F_DUMP_INTR)
 * and must be taken again, never answered with the netlink-failure
 * fallback (zero GID, IBV_MTU_1024). The namespace holds enough veths
 * that every link dump spans several messages, and an `ip -batch` adds
 * and deletes another pair (down: never the port's) CHURN_PAIRS times while
 * the child checks every answer. */
#define CHURN_PAIRS 60
#define CHURN_WAIT_S 30.0
static const uint8_t mac_vd[6] = {0x02, 0x55, 0x49, 0x57, 0x0d, 0x01};

static void child_churn(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct dev_view v;
	int p[2], st, vd = if_index(ns_d, "vd"), ve = if_index(ns_d, "ve"), views = 0;
	pid_t pid, w;
	FILE *f;
	double end;

	CHECK(l && l[0]);
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(ctx);
	/* the peer is registered first: vd is the first up Ethernet interface */
	CHECK(vd > 0 && ve > vd);
	view_state(ctx, &v, IBV_PORT_ACTIVE);
	check_view(&v, mac_vd, IBV_MTU_1024, IBV_PORT_ACTIVE);

	CHECK(pipe(p) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(p[0], 0);
		close(p[0]);
		close(p[1]);
		execlp("ip", "ip", "-n", ns_d, "-batch", "-", (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	f = fdopen(p[1], "w");
	CHECK(f);
	for (int i = 0; i < CHURN_PAIRS; i++)
		fprintf(f, "link add vz0 type veth peer name vz1\nlink del vz0\n");
	CHECK(fclose(f) == 0);
	end = now_s() + CHURN_WAIT_S;
	while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_s() < end) {
		view(ctx, &v);
		views++;
		if (memcmp(v.gid, mac_vd, 6) != 0 || v.port.active_mtu != IBV_MTU_1024)
			fprintf(stderr, "query %d while interfaces change\n", views);
		check_view(&v, mac_vd, IBV_MTU_1024, IBV_PORT_ACTIVE);
		CHECK(v.ndev_ifindex == (uint32_t)vd);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fprintf(stderr, "ip -batch still running after %.0f s\n", CHURN_WAIT_S);
	}
	CHECK(w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(views > 0);
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_netns_dump_churn(void **state)
{
	(void)state;
	if (!ns_possible())
		skip();
	if (ns_add(ns_d, sizeof(ns_d), 'd') != 0) {
		fprintf(stderr, "cannot create a namespace: skipped\n");
		skip();
	}
	assert_int_equal(sh("ip -n %s link add ve address 02:55:49:57:0e:01 mtu 1500 type veth "
			    "peer name vd address 02:55:49:57:0d:01 && "
			    "ip -n %s link set vd up && ip -n %s link set ve up",
			    ns_d, ns_d, ns_d),
			 0);
	/* 12 more pairs, down, after vd: a link dump of about 30 interfaces */
	assert_int_equal(sh("for i in 0 1 2 3 4 5 6 7 8 9 10 11; do "
			    "echo link add vq$i type veth peer name vr$i; done | ip -n %s -batch -",
			    ns_d),
			 0);
	assert_int_equal(in_ns(ns_d, child_churn), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_newer_nodes),
	    cmocka_unit_test(test_device_list),
	    cmocka_unit_test(test_open_close),
	    cmocka_unit_test(test_query_device),
	    cmocka_unit_test(test_query_port),
	    cmocka_unit_test(test_gid_pkey),
	    cmocka_unit_test(test_strings_rates_fork),
	    cmocka_unit_test(test_async_fd_nonblocking),
	    cmocka_unit_test(test_unsupported),
	    cmocka_unit_test_teardown(test_netns_veth, ns_teardown),
	    cmocka_unit_test_teardown(test_netns_lo_only, ns_teardown),
	    cmocka_unit_test_teardown(test_netns_dump_churn, ns_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
