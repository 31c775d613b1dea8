/* fi_check: a libfabric program of our own (libfabric 1.17 API, Debian's
 * libfabric-dev) for what fabtests' fi_msg_pingpong / fi_msg_bw /
 * fi_rdm_pingpong / fi_rma_bw check; fabtests is not packaged in Debian
 * bookworm (libfabric-bin has only fi_info, fi_pingpong, fi_strerror).
 *
 *   fi_check -p PROV -t TEST [-s SRC] -B PORT              server
 *   fi_check -p PROV -t TEST -B PORT SERVER-ADDR            client
 *
 * TEST:
 *   msg_pingpong  FI_EP_MSG: Send / Recv ping-pong, 100 rounds of each size
 *                 1 B, 64 B, 4 KiB, 64 KiB, 1 MiB (each message's bytes
 *                 checked on arrival)
 *   msg_bw        FI_EP_MSG: 64 KiB Sends in windows of 16 (the server
 *                 has the window's 16 receives posted before it accepts,
 *                 re-posts them and acks each window: iWARP has no RNR
 *                 retry), 64 windows (64 MiB), every byte checked
 *   msg_rma       FI_EP_MSG: the server sends an MR's address and key; the
 *                 client fi_write()s 1 MiB of pattern into it, fi_read()s
 *                 it back into a buffer of its own and compares, then
 *                 tells the server, which checks its MR too
 *   rdm_tagged    FI_EP_RDM (e.g. "verbs;ofi_rxm"): tagged ping-pong
 *                 (fi_tsend / fi_trecv), sizes as msg_pingpong (rxm's
 *                 rendezvous for the large ones), checked
 *   rdm_bw        FI_EP_RDM: the client streams windows of messages to the
 *                 server, first untagged (fi_send / fi_recv), then tagged
 *                 (fi_tsend / fi_trecv, tag = the message's sequence
 *                 number): 8 MiB of each of 1000 B, 64 KiB, 200000 B and
 *                 1 MiB messages of each kind, about 64 MiB in all. With
 *                 rxm's defaults (fi_rxm(7)) 1000 B goes eager, 64 KiB by
 *                 segmentation (SAR, to 128 KiB) and the larger two by
 *                 rendezvous (RMA Read by the receiver; FI_OFI_RXM_SAR_LIMIT=
 *                 16384 sends 64 KiB by rendezvous too). A window is up to
 *                 64 messages and 4 MiB; the server has its receives
 *                 posted before the window is sent, checks every
 *                 completion (length, tag) and every byte (a pattern of
 *                 the message's sequence number and the byte's offset),
 *                 posts the next window's receives and acks with the bytes
 *                 and messages checked so far; the client checks each
 *                 ack's counts against what it sent, and the last one,
 *                 "done", against the total
 *
 * -F FAULT (client, rdm_bw; to show the checks fail): "corrupt" flips one
 * bit of the first untagged 1 MiB message after it is filled, "short" sends
 * that message one byte short, "missing" leaves out the test's last
 * message. The server must report it and exit 1 (the client then gets no
 * "done" and exits 1 too).
 *
 * PORT: the server's TCP port for the address exchange (RDM endpoint
 * names; the MSG server listens on PORT+1 with its passive endpoint). The
 * server listens on PORT only once its own endpoint is ready, so a client
 * started after `ss` shows PORT finds everything in place. SRC (server):
 * the address to open the RDM endpoint on.
 *
 * Prints "fi_check: TEST PROV ok: ..." and exits 0; on any failure prints
 * what failed and exits 1. Every wait is bounded (10 s per completion, 15 s for a client
 * with -F; 60 s in all: alarm).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define MAX_MSG (1 << 20)
#define BW_SIZE 65536
#define BW_WINDOW 16 /* x BW_SIZE = the 1 MiB receive half */
#define BW_WINDOWS 64
#define ROUNDS 100
#define WAIT_MS 10000
#define RB_HALF (4u << 20)  /* rdm_bw: the send / receive halves of buf */
#define RB_BYTES (8u << 20) /* rdm_bw: per size and kind */
#define RB_MAX_WINDOW 64
#define RB_MAX_WINDOWS 512
#define RB_ACK 0x61636b21u  /* "ack!" */
#define RB_DONE 0x646f6e65u /* "done" */
#define RB_TAG 0x7262000000000000ull

