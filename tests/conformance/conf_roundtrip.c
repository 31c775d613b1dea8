/* Round trips of every operation between two uiwarp endpoints, in the MPA
 * mode this process was started with (UIWARP_MPA_REV, UIWARP_MPA_CRC,
 * UIWARP_P2P, UIWARP_RTR, ... are read once per process, so ctest runs one
 * process per mode: see CMakeLists.txt).
 *
 * The two endpoints talk through a recording TCP proxy in this process that
 * parses both directions as an independent MPA/DDP/RDMAP decoder (its own
 * CRC32c table, framing written from RFC 5044 / 5041 / 5040 / 6581) and
 * checks on the wire: the MPA Request/Reply (revision, C, M, the RFC 6581
 * word, the RTR kind), every FPDU's CRC (or zero CRC field when CRC is off),
 * zero pad, markers where negotiated, DDP/RDMAP versions and reserved bits,
 * untagged MSN/MO sequences per queue, tagged TO continuity, that the
 * responder sends nothing before the initiator's first FPDU, and which
 * RDMAP opcodes went by.
 *
 * Operations: Send, Send with SE (solicited-only CQ notification), Send with
 * Invalidate, Send with SE and Invalidate, RDMA Write, RDMA Read (small,
 * multi-FPDU, zero-length), multi-SGE and inline Sends, a multi-segment Send,
 * then a graceful close (SQD) that flushes the rest of the receives. With
 * UIWARP_RFC7306=1 and a negotiated RFC 7306, also Immediate Data and
 * atomics; without support the test exits 77 (skipped).
 *
 * Usage: conf_roundtrip [MODE-NAME]   (exit 0 pass, 1 fail, 77 skip)
 * CONF_PROXY_PORT=N puts the proxy (the port the initiator connects to) on
 * 127.0.0.1:N instead of a free port (conf_tshark.sh captures it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmap/rdmap.h"

/* Present once RFC 7306 lands in the engine (weak: the test links either way). */
unsigned uiw_qp_caps(struct uiw_qp *qp) __attribute__((weak));

#define SKIP 77
static int failures;
static const char *mode = "default";

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			fprintf(stderr, "FAIL [%s] %s:%d: %s: ", mode, __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FATAL [%s] ", mode);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static int env_int(const char *n, int def)
{
	const char *v = getenv(n);
	return v && *v ? atoi(v) : def;
}

/* ------------------------------------------------------------ CRC32c oracle */

static uint32_t crc_tab[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_tab[i] = c;
	}
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = ~0u;
	while (n--)
		c = crc_tab[(c ^ *p++) & 0xff] ^ (c >> 8);
	return ~c;
}

/* ------------------------------------------------------------ wire decoder */

struct wire {		/* one direction of the stream */
	bool initiator; /* initiator -> responder */
	struct wire *other;
	/* handshake */
	uint8_t hs[20 + 512];
	size_t hs_got, hs_need;
	bool hs_done;
	uint8_t flags, rev;
	uint16_t pd_len, ird_w, ord_w;
	bool has_word;
	/* FPDU stream */
	bool crc, markers;
	uint64_t so;	    /* raw stream offset after the handshake */
	uint8_t raw[70000]; /* the current FPDU as on the wire (markers included) */
	size_t raw_n;
	uint8_t fp[70000]; /* the current FPDU without markers */
	size_t fp_n, fp_need;
	uint64_t fp_start; /* so of the current FPDU's first byte */
	uint8_t mk[4];
	int mk_n; /* bytes of a marker being read, -1: none */
	uint64_t mk_at;
	/* results */
	unsigned long fpdus, ops[16], bad_crc, bad_pad, bad_marker, bad_hdr, markers_seen;
	long first_fpdu_seq;
	uint32_t msn[8]; /* next MSN per QN */
	uint32_t mo[8];	 /* next MO per QN inside a message */
	bool tag_open;
	uint32_t tag_stag;
	uint64_t tag_to;
	bool first_fpdu_done;
	uint8_t first_op, first_tagged;
	uint32_t first_len, first_stag;
};

static atomic_long fpdu_seq;

