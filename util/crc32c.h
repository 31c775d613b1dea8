/* CRC32c (Castagnoli) by ISA-L, as finished values, leaving the vector
 * registers' upper halves clean. Header-only: the library (mpa/crc.c), the
 * main job (examples/replicate) and the framing floor's benchmark
 * (tests/bench/bench_mpa.c) compute it the same way.
 *
 * ISA-L's crc32_iscsi(buf, len, init) runs the reflected CRC32c register
 * from init and returns the register as is: no initial and no final
 * inversion of its own (crc32_iscsi("123456789", 9, ~0) is 0x1CF96D7C =
 * ~0xE3069283). MPA wants the finished value (RFC 5044 §4.4, RFC 3720 B.4:
 * preset ~0, complement at the end), so we invert on the way in and on the
 * way out; that also makes chaining work on finished values.
 *
 * On a CPU with VPCLMULQDQ, ISA-L's dispatcher runs crc32_iscsi_by16_10
 * (AVX-512), which returns without VZEROUPPER: the upper halves of the
 * vector registers stay dirty, and every legacy-SSE instruction after it
 * (the compiler's struct copies in code built for baseline x86-64: util/
 * guard.c's restore, right after the CRC) pays a state transition. Measured
 * on an Intel Xeon VM (2 vCPUs), per call: 130-160 ns, so a 64 KiB CRC ran
 * at 70 GB/s instead of 84, a 4 KiB one at 22 instead of 77, a 1448-byte
 * one (an MSS-sized FPDU) at 8 instead of 35. VZEROUPPER after each call
 * removes it (a cycle or so where nothing is dirty).
 */
#ifndef UIWARP_UTIL_CRC32C_H
#define UIWARP_UTIL_CRC32C_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <isa-l/crc.h>

/* Clears the upper halves of the AVX registers (VZEROUPPER) on a CPU that
 * has AVX; nothing elsewhere. */
static inline void uiw_avx_upper_clear(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (__builtin_cpu_supports("avx"))
		__asm__ volatile("vzeroupper" ::: "memory");
#endif
}

/* crc: the finished CRC32c of the preceding bytes, 0 to start; p[0..n):
 * the bytes (only read). Returns the finished CRC32c of everything. No
 * errors. RFC 5044 §4.4, RFC 3720 B.4. */
static inline uint32_t uiw_isal_crc32c(uint32_t crc, const void *p, size_t n)
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
	uiw_avx_upper_clear();
	return ~reg;
}

#endif
