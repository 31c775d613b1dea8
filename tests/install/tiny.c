/* tiny.c: a program built against an installed uiwarp (pkg-config or
 * find_package(uiwarp)): two QPs connected over loopback TCP through the
 * engine API (<uiwarp/rdmap.h>), one 4 KiB Send from the active to the
 * passive side, the bytes compared. Prints "tiny: ok" and exits 0, else
 * says what failed and exits 1. Bounded: every wait has a deadline. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uiwarp/rdmap.h>

#define LEN 4096

struct side {
	struct uiw_pd *pd;
	struct uiw_cq *cq;
	struct uiw_qp *qp;
	struct uiw_mr *mr;
	unsigned char buf[LEN];
};

static struct uiw_listener *listener;
static int accept_rc = -1;

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "tiny: failed: %s (line %d)\n", #c, __LINE__);             \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void side_init(struct side *s)
{
	s->pd = uiw_pd_alloc();
	CHECK(s->pd);
	CHECK(uiw_cq_create(16, NULL, NULL, &s->cq) == 0);
	struct uiw_qp_init_attr a = {.pd = s->pd,
				     .send_cq = s->cq,
				     .recv_cq = s->cq,
				     .max_send_wr = 4,
				     .max_recv_wr = 4,
				     .max_send_sge = 1,
				     .max_recv_sge = 1};
	CHECK(uiw_qp_create(&a, &s->qp) == 0);
	CHECK(uiw_mr_reg(s->pd, s->buf, LEN, (uintptr_t)s->buf, UIW_ACCESS_LOCAL_WRITE, &s->mr) ==
	      0);
}

static void *passive(void *arg)
{
	struct side *b = arg;
	struct uiw_conn_req *req;
	struct uiw_conn_info info;
	if (uiw_listener_get_request(listener, 10000, &req, &info) == 0) {
		struct uiw_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
		accept_rc = uiw_accept(req, b->qp, &p, 10000);
	}
	return NULL;
}

static int poll_one(struct uiw_cq *cq, struct uiw_wc *wc)
{
	for (int i = 0; i < 10000; i++) {
		if (uiw_cq_poll(cq, 1, wc) == 1)
			return 1;
		usleep(1000);
	}
	return 0;
}

int main(void)
{
	static struct side a, b;
	side_init(&a);
	side_init(&b);
	for (int i = 0; i < LEN; i++)
		a.buf[i] = (unsigned char)(i * 7 + 3);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK(uiw_listen((struct sockaddr *)&sin, 4, &listener) == 0);
	struct sockaddr_storage bound;
	uiw_listener_addr(listener, &bound);
	struct uiw_sge rs = {.addr = (uintptr_t)b.buf, .length = LEN, .lkey = b.mr->stag};
	struct uiw_recv_wr rw = {.wr_id = 2, .sg_list = &rs, .num_sge = 1};
	int bad;
	CHECK(uiw_qp_post_recv(b.qp, &rw, 1, &bad) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, passive, &b) == 0);
	struct uiw_conn_param p = {.responder_resources = 1, .initiator_depth = 1};
	struct uiw_conn_info info;
	bool rejected;
	CHECK(uiw_connect(a.qp, NULL, (struct sockaddr *)&bound, &p, 10000, &info, &rejected) == 0);
	pthread_join(t, NULL);
	CHECK(accept_rc == 0);
	struct uiw_sge ss = {.addr = (uintptr_t)a.buf, .length = LEN, .lkey = a.mr->stag};
	struct uiw_send_wr sw = {.wr_id = 1,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &ss,
				 .num_sge = 1};
	CHECK(uiw_qp_post_send(a.qp, &sw, 1, &bad) == 0);
	struct uiw_wc wc;
	CHECK(poll_one(a.cq, &wc) && wc.wr_id == 1 && wc.status == UIW_WC_SUCCESS);
	CHECK(poll_one(b.cq, &wc) && wc.wr_id == 2 && wc.status == UIW_WC_SUCCESS &&
	      wc.byte_len == LEN);
	CHECK(memcmp(a.buf, b.buf, LEN) == 0);
	struct uiw_qp_stats st;
	uiw_qp_get_stats(a.qp, &st);
	CHECK(st.tx_bytes >= LEN);
	uiw_qp_destroy(a.qp);
	uiw_qp_destroy(b.qp);
	uiw_listener_close(listener);
	printf("tiny: ok (sent %llu stream bytes in %llu FPDUs)\n", (unsigned long long)st.tx_bytes,
	       (unsigned long long)st.tx_fpdus);
	return 0;
}
