/* The send side of a QP: turns queued WRs and inbound Read Requests into
 * DDP messages (RFC 5040 §4.3-§4.6) gathered into one MPA batch, sent with
 * as few syscalls as the batch allows.
 *
 * Whoever holds tx_lock sends; a poster that finds it busy leaves its WRs
 * queued with tx_kick set and the holder picks them up before it lets go.
 * Send and RDMA Write WRs complete when their bytes are handed to the stream
 * (as in siw); an RDMA Read completes when its Read Response has arrived.
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

/* Is there something the send side may do now? qp->lock held. */
static bool tx_has_work(struct uiw_qp *qp)
{
	if (qp->state == UIW_QPS_ERR || qp->tx_stop)
		return false;
	if (qp->irq_head != qp->irq_tail)
		return true;
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
	bool needs_orq = w->wr.opcode == UIW_WR_RDMA_READ ||
			 w->wr.opcode == UIW_WR_ATOMIC_CMP_AND_SWP ||
			 w->wr.opcode == UIW_WR_ATOMIC_FETCH_AND_ADD;
	if (needs_orq &&
	    (qp->orq_tail - qp->orq_head >= qp->ord || qp->orq_tail - qp->orq_head >= qp->orq_size))
		return false;
	return true;
}

/* Appends one SQ WQE's message to the batch. qp->lock not held. */
static int tx_wqe(struct uiw_qp *qp, struct sq_wqe *w, uint32_t msn)
{
	struct ddp_msg m = {.iov = w->iov, .niov = w->niov, .len = w->len};
	static __thread struct iovec v;
	switch (w->wr.opcode) {
	case UIW_WR_RDMA_WRITE_WITH_IMM: {
		/* RFC 7306 §5.2: the Write, then Immediate Data on QN 0 */
		m.tagged = true;
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_WRITE);
		m.stag = w->wr.rkey;
		m.to = w->wr.remote_addr;
		int rc = ddp_send_message(&qp->mpa, qp->batch, &m);
		if (rc)
			return rc;
		memset(w->imm, 0, sizeof(w->imm));
		memcpy(w->imm, &w->wr.imm_data, 4);
		v.iov_base = w->imm;
		v.iov_len = sizeof(w->imm);
		struct ddp_msg im = {.ulp_ctrl = rdmap_ctrl((w->wr.flags & UIW_SEND_SOLICITED)
								? RDMAP_IMMEDIATE_SE
								: RDMAP_IMMEDIATE),
				     .qn = DDP_QN_SEND,
				     .msn = msn,
				     .iov = &v,
				     .niov = 1,
				     .len = sizeof(w->imm)};
		return ddp_send_message(&qp->mpa, qp->batch, &im);
	}
	case UIW_WR_ATOMIC_CMP_AND_SWP:
	case UIW_WR_ATOMIC_FETCH_AND_ADD: {
		/* RFC 7306 §5.3: the Atomic Request, kept in the WQE until sent */
		struct rdmap_atomic_req *ar = (void *)w->inl;
		bool cas = w->wr.opcode == UIW_WR_ATOMIC_CMP_AND_SWP;
		memset(ar, 0, sizeof(*ar));
		ar->aopcode = htobe32(cas ? RDMAP_AOP_CMP_SWAP : RDMAP_AOP_FETCH_ADD);
		ar->req_id = htobe32(w->req_id);
		ar->stag = htobe32(w->wr.rkey);
		ar->to = htobe64(w->wr.remote_addr);
		ar->add_swap = htobe64(cas ? w->wr.swap : w->wr.compare_add);
		ar->add_swap_mask = htobe64(cas ? ~0ull : 0);
		ar->compare = htobe64(cas ? w->wr.compare_add : 0);
		ar->compare_mask = htobe64(cas ? ~0ull : 0);
		m.ulp_ctrl = rdmap_ctrl(RDMAP_ATOMIC_REQ);
		m.qn = RDMAP_QN_ATOMIC_REQ;
		m.msn = msn;
		v.iov_base = ar;
		v.iov_len = sizeof(*ar);
		m.iov = &v;
		m.niov = 1;
		m.len = sizeof(*ar);
		break;
	}
	case UIW_WR_RDMA_WRITE:
		m.tagged = true;
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_WRITE);
		m.stag = w->wr.rkey;
		m.to = w->wr.remote_addr;
		break;
	case UIW_WR_SEND:
	case UIW_WR_SEND_WITH_INV: {
		bool se = w->wr.flags & UIW_SEND_SOLICITED;
		bool inv = w->wr.opcode == UIW_WR_SEND_WITH_INV;
		enum rdmap_opcode op = inv ? (se ? RDMAP_SEND_SE_INV : RDMAP_SEND_INV)
					   : (se ? RDMAP_SEND_SE : RDMAP_SEND);
		m.ulp_ctrl = rdmap_ctrl(op);
		m.ulp_rsvd = inv ? w->wr.invalidate_rkey : 0;
		m.qn = DDP_QN_SEND;
		m.msn = msn;
		break;
	}
	case UIW_WR_RDMA_READ: {
		/* RFC 5040 §4.4: the Read Request body, kept in the WQE until sent */
		struct rdmap_read_req *rr = (void *)w->inl;
		rr->sink_stag = htobe32(w->sge[0].lkey);
		rr->sink_to = htobe64(w->sge[0].addr);
		rr->read_size = htobe32((uint32_t)w->len);
		rr->src_stag = htobe32(w->wr.rkey);
		rr->src_to = htobe64(w->wr.remote_addr);
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_REQ);
		m.qn = DDP_QN_READ_REQ;
		m.msn = msn;
		v.iov_base = rr;
		v.iov_len = sizeof(*rr);
		m.iov = &v;
		m.niov = 1;
		m.len = sizeof(*rr);
		break;
	}
	default:
		return -EINVAL;
	}
	return ddp_send_message(&qp->mpa, qp->batch, &m);
}

