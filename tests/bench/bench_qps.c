/* uiwarp-bench-qps: aggregate RDMA Write throughput of N RC QPs between two
 * processes, over the standard verbs + rdma_cm API only (so it runs over
 * uiwarp with uiwarp-run and over real RDMA hardware alike).
 *
 *   uiwarp-bench-qps server [-b ADDR] [-p PORT] [-T MAXSEC]
 *   uiwarp-bench-qps client -a ADDR [-p PORT] [-n QPS] [-s SIZE] [-w WINDOW]
 *                           [-t SECS] [-T MAXSEC]
 *
 * The server takes one run: N connection requests (N comes in the private
 * data), one QP each on one shared CQ, one registered SIZE-byte target
 * buffer whose address and rkey go back in the accept's private data.
 * The client connects N QPs (at most 32 connects in flight), then every QP
 * keeps WINDOW signaled RDMA Writes of SIZE bytes outstanding (all into the
 * same target buffer) for SECS seconds, busy-polling one shared CQ. When the
 * time is up it drains the Writes, posts one Send per QP carrying that QP's
 * byte count and waits for the server's answer (a Send on the first QP, sent
 * when the server holds all N counts). RC ordering puts each QP's Send behind
 * its Writes, so the time runs from the first Write to the data being placed.
 *
 * Client output (one line on stdout):
 *   qps=N size=S window=W secs=T bytes=B Gbit/s=G threads_mid=K connect_s=C
 * threads_mid: this process's /proc/self/status Threads halfway through.
 * Server output: qps=N bytes=B threads_mid=K (bytes as the client counted).
 * Exit status 0 on success; every wait is bounded (-T, default 120 s).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define QPS_MAGIC 0x51505342u /* "QPSB" */
#define MAX_INFLIGHT_CONNECTS 32

struct conn_req { /* client -> server, in rdma_connect's private data */
	uint32_t magic;
	uint32_t nqps;
	uint32_t index;
	uint32_t secs_ms;
};

struct conn_rep { /* server -> client, in rdma_accept's private data */
	uint64_t addr;
	uint32_t rkey;
	uint32_t magic;
};

static const char *opt_addr, *opt_port = "18600";
static int opt_nqps = 1, opt_window = 8, opt_maxsec = 120;
static size_t opt_size = 65536;
static double opt_secs = 2.0;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int self_threads(void)
{
	char line[256];
	int n = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Threads:", 8) == 0) {
			n = atoi(line + 8);
			break;
		}
	fclose(f);
	return n;
}

