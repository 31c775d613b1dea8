/* uiwarp engine API: RDMAP (RFC 5040) verbs semantics over DDP over MPA.
 *
 * The only header the verbs shim uses. Objects: protection domain (PD),
 * memory region (MR, one STag used as lkey and rkey), completion queue (CQ),
 * queue pair (QP), and the connection setup that binds a QP to a stream.
 * Values of enum uiw_wc_status / uiw_wc_opcode / uiw_qp_state equal the
 * corresponding libibverbs values, so the shim maps them by cast.
 *
 * Threads: a connected QP has one receive thread (placement, Read
 * Responses are queued for the send side, completions) started by
 * uiw_connect / uiw_accept; nothing is started before that (fork-safe).
 * Every function here is thread-safe unless its comment says otherwise.
 */
#ifndef UIWARP_RDMAP_H
#define UIWARP_RDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* ------------------------------------------------------------------ PD, MR */

struct uiw_pd;

/* Returns a new PD, or NULL with errno ENOMEM. */
struct uiw_pd *uiw_pd_alloc(void);
/* 0, or -EBUSY while MRs or QPs still use it. */
int uiw_pd_free(struct uiw_pd *pd);

/* Access rights of an MR (values equal IBV_ACCESS_*). */
enum {
	UIW_ACCESS_LOCAL_WRITE = 1,
	UIW_ACCESS_REMOTE_WRITE = 2,
	UIW_ACCESS_REMOTE_READ = 4,
	UIW_ACCESS_REMOTE_ATOMIC = 8,
	UIW_ACCESS_MW_BIND = 16, /* windows may be bound to this MR */
};

struct uiw_mr {
	struct uiw_pd *pd;
	void *addr;	 /* local start */
	uint64_t iova;	 /* the address the peer and SGEs use for addr */
	uint64_t length; /* bytes */
	uint32_t stag;	 /* lkey == rkey; never 0 */
	unsigned access;
};

/* Registers addr[0..length) with access (UIW_ACCESS_*), addressed as iova.
 * REMOTE_WRITE without LOCAL_WRITE is -EINVAL (verbs rule), so is a length
 * of 0 (addr NULL with length 0: an MR with no memory, for memory
 * windows). The range must be mapped, readable, and writable when access
 * has LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC, else -EFAULT (as an RNIC
 * driver that cannot pin it). Returns 0 and *out, or -EINVAL, -EFAULT,
 * -ENOMEM. RFC 5040 §5.1 (STag), RFC 5041 §3. */
int uiw_mr_reg(struct uiw_pd *pd, void *addr, uint64_t length, uint64_t iova, unsigned access,
	       struct uiw_mr **out);
/* Invalidates the STag, then frees. 0, -EINVAL, -EBUSY (memory windows
 * are bound to it). */
int uiw_mr_dereg(struct uiw_mr *mr);

/* Memory windows (RFC 5040 §2, verbs MW type 1 and 2): an STag of its own
 * naming part of an MR, made valid by a Bind WR and invalid by Local
 * Invalidate, Send with Invalidate or a new Bind. */
struct uiw_mw;
/* Allocates an unbound window of type 1 or 2; *rkey is its STag (not
 * valid until bound). -EINVAL, -ENOMEM. */
int uiw_mw_alloc(struct uiw_pd *pd, int type, struct uiw_mw **out, uint32_t *rkey);
/* 0, or -EINVAL. An outstanding binding is dropped. */
int uiw_mw_dealloc(struct uiw_mw *mw);

/* -------------------------------------------------------------------- CQ */

enum uiw_wc_status {
	UIW_WC_SUCCESS = 0,
	UIW_WC_LOC_LEN_ERR = 1,
	UIW_WC_LOC_QP_OP_ERR = 2,
	UIW_WC_LOC_PROT_ERR = 4,
	UIW_WC_WR_FLUSH_ERR = 5,
	UIW_WC_LOC_ACCESS_ERR = 8,
	UIW_WC_REM_INV_REQ_ERR = 9,
	UIW_WC_REM_ACCESS_ERR = 10,
	UIW_WC_REM_OP_ERR = 11,
	UIW_WC_FATAL_ERR = 19,
	UIW_WC_GENERAL_ERR = 21,
};

