/* Threads that uiwarp starts inside an application's process. */
#ifndef UIWARP_UTIL_THREAD_H
#define UIWARP_UTIL_THREAD_H

#include <pthread.h>

/* pthread_create(t, NULL, fn, arg) with every asynchronous signal blocked
 * in the new thread from its first instruction on (its mask is set before
 * it runs), so a library thread never takes a signal the application
 * directs at its process (kill(getpid(), SIGUSR2) read through a
 * signalfd, as tgt does). The synchronous ones a fault raises in the
 * thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay
 * open, so the application's crash handlers and the sanitizers still see
 * them. Returns 0 or pthread_create's error number (EAGAIN, ...). */
int uiw_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* Cancellation off in the calling thread, for a stretch of a verbs call
 * that holds uiwarp's locks across calls that are cancellation points
 * (send, recv, epoll_wait, nanosleep): an application's pthread_cancel of
 * a thread inside ibv_poll_cq, ibv_post_send or ibv_get_cq_event must not
 * end it with a lock held (rping -P cancels its CQ thread when an accept
 * fails; the next ibv_destroy_cq then waited for the lock forever). A
 * cancel that comes meanwhile acts at the thread's next cancellation point
 * after uiw_nocancel_end. Returns the state uiw_nocancel_end restores. */
static inline int uiw_nocancel_begin(void)
{
	int old;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

/* Restores the cancel state uiw_nocancel_begin returned. */
static inline void uiw_nocancel_end(int old)
{
	pthread_setcancelstate(old, NULL);
}

#endif
