/* The send side of a QP: turns queued WRs, the responses to inbound Read
 * and Atomic Requests, and a Terminate into DDP messages (RFC 5040
 * §4.3-§4.8) cut into one MPA batch after another, handed to the stream
 * without blocking (mpa_tx_push) as many FPDUs per syscall as the batch
 * holds. Runs in whoever holds the QP's progress lock (progress.c).
 *
 * A message is cut into segments until the batch is full; the next batch
 * continues it. Sends and Writes are done when the batch holding their last
 * segment is in the stream (as in siw, "work completion is local delivery
 * to TCP"); a Read or an Atomic when its response has arrived (rx.c). A
 * batch's completions are pushed right after the stream took it, before the
 * same thread reads anything from the stream again, so the completion of a
 * Send or Write is in its CQ no later than that of anything the peer sent
 * in answer to it (as on an RNIC).
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap/internal.h"

static inline uint8_t rdmap_ctrl(enum rdmap_opcode op)
{
	return (uint8_t)(RDMAP_VERSION << RDMAP_VERSION_SHIFT | op);
}

static bool needs_orq(enum uiw_wr_opcode op)
{
	return op == UIW_WR_RDMA_READ || op == UIW_WR_ATOMIC_CMP_AND_SWP ||
	       op == UIW_WR_ATOMIC_FETCH_AND_ADD;
}

/* May the SQ WQE at sq_next go now? qp->lock held. */
static bool sq_ready(struct uiw_qp *qp)
{
	if (qp->sq_next == qp->sq_tail)
		return false;
	struct sq_wqe *w = &qp->sq[qp->sq_next & (qp->sq_size - 1)];
	/* failed at post, or local (nothing on the wire): retired in order
	 * even before the responder may send */
	if (w->st == WQE_DONE || w->wr.opcode == UIW_WR_BIND_MW || w->wr.opcode == UIW_WR_LOCAL_INV)
		return true;
	if (!qp->tx_gate_open)
		return false;
	if ((w->wr.flags & UIW_SEND_FENCE) && qp->orq_head != qp->orq_tail)
		return false;
	if (needs_orq(w->wr.opcode) &&
	    (qp->orq_tail - qp->orq_head >= qp->ord || qp->orq_tail - qp->orq_head >= qp->orq_size))
		return false;
	return true;
}

/* Sets up txm for the response at irq_next. qp->lock held. */
static void start_irq(struct uiw_qp *qp)
{
	struct txm *t = &qp->txm;
	uint32_t idx = qp->irq_next++;
	struct irq_entry *e = &qp->irq[idx % qp->irq_size];
	memset(t, 0, sizeof(*t));
	t->kind = TXM_IRQ;
	t->idx = idx;
	if (e->kind == IRQ_ATOMIC) {
		/* RFC 7306 §5.3: the Atomic Response on QN 3 */
		e->v.iov_base = &e->aresp;
		e->v.iov_len = sizeof(e->aresp);
		t->m = (struct ddp_msg){.ulp_ctrl = rdmap_ctrl(RDMAP_ATOMIC_RESP),
					.qn = RDMAP_QN_ATOMIC_RESP,
					.msn = qp->tx_msn[RDMAP_QN_ATOMIC_RESP]++,
					.iov = &e->v,
					.niov = 1,
					.len = sizeof(e->aresp)};
		return;
	}
	/* RFC 5040 §4.5: the Read Response, tagged, into the requester's sink */
	e->v.iov_base = e->src_ptr;
	e->v.iov_len = e->size;
	t->m = (struct ddp_msg){.tagged = true,
				.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_RESP),
				.stag = e->sink_stag,
				.to = e->sink_to,
				.iov = &e->v,
				.niov = e->size ? 1 : 0,
				.len = e->size};
}

/* Sets up txm for the SQ WQE at sq_next (which sq_ready allowed), or
 * executes it when it puts nothing on the wire. Returns false when the WQE
 * failed locally (the connection ends, tx_fail). qp->lock held. */
