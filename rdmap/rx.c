/* The receive side of a QP (RFC 5040 §5, §7; RFC 5041 §7): a state machine
 * that reads segments, validates them, places their payload straight into
 * the target (tagged: the STag's MR; untagged: the posted receive or, for a
 * control message, a buffer of the QP) and completes messages. It runs in
 * whoever holds the QP's progress lock and stops whenever the stream has no
 * more bytes (progress.c calls it again when there are). It never writes
 * to the stream: Read and Atomic Responses and Terminates are queued for
 * the send side (tx.c); every protocol error goes to uiw_terminate().
 *
 * One row per RDMAP opcode (RFC 5040 §4.3, RFC 7306 §4.1) says which
 * buffer model and queue it uses and how it is begun (validated, its
 * target chosen) and finished (completed, once placed and CRC-checked).
 */
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "rdmap/internal.h"
#include "util/guard.h"

#define TERM(l, e, c) ((struct uiw_term){.layer = (l), .etype = (e), .ecode = (c)})

/* How long a Read / Atomic Request that finds IRD used up only by
 * responses still going out waits for them (see ird_full). */
#define IRD_INFLIGHT_WAIT_NS (200ull * 1000 * 1000)

/* While a Send that finds no receive WR waits for one (UIWARP_RQ_WAIT_MS),
 * the receive side looks again this often (an SRQ's post does not know the
 * QP; a post to the QP's own RQ runs progress at once). */
#define RQ_WAIT_POLL_NS (1000ull * 1000)

/* A row's begin and finish: 0, or -EPROTO with *t filled (Terminate);
 * either may also return -EAGAIN (call again later: the stream is left
 * unread meanwhile), finish RX_STOPPED. */
#define RX_STOPPED 1
typedef int (*rx_fn)(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t);

struct rx_op {
	const char *name;
	bool tagged;
	uint8_t qn;	 /* untagged: its queue */
	bool rfc7306;	 /* only on a connection that negotiated RFC 7306 */
	uint8_t body;	 /* a single-segment control message of this many bytes */
	bool crc_ignore; /* a Terminate: its CRC does not matter any more */
	rx_fn begin, finish;
};

static struct uiw_term term_seg(struct uiw_term t, const struct ddp_rx_seg *s)
{
	t.has_seg = true;
	t.seg = *s;
	return t;
}

static int fail(struct uiw_term *out, struct uiw_term t, const struct ddp_rx_seg *s)
{
	*out = term_seg(t, s);
	return -EPROTO;
}

static void place_none(struct uiw_qp *qp, uint32_t len)
{
	ddp_place_init(&qp->rx_place, NULL, 0, len);
}

static void place_one(struct uiw_qp *qp, void *p, uint32_t len)
{
	struct iovec v = {.iov_base = p, .iov_len = len};
	ddp_place_init(&qp->rx_place, &v, 1, len);
}

/* The MR of a tagged segment's STag, cached across segments. */
static struct uiw_mr_int *rx_mr(struct uiw_qp *qp, uint32_t stag)
{
	struct uiw_mr_int *mr = qp->rx_mr;
	if (!mr || mr->pub.stag != stag || !atomic_load(&mr->valid)) {
		uiw_mr_put(mr);
		mr = qp->rx_mr = uiw_mr_get(stag);
	}
	return mr;
}

/* Tagged placement check (RFC 5041 §7.2, RFC 5040 §7.3): on success *ptr
 * is where the payload goes. */
static int tagged_sink(struct uiw_qp *qp, const struct ddp_rx_seg *s, unsigned access, void **ptr,
		       struct uiw_term *t)
{
	enum ddp_stag_result r =
	    uiw_stag_check(rx_mr(qp, s->stag), qp->pd, s->to, s->payload_len, access, ptr);
	if (r == DDP_STAG_OK)
		return 0;
	struct ddp_err e = ddp_tagged_err(r);
	return fail(t, TERM(e.layer, e.etype, e.ecode), s);
}

/* See rdmap/internal.h. */
void uiw_rx_wait_tx_window(struct uiw_qp *qp)
{
	for (long i = 0; i < 100000000 && atomic_load(&qp->tx_window); i++) {
		if (i > 64)
			sched_yield();
	}
}

/* ------------------------------------------------------------ RDMA Write */

static int write_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	if (s->payload_len == 0) {
		/* places nothing: no STag check (the RTR carries STag 1) */
		place_none(qp, 0);
		return 0;
	}
	void *p;
	int r = tagged_sink(qp, s, UIW_ACCESS_REMOTE_WRITE, &p, t);
	if (r)
		return r;
	place_one(qp, p, s->payload_len);
	return 0;
}

static int write_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	(void)t;
	qp->rx_write_len += s->payload_len;
	if (s->last) {
		/* the length a following Immediate Data reports (RFC 7306) */
		qp->rx_last_write_len = qp->rx_write_len;
		qp->rx_write_len = 0;
		uiw_rx_msg_done(qp, true);
	}
	return 0;
}

