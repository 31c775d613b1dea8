/* uiwarp-bench-tcpconns: aggregate throughput of N TCP connections between
 * two processes, one thread and one epoll set on each side: the raw TCP
 * counterpart of uiwarp-bench-qps (N RC QPs streaming RDMA Writes).
 *
 *   uiwarp-bench-tcpconns server [-b ADDR] [-p PORT] [-C CC] [-T MAXSEC]
 *   uiwarp-bench-tcpconns client -a ADDR [-p PORT] [-n CONNS] [-s SIZE]
 *                                [-t SECS] [-C CC] [-T MAXSEC]
 *
 * The client connects N sockets (TCP_NODELAY, as uiwarp sets on its own;
 * -C sets TCP_CONGESTION), sends a 16-byte header on each (magic, N), then
 * writes SIZE-byte messages on every writable socket (non-blocking,
 * level-triggered epoll) for SECS seconds, finishes the message each socket
 * is in, and shuts the sending side down. The server (one run) accepts the
 * N sockets, reads everything into one buffer, and when every socket has
 * reached EOF writes the byte total back on all of them; the client reads
 * it from the first. Time runs from the first write to that answer.
 *
 * Client output (one line on stdout):
 *   conns=N size=S secs=T bytes=B Gbit/s=G threads_mid=1 connect_s=C
 * Server output: conns=N bytes=B. Every wait is bounded (-T, default 120 s).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TC_MAGIC 0x54434e53u /* "TCNS" */

struct tc_hdr {
	uint32_t magic;
	uint32_t nconns;
	uint64_t reserved;
};

static const char *opt_addr, *opt_port = "18601", *opt_cc;
static int opt_n = 1, opt_maxsec = 120;
static size_t opt_size = 65536;
static double opt_secs = 2.0;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "uiwarp-bench-tcpconns: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *what)
{
	fprintf(stderr, "uiwarp-bench-tcpconns: %s\n", what);
	exit(1);
}

static void set_opts(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("TCP_NODELAY");
	if (opt_cc &&
	    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, opt_cc, (socklen_t)strlen(opt_cc)))
		die("TCP_CONGESTION");
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl");
}

/* As many open files as the hard limit allows (N sockets + epoll). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Blocking full read with a poll deadline; 1 full, 0 EOF/timeout, -1 error. */
static int read_full(int fd, void *b, size_t n, double deadline)
{
	char *p = b;

	while (n) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int ms = (int)((deadline - now_s()) * 1000);

		if (ms <= 0 || poll(&pfd, 1, ms) <= 0)
			return 0;
		ssize_t r = recv(fd, p, n, 0);
		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 1;
}

static struct addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags =
				     AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)},
			*ai;
	int e;

	if (passive && !host)
		hints.ai_family = AF_INET;
	e = getaddrinfo(host, port, &hints, &ai);
	if (e) {
		fprintf(stderr, "uiwarp-bench-tcpconns: %s port %s: %s\n", host ? host : "*", port,
			gai_strerror(e));
		exit(1);
	}
	return ai;
}

/* ------------------------------------------------------------- server */

struct sconn {
	int fd;
	int eof;
};

