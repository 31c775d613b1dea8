/* MPA markers (RFC 5044 §5) in the framing (mpa/fpdu.c), over real
 * loopback TCP sockets.
 *
 * The expected wire bytes come from ref_fpdu below, an independent
 * octet-at-a-time encoder of the RFC rules: a 4-byte marker (be16 0, be16
 * FPDUPTR) at every stream offset that is a multiple of 512, counted from
 * the first octet after the Request/Reply (offset 0 here); FPDUPTR is the
 * distance back to the FPDU's ULPDU_Length, 0 for a marker right in front
 * of it; markers are covered by the CRC (every octet before the CRC field)
 * and not counted in ULPDU_Length. Our sender must produce exactly those
 * bytes; our receiver must strip and check them on both receive paths (the
 * ring and the "direct" one), and refuse a wrong FPDUPTR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mpa/mpa.h"
#include "mpa_test_util.h"

#define P MPA_MARKER_PERIOD

/* ------------------------------------------------- reference encoder */

/* Where markers fell, by the part of the FPDU that follows them. */
struct where {
	/* in_crc: inside the pad or the CRC field */
	unsigned lead, in_len, in_hdr, in_payload, before_pad, before_crc, in_crc, total;
};

struct ref {
	uint8_t *buf;
	size_t len, cap;
	uint64_t pos; /* stream offset of the next octet */
	bool crc;
	struct where w;
	/* FPDU being built */
	uint64_t start, lenpos;
	uint32_t c;
	bool in_crc_field, crc_first;
	uint16_t fix_reserved; /* put this in every marker's Reserved field */
};

static void ref_put(struct ref *r, uint8_t b)
{
	assert_true(r->len < r->cap);
	r->buf[r->len++] = b;
	r->pos++;
}

/* One octet of the FPDU, with a marker before it when its offset is one.
 * The CRC covers every octet before the CRC field: a marker in front of the
 * CRC's first octet is in it, the CRC's own octets are not. */
static void ref_octet(struct ref *r, uint8_t b, unsigned *where)
{
	bool marker_in_crc = !r->in_crc_field || r->crc_first;

	if (r->pos % P == 0) {
		uint32_t ptr = r->pos == r->start ? 0 : (uint32_t)(r->pos - r->lenpos);
		uint8_t m[4] = {(uint8_t)(r->fix_reserved >> 8), (uint8_t)r->fix_reserved,
				(uint8_t)(ptr >> 8), (uint8_t)ptr};
		if (r->pos == r->start) {
			r->lenpos = r->start + 4;
			r->w.lead++;
		} else if (where) {
			(*where)++;
		}
		r->w.total++;
		for (int i = 0; i < 4; i++) {
			if (r->crc && marker_in_crc)
				r->c = uiw_crc32c(r->c, &m[i], 1);
			ref_put(r, m[i]);
		}
	}
	if (r->crc && !r->in_crc_field)
		r->c = uiw_crc32c(r->c, &b, 1);
	ref_put(r, b);
}

/* Appends one FPDU: ULPDU = hdr[0..hl) then payload[0..pl). */
static void ref_fpdu(struct ref *r, const uint8_t *hdr, size_t hl, const uint8_t *pl, size_t pn)
{
	uint32_t ulen = (uint32_t)(hl + pn);
	uint32_t pad = (4 - ((2 + ulen) & 3)) & 3;

	r->start = r->lenpos = r->pos;
	r->c = 0;
	r->in_crc_field = false;
	ref_octet(r, (uint8_t)(ulen >> 8), NULL);
	ref_octet(r, (uint8_t)ulen, &r->w.in_len);
	for (size_t i = 0; i < hl; i++)
		ref_octet(r, hdr[i], &r->w.in_hdr);
	for (size_t i = 0; i < pn; i++)
		ref_octet(r, pl[i], &r->w.in_payload);
	for (uint32_t i = 0; i < pad; i++)
		ref_octet(r, 0, i == 0 ? &r->w.before_pad : &r->w.in_crc);
	/* the CRC's value is known only once a marker in front of it is in:
	 * emit that marker first (an empty ref_octet is not possible, so
	 * look ahead) */
	r->in_crc_field = true;
	r->crc_first = true;
	if (r->pos % P == 0) {
		/* emit the marker through a throw-away octet, then drop it */
		ref_octet(r, 0, &r->w.before_crc);
		r->len--;
		r->pos--;
	}
	r->crc_first = false;
	uint32_t crc = r->crc ? r->c : 0;
	for (int i = 0; i < 4; i++)
		ref_octet(r, (uint8_t)(crc >> (8 * i)), &r->w.in_crc);
}

