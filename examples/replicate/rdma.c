/* uiwarp-replicate over RDMA: standard libibverbs + librdmacm only, so it runs
 * over uiwarp's drop-in libraries or over real RDMA hardware.
 *
 * With --streams N the sender opens N connections (one QP each, one thread
 * each) and the steps below run on each; the chunks are handed out to the
 * streams one by one, every stream sends its own done, and the receiver
 * answers on stream 0 once all N arrived.
 *
 * Sender: resolve address and route, create QP, rdma_connect with the hello
 * (file size) as private data; the receiver accepts with {addr, rkey, chunk}
 * of its mapped DEST.part. The sender pushes the file with signaled RDMA
 * Writes, at most --window outstanding, then a Send carrying length and
 * CRC32c (ordered behind the Writes on the RC QP, so when it completes at the
 * receiver every Write has been placed). The receiver deregisters the
 * mapping, verifies, syncs, renames, and answers with a Send. */
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "replicate.h"

#define RESOLVE_MS 5000 /* rdma_resolve_addr / rdma_resolve_route */
#define BYE_SEC 5	/* bound on waiting for the peer's disconnect at the end */

struct rconn {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *listen_id;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch; /* NULL: poll the CQ with short sleeps */
	struct ibv_cq *cq;
	unsigned cq_events; /* got but not yet acked */
	bool armed;
	bool qp;
	bool connected;
	bool disconnected; /* peer (or the stack) ended the connection */
};

/* Releases everything in rc (QP first); MRs are the caller's. */
static void rconn_destroy(struct rconn *rc)
{
	if (rc->qp)
		rdma_destroy_qp(rc->id);
	rc->qp = false;
	if (rc->cq) {
		if (rc->cq_events)
			ibv_ack_cq_events(rc->cq, rc->cq_events);
		ibv_destroy_cq(rc->cq);
	}
	rc->cq = NULL;
	if (rc->cch)
		ibv_destroy_comp_channel(rc->cch);
	rc->cch = NULL;
	if (rc->pd)
		ibv_dealloc_pd(rc->pd);
	rc->pd = NULL;
	if (rc->id)
		rdma_destroy_id(rc->id);
	rc->id = NULL;
	if (rc->listen_id)
		rdma_destroy_id(rc->listen_id);
	rc->listen_id = NULL;
	if (rc->ech)
		rdma_destroy_event_channel(rc->ech);
	rc->ech = NULL;
}

/* Reports a failed rdma_create_event_channel (errno set). */
static void no_channel(void)
{
	int e = errno;

	rep_err("rdma_create_event_channel: %s%s", strerror(e),
		e == ENODEV ? " (no RDMA device: over uiwarp, run build/bin/uiwarp-replicate "
			      "without LD_LIBRARY_PATH pointing at the system rdma-core)"
			    : "");
}

/* Milliseconds left until deadline (seconds, rep_now() clock; 0 = none) for
 * poll(); -1 for no deadline. */
static int ms_left(double deadline)
{
	double left;

	if (deadline == 0)
		return -1;
	left = deadline - rep_now();
	if (left <= 0)
		return 0;
	return left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

static double deadline_in(int sec)
{
	return sec ? rep_now() + sec : 0;
}

/* Waits for the next CM event, up to timeout seconds (0 = none). Returns 0
 * with *out set (caller acks it), -ETIMEDOUT, -EINTR or -errno. */
static int get_cm_event(struct rconn *rc, int timeout, struct rdma_cm_event **out)
{
	double deadline = deadline_in(timeout);
	struct pollfd pfd = {.fd = rc->ech->fd, .events = POLLIN};

	for (;;) {
		int r;

		if (rep_interrupted)
			return -EINTR;
		r = poll(&pfd, 1, ms_left(deadline));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -ETIMEDOUT;
		if (rdma_get_cm_event(rc->ech, out) == 0)
			return 0;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
	}
}

/* Handles a CM event that arrived while waiting for completions: notes a
 * disconnect. Acks ev. */
static void note_cm_event(struct rconn *rc, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		rc->disconnected = true;
		break;
	default:
		break;
	}
	rdma_ack_cm_event(ev);
}

/* Polls up to max completions into wc, waiting up to timeout seconds (0 =
 * none) for the first. Returns the number (> 0), -ETIMEDOUT, -EINTR,
 * -ECONNRESET (the connection ended and the CQ is empty) or -EIO. */
static int wait_wc(struct rconn *rc, struct ibv_wc *wc, int max, int timeout)
{
	double deadline = deadline_in(timeout);
	bool last_look = false;

	for (;;) {
		struct pollfd pfd[2];
		struct rdma_cm_event *ev;
		int n = ibv_poll_cq(rc->cq, max, wc), r, nfd = 0;

		if (n < 0)
			return -EIO;
		if (n > 0)
			return n;
		if (last_look)
			return -ECONNRESET;
		if (rc->disconnected) {
			last_look = true;
			continue;
		}
		if (rep_interrupted)
			return -EINTR;
		if (rc->cch && !rc->armed) {
			if (ibv_req_notify_cq(rc->cq, 0))
				return -EIO;
			rc->armed = true;
			continue; /* poll once more: a completion may have raced the arm */
		}
		pfd[nfd++] = (struct pollfd){.fd = rc->ech->fd, .events = POLLIN};
		if (rc->cch)
			pfd[nfd++] = (struct pollfd){.fd = rc->cch->fd, .events = POLLIN};
		r = ms_left(deadline);
		if (r == 0)
			return -ETIMEDOUT;
		if (!rc->cch && (r < 0 || r > 1))
			r = 1; /* no completion channel: look again every millisecond */
		r = poll(pfd, (nfds_t)nfd, r);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (rc->cch && (pfd[1].revents & POLLIN)) {
			struct ibv_cq *cq;
			void *ctx;

			if (ibv_get_cq_event(rc->cch, &cq, &ctx) == 0) {
				rc->armed = false;
				if (++rc->cq_events >= 64) {
					ibv_ack_cq_events(rc->cq, rc->cq_events);
					rc->cq_events = 0;
				}
			}
		}
		if (pfd[0].revents & POLLIN) {
			if (rdma_get_cm_event(rc->ech, &ev) == 0)
				note_cm_event(rc, ev);
		}
	}
}

