/* Engine internals shared by the rdmap/ sources. Not a public header.
 *
 * Who touches what (docs/design.md, "Threads and progress"):
 *  - qp->lock guards the QP's state, the posting ends of its rings, the
 *    ORQ/IRQ indices, the close reason and the event callback; it is held
 *    for short, non-blocking stretches only.
 *  - qp->rx_lock and qp->tx_lock, the progress locks, are each held by one
 *    thread at a time: the one that reads the QP's stream (placement,
 *    completions of what arrives) and the one that writes it (WRs, Read and
 *    Atomic Responses, a Terminate). Any thread may take either: a thread
 *    that posts, a thread that polls one of the QP's CQs, or the engine
 *    thread (progress.c). Only the holder touches its half of the stream
 *    and of the MPA/DDP state. A thread that finds a lock taken leaves its
 *    request in qp->pending; the holder takes it on before letting go.
 */
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
#include "stream/stream.h"

/* The STag reserved for RTR frames (never given to an MR). */
#define UIW_RTR_STAG 1u

/* ------------------------------------------------------------- config.c */

/* The dead-peer bound's default (ms): docs/configuration.md. */
#define UIW_DEAD_PEER_MS_DEFAULT 30000

struct uiw_config {
	struct mpa_config mpa;
	struct uiw_tcp_opts tcp;
	struct uiw_tls_opts tls; /* UIWARP_TLS* (stream/tls.c) */
	int connect_timeout_ms;
	int connect_retry_ms; /* retry a refused TCP connect this long (ms), 0 never */
	int rtr_delay_us;     /* initiator: wait this long (us) after the MPA Reply */
	int rq_wait_ms;	      /* a Send finding no receive WR waits this long for one (ms) */
	int spin_us;	      /* the engine busy-polls this long (us) before sleeping */
	int poll_yield_us;    /* an empty poll this long after the last CQE yields (us), -1 never */
	int poll_nap_us;      /* ... and this long naps UIW_POLL_NAP_NS (us), -1 never */
};
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

/* The one validation of an STag use (RFC 5041 §7.2, RFC 5040 §7.3): mr (a
 * referenced lookup of the STag, may be NULL) used by a stream of pd for
 * len bytes at tagged offset to, with access (UIW_ACCESS_* bits, all
 * needed; 0 for none; UIW_ACCESS_ANY: at least one). Checks, in this
 * order: known and valid, same PD, access, TO wrap, base and bounds. On
 * DDP_STAG_OK *ptr is the local address of to. */
#define UIW_ACCESS_ANY (~0u)
enum ddp_stag_result uiw_stag_check(const struct uiw_mr_int *mr, const struct uiw_pd *pd,
				    uint64_t to, uint64_t len, unsigned access, void **ptr);

/* Resolves an SGE against a PD: local pointer, or NULL with *err set to the
 * WC status (LOC_PROT_ERR unknown lkey / wrong PD / out of bounds,
 * LOC_ACCESS_ERR missing LOCAL_WRITE when need_write). */
void *uiw_sge_resolve(struct uiw_pd *pd, const struct uiw_sge *sge, bool need_write,
		      enum uiw_wc_status *err);

/* ----------------------------------------------------------------- cq.c */

/* When a thread last polled cq (CLOCK_MONOTONIC ns; 0: never). */
uint64_t uiw_cq_last_poll(const struct uiw_cq *cq);
/* Whether a poll of cq drives its QPs' waiting batches (cq.c cq_progress
 * scans them: at most CQ_SCAN_MAX, 4, QPs on it). A relaxed read. */
bool uiw_cq_drives(const struct uiw_cq *cq);
/* Adds a CQE. Returns false when the CQ is full (overflow recorded). */
bool uiw_cq_push(struct uiw_cq *cq, const struct uiw_wc *wc, bool solicited);
/* Drops the send CQEs of qp still queued in cq (the QP is being destroyed:
 * nothing may point at it any more). */
void uiw_cq_purge_qp(struct uiw_cq *cq, struct uiw_qp *qp);
/* Adds qp to / removes it from the QPs a poller of cq drives (create,
 * destroy); remove waits for a poller inside. 0 or -ENOMEM. */
int uiw_cq_attach_qp(struct uiw_cq *cq, struct uiw_qp *qp);
void uiw_cq_detach_qp(struct uiw_cq *cq, struct uiw_qp *qp);
/* Counts QPs using a CQ (uiw_cq_destroy refuses while > 0). */
void uiw_cq_use(struct uiw_cq *cq, int delta);

