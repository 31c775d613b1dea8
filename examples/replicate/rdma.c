/* uiwarp-replicate over RDMA: standard libibverbs + librdmacm only, so it runs
 * over uiwarp's drop-in libraries or over real RDMA hardware.
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

/* Creates PD, completion channel, CQ of cqe entries and an RC QP with send_wr /
 * recv_wr entries on rc->id. Returns 0 or -1 (message printed, errno kept). */
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

/* Posts one receive of len bytes at buf. Returns 0 or an errno value. */
static int post_recv(struct rconn *rc, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = WR_RECV, .sg_list = &sge, .num_sge = 1}, *bad;

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

int rep_rdma_send(const struct rep_opts *o)
{
	struct rconn rc = {0};
	struct rep_src src;
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_progress prog;
	struct rep_stats st = {0};
	struct ibv_device_attr da;
	struct ibv_mr *mr = NULL, *cmr = NULL;
	struct sctl *ctl = NULL;
	char *bounce = NULL;
	uint32_t *slot_len = NULL, *free_slot = NULL, nfree = 0, window = o->window, chunk;
	uint64_t raddr, off = 0, acked = 0;
	uint32_t rkey, crc = 0;
	bool done_sent = false, done_acked = false, have_result = false, drawn_full = false;
	double t0;
	int ret = 1, r;

	if (rep_src_open(&src, o->path, o->no_mmap) < 0)
		return 1;

	rc.ech = rdma_create_event_channel();
	if (!rc.ech) {
		no_channel();
		goto out;
	}
	if (rdma_create_id(rc.ech, &rc.id, NULL, RDMA_PS_TCP)) {
		rep_err("rdma_create_id: %s", strerror(errno));
		goto out;
	}
	if (resolve(&rc, o))
		goto out;

	if (ibv_query_device(rc.id->verbs, &da) == 0) {
		if (da.max_qp_wr > 4 && window + 2 > (uint32_t)da.max_qp_wr)
			window = (uint32_t)da.max_qp_wr - 2;
		if (da.max_cqe > 8 && (int)window + 4 > da.max_cqe)
			window = (uint32_t)da.max_cqe - 4;
	}
	if (make_qp(&rc, window + 2, 2, (int)window + 4))
		goto out;

	ctl = aligned_alloc(64, sizeof(*ctl) < 64 ? 64 : sizeof(*ctl));
	slot_len = calloc(window, sizeof(*slot_len));
	free_slot = calloc(window, sizeof(*free_slot));
	if (!ctl || !slot_len || !free_slot) {
		rep_err("out of memory");
		goto out;
	}
	memset(ctl, 0, sizeof(*ctl));
	cmr = ibv_reg_mr(rc.pd, ctl, sizeof(*ctl), IBV_ACCESS_LOCAL_WRITE);
	if (!cmr) {
		rep_err("ibv_reg_mr (control buffer): %s", strerror(errno));
		goto out;
	}
	if (src.map) {
		/* Source of RDMA Writes only: local read access is implied. */
		mr = ibv_reg_mr(rc.pd, (void *)(uintptr_t)src.map, src.size, 0);
		if (!mr) {
			if (!o->quiet)
				rep_err("note: cannot register the mapping of %s (%s); copying "
					"through a registered buffer",
					o->path, strerror(errno));
			munmap((void *)(uintptr_t)src.map, src.size);
			src.map = NULL;
		}
	}
	r = post_recv(&rc, &ctl->result, sizeof(ctl->result), cmr->lkey);
	if (r) {
		rep_err("ibv_post_recv: %s", strerror(r));
		goto out;
	}

	hello = (struct rep_hello){.magic = htobe32(REP_MAGIC),
				   .version = htobe16(REP_VERSION),
				   .size = htobe64(src.size),
				   .chunk = htobe32(o->chunk)};
	if (connect_peer(&rc, o, &hello, &acc))
		goto out;
	if (be16toh(acc.status) != REP_ACCEPT_OK) {
		rep_err("receiver refused the transfer (status %u)", be16toh(acc.status));
		goto out;
	}
	raddr = be64toh(acc.addr);
	rkey = be32toh(acc.rkey);
	chunk = be32toh(acc.chunk);
	if (chunk < REP_MIN_CHUNK || chunk > o->chunk)
		chunk = o->chunk;

	if (!src.map && src.size > 0) {
		uint64_t need = (uint64_t)window * chunk;

		if (need > src.size + chunk)
			need = (src.size + chunk - 1) / chunk * chunk;
		bounce = aligned_alloc(4096, (size_t)((need + 4095) & ~4095ull));
		if (!bounce) {
			rep_err("out of memory (%llu byte buffer)", (unsigned long long)need);
			goto bye;
		}
		mr = ibv_reg_mr(rc.pd, bounce, (size_t)need, 0);
		if (!mr) {
			rep_err("ibv_reg_mr (buffer of %llu bytes): %s", (unsigned long long)need,
				strerror(errno));
			goto bye;
		}
		if (window > need / chunk)
			window = (uint32_t)(need / chunk);
	}
	for (uint32_t i = 0; i < window; i++)
		free_slot[nfree++] = window - 1 - i;

	rep_progress_init(&prog, o, src.size);
	t0 = rep_now();
	while (!have_result || !done_acked || acked < src.size) {
		struct ibv_wc wc[32];

		/* Fill the window. */
		while (off < src.size && nfree > 0) {
			uint32_t n = src.size - off < chunk ? (uint32_t)(src.size - off) : chunk;
			uint32_t s = free_slot[--nfree];
			struct ibv_sge sge = {.length = n, .lkey = mr->lkey};
			struct ibv_send_wr wr = {.wr_id = s,
						 .sg_list = &sge,
						 .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			const void *p;

			if (src.map) {
				p = (const char *)src.map + off;
			} else {
				p = bounce + (size_t)s * chunk;
				r = rep_src_read(&src, (void *)(uintptr_t)p, n, off);
				if (r) {
					rep_progress_end(&prog);
					rep_err("cannot read %s: %s", o->path, strerror(-r));
					goto bye;
				}
			}
			sge.addr = (uintptr_t)p;
			wr.wr.rdma.remote_addr = raddr + off;
			wr.wr.rdma.rkey = rkey;
			r = ibv_post_send(rc.id->qp, &wr, &bad);
			if (r) {
				rep_progress_end(&prog);
				rep_err("posting an RDMA Write failed: %s", strerror(r));
				goto bye;
			}
			slot_len[s] = n;
			/* Checksum while the Write is on its way. */
			crc = rep_crc32c(crc, p, n);
			off += n;
		}
		if (off == src.size && !done_sent) {
			ctl->done = (struct rep_done){.magic = htobe32(REP_MAGIC),
						      .version = htobe16(REP_VERSION),
						      .length = htobe64(src.size),
						      .crc = htobe32(crc)};
			r = post_send(&rc, WR_SEND_DONE, &ctl->done, sizeof(ctl->done), cmr->lkey);
			if (r) {
				rep_progress_end(&prog);
				rep_err("posting the final Send failed: %s", strerror(r));
				goto bye;
			}
			done_sent = true;
		}

		/* Once all data is out, the receiver still checksums and syncs it. */
		r = wait_wc(&rc, wc, 32,
			    acked == src.size ? rep_answer_timeout(o, src.size) : o->timeout);
		if (r < 0) {
			rep_progress_end(&prog);
			rep_err("transfer failed after %llu of %llu bytes: %s",
				(unsigned long long)acked, (unsigned long long)src.size,
				wait_str(r));
			goto bye;
		}
		for (int i = 0; i < r; i++) {
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
				rep_progress_end(&prog);
				rep_err("connection lost after %llu of %llu bytes (work requests "
					"flushed); the receiver went away?",
					(unsigned long long)acked, (unsigned long long)src.size);
				goto bye;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				rep_progress_end(&prog);
				rep_err("%s failed after %llu of %llu bytes: %s (vendor error "
					"0x%x)",
					wc[i].wr_id == WR_RECV	      ? "receive"
					: wc[i].wr_id == WR_SEND_DONE ? "final Send"
								      : "RDMA Write",
					(unsigned long long)acked, (unsigned long long)src.size,
					ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
				goto bye;
			}
			if (wc[i].wr_id == WR_RECV) {
				if (!done_sent) {
					rep_progress_end(&prog);
					rep_err("unexpected message from the receiver");
					goto bye;
				}
				have_result = true;
			} else if (wc[i].wr_id == WR_SEND_DONE) {
				done_acked = true;
			} else if (wc[i].wr_id < window) {
				acked += slot_len[wc[i].wr_id];
				free_slot[nfree++] = (uint32_t)wc[i].wr_id;
			}
		}
		/* Full bar once every Write completed; the answer comes later. */
		rep_progress_update(&prog, acked, acked == src.size && !drawn_full);
		drawn_full = drawn_full || acked == src.size;
	}
	rep_progress_end(&prog);
	st.seconds = rep_now() - t0;

	if (be32toh(ctl->result.magic) != REP_MAGIC) {
		rep_err("bad answer from the receiver");
		goto bye;
	}
	if (be16toh(ctl->result.status) != REP_RESULT_OK) {
		uint32_t err = be32toh(ctl->result.err);

		rep_err("receiver rejected the copy: %s%s%s (sent crc32c 0x%08x, receiver computed "
			"0x%08x); DEST was not written",
			rep_result_str(be16toh(ctl->result.status)), err ? ": " : "",
			err ? strerror((int)err) : "", crc, be32toh(ctl->result.crc));
		goto bye;
	}
	st.verify_seconds = (double)be64toh(ctl->result.verify_us) * 1e-6;
	if (st.seconds > st.verify_seconds)
		st.seconds -= st.verify_seconds;
	st.bytes = src.size;
	st.crc = crc;
	rep_print_result(o, &st);
	ret = 0;
bye:
	say_bye(&rc);
out:
	if (rc.qp) {
		rdma_destroy_qp(rc.id);
		rc.qp = false;
	}
	if (mr)
		ibv_dereg_mr(mr);
	if (cmr)
		ibv_dereg_mr(cmr);
	rconn_destroy(&rc);
	free(bounce);
	free(ctl);
	free(slot_len);
	free(free_slot);
	rep_src_close(&src);
	return ret;
}

/* -------------------------------------------------------------- receiver */

struct rctl {
	struct rep_done done;
	struct rep_result result;
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
	    rdma_listen(rc->listen_id, 1)) {
		rep_err("cannot listen on %s port %s: %s", o->bind ? o->bind : "*", o->port,
			strerror(errno));
		return -1;
	}
	fprintf(stderr, "uiwarp-replicate: listening on %s port %s (rdma)\n",
		o->bind ? o->bind : "*", o->port);
	fflush(stderr);
	return 0;
}