static void ref_init(struct ref *r, size_t cap, bool crc)
{
	memset(r, 0, sizeof(*r));
	r->buf = malloc(cap);
	assert_non_null(r->buf);
	r->cap = cap;
	r->crc = crc;
}

/* ------------------------------------------------- connections */

struct link {
	struct uiw_stream *a, *b; /* a sends, b receives */
	int afd, bfd;
	struct mpa_conn ca, cb;
};

static void link_up(struct link *k, bool crc, bool m_tx, bool m_rx)
{
	int fds[2] = {-1, -1};
	struct mpa_negotiated na = {.rev = 2, .crc = crc, .markers_tx = m_tx, .initiator = true};
	struct mpa_negotiated nb = {.rev = 2, .crc = crc, .markers_rx = m_rx};

	assert_int_equal(tcp_pair(fds), 0);
	k->afd = fds[0];
	k->bfd = fds[1];
	k->a = uiw_stream_tcp(fds[0]);
	k->b = uiw_stream_tcp(fds[1]);
	assert_non_null(k->a);
	assert_non_null(k->b);
	sock_timeouts(k->bfd, 5000);
	sock_timeouts(k->afd, 5000);
	assert_int_equal(mpa_conn_init(&k->ca, k->a, &na), 0);
	assert_int_equal(mpa_conn_init(&k->cb, k->b, &nb), 0);
}

static void link_down(struct link *k)
{
	mpa_conn_fini(&k->ca);
	mpa_conn_fini(&k->cb);
	k->a->ops->destroy(k->a);
	k->b->ops->destroy(k->b);
}

/* A thread writing a buffer raw to a socket, so the reader never blocks
 * the writer on a full socket buffer. */
struct writer {
	pthread_t t;
	int fd;
	const uint8_t *buf;
	size_t len;
	int rc;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;

	w->rc = raw_write(w->fd, w->buf, w->len);
	return NULL;
}

static void writer_start(struct writer *w, int fd, const uint8_t *buf, size_t len)
{
	w->fd = fd;
	w->buf = buf;
	w->len = len;
	w->rc = 99;
	assert_int_equal(pthread_create(&w->t, NULL, writer_run, w), 0);
}

static void writer_join_any(struct writer *w)
{
	assert_int_equal(pthread_join(w->t, NULL), 0);
}

static void writer_join(struct writer *w)
{
	assert_int_equal(pthread_join(w->t, NULL), 0);
	assert_int_equal(w->rc, 0);
}

/* ------------------------------------------------- test data */

/* FPDU k of a test sequence: header length 14 or 18 (tagged / untagged
 * DDP) and a payload length chosen so that successive FPDUs start at every
 * 4-aligned offset modulo 512 and cross several markers. */
static size_t seq_hdr(unsigned k)
{
	return k % 3 == 0 ? 18 : 14;
}

static size_t seq_payload(unsigned k, size_t max)
{
	static const size_t base[] = {0,   1,	2,   3,	  4,   5,   7,	 100, 493,  494,  495,
				      496, 497, 498, 508, 509, 510, 511, 512, 1020, 1500, 3000};
	size_t n = base[k % (sizeof(base) / sizeof(base[0]))] + (k / 7) * 4;
	return n > max ? max : n;
}

static uint8_t pat(unsigned k, size_t i)
{
	return (uint8_t)(k * 31 + i * 7 + (i >> 8));
}

static void fill(uint8_t *p, size_t n, unsigned k)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(k, i);
}

/* ------------------------------------------------- tests */

