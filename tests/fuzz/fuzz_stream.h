/* An in-memory byte stream (stream/stream.h) for the fuzz harnesses: what
 * the peer "sent" is a fixed buffer handed out in chunks, what we send is
 * counted. Static functions: include it in one
 * harness only.
 *
 * Receive: recvv gives at most chunk bytes per call (0: all it has); with
 * stall set every other call answers -EAGAIN first, so the resumable
 * receive paths of mpa/ and rdmap/ (RFC 5044 §4 framing read piecewise)
 * run. After the buffer, recvv returns 0 (the peer's FIN) or, with reset,
 * -ECONNRESET. Send: sendv takes everything (a stream with room) unless
 * tx_room is set, then at most tx_room bytes per call; with cap set the
 * bytes are appended there (up to cap_max, then -EAGAIN). fd is -1:
 * nothing may wait on it, the caller drives progress itself.
 *
 * fuzz_frame() turns a list of ULPDUs into the FPDU stream the library's
 * own sender (mpa_tx_fpdu) makes of them, so a harness gets past lengths,
 * CRC and markers and reaches DDP and RDMAP. */
#ifndef UIWARP_TESTS_FUZZ_STREAM_H
#define UIWARP_TESTS_FUZZ_STREAM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "mpa/mpa.h"
#include "stream/stream.h"

struct mem_stream {
	struct uiw_stream s; /* first: the library sees this */
	const uint8_t *rx;
	size_t rx_len, rx_pos;
	size_t chunk;	/* bytes per recvv, 0 for no limit */
	bool stall;	/* -EAGAIN on every other recvv */
	bool reset;	/* the end is -ECONNRESET instead of 0 */
	bool stalled;	/* the last recvv answered -EAGAIN */
	size_t tx_room; /* bytes per sendv, 0 for no limit */
	uint64_t tx_bytes;
	uint8_t *cap; /* sent bytes go here when not NULL */
	size_t cap_len, cap_max;
	bool shut, aborted;
	int emss;
};

static ssize_t mem_sendv(struct uiw_stream *us, const struct iovec *iov, int n)
{
	struct mem_stream *m = (struct mem_stream *)us;
	if (m->aborted)
		return -EPIPE;
	size_t took = 0;
	for (int i = 0; i < n; i++) {
		size_t len = iov[i].iov_len;
		if (m->tx_room && took + len > m->tx_room)
			len = m->tx_room - took;
		if (m->cap) {
			if (len > m->cap_max - m->cap_len)
				len = m->cap_max - m->cap_len;
			memcpy(m->cap + m->cap_len, iov[i].iov_base, len);
			m->cap_len += len;
		}
		took += len;
		if ((m->tx_room && took == m->tx_room) || (m->cap && m->cap_len == m->cap_max))
			break;
	}
	if (!took)
		return -EAGAIN;
	m->tx_bytes += took;
	return (ssize_t)took;
}

static ssize_t mem_recvv(struct uiw_stream *us, const struct iovec *iov, int n)
{
	struct mem_stream *m = (struct mem_stream *)us;
	if (m->aborted)
		return -ECONNRESET;
	if (m->stall && !m->stalled && m->rx_pos < m->rx_len) {
		m->stalled = true;
		return -EAGAIN;
	}
	m->stalled = false;
	size_t left = m->rx_len - m->rx_pos;
	if (!left)
		return m->reset ? -ECONNRESET : 0;
	if (m->chunk && left > m->chunk)
		left = m->chunk;
	size_t got = 0;
	for (int i = 0; i < n && got < left; i++) {
		size_t len = iov[i].iov_len < left - got ? iov[i].iov_len : left - got;
		if (len)
			memcpy(iov[i].iov_base, m->rx + m->rx_pos + got, len);
		got += len;
	}
	m->rx_pos += got;
	return (ssize_t)got;
}

static size_t mem_rx_buffered(struct uiw_stream *us)
{
	(void)us;
	return 0;
}

static int mem_emss(struct uiw_stream *us)
{
	return ((struct mem_stream *)us)->emss;
}

static void mem_shutdown_send(struct uiw_stream *us)
{
	((struct mem_stream *)us)->shut = true;
}

static void mem_abort(struct uiw_stream *us)
{
	((struct mem_stream *)us)->aborted = true;
}

static void mem_destroy(struct uiw_stream *us)
{
	(void)us; /* the harness owns it */
}

static const struct uiw_stream_ops mem_ops = {.sendv = mem_sendv,
					      .recvv = mem_recvv,
					      .rx_buffered = mem_rx_buffered,
					      .emss = mem_emss,
					      .shutdown_send = mem_shutdown_send,
					      .abort = mem_abort,
					      .destroy = mem_destroy};

