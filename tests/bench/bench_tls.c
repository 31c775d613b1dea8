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

#include "bench_stream.h"

static const unsigned char bench_psk[32] = {0x75, 0x69, 0x77, 0x61, 0x72, 0x70, 0x2d, 0x62,
					    0x65, 0x6e, 0x63, 0x68, 0x2d, 0x74, 0x6c, 0x73};

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

static int tls_opt(int opt, const char *arg, void *ctx)
{
	(void)opt;
	*(const char **)ctx = arg; /* -c SUITE */
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	const char *suite = "TLS_AES_128_GCM_SHA256";
	if (bench_parse(argc, argv, &o, "5305", "[-c SUITE]", "c:", tls_opt, &suite))
		return 2;
	size_t size = o.size;
	double secs = o.secs;
	signal(SIGPIPE, SIG_IGN);
	const char *what;
	int fd = bench_connect(o.addr, o.port, o.cc, o.server, o.wait_s, &what);
	if (fd < 0)
		die(what);
	if (o.server) {
		int c = fd;
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
	SSL *s = tls_on(fd, 0, suite);
	char *buf = malloc(size);
	if (!buf)
		die("malloc");
	memset(buf, 0x5a, size);
	double t0 = bench_now_s(), end = t0 + secs;
	while (bench_now_s() < end) {
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
	double t = bench_now_s() - t0;
	uint64_t n = be64toh(be);
	printf("bw size=%zu secs=%.3f rcvd=%llu Gbit/s=%.3f suite=%s\n", size, t,
	       (unsigned long long)n, (double)n * 8 / t / 1e9, SSL_get_cipher_name(s));
	return 0;
}