/* Sends until no work is left. tx_lock held. */
static void tx_drain(struct uiw_qp *qp)
{
	for (;;) {
		pthread_mutex_lock(&qp->lock);
		if (!tx_has_work(qp)) {
			pthread_mutex_unlock(&qp->lock);
			return;
		}
		uint32_t first = qp->sq_next, last = first;
		struct irq_entry ir[8];
		int nir = 0;
		while (qp->irq_head != qp->irq_tail && nir < 8)
			ir[nir++] = qp->irq[qp->irq_head++ % qp->irq_size];
		qp->irq_busy += (uint32_t)nir; /* still counted against IRD */
		/* take every sendable WQE now, up to one batch worth */
		struct {
			struct sq_wqe *w;
			uint32_t msn;
		} take[MPA_TX_MAX_FPDU];
		int nt = 0;
		bool local_fail = false;
		while (nt < MPA_TX_MAX_FPDU && tx_has_work(qp) && qp->sq_next != qp->sq_tail) {
			struct sq_wqe *w = &qp->sq[qp->sq_next & (qp->sq_size - 1)];
			qp->sq_next++;
			if (w->wr.opcode == UIW_WR_BIND_MW || w->wr.opcode == UIW_WR_LOCAL_INV) {
				/* local: takes effect in order, nothing on the wire */
				w->status = uiw_mem_local_op(qp->pd, &w->wr);
				w->st = WQE_DONE;
			}
			if (w->st == WQE_DONE) {
				/* failed at post (bad lkey, sink access) or a local
				 * operation: a failure ends the connection */
				if (w->status != UIW_WC_SUCCESS) {
					local_fail = true;
					break;
				}
				continue;
			}
			uint32_t msn = 0;
			enum uiw_wr_opcode op = w->wr.opcode;
			if (op == UIW_WR_RDMA_READ) {
				struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
				*o = (struct orq_entry){.sq_idx = qp->sq_next - 1,
							.sink_stag = w->sge[0].lkey,
							.sink_to = w->sge[0].addr,
							.size = (uint32_t)w->len};
				msn = qp->tx_msn[DDP_QN_READ_REQ]++;
			} else if (op == UIW_WR_ATOMIC_CMP_AND_SWP ||
				   op == UIW_WR_ATOMIC_FETCH_AND_ADD) {
				struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
				*o = (struct orq_entry){.atomic = true,
							.req_id = qp->tx_atomic_id++,
							.result = w->iov[0].iov_base,
							.sq_idx = qp->sq_next - 1};
				w->req_id = o->req_id;
				msn = qp->tx_msn[RDMAP_QN_ATOMIC_REQ]++;
			} else if (op != UIW_WR_RDMA_WRITE) {
				msn = qp->tx_msn[DDP_QN_SEND]++;
			}
			w->st = WQE_SENT;
			take[nt].w = w;
			take[nt++].msn = msn;
		}
		last = qp->sq_next;
		pthread_mutex_unlock(&qp->lock);

		int rc = 0;
		/* Read Responses first: the peer's Read is older than our new work */
		for (int i = 0; i < nir && !rc; i++) {
			if (ir[i].kind == IRQ_ATOMIC) {
				/* RFC 7306 §5.3: the Atomic Response on QN 3 */
				pthread_mutex_lock(&qp->lock);
				uint32_t amsn = qp->tx_msn[RDMAP_QN_ATOMIC_RESP]++;
				pthread_mutex_unlock(&qp->lock);
				struct iovec av = {.iov_base = &ir[i].aresp,
						   .iov_len = sizeof(ir[i].aresp)};
				struct ddp_msg am = {.ulp_ctrl = rdmap_ctrl(RDMAP_ATOMIC_RESP),
						     .qn = RDMAP_QN_ATOMIC_RESP,
						     .msn = amsn,
						     .iov = &av,
						     .niov = 1,
						     .len = sizeof(ir[i].aresp)};
				rc = ddp_send_message(&qp->mpa, qp->batch, &am);
				continue;
			}
			struct iovec v = {.iov_base = ir[i].src_ptr, .iov_len = ir[i].size};
			struct ddp_msg m = {.tagged = true,
					    .ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_RESP),
					    .stag = ir[i].sink_stag,
					    .to = ir[i].sink_to,
					    .iov = &v,
					    .niov = ir[i].size ? 1 : 0,
					    .len = ir[i].size};
			rc = ddp_send_message(&qp->mpa, qp->batch, &m);
		}
		for (int i = 0; i < nt && !rc; i++)
			rc = tx_wqe(qp, take[i].w, take[i].msn);
		if (!rc)
			rc = mpa_tx_flush(&qp->mpa, qp->batch);
		for (int i = 0; i < nir; i++)
			uiw_mr_put(ir[i].src);

		pthread_mutex_lock(&qp->lock);
		/* the responses are in the stream (or the stream is dead): they
		 * stop counting against IRD */
		qp->irq_busy -= (uint32_t)nir;
		if (nir)
			pthread_cond_broadcast(&qp->cond);
		if (rc) {
			mpa_tx_begin(qp->batch);
			if (qp->state != UIW_QPS_ERR)
				uiw_qp_flush_locked(qp);
			pthread_mutex_unlock(&qp->lock);
			if (qp->llp)
				qp->llp->ops->abort(qp->llp);
			return;
		}
		/* Sends and Writes are complete once handed to the stream */
		for (uint32_t i = first; i != last; i++) {
			if (i - qp->sq_head >= qp->sq_next - qp->sq_head)
				continue; /* flushed meanwhile */
			struct sq_wqe *w = &qp->sq[i & (qp->sq_size - 1)];
			bool waits = w->wr.opcode == UIW_WR_RDMA_READ ||
				     w->wr.opcode == UIW_WR_ATOMIC_CMP_AND_SWP ||
				     w->wr.opcode == UIW_WR_ATOMIC_FETCH_AND_ADD;
			if (w->st == WQE_SENT && !waits)
				w->st = WQE_DONE;
		}
		uiw_sq_reap(qp);
		if (local_fail && qp->state != UIW_QPS_ERR) {
			/* A send WR failed locally (bad lkey, Local Invalidate or
			 * Bind of an STag it may not touch). iWARP has no SQE
			 * state: as siw (siw_qp_sq_process), the connection is
			 * dropped without a Terminate (nothing the peer did is
			 * wrong), the failing WR keeps its error status, every
			 * later WR flushes, the QP goes to ERR and
			 * UIW_QP_EV_FATAL is reported (by the rx thread). The WRs
			 * before it were handed to the stream above. */
			uiw_qp_set_close_reason(qp, UIW_CLOSE_LOCAL_ABORT);
			qp->local_fatal = true;
			uiw_qp_flush_locked(qp);
			pthread_mutex_unlock(&qp->lock);
			if (qp->llp)
				qp->llp->ops->abort(qp->llp);
			return;
		}
		pthread_mutex_unlock(&qp->lock);
	}
}

