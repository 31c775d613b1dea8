/* The receive side of a connected QP: one thread that reads FPDUs, validates
 * them (RFC 5041 §7 / RFC 5040 §7 error checks) and places payload straight
 * into the target buffer (tagged: the STag's MR; untagged: the posted
 * receive), then generates completions. Every protocol error goes to
 * uiw_terminate().
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <poll.h>
#include <time.h>

#include "rdmap/internal.h"

#define TERM(l, e, c) ((struct uiw_term){.layer = (l), .etype = (e), .ecode = (c)})

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* How long a Read / Atomic Request that finds IRD used up only because of
 * responses still being sent waits for them (see irq_full). */
#define IRD_INFLIGHT_WAIT_MS 200

/* RFC 5040 §6.5, RFC 6581 §5, RFC 7306 §5: is there no room for one more
 * inbound Read or Atomic Request? A request counts against IRD from its
 * receipt until its response has been handed to the stream in full: queued
 * on the IRQ, or taken by the send side and being sent (irq_busy). The
 * peer's ORD count drops when it has received the last byte of a response,
 * which can be before our send call has returned: when only responses in
 * flight fill the IRD, wait for the send side (bounded) before calling the
 * request an error. A peer that sends more requests while it does not read
 * the responses gets the error once the bound passes. qp->lock held. */
static bool irq_full(struct uiw_qp *qp, uint32_t limit)
{
	uint64_t end = now_ns() + IRD_INFLIGHT_WAIT_MS * 1000000ull;
	for (int i = 0; i < 1000; i++) {
		if (qp->irq_tail - qp->irq_head + qp->irq_busy < limit)
			return false;
		if (!qp->irq_busy || qp->state == UIW_QPS_ERR || now_ns() >= end)
			return true;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&qp->cond, &qp->lock, &ts);
	}
	return true;
}

static void term_seg(struct uiw_qp *qp, struct uiw_term t, const struct ddp_rx_seg *s)
{
	t.has_seg = true;
	t.seg = *s;
	uiw_terminate(qp, &t);
}

/* Reads the payload into the target. Small payloads come through MPA's
 * receive ring with their CRC checked before a byte is placed; large ones
 * go straight from the kernel into the target buffer and are checked after
 * (bytes can only have landed inside the validated range). Returns 0,
 * -EBADMSG (CRC), or -errno from the stream. */
static int place(struct uiw_qp *qp, const struct iovec *iov, int n, size_t len)
{
	if (len <= MPA_RX_SMALL_MAX)
		return ddp_rx_small(&qp->mpa, iov, n, len);
	int r = ddp_rx_payload(&qp->mpa, iov, n, len);
	return r ? r : ddp_rx_end(&qp->mpa);
}

/* The stream failed while an FPDU was read (r < 0 from mpa/ddp): a bad CRC
 * is answered with a Terminate (RFC 5044 §4.4 / §8); the peer's FIN inside
 * an FPDU with LLP error 0x01 (it can still read it); a reset from the peer
 * or another stream error ends the connection without one (it cannot be
 * delivered). Records the close reason (abortive) unless the QP was already
 * in ERR by a local uiw_qp_modify. */
static void place_failed(struct uiw_qp *qp, int r)
{
	pthread_mutex_lock(&qp->lock);
	bool local_err = qp->state == UIW_QPS_ERR;
	if (r == -ECONNRESET)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_RESET);
	else if (r == -ENODATA && !local_err)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_TRUNCATED);
	else if (r != -EBADMSG)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_LLP_ERROR);
	pthread_mutex_unlock(&qp->lock);
	if (r == -EBADMSG)
		uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_CRC));
	else if (r == -ENODATA && !local_err)
		uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_TCP_LOST));
}

/* Validates a tagged segment against its STag (RFC 5041 §7.2, RFC 5040
 * §7.3): known, valid, same PD, access, base and bounds. On success *ptr is
 * where the payload goes. */
