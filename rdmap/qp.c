/* Queue pairs: creation, state (verbs QP states, RFC 5040 §6 stream
 * management), the connection's lifetime and events, destruction.
 * Posting and the rings are in wq.c, progress in progress.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap/internal.h"
#include "rdmap/stat.h"
#include "util/thread.h"

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
	if (a->srq && a->srq->pd != a->pd)
		return -EINVAL;
	struct uiw_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->sq_size = pow2(a->max_send_wr ? a->max_send_wr : 1);
	qp->rq_size = a->srq ? 1 : pow2(a->max_recv_wr ? a->max_recv_wr : 1);
	qp->orq_size = UIW_MAX_ORD;
	qp->irq_size = UIW_MAX_IRD;
	qp->sq = calloc(qp->sq_size, sizeof(*qp->sq));
	qp->rq = calloc(qp->rq_size, sizeof(*qp->rq));
	qp->orq = calloc(qp->orq_size, sizeof(*qp->orq));
	qp->irq = calloc(qp->irq_size, sizeof(*qp->irq));
	bool on_scq = false;
	if (!qp->sq || !qp->rq || !qp->orq || !qp->irq)
		goto fail;
	if (uiw_cq_attach_qp(a->send_cq, qp) != 0)
		goto fail;
	on_scq = true;
	if (a->recv_cq != a->send_cq && uiw_cq_attach_qp(a->recv_cq, qp) != 0)
		goto fail;
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
	if (uiw_stat_qp_open(qp) != 0)
		goto fail_attached;
	qp->pd = a->pd;
	qp->scq = a->send_cq;
	qp->rcq = a->recv_cq;
	qp->ctx = a->ctx;
	qp->sq_sig_all = a->sq_sig_all;
	qp->max_inline = a->max_inline;
	qp->max_send_sge = a->max_send_sge;
	qp->max_recv_sge = a->max_recv_sge;
	qp->state = UIW_QPS_INIT;
	qp->dl_index = -1;
	pthread_mutex_init(&qp->lock, NULL);
	pthread_mutex_init(&qp->rx_lock, NULL);
	pthread_mutex_init(&qp->tx_lock, NULL);
	pthread_cond_init(&qp->cond, NULL);
	atomic_fetch_add(&a->pd->refs, 1);
	uiw_cq_use(qp->scq, 1);
	uiw_cq_use(qp->rcq, 1);
	*out = qp;
	return 0;
fail_attached:
	if (a->recv_cq != a->send_cq)
		uiw_cq_detach_qp(a->recv_cq, qp);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);
fail:
	if (on_scq)
		uiw_cq_detach_qp(a->send_cq, qp);
	free(qp->sq);
	free(qp->rq);
	free(qp->orq);
	free(qp->irq);
	free(qp);
	return -ENOMEM;
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

/* See rdmap/internal.h. */
void uiw_qp_event_due(struct uiw_qp *qp, enum uiw_qp_event ev)
{
	qp->ev_due |= 1u << ev;
}

/* See rdmap/internal.h. */
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
	struct uiw_term_info term = qp->term;
	enum uiw_close_reason why = qp->close_reason;
	pthread_mutex_unlock(&qp->lock);
	if (ev == UIW_QP_EV_TERMINATE && term.valid && !term.sent)
		uiw_stat_qp_term(qp, false, term.layer, term.etype, term.ecode);
	else if (ev == UIW_QP_EV_FATAL)
		uiw_qp_log(qp, UIW_LOG_ERROR, "fatal: %s",
			   why == UIW_CLOSE_PEER_TIMEOUT
			       ? "the peer did not answer within the dead-peer bound"
			       : "a send WR failed locally");
	else if (ev == UIW_QP_EV_DISCONNECTED && fire)
		uiw_stat_qp_ended(qp, why);
	if (fire && fn)
		fn(qp, ev, ctx);
}

/* Ends the QP's connection and releases its stream: the engine lets go,
 * whoever drives it finishes, the framing state is freed. No events are
 * reported for what this cuts short. */
static void qp_release_stream(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	struct uiw_stream *s = qp->stream;
	pthread_mutex_unlock(&qp->lock);
	if (!s)
		return;
	s->ops->abort(s);
	uiw_engine_detach(qp);
	/* wait for threads driving the stream (a poster or poller) */
	pthread_mutex_lock(&qp->rx_lock);
	pthread_mutex_lock(&qp->tx_lock);
	pthread_mutex_lock(&qp->lock);
	qp->stream = NULL;
	qp->connected = false;
	qp->phase = CONN_NONE;
	uiw_irq_clear(qp);
	pthread_mutex_unlock(&qp->lock);
	uiw_mr_put(qp->rx_mr);
	qp->rx_mr = NULL;
	mpa_conn_fini(&qp->mpa);
	memset(&qp->txm, 0, sizeof(qp->txm));
	pthread_mutex_unlock(&qp->tx_lock);
	pthread_mutex_unlock(&qp->rx_lock);
	s->ops->destroy(s);
}

