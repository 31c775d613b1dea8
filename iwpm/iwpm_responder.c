/* iwpm responder: answers port-mapper REQUESTs for uiwarp's listeners when
 * no iwpmd owns the UDP port (rdma-core iwpmd/iwarp_pm_server.c,
 * process_iwpm_wire_request / process_iwpm_wire_ack, is the other
 * implementation). An ACCEPT carries the listener's own port, or the
 * port it was mapped to when the application's port was held by a socket
 * that is not uiwarp's (iwpm_responder_add_mapping).
 *
 * Locking: life_lock serialises start/stop; list_lock guards the listener
 * table and is the only lock the thread takes. The table of answered
 * REQUESTs belongs to the thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iwpm/iwpm.h"
#include "iwpm/iwpm_internal.h"
#include "iwpm/iwpm_wire.h"
#include "util/thread.h"

#define ANSWERED_MAX 256
#define ANSWERED_TTL_MS (IWPM_MAP_REQ_TIMEOUT_S * 1000)

struct listener {
	uint8_t ip_ver; /* 4 or 6; 6 with a zero IP is the dual-stack wildcard */
	uint8_t ip[IWPM_IPADDR_LEN];
	uint16_t port;	 /* the application's port, which REQUESTs name */
	uint16_t mapped; /* the TCP port it listens on (= port unless mapped) */
	bool v6only;	 /* an IPv6 wildcard that takes no IPv4 */
	int refs;
};

/* A REQUEST already answered: the same assochandle from the same peer gets
 * the same answer until its ACK or ANSWERED_TTL_MS. */
struct answered {
	uint64_t handle;
	struct sockaddr_storage from;
	int64_t expires; /* 0: free slot */
	uint8_t reply[IWPM_MSG_LEN];
	bool accept;
};

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct listener *listeners;
static size_t n_listeners, cap_listeners;

static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	bool running;
	bool lazy; /* started by a listener (not iwpm_responder_start*): stops with the last */
	pid_t pid; /* the process that started it (fork detection) */
	uint16_t port;
	int fd4, fd6, wake_rd, wake_wr;
	pthread_t thread;
} R = {.fd4 = -1, .fd6 = -1, .wake_rd = -1, .wake_wr = -1};

static _Atomic uint64_t st_requests, st_duplicates, st_accepts, st_rejects, st_acks, st_bad;

static bool ip_is_zero(const uint8_t *ip)
{
	for (int i = 0; i < IWPM_IPADDR_LEN; i++)
		if (ip[i])
			return false;
	return true;
}

/* ------------------------------------------------------------ listeners */

static int to_listener(const struct sockaddr *sa, struct listener *l)
{
	int r;

	memset(l, 0, sizeof(*l));
	if (!sa)
		return -EINVAL;
	r = iwpm_sockaddr_to_wire(sa, &l->ip_ver, l->ip, &l->port);
	if (r)
		return r;
	return l->port ? 0 : -EINVAL;
}

static void start_for_listeners(void);
static void stop_if_unused(void);

int iwpm_responder_add_listener(const struct sockaddr *addr)
{
	uint16_t port = 0;

	iwpm_sockaddr_to_wire(addr, NULL, NULL, &port);
	return iwpm_responder_add_mapping(addr, port, false);
}

int iwpm_responder_add_mapping(const struct sockaddr *addr, uint16_t mapped_port, bool v6only)
{
	struct listener l;
	int r = to_listener(addr, &l);

	if (r)
		return r;
	if (!mapped_port)
		return -EINVAL;
	l.mapped = mapped_port;
	l.v6only = l.ip_ver == 6 && v6only;
	pthread_mutex_lock(&list_lock);
	for (size_t i = 0; i < n_listeners; i++) {
		struct listener *x = &listeners[i];

		if (x->ip_ver == l.ip_ver && x->port == l.port && !memcmp(x->ip, l.ip, 16) &&
		    x->mapped == l.mapped && x->v6only == l.v6only) {
			x->refs++;
			goto added;
		}
	}
	if (n_listeners == cap_listeners) {
		size_t cap = cap_listeners ? cap_listeners * 2 : 8;
		struct listener *n = realloc(listeners, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&list_lock);
			return -ENOMEM;
		}
		listeners = n;
		cap_listeners = cap;
	}
	l.refs = 1;
	listeners[n_listeners++] = l;
added:
	pthread_mutex_unlock(&list_lock);
	start_for_listeners(); /* lazily, on the first listener */
	return 0;
}

