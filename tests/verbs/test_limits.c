/* The limits matrix (issue 13, docs/verbs.md "Limits"): every limit
 * ibv_query_device reports (or rdma_cm's private data limit) is granted up
 * to its value and refused one past it with the documented error, never
 * accepted silently and never a crash: QPs, CQs, PDs, MRs, MWs and SRQs
 * per process (ENOMEM past the count, as siw's per-device counts); WRs,
 * SGEs, inline data, CQEs, SRQ WRs / SGEs per object (EINVAL); ORD / IRD in
 * ibv_modify_qp (EINVAL); connection private data past the MPA limit
 * (EINVAL). The QP count runs with UIWARP_MAX_QP=32 (each QP costs ~28 KiB:
 * 16384 of them would take ~460 MB); the others at their real values. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

#include "verbs-shim/shim.h"

#define TEST_MAX_QP 32

struct fix {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_device_attr da;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct ibv_device **l = ibv_get_device_list(NULL);

	if (!f || !l)
		return -1;
	f->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!f->ctx || ibv_query_device(f->ctx, &f->da))
		return -1;
	f->pd = ibv_alloc_pd(f->ctx);
	f->cq = ibv_create_cq(f->ctx, 16, NULL, NULL, 0);
	if (!f->pd || !f->cq)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	assert_int_equal(ibv_destroy_cq(f->cq), 0);
	assert_int_equal(ibv_dealloc_pd(f->pd), 0);
	assert_int_equal(ibv_close_device(f->ctx), 0);
	free(f);
	return 0;
}

static struct ibv_qp *qp_with(struct fix *f, struct ibv_qp_cap cap)
{
	struct ibv_qp_init_attr a = {
	    .send_cq = f->cq, .recv_cq = f->cq, .cap = cap, .qp_type = IBV_QPT_RC};

	return ibv_create_qp(f->pd, &a);
}

static const struct ibv_qp_cap small = {
    .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};

/* NULL with errno want. */
#define REFUSED(expr, want)                                                                        \
	do {                                                                                       \
		errno = 0;                                                                         \
		assert_null(expr);                                                                 \
		assert_int_equal(errno, want);                                                     \
	} while (0)

/* Per-object limits: at the limit granted, one past it EINVAL. */
static void test_qp_caps(void **state)
{
	struct fix *f = *state;
	struct ibv_qp_cap c;
	struct ibv_qp *qp;

	assert_int_equal(f->da.max_qp_wr, UIW_MAX_QP_WR);
	assert_int_equal(f->da.max_sge, UIW_MAX_SGE);
	c = small;
	c.max_send_wr = (uint32_t)f->da.max_qp_wr;
	c.max_recv_wr = (uint32_t)f->da.max_qp_wr;
	c.max_send_sge = (uint32_t)f->da.max_sge;
	c.max_recv_sge = (uint32_t)f->da.max_sge;
	c.max_inline_data = UIW_MAX_INLINE;
	qp = qp_with(f, c);
	assert_non_null(qp);
	assert_int_equal(ibv_destroy_qp(qp), 0);

	c = small;
	c.max_send_wr = (uint32_t)f->da.max_qp_wr + 1;
	REFUSED(qp_with(f, c), EINVAL);
	c = small;
	c.max_recv_wr = (uint32_t)f->da.max_qp_wr + 1;
	REFUSED(qp_with(f, c), EINVAL);
	c = small;
	c.max_send_sge = (uint32_t)f->da.max_sge + 1;
	REFUSED(qp_with(f, c), EINVAL);
	c = small;
	c.max_recv_sge = (uint32_t)f->da.max_sge + 1;
	REFUSED(qp_with(f, c), EINVAL);
	c = small;
	c.max_inline_data = UIW_MAX_INLINE + 1;
	REFUSED(qp_with(f, c), EINVAL);
}

static void test_cqe(void **state)
{
	struct fix *f = *state;
	struct ibv_cq *cq;

	assert_int_equal(f->da.max_cqe, UIW_MAX_CQE);
	cq = ibv_create_cq(f->ctx, f->da.max_cqe, NULL, NULL, 0);
	assert_non_null(cq);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	REFUSED(ibv_create_cq(f->ctx, f->da.max_cqe + 1, NULL, NULL, 0), EINVAL);
	REFUSED(ibv_create_cq(f->ctx, 0, NULL, NULL, 0), EINVAL);
}

