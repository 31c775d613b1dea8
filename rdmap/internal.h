/* Engine internals shared by the rdmap/ sources. Not a public header. */
#ifndef UIWARP_RDMAP_INTERNAL_H
#define UIWARP_RDMAP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ddp/ddp.h"
#include "mpa/mpa.h"
#include "rdmap/rdmap.h"
#include "rdmap/rdmap_wire.h"

/* The STag reserved for RTR frames (never given to an MR). */
#define UIW_RTR_STAG 1u

/* ------------------------------------------------------------- config.c */

struct uiw_config {
	struct mpa_config mpa;
	int connect_timeout_ms;
	int connect_retry_ms; /* retry a refused TCP connect this long (ms), 0 never */
	int tcp_maxseg;	 /* TCP_MAXSEG to set, 0 for the path's */
	int rx_spin_us;	 /* busy-poll the stream this long (us) before blocking */
	char tcp_cc[16]; /* TCP congestion control to set, "" for the system's */
};
/* Applies the configured socket options (congestion control) to a TCP socket. */
void uiw_config_socket(int fd);
const struct uiw_config *uiw_config_get(void);

/* ---------------------------------------------------------------- mem.c */

struct uiw_pd {
	atomic_int refs; /* MRs + QPs using it */
};

struct uiw_mr_int {
	struct uiw_mr pub;
	atomic_int refs;   /* table + in-flight users */
	atomic_bool valid; /* cleared by dereg or invalidation */
	/* memory windows: pub describes the bound range; parent is the MR */
	int mw_type;		   /* 0 for an MR, 1 or 2 for a window */
	struct uiw_mr_int *parent; /* referenced while bound */
	atomic_int windows;	   /* MRs: windows bound to it */
};

/* Executes a Bind MW or Local Invalidate WR (in send-queue order).
 * Returns a WC status. */
enum uiw_wc_status uiw_mem_local_op(struct uiw_pd *pd, const struct uiw_send_wr *wr);
/* Send with Invalidate on receive: invalidates a valid STag of pd (a window
 * is unbound and releases its MR); false if it cannot be invalidated. */
bool uiw_mem_remote_inv(struct uiw_pd *pd, uint32_t stag);

/* Looks up an STag and takes a reference; NULL if unknown or invalidated. */
struct uiw_mr_int *uiw_mr_get(uint32_t stag);
void uiw_mr_put(struct uiw_mr_int *mr);

/* Resolves an SGE against a PD: local pointer, or NULL with *err set to the
 * WC status (LOC_PROT_ERR unknown lkey / wrong PD / out of bounds,
 * LOC_ACCESS_ERR missing LOCAL_WRITE when need_write). */
void *uiw_sge_resolve(struct uiw_pd *pd, const struct uiw_sge *sge, bool need_write,
		      enum uiw_wc_status *err);

/* ----------------------------------------------------------------- cq.c */

/* Adds a CQE. Returns false when the CQ is full (overflow recorded). */
bool uiw_cq_push(struct uiw_cq *cq, const struct uiw_wc *wc, bool solicited);
/* Drops the send CQEs of qp still queued in cq (the QP is being destroyed:
 * nothing may point at it any more). */
void uiw_cq_purge_qp(struct uiw_cq *cq, struct uiw_qp *qp);
/* Counts QPs using a CQ (uiw_cq_destroy refuses while > 0). */
void uiw_cq_use(struct uiw_cq *cq, int delta);

/* ----------------------------------------------------------------- qp.c */

enum sq_wqe_state { WQE_QUEUED, WQE_SENT, WQE_DONE };

struct sq_wqe {
	struct uiw_send_wr wr; /* sg_list points at sge[] below */
	struct uiw_sge sge[UIW_MAX_SGE];
	struct iovec iov[UIW_MAX_SGE]; /* resolved local payload */
	int niov;
	uint64_t len;
	enum sq_wqe_state st;
	enum uiw_wc_status status;
	bool signaled;
	uint8_t inl[UIW_MAX_INLINE];
	uint8_t imm[RDMAP_IMMEDIATE_LEN]; /* Immediate Data body (RFC 7306) */
	uint32_t req_id;		  /* Atomic Request Identifier */
};

