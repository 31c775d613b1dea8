/* iwpm_tool: the iwpm client and responder from the command line, for the
 * lab interop script (tests/iwpm/lab_iwpmd.sh) and by hand.
 *
 *   iwpm_tool query [-t MS] [-p UDPPORT] LOCAL REMOTE
 *       LOCAL: IP, IP:PORT or - ; REMOTE: IP:PORT ([v6]:PORT for IPv6).
 *       Prints "outcome=accepted port=7174 ms=3"; exit 0, 2 on bad usage.
 *   iwpm_tool respond [-p UDPPORT] [-s SECONDS] [-T] LISTEN...
 *       Runs the responder (default UDP 3935) for LISTEN addresses (IP:PORT)
 *       for SECONDS (default 10) or until SIGTERM / SIGINT; with -T also
 *       accepts TCP connections on them and holds them (silent) until the
 *       end. Prints "ready port=N" when running (or "busy" and exits 3),
 *       "tcp_accept ms=N from=IP:PORT" per connection (ms since ready), and
 *       the counters at the end.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "iwpm/iwpm.h"
#include "iwpm/iwpm_wire.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse(const char *s, struct sockaddr_storage *ss)
{
	char buf[128], *port = NULL, *host = buf;

	memset(ss, 0, sizeof(*ss));
	snprintf(buf, sizeof(buf), "%s", s);
	if (buf[0] == '[') {
		char *e = strchr(buf, ']');

		if (!e)
			return -1;
		*e = 0;
		host = buf + 1;
		if (e[1] == ':')
			port = e + 2;
	} else if (strchr(buf, ':') == strrchr(buf, ':') && strchr(buf, ':')) {
		port = strchr(buf, ':');
		*port++ = 0;
	}
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		ss->ss_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons(port ? (uint16_t)atoi(port) : 0);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		ss->ss_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port ? (uint16_t)atoi(port) : 0);
		return 0;
	}
	return -1;
}

static const char *fmt(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
		port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	}
	snprintf(buf, len, "%s:%u", ip, port);
	return buf;
}

static int usage(void)
{
	fprintf(stderr, "usage: iwpm_tool query [-t MS] [-p UDPPORT] LOCAL|- REMOTE\n"
			"       iwpm_tool respond [-p UDPPORT] [-s SECONDS] [-T] LISTEN...\n");
	return 2;
}

static int cmd_query(int argc, char **argv)
{
	struct sockaddr_storage local, remote, out;
	int timeout = -1, opt, port;
	unsigned pm_port = IWPM_PORT;
	enum iwpm_outcome o;
	long long t0;

	while ((opt = getopt(argc, argv, "t:p:")) != -1) {
		if (opt == 't')
			timeout = atoi(optarg);
		else if (opt == 'p')
			pm_port = (unsigned)atoi(optarg);
		else
			return usage();
	}
	if (argc - optind != 2 || parse(argv[optind + 1], &remote))
		return usage();
	if (strcmp(argv[optind], "-") && parse(argv[optind], &local))
		return usage();
	t0 = now_ms();
	port = iwpm_query_ex(strcmp(argv[optind], "-") ? (struct sockaddr *)&local : NULL,
			     (struct sockaddr *)&remote, timeout, (uint16_t)pm_port, &out, &o);
	if (port < 0) {
		fprintf(stderr, "iwpm_query: %s\n", strerror(-port));
		return 1;
	}
	printf("outcome=%s port=%d ms=%lld\n",
	       o == IWPM_ACCEPTED    ? "accepted"
	       : o == IWPM_REJECTED  ? "rejected"
	       : o == IWPM_TIMEDOUT  ? "timedout"
	       : o == IWPM_NO_MAPPER ? "nomapper"
	       : o == IWPM_DISABLED  ? "disabled"
				     : "sendfailed",
	       port, now_ms() - t0);
	return 0;
}

static int cmd_respond(int argc, char **argv)
{
	int seconds = 10, opt, tcp = 0, r, nfd = 0;
	unsigned pm_port = IWPM_PORT;
	struct pollfd fds[16];
	struct iwpm_responder_stats st;
	long long t0, end;
	char b[80];

	while ((opt = getopt(argc, argv, "p:s:T")) != -1) {
		if (opt == 'p')
			pm_port = (unsigned)atoi(optarg);
		else if (opt == 's')
			seconds = atoi(optarg);
		else if (opt == 'T')
			tcp = 1;
		else
			return usage();
	}
	setenv("UIWARP_IWPM_RESPONDER", "0", 1); /* only the explicit start below */
	r = iwpm_responder_start_port((uint16_t)pm_port);
	if (r == IWPM_RESPONDER_BUSY) {
		printf("busy\n");
		return 3;
	}
	if (r) {
		fprintf(stderr, "iwpm_responder_start_port: %s\n", strerror(-r));
		return 1;
	}
	for (int i = optind; i < argc && nfd < 16; i++) {
		struct sockaddr_storage ss;
		int one = 1;

		if (parse(argv[i], &ss))
			return usage();
		iwpm_responder_add_listener((struct sockaddr *)&ss);
		if (!tcp)
			continue;
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sizeof(ss)) || listen(fd, 16)) {
			fprintf(stderr, "tcp listen %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		fds[nfd++] = (struct pollfd){fd, POLLIN, 0};
	}
	struct sigaction sa = {.sa_handler = on_signal};
	int held[64], nheld = 0;

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("ready port=%u\n", iwpm_responder_port());
	fflush(stdout);
	t0 = now_ms();
	end = t0 + seconds * 1000LL;
	while (now_ms() < end && !stop) {
		int w = (int)(end - now_ms());

		if (nfd == 0) {
			usleep(w > 100 ? 100000 : (useconds_t)w * 1000);
			continue;
		}
		if (poll(fds, (nfds_t)nfd, w > 100 ? 100 : w) <= 0)
			continue;
		for (int i = 0; i < nfd; i++) {
			struct sockaddr_storage from;
			socklen_t fl = sizeof(from);
			int c;

			if (!(fds[i].revents & POLLIN))
				continue;
			c = accept(fds[i].fd, (struct sockaddr *)&from, &fl);
			if (c < 0)
				continue;
			printf("tcp_accept ms=%lld from=%s\n", now_ms() - t0,
			       fmt(&from, b, sizeof(b)));
			fflush(stdout);
			if (nheld < 64)
				held[nheld++] = c;
			else
				close(c);
		}
	}
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	iwpm_responder_get_stats(&st);
	printf("requests=%llu duplicates=%llu accepts=%llu rejects=%llu acks=%llu bad=%llu\n",
	       (unsigned long long)st.requests, (unsigned long long)st.duplicates,
	       (unsigned long long)st.accepts, (unsigned long long)st.rejects,
	       (unsigned long long)st.acks, (unsigned long long)st.bad);
	iwpm_responder_stop();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "query"))
		return cmd_query(argc - 1, argv + 1);
	if (!strcmp(argv[1], "respond"))
		return cmd_respond(argc - 1, argv + 1);
	return usage();
}
