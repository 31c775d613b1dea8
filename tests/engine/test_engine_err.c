/* Engine tests of local send-WR failures (iWARP has no SQE state: a WR that
 * fails locally is a connection error, as in siw) and of memory windows
 * across protection domains (RFC 5040 §5.1 / §7, RFC 5041 §7), over real
 * loopback TCP. Every fixture side has a PD of its own. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rdmap/rdmap.h"

/* the fixture buffers may carry windows here */
#define FIXTURE_ACCESS                                                                             \
	(UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ |               \
	 UIW_ACCESS_MW_BIND)
#include "tests/engine/engine_fixture.h"

/* Counts every event of a side (the fixture's callback ignores FATAL). */
struct evcount {
	struct side *s;
	atomic_int fatal, terminate, disconnected;
};

static void on_event_all(struct uiw_qp *qp, enum uiw_qp_event ev, void *ctx)
{
	struct evcount *e = ctx;
	on_event(qp, ev, e->s);
	if (ev == UIW_QP_EV_FATAL)
		atomic_fetch_add(&e->fatal, 1);
	if (ev == UIW_QP_EV_TERMINATE)
		atomic_fetch_add(&e->terminate, 1);
	if (ev == UIW_QP_EV_DISCONNECTED)
		atomic_fetch_add(&e->disconnected, 1);
}

static void wait_for(atomic_int *v)
{
	for (int i = 0; i < 500 && !atomic_load(v); i++)
		usleep(10000);
}

/* Posts three signaled WRs on a (middle one given by the caller, expected
 * to fail locally with want) and checks the iWARP answer: the first
 * completes and arrives at b, the failing one completes with its own status,
 * the third flushes; a's QP is in ERR without a Terminate, UIW_QP_EV_FATAL
 * is reported, the stream closes (b sees the end of stream and flushes its
 * other receives); a later post flushes at once. */
static void check_local_failure(struct pair *p, struct uiw_send_wr *mid, enum uiw_wc_status want)
{
	struct evcount ea = {.s = &p->a}, eb = {.s = &p->b};
	uiw_qp_set_event_cb(p->a.qp, on_event_all, &ea);
	uiw_qp_set_event_cb(p->b.qp, on_event_all, &eb);
	post_recv(&p->b, 10, 0, 64);
	post_recv(&p->b, 11, 64, 64);
	post_recv(&p->b, 12, 128, 64);
	memset(p->a.buf, 0x5c, 16);
	struct uiw_sge sge = {.addr = (uintptr_t)p->a.buf, .length = 16, .lkey = p->a.mr->stag};
	struct uiw_send_wr wr[3] = {
	    {.wr_id = 1, .opcode = UIW_WR_SEND, .sg_list = &sge, .num_sge = 1},
	    *mid,
	    {.wr_id = 3, .opcode = UIW_WR_SEND, .sg_list = &sge, .num_sge = 1},
	};
	for (int i = 0; i < 3; i++)
		wr[i].flags |= UIW_SEND_SIGNALED;
	int bad = -1;
	assert_int_equal(uiw_qp_post_send(p->a.qp, wr, 3, &bad), 0);
	struct uiw_wc wc[3];
	assert_int_equal(poll_n(p->a.cq, wc, 3), 3);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[0].status, UIW_WC_SUCCESS);
	assert_int_equal(wc[1].wr_id, 2);
	assert_int_equal(wc[1].status, want);
	assert_int_equal(wc[2].wr_id, 3);
	assert_int_equal(wc[2].status, UIW_WC_WR_FLUSH_ERR);
	assert_int_equal(uiw_qp_get_state(p->a.qp), UIW_QPS_ERR);
	assert_int_equal(uiw_qp_close_reason(p->a.qp), UIW_CLOSE_LOCAL_ABORT);
	wait_for(&ea.disconnected);
	assert_int_equal(atomic_load(&ea.fatal), 1);
	assert_int_equal(atomic_load(&ea.terminate), 0);
	struct uiw_term_info ti;
	uiw_qp_term_info(p->a.qp, &ti);
	assert_false(ti.valid); /* no Terminate: nothing the peer did was wrong */
	/* b: the Send before the failing WR arrived, then the stream ended */
	assert_int_equal(poll_n(p->b.cq, wc, 3), 3);
	assert_int_equal(wc[0].wr_id, 10);
	assert_int_equal(wc[0].status, UIW_WC_SUCCESS);
	assert_int_equal(wc[0].byte_len, 16);
	assert_int_equal(wc[1].status, UIW_WC_WR_FLUSH_ERR);
	assert_int_equal(wc[2].status, UIW_WC_WR_FLUSH_ERR);
	wait_for(&eb.disconnected);
	assert_int_equal(atomic_load(&eb.terminate), 0);
	assert_int_equal(uiw_qp_get_state(p->b.qp), UIW_QPS_ERR);
	/* a WR posted now flushes */
	wr[0].wr_id = 4;
	assert_int_equal(uiw_qp_post_send(p->a.qp, wr, 1, &bad), 0);
	assert_int_equal(poll_n(p->a.cq, wc, 1), 1);
	assert_int_equal(wc[0].wr_id, 4);
	assert_int_equal(wc[0].status, UIW_WC_WR_FLUSH_ERR);
	uiw_qp_set_event_cb(p->a.qp, NULL, NULL);
	uiw_qp_set_event_cb(p->b.qp, NULL, NULL);
}

