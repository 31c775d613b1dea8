/* MPA (RFC 5044 + RFC 6581): connection setup and FPDU framing on a byte
 * stream (stream/stream.h).
 *
 * The only header DDP uses. Two halves:
 *  - connection setup (mpa_cm.c): request/reply/reject, private data,
 *    CRC, marker and large-FPDU negotiation, IRD/ORD and RTR negotiation;
 *    blocking, with a deadline (it runs before the engine owns the stream);
 *  - framing (fpdu_tx.c, fpdu_rx.c): FPDUs out (gathered, CRC32c via ISA-L,
 *    many per syscall) and in (header, payload straight into its target,
 *    trailer). Non-blocking and resumable: a call that needs bytes the
 *    stream does not have yet returns -EAGAIN and the next call after
 *    readiness continues where it stopped.
 */
#ifndef UIWARP_MPA_H
#define UIWARP_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mpa/mpa_wire.h"
#include "stream/stream.h"

/* ---------------------------------------------------------------- CRC32c */

/* CRC32c (Castagnoli) as MPA uses it: uiw_crc32c(0, p, n) is the finished
 * CRC of p[0..n) (initial ~0, final XOR ~0). Chain by passing the previous
 * result as crc. The wire carries it least-significant byte first, so
 * crc32c("123456789") = 0xE3069283 goes out as 83 92 06 e3.
 * Backed by ISA-L crc32_iscsi. Source: RFC 5044 §4.4, RFC 3720 B.4. */
uint32_t uiw_crc32c(uint32_t crc, const void *p, size_t n);

/* --------------------------------------------------------- connection setup */

/* What one side asks for (request) or answers (reply). */
struct mpa_params {
	uint8_t rev;	   /* MPA_REV_1 or MPA_REV_2 */
	bool crc;	   /* C flag */
	bool markers;	   /* M flag: the sender of this frame wants to receive markers */
	bool p2p;	   /* RFC 6581 peer-to-peer (A) */
	uint8_t rtr;	   /* MPA_RTR_* bit set: offered (request) / chosen (reply) */
	uint16_t ird, ord; /* RFC 6581 IRD / ORD (14 bits) */
	bool enhanced;	   /* E flag and the IRD/ORD word present (rev 2 only) */
	bool rfc7306;	   /* uiwarp's RFC 7306 bit (reserved flag 0x01), see mpa_wire.h */
	bool large_fpdu;   /* siw's GSO bit (reserved flag 0x08): takes FPDUs above the EMSS */
	uint16_t pd_len;   /* ULP private data length, not counting the RFC 6581 word */
	uint8_t pd[MPA_MAX_PD_RFC];
};

/* The outcome of a completed handshake, the same on both ends. */
struct mpa_negotiated {
	uint8_t rev;
	bool crc; /* CRC32c used in both directions */
	bool p2p;
	uint8_t rtr;	   /* the single RTR kind to send/expect (MPA_RTR_*), 0 if none */
	uint16_t ird, ord; /* our IRD and ORD after relaxed negotiation (clamped) */
	bool initiator;
	bool rfc7306;	 /* both ends offered RFC 7306 (Immediate Data, Atomics) */
	bool markers_tx; /* we insert markers in what we send (the peer's M) */
	bool markers_rx; /* the peer inserts markers; we strip them (our M) */
	bool large_tx;	 /* the peer announced it takes FPDUs above the EMSS
			  * (MPA_FLAG_LARGE_FPDU): ours may be up to 64 KiB */
};

/* Local policy: what we offer as initiator and accept as responder. */
struct mpa_config {
	uint8_t rev;	   /* revision to send as initiator (default 2) */
	bool crc;	   /* ask for CRC (default on) */
	bool crc_required; /* refuse a peer that will not do CRC */
	bool p2p;	   /* ask for peer-to-peer as initiator (default on) */
	uint8_t rtr_offer; /* RTR kinds offered as initiator (default WRITE|READ) */
	int timeout_ms;	   /* wait for the peer's request/reply (default 10000) */
	bool rfc7306;	   /* offer RFC 7306 (default off: UIWARP_RFC7306=1) */
	/* RFC 5044 §5 markers, per direction (default: honour a peer's M, never
	 * ask: siw and Chelsio do not do them, interop notes §0). markers: honour a peer's M, i.e.
	 * insert markers in what we send; off, a Request with M is rejected and
	 * a Reply with M refused (-EPROTO). want_markers: set M in our own
	 * Request/Reply, i.e. ask the peer to insert markers towards us. */
	bool markers;
	bool want_markers;
	/* announce MPA_FLAG_LARGE_FPDU (siw's try_gso bit) in our Request or
	 * Reply, and send large FPDUs to a peer that announced it (default
	 * on: UIWARP_MPA_LARGE_FPDU=0 turns it off) */
	bool large_fpdu;
};
void mpa_config_default(struct mpa_config *cfg);

