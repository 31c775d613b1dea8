/* rdma_cm end to end on 127.0.0.1 through the engine: connect / accept
 * with private data both ways, a Send/Recv each way with the data checked,
 * reject with private data (REJECTED), disconnect giving exactly one
 * DISCONNECTED on each side, and the synchronous endpoint API
 * (rdma_create_ep / rdma_get_request / blocking connect and accept);
 * connections closed right after they are established (cmtime's pattern:
 * rdma_disconnect and rdma_destroy_qp at once) giving DISCONNECTED on both
 * sides, after ESTABLISHED; id->pd (the device's PD once an id has a
 * device, the QP's after rdma_create_qp) and an application QP made on it,
 * connected by qp_num; a Send posted the moment rdma_accept returns. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "cm_util.h"

#define EV_MS 5000

static struct sockaddr_in lo(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* One side's verbs resources. */
struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[2][256]; /* [0] send, [1] recv */
};

static void side_init(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;

	memset(s->buf, 0, sizeof(s->buf));
	s->pd = ibv_alloc_pd(id->verbs);
	assert_non_null(s->pd);
	s->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	assert_non_null(s->cq);
	s->mr =
	    ibv_reg_mr(s->pd, s->buf, sizeof(s->buf),
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	assert_non_null(s->mr);
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = attr.recv_cq = s->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 8;
	attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, s->pd, &attr), 0);
	assert_non_null(id->qp);
}

static void side_fini(struct side *s, struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	ibv_dereg_mr(s->mr);
	ibv_destroy_cq(s->cq);
	ibv_dealloc_pd(s->pd);
}

static void post_recv(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_sge sge = {(uintptr_t)s->buf[1], sizeof(s->buf[1]), s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;

	assert_int_equal(ibv_post_recv(id->qp, &wr, &bad), 0);
}

static void post_send(struct side *s, struct rdma_cm_id *id, const char *msg)
{
	struct ibv_sge sge = {(uintptr_t)s->buf[0], (uint32_t)strlen(msg) + 1, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;

	strcpy(s->buf[0], msg);
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	assert_int_equal(ibv_post_send(id->qp, &wr, &bad), 0);
}

/* Polls s->cq for a completion with wr_id, at most 5 s. */
static void wait_wc(struct side *s, uint64_t wr_id, struct ibv_wc *out)
{
	struct timespec t0, t, nap = {0, 1000000};

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(s->cq, 1, &wc);

		assert_true(n >= 0);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				fail_msg("wr %llu: %s", (unsigned long long)wc.wr_id,
					 ibv_wc_status_str(wc.status));
			if (wc.wr_id == wr_id) {
				if (out)
					*out = wc;
				return;
			}
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			fail_msg("no completion for wr %llu", (unsigned long long)wr_id);
		nanosleep(&nap, NULL);
	}
}

struct pair {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen, *server, *client;
	struct side s, c;
	uint16_t port;
};

/* Waits for an event of type want on ch and acks it; with id, it must be
 * for that id. */
static void expect_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		       struct rdma_cm_id *id)
{
	struct rdma_cm_event *ev = cm_expect(ch, want, EV_MS);

	if (!ev)
		fail_msg("no %s", rdma_event_str(want));
	if (id)
		assert_ptr_equal(ev->id, id);
	rdma_ack_cm_event(ev);
}

/* Resolves id's address and route to 127.0.0.1:port (events on ch). */
static void resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, uint16_t port)
{
	struct sockaddr_in a = lo(port);

	assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000), 0);
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	assert_int_equal(rdma_resolve_route(id, 2000), 0);
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
}

/* The listening id bound to a free port (listening now unless listen_now
 * is false: then the port must be known from the bind alone), the client
 * resolved to it with its verbs resources. */
