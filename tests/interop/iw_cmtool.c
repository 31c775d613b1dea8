/*
 * iw_cmtool: a small rdma_cm program for the interop matrix (tests/interop).
 * Built against the system's rdma-core headers; it runs over kernel siw in
 * the lab guest and, with uiwarp-run, over uiwarp on the host.
 *
 *   iw_cmtool server ADDR PORT [--pd N] [--reject] [--act A] [--timeout S]
 *   iw_cmtool client ADDR PORT [--pd N] [--act A] [--timeout S]
 *
 * --pd N      private data bytes sent (client: connect, server: accept or
 *             reject); byte i = (i * 7 + N) & 0xff. The received private
 *             data is checked against the peer's length with the same rule.
 * --reject    server rejects the request (with --pd bytes)
 * --act A     after the connection is up and one Send each way has been
 *             exchanged (the server's message carries its buffer's addr/rkey):
 *               close     this side calls rdma_disconnect
 *               wait      wait for the peer to disconnect / die
 *               badwrite  RDMA Write to the peer's rkey + 0x1000 (a bad rkey):
 *                         the peer must answer with a Terminate
 *               hang      sleep forever (to be killed)
 * Output lines (stdout) are what the test scripts grep:
 *   PDATA_IN len=N ok|bad      REJECTED status=S pdlen=N ok|bad
 *   ESTABLISHED  EXCHANGED  WC op status=S(name)  EVENT name status=S  DONE
 */
#include <errno.h>
#include <stdarg.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

struct msg {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

static struct rdma_event_channel *ec;
static struct rdma_cm_id *id;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char *buf; /* [0..63] recv msg, [64..127] send msg, [4096..8191] rdma buf */
static int timeout_s = 20;
static time_t deadline;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void die(const char *what)
{
	out("FAIL %s: %s", what, strerror(errno));
	exit(1);
}

static void fill_pd(unsigned char *p, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + n);
}

static int check_pd(const unsigned char *p, int n, int want)
{
	if (want >= 0 && n != want)
		return 0;
	for (int i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 7 + n))
			return 0;
	return 1;
}

/* next CM event within the deadline; returns NULL on timeout */
static struct rdma_cm_event *get_event(int secs)
{
	struct pollfd pfd = { .fd = ec->fd, .events = POLLIN };
	int ms = secs * 1000;
	if (poll(&pfd, 1, ms) <= 0)
		return NULL;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ec, &ev))
		die("rdma_get_cm_event");
	return ev;
}

static void setup_qp(struct rdma_cm_id *cid)
{
	pd = ibv_alloc_pd(cid->verbs);
	if (!pd)
		die("ibv_alloc_pd");
	cq = ibv_create_cq(cid->verbs, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	buf = aligned_alloc(4096, 8192);
	memset(buf, 0, 8192);
	mr = ibv_reg_mr(pd, buf, 8192,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (rdma_create_qp(cid, pd, &qa))
		die("rdma_create_qp");
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(cid->qp, &rw, &bad))
		die("ibv_post_recv");
}

static const char *opname(enum ibv_wc_opcode o)
{
	switch (o) {
	case IBV_WC_SEND: return "send";
	case IBV_WC_RDMA_WRITE: return "write";
	case IBV_WC_RECV: return "recv";
	default: return "other";
	}
}

/* waits for one completion (or an error event on the CM channel) */
static int wait_wc(struct ibv_wc *wc, int secs)
{
	time_t end = time(NULL) + secs;
	while (time(NULL) < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1) {
			out("WC %s status=%d(%s)", wc->status == IBV_WC_SUCCESS ? opname(wc->opcode) : "?",
			    wc->status, ibv_wc_status_str(wc->status));
			return 0;
		}
		usleep(1000);
	}
	return -1;
}

static void post_send(struct rdma_cm_id *cid, struct msg *m)
{
	memcpy(buf + 64, m, sizeof(*m));
	struct ibv_sge sge = { (uintptr_t)(buf + 64), sizeof(*m), mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(cid->qp, &sw, &bad))
		die("ibv_post_send");
}

