/* libibverbs.so.1 (ours): PD, MR, completion channel, CQ, QP and the data
 * path ops (post_send, post_recv, poll_cq, req_notify_cq), mapped onto the
 * uiwarp engine (rdmap/rdmap.h).
 *
 * Sources: the rdma-core 44 man pages ibv_alloc_pd(3), ibv_reg_mr(3),
 * ibv_create_comp_channel(3), ibv_create_cq(3), ibv_get_cq_event(3),
 * ibv_poll_cq(3), ibv_req_notify_cq(3), ibv_create_qp(3), ibv_modify_qp(3),
 * ibv_query_qp(3), ibv_post_send(3), ibv_post_recv(3), ibv_create_srq(3),
 * ibv_post_srq_recv(3), ibv_create_cq_ex(3); RFC 5040 for what an RNIC
 * supports (RC only), RFC 7306 for immediate data and atomics (only on
 * connections that negotiated it).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs-shim/ibverbs/internal.h"

/* ibv_sge and uiw_sge have the same layout, so SGE lists pass through. */
_Static_assert(sizeof(struct ibv_sge) == sizeof(struct uiw_sge), "sge size");
_Static_assert(offsetof(struct ibv_sge, addr) == offsetof(struct uiw_sge, addr), "sge addr");
_Static_assert(offsetof(struct ibv_sge, length) == offsetof(struct uiw_sge, length), "sge len");
_Static_assert(offsetof(struct ibv_sge, lkey) == offsetof(struct uiw_sge, lkey), "sge lkey");
/* Enum values the engine promises to share with libibverbs. */
_Static_assert((int)UIW_WC_GENERAL_ERR == (int)IBV_WC_GENERAL_ERR, "wc status");
_Static_assert((int)UIW_WC_RECV == (int)IBV_WC_RECV, "wc opcode");
_Static_assert((int)UIW_WC_RDMA_READ == (int)IBV_WC_RDMA_READ, "wc opcode");
_Static_assert((int)UIW_QPS_ERR == (int)IBV_QPS_ERR, "qp state");
_Static_assert((int)UIW_QPS_SQD == (int)IBV_QPS_SQD, "qp state");
_Static_assert((int)UIW_WR_SEND_WITH_INV == (int)IBV_WR_SEND_WITH_INV, "wr opcode");
_Static_assert((int)UIW_WR_RDMA_READ == (int)IBV_WR_RDMA_READ, "wr opcode");
_Static_assert((int)UIW_SEND_INLINE == (int)IBV_SEND_INLINE, "send flags");
_Static_assert((int)UIW_SEND_SOLICITED == (int)IBV_SEND_SOLICITED, "send flags");
_Static_assert((int)UIW_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC, "access");

/* Work requests are converted on the stack in chunks of this many. */
#define SHIM_POST_CHUNK 32

static void shim_get(int *users)
{
	__atomic_add_fetch(users, 1, __ATOMIC_ACQ_REL);
}

static void shim_put(int *users)
{
	__atomic_sub_fetch(users, 1, __ATOMIC_ACQ_REL);
}

static bool shim_busy(int *users)
{
	return __atomic_load_n(users, __ATOMIC_ACQUIRE) > 0;
}

/* -------------------------------------------------------------------- PD */

/* ibv_alloc_pd(3): a protection domain. Returns NULL with errno EINVAL
 * (NULL context) or ENOMEM. */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct shim_pd *p;

	if (!context)
		return shim_fail_null(EINVAL);
	p = calloc(1, sizeof(*p));
	if (!p)
		return shim_fail_null(ENOMEM);
	p->pd = uiw_pd_alloc();
	if (!p->pd) {
		free(p);
		return shim_fail_null(ENOMEM);
	}
	p->ibv.context = context;
	return &p->ibv;
}

/* ibv_alloc_pd(3): frees a PD. Returns 0, or EBUSY while MRs or QPs use it. */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct shim_pd *p = shim_pd(pd);
	int ret;

	if (shim_busy(&p->users))
		return EBUSY;
	ret = uiw_pd_free(p->pd);
	if (ret)
		return -ret;
	free(p);
	return 0;
}

/* -------------------------------------------------------------------- MR */

#define SHIM_ACCESS_KNOWN                                                                          \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |               \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |                   \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB)

static struct ibv_mr *shim_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				  unsigned access)
{
	struct shim_pd *p;
	struct shim_mr *m;
	int ret;

	if (!pd)
		return shim_fail_null(EINVAL);
	p = shim_pd(pd);
	/* The optional bits (relaxed ordering, ...) may be ignored by any
	 * device: ibv_reg_mr(3). */
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	if (access & ~(unsigned)SHIM_ACCESS_KNOWN)
		return shim_fail_null(EINVAL);
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return shim_fail_null(EINVAL);
	/* We advertise no ODP capability. */
	if (access & IBV_ACCESS_ON_DEMAND)
		return shim_fail_null(EOPNOTSUPP);

