/* libFuzzer harness: the DDP/RDMAP receive path (rdmap/rx.c, RFC 5040 §5
 * and §7, RFC 5041 §7, RFC 7306) of a real QP with registered memory,
 * driven through an in-memory stream (fuzz_stream.h) after the MPA
 * exchange: tagged (RDMA Write, Read Response) and untagged (Send, Send
 * with Invalidate, Read Request, Immediate Data, Atomic Request and
 * Response, Terminate) segments, with the send side answering (Read and
 * Atomic Responses, our Terminate) into the same stream.
 *
 * Input: byte 0 flags, byte 1 the receive chunk size (0: all there is),
 * byte 2 the connection, then the peer's byte stream.
 *   flags 0x01 CRC          0x02 markers both ways (RFC 5044 §5)
 *         0x04 stall: every other read is -EAGAIN
 *         0x08 the stream ends in a reset instead of a FIN
 *         0x10 framed: the rest is a list of ULPDUs (fuzz_frame) framed
 *              with correct lengths, CRC and markers by the library's
 *              sender, their STags pointed at our MRs (below); otherwise
 *              raw stream bytes
 *         0x20 RFC 7306 negotiated (Immediate Data, Atomics)
 *         0x40 we are the responder (else the initiator)
 *         0x80 peer-to-peer: the first FPDU must be the RTR of kind
 *              byte 2 & 3 (1 Send, 2 Write, 3 Read; RFC 6581 §4)
 * In framed mode an STag field (tagged header; Send with Invalidate's
 * Invalidate STag; Read Request's source STag; Atomic Request's STag)
 * whose value is 0..3 becomes the STag of MR 0..3, so the fuzzer reaches
 * placement without guessing STags (which differ per registration).
 *
 * Memory, one arena, MRs with guard bytes between them:
 *   MR 0 (iova 0x10000, 64 KiB) local/remote write, remote read, atomic:
 *        the target of Writes and Atomics, may change anywhere
 *   MR 1 (iova 0x20000, 4 KiB) local write only: receive WRs at
 *        [0, 512) [512, 1024) [1024, 1280)+[1536, 1792); nothing else of
 *        it may change
 *   MR 2 (iova 0x30000, 4 KiB) remote read only: never changes
 *   MR 3 (iova 0x40000, 4 KiB) local and remote write (an iWARP Read
 *        sink needs both): the sink of our RDMA Read [0, 1024) and of our
 *        Fetch and Add [1024, 1032); may change anywhere
 * After each input: no sanitizer report, the guards and every byte
 * outside what a validated STag or a posted receive names are unchanged
 * ("never places a byte outside a validated STag range"), and completed
 * receives report no more bytes than they posted. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_stream.h"
#include "rdmap/internal.h"

#define MRLEN 4096
#define MR0LEN 65536 /* room for Writes above MPA_RX_SMALL_MAX (placed as they arrive) */
#define GUARD 256
#define NMR 4
#define MAX_STREAM (1 << 18)

static uint8_t arena[GUARD + MR0LEN + GUARD + (NMR - 1) * (MRLEN + GUARD)];
static uint8_t before[sizeof(arena)];

static size_t mr_len(int i)
{
	return i == 0 ? MR0LEN : MRLEN;
}

/* MR i's offset in the arena: guard, MR 0, guard, MR 1, guard, ... */
static size_t mr_off(int i)
{
	return i == 0 ? GUARD : GUARD + MR0LEN + GUARD + (size_t)(i - 1) * (MRLEN + GUARD);
}

static uint8_t *mr_base(int i)
{
	return arena + mr_off(i);
}

static uint64_t mr_iova(int i)
{
	return (uint64_t)(i + 1) << 16;
}

/* The ranges of MR 1 the posted receives may write. */
static const struct {
	uint32_t off, len;
} mr1_ok[] = {{0, 1280}, {1536, 256}};

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A field at off of a ULPDU of len bytes whose value is 0..NMR-1 becomes
 * that MR's STag. */
static void patch_stag(uint8_t *u, size_t len, size_t off, const uint32_t *stags)
{
	if (off + 4 <= len && get32(u + off) < NMR)
		put32(u + off, stags[get32(u + off)]);
}

