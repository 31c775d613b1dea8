/* Engine configuration from the environment, read once.
 *
 * | variable              | default | meaning                                        |
 * | UIWARP_MPA_REV        | 2       | MPA revision sent as initiator (1 or 2)        |
 * | UIWARP_MPA_CRC        | 1       | ask for CRC32c (0: only if the peer asks)      |
 * | UIWARP_MPA_CRC_REQUIRED | 0     | refuse peers that will not use CRC             |
 * | UIWARP_P2P            | 1       | RFC 6581 peer-to-peer mode as initiator        |
 * | UIWARP_RTR            | both    | RTR kinds offered: write, read, both or send   |
 * | UIWARP_MPA_TIMEOUT_MS | 10000   | wait for the peer's MPA request / reply / RTR  |
 * | UIWARP_CONNECT_TIMEOUT_MS | 10000 | TCP connect timeout                          |
 * | UIWARP_CONNECT_RETRY_MS | 250   | retry a refused TCP connect this long (0: no) |
 * | UIWARP_RQ_WAIT_MS     | 100     | a Send that finds no receive WR waits this    |
 * |                       |         | long for one before the Terminate (0: none)    |
 * | UIWARP_MPA_RTR_DELAY_US | 0     | initiator: wait this long (µs) after the MPA  |
 * |                       |         | Reply before the first FPDU (slow siw peers)   |
 * | UIWARP_TCP_CONGESTION | (system) | TCP congestion control for uiwarp's sockets   |
 * | UIWARP_TCP_MAXSEG     | (path)  | clamp the TCP MSS (tests of small-MTU paths)   |
 * | UIWARP_TCP_SNDBUF / UIWARP_TCP_RCVBUF | (auto) | socket buffer sizes (bytes)     |
 * | UIWARP_TCP_NOTSENT_LOWAT | (system) | TCP_NOTSENT_LOWAT (bytes)                  |
 * | UIWARP_DEAD_PEER_MS   | 30000   | dead-peer bound: TCP_USER_TIMEOUT + keepalive  |
 * |                       |         | (0: the kernel's defaults)                     |
 * | UIWARP_MPTCP          | 0       | 1: Multipath TCP sockets (plain TCP fallback)  |
 * | UIWARP_RFC7306        | 0       | offer RFC 7306 (Immediate Data, Atomics)       |
 * | UIWARP_MPA_MARKERS    | 1       | 0 no markers (reject a peer's M), 1 honour a   |
 * |                       |         | peer's M, 2 also ask for markers (RFC 5044 §5)  |
 * | UIWARP_MPA_LARGE_FPDU | 1       | announce and use FPDUs above the EMSS with a    |
 * |                       |         | peer that announces them (siw's GSO bit)        |
 * | UIWARP_SPIN_US        | 0       | the engine thread busy-polls this long (µs)     |
 * |                       |         | before sleeping (also UIWARP_RX_SPIN_US)        |
 * | UIWARP_POLL_YIELD_US  | 20      | an empty CQ poll this long after the CQ's last  |
 * |                       |         | completion yields the CPU (-1: never)           |
 * | UIWARP_POLL_NAP_US    | 1000    | ... and this long sleeps UIW_POLL_NAP_NS (-1:   |
 * |                       |         | never)                                          |
 *
 * docs/configuration.md is the full list (UIWARP_LOG, UIWARP_STATS, ...).
 */
#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rdmap/internal.h"
#include "util/log.h"

static struct uiw_config cfg;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long x = strtol(v, &end, 0);
	return *end ? def : x;
}

static void tls_load(void);