enum uiw_wc_opcode {
	UIW_WC_SEND = 0,
	UIW_WC_RDMA_WRITE = 1,
	UIW_WC_RDMA_READ = 2,
	UIW_WC_COMP_SWAP = 3,
	UIW_WC_FETCH_ADD = 4,
	UIW_WC_BIND_MW = 5,
	UIW_WC_LOCAL_INV = 6,
	UIW_WC_RECV = 128,
	UIW_WC_RECV_RDMA_WITH_IMM = 129,
};

/* uiw_wc.flags (values equal IBV_WC_WITH_IMM / IBV_WC_WITH_INV). */
enum { UIW_WC_WITH_IMM = 1 << 1, UIW_WC_WITH_INV = 1 << 2 };

struct uiw_wc {
	uint64_t wr_id;
	enum uiw_wc_status status;
	enum uiw_wc_opcode opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t invalidated_stag;
	unsigned flags;	   /* UIW_WC_WITH_INV, UIW_WC_WITH_IMM */
	uint32_t imm_data; /* network byte order, as ibv_wc.imm_data */
	uint32_t vendor_err;
	void *qp_ctx; /* the QP's ctx, as given to uiw_qp_create */
	/* engine-internal: a send CQE frees this many send-queue slots of
	 * qp_int when it is polled (verbs: a WR is outstanding until its
	 * completion, or a later one that covers it, has been polled) */
	struct uiw_qp *qp_int;
	uint32_t sq_credits;
};

struct uiw_cq;
/* Called (from an engine thread, no engine lock held) when a CQE is added
 * to an armed CQ; the CQ is disarmed first (verbs req_notify semantics). */
typedef void (*uiw_cq_notify_fn)(struct uiw_cq *cq, void *ctx);

/* A CQ with room for depth CQEs. Returns 0 and *out, -EINVAL, -ENOMEM. */
int uiw_cq_create(unsigned depth, uiw_cq_notify_fn fn, void *ctx, struct uiw_cq **out);
/* 0, or -EBUSY while QPs use it. */
int uiw_cq_destroy(struct uiw_cq *cq);
/* Moves up to n CQEs to wc[], oldest first. Returns the count (>= 0). */
int uiw_cq_poll(struct uiw_cq *cq, int n, struct uiw_wc *wc);
/* Arms the CQ: the next CQE (or next solicited one) calls fn. If CQEs are
 * already queued (and not solicited_only), fn is called at once instead and
 * the CQ stays disarmed, as hardware does when armed with unpolled CQEs;
 * with only_new, only if one of them came after fn's last call (the caller
 * is about to poll the ones that call announced: an event taken, then the
 * re-arm, then the poll). Returns 0. */
int uiw_cq_arm(struct uiw_cq *cq, bool solicited_only, bool only_new);
/* If the CQ is armed (not solicited_only) and CQEs wait to be polled,
 * disarms it and calls fn: a consumer that armed before it polled a
 * bounded batch and left CQEs behind gets another notification. Returns
 * whether fn was called. */
bool uiw_cq_notify_unpolled(struct uiw_cq *cq);
/* CQEs waiting to be polled (a snapshot; makes no progress). */
uint32_t uiw_cq_count(struct uiw_cq *cq);
/* True if the CQ overflowed; then the QPs using it went to ERR. */
bool uiw_cq_overflowed(struct uiw_cq *cq);

/* -------------------------------------------------------------------- QP */

enum uiw_qp_state {
	UIW_QPS_RESET = 0,
	UIW_QPS_INIT = 1,
	UIW_QPS_RTR = 2,
	UIW_QPS_RTS = 3,
	UIW_QPS_SQD = 4, /* iWARP: closing */
	UIW_QPS_SQE = 5,
	UIW_QPS_ERR = 6,
};

