/* Internal to verbs-shim: how libibverbs.so.1 (ours) wraps engine objects,
 * so librdmacm.so.1 (ours) can reach the engine behind an ibv_* object it got
 * through the public API. Not installed; both libraries are built together.
 */
#ifndef UIWARP_VERBS_SHIM_H
#define UIWARP_VERBS_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

#include "rdmap/rdmap.h"

#define shim_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

struct shim_async_ev;

struct shim_context {
	struct verbs_context vctx; /* ibv_context is its last member */
	/* Added by libibverbs: the async event queue behind vctx.context.async_fd
	 * (a pipe: one byte per queued event; the records live in ev_head).
	 * Guarded by ev_lock. */
	pthread_mutex_t ev_lock;
	struct shim_async_ev *ev_head, *ev_tail;
	unsigned ev_count;
	int ev_wfd; /* write end of the async_fd pipe, O_NONBLOCK */
};

struct shim_pd {
	struct ibv_pd ibv;
	struct uiw_pd *pd;
	int users; /* MRs and QPs on this PD (atomic); dealloc is EBUSY while > 0 */
};

struct shim_mr {
	struct ibv_mr ibv;
	struct uiw_mr *mr;
};

/* A completion channel: ibv.fd is the read end of an AF_UNIX SOCK_SEQPACKET
 * socketpair (a pipe that also allows a non-blocking drain whatever the
 * app's O_NONBLOCK setting) carrying one struct ibv_cq * per event, as the
 * kernel's ib_uverbs_comp_event_desc does. */
struct shim_channel {
	struct ibv_comp_channel ibv;
	int wfd;	      /* write end */
	pthread_mutex_t lock; /* serialises the drain in ibv_destroy_cq */
};

struct shim_cq {
	struct ibv_cq ibv;
	struct uiw_cq *cq;
	int users;		       /* QPs using it as send or recv CQ (atomic) */
	uint32_t comp_events_reported; /* ibv_get_cq_event results; under ibv.mutex */
	uint32_t async_events_reported;
	bool overflow_reported;
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
	/* Added by libibverbs. */
	struct ibv_qp_cap cap;	    /* granted capacities */
	uint8_t max_rd_atomic;	    /* last IBV_QP_MAX_QP_RD_ATOMIC (ORD) */
	uint8_t max_dest_rd_atomic; /* last IBV_QP_MAX_DEST_RD_ATOMIC (IRD) */
	unsigned qp_access_flags;   /* last IBV_QP_ACCESS_FLAGS */
	int sq_sig_all;
	uint32_t async_events_reported; /* under ibv.mutex */
	struct shim_qp *num_next;	/* shim_qp_by_num hash chain */
};

struct shim_srq {
	struct ibv_srq ibv;
};

/* Exported by our libibverbs.so.1 (version node UIWARP_PRIVATE_1, not part of
 * the rdma-core ABI) for librdmacm: the live QP of context (any context if
 * NULL) whose qp_num is qp_num, e.g. for rdma_connect / rdma_accept on an
 * id without a QP (conn_param->qp_num, rping -q). NULL with errno ENOENT if
 * none. The caller keeps the QP from being destroyed meanwhile (verbs
 * rule). */
struct shim_qp *shim_qp_by_num(struct ibv_context *context, uint32_t qp_num);

static inline struct shim_context *shim_ctx(struct ibv_context *c)
{
	return shim_container_of(c, struct shim_context, vctx.context);
}
static inline struct shim_channel *shim_channel(struct ibv_comp_channel *ch)
{
	return shim_container_of(ch, struct shim_channel, ibv);
}

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
