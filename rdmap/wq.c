/* Work queues: the send and receive queue rings of a QP, shared receive
 * queues, posting, retiring completed WQEs in order, and the flush
 * (RFC 5040 §5 data transfer, §6 stream management; verbs semantics).
 *
 * Ring indices are free-running uint32 counters; sizes are powers of two.
 * A send WQE is queued by a post, handed to the send side (tx.c), done
 * when its bytes are in the stream (Send, Write) or its response arrived
 * (Read, Atomic), and retired in order, its CQE pushed if signaled or
 * failed. A send-queue slot comes free when the completion covering it is
 * polled (cq.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap/internal.h"
#include "rdmap/stat.h"
#include "util/thread.h"

static uint32_t pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

static enum uiw_wc_opcode wc_opcode_of(enum uiw_wr_opcode op)
{
	switch (op) {
	case UIW_WR_RDMA_WRITE:
	case UIW_WR_RDMA_WRITE_WITH_IMM:
		return UIW_WC_RDMA_WRITE;
	case UIW_WR_RDMA_READ:
		return UIW_WC_RDMA_READ;
	case UIW_WR_ATOMIC_CMP_AND_SWP:
		return UIW_WC_COMP_SWAP;
	case UIW_WR_ATOMIC_FETCH_AND_ADD:
		return UIW_WC_FETCH_ADD;
	case UIW_WR_BIND_MW:
		return UIW_WC_BIND_MW;
	case UIW_WR_LOCAL_INV:
		return UIW_WC_LOCAL_INV;
	default:
		return UIW_WC_SEND;
	}
}

/* Pushes a send CQE that frees credits send-queue slots when polled. */
static void push_send_cqe(struct uiw_qp *qp, const struct uiw_send_wr *wr,
			  enum uiw_wc_status status, uint32_t byte_len, uint32_t credits)
{
	struct uiw_wc wc = {
	    .wr_id = wr->wr_id,
	    .status = status,
	    .opcode = wc_opcode_of(wr->opcode),
	    .byte_len = byte_len,
	    .qp_num = qp->qpn,
	    .qp_ctx = qp->ctx,
	    .qp_int = qp,
	    .sq_credits = credits,
	};
	if (!uiw_cq_push(qp->scq, &wc, false) && credits)
		/* a lost CQE (CQ overflow) must not leave its slots taken */
		atomic_fetch_add(&qp->sq_polled, credits);
}

/* See rdmap/internal.h. */
void uiw_sq_flush_posted(struct uiw_qp *qp, const struct uiw_send_wr *wr)
{
	push_send_cqe(qp, wr, UIW_WC_WR_FLUSH_ERR, 0, 0);
	UIW_STAT_ADD(qp->stat->s->c.flushed_wrs, 1);
}

/* Retires the WQE at sq_head (its CQE if signaled or failed). */
static void sq_retire(struct uiw_qp *qp, struct sq_wqe *w)
{
	qp->sq_uncredited++;
	if (w->status == UIW_WC_SUCCESS) {
		UIW_STAT_ADD(qp->stat->s->c.sq_wrs, 1);
		UIW_STAT_ADD(qp->stat->s->c.sq_bytes, w->len);
	} else if (w->status == UIW_WC_WR_FLUSH_ERR) {
		UIW_STAT_ADD(qp->stat->s->c.flushed_wrs, 1);
	}
	if (w->signaled || w->status != UIW_WC_SUCCESS) {
		push_send_cqe(qp, &w->wr, w->status, (uint32_t)w->len, qp->sq_uncredited);
		qp->sq_uncredited = 0;
	}
	qp->sq_head++;
}

/* See rdmap/internal.h. */
void uiw_sq_reap(struct uiw_qp *qp)
{
	uint32_t mask = qp->sq_size - 1;
	while (qp->sq_head != qp->sq_next) {
		struct sq_wqe *w = &qp->sq[qp->sq_head & mask];
		if (w->st != WQE_DONE)
			break;
		sq_retire(qp, w);
	}
}

/* See rdmap/internal.h. */
void uiw_irq_clear(struct uiw_qp *qp)
{
	for (uint32_t i = qp->irq_head; i != qp->irq_tail; i++)
		uiw_mr_put(qp->irq[i % qp->irq_size].src);
	qp->irq_head = qp->irq_next = qp->irq_tail;
}

static void push_recv_flush(struct uiw_qp *qp, uint64_t wr_id)
{
	struct uiw_wc wc = {.wr_id = wr_id,
			    .status = UIW_WC_WR_FLUSH_ERR,
			    .opcode = UIW_WC_RECV,
			    .qp_num = qp->qpn,
			    .qp_ctx = qp->ctx};
	uiw_cq_push(qp->rcq, &wc, false);
	UIW_STAT_ADD(qp->stat->s->c.flushed_wrs, 1);
}

