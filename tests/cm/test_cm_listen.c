/* rdma_bind_addr / rdma_listen on loopback (port 0 picks a port, the
 * port can be re-bound after the listener is destroyed, a second listener
 * on a busy port fails), id->verbs rules, and rdma_create_qp (library PD,
 * PD of another context rejected, caps written back), RDMA_OPTION_ID_AFONLY
 * (an IPv6-only listener beside an IPv4 one on the same port). */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <arpa/inet.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "cm_util.h"

static struct sockaddr_in lo(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void test_bind_port0_listen_rebind(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *id2;
	struct sockaddr_in a = lo(0);
	uint16_t port;

	(void)state;
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
	port = ntohs(rdma_get_src_port(id));
	assert_int_not_equal(port, 0);
	/* a loopback bind has the device only while the port is on lo */
	assert_true((id->verbs != NULL) == cm_port_on_lo());
	assert_int_equal(rdma_get_local_addr(id)->sa_family, AF_INET);
	assert_int_equal(rdma_listen(id, 3), 0);
	assert_int_equal(ntohs(rdma_get_src_port(id)), port);

	/* the port of a listener cannot be bound again */
	assert_int_equal(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP), 0);
	a = lo(port);
	errno = 0;
	assert_int_equal(rdma_bind_addr(id2, (struct sockaddr *)&a), -1);
	assert_int_equal(errno, EADDRINUSE);
	rdma_destroy_id(id2);

	/* perftest: destroy the listener, bind and listen on the same port */
	assert_int_equal(rdma_destroy_id(id), 0);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
	assert_int_equal(rdma_listen(id, 3), 0);
	assert_int_equal(ntohs(rdma_get_src_port(id)), port);
	assert_int_equal(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

static void test_wildcard_and_ipv6(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in any = {.sin_family = AF_INET};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};

	(void)state;
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&any), 0);
	assert_null(id->verbs); /* wildcard: no device until a request comes */
	assert_int_not_equal(rdma_get_src_port(id), 0);
	assert_int_equal(rdma_listen(id, 0), 0);
	rdma_destroy_id(id);

	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	if (rdma_bind_addr(id, (struct sockaddr *)&a6) == 0) {
		assert_true((id->verbs != NULL) == cm_port_on_lo());
		assert_int_equal(rdma_get_local_addr(id)->sa_family, AF_INET6);
		assert_int_equal(rdma_listen(id, 1), 0);
	} else {
		print_message("no IPv6 loopback here (errno %d), skipped\n", errno);
	}
	rdma_destroy_id(id);

	/* a non-local address is refused */
	{
		struct sockaddr_in far = {.sin_family = AF_INET};

		far.sin_addr.s_addr = inet_addr("192.0.2.1");
		assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
		errno = 0;
		assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&far), -1);
		assert_int_equal(errno, EADDRNOTAVAIL);
		rdma_destroy_id(id);
	}
	rdma_destroy_event_channel(ch);
}

/* A plain TCP connect to a, blocking (loopback answers at once): 0, or
 * the errno of connect. */
static int tcp_try(const struct sockaddr *a, socklen_t len)
{
	int fd = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), e = 0;

	if (fd < 0)
		return errno;
	if (connect(fd, a, len))
		e = errno;
	close(fd);
	return e;
}

/* net.ipv6.bindv6only of this namespace, -1 if unreadable. Read from the
 * sysctl file, not the way the library learns it (a new socket's
 * IPV6_V6ONLY). */
