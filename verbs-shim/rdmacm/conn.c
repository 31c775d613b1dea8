/* librdmacm.so.1 (ours): connections over the uiwarp engine's connection
 * setup (rdmap.h: uiw_connect, uiw_listen, uiw_accept, uiw_reject):
 * rdma_connect(3), rdma_establish(3), rdma_listen(3), rdma_get_request(3),
 * rdma_accept(3), rdma_reject(3), rdma_disconnect(3), rdma_notify(3), and
 * the iWARP behaviour of the kernel rdma_cm (iw_cm): REJECTED carries
 * status -ECONNREFUSED, rdma_disconnect is a graceful close (QP to SQD) and
 * both ends get one DISCONNECTED.
 *
 * Threads: no thread exists before rdma_connect / rdma_accept (one worker
 * each, joined by the next operation or by rdma_destroy_id) and
 * rdma_listen (one per listener, joined by rdma_destroy_id). Each is
 * created with every signal blocked (cm_thread_create): a library must not
 * change which thread a process's signals reach (tgt blocks SIGUSR2 in its
 * main thread and reads it through a signalfd).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "verbs-shim/shim.h"
#include "cm_priv.h"

/* Worker end: queues ESTABLISHED (e) and a DISCONNECTED that came early. */
static void established(struct cm_id *id, struct cm_event *e)
{
	pthread_mutex_lock(&cm_lock);
	id->state = CM_CONNECTED;
	if (e)
		cm_queue_event_locked(e);
	if (id->disc_pending)
		cm_disconnected_locked(id);
	pthread_mutex_unlock(&cm_lock);
}

/* Runs a connect or accept in a worker thread (the id's state is already
 * CONNECTING / ACCEPTING); on failure puts the state back to prev. A
 * synchronous id waits for ESTABLISHED. 0, or -1 with errno (pthread's,
 * or the connection's error for a synchronous id). */
static int start_worker(struct cm_id *id, void *(*fn)(void *), enum cm_state prev)
{
	int e = cm_thread_create(&id->worker, fn, id);

	if (e) {
		pthread_mutex_lock(&cm_lock);
		id->state = prev;
		pthread_mutex_unlock(&cm_lock);
		errno = e;
		return -1;
	}
	id->worker_started = true;
	if (id->sync) {
		int ret = cm_sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);

		cm_join_worker(id);
		return ret;
	}
	return 0;
}

/* ------------------------------------------------------------- connect */

static void *connect_worker(void *arg)
{
	struct cm_id *id = arg;
	struct uiw_conn_info *info = calloc(1, sizeof(*info));
	struct sockaddr_storage src;
	bool rejected = false;
	struct cm_event *e;
	int ret;

	/* The QP as it was when rdma_connect returned: the application may
	 * destroy it (clearing id->conn_qp) while the connect runs. */
	struct ibv_qp *qp = id->conn_qp;
	uint32_t qpn = qp->qp_num;

	memcpy(&src, &id->id.route.addr.src_storage, sizeof(src));
	if (!id->explicit_port)
		cm_addr_set_port((struct sockaddr *)&src, 0);
	if (!info)
		ret = -ENOMEM;
	else
		ret = uiw_connect(shim_qp(qp)->qp, (struct sockaddr *)&src,
				  &id->id.route.addr.dst_addr, &id->param, -1, info, &rejected);
	if (!ret) {
		e = cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (e) {
			cm_event_set_pdata(e, info->private_data, info->private_data_len);
			e->ev.param.conn.responder_resources = info->responder_resources;
			e->ev.param.conn.initiator_depth = info->initiator_depth;
			e->ev.param.conn.qp_num = qpn;
		}
		established(id, e);
	} else {
		enum rdma_cm_event_type t;

		if (ret == -ECONNREFUSED || ret == -ECONNRESET)
			t = RDMA_CM_EVENT_REJECTED;
		else if (ret == -ETIMEDOUT || ret == -EHOSTUNREACH || ret == -ENETUNREACH)
			t = RDMA_CM_EVENT_UNREACHABLE;
		else
			t = RDMA_CM_EVENT_CONNECT_ERROR;
		e = cm_event_new(id, t, ret);
		if (e && rejected && info)
			cm_event_set_pdata(e, info->private_data, info->private_data_len);
		pthread_mutex_lock(&cm_lock);
		id->state = CM_ROUTE_RESOLVED; /* the QP is left unconnected and reusable */
		id->disc_pending = false;
		if (e)
			cm_queue_event_locked(e);
		pthread_mutex_unlock(&cm_lock);
	}
	free(info);
	return NULL;
}