static const char *wait_str(int r)
{
	switch (r) {
	case -ETIMEDOUT:
		return "timed out";
	case -EINTR:
		return "interrupted";
	case -ECONNRESET:
		return "the connection was closed by the peer";
	case -EIO:
		return "polling the completion queue failed";
	}
	return strerror(-r);
}

/* Reports the device's asynchronous events on stderr, one line each
 * ("async event: local work queue catastrophic error" is IBV_EVENT_QP_FATAL:
 * a connection failed, e.g. its peer went silent past uiwarp's dead-peer
 * bound), until the context goes. ctx: the rdma_cm device context. */
static atomic_bool async_on;   /* async_watch runs */
static atomic_uint async_seen; /* events it reported */

static void *async_watch(void *arg)
{
	struct ibv_context *ctx = arg;
	struct ibv_async_event ev;

	while (ibv_get_async_event(ctx, &ev) == 0) {
		rep_err("async event: %s", ibv_event_type_str(ev.event_type));
		atomic_fetch_add(&async_seen, 1);
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

/* A copy that failed: the device reports a fatal QP (IBV_EVENT_QP_FATAL)
 * beside the flushed completions that ended the copy, and its line should
 * be out before the process is (the main thread may see the flush first).
 * Waits for one reported event, at most 500 ms. */
static void async_settle(void)
{
	for (int i = 0; i < 50 && atomic_load(&async_on) && !atomic_load(&async_seen); i++)
		usleep(10000);
}

/* Starts async_watch once per process (one device context: rdma_cm's). */
static void watch_async(struct ibv_context *ctx)
{
	static atomic_flag started = ATOMIC_FLAG_INIT;
	pthread_t t;

	if (atomic_flag_test_and_set(&started))
		return;
	if (pthread_create(&t, NULL, async_watch, ctx) == 0) {
		pthread_detach(t);
		atomic_store(&async_on, true);
	}
}

/* Creates PD, completion channel, CQ of cqe entries and an RC QP with send_wr /
 * recv_wr entries on rc->id (and starts watch_async). Returns 0 or -1
 * (message printed, errno kept). */
static int make_qp(struct rconn *rc, uint32_t send_wr, uint32_t recv_wr, int cqe)
{
	struct ibv_qp_init_attr qa;

	rc->pd = ibv_alloc_pd(rc->id->verbs);
	if (!rc->pd) {
		rep_err("ibv_alloc_pd: %s", strerror(errno));
		return -1;
	}
	rc->cch = ibv_create_comp_channel(rc->id->verbs);
	/* Without a channel we poll; slower to react, same result. */
	rc->cq = ibv_create_cq(rc->id->verbs, cqe, NULL, rc->cch, 0);
	if (!rc->cq) {
		rep_err("ibv_create_cq(%d): %s", cqe, strerror(errno));
		return -1;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = rc->cq;
	qa.recv_cq = rc->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = send_wr;
	qa.cap.max_recv_wr = recv_wr;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(rc->id, rc->pd, &qa)) {
		rep_err("rdma_create_qp: %s", strerror(errno));
		return -1;
	}
	rc->qp = true;
	watch_async(rc->id->verbs);
	return 0;
}

/* Ends the connection and waits up to BYE_SEC seconds for DISCONNECTED. */
static void say_bye(struct rconn *rc)
{
	struct rdma_cm_event *ev;
	double deadline = rep_now() + BYE_SEC;

	if (!rc->connected)
		return;
	rdma_disconnect(rc->id);
	while (!rc->disconnected && rep_now() < deadline) {
		if (get_cm_event(rc, BYE_SEC, &ev))
			break;
		note_cm_event(rc, ev);
	}
	rc->connected = false;
}

/* Work request ids of the control messages; Writes use their window slot. */
#define WR_SEND_DONE UINT64_MAX
#define WR_RECV (UINT64_MAX - 1)
#define WR_SEND_RESULT (UINT64_MAX - 2)
#define WR_RECV_TABLE (UINT64_MAX - 3)
#define WR_SEND_TABLE (UINT64_MAX - 4)

/* Posts one receive (id wr_id) of len bytes at buf. Returns 0 or an errno value. */
static int post_recv(struct rconn *rc, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;

	return ibv_post_recv(rc->id->qp, &wr, &bad);
}

/* Posts one signaled Send of len bytes from buf. Returns 0 or an errno value. */
static int post_send(struct rconn *rc, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;

	return ibv_post_send(rc->id->qp, &wr, &bad);
}

/* ---------------------------------------------------------------- sender */

struct sctl {
	struct rep_done done;
	struct rep_result result;
};

/* Resolves host:port and runs the rdma_cm address and route resolution, each
 * bounded by RESOLVE_MS. Returns 0 or -1 (message printed). */
static int resolve(struct rconn *rc, const struct rep_opts *o)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV},
			*res;
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type want[2] = {RDMA_CM_EVENT_ADDR_RESOLVED,
					   RDMA_CM_EVENT_ROUTE_RESOLVED};
	int r;

	r = getaddrinfo(o->host, o->port, &hints, &res);
	if (r) {
		rep_err("cannot resolve %s: %s", o->host, gai_strerror(r));
		return -1;
	}
	r = rdma_resolve_addr(rc->id, NULL, res->ai_addr, RESOLVE_MS);
	freeaddrinfo(res);
	if (r) {
		rep_err("rdma_resolve_addr(%s): %s", o->host, strerror(errno));
		return -1;
	}
	for (int i = 0; i < 2; i++) {
		r = get_cm_event(rc, RESOLVE_MS / 1000 + 1, &ev);
		if (r) {
			rep_err("resolving %s: %s", o->host, wait_str(r));
			return -1;
		}
		if (ev->event != want[i]) {
			rep_err("resolving %s: %s (status %d%s%s)", o->host,
				rdma_event_str(ev->event), ev->status, ev->status < 0 ? ": " : "",
				ev->status < 0 ? strerror(-ev->status) : "");
			rdma_ack_cm_event(ev);
			return -1;
		}
		rdma_ack_cm_event(ev);
		if (i == 0 && rdma_resolve_route(rc->id, RESOLVE_MS)) {
			rep_err("rdma_resolve_route(%s): %s", o->host, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* Connects with hello as private data, waiting up to --timeout seconds; fills
 * *acc from the accept. Returns 0 or -1 (message printed, also for a reject). */
static int connect_peer(struct rconn *rc, const struct rep_opts *o, const struct rep_hello *hello,
			struct rep_accept *acc)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int r;

	memset(&cp, 0, sizeof(cp));
	cp.private_data = hello;
	cp.private_data_len = sizeof(*hello);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(rc->id, &cp)) {
		rep_err("rdma_connect(%s): %s", o->host, strerror(errno));
		return -1;
	}
	r = get_cm_event(rc, o->timeout, &ev);
	if (r) {
		rep_err("connecting to %s port %s: %s", o->host, o->port, wait_str(r));
		return -1;
	}
	memset(acc, 0, sizeof(*acc));
	if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof(*acc))
		memcpy(acc, ev->param.conn.private_data, sizeof(*acc));
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
		rc->connected = true;
		rdma_ack_cm_event(ev);
		if (be32toh(acc->magic) != REP_MAGIC || be16toh(acc->version) != REP_VERSION) {
			rep_err("%s port %s is not a uiwarp-replicate receiver (no valid accept)",
				o->host, o->port);
			return -1;
		}
		return 0;
	}
	if (ev->event == RDMA_CM_EVENT_REJECTED && be32toh(acc->magic) == REP_MAGIC) {
		int err = (int)be32toh(acc->err);

		switch (be16toh(acc->status)) {
		case REP_ACCEPT_CREATE:
			rep_err("receiver refused: cannot create the destination: %s",
				strerror(err));
			break;
		case REP_ACCEPT_REGISTER:
			rep_err("receiver refused: cannot register the destination: %s",
				strerror(err));
			break;
		default:
			rep_err("receiver refused the connection (version mismatch?)");
		}
	} else {
		rep_err(
		    "cannot connect to %s port %s: %s (status %d%s%s); is the receiver running, "
		    "and without --tcp?",
		    o->host, o->port, rdma_event_str(ev->event), ev->status,
		    ev->status < 0 ? ": " : "", ev->status < 0 ? strerror(-ev->status) : "");
	}
	rdma_ack_cm_event(ev);
	return -1;
}

