/* libibverbs.so.1 (ours) data path over a real loopback connection: two RC
 * QPs connected with the engine's connection calls (uiw_listen /
 * uiw_listener_get_request / uiw_accept in a thread, uiw_connect), then
 * Send, RDMA Write, RDMA Read and Send with Invalidate through
 * ibv_post_send / ibv_post_recv / ibv_poll_cq with the data checked, a
 * completion channel woken by a real completion, WR list chunking and
 * *bad_wr, and the flush on ERR. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

#include "verbs-shim/shim.h"

#define BUF 65536
#define TMO_MS 5000

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *buf;
	struct ibv_mr *mr;
};

struct fix {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_srq *srq;	     /* b's receives come from it (setup_srq) */
	struct ibv_comp_channel *ch; /* a's CQ only */
	struct side a, b;	     /* a connects, b accepts */
	struct uiw_listener *l;
	int accept_ret;
};

static void side_init(struct fix *f, struct side *s, struct ibv_comp_channel *ch)
{
	/* with the ibv_wr_* API too (ibv_qp_to_qp_ex) */
	struct ibv_qp_init_attr_ex at = {
	    .cap = {.max_send_wr = 64,
		    .max_recv_wr = 64,
		    .max_send_sge = 4,
		    .max_recv_sge = 4,
		    .max_inline_data = 64},
	    .qp_type = IBV_QPT_RC,
	    .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	    .pd = f->pd,
	    .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
			      IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
			      IBV_QP_EX_WITH_SEND_WITH_INV,
	};

	s->cq = ibv_create_cq(f->ctx, 256, s, ch, 0);
	assert_non_null(s->cq);
	at.send_cq = s->cq;
	at.recv_cq = s->cq;
	if (s == &f->b)
		at.srq = f->srq;
	s->qp = ibv_create_qp_ex(f->ctx, &at);
	assert_non_null(s->qp);
	s->buf = calloc(1, BUF);
	assert_non_null(s->buf);
	s->mr = ibv_reg_mr(f->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	assert_non_null(s->mr);
}

static void *acceptor(void *arg)
{
	struct fix *f = arg;
	struct uiw_conn_req *req;
	struct uiw_conn_info info;
	struct uiw_conn_param p = {.responder_resources = 16, .initiator_depth = 16};
	int ret = uiw_listener_get_request(f->l, TMO_MS, &req, &info);

	if (ret == 0)
		ret = uiw_accept(req, shim_qp(f->b.qp)->qp, &p, TMO_MS);
	f->accept_ret = ret;
	return NULL;
}

static bool want_srq;

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage bound;
	struct uiw_conn_param p = {.responder_resources = 16, .initiator_depth = 16};
	struct uiw_conn_info info;
	bool rejected = false;
	pthread_t t;
	int ret;

	assert_non_null(f);
	assert_non_null(l);
	f->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(f->ctx);
	f->pd = ibv_alloc_pd(f->ctx);
	assert_non_null(f->pd);
	f->ch = ibv_create_comp_channel(f->ctx);
	assert_non_null(f->ch);
	if (want_srq) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};

		f->srq = ibv_create_srq(f->pd, &sa);
		assert_non_null(f->srq);
	}
	side_init(f, &f->a, f->ch);
	side_init(f, &f->b, NULL);

	assert_int_equal(uiw_listen((struct sockaddr *)&sin, 4, &f->l), 0);
	uiw_listener_addr(f->l, &bound);
	assert_int_equal(pthread_create(&t, NULL, acceptor, f), 0);
	ret = uiw_connect(shim_qp(f->a.qp)->qp, NULL, (struct sockaddr *)&bound, &p, TMO_MS, &info,
			  &rejected);
	pthread_join(t, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(f->accept_ret, 0);
	uiw_listener_close(f->l);
	*state = f;
	return 0;
}

static void side_fini(struct side *s)
{
	assert_int_equal(ibv_destroy_qp(s->qp), 0);
	assert_int_equal(ibv_dereg_mr(s->mr), 0);
	assert_int_equal(ibv_destroy_cq(s->cq), 0);
	free(s->buf);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	side_fini(&f->a);
	side_fini(&f->b);
	if (f->srq)
		assert_int_equal(ibv_destroy_srq(f->srq), 0);
	assert_int_equal(ibv_destroy_comp_channel(f->ch), 0);
	assert_int_equal(ibv_dealloc_pd(f->pd), 0);
	assert_int_equal(ibv_close_device(f->ctx), 0);
	free(f);
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls cq until one completion arrives (at most TMO_MS), whatever its
 * status. */
static void poll_any(struct ibv_cq *cq, struct ibv_wc *wc)
{
	long end = now_ms() + TMO_MS;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now_ms() < end)
		usleep(100);
	assert_int_equal(n, 1);
}

/* Polls cq until one completion arrives (at most TMO_MS); it must be a
 * success. */
static void poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	poll_any(cq, wc);
	if (wc->status != IBV_WC_SUCCESS)
		fail_msg("wc status %d (%s) wr_id %llu", wc->status, ibv_wc_status_str(wc->status),
			 (unsigned long long)wc->wr_id);
}

#define ANY_ID UINT64_MAX /* poll_expect: any wr_id */
#define ANY_OP (-1)	  /* poll_expect: any opcode */

/* poll1, then the completion's wr_id and opcode must be id and op (each
 * unless ANY_ID / ANY_OP). */
static void poll_expect(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t id, int op)
{
	poll1(cq, wc);
	if (id != ANY_ID)
		assert_int_equal(wc->wr_id, id);
	if (op != ANY_OP)
		assert_int_equal(wc->opcode, op);
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed * 31 + i * 7 + (i >> 8));
}

static void post_recv(struct side *s, uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;

	assert_int_equal(ibv_post_recv(s->qp, &w, &bad), 0);
}

/* a posts one signaled WR of opcode op over the first len bytes of its
 * buffer; key is the remote STag of an RDMA Write (to raddr) or the STag a
 * Send with Invalidate invalidates, unused by a plain Send. */