static bool tagged_check(struct uiw_qp *qp, const struct ddp_rx_seg *s, unsigned need_access,
			 void **ptr)
{
	struct uiw_mr_int *mr = qp->rx_mr;
	if (!mr || mr->pub.stag != s->stag || !atomic_load(&mr->valid)) {
		uiw_mr_put(mr);
		mr = qp->rx_mr = uiw_mr_get(s->stag);
	}
	if (!mr) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_INVALID_STAG), s);
		return false;
	}
	const struct uiw_mr *m = &mr->pub;
	if (m->pd != qp->pd) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_STAG_NOT_ASSOC), s);
		return false;
	}
	if (!(m->access & need_access)) {
		term_seg(qp, TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_PROT, RDMAP_ECODE_ACCESS),
			 s);
		return false;
	}
	if (s->to + s->payload_len < s->to) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_TO_WRAP), s);
		return false;
	}
	if (s->to < m->iova || s->to - m->iova > m->length ||
	    s->payload_len > m->length - (s->to - m->iova)) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_BASE_BOUNDS), s);
		return false;
	}
	*ptr = (uint8_t *)m->addr + (s->to - m->iova);
	return true;
}

static bool rx_write(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	if (s->payload_len == 0) {
		/* A zero-length Write places nothing: no STag check (the RTR
		 * carries STag 1). */
		int r = ddp_rx_end(&qp->mpa);
		if (r)
			place_failed(qp, r);
		if (s->last) {
			qp->rx_last_write_len = qp->rx_write_len;
			qp->rx_write_len = 0;
		}
		return r == 0;
	}
	void *p;
	if (!tagged_check(qp, s, UIW_ACCESS_REMOTE_WRITE, &p))
		return false;
	struct iovec v = {.iov_base = p, .iov_len = s->payload_len};
	int r = place(qp, &v, 1, s->payload_len);
	if (r) {
		place_failed(qp, r);
		return false;
	}
	qp->rx_write_len += s->payload_len;
	if (s->last) {
		/* the length a following Immediate Data reports (RFC 7306) */
		qp->rx_last_write_len = qp->rx_write_len;
		qp->rx_write_len = 0;
	}
	return true;
}

static bool rx_read_resp(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	pthread_mutex_lock(&qp->lock);
	bool have = qp->orq_head != qp->orq_tail;
	struct orq_entry o = have ? qp->orq[qp->orq_head % qp->orq_size] : (struct orq_entry){0};
	pthread_mutex_unlock(&qp->lock);
	/* RFC 5040 §7.2: a Read Response with no outstanding Read, or for
	 * another sink, is an unexpected opcode / invalid STag. */
	if (!have || o.atomic) {
		term_seg(qp,
			 TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP),
			 s);
		return false;
	}
	if (s->payload_len) {
		/* the STag first (RFC 5041 §7.2: invalid STag), then that it is
		 * the sink of the outstanding Read and within what it asked */
		void *p;
		if (!tagged_check(qp, s, 0xff, &p))
			return false;
		if (s->stag != o.sink_stag) {
			term_seg(qp,
				 TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_INVALID_STAG),
				 s);
			return false;
		}
		if (s->to != o.sink_to + o.got || s->payload_len > o.size - o.got) {
			term_seg(
			    qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_BASE_BOUNDS), s);
			return false;
		}
		struct iovec v = {.iov_base = p, .iov_len = s->payload_len};
		int r = place(qp, &v, 1, s->payload_len);
		if (r) {
			place_failed(qp, r);
			return false;
		}
	} else {
		int r = ddp_rx_end(&qp->mpa);
		if (r) {
			place_failed(qp, r);
			return false;
		}
	}
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
			qp->tx_kick = qp->tx_wake = true;
			pthread_cond_broadcast(&qp->cond);
		}
	}
	pthread_mutex_unlock(&qp->lock);
	return true;
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

