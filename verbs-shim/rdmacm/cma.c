/* librdmacm.so.1 (ours): the rdma_cm API of <rdma/rdma_cma.h> (rdma-core 44)
 * over the uiwarp engine's connection setup (rdmap.h: uiw_connect,
 * uiw_listen, uiw_accept, uiw_reject) and our libibverbs.
 *
 * Semantics follow the man pages rdma_cm(7), rdma_create_event_channel(3),
 * rdma_create_id(3), rdma_bind_addr(3), rdma_resolve_addr(3),
 * rdma_resolve_route(3), rdma_create_qp(3), rdma_connect(3),
 * rdma_listen(3), rdma_accept(3), rdma_reject(3), rdma_disconnect(3),
 * rdma_get_cm_event(3), rdma_ack_cm_event(3), rdma_destroy_id(3) and the
 * iWARP behaviour of the kernel rdma_cm (iw_cm): REJECTED carries status
 * -ECONNREFUSED, rdma_disconnect is a graceful close (QP to SQD) and both
 * ends get one DISCONNECTED.
 *
 * Threads: no thread exists before rdma_connect / rdma_accept (one worker
 * each, joined by the next operation or by rdma_destroy_id) and
 * rdma_listen (one per listener, joined by rdma_destroy_id).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/rtnetlink.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "netlink/uiw_netlink.h"
#include "verbs-shim/shim.h"
#include "cm_priv.h"

pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cm_cond = PTHREAD_COND_INITIALIZER;

static struct cm_id *live_ids; /* under cm_lock */
static uint64_t next_handle = 1;

/* --------------------------------------------------------------- fork */

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&dev_lock);
	pthread_mutex_lock(&cm_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&cm_lock);
	pthread_mutex_unlock(&dev_lock);
}

/* In the child only the forking thread exists: forget the listener and
 * worker threads so rdma_destroy_id does not join them (the child's copy
 * of a listening socket stays open until the child exits). */
static void fork_child(void)
{
	for (struct cm_id *p = live_ids; p; p = p->next_live) {
		p->listen_thread_started = false;
		p->worker_started = false;
		p->listener = NULL;
	}
	pthread_mutex_unlock(&cm_lock);
	pthread_mutex_unlock(&dev_lock);
}

static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Registers the fork handlers (lazily: nothing runs at load time). */
static void cm_init(void)
{
	pthread_once(&fork_once, fork_register);
}

/* ------------------------------------------------------------ device */

static struct ibv_context *dev_ctx;
static struct ibv_pd *dev_pd;
static struct ibv_device_attr dev_attr;

struct ibv_context *cm_verbs(void)
{
	struct ibv_context *ctx;

	pthread_mutex_lock(&dev_lock);
	if (!dev_ctx) {
		int n = 0;
		struct ibv_device **list = ibv_get_device_list(&n);

		if (list && n > 0) {
			const char *want = getenv("UIWARP_DEV_NAME");
			struct ibv_device *dev = list[0];

			for (int i = 0; want && i < n; i++)
				if (!strcmp(ibv_get_device_name(list[i]), want))
					dev = list[i];
			dev_ctx = ibv_open_device(dev);
			if (dev_ctx && ibv_query_device(dev_ctx, &dev_attr))
				memset(&dev_attr, 0, sizeof(dev_attr));
		}
		if (list)
			ibv_free_device_list(list);
	}
	ctx = dev_ctx;
	pthread_mutex_unlock(&dev_lock);
	if (!ctx)
		errno = ENODEV;
	return ctx;
}

struct ibv_pd *cm_pd(void)
{
	struct ibv_context *ctx = cm_verbs();
	struct ibv_pd *pd;

	if (!ctx)
		return NULL;
	pthread_mutex_lock(&dev_lock);
	if (!dev_pd)
		dev_pd = ibv_alloc_pd(ctx);
	pd = dev_pd;
	pthread_mutex_unlock(&dev_lock);
	return pd;
}

/* Device limit for IRD/ORD, as a uint8 conn_param value (at least 1). */
static uint8_t dev_rd_atom(bool initiator)
{
	int v = initiator ? dev_attr.max_qp_init_rd_atom : dev_attr.max_qp_rd_atom;

	if (v <= 0)
		v = 1;
	return v > 255 ? 255 : (uint8_t)v;
}

/* ----------------------------------------------------------- addresses */

socklen_t cm_addr_len(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		return sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET6)
		return sizeof(struct sockaddr_in6);
	return 0;
}

bool cm_addr_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static in_port_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

static void addr_set_port(struct sockaddr *sa, in_port_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = port;
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = port;
}

static void addr_copy(struct sockaddr_storage *dst, const struct sockaddr *src)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, src, cm_addr_len(src));
}

/* ------------------------------------------------------------- channel */

/* rdma_create_event_channel(3): returns a channel whose fd is a pollable
 * file descriptor (readable while events are queued), or NULL with errno
 * (EMFILE, ENFILE, ENOMEM). */
CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_channel *c;
	int sv[2];

	cm_init();
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		free(c);
		return NULL;
	}
	shutdown(sv[0], SHUT_WR);
	c->ch.fd = sv[0];
	c->wfd = sv[1];
	return &c->ch;
}

static void channel_free(struct cm_channel *c)
{
	struct cm_event *e, *n;

	pthread_mutex_lock(&cm_lock);
	e = c->head;
	c->head = c->tail = NULL;
	pthread_mutex_unlock(&cm_lock);
	for (; e; e = n) {
		n = e->next;
		free(e);
	}
	close(c->ch.fd);
	close(c->wfd);
	free(c);
}

/* rdma_destroy_event_channel(3): closes the fd and frees the channel.
 * The caller destroys every id on it first; queued events are dropped. */
CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (channel)
		channel_free(cm_channel_of(channel));
}

/* Appends e to the channel of its owner and writes its token. Called with
 * cm_lock held. Frees e instead if the owner is being destroyed. */