/* One sender stream: its connection, buffers and Writes in flight. */
struct rstream {
	struct rconn rc;
	struct ibv_mr *mr;  /* SRC's mapping, or bounce when it is set */
	struct ibv_mr *cmr; /* ctl */
	struct ibv_mr *tmr; /* table (stream 0 with --resume) */
	struct sctl *ctl;
	char *bounce; /* window x chunk, when the mapping is not registered */
	void *table;  /* struct rep_table + CRCs */
	uint32_t table_len;
	uint32_t window, chunk, inflight;
	uint32_t *slot_len, *free_slot, nfree;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t index;
	int timeout; /* --timeout, seconds per completion wait */
	/* thread */
	struct rep_plan *plan;
	struct rep_src *src;
	const char *what; /* failure, NULL if none */
	int err;	  /* errno / negative wait code for what */
	int wc_status;	  /* -1 if none */
};

/* Sets up stream s (index i of o->streams): resolves, creates the QP,
 * registers SRC's mapping (or a bounce buffer), posts the receives, connects
 * with its hello. Returns 0 or -1 (message printed). */
static int rstream_open(struct rstream *s, const struct rep_opts *o, struct rep_src *src,
			uint32_t i, uint32_t table_len)
{
	struct ibv_device_attr da;
	struct rep_hello hello;
	struct rep_accept acc;
	int r;

	s->index = i;
	s->window = o->window;
	s->timeout = o->timeout;
	s->rc.ech = rdma_create_event_channel();
	if (!s->rc.ech) {
		no_channel();
		return -1;
	}
	if (rdma_create_id(s->rc.ech, &s->rc.id, NULL, RDMA_PS_TCP)) {
		rep_err("rdma_create_id: %s", strerror(errno));
		return -1;
	}
	if (resolve(&s->rc, o))
		return -1;
	if (ibv_query_device(s->rc.id->verbs, &da) == 0) {
		if (da.max_qp_wr > 4 && s->window + 2 > (uint32_t)da.max_qp_wr)
			s->window = (uint32_t)da.max_qp_wr - 2;
		if (da.max_cqe > 8 && (int)s->window + 4 > da.max_cqe)
			s->window = (uint32_t)da.max_cqe - 4;
	}
	if (make_qp(&s->rc, s->window + 2, 2, (int)s->window + 4))
		return -1;
	s->ctl = aligned_alloc(64, sizeof(*s->ctl) < 64 ? 64 : sizeof(*s->ctl));
	s->slot_len = calloc(s->window, sizeof(*s->slot_len));
	s->free_slot = calloc(s->window, sizeof(*s->free_slot));
	if (!s->ctl || !s->slot_len || !s->free_slot) {
		rep_err("out of memory");
		return -1;
	}
	memset(s->ctl, 0, sizeof(*s->ctl));
	s->cmr = ibv_reg_mr(s->rc.pd, s->ctl, sizeof(*s->ctl), IBV_ACCESS_LOCAL_WRITE);
	if (!s->cmr) {
		rep_err("ibv_reg_mr (control buffer): %s", strerror(errno));
		return -1;
	}
	if (src->map) {
		/* Source of RDMA Writes only: local read access is implied. */
		s->mr = ibv_reg_mr(s->rc.pd, (void *)(uintptr_t)src->map, src->size, 0);
		if (!s->mr && !o->quiet && i == 0)
			rep_err("note: cannot register the mapping of %s (%s); copying through a "
				"registered buffer",
				o->path, strerror(errno));
	}
	if (table_len) {
		s->table_len = table_len;
		s->table = malloc(table_len);
		if (!s->table) {
			rep_err("out of memory");
			return -1;
		}
		s->tmr = ibv_reg_mr(s->rc.pd, s->table, table_len, IBV_ACCESS_LOCAL_WRITE);
		if (!s->tmr) {
			rep_err("ibv_reg_mr (resume table): %s", strerror(errno));
			return -1;
		}
		/* Posted first: the receiver's first Send is the table. */
		r = post_recv(&s->rc, WR_RECV_TABLE, s->table, table_len, s->tmr->lkey);
		if (r) {
			rep_err("ibv_post_recv: %s", strerror(r));
			return -1;
		}
	}
	if (i == 0) {
		r = post_recv(&s->rc, WR_RECV, &s->ctl->result, sizeof(s->ctl->result),
			      s->cmr->lkey);
		if (r) {
			rep_err("ibv_post_recv: %s", strerror(r));
			return -1;
		}
	}
	hello = (struct rep_hello){.magic = htobe32(REP_MAGIC),
				   .version = htobe16(REP_VERSION),
				   .flags = htobe16(table_len ? REP_HELLO_RESUME : 0),
				   .size = htobe64(src->size),
				   .chunk = htobe32(o->chunk),
				   .streams = htobe16((uint16_t)o->streams),
				   .stream = htobe16((uint16_t)i)};
	if (connect_peer(&s->rc, o, &hello, &acc))
		return -1;
	if (be16toh(acc.status) != REP_ACCEPT_OK) {
		rep_err("receiver refused the transfer (status %u)", be16toh(acc.status));
		return -1;
	}
	s->raddr = be64toh(acc.addr);
	s->rkey = be32toh(acc.rkey);
	s->chunk = be32toh(acc.chunk);
	if (s->chunk < REP_MIN_CHUNK || s->chunk > o->chunk)
		s->chunk = o->chunk;
	if (!s->mr && src->size > 0) {
		uint64_t need = (uint64_t)s->window * s->chunk;

		if (need > src->size + s->chunk)
			need = (src->size + s->chunk - 1) / s->chunk * s->chunk;
		s->bounce = aligned_alloc(4096, (size_t)((need + 4095) & ~4095ull));
		if (!s->bounce) {
			rep_err("out of memory (%llu byte buffer)", (unsigned long long)need);
			return -1;
		}
		s->mr = ibv_reg_mr(s->rc.pd, s->bounce, (size_t)need, 0);
		if (!s->mr) {
			rep_err("ibv_reg_mr (buffer of %llu bytes): %s", (unsigned long long)need,
				strerror(errno));
			return -1;
		}
		if (s->window > need / s->chunk)
			s->window = (uint32_t)(need / s->chunk);
	}
	for (uint32_t k = 0; k < s->window; k++)
		s->free_slot[s->nfree++] = s->window - 1 - k;
	return 0;
}

