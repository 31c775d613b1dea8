/* libibverbs.so.1 (ours): RC queue pairs (create, modify, query, destroy),
 * their async events, and the qp_num lookup librdmacm uses, mapped onto
 * the uiwarp engine's QPs (rdmap/rdmap.h).
 *
 * Sources: the rdma-core 44 man pages ibv_create_qp(3), ibv_create_qp_ex(3),
 * ibv_modify_qp(3), ibv_query_qp(3), ibv_get_async_event(3); RFC 5040 for
 * what an RNIC supports (RC only) and the Terminate errors (section 7).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs-shim/ibverbs/internal.h"

/* -------------------------------------------------------------------- QP */

/* qp_num → QP, for shim_qp_by_num. */
#define SHIM_QP_HASH 256
static struct shim_qp *shim_qp_hash[SHIM_QP_HASH];
static pthread_mutex_t shim_qp_hash_lock = PTHREAD_MUTEX_INITIALIZER;

static void shim_qp_hash_add(struct shim_qp *q)
{
	struct shim_qp **b = &shim_qp_hash[q->ibv.qp_num % SHIM_QP_HASH];

	pthread_mutex_lock(&shim_qp_hash_lock);
	q->num_next = *b;
	*b = q;
	pthread_mutex_unlock(&shim_qp_hash_lock);
}

static void shim_qp_hash_del(struct shim_qp *q)
{
	struct shim_qp **pp = &shim_qp_hash[q->ibv.qp_num % SHIM_QP_HASH];

	pthread_mutex_lock(&shim_qp_hash_lock);
	for (; *pp; pp = &(*pp)->num_next) {
		if (*pp == q) {
			*pp = q->num_next;
			break;
		}
	}
	pthread_mutex_unlock(&shim_qp_hash_lock);
}

/* Is qp a QP ibv_create_qp* returned and ibv_destroy_qp has not freed?
 * Looked up by address among the live ones (every bucket: a pointer that
 * is not one must not be read), so a NULL, destroyed or stray QP gets
 * EINVAL from destroy / modify / query instead of a use after free (an
 * address a new QP took again counts as that QP). */
static bool shim_qp_is_live(const struct ibv_qp *qp)
{
	bool live = false;

	if (!qp)
		return false;
	pthread_mutex_lock(&shim_qp_hash_lock);
	for (unsigned i = 0; i < SHIM_QP_HASH && !live; i++)
		for (const struct shim_qp *q = shim_qp_hash[i]; q && !live; q = q->num_next)
			live = &q->ibv == qp;
	pthread_mutex_unlock(&shim_qp_hash_lock);
	return live;
}

/* See shim.h. */
struct shim_qp *shim_qp_by_num(struct ibv_context *context, uint32_t qp_num)
{
	struct shim_qp *q;

	pthread_mutex_lock(&shim_qp_hash_lock);
	for (q = shim_qp_hash[qp_num % SHIM_QP_HASH]; q; q = q->num_next)
		if (q->ibv.qp_num == qp_num && (!context || q->ibv.context == context))
			break;
	pthread_mutex_unlock(&shim_qp_hash_lock);
	if (!q)
		errno = ENOENT;
	return q;
}

/* Engine QP event callback (engine thread): raise the verbs async event,
 * then hand the event to librdmacm if it manages this QP. */
/* The async event a Terminate raises (RFC 5040 section 4.8 layer / etype /
 * ecode), as kernel iWARP providers report it: the side that detected the
 * peer's error and sent the Terminate gets IBV_EVENT_QP_ACCESS_ERR for a
 * protection error (DDP tagged buffer error, RDMAP remote protection
 * error: invalid STag, base and bounds, access rights, STag not
 * associated, TO wrap, STag cannot be invalidated; iw_cxgb4's T4_ERR_STAG /
 * ACCESS / BOUND / WRAP / INVALIDATE_*, siw's tagged-buffer checks) and
 * IBV_EVENT_QP_REQ_ERR for an invalid request (DDP untagged buffer error:
 * invalid QN, MSN range, MO, message too long; invalid
 * DDP or RDMAP version; unexpected RDMAP opcode); every other Terminate
 * (no receive buffer: T4_ERR_OUT_OF_RQE; LLP errors; catastrophic), and
 * every received one, is IBV_EVENT_QP_FATAL (iw_cxgb4's T4_ERR_TERM). */