static void queue_event_locked(struct cm_event *e)
{
	struct cm_id *owner = e->owner;
	struct cm_channel *c = cm_channel_of(owner->id.channel);
	char b = 0;

	if (owner->destroying || !c) {
		free(e);
		return;
	}
	e->next = NULL;
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	while (send(c->wfd, &b, 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

static struct cm_event *event_new(struct cm_id *owner, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->owner = owner;
	e->ev.id = &owner->id;
	e->ev.event = type;
	e->ev.status = status;
	e->ev.param.conn.private_data = NULL;
	return e;
}

static void event_set_pdata(struct cm_event *e, const void *p, unsigned len)
{
	if (len > sizeof(e->pdata))
		len = sizeof(e->pdata);
	if (len) {
		memcpy(e->pdata, p, len);
		e->ev.param.conn.private_data = e->pdata;
	}
	e->ev.param.conn.private_data_len = (uint8_t)len;
}

static void queue_event(struct cm_event *e)
{
	pthread_mutex_lock(&cm_lock);
	queue_event_locked(e);
	pthread_mutex_unlock(&cm_lock);
}

/* Queues a simple event (no private data) on id's channel. */
static int post_simple(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = event_new(id, type, status);

	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	queue_event(e);
	return 0;
}

/* Removes the queued (not yet delivered) events of id from channel c and
 * one token for each. Called with cm_lock held. */
static void drop_queued_locked(struct cm_channel *c, struct cm_id *id)
{
	struct cm_event **pp = &c->head, *e;
	char b;

	c->tail = NULL;
	while ((e = *pp)) {
		if (e->owner == id) {
			*pp = e->next;
			free(e);
			(void)!recv(c->ch.fd, &b, 1, MSG_DONTWAIT);
			continue;
		}
		c->tail = e;
		pp = &e->next;
	}
}

/* rdma_get_cm_event(3): returns the next event of channel in *event: 0, or
 * -1 with errno EAGAIN (fd set O_NONBLOCK and nothing queued), EINTR,
 * EINVAL. Blocks otherwise. The event and its private data stay valid
 * until rdma_ack_cm_event. A caller still blocked when the channel is
 * destroyed stays blocked (as with the kernel rdma_cm). */
CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_channel *c;

	if (!channel || !event) {
		errno = EINVAL;
		return -1;
	}
	c = cm_channel_of(channel);
	for (;;) {
		char b;
		ssize_t r = read(c->ch.fd, &b, 1);
		struct cm_event *e;

		if (r < 0)
			return -1;
		if (r == 0) {
			/* The channel was destroyed under us (rping's CM thread,
			 * still blocked when main destroys the channel and
			 * returns). The kernel rdma_cm leaves such a reader
			 * blocked, and so do we: returning would make it act on
			 * freed memory or, like rping, exit with an error. */
			for (;;)
				pause();
		}
		pthread_mutex_lock(&cm_lock);
		e = c->head;
		if (e) {
			c->head = e->next;
			if (!c->head)
				c->tail = NULL;
			e->owner->delivered++;
		}
		pthread_mutex_unlock(&cm_lock);
		if (e) {
			*event = &e->ev;
			return 0;
		}
	}
}

/* rdma_ack_cm_event(3): frees an event from rdma_get_cm_event. 0, or -1
 * with errno EINVAL for NULL. */
CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cm_event *e = (struct cm_event *)event;

	if (!event) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	e->owner->acked++;
	pthread_cond_broadcast(&cm_cond);
	pthread_mutex_unlock(&cm_lock);
	free(e);
	return 0;
}

/* rdma_event_str(3): the name of an event type ("RDMA_CM_EVENT_..."), or
 * "UNKNOWN EVENT". */
CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
	    "RDMA_CM_EVENT_ADDR_RESOLVED",     "RDMA_CM_EVENT_ADDR_ERROR",
	    "RDMA_CM_EVENT_ROUTE_RESOLVED",    "RDMA_CM_EVENT_ROUTE_ERROR",
	    "RDMA_CM_EVENT_CONNECT_REQUEST",   "RDMA_CM_EVENT_CONNECT_RESPONSE",
	    "RDMA_CM_EVENT_CONNECT_ERROR",     "RDMA_CM_EVENT_UNREACHABLE",
	    "RDMA_CM_EVENT_REJECTED",	       "RDMA_CM_EVENT_ESTABLISHED",
	    "RDMA_CM_EVENT_DISCONNECTED",      "RDMA_CM_EVENT_DEVICE_REMOVAL",
	    "RDMA_CM_EVENT_MULTICAST_JOIN",    "RDMA_CM_EVENT_MULTICAST_ERROR",
	    "RDMA_CM_EVENT_ADDR_CHANGE",       "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	    "RDMA_CM_EVENT_ADDRINFO_RESOLVED", "RDMA_CM_EVENT_ADDRINFO_ERROR",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* ------------------------------------------------------------------ ids */

static struct cm_id *id_new(struct rdma_event_channel *channel, void *context,
			    enum rdma_port_space ps)
{
	struct cm_id *id;

	cm_init();
	id = calloc(1, sizeof(*id));
	if (!id) {
		errno = ENOMEM;
		return NULL;
	}
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel) {
			free(id);
			return NULL;
		}
		cm_channel_of(channel)->internal = true;
		id->sync = true;
	}
	id->id.channel = channel;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = IBV_QPT_RC;
	id->id.port_num = 1;
	pthread_mutex_lock(&cm_lock);
	id->handle = next_handle++;
	id->next_live = live_ids;
	live_ids = id;
	pthread_mutex_unlock(&cm_lock);
	return id;
}

/* Called with cm_lock held. */
static struct cm_id *id_lookup_locked(uint64_t handle)
{
	for (struct cm_id *p = live_ids; p; p = p->next_live)
		if (p->handle == handle)
			return p;
	return NULL;
}

/* rdma_create_id(3): a new id on channel (NULL: synchronous id; its
 * operations block until their event and leave it in id->event) with ps
 * RDMA_PS_TCP or RDMA_PS_IB (RC). 0, or -1 with errno EINVAL,
 * EOPNOTSUPP (UDP / IPoIB port spaces: UD is not implemented),
 * ENOMEM. */
CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	struct cm_id *p;

	if (!id) {
		errno = EINVAL;
		return -1;
	}
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB) {
		errno = EOPNOTSUPP;
		return -1;
	}
	p = id_new(channel, context, ps);
	if (!p)
		return -1;
	*id = &p->id;
	return 0;
}

static void join_worker(struct cm_id *id)
{
	if (id->worker_started) {
		pthread_join(id->worker, NULL);
		id->worker_started = false;
	}
}

/* Stops the listener thread and joins it; the thread closes the engine
 * listener itself. (uiw_listener_close frees the listener at once when no
 * thread is inside uiw_listener_get_request, so it must not race with the
 * thread's next call: the thread polls listen_stop between calls of at most
 * LISTEN_POLL_MS instead.) */
