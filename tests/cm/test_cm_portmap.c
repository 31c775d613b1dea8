/* rdma_cm ports held by other sockets are mapped through the port mapper
 * (docs/iwpm.md), as tgtd needs: it listens for iSCSI/TCP on 0.0.0.0:3260
 * and [::]:3260, then binds its iSER portals, one rdma_cm id per
 * getaddrinfo(NULL, "3260", AI_PASSIVE) address, AFONLY each, to the same
 * port. Both binds succeed and report 3260, both ids listen, a client
 * connecting to 127.0.0.1:3260 and [::1]:3260 reaches the right rdma_cm
 * listener (its request's local port is 3260) and a Send arrives, while the
 * TCP portals see no connection; a second rdma_cm bind to a port our own
 * listener holds is still EADDRINUSE, and so is a bind to a held port with
 * the port mapper off (UIWARP_IWPM=0). In a private network namespace
 * (unshare; root only, else skipped with 77) so that this process owns the
 * port mapper's UDP 3935 and TCP 3260 is free. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define PORT 3260
#define MSG_LEN 64

/* A TCP listener on the wildcard of family (IPv6: IPV6_V6ONLY, as tgtd's
 * portal), non-blocking. */
static int tcp_portal(int family, uint16_t port)
{
	struct sockaddr_storage ss = {0};
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
	socklen_t len;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		len = sizeof(*a);
	}
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
	assert_int_equal(listen(fd, 8), 0);
	return fd;
}

/* A synchronous rdma_cm id bound to the wildcard of family, port, AFONLY
 * set for IPv6 (tgt's iser_add_portal). Returns 0 and *out, or the errno of
 * rdma_bind_addr (the id destroyed). */
static int portal_id(int family, uint16_t port, struct rdma_cm_id **out)
{
	struct sockaddr_storage ss = {0};
	struct rdma_cm_id *id;
	int one = 1, e;

	assert_int_equal(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	if (family == AF_INET) {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *a = (void *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		assert_int_equal(
		    rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)),
		    0);
	}
	if (rdma_bind_addr(id, (struct sockaddr *)&ss)) {
		e = errno;
		rdma_destroy_id(id);
		return e;
	}
	*out = id;
	return 0;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.sq_sig_all = 1;
	return a;
}

struct server {
	struct rdma_cm_id *listen;
	char got[MSG_LEN];
	uint16_t local_port; /* of the request, host order */
	int rc;
};

/* One connection on s->listen: accept, receive one Send into s->got. */
static void *server_main(void *arg)
{
	struct server *s = arg;
	struct ibv_qp_init_attr a = qp_attr();
	struct rdma_cm_id *id = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;

	s->rc = -1;
	if (rdma_get_request(s->listen, &id))
		return NULL;
	s->local_port = ntohs(rdma_get_src_port(id));
	if (rdma_create_qp(id, NULL, &a) || !(mr = rdma_reg_msgs(id, s->got, sizeof(s->got))) ||
	    rdma_post_recv(id, NULL, s->got, sizeof(s->got), mr) || rdma_accept(id, NULL))
		goto out;
	if (rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS)
		s->rc = 0;
	rdma_disconnect(id);
out:
	if (mr)
		rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return NULL;
}

/* Connects to ip:PORT, sends msg; the server thread on listen must get
 * it, with PORT as the request's local port. */
static void connect_and_send(struct rdma_cm_id *listen, const char *ip, const char *msg)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	struct ibv_qp_init_attr a = qp_attr();
	struct server s = {.listen = listen};
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	char buf[MSG_LEN] = {0};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, server_main, &s), 0);
	assert_int_equal(rdma_getaddrinfo(ip, "3260", &hints, &res), 0);
	assert_int_equal(rdma_create_ep(&id, res, NULL, &a), 0);
	rdma_freeaddrinfo(res);
	strcpy(buf, msg);
	mr = rdma_reg_msgs(id, buf, sizeof(buf));
	assert_non_null(mr);
	if (rdma_connect(id, NULL))
		fail_msg("connect to %s:%d: %s", ip, PORT, strerror(errno));
	assert_int_equal(ntohs(rdma_get_dst_port(id)), PORT);
	assert_int_equal(rdma_post_send(id, NULL, buf, sizeof(buf), mr, 0), 0);
	assert_int_equal(rdma_get_send_comp(id, &wc), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(s.rc, 0);
	assert_string_equal(s.got, msg);
	assert_int_equal(s.local_port, PORT);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
}

static void no_connection(int fd)
{
	int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

	if (c >= 0)
		close(c);
	assert_int_equal(c, -1);
	assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
}

static void test_tgt_portals(void **state)
{
	int t4 = tcp_portal(AF_INET, PORT), t6 = tcp_portal(AF_INET6, PORT);
	struct rdma_cm_id *l4 = NULL, *l6 = NULL, *x = NULL;

	(void)state;
	assert_int_equal(portal_id(AF_INET, PORT, &l4), 0);
	assert_int_equal(portal_id(AF_INET6, PORT, &l6), 0);
	assert_int_equal(ntohs(rdma_get_src_port(l4)), PORT);
	assert_int_equal(rdma_listen(l4, 8), 0);
	assert_int_equal(rdma_listen(l6, 8), 0);
	assert_int_equal(ntohs(rdma_get_src_port(l4)), PORT);
	assert_int_equal(ntohs(rdma_get_src_port(l6)), PORT);
	/* rdma_cm's own port space: our listener holds 3260 */
	assert_int_equal(portal_id(AF_INET, PORT, &x), EADDRINUSE);

	connect_and_send(l4, "127.0.0.1", "over IPv4 to the mapped portal");
	connect_and_send(l6, "::1", "over IPv6 to the mapped portal");
	no_connection(t4);
	no_connection(t6);

	/* gone with the ids: 3260 can be mapped again */
	rdma_destroy_id(l4);
	rdma_destroy_id(l6);
	assert_int_equal(portal_id(AF_INET, PORT, &l4), 0);
	assert_int_equal(rdma_listen(l4, 8), 0);
	connect_and_send(l4, "127.0.0.1", "again");
	rdma_destroy_id(l4);
	close(t4);
	close(t6);
}

static void test_not_mapped_without_port_mapper(void **state)
{
	int t4 = tcp_portal(AF_INET, PORT + 1);
	struct rdma_cm_id *x = NULL;

	(void)state;
	setenv("UIWARP_IWPM", "0", 1);
	assert_int_equal(portal_id(AF_INET, PORT + 1, &x), EADDRINUSE);
	unsetenv("UIWARP_IWPM");
	assert_int_equal(portal_id(AF_INET, PORT + 1, &x), 0);
	rdma_destroy_id(x);
	close(t4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tgt_portals),
	    cmocka_unit_test(test_not_mapped_without_port_mapper),
	};

	if (unshare(CLONE_NEWNET) != 0) {
		fprintf(stderr, "SKIP: unshare(CLONE_NEWNET): %s (needs root)\n", strerror(errno));
		return 77;
	}
	if (system("ip link set lo up") != 0) {
		fprintf(stderr, "SKIP: cannot bring lo up (ip(8), iproute2)\n");
		return 77;
	}
	unsetenv("UIWARP_IWPM");
	unsetenv("UIWARP_IWPM_RESPONDER");
	unsetenv("UIWARP_IWPM_TIMEOUT_MS");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
