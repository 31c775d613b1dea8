/* uiwarp-bench-mpa: the framing floor of scripts/bench.sh's bw group — a
 * TCP stream that carries each message as the MPA FPDUs uiwarp sends to a
 * software peer (RFC 5044 §4: 2-byte ULPDU length, a 14-byte DDP tagged
 * header (RFC 5041 §4.2) as RDMA Write's, payload, pad, CRC32c), with no
 * RDMA above it: no QP, no STag table, no completion, no progress engine.
 * What this tool reaches is what framing, the CRC and one copy on each side
 * allow on a path; uiwarp's RDMA Write at the same size is compared with it
 * as well as with raw TCP (docs/performance.md, "The framing floor").
 *
 *   uiwarp-bench-mpa server -B ADDR -p PORT [-T SECS] [-C CC] [-c 0|1] [-w -s SIZE]
 *   uiwarp-bench-mpa bw -H ADDR -p PORT -s SIZE -t SECS [-C CC] [-c 0|1] [-m MULPDU]
 *
 * The client streams SIZE-byte messages for SECS seconds with TCP_NODELAY
 * (as uiwarp sets it): each message is cut into FPDUs of at most MULPDU
 * ULPDU bytes (default 65532, uiwarp's MPA_LARGE_MULPDU), the CRC32c of each
 * FPDU is computed (ISA-L's crc32_iscsi, the library uiwarp uses) unless
 * -c 0, and the FPDUs of messages go out gathered, one blocking sendmsg per
 * 256 KiB or per message if larger (uiwarp's batches: TX_JOIN_BYTES,
 * MPA_TX_MAX_BYTES). The server reads each FPDU with one blocking recvmsg —
 * its payload straight to offset TO of a SIZE-byte buffer, its pad and CRC
 * and the next FPDU's header to a scratch buffer (uiwarp's one-copy
 * receive) — checks the CRC (a mismatch ends the run with exit 1), and at
 * the end sends back the count of payload bytes. The client prints one
 * line, as ../shared/bench's tcpbench does:
 *   bw size=SIZE secs=S rcvd=BYTES Gbit/s=G crc=0|1 mulpdu=M
 * With -w the server reads each whole SIZE-byte message (all its FPDUs: the
 * payloads to their offsets, each trailer with the next header to its own
 * scratch slot) with one recvmsg, as a receiver that knew every FPDU's
 * length in advance could (what a Read Response's known sink allows): the
 * floor with TCP's one recvmsg per message, not one per FPDU. The client
 * must send SIZE-byte messages with the same MULPDU; any other FPDU ends
 * the run with exit 1.
 * (payload bytes the server received and checked, over the client's time up
 * to the server's answer). -C sets TCP_CONGESTION. The server takes one
 * connection and exits; -T bounds its wait (default 120 s). -c must be the
 * same on both ends. Exit 0 on success, 1 on a failure, 2 on bad usage. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench_stream.h"
#include "util/crc32c.h"

#define HDR 16		  /* MPA length (2) + DDP tagged header (14) */
#define BATCH (256 << 10) /* bytes gathered per sendmsg (more if one message is larger) */
#define MAX_IOV 1024

static void die(const char *what)
{
	fprintf(stderr, "uiwarp-bench-mpa: %s: %s\n", what, errno ? strerror(errno) : "failed");
	exit(1);
}

/* the finished CRC32c (RFC 3720 B.4: preset ~0, complemented) continuing
 * from a finished crc, as uiwarp's mpa/crc.c (the same code) */
static uint32_t crc32c(uint32_t crc, const void *p, size_t n)
{
	return n ? uiw_isal_crc32c(crc, p, n) : crc;
}

static size_t pad_of(size_t ulpdu)
{
	return (4 - ((2 + ulpdu) & 3)) & 3;
}

/* Reads exactly the iovecs' bytes (blocking). Returns the bytes read: less
 * than asked only when the stream ended. */
