/* Registered memory that goes away, through libibverbs.so.1 (ours) and real
 * loopback connections between two processes (issue 13): a server process
 * registers 4 pages (every remote access), hands the rkey and address to
 * the client, then munmaps pages 1-3 while they stay registered. The client
 * connects once per operation and sends an RDMA Write, an RDMA Read and an
 * RDMA Atomic (FetchAdd) into page 1; each must come back as the server's
 * Terminate (a remote protection error: Write DDP 1/1/0x01, Read and
 * Atomic RDMAP 0/1/0x01), the client's QP goes to ERR with
 * IBV_EVENT_QP_FATAL, the Read and the Atomic complete with
 * IBV_WC_REM_ACCESS_ERR (the Terminate echoes their Request); a
 * Write and a Read of page 0 (still mapped) on a fourth connection work.
 * The server must survive all of it: it reports the async event of each
 * of its QPs and exits 0 (not killed by SIGSEGV), also under ASan.
 * Both ends run with UIWARP_RFC7306=1 (the Atomic). Connections through the
 * engine's calls as in test_data.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <infiniband/verbs.h>

#include "verbs-shim/shim.h"

#define PAGE 4096u
#define NPAGES 4u
#define TMO_MS 5000
#define NCONN 4 /* Write, Read, Atomic into page 1; Write + Read of page 0 */

struct offer {
	uint16_t port;
	uint32_t rkey;
	uint64_t addr;
};

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct ibv_context *open_ctx(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;

	if (!l || !l[0])
		return NULL;
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	return ctx;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr at = {
	    .send_cq = cq,
	    .recv_cq = cq,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
	    .qp_type = IBV_QPT_RC};

	return ibv_create_qp(pd, &at);
}

/* Waits (at most TMO_MS) for an async event of qp; returns its type or -1. */
static int qp_event(struct ibv_context *ctx, struct ibv_qp *qp)
{
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;
	long end = now_ms() + TMO_MS;

	while (now_ms() < end) {
		if (poll(&pfd, 1, 100) != 1)
			continue;
		if (ibv_get_async_event(ctx, &ev))
			return -1;
		int type = ev.event_type, mine = ev.element.qp == qp;

		ibv_ack_async_event(&ev);
		if (mine)
			return type;
	}
	return -1;
}

/* The server: its own process. Writes one line per connection to out
 * ("conn N event T") and exits 0 after NCONN connections. */