	m = calloc(1, sizeof(*m));
	if (!m)
		return shim_fail_null(ENOMEM);
	ret = uiw_mr_reg(p->pd, addr, length, iova,
			 access & (UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE |
				   UIW_ACCESS_REMOTE_READ | UIW_ACCESS_REMOTE_ATOMIC |
				   UIW_ACCESS_MW_BIND),
			 &m->mr);
	if (ret) {
		free(m);
		return shim_fail_null(-ret);
	}
	m->ibv.context = pd->context;
	m->ibv.pd = pd;
	m->ibv.addr = addr;
	m->ibv.length = length;
	m->ibv.handle = m->mr->stag;
	m->ibv.lkey = m->mr->stag;
	m->ibv.rkey = m->mr->stag;
	shim_get(&p->users);
	return &m->ibv;
}

#undef ibv_reg_mr
/* ibv_reg_mr(3): registers addr[0..length) with access (IBV_ACCESS_*; the
 * optional range is ignored); the peer addresses it by virtual address, or
 * from 0 with IBV_ACCESS_ZERO_BASED. lkey = rkey = the engine STag.
 * Returns NULL with errno EINVAL (bad flags, REMOTE_WRITE/ATOMIC without
 * LOCAL_WRITE), EOPNOTSUPP (ON_DEMAND), ENOMEM. IBV_ACCESS_MW_BIND lets
 * memory windows be bound to the MR. */
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	uint64_t iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : (uintptr_t)addr;

	return shim_reg_mr(pd, addr, length, iova, (unsigned)access);
}

#undef ibv_reg_mr_iova
/* ibv_reg_mr_iova(3): as ibv_reg_mr, addressed as iova by the peer. */
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			       int access)
{
	return shim_reg_mr(pd, addr, length, iova, (unsigned)access);
}

/* ibv_reg_mr_iova2(3) (IBVERBS_1.8, what the ibv_reg_mr macro calls when the
 * access flags are not a constant): as ibv_reg_mr_iova. */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	return shim_reg_mr(pd, addr, length, iova, access);
}

/* ibv_reg_mr(3): invalidates the STag and frees the MR. Returns 0 or the
 * engine's errno (EINVAL). Calling it twice on one MR is undefined. */
int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct shim_mr *m = shim_mr(mr);
	struct shim_pd *p = shim_pd(mr->pd);
	int ret;

	ret = uiw_mr_dereg(m->mr);
	if (ret)
		return -ret;
	shim_put(&p->users);
	free(m);
	return 0;
}

/* ---------------------------------------------------- completion channel */

/* ibv_create_comp_channel(3): a channel whose fd becomes readable when an
 * armed CQ gets a completion. Returns NULL with errno EINVAL, ENOMEM, or
 * socketpair's errno. */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct shim_channel *ch;
	int fds[2];

	if (!context)
		return shim_fail_null(EINVAL);
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return shim_fail_null(ENOMEM);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
		int e = errno;

		free(ch);
		return shim_fail_null(e);
	}
	/* Only the read end is the application's; it never writes. */
	(void)shutdown(fds[0], SHUT_WR);
	(void)shutdown(fds[1], SHUT_RD);
	pthread_mutex_init(&ch->lock, NULL);
	ch->ibv.context = context;
	ch->ibv.fd = fds[0];
	ch->ibv.refcnt = 0;
	ch->wfd = fds[1];
	return &ch->ibv;
}

/* ibv_create_comp_channel(3): destroys a channel. Returns 0, or EBUSY while
 * CQs still use it. */
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct shim_channel *ch = shim_channel(channel);

	if (__atomic_load_n(&channel->refcnt, __ATOMIC_ACQUIRE) > 0)
		return EBUSY;
	close(channel->fd);
	close(ch->wfd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	return 0;
}

/* Engine CQ notify callback (engine thread): the armed CQ got a CQE; queue
 * one event record on its channel. */