/* Initiator (RFC 5044 §7.1.1, RFC 6581 §5): sends the MPA Request built from
 * cfg, ird, ord and private data pd[0..pd_len) (pd_len <= MPA_MAX_PD - 4),
 * then reads the Reply. On success fills *neg and *reply (the peer's private
 * data without the RFC 6581 word is in reply->pd) and returns 0.
 * Errors: -ECONNREFUSED the peer rejected (reply filled, with its private
 * data); -ETIMEDOUT no reply in cfg->timeout_ms; -EPROTO a malformed reply
 * or one we cannot accept (bad key, revision, markers, missing RTR);
 * -EMSGSIZE pd too long; -ECONNRESET the stream ended; other -errno from the
 * stream. On -EPROTO due to RFC 6581 the caller sends a Terminate with the
 * code in *term_code (MPA_TERM_*), when term_code is not NULL. */
int mpa_initiate(struct uiw_stream *s, const struct mpa_config *cfg, uint16_t ird, uint16_t ord,
		 const void *pd, uint16_t pd_len, struct mpa_params *reply,
		 struct mpa_negotiated *neg, uint8_t *term_code);

/* Responder, step 1 (RFC 5044 §7.1.2): reads and validates the MPA Request.
 * Fills *req (private data without the RFC 6581 word in req->pd).
 * Errors: -ETIMEDOUT, -EPROTO (bad key/revision/length; the caller just
 * closes), -ECONNRESET, -errno. A Request with a revision above 2 is
 * answered here with a Reply rejecting it in revision 2 (our highest), so
 * the peer learns what we speak, and -EPROTO is returned; revision 0 is
 * just refused. */
int mpa_recv_request(struct uiw_stream *s, int timeout_ms, struct mpa_params *req);

/* Responder, step 2: sends the MPA Reply accepting *req with our ird/ord and
 * private data pd[0..pd_len), choosing the RTR kind and CRC as RFC 6581 /
 * the interop notes say (WRITE when offered, else READ, else SEND; CRC if
 * either side asks). A request with markers is answered with a reject
 * instead and -EPROTO returned, unless cfg->markers. Fills *neg. Errors:
 * -EMSGSIZE, -EPROTO, -errno from the stream. */
int mpa_send_accept(struct uiw_stream *s, const struct mpa_config *cfg,
		    const struct mpa_params *req, uint16_t ird, uint16_t ord, const void *pd,
		    uint16_t pd_len, struct mpa_negotiated *neg);

/* Responder: sends an MPA Reply with the R (reject) flag and private data
 * pd[0..pd_len), answering *req's revision. Errors: -EMSGSIZE, -errno. */
int mpa_send_reject(struct uiw_stream *s, const struct mpa_params *req, const void *pd,
		    uint16_t pd_len);

/* ------------------------------------------------------------------ framing */

/* A batch of FPDUs that goes out in as few sendmsg calls as the stream
 * allows: built by mpa_tx_fpdu, pushed by mpa_tx_push (resumable). */
#define MPA_TX_MAX_FPDU 64
#define MPA_TX_MAX_IOV 512
/* A batch stops growing past this many bytes: a 1 MiB message in large
 * FPDUs (17 of them, 1 MiB + 340 bytes on the wire) is one sendmsg, which
 * halves the kernel's copy cost per byte against 256 KiB batches
 * (docs/performance.md, "Send batches"). RDMAP lets only a message that
 * starts a batch take it past 256 KiB (rdmap/tx.c, TX_JOIN_BYTES); batches
 * of MSS-sized FPDUs stop at MPA_TX_MAX_FPDU first. */