static void post_from_a(struct fix *f, uint64_t id, enum ibv_wr_opcode op, uint32_t len,
			uint64_t raddr, uint32_t key)
{
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = len, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;

	if (op == IBV_WR_RDMA_WRITE) {
		w.wr.rdma.remote_addr = raddr;
		w.wr.rdma.rkey = key;
	} else if (op == IBV_WR_SEND_WITH_INV) {
		w.invalidate_rkey = key;
	}
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
}

/* Checks that qp is in ERR (label: which QP, for the failure message). */
static void assert_qp_err(struct ibv_qp *qp, const char *label)
{
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia), 0);
	if (at.qp_state != IBV_QPS_ERR)
		fail_msg("%s: QP state %d, want ERR (%d)", label, at.qp_state, IBV_QPS_ERR);
}

/* Waits (at most TMO_MS) until an async event has come for a's QP and one
 * for b's, acking each; every event for a's QP must be of type want_a, every
 * one for b's of type want_b. An event for any other element fails the test
 * when others_fail, else it is skipped. what names the case in failure
 * messages. */
static void expect_qp_events(struct fix *f, const char *what, enum ibv_event_type want_a,
			     enum ibv_event_type want_b, bool others_fail)
{
	struct pollfd pfd = {.fd = f->ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	bool seen_a = false, seen_b = false;
	long end = now_ms() + TMO_MS;

	while ((!seen_a || !seen_b) && now_ms() < end) {
		if (poll(&pfd, 1, 100) != 1)
			continue;
		assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
		if (ev.element.qp == f->a.qp || ev.element.qp == f->b.qp) {
			bool is_a = ev.element.qp == f->a.qp;
			enum ibv_event_type want = is_a ? want_a : want_b;

			if (ev.event_type != want)
				fail_msg("%s: QP %c got async event %s (%d), want %s (%d)", what,
					 is_a ? 'a' : 'b', ibv_event_type_str(ev.event_type),
					 ev.event_type, ibv_event_type_str(want), want);
			if (is_a)
				seen_a = true;
			else
				seen_b = true;
		} else if (others_fail) {
			fail_msg("%s: event for an unknown QP", what);
		}
		ibv_ack_async_event(&ev);
	}
	if (!seen_a || !seen_b)
		fail_msg("%s: no async event for QP %s within %d ms", what,
			 !seen_a && !seen_b ? "a and b"
			 : !seen_a	    ? "a"
					    : "b",
			 TMO_MS);
}

static void test_send(void **state)
{
	struct fix *f = *state;
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = 1000, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 11,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	post_recv(&f->b, 21, 0, 4096);
	fill(f->a.buf, 1000, 1);
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	poll1(f->a.cq, &wc);
	assert_int_equal(wc.wr_id, 11);
	assert_int_equal(wc.opcode, IBV_WC_SEND);
	assert_int_equal(wc.qp_num, f->a.qp->qp_num);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, 21);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 1000);
	assert_int_equal(wc.qp_num, f->b.qp->qp_num);
	assert_memory_equal(f->b.buf, f->a.buf, 1000);

	/* inline send: the buffer may change right after the post */
	post_recv(&f->b, 22, 0, 4096);
	memcpy(f->a.buf, "inline-hello", 12);
	sge.length = 12;
	w.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	memset(f->a.buf, 0, 12);
	poll1(f->a.cq, &wc);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.byte_len, 12);
	assert_memory_equal(f->b.buf, "inline-hello", 12);
}

static void test_write_read(void **state)
{
	struct fix *f = *state;
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = 30000, .lkey = f->a.mr->lkey};
	struct ibv_sge sge2 = {.addr = (uintptr_t)f->a.buf, .length = 4, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w2 = {.wr_id = 32,
				 .sg_list = &sge2,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr w = {
	    .wr_id = 31, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .next = &w2};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	/* Write (unsignaled) then Send: the Send's arrival proves the Write
	 * was placed (RFC 5040 ordering). */
	w.wr.rdma.remote_addr = (uintptr_t)f->b.buf + 8192;
	w.wr.rdma.rkey = f->b.mr->rkey;
	fill(f->a.buf, 30000, 2);
	post_recv(&f->b, 41, 0, 64);
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	poll1(f->a.cq, &wc);
	assert_int_equal(wc.wr_id, 32);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, 41);
	assert_memory_equal(f->b.buf + 8192, f->a.buf, 30000);

	/* Read b's bytes back into a's buffer at another offset */
	fill(f->b.buf + 40000, 20000, 3);
	memset(f->a.buf + 32768, 0, 20000);
	{
		struct ibv_sge rs = {
		    .addr = (uintptr_t)f->a.buf + 32768, .length = 20000, .lkey = f->a.mr->lkey};
		struct ibv_send_wr r = {.wr_id = 51,
					.sg_list = &rs,
					.num_sge = 1,
					.opcode = IBV_WR_RDMA_READ,
					.send_flags = IBV_SEND_SIGNALED};

		r.wr.rdma.remote_addr = (uintptr_t)f->b.buf + 40000;
		r.wr.rdma.rkey = f->b.mr->rkey;
		assert_int_equal(ibv_post_send(f->a.qp, &r, &bad), 0);
		poll1(f->a.cq, &wc);
		assert_int_equal(wc.wr_id, 51);
		assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
		assert_memory_equal(f->a.buf + 32768, f->b.buf + 40000, 20000);
	}
}

static void test_send_with_inv(void **state)
{
	struct fix *f = *state;
	char *extra = calloc(1, 4096);
	struct ibv_mr *mr =
	    ibv_reg_mr(f->pd, extra, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = 16, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 61,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_INV,
				.send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;

	assert_non_null(mr);
	w.invalidate_rkey = mr->rkey;
	post_recv(&f->b, 62, 0, 64);
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	poll1(f->a.cq, &wc);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, 62);
	assert_true(wc.wc_flags & IBV_WC_WITH_INV);
	assert_int_equal(wc.invalidated_rkey, mr->rkey);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	free(extra);
}

