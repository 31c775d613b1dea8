/* Stub libmlx5.so.1 with the whole export set of rdma-core 44's libmlx5
 * (every symbol@version of its libmlx5.map, 128 functions; test
 * cm_stub_exports_mlx5 compares it with the system's library). Programs
 * link libmlx5 directly (perftest; pyverbs' mlx5 module, which rdma-core's
 * own test suite imports before any test runs) and are BIND_NOW, so every
 * symbol they import must exist; the real library needs IBVERBS_PRIVATE_34
 * symbols of the real libibverbs. None of these is reached for an iWARP
 * device: programs call them only for an mlx5 device (mlx5dv_is_supported
 * says false, mlx5dv_open_device fails). Every function fails cleanly:
 *   - pointer results: NULL, errno EOPNOTSUPP;
 *   - int results: the positive errno EOPNOTSUPP (the mlx5dv(3)
 *     convention: "0 on success or the value of errno on failure"), errno
 *     also set; mlx5dv_vfio_get_events_fd (a descriptor) and
 *     mlx5dv_devx_get_event (a length): -1, errno EOPNOTSUPP;
 *   - bool mlx5dv_is_supported: false; void calls: nothing.
 * Prototypes: <infiniband/mlx5dv.h> of rdma-core 44 (the compiler checks
 * each definition against it). mlx5dv_init_obj exists in two versions
 * (MLX5_1.0 and the default MLX5_1.2), as in rdma-core.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <infiniband/mlx5dv.h>

#define STUB_EXPORT __attribute__((visibility("default")))

/* The arguments of a stub are never read. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

static void *fail_null(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

static int fail_int(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

static int fail_minus1(void)
{
	errno = EOPNOTSUPP;
	return -1;
}

/* _mlx5dv_mkey_check (MLX5_1.20): EOPNOTSUPP. */
STUB_EXPORT int _mlx5dv_mkey_check(struct mlx5dv_mkey *mkey, struct mlx5dv_mkey_err *err_info,
				   size_t err_info_size)
{
	return fail_int();
}

/* _mlx5dv_query_port (MLX5_1.19): EOPNOTSUPP. */
STUB_EXPORT int _mlx5dv_query_port(struct ibv_context *context, uint32_t port_num,
				   struct mlx5dv_port *info, size_t info_len)
{
	return fail_int();
}

