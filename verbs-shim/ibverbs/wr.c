/* libibverbs.so.1 (ours): the ibv_qp_ex work request API (ibv_wr_start,
 * ibv_wr_send, ibv_wr_rdma_write, ..., ibv_wr_set_sge, ibv_wr_complete) for
 * QPs created by ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
 *
 * WRs are built in a per-QP batch between ibv_wr_start and ibv_wr_complete
 * and handed to the engine (uiw_qp_post_send) by ibv_wr_complete. As
 * ibv_wr_post(3) says, the calls between start and complete/abort are made
 * by one thread per QP; ibv_post_send may still be used concurrently.
 * Sources: ibv_wr_post(3), ibv_create_qp_ex(3) of rdma-core 44; RFC 7306
 * for the immediate-data and atomic builders (EOPNOTSUPP at ibv_wr_complete
 * on a connection without RFC 7306).
 */
#include <stdlib.h>
#include <string.h>

#include "verbs-shim/ibverbs/internal.h"

/* One WR under construction, with its own SGE and inline storage (inline
 * data must be copied when ibv_wr_set_inline_data is called). */
struct shim_wr_ent {
	struct uiw_send_wr wr;
	struct uiw_sge sge[UIW_MAX_SGE];
	uint8_t inl[UIW_MAX_INLINE];
};

struct shim_wr_batch {
	struct shim_wr_ent *ent;
	size_t n, cap;
	int err; /* first builder error; ibv_wr_complete returns it */
};

#define SHIM_WR_CHUNK 32

static struct shim_qp *shim_qpx(struct ibv_qp_ex *x)
{
	return shim_container_of(x, struct shim_qp, ibvx);
}

static void shim_wr_fail(struct shim_wr_batch *b, int e)
{
	if (!b->err)
		b->err = e;
}

/* The next WR of the batch, with wr_id / flags taken from the qp_ex now
 * (ibv_wr_post(3)); NULL after an error. */
static struct shim_wr_ent *shim_wr_new(struct ibv_qp_ex *x, enum uiw_wr_opcode op)
{
	struct shim_qp *q = shim_qpx(x);
	struct shim_wr_batch *b = q->batch;
	struct shim_wr_ent *e;

	if (!b || b->err)
		return NULL;
	if (b->n == b->cap) {
		size_t ncap = b->cap ? 2 * b->cap : 16;
		struct shim_wr_ent *ne;

		if (ncap > (size_t)q->cap.max_send_wr + 16)
			ncap = (size_t)q->cap.max_send_wr + 16;
		if (b->n >= ncap) {
			shim_wr_fail(b, ENOMEM); /* more than the send queue holds */
			return NULL;
		}
		ne = realloc(b->ent, ncap * sizeof(*ne));
		if (!ne) {
			shim_wr_fail(b, ENOMEM);
			return NULL;
		}
		b->ent = ne;
		b->cap = ncap;
	}
	e = &b->ent[b->n++];
	memset(&e->wr, 0, sizeof(e->wr));
	e->wr.wr_id = x->wr_id;
	e->wr.opcode = op;
	if (x->wr_flags &
	    ~(unsigned)(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE))
		shim_wr_fail(b, EINVAL);
	e->wr.flags = x->wr_flags & ~(unsigned)IBV_SEND_INLINE; /* set by set_inline_data */
	return e;
}

static struct shim_wr_ent *shim_wr_cur(struct ibv_qp_ex *x)
{
	struct shim_wr_batch *b = shim_qpx(x)->batch;

	if (!b || b->err)
		return NULL;
	if (!b->n) {
		shim_wr_fail(b, EINVAL); /* a setter before any builder */
		return NULL;
	}
	return &b->ent[b->n - 1];
}

static void shim_wr_need_rfc7306(struct ibv_qp_ex *x)
{
	struct shim_qp *q = shim_qpx(x);
	int e = shim_check_rfc7306(q);

	if (e && q->batch)
		shim_wr_fail(q->batch, e);
}

static void shim_wr_start(struct ibv_qp_ex *x)
{
	struct shim_qp *q = shim_qpx(x);

	if (!q->batch)
		q->batch = calloc(1, sizeof(*q->batch));
	if (q->batch) {
		q->batch->n = 0;
		q->batch->err = 0;
	}
}

