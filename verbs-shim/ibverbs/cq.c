/* libibverbs.so.1 (ours): completion channels and CQs (ibv_create_cq,
 * ibv_poll_cq, ibv_req_notify_cq, ibv_get_cq_event, and the ibv_cq_ex poll
 * iterator), mapped onto the uiwarp engine's CQs (rdmap/rdmap.h).
 *
 * Sources: the rdma-core 44 man pages ibv_create_comp_channel(3),
 * ibv_create_cq(3), ibv_get_cq_event(3), ibv_poll_cq(3),
 * ibv_req_notify_cq(3), ibv_create_cq_ex(3).
 */
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/thread.h"
#include "verbs-shim/ibverbs/internal.h"

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
	struct shim_channel *ch;

	if (!channel)
		return EINVAL;
	ch = shim_channel(channel);
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
	/* One record per arm, so the socket buffer cannot fill up. Counted
	 * before it can be read. */
	__atomic_add_fetch(&c->records, 1, __ATOMIC_ACQ_REL);
	if (send(shim_channel(cq->channel)->wfd, &cq, sizeof(cq), MSG_DONTWAIT | MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(cq))
		__atomic_sub_fetch(&c->records, 1, __ATOMIC_ACQ_REL);
}

/* Under ch->lock: takes the record at the head of ch if it is cq's and cq
 * holds no completion (all were polled since it was written: an arm with
 * completions waiting fires at once, and the arming thread then polls
 * them), and arms cq again as the application last armed it, so its next
 * completion brings a record. With another_behind, only if another record
 * is queued behind it (the descriptor stays readable). Returns whether it
 * took one. */
static bool drop_stale_head(struct shim_channel *ch, struct ibv_cq *cq, bool another_behind)
{
	struct shim_cq *c = shim_cq(cq);
	struct ibv_cq *head;
	int queued = 0;

	if (recv(ch->ibv.fd, &head, sizeof(head), MSG_PEEK | MSG_DONTWAIT) !=
		(ssize_t)sizeof(head) ||
	    head != cq || uiw_cq_count(c->cq) != 0)
		return false;
	/* SIOCINQ of a SOCK_SEQPACKET socket: the bytes of all its records */
	if (another_behind &&
	    (ioctl(ch->ibv.fd, SIOCINQ, &queued) != 0 || queued <= (int)sizeof(head)))
		return false;
	(void)!recv(ch->ibv.fd, &head, sizeof(head), MSG_DONTWAIT);
	__atomic_sub_fetch(&c->records, 1, __ATOMIC_ACQ_REL);
	(void)uiw_cq_arm(c->cq, __atomic_load_n(&c->arm_solicited, __ATOMIC_RELAXED), false);
	return true;
}

/* Takes the record at the head of ch's queue into *out and counts it as
 * reported, under the channel lock, so ibv_destroy_cq (which drains under
 * it) either drops the record or waits for its ack. Not a cancellation
 * point. Returns 1 (*out set), 0 none queued, -1 with errno (EIO, the
 * recv's). Never inlined: its stack slots (ASan-poisoned once out of scope)
 * must not sit in ibv_get_cq_event's frame while it waits, see
 * wait_readable. */
static __attribute__((noinline)) int take_record(struct shim_channel *ch, struct ibv_cq **out)
{
	struct ibv_cq *ev;
	ssize_t n;
	int e, cs;

	for (;;) {
		cs = uiw_nocancel_begin();
		pthread_mutex_lock(&ch->lock);
		n = recv(ch->ibv.fd, &ev, sizeof(ev), MSG_PEEK | MSG_DONTWAIT);
		if (n == (ssize_t)sizeof(ev) && drop_stale_head(ch, ev, true)) {
			/* A record with nothing to poll behind it and another
			 * record after it: skipped. ibv_poll_cq drops such a
			 * record when it empties the CQ (shim_op_poll_cq), so an
			 * event rarely has nothing behind it (perftest -e polls
			 * once per event and relies on that). The last record
			 * queued is reported even so (its CQ polled empty between
			 * the record's write and this call), as an RNIC may report
			 * an event with nothing to poll: a program that saw the
			 * descriptor readable must not wait here for a completion
			 * that may only come after its own next step (tgtd's epoll
			 * loop waited for the initiator's next command, and
			 * libiscsi's initiator, sending none, gave up after 1 s). */
			pthread_mutex_unlock(&ch->lock);
			uiw_nocancel_end(cs);
			continue;
		}
		n = recv(ch->ibv.fd, &ev, sizeof(ev), MSG_DONTWAIT);
		e = errno;
		if (n == (ssize_t)sizeof(ev)) {
			__atomic_sub_fetch(&shim_cq(ev)->records, 1, __ATOMIC_ACQ_REL);
			__atomic_store_n(&shim_cq(ev)->took_unpolled, true, __ATOMIC_RELEASE);
			pthread_mutex_lock(&ev->mutex);
			shim_cq(ev)->comp_events_reported++;
			pthread_mutex_unlock(&ev->mutex);
		}
		pthread_mutex_unlock(&ch->lock);
		uiw_nocancel_end(cs);
		if (n == (ssize_t)sizeof(ev)) {
			*out = ev;
			return 1;
		}
		if (n >= 0) {
			errno = EIO;
			return -1;
		}
		if (e != EAGAIN && e != EWOULDBLOCK) {
			errno = e;
			return -1;
		}
		return 0;
	}
}