static bool rx_send(struct uiw_qp *qp, const struct ddp_rx_seg *s, uint8_t op)
{
	/* RFC 5041 §7.3: MSN must be the expected one, MO the bytes so far. */
	if (s->msn != qp->rx_msn[DDP_QN_SEND]) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE), s);
		return false;
	}
	if (qp->rx_expect_send_rtr) {
		qp->rx_expect_send_rtr = false;
		if (s->payload_len == 0 && s->mo == 0 && s->last) {
			/* RFC 6581 §4: the zero-length Send RTR; not delivered */
			int r = ddp_rx_end(&qp->mpa);
			if (r) {
				place_failed(qp, r);
				return false;
			}
			qp->rx_msn[DDP_QN_SEND]++;
			return true;
		}
	}
	pthread_mutex_lock(&qp->lock);
	bool have = qp->rx_send_active;
	if (!have && qp->state != UIW_QPS_ERR)
		have = uiw_rq_take(qp); /* the first segment takes a receive WQE */
	struct rq_wqe r = qp->rx_cur;
	pthread_mutex_unlock(&qp->lock);
	if (!have) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_NO_BUFFER), s);
		return false;
	}
	uint64_t got = qp->rx_send_got;
	if (s->mo != got) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_MO), s);
		return false;
	}
	if (got + s->payload_len > r.len) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_TOO_LONG), s);
		return false;
	}
	/* the part of the receive buffer at [got, got + len) */
	struct iovec v[UIW_MAX_SGE];
	int nv = 0;
	uint64_t skip = got, left = s->payload_len;
	for (int i = 0; i < r.niov && left; i++) {
		if (skip >= r.iov[i].iov_len) {
			skip -= r.iov[i].iov_len;
			continue;
		}
		size_t k = r.iov[i].iov_len - skip;
		if (k > left)
			k = left;
		v[nv].iov_base = (uint8_t *)r.iov[i].iov_base + skip;
		v[nv++].iov_len = k;
		left -= k;
		skip = 0;
	}
	int rc = place(qp, v, nv, s->payload_len);
	if (rc) {
		place_failed(qp, rc);
		return false;
	}
	qp->rx_send_got = got + s->payload_len;
	if (!s->last)
		return true;
	qp->rx_msn[DDP_QN_SEND]++;
	bool inv = op == RDMAP_SEND_INV || op == RDMAP_SEND_SE_INV;
	bool se = op == RDMAP_SEND_SE || op == RDMAP_SEND_SE_INV;
	if (inv && !invalidate_stag(qp, s->ulp_rsvd)) {
		/* RFC 5040 §4.8: the STag cannot be invalidated (as siw) */
		term_seg(
		    qp,
		    TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_PROT, RDMAP_ECODE_CANNOT_INVALIDATE),
		    s);
		return false;
	}
	struct uiw_wc wc = {.status = UIW_WC_SUCCESS,
			    .opcode = UIW_WC_RECV,
			    .byte_len = (uint32_t)qp->rx_send_got,
			    .flags = inv ? UIW_WC_WITH_INV : 0,
			    .invalidated_stag = inv ? s->ulp_rsvd : 0};
	qp->rx_send_got = 0;
	pthread_mutex_lock(&qp->lock);
	if (qp->rx_send_active)
		uiw_rq_complete(qp, &wc, se);
	pthread_mutex_unlock(&qp->lock);
	return true;
}

/* Reads the fixed-size body of a single-segment untagged message on queue
 * qn (Read Request, Immediate Data, Atomic Request/Response): MSN must be
 * the expected one (RFC 5041 §7.3), the segment must hold exactly len bytes
 * at MO 0 with L set; the CRC is checked before the body is used. Advances
 * the queue's MSN. False after a Terminate. */
static bool rx_untagged_body(struct uiw_qp *qp, const struct ddp_rx_seg *s, uint32_t qn, void *body,
			     size_t len)
{
	if (s->msn != qp->rx_msn[qn]) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE), s);
		return false;
	}
	if (s->payload_len != len || s->mo != 0 || !s->last) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_MO), s);
		return false;
	}
	struct iovec v = {.iov_base = body, .iov_len = len};
	int r = place(qp, &v, 1, len);
	if (r) {
		place_failed(qp, r);
		return false;
	}
	qp->rx_msn[qn]++;
	return true;
}

/* RFC 7306 §5.2: Immediate Data, 8 bytes on QN 0; consumes a receive WQE
 * and completes it as RECV_RDMA_WITH_IMM with the preceding Write's length. */
