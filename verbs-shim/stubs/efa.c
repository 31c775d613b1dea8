/* Stub libefa.so.1: perftest links libefa directly (DT_NEEDED, BIND_NOW);
 * the real library needs IBVERBS_PRIVATE_34 from the real libibverbs.
 * uiwarp devices are not EFA devices, so every function fails: pointer
 * results are NULL with errno EOPNOTSUPP, int results the positive errno
 * EOPNOTSUPP (the efadv(7) convention, errno also set). Prototypes from
 * <infiniband/efadv.h> (rdma-core 44); nodes EFA_1.0 <- 1.1 <- 1.2.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/efadv.h>

#define STUB_EXPORT __attribute__((visibility("default")))

/* efadv_create_driver_qp(3) (EFA_1.0): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_qp *
efadv_create_driver_qp(struct ibv_pd *ibvpd, struct ibv_qp_init_attr *attr, uint32_t driver_qp_type)
{
	(void)ibvpd, (void)attr, (void)driver_qp_type;
	errno = EOPNOTSUPP;
	return NULL;
}

/* efadv_create_qp_ex(3) (EFA_1.1): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx,
					      struct ibv_qp_init_attr_ex *attr_ex,
					      struct efadv_qp_init_attr *efa_attr, uint32_t inlen)
{
	(void)ibvctx, (void)attr_ex, (void)efa_attr, (void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}

/* efadv_query_device(3) (EFA_1.1): EOPNOTSUPP (not an EFA device). */
STUB_EXPORT int efadv_query_device(struct ibv_context *ibvctx, struct efadv_device_attr *attr,
				   uint32_t inlen)
{
	(void)ibvctx, (void)attr, (void)inlen;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* efadv_query_ah(3) (EFA_1.1): EOPNOTSUPP. */
STUB_EXPORT int efadv_query_ah(struct ibv_ah *ibvah, struct efadv_ah_attr *attr, uint32_t inlen)
{
	(void)ibvah, (void)attr, (void)inlen;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* efadv_create_cq(3) (EFA_1.2): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct ibv_cq_ex *efadv_create_cq(struct ibv_context *ibvctx,
					      struct ibv_cq_init_attr_ex *attr_ex,
					      struct efadv_cq_init_attr *efa_attr, uint32_t inlen)
{
	(void)ibvctx, (void)attr_ex, (void)efa_attr, (void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}

/* efadv_cq_from_ibv_cq_ex(3) (EFA_1.2): NULL, errno EOPNOTSUPP. */
STUB_EXPORT struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *ibvcqx)
{
	(void)ibvcqx;
	errno = EOPNOTSUPP;
	return NULL;
}