static bool start_sq(struct uiw_qp *qp)
{
	struct txm *t = &qp->txm;
	uint32_t idx = qp->sq_next++;
	struct sq_wqe *w = &qp->sq[idx & (qp->sq_size - 1)];
	if (w->wr.opcode == UIW_WR_BIND_MW || w->wr.opcode == UIW_WR_LOCAL_INV) {
		/* local: takes effect in order, nothing on the wire */
		w->status = uiw_mem_local_op(qp->pd, &w->wr);
		w->st = WQE_DONE;
	}
	if (w->st == WQE_DONE) {
		/* failed at post (bad lkey, sink access) or a local operation:
		 * a failure ends the connection */
		if (w->status != UIW_WC_SUCCESS)
			return false;
		if (qp->tx_sq_end == idx)
			qp->tx_sq_end = idx + 1;
		return true;
	}
	memset(t, 0, sizeof(*t));
	t->kind = TXM_SQ;
	t->idx = idx;
	struct ddp_msg *m = &t->m;
	m->iov = w->iov;
	m->niov = w->niov;
	m->len = w->len;
	switch (w->wr.opcode) {
	case UIW_WR_RDMA_WRITE_WITH_IMM:
		/* RFC 7306 §5.2: the Write, then Immediate Data on QN 0 */
		memset(w->imm, 0, sizeof(w->imm));
		memcpy(w->imm, &w->wr.imm_data, 4);
		/* fall through */
	case UIW_WR_RDMA_WRITE:
		m->tagged = true;
		m->ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_WRITE);
		m->stag = w->wr.rkey;
		m->to = w->wr.remote_addr;
		break;
	case UIW_WR_SEND:
	case UIW_WR_SEND_WITH_INV: {
		bool se = w->wr.flags & UIW_SEND_SOLICITED;
		bool inv = w->wr.opcode == UIW_WR_SEND_WITH_INV;
		enum rdmap_opcode op = inv ? (se ? RDMAP_SEND_SE_INV : RDMAP_SEND_INV)
					   : (se ? RDMAP_SEND_SE : RDMAP_SEND);
		m->ulp_ctrl = rdmap_ctrl(op);
		m->ulp_rsvd = inv ? w->wr.invalidate_rkey : 0;
		m->qn = DDP_QN_SEND;
		m->msn = qp->tx_msn[DDP_QN_SEND]++;
		break;
	}
	case UIW_WR_RDMA_READ: {
		/* RFC 5040 §4.4: the Read Request body, kept in the WQE */
		struct rdmap_read_req *rr = (void *)w->inl;
		rr->sink_stag = htobe32(w->sge[0].lkey);
		rr->sink_to = htobe64(w->sge[0].addr);
		rr->read_size = htobe32((uint32_t)w->len);
		rr->src_stag = htobe32(w->wr.rkey);
		rr->src_to = htobe64(w->wr.remote_addr);
		struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
		*o = (struct orq_entry){.sq_idx = idx,
					.sink_stag = w->sge[0].lkey,
					.sink_to = w->sge[0].addr,
					.size = (uint32_t)w->len};
		m->ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_REQ);
		m->qn = DDP_QN_READ_REQ;
		m->msn = qp->tx_msn[DDP_QN_READ_REQ]++;
		t->v.iov_base = rr;
		t->v.iov_len = sizeof(*rr);
		m->iov = &t->v;
		m->niov = 1;
		m->len = sizeof(*rr);
		break;
	}
	case UIW_WR_ATOMIC_CMP_AND_SWP:
	case UIW_WR_ATOMIC_FETCH_AND_ADD: {
		/* RFC 7306 §5.3: the Atomic Request, kept in the WQE */
		struct rdmap_atomic_req *ar = (void *)w->inl;
		bool cas = w->wr.opcode == UIW_WR_ATOMIC_CMP_AND_SWP;
		struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
		*o = (struct orq_entry){.atomic = true,
					.req_id = qp->tx_atomic_id++,
					.result = w->iov[0].iov_base,
					.sq_idx = idx};
		w->req_id = o->req_id;
		memset(ar, 0, sizeof(*ar));
		ar->aopcode = htobe32(cas ? RDMAP_AOP_CMP_SWAP : RDMAP_AOP_FETCH_ADD);
		ar->req_id = htobe32(w->req_id);
		ar->stag = htobe32(w->wr.rkey);
		ar->to = htobe64(w->wr.remote_addr);
		ar->add_swap = htobe64(cas ? w->wr.swap : w->wr.compare_add);
		ar->add_swap_mask = htobe64(cas ? ~0ull : 0);
		ar->compare = htobe64(cas ? w->wr.compare_add : 0);
		ar->compare_mask = htobe64(cas ? ~0ull : 0);
		m->ulp_ctrl = rdmap_ctrl(RDMAP_ATOMIC_REQ);
		m->qn = RDMAP_QN_ATOMIC_REQ;
		m->msn = qp->tx_msn[RDMAP_QN_ATOMIC_REQ]++;
		t->v.iov_base = ar;
		t->v.iov_len = sizeof(*ar);
		m->iov = &t->v;
		m->niov = 1;
		m->len = sizeof(*ar);
		break;
	}
	default:
		break;
	}
	w->st = WQE_SENT;
	return true;
}