static bool rx_immediate(struct uiw_qp *qp, const struct ddp_rx_seg *s, uint8_t op)
{
	uint8_t body[RDMAP_IMMEDIATE_LEN];
	if (qp->rx_send_active) {
		/* two messages of QN 0 may not interleave (RFC 5041 §5.2) */
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_MO), s);
		return false;
	}
	if (!rx_untagged_body(qp, s, DDP_QN_SEND, body, sizeof(body)))
		return false;
	pthread_mutex_lock(&qp->lock);
	bool have = qp->state != UIW_QPS_ERR && uiw_rq_take(qp);
	if (have) {
		struct uiw_wc wc = {.status = UIW_WC_SUCCESS,
				    .opcode = UIW_WC_RECV_RDMA_WITH_IMM,
				    .byte_len = (uint32_t)qp->rx_last_write_len,
				    .flags = UIW_WC_WITH_IMM};
		memcpy(&wc.imm_data, body, 4);
		uiw_rq_complete(qp, &wc, op == RDMAP_IMMEDIATE_SE);
	}
	pthread_mutex_unlock(&qp->lock);
	if (!have) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_NO_BUFFER), s);
		return false;
	}
	return true;
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

/* RFC 7306 §5.3: executes an Atomic Request (QN 1) and queues its Atomic
 * Response; checks like an RDMA Read (IRD, STag, access, bounds) plus
 * 8-byte alignment of the target. */
static bool rx_atomic_req(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	struct rdmap_atomic_req ar;
	if (!rx_untagged_body(qp, s, RDMAP_QN_ATOMIC_REQ, &ar, sizeof(ar)))
		return false;
	pthread_mutex_lock(&qp->lock);
	bool full = irq_full(qp, qp->ird);
	pthread_mutex_unlock(&qp->lock);
	if (full) {
		term_seg(qp, TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_MSN_RANGE), s);
		return false;
	}
	uint32_t aop = be32toh(ar.aopcode) & 0xf;
	uint32_t stag = be32toh(ar.stag);
	uint64_t to = be64toh(ar.to);
	struct uiw_mr_int *mr = uiw_mr_get(stag);
	struct uiw_term t = TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_PROT, 0);
	bool ok = false;
	if (aop != RDMAP_AOP_FETCH_ADD && aop != RDMAP_AOP_CMP_SWAP) {
		t.etype = RDMAP_ETYPE_REMOTE_OP;
		t.ecode = RDMAP_ECODE_UNEXPECTED_OP;
	} else if (!mr) {
		t.ecode = RDMAP_ECODE_INVALID_STAG;
	} else if (mr->pub.pd != qp->pd) {
		t.ecode = RDMAP_ECODE_STAG_NOT_ASSOC;
	} else if (!(mr->pub.access & UIW_ACCESS_REMOTE_ATOMIC)) {
		t.ecode = RDMAP_ECODE_ACCESS;
	} else if ((to & 7) || to < mr->pub.iova || to - mr->pub.iova > mr->pub.length ||
		   mr->pub.length - (to - mr->pub.iova) < 8) {
		t.ecode = RDMAP_ECODE_BASE_BOUNDS;
	} else {
		ok = true;
	}
	if (!ok) {
		uiw_mr_put(mr);
		term_seg(qp, t, s);
		return false;
	}
	uint64_t *p = (uint64_t *)(void *)((uint8_t *)mr->pub.addr + (to - mr->pub.iova));
	uint64_t data = be64toh(ar.add_swap), dmask = be64toh(ar.add_swap_mask);
	uint64_t cmp = be64toh(ar.compare), cmask = be64toh(ar.compare_mask);
	pthread_mutex_lock(&atomic_lock);
	uint64_t orig = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	uint64_t val = orig;
	if (aop == RDMAP_AOP_FETCH_ADD)
		val = masked_add(orig, data, dmask);
	else if (((orig ^ cmp) & cmask) == 0)
		val = (orig & ~dmask) | (data & dmask);
	__atomic_store_n(p, val, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&atomic_lock);
	uiw_mr_put(mr);

	struct irq_entry e = {.kind = IRQ_ATOMIC};
	e.aresp.req_id = ar.req_id;
	e.aresp.orig = htobe64(orig);
	pthread_mutex_lock(&qp->lock);
	if (qp->state != UIW_QPS_ERR) {
		qp->irq[qp->irq_tail++ % qp->irq_size] = e;
		qp->tx_kick = qp->tx_wake = true;
		pthread_cond_broadcast(&qp->cond);
	}
	pthread_mutex_unlock(&qp->lock);
	return true;
}

