/* DDP wire format (RFC 5041 §4): the one place for DDP structs and constants.
 * All fields big-endian. The second control byte (RsvdULP) belongs to the ULP:
 * RDMAP puts its version and opcode there (rdmap/rdmap_wire.h).
 */
#ifndef UIWARP_DDP_WIRE_H
#define UIWARP_DDP_WIRE_H

#include <stdint.h>

/* RFC 5041 §4.1: first control byte. */
#define DDP_FLAG_TAGGED 0x80 /* T */
#define DDP_FLAG_LAST 0x40   /* L */
#define DDP_RSVD_MASK 0x3c
#define DDP_VERSION_MASK 0x03
#define DDP_VERSION 1

/* RFC 5041 §4.2: tagged buffer model header, 14 bytes. */
struct ddp_tagged_hdr {
	uint8_t ddp_ctrl;
	uint8_t ulp_ctrl; /* RDMAP: RV(2) Rsvd(2) Opcode(4) */
	uint32_t stag;
	uint64_t to;
} __attribute__((packed));
_Static_assert(sizeof(struct ddp_tagged_hdr) == 14, "tagged DDP header is 14 bytes");

/* RFC 5041 §4.3: untagged buffer model header, 18 bytes. */
struct ddp_untagged_hdr {
	uint8_t ddp_ctrl;
	uint8_t ulp_ctrl;
	uint32_t ulp_rsvd; /* RDMAP: Invalidate STag for Send with Invalidate */
	uint32_t qn;
	uint32_t msn;
	uint32_t mo;
} __attribute__((packed));
_Static_assert(sizeof(struct ddp_untagged_hdr) == 18, "untagged DDP header is 18 bytes");

#define DDP_TAGGED_HDR_LEN 14
#define DDP_UNTAGGED_HDR_LEN 18

/* RFC 5041 §5.4 + RFC 5040 §4.3: untagged queue numbers used by RDMAP. */
#define DDP_QN_SEND 0
#define DDP_QN_READ_REQ 1
#define DDP_QN_TERMINATE 2

/* RFC 5040 §4.8: DDP layer Terminate error types and codes (layer 1). */
#define DDP_ETYPE_CATASTROPHIC 0x0
#define DDP_ETYPE_TAGGED 0x1
#define DDP_ETYPE_UNTAGGED 0x2
#define DDP_ETYPE_LLP 0x3 /* reserved for the LLP; cxgb4/irdma send MPA errors so */

#define DDP_CATASTROPHIC_LOCAL 0x00 /* with DDP_ETYPE_CATASTROPHIC */

#define DDP_TAGGED_INVALID_STAG 0x00
#define DDP_TAGGED_BASE_BOUNDS 0x01
#define DDP_TAGGED_STAG_NOT_ASSOC 0x02
#define DDP_TAGGED_TO_WRAP 0x03
#define DDP_TAGGED_BAD_VERSION 0x04

#define DDP_UNTAGGED_INVALID_QN 0x01
#define DDP_UNTAGGED_NO_BUFFER 0x02
#define DDP_UNTAGGED_MSN_RANGE 0x03
#define DDP_UNTAGGED_INVALID_MO 0x04
#define DDP_UNTAGGED_TOO_LONG 0x05
#define DDP_UNTAGGED_BAD_VERSION 0x06

#endif
