/* libibverbs.so.1 (ours): PD / MR / CQ / QP / completion channel lifecycle
 * and error cases (a NULL, freed or stray PD included), without a
 * connection. Built against the system
 * <infiniband/verbs.h>, linked to our library. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

#include "verbs-shim/shim.h"

struct fix {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct ibv_device **l = ibv_get_device_list(NULL);

	if (!f || !l)
		return -1;
	f->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!f->ctx)
		return -1;
	f->pd = ibv_alloc_pd(f->ctx);
	if (!f->pd)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	assert_int_equal(ibv_dealloc_pd(f->pd), 0);
	assert_int_equal(ibv_close_device(f->ctx), 0);
	free(f);
	return 0;
}

static void test_pd(void **state)
{
	struct fix *f = *state;
	struct ibv_pd *pd = ibv_alloc_pd(f->ctx);

	assert_non_null(pd);
	assert_ptr_equal(pd->context, f->ctx);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
}

/* A NULL, freed or stray PD gets EINVAL from every call that takes one and
 * can return an error, never a crash: the PD is looked up among the live
 * ones before it is read. The stray pointer is what fio 3.33's rdma engine
 * passes to ibv_reg_mr with iodepth > 512 (its rd->pd overwritten by
 * rmt_us[513].rkey / .size, both big-endian: docs/verbs.md). */
static void test_pd_not_live(void **state)
{
	struct fix *f = *state;
	struct ibv_pd *stray = (struct ibv_pd *)(uintptr_t)0x10003040200ull;
	struct ibv_pd *freed = ibv_alloc_pd(f->ctx);
	struct ibv_pd *bad[] = {NULL, freed, stray};
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 4, NULL, NULL, 0);
	char buf[64];

	assert_non_null(freed);
	assert_non_null(cq);
	assert_true(shim_pd_is_live(freed));
	assert_int_equal(ibv_dealloc_pd(freed), 0);
	assert_false(shim_pd_is_live(freed));
	assert_false(shim_pd_is_live(NULL));
	assert_true(shim_pd_is_live(f->pd));
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ibv_qp_init_attr qa = {.send_cq = cq,
					      .recv_cq = cq,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1},
					      .qp_type = IBV_QPT_RC};
		struct ibv_qp_init_attr_ex qx = {.send_cq = cq,
						 .recv_cq = cq,
						 .cap = {.max_send_wr = 1, .max_recv_wr = 1},
						 .qp_type = IBV_QPT_RC,
						 .comp_mask = IBV_QP_INIT_ATTR_PD,
						 .pd = bad[i]};
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};

		errno = 0;
		assert_null(ibv_reg_mr(bad[i], buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(ibv_reg_mr_iova2(bad[i], buf, sizeof(buf), 0, IBV_ACCESS_LOCAL_WRITE));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(ibv_create_qp(bad[i], &qa));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(ibv_create_qp_ex(f->ctx, &qx));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(ibv_create_srq(bad[i], &sa));
		assert_true(errno == EINVAL || errno == EOPNOTSUPP); /* EOPNOTSUPP: no SRQs */
		assert_int_equal(ibv_dealloc_pd(bad[i]), EINVAL);    /* also: freed twice */
	}
	/* the live PD is untouched */
	{
		struct ibv_mr *mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);

		assert_non_null(mr);
		assert_int_equal(ibv_dealloc_pd(f->pd), EBUSY);
		assert_int_equal(ibv_dereg_mr(mr), 0);
	}
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* A NULL context, CQ, QP, MR or channel passed to a verbs call that has an
 * error return gets that error, never a crash (rdma-core's libibverbs
 * dereferences them). The static inline calls of <infiniband/verbs.h>
 * (ibv_query_port, ibv_create_cq_ex, ibv_create_qp_ex, ibv_query_device_ex,
 * ibv_alloc_mw, ibv_dealloc_mw, ibv_post_*, ibv_poll_cq, ibv_req_notify_cq)
 * read the object in the application's own code before any library call,
 * so no library can answer those: not tested. A destroyed QP is looked up
 * among the live ones: a second ibv_destroy_qp, and ibv_modify_qp /
 * ibv_query_qp on a destroyed QP, are EINVAL (docs/verbs.md). */