/* RFC 7306 §5.3: an Atomic Response (QN 3) completes the oldest outstanding
 * request, which must be the Atomic with that Request Identifier. */
static bool rx_atomic_resp(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	struct rdmap_atomic_resp ar;
	if (!rx_untagged_body(qp, s, RDMAP_QN_ATOMIC_RESP, &ar, sizeof(ar)))
		return false;
	pthread_mutex_lock(&qp->lock);
	bool ok = qp->orq_head != qp->orq_tail;
	struct orq_entry *e = ok ? &qp->orq[qp->orq_head % qp->orq_size] : NULL;
	ok = ok && e->atomic && e->req_id == be32toh(ar.req_id);
	if (ok) {
		uint64_t orig = be64toh(ar.orig);
		memcpy(e->result, &orig, 8);
		struct sq_wqe *w = &qp->sq[e->sq_idx & (qp->sq_size - 1)];
		if (e->sq_idx - qp->sq_head < qp->sq_next - qp->sq_head && w->st == WQE_SENT) {
			w->st = WQE_DONE;
			w->len = 8;
		}
		qp->orq_head++;
		uiw_sq_reap(qp);
		qp->tx_kick = qp->tx_wake = true;
		pthread_cond_broadcast(&qp->cond);
	}
	pthread_mutex_unlock(&qp->lock);
	if (!ok) {
		term_seg(qp,
			 TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP),
			 s);
		return false;
	}
	return true;
}

static bool rx_read_req(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	struct rdmap_read_req rr;
	if (!rx_untagged_body(qp, s, DDP_QN_READ_REQ, &rr, sizeof(rr)))
		return false;
	struct irq_entry e = {.sink_stag = be32toh(rr.sink_stag),
			      .sink_to = be64toh(rr.sink_to),
			      .size = be32toh(rr.read_size)};
	struct uiw_term t = {.has_seg = true, .seg = *s, .has_rreq = true, .rreq = rr};
	pthread_mutex_lock(&qp->lock);
	/* a zero-length Read (the Read RTR) is answered even with IRD 0 */
	uint32_t limit = qp->ird ? qp->ird : (e.size == 0 ? 1 : 0);
	bool full = irq_full(qp, limit);
	pthread_mutex_unlock(&qp->lock);
	if (full) {
		/* RFC 5040 §6.5: more outstanding Reads than the negotiated IRD */
		t.layer = RDMAP_LAYER_DDP;
		t.etype = DDP_ETYPE_UNTAGGED;
		t.ecode = DDP_UNTAGGED_MSN_RANGE;
		uiw_terminate(qp, &t);
		return false;
	}
	if (e.size) {
		uint32_t src_stag = be32toh(rr.src_stag);
		uint64_t src_to = be64toh(rr.src_to);
		struct uiw_mr_int *mr = uiw_mr_get(src_stag);
		t.layer = RDMAP_LAYER_RDMAP;
		t.etype = RDMAP_ETYPE_REMOTE_PROT;
		if (!mr) {
			t.ecode = RDMAP_ECODE_INVALID_STAG;
		} else if (mr->pub.pd != qp->pd) {
			t.ecode = RDMAP_ECODE_STAG_NOT_ASSOC;
		} else if (!(mr->pub.access & UIW_ACCESS_REMOTE_READ)) {
			t.ecode = RDMAP_ECODE_ACCESS;
		} else if (src_to + e.size < src_to) {
			t.ecode = RDMAP_ECODE_TO_WRAP;
		} else if (src_to < mr->pub.iova || src_to - mr->pub.iova > mr->pub.length ||
			   e.size > mr->pub.length - (src_to - mr->pub.iova)) {
			t.ecode = RDMAP_ECODE_BASE_BOUNDS;
		} else {
			e.src = mr;
			e.src_ptr = (uint8_t *)mr->pub.addr + (src_to - mr->pub.iova);
		}
		if (!e.src) {
			uiw_mr_put(mr);
			uiw_terminate(qp, &t);
			return false;
		}
	}
	pthread_mutex_lock(&qp->lock);
	if (qp->state == UIW_QPS_ERR) {
		pthread_mutex_unlock(&qp->lock);
		uiw_mr_put(e.src);
		return false;
	}
	qp->irq[qp->irq_tail++ % qp->irq_size] = e;
	qp->tx_kick = qp->tx_wake = true;
	pthread_cond_broadcast(&qp->cond);
	pthread_mutex_unlock(&qp->lock);
	return true;
}

