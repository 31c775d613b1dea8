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

#endif