static void shim_cq_notify(struct uiw_cq *ucq, void *arg)
{
	struct shim_cq *c = arg;
	struct ibv_cq *cq = &c->ibv;

	(void)ucq;
	if (!cq->channel)
		return;
	/* One record per arm, so the socket buffer cannot fill up. */
	(void)send(shim_channel(cq->channel)->wfd, &cq, sizeof(cq), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* ibv_get_cq_event(3): waits for the next completion event on channel
 * (blocking unless the application set O_NONBLOCK on channel->fd) and
 * returns its CQ and cq_context. Every event must be acked with
 * ibv_ack_cq_events. Returns 0, or -1 with errno EAGAIN (non-blocking,
 * none), EINTR, or EIO. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct shim_channel *ch = shim_channel(channel);
	struct ibv_cq *ev;

	for (;;) {
		ssize_t n;
		int e;

		/* Take the record and count it as reported under the channel
		 * lock, so ibv_destroy_cq (which drains under it) either drops
		 * the record or waits for its ack. Block outside the lock. */
		pthread_mutex_lock(&ch->lock);
		n = recv(channel->fd, &ev, sizeof(ev), MSG_DONTWAIT);
		e = errno;
		if (n == (ssize_t)sizeof(ev)) {
			pthread_mutex_lock(&ev->mutex);
			shim_cq(ev)->comp_events_reported++;
			pthread_mutex_unlock(&ev->mutex);
		}
		pthread_mutex_unlock(&ch->lock);
		if (n == (ssize_t)sizeof(ev))
			break;
		if (n >= 0) {
			errno = EIO;
			return -1;
		}
		if (e != EAGAIN && e != EWOULDBLOCK) {
			errno = e;
			return -1;
		}
		/* Nothing queued: EAGAIN if the application asked for a
		 * non-blocking fd, else wait for a record (EINTR ends the
		 * wait, as read() on a kernel channel does). */
		if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		{
			struct pollfd pfd = {.fd = channel->fd, .events = POLLIN};

			if (poll(&pfd, 1, -1) < 0)
				return -1;
		}
	}
	*cq = ev;
	*cq_context = ev->cq_context;
	return 0;
}

/* ibv_get_cq_event(3): acknowledges nevents events of cq (ibv_destroy_cq
 * waits for all of them). */
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Removes the queued, unread event records of cq from its channel, as the
 * kernel does when a CQ is destroyed. */
static void shim_channel_purge(struct shim_channel *ch, struct ibv_cq *cq)
{
	struct ibv_cq **keep = NULL, *ev;
	size_t nkeep = 0, cap = 0;

	pthread_mutex_lock(&ch->lock);
	for (;;) {
		ssize_t n = recv(ch->ibv.fd, &ev, sizeof(ev), MSG_DONTWAIT);

		if (n != (ssize_t)sizeof(ev))
			break;
		if (ev == cq)
			continue;
		if (nkeep == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct ibv_cq **k = realloc(keep, ncap * sizeof(*k));

			if (!k)
				break; /* drop the rest rather than block */
			keep = k;
			cap = ncap;
		}
		keep[nkeep++] = ev;
	}
	for (size_t i = 0; i < nkeep; i++)
		(void)send(ch->wfd, &keep[i], sizeof(keep[i]), MSG_DONTWAIT | MSG_NOSIGNAL);
	pthread_mutex_unlock(&ch->lock);
	free(keep);
}

/* -------------------------------------------------------------------- CQ */

/* ibv_create_cq(3): a CQ with at least cqe entries (1..UIW_MAX_CQE);
 * completion events go to channel (optional) once armed. comp_vector must
 * be 0 (num_comp_vectors is 1). Returns NULL with errno EINVAL or ENOMEM. */
struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct shim_cq *c;
	int ret;

	if (!context || cqe < 1 || cqe > UIW_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors)
		return shim_fail_null(EINVAL);
	if (channel && channel->context != context)
		return shim_fail_null(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return shim_fail_null(ENOMEM);
	ret = uiw_cq_create((unsigned)cqe, shim_cq_notify, c, &c->cq);
	if (ret) {
		free(c);
		return shim_fail_null(-ret);
	}
	c->ibv.context = context;
	c->ibv.channel = channel;
	c->ibv.cq_context = cq_context;
	c->ibv.cqe = cqe;
	pthread_mutex_init(&c->ibv.mutex, NULL);
	pthread_cond_init(&c->ibv.cond, NULL);
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	return &c->ibv;
}

/* ibv_resize_cq(3): the engine cannot resize; a request the CQ already
 * satisfies succeeds (cq->cqe unchanged), others fail. Returns 0, EINVAL or
 * EOPNOTSUPP. */
int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	if (cqe < 1)
		return EINVAL;
	return cqe <= cq->cqe ? 0 : EOPNOTSUPP;
}

/* ibv_create_cq(3): destroys a CQ after all its events returned by
 * ibv_get_cq_event / ibv_get_async_event are acked (it waits for that).
 * Returns 0, or EBUSY while a QP uses it. */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct shim_cq *c = shim_cq(cq);
	int ret;

	if (shim_busy(&c->users))
		return EBUSY;
	ret = uiw_cq_destroy(c->cq);
	if (ret)
		return -ret;
	if (cq->channel)
		shim_channel_purge(shim_channel(cq->channel), cq);
	shim_async_purge(shim_ctx(cq->context), cq);

	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != c->comp_events_reported ||
	       cq->async_events_completed != c->async_events_reported)
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);

	if (cq->channel)
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
	pthread_cond_destroy(&cq->cond);
	pthread_mutex_destroy(&cq->mutex);
	free(c);
	return 0;
}