static void wire_fpdu(struct wire *w)
{
	const uint8_t *f = w->fp;
	size_t ulen = (size_t)f[0] << 8 | f[1];
	size_t pad = (4 - ((2 + ulen) & 3)) & 3;
	const uint8_t *crcb = f + 2 + ulen + pad;
	uint32_t got = (uint32_t)crcb[0] | (uint32_t)crcb[1] << 8 | (uint32_t)crcb[2] << 16 |
		       (uint32_t)crcb[3] << 24;
	w->fpdus++;
	long seq = atomic_fetch_add(&fpdu_seq, 1);
	if (w->first_fpdu_seq < 0)
		w->first_fpdu_seq = seq;
	if (w->crc) {
		/* RFC 5044 §4.4: over the FPDU as sent, markers included */
		uint32_t want = crc32c(w->raw, w->raw_n - 4);
		if (got != want) {
			w->bad_crc++;
			fprintf(stderr, "[%s] %s FPDU %lu: CRC 0x%08x, want 0x%08x\n", mode,
				w->initiator ? "i->r" : "r->i", w->fpdus, got, want);
		}
	} else if (got != 0) {
		w->bad_crc++; /* RFC 5044 §4.4: CRC field zero when CRC is not used */
	}
	for (size_t i = 0; i < pad; i++)
		if (f[2 + ulen + i])
			w->bad_pad++;
	if (ulen < 2) {
		w->bad_hdr++;
		return;
	}
	const uint8_t *u = f + 2;
	bool tagged = u[0] & 0x80, last = u[0] & 0x40;
	uint8_t op = u[1] & 0x0f;
	/* RFC 5041 §4.1 / RFC 5040 §4.2: versions 1, reserved bits zero on send */
	if ((u[0] & 0x03) != 1 || (u[1] >> 6) != 1 || (u[0] & 0x3c) || (u[1] & 0x30)) {
		w->bad_hdr++;
		fprintf(stderr, "[%s] bad DDP/RDMAP control %02x %02x\n", mode, u[0], u[1]);
	}
	w->ops[op]++;
	if (!w->first_fpdu_done) {
		w->first_fpdu_done = true;
		w->first_op = op;
		w->first_tagged = tagged;
		w->first_len = (uint32_t)ulen;
		w->first_stag = tagged && ulen >= 14 ? (uint32_t)u[2] << 24 | (uint32_t)u[3] << 16 |
							   (uint32_t)u[4] << 8 | u[5]
						     : 0;
	}
	if (tagged) {
		if (ulen < 14) {
			w->bad_hdr++;
			return;
		}
		uint32_t stag =
		    (uint32_t)u[2] << 24 | (uint32_t)u[3] << 16 | (uint32_t)u[4] << 8 | u[5];
		uint64_t to = 0;
		for (int i = 0; i < 8; i++)
			to = to << 8 | u[6 + i];
		/* RFC 5041 §5.1: a tagged message's segments are contiguous */
		if (w->tag_open && (stag != w->tag_stag || to != w->tag_to)) {
			w->bad_hdr++;
			fprintf(stderr, "[%s] tagged segment not contiguous\n", mode);
		}
		w->tag_open = !last;
		w->tag_stag = stag;
		w->tag_to = to + (ulen - 14);
		return;
	}
	if (ulen < 18) {
		w->bad_hdr++;
		return;
	}
	if (op == 0x7 && ulen >= 22)
		fprintf(stderr, "[%s] %s Terminate: layer %u etype %u code 0x%02x flags %02x%02x\n",
			mode, w->initiator ? "i->r" : "r->i", u[18] >> 4, u[18] & 0xf, u[19], u[20],
			u[21]);
	uint32_t qn = (uint32_t)u[6] << 24 | (uint32_t)u[7] << 16 | (uint32_t)u[8] << 8 | u[9];
	uint32_t msn = (uint32_t)u[10] << 24 | (uint32_t)u[11] << 16 | (uint32_t)u[12] << 8 | u[13];
	uint32_t mo = (uint32_t)u[14] << 24 | (uint32_t)u[15] << 16 | (uint32_t)u[16] << 8 | u[17];
	if (qn >= 8) {
		w->bad_hdr++;
		return;
	}
	/* RFC 5041 §5.2: MSN starts at 1 per queue and grows by one per
	 * message; MO is the offset of the segment in its message */
	if (msn != w->msn[qn] || mo != w->mo[qn]) {
		w->bad_hdr++;
		fprintf(stderr, "[%s] QN %u MSN %u MO %u, want %u/%u\n", mode, qn, msn, mo,
			w->msn[qn], w->mo[qn]);
	}
	if (op != 0x3 && op != 0x4 && op != 0x5 && op != 0x6 && (u[2] | u[3] | u[4] | u[5]))
		w->bad_hdr++; /* RsvdULP zero unless Send with Invalidate */
	if (last) {
		w->msn[qn] = msn + 1;
		w->mo[qn] = 0;
	} else {
		w->mo[qn] = mo + (uint32_t)(ulen - 18);
	}
}

/* Feeds one byte of the FPDU stream (after the handshake). */
static void wire_byte(struct wire *w, uint8_t b)
{
	if (w->markers && w->mk_n < 0 && w->so % 512 == 0) {
		w->mk_n = 0; /* RFC 5044 §4.3: a marker every 512 octets */
		w->mk_at = w->so;
	}
	w->so++;
	if (w->mk_n >= 0) {
		w->mk[w->mk_n++] = b;
		/* RFC 5044 §4.4 / §5: the CRC covers the FPDU's markers; a marker
		 * right in front of an FPDU's ULPDU_Length (FPDUPTR 0: it points
		 * at the FPDU that starts with it, as the first FPDU of each
		 * direction at stream offset 0) belongs to that FPDU */
		w->raw[w->raw_n++] = b;
		if (w->mk_n == 4) {
			w->mk_n = -1;
			w->markers_seen++;
			uint32_t ptr = (uint32_t)w->mk[2] << 8 | w->mk[3];
			bool ok = !w->mk[0] && !w->mk[1] &&
				  (w->fp_n ? w->mk_at - w->fp_start == ptr : ptr == 0);
			if (!ok) {
				w->bad_marker++;
				fprintf(stderr, "[%s] marker at %llu: %02x%02x%02x%02x\n", mode,
					(unsigned long long)w->mk_at, w->mk[0], w->mk[1], w->mk[2],
					w->mk[3]);
			}
		}
		return;
	}
	if (w->fp_n == 0)
		w->fp_start = w->so - 1;
	w->fp[w->fp_n++] = b;
	w->raw[w->raw_n++] = b;
	if (w->fp_n == 2) {
		size_t ulen = (size_t)w->fp[0] << 8 | w->fp[1];
		w->fp_need = 2 + ulen + ((4 - ((2 + ulen) & 3)) & 3) + 4;
	}
	if (w->fp_n >= 2 && w->fp_n == w->fp_need) {
		wire_fpdu(w);
		w->fp_n = w->raw_n = 0;
	}
}

