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
	struct ibv_comp_channel *ch; /* a's CQ only */
	struct side a, b;	     /* a connects, b accepts */
	struct uiw_listener *l;
	int accept_ret;
};

static void side_init(struct fix *f, struct side *s, struct ibv_comp_channel *ch)
{
	struct ibv_qp_init_attr at = {
	    .cap = {.max_send_wr = 64,
		    .max_recv_wr = 64,
		    .max_send_sge = 4,
		    .max_recv_sge = 4,
		    .max_inline_data = 64},
	    .qp_type = IBV_QPT_RC,
	};

	s->cq = ibv_create_cq(f->ctx, 256, s, ch, 0);
	assert_non_null(s->cq);
	at.send_cq = s->cq;
	at.recv_cq = s->cq;
	s->qp = ibv_create_qp(f->pd, &at);
	assert_non_null(s->qp);
	s->buf = calloc(1, BUF);
	assert_non_null(s->buf);
	s->mr =
	    ibv_reg_mr(f->pd, s->buf, BUF,
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
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

/* Polls cq until one completion arrives (at most TMO_MS). */
static void poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	long end = now_ms() + TMO_MS;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now_ms() < end)
		usleep(100);
	assert_int_equal(n, 1);
	if (wc->status != IBV_WC_SUCCESS)
		fail_msg("wc status %d (%s) wr_id %llu", wc->status, ibv_wc_status_str(wc->status),
			 (unsigned long long)wc->wr_id);
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
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	long end;
	int n = 0;

	post_recv(&f->b, 81, 0, 64);
	assert_int_equal(ibv_modify_qp(f->b.qp, &at, IBV_QP_STATE), 0);
	assert_int_equal(ibv_query_qp(f->b.qp, &at, IBV_QP_STATE, &ia), 0);
	assert_int_equal(at.qp_state, IBV_QPS_ERR);
	end = now_ms() + TMO_MS;
	while ((n = ibv_poll_cq(f->b.cq, 1, &wc)) == 0 && now_ms() < end)
		usleep(100);
	assert_int_equal(n, 1);
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
	struct ibv_sge sge = {.addr = (uintptr_t)f->a.buf, .length = 100, .lkey = f->a.mr->lkey};
	struct ibv_send_wr w = {.wr_id = 91,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	struct pollfd pfd = {.fd = f->ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	bool seen_a = false, seen_b = false;
	long end;

	set_hook(f->a.qp, &ha);
	set_hook(f->b.qp, &hb);
	/* a Write to an STag b never handed out: b answers with a Terminate
	 * (RFC 5040 section 7), both QPs go to ERR */
	w.wr.rdma.remote_addr = (uintptr_t)f->b.buf;
	w.wr.rdma.rkey = f->b.mr->rkey + 0x1000;
	assert_int_equal(ibv_post_send(f->a.qp, &w, &bad), 0);
	end = now_ms() + TMO_MS;
	while ((!seen_a || !seen_b) && now_ms() < end) {
		if (poll(&pfd, 1, 100) != 1)
			continue;
		assert_int_equal(ibv_get_async_event(f->ctx, &ev), 0);
		assert_int_equal(ev.event_type, IBV_EVENT_QP_FATAL);
		if (ev.element.qp == f->a.qp)
			seen_a = true;
		else if (ev.element.qp == f->b.qp)
			seen_b = true;
		else
			fail_msg("event for an unknown QP");
		ibv_ack_async_event(&ev);
	}
	assert_true(seen_a);
	assert_true(seen_b);
	/* the async event comes first, then librdmacm's hook */
	end = now_ms() + TMO_MS;
	while (
	    (hook_get(&ha, UIW_QP_EV_TERMINATE) == 0 || hook_get(&hb, UIW_QP_EV_TERMINATE) == 0) &&
	    now_ms() < end)
		usleep(1000);
	assert_int_equal(hook_get(&ha, UIW_QP_EV_TERMINATE), 1);
	assert_int_equal(hook_get(&hb, UIW_QP_EV_TERMINATE), 1);
	{
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;

		assert_int_equal(ibv_query_qp(f->a.qp, &at, IBV_QP_STATE, &ia), 0);
		assert_int_equal(at.qp_state, IBV_QPS_ERR);
	}
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
