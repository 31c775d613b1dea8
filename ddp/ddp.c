/* DDP segmentation and header parsing (RFC 5041 §4, §5). */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "ddp/ddp.h"

int ddp_send_message(struct mpa_conn *c, struct mpa_txbatch *b, const struct ddp_msg *m)
{
	uint8_t hdr[DDP_UNTAGGED_HDR_LEN];
	size_t hlen = m->tagged ? DDP_TAGGED_HDR_LEN : DDP_UNTAGGED_HDR_LEN;
	uint64_t max_payload = c->mulpdu - hlen;
	uint64_t off = 0; /* message offset of this segment */
	int vi = 0;	  /* current piece */
	size_t voff = 0;  /* offset inside it */

	do {
		uint64_t seg = m->len - off;
		if (seg > max_payload)
			seg = max_payload;
		bool last = off + seg == m->len;

		/* RFC 5041 §4: build the header of this segment. */
		if (m->tagged) {
			struct ddp_tagged_hdr *h = (void *)hdr;
			h->ddp_ctrl = DDP_FLAG_TAGGED | (last ? DDP_FLAG_LAST : 0) | DDP_VERSION;
			h->ulp_ctrl = m->ulp_ctrl;
			h->stag = htobe32(m->stag);
			h->to = htobe64(m->to + off);
		} else {
			struct ddp_untagged_hdr *h = (void *)hdr;
			h->ddp_ctrl = (last ? DDP_FLAG_LAST : 0) | DDP_VERSION;
			h->ulp_ctrl = m->ulp_ctrl;
			h->ulp_rsvd = htobe32(m->ulp_rsvd);
			h->qn = htobe32(m->qn);
			h->msn = htobe32(m->msn);
			h->mo = htobe32((uint32_t)off);
		}

		/* Slice the payload pieces for this segment. */
		struct iovec v[16];
		int nv = 0;
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

		int r = mpa_tx_fpdu(c, b, hdr, hlen, v, nv);
		if (r == -ENOSPC) {
			r = mpa_tx_flush(c, b);
			if (r)
				return r;
			r = mpa_tx_fpdu(c, b, hdr, hlen, v, nv);
		}
		if (r)
			return r;
		off += seg;
	} while (off < m->len);
	return 0;
}

int ddp_rx_header(struct mpa_conn *c, struct ddp_rx_seg *s)
{
	/* Read the tagged header size first; an untagged header has 4 more. */
	int len = mpa_rx_begin(c, s->raw, DDP_TAGGED_HDR_LEN);
	if (len <= 0)
		return len;
	s->seg_len = (uint16_t)len;
	s->ddp_ctrl = s->raw[0];
	s->ulp_ctrl = s->raw[1];
	s->tagged = s->ddp_ctrl & DDP_FLAG_TAGGED;
	s->last = s->ddp_ctrl & DDP_FLAG_LAST;
	if (s->tagged) {
		const struct ddp_tagged_hdr *h = (const void *)s->raw;
		s->stag = be32toh(h->stag);
		s->to = be64toh(h->to);
		s->raw_len = DDP_TAGGED_HDR_LEN;
		s->payload_len = (uint32_t)len - DDP_TAGGED_HDR_LEN;
		s->ulp_rsvd = s->qn = s->msn = s->mo = 0;
		return 1;
	}
	if (len < DDP_UNTAGGED_HDR_LEN)
		return -EPROTO;
	int r =
	    mpa_rx_more(c, s->raw + DDP_TAGGED_HDR_LEN, DDP_UNTAGGED_HDR_LEN - DDP_TAGGED_HDR_LEN);
	if (r)
		return r;
	const struct ddp_untagged_hdr *h = (const void *)s->raw;
	s->ulp_rsvd = be32toh(h->ulp_rsvd);
	s->qn = be32toh(h->qn);
	s->msn = be32toh(h->msn);
	s->mo = be32toh(h->mo);
	s->stag = 0;
	s->to = 0;
	s->raw_len = DDP_UNTAGGED_HDR_LEN;
	s->payload_len = (uint32_t)len - DDP_UNTAGGED_HDR_LEN;
	return 1;
}
