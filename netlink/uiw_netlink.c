/* rtnetlink queries over libmnl (see uiw_netlink.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include "netlink/uiw_netlink.h"

#define NL_BUF_SIZE 32768 /* > one page: dumps are sent in page-sized batches */

struct nl {
	struct mnl_socket *sk;
	unsigned int portid;
	unsigned int seq;
	char *buf;
};

static int nl_open(struct nl *nl)
{
	memset(nl, 0, sizeof(*nl));
	nl->buf = malloc(NL_BUF_SIZE);
	if (!nl->buf)
		return -ENOMEM;
	nl->sk = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!nl->sk || mnl_socket_bind(nl->sk, 0, MNL_SOCKET_AUTOPID) < 0) {
		int e = -errno;

		if (nl->sk)
			mnl_socket_close(nl->sk);
		free(nl->buf);
		return e ? e : -EIO;
	}
	nl->portid = mnl_socket_get_portid(nl->sk);
	nl->seq = (unsigned int)time(NULL);
	return 0;
}

static void nl_close(struct nl *nl)
{
	mnl_socket_close(nl->sk);
	free(nl->buf);
}

static struct nlmsghdr *nl_req(struct nl *nl, uint16_t type, uint16_t flags)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(nl->buf);

	h->nlmsg_type = type;
	/* a single request asks for an ACK, so its answer ends with one */
	h->nlmsg_flags = NLM_F_REQUEST | (flags & NLM_F_DUMP ? flags : flags | NLM_F_ACK);
	h->nlmsg_seq = ++nl->seq;
	return h;
}

/* Sends h and runs cb over the answers until the end of the dump or the
 * single answer. Returns 0 or -errno (the kernel's error included). */
static int nl_talk(struct nl *nl, struct nlmsghdr *h, mnl_cb_t cb, void *data)
{
	unsigned int seq = h->nlmsg_seq;
	int r;

	if (mnl_socket_sendto(nl->sk, h, h->nlmsg_len) < 0)
		return -errno;
	for (int i = 0; i < 100000; i++) {
		ssize_t n = mnl_socket_recvfrom(nl->sk, nl->buf, NL_BUF_SIZE);

		if (n < 0)
			return -errno;
		r = mnl_cb_run(nl->buf, (size_t)n, seq, nl->portid, cb, data);
		if (r < 0)
			return errno ? -errno : -EIO;
		if (r == MNL_CB_STOP)
			return 0;
	}
	return -EIO;
}

/* ------------------------------------------------------------------ links */

struct link_list {
	struct uiw_nl_link *v;
	size_t n, cap;
	int err;
};

static int link_attr(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(a);

	if (mnl_attr_type_valid(a, IFLA_MAX) < 0)
		return MNL_CB_OK;
	tb[type] = a;
	return MNL_CB_OK;
}

static void parse_link(const struct nlmsghdr *h, struct uiw_nl_link *l)
{
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(h);
	const struct nlattr *tb[IFLA_MAX + 1] = {0};

	memset(l, 0, sizeof(*l));
	mnl_attr_parse(h, sizeof(*ifi), link_attr, tb);
	l->ifindex = ifi->ifi_index;
	l->flags = ifi->ifi_flags;
	l->type = ifi->ifi_type;
	if (tb[IFLA_IFNAME] && mnl_attr_validate(tb[IFLA_IFNAME], MNL_TYPE_STRING) == 0) {
		strncpy(l->name, mnl_attr_get_str(tb[IFLA_IFNAME]), IF_NAMESIZE - 1);
		l->name[IF_NAMESIZE - 1] = 0;
	}
	if (tb[IFLA_MTU] && mnl_attr_validate(tb[IFLA_MTU], MNL_TYPE_U32) == 0)
		l->mtu = mnl_attr_get_u32(tb[IFLA_MTU]);
	if (tb[IFLA_ADDRESS]) {
		unsigned int len = mnl_attr_get_payload_len(tb[IFLA_ADDRESS]);

		if (len > sizeof(l->hwaddr))
			len = sizeof(l->hwaddr);
		memcpy(l->hwaddr, mnl_attr_get_payload(tb[IFLA_ADDRESS]), len);
		l->hwaddr_len = len;
	}
}

static int link_cb(const struct nlmsghdr *h, void *data)
{
	struct link_list *ll = data;

	if (h->nlmsg_type != RTM_NEWLINK)
		return MNL_CB_OK;
	if (ll->n == ll->cap) {
		size_t cap = ll->cap ? ll->cap * 2 : 16;
		struct uiw_nl_link *v = realloc(ll->v, cap * sizeof(*v));

		if (!v) {
			ll->err = -ENOMEM;
			return MNL_CB_OK; /* drain the dump */
		}
		ll->v = v;
		ll->cap = cap;
	}
	parse_link(h, &ll->v[ll->n++]);
	return MNL_CB_OK;
}

static int addr_attr(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_type_valid(a, IFA_MAX) < 0)
		return MNL_CB_OK;
	tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

