/* See util/log.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

static int level = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void level_load(void)
{
	const char *v = getenv("UIWARP_LOG");
	static const char *const names[] = {"none", "error", "warn", "info", "debug"};
	if (v && *v) {
		level = UIW_LOG_WARN;
		for (int i = 0; i < 5; i++)
			if (!strcasecmp(v, names[i]) || (v[0] == '0' + i && !v[1]))
				level = i;
		if (!strcasecmp(v, "warning"))
			level = UIW_LOG_WARN;
		return;
	}
	const char *d = getenv("UIWARP_DEBUG");
	level = d && *d && strcmp(d, "0") ? UIW_LOG_DEBUG : UIW_LOG_NONE;
}

int uiw_log_level(void)
{
	if (level < 0)
		pthread_once(&once, level_load);
	return level;
}

void uiw_log(int lvl, const char *who, const char *fmt, ...)
{
	static const char *const names[] = {"none", "error", "warn", "info", "debug"};
	if (lvl < UIW_LOG_ERROR || lvl > UIW_LOG_DEBUG || !uiw_log_on(lvl))
		return;
	int saved = errno;
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "uiwarp[%ld] %02d:%02d:%02d.%03ld %s %s%s",
			 (long)getpid(), tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			 names[lvl], who ? who : "", who ? " " : "");
	if (n > 0 && (size_t)n < sizeof(line)) {
		va_list ap;
		va_start(ap, fmt);
		int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
		va_end(ap);
		if (m > 0)
			n = (size_t)(n + m) < sizeof(line) - 1 ? n + m : (int)sizeof(line) - 2;
		line[n++] = '\n';
		(void)!write(STDERR_FILENO, line, (size_t)n);
	}
	errno = saved;
}

char *uiw_log_addr(const struct sockaddr *sa, char *buf, size_t n)
{
	char a[INET6_ADDRSTRLEN];
	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, n, "%s:%u", a, ntohs(s->sin_port));
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, n, "[%s]:%u", a, ntohs(s->sin6_port));
	} else {
		snprintf(buf, n, "?");
	}
	return buf;
}

char *uiw_log_tuple(int fd, char *buf, size_t n)
{
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	char a[64], b[64];
	if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0)
		l.ss_family = AF_UNSPEC;
	if (getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
		p.ss_family = AF_UNSPEC;
	snprintf(buf, n, "%s->%s", uiw_log_addr((struct sockaddr *)&l, a, sizeof(a)),
		 uiw_log_addr((struct sockaddr *)&p, b, sizeof(b)));
	return buf;
}