static void bind_and_resolve(struct pair *p, bool listen_now)
{
	struct sockaddr_in a = lo(0);

	p->sch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	assert_non_null(p->sch);
	assert_non_null(p->cch);
	assert_int_equal(rdma_create_id(p->sch, &p->listen, (void *)0x5eed, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(p->listen, (struct sockaddr *)&a), 0);
	if (listen_now)
		assert_int_equal(rdma_listen(p->listen, 4), 0);
	p->port = ntohs(rdma_get_src_port(p->listen));
	if (!listen_now)
		assert_int_not_equal(p->port, 0);

	assert_int_equal(rdma_create_id(p->cch, &p->client, NULL, RDMA_PS_TCP), 0);
	resolve(p->cch, p->client, p->port);
	side_init(&p->c, p->client);
}

static void listen_and_resolve(struct pair *p)
{
	bind_and_resolve(p, true);
}

/* The server side of an accepted pair (after its CONNECT_REQUEST ev, which
 * this acks): its verbs resources, rdma_accept without parameters. */
static void accept_request(struct pair *p, struct rdma_cm_event *ev)
{
	p->server = ev->id;
	rdma_ack_cm_event(ev);
	side_init(&p->s, p->server);
	assert_int_equal(rdma_accept(p->server, NULL), 0);
}

/* Destroys the pair's ids (server, client, listening) and channels. */
static void pair_close(struct pair *p)
{
	rdma_destroy_id(p->server);
	rdma_destroy_id(p->client);
	rdma_destroy_id(p->listen);
	rdma_destroy_event_channel(p->sch);
	rdma_destroy_event_channel(p->cch);
}

/* Client connects with pdata; returns the server's CONNECT_REQUEST (unacked). */
static struct rdma_cm_event *connect_and_request(struct pair *p, const char *pdata)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;

	memset(&cp, 0, sizeof(cp));
	cp.private_data = pdata;
	cp.private_data_len = (uint8_t)strlen(pdata) + 1;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	assert_int_equal(rdma_connect(p->client, &cp), 0);
	ev = cm_expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST, EV_MS);
	assert_non_null(ev);
	assert_ptr_equal(ev->listen_id, p->listen);
	assert_ptr_not_equal(ev->id, p->listen);
	assert_non_null(ev->id->verbs);
	assert_ptr_equal(ev->id->context, (void *)0x5eed);
	assert_int_equal(ev->param.conn.private_data_len, strlen(pdata) + 1);
	assert_non_null(ev->param.conn.private_data);
	assert_string_equal((const char *)ev->param.conn.private_data, pdata);
	assert_int_equal(rdma_get_local_addr(ev->id)->sa_family, AF_INET);
	assert_int_equal(ntohs(rdma_get_src_port(ev->id)), p->port);
	assert_int_equal(((struct sockaddr_in *)rdma_get_peer_addr(ev->id))->sin_addr.s_addr,
			 htonl(INADDR_LOOPBACK));
	assert_int_not_equal(rdma_get_dst_port(ev->id), 0);
	return ev;
}

