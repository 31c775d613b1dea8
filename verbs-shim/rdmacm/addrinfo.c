/* rdma_getaddrinfo(3) / rdma_freeaddrinfo(3) over getaddrinfo(3).
 * iWARP addresses are IP addresses: AF_IB, route data and connect data
 * are never produced.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

#include "cm_priv.h"

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *p = malloc(len);

	if (p)
		memcpy(p, sa, len);
	return p;
}

/* rdma_freeaddrinfo(3): frees a list from rdma_getaddrinfo (NULL is ok). */
CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

/* Copies the hints' address (sa, len) into *dst / *dst_len. 0, or -1 with
 * errno EINVAL (no address, or a length that fits no sockaddr) / ENOMEM. */
static int copy_hint_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *sa,
			  socklen_t len)
{
	if (!sa || len < sizeof(sa->sa_family) || len > sizeof(struct sockaddr_storage)) {
		errno = EINVAL;
		return -1;
	}
	*dst = dup_addr(sa, len);
	if (!*dst) {
		errno = ENOMEM;
		return -1;
	}
	*dst_len = len;
	return 0;
}

/* rdma_getaddrinfo(3): with node or service, resolves node (numeric or a
 * name; RAI_NUMERICHOST forbids lookups) and service (a port number or
 * service name; NULL gives port 0) into one rdma_addrinfo (the first
 * IPv4/IPv6 result): with RAI_PASSIVE the address is ai_src_addr (node
 * NULL: the wildcard), otherwise ai_dst_addr, and hints->ai_src_addr (if
 * ai_src_len) becomes ai_src_addr; ai_qp_type / ai_port_space come from
 * hints, default IBV_QPT_RC / RDMA_PS_TCP; ai_family from the address.
 * With neither node nor service, the result is built from hints alone, as
 * librdmacm does (libfabric's verbs provider relies on it): ai_flags,
 * ai_family, ai_qp_type, ai_port_space copied as they are, ai_dst_addr
 * copied from hints->ai_dst_addr if ai_dst_len, ai_src_addr from
 * hints->ai_src_addr if ai_src_len (either or both; none is a result with
 * no address). Returns 0 and *res (free with rdma_freeaddrinfo); -1 with
 * errno EINVAL (no res; no node, service or hints; a hint address with a
 * length but no pointer, or a length beyond sockaddr_storage), EOPNOTSUPP
 * (QP type not RC), EAFNOSUPPORT (family not IPv4/IPv6), ENOMEM; or, as
 * rdma-core does, the getaddrinfo EAI_* code (for gai_strerror) with errno
 * EADDRNOTAVAIL (EAI_NONAME, EAI_NODATA, EAI_AGAIN, EAI_FAIL), ENOMEM
 * (EAI_MEMORY), EINVAL (others). Source: rdma_getaddrinfo(3), rdma-core 44. */
CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo ah, *ai = NULL, *p;
	struct rdma_addrinfo *r;
	int flags = hints ? hints->ai_flags : 0;
	int ret;

	if (res)
		*res = NULL;
	if (!res || (!node && !service && !hints)) {
		errno = EINVAL;
		return -1;
	}
	if (hints && hints->ai_qp_type && hints->ai_qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return -1;
	}
	if (hints && hints->ai_family != AF_UNSPEC && hints->ai_family != AF_INET &&
	    hints->ai_family != AF_INET6) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (!node && !service) {
		/* from the hints alone */
		r = calloc(1, sizeof(*r));
		if (!r) {
			errno = ENOMEM;
			return -1;
		}
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		if ((hints->ai_dst_len && copy_hint_addr(&r->ai_dst_addr, &r->ai_dst_len,
							 hints->ai_dst_addr, hints->ai_dst_len)) ||
		    (hints->ai_src_len && copy_hint_addr(&r->ai_src_addr, &r->ai_src_len,
							 hints->ai_src_addr, hints->ai_src_len))) {
			int e = errno;

			rdma_freeaddrinfo(r);
			errno = e;
			return -1;
		}
		*res = r;
		return 0;
	}
	memset(&ah, 0, sizeof(ah));
	ah.ai_socktype = SOCK_STREAM;
	ah.ai_protocol = IPPROTO_TCP;
	ah.ai_family = hints ? hints->ai_family : AF_UNSPEC;
	if (flags & RAI_PASSIVE)
		ah.ai_flags |= AI_PASSIVE;
	if (flags & RAI_NUMERICHOST)
		ah.ai_flags |= AI_NUMERICHOST;
	ret = getaddrinfo(node, service, &ah, &ai);
	if (ret) {
		switch (ret) {
		case EAI_MEMORY:
			errno = ENOMEM;
			break;
		case EAI_SYSTEM:
			break;
		case EAI_NONAME:
		case EAI_NODATA:
		case EAI_AGAIN:
		case EAI_FAIL:
			errno = EADDRNOTAVAIL;
			break;
		default:
			errno = EINVAL;
		}
		return ret;
	}
	for (p = ai; p; p = p->ai_next)
		if (p->ai_family == AF_INET || p->ai_family == AF_INET6)
			break;
	if (!p) {
		freeaddrinfo(ai);
		errno = EADDRNOTAVAIL;
		return EAI_NONAME;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		goto nomem;
	r->ai_flags = flags;
	r->ai_family = p->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	if (flags & RAI_PASSIVE) {
		r->ai_src_addr = dup_addr(p->ai_addr, p->ai_addrlen);
		if (!r->ai_src_addr)
			goto nomem;
		r->ai_src_len = p->ai_addrlen;
	} else {
		r->ai_dst_addr = dup_addr(p->ai_addr, p->ai_addrlen);
		if (!r->ai_dst_addr)
			goto nomem;
		r->ai_dst_len = p->ai_addrlen;
		if (hints && hints->ai_src_len &&
		    copy_hint_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr,
				   hints->ai_src_len)) {
			int e = errno;

			freeaddrinfo(ai);
			rdma_freeaddrinfo(r);
			errno = e;
			return -1;
		}
	}
	freeaddrinfo(ai);
	*res = r;
	return 0;
nomem:
	freeaddrinfo(ai);
	rdma_freeaddrinfo(r);
	errno = ENOMEM;
	return EAI_MEMORY;
}