/* The current message's segments all went into the batch. Write with
 * Immediate continues with its Immediate Data. qp->lock held. */
static void txm_done(struct uiw_qp *qp)
{
	struct txm *t = &qp->txm;
	if (t->kind == TXM_SQ) {
		struct sq_wqe *w = &qp->sq[t->idx & (qp->sq_size - 1)];
		if (w->wr.opcode == UIW_WR_RDMA_WRITE_WITH_IMM && t->phase == 0) {
			t->phase = 1;
			t->v.iov_base = w->imm;
			t->v.iov_len = sizeof(w->imm);
			t->m = (struct ddp_msg){.ulp_ctrl =
						    rdmap_ctrl((w->wr.flags & UIW_SEND_SOLICITED)
								   ? RDMAP_IMMEDIATE_SE
								   : RDMAP_IMMEDIATE),
						.qn = DDP_QN_SEND,
						.msn = qp->tx_msn[DDP_QN_SEND]++,
						.iov = &t->v,
						.niov = 1,
						.len = sizeof(w->imm)};
			t->pos = (struct ddp_txpos){0};
			return;
		}
		qp->tx_sq_end = t->idx + 1;
	} else if (t->kind == TXM_IRQ) {
		qp->tx_irq_end = t->idx + 1;
	} else if (t->kind == TXM_TERM) {
		qp->term_in_batch = true; /* term_sent once the batch is out */
	}
	t->kind = TXM_NONE;
}

/* The batch went into the stream in full: what it finished is done.
 * qp->lock held. */
static void batch_done(struct uiw_qp *qp)
{
	if (qp->state != UIW_QPS_ERR) {
		/* Sends and Writes are complete once handed to the stream */
		for (uint32_t i = qp->sq_head; i != qp->tx_sq_end && i != qp->sq_next; i++) {
			struct sq_wqe *w = &qp->sq[i & (qp->sq_size - 1)];
			if (w->st == WQE_SENT && !needs_orq(w->wr.opcode))
				w->st = WQE_DONE;
		}
		uiw_sq_reap(qp);
	}
	/* responses in the stream stop counting against IRD (RFC 5040 §6.1);
	 * a Read Request waiting for room may go on */
	bool freed = false;
	while (qp->irq_head != qp->tx_irq_end && qp->irq_head != qp->irq_next) {
		struct irq_entry *e = &qp->irq[qp->irq_head % qp->irq_size];
		uiw_mr_put(e->src);
		e->src = NULL;
		qp->irq_head++;
		freed = true;
	}
	if (freed)
		atomic_fetch_or(&qp->pending, PROG_RX);
}