static void wire_feed(struct wire *w, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (w->hs_done) {
			wire_byte(w, p[i]);
			continue;
		}
		w->hs[w->hs_got++] = p[i];
		if (w->hs_got == 20) {
			w->flags = w->hs[16];
			w->rev = w->hs[17];
			w->pd_len = (uint16_t)(w->hs[18] << 8 | w->hs[19]);
			if (w->pd_len > 512)
				die("PD_Length %u > 512", w->pd_len);
			w->hs_need = 20 + w->pd_len;
		}
		if (w->hs_got >= 20 && w->hs_got == w->hs_need) {
			w->hs_done = true;
			w->has_word = w->rev == 2 && (w->flags & 0x10) && w->pd_len >= 4;
			if (w->has_word) {
				w->ird_w = (uint16_t)(w->hs[20] << 8 | w->hs[21]);
				w->ord_w = (uint16_t)(w->hs[22] << 8 | w->hs[23]);
			}
			/* the Reply comes after the Request: decide the stream's modes.
			 * RFC 5044 §7.1: CRC if either end asked (C); markers towards
			 * an end that asked for them (M). */
			if (!w->initiator) {
				struct wire *i = w->other;
				bool crc = (i->flags | w->flags) & 0x40;
				i->crc = w->crc = crc;
				i->markers = w->flags & 0x80;
				w->markers = i->flags & 0x80;
			}
		}
	}
}

/* ------------------------------------------------------------ the proxy */

struct pump {
	int from, to;
	struct wire *w;
	pthread_t t;
};

static void *pump_run(void *arg)
{
	struct pump *p = arg;
	static __thread uint8_t buf[65536];
	for (;;) {
		ssize_t n = recv(p->from, buf, sizeof(buf), 0);
		if (n <= 0) {
			if (n == 0)
				shutdown(p->to, SHUT_WR);
			else {
				struct linger lg = {1, 0}; /* pass an abort on as a reset */
				setsockopt(p->to, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
				shutdown(p->to, SHUT_RDWR);
			}
			return NULL;
		}
		wire_feed(p->w, buf, (size_t)n);
		for (ssize_t off = 0; off < n;) {
			ssize_t k = send(p->to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
			if (k <= 0)
				return NULL;
			off += k;
		}
	}
}

struct proxy {
	int lfd, a, b;
	uint16_t port;
	struct sockaddr_in target;
	struct wire wi, wr;
	struct pump pi, pr;
	pthread_t t;
};

static void *proxy_accept(void *arg)
{
	struct proxy *p = arg;
	p->a = accept(p->lfd, NULL, NULL);
	if (p->a < 0)
		return NULL;
	p->b = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(p->b, (struct sockaddr *)&p->target, sizeof(p->target)))
		die("proxy connect: %s", strerror(errno));
	int one = 1;
	setsockopt(p->a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(p->b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	p->pi = (struct pump){.from = p->a, .to = p->b, .w = &p->wi};
	p->pr = (struct pump){.from = p->b, .to = p->a, .w = &p->wr};
	pthread_create(&p->pi.t, NULL, pump_run, &p->pi);
	pthread_create(&p->pr.t, NULL, pump_run, &p->pr);
	pthread_join(p->pi.t, NULL);
	pthread_join(p->pr.t, NULL);
	close(p->a);
	close(p->b);
	return NULL;
}

static void proxy_start(struct proxy *p, const struct sockaddr_storage *target)
{
	memset(p, 0, sizeof(*p));
	p->wi.initiator = true;
	p->wi.other = &p->wr;
	p->wr.other = &p->wi;
	p->wi.mk_n = p->wr.mk_n = -1;
	p->wi.first_fpdu_seq = p->wr.first_fpdu_seq = -1;
	for (int q = 0; q < 8; q++)
		p->wi.msn[q] = p->wr.msn[q] = 1;
	memcpy(&p->target, target, sizeof(p->target));
	p->lfd = socket(AF_INET, SOCK_STREAM, 0);
	/* CONF_PROXY_PORT: a fixed port for the initiator's connection, so that a
	 * capture (conf_tshark.sh) can filter on it; 0 or unset: any free port */
	int fixed = env_int("CONF_PROXY_PORT", 0), one = 1;
	struct sockaddr_in sin = {.sin_family = AF_INET,
				  .sin_port = htons((uint16_t)fixed),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(p->lfd, (struct sockaddr *)&sin, sizeof(sin)) || listen(p->lfd, 1) ||
	    getsockname(p->lfd, (struct sockaddr *)&sin, &sl))
		die("proxy listen: %s", strerror(errno));
	p->port = ntohs(sin.sin_port);
	pthread_create(&p->t, NULL, proxy_accept, p);
}

/* ------------------------------------------------------------ endpoints */

#define BUF (4u << 20)
#define BIG (1u << 20)

struct side {
	struct uiw_pd *pd;
	struct uiw_cq *cq;
	struct uiw_qp *qp;
	uint8_t *buf;
	struct uiw_mr *mr, *inv_mr;
	atomic_int disconnected, terminated, notified;
};

static void on_event(struct uiw_qp *qp, enum uiw_qp_event ev, void *ctx)
{
	(void)qp;
	struct side *s = ctx;
	if (ev == UIW_QP_EV_DISCONNECTED)
		atomic_fetch_add(&s->disconnected, 1);
	if (ev == UIW_QP_EV_TERMINATE)
		atomic_fetch_add(&s->terminated, 1);
}

static void on_notify(struct uiw_cq *cq, void *ctx)
{
	(void)cq;
	atomic_fetch_add(&((struct side *)ctx)->notified, 1);
}

static void side_init(struct side *s)
{
	memset(s, 0, sizeof(*s));
	s->pd = uiw_pd_alloc();
	if (!s->pd || uiw_cq_create(1024, on_notify, s, &s->cq))
		die("pd/cq");
	struct uiw_qp_init_attr a = {.pd = s->pd,
				     .send_cq = s->cq,
				     .recv_cq = s->cq,
				     .max_send_wr = 64,
				     .max_recv_wr = 64,
				     .max_send_sge = 4,
				     .max_recv_sge = 4,
				     .max_inline = 64,
				     .ctx = s};
	if (uiw_qp_create(&a, &s->qp))
		die("qp");
	uiw_qp_set_event_cb(s->qp, on_event, s);
	s->buf = aligned_alloc(4096, BUF);
	if (!s->buf)
		die("oom");
	memset(s->buf, 0, BUF);
	unsigned acc = UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ |
		       UIW_ACCESS_REMOTE_ATOMIC;
	if (uiw_mr_reg(s->pd, s->buf, BUF, (uintptr_t)s->buf, acc, &s->mr) ||
	    uiw_mr_reg(s->pd, s->buf, 4096, 0x7000000, acc, &s->inv_mr))
		die("mr");
}

static void side_fini(struct side *s)
{
	CHECK(uiw_qp_destroy(s->qp) == 0, "qp destroy");
	CHECK(uiw_mr_dereg(s->mr) == 0, "mr dereg");
	/* inv_mr may have been invalidated by the peer: dereg is still allowed */
	uiw_mr_dereg(s->inv_mr);
	CHECK(uiw_cq_destroy(s->cq) == 0, "cq destroy");
	CHECK(uiw_pd_free(s->pd) == 0, "pd free");
	free(s->buf);
}

static int poll_n(struct uiw_cq *cq, struct uiw_wc *wc, int n)
{
	int got = 0;
	for (int i = 0; i < 100000 && got < n; i++) {
		got += uiw_cq_poll(cq, n - got, wc + got);
		if (got < n)
			usleep(100);
	}
	return got;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed + (i >> 10));
}

static struct side A, B; /* A: active (initiator), B: passive */
static struct uiw_listener *L;
static int accept_rc;

static void *passive(void *arg)
{
	(void)arg;
	struct uiw_conn_req *req;
	struct uiw_conn_info info;
	accept_rc = uiw_listener_get_request(L, 10000, &req, &info);
	if (accept_rc)
		return NULL;
	struct uiw_conn_param cp = {.responder_resources = 8, .initiator_depth = 8};
	accept_rc = uiw_accept(req, B.qp, &cp, 10000);
	return NULL;
}

static void post_recv(struct side *s, uint64_t id, size_t off, uint32_t len)
{
	struct uiw_sge sge = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->stag};
	struct uiw_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1};
	int bad;
	CHECK(uiw_qp_post_recv(s->qp, &wr, 1, &bad) == 0, "post_recv %llu", (unsigned long long)id);
}