static void test_null_objects(void **state)
{
	struct fix *f = *state;
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
	struct ibv_qp_init_attr qia;
	struct ibv_async_event ae;
	struct ibv_cq *ocq = NULL;
	void *octx = NULL;
	union ibv_gid gid;
	__be16 pkey;

	assert_int_equal(ibv_close_device(NULL), EINVAL);
	errno = 0;
	assert_null(ibv_alloc_pd(NULL));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(NULL, 4, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_comp_channel(NULL));
	assert_int_equal(errno, EINVAL);
	assert_int_equal(ibv_query_gid(NULL, 1, 0, &gid), -1);
	assert_int_equal(ibv_query_pkey(NULL, 1, 0, &pkey), -1);
	assert_int_equal(ibv_destroy_cq(NULL), EINVAL);
	assert_int_equal(ibv_resize_cq(NULL, 8), EINVAL);
	assert_int_equal(ibv_destroy_qp(NULL), EINVAL);
	assert_int_equal(ibv_modify_qp(NULL, &qa, IBV_QP_STATE), EINVAL);
	assert_int_equal(ibv_query_qp(NULL, &qa, IBV_QP_STATE, &qia), EINVAL);
	assert_int_equal(ibv_dereg_mr(NULL), EINVAL);
	assert_int_equal(ibv_destroy_comp_channel(NULL), EINVAL);
	assert_int_equal(ibv_destroy_srq(NULL), EINVAL);
	errno = 0;
	assert_int_equal(ibv_get_cq_event(NULL, &ocq, &octx), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(ibv_get_async_event(NULL, &ae), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(ibv_get_async_event(f->ctx, NULL), -1);
	assert_int_equal(errno, EINVAL);
	ibv_ack_async_event(NULL); /* void: nothing to ack, no crash */
	ibv_ack_cq_events(NULL, 1);

	/* a destroyed QP: its second destroy is an error, not a double free */
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 4, NULL, NULL, 0);
	assert_non_null(cq);
	struct ibv_qp_init_attr ia = {.send_cq = cq,
				      .recv_cq = cq,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1},
				      .qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(f->pd, &ia);
	assert_non_null(qp);
	assert_int_equal(ibv_destroy_cq(cq), EBUSY); /* still attached to the QP */
	assert_int_equal(ibv_dealloc_pd(f->pd), EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_qp(qp), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &qa, IBV_QP_STATE), EINVAL);
	assert_int_equal(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), EINVAL);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

static void test_mr(void **state)
{
	struct fix *f = *state;
	size_t len = 65536;
	char *buf = malloc(len);
	struct ibv_mr *mr, *mr2;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	volatile int flags;

	assert_non_null(buf);
	mr = ibv_reg_mr(f->pd, buf, len, acc);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(mr->length, len);
	assert_ptr_equal(mr->pd, f->pd);
	assert_ptr_equal(mr->context, f->ctx);
	assert_int_equal(mr->lkey, mr->rkey);
	assert_int_not_equal(mr->lkey, 0);

	/* a PD with an MR cannot go */
	assert_int_equal(ibv_dealloc_pd(f->pd), EBUSY);

	/* non-constant flags with the optional range set: ibv_reg_mr_iova2 */
	flags = acc | IBV_ACCESS_RELAXED_ORDERING;
	mr2 = ibv_reg_mr(f->pd, buf, 4096, flags);
	assert_non_null(mr2);
	assert_int_not_equal(mr2->lkey, mr->lkey);
	assert_int_equal(ibv_dereg_mr(mr2), 0);

	mr2 = ibv_reg_mr_iova(f->pd, buf, 4096, 0x1000, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr2);
	assert_int_equal(ibv_dereg_mr(mr2), 0);

	/* REMOTE_WRITE needs LOCAL_WRITE */
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE));
	assert_int_equal(errno, EINVAL);
	/* unknown access bits */
	flags = 1 << 15;
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, buf, 4096, flags));
	assert_int_equal(errno, EINVAL);
	/* ODP is not advertised */
	flags = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE;
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, buf, 4096, flags));
	assert_int_equal(errno, EOPNOTSUPP);

	assert_int_equal(ibv_dereg_mr(mr), 0);
	free(buf);
}