enum ibv_event_type shim_term_event(const struct uiw_term_info *t)
{
	if (!t->valid || !t->sent)
		return IBV_EVENT_QP_FATAL;
	switch (t->layer) {
	case 0: /* RDMAP */
		if (t->etype == 1)
			return IBV_EVENT_QP_ACCESS_ERR;
		if (t->etype == 2 && (t->ecode == 0x05 || t->ecode == 0x06))
			return IBV_EVENT_QP_REQ_ERR;
		if (t->etype == 2 && t->ecode == 0x09)
			return IBV_EVENT_QP_ACCESS_ERR; /* STag cannot be invalidated */
		return IBV_EVENT_QP_FATAL;
	case 1: /* DDP */
		if (t->etype == 1)
			return t->ecode == 0x04 ? IBV_EVENT_QP_REQ_ERR /* DDP version */
						: IBV_EVENT_QP_ACCESS_ERR;
		if (t->etype == 2) /* no receive buffer: fatal, as T4_ERR_OUT_OF_RQE */
			return t->ecode == 0x02 ? IBV_EVENT_QP_FATAL : IBV_EVENT_QP_REQ_ERR;
		return IBV_EVENT_QP_FATAL;
	default: /* LLP (MPA: CRC, markers, FPDU length) */
		return IBV_EVENT_QP_FATAL;
	}
}

static void shim_qp_event(struct uiw_qp *uqp, enum uiw_qp_event ev, void *arg)
{
	struct shim_qp *q = arg;
	shim_cm_event_fn fn;

	switch (ev) {
	case UIW_QP_EV_TERMINATE:
	case UIW_QP_EV_FATAL: {
		struct ibv_async_event ae = {.element.qp = &q->ibv,
					     .event_type = IBV_EVENT_QP_FATAL};

		if (ev == UIW_QP_EV_TERMINATE) {
			struct uiw_term_info t;

			uiw_qp_term_info(uqp, &t);
			ae.event_type = shim_term_event(&t);
		}

		shim_async_push(shim_ctx(q->ibv.context), &ae);
		break;
	}
	default: /* ESTABLISHED, DISCONNECTED: connection events only */
		break;
	}
	fn = __atomic_load_n(&q->cm_event, __ATOMIC_ACQUIRE);
	if (fn)
		fn(q, ev, q->cm_ctx);
}

static struct ibv_qp *shim_create_qp_one(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct uiw_qp_init_attr ua;
	struct shim_qp *q;
	struct shim_cq *scq, *rcq;
	struct shim_pd *p;
	int ret;

	if (!attr)
		return shim_fail_null(EINVAL);
	/* An RNIC has only reliable connected QPs (RFC 5040). */
	if (attr->qp_type != IBV_QPT_RC)
		return shim_fail_null(EOPNOTSUPP);
	p = shim_pd_acquire(pd); /* NULL, freed or stray: EINVAL */
	if (!p)
		return NULL;
	if (attr->srq && (!shim_have_srq() || attr->srq->context != pd->context)) {
		shim_put(&p->users);
		return shim_fail_null(attr->srq && shim_have_srq() ? EINVAL : EOPNOTSUPP);
	}
	if (!attr->send_cq || !attr->recv_cq || attr->send_cq->context != pd->context ||
	    attr->recv_cq->context != pd->context) {
		shim_put(&p->users);
		return shim_fail_null(EINVAL);
	}
	scq = shim_cq(attr->send_cq);
	rcq = shim_cq(attr->recv_cq);

	q = calloc(1, sizeof(*q));
	if (!q) {
		shim_put(&p->users);
		return shim_fail_null(ENOMEM);
	}
	memset(&ua, 0, sizeof(ua));
	ua.pd = p->pd;
	ua.send_cq = scq->cq;
	ua.recv_cq = rcq->cq;
	ua.srq = attr->srq ? shim_srq(attr->srq)->srq : NULL;
	ua.max_send_wr = attr->cap.max_send_wr;
	ua.max_recv_wr = attr->cap.max_recv_wr;
	ua.max_send_sge = attr->cap.max_send_sge;
	ua.max_recv_sge = attr->cap.max_recv_sge;
	ua.max_inline = attr->cap.max_inline_data;
	ua.sq_sig_all = attr->sq_sig_all != 0;
	ua.ctx = q;
	ret = uiw_qp_create(&ua, &q->qp);
	if (ret) {
		free(q);
		shim_put(&p->users);
		return shim_fail_null(-ret);
	}
	q->cap.max_send_wr = ua.max_send_wr;
	q->cap.max_recv_wr = ua.max_recv_wr;
	q->cap.max_send_sge = ua.max_send_sge;
	q->cap.max_recv_sge = ua.max_recv_sge;
	q->cap.max_inline_data = ua.max_inline;
	attr->cap = q->cap;
	q->sq_sig_all = attr->sq_sig_all;

	q->ibv.context = pd->context;
	q->ibv.qp_context = attr->qp_context;
	q->ibv.pd = pd;
	q->ibv.send_cq = attr->send_cq;
	q->ibv.recv_cq = attr->recv_cq;
	q->ibv.srq = attr->srq;
	if (attr->srq) {
		/* receives come from the SRQ: the QP's own RQ has no WRs */
		q->cap.max_recv_wr = 0;
		q->cap.max_recv_sge = 0;
		attr->cap.max_recv_wr = 0;
		attr->cap.max_recv_sge = 0;
		shim_get(&shim_srq(attr->srq)->users);
	}
	q->ibv.qp_num = uiw_qp_num(q->qp);
	q->ibv.handle = q->ibv.qp_num;
	q->ibv.state = IBV_QPS_RESET; /* as libibverbs sets it; ibv_query_qp says INIT */
	q->ibv.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&q->ibv.mutex, NULL);
	pthread_cond_init(&q->ibv.cond, NULL);
	shim_get(&scq->users);
	shim_get(&rcq->users);
	uiw_qp_set_event_cb(q->qp, shim_qp_event, q);
	shim_qp_hash_add(q);
	return &q->ibv;
}

