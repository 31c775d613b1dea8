/* libibverbs.so.1 (ours): device list, device/port/GID/pkey queries, the
 * string and rate helpers, fork support. Built against the system
 * <infiniband/verbs.h>, linked to our library (as an application would be). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
	/* MAC in bytes 0..5, the rest zero, never all zero */
	assert_memory_equal(g.raw + 6, zero, 10);
	assert_memory_not_equal(g.raw, zero, 6);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_newer_nodes),	       cmocka_unit_test(test_device_list),
	    cmocka_unit_test(test_open_close),	       cmocka_unit_test(test_query_device),
	    cmocka_unit_test(test_query_port),	       cmocka_unit_test(test_gid_pkey),
	    cmocka_unit_test(test_strings_rates_fork), cmocka_unit_test(test_async_fd_nonblocking),
	    cmocka_unit_test(test_unsupported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