static int run_server(void)
{
	struct addrinfo *ai = resolve(opt_addr, opt_port, 1);
	int l = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
	double deadline = now_s() + opt_maxsec;

	if (l < 0)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (opt_cc && setsockopt(l, IPPROTO_TCP, TCP_CONGESTION, opt_cc, (socklen_t)strlen(opt_cc)))
		die("TCP_CONGESTION");
	if (bind(l, ai->ai_addr, ai->ai_addrlen))
		die("bind");
	if (listen(l, 4096))
		die("listen");
	freeaddrinfo(ai);
	fprintf(stderr, "uiwarp-bench-tcpconns: listening on port %s\n", opt_port);

	size_t cap = 256 * 1024;
	char *buf = malloc(cap);
	int ep = epoll_create1(0), n = -1, accepted = 0, eofs = 0;
	struct sconn *c = NULL;
	uint64_t total = 0;

	if (!buf || ep < 0)
		die("setup");
	set_nonblock(l);
	struct epoll_event lev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, l, &lev))
		die("epoll_ctl");

	while (n < 0 || eofs < n) {
		struct epoll_event evs[256];
		int got = epoll_wait(ep, evs, 256, 100);

		if (now_s() > deadline)
			fail("timed out");
		if (got < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int k = 0; k < got; k++) {
			if (evs[k].data.u64 == UINT64_MAX) {
				for (;;) {
					int fd = accept(l, NULL, NULL);

					if (fd < 0) {
						if (errno == EAGAIN || errno == EINTR)
							break;
						die("accept");
					}
					set_opts(fd);
					struct tc_hdr h;
					if (read_full(fd, &h, sizeof(h), deadline) != 1 ||
					    h.magic != TC_MAGIC)
						fail("bad header");
					if (n < 0) {
						n = (int)h.nconns;
						if (n < 1 || n > 100000)
							fail("bad connection count");
						c = calloc((size_t)n, sizeof(*c));
						if (!c)
							fail("out of memory");
					}
					if (accepted >= n)
						fail("too many connections");
					set_nonblock(fd);
					c[accepted].fd = fd;
					struct epoll_event ev = {.events = EPOLLIN,
								 .data.u64 = (uint64_t)accepted};
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
						die("epoll_ctl");
					accepted++;
				}
				continue;
			}
			struct sconn *s = &c[evs[k].data.u64];
			for (int rounds = 0; rounds < 16; rounds++) {
				ssize_t r = recv(s->fd, buf, cap, 0);

				if (r > 0) {
					total += (uint64_t)r;
					continue;
				}
				if (r == 0) {
					s->eof = 1;
					eofs++;
					epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
				} else if (errno != EAGAIN && errno != EINTR) {
					die("recv");
				}
				break;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		int fl = fcntl(c[i].fd, F_GETFL);

		fcntl(c[i].fd, F_SETFL, fl & ~O_NONBLOCK);
		if (send(c[i].fd, &total, sizeof(total), MSG_NOSIGNAL) != (ssize_t)sizeof(total) &&
		    i == 0)
			die("send total");
	}
	printf("conns=%d bytes=%llu\n", n, (unsigned long long)total);
	fflush(stdout);
	for (int i = 0; i < n; i++)
		close(c[i].fd);
	close(l);
	close(ep);
	free(c);
	free(buf);
	return 0;
}

/* ------------------------------------------------------------- client */

struct cconn {
	int fd;
	size_t off; /* bytes of the current message already sent */
	int done;
};

static int run_client(void)
{
	struct addrinfo *ai = resolve(opt_addr, opt_port, 0);
	struct cconn *c = calloc((size_t)opt_n, sizeof(*c));
	char *buf = malloc(opt_size);
	int ep = epoll_create1(0);
	double deadline = now_s() + opt_maxsec, tc = now_s();

	if (!c || !buf || ep < 0)
		die("setup");
	memset(buf, 0x5a, opt_size);
	for (int i = 0; i < opt_n; i++) {
		int fd = -1;

		for (int tries = 0; tries < 50; tries++) {
			fd = socket(ai->ai_family, SOCK_STREAM, 0);
			if (fd < 0)
				die("socket");
			set_opts(fd);
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
				break;
			if (errno != ECONNREFUSED || now_s() > deadline)
				die("connect");
			close(fd);
			fd = -1;
			usleep(100000);
		}
		if (fd < 0)
			fail("cannot connect");
		struct tc_hdr h = {.magic = TC_MAGIC, .nconns = (uint32_t)opt_n};
		if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h))
			die("send header");
		set_nonblock(fd);
		c[i].fd = fd;
		struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)i};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev))
			die("epoll_ctl");
	}
	freeaddrinfo(ai);
	double connect_s = now_s() - tc;

	double t0 = now_s(), t_end = t0 + opt_secs;
	uint64_t sent = 0;
	int stop = 0, remaining = opt_n;

	while (remaining > 0) {
		struct epoll_event evs[256];
		int got = epoll_wait(ep, evs, 256, 100);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		double t = now_s();
		if (t >= t_end)
			stop = 1;
		if (t > deadline)
			fail("timed out streaming");
		for (int k = 0; k < got; k++) {
			struct cconn *s = &c[evs[k].data.u64];

			if (s->done)
				continue;
			for (int rounds = 0; rounds < 16; rounds++) {
				if (stop && s->off == 0) {
					/* message boundary after the end: this one is done */
					s->done = 1;
					remaining--;
					epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
					shutdown(s->fd, SHUT_WR);
					break;
				}
				ssize_t r =
				    send(s->fd, buf + s->off, opt_size - s->off, MSG_NOSIGNAL);

				if (r < 0) {
					if (errno == EAGAIN || errno == EINTR)
						break;
					die("send");
				}
				sent += (uint64_t)r;
				s->off += (size_t)r;
				if (s->off == opt_size)
					s->off = 0;
			}
		}
	}
	uint64_t total = 0;
	int fl = fcntl(c[0].fd, F_GETFL);
	fcntl(c[0].fd, F_SETFL, fl & ~O_NONBLOCK);
	if (read_full(c[0].fd, &total, sizeof(total), deadline) != 1)
		fail("no total from the server");
	double dt = now_s() - t0;
	if (total != sent)
		fail("the server counted another byte total");
	printf("conns=%d size=%zu secs=%.3f bytes=%llu Gbit/s=%.3f threads_mid=1 connect_s=%.3f\n",
	       opt_n, opt_size, dt, (unsigned long long)total, (double)total * 8 / dt / 1e9,
	       connect_s);
	fflush(stdout);
	for (int i = 0; i < opt_n; i++)
		close(c[i].fd);
	close(ep);
	free(c);
	free(buf);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: uiwarp-bench-tcpconns server [-b ADDR] [-p PORT] [-C CC] [-T MAXSEC]\n"
		   "       uiwarp-bench-tcpconns client -a ADDR [-p PORT] [-n CONNS] [-s SIZE] "
		   "[-t SECS] [-C CC] [-T MAXSEC]\n");
}

int main(int argc, char **argv)
{
	int o;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	optind = 2;
	while ((o = getopt(argc, argv, "a:b:p:n:s:t:C:T:")) != -1) {
		switch (o) {
		case 'a':
		case 'b':
			opt_addr = optarg;
			break;
		case 'p':
			opt_port = optarg;
			break;
		case 'n':
			opt_n = atoi(optarg);
			break;
		case 's':
			opt_size = strtoul(optarg, NULL, 0);
			break;
		case 't':
			opt_secs = atof(optarg);
			break;
		case 'C':
			opt_cc = optarg;
			break;
		case 'T':
			opt_maxsec = atoi(optarg);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (opt_n < 1 || opt_n > 100000 || opt_size < 1 || opt_size > (1u << 30) || opt_secs <= 0 ||
	    opt_maxsec < 1) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	alarm((unsigned)opt_maxsec + 30); /* hard bound, whatever happens */
	if (!strcmp(argv[1], "server"))
		return run_server();
	if (!strcmp(argv[1], "client")) {
		if (!opt_addr)
			fail("client needs -a ADDR");
		return run_client();
	}
	usage(stderr);
	return 2;
}
