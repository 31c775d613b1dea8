/* See util/thread.h. */
#include <signal.h>

#include "util/thread.h"

int uiw_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	static const int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
	sigset_t block, old;

	sigfillset(&block);
	for (unsigned i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
		sigdelset(&block, sync_sigs[i]);
	pthread_sigmask(SIG_SETMASK, &block, &old);
	int e = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return e;
}
