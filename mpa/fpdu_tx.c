/* MPA FPDU framing, send side (RFC 5044 §4): gathered, batched, resumable.
 *
 * Each FPDU is [ULPDU_Length][DDP header][payload iovs][pad][CRC]; the
 * length prefix and DDP header are copied into the batch (<= 34 bytes), the
 * payload is referenced where it lies (registered memory), and a whole
 * batch of up to 64 FPDUs / 1088 KiB goes to the stream in one call. The
 * stream is non-blocking: what it does not take now stays in the batch and
 * the next mpa_tx_push continues from there; nothing is added to a batch
 * that has started to go out. A streaming sender sends whole TCP segments
 * and carries the rest (at most MPA_TX_CARRY_MAX bytes, copied) in front
 * of the next batch (mpa_tx_push_held).
 *
 * Markers (RFC 5044 §5), negotiated per direction, are off by default and
 * then cost one branch per FPDU: with them an FPDU's iovecs are split at
 * the marker positions of the stream and the markers (kept in the batch) go
 * in between.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpa/fpdu_int.h"
#include "mpa/mpa.h"
#include "util/guard.h"
#include "util/log.h"

/* Empties a batch. */
static void tx_reset(struct mpa_txbatch *b)
{
	b->niov = 0;
	b->nfpdu = 0;
	b->bytes = 0;
	b->nmark = 0;
	b->done_iov = 0;
	b->done_off = 0;
	b->sent = 0;
}

/* See mpa/fpdu_int.h. */
uint32_t mpa_fpdu_wire_len(uint64_t off, uint32_t d)
{
	uint64_t first = (off + MPA_MARKER_PERIOD - 1) / MPA_MARKER_PERIOD * MPA_MARKER_PERIOD;
	uint32_t r = d;

	/* converges in a few rounds: each adds at most d / 128 octets */
	for (int round = 0; round < 64; round++) {
		uint32_t m = 0;
		if (first < off + r)
			m = (uint32_t)((off + r - 1 - first) / MPA_MARKER_PERIOD + 1);
		uint32_t nr = d + MPA_MARKER_LEN * m;
		if (nr == r)
			break;
		r = nr;
	}
	return r;
}

/* See mpa/mpa.h. */
int mpa_conn_init(struct mpa_conn *c, struct uiw_stream *s, const struct mpa_negotiated *neg)
{
	memset(c, 0, sizeof(*c));
	/* with markers a whole FPDU (up to ~66 KB with them) sits in the ring */
	uint32_t cap = neg->markers_rx ? 2 * MPA_RX_RING : MPA_RX_RING;
	c->rb = malloc(cap);
	c->tx = malloc(sizeof(*c->tx));
	if (!c->rb || !c->tx) {
		free(c->rb);
		free(c->tx);
		c->rb = NULL;
		c->tx = NULL;
		return -ENOMEM;
	}
	tx_reset(c->tx);
	c->tx->carry_len = 0;
	c->rb_cap = cap;
	c->s = s;
	c->crc = neg->crc;
	c->markers_tx = neg->markers_tx;
	c->markers_rx = neg->markers_rx;
	c->rx_crc_run = c->crc && !c->markers_rx;
	int emss = s->ops->emss ? s->ops->emss(s) : 0;
	if (emss <= 0)
		emss = 1460;
	/* RFC 5044 §4.1: MULPDU = EMSS - (6 + EMSS mod 4) with markers off,
	 * EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4) with markers on (the
	 * most markers a segment of EMSS octets can hold). A peer that takes
	 * large FPDUs (siw's GSO bit, mpa_wire.h) gets them up to the 16-bit
	 * ULPDU_Length: TCP cuts them into segments, the peer reassembles. */
	int mulpdu = emss - (MPA_HDR_LEN + MPA_CRC_LEN + emss % 4);
	if (c->markers_tx)
		mulpdu -= MPA_MARKER_LEN * ((emss + MPA_MARKER_PERIOD - 1) / MPA_MARKER_PERIOD);
	if (neg->large_tx && !c->markers_tx)
		mulpdu = MPA_LARGE_MULPDU;
	if (mulpdu < 128)
		mulpdu = 128;
	if (mulpdu > MPA_LARGE_MULPDU)
		mulpdu = MPA_LARGE_MULPDU;
	c->mulpdu = (uint32_t)mulpdu;
	/* whole segments only with large FPDUs: FPDUs of one segment each
	 * start at segment boundaries (RFC 5044 §4.1; an RNIC places them
	 * as they come), which a carried tail in front would undo */
	int seg = s->ops->seg_size && neg->large_tx && !c->markers_tx ? s->ops->seg_size(s) : 0;
	c->tx_seg = seg > 0 ? (uint32_t)seg : 0;
	if (uiw_log_on(UIW_LOG_DEBUG)) {
		char t[128];
		uiw_log(UIW_LOG_DEBUG, uiw_log_tuple(uiw_stream_fd(s), t, sizeof(t)),
			"mpa: MULPDU %d (EMSS %d, markers %s, large FPDUs %s)", mulpdu, emss,
			c->markers_tx ? "on" : "off", neg->large_tx ? "on" : "off");
	}
	return 0;
}