/* Copies conn_param (NULL: device defaults) into id->param.
 * RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (255) ask for the device's most.
 * -1 EINVAL if the private data is longer than UIW_MAX_PRIVATE_DATA or, on
 * an RDMA_PS_TCP id, responder_resources / initiator_depth is above the
 * device's max_qp_rd_atom / max_qp_init_rd_atom (rdma-core's librdmacm,
 * ucma_valid_param; other port spaces are lowered to it, as it lets them
 * through to the kernel). */
static int set_param(struct cm_id *id, const struct rdma_conn_param *p)
{
	uint8_t ird = cm_dev_rd_atom(false), ord = cm_dev_rd_atom(true);

	memset(&id->param, 0, sizeof(id->param));
	id->param.set_tos = id->tos >= 0;
	id->param.tos = (uint8_t)(id->tos >= 0 ? id->tos : 0);
	if (!p) {
		id->param.responder_resources = ird;
		id->param.initiator_depth = ord;
		return 0;
	}
	if (p->private_data_len > UIW_MAX_PRIVATE_DATA ||
	    (p->private_data_len && !p->private_data)) {
		errno = EINVAL;
		return -1;
	}
	if (id->id.ps == RDMA_PS_TCP &&
	    ((p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > ird) ||
	     (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > ord))) {
		errno = EINVAL;
		return -1;
	}
	if (p->private_data_len)
		memcpy(id->param_pdata, p->private_data, p->private_data_len);
	id->param.private_data = id->param_pdata;
	id->param.private_data_len = p->private_data_len;
	id->param.responder_resources = p->responder_resources < ird ? p->responder_resources : ird;
	id->param.initiator_depth = p->initiator_depth < ord ? p->initiator_depth : ord;
	return 0;
}

/* rdma_connect(3): starts the MPA connection of id->qp to the resolved
 * destination with conn_param's private data (at most 252 bytes) and
 * IRD/ORD in a worker thread. Later: ESTABLISHED (param.conn = the reply's
 * private data, the negotiated IRD/ORD), or REJECTED (status -ECONNREFUSED,
 * the reject's private data), UNREACHABLE (status -ETIMEDOUT / unreachable)
 * or CONNECT_ERROR (status -errno). A synchronous id blocks until then.
 * Without id->qp, conn_param->qp_num names the application's QP on
 * id->verbs (it may be in INIT, RTR or RTS, unconnected). 0, or -1 with
 * errno EINVAL (no such QP, route not resolved, private data too long),
 * EAGAIN (thread). */
CM_EXPORT int rdma_connect(struct rdma_cm_id *rid, struct rdma_conn_param *conn_param)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid || (id->state != CM_ROUTE_RESOLVED && id->state != CM_ADDR_RESOLVED)) {
		errno = EINVAL;
		return -1;
	}
	if (!cm_find_conn_qp(id, conn_param))
		return -1;
	cm_join_worker(id);
	if (set_param(id, conn_param))
		return -1;
	pthread_mutex_lock(&cm_lock);
	id->state = CM_CONNECTING;
	id->disc_pending = false;
	id->disc_queued = false;
	pthread_mutex_unlock(&cm_lock);
	return start_worker(id, connect_worker, CM_ROUTE_RESOLVED);
}

/* rdma_establish(3): for ids whose QP rdma_cm does not manage (IB RTU).
 * Here the connection is complete when ESTABLISHED is reported: 0 if the
 * id is connected, else -1 with errno EINVAL. */