struct uiw_srq;

struct uiw_qp_init_attr {
	struct uiw_pd *pd;
	struct uiw_cq *send_cq, *recv_cq;
	struct uiw_srq *srq;		   /* receives come from this shared queue (optional) */
	uint32_t max_send_wr, max_recv_wr; /* rounded up; actual written back */
	uint32_t max_send_sge, max_recv_sge;
	uint32_t max_inline; /* bytes */
	bool sq_sig_all;
	void *ctx; /* echoed in uiw_wc.qp_ctx and events */
};

/* Capacities the engine gives at most (reported by the device query). */
#define UIW_MAX_QP_WR 16384
#define UIW_MAX_SGE 16
#define UIW_MAX_INLINE 256
#define UIW_MAX_IRD 128
#define UIW_MAX_ORD 128
#define UIW_MAX_CQE 262144

struct uiw_qp;

/* Creates a QP in INIT; writes the granted capacities back into *attr.
 * Returns 0 and *out, -EINVAL (caps too large, missing PD/CQ), -ENOMEM. */
int uiw_qp_create(struct uiw_qp_init_attr *attr, struct uiw_qp **out);
/* Aborts the connection if any (no flush CQEs are generated after this
 * returns), joins the engine threads, frees. Returns 0. */
int uiw_qp_destroy(struct uiw_qp *qp);
uint32_t uiw_qp_num(const struct uiw_qp *qp);
enum uiw_qp_state uiw_qp_get_state(struct uiw_qp *qp);

/* Moves the QP to state: ERR flushes every outstanding WR with
 * UIW_WC_WR_FLUSH_ERR and aborts the stream; SQD starts a graceful close
 * (sends FIN after queued work, RFC 5040 §6); RESET from ERR recycles the QP
 * (unconnected). Other transitions are recorded (INIT/RTR/RTS before
 * connect are allowed and have no effect on the wire).
 * Returns 0 or -EINVAL for a transition the verbs do not allow. */
int uiw_qp_modify(struct uiw_qp *qp, enum uiw_qp_state state);

struct uiw_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* Values equal IBV_WR_*. Immediate data and atomics are RFC 7306: they go
 * on the wire only when the connection negotiated RFC 7306 (uiw_qp_caps),
 * otherwise posting them is -EOPNOTSUPP. */
enum uiw_wr_opcode {
	UIW_WR_RDMA_WRITE = 0,
	UIW_WR_RDMA_WRITE_WITH_IMM = 1,
	UIW_WR_SEND = 2,
	UIW_WR_SEND_WITH_IMM = 3,
	UIW_WR_RDMA_READ = 4,
	UIW_WR_ATOMIC_CMP_AND_SWP = 5,
	UIW_WR_ATOMIC_FETCH_AND_ADD = 6,
	UIW_WR_LOCAL_INV = 7,
	UIW_WR_BIND_MW = 8,
	UIW_WR_SEND_WITH_INV = 9,
};

enum {
	UIW_SEND_FENCE = 1,
	UIW_SEND_SIGNALED = 2,
	UIW_SEND_SOLICITED = 4,
	UIW_SEND_INLINE = 8,
};

struct uiw_send_wr {
	uint64_t wr_id;
	enum uiw_wr_opcode opcode;
	unsigned flags; /* UIW_SEND_* */
	const struct uiw_sge *sg_list;
	int num_sge;
	uint64_t remote_addr; /* RDMA Write / Read: the peer's TO */
	uint32_t rkey;	      /* RDMA Write / Read: the peer's STag */
	uint32_t invalidate_rkey;
	uint32_t imm_data;    /* network byte order, as ibv_send_wr.imm_data */
	uint64_t compare_add; /* atomics: compare (CmpSwap) or add (FetchAdd) */
	uint64_t swap;	      /* atomics: swap value (CmpSwap) */
	/* UIW_WR_BIND_MW: bind mw to [bind_addr, +bind_length) of bind_mr with
	 * bind_access (UIW_ACCESS_REMOTE_*); the window's STag becomes rkey
	 * (its key byte may change, as the verbs let the caller choose). A
	 * zero length unbinds. UIW_WR_LOCAL_INV uses invalidate_rkey. */
	struct uiw_mw *mw;
	struct uiw_mr *bind_mr;
	uint64_t bind_addr, bind_length;
	unsigned bind_access;
};

