/* util/guard.c: guarded copies come back with -EFAULT / -EACCES instead of
 * a crash, and every fault that is not a guarded copy's still reaches
 * whoever had it before (an earlier handler, the default action, a
 * sanitizer). Each case runs in a child forked from a main that installs
 * no handler of its own (cmocka's per-test SIGSEGV handlers would be the
 * "earlier handler" here, so this test does without cmocka); a case that
 * must end its process ends the child. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>

#include "util/guard.h"

#define PG 4096u

/* A failed check ends the child with status 1. */
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

/* Three pages: 0 read-write, 1 unmapped, 2 read-only. */
static uint8_t *three_pages(void)
{
	uint8_t *p = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	memset(p, 0x5a, 3 * PG);
	CHECK(munmap(p + PG, PG) == 0);
	CHECK(mprotect(p + 2 * PG, PG, PROT_READ) == 0);
	return p;
}

static void copies(void)
{
	uint8_t buf[256], *p = three_pages();

	CHECK(uiw_guard_init() == 0);
	memset(buf, 0xa5, sizeof(buf));
	/* into mapped memory: done */
	CHECK(uiw_guard_memcpy(p + 16, buf, sizeof(buf)) == 0);
	CHECK(memcmp(p + 16, buf, sizeof(buf)) == 0);
	/* into the unmapped page, from it, across into it */
	CHECK(uiw_guard_memcpy(p + PG + 8, buf, 64) == -EFAULT);
	CHECK(uiw_guard_memcpy(buf, p + PG + 8, 64) == -EFAULT);
	CHECK(uiw_guard_memcpy(p + PG - 100, buf, 200) == -EFAULT);
	/* into the read-only page: -EACCES, nothing written; reading it works */
	CHECK(uiw_guard_memcpy(p + 2 * PG, buf, 64) == -EACCES);
	CHECK(p[2 * PG] == 0x5a);
	CHECK(uiw_guard_memcpy(buf, p + 2 * PG, 64) == 0);
	/* probes */
	CHECK(uiw_guard_probe(p, PG) == 0);
	CHECK(uiw_guard_probe(p, PG + 1) == -EFAULT);
	CHECK(uiw_guard_probe(p + 2 * PG, PG) == 0);
	/* many in a row (no signal mask left blocked, no state left armed) */
	for (int i = 0; i < 1000; i++)
		CHECK(uiw_guard_memcpy(p + PG, buf, 8) == -EFAULT);
	CHECK(uiw_guard_memcpy(p, buf, 8) == 0);
	munmap(p, PG);
	munmap(p + 2 * PG, PG);
	_exit(0);
}

struct store8 {
	volatile uint64_t *p;
};

static void do_store(void *arg)
{
	*((struct store8 *)arg)->p = 1;
}

/* A fault outside the range the guard was armed for is not the guard's:
 * with the default action behind it (or a sanitizer's handler) the child
 * dies. */
static void fault_outside_range(void)
{
	uint8_t *p = three_pages();
	struct store8 a = {(volatile uint64_t *)(p + PG)};

	CHECK(uiw_guard_init() == 0);
	/* armed for page 0, faults on page 1 */
	(void)uiw_guard_run(do_store, &a, p, 8);
	_exit(0);
}

/* A fault outside any guarded copy reaches a handler the program had
 * installed before uiwarp's: here one that jumps out (exit 7). */
static sigjmp_buf child_env;

static void child_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code > 0)
		siglongjmp(child_env, 1);
}

static void chains_to_previous(void)
{
	struct sigaction sa;
	uint8_t *p = mmap(NULL, PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = child_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	/* the program's handler first (as a sanitizer's is), uiwarp's on top */
	CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
	CHECK(uiw_guard_init() == 0);
	if (sigsetjmp(child_env, 1) == 0) {
		uint8_t b = 1;

		/* a guarded fault never reaches the program's handler */
		CHECK(uiw_guard_memcpy(p, &b, 1) == -EACCES);
		*(volatile uint8_t *)p = 1; /* an unguarded fault */
		_exit(4);
	}
	/* and guarded copies still work after the program's handler ran */
	uint8_t b = 1;
	CHECK(uiw_guard_memcpy(p, &b, 1) == -EACCES);
	_exit(7);
}

/* A SIGSEGV sent with raise() is never taken for a guarded copy's fault:
 * with the default action behind uiwarp's handler the child dies of it. */
static void sent_signal(void)
{
	CHECK(uiw_guard_init() == 0);
	raise(SIGSEGV);
	_exit(0);
}

/* Runs fn in a child; want_exit >= 0: it must exit with that status; -1:
 * it must die (a signal, or a sanitizer's non-zero exit). */
static int run(const char *name, void (*fn)(void), int want_exit)
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		return 1;
	if (pid == 0) {
		alarm(20);
		fn();
		_exit(0);
	}
	if (waitpid(pid, &st, 0) != pid)
		return 1;
	bool ok = want_exit >= 0 ? WIFEXITED(st) && WEXITSTATUS(st) == want_exit
				 : !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("%s %s (status 0x%x)\n", ok ? "ok  " : "FAIL", name, st);
	return ok ? 0 : 1;
}

int main(void)
{
	int bad = 0;

	setvbuf(stdout, NULL, _IONBF, 0);
	bad += run("guarded copies: -EFAULT / -EACCES, nothing left armed", copies, 0);
	bad += run("a fault outside the guarded range is not caught", fault_outside_range, -1);
	bad += run("an unguarded fault reaches the earlier handler", chains_to_previous, 7);
	bad += run("a sent SIGSEGV keeps its default action", sent_signal, -1);
	return bad ? 1 : 0;
}
