/* Completion queues: a ring of CQEs under one mutex (one lock per CQE, not
 * per FPDU), with verbs req_notify semantics, and the QPs whose progress a
 * thread polling the CQ drives (docs/design.md, "Threads and progress").
 *
 * A poll that finds fewer CQEs than asked for, or any poll of the send
 * CQ of a QP that streams (tx.c: many WRs outstanding), makes progress in
 * the calling thread: it does the engine's work (uiw_engine_proxy: one
 * epoll_wait, not a recvmsg per QP, for the streams of every QP in the
 * process), reading, placing and completing what arrived and sending what
 * is queued, so a thread that polls needs no other thread to wake up for
 * its completions, and the engine thread sleeps while it polls. QPs with
 * work for their holders (qp->pending) or a batch left for the next poll
 * (tx.c's doorbell batching) are looked at directly, up to CQ_SCAN_MAX of
 * them; beyond that the engine's deadlines and kicks take that work.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "rdmap/internal.h"
#include "util/thread.h"

/* Up to this many QPs a poller looks at each QP's pending work in turn. */
#define CQ_SCAN_MAX 4

struct uiw_cq {
	pthread_mutex_t lock;
	struct uiw_wc *ring;
	uint32_t size, head, count;
	bool armed, solicited_only, overflow;
	/* CQEs pushed since creation, and that count when fn was last called:
	 * the CQEs after `announced` came after the last notification */
	uint64_t pushed, announced;
	uiw_cq_notify_fn fn;
	void *ctx;
	atomic_int users; /* QPs */
	/* the QPs a poller drives (qps_lock: pollers read, create/destroy write) */
	pthread_rwlock_t qps_lock;
	struct uiw_qp **qps;
	int nqps, cap;
	unsigned rr;		       /* where the next scan starts */
	_Atomic uint64_t last_poll_ns; /* a poller was here (tx.c's doorbell batching) */
	_Atomic uint64_t last_cqe_ns;  /* a poll returned a CQE (the yield when idle) */
	int64_t yield_ns;	       /* UIWARP_POLL_YIELD_US in ns, -1 never */
	atomic_bool pingpong; /* a QP sending here has shown the Write ping-pong (reply_wait) */
	int64_t nap_ns;	      /* UIWARP_POLL_NAP_US in ns, -1 never */
};

/* How long an empty poll sleeps once the CQ has been idle for nap_ns (ns):
 * short against a wake-up's cost, long against a poll's */
#define UIW_POLL_NAP_NS (50 * 1000)
/* This thread's run of empty polls (of any CQ): when it began and when the
 * last one ended (ns; 0: the last poll found a CQE). Only a thread that
 * spins (the next empty poll at most UIW_POLL_SPIN_NS after the end of the
 * one before) and has found nothing for nap_ns naps: not a thread that
 * polls a busy CQ and an idle one in turn, nor one that polls once before
 * it sleeps on a completion channel, nor one that looks now and then
 * between other work */
static _Thread_local uint64_t tl_empty_since_ns, tl_empty_last_ns;
#define UIW_POLL_SPIN_NS (20 * 1000)

int uiw_cq_create(unsigned depth, uiw_cq_notify_fn fn, void *ctx, struct uiw_cq **out)
{
	if (depth == 0 || depth > UIW_MAX_CQE)
		return -EINVAL;
	struct uiw_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->ring = calloc(depth, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		return -ENOMEM;
	}
	cq->size = depth;
	cq->fn = fn;
	cq->ctx = ctx;
	int py = uiw_config_get()->poll_yield_us;
	cq->yield_ns = py < 0 ? -1 : (int64_t)py * 1000;
	int pn = uiw_config_get()->poll_nap_us;
	cq->nap_ns = pn < 0 ? -1 : (int64_t)pn * 1000;
	atomic_store(&cq->last_cqe_ns, uiw_now_ns()); /* idle from now, not since boot */
	pthread_mutex_init(&cq->lock, NULL);
	pthread_rwlock_init(&cq->qps_lock, NULL);
	*out = cq;
	return 0;
}