/* A page of the current message's payload is gone (ddp_tx_message said
 * -EFAULT: unmapped, or -EACCES: protected; the application unmapped or
 * mprotected registered memory). Nothing of the failing segment is in the
 * batch. A Read Response: the peer's Read names memory that is no longer
 * there, a remote protection error at the Data Source (RFC 5040 §4.8,
 * §7: base or bounds 0/1/0x01, or access rights 0/1/0x02), with the Read
 * Request's DDP header and body echoed as for the other Read Request
 * errors; the segments of the Response already in the batch go first. A
 * send WR of ours: it failed locally (LOC_PROT_ERR, as a bad lkey), which
 * ends the connection without a Terminate. Returns what tx_fill returns.
 * qp->lock not held. */
static int tx_source_gone(struct uiw_qp *qp, int r)
{
	struct txm *t = &qp->txm;
	if (t->kind == TXM_IRQ) {
		pthread_mutex_lock(&qp->lock);
		const struct irq_entry *e = &qp->irq[t->idx % qp->irq_size];
		struct uiw_term term = {.layer = RDMAP_LAYER_RDMAP,
					.etype = RDMAP_ETYPE_REMOTE_PROT,
					.ecode = r == -EACCES ? RDMAP_ECODE_ACCESS
							      : RDMAP_ECODE_BASE_BOUNDS,
					.has_seg = true,
					.seg = e->req_seg,
					.has_rreq = true,
					.rreq = e->rreq};
		t->kind = TXM_NONE;
		qp->tx_irq_end = t->idx + 1; /* its MR reference goes with the batch */
		pthread_mutex_unlock(&qp->lock);
		uiw_terminate_tx(qp, &term);
		return 0;
	}
	if (t->kind == TXM_SQ) {
		pthread_mutex_lock(&qp->lock);
		struct sq_wqe *w = &qp->sq[t->idx & (qp->sq_size - 1)];
		w->status = UIW_WC_LOC_PROT_ERR;
		w->st = WQE_DONE;
		t->kind = TXM_NONE;
		qp->tx_fail = true;
		pthread_mutex_unlock(&qp->lock);
		return -ECANCELED;
	}
	return r;
}

/* A message joins a batch that already holds FPDUs only if the batch stays
 * under this many bytes with it (payload counted); a message that starts a
 * batch fills it up to MPA_TX_MAX_BYTES. So a 1 MiB message is one
 * sendmsg, and 64 KiB messages still go three to a batch: batches of
 * sixteen made 64 KiB Sends over the veth path slower (medians 12.2 vs
 * 20.2 Gbit/s in one A/B). */
#define TX_JOIN_BYTES (256u * 1024)

/* Fills the batch with segments: the current message first, then Read and
 * Atomic Responses (the peer's requests are older than our new work), then
 * the send queue; a new message that would take a batch past TX_JOIN_BYTES
 * waits for the next batch. Returns 0, or -ECANCELED when a WQE failed
 * locally. tx_lock holder. */