static void no_more_events(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = cm_wait_event(ch, 300);

	if (ev) {
		fprintf(stderr, "unexpected %s\n", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
		fail();
	}
}

static void test_connect_send_disconnect(void **state)
{
	static const char sdata[] = "server-private-data";
	struct pair p;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_wc wc;

	(void)state;
	memset(&p, 0, sizeof(p));
	listen_and_resolve(&p);
	post_recv(&p.c, p.client);
	/* IRD / ORD above the device's 128 (other than RDMA_MAX_*, 255):
	 * EINVAL, as rdma-core's librdmacm says, and the id stays usable */
	memset(&cp, 0, sizeof(cp));
	cp.initiator_depth = 129;
	errno = 0;
	assert_int_equal(rdma_connect(p.client, &cp), -1);
	assert_int_equal(errno, EINVAL);
	ev = connect_and_request(&p, "client-private-data");
	p.server = ev->id;
	rdma_ack_cm_event(ev);

	side_init(&p.s, p.server);
	post_recv(&p.s, p.server);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = sdata;
	cp.private_data_len = sizeof(sdata);
	cp.responder_resources = 129;
	cp.initiator_depth = 1;
	errno = 0;
	assert_int_equal(rdma_accept(p.server, &cp), -1);
	assert_int_equal(errno, EINVAL);
	cp.responder_resources = RDMA_MAX_RESP_RES; /* the device's most */
	assert_int_equal(rdma_accept(p.server, &cp), 0);

	expect_ack(p.sch, RDMA_CM_EVENT_ESTABLISHED, p.server);
	ev = cm_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, EV_MS);
	assert_non_null(ev);
	assert_ptr_equal(ev->id, p.client);
	assert_int_equal(ev->param.conn.private_data_len, sizeof(sdata));
	assert_memory_equal(ev->param.conn.private_data, sdata, sizeof(sdata));
	rdma_ack_cm_event(ev);

	/* Send / Recv both ways */
	post_send(&p.c, p.client, "ping data from the client");
	wait_wc(&p.c, 1, NULL);
	wait_wc(&p.s, 2, &wc);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, sizeof("ping data from the client"));
	assert_string_equal(p.s.buf[1], "ping data from the client");
	post_send(&p.s, p.server, "pong");
	wait_wc(&p.s, 1, NULL);
	wait_wc(&p.c, 2, &wc);
	assert_string_equal(p.c.buf[1], "pong");

	/* graceful disconnect: one DISCONNECTED on each side */
	assert_int_equal(rdma_disconnect(p.client), 0);
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, p.client);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, p.server);
	assert_int_equal(rdma_disconnect(p.server), 0); /* already closed: fine */
	no_more_events(p.cch);
	no_more_events(p.sch);

	side_fini(&p.s, p.server);
	side_fini(&p.c, p.client);
	assert_int_equal(rdma_destroy_id(p.server), 0);
	assert_int_equal(rdma_destroy_id(p.client), 0);
	assert_int_equal(rdma_destroy_id(p.listen), 0);
	rdma_destroy_event_channel(p.sch);
	rdma_destroy_event_channel(p.cch);
}

static void test_reject(void **state)
{
	static const char why[] = "go away";
	struct pair p;
	struct rdma_cm_event *ev;

	(void)state;
	memset(&p, 0, sizeof(p));
	listen_and_resolve(&p);
	ev = connect_and_request(&p, "may I?");
	p.server = ev->id;
	rdma_ack_cm_event(ev);
	assert_int_equal(rdma_reject(p.server, why, sizeof(why)), 0);
	errno = 0;
	assert_int_equal(rdma_accept(p.server, NULL), -1); /* request consumed */
	ev = cm_expect(p.cch, RDMA_CM_EVENT_REJECTED, EV_MS);
	assert_non_null(ev);
	assert_int_equal(ev->status, -ECONNREFUSED);
	assert_int_equal(ev->param.conn.private_data_len, sizeof(why));
	assert_memory_equal(ev->param.conn.private_data, why, sizeof(why));
	rdma_ack_cm_event(ev);
	assert_int_equal(rdma_destroy_id(p.server), 0);
	no_more_events(p.sch);
	side_fini(&p.c, p.client);
	rdma_destroy_id(p.client);
	rdma_destroy_id(p.listen);
	rdma_destroy_event_channel(p.sch);
	rdma_destroy_event_channel(p.cch);
}

/* Nobody listens: REJECTED (TCP refused, iw_cm semantics). */
static void test_connect_refused(void **state)
{
	struct pair p;
	struct rdma_cm_event *ev;

	(void)state;
	memset(&p, 0, sizeof(p));
	listen_and_resolve(&p);
	rdma_destroy_id(p.listen);
	p.listen = NULL;
	assert_int_equal(rdma_connect(p.client, NULL), 0);
	ev = cm_wait_event(p.cch, 15000);
	assert_non_null(ev);
	assert_true(ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_UNREACHABLE ||
		    ev->event == RDMA_CM_EVENT_CONNECT_ERROR);
	assert_int_not_equal(ev->status, 0);
	rdma_ack_cm_event(ev);
	side_fini(&p.c, p.client);
	rdma_destroy_id(p.client);
	rdma_destroy_event_channel(p.sch);
	rdma_destroy_event_channel(p.cch);
}

/* The active side connects to a bound port a moment before the passive
 * side calls rdma_listen (qperf 0.4.11 tells its client the port first):
 * the connection must still be made, not REJECTED. */
