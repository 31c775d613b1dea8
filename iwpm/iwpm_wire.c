/* iwpm wire codec (layout in iwpm_wire.h). */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "iwpm/iwpm_wire.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

int iwpm_msg_encode(const struct iwpm_msg *m, uint8_t *buf)
{
	if (m->type > IWPM_MT_REJECT || m->version > 3 || (m->ip_ver != 4 && m->ip_ver != 6))
		return -EINVAL;
	memset(buf, 0, IWPM_MSG_REQ_LEN);
	buf[0] = (uint8_t)((m->version << IWPM_VER_SHIFT) & IWPM_VER_MASK);
	buf[0] |= (uint8_t)((m->type << IWPM_MT_SHIFT) & IWPM_MT_MASK);
	buf[0] |= (uint8_t)((m->ip_ver << IWPM_IPVER_SHIFT) & IWPM_IPVER_MASK);
	buf[1] = m->pmtime;
	put16(buf + 4, m->apport);
	put16(buf + 6, m->cpport);
	put64(buf + 8, m->assochandle);
	memcpy(buf + 16, m->cpipaddr, IWPM_IPADDR_LEN);
	memcpy(buf + 32, m->apipaddr, IWPM_IPADDR_LEN);
	if (m->type != IWPM_MT_REQ)
		return IWPM_MSG_LEN;
	put16(buf + 2, m->mapped_cpport);
	memcpy(buf + 48, m->mapped_cpipaddr, IWPM_IPADDR_LEN);
	return IWPM_MSG_REQ_LEN;
}

int iwpm_msg_decode(const void *buf, size_t len, struct iwpm_msg *m)
{
	const uint8_t *p = buf;

	if (len != IWPM_MSG_LEN && len != IWPM_MSG_REQ_LEN)
		return -EMSGSIZE;
	memset(m, 0, sizeof(*m));
	m->version = (uint8_t)((p[0] & IWPM_VER_MASK) >> IWPM_VER_SHIFT);
	m->type = (uint8_t)((p[0] & IWPM_MT_MASK) >> IWPM_MT_SHIFT);
	m->ip_ver = (uint8_t)((p[0] & IWPM_IPVER_MASK) >> IWPM_IPVER_SHIFT);
	if (m->ip_ver != 4 && m->ip_ver != 6)
		return -EPROTONOSUPPORT;
	m->pmtime = p[1];
	m->apport = get16(p + 4);
	m->cpport = get16(p + 6);
	m->assochandle = get64(p + 8);
	memcpy(m->cpipaddr, p + 16, IWPM_IPADDR_LEN);
	memcpy(m->apipaddr, p + 32, IWPM_IPADDR_LEN);
	if (m->type == IWPM_MT_REQ) {
		m->mapped_cpport = get16(p + 2);
		if (len == IWPM_MSG_REQ_LEN)
			memcpy(m->mapped_cpipaddr, p + 48, IWPM_IPADDR_LEN);
	}
	if (m->ip_ver == 4) {
		/* iwpmd copies 4 bytes of an IPv4 address into an uninitialised
		 * 16-byte field: the other 12 are garbage on the wire */
		memset(m->cpipaddr + 4, 0, IWPM_IPADDR_LEN - 4);
		memset(m->apipaddr + 4, 0, IWPM_IPADDR_LEN - 4);
		memset(m->mapped_cpipaddr + 4, 0, IWPM_IPADDR_LEN - 4);
	}
	return 0;
}

int iwpm_sockaddr_to_wire(const struct sockaddr *sa, uint8_t *ip_ver, uint8_t ip[IWPM_IPADDR_LEN],
			  uint16_t *port)
{
	uint8_t tmp[IWPM_IPADDR_LEN] = {0};
	uint8_t ver;
	uint16_t p;

	if (!sa)
		return -EAFNOSUPPORT;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		memcpy(tmp, &s4->sin_addr, 4);
		p = ntohs(s4->sin_port);
		ver = 4;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		p = ntohs(s6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			memcpy(tmp, &s6->sin6_addr.s6_addr[12], 4);
			ver = 4;
		} else {
			memcpy(tmp, &s6->sin6_addr, 16);
			ver = 6;
		}
	} else {
		return -EAFNOSUPPORT;
	}
	if (ip_ver)
		*ip_ver = ver;
	if (ip)
		memcpy(ip, tmp, IWPM_IPADDR_LEN);
	if (port)
		*port = p;
	return 0;
}

int iwpm_wire_to_sockaddr(uint8_t ip_ver, const uint8_t ip[IWPM_IPADDR_LEN], uint16_t port,
			  struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (ip_ver == 4) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		memcpy(&s4->sin_addr, ip, 4);
		return 0;
	}
	if (ip_ver == 6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		memcpy(&s6->sin6_addr, ip, 16);
		return 0;
	}
	return -EPROTONOSUPPORT;
}