static int tx_fill(struct uiw_qp *qp)
{
	for (;;) {
		struct txm *t = &qp->txm;
		if (t->kind == TXM_SQ) {
			/* in ERR the rest of a WR's message is not sent: the WR
			 * was flushed and its buffer is the application's again
			 * (a Read Response, whose MR we hold, is finished) */
			pthread_mutex_lock(&qp->lock);
			if (qp->state == UIW_QPS_ERR)
				t->kind = TXM_NONE;
			pthread_mutex_unlock(&qp->lock);
		}
		if (t->kind == TXM_NONE) {
			pthread_mutex_lock(&qp->lock);
			bool err = qp->state == UIW_QPS_ERR;
			if (err && qp->term_queued && !qp->term_started) {
				qp->term_started = true;
				memset(t, 0, sizeof(*t));
				t->kind = TXM_TERM;
				t->v.iov_base = qp->term_payload;
				t->v.iov_len = qp->term_len;
				t->m = (struct ddp_msg){.ulp_ctrl = rdmap_ctrl(RDMAP_TERMINATE),
							.qn = DDP_QN_TERMINATE,
							.msn = qp->tx_msn[DDP_QN_TERMINATE]++,
							.iov = &t->v,
							.niov = 1,
							.len = qp->term_len};
			} else if (err) {
				pthread_mutex_unlock(&qp->lock);
				return 0;
			} else if (qp->irq_next != qp->irq_tail) {
				start_irq(qp);
			} else if (sq_ready(qp)) {
				if (!start_sq(qp)) {
					qp->tx_fail = true;
					pthread_mutex_unlock(&qp->lock);
					return -ECANCELED;
				}
			}
			pthread_mutex_unlock(&qp->lock);
			if ((t->kind == TXM_SQ || t->kind == TXM_IRQ) && mpa_tx_busy(&qp->mpa) &&
			    qp->mpa.tx->bytes + t->m.len > TX_JOIN_BYTES)
				return 0; /* it starts the next batch */
			if (t->kind == TXM_NONE) {
				/* nothing (or a local WQE, retired in order) */
				pthread_mutex_lock(&qp->lock);
				bool more = !err && (qp->irq_next != qp->irq_tail || sq_ready(qp));
				if (mpa_tx_empty(&qp->mpa))
					batch_done(qp);
				pthread_mutex_unlock(&qp->lock);
				if (!more)
					return 0;
				continue;
			}
		}
		int r = ddp_tx_message(&qp->mpa, &t->m, &t->pos);
		if (r == -EFAULT || r == -EACCES) {
			r = tx_source_gone(qp, r);
			if (r)
				return r;
			continue; /* the Terminate goes next */
		}
		if (r < 0)
			return r;
		if (r == 0)
			return 0; /* the batch is full */
		pthread_mutex_lock(&qp->lock);
		txm_done(qp);
		pthread_mutex_unlock(&qp->lock);
	}
}

/* A send WR failed locally (bad lkey, Local Invalidate or Bind of an STag
 * it may not touch). iWARP has no SQE state: as siw (siw_qp_sq_process),
 * the connection is dropped without a Terminate (nothing the peer did is
 * wrong), the failing WR keeps its error status, every later WR flushes,
 * the QP goes to ERR and UIW_QP_EV_FATAL is reported before DISCONNECTED.
 * The WRs before it were handed to the stream first. */
static void tx_local_failure(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	if (qp->state != UIW_QPS_ERR) {
		uiw_qp_set_close_reason(qp, UIW_CLOSE_LOCAL_ABORT);
		qp->local_fatal = true;
		uiw_qp_flush_locked(qp);
	}
	qp->aborted = true;
	pthread_mutex_unlock(&qp->lock);
	qp->stream->ops->abort(qp->stream);
}

/* Doorbell batching. A thread that posts WRs one by one in a tight loop
 * (perftest's bandwidth and message-rate loops) would pay one sendmsg per
 * WR, and one unbatched send per message tops out near 0.8 M/s here. So a
 * poster leaves a batch that has room for more in place when it pushed or
 * posted one moments ago (DEFER_NS) and a thread polled one of the QP's CQs moments
 * ago too: that thread is about to poll again, and the poll pushes it
 * (cq.c drives the send side first). A poster that keeps DEFER_DEPTH or
 * more WRs outstanding (posted, completion not yet polled) is streaming:
 * its batch waits too, though its last poll may be long ago (perftest
 * posts 100 WRs between two polls). The engine pushes a waiting batch at
 * DEFER_MAX_NS if nobody does. A WR posted after a pause, or with few
 * outstanding to a QP nobody polls (a ping-pong), goes out in its post. */
#define DEFER_NS (10ull * 1000)
#define DEFER_MAX_NS (50ull * 1000)
#define DEFER_DEPTH 8u

