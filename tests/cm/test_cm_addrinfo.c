/* rdma_getaddrinfo / rdma_freeaddrinfo: numeric and named hosts, passive
 * wildcard, RAI_NUMERICHOST, ports, defaults (RDMA_PS_TCP, IBV_QPT_RC). */
#include <errno.h>
#include <netdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <arpa/inet.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

static void test_numeric_active(void **state)
{
	struct rdma_addrinfo *res = NULL;
	struct sockaddr_in *sin;

	(void)state;
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "7471", NULL, &res), 0);
	assert_non_null(res);
	assert_int_equal(res->ai_family, AF_INET);
	assert_int_equal(res->ai_port_space, RDMA_PS_TCP);
	assert_int_equal(res->ai_qp_type, IBV_QPT_RC);
	assert_null(res->ai_src_addr);
	assert_non_null(res->ai_dst_addr);
	assert_int_equal(res->ai_dst_len, sizeof(struct sockaddr_in));
	sin = (struct sockaddr_in *)res->ai_dst_addr;
	assert_int_equal(sin->sin_port, htons(7471));
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_null(res->ai_next);
	rdma_freeaddrinfo(res);
}

static void test_no_service_port_zero(void **state)
{
	struct rdma_addrinfo *res = NULL;

	(void)state;
	/* rping: rdma_getaddrinfo(host, NULL, NULL, &res) */
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", NULL, NULL, &res), 0);
	assert_int_equal(((struct sockaddr_in *)res->ai_dst_addr)->sin_port, 0);
	rdma_freeaddrinfo(res);
}

static void test_passive(void **state)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in *sin;

	(void)state;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_family = AF_INET;
	assert_int_equal(rdma_getaddrinfo(NULL, "7471", &hints, &res), 0);
	assert_non_null(res->ai_src_addr);
	assert_null(res->ai_dst_addr);
	assert_true(res->ai_flags & RAI_PASSIVE);
	sin = (struct sockaddr_in *)res->ai_src_addr;
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_ANY));
	assert_int_equal(sin->sin_port, htons(7471));
	rdma_freeaddrinfo(res);

	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "7472", &hints, &res), 0);
	sin = (struct sockaddr_in *)res->ai_src_addr;
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_equal(sin->sin_port, htons(7472));
	rdma_freeaddrinfo(res);
}

static void test_named_and_numerichost(void **state)
{
	struct rdma_addrinfo hints, *res = NULL;

	(void)state;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	assert_int_equal(rdma_getaddrinfo("localhost", "7471", &hints, &res), 0);
	assert_int_equal(((struct sockaddr_in *)res->ai_dst_addr)->sin_addr.s_addr,
			 htonl(INADDR_LOOPBACK));
	rdma_freeaddrinfo(res);

	hints.ai_flags = RAI_NUMERICHOST;
	res = NULL;
	assert_int_not_equal(rdma_getaddrinfo("localhost", "7471", &hints, &res), 0);
	assert_null(res);
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
	rdma_freeaddrinfo(res);
}

static void test_ipv6(void **state)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in6 *s6;

	(void)state;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	assert_int_equal(rdma_getaddrinfo("::1", "18515", &hints, &res), 0);
	assert_int_equal(res->ai_family, AF_INET6);
	assert_int_equal(res->ai_dst_len, sizeof(struct sockaddr_in6));
	s6 = (struct sockaddr_in6 *)res->ai_dst_addr;
	assert_true(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
	assert_int_equal(s6->sin6_port, htons(18515));
	rdma_freeaddrinfo(res);
}

static void test_errors(void **state)
{
	struct rdma_addrinfo hints, *res = NULL;

	(void)state;
	errno = 0;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, NULL, &res), -1);
	assert_int_equal(errno, EINVAL);
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_UD;
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", NULL, &hints, &res), -1);
	rdma_freeaddrinfo(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_numeric_active), cmocka_unit_test(test_no_service_port_zero),
	    cmocka_unit_test(test_passive),	   cmocka_unit_test(test_named_and_numerichost),
	    cmocka_unit_test(test_ipv6),	   cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
