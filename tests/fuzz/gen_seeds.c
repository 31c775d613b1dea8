/* Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<h>/)
 * from the bytes the library's own encoders put on the wire: MPA Requests
 * and Replies from mpa_initiate / mpa_send_accept / mpa_send_reject
 * (RFC 5044 §7.1, RFC 6581 §5), DDP/RDMAP messages from ddp_tx_message and
 * Terminates from uiw_term_build (RFC 5040 §4, RFC 5041 §4, RFC 7306) in
 * both harness input forms (raw FPDU stream, and the ULPDU list that
 * fuzz_frame frames), and iwpm datagrams from iwpm_msg_encode.
 *
 *   fuzz_gen_seeds DIR     (DIR/fuzz_mpa_rr, DIR/fuzz_fpdu, ... must exist)
 *
 * Seed names say what they are; running it again rewrites the same files
 * with the same bytes. Exit status 0, or 1 with a message on stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp/ddp.h"
#include "fuzz_stream.h"
#include "iwpm/iwpm_wire.h"
#include "rdmap/internal.h"

static const char *dir;
static int failed;

static void put(const char *harness, const char *name, const uint8_t *pre, size_t pre_len,
		const uint8_t *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s/%s", dir, harness, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(pre, 1, pre_len, f) != pre_len || fwrite(p, 1, n, f) != n) {
		fprintf(stderr, "gen_seeds: cannot write %s: %s\n", path, strerror(errno));
		failed = 1;
	}
	if (f)
		fclose(f);
}

/* ------------------------------------------------------------ MPA setup */

/* The bytes one end of a socketpair received, after fn ran on the other. */
static size_t drain(int fd, uint8_t *buf, size_t max)
{
	ssize_t r = recv(fd, buf, max, MSG_DONTWAIT);
	return r > 0 ? (size_t)r : 0;
}

static void mpa_seeds(void)
{
	static const struct {
		const char *name;
		uint8_t rev;
		bool p2p, crc, markers, rfc7306;
		uint8_t rtr;
		uint16_t pd_len;
	} v[] = {
	    {"v2_p2p_write_read", 2, true, true, false, false, MPA_RTR_WRITE | MPA_RTR_READ, 5},
	    {"v2_p2p_send", 2, true, false, false, false, MPA_RTR_SEND, 0},
	    {"v2_p2p_read_rfc7306", 2, true, true, false, true, MPA_RTR_READ, 64},
	    {"v2_no_p2p", 2, false, true, false, false, 0, 16},
	    {"v2_markers", 2, true, true, true, false, MPA_RTR_WRITE, 0},
	    {"v1_crc", 1, false, true, false, false, 0, 3},
	    {"v1_pd252", 1, false, false, false, false, 0, 252},
	};
	uint8_t pd[256];
	for (int i = 0; i < 256; i++)
		pd[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		int sv[2];
		uint8_t req[1024], rep[1024];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			exit(1);
		struct uiw_stream *a = uiw_stream_tcp(sv[0]), *b = uiw_stream_tcp(sv[1]);
		struct mpa_config cfg;
		mpa_config_default(&cfg);
		cfg.rev = v[i].rev;
		cfg.p2p = v[i].p2p;
		cfg.crc = v[i].crc;
		cfg.want_markers = v[i].markers;
		cfg.markers = true;
		cfg.rfc7306 = v[i].rfc7306;
		cfg.rtr_offer = v[i].rtr;
		cfg.timeout_ms = 1;
		struct mpa_params p;
		struct mpa_negotiated neg;
		/* the Request goes out, then no Reply comes: -ETIMEDOUT */
		(void)mpa_initiate(a, &cfg, 16, 16, pd, v[i].pd_len, &p, &neg, NULL);
		size_t nreq = drain(sv[1], req, sizeof(req));
		char name[128];
		uint8_t sel = 0x01 | 0x02; /* responder, accepts markers */
		snprintf(name, sizeof(name), "req_%s", v[i].name);
		put("fuzz_mpa_rr", name, &sel, 1, req, nreq);
		/* the Reply to it and a reject */
		if (write(sv[0], req, nreq) != (ssize_t)nreq || mpa_recv_request(b, 100, &p) != 0 ||
		    mpa_send_accept(b, &cfg, &p, 8, 4, pd, v[i].pd_len, &neg) != 0) {
			fprintf(stderr, "gen_seeds: no reply for %s\n", v[i].name);
			failed = 1;
		}
		size_t nrep = drain(sv[0], rep, sizeof(rep));
		sel = (v[i].rev == 1 ? 0x10 : 0) | (v[i].p2p ? 0 : 0x20) | 0x02;
		snprintf(name, sizeof(name), "rep_%s", v[i].name);
		put("fuzz_mpa_rr", name, &sel, 1, rep, nrep);
		(void)mpa_send_reject(b, &p, "no", 2);
		nrep = drain(sv[0], rep, sizeof(rep));
		snprintf(name, sizeof(name), "rej_%s", v[i].name);
		put("fuzz_mpa_rr", name, &sel, 1, rep, nrep);
		a->ops->destroy(a);
		b->ops->destroy(b);
	}
}

