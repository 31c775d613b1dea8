/* Queue pairs: send/receive queues, posting, completion order, flush, state
 * (RFC 5040 §5 data transfer, §6 RDMAP stream management; verbs QP states).
 *
 * Ring indices are free-running uint32 counters; sizes are powers of two.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap/internal.h"

static atomic_uint next_qpn = 1;

static uint32_t pow2(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

int uiw_qp_create(struct uiw_qp_init_attr *a, struct uiw_qp **out)
{
	if (!a->pd || !a->send_cq || !a->recv_cq)
		return -EINVAL;
	if (a->max_send_wr > UIW_MAX_QP_WR || a->max_recv_wr > UIW_MAX_QP_WR ||
	    a->max_send_sge > UIW_MAX_SGE || a->max_recv_sge > UIW_MAX_SGE ||
	    a->max_inline > UIW_MAX_INLINE)
		return -EINVAL;
	struct uiw_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	if (a->srq && a->srq->pd != a->pd)
		return -EINVAL;
	qp->sq_size = pow2(a->max_send_wr ? a->max_send_wr : 1);
	qp->rq_size = a->srq ? 1 : pow2(a->max_recv_wr ? a->max_recv_wr : 1);
	qp->orq_size = UIW_MAX_ORD;
	qp->irq_size = UIW_MAX_IRD;
	qp->sq = calloc(qp->sq_size, sizeof(*qp->sq));
	qp->rq = calloc(qp->rq_size, sizeof(*qp->rq));
	qp->orq = calloc(qp->orq_size, sizeof(*qp->orq));
	qp->irq = calloc(qp->irq_size, sizeof(*qp->irq));
	if (!qp->sq || !qp->rq || !qp->orq || !qp->irq) {
		free(qp->sq);
		free(qp->rq);
		free(qp->orq);
		free(qp->irq);
		free(qp);
		return -ENOMEM;
	}
	a->max_send_wr = qp->sq_size;
	a->max_recv_wr = a->srq ? 0 : qp->rq_size;
	qp->srq = a->srq;
	if (qp->srq)
		atomic_fetch_add(&qp->srq->users, 1);
	if (!a->max_send_sge)
		a->max_send_sge = 1;
	if (!a->max_recv_sge)
		a->max_recv_sge = 1;
	qp->qpn = atomic_fetch_add(&next_qpn, 1);
	qp->pd = a->pd;
	qp->scq = a->send_cq;
	qp->rcq = a->recv_cq;
	qp->ctx = a->ctx;
	qp->sq_sig_all = a->sq_sig_all;
	qp->max_inline = a->max_inline;
	qp->max_send_sge = a->max_send_sge;
	qp->max_recv_sge = a->max_recv_sge;
	qp->state = UIW_QPS_INIT;
	pthread_mutex_init(&qp->lock, NULL);
	pthread_mutex_init(&qp->tx_lock, NULL);
	pthread_cond_init(&qp->cond, NULL);
	atomic_fetch_add(&a->pd->refs, 1);
	uiw_cq_use(qp->scq, 1);
	uiw_cq_use(qp->rcq, 1);
	*out = qp;
	return 0;
}

uint32_t uiw_qp_num(const struct uiw_qp *qp)
{
	return qp->qpn;
}

enum uiw_qp_state uiw_qp_get_state(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	enum uiw_qp_state s = qp->state;
	pthread_mutex_unlock(&qp->lock);
	return s;
}

void uiw_qp_set_event_cb(struct uiw_qp *qp, uiw_qp_event_fn fn, void *ctx)
{
	pthread_mutex_lock(&qp->lock);
	qp->ev_fn = fn;
	qp->ev_ctx = ctx;
	pthread_mutex_unlock(&qp->lock);
}

void uiw_qp_get_stats(struct uiw_qp *qp, struct uiw_qp_stats *out)
{
	pthread_mutex_lock(&qp->lock);
	*out = qp->stats;
	out->tx_fpdus = qp->mpa.tx_fpdus;
	out->tx_bytes = qp->mpa.tx_bytes;
	out->tx_syscalls = qp->mpa.tx_syscalls;
	out->rx_fpdus = qp->mpa.rx_fpdus;
	out->rx_bytes = qp->mpa.rx_bytes;
	out->rx_syscalls = qp->mpa.rx_syscalls;
	pthread_mutex_unlock(&qp->lock);
}

void uiw_qp_report(struct uiw_qp *qp, enum uiw_qp_event ev)
{
	pthread_mutex_lock(&qp->lock);
	bool fire = true;
	if (ev == UIW_QP_EV_DISCONNECTED) {
		fire = !qp->disconnected_reported;
		qp->disconnected_reported = true;
	}
	uiw_qp_event_fn fn = qp->ev_fn;
	void *ctx = qp->ev_ctx;
	pthread_mutex_unlock(&qp->lock);
	if (fire && fn)
		fn(qp, ev, ctx);
}

static enum uiw_wc_opcode wc_opcode_of(enum uiw_wr_opcode op)
{
	switch (op) {
	case UIW_WR_RDMA_WRITE:
		return UIW_WC_RDMA_WRITE;
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
static void push_send_cqe(struct uiw_qp *qp, const struct sq_wqe *w, uint32_t credits)
{
	struct uiw_wc wc = {
	    .wr_id = w->wr.wr_id,
	    .status = w->status,
	    .opcode = wc_opcode_of(w->wr.opcode),
	    .byte_len = (uint32_t)w->len,
	    .qp_num = qp->qpn,
	    .qp_ctx = qp->ctx,
	    .qp_int = qp,
	    .sq_credits = credits,
	};
	if (!uiw_cq_push(qp->scq, &wc, false) && credits)
		/* a lost CQE (CQ overflow) must not leave its slots taken */
		atomic_fetch_add(&qp->sq_polled, credits);
}