CM_EXPORT int rdma_establish(struct rdma_cm_id *rid)
{
	if (!rid || cm_id_of(rid)->state != CM_CONNECTED) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- listen */

/* Longest wait of the listener thread before it checks listen_stop. */
#define LISTEN_POLL_MS 50

static void *listen_worker(void *arg)
{
	struct cm_id *lid = arg;
	unsigned errors = 0;

	for (;;) {
		struct uiw_conn_info info;
		struct uiw_conn_req *req = NULL;
		struct rdma_event_channel *ch;
		struct cm_id *nid;
		struct cm_event *e;
		int ret;

		memset(&info, 0, sizeof(info));
		pthread_mutex_lock(&cm_lock);
		ret = lid->listen_stop;
		pthread_mutex_unlock(&cm_lock);
		if (ret)
			break;
		ret = uiw_listener_get_request(lid->listener, LISTEN_POLL_MS, &req, &info);
		if (ret == -ETIMEDOUT)
			continue;
		if (ret == -ECANCELED)
			break;
		if (ret) {
			/* transient (a peer that went away, EMFILE): back off a little */
			struct timespec ts = {0, errors < 100 ? 1000000 : 50000000};

			errors++;
			nanosleep(&ts, NULL);
			continue;
		}
		errors = 0;
		ch = lid->sync ? NULL : lid->id.channel;
		nid = cm_id_new(ch, lid->id.context, lid->id.ps);
		e = nid ? cm_event_new(nid, RDMA_CM_EVENT_CONNECT_REQUEST, 0) : NULL;
		if (!nid || !e || cm_attach_device(&nid->id)) {
			uiw_reject(req, NULL, 0);
			free(e);
			if (nid)
				rdma_destroy_id(&nid->id);
			continue;
		}
		nid->id.port_num = 1;
		nid->state = CM_CONNECT_REQ;
		nid->req = req;
		nid->listen_parent = lid;
		nid->tos = lid->tos; /* as the kernel's iw_conn_req_handler */
		nid->bound = true;
		memcpy(&nid->id.route.addr.src_storage, &info.local, sizeof(info.local));
		memcpy(&nid->id.route.addr.dst_storage, &info.peer, sizeof(info.peer));
		cm_event_set_pdata(e, info.private_data, info.private_data_len);
		e->ev.param.conn.responder_resources = info.responder_resources;
		e->ev.param.conn.initiator_depth = info.initiator_depth;
		e->ev.listen_id = &lid->id;
		/* the request is reported on the listener's channel, counted on
		 * the new id (rdma_destroy_id of the new id waits for its ack) */
		pthread_mutex_lock(&cm_lock);
		if (lid->destroying) {
			pthread_mutex_unlock(&cm_lock);
			free(e);
			rdma_destroy_id(&nid->id);
			continue;
		}
		{
			struct cm_channel *c = cm_channel_of(lid->id.channel);

			if (c->dead) { /* the application destroyed the channel */
				pthread_mutex_unlock(&cm_lock);
				free(e);
				rdma_destroy_id(&nid->id);
				continue;
			}
			cm_channel_append_locked(c, e);
		}
		pthread_mutex_unlock(&cm_lock);
	}
	uiw_listener_close(lid->listener);
	return NULL;
}

/* rdma_listen(3): starts listening on the bound address (TCP listener
 * with SO_REUSEADDR, so a port can be re-bound right after the previous
 * listener is destroyed; on a free port mapped to the bound one through the
 * port mapper when a socket other than ours holds it, uiw_listen_ex
 * UIW_LISTEN_MAP; an IPv6 one with IPV6_V6ONLY as
 * RDMA_OPTION_ID_AFONLY or net.ipv6.bindv6only says, rdma_set_option) and a thread that reports
 * each MPA request as CONNECT_REQUEST with a new id (listen_id, verbs, addresses and param.conn
 * set) on this id's channel. backlog <= 0 means 1024. 0, or -1 with errno EINVAL (not bound),
 * EADDRINUSE, EADDRNOTAVAIL, errno of socket calls. */
CM_EXPORT int rdma_listen(struct rdma_cm_id *rid, int backlog)
{
	struct cm_id *id = cm_id_of(rid);
	struct sockaddr_storage bound;
	int ret;

	if (!rid || id->state != CM_BOUND) {
		errno = EINVAL;
		return -1;
	}
	/* AFONLY as set, else the namespace's default seen at bind */
	ret = uiw_listen_ex(
	    &rid->route.addr.src_addr, backlog > 0 ? backlog : 1024,
	    UIW_LISTEN_MAP |
		((id->afonly >= 0 ? id->afonly != 0 : id->v6only_dflt) ? UIW_LISTEN_V6ONLY : 0),
	    &id->listener);
	if (ret) {
		id->listener = NULL;
		errno = -ret;
		return -1;
	}
	uiw_listener_addr(id->listener, &bound);
	if (cm_addr_len((struct sockaddr *)&bound))
		memcpy(&rid->route.addr.src_storage, &bound, sizeof(bound));
	ret = cm_thread_create(&id->listen_thread, listen_worker, id);
	if (ret) {
		uiw_listener_close(id->listener);
		id->listener = NULL;
		errno = ret;
		return -1;
	}
	id->listen_thread_started = true;
	id->state = CM_LISTEN;
	return 0;
}

/* rdma_get_request(3): for a synchronous listener (rdma_create_ep with
 * RAI_PASSIVE): waits for the next connection request and returns its new
 * id in *id, with the event in (*id)->event, and a QP created from the
 * listener's rdma_create_ep QP attributes if it had some (on the
 * listener's pd, else the device's PD; the new id's pd is the QP's, or the
 * device's PD without a QP, as in librdmacm). 0, or -1 with
 * errno EINVAL (not a synchronous listener), errno of rdma_create_qp. */
CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *lid = cm_id_of(listen);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *nid;

	if (!listen || !id || !lid->sync || lid->state != CM_LISTEN) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST || ev->status) {
		rdma_ack_cm_event(ev);
		errno = EIO;
		return -1;
	}
	nid = ev->id;
	nid->event = ev;
	if (lid->ep_qp_attr) {
		struct ibv_qp_init_attr attr = *lid->ep_qp_attr;

		if (rdma_create_qp(nid, listen->pd, &attr)) {
			int e = errno;

			rdma_reject(nid, NULL, 0);
			rdma_destroy_id(nid);
			errno = e;
			return -1;
		}
	}
	*id = nid;
	return 0;
}