int uiw_cq_destroy(struct uiw_cq *cq)
{
	if (atomic_load(&cq->users) > 0)
		return -EBUSY;
	pthread_mutex_destroy(&cq->lock);
	pthread_rwlock_destroy(&cq->qps_lock);
	free(cq->qps);
	free(cq->ring);
	free(cq);
	return 0;
}

void uiw_cq_use(struct uiw_cq *cq, int delta)
{
	atomic_fetch_add(&cq->users, delta);
}

/* See rdmap/internal.h. */
int uiw_cq_attach_qp(struct uiw_cq *cq, struct uiw_qp *qp)
{
	pthread_rwlock_wrlock(&cq->qps_lock);
	if (cq->nqps == cq->cap) {
		int ncap = cq->cap ? 2 * cq->cap : 4;
		struct uiw_qp **n = realloc(cq->qps, (size_t)ncap * sizeof(*n));
		if (!n) {
			pthread_rwlock_unlock(&cq->qps_lock);
			return -ENOMEM;
		}
		cq->qps = n;
		cq->cap = ncap;
	}
	cq->qps[cq->nqps++] = qp;
	pthread_rwlock_unlock(&cq->qps_lock);
	return 0;
}

/* See rdmap/internal.h. */
void uiw_cq_detach_qp(struct uiw_cq *cq, struct uiw_qp *qp)
{
	pthread_rwlock_wrlock(&cq->qps_lock);
	for (int i = 0; i < cq->nqps; i++) {
		if (cq->qps[i] == qp) {
			cq->qps[i] = cq->qps[--cq->nqps];
			break;
		}
	}
	pthread_rwlock_unlock(&cq->qps_lock);
}

/* Whether a QP of the CQ (the first CQ_SCAN_MAX) whose send completions
 * come here has a poster streaming (uiw_tx_streaming, tx.c): the poll is
 * that poster's. Not a receive CQ: perftest's Send server, which polls its
 * receive CQ 16 at a time at 3 M messages/s, has 8 of its own small WRs
 * outstanding for a long while, and progress in each of its full polls
 * took a third of its message rate. qps_lock held. */
static bool cq_streaming_locked(const struct uiw_cq *cq)
{
	for (int i = 0; i < cq->nqps && i < CQ_SCAN_MAX; i++)
		if (cq->qps[i]->scq == cq && uiw_tx_streaming(cq->qps[i]))
			return true;
	return false;
}

/* A busy poller of a CQ with one QP reads that QP's stream itself
 * (direct): one recvmsg that finds the peer's message or nothing, instead
 * of an epoll_wait(0) on the engine's set that finds it readable and the
 * recvmsg after it — a syscall less between the message's arrival and its
 * completion (ib_send_lat / ib_write_lat on 2 vCPUs: ~0.5 us of ~4.5).
 * It still does the engine's work (uiw_engine_proxy: the other streams,
 * the kick list; the engine stays parked) at least every DIRECT_PROXY_NS,
 * and every time once the CQ has seen no completion for DIRECT_IDLE_NS (a
 * Write target's or a responder's poller, which may nap on the engine's
 * set: its events must be taken, or the nap ends at once). */
#define DIRECT_PROXY_NS (20 * 1000)
#define DIRECT_IDLE_NS (100 * 1000)
/* when this thread last did the engine's work in a direct cq_progress */
static _Thread_local uint64_t tl_proxy_ns;

/* Makes progress on the CQ's QPs in the calling thread (see the top);
 * with if_streaming only when one of them has a poster streaming
 * (cq_streaming_locked); direct_ns: the caller's clock (ns) when the
 * poller is busy (see DIRECT_PROXY_NS), else 0. Cancellation off
 * throughout (uiw_progress, rdmap/internal.h). */