/* See rdmap/internal.h. Responses whose bytes are being handed to the
 * stream keep their MR references until the send side is done with them
 * (tx.c); queued ones are dropped. */
void uiw_qp_flush_locked(struct uiw_qp *qp)
{
	uint32_t smask = qp->sq_size - 1, rmask = qp->rq_size - 1;
	qp->state = UIW_QPS_ERR;
	/* send queue: retire in order, everything not done is flushed */
	while (qp->sq_head != qp->sq_tail) {
		struct sq_wqe *w = &qp->sq[qp->sq_head & smask];
		if (w->st != WQE_DONE)
			w->status = UIW_WC_WR_FLUSH_ERR;
		w->st = WQE_DONE;
		sq_retire(qp, w);
	}
	qp->sq_next = qp->sq_tail = qp->sq_head;
	if (qp->rx_send_active) {
		/* the receive WQE of a Send in progress (taken from the RQ or SRQ) */
		push_recv_flush(qp, qp->rx_cur.wr_id);
		qp->rx_send_active = false;
	}
	while (qp->rq_head != qp->rq_tail) {
		push_recv_flush(qp, qp->rq[qp->rq_head & rmask].wr_id);
		qp->rq_head++;
	}
	for (uint32_t i = qp->irq_next; i != qp->irq_tail; i++)
		uiw_mr_put(qp->irq[i % qp->irq_size].src);
	qp->irq_tail = qp->irq_next;
	qp->orq_head = qp->orq_tail;
	pthread_cond_broadcast(&qp->cond);
}

/* Fills a WQE from a WR; returns 0 or -EINVAL / -EOPNOTSUPP, with errors
 * the verbs report as a completion (bad lkey) left in w->status. */
static int wqe_fill(struct uiw_qp *qp, struct sq_wqe *w, const struct uiw_send_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return -EINVAL;
	bool ext = qp->caps & UIW_CAP_RFC7306;
	switch (wr->opcode) {
	case UIW_WR_SEND:
	case UIW_WR_SEND_WITH_INV:
	case UIW_WR_RDMA_WRITE:
		break;
	case UIW_WR_RDMA_WRITE_WITH_IMM:
		/* RFC 7306 §5.2: an RDMA Write followed by Immediate Data */
		if (!ext)
			return -EOPNOTSUPP;
		break;
	case UIW_WR_SEND_WITH_IMM:
		/* iWARP has no Send with immediate data (as irdma) */
		return -EOPNOTSUPP;
	case UIW_WR_BIND_MW:
	case UIW_WR_LOCAL_INV:
		/* local operations, executed in send-queue order (tx.c) */
		if (wr->num_sge != 0)
			return -EINVAL;
		break;
	case UIW_WR_RDMA_READ:
		if (wr->num_sge > 1 || (wr->flags & UIW_SEND_INLINE))
			return -EINVAL;
		break;
	case UIW_WR_ATOMIC_CMP_AND_SWP:
	case UIW_WR_ATOMIC_FETCH_AND_ADD:
		/* RFC 7306 §5.3: one 8-byte result buffer, an aligned target */
		if (!ext)
			return -EOPNOTSUPP;
		if (wr->num_sge != 1 || wr->sg_list[0].length != 8 ||
		    (wr->flags & UIW_SEND_INLINE) || (wr->remote_addr & 7))
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	bool sink = wr->opcode == UIW_WR_RDMA_READ || wr->opcode == UIW_WR_ATOMIC_CMP_AND_SWP ||
		    wr->opcode == UIW_WR_ATOMIC_FETCH_AND_ADD;
	w->wr = *wr;
	if (wr->num_sge)
		memcpy(w->sge, wr->sg_list, sizeof(struct uiw_sge) * (size_t)wr->num_sge);
	w->wr.sg_list = w->sge;
	w->signaled = qp->sq_sig_all || (wr->flags & UIW_SEND_SIGNALED);
	w->status = UIW_WC_SUCCESS;
	w->st = WQE_QUEUED;
	w->len = 0;
	w->niov = 0;
	if (wr->flags & UIW_SEND_INLINE) {
		size_t off = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (off + w->sge[i].length > qp->max_inline)
				return -EINVAL;
			memcpy(w->inl + off, (const void *)(uintptr_t)w->sge[i].addr,
			       w->sge[i].length);
			off += w->sge[i].length;
		}
		w->len = off;
		if (off) {
			w->iov[0].iov_base = w->inl;
			w->iov[0].iov_len = off;
			w->niov = 1;
		}
		return 0;
	}
	for (int i = 0; i < wr->num_sge; i++) {
		enum uiw_wc_status st;
		if (w->sge[i].length == 0)
			continue;
		void *p = uiw_sge_resolve(qp->pd, &w->sge[i], sink, &st);
		if (!p) {
			w->status = st;
			w->st = WQE_DONE;
			return 0;
		}
		w->iov[w->niov].iov_base = p;
		w->iov[w->niov++].iov_len = w->sge[i].length;
		w->len += w->sge[i].length;
	}
	/* A Read sink needs LOCAL_WRITE (uiw_sge_resolve above), not
	 * REMOTE_WRITE: as on siw (siw_proc_rresp checks the sink for
	 * IB_ACCESS_LOCAL_WRITE), and tgt's iSER target registers the buffers
	 * it reads initiators' write data into with LOCAL_WRITE only. The Read
	 * Response is still placed only into the sink STag of the outstanding
	 * Read, within what it asked (rx.c read_resp_begin), so the STag is
	 * open to no other write. */
	return 0;
}