/* See rdmap/internal.h. rx side. */
void uiw_rx_msg_done(struct uiw_qp *qp, bool write)
{
	if (write) {
		unsigned sc = atomic_load_explicit(&qp->pp_score, memory_order_relaxed);
		unsigned pushes = atomic_load_explicit(&qp->pp_pushes, memory_order_relaxed);
		bool one = pushes - qp->pp_pushes_seen == 1;
		qp->pp_pushes_seen = pushes;
		/* the clock only for a Write that may be an answer: a Write
		 * target that sends nothing reads none per message */
		uint64_t gap =
		    one ? uiw_now_ns() - atomic_load_explicit(&qp->pp_push_ns, memory_order_relaxed)
			: UIW_PP_NS;
		if (gap < UIW_PP_NS) {
			atomic_store_explicit(&qp->pp_gap_ns, gap, memory_order_relaxed);
			if (sc < 8)
				atomic_store_explicit(&qp->pp_score, sc + 1, memory_order_relaxed);
			if (sc + 1 == UIW_PP_MIN)
				uiw_cq_note_pingpong(qp->scq);
		} else if (sc) {
			atomic_store_explicit(&qp->pp_score, 0, memory_order_relaxed);
		}
	}
	if (atomic_load_explicit(&qp->pp_last_write, memory_order_relaxed) != write)
		atomic_store_explicit(&qp->pp_last_write, write, memory_order_relaxed);
	/* one writer (the rx side): a store, not a locked add per message */
	atomic_store_explicit(&qp->rx_msgs,
			      atomic_load_explicit(&qp->rx_msgs, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* ---------------------------------------------------- RDMA Read Response */

static int read_resp_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	pthread_mutex_lock(&qp->lock);
	bool have = qp->orq_head != qp->orq_tail;
	struct orq_entry o = have ? qp->orq[qp->orq_head % qp->orq_size] : (struct orq_entry){0};
	pthread_mutex_unlock(&qp->lock);
	/* RFC 5040 §7.2: a Read Response with no outstanding Read is an
	 * unexpected opcode */
	if (!have || o.atomic)
		return fail(
		    t, TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP),
		    s);
	if (s->payload_len == 0) {
		place_none(qp, 0);
		return 0;
	}
	/* the STag first (RFC 5041 §7.2: invalid STag), then that it is the
	 * sink of the outstanding Read and within what it asked */
	void *p;
	int r = tagged_sink(qp, s, UIW_ACCESS_ANY, &p, t);
	if (r)
		return r;
	if (s->stag != o.sink_stag)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_INVALID_STAG), s);
	if (s->to != o.sink_to + o.got || s->payload_len > o.size - o.got)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_BASE_BOUNDS), s);
	place_one(qp, p, s->payload_len);
	return 0;
}

static int read_resp_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	(void)t;
	/* no wait for tx_window: the Read's completion is on the send queue,
	 * reaped in order behind every Send and Write before it, also those
	 * of a batch being pushed now */
	pthread_mutex_lock(&qp->lock);
	if (qp->orq_head != qp->orq_tail) {
		struct orq_entry *e = &qp->orq[qp->orq_head % qp->orq_size];
		e->got += s->payload_len;
		if (s->last) {
			if (e->sq_idx != UINT32_MAX) {
				struct sq_wqe *w = &qp->sq[e->sq_idx & (qp->sq_size - 1)];
				if (e->sq_idx - qp->sq_head < qp->sq_next - qp->sq_head &&
				    w->st == WQE_SENT)
					w->st = WQE_DONE;
			}
			qp->orq_head++;
			uiw_sq_reap(qp);
			/* the SQ may have stalled on ORD or a fence */
			atomic_fetch_or(&qp->pending, PROG_TX);
		}
	}
	pthread_mutex_unlock(&qp->lock);
	if (s->last)
		uiw_rx_msg_done(qp, false);
	return 0;
}

/* ------------------------------------------------------------------ Send */

/* A Send found no receive WR (RFC 5041 §7.2 makes that an error): before
 * the Terminate it waits UIWARP_RQ_WAIT_MS for the application to post one
 * (an application that posts its receives just after the message that
 * makes the peer send: libiscsi's full-feature buffers). Meanwhile the
 * stream is not read, as a slow receiver's. True while it waits (a
 * deadline set to look again), false once the wait is over. */
static bool rq_wait(struct uiw_qp *qp)
{
	int ms = uiw_config_get()->rq_wait_ms;
	if (ms <= 0)
		return false;
	uint64_t now = uiw_now_ns();
	if (!qp->rx_rq_wait_end) {
		qp->rx_rq_wait_end = now + (uint64_t)ms * 1000000u;
		qp->stats.rq_waits++;
	}
	if (now >= qp->rx_rq_wait_end)
		return false;
	atomic_store(&qp->rx_rq_waiting, true);
	uint64_t next = now + RQ_WAIT_POLL_NS;
	uiw_engine_deadline(qp, next < qp->rx_rq_wait_end ? next : qp->rx_rq_wait_end);
	return true;
}

static int send_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	struct ddp_queue *q = &qp->rxq[DDP_QN_SEND];
	/* RFC 5041 §7.3: MSN must be the expected one, MO the bytes so far */
	if (ddp_check_msn(q, s))
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE),
			    s);
	if (qp->rx_expect_send_rtr) {
		qp->rx_expect_send_rtr = false;
		if (s->payload_len == 0 && s->mo == 0 && s->last) {
			/* RFC 6581 §4: the zero-length Send RTR; not delivered */
			qp->rx_op = NULL;
			place_none(qp, 0);
			return 0;
		}
	}
	pthread_mutex_lock(&qp->lock);
	bool have = qp->rx_send_active;
	bool err = qp->state == UIW_QPS_ERR;
	if (!have && !err)
		have = uiw_rq_take(qp); /* the first segment takes a receive WQE */
	struct rq_wqe *r = &qp->rx_cur;
	pthread_mutex_unlock(&qp->lock);
	if (!have && !err && rq_wait(qp))
		return -EAGAIN;
	if (qp->rx_rq_wait_end) { /* the wait is over (not on every Send) */
		qp->rx_rq_wait_end = 0;
		atomic_store(&qp->rx_rq_waiting, false);
	}
	if (!have)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_NO_BUFFER),
			    s);
	int ec = ddp_check_mo(q, s, r->len);
	if (ec)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, (uint8_t)ec), s);
	/* the part of the receive buffer at [mo, mo + len) */
	struct iovec v[UIW_MAX_SGE];
	int nv = 0;
	uint64_t skip = q->mo, left = s->payload_len;
	for (int i = 0; i < r->niov && left; i++) {
		if (skip >= r->iov[i].iov_len) {
			skip -= r->iov[i].iov_len;
			continue;
		}
		size_t k = r->iov[i].iov_len - skip;
		if (k > left)
			k = left;
		v[nv].iov_base = (uint8_t *)r->iov[i].iov_base + skip;
		v[nv++].iov_len = k;
		left -= k;
		skip = 0;
	}
	ddp_place_init(&qp->rx_place, v, nv, s->payload_len);
	return 0;
}