static void cq_progress(struct uiw_cq *cq, bool if_streaming, uint64_t direct_ns)
{
	int cs = uiw_nocancel_begin();
	pthread_rwlock_rdlock(&cq->qps_lock);
	int n = cq->nqps;
	if (if_streaming && !cq_streaming_locked(cq))
		n = 0;
	bool direct = direct_ns && n == 1;
	if (n > 0) {
		/* armed: the application's last look before it sleeps on the
		 * channel; the engine must not park for it */
		pthread_mutex_lock(&cq->lock);
		bool armed = cq->armed;
		pthread_mutex_unlock(&cq->lock);
		direct = direct && !armed;
		if (!direct || direct_ns - tl_proxy_ns >= DIRECT_PROXY_NS) {
			tl_proxy_ns = direct ? direct_ns : 0;
			uiw_engine_proxy(!armed);
		}
	}
	if (n > 0 && n <= CQ_SCAN_MAX) {
		unsigned start = __atomic_fetch_add(&cq->rr, 1, __ATOMIC_RELAXED);
		for (int i = 0; i < n; i++) {
			struct uiw_qp *qp = cq->qps[(start + (unsigned)i) % (unsigned)n];
			bool deferred =
			    atomic_load_explicit(&qp->tx_deferred, memory_order_relaxed);
			unsigned what = (deferred ? PROG_TX : 0) | (direct ? PROG_RX : 0);
			if (what || atomic_load_explicit(&qp->pending, memory_order_relaxed))
				uiw_progress(qp, what, ROLE_POLLER);
		}
	}
	pthread_rwlock_unlock(&cq->qps_lock);
	uiw_nocancel_end(cs);
}

/* Write ping-pong (perftest's ib_write_lat, RPC over RDMA Writes into
 * polled memory): the peer answers each of our messages with an RDMA
 * Write, which makes no completion here, and the application spins on
 * its memory for it, calling nothing of ours. The engine thread would
 * take that answer, a thread wake-up per message (1.7× a busy-polled TCP
 * ping-pong on 2 vCPUs, against 1.3× for ib_send_lat, whose poller reads
 * its own answers). So the poll that returns a QP's send completion, when
 * nothing else of it is outstanding and its last UIW_PP_MIN answers were
 * Writes that came within UIW_PP_NS of our push (pp_score, rx.c), reads
 * the stream itself until the next message of the peer's is in (rx_msgs),
 * another CQE comes, or REPLY_GAPS times the last answer's delay has
 * passed (REPLY_MIN_NS..REPLY_MAX_NS) — the time the application would
 * have spun anyway. The engine thread leaves the streams meanwhile
 * (uiw_engine_leave): waiting in epoll, it would be woken by every answer
 * to find it taken. A wait the answer did not end halves the score (a
 * late answer, as when a wake-up elsewhere delays the peer on a host with
 * few cores, leaves it waiting next time; a changed pattern costs two
 * waits) and wakes the engine; so does a poll that does not wait for a
 * QP the peer last answered with a Write (its score too low). */
#define REPLY_GAPS 4
/* Not shorter: an answer that one wake-up of the peer's engine delays
 * (tens of µs here) missed a wait of 10-50 µs, and every miss woke our
 * engine, which delayed our next answer in turn: ib_write_lat on lo had
 * 3 000-3 800 engine wake-ups a second per side and a 99th percentile of
 * 26-31 µs; 700 and 10-20 µs with these bounds (typical even, 3.5 µs) */
#define REPLY_MIN_NS (50ull * 1000)
#define REPLY_MAX_NS (200ull * 1000)

/* Whether qp is attached to cq (the first CQ_SCAN_MAX): it cannot be
 * destroyed while the caller holds qps_lock. */
static bool qp_attached_locked(const struct uiw_cq *cq, const struct uiw_qp *qp)
{
	for (int i = 0; i < cq->nqps && i < CQ_SCAN_MAX; i++)
		if (cq->qps[i] == qp)
			return true;
	return false;
}