struct rq_wqe {
	uint64_t wr_id;
	int niov;
	struct iovec iov[UIW_MAX_SGE];
	uint64_t len;
};

/* An inbound RDMA Read Request waiting for its Read Response, or an
 * executed Atomic Request waiting for its Atomic Response (RFC 7306). */
enum irq_kind { IRQ_READ, IRQ_ATOMIC };
struct irq_entry {
	enum irq_kind kind;
	struct rdmap_atomic_resp aresp; /* IRQ_ATOMIC: wire order */
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	struct uiw_mr_int *src; /* referenced; NULL for a zero-length read */
	void *src_ptr;
};

/* An outbound RDMA Read waiting for its Read Response. */
struct orq_entry {
	bool atomic;	 /* RFC 7306 Atomic Request: response on QN 3 */
	uint32_t req_id; /* atomics: Request Identifier */
	void *result;	 /* atomics: where the original value goes (8 bytes) */
	uint32_t sq_idx; /* its SQ WQE, or UINT32_MAX for the Read RTR */
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size, got;
};

/* A shared receive queue: a ring of receive WQEs under its own lock. */
struct uiw_srq {
	struct uiw_pd *pd;
	pthread_mutex_t lock;
	struct rq_wqe *rq;
	uint32_t size, max_sge, head, tail;
	atomic_int users;
	uint32_t limit; /* armed SRQ limit (0: off), under lock */
	uiw_srq_limit_fn limit_fn;
	void *limit_ctx;
};

struct uiw_qp {
	uint32_t qpn;
	struct uiw_pd *pd;
	struct uiw_cq *scq, *rcq;
	struct uiw_srq *srq;
	unsigned caps; /* UIW_CAP_* of the connection */
	void *ctx;
	bool sq_sig_all;
	uint32_t max_inline, max_send_sge, max_recv_sge;

	pthread_mutex_t lock; /* state, queues */
	pthread_cond_t cond;  /* tx work, rtr seen, threads done */
	enum uiw_qp_state state;
	bool connected, closing, tx_gate_open, rx_seen_first, tx_stop;
	bool terminated, disconnected_reported;
	bool rx_ended;	  /* the receive thread has finished */
	bool tx_kick;	  /* work queued for whoever holds tx_lock */
	bool tx_wake;	  /* work for the tx thread (Read Responses, unstalled SQ) */
	bool local_fatal; /* a send WR failed locally: the rx thread reports
			   * UIW_QP_EV_FATAL before DISCONNECTED */
	uiw_qp_event_fn ev_fn;
	void *ev_ctx;

	/* send queue ring: [sq_head, sq_next) sent but not retired, [sq_next, sq_tail) queued */
	struct sq_wqe *sq;
	uint32_t sq_size, sq_head, sq_next, sq_tail;
	uint32_t sq_uncredited; /* retired WQEs no send CQE has covered yet */
	atomic_uint sq_polled;	/* WQEs whose completion has been polled */
	/* receive queue ring */
	struct rq_wqe *rq;
	uint32_t rq_size, rq_head, rq_tail;
	/* ORQ / IRQ rings */
	struct orq_entry *orq;
	uint32_t orq_size, orq_head, orq_tail;
	struct irq_entry *irq;
	uint32_t irq_size, irq_head, irq_tail;
	/* IRQ entries taken off the ring by the send side whose responses are
	 * not yet handed to the stream in full: they still count against IRD
	 * (RFC 5040 §6.5: a Read is outstanding until its Response is sent) */
	uint32_t irq_busy;
	uint16_t ird, ord; /* negotiated */

