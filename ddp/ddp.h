/* DDP (RFC 5041): segmentation of ULP messages into DDP segments carried one
 * per FPDU, and the receive side's reassembly and validation: header
 * parsing, the version, the untagged queues' MSN and MO rules, the tagged
 * model's STag, base and bounds rules (through the ULP's STag table), and
 * placement of each segment's payload into its target. The only header
 * RDMAP uses to reach the wire; it wraps the MPA framing below it.
 *
 * Like MPA's framing, everything here is non-blocking: -EAGAIN means "call
 * again when the stream is ready", with nothing lost.
 */
#ifndef UIWARP_DDP_H
#define UIWARP_DDP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ddp/ddp_wire.h"
#include "mpa/mpa.h"

/* ------------------------------------------------------------------- send */

/* One outgoing ULP message (RFC 5041 §5.1, §5.2). */
struct ddp_msg {
	bool tagged;
	uint8_t ulp_ctrl;	 /* RDMAP control byte */
	uint32_t stag;		 /* tagged: sink STag */
	uint64_t to;		 /* tagged: sink tagged offset of the first byte */
	uint32_t ulp_rsvd;	 /* untagged: RDMAP's 32 bits (Invalidate STag) */
	uint32_t qn, msn;	 /* untagged: queue number, message sequence number */
	const struct iovec *iov; /* payload pieces, total len bytes */
	int niov;
	uint64_t len;
};

/* How far a message has been segmented; all zero before the first. */
struct ddp_txpos {
	uint64_t off; /* message offset of the next segment */
	int vi;	      /* payload piece of that offset */
	size_t voff;  /* offset inside it */
	bool done;    /* every segment (for a zero-length message: the one) is out */
};

/* Appends the segments of m from *pos on to the connection's batch (each
 * at most MULPDU - header payload bytes, L on the last one only; a
 * zero-length message is one segment) until the batch is full or the
 * message is done, advancing *pos. Returns 1 when the last segment is in
 * the batch, 0 when the batch filled first (push it, then call again with
 * the same *pos), -EINVAL (a segment would need more than 16 pieces),
 * -EFAULT / -EACCES (mpa_tx_fpdu: a page of the payload is gone or not
 * readable; *pos stays at that segment, the ones before it are in the
 * batch). RFC 5041 §5.1 (tagged), §5.2 (untagged), §4 (headers). */
int ddp_tx_message(struct mpa_conn *c, const struct ddp_msg *m, struct ddp_txpos *pos);

/* ---------------------------------------------------------------- receive */

/* A received DDP segment's header (RFC 5041 §4). */
struct ddp_rx_seg {
	bool tagged, last;
	uint8_t ddp_ctrl, ulp_ctrl;
	uint32_t stag;
	uint64_t to;
	uint32_t ulp_rsvd, qn, msn, mo;
	uint16_t seg_len;		   /* DDP segment length (the ULPDU length) */
	uint32_t payload_len;		   /* bytes after the header */
	uint8_t raw[DDP_UNTAGGED_HDR_LEN]; /* the header as received */
	uint8_t raw_len;
};

/* A receive-side protocol error: which layer found it and its RFC 5040 §4.8
 * Terminate type and code (layer 0 RDMAP, 1 DDP, 2 LLP). */
struct ddp_err {
	uint8_t layer, etype, ecode;
};
#define DDP_ERR_LAYER_RDMAP 0
#define DDP_ERR_LAYER_DDP 1
#define DDP_ERR_LAYER_LLP 2

/* Reads the next segment's header (the ULPDU's first 14 or 18 bytes, by its
 * T bit). Returns 1 with *s filled, 0 on an orderly end of stream between
 * FPDUs, -EAGAIN, -EPROTO for a segment too short for its header kind
 * (c->rx_term 0: the caller terminates with DDP untagged/INVALID_MO; or
 * c->rx_term MPA_TERM_MARKER: a bad marker), -ENODATA/-ECONNRESET/-errno.
 * RFC 5041 §4. */
int ddp_rx_header(struct mpa_conn *c, struct ddp_rx_seg *s);

/* RFC 5041 §4.1: 0 if the version is 1, else the Terminate error code for
 * the segment's kind (DDP_TAGGED_BAD_VERSION / DDP_UNTAGGED_BAD_VERSION). */
