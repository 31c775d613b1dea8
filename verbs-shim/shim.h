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
	int users;		   /* MRs and QPs on this PD (atomic); dealloc is EBUSY while > 0 */
	struct shim_pd *live_next; /* set of live PDs (pd_mr.c), under its lock */
};

struct shim_mr {
	struct ibv_mr ibv;
	struct uiw_mr *mr;
};

/* A memory window (ibv_alloc_mw): type 1 (bound by ibv_bind_mw) or type 2
 * (bound by IBV_WR_BIND_MW / ibv_wr_bind_mw); ibv.rkey is the engine's
 * window STag. */
struct shim_mw {
	struct ibv_mw ibv;
	struct uiw_mw *mw;
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
	union {
		struct ibv_cq ibv;     /* what ibv_create_cq returns */
		struct ibv_cq_ex ibvx; /* ibv_create_cq_ex: same leading layout */
	};
	struct uiw_cq *cq;
	int users;		       /* QPs using it as send or recv CQ (atomic) */
	uint32_t comp_events_reported; /* ibv_get_cq_event results; under ibv.mutex */
	uint32_t async_events_reported;
	bool overflow_reported;
	bool arm_solicited; /* the last ibv_req_notify_cq's solicited_only (atomic) */
	int records; /* event records of this CQ queued on its channel, not yet read (atomic) */
	/* ibv_get_cq_event returned a record of this CQ and the CQ has not been
	 * polled since (atomic): the application's next ibv_req_notify_cq comes
	 * before the poll that takes what the record announced */
	bool took_unpolled;
	/* Added by libibverbs for the ibv_cq_ex poll iterator (ibv_start_poll
	 * .. ibv_end_poll): the completion being read; single reader per CQ, as
	 * ibv_create_cq_ex(3) requires. */
	struct uiw_wc cur;
	uint64_t wc_flags; /* IBV_WC_EX_WITH_* asked for at creation */
};

struct shim_qp;
/* Set by librdmacm on a QP it manages: connection events of the engine QP
 * are forwarded here (after libibverbs has raised its async event). */
typedef void (*shim_cm_event_fn)(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx);

struct shim_wr_batch;

struct shim_qp {
	union {
		struct ibv_qp ibv;     /* what ibv_create_qp returns */
		struct ibv_qp_ex ibvx; /* ibv_qp_to_qp_ex: qp_base is first */
	};
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
	uint64_t send_ops_flags;	/* IBV_QP_EX_WITH_*: ibv_wr_* API enabled if != 0 */
	struct shim_wr_batch *batch;	/* ibv_wr_start .. ibv_wr_complete state */
};

struct shim_srq {
	struct ibv_srq ibv;
	/* Added by libibverbs (SRQ support). */
	struct uiw_srq *srq;
	int users; /* QPs using it (atomic); destroy is EBUSY while > 0 */
	uint32_t max_wr, max_sge, srq_limit;
	uint32_t async_events_reported; /* under ibv.mutex */
};

/* Exported by our libibverbs.so.1 (version node UIWARP_PRIVATE_1, not part of
 * the rdma-core ABI) for librdmacm: the live QP of context (any context if
 * NULL) whose qp_num is qp_num, e.g. for rdma_connect / rdma_accept on an
 * id without a QP (conn_param->qp_num, rping -q). NULL with errno ENOENT if
 * none. The caller keeps the QP from being destroyed meanwhile (verbs
 * rule). */
struct shim_qp *shim_qp_by_num(struct ibv_context *context, uint32_t qp_num);

/* Exported like shim_qp_by_num: true if pd is a PD that ibv_alloc_pd
 * returned and ibv_dealloc_pd has not freed (looked up by address, never
 * dereferenced), so a NULL, freed or stray PD pointer gets EINVAL instead
 * of a crash. */
bool shim_pd_is_live(const struct ibv_pd *pd);

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
static inline struct shim_mw *shim_mw(struct ibv_mw *w)
{
	return shim_container_of(w, struct shim_mw, ibv);
}
static inline struct shim_cq *shim_cq(struct ibv_cq *c)
{
	return shim_container_of(c, struct shim_cq, ibv);
}
static inline struct shim_qp *shim_qp(struct ibv_qp *q)
{
	return shim_container_of(q, struct shim_qp, ibv);
}
static inline struct shim_srq *shim_srq(struct ibv_srq *s)
{
	return shim_container_of(s, struct shim_srq, ibv);
}

#endif
