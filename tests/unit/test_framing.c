/* FPDU framing (RFC 5044 §4) and DDP segmentation and placement (RFC 5041
 * §5) over a socketpair stream: lengths, pad to 4, CRC32c, L flag on the
 * last segment only, TO / MO progression, a corrupted byte detected, large
 * FPDUs placed straight into the target, and the non-blocking machinery:
 * a receive that gets its bytes one at a time and a send into a stream that
 * takes only part of each batch both come out byte for byte. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ddp/ddp.h"
#include "rdmap/rdmap_wire.h"

/* ------------------------------------------------ a socketpair stream */

static ssize_t sp_sendv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	ssize_t r = sendmsg(s->fd, &m, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static ssize_t sp_recvv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	ssize_t r = recvmsg(s->fd, &m, MSG_DONTWAIT);
	return r < 0 ? -errno : r;
}

static int sp_emss(struct uiw_stream *s)
{
	(void)s;
	return 1448;
}

static const struct uiw_stream_ops sp_ops = {.sendv = sp_sendv, .recvv = sp_recvv, .emss = sp_emss};

/* The same stream cut into segments of sp_emss bytes (as TCP), each sendv's
 * size recorded. */
static size_t seg_sends[64];
static int seg_nsends;

static ssize_t seg_sendv(struct uiw_stream *s, const struct iovec *iov, int n)
{
	ssize_t r = sp_sendv(s, iov, n);
	if (r > 0 && seg_nsends < 64)
		seg_sends[seg_nsends++] = (size_t)r;
	return r;
}

static const struct uiw_stream_ops seg_ops = {
    .sendv = seg_sendv, .recvv = sp_recvv, .emss = sp_emss, .seg_size = sp_emss};

struct link {
	struct uiw_stream tx, rx;
	struct mpa_conn ctx, crx;
};

static void link_init_neg(struct link *k, const struct mpa_negotiated *neg, int sndbuf)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int big = 8 << 20;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, sndbuf ? &sndbuf : &big, sizeof(big));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	k->tx = (struct uiw_stream){.ops = &sp_ops, .fd = sv[0]};
	k->rx = (struct uiw_stream){.ops = &sp_ops, .fd = sv[1]};
	assert_int_equal(mpa_conn_init(&k->ctx, &k->tx, neg), 0);
	assert_int_equal(mpa_conn_init(&k->crx, &k->rx, neg), 0);
}

static void link_init(struct link *k, bool crc)
{
	struct mpa_negotiated neg = {.rev = 2, .crc = crc};
	link_init_neg(k, &neg, 0);
}

static void link_fini(struct link *k)
{
	mpa_conn_fini(&k->ctx);
	mpa_conn_fini(&k->crx);
	close(k->tx.fd);
	close(k->rx.fd);
}

/* Sends a whole message, pushing each batch as it fills. */
static void send_msg(struct link *k, const struct ddp_msg *m)
{
	struct ddp_txpos pos = {0};
	for (int i = 0; i < 100000; i++) {
		int r = ddp_tx_message(&k->ctx, m, &pos);
		assert_true(r >= 0);
		assert_int_equal(mpa_tx_push_wait(&k->ctx, 5000), 0);
		if (r == 1)
			return;
	}
	fail();
}

/* Waits (bounded) until f(k) stops saying -EAGAIN. */
#define RX_WAIT(k, call)                                                                           \
	({                                                                                         \
		int _r = -EAGAIN;                                                                  \
		for (int _i = 0; _i < 10000 && _r == -EAGAIN; _i++) {                              \
			_r = (call);                                                               \
			if (_r == -EAGAIN) {                                                       \
				struct pollfd _p = {.fd = (k)->rx.fd, .events = POLLIN};           \
				poll(&_p, 1, 100);                                                 \
			}                                                                          \
		}                                                                                  \
		_r;                                                                                \
	})