struct uiw_recv_wr {
	uint64_t wr_id;
	const struct uiw_sge *sg_list;
	int num_sge;
};

/* Posts n send WRs (RFC 5040 §5: Send, Send with Invalidate, RDMA Write,
 * RDMA Read). SGEs are checked against the local MRs now (lkey, bounds,
 * LOCAL_WRITE for a Read sink); inline data is copied now. The work goes
 * out on the stream in gathered batches. Returns 0, or -errno with
 * *bad = index of the first WR not posted: -ENOMEM send queue full,
 * -EINVAL bad WR (opcode, num_sge, too much inline), -ENOTCONN/-EINVAL QP
 * not in RTS (in ERR: the WR is accepted and completes with FLUSH_ERR, as
 * the verbs say). */
int uiw_qp_post_send(struct uiw_qp *qp, const struct uiw_send_wr *wr, int n, int *bad);
/* Posts n receive WRs (untagged buffers for QN 0). Returns 0 or -errno with
 * *bad as above: -ENOMEM queue full, -EINVAL too many SGEs. */
int uiw_qp_post_recv(struct uiw_qp *qp, const struct uiw_recv_wr *wr, int n, int *bad);

/* Shared receive queue: untagged Sends of every QP created with it consume
 * its receive WRs in posting order. */
/* Creates an SRQ for max_wr WRs of up to max_sge SGEs (both written back).
 * Returns 0 and *out, -EINVAL, -ENOMEM. */
int uiw_srq_create(struct uiw_pd *pd, uint32_t *max_wr, uint32_t *max_sge, struct uiw_srq **out);
/* 0, or -EBUSY while QPs use it. */
int uiw_srq_destroy(struct uiw_srq *srq);
/* Posts n receive WRs; 0 or -errno with *bad (-ENOMEM full, -EINVAL). */
int uiw_srq_post_recv(struct uiw_srq *srq, const struct uiw_recv_wr *wr, int n, int *bad);
/* Receive WRs posted and not yet consumed. */
uint32_t uiw_srq_count(struct uiw_srq *srq);
/* SRQ limit (verbs IBV_SRQ_LIMIT): with limit > 0, the first time a Send
 * takes a receive WR and leaves fewer than limit posted, fn(srq, ctx) is
 * called once (from that QP's receive thread, no engine lock held) and the
 * limit disarms; limit 0 disarms. Returns 0. */
typedef void (*uiw_srq_limit_fn)(struct uiw_srq *srq, void *ctx);
int uiw_srq_set_limit(struct uiw_srq *srq, uint32_t limit, uiw_srq_limit_fn fn, void *ctx);

/* What a connected QP may use beyond RFC 5040. */
enum {
	UIW_CAP_RFC7306 = 1, /* Immediate Data, Atomics (both ends agreed) */
};
unsigned uiw_qp_caps(struct uiw_qp *qp);

/* What the MPA handshake of a connected QP settled (RFC 5044 §7, RFC 6581). */
struct uiw_conn_mode {
	uint8_t mpa_rev;   /* 1 or 2 */
	bool crc;	   /* CRC32c in use */
	bool p2p;	   /* peer-to-peer (RTR) mode */
	char rtr[8];	   /* "write", "read", "send" or "" */
	uint16_t ird, ord; /* negotiated */
	uint32_t mulpdu;   /* bytes of DDP header + payload per FPDU we send */
	bool large_fpdu;   /* the peer takes FPDUs above the EMSS (siw's GSO bit) */
};
/* Fills *m for a connected QP; -ENOTCONN otherwise. */
int uiw_qp_conn_mode(struct uiw_qp *qp, struct uiw_conn_mode *m);
/* A QP's Write ping-pong counters (the poll that returns the send
 * completion of a QP whose peer answers each of its messages with an RDMA
 * Write waits for that answer, docs/design.md "Progress"): *waits such
 * polls, *hits those the answer ended (the rest gave up after their
 * bound). Counts since the QP was created; no errors. */