int uiw_qp_destroy(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->ev_fn = NULL;
	pthread_mutex_unlock(&qp->lock);
	/* no poller may reach it any more (out of the CQs' lists, which
	 * waits for pollers inside), then no engine (nor poller doing the
	 * engine's work) */
	uiw_cq_detach_qp(qp->scq, qp);
	if (qp->rcq != qp->scq)
		uiw_cq_detach_qp(qp->rcq, qp);
	qp_release_stream(qp);
	uiw_engine_detach(qp); /* no stream (never connected): off the deadline list */
	pthread_mutex_lock(&qp->lock);
	uiw_irq_clear(qp);
	pthread_mutex_unlock(&qp->lock);
	uiw_cq_purge_qp(qp->scq, qp);
	uiw_cq_use(qp->scq, -1);
	uiw_cq_use(qp->rcq, -1);
	if (qp->srq)
		atomic_fetch_sub(&qp->srq->users, 1);
	atomic_fetch_sub(&qp->pd->refs, 1);
	uiw_stat_qp_close(qp);
	pthread_mutex_destroy(&qp->lock);
	pthread_mutex_destroy(&qp->rx_lock);
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
	struct uiw_stream *s = qp->stream;
	switch (state) {
	case UIW_QPS_ERR:
		/* abortive close: outstanding WRs flush, the stream is reset */
		if (connected) {
			uiw_qp_set_close_reason(qp, UIW_CLOSE_LOCAL_ABORT);
			qp->aborted = true;
		}
		if (cur != UIW_QPS_ERR)
			uiw_qp_flush_locked(qp);
		pthread_mutex_unlock(&qp->lock);
		if (connected && s) {
			s->ops->abort(s);
			uiw_engine_kick(qp, PROG_RX);
		}
		return 0;
	case UIW_QPS_SQD:
		if (!connected || cur != UIW_QPS_RTS) {
			pthread_mutex_unlock(&qp->lock);
			return cur == UIW_QPS_SQD || cur == UIW_QPS_ERR ? 0 : -EINVAL;
		}
		/* RFC 5040 §6: graceful close: queued work first, then FIN
		 * (tx.c sends it once the send queue is empty) */
		qp->state = UIW_QPS_SQD;
		qp->closing = true;
		pthread_mutex_unlock(&qp->lock);
		int cs = uiw_nocancel_begin(); /* rdmap/internal.h */
		uiw_progress(qp, PROG_TX, ROLE_POSTER);
		uiw_nocancel_end(cs);
		return 0;
	case UIW_QPS_RESET:
		pthread_mutex_unlock(&qp->lock);
		qp_release_stream(qp);
		pthread_mutex_lock(&qp->lock);
		if (qp->state != UIW_QPS_ERR)
			uiw_qp_flush_locked(qp);
		qp->state = UIW_QPS_RESET;
		qp->closing = qp->terminated = qp->disconnected_reported = false;
		qp->local_fatal = qp->fin_sent = qp->aborted = false;
		qp->term = (struct uiw_term_info){0};
		qp->close_reason = UIW_CLOSE_NONE;
		qp->tx_gate_open = qp->rx_seen_first = qp->rx_ended = false;
		qp->sq_head = qp->sq_next = qp->sq_tail = 0;
		qp->sq_uncredited = 0;
		atomic_store(&qp->sq_polled, 0);
		qp->rq_head = qp->rq_tail = 0;
		qp->orq_head = qp->orq_tail = 0;
		qp->irq_head = qp->irq_next = qp->irq_tail = 0;
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

unsigned uiw_qp_caps(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	unsigned c = qp->caps;
	pthread_mutex_unlock(&qp->lock);
	return c;
}

/* See rdmap/rdmap.h. */
void uiw_qp_reply_waits(struct uiw_qp *qp, unsigned *waits, unsigned *hits)
{
	*waits = atomic_load_explicit(&qp->pp_waits, memory_order_relaxed);
	*hits = atomic_load_explicit(&qp->pp_hits, memory_order_relaxed);
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
		m->large_fpdu = qp->neg.large_tx;
	}
	pthread_mutex_unlock(&qp->lock);
	return c ? 0 : -ENOTCONN;
}

/* See rdmap/internal.h. */
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