/* Sets m up to hand out rx[0..len) (not copied: it must outlive m's use). */
static void mem_stream_init(struct mem_stream *m, const uint8_t *rx, size_t len)
{
	memset(m, 0, sizeof(*m));
	m->s.ops = &mem_ops;
	m->s.fd = -1;
	m->rx = rx;
	m->rx_len = len;
	m->emss = 1460;
}

/* Called on each ULPDU (len bytes, writable) before it is framed: a
 * harness points STag fields at its MRs here. */
typedef void (*fuzz_patch_fn)(uint8_t *ulpdu, size_t len, void *ctx);

/* Frames records in[0..len) as the sender of a connection with outcome neg
 * would (RFC 5044 §4: ULPDU_Length, pad, CRC32c when neg->crc; §5 markers
 * when neg->markers_tx) and writes the stream bytes to out[0..max).
 * A record is a big-endian 16-bit length n and n ULPDU bytes (a DDP header
 * and payload); n is cut to the MULPDU (mpa_conn_init's, from emss), and
 * ULPDU bytes past the end of the input are zeros (so a short input can
 * make an FPDU above MPA_RX_SMALL_MAX, which the receiver places as it
 * arrives). patch, if not NULL, may rewrite each ULPDU first. Returns the bytes written (the output
 * stops early when max is reached), or 0 if the framing state could not be allocated. */
static size_t fuzz_frame(const uint8_t *in, size_t len, const struct mpa_negotiated *neg, int emss,
			 fuzz_patch_fn patch, void *ctx, uint8_t *out, size_t max)
{
	struct mem_stream cs;
	struct mpa_conn c;
	static uint8_t ulpdu[65536];
	mem_stream_init(&cs, NULL, 0);
	cs.emss = emss;
	cs.cap = out;
	cs.cap_max = max;
	if (mpa_conn_init(&c, &cs.s, neg))
		return 0;
	size_t pos = 0;
	while (pos + 2 <= len && cs.cap_len < max) {
		size_t n = (size_t)in[pos] << 8 | in[pos + 1];
		pos += 2;
		if (n > c.mulpdu)
			n = c.mulpdu;
		size_t have = n < len - pos ? n : len - pos;
		memcpy(ulpdu, in + pos, have);
		memset(ulpdu + have, 0, n - have);
		pos += have;
		if (patch)
			patch(ulpdu, n, ctx);
		size_t h = n < 32 ? n : 32;
		struct iovec v = {.iov_base = ulpdu + h, .iov_len = n - h};
		/* one FPDU per batch (the ULPDU buffer is reused): pushed
		 * whole unless out is full */
		if (mpa_tx_fpdu(&c, ulpdu, h, &v, 1) || mpa_tx_push(&c) != 1)
			break;
	}
	mpa_conn_fini(&c);
	return cs.cap_len;
}

/* The input prefix of the stream harnesses (fuzz_fpdu, fuzz_rdmap_rx):
 * byte 0 flags, byte 1 the receive chunk size (0: all the stream has). */
#define FUZZ_CRC 0x01	  /* CRC32c negotiated */
#define FUZZ_MARKERS 0x02 /* markers both ways (RFC 5044 §5) */
#define FUZZ_STALL 0x04	  /* every other read is -EAGAIN */
#define FUZZ_RESET 0x08	  /* the stream ends in a reset, not a FIN */
#define FUZZ_FRAMED 0x10  /* the rest is a fuzz_frame record list */

/* The handshake outcome flags asks for (revision 2, the rest off). */
static inline struct mpa_negotiated fuzz_neg(uint8_t flags)
{
	return (struct mpa_negotiated){.rev = 2,
				       .crc = flags & FUZZ_CRC,
				       .markers_rx = flags & FUZZ_MARKERS,
				       .markers_tx = flags & FUZZ_MARKERS};
}

/* Sets ms up to hand out the stream of in[0..len): as it is, or with
 * FUZZ_FRAMED the FPDUs that a peer with outcome *peer (its sender's
 * view: markers_tx, crc, large_tx) makes of the records (fuzz_frame, EMSS
 * 1460, patch applied), kept in a buffer of the harness's until the next
 * call. Chunk size, stall and reset from flags and chunk. */
static inline void fuzz_stream_setup(struct mem_stream *ms, uint8_t flags, uint8_t chunk,
				     const uint8_t *in, size_t len,
				     const struct mpa_negotiated *peer, fuzz_patch_fn patch,
				     void *ctx)
{
	static uint8_t framed[1 << 18];
	if (flags & FUZZ_FRAMED) {
		len = fuzz_frame(in, len, peer, 1460, patch, ctx, framed, sizeof(framed));
		in = framed;
	}
	mem_stream_init(ms, in, len);
	ms->chunk = chunk;
	ms->stall = flags & FUZZ_STALL;
	ms->reset = flags & FUZZ_RESET;
}

#endif