static void test_connect_before_listen(void **state)
{
	struct pair p;
	struct rdma_cm_event *ev;
	struct timespec nap = {0, 40 * 1000000};

	(void)state;
	memset(&p, 0, sizeof(p));
	bind_and_resolve(&p, false);
	assert_int_equal(rdma_connect(p.client, NULL), 0);
	nanosleep(&nap, NULL); /* the client's first SYN is refused */
	assert_int_equal(rdma_listen(p.listen, 4), 0);
	ev = cm_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, EV_MS);
	assert_non_null(ev);
	accept_request(&p, ev);
	expect_ack(p.cch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	expect_ack(p.sch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	assert_int_equal(rdma_disconnect(p.client), 0);
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	side_fini(&p.s, p.server);
	side_fini(&p.c, p.client);
	pair_close(&p);
}

/* ------------------------------------------- synchronous endpoints */

struct ep_server {
	struct rdma_cm_id *listen;
	int ret;
	char got[64];
};

static void *ep_server_thread(void *arg)
{
	struct ep_server *sv = arg;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char buf[64];

	sv->ret = -1;
	if (rdma_get_request(sv->listen, &id))
		return NULL;
	if (!id->qp || !id->event || id->event->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		return NULL;
	mr = rdma_reg_msgs(id, buf, sizeof(buf));
	if (!mr)
		return NULL;
	if (rdma_post_recv(id, NULL, buf, sizeof(buf), mr))
		return NULL;
	if (rdma_accept(id, NULL))
		return NULL;
	if (rdma_get_recv_comp(id, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
		return NULL;
	memcpy(sv->got, buf, sizeof(sv->got));
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	sv->ret = 0;
	return NULL;
}

static void test_sync_endpoints(void **state)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct ep_server sv = {0};
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	pthread_t t;
	char port[16], msg[64] = "sync endpoint hello";

	(void)state;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res), 0);
	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 16;
	attr.sq_sig_all = 1;
	attr.qp_type = IBV_QPT_RC;
	assert_int_equal(rdma_create_ep(&sv.listen, res, NULL, &attr), 0);
	rdma_freeaddrinfo(res);
	assert_int_equal(rdma_listen(sv.listen, 0), 0);
	snprintf(port, sizeof(port), "%u", ntohs(rdma_get_src_port(sv.listen)));
	assert_int_equal(pthread_create(&t, NULL, ep_server_thread, &sv), 0);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", port, &hints, &res), 0);
	assert_int_equal(rdma_create_ep(&id, res, NULL, &attr), 0);
	rdma_freeaddrinfo(res);
	assert_non_null(id->qp);
	assert_non_null(id->pd);
	assert_non_null(id->send_cq);
	mr = rdma_reg_msgs(id, msg, sizeof(msg));
	assert_non_null(mr);
	assert_int_equal(rdma_connect(id, NULL), 0);
	assert_int_equal(rdma_post_send(id, NULL, msg, sizeof(msg), mr, 0), 0);
	assert_int_equal(rdma_get_send_comp(id, &wc), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	pthread_join(t, NULL);
	assert_int_equal(sv.ret, 0);
	assert_string_equal(sv.got, "sync endpoint hello");
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(sv.listen);
}

/* ------------------------------------------- id->pd and an external QP */

/* An application-made QP on id->pd (rdma-core's test_rdmacm.py
 * test_rdmacm_async_traffic_external_qp: QP(cmid.pd, ...), moved through
 * INIT / RTR / RTS with rdma_init_qp_attr, connected by qp_num). */
struct ext_side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[2][64];
};

static void ext_init(struct ext_side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;
	enum ibv_qp_state st[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};

	/* librdmacm gives every id with a device the device's PD */
	assert_non_null(id->verbs);
	assert_non_null(id->pd);
	assert_ptr_equal(id->pd->context, id->verbs);
	assert_null(id->qp);
	memset(s->buf, 0, sizeof(s->buf));
	s->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	assert_non_null(s->cq);
	s->mr = ibv_reg_mr(id->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(s->mr);
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = attr.recv_cq = s->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	s->qp = ibv_create_qp(id->pd, &attr);
	assert_non_null(s->qp);
	for (unsigned i = 0; i < 3; i++) {
		struct ibv_qp_attr qa = {.qp_state = st[i]};
		int mask = 0;

		assert_int_equal(rdma_init_qp_attr(id, &qa, &mask), 0);
		assert_int_equal(ibv_modify_qp(s->qp, &qa, mask), 0);
	}
}

static void ext_fini(struct ext_side *s)
{
	assert_int_equal(ibv_destroy_qp(s->qp), 0);
	assert_int_equal(ibv_dereg_mr(s->mr), 0);
	assert_int_equal(ibv_destroy_cq(s->cq), 0);
}

static void ext_recv(struct ext_side *s)
{
	struct ibv_sge sge = {(uintptr_t)s->buf[1], sizeof(s->buf[1]), s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;

	assert_int_equal(ibv_post_recv(s->qp, &wr, &bad), 0);
}

/* Sends msg from a to b and checks it arrived. */
static void ext_send_check(struct ext_side *a, struct ext_side *b, const char *msg)
{
	struct ibv_sge sge = {(uintptr_t)a->buf[0], (uint32_t)strlen(msg) + 1, a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	struct side pa = {.cq = a->cq}, pb = {.cq = b->cq};
	struct ibv_wc wc;

	strcpy(a->buf[0], msg);
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	assert_int_equal(ibv_post_send(a->qp, &wr, &bad), 0);
	wait_wc(&pa, 1, NULL);
	wait_wc(&pb, 2, &wc);
	assert_int_equal(wc.byte_len, strlen(msg) + 1);
	assert_string_equal(b->buf[1], msg);
}

static void test_external_qp_on_id_pd(void **state)
{
	struct sockaddr_in a = lo(0);
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *client, *server, *any;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct ext_side es, ec;
	struct ibv_qp_init_attr attr;

	(void)state;
	assert_non_null(sch);
	assert_non_null(cch);
	/* a wildcard bind has no device yet: no verbs, no pd */
	assert_int_equal(rdma_create_id(sch, &any, NULL, RDMA_PS_TCP), 0);
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	assert_int_equal(rdma_bind_addr(any, (struct sockaddr *)&a), 0);
	assert_null(any->verbs);
	assert_null(any->pd);
	assert_int_equal(rdma_destroy_id(any), 0);

	a = lo(0);
	assert_int_equal(rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP), 0);
	assert_null(listen->pd);
	assert_int_equal(rdma_bind_addr(listen, (struct sockaddr *)&a), 0);
	/* bound to a loopback address: the device's PD only while the
	 * device's port is on lo (else no device yet, as a wildcard bind) */
	assert_true((listen->pd != NULL) == cm_port_on_lo());
	assert_true((listen->verbs != NULL) == cm_port_on_lo());
	assert_int_equal(rdma_listen(listen, 4), 0);
	assert_int_equal(rdma_create_id(cch, &client, NULL, RDMA_PS_TCP), 0);
	assert_null(client->pd);
	resolve(cch, client, ntohs(rdma_get_src_port(listen)));
	assert_non_null(client->pd); /* address resolved: the device's */
	ext_init(&ec, client);
	ext_recv(&ec);

	memset(&cp, 0, sizeof(cp));
	cp.qp_num = ec.qp->qp_num;
	assert_int_equal(rdma_connect(client, &cp), 0);
	ev = cm_expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, EV_MS);
	assert_non_null(ev);
	server = ev->id;
	rdma_ack_cm_event(ev);
	assert_ptr_equal(server->pd, client->pd); /* one PD per device */
	ext_init(&es, server);
	ext_recv(&es);
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = es.qp->qp_num;
	assert_int_equal(rdma_accept(server, &cp), 0);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, server);
	expect_ack(cch, RDMA_CM_EVENT_ESTABLISHED, client);
	ext_send_check(&ec, &es, "external qp, client to server");
	ext_send_check(&es, &ec, "and back");
	assert_int_equal(rdma_disconnect(client), 0);
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED, client);
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED, server);
	ext_fini(&es);
	ext_fini(&ec);

	/* rdma_create_qp with pd NULL uses id->pd; with a PD of its own, id->pd
	 * becomes that one (librdmacm: id->pd = qp->pd) */
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	{
		struct ibv_pd *dev_pd = client->pd, *own = ibv_alloc_pd(client->verbs);

		assert_int_equal(rdma_create_qp(client, NULL, &attr), 0);
		assert_ptr_equal(client->qp->pd, dev_pd);
		assert_ptr_equal(client->pd, dev_pd);
		rdma_destroy_qp(client);
		assert_non_null(own);
		attr.send_cq = attr.recv_cq = NULL; /* written back, destroyed with the QP */
		assert_int_equal(rdma_create_qp(client, own, &attr), 0);
		assert_ptr_equal(client->pd, own);
		rdma_destroy_qp(client);
		assert_int_equal(ibv_dealloc_pd(own), 0);
		/* a freed PD: EINVAL, never read */
		attr.send_cq = attr.recv_cq = NULL;
		errno = 0;
		assert_int_equal(rdma_create_qp(client, own, &attr), -1);
		assert_int_equal(errno, EINVAL);
		assert_null(client->qp);
	}
	assert_int_equal(rdma_destroy_id(server), 0);
	assert_int_equal(rdma_destroy_id(client), 0);
	assert_int_equal(rdma_destroy_id(listen), 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* ------------------------------------- connect and close at once (cmtime) */

#define BURST 16

/* The server side of test_connect_close_burst: accepts every request with a
 * QP of its own (library PD and CQs, as cmtime does) and records, per
 * connection, the order of ESTABLISHED and DISCONNECTED. */
struct burst_server {
	struct rdma_cm_id *ids[BURST];
	int established[BURST], disconnected[BURST];
	int n, order_errors, other_events;
};

static int burst_index(struct burst_server *b, struct rdma_cm_id *id)
{
	for (int i = 0; i < b->n; i++)
		if (b->ids[i] == id)
			return i;
	return -1;
}

/* A QP of one WR and one SGE each way on the library's PD and CQs (as
 * cmtime does). */
static void create_small_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, NULL, &attr), 0);
}