static void config_load(void)
{
	mpa_config_default(&cfg.mpa);
	long rev = env_long("UIWARP_MPA_REV", cfg.mpa.rev);
	if (rev == 1 || rev == 2)
		cfg.mpa.rev = (uint8_t)rev;
	cfg.mpa.crc = env_long("UIWARP_MPA_CRC", cfg.mpa.crc) != 0;
	cfg.mpa.crc_required = env_long("UIWARP_MPA_CRC_REQUIRED", cfg.mpa.crc_required) != 0;
	cfg.mpa.p2p = env_long("UIWARP_P2P", cfg.mpa.p2p) != 0;
	const char *rtr = getenv("UIWARP_RTR");
	if (rtr && !strcmp(rtr, "write"))
		cfg.mpa.rtr_offer = MPA_RTR_WRITE;
	else if (rtr && !strcmp(rtr, "read"))
		cfg.mpa.rtr_offer = MPA_RTR_READ;
	else if (rtr && !strcmp(rtr, "send"))
		cfg.mpa.rtr_offer = MPA_RTR_SEND;
	else if (rtr && !strcmp(rtr, "both"))
		cfg.mpa.rtr_offer = MPA_RTR_WRITE | MPA_RTR_READ;
	long t = env_long("UIWARP_MPA_TIMEOUT_MS", cfg.mpa.timeout_ms);
	if (t > 0)
		cfg.mpa.timeout_ms = (int)t;
	t = env_long("UIWARP_CONNECT_TIMEOUT_MS", 10000);
	cfg.connect_timeout_ms = t > 0 ? (int)t : 10000;
	t = env_long("UIWARP_CONNECT_RETRY_MS", 250);
	cfg.connect_retry_ms = t >= 0 && t <= 60000 ? (int)t : 250;
	t = env_long("UIWARP_RQ_WAIT_MS", 100);
	cfg.rq_wait_ms = t >= 0 && t <= 60000 ? (int)t : 100;
	t = env_long("UIWARP_MPA_RTR_DELAY_US", 0);
	cfg.rtr_delay_us = t > 0 && t <= 10000000 ? (int)t : 0;
	cfg.mpa.rfc7306 = env_long("UIWARP_RFC7306", 0) != 0;
	long mk = env_long("UIWARP_MPA_MARKERS", 1);
	cfg.mpa.markers = mk >= 1;
	cfg.mpa.want_markers = mk >= 2;
	cfg.mpa.large_fpdu = env_long("UIWARP_MPA_LARGE_FPDU", cfg.mpa.large_fpdu) != 0;
	long spin = env_long("UIWARP_SPIN_US", env_long("UIWARP_RX_SPIN_US", 0));
	cfg.spin_us = spin > 0 && spin <= 10000000 ? (int)spin : 0;
	long py = env_long("UIWARP_POLL_YIELD_US", 20);
	cfg.poll_yield_us = py >= 0 && py <= 10000000 ? (int)py : -1;
	long pn = env_long("UIWARP_POLL_NAP_US", 1000);
	cfg.poll_nap_us = pn >= 0 && pn <= 10000000 ? (int)pn : -1;
	long mss = env_long("UIWARP_TCP_MAXSEG", 0);
	cfg.tcp.maxseg = mss >= 88 && mss <= 65535 ? (int)mss : 0;
	const char *cc = getenv("UIWARP_TCP_CONGESTION");
	if (cc && strlen(cc) < sizeof(cfg.tcp.cc))
		strcpy(cfg.tcp.cc, cc);
	long b = env_long("UIWARP_TCP_SNDBUF", 0);
	cfg.tcp.sndbuf = b > 0 && b <= INT_MAX / 2 ? (int)b : 0;
	b = env_long("UIWARP_TCP_RCVBUF", 0);
	cfg.tcp.rcvbuf = b > 0 && b <= INT_MAX / 2 ? (int)b : 0;
	cfg.tcp.short_rcvbuf = b == 0; /* -1: autotuning on every path */
	b = env_long("UIWARP_TCP_NOTSENT_LOWAT", 0);
	cfg.tcp.notsent_lowat = b > 0 && b <= INT_MAX ? (int)b : 0;
	cfg.tcp.tos = -1;
	b = env_long("UIWARP_DEAD_PEER_MS", UIW_DEAD_PEER_MS_DEFAULT);
	cfg.tcp.dead_peer_ms = b >= 0 && b <= 24L * 3600 * 1000 ? (int)b : UIW_DEAD_PEER_MS_DEFAULT;
	cfg.tcp.mptcp = env_long("UIWARP_MPTCP", 0) != 0;
	tls_load();
}

/* A non-empty environment string, or NULL. */
static const char *env_str(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* UIWARP_TLS and its files (docs/configuration.md). An unknown mode or a
 * PSK that is not hex is said once and leaves TLS off / without PSK. */
static void tls_load(void)
{
	struct uiw_tls_opts *t = &cfg.tls;
	const char *m = env_str("UIWARP_TLS");
	t->mode = UIW_TLS_OFF;
	if (m && (!strcmp(m, "on") || !strcmp(m, "1")))
		t->mode = UIW_TLS_ON;
	else if (m && !strcmp(m, "required"))
		t->mode = UIW_TLS_REQUIRED;
	else if (m && strcmp(m, "off") && strcmp(m, "0"))
		uiw_log(UIW_LOG_WARN, NULL, "UIWARP_TLS=%s: not off, on or required; TLS is off",
			m);
	t->cert = env_str("UIWARP_TLS_CERT");
	t->key = env_str("UIWARP_TLS_KEY");
	t->ca = env_str("UIWARP_TLS_CA");
	t->peer_name = env_str("UIWARP_TLS_PEER_NAME");
	t->ciphers = env_str("UIWARP_TLS_CIPHERS");
	t->psk_identity = env_str("UIWARP_TLS_PSK_IDENTITY");
	const char *k = env_str("UIWARP_TLS_KTLS");
	t->no_ktls = k && (!strcmp(k, "0") || !strcmp(k, "off"));
	const char *psk = env_str("UIWARP_TLS_PSK");
	size_t n = psk ? strlen(psk) : 0;
	bool ok = n % 2 == 0 && n / 2 <= sizeof(t->psk);
	for (size_t i = 0; ok && i < n; i++)
		ok = isxdigit((unsigned char)psk[i]) != 0;
	t->psk_len = 0;
	if (!ok) {
		uiw_log(
		    UIW_LOG_WARN, NULL,
		    "UIWARP_TLS_PSK: not an even count of hex digits, at most %zu bytes; no PSK",
		    sizeof(t->psk));
		return;
	}
	for (size_t i = 0; i < n; i += 2) {
		char h[3] = {psk[i], psk[i + 1], 0};
		t->psk[t->psk_len++] = (uint8_t)strtoul(h, NULL, 16);
	}
}

const struct uiw_config *uiw_config_get(void)
{
	pthread_once(&once, config_load);
	return &cfg;
}

bool uiw_rfc7306_enabled(void)
{
	return uiw_config_get()->mpa.rfc7306;
}