/* Remote invalidation by Send with Invalidate (RFC 5040 §4.3, §6.8): the
 * STag must name a valid MR or window of the QP's PD; it stops working for
 * remote and local access (an MR until deregistered or, a window, until
 * bound again). True on success. */
static bool invalidate_stag(struct uiw_qp *qp, uint32_t stag)
{
	/* a window invalidated so is unbound: it releases its MR (mem.c) */
	bool ok = uiw_mem_remote_inv(qp->pd, stag);
	if (ok && qp->rx_mr && qp->rx_mr->pub.stag == stag) {
		uiw_mr_put(qp->rx_mr);
		qp->rx_mr = NULL;
	}
	return ok;
}

static int send_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	struct ddp_queue *q = &qp->rxq[DDP_QN_SEND];
	q->mo += s->payload_len;
	if (!s->last)
		return 0;
	uint8_t op = s->ulp_ctrl & RDMAP_OPCODE_MASK;
	uint64_t len = q->mo;
	q->msn++;
	q->mo = 0;
	bool inv = op == RDMAP_SEND_INV || op == RDMAP_SEND_SE_INV;
	bool se = op == RDMAP_SEND_SE || op == RDMAP_SEND_SE_INV;
	if (inv && !invalidate_stag(qp, s->ulp_rsvd))
		/* RFC 5040 §4.8: the STag cannot be invalidated (as siw) */
		return fail(
		    t,
		    TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_PROT, RDMAP_ECODE_CANNOT_INVALIDATE),
		    s);
	uiw_rx_wait_tx_window(qp);
	struct uiw_wc wc = {.status = UIW_WC_SUCCESS,
			    .opcode = UIW_WC_RECV,
			    .byte_len = (uint32_t)len,
			    .flags = inv ? UIW_WC_WITH_INV : 0,
			    .invalidated_stag = inv ? s->ulp_rsvd : 0};
	pthread_mutex_lock(&qp->lock);
	if (qp->rx_send_active)
		uiw_rq_complete(qp, &wc, se);
	pthread_mutex_unlock(&qp->lock);
	uiw_rx_msg_done(qp, false);
	return 0;
}

/* The zero-length Send RTR (no row: send_begin clears qp->rx_op). */
static int send_rtr_finish(struct uiw_qp *qp)
{
	qp->rxq[DDP_QN_SEND].msn++;
	return 0;
}

/* -------------------------------------------- single-segment control bodies */

/* Begins a control message of the row's body length on queue qn: the
 * expected MSN (RFC 5041 §7.3), one segment of exactly that many bytes at
 * MO 0 with L set; the body goes into qp->rx_body with its CRC checked
 * before it is used. */
static int body_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, uint32_t qn, uint32_t len,
		      struct uiw_term *t)
{
	if (ddp_check_msn(&qp->rxq[qn], s))
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE),
			    s);
	if (ddp_check_single(s, len))
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_MO),
			    s);
	place_one(qp, qp->rx_body, len);
	return 0;
}

/* RFC 5040 §6.1 / §5.2.2, RFC 6581 §4.1, RFC 7306 §5.2.2: is there no room for one more
 * inbound Read or Atomic Request? A request counts against IRD from its
 * receipt until its response has been handed to the stream in full. The
 * peer's ORD count drops when it has received the last byte of a response,
 * which can be before our push of it has returned: when only responses
 * being sent fill the IRD, the request waits (bounded, IRD_INFLIGHT_WAIT_NS)
 * for the send side, which runs in between (-EAGAIN). A peer that sends
 * more requests while it does not read the responses gets the error once
 * the bound passes. Returns 0 (room), 1 (full: an error) or -EAGAIN. */
static int ird_full(struct uiw_qp *qp, uint32_t limit)
{
	pthread_mutex_lock(&qp->lock);
	uint32_t used = qp->irq_tail - qp->irq_head;
	bool inflight = qp->irq_head != qp->irq_next;
	bool err = qp->state == UIW_QPS_ERR;
	pthread_mutex_unlock(&qp->lock);
	if (used < limit)
		return 0;
	if (!inflight || err)
		return 1;
	uint64_t now = uiw_now_ns();
	if (!qp->rx_stall_end) {
		qp->rx_stall_end = now + IRD_INFLIGHT_WAIT_NS;
		uiw_engine_deadline(qp, qp->rx_stall_end);
	}
	if (now >= qp->rx_stall_end)
		return 1;
	atomic_fetch_or(&qp->pending, PROG_TX);
	return -EAGAIN;
}

/* Queues a response for the send side. qp->lock held. */
static void irq_push(struct uiw_qp *qp, const struct irq_entry *e)
{
	qp->irq[qp->irq_tail++ % qp->irq_size] = *e;
	atomic_fetch_or(&qp->pending, PROG_TX);
}

/* --------------------------------------------------- RDMA Read Request */

static int read_req_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	return body_begin(qp, s, DDP_QN_READ_REQ, sizeof(struct rdmap_read_req), t);
}