/* Waits until fd is readable (poll, no timeout): ibv_get_cq_event's one
 * cancellation point, as read() is on a kernel channel. The pollfd is the
 * thread's own, not a stack slot: a thread cancelled here unwinds without
 * ASan unpoisoning its frames, and a poisoned slot left behind makes ASan
 * report its own thread teardown. Returns poll's result. */
static __attribute__((noinline)) int wait_readable(int fd)
{
	static __thread struct pollfd pfd;

	pfd.fd = fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	return poll(&pfd, 1, -1);
}

/* ibv_get_cq_event(3): waits for the next completion event on channel
 * (blocking unless the application set O_NONBLOCK on channel->fd) and
 * returns its CQ and cq_context. Every event must be acked with
 * ibv_ack_cq_events. Returns 0, or -1 with errno EAGAIN (non-blocking,
 * none), EINTR, or EIO. A cancellation point only while it waits for a
 * record (pthread_cancel never ends it holding a lock or a record). */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		int r = take_record(shim_channel(channel), cq);

		if (r > 0)
			break;
		if (r < 0)
			return -1;
		/* Nothing queued: EAGAIN if the application asked for a
		 * non-blocking fd, else wait for a record (EINTR ends the
		 * wait, as read() on a kernel channel does). */
		if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		if (wait_readable(channel->fd) < 0)
			return -1;
	}
	*cq_context = (*cq)->cq_context;
	return 0;
}

/* ibv_get_cq_event(3): acknowledges nevents events of cq (ibv_destroy_cq
 * waits for all of them). */
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
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

	int cs = uiw_nocancel_begin(); /* recv / send under ch->lock */

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
	uiw_nocancel_end(cs);
	free(keep);
}

/* -------------------------------------------------------------------- CQ */

/* ibv_create_cq(3): a CQ with at least cqe entries (1..UIW_MAX_CQE);
 * completion events go to channel (optional) once armed. comp_vector must
 * be 0 (num_comp_vectors is 1). Returns NULL with errno EINVAL or ENOMEM
 * (also: max_cq CQs exist). */
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
	if (!shim_kind_get(SHIM_KIND_CQ))
		return NULL;
	c = calloc(1, sizeof(*c));
	ret = c ? uiw_cq_create((unsigned)cqe, shim_cq_notify, c, &c->cq) : -ENOMEM;
	if (ret) {
		free(c);
		shim_kind_put(SHIM_KIND_CQ);
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
	if (!cq || cqe < 1)
		return EINVAL;
	return cqe <= cq->cqe ? 0 : EOPNOTSUPP;
}

/* ibv_create_cq(3): destroys a CQ after all its events returned by
 * ibv_get_cq_event / ibv_get_async_event are acked (it waits for that).
 * Returns 0, or EBUSY while a QP uses it. */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct shim_cq *c;
	int ret;

	if (!cq)
		return EINVAL;
	c = shim_cq(cq);
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
	shim_kind_put(SHIM_KIND_CQ);
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

/* A poll of c: the event last taken of it (if any) has had its poll.
 * Written only when set (a CQ without a channel never is), so a busy
 * poller does not store to the CQ on every call. */
static inline void polled_since_event(struct shim_cq *c)
{
	if (__atomic_load_n(&c->took_unpolled, __ATOMIC_RELAXED))
		__atomic_store_n(&c->took_unpolled, false, __ATOMIC_RELEASE);
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
	polled_since_event(c);
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
	/* Emptied with an event record of this CQ still queued: the record has
	 * nothing behind it; take it off the channel if it is at the head, so
	 * its descriptor does not wake an event loop for nothing and
	 * ibv_get_cq_event does not wait after a poll said readable. */
	if (total < num_entries && cq->channel &&
	    __atomic_load_n(&c->records, __ATOMIC_ACQUIRE) > 0) {
		struct shim_channel *ch = shim_channel(cq->channel);
		int cs = uiw_nocancel_begin(); /* recv under ch->lock */

		pthread_mutex_lock(&ch->lock);
		(void)drop_stale_head(ch, cq, false);
		pthread_mutex_unlock(&ch->lock);
		uiw_nocancel_end(cs);
	} else if (total == num_entries && total > 0 && cq->channel) {
		/* A full batch, maybe more behind it: a CQ armed before this
		 * poll (its re-arm let the CQEs the last event announced go
		 * by) notifies again for those left */
		(void)uiw_cq_notify_unpolled(c->cq);
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
 * it) -- except for the completions the event the application just took
 * announced, when it has not polled since: it polls them next, and an
 * ibv_poll_cq that returns a full batch with more behind notifies then.
 * Returns 0. */
int shim_op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct shim_cq *c = shim_cq(cq);
	__atomic_store_n(&c->arm_solicited, solicited_only != 0, __ATOMIC_RELAXED);
	/* Right after an event, before the poll it calls for: the CQEs that
	 * event announced do not fire again (that record would be left with
	 * nothing behind it once the poll takes them, and perftest -e, which
	 * polls once per event, would take it for the next completion) */
	return -uiw_cq_arm(c->cq, solicited_only != 0,
			   __atomic_load_n(&c->took_unpolled, __ATOMIC_ACQUIRE));
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
	polled_since_event(shim_cqx(cqx));
	return shim_cqx_load(cqx);
}

static int shim_cqx_next_poll(struct ibv_cq_ex *cqx)
{
	return shim_cqx_load(cqx);
}

static void shim_cqx_end_poll(struct ibv_cq_ex *cqx)
{
	/* CQEs left behind by a consumer that stopped early, with the CQ
	 * armed before its poll: notify again (as ibv_poll_cq does) */
	if (cqx->channel)
		(void)uiw_cq_notify_unpolled(shim_cqx(cqx)->cq);
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
