/* libibverbs.so.1 (ours): shared receive queues, mapped onto the uiwarp
 * engine's SRQs (rdmap/rdmap.h: uiw_srq_*).
 *
 * Sources: the rdma-core 44 man pages ibv_create_srq(3), ibv_modify_srq(3),
 * ibv_query_srq(3), ibv_destroy_srq(3).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs-shim/ibverbs/internal.h"

/* ------------------------------------------------------------------- SRQ */

/* Engine SRQ limit callback (a receive thread): the posted count dropped
 * below the armed limit; raise IBV_EVENT_SRQ_LIMIT_REACHED once (the
 * engine has disarmed it). */
static void shim_srq_limit(struct uiw_srq *us, void *arg)
{
	struct shim_srq *s = arg;
	struct ibv_async_event ae = {.element.srq = &s->ibv,
				     .event_type = IBV_EVENT_SRQ_LIMIT_REACHED};

	(void)us;
	__atomic_store_n(&s->srq_limit, 0, __ATOMIC_RELEASE);
	shim_async_push(shim_ctx(s->ibv.context), &ae);
}

/* ibv_create_srq(3): a shared receive queue on pd for at least
 * attr.max_wr WRs (1..UIW_MAX_QP_WR) of up to attr.max_sge SGEs
 * (1..UIW_MAX_SGE); the granted sizes are written back. srq_limit is
 * ignored at creation (ibv_create_srq(3): it is set by ibv_modify_srq).
 * Returns NULL with errno EINVAL (also: pd NULL, freed or not a PD),
 * ENOMEM, or EOPNOTSUPP (engine without SRQs; max_srq is then 0). */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	struct shim_srq *s;
	struct shim_pd *p;
	uint32_t max_wr, max_sge;
	int ret;

	if (!pd || !srq_init_attr)
		return shim_fail_null(EINVAL);
	if (!shim_have_srq())
		return shim_fail_null(EOPNOTSUPP);
	max_wr = srq_init_attr->attr.max_wr;
	max_sge = srq_init_attr->attr.max_sge;
	if (max_wr < 1 || max_wr > UIW_MAX_QP_WR || max_sge > UIW_MAX_SGE)
		return shim_fail_null(EINVAL);
	if (max_sge < 1)
		max_sge = 1;
	p = shim_pd_acquire(pd);
	if (!p)
		return NULL;
	if (!shim_kind_get(SHIM_KIND_SRQ)) {
		shim_put(&p->users);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		shim_kind_put(SHIM_KIND_SRQ);
		shim_put(&p->users);
		return shim_fail_null(ENOMEM);
	}
	ret = uiw_srq_create(p->pd, &max_wr, &max_sge, &s->srq);
	if (ret) {
		free(s);
		shim_kind_put(SHIM_KIND_SRQ);
		shim_put(&p->users);
		return shim_fail_null(-ret);
	}
	s->max_wr = max_wr;
	s->max_sge = max_sge;
	srq_init_attr->attr.max_wr = max_wr;
	srq_init_attr->attr.max_sge = max_sge;
	srq_init_attr->attr.srq_limit = 0;
	s->ibv.context = pd->context;
	s->ibv.srq_context = srq_init_attr->srq_context;
	s->ibv.pd = pd;
	s->ibv.handle = 0;
	pthread_mutex_init(&s->ibv.mutex, NULL);
	pthread_cond_init(&s->ibv.cond, NULL);
	return &s->ibv;
}

/* verbs_context.create_srq_ex (ibv_create_srq_ex(3)), reached for what
 * the inline wrapper does not pass to ibv_create_srq: XRC and tag-matching
 * SRQs, which iWARP lacks. NULL with errno EOPNOTSUPP. */
struct ibv_srq *shim_op_create_srq_ex(struct ibv_context *context,
				      struct ibv_srq_init_attr_ex *attr)
{
	(void)context;
	(void)attr;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_modify_srq(3): IBV_SRQ_MAX_WR may not grow the SRQ (no resize:
 * EOPNOTSUPP; a size it already has is accepted). IBV_SRQ_LIMIT with a
 * limit of 1..max_wr arms the SRQ: the first time a Send takes a receive
 * WR and leaves fewer than srq_limit posted, the application gets one
 * IBV_EVENT_SRQ_LIMIT_REACHED (ibv_get_async_event, element.srq) and the
 * limit disarms (ibv_query_srq reports 0 again); re-arm with another
 * ibv_modify_srq. 0 disarms. Returns 0, EINVAL (other mask bits, limit
 * above max_wr), EOPNOTSUPP (engine without the limit hook). */
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask)
{
	struct shim_srq *s;

	if (!srq || !srq_attr)
		return EINVAL;
	s = shim_srq(srq);
	if (srq_attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if ((srq_attr_mask & IBV_SRQ_MAX_WR) && srq_attr->max_wr > s->max_wr)
		return EOPNOTSUPP;
	if (srq_attr_mask & IBV_SRQ_LIMIT) {
		if (srq_attr->srq_limit > s->max_wr)
			return EINVAL;
		if (uiw_srq_set_limit == NULL)
			return srq_attr->srq_limit ? EOPNOTSUPP : 0;
		__atomic_store_n(&s->srq_limit, srq_attr->srq_limit, __ATOMIC_RELEASE);
		return -uiw_srq_set_limit(s->srq, srq_attr->srq_limit, shim_srq_limit, s);
	}
	return 0;
}

/* ibv_query_srq(3): max_wr, max_sge as granted, srq_limit as armed (0
 * once the limit event fired). Returns 0 or EINVAL. */
int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr)
{
	struct shim_srq *s;

	if (!srq || !srq_attr)
		return EINVAL;
	s = shim_srq(srq);
	srq_attr->max_wr = s->max_wr;
	srq_attr->max_sge = s->max_sge;
	srq_attr->srq_limit = __atomic_load_n(&s->srq_limit, __ATOMIC_ACQUIRE);
	return 0;
}

/* ibv_destroy_srq(3): frees the SRQ (its posted WRs are dropped). Returns
 * 0, EBUSY while QPs use it, EINVAL. */
int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct shim_srq *s;
	int ret;

	if (!srq)
		return EINVAL;
	s = shim_srq(srq);
	if (shim_busy(&s->users))
		return EBUSY;
	ret = uiw_srq_destroy(s->srq);
	if (ret)
		return -ret;
	shim_async_purge(shim_ctx(srq->context), srq);
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != s->async_events_reported)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	shim_put(&shim_pd(srq->pd)->users);
	pthread_cond_destroy(&srq->cond);
	pthread_mutex_destroy(&srq->mutex);
	free(s);
	shim_kind_put(SHIM_KIND_SRQ);
	return 0;
}
