/* librdmacm.so.1 (ours): rdma_cm ids (rdma_create_id(3), rdma_destroy_id(3),
 * rdma_migrate_id(3)), the fork handlers and the one device context this
 * library opens on our libibverbs.
 *
 * Semantics follow the man pages rdma_cm(7), rdma_create_id(3),
 * rdma_destroy_id(3), rdma_migrate_id(3) and the kernel rdma_cm.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

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
void cm_init(void)
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

bool cm_port_on_loopback(void)
{
	struct ibv_context *ctx = cm_verbs();
	struct ibv_gid_entry ge;
	struct ifreq ifr;
	bool lo = true;
	int fd;

	if (!ctx || ibv_query_gid_ex(ctx, 1, 0, &ge, 0) || !ge.ndev_ifindex)
		return true;
	memset(&ifr, 0, sizeof(ifr));
	if (!if_indextoname(ge.ndev_ifindex, ifr.ifr_name))
		return true;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && !ioctl(fd, SIOCGIFFLAGS, &ifr))
		lo = (ifr.ifr_flags & IFF_LOOPBACK) != 0;
	if (fd >= 0)
		close(fd);
	return lo;
}

int cm_attach_device(struct rdma_cm_id *rid)
{
	struct ibv_context *ctx = cm_verbs();
	struct ibv_pd *pd = ctx ? cm_pd() : NULL;

	if (!pd)
		return -1;
	rid->verbs = ctx;
	rid->pd = pd;
	return 0;
}

/* Device limit for IRD/ORD, as a uint8 conn_param value (at least 1). */
uint8_t cm_dev_rd_atom(bool initiator)
{
	int v = initiator ? dev_attr.max_qp_init_rd_atom : dev_attr.max_qp_rd_atom;

	if (v <= 0)
		v = 1;
	return v > 255 ? 255 : (uint8_t)v;
}

/* ------------------------------------------------------------------ ids */

struct cm_id *cm_id_new(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps)
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
	id->afonly = -1;
	id->tos = -1;
	pthread_mutex_lock(&cm_lock);
	cm_channel_ref_locked(cm_channel_of(channel));
	id->handle = next_handle++;
	id->next_live = live_ids;
	live_ids = id;
	pthread_mutex_unlock(&cm_lock);
	return id;
}

/* Called with cm_lock held. */
struct cm_id *cm_id_lookup_locked(uint64_t handle)
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
	p = cm_id_new(channel, context, ps);
	if (!p)
		return -1;
	*id = &p->id;
	return 0;
}

void cm_join_worker(struct cm_id *id)
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
			continue;
		}
		c->tail = e;
		pp = &e->next;
	}
	cm_channel_removed_locked(c);
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
	cm_join_worker(id);

	pthread_mutex_lock(&cm_lock);
	id->destroying = true;
	c = cm_channel_of(rid->channel);
	if (c)
		cm_drop_queued_locked(c, id);
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
		cm_channel_destroy(c);
	if (c)
		cm_channel_unref(c); /* this id's reference */
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

		old->tail = NULL;
		while ((e = *pp)) {
			if (e->owner == id) {
				*pp = e->next;
				e->next = NULL;
				*tail = e;
				tail = &e->next;
				continue;
			}
			old->tail = e;
			pp = &e->next;
		}
		cm_channel_removed_locked(old);
	}
	rid->channel = channel;
	cm_channel_ref_locked(nc);
	id->sync = new_sync;
	while (moved) {
		struct cm_event *n = moved->next;

		cm_queue_event_locked(moved);
		moved = n;
	}
	pthread_mutex_unlock(&cm_lock);
	if (old && old != nc && old->internal)
		cm_channel_destroy(old);
	if (old)
		cm_channel_unref(old); /* this id's reference */
	return 0;
}
