/* Fault-tolerant access to registered memory (util/guard.h). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#include "util/guard.h"

/* Pages are at least this large: a fault counts as the guarded access's
 * when it lies in a page the access spans (vector copies may report the
 * start of a wide load). */
#define GUARD_PAGE 4096u

/* The calling thread's armed guard: where to jump, and the address ranges
 * [lo, hi) the guarded code was given (a fault elsewhere is not ours). In
 * static TLS (initial-exec): the handler reads it without a call that
 * could allocate. */
struct guard {
	sigjmp_buf *env;
	uintptr_t lo[2], hi[2];
	int err;
};
static __thread struct guard guard __attribute__((tls_model("initial-exec")));

static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_init_err;
static struct sigaction prev_segv, prev_bus;

/* Hands a fault that is not a guarded access's to whoever would have had
 * it without uiwarp. */
static void chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *p = sig == SIGBUS ? &prev_bus : &prev_segv;
	bool sent = si->si_code <= 0; /* kill, tgkill, sigqueue: not a fault */

	if (p->sa_flags & SA_RESETHAND) {
		struct sigaction dfl = {.sa_handler = SIG_DFL};

		sigemptyset(&dfl.sa_mask);
		sigaction(sig, &dfl, NULL);
	}
	if (p->sa_flags & SA_SIGINFO) {
		if (p->sa_sigaction)
			p->sa_sigaction(sig, si, uc);
		return;
	}
	if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
		p->sa_handler(sig);
		return;
	}
	if (p->sa_handler == SIG_IGN && sent)
		return;
	/* the default action: a fault happens again when the handler
	 * returns, a sent signal is sent again (it stays pending until then) */
	struct sigaction dfl = {.sa_handler = SIG_DFL};

	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	if (sent)
		raise(sig);
}

static bool in_range(const struct guard *g, uintptr_t a)
{
	for (int i = 0; i < 2; i++)
		if (a >= (g->lo[i] & ~(uintptr_t)(GUARD_PAGE - 1)) && a < g->hi[i])
			return true;
	return false;
}

static void on_fault(int sig, siginfo_t *si, void *ucv)
{
	struct guard *g = &guard;
	int saved_errno = errno;

	if (g->env && si->si_code > 0 && in_range(g, (uintptr_t)si->si_addr)) {
		sigjmp_buf *env = g->env;
		const ucontext_t *uc = ucv;

		g->env = NULL;
		g->err = sig == SIGSEGV && si->si_code != SEGV_MAPERR ? -EACCES : -EFAULT;
		/* the jump does not restore the mask (no syscall to save it
		 * when arming): take back the one the fault interrupted */
		pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
		siglongjmp(*env, 1);
	}
	chain(sig, si, ucv);
	errno = saved_errno;
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	/* SA_ONSTACK: a handler chained to may rely on its thread's
	 * alternate stack (stack overflow handlers) */
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &prev_segv) || sigaction(SIGBUS, &sa, &prev_bus))
		guard_init_err = -errno;
}

/* See util/guard.h. */
int uiw_guard_init(void)
{
	pthread_once(&guard_once, install);
	return guard_init_err;
}

static uintptr_t page_end(const void *p, size_t n)
{
	uintptr_t e = (uintptr_t)p + n;

	return (e + GUARD_PAGE - 1) & ~(uintptr_t)(GUARD_PAGE - 1);
}

/* fn(arg) with the guard armed for the ranges [a, a + an) and [b, b + bn). */
static int guarded(void (*fn)(void *), void *arg, const void *a, size_t an, const void *b,
		   size_t bn)
{
	struct guard *g = &guard;
	const struct guard saved = *g;
	sigjmp_buf env;

	if (sigsetjmp(env, 0)) {
		int err = g->err;

		*g = saved;
		return err;
	}
	g->lo[0] = (uintptr_t)a;
	g->hi[0] = page_end(a, an);
	g->lo[1] = (uintptr_t)b;
	g->hi[1] = page_end(b, bn);
	atomic_signal_fence(memory_order_seq_cst);
	g->env = &env;
	atomic_signal_fence(memory_order_seq_cst);
	fn(arg);
	atomic_signal_fence(memory_order_seq_cst);
	*g = saved;
	return 0;
}

struct copy_args {
	void *dst;
	const void *src;
	size_t n;
};

static void do_copy(void *arg)
{
	const struct copy_args *c = arg;

	memcpy(c->dst, c->src, c->n);
}

struct probe_args {
	const volatile uint8_t *p;
	size_t n;
};

static void do_probe(void *arg)
{
	const struct probe_args *a = arg;
	uintptr_t base = (uintptr_t)a->p;

	for (size_t off = 0; off < a->n; off += GUARD_PAGE - ((base + off) & (GUARD_PAGE - 1)))
		(void)a->p[off];
	(void)a->p[a->n - 1];
}

/* See util/guard.h. */
int uiw_guard_run(void (*fn)(void *), void *arg, const void *p, size_t n)
{
	return guarded(fn, arg, p, n, NULL, 0);
}

/* See util/guard.h. */
int uiw_guard_memcpy(void *dst, const void *src, size_t n)
{
	struct copy_args c = {dst, src, n};

	if (!n)
		return 0;
	return guarded(do_copy, &c, dst, n, src, n);
}

/* See util/guard.h. */
int uiw_guard_probe(const void *p, size_t n)
{
	struct probe_args a = {p, n};

	if (!n)
		return 0;
	return guarded(do_probe, &a, p, n, NULL, 0);
}
