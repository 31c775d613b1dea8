/* Connection setup: TCP connect / listen / accept (stream/tcp.c), the MPA
 * handshake (RFC 5044 §7, RFC 6581) and the RTR, binding a QP to its
 * stream and handing the stream to the engine (progress.c). Setup is
 * blocking, with deadlines, in the caller's thread; from then on nothing
 * blocks. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "iwpm/iwpm.h"
#include "rdmap/internal.h"
#include "rdmap/stat.h"

struct uiw_listener {
	int fd;
	int wake[2]; /* pipe: close wakes waiters */
	/* the application's address, registered with the port mapper; its
	 * port differs from fd's when mapped (uiw_listen_ex) */
	struct sockaddr_storage app;
	bool mapped;
	pthread_mutex_t lock;
	int inside;
	bool closed;
};

struct uiw_conn_req {
	struct uiw_stream *s;
	struct mpa_params req;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint8_t clamp8(uint16_t v)
{
	return v > 255 ? 255 : (uint8_t)v;
}

static void fill_addrs(struct uiw_stream *s, struct uiw_conn_info *info)
{
	socklen_t l = sizeof(info->local);
	getsockname(uiw_stream_fd(s), (struct sockaddr *)&info->local, &l);
	l = sizeof(info->peer);
	getpeername(uiw_stream_fd(s), (struct sockaddr *)&info->peer, &l);
}

static void fill_pd(struct uiw_conn_info *info, const struct mpa_params *p)
{
	uint16_t n = p->pd_len > UIW_MAX_PRIVATE_DATA ? UIW_MAX_PRIVATE_DATA : p->pd_len;
	memcpy(info->private_data, p->pd, n);
	info->private_data_len = (uint8_t)n;
}

/* Binds the stream to the QP and sets up framing; the engine does not
 * have it yet. */
static int qp_attach(struct uiw_qp *qp, struct uiw_stream *s, const struct mpa_negotiated *neg)
{
	if (mpa_conn_init(&qp->mpa, s, neg))
		return -ENOMEM;
	qp->neg = *neg;
	for (int i = 0; i < RDMAP_NUM_QN; i++)
		qp->tx_msn[i] = 1;
	uiw_rx_reset(qp);
	memset(&qp->txm, 0, sizeof(qp->txm));
	qp->tx_fail = qp->term_queued = qp->term_sent = qp->term_closed = false;
	qp->term_started = qp->term_in_batch = false;
	qp->tx_busy = false;
	atomic_store(&qp->tx_window, 0);
	qp->want_out = false;
	atomic_store(&qp->hup_seen, false);
	qp->close_by_ns = 0;
	qp->ev_due = 0;
	atomic_store(&qp->pending, 0);
	/* RFC 6581 §4: a zero-length Send RTR consumes no receive WR */
	qp->rx_expect_send_rtr = neg->p2p && !neg->initiator && neg->rtr == MPA_RTR_SEND;
	pthread_mutex_lock(&qp->lock);
	qp->stream = s;
	qp->caps = neg->rfc7306 ? UIW_CAP_RFC7306 : 0;
	qp->ird = neg->ird > UIW_MAX_IRD ? UIW_MAX_IRD : neg->ird;
	qp->ord = neg->ord > UIW_MAX_ORD ? UIW_MAX_ORD : neg->ord;
	qp->tx_gate_open = neg->initiator;
	qp->rx_seen_first = qp->rx_ended = qp->aborted = false;
	qp->terminated = qp->disconnected_reported = false;
	qp->tx_sq_end = qp->sq_next;
	qp->tx_irq_end = qp->irq_next;
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

static void qp_detach(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->stream = NULL;
	qp->connected = false;
	qp->phase = CONN_NONE;
	pthread_mutex_unlock(&qp->lock);
	mpa_conn_fini(&qp->mpa);
}

/* The QP is connected: RTS. */
static void qp_open(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	qp->connected = true;
	qp->phase = CONN_OPEN;
	if (qp->state != UIW_QPS_ERR)
		qp->state = UIW_QPS_RTS;
	pthread_mutex_unlock(&qp->lock);
	uiw_stat_qp_connected(qp, qp->neg.initiator);
}

/* The QP is connected: RTS, and the engine takes the stream. */
static int qp_start(struct uiw_qp *qp)
{
	qp_open(qp);
	return uiw_engine_attach(qp);
}

static bool qp_connectable(struct uiw_qp *qp)
{
	pthread_mutex_lock(&qp->lock);
	bool ok = !qp->connected && !qp->stream &&
		  (qp->state == UIW_QPS_INIT || qp->state == UIW_QPS_RTR ||
		   qp->state == UIW_QPS_RTS || qp->state == UIW_QPS_RESET);
	pthread_mutex_unlock(&qp->lock);
	return ok;
}

/* See rdmap/internal.h. */
int uiw_qp_attach_driven(struct uiw_qp *qp, struct uiw_stream *s, const struct mpa_negotiated *neg)
{
	if (!qp_connectable(qp))
		return -EINVAL;
	int rc = qp_attach(qp, s, neg);
	if (rc)
		return rc;
	qp_open(qp);
	return 0;
}

/* Sleeps us microseconds, resumed after a signal. */
static void sleep_us(int us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* A refused TCP connect is retried (UIWARP_CONNECT_RETRY_MS, default
 * 250 ms, 0: never) before it is reported as refused. Some programs tell the
 * peer their rdma_cm port before they listen on it (qperf 0.4.11's
 * cm_open_server sends the port, then calls rdma_listen; fixed upstream in
 * qperf commit 118a571 "Fix rdmacm race", in no release yet), and uiwarp's
 * active side connects within a millisecond of learning the port (no ARP,
 * no path query), so its SYN can beat the promised listen(); hardware loses
 * that race only rarely because its address and route resolution take
 * longer. A refusal that persists is still reported (REJECTED), this much
 * later. A host whose RNIC listens on a mapped port says so through its port
 * mapper (iwpmd, UDP 3935): ask first, fall back to the application's port
 * on reject, no mapper or a short timeout (docs/iwpm.md). The query's time
 * counts against the connect timeout. */
/* Counts and logs a connect that failed at step (TCP connect, MPA, RTR)
 * with -errno rc; rejected: the peer's MPA Reply rejected it. */
static void connect_failed(struct uiw_qp *qp, const struct sockaddr *dst, const char *step, int rc,
			   bool rejected)
{
	uiw_stat_event(rejected ? UIW_STAT_EV_REJECT_RECV : UIW_STAT_EV_CONN_FAILED);
	if (rejected)
		uiw_stat_event(UIW_STAT_EV_CONN_FAILED);
	if (!uiw_log_on(UIW_LOG_WARN))
		return;
	char who[128], a[64];
	snprintf(who, sizeof(who), "qp=%u ->%s", uiw_qp_num(qp), uiw_log_addr(dst, a, sizeof(a)));
	uiw_log(UIW_LOG_WARN, who, "connect failed at %s: %s%s", step, strerror(-rc),
		rejected ? " (MPA reject from the peer)" : "");
}

/* The socket options of one connection: the process's, with param's
 * per-connection settings over them (param may be NULL). */
static struct uiw_tcp_opts conn_opts(const struct uiw_conn_param *param)
{
	struct uiw_tcp_opts o = uiw_config_get()->tcp;
	if (param && param->set_tos)
		o.tos = param->tos;
	return o;
}

/* UIWARP_MPTCP: says (UIWARP_LOG=info) whether the connected socket fd
 * carries Multipath TCP or plain TCP (the peer, or this kernel, does not
 * speak it: the fallback of RFC 8684 §3.7). */
static void log_mptcp(int fd)
{
	if (!uiw_config_get()->tcp.mptcp || !uiw_log_on(UIW_LOG_INFO))
		return;
	char t[128];
	uiw_log(UIW_LOG_INFO, uiw_log_tuple(fd, t, sizeof(t)), "%s",
		uiw_tcp_mptcp_state(fd, NULL) == 1
		    ? "stream: Multipath TCP (the path manager adds subflows)"
		    : "stream: plain TCP, no Multipath TCP (the peer, or this kernel, does not "
		      "speak it)");
}

static int tcp_connect(const struct sockaddr *src, const struct sockaddr *dst, int timeout_ms,
		       const struct uiw_conn_param *param)
{
	const struct uiw_config *cfg = uiw_config_get();
	struct uiw_tcp_opts o = conn_opts(param);
	uint64_t t0 = now_ms();
	struct sockaddr_storage to;
	if (iwpm_query(src, dst, -1, &to) > 0)
		dst = (const struct sockaddr *)&to;
	int spent = (int)(now_ms() - t0);
	int left = spent >= timeout_ms ? 1 : timeout_ms - spent;
	return uiw_tcp_connect(src, dst, left, cfg->connect_retry_ms, &o);
}

/* RFC 6581 §8: a reply we cannot use gets a Terminate carrying the MPA
 * error code (layer LLP) before we close. Best effort, bounded. */
static void send_setup_terminate(struct uiw_qp *qp, struct uiw_stream *s,
				 const struct mpa_params *reply, bool markers, uint8_t code)
{
	struct mpa_negotiated tn = {.rev = reply->rev,
				    .crc = reply->crc,
				    .markers_tx = reply->markers && markers,
				    .initiator = true};
	struct mpa_conn c;
	if (mpa_conn_init(&c, s, &tn))
		return;
	uint8_t payload[4] = {RDMAP_LAYER_LLP << 4, code, 0, 0};
	struct iovec v = {.iov_base = payload, .iov_len = sizeof(payload)};
	struct ddp_msg m = {.ulp_ctrl = RDMAP_VERSION << RDMAP_VERSION_SHIFT | RDMAP_TERMINATE,
			    .qn = DDP_QN_TERMINATE,
			    .msn = 1,
			    .iov = &v,
			    .niov = 1,
			    .len = sizeof(payload)};
	struct ddp_txpos pos = {0};
	if (ddp_tx_message(&c, &m, &pos) == 1)
		(void)mpa_tx_push_wait(&c, 2000);
	mpa_conn_fini(&c);
	(void)qp;
}

int uiw_connect(struct uiw_qp *qp, const struct sockaddr *src, const struct sockaddr *dst,
		const struct uiw_conn_param *param, int timeout_ms, struct uiw_conn_info *info,
		bool *rejected)
{
	const struct uiw_config *cfg = uiw_config_get();
	if (rejected)
		*rejected = false;
	if (param->private_data_len > UIW_MAX_PRIVATE_DATA || !qp_connectable(qp))
		return -EINVAL;
	struct mpa_config mc = cfg->mpa;
	if (timeout_ms >= 0)
		mc.timeout_ms = timeout_ms;

	int fd =
	    tcp_connect(src, dst, timeout_ms >= 0 ? timeout_ms : cfg->connect_timeout_ms, param);
	if (fd < 0) {
		connect_failed(qp, dst, "TCP connect", fd, false);
		return fd;
	}
	log_mptcp(fd);
	if (cfg->tcp.short_rcvbuf)
		(void)uiw_tcp_short_path_rcvbuf(fd);
	struct uiw_stream *s = uiw_stream_tcp(fd);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	if (cfg->tls.mode != UIW_TLS_OFF) {
		/* UIWARP_TLS: the TLS 1.3 handshake before the MPA Request */
		int rc = uiw_tls_client(&s, &cfg->tls, mc.timeout_ms);
		if (rc) {
			connect_failed(qp, dst, "TLS", rc, false);
			s->ops->destroy(s);
			return rc;
		}
		/* TLS's AEAD tag already covers every byte: no CRC32c asked for */
		if (!mc.crc_required)
			mc.crc = false;
	}
	uint16_t ird = param->responder_resources, ord = param->initiator_depth;
	if (ird > UIW_MAX_IRD)
		ird = UIW_MAX_IRD;
	if (ord > UIW_MAX_ORD)
		ord = UIW_MAX_ORD;
	struct mpa_params *reply = calloc(1, sizeof(*reply));
	if (!reply) {
		s->ops->destroy(s);
		return -ENOMEM;
	}
	struct mpa_negotiated neg;
	uint8_t term = 0;
	int rc = mpa_initiate(s, &mc, ird, ord, param->private_data, param->private_data_len, reply,
			      &neg, &term);
	if (info) {
		memset(info, 0, sizeof(*info));
		fill_pd(info, reply);
		fill_addrs(s, info);
	}
	if (rc == -ECONNREFUSED && rejected)
		*rejected = true;
	if (rc == -EPROTO && term)
		send_setup_terminate(qp, s, reply, mc.markers, term);
	if (rc) {
		connect_failed(qp, dst, "MPA", rc, rc == -ECONNREFUSED);
		free(reply);
		s->ops->destroy(s);
		return rc;
	}
	if (info) {
		info->responder_resources = clamp8(reply->ord);
		info->initiator_depth = clamp8(reply->ird);
	}
	free(reply);
	/* UIWARP_MPA_RTR_DELAY_US: a responder that reads its socket only some
	 * time after sending the Reply (kernel siw's accept race, docs/interop.md
	 * siw bug 1) gets that time before the RTR or the first ULP FPDU; the
	 * connection is reported established only after it. */
	if (cfg->rtr_delay_us > 0)
		sleep_us(cfg->rtr_delay_us);
	rc = qp_attach(qp, s, &neg);
	if (rc) {
		s->ops->destroy(s);
		return rc;
	}
	/* RFC 6581 §4: the RTR is the first FPDU, before any ULP data */
	if (neg.p2p && neg.rtr)
		rc = uiw_tx_send_rtr(qp, neg.rtr);
	if (!rc)
		rc = qp_start(qp);
	if (rc) {
		connect_failed(qp, dst, "RTR", rc, false);
		uiw_engine_detach(qp);
		qp_detach(qp);
		s->ops->destroy(s);
		return rc;
	}
	return 0;
}

int uiw_listen(const struct sockaddr *addr, int backlog, struct uiw_listener **out)
{
	return uiw_listen_ex(addr, backlog, 0, out);
}

static uint16_t sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static void sa_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* See rdmap/rdmap.h. */
bool uiw_listen_mappable(const struct sockaddr *addr, bool v6only)
{
	/* the mapping must be learnable: our responder answers on UDP 3935 */
	return sa_port(addr) && !iwpm_responder_holds(addr, v6only) && iwpm_responder_start() == 0;
}

int uiw_listen_ex(const struct sockaddr *addr, int backlog, unsigned flags,
		  struct uiw_listener **out)
{
	bool v6only = flags & UIW_LISTEN_V6ONLY;
	struct uiw_listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->fd = uiw_tcp_listen(addr, backlog, v6only, &uiw_config_get()->tcp);
	if (l->fd == -EADDRINUSE && (flags & UIW_LISTEN_MAP) && uiw_listen_mappable(addr, v6only)) {
		/* a socket that is not ours holds the port: listen on a
		 * free one and tell initiators through the port mapper */
		struct sockaddr_storage any;
		memcpy(&any, addr,
		       addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						   : sizeof(struct sockaddr_in));
		sa_set_port(&any, 0);
		l->fd = uiw_tcp_listen((struct sockaddr *)&any, backlog, v6only,
				       &uiw_config_get()->tcp);
		l->mapped = l->fd >= 0;
	}
	if (l->fd < 0) {
		int e = -l->fd;
		free(l);
		return -e;
	}
	if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		int e = errno;
		close(l->fd);
		free(l);
		return -e;
	}
	pthread_mutex_init(&l->lock, NULL);
	/* answer kernel iWARP initiators' port-mapper queries for this
	 * listener when no iwpmd owns UDP 3935 here (docs/iwpm.md) */
	struct sockaddr_storage bound;
	socklen_t len = sizeof(bound);
	memset(&bound, 0, sizeof(bound));
	getsockname(l->fd, (struct sockaddr *)&bound, &len);
	l->app = bound;
	if (l->mapped)
		sa_set_port(&l->app, sa_port(addr));
	iwpm_responder_add_mapping((struct sockaddr *)&l->app, sa_port((struct sockaddr *)&bound),
				   v6only);
	if (l->mapped && uiw_log_on(UIW_LOG_INFO)) {
		char a[64];
		uiw_log(UIW_LOG_INFO, uiw_log_addr((struct sockaddr *)&l->app, a, sizeof(a)),
			"listen: the port is held by another socket; mapped to TCP port %u "
			"(initiators learn it from the port mapper, docs/iwpm.md)",
			sa_port((struct sockaddr *)&bound));
	}
	*out = l;
	return 0;
}

void uiw_listener_addr(struct uiw_listener *l, struct sockaddr_storage *out)
{
	*out = l->app;
}

static void listener_free(struct uiw_listener *l)
{
	close(l->fd);
	close(l->wake[0]);
	close(l->wake[1]);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/* Leaves the listener; frees it if it was closed and we were the last. */
static void listener_leave(struct uiw_listener *l)
{
	pthread_mutex_lock(&l->lock);
	bool last = --l->inside == 0 && l->closed;
	pthread_mutex_unlock(&l->lock);
	if (last)
		listener_free(l);
}

/* True when the peer of a stream that is still ours to answer has already
 * closed it or reset it (FIN or RST read, or a socket error pending). */
static bool peer_gone(struct uiw_stream *s)
{
	struct pollfd p = {.fd = uiw_stream_fd(s), .events = POLLIN | POLLRDHUP};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP));
}

int uiw_listener_get_request(struct uiw_listener *l, int timeout_ms, struct uiw_conn_req **out,
			     struct uiw_conn_info *info)
{
	const struct uiw_config *cfg = uiw_config_get();
	pthread_mutex_lock(&l->lock);
	if (l->closed) {
		pthread_mutex_unlock(&l->lock);
		return -ECANCELED;
	}
	l->inside++;
	pthread_mutex_unlock(&l->lock);
	uint64_t end = timeout_ms >= 0 ? now_ms() + (uint64_t)timeout_ms : UINT64_MAX;
	int rc;
	for (;;) {
		pthread_mutex_lock(&l->lock);
		bool closed = l->closed;
		pthread_mutex_unlock(&l->lock);
		if (closed) {
			rc = -ECANCELED;
			break;
		}
		uint64_t now = now_ms();
		if (now >= end) {
			rc = -ETIMEDOUT;
			break;
		}
		struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN},
				      {.fd = l->wake[0], .events = POLLIN}};
		int wait = end == UINT64_MAX ? -1 : (int)(end - now);
		int r = poll(p, 2, wait);
		if (r < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (r <= 0 || !(p[0].revents & POLLIN))
			continue;
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		uiw_tcp_apply_opts(fd, &cfg->tcp);
		log_mptcp(fd);
		if (cfg->tcp.short_rcvbuf)
			(void)uiw_tcp_short_path_rcvbuf(fd);
		struct uiw_stream *s = uiw_stream_tcp(fd);
		if (!s) {
			close(fd);
			continue;
		}
		/* UIWARP_TLS: a peer whose first byte starts a TLS handshake
		 * gets one (a failed one is dropped like a bad MPA Request) */
		if (uiw_tls_accept(&s, &cfg->tls, cfg->mpa.timeout_ms) != 0) {
			s->ops->destroy(s);
			continue;
		}
		struct uiw_conn_req *cr = calloc(1, sizeof(*cr));
		if (!cr) {
			s->ops->destroy(s);
			continue;
		}
		/* RFC 5044 §7.1.2: a peer that never sends a valid request is
		 * dropped after the MPA timeout */
		if (mpa_recv_request(s, cfg->mpa.timeout_ms, &cr->req) != 0) {
			s->ops->destroy(s);
			free(cr);
			continue;
		}
		/* refused requests: markers when they are not supported (as
		 * siw does), a plain peer under UIWARP_TLS=required */
		const char *refuse = NULL;
		if (cr->req.markers && !cfg->mpa.markers)
			refuse = "MPA request with markers rejected (UIWARP_MPA_MARKERS=0)";
		else if (cfg->tls.mode == UIW_TLS_REQUIRED && !uiw_stream_is_tls(s))
			refuse = "plain MPA request rejected (UIWARP_TLS=required)";
		if (refuse) {
			mpa_send_reject(s, &cr->req, NULL, 0);
			uiw_stat_event(UIW_STAT_EV_REJECT_SENT);
			if (uiw_log_on(UIW_LOG_WARN)) {
				char t[128];
				uiw_log(UIW_LOG_WARN, uiw_log_tuple(uiw_stream_fd(s), t, sizeof(t)),
					"%s", refuse);
			}
			s->ops->destroy(s);
			free(cr);
			continue;
		}
		/* an initiator that reset or closed its stream right after
		 * its Request (it sends nothing else before our Reply, RFC
		 * 5044 §7.1.1) is gone before the application could accept:
		 * dropped like a request that never completed, not handed up
		 * as one whose rdma_accept must fail */
		if (peer_gone(s)) {
			if (uiw_log_on(UIW_LOG_INFO)) {
				char t[128];
				uiw_log(UIW_LOG_INFO, uiw_log_tuple(uiw_stream_fd(s), t, sizeof(t)),
					"MPA request dropped: the initiator closed or reset the "
					"connection right after it");
			}
			s->ops->destroy(s);
			free(cr);
			continue;
		}
		cr->s = s;
		if (info) {
			memset(info, 0, sizeof(*info));
			fill_pd(info, &cr->req);
			fill_addrs(s, info);
			/* as the kernel's iw_cm: the application's port */
			if (l->mapped)
				sa_set_port(&info->local, sa_port((struct sockaddr *)&l->app));
			/* seen from our side: the peer's ORD is what we must serve */
			info->responder_resources = clamp8(cr->req.ord);
			info->initiator_depth = clamp8(cr->req.ird);
		}
		*out = cr;
		rc = 0;
		break;
	}
	listener_leave(l);
	return rc;
}

