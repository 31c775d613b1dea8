/* iwpm codec against hand-written datagrams laid out as rdma-core's
 * iwpmd/iwarp_pm.h (struct iwpm_wire_msg) and iwarp_pm_common.c
 * (form_iwpm_request: 64 bytes; accept / ack / reject: 48 bytes) put them
 * on the wire. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "iwpm/iwpm_wire.h"

/* clang-format off */
/* REQUEST, IPv4: connecting peer 192.0.2.1:40000 (mapped: same), accepting
 * peer 192.0.2.2:7174, assochandle 0x0102030405060708. */
static const uint8_t req4[64] = {
	0x04, 0x00, 0x9c, 0x40,	/* magic v0/REQ/IPv4, pmtime, mapped_cpport 40000 */
	0x1c, 0x06, 0x9c, 0x40,	/* apport 7174, cpport 40000 */
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,	/* assochandle */
	0xc0, 0x00, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,	/* cpipaddr */
	0xc0, 0x00, 0x02, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,	/* apipaddr */
	0xc0, 0x00, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,	/* mapped_cpipaddr */
};

/* ACCEPT for it with apport = 50000 (0xc350): 48 bytes, reserved 0. */
static const uint8_t acc4[48] = {
	0x14, 0x00, 0x00, 0x00,	/* magic v0/ACCEPT/IPv4, pmtime, reserved */
	0xc3, 0x50, 0x9c, 0x40,	/* apport 50000, cpport 40000 */
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
	0xc0, 0x00, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0xc0, 0x00, 0x02, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* REQUEST, IPv6: 2001:db8::1 port 0x1000 (mapped 0x1001) -> 2001:db8::2
 * port 0x2000, assochandle 0xfedcba9876543210. */
static const uint8_t req6[64] = {
	0x06, 0x00, 0x10, 0x01,	/* magic v0/REQ/IPv6, pmtime, mapped_cpport */
	0x20, 0x00, 0x10, 0x00,	/* apport, cpport */
	0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
	0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
	0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
	0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
};
/* clang-format on */

static void fill_req4(struct iwpm_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = IWPM_MT_REQ;
	m->ip_ver = 4;
	m->apport = 7174;
	m->cpport = 40000;
	m->mapped_cpport = 40000;
	m->assochandle = 0x0102030405060708ull;
	inet_pton(AF_INET, "192.0.2.1", m->cpipaddr);
	inet_pton(AF_INET, "192.0.2.2", m->apipaddr);
	inet_pton(AF_INET, "192.0.2.1", m->mapped_cpipaddr);
}

static void test_encode_req4(void **state)
{
	struct iwpm_msg m;
	uint8_t buf[64];

	(void)state;
	fill_req4(&m);
	assert_int_equal(iwpm_msg_encode(&m, buf), 64);
	assert_memory_equal(buf, req4, 64);
}

static void test_decode_req4(void **state)
{
	struct iwpm_msg m, want;

	(void)state;
	fill_req4(&want);
	assert_int_equal(iwpm_msg_decode(req4, sizeof(req4), &m), 0);
	assert_memory_equal(&m, &want, sizeof(m));
}

static void test_accept_ack_reject4(void **state)
{
	struct iwpm_msg m;
	uint8_t buf[64], expect[48];

	(void)state;
	fill_req4(&m);
	m.type = IWPM_MT_ACCEPT;
	m.apport = 50000;
	/* mapped fields are not sent in an answer */
	assert_int_equal(iwpm_msg_encode(&m, buf), 48);
	assert_memory_equal(buf, acc4, 48);

	memcpy(expect, acc4, 48);
	expect[0] = 0x24; /* ACK */
	m.type = IWPM_MT_ACK;
	assert_int_equal(iwpm_msg_encode(&m, buf), 48);
	assert_memory_equal(buf, expect, 48);

	expect[0] = 0x34; /* REJECT */
	m.type = IWPM_MT_REJECT;
	assert_int_equal(iwpm_msg_encode(&m, buf), 48);
	assert_memory_equal(buf, expect, 48);

	assert_int_equal(iwpm_msg_decode(acc4, 48, &m), 0);
	assert_int_equal(m.type, IWPM_MT_ACCEPT);
	assert_int_equal(m.ip_ver, 4);
	assert_int_equal(m.version, 0);
	assert_int_equal(m.apport, 50000);
	assert_int_equal(m.cpport, 40000);
	assert_int_equal(m.mapped_cpport, 0);
	assert_true(m.assochandle == 0x0102030405060708ull);
}

static void test_req6_roundtrip(void **state)
{
	struct iwpm_msg m;
	uint8_t buf[64], ip[16];

	(void)state;
	assert_int_equal(iwpm_msg_decode(req6, 64, &m), 0);
	assert_int_equal(m.type, IWPM_MT_REQ);
	assert_int_equal(m.ip_ver, 6);
	assert_int_equal(m.apport, 0x2000);
	assert_int_equal(m.cpport, 0x1000);
	assert_int_equal(m.mapped_cpport, 0x1001);
	assert_true(m.assochandle == 0xfedcba9876543210ull);
	inet_pton(AF_INET6, "2001:db8::2", ip);
	assert_memory_equal(m.apipaddr, ip, 16);
	assert_int_equal(iwpm_msg_encode(&m, buf), 64);
	assert_memory_equal(buf, req6, 64);

	/* the IPv6 REJECT: magic 0x36, 48 bytes, reserved zeroed */
	m.type = IWPM_MT_REJECT;
	assert_int_equal(iwpm_msg_encode(&m, buf), 48);
	assert_int_equal(buf[0], 0x36);
	assert_int_equal(buf[2], 0);
	assert_int_equal(buf[3], 0);
	assert_memory_equal(buf + 4, req6 + 4, 44);
}

static void test_magic_fields(void **state)
{
	uint8_t buf[64];
	struct iwpm_msg m;

	(void)state;
	memcpy(buf, acc4, 48);
	buf[0] = 0xc0 | 0x30 | 0x06; /* version 3, REJECT, IPv6 */
	assert_int_equal(iwpm_msg_decode(buf, 48, &m), 0);
	assert_int_equal(m.version, 3);
	assert_int_equal(m.type, IWPM_MT_REJECT);
	assert_int_equal(m.ip_ver, 6);
	m.version = 2;
	m.type = IWPM_MT_ACK;
	m.ip_ver = 4;
	assert_int_equal(iwpm_msg_encode(&m, buf), 48);
	assert_int_equal(buf[0], 0x80 | 0x20 | 0x04);
}

static void test_decode_errors(void **state)
{
	uint8_t buf[80] = {0};
	struct iwpm_msg m;
	static const size_t bad[] = {0, 1, 47, 49, 63, 65, 80};

	(void)state;
	memcpy(buf, req4, 64);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(iwpm_msg_decode(buf, bad[i], &m), -EMSGSIZE);
	buf[0] = 0x05; /* IP version 5 */
	assert_int_equal(iwpm_msg_decode(buf, 64, &m), -EPROTONOSUPPORT);
	buf[0] = 0x00;
	assert_int_equal(iwpm_msg_decode(buf, 64, &m), -EPROTONOSUPPORT);
}

/* iwpmd accepts a 48-byte REQUEST: no mapped_cpipaddr then. */
static void test_short_request(void **state)
{
	struct iwpm_msg m;

	(void)state;
	assert_int_equal(iwpm_msg_decode(req4, 48, &m), 0);
	assert_int_equal(m.type, IWPM_MT_REQ);
	assert_int_equal(m.mapped_cpport, 40000);
	for (int i = 0; i < 16; i++)
		assert_int_equal(m.mapped_cpipaddr[i], 0);
}

/* iwpmd (rdma-core 44, seen in the lab) leaves stack garbage in bytes 4..15
 * of IPv4 address fields: they must not matter. */
static void test_ipv4_garbage(void **state)
{
	uint8_t buf[64];
	struct iwpm_msg m, want;

	(void)state;
	memcpy(buf, req4, 64);
	for (int i = 4; i < 16; i++) {
		buf[16 + i] = (uint8_t)(0xa0 + i);
		buf[32 + i] = (uint8_t)(0x50 + i);
		buf[48 + i] = 0xff;
	}
	fill_req4(&want);
	assert_int_equal(iwpm_msg_decode(buf, 64, &m), 0);
	assert_memory_equal(&m, &want, sizeof(m));
	/* not for IPv6, where all 16 bytes are the address */
	memcpy(buf, req6, 64);
	assert_int_equal(iwpm_msg_decode(buf, 64, &m), 0);
	assert_memory_equal(m.apipaddr, req6 + 32, 16);
}

static void test_encode_errors(void **state)
{
	struct iwpm_msg m;
	uint8_t buf[64];

	(void)state;
	fill_req4(&m);
	m.ip_ver = 5;
	assert_int_equal(iwpm_msg_encode(&m, buf), -EINVAL);
	fill_req4(&m);
	m.type = 4;
	assert_int_equal(iwpm_msg_encode(&m, buf), -EINVAL);
	fill_req4(&m);
	m.version = 4;
	assert_int_equal(iwpm_msg_encode(&m, buf), -EINVAL);
}

static void test_sockaddr(void **state)
{
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_port = htons(4791)};
	struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_port = htons(80)};
	struct sockaddr_storage ss;
	uint8_t ver, ip[16], want[16] = {0};
	uint16_t port;

	(void)state;
	inet_pton(AF_INET6, "::ffff:192.0.2.7", &s6.sin6_addr);
	assert_int_equal(iwpm_sockaddr_to_wire((struct sockaddr *)&s6, &ver, ip, &port), 0);
	assert_int_equal(ver, 4);
	assert_int_equal(port, 4791);
	inet_pton(AF_INET, "192.0.2.7", want);
	assert_memory_equal(ip, want, 16);

	inet_pton(AF_INET6, "2001:db8::9", &s6.sin6_addr);
	assert_int_equal(iwpm_sockaddr_to_wire((struct sockaddr *)&s6, &ver, ip, &port), 0);
	assert_int_equal(ver, 6);
	assert_memory_equal(ip, &s6.sin6_addr, 16);
	assert_int_equal(iwpm_wire_to_sockaddr(6, ip, 4791, &ss), 0);
	assert_memory_equal(&ss, &s6, sizeof(s6));

	inet_pton(AF_INET, "198.51.100.3", &s4.sin_addr);
	assert_int_equal(iwpm_sockaddr_to_wire((struct sockaddr *)&s4, &ver, ip, &port), 0);
	assert_int_equal(iwpm_wire_to_sockaddr(ver, ip, port, &ss), 0);
	assert_memory_equal(&ss, &s4, sizeof(s4));
	assert_int_equal(iwpm_wire_to_sockaddr(5, ip, port, &ss), -EPROTONOSUPPORT);
	s4.sin_family = AF_UNIX;
	assert_int_equal(iwpm_sockaddr_to_wire((struct sockaddr *)&s4, &ver, ip, &port),
			 -EAFNOSUPPORT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_encode_req4),	       cmocka_unit_test(test_decode_req4),
	    cmocka_unit_test(test_accept_ack_reject4), cmocka_unit_test(test_req6_roundtrip),
	    cmocka_unit_test(test_magic_fields),       cmocka_unit_test(test_decode_errors),
	    cmocka_unit_test(test_short_request),      cmocka_unit_test(test_encode_errors),
	    cmocka_unit_test(test_sockaddr),	       cmocka_unit_test(test_ipv4_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
