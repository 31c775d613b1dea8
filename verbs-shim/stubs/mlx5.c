/* Stub libmlx5.so.1: perftest (and libfabric / UCX) link libmlx5 directly
 * (DT_NEEDED, BIND_NOW), so the symbols they import must exist; the real
 * library needs ~74 IBVERBS_PRIVATE_34 symbols from the real libibverbs.
 * None of these is reached for an iWARP device (perftest calls them only
 * for DC, AES-XTS crypto or mlx5 devices). Every function fails:
 * pointer results are NULL with errno EOPNOTSUPP; int results are the
 * positive errno EOPNOTSUPP (the mlx5dv(3) convention), errno also set.
 * Symbol set: ../../shared/reference/verbs-abi.md §2; prototypes from
 * <infiniband/mlx5dv.h> (rdma-core 44).
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

#define STUB_EXPORT __attribute__((visibility("default")))

/* mlx5dv_create_qp(3) (MLX5_1.3): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
					    struct ibv_qp_init_attr_ex *qp_attr,
					    struct mlx5dv_qp_init_attr *mlx5_qp_attr)
{
	(void)context, (void)qp_attr, (void)mlx5_qp_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_devx_general_cmd(3) (MLX5_1.7): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
					void *out, size_t outlen)
{
	(void)context, (void)in, (void)inlen, (void)out, (void)outlen;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* mlx5dv_open_device(3) (MLX5_1.7): NULL, errno EOPNOTSUPP (not mlx5). */
STUB_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
						   struct mlx5dv_context_attr *attr)
{
	(void)device, (void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_create_mkey(3) (MLX5_1.10): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_mkey *mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr)
{
	(void)mkey_init_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_destroy_mkey(3) (MLX5_1.10): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
	(void)mkey;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* mlx5dv_qp_ex_from_ibv_qp_ex(3) (MLX5_1.10): NULL, errno EOPNOTSUPP (no
 * QP of ours is an mlx5 QP). */
STUB_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	(void)qp;
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_crypto_login(3) (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_crypto_login(struct ibv_context *context,
				    struct mlx5dv_crypto_login_attr *login_attr)
{
	(void)context, (void)login_attr;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* mlx5dv_dek_create(3) (MLX5_1.21): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context,
						 struct mlx5dv_dek_init_attr *init_attr)
{
	(void)context, (void)init_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* mlx5dv_dek_destroy(3) (MLX5_1.21): EOPNOTSUPP. */
STUB_EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek *dek)
{
	(void)dek;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
