/* librdmacm.so.1 (ours): addresses, bind and resolution: rdma_bind_addr(3),
 * rdma_resolve_addr(3), rdma_resolve_route(3), rdma_get_src_port(3),
 * rdma_get_dst_port(3), rdma_set_option(3). Routes come from the kernel's
 * routing table over rtnetlink (netlink/uiw_netlink.h). rdma_getaddrinfo(3)
 * is in addrinfo.c.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/rtnetlink.h>

#include <rdma/rdma_cma.h>

#include "netlink/uiw_netlink.h"
#include "cm_priv.h"

/* ----------------------------------------------------------- addresses */

socklen_t cm_addr_len(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		return sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET6)
		return sizeof(struct sockaddr_in6);
	return 0;
}

bool cm_addr_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

/* True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x. */
static bool addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static in_port_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

void cm_addr_set_port(struct sockaddr *sa, in_port_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = port;
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = port;
}

static void addr_copy(struct sockaddr_storage *dst, const struct sockaddr *src)
{
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, src, cm_addr_len(src));
}

/* ---------------------------------------------------------- bind, resolve */

/* Binds a TCP socket (SO_REUSEADDR) to addr and closes it: checks that
 * the address is local and the port not held by a listener; port 0 is
 * replaced by the port the kernel picked. An IPv6 socket first reports the
 * namespace's default IPV6_V6ONLY (net.ipv6.bindv6only) in *v6only_dflt and
 * then gets afonly (0/1; -1: that default), so the check is the one
 * rdma_listen's socket will meet. 0, or -1 with errno of bind. */
static int pick_port(struct sockaddr *addr, int afonly, bool *v6only_dflt)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int one = 1, fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6) {
		int v = 0;
		socklen_t vl = sizeof(v);

		if (!getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl))
			*v6only_dflt = v != 0;
		if (afonly >= 0)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &afonly, sizeof(afonly));
	}
	if (bind(fd, addr, cm_addr_len(addr)) || getsockname(fd, (struct sockaddr *)&ss, &len)) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	cm_addr_set_port(addr, addr_port((struct sockaddr *)&ss));
	return 0;
}

/* rdma_bind_addr(3): binds id to a local IPv4/IPv6 address and port (port
 * 0: a free port is picked now, readable with rdma_get_src_port). A
 * non-wildcard address also sets id->verbs to this library's device
 * context and id->pd to the device's PD (librdmacm's per-device PD); a
 * wildcard one leaves both NULL until a connection request (kernel rdma_cm
 * behaviour), and so does a loopback address (127.0.0.0/8, ::1) while the
 * device's port is on another interface (cm_port_on_loopback): the kernel
 * gives a loopback bind no device unless one sits on lo, and libfabric's
 * verbs provider depends on it (a wildcard fi_getinfo binds "localhost" and
 * names its endpoints after the device's own addresses only when that bind
 * has no device, docs/verbs.md). Connections to and from loopback
 * addresses still run over the device (resolve, connection requests). 0, or -1 with errno EINVAL
 * (NULL, state), EAFNOSUPPORT, EADDRNOTAVAIL (address not local), EADDRINUSE (a listener holds the
 * port), ENODEV. The TCP port itself is taken by rdma_listen (SO_REUSEADDR) or by the connection,
 * not here. A port held by a socket other than this process's rdma_cm listeners is bound, and
 * mapped by rdma_listen to a free port that initiators learn from the port mapper, when this
 * process answers for the host's port mapper (uiw_listen_mappable); else EADDRINUSE. An IPv6
 * address is checked with IPV6_V6ONLY as RDMA_OPTION_ID_AFONLY says, or, when it was not set, as
 * the namespace's net.ipv6.bindv6only (the kernel rdma_cm's default, cma.c cma_bind_addr): so an
 * AFONLY [::]:P binds beside a listener on 0.0.0.0:P. */
CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *rid, struct sockaddr *addr)
{
	struct cm_id *id = cm_id_of(rid);
	struct sockaddr_storage ss;
	bool mapped;

	if (!rid || !addr) {
		errno = EINVAL;
		return -1;
	}
	if (!cm_addr_len(addr)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (id->state != CM_IDLE) {
		errno = EINVAL;
		return -1;
	}
	addr_copy(&ss, addr);
	/* the address must be local and the port not held by a listener;
	 * port 0 becomes a free port. A port held by a socket that is not one
	 * of our rdma_cm listeners (tgtd's iSCSI/TCP portal on 3260 before its
	 * iSER portal binds 3260) is mapped when rdma_listen listens, as the
	 * port mapper maps an RNIC's listener (docs/iwpm.md). */
	mapped = false;
	if (pick_port((struct sockaddr *)&ss, id->afonly, &id->v6only_dflt)) {
		if (errno != EADDRINUSE)
			return -1;
		if (!uiw_listen_mappable(addr,
					 id->afonly >= 0 ? id->afonly != 0 : id->v6only_dflt)) {
			errno = EADDRINUSE;
			return -1;
		}
		mapped = true;
	}
	if (!cm_addr_is_any(addr) && !(addr_is_loopback(addr) && !cm_port_on_loopback()) &&
	    cm_attach_device(rid))
		return -1;
	memcpy(&rid->route.addr.src_storage, &ss, sizeof(ss));
	/* a mapped id that connects instead takes a free source port */
	id->explicit_port = addr_port(addr) != 0 && !mapped;
	id->bound = true;
	id->state = CM_BOUND;
	return 0;
}

/* The kernel's route toward dst (from src if not NULL) over rtnetlink
 * (uiw_nl_route_get): 0 and *rt for a unicast or local destination, else
 * -errno as the kernel's route lookup gives it (ENETUNREACH: no route;
 * EHOSTUNREACH, EACCES, EINVAL: unreachable, prohibit, blackhole routes). */
static int route_lookup(const struct sockaddr *dst, const struct sockaddr *src,
			struct uiw_nl_route *rt)
{
	int r = uiw_nl_route_get(dst, src, rt);

	if (r)
		return r;
	switch (rt->type) {
	case RTN_UNICAST:
	case RTN_LOCAL:
		return 0;
	case RTN_UNREACHABLE:
		return -EHOSTUNREACH;
	case RTN_PROHIBIT:
		return -EACCES;
	case RTN_BLACKHOLE:
		return -EINVAL;
	default:
		return -ENETUNREACH;
	}
}

/* rdma_resolve_addr(3): resolves dst_addr with the kernel's route toward
 * it (rtnetlink RTM_GETROUTE, as `ip route get`; for an IPv6 link-local
 * destination its sin6_scope_id picks the interface) and, unless the id
 * is bound to a specific address or src_addr is given, takes the source
 * address that route prefers (RTA_PREFSRC; an IPv6 link-local source
 * gets the route's interface as scope id). Queues ADDR_RESOLVED, or
 * ADDR_ERROR with status -errno (-ENETUNREACH no route, -EHOSTUNREACH /
 * -EACCES / -EINVAL unreachable / prohibit / blackhole route, as
 * librdmacm on the kernel rdma_cm reports them); synchronous ids wait for
 * it. No neighbour (ARP/ND) resolution: a route to a host that does not
 * answer resolves, and rdma_connect then reports UNREACHABLE. Sets
 * id->verbs and id->pd (the device's PD, as librdmacm). 0, or -1 with errno EINVAL, EAFNOSUPPORT,
 * ENODEV, ENOMEM. timeout_ms is unused (resolution is immediate). */
CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *rid, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_nl_route rt;
	bool any_src;
	int status;

	(void)timeout_ms;
	if (!rid || !dst_addr) {
		errno = EINVAL;
		return -1;
	}
	if (!cm_addr_len(dst_addr) ||
	    (src_addr && cm_addr_len(src_addr) && src_addr->sa_family != dst_addr->sa_family)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (id->state != CM_IDLE && id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED) {
		errno = EINVAL;
		return -1;
	}
	if (src_addr && cm_addr_len(src_addr) && !id->bound) {
		if (rdma_bind_addr(rid, src_addr))
			return -1;
	}
	addr_copy(&rid->route.addr.dst_storage, dst_addr);
	any_src = !id->bound || cm_addr_is_any(&rid->route.addr.src_addr);
	status = route_lookup(dst_addr, any_src ? NULL : &rid->route.addr.src_addr, &rt);
	if (!status && any_src) {
		in_port_t port = id->bound ? addr_port(&rid->route.addr.src_addr) : 0;
		struct sockaddr_storage src;

		memcpy(&src, &rt.src, sizeof(src));
		if (src.ss_family != dst_addr->sa_family) {
			status = -EADDRNOTAVAIL; /* no source address on that route */
		} else {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&src;

			if (src.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
				s6->sin6_scope_id = (uint32_t)rt.ifindex;
			cm_addr_set_port((struct sockaddr *)&src, port);
			memcpy(&rid->route.addr.src_storage, &src, sizeof(src));
		}
	}
	if (!status && cm_attach_device(rid))
		status = errno ? -errno : -ENODEV;
	if (!status)
		id->state = CM_ADDR_RESOLVED;
	if (cm_post_simple(id, status ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED,
			   status))
		return -1;
	if (id->sync)
		return cm_sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED);
	return 0;
}

/* rdma_resolve_route(3): iWARP has no path records; checks that the route
 * toward the resolved destination still exists (rtnetlink, as in
 * rdma_resolve_addr) and queues ROUTE_RESOLVED, or ROUTE_ERROR with status
 * -errno (synchronous ids wait for it). 0, or -1 with errno EINVAL
 * (address not resolved). */
CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *rid, int timeout_ms)
{
	struct cm_id *id = cm_id_of(rid);
	struct uiw_nl_route rt;
	int status;

	(void)timeout_ms;
	if (!rid || (id->state != CM_ADDR_RESOLVED && id->state != CM_ROUTE_RESOLVED)) {
		errno = EINVAL;
		return -1;
	}
	status = route_lookup(
	    &rid->route.addr.dst_addr,
	    cm_addr_is_any(&rid->route.addr.src_addr) ? NULL : &rid->route.addr.src_addr, &rt);
	if (!status)
		id->state = CM_ROUTE_RESOLVED;
	rid->route.num_paths = 0;
	rid->route.path_rec = NULL;
	if (cm_post_simple(id, status ? RDMA_CM_EVENT_ROUTE_ERROR : RDMA_CM_EVENT_ROUTE_RESOLVED,
			   status))
		return -1;
	if (id->sync)
		return cm_sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return 0;
}

