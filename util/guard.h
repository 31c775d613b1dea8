/* Fault-tolerant access to registered memory: copies that come back with
 * an error instead of killing the process when the memory is gone.
 *
 * uiwarp registers addresses, not pages (it cannot pin them the way an
 * RNIC's driver does, docs/design.md "Registered memory that goes away"):
 * an application that munmaps or mprotects memory it still has registered
 * leaves an STag the peer may still use. Every access uiwarp makes to
 * registered memory on the peer's behalf (placing a Write, a Send, a Read
 * Response; reading a Read Response's source; an Atomic) runs through
 * these calls, which turn the SIGSEGV / SIGBUS of a missing or protected
 * page into an error the protocol answers with a Terminate.
 *
 * How: one process-wide SIGSEGV and SIGBUS handler, installed once
 * (uiw_guard_init), and a per-thread jump buffer armed only for the length
 * of one guarded call (sigsetjmp without saving the signal mask: no
 * syscall; the handler restores the mask the fault interrupted before it
 * jumps back). A fault in a thread whose guard is not armed, or a signal
 * sent by kill(), goes to the handler that was installed before uiwarp's
 * (called as that handler would have been, SA_SIGINFO or not); if that was
 * the default action (or ignore), the default action is restored and the
 * fault re-raised, so the process dies as it would have without uiwarp.
 * A handler the application installs after uiw_guard_init replaces
 * uiwarp's: a fault in a guarded copy then reaches the application's
 * handler (as before uiwarp had one).
 */
#ifndef UIWARP_UTIL_GUARD_H
#define UIWARP_UTIL_GUARD_H

#include <stddef.h>

/* Installs the SIGSEGV and SIGBUS handlers (once per process; later calls
 * do nothing). Called at the first memory registration. 0, or -errno of
 * sigaction (then guarded calls still run, unguarded). */
int uiw_guard_init(void);

/* Runs fn(arg) with the calling thread's guard armed for the memory
 * [p, p + n) (the pages it spans): a fault there ends fn. A fault
 * anywhere else (a bug, or a signal handler of the application's that
 * interrupted fn) is not caught. Returns 0 when fn returned; -EFAULT when
 * it touched an address there with no mapping (SIGSEGV
 * SEGV_MAPERR) or a mapping with no page behind it (SIGBUS: a file
 * truncated under a shared mapping); -EACCES when it touched a page the
 * mapping's protection forbids (SIGSEGV SEGV_ACCERR, mprotect). On an
 * error fn was cut short at the faulting access: what it stored before
 * stays stored, nothing after it happened; fn must not hold a lock or
 * have allocated anything at that point. Nests (an inner call has its own
 * jump buffer). Async-signal-safe only in the sense that it may run in a
 * signal handler of the application's that itself is not guarded. */
int uiw_guard_run(void (*fn)(void *), void *arg, const void *p, size_t n);

/* memcpy(dst, src, n) under the guard (for faults in either range): 0,
 * -EFAULT, -EACCES (as uiw_guard_run; a fault leaves dst written up to
 * some point). */
int uiw_guard_memcpy(void *dst, const void *src, size_t n);

/* Reads one byte of every page of [p, p + n) and its last byte under the
 * guard: 0 when all of them are readable now, else -EFAULT / -EACCES. For
 * memory uiwarp hands to the kernel without reading it first (sendmsg of a
 * payload when no CRC is computed), so that a missing page is found before
 * any byte of the message is in the stream. */
int uiw_guard_probe(const void *p, size_t n);

#endif
