/* Helpers shared by the iwpm client and responder (not installed). */
#ifndef UIWARP_IWPM_INTERNAL_H
#define UIWARP_IWPM_INTERNAL_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t iwpm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An integer environment variable in [lo, hi] (clamped), def if unset or
 * not a number. */
int iwpm_env_int(const char *name, int def, int lo, int hi);

#endif
