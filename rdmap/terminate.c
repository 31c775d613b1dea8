/* The one Terminate path (RFC 5040 §4.8, §6.3): every protocol error found
 * on receive ends here. The QP goes to ERR (outstanding WRs flush,
 * completed ones stay completed), the Terminate message is queued for the
 * send side, which sends it after what it had started and then closes its
 * half of the stream, and the receive side reads and drops what the peer
 * still sends for a bounded time, so that closing does not reset the
 * connection before the peer has read the Terminate (progress.c finishes
 * the close: UIW_QP_EV_TERMINATE, then DISCONNECTED).
 */
#include <endian.h>
#include <string.h>

#include "rdmap/internal.h"
#include "rdmap/stat.h"

/* See rdmap/internal.h. RFC 5040 §4.8: Terminate Control, then the DDP
 * segment length and header (M, D) and the Read Request (R). */
size_t uiw_term_build(const struct uiw_term *t, uint8_t *out)
{
	uint32_t ctrl = (uint32_t)(t->layer & 0xf) << 28 | (uint32_t)(t->etype & 0xf) << 24 |
			(uint32_t)t->ecode << 16;
	size_t n = 4;
	if (t->has_seg) {
		ctrl |= RDMAP_TERM_FLAG_M | RDMAP_TERM_FLAG_D;
		out[n++] = (uint8_t)(t->seg.seg_len >> 8);
		out[n++] = (uint8_t)t->seg.seg_len;
		memcpy(out + n, t->seg.raw, t->seg.raw_len);
		n += t->seg.raw_len;
	}
	if (t->has_rreq) {
		ctrl |= RDMAP_TERM_FLAG_R;
		memcpy(out + n, &t->rreq, sizeof(t->rreq));
		n += sizeof(t->rreq);
	}
	uint32_t be = htobe32(ctrl);
	memcpy(out, &be, 4);
	return n;
}

/* Records the error, queues the Terminate (the first one only) and moves
 * the QP to ERR. Returns 1 when it was the first, 0 when one was queued
 * before, -1 when the stream was aborted locally first (the application
 * moved the QP to ERR, or a send WR failed locally): what the peer still
 * sends then is no error of the peer's, nothing is queued or reported. */
static int term_queue(struct uiw_qp *qp, const struct uiw_term *t)
{
	pthread_mutex_lock(&qp->lock);
	if (qp->aborted && !qp->terminated) {
		pthread_mutex_unlock(&qp->lock);
		return -1;
	}
	bool first = !qp->terminated;
	qp->terminated = true;
	uiw_qp_set_close_reason(qp, UIW_CLOSE_TERMINATE);
	if (first) {
		qp->term = (struct uiw_term_info){.valid = true,
						  .sent = true,
						  .layer = t->layer,
						  .etype = t->etype,
						  .ecode = t->ecode};
		qp->term_len = (uint32_t)uiw_term_build(t, qp->term_payload);
		qp->term_queued = true;
	}
	if (qp->state != UIW_QPS_ERR)
		uiw_qp_flush_locked(qp);
	pthread_mutex_unlock(&qp->lock);
	if (first)
		uiw_stat_qp_term(qp, true, t->layer, t->etype, t->ecode);
	return first;
}

/* See rdmap/internal.h. */
void uiw_terminate(struct uiw_qp *qp, const struct uiw_term *t)
{
	int first = term_queue(qp, t);
	if (first < 0) {
		qp->rx_state = RX_DONE; /* aborted: stop reading */
		return;
	}
	qp->rx_state = first ? RX_DRAIN : RX_DONE;
	qp->rx_drain_end = 0; /* set once the Terminate is out (progress.c) */
	atomic_fetch_or(&qp->pending, PROG_TX);
}

/* See rdmap/internal.h. */
void uiw_terminate_tx(struct uiw_qp *qp, const struct uiw_term *t)
{
	(void)term_queue(qp, t);
	atomic_fetch_or(&qp->pending, PROG_TX | PROG_RX);
}
