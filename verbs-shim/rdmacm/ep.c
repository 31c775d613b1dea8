/* librdmacm.so.1 (ours): endpoints (rdma_create_ep(3), rdma_destroy_ep(3)),
 * the devices list (rdma_get_devices(3), rdma_free_devices(3)) and the calls
 * of rdma-core newer than 44 (RDMACM_1.4: rdma_write_cm_event,
 * rdma_resolve_addrinfo, rdma_query_addrinfo).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "cm_priv.h"

/* -------------------------------------------------------- endpoints */

/* rdma_create_ep(3): a synchronous id for res (rdma_getaddrinfo). Passive
 * (RAI_PASSIVE): bound to res->ai_src_addr, id->pd = pd if given;
 * qp_init_attr is kept for the QPs rdma_get_request creates. Active:
 * address and route resolved (blocking; id->pd is the device's PD) and,
 * with qp_init_attr, a QP created on pd (NULL: id->pd; CQs with channels
 * when none given), which then is id->pd. qp_init_attr->qp_type is set
 * from res->ai_qp_type (RC). 0, or -1 with errno of the
 * steps (EINVAL for NULL arguments). */
CM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *rid;
	int e;

	if (!id || !res) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_create_id(NULL, &rid, NULL,
			   res->ai_port_space ? (enum rdma_port_space)res->ai_port_space
					      : RDMA_PS_TCP))
		return -1;
	if (pd)
		rid->verbs = pd->context;
	if (qp_init_attr) /* rdma_server / rdma_client leave it 0 */
		qp_init_attr->qp_type = res->ai_qp_type ? res->ai_qp_type : IBV_QPT_RC;
	if (res->ai_flags & RAI_PASSIVE) {
		if (!res->ai_src_addr || rdma_bind_addr(rid, res->ai_src_addr))
			goto err;
		if (pd) /* the QPs of rdma_get_request: on pd */
			rid->pd = pd;
		if (qp_init_attr) {
			struct cm_id *p = cm_id_of(rid);

			p->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!p->ep_qp_attr) {
				errno = ENOMEM;
				goto err;
			}
			*p->ep_qp_attr = *qp_init_attr;
		}
	} else {
		if (!res->ai_dst_addr) {
			errno = EINVAL;
			goto err;
		}
		if (rdma_resolve_addr(rid, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(rid, 2000))
			goto err;
		if (qp_init_attr && rdma_create_qp(rid, pd, qp_init_attr))
			goto err;
	}
	*id = rid;
	return 0;
err:
	e = errno;
	rdma_destroy_id(rid);
	errno = e;
	return -1;
}

/* rdma_destroy_ep(3): destroys id's QP (and library-made CQs) and the id. */
CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* ------------------------------------------- RDMACM_1.4 (rdma-core 60) */

/* Not in rdma-core 44's <rdma/rdma_cma.h>: declared here as rdma-core 60
 * declares them. */
CM_EXPORT int rdma_write_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type event, int status,
				  uint64_t arg);
CM_EXPORT int rdma_resolve_addrinfo(struct rdma_cm_id *id, const char *node, const char *service,
				    const struct rdma_addrinfo *hints);
CM_EXPORT int rdma_query_addrinfo(struct rdma_cm_id *id, struct rdma_addrinfo **info);

/* rdma_write_cm_event(3) (rdma-core 60): queues a user event on id's
 * channel: event RDMA_CM_EVENT_USER (18) with status and arg in
 * event->param.arg (a uint64_t overlaying param.conn in rdma-core 60's
 * struct rdma_cm_event), e.g. to wake a thread blocked in
 * rdma_get_cm_event. 0, or -1 with errno EINVAL (NULL id, another event
 * type), ENOMEM. */
CM_EXPORT int rdma_write_cm_event(struct rdma_cm_id *rid, enum rdma_cm_event_type event, int status,
				  uint64_t arg)
{
	struct cm_event *e;

	if (!rid || event != CM_EVENT_USER) {
		errno = EINVAL;
		return -1;
	}
	e = cm_event_new(cm_id_of(rid), event, status);
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(&e->ev.param, &arg, sizeof(arg));
	cm_queue_event(e);
	return 0;
}

/* rdma_resolve_addrinfo(3) (rdma-core 60): rdma_getaddrinfo(node,
 * service, hints) for id, reported as RDMA_CM_EVENT_ADDRINFO_RESOLVED
 * (16) on its channel (a synchronous id waits for it); the result is
 * taken with rdma_query_addrinfo. DNS / numeric resolution only (RAI_DNS
 * or neither flag): iWARP has no IB SA, so RAI_SA is EOPNOTSUPP. 0, or -1
 * with errno EINVAL (NULL id), EBUSY (a result not yet queried),
 * EOPNOTSUPP (RAI_SA, or both RAI_SA and RAI_DNS), or rdma_getaddrinfo's
 * errno (the resolution failed: no event, as in rdma-core, which also
 * resolves DNS names synchronously). */
CM_EXPORT int rdma_resolve_addrinfo(struct rdma_cm_id *rid, const char *node, const char *service,
				    const struct rdma_addrinfo *hints)
{
	struct cm_id *id = cm_id_of(rid);
	struct rdma_addrinfo *res = NULL;
	struct cm_event *e;
	int ret;

	if (!rid) {
		errno = EINVAL;
		return -1;
	}
	if (hints && (hints->ai_flags & CM_RAI_SA)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	ret = id->resolving_ai;
	if (!ret)
		id->resolving_ai = true;
	pthread_mutex_unlock(&cm_lock);
	if (ret) {
		errno = EBUSY;
		return -1;
	}
	e = cm_event_new(id, CM_EVENT_ADDRINFO_RESOLVED, 0);
	ret = e ? rdma_getaddrinfo(node, service, hints, &res) : -1;
	if (ret) {
		int err = e ? errno : ENOMEM;

		free(e);
		pthread_mutex_lock(&cm_lock);
		id->resolving_ai = false;
		pthread_mutex_unlock(&cm_lock);
		errno = err ? err : EADDRNOTAVAIL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	id->resolved_ai = res;
	cm_queue_event_locked(e);
	pthread_mutex_unlock(&cm_lock);
	if (id->sync)
		return cm_sync_wait(id, CM_EVENT_ADDRINFO_RESOLVED);
	return 0;
}

/* rdma_query_addrinfo(3) (rdma-core 60): hands the result of the last
 * rdma_resolve_addrinfo of id to the caller (free with rdma_freeaddrinfo)
 * and ends that resolution. 0, or -1 with errno EINVAL (NULL argument),
 * ENOENT (no result). */
CM_EXPORT int rdma_query_addrinfo(struct rdma_cm_id *rid, struct rdma_addrinfo **info)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid || !info) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	*info = id->resolving_ai ? id->resolved_ai : NULL;
	if (*info) {
		id->resolved_ai = NULL;
		id->resolving_ai = false;
	}
	pthread_mutex_unlock(&cm_lock);
	if (!*info) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------- devices */

/* rdma_get_devices(3): a NULL-terminated array of the device contexts
 * rdma_cm uses (ours: one), *num_devices set if not NULL. NULL with errno
 * ENODEV / ENOMEM. Free with rdma_free_devices. */
CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context *ctx = cm_verbs();
	struct ibv_context **list;

	if (num_devices)
		*num_devices = 0;
	list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = ctx;
	if (num_devices && ctx)
		*num_devices = 1;
	return list;
}

/* rdma_free_devices(3): frees the array (not the shared contexts). */
CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