static void reply_wait(struct uiw_cq *cq, const struct uiw_wc *last)
{
	struct uiw_qp *qp = last->qp_int;
	if (!qp || !last->sq_credits || !atomic_load_explicit(&cq->pingpong, memory_order_relaxed))
		return; /* not a send completion, or no such QP here: no lock taken */
	pthread_rwlock_rdlock(&cq->qps_lock);
	/* nothing of the QP's outstanding and nothing more to report: the
	 * application's next step may be a spin on its memory */
	bool quiet = qp_attached_locked(cq, qp) && uiw_tx_outstanding(qp) == 0 && !uiw_cq_count(cq);
	bool go = quiet && atomic_load_explicit(&qp->pp_score, memory_order_relaxed) >= UIW_PP_MIN;
	/* the peer answered our last messages with RDMA Writes, which
	 * complete nothing here: a poll of ours takes its next one, or the
	 * engine does */
	quiet = quiet && atomic_load_explicit(&qp->pp_last_write, memory_order_relaxed);
	uint64_t gap = go ? atomic_load_explicit(&qp->pp_gap_ns, memory_order_relaxed) : 0;
	unsigned msgs = go ? atomic_load_explicit(&qp->rx_msgs, memory_order_acquire) : 0;
	if (go)
		atomic_fetch_add_explicit(&qp->pp_waits, 1, memory_order_relaxed);
	pthread_rwlock_unlock(&cq->qps_lock);
	if (!go) {
		/* A Write ping-pong whose score late answers cut below
		 * UIW_PP_MIN (a late one sets it to 0): the answer is the
		 * engine's, which must not stay parked for the poller that
		 * made this poll, since the application now spins on its
		 * memory and polls nothing until the answer is in (a park
		 * grows to PARK_MAX_NS while pollers keep coming, progress.c).
		 * Both ends of ib_write_lat spun on their memory for up to 24
		 * ms, ~75 times in 2 s, a quarter of the run: each late answer
		 * left the score at 0 and the next answer to a parked engine,
		 * late again. The engine is woken instead (tens of µs; the
		 * answers it takes in time raise the score, and the waits
		 * resume after UIW_PP_MIN of them). */
		if (quiet)
			uiw_engine_unpark();
		return;
	}
	uiw_engine_leave();
	uint64_t bound = REPLY_GAPS * gap < REPLY_MIN_NS   ? REPLY_MIN_NS
			 : REPLY_GAPS * gap > REPLY_MAX_NS ? REPLY_MAX_NS
							   : REPLY_GAPS * gap;
	uint64_t end = uiw_now_ns() + bound;
	bool hit = false, left = false;
	for (int i = 0; i < 1000000 && !hit && !left; i++) {
		uint64_t now = uiw_now_ns(); /* one clock read per look */
		cq_progress(cq, false, now);
		pthread_rwlock_rdlock(&cq->qps_lock);
		left = !qp_attached_locked(cq, qp);
		hit = !left && atomic_load_explicit(&qp->rx_msgs, memory_order_acquire) != msgs;
		if (hit)
			atomic_fetch_add_explicit(&qp->pp_hits, 1, memory_order_relaxed);
		else if (!left && (uiw_cq_count(cq) || now >= end)) {
			unsigned sc = atomic_load_explicit(&qp->pp_score, memory_order_relaxed);
			atomic_store_explicit(&qp->pp_score, sc / 2, memory_order_relaxed);
			left = true;
		}
		pthread_rwlock_unlock(&cq->qps_lock);
	}
	if (!hit)
		uiw_engine_unpark(); /* the answer is the engine's again */
}

/* See rdmap/internal.h. */
void uiw_cq_note_pingpong(struct uiw_cq *cq)
{
	if (!atomic_load_explicit(&cq->pingpong, memory_order_relaxed))
		atomic_store_explicit(&cq->pingpong, true, memory_order_relaxed);
}

/* Moves up to n CQEs to wc[]. */
static int cq_pop(struct uiw_cq *cq, int n, struct uiw_wc *wc)
{
	int k = 0;
	pthread_mutex_lock(&cq->lock);
	while (k < n && cq->count) {
		struct uiw_wc *e = &cq->ring[cq->head];
		/* send-queue slots come free when their completion is polled;
		 * under the CQ lock, so a QP being destroyed (which purges its
		 * CQEs under the same lock) is never touched after */
		if (e->sq_credits)
			atomic_fetch_add(&e->qp_int->sq_polled, e->sq_credits);
		wc[k++] = *e;
		cq->head = cq->head + 1 == cq->size ? 0 : cq->head + 1;
		cq->count--;
	}
	pthread_mutex_unlock(&cq->lock);
	return k;
}

