/* fault_peer: one end of a 1 MiB RDMA Write or Read stream, written as an
 * application would (rdma_cm + verbs only), for the fault tests
 * (tests/fault/fault.sh, issue 13 item 2). It records every WC, async
 * event and CM event, and when the connection ends (by a fault or, with
 * --expect ok, by the client's rdma_disconnect) checks what the verbs
 * promise and prints one line "fault_peer role=... result=PASS|FAIL ...".
 *
 *   fault_peer server --mode write|read --bind ADDR --port P [options]
 *   fault_peer client --mode write|read --connect ADDR --port P [options]
 *     --secs S      client: stop posting new operations after S s (30)
 *     --expect ok   the connection must survive: every WR successful and
 *                   every operation checked (default: fault, the
 *                   connection must end by itself)
 *     --deadline S  give up (result=FAIL hang, exit 3) after S s (60)
 *
 * mode write: the client keeps up to WINDOW (8) 1 MiB RDMA Writes posted
 * to the server's MR (SLOTS (16) slots of 1 MiB), Write number n from a
 * local buffer filled with pattern(n) to slot n % SLOTS, each followed by
 * a Send carrying n. RFC 5040 §5.5: the Send completes at the server only
 * after the Write before it was placed, so the server checks slot n %
 * SLOTS against pattern(n) when Send n arrives, then answers with a
 * credit Send carrying n; the client writes n only after credit n - SLOTS,
 * so no slot is overwritten before it was checked. verified= counts the
 * checked Writes, bad= the mismatches.
 * mode read: the server's slot k holds pattern(READ_SEED + k); the client
 * keeps up to WINDOW 1 MiB RDMA Reads of slot n % SLOTS posted, into a
 * local buffer filled with ~pattern(n) first, and checks each successful
 * Read's buffer against the slot's pattern (verified= / bad=).
 *
 * Checks (result=PASS, exit 0; else result=FAIL why=..., exit 1):
 *  - per queue (send, receive): one WC per posted WR, in posting order (no
 *    missing, duplicate or reordered wr_id), statuses a run of
 *    IBV_WC_SUCCESS, then at most one other error, then only
 *    IBV_WC_WR_FLUSH_ERR; with --expect ok every send WR succeeds;
 *  - RDMA_CM_EVENT_DISCONNECTED delivered, and IBV_EVENT_QP_FATAL or the
 *    QP in IBV_QPS_ERR (ibv_query_qp) after it;
 *  - bad=0 and, with --expect ok, every operation verified;
 *  - after every object is destroyed, the thread count (/proc/self/task)
 *    is back to what it was before the first rdma_cm call (waited for up
 *    to 2 s: an exiting thread leaves the list asynchronously).
 * The summary also gives disc_ms (CLOCK_REALTIME ms of the DISCONNECTED
 * event) and end_ms (the summary's own), which the harness times against
 * the fault, and max_gap_ms, the client's longest time between two
 * successful send WCs (a stall that the connection survived). Exit 2: a setup error (connection not
 * made).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define OP_SIZE (1u << 20) /* bytes per Write / Read */
#define SLOTS 16u	   /* server slots of OP_SIZE */
#define WINDOW 8u	   /* operations outstanding at the client */
#define SQ_DEPTH 64u
#define RQ_DEPTH 32u
_Static_assert((SQ_DEPTH + RQ_DEPTH) * 8 <= 4096, "the small buffer is one page");
#define READ_SEED 0x5eed0000u
#define NAMES 64

struct setup_info { /* the server's rdma_accept private data */
	uint64_t addr;
	uint32_t rkey;
	uint32_t slots;
};

/* One work queue's WCs against what was posted. */
struct wq_log {
	uint64_t posted, wcs, next; /* WRs posted; WCs; wr_id expected next */
	uint64_t ok, err, flush;
	int phase;	    /* 0 successes, 1 after the one error, 2 flushing */
	uint64_t order_bad; /* wr_id not the next one: missing / duplicate */
	uint64_t seq_bad;   /* a status out of the allowed order */
	int first_err;	    /* the non-flush error's status, or -1 */
};

