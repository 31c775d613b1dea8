/* Who makes progress on a QP's stream, and the connection's close.
 *
 * No thread belongs to a QP. Progress on a QP is made by whichever thread
 * gets there first (uiw_progress), one thread per direction at a time: the
 * receive side (read and place what arrived, complete it; the close) under
 * qp->rx_lock, the send side (what is queued) under qp->tx_lock:
 *  - a thread posting WRs sends them itself, right away (wq.c);
 *  - a thread polling a CQ drives that CQ's QPs (cq.c), so a busy-polling
 *    application receives its completions with no thread woken up;
 *  - the engine, one thread per process, waits in epoll (edge-triggered) on
 *    the streams of every connected QP and on their deadlines, and makes
 *    progress when nobody else does: the passive side of an RDMA Write or
 *    Read, a completion channel sleeper, a stream that was full.
 * A thread that finds a lock taken leaves its work in qp->pending; the
 * holder takes it on before letting go, and what it cannot finish within
 * its budget goes to the engine, so no work is lost and no thread waits on
 * another one's syscall. Both directions run at once in two threads when
 * there is work for both (a Read Responder sending while it receives).
 *
 * The engine thread blocks every asynchronous signal (a library must not change which
 * thread a process's signals reach) and is started on the first connection
 * (not before: fork-safe until then); it ends when the last QP it served
 * is detached (destroyed), and the next connection starts it again.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rdmap/internal.h"
#include "rdmap/stat.h"
#include "util/thread.h"

/* Bytes one pass of a thread reads from one QP's stream before it lets
 * others have a turn (a poster's job is to post). */
#define BUDGET_POSTER (256u * 1024)
#define BUDGET_POLLER (1024u * 1024)
#define BUDGET_ENGINE (1024u * 1024)
/* A graceful close waits this long for what must still go out. */
#define CLOSE_WAIT_NS (2000ull * 1000 * 1000)
/* After a Terminate went out, read what the peer still sends this long. */
#define TERM_DRAIN_NS (500ull * 1000 * 1000)

/* While a thread polling a CQ looked at the engine's epoll set this
 * recently, the engine thread sleeps (parks) and leaves the streams to
 * the pollers. */
#define PARK_NS (200ull * 1000)
/* A parked engine looks again after PARK_NS, then after twice as long each
 * time it finds the pollers still there, up to PARK_MAX_NS: a steady
 * poller is not preempted by the engine's wake-up every PARK_NS (on a host
 * with few cores each one delays a poll by tens of us: ib_read_lat's 90th
 * percentile), and a poller that stops without arming its CQ leaves the
 * streams unattended at most this long, once. */
#define PARK_MAX_NS (16000ull * 1000)
/* A poller not seen for this long has gone (engine_main's capped wait) */
#define POLLER_GONE_NS (1000ull * 1000 * 1000)

struct uiw_engine {
	pthread_mutex_t lock;
	pthread_cond_t cycled;
	int epfd, evfd;
	pthread_t thread;
	bool started;	 /* the engine thread runs (lock) */
	int nattached;	 /* QPs attached, not yet detached (lock) */
	bool parked;	 /* the engine thread leaves the streams to pollers (lock) */
	uint64_t cycles; /* completed epoll cycles (lock) */
	struct uiw_qp *kick_head, *kick_tail;
	struct uiw_qp **dl; /* QPs with a deadline */
	int ndl, capdl;
	/* pollers doing the engine's work (uiw_engine_proxy): inside
	 * under a read lock, which uiw_engine_detach waits out */
	pthread_rwlock_t proxy_lock;
	_Atomic uint64_t proxy_ns; /* when a poller last did */
	/* the engine thread is in (or about to enter) its epoll wait on the
	 * streams, and whether a poller has woken it out of it since
	 * (uiw_engine_leave) */
	atomic_bool waiting, nudged;
	/* until when (ns, CLOCK_MONOTONIC) the engine thread's epoll wait
	 * lasts at the longest, UINT64_MAX for no end, 0 while it is not
	 * waiting there (written under lock when it takes its timeout) */
	_Atomic uint64_t sleep_until;
	/* a waiting batch's deadline was set without waking the engine: the
	 * wait ends by itself soon enough (deadline_set); an arm still wakes
	 * it (uiw_engine_unpark) (lock) */
	bool dl_unseen;
};

static struct uiw_engine engine = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cycled = PTHREAD_COND_INITIALIZER,
    .epfd = -1,
    .evfd = -1,
};
/* the calling thread is inside uiw_engine_proxy */
static _Thread_local bool in_proxy;
/* the calling thread's last uiw_engine_proxy parked the engine */
static _Thread_local bool tl_proxy_parks;
/* the calling thread is inside a pass it runs as a poller (side) */
static _Thread_local bool tl_poller_pass;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* See rdmap/internal.h. */
uint64_t uiw_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------- close and events */

/* Reports the events a pass left due, in the order verbs users expect. */
static void report_due(struct uiw_qp *qp, unsigned due)
{
	static const enum uiw_qp_event order[] = {UIW_QP_EV_TERMINATE, UIW_QP_EV_FATAL,
						  UIW_QP_EV_DISCONNECTED};
	for (unsigned i = 0; i < sizeof(order) / sizeof(order[0]); i++)
		if (due & (1u << order[i]))
			uiw_qp_report(qp, order[i]);
}

/* Stops the engine and the CQ pollers from looking at the stream (the QP
 * stays registered for uiw_engine_detach's bookkeeping). */