static size_t read_iov(int fd, struct iovec *v, int n)
{
	size_t got = 0;
	while (n > 0) {
		struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
		ssize_t r = recvmsg(fd, &m, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("recvmsg");
		if (r == 0)
			return got;
		got += (size_t)r;
		while (n > 0 && (size_t)r >= v->iov_len) {
			r -= (ssize_t)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (char *)v->iov_base + r;
			v->iov_len -= (size_t)r;
		}
	}
	return got;
}

/* Checks one received FPDU's CRC32c over its header (HDR bytes at h), its
 * payload (len bytes) and its pad (at trailer); the CRC field follows the
 * pad. A mismatch ends the run with exit 1. */
static void check_crc(const unsigned char *h, const unsigned char *payload, size_t len,
		      const unsigned char *trailer, size_t pad)
{
	uint32_t c = crc32c(0, h, HDR), want;
	c = crc32c(c, payload, len);
	c = crc32c(c, trailer, pad);
	memcpy(&want, trailer + pad, 4);
	if (c != ntohl(want)) {
		errno = 0;
		die("CRC32c mismatch");
	}
}

/* The server: FPDU by FPDU until the stream ends; returns the payload bytes. */
static uint64_t serve(int fd, int crc_on)
{
	size_t cap = 1 << 20;
	unsigned char *buf = malloc(cap), hdr[HDR], scratch[4 + 4 + HDR];
	uint64_t got = 0;
	if (!buf)
		die("malloc");
	struct iovec v0 = {hdr, HDR};
	if (read_iov(fd, &v0, 1) != HDR)
		goto out; /* nothing sent */
	for (;;) {
		size_t ulpdu = (size_t)hdr[0] << 8 | hdr[1];
		if (ulpdu < HDR - 2)
			die("bad ULPDU length");
		size_t len = ulpdu - (HDR - 2), pad = pad_of(ulpdu);
		uint64_t to;
		memcpy(&to, hdr + 8, 8);
		to = be64toh(to);
		if (to > (1u << 30) || to + len > (1u << 30)) {
			errno = 0;
			die("TO past 1 GiB");
		}
		if (to + len > cap) { /* the message is larger than the buffer: grow it */
			while (to + len > cap)
				cap *= 2;
			buf = realloc(buf, cap);
			if (!buf)
				die("realloc");
		}
		struct iovec v[2] = {{buf + to, len}, {scratch, pad + 4 + HDR}};
		size_t r = read_iov(fd, v, 2);
		if (r < len + pad + 4)
			die("the stream ended inside an FPDU");
		if (crc_on)
			check_crc(hdr, buf + to, len, scratch, pad);
		got += len;
		if (r < len + pad + 4 + HDR)
			break; /* the last FPDU: the stream ended after it */
		memcpy(hdr, scratch + pad + 4, HDR);
	}
out:
	free(buf);
	return got;
}

/* The server with -w: each SIZE-byte message of FPDUs of at most mulpdu
 * ULPDU bytes in one recvmsg, then every header and CRC checked; returns
 * the payload bytes. */
static uint64_t serve_whole(int fd, int crc_on, size_t size, size_t mulpdu)
{
	size_t per = mulpdu - (HDR - 2), nf = (size + per - 1) / per;
	unsigned char *buf = malloc(size), hdr[HDR];
	unsigned char(*slot)[4 + 4 + HDR] = calloc(nf, sizeof(*slot));
	struct iovec *v = calloc(2 * nf, sizeof(*v));
	uint64_t got = 0;
	if (!buf || !slot || !v)
		die("malloc");
	struct iovec v0 = {hdr, HDR};
	if (read_iov(fd, &v0, 1) != HDR)
		goto out; /* nothing sent */
	for (;;) {
		size_t whole = 0;
		for (size_t i = 0; i < nf; i++) {
			size_t off = i * per, len = size - off < per ? size - off : per;
			size_t pad = pad_of(len + HDR - 2);
			v[2 * i] = (struct iovec){buf + off, len};
			v[2 * i + 1] = (struct iovec){slot[i], pad + 4 + HDR};
			whole += len + pad + 4 + HDR;
		}
		size_t r = read_iov(fd, v, (int)(2 * nf));
		const unsigned char *h = hdr;
		size_t need = 0; /* stream bytes up to FPDU i's CRC */
		for (size_t i = 0; i < nf; i++) {
			size_t off = i * per, len = size - off < per ? size - off : per;
			size_t pad = pad_of(len + HDR - 2);
			uint64_t to;
			memcpy(&to, h + 8, 8);
			need += len + pad + 4 + (i ? HDR : 0);
			if (r < need || ((size_t)h[0] << 8 | h[1]) != len + HDR - 2 ||
			    be64toh(to) != off) {
				errno = 0;
				die("an FPDU that is not the -s SIZE message's (-w)");
			}
			if (crc_on)
				check_crc(h, buf + off, len, slot[i], pad);
			got += len;
			h = slot[i] + pad + 4;
		}
		if (r < whole)
			break; /* the last message: the stream ended after it */
		memcpy(hdr, h, HDR);
	}
out:
	free(v);
	free(slot);
	free(buf);
	return got;
}

struct mpa_opts {
	int crc_on;
	int whole;
	size_t mulpdu;
};

static int mpa_opt(int opt, const char *arg, void *ctx)
{
	struct mpa_opts *m = ctx;
	if (opt == 'c')
		m->crc_on = atoi(arg) != 0;
	else if (opt == 'w')
		m->whole = 1;
	else if (opt == 'm')
		m->mulpdu = strtoul(arg, NULL, 0);
	return m->mulpdu > HDR && m->mulpdu <= 65535 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct mpa_opts mo = {1, 0, 65532};
	if (bench_parse(argc, argv, &o, "5306", "[-c 0|1] [-m MULPDU] [-w]", "c:m:w", mpa_opt,
			&mo) ||
	    o.size > (1u << 30))
		return 2;
	size_t size = o.size, mulpdu = mo.mulpdu;
	int crc_on = mo.crc_on;
	double secs = o.secs;
	signal(SIGPIPE, SIG_IGN);
	const char *what;
	int fd = bench_connect(o.addr, o.port, o.cc, o.server, o.wait_s, &what);
	if (fd < 0)
		die(what);
	if (o.server) {
		uint64_t be =
		    htobe64(mo.whole ? serve_whole(fd, crc_on, size, mulpdu) : serve(fd, crc_on));
		if (write(fd, &be, sizeof(be)) != (ssize_t)sizeof(be))
			die("answer");
		close(fd);
		return 0;
	}
	unsigned char *buf = malloc(size);
	size_t per = mulpdu - (HDR - 2); /* payload bytes per FPDU */
	size_t nf = (size + per - 1) / per;
	/* one message's FPDU headers and trailers (pad + CRC), reused by every
	 * message of a batch through their own slots */
	size_t slots = nf * (BATCH / size + 1);
	unsigned char(*hdrs)[HDR] = calloc(slots, HDR), (*trl)[8] = calloc(slots, 8);
	struct iovec *iov = calloc(MAX_IOV, sizeof(*iov));
	if (!buf || !hdrs || !trl || !iov)
		die("malloc");
	memset(buf, 0x5a, size);
	double t0 = bench_now_s(), end = t0 + secs;
	while (bench_now_s() < end) {
		int n = 0;
		size_t bytes = 0, slot = 0;
		/* gather messages while the batch stays within BATCH (one at least) */
		do {
			for (size_t off = 0; off < size; off += per, slot++) {
				size_t len = size - off < per ? size - off : per;
				size_t ulpdu = len + HDR - 2, pad = pad_of(ulpdu);
				unsigned char *h = hdrs[slot], *t = trl[slot];
				uint64_t to = htobe64(off);
				uint32_t stag = htonl(0x100);
				h[0] = (unsigned char)(ulpdu >> 8);
				h[1] = (unsigned char)ulpdu;
				h[2] = 0x80 | (off + len == size ? 0x40 : 0) | 1; /* T, L, DV 1 */
				h[3] = 0x40; /* RDMAP 1, Write */
				memcpy(h + 4, &stag, 4);
				memcpy(h + 8, &to, 8);
				memset(t, 0, pad);
				uint32_t c = 0;
				if (crc_on) {
					c = crc32c(0, h, HDR);
					c = crc32c(c, buf + off, len);
					c = crc32c(c, t, pad);
				}
				c = htonl(c);
				memcpy(t + pad, &c, 4);
				iov[n++] = (struct iovec){h, HDR};
				iov[n++] = (struct iovec){buf + off, len};
				iov[n++] = (struct iovec){t, pad + 4};
				bytes += HDR + len + pad + 4;
			}
		} while (bytes + size + 24 * nf <= BATCH && n + 3 * (int)nf <= MAX_IOV &&
			 slot + nf <= slots);
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		size_t sent = 0;
		while (sent < bytes) {
			ssize_t r = sendmsg(fd, &m, 0);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("sendmsg");
			sent += (size_t)r;
			while (m.msg_iovlen && (size_t)r >= m.msg_iov->iov_len) {
				r -= (ssize_t)m.msg_iov->iov_len;
				m.msg_iov++;
				m.msg_iovlen--;
			}
			if (m.msg_iovlen) {
				m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + r;
				m.msg_iov->iov_len -= (size_t)r;
			}
		}
	}
	shutdown(fd, SHUT_WR);
	uint64_t be = 0;
	struct iovec v = {&be, sizeof(be)};
	if (read_iov(fd, &v, 1) != sizeof(be))
		die("the server's count");
	double t = bench_now_s() - t0;
	uint64_t got = be64toh(be);
	printf("bw size=%zu secs=%.3f rcvd=%llu Gbit/s=%.3f crc=%d mulpdu=%zu\n", size, t,
	       (unsigned long long)got, (double)got * 8 / t / 1e9, crc_on, mulpdu);
	free(iov);
	free(trl);
	free(hdrs);
	free(buf);
	close(fd);
	return 0;
}