static void test_srq_caps(void **state)
{
	struct fix *f = *state;
	struct ibv_srq_init_attr a = {
	    .attr = {.max_wr = (uint32_t)f->da.max_srq_wr, .max_sge = (uint32_t)f->da.max_srq_sge}};
	struct ibv_srq *srq = ibv_create_srq(f->pd, &a);

	assert_non_null(srq);
	assert_int_equal(ibv_destroy_srq(srq), 0);
	a.attr.max_wr = (uint32_t)f->da.max_srq_wr + 1;
	a.attr.max_sge = 1;
	REFUSED(ibv_create_srq(f->pd, &a), EINVAL);
	a.attr.max_wr = 1;
	a.attr.max_sge = (uint32_t)f->da.max_srq_sge + 1;
	REFUSED(ibv_create_srq(f->pd, &a), EINVAL);
}

/* ORD (max_rd_atomic) and IRD (max_dest_rd_atomic) in ibv_modify_qp. */
static void test_ird_ord(void **state)
{
	struct fix *f = *state;
	struct ibv_qp *qp = qp_with(f, small);
	struct ibv_qp_attr a = {0};
	struct ibv_qp_init_attr ia;

	assert_non_null(qp);
	assert_int_equal(f->da.max_qp_init_rd_atom, UIW_MAX_ORD);
	assert_int_equal(f->da.max_qp_rd_atom, UIW_MAX_IRD);
	a.max_rd_atomic = (uint8_t)f->da.max_qp_init_rd_atom;
	a.max_dest_rd_atomic = (uint8_t)f->da.max_qp_rd_atom;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC),
			 0);
	a.max_rd_atomic = (uint8_t)(f->da.max_qp_init_rd_atom + 1);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC), EINVAL);
	a.max_rd_atomic = 1;
	a.max_dest_rd_atomic = (uint8_t)(f->da.max_qp_rd_atom + 1);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_MAX_DEST_RD_ATOMIC), EINVAL);
	/* nothing changed by the refused calls */
	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC, &ia), 0);
	assert_int_equal(a.max_rd_atomic, f->da.max_qp_init_rd_atom);
	assert_int_equal(a.max_dest_rd_atomic, f->da.max_qp_rd_atom);
	assert_int_equal(ibv_destroy_qp(qp), 0);
}

/* Per-process counts: max objects of a kind are granted, the next one is
 * ENOMEM, and once one is destroyed the next is granted again. make(i)
 * creates the i-th, destroy(p) destroys it. */
static void walk_count(struct fix *f, int max, void *(*make)(struct fix *, int),
		       int (*destroy)(void *))
{
	void **objs = calloc((size_t)max + 1, sizeof(*objs));

	assert_non_null(objs);
	for (int i = 0; i < max; i++) {
		objs[i] = make(f, i);
		if (!objs[i])
			fail_msg("object %d of %d refused: errno %d", i, max, errno);
	}
	REFUSED(make(f, max), ENOMEM);
	assert_int_equal(destroy(objs[max - 1]), 0);
	objs[max - 1] = make(f, max - 1);
	assert_non_null(objs[max - 1]);
	for (int i = max - 1; i >= 0; i--)
		assert_int_equal(destroy(objs[i]), 0);
	free(objs);
}

static void *make_qp(struct fix *f, int i)
{
	(void)i;
	return qp_with(f, small);
}
static int destroy_qp(void *p)
{
	return ibv_destroy_qp(p);
}
static void *make_cq(struct fix *f, int i)
{
	(void)i;
	return ibv_create_cq(f->ctx, 1, NULL, NULL, 0);
}
static int destroy_cq(void *p)
{
	return ibv_destroy_cq(p);
}
static void *make_pd(struct fix *f, int i)
{
	(void)i;
	return ibv_alloc_pd(f->ctx);
}
static int destroy_pd(void *p)
{
	return ibv_dealloc_pd(p);
}
static char mr_buf[4096];
static void *make_mr(struct fix *f, int i)
{
	(void)i;
	return ibv_reg_mr(f->pd, mr_buf, sizeof(mr_buf), IBV_ACCESS_LOCAL_WRITE);
}
static int destroy_mr(void *p)
{
	return ibv_dereg_mr(p);
}
static void *make_mw(struct fix *f, int i)
{
	(void)i;
	return ibv_alloc_mw(f->pd, IBV_MW_TYPE_2);
}
static int destroy_mw(void *p)
{
	return ibv_dealloc_mw(p);
}
static void *make_srq(struct fix *f, int i)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 1, .max_sge = 1}};

	(void)i;
	return ibv_create_srq(f->pd, &a);
}
static int destroy_srq(void *p)
{
	return ibv_destroy_srq(p);
}

static void test_count_qp(void **state)
{
	struct fix *f = *state;

	assert_int_equal(f->da.max_qp, TEST_MAX_QP);
	walk_count(f, f->da.max_qp, make_qp, destroy_qp);
}

