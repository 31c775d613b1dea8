/* uiwarp's threads never take the application's asynchronous signals (tgt
 * blocks SIGUSR2 in its main thread, reads it through a signalfd, and its
 * worker threads send it with kill(getpid(), SIGUSR2)): every thread the
 * libraries create (rdma_cm listener, connect and accept workers, the
 * engine) blocks them, whatever the mask of the thread that made the call.
 *
 * The rdma_cm calls that start threads (rdma_listen, rdma_connect,
 * rdma_accept) are made with SIGUSR2 unblocked in the calling thread, and
 * a sender thread fires kill(getpid(), SIGUSR2) every 200 us while the
 * caller has it blocked again: a library thread that inherited the
 * caller's mask would take one and die of it (the default action), so the
 * test fails by dying. Meanwhile 10 connections are made, used and closed
 * on loopback; at the end every thread of the process but main has
 * SIGUSR2 in its blocked mask (/proc/self/task/N/status SigBlk) and the
 * signals sent were read from the signalfd. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "cm_util.h"

#define EV_MS 5000

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER; /* no kill() while held */
static volatile int stop_sending;
static volatile unsigned sent;
static sigset_t usr2;
static int sfd = -1;
static unsigned received;

/* Reads every SIGUSR2 pending for the process (signalfd, non-blocking). */
static void drain(void)
{
	struct signalfd_siginfo si;

	while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		if (si.ssi_signo == SIGUSR2)
			received++;
}

/* The sender: created with SIGUSR2 blocked (inherited from main). */
static void *sender(void *arg)
{
	struct timespec nap = {0, 200000};

	(void)arg;
	while (!stop_sending) {
		pthread_mutex_lock(&gate);
		kill(getpid(), SIGUSR2);
		sent++;
		pthread_mutex_unlock(&gate);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/* Runs call with SIGUSR2 unblocked in this thread, while no signal is sent
 * and none is pending (else this thread would take it and die). */
#define UNBLOCKED(call)                                                                            \
	do {                                                                                       \
		pthread_mutex_lock(&gate);                                                         \
		drain();                                                                           \
		pthread_sigmask(SIG_UNBLOCK, &usr2, NULL);                                         \
		call;                                                                              \
		pthread_sigmask(SIG_BLOCK, &usr2, NULL);                                           \
		pthread_mutex_unlock(&gate);                                                       \
	} while (0)

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev = cm_expect(ch, t, EV_MS);

	if (!ev)
		fail_msg("no %s", rdma_event_str(t));
	return ev;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	assert_int_equal(rdma_create_qp(id, NULL, &a), 0);
}

/* Number of threads of this process other than the caller whose blocked
 * mask lacks SIGUSR2 or holds SIGSEGV / SIGBUS (each names itself on
 * stderr); -1 if /proc cannot be read. */
static int threads_taking_usr2(void)
{
	pid_t self = (pid_t)syscall(SYS_gettid);
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int bad = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[300], line[256], comm[64] = "?";
		unsigned long long blk = 0;
		bool have = false;
		FILE *f;

		if (de->d_name[0] == '.' || atoi(de->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* gone meanwhile */
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "Name:", 5))
				sscanf(line + 5, "%63s", comm);
			if (sscanf(line, "SigBlk: %llx", &blk) == 1)
				have = true;
		}
		fclose(f);
		if (have && !(blk & (1ULL << (SIGUSR2 - 1)))) {
			fprintf(stderr, "thread %s (%s) does not block SIGUSR2 (SigBlk %llx)\n",
				de->d_name, comm, blk);
			bad++;
		}
		/* a fault in the thread must still reach the application's
		 * handler (and the sanitizers) */
		if (have && (blk & ((1ULL << (SIGSEGV - 1)) | (1ULL << (SIGBUS - 1))))) {
			fprintf(stderr, "thread %s (%s) blocks SIGSEGV / SIGBUS (SigBlk %llx)\n",
				de->d_name, comm, blk);
			bad++;
		}
	}
	closedir(d);
	return bad;
}

static void test_threads_block_signals(void **state)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen;
	struct sockaddr_in a = {.sin_family = AF_INET};
	pthread_t snd;
	uint16_t port;
	int ret = 0;

	(void)state;
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &usr2, NULL), 0);
	sfd = signalfd(-1, &usr2, SFD_NONBLOCK | SFD_CLOEXEC);
	assert_true(sfd >= 0);
	assert_int_equal(pthread_create(&snd, NULL, sender, NULL), 0);

	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	assert_non_null(sch);
	assert_non_null(cch);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_bind_addr(listen, (struct sockaddr *)&a), 0);
	UNBLOCKED(ret = rdma_listen(listen, 4));
	assert_int_equal(ret, 0);
	port = ntohs(rdma_get_src_port(listen));

	for (int i = 0; i < 10; i++) {
		struct sockaddr_in dst = a;
		struct rdma_cm_id *client, *server;
		struct rdma_cm_event *ev;

		dst.sin_port = htons(port);
		assert_int_equal(rdma_create_id(cch, &client, NULL, RDMA_PS_TCP), 0);
		assert_int_equal(rdma_resolve_addr(client, NULL, (struct sockaddr *)&dst, 2000), 0);
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
		assert_int_equal(rdma_resolve_route(client, 2000), 0);
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		make_qp(client);
		UNBLOCKED(ret = rdma_connect(client, NULL));
		assert_int_equal(ret, 0);
		ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
		server = ev->id;
		rdma_ack_cm_event(ev);
		make_qp(server);
		UNBLOCKED(ret = rdma_accept(server, NULL));
		assert_int_equal(ret, 0);
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ESTABLISHED));
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_ESTABLISHED));
		if (i == 9) /* listener and engine threads are up now */
			assert_int_equal(threads_taking_usr2(), 0);
		assert_int_equal(rdma_disconnect(client), 0);
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(client);
		rdma_destroy_qp(server);
		assert_int_equal(rdma_destroy_id(client), 0);
		assert_int_equal(rdma_destroy_id(server), 0);
	}
	stop_sending = 1;
	pthread_join(snd, NULL);
	{
		struct pollfd p = {.fd = sfd, .events = POLLIN};

		/* the last kill() is pending for the process, or already read */
		if (poll(&p, 1, 1000) == 1)
			drain();
	}
	print_message("%u SIGUSR2 sent, %u reads from the signalfd\n", sent, received);
	assert_true(sent > 0);
	assert_true(received > 0);
	assert_int_equal(rdma_destroy_id(listen), 0);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	close(sfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_threads_block_signals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