/* ----------------------------------------------------------------- wq.c */

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
	struct iovec v; /* the response's payload, while it is being sent */
	/* the Read Request, echoed by the Terminate if its source turns out
	 * to be gone when the response is cut (tx.c, RFC 5040 §4.8) */
	struct ddp_rx_seg req_seg;
	struct rdmap_read_req rreq; /* wire order */
};

/* An outbound RDMA Read (or Atomic) waiting for its response. */
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

/* Fills a receive WQE from a receive WR, resolving its SGEs against pd.
 * Returns UIW_WC_SUCCESS or the status of the first bad SGE. */
enum uiw_wc_status uiw_rq_wqe_fill(struct rq_wqe *r, struct uiw_pd *pd,
				   const struct uiw_recv_wr *wr);
/* Takes the next receive WQE (the QP's RQ or its SRQ) into qp->rx_cur.
 * False when none is posted. qp->lock held. */
bool uiw_rq_take(struct uiw_qp *qp);
/* Pushes a receive completion for qp->rx_cur and releases it. qp->lock held. */
void uiw_rq_complete(struct uiw_qp *qp, struct uiw_wc *wc, bool solicited);
/* Retires completed SQ WQEs from the head, posting CQEs. qp->lock held. */
void uiw_sq_reap(struct uiw_qp *qp);
/* Pushes a flush CQE for a send WR posted while the QP is in ERR. */
void uiw_sq_flush_posted(struct uiw_qp *qp, const struct uiw_send_wr *wr);
/* Moves the QP to ERR: flushes every outstanding WR. qp->lock held. */
void uiw_qp_flush_locked(struct uiw_qp *qp);
/* Releases the IRQ entries' MR references and empties it. qp->lock held. */
void uiw_irq_clear(struct uiw_qp *qp);

/* ----------------------------------------------------------- progress.c */

/* Work a thread asks of the progress lock's holder (qp->pending). */
enum {
	PROG_RX = 1,	/* the stream may have bytes */
	PROG_TX = 2,	/* there may be something to send, or room to send it */
	PROG_TIMER = 4, /* a deadline of the QP passed */
};

/* Who calls uiw_progress (what it may take on). */
enum prog_role {
	ROLE_POSTER, /* a thread posting WRs: sends, receives only if asked to */
	ROLE_POLLER, /* a thread polling a CQ of the QP */
	ROLE_ENGINE, /* the engine thread */
};

/* The process's engine: one thread waiting in epoll on the streams of
 * connected QPs that nobody else is driving, plus their deadlines. */
struct uiw_engine;

/* Drives qp's stream for the work in what (PROG_* bits), now, in the
 * calling thread if the progress locks are free; otherwise leaves the work
 * to their holders. Never blocks on the stream. It holds locks across
 * send / recv / epoll_wait (cancellation points): an application thread
 * calls it, and uiw_engine_proxy, with cancellation off
 * (util/thread.h uiw_nocancel_begin), as the verbs calls that get here
 * are no cancellation points. */
void uiw_progress(struct uiw_qp *qp, unsigned what, enum prog_role role);
/* Hands qp's stream (non-blocking, framing set up) to the engine; from now
 * on it makes progress. Starts the engine thread on first use. 0 or
 * -errno (-EAGAIN: no thread could be started). */
int uiw_engine_attach(struct uiw_qp *qp);
/* Takes qp away from the engine: when it returns, the engine thread no
 * longer looks at qp (callable from any thread, the engine's included). */
void uiw_engine_detach(struct uiw_qp *qp);
/* The engine's work done by a thread polling a CQ (cq.c): one
 * epoll_wait(0) on the engine's set, progress on the streams it reports
 * and on kicked QPs. While pollers that say park come by at least every
 * PARK_NS (200 us), the engine thread sleeps: bytes arriving wake no
 * thread. A poller about to sleep (its CQ armed: the last look after
 * ibv_req_notify_cq) does not say park. */
void uiw_engine_proxy(bool park);
/* A poller is about to read the streams itself for a while (cq.c
 * reply_wait: the peer's answer is due): an engine thread waiting in
 * epoll on them, where every byte that arrives would wake it to find the
 * event taken, is woken once and parks (as uiw_engine_proxy's park). */