static inline int ddp_check_version(const struct ddp_rx_seg *s)
{
	if ((s->ddp_ctrl & DDP_VERSION_MASK) == DDP_VERSION)
		return 0;
	return s->tagged ? DDP_TAGGED_BAD_VERSION : DDP_UNTAGGED_BAD_VERSION;
}

/* The receive state of one untagged queue (RFC 5041 §5.2, §7.3): the MSN of
 * the message being received (or expected next) and its bytes so far. */
struct ddp_queue {
	uint32_t msn; /* starts at 1 */
	uint64_t mo;  /* bytes of message msn received */
};

/* RFC 5041 §7.3: 0 when s (untagged) carries the expected MSN of q, else
 * DDP_UNTAGGED_MSN_RANGE. */
static inline int ddp_check_msn(const struct ddp_queue *q, const struct ddp_rx_seg *s)
{
	return s->msn == q->msn ? 0 : DDP_UNTAGGED_MSN_RANGE;
}

/* RFC 5041 §7.3: 0 when s continues q's message at the right offset (MO =
 * bytes so far) and fits a buffer of buf_len bytes, else
 * DDP_UNTAGGED_INVALID_MO or DDP_UNTAGGED_TOO_LONG. */
static inline int ddp_check_mo(const struct ddp_queue *q, const struct ddp_rx_seg *s,
			       uint64_t buf_len)
{
	if (s->mo != q->mo)
		return DDP_UNTAGGED_INVALID_MO;
	if (q->mo + s->payload_len > buf_len)
		return DDP_UNTAGGED_TOO_LONG;
	return 0;
}

/* RFC 5041 §7.3 for a message that must be one segment of exactly len
 * bytes (an RDMAP control message: Read Request, Atomic Request/Response,
 * Immediate Data): 0, or DDP_UNTAGGED_INVALID_MO. */
static inline int ddp_check_single(const struct ddp_rx_seg *s, uint32_t len)
{
	return (s->payload_len != len || s->mo != 0 || !s->last) ? DDP_UNTAGGED_INVALID_MO : 0;
}

/* Outcome of a tagged sink lookup (the ULP's STag table, RFC 5041 §7.2 and
 * RFC 5040 §7.3): where the payload goes, or why it may not. */
enum ddp_stag_result {
	DDP_STAG_OK = 0,
	DDP_STAG_INVALID,   /* unknown or invalidated STag */
	DDP_STAG_NOT_ASSOC, /* STag of another protection domain (stream) */
	DDP_STAG_ACCESS,    /* no right to this kind of access */
	DDP_STAG_TO_WRAP,   /* TO + length wraps 2^64 */
	DDP_STAG_BOUNDS,    /* outside the STag's base and bounds */
};

/* The Terminate for a tagged segment whose sink lookup failed (RFC 5041
 * §7.2: DDP tagged errors; an access violation is RDMAP's, RFC 5040
 * §7.3). */
struct ddp_err ddp_tagged_err(enum ddp_stag_result r);

/* Where one segment's payload goes, and how far it got. */
#define DDP_PLACE_MAXV 17
struct ddp_place {
	struct iovec iov[DDP_PLACE_MAXV]; /* the rest of the target */
	int niov;
	uint32_t len;  /* payload bytes of the segment */
	uint32_t done; /* placed so far */
	uint32_t room; /* bytes the target takes; payload beyond it is dropped */
};

/* Sets p up to place a segment of len payload bytes into iov[0..n)
 * (n <= DDP_PLACE_MAXV; bytes beyond what the pieces hold are read and
 * dropped, CRC still checked: a Terminate's payload beyond what the ULP
 * keeps). */
void ddp_place_init(struct ddp_place *p, const struct iovec *iov, int n, uint32_t len);

/* Places the rest of the current segment's payload and reads its trailer.
 * Payloads up to MPA_RX_SMALL_MAX bytes have their CRC checked before a
 * byte lands (mpa_rx_small); larger ones are placed as they arrive, straight
 * from the kernel, and checked at the end. Returns 0 (placed, CRC good),
 * -EAGAIN (call again; p keeps the progress), -EBADMSG (CRC), or the
 * stream's -errno (-ENODATA: the stream ended inside the FPDU), -EFAULT /
 * -EACCES (a page of the target is not mapped / not writable: the
 * application unmapped registered memory; util/guard.h). */
int ddp_place_run(struct mpa_conn *c, struct ddp_place *p);

#endif