static void patch(uint8_t *u, size_t len, void *ctx)
{
	const uint32_t *stags = ctx;
	if (len < 2)
		return;
	if (u[0] & DDP_FLAG_TAGGED) {
		patch_stag(u, len, 2, stags);
		return;
	}
	switch (u[1] & RDMAP_OPCODE_MASK) {
	case RDMAP_SEND_INV:
	case RDMAP_SEND_SE_INV:
		patch_stag(u, len, 2, stags);
		break;
	case RDMAP_RDMA_READ_REQ: /* 18 + offsetof(src_stag) */
		patch_stag(u, len, DDP_UNTAGGED_HDR_LEN + 16, stags);
		break;
	case RDMAP_ATOMIC_REQ: /* 18 + offsetof(stag) */
		patch_stag(u, len, DDP_UNTAGGED_HDR_LEN + 8, stags);
		break;
	}
}

static void check_memory(void)
{
	for (size_t i = 0; i < sizeof(arena); i++) {
		if (arena[i] == before[i])
			continue;
		int mr = -1;
		for (int k = 0; k < NMR; k++)
			if (i >= mr_off(k) && i < mr_off(k) + mr_len(k))
				mr = k;
		if (mr < 0)
			__builtin_trap(); /* a guard byte changed */
		uint32_t o = (uint32_t)(i - mr_off(mr));
		if (mr == 2)
			__builtin_trap(); /* written through a read-only STag */
		if (mr == 1) {
			bool ok = false;
			for (size_t k = 0; k < sizeof(mr1_ok) / sizeof(mr1_ok[0]); k++)
				ok |= o >= mr1_ok[k].off && o < mr1_ok[k].off + mr1_ok[k].len;
			if (!ok)
				__builtin_trap(); /* MR 1 outside a posted buffer */
		}
	}
}

static void post(struct uiw_qp *qp, struct uiw_mr *const *mr, bool rfc7306)
{
	static const uint32_t rx[][2] = {{0, 512}, {512, 512}, {1024, 256}};
	int bad;
	for (int i = 0; i < 3; i++) {
		struct uiw_sge sge[2] = {
		    {.addr = mr_iova(1) + rx[i][0], .length = rx[i][1], .lkey = mr[1]->stag},
		    {.addr = mr_iova(1) + 1536, .length = 256, .lkey = mr[1]->stag}};
		struct uiw_recv_wr wr = {
		    .wr_id = (uint64_t)i, .sg_list = sge, .num_sge = i == 2 ? 2 : 1};
		(void)uiw_qp_post_recv(qp, &wr, 1, &bad);
	}
	/* an RDMA Read of 1 KiB (its Response may come) and, with RFC 7306,
	 * a Fetch and Add (its Atomic Response may come) */
	struct uiw_sge rs = {.addr = mr_iova(3), .length = 1024, .lkey = mr[3]->stag};
	struct uiw_send_wr rd = {.wr_id = 10,
				 .opcode = UIW_WR_RDMA_READ,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &rs,
				 .num_sge = 1,
				 .remote_addr = 0x5000,
				 .rkey = 0x1234};
	(void)uiw_qp_post_send(qp, &rd, 1, &bad);
	if (rfc7306) {
		struct uiw_sge as = {.addr = mr_iova(3) + 1024, .length = 8, .lkey = mr[3]->stag};
		struct uiw_send_wr at = {.wr_id = 11,
					 .opcode = UIW_WR_ATOMIC_FETCH_AND_ADD,
					 .flags = UIW_SEND_SIGNALED,
					 .sg_list = &as,
					 .num_sge = 1,
					 .remote_addr = 0x6000,
					 .rkey = 0x1235,
					 .compare_add = 1};
		(void)uiw_qp_post_send(qp, &at, 1, &bad);
	}
}

/* FUZZ_VERBOSE=1 in the environment: each completion and the end of
 * each input on stderr (to see what an input does). */
static bool verbose;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *v = getenv("FUZZ_VERBOSE");
	verbose = v && *v && strcmp(v, "0");
	return 0;
}

