/* libibverbs.so.1 (ours): protection domains, memory regions and memory
 * windows, mapped onto the uiwarp engine (rdmap/rdmap.h: uiw_pd_*,
 * uiw_mr_*, uiw_mw_*).
 *
 * Sources: the rdma-core 44 man pages ibv_alloc_pd(3), ibv_reg_mr(3),
 * ibv_alloc_mw(3), ibv_bind_mw(3); RFC 5040 section 2 (STags, windows).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs-shim/ibverbs/internal.h"

/* -------------------------------------------------------------------- PD */

/* The live PDs, by address: every call that takes a PD looks it up here
 * before touching it. rdma-core's own libibverbs dereferences whatever it
 * is given; an application that lost its PD (fio 3.33's rdma engine
 * overwrites its own rd->pd with iodepth > 512: docs/verbs.md) then gets
 * EINVAL, not a crash inside this library. Not a hot path: PDs are used at
 * registration and creation time only. */
#define SHIM_PD_HASH 64

static pthread_mutex_t pd_live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_pd *pd_live[SHIM_PD_HASH];

static unsigned pd_bucket(const struct ibv_pd *pd)
{
	return (unsigned)(((uintptr_t)pd >> 4) % SHIM_PD_HASH);
}

/* Called with pd_live_lock held. */
static struct shim_pd **pd_find_locked(const struct ibv_pd *pd)
{
	struct shim_pd **pp = &pd_live[pd_bucket(pd)];

	while (*pp && &(*pp)->ibv != pd)
		pp = &(*pp)->live_next;
	return pp;
}

bool shim_pd_is_live(const struct ibv_pd *pd)
{
	bool live;

	if (!pd)
		return false;
	pthread_mutex_lock(&pd_live_lock);
	live = *pd_find_locked(pd) != NULL;
	pthread_mutex_unlock(&pd_live_lock);
	return live;
}

struct shim_pd *shim_pd_acquire(struct ibv_pd *pd)
{
	struct shim_pd *p = NULL;

	if (pd) {
		pthread_mutex_lock(&pd_live_lock);
		p = *pd_find_locked(pd);
		if (p)
			shim_get(&p->users);
		pthread_mutex_unlock(&pd_live_lock);
	}
	if (!p)
		errno = EINVAL;
	return p;
}

/* ibv_alloc_pd(3): a protection domain. Returns NULL with errno EINVAL
 * (NULL context) or ENOMEM (also: max_pd PDs exist). */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct shim_pd *p;
	unsigned b;

	if (!context)
		return shim_fail_null(EINVAL);
	if (!shim_kind_get(SHIM_KIND_PD))
		return NULL;
	p = calloc(1, sizeof(*p));
	p->pd = p ? uiw_pd_alloc() : NULL;
	if (!p || !p->pd) {
		free(p);
		shim_kind_put(SHIM_KIND_PD);
		return shim_fail_null(ENOMEM);
	}
	p->ibv.context = context;
	b = pd_bucket(&p->ibv);
	pthread_mutex_lock(&pd_live_lock);
	p->live_next = pd_live[b];
	pd_live[b] = p;
	pthread_mutex_unlock(&pd_live_lock);
	return &p->ibv;
}

