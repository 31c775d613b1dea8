/* uiwarp-replicate: command line. See replicate.h for the protocol. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicate.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uiwarp-replicate recv [--bind ADDR] [--port PORT] [options] DEST\n"
		"       uiwarp-replicate send [--port PORT] [options] SRC HOST\n"
		"\n"
		"Copies SRC to DEST on HOST with RDMA Writes (verbs + rdma_cm), then checks\n"
		"length and CRC32c; DEST appears only when they match (DEST.part until then).\n"
		"The receiver handles one transfer and exits.\n"
		"\n"
		"  -p, --port PORT     TCP / RDMA CM port (default %d)\n"
		"  -b, --bind ADDR     recv: local address to listen on (default any)\n"
		"  -c, --chunk SIZE    send: bytes per RDMA Write, e.g. 256k, 1M (default 1M)\n"
		"  -w, --window N      send: outstanding writes per stream (default %d; %d\n"
		"                      with --streams N > 1)\n"
		"  -s, --streams N     send: stripe the file over N connections (N QPs, or N\n"
		"                      TCP sockets with --tcp), 1..%d (default 1); the\n"
		"                      receiver accepts as many as the sender asks for\n"
		"  -r, --resume        both sides: the receiver keeps DEST.part when a copy\n"
		"                      fails, and a restarted copy sends only the chunks whose\n"
		"                      CRC32c differs from what DEST.part holds (same --chunk)\n"
		"      --tcp           copy over plain TCP sockets instead (both sides)\n"
		"      --tls           both sides: encrypt with TLS 1.3, over RDMA through\n"
		"                      uiwarp's TLS stream (UIWARP_TLS=on / required), with\n"
		"                      --tcp on the sockets themselves; credentials from\n"
		"                      UIWARP_TLS_CERT, _KEY, _CA, _PEER_NAME or _PSK\n"
		"      --no-mmap       send: read SRC through a registered buffer instead of\n"
		"                      registering a mapping of it; recv: receive into memory\n"
		"                      and write DEST at the end instead of into a mapping\n"
		"  -t, --timeout SEC   limit on each wait: for a sender, connection setup, a\n"
		"                      completion, the answer (plus 1 s per 64 MiB) (default %d;\n"
		"                      0 = none); over RDMA the receiver then waits for the data\n"
		"                      as long as the connection lasts\n"
		"  -q, --quiet         no progress bar (the bar shows rate and ETA)\n"
		"      --stop-after K  send, for tests: exit with status 3 once K chunks\n"
		"                      completed, as a sender that dies mid-copy\n"
		"  -h, --help\n"
		"\n"
		"Exit status 0 only when the receiver verified the copy.\n",
		REP_DEFAULT_PORT, REP_DEFAULT_WINDOW, REP_DEFAULT_WINDOW_STREAMS, REP_MAX_STREAMS,
		REP_DEFAULT_TIMEOUT);
}

static int parse(int argc, char **argv, struct rep_opts *o)
{
	/* clang-format off */
	static const struct option lo[] = {
		{"port", required_argument, NULL, 'p'},
		{"bind", required_argument, NULL, 'b'},
		{"chunk", required_argument, NULL, 'c'},
		{"window", required_argument, NULL, 'w'},
		{"timeout", required_argument, NULL, 't'},
		{"streams", required_argument, NULL, 's'},
		{"resume", no_argument, NULL, 'r'},
		{"stop-after", required_argument, NULL, 'S'},
		{"tcp", no_argument, NULL, 'T'},
		{"tls", no_argument, NULL, 'L'},
		{"no-mmap", no_argument, NULL, 'M'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	/* clang-format on */
	static char port_buf[8];
	uint64_t v;
	char *end;
	long l;
	int c;

	memset(o, 0, sizeof(*o));
	snprintf(port_buf, sizeof(port_buf), "%d", REP_DEFAULT_PORT);
	o->port = port_buf;
	o->chunk = REP_DEFAULT_CHUNK;
	o->window = 0; /* default: after the options (it depends on --streams) */
	o->timeout = REP_DEFAULT_TIMEOUT;
	o->streams = 1;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		exit(0);
	}
	if (!strcmp(argv[1], "send")) {
		o->sender = true;
	} else if (strcmp(argv[1], "recv") != 0) {
		rep_err("unknown command '%s' (expected send or recv)", argv[1]);
		usage(stderr);
		return 2;
	}
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "p:b:c:w:t:s:rqh", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			l = strtol(optarg, &end, 10);
			if (*end || l <= 0 || l > 65535) {
				rep_err("bad port '%s'", optarg);
				return 2;
			}
			o->port = optarg;
			break;
		case 'b':
			o->bind = optarg;
			break;
		case 'c':
			if (!rep_parse_size(optarg, &v) || v < REP_MIN_CHUNK || v > REP_MAX_CHUNK) {
				rep_err("bad chunk size '%s' (4k..1G)", optarg);
				return 2;
			}
			o->chunk = (uint32_t)v;
			break;
		case 'w':
			l = strtol(optarg, &end, 10);
			if (*end || l < 1 || l > REP_MAX_WINDOW) {
				rep_err("bad window '%s' (1..%d)", optarg, REP_MAX_WINDOW);
				return 2;
			}
			o->window = (uint32_t)l;
			break;
		case 't':
			l = strtol(optarg, &end, 10);
			if (*end || l < 0 || l > 86400) {
				rep_err("bad timeout '%s' (seconds, 0..86400)", optarg);
				return 2;
			}
			o->timeout = (int)l;
			break;
		case 's':
			l = strtol(optarg, &end, 10);
			if (*end || l < 1 || l > REP_MAX_STREAMS) {
				rep_err("bad streams '%s' (1..%d)", optarg, REP_MAX_STREAMS);
				return 2;
			}
			o->streams = (uint32_t)l;
			break;
		case 'r':
			o->resume = true;
			break;
		case 'S': /* tests only: simulate a sender that dies mid-copy */
			if (!rep_parse_size(optarg, &v) || v == 0) {
				rep_err("bad --stop-after '%s'", optarg);
				return 2;
			}
			o->stop_after = v;
			break;
		case 'T':
			o->tcp = true;
			break;
		case 'L':
			o->tls = true;
			break;
		case 'M':
			o->no_mmap = true;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (o->sender) {
		if (o->bind) {
			rep_err("--bind is for recv");
			return 2;
		}
		if (argc - optind != 2) {
			rep_err("send needs SRC and HOST");
			usage(stderr);
			return 2;
		}
		o->path = argv[optind];
		o->host = argv[optind + 1];
	} else {
		if (o->streams != 1 || o->stop_after) {
			rep_err("--streams and --stop-after are for send (the receiver takes the "
				"sender's stream count)");
			return 2;
		}
		if (argc - optind != 1) {
			rep_err("recv needs DEST");
			usage(stderr);
			return 2;
		}
		o->path = argv[optind];
	}
	if (!o->window)
		o->window = o->streams > 1 ? REP_DEFAULT_WINDOW_STREAMS : REP_DEFAULT_WINDOW;
	return 0;
}

int main(int argc, char **argv)
{
	struct rep_opts o;
	int ret = parse(argc, argv, &o);

	if (ret)
		return ret;
	rep_install_signals();
	if (o.tls && o.tcp && rep_tls_init(!o.sender) != 0)
		return 1;
	/* over RDMA, uiwarp's own TLS stream (read when the first connection
	 * is made): the sender speaks it, the receiver refuses plain peers */
	if (o.tls && !o.tcp)
		setenv("UIWARP_TLS", o.sender ? "on" : "required", 1);
	if (o.sender)
		ret = o.tcp ? rep_tcp_send(&o) : rep_rdma_send(&o);
	else
		ret = o.tcp ? rep_tcp_recv(&o) : rep_rdma_recv(&o);
	return ret ? 1 : 0;
}