/* WRs posted whose completions are not yet polled */
static unsigned sq_outstanding(const struct uiw_qp *qp)
{
	return __atomic_load_n(&qp->sq_tail, __ATOMIC_RELAXED) -
	       atomic_load_explicit(&qp->sq_polled, memory_order_relaxed);
}

/* See rdmap/internal.h. */
unsigned uiw_tx_outstanding(const struct uiw_qp *qp)
{
	return sq_outstanding(qp);
}

/* See rdmap/internal.h. */
bool uiw_tx_streaming(const struct uiw_qp *qp)
{
	return sq_outstanding(qp) >= DEFER_DEPTH;
}

/* A batch that waits: marks it deferred (cq.c's polls drive such a QP) and,
 * unless it already was, gives the engine the deadline at (ns, uiw_now_ns)
 * to send it if nobody comes before. */
static void tx_wait_until(struct uiw_qp *qp, uint64_t at)
{
	if (!qp->tx_deferred) {
		qp->tx_deferred = true;
		uiw_engine_deadline_tx(qp, at);
	}
}

static bool may_defer(struct uiw_qp *qp, const struct mpa_conn *c)
{
	const struct mpa_txbatch *b = c->tx;
	/* (a batch of nothing but bytes carried from the last one goes now:
	 * nothing more was waiting to go behind them) */
	if (mpa_tx_pushing(c) || b->nfpdu == 0 || b->nfpdu >= MPA_TX_MAX_FPDU / 2 ||
	    b->bytes >= TX_JOIN_BYTES / 2)
		return false;
	uint64_t now = uiw_now_ns();
	uint64_t prev = qp->tx_last_post_ns;
	qp->tx_last_post_ns = now;
	if (now - qp->tx_last_push_ns > DEFER_NS && now - prev > DEFER_NS)
		return false;
	unsigned depth = sq_outstanding(qp);
	/* a full send queue takes no WR before a completion is polled: the
	 * batch cannot grow, and the completion the poster needs next would
	 * only come later (perftest's -e latency tests, TX depth 1, poll the
	 * send CQ once per event and then post again) */
	if (depth >= qp->sq_size)
		return false;
	/* a Write ping-pong's one message (cq.c reply_wait): nothing follows
	 * it before the answer, and the deadline would wake the engine for
	 * each */
	if (depth <= 1 && atomic_load_explicit(&qp->pp_score, memory_order_relaxed) >= UIW_PP_MIN)
		return false;
	if (depth < DEFER_DEPTH && now - uiw_cq_last_poll(qp->scq) > DEFER_NS &&
	    now - uiw_cq_last_poll(qp->rcq) > DEFER_NS)
		return false;
	tx_wait_until(qp, now + DEFER_MAX_NS);
	return true;
}

/* Whole segments (mpa_tx_push_held). A stream that sends every batch
 * whole ends each send with a segment cut short: a packet more on both
 * ends and, flagged as pushed, an ACK for each from a receiver that reads
 * it at once (64 KiB Sends on a 1500-byte path, one per sendmsg: 36 vs 44
 * Gbit/s, docs/performance.md, "Whole segments"). So while the next batch
 * is sure to come soon (a message waits that did not fit this one, or the
 * poster streams: uiw_tx_streaming), a batch of up to TX_JOIN_BYTES ends
 * its push on a segment boundary and its last bytes (at most
 * MPA_TX_CARRY_MAX, copied) go in front of the next batch. A batch that
 * ends in a Terminate goes whole (the stream closes behind it). */
static bool may_hold(const struct uiw_qp *qp)
{
	const struct mpa_conn *c = &qp->mpa;
	return c->tx_seg && !qp->term_in_batch && c->tx->bytes <= TX_JOIN_BYTES &&
	       (qp->txm.kind != TXM_NONE || uiw_tx_streaming(qp));
}

/* How long carried bytes wait for the next batch, from the end of the
 * push that left them (a push of 64 KiB takes longer than this): about
 * what a streaming poster takes to post its next 64 KiB message here
 * (~12 µs at 5 GB/s). */
#define CARRY_NS (20ull * 1000)