static void die(const char *what)
{
	fprintf(stderr, "uiwarp-bench-qps: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *what)
{
	fprintf(stderr, "uiwarp-bench-qps: %s\n", what);
	exit(1);
}

/* Next CM event, waiting at most ms; NULL on timeout. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ec, int ms)
{
	struct pollfd pfd = {.fd = ec->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	int r = poll(&pfd, 1, ms);

	if (r < 0 && errno != EINTR)
		die("poll");
	if (r <= 0)
		return NULL;
	if (rdma_get_cm_event(ec, &ev))
		die("rdma_get_cm_event");
	return ev;
}

static struct sockaddr_storage resolve(const char *host, const char *port, int passive)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags =
				     AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)},
			*ai;
	struct sockaddr_storage ss = {0};
	int e;

	if (passive && !host)
		hints.ai_family = AF_INET;
	e = getaddrinfo(host, port, &hints, &ai);
	if (e) {
		fprintf(stderr, "uiwarp-bench-qps: %s port %s: %s\n", host ? host : "*", port,
			gai_strerror(e));
		exit(1);
	}
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return ss;
}

/* ------------------------------------------------------------- server */

static int run_server(void)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *lid, **ids = NULL;
	struct sockaddr_storage sa = resolve(opt_addr, opt_port, 1);
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL, *cmr = NULL;
	uint64_t *ctl = NULL, total = 0;
	void *buf = NULL;
	uint32_t nqps = 0, secs_ms = 0;
	int established = 0, counts = 0, disconnected = 0, answered = 0, threads_mid = 0;
	double t_all = 0, deadline = now_s() + opt_maxsec;

	if (!ec)
		die("rdma_create_event_channel");
	if (rdma_create_id(ec, &lid, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(lid, (struct sockaddr *)&sa))
		die("rdma_bind_addr");
	if (rdma_listen(lid, 1024))
		die("rdma_listen");
	fprintf(stderr, "uiwarp-bench-qps: listening on port %s\n", opt_port);

	while (now_s() < deadline) {
		struct rdma_cm_event *ev;

		/* every pending event each round: the event channel must not back up
		 * (uiwarp's librdmacm blocks its engine threads when it is full) */
		for (int wait_ms = 1; (ev = next_event(ec, wait_ms)) != NULL; wait_ms = 0) {
			struct rdma_cm_id *id = ev->id;

			switch (ev->event) {
			case RDMA_CM_EVENT_CONNECT_REQUEST: {
				struct conn_req rq;

				if (ev->param.conn.private_data_len < sizeof(rq))
					fail("connect request without private data");
				memcpy(&rq, ev->param.conn.private_data, sizeof(rq));
				if (be32toh(rq.magic) != QPS_MAGIC)
					fail("connect request from another program");
				if (!pd) {
					nqps = be32toh(rq.nqps);
					secs_ms = be32toh(rq.secs_ms);
					if (nqps < 1 || nqps > 100000)
						fail("bad QP count");
					ids = calloc(nqps, sizeof(*ids));
					ctl = calloc(nqps + 1, sizeof(*ctl));
					buf =
					    aligned_alloc(4096, (opt_size + 4095) & ~(size_t)4095);
					if (!ids || !ctl || !buf)
						fail("out of memory");
					pd = ibv_alloc_pd(id->verbs);
					if (!pd)
						die("ibv_alloc_pd");
					cq = ibv_create_cq(id->verbs, (int)(2 * nqps + 16), NULL,
							   NULL, 0);
					if (!cq)
						die("ibv_create_cq");
					mr = ibv_reg_mr(pd, buf, opt_size,
							IBV_ACCESS_LOCAL_WRITE |
							    IBV_ACCESS_REMOTE_WRITE);
					cmr = ibv_reg_mr(pd, ctl, (nqps + 1) * sizeof(*ctl),
							 IBV_ACCESS_LOCAL_WRITE);
					if (!mr || !cmr)
						die("ibv_reg_mr");
				}
				uint32_t i = be32toh(rq.index);
				if (i >= nqps || ids[i])
					fail("bad QP index");
				struct ibv_qp_init_attr qa = {.send_cq = cq,
							      .recv_cq = cq,
							      .qp_type = IBV_QPT_RC,
							      .cap = {.max_send_wr = 2,
								      .max_recv_wr = 2,
								      .max_send_sge = 1,
								      .max_recv_sge = 1}};
				if (rdma_create_qp(id, pd, &qa))
					die("rdma_create_qp");
				ids[i] = id;
				id->context = (void *)(uintptr_t)i;
				struct ibv_sge sge = {.addr = (uintptr_t)&ctl[i],
						      .length = sizeof(ctl[i]),
						      .lkey = cmr->lkey};
				struct ibv_recv_wr rw = {.wr_id = i, .sg_list = &sge, .num_sge = 1},
						   *bad;
				if (ibv_post_recv(id->qp, &rw, &bad))
					die("ibv_post_recv");
				struct conn_rep rp = {.addr = htobe64((uintptr_t)buf),
						      .rkey = htobe32(mr->rkey),
						      .magic = htobe32(QPS_MAGIC)};
				struct rdma_conn_param cp = {.private_data = &rp,
							     .private_data_len = sizeof(rp),
							     .responder_resources = 1,
							     .initiator_depth = 1};
				if (rdma_accept(id, &cp))
					die("rdma_accept");
				break;
			}
			case RDMA_CM_EVENT_ESTABLISHED:
				if (++established == (int)nqps)
					t_all = now_s();
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
				disconnected++;
				break;
			case RDMA_CM_EVENT_TIMEWAIT_EXIT:
				break;
			default:
				fprintf(stderr, "uiwarp-bench-qps: server event %s (%d)\n",
					rdma_event_str(ev->event), ev->status);
				if (ev->event != RDMA_CM_EVENT_CONNECT_ERROR || !answered)
					exit(1);
			}
			rdma_ack_cm_event(ev);
		}
		if (t_all > 0 && !threads_mid && now_s() >= t_all + secs_ms / 2000.0)
			threads_mid = self_threads();
		if (cq) {
			struct ibv_wc wc[64];
			int n = ibv_poll_cq(cq, 64, wc);

			if (n < 0)
				fail("ibv_poll_cq");
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "uiwarp-bench-qps: server completion: %s\n",
						ibv_wc_status_str(wc[k].status));
					exit(1);
				}
				if (wc[k].opcode == IBV_WC_RECV) {
					total += be64toh(ctl[wc[k].wr_id]);
					counts++;
				}
			}
		}
		if (counts == (int)nqps && nqps && !answered) {
			if (!threads_mid)
				threads_mid = self_threads();
			ctl[nqps] = htobe64(total);
			struct ibv_sge sge = {.addr = (uintptr_t)&ctl[nqps],
					      .length = sizeof(uint64_t),
					      .lkey = cmr->lkey};
			struct ibv_send_wr sw = {.wr_id = nqps,
						 .sg_list = &sge,
						 .num_sge = 1,
						 .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED},
					   *bad;
			if (ibv_post_send(ids[0]->qp, &sw, &bad))
				die("ibv_post_send");
			answered = 1;
			printf("qps=%u bytes=%llu threads_mid=%d\n", nqps,
			       (unsigned long long)total, threads_mid);
			fflush(stdout);
			/* the client disconnects once it has the answer */
			deadline = now_s() + 20;
		}
		if (answered && disconnected == (int)nqps)
			break;
	}
	if (!answered)
		fail("timed out");
	for (uint32_t i = 0; i < nqps; i++) {
		if (!ids[i])
			continue;
		rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	ibv_dereg_mr(mr);
	ibv_dereg_mr(cmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ec);
	free(ids);
	free(ctl);
	free(buf);
	return 0;
}

