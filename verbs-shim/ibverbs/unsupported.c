/* libibverbs.so.1 (ours): the rest of the rdma-core 44 export list.
 *
 * Every binary linked against libibverbs uses BIND_NOW, so every exported
 * symbol must exist (verbs-abi.md section 8.1). What an RNIC lacks (address
 * handles, multicast, SRQ for now, ECE, dmabuf, import) fails cleanly with
 * the verbs' documented error: NULL with errno EOPNOTSUPP for constructors,
 * EOPNOTSUPP as the return value for int verbs. The IBVERBS_PRIVATE_34
 * provider interface (ibv_cmd_*, verbs_*: rdma-core's driver.h, not
 * installed) has no kernel behind it here: its int functions return
 * EOPNOTSUPP, pointer ones NULL with errno EOPNOTSUPP, void ones do nothing.
 * The kernel-ABI marshalling helpers (ibv_copy_*) are real.
 */
#include <stdarg.h>
#include <string.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <infiniband/sa.h>

#include "verbs-shim/ibverbs/internal.h"

/* ------------------------------------------------- AH, multicast (IB/RoCE) */

/* ibv_create_ah(3): iWARP has no address handles. NULL, errno EOPNOTSUPP. */
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	(void)pd;
	(void)attr;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_create_ah(3): EOPNOTSUPP (no AH can exist). */
int ibv_destroy_ah(struct ibv_ah *ah)
{
	(void)ah;
	return EOPNOTSUPP;
}

/* ibv_create_ah_from_wc(3): NULL, errno EOPNOTSUPP. */
struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	(void)pd;
	(void)wc;
	(void)grh;
	(void)port_num;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_create_ah_from_wc(3): -1 with errno EOPNOTSUPP. */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	(void)context;
	(void)port_num;
	(void)wc;
	(void)grh;
	(void)ah_attr;
	errno = EOPNOTSUPP;
	return -1;
}

/* ibv_attach_mcast(3): UD multicast only; EOPNOTSUPP. */
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}

/* ibv_attach_mcast(3): EOPNOTSUPP. */
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return EOPNOTSUPP;
}

/* RoCE L2 resolution: EOPNOTSUPP (not RoCE). */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return EOPNOTSUPP;
}

/* -------------------------------------------------------- MR extensions */

/* ibv_rereg_mr(3): not implemented; returns EOPNOTSUPP (errno too). */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* ibv_reg_dmabuf_mr(3): no dmabuf import. NULL, errno EOPNOTSUPP. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				 int fd, int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	return shim_fail_null(EOPNOTSUPP);
}

/* ------------------------------------------------- import (shared objects) */

/* ibv_import_device(3): no kernel context to share. NULL, errno EOPNOTSUPP. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_import_pd(3): NULL, errno EOPNOTSUPP. */
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_import_mr(3): NULL, errno EOPNOTSUPP. */
struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_import_dm(3): NULL, errno EOPNOTSUPP. */
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	return shim_fail_null(EOPNOTSUPP);
}

/* ibv_import_pd(3): nothing can have been imported; no-op. */
void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* ------------------------------------------------------------ QP extras */

/* ibv_query_ece(3) / ibv_set_ece(3): enhanced connection establishment is
 * an IB/RoCE CM feature. EOPNOTSUPP. */
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

/* ibv_query_qp_data_in_order(3): 0 = no in-order placement guarantee is
 * promised (large payloads are placed before their CRC is checked). */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

/* ----------------------------------------------------------- sysfs (none) */

/* IBVERBS_1.0 sysfs helpers. There is no sysfs device: ibv_get_sysfs_path
 * returns "/sys" as the real library does, without touching it;
 * ibv_read_sysfs_file / ibv_read_ibdev_sysfs_file return -1 with errno
 * ENOENT (ibv_devinfo copes). */