static void stop_listener(struct cm_id *id)
{
	pthread_mutex_lock(&cm_lock);
	id->listen_stop = true;
	pthread_mutex_unlock(&cm_lock);
	if (id->listen_thread_started) {
		pthread_join(id->listen_thread, NULL);
		id->listen_thread_started = false;
	}
	id->listener = NULL;
}

/* After a listener stopped: requests still queued on its channel are
 * rejected and their new ids destroyed (the kernel rdma_cm does the same). */
static void drop_requests(struct cm_id *lid)
{
	struct cm_channel *c;
	struct cm_event **pp, *e;
	struct cm_id *victims[64];
	unsigned n = 0;
	char b;

	pthread_mutex_lock(&cm_lock);
	c = cm_channel_of(lid->id.channel);
	pp = &c->head;
	c->tail = NULL;
	while ((e = *pp)) {
		if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->ev.listen_id == &lid->id &&
		    n < sizeof(victims) / sizeof(victims[0])) {
			*pp = e->next;
			victims[n++] = e->owner;
			free(e);
			(void)!recv(c->ch.fd, &b, 1, MSG_DONTWAIT);
			continue;
		}
		c->tail = e;
		pp = &e->next;
	}
	pthread_mutex_unlock(&cm_lock);
	for (unsigned i = 0; i < n; i++)
		rdma_destroy_id(&victims[i]->id);
}

/* rdma_destroy_id(3): stops the listener or connection setup in progress,
 * drops the id's queued events, waits until every event already returned
 * by rdma_get_cm_event for it is acknowledged, rejects a connection
 * request that was neither accepted nor rejected, and frees the id. The
 * caller destroys the QP first (rdma_destroy_qp or ibv_destroy_qp).
 * 0, or -1 with errno EINVAL. */
CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *rid)
{
	struct cm_id *id = cm_id_of(rid);
	struct cm_channel *c;
	struct uiw_conn_req *req;

	if (!rid) {
		errno = EINVAL;
		return -1;
	}
	if (id->sync && rid->event) {
		rdma_ack_cm_event(rid->event);
		rid->event = NULL;
	}
	if (id->listen_thread_started) {
		stop_listener(id);
		drop_requests(id);
	}
	join_worker(id);

	pthread_mutex_lock(&cm_lock);
	id->destroying = true;
	c = cm_channel_of(rid->channel);
	if (c)
		drop_queued_locked(c, id);
	while (id->acked < id->delivered)
		pthread_cond_wait(&cm_cond, &cm_lock);
	for (struct cm_id **pp = &live_ids; *pp; pp = &(*pp)->next_live)
		if (*pp == id) {
			*pp = id->next_live;
			break;
		}
	/* new ids whose listen_parent is this id lose it */
	for (struct cm_id *p = live_ids; p; p = p->next_live)
		if (p->listen_parent == id)
			p->listen_parent = NULL;
	req = id->req;
	id->req = NULL;
	pthread_mutex_unlock(&cm_lock);

	if (req)
		uiw_reject(req, NULL, 0);
	if (c && c->internal)
		channel_free(c);
	rdma_freeaddrinfo(id->resolved_ai);
	free(id->ep_qp_attr);
	free(id);
	return 0;
}

/* rdma_migrate_id(3): moves id (and its queued events) to channel (NULL:
 * to a new internal channel, making the id synchronous). 0, or -1 with
 * errno EINVAL, ENOMEM. */
CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *rid, struct rdma_event_channel *channel)
{
	struct cm_id *id = cm_id_of(rid);
	struct cm_channel *old, *nc;
	struct cm_event *moved = NULL, **tail = &moved;
	bool new_sync = false;

	if (!rid) {
		errno = EINVAL;
		return -1;
	}
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		cm_channel_of(channel)->internal = true;
		new_sync = true;
	}
	if (id->sync && rid->event) { /* the last result of a synchronous id */
		rdma_ack_cm_event(rid->event);
		rid->event = NULL;
	}
	nc = cm_channel_of(channel);
	pthread_mutex_lock(&cm_lock);
	old = cm_channel_of(rid->channel);
	if (old && old != nc) {
		struct cm_event **pp = &old->head, *e;
		char b;

		old->tail = NULL;
		while ((e = *pp)) {
			if (e->owner == id) {
				*pp = e->next;
				e->next = NULL;
				*tail = e;
				tail = &e->next;
				(void)!recv(old->ch.fd, &b, 1, MSG_DONTWAIT);
				continue;
			}
			old->tail = e;
			pp = &e->next;
		}
	}
	rid->channel = channel;
	id->sync = new_sync;
	while (moved) {
		struct cm_event *n = moved->next;

		queue_event_locked(moved);
		moved = n;
	}
	pthread_mutex_unlock(&cm_lock);
	if (old && old != nc && old->internal)
		channel_free(old);
	return 0;
}

/* --------------------------------------------------- synchronous waits */

/* For a synchronous id: acks the previous id->event, waits for the next
 * event (the operation's result) and stores it in id->event. Returns 0 if
 * it is `want` with status 0; otherwise -1 with errno from the status
 * (ECONNREFUSED for REJECTED, EHOSTUNREACH for UNREACHABLE, else EIO or
 * -status). */
static int sync_wait(struct cm_id *id, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;

	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	if (rdma_get_cm_event(id->id.channel, &ev))
		return -1;
	id->id.event = ev;
	if (ev->event == want && ev->status == 0)
		return 0;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		errno = ECONNREFUSED;
	else if (ev->event == RDMA_CM_EVENT_UNREACHABLE)
		errno = EHOSTUNREACH;
	else if (ev->status < 0)
		errno = -ev->status;
	else
		errno = EIO;
	return -1;
}

/* ---------------------------------------------------------- bind, resolve */

/* Binds a TCP socket (SO_REUSEADDR) to addr and closes it: checks that
 * the address is local and the port not held by a listener; port 0 is
 * replaced by the port the kernel picked. 0, or -1 with errno of bind. */
static int pick_port(struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int one = 1, fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, addr, cm_addr_len(addr)) || getsockname(fd, (struct sockaddr *)&ss, &len)) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	addr_set_port(addr, addr_port((struct sockaddr *)&ss));
	return 0;
}

