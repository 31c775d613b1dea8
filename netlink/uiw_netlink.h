/* What uiwarp asks the kernel over rtnetlink (libmnl), instead of parsing
 * /proc or /sys: the interfaces with their addresses, MTUs and hardware
 * addresses (for the verbs device list and its GIDs), and the route toward
 * a peer (output interface, source address, path MTU: the bound for the
 * MPA MULPDU).
 *
 * Source: rtnetlink(7), <linux/rtnetlink.h>, <linux/if_link.h>,
 * <linux/if_addr.h>; libmnl's API (netfilter.org/projects/libmnl).
 *
 * Every call opens its own NETLINK_ROUTE socket in the calling thread's
 * network namespace and closes it; no state, thread-safe, fork-safe. Errors
 * are negative errno values (the kernel's NLMSG_ERROR code, or the failing
 * system call's).
 */
#ifndef UIWARP_NETLINK_H
#define UIWARP_NETLINK_H

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* One interface address (RTM_GETADDR). */
struct uiw_nl_addr {
	int family;	   /* AF_INET or AF_INET6 */
	uint8_t addr[16];  /* network order; IPv4 in the first 4 bytes, rest 0
			      (IFA_LOCAL if present, else IFA_ADDRESS) */
	uint8_t prefixlen; /* bits */
	uint8_t scope;	   /* RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RT_SCOPE_HOST, ... */
	uint32_t flags;	   /* IFA_F_* (IFA_FLAGS if present, else ifa_flags) */
};

/* One interface (RTM_GETLINK) with its addresses. */
struct uiw_nl_link {
	int ifindex;
	char name[IF_NAMESIZE];
	unsigned int flags;	 /* IFF_UP, IFF_RUNNING, IFF_LOOPBACK, ... */
	unsigned int mtu;	 /* bytes, IFLA_MTU (L3 payload of one frame) */
	unsigned short type;	 /* ARPHRD_ETHER, ARPHRD_LOOPBACK, ... */
	uint8_t hwaddr[32];	 /* IFLA_ADDRESS (MAC for Ethernet) */
	unsigned int hwaddr_len; /* bytes, 0 if none */
	size_t n_addrs;
	struct uiw_nl_addr *addrs; /* n_addrs entries, owned by the list */
};

/* Lists the interfaces of the current network namespace, in ifindex order,
 * each with its IPv4 and IPv6 addresses. On success *links (free with
 * uiw_nl_links_free) and *n. A dump interrupted by a concurrent change
 * (NLM_F_DUMP_INTR) is asked again, up to 100 times. Returns 0, -ENOMEM,
 * -EINTR (interfaces changing all the time), -errno. */
int uiw_nl_links(struct uiw_nl_link **links, size_t *n);
void uiw_nl_links_free(struct uiw_nl_link *links, size_t n);

/* One interface by index, without addresses (n_addrs 0, addrs NULL).
 * Returns 0, -ENODEV, -errno. */
int uiw_nl_link_get(int ifindex, struct uiw_nl_link *out);

/* The kernel's route toward a destination (RTM_GETROUTE, as `ip route
 * get`). */
struct uiw_nl_route {
	unsigned char type; /* RTN_UNICAST, RTN_LOCAL (a local address), ... */
	int ifindex;	    /* output interface (RTA_OIF) */
	char ifname[IF_NAMESIZE];
	struct sockaddr_storage src;	 /* RTA_PREFSRC: the source address the kernel
					    picks; ss_family 0 if none; port 0 */
	struct sockaddr_storage gateway; /* RTA_GATEWAY; ss_family 0 if on-link */
	unsigned int route_mtu;		 /* RTAX_MTU of RTA_METRICS: the route's mtu or a
					    learned path MTU; 0 if none */
	unsigned int link_mtu;		 /* the output interface's MTU */
	unsigned int path_mtu;		 /* route_mtu if non-zero, else link_mtu (bytes) */
};

/* Looks up the route toward dst (AF_INET or AF_INET6; the port is
 * ignored; an IPv6 sin6_scope_id, as for link-local addresses, selects the
 * output interface), optionally from src (NULL: any). Returns 0 and *out,
 * -ENETUNREACH / -EHOSTUNREACH (no route), -EAFNOSUPPORT, -EINVAL, -errno. */
int uiw_nl_route_get(const struct sockaddr *dst, const struct sockaddr *src,
		     struct uiw_nl_route *out);

/* Upper bound for a TCP segment's payload on a path of path_mtu bytes
 * (family AF_INET: - 20 IP - 20 TCP - 12 timestamps; AF_INET6: - 40 IP -
 * 20 - 12), i.e. what one FPDU may occupy when it must fit one segment
 * (RFC 5044 §4: MULPDU <= EMSS). 0 if path_mtu is too small. The connected
 * socket's TCP_MAXSEG is exact; this is the bound before connecting. */
unsigned int uiw_nl_tcp_payload_bound(unsigned int path_mtu, int family);

#endif
