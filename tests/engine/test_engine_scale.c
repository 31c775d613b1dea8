/* Many QPs in one process without a thread per QP (issue 10): N connected
 * pairs over loopback (N active QPs sharing one CQ, N passive QPs sharing
 * another), each moving data both ways, while the process keeps a handful
 * of threads whatever N is.
 *
 *   test_engine_scale [N]     (default 1000, or UIW_SCALE_N)
 *
 * Every active QP RDMA-Writes 16 KiB into its peer and then Sends 64 bytes,
 * then RDMA-Reads 16 KiB of its peer's memory: the passive side never polls
 * for the Reads (the engine answers them). Bytes are checked.
 * The process's thread count (/proc/self/status) is sampled while all QPs
 * are connected and moving data: at most 4 (this thread, the acceptor, the
 * engine, the port-mapper responder). Exit 0 on success; every wait is
 * bounded. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "rdmap/rdmap.h"

#define LEN (16u << 10)

static int n_pairs = 1000;
static struct uiw_pd *pd;
static struct uiw_cq *acq, *bcq;
static struct uiw_qp **aqp, **bqp;
static uint8_t *abuf, *bbuf; /* per pair: 2 * LEN (data out, data back) + 64 (receive) */
static struct uiw_mr *amr, *bmr;
static struct uiw_listener *lis;
static int accept_failed;

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                             \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

static struct uiw_qp *make_qp(struct uiw_cq *cq)
{
	struct uiw_qp_init_attr a = {.pd = pd,
				     .send_cq = cq,
				     .recv_cq = cq,
				     .max_send_wr = 4,
				     .max_recv_wr = 4,
				     .max_send_sge = 1,
				     .max_recv_sge = 1};
	struct uiw_qp *qp;
	if (uiw_qp_create(&a, &qp))
		FAIL("uiw_qp_create");
	return qp;
}

static void *acceptor(void *arg)
{
	(void)arg;
	for (int i = 0; i < n_pairs; i++) {
		struct uiw_conn_req *req;
		struct uiw_conn_info info;
		if (uiw_listener_get_request(lis, 10000, &req, &info)) {
			accept_failed = 1;
			return NULL;
		}
		/* the private data says which pair this is */
		uint32_t k;
		memcpy(&k, info.private_data, 4);
		struct uiw_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
		if (k >= (uint32_t)n_pairs || uiw_accept(req, bqp[k], &cp, 10000)) {
			accept_failed = 1;
			return NULL;
		}
	}
	return NULL;
}

/* Polls cq until n completions, all successful, arrived (bounded). */
static void drain(struct uiw_cq *cq, int n, const char *what)
{
	struct uiw_wc wc[64];
	int got = 0;
	double end = now_s() + 60;
	while (got < n && now_s() < end) {
		int k = uiw_cq_poll(cq, 64, wc);
		for (int i = 0; i < k; i++)
			if (wc[i].status != UIW_WC_SUCCESS)
				FAIL("%s: completion status %d (wr_id %llu)", what, wc[i].status,
				     (unsigned long long)wc[i].wr_id);
		got += k;
	}
	if (got != n)
		FAIL("%s: %d of %d completions", what, got, n);
}