void uiw_engine_leave(void);
/* The calling thread, inside a pass (rx.c, tx.c), is moving bytes: if it
 * is a poller whose last uiw_engine_proxy parked the engine, it counts as
 * still there (as a fresh proxy), so a pass that lasts longer than
 * PARK_NS (200 us: a 1 MiB Read Response or its receipt on loopback)
 * does not wake the engine to take the same stream's other direction or
 * its events beside it. streaming: the thread pushes as a poster with
 * DEFER_DEPTH or more WRs outstanding (tx.c uiw_tx_streaming), so it
 * polls again soon (its send queue fills otherwise): it counts too.
 * now: the caller's clock (ns, CLOCK_MONOTONIC), 0 to read it (only for
 * a poller). A few loads, no lock. */
void uiw_engine_poller_busy(uint64_t now, bool streaming);
/* A poller stops polling (it arms a CQ to sleep on its channel): the
 * engine thread takes the streams back at once. */
void uiw_engine_unpark(void);
/* A poller that has found nothing for a long while naps (cq.c): sleeps up
 * to ns (nanoseconds, < 1 s) or until a stream of the engine's set has an
 * event, whichever comes first, so what arrives meanwhile (a Read Request
 * to answer, a Write to place) waits for no timer; the engine stays
 * parked, as the napper is back within PARK_NS. No error: an interrupted
 * or failed wait just returns early. */
void uiw_engine_nap(uint64_t ns);
/* Asks the engine thread to run progress on qp soon (what: PROG_*). */
void uiw_engine_kick(struct uiw_qp *qp, unsigned what);
/* Sets (ns > 0: absolute CLOCK_MONOTONIC time) or clears (0) qp's one
 * deadline; when it passes, the engine runs PROG_TIMER progress (to the
 * ns while it waits in epoll; a parked engine, whose pollers are about,
 * is not woken for it and sees it within PARK_NS). Also before
 * uiw_engine_attach (a WR posted between RTS and the attach defers its
 * batch on it); after uiw_engine_detach none is set. */
void uiw_engine_deadline(struct uiw_qp *qp, uint64_t at_ns);
/* uiw_engine_deadline for a batch that waits for the next poll (tx.c):
 * while it is qp's only timer, the engine skips it once the batch went or
 * while a poller of qp's CQs is about (progress.c tx_polled). */
void uiw_engine_deadline_tx(struct uiw_qp *qp, uint64_t at_ns);
/* CLOCK_MONOTONIC in ns. */
uint64_t uiw_now_ns(void);

/* ----------------------------------------------------------------- qp.c */

/* The connection's phase (progress-lock holder). */
enum conn_phase {
	CONN_NONE,    /* no stream */
	CONN_OPEN,    /* receiving */
	CONN_CLOSING, /* receiving ended: finishing what may still go out */
	CONN_CLOSED,  /* done: events reported, engine detached */
};

/* Receive state machine (rx.c). */
enum rx_state {
	RX_HDR,	   /* waiting for the next segment's header */
	RX_BEGIN,  /* header read: checking it, choosing the target (a Send may wait) */
	RX_PLACE,  /* placing the current segment's payload */
	RX_FINISH, /* placed and checked: completing it (may wait for the send side) */
	RX_DRAIN,  /* after a Terminate: reading and dropping */
	RX_DONE,   /* the stream is finished with */
};

/* The message the send side is cutting into segments (tx.c). */
enum txm_kind { TXM_NONE, TXM_SQ, TXM_IRQ, TXM_TERM };
struct txm {
	enum txm_kind kind;
	uint32_t idx; /* SQ or IRQ index */
	int phase;    /* Write with Immediate: 0 the Write, 1 the Immediate Data */
	struct ddp_msg m;
	struct ddp_txpos pos;
	struct iovec v; /* a single-piece payload */
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

	pthread_mutex_t lock; /* see the top of this file */
	pthread_cond_t cond;  /* the RTR seen, the connection closed */
	enum uiw_qp_state state;
	bool connected, closing, tx_gate_open, rx_seen_first;
	bool terminated, disconnected_reported;
	bool rx_ended;	  /* the connection is closed (events reported) */
	bool local_fatal; /* a send WR failed locally, or the dead-peer bound passed:
			     UIW_QP_EV_FATAL before DISCONNECTED */
	bool fin_sent;	  /* SQD: our FIN went out after the queued work */
	uiw_qp_event_fn ev_fn;
	void *ev_ctx;

