/* CRC32c (Castagnoli) for MPA FPDUs and the handshake tests, on ISA-L
 * (util/crc32c.h: the inversions, and the AVX state it leaves behind).
 */
#include <stdint.h>

#include "mpa/fpdu_int.h"
#include "mpa/mpa.h"
#include "util/crc32c.h"
#include "util/guard.h"

/* See mpa/mpa.h. crc: a finished CRC32c of the preceding bytes, 0 to start;
 * p[0..n): bytes; returns the finished CRC32c of everything. No errors.
 * RFC 5044 §4.4, RFC 3720 B.4. */
uint32_t uiw_crc32c(uint32_t crc, const void *p, size_t n)
{
	return uiw_isal_crc32c(crc, p, n);
}

struct crc_args {
	uint32_t crc;
	const void *p;
	size_t n;
};

static void crc_run(void *arg)
{
	struct crc_args *a = arg;

	a->crc = uiw_crc32c(a->crc, a->p, a->n);
}

/* See mpa/fpdu_int.h. */
int mpa_crc_guarded(uint32_t *crc, const void *p, size_t n)
{
	struct crc_args a = {*crc, p, n};
	int r;

	if (!n)
		return 0;
	r = uiw_guard_run(crc_run, &a, p, n);
	if (!r)
		*crc = a.crc;
	return r;
}
