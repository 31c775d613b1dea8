/* iwpm client: one REQUEST / ACCEPT|REJECT / ACK exchange with the peer's
 * port mapper (rdma-core iwpmd/iwarp_pm_server.c, process_iwpm_query_mapping
 * and process_iwpm_wire_accept, is the other implementation). */
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iwpm/iwpm.h"
#include "iwpm/iwpm_internal.h"
#include "iwpm/iwpm_wire.h"

#define IWPM_RTO_FIRST_MS 50
#define IWPM_RTO_MAX_MS 1000

static uint64_t new_assochandle(void)
{
	static _Atomic uint64_t counter;
	uint64_t h = 0;

	if (getrandom(&h, sizeof(h), GRND_NONBLOCK) != (ssize_t)sizeof(h))
		h = (uint64_t)iwpm_now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
	h ^= ++counter;
	return h ? h : 1;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static socklen_t sa_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static bool ip_is_zero(const uint8_t ip[IWPM_IPADDR_LEN])
{
	for (int i = 0; i < IWPM_IPADDR_LEN; i++)
		if (ip[i])
			return false;
	return true;
}

/* Drains the socket's error queue. Returns true if an ICMP error that
 * means "no port mapper there" (port / host / network unreachable) was
 * queued. */
static bool drain_errqueue(int fd)
{
	bool unreachable = false;

	for (int i = 0; i < 16; i++) {
		char cbuf[512];
		uint8_t dummy[IWPM_MSG_REQ_LEN];
		struct iovec iov = {dummy, sizeof(dummy)};
		struct sockaddr_storage from;
		struct msghdr mh = {.msg_name = &from,
				    .msg_namelen = sizeof(from),
				    .msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf)};

		if (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			struct sock_extended_err ee;

			if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
			      (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
				continue;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			if (ee.ee_errno == ECONNREFUSED || ee.ee_errno == EHOSTUNREACH ||
			    ee.ee_errno == ENETUNREACH)
				unreachable = true;
		}
	}
	return unreachable;
}

static bool is_unreachable_errno(int e)
{
	return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH;
}

/* Reads every queued datagram. Returns 1 with *ans filled on a matching
 * ACCEPT (apport != 0) or REJECT from the mapper port, -1 when an ICMP
 * unreachable was reported, 0 otherwise. */
static int read_answers(int fd, uint16_t pm_port, const struct iwpm_msg *req, struct iwpm_msg *ans,
			struct sockaddr_storage *from)
{
	for (int i = 0; i < 64; i++) {
		uint8_t buf[IWPM_MSG_REQ_LEN + 1];
		socklen_t flen = sizeof(*from);
		ssize_t n =
		    recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)from, &flen);
		uint16_t sport;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (is_unreachable_errno(errno))
				return -1;
			return 0; /* EAGAIN or a transient error */
		}
		if (iwpm_sockaddr_to_wire((struct sockaddr *)from, NULL, NULL, &sport) ||
		    sport != pm_port)
			continue;
		if (iwpm_msg_decode(buf, (size_t)n, ans))
			continue;
		if (ans->assochandle != req->assochandle || ans->ip_ver != req->ip_ver)
			continue;
		if (ans->type == IWPM_MT_REJECT)
			return 1;
		if (ans->type == IWPM_MT_ACCEPT && ans->apport != 0)
			return 1;
	}
	return 0;
}

int iwpm_query_ex(const struct sockaddr *local, const struct sockaddr *remote, int timeout_ms,
		  uint16_t pm_port, struct sockaddr_storage *mapped_remote,
		  enum iwpm_outcome *outcome)
{
	struct iwpm_msg req = {0}, ans;
	struct sockaddr_storage dest, from;
	uint8_t buf[IWPM_MSG_REQ_LEN];
	enum iwpm_outcome out = IWPM_TIMEDOUT;
	uint16_t app_port, result;
	int64_t start, deadline, next_send, rto = IWPM_RTO_FIRST_MS;
	int fd, len, one = 1;