const char *ibv_get_sysfs_path(void);
const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	(void)dir;
	(void)file;
	(void)buf;
	(void)size;
	errno = ENOENT;
	return -1;
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct ibv_device *dev, const char *fnfmt,
			      ...);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct ibv_device *dev, const char *fnfmt,
			      ...)
{
	(void)buf;
	(void)size;
	(void)dev;
	(void)fnfmt;
	errno = ENOENT;
	return -1;
}

/* ------------------------------------------- kernel ABI marshalling (1.0) */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
/* marshall.h: kernel ib_uverbs_ah_attr → ibv_ah_attr. */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
/* marshall.h: kernel ib_uverbs_qp_attr → ibv_qp_attr. */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
/* marshall.h: kernel ib_user_path_rec → ibv_sa_path_rec. */
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = (int)src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = (int)src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = (uint8_t)src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
/* marshall.h: ibv_sa_path_rec → kernel ib_user_path_rec. */
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = (uint32_t)src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->reversible = (uint32_t)src->reversible;
	dst->mtu = src->mtu;
	dst->pkey = src->pkey;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->numb_path = src->numb_path;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

/* ------------------------------------------------- deprecated (hidden 1.1) */

/* ibv_register_driver@IBVERBS_1.1 (hidden, non-default: only pre-2017
 * providers bind it). No providers are loaded; no-op. */
void shim_compat_register_driver(const char *name, void *init_func);
__asm__(".symver shim_compat_register_driver, ibv_register_driver@IBVERBS_1.1");
void shim_compat_register_driver(const char *name, void *init_func)
{
	(void)name;
	(void)init_func;
}

/* ------------------------------------ IBVERBS_PRIVATE_34 provider interface */

/* rdma-core's disassociate flag; read by providers only. */
extern bool verbs_allow_disassociate_destroy;
bool verbs_allow_disassociate_destroy;

/* Provider logging: no provider, nothing to log. */
void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...);
void __verbs_log(void *ctx, uint32_t level, const char *fmt, ...)
{
	(void)ctx;
	(void)level;
	(void)fmt;
}

/* Driver registration and context plumbing: no kernel, no providers. */
void verbs_register_driver_34(const void *ops);
void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id)
{
	(void)device;
	(void)cmd_fd;
	(void)alloc_size;
	(void)context_offset;
	(void)driver_id;
	return shim_fail_null(EOPNOTSUPP);
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	(void)private_data;
	return ibv_open_device(device);
}

void verbs_uninit_context(struct verbs_context *context);
void verbs_uninit_context(struct verbs_context *context)
{
	(void)context;
}

void verbs_set_ops(struct verbs_context *vctx, const void *ops);
void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
	(void)vctx;
	(void)ops;
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
		   void *cq_context);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
		   void *cq_context)
{
	(void)cq;
	(void)context;
	(void)channel;
	(void)cq_context;
}

/* The ioctl command path: there is no uverbs file. */
int execute_ioctl(struct ibv_context *context, void *cmd);
int execute_ioctl(struct ibv_context *context, void *cmd)
{
	(void)context;
	(void)cmd;
	return EOPNOTSUPP;
}

unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	(void)link;
	return num_attrs;
}

/* The ibv_cmd_* kernel command wrappers (driver.h): all EOPNOTSUPP. Their
 * real parameter lists vary; none is read, so each is defined without
 * parameters (the caller's arguments are ignored under the SysV ABI). */
#define SHIM_CMD_STUB(name)                                                                        \
	int name(void);                                                                            \
	int name(void)                                                                             \
	{                                                                                          \
		return EOPNOTSUPP;                                                                 \
	}