static const size_t sizes[] = {1, 64, 4096, 65536, MAX_MSG};

static const size_t rb_sizes[] = {1000, 65536, 200000, MAX_MSG};

static const char *prov, *test, *srv_addr, *src_addr, *fault;
static int port;
static bool server;

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_pep *pep;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_mr *mr;
static struct fi_info *info;
static uint8_t *buf;	      /* [0, half) send, [half, 2 * half) receive */
static size_t half = MAX_MSG; /* RB_HALF for rdm_bw */
static void *desc;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static struct fi_context ctx_tx, ctx_rx;
static int oob = -1;
static char names[512]; /* provider, fabric, domain of the endpoint */

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fi_check: %s %s: FAIL: ", test ? test : "", server ? "server" : "client");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define FI_CHECK(call)                                                                             \
	do {                                                                                       \
		int r_ = (int)(call);                                                              \
		if (r_)                                                                            \
			die("%s: %d (%s)", #call, r_, fi_strerror(-r_));                           \
	} while (0)

static uint8_t pattern(size_t i, unsigned round, size_t size)
{
	return (uint8_t)(i * 7 + round * 13 + size * 3 + 1);
}

static void fill(uint8_t *p, size_t len, unsigned round)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(i, round, len);
}

static void check(const uint8_t *p, size_t len, unsigned round, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern(i, round, len))
			die("%s: byte %zu of %zu (round %u) is 0x%02x, not 0x%02x", what, i, len,
			    round, p[i], pattern(i, round, len));
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Completions read while a post waited for room (rdm_bw), handed out by
 * next_comp before the CQ's own. */
static struct fi_cq_tagged_entry backlog[RB_MAX_WINDOW * 2];
static unsigned backlog_n;

/* Reads the CQ once (which is also what makes rxm progress): true with an
 * entry in *e, false when there is none. Fails on an error entry. */
static bool read_cq(struct fi_cq_tagged_entry *e)
{
	ssize_t n;

	memset(e, 0, sizeof(*e));
	n = fi_cq_read(cq, e, 1); /* a MSG or TAGGED entry: e's first fields */
	if (n == 1)
		return true;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};

		fi_cq_readerr(cq, &err, 0);
		die("completion error %d (%s), provider error %d", err.err, fi_strerror(err.err),
		    err.prov_errno);
	}
	if (n != -FI_EAGAIN)
		die("fi_cq_read: %zd (%s)", n, fi_strerror((int)-n));
	return false;
}

/* A read of the CQ while a post waits for room; an entry goes to the
 * backlog. */
static void progress(void)
{
	struct fi_cq_tagged_entry e;

	if (!read_cq(&e))
		return;
	if (backlog_n == sizeof(backlog) / sizeof(backlog[0]))
		die("more completions than operations");
	backlog[backlog_n++] = e;
}

/* The next completion of the CQ into *e; fails on an error entry or when
 * none comes within WAIT_MS (a client with -F: 1.5 x, so that the server's
 * own check or timeout reports the fault first). */
static void next_comp(struct fi_cq_tagged_entry *e)
{
	long wait_ms = fault ? WAIT_MS * 3 / 2 : WAIT_MS;
	struct timespec t0;

	if (backlog_n) {
		*e = backlog[0];
		memmove(backlog, backlog + 1, --backlog_n * sizeof(backlog[0]));
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!read_cq(e))
		if (ms_since(&t0) > wait_ms)
			die("no completion within %ld ms", wait_ms);
}

/* Waits for the completion of the operation with context ctx. A send
 * (ctx_tx) and the posted receive (ctx_rx) may complete in either order (a
 * reply, even the peer's next message, may arrive before the send that
 * caused it is reported): a completion of the other one is remembered for
 * its own wait. Anything else fails. */
static unsigned tx_seen, rx_seen;

