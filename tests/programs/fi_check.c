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
 *
 * PORT: the server's TCP port for the address exchange (RDM endpoint
 * names; the MSG server listens on PORT+1 with its passive endpoint). The
 * server listens on PORT only once its own endpoint is ready, so a client
 * started after `ss` shows PORT finds everything in place. SRC (server):
 * the address to open the RDM endpoint on.
 *
 * Prints "fi_check: TEST PROV ok: ..." and exits 0; on any failure prints
 * what failed and exits 1. Every wait is bounded (10 s per completion,
 * 60 s in all: alarm).
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

static const size_t sizes[] = {1, 64, 4096, 65536, MAX_MSG};

static const char *prov, *test, *srv_addr, *src_addr;
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
static uint8_t *buf; /* [0, MAX_MSG) send, [MAX_MSG, 2 * MAX_MSG) receive */
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

/* The next completion of the CQ into *e; fails on an error entry or when
 * none comes within WAIT_MS. */
static void next_comp(struct fi_cq_msg_entry *e)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ssize_t n = fi_cq_read(cq, e, 1);

		if (n == 1)
			return;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};

			fi_cq_readerr(cq, &err, 0);
			die("completion error %d (%s), provider error %d", err.err,
			    fi_strerror(err.err), err.prov_errno);
		}
		if (n != -FI_EAGAIN)
			die("fi_cq_read: %zd (%s)", n, fi_strerror((int)-n));
		if (ms_since(&t0) > WAIT_MS)
			die("no completion within %d ms", WAIT_MS);
	}
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
		struct fi_cq_msg_entry e;

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
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG, .size = 256};

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
	    fi_mr_reg(domain, buf, 2 * MAX_MSG,
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
		FI_CHECK(fi_trecv(ep, buf + MAX_MSG, len, desc, FI_ADDR_UNSPEC, 0x55, 0, &ctx_rx));
	else
		FI_CHECK(fi_recv(ep, buf + MAX_MSG, len, desc, FI_ADDR_UNSPEC, &ctx_rx));
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
		FI_CHECK(fi_recv(ep, buf + MAX_MSG + (size_t)i * BW_SIZE, BW_SIZE, desc,
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

static void setup_rdm(void)
{
	struct fi_info *h = hints_for(FI_EP_RDM);
	char mine[256], theirs[256];
	size_t len = sizeof(mine);

	FI_CHECK(fi_getinfo(FI_VERSION(1, 17), server ? src_addr : NULL, NULL,
			    server && src_addr ? FI_SOURCE : 0, h, &info));
	FI_CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	open_ep(info);
	post_recv(MAX_MSG);
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
			check(buf + MAX_MSG, len, r, "received");
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
	struct fi_cq_msg_entry e;
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
				check(buf + MAX_MSG + (size_t)i * BW_SIZE, BW_SIZE,
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
			check(buf + MAX_MSG, 1, w + 1, "ack");
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
		memset(buf + MAX_MSG, 0, MAX_MSG);
		ri.addr = (uintptr_t)(buf + MAX_MSG);
		ri.key = fi_mr_key(mr);
		memcpy(buf, &ri, sizeof(ri));
		post_send(sizeof(ri));
		wait_comp(&ctx_tx);
		/* the client's "done" lands in the receive posted at setup, at
		 * MAX_MSG, over the first 16 bytes it wrote, with the same 16
		 * bytes: the whole target must hold the pattern */
		wait_comp(&ctx_rx);
		check(buf + MAX_MSG, MAX_MSG, 7, "RMA target");
		moved = 2 * MAX_MSG;
		return;
	}
	wait_comp(&ctx_rx);
	memcpy(&ri, buf + MAX_MSG, sizeof(ri));
	fill(buf, MAX_MSG, 7);
	FI_CHECK(fi_write(ep, buf, MAX_MSG, desc, peer, ri.addr, ri.key, &c));
	wait_comp(&c);
	memset(buf + MAX_MSG, 0, MAX_MSG);
	FI_CHECK(fi_read(ep, buf + MAX_MSG, MAX_MSG, desc, peer, ri.addr, ri.key, &c));
	wait_comp(&c);
	check(buf + MAX_MSG, MAX_MSG, 7, "read back");
	/* done: 16 bytes of the same pattern, so the server's target keeps
	 * the pattern where the message lands */
	post_send(16);
	wait_comp(&ctx_tx);
	moved = 2 * MAX_MSG;
}

static void usage(void)
{
	fprintf(stderr, "usage: fi_check -p PROV -t msg_pingpong|msg_bw|msg_rma|rdm_tagged "
			"[-s SRC] -B PORT [SERVER-ADDR]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "p:t:s:B:")) != -1) {
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
		default:
			usage();
		}
	}
	if (!prov || !test || port <= 0 || port > 65534 || argc - optind > 1)
		usage();
	server = optind == argc;
	srv_addr = server ? NULL : argv[optind];
	alarm(60);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (posix_memalign((void **)&buf, 4096, 2 * MAX_MSG))
		die("out of memory");
	memset(buf, 0, 2 * MAX_MSG);
	if (!strcmp(test, "rdm_tagged"))
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