/* Disconnects rc (when connected), destroys its QP, deregisters the MRs
 * given (NULL ones skipped), then releases the rest of rc. */
static void conn_close(struct rconn *rc, struct ibv_mr *mr1, struct ibv_mr *mr2, struct ibv_mr *mr3)
{
	say_bye(rc);
	if (rc->qp) {
		rdma_destroy_qp(rc->id);
		rc->qp = false;
	}
	if (mr1)
		ibv_dereg_mr(mr1);
	if (mr2)
		ibv_dereg_mr(mr2);
	if (mr3)
		ibv_dereg_mr(mr3);
	rconn_destroy(rc);
}

/* Releases stream s (disconnects first when connected). */
static void rstream_close(struct rstream *s)
{
	conn_close(&s->rc, s->mr, s->cmr, s->tmr);
	free(s->bounce);
	free(s->ctl);
	free(s->table);
	free(s->slot_len);
	free(s->free_slot);
}

/* Stream thread: posts RDMA Writes of the chunks it takes from the plan, at
 * most window outstanding, until none is left and all completed. */
static void *rstream_thread(void *arg)
{
	struct rstream *s = arg;
	struct ibv_wc wc[32];
	int r;

	for (;;) {
		uint64_t off;
		uint32_t n;

		while (s->nfree > 0 && rep_plan_next(s->plan, &off, &n)) {
			uint32_t k = s->free_slot[--s->nfree];
			struct ibv_sge sge = {.length = n, .lkey = s->mr->lkey};
			struct ibv_send_wr wr = {.wr_id = k,
						 .sg_list = &sge,
						 .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			const char *p = (const char *)s->src->map + off;

			if (s->bounce) {
				char *b = s->bounce + (size_t)k * s->chunk;

				if (s->src->map) {
					memcpy(b, p, n);
				} else {
					r = rep_src_read(s->src, b, n, off);
					if (r) {
						s->what = "read";
						s->err = -r;
						goto fail;
					}
				}
				p = b;
			}
			sge.addr = (uintptr_t)p;
			wr.wr.rdma.remote_addr = s->raddr + off;
			wr.wr.rdma.rkey = s->rkey;
			r = ibv_post_send(s->rc.id->qp, &wr, &bad);
			if (r) {
				s->what = "post";
				s->err = r;
				goto fail;
			}
			s->slot_len[k] = n;
			s->inflight++;
		}
		if (!s->inflight)
			break;
		r = wait_wc(&s->rc, wc, 32, s->timeout);
		if (r < 0) {
			s->what = "wait";
			s->err = r;
			goto fail;
		}
		for (int i = 0; i < r; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				s->what = "wc";
				s->wc_status = wc[i].status;
				s->err = (int)wc[i].vendor_err;
				goto fail;
			}
			if (wc[i].wr_id < s->window) {
				rep_plan_complete(s->plan, s->slot_len[wc[i].wr_id]);
				s->free_slot[s->nfree++] = (uint32_t)wc[i].wr_id;
				s->inflight--;
			}
		}
	}
	atomic_fetch_sub(&s->plan->running, 1);
	return NULL;
fail:
	atomic_store(&s->plan->stop, 1);
	atomic_fetch_sub(&s->plan->running, 1);
	return NULL;
}

