/* DDP segmentation, header parsing and placement (RFC 5041 §4, §5, §7). */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "ddp/ddp.h"

/* See ddp/ddp.h. */
int ddp_tx_message(struct mpa_conn *c, const struct ddp_msg *m, struct ddp_txpos *pos)
{
	uint8_t hdr[DDP_UNTAGGED_HDR_LEN];
	size_t hlen = m->tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
	uint64_t max_payload = c->mulpdu - hlen;

	while (!pos->done) {
		uint64_t seg = m->len - pos->off;
		if (seg > max_payload)
			seg = max_payload;
		bool last = pos->off + seg == m->len;

		/* RFC 5041 §4: the header of this segment */
		if (m->tagged) {
			struct ddp_tagged_hdr *h = (void *)hdr;
			h->ddp_ctrl = DDP_FLAG_TAGGED | (last ? DDP_FLAG_LAST : 0) | DDP_VERSION;
			h->ulp_ctrl = m->ulp_ctrl;
			h->stag = htobe32(m->stag);
			h->to = htobe64(m->to + pos->off);
		} else {
			struct ddp_untagged_hdr *h = (void *)hdr;
			h->ddp_ctrl = (last ? DDP_FLAG_LAST : 0) | DDP_VERSION;
			h->ulp_ctrl = m->ulp_ctrl;
			h->ulp_rsvd = htobe32(m->ulp_rsvd);
			h->qn = htobe32(m->qn);
			h->msn = htobe32(m->msn);
			h->mo = htobe32((uint32_t)pos->off);
		}

		/* slice the payload pieces of this segment */
		struct iovec v[16];
		int nv = 0, vi = pos->vi;
		size_t voff = pos->voff;
		uint64_t need = seg;
		while (need) {
			if (vi >= m->niov || nv == 16)
				return -EINVAL;
			size_t avail = m->iov[vi].iov_len - voff;
			size_t take = avail < need ? avail : (size_t)need;
			v[nv].iov_base = (uint8_t *)m->iov[vi].iov_base + voff;
			v[nv++].iov_len = take;
			need -= take;
			voff += take;
			if (voff == m->iov[vi].iov_len) {
				vi++;
				voff = 0;
			}
		}

		int r = mpa_tx_fpdu(c, hdr, hlen, v, nv);
		if (r == -ENOSPC)
			return 0;
		if (r)
			return r;
		pos->off += seg;
		pos->vi = vi;
		pos->voff = voff;
		pos->done = last;
	}
	return 1;
}

/* See ddp/ddp.h. */
int ddp_rx_header(struct mpa_conn *c, struct ddp_rx_seg *s)
{
	const uint8_t *p;
	/* the T bit says how long the header is: peek at it first */
	int len = mpa_rx_peek(c, DDP_UNTAGGED_HDR_LEN, &p);
	if (!p)
		return len; /* -errno, -EAGAIN, or 0 at the end of the stream */
	if (len == 0) {
		c->rx_term = 0;
		return -EPROTO;
	}
	bool tagged = p[0] & DDP_FLAG_TAGGED;
	size_t hlen = tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
	len = mpa_rx_begin(c, s->raw, hlen);
	if (len <= 0)
		return len < 0 ? len : -EPROTO;
	s->seg_len = (uint16_t)len;
	s->ddp_ctrl = s->raw[0];
	s->ulp_ctrl = s->raw[1];
	s->tagged = tagged;
	s->last = s->ddp_ctrl & DDP_FLAG_LAST;
	s->raw_len = (uint8_t)hlen;
	s->payload_len = (uint32_t)len - (uint32_t)hlen;
	if (tagged) {
		const struct ddp_tagged_hdr *h = (const void *)s->raw;
		s->stag = be32toh(h->stag);
		s->to = be64toh(h->to);
		s->ulp_rsvd = s->qn = s->msn = s->mo = 0;
	} else {
		const struct ddp_untagged_hdr *h = (const void *)s->raw;
		s->ulp_rsvd = be32toh(h->ulp_rsvd);
		s->qn = be32toh(h->qn);
		s->msn = be32toh(h->msn);
		s->mo = be32toh(h->mo);
		s->stag = 0;
		s->to = 0;
	}
	return 1;
}