static void shim_wc_from_uiw(struct ibv_wc *w, const struct uiw_wc *u)
{
	w->wr_id = u->wr_id;
	w->status = (enum ibv_wc_status)u->status;
	w->opcode = (enum ibv_wc_opcode)u->opcode;
	w->vendor_err = u->vendor_err;
	w->byte_len = u->byte_len;
	if (u->flags & UIW_WC_WITH_INV) {
		w->invalidated_rkey = u->invalidated_stag;
		w->wc_flags = IBV_WC_WITH_INV;
	} else if (u->flags & UIW_WC_WITH_IMM) {
		w->imm_data = u->imm_data;
		w->wc_flags = IBV_WC_WITH_IMM;
	} else {
		w->imm_data = 0;
		w->wc_flags = 0;
	}
	w->qp_num = u->qp_num;
	w->src_qp = 0;
	w->pkey_index = 0;
	w->slid = 0;
	w->sl = 0;
	w->dlid_path_bits = 0;
}

/* ops.poll_cq (ibv_poll_cq(3)): moves up to num_entries completions into
 * wc[], oldest first. Returns the count (0 = empty) or -1 for
 * num_entries < 0. A CQ overflow raises IBV_EVENT_CQ_ERR once. */
int shim_op_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	struct shim_cq *c = shim_cq(cq);
	struct uiw_wc u[SHIM_POST_CHUNK];
	int total = 0;

	if (num_entries < 0)
		return -1;
	while (total < num_entries) {
		int want = num_entries - total;
		int got;

		if (want > SHIM_POST_CHUNK)
			want = SHIM_POST_CHUNK;
		got = uiw_cq_poll(c->cq, want, u);
		if (got <= 0)
			break;
		for (int i = 0; i < got; i++)
			shim_wc_from_uiw(&wc[total + i], &u[i]);
		total += got;
		if (got < want)
			break;
	}
	if (total == 0 && !__atomic_load_n(&c->overflow_reported, __ATOMIC_RELAXED) &&
	    uiw_cq_overflowed(c->cq) &&
	    !__atomic_exchange_n(&c->overflow_reported, true, __ATOMIC_ACQ_REL)) {
		struct ibv_async_event ev = {.element.cq = cq, .event_type = IBV_EVENT_CQ_ERR};

		shim_async_push(shim_ctx(cq->context), &ev);
	}
	return total;
}

/* ops.req_notify_cq (ibv_req_notify_cq(3)): arms the CQ; the next
 * (solicited, if solicited_only) completion queues one event on its
 * channel. If the CQ already holds completions, the engine queues the
 * event at once, as hardware does when armed with unpolled CQEs (programs
 * that poll a bounded batch after each event, like perftest -e, rely on
 * it). Returns 0. */
int shim_op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct shim_cq *c = shim_cq(cq);
	return -uiw_cq_arm(c->cq, solicited_only != 0);
}

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

static struct ibv_qp *shim_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct uiw_qp_init_attr ua;
	struct shim_qp *q;
	struct shim_cq *scq, *rcq;
	int ret;

	if (!pd || !attr)
		return shim_fail_null(EINVAL);
	/* An RNIC has only reliable connected QPs (RFC 5040). */
	if (attr->qp_type != IBV_QPT_RC)
		return shim_fail_null(EOPNOTSUPP);
	if (attr->srq && (!shim_have_srq() || attr->srq->context != pd->context))
		return shim_fail_null(attr->srq && shim_have_srq() ? EINVAL : EOPNOTSUPP);
	if (!attr->send_cq || !attr->recv_cq || attr->send_cq->context != pd->context ||
	    attr->recv_cq->context != pd->context)
		return shim_fail_null(EINVAL);
	scq = shim_cq(attr->send_cq);
	rcq = shim_cq(attr->recv_cq);

	q = calloc(1, sizeof(*q));
	if (!q)
		return shim_fail_null(ENOMEM);
	memset(&ua, 0, sizeof(ua));
	ua.pd = shim_pd(pd)->pd;
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
	q->ibv.state = IBV_QPS_RESET; /* the engine's INIT is verbs' RESET until modified */
	q->ibv.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&q->ibv.mutex, NULL);
	pthread_cond_init(&q->ibv.cond, NULL);
	shim_get(&shim_pd(pd)->users);
	shim_get(&scq->users);
	shim_get(&rcq->users);
	uiw_qp_set_event_cb(q->qp, shim_qp_event, q);
	shim_qp_hash_add(q);
	return &q->ibv;
}

/* ibv_create_qp(3): an RC QP in RESET with at least the requested caps
 * (the granted ones are written back to attr->cap). Returns NULL with
 * errno EOPNOTSUPP (UD, UC, XRC, raw: an RNIC has RC only; an SRQ),
 * EINVAL (missing or foreign CQ, caps too large), ENOMEM. */
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
 * errno EINVAL (no PD, foreign PD), EOPNOTSUPP (other comp_mask bits:
 * XRC, RSS, TSO, ...; unsupported send ops or create flags). */