static void test_comp_channel_wakeup(void **state)
{
	struct fix *f = *state;
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = 100, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 71,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct pollfd pfd = {.fd = f->ch->fd, .events = POLLIN};
	struct ibv_cq *evcq = NULL;
	void *evctx = NULL;
	struct ibv_wc wc;

	/* a's CQ is on the channel: arm, then a completion must wake it */
	assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
	assert_int_equal(ibv_poll_cq(f->a.cq, 1, &wc), 0);
	post_recv(&f->b, 72, 0, 4096);
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	assert_int_equal(poll(&pfd, 1, TMO_MS), 1);
	assert_int_equal(ibv_get_cq_event(f->ch, &evcq, &evctx), 0);
	assert_ptr_equal(evcq, f->a.cq);
	assert_ptr_equal(evctx, &f->a);
	ibv_ack_cq_events(evcq, 1);
	poll1(f->a.cq, &wc);
	assert_int_equal(wc.wr_id, 71);
	poll1(f->b.cq, &wc);

	/* a blocking ibv_get_cq_event in another thread, woken by a
	 * completion that arrives later: the receive side of a */
	assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
	post_recv(&f->a, 73, 0, 4096);
	{
		struct ibv_sge bs = {
		    .addr = (uintptr_t)f->b.buf, .length = 10, .lkey = f->b.mr->lkey};
		struct ibv_send_wr bw = {.wr_id = 74,
					 .sg_list = &bs,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED};

		assert_int_equal(ibv_post_send(f->b.qp, &bw, &bad), 0);
	}
	assert_int_equal(ibv_get_cq_event(f->ch, &evcq, &evctx), 0);
	assert_ptr_equal(evcq, f->a.cq);
	ibv_ack_cq_events(evcq, 1);
	poll1(f->a.cq, &wc);
	assert_int_equal(wc.wr_id, 73);
	assert_int_equal(wc.byte_len, 10);
	poll1(f->b.cq, &wc);
}

static void test_wr_list_chunks_and_bad_wr(void **state)
{
	struct fix *f = *state;
	enum { N = 40 }; /* more than one chunk of 32 */
	struct ibv_sge sge[N];
	struct ibv_send_wr w[N], *bad = NULL;
	struct ibv_recv_wr r[N], *rbad = NULL;
	struct ibv_sge rs[N];
	struct ibv_wc wc;
	int sends = 0, recvs = 0;

	for (int i = 0; i < N; i++) {
		rs[i] = (struct ibv_sge){
		    .addr = (uintptr_t)f->b.buf + i * 64, .length = 64, .lkey = f->b.mr->lkey};
		r[i] = (struct ibv_recv_wr){.wr_id = 1000 + i,
					    .sg_list = &rs[i],
					    .num_sge = 1,
					    .next = i + 1 < N ? &r[i + 1] : NULL};
		sge[i] = (struct ibv_sge){
		    .addr = (uintptr_t)f->a.buf + i * 64, .length = 64, .lkey = f->a.mr->lkey};
		w[i] = (struct ibv_send_wr){.wr_id = 2000 + i,
					    .sg_list = &sge[i],
					    .num_sge = 1,
					    .opcode = IBV_WR_SEND,
					    .send_flags = IBV_SEND_SIGNALED,
					    .next = i + 1 < N ? &w[i + 1] : NULL};
		memset(f->a.buf + i * 64, 'A' + i % 26, 64);
	}
	assert_int_equal(ibv_post_recv(f->b.qp, &r[0], &rbad), 0);
	/* WR 35 (second chunk) is bad: 0..34 go out, *bad_wr = &w[35] */
	w[35].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	assert_int_equal(ibv_post_send(f->a.qp, &w[0], &bad), EOPNOTSUPP);
	assert_ptr_equal(bad, &w[35]);
	for (int i = 0; i < 35; i++) {
		poll1(f->a.cq, &wc);
		assert_int_equal(wc.wr_id, 2000 + i);
		sends++;
	}
	for (int i = 0; i < 35; i++) {
		poll1(f->b.cq, &wc);
		assert_int_equal(wc.wr_id, 1000 + i);
		assert_int_equal(wc.byte_len, 64);
		recvs++;
	}
	for (int i = 0; i < 35; i++)
		assert_memory_equal(f->b.buf + i * 64, f->a.buf + i * 64, 64);
	/* the rest, fixed */
	w[35].opcode = IBV_WR_SEND;
	assert_int_equal(ibv_post_send(f->a.qp, &w[35], &bad), 0);
	for (int i = 35; i < N; i++) {
		poll1(f->a.cq, &wc);
		poll1(f->b.cq, &wc);
		assert_int_equal(wc.wr_id, 1000 + i);
	}
	(void)sends;
	(void)recvs;
}

static void test_err_flush(void **state)
{
	struct fix *f = *state;
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	struct ibv_wc wc;

	post_recv(&f->b, 81, 0, 64);
	assert_int_equal(ibv_modify_qp(f->b.qp, &at, IBV_QP_STATE), 0);
	assert_qp_err(f->b.qp, "b after modify to ERR");
	poll_any(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, 81);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
}

/* librdmacm's hook: counts engine QP events per kind. */
struct hook {
	int n[4];
};

static void hook_fn(struct shim_qp *qp, enum uiw_qp_event ev, void *ctx)
{
	struct hook *h = ctx;

	(void)qp;
	if ((unsigned)ev < 4)
		__atomic_add_fetch(&h->n[ev], 1, __ATOMIC_SEQ_CST);
}

static int hook_get(struct hook *h, enum uiw_qp_event ev)
{
	return __atomic_load_n(&h->n[ev], __ATOMIC_SEQ_CST);
}

static void set_hook(struct ibv_qp *qp, struct hook *h)
{
	shim_qp(qp)->cm_ctx = h;
	__atomic_store_n(&shim_qp(qp)->cm_event, hook_fn, __ATOMIC_SEQ_CST);
}

static void test_async_terminate(void **state)
{
	struct fix *f = *state;
	struct hook ha = {{0}}, hb = {{0}};
	long end;

	set_hook(f->a.qp, &ha);
	set_hook(f->b.qp, &hb);
	/* a Write to an STag b never handed out: b answers with a Terminate
	 * (RFC 5040 section 7), both QPs go to ERR */
	post_from_a(f, 91, IBV_WR_RDMA_WRITE, 100, (uintptr_t)f->b.buf, f->b.mr->rkey + 0x1000);
	/* a received the Terminate: fatal; b detected the invalid STag (DDP
	 * tagged buffer error): access error */
	expect_qp_events(f, "Write to an unknown STag", IBV_EVENT_QP_FATAL, IBV_EVENT_QP_ACCESS_ERR,
			 true);
	/* the async event comes first, then librdmacm's hook */
	end = now_ms() + TMO_MS;
	while (
	    (hook_get(&ha, UIW_QP_EV_TERMINATE) == 0 || hook_get(&hb, UIW_QP_EV_TERMINATE) == 0) &&
	    now_ms() < end)
		usleep(1000);
	assert_int_equal(hook_get(&ha, UIW_QP_EV_TERMINATE), 1);
	assert_int_equal(hook_get(&hb, UIW_QP_EV_TERMINATE), 1);
	assert_qp_err(f->a.qp, "a after the Terminate");
}

