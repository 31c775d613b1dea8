/* Protection domains and memory regions: the STag table (RFC 5040 §5.1,
 * RFC 5041 §3: STag, base and bounds, access rights).
 *
 * An STag is index << 8 | key; index 0 is never used, so STag 0 and the RTR
 * STag 1 never name an MR. The table maps index -> MR; lookups take a
 * reference so a concurrent dereg never frees an MR being placed into.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmap/internal.h"
#include "util/guard.h"

#define STAG_TABLE_SIZE (1u << 18)
/* New indices go round a window of the table, not all of it: an index
 * comes back only after every other free one in the window was taken (a
 * stale STag of a deregistered MR or window finds nothing that long, and a
 * different key after that: tbl_key), while the table pages a process
 * touches stay those of the window: STAG_WINDOW_MIN entries (32 KiB), or
 * twice its live STags plus two, so a free index is always in it. Going
 * round the whole table grew a churning server's RSS by 8 bytes per
 * registration up to the table's 2 MiB (issue 13: 24 bytes per rping
 * connection). */
#define STAG_WINDOW_MIN 4096u

static pthread_mutex_t tbl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uiw_mr_int **tbl;
static uint32_t tbl_next = 1;
static uint32_t tbl_live; /* indices in use */
static uint8_t tbl_key;

struct uiw_pd *uiw_pd_alloc(void)
{
	struct uiw_pd *pd = calloc(1, sizeof(*pd));
	if (!pd)
		errno = ENOMEM;
	return pd;
}

int uiw_pd_free(struct uiw_pd *pd)
{
	if (atomic_load(&pd->refs) > 0)
		return -EBUSY;
	free(pd);
	return 0;
}

/* Is [addr, addr + length) mapped, every page readable and, when write,
 * writable? Reads /proc/self/maps (ascending, one mapping a line) and
 * walks the mappings that cover the range: a gap or a mapping without the
 * rights ends it. What an RNIC's driver does by pinning the pages
 * (ib_umem_get fails with EFAULT); uiwarp reads and writes the memory from
 * the process itself, so the mapping is what it can check. *anon: every
 * mapping of the range is private and anonymous (inode 0: the heap,
 * malloc's and mmap's own). 0 yes, -EFAULT no, -errno when the maps cannot
 * be read. */
static int range_mapped(const void *addr, uint64_t length, bool write, bool *anon)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	uint64_t cur = (uintptr_t)addr, end = cur + length;
	char line[512];
	int rc = -EFAULT;
	*anon = true;
	while (cur < end && fgets(line, sizeof(line), f)) {
		uint64_t lo, hi, inode;
		char perms[8];
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*s %*s %" SCNu64, &lo, &hi, perms,
			   &inode) != 4)
			continue; /* the rest of an over-long line */
		if (hi <= cur)
			continue;
		if (lo > cur || perms[0] != 'r' || (write && perms[1] != 'w'))
			break;
		if (perms[3] != 'p' || inode != 0)
			*anon = false;
		cur = hi;
	}
	if (cur >= end)
		rc = 0;
	fclose(f);
	return rc;
}

/* The most of one MR that registration faults in (bytes): a larger one
 * (a sparse reservation, say) is left to fault as it is used. */
#define MR_POPULATE_MAX (1ull << 30)

/* Faults in the pages of a writable MR of private anonymous memory, as an
 * RNIC's driver does when it pins them at registration (ib_umem_get):
 * receive buffers first written by a recvmsg would otherwise take a page
 * fault and a page clear each in the data path, every time a process
 * starts (Ceph's receive pool: its sequential reads +20-30 % with this).
 * Shared and file mappings stay as they are (a file mapping would be read
 * or allocated whole before the first byte moves); best effort: a kernel
 * without MADV_POPULATE_WRITE (before 5.14) or memory short now leaves the
 * pages to come as they are used. */
static void mr_populate(void *addr, uint64_t length)
{
#ifdef MADV_POPULATE_WRITE
	if (length > MR_POPULATE_MAX)
		return;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr & ~(pg - 1);
	(void)madvise((void *)a, (uintptr_t)addr + length - a, MADV_POPULATE_WRITE);
#else
	(void)addr;
	(void)length;
#endif
}