/* RFC 5044 §4.1: MULPDU with markers is EMSS - (6 + 4 ceil(EMSS/512) +
 * EMSS mod 4); without, EMSS - (6 + EMSS mod 4). Also: the largest FPDU fits
 * EMSS octets whatever its start offset (markers included). */
static int fake_emss_v;
static int fake_emss(struct uiw_stream *l)
{
	(void)l;
	return fake_emss_v;
}

static void test_mulpdu(void **state)
{
	static const struct uiw_stream_ops ops = {.emss = fake_emss};
	struct uiw_stream l = {.ops = &ops, .fd = -1};
	static const int emss[] = {1460, 1448, 536, 8948, 9000, 65483, 1461, 1462, 1463};

	(void)state;
	for (unsigned i = 0; i < sizeof(emss) / sizeof(emss[0]); i++) {
		struct mpa_negotiated n = {.rev = 2, .crc = true, .markers_tx = true};
		struct mpa_conn c;
		int e = emss[i];
		int m = (e + 511) / 512;

		fake_emss_v = e;
		assert_int_equal(mpa_conn_init(&c, &l, &n), 0);
		assert_int_equal(c.mulpdu, (uint32_t)(e - (6 + 4 * m + e % 4)));
		mpa_conn_fini(&c);
		n.markers_tx = false;
		n.markers_rx = true; /* markers we receive do not change MULPDU */
		assert_int_equal(mpa_conn_init(&c, &l, &n), 0);
		assert_int_equal(c.mulpdu, (uint32_t)(e - (6 + e % 4)));
		mpa_conn_fini(&c);
	}
	/* 1460 with markers: 1442; every start offset fits one segment */
	for (uint64_t off = 0; off < 1024; off += 4) {
		struct ref r;
		static uint8_t pl[1442];

		ref_init(&r, 4096, true);
		r.pos = off;
		ref_fpdu(&r, pl, 14, pl, 1442 - 14);
		assert_true(r.len <= 1460);
		free(r.buf);
	}
}

/* Our sender's bytes equal the reference's, octet for octet, for FPDUs of
 * many sizes at every 4-aligned start offset, with and without CRC, and
 * across several flushes (the stream offset carries over). Markers land in
 * front of FPDUs, inside DDP headers, inside payloads and between the pad
 * (or payload) and the CRC, where the CRC covers them; never inside
 * ULPDU_Length, the pad or the CRC field (every FPDU and every marker is
 * 4-aligned in the stream, so those cases cannot arise). */
static void test_tx_wire_bytes(void **state)
{
	(void)state;
	for (int crc = 0; crc < 2; crc++) {
		struct link k;
		struct ref r;
		const unsigned nf = 700;
		static uint8_t hdr[32], pls[5][4096], got[1 << 16];
		size_t checked = 0;

		link_up(&k, crc, true, false);
		ref_init(&r, 8 << 20, crc);
		for (unsigned f = 0; f < nf; f++) {
			size_t hl = seq_hdr(f), pn = seq_payload(f, k.ca.mulpdu - hl);
			uint8_t *pl = pls[f % 5]; /* referenced until the flush */
			fill(hdr, hl, f + 1000);
			fill(pl, pn, f);
			/* payload in up to three pieces, one empty */
			struct iovec v[3] = {
			    {pl, pn / 3}, {pl + pn / 3, 0}, {pl + pn / 3, pn - pn / 3}};
			int rc = mpa_tx_fpdu(&k.ca, hdr, hl, v, 3);
			if (rc == -ENOSPC) {
				assert_int_equal(t_tx_flush(&k.ca), 0);
				rc = mpa_tx_fpdu(&k.ca, hdr, hl, v, 3);
			}
			assert_int_equal(rc, 0);
			ref_fpdu(&r, hdr, hl, pl, pn);
			if (f % 5 == 4) {
				assert_int_equal(t_tx_flush(&k.ca), 0);
				/* read what is due so far and compare */
				while (checked < r.len) {
					size_t n = r.len - checked;
					if (n > sizeof(got))
						n = sizeof(got);
					assert_int_equal(raw_read(k.bfd, got, n), 0);
					assert_memory_equal(got, r.buf + checked, n);
					checked += n;
				}
			}
		}
		assert_int_equal(t_tx_flush(&k.ca), 0);
		while (checked < r.len) {
			size_t n = r.len - checked;
			if (n > sizeof(got))
				n = sizeof(got);
			assert_int_equal(raw_read(k.bfd, got, n), 0);
			assert_memory_equal(got, r.buf + checked, n);
			checked += n;
		}
		assert_int_equal(k.ca.tx_off, r.pos);
		assert_true(raw_quiet(k.bfd, 20));
		assert_true(r.w.lead > 0);
		assert_true(r.w.in_hdr > 0);
		assert_true(r.w.in_payload > 0);
		assert_true(r.w.before_crc > 0);
		assert_int_equal(r.w.before_pad, 0); /* pad starts unaligned */
		assert_int_equal(r.w.in_len, 0);
		assert_int_equal(r.w.in_crc, 0);
		free(r.buf);
		link_down(&k);
	}
}

