/* MPA FPDU framing (RFC 5044 §4): gathered send, direct-placement receive.
 *
 * Send: each FPDU is [ULPDU_Length][DDP header][payload iovs][pad][CRC]; the
 * length prefix and DDP header are copied into the batch (<= 34 bytes), the
 * payload is referenced where it lies, and a whole batch leaves in one
 * sendmsg.
 *
 * Receive: a 64-byte read-ahead buffer (carry) holds stream bytes read past
 * the current point; the payload of an FPDU is read with one recvmsg whose
 * iovecs are [target buffer, this FPDU's pad+CRC, read-ahead for the next
 * header], so in steady state one syscall moves one FPDU and payload bytes
 * go from the kernel straight into the target buffer.
 */
#include <errno.h>
#include <string.h>

#include "mpa/mpa.h"

#define RX_CARRY_CAP ((uint32_t)sizeof(((struct mpa_conn *)0)->carry))

static inline uint32_t pad_of(uint32_t ulpdu_len)
{
	return (4 - ((MPA_HDR_LEN + ulpdu_len) & 3)) & 3;
}

void mpa_conn_init(struct mpa_conn *c, struct uiw_llp *llp, const struct mpa_negotiated *neg)
{
	memset(c, 0, sizeof(*c));
	c->llp = llp;
	c->crc = neg->crc;
	int emss = llp->ops->emss ? llp->ops->emss(llp) : 0;
	if (emss <= 0)
		emss = 1460;
	/* RFC 5044 §4.1 (markers off): MULPDU = EMSS - (6 + EMSS mod 4). */
	int mulpdu = emss - (MPA_HDR_LEN + MPA_CRC_LEN + emss % 4);
	if (mulpdu < 128)
		mulpdu = 128;
	if (mulpdu > 65532)
		mulpdu = 65532;
	c->mulpdu = (uint32_t)mulpdu;
}

void mpa_tx_begin(struct mpa_txbatch *b)
{
	b->niov = 0;
	b->nfpdu = 0;
	b->bytes = 0;
}

int mpa_tx_fpdu(struct mpa_conn *c, struct mpa_txbatch *b, const void *hdr, size_t hdr_len,
		const struct iovec *iov, int n)
{
	size_t plen = 0;
	for (int i = 0; i < n; i++)
		plen += iov[i].iov_len;
	if (hdr_len > sizeof(b->head[0]) - MPA_HDR_LEN || hdr_len + plen > c->mulpdu)
		return -EINVAL;
	if (b->nfpdu >= MPA_TX_MAX_FPDU || b->niov + n + 2 > MPA_TX_MAX_IOV)
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
	mpa_tx_begin(b);
	return r < 0 ? (int)r : 0;
}

/* ------------------------------------------------------------------ receive */

/* Copies up to n bytes from the read-ahead buffer into dst; returns count. */
static uint32_t carry_take(struct mpa_conn *c, void *dst, uint32_t n)
{
	uint32_t avail = c->carry_len - c->carry_off;
	if (n > avail)
		n = avail;
	if (n) {
		if (dst)
			memcpy(dst, c->carry + c->carry_off, n);
		c->carry_off += n;
	}
	if (c->carry_off == c->carry_len)
		c->carry_off = c->carry_len = 0;
	return n;
}

/* Reads exactly n bytes into dst (NULL: discard), carry first. Reads ahead
 * into carry when the carry is empty, so a header read is one syscall. */
static int rx_exact(struct mpa_conn *c, void *dst, uint32_t n, bool eof_ok)
{
	uint8_t *p = dst;
	uint32_t got = carry_take(c, p, n);
	bool any = got > 0;
	while (got < n) {
		/* carry is empty here: read what is needed plus read-ahead */
		struct iovec iov[2];
		int k = 0;
		uint32_t need = n - got;
		if (p && need < RX_CARRY_CAP) {
			iov[k].iov_base = c->carry;
			iov[k++].iov_len = RX_CARRY_CAP;
		} else {
			static __thread uint8_t sink[4096];
			if (p) {
				iov[k].iov_base = p + got;
				iov[k++].iov_len = need;
			} else {
				iov[k].iov_base = sink;
				iov[k++].iov_len = need < sizeof(sink) ? need : sizeof(sink);
			}
		}
		ssize_t r = uiw_llp_recvv(c->llp, iov, k, -1);
		c->rx_syscalls++;
		if (r > 0)
			c->rx_bytes += (uint64_t)r;
		if (r == 0)
			return (eof_ok && !any) ? 0 : -ECONNRESET;
		if (r < 0)
			return (int)r;
		any = true;
		if (iov[0].iov_base == c->carry) {
			c->carry_len = (uint32_t)r;
			c->carry_off = 0;
			got += carry_take(c, p + got, need);
		} else {
			got += (uint32_t)r;
		}
	}
	return 1;
}