void uiw_qp_reply_waits(struct uiw_qp *qp, unsigned *waits, unsigned *hits);
/* Whether this process offers RFC 7306 on new connections
 * (UIWARP_RFC7306=1, docs/configuration.md). */
bool uiw_rfc7306_enabled(void);

/* Connection events of a QP, reported through the callback below. */
enum uiw_qp_event {
	UIW_QP_EV_ESTABLISHED,	/* (not used: connect/accept return instead) */
	UIW_QP_EV_DISCONNECTED, /* the stream closed: peer FIN, local close done */
	UIW_QP_EV_TERMINATE,	/* a Terminate was sent or received; QP in ERR */
	UIW_QP_EV_FATAL,	/* local catastrophic error; QP in ERR */
};
typedef void (*uiw_qp_event_fn)(struct uiw_qp *qp, enum uiw_qp_event ev, void *ctx);
/* The Terminate that ended a connection (RFC 5040 §4.8), valid once
 * UIW_QP_EV_TERMINATE was reported: who sent it and its control fields. */
struct uiw_term_info {
	bool valid;
	bool sent;		     /* we sent it (a protocol error of the peer) */
	uint8_t layer, etype, ecode; /* RFC 5040 §4.8 (layer 0 RDMAP, 1 DDP, 2 LLP) */
};
void uiw_qp_term_info(struct uiw_qp *qp, struct uiw_term_info *out);

/* Why a connected QP's stream ended: set once, by the first of these to
 * happen, kept until the QP is reset. Graceful: the peer's FIN came at an
 * FPDU boundary (after our own SQD close, or before it); then queued Read
 * Responses are still sent. Every other reason is abortive. In every case
 * WRs that were completed stay completed and every outstanding WR (send and
 * receive) completes with UIW_WC_WR_FLUSH_ERR, but for the Read or Atomic a
 * received Terminate names as a remote protection error
 * (UIW_WC_REM_ACCESS_ERR) and a WR whose own buffer was found unmapped
 * (UIW_WC_LOC_PROT_ERR). */
enum uiw_close_reason {
	UIW_CLOSE_NONE = 0,	  /* open, or never connected */
	UIW_CLOSE_GRACEFUL,	  /* the peer's FIN at an FPDU boundary */
	UIW_CLOSE_TERMINATE,	  /* a Terminate was sent or received (uiw_qp_term_info) */
	UIW_CLOSE_PEER_RESET,	  /* TCP RST from the peer */
	UIW_CLOSE_PEER_TRUNCATED, /* the peer's FIN inside an FPDU; we sent LLP 0x01 */
	UIW_CLOSE_LOCAL_ABORT,	  /* uiw_qp_modify(ERR) while connected, or a send WR that failed
				     locally */
	UIW_CLOSE_LLP_ERROR,	  /* another error of the TCP stream */
	UIW_CLOSE_PEER_TIMEOUT,	  /* the dead-peer bound passed (UIWARP_DEAD_PEER_MS: sent data
				     unacknowledged, or keepalive unanswered, that long); the QP
				     reports FATAL before DISCONNECTED */
};
enum uiw_close_reason uiw_qp_close_reason(struct uiw_qp *qp);

/* Sets the event callback (called from engine threads, at most once per
 * event kind; DISCONNECTED comes last). */
void uiw_qp_set_event_cb(struct uiw_qp *qp, uiw_qp_event_fn fn, void *ctx);

/* -------------------------------------------------------- connection setup */