void uiw_tx_progress(struct uiw_qp *qp)
{
	for (int rounds = 0; rounds < 1000000; rounds++) {
		if (pthread_mutex_trylock(&qp->tx_lock) != 0)
			return; /* the holder re-checks for our work before letting go */
		pthread_mutex_lock(&qp->lock);
		qp->tx_kick = false;
		pthread_mutex_unlock(&qp->lock);
		tx_drain(qp);
		pthread_mutex_unlock(&qp->tx_lock);
		pthread_mutex_lock(&qp->lock);
		bool again = qp->tx_kick && tx_has_work(qp);
		pthread_mutex_unlock(&qp->lock);
		if (!again)
			return;
	}
}

void *uiw_tx_thread(void *arg)
{
	struct uiw_qp *qp = arg;
	pthread_mutex_lock(&qp->lock);
	for (;;) {
		while (!qp->tx_stop && !(qp->tx_wake && tx_has_work(qp))) {
			qp->tx_wake = false;
			pthread_cond_wait(&qp->cond, &qp->lock);
		}
		if (qp->tx_stop)
			break;
		qp->tx_wake = false;
		pthread_mutex_unlock(&qp->lock);
		uiw_tx_progress(qp);
		pthread_mutex_lock(&qp->lock);
	}
	pthread_mutex_unlock(&qp->lock);
	return NULL;
}