static int place_all(struct link *k, void *dst, uint32_t len)
{
	struct ddp_place p;
	struct iovec d = {dst, len};
	ddp_place_init(&p, &d, dst ? 1 : 0, len);
	return RX_WAIT(k, ddp_place_run(&k->crx, &p));
}

static void test_mulpdu_from_emss(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	/* RFC 5044 §4.1, markers off: 1448 - (6 + 0) */
	assert_int_equal(k.ctx.mulpdu, 1442);
	link_fini(&k);
	/* a peer that announced large FPDUs gets them (mpa/mpa_wire.h) */
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	link_init_neg(&k, &neg, 0);
	assert_int_equal(k.ctx.mulpdu, MPA_LARGE_MULPDU);
	link_fini(&k);
	/* ... but not with markers: every FPDU then fits a segment */
	neg.markers_tx = true;
	link_init_neg(&k, &neg, 0);
	assert_true(k.ctx.mulpdu < 1448);
	link_fini(&k);
}

static void test_crc_vector_on_wire(void **state)
{
	(void)state;
	/* RFC 3720 B.4 / interop notes §2.2 */
	assert_int_equal(uiw_crc32c(0, "123456789", 9), 0xE3069283u);
	uint8_t z[32] = {0};
	assert_int_equal(uiw_crc32c(0, z, 32), 0x8A9136AAu);
}

/* Sends one message of len bytes through DDP and checks every segment. */
static void roundtrip_neg(bool tagged, uint64_t len, const struct mpa_negotiated *neg)
{
	struct link k;
	link_init_neg(&k, neg, 0);
	uint8_t *src = malloc(len + 1), *dst = calloc(1, len + 1);
	for (uint64_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 7 + 1);
	/* two pieces to exercise slicing across SGEs */
	struct iovec iov[2] = {{src, len / 3}, {src + len / 3, len - len / 3}};
	struct ddp_msg m = {.tagged = tagged,
			    .ulp_ctrl =
				(uint8_t)(1 << 6 | (tagged ? RDMAP_RDMA_WRITE : RDMAP_SEND)),
			    .stag = 0x1234,
			    .to = 0x10000,
			    .qn = 0,
			    .msn = 5,
			    .iov = iov,
			    .niov = 2,
			    .len = len};
	send_msg(&k, &m);

	uint64_t off = 0;
	int segs = 0;
	for (;;) {
		struct ddp_rx_seg s;
		assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
		segs++;
		assert_int_equal(s.tagged, tagged);
		assert_int_equal(s.ddp_ctrl & DDP_VERSION_MASK, DDP_VERSION);
		assert_true(s.seg_len <= k.ctx.mulpdu);
		if (tagged) {
			assert_int_equal(s.stag, 0x1234);
			assert_int_equal(s.to, 0x10000 + off);
		} else {
			assert_int_equal(s.msn, 5);
			assert_int_equal(s.mo, off);
		}
		assert_int_equal(place_all(&k, dst + off, s.payload_len), 0);
		off += s.payload_len;
		if (s.last)
			break;
		assert_true(off < len);
	}
	assert_int_equal(off, len);
	if (len)
		assert_memory_equal(src, dst, len);
	uint64_t per = k.ctx.mulpdu - (tagged ? 14 : 18);
	int expect = len == 0 ? 1 : (int)((len + per - 1) / per);
	assert_int_equal(segs, expect);
	free(src);
	free(dst);
	link_fini(&k);
}

static void roundtrip(bool tagged, uint64_t len, bool crc)
{
	struct mpa_negotiated neg = {.rev = 2, .crc = crc};
	roundtrip_neg(tagged, len, &neg);
}

static void test_segmentation_sizes(void **state)
{
	(void)state;
	uint64_t sizes[] = {0, 1, 2, 3, 4, 5, 1427, 1428, 1429, 1424, 1425, 5000, 300000};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		roundtrip(true, sizes[i], true);
		roundtrip(false, sizes[i], true);
		roundtrip(true, sizes[i], false);
	}
}

