/* route_mulpdu_ep: one uiwarp endpoint for tests/mpa/route_mulpdu.sh (the
 * route-bounded MULPDU test, RFC 5044 §6: every FPDU fits one TCP segment
 * of the path).
 *
 *   route_mulpdu_ep server ADDR PORT [stream]
 *   route_mulpdu_ep client ADDR PORT [stream]
 *
 * The two ends exchange their buffer's STag and address as MPA private
 * data, then each RDMA-Writes 64 KiB into the other's buffer and sends an
 * 8 KiB Send after it; each waits for the other's Send, checks the bytes,
 * prints "MULPDU n" (uiw_qp_conn_mode) and "DONE", and closes. Exit 0 on
 * success. Bounded: every wait is at most 10 s.
 *
 * With "stream" the client instead streams SN Sends of 64 KiB to the
 * server as perftest's bandwidth loop does (one WR posted whenever fewer
 * than SDEPTH are outstanding, completions polled one at a time), each
 * message a pattern of its own, and prints "PUSHES n" (the sendmsg calls
 * that carried them); the server, its SN receives posted before it
 * accepts, takes them all in, then checks every byte and prints "DONE".
 * (route_mulpdu.sh segments: the sender's pushes end on TCP segment
 * boundaries.)
 */
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdmap/rdmap.h"

#define WLEN (64u << 10)
#define SLEN (8u << 10)
#define BUF_LEN (WLEN + 2 * SLEN)
#define SN 128
#define SDEPTH 16

static uint8_t pattern(uint32_t msg, uint32_t i)
{
	return (uint8_t)(msg * 37 + i * 7 + (i >> 11));
}

struct keys {
	uint32_t stag;
	uint64_t addr;
} __attribute__((packed));

static int poll_wc(struct uiw_cq *cq, struct uiw_wc *wc)
{
	for (int i = 0; i < 10000; i++) {
		if (uiw_cq_poll(cq, 1, wc) == 1)
			return 0;
		usleep(1000);
	}
	return -1;
}

