/* Internal to librdmacm.so.1 (ours): the private objects behind the public
 * struct rdma_event_channel / rdma_cm_id / rdma_cm_event of
 * <rdma/rdma_cma.h>, and the helpers shared between the files of this
 * directory. Not installed.
 *
 * Locking: one library mutex (cm_lock) protects every channel queue, every
 * id's state and the list of live ids. It is never held while calling into
 * the engine (rdmap.h) or libibverbs, because those may call back into us
 * (the shim_qp cm_event hook) on the same thread.
 */
#ifndef UIWARP_RDMACM_CM_PRIV_H
#define UIWARP_RDMACM_CM_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>

#include "rdmap/rdmap.h"

/* Exported with default visibility; everything else is hidden by
 * -fvisibility=hidden and the version script. */
#define CM_EXPORT __attribute__((visibility("default")))

/* One queued or delivered event; the public struct comes first so an
 * rdma_cm_event * handed to the application converts back. */
struct cm_event {
	struct rdma_cm_event ev;
	struct cm_id *owner; /* the id whose delivered/acked counters this event counts on */
	struct cm_event *next;
	uint8_t pdata[UIW_MAX_PRIVATE_DATA]; /* param.conn.private_data points here */
};

/* An event channel: a socketpair whose readable end is ch.fd. Every queued
 * event has one byte in the pair, so poll(ch.fd) reports POLLIN exactly
 * while events are queued; the byte is read by rdma_get_cm_event.
 *
 * Lifetime (under cm_lock): refs counts the application's handle (until
 * rdma_destroy_event_channel), each id whose id.channel it is, and each
 * thread inside rdma_get_cm_event. Destroying the channel marks it dead
 * (events queued to it later are dropped, a reader inside returns to no
 * one: it blocks, as on the kernel rdma_cm); the memory and ch.fd go with
 * the last reference, so no thread ever reads a freed channel or a
 * descriptor number that was closed and reused meanwhile. */
struct cm_channel {
	struct rdma_event_channel ch;
	int wfd;
	struct cm_event *head, *tail;
	unsigned refs;
	bool dead;     /* rdma_destroy_event_channel (or its id's destroy) was called */
	bool internal; /* created for a synchronous id; destroyed with that id */
	bool nonblock; /* its fd was O_NONBLOCK when it was destroyed */
};

enum cm_state {
	CM_IDLE,
	CM_BOUND,
	CM_ADDR_RESOLVED,
	CM_ROUTE_RESOLVED,
	CM_LISTEN,
	CM_CONNECT_REQ, /* new passive id: request received, not yet accepted */
	CM_CONNECTING,	/* active: connect worker running */
	CM_ACCEPTING,	/* passive: accept worker running */
	CM_CONNECTED,
	CM_DISCONNECTED,
	CM_ERROR,
};

struct cm_id {
	struct rdma_cm_id id;
	uint64_t handle; /* cm_ctx of the shim_qp hook (looked up, never dereferenced) */
	struct cm_id *next_live;
	enum cm_state state;
	bool sync;	    /* created with a NULL channel */
	bool destroying;    /* rdma_destroy_id in progress: drop new events */
	bool explicit_port; /* rdma_bind_addr gave a non-zero port */
	bool bound;	    /* src address set by bind or resolve */
	bool disc_pending;  /* engine said DISCONNECTED before ESTABLISHED was queued */
	bool disc_queued;   /* DISCONNECTED already queued: exactly once */
	bool own_send_cq, own_recv_cq;
	int afonly; /* RDMA_OPTION_ID_AFONLY as set (0/1), -1: not set */
	int tos; /* RDMA_OPTION_ID_TOS as set (0..255), -1: not set; a listener's is its requests'
		  */
	bool v6only_dflt;	   /* the namespace's net.ipv6.bindv6only, seen at bind */
	unsigned delivered, acked; /* events handed to the application / acknowledged */

	/* listener */
	struct uiw_listener *listener;
	pthread_t listen_thread;
	bool listen_thread_started;
	bool listen_stop;		     /* under cm_lock: the listener thread exits */
	struct ibv_qp_init_attr *ep_qp_attr; /* rdma_create_ep(passive): QP made by get_request */

	/* passive new id */
	struct uiw_conn_req *req;
	struct cm_id *listen_parent;

	/* rdma_resolve_addrinfo (RDMACM_1.4): the result until
	 * rdma_query_addrinfo takes it */
	bool resolving_ai;
	struct rdma_addrinfo *resolved_ai;

	/* connect / accept worker */
	struct ibv_qp *conn_qp; /* id->qp, or the application's QP (conn_param->qp_num) */
	pthread_t worker;
	bool worker_started;
	struct uiw_conn_param param;
	uint8_t param_pdata[UIW_MAX_PRIVATE_DATA];
};

/* Event types added after rdma-core 44 (RDMACM_1.4, rdma-core 60's
 * <rdma/rdma_cma.h>; the system headers here are 44's). */
#define CM_EVENT_ADDRINFO_RESOLVED ((enum rdma_cm_event_type)(RDMA_CM_EVENT_TIMEWAIT_EXIT + 1))
#define CM_EVENT_ADDRINFO_ERROR ((enum rdma_cm_event_type)(RDMA_CM_EVENT_TIMEWAIT_EXIT + 2))
#define CM_EVENT_USER ((enum rdma_cm_event_type)(RDMA_CM_EVENT_TIMEWAIT_EXIT + 3))
/* rdma-core 60's RAI_SA / RAI_DNS (rdma_resolve_addrinfo hints) */
#define CM_RAI_SA 0x00000010
#define CM_RAI_DNS 0x00000020