static void quiet(struct uiw_qp *qp)
{
	int fd = uiw_stream_fd(qp->stream);
	pthread_mutex_lock(&engine.lock);
	if (qp->registered) {
		(void)epoll_ctl(engine.epfd, EPOLL_CTL_DEL, fd, NULL);
		qp->registered = false;
	}
	pthread_mutex_unlock(&engine.lock);
}

/* See rdmap/internal.h. */
bool uiw_dead_peer_err(int r)
{
	return r == -ETIMEDOUT || r == -EHOSTUNREACH || r == -ENETUNREACH || r == -EHOSTDOWN ||
	       r == -ENETDOWN;
}

/* See rdmap/internal.h. */
void uiw_qp_stream_timeout_locked(struct uiw_qp *qp)
{
	if (qp->close_reason == UIW_CLOSE_NONE) {
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_TIMEOUT);
		qp->local_fatal = true;
		/* said now, before the flush lets the application see (and
		 * perhaps exit on) its failed WRs */
		uiw_qp_log(
		    qp, UIW_LOG_WARN,
		    "peer timeout: no answer within the dead-peer bound; the QP goes to ERR");
	}
}

/* The connection is over: flush what is left, close our half, report
 * (FATAL first when a send WR failed locally) DISCONNECTED. RFC 5040 §6.
 * rx_lock holder. */
static void finalize(struct uiw_qp *qp)
{
	/* a batch the send side just handed to the stream has its
	 * completions pushed first (they are done: their bytes are TCP's,
	 * and the peer may have answered them before it closed) */
	uiw_rx_wait_tx_window(qp);
	pthread_mutex_lock(&qp->lock);
	if (qp->state != UIW_QPS_ERR)
		uiw_qp_flush_locked(qp);
	qp->rx_ended = true; /* wakes uiw_accept waiting for the RTR */
	qp->phase = CONN_CLOSED;
	pthread_cond_broadcast(&qp->cond);
	bool fatal = qp->local_fatal;
	pthread_mutex_unlock(&qp->lock);
	qp->stream->ops->shutdown_send(qp->stream);
	uiw_engine_deadline(qp, 0);
	quiet(qp);
	if (fatal)
		uiw_qp_event_due(qp, UIW_QP_EV_FATAL);
	uiw_qp_event_due(qp, UIW_QP_EV_DISCONNECTED);
}

/* Aborts the stream (both directions): nothing more is waited for. */
static void stream_abort(struct uiw_qp *qp)
{
	qp->stream->ops->abort(qp->stream);
	pthread_mutex_lock(&qp->lock);
	qp->aborted = true;
	pthread_mutex_unlock(&qp->lock);
}

/* Receiving is over (the peer's FIN, a reset, a Terminate either way, a
 * local abort): finish what may still go out, bounded by CLOSE_WAIT_NS. A
 * graceful end still sends the responses to Read Requests the peer sent
 * before its FIN; otherwise only the batch the stream has started on.
 * rx_lock holder; the send side says PROG_TIMER when it is done. */
static void closing(struct uiw_qp *qp)
{
	uint64_t now = uiw_now_ns();
	if (qp->phase == CONN_OPEN) {
		pthread_mutex_lock(&qp->lock);
		qp->phase = CONN_CLOSING;
		pthread_mutex_unlock(&qp->lock);
		qp->close_by_ns = now + CLOSE_WAIT_NS;
		uiw_engine_deadline(qp, qp->close_by_ns);
		atomic_fetch_or(&qp->pending, PROG_TX);
	}
	pthread_mutex_lock(&qp->lock);
	bool wait = !qp->aborted &&
		    (qp->tx_busy || (qp->state != UIW_QPS_ERR && qp->irq_head != qp->irq_tail));
	pthread_mutex_unlock(&qp->lock);
	if (wait && now < qp->close_by_ns)
		return;
	finalize(qp);
}

/* After a Terminate of ours: the receive side drains until the peer
 * closes, or TERM_DRAIN_NS after the Terminate went out, or CLOSE_WAIT_NS
 * when it cannot go out (rx.c stops draining at rx_drain_end). rx_lock
 * holder. */
static void terminate_clock(struct uiw_qp *qp)
{
	uint64_t now = uiw_now_ns();
	if (!qp->close_by_ns) {
		qp->close_by_ns = now + CLOSE_WAIT_NS;
		uiw_engine_deadline(qp, qp->close_by_ns);
	}
	if (qp->rx_drain_end)
		return;
	pthread_mutex_lock(&qp->lock);
	bool sent = qp->term_sent;
	if (sent)
		qp->stats.terminates_sent++;
	pthread_mutex_unlock(&qp->lock);
	if (sent) {
		qp->rx_drain_end = now + TERM_DRAIN_NS;
		uiw_engine_deadline(qp, qp->rx_drain_end);
	} else if (now >= qp->close_by_ns) {
		qp->rx_drain_end = now;
	}
}

/* The dead-peer watchdog of a stream whose kernel does not keep the bound
 * (Multipath TCP ignores TCP_USER_TIMEOUT, and its connection outlives its
 * subflows' keepalive by a minute or more; docs/wan.md): every tenth of
 * the bound (at least 100 ms) it asks how long the peer has been silent on
 * every path; the whole bound ends the connection as a peer timeout (the
 * send side does it: watch_expired). A live idle peer answers the
 * keepalive probes that start at half the bound (uiw_tcp_apply_opts).
 * timer: this pass came from the engine's deadline (which it consumed:
 * armed again here). rx_lock holder. */