int uiw_cq_poll(struct uiw_cq *cq, int n, struct uiw_wc *wc)
{
	if (n <= 0)
		return 0;
	uint64_t now = uiw_now_ns();
	atomic_store_explicit(&cq->last_poll_ns, now, memory_order_relaxed);
	int k = cq_pop(cq, n, wc);
	unsigned pushes = uiw_tx_thread_pushes(), reads = uiw_rx_thread_reads();
	if (k < n) {
		bool busy = now - atomic_load_explicit(&cq->last_cqe_ns, memory_order_relaxed) <
			    DIRECT_IDLE_NS;
		cq_progress(cq, false, busy ? now : 0);
		k += cq_pop(cq, n - k, wc + k);
	} else {
		/* A full batch needs no progress to fill it, but a streaming
		 * poster (perftest's bandwidth loop: 128 WRs posted, 16
		 * completions per poll, never a partial batch) is back within
		 * a few µs with more: its poll sends what waits (the batch
		 * tx.c deferred, the rest of one the stream took only part of
		 * at its POLLOUT) and keeps the engine parked, instead of the
		 * engine waking for each deferred batch's deadline and each
		 * POLLOUT and meeting the poster on the socket's lock. Not for
		 * a thread with few WRs outstanding: ib_write_lat's polls one
		 * completion and then spins on memory for the peer's Write,
		 * which only an engine that is not parked takes. */
		cq_progress(cq, true, 0);
	}
	if (k) {
		atomic_store_explicit(&cq->last_cqe_ns, now, memory_order_relaxed);
		tl_empty_since_ns = 0;
		reply_wait(cq, &wc[k - 1]);
		return k;
	}
	if (uiw_tx_thread_pushes() != pushes || uiw_rx_thread_reads() != reads) {
		/* this poll sent something (a Read Response: the peer waits
		 * for it) or took bytes in (a passive RDMA Write's, which
		 * completes nothing here): the thread is not spinning on
		 * nothing, it naps only after nap_ns without either. A Write
		 * target's poller that napped between its FPDUs (each nap a
		 * wake-up the sender paid for, and a halted vCPU's exit)
		 * held a pinned ib_write_bw -s 1M on lo at 35-39 Gbit/s
		 * instead of 55-60 in most runs: ~2 900 naps a second */
		tl_empty_since_ns = 0;
		return 0;
	}
	if (!tl_empty_since_ns || now - tl_empty_last_ns > UIW_POLL_SPIN_NS)
		tl_empty_since_ns = now; /* a new run of empty polls */
	uint64_t idle = now - atomic_load_explicit(&cq->last_cqe_ns, memory_order_relaxed);
	if (cq->nap_ns >= 0 && idle > (uint64_t)cq->nap_ns &&
	    now - tl_empty_since_ns > (uint64_t)cq->nap_ns) {
		/* Spinning on nothing for a long while, here and at any CQ
		 * this thread polls (an RDMA Write target's poller, which
		 * sees no completion for the whole transfer): the
		 * thread sleeps UIW_POLL_NAP_NS per poll instead of spinning,
		 * so a host with few cores gives that CPU to the threads doing
		 * the work (the sender, the cipher). A stream's event ends the
		 * nap at once (a Read Request waits for no timer: ib_read_lat's
		 * responder naps for the whole test) and the next poll does it;
		 * the engine stays parked, as the poller is back within PARK_NS
		 * (progress.c) */
		int cs = uiw_nocancel_begin(); /* ibv_poll_cq is none */
		uiw_engine_nap(UIW_POLL_NAP_NS);
		uiw_nocancel_end(cs);
	} else if (cq->yield_ns >= 0 && idle > (uint64_t)cq->yield_ns) {
		/* A busy-polling thread that has found nothing for a while
		 * lets the threads doing the work (the engine, the peer's
		 * process, on a host with few cores) have its CPU: returns at
		 * once when nobody else wants it (as MPI's yield-when-idle) */
		sched_yield();
	}
	/* the end of this poll (its progress and nap included): the gap to the
	 * next is the caller's own */
	tl_empty_last_ns = uiw_now_ns();
	return 0;
}