/* rdma_bind_addr(3): binds id to a local IPv4/IPv6 address and port (port
 * 0: a free port is picked now, readable with rdma_get_src_port). A
 * non-wildcard address also sets id->verbs to this library's device
 * context; a wildcard one leaves it NULL until a connection request
 * (kernel rdma_cm behaviour). 0, or -1 with errno EINVAL (NULL, state),
 * EAFNOSUPPORT, EADDRNOTAVAIL (address not local), EADDRINUSE (a listener
 * holds the port), ENODEV. The TCP port itself is taken by rdma_listen
 * (SO_REUSEADDR) or by the connection, not here. */
CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *rid, struct sockaddr *addr)
{
	struct cm_id *id = cm_id_of(rid);
	struct sockaddr_storage ss;

	if (!rid || !addr) {
		errno = EINVAL;
		return -1;
	}
	if (!cm_addr_len(addr)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (id->state != CM_IDLE) {
		errno = EINVAL;
		return -1;
	}
	addr_copy(&ss, addr);
	/* the address must be local and the port not held by a listener;
	 * port 0 becomes a free port */
	if (pick_port((struct sockaddr *)&ss))
		return -1;
	if (!cm_addr_is_any(addr)) {
		rid->verbs = cm_verbs();
		if (!rid->verbs)
			return -1;
	}
	memcpy(&rid->route.addr.src_storage, &ss, sizeof(ss));
	id->explicit_port = addr_port(addr) != 0;
	id->bound = true;
	id->state = CM_BOUND;
	return 0;
}

/* The kernel's route toward dst (from src if not NULL) over rtnetlink
 * (uiw_nl_route_get): 0 and *rt for a unicast or local destination, else
 * -errno as the kernel's route lookup gives it (ENETUNREACH: no route;
 * EHOSTUNREACH, EACCES, EINVAL: unreachable, prohibit, blackhole routes). */
static int route_lookup(const struct sockaddr *dst, const struct sockaddr *src,
			struct uiw_nl_route *rt)
{
	int r = uiw_nl_route_get(dst, src, rt);

	if (r)
		return r;
	switch (rt->type) {
	case RTN_UNICAST:
	case RTN_LOCAL:
		return 0;
	case RTN_UNREACHABLE:
		return -EHOSTUNREACH;
	case RTN_PROHIBIT:
		return -EACCES;
	case RTN_BLACKHOLE:
		return -EINVAL;
	default:
		return -ENETUNREACH;
	}
}

/* rdma_resolve_addr(3): resolves dst_addr with the kernel's route toward
 * it (rtnetlink RTM_GETROUTE, as `ip route get`; for an IPv6 link-local
 * destination its sin6_scope_id picks the interface) and, unless the id
 * is bound to a specific address or src_addr is given, takes the source
 * address that route prefers (RTA_PREFSRC; an IPv6 link-local source
 * gets the route's interface as scope id). Queues ADDR_RESOLVED, or
 * ADDR_ERROR with status -errno (-ENETUNREACH no route, -EHOSTUNREACH /
 * -EACCES / -EINVAL unreachable / prohibit / blackhole route, as
 * librdmacm on the kernel rdma_cm reports them); synchronous ids wait for
 * it. No neighbour (ARP/ND) resolution: a route to a host that does not
 * answer resolves, and rdma_connect then reports UNREACHABLE. Sets
 * id->verbs. 0, or -1 with errno EINVAL, EAFNOSUPPORT, ENODEV, ENOMEM.
 * timeout_ms is unused (resolution is immediate). */
CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *rid, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_nl_route rt;
	bool any_src;
	int status;

	(void)timeout_ms;
	if (!rid || !dst_addr) {
		errno = EINVAL;
		return -1;
	}
	if (!cm_addr_len(dst_addr) ||
	    (src_addr && cm_addr_len(src_addr) && src_addr->sa_family != dst_addr->sa_family)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (id->state != CM_IDLE && id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED) {
		errno = EINVAL;
		return -1;
	}
	if (src_addr && cm_addr_len(src_addr) && !id->bound) {
		if (rdma_bind_addr(rid, src_addr))
			return -1;
	}
	addr_copy(&rid->route.addr.dst_storage, dst_addr);
	any_src = !id->bound || cm_addr_is_any(&rid->route.addr.src_addr);
	status = route_lookup(dst_addr, any_src ? NULL : &rid->route.addr.src_addr, &rt);
	if (!status && any_src) {
		in_port_t port = id->bound ? addr_port(&rid->route.addr.src_addr) : 0;
		struct sockaddr_storage src;

		memcpy(&src, &rt.src, sizeof(src));
		if (src.ss_family != dst_addr->sa_family) {
			status = -EADDRNOTAVAIL; /* no source address on that route */
		} else {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&src;

			if (src.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
				s6->sin6_scope_id = (uint32_t)rt.ifindex;
			addr_set_port((struct sockaddr *)&src, port);
			memcpy(&rid->route.addr.src_storage, &src, sizeof(src));
		}
	}
	if (!status) {
		rid->verbs = cm_verbs();
		if (!rid->verbs)
			status = -ENODEV;
	}
	if (!status)
		id->state = CM_ADDR_RESOLVED;
	if (post_simple(id, status ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED,
			status))
		return -1;
	if (id->sync)
		return sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED);
	return 0;
}

/* rdma_resolve_route(3): iWARP has no path records; checks that the route
 * toward the resolved destination still exists (rtnetlink, as in
 * rdma_resolve_addr) and queues ROUTE_RESOLVED, or ROUTE_ERROR with status
 * -errno (synchronous ids wait for it). 0, or -1 with errno EINVAL
 * (address not resolved). */
CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *rid, int timeout_ms)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_nl_route rt;
	int status;

	(void)timeout_ms;
	if (!rid || (id->state != CM_ADDR_RESOLVED && id->state != CM_ROUTE_RESOLVED)) {
		errno = EINVAL;
		return -1;
	}
	status = route_lookup(
	    &rid->route.addr.dst_addr,
	    cm_addr_is_any(&rid->route.addr.src_addr) ? NULL : &rid->route.addr.src_addr, &rt);
	if (!status)
		id->state = CM_ROUTE_RESOLVED;
	rid->route.num_paths = 0;
	rid->route.path_rec = NULL;
	if (post_simple(id, status ? RDMA_CM_EVENT_ROUTE_ERROR : RDMA_CM_EVENT_ROUTE_RESOLVED,
			status))
		return -1;
	if (id->sync)
		return sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return 0;
}