/* Connection parameters (RFC 6581 IRD/ORD, ULP private data). */
struct uiw_conn_param {
	const void *private_data;
	uint8_t private_data_len;    /* bytes, at most UIW_MAX_PRIVATE_DATA */
	uint8_t responder_resources; /* IRD: inbound RDMA Reads we accept */
	uint8_t initiator_depth;     /* ORD: outbound RDMA Reads we issue */
	/* Per-connection socket settings (a zeroed field: the process-wide
	 * setting of docs/configuration.md): */
	bool set_tos; /* apply tos: IP_TOS (IPv4) / IPV6_TCLASS (IPv6) */
	uint8_t tos;  /* the DSCP / ECN byte (rdma_cm's RDMA_OPTION_ID_TOS) */
};
#define UIW_MAX_PRIVATE_DATA 252 /* 256 - the RFC 6581 word */

/* What the peer said in its MPA Request or Reply. */
struct uiw_conn_info {
	uint8_t private_data[UIW_MAX_PRIVATE_DATA];
	uint8_t private_data_len;
	uint8_t responder_resources,
	    initiator_depth; /* the peer's IRD/ORD as seen by us:
			      * responder_resources = min(our IRD, peer ORD) */
	struct sockaddr_storage local, peer;
};

/* Active side (RFC 5044 §7.1.1, RFC 6581): TCP-connects to dst (from src
 * if given), sends the MPA Request with param, reads the Reply, sends the
 * RTR, starts the QP's engine threads and moves it to RTS. Blocks up to
 * timeout_ms (< 0: the configured MPA timeout). A refused TCP connect is
 * retried for up to UIWARP_CONNECT_RETRY_MS (250 ms) first (a peer may
 * announce its port just before it listens; rdmap/cm.c). Fills *info
 * (the reply's private data). Errors: -ECONNREFUSED (TCP refused, or MPA reject: then
 * info->private_data holds the reject's data and *rejected is set),
 * -ETIMEDOUT, -EHOSTUNREACH/-ENETUNREACH, -EPROTO (bad reply; a Terminate
 * was sent), -EINVAL (QP not in INIT/RTR/RTS-unconnected, private data too
 * long), -errno. The QP is left unconnected (reusable) on error. */
int uiw_connect(struct uiw_qp *qp, const struct sockaddr *src, const struct sockaddr *dst,
		const struct uiw_conn_param *param, int timeout_ms, struct uiw_conn_info *info,
		bool *rejected);

struct uiw_listener;
struct uiw_conn_req;

/* Binds a TCP listener to addr (SO_REUSEADDR, port 0 picks one) with
 * backlog. Returns 0 and *out, or -EADDRINUSE, -EADDRNOTAVAIL, -errno. */
int uiw_listen(const struct sockaddr *addr, int backlog, struct uiw_listener **out);
/* uiw_listen with flags:
 * UIW_LISTEN_V6ONLY: IPV6_V6ONLY on an IPv6 listener (ignored for IPv4),
 *   so [::]:P takes IPv6 connections only and can listen beside 0.0.0.0:P
 *   (rdma_cm's RDMA_OPTION_ID_AFONLY); without it IPv4-mapped connections
 *   come too.
 * UIW_LISTEN_MAP: when addr's port P is held by another socket (the bind
 *   fails with EADDRINUSE) and uiw_listen_mappable(addr) says so, listen on
 *   a free port P' of the same IP instead and register P -> P' with the
 *   port mapper's responder, which ACCEPTs initiators' queries for P with
 *   P' (uiw_connect asks before it connects); as iwpmd maps an RNIC's
 *   listener to a host port (docs/iwpm.md). uiw_listener_addr and the local
 *   address of each request then give P, the application's port.
 * Same results as uiw_listen (-EADDRINUSE when P is held and not mapped). */
#define UIW_LISTEN_V6ONLY 1u
#define UIW_LISTEN_MAP 2u
int uiw_listen_ex(const struct sockaddr *addr, int backlog, unsigned flags,
		  struct uiw_listener **out);