/* shim_create_qp_one within the device's QP limit (ENOMEM past it). */
static struct ibv_qp *shim_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp *qp;

	if (!shim_kind_get(SHIM_KIND_QP))
		return NULL;
	qp = shim_create_qp_one(pd, attr);
	if (!qp)
		shim_kind_put(SHIM_KIND_QP);
	return qp;
}

/* ibv_create_qp(3): an RC QP in RESET with at least the requested caps
 * (the granted ones are written back to attr->cap). Returns NULL with
 * errno EOPNOTSUPP (UD, UC, XRC, raw: an RNIC has RC only; an SRQ),
 * EINVAL (missing or foreign CQ, caps too large; pd NULL, freed or not a
 * PD), ENOMEM (also: max_qp QPs exist). */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	return shim_create_qp(pd, qp_init_attr);
}

/* The ibv_wr_* operations a QP can be created with (IBV_QP_EX_WITH_*):
 * RC Send/Write/Read/Send-with-Invalidate, and the RFC 7306 ones (immediate
 * data, atomics), which fail at post time on a connection without RFC 7306. */
#define SHIM_QP_EX_OPS                                                                             \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |    \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                                 \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |                 \
	 IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV)

/* verbs_context.create_qp_ex (ibv_create_qp_ex(3)): as ibv_create_qp, with
 * comp_mask PD (required), CREATE_FLAGS (no flags) and SEND_OPS_FLAGS (the
 * ibv_wr_* API, ibv_qp_to_qp_ex, for SHIM_QP_EX_OPS). Returns NULL with
 * errno EINVAL (no PD, a freed one or not a PD, foreign PD), EOPNOTSUPP (other comp_mask bits:
 * XRC, RSS, TSO, ...; unsupported send ops or create flags). */
struct ibv_qp *shim_op_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;

	if (!attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !shim_pd_is_live(attr->pd) ||
	    attr->pd->context != context)
		return shim_fail_null(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
					  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return shim_fail_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return shim_fail_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (attr->send_ops_flags & ~(uint64_t)SHIM_QP_EX_OPS))
		return shim_fail_null(EOPNOTSUPP);
	memset(&a, 0, sizeof(a));
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	qp = shim_create_qp(attr->pd, &a);
	if (!qp)
		return NULL;
	attr->cap = a.cap;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		struct shim_qp *q = shim_qp(qp);

		q->send_ops_flags = attr->send_ops_flags;
		shim_qp_ex_init(q);
	}
	return qp;
}