static void watch_check(struct uiw_qp *qp, bool timer)
{
	const int bound = uiw_config_get()->tcp.dead_peer_ms;
	uint64_t every = (uint64_t)bound * 100000u; /* a tenth, in ns */
	uint64_t now = uiw_now_ns();
	if (every < 100000000u)
		every = 100000000u;
	if (now >= qp->watch_next_ns) {
		timer = true;
		qp->watch_next_ns = now + every;
		int quiet = qp->stream->ops->silent_ms(qp->stream);
		if (quiet < 0) {
			qp->watch = false; /* fell back to plain TCP, or gone */
			return;
		}
		if (quiet >= bound) {
			qp->watch = false;
			atomic_store(&qp->watch_expired, true);
			uiw_engine_kick(qp, PROG_TX);
			return;
		}
	}
	if (timer)
		uiw_engine_deadline(qp, qp->watch_next_ns);
}

/* The receive side's pass. rx_lock holder. */
static void rx_pass(struct uiw_qp *qp, enum prog_role role, bool timer)
{
	pthread_mutex_lock(&qp->lock);
	enum conn_phase phase = qp->phase;
	bool term = qp->term_queued;
	pthread_mutex_unlock(&qp->lock);
	if (phase != CONN_OPEN && phase != CONN_CLOSING)
		return;
	if (qp->watch && phase == CONN_OPEN)
		watch_check(qp, timer);
	size_t budget = role == ROLE_ENGINE   ? BUDGET_ENGINE
			: role == ROLE_POLLER ? BUDGET_POLLER
					      : BUDGET_POSTER;
	if (term && qp->rx_state != RX_DRAIN && qp->rx_state != RX_DONE) {
		/* a Terminate the send side queued (uiw_terminate_tx): stop
		 * placing, read and drop like after one of ours */
		qp->rx_state = RX_DRAIN;
		qp->rx_drain_end = 0;
	}
	if (term)
		terminate_clock(qp);
	if (atomic_load_explicit(&qp->hup_seen, memory_order_acquire))
		qp->mpa.rx_hup = true;
	if (qp->rx_state != RX_DONE) {
		(void)uiw_rx_run(qp, budget);
		pthread_mutex_lock(&qp->lock);
		term = qp->term_queued;
		pthread_mutex_unlock(&qp->lock);
		if (term)
			terminate_clock(qp); /* a Terminate of ours, perhaps found just now */
	}
	if (term && qp->rx_state == RX_DONE && !qp->term_closed) {
		/* RFC 5040 §6.3: the Terminate is out (or given up on) and the
		 * peer's last bytes were read: close */
		qp->term_closed = true;
		stream_abort(qp);
		uiw_qp_event_due(qp, UIW_QP_EV_TERMINATE);
	}
	if (qp->rx_state == RX_DONE)
		closing(qp);
}

/* The send side failed with r (the stream broke: -EPIPE, -ECONNRESET,
 * -ETIMEDOUT when the dead-peer bound passed): flush and abort; the
 * receive side finds out and ends the connection. tx_lock holder. */
static void tx_failed(struct uiw_qp *qp, int r)
{
	pthread_mutex_lock(&qp->lock);
	if (uiw_dead_peer_err(r))
		uiw_qp_stream_timeout_locked(qp);
	else if (r == -ECONNRESET)
		uiw_qp_set_close_reason(qp, UIW_CLOSE_PEER_RESET);
	/* else the receive side says why */
	if (qp->state != UIW_QPS_ERR)
		uiw_qp_flush_locked(qp);
	qp->tx_busy = false;
	pthread_mutex_unlock(&qp->lock);
	mpa_tx_drop(&qp->mpa);
	stream_abort(qp);
	atomic_fetch_or(&qp->pending, PROG_RX);
}

/* The send side's pass. tx_lock holder. */
static void tx_pass(struct uiw_qp *qp, enum prog_role role)
{
	if (!qp->stream)
		return;
	if (atomic_exchange(&qp->watch_expired, false)) {
		tx_failed(qp, -ETIMEDOUT); /* the watchdog: no acknowledgement within the bound */
		return;
	}
	int r = uiw_tx_run(qp, role);
	if (r < 0)
		tx_failed(qp, r);
}

/* Runs one side's pass if its lock is free; the holder of a taken lock
 * picks the work up from qp->pending. A poster waits for the send side
 * instead (its holder never blocks): a WR posted by a thread that then
 * waits for its completion is sent, and completed, by that thread before
 * its post returns. Returns whether it ran. */
static bool side(struct uiw_qp *qp, unsigned bits, enum prog_role role)
{
	bool rx = bits & (PROG_RX | PROG_TIMER);
	pthread_mutex_t *l = rx ? &qp->rx_lock : &qp->tx_lock;
	if (!rx && role == ROLE_POSTER)
		pthread_mutex_lock(l);
	else if (pthread_mutex_trylock(l) != 0)
		return false;
	unsigned was = atomic_fetch_and(&qp->pending, ~bits);
	unsigned due = 0;
	/* a poster's pushes say nothing of a poller being here: a thread that
	 * posts and then spins on memory (ib_write_lat) reads nothing; its long
	 * read (a poster that polls too: ib_read_bw's requester) does */
	bool outer = tl_poller_pass;
	tl_poller_pass = rx || role == ROLE_POLLER;
	if (rx) {
		rx_pass(qp, role, was & PROG_TIMER);
		uiw_stat_rx(qp);
		due = qp->ev_due;
		qp->ev_due = 0;
	} else {
		tx_pass(qp, role);
		uiw_stat_tx(qp);
	}
	tl_poller_pass = outer;
	pthread_mutex_unlock(l);
	if (due)
		report_due(qp, due);
	return true;
}