/* Large FPDUs (both ends announced them): 64 KiB segments, placed from
 * the kernel straight into the target, about one receive call each. */
static void test_large_fpdus(void **state)
{
	(void)state;
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	uint64_t sizes[] = {0, 1, 65517, 65518, 65519, 65521, 200000, 1 << 20};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		roundtrip_neg(true, sizes[i], &neg);
		roundtrip_neg(false, sizes[i], &neg);
	}
	/* syscalls: a 1 MiB message in 17 FPDUs; the socketpair hands the
	 * bytes over as they come, so allow a few calls per FPDU */
	struct link k;
	link_init_neg(&k, &neg, 0);
	size_t len = 1 << 20;
	uint8_t *src = calloc(1, len), *dst = malloc(len);
	struct iovec iov = {src, len};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 9, .iov = &iov, .niov = 1, .len = len};
	send_msg(&k, &m);
	assert_true(k.ctx.tx_syscalls <= 8); /* 4 FPDUs of 64 KiB per batch */
	size_t off = 0;
	while (off < len) {
		struct ddp_rx_seg s;
		assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
		assert_int_equal(place_all(&k, dst + off, s.payload_len), 0);
		off += s.payload_len;
	}
	assert_memory_equal(src, dst, len);
	assert_true(k.crx.rx_syscalls <= 3 * 17);
	free(src);
	free(dst);
	link_fini(&k);
}

static void test_fpdu_bytes_on_wire(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	uint8_t pl[3] = {0xaa, 0xbb, 0xcc};
	struct iovec iov = {pl, 3};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 1, .to = 0, .iov = &iov, .niov = 1, .len = 3};
	send_msg(&k, &m);
	uint8_t w[64];
	/* 2 length + 14 header + 3 payload = 19, pad 1 -> 20, + CRC 4 = 24 */
	assert_int_equal(recv(k.rx.fd, w, sizeof(w), 0), 24);
	assert_int_equal(w[0], 0);
	assert_int_equal(w[1], 17); /* ULPDU_Length excludes itself, pad, CRC */
	assert_int_equal(w[2], DDP_FLAG_TAGGED | DDP_FLAG_LAST | DDP_VERSION);
	assert_int_equal(w[19], 0); /* pad */
	uint32_t crc = uiw_crc32c(0, w, 20);
	assert_int_equal(w[20], crc & 0xff); /* least significant byte first */
	assert_int_equal(w[23], crc >> 24);
	link_fini(&k);
}

static void test_corruption_detected(void **state)
{
	(void)state;
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	struct link k;
	link_init_neg(&k, &neg, 0);
	/* a payload placed straight into the target: checked after */
	size_t len = 40000;
	uint8_t *pl = malloc(len), *d = malloc(len);
	memset(pl, 0x5a, len);
	struct iovec iov = {pl, len};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = 0x40,
			    .stag = 9,
			    .to = 0,
			    .iov = &iov,
			    .niov = 1,
			    .len = len};
	struct ddp_txpos pos = {0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
	/* flip one payload byte inside the batch's referenced buffer after
	 * the CRC was computed */
	pl[5000] ^= 1;
	assert_int_equal(mpa_tx_push_wait(&k.ctx, 5000), 0);
	struct ddp_rx_seg s;
	assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
	assert_int_equal(place_all(&k, d, s.payload_len), -EBADMSG);
	assert_int_equal(k.crx.rx_term, MPA_TERM_CRC);
	free(pl);
	free(d);
	link_fini(&k);
}