/* Send each way; returns the peer's msg */
static struct msg exchange(struct rdma_cm_id *cid, int is_server)
{
	struct msg mine = { (uintptr_t)(buf + 4096), mr->rkey, 4096 }, theirs;
	struct ibv_wc wc;
	int got_recv = 0, got_send = 0;
	if (is_server) {
		/* client speaks first (siw: the responder must not send first) */
		if (wait_wc(&wc, timeout_s) || wc.status != IBV_WC_SUCCESS || wc.wr_id != 1)
			die("exchange: recv");
		got_recv = 1;
		post_send(cid, &mine);
	} else {
		post_send(cid, &mine);
	}
	while (!got_recv || !got_send) {
		if (wait_wc(&wc, timeout_s)) {
			errno = ETIMEDOUT;
			die("exchange");
		}
		if (wc.status != IBV_WC_SUCCESS) {
			errno = EIO;
			die("exchange: completion error");
		}
		if (wc.wr_id == 1)
			got_recv = 1;
		else
			got_send = 1;
	}
	memcpy(&theirs, buf, sizeof(theirs));
	out("EXCHANGED peer_rkey=0x%x", theirs.rkey);
	/* a second receive: it must be flushed when the connection ends */
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(cid->qp, &rw, &bad))
		die("ibv_post_recv");
	return theirs;
}

static void async_events(struct rdma_cm_id *cid)
{
	struct pollfd pfd = { .fd = cid->verbs->async_fd, .events = POLLIN };
	struct ibv_async_event ae;
	while (poll(&pfd, 1, 0) == 1 && !ibv_get_async_event(cid->verbs, &ae)) {
		out("ASYNC %s", ibv_event_type_str(ae.event_type));
		ibv_ack_async_event(&ae);
	}
}