/* ------------------------------------------------------- DDP and RDMAP */

#define ULP(op) (uint8_t)(RDMAP_VERSION << RDMAP_VERSION_SHIFT | (op))

/* Appends message m as the library sends it without CRC and markers, then
 * turns the FPDUs into fuzz_frame records (be16 length + ULPDU). */
static size_t records(const struct ddp_msg *m, uint8_t *out, size_t max)
{
	static uint8_t wire[1 << 16];
	struct mem_stream cs;
	struct mpa_conn c;
	struct mpa_negotiated neg = {.rev = 2, .large_tx = true};
	mem_stream_init(&cs, NULL, 0);
	cs.cap = wire;
	cs.cap_max = sizeof(wire);
	if (mpa_conn_init(&c, &cs.s, &neg))
		exit(1);
	struct ddp_txpos pos = {0};
	while (ddp_tx_message(&c, m, &pos) == 0)
		(void)mpa_tx_push(&c);
	(void)mpa_tx_push(&c);
	mpa_conn_fini(&c);
	size_t o = 0;
	for (size_t i = 0; i + 2 <= cs.cap_len;) {
		size_t n = (size_t)wire[i] << 8 | wire[i + 1];
		if (o + 2 + n > max)
			break;
		memcpy(out + o, wire + i, 2 + n);
		o += 2 + n;
		i += 2 + n + ((4 - (n + 2) % 4) % 4) + MPA_CRC_LEN;
	}
	return o;
}

struct seedbuf {
	uint8_t b[1 << 16];
	size_t n;
};

static void add(struct seedbuf *s, const struct ddp_msg *m)
{
	s->n += records(m, s->b + s->n, sizeof(s->b) - s->n);
}

static void add_untagged(struct seedbuf *s, uint8_t op, uint32_t qn, uint32_t msn, uint32_t rsvd,
			 const void *body, size_t len)
{
	struct iovec v = {.iov_base = (void *)body, .iov_len = len};
	struct ddp_msg m = {.ulp_ctrl = ULP(op),
			    .qn = qn,
			    .msn = msn,
			    .ulp_rsvd = rsvd,
			    .iov = &v,
			    .niov = 1,
			    .len = len};
	add(s, &m);
}

static void add_tagged(struct seedbuf *s, uint8_t op, uint32_t stag, uint64_t to, const void *p,
		       size_t len)
{
	struct iovec v = {.iov_base = (void *)p, .iov_len = len};
	struct ddp_msg m = {.tagged = true,
			    .ulp_ctrl = ULP(op),
			    .stag = stag,
			    .to = to,
			    .iov = &v,
			    .niov = 1,
			    .len = len};
	add(s, &m);
}

/* Writes records rec as the harnesses' two forms: framed (flags | 0x10)
 * and, framed here by fuzz_frame with the flags' CRC and markers, raw. */
static void rdmap_put(const char *harness, const char *name, uint8_t flags, uint8_t conn,
		      const struct seedbuf *rec)
{
	static uint8_t raw[1 << 18];
	uint8_t pre[3] = {flags | 0x10, 0, conn};
	size_t pre_len = strcmp(harness, "fuzz_rdmap_rx") ? 2 : 3;
	char nm[160];
	snprintf(nm, sizeof(nm), "framed_%s", name);
	put(harness, nm, pre, pre_len, rec->b, rec->n);
	struct mpa_negotiated neg = fuzz_neg(flags);
	neg.large_tx = !neg.markers_tx;
	size_t n = fuzz_frame(rec->b, rec->n, &neg, 1460, NULL, NULL, raw, sizeof(raw));
	pre[0] = flags & (uint8_t)~0x10;
	snprintf(nm, sizeof(nm), "raw_%s", name);
	put(harness, nm, pre, pre_len, raw, n);
}