static void test_small_path_places_nothing_on_bad_crc(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	/* above MPA_TX_COPY_MAX (referenced, not copied), below
	 * MPA_RX_SMALL_MAX (checked before placement) */
	enum { L = 1000 };
	uint8_t pl[L], d[L];
	memset(pl, 0x5a, sizeof(pl));
	memset(d, 0xee, sizeof(d));
	struct iovec iov = {pl, sizeof(pl)};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = 0x40,
			    .stag = 9,
			    .to = 0,
			    .iov = &iov,
			    .niov = 1,
			    .len = sizeof(pl)};
	/* a good FPDU, then a corrupted one */
	send_msg(&k, &m);
	struct ddp_txpos pos = {0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
	pl[7] ^= 0x80;
	assert_int_equal(mpa_tx_push_wait(&k.ctx, 5000), 0);
	struct ddp_rx_seg s;
	assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
	assert_int_equal(place_all(&k, d, s.payload_len), 0);
	assert_int_equal(d[7], 0x5a);
	memset(d, 0xee, sizeof(d));
	assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
	assert_int_equal(place_all(&k, d, s.payload_len), -EBADMSG);
	for (size_t i = 0; i < sizeof(d); i++)
		assert_int_equal(d[i], 0xee); /* nothing placed */
	link_fini(&k);
}

/* A target shorter than the payload (ddp_place_init: a Terminate's payload
 * beyond what rdmap/rx.c keeps) takes its bytes, the rest is read and
 * dropped, the CRC still checked, and the next FPDU is read right: a
 * 200-byte and a 20000-byte payload (above MPA_RX_SMALL_MAX) into 50
 * bytes with guards. Found by tests/fuzz/fuzz_fpdu (ddp_place_run asked
 * mpa_rx_payload for the whole payload and got -EINVAL). */
static void test_short_target_drops_the_rest(void **state)
{
	(void)state;
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	struct link k;
	link_init_neg(&k, &neg, 0);
	static uint8_t pl[20000];
	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (uint8_t)(i * 13 + 1);
	static const uint32_t lens[] = {200, sizeof(pl), 8};
	for (size_t n = 0; n < 3; n++) {
		struct iovec iov = {pl, lens[n]};
		struct ddp_msg m = {.ulp_ctrl = 0x47,
				    .qn = 2,
				    .msn = (uint32_t)n + 1,
				    .iov = &iov,
				    .niov = 1,
				    .len = lens[n]};
		send_msg(&k, &m);
	}
	for (size_t n = 0; n < 3; n++) {
		struct ddp_rx_seg s;
		assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
		assert_int_equal(s.payload_len, lens[n]);
		uint8_t d[16 + 50 + 16];
		memset(d, 0xee, sizeof(d));
		struct ddp_place p;
		struct iovec v = {d + 16, 50};
		ddp_place_init(&p, &v, 1, s.payload_len);
		assert_int_equal(p.room, lens[n] < 50 ? lens[n] : 50);
		assert_int_equal(RX_WAIT(&k, ddp_place_run(&k.crx, &p)), 0);
		assert_int_equal(p.done, lens[n]);
		assert_memory_equal(d + 16, pl, p.room);
		for (size_t i = 0; i < sizeof(d); i++)
			if (i < 16 || i >= 16 + p.room)
				assert_int_equal(d[i], 0xee);
	}
	link_fini(&k);
}

/* A payload of at most MPA_TX_COPY_MAX bytes is copied into the batch: what
 * goes out, and what its CRC covers, is the buffer as it was when the FPDU
 * was built, even if the buffer changes before the batch is pushed. */
static void test_small_payload_copied(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	uint8_t pl[MPA_TX_COPY_MAX], d[MPA_TX_COPY_MAX];
	memset(pl, 0x11, sizeof(pl));
	struct iovec iov[2] = {{pl, 40}, {pl + 40, sizeof(pl) - 40}};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 9, .iov = iov, .niov = 2, .len = sizeof(pl)};
	struct ddp_txpos pos = {0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
	assert_int_equal(k.ctx.tx->niov, 2); /* length + header + payload, pad + CRC */
	memset(pl, 0x22, sizeof(pl));
	assert_int_equal(mpa_tx_push_wait(&k.ctx, 5000), 0);
	struct ddp_rx_seg s;
	assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
	assert_int_equal(place_all(&k, d, s.payload_len), 0);
	for (size_t i = 0; i < sizeof(d); i++)
		assert_int_equal(d[i], 0x11);
	link_fini(&k);
}

