/* MPA FPDU framing (RFC 5044 §4): gathered send, direct-placement receive.
 *
 * Send: each FPDU is [ULPDU_Length][DDP header][payload iovs][pad][CRC]; the
 * length prefix and DDP header are copied into the batch (<= 34 bytes), the
 * payload is referenced where it lies, and a whole batch leaves in one
 * sendmsg.
 *
 * Receive: a ring holds stream bytes read ahead of the current point. Two
 * regimes, chosen per FPDU by its size:
 *  - large FPDUs (payload > MPA_RX_SMALL_MAX): the payload is read with one
 *    recvmsg whose iovecs are [target buffer, a small read-ahead into the
 *    ring for this FPDU's pad+CRC and the next header], so the payload goes
 *    from the kernel straight into the target buffer, one syscall per FPDU;
 *  - small FPDUs (the usual case on a 1500-byte MTU path, where every FPDU
 *    is ~1.4 KiB): after a small FPDU the ring is filled in bulk, so one
 *    recv brings in many FPDUs and each payload is copied out once its CRC
 *    has been checked. A syscall costs more than copying 16 KiB here.
 *
 * Markers (RFC 5044 §5), negotiated per direction, are off by default and
 * then cost one branch per call. On send, an FPDU's iovecs are split at the
 * marker positions of the stream and the markers (kept in the batch) go in
 * between. On receive, a whole FPDU with its markers is read into the ring,
 * its markers are checked and cut out, and the calls below then serve it
 * from the ring: with markers nothing is placed by the kernel directly
 * (correctness, not speed, is the goal there).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpa/mpa.h"

/* read-ahead after a large FPDU: its pad + CRC and the next header */
#define RX_AHEAD 64

static inline uint32_t pad_of(uint32_t ulpdu_len)
{
	return (4 - ((MPA_HDR_LEN + ulpdu_len) & 3)) & 3;
}

/* Stream octets an FPDU of d octets (markers not counted) takes when it
 * starts at stream offset off, its markers counted: the smallest r with
 * r = d + 4 * (marker positions in [off, off + r)) (RFC 5044 §5; a marker
 * position right after the FPDU belongs to the next one). Also gives the
 * offset of the i-th marker-free octet: fpdu_wire_len(off, i + 1) - 1. */
static uint32_t fpdu_wire_len(uint64_t off, uint32_t d)
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

int mpa_conn_init(struct mpa_conn *c, struct uiw_llp *llp, const struct mpa_negotiated *neg)
{
	memset(c, 0, sizeof(*c));
	/* with markers a whole FPDU (up to ~66 KB with them) sits in the ring */
	uint32_t cap = neg->markers_rx ? 2 * MPA_RX_RING : MPA_RX_RING;
	c->rb = malloc(cap);
	if (!c->rb)
		return -ENOMEM;
	c->rb_cap = cap;
	c->llp = llp;
	c->crc = neg->crc;
	c->markers_tx = neg->markers_tx;
	c->markers_rx = neg->markers_rx;
	c->rx_crc_run = c->crc && !c->markers_rx;
	int emss = llp->ops->emss ? llp->ops->emss(llp) : 0;
	if (emss <= 0)
		emss = 1460;
	/* RFC 5044 §4.1: MULPDU = EMSS - (6 + EMSS mod 4) with markers off,
	 * EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4) with markers on (the
	 * most markers a segment of EMSS octets can hold). */
	int mulpdu = emss - (MPA_HDR_LEN + MPA_CRC_LEN + emss % 4);
	if (c->markers_tx)
		mulpdu -= MPA_MARKER_LEN * ((emss + MPA_MARKER_PERIOD - 1) / MPA_MARKER_PERIOD);
	if (mulpdu < 128)
		mulpdu = 128;
	if (mulpdu > 65532)
		mulpdu = 65532;
	c->mulpdu = (uint32_t)mulpdu;
	const char *dbg = getenv("UIWARP_DEBUG");
	if (dbg && *dbg && *dbg != '0')
		fprintf(stderr, "uiwarp: mpa: MULPDU %d (EMSS %d, markers %s)\n", mulpdu, emss,
			c->markers_tx ? "on" : "off");
	return 0;
}