static void rdmap_seeds(void)
{
	static uint8_t payload[3000];
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	struct seedbuf s;

	/* Sends into the posted receives, one of two segments */
	s.n = 0;
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 1, 0, payload, 100);
	add_untagged(&s, RDMAP_SEND_SE, DDP_QN_SEND, 2, 0, payload, 512);
	add_untagged(&s, RDMAP_SEND_INV, DDP_QN_SEND, 3, 0 /* MR 0 */, payload, 8);
	rdmap_put("fuzz_rdmap_rx", "sends_crc", 0x01, 0, &s);
	rdmap_put("fuzz_fpdu", "sends_crc", 0x01, 0, &s);
	rdmap_put("fuzz_rdmap_rx", "sends_markers", 0x03, 0, &s);
	rdmap_put("fuzz_fpdu", "sends_markers", 0x03, 0, &s);

	/* RDMA Writes to MR 0 (STag index 0, its iova 0x10000), a large one */
	s.n = 0;
	add_tagged(&s, RDMAP_RDMA_WRITE, 0, 0x10000, payload, 64);
	add_tagged(&s, RDMAP_RDMA_WRITE, 0, 0x10100, payload, 3000);
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 1, 0, payload, 4);
	rdmap_put("fuzz_rdmap_rx", "writes_crc", 0x01, 0, &s);
	rdmap_put("fuzz_fpdu", "writes_crc", 0x01, 0, &s);
	rdmap_put("fuzz_rdmap_rx", "writes_nocrc_stall", 0x04, 0, &s);

	/* a Read Request for MR 0 (source STag index 0) and a Read Response
	 * to our Read's sink (MR 3 = index 3, iova 0x40000) */
	s.n = 0;
	struct rdmap_read_req rr = {.sink_stag = htonl(0x7700),
				    .sink_to = htobe64(0x1000),
				    .read_size = htonl(256),
				    .src_stag = htonl(0),
				    .src_to = htobe64(0x10000)};
	add_untagged(&s, RDMAP_RDMA_READ_REQ, DDP_QN_READ_REQ, 1, 0, &rr, sizeof(rr));
	add_tagged(&s, RDMAP_RDMA_READ_RESP, 3, 0x40000, payload, 1024);
	rdmap_put("fuzz_rdmap_rx", "read_req_resp_crc", 0x01, 0, &s);
	rdmap_put("fuzz_fpdu", "read_req_resp_crc", 0x01, 0, &s);

	/* peer-to-peer responder: the Write RTR first (RFC 6581 §4) */
	s.n = 0;
	add_tagged(&s, RDMAP_RDMA_WRITE, 1, 0, NULL, 0);
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 1, 0, payload, 10);
	rdmap_put("fuzz_rdmap_rx", "p2p_write_rtr", 0x01 | 0x40 | 0x80, 2, &s);

	/* RFC 7306: Atomic Fetch-Add on MR 0, Immediate Data, an Atomic
	 * Response to our Fetch-Add */
	s.n = 0;
	struct rdmap_atomic_req ar = {.aopcode = htonl(RDMAP_AOP_FETCH_ADD),
				      .req_id = htonl(1),
				      .stag = htonl(0),
				      .to = htobe64(0x10008),
				      .add_swap = htobe64(5),
				      .add_swap_mask = 0,
				      .compare = 0,
				      .compare_mask = 0};
	add_untagged(&s, RDMAP_ATOMIC_REQ, RDMAP_QN_ATOMIC_REQ, 1, 0, &ar, sizeof(ar));
	uint8_t imm[RDMAP_IMMEDIATE_LEN] = {1, 2, 3, 4};
	add_untagged(&s, RDMAP_IMMEDIATE, DDP_QN_SEND, 1, 0, imm, sizeof(imm));
	struct rdmap_atomic_resp aresp = {.req_id = htonl(1), .orig = htobe64(41)};
	add_untagged(&s, RDMAP_ATOMIC_RESP, RDMAP_QN_ATOMIC_RESP, 1, 0, &aresp, sizeof(aresp));
	rdmap_put("fuzz_rdmap_rx", "atomics_crc", 0x01 | 0x20, 0, &s);
	rdmap_put("fuzz_fpdu", "atomics_crc", 0x01, 0, &s);

	/* the answers to both of the harness's requests, in their order: the
	 * Read Response (to MR 3), then the Atomic Response */
	s.n = 0;
	add_tagged(&s, RDMAP_RDMA_READ_RESP, 3, 0x40000, payload, 1024);
	aresp.req_id = 0; /* the QP's first Atomic (tx.c numbers them from 0) */
	add_untagged(&s, RDMAP_ATOMIC_RESP, RDMAP_QN_ATOMIC_RESP, 1, 0, &aresp, sizeof(aresp));
	rdmap_put("fuzz_rdmap_rx", "read_then_atomic_resp", 0x01 | 0x20, 0, &s);

	/* nine Read Requests against IRD 8 (RFC 5040 §6.5: the ninth is
	 * answered with a Terminate) */
	s.n = 0;
	for (uint32_t msn = 1; msn <= 9; msn++)
		add_untagged(&s, RDMAP_RDMA_READ_REQ, DDP_QN_READ_REQ, msn, 0, &rr, sizeof(rr));
	rdmap_put("fuzz_rdmap_rx", "read_reqs_past_ird", 0x01, 0, &s);

	/* peer-to-peer responder: the zero-length Send RTR, then a Send */
	s.n = 0;
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 1, 0, NULL, 0);
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 2, 0, payload, 10);
	rdmap_put("fuzz_rdmap_rx", "p2p_send_rtr", 0x01 | 0x40 | 0x80, 1, &s);

	/* a Send, then an RDMA Write of 20000 bytes to MR 0, above
	 * MPA_RX_SMALL_MAX, so placed as it arrives: the Write's record says
	 * 14 + 20000 bytes and fuzz_frame fills its payload past the end of
	 * the input with zeros (framed form only: the raw one would be 20 KB) */
	s.n = 0;
	add_untagged(&s, RDMAP_SEND, DDP_QN_SEND, 1, 0, payload, 4);
	size_t at = s.n;
	add_tagged(&s, RDMAP_RDMA_WRITE, 0, 0x10000, NULL, 0);
	s.b[at] = (uint8_t)((DDP_TAGGED_HDR_LEN + 20000) >> 8);
	s.b[at + 1] = (uint8_t)(DDP_TAGGED_HDR_LEN + 20000);
	uint8_t pre[3] = {0x01 | 0x10, 0, 0};
	put("fuzz_rdmap_rx", "framed_write_20k_crc", pre, 3, s.b, s.n);
	pre[0] |= 0x20; /* fuzz_fpdu: large FPDUs (else cut to the EMSS) */
	put("fuzz_fpdu", "framed_write_20k_crc", pre, 2, s.b, s.n);

	/* a Terminate from the peer (RDMAP invalid STag, echoing a tagged
	 * header), as uiw_term_build makes ours */
	s.n = 0;
	struct uiw_term t = {.layer = RDMAP_LAYER_RDMAP,
			     .etype = RDMAP_ETYPE_REMOTE_PROT,
			     .ecode = RDMAP_ECODE_INVALID_STAG,
			     .has_seg = true};
	t.seg.tagged = true;
	t.seg.seg_len = 14 + 64;
	t.seg.raw_len = DDP_TAGGED_HDR_LEN;
	t.seg.raw[0] = DDP_FLAG_TAGGED | DDP_FLAG_LAST | DDP_VERSION;
	t.seg.raw[1] = ULP(RDMAP_RDMA_WRITE);
	uint8_t term[RDMAP_TERM_MAX_PAYLOAD];
	size_t tn = uiw_term_build(&t, term);
	add_untagged(&s, RDMAP_TERMINATE, DDP_QN_TERMINATE, 1, 0, term, tn);
	rdmap_put("fuzz_rdmap_rx", "terminate_crc", 0x01, 0, &s);
	rdmap_put("fuzz_fpdu", "terminate_crc", 0x01, 0, &s);
}