/* mlx5dv_alloc_dm (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_dm *mlx5dv_alloc_dm(struct ibv_context *context,
					   struct ibv_alloc_dm_attr *dm_attr,
					   struct mlx5dv_alloc_dm_attr *mlx5_dm_attr)
{
	return fail_null();
}

/* mlx5dv_alloc_var (MLX5_1.12): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_var *mlx5dv_alloc_var(struct ibv_context *context, uint32_t flags)
{
	return fail_null();
}

/* mlx5dv_create_cq (MLX5_1.1): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_cq_ex *mlx5dv_create_cq(struct ibv_context *context,
					       struct ibv_cq_init_attr_ex *cq_attr,
					       struct mlx5dv_cq_init_attr *mlx5_cq_attr)
{
	return fail_null();
}

/* mlx5dv_create_flow (MLX5_1.6): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_flow *mlx5dv_create_flow(struct mlx5dv_flow_matcher *matcher,
						struct mlx5dv_flow_match_parameters *match_value,
						size_t num_actions,
						struct mlx5dv_flow_action_attr actions_attr[])
{
	return fail_null();
}

/* mlx5dv_create_flow_action_esp (MLX5_1.5): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_flow_action *
mlx5dv_create_flow_action_esp(struct ibv_context *ctx, struct ibv_flow_action_esp_attr *esp,
			      struct mlx5dv_flow_action_esp *mlx5_attr)
{
	return fail_null();
}

/* mlx5dv_create_flow_action_modify_header (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_flow_action *
mlx5dv_create_flow_action_modify_header(struct ibv_context *ctx, size_t actions_sz,
					uint64_t actions[], enum mlx5dv_flow_table_type ft_type)
{
	return fail_null();
}

/* mlx5dv_create_flow_action_packet_reformat (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_flow_action *mlx5dv_create_flow_action_packet_reformat(
    struct ibv_context *ctx, size_t data_sz, void *data,
    enum mlx5dv_flow_action_packet_reformat_type reformat_type, enum mlx5dv_flow_table_type ft_type)
{
	return fail_null();
}

/* mlx5dv_create_flow_matcher (MLX5_1.6): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_flow_matcher *
mlx5dv_create_flow_matcher(struct ibv_context *context,
			   struct mlx5dv_flow_matcher_attr *matcher_attr)
{
	return fail_null();
}

/* mlx5dv_create_mkey (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr)
{
	return fail_null();
}

/* mlx5dv_create_qp (MLX5_1.3): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
					    struct ibv_qp_init_attr_ex *qp_attr,
					    struct mlx5dv_qp_init_attr *mlx5_qp_attr)
{
	return fail_null();
}

/* mlx5dv_create_steering_anchor (MLX5_1.24): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_steering_anchor *
mlx5dv_create_steering_anchor(struct ibv_context *context, struct mlx5dv_steering_anchor_attr *attr)
{
	return fail_null();
}

/* mlx5dv_create_wq (MLX5_1.3): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_wq *mlx5dv_create_wq(struct ibv_context *context,
					    struct ibv_wq_init_attr *wq_init_attr,
					    struct mlx5dv_wq_init_attr *mlx5_wq_attr)
{
	return fail_null();
}

/* mlx5dv_crypto_login (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_login(struct ibv_context *context,
				    struct mlx5dv_crypto_login_attr *login_attr)
{
	return fail_int();
}

/* mlx5dv_crypto_login_create (MLX5_1.24): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_crypto_login_obj *
mlx5dv_crypto_login_create(struct ibv_context *context,
			   struct mlx5dv_crypto_login_attr_ex *login_attr)
{
	return fail_null();
}

/* mlx5dv_crypto_login_destroy (MLX5_1.24): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_login_destroy(struct mlx5dv_crypto_login_obj *crypto_login)
{
	return fail_int();
}

/* mlx5dv_crypto_login_query (MLX5_1.24): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_login_query(struct mlx5dv_crypto_login_obj *crypto_login,
					  struct mlx5dv_crypto_login_query_attr *query_attr)
{
	return fail_int();
}

/* mlx5dv_crypto_login_query_state (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_login_query_state(struct ibv_context *context,
						enum mlx5dv_crypto_login_state *state)
{
	return fail_int();
}

/* mlx5dv_crypto_logout (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_logout(struct ibv_context *context)
{
	return fail_int();
}

/* mlx5dv_dci_stream_id_reset (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dci_stream_id_reset(struct ibv_qp *qp, uint16_t stream_id)
{
	return fail_int();
}

/* mlx5dv_dek_create (MLX5_1.21): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context,
						 struct mlx5dv_dek_init_attr *init_attr)
{
	return fail_null();
}

/* mlx5dv_dek_destroy (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek *dek)
{
	return fail_int();
}

/* mlx5dv_dek_query (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dek_query(struct mlx5dv_dek *dek, struct mlx5dv_dek_attr *attr)
{
	return fail_int();
}

/* mlx5dv_destroy_flow_matcher (MLX5_1.6): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_destroy_flow_matcher(struct mlx5dv_flow_matcher *matcher)
{
	return fail_int();
}

/* mlx5dv_destroy_mkey (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
	return fail_int();
}

/* mlx5dv_destroy_steering_anchor (MLX5_1.24): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_destroy_steering_anchor(struct mlx5dv_steering_anchor *sa)
{
	return fail_int();
}

/* mlx5dv_devx_alloc_msi_vector (MLX5_1.23): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_msi_vector *mlx5dv_devx_alloc_msi_vector(struct ibv_context *ibctx)
{
	return fail_null();
}

/* mlx5dv_devx_alloc_uar (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *context,
							  uint32_t flags)
{
	return fail_null();
}

/* mlx5dv_devx_cq_modify (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_cq_modify(struct ibv_cq *cq, const void *in, size_t inlen, void *out,
				      size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_cq_query (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_cq_query(struct ibv_cq *cq, const void *in, size_t inlen, void *out,
				     size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_create_cmd_comp (MLX5_1.9): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_cmd_comp *mlx5dv_devx_create_cmd_comp(struct ibv_context *context)
{
	return fail_null();
}

/* mlx5dv_devx_create_eq (MLX5_1.23): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_eq *mlx5dv_devx_create_eq(struct ibv_context *ibctx, const void *in,
							 size_t inlen, void *out, size_t outlen)
{
	return fail_null();
}

/* mlx5dv_devx_create_event_channel (MLX5_1.11): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_event_channel *
mlx5dv_devx_create_event_channel(struct ibv_context *context,
				 enum mlx5dv_devx_create_event_channel_flags flags)
{
	return fail_null();
}

/* mlx5dv_devx_destroy_cmd_comp (MLX5_1.9): nothing to do. */
STUB_EXPORT void mlx5dv_devx_destroy_cmd_comp(struct mlx5dv_devx_cmd_comp *cmd_comp)
{
}