static void test_small_fpdus_bulk_receive(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	size_t len = 400 * 1428;
	uint8_t *src = malloc(len), *dst = calloc(1, len);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 13);
	struct iovec iov = {src, len};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = 0x40,
			    .stag = 9,
			    .to = 0,
			    .iov = &iov,
			    .niov = 1,
			    .len = len};
	send_msg(&k, &m);
	size_t off = 0;
	for (int i = 0; i < 400; i++) {
		struct ddp_rx_seg s;
		assert_int_equal(RX_WAIT(&k, ddp_rx_header(&k.crx, &s)), 1);
		assert_int_equal(s.to, off);
		assert_int_equal(place_all(&k, dst + off, s.payload_len), 0);
		off += s.payload_len;
	}
	assert_int_equal(off, len);
	assert_memory_equal(src, dst, len);
	/* many FPDUs per receive syscall */
	assert_true(k.crx.rx_syscalls < 100);
	free(src);
	free(dst);
	link_fini(&k);
}

static void test_many_fpdus_one_syscall(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	size_t len = 40 * 1428;
	uint8_t *src = calloc(1, len);
	struct iovec iov = {src, len};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = 0x40,
			    .stag = 9,
			    .to = 0,
			    .iov = &iov,
			    .niov = 1,
			    .len = len};
	struct ddp_txpos pos = {0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
	assert_int_equal(k.ctx.tx->nfpdu, 40);
	assert_int_equal(mpa_tx_push(&k.ctx), 1);
	assert_int_equal(k.ctx.tx_syscalls, 1);
	assert_int_equal(k.ctx.tx_fpdus, 40);
	free(src);
	link_fini(&k);
}

/* One step of a receiver driven the way the engine drives it: header,
 * then placement into dst + *off, each call non-blocking. Returns the
 * call's result (-EAGAIN: nothing happened); *done is set when a segment
 * was placed whole. */
struct rx_sm {
	struct ddp_rx_seg s;
	struct ddp_place p;
	int st; /* 0 header, 1 placing */
};

static int rx_step(struct mpa_conn *c, struct rx_sm *m, uint8_t *dst, size_t *off, bool *done)
{
	*done = false;
	int r = m->st == 0 ? ddp_rx_header(c, &m->s) : ddp_place_run(c, &m->p);
	if (r == -EAGAIN)
		return r;
	if (m->st == 0) {
		assert_int_equal(r, 1);
		struct iovec d = {dst + *off, m->s.payload_len};
		ddp_place_init(&m->p, &d, 1, m->s.payload_len);
		m->st = 1;
	} else {
		assert_int_equal(r, 0);
		*off += m->s.payload_len;
		m->st = 0;
		*done = true;
	}
	return r;
}

/* The receive side resumes at every byte: the stream hands it the FPDUs of
 * a mixed sequence (small untagged, small tagged, large tagged) one byte at
 * a time, -EAGAIN in between, and everything lands as sent. */