int uiw_tx_send_rtr(struct uiw_qp *qp, uint8_t rtr)
{
	/* RFC 6581 §4: a zero-length RDMA Write or Read Request, with a
	 * non-zero STag (Chelsio refuses STag 0), sent before any ULP data. */
	struct ddp_msg m = {.tagged = false};
	struct rdmap_read_req rr = {0};
	struct iovec v = {.iov_base = &rr, .iov_len = sizeof(rr)};
	if (rtr == MPA_RTR_WRITE) {
		m.tagged = true;
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_WRITE);
		m.stag = UIW_RTR_STAG;
		m.to = 0;
	} else if (rtr == MPA_RTR_READ) {
		rr.src_stag = htobe32(UIW_RTR_STAG);
		m.ulp_ctrl = rdmap_ctrl(RDMAP_RDMA_READ_REQ);
		m.qn = DDP_QN_READ_REQ;
		m.iov = &v;
		m.niov = 1;
		m.len = sizeof(rr);
		pthread_mutex_lock(&qp->lock);
		m.msn = qp->tx_msn[DDP_QN_READ_REQ]++;
		struct orq_entry *o = &qp->orq[qp->orq_tail++ % qp->orq_size];
		o->sq_idx = UINT32_MAX;
		o->sink_stag = 0;
		o->sink_to = 0;
		o->size = 0;
		o->got = 0;
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
	pthread_mutex_lock(&qp->tx_lock);
	int rc = ddp_send_message(&qp->mpa, qp->batch, &m);
	if (!rc)
		rc = mpa_tx_flush(&qp->mpa, qp->batch);
	pthread_mutex_unlock(&qp->tx_lock);
	return rc;
}

/* Sends a Terminate message (RFC 5040 §4.8) if the send side can be had
 * within TERM_TX_WAIT_MS; best effort, as in siw. The QP is in ERR by now,
 * so the holder of tx_lock stops after the batch it is sending; that batch
 * may be blocked on a peer that does not read (Read Responses in flight
 * when it broke the IRD), hence the generous bound. */
#define TERM_TX_WAIT_MS 2000
int uiw_tx_send_terminate(struct uiw_qp *qp, const void *payload, size_t len)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += TERM_TX_WAIT_MS / 1000;
	ts.tv_nsec += (TERM_TX_WAIT_MS % 1000) * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_mutex_timedlock(&qp->tx_lock, &ts) != 0)
		return -EBUSY;
	pthread_mutex_lock(&qp->lock);
	uint32_t msn = qp->tx_msn[DDP_QN_TERMINATE]++;
	pthread_mutex_unlock(&qp->lock);
	struct iovec v = {.iov_base = (void *)payload, .iov_len = len};
	struct ddp_msg m = {.ulp_ctrl = rdmap_ctrl(RDMAP_TERMINATE),
			    .qn = DDP_QN_TERMINATE,
			    .msn = msn,
			    .iov = &v,
			    .niov = 1,
			    .len = len};
	mpa_tx_begin(qp->batch);
	int rc = ddp_send_message(&qp->mpa, qp->batch, &m);
	if (!rc)
		rc = mpa_tx_flush(&qp->mpa, qp->batch);
	pthread_mutex_unlock(&qp->tx_lock);
	return rc;
}