	if (outcome)
		*outcome = IWPM_DISABLED;
	if (!remote || !mapped_remote)
		return -EINVAL;
	if (remote->sa_family != AF_INET && remote->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	memset(mapped_remote, 0, sizeof(*mapped_remote));
	memcpy(mapped_remote, remote,
	       remote->sa_family == AF_INET ? sizeof(struct sockaddr_in)
					    : sizeof(struct sockaddr_in6));
	if (iwpm_sockaddr_to_wire(remote, &req.ip_ver, req.apipaddr, &app_port))
		return -EAFNOSUPPORT;
	if (app_port == 0 || pm_port == 0)
		return -EINVAL;
	req.apport = app_port;
	if (local && local->sa_family != AF_UNSPEC) {
		uint8_t lver;

		if (iwpm_sockaddr_to_wire(local, &lver, req.cpipaddr, &req.cpport))
			return -EAFNOSUPPORT;
		/* a wildcard IPv6 local address goes with an IPv4 peer */
		if (lver != req.ip_ver && !(lver == 6 && ip_is_zero(req.cpipaddr)))
			return -EINVAL;
		if (lver != req.ip_ver)
			memset(req.cpipaddr, 0, sizeof(req.cpipaddr));
	}
	if (timeout_ms < 0)
		timeout_ms = iwpm_timeout_ms();
	if (timeout_ms > IWPM_MAX_TIMEOUT_MS)
		timeout_ms = IWPM_MAX_TIMEOUT_MS;
	if (timeout_ms == 0 || !iwpm_enabled())
		return app_port;

	/* uiwarp never remaps: the mapped local address is the local one */
	req.version = IWPM_VERSION;
	req.type = IWPM_MT_REQ;
	req.mapped_cpport = req.cpport;
	memcpy(req.mapped_cpipaddr, req.cpipaddr, IWPM_IPADDR_LEN);
	req.assochandle = new_assochandle();
	len = iwpm_msg_encode(&req, buf);
	iwpm_wire_to_sockaddr(req.ip_ver, req.apipaddr, pm_port, &dest);

	fd = socket(dest.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_UDP);
	if (fd < 0) {
		out = IWPM_SEND_FAILED;
		goto done;
	}
	if (dest.ss_family == AF_INET)
		setsockopt(fd, SOL_IP, IP_RECVERR, &one, sizeof(one));
	else
		setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &one, sizeof(one));
	if (!ip_is_zero(req.cpipaddr)) {
		/* send from the connection's source IP, so the peer sees the
		 * same address in the datagram and in the REQUEST */
		struct sockaddr_storage src;

		iwpm_wire_to_sockaddr(req.ip_ver, req.cpipaddr, 0, &src);
		(void)!bind(fd, (struct sockaddr *)&src, sa_len(&src));
	}

	start = iwpm_now_ms();
	deadline = start + timeout_ms;
	next_send = start;
	for (int rounds = 0; rounds < 10000; rounds++) {
		int64_t now = iwpm_now_ms(), wait;
		struct pollfd pfd = {fd, POLLIN, 0};
		int r;

		if (now >= deadline)
			break;
		if (now >= next_send) {
			ssize_t s = sendto(fd, buf, (size_t)len, 0, (struct sockaddr *)&dest,
					   sa_len(&dest));

			if (s < 0 && errno != EINTR && errno != EAGAIN && errno != ENOBUFS) {
				/* ECONNREFUSED: an ICMP port unreachable came back
				 * for an earlier REQUEST */
				out = errno == ECONNREFUSED ? IWPM_NO_MAPPER : IWPM_SEND_FAILED;
				break;
			}
			next_send = now + rto;
			rto = rto * 2 > IWPM_RTO_MAX_MS ? IWPM_RTO_MAX_MS : rto * 2;
		}
		wait = (next_send < deadline ? next_send : deadline) - now;
		r = poll(&pfd, 1, (int)(wait > 0 ? wait : 0));
		if (r < 0 && errno != EINTR) {
			out = IWPM_SEND_FAILED;
			break;
		}
		if (r <= 0)
			continue;
		if ((pfd.revents & POLLERR) && drain_errqueue(fd)) {
			out = IWPM_NO_MAPPER;
			break;
		}
		if (pfd.revents & POLLIN) {
			r = read_answers(fd, pm_port, &req, &ans, &from);
			if (r < 0) {
				out = IWPM_NO_MAPPER;
				break;
			}
			if (r > 0) {
				out = ans.type == IWPM_MT_ACCEPT ? IWPM_ACCEPTED : IWPM_REJECTED;
				break;
			}
		}
	}

done:
	result = app_port;
	if (out == IWPM_ACCEPTED) {
		/* ACK = the ACCEPT echoed with the type changed (form_iwpm_ack);
		 * sent once: if it is lost, iwpmd retransmits its ACCEPT for up
		 * to 10 s to a closed port, which costs nothing here. */
		struct iwpm_msg ack = ans;
		uint8_t abuf[IWPM_MSG_REQ_LEN];
		int alen;

		ack.type = IWPM_MT_ACK;
		alen = iwpm_msg_encode(&ack, abuf);
		if (alen > 0)
			(void)!sendto(fd, abuf, (size_t)alen, 0, (struct sockaddr *)&from,
				      sa_len(&from));
		result = ans.apport;
		set_port(mapped_remote, result);
	}
	if (fd >= 0)
		close(fd);
	if (outcome)
		*outcome = out;
	return result;
}

int iwpm_query(const struct sockaddr *local, const struct sockaddr *remote, int timeout_ms,
	       struct sockaddr_storage *mapped_remote)
{
	return iwpm_query_ex(local, remote, timeout_ms, IWPM_PORT, mapped_remote, NULL);
}