static void burst_server_event(struct burst_server *b, struct rdma_cm_event *ev)
{
	int i;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		assert_true(b->n < BURST);
		b->ids[b->n++] = ev->id;
		create_small_qp(ev->id);
		assert_int_equal(rdma_accept(ev->id, NULL), 0);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		i = burst_index(b, ev->id);
		assert_true(i >= 0);
		if (b->disconnected[i])
			b->order_errors++;
		b->established[i]++;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		i = burst_index(b, ev->id);
		assert_true(i >= 0);
		if (!b->established[i])
			b->order_errors++;
		b->disconnected[i]++;
		break;
	default:
		fprintf(stderr, "server: unexpected %s status %d\n", rdma_event_str(ev->event),
			ev->status);
		b->other_events++;
	}
	rdma_ack_cm_event(ev);
}

static int burst_count(const int *v)
{
	int n = 0;

	for (int i = 0; i < BURST; i++)
		n += v[i] != 0;
	return n;
}

/* cmtime's pattern: BURST clients connect at once; as soon as a client has
 * its ESTABLISHED it calls rdma_disconnect and at once rdma_destroy_qp,
 * then waits for its DISCONNECTED. Every client must get it (the kernel's
 * iw_cm reports the close after the QP is gone), and every server id
 * ESTABLISHED then DISCONNECTED, exactly once each, even when the close
 * races with the server's accept waiting for the RTR. */