struct ibv_qp *shim_op_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;

	if (!attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
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
	struct shim_qp *q = shim_qp(qp);

	if (!attr)
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

/* ibv_query_qp(3): state, caps, IRD/ORD, access flags, and the creation
 * attributes. attr_mask is a hint; everything is filled. Returns 0 or
 * EINVAL. */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct shim_qp *q = shim_qp(qp);
	enum uiw_qp_state s;

	(void)attr_mask;
	if (!attr || !init_attr)
		return EINVAL;
	s = uiw_qp_get_state(q->qp);
	memset(attr, 0, sizeof(*attr));
	if (s == UIW_QPS_INIT && qp->state == IBV_QPS_RESET)
		attr->qp_state = IBV_QPS_RESET;
	else
		attr->qp_state = (enum ibv_qp_state)s;
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
 * errno. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct shim_qp *q = shim_qp(qp);
	int ret;

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
	return 0;
}

/* ------------------------------------------------------------- data path */

#define SHIM_SEND_FLAGS (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)

/* Whether q's connection negotiated RFC 7306 (immediate data, atomics).
 * Returns 0 or EOPNOTSUPP. */
int shim_check_rfc7306(struct shim_qp *q)
{
	if (uiw_qp_caps == NULL || !(uiw_qp_caps(q->qp) & UIW_CAP_RFC7306))
		return EOPNOTSUPP;
	return 0;
}

/* The window part of a Bind MW request (IBV_WR_BIND_MW, ibv_bind_mw,
 * ibv_wr_bind_mw) into u: mw takes rkey (its index with the caller's key
 * byte) and names [info->addr, +info->length) of info->mr with
 * info->mw_access_flags (IBV_ACCESS_REMOTE_READ / REMOTE_WRITE /
 * REMOTE_ATOMIC); length 0 unbinds. Returns 0 or EINVAL (no window, no MR
 * for a non-zero length, other access bits such as ZERO_BASED). */
int shim_bind_wr(struct uiw_send_wr *u, struct ibv_mw *mw, uint32_t rkey,
		 const struct ibv_mw_bind_info *info)
{
	const unsigned ok =
	    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

	if (!mw || !info || (info->length && !info->mr) || (info->mw_access_flags & ~ok))
		return EINVAL;
	u->remote_addr = 0;
	u->invalidate_rkey = 0;
	u->rkey = rkey;
	u->mw = shim_mw(mw)->mw;
	u->bind_mr = info->length ? shim_mr(info->mr)->mr : NULL;
	u->bind_addr = info->addr;
	u->bind_length = info->length;
	u->bind_access = info->mw_access_flags;
	return 0;
}

/* One ibv_send_wr → uiw_send_wr. Returns 0, EOPNOTSUPP (immediate data or
 * atomics on a connection without RFC 7306; TSO) or EINVAL (unknown
 * opcode, flags; Bind MW of a type 1 window or without a window). */
static int shim_send_wr(struct shim_qp *q, struct uiw_send_wr *u, const struct ibv_send_wr *w)
{
	int ret;

	u->imm_data = 0;
	u->compare_add = 0;
	u->swap = 0;
	u->mw = NULL;
	u->bind_mr = NULL;
	u->bind_addr = 0;
	u->bind_length = 0;
	u->bind_access = 0;
	switch (w->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		u->remote_addr = w->wr.rdma.remote_addr;
		u->rkey = w->wr.rdma.rkey;
		u->invalidate_rkey = 0;
		break;
	case IBV_WR_SEND:
		u->remote_addr = 0;
		u->rkey = 0;
		u->invalidate_rkey = 0;
		break;
	case IBV_WR_SEND_WITH_INV:
		u->remote_addr = 0;
		u->rkey = 0;
		u->invalidate_rkey = w->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if ((ret = shim_check_rfc7306(q)))
			return ret;
		u->remote_addr = w->wr.rdma.remote_addr;
		u->rkey = w->wr.rdma.rkey;
		u->invalidate_rkey = 0;
		u->imm_data = w->imm_data;
		break;
	case IBV_WR_SEND_WITH_IMM:
		if ((ret = shim_check_rfc7306(q)))
			return ret;
		u->remote_addr = 0;
		u->rkey = 0;
		u->invalidate_rkey = 0;
		u->imm_data = w->imm_data;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if ((ret = shim_check_rfc7306(q)))
			return ret;
		u->remote_addr = w->wr.atomic.remote_addr;
		u->rkey = w->wr.atomic.rkey;
		u->invalidate_rkey = 0;
		u->compare_add = w->wr.atomic.compare_add;
		u->swap = w->wr.atomic.swap;
		break;
	case IBV_WR_LOCAL_INV:
		/* RFC 5040 section 2 / verbs: the STag stops working, in
		 * send-queue order */
		u->remote_addr = 0;
		u->rkey = 0;
		u->invalidate_rkey = w->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW:
		ret = shim_bind_wr(u, w->bind_mw.mw, w->bind_mw.rkey, &w->bind_mw.bind_info);
		if (ret)
			return ret;
		if (w->bind_mw.mw->type != IBV_MW_TYPE_2)
			return EINVAL; /* type 1: ibv_bind_mw only */
		break;
	case IBV_WR_TSO:
		return EOPNOTSUPP;
	default:
		return EINVAL;
	}
	if (w->send_flags & ~(unsigned)SHIM_SEND_FLAGS)
		return EINVAL;
	u->wr_id = w->wr_id;
	u->opcode = (enum uiw_wr_opcode)w->opcode;
	u->flags = w->send_flags; /* same bit values */
	if (w->opcode == IBV_WR_LOCAL_INV || w->opcode == IBV_WR_BIND_MW) {
		/* local operations carry no data (ibv_post_send(3) ignores
		 * their sg_list) */
		u->sg_list = NULL;
		u->num_sge = 0;
		u->flags &= ~(unsigned)IBV_SEND_INLINE;
	} else {
		u->sg_list = (const struct uiw_sge *)w->sg_list;
		u->num_sge = w->num_sge;
	}
	return 0;
}