/* ----------------------------------------------------------------- iwpm */

static void iwpm_seeds(void)
{
	static const char *names[] = {"req", "accept", "ack", "reject"};
	for (uint8_t type = IWPM_MT_REQ; type <= IWPM_MT_REJECT; type++) {
		for (int v6 = 0; v6 < 2; v6++) {
			struct iwpm_msg m = {.type = type,
					     .ip_ver = v6 ? 6 : 4,
					     .apport = 4791,
					     .cpport = 40000,
					     .mapped_cpport = type == IWPM_MT_REQ ? 40001 : 0,
					     .assochandle = 0x0102030405060708ull};
			const char *a4 = "\x0a\x00\x00\x01", *b4 = "\x0a\x00\x00\x02";
			memcpy(m.cpipaddr, a4, 4);
			memcpy(m.apipaddr, b4, 4);
			if (v6) {
				m.cpipaddr[0] = 0xfd;
				m.apipaddr[15] = 2;
			}
			uint8_t buf[IWPM_MSG_REQ_LEN];
			int n = iwpm_msg_encode(&m, buf);
			char name[64];
			snprintf(name, sizeof(name), "%s_v%d", names[type], v6 ? 6 : 4);
			if (n > 0)
				put("fuzz_iwpm", name, NULL, 0, buf, (size_t)n);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 1;
	}
	dir = argv[1];
	mpa_seeds();
	rdmap_seeds();
	iwpm_seeds();
	return failed;
}