/* Prints why stream s failed. */
static void rstream_report(const struct rstream *s, const struct rep_opts *o)
{
	if (!s->what)
		return;
	if (!strcmp(s->what, "read"))
		rep_err("cannot read %s: %s", o->path, strerror(s->err));
	else if (!strcmp(s->what, "post"))
		rep_err("stream %u: posting an RDMA Write failed: %s", s->index, strerror(s->err));
	else if (!strcmp(s->what, "wait"))
		rep_err("stream %u: transfer failed: %s", s->index, wait_str(s->err));
	else if (s->wc_status == IBV_WC_WR_FLUSH_ERR)
		rep_err("stream %u: connection lost (work requests flushed); the receiver went "
			"away?",
			s->index);
	else
		rep_err("stream %u: RDMA Write failed: %s (vendor error 0x%x)", s->index,
			ibv_wc_status_str((enum ibv_wc_status)s->wc_status), (unsigned)s->err);
}

/* Waits on stream s for the completion of wr_id want (and, when s is stream
 * 0, also for the receiver's result Send, *have_result). Returns 0 or -1
 * (message printed). */
static int rstream_wait(struct rstream *s, uint64_t want, bool *have_result, int timeout)
{
	bool got = false;
	struct ibv_wc wc[8];

	while (!got || (have_result && !*have_result)) {
		int r = wait_wc(&s->rc, wc, 8, timeout);

		if (r < 0) {
			rep_err("stream %u: %s: %s", s->index,
				want == WR_RECV_TABLE ? "no resume table" : "no answer",
				wait_str(r));
			return -1;
		}
		for (int i = 0; i < r; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				rep_err("stream %u: %s failed: %s (vendor error 0x%x)", s->index,
					wc[i].wr_id == WR_RECV	       ? "receive of the answer"
					: wc[i].wr_id == WR_RECV_TABLE ? "receive of the table"
								       : "final Send",
					ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
				return -1;
			}
			if (wc[i].wr_id == want) {
				got = true;
				if (want == WR_RECV_TABLE)
					s->table_len = wc[i].byte_len;
			} else if (wc[i].wr_id == WR_RECV && have_result) {
				*have_result = true;
			}
		}
	}
	return 0;
}

int rep_rdma_send(const struct rep_opts *o)
{
	struct rstream *ss;
	struct rep_src src;
	struct rep_progress prog;
	struct rep_stats st = {0};
	struct rep_plan plan = {0};
	uint32_t nthr = 0, table_len = 0, crc = 0, *table = NULL;
	uint64_t count = 0, nchunks;
	bool have_result = false;
	double t0;
	int ret = 1, r;

	if (rep_src_open(&src, o->path, o->no_mmap) < 0)
		return 1;
	ss = calloc(o->streams, sizeof(*ss));
	if (!ss) {
		rep_err("out of memory");
		rep_src_close(&src);
		return 1;
	}
	nchunks = src.size ? (src.size + o->chunk - 1) / o->chunk : 0;
	if (o->resume && nchunks <= REP_MAX_TABLE)
		table_len = (uint32_t)(sizeof(struct rep_table) + nchunks * sizeof(uint32_t));
	else if (o->resume)
		rep_err("note: %llu chunks are more than --resume handles (%u): not resuming; "
			"use a larger --chunk",
			(unsigned long long)nchunks, REP_MAX_TABLE);
	for (uint32_t i = 0; i < o->streams; i++)
		if (rstream_open(&ss[i], o, &src, i, i == 0 ? table_len : 0))
			goto out;
	if (table_len) {
		struct rep_table th0;

		if (rstream_wait(&ss[0], WR_RECV_TABLE, NULL, o->timeout))
			goto out;
		memcpy(&th0, ss[0].table, sizeof(th0));
		count = be32toh(th0.count);
		if (be32toh(th0.magic) != REP_MAGIC ||
		    ss[0].table_len != sizeof(th0) + count * sizeof(uint32_t) ||
		    (count && count != nchunks)) {
			rep_err("bad resume table from the receiver");
			goto out;
		}
		table = (uint32_t *)((char *)ss[0].table + sizeof(th0));
		for (uint64_t k = 0; k < count; k++)
			table[k] = be32toh(table[k]);
	}
	for (uint32_t i = 1; i < o->streams; i++) {
		if (ss[i].chunk != ss[0].chunk) {
			/* Bounce slots and the plan are sized by one chunk size. */
			rep_err("the receiver agreed to different chunk sizes on its streams");
			goto out;
		}
	}
	if (ss[0].chunk != o->chunk && count) {
		rep_err("the receiver changed the chunk size: not resuming");
		count = 0;
	}
	if (rep_plan_init(&plan, &src, o, ss[0].chunk, table, count, &st))
		goto out;

	rep_progress_init(&prog, o, plan.send_bytes);
	t0 = rep_now();
	for (uint32_t i = 0; i < o->streams; i++) {
		ss[i].plan = &plan;
		ss[i].src = &src;
	}
	nthr = rep_run_streams(&plan, &src, o, &prog, rstream_thread, ss, sizeof(*ss), &crc);
	if (nthr < o->streams || atomic_load(&plan.stop)) {
		rep_progress_end(&prog);
		for (uint32_t i = 0; i < nthr; i++)
			rstream_report(&ss[i], o);
		goto out;
	}
	/* Full bar once every Write completed; the answer comes later. */
	rep_progress_update(&prog, plan.send_bytes, true);
	rep_progress_end(&prog);

	/* Each stream's done is ordered behind that stream's Writes. */
	for (uint32_t i = 0; i < o->streams; i++) {
		ss[i].ctl->done = (struct rep_done){.magic = htobe32(REP_MAGIC),
						    .version = htobe16(REP_VERSION),
						    .length = htobe64(src.size),
						    .crc = htobe32(crc)};
		r = post_send(&ss[i].rc, WR_SEND_DONE, &ss[i].ctl->done, sizeof(ss[i].ctl->done),
			      ss[i].cmr->lkey);
		if (r) {
			rep_err("stream %u: posting the final Send failed: %s", i, strerror(r));
			goto out;
		}
	}
	/* Once all data is out, the receiver still checksums and syncs it. */
	for (uint32_t i = o->streams; i-- > 0;)
		if (rstream_wait(&ss[i], WR_SEND_DONE, i == 0 ? &have_result : NULL,
				 rep_answer_timeout(o, src.size)))
			goto out;
	st.seconds = rep_now() - t0;

	if (be32toh(ss[0].ctl->result.magic) != REP_MAGIC) {
		rep_err("bad answer from the receiver");
		goto out;
	}
	if (be16toh(ss[0].ctl->result.status) != REP_RESULT_OK) {
		uint32_t err = be32toh(ss[0].ctl->result.err);

		rep_err("receiver rejected the copy: %s%s%s (sent crc32c 0x%08x, receiver computed "
			"0x%08x); DEST was not written",
			rep_result_str(be16toh(ss[0].ctl->result.status)), err ? ": " : "",
			err ? strerror((int)err) : "", crc, be32toh(ss[0].ctl->result.crc));
		goto out;
	}
	st.verify_seconds = (double)be64toh(ss[0].ctl->result.verify_us) * 1e-6;
	if (st.seconds > st.verify_seconds)
		st.seconds -= st.verify_seconds;
	st.bytes = src.size;
	st.crc = crc;
	st.streams = o->streams;
	rep_tcp_info_scan(rdma_get_peer_addr(ss[0].rc.id), &st);
	rep_print_result(o, &st);
	ret = 0;
out:
	if (ret)
		async_settle();
	for (uint32_t i = 0; i < o->streams; i++)
		rstream_close(&ss[i]);
	free(ss);
	rep_plan_free(&plan);
	rep_src_close(&src);
	return ret;
}