/* rdma_get_src_port(3) / rdma_get_dst_port(3): the bound / peer port in
 * network byte order, 0 if none. */
CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? addr_port(&id->route.addr.src_addr) : 0;
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? addr_port(&id->route.addr.dst_addr) : 0;
}

/* rdma_set_option(3): level RDMA_OPTION_ID with TOS, ACK_TIMEOUT,
 * REUSEADDR or AFONLY is accepted and ignored (0; the TCP listener always
 * uses SO_REUSEADDR). Anything else: -1 with errno ENOSYS; NULL id or
 * optval: EINVAL. */
CM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			      size_t optlen)
{
	(void)optlen;
	if (!id || !optval) {
		errno = EINVAL;
		return -1;
	}
	if (level == RDMA_OPTION_ID &&
	    (optname == RDMA_OPTION_ID_TOS || optname == RDMA_OPTION_ID_ACK_TIMEOUT ||
	     optname == RDMA_OPTION_ID_REUSEADDR || optname == RDMA_OPTION_ID_AFONLY))
		return 0;
	errno = ENOSYS;
	return -1;
}

/* ------------------------------------------------------------------ QP */

static void cm_qp_event(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx);

static int create_cqs(struct cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	struct rdma_cm_id *r = &id->id;

	if (recv_size) {
		r->recv_cq_channel = ibv_create_comp_channel(r->verbs);
		if (!r->recv_cq_channel)
			return -1;
		r->recv_cq = ibv_create_cq(r->verbs, recv_size, r, r->recv_cq_channel, 0);
		if (!r->recv_cq)
			return -1;
		id->own_recv_cq = true;
	}
	if (send_size) {
		r->send_cq_channel = ibv_create_comp_channel(r->verbs);
		if (!r->send_cq_channel)
			return -1;
		r->send_cq = ibv_create_cq(r->verbs, send_size, r, r->send_cq_channel, 0);
		if (!r->send_cq)
			return -1;
		id->own_send_cq = true;
	}
	return 0;
}

static void destroy_cqs(struct cm_id *id)
{
	struct rdma_cm_id *r = &id->id;

	if (id->own_recv_cq) {
		if (r->recv_cq)
			ibv_destroy_cq(r->recv_cq);
		if (r->recv_cq_channel)
			ibv_destroy_comp_channel(r->recv_cq_channel);
		r->recv_cq = NULL;
		r->recv_cq_channel = NULL;
		id->own_recv_cq = false;
	}
	if (id->own_send_cq) {
		if (r->send_cq)
			ibv_destroy_cq(r->send_cq);
		if (r->send_cq_channel)
			ibv_destroy_comp_channel(r->send_cq_channel);
		r->send_cq = NULL;
		r->send_cq_channel = NULL;
		id->own_send_cq = false;
	}
}

/* Routes the engine connection events of q to id (the cm_event hook). */
static void hook_qp(struct shim_qp *q, struct cm_id *id)
{
	q->cm_ctx = (void *)(uintptr_t)id->handle;
	__atomic_store_n(&q->cm_event, cm_qp_event, __ATOMIC_RELEASE);
}

/* Sets id->conn_qp, the QP a connection of id uses: id->qp, or for an id
 * whose QP the application created itself (rping -q) the QP of id->verbs
 * numbered conn_param->qp_num, whose connection events are then hooked
 * too. NULL with errno EINVAL if there is none. */
static struct ibv_qp *find_conn_qp(struct cm_id *id, const struct rdma_conn_param *p)
{
	struct shim_qp *sq;

	if (id->id.qp) {
		id->conn_qp = id->id.qp;
		return id->conn_qp;
	}
	sq = p && id->id.verbs ? shim_qp_by_num(id->id.verbs, p->qp_num) : NULL;
	if (!sq) {
		errno = EINVAL;
		return NULL;
	}
	hook_qp(sq, id);
	id->conn_qp = &sq->ibv;
	return id->conn_qp;
}

/* rdma_create_qp_ex(3): creates an RC QP for id with our ibv_create_qp
 * (pd from attr->pd if IBV_QP_INIT_ATTR_PD is set, else id->pd, else this
 * library's PD), creates send/recv CQs with completion channels when attr
 * has none (cq_context = id, as rdma_verbs.h expects), moves the QP to
 * INIT, hooks its connection events, sets id->qp and writes the granted
 * capacities back into attr->cap. 0, or -1 with errno EINVAL (PD of
 * another context, no device), EOPNOTSUPP (not RC), errno of libibverbs. */
CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *rid, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *id = cm_id_of(rid);
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct ibv_pd *pd;
	struct ibv_qp *qp;
	int e;

	if (!rid || !attr || rid->qp) {
		errno = EINVAL;
		return -1;
	}
	if (attr->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return -1;
	}
	pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL;
	if (!pd)
		pd = rid->pd;
	if (pd && !rid->verbs)
		rid->verbs = pd->context;
	if (!rid->verbs || (pd && pd->context != rid->verbs)) {
		errno = EINVAL;
		return -1;
	}
	if (!pd)
		pd = cm_pd();
	if (!pd)
		return -1;
	if (create_cqs(id, attr->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq ? 0 : attr->cap.max_recv_wr))
		goto err_cq;
	if (!attr->send_cq)
		attr->send_cq = rid->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = rid->recv_cq;

	memset(&ia, 0, sizeof(ia));
	ia.qp_context = attr->qp_context;
	ia.send_cq = attr->send_cq;
	ia.recv_cq = attr->recv_cq;
	ia.srq = attr->srq;
	ia.cap = attr->cap;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = attr->sq_sig_all;
	if (attr->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) {
		/* send_ops_flags (the ibv_wr_* API), create flags, or
		 * something iWARP lacks: let ibv_create_qp_ex decide */
		struct ibv_qp_init_attr_ex ex = *attr;

		ex.comp_mask |= IBV_QP_INIT_ATTR_PD;
		ex.pd = pd;
		ex.qp_type = IBV_QPT_RC;
		qp = ibv_create_qp_ex(pd->context, &ex);
		if (qp)
			ia.cap = ex.cap;
	} else {
		qp = ibv_create_qp(pd, &ia);
	}
	if (!qp)
		goto err_cq;
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	qa.qp_access_flags =
	    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)) {
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;

		/* the QP may already be in INIT (the engine creates it so) */
		if (ibv_query_qp(qp, &q, IBV_QP_STATE, &qi) || q.qp_state != IBV_QPS_INIT) {
			e = errno;
			ibv_destroy_qp(qp);
			errno = e;
			goto err_cq;
		}
	}
	attr->cap = ia.cap;
	attr->pd = pd;
	if (!rid->pd)
		rid->pd = pd; /* rdma_verbs.h's rdma_reg_msgs uses id->pd */
	hook_qp(shim_qp(qp), id);
	rid->qp = qp;
	rid->qp_type = IBV_QPT_RC;
	return 0;