/* Retires the WQE at sq_head (its CQE if signaled or failed). */
static void sq_retire(struct uiw_qp *qp, struct sq_wqe *w)
{
	qp->sq_uncredited++;
	if (w->signaled || w->status != UIW_WC_SUCCESS) {
		push_send_cqe(qp, w, qp->sq_uncredited);
		qp->sq_uncredited = 0;
	}
	qp->sq_head++;
}

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
		struct uiw_wc wc = {.wr_id = qp->rx_cur.wr_id,
				    .status = UIW_WC_WR_FLUSH_ERR,
				    .opcode = UIW_WC_RECV,
				    .qp_num = qp->qpn,
				    .qp_ctx = qp->ctx};
		uiw_cq_push(qp->rcq, &wc, false);
		qp->rx_send_active = false;
	}
	while (qp->rq_head != qp->rq_tail) {
		struct rq_wqe *r = &qp->rq[qp->rq_head & rmask];
		struct uiw_wc wc = {.wr_id = r->wr_id,
				    .status = UIW_WC_WR_FLUSH_ERR,
				    .opcode = UIW_WC_RECV,
				    .qp_num = qp->qpn,
				    .qp_ctx = qp->ctx};
		uiw_cq_push(qp->rcq, &wc, false);
		qp->rq_head++;
	}
	while (qp->irq_head != qp->irq_tail) {
		uiw_mr_put(qp->irq[qp->irq_head % qp->irq_size].src);
		qp->irq_head++;
	}
	qp->orq_head = qp->orq_tail;
	pthread_cond_broadcast(&qp->cond);
}

/* Stops the engine threads of a connected QP and releases the stream. */
static void qp_disconnect_stream(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	bool started = qp->threads_started;
	qp->tx_stop = true;
	pthread_cond_broadcast(&qp->cond);
	pthread_mutex_unlock(&qp->lock);
	if (qp->llp)
		qp->llp->ops->abort(qp->llp);
	if (started) {
		if (pthread_equal(pthread_self(), qp->rx_thread))
			pthread_detach(qp->rx_thread);
		else
			pthread_join(qp->rx_thread, NULL);
		if (pthread_equal(pthread_self(), qp->tx_thread))
			pthread_detach(qp->tx_thread);
		else
			pthread_join(qp->tx_thread, NULL);
	}
	pthread_mutex_lock(&qp->lock);
	qp->threads_started = false;
	qp->connected = false;
	pthread_mutex_unlock(&qp->lock);
	if (qp->llp) {
		qp->llp->ops->destroy(qp->llp);
		qp->llp = NULL;
	}
	uiw_mr_put(qp->rx_mr);
	qp->rx_mr = NULL;
	mpa_conn_fini(&qp->mpa);
	free(qp->batch);
	qp->batch = NULL;
}

int uiw_qp_destroy(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->ev_fn = NULL;
	pthread_mutex_unlock(&qp->lock);
	qp_disconnect_stream(qp);
	pthread_mutex_lock(&qp->lock);
	while (qp->irq_head != qp->irq_tail) {
		uiw_mr_put(qp->irq[qp->irq_head % qp->irq_size].src);
		qp->irq_head++;
	}
	pthread_mutex_unlock(&qp->lock);
	uiw_cq_purge_qp(qp->scq, qp);
	uiw_cq_use(qp->scq, -1);
	uiw_cq_use(qp->rcq, -1);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);
	atomic_fetch_sub(&qp->pd->refs, 1);
	pthread_mutex_destroy(&qp->lock);
	pthread_mutex_destroy(&qp->tx_lock);
	pthread_cond_destroy(&qp->cond);
	free(qp->sq);
	free(qp->rq);
	free(qp->orq);
	free(qp->irq);
	free(qp);
	return 0;
}