/* Only bytes carried from the last batch are left (mpa_tx_empty). They
 * wait for the next batch while the poster streams and they are younger
 * than CARRY_NS; then whoever comes sends them: a poll of one of the QP's
 * CQs (cq.c drives a QP whose tx_deferred is set at each poll), the next
 * post, or the engine at the deadline set here (a completion channel
 * sleeper's uiw_cq_arm unparks it). Returns whether they wait. */
static bool carry_waits(struct uiw_qp *qp)
{
	if (!qp->mpa.tx_seg || qp->term_in_batch || !uiw_tx_streaming(qp))
		return false;
	uint64_t at = qp->tx_carry_ns + CARRY_NS;
	if (uiw_now_ns() >= at)
		return false;
	tx_wait_until(qp, at);
	return true;
}

static _Thread_local unsigned tl_pushes;

/* See rdmap/internal.h. */
unsigned uiw_tx_thread_pushes(void)
{
	return tl_pushes;
}

/* See rdmap/internal.h. The ordering window (qp->tx_window) is open from
 * just before a batch goes into the stream until its completions are
 * pushed (rx.c waits for it to close before pushing the completion of
 * something that may answer it). */
int uiw_tx_run(struct uiw_qp *qp, enum prog_role role)
{
	struct mpa_conn *c = &qp->mpa;
	int rc = 0;
	/* A stream that took only part of a batch is pushed again once it
	 * says it is writable (the engine's POLLOUT), not at every poll: the
	 * kernel reports room when a good share is free, so each push moves a
	 * good share (small pushes make small segments, expensive on both
	 * ends). */
	if (qp->want_out && !atomic_exchange(&qp->out_ready, false))
		return 0;
	qp->want_out = false;
	bool deferred = false;
	for (int rounds = 0; rounds < 64; rounds++) {
		if (mpa_tx_busy(c) && role == ROLE_POSTER && may_defer(qp, c)) {
			deferred = true; /* the next poll pushes it (doorbell batching) */
			break;
		}
		if (mpa_tx_busy(c)) {
			if (mpa_tx_empty(c) && carry_waits(qp)) {
				deferred = true;
				break;
			}
			qp->tx_deferred = false;
			qp->tx_last_push_ns = uiw_now_ns();
			/* a poller's push, or a streaming poster's (it polls
			 * again soon): the engine stays parked. Not a poster
			 * with a message or two out (ib_write_lat's spins on
			 * its memory for the answer, which the engine takes) */
			uiw_engine_poller_busy(qp->tx_last_push_ns,
					       role == ROLE_POSTER && uiw_tx_streaming(qp));
			atomic_store_explicit(&qp->pp_push_ns, qp->tx_last_push_ns,
					      memory_order_relaxed);
			atomic_fetch_add_explicit(&qp->pp_pushes, 1, memory_order_relaxed);
			atomic_fetch_add(&qp->tx_window, 1);
			/* a POLLOUT the engine reports from here on counts */
			atomic_store(&qp->out_ready, false);
			int r = may_hold(qp) ? mpa_tx_push_held(c) : mpa_tx_push(c);
			tl_pushes++;
			if (c->tx->carry_len)
				qp->tx_carry_ns = uiw_now_ns();
			if (r == 1) {
				pthread_mutex_lock(&qp->lock);
				batch_done(qp);
				pthread_mutex_unlock(&qp->lock);
			}
			atomic_fetch_sub(&qp->tx_window, 1);
			if (r < 0) {
				rc = r;
				break;
			}
			if (r == 0) {
				/* the stream is full: wait for its POLLOUT. One that
				 * came while the push ran (before want_out was set, on
				 * another thread: run_events then saw no one waiting)
				 * is not lost: edge-triggered, it would not come again
				 * and the batch would sit until the next event */
				qp->want_out = true;
				if (atomic_exchange(&qp->out_ready, false)) {
					qp->want_out = false;
					continue;
				}
				break;
			}
			if (qp->term_in_batch) {
				qp->term_in_batch = false;
				pthread_mutex_lock(&qp->lock);
				qp->term_sent = true;
				pthread_mutex_unlock(&qp->lock);
				/* RFC 5040 §6.3: after the Terminate, the stream
				 * closes; the receive side drains and finishes */
				qp->stream->ops->shutdown_send(qp->stream);
				atomic_fetch_or(&qp->pending, PROG_TIMER);
				break;
			}
		}
		if (qp->tx_fail) {
			tx_local_failure(qp);
			break;
		}
		int r = tx_fill(qp);
		if (r == -ECANCELED)
			continue; /* push what is before it, then fail */
		if (r < 0) {
			rc = r;
			break;
		}
		if (!mpa_tx_busy(c))
			break;
	}
	/* a fair share went out: what is built or queued goes on later */
	if (!rc && !qp->want_out && !deferred && mpa_tx_busy(c))
		atomic_fetch_or(&qp->pending, PROG_TX);
	/* SQD: the FIN follows the last queued message */
	pthread_mutex_lock(&qp->lock);
	bool fin = !rc && qp->closing && !qp->fin_sent && qp->state != UIW_QPS_ERR &&
		   qp->sq_next == qp->sq_tail && qp->txm.kind == TXM_NONE && !mpa_tx_busy(c);
	if (fin)
		qp->fin_sent = true;
	bool was_busy = qp->tx_busy;
	qp->tx_busy = mpa_tx_busy(c);
	bool closing_wait = was_busy && !qp->tx_busy && qp->phase == CONN_CLOSING;
	pthread_mutex_unlock(&qp->lock);
	if (fin)
		qp->stream->ops->shutdown_send(qp->stream);
	if (closing_wait)
		atomic_fetch_or(&qp->pending, PROG_TIMER); /* the close waited for this batch */
	return rc;
}