static void wait_comp(void *ctx)
{
	for (;;) {
		struct fi_cq_tagged_entry e;

		if (ctx == &ctx_tx && tx_seen) {
			tx_seen--;
			return;
		}
		if (ctx == &ctx_rx && rx_seen) {
			rx_seen--;
			return;
		}
		next_comp(&e);
		if (e.op_context == ctx)
			return;
		if (e.op_context == &ctx_tx)
			tx_seen++;
		else if (e.op_context == &ctx_rx)
			rx_seen++;
		else
			die("completion for an unexpected operation (flags 0x%llx, %zu bytes)",
			    (unsigned long long)e.flags, e.len);
	}
}

/* Waits for event on the EQ (FI_CONNREQ / FI_CONNECTED); *entry gets the
 * entry. */
static void wait_eq(uint32_t want, struct fi_eq_cm_entry *entry)
{
	uint32_t ev;
	ssize_t n = fi_eq_sread(eq, &ev, entry, sizeof(*entry), WAIT_MS, 0);

	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err = {0};

		fi_eq_readerr(eq, &err, 0);
		die("EQ error %d (%s), provider error %d", err.err, fi_strerror(err.err),
		    err.prov_errno);
	}
	if (n < 0)
		die("fi_eq_sread: %zd (%s)", n, fi_strerror((int)-n));
	if (ev != want)
		die("EQ event %u, wanted %u", ev, want);
}

/* ----------------------------------------------------------- the OOB */

static void oob_listen_accept(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
		die("OOB listen on %d: %s", port, strerror(errno));
	oob = accept(l, NULL, NULL);
	if (oob < 0)
		die("OOB accept: %s", strerror(errno));
	close(l);
}

static void oob_connect(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	if (inet_pton(AF_INET, srv_addr, &a.sin_addr) != 1)
		die("bad server address %s", srv_addr);
	for (int i = 0; i < 100; i++) { /* 10 s */
		oob = socket(AF_INET, SOCK_STREAM, 0);
		if (oob >= 0 && !connect(oob, (struct sockaddr *)&a, sizeof(a)))
			return;
		close(oob);
		usleep(100000);
	}
	die("OOB connect to %s:%d: %s", srv_addr, port, strerror(errno));
}

static void oob_xfer(const void *out, void *in, size_t len)
{
	size_t got = 0;

	if (write(oob, out, len) != (ssize_t)len)
		die("OOB write: %s", strerror(errno));
	while (got < len) {
		ssize_t n = read(oob, (char *)in + got, len - got);

		if (n <= 0)
			die("OOB read: %s", n ? strerror(errno) : "closed");
		got += (size_t)n;
	}
}

/* ------------------------------------------------------------ set up */

static struct fi_info *hints_for(enum fi_ep_type type)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		die("fi_allocinfo");
	h->ep_attr->type = type;
	h->caps = type == FI_EP_RDM ? FI_TAGGED : FI_MSG | FI_RMA;
	if (!strcmp(test, "rdm_bw")) {
		/* untagged receives take messages in the order they were sent */
		h->caps = FI_MSG | FI_TAGGED;
		h->tx_attr->msg_order = FI_ORDER_SAS;
		h->rx_attr->msg_order = FI_ORDER_SAS;
	}
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode =
	    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	h->addr_format = FI_SOCKADDR_IN;
	h->fabric_attr->prov_name = strdup(prov);
	return h;
}

/* Domain, CQ, MR of the 2 MiB buffer, and the endpoint for fi (bound to the
 * CQ, and the EQ or AV). */
static void open_ep(struct fi_info *fi)
{
	struct fi_cq_attr ca = {.format = fi->ep_attr->type == FI_EP_RDM ? FI_CQ_FORMAT_TAGGED
									 : FI_CQ_FORMAT_MSG,
				.size = 256};

	snprintf(names, sizeof(names), "provider %s, fabric %s, domain %s",
		 fi->fabric_attr->prov_name, fi->fabric_attr->name, fi->domain_attr->name);

	FI_CHECK(fi_domain(fabric, fi, &domain, NULL));
	FI_CHECK(fi_cq_open(domain, &ca, &cq, NULL));
	FI_CHECK(fi_endpoint(domain, fi, &ep, NULL));
	FI_CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	if (fi->ep_attr->type == FI_EP_MSG) {
		FI_CHECK(fi_ep_bind(ep, &eq->fid, 0));
	} else {
		struct fi_av_attr aa = {.type = FI_AV_MAP};

		FI_CHECK(fi_av_open(domain, &aa, &av, NULL));
		FI_CHECK(fi_ep_bind(ep, &av->fid, 0));
	}
	FI_CHECK(fi_enable(ep));
	FI_CHECK(
	    fi_mr_reg(domain, buf, 2 * half,
		      FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
		      0, 0, &mr, NULL));
	if (fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		FI_CHECK(fi_mr_bind(mr, &ep->fid, 0));
		FI_CHECK(fi_mr_enable(mr));
	}
	desc = fi_mr_desc(mr);
}