/* The first FPDU after the handshake starts with a marker with FPDUPTR 0
 * (stream offset 0), and a 1200-octet FPDU there carries two more whose
 * FPDUPTR is the distance back to its ULPDU_Length: 508 and 1020. */
static void test_tx_first_fpdu(void **state)
{
	struct link k;
	static uint8_t hdr[14], pl[1200 - 14], got[1300];
	struct iovec v = {pl, sizeof(pl)};

	(void)state;
	link_up(&k, true, true, false);
	fill(hdr, sizeof(hdr), 1);
	fill(pl, sizeof(pl), 2);
	assert_int_equal(mpa_tx_fpdu(&k.ca, hdr, sizeof(hdr), &v, 1), 0);
	assert_int_equal(t_tx_flush(&k.ca), 0);
	/* 2 + 1200 + pad 2 + CRC 4 = 1208, plus 3 markers */
	assert_int_equal(raw_read(k.bfd, got, 1220), 0);
	static const uint8_t m0[4] = {0, 0, 0, 0}, m1[4] = {0, 0, 0x01, 0xfc},
			     m2[4] = {0, 0, 0x03, 0xfc};
	assert_memory_equal(got, m0, 4);
	assert_int_equal(got[4], 1200 >> 8);
	assert_int_equal(got[5], 1200 & 0xff);
	assert_memory_equal(got + 512, m1, 4);
	assert_memory_equal(got + 1024, m2, 4);
	/* CRC over everything before it, markers included, LSB first */
	uint32_t crc = uiw_crc32c(0, got, 1216);
	assert_int_equal(got[1216], crc & 0xff);
	assert_int_equal(got[1219], crc >> 24);
	assert_true(raw_quiet(k.bfd, 20));
	link_down(&k);
}

/* Reads FPDU f of the sequence through our receiver and checks it. mode 0:
 * the ring path (mpa_rx_small); 1: the direct path (mpa_rx_payload in two
 * pieces + mpa_rx_end); 2: discard (NULL iov) + mpa_rx_end. */
static void rx_check(struct mpa_conn *c, unsigned f, size_t hl, size_t pn, int mode)
{
	uint8_t hdr[32], want[32];
	static uint8_t buf[70000], exp[70000];

	assert_int_equal(t_rx_begin(c, hdr, hl), (int)(hl + pn));
	fill(want, hl, f + 1000);
	assert_memory_equal(hdr, want, hl);
	fill(exp, pn, f);
	memset(buf, 0xee, pn + 1);
	if (mode == 0 && pn <= MPA_RX_SMALL_MAX) {
		struct iovec v[2] = {{buf, pn / 2}, {buf + pn / 2, pn - pn / 2}};
		assert_int_equal(t_rx_small(c, v, 2, pn), 0);
	} else if (mode == 2) {
		assert_int_equal(t_rx_payload(c, NULL, 0, pn), 0);
		assert_int_equal(t_rx_end(c), 0);
		return;
	} else {
		size_t a = pn / 3;
		struct iovec v1 = {buf, a}, v2[2] = {{buf + a, 5 < pn - a ? 5 : pn - a},
						     {buf + a + (5 < pn - a ? 5 : pn - a), 0}};
		v2[1].iov_len = pn - a - v2[0].iov_len;
		assert_int_equal(t_rx_payload(c, &v1, 1, a), 0);
		assert_int_equal(t_rx_payload(c, v2, 2, pn - a), 0);
		assert_int_equal(t_rx_end(c), 0);
	}
	assert_memory_equal(buf, exp, pn);
	assert_int_equal(buf[pn], 0xee);
}