int iwpm_responder_remove_listener(const struct sockaddr *addr)
{
	struct listener l;
	int r = to_listener(addr, &l);

	if (r)
		return r == -EINVAL ? -ENOENT : r;
	r = -ENOENT;
	pthread_mutex_lock(&list_lock);
	for (size_t i = 0; i < n_listeners; i++) {
		struct listener *x = &listeners[i];

		if (x->ip_ver == l.ip_ver && x->port == l.port && !memcmp(x->ip, l.ip, 16)) {
			if (--x->refs == 0)
				listeners[i] = listeners[--n_listeners];
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&list_lock);
	if (!r)
		stop_if_unused();
	return r;
}

/* Whether registered listener x takes connections to ip_ver / ip, as in
 * iwpmd's find_iwpm_mapping: same IP, or either side a wildcard; a
 * dual-stack [::] (not v6only) takes IPv4 too. */
static bool listener_takes(const struct listener *x, uint8_t ip_ver, const uint8_t *ip)
{
	bool x_any = ip_is_zero(x->ip);

	if (x->ip_ver == ip_ver)
		return x_any || ip_is_zero(ip) || !memcmp(x->ip, ip, 16);
	return x->ip_ver == 6 && ip_ver == 4 && x_any && !x->v6only;
}

/* The TCP port of the listener for the accepting peer address of a
 * REQUEST (its mapped port), 0 if none. A listener of the REQUEST's own IP
 * version goes before a dual-stack [::] one (tgt listens on 0.0.0.0:P and
 * an AFONLY [::]:P, each mapped to a port of its own). */
static uint16_t find_listener(uint8_t ip_ver, const uint8_t *ip, uint16_t port)
{
	uint16_t found = 0;

	pthread_mutex_lock(&list_lock);
	for (size_t i = 0; i < n_listeners; i++) {
		const struct listener *x = &listeners[i];

		if (x->port != port || !listener_takes(x, ip_ver, ip))
			continue;
		found = x->mapped;
		if (x->ip_ver == ip_ver)
			break;
	}
	pthread_mutex_unlock(&list_lock);
	return found;
}

bool iwpm_responder_holds(const struct sockaddr *addr, bool v6only)
{
	struct listener l;
	bool held = false;

	if (to_listener(addr, &l))
		return false;
	l.v6only = l.ip_ver == 6 && v6only;
	pthread_mutex_lock(&list_lock);
	for (size_t i = 0; i < n_listeners && !held; i++) {
		const struct listener *x = &listeners[i];

		/* as two TCP binds clash: either one takes the other's
		 * addresses (a dual-stack [::] and 0.0.0.0 clash both ways) */
		held = x->port == l.port &&
		       (listener_takes(x, l.ip_ver, l.ip) || listener_takes(&l, x->ip_ver, x->ip));
	}
	pthread_mutex_unlock(&list_lock);
	return held;
}

/* --------------------------------------------------------------- thread */

static bool same_peer(const struct sockaddr_storage *a, const struct sockaddr_storage *b,
		      bool with_port)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_addr.s_addr == y->sin_addr.s_addr &&
		       (!with_port || x->sin_port == y->sin_port);
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

	return !memcmp(&x->sin6_addr, &y->sin6_addr, 16) &&
	       (!with_port || x->sin6_port == y->sin6_port);
}

/* UIWARP_IWPM_DEBUG=1: one line on stderr per answered REQUEST. */
static void debug_msg(const char *what, const struct iwpm_msg *m,
		      const struct sockaddr_storage *from)
{
	char ap[INET6_ADDRSTRLEN], cp[INET6_ADDRSTRLEN], fr[INET6_ADDRSTRLEN];
	int af = m->ip_ver == 4 ? AF_INET : AF_INET6;
	const void *fa = from->ss_family == AF_INET
			     ? (const void *)&((const struct sockaddr_in *)from)->sin_addr
			     : (const void *)&((const struct sockaddr_in6 *)from)->sin6_addr;

	inet_ntop(af, m->apipaddr, ap, sizeof(ap));
	inet_ntop(af, m->cpipaddr, cp, sizeof(cp));
	inet_ntop(from->ss_family, fa, fr, sizeof(fr));
	fprintf(stderr, "uiwarp iwpm: %s REQ from %s: ap %s:%u cp %s:%u handle %016llx\n", what, fr,
		ap, m->apport, cp, m->cpport, (unsigned long long)m->assochandle);
}

static void send_reply(int fd, const struct answered *a)
{
	socklen_t len =
	    a->from.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);

	atomic_fetch_add(a->accept ? &st_accepts : &st_rejects, 1); /* before: tests read it */
	(void)!sendto(fd, a->reply, IWPM_MSG_LEN, MSG_DONTWAIT, (const struct sockaddr *)&a->from,
		      len);
}

static void handle_request(int fd, const struct iwpm_msg *m, const struct sockaddr_storage *from,
			   struct answered *tab, int64_t now)
{
	struct answered *slot = NULL;
	struct iwpm_msg ans = *m;

