/* test_verbs_api [plain|rfc7306]: a program built from source against the
 * system's rdma-core 44 headers and linked to uiwarp's libibverbs.so.1 /
 * librdmacm.so.1. It exercises every implemented verb over a loopback
 * rdma_cm connection (synchronous ids, rdma_create_ep / rdma_get_request)
 * with data checks, and the error cases: bad PD / access flags, objects in
 * use or destroyed, unsupported QP types and opcodes, CQ overrun. With
 * "rfc7306" both ends offer RFC 7306 (UIWARP_RFC7306=1) and immediate data
 * and atomics must work; with "plain" they must be refused (EOPNOTSUPP).
 * Exit 0 on success, 1 with a message on the first failed check, 77 when
 * the engine lacks SRQ or RFC 7306 support (reported by the device).
 */

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__,       \
				__LINE__, #c, errno, strerror(errno));                             \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define BUF 65536

static bool rfc7306;
static char port_str[16];

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

/* Polls cq until n completions (bounded: 5 s), all successful. */
static void poll_n(struct ibv_cq *cq, int n, struct ibv_wc *out)
{
	struct ibv_wc wc[16];
	int got = 0;

	for (long spins = 0; got < n; spins++) {
		int k = ibv_poll_cq(cq, n - got > 16 ? 16 : n - got, wc);

		CHECK(k >= 0);
		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				fprintf(stderr, "wc status %s opcode %d\n",
					ibv_wc_status_str(wc[i].status), wc[i].opcode);
			CHECK(wc[i].status == IBV_WC_SUCCESS);
			if (out)
				out[got + i] = wc[i];
		}
		got += k;
		if (!k) {
			CHECK(spins < 5000000);
			if (spins > 1000)
				usleep(1);
		}
	}
}

/* ------------------------------------------------- objects, no connection */

static void test_objects(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dax;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct ibv_gid_entry ge;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp_init_attr qa;
	static char buf[4096];

	CHECK(ibv_query_device(ctx, &da) == 0);
	CHECK(da.vendor_id == 0x1425 && (da.vendor_part_id >> 12) == 6);
	CHECK(da.max_qp_rd_atom > 0 && da.max_qp_init_rd_atom > 0);
	CHECK(da.max_sge >= 1 && da.max_qp_wr >= 1024);
	CHECK(rfc7306 ? da.atomic_cap == IBV_ATOMIC_HCA : da.atomic_cap == IBV_ATOMIC_NONE);
	CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0);
	CHECK(dax.orig_attr.max_qp == da.max_qp);
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(ibv_query_port(ctx, 2, &pa) != 0);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0);
	CHECK(memcmp(&ge.gid, &gid, sizeof(gid)) == 0);
	CHECK(ibv_fork_init() == 0);

	pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	/* bad access flags: remote write without local write */
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE));
	CHECK(errno == EINVAL);
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | (1 << 15))); /* unknown */
	CHECK(errno == EINVAL);
	/* dma-buf MRs need a device that can map them */
	errno = 0;
	CHECK(!ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE));
	CHECK(errno == EOPNOTSUPP);
	/* iova registration, the optional access bits are ignored */
	mr = ibv_reg_mr_iova2(pd, buf, sizeof(buf), 0x10000,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(mr);
	CHECK(ibv_dealloc_pd(pd) == EBUSY); /* in use */
	CHECK(ibv_dereg_mr(mr) == 0);

	errno = 0;
	CHECK(!ibv_create_cq(ctx, 0, NULL, NULL, 0));
	CHECK(errno == EINVAL);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq);
	/* UD and UC are not iWARP QP types */
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_UD;
	errno = 0;
	CHECK(!ibv_create_qp(pd, &qa));
	CHECK(errno == EOPNOTSUPP);
	/* address handles are IB/RoCE */
	{
		struct ibv_ah_attr aa = {.port_num = 1};

		errno = 0;
		CHECK(!ibv_create_ah(pd, &aa));
		CHECK(errno == EOPNOTSUPP);
	}
	qa.qp_type = IBV_QPT_RC;
	{
		struct ibv_qp *qp = ibv_create_qp(pd, &qa);

		CHECK(qp);
		CHECK(ibv_destroy_cq(cq) == EBUSY);
		CHECK(ibv_dealloc_pd(pd) == EBUSY);
		CHECK(ibv_destroy_qp(qp) == 0);
	}
	CHECK(ibv_destroy_cq(cq) == 0);

	/* SRQ */
	if (da.max_srq > 0) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
		struct ibv_srq_attr sq;
		struct ibv_srq *srq = ibv_create_srq(pd, &sa);

		CHECK(srq);
		CHECK(sa.attr.max_wr >= 8);
		CHECK(ibv_query_srq(srq, &sq) == 0 && sq.max_wr >= 8);
		sq.max_wr = 1u << 30;
		CHECK(ibv_modify_srq(srq, &sq, IBV_SRQ_MAX_WR) != 0);
		CHECK(ibv_destroy_srq(srq) == 0);
		sa.attr.max_wr = (uint32_t)da.max_srq_wr + 1;
		errno = 0;
		CHECK(!ibv_create_srq(pd, &sa));
	}
	CHECK(ibv_dealloc_pd(pd) == 0);
}