/* ------------------------------------------------------ accept, reject */

/* The passive side is established (on qp number qpn): ESTABLISHED with
 * the IRD/ORD the accept gave. */
static void accept_established(struct cm_id *id, uint32_t qpn)
{
	struct cm_event *e = cm_event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);

	if (e) {
		e->ev.param.conn.responder_resources = id->param.responder_resources;
		e->ev.param.conn.initiator_depth = id->param.initiator_depth;
		e->ev.param.conn.qp_num = qpn;
	}
	established(id, e);
}

/* Waits for the initiator's RTR of an accepted connection (peer-to-peer
 * mode), then queues ESTABLISHED. If the stream ends first (the initiator
 * reset or closed it, or sent no RTR within the MPA timeout: the QP went to
 * ERR, WRs posted meanwhile are flushed), an asynchronous id gets
 * ESTABLISHED and then DISCONNECTED: the kernel's iWARP CM reports
 * ESTABLISHED when the accept has sent the Reply (siw_accept) and CLOSE
 * when the stream ends, and applications count on the pair (rping -P's
 * connection thread waits for one event after accept and one more before
 * its first message; with DISCONNECTED alone it waited forever, with
 * CONNECT_ERROR the whole server exited: issue 13). A synchronous id's
 * rdma_accept fails with the errno (ECONNRESET, ETIMEDOUT). */
static void *accept_worker(void *arg)
{
	struct cm_id *id = arg;
	struct cm_event *e;
	struct ibv_qp *qp = id->conn_qp; /* see connect_worker */
	uint32_t qpn = qp->qp_num;
	int ret;

	ret = uiw_accept_wait(shim_qp(qp)->qp, -1);
	if (!ret) {
		accept_established(id, qpn);
	} else if (!id->sync) {
		pthread_mutex_lock(&cm_lock);
		id->disc_pending = true; /* established() queues DISCONNECTED after it */
		pthread_mutex_unlock(&cm_lock);
		accept_established(id, qpn);
	} else {
		e = cm_event_new(id, RDMA_CM_EVENT_CONNECT_ERROR, ret);
		pthread_mutex_lock(&cm_lock);
		id->state = CM_ERROR;
		id->disc_pending = false;
		if (e)
			cm_queue_event_locked(e);
		pthread_mutex_unlock(&cm_lock);
	}
	return NULL;
}

/* rdma_accept(3): accepts the connection request of a new id (from
 * CONNECT_REQUEST) on id->qp with conn_param's private data and IRD/ORD
 * (lowered to the device limits; the engine reconciles them with the
 * peer's, RFC 6581). In the caller's thread, as the kernel's siw_accept
 * does: the MPA Reply is sent and the QP moved to RTS, so a WR posted as
 * soon as rdma_accept returns is taken; in peer-to-peer mode (the default)
 * it goes out once the initiator's RTR has arrived (RFC 6581 §4: the
 * responder sends nothing before it). A worker then waits for that RTR and
 * queues ESTABLISHED, or DISCONNECTED (the stream ended first, or no RTR
 * within the MPA timeout; the QP goes to ERR and flushes what was posted;
 * see accept_worker). A synchronous id blocks until ESTABLISHED. Without id->qp,
 * conn_param->qp_num names the application's QP on id->verbs. 0, or -1
 * with errno EINVAL (not a pending request, no such QP, private data too
 * long: the request stays pending; a QP already connected: the request is
 * consumed), or the errno of the MPA Reply (EPIPE, ECONNRESET, ETIMEDOUT:
 * the request is consumed and the id cannot be accepted again, as when the
 * kernel rdma_cm's accept fails). */