static void post_recv(size_t len)
{
	if (info->ep_attr->type == FI_EP_RDM)
		FI_CHECK(fi_trecv(ep, buf + half, len, desc, FI_ADDR_UNSPEC, 0x55, 0, &ctx_rx));
	else
		FI_CHECK(fi_recv(ep, buf + half, len, desc, FI_ADDR_UNSPEC, &ctx_rx));
}

static void post_send(size_t len)
{
	ssize_t r;

	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { /* -FI_EAGAIN: queue full for now (bounded) */
		if (info->ep_attr->type == FI_EP_RDM)
			r = fi_tsend(ep, buf, len, desc, peer, 0x55, &ctx_tx);
		else
			r = fi_send(ep, buf, len, desc, peer, &ctx_tx);
	} while (r == -FI_EAGAIN && ms_since(&t0) < WAIT_MS);
	if (r)
		die("send of %zu bytes: %zd (%s)", len, r, fi_strerror((int)-r));
}

/* Windows of BW_WINDOW sends; the receiver has BW_WINDOW receives posted
 * (slots of its receive half), checks each, re-posts them all and acks. */
static struct fi_context bw_ctx[BW_WINDOW];

static void bw_post_window_recvs(void)
{
	for (int i = 0; i < BW_WINDOW; i++)
		FI_CHECK(fi_recv(ep, buf + half + (size_t)i * BW_SIZE, BW_SIZE, desc,
				 FI_ADDR_UNSPEC, &bw_ctx[i]));
}

static void setup_msg(void)
{
	struct fi_info *h = hints_for(FI_EP_MSG);
	struct fi_eq_attr qa = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_eq_cm_entry entry;
	char svc[16];

	snprintf(svc, sizeof(svc), "%d", port + 1);
	FI_CHECK(fi_getinfo(FI_VERSION(1, 17), server ? src_addr : srv_addr, svc,
			    server ? FI_SOURCE : 0, h, &info));
	FI_CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	FI_CHECK(fi_eq_open(fabric, &qa, &eq, NULL));
	if (server) {
		FI_CHECK(fi_passive_ep(fabric, info, &pep, NULL));
		FI_CHECK(fi_pep_bind(pep, &eq->fid, 0));
		FI_CHECK(fi_listen(pep));
		oob_listen_accept();
		wait_eq(FI_CONNREQ, &entry);
		open_ep(entry.info);
		if (!strcmp(test, "msg_bw"))
			bw_post_window_recvs();
		else
			post_recv(MAX_MSG);
		FI_CHECK(fi_accept(ep, NULL, 0));
		wait_eq(FI_CONNECTED, &entry);
		fi_freeinfo(entry.info);
	} else {
		oob_connect();
		open_ep(info);
		post_recv(MAX_MSG);
		FI_CHECK(fi_connect(ep, info->dest_addr, NULL, 0));
		wait_eq(FI_CONNECTED, &entry);
	}
	fi_freeinfo(h);
}

/* rdm_bw's plan: windows of up to RB_MAX_WINDOW messages and RB_HALF
 * bytes, RB_BYTES (rounded up to whole messages) per size, untagged then
 * tagged; message seq's bytes are rb_fill(seq). */
struct rb_win {
	bool tagged;
	size_t size, k; /* k messages of size */
	uint64_t seq;	/* of the first */
};

static struct rb_win plan[RB_MAX_WINDOWS];
static unsigned nplan;
static struct fi_context rb_ctx[RB_MAX_WINDOW];