/* STag indices (rkey >> 8) go round a window of 4096 while few MRs live:
 * a deregistered MR's index does not come back for the next 4094
 * registrations, and 20 000 register/deregister rounds (a churning server)
 * stay in the window, so the table pages the process touches do not grow
 * with them (they grew 8 bytes per registration up to 2 MiB before). With
 * 3000 MRs live the window widens to hold them. */
static void test_mr_stag_window(void **state)
{
	struct fix *f = *state;
	static char buf[4096];
	static struct ibv_mr *live[3000];
	uint32_t first = 0, maxidx = 0;

	for (int i = 0; i < 20000; i++) {
		struct ibv_mr *mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		uint32_t idx;

		assert_non_null(mr);
		idx = mr->rkey >> 8;
		assert_int_equal(mr->lkey, mr->rkey);
		if (i == 0)
			first = idx;
		else if (i < 4094)
			assert_int_not_equal(idx, first); /* not reused yet */
		if (idx > maxidx)
			maxidx = idx;
		assert_int_equal(ibv_dereg_mr(mr), 0);
	}
	assert_true(maxidx < 4096);
	for (int i = 0; i < 3000; i++) {
		live[i] = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		assert_non_null(live[i]);
	}
	for (int i = 0; i < 3000; i++)
		assert_int_equal(ibv_dereg_mr(live[i]), 0);
	print_message("20000 rounds: highest index %u\n", maxidx);
}

/* ibv_reg_mr refuses memory it could not pin (issue 13): a range running
 * past the mapping (2^46 bytes over 64 KiB), length 0, pages unmapped, a
 * read-only mapping asked for write access; a read-only mapping is fine
 * for REMOTE_READ. */
static void test_mr_range(void **state)
{
	struct fix *f = *state;
	long pg = sysconf(_SC_PAGESIZE);
	char *m =
	    mmap(NULL, 3 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;

	assert_true(m != MAP_FAILED);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m, (size_t)1 << 46, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EFAULT);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m, 0, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EINVAL);
	/* the middle page goes: the whole range and the page itself fail */
	assert_int_equal(munmap(m + pg, (size_t)pg), 0);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m, 3 * (size_t)pg, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EFAULT);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m + pg + 16, 16, 0));
	assert_int_equal(errno, EFAULT);
	/* the last page read-only: no write access, remote read yes */
	assert_int_equal(mprotect(m + 2 * pg, (size_t)pg, PROT_READ), 0);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m + 2 * pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EFAULT);
	mr = ibv_reg_mr(f->pd, m + 2 * pg, (size_t)pg, IBV_ACCESS_REMOTE_READ);
	assert_non_null(mr);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	/* PROT_NONE: nothing */
	assert_int_equal(mprotect(m, (size_t)pg, PROT_NONE), 0);
	errno = 0;
	assert_null(ibv_reg_mr(f->pd, m, (size_t)pg, 0));
	assert_int_equal(errno, EFAULT);
	munmap(m, (size_t)pg);
	munmap(m + 2 * pg, (size_t)pg);
}

/* How many of the n pages at m are resident (mincore). */
static size_t resident(char *m, size_t n)
{
	unsigned char v[64];
	size_t k = 0;
	assert_true(n <= sizeof(v));
	assert_int_equal(mincore(m, n * (size_t)sysconf(_SC_PAGESIZE), v), 0);
	for (size_t i = 0; i < n; i++)
		k += v[i] & 1;
	return k;
}

/* A writable MR of private anonymous memory has its pages faulted in by
 * ibv_reg_mr, as an RNIC's pinning does (none of them touched before); an
 * MR without write access, and a shared file mapping, stay as they were. */
