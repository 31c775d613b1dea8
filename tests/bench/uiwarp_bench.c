/* uiwarp-bench: streaming throughput of uiwarp RDMA Write against raw TCP
 * on the same path, in the same process and run, medians of several runs.
 *
 *   uiwarp-bench [--size BYTES] [--total BYTES] [--runs N] [--cc ALG] [--window N]
 *
 * Both sides run in this process on 127.0.0.1. Raw TCP: blocking send() of
 * --size messages, recv() into one buffer, TCP_NODELAY as uiwarp sets it.
 * uiwarp: RDMA Writes of --size bytes, --window outstanding, then a Send;
 * done when the receiver has the Send (all Writes placed before it).
 * Prints Gbit/s for each and the ratio uiwarp / TCP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmap/rdmap.h"

static size_t opt_size = 1 << 20;
static uint64_t opt_total = 1ull << 30;
static int opt_runs = 5, opt_window = 16;
static const char *opt_cc;
static int opt_mss;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void set_cc(int fd)
{
	if (opt_mss && setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &opt_mss, sizeof(opt_mss)))
		perror("TCP_MAXSEG");
	if (opt_cc &&
	    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, opt_cc, (socklen_t)strlen(opt_cc)))
		perror("TCP_CONGESTION");
}

/* ------------------------------------------------------------- raw TCP */

struct tcp_rx {
	int lfd;
	uint64_t total;
	uint8_t *buf;
};

static void *tcp_server(void *arg)
{
	struct tcp_rx *r = arg;
	int fd = accept(r->lfd, NULL, NULL);
	set_cc(fd);
	uint64_t got = 0;
	while (got < r->total) {
		ssize_t n = recv(fd, r->buf, opt_size, 0);
		if (n <= 0)
			break;
		got += (uint64_t)n;
	}
	char ack = 1;
	send(fd, &ack, 1, 0);
	close(fd);
	return NULL;
}

static double run_tcp(void)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	set_cc(lfd);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	bind(lfd, (void *)&a, sizeof(a));
	listen(lfd, 1);
	getsockname(lfd, (void *)&a, &al);
	struct tcp_rx r = {.lfd = lfd, .total = opt_total, .buf = malloc(opt_size)};
	uint8_t *src = malloc(opt_size);
	memset(src, 7, opt_size);
	pthread_t t;
	pthread_create(&t, NULL, tcp_server, &r);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	set_cc(fd);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	connect(fd, (void *)&a, sizeof(a));
	double t0 = now_s();
	for (uint64_t sent = 0; sent < opt_total;) {
		ssize_t n = send(fd, src, opt_size, 0);
		if (n <= 0)
			break;
		sent += (uint64_t)n;
	}
	char ack;
	recv(fd, &ack, 1, MSG_WAITALL);
	double dt = now_s() - t0;
	pthread_join(t, NULL);
	close(fd);
	close(lfd);
	free(r.buf);
	free(src);
	return (double)opt_total * 8 / dt / 1e9;
}

/* -------------------------------------------------------------- uiwarp */

struct ep {
	struct uiw_pd *pd;
	struct uiw_cq *cq;
	struct uiw_qp *qp;
	uint8_t *buf;
	struct uiw_mr *mr;
};

static void ep_init(struct ep *e, size_t len)
{
	e->pd = uiw_pd_alloc();
	uiw_cq_create(4096, NULL, NULL, &e->cq);
	struct uiw_qp_init_attr a = {.pd = e->pd,
				     .send_cq = e->cq,
				     .recv_cq = e->cq,
				     .max_send_wr = 1024,
				     .max_recv_wr = 16,
				     .max_send_sge = 1,
				     .max_recv_sge = 1};
	uiw_qp_create(&a, &e->qp);
	e->buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	memset(e->buf, 1, len);
	uiw_mr_reg(e->pd, e->buf, len, (uintptr_t)e->buf,
		   UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE, &e->mr);
}

static void ep_fini(struct ep *e)
{
	uiw_qp_destroy(e->qp);
	uiw_mr_dereg(e->mr);
	uiw_cq_destroy(e->cq);
	uiw_pd_free(e->pd);
	free(e->buf);
}

struct acc {
	struct uiw_listener *l;
	struct ep *e;
	int rc;
};

static void *acceptor(void *arg)
{
	struct acc *a = arg;
	struct uiw_conn_req *req;
	struct uiw_conn_info info;
	a->rc = uiw_listener_get_request(a->l, 5000, &req, &info);
	if (!a->rc) {
		struct uiw_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
		a->rc = uiw_accept(req, a->e->qp, &cp, 5000);
	}
	return NULL;
}

static int wait_cq(struct uiw_cq *cq, struct uiw_wc *wc)
{
	for (long i = 0; i < 2000000000L; i++) {
		if (uiw_cq_poll(cq, 1, wc) == 1)
			return wc->status == UIW_WC_SUCCESS ? 0 : -1;
		if (i > 1000)
			sched_yield();
	}
	return -1;
}