err_cq:
	e = errno ? errno : ENOMEM;
	destroy_cqs(id);
	errno = e;
	return -1;
}

/* rdma_create_qp(3): rdma_create_qp_ex with attr's fields and pd (NULL:
 * id->pd or this library's PD); attr->cap and the CQs used are written
 * back. Errors as rdma_create_qp_ex. */
CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	if (!qp_init_attr) {
		errno = EINVAL;
		return -1;
	}
	memset(&ex, 0, sizeof(ex));
	ex.qp_context = qp_init_attr->qp_context;
	ex.send_cq = qp_init_attr->send_cq;
	ex.recv_cq = qp_init_attr->recv_cq;
	ex.srq = qp_init_attr->srq;
	ex.cap = qp_init_attr->cap;
	ex.qp_type = qp_init_attr->qp_type;
	ex.sq_sig_all = qp_init_attr->sq_sig_all;
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	ret = rdma_create_qp_ex(id, &ex);
	if (!ret) {
		qp_init_attr->cap = ex.cap;
		qp_init_attr->send_cq = ex.send_cq;
		qp_init_attr->recv_cq = ex.recv_cq;
	}
	return ret;
}

static void disconnected_locked(struct cm_id *id);

/* rdma_destroy_qp(3): destroys id->qp (and the CQs this library created
 * for it) and clears id->qp. Destroying the QP of a connected id aborts
 * its stream; the id then gets its DISCONNECTED (once) if the close was
 * not reported yet, as with a kernel iWARP device, where the iw_cm id
 * outlives its QP and reports the close (cmtime disconnects, destroys the
 * QP at once, then waits for DISCONNECTED). */
CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *rid)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid)
		return;
	if (rid->qp) {
		bool conn_qp = id->conn_qp == rid->qp;

		if (conn_qp)
			id->conn_qp = NULL;
		/* joins the engine threads: no QP event is in flight after */
		ibv_destroy_qp(rid->qp);
		rid->qp = NULL;
		pthread_mutex_lock(&cm_lock);
		if (conn_qp && id->state == CM_CONNECTED && !id->destroying)
			disconnected_locked(id);
		pthread_mutex_unlock(&cm_lock);
	}
	destroy_cqs(id);
}

/* rdma_init_qp_attr(3): the attributes for moving a QP to
 * qp_attr->qp_state (INIT: state + access flags LOCAL_WRITE|REMOTE_WRITE|
 * REMOTE_READ + port; RTR / RTS: state only, the iw_cm rule). 0, or -1
 * with errno EINVAL. */
CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask) {
		errno = EINVAL;
		return -1;
	}
	switch (qp_attr->qp_state) {
	case IBV_QPS_INIT:
		qp_attr->qp_access_flags =
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		qp_attr->port_num = 1;
		qp_attr->pkey_index = 0;
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
		return 0;
	case IBV_QPS_RTR:
	case IBV_QPS_RTS:
		*qp_attr_mask = IBV_QP_STATE;
		return 0;
	default:
		errno = EINVAL;
		return -1;
	}
}

/* ---------------------------------------------------- QP events (hook) */

/* Queues DISCONNECTED once. Called with cm_lock held. */
static void disconnected_locked(struct cm_id *id)
{
	struct cm_event *e;

	if (id->disc_queued)
		return;
	id->disc_queued = true;
	id->state = CM_DISCONNECTED;
	pthread_cond_broadcast(&cm_cond);
	e = event_new(id, RDMA_CM_EVENT_DISCONNECTED, 0);
	if (e)
		queue_event_locked(e);
}

/* The shim_qp cm_event hook: the stream of a QP created by rdma_create_qp
 * closed or failed (engine thread, or the thread destroying the QP). */
static void cm_qp_event(struct shim_qp *qp, enum uiw_qp_event ev, void *cm_ctx)
{
	struct cm_id *id;

	(void)qp;
	if (ev == UIW_QP_EV_ESTABLISHED)
		return;
	pthread_mutex_lock(&cm_lock);
	id = id_lookup_locked((uint64_t)(uintptr_t)cm_ctx);
	if (id && !id->destroying) {
		if (id->state == CM_CONNECTED)
			disconnected_locked(id);
		else if (id->state == CM_CONNECTING || id->state == CM_ACCEPTING)
			id->disc_pending = true;
	}
	pthread_mutex_unlock(&cm_lock);
}

/* Worker end: queues ESTABLISHED (e) and a DISCONNECTED that came early. */
static void established(struct cm_id *id, struct cm_event *e)
{
	pthread_mutex_lock(&cm_lock);
	id->state = CM_CONNECTED;
	if (e)
		queue_event_locked(e);
	if (id->disc_pending)
		disconnected_locked(id);
	pthread_mutex_unlock(&cm_lock);
}

/* Runs a connect or accept in a worker thread (the id's state is already
 * CONNECTING / ACCEPTING); on failure puts the state back to prev. A
 * synchronous id waits for ESTABLISHED. 0, or -1 with errno (pthread's,
 * or the connection's error for a synchronous id). */