int uiw_listener_close(struct uiw_listener *l)
{
	iwpm_responder_remove_listener((struct sockaddr *)&l->app);
	pthread_mutex_lock(&l->lock);
	l->closed = true;
	bool free_now = l->inside == 0;
	pthread_mutex_unlock(&l->lock);
	if (write(l->wake[1], "x", 1) < 0) {
		/* the pipe is non-blocking; a full pipe already wakes waiters */
	}
	if (free_now)
		listener_free(l);
	return 0;
}

int uiw_accept_start(struct uiw_conn_req *req, struct uiw_qp *qp,
		     const struct uiw_conn_param *param, bool *p2p)
{
	const struct uiw_config *cfg = uiw_config_get();
	struct uiw_stream *s = req->s;
	int rc = -EINVAL;
	if (p2p)
		*p2p = false;
	if (param->private_data_len > UIW_MAX_PRIVATE_DATA || !qp_connectable(qp))
		goto fail;
	uint16_t ird = param->responder_resources, ord = param->initiator_depth;
	if (ird > UIW_MAX_IRD)
		ird = UIW_MAX_IRD;
	if (ord > UIW_MAX_ORD)
		ord = UIW_MAX_ORD;
	if (param->set_tos) {
		struct uiw_tcp_opts o = conn_opts(param);
		uiw_tcp_apply_opts(uiw_stream_fd(s), &o);
	}
	struct mpa_negotiated neg;
	struct mpa_config mc = cfg->mpa;
	/* TLS's AEAD tag already covers every byte: no CRC32c asked for */
	if (uiw_stream_is_tls(s) && !mc.crc_required)
		mc.crc = false;
	rc = mpa_send_accept(s, &mc, &req->req, ird, ord, param->private_data,
			     param->private_data_len, &neg);
	if (rc)
		goto fail;
	rc = qp_attach(qp, s, &neg);
	if (rc)
		goto fail;
	/* RTS now; the send side holds what is posted until the initiator's
	 * first FPDU (tx_gate_open, rx.c first_fpdu) */
	rc = qp_start(qp);
	if (rc) {
		uiw_engine_detach(qp);
		qp_detach(qp);
		goto fail;
	}
	free(req);
	if (p2p)
		*p2p = neg.p2p;
	return 0;
fail:
	uiw_stat_event(UIW_STAT_EV_CONN_FAILED);
	if (uiw_log_on(UIW_LOG_WARN)) {
		char who[128], t[96];
		snprintf(who, sizeof(who), "qp=%u %s", uiw_qp_num(qp),
			 uiw_log_tuple(uiw_stream_fd(s), t, sizeof(t)));
		uiw_log(UIW_LOG_WARN, who, "accept failed: %s", strerror(-rc));
	}
	s->ops->destroy(s);
	free(req);
	return rc;
}

