/* MPA FPDU framing, receive side (RFC 5044 §4): non-blocking and resumable.
 *
 * A ring holds stream bytes read ahead of the current point. Two regimes,
 * chosen per FPDU by its size:
 *  - large FPDUs (payload > MPA_RX_SMALL_MAX, e.g. the 64 KiB FPDUs of a
 *    peer that negotiated large FPDUs): the payload is read with recvmsg
 *    calls whose iovecs are [the rest of the target buffer, a small
 *    read-ahead into the ring for this FPDU's pad+CRC and the next header],
 *    so the payload goes from the kernel straight into the target buffer:
 *    one copy, one syscall per FPDU when the bytes are there;
 *  - small FPDUs (the usual case on a 1500-byte MTU path towards hardware,
 *    where every FPDU is ~1.4 KiB): the ring is filled in bulk, so one recv
 *    brings in many FPDUs and each payload is copied out once its CRC has
 *    been checked. A syscall costs more than copying 16 KiB here.
 *
 * Every call returns -EAGAIN when the stream has no more bytes for it now;
 * nothing is lost: header bytes wait in the ring until the whole header is
 * there, payload placed so far stays placed (its CRC already counted) and
 * the caller asks for the rest.
 *
 * Markers (RFC 5044 §5), when the peer inserts them (markers_rx): a whole
 * FPDU with its markers is read into the ring, its markers are checked and
 * cut out, and the calls then serve it from the ring (correctness, not
 * speed, is the goal there).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpa/fpdu_int.h"
#include "mpa/mpa.h"
#include "util/guard.h"

/* read-ahead after a large FPDU: its pad + CRC and the next header */
#define RX_AHEAD 64
/* A reader waiting for at least this many more bytes of an FPDU asks the
 * stream to report readiness only once they are all there (rx_lowat):
 * one wake-up and one recvmsg per FPDU instead of one per TCP segment
 * (~45 for a 64 KiB FPDU on a 1500-byte path). */
#define RX_LOWAT_MIN 2048

/* The stream has no more bytes now and missing more must come before the
 * reader can go on: sets the stream's readiness threshold. Returns
 * -EAGAIN. */