	/* send queue ring: [sq_head, sq_next) handed to the send side but not
	 * retired, [sq_next, sq_tail) queued */
	struct sq_wqe *sq;
	uint32_t sq_size, sq_head, sq_next, sq_tail;
	uint32_t sq_uncredited; /* retired WQEs no send CQE has covered yet */
	atomic_uint sq_polled;	/* WQEs whose completion has been polled */
	/* receive queue ring */
	struct rq_wqe *rq;
	uint32_t rq_size, rq_head, rq_tail;
	/* ORQ: our Reads / Atomics waiting for their responses */
	struct orq_entry *orq;
	uint32_t orq_size, orq_head, orq_tail;
	/* IRQ: [irq_head, irq_next) responses being sent, [irq_next,
	 * irq_tail) queued; all of them count against IRD until handed to the
	 * stream in full (RFC 5040 §6.5) */
	struct irq_entry *irq;
	uint32_t irq_size, irq_head, irq_next, irq_tail;
	uint16_t ird, ord; /* negotiated */

	/* connection (progress-lock holder only, unless said) */
	struct uiw_stream *stream; /* set while attached; qp->lock to change */
	struct mpa_conn mpa;
	struct mpa_negotiated neg;
	pthread_mutex_t rx_lock, tx_lock;
	atomic_uint pending;   /* PROG_* for the holders */
	atomic_int tx_window;  /* a batch is going out and its completions are not yet pushed */
	enum conn_phase phase; /* rx side; qp->lock to read from outside */
	uint64_t close_by_ns;  /* CONN_CLOSING: give up waiting at this time */
	bool tx_busy;	       /* the send batch holds unsent bytes (qp->lock) */
	atomic_bool want_out;  /* the stream took only part: push again on POLLOUT */
	atomic_bool hup_seen;  /* epoll reported the stream's end or an error */
	atomic_bool out_ready; /* the engine saw POLLOUT since */
	/* dead-peer watchdog where the kernel does not keep the bound
	 * (Multipath TCP; progress.c, rx side): on, and the next check */
	bool watch;
	uint64_t watch_next_ns;
	atomic_bool watch_expired; /* for the send side: end as a peer timeout */
	bool aborted;		   /* the stream was aborted (qp->lock) */
	/* engine bookkeeping (progress.c, under the engine's lock) */
	bool detached; /* uiw_engine_detach let go of it (until an attach) */
	struct uiw_engine *eng;
	struct uiw_qp *kick_next;
	bool kicked, registered;
	unsigned kick_what;
	uint64_t deadline_ns;
	bool dl_tx_only; /* the deadline is a waiting batch's alone (engine.lock) */
	int dl_index;	 /* in the engine's deadline list, -1 if none */
	/* reported events waiting for rx_lock to be let go (rx side) */
	unsigned ev_due;

	/* send side */
	uint32_t tx_msn[RDMAP_NUM_QN]; /* next MSN per QN, starts at 1 */
	uint32_t tx_atomic_id;	       /* next Atomic Request Identifier */
	struct txm txm;		       /* the message being segmented */
	uint32_t tx_sq_end;	 /* SQ WQEs below this index have all their segments in the batch */
	uint32_t tx_irq_end;	 /* likewise for IRQ responses */
	bool tx_fail;		 /* a WQE failed locally: end the connection after the batch */
	atomic_bool tx_deferred; /* a batch waits for the next poll (or its deadline) */
	uint64_t tx_last_push_ns;
	uint64_t tx_carry_ns;	  /* when the last push left bytes in the carry */
	uint64_t tx_last_post_ns; /* the poster's last deferrable post */
	bool term_queued;	  /* a Terminate waits to be sent */
	bool term_started;	  /* tx side: it is being cut into the batch */
	bool term_in_batch;	  /* tx side: all of it is in the batch */
	bool term_sent;		  /* ... and went out (qp->lock) */
	bool term_closed;	  /* rx side: the stream was aborted after it */
	/* Write ping-pong (cq.c reply_wait): when the send side last pushed;
	 * messages of the peer completed here (rx side, every RDMA Write,
	 * Send and Read Response); of the peer's last RDMA Writes, how many
	 * in a row came within UIW_PP_NS of our one push before them, and the
	 * gap of the last one (ns) */
	_Atomic uint64_t pp_push_ns;
	atomic_uint pp_pushes;	 /* the send side's pushes */
	unsigned pp_pushes_seen; /* ... at the peer's last RDMA Write (rx side) */
	atomic_uint rx_msgs;
	atomic_uint pp_score;
	_Atomic uint64_t pp_gap_ns;
	atomic_bool pp_last_write; /* the peer's last message completed here was an RDMA Write */
	atomic_uint pp_waits, pp_hits; /* reply_wait's spins, and those the answer ended */
	uint8_t term_payload[RDMAP_TERM_MAX_PAYLOAD];
	uint32_t term_len;
	uint8_t rtr_body[sizeof(struct rdmap_read_req)];

