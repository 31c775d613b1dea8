/* librdmacm.so.1 (ours): the QP of an id: rdma_create_qp(3),
 * rdma_create_qp_ex(3), rdma_destroy_qp(3), rdma_init_qp_attr(3), and the
 * hook through which our libibverbs reports the connection events of such
 * a QP (the stream closed or failed) to its id.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs-shim/shim.h"
#include "cm_priv.h"

/* ------------------------------------------------------------------ QP */

static void cm_qp_event(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx);

static int create_cqs(struct cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	struct rdma_cm_id *r = &id->id;

	if (recv_size) {
		r->recv_cq_channel = ibv_create_comp_channel(r->verbs);
		if (!r->recv_cq_channel)
			return -1;
		r->recv_cq = ibv_create_cq(r->verbs, recv_size, r, r->recv_cq_channel, 0);
		if (!r->recv_cq)
			return -1;
		id->own_recv_cq = true;
	}
	if (send_size) {
		r->send_cq_channel = ibv_create_comp_channel(r->verbs);
		if (!r->send_cq_channel)
			return -1;
		r->send_cq = ibv_create_cq(r->verbs, send_size, r, r->send_cq_channel, 0);
		if (!r->send_cq)
			return -1;
		id->own_send_cq = true;
	}
	return 0;
}

static void destroy_cqs(struct cm_id *id)
{
	struct rdma_cm_id *r = &id->id;

	if (id->own_recv_cq) {
		if (r->recv_cq)
			ibv_destroy_cq(r->recv_cq);
		if (r->recv_cq_channel)
			ibv_destroy_comp_channel(r->recv_cq_channel);
		r->recv_cq = NULL;
		r->recv_cq_channel = NULL;
		id->own_recv_cq = false;
	}
	if (id->own_send_cq) {
		if (r->send_cq)
			ibv_destroy_cq(r->send_cq);
		if (r->send_cq_channel)
			ibv_destroy_comp_channel(r->send_cq_channel);
		r->send_cq = NULL;
		r->send_cq_channel = NULL;
		id->own_send_cq = false;
	}
}

/* Routes the engine connection events of q to id (the cm_event hook). */
static void hook_qp(struct shim_qp *q, struct cm_id *id)
{
	q->cm_ctx = (void *)(uintptr_t)id->handle;
	__atomic_store_n(&q->cm_event, cm_qp_event, __ATOMIC_RELEASE);
}

/* Sets id->conn_qp, the QP a connection of id uses: id->qp, or for an id
 * whose QP the application created itself (rping -q) the QP of id->verbs
 * numbered conn_param->qp_num, whose connection events are then hooked
 * too. NULL with errno EINVAL if there is none. */
struct ibv_qp *cm_find_conn_qp(struct cm_id *id, const struct rdma_conn_param *p)
{
	struct shim_qp *sq;

	if (id->id.qp) {
		id->conn_qp = id->id.qp;
		return id->conn_qp;
	}
	sq = p && id->id.verbs ? shim_qp_by_num(id->id.verbs, p->qp_num) : NULL;
	if (!sq) {
		errno = EINVAL;
		return NULL;
	}
	hook_qp(sq, id);
	id->conn_qp = &sq->ibv;
	return id->conn_qp;
}

/* rdma_create_qp_ex(3): creates an RC QP for id with our ibv_create_qp
 * (pd from attr->pd if IBV_QP_INIT_ATTR_PD is set, else id->pd, else this
 * library's PD), creates send/recv CQs with completion channels when attr
 * has none (cq_context = id, as rdma_verbs.h expects), moves the QP to
 * INIT, hooks its connection events, sets id->qp, id->pd to the QP's PD
 * (librdmacm: id->pd = qp->pd) and writes the granted capacities back
 * into attr->cap. 0, or -1 with errno EINVAL (PD of
 * another context, freed or not a PD; no device), EOPNOTSUPP (not RC), errno of libibverbs. */
CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *rid, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *id = cm_id_of(rid);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct ibv_pd *pd;
	struct ibv_qp *qp;
	int e;

	if (!rid || !attr || rid->qp) {
		errno = EINVAL;
		return -1;
	}
	if (attr->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return -1;
	}
	pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL;
	if (!pd)
		pd = rid->pd;
	if (pd && !shim_pd_is_live(pd)) { /* freed, or not a PD: never read it */
		errno = EINVAL;
		return -1;
	}
	if (pd && !rid->verbs)
		rid->verbs = pd->context;
	if (!rid->verbs || (pd && pd->context != rid->verbs)) {
		errno = EINVAL;
		return -1;
	}
	if (!pd)
		pd = cm_pd();
	if (!pd)
		return -1;
	if (create_cqs(id, attr->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq ? 0 : attr->cap.max_recv_wr))
		goto err_cq;
	if (!attr->send_cq)
		attr->send_cq = rid->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = rid->recv_cq;

	memset(&ia, 0, sizeof(ia));
	ia.qp_context = attr->qp_context;
	ia.send_cq = attr->send_cq;
	ia.recv_cq = attr->recv_cq;
	ia.srq = attr->srq;
	ia.cap = attr->cap;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = attr->sq_sig_all;
	if (attr->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) {
		/* send_ops_flags (the ibv_wr_* API), create flags, or
		 * something iWARP lacks: let ibv_create_qp_ex decide */
		struct ibv_qp_init_attr_ex ex = *attr;

		ex.comp_mask |= IBV_QP_INIT_ATTR_PD;
		ex.pd = pd;
		ex.qp_type = IBV_QPT_RC;
		qp = ibv_create_qp_ex(pd->context, &ex);
		if (qp)
			ia.cap = ex.cap;
	} else {
		qp = ibv_create_qp(pd, &ia);
	}
	if (!qp)
		goto err_cq;
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	qa.qp_access_flags =
	    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)) {
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;

		/* the QP may already be in INIT (the engine creates it so) */
		if (ibv_query_qp(qp, &q, IBV_QP_STATE, &qi) || q.qp_state != IBV_QPS_INIT) {
			e = errno;
			ibv_destroy_qp(qp);
			errno = e;
			goto err_cq;
		}
	}
	attr->cap = ia.cap;
	attr->pd = pd;
	rid->pd = pd; /* the QP's, as librdmacm sets it (rdma_reg_msgs uses it) */
	hook_qp(shim_qp(qp), id);
	rid->qp = qp;
	rid->qp_type = IBV_QPT_RC;
	return 0;

