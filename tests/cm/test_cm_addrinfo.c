/* rdma_getaddrinfo / rdma_freeaddrinfo: numeric and named hosts, passive
 * wildcard, RAI_NUMERICHOST, ports, defaults (RDMA_PS_TCP, IBV_QPT_RC),
 * results built from the hints alone (no node, no service).
 * The RDMACM_1.4 calls of rdma-core 60 (rdma_resolve_addrinfo,
 * rdma_query_addrinfo, rdma_write_cm_event), imported with their version
 * node as a program built against rdma-core 60 imports them: this program
 * does not load if the node is missing; and RDMACM_1.5's repoll_* on the
 * channel fd. */
#include <errno.h>
#include <netdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "cm_util.h"

/* rdma-core 60's declarations and constants (the system headers are 44's) */
int rdma_resolve_addrinfo(struct rdma_cm_id *id, const char *node, const char *service,
			  const struct rdma_addrinfo *hints);
int rdma_query_addrinfo(struct rdma_cm_id *id, struct rdma_addrinfo **info);
int rdma_write_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type event, int status,
			uint64_t arg);
#define EV_ADDRINFO_RESOLVED ((enum rdma_cm_event_type)16)
#define EV_USER ((enum rdma_cm_event_type)18)
#define RAI_SA_60 0x00000010
/* RDMACM_1.5 (rdma-core master after v64, <rdma/rsocket.h>) */
int repoll_create(int flags);
int repoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
int repoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);

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

/* Neither node nor service: the result comes from the hints alone, as
 * librdmacm builds it (libfabric's verbs provider: vrb_get_rdmacm_rai with
 * only hints->ai_src_addr or ai_dst_addr, then rdma_bind_addr /
 * rdma_resolve_addr on the result). */
static void test_hints_only(void **state)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = htons(7000)};
	struct sockaddr_in6 dst = {.sin6_family = AF_INET6, .sin6_port = htons(7001)};
	struct rdma_cm_id *id;

	(void)state;
	src.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	dst.sin6_addr = in6addr_loopback;

	/* only a source: passive use */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_family = AF_INET;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), 0);
	assert_non_null(res);
	assert_int_equal(res->ai_flags, RAI_PASSIVE);
	assert_int_equal(res->ai_family, AF_INET);
	assert_int_equal(res->ai_port_space, RDMA_PS_TCP);
	assert_null(res->ai_dst_addr);
	assert_int_equal(res->ai_dst_len, 0);
	assert_int_equal(res->ai_src_len, sizeof(src));
	assert_ptr_not_equal(res->ai_src_addr, &src); /* a copy */
	assert_memory_equal(res->ai_src_addr, &src, sizeof(src));
	assert_null(res->ai_next);
	assert_int_equal(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, res->ai_src_addr), 0);
	assert_true((id->verbs != NULL) == cm_port_on_lo()); /* 127.0.0.1 */
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_freeaddrinfo(res);

	/* only a destination, kept as given (an IPv6 one with family 0) */
	memset(&hints, 0, sizeof(hints));
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof(dst);
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), 0);
	assert_int_equal(res->ai_flags, 0);
	assert_int_equal(res->ai_family, 0);
	assert_null(res->ai_src_addr);
	assert_int_equal(res->ai_dst_len, sizeof(dst));
	assert_memory_equal(res->ai_dst_addr, &dst, sizeof(dst));
	/* what libfabric does with it: resolve toward it (synchronous id) */
	assert_int_equal(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000), 0);
	assert_non_null(id->verbs);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_freeaddrinfo(res);

	/* both */
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	hints.ai_qp_type = IBV_QPT_RC;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), 0);
	assert_int_equal(res->ai_qp_type, IBV_QPT_RC);
	assert_memory_equal(res->ai_src_addr, &src, sizeof(src));
	assert_memory_equal(res->ai_dst_addr, &dst, sizeof(dst));
	rdma_freeaddrinfo(res);

	/* hints without an address: a result without one (librdmacm) */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), 0);
	assert_null(res->ai_src_addr);
	assert_null(res->ai_dst_addr);
	rdma_freeaddrinfo(res);

	/* a length without an address, or longer than any sockaddr */
	hints.ai_src_len = sizeof(src);
	res = (struct rdma_addrinfo *)&hints; /* overwritten with NULL */
	errno = 0;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), -1);
	assert_int_equal(errno, EINVAL);
	assert_null(res);
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(struct sockaddr_storage) + 1;
	errno = 0;
	assert_int_equal(rdma_getaddrinfo(NULL, NULL, &hints, &res), -1);
	assert_int_equal(errno, EINVAL);
	/* with node: hints->ai_src_addr is copied for an active result */
	memset(&hints, 0, sizeof(hints));
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	assert_int_equal(rdma_getaddrinfo("127.0.0.1", "7002", &hints, &res), 0);
	assert_memory_equal(res->ai_src_addr, &src, sizeof(src));
	assert_int_equal(((struct sockaddr_in *)res->ai_dst_addr)->sin_port, htons(7002));
	rdma_freeaddrinfo(res);
}