/* ops.post_send (ibv_post_send(3)): posts the list wr (Send, Send with
 * Invalidate, RDMA Write, RDMA Read; RFC 5040 section 5; with RFC 7306:
 * Write/Send with Immediate, Compare and Swap, Fetch and Add) in chunks of
 * SHIM_POST_CHUNK. Returns 0, or an errno with *bad_wr = the first WR not
 * posted: ENOMEM (send queue full), EINVAL (bad WR, QP state),
 * EOPNOTSUPP (opcode an RNIC lacks), ENOTCONN. */
int shim_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct shim_qp *q = shim_qp(qp);
	struct uiw_send_wr u[SHIM_POST_CHUNK];
	struct ibv_send_wr *src[SHIM_POST_CHUNK];

	while (wr) {
		int n = 0, err = 0;

		for (; wr && n < SHIM_POST_CHUNK; wr = wr->next) {
			err = shim_send_wr(q, &u[n], wr);
			if (err)
				break;
			src[n++] = wr;
		}
		if (n) {
			int bad = 0;
			int ret = uiw_qp_post_send(q->qp, u, n, &bad);

			if (ret) {
				*bad_wr = src[(bad >= 0 && bad < n) ? bad : 0];
				return -ret;
			}
		}
		if (err) {
			*bad_wr = wr;
			return err;
		}
	}
	return 0;
}

static int qp_recv(void *obj, const struct uiw_recv_wr *u, int n, int *bad)
{
	return uiw_qp_post_recv(obj, u, n, bad);
}

static int srq_recv(void *obj, const struct uiw_recv_wr *u, int n, int *bad)
{
	return uiw_srq_post_recv(obj, u, n, bad);
}

/* Posts the receive list wr through post (a QP's RQ or an SRQ) in chunks
 * of SHIM_POST_CHUNK, converted on the stack. 0, or the errno of the
 * first failing chunk with *bad_wr = the first WR not posted. */
static int post_recv_list(struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr,
			  int (*post)(void *, const struct uiw_recv_wr *, int, int *), void *obj)
{
	struct uiw_recv_wr u[SHIM_POST_CHUNK];
	struct ibv_recv_wr *src[SHIM_POST_CHUNK];

	while (wr) {
		int n = 0, bad = 0, ret;

		for (; wr && n < SHIM_POST_CHUNK; wr = wr->next) {
			u[n].wr_id = wr->wr_id;
			u[n].sg_list = (const struct uiw_sge *)wr->sg_list;
			u[n].num_sge = wr->num_sge;
			src[n++] = wr;
		}
		ret = post(obj, u, n, &bad);
		if (ret) {
			*bad_wr = src[(bad >= 0 && bad < n) ? bad : 0];
			return -ret;
		}
	}
	return 0;
}

/* ops.post_recv (ibv_post_recv(3)): posts the receive list wr in chunks.
 * Returns 0, or an errno with *bad_wr = the first WR not posted: ENOMEM
 * (receive queue full), EINVAL (too many SGEs, QP state). */
int shim_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct shim_qp *q = shim_qp(qp);

	if (qp->srq && wr) {
		/* ibv_post_recv(3): a QP attached to an SRQ has no receive queue */
		*bad_wr = wr;
		return EINVAL;
	}
	return post_recv_list(wr, bad_wr, qp_recv, q->qp);
}

/* ------------------------------------------------------------------- SRQ */

/* ops.post_srq_recv (ibv_post_srq_recv(3)): posts the receive list wr on
 * the SRQ in chunks. Returns 0, or an errno with *bad_wr = the first WR not
 * posted: ENOMEM (SRQ full), EINVAL (too many SGEs). */