static void test_bad_lkey_ends_connection(void **state)
{
	(void)state;
	struct pair p;
	pair_connect_with(&p, 4096, NULL);
	struct uiw_sge bad_sge = {.addr = (uintptr_t)p.a.buf, .length = 16, .lkey = 0x7fff0100};
	struct uiw_send_wr mid = {
	    .wr_id = 2, .opcode = UIW_WR_SEND, .sg_list = &bad_sge, .num_sge = 1};
	check_local_failure(&p, &mid, UIW_WC_LOC_PROT_ERR);
	pair_fini(&p);
}

static void test_local_inv_unknown_ends_connection(void **state)
{
	(void)state;
	struct pair p;
	pair_connect_with(&p, 4096, NULL);
	struct uiw_send_wr mid = {
	    .wr_id = 2, .opcode = UIW_WR_LOCAL_INV, .invalidate_rkey = 0x7fff0042};
	check_local_failure(&p, &mid, UIW_WC_LOC_PROT_ERR);
	pair_fini(&p);
}

static void test_read_sink_access_ends_connection(void **state)
{
	(void)state;
	struct pair p;
	pair_connect_with(&p, 4096, NULL);
	uint8_t *sink = calloc(1, 64);
	struct uiw_mr *smr;
	assert_int_equal(
	    uiw_mr_reg(p.a.pd, sink, 64, (uintptr_t)sink, UIW_ACCESS_REMOTE_READ, &smr), 0);
	struct uiw_sge sge = {.addr = (uintptr_t)sink, .length = 64, .lkey = smr->stag};
	struct uiw_send_wr mid = {.wr_id = 2,
				  .opcode = UIW_WR_RDMA_READ,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .remote_addr = (uintptr_t)p.b.buf,
				  .rkey = p.b.mr->stag};
	check_local_failure(&p, &mid, UIW_WC_LOC_ACCESS_ERR);
	assert_int_equal(uiw_mr_dereg(smr), 0);
	free(sink);
	pair_fini(&p);
}

/* RFC 5040 §5.1 (verbs Bind MW): a window of the QP's PD bound onto an MR
 * of another PD fails locally (LOC_PROT_ERR), which ends the connection. */