void mpa_conn_fini(struct mpa_conn *c)
{
	free(c->rb);
	c->rb = NULL;
	c->rb_cap = c->rb_off = c->rb_len = 0;
}

void mpa_tx_begin(struct mpa_txbatch *b)
{
	b->niov = 0;
	b->nfpdu = 0;
	b->bytes = 0;
	b->nmark = 0;
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
	uint32_t pad = pad_of(ulpdu_len);
	uint32_t d = MPA_HDR_LEN + ulpdu_len + pad + MPA_CRC_LEN;
	if (b->nfpdu == 0)
		b->off = c->tx_off;
	uint64_t start = b->off + b->bytes;
	uint32_t r = fpdu_wire_len(start, d);
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
			if (c->crc && !is_crc)
				crc = uiw_crc32c(crc, p, k2);
			p += k2;
			len -= k2;
			pos += k2;
		}
	}
	b->bytes += r;
	b->nfpdu++;
	return 0;
}

int mpa_tx_fpdu(struct mpa_conn *c, struct mpa_txbatch *b, const void *hdr, size_t hdr_len,
		const struct iovec *iov, int n)
{
	size_t plen = 0;
	for (int i = 0; i < n; i++)
		plen += iov[i].iov_len;
	if (hdr_len > sizeof(b->head[0]) - MPA_HDR_LEN || hdr_len + plen > c->mulpdu)
		return -EINVAL;
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
	uint32_t pad = pad_of(ulpdu_len);
	memset(tail, 0, pad);

	uint32_t crc = 0;
	if (c->crc) {
		crc = uiw_crc32c(0, head, MPA_HDR_LEN + hdr_len);
		for (int i = 0; i < n; i++)
			crc = uiw_crc32c(crc, iov[i].iov_base, iov[i].iov_len);
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

int mpa_tx_flush(struct mpa_conn *c, struct mpa_txbatch *b)
{
	if (b->niov == 0)
		return 0;
	ssize_t r = uiw_llp_sendv(c->llp, b->iov, b->niov);
	c->tx_syscalls++;
	c->tx_fpdus += (uint64_t)b->nfpdu;
	c->tx_bytes += b->bytes;
	c->tx_off += b->bytes;
	mpa_tx_begin(b);
	return r < 0 ? (int)r : 0;
}

/* ------------------------------------------------------------------ receive */

/* Makes at least need bytes available in the ring (need <= rb_cap). In bulk
 * mode one recv fills all the free room; otherwise it reads what is missing
 * plus RX_AHEAD. Returns 1, 0 on end of stream before any byte when eof_ok
 * and the ring is empty, -ENODATA on end of stream inside an FPDU (the
 * peer's FIN cut it short), or -errno (-ECONNRESET: the peer reset). */
static int rx_fill(struct mpa_conn *c, uint32_t need, bool bulk, bool eof_ok)
{
	if (need > c->rb_cap)
		return -EINVAL;
	while (c->rb_len < need) {
		if (c->rb_off + need > c->rb_cap || (c->rb_len == 0 && c->rb_off)) {
			memmove(c->rb, c->rb + c->rb_off, c->rb_len);
			c->rb_off = 0;
		}
		uint32_t end = c->rb_off + c->rb_len;
		uint32_t room = c->rb_cap - end;
		uint32_t want = need - c->rb_len + RX_AHEAD;
		if (bulk || want > room)
			want = room;
		struct iovec v = {.iov_base = c->rb + end, .iov_len = want};
		ssize_t r = uiw_llp_recvv(c->llp, &v, 1, -1);
		c->rx_syscalls++;
		if (r == 0)
			return (eof_ok && c->rb_len == 0) ? 0 : -ENODATA;
		if (r < 0)
			return (int)r;
		c->rx_bytes += (uint64_t)r;
		c->rb_len += (uint32_t)r;
	}
	return 1;
}

/* The running CRC is kept over the marker-free bytes as they are consumed;
 * with markers on receive it was computed whole by rx_begin_markers. */
static inline bool crc_live(const struct mpa_conn *c)
{
	return c->rx_crc_run;
}

/* Takes n bytes from the ring (they must be there) into dst (NULL: drop). */
static void rb_take(struct mpa_conn *c, void *dst, uint32_t n)
{
	if (dst)
		memcpy(dst, c->rb + c->rb_off, n);
	c->rb_off += n;
	c->rb_len -= n;
	if (c->rb_len == 0)
		c->rb_off = 0;
}

/* mpa_rx_begin with markers on receive (RFC 5044 §5). The FPDU starts at
 * the peer's stream offset s = c->rx_off. Reads its ULPDU_Length (skipping
 * a marker in front), then the whole FPDU with its markers (r octets) into
 * the ring; checks each marker: FPDUPTR (low 2 bits ignored) must be 0 for
 * a marker at the FPDU's first octet and the distance back to the
 * ULPDU_Length otherwise (also taken: the distance back to that leading
 * marker); the Reserved field is ignored, as §5 says, but is in the CRC.
 * Computes the CRC over the FPDU's octets before the CRC field, markers
 * included, into c->rx_crc (checked by rx_trailer), then cuts the markers
 * out in place so that the ring's read point holds [length][ULPDU][pad]
 * [CRC] as without markers. Returns as mpa_rx_begin; a bad FPDUPTR gives
 * -EPROTO with c->rx_term = MPA_TERM_MARKER. */
static int rx_begin_markers(struct mpa_conn *c, void *hdr, size_t hdr_len)
{
	uint64_t s = c->rx_off;
	uint32_t l0 = fpdu_wire_len(s, 1) - 1, l1 = fpdu_wire_len(s, 2) - 1;
	int r = rx_fill(c, l1 + 1, true, true);
	if (r <= 0)
		return r;
	uint8_t *b = c->rb + c->rb_off;
	uint16_t len = (uint16_t)(b[l0] << 8 | b[l1]);
	if (len < hdr_len) {
		c->rx_term = 0;
		return -EPROTO;
	}
	uint32_t d = MPA_HDR_LEN + len + pad_of(len) + MPA_CRC_LEN;
	uint32_t w = fpdu_wire_len(s, d);
	r = rx_fill(c, w, true, false);
	if (r < 0)
		return r;
	b = c->rb + c->rb_off;

	/* check the markers; CRC over [0, crc_at) as it came */
	uint32_t crc_at = fpdu_wire_len(s, d - MPA_CRC_LEN + 1) - 1;
	uint32_t first =
	    (uint32_t)((MPA_MARKER_PERIOD - s % MPA_MARKER_PERIOD) % MPA_MARKER_PERIOD);
	uint32_t lenq = first == 0 ? MPA_MARKER_LEN : 0; /* ULPDU_Length offset */
	for (uint32_t q = first; q < w; q += MPA_MARKER_PERIOD) {
		uint32_t ptr = (uint32_t)(b[q + 2] << 8 | b[q + 3]) & ~3u;
		bool ok = q == 0 ? ptr == 0 : (ptr == q - lenq || (lenq && ptr == q));
		if (!ok) {
			c->rx_term = MPA_TERM_MARKER;
			return -EPROTO;
		}
	}
	c->rx_crc = c->crc ? uiw_crc32c(0, b, crc_at) : 0;

	/* cut the markers out, from the end, so the FPDU ends where it did;
	 * the last marker is followed by data (fpdu_wire_len's fixed point) */
	uint32_t nm = first < w ? (w - 1 - first) / MPA_MARKER_PERIOD + 1 : 0;
	uint32_t end = w, dst = w;
	for (uint32_t j = nm; j-- > 0;) {
		uint32_t q = first + j * MPA_MARKER_PERIOD;
		uint32_t n = end - (q + MPA_MARKER_LEN);
		dst -= n;
		memmove(b + dst, b + q + MPA_MARKER_LEN, n);
		end = q;
	}
	if (nm) {
		dst -= end;
		memmove(b + dst, b, end);
	}
	/* dst == w - d: the marker octets, now dead, are skipped */
	rb_take(c, NULL, w - d);
	c->rx_off = s + w;

	b = c->rb + c->rb_off;
	memcpy(hdr, b + MPA_HDR_LEN, hdr_len);
	rb_take(c, NULL, (uint32_t)(MPA_HDR_LEN + hdr_len));
	c->rx_ulpdu_len = len;
	c->rx_left = len - (uint32_t)hdr_len;
	c->bulk = true;
	return len;
}

int mpa_rx_begin(struct mpa_conn *c, void *hdr, size_t hdr_len)
{
	if (hdr_len > 32)
		return -EINVAL;
	if (c->markers_rx)
		return rx_begin_markers(c, hdr, hdr_len);
	uint32_t need = (uint32_t)(MPA_HDR_LEN + hdr_len);
	int r = rx_fill(c, need, c->bulk, true);
	if (r <= 0)
		return r;
	const uint8_t *b = c->rb + c->rb_off;
	uint16_t len = (uint16_t)(b[0] << 8 | b[1]);
	if (len < hdr_len) {
		c->rx_term = 0;
		return -EPROTO;
	}
	c->rx_crc = c->crc ? uiw_crc32c(0, b, need) : 0;
	memcpy(hdr, b + MPA_HDR_LEN, hdr_len);
	rb_take(c, NULL, need);
	c->rx_ulpdu_len = len;
	c->rx_left = len - (uint32_t)hdr_len;
	c->bulk = len <= MPA_RX_SMALL_MAX + 32;
	return len;
}

int mpa_rx_more(struct mpa_conn *c, void *buf, size_t n)
{
	if (n > c->rx_left || n > 32)
		return -EPROTO;
	int r = rx_fill(c, (uint32_t)n, c->bulk, false);
	if (r < 0)
		return r;
	if (crc_live(c))
		c->rx_crc = uiw_crc32c(c->rx_crc, c->rb + c->rb_off, n);
	rb_take(c, buf, (uint32_t)n);
	c->rx_left -= (uint32_t)n;
	return 0;
}

/* Checks the trailer at the ring's read point against the running CRC and
 * consumes it; the trailer must be in the ring. */
static int rx_trailer(struct mpa_conn *c)
{
	uint32_t pad = pad_of(c->rx_ulpdu_len);
	const uint8_t *t = c->rb + c->rb_off;
	int rc = 0;
	if (c->crc) {
		/* with markers rx_crc is already the whole FPDU's */
		uint32_t crc = pad && !c->markers_rx ? uiw_crc32c(c->rx_crc, t, pad) : c->rx_crc;
		uint32_t wire = (uint32_t)t[pad] | (uint32_t)t[pad + 1] << 8 |
				(uint32_t)t[pad + 2] << 16 | (uint32_t)t[pad + 3] << 24;
		rc = crc == wire ? 0 : -EBADMSG;
		if (rc)
			c->rx_term = MPA_TERM_CRC;
	}
	rb_take(c, NULL, pad + MPA_CRC_LEN);
	return rc;
}

int mpa_rx_small(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	if (len != c->rx_left || len > MPA_RX_SMALL_MAX)
		return -EINVAL;
	uint32_t total = (uint32_t)len + pad_of(c->rx_ulpdu_len) + MPA_CRC_LEN;
	int r = rx_fill(c, total, true, false);
	if (r < 0)
		return r;
	const uint8_t *p = c->rb + c->rb_off;
	if (crc_live(c))
		c->rx_crc = uiw_crc32c(c->rx_crc, p, len);
	c->rx_left = 0;
	/* check the CRC before placing a byte */
	uint32_t off = c->rb_off;
	rb_take(c, NULL, (uint32_t)len);
	r = rx_trailer(c);
	if (r)
		return r;
	size_t done = 0;
	for (int i = 0; i < n && done < len; i++) {
		size_t k = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;
		memcpy(iov[i].iov_base, c->rb + off + done, k);
		done += k;
	}
	/* rb_take may have reset rb_off to 0 when the ring emptied, but the
	 * bytes stay where they were until the next rx_fill */
	return done == len ? 0 : -EINVAL;
}

/* Advances an iovec cursor by n bytes. */
static void iov_advance(struct iovec *v, int *nv, size_t n)
{
	int i = 0;
	while (i < *nv && n >= v[i].iov_len) {
		n -= v[i].iov_len;
		i++;
	}
	if (i < *nv) {
		v[i].iov_base = (uint8_t *)v[i].iov_base + n;
		v[i].iov_len -= n;
	}
	memmove(v, v + i, (size_t)(*nv - i) * sizeof(*v));
	*nv -= i;
}

int mpa_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	if (len > c->rx_left)
		return -EPROTO;
	if (!iov) {
		/* discard, CRC still computed */
		while (len) {
			uint32_t k = len < 4096 ? (uint32_t)len : 4096;
			int r = rx_fill(c, k, c->bulk, false);
			if (r < 0)
				return r;
			if (crc_live(c))
				c->rx_crc = uiw_crc32c(c->rx_crc, c->rb + c->rb_off, k);
			rb_take(c, NULL, k);
			c->rx_left -= k;
			len -= k;
		}
		return 0;
	}
	enum { MAXV = 32 };
	if (n > MAXV - 1)
		return -EINVAL;
	struct iovec v[MAXV];
	int nv = 0;
	size_t want = len;
	for (int i = 0; i < n && want; i++) {
		size_t l = iov[i].iov_len < want ? iov[i].iov_len : want;
		if (!l)
			continue;
		v[nv].iov_base = iov[i].iov_base;
		v[nv++].iov_len = l;
		want -= l;
	}
	if (want)
		return -EINVAL;
	/* CRC over the target after placement: walk a copy of the vector. */
	struct iovec crcv[MAXV];
	int ncrc = nv;
	memcpy(crcv, v, sizeof(struct iovec) * (size_t)nv);

	/* what is already in the ring first */
	while (nv && c->rb_len) {
		uint32_t k = v[0].iov_len < c->rb_len ? (uint32_t)v[0].iov_len : c->rb_len;
		rb_take(c, v[0].iov_base, k);
		iov_advance(v, &nv, k);
	}
	while (nv) {
		/* the ring is empty here; read the rest of the payload into the
		 * target, and read ahead into the ring only at the end of the
		 * ULPDU (the trailer and the next header follow) */
		int k = nv;
		bool ahead = len == c->rx_left;
		if (ahead) {
			c->rb_off = 0;
			v[k].iov_base = c->rb;
			v[k].iov_len = RX_AHEAD;
		}
		ssize_t r = uiw_llp_recvv(c->llp, v, k + (ahead ? 1 : 0), -1);
		c->rx_syscalls++;
		if (r == 0)
			return -ENODATA; /* FIN inside the FPDU */
		if (r < 0)
			return (int)r;
		c->rx_bytes += (uint64_t)r;
		size_t pl = 0;
		for (int i = 0; i < nv; i++)
			pl += v[i].iov_len;
		if ((size_t)r > pl) {
			c->rb_off = 0;
			c->rb_len = (uint32_t)((size_t)r - pl);
			nv = 0;
		} else {
			iov_advance(v, &nv, (size_t)r);
		}
	}
	if (crc_live(c))
		for (int i = 0; i < ncrc; i++)
			c->rx_crc = uiw_crc32c(c->rx_crc, crcv[i].iov_base, crcv[i].iov_len);
	c->rx_left -= (uint32_t)len;
	return 0;
}

int mpa_rx_end(struct mpa_conn *c)
{
	if (c->rx_left)
		return -EPROTO;
	int r = rx_fill(c, pad_of(c->rx_ulpdu_len) + MPA_CRC_LEN, c->bulk, false);
	if (r < 0)
		return r;
	return rx_trailer(c);
}