/* ------------------------------------------------------------- client */

/* Reads every pending CM event (waiting at most ms for the first one);
 * returns how many were DISCONNECTED. */
static int read_disconnects(struct rdma_event_channel *ec, int ms)
{
	struct rdma_cm_event *ev;
	int n = 0;

	for (; (ev = next_event(ec, ms)) != NULL; ms = 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
			n++;
		rdma_ack_cm_event(ev);
	}
	return n;
}

struct cqp {
	struct rdma_cm_id *id;
	uint64_t raddr;
	uint32_t rkey;
	int outstanding;
	uint64_t bytes;
};

static void post_write(struct cqp *q, uint32_t i, void *buf, struct ibv_mr *mr)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)buf, .length = (uint32_t)opt_size, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = (uint64_t)i << 1,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = q->raddr, .rkey = q->rkey}},
			   *bad;

	if (ibv_post_send(q->id->qp, &wr, &bad))
		die("ibv_post_send (RDMA Write)");
	q->outstanding++;
}

static int run_client(void)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct sockaddr_storage dst = resolve(opt_addr, opt_port, 0);
	int n = opt_nqps, started = 0, established = 0, disconnected = 0;
	struct cqp *q = calloc((size_t)n, sizeof(*q));
	uint64_t *ctl = calloc((size_t)n + 1, sizeof(*ctl));
	void *buf = aligned_alloc(4096, (opt_size + 4095) & ~(size_t)4095);
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL, *cmr = NULL;
	double deadline = now_s() + opt_maxsec, tc = now_s();

	if (!ec)
		die("rdma_create_event_channel");
	if (!q || !ctl || !buf)
		fail("out of memory");
	memset(buf, 0x5a, opt_size);

	/* connect all QPs, at most MAX_INFLIGHT_CONNECTS at a time */
	while (established < n) {
		while (started < n && started - established < MAX_INFLIGHT_CONNECTS) {
			if (rdma_create_id(ec, &q[started].id, (void *)(uintptr_t)started,
					   RDMA_PS_TCP))
				die("rdma_create_id");
			if (rdma_resolve_addr(q[started].id, NULL, (struct sockaddr *)&dst, 5000))
				die("rdma_resolve_addr");
			started++;
		}
		if (now_s() > deadline)
			fail("timed out connecting");
		struct rdma_cm_event *ev = next_event(ec, 100);
		if (!ev)
			continue;
		struct rdma_cm_id *id = ev->id;
		uint32_t i = (uint32_t)(uintptr_t)id->context;

		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(id, 5000))
				die("rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			if (!pd) {
				pd = ibv_alloc_pd(id->verbs);
				if (!pd)
					die("ibv_alloc_pd");
				cq = ibv_create_cq(id->verbs, n * (opt_window + 2) + 16, NULL, NULL,
						   0);
				if (!cq)
					die("ibv_create_cq");
				mr = ibv_reg_mr(pd, buf, opt_size, IBV_ACCESS_LOCAL_WRITE);
				cmr = ibv_reg_mr(pd, ctl, ((size_t)n + 1) * sizeof(*ctl),
						 IBV_ACCESS_LOCAL_WRITE);
				if (!mr || !cmr)
					die("ibv_reg_mr");
			}
			struct ibv_qp_init_attr qa = {
			    .send_cq = cq,
			    .recv_cq = cq,
			    .qp_type = IBV_QPT_RC,
			    .cap = {.max_send_wr = (uint32_t)opt_window + 2,
				    .max_recv_wr = 1,
				    .max_send_sge = 1,
				    .max_recv_sge = 1}};
			if (rdma_create_qp(id, pd, &qa))
				die("rdma_create_qp");
			if (i == 0) { /* the server's answer comes on QP 0 */
				struct ibv_sge sge = {.addr = (uintptr_t)&ctl[n],
						      .length = sizeof(uint64_t),
						      .lkey = cmr->lkey};
				struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &sge, .num_sge = 1},
						   *bad;
				if (ibv_post_recv(id->qp, &rw, &bad))
					die("ibv_post_recv");
			}
			struct conn_req rq = {.magic = htobe32(QPS_MAGIC),
					      .nqps = htobe32((uint32_t)n),
					      .index = htobe32(i),
					      .secs_ms = htobe32((uint32_t)(opt_secs * 1000))};
			struct rdma_conn_param cp = {.private_data = &rq,
						     .private_data_len = sizeof(rq),
						     .responder_resources = 1,
						     .initiator_depth = 1,
						     .retry_count = 7};
			if (rdma_connect(id, &cp))
				die("rdma_connect");
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED: {
			struct conn_rep rp;

			if (ev->param.conn.private_data_len < sizeof(rp))
				fail("accept without private data");
			memcpy(&rp, ev->param.conn.private_data, sizeof(rp));
			if (be32toh(rp.magic) != QPS_MAGIC)
				fail("accept from another program");
			q[i].raddr = be64toh(rp.addr);
			q[i].rkey = be32toh(rp.rkey);
			established++;
			break;
		}
		default:
			fprintf(stderr, "uiwarp-bench-qps: QP %u: %s (status %d)\n", i,
				rdma_event_str(ev->event), ev->status);
			exit(1);
		}
		rdma_ack_cm_event(ev);
	}
	double connect_s = now_s() - tc;

	/* stream */
	double t0 = now_s(), t_end = t0 + opt_secs, t_mid = t0 + opt_secs / 2;
	int stop = 0, outstanding = 0, threads_mid = 0;
	uint64_t polls = 0;

	for (int i = 0; i < n; i++)
		for (int k = 0; k < opt_window; k++) {
			post_write(&q[i], (uint32_t)i, buf, mr);
			outstanding++;
		}
	while (outstanding > 0) {
		struct ibv_wc wc[64];
		int got = ibv_poll_cq(cq, 64, wc);

		if (got < 0)
			fail("ibv_poll_cq");
		for (int k = 0; k < got; k++) {
			uint32_t i = (uint32_t)(wc[k].wr_id >> 1);

			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "uiwarp-bench-qps: QP %u: %s\n", i,
					ibv_wc_status_str(wc[k].status));
				exit(1);
			}
			q[i].outstanding--;
			q[i].bytes += opt_size;
			outstanding--;
			if (!stop) {
				post_write(&q[i], i, buf, mr);
				outstanding++;
			}
		}
		if ((++polls & 255) == 0 || got > 0) {
			double t = now_s();

			if (!threads_mid && t >= t_mid)
				threads_mid = self_threads();
			if (t >= t_end)
				stop = 1;
			if (t > deadline)
				fail("timed out streaming");
		}
	}
	if (!threads_mid)
		threads_mid = self_threads();

	/* one Send per QP with its count, then the server's answer on QP 0 */
	uint64_t bytes = 0;
	int sends = n, answer = 1;

	for (int i = 0; i < n; i++) {
		bytes += q[i].bytes;
		ctl[i] = htobe64(q[i].bytes);
		struct ibv_sge sge = {
		    .addr = (uintptr_t)&ctl[i], .length = sizeof(uint64_t), .lkey = cmr->lkey};
		struct ibv_send_wr sw = {.wr_id = ((uint64_t)i << 1) | 1,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		if (ibv_post_send(q[i].id->qp, &sw, &bad))
			die("ibv_post_send (Send)");
	}
	while (sends > 0 || answer > 0) {
		struct ibv_wc wc[64];
		int got = ibv_poll_cq(cq, 64, wc);

		if (got < 0)
			fail("ibv_poll_cq");
		for (int k = 0; k < got; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "uiwarp-bench-qps: final exchange: %s\n",
					ibv_wc_status_str(wc[k].status));
				exit(1);
			}
			if (wc[k].opcode == IBV_WC_RECV)
				answer--;
			else
				sends--;
		}
		if (got == 0 && now_s() > deadline)
			fail("timed out waiting for the server's answer");
	}
	double dt = now_s() - t0;

	if (be64toh(ctl[n]) != bytes)
		fail("the server counted other byte totals");
	printf("qps=%d size=%zu window=%d secs=%.3f bytes=%llu Gbit/s=%.3f threads_mid=%d "
	       "connect_s=%.3f\n",
	       n, opt_size, opt_window, dt, (unsigned long long)bytes, (double)bytes * 8 / dt / 1e9,
	       threads_mid, connect_s);
	fflush(stdout);

	/* Disconnect, reading the events as they come: with hundreds of QPs an
	 * unread event channel fills up, and uiwarp's librdmacm then blocks the
	 * thread that queues an event while it holds its CM lock. */
	double dl = now_s() + 10;
	for (int i = 0; i < n; i++) {
		rdma_disconnect(q[i].id);
		disconnected += read_disconnects(ec, 0);
	}
	while (disconnected < n && now_s() < dl)
		disconnected += read_disconnects(ec, 100);
	for (int i = 0; i < n; i++) {
		rdma_destroy_qp(q[i].id);
		rdma_destroy_id(q[i].id);
	}
	ibv_dereg_mr(mr);
	ibv_dereg_mr(cmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ec);
	free(q);
	free(ctl);
	free(buf);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: uiwarp-bench-qps server [-b ADDR] [-p PORT] [-T MAXSEC]\n"
		   "       uiwarp-bench-qps client -a ADDR [-p PORT] [-n QPS] [-s SIZE] "
		   "[-w WINDOW] [-t SECS] [-T MAXSEC]\n");
}

