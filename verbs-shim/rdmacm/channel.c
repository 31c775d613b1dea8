/* librdmacm.so.1 (ours): event channels and events: rdma_create_event_channel(3),
 * rdma_destroy_event_channel(3), rdma_get_cm_event(3), rdma_ack_cm_event(3),
 * rdma_event_str(3), and the wait of synchronous ids (channel NULL) for
 * the result of their operation.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

#include "cm_priv.h"
#include "util/thread.h"

/* ------------------------------------------------------------- threads */

int cm_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	return uiw_thread_create(t, fn, arg);
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
	c->refs = 1; /* the application's handle, until rdma_destroy_event_channel */
	return &c->ch;
}

/* Destroyed channels whose memory is kept a while: a thread that calls
 * rdma_get_cm_event on a channel another thread has just destroyed (rping's
 * CM thread looping back after the DISCONNECTED event it acked while main
 * destroys the id and the channel and returns) reads the channel's `dead`
 * flag from memory that is still a channel, not freed memory. The oldest is
 * freed when a newer one needs its slot. Guarded by cm_lock. */
enum { CHANNEL_QUARANTINE = 64 };
static struct cm_channel *quarantine[CHANNEL_QUARANTINE];
static unsigned quarantine_next;

/* Closes the channel's descriptors, frees its queued events, and keeps its
 * memory in the quarantine (freeing the oldest one there). Only when
 * nothing refers to it any more (refs == 0). Not a cancellation point: it
 * also runs as the cleanup of a reader being cancelled, where a close(2)
 * acting on the pending cancel would leave the rest undone. */
static void channel_free(struct cm_channel *c)
{
	struct cm_event *e, *n;
	struct cm_channel *old;
	int cs;

	cs = uiw_nocancel_begin();
	for (e = c->head; e; e = n) {
		n = e->next;
		free(e);
	}
	close(c->ch.fd);
	close(c->wfd);
	pthread_mutex_lock(&cm_lock);
	c->head = c->tail = NULL;
	c->ch.fd = c->wfd = -1;
	c->dead = true;
	old = quarantine[quarantine_next];
	quarantine[quarantine_next] = c;
	quarantine_next = (quarantine_next + 1) % CHANNEL_QUARANTINE;
	pthread_mutex_unlock(&cm_lock);
	free(old);
	uiw_nocancel_end(cs);
}

void cm_channel_ref_locked(struct cm_channel *c)
{
	c->refs++;
}

/* Drops one reference; true if it was the last (the caller frees c after
 * unlocking). cm_lock held. */
static bool channel_unref_locked(struct cm_channel *c)
{
	return --c->refs == 0;
}

void cm_channel_unref(struct cm_channel *c)
{
	bool last;

	pthread_mutex_lock(&cm_lock);
	last = channel_unref_locked(c);
	pthread_mutex_unlock(&cm_lock);
	if (last)
		channel_free(c);
}

void cm_channel_destroy(struct cm_channel *c)
{
	struct cm_event *e, *n;
	bool last;

	pthread_mutex_lock(&cm_lock);
	if (c->dead) { /* destroyed twice: nothing more to do */
		pthread_mutex_unlock(&cm_lock);
		return;
	}
	c->dead = true;
	c->nonblock = (fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK) != 0;
	e = c->head;
	c->head = c->tail = NULL;
	/* readers blocked in read() see the end of the stream once the
	 * tokens still in it are read, and find the channel dead */
	shutdown(c->wfd, SHUT_WR);
	last = channel_unref_locked(c);
	pthread_mutex_unlock(&cm_lock);
	for (; e; e = n) {
		n = e->next;
		free(e);
	}
	if (last)
		channel_free(c);
}

/* rdma_destroy_event_channel(3): the channel's fd stops reporting events,
 * its queued events are dropped. The caller destroys every id on it first
 * (rdma_destroy_event_channel(3)); if it does not, those ids' later events
 * are dropped and the memory goes with the last id. A thread still blocked
 * in rdma_get_cm_event on it stays blocked (as with the kernel rdma_cm,
 * whose reader sleeps in the kernel on the file it still holds); it is a
 * cancellation point there. The descriptor is closed, and the memory freed,
 * once no thread is inside rdma_get_cm_event and no id refers to it. */
CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (channel)
		cm_channel_destroy(cm_channel_of(channel));
}

/* Appends e to the channel of its owner and writes its token. Called with
 * cm_lock held. Frees e instead if the owner is being destroyed. */
void cm_queue_event_locked(struct cm_event *e)
{
	struct cm_id *owner = e->owner;
	struct cm_channel *c = cm_channel_of(owner->id.channel);

	if (owner->destroying || !c || c->dead) {
		free(e);
		return;
	}
	cm_channel_append_locked(c, e);
}