int uiw_qp_modify(struct uiw_qp *qp, enum uiw_qp_state state)
{
	pthread_mutex_lock(&qp->lock);
	enum uiw_qp_state cur = qp->state;
	bool connected = qp->connected;
	switch (state) {
	case UIW_QPS_ERR:
		/* abortive close: outstanding WRs flush, the stream is reset */
		if (connected)
			uiw_qp_set_close_reason(qp, UIW_CLOSE_LOCAL_ABORT);
		if (cur != UIW_QPS_ERR)
			uiw_qp_flush_locked(qp);
		pthread_mutex_unlock(&qp->lock);
		if (connected && qp->llp)
			qp->llp->ops->abort(qp->llp);
		return 0;
	case UIW_QPS_SQD:
		if (!connected || cur != UIW_QPS_RTS) {
			pthread_mutex_unlock(&qp->lock);
			return cur == UIW_QPS_SQD || cur == UIW_QPS_ERR ? 0 : -EINVAL;
		}
		qp->state = UIW_QPS_SQD;
		qp->closing = true;
		pthread_mutex_unlock(&qp->lock);
		/* RFC 5040 §6: graceful close: queued work first, then FIN */
		uiw_tx_progress(qp);
		pthread_mutex_lock(&qp->tx_lock);
		if (qp->llp)
			qp->llp->ops->shutdown_send(qp->llp);
		pthread_mutex_unlock(&qp->tx_lock);
		return 0;
	case UIW_QPS_RESET:
		pthread_mutex_unlock(&qp->lock);
		if (connected || qp->threads_started)
			qp_disconnect_stream(qp);
		pthread_mutex_lock(&qp->lock);
		if (qp->state != UIW_QPS_ERR)
			uiw_qp_flush_locked(qp);
		qp->state = UIW_QPS_RESET;
		qp->closing = qp->terminated = qp->disconnected_reported = false;
		qp->local_fatal = false;
		qp->term = (struct uiw_term_info){0};
		qp->close_reason = UIW_CLOSE_NONE;
		qp->tx_gate_open = qp->rx_seen_first = qp->rx_ended = qp->tx_stop = false;
		qp->sq_head = qp->sq_next = qp->sq_tail = 0;
		qp->sq_uncredited = 0;
		atomic_store(&qp->sq_polled, 0);
		qp->rq_head = qp->rq_tail = 0;
		qp->orq_head = qp->orq_tail = qp->irq_head = qp->irq_tail = 0;
		qp->irq_busy = 0; /* the threads are gone */
		pthread_mutex_unlock(&qp->lock);
		return 0;
	case UIW_QPS_INIT:
	case UIW_QPS_RTR:
	case UIW_QPS_RTS:
		if (cur == UIW_QPS_ERR || cur == UIW_QPS_SQD) {
			pthread_mutex_unlock(&qp->lock);
			return -EINVAL;
		}
		/* before connect the state is bookkeeping only; once
		 * connected the QP is in RTS already */
		if (!connected)
			qp->state = state;
		pthread_mutex_unlock(&qp->lock);
		return 0;
	default:
		pthread_mutex_unlock(&qp->lock);
		return -EINVAL;
	}
}

/* Fills a WQE from a WR; returns 0 or -EINVAL, or a WC status > 0 for
 * errors the verbs report as a completion (bad lkey). */
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
	if (wr->opcode == UIW_WR_RDMA_READ && wr->num_sge == 1 && w->sge[0].length) {
		/* iWARP: the Read Response is a tagged Write into the sink, so
		 * the sink STag needs REMOTE_WRITE (RFC 5040 §4.4) */
		struct uiw_mr_int *mr = uiw_mr_get(w->sge[0].lkey);
		if (mr && !(mr->pub.access & UIW_ACCESS_REMOTE_WRITE)) {
			w->status = UIW_WC_LOC_ACCESS_ERR;
			w->st = WQE_DONE;
		}
		uiw_mr_put(mr);
	}
	return 0;
}

