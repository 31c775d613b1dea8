/* MPA wire format: the one place for MPA structs and constants.
 *
 * Sources: RFC 5044 (MPA framing, request/reply frames, CRC, markers) and
 * RFC 6581 (enhanced connection setup: IRD/ORD word, peer-to-peer RTR).
 * All multi-byte fields are big-endian on the wire, except the CRC32c, whose
 * four bytes go least-significant first (RFC 5044 §4.4 / RFC 3720 B.4).
 */
#ifndef UIWARP_MPA_WIRE_H
#define UIWARP_MPA_WIRE_H

#include <stdint.h>

/* RFC 5044 §7.1: the 16-byte keys at the start of request and reply. */
#define MPA_KEY_REQ "MPA ID Req Frame"
#define MPA_KEY_REP "MPA ID Rep Frame"
#define MPA_KEY_LEN 16

/* RFC 5044 §7.1 flags byte (byte 16). */
#define MPA_FLAG_MARKERS 0x80  /* M */
#define MPA_FLAG_CRC 0x40      /* C */
#define MPA_FLAG_REJECT 0x20   /* R */
#define MPA_FLAG_ENHANCED 0x10 /* RFC 6581 §5: enhanced connection setup */
#define MPA_FLAG_RES_MASK 0x0f /* reserved: ignored on receive, zero on send */
/* uiwarp's private use of the lowest reserved bit (not in any RFC): "this
 * end implements RFC 7306 (Immediate Data, Atomics)". Sent only when
 * mpa_config.rfc7306 is on (default off): by the initiator in the Request,
 * and by a responder in the Reply only when the Request had it. Peers that
 * do not know it ignore it, as RFC 5044 §7.1 requires of reserved bits, and
 * never set it (siw uses 0x08 for its GSO experiment, below; Chelsio
 * proposed 0x04-0x0c; neither touches 0x01). The other reserved bits go
 * out 0. */
#define MPA_FLAG_RFC7306 0x01
/* Linux siw's private use of reserved bit 0x08 (MPA_RR_FLAG_GSO_EXP, its
 * try_gso module parameter): "the sender of this frame takes FPDUs larger
 * than one TCP segment". A side that sees the bit in the peer's frame may
 * send FPDUs up to the 16-bit ULPDU_Length; without it, every FPDU fits one
 * segment (RFC 5044 §4.1). uiwarp sets it by default (mpa_config.large_fpdu,
 * UIWARP_MPA_LARGE_FPDU) and honours it from siw and from uiwarp peers;
 * hardware ignores it as a reserved bit and gets MSS-sized FPDUs. (A 2020
 * Chelsio proposal on linux-rdma read 0x04/0x08/0x0c as the receiver's
 * largest FPDU, 16/32/64 KiB; a peer reading 0x08 that way sends uiwarp
 * 32 KiB FPDUs, which it takes.) docs/interop.md lists the bits uiwarp uses. */
#define MPA_FLAG_LARGE_FPDU 0x08

#define MPA_REV_1 1
#define MPA_REV_2 2

/* RFC 5044 §7.1: PD_Length at most 512 bytes. Interop limit (rdma-core
 * RDMA_MAX_PRIVATE_DATA, siw): 256 bytes including the RFC 6581 word. */
#define MPA_MAX_PD_RFC 512
#define MPA_MAX_PD 256

/* Request/Reply frame header, 20 bytes, followed by PD_Length bytes. */
struct mpa_rr_hdr {
	char key[MPA_KEY_LEN];
	uint8_t flags;
	uint8_t rev;
	uint16_t pd_len; /* big-endian */
} __attribute__((packed));
_Static_assert(sizeof(struct mpa_rr_hdr) == 20, "MPA req/rep header is 20 bytes");

/* RFC 6581 §5: the first 4 bytes of private data when rev 2 and ENHANCED. */
struct mpa_v2_ird_ord {
	uint16_t ird; /* big-endian: A | B | IRD(14) */
	uint16_t ord; /* big-endian: C | D | ORD(14) */
} __attribute__((packed));
#define MPA_V2_PEER_TO_PEER 0x8000 /* A, in the IRD word */
#define MPA_V2_RTR_SEND 0x4000	   /* B, in the IRD word: zero-length Send/FPDU */
#define MPA_V2_RTR_WRITE 0x8000	   /* C, in the ORD word: zero-length RDMA Write */
#define MPA_V2_RTR_READ 0x4000	   /* D, in the ORD word: zero-length RDMA Read */
#define MPA_V2_IRD_ORD_MASK 0x3fff
#define MPA_V2_IRD_ORD_NONE 0x3fff /* "do not negotiate" as sent by Intel */

/* RTR kinds as a bit set, independent of which word carries them. */
#define MPA_RTR_SEND 0x1
#define MPA_RTR_WRITE 0x2
#define MPA_RTR_READ 0x4

/* RFC 5044 §4: an FPDU is ULPDU_Length(2) ULPDU PAD(0..3) CRC(4). */
#define MPA_HDR_LEN 2
#define MPA_CRC_LEN 4

/* RFC 5044 §5: markers. Every MPA_MARKER_PERIOD octets of one direction's
 * stream, counted from the first octet after that side's Request/Reply
 * (stream offset 0, so the first FPDU starts with a marker), a 4-byte
 * marker goes in: be16 Reserved (0 on send, ignored on receive but covered
 * by the CRC) then be16 FPDUPTR, the number of stream octets back from the
 * marker to the ULPDU_Length of the FPDU it is in (0 for a marker right in
 * front of an FPDU's ULPDU_Length; low 2 bits 0 on send, ignored on
 * receive). A direction carries markers when the M flag in the frame its
 * *receiver* sent is set (§7.1: M declares the receiver's requirement).
 * Markers count in the CRC (it covers every stream octet of the FPDU before
 * the CRC field) but not in ULPDU_Length. */
#define MPA_MARKER_PERIOD 512
#define MPA_MARKER_LEN 4

/* RFC 5040 §4.8 / RFC 6581 §8: LLP (MPA) Terminate error codes, layer 2. */
#define MPA_TERM_TCP_LOST 0x01
#define MPA_TERM_CRC 0x02
#define MPA_TERM_MARKER 0x03
#define MPA_TERM_BAD_REQREP 0x04
#define MPA_TERM_LOCAL_CATASTROPHIC 0x05
#define MPA_TERM_INSUFFICIENT_IRD 0x06
#define MPA_TERM_NO_MATCHING_RTR 0x07

#endif