static void post(struct side *s, struct uiw_send_wr *wr)
{
	int bad;
	int rc = uiw_qp_post_send(s->qp, wr, 1, &bad);
	CHECK(rc == 0, "post_send opcode %d: %d", (int)wr->opcode, rc);
}

/* One signaled WR from A; waits for its completion (and B's receive). */
static void expect_wc(struct uiw_cq *cq, uint64_t id, enum uiw_wc_status st, int opcode,
		      uint32_t len, struct uiw_wc *out)
{
	struct uiw_wc wc;
	int n = poll_n(cq, &wc, 1);
	CHECK(n == 1, "no completion for wr_id %llu", (unsigned long long)id);
	if (n != 1)
		return;
	CHECK(wc.wr_id == id && wc.status == st && (opcode < 0 || (int)wc.opcode == opcode) &&
		  (len == UINT32_MAX || wc.byte_len == len),
	      "wc wr_id=%llu status=%d opcode=%d len=%u; want %llu/%d/%d/%u",
	      (unsigned long long)wc.wr_id, wc.status, wc.opcode, wc.byte_len,
	      (unsigned long long)id, st, opcode, len);
	if (out)
		*out = wc;
}

static struct uiw_sge sge_of(struct side *s, size_t off, uint32_t len)
{
	return (struct uiw_sge){
	    .addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->stag};
}