/* See mpa/mpa.h. */
void mpa_conn_fini(struct mpa_conn *c)
{
	free(c->rb);
	free(c->tx);
	c->rb = NULL;
	c->tx = NULL;
	c->rb_cap = c->rb_off = c->rb_len = 0;
}

/* Appends the marker for stream offset pos to the batch (RFC 5044 §5):
 * FPDUPTR = pos - *lenpos, or 0 at the FPDU's start, which moves *lenpos
 * past it. Returns the marker's 4 bytes (for the CRC). */
static const uint8_t *tx_marker(struct mpa_txbatch *b, uint64_t pos, uint64_t start,
				uint64_t *lenpos)
{
	uint32_t ptr = (uint32_t)(pos - *lenpos);
	if (pos == start) {
		ptr = 0;
		*lenpos = start + MPA_MARKER_LEN;
	}
	uint8_t *m = b->mark[b->nmark++];
	m[0] = 0;
	m[1] = 0;
	m[2] = (uint8_t)(ptr >> 8);
	m[3] = (uint8_t)ptr;
	b->iov[b->niov].iov_base = m;
	b->iov[b->niov++].iov_len = MPA_MARKER_LEN;
	return m;
}

/* The marker-inserting part of mpa_tx_fpdu (RFC 5044 §5): the FPDU is the
 * pieces [length + header][payload iovs][pad][CRC]; the walk emits them as
 * iovecs, cut at every marker position of the stream, with a marker in each
 * cut. The CRC covers every octet before the CRC field, markers included.
 * FPDUPTR is the distance back to the ULPDU_Length (0 for a marker right in
 * front of it). Same returns as mpa_tx_fpdu. */
