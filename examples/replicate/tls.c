/* uiwarp-replicate --tcp --tls: the plain-socket copy wrapped in TLS 1.3 with
 * OpenSSL, the baseline that `--tls` over RDMA is measured against. It takes
 * the same credentials as uiwarp's own TLS stream (UIWARP_TLS_CERT, _KEY,
 * _CA, _PEER_NAME, _PSK, _PSK_IDENTITY, _CIPHERS: docs/configuration.md),
 * so one environment serves both modes. Each socket's SSL object is kept
 * in a table by descriptor; tcp.c's reads and writes go through
 * rep_tls_write / rep_tls_read when the descriptor has one. The sockets
 * are blocking with SO_RCVTIMEO / SO_SNDTIMEO, as without TLS. */
#include <ctype.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicate.h"

#define REP_TLS_MAX_FD 4096

static SSL *conns[REP_TLS_MAX_FD];
static SSL_CTX *ctx;
static unsigned char psk[64];
static size_t psk_len;

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

static const char *psk_identity(void)
{
	const char *id = env("UIWARP_TLS_PSK_IDENTITY");
	return id ? id : "uiwarp";
}

static unsigned int psk_client(SSL *ssl, const char *hint, char *identity, unsigned int max_id,
			       unsigned char *key, unsigned int max_key)
{
	(void)ssl;
	(void)hint;
	const char *id = psk_identity();
	if (strlen(id) + 1 > max_id || psk_len > max_key)
		return 0;
	memcpy(identity, id, strlen(id) + 1);
	memcpy(key, psk, psk_len);
	return (unsigned int)psk_len;
}

static unsigned int psk_server(SSL *ssl, const char *identity, unsigned char *key,
			       unsigned int max_key)
{
	(void)ssl;
	if (!identity || strcmp(identity, psk_identity()) != 0 || psk_len > max_key)
		return 0;
	memcpy(key, psk, psk_len);
	return (unsigned int)psk_len;
}

/* Prints OpenSSL's queued errors after what. */
static void tls_err(const char *what)
{
	char buf[256] = "";
	unsigned long e = ERR_get_error();
	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	rep_err("TLS: %s%s%s", what, buf[0] ? ": " : "", buf);
}

/* See replicate.h. */
int rep_tls_init(bool server)
{
	const char *hex = env("UIWARP_TLS_PSK"), *cert = env("UIWARP_TLS_CERT");
	const char *key = env("UIWARP_TLS_KEY"), *ca = env("UIWARP_TLS_CA");
	const char *ciphers = env("UIWARP_TLS_CIPHERS");
	size_t n = hex ? strlen(hex) : 0;

	if (n % 2 || n / 2 > sizeof(psk)) {
		rep_err("UIWARP_TLS_PSK: an even count of hex digits, at most %zu bytes",
			sizeof(psk));
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i += 2) {
		char h[3] = {hex[i], hex[i + 1], 0};
		if (!isxdigit((unsigned char)h[0]) || !isxdigit((unsigned char)h[1])) {
			rep_err("UIWARP_TLS_PSK: not hex");
			return -EINVAL;
		}
		psk[psk_len++] = (unsigned char)strtoul(h, NULL, 16);
	}
	ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION)) {
		tls_err("context");
		return -EINVAL;
	}
	if (ciphers && !SSL_CTX_set_ciphersuites(ctx, ciphers)) {
		tls_err("UIWARP_TLS_CIPHERS");
		return -EINVAL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	if (cert && (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
		     SSL_CTX_use_PrivateKey_file(ctx, key ? key : cert, SSL_FILETYPE_PEM) != 1)) {
		tls_err("UIWARP_TLS_CERT / UIWARP_TLS_KEY");
		return -EINVAL;
	}
	if (ca) {
		if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
			tls_err("UIWARP_TLS_CA");
			return -EINVAL;
		}
		SSL_CTX_set_verify(
		    ctx, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
	} else if (!server) {
		SSL_CTX_set_default_verify_paths(ctx);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	}
	if (psk_len) {
		if (server)
			SSL_CTX_set_psk_server_callback(ctx, psk_server);
		else
			SSL_CTX_set_psk_client_callback(ctx, psk_client);
	}
	return 0;
}

/* See replicate.h. */
int rep_tls_wrap(int fd, bool server)
{
	if (!ctx || fd < 0 || fd >= REP_TLS_MAX_FD)
		return -EINVAL;
	SSL *ssl = SSL_new(ctx);
	if (!ssl || !SSL_set_fd(ssl, fd)) {
		SSL_free(ssl);
		return -ENOMEM;
	}
	const char *name = env("UIWARP_TLS_PEER_NAME");
	if (!server && name) {
		SSL_set_tlsext_host_name(ssl, name);
		SSL_set1_host(ssl, name);
	}
	if ((server ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
		long v = SSL_get_verify_result(ssl);
		if (v != X509_V_OK)
			rep_err("TLS handshake: the peer's certificate: %s",
				X509_verify_cert_error_string(v));
		else
			tls_err("handshake");
		SSL_free(ssl);
		return -ECONNREFUSED;
	}
	conns[fd] = ssl;
	return 0;
}

/* See replicate.h. */
bool rep_tls_on(int fd)
{
	return fd >= 0 && fd < REP_TLS_MAX_FD && conns[fd];
}

/* An SSL_write / SSL_read failure as -errno. */
static int ssl_fail(SSL *ssl, int ret)
{
	int e = SSL_get_error(ssl, ret), err = errno;
	if (e == SSL_ERROR_ZERO_RETURN)
		return -ECONNRESET;
	if (e == SSL_ERROR_SYSCALL) {
		ERR_clear_error();
		if (err == EAGAIN || err == EWOULDBLOCK)
			return -ETIMEDOUT;
		return err ? -err : -ECONNRESET;
	}
	tls_err("record");
	return -EBADMSG;
}

/* See replicate.h. */
ssize_t rep_tls_write(int fd, const void *buf, size_t n)
{
	size_t w = 0;
	if (SSL_write_ex(conns[fd], buf, n, &w))
		return (ssize_t)w;
	return ssl_fail(conns[fd], 0);
}

/* See replicate.h. */
ssize_t rep_tls_read(int fd, void *buf, size_t n)
{
	size_t r = 0;
	if (SSL_read_ex(conns[fd], buf, n, &r))
		return (ssize_t)r;
	int e = ssl_fail(conns[fd], 0);
	return e == -ECONNRESET ? 0 : e;
}

/* See replicate.h. */
void rep_tls_close(int fd)
{
	if (!rep_tls_on(fd))
		return;
	SSL_free(conns[fd]);
	conns[fd] = NULL;
}
