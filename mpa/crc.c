/* CRC32c (Castagnoli) for MPA FPDUs and the handshake tests, on ISA-L.
 *
 * ISA-L's crc32_iscsi(buf, len, init) runs the reflected CRC32c register
 * from init and returns the register as is: no initial and no final
 * inversion of its own (checked: crc32_iscsi("123456789", 9, ~0) is
 * 0x1CF96D7C = ~0xE3069283). MPA wants the finished value (RFC 5044 §4.4,
 * RFC 3720 B.4: preset ~0, complement at the end), so we invert on the way
 * in and on the way out; that also makes chaining work on finished values.
 */
#include <limits.h>
#include <stdint.h>

#include <isa-l/crc.h>

#include "mpa/fpdu_int.h"
#include "mpa/mpa.h"
#include "util/guard.h"

/* See mpa/mpa.h. crc: a finished CRC32c of the preceding bytes, 0 to start;
 * p[0..n): bytes; returns the finished CRC32c of everything. No errors.
 * RFC 5044 §4.4, RFC 3720 B.4. */
uint32_t uiw_crc32c(uint32_t crc, const void *p, size_t n)
{
	/* ISA-L takes a non-const pointer but only reads the buffer. */
	unsigned char *b = (unsigned char *)(uintptr_t)p;
	uint32_t reg = ~crc;

	/* ISA-L's length is an int: feed huge buffers in pieces. */
	while (n > 0) {
		size_t chunk = n > (size_t)(INT_MAX & ~0xfff) ? (size_t)(INT_MAX & ~0xfff) : n;

		reg = crc32_iscsi(b, (int)chunk, reg);
		b += chunk;
		n -= chunk;
	}
	return ~reg;
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