static bool rx_terminate(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	uint8_t buf[RDMAP_TERM_MAX_PAYLOAD + 64];
	uint32_t n = s->payload_len < sizeof(buf) ? s->payload_len : sizeof(buf);
	struct iovec v = {.iov_base = buf, .iov_len = n};
	if (ddp_rx_payload(&qp->mpa, &v, 1, n) == 0 && n == s->payload_len)
		(void)ddp_rx_end(&qp->mpa);
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
	if (qp->state != UIW_QPS_ERR)
		uiw_qp_flush_locked(qp);
	pthread_mutex_unlock(&qp->lock);
	/* RFC 5040 §6.3: after a Terminate the stream is closed */
	if (qp->llp)
		qp->llp->ops->shutdown_send(qp->llp);
	uiw_qp_report(qp, UIW_QP_EV_TERMINATE);
	return false;
}

/* Handles one segment; false when the stream is finished with. */
static bool rx_segment(struct uiw_qp *qp, const struct ddp_rx_seg *s)
{
	int ec = ddp_check_version(s);
	if (ec) {
		term_seg(qp,
			 TERM(RDMAP_LAYER_DDP, s->tagged ? DDP_ETYPE_TAGGED : DDP_ETYPE_UNTAGGED,
			      (uint8_t)ec),
			 s);
		return false;
	}
	if ((s->ulp_ctrl >> RDMAP_VERSION_SHIFT) != RDMAP_VERSION) {
		term_seg(
		    qp, TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_BAD_VERSION), s);
		return false;
	}
	uint8_t op = s->ulp_ctrl & RDMAP_OPCODE_MASK;
	bool tagged_op = op == RDMAP_RDMA_WRITE || op == RDMAP_RDMA_READ_RESP;
	uint8_t max_op = (qp->caps & UIW_CAP_RFC7306) ? RDMAP_ATOMIC_RESP : RDMAP_TERMINATE;
	if (op > max_op || tagged_op != s->tagged) {
		term_seg(qp,
			 TERM(RDMAP_LAYER_RDMAP, RDMAP_ETYPE_REMOTE_OP, RDMAP_ECODE_UNEXPECTED_OP),
			 s);
		return false;
	}
	if (!s->tagged) {
		static const uint8_t qn_of[16] = {
		    [RDMAP_RDMA_READ_REQ] = DDP_QN_READ_REQ,
		    [RDMAP_TERMINATE] = DDP_QN_TERMINATE,
		    [RDMAP_ATOMIC_REQ] = RDMAP_QN_ATOMIC_REQ,
		    [RDMAP_ATOMIC_RESP] = RDMAP_QN_ATOMIC_RESP,
		};
		if (s->qn != qn_of[op]) {
			term_seg(qp,
				 TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED, DDP_UNTAGGED_INVALID_QN),
				 s);
			return false;
		}
	}
	switch (op) {
	case RDMAP_RDMA_WRITE:
		return rx_write(qp, s);
	case RDMAP_RDMA_READ_RESP:
		return rx_read_resp(qp, s);
	case RDMAP_RDMA_READ_REQ:
		return rx_read_req(qp, s);
	case RDMAP_TERMINATE:
		return rx_terminate(qp, s);
	case RDMAP_IMMEDIATE:
	case RDMAP_IMMEDIATE_SE:
		return rx_immediate(qp, s, op);
	case RDMAP_ATOMIC_REQ:
		return rx_atomic_req(qp, s);
	case RDMAP_ATOMIC_RESP:
		return rx_atomic_resp(qp, s);
	default:
		return rx_send(qp, s, op);
	}
}

/* With UIWARP_RX_SPIN_US, waits for the next bytes by polling the stream
 * instead of sleeping in recv (a sleeping thread costs a cross-CPU wakeup,
 * 30-40 us on this kind of VM). Bounded by the configured time. */