static void test_resolve_addrinfo(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	(void)state;
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	errno = 0;
	assert_int_equal(rdma_query_addrinfo(id, &res), -1); /* nothing resolved */
	assert_int_equal(errno, ENOENT);
	assert_int_equal(rdma_resolve_addrinfo(id, "127.0.0.1", "7471", NULL), 0);
	errno = 0;
	assert_int_equal(rdma_resolve_addrinfo(id, "127.0.0.1", "7471", NULL), -1);
	assert_int_equal(errno, EBUSY); /* the first result was not queried */
	ev = cm_expect(ch, EV_ADDRINFO_RESOLVED, 2000);
	assert_non_null(ev);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(ev->status, 0);
	assert_string_equal(rdma_event_str(ev->event), "RDMA_CM_EVENT_ADDRINFO_RESOLVED");
	rdma_ack_cm_event(ev);
	assert_int_equal(rdma_query_addrinfo(id, &res), 0);
	assert_non_null(res);
	assert_int_equal(res->ai_family, AF_INET);
	assert_int_equal(((struct sockaddr_in *)res->ai_dst_addr)->sin_port, htons(7471));
	rdma_freeaddrinfo(res);
	errno = 0;
	assert_int_equal(rdma_query_addrinfo(id, &res), -1); /* taken */
	assert_int_equal(errno, ENOENT);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_SA_60; /* IB SA: not on iWARP */
	errno = 0;
	assert_int_equal(rdma_resolve_addrinfo(id, NULL, "1", &hints), -1);
	assert_int_equal(errno, EOPNOTSUPP);
	hints.ai_flags = RAI_NUMERICHOST;
	assert_int_equal(rdma_resolve_addrinfo(id, "no.such.host.invalid", "1", &hints), -1);
	/* a result left unqueried is freed with the id (ASan: no leak) */
	assert_int_equal(rdma_resolve_addrinfo(id, "::1", "7", NULL), 0);
	ev = cm_expect(ch, EV_ADDRINFO_RESOLVED, 2000);
	assert_non_null(ev);
	rdma_ack_cm_event(ev);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

static void test_write_cm_event(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct epoll_event ee = {.events = EPOLLIN};
	uint64_t arg;
	int epfd;

	(void)state;
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	errno = 0;
	assert_int_equal(rdma_write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 1), -1);
	assert_int_equal(errno, EINVAL);
	/* the event wakes an epoll on the channel fd (repoll_*: RDMACM_1.5) */
	epfd = repoll_create(EPOLL_CLOEXEC);
	assert_true(epfd >= 0);
	assert_int_equal(repoll_ctl(epfd, EPOLL_CTL_ADD, ch->fd, &ee), 0);
	assert_int_equal(repoll_wait(epfd, &ee, 1, 0), 0);
	assert_int_equal(rdma_write_cm_event(id, EV_USER, -7, 0x1122334455667788ull), 0);
	assert_int_equal(repoll_wait(epfd, &ee, 1, 2000), 1);
	close(epfd);
	ev = cm_expect(ch, EV_USER, 2000);
	assert_non_null(ev);
	assert_ptr_equal(ev->id, id);
	assert_int_equal(ev->status, -7);
	memcpy(&arg, &ev->param, sizeof(arg)); /* rdma-core 60: ev->param.arg */
	assert_true(arg == 0x1122334455667788ull);
	rdma_ack_cm_event(ev);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_numeric_active), cmocka_unit_test(test_no_service_port_zero),
	    cmocka_unit_test(test_passive),	   cmocka_unit_test(test_named_and_numerichost),
	    cmocka_unit_test(test_ipv6),	   cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_hints_only),	   cmocka_unit_test(test_resolve_addrinfo),
	    cmocka_unit_test(test_write_cm_event),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