static int addr_cb(const struct nlmsghdr *h, void *data)
{
	struct link_list *ll = data;
	const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(h);
	const struct nlattr *tb[IFA_MAX + 1] = {0};
	const struct nlattr *a;
	struct uiw_nl_link *l = NULL;
	struct uiw_nl_addr *v, *x;
	size_t alen;

	if (h->nlmsg_type != RTM_NEWADDR ||
	    (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6))
		return MNL_CB_OK;
	mnl_attr_parse(h, sizeof(*ifa), addr_attr, tb);
	a = tb[IFA_LOCAL] ? tb[IFA_LOCAL] : tb[IFA_ADDRESS];
	alen = ifa->ifa_family == AF_INET ? 4 : 16;
	if (!a || mnl_attr_get_payload_len(a) < alen)
		return MNL_CB_OK;
	for (size_t i = 0; i < ll->n; i++)
		if (ll->v[i].ifindex == (int)ifa->ifa_index)
			l = &ll->v[i];
	if (!l)
		return MNL_CB_OK;
	v = realloc(l->addrs, (l->n_addrs + 1) * sizeof(*v));
	if (!v) {
		ll->err = -ENOMEM;
		return MNL_CB_OK;
	}
	l->addrs = v;
	x = &v[l->n_addrs++];
	memset(x, 0, sizeof(*x));
	x->family = ifa->ifa_family;
	memcpy(x->addr, mnl_attr_get_payload(a), alen);
	x->prefixlen = ifa->ifa_prefixlen;
	x->scope = ifa->ifa_scope;
	x->flags = ifa->ifa_flags;
	if (tb[IFA_FLAGS] && mnl_attr_validate(tb[IFA_FLAGS], MNL_TYPE_U32) == 0)
		x->flags = mnl_attr_get_u32(tb[IFA_FLAGS]);
	return MNL_CB_OK;
}

static int cmp_link(const void *a, const void *b)
{
	const struct uiw_nl_link *x = a, *y = b;

	return (x->ifindex > y->ifindex) - (x->ifindex < y->ifindex);
}

void uiw_nl_links_free(struct uiw_nl_link *links, size_t n)
{
	if (!links)
		return;
	for (size_t i = 0; i < n; i++)
		free(links[i].addrs);
	free(links);
}

/* How often a dump the kernel marked interrupted is asked again: an
 * interface registered, unregistered or renamed, or an address added or
 * removed, in the namespace between two parts of the dump (libmnl reports
 * NLM_F_DUMP_INTR as EINTR; the dump may miss or repeat an interface). Each
 * dump takes well under a millisecond; 100 interrupted in a row means the
 * interfaces never hold still, and -EINTR goes to the caller. */
#define NL_DUMP_TRIES 100

static int links_once(struct uiw_nl_link **links, size_t *n);

int uiw_nl_links(struct uiw_nl_link **links, size_t *n)
{
	int r, tries = 0;

	do
		r = links_once(links, n);
	while (r == -EINTR && ++tries < NL_DUMP_TRIES);
	return r;
}

static int links_once(struct uiw_nl_link **links, size_t *n)
{
	struct link_list ll = {0};
	struct nlmsghdr *h;
	struct nl nl;
	int r = nl_open(&nl);

	*links = NULL;
	*n = 0;
	if (r)
		return r;
	h = nl_req(&nl, RTM_GETLINK, NLM_F_DUMP);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));

	ifi->ifi_family = AF_UNSPEC;
	r = nl_talk(&nl, h, link_cb, &ll);
	if (!r && !ll.err) {
		h = nl_req(&nl, RTM_GETADDR, NLM_F_DUMP);
		struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(h, sizeof(*ifa));

		ifa->ifa_family = AF_UNSPEC;
		r = nl_talk(&nl, h, addr_cb, &ll);
	}
	nl_close(&nl);
	if (!r)
		r = ll.err;
	if (r) {
		uiw_nl_links_free(ll.v, ll.n);
		return r;
	}
	qsort(ll.v, ll.n, sizeof(*ll.v), cmp_link);
	*links = ll.v;
	*n = ll.n;
	return 0;
}

struct one_link {
	struct uiw_nl_link *out;
	int found;
};

static int one_link_cb(const struct nlmsghdr *h, void *data)
{
	struct one_link *o = data;

	if (h->nlmsg_type == RTM_NEWLINK) {
		parse_link(h, o->out);
		o->found = 1;
	}
	return MNL_CB_OK;
}