static void rb_plan(void)
{
	uint64_t seq = 0;

	for (int kind = 0; kind < 2; kind++)
		for (size_t s = 0; s < sizeof(rb_sizes) / sizeof(rb_sizes[0]); s++) {
			size_t size = rb_sizes[s], n = (RB_BYTES + size - 1) / size;
			size_t per = RB_HALF / size;

			if (per > RB_MAX_WINDOW)
				per = RB_MAX_WINDOW;
			for (size_t done = 0; done < n; done += per) {
				if (nplan == RB_MAX_WINDOWS)
					die("plan: too many windows");
				plan[nplan++] =
				    (struct rb_win){.tagged = kind == 1,
						    .size = size,
						    .k = n - done < per ? n - done : per,
						    .seq = seq};
				seq += plan[nplan - 1].k;
			}
		}
}

/* splitmix64's finaliser over (seq, word): a message's bytes depend on its
 * sequence number and their offset, so a lost, repeated, reordered or
 * misplaced piece shows */
static uint64_t rb_word(uint64_t seq, uint64_t word)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull ^ (word + 1) * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 29);
}

static void rb_fill(uint8_t *p, size_t len, uint64_t seq)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = rb_word(seq, i / 8);

		for (size_t b = 0; b < 8 && i + b < len; b++)
			p[i + b] = (uint8_t)(v >> (8 * b));
	}
}

static void rb_check(const uint8_t *p, size_t len, uint64_t seq)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = rb_word(seq, i / 8);

		for (size_t b = 0; b < 8 && i + b < len; b++)
			if (p[i + b] != (uint8_t)(v >> (8 * b)))
				die("message %llu (%zu bytes): byte %zu is 0x%02x, not 0x%02x",
				    (unsigned long long)seq, len, i + b, p[i + b],
				    (uint8_t)(v >> (8 * b)));
	}
}

/* The server's receives for window w, slot j at buf + half + j * size. */
static void rb_post_recvs(const struct rb_win *w)
{
	for (size_t j = 0; j < w->k; j++) {
		uint8_t *p = buf + half + j * w->size;

		if (w->tagged)
			FI_CHECK(fi_trecv(ep, p, w->size, desc, FI_ADDR_UNSPEC,
					  RB_TAG | (w->seq + j), 0, &rb_ctx[j]));
		else
			FI_CHECK(fi_recv(ep, p, w->size, desc, FI_ADDR_UNSPEC, &rb_ctx[j]));
	}
}

/* The client's receive for the server's acks. */
static void rb_post_ack_recv(void)
{
	FI_CHECK(fi_recv(ep, buf + half, 64, desc, FI_ADDR_UNSPEC, &ctx_rx));
}

static void rb_first_posts(void)
{
	rb_plan();
	if (server)
		rb_post_recvs(&plan[0]);
	else
		rb_post_ack_recv();
}

static void setup_rdm(void)
{
	struct fi_info *h = hints_for(FI_EP_RDM);
	char mine[256], theirs[256];
	size_t len = sizeof(mine);

	FI_CHECK(fi_getinfo(FI_VERSION(1, 17), server ? src_addr : NULL, NULL,
			    server && src_addr ? FI_SOURCE : 0, h, &info));
	FI_CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	open_ep(info);
	if (strcmp(test, "rdm_bw"))
		post_recv(MAX_MSG);
	else
		rb_first_posts(); /* before the peer learns our name */
	memset(mine, 0, sizeof(mine));
	FI_CHECK(fi_getname(&ep->fid, mine, &len));
	if (server)
		oob_listen_accept();
	else
		oob_connect();
	oob_xfer(mine, theirs, sizeof(mine));
	if (fi_av_insert(av, theirs, 1, &peer, 0, NULL) != 1)
		die("fi_av_insert of the peer's name failed");
	fi_freeinfo(h);
}

/* ------------------------------------------------------------- tests */

static unsigned long long moved;

static void pingpong(void)
{
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t len = sizes[s];

		for (unsigned r = 0; r < ROUNDS; r++) {
			if (!server) {
				fill(buf, len, r);
				post_send(len);
				wait_comp(&ctx_tx);
			}
			wait_comp(&ctx_rx);
			check(buf + half, len, r, "received");
			post_recv(MAX_MSG); /* before the peer can send again */
			if (server) {
				fill(buf, len, r);
				post_send(len);
				wait_comp(&ctx_tx);
			}
			moved += 2 * len;
		}
	}
}