int uiw_qp_post_send(struct uiw_qp *qp, const struct uiw_send_wr *wr, int n, int *bad)
{
	int rc = 0, i = 0;
	pthread_mutex_lock(&qp->lock);
	if (qp->state == UIW_QPS_ERR) {
		/* verbs: WRs posted in ERR complete with a flush error */
		for (; i < n; i++)
			uiw_sq_flush_posted(qp, &wr[i]);
		pthread_mutex_unlock(&qp->lock);
		return 0;
	}
	if (qp->state != UIW_QPS_RTS || !qp->connected) {
		pthread_mutex_unlock(&qp->lock);
		*bad = 0;
		return -EINVAL;
	}
	for (; i < n; i++) {
		/* a slot is free once its completion has been polled (verbs) */
		if (qp->sq_tail - atomic_load(&qp->sq_polled) >= qp->sq_size) {
			rc = -ENOMEM;
			break;
		}
		struct sq_wqe *w = &qp->sq[qp->sq_tail & (qp->sq_size - 1)];
		rc = wqe_fill(qp, w, &wr[i]);
		if (rc)
			break;
		qp->sq_tail++;
	}
	pthread_mutex_unlock(&qp->lock);
	if (rc)
		*bad = i;
	if (i > 0) {
		int cs = uiw_nocancel_begin(); /* a post is no cancellation point */
		uiw_progress(qp, PROG_TX, ROLE_POSTER);
		uiw_nocancel_end(cs);
	}
	return rc;
}

/* See rdmap/internal.h. Zero-length SGEs are skipped. Each SGE is copied
 * out with memcpy, as the send path copies its list: a caller's list need
 * not be aligned (libiscsi's iSER receive descriptors are packed structs
 * with the ibv_sge at a 4-byte offset). */
enum uiw_wc_status uiw_rq_wqe_fill(struct rq_wqe *r, struct uiw_pd *pd,
				   const struct uiw_recv_wr *wr)
{
	r->wr_id = wr->wr_id;
	r->niov = 0;
	r->len = 0;
	for (int k = 0; k < wr->num_sge; k++) {
		enum uiw_wc_status st;
		struct uiw_sge sge;
		memcpy(&sge, (const char *)wr->sg_list + (size_t)k * sizeof(sge), sizeof(sge));
		if (sge.length == 0)
			continue;
		void *p = uiw_sge_resolve(pd, &sge, true, &st);
		if (!p)
			return st;
		r->iov[r->niov].iov_base = p;
		r->iov[r->niov++].iov_len = sge.length;
		r->len += sge.length;
	}
	return UIW_WC_SUCCESS;
}

int uiw_qp_post_recv(struct uiw_qp *qp, const struct uiw_recv_wr *wr, int n, int *bad)
{
	int rc = 0, i = 0;
	if (qp->srq) {
		*bad = 0;
		return -EINVAL; /* verbs: receives go to the SRQ */
	}
	pthread_mutex_lock(&qp->lock);
	for (; i < n; i++) {
		if (wr[i].num_sge < 0 || (uint32_t)wr[i].num_sge > qp->max_recv_sge) {
			rc = -EINVAL;
			break;
		}
		if (qp->state == UIW_QPS_ERR) {
			push_recv_flush(qp, wr[i].wr_id);
			continue;
		}
		if (qp->rq_tail - qp->rq_head >= qp->rq_size) {
			rc = -ENOMEM;
			break;
		}
		enum uiw_wc_status st =
		    uiw_rq_wqe_fill(&qp->rq[qp->rq_tail & (qp->rq_size - 1)], qp->pd, &wr[i]);
		if (st != UIW_WC_SUCCESS) {
			/* a bad receive SGE: report it as a completion error */
			struct uiw_wc wc = {.wr_id = wr[i].wr_id,
					    .status = st,
					    .opcode = UIW_WC_RECV,
					    .qp_num = qp->qpn,
					    .qp_ctx = qp->ctx};
			uiw_cq_push(qp->rcq, &wc, false);
			continue;
		}
		qp->rq_tail++;
	}
	pthread_mutex_unlock(&qp->lock);
	if (rc)
		*bad = i;
	/* a Send waits for a receive WR (rx.c rq_wait): take it up now */
	if (i > 0 && atomic_load(&qp->rx_rq_waiting)) {
		int cs = uiw_nocancel_begin(); /* a post is no cancellation point */
		uiw_progress(qp, PROG_RX, ROLE_POSTER);
		uiw_nocancel_end(cs);
	}
	return rc;
}