/* Writes the token (never blocks: at most a few bytes are ever there). */
static void token_put(struct cm_channel *c)
{
	char b = 0;

	while (send(c->wfd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR)
		;
}

/* See cm_priv.h. */
void cm_channel_append_locked(struct cm_channel *c, struct cm_event *e)
{
	bool was_empty = !c->head;

	e->next = NULL;
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	if (was_empty)
		token_put(c);
}

/* See cm_priv.h. A reader that read the token and waits for cm_lock finds
 * the queue empty and waits again; a stale token is read the same way. */
void cm_channel_removed_locked(struct cm_channel *c)
{
	char b[64];

	if (c->head)
		return;
	while (recv(c->ch.fd, b, sizeof(b), MSG_DONTWAIT) > 0)
		;
}

struct cm_event *cm_event_new(struct cm_id *owner, enum rdma_cm_event_type type, int status)
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

void cm_event_set_pdata(struct cm_event *e, const void *p, unsigned len)
{
	if (len > sizeof(e->pdata))
		len = sizeof(e->pdata);
	if (len) {
		memcpy(e->pdata, p, len);
		e->ev.param.conn.private_data = e->pdata;
	}
	e->ev.param.conn.private_data_len = (uint8_t)len;
}

void cm_queue_event(struct cm_event *e)
{
	pthread_mutex_lock(&cm_lock);
	cm_queue_event_locked(e);
	pthread_mutex_unlock(&cm_lock);
}

/* Queues a simple event (no private data) on id's channel. */
int cm_post_simple(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = cm_event_new(id, type, status);

	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	cm_queue_event(e);
	return 0;
}

/* Removes the queued (not yet delivered) events of id from channel c
 * (and the token if the queue is left empty). Called with cm_lock held. */
void cm_drop_queued_locked(struct cm_channel *c, struct cm_id *id)
{
	struct cm_event **pp = &c->head, *e;

	c->tail = NULL;
	while ((e = *pp)) {
		if (e->owner == id) {
			*pp = e->next;
			free(e);
			continue;
		}
		c->tail = e;
		pp = &e->next;
	}
	cm_channel_removed_locked(c);
}

/* A thread leaves rdma_get_cm_event (also when cancelled in read() or
 * pause()): drops its reference on the channel, freeing it if it was the
 * last. */
static void reader_leave(void *arg)
{
	cm_channel_unref(arg);
}

/* The body of rdma_get_cm_event with a reference on c held: 0 and *event,
 * -1 with errno (EAGAIN, EINTR, the read's), or 1 when the channel was
 * destroyed meanwhile. */
static int get_event(struct cm_channel *c, struct rdma_cm_event **event)
{
	for (;;) {
		char b;
		ssize_t r = read(c->ch.fd, &b, 1);
		struct cm_event *e;
		bool dead;

		if (r < 0)
			return -1;
		pthread_mutex_lock(&cm_lock);
		dead = c->dead;
		e = dead ? NULL : c->head;
		if (e) {
			c->head = e->next;
			if (!c->head)
				c->tail = NULL;
			else
				token_put(c); /* more queued: the next reader's token */
			e->owner->delivered++;
		}
		pthread_mutex_unlock(&cm_lock);
		if (dead || r == 0)
			return 1;
		if (e) {
			*event = &e->ev;
			return 0;
		}
		/* the event of this token was dropped (its id destroyed, or
		 * moved by rdma_migrate_id) after the token was read: wait for
		 * the next one */
	}
}

/* get_event with the caller's reference on c, which is dropped when it
 * returns or is cancelled; errno is the one get_event left. */
static int get_event_held(struct cm_channel *c, struct rdma_cm_event **event)
{
	int ret, err;

	pthread_cleanup_push(reader_leave, c);
	ret = get_event(c, event);
	err = errno;
	pthread_cleanup_pop(1);
	errno = err;
	return ret;
}

/* A call that came after its channel was destroyed: waits 2 s in
 * nanosleep (a cancellation point; longer than a process takes from
 * destroying its channel to exiting; a signal ends it sooner), then
 * EINVAL. The timespec is static: no ASan-poisoned stack slot is left
 * behind when a cancel unwinds this frame. */
static int late_caller(void)
{
	static const struct timespec wait = {2, 0};

	nanosleep(&wait, NULL);
	errno = EINVAL;
	return -1;
}

/* rdma_get_cm_event(3): returns the next event of channel in *event: 0, or
 * -1 with errno EAGAIN (fd set O_NONBLOCK and nothing queued), EINTR,
 * EINVAL (NULL, or a channel already destroyed). Blocks otherwise. The
 * event and its private data stay valid until rdma_ack_cm_event. A caller
 * blocked when the channel is destroyed stays blocked (as with the kernel
 * rdma_cm, where it sleeps in the kernel; rping's CM thread is one, still
 * waiting when main destroys the channel and returns: an error return would
 * make it exit with an error first); it holds no reference on the channel
 * then, and can be cancelled. A caller that comes just after the destroy
 * (rping's CM thread again, looping back from the DISCONNECTED event whose
 * ack let main's rdma_destroy_id return) waits 2 s, a cancellation point,
 * before its EINVAL, so a process on its way out exits first; on a channel
 * whose fd was O_NONBLOCK the EINVAL is immediate. The memory of the last
 * 64 destroyed channels is kept for such callers. */
CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_channel *c;
	int ret;

	if (!channel || !event) {
		errno = EINVAL;
		return -1;
	}
	c = cm_channel_of(channel);
	pthread_mutex_lock(&cm_lock);
	if (c->dead) {
		bool nonblock = c->nonblock;

		pthread_mutex_unlock(&cm_lock);
		if (!nonblock)
			return late_caller();
		errno = EINVAL;
		return -1;
	}
	c->refs++;
	pthread_mutex_unlock(&cm_lock);
	ret = get_event_held(c, event);
	if (ret == 1)
		for (;;)
			pause();
	return ret;
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

/* --------------------------------------------------- synchronous waits */

/* For a synchronous id: acks the previous id->event, waits for the next
 * event (the operation's result) and stores it in id->event. Returns 0 if
 * it is `want` with status 0; otherwise -1 with errno from the status
 * (ECONNREFUSED for REJECTED, EHOSTUNREACH for UNREACHABLE, else EIO or
 * -status). */
int cm_sync_wait(struct cm_id *id, enum rdma_cm_event_type want)
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
