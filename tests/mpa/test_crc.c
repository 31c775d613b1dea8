/* uiw_crc32c against RFC 3720 B.4 and the common check value, plus
 * chaining. Source of the vectors: RFC 3720 Appendix B.4, RFC 5044 §4.4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mpa/mpa.h"

static void test_check_value(void **state)
{
	(void)state;
	assert_int_equal(uiw_crc32c(0, "123456789", 9), 0xE3069283u);
}

static void test_rfc3720_vectors(void **state)
{
	uint8_t buf[32];

	(void)state;
	memset(buf, 0x00, sizeof(buf));
	assert_int_equal(uiw_crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(uiw_crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(uiw_crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(uiw_crc32c(0, buf, 32), 0x113FDB5Cu);
}

/* The wire carries the CRC least-significant byte first: 83 92 06 e3. */
static void test_wire_order(void **state)
{
	uint32_t c = uiw_crc32c(0, "123456789", 9);
	uint8_t wire[4] = {(uint8_t)c, (uint8_t)(c >> 8), (uint8_t)(c >> 16), (uint8_t)(c >> 24)};
	static const uint8_t expect[4] = {0x83, 0x92, 0x06, 0xe3};

	(void)state;
	assert_memory_equal(wire, expect, 4);
}

static void test_empty(void **state)
{
	(void)state;
	assert_int_equal(uiw_crc32c(0, NULL, 0), 0);
	assert_int_equal(uiw_crc32c(0xE3069283u, "", 0), 0xE3069283u);
}

/* uiw_crc32c(uiw_crc32c(0, a, n), b, m) == uiw_crc32c(0, ab, n + m) at
 * every split point of a buffer with a deterministic pattern. */
static void test_chaining(void **state)
{
	uint8_t buf[1031];
	uint32_t x = 0x12345678, whole;

	(void)state;
	for (size_t i = 0; i < sizeof(buf); i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
	whole = uiw_crc32c(0, buf, sizeof(buf));
	for (size_t n = 0; n <= sizeof(buf); n++)
		assert_int_equal(uiw_crc32c(uiw_crc32c(0, buf, n), buf + n, sizeof(buf) - n),
				 whole);
	/* three pieces, and byte by byte */
	assert_int_equal(uiw_crc32c(uiw_crc32c(uiw_crc32c(0, buf, 3), buf + 3, 500), buf + 503,
				    sizeof(buf) - 503),
			 whole);
	{
		uint32_t c = 0;

		for (size_t i = 0; i < sizeof(buf); i++)
			c = uiw_crc32c(c, buf + i, 1);
		assert_int_equal(c, whole);
	}
	/* "1234" then "56789" */
	assert_int_equal(uiw_crc32c(uiw_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

/* An unaligned start gives the same value (ISA-L has aligned fast paths). */
static void test_unaligned(void **state)
{
	uint8_t buf[300];
	uint32_t ref;

	(void)state;
	for (int i = 0; i < 300; i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	ref = uiw_crc32c(0, buf + 8, 256);
	for (int s = 0; s < 8; s++) {
		uint8_t tmp[300];

		memcpy(tmp + s, buf + 8, 256);
		assert_int_equal(uiw_crc32c(0, tmp + s, 256), ref);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_check_value), cmocka_unit_test(test_rfc3720_vectors),
	    cmocka_unit_test(test_wire_order),	cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_chaining),	cmocka_unit_test(test_unaligned),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
