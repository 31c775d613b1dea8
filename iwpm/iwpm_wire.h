/* iWARP port mapper (iwpm) UDP wire format: the one place for its layout
 * and constants.
 *
 * Source: rdma-core iwpmd/iwarp_pm.h (struct iwpm_wire_msg, IWARP_PM_*),
 * iwpmd/iwarp_pm_common.c (parse_iwpm_msg, form_iwpm_*), checked against
 * rdma-core master of 2026-08 (commit 691953d8). Summary in
 * ../shared/reference/iwarp-interop-notes.md §4.3 and docs/iwpm.md.
 *
 * Every message is one UDP datagram; all multi-byte fields big-endian.
 *
 *   off size field
 *   0   1    magic: version << 6 | message type << 4 | IP version (4 or 6)
 *   1   1    pmtime (0)
 *   2   2    reserved; in a REQUEST: mapped_cpport (the initiator's mapped
 *            local TCP port)
 *   4   2    apport: accepting peer's TCP port (in ACCEPT: the mapped port
 *            the initiator must connect to)
 *   6   2    cpport: connecting peer's (unmapped) local TCP port
 *   8   8    assochandle: chosen by the requester, echoed in every answer
 *   16  16   cpipaddr: connecting peer's IP (IPv4: first 4 bytes, rest 0)
 *   32  16   apipaddr: accepting peer's IP
 *   48  16   mapped_cpipaddr: REQUEST only
 *
 * REQUEST is 64 bytes, ACCEPT / ACK / REJECT 48. iwpmd receives datagrams
 * of exactly 48 or 64 bytes and sends version 0.
 *
 * Observed with rdma-core 44 in the lab: in iwpmd's IPv4 messages bytes
 * 4..15 of each address field are not zero (process_iwpm_query_mapping
 * leaves its iwpm_msg_parms uninitialised and copy_iwpm_sockaddr writes
 * only 4 bytes). Decoders must look at the first 4 bytes only.
 */
#ifndef UIWARP_IWPM_WIRE_H
#define UIWARP_IWPM_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define IWPM_PORT 3935 /* UDP, both for queries and answers */

#define IWPM_VER_SHIFT 6
#define IWPM_VER_MASK 0xc0
#define IWPM_MT_SHIFT 4
#define IWPM_MT_MASK 0x30
#define IWPM_IPVER_SHIFT 0
#define IWPM_IPVER_MASK 0x0f

#define IWPM_VERSION 0 /* what iwpmd puts in the magic byte */

enum iwpm_msg_type {
	IWPM_MT_REQ = 0,    /* connecting peer -> accepting peer's :3935 */
	IWPM_MT_ACCEPT = 1, /* answer: apport = mapped listener port */
	IWPM_MT_ACK = 2,    /* connecting peer acknowledges an ACCEPT */
	IWPM_MT_REJECT = 3, /* answer: no mapping, use the unmapped address */
};

#define IWPM_IPADDR_LEN 16
#define IWPM_MSG_LEN 48	    /* ACCEPT, ACK, REJECT */
#define IWPM_MSG_REQ_LEN 64 /* REQUEST: + mapped_cpipaddr */

/* iwpmd's timing: a pending REQUEST (and an ACCEPT waiting for its ACK) is
 * retransmitted once a second and dropped after 10 s. */
#define IWPM_MAP_REQ_TIMEOUT_S 10

/* The layout above as a C struct, for reference and offset checks; the
 * codec below reads and writes bytes and never casts a buffer to it. */
struct iwpm_wire_msg {
	uint8_t magic;
	uint8_t pmtime;
	uint16_t reserved;    /* be; REQUEST: mapped_cpport */
	uint16_t apport;      /* be */
	uint16_t cpport;      /* be */
	uint64_t assochandle; /* be */
	uint8_t cpipaddr[IWPM_IPADDR_LEN];
	uint8_t apipaddr[IWPM_IPADDR_LEN];
	uint8_t mapped_cpipaddr[IWPM_IPADDR_LEN];
};

_Static_assert(offsetof(struct iwpm_wire_msg, reserved) == 2, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, apport) == 4, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, cpport) == 6, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, assochandle) == 8, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, cpipaddr) == 16, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, apipaddr) == 32, "iwpm layout");
_Static_assert(offsetof(struct iwpm_wire_msg, mapped_cpipaddr) == IWPM_MSG_LEN, "iwpm layout");
_Static_assert(sizeof(struct iwpm_wire_msg) == IWPM_MSG_REQ_LEN, "iwpm layout");

/* A message in host form. Ports in host byte order; IP addresses as on the
 * wire (network order; IPv4 in the first 4 bytes, the rest zero). */
struct iwpm_msg {
	uint8_t version; /* 0..3 */
	uint8_t type;	 /* enum iwpm_msg_type */
	uint8_t ip_ver;	 /* 4 or 6 */
	uint8_t pmtime;
	uint16_t apport;
	uint16_t cpport;
	uint16_t mapped_cpport; /* REQUEST only (the wire's reserved field) */
	uint64_t assochandle;
	uint8_t cpipaddr[IWPM_IPADDR_LEN];
	uint8_t apipaddr[IWPM_IPADDR_LEN];
	uint8_t mapped_cpipaddr[IWPM_IPADDR_LEN]; /* REQUEST only */
};

/* Encodes m into buf (at least IWPM_MSG_REQ_LEN bytes). A REQUEST takes 64
 * bytes (with mapped_cpport in the reserved field and mapped_cpipaddr);
 * other types 48 bytes with reserved = 0 and no mapped_cpipaddr, as iwpmd
 * forms them. Returns the datagram length (64 or 48), or -EINVAL when
 * type > 3, version > 3 or ip_ver is not 4 or 6. */
int iwpm_msg_encode(const struct iwpm_msg *m, uint8_t *buf);

/* Decodes a datagram of len bytes into *m. Accepts 48 or 64 bytes for any
 * type, as iwpmd does; a 48-byte REQUEST has mapped_cpipaddr zero; for
 * other types mapped_cpport and mapped_cpipaddr are zero. For IPv4 bytes
 * 4..15 of every address are zeroed (see above).
 * Returns 0, or -EMSGSIZE (other length), -EPROTONOSUPPORT (IP version not
 * 4 or 6). */
int iwpm_msg_decode(const void *buf, size_t len, struct iwpm_msg *m);

/* sockaddr (AF_INET, AF_INET6; an IPv4-mapped IPv6 address counts as IPv4)
 * to wire fields: ip_ver 4 or 6, ip[16], port in host order. Any of the
 * out pointers may be NULL. Returns 0 or -EAFNOSUPPORT. */
int iwpm_sockaddr_to_wire(const struct sockaddr *sa, uint8_t *ip_ver, uint8_t ip[IWPM_IPADDR_LEN],
			  uint16_t *port);

/* Wire fields to a sockaddr_in (ip_ver 4) or sockaddr_in6 (6) in *out.
 * Returns 0 or -EPROTONOSUPPORT. */
int iwpm_wire_to_sockaddr(uint8_t ip_ver, const uint8_t ip[IWPM_IPADDR_LEN], uint16_t port,
			  struct sockaddr_storage *out);

#endif