int uiw_mr_reg(struct uiw_pd *pd, void *addr, uint64_t length, uint64_t iova, unsigned access,
	       struct uiw_mr **out)
{
	if (!pd || (!addr && length) || (addr && !length))
		return -EINVAL;
	if ((access & UIW_ACCESS_REMOTE_WRITE) && !(access & UIW_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	if (iova + length < iova || (uintptr_t)addr + length < (uintptr_t)addr)
		return -EINVAL;
	if (addr) {
		/* from now on the peer may make uiwarp touch this memory:
		 * a later munmap must not crash the process (util/guard.h) */
		(void)uiw_guard_init();
		bool write = access & (UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE |
				       UIW_ACCESS_REMOTE_ATOMIC);
		bool anon;
		int rc = range_mapped(addr, length, write, &anon);
		if (rc)
			return rc;
		if (write && anon)
			mr_populate(addr, length);
	}
	struct uiw_mr_int *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	pthread_mutex_lock(&tbl_lock);
	if (!tbl) {
		tbl = calloc(STAG_TABLE_SIZE, sizeof(*tbl));
		if (!tbl) {
			pthread_mutex_unlock(&tbl_lock);
			free(mr);
			return -ENOMEM;
		}
	}
	uint32_t idx = 0;
	uint32_t window = tbl_live < (STAG_TABLE_SIZE - 2) / 2 ? 2 * tbl_live + 2 : STAG_TABLE_SIZE;
	if (window < STAG_WINDOW_MIN)
		window = STAG_WINDOW_MIN;
	for (uint32_t n = 0; n < window; n++) {
		uint32_t i = tbl_next;
		tbl_next = tbl_next + 1 >= window ? 1 : tbl_next + 1;
		if (!tbl[i]) {
			idx = i;
			break;
		}
	}
	if (!idx) {
		pthread_mutex_unlock(&tbl_lock);
		free(mr);
		return -ENOMEM;
	}
	mr->pub.pd = pd;
	mr->pub.addr = addr;
	mr->pub.iova = iova;
	mr->pub.length = length;
	mr->pub.access = access;
	mr->pub.stag = idx << 8 | tbl_key++;
	atomic_init(&mr->refs, 1);
	atomic_init(&mr->valid, true);
	tbl[idx] = mr;
	tbl_live++;
	pthread_mutex_unlock(&tbl_lock);
	atomic_fetch_add(&pd->refs, 1);
	*out = &mr->pub;
	return 0;
}

int uiw_mr_dereg(struct uiw_mr *pub)
{
	struct uiw_mr_int *mr = (struct uiw_mr_int *)pub;
	uint32_t idx = pub->stag >> 8;
	if (mr->mw_type || atomic_load(&mr->windows) > 0)
		return mr->mw_type ? -EINVAL : -EBUSY;
	pthread_mutex_lock(&tbl_lock);
	if (!tbl || idx >= STAG_TABLE_SIZE || tbl[idx] != mr) {
		pthread_mutex_unlock(&tbl_lock);
		return -EINVAL;
	}
	tbl[idx] = NULL;
	tbl_live--;
	atomic_store(&mr->valid, false);
	pthread_mutex_unlock(&tbl_lock);
	atomic_fetch_sub(&pub->pd->refs, 1);
	uiw_mr_put(mr);
	return 0;
}

struct uiw_mr_int *uiw_mr_get(uint32_t stag)
{
	uint32_t idx = stag >> 8;
	struct uiw_mr_int *mr = NULL;
	if (idx == 0 || idx >= STAG_TABLE_SIZE)
		return NULL;
	pthread_mutex_lock(&tbl_lock);
	if (tbl && tbl[idx] && tbl[idx]->pub.stag == stag && atomic_load(&tbl[idx]->valid)) {
		mr = tbl[idx];
		atomic_fetch_add(&mr->refs, 1);
	}
	pthread_mutex_unlock(&tbl_lock);
	return mr;
}

void uiw_mr_put(struct uiw_mr_int *mr)
{
	if (mr && atomic_fetch_sub(&mr->refs, 1) == 1)
		free(mr);
}

/* See rdmap/internal.h. RFC 5041 §7.2 (STag, base and bounds, wrap),
 * RFC 5040 §7.3 (access rights). */
enum ddp_stag_result uiw_stag_check(const struct uiw_mr_int *mr, const struct uiw_pd *pd,
				    uint64_t to, uint64_t len, unsigned access, void **ptr)
{
	if (!mr)
		return DDP_STAG_INVALID;
	const struct uiw_mr *m = &mr->pub;
	if (m->pd != pd)
		return DDP_STAG_NOT_ASSOC;
	if (access == UIW_ACCESS_ANY ? !m->access : (m->access & access) != access)
		return DDP_STAG_ACCESS;
	if (to + len < to)
		return DDP_STAG_TO_WRAP;
	if (to < m->iova || to - m->iova > m->length || len > m->length - (to - m->iova))
		return DDP_STAG_BOUNDS;
	*ptr = (uint8_t *)m->addr + (to - m->iova);
	return DDP_STAG_OK;
}

/* See rdmap/internal.h. The local side of the same rules: an lkey of pd
 * (not a window's STag), the SGE inside the MR, LOCAL_WRITE for a sink. */
void *uiw_sge_resolve(struct uiw_pd *pd, const struct uiw_sge *sge, bool need_write,
		      enum uiw_wc_status *err)
{
	struct uiw_mr_int *mr = uiw_mr_get(sge->lkey);
	void *p = NULL;
	*err = UIW_WC_LOC_PROT_ERR;
	if (!mr)
		return NULL;
	if (mr->mw_type) {
		uiw_mr_put(mr); /* a window's STag is no lkey */
		return NULL;
	}
	/* bounds before access, as the verbs report it */
	if (uiw_stag_check(mr, pd, sge->addr, sge->length, 0, &p) != DDP_STAG_OK) {
		p = NULL;
	} else if (need_write && !(mr->pub.access & UIW_ACCESS_LOCAL_WRITE)) {
		p = NULL;
		*err = UIW_WC_LOC_ACCESS_ERR;
	} else {
		*err = UIW_WC_SUCCESS;
	}
	uiw_mr_put(mr);
	return p;
}

/* ------------------------------------------------------- memory windows */

struct uiw_mw {
	struct uiw_mr_int m;
};

int uiw_mw_alloc(struct uiw_pd *pd, int type, struct uiw_mw **out, uint32_t *rkey)
{
	if (!pd || (type != 1 && type != 2))
		return -EINVAL;
	/* take an STag index as an MR with no memory, then mark it a window */
	struct uiw_mr *pub;
	int rc = uiw_mr_reg(pd, NULL, 0, 0, 0, &pub);
	if (rc)
		return rc;
	struct uiw_mr_int *m = (struct uiw_mr_int *)pub;
	m->mw_type = type;
	atomic_store(&m->valid, false); /* not usable until bound */
	*out = (struct uiw_mw *)m;
	*rkey = pub->stag;
	return 0;
}

static void mw_unbind_locked(struct uiw_mr_int *m)
{
	atomic_store(&m->valid, false);
	if (m->parent) {
		atomic_fetch_sub(&m->parent->windows, 1);
		uiw_mr_put(m->parent);
		m->parent = NULL;
	}
}

int uiw_mw_dealloc(struct uiw_mw *mw)
{
	struct uiw_mr_int *m = &mw->m;
	if (!m->mw_type)
		return -EINVAL;
	pthread_mutex_lock(&tbl_lock);
	mw_unbind_locked(m);
	uint32_t idx = m->pub.stag >> 8;
	if (tbl && idx < STAG_TABLE_SIZE && tbl[idx] == m) {
		tbl[idx] = NULL;
		tbl_live--;
	}
	pthread_mutex_unlock(&tbl_lock);
	atomic_fetch_sub(&m->pub.pd->refs, 1);
	uiw_mr_put(m);
	return 0;
}

/* Remote invalidation (a received Send with Invalidate, RFC 5040): a
 * valid STag of pd stops working; a window is unbound, so it lets go of its
 * MR at once (the MR's windows count and the reference the bind took) and
 * the MR can be deregistered; a later bind of the type 2 window takes a new
 * hold. Race-free against a concurrent access through the window: the
 * window's parent is only followed under tbl_lock, and an access holds a
 * reference of its own on the window (uiw_mr_get), which stays valid;
 * valid=false turns the window away at its next check. Returns false when
 * the STag cannot be invalidated (unknown, already invalid, another PD). */
bool uiw_mem_remote_inv(struct uiw_pd *pd, uint32_t stag)
{
	uint32_t idx = stag >> 8;
	bool ok = false;
	if (idx == 0 || idx >= STAG_TABLE_SIZE)
		return false;
	pthread_mutex_lock(&tbl_lock);
	struct uiw_mr_int *m = tbl ? tbl[idx] : NULL;
	if (m && m->pub.stag == stag && atomic_load(&m->valid) && m->pub.pd == pd) {
		ok = true;
		if (m->mw_type)
			mw_unbind_locked(m);
		else
			atomic_store(&m->valid, false);
	}
	pthread_mutex_unlock(&tbl_lock);
	return ok;
}

enum uiw_wc_status uiw_mem_local_op(struct uiw_pd *pd, const struct uiw_send_wr *wr)
{
	enum uiw_wc_status st = UIW_WC_SUCCESS;
	pthread_mutex_lock(&tbl_lock);
	if (wr->opcode == UIW_WR_LOCAL_INV) {
		/* RFC 5040 §2 / verbs Local Invalidate: the STag stops working;
		 * a window is unbound and lets go of its MR */
		uint32_t idx = wr->invalidate_rkey >> 8;
		struct uiw_mr_int *m = tbl && idx && idx < STAG_TABLE_SIZE ? tbl[idx] : NULL;
		if (!m || m->pub.stag != wr->invalidate_rkey || m->pub.pd != pd)
			st = UIW_WC_LOC_PROT_ERR;
		else if (m->mw_type)
			mw_unbind_locked(m);
		else
			atomic_store(&m->valid, false);
		pthread_mutex_unlock(&tbl_lock);
		return st;
	}
	/* Bind MW */
	struct uiw_mr_int *m = wr->mw ? &wr->mw->m : NULL;
	struct uiw_mr_int *mr = (struct uiw_mr_int *)wr->bind_mr;
	if (!m || m->pub.pd != pd) {
		st = UIW_WC_LOC_PROT_ERR;
	} else if (wr->bind_length == 0) {
		mw_unbind_locked(m);
	} else if (!mr || mr->mw_type || !atomic_load(&mr->valid) || mr->pub.pd != pd) {
		st = UIW_WC_LOC_PROT_ERR;
	} else if (!(mr->pub.access & UIW_ACCESS_MW_BIND) ||
		   ((wr->bind_access & UIW_ACCESS_REMOTE_WRITE) &&
		    !(mr->pub.access & UIW_ACCESS_LOCAL_WRITE))) {
		st = UIW_WC_LOC_ACCESS_ERR;
	} else if (wr->bind_addr < mr->pub.iova || wr->bind_addr - mr->pub.iova > mr->pub.length ||
		   wr->bind_length > mr->pub.length - (wr->bind_addr - mr->pub.iova)) {
		st = UIW_WC_LOC_PROT_ERR;
	} else {
		mw_unbind_locked(m);
		uint32_t idx = m->pub.stag >> 8;
		uint32_t newkey = (wr->rkey & 0xff) | idx << 8;
		m->pub.stag = newkey;
		m->pub.addr = (uint8_t *)mr->pub.addr + (wr->bind_addr - mr->pub.iova);
		m->pub.iova = wr->bind_addr;
		m->pub.length = wr->bind_length;
		m->pub.access = wr->bind_access | UIW_ACCESS_LOCAL_WRITE;
		atomic_fetch_add(&mr->refs, 1);
		atomic_fetch_add(&mr->windows, 1);
		m->parent = mr;
		atomic_store(&m->valid, true);
	}
	pthread_mutex_unlock(&tbl_lock);
	return st;
}
