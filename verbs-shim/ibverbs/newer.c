/* libibverbs.so.1 (ours): the version nodes of rdma-core newer than the
 * headers we build against (rdma-core 44), so binaries linked against a
 * newer libibverbs load and get real results or clean errors. Source:
 * libibverbs/libibverbs.map.in and verbs.h of rdma-core v59.0
 * (IBVERBS_1.15), v62.0 (IBVERBS_1.16) and v64.0 (IBVERBS_1.17). The types
 * these calls take are not in the rdma-core 44 headers: the ones an
 * application fills in (struct ibv_mr_init_attr) are mirrored here with
 * the v64 layout; the others (struct ibv_dmah, struct ibv_buf,
 * struct ibv_dmah_init_attr) are opaque to applications.
 */
#include <stdlib.h>
#include <unistd.h>

#include "verbs-shim/ibverbs/internal.h"

struct ibv_dmah;
struct ibv_dmah_init_attr;
struct ibv_mr_init_attr;

/* rdma-core v64 struct ibv_mr_init_attr (v59..v63 lack the last field,
 * which is read only when comp_mask has SHIM_REG_MR_MASK_BUF). */
struct shim_mr_init_attr {
	size_t length;
	int access;
	uint64_t comp_mask;
	uint64_t iova;
	void *addr;
	int fd;
	uint64_t fd_offset;
	struct ibv_dmah *dmah;
	struct ibv_buf *buf;
};
enum {
	SHIM_REG_MR_MASK_IOVA = 1 << 0,
	SHIM_REG_MR_MASK_ADDR = 1 << 1,
	SHIM_REG_MR_MASK_FD = 1 << 2,
	SHIM_REG_MR_MASK_FD_OFFSET = 1 << 3,
	SHIM_REG_MR_MASK_DMAH = 1 << 4,
	SHIM_REG_MR_MASK_BUF = 1 << 5,
};

/* struct ibv_buf is opaque to applications (rdma-core's own is in
 * driver.h); ours: a page-aligned allocation. */
struct ibv_buf {
	struct ibv_pd *pd;
	void *addr;
	size_t size;
};

/* ------------------------------------------------------------ IBVERBS_1.15 */

/* ibv_alloc_dmah (v59): DMA handles (TPH steering hints) need a PCIe
 * device. NULL with errno EOPNOTSUPP (EINVAL without a context). */
struct ibv_dmah *ibv_alloc_dmah(struct ibv_context *context, struct ibv_dmah_init_attr *attr)
{
	(void)attr;
	return shim_fail_null(context ? EOPNOTSUPP : EINVAL);
}

/* ibv_dealloc_dmah (v59): no DMA handle can exist. EOPNOTSUPP. */
int ibv_dealloc_dmah(struct ibv_dmah *dmah)
{
	(void)dmah;
	return EOPNOTSUPP;
}

/* ibv_reg_mr_ex (v59): registers mr_init_attr->length bytes at addr
 * (IBV_REG_MR_MASK_ADDR) or inside an ibv_alloc_buf buffer
 * (IBV_REG_MR_MASK_BUF, addr within it), addressed by the peer as iova
 * (IBV_REG_MR_MASK_IOVA; default addr), with access as ibv_reg_mr. Returns
 * the MR or NULL with errno EINVAL (no PD or attr, a freed PD, no address, a BUF range
 * outside the buffer), EOPNOTSUPP (dma-buf fd, DMA handle, unknown mask
 * bits), or ibv_reg_mr_iova's errno. */
struct ibv_mr *ibv_reg_mr_ex(struct ibv_pd *pd, struct ibv_mr_init_attr *mr_init_attr)
{
	const struct shim_mr_init_attr *a = (const void *)mr_init_attr;
	const uint64_t known = SHIM_REG_MR_MASK_IOVA | SHIM_REG_MR_MASK_ADDR | SHIM_REG_MR_MASK_FD |
			       SHIM_REG_MR_MASK_FD_OFFSET | SHIM_REG_MR_MASK_DMAH |
			       SHIM_REG_MR_MASK_BUF;
	uint64_t iova;