static inline struct cm_id *cm_id_of(struct rdma_cm_id *id)
{
	return (struct cm_id *)id;
}

static inline struct cm_channel *cm_channel_of(struct rdma_event_channel *ch)
{
	return (struct cm_channel *)ch;
}

extern pthread_mutex_t cm_lock;
extern pthread_cond_t cm_cond;

/* The device context this library opens (lazily) on our libibverbs and
 * sets as id->verbs; NULL with errno ENODEV when there is none. */
struct ibv_context *cm_verbs(void);
/* The PD of that context that rdma_create_qp uses for pd == NULL. */
struct ibv_pd *cm_pd(void);
/* Gives rid the device, as librdmacm does when an id gets one (bound to a
 * local address, address resolved, connection request: ucma_get_device):
 * rid->verbs = cm_verbs() and rid->pd = cm_pd(), the device's PD shared by
 * every id (rdma-core's test_rdmacm.py creates its QPs on id->pd). 0, or -1
 * with errno ENODEV / of ibv_alloc_pd. */
int cm_attach_device(struct rdma_cm_id *rid);
/* True if the device's one port is on the loopback interface (GID 0's
 * interface, ibv_query_gid_ex ndev_ifindex: a namespace with only lo), or
 * if that cannot be told; false while it is on an Ethernet interface. */
bool cm_port_on_loopback(void);

/* Registers the fork handlers (id.c; lazily: nothing runs at load time). */
void cm_init(void);
/* Device limit for IRD (initiator false) / ORD (true), as a uint8
 * conn_param value, at least 1 (id.c). */
uint8_t cm_dev_rd_atom(bool initiator);

/* ids (id.c). A new id on channel (NULL: a synchronous id with an internal
 * channel), added to the live list; NULL with errno ENOMEM or the
 * channel's. */
struct cm_id *cm_id_new(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps);
/* The live id whose handle is handle, or NULL. Called with cm_lock held. */
struct cm_id *cm_id_lookup_locked(uint64_t handle);
/* Joins the connect / accept worker of id, if one was started. */
void cm_join_worker(struct cm_id *id);

/* Events (channel.c). */
/* Takes a reference on c for an id whose channel it becomes. cm_lock held. */
void cm_channel_ref_locked(struct cm_channel *c);
/* Drops a reference taken with cm_channel_ref_locked (an id left c); frees
 * c if it was the last one. cm_lock NOT held. */
void cm_channel_unref(struct cm_channel *c);
/* rdma_destroy_event_channel's work: marks c dead, drops its queued events,
 * wakes its readers and drops the creator's reference. cm_lock NOT held. */
void cm_channel_destroy(struct cm_channel *c);
/* uiw_thread_create (util/thread.h): every asynchronous signal blocked in the new thread (its mask
 * is set before it runs): uiwarp's threads never take the application's asynchronous signals. 0 or
 * the error number of pthread_create. */
int cm_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
/* A new event of type / status owned by owner (NULL if out of memory). */
struct cm_event *cm_event_new(struct cm_id *owner, enum rdma_cm_event_type type, int status);
/* Copies private data (at most UIW_MAX_PRIVATE_DATA bytes) into e. */
void cm_event_set_pdata(struct cm_event *e, const void *p, unsigned len);
/* Appends e to its owner's channel (freed instead if the owner is being
 * destroyed); cm_queue_event_locked is called with cm_lock held. */
void cm_queue_event_locked(struct cm_event *e);
void cm_queue_event(struct cm_event *e);
/* Queues an event without private data: 0, or -1 with errno ENOMEM. */
int cm_post_simple(struct cm_id *id, enum rdma_cm_event_type type, int status);
/* Removes the not yet delivered events of id from c. cm_lock held. */
void cm_drop_queued_locked(struct cm_channel *c, struct cm_id *id);
/* The channel's descriptor is readable while events are queued: one token
 * byte stands for "the queue is not empty" (not one byte per event, so a
 * thousand unread events never fill the socket and never block the thread
 * that queues one while it holds cm_lock). cm_channel_append_locked
 * appends e and writes the token when the queue was empty;
 * cm_channel_removed_locked takes the token back once removals emptied the
 * queue. cm_lock held; neither blocks. */
void cm_channel_append_locked(struct cm_channel *c, struct cm_event *e);
void cm_channel_removed_locked(struct cm_channel *c);
/* Synchronous ids: waits for the operation's event (left in id->event):
 * 0 if it is want with status 0, else -1 with errno from the event. */
int cm_sync_wait(struct cm_id *id, enum rdma_cm_event_type want);

/* QP of an id (qp.c). The QP a connection of id uses (id->qp, or the QP
 * of id->verbs numbered p->qp_num, then hooked), also set as
 * id->conn_qp; NULL with errno EINVAL if none. */
struct ibv_qp *cm_find_conn_qp(struct cm_id *id, const struct rdma_conn_param *p);
/* Queues DISCONNECTED for id once. Called with cm_lock held. */
void cm_disconnected_locked(struct cm_id *id);

/* True for INADDR_ANY / in6addr_any. */
bool cm_addr_is_any(const struct sockaddr *sa);
/* sizeof the sockaddr for its family (0 if neither AF_INET nor AF_INET6). */
socklen_t cm_addr_len(const struct sockaddr *sa);
/* Sets the port (network byte order) of an IPv4 / IPv6 address. */
void cm_addr_set_port(struct sockaddr *sa, in_port_t port);

#endif