int main(int argc, char **argv)
{
	int o;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	optind = 2;
	while ((o = getopt(argc, argv, "a:b:p:n:s:w:t:T:")) != -1) {
		switch (o) {
		case 'a':
		case 'b':
			opt_addr = optarg;
			break;
		case 'p':
			opt_port = optarg;
			break;
		case 'n':
			opt_nqps = atoi(optarg);
			break;
		case 's':
			opt_size = strtoul(optarg, NULL, 0);
			break;
		case 'w':
			opt_window = atoi(optarg);
			break;
		case 't':
			opt_secs = atof(optarg);
			break;
		case 'T':
			opt_maxsec = atoi(optarg);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (opt_nqps < 1 || opt_nqps > 100000 || opt_window < 1 || opt_window > 1024 ||
	    opt_size < 1 || opt_size > (1u << 30) || opt_secs <= 0 || opt_maxsec < 1) {
		usage(stderr);
		return 2;
	}
	/* N QPs: N sockets and more in this process */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	alarm((unsigned)opt_maxsec + 30); /* hard bound, whatever happens */
	if (!strcmp(argv[1], "server"))
		return run_server();
	if (!strcmp(argv[1], "client")) {
		if (!opt_addr)
			fail("client needs -a ADDR");
		return run_client();
	}
	usage(stderr);
	return 2;
}
