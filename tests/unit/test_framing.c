/* FPDU framing (RFC 5044 §4) and DDP segmentation (RFC 5041 §5) through a
 * test LLP over a socketpair: lengths, pad to 4, CRC32c, L flag on the last
 * segment only, TO / MO progression, and a corrupted byte detected. */
#include <endian.h>
#include <errno.h>
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

/* ------------------------------------------------ a socketpair LLP */

static ssize_t sp_sendv(struct uiw_llp *l, const struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	ssize_t r = sendmsg(l->fd, &m, 0);
	return r < 0 ? -errno : ((size_t)r == total ? r : -EIO);
}

static ssize_t sp_recvv(struct uiw_llp *l, const struct iovec *iov, int n, int tmo)
{
	(void)tmo;
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
	ssize_t r = recvmsg(l->fd, &m, 0);
	return r < 0 ? -errno : r;
}

static int sp_emss(struct uiw_llp *l)
{
	(void)l;
	return 1448;
}

static const struct uiw_llp_ops sp_ops = {.sendv = sp_sendv, .recvv = sp_recvv, .emss = sp_emss};

struct link {
	struct uiw_llp tx, rx;
	struct mpa_conn ctx, crx;
	struct mpa_txbatch b;
};

static void link_init(struct link *k, bool crc)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int big = 8 << 20;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	k->tx = (struct uiw_llp){.ops = &sp_ops, .fd = sv[0]};
	k->rx = (struct uiw_llp){.ops = &sp_ops, .fd = sv[1]};
	struct mpa_negotiated neg = {.rev = 2, .crc = crc};
	assert_int_equal(mpa_conn_init(&k->ctx, &k->tx, &neg), 0);
	assert_int_equal(mpa_conn_init(&k->crx, &k->rx, &neg), 0);
	mpa_tx_begin(&k->b);
}

static void link_fini(struct link *k)
{
	mpa_conn_fini(&k->ctx);
	mpa_conn_fini(&k->crx);
	close(k->tx.fd);
	close(k->rx.fd);
}

static void test_mulpdu_from_emss(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	/* RFC 5044 §4.1, markers off: 1448 - (6 + 0) */
	assert_int_equal(k.ctx.mulpdu, 1442);
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
static void roundtrip(bool tagged, uint64_t len, bool crc)
{
	struct link k;
	link_init(&k, crc);
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
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);

	uint64_t off = 0;
	int segs = 0;
	for (;;) {
		struct ddp_rx_seg s;
		assert_int_equal(ddp_rx_header(&k.crx, &s), 1);
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
		struct iovec d = {dst + off, s.payload_len};
		assert_int_equal(ddp_rx_payload(&k.crx, &d, 1, s.payload_len), 0);
		assert_int_equal(ddp_rx_end(&k.crx), 0);
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

static void test_fpdu_bytes_on_wire(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	uint8_t pl[3] = {0xaa, 0xbb, 0xcc};
	struct iovec iov = {pl, 3};
	struct ddp_msg m = {
	    .tagged = true, .ulp_ctrl = 0x40, .stag = 1, .to = 0, .iov = &iov, .niov = 1, .len = 3};
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
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
	struct link k;
	link_init(&k, true);
	uint8_t pl[100];
	memset(pl, 0x5a, sizeof(pl));
	struct iovec iov = {pl, sizeof(pl)};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = 0x40,
			    .stag = 9,
			    .to = 0,
			    .iov = &iov,
			    .niov = 1,
			    .len = sizeof(pl)};
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	/* flip one payload byte inside the batch's referenced buffer after
	 * the CRC was computed */
	pl[50] ^= 1;
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
	struct ddp_rx_seg s;
	assert_int_equal(ddp_rx_header(&k.crx, &s), 1);
	uint8_t d[100];
	struct iovec dv = {d, sizeof(d)};
	assert_int_equal(ddp_rx_payload(&k.crx, &dv, 1, s.payload_len), 0);
	assert_int_equal(ddp_rx_end(&k.crx), -EBADMSG);
	link_fini(&k);
}

static void test_small_path_places_nothing_on_bad_crc(void **state)
{
	(void)state;
	struct link k;
	link_init(&k, true);
	uint8_t pl[100], d[100];
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
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	pl[7] ^= 0x80;
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
	struct ddp_rx_seg s;
	struct iovec dv = {d, sizeof(d)};
	assert_int_equal(ddp_rx_header(&k.crx, &s), 1);
	assert_int_equal(ddp_rx_small(&k.crx, &dv, 1, s.payload_len), 0);
	assert_int_equal(d[7], 0x5a);
	memset(d, 0xee, sizeof(d));
	assert_int_equal(ddp_rx_header(&k.crx, &s), 1);
	assert_int_equal(ddp_rx_small(&k.crx, &dv, 1, s.payload_len), -EBADMSG);
	for (size_t i = 0; i < sizeof(d); i++)
		assert_int_equal(d[i], 0xee); /* nothing placed */
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
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
	size_t off = 0;
	for (int i = 0; i < 400; i++) {
		struct ddp_rx_seg s;
		assert_int_equal(ddp_rx_header(&k.crx, &s), 1);
		assert_int_equal(s.to, off);
		struct iovec dv = {dst + off, s.payload_len};
		assert_int_equal(ddp_rx_small(&k.crx, &dv, 1, s.payload_len), 0);
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
	assert_int_equal(ddp_send_message(&k.ctx, &k.b, &m), 0);
	assert_int_equal(k.b.nfpdu, 40);
	assert_int_equal(mpa_tx_flush(&k.ctx, &k.b), 0);
	assert_int_equal(k.ctx.tx_syscalls, 1);
	assert_int_equal(k.ctx.tx_fpdus, 40);
	free(src);
	link_fini(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mulpdu_from_emss),
	    cmocka_unit_test(test_crc_vector_on_wire),
	    cmocka_unit_test(test_segmentation_sizes),
	    cmocka_unit_test(test_fpdu_bytes_on_wire),
	    cmocka_unit_test(test_corruption_detected),
	    cmocka_unit_test(test_small_path_places_nothing_on_bad_crc),
	    cmocka_unit_test(test_small_fpdus_bulk_receive),
	    cmocka_unit_test(test_many_fpdus_one_syscall),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