static int read_req_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	struct rdmap_read_req rr;
	memcpy(&rr, qp->rx_body, sizeof(rr));
	struct irq_entry e = {.sink_stag = be32toh(rr.sink_stag),
			      .sink_to = be64toh(rr.sink_to),
			      .size = be32toh(rr.read_size),
			      .req_seg = *s,
			      .rreq = rr};
	*t = (struct uiw_term){.has_seg = true, .seg = *s, .has_rreq = true, .rreq = rr};
	/* a zero-length Read (the Read RTR) is answered even with IRD 0 */
	uint32_t limit = qp->ird ? qp->ird : (e.size == 0 ? 1 : 0);
	int full = ird_full(qp, limit);
	if (full < 0)
		return full;
	qp->rx_stall_end = 0;
	qp->rxq[DDP_QN_READ_REQ].msn++;
	if (full) {
		/* more outstanding Reads than the negotiated IRD: QN 1 has IRD
		 * buffers (RFC 5040 §5.2.2), so this Request's MSN lies past
		 * the last one, RFC 5041 §7.1 check 5 (docs/conformance.md) */
		t->layer = RDMAP_LAYER_DDP;
		t->etype = DDP_ETYPE_UNTAGGED;
		t->ecode = DDP_UNTAGGED_MSN_RANGE;
		return -EPROTO;
	}
	if (e.size) {
		/* RFC 5040 §7.3: the source STag, access, wrap, base and bounds */
		uint64_t src_to = be64toh(rr.src_to);
		struct uiw_mr_int *mr = uiw_mr_get(be32toh(rr.src_stag));
		enum ddp_stag_result r =
		    uiw_stag_check(mr, qp->pd, src_to, e.size, UIW_ACCESS_REMOTE_READ, &e.src_ptr);
		if (r != DDP_STAG_OK) {
			uiw_mr_put(mr);
			static const uint8_t code[] = {
			    [DDP_STAG_INVALID] = RDMAP_ECODE_INVALID_STAG,
			    [DDP_STAG_NOT_ASSOC] = RDMAP_ECODE_STAG_NOT_ASSOC,
			    [DDP_STAG_ACCESS] = RDMAP_ECODE_ACCESS,
			    [DDP_STAG_TO_WRAP] = RDMAP_ECODE_TO_WRAP,
			    [DDP_STAG_BOUNDS] = RDMAP_ECODE_BASE_BOUNDS,
			};
			t->layer = RDMAP_LAYER_RDMAP;
			t->etype = RDMAP_ETYPE_REMOTE_PROT;
			t->ecode = code[r];
			return -EPROTO;
		}
		e.src = mr;
	}
	pthread_mutex_lock(&qp->lock);
	if (qp->state == UIW_QPS_ERR) {
		pthread_mutex_unlock(&qp->lock);
		uiw_mr_put(e.src);
		return RX_STOPPED;
	}
	irq_push(qp, &e);
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

/* ------------------------------------------------------ RFC 7306 messages */

/* RFC 7306 §5.2: Immediate Data, 8 bytes on QN 0; consumes a receive WQE
 * and completes it as RECV_RDMA_WITH_IMM with the preceding Write's length. */
static int imm_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	if (qp->rx_send_active)
		/* two messages of QN 0 may not interleave (RFC 5041 §5.2) */
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_MO),
			    s);
	return body_begin(qp, s, DDP_QN_SEND, RDMAP_IMMEDIATE_LEN, t);
}

static int imm_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	qp->rxq[DDP_QN_SEND].msn++;
	uint8_t op = s->ulp_ctrl & RDMAP_OPCODE_MASK;
	uiw_rx_wait_tx_window(qp);
	pthread_mutex_lock(&qp->lock);
	bool have = qp->state != UIW_QPS_ERR && uiw_rq_take(qp);
	if (have) {
		struct uiw_wc wc = {.status = UIW_WC_SUCCESS,
				    .opcode = UIW_WC_RECV_RDMA_WITH_IMM,
				    .byte_len = (uint32_t)qp->rx_last_write_len,
				    .flags = UIW_WC_WITH_IMM};
		memcpy(&wc.imm_data, qp->rx_body, 4);
		uiw_rq_complete(qp, &wc, op == RDMAP_IMMEDIATE_SE);
	}
	pthread_mutex_unlock(&qp->lock);
	if (!have)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_NO_BUFFER),
			    s);
	return 0;
}

/* One lock for every remote atomic in the process: atomic with respect to
 * other remote atomics (IBV_ATOMIC_HCA semantics). */
static pthread_mutex_t atomic_lock = PTHREAD_MUTEX_INITIALIZER;

/* RFC 7306 masked add: a set bit in mask stops the carry out of that bit. */
static uint64_t masked_add(uint64_t a, uint64_t b, uint64_t mask)
{
	if (!mask)
		return a + b;
	uint64_t r = 0, carry = 0;
	for (int i = 0; i < 64; i++) {
		uint64_t x = (a >> i) & 1, y = (b >> i) & 1;
		uint64_t sum = x ^ y ^ carry;
		carry = (x & y) | (x & carry) | (y & carry);
		if ((mask >> i) & 1)
			carry = 0;
		r |= sum << i;
	}
	return r;
}

/* One Atomic on the target (atomic_lock held), run under the fault guard:
 * the target is registered memory the application may have unmapped. */
struct atomic_op {
	uint64_t *p;
	uint32_t aop;
	uint64_t data, dmask, cmp, cmask;
	uint64_t orig; /* out */
};

static void atomic_run(void *arg)
{
	struct atomic_op *a = arg;
	uint64_t orig = __atomic_load_n(a->p, __ATOMIC_SEQ_CST);
	uint64_t val = orig;
	if (a->aop == RDMAP_AOP_FETCH_ADD)
		val = masked_add(orig, a->data, a->dmask);
	else if (((orig ^ a->cmp) & a->cmask) == 0)
		val = (orig & ~a->dmask) | (a->data & a->dmask);
	__atomic_store_n(a->p, val, __ATOMIC_SEQ_CST);
	a->orig = orig;
}

static int atomic_req_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	return body_begin(qp, s, RDMAP_QN_ATOMIC_REQ, sizeof(struct rdmap_atomic_req), t);
}

/* RFC 7306 §5.2.1 / §5.2.2: executes an Atomic Request (QN 1) and queues
 * its Atomic Response; checks like an RDMA Read (IRD, STag, access,
 * bounds) plus 8-byte alignment of the target (§8.2). */