static int link_get(struct nl *nl, int ifindex, struct uiw_nl_link *out)
{
	struct one_link o = {out, 0};
	struct nlmsghdr *h = nl_req(nl, RTM_GETLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	int r;

	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	r = nl_talk(nl, h, one_link_cb, &o);
	if (r)
		return r;
	return o.found ? 0 : -ENODEV;
}

int uiw_nl_link_get(int ifindex, struct uiw_nl_link *out)
{
	struct nl nl;
	int r;

	memset(out, 0, sizeof(*out));
	if (ifindex <= 0)
		return -ENODEV;
	r = nl_open(&nl);
	if (r)
		return r;
	r = link_get(&nl, ifindex, out);
	nl_close(&nl);
	return r;
}

/* ------------------------------------------------------------------ route */

static int route_attr(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_type_valid(a, RTA_MAX) < 0)
		return MNL_CB_OK;
	tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

static int metric_attr(const struct nlattr *a, void *data)
{
	unsigned int *mtu = data;

	if (mnl_attr_get_type(a) == RTAX_MTU && mnl_attr_validate(a, MNL_TYPE_U32) == 0)
		*mtu = mnl_attr_get_u32(a);
	return MNL_CB_OK;
}

static void set_sa(struct sockaddr_storage *ss, int family, const void *addr)
{
	memset(ss, 0, sizeof(*ss));
	ss->ss_family = (sa_family_t)family;
	if (family == AF_INET)
		memcpy(&((struct sockaddr_in *)ss)->sin_addr, addr, 4);
	else
		memcpy(&((struct sockaddr_in6 *)ss)->sin6_addr, addr, 16);
}

struct route_ans {
	struct uiw_nl_route *out;
	int found;
};

static int route_cb(const struct nlmsghdr *h, void *data)
{
	struct route_ans *ra = data;
	const struct rtmsg *rtm = mnl_nlmsg_get_payload(h);
	const struct nlattr *tb[RTA_MAX + 1] = {0};
	struct uiw_nl_route *out = ra->out;
	size_t alen = rtm->rtm_family == AF_INET ? 4 : 16;

	if (h->nlmsg_type != RTM_NEWROUTE)
		return MNL_CB_OK;
	mnl_attr_parse(h, sizeof(*rtm), route_attr, tb);
	out->type = rtm->rtm_type;
	if (tb[RTA_OIF] && mnl_attr_validate(tb[RTA_OIF], MNL_TYPE_U32) == 0)
		out->ifindex = (int)mnl_attr_get_u32(tb[RTA_OIF]);
	if (tb[RTA_PREFSRC] && mnl_attr_get_payload_len(tb[RTA_PREFSRC]) >= alen)
		set_sa(&out->src, rtm->rtm_family, mnl_attr_get_payload(tb[RTA_PREFSRC]));
	if (tb[RTA_GATEWAY] && mnl_attr_get_payload_len(tb[RTA_GATEWAY]) >= alen)
		set_sa(&out->gateway, rtm->rtm_family, mnl_attr_get_payload(tb[RTA_GATEWAY]));
	if (tb[RTA_METRICS])
		mnl_attr_parse_nested(tb[RTA_METRICS], metric_attr, &out->route_mtu);
	ra->found = 1;
	return MNL_CB_OK;
}

static int sa_ip(const struct sockaddr *sa, int *family, uint8_t ip[16])
{
	memset(ip, 0, 16);
	if (sa->sa_family == AF_INET) {
		memcpy(ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		*family = AF_INET;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		*family = AF_INET6;
		return 0;
	}
	return -EAFNOSUPPORT;
}

int uiw_nl_route_get(const struct sockaddr *dst, const struct sockaddr *src,
		     struct uiw_nl_route *out)
{
	struct route_ans ra = {out, 0};
	uint8_t dip[16], sip[16];
	int family, sfamily, r;
	struct nlmsghdr *h;
	struct rtmsg *rtm;
	struct uiw_nl_link link;
	struct nl nl;

	if (!out || !dst)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	r = sa_ip(dst, &family, dip);
	if (r)
		return r;
	if (src && (sa_ip(src, &sfamily, sip) || sfamily != family))
		return -EINVAL;
	r = nl_open(&nl);
	if (r)
		return r;
	h = nl_req(&nl, RTM_GETROUTE, 0);
	rtm = mnl_nlmsg_put_extra_header(h, sizeof(*rtm));
	rtm->rtm_family = (unsigned char)family;
	rtm->rtm_dst_len = family == AF_INET ? 32 : 128;
	mnl_attr_put(h, RTA_DST, family == AF_INET ? 4 : 16, dip);
	if (family == AF_INET6 && ((const struct sockaddr_in6 *)dst)->sin6_scope_id)
		mnl_attr_put_u32(h, RTA_OIF, ((const struct sockaddr_in6 *)dst)->sin6_scope_id);
	if (src) {
		rtm->rtm_src_len = rtm->rtm_dst_len;
		mnl_attr_put(h, RTA_SRC, family == AF_INET ? 4 : 16, sip);
	}
	r = nl_talk(&nl, h, route_cb, &ra);
	if (!r && !ra.found)
		r = -ENETUNREACH;
	if (!r && out->ifindex > 0 && link_get(&nl, out->ifindex, &link) == 0) {
		memcpy(out->ifname, link.name, IF_NAMESIZE);
		out->link_mtu = link.mtu;
	}
	nl_close(&nl);
	if (r)
		return r;
	out->path_mtu = out->route_mtu ? out->route_mtu : out->link_mtu;
	return 0;
}

unsigned int uiw_nl_tcp_payload_bound(unsigned int path_mtu, int family)
{
	unsigned int hdr = (family == AF_INET6 ? 40 : 20) + 20 + 12;

	return path_mtu > hdr ? path_mtu - hdr : 0;
}