static void test_graceful_close(void **state)
{
	struct fix *f = *state;
	struct hook ha = {{0}}, hb = {{0}};
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_SQD};
	long end;

	set_hook(f->a.qp, &ha);
	set_hook(f->b.qp, &hb);
	/* iWARP disconnect: SQD = closing; both ends see DISCONNECTED */
	assert_int_equal(ibv_modify_qp(f->a.qp, &at, IBV_QP_STATE), 0);
	end = now_ms() + TMO_MS;
	while ((hook_get(&ha, UIW_QP_EV_DISCONNECTED) == 0 ||
		hook_get(&hb, UIW_QP_EV_DISCONNECTED) == 0) &&
	       now_ms() < end)
		usleep(1000);
	assert_int_equal(hook_get(&ha, UIW_QP_EV_DISCONNECTED), 1);
	assert_int_equal(hook_get(&hb, UIW_QP_EV_DISCONNECTED), 1);
	/* no async event for a clean close */
	{
		struct pollfd pfd = {.fd = f->ctx->async_fd, .events = POLLIN};

		assert_int_equal(poll(&pfd, 1, 0), 0);
	}
}

/* ------------------------------------------------- completion channel stress */

struct stress {
	struct fix *f;
	int total;    /* Sends b posts */
	int credits;  /* receives a has posted and b has not used (atomic) */
	int stop;     /* consumer gave up (atomic) */
	int prod_err; /* producer failure (0 ok) */
};

/* b: posts total Sends of 64 bytes, each only when a has a receive posted
 * for it (iWARP has no RNR retry), in bursts with random pauses so the
 * CQE arrives at every point of a's arm / poll / get_cq_event cycle; polls
 * its own CQ. */
static void *stress_producer(void *arg)
{
	struct stress *st = arg;
	struct fix *f = st->f;
	struct ibv_sge sge = {.addr = (uintptr_t)f->b.buf, .length = 64, .lkey = f->b.mr->lkey};
	struct ibv_send_wr w = {
	    .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	unsigned seed = 12345;
	int sent = 0, done = 0, inflight = 0;
	long end = now_ms() + 20000;

	while (done < st->total && !__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
		struct ibv_wc wc[16];
		int n;

		if (now_ms() > end) {
			st->prod_err = ETIMEDOUT;
			return NULL;
		}
		if (sent < st->total && inflight < 32 &&
		    __atomic_load_n(&st->credits, __ATOMIC_ACQUIRE) > 0) {
			__atomic_sub_fetch(&st->credits, 1, __ATOMIC_ACQ_REL);
			w.wr_id = (uint64_t)sent;
			if (ibv_post_send(f->b.qp, &w, &bad)) {
				st->prod_err = EIO;
				return NULL;
			}
			sent++;
			inflight++;
			seed = seed * 1103515245u + 12345u;
			if ((seed >> 16) % 8 == 0)
				usleep((seed >> 8) % 50);
			else if ((seed >> 16) % 8 == 1)
				sched_yield();
		}
		n = ibv_poll_cq(f->b.cq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				st->prod_err = EPROTO;
				return NULL;
			}
		}
		if (n > 0) {
			done += n;
			inflight -= n;
		} else if (sent == st->total || inflight >= 32 ||
			   __atomic_load_n(&st->credits, __ATOMIC_ACQUIRE) == 0) {
			usleep(20);
		}
	}
	return NULL;
}

/* Many rounds of the canonical event loop on a's CQ (on the channel)
 * while b's thread produces completions concurrently: get_cq_event (with
 * a timeout: a lost wake-up shows as 2 s without an event while CQEs are
 * due), ack, re-arm, then poll a bounded batch of at most 3 (perftest's
 * pattern: the re-arm on a CQ that still holds CQEs must notify at once).
 * Every Send must be received, in order, within the time bound. */