static int atomic_req_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	struct rdmap_atomic_req ar;
	memcpy(&ar, qp->rx_body, sizeof(ar));
	int full = ird_full(qp, qp->ird);
	if (full < 0)
		return full;
	qp->rx_stall_end = 0;
	qp->rxq[RDMAP_QN_ATOMIC_REQ].msn++;
	if (full)
		return fail(t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE),
			    s);
	uint32_t aop = be32toh(ar.aopcode) & 0xf;
	uint64_t to = be64toh(ar.to);
	struct uiw_mr_int *mr = uiw_mr_get(be32toh(ar.stag));
	struct uiw_term e = TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_PROT, 0);
	void *ptr = NULL;
	enum ddp_stag_result r = uiw_stag_check(mr, qp->pd, to, 8, UIW_ACCESS_REMOTE_ATOMIC, &ptr);
	bool ok = false;
	if (aop != RDMAP_AOP_FETCH_ADD && aop != RDMAP_AOP_CMP_SWAP) {
		e.etype = RDMAP_ETYPE_REMOTE_OP;
		e.ecode = RDMAP_ECODE_UNEXPECTED_OP;
	} else if (r == DDP_STAG_INVALID) {
		e.ecode = RDMAP_ECODE_INVALID_STAG;
	} else if (r == DDP_STAG_NOT_ASSOC) {
		e.ecode = RDMAP_ECODE_STAG_NOT_ASSOC;
	} else if (r == DDP_STAG_ACCESS) {
		e.ecode = RDMAP_ECODE_ACCESS;
	} else if (r != DDP_STAG_OK) {
		e.ecode = RDMAP_ECODE_BASE_BOUNDS;
	} else if (to & 7) {
		/* RFC 7306 §8.2: a target not 64-bit aligned is an RDMAP
		 * Remote Operation Error, "Catastrophic error, localized to
		 * RDMAP Stream" (checked after the STag, access and bounds) */
		e.etype = RDMAP_ETYPE_REMOTE_OP;
		e.ecode = RDMAP_ECODE_CATASTROPHIC_STREAM;
	} else {
		ok = true;
	}
	if (!ok) {
		uiw_mr_put(mr);
		return fail(t, e, s);
	}
	struct atomic_op a = {.p = ptr,
			      .aop = aop,
			      .data = be64toh(ar.add_swap),
			      .dmask = be64toh(ar.add_swap_mask),
			      .cmp = be64toh(ar.compare),
			      .cmask = be64toh(ar.compare_mask)};
	pthread_mutex_lock(&atomic_lock);
	int fault = uiw_guard_run(atomic_run, &a, ptr, 8);
	pthread_mutex_unlock(&atomic_lock);
	uiw_mr_put(mr);
	if (fault) {
		/* the target page is gone (or read-only): as for a target
		 * outside the STag's region or without the right, RDMAP remote
		 * protection 0/1/0x01 or 0/1/0x02 (place_fault); nothing changed */
		e.ecode = fault == -EACCES ? RDMAP_ECODE_ACCESS : RDMAP_ECODE_BASE_BOUNDS;
		return fail(t, e, s);
	}
	uint64_t orig = a.orig;

	struct irq_entry ie = {.kind = IRQ_ATOMIC};
	ie.aresp.req_id = ar.req_id;
	ie.aresp.orig = htobe64(orig);
	pthread_mutex_lock(&qp->lock);
	if (qp->state != UIW_QPS_ERR)
		irq_push(qp, &ie);
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

static int atomic_resp_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	return body_begin(qp, s, RDMAP_QN_ATOMIC_RESP, sizeof(struct rdmap_atomic_resp), t);
}

/* RFC 7306 §5.3: an Atomic Response (QN 3) completes the oldest outstanding
 * request, which must be the Atomic with that Request Identifier. */
static int atomic_resp_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	struct rdmap_atomic_resp ar;
	memcpy(&ar, qp->rx_body, sizeof(ar));
	qp->rxq[RDMAP_QN_ATOMIC_RESP].msn++;
	uiw_rx_wait_tx_window(qp);
	pthread_mutex_lock(&qp->lock);
	bool ok = qp->orq_head != qp->orq_tail;
	struct orq_entry *e = ok ? &qp->orq[qp->orq_head % qp->orq_size] : NULL;
	ok = ok && e->atomic && e->req_id == be32toh(ar.req_id);
	int fault = 0;
	if (ok) {
		uint64_t orig = be64toh(ar.orig);
		/* our result buffer: registered memory that may be gone */
		fault = uiw_guard_memcpy(e->result, &orig, 8);
		struct sq_wqe *w = &qp->sq[e->sq_idx & (qp->sq_size - 1)];
		if (e->sq_idx - qp->sq_head < qp->sq_next - qp->sq_head && w->st == WQE_SENT) {
			w->st = WQE_DONE;
			w->len = 8;
			if (fault)
				w->status = UIW_WC_LOC_PROT_ERR;
		}
		if (!fault) {
			qp->orq_head++;
			uiw_sq_reap(qp);
			atomic_fetch_or(&qp->pending, PROG_TX);
		}
	}
	pthread_mutex_unlock(&qp->lock);
	if (!ok)
		return fail(
		    t, TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP),
		    s);
	if (fault)
		/* a local error, as for a Read Response's sink (place_fault) */
		return fail(
		    t, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_CATASTROPHIC, DDP_CATASTROPHIC_LOCAL), s);
	return 0;
}

/* ------------------------------------------------------------- Terminate */

static int terminate_begin(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	(void)t;
	/* keep what fits, read and drop the rest */
	uint32_t n = s->payload_len < sizeof(qp->rx_body) ? s->payload_len : sizeof(qp->rx_body);
	struct iovec v = {.iov_base = qp->rx_body, .iov_len = n};
	ddp_place_init(&qp->rx_place, &v, 1, s->payload_len);
	return 0;
}