static void test_connect_close_burst(void **state)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen, *cl[BURST];
	struct burst_server b;
	struct rdma_cm_event *ev;
	struct sockaddr_in a = lo(0);
	int c_est[BURST] = {0}, c_disc[BURST] = {0}, c_other = 0;
	uint16_t port;
	struct timespec t0, t;

	(void)state;
	memset(&b, 0, sizeof(b));
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	assert_non_null(sch);
	assert_non_null(cch);
	assert_int_equal(rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(listen, (struct sockaddr *)&a), 0);
	assert_int_equal(rdma_listen(listen, 0), 0);
	port = ntohs(rdma_get_src_port(listen));
	for (int i = 0; i < BURST; i++) {
		assert_int_equal(rdma_create_id(cch, &cl[i], &c_est[i], RDMA_PS_TCP), 0);
		resolve(cch, cl[i], port);
		create_small_qp(cl[i]);
	}
	for (int i = 0; i < BURST; i++)
		assert_int_equal(rdma_connect(cl[i], NULL), 0);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (burst_count(c_disc) < BURST || burst_count(b.disconnected) < BURST) {
		struct pollfd p[2] = {{.fd = sch->fd, .events = POLLIN},
				      {.fd = cch->fd, .events = POLLIN}};

		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20)
			fail_msg("timeout: clients %d/%d disconnected, server %d established %d "
				 "disconnected",
				 burst_count(c_est), burst_count(c_disc),
				 burst_count(b.established), burst_count(b.disconnected));
		if (poll(p, 2, 200) <= 0)
			continue;
		if ((p[0].revents & POLLIN) && !rdma_get_cm_event(sch, &ev))
			burst_server_event(&b, ev);
		if ((p[1].revents & POLLIN) && !rdma_get_cm_event(cch, &ev)) {
			int i = (int)((int *)ev->id->context - c_est);

			assert_true(i >= 0 && i < BURST);
			if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
				c_est[i]++;
				/* close at once, as cmtime does */
				assert_int_equal(rdma_disconnect(ev->id), 0);
				rdma_destroy_qp(ev->id);
			} else if (ev->event == RDMA_CM_EVENT_DISCONNECTED) {
				if (!c_est[i])
					c_other++;
				c_disc[i]++;
			} else {
				fprintf(stderr, "client: unexpected %s status %d\n",
					rdma_event_str(ev->event), ev->status);
				c_other++;
			}
			rdma_ack_cm_event(ev);
		}
	}
	no_more_events(cch);
	no_more_events(sch);
	assert_int_equal(c_other, 0);
	assert_int_equal(b.other_events, 0);
	assert_int_equal(b.order_errors, 0);
	assert_int_equal(b.n, BURST);
	for (int i = 0; i < BURST; i++) {
		assert_int_equal(c_est[i], 1);
		assert_int_equal(c_disc[i], 1);
		assert_int_equal(b.established[i], 1);
		assert_int_equal(b.disconnected[i], 1);
		assert_int_equal(rdma_disconnect(b.ids[i]), 0); /* closed already: fine */
		rdma_destroy_qp(b.ids[i]);
		assert_int_equal(rdma_destroy_id(b.ids[i]), 0);
		assert_int_equal(rdma_destroy_id(cl[i]), 0);
	}
	assert_int_equal(rdma_destroy_id(listen), 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* rdma_disconnect then rdma_destroy_qp before the peer has answered the
 * FIN: the client still gets exactly one DISCONNECTED, and the server
 * (which never calls rdma_disconnect) its own. */
static void test_disconnect_then_destroy_qp(void **state)
{
	struct pair p;

	(void)state;
	memset(&p, 0, sizeof(p));
	listen_and_resolve(&p);
	accept_request(&p, connect_and_request(&p, "close soon"));
	expect_ack(p.cch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	assert_int_equal(rdma_disconnect(p.client), 0);
	side_fini(&p.c, p.client); /* rdma_destroy_qp at once */
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, p.client);
	expect_ack(p.sch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, p.server);
	no_more_events(p.cch);
	no_more_events(p.sch);
	side_fini(&p.s, p.server);
	pair_close(&p);
}

/* rdma_accept returns with the QP in RTS (kernel siw): a Send posted the
 * moment it returns, before ESTABLISHED, is taken (no EINVAL), held until
 * the client's RTR arrives (peer-to-peer) and received intact. 20 rounds:
 * the Send must never lose the race against the connection setup. */
/* The client disconnects, both sides see DISCONNECTED, everything of the
 * pair is released. */
static void disconnect_and_close(struct pair *p)
{
	assert_int_equal(rdma_disconnect(p->client), 0);
	expect_ack(p->cch, RDMA_CM_EVENT_DISCONNECTED, p->client);
	expect_ack(p->sch, RDMA_CM_EVENT_DISCONNECTED, p->server);
	side_fini(&p->s, p->server);
	side_fini(&p->c, p->client);
	pair_close(p);
}

static void test_send_right_after_accept(void **state)
{
	static const char msg[] = "sent right after rdma_accept";

	(void)state;
	for (int i = 0; i < 20; i++) {
		struct rdma_cm_event *ev;
		struct ibv_wc wc;
		struct pair p;

		memset(&p, 0, sizeof(p));
		listen_and_resolve(&p);
		post_recv(&p.c, p.client);
		ev = connect_and_request(&p, "early send");
		p.server = ev->id;
		rdma_ack_cm_event(ev);
		side_init(&p.s, p.server);
		assert_int_equal(rdma_accept(p.server, NULL), 0);
		post_send(&p.s, p.server, msg); /* asserts ibv_post_send == 0 */

		wait_wc(&p.s, 1, &wc);
		assert_int_equal(wc.opcode, IBV_WC_SEND);
		expect_ack(p.cch, RDMA_CM_EVENT_ESTABLISHED, p.client);
		wait_wc(&p.c, 2, &wc);
		assert_int_equal(wc.opcode, IBV_WC_RECV);
		assert_int_equal(wc.byte_len, sizeof(msg));
		assert_string_equal(p.c.buf[1], msg);
		expect_ack(p.sch, RDMA_CM_EVENT_ESTABLISHED, p.server);

		disconnect_and_close(&p);
	}
}

/* The IP TOS byte of this process's connected TCP socket whose local
 * (local true) or peer port is port; -1 if there is none. */
static int tos_of_socket(uint16_t port, bool local)
{
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in a;
		socklen_t len = sizeof(a);
		int tos = -1, type = 0;
		socklen_t tl = sizeof(type);

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || type != SOCK_STREAM)
			continue;
		if ((local ? getsockname(fd, (struct sockaddr *)&a, &len)
			   : getpeername(fd, (struct sockaddr *)&a, &len)) ||
		    a.sin_family != AF_INET || ntohs(a.sin_port) != port)
			continue;
		len = sizeof(a);
		if (getpeername(fd, (struct sockaddr *)&a, &len))
			continue; /* the listener */
		tl = sizeof(tos);
		if (getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &tl) == 0)
			return tos;
	}
	return -1;
}