int main(int argc, char **argv)
{
	const char *env = getenv("UIW_SCALE_N");
	if (argc > 1)
		n_pairs = atoi(argv[1]);
	else if (env)
		n_pairs = atoi(env);
	if (n_pairs < 1 || n_pairs > 5000)
		FAIL("N out of range");
	/* two sockets per pair and some to spare */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < (rlim_t)(2 * n_pairs + 64)) {
		printf("SKIP: RLIMIT_NOFILE %llu is below %d\n", (unsigned long long)rl.rlim_cur,
		       2 * n_pairs + 64);
		return 77;
	}
	size_t per = 2 * LEN + 64;
	pd = uiw_pd_alloc();
	abuf = calloc((size_t)n_pairs, per);
	bbuf = calloc((size_t)n_pairs, per);
	aqp = calloc((size_t)n_pairs, sizeof(*aqp));
	bqp = calloc((size_t)n_pairs, sizeof(*bqp));
	if (!pd || !abuf || !bbuf || !aqp || !bqp)
		FAIL("allocation");
	unsigned acc = UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE | UIW_ACCESS_REMOTE_READ;
	if (uiw_mr_reg(pd, abuf, (uint64_t)n_pairs * per, (uintptr_t)abuf, acc, &amr) ||
	    uiw_mr_reg(pd, bbuf, (uint64_t)n_pairs * per, (uintptr_t)bbuf, acc, &bmr) ||
	    uiw_cq_create(8 * (unsigned)n_pairs, NULL, NULL, &acq) ||
	    uiw_cq_create(8 * (unsigned)n_pairs, NULL, NULL, &bcq))
		FAIL("MR / CQ");
	for (int i = 0; i < n_pairs; i++) {
		aqp[i] = make_qp(acq);
		bqp[i] = make_qp(bcq);
		for (size_t j = 0; j < LEN; j++)
			abuf[i * per + j] = (uint8_t)(i * 7 + j);
		for (size_t j = 0; j < LEN; j++)
			bbuf[i * per + LEN + j] = (uint8_t)(i * 13 + j * 3);
	}
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage addr;
	if (uiw_listen((struct sockaddr *)&sin, 1024, &lis))
		FAIL("uiw_listen");
	uiw_listener_addr(lis, &addr);
	int t0 = threads();
	double t_start = now_s();
	pthread_t t;
	pthread_create(&t, NULL, acceptor, NULL);
	for (int i = 0; i < n_pairs; i++) {
		uint32_t k = (uint32_t)i;
		struct uiw_conn_param cp = {.private_data = &k,
					    .private_data_len = 4,
					    .responder_resources = 1,
					    .initiator_depth = 1};
		struct uiw_conn_info info;
		bool rej;
		int rc =
		    uiw_connect(aqp[i], NULL, (struct sockaddr *)&addr, &cp, 10000, &info, &rej);
		if (rc)
			FAIL("connect %d: %d", i, rc);
	}
	pthread_join(t, NULL);
	if (accept_failed)
		FAIL("accept");
	double t_conn = now_s() - t_start;
	int t_mid = threads();

	/* data: each b posts a receive; each a a Write and a Send */
	int bad;
	for (int i = 0; i < n_pairs; i++) {
		uint8_t *b = bbuf + (size_t)i * per;
		struct uiw_sge r = {
		    .addr = (uintptr_t)b + 2 * LEN, .length = 64, .lkey = bmr->stag};
		struct uiw_recv_wr rw = {.wr_id = (uint64_t)i, .sg_list = &r, .num_sge = 1};
		if (uiw_qp_post_recv(bqp[i], &rw, 1, &bad))
			FAIL("post_recv %d", i);
	}
	for (int i = 0; i < n_pairs; i++) {
		uint8_t *a = abuf + (size_t)i * per, *b = bbuf + (size_t)i * per;
		struct uiw_sge ws = {.addr = (uintptr_t)a, .length = LEN, .lkey = amr->stag};
		struct uiw_sge ss = {.addr = (uintptr_t)a, .length = 64, .lkey = amr->stag};
		struct uiw_send_wr wr[2] = {{.wr_id = (uint64_t)i,
					     .opcode = UIW_WR_RDMA_WRITE,
					     .sg_list = &ws,
					     .num_sge = 1,
					     .remote_addr = (uintptr_t)b,
					     .rkey = bmr->stag},
					    {.wr_id = (uint64_t)i,
					     .opcode = UIW_WR_SEND,
					     .flags = UIW_SEND_SIGNALED,
					     .sg_list = &ss,
					     .num_sge = 1}};
		if (uiw_qp_post_send(aqp[i], wr, 2, &bad))
			FAIL("post_send %d", i);
	}
	drain(acq, n_pairs, "a's Sends");
	drain(bcq, n_pairs, "b's receives");
	for (int i = 0; i < n_pairs; i++) {
		uint8_t *a = abuf + (size_t)i * per, *b = bbuf + (size_t)i * per;
		/* the Write was placed before the Send that followed it */
		if (memcmp(a, b, LEN))
			FAIL("pair %d: written bytes differ", i);
		struct uiw_sge sink = {
		    .addr = (uintptr_t)a + LEN, .length = LEN, .lkey = amr->stag};
		struct uiw_send_wr rd = {.wr_id = (uint64_t)i,
					 .opcode = UIW_WR_RDMA_READ,
					 .flags = UIW_SEND_SIGNALED,
					 .sg_list = &sink,
					 .num_sge = 1,
					 .remote_addr = (uintptr_t)b + LEN,
					 .rkey = bmr->stag};
		if (uiw_qp_post_send(aqp[i], &rd, 1, &bad))
			FAIL("post Read %d", i);
	}
	int t_data = threads();
	drain(acq, n_pairs, "a's Reads");
	for (int i = 0; i < n_pairs; i++) {
		uint8_t *a = abuf + (size_t)i * per, *b = bbuf + (size_t)i * per;
		if (memcmp(a + LEN, b + LEN, LEN))
			FAIL("pair %d: read bytes differ", i);
	}
	double t_all = now_s() - t_start;
	printf("%d pairs (%d QPs): connected in %.2f s, data in %.2f s; threads %d before, %d "
	       "connected, %d moving data\n",
	       n_pairs, 2 * n_pairs, t_conn, t_all - t_conn, t0, t_mid, t_data);
	if (t_mid > 4 || t_data > 4)
		FAIL("%d / %d threads for %d QPs", t_mid, t_data, 2 * n_pairs);
	for (int i = 0; i < n_pairs; i++) {
		uiw_qp_destroy(aqp[i]);
		uiw_qp_destroy(bqp[i]);
	}
	uiw_listener_close(lis);
	if (uiw_cq_destroy(acq) || uiw_cq_destroy(bcq) || uiw_mr_dereg(amr) || uiw_mr_dereg(bmr) ||
	    uiw_pd_free(pd))
		FAIL("teardown");
	free(abuf);
	free(bbuf);
	free(aqp);
	free(bqp);
	printf("PASS\n");
	return 0;
}