	/* receive side */
	enum rx_state rx_state;
	struct ddp_rx_seg rx_seg;  /* the segment being received */
	struct ddp_place rx_place; /* where its payload goes */
	const void *rx_op;	   /* its opcode's row (rx.c) */
	struct ddp_queue rxq[RDMAP_NUM_QN];
	bool rx_send_active;	    /* rx_cur taken (qp->lock to change) */
	struct rq_wqe rx_cur;	    /* receive WQE of the current Send */
	uint64_t rx_write_len;	    /* bytes of the RDMA Write in progress */
	uint64_t rx_last_write_len; /* length of the last complete Write */
	bool rx_expect_send_rtr;    /* responder: first FPDU is a zero-length Send RTR */
	struct uiw_mr_int *rx_mr;   /* cached MR of the last tagged segment */
	uint8_t rx_body[RDMAP_TERM_MAX_PAYLOAD + 64]; /* a control message's body */
	uint64_t rx_drain_end;	   /* RX_DRAIN: stop reading at this time (0: not yet set) */
	uint64_t rx_stall_end;	   /* RX_FINISH waiting for IRD room: give up then */
	uint64_t rx_rq_wait_end;   /* RX_BEGIN: a Send waiting for a receive WR gives up then */
	atomic_bool rx_rq_waiting; /* ... and a post to the RQ should run progress */

	struct uiw_term_info term;	    /* qp->lock */
	enum uiw_close_reason close_reason; /* qp->lock; the first one wins */
	struct uiw_qp_stats stats;
	struct uiw_qp_stat *stat; /* live counters' slot (rdmap/stat.h) */
};

/* Records why the stream ended, unless a reason is recorded. qp->lock held. */
void uiw_qp_set_close_reason(struct uiw_qp *qp, enum uiw_close_reason why);
/* The stream failed with ETIMEDOUT: the dead-peer bound passed
 * (UIWARP_DEAD_PEER_MS; TCP_USER_TIMEOUT, RFC 5482). Unless the connection
 * already had a reason to close, that is the reason and the QP reports
 * FATAL before DISCONNECTED (the outstanding WRs are flushed as on any
 * abortive close). qp->lock held. */
void uiw_qp_stream_timeout_locked(struct uiw_qp *qp);
/* Whether the stream error r (-errno) is the dead-peer bound passing: the
 * kernel fails the socket with ETIMEDOUT, or with the soft error it saw
 * last while it retransmitted (EHOSTUNREACH, ENETUNREACH, EHOSTDOWN,
 * ENETDOWN: a link down, a route gone). */
bool uiw_dead_peer_err(int r);
/* Queues a connection event; it is reported once rx_lock is let go
 * (progress.c). rx_lock holder. */
void uiw_qp_event_due(struct uiw_qp *qp, enum uiw_qp_event ev);
/* Reports a connection event now (no lock held); DISCONNECTED once. */
void uiw_qp_report(struct uiw_qp *qp, enum uiw_qp_event ev);

/* ----------------------------------------------------------------- tx.c */

/* Sends what the send side has (queued WRs, Read and Atomic Responses, a
 * Terminate, the SQD FIN) until the stream is full or nothing is left. A
 * poster in a burst of posts may leave a batch for the next poll (see
 * tx.c, "Doorbell batching"). tx_lock holder. Returns 0, or -errno when the stream failed (the
 * caller ends the connection). */
int uiw_tx_run(struct uiw_qp *qp, enum prog_role role);
/* How many batches the calling thread has handed to a stream (any QP),
 * wrapping: cq.c tells a poller that answers the peer (Read Responses)
 * from one that only watches. */
unsigned uiw_tx_thread_pushes(void);
/* How many receive passes of the calling thread (any QP) read stream
 * bytes, wrapping: cq.c tells a poller that takes a passive RDMA Write's
 * bytes (no completion for the whole transfer) from one that finds
 * nothing. */
unsigned uiw_rx_thread_reads(void);
/* Whether the QP's poster is streaming: DEFER_DEPTH (8) or more WRs posted
 * whose completions are not yet polled (tx.c, "Doorbell batching"). A
 * relaxed read of two counters, no lock: a hint for cq.c, not a state. */