/* The receiver strips and checks the reference's markers: many sizes and
 * start offsets, ring path, direct path and discard, CRC on and off; the
 * stream then ends cleanly (0). */
static void test_rx_strip(void **state)
{
	(void)state;
	for (int crc = 0; crc < 2; crc++) {
		struct link k;
		struct ref r;
		struct writer w;
		const unsigned nf = 900;
		static uint8_t hdr[32], pl[70000];

		link_up(&k, crc, false, true);
		ref_init(&r, 8 << 20, crc);
		for (unsigned f = 0; f < nf; f++) {
			size_t hl = seq_hdr(f), pn = seq_payload(f, 9000);
			if (f % 97 == 50)
				pn = 65000 - hl; /* big: FPDUPTR must stay < 64 KiB */
			fill(hdr, hl, f + 1000);
			fill(pl, pn, f);
			ref_fpdu(&r, hdr, hl, pl, pn);
		}
		writer_start(&w, k.afd, r.buf, r.len);
		for (unsigned f = 0; f < nf; f++) {
			size_t hl = seq_hdr(f), pn = seq_payload(f, 9000);
			if (f % 97 == 50)
				pn = 65000 - hl;
			rx_check(&k.cb, f, hl, pn, (int)(f % 3));
		}
		writer_join(&w);
		assert_int_equal(k.cb.rx_off, r.pos);
		k.a->ops->shutdown_send(k.a);
		uint8_t h[14];
		assert_int_equal(t_rx_begin(&k.cb, h, 14), 0);
		free(r.buf);
		link_down(&k);
	}
}

/* Our sender to our receiver, markers both ends of this direction, a long
 * run of mixed sizes through both receive paths. */
static void test_round_trip(void **state)
{
	struct link k;
	const unsigned nf = 3000;
	static uint8_t hdr[32], pl[70000];

	(void)state;
	link_up(&k, true, true, true);
	/* small enough to sit in the socket buffers without a reader */
	for (unsigned base = 0; base < nf; base += 100) {
		for (unsigned f = base; f < base + 100; f++) {
			size_t hl = seq_hdr(f), pn = seq_payload(f, k.ca.mulpdu - hl);
			fill(hdr, hl, f + 1000);
			fill(pl, pn, f);
			struct iovec v = {pl, pn};
			int rc = mpa_tx_fpdu(&k.ca, hdr, hl, &v, 1);
			if (rc == -ENOSPC) {
				assert_int_equal(t_tx_flush(&k.ca), 0);
				rc = mpa_tx_fpdu(&k.ca, hdr, hl, &v, 1);
			}
			assert_int_equal(rc, 0);
			/* payload memory is referenced: flush before reuse */
			assert_int_equal(t_tx_flush(&k.ca), 0);
		}
		for (unsigned f = base; f < base + 100; f++) {
			size_t hl = seq_hdr(f), pn = seq_payload(f, k.ca.mulpdu - hl);
			rx_check(&k.cb, f, hl, pn, (int)(f % 3));
		}
	}
	assert_int_equal(k.cb.rx_off, k.ca.tx_off);
	link_down(&k);
}

/* Sends the reference bytes of a few FPDUs, with one marker's bytes changed
 * by mutate, and returns the receiver's verdict on each FPDU in turn (the
 * first non-zero result). */