static int start_worker(struct cm_id *id, void *(*fn)(void *), enum cm_state prev)
{
	int e = pthread_create(&id->worker, NULL, fn, id);

	if (e) {
		pthread_mutex_lock(&cm_lock);
		id->state = prev;
		pthread_mutex_unlock(&cm_lock);
		errno = e;
		return -1;
	}
	id->worker_started = true;
	if (id->sync) {
		int ret = sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);

		join_worker(id);
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
		addr_set_port((struct sockaddr *)&src, 0);
	if (!info)
		ret = -ENOMEM;
	else
		ret = uiw_connect(shim_qp(qp)->qp, (struct sockaddr *)&src,
				  &id->id.route.addr.dst_addr, &id->param, -1, info, &rejected);
	if (!ret) {
		e = event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (e) {
			event_set_pdata(e, info->private_data, info->private_data_len);
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
		e = event_new(id, t, ret);
		if (e && rejected && info)
			event_set_pdata(e, info->private_data, info->private_data_len);
		pthread_mutex_lock(&cm_lock);
		id->state = CM_ROUTE_RESOLVED; /* the QP is left unconnected and reusable */
		id->disc_pending = false;
		if (e)
			queue_event_locked(e);
		pthread_mutex_unlock(&cm_lock);
	}
	free(info);
	return NULL;
}

/* Copies conn_param (NULL: device defaults) into id->param. responder /
 * initiator values above the device limits (RDMA_MAX_RESP_RES,
 * RDMA_MAX_INIT_DEPTH included) are lowered to them. -1 EINVAL if the
 * private data is longer than UIW_MAX_PRIVATE_DATA. */
static int set_param(struct cm_id *id, const struct rdma_conn_param *p)
{
	uint8_t ird = dev_rd_atom(false), ord = dev_rd_atom(true);

	memset(&id->param, 0, sizeof(id->param));
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
	if (!find_conn_qp(id, conn_param))
		return -1;
	join_worker(id);
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
		nid = id_new(ch, lid->id.context, lid->id.ps);
		e = nid ? event_new(nid, RDMA_CM_EVENT_CONNECT_REQUEST, 0) : NULL;
		if (!nid || !e || !(nid->id.verbs = cm_verbs())) {
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
		nid->bound = true;
		memcpy(&nid->id.route.addr.src_storage, &info.local, sizeof(info.local));
		memcpy(&nid->id.route.addr.dst_storage, &info.peer, sizeof(info.peer));
		event_set_pdata(e, info.private_data, info.private_data_len);
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
			char b = 0;

			e->next = NULL;
			if (c->tail)
				c->tail->next = e;
			else
				c->head = e;
			c->tail = e;
			while (send(c->wfd, &b, 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
				;
		}
		pthread_mutex_unlock(&cm_lock);
	}
	uiw_listener_close(lid->listener);
	return NULL;
}

/* rdma_listen(3): starts listening on the bound address (TCP listener
 * with SO_REUSEADDR, so a port can be re-bound right after the previous
 * listener is destroyed) and a thread that reports each MPA request as
 * CONNECT_REQUEST with a new id (listen_id, verbs, addresses and
 * param.conn set) on this id's channel. backlog <= 0 means 1024.
 * 0, or -1 with errno EINVAL (not bound), EADDRINUSE, EADDRNOTAVAIL,
 * errno of socket calls. */
CM_EXPORT int rdma_listen(struct rdma_cm_id *rid, int backlog)
{
	struct cm_id *id = cm_id_of(rid);
	struct sockaddr_storage bound;
	int ret;

	if (!rid || id->state != CM_BOUND) {
		errno = EINVAL;
		return -1;
	}
	ret = uiw_listen(&rid->route.addr.src_addr, backlog > 0 ? backlog : 1024, &id->listener);
	if (ret) {
		id->listener = NULL;
		errno = -ret;
		return -1;
	}
	uiw_listener_addr(id->listener, &bound);
	if (cm_addr_len((struct sockaddr *)&bound))
		memcpy(&rid->route.addr.src_storage, &bound, sizeof(bound));
	ret = pthread_create(&id->listen_thread, NULL, listen_worker, id);
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
 * listener's rdma_create_ep QP attributes if it had some. 0, or -1 with
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
	nid->pd = listen->pd;
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

static void *accept_worker(void *arg)
{
	struct cm_id *id = arg;
	struct uiw_conn_req *req;
	struct cm_event *e;
	struct ibv_qp *qp = id->conn_qp; /* see connect_worker */
	uint32_t qpn = qp->qp_num;
	int ret;

	pthread_mutex_lock(&cm_lock);
	req = id->req;
	id->req = NULL;
	pthread_mutex_unlock(&cm_lock);
	ret = uiw_accept(req, shim_qp(qp)->qp, &id->param, -1);
	if (!ret) {
		e = event_new(id, RDMA_CM_EVENT_ESTABLISHED, 0);
		if (e) {
			e->ev.param.conn.responder_resources = id->param.responder_resources;
			e->ev.param.conn.initiator_depth = id->param.initiator_depth;
			e->ev.param.conn.qp_num = qpn;
		}
		established(id, e);
	} else {
		e = event_new(id, RDMA_CM_EVENT_CONNECT_ERROR, ret);
		pthread_mutex_lock(&cm_lock);
		id->state = CM_ERROR;
		id->disc_pending = false;
		if (e)
			queue_event_locked(e);
		pthread_mutex_unlock(&cm_lock);
	}
	return NULL;
}

/* rdma_accept(3): accepts the connection request of a new id (from
 * CONNECT_REQUEST) on id->qp with conn_param's private data and IRD/ORD
 * (lowered to the device limits; the engine reconciles them with the
 * peer's, RFC 6581): a worker
 * sends the MPA Reply and waits for the peer's RTR, then ESTABLISHED, or
 * CONNECT_ERROR (status -errno), is queued on the id's channel. A
 * synchronous id blocks until then. Without id->qp, conn_param->qp_num
 * names the application's QP on id->verbs. 0, or -1 with errno EINVAL (not
 * a pending request, no such QP, private data too long), EAGAIN. */
CM_EXPORT int rdma_accept(struct rdma_cm_id *rid, struct rdma_conn_param *conn_param)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid || id->state != CM_CONNECT_REQ || !id->req) {
		errno = EINVAL;
		return -1;
	}
	if (!find_conn_qp(id, conn_param))
		return -1;
	if (set_param(id, conn_param))
		return -1;
	pthread_mutex_lock(&cm_lock);
	id->state = CM_ACCEPTING;
	pthread_mutex_unlock(&cm_lock);
	return start_worker(id, accept_worker, CM_CONNECT_REQ);
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

/* -------------------------------------------------------- endpoints */

/* rdma_create_ep(3): a synchronous id for res (rdma_getaddrinfo). Passive
 * (RAI_PASSIVE): bound to res->ai_src_addr; qp_init_attr is kept for the
 * QPs rdma_get_request creates. Active: address and route resolved
 * (blocking) and, with qp_init_attr, a QP created (pd NULL: the library
 * PD; CQs with channels when none given). qp_init_attr->qp_type is set
 * from res->ai_qp_type (RC). 0, or -1 with errno of the
 * steps (EINVAL for NULL arguments). */
CM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *rid;
	int e;

	if (!id || !res) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_create_id(NULL, &rid, NULL,
			   res->ai_port_space ? (enum rdma_port_space)res->ai_port_space
					      : RDMA_PS_TCP))
		return -1;
	rid->pd = pd;
	if (pd)
		rid->verbs = pd->context;
	if (qp_init_attr) /* rdma_server / rdma_client leave it 0 */
		qp_init_attr->qp_type = res->ai_qp_type ? res->ai_qp_type : IBV_QPT_RC;
	if (res->ai_flags & RAI_PASSIVE) {
		if (!res->ai_src_addr || rdma_bind_addr(rid, res->ai_src_addr))
			goto err;
		if (qp_init_attr) {
			struct cm_id *p = cm_id_of(rid);

			p->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!p->ep_qp_attr) {
				errno = ENOMEM;
				goto err;
			}
			*p->ep_qp_attr = *qp_init_attr;
		}
	} else {
		if (!res->ai_dst_addr) {
			errno = EINVAL;
			goto err;
		}
		if (rdma_resolve_addr(rid, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(rid, 2000))
			goto err;
		if (qp_init_attr && rdma_create_qp(rid, pd, qp_init_attr))
			goto err;
	}
	*id = rid;
	return 0;
err:
	e = errno;
	rdma_destroy_id(rid);
	errno = e;
	return -1;
}