/* The "stream" mode (see the top). Returns main's exit code. */
static int stream_run(bool server, struct uiw_cq *cq, struct uiw_qp *qp, uint8_t *sbuf,
		      struct uiw_mr *smr)
{
	struct uiw_wc wc;
	if (server) {
		/* every message in first, then every byte checked: a receiver
		 * that checks as it goes falls behind, the sender finds the
		 * window shut, and the kernel joins the next push to a short
		 * tail (the segments count then says little about the pushes) */
		for (uint32_t n = 0; n < SN; n++) {
			if (poll_wc(cq, &wc) || wc.status != UIW_WC_SUCCESS ||
			    wc.opcode != UIW_WC_RECV || wc.byte_len != WLEN || wc.wr_id < 100 ||
			    wc.wr_id >= 100 + SN) {
				fprintf(stderr, "receive %u failed\n", n);
				return 1;
			}
		}
		for (uint32_t msg = 0; msg < SN; msg++) {
			for (uint32_t i = 0; i < WLEN; i++)
				if (sbuf[(size_t)msg * WLEN + i] != pattern(msg, i)) {
					fprintf(stderr, "message %u byte %u wrong\n", msg, i);
					return 1;
				}
		}
	} else {
		for (uint32_t msg = 0; msg < SN; msg++)
			for (uint32_t i = 0; i < WLEN; i++)
				sbuf[(size_t)msg * WLEN + i] = pattern(msg, i);
		uint32_t posted = 0, done = 0;
		while (done < SN) {
			if (posted < SN && posted - done < SDEPTH) {
				struct uiw_sge g = {.addr = (uintptr_t)sbuf + (size_t)posted * WLEN,
						    .length = WLEN,
						    .lkey = smr->stag};
				struct uiw_send_wr w = {.wr_id = posted,
							.opcode = UIW_WR_SEND,
							.flags = UIW_SEND_SIGNALED,
							.sg_list = &g,
							.num_sge = 1};
				int bad;
				if (uiw_qp_post_send(qp, &w, 1, &bad))
					return 1;
				posted++;
				continue;
			}
			int k = 0;
			for (int i = 0; i < 1000000 && !k; i++)
				k = uiw_cq_poll(cq, 1, &wc);
			if (!k && poll_wc(cq, &wc))
				return 1;
			if (wc.status != UIW_WC_SUCCESS) {
				fprintf(stderr, "send %u failed\n", (unsigned)wc.wr_id);
				return 1;
			}
			done++;
		}
		/* the sendmsg calls that carried the stream (route_mulpdu.sh
		 * segments: each may end in a short segment) */
		struct uiw_qp_stats st;
		uiw_qp_get_stats(qp, &st);
		printf("PUSHES %llu\n", (unsigned long long)st.tx_syscalls);
	}
	printf("DONE\n");
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    (argc == 5 && strcmp(argv[4], "stream"))) {
		fprintf(stderr, "usage: %s server|client ADDR PORT [stream]\n", argv[0]);
		return 2;
	}
	bool stream = argc == 5;
	bool server = strcmp(argv[1], "server") == 0;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
	if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1)
		return 2;
	uint8_t *buf = calloc(1, BUF_LEN);
	struct uiw_pd *pd = uiw_pd_alloc();
	struct uiw_mr *mr;
	struct uiw_cq *cq;
	struct uiw_qp *qp;
	if (!buf || !pd ||
	    uiw_mr_reg(pd, buf, BUF_LEN, (uintptr_t)buf,
		       UIW_ACCESS_LOCAL_WRITE | UIW_ACCESS_REMOTE_WRITE, &mr) ||
	    uiw_cq_create(64, NULL, NULL, &cq))
		return 2;
	struct uiw_qp_init_attr qa = {.pd = pd,
				      .send_cq = cq,
				      .recv_cq = cq,
				      .max_send_wr = 16,
				      .max_recv_wr = 16,
				      .max_send_sge = 1,
				      .max_recv_sge = 1};
	/* stream: the server's SN receives (posted before it accepts), the
	 * client's source of SN messages */
	uint8_t *sbuf = NULL;
	struct uiw_mr *smr = NULL;
	if (stream) {
		qa.max_send_wr = 2 * SDEPTH;
		qa.max_recv_wr = SN;
		if (!(sbuf = calloc(SN, WLEN)) ||
		    uiw_mr_reg(pd, sbuf, (size_t)SN * WLEN, (uintptr_t)sbuf, UIW_ACCESS_LOCAL_WRITE,
			       &smr))
			return 2;
	}
	if (uiw_qp_create(&qa, &qp))
		return 2;
	struct keys mine = {.stag = htobe32(mr->stag), .addr = htobe64((uintptr_t)buf)}, theirs;
	struct uiw_conn_param cp = {.private_data = &mine,
				    .private_data_len = sizeof(mine),
				    .responder_resources = 4,
				    .initiator_depth = 4};
	struct uiw_conn_info info;
	int rc;
	/* the receive for the peer's Send, before the connection can deliver it */
	struct uiw_sge rs = {.addr = (uintptr_t)buf + WLEN, .length = SLEN, .lkey = mr->stag};
	struct uiw_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
	int bad;
	if (!stream && uiw_qp_post_recv(qp, &rw, 1, &bad))
		return 2;
	for (uint32_t i = 0; stream && server && i < SN; i++) {
		struct uiw_sge r = {
		    .addr = (uintptr_t)sbuf + (size_t)i * WLEN, .length = WLEN, .lkey = smr->stag};
		struct uiw_recv_wr w = {.wr_id = 100 + i, .sg_list = &r, .num_sge = 1};
		if (uiw_qp_post_recv(qp, &w, 1, &bad))
			return 2;
	}
	if (server) {
		struct uiw_listener *l;
		struct uiw_conn_req *req;
		if (uiw_listen((struct sockaddr *)&sa, 1, &l))
			return 2;
		printf("LISTEN\n");
		fflush(stdout);
		rc = uiw_listener_get_request(l, 10000, &req, &info);
		if (!rc)
			rc = uiw_accept(req, qp, &cp, 10000);
		uiw_listener_close(l);
	} else {
		bool rejected = false;
		rc = -1;
		for (int i = 0; i < 50 && rc; i++) {
			rc = uiw_connect(qp, NULL, (struct sockaddr *)&sa, &cp, 10000, &info,
					 &rejected);
			if (rc)
				usleep(100000);
		}
	}
	if (rc || info.private_data_len != sizeof(theirs)) {
		fprintf(stderr, "connection failed: %d\n", rc);
		return 1;
	}
	memcpy(&theirs, info.private_data, sizeof(theirs));
	struct uiw_conn_mode m;
	if (uiw_qp_conn_mode(qp, &m))
		return 1;
	printf("MULPDU %u\n", m.mulpdu);
	fflush(stdout);
	if (stream) {
		int src = stream_run(server, cq, qp, sbuf, smr);
		usleep(200000); /* let the peer finish before the stream closes */
		uiw_qp_modify(qp, UIW_QPS_SQD);
		usleep(100000);
		uiw_qp_destroy(qp);
		uiw_mr_dereg(smr);
		uiw_mr_dereg(mr);
		uiw_cq_destroy(cq);
		uiw_pd_free(pd);
		free(sbuf);
		free(buf);
		return src;
	}
	uint8_t fill = server ? 0x5a : 0xa5;
	uint8_t *wsrc = malloc(WLEN);
	struct uiw_mr *wmr;
	if (!wsrc || uiw_mr_reg(pd, wsrc, WLEN, (uintptr_t)wsrc, UIW_ACCESS_LOCAL_WRITE, &wmr))
		return 2;
	memset(wsrc, fill, WLEN);
	struct uiw_sge ws = {.addr = (uintptr_t)wsrc, .length = WLEN, .lkey = wmr->stag};
	struct uiw_sge ss = {.addr = (uintptr_t)wsrc, .length = SLEN, .lkey = wmr->stag};
	struct uiw_send_wr wr[2] = {{.wr_id = 10,
				     .opcode = UIW_WR_RDMA_WRITE,
				     .sg_list = &ws,
				     .num_sge = 1,
				     .remote_addr = be64toh(theirs.addr),
				     .rkey = be32toh(theirs.stag)},
				    {.wr_id = 11,
				     .opcode = UIW_WR_SEND,
				     .flags = UIW_SEND_SIGNALED,
				     .sg_list = &ss,
				     .num_sge = 1}};
	if (uiw_qp_post_send(qp, wr, 2, &bad))
		return 1;
	int sends = 0, recvs = 0;
	struct uiw_wc wc;
	while (sends + recvs < 2) {
		if (poll_wc(cq, &wc) || wc.status != UIW_WC_SUCCESS) {
			fprintf(stderr, "completion failed\n");
			return 1;
		}
		if (wc.opcode == UIW_WC_RECV)
			recvs++;
		else
			sends++;
	}
	uint8_t peer = server ? 0xa5 : 0x5a;
	for (uint32_t i = 0; i < WLEN + SLEN; i++)
		if (buf[i] != peer) {
			fprintf(stderr, "byte %u is 0x%02x, want 0x%02x\n", i, buf[i], peer);
			return 1;
		}
	printf("DONE\n");
	fflush(stdout);
	usleep(200000); /* let the peer finish before the stream closes */
	uiw_qp_modify(qp, UIW_QPS_SQD);
	usleep(100000);
	uiw_qp_destroy(qp);
	uiw_mr_dereg(wmr);
	uiw_mr_dereg(mr);
	uiw_cq_destroy(cq);
	uiw_pd_free(pd);
	free(wsrc);
	free(buf);
	return 0;
}