	/* connection */
	struct uiw_llp *llp;
	struct mpa_conn mpa;
	struct mpa_negotiated neg;
	pthread_mutex_t tx_lock; /* serialises the stream's send side */
	struct mpa_txbatch *batch;
	uint32_t tx_msn[RDMAP_NUM_QN]; /* next MSN per QN, starts at 1 */
	uint32_t tx_atomic_id;	       /* next Atomic Request Identifier */
	pthread_t rx_thread, tx_thread;
	bool threads_started;

	/* receive side (rx thread only) */
	uint32_t rx_msn[RDMAP_NUM_QN]; /* expected MSN per QN */
	uint64_t rx_send_got;	       /* bytes of the current Send message */
	bool rx_send_active;	       /* rx_cur taken (qp->lock to change) */
	struct rq_wqe rx_cur;	       /* receive WQE of the current Send */
	uint64_t rx_write_len;	       /* bytes of the RDMA Write in progress */
	uint64_t rx_last_write_len;    /* length of the last complete Write */
	bool rx_expect_send_rtr;       /* responder: first FPDU is a zero-length Send RTR */
	struct uiw_mr_int *rx_mr;      /* cached MR of the last tagged segment */

	struct uiw_term_info term;	    /* qp->lock */
	enum uiw_close_reason close_reason; /* qp->lock; the first one wins */
	struct uiw_qp_stats stats;
};

/* Takes the next receive WQE (the QP's RQ or its SRQ) into qp->rx_cur.
 * False when none is posted. qp->lock held. */
bool uiw_rq_take(struct uiw_qp *qp);
/* Pushes a receive completion for qp->rx_cur and releases it. qp->lock held. */
void uiw_rq_complete(struct uiw_qp *qp, struct uiw_wc *wc, bool solicited);

/* Retires completed SQ WQEs from the head, posting CQEs. qp->lock held. */
void uiw_sq_reap(struct uiw_qp *qp);
/* Moves the QP to ERR: flushes every outstanding WR. qp->lock held. */
void uiw_qp_flush_locked(struct uiw_qp *qp);
/* Records why the stream ended, unless a reason is recorded. qp->lock held. */
void uiw_qp_set_close_reason(struct uiw_qp *qp, enum uiw_close_reason why);
/* Reports a connection event once (no lock held). */
void uiw_qp_report(struct uiw_qp *qp, enum uiw_qp_event ev);
/* Starts the rx and tx threads of a connected QP. */
int uiw_qp_start(struct uiw_qp *qp);

/* ----------------------------------------------------------------- tx.c */

/* Sends queued SQ work and Read Responses while the send side is free.
 * Called by posting threads and the tx thread. */
void uiw_tx_progress(struct uiw_qp *qp);
void *uiw_tx_thread(void *arg);
/* Sends the RTR of an initiator (RFC 6581 §4). tx_lock not held. */
int uiw_tx_send_rtr(struct uiw_qp *qp, uint8_t rtr);
/* Sends a Terminate carrying payload (best effort: -EBUSY if the send side
 * stays busy for 2 s). */
int uiw_tx_send_terminate(struct uiw_qp *qp, const void *payload, size_t len);

/* ----------------------------------------------------------------- rx.c */

void *uiw_rx_thread(void *arg);

/* ---------------------------------------------------------- terminate.c */

/* What went wrong and where (RFC 5040 §4.8). */
struct uiw_term {
	uint8_t layer, etype, ecode;
	bool has_seg; /* a segment header is echoed */
	struct ddp_rx_seg seg;
	bool has_rreq;		    /* the Read Request body is echoed */
	struct rdmap_read_req rreq; /* wire order */
};

/* The one Terminate path: sends the Terminate (best effort), closes the
 * stream, moves the QP to ERR and flushes, reports UIW_QP_EV_TERMINATE.
 * Called from the rx thread. */
void uiw_terminate(struct uiw_qp *qp, const struct uiw_term *t);

#endif
