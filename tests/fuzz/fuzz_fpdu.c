/* libFuzzer harness: the FPDU stream of RFC 5044 §4-5 (ULPDU_Length, pad,
 * CRC32c, markers and their FPDUPTR) and the DDP segment headers of
 * RFC 5041 §4 on it, read by the receive half of mpa/ and ddp/ exactly as
 * rdmap/rx.c reads them: ddp_rx_header, then ddp_place_run into a target.
 *
 * Input: byte 0 flags, byte 1 the receive chunk size (0: everything the
 * stream has), then the stream.
 *   flags 0x01 CRC negotiated       0x02 markers towards us (RFC 5044 §5)
 *         0x04 stall: every other read is -EAGAIN (resumable paths)
 *         0x08 the stream ends in a reset instead of a FIN
 *         0x10 framed: the rest is a list of ULPDUs (fuzz_frame: be16
 *              length + bytes) that the library's sender frames with
 *              correct lengths, CRC and markers; otherwise raw stream bytes
 *         0x20 large FPDUs (MPA_FLAG_LARGE_FPDU) in framed mode
 * Checked: no sanitizer report; placement stays inside the target (guard
 * bytes around it); results are the documented ones (mpa/mpa.h,
 * ddp/ddp.h); a segment's payload length is its ULPDU length minus its
 * header; the reader stops (no endless loop on a stream that ended). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp/ddp.h"
#include "fuzz_stream.h"

#define TARGET 4096
#define GUARD 64
#define MAX_STREAM (1 << 18)

static uint8_t area[GUARD + TARGET + GUARD];

static void check_guards(void)
{
	for (int i = 0; i < GUARD; i++)
		if (area[i] != 0xa5 || area[GUARD + TARGET + i] != 0xa5)
			__builtin_trap(); /* a byte landed outside the target */
}

/* A reader may answer -EAGAIN once per read of the stream (a short read
 * says "empty for now"); more -EAGAIN than the stream has bytes, plus its
 * stalls, means it hangs on a stream that has the bytes or has ended. */
#define RETRY(expr, limit)                                                                         \
	({                                                                                         \
		long _r;                                                                           \
		size_t _n = 0;                                                                     \
		do                                                                                 \
			_r = (expr);                                                               \
		while (_r == -EAGAIN && ++_n < (limit));                                           \
		if (_r == -EAGAIN)                                                                 \
			__builtin_trap();                                                          \
		_r;                                                                                \
	})

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2 || size > MAX_STREAM)
		return 0;
	uint8_t flags = data[0];
	struct mpa_negotiated neg = fuzz_neg(flags);
	neg.large_tx = (flags & 0x20) && !(flags & FUZZ_MARKERS);
	struct mem_stream ms;
	fuzz_stream_setup(&ms, flags, data[1], data + 2, size - 2, &neg, NULL, NULL);
	size_t len = ms.rx_len;
	struct mpa_conn c;
	if (mpa_conn_init(&c, &ms.s, &neg))
		return 0;
	memset(area, 0xa5, sizeof(area));
	size_t limit = 2 * len + 64;

	/* every FPDU consumes at least 6 stream bytes (a 0-byte ULPDU, no
	 * pad: length + CRC), so more passes than that mean a reader that
	 * does not advance */
	for (size_t pass = 0; pass <= len / 6 + 1; pass++) {
		struct ddp_rx_seg s;
		int r = (int)RETRY(ddp_rx_header(&c, &s), limit);
		if (r == 0 || r == -ENODATA || r == -ECONNRESET)
			break; /* the end, at or inside an FPDU */
		if (r == -EPROTO) {
			/* too short for its header kind, or a bad marker */
			if (c.rx_term && c.rx_term != MPA_TERM_MARKER)
				__builtin_trap();
			break;
		}
		if (r != 1)
			__builtin_trap(); /* no other result is documented */
		uint32_t hlen = s.tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
		if (s.seg_len < hlen || s.payload_len != s.seg_len - hlen || s.raw_len != hlen)
			__builtin_trap();
		if (ddp_check_version(&s))
			break; /* rdmap/rx.c: a Terminate, the stream closes */
		/* the payload into the target: all of it when it fits, else
		 * the first bytes and the rest dropped (a Terminate's payload
		 * beyond what is kept); a tagged segment at its TO's offset */
		uint32_t off = s.tagged ? (uint32_t)(s.to % TARGET) : 0;
		struct iovec v = {.iov_base = area + GUARD + off, .iov_len = TARGET - off};
		struct ddp_place p;
		ddp_place_init(&p, &v, 1, s.payload_len);
		int pr = (int)RETRY(ddp_place_run(&c, &p), limit);
		check_guards();
		if (pr == -EBADMSG) {
			if (!neg.crc || c.rx_term != MPA_TERM_CRC)
				__builtin_trap(); /* a CRC error without CRC */
			break;
		}
		if (pr == -EPROTO && c.rx_term != MPA_TERM_MARKER)
			__builtin_trap(); /* -EPROTO from placement is a bad marker only */
		if (pr < 0 && pr != -ENODATA && pr != -ECONNRESET && pr != -EPROTO)
			__builtin_trap(); /* not a documented result (ddp/ddp.h) */
		if (pr < 0)
			break; /* the stream ended inside the FPDU, or a bad marker */
		if (p.done > p.len)
			__builtin_trap();
	}
	check_guards();
	mpa_conn_fini(&c);
	return 0;
}