/* rdma_get_src_port(3) / rdma_get_dst_port(3): the bound / peer port in
 * network byte order, 0 if none. */
CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? addr_port(&id->route.addr.src_addr) : 0;
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? addr_port(&id->route.addr.dst_addr) : 0;
}

/* rdma_set_option(3): level RDMA_OPTION_ID. AFONLY (an int, non-zero:
 * true) is honoured as the kernel rdma_cm does (rdma_set_afonly): allowed
 * while the id is idle or bound, it makes an IPv6 id's bind and listen
 * IPv6-only (IPV6_V6ONLY), so [::]:P and 0.0.0.0:P can listen side by side
 * (tgt binds one id per getaddrinfo address, afonly each); an id where it
 * is not set follows net.ipv6.bindv6only (normally 0: IPv4-mapped
 * connections too); errors: EINVAL (optlen not sizeof(int), or the id is
 * past bind). TOS (a uint8_t, else EINVAL) is the connection's IP TOS /
 * IPv6 traffic class byte (DSCP + ECN) on its TCP socket, set on a
 * listening id for the connections it accepts, as the kernel rdma_cm
 * passes it to an iWARP device (iw_cm_id tos); it applies from the next
 * rdma_connect / rdma_accept. ACK_TIMEOUT (InfiniBand's local ACK timeout;
 * the kernel applies it to InfiniBand QPs only; uiwarp's counterpart is
 * UIWARP_DEAD_PEER_MS) and REUSEADDR are accepted and ignored (0; the TCP
 * listener always uses SO_REUSEADDR). Anything else: -1 with errno
 * ENOSYS; NULL id or optval: EINVAL. */
CM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			      size_t optlen)
{
	if (!id || !optval) {
		errno = EINVAL;
		return -1;
	}
	if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_AFONLY) {
		struct cm_id *p = cm_id_of(id);
		int v;

		if (optlen != sizeof(int) || (p->state != CM_IDLE && p->state != CM_BOUND)) {
			errno = EINVAL;
			return -1;
		}
		memcpy(&v, optval, sizeof(v));
		p->afonly = v ? 1 : 0;
		return 0;
	}
	if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_TOS) {
		uint8_t v;

		if (optlen != sizeof(uint8_t)) {
			errno = EINVAL;
			return -1;
		}
		memcpy(&v, optval, sizeof(v));
		cm_id_of(id)->tos = v;
		return 0;
	}
	if (level == RDMA_OPTION_ID &&
	    (optname == RDMA_OPTION_ID_ACK_TIMEOUT || optname == RDMA_OPTION_ID_REUSEADDR))
		return 0;
	errno = ENOSYS;
	return -1;
}