bool uiw_tx_streaming(const struct uiw_qp *qp);
/* Send-queue WRs posted and not yet covered by a polled completion. */
unsigned uiw_tx_outstanding(const struct uiw_qp *qp);
/* The rx side completed a message of the peer's (an RDMA Write when
 * write): counts it for cq.c's reply_wait, and a Write that came within
 * UIW_PP_NS of our last push, with that one push since the peer's Write
 * before, scores the Write ping-pong pattern (a streaming poster, many
 * pushes between the peer's Writes, never does). */
void uiw_rx_msg_done(struct uiw_qp *qp, bool write);
/* A QP whose send completions go to cq has shown the Write ping-pong
 * (pp_score reached UIW_PP_MIN): cq's polls look for it from now on
 * (cq.c reply_wait; before, they take no lock for it). */
void uiw_cq_note_pingpong(struct uiw_cq *cq);
/* A peer's RDMA Write this soon after our last push (ns) is an answer;
 * this many answers in a row make a Write ping-pong (pp_score). */
#define UIW_PP_NS (100ull * 1000)
#define UIW_PP_MIN 4
/* Sends the RTR of an initiator (RFC 6581 §4) before the engine takes the
 * stream: blocking, bounded. 0 or -errno. */
int uiw_tx_send_rtr(struct uiw_qp *qp, uint8_t rtr);

/* ----------------------------------------------------------------- cm.c */

/* Binds stream s (framing not yet set up) to qp as a finished MPA
 * handshake with outcome neg would (RFC 5044 §7.1, RFC 6581): framing per
 * neg, MSNs at 1, IRD/ORD from neg, RTS. Unlike uiw_connect/uiw_accept the
 * engine does not take the stream: the caller drives it with uiw_progress
 * (tests/fuzz/fuzz_rdmap_rx.c feeds an in-memory stream so). The QP owns s
 * from then on (uiw_qp_destroy calls its destroy). 0, -EINVAL (qp already
 * connected or not in RESET/INIT/RTR/RTS), -ENOMEM. */
int uiw_qp_attach_driven(struct uiw_qp *qp, struct uiw_stream *s, const struct mpa_negotiated *neg);

/* ----------------------------------------------------------------- rx.c */

/* Runs the receive state machine: reads, validates and places segments and
 * completes messages until the stream has nothing more now (-EAGAIN),
 * budget bytes were taken (-EAGAIN too; PROG_RX is set again), or the
 * receiving is over (0; qp->rx_state is RX_DONE). rx_lock holder. */
int uiw_rx_run(struct uiw_qp *qp, size_t budget);
/* Resets the receive state for a new connection. */
void uiw_rx_reset(struct uiw_qp *qp);
/* Waits until no batch of ours is between "in the stream" and "its
 * completions pushed": then a completion the receive side pushes is never
 * ahead of the completion of what it may answer (RFC 5040 gives no order
 * across the two directions; RNICs and the verbs users give this one).
 * Bounded: the send side never blocks inside that window. */
void uiw_rx_wait_tx_window(struct uiw_qp *qp);

/* ---------------------------------------------------------- terminate.c */

/* What went wrong and where (RFC 5040 §4.8). */
struct uiw_term {
	uint8_t layer, etype, ecode;
	bool has_seg; /* a segment header is echoed */
	struct ddp_rx_seg seg;
	bool has_rreq;		    /* the Read Request body is echoed */
	struct rdmap_read_req rreq; /* wire order */
};

/* The one Terminate path (RFC 5040 §4.8, §6.3): records the error, moves
 * the QP to ERR (outstanding WRs flush), queues the Terminate message for
 * the send side, and switches the receive side to draining. The close
 * completes in progress (tx sends it, then FIN; rx reads and drops what the
 * peer still sends for a bounded time; then UIW_QP_EV_TERMINATE and
 * DISCONNECTED). After a local abort (the QP moved to ERR by the
 * application, qp->aborted) nothing is queued: receiving just ends.
 * rx_lock holder. */
void uiw_terminate(struct uiw_qp *qp, const struct uiw_term *t);
/* The Terminate path for an error the send side finds (the source of a
 * Read Response is no longer mapped, tx.c): as uiw_terminate, but the
 * receive side switches to draining on its next pass (rx_pass sees
 * term_queued). tx_lock holder. */
void uiw_terminate_tx(struct uiw_qp *qp, const struct uiw_term *t);
/* Builds a Terminate's payload; returns its length in bytes. */
size_t uiw_term_build(const struct uiw_term *t, uint8_t *out);

#endif