#ifndef MPA_TX_MAX_BYTES
#define MPA_TX_MAX_BYTES (1088 * 1024)
#endif
/* The most bytes a streaming sender keeps back from the end of a batch
 * (mpa_tx_push_held): the part of the stream past its last full TCP
 * segment. */
#define MPA_TX_CARRY_MAX 4096
/* markers a batch can hold (markers on only): one per 508 payload octets */
#define MPA_TX_MAX_MARKERS 1024
/* Payloads up to this many bytes are copied into the batch next to their
 * header: one iovec instead of several for a small message, and the bytes
 * the CRC covers are the bytes that go out even if the application touches
 * its buffer before the batch is pushed (an RNIC's DMA reads a buffer once
 * and computes the CRC over what it read; perftest rewrites its 4-byte
 * credit buffer while the Write of it is in flight). */
#define MPA_TX_COPY_MAX 128
struct mpa_txbatch {
	int niov, nfpdu;
	size_t bytes; /* stream octets in the batch, markers included */
	/* push progress: iov[done_iov] is sent up to done_off bytes */
	int done_iov;
	size_t done_off, sent;
	struct iovec iov[MPA_TX_MAX_IOV];
	/* per FPDU: length prefix + DDP header (+ a small payload) copied
	 * here, and pad + CRC */
	uint8_t head[MPA_TX_MAX_FPDU][2 + 32 + MPA_TX_COPY_MAX];
	uint8_t tail[MPA_TX_MAX_FPDU][8];
	/* markers on: the stream offset of the batch's first octet, and the
	 * markers (4 bytes each, RFC 5044 §5) the iovecs point into */
	uint64_t off;
	int nmark;
	uint8_t mark[MPA_TX_MAX_MARKERS][MPA_MARKER_LEN];
	/* stream bytes of earlier batches kept back (mpa_tx_push_held): they
	 * go out before this batch's; not cleared when a batch is */
	uint32_t carry_len;
	uint8_t carry[MPA_TX_CARRY_MAX];
};

/* Per-connection framing state; embedded by DDP in its connection. Only
 * the thread that drives the connection touches it. */
struct mpa_conn {
	struct uiw_stream *s;
	bool crc; /* send and check CRC32c */
	/* RFC 5044 §5 markers, from mpa_negotiated */
	bool markers_tx, markers_rx;
	bool rx_crc_run; /* crc && !markers_rx: CRC kept as bytes are consumed */
	uint32_t mulpdu; /* max ULPDU bytes (DDP header + payload) per FPDU we send */
	/* bytes: the stream cuts what it sends into segments of this many
	 * (TCP's MSS when the connection began: the stream's seg_size) and
	 * FPDUs are large (neg->large_tx); 0 otherwise (TLS records, markers,
	 * FPDUs of one segment each) */
	uint32_t tx_seg;
	struct mpa_txbatch *tx;
	/* receive ring: stream bytes read ahead of the current point */
	uint8_t *rb;
	uint32_t rb_cap, rb_off, rb_len;
	bool bulk;	/* the last two FPDUs were small: read ahead in bulk */
	bool rx_small;	/* the last FPDU was small */
	bool rx_eof;	/* the stream ended (0 from recvv) */
	bool rx_dry;	/* the last recvv came back short: the stream is empty for now */
	bool rx_hup;	/* the stream's end or error was signalled: a short read
			 * may leave it to be read (no rx_dry) */
	bool rx_demark; /* markers_rx: the current FPDU is whole and demarked in the ring */
	/* receive side: the FPDU being read */
	uint32_t rx_crc; /* running CRC32c over what was received */
	uint16_t rx_ulpdu_len;
	uint32_t rx_left; /* ULPDU bytes of this FPDU not yet consumed */
	/* counters */
	uint64_t tx_fpdus, tx_bytes, tx_syscalls, rx_fpdus, rx_bytes, rx_syscalls;
	/* markers: tx_off is our stream offset (octets, markers included) of
	 * the first octet of the next batch; rx_off the peer's stream offset
	 * of the next FPDU to be parsed (markers_rx only) */
	uint64_t tx_off, rx_off;
	/* after a receive call failed: MPA_TERM_MARKER (-EPROTO, a bad
	 * marker) or MPA_TERM_CRC (-EBADMSG), for the caller's Terminate
	 * (RFC 5040 §4.8, layer LLP); 0 for other errors */
	uint8_t rx_term;
};