/* the fixture's CQ is one of them */
static void test_count_cq(void **state)
{
	struct fix *f = *state;

	walk_count(f, f->da.max_cq - 1, make_cq, destroy_cq);
}

/* the fixture's PD is one of them */
static void test_count_pd(void **state)
{
	struct fix *f = *state;

	walk_count(f, f->da.max_pd - 1, make_pd, destroy_pd);
}

static void test_count_mr(void **state)
{
	struct fix *f = *state;

	walk_count(f, f->da.max_mr, make_mr, destroy_mr);
}

static void test_count_mw(void **state)
{
	struct fix *f = *state;

	walk_count(f, f->da.max_mw, make_mw, destroy_mw);
}

static void test_count_srq(void **state)
{
	struct fix *f = *state;

	walk_count(f, f->da.max_srq, make_srq, destroy_srq);
}

/* MRs and windows share the engine's STag table: both at their limits at
 * once still fit. */
static void test_mr_and_mw_together(void **state)
{
	struct fix *f = *state;
	struct ibv_mr **mrs = calloc((size_t)f->da.max_mr, sizeof(*mrs));
	struct ibv_mw **mws = calloc((size_t)f->da.max_mw, sizeof(*mws));

	assert_non_null(mrs);
	assert_non_null(mws);
	for (int i = 0; i < f->da.max_mw; i++)
		assert_non_null(mws[i] = make_mw(f, i));
	for (int i = 0; i < f->da.max_mr; i++)
		assert_non_null(mrs[i] = make_mr(f, i));
	for (int i = 0; i < f->da.max_mr; i++)
		assert_int_equal(ibv_dereg_mr(mrs[i]), 0);
	for (int i = 0; i < f->da.max_mw; i++)
		assert_int_equal(ibv_dealloc_mw(mws[i]), 0);
	free(mrs);
	free(mws);
}

/* Connection private data past the MPA limit (UIW_MAX_PRIVATE_DATA: 256
 * minus the RFC 6581 word): EINVAL from the connect and from the accept,
 * before anything is sent. */
struct acc {
	struct uiw_listener *l;
	struct ibv_qp *qp;
	int ret;
};

static void *acceptor(void *arg)
{
	struct acc *a = arg;
	struct uiw_conn_req *req;
	struct uiw_conn_info info;
	struct uiw_conn_param p = {.responder_resources = 1,
				   .initiator_depth = 1,
				   .private_data_len = UIW_MAX_PRIVATE_DATA + 1};
	static uint8_t pd[255];

	p.private_data = pd;
	a->ret = uiw_listener_get_request(a->l, 5000, &req, &info);
	if (a->ret == 0)
		a->ret = uiw_accept(req, shim_qp(a->qp)->qp, &p, 2000);
	return NULL;
}

static void test_private_data(void **state)
{
	struct fix *f = *state;
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage bound;
	static uint8_t pd[255];
	struct uiw_conn_param p = {
	    .responder_resources = 1, .initiator_depth = 1, .private_data = pd};
	struct uiw_conn_info info;
	struct acc a = {.qp = qp_with(f, small)};
	struct ibv_qp *qp = qp_with(f, small);
	bool rejected = false;
	pthread_t t;

	assert_non_null(a.qp);
	assert_non_null(qp);
	assert_int_equal(uiw_listen((struct sockaddr *)&sin, 4, &a.l), 0);
	uiw_listener_addr(a.l, &bound);
	/* connect: refused before the TCP connection is made */
	p.private_data_len = UIW_MAX_PRIVATE_DATA + 1;
	assert_int_equal(uiw_connect(shim_qp(qp)->qp, NULL, (struct sockaddr *)&bound, &p, 2000,
				     &info, &rejected),
			 -EINVAL);
	/* accept: the connect is valid, the accept's private data is not */
	assert_int_equal(pthread_create(&t, NULL, acceptor, &a), 0);
	p.private_data_len = UIW_MAX_PRIVATE_DATA;
	(void)uiw_connect(shim_qp(qp)->qp, NULL, (struct sockaddr *)&bound, &p, 2000, &info,
			  &rejected);
	pthread_join(t, NULL);
	assert_int_equal(a.ret, -EINVAL);
	uiw_listener_close(a.l);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_qp(a.qp), 0);
}

int main(void)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", TEST_MAX_QP);
	setenv("UIWARP_MAX_QP", v, 1);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_qp_caps, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cqe, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_srq_caps, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ird_ord, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_qp, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_cq, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_pd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_mr, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_mw, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_count_srq, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mr_and_mw_together, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_private_data, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