CM_EXPORT int rdma_accept(struct rdma_cm_id *rid, struct rdma_conn_param *conn_param)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_conn_req *req;
	struct ibv_qp *qp;
	bool p2p = false;
	int ret;

	if (!rid || id->state != CM_CONNECT_REQ || !id->req) {
		errno = EINVAL;
		return -1;
	}
	qp = cm_find_conn_qp(id, conn_param);
	if (!qp)
		return -1;
	if (set_param(id, conn_param))
		return -1;
	pthread_mutex_lock(&cm_lock);
	req = id->req;
	id->req = NULL;
	id->state = CM_ACCEPTING;
	pthread_mutex_unlock(&cm_lock);
	ret = uiw_accept_start(req, shim_qp(qp)->qp, &id->param, &p2p);
	if (ret) {
		pthread_mutex_lock(&cm_lock);
		id->state = CM_ERROR;
		id->disc_pending = false;
		pthread_mutex_unlock(&cm_lock);
		errno = -ret;
		return -1;
	}
	if (!p2p) /* no RTR to wait for: established now */
		accept_established(id, qp->qp_num);
	else if (cm_thread_create(&id->worker, accept_worker, id))
		accept_worker(id); /* no thread: wait for the RTR here */
	else
		id->worker_started = true;
	if (id->sync) {
		ret = cm_sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
		cm_join_worker(id);
		return ret;
	}
	return 0;
}

/* rdma_reject(3): rejects the connection request of a new id with an MPA
 * Reply carrying the reject bit and private_data (at most 252 bytes); the
 * peer gets REJECTED with that data. 0, or -1 with errno EINVAL (no
 * pending request, data too long), errno of the engine. */
CM_EXPORT int rdma_reject(struct rdma_cm_id *rid, const void *private_data,
			  uint8_t private_data_len)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_conn_req *req;
	int ret;

	if (!rid || private_data_len > UIW_MAX_PRIVATE_DATA ||
	    (private_data_len && !private_data)) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	req = id->state == CM_CONNECT_REQ ? id->req : NULL;
	id->req = NULL;
	if (req)
		id->state = CM_ERROR;
	pthread_mutex_unlock(&cm_lock);
	if (!req) {
		errno = EINVAL;
		return -1;
	}
	ret = uiw_reject(req, private_data, private_data_len);
	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/* rdma_reject_ece(3): rdma_reject; the ECE reason is not carried by MPA. */
CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

/* rdma_disconnect(3): graceful close of a connected id (QP to SQD: queued
 * work goes out, then FIN, RFC 5040 §6); DISCONNECTED is reported once on
 * both ends when the stream has closed. A synchronous id waits up to 2 s
 * for it. 0 (also if already disconnected), or -1 with errno EINVAL (not
 * connected, no QP). */
CM_EXPORT int rdma_disconnect(struct rdma_cm_id *rid)
{
	struct cm_id *id = cm_id_of(rid);
	enum cm_state st;
	int ret;

	if (!rid) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	st = id->state;
	pthread_mutex_unlock(&cm_lock);
	if (st == CM_DISCONNECTED)
		return 0;
	if (st != CM_CONNECTED || !id->conn_qp) {
		errno = EINVAL;
		return -1;
	}
	ret = uiw_qp_modify(shim_qp(id->conn_qp)->qp, UIW_QPS_SQD);
	if (ret && uiw_qp_get_state(shim_qp(id->conn_qp)->qp) != UIW_QPS_ERR) {
		errno = -ret;
		return -1;
	}
	if (id->sync) {
		struct timespec dl;

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 2;
		pthread_mutex_lock(&cm_lock);
		while (!id->disc_queued &&
		       pthread_cond_timedwait(&cm_cond, &cm_lock, &dl) != ETIMEDOUT)
			;
		pthread_mutex_unlock(&cm_lock);
	}
	return 0;
}

/* rdma_notify(3): IB communication-established notice; nothing to do on
 * iWARP. 0, or -1 with errno EINVAL for NULL. */
CM_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	if (!id) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}