static struct {
	bool server, write_mode, expect_ok;
	const char *addr, *port;
	double secs, deadline;
} opt = {.secs = 30, .deadline = 60};

static struct {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id, *id;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint8_t *big;	 /* server: SLOTS slots; client: WINDOW buffers */
	uint64_t *small; /* Sends and receives: SQ_DEPTH + RQ_DEPTH words */
	struct ibv_mr *big_mr, *small_mr;
	struct setup_info peer;
	struct wq_log sq, rq;
	uint32_t sq_seq[SQ_DEPTH];     /* client: the operation a send WR carries */
	uint8_t sq_op[SQ_DEPTH];       /* IBV_WC_RDMA_WRITE / _SEND / _RDMA_READ */
	uint64_t ops_posted, ops_done; /* Writes / Reads posted, completed */
	uint64_t credited;	       /* write: credits received (in order) */
	uint64_t verified, bad, credit_bad;
	double last_ok, max_gap; /* client: s between successful send WCs */
	bool fatal, disconnected, established, stop_posting;
	int qp_state; /* after DISCONNECTED, or -1 */
	int64_t disc_ms, est_ms;
	uint64_t missing_at_disc; /* WRs still without a WC at DISCONNECTED */
	char cm_names[NAMES][8], ae_names[NAMES][8];
	int ncm, nae;
} s = {.qp_state = -1, .sq.first_err = -1, .rq.first_err = -1};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void die_setup(const char *what)
{
	printf("fault_peer role=%s result=FAIL why=setup:%s errno=%d\n",
	       opt.server ? "server" : "client", what, errno);
	fflush(stdout);
	exit(2);
}

