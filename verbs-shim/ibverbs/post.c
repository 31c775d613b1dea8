/* libibverbs.so.1 (ours): the data path ops ibv_post_send, ibv_post_recv
 * and ibv_post_srq_recv: work requests converted on the stack into the
 * engine's form (rdmap/rdmap.h) and posted in chunks. wr.c (the ibv_wr_*
 * API) shares the conversion helpers declared in internal.h.
 *
 * Sources: the rdma-core 44 man pages ibv_post_send(3), ibv_post_recv(3),
 * ibv_post_srq_recv(3), ibv_bind_mw(3); RFC 7306 for immediate data and
 * atomics (only on connections that negotiated it).
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

/* ops.post_srq_recv (ibv_post_srq_recv(3)): posts the receive list wr on
 * the SRQ in chunks. Returns 0, or an errno with *bad_wr = the first WR not
 * posted: ENOMEM (SRQ full), EINVAL (too many SGEs). */
int shim_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct shim_srq *s = shim_srq(srq);

	return post_recv_list(wr, bad_wr, srq_recv, s->srq);
}
