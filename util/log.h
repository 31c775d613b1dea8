/* uiwarp's one log: UIWARP_LOG=error|warn|info|debug (docs/configuration.md,
 * "Logging"). Every line goes to stderr, whole (one write), as
 *
 *   uiwarp[PID] HH:MM:SS.mmm LEVEL [qp=N] [LOCAL->PEER] EVENT[: DETAIL]
 *
 * LOCAL and PEER are ADDR:PORT of the connection's TCP socket (IPv6 as
 * [ADDR]:PORT); qp= and the 4-tuple appear when the line is about one
 * connection. UIWARP_DEBUG=1 (the older switch) means UIWARP_LOG=debug.
 * The level is read once, when first needed.
 */
#ifndef UIWARP_UTIL_LOG_H
#define UIWARP_UTIL_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum uiw_log_level {
	UIW_LOG_NONE = 0, /* the default: nothing is logged */
	UIW_LOG_ERROR = 1,
	UIW_LOG_WARN = 2,
	UIW_LOG_INFO = 3,
	UIW_LOG_DEBUG = 4,
};

/* The configured level (UIW_LOG_*): UIWARP_LOG by name ("error", "warn",
 * "info", "debug", "none") or number 0-4; an unknown value is "warn";
 * unset, UIWARP_DEBUG set and not "0" means debug, else none. */
int uiw_log_level(void);

/* True when lines of level are logged: test this before building costly
 * detail. */
static inline int uiw_log_on(int level)
{
	return level <= uiw_log_level();
}

/* Logs one line at level (UIW_LOG_ERROR..DEBUG) if it is on. who is the
 * connection part ("qp=5 198.51.100.1:40000->198.51.100.2:7471") or NULL;
 * fmt/... is the event and its detail (printf format, no newline). The line
 * is cut at 1024 bytes. Never fails; errno is preserved. */
void uiw_log(int level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes "ADDR:PORT" of sa (AF_INET or AF_INET6, "[ADDR]:PORT") into
 * buf[0..n), NUL-terminated; "?" for another family. Returns buf. */
char *uiw_log_addr(const struct sockaddr *sa, char *buf, size_t n);

/* Writes "LOCAL->PEER" of the connected socket fd into buf[0..n) (what
 * getsockname / getpeername say; "?" for a side they cannot tell).
 * Returns buf. */
char *uiw_log_tuple(int fd, char *buf, size_t n);

#endif