static void test_comp_channel_stress(void **state)
{
	struct fix *f = *state;
	struct stress st = {.f = f, .total = 6000};
	struct pollfd pfd = {.fd = f->ch->fd, .events = POLLIN};
	long end = now_ms() + 30000;
	int got = 0, posted = 0, events = 0;
	pthread_t t;

	/* 48 receives outstanding at most */
	for (; posted < 48; posted++)
		post_recv(&f->a, (uint64_t)posted, (size_t)(posted % 64) * 1024, 1024);
	__atomic_store_n(&st.credits, 48, __ATOMIC_RELEASE);
	assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
	assert_int_equal(pthread_create(&t, NULL, stress_producer, &st), 0);
	while (got < st.total) {
		struct ibv_cq *evcq;
		void *evctx;
		struct ibv_wc wc[3];
		int n, r = poll(&pfd, 1, 2000);

		if (r != 1 || now_ms() > end) {
			__atomic_store_n(&st.stop, 1, __ATOMIC_RELEASE);
			pthread_join(t, NULL);
			fail_msg("no completion event for 2 s (lost wake-up?): %d of %d received, "
				 "%d events, producer %d",
				 got, st.total, events, st.prod_err);
		}
		assert_int_equal(ibv_get_cq_event(f->ch, &evcq, &evctx), 0);
		assert_ptr_equal(evcq, f->a.cq);
		ibv_ack_cq_events(evcq, 1);
		events++;
		assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
		n = ibv_poll_cq(f->a.cq, 3, wc);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
			assert_int_equal(wc[i].opcode, IBV_WC_RECV);
			assert_int_equal(wc[i].wr_id, (uint64_t)got);
			got++;
			if (posted < st.total) {
				post_recv(&f->a, (uint64_t)posted, (size_t)(posted % 64) * 1024,
					  1024);
				posted++;
				__atomic_add_fetch(&st.credits, 1, __ATOMIC_ACQ_REL);
			}
		}
	}
	pthread_join(t, NULL);
	assert_int_equal(st.prod_err, 0);
	/* drain the events the last re-arms queued */
	{
		int fl = fcntl(f->ch->fd, F_GETFL);
		struct ibv_cq *evcq;
		void *evctx;

		assert_int_equal(fcntl(f->ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
		while (ibv_get_cq_event(f->ch, &evcq, &evctx) == 0)
			ibv_ack_cq_events(evcq, 1);
		assert_int_equal(errno, EAGAIN);
		assert_int_equal(fcntl(f->ch->fd, F_SETFL, fl), 0);
	}
}

/* rping -P's error path: pthread_cancel of the thread that sleeps in
 * ibv_get_cq_event and polls the CQ, while completions arrive. The cancel
 * must find that thread only where it waits for a record (as read() on a
 * kernel channel), never inside uiwarp with a lock held: after each cancel
 * the main thread takes the channel's events and polls the CQ itself, and
 * the teardown destroys the CQ; both waited forever for a lock before (the
 * alarm ends such a hang as a failure). */
struct cancel_st {
	struct fix *f;
	long polled;
};

static void *cancel_consumer(void *arg)
{
	struct cancel_st *st = arg;
	/* the thread's own, not stack slots: ASan does not unpoison the
	 * frames a cancel unwinds */
	static __thread struct ibv_wc wc[16];
	static __thread struct ibv_cq *cq;
	static __thread void *ctx;

	for (;;) {
		int n;

		if (ibv_get_cq_event(st->f->ch, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			(void)ibv_req_notify_cq(cq, 0);
		}
		n = ibv_poll_cq(st->f->a.cq, 16, wc);
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				abort();
		if (n > 0)
			__atomic_add_fetch(&st->polled, n, __ATOMIC_ACQ_REL);
	}
	return NULL;
}

static void test_cancel_cq_waiter(void **state)
{
	struct fix *f = *state;
	struct cancel_st st = {.f = f};
	int fl = fcntl(f->ch->fd, F_GETFL);
	long posted = 0, end = now_ms() + 30000;
	int cancels = 0;

	alarm(40);
	assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
	for (int round = 0; round < 300; round++) {
		long until = posted + 8 + round % 24;
		struct ibv_wc wc[16];
		struct ibv_cq *cq;
		void *ctx;
		pthread_t t;

		assert_int_equal(pthread_create(&t, NULL, cancel_consumer, &st), 0);
		while (posted < until && now_ms() < end) {
			if (posted - __atomic_load_n(&st.polled, __ATOMIC_ACQUIRE) < 32)
				post_from_a(f, (uint64_t)posted++, IBV_WR_RDMA_WRITE, 64,
					    (uintptr_t)f->b.buf, f->b.mr->rkey);
			else
				sched_yield();
		}
		for (volatile int spin = 0; spin < (round % 16) * 500; spin++)
			; /* vary where the consumer is when the cancel comes */
		assert_int_equal(pthread_cancel(t), 0);
		assert_int_equal(pthread_join(t, NULL), 0);
		cancels++;
		/* the channel and the CQ are free: what is left, by hand */
		assert_int_equal(fcntl(f->ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
		while (ibv_get_cq_event(f->ch, &cq, &ctx) == 0)
			ibv_ack_cq_events(cq, 1);
		assert_int_equal(fcntl(f->ch->fd, F_SETFL, fl), 0);
		while (st.polled < posted) {
			int n = ibv_poll_cq(f->a.cq, 16, wc);

			assert_true(n >= 0);
			for (int i = 0; i < n; i++)
				assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
			st.polled += n;
			if (now_ms() > end)
				fail_msg("round %d: %ld of %ld completions", round, st.polled,
					 posted);
		}
		assert_int_equal(ibv_req_notify_cq(f->a.cq, 0), 0);
	}
	alarm(0);
	print_message("%d cancels, %ld Writes completed\n", cancels, posted);
}

/* ---------------------------------------------------------- memory windows */

/* a RDMA-Writes len bytes of its buffer to (raddr, rkey) and waits for the
 * local completion (status returned). */
static enum ibv_wc_status write_to(struct fix *f, uint64_t id, uint64_t raddr, uint32_t rkey,
				   uint32_t len)
{
	struct ibv_wc wc;

	post_from_a(f, id, IBV_WR_RDMA_WRITE, len, raddr, rkey);
	poll_any(f->a.cq, &wc);
	assert_int_equal(wc.wr_id, id);
	return wc.status;
}

/* a's Write through the window must land: a Send after it (same stream,
 * in order) is received once the data is placed. */
static void write_lands(struct fix *f, uint64_t id, uint64_t raddr, uint32_t rkey, size_t boff,
			uint32_t len)
{
	struct ibv_wc wc;

	fill(f->a.buf, len, (unsigned)id);
	post_recv(&f->b, id + 2, BUF - 64, 64);
	assert_int_equal(write_to(f, id, raddr, rkey, len), IBV_WC_SUCCESS);
	post_from_a(f, id + 1, IBV_WR_SEND, 1, 0, 0);
	poll1(f->a.cq, &wc);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, id + 2);
	assert_memory_equal(f->b.buf + boff, f->a.buf, len);
}

/* After a's Write to a dead window: b (which checked the STag) raises
 * IBV_EVENT_QP_ACCESS_ERR and sends a Terminate, a gets IBV_EVENT_QP_FATAL,
 * both QPs end in ERR. */
static void expect_access_terminate(struct fix *f, uint64_t raddr, uint32_t rkey)
{
	(void)write_to(f, 999, raddr, rkey, 32); /* handed to TCP: success or flush */
	expect_qp_events(f, "Write to a dead window", IBV_EVENT_QP_FATAL, IBV_EVENT_QP_ACCESS_ERR,
			 false);
	assert_qp_err(f->b.qp, "b after the dead-window Write");
	{
		struct uiw_term_info t;

		uiw_qp_term_info(shim_qp(f->b.qp)->qp, &t);
		assert_true(t.valid && t.sent);
		assert_int_equal(t.layer, 1); /* DDP tagged buffer error */
		assert_int_equal(t.etype, 1);
	}
}

static void test_mw_caps_and_objects(void **state)
{
	struct fix *f = *state;
	struct ibv_device_attr da;
	struct ibv_mw *w1, *w2;
	struct ibv_mr *plain;

	assert_int_equal(ibv_query_device(f->ctx, &da), 0);
	assert_true(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	assert_true(da.max_mw > 0);
	w1 = ibv_alloc_mw(f->pd, IBV_MW_TYPE_1);
	assert_non_null(w1);
	assert_int_equal(w1->type, IBV_MW_TYPE_1);
	w2 = ibv_alloc_mw(f->pd, IBV_MW_TYPE_2);
	assert_non_null(w2);
	assert_int_not_equal(w1->rkey, w2->rkey);
	assert_null(ibv_alloc_mw(f->pd, (enum ibv_mw_type)3));
	assert_int_equal(errno, EINVAL);
	/* the PD is in use while windows exist */
	assert_int_equal(ibv_dealloc_pd(f->pd), EBUSY);
	/* ibv_bind_mw is for type 1 only (libibverbs' own check) */
	{
		struct ibv_mw_bind b = {.bind_info = {.mr = f->b.mr,
						      .addr = (uintptr_t)f->b.buf,
						      .length = 64,
						      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};

		assert_int_equal(ibv_bind_mw(f->b.qp, w2, &b), EINVAL);
		b.bind_info.mw_access_flags = IBV_ACCESS_ZERO_BASED;
		assert_int_equal(ibv_bind_mw(f->b.qp, w1, &b), EINVAL);
	}
	/* a bind on an MR without IBV_ACCESS_MW_BIND completes in error */
	plain = ibv_reg_mr(f->pd, f->b.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(plain);
	{
		struct ibv_mw_bind b = {.wr_id = 5,
					.send_flags = IBV_SEND_SIGNALED,
					.bind_info = {.mr = plain,
						      .addr = (uintptr_t)f->b.buf,
						      .length = 64,
						      .mw_access_flags = IBV_ACCESS_REMOTE_READ}};
		struct ibv_wc wc;

		assert_int_equal(ibv_bind_mw(f->b.qp, w1, &b), 0);
		poll_any(f->b.cq, &wc);
		assert_int_equal(wc.wr_id, 5);
		assert_int_not_equal(wc.status, IBV_WC_SUCCESS);
	}
	assert_int_equal(ibv_dealloc_mw(w1), 0);
	assert_int_equal(ibv_dealloc_mw(w2), 0);
	assert_int_equal(ibv_dereg_mr(plain), 0);
}

/* Type 1: ibv_bind_mw on b's QP; a's Writes inside the window land, the
 * rkey of the previous binding dies on rebind; an unbind (length 0) kills
 * the window: a's Write then ends the connection with a Terminate. */
static void test_mw_type1_bind_write(void **state)
{
	struct fix *f = *state;
	struct ibv_mw *mw = ibv_alloc_mw(f->pd, IBV_MW_TYPE_1);
	uint32_t unbound, first;
	struct ibv_wc wc;
	struct ibv_mw_bind b = {.wr_id = 11,
				.send_flags = IBV_SEND_SIGNALED,
				.bind_info = {.mr = f->b.mr,
					      .addr = (uintptr_t)f->b.buf + 4096,
					      .length = 8192,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};

	assert_non_null(mw);
	unbound = mw->rkey;
	assert_int_equal(ibv_bind_mw(f->b.qp, mw, &b), 0);
	assert_int_equal(mw->rkey, ibv_inc_rkey(unbound));
	poll_expect(f->b.cq, &wc, 11, IBV_WC_BIND_MW);
	first = mw->rkey;
	write_lands(f, 100, (uintptr_t)f->b.buf + 4096 + 100, first, 4096 + 100, 1000);

	/* rebind elsewhere: new key byte */
	b.wr_id = 12;
	b.bind_info.addr = (uintptr_t)f->b.buf + 32768;
	b.bind_info.length = 4096;
	assert_int_equal(ibv_bind_mw(f->b.qp, mw, &b), 0);
	assert_int_not_equal(mw->rkey, first);
	poll_expect(f->b.cq, &wc, ANY_ID, IBV_WC_BIND_MW);
	write_lands(f, 200, (uintptr_t)f->b.buf + 32768, mw->rkey, 32768, 4096);

	/* unbind: the window names nothing any more */
	b.wr_id = 13;
	b.bind_info.length = 0;
	assert_int_equal(ibv_bind_mw(f->b.qp, mw, &b), 0);
	poll_expect(f->b.cq, &wc, ANY_ID, IBV_WC_BIND_MW);
	expect_access_terminate(f, (uintptr_t)f->b.buf + 32768, mw->rkey);
	assert_int_equal(ibv_dealloc_mw(mw), 0);
}

/* Type 2: bound by IBV_WR_BIND_MW through ibv_post_send with the caller's
 * key, a Write through it lands, IBV_WR_LOCAL_INV invalidates it
 * (IBV_WC_LOCAL_INV), and the next Write ends the connection. */
static void test_mw_type2_local_inv(void **state)
{
	struct fix *f = *state;
	struct ibv_mw *mw = ibv_alloc_mw(f->pd, IBV_MW_TYPE_2);
	struct ibv_send_wr w = {
	    .wr_id = 21, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;
	uint32_t rkey;

	assert_non_null(mw);
	rkey = ibv_inc_rkey(mw->rkey);
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = rkey;
	w.bind_mw.bind_info.mr = f->b.mr;
	w.bind_mw.bind_info.addr = (uintptr_t)f->b.buf;
	w.bind_mw.bind_info.length = 16384;
	w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	/* IBV_WR_BIND_MW is for type 2 windows; a type 1 one is refused */
	{
		struct ibv_mw *t1 = ibv_alloc_mw(f->pd, IBV_MW_TYPE_1);

		w.bind_mw.mw = t1;
		assert_int_equal(ibv_post_send(f->b.qp, &w, &bad), EINVAL);
		assert_ptr_equal(bad, &w);
		assert_int_equal(ibv_dealloc_mw(t1), 0);
		w.bind_mw.mw = mw;
	}
	assert_int_equal(ibv_post_send(f->b.qp, &w, &bad), 0);
	poll_expect(f->b.cq, &wc, 21, IBV_WC_BIND_MW);
	write_lands(f, 300, (uintptr_t)f->b.buf + 512, rkey, 512, 2048);

	memset(&w, 0, sizeof(w));
	w.wr_id = 22;
	w.opcode = IBV_WR_LOCAL_INV;
	w.send_flags = IBV_SEND_SIGNALED;
	w.invalidate_rkey = rkey;
	assert_int_equal(ibv_post_send(f->b.qp, &w, &bad), 0);
	poll_expect(f->b.cq, &wc, 22, IBV_WC_LOCAL_INV);
	expect_access_terminate(f, (uintptr_t)f->b.buf + 512, rkey);
	assert_int_equal(ibv_dealloc_mw(mw), 0);
}

/* Type 2 through the ibv_wr_* API (ibv_wr_bind_mw), invalidated by the
 * peer's Send with Invalidate: b's receive completion reports
 * IBV_WC_WITH_INV and the window's rkey; the next Write through it ends
 * the connection. ibv_wr_local_inv on another window. */
static void test_mw_wr_api_send_inv(void **state)
{
	struct fix *f = *state;
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(f->b.qp);
	struct ibv_mw *mw = ibv_alloc_mw(f->pd, IBV_MW_TYPE_2);
	struct ibv_mw *mw2 = ibv_alloc_mw(f->pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind_info bi = {.mr = f->b.mr,
				      .addr = (uintptr_t)f->b.buf + 8192,
				      .length = 8192,
				      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	uint32_t rkey, rkey2;
	struct ibv_wc wc;

	assert_non_null(x);
	assert_non_null(mw);
	assert_non_null(mw2);
	rkey = ibv_inc_rkey(mw->rkey);
	rkey2 = ibv_inc_rkey(ibv_inc_rkey(mw2->rkey));
	ibv_wr_start(x);
	x->wr_id = 31;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, mw, rkey, &bi);
	x->wr_id = 32;
	ibv_wr_bind_mw(x, mw2, rkey2, &bi);
	x->wr_id = 33;
	ibv_wr_local_inv(x, rkey2);
	assert_int_equal(ibv_wr_complete(x), 0);
	poll_expect(f->b.cq, &wc, 31, IBV_WC_BIND_MW);
	poll_expect(f->b.cq, &wc, 32, ANY_OP);
	poll_expect(f->b.cq, &wc, 33, IBV_WC_LOCAL_INV);
	/* a type 1 window in ibv_wr_bind_mw fails the batch */
	{
		struct ibv_mw *t1 = ibv_alloc_mw(f->pd, IBV_MW_TYPE_1);

		ibv_wr_start(x);
		ibv_wr_bind_mw(x, t1, ibv_inc_rkey(t1->rkey), &bi);
		assert_int_equal(ibv_wr_complete(x), EINVAL);
		assert_int_equal(ibv_dealloc_mw(t1), 0);
	}
	write_lands(f, 400, (uintptr_t)f->b.buf + 8192, rkey, 8192, 4096);

	/* a: Send with Invalidate of the window's rkey */
	post_recv(&f->b, 35, BUF - 64, 64);
	post_from_a(f, 34, IBV_WR_SEND_WITH_INV, 16, 0, rkey);
	poll1(f->a.cq, &wc);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.wr_id, 35);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_true(wc.wc_flags & IBV_WC_WITH_INV);
	assert_int_equal(wc.invalidated_rkey, rkey);
	expect_access_terminate(f, (uintptr_t)f->b.buf + 8192, rkey);
	assert_int_equal(ibv_dealloc_mw(mw), 0);
	assert_int_equal(ibv_dealloc_mw(mw2), 0);
}

/* The fixture with b's QP on a 16-entry SRQ. */
static int setup_srq(void **state)
{
	int r;

	want_srq = true;
	r = setup(state);
	want_srq = false;
	return r;
}

static void post_srq(struct fix *f, uint64_t id, size_t off)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)f->b.buf + off, .length = 256, .lkey = f->b.mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;

	assert_int_equal(ibv_post_srq_recv(f->srq, &w, &bad), 0);
}

/* a Sends one message to b (through b's SRQ); waits for both completions. */
static void send_one(struct fix *f, uint64_t id)
{
	struct ibv_wc wc;

	post_from_a(f, id, IBV_WR_SEND, 32, 0, 0);
	poll1(f->a.cq, &wc);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
}

/* Waits up to ms for an async event; returns 1 and *ev (acked by the
 * caller) or 0. */
static int async_wait(struct fix *f, int ms, struct ibv_async_event *ev)
{
	struct pollfd pfd = {.fd = f->ctx->async_fd, .events = POLLIN};

	if (poll(&pfd, 1, ms) != 1)
		return 0;
	assert_int_equal(ibv_get_async_event(f->ctx, ev), 0);
	return 1;
}

/* No async event within 200 ms (label: the step, for the failure message). */
static void expect_no_async(struct fix *f, const char *label)
{
	struct ibv_async_event ev;

	if (async_wait(f, 200, &ev))
		fail_msg("%s: unexpected async event %s", label, ibv_event_type_str(ev.event_type));
}

/* An IBV_EVENT_SRQ_LIMIT_REACHED within TMO_MS, acked; *ev keeps its
 * fields for the caller. */
static void expect_srq_limit(struct fix *f, struct ibv_async_event *ev)
{
	assert_int_equal(async_wait(f, TMO_MS, ev), 1);
	assert_int_equal(ev->event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
	ibv_ack_async_event(ev);
}

/* ibv_modify_srq(IBV_SRQ_LIMIT): the posted count dropping below the limit
 * raises IBV_EVENT_SRQ_LIMIT_REACHED once, then the limit is disarmed
 * (query says 0; further Sends raise nothing) until armed again. */
static void test_srq_limit(void **state)
{
	struct fix *f = *state;
	struct ibv_srq_attr sa = {.srq_limit = 3};
	struct ibv_async_event ev;
	uint64_t id = 0;

	for (int i = 0; i < 6; i++)
		post_srq(f, 500 + i, (size_t)i * 256);
	/* a limit above max_wr is refused */
	sa.srq_limit = 1000;
	assert_int_equal(ibv_modify_srq(f->srq, &sa, IBV_SRQ_LIMIT), EINVAL);
	sa.srq_limit = 3;
	assert_int_equal(ibv_modify_srq(f->srq, &sa, IBV_SRQ_LIMIT), 0);
	memset(&sa, 0, sizeof(sa));
	assert_int_equal(ibv_query_srq(f->srq, &sa), 0);
	assert_int_equal(sa.srq_limit, 3);
	/* 6 -> 5 -> 4 -> 3 posted: not below 3 yet */
	for (int i = 0; i < 3; i++)
		send_one(f, id++);
	expect_no_async(f, "3 posted, limit 3");
	/* 3 -> 2: below the limit, one event */
	send_one(f, id++);
	expect_srq_limit(f, &ev);
	assert_ptr_equal(ev.element.srq, f->srq);
	assert_int_equal(ibv_query_srq(f->srq, &sa), 0);
	assert_int_equal(sa.srq_limit, 0);
	/* disarmed: 2 -> 1 raises nothing */
	send_one(f, id++);
	expect_no_async(f, "disarmed");
	/* re-arm at 4 with 1 posted + 4 more = 5: 5 -> 4 nothing, 4 -> 3 fires */
	for (int i = 6; i < 10; i++)
		post_srq(f, 500 + i, (size_t)i * 256);
	sa.srq_limit = 4;
	assert_int_equal(ibv_modify_srq(f->srq, &sa, IBV_SRQ_LIMIT), 0);
	send_one(f, id++);
	expect_no_async(f, "4 posted, limit 4");
	send_one(f, id++);
	expect_srq_limit(f, &ev);
	/* armed then disarmed with 0: nothing */
	sa.srq_limit = 5;
	assert_int_equal(ibv_modify_srq(f->srq, &sa, IBV_SRQ_LIMIT), 0);
	sa.srq_limit = 0;
	assert_int_equal(ibv_modify_srq(f->srq, &sa, IBV_SRQ_LIMIT), 0);
	send_one(f, id++);
	expect_no_async(f, "armed then disarmed with 0");
}

/* A Send that finds no receive WR waits UIWARP_RQ_WAIT_MS (100 ms by
 * default) for one instead of ending the connection at once: b posts its
 * receive 30 ms after a's Send arrived (on its own RQ, or its SRQ); both
 * complete, the data is b's, no async event, and b's QP counted the wait. */
static void send_then_late_recv(struct fix *f)
{
	struct ibv_wc wc;
	struct uiw_qp_stats st;
	struct timespec ts = {0, 30 * 1000 * 1000};

	fill(f->a.buf, 200, 7);
	post_from_a(f, 31, IBV_WR_SEND, 200, 0, 0);
	nanosleep(&ts, NULL);
	if (f->srq)
		post_srq(f, 41, 0);
	else
		post_recv(&f->b, 41, 0, 4096);
	poll1(f->a.cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 31);
	poll1(f->b.cq, &wc);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.wr_id, 41);
	assert_int_equal(wc.byte_len, 200);
	assert_memory_equal(f->b.buf, f->a.buf, 200);
	uiw_qp_get_stats(shim_qp(f->b.qp)->qp, &st);
	assert_true(st.rq_waits >= 1);
	assert_int_equal(st.terminates_sent, 0);
	expect_no_async(f, "a Send that waited for its receive");
}

static void test_send_waits_for_recv(void **state)
{
	send_then_late_recv(*state);
}

/* The application moves b's QP to ERR while a Send waits there for a
 * receive (the way Ceph closes: rdma_disconnect, then ibv_modify_qp(ERR),
 * with data still coming): b's receive side stops without a Terminate
 * (nothing the peer did is wrong), no "no buffer" Terminate reaches a, and
 * b's close reason is the local abort. */
static void test_err_while_send_waits(void **state)
{
	struct fix *f = *state;
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
	struct uiw_term_info ti;
	struct timespec ts = {0, 30 * 1000 * 1000};
	struct ibv_wc wc;

	post_from_a(f, 51, IBV_WR_SEND, 64, 0, 0);
	nanosleep(&ts, NULL); /* b's receive side waits for a receive WR */
	assert_int_equal(ibv_modify_qp(f->b.qp, &qa, IBV_QP_STATE), 0);
	ts.tv_nsec = 200 * 1000 * 1000; /* past UIWARP_RQ_WAIT_MS */
	nanosleep(&ts, NULL);
	uiw_qp_term_info(shim_qp(f->b.qp)->qp, &ti);
	assert_false(ti.valid);
	uiw_qp_term_info(shim_qp(f->a.qp)->qp, &ti);
	assert_false(ti.valid);
	assert_int_equal(uiw_qp_close_reason(shim_qp(f->b.qp)->qp), UIW_CLOSE_LOCAL_ABORT);
	(void)ibv_poll_cq(f->a.cq, 1, &wc);
}

/* A Send longer than the receive buffer: b detects a DDP untagged buffer
 * error (message too long), an invalid request: IBV_EVENT_QP_REQ_ERR on b,
 * IBV_EVENT_QP_FATAL on a (it received the Terminate). */
static void test_term_req_err(void **state)
{
	struct fix *f = *state;

	post_recv(&f->b, 42, 0, 100);
	post_from_a(f, 41, IBV_WR_SEND, 200, 0, 0);
	expect_qp_events(f, "Send longer than the receive", IBV_EVENT_QP_FATAL,
			 IBV_EVENT_QP_REQ_ERR, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_send, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_send_with_inv, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_comp_channel_wakeup, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wr_list_chunks_and_bad_wr, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_err_flush, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_async_terminate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_graceful_close, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_comp_channel_stress, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_cq_waiter, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mw_caps_and_objects, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mw_type1_bind_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mw_type2_local_inv, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mw_wr_api_send_inv, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_term_req_err, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_srq_limit, setup_srq, teardown),
	    cmocka_unit_test_setup_teardown(test_send_waits_for_recv, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_send_waits_for_recv, setup_srq, teardown),
	    cmocka_unit_test_setup_teardown(test_err_while_send_waits, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
