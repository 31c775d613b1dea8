/* uiwarp-bench-tls: a TLS 1.3 socket stream (OpenSSL over a TCP socket), the
 * baseline of RDMA Write over uiwarp's TLS stream in scripts/bench.sh's tls
 * group (issue: TLS under MPA, docs/performance.md). Two ends, one TCP
 * connection, PSK authentication (no certificates to make):
 *
 *   uiwarp-bench-tls server -B ADDR -p PORT [-T SECS] [-C CC] [-c SUITE]
 *   uiwarp-bench-tls bw -H ADDR -p PORT -s SIZE -t SECS [-C CC] [-c SUITE]
 *
 * The client SSL_write_ex's SIZE-byte buffers for SECS seconds with
 * TCP_NODELAY (as uiwarp sets it), then shuts down; the server counts what
 * SSL_read_ex gives it and sends the count back through the TLS stream.
 * The client prints one line, as ../shared/bench's tcpbench does:
 *   bw size=SIZE secs=S rcvd=BYTES Gbit/s=G suite=SUITE
 * (application bytes the server received, over the client's sending time
 * up to the server's answer). -C sets TCP_CONGESTION; -c the TLS 1.3 suite
 * (default TLS_AES_128_GCM_SHA256). The server takes one connection and
 * exits; -T bounds its wait (default 120 s). Exit 0 on success. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const unsigned char bench_psk[32] = {0x75, 0x69, 0x77, 0x61, 0x72, 0x70, 0x2d, 0x62,
					    0x65, 0x6e, 0x63, 0x68, 0x2d, 0x74, 0x6c, 0x73};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "uiwarp-bench-tls: %s: %s\n", what, errno ? strerror(errno) : "failed");
	ERR_print_errors_fp(stderr);
	exit(1);
}

static unsigned int psk_client(SSL *ssl, const char *hint, char *id, unsigned int max_id,
			       unsigned char *psk, unsigned int max_psk)
{
	(void)ssl;
	(void)hint;
	if (max_id < 6 || max_psk < sizeof(bench_psk))
		return 0;
	memcpy(id, "bench", 6);
	memcpy(psk, bench_psk, sizeof(bench_psk));
	return sizeof(bench_psk);
}

static unsigned int psk_server(SSL *ssl, const char *id, unsigned char *psk, unsigned int max_psk)
{
	(void)ssl;
	if (!id || strcmp(id, "bench") != 0 || max_psk < sizeof(bench_psk))
		return 0;
	memcpy(psk, bench_psk, sizeof(bench_psk));
	return sizeof(bench_psk);
}

static SSL *tls_on(int fd, int server, const char *suite)
{
	SSL_CTX *c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!c || !SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(c, suite))
		die("SSL_CTX");
	SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
	if (server)
		SSL_CTX_set_psk_server_callback(c, psk_server);
	else
		SSL_CTX_set_psk_client_callback(c, psk_client);
	SSL *s = SSL_new(c);
	if (!s || !SSL_set_fd(s, fd) || (server ? SSL_accept(s) : SSL_connect(s)) != 1)
		die("TLS handshake");
	return s;
}

static void set_cc(int fd, const char *cc)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0)
		die("TCP_CONGESTION");
}

int main(int argc, char **argv)
{
	const char *addr = "127.0.0.1", *port = "5305", *cc = NULL;
	const char *suite = "TLS_AES_128_GCM_SHA256";
	size_t size = 65536;
	double secs = 5, wait_s = 120;
	int opt;

	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "bw"))) {
		fprintf(stderr,
			"usage: uiwarp-bench-tls server|bw [-B|-H ADDR] [-p PORT] [-s SIZE] "
			"[-t SECS] [-T SECS] [-C CC] [-c SUITE]\n");
		return 2;
	}
	int server = !strcmp(argv[1], "server");
	optind = 2;
	while ((opt = getopt(argc, argv, "B:H:p:s:t:T:C:c:")) != -1) {
		switch (opt) {
		case 'B':
		case 'H':
			addr = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 's':
			size = strtoul(optarg, NULL, 0);
			break;
		case 't':
			secs = atof(optarg);
			break;
		case 'T':
			wait_s = atof(optarg);
			break;
		case 'C':
			cc = optarg;
			break;
		case 'c':
			suite = optarg;
			break;
		default:
			return 2;
		}
	}
	if (size == 0 || secs <= 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = server ? AI_PASSIVE : 0};
	struct addrinfo *ai;
	if (getaddrinfo(addr, port, &hints, &ai) != 0)
		die("getaddrinfo");
	int fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	set_cc(fd, cc);
	if (server) {
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1) < 0)
			die("bind / listen");
		alarm((unsigned int)wait_s);
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			die("accept");
		set_cc(c, cc);
		SSL *s = tls_on(c, 1, suite);
		char *buf = malloc(1 << 20);
		uint64_t got = 0;
		size_t r;
		while (SSL_read_ex(s, buf, 1 << 20, &r))
			got += r;
		uint64_t be = htobe64(got);
		size_t w;
		if (!SSL_write_ex(s, &be, sizeof(be), &w))
			die("answer");
		SSL_shutdown(s);
		return 0;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("connect");
	SSL *s = tls_on(fd, 0, suite);
	char *buf = malloc(size);
	if (!buf)
		die("malloc");
	memset(buf, 0x5a, size);
	double t0 = now_s(), end = t0 + secs;
	while (now_s() < end) {
		size_t w;
		if (!SSL_write_ex(s, buf, size, &w))
			die("SSL_write");
	}
	SSL_shutdown(s); /* close_notify: the server's reads end */
	shutdown(fd, SHUT_WR);
	uint64_t be = 0;
	size_t r = 0, got = 0;
	while (got < sizeof(be) && SSL_read_ex(s, (char *)&be + got, sizeof(be) - got, &r))
		got += r;
	if (got != sizeof(be))
		die("the server's count");
	double t = now_s() - t0;
	uint64_t n = be64toh(be);
	printf("bw size=%zu secs=%.3f rcvd=%llu Gbit/s=%.3f suite=%s\n", size, t,
	       (unsigned long long)n, (double)n * 8 / t / 1e9, SSL_get_cipher_name(s));
	return 0;
}