static void rx_spin(struct uiw_qp *qp, int spin_us)
{
	if (qp->mpa.rb_len || qp->llp->fd < 0)
		return;
	uint64_t end = now_ns() + (uint64_t)spin_us * 1000u;
	struct pollfd p = {.fd = qp->llp->fd, .events = POLLIN};
	do {
		if (poll(&p, 1, 0) != 0)
			return;
	} while (now_ns() < end);
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

void *uiw_rx_thread(void *arg)
{
	struct uiw_qp *qp = arg;
	struct ddp_rx_seg s;
	bool clean_eof = false;
	int spin_us = uiw_config_get()->rx_spin_us;
	for (;;) {
		if (spin_us)
			rx_spin(qp, spin_us);
		int r = ddp_rx_header(&qp->mpa, &s);
		if (r == 0) {
			clean_eof = true;
			pthread_mutex_lock(&qp->lock);
			uiw_qp_set_close_reason(qp, UIW_CLOSE_GRACEFUL);
			pthread_mutex_unlock(&qp->lock);
			break;
		}
		if (r < 0) {
			if (r == -EPROTO && qp->mpa.rx_term == MPA_TERM_MARKER)
				/* RFC 5044 §5: a marker that does not point at the FPDU */
				uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_MARKER));
			else if (r == -EPROTO)
				uiw_terminate(qp, &TERM(RDMAP_LAYER_DDP, DDP_ETYPE_UNTAGGED,
							DDP_UNTAGGED_INVALID_MO));
			else
				place_failed(qp, r);
			break;
		}
		if (!qp->rx_seen_first && !rtr_matches(qp, &s)) {
			uiw_terminate(qp, &TERM(RDMAP_LAYER_LLP, 0, MPA_TERM_NO_MATCHING_RTR));
			break;
		}
		if (!qp->rx_seen_first) {
			pthread_mutex_lock(&qp->lock);
			qp->rx_seen_first = true;
			/* RFC 5044 §7.1.2: a responder sends nothing before the
			 * initiator's first FPDU (the RTR in peer-to-peer mode) */
			qp->tx_gate_open = true;
			qp->tx_kick = qp->tx_wake = true;
			pthread_cond_broadcast(&qp->cond);
			pthread_mutex_unlock(&qp->lock);
		}
		if (!rx_segment(qp, &s))
			break;
		qp->mpa.rx_fpdus++;
	}
	if (clean_eof) {
		/* The peer half-closed: Read Requests it sent before its FIN
		 * still get their Read Responses (bounded: 2 s). */
		uint64_t end = now_ns() + 2000000000ull;
		pthread_mutex_lock(&qp->lock);
		while ((qp->irq_head != qp->irq_tail || qp->irq_busy) && qp->state != UIW_QPS_ERR &&
		       now_ns() < end) {
			qp->tx_kick = qp->tx_wake = true;
			pthread_cond_broadcast(&qp->cond);
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 20 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&qp->cond, &qp->lock, &ts);
		}
		pthread_mutex_unlock(&qp->lock);
	}
	/* A send in flight may already be delivered: let it finish and
	 * complete its WQEs before the rest is flushed (bounded: the peer may
	 * have stopped reading). */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2;
	bool tx_locked = pthread_mutex_timedlock(&qp->tx_lock, &ts) == 0;
	pthread_mutex_lock(&qp->lock);
	bool was_err = qp->state == UIW_QPS_ERR;
	if (!was_err)
		uiw_qp_flush_locked(qp);
	qp->rx_ended = true; /* wakes uiw_accept waiting for the RTR */
	pthread_cond_broadcast(&qp->cond);
	pthread_mutex_unlock(&qp->lock);
	if (tx_locked)
		pthread_mutex_unlock(&qp->tx_lock);
	/* RFC 5040 §6: the peer closed (or the stream broke): close our side */
	if (qp->llp)
		qp->llp->ops->shutdown_send(qp->llp);
	pthread_mutex_lock(&qp->lock);
	bool fatal = qp->local_fatal;
	pthread_mutex_unlock(&qp->lock);
	if (fatal)
		uiw_qp_report(qp, UIW_QP_EV_FATAL); /* a send WR failed locally (tx.c) */
	uiw_qp_report(qp, UIW_QP_EV_DISCONNECTED);
	return NULL;
}