static void ops(void)
{
	struct uiw_wc wc;
	uint64_t id = 1, rid = 1000;
	/* Send */
	fill(A.buf, 4096, 1);
	post_recv(&B, rid, 0, 4096);
	struct uiw_sge s1 = sge_of(&A, 0, 9);
	struct uiw_send_wr w = {.wr_id = id,
				.opcode = UIW_WR_SEND,
				.flags = UIW_SEND_SIGNALED,
				.sg_list = &s1,
				.num_sge = 1};
	CHECK(uiw_cq_arm(B.cq, true, false) == 0, "arm");
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 9, &wc);
	CHECK(!memcmp(B.buf, A.buf, 9), "send data");
	CHECK(atomic_load(&B.notified) == 0, "solicited-only CQ notified by a plain Send");

	/* Send with Solicited Event: the armed CQ is notified */
	post_recv(&B, rid, 4096, 4096);
	s1 = sge_of(&A, 100, 100);
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED | UIW_SEND_SOLICITED,
				 .sg_list = &s1,
				 .num_sge = 1};
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 100, NULL);
	CHECK(!memcmp(B.buf + 4096, A.buf + 100, 100), "send+se data");
	CHECK(atomic_load(&B.notified) == 1, "Send with SE notified the armed CQ (%d)",
	      atomic_load(&B.notified));

	/* Send with Invalidate, Send with SE and Invalidate (B's second MR) */
	for (int se = 0; se < 2; se++) {
		post_recv(&B, rid, 8192, 4096);
		s1 = sge_of(&A, 300, 33);
		w = (struct uiw_send_wr){.wr_id = id,
					 .opcode = UIW_WR_SEND_WITH_INV,
					 .flags = UIW_SEND_SIGNALED | (se ? UIW_SEND_SOLICITED : 0),
					 .sg_list = &s1,
					 .num_sge = 1,
					 .invalidate_rkey = B.inv_mr->stag};
		post(&A, &w);
		expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
		expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 33, &wc);
		CHECK((wc.flags & UIW_WC_WITH_INV) && wc.invalidated_stag == B.inv_mr->stag,
		      "Send with Invalidate: flags %u stag 0x%x", wc.flags, wc.invalidated_stag);
		if (se == 0) {
			/* the second one names an STag that is already invalid: a
			 * uiwarp that invalidates terminates here (RFC 5040 §7),
			 * so re-register it under a new STag first */
			uiw_mr_dereg(B.inv_mr);
			unsigned acc = UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE;
			if (uiw_mr_reg(B.pd, B.buf, 4096, 0x7000000, acc, &B.inv_mr))
				die("mr");
		}
	}

	/* RDMA Write: small, multi-FPDU (1 MiB), zero-length */
	fill(A.buf + BIG, BIG, 7);
	uint32_t lens[3] = {100, BIG, 0};
	for (int i = 0; i < 3; i++) {
		s1 = sge_of(&A, BIG, lens[i]);
		w = (struct uiw_send_wr){.wr_id = id,
					 .opcode = UIW_WR_RDMA_WRITE,
					 .flags = UIW_SEND_SIGNALED,
					 .sg_list = &s1,
					 .num_sge = lens[i] ? 1 : 0,
					 .remote_addr = (uintptr_t)B.buf + BIG,
					 .rkey = B.mr->stag};
		post(&A, &w);
		expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_RDMA_WRITE, UINT32_MAX, NULL);
	}
	/* a Send after the Write: when it arrives, the Write has been placed */
	post_recv(&B, rid, 12288, 64);
	s1 = sge_of(&A, 0, 4);
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &s1,
				 .num_sge = 1};
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 4, NULL);
	CHECK(!memcmp(B.buf + BIG, A.buf + BIG, BIG), "RDMA Write data");

	/* RDMA Read: small, multi-FPDU, zero-length */
	fill(B.buf + 2 * BIG, BIG, 9);
	for (int i = 0; i < 3; i++) {
		s1 = sge_of(&A, 2 * BIG, lens[i]);
		w = (struct uiw_send_wr){.wr_id = id,
					 .opcode = UIW_WR_RDMA_READ,
					 .flags = UIW_SEND_SIGNALED,
					 .sg_list = &s1,
					 .num_sge = lens[i] ? 1 : 0,
					 .remote_addr = (uintptr_t)B.buf + 2 * BIG,
					 .rkey = B.mr->stag};
		post(&A, &w);
		expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_RDMA_READ, lens[i], NULL);
		CHECK(!memcmp(A.buf + 2 * BIG, B.buf + 2 * BIG, lens[i]), "RDMA Read data (%u)",
		      lens[i]);
	}
	/* B reads from A too (the other direction's IRD/ORD) */
	s1 = sge_of(&B, 3 * BIG, 5000);
	w = (struct uiw_send_wr){.wr_id = 77,
				 .opcode = UIW_WR_RDMA_READ,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &s1,
				 .num_sge = 1,
				 .remote_addr = (uintptr_t)A.buf + BIG,
				 .rkey = A.mr->stag};
	post(&B, &w);
	expect_wc(B.cq, 77, UIW_WC_SUCCESS, UIW_WC_RDMA_READ, 5000, NULL);
	CHECK(!memcmp(B.buf + 3 * BIG, A.buf + BIG, 5000), "RDMA Read data (B from A)");

	/* Multi-SGE Send into a receive of one SGE, inline Send, zero-length
	 * Send, a multi-segment (1 MiB) Send */
	post_recv(&B, rid, 16384, 4096);
	struct uiw_sge sg3[3] = {sge_of(&A, 0, 10), sge_of(&A, 1000, 20), sge_of(&A, 3000, 30)};
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = sg3,
				 .num_sge = 3};
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 60, NULL);
	CHECK(!memcmp(B.buf + 16384, A.buf, 10) && !memcmp(B.buf + 16394, A.buf + 1000, 20) &&
		  !memcmp(B.buf + 16414, A.buf + 3000, 30),
	      "multi-SGE Send data");
	post_recv(&B, rid, 20480, 4096);
	uint8_t inl[48];
	memset(inl, 0x5c, sizeof(inl));
	struct uiw_sge si = {.addr = (uintptr_t)inl, .length = sizeof(inl), .lkey = 0};
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED | UIW_SEND_INLINE,
				 .sg_list = &si,
				 .num_sge = 1};
	post(&A, &w);
	memset(inl, 0, sizeof(inl)); /* copied at post time */
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 48, NULL);
	CHECK(B.buf[20480] == 0x5c && B.buf[20480 + 47] == 0x5c, "inline Send data");
	post_recv(&B, rid, 24576, 4096);
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = NULL,
				 .num_sge = 0};
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 0, NULL);
	post_recv(&B, rid, 3 * BIG, BIG);
	s1 = sge_of(&A, BIG, BIG);
	w = (struct uiw_send_wr){.wr_id = id,
				 .opcode = UIW_WR_SEND,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &s1,
				 .num_sge = 1};
	post(&A, &w);
	expect_wc(A.cq, id++, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
	expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, BIG, NULL);
	CHECK(!memcmp(B.buf + 3 * BIG, A.buf + BIG, BIG), "multi-segment Send data");
}