static double run_uiwarp(void)
{
	struct ep s, r;
	ep_init(&s, opt_size);
	ep_init(&r, opt_size + 64);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct acc ac = {.e = &r};
	if (uiw_listen((void *)&a, 1, &ac.l))
		return -1;
	struct sockaddr_storage ss;
	uiw_listener_addr(ac.l, &ss);
	pthread_t t;
	pthread_create(&t, NULL, acceptor, &ac);
	struct uiw_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct uiw_conn_info info;
	bool rej;
	int rc = uiw_connect(s.qp, NULL, (void *)&ss, &cp, 5000, &info, &rej);
	pthread_join(t, NULL);
	if (rc || ac.rc) {
		fprintf(stderr, "connect %d accept %d\n", rc, ac.rc);
		return -1;
	}
	struct uiw_sge rsge = {
	    .addr = (uintptr_t)r.buf + opt_size, .length = 64, .lkey = r.mr->stag};
	struct uiw_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1};
	int bad;
	uiw_qp_post_recv(r.qp, &rwr, 1, &bad);

	struct uiw_sge sge = {
	    .addr = (uintptr_t)s.buf, .length = (uint32_t)opt_size, .lkey = s.mr->stag};
	struct uiw_send_wr wr = {.opcode = UIW_WR_RDMA_WRITE,
				 .flags = UIW_SEND_SIGNALED,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .remote_addr = (uintptr_t)r.buf,
				 .rkey = r.mr->stag};
	uint64_t n = opt_total / opt_size, posted = 0, done = 0;
	struct uiw_wc wc;
	double t0 = now_s();
	while (done < n) {
		while (posted < n && posted - done < (uint64_t)opt_window) {
			wr.wr_id = posted++;
			if (uiw_qp_post_send(s.qp, &wr, 1, &bad))
				return -1;
		}
		if (wait_cq(s.cq, &wc))
			return -1;
		done++;
	}
	struct uiw_sge fs = {.addr = (uintptr_t)s.buf, .length = 8, .lkey = s.mr->stag};
	struct uiw_send_wr fin = {.wr_id = 99, .opcode = UIW_WR_SEND, .sg_list = &fs, .num_sge = 1};
	uiw_qp_post_send(s.qp, &fin, 1, &bad);
	if (wait_cq(r.cq, &wc))
		return -1;
	double dt = now_s() - t0;
	struct uiw_qp_stats st;
	uiw_qp_get_stats(s.qp, &st);
	struct uiw_qp_stats rst;
	uiw_qp_get_stats(r.qp, &rst);
	fprintf(stderr, "  uiwarp: %llu FPDUs in %llu sendmsg, receiver %llu recvmsg\n",
		(unsigned long long)st.tx_fpdus, (unsigned long long)st.tx_syscalls,
		(unsigned long long)rst.rx_syscalls);
	uiw_listener_close(ac.l);
	ep_fini(&s);
	ep_fini(&r);
	return (double)(n * opt_size) * 8 / dt / 1e9;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--size") && i + 1 < argc)
			opt_size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--total") && i + 1 < argc)
			opt_total = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			opt_runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--window") && i + 1 < argc)
			opt_window = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mss") && i + 1 < argc)
			opt_mss = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--cc") && i + 1 < argc)
			opt_cc = argv[++i];
		else {
			fprintf(stderr,
				"usage: %s [--size B] [--total B] [--runs N] [--window N] "
				"[--cc ALG] [--mss BYTES]\n",
				argv[0]);
			return 2;
		}
	}
	if (opt_runs < 1 || opt_runs > 100 || opt_size == 0 || opt_total < opt_size)
		return 2;
	if (opt_cc)
		setenv("UIWARP_TCP_CONGESTION", opt_cc, 1);
	if (opt_mss) {
		char b[16];
		snprintf(b, sizeof(b), "%d", opt_mss);
		setenv("UIWARP_TCP_MAXSEG", b, 1);
	}
	char cc[32] = "?";
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
	if (f) {
		if (fscanf(f, "%31s", cc) != 1)
			strcpy(cc, "?");
		fclose(f);
	}
	printf("loopback (TCP_MAXSEG %s), message %zu B, %llu B per run, %d runs, congestion control %s\n",
	       opt_mss ? "clamped" : "of the path", opt_size, (unsigned long long)opt_total, opt_runs, opt_cc ? opt_cc : cc);
	double tcp[100], uiw[100];
	for (int i = 0; i < opt_runs; i++) { /* interleaved A/B */
		tcp[i] = run_tcp();
		uiw[i] = run_uiwarp();
		printf("run %d: tcp %.2f Gbit/s, uiwarp %.2f Gbit/s\n", i + 1, tcp[i], uiw[i]);
		if (tcp[i] <= 0 || uiw[i] <= 0) {
			fprintf(stderr, "uiwarp-bench: run %d failed\n", i + 1);
			return 1;
		}
	}
	qsort(tcp, (size_t)opt_runs, sizeof(double), cmpd);
	qsort(uiw, (size_t)opt_runs, sizeof(double), cmpd);
	double mt = tcp[opt_runs / 2], mu = uiw[opt_runs / 2];
	printf("median: tcp %.2f Gbit/s, uiwarp %.2f Gbit/s, ratio uiwarp/tcp %.2f\n", mt, mu,
	       mu / mt);
	return 0;
}