static void test_bind_mw_onto_other_pd_mr(void **state)
{
	(void)state;
	struct pair p;
	pair_connect_with(&p, 4096, NULL);
	struct uiw_mw *mw;
	uint32_t rkey;
	assert_int_equal(uiw_mw_alloc(p.a.pd, 2, &mw, &rkey), 0);
	/* b's MR lives in b's PD; the window and a's QP in a's */
	struct uiw_send_wr mid = {.wr_id = 2,
				  .opcode = UIW_WR_BIND_MW,
				  .mw = mw,
				  .rkey = (rkey & ~0xffu) | 0x33,
				  .bind_mr = p.b.mr,
				  .bind_addr = p.b.mr->iova,
				  .bind_length = 256,
				  .bind_access = UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ};
	check_local_failure(&p, &mid, UIW_WC_LOC_PROT_ERR);
	/* the window stayed unbound: its STag names nothing */
	assert_int_equal(uiw_mr_dereg(p.b.mr), 0); /* no window holds it */
	assert_int_equal(
	    uiw_mr_reg(p.b.pd, p.b.buf, p.b.len, (uintptr_t)p.b.buf, FIXTURE_ACCESS, &p.b.mr), 0);
	assert_int_equal(uiw_mw_dealloc(mw), 0);
	pair_fini(&p);
}

/* RFC 5040 §5.1 / §7, RFC 5041 §7: a window's STag used on a stream whose
 * QP is in another PD than the window: an RDMA Write gets DDP tagged "STag
 * not associated with RDMAP stream" (1/1/0x02), an RDMA Read Request RDMAP
 * remote protection 0x03 (the same rule as for MRs, rdmap/rx.c:tagged_check,
 * rx_read_req), and nothing lands in the window's memory. */
