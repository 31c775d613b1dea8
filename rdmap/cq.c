/* Completion queues: a ring of CQEs under one mutex (one lock per CQE, not
 * per FPDU), with verbs req_notify semantics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmap/internal.h"

struct uiw_cq {
	pthread_mutex_t lock;
	struct uiw_wc *ring;
	uint32_t size, head, count;
	bool armed, solicited_only, overflow;
	uiw_cq_notify_fn fn;
	void *ctx;
	atomic_int users; /* QPs */
};

int uiw_cq_create(unsigned depth, uiw_cq_notify_fn fn, void *ctx, struct uiw_cq **out)
{
	if (depth == 0 || depth > UIW_MAX_CQE)
		return -EINVAL;
	struct uiw_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->ring = calloc(depth, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		return -ENOMEM;
	}
	cq->size = depth;
	cq->fn = fn;
	cq->ctx = ctx;
	pthread_mutex_init(&cq->lock, NULL);
	*out = cq;
	return 0;
}

int uiw_cq_destroy(struct uiw_cq *cq)
{
	if (atomic_load(&cq->users) > 0)
		return -EBUSY;
	pthread_mutex_destroy(&cq->lock);
	free(cq->ring);
	free(cq);
	return 0;
}

void uiw_cq_use(struct uiw_cq *cq, int delta)
{
	atomic_fetch_add(&cq->users, delta);
}

int uiw_cq_poll(struct uiw_cq *cq, int n, struct uiw_wc *wc)
{
	int k = 0;
	pthread_mutex_lock(&cq->lock);
	while (k < n && cq->count) {
		struct uiw_wc *e = &cq->ring[cq->head];
		/* send-queue slots come free when their completion is polled;
		 * under the CQ lock, so a QP being destroyed (which purges its
		 * CQEs under the same lock) is never touched after */
		if (e->sq_credits)
			atomic_fetch_add(&e->qp_int->sq_polled, e->sq_credits);
		wc[k++] = *e;
		cq->head = cq->head + 1 == cq->size ? 0 : cq->head + 1;
		cq->count--;
	}
	pthread_mutex_unlock(&cq->lock);
	return k;
}

int uiw_cq_arm(struct uiw_cq *cq, bool solicited_only)
{
	pthread_mutex_lock(&cq->lock);
	/* Armed while completions wait to be polled: notify now, as hardware
	 * does (its consumer index lags the producer), so a consumer that
	 * polls a bounded batch per event never sleeps on a full CQ. */
	bool fire = !solicited_only && cq->count > 0 && cq->fn;
	cq->armed = !fire;
	cq->solicited_only = solicited_only;
	pthread_mutex_unlock(&cq->lock);
	if (fire)
		cq->fn(cq, cq->ctx);
	return 0;
}

bool uiw_cq_overflowed(struct uiw_cq *cq)
{
	pthread_mutex_lock(&cq->lock);
	bool o = cq->overflow;
	pthread_mutex_unlock(&cq->lock);
	return o;
}

bool uiw_cq_push(struct uiw_cq *cq, const struct uiw_wc *wc, bool solicited)
{
	bool fire = false;
	pthread_mutex_lock(&cq->lock);
	if (cq->count == cq->size) {
		cq->overflow = true;
		pthread_mutex_unlock(&cq->lock);
		return false;
	}
	uint32_t slot = cq->head + cq->count;
	if (slot >= cq->size)
		slot -= cq->size;
	cq->ring[slot] = *wc;
	cq->count++;
	/* verbs: an error CQE or a solicited one fires a solicited-only arm */
	if (cq->armed && (!cq->solicited_only || solicited || wc->status != UIW_WC_SUCCESS)) {
		cq->armed = false;
		fire = cq->fn != NULL;
	}
	pthread_mutex_unlock(&cq->lock);
	if (fire)
		cq->fn(cq, cq->ctx);
	return true;
}

void uiw_cq_purge_qp(struct uiw_cq *cq, struct uiw_qp *qp)
{
	pthread_mutex_lock(&cq->lock);
	uint32_t kept = 0;
	for (uint32_t i = 0; i < cq->count; i++) {
		uint32_t from = (cq->head + i) % cq->size;
		if (cq->ring[from].qp_int == qp)
			continue;
		cq->ring[(cq->head + kept) % cq->size] = cq->ring[from];
		kept++;
	}
	cq->count = kept;
	pthread_mutex_unlock(&cq->lock);
}