static void msg_bw(void)
{
	struct fi_cq_tagged_entry e;
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned w = 0; w < BW_WINDOWS; w++) {
		if (server) {
			/* the window, and the previous ack's send completion */
			for (unsigned done = 0; done < BW_WINDOW;) {
				int i;

				next_comp(&e);
				if (e.op_context == &ctx_tx) {
					tx_seen++;
					continue;
				}
				i = (int)((struct fi_context *)e.op_context - bw_ctx);
				if (i < 0 || i >= BW_WINDOW || !(e.flags & FI_RECV))
					die("unexpected completion in window %u", w);
				check(buf + half + (size_t)i * BW_SIZE, BW_SIZE,
				      w * BW_WINDOW + (unsigned)i, "bw message");
				done++;
			}
			if (w)
				wait_comp(&ctx_tx); /* the previous ack */
			if (w + 1 < BW_WINDOWS)
				bw_post_window_recvs(); /* before the ack */
			fill(buf, 1, w + 1);
			post_send(1); /* ack */
			if (w + 1 == BW_WINDOWS)
				wait_comp(&ctx_tx);
		} else {
			unsigned sends = 0;
			bool ack = false;

			for (int i = 0; i < BW_WINDOW; i++) {
				uint8_t *p = buf + (size_t)i * BW_SIZE;

				fill(p, BW_SIZE, w * BW_WINDOW + (unsigned)i);
				FI_CHECK(fi_send(ep, p, BW_SIZE, desc, peer, &bw_ctx[i]));
			}
			/* the window's send completions and the ack, any order */
			while (sends < BW_WINDOW || !ack) {
				next_comp(&e);
				if (e.op_context == &ctx_rx && !ack)
					ack = true;
				else if ((struct fi_context *)e.op_context >= bw_ctx &&
					 (struct fi_context *)e.op_context < bw_ctx + BW_WINDOW)
					sends++;
				else
					die("unexpected completion in window %u", w);
			}
			check(buf + half, 1, w + 1, "ack");
			post_recv(MAX_MSG);
		}
		moved += (unsigned long long)BW_WINDOW * BW_SIZE;
	}
	if (!server)
		printf("fi_check: msg_bw: %llu bytes in %ld ms\n", moved, ms_since(&t0));
}

struct rma_info {
	uint64_t addr, key;
};

static void msg_rma(void)
{
	struct rma_info ri;
	struct fi_context c;

	if (server) {
		/* the MR's receive half is the target; tell the client */
		memset(buf + half, 0, MAX_MSG);
		ri.addr = (uintptr_t)(buf + half);
		ri.key = fi_mr_key(mr);
		memcpy(buf, &ri, sizeof(ri));
		post_send(sizeof(ri));
		wait_comp(&ctx_tx);
		/* the client's "done" lands in the receive posted at setup, at
		 * MAX_MSG, over the first 16 bytes it wrote, with the same 16
		 * bytes: the whole target must hold the pattern */
		wait_comp(&ctx_rx);
		check(buf + half, MAX_MSG, 7, "RMA target");
		moved = 2 * MAX_MSG;
		return;
	}
	wait_comp(&ctx_rx);
	memcpy(&ri, buf + half, sizeof(ri));
	fill(buf, MAX_MSG, 7);
	FI_CHECK(fi_write(ep, buf, MAX_MSG, desc, peer, ri.addr, ri.key, &c));
	wait_comp(&c);
	memset(buf + half, 0, MAX_MSG);
	FI_CHECK(fi_read(ep, buf + half, MAX_MSG, desc, peer, ri.addr, ri.key, &c));
	wait_comp(&c);
	check(buf + half, MAX_MSG, 7, "read back");
	/* done: 16 bytes of the same pattern, so the server's target keeps
	 * the pattern where the message lands */
	post_send(16);
	wait_comp(&ctx_tx);
	moved = 2 * MAX_MSG;
}

