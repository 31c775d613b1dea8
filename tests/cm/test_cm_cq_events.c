/* Completion events of a channel that an event loop polls before it calls
 * ibv_get_cq_event (tgtd's epoll loop, libiscsi's iSER service): a record
 * whose completions were polled before it was read is taken off the
 * channel when ibv_poll_cq empties its CQ (the descriptor is then not
 * readable), and one that cannot be (a record of another CQ ahead of it) is
 * reported, never waited past: a readable descriptor always gives an event
 * at once. Before, ibv_get_cq_event dropped such a record and waited for the
 * next completion (a blocking descriptor: tgtd stopped until the
 * initiator's next command; a non-blocking one: EAGAIN after poll said
 * readable). A connection on 127.0.0.1 whose client has its send CQ and
 * receive CQ on one channel. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG 64

struct server {
	struct rdma_cm_id *listen;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int go;	 /* sends to make */
	int got; /* receives completed */
	char buf[2][MSG];
};

static void wait_go(struct server *s, int n)
{
	pthread_mutex_lock(&s->lock);
	while (s->go < n)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

/* Accepts one connection; sends one message each time the test says go;
 * receives the client's three Sends. */
static void *server_main(void *arg)
{
	struct server *s = arg;
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_get_request(s->listen, &id) || rdma_create_qp(id, NULL, &a))
		return NULL;
	mr = rdma_reg_msgs(id, s->buf, sizeof(s->buf));
	if (!mr)
		return NULL;
	for (int i = 0; i < 3; i++)
		if (rdma_post_recv(id, NULL, s->buf[1], MSG, mr))
			return NULL;
	if (rdma_accept(id, NULL))
		return NULL;
	for (int i = 1; i <= 2; i++) {
		wait_go(s, i);
		strcpy(s->buf[0], "from the server");
		if (rdma_post_send(id, NULL, s->buf[0], MSG, mr, 0) ||
		    rdma_get_send_comp(id, &wc) != 1)
			return NULL;
	}
	for (int i = 0; i < 3; i++)
		if (rdma_get_recv_comp(id, &wc) != 1)
			return NULL;
	pthread_mutex_lock(&s->lock);
	s->got = 3;
	pthread_mutex_unlock(&s->lock);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return NULL;
}

static void go(struct server *s)
{
	pthread_mutex_lock(&s->lock);
	s->go++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static bool readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Waits up to 5 s until the channel holds n records (SIOCINQ counts the
 * bytes of all of them). */
static void wait_records(int fd, int n)
{
	int q = 0;

	for (int i = 0; i < 500; i++) {
		assert_int_equal(ioctl(fd, SIOCINQ, &q), 0);
		if (q >= n * (int)sizeof(void *))
			return;
		usleep(10000);
	}
	fail_msg("%d bytes queued on the channel, wanted %d records", q, n);
}

/* Polls cq until it gives one completion (5 s), then once more (empty). */
static void poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n = 0;

	for (int i = 0; i < 5000 && n == 0; i++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (!n)
			usleep(1000);
	}
	assert_int_equal(n, 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
}

static void send_one(struct rdma_cm_id *id, char *buf, struct ibv_mr *mr)
{
	strcpy(buf, "from the client");
	assert_int_equal(rdma_post_send(id, NULL, buf, MSG, mr, 0), 0);
}

static void test_stale_records(void **state)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_flags = RAI_PASSIVE}, *res;
	struct server s = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq, *ev;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	char buf[3][MSG], port[16];
	pthread_t t;
	void *ctx;

	(void)state;
	/* the server on a free port */
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "0", &hints, &res), 0);
	assert_int_equal(rdma_create_ep(&s.listen, res, NULL, NULL), 0);
	rdma_freeaddrinfo(res);
	assert_int_equal(rdma_listen(s.listen, 2), 0);
	snprintf(port, sizeof(port), "%u", ntohs(rdma_get_src_port(s.listen)));
	assert_int_equal(pthread_create(&t, NULL, server_main, &s), 0);

	/* the client: send CQ and receive CQ on one channel */
	hints.ai_flags = 0;
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", port, &hints, &res), 0);
	assert_int_equal(rdma_create_ep(&id, res, NULL, NULL), 0);
	rdma_freeaddrinfo(res);
	ch = ibv_create_comp_channel(id->verbs);
	assert_non_null(ch);
	scq = ibv_create_cq(id->verbs, 8, NULL, ch, 0);
	rcq = ibv_create_cq(id->verbs, 8, NULL, ch, 0);
	assert_non_null(scq);
	assert_non_null(rcq);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, NULL, &a), 0);
	mr = rdma_reg_msgs(id, buf, sizeof(buf));
	assert_non_null(mr);
	assert_int_equal(rdma_post_recv(id, NULL, buf[1], MSG, mr), 0);
	assert_int_equal(rdma_post_recv(id, NULL, buf[2], MSG, mr), 0);
	assert_int_equal(rdma_connect(id, NULL), 0);

	/* 1. A Send's completion brings a record; polled before the record
	 * is read, the record goes with it and the channel is quiet. */
	assert_int_equal(ibv_req_notify_cq(scq, 0), 0);
	send_one(id, buf[0], mr);
	assert_true(readable(ch->fd, 5000));
	poll_one(scq);
	assert_false(readable(ch->fd, 0));
	/* the CQ is still armed: the next Send brings a record */
	send_one(id, buf[0], mr);
	assert_true(readable(ch->fd, 5000));
	assert_int_equal(ibv_get_cq_event(ch, &ev, &ctx), 0);
	assert_ptr_equal(ev, scq);
	ibv_ack_cq_events(scq, 1);
	poll_one(scq);

	/* 2. The receive CQ's record ahead of the send CQ's: the send CQ
	 * polled empty keeps its record (not at the head). Once the receive
	 * CQ's event is taken, the channel is readable and
	 * ibv_get_cq_event must give the send CQ's event at once (nothing to
	 * poll behind it), not wait: with O_NONBLOCK, not EAGAIN. */
	assert_int_equal(ibv_req_notify_cq(rcq, 0), 0);
	assert_int_equal(ibv_req_notify_cq(scq, 0), 0);
	go(&s);
	wait_records(ch->fd, 1);
	send_one(id, buf[0], mr);
	poll_one(scq);
	wait_records(ch->fd, 2);
	assert_int_equal(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
	assert_int_equal(ibv_get_cq_event(ch, &ev, &ctx), 0);
	assert_ptr_equal(ev, rcq);
	ibv_ack_cq_events(rcq, 1);
	poll_one(rcq);
	assert_true(readable(ch->fd, 0));
	errno = 0;
	if (ibv_get_cq_event(ch, &ev, &ctx) != 0)
		fail_msg("readable channel, but ibv_get_cq_event failed: %s", strerror(errno));
	assert_ptr_equal(ev, scq);
	ibv_ack_cq_events(scq, 1);
	assert_false(readable(ch->fd, 0));

	/* the server's second message; then it is done */
	go(&s);
	poll_one(rcq);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(s.got, 3); /* the client's three Sends */
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_qp(id);
	assert_int_equal(ibv_destroy_cq(scq), 0);
	assert_int_equal(ibv_destroy_cq(rcq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	rdma_destroy_ep(id);
	rdma_destroy_ep(s.listen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_stale_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
