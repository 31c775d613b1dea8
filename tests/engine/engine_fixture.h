/* The engine test fixture shared by the engine test programs: two QPs, each
 * with its own PD, CQ and a registered buffer, connected over loopback TCP
 * through the engine's own connection setup. Static functions: include it
 * in one test program only. */
#ifndef UIWARP_TESTS_ENGINE_FIXTURE_H
#define UIWARP_TESTS_ENGINE_FIXTURE_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmap/rdmap.h"

/* Access rights of each side's buffer (a program may widen them). */
#ifndef FIXTURE_ACCESS
#define FIXTURE_ACCESS (UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ)
#endif

struct side {
	struct uiw_pd *pd;
	struct uiw_cq *cq;
	struct uiw_qp *qp;
	uint8_t *buf;
	size_t len;
	struct uiw_mr *mr;
	struct uiw_conn_info info;
	atomic_int disconnected, terminated;
};

struct pair {
	struct side a, b; /* a: active, b: passive */
	struct uiw_listener *l;
	struct sockaddr_storage addr;
	int accept_rc;
};

static void on_event(struct uiw_qp *qp, enum uiw_qp_event ev, void *ctx)
{
	(void)qp;
	struct side *s = ctx;
	if (ev == UIW_QP_EV_DISCONNECTED)
		atomic_fetch_add(&s->disconnected, 1);
	if (ev == UIW_QP_EV_TERMINATE)
		atomic_fetch_add(&s->terminated, 1);
}

static void side_init(struct side *s, size_t len)
{
	s->pd = uiw_pd_alloc();
	assert_non_null(s->pd);
	assert_int_equal(uiw_cq_create(1024, NULL, NULL, &s->cq), 0);
	struct uiw_qp_init_attr a = {.pd = s->pd,
				     .send_cq = s->cq,
				     .recv_cq = s->cq,
				     .max_send_wr = 64,
				     .max_recv_wr = 64,
				     .max_send_sge = 2,
				     .max_recv_sge = 2,
				     .max_inline = 64,
				     .ctx = s};
	assert_int_equal(uiw_qp_create(&a, &s->qp), 0);
	uiw_qp_set_event_cb(s->qp, on_event, s);
	s->len = len;
	s->buf = malloc(len);
	assert_non_null(s->buf);
	memset(s->buf, 0, len);
	assert_int_equal(uiw_mr_reg(s->pd, s->buf, len, (uintptr_t)s->buf, FIXTURE_ACCESS, &s->mr),
			 0);
}

static void side_fini(struct side *s)
{
	assert_int_equal(uiw_qp_destroy(s->qp), 0);
	assert_int_equal(uiw_mr_dereg(s->mr), 0);
	assert_int_equal(uiw_cq_destroy(s->cq), 0);
	assert_int_equal(uiw_pd_free(s->pd), 0);
	free(s->buf);
}

static void *passive(void *arg)
{
	struct pair *p = arg;
	struct uiw_conn_req *req;
	p->accept_rc = uiw_listener_get_request(p->l, 5000, &req, &p->b.info);
	if (p->accept_rc)
		return NULL;
	struct uiw_conn_param cp = {.private_data = "reply-pd",
				    .private_data_len = 8,
				    .responder_resources = 4,
				    .initiator_depth = 4};
	p->accept_rc = uiw_accept(req, p->b.qp, &cp, 5000);
	return NULL;
}

/* Connects a (active) to b (passive) over loopback with private data both
 * ways; check, if not NULL, is run on each QP afterwards. */
static void pair_connect_with(struct pair *p, size_t len, void (*check)(struct uiw_qp *))
{
	memset(p, 0, sizeof(*p));
	side_init(&p->a, len);
	side_init(&p->b, len);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(uiw_listen((struct sockaddr *)&sin, 8, &p->l), 0);
	uiw_listener_addr(p->l, &p->addr);
	pthread_t t;
	pthread_create(&t, NULL, passive, p);
	struct uiw_conn_param cp = {.private_data = "hello",
				    .private_data_len = 5,
				    .responder_resources = 4,
				    .initiator_depth = 4};
	bool rejected;
	int rc = uiw_connect(p->a.qp, NULL, (struct sockaddr *)&p->addr, &cp, 5000, &p->a.info,
			     &rejected);
	pthread_join(t, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(p->accept_rc, 0);
	assert_int_equal(p->b.info.private_data_len, 5);
	assert_memory_equal(p->b.info.private_data, "hello", 5);
	assert_int_equal(p->a.info.private_data_len, 8);
	assert_memory_equal(p->a.info.private_data, "reply-pd", 8);
	assert_int_equal(uiw_qp_get_state(p->a.qp), UIW_QPS_RTS);
	assert_int_equal(uiw_qp_get_state(p->b.qp), UIW_QPS_RTS);
	if (check) {
		check(p->a.qp);
		check(p->b.qp);
	}
}

static void pair_fini(struct pair *p)
{
	uiw_listener_close(p->l);
	side_fini(&p->a);
	side_fini(&p->b);
}

/* Polls until n CQEs arrived (5 s at most). */
static int poll_n(struct uiw_cq *cq, struct uiw_wc *wc, int n)
{
	int got = 0;
	for (int i = 0; i < 50000 && got < n; i++) {
		got += uiw_cq_poll(cq, n - got, wc + got);
		if (got < n)
			usleep(100);
	}
	return got;
}

static void post_recv(struct side *s, uint64_t id, size_t off, uint32_t len)
{
	struct uiw_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->stag};
	struct uiw_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1};
	int bad;
	assert_int_equal(uiw_qp_post_recv(s->qp, &wr, 1, &bad), 0);
}

#endif