/* A poller whose last uiw_engine_proxy parked the engine is still here,
 * inside a long pass (a megabyte of Read Responses takes longer than
 * PARK_NS): the engine stays parked instead of waking to drive the same
 * stream beside it. Not after uiw_engine_unpark (proxy_ns 0), nor for a
 * poller of an armed CQ (about to sleep on its channel). now: ns,
 * CLOCK_MONOTONIC; a time no later than POLLER_SEEN_NS after the last
 * one stored writes nothing (the line stays where the engine reads it). */
#define POLLER_SEEN_NS (20ull * 1000)
static void poller_at(uint64_t now)
{
	uint64_t p = atomic_load_explicit(&engine.proxy_ns, memory_order_relaxed);
	if (p && (int64_t)(now - p) > (int64_t)POLLER_SEEN_NS)
		atomic_compare_exchange_strong_explicit(&engine.proxy_ns, &p, now,
							memory_order_relaxed, memory_order_relaxed);
}

static void poller_here(void)
{
	if (tl_proxy_parks)
		poller_at(uiw_now_ns());
}

/* See rdmap/internal.h. */
void uiw_engine_poller_busy(uint64_t now, bool streaming)
{
	if (tl_proxy_parks && (tl_poller_pass || streaming))
		poller_at(now ? now : uiw_now_ns());
}

/* See rdmap/internal.h. */
void uiw_progress(struct uiw_qp *qp, unsigned what, enum prog_role role)
{
	if (what)
		atomic_fetch_or(&qp->pending, what);
	bool ran = false;
	for (int round = 0; round < 3; round++) {
		unsigned w = atomic_load(&qp->pending);
		if (!w && !(round == 0 && role == ROLE_POSTER))
			return;
		if (round > 0 && role == ROLE_POLLER)
			poller_here(); /* a pass that goes on: no clock read for a short one */
		ran = false;
		/* send first: what was posted goes out before we read more; a
		 * poster always takes the send side (when its post returns,
		 * the WRs went out, by it or by the holder it waited for) */
		if ((w & PROG_TX) || (round == 0 && role == ROLE_POSTER))
			ran |= side(qp, PROG_TX, role);
		if (w & (PROG_RX | PROG_TIMER))
			ran |= side(qp, PROG_RX | PROG_TIMER, role);
		if (!ran)
			return; /* the holders take it on before they let go */
	}
	/* more than a fair share: the engine goes on with what is left */
	if (atomic_load(&qp->pending))
		uiw_engine_kick(qp, 0);
}

/* ------------------------------------------------------------- the engine */

static void dl_remove_locked(struct uiw_qp *qp)
{
	int i = qp->dl_index;
	if (i < 0)
		return;
	struct uiw_qp *last = engine.dl[--engine.ndl];
	engine.dl[i] = last;
	last->dl_index = i;
	qp->dl_index = -1;
	qp->deadline_ns = 0;
	qp->dl_tx_only = false;
}

/* Wakes the engine thread from epoll (one count on its eventfd). Not a
 * cancellation point (the write is one; the verbs calls that get here are
 * none), and no stack slot for the count. */
static void engine_wake(void)
{
	static const uint64_t one = 1;
	int cs = uiw_nocancel_begin();

	(void)!write(engine.evfd, &one, sizeof(one));
	uiw_nocancel_end(cs);
}

/* uiw_engine_deadline, and uiw_engine_deadline_tx with tx set. */
static void deadline_set(struct uiw_qp *qp, uint64_t at_ns, bool tx)
{
	pthread_mutex_lock(&engine.lock);
	bool wake = false;
	if (!at_ns || qp->detached) {
		/* a QP uiw_engine_detach took away gets no deadline: a poster
		 * still inside tx.c (qp_release_stream waits for it after the
		 * detach), or the engine's own progress on it, would put it back
		 * on the list, and the engine would find it there after
		 * uiw_qp_destroy freed it. Before the attach it does (a batch
		 * deferred then must still go out: tx.c may_defer) */
		dl_remove_locked(qp);
	} else {
		if (qp->dl_index < 0) {
			if (engine.ndl == engine.capdl) {
				int ncap = engine.capdl ? 2 * engine.capdl : 16;
				struct uiw_qp **n = realloc(engine.dl, (size_t)ncap * sizeof(*n));
				if (!n) {
					pthread_mutex_unlock(&engine.lock);
					return; /* progress still comes with the stream's events */
				}
				engine.dl = n;
				engine.capdl = ncap;
			}
			qp->dl_index = engine.ndl;
			engine.dl[engine.ndl++] = qp;
		}
		/* a waiting batch's alone, or with another timer folded in */
		qp->dl_tx_only = tx && (!qp->deadline_ns || qp->dl_tx_only);
		/* a parked engine is not woken: pollers are there (they
		 * push what waits) and its nap ends within PARK_NS */
		wake = (!qp->deadline_ns || at_ns < qp->deadline_ns) && !engine.parked;
		/* Nor, for a batch that waits for its poster's next post or
		 * poll (tx.c may_defer, carry_waits), an engine whose epoll
		 * wait ends within PARK_MAX_NS of the deadline anyway (it is
		 * capped so while a poller has been around: engine_main). The
		 * poster is there, setting it: it or a poll of the QP's CQ
		 * sends the batch before the deadline nearly always, and each
		 * of those wake-ups preempted the poster on a host with few
		 * cores for an engine with nothing to do (ib_write_bw -s 65536:
		 * 350-1 000 a second). Only a poster that polls (its last
		 * uiw_engine_proxy parked the engine): one that sleeps on a
		 * completion channel (rping) is not back before the deadline.
		 * A poller that stops without a post or a poll leaves the
		 * batch at most PARK_MAX_NS, once, as a parked engine's
		 * streams; one that arms its CQ to sleep wakes the engine
		 * (dl_unseen). */
		if (wake && tx && tl_proxy_parks &&
		    atomic_load_explicit(&engine.sleep_until, memory_order_relaxed) <=
			at_ns + PARK_MAX_NS) {
			wake = false;
			engine.dl_unseen = true;
		}
		if (!qp->deadline_ns || at_ns < qp->deadline_ns)
			qp->deadline_ns = at_ns;
	}
	bool started = engine.started;
	pthread_mutex_unlock(&engine.lock);
	if (wake && started && !pthread_equal(pthread_self(), engine.thread)) {
		engine_wake();
	}
}