static int bindv6only(void)
{
	FILE *f = fopen("/proc/sys/net/ipv6/bindv6only", "r");
	int v = -1;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* RDMA_OPTION_ID_AFONLY (tgt's iSER portals: one id per getaddrinfo
 * address, afonly each): [::]:P afonly listens beside 0.0.0.0:P, takes
 * IPv6 only (an IPv4 connect to P is refused once 0.0.0.0:P is gone);
 * AFONLY 0, or the default with net.ipv6.bindv6only 0, clashes with
 * 0.0.0.0:P (EADDRINUSE), as on the kernel rdma_cm; the option needs an
 * int and an idle or bound id (EINVAL). */
static void test_afonly(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id4, *id6, *idx;
	struct sockaddr_in any4 = {.sin_family = AF_INET};
	struct sockaddr_in6 any6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
	struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct sockaddr_in lo4 = lo(0);
	int one = 1, zero = 0, fd;
	uint16_t port;

	(void)state;
	fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&lo6, sizeof(lo6))) {
		if (fd >= 0)
			close(fd);
		rdma_destroy_event_channel(ch);
		skip(); /* no IPv6 here */
	}
	close(fd);
	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id4, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id4, (struct sockaddr *)&any4), 0);
	assert_int_equal(rdma_listen(id4, 4), 0);
	port = ntohs(rdma_get_src_port(id4));
	any6.sin6_port = lo6.sin6_port = lo4.sin_port = htons(port);

	/* AFONLY 0 set explicitly: [::]:P takes IPv4 too, so it clashes */
	assert_int_equal(rdma_create_id(ch, &idx, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(
	    rdma_set_option(idx, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &zero, sizeof(zero)), 0);
	errno = 0;
	assert_int_equal(rdma_bind_addr(idx, (struct sockaddr *)&any6), -1);
	assert_int_equal(errno, EADDRINUSE);
	rdma_destroy_id(idx);

	/* not set: the namespace's default; with bindv6only 0 it clashes too */
	if (bindv6only() == 0) {
		assert_int_equal(rdma_create_id(ch, &idx, NULL, RDMA_PS_TCP), 0);
		errno = 0;
		assert_int_equal(rdma_bind_addr(idx, (struct sockaddr *)&any6), -1);
		assert_int_equal(errno, EADDRINUSE);
		rdma_destroy_id(idx);
	}

	/* the option's own checks */
	assert_int_equal(rdma_create_id(ch, &idx, NULL, RDMA_PS_TCP), 0);
	errno = 0;
	assert_int_equal(rdma_set_option(idx, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, 1), -1);
	assert_int_equal(errno, EINVAL);
	rdma_destroy_id(idx);
	errno = 0;
	assert_int_equal(
	    rdma_set_option(id4, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)), -1);
	assert_int_equal(errno, EINVAL); /* listening: too late */

	/* AFONLY 1: binds and listens beside 0.0.0.0:P */
	assert_int_equal(rdma_create_id(ch, &id6, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(
	    rdma_set_option(id6, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)), 0);
	assert_int_equal(rdma_bind_addr(id6, (struct sockaddr *)&any6), 0);
	assert_int_equal(ntohs(rdma_get_src_port(id6)), port);
	assert_int_equal(rdma_listen(id6, 4), 0);
	assert_int_equal(tcp_try((struct sockaddr *)&lo6, sizeof(lo6)), 0);
	assert_int_equal(tcp_try((struct sockaddr *)&lo4, sizeof(lo4)), 0);

	/* the IPv6 listener is IPv6-only: without 0.0.0.0:P, IPv4 is refused */
	assert_int_equal(rdma_destroy_id(id4), 0);
	assert_int_equal(tcp_try((struct sockaddr *)&lo4, sizeof(lo4)), ECONNREFUSED);
	assert_int_equal(tcp_try((struct sockaddr *)&lo6, sizeof(lo6)), 0);
	assert_int_equal(rdma_destroy_id(id6), 0);
	rdma_destroy_event_channel(ch);
}

static void test_create_qp(void **state)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in a = lo(0);
	struct ibv_qp_init_attr attr;
	struct ibv_device **list;
	struct ibv_context *other;
	struct ibv_pd *pd, *other_pd;
	struct ibv_cq *cq;
	int n;

	(void)state;
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(id, (struct sockaddr *)&a), 0);
	if (!id->verbs) {
		/* the port is on another interface: resolving gives the device */
		struct sockaddr_in d = lo(1);

		assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000), 0);
		rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 2000));
	}
	assert_non_null(id->verbs);

	/* a PD of another context */
	list = ibv_get_device_list(&n);
	assert_non_null(list);
	assert_true(n >= 1);
	other = ibv_open_device(list[0]);
	assert_non_null(other);
	ibv_free_device_list(list);
	if (other != id->verbs) {
		other_pd = ibv_alloc_pd(other);
		assert_non_null(other_pd);
		cq = ibv_create_cq(other, 8, NULL, NULL, 0);
		assert_non_null(cq);
		memset(&attr, 0, sizeof(attr));
		attr.send_cq = attr.recv_cq = cq;
		attr.qp_type = IBV_QPT_RC;
		attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
		attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
		errno = 0;
		assert_int_equal(rdma_create_qp(id, other_pd, &attr), -1);
		assert_int_equal(errno, EINVAL);
		assert_null(id->qp);
		ibv_destroy_cq(cq);
		ibv_dealloc_pd(other_pd);
	}
	ibv_close_device(other);

	/* pd NULL, CQs NULL: the library's PD and CQs with channels */
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 16;
	attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, NULL, &attr), 0);
	assert_non_null(id->qp);
	assert_true(attr.cap.max_send_wr >= 16);
	assert_true(attr.cap.max_recv_wr >= 2);
	assert_non_null(id->send_cq);
	assert_non_null(id->recv_cq);
	assert_non_null(id->send_cq_channel);
	assert_ptr_equal(id->qp->context, id->verbs);
	{
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;

		assert_int_equal(ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qi), 0);
		assert_int_equal(qa.qp_state, IBV_QPS_INIT);
	}
	rdma_destroy_qp(id);
	assert_null(id->qp);
	assert_null(id->send_cq);

	/* the app's own PD on the id's context */
	pd = ibv_alloc_pd(id->verbs);
	assert_non_null(pd);
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	assert_non_null(cq);
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = attr.recv_cq = cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, pd, &attr), 0);
	assert_ptr_equal(id->qp->pd, pd);
	rdma_destroy_qp(id);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bind_port0_listen_rebind),
	    cmocka_unit_test(test_wildcard_and_ipv6),
	    cmocka_unit_test(test_create_qp),
	    cmocka_unit_test(test_afonly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