/* Payloads up to this many bytes are received through the ring in bulk
 * (many FPDUs per recv, CRC checked before a byte is placed); larger ones
 * go from the kernel straight into their target buffer. A syscall costs
 * more than copying a payload this small (docs/design.md). */
#define MPA_RX_SMALL_MAX (16 * 1024)
#define MPA_RX_RING (65536)
/* Largest ULPDU uiwarp sends to a peer that announced MPA_FLAG_LARGE_FPDU:
 * the 16-bit ULPDU_Length rounded down to a multiple of 4. */
#define MPA_LARGE_MULPDU 65532

/* Sets up framing on stream s for a connection that finished its
 * handshake. MULPDU: MPA_LARGE_MULPDU when neg->large_tx (and no markers);
 * otherwise from the stream's EMSS so every FPDU fits one segment
 * (RFC 5044 §4.1: markers off EMSS - (6 + EMSS mod 4); markers on, i.e.
 * neg->markers_tx, EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)), at least
 * 128. Markers follow neg->markers_tx / markers_rx. Allocates the receive
 * ring (twice as large when markers_rx, so a whole FPDU with its markers
 * fits) and the send batch. Returns 0 or -ENOMEM. */
int mpa_conn_init(struct mpa_conn *c, struct uiw_stream *s, const struct mpa_negotiated *neg);
/* Frees what mpa_conn_init allocated (not the stream). */
void mpa_conn_fini(struct mpa_conn *c);

/* Appends one FPDU to c->tx: the ULPDU is hdr[0..hdr_len) (hdr_len <= 32,
 * copied) followed by payload iov[0..n) (referenced, not copied: it must
 * stay valid until mpa_tx_push has sent it). hdr_len + payload must be
 * <= c->mulpdu. Computes length, pad and CRC32c (RFC 5044 §4). With
 * c->markers_tx the iovecs are split at every marker position of the
 * stream and the markers go in between (RFC 5044 §5), counted in the CRC.
 * Returns 0, or -ENOSPC when the batch has no room or is being pushed
 * (push it first), -EINVAL if too long, -EFAULT / -EACCES when a page of
 * the payload is not mapped / not readable (registered memory the
 * application unmapped: util/guard.h; found while copying it, computing
 * its CRC or, with neither, probing a byte of each page; the batch is as
 * before the call). */
int mpa_tx_fpdu(struct mpa_conn *c, const void *hdr, size_t hdr_len, const struct iovec *iov,
		int n);

/* Hands the unsent part of c->tx, after the bytes earlier pushes kept
 * back, to the stream without blocking. Returns 1 when the batch went out
 * whole (it is empty again), 0 when the stream took only part (wait for
 * POLLOUT and push again), or -errno from the stream. An empty batch
 * returns 1 (kept-back bytes are sent too). */
int mpa_tx_push(struct mpa_conn *c);

/* mpa_tx_push for a sender with more to send within microseconds (a
 * streaming poster): when what is to go is at least one segment of
 * c->tx_seg bytes, only whole segments go now and the rest, when it is
 * at most MPA_TX_CARRY_MAX bytes, is copied into the batch's carry and
 * goes in front of the next push's bytes. A segment cut short at the end
 * of every send costs a packet on both ends and, flagged as pushed, an
 * ACK from the receiver for each (docs/performance.md, "Whole segments").
 * The batch then counts as gone (its WRs may complete: their bytes are
 * copied). The caller must see that the carry goes out soon: a later
 * mpa_tx_push sends it. Returns as mpa_tx_push; -EFAULT / -EACCES from a
 * payload page that is gone leave the bytes in the batch (the next push
 * sends them, and the stream says what is wrong). */
int mpa_tx_push_held(struct mpa_conn *c);

/* Empties c->tx without sending it (the stream broke). */
void mpa_tx_drop(struct mpa_conn *c);

/* True when c->tx holds FPDUs not yet handed to the stream in full, or
 * bytes kept back from earlier batches (mpa_tx_push_held). */