/* See rdmap/internal.h. The engine wakes at the earliest deadline. */
void uiw_engine_deadline(struct uiw_qp *qp, uint64_t at_ns)
{
	deadline_set(qp, at_ns, false);
}

/* See rdmap/internal.h. */
void uiw_engine_deadline_tx(struct uiw_qp *qp, uint64_t at_ns)
{
	deadline_set(qp, at_ns, true);
}

/* See rdmap/internal.h. */
void uiw_engine_kick(struct uiw_qp *qp, unsigned what)
{
	if (what)
		atomic_fetch_or(&qp->pending, what);
	pthread_mutex_lock(&engine.lock);
	bool wake = false;
	if (engine.started && !qp->kicked && qp->eng) {
		qp->kicked = true;
		qp->kick_next = NULL;
		if (engine.kick_tail)
			engine.kick_tail->kick_next = qp;
		else
			engine.kick_head = qp;
		engine.kick_tail = qp;
		/* a parked engine: the pollers take the list (or the engine,
		 * at the end of its nap) */
		wake = !engine.parked;
	}
	pthread_mutex_unlock(&engine.lock);
	if (wake && !pthread_equal(pthread_self(), engine.thread)) {
		engine_wake();
	}
}

/* Nanoseconds until the earliest deadline (at most a minute), -1 if none,
 * 0 if something is kicked. engine.lock held. */
static int64_t next_timeout_locked(uint64_t now)
{
	if (engine.kick_head)
		return 0;
	uint64_t min = 0;
	for (int i = 0; i < engine.ndl; i++)
		if (!min || engine.dl[i]->deadline_ns < min)
			min = engine.dl[i]->deadline_ns;
	if (!min)
		return -1;
	if (min <= now)
		return 0;
	uint64_t ns = min - now;
	return ns > 60000000000ull ? 60000000000ll : (int64_t)ns;
}

/* Runs what epoll reported: the stream's bytes or end (PROG_RX), room
 * for a send side waiting for it (PROG_TX). The eventfd's entry (no QP)
 * is the engine thread's to read. */