int rep_rdma_recv(const struct rep_opts *o)
{
	struct rconn rc = {0};
	struct rep_dest dest = {.fd = -1};
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_stats st = {0};
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev;
	struct ibv_mr *mr = NULL, *cmr = NULL;
	struct rctl *ctl = NULL;
	struct ibv_wc wc[4];
	uint64_t size = 0;
	uint32_t chunk, crc, done_len = 0;
	double t0, tv;
	int ret = 1, r, status, err, rej_err = 0;
	bool got_done = false;

	rc.ech = rdma_create_event_channel();
	if (!rc.ech) {
		no_channel();
		goto out;
	}
	if (listen_on(&rc, o))
		goto out;

	/* One connection request, bounded by --timeout. */
	for (;;) {
		r = get_cm_event(&rc, o->timeout, &ev);
		if (r) {
			if (r == -ETIMEDOUT)
				rep_err("no sender connected within %d s", o->timeout);
			else
				rep_err("waiting for a sender: %s", wait_str(r));
			goto out;
		}
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);
	}
	rc.id = ev->id;
	memset(&hello, 0, sizeof(hello));
	if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof(hello))
		memcpy(&hello, ev->param.conn.private_data, sizeof(hello));
	rdma_ack_cm_event(ev);
	/* Only one transfer: stop listening. */
	rdma_destroy_id(rc.listen_id);
	rc.listen_id = NULL;

	memset(&acc, 0, sizeof(acc));
	acc.magic = htobe32(REP_MAGIC);
	acc.version = htobe16(REP_VERSION);
	if (be32toh(hello.magic) != REP_MAGIC || be16toh(hello.version) != REP_VERSION ||
	    (be16toh(hello.flags) & REP_HELLO_TCP)) {
		rep_err("rejected a connection that is not from uiwarp-replicate send");
		acc.status = htobe16(REP_ACCEPT_PROTO);
		rdma_reject(rc.id, &acc, sizeof(acc));
		goto out;
	}
	size = be64toh(hello.size);
	chunk = be32toh(hello.chunk);
	if (chunk < REP_MIN_CHUNK || chunk > REP_MAX_CHUNK)
		chunk = REP_DEFAULT_CHUNK;

	r = rep_dest_open(&dest, o->path, size, o->no_mmap);
	if (r) {
		rep_err("cannot write %s (%llu bytes): %s", o->path, (unsigned long long)size,
			strerror(-r));
		acc.status = htobe16(REP_ACCEPT_CREATE);
		acc.err = htobe32((uint32_t)-r);
		rdma_reject(rc.id, &acc, sizeof(acc));
		goto out;
	}
	if (make_qp(&rc, 2, 2, 8)) {
		rej_err = errno;
		goto reject;
	}
	ctl = aligned_alloc(64, sizeof(*ctl) < 64 ? 64 : sizeof(*ctl));
	if (!ctl) {
		rej_err = ENOMEM;
		goto reject;
	}
	memset(ctl, 0, sizeof(*ctl));
	cmr = ibv_reg_mr(rc.pd, ctl, sizeof(*ctl), IBV_ACCESS_LOCAL_WRITE);
	if (!cmr) {
		rej_err = errno;
		rep_err("ibv_reg_mr (control buffer): %s", strerror(rej_err));
		goto reject;
	}
	if (size > 0) {
		int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

		mr = ibv_reg_mr(rc.pd, dest.map, size, access);
		if (!mr && !dest.anon) {
			int e = errno;

			if (rep_dest_use_anon(&dest) == 0) {
				if (!o->quiet)
					rep_err(
					    "note: cannot register the mapping of %s.part (%s); "
					    "receiving into memory, writing the file at the end",
					    o->path, strerror(e));
				mr = ibv_reg_mr(rc.pd, dest.map, size, access);
			}
		}
		if (!mr) {
			rej_err = errno;
			rep_err("cannot register the mapping of %s.part (%llu bytes): %s", o->path,
				(unsigned long long)size, strerror(rej_err));
			goto reject;
		}
		acc.addr = htobe64((uintptr_t)dest.map);
		acc.rkey = htobe32(mr->rkey);
	}
	acc.chunk = htobe32(chunk);
	r = post_recv(&rc, &ctl->done, sizeof(ctl->done), cmr->lkey);
	if (r) {
		rej_err = r;
		rep_err("ibv_post_recv: %s", strerror(rej_err));
		goto reject;
	}

	memset(&cp, 0, sizeof(cp));
	cp.private_data = &acc;
	cp.private_data_len = sizeof(acc);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(rc.id, &cp)) {
		rep_err("rdma_accept: %s", strerror(errno));
		goto out;
	}
	r = get_cm_event(&rc, o->timeout, &ev);
	if (r || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
		if (r)
			rep_err("waiting for the connection: %s", wait_str(r));
		else
			rep_err("connection failed: %s (status %d)", rdma_event_str(ev->event),
				ev->status);
		if (!r)
			rdma_ack_cm_event(ev);
		goto out;
	}
	rdma_ack_cm_event(ev);
	rc.connected = true;
	fprintf(stderr, "uiwarp-replicate: receiving %llu bytes into %s.part\n",
		(unsigned long long)size, o->path);
	fflush(stderr);

	/* The data arrives as one-sided Writes: nothing to see until the final
	 * Send. Wait as long as the connection lives (a dead sender ends it). */
	t0 = rep_now();
	while (!got_done) {
		r = wait_wc(&rc, wc, 4, 0);
		if (r < 0) {
			rep_err("no final message from the sender: %s", wait_str(r));
			goto bye;
		}
		for (int i = 0; i < r; i++) {
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
				rep_err("connection lost before the sender's final message "
					"(receive flushed)");
				goto bye;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				rep_err("%s failed: %s (vendor error 0x%x)",
					wc[i].wr_id == WR_RECV ? "receive" : "send",
					ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
				goto bye;
			}
			if (wc[i].wr_id == WR_RECV) {
				got_done = true;
				done_len = wc[i].byte_len;
			}
		}
	}
	st.seconds = rep_now() - t0;

	/* No more Writes may land while we verify. */
	if (mr) {
		ibv_dereg_mr(mr);
		mr = NULL;
	}
	memset(&ctl->result, 0, sizeof(ctl->result));
	ctl->result.magic = htobe32(REP_MAGIC);
	ctl->result.version = htobe16(REP_VERSION);
	if (be32toh(ctl->done.magic) != REP_MAGIC || done_len < sizeof(ctl->done)) {
		rep_err("bad final message from the sender");
		status = REP_RESULT_PROTO;
		err = 0;
		crc = 0;
		rep_dest_abort(&dest);
	} else {
		tv = rep_now();
		status = rep_dest_finish(&dest, be64toh(ctl->done.length), be32toh(ctl->done.crc),
					 &crc, &err);
		ctl->result.verify_us = htobe64((uint64_t)((rep_now() - tv) * 1e6));
	}
	ctl->result.status = htobe16((uint16_t)status);
	ctl->result.err = htobe32((uint32_t)err);
	ctl->result.crc = htobe32(crc);
	if (status != REP_RESULT_OK)
		rep_err("%s: %s%s%s (length %llu, expected %llu; crc32c 0x%08x, expected 0x%08x); "
			"removed %s.part",
			o->path, rep_result_str(status), err ? ": " : "", err ? strerror(err) : "",
			(unsigned long long)be64toh(ctl->done.length), (unsigned long long)size,
			crc, be32toh(ctl->done.crc), o->path);

	/* Tell the sender; best effort, our verdict stands either way. */
	if (post_send(&rc, WR_SEND_RESULT, &ctl->result, sizeof(ctl->result), cmr->lkey) == 0) {
		r = wait_wc(&rc, wc, 4, o->timeout ? o->timeout : REP_DEFAULT_TIMEOUT);
		if (r < 0 || wc[0].status != IBV_WC_SUCCESS)
			rep_err("warning: could not send the result to the sender");
	}
	/* The sender disconnects once it has the answer; wait for it so our
	 * Send is not lost to a reset. */
	{
		double deadline = rep_now() + BYE_SEC;

		while (!rc.disconnected && rep_now() < deadline) {
			if (get_cm_event(&rc, BYE_SEC, &ev))
				break;
			note_cm_event(&rc, ev);
		}
	}
	if (status == REP_RESULT_OK) {
		st.bytes = size;
		st.crc = crc;
		rep_print_result(o, &st);
		ret = 0;
	}
bye:
	say_bye(&rc);
	goto out;
reject:
	acc.status = htobe16(REP_ACCEPT_REGISTER);
	acc.err = htobe32((uint32_t)rej_err);
	rdma_reject(rc.id, &acc, sizeof(acc));
out:
	if (rc.qp) {
		rdma_destroy_qp(rc.id);
		rc.qp = false;
	}
	if (mr)
		ibv_dereg_mr(mr);
	if (cmr)
		ibv_dereg_mr(cmr);
	rconn_destroy(&rc);
	free(ctl);
	rep_dest_abort(&dest);
	return ret;
}