static void test_rx_resumes_at_every_byte(void **state)
{
	(void)state;
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	struct link k;
	link_init_neg(&k, &neg, 0);
	enum { N = 3 };
	size_t lens[N] = {37, 5000, 70000};
	uint8_t *src[N], *dst[N];
	size_t total = 0;
	for (int i = 0; i < N; i++) {
		src[i] = malloc(lens[i]);
		dst[i] = calloc(1, lens[i]);
		for (size_t j = 0; j < lens[i]; j++)
			src[i][j] = (uint8_t)(j * 31 + i);
		struct iovec iov = {src[i], lens[i]};
		struct ddp_msg m = {.tagged = i > 0,
				    .ulp_ctrl =
					(uint8_t)(1 << 6 | (i ? RDMAP_RDMA_WRITE : RDMAP_SEND)),
				    .stag = 7,
				    .to = 0,
				    .msn = 1,
				    .iov = &iov,
				    .niov = 1,
				    .len = lens[i]};
		send_msg(&k, &m);
		total += lens[i];
	}
	/* move the bytes to a second pair, one byte per write */
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	struct uiw_stream slow = {.ops = &sp_ops, .fd = sv[1]};
	struct mpa_conn c;
	assert_int_equal(mpa_conn_init(&c, &slow, &neg), 0);
	int fl = fcntl(k.rx.fd, F_GETFL);
	fcntl(k.rx.fd, F_SETFL, fl | O_NONBLOCK);
	int m = 0;
	size_t off = 0, eagains = 0;
	struct rx_sm sm = {0};
	for (long guard = 0; guard < 10000000 && m < N; guard++) {
		bool done;
		if (rx_step(&c, &sm, dst[m], &off, &done) == -EAGAIN) {
			eagains++;
			uint8_t b;
			assert_int_equal(read(k.rx.fd, &b, 1), 1);
			assert_int_equal(write(sv[0], &b, 1), 1);
			continue;
		}
		if (done && sm.s.last) {
			assert_int_equal(off, lens[m]);
			assert_memory_equal(src[m], dst[m], lens[m]);
			m++;
			off = 0;
		}
	}
	assert_int_equal(m, N);
	assert_true(eagains >= total);
	for (int i = 0; i < N; i++) {
		free(src[i]);
		free(dst[i]);
	}
	mpa_conn_fini(&c);
	close(sv[0]);
	close(sv[1]);
	link_fini(&k);
}

/* A stream that takes a little of each batch: the batch goes out in many
 * pushes, the bytes arrive whole and in order. */
static void test_tx_partial_pushes(void **state)
{
	(void)state;
	struct link k;
	struct mpa_negotiated neg = {.rev = 2, .crc = true};
	link_init_neg(&k, &neg, 4096);
	size_t len = 300000;
	uint8_t *src = malloc(len), *dst = calloc(1, len);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 11 + 3);
	struct iovec iov = {src, len};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 3, .iov = &iov, .niov = 1, .len = len};
	struct ddp_txpos pos = {0};
	size_t off = 0, partial = 0;
	bool done = false, placed;
	struct rx_sm sm = {0};
	for (long guard = 0; guard < 1000000 && off < len; guard++) {
		if (!done && !mpa_tx_busy(&k.ctx))
			done = ddp_tx_message(&k.ctx, &m, &pos) == 1;
		int r = mpa_tx_push(&k.ctx);
		assert_true(r >= 0);
		partial += r == 0;
		size_t at = off;
		if (rx_step(&k.crx, &sm, dst, &off, &placed) != -EAGAIN && sm.st == 1)
			assert_int_equal(sm.s.to, at);
	}
	assert_int_equal(off, len);
	assert_memory_equal(src, dst, len);
	assert_true(partial > 0);
	free(src);
	free(dst);
	link_fini(&k);
}

/* A streaming sender's pushes (mpa_tx_push_held) end on segment
 * boundaries: whole segments of EMSS bytes go, the rest waits in the carry
 * and goes in front of the next batch; a push that is not held sends it
 * all. The receiver gets every message byte for byte. Not with FPDUs of
 * one segment each, nor for a batch of less than a segment. */