static inline bool mpa_tx_busy(const struct mpa_conn *c)
{
	return c->tx->nfpdu > 0 || c->tx->carry_len > 0;
}
/* True when c->tx holds no FPDU (kept-back bytes aside). */
static inline bool mpa_tx_empty(const struct mpa_conn *c)
{
	return c->tx->nfpdu == 0;
}
/* True when c->tx has started going out (no FPDU may be added). */
static inline bool mpa_tx_pushing(const struct mpa_conn *c)
{
	return c->tx->sent > 0;
}

/* Sends the batch in full, waiting for room up to timeout_ms (< 0: no
 * limit): connection setup (the RTR) and Terminates outside the engine.
 * 0, -ETIMEDOUT or -errno. */
int mpa_tx_push_wait(struct mpa_conn *c, int timeout_ms);

/* Receive, one FPDU at a time (RFC 5044 §4). Every call is non-blocking:
 * -EAGAIN means "not enough bytes yet, nothing consumed by this call that
 * a repeat would miss; call again when the stream is readable". Other
 * results of every call: -ENODATA if the stream ended (FIN) inside an FPDU,
 * -ECONNRESET if the peer reset it, other -errno.
 *   mpa_rx_peek    makes the next FPDU's ULPDU_Length and its first n ULPDU
 *                  bytes (all of it when the ULPDU is shorter) readable at
 *                  *p without consuming them. Returns the ULPDU length
 *                  (>= 0), or 0 with *p NULL on an orderly end of stream
 *                  between FPDUs. With markers (c->markers_rx) it reads the
 *                  whole FPDU and checks its markers first: a bad FPDUPTR
 *                  is -EPROTO with c->rx_term = MPA_TERM_MARKER.
 *   mpa_rx_begin   consumes the first hdr_len ULPDU bytes (into hdr) after
 *                  mpa_rx_peek(c, >= hdr_len) succeeded. Returns the ULPDU
 *                  length, or -EPROTO if it is shorter than hdr_len.
 *   mpa_rx_small   for the rest of the ULPDU when it is at most
 *                  MPA_RX_SMALL_MAX bytes: once it and the trailer are in
 *                  the ring, checks the CRC, and only then copies the len
 *                  payload bytes into iov. 0, -EBADMSG (CRC: nothing was
 *                  placed), -EINVAL (len is not the rest or too big),
 *                  -EFAULT / -EACCES (a page of iov is not mapped / not
 *                  writable: util/guard.h; the FPDU is consumed, part of
 *                  it may have landed). Ends the FPDU (no mpa_rx_end).
 *   mpa_rx_payload places up to len ULPDU bytes (len <= what is left) into
 *                  iov (the target buffer; NULL iov discards): what the ring
 *                  holds is copied, the rest comes from the kernel straight
 *                  into the target (with the trailer and the next header
 *                  read ahead into the ring when len covers the rest).
 *                  Returns the bytes placed (> 0; the caller advances its
 *                  target and calls again for the rest), -EAGAIN, or
 *                  -EFAULT / -EACCES when the target is not mapped / not
 *                  writable (the copy from the ring faulted, or the
 *                  kernel's recvmsg said EFAULT; the connection cannot go
 *                  on: the caller terminates and drains).
 *   mpa_rx_end     reads pad and CRC and checks the CRC when negotiated:
 *                  0, or -EBADMSG on a CRC mismatch (the caller sends a
 *                  Terminate LLP/MPA_TERM_CRC). Requires rx_left == 0
 *                  (-EPROTO otherwise).
 * CRC32c is computed over placed payload right after each piece lands
 * (still in cache); a large FPDU is therefore checked after placement (as
 * RNICs with cut-through placement do): on a mismatch the message never
 * completes, and bytes can only have landed inside the validated target.
 * With markers on receive the FPDU is served from the ring (copied). */
int mpa_rx_peek(struct mpa_conn *c, size_t n, const uint8_t **p);
int mpa_rx_begin(struct mpa_conn *c, void *hdr, size_t hdr_len);
int mpa_rx_small(struct mpa_conn *c, const struct iovec *iov, int n, size_t len);
ssize_t mpa_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len);
int mpa_rx_end(struct mpa_conn *c);

/* Reads and drops whatever the stream has (after a Terminate: RFC 5040
 * §6.3, the peer's last bytes are read so closing does not reset the
 * stream before it read ours). Returns 0 at the end of the stream, -EAGAIN
 * when nothing more is there now, or -errno. */
int mpa_rx_drain(struct mpa_conn *c);

#endif