static int shim_wr_complete(struct ibv_qp_ex *x)
{
	struct shim_qp *q = shim_qpx(x);
	struct shim_wr_batch *b = q->batch;
	struct uiw_send_wr u[SHIM_WR_CHUNK];
	size_t i = 0;

	if (!b)
		return ENOMEM;
	if (b->err) {
		int e = b->err;

		b->n = 0;
		b->err = 0;
		return e;
	}
	while (i < b->n) {
		int n = 0, bad = 0, ret;

		for (; i < b->n && n < SHIM_WR_CHUNK; i++) {
			u[n] = b->ent[i].wr;
			/* the SGEs / inline bytes live in the (possibly moved)
			 * entry: point at them only now */
			if (!u[n].sg_list && u[n].num_sge)
				u[n].sg_list = b->ent[i].sge;
			n++;
		}
		ret = uiw_qp_post_send(q->qp, u, n, &bad);
		if (ret) {
			b->n = 0;
			return -ret;
		}
	}
	b->n = 0;
	return 0;
}

static void shim_wr_abort(struct ibv_qp_ex *x)
{
	struct shim_wr_batch *b = shim_qpx(x)->batch;

	if (b) {
		b->n = 0;
		b->err = 0;
	}
}

static void shim_wr_send(struct ibv_qp_ex *x)
{
	shim_wr_new(x, UIW_WR_SEND);
}

static void shim_wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct shim_wr_ent *e;

	shim_wr_need_rfc7306(x);
	e = shim_wr_new(x, UIW_WR_SEND_WITH_IMM);
	if (e)
		e->wr.imm_data = (uint32_t)imm;
}

static void shim_wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct shim_wr_ent *e = shim_wr_new(x, UIW_WR_SEND_WITH_INV);

	if (e)
		e->wr.invalidate_rkey = rkey;
}

static void shim_wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr)
{
	struct shim_wr_ent *e = shim_wr_new(x, UIW_WR_RDMA_WRITE);

	if (e) {
		e->wr.rkey = rkey;
		e->wr.remote_addr = raddr;
	}
}

static void shim_wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	struct shim_wr_ent *e;

	shim_wr_need_rfc7306(x);
	e = shim_wr_new(x, UIW_WR_RDMA_WRITE_WITH_IMM);
	if (e) {
		e->wr.rkey = rkey;
		e->wr.remote_addr = raddr;
		e->wr.imm_data = (uint32_t)imm;
	}
}

static void shim_wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr)
{
	struct shim_wr_ent *e = shim_wr_new(x, UIW_WR_RDMA_READ);

	if (e) {
		e->wr.rkey = rkey;
		e->wr.remote_addr = raddr;
	}
}

static void shim_wr_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, uint64_t compare,
			    uint64_t swap)
{
	struct shim_wr_ent *e;

	shim_wr_need_rfc7306(x);
	e = shim_wr_new(x, UIW_WR_ATOMIC_CMP_AND_SWP);
	if (e) {
		e->wr.rkey = rkey;
		e->wr.remote_addr = raddr;
		e->wr.compare_add = compare;
		e->wr.swap = swap;
	}
}

static void shim_wr_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, uint64_t add)
{
	struct shim_wr_ent *e;

	shim_wr_need_rfc7306(x);
	e = shim_wr_new(x, UIW_WR_ATOMIC_FETCH_AND_ADD);
	if (e) {
		e->wr.rkey = rkey;
		e->wr.remote_addr = raddr;
		e->wr.compare_add = add;
	}
}

/* Operations an RNIC lacks (TSO, UD and XRC addressing, atomic write): the
 * batch fails with EOPNOTSUPP. */
static void shim_wr_unsupported(struct ibv_qp_ex *x)
{
	struct shim_wr_batch *b = shim_qpx(x)->batch;

	if (b)
		shim_wr_fail(b, EOPNOTSUPP);
}

/* ibv_wr_bind_mw: binds a type 2 window in send-queue order (see
 * shim_op_bind_mw for the rules and errors); rkey is the window's new
 * STag, chosen by the caller (usually ibv_inc_rkey(mw->rkey)). A type 1
 * window or bad arguments fail the batch with EINVAL. */
static void shim_wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey,
			    const struct ibv_mw_bind_info *info)
{
	struct shim_wr_ent *e = shim_wr_new(x, UIW_WR_BIND_MW);
	int err;

	if (!e)
		return;
	err = (mw && mw->type == IBV_MW_TYPE_2) ? shim_bind_wr(&e->wr, mw, rkey, info) : EINVAL;
	if (err)
		shim_wr_fail(shim_qpx(x)->batch, err);
}

/* ibv_wr_local_inv: invalidates rkey (an MR or type 2 window STag of the
 * QP's PD) in send-queue order; IBV_WC_LOCAL_INV completion. */
static void shim_wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct shim_wr_ent *e = shim_wr_new(x, UIW_WR_LOCAL_INV);

	if (e)
		e->wr.invalidate_rkey = rkey;
}