static void test_mr_populate(void **state)
{
	struct fix *f = *state;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 32;
	char *m =
	    mmap(NULL, 3 * n * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	assert_int_equal(resident(m, n), 0);
	/* from the middle of the first page to the middle of the last */
	struct ibv_mr *mr = ibv_reg_mr(f->pd, m + pg / 2, (n - 1) * pg, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_int_equal(resident(m, n), n);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	mr = ibv_reg_mr(f->pd, m + n * pg, n * pg, IBV_ACCESS_REMOTE_READ);
	assert_non_null(mr);
	assert_int_equal(resident(m + n * pg, n), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	munmap(m, 3 * n * pg);

	int fd = memfd_create("uiw-mr-populate", 0); /* a shared file mapping, no file left */
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)(n * pg)), 0);
	char *fm = mmap(NULL, n * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(fm != MAP_FAILED);
	mr = ibv_reg_mr(f->pd, fm, n * pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(mr);
	assert_int_equal(resident(fm, n), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	munmap(fm, n * pg);
	close(fd);
}

static void test_cq(void **state)
{
	struct fix *f = *state;
	struct ibv_cq *cq;
	struct ibv_wc wc[4];

	cq = ibv_create_cq(f->ctx, 16, (void *)0x1234, NULL, 0);
	assert_non_null(cq);
	assert_true(cq->cqe >= 16);
	assert_ptr_equal(cq->context, f->ctx);
	assert_ptr_equal(cq->cq_context, (void *)0x1234);
	assert_int_equal(ibv_poll_cq(cq, 4, wc), 0);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);

	errno = 0;
	assert_null(ibv_create_cq(f->ctx, 0, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	assert_null(ibv_create_cq(f->ctx, 1 << 30, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	/* only one completion vector */
	assert_null(ibv_create_cq(f->ctx, 16, NULL, NULL, 1));
	assert_int_equal(errno, EINVAL);
}

static void test_comp_channel(void **state)
{
	struct fix *f = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(f->ctx);
	struct ibv_cq *cq, *evcq;
	void *evctx;
	struct pollfd pfd;

	assert_non_null(ch);
	assert_true(ch->fd >= 0);
	assert_ptr_equal(ch->context, f->ctx);
	cq = ibv_create_cq(f->ctx, 8, NULL, ch, 0);
	assert_non_null(cq);
	assert_ptr_equal(cq->channel, ch);
	/* a channel in use cannot go */
	assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	/* nothing completed: not readable, EAGAIN when non-blocking */
	pfd.fd = ch->fd;
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 20), 0);
	assert_int_equal(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
	assert_int_equal(ibv_get_cq_event(ch, &evcq, &evctx), -1);
	assert_int_equal(errno, EAGAIN);
	ibv_ack_cq_events(cq, 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static struct ibv_qp *make_qp(struct fix *f, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .cap = {.max_send_wr = 16,
		    .max_recv_wr = 8,
		    .max_send_sge = 2,
		    .max_recv_sge = 2,
		    .max_inline_data = 64},
	    .qp_type = t,
	    .qp_context = (void *)0x99,
	};
	struct ibv_qp *qp = ibv_create_qp(f->pd, &a);

	if (qp) {
		assert_true(a.cap.max_send_wr >= 16);
		assert_true(a.cap.max_recv_wr >= 8);
		assert_true(a.cap.max_send_sge >= 2);
		assert_true(a.cap.max_inline_data >= 64);
	}
	return qp;
}

static void test_qp(void **state)
{
	struct fix *f = *state;
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp, *qp2;
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;

	assert_non_null(cq);
	qp = make_qp(f, cq, IBV_QPT_RC);
	assert_non_null(qp);
	assert_ptr_equal(qp->context, f->ctx);
	assert_ptr_equal(qp->qp_context, (void *)0x99);
	assert_int_equal(qp->qp_type, IBV_QPT_RC);
	assert_int_equal(qp->state, IBV_QPS_RESET);
	qp2 = make_qp(f, cq, IBV_QPT_RC);
	assert_non_null(qp2);
	assert_int_not_equal(qp->qp_num, qp2->qp_num);
	/* librdmacm's lookup by number */
	assert_ptr_equal(shim_qp_by_num(f->ctx, qp2->qp_num), shim_qp(qp2));
	assert_ptr_equal(shim_qp_by_num(NULL, qp->qp_num), shim_qp(qp));
	{
		uint32_t n2 = qp2->qp_num;

		assert_int_equal(ibv_destroy_qp(qp2), 0);
		errno = 0;
		assert_null(shim_qp_by_num(f->ctx, n2));
		assert_int_equal(errno, ENOENT);
	}

	/* iWARP is RC only */
	errno = 0;
	assert_null(make_qp(f, cq, IBV_QPT_UD));
	assert_int_equal(errno, EOPNOTSUPP);
	errno = 0;
	assert_null(make_qp(f, cq, IBV_QPT_UC));
	assert_int_equal(errno, EOPNOTSUPP);

	/* CQ and PD in use */
	assert_int_equal(ibv_destroy_cq(cq), EBUSY);
	assert_int_equal(ibv_dealloc_pd(f->pd), EBUSY);

	/* a new QP of an RNIC queries as INIT (siw, iw_cxgb4; rdma-core's
	 * test_qp.py query_qp_common_test), its public state stays RESET until
	 * then, as libibverbs sets it */
	assert_int_equal(ibv_query_qp(qp, &at, IBV_QP_STATE | IBV_QP_CAP, &ia), 0);
	assert_int_equal(at.qp_state, IBV_QPS_INIT);
	assert_int_equal(qp->state, IBV_QPS_INIT);
	assert_true(at.cap.max_inline_data >= 64);
	assert_true(ia.cap.max_send_wr >= 16);
	assert_ptr_equal(ia.send_cq, cq);
	assert_int_equal(ia.qp_type, IBV_QPT_RC);

	/* RESET -> INIT with IB attributes: accepted */
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.pkey_index = 0;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	assert_int_equal(
	    ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	    0);
	assert_int_equal(qp->state, IBV_QPS_INIT);
	/* IB-only attribute alone (perftest's MIN_RNR_TIMER) is ignored */
	at.min_rnr_timer = 12;
	assert_int_equal(ibv_modify_qp(qp, &at, IBV_QP_MIN_RNR_TIMER), 0);
	assert_int_equal(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia), 0);
	assert_int_equal(at.qp_state, IBV_QPS_INIT);
	assert_int_equal(at.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);

	/* -> ERR, then RESET */
	at.qp_state = IBV_QPS_ERR;
	assert_int_equal(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
	assert_int_equal(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia), 0);
	assert_int_equal(at.qp_state, IBV_QPS_ERR);
	at.qp_state = IBV_QPS_RESET;
	assert_int_equal(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
	assert_int_equal(qp->state, IBV_QPS_RESET);
	/* idle again: INIT, as an RNIC reports it */
	assert_int_equal(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia), 0);
	assert_int_equal(at.qp_state, IBV_QPS_INIT);

	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

static void test_qp_ex(void **state)
{
	struct fix *f = *state;
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr_ex a = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC,
	    .comp_mask = IBV_QP_INIT_ATTR_PD,
	    .pd = f->pd,
	};
	struct ibv_qp *qp;

	assert_non_null(cq);
	qp = ibv_create_qp_ex(f->ctx, &a);
	assert_non_null(qp);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	/* the ibv_wr_* API for the RC operations */
	a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
	qp = ibv_create_qp_ex(f->ctx, &a);
	assert_non_null(qp);
	assert_non_null(ibv_qp_to_qp_ex(qp));
	assert_int_equal(ibv_destroy_qp(qp), 0);
	/* UD addressing / TSO are not RC operations of an RNIC */
	a.send_ops_flags = IBV_QP_EX_WITH_TSO;
	errno = 0;
	assert_null(ibv_create_qp_ex(f->ctx, &a));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

static void test_post_errors(void **state)
{
	struct fix *f = *state;
	struct ibv_cq *cq = ibv_create_cq(f->ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp = make_qp(f, cq, IBV_QPT_RC);
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w[3], *bad = NULL;
	struct ibv_recv_wr rw, *rbad = NULL;
	struct ibv_srq *no_srq = NULL;

	assert_non_null(qp);
	memset(w, 0, sizeof(w));
	/* atomics and immediate data do not exist on an RNIC */
	w[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w[0].sg_list = &sge;
	w[0].num_sge = 1;
	assert_int_equal(ibv_post_send(qp, &w[0], &bad), EOPNOTSUPP);
	assert_ptr_equal(bad, &w[0]);
	w[0].opcode = IBV_WR_SEND_WITH_IMM;
	bad = NULL;
	assert_int_equal(ibv_post_send(qp, &w[0], &bad), EOPNOTSUPP);
	assert_ptr_equal(bad, &w[0]);
	w[0].opcode = (enum ibv_wr_opcode)77;
	bad = NULL;
	assert_int_equal(ibv_post_send(qp, &w[0], &bad), EINVAL);
	assert_ptr_equal(bad, &w[0]);

	/* a QP that is not connected takes no sends */
	w[0].opcode = IBV_WR_SEND;
	bad = NULL;
	assert_int_not_equal(ibv_post_send(qp, &w[0], &bad), 0);
	assert_ptr_equal(bad, &w[0]);

	/* receives can be posted before the connection */
	memset(&rw, 0, sizeof(rw));
	rw.wr_id = 7;
	rw.sg_list = &sge;
	rw.num_sge = 1;
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), 0);
	/* too many SGEs */
	rw.num_sge = 1000;
	rbad = NULL;
	assert_int_not_equal(ibv_post_recv(qp, &rw, &rbad), 0);
	assert_ptr_equal(rbad, &rw);

	(void)no_srq; /* SRQs: tests/programs/test_verbs_api.c */
	rw.num_sge = 1;

	/* ERR flushes the posted receive */
	{
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
		struct ibv_wc wc;
		int n = 0;

		assert_int_equal(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
		for (int i = 0; i < 1000 && n == 0; i++) {
			n = ibv_poll_cq(cq, 1, &wc);
			if (!n)
				usleep(1000);
		}
		assert_int_equal(n, 1);
		assert_int_equal(wc.wr_id, 7);
		assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
		assert_int_equal(wc.qp_num, qp->qp_num);
	}

	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* An armed CQ on a channel gets a flush CQE (QP to ERR): one event. */
static struct ibv_qp *flush_one(struct fix *f, struct ibv_cq *cq, struct ibv_mr *mr)
{
	struct ibv_qp *qp = make_qp(f, cq, IBV_QPT_RC);
	struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = 8, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &sge, .num_sge = 1}, *rbad;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};

	assert_non_null(qp);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), 0);
	assert_int_equal(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
	return qp;
}

struct destroyer {
	struct ibv_cq *cq;
	int ret;
	int done;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	d->ret = ibv_destroy_cq(d->cq);
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_cq_events_ack_and_purge(void **state)
{
	struct fix *f = *state;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(f->ctx);
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(f->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *cq, *evcq;
	struct ibv_qp *qp;
	struct pollfd pfd;
	struct destroyer d;
	pthread_t t;
	void *evctx;

	assert_non_null(ch);
	assert_non_null(mr);
	pfd.fd = ch->fd;
	pfd.events = POLLIN;

	/* 1: an event returned but not acked holds ibv_destroy_cq */
	cq = ibv_create_cq(f->ctx, 8, (void *)0x77, ch, 0);
	assert_non_null(cq);
	qp = flush_one(f, cq, mr);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_int_equal(ibv_get_cq_event(ch, &evcq, &evctx), 0);
	assert_ptr_equal(evcq, cq);
	assert_ptr_equal(evctx, (void *)0x77);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	d.cq = cq;
	d.ret = -1;
	d.done = 0;
	assert_int_equal(pthread_create(&t, NULL, destroy_thread, &d), 0);
	usleep(50000);
	assert_int_equal(__atomic_load_n(&d.done, __ATOMIC_SEQ_CST), 0);
	ibv_ack_cq_events(cq, 1);
	pthread_join(t, NULL);
	assert_int_equal(d.ret, 0);

	/* 2: an event queued but never read is dropped with its CQ */
	cq = ibv_create_cq(f->ctx, 8, NULL, ch, 0);
	assert_non_null(cq);
	qp = flush_one(f, cq, mr);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(poll(&pfd, 1, 0), 0);

	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_pd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pd_not_live, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_null_objects, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mr, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mr_range, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mr_populate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mr_stag_window, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cq, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_comp_channel, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_qp, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_qp_ex, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_post_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cq_events_ack_and_purge, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