/* A received Terminate (buf[0..n)) that reports a remote protection error
 * (RFC 5040 §4.8: RDMAP 0/1/x, or DDP 1/1/x) for one of our Read or
 * Atomic Requests (its D flag echoes the untagged Request's DDP header):
 * the responder takes Requests in order and has answered the ones before
 * it, so it is the oldest outstanding; that WR completes with
 * REM_ACCESS_ERR (as an InfiniBand requester's on a remote access error
 * NAK, IBV_WC_REM_ACCESS_ERR), the rest flush. qp->lock held. */
static void term_fail_request(struct uiw_qp *qp, const uint8_t *buf, uint32_t n)
{
	if (n < 4)
		return;
	uint8_t layer = buf[0] >> 4, etype = buf[0] & 0xf;
	bool m = buf[2] & 0x80, d = buf[2] & 0x40;
	uint32_t off = 4 + (m ? 2 : 0);
	if (!d || n < off + 2 || etype != 1 ||
	    (layer != RDMAP_LAYER_RDMAP && layer != RDMAP_LAYER_DDP))
		return;
	uint8_t op = buf[off + 1] & RDMAP_OPCODE_MASK;
	if ((buf[off] & DDP_FLAG_TAGGED) || (op != RDMAP_RDMA_READ_REQ && op != RDMAP_ATOMIC_REQ) ||
	    qp->orq_head == qp->orq_tail)
		return;
	const struct orq_entry *e = &qp->orq[qp->orq_head % qp->orq_size];
	struct sq_wqe *w = &qp->sq[e->sq_idx & (qp->sq_size - 1)];
	if (e->sq_idx != UINT32_MAX && e->sq_idx - qp->sq_head < qp->sq_next - qp->sq_head &&
	    w->st == WQE_SENT) {
		w->status = UIW_WC_REM_ACCESS_ERR;
		w->st = WQE_DONE;
	}
}

/* A Terminate from the peer (RFC 5040 §6.3): the QP goes to ERR, what was
 * outstanding flushes (a Read or Atomic it names as a protection error:
 * term_fail_request), our side of the stream closes. */
static int terminate_finish(struct uiw_qp *qp, const struct ddp_rx_seg *s, struct uiw_term *t)
{
	(void)s;
	(void)t;
	const uint8_t *buf = qp->rx_body;
	uint32_t n = qp->rx_place.done < qp->rx_place.room ? qp->rx_place.done : qp->rx_place.room;
	/* a batch the send side has just handed to the stream is done (its
	 * bytes are TCP's, and this Terminate may answer them): its
	 * completions go first, the flush takes the rest (test_unmapped's
	 * Write completed with a flush error 3 runs in 100 without this) */
	uiw_rx_wait_tx_window(qp);
	pthread_mutex_lock(&qp->lock);
	qp->stats.terminates_recv++;
	if (!qp->terminated && n >= 4)
		/* parsed leniently: siw swaps the layer and type nibbles of
		 * MPA errors; keep what was sent */
		qp->term = (struct uiw_term_info){.valid = true,
						  .sent = false,
						  .layer = buf[0] >> 4,
						  .etype = buf[0] & 0xf,
						  .ecode = buf[1]};
	qp->terminated = true;
	uiw_qp_set_close_reason(qp, UIW_CLOSE_TERMINATE);
	if (qp->state != UIW_QPS_ERR) {
		term_fail_request(qp, buf, n);
		uiw_qp_flush_locked(qp);
	}
	pthread_mutex_unlock(&qp->lock);
	/* RFC 5040 §6.3: after a Terminate the stream is closed */
	qp->stream->ops->shutdown_send(qp->stream);
	uiw_qp_event_due(qp, UIW_QP_EV_TERMINATE);
	return RX_STOPPED;
}

/* ------------------------------------------------------------- the table */

static const struct rx_op rx_ops[16] = {
    [RDMAP_RDMA_WRITE] = {"RDMA Write", true, 0, false, 0, false, write_begin, write_finish},
    [RDMAP_RDMA_READ_REQ] = {"RDMA Read Request", false, DDP_QN_READ_REQ, false,
			     sizeof(struct rdmap_read_req), false, read_req_begin, read_req_finish},
    [RDMAP_RDMA_READ_RESP] = {"RDMA Read Response", true, 0, false, 0, false, read_resp_begin,
			      read_resp_finish},
    [RDMAP_SEND] = {"Send", false, DDP_QN_SEND, false, 0, false, send_begin, send_finish},
    [RDMAP_SEND_INV] = {"Send with Invalidate", false, DDP_QN_SEND, false, 0, false, send_begin,
			send_finish},
    [RDMAP_SEND_SE] = {"Send with SE", false, DDP_QN_SEND, false, 0, false, send_begin,
		       send_finish},
    [RDMAP_SEND_SE_INV] = {"Send with SE and Invalidate", false, DDP_QN_SEND, false, 0, false,
			   send_begin, send_finish},
    [RDMAP_TERMINATE] = {"Terminate", false, DDP_QN_TERMINATE, false, 0, true, terminate_begin,
			 terminate_finish},
    [RDMAP_IMMEDIATE] = {"Immediate Data", false, DDP_QN_SEND, true, RDMAP_IMMEDIATE_LEN, false,
			 imm_begin, imm_finish},
    [RDMAP_IMMEDIATE_SE] = {"Immediate Data with SE", false, DDP_QN_SEND, true, RDMAP_IMMEDIATE_LEN,
			    false, imm_begin, imm_finish},
    [RDMAP_ATOMIC_REQ] = {"Atomic Request", false, RDMAP_QN_ATOMIC_REQ, true,
			  sizeof(struct rdmap_atomic_req), false, atomic_req_begin,
			  atomic_req_finish},
    [RDMAP_ATOMIC_RESP] = {"Atomic Response", false, RDMAP_QN_ATOMIC_RESP, true,
			   sizeof(struct rdmap_atomic_resp), false, atomic_resp_begin,
			   atomic_resp_finish},
};