/* -------------------------------------------------------------- receiver */

struct rctl {
	struct rep_done done;
	struct rep_result result;
};

/* One receiver stream: its connection (on a channel of its own) and MRs. */
struct rrecv {
	struct rconn rc;
	struct ibv_mr *mr, *cmr;
	struct rctl *ctl;
	uint32_t done_len;
	bool got_done;
};

/* Listens on o->bind (any IPv4 address if NULL) and o->port and says so on
 * stderr. Returns 0 or -1 (message printed). */
static int listen_on(struct rconn *rc, const struct rep_opts *o)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (o->bind) {
		struct addrinfo hints = {.ai_family = AF_UNSPEC,
					 .ai_socktype = SOCK_STREAM,
					 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
				*res;
		int r = getaddrinfo(o->bind, o->port, &hints, &res);

		if (r) {
			rep_err("cannot resolve %s: %s", o->bind, gai_strerror(r));
			return -1;
		}
		memcpy(&ss, res->ai_addr, res->ai_addrlen);
		freeaddrinfo(res);
	} else {
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_ANY);
		sin->sin_port = htons((uint16_t)atoi(o->port));
	}
	if (rdma_create_id(rc->ech, &rc->listen_id, NULL, RDMA_PS_TCP)) {
		rep_err("rdma_create_id: %s", strerror(errno));
		return -1;
	}
	if (rdma_bind_addr(rc->listen_id, (struct sockaddr *)&ss) ||
	    rdma_listen(rc->listen_id, REP_MAX_STREAMS)) {
		rep_err("cannot listen on %s port %s: %s", o->bind ? o->bind : "*", o->port,
			strerror(errno));
		return -1;
	}
	fprintf(stderr, "uiwarp-replicate: listening on %s port %s (rdma)\n",
		o->bind ? o->bind : "*", o->port);
	fflush(stderr);
	return 0;
}

/* Sets up the connection of stream s from a CONNECT_REQUEST's id: a channel
 * of its own (rdma_migrate_id), QP, MR of dest's data, a receive for the
 * done; fills acc's rkey/addr. Only the first stream (first) may switch dest
 * to an anonymous buffer when the mapping cannot be registered (later
 * streams' peers already write into it). Returns 0, or an errno value for
 * the reject (message printed). */
static int rrecv_setup(struct rrecv *s, struct rdma_cm_id *id, struct rep_dest *dest,
		       const struct rep_opts *o, struct rep_accept *acc, bool first)
{
	int r;

	s->rc.id = id;
	s->rc.ech = rdma_create_event_channel();
	if (!s->rc.ech) {
		no_channel();
		return errno ? errno : ENOMEM;
	}
	if (rdma_migrate_id(id, s->rc.ech)) {
		rep_err("rdma_migrate_id: %s", strerror(errno));
		return errno;
	}
	if (make_qp(&s->rc, 2, 2, 8))
		return errno;
	s->ctl = aligned_alloc(64, sizeof(*s->ctl) < 64 ? 64 : sizeof(*s->ctl));
	if (!s->ctl)
		return ENOMEM;
	memset(s->ctl, 0, sizeof(*s->ctl));
	s->cmr = ibv_reg_mr(s->rc.pd, s->ctl, sizeof(*s->ctl), IBV_ACCESS_LOCAL_WRITE);
	if (!s->cmr) {
		r = errno;
		rep_err("ibv_reg_mr (control buffer): %s", strerror(r));
		return r;
	}
	if (dest->size > 0) {
		int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

		s->mr = ibv_reg_mr(s->rc.pd, dest->map, dest->size, access);
		if (!s->mr && !dest->anon && first) {
			int e = errno;

			if (rep_dest_use_anon(dest) == 0) {
				if (!o->quiet)
					rep_err(
					    "note: cannot register the mapping of %s.part (%s); "
					    "receiving into memory, writing the file at the end",
					    o->path, strerror(e));
				s->mr = ibv_reg_mr(s->rc.pd, dest->map, dest->size, access);
			}
		}
		if (!s->mr) {
			r = errno;
			rep_err("cannot register the mapping of %s.part (%llu bytes): %s", o->path,
				(unsigned long long)dest->size, strerror(r));
			return r;
		}
		acc->addr = htobe64((uintptr_t)dest->map);
		acc->rkey = htobe32(s->mr->rkey);
	}
	r = post_recv(&s->rc, WR_RECV, &s->ctl->done, sizeof(s->ctl->done), s->cmr->lkey);
	if (r)
		rep_err("ibv_post_recv: %s", strerror(r));
	return r;
}

/* Accepts s with acc as private data and waits for ESTABLISHED. Returns 0 or
 * -1 (message printed). */