int shim_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct shim_srq *s = shim_srq(srq);

	return post_recv_list(wr, bad_wr, srq_recv, s->srq);
}

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
 * Returns NULL with errno EINVAL, ENOMEM, or EOPNOTSUPP (engine without
 * SRQs; max_srq is then 0). */
struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *srq_init_attr)
{
	struct shim_srq *s;
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
	s = calloc(1, sizeof(*s));
	if (!s)
		return shim_fail_null(ENOMEM);
	ret = uiw_srq_create(shim_pd(pd)->pd, &max_wr, &max_sge, &s->srq);
	if (ret) {
		free(s);
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
	shim_get(&shim_pd(pd)->users);
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
	return 0;
}

/* ------------------------------------------------- CQ ex (poll iterator) */

#define SHIM_CQ_EX_FLAGS                                                                           \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |                    \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |                         \
	 IBV_WC_EX_WITH_DLID_PATH_BITS)

static int shim_cqx_load(struct ibv_cq_ex *cqx)
{
	struct shim_cq *c = shim_container_of(cqx, struct shim_cq, ibvx);

	if (uiw_cq_poll(c->cq, 1, &c->cur) != 1)
		return ENOENT;
	cqx->wr_id = c->cur.wr_id;
	cqx->status = (enum ibv_wc_status)c->cur.status;
	return 0;
}

static struct shim_cq *shim_cqx(struct ibv_cq_ex *cqx)
{
	return shim_container_of(cqx, struct shim_cq, ibvx);
}

/* ibv_start_poll(3): attr->comp_mask must be 0. ENOENT when empty (then
 * ibv_end_poll must not be called), EINVAL. */
static int shim_cqx_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return shim_cqx_load(cqx);
}

static int shim_cqx_next_poll(struct ibv_cq_ex *cqx)
{
	return shim_cqx_load(cqx);
}

static void shim_cqx_end_poll(struct ibv_cq_ex *cqx)
{
	(void)cqx;
}

static enum ibv_wc_opcode shim_cqx_read_opcode(struct ibv_cq_ex *cqx)
{
	return (enum ibv_wc_opcode)shim_cqx(cqx)->cur.opcode;
}

static uint32_t shim_cqx_read_vendor_err(struct ibv_cq_ex *cqx)
{
	return shim_cqx(cqx)->cur.vendor_err;
}

static uint32_t shim_cqx_read_byte_len(struct ibv_cq_ex *cqx)
{
	return shim_cqx(cqx)->cur.byte_len;
}

static __be32 shim_cqx_read_imm_data(struct ibv_cq_ex *cqx)
{
	const struct uiw_wc *u = &shim_cqx(cqx)->cur;

	if (u->flags & UIW_WC_WITH_INV)
		return (__be32)u->invalidated_stag; /* the union's other member */
	return (__be32)u->imm_data;
}

static uint32_t shim_cqx_read_qp_num(struct ibv_cq_ex *cqx)
{
	return shim_cqx(cqx)->cur.qp_num;
}

static uint32_t shim_cqx_read_zero32(struct ibv_cq_ex *cqx)
{
	(void)cqx;
	return 0;
}

static uint8_t shim_cqx_read_zero8(struct ibv_cq_ex *cqx)
{
	(void)cqx;
	return 0;
}

static unsigned int shim_cqx_read_wc_flags(struct ibv_cq_ex *cqx)
{
	const struct uiw_wc *u = &shim_cqx(cqx)->cur;
	unsigned f = 0;

	if (u->flags & UIW_WC_WITH_INV)
		f |= IBV_WC_WITH_INV;
	if (u->flags & UIW_WC_WITH_IMM)
		f |= IBV_WC_WITH_IMM;
	return f;
}

/* verbs_context.create_cq_ex (ibv_create_cq_ex(3)): a CQ read with the poll
 * iterator (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*) or
 * with ibv_poll_cq on ibv_cq_ex_to_cq. wc_flags may ask for byte_len, imm,
 * qp_num, src_qp, slid, sl, dlid_path_bits (the IB-only ones read 0);
 * timestamps, cvlan, flow tag and tag matching are EOPNOTSUPP, as are
 * create flags and parent domains. Returns NULL with errno EINVAL (cqe out
 * of range, bad channel / comp_vector), EOPNOTSUPP, ENOMEM. */
struct ibv_cq_ex *shim_op_create_cq_ex(struct ibv_context *context,
				       struct ibv_cq_init_attr_ex *attr)
{
	struct ibv_cq *cq;
	struct shim_cq *c;
	struct ibv_cq_ex *x;