static void run_events(const struct epoll_event *ev, int n, enum prog_role role)
{
	for (int i = 0; i < n; i++) {
		struct uiw_qp *q = ev[i].data.ptr;
		if (!q) {
			if (role == ROLE_ENGINE) {
				uint64_t v;
				(void)!read(engine.evfd, &v, sizeof(v));
			}
			continue;
		}
		unsigned what = 0;
		if (ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			what |= PROG_RX;
		if ((ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
		    !atomic_load_explicit(&q->hup_seen, memory_order_relaxed))
			atomic_store(&q->hup_seen, true);
		/* the socket is writable at nearly every event: only a send
		 * side waiting for room wants to hear it. out_ready is set
		 * first, always: a send side that is just finding the stream
		 * full (tx.c) sets want_out after its push and then looks at
		 * out_ready, so one of the two sees the other (seq_cst) */
		if (ev[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
			atomic_store(&q->out_ready, true);
			if (atomic_load(&q->want_out))
				what |= PROG_TX;
		}
		uiw_progress(q, what, role);
	}
}

/* Runs the kicked QPs: the list as it is now (kicks from here on wait for
 * the next turn). */
static void run_kicks(enum prog_role role)
{
	pthread_mutex_lock(&engine.lock);
	struct uiw_qp *k = engine.kick_head;
	engine.kick_head = engine.kick_tail = NULL;
	for (struct uiw_qp *q = k; q; q = q->kick_next)
		q->kicked = false;
	pthread_mutex_unlock(&engine.lock);
	while (k) {
		struct uiw_qp *next = k->kick_next;
		/* the work is in qp->pending (every kick puts it there): a
		 * side with nothing to do is not run (no recvmsg on a stream
		 * nothing came in on, contending with its sender for the
		 * socket's lock) */
		uiw_progress(k, 0, role);
		k = next;
	}
}

/* A poller was in uiw_engine_proxy, saying park, less than PARK_NS before
 * now (ns, CLOCK_MONOTONIC). */
static bool poller_fresh(uint64_t now)
{
	uint64_t p = atomic_load(&engine.proxy_ns);
	return p && now - p < PARK_NS;
}

/* See rdmap/internal.h. */
void uiw_engine_proxy(bool park)
{
	if (!engine.started || engine.epfd < 0 || in_proxy)
		return;
	/* a QP being taken away waits for the proxies inside: none enters
	 * while it waits */
	if (pthread_rwlock_tryrdlock(&engine.proxy_lock) != 0)
		return;
	in_proxy = true;
	tl_proxy_parks = park;
	if (park)
		atomic_store_explicit(&engine.proxy_ns, uiw_now_ns(), memory_order_relaxed);
	struct epoll_event ev[16];
	int n = epoll_wait(engine.epfd, ev, 16, 0);
	if (n > 0)
		run_events(ev, n, ROLE_POLLER);
	if (__atomic_load_n(&engine.kick_head, __ATOMIC_RELAXED))
		run_kicks(ROLE_POLLER);
	in_proxy = false;
	pthread_rwlock_unlock(&engine.proxy_lock);
}

/* See rdmap/internal.h. */
void uiw_engine_leave(void)
{
	atomic_store(&engine.proxy_ns, uiw_now_ns());
	/* seq_cst against the engine's store of waiting and load of
	 * proxy_ns: one of the two sees the other */
	if (atomic_load(&engine.waiting) &&
	    !atomic_exchange_explicit(&engine.nudged, true, memory_order_relaxed)) {
		engine_wake();
	}
}

/* See rdmap/internal.h. */
void uiw_engine_unpark(void)
{
	/* this thread is about to sleep (an arm): its posts' batches are the
	 * engine's (deadline_set) until its next poll parks the engine again */
	tl_proxy_parks = false;
	atomic_store_explicit(&engine.proxy_ns, 0, memory_order_relaxed);
	pthread_mutex_lock(&engine.lock);
	bool wake = engine.started && (engine.parked || engine.dl_unseen);
	engine.dl_unseen = false;
	pthread_mutex_unlock(&engine.lock);
	if (wake) {
		engine_wake();
	}
}

/* See rdmap/internal.h. The engine's epoll descriptor polls readable while
 * its ready list holds a stream's event (edge-triggered: one the last
 * epoll_wait has not taken yet); it stays open for the process's life
 * (only a fork's child closes it, before any thread runs there). */
void uiw_engine_nap(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
			      .tv_nsec = (long)(ns % 1000000000u)};
	int fd = engine.epfd;
	if (fd < 0 || !engine.started) {
		nanosleep(&ts, NULL);
		return;
	}
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	(void)ppoll(&pfd, 1, &ts, NULL);
}

/* qp's deadline is only a batch's that waits for a poll of one of its CQs
 * (tx.c may_defer, carry_waits: uiw_engine_deadline_tx) and the batch went
 * meanwhile (its poster's next push, or a poll's), or it still waits and
 * one of those CQs, one with at most four QPs, was polled less than
 * PARK_NS before now: that poller pushes it (cq.c drives a deferred QP at
 * every poll; uiw_cq_drives). Either way the
 * engine has nothing to do there: a streaming poster defers a batch every
 * few µs, and each deadline woke the engine into an rx pass that met the
 * poster on the socket's lock (ib_write_bw -s 65536: 3 800-5 900 wake-ups
 * a second). Should that poller go, the deadline is met when the engine
 * next wakes (its park ends within PARK_MAX_NS, as for the streams' bytes).
 * engine.lock held. */
static bool tx_polled(struct uiw_qp *qp, uint64_t now)
{
	if (!qp->dl_tx_only)
		return false;
	if (!atomic_load_explicit(&qp->tx_deferred, memory_order_relaxed))
		return true;
	/* only a CQ whose polls scan its QPs (at most four on it): on a CQ
	 * shared by more, the deadline is what pushes the batch */
	uint64_t s = qp->scq && uiw_cq_drives(qp->scq) ? uiw_cq_last_poll(qp->scq) : 0;
	uint64_t r = qp->rcq && uiw_cq_drives(qp->rcq) ? uiw_cq_last_poll(qp->rcq) : 0;
	uint64_t last = s > r ? s : r;
	return last && (int64_t)(now - last) < (int64_t)PARK_NS;
}

/* While pollers do its work (a poller was in uiw_engine_proxy less than
 * PARK_NS ago, or is still in a pass it began there: poller_here and
 * uiw_engine_poller_busy at every push and every 256 KiB read), kicked
 * QPs included (uiw_engine_proxy runs the kick list: a poller that left
 * work for the engine after its fair share takes it up again at its next
 * poll, not the engine beside it), the engine thread sleeps for its park length (PARK_NS,
 * doubled each time it parks again, up to PARK_MAX_NS), until its next
 * deadline or a wake-up on the eventfd, whichever comes first, so that a
 * stream's bytes wake nobody: the poller that is there anyway takes them.
 * Returns whether it parked (engine thread only). */
static bool engine_park(void)
{
	static uint64_t park_ns = PARK_NS;
	uint64_t now = uiw_now_ns();
	if (!poller_fresh(now)) {
		park_ns = PARK_NS;
		return false;
	}
	uint64_t until = now + park_ns;
	pthread_mutex_lock(&engine.lock);
	for (int i = 0; i < engine.ndl; i++) {
		struct uiw_qp *q = engine.dl[i];
		if (q->deadline_ns >= until || tx_polled(q, now))
			continue;
		until = q->deadline_ns;
	}
	/* a poller that armed its CQ after the load above (uiw_engine_unpark:
	 * proxy_ns to 0, then parked read under this lock) saw parked false
	 * and woke nobody: its 0 is visible here, so do not sleep through it */
	if (!atomic_load_explicit(&engine.proxy_ns, memory_order_relaxed)) {
		pthread_mutex_unlock(&engine.lock);
		park_ns = PARK_NS;
		return false;
	}
	engine.parked = true;
	pthread_mutex_unlock(&engine.lock);
	if (park_ns < PARK_MAX_NS)
		park_ns *= 2;
	if (until > now) {
		uint64_t d = until - now;
		struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u),
				      .tv_nsec = (long)(d % 1000000000u)};
		struct pollfd pfd = {.fd = engine.evfd, .events = POLLIN};
		if (ppoll(&pfd, 1, &ts, NULL) > 0) {
			uint64_t v;
			(void)!read(engine.evfd, &v, sizeof(v));
			park_ns = PARK_NS; /* woken: start short again */
		}
	}
	pthread_mutex_lock(&engine.lock);
	engine.parked = false;
	pthread_mutex_unlock(&engine.lock);
	return true;
}

