/* MPA (RFC 5044 + RFC 6581): connection setup and FPDU framing.
 *
 * The only header DDP uses. Two halves:
 *  - connection setup (mpa_cm.c): request/reply/reject, private data,
 *    CRC and marker negotiation, IRD/ORD and RTR negotiation;
 *  - framing (fpdu.c): FPDUs out (gathered, CRC32c via ISA-L, many per
 *    syscall) and in (header, payload straight into its target, trailer).
 */
#ifndef UIWARP_MPA_H
#define UIWARP_MPA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mpa/llp.h"
#include "mpa/mpa_wire.h"

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
	/* RFC 5044 §5 markers, per direction (default both off: interop notes
	 * §0, siw and Chelsio do not do them). markers: honour a peer's M, i.e.
	 * insert markers in what we send; off, a Request with M is rejected and
	 * a Reply with M refused (-EPROTO). want_markers: set M in our own
	 * Request/Reply, i.e. ask the peer to insert markers towards us. */
	bool markers;
	bool want_markers;
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
int mpa_initiate(struct uiw_llp *llp, const struct mpa_config *cfg, uint16_t ird, uint16_t ord,
		 const void *pd, uint16_t pd_len, struct mpa_params *reply,
		 struct mpa_negotiated *neg, uint8_t *term_code);

/* Responder, step 1 (RFC 5044 §7.1.2): reads and validates the MPA Request.
 * Fills *req (private data without the RFC 6581 word in req->pd).
 * Errors: -ETIMEDOUT, -EPROTO (bad key/revision/length; the caller just
 * closes), -ECONNRESET, -errno. A Request with a revision above 2 is
 * answered here with a Reply rejecting it in revision 2 (our highest), so
 * the peer learns what we speak, and -EPROTO is returned; revision 0 is
 * just refused. */
int mpa_recv_request(struct uiw_llp *llp, int timeout_ms, struct mpa_params *req);

/* Responder, step 2: sends the MPA Reply accepting *req with our ird/ord and
 * private data pd[0..pd_len), choosing the RTR kind and CRC as RFC 6581 /
 * the interop notes say (WRITE when offered, else READ, else SEND; CRC if
 * either side asks). A request with markers is answered with a reject
 * instead and -EPROTO returned, unless cfg->markers. Fills *neg. Errors:
 * -EMSGSIZE, -EPROTO, -errno from the stream. */
int mpa_send_accept(struct uiw_llp *llp, const struct mpa_config *cfg, const struct mpa_params *req,
		    uint16_t ird, uint16_t ord, const void *pd, uint16_t pd_len,
		    struct mpa_negotiated *neg);

/* Responder: sends an MPA Reply with the R (reject) flag and private data
 * pd[0..pd_len), answering *req's revision. Errors: -EMSGSIZE, -errno. */
int mpa_send_reject(struct uiw_llp *llp, const struct mpa_params *req, const void *pd,
		    uint16_t pd_len);

/* ------------------------------------------------------------------ framing */