static int tx_fpdu_markers(struct mpa_conn *c, struct mpa_txbatch *b, const void *hdr,
			   size_t hdr_len, const struct iovec *iov, int n, size_t plen)
{
	uint32_t ulpdu_len = (uint32_t)(hdr_len + plen);
	uint32_t pad = mpa_pad_of(ulpdu_len);
	uint32_t d = MPA_HDR_LEN + ulpdu_len + pad + MPA_CRC_LEN;
	if (b->nfpdu == 0)
		b->off = c->tx_off;
	uint64_t start = b->off + b->bytes;
	uint32_t r = mpa_fpdu_wire_len(start, d);
	int nm = (int)((r - d) / MPA_MARKER_LEN);
	if (r - MPA_MARKER_LEN > 0xffff) /* FPDUPTR is 16 bits */
		return -EINVAL;
	/* each marker adds its own iovec and may cut one in two */
	if (b->nfpdu >= MPA_TX_MAX_FPDU || b->niov + n + 2 + 2 * nm > MPA_TX_MAX_IOV ||
	    b->nmark + nm > MPA_TX_MAX_MARKERS || (b->nfpdu && b->bytes + r > MPA_TX_MAX_BYTES))
		return -ENOSPC;

	uint8_t *head = b->head[b->nfpdu];
	uint8_t *tail = b->tail[b->nfpdu];
	head[0] = (uint8_t)(ulpdu_len >> 8);
	head[1] = (uint8_t)ulpdu_len;
	memcpy(head + MPA_HDR_LEN, hdr, hdr_len);
	memset(tail, 0, pad);

	const int niov0 = b->niov, nmark0 = b->nmark; /* to undo a fault */
	uint64_t pos = start;
	uint64_t next = (start + MPA_MARKER_PERIOD - 1) / MPA_MARKER_PERIOD * MPA_MARKER_PERIOD;
	uint64_t lenpos = start; /* where ULPDU_Length is */
	uint32_t crc = 0;
	int np = n + 3; /* pieces: head, payload..., pad, CRC */
	for (int k = 0; k < np; k++) {
		const uint8_t *p;
		size_t len;
		bool is_crc = k == np - 1;
		if (k == 0) {
			p = head;
			len = MPA_HDR_LEN + hdr_len;
		} else if (k <= n) {
			p = iov[k - 1].iov_base;
			len = iov[k - 1].iov_len;
		} else if (!is_crc) {
			p = tail;
			len = pad;
		} else {
			/* a marker right in front of the CRC field is in the CRC */
			if (pos == next) {
				const uint8_t *m = tx_marker(b, pos, start, &lenpos);
				if (c->crc)
					crc = uiw_crc32c(crc, m, MPA_MARKER_LEN);
				pos += MPA_MARKER_LEN;
				next += MPA_MARKER_PERIOD;
			}
			/* RFC 5044 §4.4: least-significant byte first */
			tail[pad + 0] = (uint8_t)crc;
			tail[pad + 1] = (uint8_t)(crc >> 8);
			tail[pad + 2] = (uint8_t)(crc >> 16);
			tail[pad + 3] = (uint8_t)(crc >> 24);
			p = tail + pad;
			len = MPA_CRC_LEN;
		}
		while (len) {
			if (pos == next) {
				/* inside the CRC field (not with 4-aligned
				 * FPDUs) a marker is not in the CRC */
				const uint8_t *m = tx_marker(b, pos, start, &lenpos);
				if (c->crc && !is_crc)
					crc = uiw_crc32c(crc, m, MPA_MARKER_LEN);
				pos += MPA_MARKER_LEN;
				next += MPA_MARKER_PERIOD;
				continue;
			}
			size_t k2 = next - pos < len ? (size_t)(next - pos) : len;
			b->iov[b->niov].iov_base = (void *)p;
			b->iov[b->niov++].iov_len = k2;
			if (c->crc && !is_crc) {
				/* the payload pieces are registered memory */
				int e = mpa_crc_guarded(&crc, p, k2);
				if (e) {
					b->niov = niov0;
					b->nmark = nmark0;
					return e;
				}
			}
			p += k2;
			len -= k2;
			pos += k2;
		}
	}
	b->bytes += r;
	b->nfpdu++;
	return 0;
}

/* mpa_tx_fpdu for a payload already copied into the FPDU's head slot
 * behind the header (markers off): one iovec for length, header and
 * payload, one for pad and CRC. */
static int tx_fpdu_small(struct mpa_conn *c, struct mpa_txbatch *b, const void *hdr, size_t hdr_len,
			 size_t plen)
{
	if (b->niov + 2 > MPA_TX_MAX_IOV ||
	    (b->nfpdu && b->bytes + hdr_len + plen > MPA_TX_MAX_BYTES))
		return -ENOSPC;
	uint32_t ulpdu_len = (uint32_t)(hdr_len + plen);
	uint8_t *head = b->head[b->nfpdu];
	uint8_t *tail = b->tail[b->nfpdu];
	head[0] = (uint8_t)(ulpdu_len >> 8);
	head[1] = (uint8_t)ulpdu_len;
	memcpy(head + MPA_HDR_LEN, hdr, hdr_len);
	uint32_t pad = mpa_pad_of(ulpdu_len);
	memset(tail, 0, pad);
	uint32_t crc = 0;
	if (c->crc) {
		crc = uiw_crc32c(0, head, MPA_HDR_LEN + ulpdu_len);
		if (pad)
			crc = uiw_crc32c(crc, tail, pad);
	}
	/* RFC 5044 §4.4: the CRC goes out least-significant byte first. */
	tail[pad + 0] = (uint8_t)crc;
	tail[pad + 1] = (uint8_t)(crc >> 8);
	tail[pad + 2] = (uint8_t)(crc >> 16);
	tail[pad + 3] = (uint8_t)(crc >> 24);
	b->iov[b->niov].iov_base = head;
	b->iov[b->niov++].iov_len = MPA_HDR_LEN + ulpdu_len;
	b->iov[b->niov].iov_base = tail;
	b->iov[b->niov++].iov_len = pad + MPA_CRC_LEN;
	b->bytes += MPA_HDR_LEN + ulpdu_len + pad + MPA_CRC_LEN;
	b->nfpdu++;
	return 0;
}