static void test_mw_of_other_pd_remote(void **state)
{
	(void)state;
	struct pair owner, w, r;
	pair_connect_with(&owner, 4096, NULL);
	/* a window in owner.b's PD, bound through owner.b's QP over its own
	 * buffer: Write and Read allowed */
	struct uiw_mw *mw;
	uint32_t rkey;
	assert_int_equal(uiw_mw_alloc(owner.b.pd, 2, &mw, &rkey), 0);
	uint32_t stag = (rkey & ~0xffu) | 0x77;
	struct uiw_send_wr bw = {.wr_id = 50,
				 .opcode = UIW_WR_BIND_MW,
				 .flags = UIW_SEND_SIGNALED,
				 .mw = mw,
				 .rkey = stag,
				 .bind_mr = owner.b.mr,
				 .bind_addr = owner.b.mr->iova + 1024,
				 .bind_length = 1024,
				 .bind_access = UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ};
	int bad;
	assert_int_equal(uiw_qp_post_send(owner.b.qp, &bw, 1, &bad), 0);
	struct uiw_wc wc;
	assert_int_equal(poll_n(owner.b.cq, &wc, 1), 1);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	memset(owner.b.buf, 0, owner.b.len);

	/* an RDMA Write naming the window arrives at a QP of another PD */
	pair_connect_with(&w, 4096, NULL);
	memset(w.a.buf, 0xee, 64);
	struct uiw_sge sge = {.addr = (uintptr_t)w.a.buf, .length = 64, .lkey = w.a.mr->stag};
	struct uiw_send_wr ww = {.wr_id = 1,
				 .opcode = UIW_WR_RDMA_WRITE,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .remote_addr = owner.b.mr->iova + 1024,
				 .rkey = stag};
	assert_int_equal(uiw_qp_post_send(w.a.qp, &ww, 1, &bad), 0);
	wait_for(&w.b.terminated);
	struct uiw_term_info ti;
	uiw_qp_term_info(w.b.qp, &ti);
	assert_true(ti.valid && ti.sent);
	assert_int_equal(ti.layer, 1); /* DDP */
	assert_int_equal(ti.etype, 1); /* tagged buffer */
	assert_int_equal(ti.ecode, 2); /* STag not associated with RDMAP stream */

	/* an RDMA Read Request naming the window, at a QP of another PD */
	pair_connect_with(&r, 4096, NULL);
	struct uiw_sge rs = {.addr = (uintptr_t)r.a.buf, .length = 64, .lkey = r.a.mr->stag};
	struct uiw_send_wr rw = {.wr_id = 2,
				 .opcode = UIW_WR_RDMA_READ,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &rs,
				 .num_sge = 1,
				 .remote_addr = owner.b.mr->iova + 1024,
				 .rkey = stag};
	assert_int_equal(uiw_qp_post_send(r.a.qp, &rw, 1, &bad), 0);
	wait_for(&r.b.terminated);
	uiw_qp_term_info(r.b.qp, &ti);
	assert_true(ti.valid && ti.sent);
	assert_int_equal(ti.layer, 0); /* RDMAP */
	assert_int_equal(ti.etype, 1); /* remote protection */
	assert_int_equal(ti.ecode, 3); /* STag not associated with RDMAP stream */
	assert_int_equal(poll_n(r.a.cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 2);
	assert_int_not_equal(wc.status, UIW_WC_SUCCESS); /* the Read never completes */
	for (size_t i = 0; i < 64; i++)
		assert_int_equal(r.a.buf[i], 0);

	/* nothing landed in the window's memory */
	for (size_t i = 0; i < owner.b.len; i++)
		assert_int_equal(owner.b.buf[i], 0);
	/* the window still works for its own PD: owner.a writes through it */
	memset(owner.a.buf, 0x3d, 32);
	struct uiw_sge os = {
	    .addr = (uintptr_t)owner.a.buf, .length = 32, .lkey = owner.a.mr->stag};
	struct uiw_send_wr ow = {.wr_id = 3,
				 .opcode = UIW_WR_RDMA_WRITE,
				 .sg_list = &os,
				 .num_sge = 1,
				 .remote_addr = owner.b.mr->iova + 1024,
				 .rkey = stag};
	post_recv(&owner.b, 60, 0, 64);
	struct uiw_send_wr ows[2] = {
	    ow, {.wr_id = 4, .opcode = UIW_WR_SEND, .sg_list = &os, .num_sge = 1}};
	assert_int_equal(uiw_qp_post_send(owner.a.qp, ows, 2, &bad), 0);
	assert_int_equal(poll_n(owner.b.cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 60);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	for (size_t i = 0; i < 32; i++)
		assert_int_equal(owner.b.buf[1024 + i], 0x3d);
	assert_int_equal(owner.b.buf[1024 + 32], 0);

	pair_fini(&r);
	pair_fini(&w);
	assert_int_equal(uiw_mw_dealloc(mw), 0);
	pair_fini(&owner);
}

/* Binds the type 2 window mw (through side s's QP) over 1024 bytes of mr
 * with key key; returns its STag. */
static uint32_t bind_mw(struct side *s, struct uiw_mw *mw, uint32_t rkey, uint8_t key,
			struct uiw_mr *mr)
{
	uint32_t stag = (rkey & ~0xffu) | key;
	struct uiw_send_wr bw = {.wr_id = 70,
				 .opcode = UIW_WR_BIND_MW,
				 .flags = UIW_SEND_SIGNALED,
				 .mw = mw,
				 .rkey = stag,
				 .bind_mr = mr,
				 .bind_addr = mr->iova + 1024,
				 .bind_length = 1024,
				 .bind_access = UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ};
	int bad;
	struct uiw_wc wc;
	assert_int_equal(uiw_qp_post_send(s->qp, &bw, 1, &bad), 0);
	assert_int_equal(poll_n(s->cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 70);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	return stag;
}

/* An invalidated window is no longer bound (verbs): it lets go of its MR.
 * A type 2 window bound over an MR keeps the MR from being deregistered
 * (-EBUSY); after the peer's Send with Invalidate of the window's STag
 * (RFC 5040 §5.3) the MR deregisters although the window is still
 * allocated; a rebind over a new MR takes a new hold (-EBUSY again), and a
 * Local Invalidate lets go of it as well. The window can be rebound and
 * deallocated afterwards. */
static void test_mw_invalidate_releases_mr(void **state)
{
	(void)state;
	struct pair p;
	pair_connect_with(&p, 4096, NULL);
	struct uiw_mr *mr;
	unsigned acc = FIXTURE_ACCESS | UIW_ACCESS_MW_BIND;
	assert_int_equal(uiw_mr_reg(p.b.pd, p.b.buf, p.b.len, 0x100000, acc, &mr), 0);
	struct uiw_mw *mw;
	uint32_t rkey;
	assert_int_equal(uiw_mw_alloc(p.b.pd, 2, &mw, &rkey), 0);
	uint32_t stag = bind_mw(&p.b, mw, rkey, 0x21, mr);
	assert_int_equal(uiw_mr_dereg(mr), -EBUSY);

	/* remote invalidation: a's Send with Invalidate names the window */
	post_recv(&p.b, 80, 0, 64);
	memset(p.a.buf, 0x5c, 16);
	struct uiw_sge sge = {.addr = (uintptr_t)p.a.buf, .length = 16, .lkey = p.a.mr->stag};
	struct uiw_send_wr sw = {.wr_id = 81,
				 .opcode = UIW_WR_SEND_WITH_INV,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .invalidate_rkey = stag};
	int bad;
	struct uiw_wc wc;
	assert_int_equal(uiw_qp_post_send(p.a.qp, &sw, 1, &bad), 0);
	assert_int_equal(poll_n(p.b.cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 80);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	assert_true(wc.flags & UIW_WC_WITH_INV);
	assert_int_equal(wc.invalidated_stag, stag);
	assert_int_equal(poll_n(p.a.cq, &wc, 1), 1);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	assert_int_equal(uiw_mr_dereg(mr), 0);

	/* a rebind over a new MR holds it; a Local Invalidate lets it go */
	assert_int_equal(uiw_mr_reg(p.b.pd, p.b.buf, p.b.len, 0x200000, acc, &mr), 0);
	stag = bind_mw(&p.b, mw, rkey, 0x22, mr);
	assert_int_equal(uiw_mr_dereg(mr), -EBUSY);
	struct uiw_send_wr li = {.wr_id = 82,
				 .opcode = UIW_WR_LOCAL_INV,
				 .flags = UIW_SEND_SIGNALED,
				 .invalidate_rkey = stag};
	assert_int_equal(uiw_qp_post_send(p.b.qp, &li, 1, &bad), 0);
	assert_int_equal(poll_n(p.b.cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 82);
	assert_int_equal(wc.status, UIW_WC_SUCCESS);
	assert_int_equal(uiw_mr_dereg(mr), 0);

	/* the window still binds and deallocates (which lets go of the MR);
	 * the connection is still up */
	assert_int_equal(uiw_mr_reg(p.b.pd, p.b.buf, p.b.len, 0x300000, acc, &mr), 0);
	bind_mw(&p.b, mw, rkey, 0x23, mr);
	assert_int_equal(uiw_mw_dealloc(mw), 0);
	assert_int_equal(uiw_mr_dereg(mr), 0);
	assert_int_equal(atomic_load(&p.b.terminated), 0);
	assert_int_equal(atomic_load(&p.a.terminated), 0);
	pair_fini(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_lkey_ends_connection),
	    cmocka_unit_test(test_local_inv_unknown_ends_connection),
	    cmocka_unit_test(test_read_sink_access_ends_connection),
	    cmocka_unit_test(test_bind_mw_onto_other_pd_mr),
	    cmocka_unit_test(test_mw_of_other_pd_remote),
	    cmocka_unit_test(test_mw_invalidate_releases_mr),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