/* The target of a segment's payload is gone: ddp_place_run said -EFAULT (a
 * page not mapped) or -EACCES (not writable), the application unmapped or
 * mprotected memory it still had registered (util/guard.h; an RNIC would
 * have pinned the pages, docs/design.md). Fills *t with the Terminate:
 *  - an RDMA Write, the peer's access to our MR: the remote protection
 *    error of the tagged buffer the STag checks give for bytes the STag
 *    does not reach or may not write (RFC 5041 §7.2 base or bounds
 *    1/1/0x01; RFC 5040 §7.3 access rights 0/1/0x02), as an RNIC with
 *    on-demand paging answers an access to an unmapped range with a remote
 *    access error;
 *  - a Send's receive buffer or a Read Response's sink, our own buffer
 *    (the peer did nothing wrong): DDP local catastrophic error 1/0/0x00,
 *    as Linux siw sends when its copy into the target fails; the WR whose
 *    buffer it was completes with LOC_PROT_ERR (as siw), the rest flush.
 * The segment's header is echoed. */
static void place_fault(struct uiw_qp *qp, const struct ddp_rx_seg *s, int r, struct uiw_term *t)
{
	uint8_t op = s->ulp_ctrl & RDMAP_OPCODE_MASK;
	if (s->tagged && op == RDMAP_RDMA_WRITE) {
		struct ddp_err e = ddp_tagged_err(r == -EACCES ? DDP_STAG_ACCESS : DDP_STAG_BOUNDS);
		*t = term_seg(TERM(e.layer, e.etype, e.ecode), s);
		return;
	}
	*t = term_seg(TERM(RDMAP_LAYER_DDP, DDP_ETYPE_CATASTROPHIC, DDP_CATASTROPHIC_LOCAL), s);
	pthread_mutex_lock(&qp->lock);
	if (op == RDMAP_RDMA_READ_RESP && qp->orq_head != qp->orq_tail) {
		const struct orq_entry *e = &qp->orq[qp->orq_head % qp->orq_size];
		struct sq_wqe *w = &qp->sq[e->sq_idx & (qp->sq_size - 1)];
		if (e->sq_idx != UINT32_MAX &&
		    e->sq_idx - qp->sq_head < qp->sq_next - qp->sq_head && w->st == WQE_SENT) {
			w->status = UIW_WC_LOC_PROT_ERR;
			w->st = WQE_DONE;
		}
	} else if (op != RDMAP_RDMA_READ_RESP && qp->rx_send_active) {
		struct uiw_wc wc = {.status = UIW_WC_LOC_PROT_ERR, .opcode = UIW_WC_RECV};
		uiw_rq_complete(qp, &wc, false);
	}
	pthread_mutex_unlock(&qp->lock);
}

/* RFC 5041 §4 / RFC 5040 §4.2-§4.3 checks common to every segment, in the
 * order the hostile-peer tests pin down: DDP version, RDMAP version, the
 * opcode (known on this connection, in its buffer model), its queue. */
static const struct rx_op *classify(struct uiw_qp *qp, const struct ddp_rx_seg *s,
				    struct uiw_term *t)
{
	int ec = ddp_check_version(s);
	if (ec) {
		*t = term_seg(TERM(RDMAP_LAYER_DDP,
				   s->tagged ? DDP_ETYPE_TAGGED : DDP_ETYPE_UNTAGGED, (uint8_t)ec),
			      s);
		return NULL;
	}
	if ((s->ulp_ctrl >> RDMAP_VERSION_SHIFT) != RDMAP_VERSION) {
		*t = term_seg(
		    TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_BAD_VERSION), s);
		return NULL;
	}
	const struct rx_op *op = &rx_ops[s->ulp_ctrl & RDMAP_OPCODE_MASK];
	if (!op->begin || (op->rfc7306 && !(qp->caps & UIW_CAP_RFC7306)) ||
	    op->tagged != s->tagged) {
		*t = term_seg(
		    TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP), s);
		return NULL;
	}
	if (!s->tagged && s->qn != op->qn) {
		*t =
		    term_seg(TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_QN), s);
		return NULL;
	}
	return op;
}

/* RFC 6581 §4: in peer-to-peer mode the responder's first FPDU must be the
 * RTR the reply chose: a zero-length RDMA Write, a zero-length RDMA Read
 * Request, or a zero-length Send. */
static bool rtr_matches(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	if (qp->neg.initiator || !qp->neg.p2p || !qp->neg.rtr)
		return true;
	uint8_t op = s->ulp_ctrl & RDMAP_OPCODE_MASK;
	switch (qp->neg.rtr) {
	case MPA_RTR_WRITE:
		return s->tagged && op == RDMAP_RDMA_WRITE && s->payload_len == 0;
	case MPA_RTR_READ:
		return !s->tagged && op == RDMAP_RDMA_READ_REQ;
	case MPA_RTR_SEND:
		return !s->tagged && op == RDMAP_SEND && s->payload_len == 0;
	default:
		return true;
	}
}

/* The stream failed while an FPDU was read (r < 0 from mpa/ddp): a bad CRC
 * is answered with a Terminate (RFC 5044 §4.4 / §8); the peer's FIN inside
 * an FPDU with LLP error 0x01 (it can still read it); a reset from the peer
 * or another stream error ends the connection without one (it cannot be
 * delivered). Records the close reason (abortive) unless the QP was already
 * in ERR by a local uiw_qp_modify. */
static void stream_failed(struct uiw_qp *qp, int r)
{
	pthread_mutex_lock(&qp->lock);
	bool local_err = qp->state == UIW_QPS_ERR;
	if (r == -ECONNRESET)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_RESET);
	else if (uiw_dead_peer_err(r))
		uiw_qp_stream_timeout_locked(qp);
	else if (r == -ENODATA && !local_err)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_TRUNCATED);
	else if (r != -EBADMSG)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_LLP_ERROR);
	pthread_mutex_unlock(&qp->lock);
	if (r == -EBADMSG)
		uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_CRC));
	else if (r == -ENODATA && !local_err)
		uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_TCP_LOST));
	else
		qp->rx_state = RX_DONE;
}

