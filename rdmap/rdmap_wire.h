/* RDMAP wire format (RFC 5040 §4): the one place for RDMAP structs and
 * constants. All fields big-endian.
 */
#ifndef UIWARP_RDMAP_WIRE_H
#define UIWARP_RDMAP_WIRE_H

#include <stdint.h>

#include "ddp/ddp_wire.h"

/* RFC 5040 §4.2: the RDMAP control byte (DDP's RsvdULP byte 1). */
#define RDMAP_VERSION 1
#define RDMAP_VERSION_SHIFT 6
#define RDMAP_RSVD_MASK 0x30
#define RDMAP_OPCODE_MASK 0x0f

/* RFC 5040 §4.3 opcodes. */
enum rdmap_opcode {
	RDMAP_RDMA_WRITE = 0x0,
	RDMAP_RDMA_READ_REQ = 0x1,
	RDMAP_RDMA_READ_RESP = 0x2,
	RDMAP_SEND = 0x3,
	RDMAP_SEND_INV = 0x4,
	RDMAP_SEND_SE = 0x5,
	RDMAP_SEND_SE_INV = 0x6,
	RDMAP_TERMINATE = 0x7,
	/* RFC 7306 §5: only when both ends negotiated RFC 7306 */
	RDMAP_IMMEDIATE = 0x8,
	RDMAP_IMMEDIATE_SE = 0x9,
	RDMAP_ATOMIC_REQ = 0xa,
	RDMAP_ATOMIC_RESP = 0xb,
};

/* RFC 7306 untagged queues (§4.1, its table of opcodes with their DDP
 * Queue Numbers, and the IANA "RDMAP DDP Untagged Queue Numbers" registry of
 * §10): Immediate Data and Immediate Data with SE use QN 0 (they consume a
 * receive WR, like a Send, and share the Send MSN space); Atomic Requests use
 * QN 1, the queue of RDMA Read Requests (one MSN space, and together they
 * count against the negotiated IRD/ORD); Atomic Responses use the new QN 3.
 * Only uiwarp peers use these (siw and current hardware do not do RFC 7306). */
#define RDMAP_QN_ATOMIC_REQ DDP_QN_READ_REQ
#define RDMAP_QN_ATOMIC_RESP 3
#define RDMAP_NUM_QN 4

/* RFC 7306 §5.2: Immediate Data payload, 8 bytes; uiwarp carries the verbs
 * 32-bit immediate (already in network order) in the first 4. */
#define RDMAP_IMMEDIATE_LEN 8

/* RFC 7306 Atomic Request body (after the untagged DDP header), 52 bytes,
 * and Atomic Response body, 12 bytes (layout as Wireshark decodes it). */
#define RDMAP_AOP_FETCH_ADD 0x0
#define RDMAP_AOP_CMP_SWAP 0x2
struct rdmap_atomic_req {
	uint32_t aopcode; /* Reserved(28) AOpCode(4) */
	uint32_t req_id;
	uint32_t stag;
	uint64_t to;
	uint64_t add_swap;
	uint64_t add_swap_mask;
	uint64_t compare;
	uint64_t compare_mask;
} __attribute__((packed));
_Static_assert(sizeof(struct rdmap_atomic_req) == 52, "Atomic Request is 52 bytes");

struct rdmap_atomic_resp {
	uint32_t req_id;
	uint64_t orig;
} __attribute__((packed));
_Static_assert(sizeof(struct rdmap_atomic_resp) == 12, "Atomic Response is 12 bytes");

/* RFC 5040 §4.4: RDMA Read Request payload (untagged, QN 1), 28 bytes. */
struct rdmap_read_req {
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t read_size;
	uint32_t src_stag;
	uint64_t src_to;
} __attribute__((packed));
_Static_assert(sizeof(struct rdmap_read_req) == 28, "Read Request is 28 bytes");

/* RFC 5040 §4.8: Terminate Control, first 4 bytes of the Terminate payload:
 * Layer(4) EType(4) ErrorCode(8) M D R (Hdr Ct) Reserved(13). Followed by
 * the DDP Segment Length (2 bytes, if M), the terminated DDP header (if D)
 * and the terminated RDMAP header (28 bytes, Read Request only, if R). */
#define RDMAP_TERM_FLAG_M 0x8000
#define RDMAP_TERM_FLAG_D 0x4000
#define RDMAP_TERM_FLAG_R 0x2000

enum rdmap_term_layer {
	RDMAP_LAYER_RDMAP = 0x0,
	RDMAP_LAYER_DDP = 0x1,
	RDMAP_LAYER_LLP = 0x2, /* MPA: codes in mpa/mpa_wire.h */
};

/* RFC 5040 §4.8, RDMAP layer error types and codes. */
#define RDMAP_ETYPE_CATASTROPHIC 0x0
#define RDMAP_ETYPE_REMOTE_PROT 0x1
#define RDMAP_ETYPE_REMOTE_OP 0x2

#define RDMAP_ECODE_INVALID_STAG 0x00
#define RDMAP_ECODE_BASE_BOUNDS 0x01
#define RDMAP_ECODE_ACCESS 0x02
#define RDMAP_ECODE_STAG_NOT_ASSOC 0x03
#define RDMAP_ECODE_TO_WRAP 0x04
#define RDMAP_ECODE_BAD_VERSION 0x05
#define RDMAP_ECODE_UNEXPECTED_OP 0x06
#define RDMAP_ECODE_CATASTROPHIC_STREAM 0x07
#define RDMAP_ECODE_CATASTROPHIC_GLOBAL 0x08
#define RDMAP_ECODE_CANNOT_INVALIDATE 0x09
#define RDMAP_ECODE_UNSPECIFIED 0xff

/* Largest Terminate payload: control 4 + length 2 + untagged hdr 18 + RDMAP 28. */
#define RDMAP_TERM_MAX_PAYLOAD (4 + 2 + DDP_UNTAGGED_HDR_LEN + 28)

#endif
