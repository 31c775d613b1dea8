/* libuiwarp-bench-cc.so: LD_PRELOAD helper of scripts/bench.sh. Sets the TCP
 * congestion control named by UIWARP_BENCH_CC on every TCP socket the
 * program creates, so that programs without such an option (ucx_perftest,
 * fi_pingpong) run under the same congestion control as uiwarp
 * (UIWARP_TCP_CONGESTION) and tcpbench (-C) in the same comparison.
 * Unset or empty: no effect. A failing setsockopt is reported once on
 * stderr and the socket keeps the system default. */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol)
{
	static int (*real_socket)(int, int, int);
	static int warned;
	const char *cc = getenv("UIWARP_BENCH_CC");
	int fd, err;

	if (!real_socket)
		real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
	if (!real_socket) {
		errno = ENOSYS;
		return -1;
	}
	fd = real_socket(domain, type, protocol);
	if (fd < 0 || !cc || !*cc || (domain != AF_INET && domain != AF_INET6) ||
	    (type & 0xf) != SOCK_STREAM || (protocol != 0 && protocol != IPPROTO_TCP))
		return fd;
	err = errno;
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0 && !warned) {
		warned = 1;
		fprintf(stderr, "libuiwarp-bench-cc: TCP_CONGESTION %s: %s\n", cc, strerror(errno));
	}
	errno = err;
	return fd;
}
