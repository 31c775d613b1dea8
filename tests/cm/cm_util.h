/* Helpers shared by the rdma_cm tests: bounded event waits. */
#ifndef UIWARP_TESTS_CM_UTIL_H
#define UIWARP_TESTS_CM_UTIL_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

/* Whether the device's port is on the loopback interface (GID 0's
 * interface, ibv_query_gid_ex ndev_ifindex), which decides whether
 * rdma_bind_addr to 127.0.0.1 / ::1 gives the id a device (docs/verbs.md).
 * The test's own look, made as a program would make it. */
static inline bool cm_port_on_lo(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	struct ibv_gid_entry ge;
	struct ifreq ifr;
	bool lo = true;
	int fd;

	memset(&ifr, 0, sizeof(ifr));
	if (ctx && !ibv_query_gid_ex(ctx, 1, 0, &ge, 0) && ge.ndev_ifindex &&
	    if_indextoname(ge.ndev_ifindex, ifr.ifr_name)) {
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd >= 0 && !ioctl(fd, SIOCGIFFLAGS, &ifr))
			lo = (ifr.ifr_flags & IFF_LOOPBACK) != 0;
		if (fd >= 0)
			close(fd);
	}
	if (ctx)
		ibv_close_device(ctx);
	if (l)
		ibv_free_device_list(l);
	return lo;
}

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