/* RDMA_OPTION_ID_TOS: the byte the client set is on its connection's
 * socket, the listener's on the connections it accepts (rdma_cm hands it
 * to an iWARP device the same way); a wrong optlen is EINVAL. */
static void test_tos(void **state)
{
	struct pair p;
	uint8_t ctos = 0x28, stos = 0x48;
	uint32_t wide = 0x28;
	struct rdma_cm_event *ev;

	(void)state;
	memset(&p, 0, sizeof(p));
	listen_and_resolve(&p);
	errno = 0;
	assert_int_equal(
	    rdma_set_option(p.client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &wide, sizeof(wide)), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(
	    rdma_set_option(p.client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &ctos, sizeof(ctos)), 0);
	assert_int_equal(
	    rdma_set_option(p.listen, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &stos, sizeof(stos)), 0);
	ev = connect_and_request(&p, "tos");
	accept_request(&p, ev);
	expect_ack(p.cch, RDMA_CM_EVENT_ESTABLISHED, p.client);
	expect_ack(p.sch, RDMA_CM_EVENT_ESTABLISHED, p.server);
	assert_int_equal(tos_of_socket(p.port, false), ctos); /* the client's socket */
	assert_int_equal(tos_of_socket(p.port, true), stos);  /* the accepted one */

	disconnect_and_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_connect_send_disconnect),
	    cmocka_unit_test(test_reject),
	    cmocka_unit_test(test_connect_refused),
	    cmocka_unit_test(test_connect_before_listen),
	    cmocka_unit_test(test_sync_endpoints),
	    cmocka_unit_test(test_disconnect_then_destroy_qp),
	    cmocka_unit_test(test_external_qp_on_id_pd),
	    cmocka_unit_test(test_connect_close_burst),
	    cmocka_unit_test(test_send_right_after_accept),
	    cmocka_unit_test(test_tos),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
