/* DDP (RFC 5041): segmentation of ULP messages into DDP segments carried one
 * per FPDU, and receive-side header parsing. The only header RDMAP uses to
 * reach the wire; it wraps the MPA framing below it.
 */
#ifndef UIWARP_DDP_H
#define UIWARP_DDP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ddp/ddp_wire.h"
#include "mpa/mpa.h"

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

/* Splits m into segments of at most (MULPDU - header) payload bytes, each
 * with the L flag on the last one only, and appends them to the batch,
 * flushing it through MPA whenever it fills (so a large message goes out in
 * several syscalls of up to MPA_TX_MAX_FPDU FPDUs each). A zero-length
 * message is one segment. The caller flushes at the end.
 * Returns 0, -EINVAL (too many pieces), or -errno from the stream.
 * RFC 5041 §5.1 (tagged), §5.2 (untagged), §4 (headers). */
int ddp_send_message(struct mpa_conn *c, struct mpa_txbatch *b, const struct ddp_msg *m);

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

/* Reads the next segment's header. Returns 1 with *s filled, 0 on an orderly
 * end of stream between FPDUs, -EPROTO for a segment too short for its header
 * kind (the caller terminates with DDP untagged/tagged errors), -EBADMSG never
 * (the CRC is checked by ddp_rx_end), -ECONNRESET/-errno. The DDP version is
 * not checked here: see ddp_check_version. */
int ddp_rx_header(struct mpa_conn *c, struct ddp_rx_seg *s);

/* RFC 5041 §4.1: 0 if the version is 1, else the Terminate error code for
 * the segment's kind (DDP_TAGGED_BAD_VERSION / DDP_UNTAGGED_BAD_VERSION). */
static inline int ddp_check_version(const struct ddp_rx_seg *s)
{
	if ((s->ddp_ctrl & DDP_VERSION_MASK) == DDP_VERSION)
		return 0;
	return s->tagged ? DDP_TAGGED_BAD_VERSION : DDP_UNTAGGED_BAD_VERSION;
}

/* Places len payload bytes straight into iov (NULL discards). -errno. */
static inline int ddp_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	return mpa_rx_payload(c, iov, n, len);
}

/* Reads the rest of a small segment (payload <= MPA_RX_SMALL_MAX) and its
 * CRC, and places it into iov only if the CRC is good: 0, -EBADMSG (nothing
 * placed), -errno. Ends the segment. */
static inline int ddp_rx_small(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	return mpa_rx_small(c, iov, n, len);
}

/* Ends the segment: 0, or -EBADMSG on an MPA CRC error. */
static inline int ddp_rx_end(struct mpa_conn *c)
{
	return mpa_rx_end(c);
}

#endif