/* ibv_modify_qp(3): IBV_QP_STATE moves the engine QP (ERR flushes, SQD
 * starts iWARP's graceful close, RESET from ERR recycles). IB-only
 * attributes (path, timers, RNR, PSNs, pkey, qkey, ...) are accepted and
 * ignored; MAX_QP_RD_ATOMIC / MAX_DEST_RD_ATOMIC / ACCESS_FLAGS are kept
 * for ibv_query_qp (IRD/ORD are negotiated by rdma_cm). Returns 0, or
 * EINVAL for a state the verbs do not allow from the current one. */
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct shim_qp *q;

	if (!attr || !shim_qp_is_live(qp))
		return EINVAL;
	q = shim_qp(qp);
	/* ORD / IRD beyond what ibv_query_device reports (max_qp_init_rd_atom,
	 * max_qp_rd_atom): refused before anything changes, as the kernel's
	 * drivers do (siw_accept: EINVAL) */
	if (((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > UIW_MAX_ORD) ||
	    ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > UIW_MAX_IRD))
		return EINVAL;
	if (attr_mask & IBV_QP_STATE) {
		enum ibv_qp_state to = attr->qp_state;
		enum uiw_qp_state now = uiw_qp_get_state(q->qp);

		if ((unsigned)to > IBV_QPS_ERR)
			return EINVAL;
		/* A new engine QP is INIT already: verbs' RESET->INIT and
		 * INIT->RESET before any connection need no engine call. */
		if (!(now == UIW_QPS_INIT && (to == IBV_QPS_INIT || to == IBV_QPS_RESET))) {
			int ret = uiw_qp_modify(q->qp, (enum uiw_qp_state)to);

			if (ret)
				return -ret;
		}
	}
	if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
		q->max_rd_atomic = attr->max_rd_atomic;
	if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		q->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (attr_mask & IBV_QP_ACCESS_FLAGS)
		q->qp_access_flags = attr->qp_access_flags;
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

/* ibv_query_qp(3): state (an unconnected QP is INIT, also right after
 * creation and after a move to RESET, as on iWARP RNICs), caps, IRD/ORD,
 * access flags, and the creation attributes. attr_mask is a hint;
 * everything is filled. Returns 0 or EINVAL. */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct shim_qp *q;
	enum uiw_qp_state s;

	(void)attr_mask;
	if (!attr || !init_attr || !shim_qp_is_live(qp))
		return EINVAL;
	q = shim_qp(qp);
	s = uiw_qp_get_state(q->qp);
	memset(attr, 0, sizeof(*attr));
	/* An unconnected iWARP QP is idle, which the kernel's iWARP drivers
	 * report as INIT from creation on and after a move to RESET (siw:
	 * SIW_QP_STATE_IDLE, iw_cxgb4: C4IW_QP_STATE_IDLE -> IB_QPS_INIT);
	 * rdma-core's own tests (test_qp.py, query_qp_common_test) expect INIT
	 * for IBV_NODE_RNIC. The public qp->state is RESET until the first
	 * modify or query, as libibverbs sets it. */
	attr->qp_state = s == UIW_QPS_RESET ? IBV_QPS_INIT : (enum ibv_qp_state)s;
	attr->cur_qp_state = attr->qp_state;
	/* librdmacm moves the engine QP itself (connect, disconnect): keep the
	 * public field in step with what the engine says. */
	qp->state = attr->qp_state;
	attr->path_mtu = IBV_MTU_1024;
	attr->qp_access_flags = q->qp_access_flags;
	attr->cap = q->cap;
	attr->max_rd_atomic = q->max_rd_atomic;
	attr->max_dest_rd_atomic = q->max_dest_rd_atomic;
	attr->sq_draining = s == UIW_QPS_SQD;
	attr->port_num = SHIM_PORT_NUM;

	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->cap = q->cap;
	init_attr->qp_type = qp->qp_type;
	init_attr->sq_sig_all = q->sq_sig_all;
	return 0;
}

/* ibv_destroy_qp(3): aborts the connection if any, frees the QP after its
 * returned async events are acked (it waits). Returns 0 or the engine's
 * errno; EINVAL for NULL or a QP that is not live (destroyed already: a
 * second ibv_destroy_qp is an error, not a double free). */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct shim_qp *q;
	int ret;

	if (!shim_qp_is_live(qp))
		return EINVAL;
	q = shim_qp(qp);
	ret = uiw_qp_destroy(q->qp);
	if (ret)
		return -ret;
	shim_qp_hash_del(q);
	shim_async_purge(shim_ctx(qp->context), qp);
	pthread_mutex_lock(&qp->mutex);
	while (qp->events_completed != q->async_events_reported)
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	shim_put(&shim_cq(qp->send_cq)->users);
	shim_put(&shim_cq(qp->recv_cq)->users);
	shim_put(&shim_pd(qp->pd)->users);
	if (qp->srq)
		shim_put(&shim_srq(qp->srq)->users);
	shim_qp_ex_fini(q);
	pthread_cond_destroy(&qp->cond);
	pthread_mutex_destroy(&qp->mutex);
	free(q);
	shim_kind_put(SHIM_KIND_QP);
	return 0;
}