SHIM_CMD_STUB(ibv_cmd_advise_mr)
SHIM_CMD_STUB(ibv_cmd_alloc_dm)
SHIM_CMD_STUB(ibv_cmd_alloc_mw)
SHIM_CMD_STUB(ibv_cmd_alloc_pd)
SHIM_CMD_STUB(ibv_cmd_attach_mcast)
SHIM_CMD_STUB(ibv_cmd_close_xrcd)
SHIM_CMD_STUB(ibv_cmd_create_ah)
SHIM_CMD_STUB(ibv_cmd_create_counters)
SHIM_CMD_STUB(ibv_cmd_create_cq)
SHIM_CMD_STUB(ibv_cmd_create_cq_ex)
SHIM_CMD_STUB(ibv_cmd_create_flow)
SHIM_CMD_STUB(ibv_cmd_create_flow_action_esp)
SHIM_CMD_STUB(ibv_cmd_create_qp)
SHIM_CMD_STUB(ibv_cmd_create_qp_ex)
SHIM_CMD_STUB(ibv_cmd_create_qp_ex2)
SHIM_CMD_STUB(ibv_cmd_create_rwq_ind_table)
SHIM_CMD_STUB(ibv_cmd_create_srq)
SHIM_CMD_STUB(ibv_cmd_create_srq_ex)
SHIM_CMD_STUB(ibv_cmd_create_wq)
SHIM_CMD_STUB(ibv_cmd_dealloc_mw)
SHIM_CMD_STUB(ibv_cmd_dealloc_pd)
SHIM_CMD_STUB(ibv_cmd_dereg_mr)
SHIM_CMD_STUB(ibv_cmd_destroy_ah)
SHIM_CMD_STUB(ibv_cmd_destroy_counters)
SHIM_CMD_STUB(ibv_cmd_destroy_cq)
SHIM_CMD_STUB(ibv_cmd_destroy_flow)
SHIM_CMD_STUB(ibv_cmd_destroy_flow_action)
SHIM_CMD_STUB(ibv_cmd_destroy_qp)
SHIM_CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
SHIM_CMD_STUB(ibv_cmd_destroy_srq)
SHIM_CMD_STUB(ibv_cmd_destroy_wq)
SHIM_CMD_STUB(ibv_cmd_detach_mcast)
SHIM_CMD_STUB(ibv_cmd_free_dm)
SHIM_CMD_STUB(ibv_cmd_get_context)
SHIM_CMD_STUB(ibv_cmd_modify_cq)
SHIM_CMD_STUB(ibv_cmd_modify_flow_action_esp)
SHIM_CMD_STUB(ibv_cmd_modify_qp)
SHIM_CMD_STUB(ibv_cmd_modify_qp_ex)
SHIM_CMD_STUB(ibv_cmd_modify_srq)
SHIM_CMD_STUB(ibv_cmd_modify_wq)
SHIM_CMD_STUB(ibv_cmd_open_qp)
SHIM_CMD_STUB(ibv_cmd_open_xrcd)
SHIM_CMD_STUB(ibv_cmd_poll_cq)
SHIM_CMD_STUB(ibv_cmd_post_recv)
SHIM_CMD_STUB(ibv_cmd_post_send)
SHIM_CMD_STUB(ibv_cmd_post_srq_recv)
SHIM_CMD_STUB(ibv_cmd_query_context)
SHIM_CMD_STUB(ibv_cmd_query_device_any)
SHIM_CMD_STUB(ibv_cmd_query_mr)
SHIM_CMD_STUB(ibv_cmd_query_port)
SHIM_CMD_STUB(ibv_cmd_query_qp)
SHIM_CMD_STUB(ibv_cmd_query_srq)
SHIM_CMD_STUB(ibv_cmd_read_counters)
SHIM_CMD_STUB(ibv_cmd_reg_dm_mr)
SHIM_CMD_STUB(ibv_cmd_reg_dmabuf_mr)
SHIM_CMD_STUB(ibv_cmd_reg_mr)
SHIM_CMD_STUB(ibv_cmd_req_notify_cq)
SHIM_CMD_STUB(ibv_cmd_rereg_mr)
SHIM_CMD_STUB(ibv_cmd_resize_cq)
