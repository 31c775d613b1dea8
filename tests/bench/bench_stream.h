/* The TCP connection of the suite's socket baselines (uiwarp-bench-tls,
 * uiwarp-bench-mpa): one connection, TCP_NODELAY (as uiwarp sets it) and
 * the congestion control asked for. Header-only: each tool is one file. */
#ifndef UIWARP_BENCH_STREAM_H
#define UIWARP_BENCH_STREAM_H

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The options both tools take: server|bw [-B|-H ADDR] [-p PORT] [-s SIZE
 * bytes] [-t SECS] [-T SECS] [-C CC]; the tool's own ones go to its
 * callback. */
struct bench_opts {
	const char *addr, *port, *cc;
	size_t size;	     /* message bytes */
	double secs, wait_s; /* the client's sending time; the server's wait */
	int server;
};

/* Parses argv into *o (defaults: 127.0.0.1, port, 64 KiB, 5 s, 120 s);
 * extra is the getopt string of the tool's own options, each handed to
 * own(opt, optarg, ctx), which returns 0 or -1 (bad usage). Returns 0, or
 * 2 after printing usage (then exit 2). */
static inline int bench_parse(int argc, char **argv, struct bench_opts *o, const char *port,
			      const char *usage, const char *extra,
			      int (*own)(int opt, const char *arg, void *ctx), void *ctx)
{
	char spec[64];
	int opt;
	*o = (struct bench_opts){"127.0.0.1", port, NULL, 65536, 5, 120, 0};
	snprintf(spec, sizeof(spec), "B:H:p:s:t:T:C:%s", extra);
	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "bw")))
		goto bad;
	o->server = !strcmp(argv[1], "server");
	optind = 2;
	while ((opt = getopt(argc, argv, spec)) != -1) {
		switch (opt) {
		case 'B':
		case 'H':
			o->addr = optarg;
			break;
		case 'p':
			o->port = optarg;
			break;
		case 's':
			o->size = strtoul(optarg, NULL, 0);
			break;
		case 't':
			o->secs = atof(optarg);
			break;
		case 'T':
			o->wait_s = atof(optarg);
			break;
		case 'C':
			o->cc = optarg;
			break;
		default:
			if (opt == '?' || own(opt, optarg, ctx) < 0)
				goto bad;
		}
	}
	if (o->size && o->secs > 0)
		return 0;
bad:
	fprintf(stderr,
		"usage: %s server|bw [-B|-H ADDR] [-p PORT] [-s SIZE] [-t SECS] [-T SECS] "
		"[-C CC] %s\n",
		argv[0], usage);
	return 2;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* TCP_NODELAY, and TCP_CONGESTION cc unless NULL. Returns 0, or -1 with
 * errno when the congestion control is refused. */
static inline int bench_set_cc(int fd, const char *cc)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0)
		return -1;
	return 0;
}

/* The one connection: as server, listens on addr:port and accepts one
 * connection within wait_s seconds (SIGALRM ends the process otherwise);
 * as client, connects to addr:port. Both ends get bench_set_cc(cc).
 * Returns the connected fd, or -1 with *what naming the step that failed
 * (errno set, except for getaddrinfo). */
static inline int bench_connect(const char *addr, const char *port, const char *cc, int server,
				double wait_s, const char **what)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = server ? AI_PASSIVE : 0};
	struct addrinfo *ai;
	*what = "getaddrinfo";
	if (getaddrinfo(addr, port, &hints, &ai) != 0)
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM, 0), c = -1;
	*what = "socket";
	if (fd < 0)
		goto out;
	*what = "TCP_CONGESTION";
	if (bench_set_cc(fd, cc) < 0)
		goto out;
	if (!server) {
		*what = "connect";
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			c = fd;
			fd = -1;
		}
		goto out;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	*what = "bind / listen";
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1) < 0)
		goto out;
	alarm((unsigned int)wait_s);
	*what = "accept";
	c = accept(fd, NULL, NULL);
	alarm(0);
	if (c >= 0 && bench_set_cc(c, cc) < 0) {
		*what = "TCP_CONGESTION";
		close(c);
		c = -1;
	}
out:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return c;
}

#endif