/* splitmix64: word i of pattern(seed) */
static uint64_t pattern_word(uint64_t seed, uint64_t i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill(void *buf, uint64_t seed, bool invert)
{
	uint64_t *w = buf;
	for (uint64_t i = 0; i < OP_SIZE / 8; i++)
		w[i] = invert ? ~pattern_word(seed, i) : pattern_word(seed, i);
}

static bool holds(const void *buf, uint64_t seed)
{
	const uint64_t *w = buf;
	for (uint64_t i = 0; i < OP_SIZE / 8; i++)
		if (w[i] != pattern_word(seed, i))
			return false;
	return true;
}

/* Records a WC against its queue's log. */
static void log_wc(struct wq_log *q, const struct ibv_wc *wc)
{
	q->wcs++;
	if (wc->wr_id != q->next)
		q->order_bad++;
	q->next = wc->wr_id + 1;
	if (wc->status == IBV_WC_SUCCESS) {
		q->ok++;
		if (q->phase != 0)
			q->seq_bad++;
	} else if (wc->status == IBV_WC_WR_FLUSH_ERR) {
		q->flush++;
		q->phase = 2;
	} else {
		q->err++;
		if (q->phase != 0)
			q->seq_bad++;
		q->phase = 1;
		if (q->first_err < 0)
			q->first_err = wc->status;
	}
}

static void post_recv(void)
{
	uint64_t i = s.rq.posted;
	struct ibv_sge sge = {.addr = (uintptr_t)&s.small[SQ_DEPTH + i % RQ_DEPTH],
			      .length = 8,
			      .lkey = s.small_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(s.qp, &wr, &bad)) {
		s.stop_posting = true; /* the QP is in ERR: nothing more is posted */
		return;
	}
	s.rq.posted++;
}

/* Posts one send WR (signaled); false when the QP refused it. */
static bool post_send(enum ibv_wr_opcode op, uint8_t wc_op, uint32_t seq, void *buf, uint32_t len,
		      uint32_t lkey, uint64_t raddr)
{
	uint64_t i = s.sq.posted;
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = i,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = s.peer.rkey;
	s.sq_seq[i % SQ_DEPTH] = seq;
	s.sq_op[i % SQ_DEPTH] = wc_op;
	if (ibv_post_send(s.qp, &wr, &bad)) {
		s.stop_posting = true;
		return false;
	}
	s.sq.posted++;
	return true;
}

/* client: posts what the window and (write) the credits allow */
static void client_post(double t_end)
{
	while (!s.stop_posting && s.established && !s.disconnected && now_s() < t_end &&
	       s.ops_posted - s.ops_done < WINDOW && s.sq.posted - s.sq.wcs + 2 <= SQ_DEPTH) {
		uint64_t n = s.ops_posted;
		uint8_t *buf = s.big + (n % WINDOW) * OP_SIZE;
		uint64_t raddr = s.peer.addr + (n % SLOTS) * OP_SIZE;
		if (opt.write_mode) {
			if (n >= s.credited + SLOTS)
				return;
			fill(buf, n, false);
			if (!post_send(IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, (uint32_t)n, buf,
				       OP_SIZE, s.big_mr->lkey, raddr))
				return;
			/* the Send's word: reused only SQ_DEPTH send WRs later */
			uint64_t *seqw = &s.small[s.sq.posted % SQ_DEPTH];
			*seqw = n;
			s.ops_posted++;
			if (!post_send(IBV_WR_SEND, IBV_WC_SEND, (uint32_t)n, seqw, 8,
				       s.small_mr->lkey, 0))
				return;
		} else {
			fill(buf, n, true);
			if (!post_send(IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, (uint32_t)n, buf,
				       OP_SIZE, s.big_mr->lkey, raddr))
				return;
			s.ops_posted++;
		}
	}
}

static void on_send_wc(const struct ibv_wc *wc)
{
	log_wc(&s.sq, wc);
	if (opt.server)
		return; /* a credit */
	uint32_t seq = s.sq_seq[wc->wr_id % SQ_DEPTH];
	uint8_t op = s.sq_op[wc->wr_id % SQ_DEPTH];
	if (wc->status == IBV_WC_SUCCESS) {
		double t = now_s();
		if (s.last_ok && t - s.last_ok > s.max_gap)
			s.max_gap = t - s.last_ok;
		s.last_ok = t;
	}
	if (op == IBV_WC_SEND)
		return;
	s.ops_done++;
	if (wc->status != IBV_WC_SUCCESS)
		return;
	if (op == IBV_WC_RDMA_READ) {
		if (holds(s.big + (seq % WINDOW) * OP_SIZE, READ_SEED + seq % SLOTS))
			s.verified++;
		else
			s.bad++;
	}
}

static void on_recv_wc(const struct ibv_wc *wc)
{
	log_wc(&s.rq, wc);
	if (wc->status != IBV_WC_SUCCESS)
		return;
	uint64_t seq = s.small[SQ_DEPTH + wc->wr_id % RQ_DEPTH];
	if (!opt.server) { /* a credit: in order */
		if (seq == s.credited)
			s.credited++;
		else
			s.credit_bad++;
		post_recv();
		return;
	}
	if (!opt.write_mode || wc->byte_len != 8) {
		s.bad++; /* the client sends nothing in read mode */
		return;
	}
	if (seq == s.verified + s.bad && holds(s.big + (seq % SLOTS) * OP_SIZE, seq))
		s.verified++;
	else
		s.bad++;
	post_recv();
	if (!s.stop_posting && s.sq.posted - s.sq.wcs < SQ_DEPTH) {
		uint64_t *w = &s.small[s.sq.posted % SQ_DEPTH];
		*w = seq;
		post_send(IBV_WR_SEND, IBV_WC_SEND, (uint32_t)seq, w, 8, s.small_mr->lkey, 0);
	} else {
		s.credit_bad++; /* cannot happen: the client's window */
	}
}

static void drain_cqs(void)
{
	struct ibv_wc wc[16];
	int n;
	while (s.scq && (n = ibv_poll_cq(s.scq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			on_send_wc(&wc[i]);
	while (s.rcq && (n = ibv_poll_cq(s.rcq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			on_recv_wc(&wc[i]);
}

static const char *cm_short(enum rdma_cm_event_type t)
{
	switch (t) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return "addr";
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		return "route";
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return "req";
	case RDMA_CM_EVENT_ESTABLISHED:
		return "est";
	case RDMA_CM_EVENT_DISCONNECTED:
		return "disc";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		return "twexit";
	case RDMA_CM_EVENT_REJECTED:
		return "rej";
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return "connerr";
	case RDMA_CM_EVENT_UNREACHABLE:
		return "unreach";
	default:
		return "other";
	}
}

static const char *ae_short(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
		return "fatal";
	case IBV_EVENT_QP_REQ_ERR:
		return "reqerr";
	case IBV_EVENT_QP_ACCESS_ERR:
		return "accerr";
	case IBV_EVENT_COMM_EST:
		return "commest";
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return "lastwqe";
	default:
		return "other";
	}
}

static void make_qp(struct rdma_cm_id *id)
{
	s.ctx = id->verbs;
	if (!(s.pd = ibv_alloc_pd(s.ctx)))
		die_setup("pd");
	if (!(s.cc = ibv_create_comp_channel(s.ctx)))
		die_setup("comp_channel");
	if (!(s.scq = ibv_create_cq(s.ctx, SQ_DEPTH * 2, NULL, s.cc, 0)) ||
	    !(s.rcq = ibv_create_cq(s.ctx, RQ_DEPTH * 2, NULL, s.cc, 0)))
		die_setup("cq");
	if (ibv_req_notify_cq(s.scq, 0) || ibv_req_notify_cq(s.rcq, 0))
		die_setup("notify");
	size_t big = (size_t)(opt.server ? SLOTS : WINDOW) * OP_SIZE;
	s.big = aligned_alloc(4096, big);
	s.small = aligned_alloc(4096, 4096); /* (SQ_DEPTH + RQ_DEPTH) words */
	if (!s.big || !s.small)
		die_setup("malloc");
	memset(s.big, 0, big);
	memset(s.small, 0, (SQ_DEPTH + RQ_DEPTH) * 8);
	if (opt.server && !opt.write_mode)
		for (uint32_t k = 0; k < SLOTS; k++)
			fill(s.big + (size_t)k * OP_SIZE, READ_SEED + k, false);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (!(s.big_mr = ibv_reg_mr(s.pd, s.big, big, acc)) ||
	    !(s.small_mr = ibv_reg_mr(s.pd, s.small, (SQ_DEPTH + RQ_DEPTH) * 8, acc)))
		die_setup("reg_mr");
	struct ibv_qp_init_attr qa = {.send_cq = s.scq,
				      .recv_cq = s.rcq,
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = SQ_DEPTH,
					      .max_recv_wr = RQ_DEPTH,
					      .max_send_sge = 1,
					      .max_recv_sge = 1}};
	if (rdma_create_qp(id, s.pd, &qa))
		die_setup("create_qp");
	s.qp = id->qp;
	int fl = fcntl(s.ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(s.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die_setup("async_fd");
	fl = fcntl(s.cc->fd, F_GETFL);
	if (fl < 0 || fcntl(s.cc->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die_setup("cc_fd");
}

static void on_cm_event(struct rdma_cm_event *e)
{
	if (s.ncm < NAMES)
		snprintf(s.cm_names[s.ncm++], sizeof(s.cm_names[0]), "%s", cm_short(e->event));
	switch (e->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		if (s.id) { /* one connection only */
			rdma_reject(e->id, NULL, 0);
			break;
		}
		s.id = e->id;
		make_qp(s.id);
		for (uint32_t i = 0; i < (opt.write_mode ? RQ_DEPTH : 4u); i++)
			post_recv();
		struct setup_info si = {
		    .addr = (uintptr_t)s.big, .rkey = s.big_mr->rkey, .slots = SLOTS};
		struct rdma_conn_param cp = {.private_data = &si,
					     .private_data_len = sizeof(si),
					     .responder_resources = e->param.conn.initiator_depth,
					     .initiator_depth = e->param.conn.responder_resources};
		if (rdma_accept(s.id, &cp))
			die_setup("accept");
		break;
	}
	case RDMA_CM_EVENT_ESTABLISHED:
		if (!opt.server) {
			if (e->param.conn.private_data_len < sizeof(s.peer))
				die_setup("private_data");
			memcpy(&s.peer, e->param.conn.private_data, sizeof(s.peer));
		}
		s.established = true;
		s.est_ms = wall_ms();
		printf("fault_peer role=%s established pid=%d\n", opt.server ? "server" : "client",
		       (int)getpid());
		fflush(stdout);
		break;
	case RDMA_CM_EVENT_DISCONNECTED: {
		s.disconnected = true;
		s.disc_ms = wall_ms();
		drain_cqs();
		s.missing_at_disc = (s.sq.posted - s.sq.wcs) + (s.rq.posted - s.rq.wcs);
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		if (s.qp && !ibv_query_qp(s.qp, &a, IBV_QP_STATE, &ia))
			s.qp_state = a.qp_state;
		break;
	}
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		if (!s.established)
			die_setup(cm_short(e->event));
		break;
	default:
		break;
	}
}

/* Reads whatever the three descriptors have: CM events, async events,
 * CQ notifications; waits up to ms for one. */
static void wait_events(int ms)
{
	struct pollfd p[3] = {{.fd = s.ch->fd, .events = POLLIN},
			      {.fd = s.ctx ? s.ctx->async_fd : -1, .events = POLLIN},
			      {.fd = s.cc ? s.cc->fd : -1, .events = POLLIN}};
	if (poll(p, 3, ms) <= 0)
		return;
	struct rdma_cm_event *e;
	if ((p[0].revents & POLLIN) && !rdma_get_cm_event(s.ch, &e)) {
		struct rdma_cm_event copy = *e;
		on_cm_event(&copy);
		rdma_ack_cm_event(e);
	}
	struct ibv_async_event ae;
	while (s.ctx && (p[1].revents & POLLIN) && !ibv_get_async_event(s.ctx, &ae)) {
		if (ae.event_type == IBV_EVENT_QP_FATAL)
			s.fatal = true;
		if (s.nae < NAMES)
			snprintf(s.ae_names[s.nae++], sizeof(s.ae_names[0]), "%s",
				 ae_short(ae.event_type));
		ibv_ack_async_event(&ae);
	}
	/* the CQ events: acknowledged, and the CQs armed again once (an armed
	 * CQ that holds completions notifies at once: the caller drains
	 * them before it waits again) */
	struct ibv_cq *cq;
	void *cctx;
	bool rearm = false;
	while (s.cc && (p[2].revents & POLLIN) && !ibv_get_cq_event(s.cc, &cq, &cctx)) {
		ibv_ack_cq_events(cq, 1);
		rearm = true;
	}
	if (rearm) {
		ibv_req_notify_cq(s.scq, 0);
		ibv_req_notify_cq(s.rcq, 0);
	}
}

static void join_names(char *out, size_t sz, char names[][8], int n)
{
	size_t o = 0;
	out[0] = 0;
	for (int i = 0; i < n && o + 9 < sz; i++)
		o += (size_t)snprintf(out + o, sz - o, "%s%s", i ? "," : "", names[i]);
	if (!n)
		snprintf(out, sz, "-");
}

static bool wq_ok(const struct wq_log *q)
{
	return q->wcs == q->posted && q->next == q->posted && !q->order_bad && !q->seq_bad;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		goto usage;
	opt.server = !strcmp(argv[1], "server");
	if (!opt.server && strcmp(argv[1], "client"))
		goto usage;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--expect") && v && (i++, 1))
			opt.expect_ok = !strcmp(v, "ok");
		else if (!strcmp(a, "--mode") && v && (i++, 1))
			opt.write_mode = !strcmp(v, "write");
		else if ((!strcmp(a, "--bind") || !strcmp(a, "--connect")) && v && (i++, 1))
			opt.addr = v;
		else if (!strcmp(a, "--port") && v && (i++, 1))
			opt.port = v;
		else if (!strcmp(a, "--secs") && v && (i++, 1))
			opt.secs = atof(v);
		else if (!strcmp(a, "--deadline") && v && (i++, 1))
			opt.deadline = atof(v);
		else
			goto usage;
	}
	if (!opt.addr || !opt.port)
		goto usage;

	int threads_before = count_threads();
	double t0 = now_s();
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP,
				      .ai_flags = opt.server ? RAI_PASSIVE : 0},
			     *ai;
	if (rdma_getaddrinfo(opt.addr, opt.port, &hints, &ai))
		die_setup("getaddrinfo");
	if (!(s.ch = rdma_create_event_channel()))
		die_setup("event_channel");
	int fl = fcntl(s.ch->fd, F_GETFL);
	if (fl < 0 || fcntl(s.ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die_setup("ch_fd");
	if (opt.server) {
		if (rdma_create_id(s.ch, &s.listen_id, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(s.listen_id, ai->ai_src_addr) || rdma_listen(s.listen_id, 1))
			die_setup("listen");
		printf("fault_peer role=server listening pid=%d\n", (int)getpid());
		fflush(stdout);
	} else {
		if (rdma_create_id(s.ch, &s.id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(s.id, NULL, ai->ai_dst_addr, 2000))
			die_setup("resolve_addr");
	}
	rdma_freeaddrinfo(ai);

	/* the client resolves and connects as its CM events come */
	bool hang = false;
	double t_end = 0;
	while (!s.disconnected) {
		if (now_s() - t0 > opt.deadline) {
			hang = true;
			break;
		}
		int before = s.ncm;
		drain_cqs();
		if (!opt.server)
			client_post(t_end);
		if (!opt.server && s.established && !s.disconnected && opt.expect_ok &&
		    now_s() >= t_end && s.ops_done == s.ops_posted &&
		    (!opt.write_mode || s.credited == s.ops_posted) && s.sq.wcs == s.sq.posted) {
			/* all done and checked: end the connection ourselves */
			rdma_disconnect(s.id);
			t_end = 1e18; /* once */
			s.stop_posting = true;
		}
		wait_events(s.established ? 1 : 50);
		if (s.ncm == before || opt.server)
			continue;
		const char *last = s.cm_names[s.ncm - 1];
		if (!strcmp(last, "addr")) {
			if (rdma_resolve_route(s.id, 2000))
				die_setup("resolve_route");
		} else if (!strcmp(last, "route")) {
			make_qp(s.id);
			for (uint32_t i = 0; i < RQ_DEPTH; i++)
				post_recv();
			struct ibv_device_attr da;
			if (ibv_query_device(s.ctx, &da))
				die_setup("query_device");
			uint8_t rd =
			    (uint8_t)(da.max_qp_init_rd_atom < (int)WINDOW ? da.max_qp_init_rd_atom
									   : (int)WINDOW);
			struct rdma_conn_param cp = {.initiator_depth = rd,
						     .responder_resources = rd};
			if (rdma_connect(s.id, &cp))
				die_setup("connect");
		} else if (!strcmp(last, "est")) {
			t_end = now_s() + opt.secs;
		}
	}
	/* the flushed WCs (all before DISCONNECTED in uiwarp; a provider may
	 * trail them: up to 2 s) */
	for (double t = now_s(); !hang && now_s() - t < 2.0;) {
		drain_cqs();
		if (s.sq.wcs == s.sq.posted && s.rq.wcs == s.rq.posted)
			break;
		wait_events(10);
	}
	/* a FATAL reported just before DISCONNECTED may still be in the pipe */
	for (int i = 0; i < 5; i++)
		wait_events(2);
	int64_t disc_to_end = 0;
	/* tear down as an application does */
	if (s.id && !hang)
		rdma_disconnect(s.id);
	if (s.qp)
		rdma_destroy_qp(s.id);
	if (s.big_mr)
		ibv_dereg_mr(s.big_mr);
	if (s.small_mr)
		ibv_dereg_mr(s.small_mr);
	if (s.scq)
		ibv_destroy_cq(s.scq);
	if (s.rcq)
		ibv_destroy_cq(s.rcq);
	if (s.cc)
		ibv_destroy_comp_channel(s.cc);
	if (s.pd)
		ibv_dealloc_pd(s.pd);
	if (s.id)
		rdma_destroy_id(s.id);
	if (s.listen_id)
		rdma_destroy_id(s.listen_id);
	rdma_destroy_event_channel(s.ch);
	int threads_after = count_threads();
	for (int i = 0; i < 200 && threads_after != threads_before; i++) {
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
		threads_after = count_threads();
	}
	int64_t end_ms = wall_ms();
	if (s.disc_ms)
		disc_to_end = end_ms - s.disc_ms;

	/* verdict */
	const char *why = NULL;
	bool errq = s.fatal || s.qp_state == IBV_QPS_ERR;
	if (hang)
		why = "hang";
	else if (!s.established)
		why = "never_established";
	else if (!s.disconnected)
		why = "no_disconnected";
	else if (!wq_ok(&s.sq))
		why = "send_queue_wcs";
	else if (!wq_ok(&s.rq))
		why = "recv_queue_wcs";
	else if (s.bad || s.credit_bad)
		why = "data_mismatch";
	else if (!errq)
		why = "no_fatal_no_err_state";
	else if (opt.expect_ok && (s.sq.err || s.sq.flush || s.rq.err))
		why = "wr_failed";
	else if (opt.expect_ok && !opt.server &&
		 (!s.ops_posted || (opt.write_mode ? s.credited : s.verified) != s.ops_posted))
		why = "not_all_verified";
	else if (opt.expect_ok && opt.server && opt.write_mode && !s.verified)
		why = "nothing_verified";
	else if (threads_after != threads_before)
		why = "threads_left";
	char cms[NAMES * 8], aes[NAMES * 8];
	join_names(cms, sizeof(cms), s.cm_names, s.ncm);
	join_names(aes, sizeof(aes), s.ae_names, s.nae);
	printf("fault_peer role=%s mode=%s result=%s why=%s ops_posted=%llu ops_done=%llu "
	       "verified=%llu bad=%llu credited=%llu sq_posted=%llu sq_wcs=%llu sq_ok=%llu "
	       "sq_err=%llu sq_flush=%llu sq_first_err=%d rq_posted=%llu rq_wcs=%llu rq_ok=%llu "
	       "rq_err=%llu rq_flush=%llu missing_at_disc=%llu cm=%s async=%s qp_state=%d "
	       "threads_before=%d threads_after=%d est_ms=%lld disc_ms=%lld end_ms=%lld "
	       "disc_to_end_ms=%lld max_gap_ms=%d\n",
	       opt.server ? "server" : "client", opt.write_mode ? "write" : "read",
	       why ? "FAIL" : "PASS", why ? why : "-", (unsigned long long)s.ops_posted,
	       (unsigned long long)s.ops_done, (unsigned long long)s.verified,
	       (unsigned long long)s.bad, (unsigned long long)s.credited,
	       (unsigned long long)s.sq.posted, (unsigned long long)s.sq.wcs,
	       (unsigned long long)s.sq.ok, (unsigned long long)s.sq.err,
	       (unsigned long long)s.sq.flush, s.sq.first_err, (unsigned long long)s.rq.posted,
	       (unsigned long long)s.rq.wcs, (unsigned long long)s.rq.ok,
	       (unsigned long long)s.rq.err, (unsigned long long)s.rq.flush,
	       (unsigned long long)s.missing_at_disc, cms, aes, s.qp_state, threads_before,
	       threads_after, (long long)s.est_ms, (long long)s.disc_ms, (long long)end_ms,
	       (long long)disc_to_end, (int)(s.max_gap * 1000));
	fflush(stdout);
	free(s.big);
	free(s.small);
	return hang ? 3 : why ? 1 : 0;
usage:
	fprintf(stderr, "usage: fault_peer server|client --mode write|read --bind|--connect ADDR "
			"--port P [--secs S] [--expect ok|fault] [--deadline S]\n");
	return 2;
}