/* Whether a listen on addr (IPV6_V6ONLY as v6only) whose port a socket
 * holds can be mapped (UIW_LISTEN_MAP): the port is not 0, no uiwarp
 * listener of this process holds it (two rdma_cm listeners on one port
 * still clash, EADDRINUSE), and this process's port-mapper responder runs
 * on UDP 3935 (starts it if free; not when iwpmd or another process owns
 * the port, or UIWARP_IWPM=0 / UIWARP_IWPM_RESPONDER=0: nobody could learn
 * the mapping). */
bool uiw_listen_mappable(const struct sockaddr *addr, bool v6only);
/* The application's bound address (port filled in; the port it asked for
 * when the listener is mapped). */
void uiw_listener_addr(struct uiw_listener *l, struct sockaddr_storage *out);
/* Waits for the next connection and its MPA Request (RFC 5044 §7.1.2),
 * at most timeout_ms (< 0: forever). A peer that never sends a valid
 * request is dropped after the MPA timeout without returning. Returns 0
 * and *out (fill *info with the request's private data, IRD/ORD, address),
 * -ETIMEDOUT, -ECANCELED after uiw_listener_close, -errno. */
int uiw_listener_get_request(struct uiw_listener *l, int timeout_ms, struct uiw_conn_req **out,
			     struct uiw_conn_info *info);
/* Stops the listener: wakes uiw_listener_get_request with -ECANCELED and
 * frees it when no thread is inside. Returns 0. */
int uiw_listener_close(struct uiw_listener *l);

/* Accepts req on qp (in INIT/RTR): uiw_accept_start, then (peer-to-peer)
 * uiw_accept_wait with timeout_ms. req is consumed whatever the result.
 * Errors: -ETIMEDOUT (no RTR), -EPROTO, -EINVAL, -errno. */
int uiw_accept(struct uiw_conn_req *req, struct uiw_qp *qp, const struct uiw_conn_param *param,
	       int timeout_ms);
/* The part of uiw_accept that does not wait for the peer: sends the MPA
 * Reply with param (RFC 5044 §7.1.2, RFC 6581 IRD/ORD), moves qp to RTS and
 * hands its stream to the engine, as the kernel's siw_accept does before
 * rdma_accept returns. A WR posted from then on is taken; in peer-to-peer
 * mode it goes out after the initiator's first FPDU (its RTR, RFC 6581 §4:
 * the responder sends nothing before). *p2p (may be NULL) says whether the
 * connection is peer-to-peer, i.e. whether uiw_accept_wait follows. req is
 * consumed whatever the result. Errors: -EINVAL (QP not connectable,
 * private data over UIW_MAX_PRIVATE_DATA), -errno of the Reply's write
 * (-EPIPE, -ECONNRESET, -ETIMEDOUT), -ENOMEM. */
int uiw_accept_start(struct uiw_conn_req *req, struct uiw_qp *qp,
		     const struct uiw_conn_param *param, bool *p2p);
/* After uiw_accept_start in peer-to-peer mode: waits up to timeout_ms (< 0:
 * the configured MPA timeout) for the initiator's RTR (its first FPDU).
 * 0 once it arrived (also if the peer closed right after), -ETIMEDOUT if
 * not: the QP is then moved to ERR, flushing what was posted. */
int uiw_accept_wait(struct uiw_qp *qp, int timeout_ms);
/* Rejects req with an MPA Reply carrying R and private data; consumes req. */
int uiw_reject(struct uiw_conn_req *req, const void *private_data, uint8_t len);

/* ------------------------------------------------------------- statistics */

struct uiw_qp_stats {
	uint64_t tx_fpdus, tx_bytes, tx_syscalls;
	uint64_t rx_fpdus, rx_bytes, rx_syscalls;
	uint64_t terminates_sent, terminates_recv;
	uint64_t rq_waits; /* Sends that found no receive WR and waited (UIWARP_RQ_WAIT_MS) */
};
void uiw_qp_get_stats(struct uiw_qp *qp, struct uiw_qp_stats *out);

#endif