	atomic_fetch_add(&st_requests, 1);
	for (int i = 0; i < ANSWERED_MAX; i++) {
		struct answered *a = &tab[i];

		if (a->expires > now && a->handle == m->assochandle &&
		    same_peer(&a->from, from, true)) {
			atomic_fetch_add(&st_duplicates, 1);
			send_reply(fd, a);
			return;
		}
		if (!slot || tab[i].expires < slot->expires)
			slot = &tab[i]; /* a free or the oldest slot */
	}
	/* ACCEPT: the REQUEST echoed with apport = the port the listener is
	 * on (the port asked for unless it was mapped); REJECT: echoed. */
	uint16_t to = find_listener(m->ip_ver, m->apipaddr, m->apport);

	ans.type = to ? IWPM_MT_ACCEPT : IWPM_MT_REJECT;
	if (to)
		ans.apport = to;
	if (iwpm_env_int("UIWARP_IWPM_DEBUG", 0, 0, 1))
		debug_msg(ans.type == IWPM_MT_ACCEPT ? "ACCEPT" : "REJECT", m, from);
	ans.mapped_cpport = 0;
	memset(ans.mapped_cpipaddr, 0, sizeof(ans.mapped_cpipaddr));
	uint8_t buf[IWPM_MSG_REQ_LEN];

	if (iwpm_msg_encode(&ans, buf) != IWPM_MSG_LEN)
		return;
	slot->handle = m->assochandle;
	slot->from = *from;
	slot->expires = now + ANSWERED_TTL_MS;
	slot->accept = ans.type == IWPM_MT_ACCEPT;
	memcpy(slot->reply, buf, IWPM_MSG_LEN);
	send_reply(fd, slot);
}

static void handle_ack(const struct iwpm_msg *m, const struct sockaddr_storage *from,
		       struct answered *tab, int64_t now)
{
	for (int i = 0; i < ANSWERED_MAX; i++) {
		struct answered *a = &tab[i];

		if (a->expires > now && a->handle == m->assochandle &&
		    same_peer(&a->from, from, false)) {
			a->expires = 0;
			atomic_fetch_add(&st_acks, 1);
			return;
		}
	}
}

static void handle_socket(int fd, struct answered *tab)
{
	for (int i = 0; i < 64; i++) {
		uint8_t buf[IWPM_MSG_REQ_LEN + 1];
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		struct iwpm_msg m;
		ssize_t n =
		    recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &flen);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (iwpm_msg_decode(buf, (size_t)n, &m) ||
		    (from.ss_family != AF_INET && from.ss_family != AF_INET6)) {
			atomic_fetch_add(&st_bad, 1);
			continue;
		}
		if (m.type == IWPM_MT_REQ)
			handle_request(fd, &m, &from, tab, iwpm_now_ms());
		else if (m.type == IWPM_MT_ACK)
			handle_ack(&m, &from, tab, iwpm_now_ms());
		else
			atomic_fetch_add(&st_bad, 1); /* we never send REQUESTs from here */
	}
}

static void *responder_main(void *arg)
{
	struct answered *tab = arg;
	struct pollfd p[3] = {{R.wake_rd, POLLIN, 0}, {R.fd4, POLLIN, 0}, {R.fd6, POLLIN, 0}};

	for (;;) {
		int r = poll(p, R.fd6 >= 0 ? 3 : 2, 1000);

		if (r < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (p[1].revents & POLLIN)
			handle_socket(R.fd4, tab);
		if (R.fd6 >= 0 && (p[2].revents & POLLIN))
			handle_socket(R.fd6, tab);
	}
	free(tab);
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Under life_lock, the thread gone (or never ours): closes the sockets
 * and marks the responder stopped. */
static void release(void)
{
	close_fd(&R.fd4);
	close_fd(&R.fd6);
	close_fd(&R.wake_rd);
	close_fd(&R.wake_wr);
	R.running = false;
	R.lazy = false;
	R.port = 0;
}

/* Under life_lock: a state inherited over fork() has no thread here;
 * forget it (closing our copies of the parent's sockets). */
static void forget_if_forked(void)
{
	if (R.running && R.pid != getpid())
		release();
}

static int bind_udp(int family, uint16_t port, int *out)
{
	struct sockaddr_storage ss = {0};
	socklen_t len;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_UDP);
	int one = 1, e;

	if (fd < 0)
		return -errno;
	if (family == AF_INET) {
		struct sockaddr_in *s4 = (void *)&ss;

		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_ANY);
		s4->sin_port = htons(port);
		len = sizeof(*s4);
	} else {
		struct sockaddr_in6 *s6 = (void *)&ss;

		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_any;
		s6->sin6_port = htons(port);
		len = sizeof(*s6);
	}
	/* no SO_REUSEADDR / SO_REUSEPORT: never share the port with iwpmd */
	if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	*out = fd;
	return 0;
}