/* The first FPDU of the connection arrived: a responder may send now
 * (RFC 5044 §7.1.2: nothing before the initiator's first FPDU, the RTR in
 * peer-to-peer mode), and uiw_accept stops waiting. */
static void first_fpdu(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->rx_seen_first = true;
	qp->tx_gate_open = true;
	pthread_cond_broadcast(&qp->cond);
	pthread_mutex_unlock(&qp->lock);
	atomic_fetch_or(&qp->pending, PROG_TX);
}

/* See rdmap/internal.h. */
void uiw_rx_reset(struct uiw_qp *qp)
{
	qp->rx_state = RX_HDR;
	qp->rx_op = NULL;
	for (int i = 0; i < RDMAP_NUM_QN; i++)
		qp->rxq[i] = (struct ddp_queue){.msn = 1, .mo = 0};
	qp->rx_send_active = false;
	qp->rx_write_len = qp->rx_last_write_len = 0;
	qp->rx_drain_end = qp->rx_stall_end = qp->rx_rq_wait_end = 0;
	atomic_store(&qp->rx_rq_waiting, false);
}

static _Thread_local unsigned tl_reads;

/* See rdmap/internal.h. */
unsigned uiw_rx_thread_reads(void)
{
	return tl_reads;
}

/* Bytes a pass reads between two uiw_engine_poller_busy (~50 us at 5 GB/s) */
#define RX_SEEN_BYTES (256u * 1024)

static int rx_run(struct uiw_qp *qp, size_t budget, uint64_t start);

/* See rdmap/internal.h. */
int uiw_rx_run(struct uiw_qp *qp, size_t budget)
{
	uint64_t start = qp->mpa.rx_bytes;
	int r = rx_run(qp, budget, start);
	if (qp->mpa.rx_bytes != start)
		tl_reads++;
	return r;
}

/* uiw_rx_run's state machine; start: qp->mpa.rx_bytes when the pass began. */
static int rx_run(struct uiw_qp *qp, size_t budget, uint64_t start)
{
	struct ddp_rx_seg *s = &qp->rx_seg;
	uint64_t seen = start;
	struct uiw_term t;
	for (;;) {
		switch (qp->rx_state) {
		case RX_DONE:
			return 0;
		case RX_DRAIN: {
			/* read and drop; done at the peer's end of stream or the
			 * drain time, but not before our Terminate is out (or
			 * given up on: rx_drain_end is set then, progress.c) */
			int r = mpa_rx_drain(&qp->mpa);
			uint64_t end = qp->rx_drain_end;
			if (!end || (r == -EAGAIN && uiw_now_ns() < end))
				return -EAGAIN;
			qp->rx_state = RX_DONE;
			continue;
		}
		case RX_HDR: {
			if (qp->mpa.rx_bytes - start >= budget) {
				atomic_fetch_or(&qp->pending, PROG_RX);
				return -EAGAIN;
			}
			if (qp->mpa.rx_bytes - seen >= RX_SEEN_BYTES) {
				seen = qp->mpa.rx_bytes; /* a long pass: the poller is here */
				uiw_engine_poller_busy(0, false);
			}
			int r = ddp_rx_header(&qp->mpa, s);
			if (r == -EAGAIN)
				return r;
			if (r == 0) {
				/* the peer's FIN at an FPDU boundary */
				pthread_mutex_lock(&qp->lock);
				uiw_qp_set_close_reason(qp, UIW_CLOSE_GRACEFUL);
				pthread_mutex_unlock(&qp->lock);
				qp->rx_state = RX_DONE;
				continue;
			}
			if (r == -EPROTO && qp->mpa.rx_term == MPA_TERM_MARKER) {
				/* RFC 5044 §5: a marker that does not point at the FPDU */
				uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_MARKER));
				continue;
			}
			if (r == -EPROTO) {
				uiw_terminate(qp, &TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED,
							DDP_UNTAGGED_INVALID_MO));
				continue;
			}
			if (r < 0) {
				stream_failed(qp, r);
				continue;
			}
			if (!qp->rx_seen_first) {
				if (!rtr_matches(qp, s)) {
					uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0,
								MPA_TERM_NO_MATCHING_RTR));
					continue;
				}
				first_fpdu(qp);
			}
			const struct rx_op *op = classify(qp, s, &t);
			if (!op) {
				uiw_terminate(qp, &t);
				continue;
			}
			qp->rx_op = op;
			qp->rx_state = RX_BEGIN;
			continue;
		}
		case RX_BEGIN: {
			const struct rx_op *op = qp->rx_op;
			int r = op->begin(qp, s, &t);
			if (r == -EAGAIN)
				return r;
			if (r < 0) {
				uiw_terminate(qp, &t);
				continue;
			}
			qp->rx_state = RX_PLACE;
			continue;
		}
		case RX_PLACE: {
			const struct rx_op *op = qp->rx_op;
			int r = ddp_place_run(&qp->mpa, &qp->rx_place);
			if (r == -EAGAIN)
				return r;
			if (op && op->crc_ignore && (r == -EBADMSG || qp->rx_place.done >= 4))
				r = 0; /* a Terminate: what arrived of it is enough */
			if (r == -EFAULT || r == -EACCES) {
				place_fault(qp, s, r, &t);
				uiw_terminate(qp, &t);
				continue;
			}
			if (r < 0) {
				stream_failed(qp, r);
				continue;
			}
			qp->rx_state = RX_FINISH;
			continue;
		}
		case RX_FINISH: {
			const struct rx_op *op = qp->rx_op;
			int r = op ? op->finish(qp, s, &t) : send_rtr_finish(qp);
			if (r == -EAGAIN)
				return r;
			if (r < 0) {
				uiw_terminate(qp, &t);
				continue;
			}
			qp->rx_state = r == RX_STOPPED ? RX_DONE : RX_HDR;
			continue;
		}
		}
	}
}