	if (!shim_pd_is_live(pd) || !a)
		return shim_fail_null(EINVAL);
	if ((a->comp_mask & ~known) ||
	    (a->comp_mask &
	     (SHIM_REG_MR_MASK_FD | SHIM_REG_MR_MASK_FD_OFFSET | SHIM_REG_MR_MASK_DMAH)))
		return shim_fail_null(EOPNOTSUPP);
	if (!(a->comp_mask & SHIM_REG_MR_MASK_ADDR))
		return shim_fail_null(EINVAL);
	if (a->comp_mask & SHIM_REG_MR_MASK_BUF) {
		const struct ibv_buf *b = a->buf;
		uintptr_t base, p = (uintptr_t)a->addr;

		if (!b || b->pd != pd)
			return shim_fail_null(EINVAL);
		base = (uintptr_t)b->addr;
		if (p < base || p - base > b->size || a->length > b->size - (p - base))
			return shim_fail_null(EINVAL);
	}
	iova = (a->comp_mask & SHIM_REG_MR_MASK_IOVA) ? a->iova : (uintptr_t)a->addr;
	return ibv_reg_mr_iova2(pd, a->addr, a->length, iova, (unsigned)a->access);
}

/* ------------------------------------------------------------ IBVERBS_1.16 */

/* ibv_dm_export_dmabuf_fd (v62): no device memory exists (ibv_alloc_dm
 * fails). -1 with errno EOPNOTSUPP. */
int ibv_dm_export_dmabuf_fd(struct ibv_dm *dm)
{
	(void)dm;
	errno = EOPNOTSUPP;
	return -1;
}

/* ibv_query_port_speed (v62): the port's effective speed in units of
 * 100 Mb/s: 1000, what ibv_query_port reports (4X EDR, 100 Gb/s). Returns
 * 0, or EINVAL (no context or result pointer, port other than 1). */
int ibv_query_port_speed(struct ibv_context *context, uint32_t port_num, uint64_t *port_speed)
{
	if (!context || !port_speed || port_num != SHIM_PORT_NUM)
		return EINVAL;
	*port_speed = 1000;
	return 0;
}

/* ------------------------------------------------------------ IBVERBS_1.17 */

/* ibv_alloc_buf (v64): size bytes, page aligned, for ibv_reg_buf_mr; *buf
 * is the handle for ibv_free_buf. Returns the address, or NULL with errno
 * EINVAL (no PD, buf or size; a freed PD) or ENOMEM. */
void *ibv_alloc_buf(struct ibv_pd *pd, size_t size, struct ibv_buf **buf)
{
	struct ibv_buf *b;
	void *p = NULL;
	long pg = sysconf(_SC_PAGESIZE);

	if (!shim_pd_is_live(pd) || !buf || !size)
		return shim_fail_null(EINVAL);
	b = calloc(1, sizeof(*b));
	if (!b)
		return shim_fail_null(ENOMEM);
	if (posix_memalign(&p, pg > 0 ? (size_t)pg : 4096, size) != 0) {
		free(b);
		return shim_fail_null(ENOMEM);
	}
	b->pd = pd;
	b->addr = p;
	b->size = size;
	*buf = b;
	return p;
}

/* ibv_free_buf (v64): frees a buffer of ibv_alloc_buf (MRs on it must be
 * deregistered first). */
void ibv_free_buf(struct ibv_buf *buf)
{
	if (!buf)
		return;
	free(buf->addr);
	free(buf);
}

/* ibv_reg_buf_mr (v64): registers [addr, +length) inside buf (as
 * ibv_reg_mr_ex with IBV_REG_MR_MASK_BUF | IBV_REG_MR_MASK_ADDR). NULL
 * with errno as ibv_reg_mr_ex. */
struct ibv_mr *ibv_reg_buf_mr(struct ibv_pd *pd, struct ibv_buf *buf, void *addr, size_t length,
			      int access)
{
	struct shim_mr_init_attr a = {.length = length,
				      .access = access,
				      .comp_mask = SHIM_REG_MR_MASK_BUF | SHIM_REG_MR_MASK_ADDR,
				      .addr = addr,
				      .buf = buf};

	return ibv_reg_mr_ex(pd, (struct ibv_mr_init_attr *)(void *)&a);
}