int uiw_qp_post_send(struct uiw_qp *qp, const struct uiw_send_wr *wr, int n, int *bad)
{
	int rc = 0, i = 0;
	pthread_mutex_lock(&qp->lock);
	if (qp->state == UIW_QPS_ERR) {
		/* verbs: WRs posted in ERR complete with a flush error */
		for (; i < n; i++) {
			struct sq_wqe w = {.wr = wr[i], .status = UIW_WC_WR_FLUSH_ERR};
			push_send_cqe(qp, &w, 0);
		}
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
	qp->tx_kick = true;
	pthread_mutex_unlock(&qp->lock);
	if (rc)
		*bad = i;
	if (i > 0)
		uiw_tx_progress(qp);
	return rc;
}

/* Fills a receive queue entry from a receive WR, resolving its SGEs
 * against pd (zero-length SGEs skipped). Returns UIW_WC_SUCCESS, or the
 * status of the first bad SGE (LOC_PROT_ERR, LOC_ACCESS_ERR). */
static enum uiw_wc_status rq_wqe_fill(struct rq_wqe *r, struct uiw_pd *pd,
				      const struct uiw_recv_wr *wr)
{
	r->wr_id = wr->wr_id;
	r->niov = 0;
	r->len = 0;
	for (int k = 0; k < wr->num_sge; k++) {
		enum uiw_wc_status st;
		if (wr->sg_list[k].length == 0)
			continue;
		void *p = uiw_sge_resolve(pd, &wr->sg_list[k], true, &st);
		if (!p)
			return st;
		r->iov[r->niov].iov_base = p;
		r->iov[r->niov++].iov_len = wr->sg_list[k].length;
		r->len += wr->sg_list[k].length;
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
			struct uiw_wc wc = {.wr_id = wr[i].wr_id,
					    .status = UIW_WC_WR_FLUSH_ERR,
					    .opcode = UIW_WC_RECV,
					    .qp_num = qp->qpn,
					    .qp_ctx = qp->ctx};
			uiw_cq_push(qp->rcq, &wc, false);
			continue;
		}
		if (qp->rq_tail - qp->rq_head >= qp->rq_size) {
			rc = -ENOMEM;
			break;
		}
		enum uiw_wc_status st =
		    rq_wqe_fill(&qp->rq[qp->rq_tail & (qp->rq_size - 1)], qp->pd, &wr[i]);
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
	return rc;
}

int uiw_qp_start(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->connected = true;
	qp->tx_stop = false;
	if (qp->state != UIW_QPS_ERR)
		qp->state = UIW_QPS_RTS;
	pthread_mutex_unlock(&qp->lock);
	if (pthread_create(&qp->rx_thread, NULL, uiw_rx_thread, qp))
		return -EAGAIN;
	if (pthread_create(&qp->tx_thread, NULL, uiw_tx_thread, qp)) {
		qp->llp->ops->abort(qp->llp);
		pthread_join(qp->rx_thread, NULL);
		return -EAGAIN;
	}
	pthread_mutex_lock(&qp->lock);
	qp->threads_started = true;
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

unsigned uiw_qp_caps(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	unsigned c = qp->caps;
	pthread_mutex_unlock(&qp->lock);
	return c;
}

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

void uiw_rq_complete(struct uiw_qp *qp, struct uiw_wc *wc, bool solicited)
{
	wc->wr_id = qp->rx_cur.wr_id;
	wc->qp_num = qp->qpn;
	wc->qp_ctx = qp->ctx;
	qp->rx_send_active = false;
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
		if (rq_wqe_fill(&q->rq[q->tail & (q->size - 1)], q->pd, &wr[i]) != UIW_WC_SUCCESS) {
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

int uiw_qp_conn_mode(struct uiw_qp *qp, struct uiw_conn_mode *m)
{
	pthread_mutex_lock(&qp->lock);
	bool c = qp->connected;
	if (c) {
		memset(m, 0, sizeof(*m));
		m->mpa_rev = qp->neg.rev;
		m->crc = qp->neg.crc;
		m->p2p = qp->neg.p2p;
		const char *r = qp->neg.rtr == MPA_RTR_WRITE  ? "write"
				: qp->neg.rtr == MPA_RTR_READ ? "read"
				: qp->neg.rtr == MPA_RTR_SEND ? "send"
							      : "";
		strcpy(m->rtr, r);
		m->ird = qp->ird;
		m->ord = qp->ord;
		m->mulpdu = qp->mpa.mulpdu;
	}
	pthread_mutex_unlock(&qp->lock);
	return c ? 0 : -ENOTCONN;
}

void uiw_qp_set_close_reason(struct uiw_qp *qp, enum uiw_close_reason why)
{
	if (qp->close_reason == UIW_CLOSE_NONE)
		qp->close_reason = why;
}

enum uiw_close_reason uiw_qp_close_reason(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	enum uiw_close_reason r = qp->close_reason;
	pthread_mutex_unlock(&qp->lock);
	return r;
}

void uiw_qp_term_info(struct uiw_qp *qp, struct uiw_term_info *out)
{
	pthread_mutex_lock(&qp->lock);
	*out = qp->term;
	pthread_mutex_unlock(&qp->lock);
}
