/* uiw_target: a uiwarp endpoint for the hostile-peer tests (hostile_test.py).
 *
 * Written directly on the engine API (rdmap/rdmap.h). It listens on
 * 127.0.0.1:PORT (0: any free port), prints "LISTEN port=N", accepts one
 * connection (peer-to-peer: uiw_accept waits for the peer's RTR), registers
 * a 64 KiB MR filled with a known pattern (REMOTE_WRITE | REMOTE_READ |
 * LOCAL_WRITE, addressed as IOVA), posts a few receives, prints
 *   READY stag=0x... iova=0x... len=65536 rstag=0x... riova=0x...
 * (rstag/riova: the receive buffers' MR, 4 x 1024 bytes, LOCAL_WRITE only)
 * and then reports events (EVENT TERMINATE / EVENT DISCONNECTED) and
 * completions (WC ...), and at the end the Terminate the engine recorded
 * (TERMINFO sent=0|1 layer= etype= code=, uiw_qp_term_info). When the connection has ended it
 * prints SURVIVED placed_outside=P changed=N where N is the number of MR bytes that differ from the
 * pattern and P the number of bytes of the guard areas around the MR (never registered) that
 * changed, followed by first=/last= (MR offsets of the first and last
 * changed byte, -1 if none) and rchanged= (non-zero bytes in the receive
 * buffers, which start zeroed), and exits 0. A watchdog ends it with status
 * 3 if it hangs.
 *
 * Usage: uiw_target [PORT [SECONDS [REQ_MS [OPTS]]]]   SECONDS: how long to
 * wait for the connection to end after READY (default 30); REQ_MS: how long
 * to wait for a valid MPA Request (default 20000); OPTS: a comma-separated
 * list of
 *   extra  four more 4 KiB regions, each registered as an MR and printed
 *          before READY as
 *            EXTRA pd2=0x.. ro=0x.. wo=0x.. hi=0x.. hiiova=0x.. xlen=4096
 *          pd2: in a second PD (RW), ro: REMOTE_READ only, wo: REMOTE_WRITE
 *          (+LOCAL_WRITE) only, hi: RW at IOVA 2^64 - 4097 (its last byte
 *          is the highest address an MR can have); ro/wo/pd2 at IOVA 0x2000000,
 *          0x3000000, 0x4000000. SURVIVED then also reports
 *            xpd2=N xro=N xwo=N xhi=N xguard=N
 *          (bytes differing from the pattern, per region, and in the guard
 *          pages around them)
 *   reads  after READY, post two signaled RDMA Reads of 64 bytes: wr_id 200
 *          into MR offset 8192 from (STag 0x5eed01, TO 0x1000), wr_id 201
 *          into MR offset 12288 from (STag 0x5eed02, TO 0x2000); their
 *          completions appear as WC lines
 *   mw     two memory windows (type 2) bound by Bind WRs over the MR (which
 *          then also has MW_BIND access), 1024 bytes each: rw at IOVA
 *          MR_IOVA + 8192 (REMOTE_WRITE | REMOTE_READ), ro at MR_IOVA +
 *          12288 (REMOTE_READ only); printed before READY as
 *            MW rw=0x.. ro=0x.. rwiova=0x.. roiova=0x.. wlen=1024
 *   mwinv  (with mw) right after READY, a Local Invalidate of the rw
 *          window; prints LOCALINV status=N once it completed
 *   srq    the QP takes its receives from a shared receive queue with two
 *          receives of SRQ_RECV_LEN (64) bytes (wr_id 100, 101, at the
 *          start of the first two 1024-byte receive buffers) instead of
 *          its own four
 *   abort  (with reads) 300 ms after the Reads were posted, while they are
 *          outstanding, move the QP to ERR (uiw_qp_modify: an abortive
 *          local close)
 *   big    one more region of BIG_LEN (8 MiB) bytes, REMOTE_READ, in the
 *          QP's PD, byte i = pattern(i); printed before READY as
 *            BIG stag=0x.. iova=0x.. len=N
 *          (large Read sources: their Read Responses stay in flight while
 *          the peer does not read)
 *   ordtest after READY, post ORDTEST_N (5) signaled RDMA Reads of 64 bytes
 *          at once: wr_id 400 + i into MR offset 16384 + 256 * i from
 *          (STag 0x5eed10 + i, TO 0x10000 * (i + 1)); the engine may have
 *          at most ORD of them outstanding on the wire
 *   badinv after READY, post three signaled WRs at once: a 16-byte Send
 *          (wr_id 500, from the receive buffers), a Local Invalidate of an
 *          STag nobody registered (wr_id 501), another 16-byte Send
 *          (wr_id 502): the Local Invalidate fails locally, which ends the
 *          connection (no Terminate; 501 completes with its error, 502
 *          flushes)
 *
 *   atomic the MR also has REMOTE_ATOMIC access (RFC 7306 Atomic Requests
 *          that pass the access check: alignment and bounds cases)
 *   gone   one more region of GONE_LEN (32 KiB, 8 pages, its own mmap),
 *          registered with every remote access (REMOTE_WRITE | REMOTE_READ
 *          | REMOTE_ATOMIC | LOCAL_WRITE) at IOVA GONE_IOVA, byte i =
 *          pattern(i); then, before READY, the application takes part of
 *          it away as a program that frees registered memory would: pages
 *          1-5 are munmapped, page 6 is mprotected read-only, pages 0 and 7
 *          stay. Printed before READY as
 *            GONE stag=0x.. iova=0x.. len=32768 page=4096
 *          and at the end
 *            GONECHANGED p0=N p6=N p7=N first0=F last0=L
 *          (bytes of pages 0, 6, 7 that differ from the pattern; F/L: the
 *          page-0 offsets of the first and last, -1 if none)
 *   gonerecv the four receive buffers are one mmapped page, unmapped
 *          right after the receives are posted (rchanged is then 0)
 *   goneread (with gone) after READY, post one signaled RDMA Read of 64
 *          bytes, wr_id 210, into the gone region's page 2 (unmapped) from
 *          (STag 0x5eed01, TO 0x1000)
 *
 * After the connection ended it also prints CLOSE reason=N
 * (uiw_qp_close_reason: 1 graceful, 2 Terminate, 3 peer reset, 4 the peer's
 * FIN inside an FPDU, 5 local abort, 6 other stream error).
 *
 * Pattern (hostile_test.py must agree): MR byte i = (i * 7 + 3) & 0xff,
 * guard byte i = 0xa5 ^ (i & 0xff).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmap/rdmap.h"

#define MR_LEN 65536u
#define GUARD 4096u
#define MR_IOVA 0x1000000ull /* not the virtual address: exercises TO translation */
#define NRECV 4
#define RECV_LEN 1024u
#define XLEN 4096u
#define NX 4		       /* extra regions: pd2, ro, wo, hi */
#define HI_IOVA (~0ull - XLEN) /* 2^64 - 4097: last byte at 2^64 - 2 */
#define BIG_LEN (8u << 20)
#define BIG_IOVA 0x40000000ull
#define ORDTEST_N 5
#define GONE_PAGE 4096u
#define GONE_LEN (8u * GONE_PAGE)
#define GONE_IOVA 0x50000000ull

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool disconnected;
static unsigned terminate_events, fatal_events;

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + 3);
}

