/* Internal to verbs-shim: how libibverbs.so.1 (ours) wraps engine objects,
 * so librdmacm.so.1 (ours) can reach the engine behind an ibv_* object it got
 * through the public API. Not installed; both libraries are built together.
 */
#ifndef UIWARP_VERBS_SHIM_H
#define UIWARP_VERBS_SHIM_H

#include <stddef.h>
#include <pthread.h>
#include <infiniband/verbs.h>

#include "rdmap/rdmap.h"

#define shim_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

struct shim_context {
	struct verbs_context vctx; /* ibv_context is its last member */
};

struct shim_pd {
	struct ibv_pd ibv;
	struct uiw_pd *pd;
};

struct shim_mr {
	struct ibv_mr ibv;
	struct uiw_mr *mr;
};

struct shim_cq {
	struct ibv_cq ibv;
	struct uiw_cq *cq;
};

struct shim_qp;
/* Set by librdmacm on a QP it manages: connection events of the engine QP
 * are forwarded here (after libibverbs has raised its async event). */
typedef void (*shim_cm_event_fn)(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx);

struct shim_qp {
	struct ibv_qp ibv;
	struct uiw_qp *qp;
	shim_cm_event_fn cm_event;
	void *cm_ctx;
};

struct shim_srq {
	struct ibv_srq ibv;
};

static inline struct shim_pd *shim_pd(struct ibv_pd *p)
{
	return shim_container_of(p, struct shim_pd, ibv);
}
static inline struct shim_mr *shim_mr(struct ibv_mr *m)
{
	return shim_container_of(m, struct shim_mr, ibv);
}
static inline struct shim_cq *shim_cq(struct ibv_cq *c)
{
	return shim_container_of(c, struct shim_cq, ibv);
}
static inline struct shim_qp *shim_qp(struct ibv_qp *q)
{
	return shim_container_of(q, struct shim_qp, ibv);
}

#endif