/* Per-connection framing state; embedded by DDP in its connection. */
struct mpa_conn {
	struct uiw_llp *llp;
	bool crc; /* send and check CRC32c */
	/* RFC 5044 §5 markers, from mpa_negotiated (these fill the padding
	 * after crc: the hot fields keep their offsets) */
	bool markers_tx, markers_rx;
	bool rx_crc_run; /* crc && !markers_rx: CRC kept as bytes are consumed */
	uint32_t mulpdu; /* max ULPDU bytes (DDP header + payload) per FPDU */
	/* receive ring: stream bytes read ahead of the current point */
	uint8_t *rb;
	uint32_t rb_cap, rb_off, rb_len;
	bool bulk; /* last FPDU was small: read ahead in bulk */
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

/* Sets up framing on a connection that finished its handshake. MULPDU is
 * computed from the stream's EMSS so every FPDU fits one segment
 * (RFC 5044 §4.1: markers off EMSS - (6 + EMSS mod 4); markers on, i.e.
 * neg->markers_tx, EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)), at least
 * 128. Markers follow neg->markers_tx / markers_rx. Allocates the receive
 * ring (twice as large when markers_rx, so a whole FPDU with its markers
 * fits). Returns 0 or -ENOMEM. */
int mpa_conn_init(struct mpa_conn *c, struct uiw_llp *llp, const struct mpa_negotiated *neg);
/* Frees what mpa_conn_init allocated (not the llp). */
void mpa_conn_fini(struct mpa_conn *c);

/* A batch of FPDUs to go out in one sendmsg. */
#define MPA_TX_MAX_FPDU 64
#define MPA_TX_MAX_IOV 512
/* A batch stops growing past this many bytes, so the CRC pass and the
 * kernel's copy find the payload still in cache. */
#ifndef MPA_TX_MAX_BYTES
#define MPA_TX_MAX_BYTES (256 * 1024)
#endif
/* markers a batch can hold (markers on only): one per 508 payload octets */
#define MPA_TX_MAX_MARKERS 1024
struct mpa_txbatch {
	int niov, nfpdu;
	size_t bytes; /* stream octets in the batch, markers included */
	struct iovec iov[MPA_TX_MAX_IOV];
	/* per FPDU: length prefix + DDP header copied here, and pad + CRC */
	uint8_t head[MPA_TX_MAX_FPDU][2 + 32];
	uint8_t tail[MPA_TX_MAX_FPDU][8];
	/* markers on: the stream offset of the batch's first octet, and the
	 * markers (4 bytes each, RFC 5044 §5) the iovecs point into */
	uint64_t off;
	int nmark;
	uint8_t mark[MPA_TX_MAX_MARKERS][MPA_MARKER_LEN];
};

/* Starts an empty batch. */
void mpa_tx_begin(struct mpa_txbatch *b);

/* Appends one FPDU: the ULPDU is hdr[0..hdr_len) (hdr_len <= 32, copied)
 * followed by payload iov[0..n) (referenced, not copied: it must stay valid
 * until mpa_tx_flush returns). hdr_len + payload must be <= c->mulpdu.
 * Computes length, pad and CRC32c (RFC 5044 §4). With c->markers_tx the
 * iovecs are split at every marker position of the stream and the markers
 * go in between (RFC 5044 §5), counted in the CRC. Returns 0, or -ENOSPC
 * when the batch has no room (flush and call again), -EINVAL if too long.
 * Every batch built must be flushed, in order (a batch emptied with
 * mpa_tx_begin instead never happened: the stream offset is unchanged). */
int mpa_tx_fpdu(struct mpa_conn *c, struct mpa_txbatch *b, const void *hdr, size_t hdr_len,
		const struct iovec *iov, int n);

/* Sends every FPDU in the batch (one sendmsg, retried on partial writes)
 * and empties it. Returns 0 or -errno from the stream. */
int mpa_tx_flush(struct mpa_conn *c, struct mpa_txbatch *b);

/* Receive, one FPDU at a time (RFC 5044 §4):
 *   mpa_rx_begin   reads ULPDU_Length and the first hdr_len bytes of the
 *                  ULPDU into hdr (blocking). Returns the ULPDU length
 *                  (> 0), 0 on orderly end of stream before any byte of
 *                  an FPDU, -EPROTO if the ULPDU is shorter than hdr_len,
 *                  -ENODATA if the stream ends (FIN) inside an FPDU (here
 *                  or in the calls below), -ECONNRESET if the peer reset
 *                  it, other -errno.
 *   mpa_rx_more    reads n more ULPDU bytes into buf (header tail).
 *   mpa_rx_small   for the rest of the ULPDU when it is at most
 *                  MPA_RX_SMALL_MAX bytes: reads it and the trailer into
 *                  the ring, checks the CRC, and only then copies the len
 *                  payload bytes into iov. 0, -EBADMSG (CRC: nothing was
 *                  placed), -EINVAL (len is not the rest or too big), -errno.
 *                  Ends the FPDU (no mpa_rx_end).
 *   mpa_rx_payload reads len ULPDU bytes straight into iov (the target
 *                  buffer; NULL iov discards), from the kernel with no
 *                  intermediate buffer (bytes already in the ring are
 *                  copied from it).
 *   mpa_rx_end     reads pad and CRC and checks the CRC when negotiated:
 *                  0, or -EBADMSG on a CRC mismatch (the caller sends a
 *                  Terminate LLP/MPA_TERM_CRC).
 * rx_left counts what is still unread of the ULPDU; mpa_rx_end requires it
 * to be 0 (-EPROTO otherwise).
 *
 * With markers on receive (c->markers_rx, RFC 5044 §5), mpa_rx_begin reads
 * the whole FPDU with its markers into the ring, checks every marker's
 * FPDUPTR (a bad one: -EPROTO with c->rx_term = MPA_TERM_MARKER, before
 * anything is returned), computes the CRC over the FPDU as sent (markers
 * included) and removes the markers; the other calls then work from the
 * ring (payload is copied, not placed by the kernel). The same calls, the
 * same results; a CRC mismatch is still reported by mpa_rx_small /
 * mpa_rx_end (c->rx_term = MPA_TERM_CRC). */
int mpa_rx_begin(struct mpa_conn *c, void *hdr, size_t hdr_len);
int mpa_rx_more(struct mpa_conn *c, void *buf, size_t n);
int mpa_rx_small(struct mpa_conn *c, const struct iovec *iov, int n, size_t len);
int mpa_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len);
int mpa_rx_end(struct mpa_conn *c);

#endif
