/* Helpers shared by the MPA framing sources (fpdu_tx.c, fpdu_rx.c). Not a
 * public header. */
#ifndef UIWARP_MPA_FPDU_INT_H
#define UIWARP_MPA_FPDU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "mpa/mpa_wire.h"

/* RFC 5044 §4: pad octets after a ULPDU of ulpdu_len octets, so that
 * length field + ULPDU + pad is a multiple of 4. */
static inline uint32_t mpa_pad_of(uint32_t ulpdu_len)
{
	return (4 - ((MPA_HDR_LEN + ulpdu_len) & 3)) & 3;
}

/* Stream octets an FPDU of d octets (markers not counted) takes when it
 * starts at stream offset off, its markers counted: the smallest r with
 * r = d + 4 * (marker positions in [off, off + r)) (RFC 5044 §5; a marker
 * position right after the FPDU belongs to the next one). Also gives the
 * offset of the i-th marker-free octet: mpa_fpdu_wire_len(off, i + 1) - 1. */
uint32_t mpa_fpdu_wire_len(uint64_t off, uint32_t d);

/* *crc = uiw_crc32c(*crc, p, n) over memory that may have gone away
 * (registered memory: util/guard.h). 0, or -EFAULT / -EACCES with *crc
 * unchanged when a page of [p, p + n) is not readable. */
int mpa_crc_guarded(uint32_t *crc, const void *p, size_t n);

#endif