/* See ddp/ddp.h. RFC 5041 §7.2; the access code is RFC 5040 §7.3's. */
struct ddp_err ddp_tagged_err(enum ddp_stag_result r)
{
	switch (r) {
	case DDP_STAG_NOT_ASSOC:
		return (struct ddp_err){DDP_ERR_LAYER_DDP, DDP_ETYPE_TAGGED,
					DDP_TAGGED_STAG_NOT_ASSOC};
	case DDP_STAG_ACCESS:
		/* RFC 5040 §4.8: remote protection error, access rights */
		return (struct ddp_err){DDP_ERR_LAYER_RDMAP, 1, 0x02};
	case DDP_STAG_TO_WRAP:
		return (struct ddp_err){DDP_ERR_LAYER_DDP, DDP_ETYPE_TAGGED, DDP_TAGGED_TO_WRAP};
	case DDP_STAG_BOUNDS:
		return (struct ddp_err){DDP_ERR_LAYER_DDP, DDP_ETYPE_TAGGED,
					DDP_TAGGED_BASE_BOUNDS};
	default:
		return (struct ddp_err){DDP_ERR_LAYER_DDP, DDP_ETYPE_TAGGED,
					DDP_TAGGED_INVALID_STAG};
	}
}

/* See ddp/ddp.h. */
void ddp_place_init(struct ddp_place *p, const struct iovec *iov, int n, uint32_t len)
{
	p->niov = 0;
	uint64_t left = len;
	for (int i = 0; i < n && left && p->niov < DDP_PLACE_MAXV; i++) {
		if (!iov[i].iov_len)
			continue;
		p->iov[p->niov] = iov[i];
		if (p->iov[p->niov].iov_len > left)
			p->iov[p->niov].iov_len = (size_t)left;
		left -= p->iov[p->niov++].iov_len;
	}
	p->len = len;
	p->done = 0;
	p->room = len - (uint32_t)left;
}

/* Advances p's target by n placed bytes. */
static void place_advance(struct ddp_place *p, size_t n)
{
	int i = 0;
	p->done += (uint32_t)n;
	while (i < p->niov && n >= p->iov[i].iov_len)
		n -= p->iov[i++].iov_len;
	if (i < p->niov) {
		p->iov[i].iov_base = (uint8_t *)p->iov[i].iov_base + n;
		p->iov[i].iov_len -= n;
	}
	memmove(p->iov, p->iov + i, (size_t)(p->niov - i) * sizeof(p->iov[0]));
	p->niov -= i;
}

/* See ddp/ddp.h. */
int ddp_place_run(struct mpa_conn *c, struct ddp_place *p)
{
	if (p->done == 0 && p->len <= MPA_RX_SMALL_MAX && p->len == c->rx_left &&
	    p->room == p->len) {
		int r = mpa_rx_small(c, p->iov, p->niov, p->len);
		if (r == 0)
			p->done = p->len;
		return r;
	}
	while (p->done < p->len) {
		/* a target shorter than the payload (room < len: a Terminate's
		 * payload beyond what rdmap/rx.c keeps of the RFC 5040 §4.8
		 * layout) takes what it holds, the rest is read and dropped
		 * with its CRC still checked (RFC 5044 §4.4); mpa_rx_payload
		 * places len bytes into iov only if iov holds them */
		size_t want = p->len - p->done;
		if (p->niov && want > p->room - p->done)
			want = p->room - p->done;
		ssize_t r = mpa_rx_payload(c, p->niov ? p->iov : NULL, p->niov, want);
		if (r < 0)
			return (int)r;
		if (p->niov)
			place_advance(p, (size_t)r);
		else
			p->done += (uint32_t)r;
	}
	return mpa_rx_end(c);
}
