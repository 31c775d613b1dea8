/* The one Terminate path (RFC 5040 §4.8, §6.3): every protocol error found
 * on receive ends here. The Terminate message is sent best effort, the QP
 * goes to ERR (outstanding WRs flush, completed ones stay completed), the
 * send side is closed, and what the peer still sends is read and dropped for
 * a bounded time so that closing does not reset the connection before the
 * peer has read the Terminate. */
#include <endian.h>
#include <string.h>
#include <time.h>

#include "rdmap/internal.h"

#define TERM_DRAIN_MS 500

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Builds the Terminate payload; returns its length in bytes. */
static size_t term_build(const struct uiw_term *t, uint8_t *out)
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

void uiw_terminate(struct uiw_qp *qp, const struct uiw_term *t)
{
	uint8_t payload[RDMAP_TERM_MAX_PAYLOAD];
	size_t len = term_build(t, payload);

	pthread_mutex_lock(&qp->lock);
	bool first = !qp->terminated;
	qp->terminated = true;
	uiw_qp_set_close_reason(qp, UIW_CLOSE_TERMINATE);
	if (first)
		qp->term = (struct uiw_term_info){.valid = true,
						  .sent = true,
						  .layer = t->layer,
						  .etype = t->etype,
						  .ecode = t->ecode};
	if (qp->state != UIW_QPS_ERR)
		uiw_qp_flush_locked(qp);
	pthread_mutex_unlock(&qp->lock);
	if (!first || !qp->llp)
		return;

	if (uiw_tx_send_terminate(qp, payload, len) == 0) {
		pthread_mutex_lock(&qp->lock);
		qp->stats.terminates_sent++;
		pthread_mutex_unlock(&qp->lock);
	}
	qp->llp->ops->shutdown_send(qp->llp);
	/* drain what the peer still sends, bounded in time */
	uint64_t end = now_ms() + TERM_DRAIN_MS;
	static __thread uint8_t sink[4096];
	for (int i = 0; i < 4096; i++) {
		uint64_t now = now_ms();
		if (now >= end)
			break;
		struct iovec v = {.iov_base = sink, .iov_len = sizeof(sink)};
		ssize_t r = uiw_llp_recvv(qp->llp, &v, 1, (int)(end - now));
		if (r <= 0)
			break;
	}
	qp->llp->ops->abort(qp->llp);
	uiw_qp_report(qp, UIW_QP_EV_TERMINATE);
}