/* ibv_alloc_pd(3): frees a PD. Returns 0, EBUSY while MRs, windows, QPs or
 * SRQs use it, or EINVAL for NULL or a PD that is not live (already freed:
 * the kernel's uverbs answers a stale handle with EINVAL too). */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct shim_pd **pp, *p;
	int ret;

	if (!pd)
		return EINVAL;
	pthread_mutex_lock(&pd_live_lock);
	pp = pd_find_locked(pd);
	p = *pp;
	if (p && shim_busy(&p->users)) {
		pthread_mutex_unlock(&pd_live_lock);
		return EBUSY;
	}
	if (p)
		*pp = p->live_next;
	pthread_mutex_unlock(&pd_live_lock);
	if (!p)
		return EINVAL;
	ret = uiw_pd_free(p->pd);
	if (ret) {
		/* still the application's: put it back */
		pthread_mutex_lock(&pd_live_lock);
		p->live_next = pd_live[pd_bucket(pd)];
		pd_live[pd_bucket(pd)] = p;
		pthread_mutex_unlock(&pd_live_lock);
		return -ret;
	}
	free(p);
	shim_kind_put(SHIM_KIND_PD);
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
	p = shim_pd_acquire(pd); /* NULL, freed or stray: EINVAL */
	if (!p)
		return NULL;
	if (!shim_kind_get(SHIM_KIND_MR)) {
		shim_put(&p->users);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		shim_put(&p->users);
		shim_kind_put(SHIM_KIND_MR);
		return shim_fail_null(ENOMEM);
	}
	ret = uiw_mr_reg(p->pd, addr, length, iova,
			 access & (UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE |
				   UIW_ACCESS_REMOTE_READ | UIW_ACCESS_REMOTE_ATOMIC |
				   UIW_ACCESS_MW_BIND),
			 &m->mr);
	if (ret) {
		free(m);
		shim_put(&p->users);
		shim_kind_put(SHIM_KIND_MR);
		return shim_fail_null(-ret);
	}
	m->ibv.context = pd->context;
	m->ibv.pd = pd;
	m->ibv.addr = addr;
	m->ibv.length = length;
	m->ibv.handle = m->mr->stag;
	m->ibv.lkey = m->mr->stag;
	m->ibv.rkey = m->mr->stag;
	return &m->ibv;
}

#undef ibv_reg_mr
/* ibv_reg_mr(3): registers addr[0..length) with access (IBV_ACCESS_*; the
 * optional range is ignored); the peer addresses it by virtual address, or
 * from 0 with IBV_ACCESS_ZERO_BASED. lkey = rkey = the engine STag.
 * Returns NULL with errno EINVAL (bad flags, REMOTE_WRITE/ATOMIC without
 * LOCAL_WRITE; length 0; pd NULL, freed or not a PD), EFAULT (a page of the
 * range not mapped, or not writable while a write access is asked for, as
 * a driver that cannot pin it), EOPNOTSUPP (ON_DEMAND), ENOMEM (also:
 * max_mr MRs exist). IBV_ACCESS_MW_BIND lets memory windows be bound to the MR. */
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
	struct shim_mr *m;
	struct shim_pd *p;
	int ret;

	if (!mr)
		return EINVAL;
	m = shim_mr(mr);
	p = shim_pd(mr->pd);
	ret = uiw_mr_dereg(m->mr);
	if (ret)
		return -ret;
	shim_put(&p->users);
	free(m);
	shim_kind_put(SHIM_KIND_MR);
	return 0;
}

/* ops.alloc_mw (ibv_alloc_mw(3)): an unbound memory window of type
 * IBV_MW_TYPE_1 or IBV_MW_TYPE_2 on pd (RFC 5040 section 2: an STag of its
 * own naming part of an MR once bound). mw->rkey is its STag; it names no
 * memory until bound. Returns NULL with errno EINVAL (PD NULL, freed or not
 * a PD; other type) or ENOMEM. (libibverbs' inline ibv_alloc_mw reads
 * pd->context before this is reached.) */
struct ibv_mw *shim_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct shim_pd *p;
	struct shim_mw *w;
	uint32_t rkey = 0;
	int ret;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		return shim_fail_null(EINVAL);
	p = shim_pd_acquire(pd);
	if (!p)
		return NULL;
	if (!shim_kind_get(SHIM_KIND_MW)) {
		shim_put(&p->users);
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	ret = w ? uiw_mw_alloc(p->pd, (int)type, &w->mw, &rkey) : -ENOMEM;
	if (ret) {
		free(w);
		shim_put(&p->users);
		shim_kind_put(SHIM_KIND_MW);
		return shim_fail_null(-ret);
	}
	w->ibv.context = pd->context;
	w->ibv.pd = pd;
	w->ibv.rkey = rkey;
	w->ibv.handle = rkey;
	w->ibv.type = type;
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
	shim_kind_put(SHIM_KIND_MW);
	return 0;
}