static int rx_verdict(int crc, unsigned bad_marker, void (*mutate)(uint8_t *m), bool fix_crc,
		      uint8_t *term)
{
	struct link k;
	struct ref r;
	struct writer w;
	static uint8_t hdr[32], pl[4096], buf[4096];
	int verdict = 0;

	link_up(&k, crc, false, true);
	ref_init(&r, 1 << 20, crc);
	for (unsigned f = 0; f < 8; f++) {
		fill(hdr, 14, f + 1000);
		fill(pl, 1300, f);
		size_t before = r.len;
		unsigned before_total = r.w.total;
		ref_fpdu(&r, hdr, 14, pl, 1300);
		/* marker number bad_marker of the stream, if in this FPDU */
		if (bad_marker >= before_total && bad_marker < r.w.total) {
			uint8_t *m = r.buf + (size_t)bad_marker * P;
			assert_true(m >= r.buf + before);
			mutate(m);
			if (fix_crc && crc) {
				/* recompute this FPDU's CRC over its new octets */
				size_t crc_at = r.len - 4;
				uint32_t c = uiw_crc32c(0, r.buf + before, crc_at - before);
				for (int i = 0; i < 4; i++)
					r.buf[crc_at + i] = (uint8_t)(c >> (8 * i));
			}
		}
	}
	writer_start(&w, k.afd, r.buf, r.len);
	for (unsigned f = 0; f < 8 && !verdict; f++) {
		uint8_t h[14];
		struct iovec v = {buf, 1300};
		int rc = t_rx_begin(&k.cb, h, 14);
		if (rc != 1314) {
			verdict = rc;
			break;
		}
		verdict = t_rx_small(&k.cb, &v, 1, 1300);
		if (!verdict)
			assert_memory_equal(buf, (fill(pl, 1300, f), pl), 1300);
	}
	*term = k.cb.rx_term;
	k.b->ops->abort(k.b);
	writer_join_any(&w);
	free(r.buf);
	link_down(&k);
	return verdict;
}

static void m_ptr_off(uint8_t *m)
{
	m[3] ^= 0x10;
}
static void m_ptr_big(uint8_t *m)
{
	m[2] ^= 0x80;
}
static void m_ptr_low_bits(uint8_t *m)
{
	m[3] |= 3;
}
static void m_reserved(uint8_t *m)
{
	m[0] = 0x12;
	m[1] = 0x34;
}
static void m_lead_ptr(uint8_t *m)
{
	m[3] = 4;
}
static void m_ptr_from_lead(uint8_t *m)
{
	/* 508 -> 512: measured from the leading marker instead */
	uint16_t v = (uint16_t)(m[2] << 8 | m[3]);
	v = (uint16_t)(v + 4);
	m[2] = (uint8_t)(v >> 8);
	m[3] = (uint8_t)v;
}

/* A wrong FPDUPTR is refused with -EPROTO before anything of the FPDU is
 * returned, and rx_term says MPA_TERM_MARKER (RFC 5044 §5, LLP Terminate
 * 0x03); the Reserved field and FPDUPTR's low two bits are ignored (but
 * are in the CRC: changing them without fixing the CRC is a CRC error). */
static void test_rx_bad_markers(void **state)
{
	uint8_t term;

	(void)state;
	for (int crc = 0; crc < 2; crc++) {
		/* markers 3..5 fall inside later FPDUs, marker 0 leads the first */
		assert_int_equal(rx_verdict(crc, 3, m_ptr_off, true, &term), -EPROTO);
		assert_int_equal(term, MPA_TERM_MARKER);
		assert_int_equal(rx_verdict(crc, 5, m_ptr_big, true, &term), -EPROTO);
		assert_int_equal(term, MPA_TERM_MARKER);
		assert_int_equal(rx_verdict(crc, 0, m_lead_ptr, true, &term), -EPROTO);
		assert_int_equal(term, MPA_TERM_MARKER);
		assert_int_equal(rx_verdict(crc, 4, m_ptr_low_bits, true, &term), 0);
		assert_int_equal(rx_verdict(crc, 4, m_reserved, true, &term), 0);
		assert_int_equal(rx_verdict(crc, 1, m_ptr_from_lead, true, &term), 0);
		assert_int_equal(term, 0);
	}
	assert_int_equal(rx_verdict(1, 4, m_reserved, false, &term), -EBADMSG);
	assert_int_equal(term, MPA_TERM_CRC);
	assert_int_equal(rx_verdict(1, 2, m_ptr_low_bits, false, &term), -EBADMSG);
	assert_int_equal(term, MPA_TERM_CRC);
}