	if (!attr)
		return shim_fail_null(EINVAL);
	if (attr->wc_flags & ~(uint64_t)SHIM_CQ_EX_FLAGS)
		return shim_fail_null(EOPNOTSUPP);
	if (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS)
		return shim_fail_null(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && attr->flags)
		return shim_fail_null(EOPNOTSUPP);
	if (attr->cqe > UIW_MAX_CQE)
		return shim_fail_null(EINVAL);
	cq = ibv_create_cq(context, (int)attr->cqe, attr->cq_context, attr->channel,
			   (int)attr->comp_vector);
	if (!cq)
		return NULL;
	c = shim_cq(cq);
	c->wc_flags = attr->wc_flags;
	x = &c->ibvx;
	x->comp_mask = 0;
	x->start_poll = shim_cqx_start_poll;
	x->next_poll = shim_cqx_next_poll;
	x->end_poll = shim_cqx_end_poll;
	x->read_opcode = shim_cqx_read_opcode;
	x->read_vendor_err = shim_cqx_read_vendor_err;
	x->read_byte_len = shim_cqx_read_byte_len;
	x->read_imm_data = shim_cqx_read_imm_data;
	x->read_qp_num = shim_cqx_read_qp_num;
	x->read_src_qp = shim_cqx_read_zero32;
	x->read_wc_flags = shim_cqx_read_wc_flags;
	x->read_slid = shim_cqx_read_zero32;
	x->read_sl = shim_cqx_read_zero8;
	x->read_dlid_path_bits = shim_cqx_read_zero8;
	return x;
}

/* ops.alloc_mw (ibv_alloc_mw(3)): an unbound memory window of type
 * IBV_MW_TYPE_1 or IBV_MW_TYPE_2 on pd (RFC 5040 section 2: an STag of its
 * own naming part of an MR once bound). mw->rkey is its STag; it names no
 * memory until bound. Returns NULL with errno EINVAL (no PD, other type) or
 * ENOMEM. */
struct ibv_mw *shim_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct shim_mw *w;
	uint32_t rkey = 0;
	int ret;

	if (!pd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2))
		return shim_fail_null(EINVAL);
	w = calloc(1, sizeof(*w));
	if (!w)
		return shim_fail_null(ENOMEM);
	ret = uiw_mw_alloc(shim_pd(pd)->pd, (int)type, &w->mw, &rkey);
	if (ret) {
		free(w);
		return shim_fail_null(-ret);
	}
	w->ibv.context = pd->context;
	w->ibv.pd = pd;
	w->ibv.rkey = rkey;
	w->ibv.handle = rkey;
	w->ibv.type = type;
	shim_get(&shim_pd(pd)->users);
	return &w->ibv;
}

/* ops.bind_mw (ibv_bind_mw(3), type 1 windows; libibverbs' inline wrapper
 * refuses type 2): posts a Bind MW work request on qp's send queue, so it
 * takes effect in send-queue order. The new rkey is mw->rkey with its key
 * byte incremented (ibv_inc_rkey); mw->rkey is set to it when the request
 * is posted, as rdma-core providers do. A completion (IBV_WC_BIND_MW,
 * wr_id mw_bind->wr_id) comes if IBV_SEND_SIGNALED or the QP signals all;
 * a bind that breaks the MR's rules completes with an error (MR without
 * IBV_ACCESS_MW_BIND, remote write without local write: LOC_ACCESS_ERR;
 * range outside the MR, other PD: LOC_PROT_ERR). A zero bind_info.length
 * unbinds. Returns 0 or an errno (EINVAL bad arguments or access bits,
 * ENOMEM send queue full, QP state errors as ibv_post_send). */
int shim_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	struct shim_qp *q;
	struct uiw_send_wr u = {0};
	uint32_t rkey;
	int bad = 0, ret;

	if (!qp || !mw || !mw_bind || mw->type != IBV_MW_TYPE_1 || mw->pd != qp->pd)
		return EINVAL;
	if (mw_bind->send_flags & ~(unsigned)(IBV_SEND_SIGNALED | IBV_SEND_FENCE))
		return EINVAL;
	q = shim_qp(qp);
	rkey = ibv_inc_rkey(mw->rkey);
	ret = shim_bind_wr(&u, mw, rkey, &mw_bind->bind_info);
	if (ret)
		return ret;
	u.wr_id = mw_bind->wr_id;
	u.opcode = UIW_WR_BIND_MW;
	u.flags = mw_bind->send_flags;
	ret = uiw_qp_post_send(q->qp, &u, 1, &bad);
	if (ret)
		return -ret;
	mw->rkey = rkey;
	return 0;
}

/* ops.dealloc_mw (ibv_dealloc_mw(3)): frees the window; a binding it still
 * has is dropped first (its rkey stops working). Returns 0 or EINVAL. */
int shim_op_dealloc_mw(struct ibv_mw *mw)
{
	struct shim_mw *w;
	struct ibv_pd *pd;
	int ret;

	if (!mw)
		return EINVAL;
	w = shim_mw(mw);
	pd = mw->pd;
	ret = uiw_mw_dealloc(w->mw);
	if (ret)
		return -ret;
	shim_put(&shim_pd(pd)->users);
	free(w);
	return 0;
}