int uiw_cq_arm(struct uiw_cq *cq, bool solicited_only, bool only_new)
{
	/* ibv_req_notify_cq is no cancellation point: the unpark and the
	 * callback write (eventfd, the event record) */
	int cs = uiw_nocancel_begin();
	/* the poller is about to sleep on the completion channel: the
	 * engine takes the streams back now */
	uiw_engine_unpark();
	pthread_mutex_lock(&cq->lock);
	/* Armed while completions wait to be polled: notify now, as hardware
	 * does (its consumer index lags the producer), so a consumer that
	 * polls a bounded batch per event never sleeps on a full CQ. With
	 * only_new, not for CQEs the last notification already covered (the
	 * count of unpolled CQEs is the newest `count`, of uncovered ones
	 * the newest `pushed - announced`: both non-zero means an unpolled
	 * CQE is uncovered). */
	bool fire =
	    !solicited_only && cq->count > 0 && cq->fn && (!only_new || cq->pushed > cq->announced);
	cq->armed = !fire;
	cq->solicited_only = solicited_only;
	if (fire)
		cq->announced = cq->pushed;
	pthread_mutex_unlock(&cq->lock);
	if (fire)
		cq->fn(cq, cq->ctx);
	uiw_nocancel_end(cs);
	return 0;
}

/* See rdmap/rdmap.h. */
bool uiw_cq_notify_unpolled(struct uiw_cq *cq)
{
	pthread_mutex_lock(&cq->lock);
	bool fire = cq->armed && !cq->solicited_only && cq->count > 0 && cq->fn;
	if (fire) {
		cq->armed = false;
		cq->announced = cq->pushed;
	}
	pthread_mutex_unlock(&cq->lock);
	if (fire)
		cq->fn(cq, cq->ctx);
	return fire;
}

/* See rdmap/internal.h. */
bool uiw_cq_drives(const struct uiw_cq *cq)
{
	int n = __atomic_load_n(&cq->nqps, __ATOMIC_RELAXED);
	return n > 0 && n <= CQ_SCAN_MAX;
}

/* See rdmap/internal.h. */
uint64_t uiw_cq_last_poll(const struct uiw_cq *cq)
{
	return atomic_load_explicit(&cq->last_poll_ns, memory_order_relaxed);
}

uint32_t uiw_cq_count(struct uiw_cq *cq)
{
	pthread_mutex_lock(&cq->lock);
	uint32_t n = cq->count;
	pthread_mutex_unlock(&cq->lock);
	return n;
}

bool uiw_cq_overflowed(struct uiw_cq *cq)
{
	pthread_mutex_lock(&cq->lock);
	bool o = cq->overflow;
	pthread_mutex_unlock(&cq->lock);
	return o;
}

bool uiw_cq_push(struct uiw_cq *cq, const struct uiw_wc *wc, bool solicited)
{
	bool fire = false;
	pthread_mutex_lock(&cq->lock);
	if (cq->count == cq->size) {
		cq->overflow = true;
		pthread_mutex_unlock(&cq->lock);
		return false;
	}
	uint32_t slot = cq->head + cq->count;
	if (slot >= cq->size)
		slot -= cq->size;
	cq->ring[slot] = *wc;
	cq->count++;
	cq->pushed++;
	/* verbs: an error CQE or a solicited one fires a solicited-only arm */
	if (cq->armed && (!cq->solicited_only || solicited || wc->status != UIW_WC_SUCCESS)) {
		cq->armed = false;
		fire = cq->fn != NULL;
		cq->announced = cq->pushed;
	}
	pthread_mutex_unlock(&cq->lock);
	if (fire)
		cq->fn(cq, cq->ctx);
	return true;
}

void uiw_cq_purge_qp(struct uiw_cq *cq, struct uiw_qp *qp)
{
	pthread_mutex_lock(&cq->lock);
	uint32_t kept = 0;
	for (uint32_t i = 0; i < cq->count; i++) {
		uint32_t from = (cq->head + i) % cq->size;
		if (cq->ring[from].qp_int == qp)
			continue;
		cq->ring[(cq->head + kept) % cq->size] = cq->ring[from];
		kept++;
	}
	cq->count = kept;
	pthread_mutex_unlock(&cq->lock);
}