/* See rdmap/internal.h. RFC 6581 §4: a zero-length RDMA Write or Read
 * Request with a non-zero STag (Chelsio refuses STag 0), or a zero-length
 * Send, before any ULP data. The stream is not yet the engine's. */
int uiw_tx_send_rtr(struct uiw_qp *qp, uint8_t rtr)
{
	struct ddp_msg m = {.tagged = false};
	struct rdmap_read_req *rr = (void *)qp->rtr_body;
	struct iovec v = {.iov_base = rr, .iov_len = sizeof(*rr)};
	if (rtr == MPA_RTR_WRITE) {
		m.tagged = true;
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_WRITE);
		m.stag = UIW_RTR_STAG;
		m.to = 0;
	} else if (rtr == MPA_RTR_READ) {
		memset(rr, 0, sizeof(*rr));
		rr->src_stag = htobe32(UIW_RTR_STAG);
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_REQ);
		m.qn = DDP_QN_READ_REQ;
		m.iov = &v;
		m.niov = 1;
		m.len = sizeof(*rr);
		pthread_mutex_lock(&qp->lock);
		m.msn = qp->tx_msn[DDP_QN_READ_REQ]++;
		struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
		*o = (struct orq_entry){.sq_idx = UINT32_MAX};
		pthread_mutex_unlock(&qp->lock);
	} else if (rtr == MPA_RTR_SEND) {
		/* a zero-length Send; the responder does not deliver it */
		m.ulp_ctrl = rdmap_ctrl(RDMAP_SEND);
		m.qn = DDP_QN_SEND;
		pthread_mutex_lock(&qp->lock);
		m.msn = qp->tx_msn[DDP_QN_SEND]++;
		pthread_mutex_unlock(&qp->lock);
	} else {
		return -EINVAL;
	}
	struct ddp_txpos pos = {0};
	int rc = ddp_tx_message(&qp->mpa, &m, &pos);
	if (rc == 1)
		rc = mpa_tx_push_wait(&qp->mpa, uiw_config_get()->mpa.timeout_ms);
	else if (rc == 0)
		rc = -ENOSPC;
	return rc;
}