/* See mpa/mpa.h. RFC 5044 §4 (framing, pad, CRC32c), §5 (markers). */
int mpa_tx_fpdu(struct mpa_conn *c, const void *hdr, size_t hdr_len, const struct iovec *iov, int n)
{
	struct mpa_txbatch *b = c->tx;
	size_t plen = 0;
	if (b->sent)
		return -ENOSPC;
	for (int i = 0; i < n; i++)
		plen += iov[i].iov_len;
	if (hdr_len > 32 || hdr_len + plen > c->mulpdu)
		return -EINVAL;
	if (b->nfpdu >= MPA_TX_MAX_FPDU)
		return -ENOSPC;
	struct iovec one;
	if (plen && plen <= MPA_TX_COPY_MAX) {
		/* a small payload travels in the batch, next to its header */
		uint8_t *dst = b->head[b->nfpdu] + MPA_HDR_LEN + hdr_len;
		for (int i = 0; i < n; i++) {
			int e = uiw_guard_memcpy(dst, iov[i].iov_base, iov[i].iov_len);
			if (e)
				return e;
			dst += iov[i].iov_len;
		}
		if (!c->markers_tx)
			return tx_fpdu_small(c, b, hdr, hdr_len, plen);
		one.iov_base = b->head[b->nfpdu] + MPA_HDR_LEN + hdr_len;
		one.iov_len = plen;
		iov = &one;
		n = 1;
	}
	if (!c->crc && plen > MPA_TX_COPY_MAX) {
		/* no CRC pass reads the payload, the kernel does: a page that
		 * is gone would fail the push in the middle of the stream
		 * (sendmsg's EFAULT), past where a Terminate can still follow */
		for (int i = 0; i < n; i++) {
			int e = uiw_guard_probe(iov[i].iov_base, iov[i].iov_len);
			if (e)
				return e;
		}
	}
	if (c->markers_tx)
		return tx_fpdu_markers(c, b, hdr, hdr_len, iov, n, plen);
	if (b->nfpdu >= MPA_TX_MAX_FPDU || b->niov + n + 2 > MPA_TX_MAX_IOV ||
	    (b->nfpdu && b->bytes + hdr_len + plen > MPA_TX_MAX_BYTES))
		return -ENOSPC;

	uint32_t ulpdu_len = (uint32_t)(hdr_len + plen);
	uint8_t *head = b->head[b->nfpdu];
	uint8_t *tail = b->tail[b->nfpdu];
	head[0] = (uint8_t)(ulpdu_len >> 8);
	head[1] = (uint8_t)ulpdu_len;
	memcpy(head + MPA_HDR_LEN, hdr, hdr_len);
	uint32_t pad = mpa_pad_of(ulpdu_len);
	memset(tail, 0, pad);

	uint32_t crc = 0;
	if (c->crc) {
		crc = uiw_crc32c(0, head, MPA_HDR_LEN + hdr_len);
		for (int i = 0; i < n; i++) {
			int e = mpa_crc_guarded(&crc, iov[i].iov_base, iov[i].iov_len);
			if (e)
				return e;
		}
		if (pad)
			crc = uiw_crc32c(crc, tail, pad);
	}
	/* RFC 5044 §4.4: the CRC goes out least-significant byte first. */
	tail[pad + 0] = (uint8_t)crc;
	tail[pad + 1] = (uint8_t)(crc >> 8);
	tail[pad + 2] = (uint8_t)(crc >> 16);
	tail[pad + 3] = (uint8_t)(crc >> 24);

	b->iov[b->niov].iov_base = head;
	b->iov[b->niov++].iov_len = MPA_HDR_LEN + hdr_len;
	for (int i = 0; i < n; i++) {
		if (iov[i].iov_len == 0)
			continue;
		b->iov[b->niov++] = iov[i];
	}
	b->iov[b->niov].iov_base = tail;
	b->iov[b->niov++].iov_len = pad + MPA_CRC_LEN;
	b->bytes += MPA_HDR_LEN + ulpdu_len + pad + MPA_CRC_LEN;
	b->nfpdu++;
	return 0;
}

/* The batch's next n unsent bytes went to the stream. */
static void tx_advance(struct mpa_txbatch *b, size_t n)
{
	b->sent += n;
	size_t k = n + b->done_off;
	while (b->done_iov < b->niov && k >= b->iov[b->done_iov].iov_len)
		k -= b->iov[b->done_iov++].iov_len;
	b->done_off = k;
}

/* Copies the batch's unsent bytes (tail of them, at most
 * MPA_TX_CARRY_MAX) behind the carry and marks them sent. Returns 0, or
 * -EFAULT / -EACCES (a payload page is gone: nothing changed). */