/* rdma_destroy_ep(3): destroys id's QP (and library-made CQs) and the id. */
CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* ------------------------------------------- RDMACM_1.4 (rdma-core 60) */

/* Not in rdma-core 44's <rdma/rdma_cma.h>: declared here as rdma-core 60
 * declares them. */
CM_EXPORT int rdma_write_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type event, int status,
				  uint64_t arg);
CM_EXPORT int rdma_resolve_addrinfo(struct rdma_cm_id *id, const char *node, const char *service,
				    const struct rdma_addrinfo *hints);
CM_EXPORT int rdma_query_addrinfo(struct rdma_cm_id *id, struct rdma_addrinfo **info);

/* rdma_write_cm_event(3) (rdma-core 60): queues a user event on id's
 * channel: event RDMA_CM_EVENT_USER (18) with status and arg in
 * event->param.arg (a uint64_t overlaying param.conn in rdma-core 60's
 * struct rdma_cm_event), e.g. to wake a thread blocked in
 * rdma_get_cm_event. 0, or -1 with errno EINVAL (NULL id, another event
 * type), ENOMEM. */
CM_EXPORT int rdma_write_cm_event(struct rdma_cm_id *rid, enum rdma_cm_event_type event, int status,
				  uint64_t arg)
{
	struct cm_event *e;

	if (!rid || event != CM_EVENT_USER) {
		errno = EINVAL;
		return -1;
	}
	e = event_new(cm_id_of(rid), event, status);
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(&e->ev.param, &arg, sizeof(arg));
	queue_event(e);
	return 0;
}

/* rdma_resolve_addrinfo(3) (rdma-core 60): rdma_getaddrinfo(node,
 * service, hints) for id, reported as RDMA_CM_EVENT_ADDRINFO_RESOLVED
 * (16) on its channel (a synchronous id waits for it); the result is
 * taken with rdma_query_addrinfo. DNS / numeric resolution only (RAI_DNS
 * or neither flag): iWARP has no IB SA, so RAI_SA is EOPNOTSUPP. 0, or -1
 * with errno EINVAL (NULL id), EBUSY (a result not yet queried),
 * EOPNOTSUPP (RAI_SA, or both RAI_SA and RAI_DNS), or rdma_getaddrinfo's
 * errno (the resolution failed: no event, as in rdma-core, which also
 * resolves DNS names synchronously). */
CM_EXPORT int rdma_resolve_addrinfo(struct rdma_cm_id *rid, const char *node, const char *service,
				    const struct rdma_addrinfo *hints)
{
	struct cm_id *id = cm_id_of(rid);
	struct rdma_addrinfo *res = NULL;
	struct cm_event *e;
	int ret;

	if (!rid) {
		errno = EINVAL;
		return -1;
	}
	if (hints && (hints->ai_flags & CM_RAI_SA)) {
		errno = EOPNOTSUPP;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	ret = id->resolving_ai;
	if (!ret)
		id->resolving_ai = true;
	pthread_mutex_unlock(&cm_lock);
	if (ret) {
		errno = EBUSY;
		return -1;
	}
	e = event_new(id, CM_EVENT_ADDRINFO_RESOLVED, 0);
	ret = e ? rdma_getaddrinfo(node, service, hints, &res) : -1;
	if (ret) {
		int err = e ? errno : ENOMEM;

		free(e);
		pthread_mutex_lock(&cm_lock);
		id->resolving_ai = false;
		pthread_mutex_unlock(&cm_lock);
		errno = err ? err : EADDRNOTAVAIL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	id->resolved_ai = res;
	queue_event_locked(e);
	pthread_mutex_unlock(&cm_lock);
	if (id->sync)
		return sync_wait(id, CM_EVENT_ADDRINFO_RESOLVED);
	return 0;
}

/* rdma_query_addrinfo(3) (rdma-core 60): hands the result of the last
 * rdma_resolve_addrinfo of id to the caller (free with rdma_freeaddrinfo)
 * and ends that resolution. 0, or -1 with errno EINVAL (NULL argument),
 * ENOENT (no result). */
CM_EXPORT int rdma_query_addrinfo(struct rdma_cm_id *rid, struct rdma_addrinfo **info)
{
	struct cm_id *id = cm_id_of(rid);

	if (!rid || !info) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	*info = id->resolving_ai ? id->resolved_ai : NULL;
	if (*info) {
		id->resolved_ai = NULL;
		id->resolving_ai = false;
	}
	pthread_mutex_unlock(&cm_lock);
	if (!*info) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------- devices */

/* rdma_get_devices(3): a NULL-terminated array of the device contexts
 * rdma_cm uses (ours: one), *num_devices set if not NULL. NULL with errno
 * ENODEV / ENOMEM. Free with rdma_free_devices. */
CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context *ctx = cm_verbs();
	struct ibv_context **list;

	if (num_devices)
		*num_devices = 0;
	list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = ctx;
	if (num_devices && ctx)
		*num_devices = 1;
	return list;
}

/* rdma_free_devices(3): frees the array (not the shared contexts). */
CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