static void *engine_main(void *arg)
{
	(void)arg;
	struct epoll_event ev[64];
	int spin_us = uiw_config_get()->spin_us;
	for (;;) {
		if (!engine_park()) {
			pthread_mutex_lock(&engine.lock);
			uint64_t now = uiw_now_ns();
			int64_t tmo = next_timeout_locked(now);
			/* a poller was around in the last POLLER_GONE_NS: the
			 * wait ends within PARK_MAX_NS, so that a waiting batch's
			 * deadline set meanwhile needs no wake-up (deadline_set) */
			uint64_t p = atomic_load_explicit(&engine.proxy_ns, memory_order_relaxed);
			if (p && now - p < POLLER_GONE_NS &&
			    (tmo < 0 || tmo > (int64_t)PARK_MAX_NS))
				tmo = (int64_t)PARK_MAX_NS;
			atomic_store_explicit(&engine.sleep_until,
					      tmo < 0 ? UINT64_MAX : now + (uint64_t)tmo,
					      memory_order_relaxed);
			engine.dl_unseen = false;
			pthread_mutex_unlock(&engine.lock);
			int n = 0;
			if (spin_us && tmo != 0) {
				/* UIWARP_SPIN_US: look again and again before sleeping */
				uint64_t end = uiw_now_ns() + (uint64_t)spin_us * 1000;
				do
					n = epoll_wait(engine.epfd, ev, 64, 0);
				while (n == 0 && uiw_now_ns() < end);
			}
			/* a poller that came by since engine_park: park instead
			 * (else it sees waiting and wakes us out of the wait) */
			atomic_store(&engine.waiting, true);
			if (n == 0 && poller_fresh(uiw_now_ns()))
				tmo = 0;
			if (n == 0 && tmo != 0) {
				/* to the nanosecond: a batch waiting DEFER_MAX_NS
				 * (tx.c) must not wait a millisecond */
				struct timespec ts = {.tv_sec = (time_t)(tmo / 1000000000),
						      .tv_nsec = (long)(tmo % 1000000000)};
				n = epoll_pwait2(engine.epfd, ev, 64, tmo < 0 ? NULL : &ts, NULL);
			}
			atomic_store(&engine.waiting, false);
			atomic_store_explicit(&engine.nudged, false, memory_order_relaxed);
			/* awake: it looks at the deadlines before it waits again */
			atomic_store_explicit(&engine.sleep_until, 0, memory_order_relaxed);
			if (n > 0)
				run_events(ev, n, ROLE_ENGINE);
		}
		run_kicks(ROLE_ENGINE);
		/* deadlines that passed */
		uint64_t now = uiw_now_ns();
		for (int pass = 0; pass < 64; pass++) {
			struct uiw_qp *due = NULL;
			pthread_mutex_lock(&engine.lock);
			for (int i = 0; i < engine.ndl; i++) {
				struct uiw_qp *q = engine.dl[i];
				if (q->deadline_ns > now)
					continue;
				if (tx_polled(q, now)) {
					if (!atomic_load_explicit(&q->tx_deferred,
								  memory_order_relaxed)) {
						dl_remove_locked(q); /* the batch went */
						i--;		     /* the last one moved here */
					} else {
						/* its poller pushes it; looked at
						 * again after PARK_NS (at the latest
						 * when the engine next wakes) */
						q->deadline_ns = now + PARK_NS;
					}
					continue;
				}
				due = q;
				dl_remove_locked(due);
				break;
			}
			pthread_mutex_unlock(&engine.lock);
			if (!due)
				break;
			/* its deadline is gone from the list now: a batch a poster
			 * deferred (tx.c may_defer) must get a new one if that
			 * poster, holding the send side while this progress finds
			 * it taken, defers it again — may_defer sets one only when
			 * tx_deferred is false (else both ends could sleep on their
			 * completion channels with the batch never sent) */
			atomic_store(&due->tx_deferred, false);
			uiw_progress(due, PROG_TIMER | PROG_RX | PROG_TX, ROLE_ENGINE);
		}
		pthread_mutex_lock(&engine.lock);
		engine.cycles++;
		/* the last QP was detached (destroyed) and nothing waits: the
		 * thread ends, so a process that has closed its connections is
		 * left with the threads it had before them; the next attach
		 * starts it again (epfd and evfd stay) */
		bool idle = !engine.nattached && !engine.kick_head && !engine.ndl;
		if (idle)
			engine.started = false;
		pthread_cond_broadcast(&engine.cycled);
		pthread_mutex_unlock(&engine.lock);
		if (idle)
			return NULL;
	}
}

/* A writer-preferring lock: proxies come and go all the time, and a
 * QP's removal must not wait for a moment when none is inside. */
static void proxy_lock_init(void)
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&engine.proxy_lock, &a);
	pthread_rwlockattr_destroy(&a);
}