static void after(struct rdma_cm_id *cid, const char *act, struct msg peer)
{
	struct ibv_wc wc;
	if (!strcmp(act, "hang")) {
		for (;;)
			sleep(1);
	}
	if (!strcmp(act, "close")) {
		if (rdma_disconnect(cid))
			die("rdma_disconnect");
		out("DISCONNECT_CALLED");
	}
	if (!strcmp(act, "badwrite")) {
		struct ibv_sge sge = { (uintptr_t)(buf + 4096), 64, mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 3, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		sw.wr.rdma.remote_addr = peer.addr;
		sw.wr.rdma.rkey = peer.rkey + 0x1000;
		if (ibv_post_send(cid->qp, &sw, &bad))
			die("ibv_post_send(write)");
		out("BADWRITE_POSTED rkey=0x%x", sw.wr.rdma.rkey);
		/* the write may complete locally (siw: on handoff to TCP) */
		wait_wc(&wc, 3);
	}
	/* then: wait for the disconnect event, polling the CQ for flushes */
	time_t end = time(NULL) + timeout_s;
	while (time(NULL) < end) {
		while (ibv_poll_cq(cq, 1, &wc) == 1)
			out("WC %s status=%d(%s)", opname(wc.opcode), wc.status,
			    ibv_wc_status_str(wc.status));
		struct rdma_cm_event *ev = get_event(1);
		if (!ev)
			continue;
		out("EVENT %s status=%d", rdma_event_str(ev->event), ev->status);
		int disc = ev->event == RDMA_CM_EVENT_DISCONNECTED;
		rdma_ack_cm_event(ev);
		if (disc) {
			/* the receive posted for a second message must flush */
			if (wait_wc(&wc, 3))
				out("NO_FLUSH");
			async_events(cid);
			if (strcmp(act, "close"))
				rdma_disconnect(cid);
			out("DONE");
			return;
		}
	}
	out("FAIL no DISCONNECTED event in %d s", timeout_s);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s server|client ADDR PORT [--pd N] [--reject] [--act A] [--timeout S]\n",
			argv[0]);
		return 2;
	}
	int is_server = !strcmp(argv[1], "server");
	const char *addr = argv[2], *port = argv[3], *act = "close";
	int pdn = 0, reject = 0;
	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "--pd") && i + 1 < argc)
			pdn = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reject"))
			reject = 1;
		else if (!strcmp(argv[i], "--act") && i + 1 < argc)
			act = argv[++i];
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_s = atoi(argv[++i]);
	}
	deadline = time(NULL) + timeout_s;
	unsigned char pdata[1024];
	fill_pd(pdata, pdn);

	ec = rdma_create_event_channel();
	if (!ec)
		die("rdma_create_event_channel");
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	struct rdma_addrinfo hints = { 0 }, *res;
	if (is_server)
		hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		die("rdma_getaddrinfo");
	struct rdma_conn_param cp = { .private_data = pdn ? pdata : NULL,
				      .private_data_len = (uint8_t)pdn,
				      .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (pdn > 255) {
		fprintf(stderr, "--pd max 255 (rdma_conn_param is a u8)\n");
		return 2;
	}
	struct rdma_cm_id *cid;
	struct rdma_cm_event *ev;
	if (is_server) {
		if (rdma_bind_addr(id, res->ai_src_addr))
			die("rdma_bind_addr");
		if (rdma_listen(id, 4))
			die("rdma_listen");
		out("LISTENING");
		ev = get_event(timeout_s);
		if (!ev) {
			out("FAIL no connect request");
			return 1;
		}
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			out("FAIL event %s", rdma_event_str(ev->event));
			return 1;
		}
		cid = ev->id;
		int n = ev->param.conn.private_data_len;
		/* iWARP delivers the exact length; the client sends the same N */
		out("PDATA_IN len=%d %s", n,
		    check_pd(ev->param.conn.private_data, n, -1) ? "ok" : "bad");
		rdma_ack_cm_event(ev);
		if (reject) {
			if (rdma_reject(cid, pdn ? pdata : NULL, (uint8_t)pdn))
				die("rdma_reject");
			out("REJECT_SENT");
			sleep(1);
			out("DONE");
			return 0;
		}
		setup_qp(cid);
		if (rdma_accept(cid, &cp))
			die("rdma_accept");
		ev = get_event(timeout_s);
		if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
			out("FAIL expected ESTABLISHED, got %s", ev ? rdma_event_str(ev->event) : "timeout");
			return 1;
		}
		rdma_ack_cm_event(ev);
	} else {
		cid = id;
		if (rdma_resolve_addr(id, NULL, res->ai_dst_addr, 5000))
			die("rdma_resolve_addr");
		ev = get_event(timeout_s);
		if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
			out("FAIL addr: %s", ev ? rdma_event_str(ev->event) : "timeout");
			return 1;
		}
		rdma_ack_cm_event(ev);
		if (rdma_resolve_route(id, 5000))
			die("rdma_resolve_route");
		ev = get_event(timeout_s);
		if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
			out("FAIL route: %s", ev ? rdma_event_str(ev->event) : "timeout");
			return 1;
		}
		rdma_ack_cm_event(ev);
		setup_qp(id);
		if (rdma_connect(id, &cp))
			die("rdma_connect");
		ev = get_event(timeout_s);
		if (!ev) {
			out("FAIL connect timeout");
			return 1;
		}
		if (ev->event == RDMA_CM_EVENT_REJECTED) {
			int n = ev->param.conn.private_data_len;
			out("REJECTED status=%d pdlen=%d %s", ev->status, n,
			    check_pd(ev->param.conn.private_data, n, -1) ? "ok" : "bad");
			rdma_ack_cm_event(ev);
			out("DONE");
			return 0;
		}
		if (ev->event != RDMA_CM_EVENT_ESTABLISHED) {
			out("FAIL connect: %s status=%d", rdma_event_str(ev->event), ev->status);
			return 1;
		}
		int n = ev->param.conn.private_data_len;
		out("PDATA_IN len=%d %s", n,
		    check_pd(ev->param.conn.private_data, n, -1) ? "ok" : "bad");
		rdma_ack_cm_event(ev);
	}
	out("ESTABLISHED");
	struct msg peer = exchange(cid, is_server);
	after(cid, act, peer);
	return 0;
}