/* A corrupted payload octet with markers on: the CRC catches it on the
 * direct path at mpa_rx_end too. */
static void test_rx_crc_direct(void **state)
{
	struct link k;
	struct ref r;
	struct writer w;
	static uint8_t hdr[14], pl[20000], buf[20000];
	uint8_t h[14];

	(void)state;
	link_up(&k, true, false, true);
	ref_init(&r, 1 << 20, true);
	fill(hdr, 14, 1);
	fill(pl, sizeof(pl), 2);
	ref_fpdu(&r, hdr, 14, pl, sizeof(pl));
	r.buf[9000] ^= 1;
	writer_start(&w, k.afd, r.buf, r.len);
	struct iovec v = {buf, sizeof(buf)};
	assert_int_equal(t_rx_begin(&k.cb, h, 14), 14 + (int)sizeof(pl));
	assert_int_equal(t_rx_payload(&k.cb, &v, 1, sizeof(pl)), 0);
	assert_int_equal(t_rx_end(&k.cb), -EBADMSG);
	assert_int_equal(k.cb.rx_term, MPA_TERM_CRC);
	writer_join(&w);
	free(r.buf);
	link_down(&k);
}

/* A batch emptied with mpa_tx_drop (never sent) does not move the stream
 * offset: the next FPDU's markers are where the receiver expects them. */
static void test_tx_discarded_batch(void **state)
{
	struct link k;
	static uint8_t hdr[14], pl[1000];
	struct iovec v = {pl, sizeof(pl)};

	(void)state;
	link_up(&k, true, true, true);
	fill(hdr, 14, 1000);
	fill(pl, sizeof(pl), 0);
	assert_int_equal(mpa_tx_fpdu(&k.ca, hdr, 14, &v, 1), 0);
	assert_int_equal(t_tx_flush(&k.ca), 0);
	assert_int_equal(mpa_tx_fpdu(&k.ca, hdr, 14, &v, 1), 0);
	mpa_tx_drop(&k.ca); /* dropped */
	fill(hdr, 14, 1001);
	fill(pl, sizeof(pl), 1);
	assert_int_equal(mpa_tx_fpdu(&k.ca, hdr, 14, &v, 1), 0);
	assert_int_equal(t_tx_flush(&k.ca), 0);
	rx_check(&k.cb, 0, 14, sizeof(pl), 0);
	rx_check(&k.cb, 1, 14, sizeof(pl), 1);
	link_down(&k);
}

/* Markers off: the same sequence goes out with no marker at all (the
 * default path is untouched). */
static void test_markers_off_unchanged(void **state)
{
	struct link k;
	static uint8_t hdr[14], pl[2000], got[2100];
	struct iovec v = {pl, sizeof(pl)};

	(void)state;
	link_up(&k, true, false, false);
	fill(hdr, 14, 1);
	fill(pl, sizeof(pl), 2);
	assert_int_equal(mpa_tx_fpdu(&k.ca, hdr, 14, &v, 1), 0);
	assert_int_equal(t_tx_flush(&k.ca), 0);
	assert_int_equal(raw_read(k.bfd, got, 2 + 2014 + 4), 0);
	assert_int_equal(got[0], 2014 >> 8);
	assert_int_equal(got[1], 2014 & 0xff);
	assert_memory_equal(got + 2, hdr, 14);
	assert_memory_equal(got + 16, pl, sizeof(pl));
	assert_true(raw_quiet(k.bfd, 20));
	link_down(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mulpdu),
	    cmocka_unit_test(test_tx_first_fpdu),
	    cmocka_unit_test(test_tx_wire_bytes),
	    cmocka_unit_test(test_rx_strip),
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_rx_bad_markers),
	    cmocka_unit_test(test_rx_crc_direct),
	    cmocka_unit_test(test_tx_discarded_batch),
	    cmocka_unit_test(test_markers_off_unchanged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