/* See rdmap/internal.h. */
bool uiw_rq_take(struct uiw_qp *qp)
{
	if (!qp->srq) {
		if (qp->rq_head == qp->rq_tail)
			return false;
		qp->rx_cur = qp->rq[qp->rq_head & (qp->rq_size - 1)];
		qp->rq_head++;
	} else {
		struct uiw_srq *q = qp->srq;
		uiw_srq_limit_fn low = NULL;
		pthread_mutex_lock(&q->lock);
		bool have = q->head != q->tail;
		if (have) {
			qp->rx_cur = q->rq[q->head++ & (q->size - 1)];
			/* verbs SRQ limit: fires once, then disarms */
			if (q->limit && q->tail - q->head < q->limit) {
				q->limit = 0;
				low = q->limit_fn;
			}
		}
		void *low_ctx = q->limit_ctx;
		pthread_mutex_unlock(&q->lock);
		if (low)
			low(q, low_ctx);
		if (!have)
			return false;
	}
	qp->rx_send_active = true;
	return true;
}

/* See rdmap/internal.h. */
void uiw_rq_complete(struct uiw_qp *qp, struct uiw_wc *wc, bool solicited)
{
	wc->wr_id = qp->rx_cur.wr_id;
	wc->qp_num = qp->qpn;
	wc->qp_ctx = qp->ctx;
	qp->rx_send_active = false;
	if (wc->status == UIW_WC_SUCCESS) {
		UIW_STAT_ADD(qp->stat->s->c.rq_wrs, 1);
		UIW_STAT_ADD(qp->stat->s->c.rq_bytes, wc->byte_len);
	}
	uiw_cq_push(qp->rcq, wc, solicited);
}

/* ------------------------------------------------------------------ SRQ */

int uiw_srq_create(struct uiw_pd *pd, uint32_t *max_wr, uint32_t *max_sge, struct uiw_srq **out)
{
	if (!pd || *max_wr > UIW_MAX_QP_WR || *max_sge > UIW_MAX_SGE)
		return -EINVAL;
	struct uiw_srq *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->size = pow2(*max_wr ? *max_wr : 1);
	q->rq = calloc(q->size, sizeof(*q->rq));
	if (!q->rq) {
		free(q);
		return -ENOMEM;
	}
	q->max_sge = *max_sge ? *max_sge : 1;
	q->pd = pd;
	pthread_mutex_init(&q->lock, NULL);
	atomic_fetch_add(&pd->refs, 1);
	*max_wr = q->size;
	*max_sge = q->max_sge;
	*out = q;
	return 0;
}

int uiw_srq_destroy(struct uiw_srq *q)
{
	if (atomic_load(&q->users) > 0)
		return -EBUSY;
	atomic_fetch_sub(&q->pd->refs, 1);
	pthread_mutex_destroy(&q->lock);
	free(q->rq);
	free(q);
	return 0;
}

int uiw_srq_post_recv(struct uiw_srq *q, const struct uiw_recv_wr *wr, int n, int *bad)
{
	int rc = 0, i = 0;
	pthread_mutex_lock(&q->lock);
	for (; i < n; i++) {
		if (wr[i].num_sge < 0 || (uint32_t)wr[i].num_sge > q->max_sge) {
			rc = -EINVAL;
			break;
		}
		if (q->tail - q->head >= q->size) {
			rc = -ENOMEM;
			break;
		}
		if (uiw_rq_wqe_fill(&q->rq[q->tail & (q->size - 1)], q->pd, &wr[i]) !=
		    UIW_WC_SUCCESS) {
			rc = -EINVAL; /* no CQ to report it on: the post fails */
			break;
		}
		q->tail++;
	}
	pthread_mutex_unlock(&q->lock);
	if (rc)
		*bad = i;
	return rc;
}

int uiw_srq_set_limit(struct uiw_srq *q, uint32_t limit, uiw_srq_limit_fn fn, void *ctx)
{
	pthread_mutex_lock(&q->lock);
	q->limit = limit;
	q->limit_fn = fn;
	q->limit_ctx = ctx;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

uint32_t uiw_srq_count(struct uiw_srq *q)
{
	pthread_mutex_lock(&q->lock);
	uint32_t c = q->tail - q->head;
	pthread_mutex_unlock(&q->lock);
	return c;
}