int mpa_rx_begin(struct mpa_conn *c, void *hdr, size_t hdr_len)
{
	uint8_t buf[2 + 32];
	if (hdr_len > 32)
		return -EINVAL;
	int r = rx_exact(c, buf, (uint32_t)(MPA_HDR_LEN + hdr_len), true);
	if (r <= 0)
		return r;
	uint16_t len = (uint16_t)(buf[0] << 8 | buf[1]);
	if (len < hdr_len)
		return -EPROTO;
	memcpy(hdr, buf + MPA_HDR_LEN, hdr_len);
	c->rx_ulpdu_len = len;
	c->rx_left = len - (uint32_t)hdr_len;
	c->rx_crc = c->crc ? uiw_crc32c(0, buf, MPA_HDR_LEN + hdr_len) : 0;
	return len;
}

int mpa_rx_more(struct mpa_conn *c, void *buf, size_t n)
{
	if (n > c->rx_left)
		return -EPROTO;
	int r = rx_exact(c, buf, (uint32_t)n, false);
	if (r < 0)
		return r;
	if (c->crc)
		c->rx_crc = uiw_crc32c(c->rx_crc, buf, n);
	c->rx_left -= (uint32_t)n;
	return 0;
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
		uint8_t tmp[1024];
		while (len) {
			uint32_t k = len < sizeof(tmp) ? (uint32_t)len : sizeof(tmp);
			int r = rx_exact(c, tmp, k, false);
			if (r < 0)
				return r;
			if (c->crc)
				c->rx_crc = uiw_crc32c(c->rx_crc, tmp, k);
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

	/* carry first */
	while (nv && c->carry_len > c->carry_off) {
		uint32_t k = carry_take(c, v[0].iov_base,
					(uint32_t)(v[0].iov_len > UINT32_MAX ? UINT32_MAX
									     : v[0].iov_len));
		iov_advance(v, &nv, k);
	}
	while (nv) {
		/* Read the rest of the payload, and read ahead into carry only if
		 * this is the end of the ULPDU (the next bytes are the trailer and
		 * the next FPDU's header, both small). */
		int k = nv;
		bool ahead = (len == c->rx_left);
		if (ahead) {
			v[k].iov_base = c->carry;
			v[k].iov_len = RX_CARRY_CAP;
		}
		ssize_t r = uiw_llp_recvv(c->llp, v, k + (ahead ? 1 : 0), -1);
		c->rx_syscalls++;
		if (r > 0)
			c->rx_bytes += (uint64_t)r;
		if (r == 0)
			return -ECONNRESET;
		if (r < 0)
			return (int)r;
		size_t pl = 0;
		for (int i = 0; i < nv; i++)
			pl += v[i].iov_len;
		if ((size_t)r > pl) {
			c->carry_off = 0;
			c->carry_len = (uint32_t)((size_t)r - pl);
			nv = 0;
		} else {
			iov_advance(v, &nv, (size_t)r);
		}
	}
	if (c->crc)
		for (int i = 0; i < ncrc; i++)
			c->rx_crc = uiw_crc32c(c->rx_crc, crcv[i].iov_base, crcv[i].iov_len);
	c->rx_left -= (uint32_t)len;
	return 0;
}

int mpa_rx_end(struct mpa_conn *c)
{
	if (c->rx_left)
		return -EPROTO;
	uint32_t pad = pad_of(c->rx_ulpdu_len);
	uint8_t t[8];
	int r = rx_exact(c, t, pad + MPA_CRC_LEN, false);
	if (r < 0)
		return r;
	if (!c->crc)
		return 0;
	uint32_t crc = pad ? uiw_crc32c(c->rx_crc, t, pad) : c->rx_crc;
	uint32_t wire = (uint32_t)t[pad] | (uint32_t)t[pad + 1] << 8 | (uint32_t)t[pad + 2] << 16 |
			(uint32_t)t[pad + 3] << 24;
	return crc == wire ? 0 : -EBADMSG;
}