int uiw_accept_wait(struct uiw_qp *qp, int timeout_ms)
{
	const struct uiw_config *cfg = uiw_config_get();
	/* RFC 6581 §4: established once the initiator's RTR has arrived */
	uint64_t end = now_ms() + (uint64_t)(timeout_ms >= 0 ? timeout_ms : cfg->mpa.timeout_ms);
	pthread_mutex_lock(&qp->lock);
	while (!qp->rx_seen_first && !qp->rx_ended) {
		uint64_t now = now_ms();
		if (now >= end)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t wait = end - now > 50 ? 50 : end - now;
		ts.tv_nsec += (long)(wait * 1000000);
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&qp->cond, &qp->lock, &ts);
	}
	/* The RTR arrived: the connection was established, even if the peer
	 * has closed it again since (its DISCONNECTED event follows). */
	bool seen = qp->rx_seen_first;
	pthread_mutex_unlock(&qp->lock);
	if (!seen) {
		uiw_stat_event(UIW_STAT_EV_CONN_FAILED);
		uiw_qp_log(qp, UIW_LOG_WARN, "accept failed: no RTR from the peer in %d ms",
			   timeout_ms >= 0 ? timeout_ms : cfg->mpa.timeout_ms);
		uiw_qp_modify(qp, UIW_QPS_ERR);
		return -ETIMEDOUT;
	}
	return 0;
}

int uiw_accept(struct uiw_conn_req *req, struct uiw_qp *qp, const struct uiw_conn_param *param,
	       int timeout_ms)
{
	bool p2p;
	int rc = uiw_accept_start(req, qp, param, &p2p);
	if (rc || !p2p)
		return rc;
	return uiw_accept_wait(qp, timeout_ms);
}

int uiw_reject(struct uiw_conn_req *req, const void *private_data, uint8_t len)
{
	int rc = len > UIW_MAX_PRIVATE_DATA ? -EINVAL
					    : mpa_send_reject(req->s, &req->req, private_data, len);
	uiw_stat_event(UIW_STAT_EV_REJECT_SENT);
	if (uiw_log_on(UIW_LOG_INFO)) {
		char t[128];
		uiw_log(UIW_LOG_INFO, uiw_log_tuple(uiw_stream_fd(req->s), t, sizeof(t)),
			"connection request rejected by the application (MPA reject, %u bytes of "
			"private data)",
			len);
	}
	req->s->ops->shutdown_send(req->s);
	req->s->ops->destroy(req->s);
	free(req);
	return rc;
}