err_cq:
	e = errno ? errno : ENOMEM;
	destroy_cqs(id);
	errno = e;
	return -1;
}

/* rdma_create_qp(3): rdma_create_qp_ex with attr's fields and pd (NULL:
 * id->pd or this library's PD); attr->cap and the CQs used are written
 * back. Errors as rdma_create_qp_ex. */
CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	if (!qp_init_attr) {
		errno = EINVAL;
		return -1;
	}
	memset(&ex, 0, sizeof(ex));
	ex.qp_context = qp_init_attr->qp_context;
	ex.send_cq = qp_init_attr->send_cq;
	ex.recv_cq = qp_init_attr->recv_cq;
	ex.srq = qp_init_attr->srq;
	ex.cap = qp_init_attr->cap;
	ex.qp_type = qp_init_attr->qp_type;
	ex.sq_sig_all = qp_init_attr->sq_sig_all;
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	ret = rdma_create_qp_ex(id, &ex);
	if (!ret) {
		qp_init_attr->cap = ex.cap;
		qp_init_attr->send_cq = ex.send_cq;
		qp_init_attr->recv_cq = ex.recv_cq;
	}
	return ret;
}

/* rdma_destroy_qp(3): destroys id->qp (and the CQs this library created
 * for it) and clears id->qp. Destroying the QP of a connected id aborts
 * its stream; the id then gets its DISCONNECTED (once) if the close was
 * not reported yet, as with a kernel iWARP device, where the iw_cm id
 * outlives its QP and reports the close (cmtime disconnects, destroys the
 * QP at once, then waits for DISCONNECTED). */
CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *rid)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid)
		return;
	if (rid->qp) {
		bool conn_qp = id->conn_qp == rid->qp;

		if (conn_qp)
			id->conn_qp = NULL;
		/* joins the engine threads: no QP event is in flight after */
		ibv_destroy_qp(rid->qp);
		rid->qp = NULL;
		pthread_mutex_lock(&cm_lock);
		if (conn_qp && id->state == CM_CONNECTED && !id->destroying)
			cm_disconnected_locked(id);
		pthread_mutex_unlock(&cm_lock);
	}
	destroy_cqs(id);
}

/* rdma_init_qp_attr(3): the attributes for moving a QP to
 * qp_attr->qp_state (INIT: state + access flags LOCAL_WRITE|REMOTE_WRITE|
 * REMOTE_READ + port; RTR / RTS: state only, the iw_cm rule). 0, or -1
 * with errno EINVAL. */
CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask) {
		errno = EINVAL;
		return -1;
	}
	switch (qp_attr->qp_state) {
	case IBV_QPS_INIT:
		qp_attr->qp_access_flags =
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		qp_attr->port_num = 1;
		qp_attr->pkey_index = 0;
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
		return 0;
	case IBV_QPS_RTR:
	case IBV_QPS_RTS:
		*qp_attr_mask = IBV_QP_STATE;
		return 0;
	default:
		errno = EINVAL;
		return -1;
	}
}

/* ---------------------------------------------------- QP events (hook) */

/* Queues DISCONNECTED once. Called with cm_lock held. */
void cm_disconnected_locked(struct cm_id *id)
{
	struct cm_event *e;

	if (id->disc_queued)
		return;
	id->disc_queued = true;
	id->state = CM_DISCONNECTED;
	pthread_cond_broadcast(&cm_cond);
	e = cm_event_new(id, RDMA_CM_EVENT_DISCONNECTED, 0);
	if (e)
		cm_queue_event_locked(e);
}

/* The shim_qp cm_event hook: the stream of a QP created by rdma_create_qp
 * closed or failed (engine thread, or the thread destroying the QP). */
static void cm_qp_event(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx)
{
	struct cm_id *id;

	(void)qp;
	if (ev == UIW_QP_EV_ESTABLISHED)
		return;
	pthread_mutex_lock(&cm_lock);
	id = cm_id_lookup_locked((uint64_t)(uintptr_t)cm_ctx);
	if (id && !id->destroying) {
		if (id->state == CM_CONNECTED)
			cm_disconnected_locked(id);
		else if (id->state == CM_CONNECTING || id->state == CM_ACCEPTING)
			id->disc_pending = true;
	}
	pthread_mutex_unlock(&cm_lock);
}
