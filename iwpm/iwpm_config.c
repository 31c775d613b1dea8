/* iwpm environment variables (documented in iwpm/iwpm.h, docs/iwpm.md). */
#include <errno.h>
#include <stdlib.h>

#include "iwpm/iwpm.h"
#include "iwpm/iwpm_internal.h"

int iwpm_env_int(const char *name, int def, int lo, int hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end)
		return def;
	if (v < lo)
		return lo;
	if (v > hi)
		return hi;
	return (int)v;
}

bool iwpm_enabled(void)
{
	return iwpm_env_int("UIWARP_IWPM", 1, 0, 1) != 0;
}

int iwpm_timeout_ms(void)
{
	return iwpm_env_int("UIWARP_IWPM_TIMEOUT_MS", IWPM_DEFAULT_TIMEOUT_MS, 0,
			    IWPM_MAX_TIMEOUT_MS);
}

const char *iwpm_outcome_str(enum iwpm_outcome o)
{
	switch (o) {
	case IWPM_ACCEPTED:
		return "accepted";
	case IWPM_REJECTED:
		return "rejected";
	case IWPM_TIMEDOUT:
		return "timed out";
	case IWPM_NO_MAPPER:
		return "no port mapper (ICMP unreachable)";
	case IWPM_DISABLED:
		return "disabled";
	case IWPM_SEND_FAILED:
		return "send failed";
	}
	return "?";
}