static uint8_t guard_pattern(size_t i)
{
	return (uint8_t)(0xa5 ^ (i & 0xff));
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	flockfile(stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	funlockfile(stdout);
}

static void on_watchdog(int sig)
{
	static const char msg[] = "WATCHDOG: uiw_target hung, exiting 3\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	_exit(3);
}

static void on_event(struct uiw_qp *qp, enum uiw_qp_event ev, void *ctx)
{
	(void)qp;
	(void)ctx;
	pthread_mutex_lock(&lock);
	switch (ev) {
	case UIW_QP_EV_TERMINATE:
		terminate_events++;
		say("EVENT TERMINATE");
		break;
	case UIW_QP_EV_DISCONNECTED:
		disconnected = true;
		say("EVENT DISCONNECTED");
		break;
	case UIW_QP_EV_FATAL:
		fatal_events++;
		say("EVENT FATAL");
		break;
	default:
		say("EVENT %d", (int)ev);
		break;
	}
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

/* Prints a completion as a WC line. */
static void say_wc(const struct uiw_wc *wc)
{
	say("WC wr_id=%llu status=%d opcode=%d byte_len=%u flags=%u inv=0x%x",
	    (unsigned long long)wc->wr_id, (int)wc->status, (int)wc->opcode, wc->byte_len,
	    wc->flags, wc->invalidated_stag);
}

static void drain_cq(struct uiw_cq *cq)
{
	struct uiw_wc wc[16];
	int n, i;

	while ((n = uiw_cq_poll(cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++)
			say_wc(&wc[i]);
	}
}

/* Waits until DISCONNECTED or the deadline, polling the CQ meanwhile. */
static bool wait_disconnect(struct uiw_cq *cq, int seconds)
{
	struct timespec end, now;
	bool done = false;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += seconds;
	for (;;) {
		drain_cq(cq);
		pthread_mutex_lock(&lock);
		done = disconnected;
		pthread_mutex_unlock(&lock);
		if (done)
			return true;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			return false;
		usleep(20000);
	}
}

#define MW_LEN 1024u
#define SRQ_RECV_LEN 64u

/* Polls one completion (printed as a WC line), at most 5 s. */
static int poll_one(struct uiw_cq *cq, struct uiw_wc *wc)
{
	for (int k = 0; k < 500; k++) {
		if (uiw_cq_poll(cq, 1, wc) == 1) {
			say_wc(wc);
			return 0;
		}
		usleep(10000);
	}
	return -1;
}

/* "mw": two type 2 windows bound over the MR by signaled Bind WRs (wr_id
 * 300, 301); their STags into stag[]. */
static int bind_windows(struct uiw_pd *pd, struct uiw_qp *qp, struct uiw_cq *cq, struct uiw_mr *mr,
			struct uiw_mw **mws, uint32_t *stag)
{
	struct uiw_send_wr bw[2];
	struct uiw_wc wc;
	int bad = -1;

	memset(bw, 0, sizeof(bw));
	for (int i = 0; i < 2; i++) {
		uint32_t rkey = 0;

		if (uiw_mw_alloc(pd, 2, &mws[i], &rkey)) {
			say("ERROR uiw_mw_alloc");
			return -1;
		}
		bw[i].wr_id = 300 + (uint64_t)i;
		bw[i].opcode = UIW_WR_BIND_MW;
		bw[i].flags = UIW_SEND_SIGNALED;
		bw[i].mw = mws[i];
		bw[i].bind_mr = mr;
		bw[i].bind_addr = MR_IOVA + 8192 + (uint64_t)i * 4096;
		bw[i].bind_length = MW_LEN;
		bw[i].bind_access = i == 0 ? UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ
					   : UIW_ACCESS_REMOTE_READ;
		bw[i].rkey = (rkey & ~0xffu) | 0x5a;
		stag[i] = bw[i].rkey;
	}
	if (uiw_qp_post_send(qp, bw, 2, &bad)) {
		say("ERROR bind post bad=%d", bad);
		return -1;
	}
	for (int i = 0; i < 2; i++)
		if (poll_one(cq, &wc) || wc.status != UIW_WC_SUCCESS) {
			say("ERROR bind did not complete");
			return -1;
		}
	return 0;
}

/* Posts n (at most ORDTEST_N) signaled RDMA Reads of 64 bytes at once:
 * Read i into MR offset off + i * step from (STag stag + i, TO to * (i + 1)),
 * wr_id id + i. A failed post prints POST_SEND_FAILED. */
static void post_reads(struct uiw_qp *qp, struct uiw_mr *mr, size_t n, uint64_t id, uint64_t off,
		       uint64_t step, uint32_t stag, uint64_t to)
{
	struct uiw_sge rs[ORDTEST_N];
	struct uiw_send_wr rw[ORDTEST_N];
	int bad = -1, ret;

	memset(rw, 0, sizeof(rw));
	for (size_t i = 0; i < n && i < ORDTEST_N; i++) {
		rs[i].addr = MR_IOVA + off + i * step;
		rs[i].length = 64;
		rs[i].lkey = mr->stag;
		rw[i].wr_id = id + i;
		rw[i].opcode = UIW_WR_RDMA_READ;
		rw[i].flags = UIW_SEND_SIGNALED;
		rw[i].sg_list = &rs[i];
		rw[i].num_sge = 1;
		rw[i].remote_addr = to * (i + 1);
		rw[i].rkey = stag + (uint32_t)i;
	}
	ret = uiw_qp_post_send(qp, rw, (int)(n < ORDTEST_N ? n : ORDTEST_N), &bad);
	if (ret)
		say("POST_SEND_FAILED %d bad=%d", ret, bad);
}

/* An anonymous mapping of len bytes far below where the kernel puts
 * mappings (it hands out the highest free range first): once part of it is
 * unmapped, nothing else lands in the hole (the sanitizer runtime maps
 * memory of its own while the test runs), so an access to it stays a
 * fault. An address that is gone and then mapped again by someone else is
 * a use after free uiwarp cannot see (docs/design.md). MAP_FAILED on
 * failure. */
static void *map_far(size_t len, uintptr_t slot)
{
	void *want = (void *)(0x300000000000ull + slot * 0x100000000ull);
	void *p = mmap(want, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p;
}

int main(int argc, char **argv)
{
	unsigned port = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 0;
	int wait_s = argc > 2 ? atoi(argv[2]) : 30;
	int req_ms = argc > 3 ? atoi(argv[3]) : 20000;
	const char *opts = argc > 4 ? argv[4] : "";
	bool extra = strstr(opts, "extra") != NULL, reads = strstr(opts, "reads") != NULL;
	bool abort_qp = strstr(opts, "abort") != NULL;
	bool use_mw = strstr(opts, "mw") != NULL, mw_inv = strstr(opts, "mwinv") != NULL;
	struct uiw_mw *mws[2] = {NULL, NULL};
	bool use_srq = strstr(opts, "srq") != NULL;
	bool use_big = strstr(opts, "big") != NULL, ordtest = strstr(opts, "ordtest") != NULL;
	bool badinv = strstr(opts, "badinv") != NULL;
	bool atomic_acc = strstr(opts, "atomic") != NULL;
	bool use_gone = strstr(opts, "gone") != NULL, gonerecv = strstr(opts, "gonerecv") != NULL;
	bool goneread = strstr(opts, "goneread") != NULL;
	uint8_t *gone = NULL;
	struct uiw_mr *gonemr = NULL;
	uint8_t *big = NULL;
	struct uiw_mr *bigmr = NULL;
	struct uiw_srq *srq = NULL;
	uint32_t mw_stag[2] = {0, 0};
	struct uiw_pd *pd = NULL, *pd2 = NULL;
	struct uiw_mr *xmr[NX] = {NULL};
	uint8_t *xarea = NULL;
	size_t xchanged[NX] = {0}, xguard = 0;
	struct uiw_cq *cq = NULL;
	struct uiw_qp *qp = NULL;
	struct uiw_mr *mr = NULL, *rmr = NULL;
	struct uiw_listener *l = NULL;
	struct uiw_conn_req *req = NULL;
	struct uiw_conn_info info;
	struct uiw_qp_init_attr qa;
	struct uiw_conn_param param;
	struct uiw_qp_stats st;
	struct sockaddr_in sa;
	struct sockaddr_storage bound;
	uint8_t *area, *mem, *rbuf;
	size_t i, changed = 0, outside = 0, rchanged = 0;
	long first = -1, last = -1;
	bool ok;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_watchdog);
	alarm((unsigned)wait_s + (unsigned)req_ms / 1000 + 40);

	area = aligned_alloc(4096, GUARD + MR_LEN + GUARD);
	if (gonerecv) {
		rbuf = map_far(NRECV * RECV_LEN, 1);
		if (rbuf == MAP_FAILED)
			rbuf = NULL;
	} else {
		rbuf = aligned_alloc(4096, NRECV * RECV_LEN);
	}
	if (!area || !rbuf) {
		say("ERROR out of memory");
		return 2;
	}
	for (i = 0; i < GUARD; i++) {
		area[i] = guard_pattern(i);
		area[GUARD + MR_LEN + i] = guard_pattern(i);
	}
	mem = area + GUARD;
	for (i = 0; i < MR_LEN; i++)
		mem[i] = pattern(i);
	memset(rbuf, 0, NRECV * RECV_LEN);
	if (extra) {
		xarea = aligned_alloc(4096, GUARD + NX * XLEN + GUARD);
		if (!xarea) {
			say("ERROR out of memory");
			return 2;
		}
		for (i = 0; i < GUARD; i++) {
			xarea[i] = guard_pattern(i);
			xarea[GUARD + NX * XLEN + i] = guard_pattern(i);
		}
		for (i = 0; i < NX * XLEN; i++)
			xarea[GUARD + i] = pattern(i % XLEN);
	}

	pd = uiw_pd_alloc();
	if (!pd) {
		say("ERROR uiw_pd_alloc: %s", strerror(errno));
		return 2;
	}
	ret = uiw_mr_reg(pd, mem, MR_LEN, MR_IOVA,
			 UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ | UIW_ACCESS_LOCAL_WRITE |
			     (use_mw ? UIW_ACCESS_MW_BIND : 0) |
			     (atomic_acc ? UIW_ACCESS_REMOTE_ATOMIC : 0),
			 &mr);
	if (ret) {
		say("ERROR uiw_mr_reg: %d", ret);
		return 2;
	}
	ret = uiw_mr_reg(pd, rbuf, NRECV * RECV_LEN, (uint64_t)(uintptr_t)rbuf,
			 UIW_ACCESS_LOCAL_WRITE, &rmr);
	if (ret) {
		say("ERROR uiw_mr_reg (recv): %d", ret);
		return 2;
	}
	if (extra) {
		static const unsigned acc[NX] = {
		    UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ | UIW_ACCESS_LOCAL_WRITE,
		    UIW_ACCESS_REMOTE_READ,
		    UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_LOCAL_WRITE,
		    UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ | UIW_ACCESS_LOCAL_WRITE,
		};
		static const uint64_t iova[NX] = {0x4000000ull, 0x2000000ull, 0x3000000ull,
						  HI_IOVA};
		pd2 = uiw_pd_alloc();
		if (!pd2) {
			say("ERROR uiw_pd_alloc (pd2): %s", strerror(errno));
			return 2;
		}
		for (i = 0; i < NX; i++) {
			ret = uiw_mr_reg(i == 0 ? pd2 : pd, xarea + GUARD + i * XLEN, XLEN, iova[i],
					 acc[i], &xmr[i]);
			if (ret) {
				say("ERROR uiw_mr_reg (extra %zu): %d", i, ret);
				return 2;
			}
		}
	}
	if (use_big) {
		big = malloc(BIG_LEN);
		if (!big) {
			say("ERROR out of memory");
			return 2;
		}
		for (i = 0; i < BIG_LEN; i++)
			big[i] = pattern(i);
		ret = uiw_mr_reg(pd, big, BIG_LEN, BIG_IOVA, UIW_ACCESS_REMOTE_READ, &bigmr);
		if (ret) {
			say("ERROR uiw_mr_reg (big): %d", ret);
			return 2;
		}
	}
	if (use_gone) {
		gone = map_far(GONE_LEN, 0);
		if (gone == MAP_FAILED) {
			say("ERROR mmap: %s", strerror(errno));
			return 2;
		}
		for (i = 0; i < GONE_LEN; i++)
			gone[i] = pattern(i);
		ret = uiw_mr_reg(pd, gone, GONE_LEN, GONE_IOVA,
				 UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ |
				     UIW_ACCESS_REMOTE_ATOMIC | UIW_ACCESS_LOCAL_WRITE,
				 &gonemr);
		if (ret) {
			say("ERROR uiw_mr_reg (gone): %d", ret);
			return 2;
		}
		/* the application lets go of registered memory */
		if (munmap(gone + GONE_PAGE, 5 * GONE_PAGE) ||
		    mprotect(gone + 6 * GONE_PAGE, GONE_PAGE, PROT_READ)) {
			say("ERROR munmap/mprotect: %s", strerror(errno));
			return 2;
		}
	}
	ret = uiw_cq_create(64, NULL, NULL, &cq);
	if (ret) {
		say("ERROR uiw_cq_create: %d", ret);
		return 2;
	}
	if (use_srq) {
		uint32_t max_wr = 16, max_sge = 1;

		ret = uiw_srq_create(pd, &max_wr, &max_sge, &srq);
		if (ret) {
			say("ERROR uiw_srq_create: %d", ret);
			return 2;
		}
	}
	memset(&qa, 0, sizeof(qa));
	qa.srq = srq;
	qa.pd = pd;
	qa.send_cq = cq;
	qa.recv_cq = cq;
	qa.max_send_wr = 16;
	qa.max_recv_wr = 16;
	qa.max_send_sge = 1;
	qa.max_recv_sge = 1;
	ret = uiw_qp_create(&qa, &qp);
	if (ret) {
		say("ERROR uiw_qp_create: %d", ret);
		return 2;
	}
	uiw_qp_set_event_cb(qp, on_event, NULL);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ret = uiw_listen((struct sockaddr *)&sa, 1, &l);
	if (ret) {
		say("ERROR uiw_listen: %d", ret);
		return 2;
	}
	uiw_listener_addr(l, &bound);
	say("LISTEN port=%u", ntohs(((struct sockaddr_in *)&bound)->sin_port));

	memset(&info, 0, sizeof(info));
	ret = uiw_listener_get_request(l, req_ms, &req, &info);
	if (ret) {
		say("NO_REQUEST uiw_listener_get_request: %d", ret);
		uiw_listener_close(l);
		uiw_qp_destroy(qp);
		uiw_mr_dereg(mr);
		uiw_mr_dereg(rmr);
		uiw_cq_destroy(cq);
		uiw_pd_free(pd);
		free(area);
		if (gonerecv)
			munmap(rbuf, NRECV * RECV_LEN);
		else
			free(rbuf);
		say("SURVIVED placed_outside=0 changed=0 first=-1 last=-1 rchanged=0 "
		    "terminate_events=0");
		return 0;
	}
	say("REQUEST ird=%u ord=%u pd_len=%u", info.responder_resources, info.initiator_depth,
	    info.private_data_len);

	memset(&param, 0, sizeof(param));
	param.responder_resources = 4;
	param.initiator_depth = 4;
	ret = uiw_accept(req, qp, &param, 20000);
	if (ret) {
		say("ACCEPT_FAILED %d", ret);
	} else {
		struct uiw_sge sge[NRECV];
		struct uiw_recv_wr wr[NRECV];
		int bad = -1;

		for (i = 0; i < NRECV; i++) {
			sge[i].addr = (uint64_t)(uintptr_t)(rbuf + i * RECV_LEN);
			sge[i].length = RECV_LEN;
			sge[i].lkey = rmr->stag;
			wr[i].wr_id = 100 + i;
			wr[i].sg_list = &sge[i];
			wr[i].num_sge = 1;
		}
		if (srq) {
			sge[0].length = sge[1].length = SRQ_RECV_LEN;
			ret = uiw_srq_post_recv(srq, wr, 2, &bad);
		} else {
			ret = uiw_qp_post_recv(qp, wr, NRECV, &bad);
		}
		if (ret)
			say("POST_RECV_FAILED %d bad=%d", ret, bad);
		if (gonerecv && munmap(rbuf, NRECV * RECV_LEN))
			say("ERROR munmap (recv): %s", strerror(errno));
		if (gonemr)
			say("GONE stag=0x%x iova=0x%llx len=%u page=%u", gonemr->stag, GONE_IOVA,
			    GONE_LEN, GONE_PAGE);
		if (use_mw && bind_windows(pd, qp, cq, mr, mws, mw_stag) == 0)
			say("MW rw=0x%x ro=0x%x rwiova=0x%llx roiova=0x%llx wlen=%u", mw_stag[0],
			    mw_stag[1], MR_IOVA + 8192, MR_IOVA + 12288, MW_LEN);
		if (extra)
			say("EXTRA pd2=0x%x ro=0x%x wo=0x%x hi=0x%x hiiova=0x%llx xlen=%u",
			    xmr[0]->stag, xmr[1]->stag, xmr[2]->stag, xmr[3]->stag,
			    (unsigned long long)xmr[3]->iova, XLEN);
		if (bigmr)
			say("BIG stag=0x%x iova=0x%llx len=%u", bigmr->stag, BIG_IOVA, BIG_LEN);
		say("READY stag=0x%x iova=0x%llx len=%llu rstag=0x%x riova=0x%llx", mr->stag,
		    (unsigned long long)mr->iova, (unsigned long long)mr->length, rmr->stag,
		    (unsigned long long)rmr->iova);
		if (mw_inv && mws[0]) {
			struct uiw_send_wr iw;
			struct uiw_wc wc;

			memset(&iw, 0, sizeof(iw));
			iw.wr_id = 310;
			iw.opcode = UIW_WR_LOCAL_INV;
			iw.flags = UIW_SEND_SIGNALED;
			iw.invalidate_rkey = mw_stag[0];
			if (uiw_qp_post_send(qp, &iw, 1, &bad) == 0 && poll_one(cq, &wc) == 0)
				say("LOCALINV status=%d", (int)wc.status);
		}
		if (ordtest) {
			post_reads(qp, mr, ORDTEST_N, 400, 16384, 256, 0x5eed10, 0x10000);
			ret = 0;
		}
		if (badinv) {
			struct uiw_sge bs = {.addr = (uint64_t)(uintptr_t)rbuf + 2 * RECV_LEN,
					     .length = 16,
					     .lkey = rmr->stag};
			struct uiw_send_wr bw[3];

			memset(bw, 0, sizeof(bw));
			for (i = 0; i < 3; i++) {
				bw[i].wr_id = 500 + i;
				bw[i].flags = UIW_SEND_SIGNALED;
				bw[i].opcode = i == 1 ? UIW_WR_LOCAL_INV : UIW_WR_SEND;
				bw[i].sg_list = i == 1 ? NULL : &bs;
				bw[i].num_sge = i == 1 ? 0 : 1;
			}
			bw[1].invalidate_rkey = 0x7fff0042;
			ret = uiw_qp_post_send(qp, bw, 3, &bad);
			if (ret)
				say("POST_SEND_FAILED %d bad=%d", ret, bad);
			ret = 0;
		}
		if (goneread && gonemr) {
			struct uiw_sge gs = {
			    .addr = GONE_IOVA + 2 * GONE_PAGE, .length = 64, .lkey = gonemr->stag};
			struct uiw_send_wr gw;

			memset(&gw, 0, sizeof(gw));
			gw.wr_id = 210;
			gw.opcode = UIW_WR_RDMA_READ;
			gw.flags = UIW_SEND_SIGNALED;
			gw.sg_list = &gs;
			gw.num_sge = 1;
			gw.remote_addr = 0x1000;
			gw.rkey = 0x5eed01;
			ret = uiw_qp_post_send(qp, &gw, 1, &bad);
			if (ret)
				say("POST_SEND_FAILED %d bad=%d", ret, bad);
			ret = 0;
		}
		if (reads) {
			post_reads(qp, mr, 2, 200, 8192, 4096, 0x5eed01, 0x1000);
			ret = 0;
			if (abort_qp) {
				usleep(300000);
				say("ABORT uiw_qp_modify(ERR) = %d",
				    uiw_qp_modify(qp, UIW_QPS_ERR));
			}
		}
	}

	ok = ret == 0 ? wait_disconnect(cq, wait_s) : true;
	if (!ok)
		say("TIMEOUT no DISCONNECTED event after %d s", wait_s);
	drain_cq(cq);
	uiw_qp_get_stats(qp, &st);
	{
		struct uiw_term_info ti;

		uiw_qp_term_info(qp, &ti);
		if (ti.valid)
			say("TERMINFO sent=%d layer=%u etype=%u code=0x%02x", (int)ti.sent,
			    ti.layer, ti.etype, ti.ecode);
	}
	say("CLOSE reason=%d", (int)uiw_qp_close_reason(qp));
	say("STATS rx_fpdus=%llu rx_bytes=%llu tx_fpdus=%llu terminates_sent=%llu "
	    "terminates_recv=%llu state=%d",
	    (unsigned long long)st.rx_fpdus, (unsigned long long)st.rx_bytes,
	    (unsigned long long)st.tx_fpdus, (unsigned long long)st.terminates_sent,
	    (unsigned long long)st.terminates_recv, (int)uiw_qp_get_state(qp));

	uiw_qp_destroy(qp);
	uiw_listener_close(l);
	for (i = 0; i < 2; i++)
		if (mws[i])
			uiw_mw_dealloc(mws[i]);
	if (srq)
		uiw_srq_destroy(srq);
	for (i = 0; i < MR_LEN; i++) {
		if (mem[i] != pattern(i)) {
			changed++;
			if (first < 0)
				first = (long)i;
			last = (long)i;
		}
	}
	for (i = 0; i < NRECV * RECV_LEN && !gonerecv; i++)
		rchanged += rbuf[i] != 0;
	for (i = 0; i < GUARD; i++) {
		outside += area[i] != guard_pattern(i);
		outside += area[GUARD + MR_LEN + i] != guard_pattern(i);
	}
	if (extra) {
		for (i = 0; i < NX * XLEN; i++)
			xchanged[i / XLEN] += xarea[GUARD + i] != pattern(i % XLEN);
		for (i = 0; i < GUARD; i++) {
			xguard += xarea[i] != guard_pattern(i);
			xguard += xarea[GUARD + NX * XLEN + i] != guard_pattern(i);
		}
		for (i = 0; i < NX; i++)
			uiw_mr_dereg(xmr[i]);
		uiw_pd_free(pd2);
	}
	if (bigmr) {
		size_t bchanged = 0;

		for (i = 0; i < BIG_LEN; i++)
			bchanged += big[i] != pattern(i);
		say("BIGCHANGED %zu", bchanged);
		uiw_mr_dereg(bigmr);
	}
	free(big);
	if (gonemr) {
		size_t p0 = 0, p6 = 0, p7 = 0;
		long f0 = -1, l0 = -1;

		for (i = 0; i < GONE_PAGE; i++) {
			if (gone[i] != pattern(i)) {
				p0++;
				if (f0 < 0)
					f0 = (long)i;
				l0 = (long)i;
			}
			p6 += gone[6 * GONE_PAGE + i] != pattern(6 * GONE_PAGE + i);
			p7 += gone[7 * GONE_PAGE + i] != pattern(7 * GONE_PAGE + i);
		}
		say("GONECHANGED p0=%zu p6=%zu p7=%zu first0=%ld last0=%ld", p0, p6, p7, f0, l0);
		uiw_mr_dereg(gonemr);
		munmap(gone, GONE_PAGE);
		munmap(gone + 6 * GONE_PAGE, 2 * GONE_PAGE);
	}
	uiw_mr_dereg(mr);
	uiw_mr_dereg(rmr);
	uiw_cq_destroy(cq);
	uiw_pd_free(pd);
	say("SURVIVED placed_outside=%zu changed=%zu first=%ld last=%ld rchanged=%zu "
	    "terminate_events=%u xpd2=%zu xro=%zu xwo=%zu xhi=%zu xguard=%zu",
	    outside, changed, first, last, rchanged, terminate_events, xchanged[0], xchanged[1],
	    xchanged[2], xchanged[3], xguard);
	free(xarea);
	free(area);
	if (!gonerecv)
		free(rbuf);
	return ok ? 0 : 4;
}