/* rdm_bw (see the top): the server's acks. */
struct rb_ack {
	uint32_t magic, window;
	uint64_t bytes, msgs; /* checked so far */
};

/* A send that waits for room (-FI_EAGAIN) reading the CQ meanwhile, which
 * is what makes rxm progress; what it reads waits in the backlog. */
static void rb_send(void *p, size_t len, bool tagged, uint64_t tag, void *ctx)
{
	struct timespec t0;
	ssize_t r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (tagged)
			r = fi_tsend(ep, p, len, desc, peer, tag, ctx);
		else
			r = fi_send(ep, p, len, desc, peer, ctx);
		if (r != -FI_EAGAIN || ms_since(&t0) > WAIT_MS)
			break;
		progress();
	}
	if (r)
		die("send of %zu bytes: %zd (%s)", len, r, fi_strerror((int)-r));
}

/* The slot (rb_ctx index) of window i that completion e is for; fails
 * unless it is one of the window's, not seen before (got), with flag
 * (FI_SEND / FI_RECV). */
static size_t rb_slot(const struct fi_cq_tagged_entry *e, unsigned i, bool *got, uint64_t flag)
{
	const struct fi_context *c = e->op_context;
	size_t k = plan[i].k;

	if (c < rb_ctx || c >= rb_ctx + k || got[c - rb_ctx] || !(e->flags & flag))
		die("window %u: unexpected completion (flags 0x%llx, %zu bytes)", i,
		    (unsigned long long)e->flags, e->len);
	got[c - rb_ctx] = true;
	return (size_t)(c - rb_ctx);
}

static void rb_server_window(unsigned i, uint64_t *bytes, uint64_t *msgs)
{
	const struct rb_win *w = &plan[i];
	bool got[RB_MAX_WINDOW] = {false};
	struct rb_ack a;

	for (size_t done = 0; done < w->k;) {
		struct fi_cq_tagged_entry e;
		size_t j;

		next_comp(&e);
		if (e.op_context == &ctx_tx) { /* the previous ack's send */
			tx_seen++;
			continue;
		}
		j = rb_slot(&e, i, got, FI_RECV);
		if (w->tagged && (!(e.flags & FI_TAGGED) || e.tag != (RB_TAG | (w->seq + j))))
			die("message %llu: tag 0x%llx, flags 0x%llx",
			    (unsigned long long)(w->seq + j), (unsigned long long)e.tag,
			    (unsigned long long)e.flags);
		if (e.len != w->size)
			die("message %llu: %zu bytes, not %zu", (unsigned long long)(w->seq + j),
			    e.len, w->size);
		rb_check(buf + half + j * w->size, w->size, w->seq + j);
		*bytes += w->size;
		(*msgs)++;
		done++;
	}
	if (i)
		wait_comp(&ctx_tx); /* the previous ack: buf is free again */
	if (i + 1 < nplan)
		rb_post_recvs(&plan[i + 1]); /* before the ack */
	a = (struct rb_ack){
	    .magic = i + 1 < nplan ? RB_ACK : RB_DONE, .window = i, .bytes = *bytes, .msgs = *msgs};
	memcpy(buf, &a, sizeof(a));
	rb_send(buf, sizeof(a), false, 0, &ctx_tx);
}