static void test_tx_whole_segments(void **state)
{
	(void)state;
	struct link k;
	struct mpa_negotiated neg = {.rev = 2, .crc = true, .large_tx = true};
	link_init_neg(&k, &neg, 0);
	k.tx.ops = &seg_ops;
	mpa_conn_fini(&k.ctx);
	assert_int_equal(mpa_conn_init(&k.ctx, &k.tx, &neg), 0);
	assert_int_equal(k.ctx.tx_seg, 1448);
	enum { N = 3, LEN = 65536 };
	uint8_t *src = malloc(N * LEN), *dst = calloc(1, N * LEN);
	for (size_t i = 0; i < N * LEN; i++)
		src[i] = (uint8_t)(i * 7 + 1);
	seg_nsends = 0;
	size_t wire = 0;
	for (int j = 0; j < N; j++) {
		struct iovec iov = {src + j * LEN, LEN};
		struct ddp_msg m = {.tagged = true,
				    .ulp_ctrl = 0x40,
				    .stag = 3,
				    .to = (uint64_t)j * LEN,
				    .iov = &iov,
				    .niov = 1,
				    .len = LEN};
		struct ddp_txpos pos = {0};
		assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
		wire += k.ctx.tx->bytes;
		assert_int_equal(j < N - 1 ? mpa_tx_push_held(&k.ctx) : mpa_tx_push(&k.ctx), 1);
		assert_true(mpa_tx_empty(&k.ctx));
		/* held: what did not fill a segment waits; the last push sent it */
		assert_int_equal(k.ctx.tx->carry_len, j < N - 1 ? wire % 1448 : 0);
		assert_int_equal(mpa_tx_busy(&k.ctx), j < N - 1 && wire % 1448);
	}
	assert_int_equal(seg_nsends, N);
	size_t sum = 0;
	for (int j = 0; j < N; j++) {
		if (j < N - 1)
			assert_int_equal(seg_sends[j] % 1448, 0);
		sum += seg_sends[j];
	}
	assert_int_equal(sum, wire);
	size_t off = 0;
	bool placed;
	struct rx_sm sm = {0};
	for (long guard = 0; guard < 100000 && off < N * LEN; guard++)
		(void)rx_step(&k.crx, &sm, dst, &off, &placed);
	assert_int_equal(off, N * LEN);
	assert_memory_equal(src, dst, N * LEN);

	/* less than a segment: it goes whole */
	seg_nsends = 0;
	struct iovec small = {src, 1000};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 3, .iov = &small, .niov = 1, .len = 1000};
	struct ddp_txpos pos = {0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m, &pos), 1);
	assert_int_equal(mpa_tx_push_held(&k.ctx), 1);
	assert_false(mpa_tx_busy(&k.ctx));
	assert_int_equal(seg_nsends, 1);
	link_fini(&k);

	/* FPDUs of one segment each keep their segment boundaries: no carry */
	struct mpa_negotiated mss = {.rev = 2, .crc = true};
	link_init_neg(&k, &mss, 0);
	k.tx.ops = &seg_ops;
	mpa_conn_fini(&k.ctx);
	assert_int_equal(mpa_conn_init(&k.ctx, &k.tx, &mss), 0);
	assert_int_equal(k.ctx.tx_seg, 0);
	struct iovec iov = {src, 5000};
	struct ddp_msg m2 = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 3, .iov = &iov, .niov = 1, .len = 5000};
	pos = (struct ddp_txpos){0};
	assert_int_equal(ddp_tx_message(&k.ctx, &m2, &pos), 1);
	assert_int_equal(mpa_tx_push_held(&k.ctx), 1);
	assert_false(mpa_tx_busy(&k.ctx));
	free(src);
	free(dst);
	link_fini(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mulpdu_from_emss),
	    cmocka_unit_test(test_crc_vector_on_wire),
	    cmocka_unit_test(test_segmentation_sizes),
	    cmocka_unit_test(test_large_fpdus),
	    cmocka_unit_test(test_fpdu_bytes_on_wire),
	    cmocka_unit_test(test_corruption_detected),
	    cmocka_unit_test(test_small_path_places_nothing_on_bad_crc),
	    cmocka_unit_test(test_small_payload_copied),
	    cmocka_unit_test(test_short_target_drops_the_rest),
	    cmocka_unit_test(test_small_fpdus_bulk_receive),
	    cmocka_unit_test(test_many_fpdus_one_syscall),
	    cmocka_unit_test(test_rx_resumes_at_every_byte),
	    cmocka_unit_test(test_tx_partial_pushes),
	    cmocka_unit_test(test_tx_whole_segments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