static int tx_carry(struct mpa_txbatch *b)
{
	uint32_t n = b->carry_len;
	for (int i = b->done_iov; i < b->niov; i++) {
		size_t off = i == b->done_iov ? b->done_off : 0;
		size_t l = b->iov[i].iov_len - off;
		int e =
		    uiw_guard_memcpy(b->carry + n, (const uint8_t *)b->iov[i].iov_base + off, l);
		if (e)
			return e;
		n += (uint32_t)l;
	}
	tx_advance(b, b->bytes - b->sent);
	b->carry_len = n;
	return 0;
}

/* One sendmsg of the carry and then the batch's unsent bytes, want bytes
 * in all (the whole segments of a held push), through a copy of the
 * iovecs. Returns the stream's sendv result. */
static ssize_t tx_push_copy(struct mpa_conn *c, size_t want)
{
	struct mpa_txbatch *b = c->tx;
	struct iovec v[MPA_TX_MAX_IOV + 1];
	int nv = 0;
	size_t n = 0;
	if (b->carry_len) {
		v[nv].iov_base = b->carry;
		v[nv++].iov_len = b->carry_len;
		n = b->carry_len;
	}
	for (int i = b->done_iov; i < b->niov && n < want; i++) {
		size_t off = i == b->done_iov ? b->done_off : 0;
		size_t l = b->iov[i].iov_len - off;
		if (l > want - n)
			l = want - n;
		v[nv].iov_base = (uint8_t *)b->iov[i].iov_base + off;
		v[nv++].iov_len = l;
		n += l;
	}
	return uiw_stream_sendv(c->s, v, nv);
}

/* mpa_tx_push and mpa_tx_push_held (hold). */
static int tx_push(struct mpa_conn *c, bool hold)
{
	struct mpa_txbatch *b = c->tx;
	size_t left = b->bytes - b->sent;
	size_t total = b->carry_len + left;
	/* what goes now: all of it, or with hold the whole segments of it
	 * when the rest lies in this batch and fits the carry */
	size_t tail = 0;
	if (hold && c->tx_seg && total >= c->tx_seg) {
		tail = total % c->tx_seg;
		if (tail > left || b->carry_len + tail > MPA_TX_CARRY_MAX)
			tail = 0;
	}
	size_t want = total - tail;
	while (want) {
		ssize_t r;
		if (!b->carry_len && want == b->bytes - b->sent) {
			/* all that is left, nothing before it: the batch's own
			 * iovecs, the first trimmed to its unsent part for the call */
			struct iovec *first = &b->iov[b->done_iov], saved = *first;
			first->iov_base = (uint8_t *)first->iov_base + b->done_off;
			first->iov_len -= b->done_off;
			r = uiw_stream_sendv(c->s, first, b->niov - b->done_iov);
			*first = saved;
		} else {
			r = tx_push_copy(c, want);
		}
		c->tx_syscalls++;
		if (r == -EAGAIN)
			return 0;
		if (r < 0)
			return (int)r;
		size_t k = (size_t)r;
		want -= k;
		if (b->carry_len) {
			size_t kc = k < b->carry_len ? k : b->carry_len;
			memmove(b->carry, b->carry + kc, b->carry_len - kc);
			b->carry_len -= (uint32_t)kc;
			k -= kc;
		}
		tx_advance(b, k);
	}
	if (tail && tx_carry(b))
		return tx_push(c, false); /* the stream says what is wrong */
	if (b->nfpdu == 0)
		return 1;
	c->tx_fpdus += (uint64_t)b->nfpdu;
	c->tx_bytes += b->bytes;
	c->tx_off += b->bytes;
	tx_reset(b);
	return 1;
}

/* See mpa/mpa.h. */
int mpa_tx_push(struct mpa_conn *c)
{
	return tx_push(c, false);
}

/* See mpa/mpa.h. */
int mpa_tx_push_held(struct mpa_conn *c)
{
	return tx_push(c, true);
}

/* See mpa/mpa.h. */
void mpa_tx_drop(struct mpa_conn *c)
{
	tx_reset(c->tx);
	c->tx->carry_len = 0;
}

/* See mpa/mpa.h. */
int mpa_tx_push_wait(struct mpa_conn *c, int timeout_ms)
{
	for (int i = 0; i < 100000; i++) {
		int r = mpa_tx_push(c);
		if (r != 0)
			return r < 0 ? r : 0;
		r = uiw_stream_wait(c->s, POLLOUT, timeout_ms);
		if (r < 0)
			return r;
	}
	return -ETIMEDOUT;
}