/* -------------------------------------------------------------- connection */

static struct side srv, cli;

static void *server_thread(void *arg)
{
	struct rdma_addrinfo hints, *res;
	struct rdma_cm_id *listen_id;
	struct ibv_qp_init_attr qa;
	struct ibv_device_attr da;
	struct rdma_conn_param cp;

	(void)arg;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo("127.0.0.1", port_str, &hints, &res) == 0);
	memset(&qa, 0, sizeof(qa));
	CHECK(rdma_create_ep(&listen_id, res, NULL, NULL) == 0);
	rdma_freeaddrinfo(res);
	CHECK(rdma_listen(listen_id, 4) == 0);
	CHECK(rdma_get_request(listen_id, &srv.id) == 0);

	srv.pd = ibv_alloc_pd(srv.id->verbs);
	CHECK(srv.pd);
	CHECK(ibv_query_device(srv.id->verbs, &da) == 0);
	srv.cq = ibv_create_cq(srv.id->verbs, 256, NULL, NULL, 0);
	CHECK(srv.cq);
	if (da.max_srq > 0) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 64, .max_sge = 1}};

		srv.srq = ibv_create_srq(srv.pd, &sa);
		CHECK(srv.srq);
	}
	srv.buf = calloc(1, BUF);
	CHECK(srv.buf);
	srv.mr = ibv_reg_mr(srv.pd, srv.buf, BUF,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(srv.mr);
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = srv.cq;
	qa.srq = srv.srq;
	qa.cap.max_send_wr = 64;
	qa.cap.max_recv_wr = 64;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	CHECK(rdma_create_qp(srv.id, srv.pd, &qa) == 0);
	srv.qp = srv.id->qp;
	/* receives for the Sends to come (SRQ if any) */
	for (int i = 0; i < 16; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)srv.buf + 4096 * (i % 4),
				      .length = 4096,
				      .lkey = srv.mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1}, *bad;

		if (srv.srq)
			CHECK(ibv_post_srq_recv(srv.srq, &rw, &bad) == 0);
		else
			CHECK(ibv_post_recv(srv.qp, &rw, &bad) == 0);
	}
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = 4;
	cp.initiator_depth = 4;
	cp.private_data = "srv";
	cp.private_data_len = 4;
	CHECK(rdma_accept(srv.id, &cp) == 0);
	rdma_destroy_id(listen_id);
	return NULL;
}

struct post_arg {
	int n;
	uint64_t base;
};

/* Thread: n signaled RDMA Writes of 64 bytes on cli.qp (concurrently with
 * other posters). */