static int server(int out)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct uiw_conn_param p = {.responder_resources = 4, .initiator_depth = 4};
	struct sockaddr_storage bound;
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct uiw_listener *l = NULL;
	struct offer o;
	uint8_t *mem;

	if (!pd)
		return 2;
	/* far below the kernel's usual mappings: nothing else is mapped into
	 * the hole while the test runs (an address mapped again by someone
	 * else is a use after free uiwarp cannot see, docs/design.md) */
	mem = mmap((void *)0x300200000000ull, NPAGES * PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (mem == MAP_FAILED)
		mem = mmap(NULL, NPAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
	if (mem == MAP_FAILED)
		return 2;
	memset(mem, 0x11, NPAGES * PAGE);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, NPAGES * PAGE,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		return 2;
	/* the application lets go of memory it still has registered */
	if (munmap(mem + PAGE, (NPAGES - 1) * PAGE))
		return 2;
	if (uiw_listen((struct sockaddr *)&sin, 4, &l))
		return 2;
	uiw_listener_addr(l, &bound);
	o.port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
	o.rkey = mr->rkey;
	o.addr = (uintptr_t)mem;
	if (write(out, &o, sizeof(o)) != (ssize_t)sizeof(o))
		return 2;
	for (int i = 0; i < NCONN; i++) {
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp *qp = cq ? make_qp(pd, cq) : NULL;
		struct uiw_conn_req *req;
		struct uiw_conn_info info;
		char line[64];
		int ev = -1;

		if (!qp)
			return 2;
		bool up = uiw_listener_get_request(l, 2 * TMO_MS, &req, &info) == 0 &&
			  uiw_accept(req, shim_qp(qp)->qp, &p, TMO_MS) == 0;
		if (up && i < NCONN - 1)
			ev = qp_event(ctx, qp);
		/* the last connection ends without an error (no event) when
		 * the client destroys its QP */
		for (long end = now_ms() + TMO_MS; up && i == NCONN - 1 &&
						   uiw_qp_close_reason(shim_qp(qp)->qp) == 0 &&
						   now_ms() < end;)
			usleep(1000);
		snprintf(line, sizeof(line), "conn %d event %d\n", i, ev);
		if (write(out, line, strlen(line)) < 0)
			return 2;
		ibv_destroy_qp(qp);
		ibv_destroy_cq(cq);
	}
	uiw_listener_close(l);
	/* page 0 still holds what the last connection wrote */
	if (write(out, mem, 8) != 8)
		return 2;
	ibv_dereg_mr(mr);
	munmap(mem, PAGE);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}

static pid_t server_pid;
static int server_fd = -1;
static struct offer offer;

/* One connection of the client: QP connected to the server. */
struct conn {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint64_t *buf;
	struct ibv_mr *mr;
};

static void conn_open(struct conn *c)
{
	struct sockaddr_in dst = {.sin_family = AF_INET,
				  .sin_port = htons(offer.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct uiw_conn_param p = {.responder_resources = 4, .initiator_depth = 4};
	struct uiw_conn_info info;
	bool rejected = false;

	c->ctx = open_ctx();
	assert_non_null(c->ctx);
	c->pd = ibv_alloc_pd(c->ctx);
	assert_non_null(c->pd);
	c->cq = ibv_create_cq(c->ctx, 16, NULL, NULL, 0);
	assert_non_null(c->cq);
	c->qp = make_qp(c->pd, c->cq);
	assert_non_null(c->qp);
	c->buf = calloc(1, PAGE);
	assert_non_null(c->buf);
	/* a Read's sink is exposed to the peer: REMOTE_WRITE (iWARP) */
	c->mr = ibv_reg_mr(c->pd, c->buf, PAGE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(c->mr);
	assert_int_equal(uiw_connect(shim_qp(c->qp)->qp, NULL, (struct sockaddr *)&dst, &p, TMO_MS,
				     &info, &rejected),
			 0);
}

static void conn_close(struct conn *c)
{
	assert_int_equal(ibv_destroy_qp(c->qp), 0);
	assert_int_equal(ibv_dereg_mr(c->mr), 0);
	assert_int_equal(ibv_destroy_cq(c->cq), 0);
	assert_int_equal(ibv_dealloc_pd(c->pd), 0);
	assert_int_equal(ibv_close_device(c->ctx), 0);
	free(c->buf);
}

static void post(struct conn *c, enum ibv_wr_opcode op, uint64_t raddr, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr w = {.wr_id = op,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w.wr.atomic.remote_addr = raddr;
		w.wr.atomic.rkey = offer.rkey;
		w.wr.atomic.compare_add = 5;
	} else {
		w.wr.rdma.remote_addr = raddr;
		w.wr.rdma.rkey = offer.rkey;
	}
	assert_int_equal(ibv_post_send(c->qp, &w, &bad), 0);
}

static struct ibv_wc poll_wc(struct conn *c)
{
	struct ibv_wc wc;
	long end = now_ms() + TMO_MS;
	int n;

	while ((n = ibv_poll_cq(c->cq, 1, &wc)) == 0 && now_ms() < end)
		usleep(100);
	assert_int_equal(n, 1);
	return wc;
}

/* The server's line for connection i: the async event its QP got. */
static int server_event(int i)
{
	char line[64];
	size_t n = 0;
	int ci = -1, ev = -2;
	struct pollfd pfd = {.fd = server_fd, .events = POLLIN};

	while (n < sizeof(line) - 1 && poll(&pfd, 1, 2 * TMO_MS) == 1 &&
	       read(server_fd, line + n, 1) == 1 && line[n] != '\n')
		n++;
	line[n] = 0;
	assert_int_equal(sscanf(line, "conn %d event %d", &ci, &ev), 2);
	assert_int_equal(ci, i);
	return ev;
}

/* An operation into page 1 (unmapped at the server): the server answers
 * with the Terminate (layer, etype, code); the client's QP goes to ERR
 * with IBV_EVENT_QP_FATAL (a received Terminate), the server's QP gets
 * IBV_EVENT_QP_ACCESS_ERR (it found a protection error). */
static void gone_op(enum ibv_wr_opcode op, unsigned layer, unsigned etype, unsigned code, int i)
{
	struct conn c;
	struct uiw_term_info t;
	struct ibv_wc wc;

	conn_open(&c);
	post(&c, op, offer.addr + PAGE + 64, op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : 100);
	assert_int_equal(qp_event(c.ctx, c.qp), IBV_EVENT_QP_FATAL);
	wc = poll_wc(&c);
	assert_int_equal(wc.wr_id, op);
	if (op == IBV_WR_RDMA_WRITE)
		/* complete once handed to TCP, before the Terminate came */
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
	else
		/* the Terminate names it: a remote access error */
		assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
	uiw_qp_term_info(shim_qp(c.qp)->qp, &t);
	assert_true(t.valid);
	assert_false(t.sent);
	if (t.layer != layer || t.etype != etype || t.ecode != code)
		fail_msg("Terminate %u/%u/0x%02x, want %u/%u/0x%02x", t.layer, t.etype, t.ecode,
			 layer, etype, code);
	conn_close(&c);
	assert_int_equal(server_event(i), IBV_EVENT_QP_ACCESS_ERR);
}

static void test_write_gone(void **state)
{
	(void)state;
	gone_op(IBV_WR_RDMA_WRITE, 1, 1, 0x01, 0);
}

static void test_read_gone(void **state)
{
	(void)state;
	gone_op(IBV_WR_RDMA_READ, 0, 1, 0x01, 1);
}

static void test_atomic_gone(void **state)
{
	(void)state;
	gone_op(IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 1, 0x01, 2);
}

/* Page 0 is still mapped: a Write and a Read of it work on a new
 * connection, and the server, alive, still holds the bytes at the end. */
static void test_mapped_still_works(void **state)
{
	struct conn c;
	struct ibv_wc wc;
	uint64_t back = 0;
	int status;

	(void)state;
	conn_open(&c);
	c.buf[0] = 0x1122334455667788ull;
	post(&c, IBV_WR_RDMA_WRITE, offer.addr, 8);
	wc = poll_wc(&c);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	c.buf[0] = 0;
	post(&c, IBV_WR_RDMA_READ, offer.addr, 8);
	wc = poll_wc(&c);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(c.buf[0], 0x1122334455667788ull);
	conn_close(&c);
	assert_int_equal(server_event(3), -1); /* no error on this one */
	assert_int_equal(read(server_fd, &back, 8), 8);
	assert_int_equal(back, 0x1122334455667788ull);
	assert_int_equal(waitpid(server_pid, &status, 0), server_pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("server ended with status 0x%x (signal %d)", status,
			 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	server_pid = 0;
}

int main(void)
{
	int fds[2];

	/* RFC 7306 (the Atomic) on both ends; before the first verbs call */
	setenv("UIWARP_RFC7306", "1", 1);
	if (pipe(fds))
		return 2;
	server_pid = fork();
	if (server_pid < 0)
		return 2;
	if (server_pid == 0) {
		close(fds[0]);
		alarm(60); /* bounded whatever happens to the client */
		_exit(server(fds[1]));
	}
	close(fds[1]);
	server_fd = fds[0];
	struct pollfd pfd = {.fd = server_fd, .events = POLLIN};
	if (poll(&pfd, 1, 10000) != 1 || read(server_fd, &offer, sizeof(offer)) != sizeof(offer)) {
		fprintf(stderr, "server did not start\n");
		kill(server_pid, SIGKILL);
		return 1;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_write_gone),
	    cmocka_unit_test(test_read_gone),
	    cmocka_unit_test(test_atomic_gone),
	    cmocka_unit_test(test_mapped_still_works),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
	}
	return rc;
}
