/* libFuzzer harness: the iWARP port mapper's UDP datagrams (iwpm/
 * iwpm_wire.h, rdma-core iwpmd's format) as iwpm_client.c and
 * iwpm_responder.c decode them: iwpm_msg_decode of the input, and for a
 * message it accepts, the round trip a responder makes of it (encode the
 * answer, decode it again, the address into a sockaddr and back).
 *
 * Checked: no sanitizer report; decode accepts exactly 48- and 64-byte
 * datagrams with IP version 4 or 6; every accepted message encodes, and
 * decoding that gives the same message; IPv4 addresses have bytes 4..15
 * zero; sockaddr round trips keep address and port. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "iwpm/iwpm_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct iwpm_msg m, m2;
	int r = iwpm_msg_decode(data, size, &m);
	if (size != IWPM_MSG_LEN && size != IWPM_MSG_REQ_LEN) {
		if (r != -EMSGSIZE)
			__builtin_trap();
		return 0;
	}
	if (r == -EPROTONOSUPPORT)
		return 0;
	if (r != 0 || (m.ip_ver != 4 && m.ip_ver != 6) || m.type > IWPM_MT_REJECT || m.version > 3)
		__builtin_trap();
	static const uint8_t zero[IWPM_IPADDR_LEN];
	if (m.ip_ver == 4 &&
	    (memcmp(m.cpipaddr + 4, zero, 12) || memcmp(m.apipaddr + 4, zero, 12) ||
	     memcmp(m.mapped_cpipaddr + 4, zero, 12)))
		__builtin_trap();
	if (m.type != IWPM_MT_REQ &&
	    (m.mapped_cpport || memcmp(m.mapped_cpipaddr, zero, IWPM_IPADDR_LEN)))
		__builtin_trap();

	uint8_t buf[IWPM_MSG_REQ_LEN];
	int n = iwpm_msg_encode(&m, buf);
	if (n != (m.type == IWPM_MT_REQ ? IWPM_MSG_REQ_LEN : IWPM_MSG_LEN))
		__builtin_trap();
	if (iwpm_msg_decode(buf, (size_t)n, &m2) || memcmp(&m, &m2, sizeof(m)))
		__builtin_trap();

	struct sockaddr_storage ss;
	if (iwpm_wire_to_sockaddr(m.ip_ver, m.apipaddr, m.apport, &ss))
		__builtin_trap();
	uint8_t ver, ip[IWPM_IPADDR_LEN];
	uint16_t port;
	if (iwpm_sockaddr_to_wire((const struct sockaddr *)&ss, &ver, ip, &port))
		__builtin_trap();
	/* an IPv4-mapped IPv6 address comes back as IPv4 (iwpm_wire.h) */
	bool mapped = m.ip_ver == 6 && ver == 4;
	if (port != m.apport || (ver != m.ip_ver && !mapped) ||
	    memcmp(ip, mapped ? m.apipaddr + 12 : m.apipaddr, ver == 4 ? 4 : 16))
		__builtin_trap();
	return 0;
}