static uint16_t bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint16_t port = 0;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		iwpm_sockaddr_to_wire((struct sockaddr *)&ss, NULL, NULL, &port);
	return port;
}

/* A fork() while another thread holds one of our locks would leave it held
 * forever in the child (qperf forks per test): take both around fork(). */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&life_lock);
	pthread_mutex_lock(&list_lock);
}

static void atfork_release(void)
{
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_unlock(&life_lock);
}

static void register_atfork(void)
{
	pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

static int start_locked(uint16_t port)
{
	static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

	int pfd[2], r;
	struct answered *tab;

	forget_if_forked();
	if (R.running)
		return port == 0 || port == R.port ? 0 : -EALREADY;
	pthread_once(&atfork_once, register_atfork);
	r = bind_udp(AF_INET, port, &R.fd4);
	if (r == -EADDRINUSE)
		return IWPM_RESPONDER_BUSY;
	if (r)
		return r;
	R.port = bound_port(R.fd4);
	if (bind_udp(AF_INET6, R.port, &R.fd6))
		R.fd6 = -1; /* no IPv6, or [::]:port taken: IPv4 only */
	tab = calloc(ANSWERED_MAX, sizeof(*tab));
	if (!tab || pipe2(pfd, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = tab ? -errno : -ENOMEM;
		free(tab);
		goto fail;
	}
	R.wake_rd = pfd[0];
	R.wake_wr = pfd[1];
	r = -uiw_thread_create(&R.thread, responder_main, tab);
	if (r) {
		free(tab);
		goto fail;
	}
	R.running = true;
	R.pid = getpid();
	return 0;
fail:
	close_fd(&R.fd4);
	close_fd(&R.fd6);
	close_fd(&R.wake_rd);
	close_fd(&R.wake_wr);
	R.port = 0;
	return r;
}

int iwpm_responder_start_port(uint16_t port)
{
	int r;

	pthread_mutex_lock(&life_lock);
	r = start_locked(port);
	pthread_mutex_unlock(&life_lock);
	return r;
}

int iwpm_responder_start(void)
{
	if (!iwpm_enabled() || iwpm_env_int("UIWARP_IWPM_RESPONDER", 1, 0, 1) == 0)
		return IWPM_RESPONDER_DISABLED;
	return iwpm_responder_start_port(IWPM_PORT);
}

uint16_t iwpm_responder_port(void)
{
	uint16_t port;

	pthread_mutex_lock(&life_lock);
	forget_if_forked();
	port = R.running ? R.port : 0;
	pthread_mutex_unlock(&life_lock);
	return port;
}

/* The responder a listener started (UIWARP_IWPM_RESPONDER allowing):
 * marked lazy, so that the last listener's removal stops it. */
static void start_for_listeners(void)
{
	if (!iwpm_enabled() || iwpm_env_int("UIWARP_IWPM_RESPONDER", 1, 0, 1) == 0)
		return;
	pthread_mutex_lock(&life_lock);
	forget_if_forked();
	if (!R.running && start_locked(IWPM_PORT) == 0)
		R.lazy = true;
	pthread_mutex_unlock(&life_lock);
}

/* Under life_lock, the thread running: wakes it, joins it, closes. */
static void stop_locked(void)
{
	(void)!write(R.wake_wr, "x", 1);
	pthread_join(R.thread, NULL);
	release();
}

/* After a listener's removal: a responder that listeners started ends
 * with the last of them, so a process that closed its listeners is left
 * with no thread of ours (an add_listener racing with this waits on
 * life_lock and starts it again). */
static void stop_if_unused(void)
{
	pthread_mutex_lock(&life_lock);
	forget_if_forked();
	pthread_mutex_lock(&list_lock);
	bool unused = n_listeners == 0;
	pthread_mutex_unlock(&list_lock);
	if (R.running && R.lazy && unused)
		stop_locked();
	pthread_mutex_unlock(&life_lock);
}

void iwpm_responder_stop(void)
{
	pthread_mutex_lock(&life_lock);
	forget_if_forked();
	if (R.running)
		stop_locked();
	pthread_mutex_unlock(&life_lock);
}

void iwpm_responder_get_stats(struct iwpm_responder_stats *out)
{
	out->requests = atomic_load(&st_requests);
	out->duplicates = atomic_load(&st_duplicates);
	out->accepts = atomic_load(&st_accepts);
	out->rejects = atomic_load(&st_rejects);
	out->acks = atomic_load(&st_acks);
	out->bad = atomic_load(&st_bad);
}