/* mlx5dv_devx_destroy_eq (MLX5_1.23): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_destroy_eq(struct mlx5dv_devx_eq *eq)
{
	return fail_int();
}

/* mlx5dv_devx_destroy_event_channel (MLX5_1.11): nothing to do. */
STUB_EXPORT void mlx5dv_devx_destroy_event_channel(struct mlx5dv_devx_event_channel *event_channel)
{
}

/* mlx5dv_devx_free_msi_vector (MLX5_1.23): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_free_msi_vector(struct mlx5dv_devx_msi_vector *msi)
{
	return fail_int();
}

/* mlx5dv_devx_free_uar (MLX5_1.7): nothing to do. */
STUB_EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *devx_uar)
{
}

/* mlx5dv_devx_general_cmd (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
					void *out, size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_get_async_cmd_comp (MLX5_1.9): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_get_async_cmd_comp(struct mlx5dv_devx_cmd_comp *cmd_comp,
					       struct mlx5dv_devx_async_cmd_hdr *cmd_resp,
					       size_t cmd_resp_len)
{
	return fail_int();
}

/* mlx5dv_devx_get_event (MLX5_1.11): -1, errno EOPNOTSUPP. */
STUB_EXPORT ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel *event_channel,
					  struct mlx5dv_devx_async_event_hdr *event_data,
					  size_t event_resp_len)
{
	return fail_minus1();
}