static int rrecv_accept(struct rrecv *s, const struct rep_opts *o, const struct rep_accept *acc)
{
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	int r;

	memset(&cp, 0, sizeof(cp));
	cp.private_data = acc;
	cp.private_data_len = sizeof(*acc);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(s->rc.id, &cp)) {
		rep_err("rdma_accept: %s", strerror(errno));
		return -1;
	}
	r = get_cm_event(&s->rc, o->timeout, &ev);
	if (r || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
		if (r)
			rep_err("waiting for the connection: %s", wait_str(r));
		else
			rep_err("connection failed: %s (status %d)", rdma_event_str(ev->event),
				ev->status);
		if (!r)
			rdma_ack_cm_event(ev);
		return -1;
	}
	rdma_ack_cm_event(ev);
	s->rc.connected = true;
	return 0;
}

/* Sends the resume table of dest on s (count 0 when it was not resumed) and
 * waits for its completion. Returns 0 or -1 (message printed). */
static int rrecv_send_table(struct rrecv *s, const struct rep_dest *dest, uint32_t chunk,
			    int timeout)
{
	struct rep_table *th;
	struct ibv_mr *mr;
	struct ibv_wc wc[4];
	uint32_t *t = NULL;
	uint64_t count = 0;
	size_t len;
	int r = -1;

	if (dest->resumed && rep_dest_table(dest, chunk, &t, &count)) {
		rep_err("out of memory");
		return -1;
	}
	if (count > REP_MAX_TABLE)
		count = 0;
	len = sizeof(*th) + (size_t)count * sizeof(uint32_t);
	th = malloc(len);
	if (!th) {
		free(t);
		rep_err("out of memory");
		return -1;
	}
	th->magic = htobe32(REP_MAGIC);
	th->count = htobe32((uint32_t)count);
	for (uint64_t k = 0; k < count; k++)
		((uint32_t *)(th + 1))[k] = htobe32(t[k]);
	free(t);
	mr = ibv_reg_mr(s->rc.pd, th, len, 0);
	if (!mr) {
		rep_err("ibv_reg_mr (resume table): %s", strerror(errno));
		free(th);
		return -1;
	}
	if (post_send(&s->rc, WR_SEND_TABLE, th, (uint32_t)len, mr->lkey)) {
		rep_err("posting the resume table failed");
		goto out;
	}
	for (;;) {
		int n = wait_wc(&s->rc, wc, 4, timeout);

		if (n < 0) {
			rep_err("sending the resume table: %s", wait_str(n));
			goto out;
		}
		if (wc[0].status != IBV_WC_SUCCESS) {
			rep_err("sending the resume table: %s", ibv_wc_status_str(wc[0].status));
			goto out;
		}
		if (wc[0].wr_id == WR_SEND_TABLE)
			break;
	}
	if (count)
		fprintf(stderr,
			"uiwarp-replicate: resume: offered the CRC32c of %llu chunks of "
			"%s.part\n",
			(unsigned long long)count, dest->path);
	r = 0;
out:
	ibv_dereg_mr(mr);
	free(th);
	return r;
}

/* Releases stream s (after disconnecting when connected). */
static void rrecv_close(struct rrecv *s)
{
	conn_close(&s->rc, s->mr, s->cmr, NULL);
	free(s->ctl);
}

/* Waits (as long as the connection lives) for the sender's done on s.
 * Returns 0 or -1 (message printed). */
static int rrecv_wait_done(struct rrecv *s, uint32_t i)
{
	struct ibv_wc wc[4];

	while (!s->got_done) {
		int r = wait_wc(&s->rc, wc, 4, 0);

		if (r < 0) {
			rep_err("no final message from the sender on stream %u: %s", i,
				wait_str(r));
			return -1;
		}
		for (int k = 0; k < r; k++) {
			if (wc[k].status == IBV_WC_WR_FLUSH_ERR) {
				rep_err("connection lost before the sender's final message "
					"(receive flushed, stream %u)",
					i);
				return -1;
			}
			if (wc[k].status != IBV_WC_SUCCESS) {
				rep_err("%s failed: %s (vendor error 0x%x)",
					wc[k].wr_id == WR_RECV ? "receive" : "send",
					ibv_wc_status_str(wc[k].status), wc[k].vendor_err);
				return -1;
			}
			if (wc[k].wr_id == WR_RECV) {
				s->got_done = true;
				s->done_len = wc[k].byte_len;
			}
		}
	}
	return 0;
}

/* Waits up to timeout seconds (0 = none) for the next CM event on the
 * listening channel lrc, looking every second whether one of the n streams
 * in ss already connected has ended (a sender that failed to set up a later
 * stream). Returns 0 with *ev (caller acks), -ECONNRESET when a stream
 * ended, or get_cm_event's error. */
static int next_request(struct rconn *lrc, struct rrecv *ss, uint32_t n, int timeout,
			struct rdma_cm_event **ev)
{
	double deadline = deadline_in(timeout);

	for (;;) {
		int r = get_cm_event(lrc, 1, ev);

		if (r != -ETIMEDOUT)
			return r;
		for (uint32_t k = 0; k < n; k++) {
			struct rdma_cm_event *e;
			struct pollfd pfd;

			if (!ss[k].rc.connected)
				continue;
			pfd = (struct pollfd){.fd = ss[k].rc.ech->fd, .events = POLLIN};
			if (poll(&pfd, 1, 0) == 1 && rdma_get_cm_event(ss[k].rc.ech, &e) == 0)
				note_cm_event(&ss[k].rc, e);
			if (ss[k].rc.disconnected)
				return -ECONNRESET;
		}
		if (deadline && rep_now() >= deadline)
			return -ETIMEDOUT;
	}
}