/* RFC 7306 operations, when negotiated (compiled once rdmap.h has the
 * RFC 7306 fields: CMake defines UIW_HAVE_7306_API). */
#ifdef UIW_HAVE_7306_API
static void ops_7306(void)
{
	uint64_t *cell = (uint64_t *)(void *)(B.buf + 40960);
	*cell = 100;
	struct uiw_sge s1 = sge_of(&A, 40960, 8);
	struct uiw_send_wr w = {.wr_id = 500,
				.opcode = (enum uiw_wr_opcode)6 /* FETCH_AND_ADD */,
				.flags = UIW_SEND_SIGNALED,
				.sg_list = &s1,
				.num_sge = 1,
				.remote_addr = (uintptr_t)cell,
				.rkey = B.mr->stag};
	uint64_t *w_cmp = &w.compare_add, *w_swap = &w.swap;
	*w_cmp = 5;
	post(&A, &w);
	expect_wc(A.cq, 500, UIW_WC_SUCCESS, 4 /* FETCH_ADD */, UINT32_MAX, NULL);
	uint64_t old;
	memcpy(&old, A.buf + 40960, 8);
	CHECK(old == 100 && *cell == 105, "FetchAdd: old %llu now %llu", (unsigned long long)old,
	      (unsigned long long)*cell);
	w.wr_id = 501;
	w.opcode = (enum uiw_wr_opcode)5; /* CMP_AND_SWP */
	*w_cmp = 105;
	*w_swap = 7;
	post(&A, &w);
	expect_wc(A.cq, 501, UIW_WC_SUCCESS, 3 /* COMP_SWAP */, UINT32_MAX, NULL);
	CHECK(*cell == 7, "CmpSwap: now %llu", (unsigned long long)*cell);
	/* Send with Immediate */
	post_recv(&B, 600, 45056, 64);
	s1 = sge_of(&A, 0, 16);
	w = (struct uiw_send_wr){.wr_id = 502,
				 .opcode = (enum uiw_wr_opcode)3,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &s1,
				 .num_sge = 1,
				 .imm_data = htonl(0xabcd1234)};
	struct uiw_wc wc;
	int bad;
	uint64_t rid = 600;
	int rc = uiw_qp_post_send(A.qp, &w, 1, &bad);
	if (rc == -EOPNOTSUPP) {
		/* RFC 7306 has Immediate Data messages, not a Send carrying
		 * immediate data: an engine may refuse IBV_WR_SEND_WITH_IMM */
		printf("NOTE [%s]: Send with Immediate refused (-EOPNOTSUPP)\n", mode);
	} else {
		CHECK(rc == 0, "post Send with Immediate: %d", rc);
		expect_wc(A.cq, 502, UIW_WC_SUCCESS, UIW_WC_SEND, UINT32_MAX, NULL);
		expect_wc(B.cq, rid++, UIW_WC_SUCCESS, UIW_WC_RECV, 16, &wc);
		CHECK((wc.flags & UIW_WC_WITH_IMM) && wc.imm_data == htonl(0xabcd1234),
		      "Send with Immediate: flags %u imm 0x%x", wc.flags, ntohl(wc.imm_data));
		post_recv(&B, 601, 45056, 64);
	}
	/* RDMA Write with Immediate: consumes a receive */
	w = (struct uiw_send_wr){.wr_id = 503,
				 .opcode = (enum uiw_wr_opcode)1,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &s1,
				 .num_sge = 1,
				 .remote_addr = (uintptr_t)B.buf + 49152,
				 .rkey = B.mr->stag,
				 .imm_data = htonl(0x600d)};
	post(&A, &w);
	expect_wc(A.cq, 503, UIW_WC_SUCCESS, UIW_WC_RDMA_WRITE, UINT32_MAX, NULL);
	expect_wc(B.cq, rid, UIW_WC_SUCCESS, 129 /* RECV_RDMA_WITH_IMM */, UINT32_MAX, &wc);
	CHECK((wc.flags & UIW_WC_WITH_IMM) && wc.imm_data == htonl(0x600d),
	      "Write with Immediate: flags %u imm 0x%x", wc.flags, ntohl(wc.imm_data));
	CHECK(!memcmp(B.buf + 49152, A.buf, 16), "Write with Immediate data");
}
#else
static void ops_7306(void)
{
	CHECK(0, "RFC 7306 negotiated but rdmap.h has no RFC 7306 fields");
}
#endif

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FATAL: conf_roundtrip hung (watchdog)\n";
	if (write(2, m, sizeof(m) - 1) < 0) {
	}
	_exit(3);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		mode = argv[1];
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(60);
	crc_init();
	int rev = env_int("UIWARP_MPA_REV", 2);
	bool crc = env_int("UIWARP_MPA_CRC", 1) != 0;
	bool p2p = env_int("UIWARP_P2P", 1) != 0 && rev == 2;
	const char *rtr_env = getenv("UIWARP_RTR");
	bool want_markers = env_int("UIWARP_MPA_MARKERS", 1) >= 2;
	bool want_7306 = env_int("UIWARP_RFC7306", 0) != 0;
	char rtr_kind = rtr_env && !strcmp(rtr_env, "read")   ? 'r'
			: rtr_env && !strcmp(rtr_env, "send") ? 's'
							      : 'w';
	static const char *const rtr_names[] = {"write", "read", "send"};
	const char *rtr_name = rtr_names[rtr_kind == 'w' ? 0 : rtr_kind == 'r' ? 1 : 2];

	side_init(&A);
	side_init(&B);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (uiw_listen((struct sockaddr *)&sin, 4, &L))
		die("listen");
	struct sockaddr_storage la;
	uiw_listener_addr(L, &la);
	static struct proxy px;
	proxy_start(&px, &la);
	pthread_t pt;
	pthread_create(&pt, NULL, passive, NULL);
	struct sockaddr_in dst = {.sin_family = AF_INET,
				  .sin_port = htons(px.port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct uiw_conn_param cp = {.responder_resources = 8, .initiator_depth = 8};
	struct uiw_conn_info info;
	bool rejected = false;
	int rc = uiw_connect(A.qp, NULL, (struct sockaddr *)&dst, &cp, 10000, &info, &rejected);
	pthread_join(pt, NULL);
	if (rc || accept_rc)
		die("connect %d accept %d (rejected %d)", rc, accept_rc, rejected);

	/* what the engine says it negotiated (uiw_qp_conn_mode) */
	struct uiw_conn_mode cm[2];
	CHECK(uiw_qp_conn_mode(A.qp, &cm[0]) == 0 && uiw_qp_conn_mode(B.qp, &cm[1]) == 0,
	      "uiw_qp_conn_mode");
	for (int k = 0; k < 2; k++) {
		CHECK(cm[k].mpa_rev == rev && cm[k].p2p == p2p &&
			  !strcmp(cm[k].rtr, !p2p ? "" : rtr_name),
		      "conn mode %s: rev %d p2p %d rtr '%s'", k ? "B" : "A", cm[k].mpa_rev,
		      cm[k].p2p, cm[k].rtr);
		CHECK(cm[k].crc == px.wi.crc, "conn mode %s: crc %d, wire %d", k ? "B" : "A",
		      cm[k].crc, px.wi.crc);
		/* rev 1 has no RFC 6581 word: 1/1 (interop notes) */
		unsigned want = rev == 1 ? 1 : 8;
		CHECK(cm[k].ird == want && cm[k].ord == want, "conn mode: IRD/ORD %u/%u, want %u",
		      cm[k].ird, cm[k].ord, want);
	}

	/* the handshake as seen on the wire */
	struct wire *wi = &px.wi, *wr = &px.wr;
	CHECK(wi->hs_done && wr->hs_done, "handshake seen");
	CHECK(!memcmp(wi->hs, "MPA ID Req Frame", 16) && !memcmp(wr->hs, "MPA ID Rep Frame", 16),
	      "MPA keys");
	CHECK(wi->rev == rev && wr->rev == rev, "MPA revisions %d/%d, want %d", wi->rev, wr->rev,
	      rev);
	CHECK(!!(wi->flags & 0x40) == crc, "request C flag 0x%02x (UIWARP_MPA_CRC=%d)", wi->flags,
	      crc);
	CHECK(!(wr->flags & 0x20), "reply without R");
	/* RFC 5044 §7.1: Res bits zero on send, but for uiwarp's RFC 7306
	 * offer (0x01, only when RFC 7306 was asked for) and the large-FPDU
	 * bit (0x08, siw's GSO bit, on unless UIWARP_MPA_LARGE_FPDU=0) */
	const char *lf = getenv("UIWARP_MPA_LARGE_FPDU");
	bool want_large = !(lf && !strcmp(lf, "0"));
	uint8_t allowed = (want_7306 ? 0x01 : 0) | (want_large ? 0x08 : 0);
	CHECK(((wi->flags | wr->flags) & 0x0f & ~allowed) == 0,
	      "reserved MPA flags zero but 0x%02x (0x%02x/0x%02x)", allowed, wi->flags, wr->flags);
	CHECK(!!(wi->flags & 0x08) == want_large && !!(wr->flags & 0x08) == want_large,
	      "large-FPDU bit 0x08 %s in request and reply (0x%02x/0x%02x)",
	      want_large ? "set" : "clear", wi->flags, wr->flags);
	if ((wi->flags | wr->flags) & 0x01)
		printf("NOTE [%s]: MPA reserved flag bits used: request 0x%02x reply 0x%02x\n",
		       mode, wi->flags, wr->flags);
	if (want_markers && !(wi->flags & 0x80)) {
		printf("SKIP [%s]: markers asked for (UIWARP_MPA_MARKERS=2) but the MPA Request "
		       "has no M flag: markers were not negotiated\n",
		       mode);
		return SKIP;
	}
	if (want_markers)
		CHECK((wr->flags & 0x80) && wi->markers && wr->markers,
		      "markers negotiated both ways (request 0x%02x reply 0x%02x)", wi->flags,
		      wr->flags);
	if (rev == 2) {
		CHECK((wi->flags & 0x10) && wi->has_word && wr->has_word,
		      "RFC 6581 word in request and reply");
		CHECK(!!(wi->ird_w & 0x8000) == p2p, "P2P bit 0x%04x (UIWARP_P2P)", wi->ird_w);
		CHECK(!!(wr->ird_w & 0x8000) == p2p, "reply echoes P2P 0x%04x", wr->ird_w);
		if (p2p) {
			bool w_ = wr->ord_w & 0x8000, r_ = wr->ord_w & 0x4000,
			     s_ = wr->ird_w & 0x4000;
			CHECK((int)w_ + (int)r_ + (int)s_ == 1, "reply picks one RTR kind");
			CHECK(rtr_kind == 'w'	? w_
			      : rtr_kind == 'r' ? r_
						: s_,
			      "reply picks the %s RTR", rtr_name);
		}
	}
	/* the RTR, or for no P2P the first FPDU of the initiator, comes first */
	for (int i = 0; p2p && i < 1000 && !wi->first_fpdu_done; i++)
		usleep(1000);
	if (p2p) {
		CHECK(wi->first_fpdu_done, "an RTR went out");
		if (rtr_kind == 'w')
			CHECK(wi->first_tagged && wi->first_op == 0 && wi->first_len == 14 &&
				  wi->first_stag != 0,
			      "Write RTR: zero-length tagged Write with a non-zero STag");
		else if (rtr_kind == 'r')
			CHECK(!wi->first_tagged && wi->first_op == 1 && wi->first_len == 18 + 28,
			      "Read RTR: a zero-length Read Request");
		else
			CHECK(!wi->first_tagged && wi->first_op == 3 && wi->first_len == 18,
			      "Send RTR: a zero-length Send");
	}

	ops();
	bool do7306 = false;
	if (want_7306) {
		do7306 = uiw_qp_caps && (uiw_qp_caps(A.qp) & 1) && (uiw_qp_caps(B.qp) & 1);
		if (!do7306) {
			printf("SKIP [%s]: UIWARP_RFC7306=1 but RFC 7306 was not negotiated "
			       "(engine support not there yet)\n",
			       mode);
			return SKIP;
		}
		ops_7306();
	}

	/* graceful close: B's remaining receives flush, both see DISCONNECTED */
	post_recv(&B, 9999, 0, 64);
	CHECK(uiw_qp_modify(A.qp, UIW_QPS_SQD) == 0, "SQD");
	struct uiw_wc wc;
	expect_wc(B.cq, 9999, UIW_WC_WR_FLUSH_ERR, -1, UINT32_MAX, &wc);
	for (int i = 0; i < 500 && (!atomic_load(&A.disconnected) || !atomic_load(&B.disconnected));
	     i++)
		usleep(10000);
	CHECK(atomic_load(&A.disconnected) == 1 && atomic_load(&B.disconnected) == 1,
	      "both sides DISCONNECTED (%d/%d)", atomic_load(&A.disconnected),
	      atomic_load(&B.disconnected));
	CHECK(!atomic_load(&A.terminated) && !atomic_load(&B.terminated), "no Terminate");
	pthread_join(px.t, NULL);
	close(px.lfd);

	printf("PROXY port %u\n", px.port);
	/* the rest of the wire checks */
	CHECK(wi->fp_n == 0 && wr->fp_n == 0, "streams end on FPDU boundaries");
	CHECK(!wi->bad_crc && !wr->bad_crc, "CRCs (%s): %lu/%lu bad", crc ? "on" : "zero field",
	      wi->bad_crc, wr->bad_crc);
	CHECK(!wi->bad_pad && !wr->bad_pad, "pad bytes zero");
	CHECK(!wi->bad_hdr && !wr->bad_hdr, "DDP/RDMAP headers: %lu/%lu bad", wi->bad_hdr,
	      wr->bad_hdr);
	CHECK(!wi->bad_marker && !wr->bad_marker, "markers: %lu/%lu bad", wi->bad_marker,
	      wr->bad_marker);
	if (want_markers)
		CHECK(wi->markers_seen && wr->markers_seen, "markers seen both ways");
	else
		CHECK(!wi->markers && !wr->markers, "no markers negotiated");
	CHECK(wr->first_fpdu_seq > wi->first_fpdu_seq,
	      "the responder sent nothing before the initiator's first FPDU (RFC 5044 §7.1.2)");
	static const char *names[8] = {"Write",	  "ReadReq", "ReadResp",  "Send",
				       "SendInv", "SendSE",  "SendSEInv", "Terminate"};
	for (int op = 0; op < 7; op++)
		if (op != 2)
			CHECK(wi->ops[op] > 0, "initiator sent %s", names[op]);
	CHECK(wr->ops[2] > 0 && wr->ops[1] > 0, "responder sent Read Request and Response");
	CHECK(!wi->ops[7] && !wr->ops[7], "no Terminate on the wire");
	if (do7306)
		CHECK(wi->ops[8] || wi->ops[9] || wi->ops[10], "RFC 7306 opcodes on the wire");
	printf("[%s] rev %d crc %d p2p %d rtr %c markers %d rfc7306 %d: i->r %lu FPDUs, r->i %lu "
	       "FPDUs, markers %lu/%lu, %d failures\n",
	       mode, rev, crc, p2p, p2p ? rtr_kind : '-', want_markers, do7306, wi->fpdus,
	       wr->fpdus, wi->markers_seen, wr->markers_seen, failures);

	uiw_listener_close(L);
	side_fini(&A);
	side_fini(&B);
	return failures ? 1 : 0;
}