static void shim_wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr;
	(void)hdr_sz;
	(void)mss;
	shim_wr_unsupported(x);
}

static void shim_wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	(void)ah;
	(void)qpn;
	(void)qkey;
	shim_wr_unsupported(x);
}

static void shim_wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	(void)srqn;
	shim_wr_unsupported(x);
}

static void shim_wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr,
				 const void *data)
{
	(void)rkey;
	(void)raddr;
	(void)data;
	shim_wr_unsupported(x);
}

static void shim_wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct shim_wr_ent *e = shim_wr_cur(x);

	if (!e)
		return;
	e->sge[0].addr = addr;
	e->sge[0].length = length;
	e->sge[0].lkey = lkey;
	e->wr.num_sge = 1;
	e->wr.sg_list = NULL;
}

static void shim_wr_set_sge_list(struct ibv_qp_ex *x, size_t num_sge, const struct ibv_sge *sg)
{
	struct shim_wr_ent *e = shim_wr_cur(x);

	if (!e)
		return;
	if (num_sge > UIW_MAX_SGE || num_sge > shim_qpx(x)->cap.max_send_sge) {
		shim_wr_fail(shim_qpx(x)->batch, EINVAL);
		return;
	}
	memcpy(e->sge, sg, num_sge * sizeof(*sg)); /* same layout (post.c) */
	e->wr.num_sge = (int)num_sge;
	e->wr.sg_list = NULL;
}

static void shim_wr_set_inline_list(struct ibv_qp_ex *x, size_t nbuf, const struct ibv_data_buf *l)
{
	struct shim_wr_ent *e = shim_wr_cur(x);
	size_t len = 0;

	if (!e)
		return;
	for (size_t i = 0; i < nbuf; i++) {
		if (l[i].length > sizeof(e->inl) - len ||
		    len + l[i].length > shim_qpx(x)->cap.max_inline_data) {
			shim_wr_fail(shim_qpx(x)->batch, EINVAL);
			return;
		}
		memcpy(e->inl + len, l[i].addr, l[i].length);
		len += l[i].length;
	}
	e->sge[0].addr = (uintptr_t)e->inl; /* fixed up in shim_wr_complete */
	e->sge[0].length = (uint32_t)len;
	e->sge[0].lkey = 0;
	e->wr.num_sge = len ? 1 : 0;
	e->wr.sg_list = NULL;
	e->wr.flags |= UIW_SEND_INLINE;
}

static void shim_wr_set_inline(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};

	shim_wr_set_inline_list(x, 1, &b);
}

/* See internal.h. */
void shim_qp_ex_init(struct shim_qp *q)
{
	struct ibv_qp_ex *x = &q->ibvx;

	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = shim_wr_cmp_swp;
	x->wr_atomic_fetch_add = shim_wr_fetch_add;
	x->wr_bind_mw = shim_wr_bind_mw;
	x->wr_local_inv = shim_wr_local_inv;
	x->wr_rdma_read = shim_wr_rdma_read;
	x->wr_rdma_write = shim_wr_rdma_write;
	x->wr_rdma_write_imm = shim_wr_rdma_write_imm;
	x->wr_send = shim_wr_send;
	x->wr_send_imm = shim_wr_send_imm;
	x->wr_send_inv = shim_wr_send_inv;
	x->wr_send_tso = shim_wr_send_tso;
	x->wr_set_ud_addr = shim_wr_set_ud_addr;
	x->wr_set_xrc_srqn = shim_wr_set_xrc_srqn;
	x->wr_set_inline_data = shim_wr_set_inline;
	x->wr_set_inline_data_list = shim_wr_set_inline_list;
	x->wr_set_sge = shim_wr_set_sge;
	x->wr_set_sge_list = shim_wr_set_sge_list;
	x->wr_start = shim_wr_start;
	x->wr_complete = shim_wr_complete;
	x->wr_abort = shim_wr_abort;
	x->wr_atomic_write = shim_wr_atomic_write;
}

void shim_qp_ex_fini(struct shim_qp *q)
{
	if (q->batch) {
		free(q->batch->ent);
		free(q->batch);
		q->batch = NULL;
	}
}

/* ibv_qp_to_qp_ex (IBVERBS_1.6): the ibv_qp_ex of a QP created by
 * ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; NULL with errno
 * EOPNOTSUPP for any other QP. */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct shim_qp *q;

	if (!qp)
		return shim_fail_null(EINVAL);
	q = shim_qp(qp);
	if (!q->send_ops_flags)
		return shim_fail_null(EOPNOTSUPP);
	return &q->ibvx;
}