int rep_rdma_recv(const struct rep_opts *o)
{
	struct rconn lrc = {0};
	struct rrecv ss[REP_MAX_STREAMS] = {0};
	struct rep_rx rxs = {0};
	struct rep_dest dest = {.fd = -1};
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_stats st = {0};
	struct rdma_cm_event *ev;
	struct rctl *c0;
	struct ibv_wc wc[4];
	uint32_t crc;
	double t0 = 0, tv;
	int ret = 1, r, status, err;

	lrc.ech = rdma_create_event_channel();
	if (!lrc.ech) {
		no_channel();
		goto out;
	}
	if (listen_on(&lrc, o))
		goto out;

	/* Stream 0's request first (the sender connects one after the other),
	 * then the others; each wait bounded by --timeout. */
	while (!rxs.streams || rxs.got < rxs.streams) {
		struct rdma_cm_id *id;
		uint32_t i;

		r = next_request(&lrc, ss, rxs.streams, o->timeout, &ev);
		if (r) {
			if (r == -ECONNRESET)
				rep_err("the sender closed a stream before all %u were connected",
					rxs.streams);
			else if (r == -ETIMEDOUT)
				rep_err("no sender connected within %d s (%u of %u streams)",
					o->timeout, rxs.got, rxs.streams ? rxs.streams : 1);
			else
				rep_err("waiting for a sender: %s", wait_str(r));
			goto out;
		}
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			rdma_ack_cm_event(ev);
			continue;
		}
		id = ev->id;
		memset(&hello, 0, sizeof(hello));
		if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof(hello))
			memcpy(&hello, ev->param.conn.private_data, sizeof(hello));
		rdma_ack_cm_event(ev);

		r = rep_rx_hello(&rxs, &hello, false, o, &dest, &acc);
		if (r < 0) {
			rdma_reject(id, &acc, sizeof(acc));
			rdma_destroy_id(id);
			if (r == -2)
				goto out;
			continue;
		}
		i = (uint32_t)r;
		r = rrecv_setup(&ss[i], id, &dest, o, &acc, rxs.got == 0);
		if (r) {
			acc.status = htobe16(REP_ACCEPT_REGISTER);
			acc.err = htobe32((uint32_t)r);
			rdma_reject(id, &acc, sizeof(acc));
			goto out; /* ss[i] holds id now */
		}
		if (rrecv_accept(&ss[i], o, &acc))
			goto out;
		if (i == 0 && (be16toh(hello.flags) & REP_HELLO_RESUME) &&
		    rrecv_send_table(&ss[0], &dest, rxs.chunk, o->timeout))
			goto out;
		rep_rx_accepted(&rxs, i, o, &dest);
		if (i == 0)
			t0 = rep_now();
	}
	/* All streams connected: stop listening. */
	rdma_destroy_id(lrc.listen_id);
	lrc.listen_id = NULL;

	/* The data arrives as one-sided Writes: nothing to see until the final
	 * Sends, one per stream, each ordered behind its stream's Writes. Wait
	 * as long as the connections live (a dead sender ends them). */
	for (uint32_t i = 0; i < rxs.streams; i++)
		if (rrecv_wait_done(&ss[i], i))
			goto out;
	st.seconds = rep_now() - t0;
	st.streams = rxs.streams;
	rep_tcp_info_scan(rdma_get_peer_addr(ss[0].rc.id), &st);

	/* No more Writes may land while we verify. */
	for (uint32_t i = 0; i < rxs.streams; i++) {
		if (ss[i].mr) {
			ibv_dereg_mr(ss[i].mr);
			ss[i].mr = NULL;
		}
	}
	c0 = ss[0].ctl;
	memset(&c0->result, 0, sizeof(c0->result));
	c0->result.magic = htobe32(REP_MAGIC);
	c0->result.version = htobe16(REP_VERSION);
	status = REP_RESULT_OK;
	for (uint32_t i = 0; i < rxs.streams; i++)
		if (be32toh(ss[i].ctl->done.magic) != REP_MAGIC ||
		    ss[i].done_len < sizeof(ss[i].ctl->done) ||
		    ss[i].ctl->done.length != c0->done.length ||
		    ss[i].ctl->done.crc != c0->done.crc)
			status = REP_RESULT_PROTO;
	if (status != REP_RESULT_OK) {
		rep_err("bad final message from the sender");
		err = 0;
		crc = 0;
		rep_dest_abort(&dest);
	} else {
		tv = rep_now();
		status = rep_dest_finish(&dest, be64toh(c0->done.length), be32toh(c0->done.crc),
					 &crc, &err);
		c0->result.verify_us = htobe64((uint64_t)((rep_now() - tv) * 1e6));
	}
	c0->result.status = htobe16((uint16_t)status);
	c0->result.err = htobe32((uint32_t)err);
	c0->result.crc = htobe32(crc);
	if (status != REP_RESULT_OK)
		rep_err("%s: %s%s%s (length %llu, expected %llu; crc32c 0x%08x, expected 0x%08x); "
			"removed %s.part",
			o->path, rep_result_str(status), err ? ": " : "", err ? strerror(err) : "",
			(unsigned long long)be64toh(c0->done.length), (unsigned long long)rxs.size,
			crc, be32toh(c0->done.crc), o->path);

	/* Tell the sender; best effort, our verdict stands either way. */
	if (post_send(&ss[0].rc, WR_SEND_RESULT, &c0->result, sizeof(c0->result),
		      ss[0].cmr->lkey) == 0) {
		r = wait_wc(&ss[0].rc, wc, 4, o->timeout ? o->timeout : REP_DEFAULT_TIMEOUT);
		if (r < 0 || wc[0].status != IBV_WC_SUCCESS)
			rep_err("warning: could not send the result to the sender");
	}
	/* The sender disconnects once it has the answer; wait for it so our
	 * Send is not lost to a reset. */
	{
		double deadline = rep_now() + BYE_SEC;

		while (!ss[0].rc.disconnected && rep_now() < deadline) {
			if (get_cm_event(&ss[0].rc, BYE_SEC, &ev))
				break;
			note_cm_event(&ss[0].rc, ev);
		}
	}
	if (status == REP_RESULT_OK) {
		st.bytes = rxs.size;
		st.crc = crc;
		rep_print_result(o, &st);
		ret = 0;
	}
out:
	if (ret)
		async_settle();
	for (uint32_t i = 0; i < rxs.streams; i++)
		rrecv_close(&ss[i]);
	rconn_destroy(&lrc);
	if (ret && o->resume)
		rep_dest_keep(&dest);
	else
		rep_dest_abort(&dest);
	return ret;
}
