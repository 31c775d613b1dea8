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
		wc[k++] = cq->ring[cq->head];
		cq->head = cq->head + 1 == cq->size ? 0 : cq->head + 1;
		cq->count--;
	}
	pthread_mutex_unlock(&cq->lock);
	return k;
}

int uiw_cq_arm(struct uiw_cq *cq, bool solicited_only)
{
	pthread_mutex_lock(&cq->lock);
	cq->armed = true;
	cq->solicited_only = solicited_only;
	pthread_mutex_unlock(&cq->lock);
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
