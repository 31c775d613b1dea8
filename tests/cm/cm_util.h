/* Helpers shared by the rdma_cm tests: bounded event waits. */
#ifndef UIWARP_TESTS_CM_UTIL_H
#define UIWARP_TESTS_CM_UTIL_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>

/* Waits up to ms for the next event of ch (poll on ch->fd, then
 * rdma_get_cm_event). Returns the event or NULL on timeout / error. */
static inline struct rdma_cm_event *cm_wait_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev = NULL;

	if (poll(&p, 1, ms) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

/* Waits for an event of type want; prints what came instead. Returns it
 * (the caller acks) or NULL. */
static inline struct rdma_cm_event *cm_expect(struct rdma_event_channel *ch,
					      enum rdma_cm_event_type want, int ms)
{
	struct rdma_cm_event *ev = cm_wait_event(ch, ms);

	if (!ev) {
		fprintf(stderr, "no event (wanted %s)\n", rdma_event_str(want));
		return NULL;
	}
	if (ev->event != want) {
		fprintf(stderr, "got %s status %d, wanted %s\n", rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	return ev;
}

#endif