static void poll_cq(struct uiw_cq *cq)
{
	struct uiw_wc wc[16];
	int n;
	while ((n = uiw_cq_poll(cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++) {
			if (verbose)
				fprintf(stderr,
					"fuzz_rdmap_rx: wc wr_id %llu status %d opcode %d len %u\n",
					(unsigned long long)wc[i].wr_id, wc[i].status, wc[i].opcode,
					wc[i].byte_len);
			if (wc[i].status == UIW_WC_SUCCESS && wc[i].wr_id < 3 &&
			    wc[i].byte_len > 512)
				__builtin_trap(); /* more than the receive posted */
		}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3 || size > MAX_STREAM)
		return 0;
	uint8_t flags = data[0];
	struct mpa_negotiated neg = fuzz_neg(flags);
	neg.rfc7306 = flags & 0x20;
	neg.initiator = !(flags & 0x40);
	neg.p2p = flags & 0x80;
	neg.ird = neg.ord = 8;
	static const uint8_t rtr[] = {0, MPA_RTR_SEND, MPA_RTR_WRITE, MPA_RTR_READ};
	neg.rtr = neg.p2p ? rtr[data[2] & 3] : 0;

	struct uiw_pd *pd = uiw_pd_alloc();
	struct uiw_cq *cq = NULL;
	struct uiw_mr *mr[NMR] = {0};
	struct uiw_qp *qp = NULL;
	if (!pd || uiw_cq_create(256, NULL, NULL, &cq))
		abort();
	static const unsigned access[NMR] = {UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE |
						 UIW_ACCESS_REMOTE_READ | UIW_ACCESS_REMOTE_ATOMIC,
					     UIW_ACCESS_LOCAL_WRITE, UIW_ACCESS_REMOTE_READ,
					     UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE};
	memset(arena, 0x5a, sizeof(arena));
	uint32_t stags[NMR];
	for (int i = 0; i < NMR; i++) {
		if (uiw_mr_reg(pd, mr_base(i), mr_len(i), mr_iova(i), access[i], &mr[i]))
			abort();
		stags[i] = mr[i]->stag;
	}
	struct uiw_qp_init_attr a = {.pd = pd,
				     .send_cq = cq,
				     .recv_cq = cq,
				     .max_send_wr = 16,
				     .max_recv_wr = 16,
				     .max_send_sge = 2,
				     .max_recv_sge = 2,
				     .max_inline = 64};
	if (uiw_qp_create(&a, &qp))
		abort();

	/* the peer frames what it sends as we frame what we send */
	struct mpa_negotiated peer = neg;
	peer.large_tx = !neg.markers_tx;
	struct mem_stream ms;
	fuzz_stream_setup(&ms, flags, data[1], data + 3, size - 3, &peer, patch, stags);
	size_t len = ms.rx_len;
	if (uiw_qp_attach_driven(qp, &ms.s, &neg))
		abort();
	post(qp, mr, neg.rfc7306);
	poll_cq(cq);
	memcpy(before, arena, sizeof(arena));

	/* every pass consumes bytes (at least one in two reads, the stream
	 * stalls on the other) or moves the close along */
	size_t passes = 4 * (len + 16);
	bool closed = false;
	for (size_t i = 0; i < passes && !closed; i++) {
		uiw_progress(qp, PROG_RX | PROG_TX, ROLE_POLLER);
		poll_cq(cq);
		pthread_mutex_lock(&qp->lock);
		closed = qp->phase == CONN_CLOSED;
		pthread_mutex_unlock(&qp->lock);
	}
	struct uiw_term_info ti;
	uiw_qp_term_info(qp, &ti);
	/* whatever the peer sent, the connection has ended (its FIN, a reset,
	 * or our Terminate: RFC 5040 §6.3, the stream closes after it), and
	 * our side of the stream is closed */
	if (!closed || !(ms.shut || ms.aborted))
		__builtin_trap();
	if (verbose) {
		fprintf(stderr,
			"fuzz_rdmap_rx: %zu of %zu stream bytes read, phase %d, terminate %s "
			"layer %u etype %u ecode %u\n",
			ms.rx_pos, ms.rx_len, qp->phase,
			!ti.valid ? "none"
			: ti.sent ? "sent"
				  : "received",
			ti.layer, ti.etype, ti.ecode);
	}
	check_memory();
	uiw_qp_destroy(qp);
	poll_cq(cq);
	check_memory();
	for (int i = 0; i < NMR; i++)
		uiw_mr_dereg(mr[i]);
	uiw_cq_destroy(cq);
	uiw_pd_free(pd);
	return 0;
}