static int rx_wait(struct mpa_conn *c, uint32_t missing)
{
	c->rx_dry = false;
	uiw_stream_rx_lowat(c->s, missing >= RX_LOWAT_MIN ? (int)missing : 1);
	return -EAGAIN;
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

/* Makes at least need bytes available in the ring (need <= rb_cap),
 * reading what the stream has. In bulk mode one recv takes all the free
 * room; otherwise what is missing plus RX_AHEAD. Returns 1 when they are
 * there, -EAGAIN when the stream has no more now, 0 when it ended with the
 * ring empty and eof_ok, -ENODATA when it ended inside an FPDU (the peer's
 * FIN cut it short), or -errno (-ECONNRESET: the peer reset). */
static int rx_fill(struct mpa_conn *c, uint32_t need, bool bulk, bool eof_ok)
{
	if (need > c->rb_cap)
		return -EINVAL;
	while (c->rb_len < need) {
		if (c->rx_eof)
			return (eof_ok && c->rb_len == 0) ? 0 : -ENODATA;
		if (c->rx_dry)
			return rx_wait(c, need - c->rb_len);
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
		ssize_t r = uiw_stream_recvv(c->s, &v, 1);
		c->rx_syscalls++;
		if (r == 0) {
			c->rx_eof = true;
			continue;
		}
		if (r == -EAGAIN)
			return rx_wait(c, need - c->rb_len);
		if (r < 0)
			return (int)r;
		c->rx_bytes += (uint64_t)r;
		c->rb_len += (uint32_t)r;
		/* a short read emptied the stream: asking again now would only
		 * say -EAGAIN (whoever waits is edge-triggered on new bytes);
		 * not so once its end was signalled (the end is read after
		 * the bytes before it, and its edge has passed) */
		c->rx_dry = !c->rx_hup && (uint32_t)r < want;
	}
	return 1;
}

/* The FPDU's whole wire image with its markers into the ring, markers
 * checked and cut out (RFC 5044 §5). The FPDU starts at the peer's stream
 * offset s = c->rx_off. Reads its ULPDU_Length (skipping a marker in
 * front), then the whole FPDU with its markers (w octets); checks each
 * marker: FPDUPTR (low 2 bits ignored) must be 0 for a marker at the FPDU's
 * first octet and the distance back to the ULPDU_Length otherwise (also
 * taken: the distance back to that leading marker); the Reserved field is
 * ignored, as §5 says, but is in the CRC. Computes the CRC over the FPDU's
 * octets before the CRC field, markers included, into c->rx_crc (checked by
 * rx_trailer), then cuts the markers out in place so that the ring's read
 * point holds [length][ULPDU][pad][CRC] as without markers. Returns 1,
 * -EAGAIN, 0 (end of stream at a boundary), -EPROTO with rx_term =
 * MPA_TERM_MARKER for a bad FPDUPTR, or the errors of rx_fill. */
static int rx_demark(struct mpa_conn *c)
{
	uint64_t s = c->rx_off;
	uint32_t l0 = mpa_fpdu_wire_len(s, 1) - 1, l1 = mpa_fpdu_wire_len(s, 2) - 1;
	int r = rx_fill(c, l1 + 1, true, true);
	if (r <= 0)
		return r;
	uint8_t *b = c->rb + c->rb_off;
	uint16_t len = (uint16_t)(b[l0] << 8 | b[l1]);
	uint32_t d = MPA_HDR_LEN + len + mpa_pad_of(len) + MPA_CRC_LEN;
	uint32_t w = mpa_fpdu_wire_len(s, d);
	r = rx_fill(c, w, true, false);
	if (r < 0)
		return r;
	b = c->rb + c->rb_off;

	/* check the markers; CRC over [0, crc_at) as it came */
	uint32_t crc_at = mpa_fpdu_wire_len(s, d - MPA_CRC_LEN + 1) - 1;
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
	 * the last marker is followed by data (mpa_fpdu_wire_len's fixed point) */
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
	c->rx_demark = true;
	return 1;
}

/* See mpa/mpa.h. */
int mpa_rx_peek(struct mpa_conn *c, size_t n, const uint8_t **p)
{
	*p = NULL;
	if (n > 32)
		return -EINVAL;
	if (c->markers_rx) {
		if (!c->rx_demark) {
			int r = rx_demark(c);
			if (r <= 0)
				return r;
		}
	} else {
		int r = rx_fill(c, MPA_HDR_LEN, c->bulk, true);
		if (r <= 0)
			return r;
		const uint8_t *b = c->rb + c->rb_off;
		uint16_t len = (uint16_t)(b[0] << 8 | b[1]);
		r = rx_fill(c, (uint32_t)(MPA_HDR_LEN + (len < n ? len : n)), c->bulk, false);
		if (r < 0)
			return r;
	}
	const uint8_t *b = c->rb + c->rb_off;
	*p = b + MPA_HDR_LEN;
	return (uint16_t)(b[0] << 8 | b[1]);
}

/* See mpa/mpa.h. */
int mpa_rx_begin(struct mpa_conn *c, void *hdr, size_t hdr_len)
{
	const uint8_t *p;
	int len = mpa_rx_peek(c, hdr_len, &p);
	if (!p)
		return len; /* -errno, or 0 at the end of the stream */
	if ((size_t)len < hdr_len) {
		c->rx_term = 0;
		return -EPROTO;
	}
	uint32_t need = (uint32_t)(MPA_HDR_LEN + hdr_len);
	const uint8_t *b = c->rb + c->rb_off;
	if (c->rx_crc_run)
		c->rx_crc = uiw_crc32c(0, b, need);
	memcpy(hdr, b + MPA_HDR_LEN, hdr_len);
	rb_take(c, NULL, need);
	c->rx_ulpdu_len = (uint16_t)len;
	c->rx_left = (uint32_t)len - (uint32_t)hdr_len;
	/* Bulk reads for a run of small FPDUs (a hardware peer's MSS-sized
	 * ones), not after one small FPDU between large ones: a message's
	 * last segment (a 64 KiB Send is 65 512 + 24 bytes of payload) would
	 * make the next header's read take the next large FPDU's payload into
	 * the ring, to be copied again (memmove: 4.35 % of a 64 KiB Send
	 * receiver's samples before, 0.07 % after) */
	bool small = len <= MPA_RX_SMALL_MAX + 32;
	c->bulk = c->markers_rx || (small && c->rx_small);
	c->rx_small = small;
	return len;
}

/* Checks the trailer at the ring's read point against the running CRC and
 * consumes it; the trailer must be in the ring. Ends the FPDU. */
static int rx_trailer(struct mpa_conn *c)
{
	uint32_t pad = mpa_pad_of(c->rx_ulpdu_len);
	const uint8_t *t = c->rb + c->rb_off;
	int rc = 0;
	if (c->crc) {
		/* with markers rx_crc is already the whole FPDU's */
		uint32_t crc = pad && c->rx_crc_run ? uiw_crc32c(c->rx_crc, t, pad) : c->rx_crc;
		uint32_t wire = (uint32_t)t[pad] | (uint32_t)t[pad + 1] << 8 |
				(uint32_t)t[pad + 2] << 16 | (uint32_t)t[pad + 3] << 24;
		rc = crc == wire ? 0 : -EBADMSG;
		if (rc)
			c->rx_term = MPA_TERM_CRC;
	}
	rb_take(c, NULL, pad + MPA_CRC_LEN);
	c->rx_demark = false;
	c->rx_fpdus++;
	return rc;
}

/* See mpa/mpa.h. */
int mpa_rx_small(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	if (len != c->rx_left || len > MPA_RX_SMALL_MAX)
		return -EINVAL;
	uint32_t total = (uint32_t)len + mpa_pad_of(c->rx_ulpdu_len) + MPA_CRC_LEN;
	int r = rx_fill(c, total, true, false);
	if (r < 0)
		return r;
	const uint8_t *p = c->rb + c->rb_off;
	if (c->rx_crc_run)
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
		/* the target is registered memory the application may have
		 * unmapped: a fault is -EFAULT / -EACCES, not a crash */
		r = uiw_guard_memcpy(iov[i].iov_base, c->rb + off + done, k);
		if (r)
			return r;
		done += k;
	}
	/* rb_take may have reset rb_off to 0 when the ring emptied, but the
	 * bytes stay where they were until the next rx_fill */
	return done == len ? 0 : -EINVAL;
}

/* See mpa/mpa.h. */
ssize_t mpa_rx_payload(struct mpa_conn *c, const struct iovec *iov, int n, size_t len)
{
	if (len > c->rx_left)
		return -EPROTO;
	if (len == 0)
		return 0;
	if (!iov) {
		/* discard, CRC still computed */
		if (c->rb_len == 0) {
			int r = rx_fill(c, 1, c->bulk, false);
			if (r < 0)
				return r;
		}
		uint32_t k = len < c->rb_len ? (uint32_t)len : c->rb_len;
		if (c->rx_crc_run)
			c->rx_crc = uiw_crc32c(c->rx_crc, c->rb + c->rb_off, k);
		rb_take(c, NULL, k);
		c->rx_left -= k;
		return k;
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

	size_t placed = 0;
	if (c->rb_len) {
		/* what is already in the ring first */
		for (int i = 0; i < nv && c->rb_len; i++) {
			uint32_t k = v[i].iov_len < c->rb_len ? (uint32_t)v[i].iov_len : c->rb_len;
			if (c->rx_crc_run)
				c->rx_crc = uiw_crc32c(c->rx_crc, c->rb + c->rb_off, k);
			int r = uiw_guard_memcpy(v[i].iov_base, c->rb + c->rb_off, k);
			if (r)
				return r;
			rb_take(c, NULL, k);
			placed += k;
		}
	} else if (!c->rx_eof) {
		/* the ring is empty: the kernel copies straight into the target,
		 * and, at the end of the ULPDU, the trailer and the next header
		 * into the ring */
		uint32_t trailer = mpa_pad_of(c->rx_ulpdu_len) + MPA_CRC_LEN;
		if (c->rx_dry)
			return rx_wait(c, c->rx_left + trailer);
		bool ahead = len == c->rx_left;
		if (ahead) {
			c->rb_off = 0;
			v[nv].iov_base = c->rb;
			v[nv].iov_len = RX_AHEAD;
		}
		/* a target that is not mapped (any more): the kernel says
		 * -EFAULT, the bytes stay in the stream */
		ssize_t r = uiw_stream_recvv(c->s, v, nv + (ahead ? 1 : 0));
		c->rx_syscalls++;
		if (r == -EAGAIN)
			return rx_wait(c, c->rx_left + trailer);
		if (r < 0)
			return r;
		c->rx_dry = !c->rx_hup && (size_t)r < len + (ahead ? RX_AHEAD : 0);
		if (r == 0) {
			c->rx_eof = true;
			return -ENODATA; /* FIN inside the FPDU */
		}
		c->rx_bytes += (uint64_t)r;
		placed = (size_t)r < len ? (size_t)r : len;
		if ((size_t)r > len)
			c->rb_len = (uint32_t)((size_t)r - len);
		if (c->rx_crc_run) {
			/* the target may go away between the recv and here */
			size_t k = placed;
			for (int i = 0; i < nv && k; i++) {
				size_t l = v[i].iov_len < k ? v[i].iov_len : k;
				int e = mpa_crc_guarded(&c->rx_crc, v[i].iov_base, l);
				if (e)
					return e;
				k -= l;
			}
		}
	} else {
		return -ENODATA;
	}
	c->rx_left -= (uint32_t)placed;
	return (ssize_t)placed;
}

/* See mpa/mpa.h. */
int mpa_rx_end(struct mpa_conn *c)
{
	if (c->rx_left)
		return -EPROTO;
	int r = rx_fill(c, mpa_pad_of(c->rx_ulpdu_len) + MPA_CRC_LEN, c->bulk, false);
	if (r < 0)
		return r;
	return rx_trailer(c);
}

/* See mpa/mpa.h. */
int mpa_rx_drain(struct mpa_conn *c)
{
	c->rb_off = c->rb_len = 0;
	c->rx_dry = false;
	uiw_stream_rx_lowat(c->s, 1);
	for (int i = 0; i < 64; i++) {
		if (c->rx_eof)
			return 0;
		struct iovec v = {.iov_base = c->rb, .iov_len = c->rb_cap};
		ssize_t r = uiw_stream_recvv(c->s, &v, 1);
		if (r == 0)
			c->rx_eof = true;
		else if (r < 0)
			return (int)r;
	}
	return -EAGAIN;
}