static void rb_client_window(unsigned i, uint64_t *bytes, uint64_t *msgs)
{
	const struct rb_win *w = &plan[i];
	bool got[RB_MAX_WINDOW] = {false}, ack = false, last = i + 1 == nplan;
	size_t sends = 0;
	struct rb_ack a;

	for (size_t j = 0; j < w->k; j++) {
		uint8_t *p = buf + j * w->size;
		uint64_t seq = w->seq + j;
		size_t len = w->size;
		bool first_big = !w->tagged && w->size == MAX_MSG && j == 0 &&
				 (i == 0 || plan[i - 1].size != MAX_MSG);

		rb_fill(p, len, seq);
		*bytes += len;
		(*msgs)++;
		if (fault && first_big && !strcmp(fault, "corrupt"))
			p[len / 2 + 17] ^= 0x01;
		if (fault && first_big && !strcmp(fault, "short"))
			len--;
		if (fault && last && j + 1 == w->k && !strcmp(fault, "missing")) {
			got[j] = true;
			sends++;
			continue;
		}
		rb_send(p, len, w->tagged, RB_TAG | seq, &rb_ctx[j]);
	}
	/* the window's send completions and the ack, any order */
	while (sends < w->k || !ack) {
		struct fi_cq_tagged_entry e;

		next_comp(&e);
		if (e.op_context == &ctx_rx && !ack) {
			ack = true;
			continue;
		}
		rb_slot(&e, i, got, FI_SEND);
		sends++;
	}
	memcpy(&a, buf + half, sizeof(a));
	if (a.magic != (last ? RB_DONE : RB_ACK) || a.window != i || a.bytes != *bytes ||
	    a.msgs != *msgs)
		die("window %u: ack 0x%x for window %u, %llu bytes and %llu messages checked; "
		    "sent %llu bytes, %llu messages",
		    i, a.magic, a.window, (unsigned long long)a.bytes, (unsigned long long)a.msgs,
		    (unsigned long long)*bytes, (unsigned long long)*msgs);
	if (!last)
		rb_post_ack_recv();
}

static void rdm_bw(void)
{
	uint64_t bytes = 0, msgs = 0;
	struct timespec t0;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < nplan; i++) {
		if (server)
			rb_server_window(i, &bytes, &msgs);
		else
			rb_client_window(i, &bytes, &msgs);
	}
	if (server)
		wait_comp(&ctx_tx); /* "done" */
	moved = bytes;
	ms = ms_since(&t0);
	if (!server)
		printf("fi_check: rdm_bw: %llu bytes in %llu messages, %u windows, %ld ms "
		       "(%.0f MB/s)\n",
		       (unsigned long long)bytes, (unsigned long long)msgs, nplan, ms,
		       ms ? (double)bytes / 1000.0 / (double)ms : 0.0);
}

static void usage(void)
{
	fprintf(stderr, "usage: fi_check -p PROV -t msg_pingpong|msg_bw|msg_rma|rdm_tagged|rdm_bw "
			"[-s SRC] [-F corrupt|short|missing] -B PORT [SERVER-ADDR]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "p:t:s:B:F:")) != -1) {
		switch (c) {
		case 'p':
			prov = optarg;
			break;
		case 't':
			test = optarg;
			break;
		case 's':
			src_addr = optarg;
			break;
		case 'B':
			port = atoi(optarg);
			break;
		case 'F':
			fault = optarg;
			break;
		default:
			usage();
		}
	}
	if (!prov || !test || port <= 0 || port > 65534 || argc - optind > 1)
		usage();
	server = optind == argc;
	srv_addr = server ? NULL : argv[optind];
	if (fault &&
	    (server || strcmp(test, "rdm_bw") ||
	     (strcmp(fault, "corrupt") && strcmp(fault, "short") && strcmp(fault, "missing"))))
		usage();
	if (!strcmp(test, "rdm_bw"))
		half = RB_HALF;
	alarm(60);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (posix_memalign((void **)&buf, 4096, 2 * half))
		die("out of memory");
	memset(buf, 0, 2 * half);
	if (!strcmp(test, "rdm_tagged") || !strcmp(test, "rdm_bw"))
		setup_rdm();
	else if (!strcmp(test, "msg_pingpong") || !strcmp(test, "msg_bw") ||
		 !strcmp(test, "msg_rma"))
		setup_msg();
	else
		usage();
	if (!strcmp(test, "msg_bw"))
		msg_bw();
	else if (!strcmp(test, "msg_rma"))
		msg_rma();
	else if (!strcmp(test, "rdm_bw"))
		rdm_bw();
	else
		pingpong();
	printf("fi_check: %s %s ok: %s, %llu bytes checked, %s\n", test, prov,
	       server ? "server" : "client", moved, names);
	/* let the last completion's peer see it before the connection goes */
	if (oob >= 0) {
		char x = 0, y;

		oob_xfer(&x, &y, 1);
		close(oob);
	}
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	if (av)
		fi_close(&av->fid);
	fi_close(&cq->fid);
	if (pep)
		fi_close(&pep->fid);
	if (eq)
		fi_close(&eq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	free(buf);
	return 0;
}