/* After fork the child has no engine thread: start afresh there. */
static void engine_atfork_child(void)
{
	if (engine.epfd >= 0)
		close(engine.epfd);
	if (engine.evfd >= 0)
		close(engine.evfd);
	engine.epfd = engine.evfd = -1;
	engine.started = false;
	engine.nattached = 0;
	engine.parked = false;
	engine.kick_head = engine.kick_tail = NULL;
	engine.ndl = 0;
	atomic_store(&engine.proxy_ns, 0);
	atomic_store(&engine.waiting, false); /* the parent's engine may have been in its wait */
	atomic_store(&engine.nudged, false);
	atomic_store(&engine.sleep_until, 0);
	engine.dl_unseen = false;
	pthread_mutex_init(&engine.lock, NULL);
	pthread_cond_init(&engine.cycled, NULL);
	in_proxy = false;
	proxy_lock_init();
}

static void engine_register_atfork(void)
{
	pthread_atfork(NULL, NULL, engine_atfork_child);
}

static pthread_once_t proxy_once = PTHREAD_ONCE_INIT;

/* Starts the engine thread with every asynchronous signal blocked
 * (util/thread.h); the epoll set and eventfd are made the first time and
 * kept when the thread ends for want of QPs (a poller may still look at
 * the set). engine.lock held. */
static int engine_start_locked(void)
{
	if (engine.started)
		return 0;
	pthread_once(&atfork_once, engine_register_atfork);
	pthread_once(&proxy_once, proxy_lock_init);
	if (engine.epfd < 0) {
		engine.epfd = epoll_create1(EPOLL_CLOEXEC);
		engine.evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (engine.epfd < 0 || engine.evfd < 0)
			goto fail;
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
		if (epoll_ctl(engine.epfd, EPOLL_CTL_ADD, engine.evfd, &ev) < 0)
			goto fail;
	}
	if (uiw_thread_create(&engine.thread, engine_main, NULL))
		return -EAGAIN; /* the set and eventfd stay for the next try */
	pthread_detach(engine.thread);
	engine.started = true;
	return 0;
fail:
	if (engine.epfd >= 0)
		close(engine.epfd);
	if (engine.evfd >= 0)
		close(engine.evfd);
	engine.epfd = engine.evfd = -1;
	return -EAGAIN;
}

/* See rdmap/internal.h. */
int uiw_engine_attach(struct uiw_qp *qp)
{
	int fd = uiw_stream_fd(qp->stream);
	pthread_mutex_lock(&engine.lock);
	int rc = engine_start_locked();
	if (!rc) {
		qp->eng = &engine;
		qp->detached = false;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
					 .data.ptr = qp};
		if (epoll_ctl(engine.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			rc = -errno;
			qp->eng = NULL; /* counted only when attached */
		} else {
			qp->registered = true;
			engine.nattached++;
		}
	}
	pthread_mutex_unlock(&engine.lock);
	if (rc)
		return rc;
	/* the dead-peer watchdog where the kernel does not keep the bound */
	if (uiw_config_get()->tcp.dead_peer_ms > 0 && qp->stream->ops->silent_ms &&
	    qp->stream->ops->silent_ms(qp->stream) >= 0) {
		qp->watch_next_ns = 0; /* the first pass checks and arms it */
		qp->watch = true;
	}
	uiw_engine_kick(qp, PROG_RX | PROG_TX);
	return 0;
}

/* See rdmap/internal.h. An epoll_wait that began before the QP left the
 * set may still hand it out: wait for the engine's cycle to end. */
void uiw_engine_detach(struct uiw_qp *qp)
{
	int fd = qp->stream ? uiw_stream_fd(qp->stream) : -1;
	pthread_mutex_lock(&engine.lock);
	if (!qp->eng) {
		/* never attached (or already let go): only a deadline set
		 * before an attach may hold it */
		dl_remove_locked(qp);
		qp->detached = true;
		/* its deadline was all that kept an engine without QPs up:
		 * let the thread see that it may end */
		bool wake = engine.started && !engine.nattached && !engine.ndl &&
			    !pthread_equal(pthread_self(), engine.thread);
		pthread_mutex_unlock(&engine.lock);
		if (wake) {
			engine_wake();
		}
		return;
	}
	if (qp->registered && fd >= 0)
		(void)epoll_ctl(engine.epfd, EPOLL_CTL_DEL, fd, NULL);
	qp->registered = false;
	dl_remove_locked(qp);
	if (qp->kicked) {
		struct uiw_qp **pp = &engine.kick_head, *prev = NULL;
		while (*pp && *pp != qp) {
			prev = *pp;
			pp = &(*pp)->kick_next;
		}
		if (*pp) {
			*pp = qp->kick_next;
			if (engine.kick_tail == qp)
				engine.kick_tail = prev;
		}
		qp->kicked = false;
	}
	qp->eng = NULL;
	qp->detached = true;
	engine.nattached--;
	bool started = engine.started;
	bool wait = started && !pthread_equal(pthread_self(), engine.thread);
	uint64_t c = engine.cycles;
	pthread_mutex_unlock(&engine.lock);
	/* pollers inside uiw_engine_proxy may hold qp from their epoll_wait */
	if (started && !in_proxy) {
		pthread_rwlock_wrlock(&engine.proxy_lock);
		pthread_rwlock_unlock(&engine.proxy_lock);
	}
	if (!wait)
		return;
	engine_wake();
	pthread_mutex_lock(&engine.lock);
	while (engine.cycles == c && engine.started)
		pthread_cond_wait(&engine.cycled, &engine.lock);
	pthread_mutex_unlock(&engine.lock);
}