static void *poster(void *arg)
{
	struct post_arg *a = arg;

	for (int i = 0; i < a->n; i++) {
		struct ibv_sge sge = {
		    .addr = (uintptr_t)cli.buf, .length = 64, .lkey = cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = a->base + i,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad;
		int ret;

		w.wr.rdma.remote_addr = (uintptr_t)srv.buf + 32768;
		w.wr.rdma.rkey = srv.mr->rkey;
		while ((ret = ibv_post_send(cli.qp, &w, &bad)) == ENOMEM)
			usleep(10); /* send queue full: the poller frees room */
		CHECK(ret == 0);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr_ex qx;
	struct ibv_qp_ex *qpx;
	struct ibv_cq_ex *cqx;
	struct ibv_wc wc[8];
	struct ibv_device_attr da;
	struct rdma_conn_param cp;
	pthread_t st;
	int n;

	rfc7306 = argc > 1 && strcmp(argv[1], "rfc7306") == 0;
	setenv("UIWARP_RFC7306", rfc7306 ? "1" : "0", 1);
	snprintf(port_str, sizeof(port_str), "%d", 20000 + (getpid() * 13) % 12768);

	list = ibv_get_device_list(&n);
	CHECK(list && n == 1);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	CHECK(ibv_query_device(ctx, &da) == 0);
	if (rfc7306 && da.atomic_cap != IBV_ATOMIC_HCA) {
		printf("SKIP: the engine does not offer RFC 7306\n");
		return 77;
	}
	test_objects(ctx);
	printf("objects: ok\n");

	/* the connection: server thread with synchronous ids */
	CHECK(pthread_create(&st, NULL, server_thread, NULL) == 0);
	usleep(200000);
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo("127.0.0.1", port_str, &hints, &res) == 0);
	CHECK(rdma_create_ep(&cli.id, res, NULL, NULL) == 0);
	rdma_freeaddrinfo(res);
	cli.pd = ibv_alloc_pd(cli.id->verbs);
	CHECK(cli.pd);
	/* an extended CQ read with the poll iterator */
	{
		struct ibv_cq_init_attr_ex ca = {.cqe = 256,
						 .wc_flags = IBV_WC_EX_WITH_BYTE_LEN |
							     IBV_WC_EX_WITH_IMM |
							     IBV_WC_EX_WITH_QP_NUM};

		cqx = ibv_create_cq_ex(cli.id->verbs, &ca);
		CHECK(cqx);
		cli.cq = ibv_cq_ex_to_cq(cqx);
	}
	cli.buf = calloc(1, BUF);
	CHECK(cli.buf);
	cli.mr =
	    ibv_reg_mr(cli.pd, cli.buf, BUF,
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(cli.mr);
	memset(&qx, 0, sizeof(qx));
	qx.send_cq = qx.recv_cq = cli.cq;
	qx.cap.max_send_wr = 64;
	qx.cap.max_recv_wr = 16;
	qx.cap.max_send_sge = qx.cap.max_recv_sge = 1;
	qx.cap.max_inline_data = 64;
	qx.qp_type = IBV_QPT_RC;
	qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qx.pd = cli.pd;
	qx.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	CHECK(rdma_create_qp_ex(cli.id, &qx) == 0);
	cli.qp = cli.id->qp;
	qpx = ibv_qp_to_qp_ex(cli.qp);
	CHECK(qpx);
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = 4;
	cp.initiator_depth = 4;
	CHECK(rdma_connect(cli.id, &cp) == 0);
	CHECK(pthread_join(st, NULL) == 0);
	CHECK(cli.id->event == NULL || cli.id->event->param.conn.private_data_len >= 4);
	printf("connected\n");

	/* Send (into the server's SRQ), checked */
	memcpy(cli.buf, "hello uiwarp", 13);
	{
		struct ibv_sge sge = {
		    .addr = (uintptr_t)cli.buf, .length = 13, .lkey = cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = 1,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad;

		CHECK(ibv_post_send(cli.qp, &w, &bad) == 0);
		poll_n(cli.cq, 1, wc);
		CHECK(wc[0].opcode == IBV_WC_SEND && wc[0].wr_id == 1);
		poll_n(srv.cq, 1, wc);
		CHECK(wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 13);
		CHECK(strcmp((char *)srv.buf + 4096 * ((wc[0].wr_id - 100) % 4), "hello uiwarp") ==
		      0);
	}
	/* RDMA Write with the ibv_wr_* API, inline; then RDMA Read back */
	ibv_wr_start(qpx);
	qpx->wr_id = 2;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, srv.mr->rkey, (uintptr_t)srv.buf + 20000);
	ibv_wr_set_inline_data(qpx, "inline-write", 13);
	qpx->wr_id = 3;
	ibv_wr_rdma_read(qpx, srv.mr->rkey, (uintptr_t)srv.buf + 20000);
	ibv_wr_set_sge(qpx, cli.mr->lkey, (uintptr_t)cli.buf + 1000, 13);
	CHECK(ibv_wr_complete(qpx) == 0);
	/* the poll iterator */
	{
		struct ibv_poll_cq_attr pa = {0};
		int got = 0, ret;

		for (long spins = 0; got < 2; spins++) {
			CHECK(spins < 5000000);
			ret = ibv_start_poll(cqx, &pa);
			if (ret == ENOENT)
				continue;
			CHECK(ret == 0);
			do {
				CHECK(cqx->status == IBV_WC_SUCCESS);
				CHECK(cqx->wr_id == (uint64_t)(2 + got));
				CHECK(ibv_wc_read_opcode(cqx) ==
				      (got ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE));
				CHECK(ibv_wc_read_qp_num(cqx) == cli.qp->qp_num);
				got++;
			} while (got < 2 && ibv_next_poll(cqx) == 0);
			ibv_end_poll(cqx);
		}
	}
	CHECK(memcmp(srv.buf + 20000, "inline-write", 13) == 0);
	CHECK(memcmp(cli.buf + 1000, "inline-write", 13) == 0);
	printf("send / write / read / wr api / poll iterator: ok\n");

	/* immediate data and atomics: RFC 7306 only */
	{
		struct ibv_sge sge = {
		    .addr = (uintptr_t)cli.buf + 2048, .length = 8, .lkey = cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = 10,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad;
		uint64_t *target = (uint64_t *)(srv.buf + 40960);

		*target = 5;
		w.wr.atomic.remote_addr = (uintptr_t)target;
		w.wr.atomic.rkey = srv.mr->rkey;
		w.wr.atomic.compare_add = 7;
		if (!rfc7306) {
			CHECK(ibv_post_send(cli.qp, &w, &bad) == EOPNOTSUPP && bad == &w);
			w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
			CHECK(ibv_post_send(cli.qp, &w, &bad) == EOPNOTSUPP);
			ibv_wr_start(qpx);
			ibv_wr_atomic_fetch_add(qpx, srv.mr->rkey, (uintptr_t)target, 1);
			ibv_wr_set_sge(qpx, cli.mr->lkey, (uintptr_t)cli.buf + 2048, 8);
			CHECK(ibv_wr_complete(qpx) == EOPNOTSUPP);
			printf("imm / atomics refused: ok\n");
		} else {
			CHECK(ibv_post_send(cli.qp, &w, &bad) == 0);
			poll_n(cli.cq, 1, wc);
			CHECK(wc[0].opcode == IBV_WC_FETCH_ADD);
			CHECK(*(uint64_t *)(cli.buf + 2048) == 5 && *target == 12);
			w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
			w.wr.atomic.compare_add = 12;
			w.wr.atomic.swap = 99;
			CHECK(ibv_post_send(cli.qp, &w, &bad) == 0);
			poll_n(cli.cq, 1, wc);
			CHECK(wc[0].opcode == IBV_WC_COMP_SWAP);
			CHECK(*(uint64_t *)(cli.buf + 2048) == 12 && *target == 99);
			/* Write with Immediate: consumes a receive at the server */
			ibv_wr_start(qpx);
			qpx->wr_id = 11;
			qpx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write_imm(qpx, srv.mr->rkey, (uintptr_t)srv.buf + 50000,
					      htobe32(0x1234));
			ibv_wr_set_sge(qpx, cli.mr->lkey, (uintptr_t)cli.buf, 13);
			CHECK(ibv_wr_complete(qpx) == 0);
			poll_n(cli.cq, 1, wc);
			poll_n(srv.cq, 1, wc);
			CHECK(wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
			CHECK((wc[0].wc_flags & IBV_WC_WITH_IMM) &&
			      be32toh(wc[0].imm_data) == 0x1234);
			CHECK(memcmp(srv.buf + 50000, "hello uiwarp", 13) == 0);
			printf("imm / atomics: ok\n");
		}
	}

	/* several threads posting on the same QP, this one polling */
	{
		pthread_t th[4];
		struct post_arg pa[4];
		int nth = getenv("UIWV_THREADS") ? atoi(getenv("UIWV_THREADS")) : 4;
		int total, got = 0;

		if (nth < 1 || nth > 4)
			nth = 4;
		total = nth * 200;
		for (int i = 0; i < nth; i++) {
			pa[i].n = 200;
			pa[i].base = 1000 + 1000 * i;
			CHECK(pthread_create(&th[i], NULL, poster, &pa[i]) == 0);
		}
		time_t t0 = time(NULL);

		while (got < total) {
			int k = ibv_poll_cq(cli.cq, 8, wc);

			if (time(NULL) - t0 > 10)
				fprintf(stderr, "threads: %d of %d completions\n", got, total);
			CHECK(k >= 0 && time(NULL) - t0 <= 10);
			for (int i = 0; i < k; i++)
				CHECK(wc[i].status == IBV_WC_SUCCESS);
			got += k;
		}
		for (int i = 0; i < nth; i++)
			CHECK(pthread_join(th[i], NULL) == 0);
		printf("threads: ok\n");
	}

	/* destroyed / in-use objects */
	CHECK(ibv_dealloc_pd(cli.pd) == EBUSY);
	CHECK(ibv_destroy_cq(cli.cq) == EBUSY);
	if (srv.srq)
		CHECK(ibv_destroy_srq(srv.srq) == EBUSY);

	/* CQ overrun: a 2-entry CQ on a fresh QP gets more completions than it
	 * holds; the verbs report IBV_EVENT_CQ_ERR, never a crash */
	{
		struct ibv_cq *small = ibv_create_cq(cli.id->verbs, 2, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = {.send_cq = small,
					      .recv_cq = small,
					      .cap = {.max_send_wr = 8,
						      .max_recv_wr = 8,
						      .max_send_sge = 1,
						      .max_recv_sge = 1},
					      .qp_type = IBV_QPT_RC};
		struct ibv_qp *q = ibv_create_qp(cli.pd, &qa);
		struct ibv_sge sge = {
		    .addr = (uintptr_t)cli.buf, .length = 8, .lkey = cli.mr->lkey};
		struct ibv_recv_wr rw = {.sg_list = &sge, .num_sge = 1}, *rbad;
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
		struct ibv_async_event ev;
		int fl, k, seen = 0;

		CHECK(small && q);
		for (int i = 0; i < 6; i++) {
			rw.wr_id = i;
			CHECK(ibv_post_recv(q, &rw, &rbad) == 0);
		}
		/* ERR flushes 6 receives into a CQ of 2 */
		CHECK(ibv_modify_qp(q, &at, IBV_QP_STATE) == 0);
		usleep(100000);
		k = ibv_poll_cq(small, 8, wc);
		CHECK(k >= 0 && k <= 8);
		k = ibv_poll_cq(small, 8, wc);
		CHECK(k >= 0);
		fl = fcntl(cli.id->verbs->async_fd, F_GETFL);
		CHECK(fcntl(cli.id->verbs->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
		while (ibv_get_async_event(cli.id->verbs, &ev) == 0) {
			if (ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == small)
				seen = 1;
			ibv_ack_async_event(&ev);
		}
		CHECK(fcntl(cli.id->verbs->async_fd, F_SETFL, fl) == 0);
		printf("cq overrun: %s\n", seen ? "CQ_ERR reported" : "no overflow (CQ larger)");
		CHECK(ibv_destroy_qp(q) == 0);
		CHECK(ibv_destroy_cq(small) == 0);
	}

	/* a flushed post after ERR */
	{
		struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
		struct ibv_sge sge = {
		    .addr = (uintptr_t)cli.buf, .length = 8, .lkey = cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = 77,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad;
		struct ibv_wc fw;
		long spins = 0;

		CHECK(rdma_disconnect(cli.id) == 0);
		CHECK(ibv_modify_qp(cli.qp, &at, IBV_QP_STATE) == 0);
		if (ibv_post_send(cli.qp, &w, &bad) == 0) {
			while (ibv_poll_cq(cli.cq, 1, &fw) == 0)
				CHECK(++spins < 5000000);
			CHECK(fw.wr_id == 77 && fw.status == IBV_WC_WR_FLUSH_ERR);
		}
	}
	rdma_destroy_qp(cli.id);
	CHECK(ibv_destroy_cq(cli.cq) == 0);
	CHECK(ibv_dereg_mr(cli.mr) == 0);
	CHECK(ibv_dealloc_pd(cli.pd) == 0);
	rdma_destroy_ep(cli.id);
	rdma_disconnect(srv.id);
	rdma_destroy_qp(srv.id);
	if (srv.srq)
		CHECK(ibv_destroy_srq(srv.srq) == 0);
	CHECK(ibv_destroy_cq(srv.cq) == 0);
	CHECK(ibv_dereg_mr(srv.mr) == 0);
	CHECK(ibv_dealloc_pd(srv.pd) == 0);
	rdma_destroy_ep(srv.id);
	free(cli.buf);
	free(srv.buf);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	printf("PASS\n");
	return 0;
}