/* mlx5dv_devx_ind_tbl_modify (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_ind_tbl_modify(struct ibv_rwq_ind_table *ind_tbl, const void *in,
					   size_t inlen, void *out, size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_ind_tbl_query (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_ind_tbl_query(struct ibv_rwq_ind_table *ind_tbl, const void *in,
					  size_t inlen, void *out, size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_obj_create (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *context,
							   const void *in, size_t inlen, void *out,
							   size_t outlen)
{
	return fail_null();
}

/* mlx5dv_devx_obj_destroy (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *obj)
{
	return fail_int();
}

/* mlx5dv_devx_obj_modify (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
				       void *out, size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_obj_query (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
				      void *out, size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_obj_query_async (MLX5_1.9): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_obj_query_async(struct mlx5dv_devx_obj *obj, const void *in,
					    size_t inlen, size_t outlen, uint64_t wr_id,
					    struct mlx5dv_devx_cmd_comp *cmd_comp)
{
	return fail_int();
}

/* mlx5dv_devx_qp_modify (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_qp_modify(struct ibv_qp *qp, const void *in, size_t inlen, void *out,
				      size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_qp_query (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_qp_query(struct ibv_qp *qp, const void *in, size_t inlen, void *out,
				     size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_query_eqn (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_query_eqn(struct ibv_context *context, uint32_t vector, uint32_t *eqn)
{
	return fail_int();
}

/* mlx5dv_devx_srq_modify (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_srq_modify(struct ibv_srq *srq, const void *in, size_t inlen, void *out,
				       size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_srq_query (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_srq_query(struct ibv_srq *srq, const void *in, size_t inlen, void *out,
				      size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_subscribe_devx_event (MLX5_1.11): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_subscribe_devx_event(struct mlx5dv_devx_event_channel *event_channel,
						 struct mlx5dv_devx_obj *obj, uint16_t events_sz,
						 uint16_t events_num[], uint64_t cookie)
{
	return fail_int();
}

/* mlx5dv_devx_subscribe_devx_event_fd (MLX5_1.11): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_subscribe_devx_event_fd(struct mlx5dv_devx_event_channel *event_channel,
						    int fd, struct mlx5dv_devx_obj *obj,
						    uint16_t event_num)
{
	return fail_int();
}

/* mlx5dv_devx_umem_dereg (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *umem)
{
	return fail_int();
}

/* mlx5dv_devx_umem_reg (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *ctx, void *addr,
							  size_t size, uint32_t access)
{
	return fail_null();
}

/* mlx5dv_devx_umem_reg_ex (MLX5_1.19): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *ctx,
							     struct mlx5dv_devx_umem_in *umem_in)
{
	return fail_null();
}

/* mlx5dv_devx_wq_modify (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_wq_modify(struct ibv_wq *wq, const void *in, size_t inlen, void *out,
				      size_t outlen)
{
	return fail_int();
}

/* mlx5dv_devx_wq_query (MLX5_1.8): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_wq_query(struct ibv_wq *wq, const void *in, size_t inlen, void *out,
				     size_t outlen)
{
	return fail_int();
}

/* mlx5dv_dm_map_op_addr (MLX5_1.19): NULL, errno EOPNOTSUPP. */
STUB_EXPORT void *mlx5dv_dm_map_op_addr(struct ibv_dm *dm, uint8_t op)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_aso (MLX5_1.17): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_aso(struct mlx5dv_dr_domain *domain,
								 struct mlx5dv_devx_obj *devx_obj,
								 uint32_t offset, uint32_t flags,
								 uint8_t return_reg_c)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_default_miss (MLX5_1.14): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_default_miss(void)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_array (MLX5_1.16): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_array(struct mlx5dv_dr_domain *domain, size_t num_dest,
				   struct mlx5dv_dr_action_dest_attr *dests[])
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_devx_tir (MLX5_1.15): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_devx_tir(struct mlx5dv_devx_obj *devx_obj)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_ib_port (MLX5_1.21): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_ib_port(struct mlx5dv_dr_domain *domain, uint32_t ib_port)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_ibv_qp (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_dest_ibv_qp(struct ibv_qp *ibqp)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_root_table (MLX5_1.24): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_root_table(struct mlx5dv_dr_table *table, uint16_t priority)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_table (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_table(struct mlx5dv_dr_table *table)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_dest_vport (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_dest_vport(struct mlx5dv_dr_domain *domain, uint32_t vport)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_drop (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_drop(void)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_flow_counter (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_flow_counter(struct mlx5dv_devx_obj *devx_obj, uint32_t offset)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_flow_meter (MLX5_1.12): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_flow_meter(struct mlx5dv_dr_flow_meter_attr *attr)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_flow_sampler (MLX5_1.16): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_flow_sampler(struct mlx5dv_dr_flow_sampler_attr *attr)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_modify_header (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_modify_header(struct mlx5dv_dr_domain *domain, uint32_t flags,
				      size_t actions_sz, __be64 actions[])
{
	return fail_null();
}

/* mlx5dv_dr_action_create_packet_reformat (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_packet_reformat(struct mlx5dv_dr_domain *domain, uint32_t flags,
					enum mlx5dv_flow_action_packet_reformat_type reformat_type,
					size_t data_sz, void *data)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_pop_vlan (MLX5_1.17): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_pop_vlan(void)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_push_vlan (MLX5_1.17): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *
mlx5dv_dr_action_create_push_vlan(struct mlx5dv_dr_domain *domain, __be32 vlan_hdr)
{
	return fail_null();
}

/* mlx5dv_dr_action_create_tag (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_action *mlx5dv_dr_action_create_tag(uint32_t tag_value)
{
	return fail_null();
}

/* mlx5dv_dr_action_destroy (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_action_destroy(struct mlx5dv_dr_action *action)
{
	return fail_int();
}

/* mlx5dv_dr_action_modify_aso (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_action_modify_aso(struct mlx5dv_dr_action *action, uint32_t offset,
					    uint32_t flags, uint8_t return_reg_c)
{
	return fail_int();
}

/* mlx5dv_dr_action_modify_flow_meter (MLX5_1.12): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_action_modify_flow_meter(struct mlx5dv_dr_action *action,
						   struct mlx5dv_dr_flow_meter_attr *attr,
						   __be64 modify_field_select)
{
	return fail_int();
}

/* mlx5dv_dr_aso_other_domain_link (MLX5_1.22): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_aso_other_domain_link(struct mlx5dv_devx_obj *devx_obj,
						struct mlx5dv_dr_domain *peer_dmn,
						struct mlx5dv_dr_domain *dmn, uint32_t flags,
						uint8_t return_reg_c)
{
	return fail_int();
}

/* mlx5dv_dr_aso_other_domain_unlink (MLX5_1.22): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_aso_other_domain_unlink(struct mlx5dv_devx_obj *devx_obj,
						  struct mlx5dv_dr_domain *dmn)
{
	return fail_int();
}

/* mlx5dv_dr_domain_allow_duplicate_rules (MLX5_1.20): nothing to do. */
STUB_EXPORT void mlx5dv_dr_domain_allow_duplicate_rules(struct mlx5dv_dr_domain *domain, bool allow)
{
}

/* mlx5dv_dr_domain_create (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_domain *mlx5dv_dr_domain_create(struct ibv_context *ctx,
							     enum mlx5dv_dr_domain_type type)
{
	return fail_null();
}

/* mlx5dv_dr_domain_destroy (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_domain_destroy(struct mlx5dv_dr_domain *domain)
{
	return fail_int();
}

/* mlx5dv_dr_domain_set_reclaim_device_memory (MLX5_1.14): nothing to do. */
STUB_EXPORT void mlx5dv_dr_domain_set_reclaim_device_memory(struct mlx5dv_dr_domain *dmn,
							    bool enable)
{
}

/* mlx5dv_dr_domain_sync (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_domain_sync(struct mlx5dv_dr_domain *domain, uint32_t flags)
{
	return fail_int();
}

/* mlx5dv_dr_matcher_create (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_matcher *
mlx5dv_dr_matcher_create(struct mlx5dv_dr_table *table, uint16_t priority,
			 uint8_t match_criteria_enable, struct mlx5dv_flow_match_parameters *mask)
{
	return fail_null();
}

/* mlx5dv_dr_matcher_destroy (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_matcher_destroy(struct mlx5dv_dr_matcher *matcher)
{
	return fail_int();
}

/* mlx5dv_dr_matcher_set_layout (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_matcher_set_layout(struct mlx5dv_dr_matcher *matcher,
					     struct mlx5dv_dr_matcher_layout *layout)
{
	return fail_int();
}

/* mlx5dv_dr_rule_create (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_rule *mlx5dv_dr_rule_create(struct mlx5dv_dr_matcher *matcher,
							 struct mlx5dv_flow_match_parameters *value,
							 size_t num_actions,
							 struct mlx5dv_dr_action *actions[])
{
	return fail_null();
}

/* mlx5dv_dr_rule_destroy (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_rule_destroy(struct mlx5dv_dr_rule *rule)
{
	return fail_int();
}

/* mlx5dv_dr_table_create (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dr_table *mlx5dv_dr_table_create(struct mlx5dv_dr_domain *domain,
							   uint32_t level)
{
	return fail_null();
}

/* mlx5dv_dr_table_destroy (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dr_table_destroy(struct mlx5dv_dr_table *table)
{
	return fail_int();
}

/* mlx5dv_dump_dr_domain (MLX5_1.12): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dump_dr_domain(FILE *fout, struct mlx5dv_dr_domain *domain)
{
	return fail_int();
}

/* mlx5dv_dump_dr_matcher (MLX5_1.12): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dump_dr_matcher(FILE *fout, struct mlx5dv_dr_matcher *matcher)
{
	return fail_int();
}

/* mlx5dv_dump_dr_rule (MLX5_1.12): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dump_dr_rule(FILE *fout, struct mlx5dv_dr_rule *rule)
{
	return fail_int();
}

/* mlx5dv_dump_dr_table (MLX5_1.12): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dump_dr_table(FILE *fout, struct mlx5dv_dr_table *table)
{
	return fail_int();
}

/* mlx5dv_free_var (MLX5_1.12): nothing to do. */
STUB_EXPORT void mlx5dv_free_var(struct mlx5dv_var *dv_var)
{
}

/* mlx5dv_get_clock_info (MLX5_1.4): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_get_clock_info(struct ibv_context *context,
				      struct mlx5dv_clock_info *clock_info)
{
	return fail_int();
}

/* mlx5dv_get_vfio_device_list (MLX5_1.21): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_device **mlx5dv_get_vfio_device_list(struct mlx5dv_vfio_context_attr *attr)
{
	return fail_null();
}

/* mlx5dv_is_supported (MLX5_1.8): false (not an mlx5 device). */
STUB_EXPORT bool mlx5dv_is_supported(struct ibv_device *device)
{
	return false;
}

/* mlx5dv_map_ah_to_qp (MLX5_1.20): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_map_ah_to_qp(struct ibv_ah *ah, uint32_t qp_num)
{
	return fail_int();
}

/* mlx5dv_modify_qp_lag_port (MLX5_1.14): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_modify_qp_lag_port(struct ibv_qp *qp, uint8_t port_num)
{
	return fail_int();
}

/* mlx5dv_modify_qp_sched_elem (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_modify_qp_sched_elem(struct ibv_qp *qp,
					    const struct mlx5dv_sched_leaf *requestor,
					    const struct mlx5dv_sched_leaf *responder)
{
	return fail_int();
}

/* mlx5dv_modify_qp_udp_sport (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t udp_sport)
{
	return fail_int();
}

/* mlx5dv_open_device (MLX5_1.7): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
						   struct mlx5dv_context_attr *attr)
{
	return fail_null();
}

/* mlx5dv_pp_alloc (MLX5_1.13): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_pp *mlx5dv_pp_alloc(struct ibv_context *context, size_t pp_context_sz,
					      const void *pp_context, uint32_t flags)
{
	return fail_null();
}

/* mlx5dv_pp_free (MLX5_1.13): nothing to do. */
STUB_EXPORT void mlx5dv_pp_free(struct mlx5dv_pp *pp)
{
}

/* mlx5dv_qp_cancel_posted_send_wrs (MLX5_1.20): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_qp_cancel_posted_send_wrs(struct mlx5dv_qp_ex *mqp, uint64_t wr_id)
{
	return fail_int();
}

/* mlx5dv_qp_ex_from_ibv_qp_ex (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	return fail_null();
}

/* mlx5dv_query_device (MLX5_1.0): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_query_device(struct ibv_context *ctx_in, struct mlx5dv_context *attrs_out)
{
	return fail_int();
}

/* mlx5dv_query_qp_lag_port (MLX5_1.14): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_query_qp_lag_port(struct ibv_qp *qp, uint8_t *port_num,
					 uint8_t *active_port_num)
{
	return fail_int();
}

/* mlx5dv_reserved_qpn_alloc (MLX5_1.18): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_reserved_qpn_alloc(struct ibv_context *ctx, uint32_t *qpn)
{
	return fail_int();
}

/* mlx5dv_reserved_qpn_dealloc (MLX5_1.18): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_reserved_qpn_dealloc(struct ibv_context *ctx, uint32_t qpn)
{
	return fail_int();
}

/* mlx5dv_sched_leaf_create (MLX5_1.17): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_sched_leaf *
mlx5dv_sched_leaf_create(struct ibv_context *context, const struct mlx5dv_sched_attr *sched_attr)
{
	return fail_null();
}

/* mlx5dv_sched_leaf_destroy (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_sched_leaf_destroy(struct mlx5dv_sched_leaf *leaf)
{
	return fail_int();
}

/* mlx5dv_sched_leaf_modify (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_sched_leaf_modify(struct mlx5dv_sched_leaf *leaf,
					 const struct mlx5dv_sched_attr *sched_attr)
{
	return fail_int();
}

/* mlx5dv_sched_node_create (MLX5_1.17): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_sched_node *
mlx5dv_sched_node_create(struct ibv_context *context, const struct mlx5dv_sched_attr *sched_attr)
{
	return fail_null();
}

/* mlx5dv_sched_node_destroy (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_sched_node_destroy(struct mlx5dv_sched_node *node)
{
	return fail_int();
}

/* mlx5dv_sched_node_modify (MLX5_1.17): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_sched_node_modify(struct mlx5dv_sched_node *node,
					 const struct mlx5dv_sched_attr *sched_attr)
{
	return fail_int();
}

/* mlx5dv_set_context_attr (MLX5_1.2): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_set_context_attr(struct ibv_context *context,
					enum mlx5dv_set_ctx_attr_type type, void *attr)
{
	return fail_int();
}

/* mlx5dv_vfio_get_events_fd (MLX5_1.21): -1, errno EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_vfio_get_events_fd(struct ibv_context *ibctx)
{
	return fail_minus1();
}

/* mlx5dv_vfio_process_events (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_vfio_process_events(struct ibv_context *context)
{
	return fail_int();
}

/* mlx5dv_init_obj(3) (MLX5_1.0, and MLX5_1.2 the default): no object of
 * ours is an mlx5 object. EOPNOTSUPP. */
__attribute__((symver("mlx5dv_init_obj@MLX5_1.0"))) STUB_EXPORT int
mlx5dv_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t obj_type);
int mlx5dv_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t obj_type)
{
	return fail_int();
}

__attribute__((symver("mlx5dv_init_obj@@MLX5_1.2"))) STUB_EXPORT int
mlx5dv_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t obj_type);
int mlx5dv_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t obj_type)
{
	return fail_int();
}
