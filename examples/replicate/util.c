/* uiwarp-replicate: helpers shared by both transports and both sides. */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "replicate.h"
#include "util/crc32c.h"

volatile int rep_interrupted;

void rep_err(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "uiwarp-replicate: %s\n", buf);
}

double rep_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The standard CRC32c ("123456789" -> 0xE3069283), chaining on finished
 * values, by ISA-L (util/crc32c.h). CRC32c because ISA-L computes it at
 * tens of GB/s per core (faster than the link), the project already
 * depends on libisal for MPA, and it is the checksum iSCSI/MPA/ext4 use. */
uint32_t rep_crc32c(uint32_t crc, const void *p, size_t n)
{
	return uiw_isal_crc32c(crc, p, n);
}

bool rep_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	switch (*end) {
	case '\0':
		break;
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	default:
		return false;
	}
	if (*end && end[1] != '\0' && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
		return false;
	if (shift && v > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

static void on_signal(int sig)
{
	rep_interrupted = sig;
}

void rep_install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: blocking calls return EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* ---- progress ---- */

static void human(char *buf, size_t n, double bytes)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	unsigned i = 0;

	while (bytes >= 1024.0 && i < 4) {
		bytes /= 1024.0;
		i++;
	}
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", bytes, unit[i]);
}

void rep_progress_init(struct rep_progress *p, const struct rep_opts *o, uint64_t total)
{
	p->on = !o->quiet && isatty(STDERR_FILENO);
	p->total = total;
	p->start = rep_now();
	p->last = 0;
}

void rep_progress_update(struct rep_progress *p, uint64_t done, bool force)
{
	enum { WIDTH = 30 };
	char bar[WIDTH + 1], a[32], b[32], rate[32], eta[32];
	double now, el, frac, bps;
	int fill;

	if (!p->on)
		return;
	now = rep_now();
	if (!force && now - p->last < 0.1)
		return;
	p->last = now;
	el = now - p->start;
	frac = p->total ? (double)done / (double)p->total : 1.0;
	fill = (int)(frac * WIDTH);
	for (int i = 0; i < WIDTH; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[WIDTH] = '\0';
	bps = el > 0 ? (double)done / el : 0;
	human(a, sizeof(a), (double)done);
	human(b, sizeof(b), (double)p->total);
	human(rate, sizeof(rate), bps);
	if (done >= p->total)
		snprintf(eta, sizeof(eta), "%.1f s", el);
	else if (bps > 0)
		snprintf(eta, sizeof(eta), "ETA %.0f s", (double)(p->total - done) / bps);
	else
		snprintf(eta, sizeof(eta), "ETA --");
	fprintf(stderr, "\r[%s] %3.0f%% %s / %s  %s/s  %s   ", bar, frac * 100.0, a, b, rate, eta);
	fflush(stderr);
}

void rep_progress_end(struct rep_progress *p)
{
	if (p->on) {
		fputc('\n', stderr);
		fflush(stderr);
	}
}

void rep_print_result(const struct rep_opts *o, const struct rep_stats *s)
{
	double mib = s->seconds > 0 ? (double)s->bytes / s->seconds / (1024.0 * 1024.0) : 0;
	double gbit = s->seconds > 0 ? (double)s->bytes * 8.0 / s->seconds / 1e9 : 0;

	char verify[64] = "", chunks[96] = "", rtt[64] = "n/a", retr[48] = "n/a";

	if (o->sender) {
		snprintf(verify, sizeof(verify), " (+%.3f s checksum/sync on the receiver)",
			 s->verify_seconds);
		snprintf(chunks, sizeof(chunks), ", chunks sent %llu skipped %llu",
			 (unsigned long long)s->chunks_sent, (unsigned long long)s->chunks_skipped);
	}
	if (s->tcp_socks > 0) {
		snprintf(rtt, sizeof(rtt), "%.3f ms (%d connection%s)", s->rtt_ms, s->tcp_socks,
			 s->tcp_socks == 1 ? "" : "s");
		snprintf(retr, sizeof(retr), "%llu segments", (unsigned long long)s->retrans);
	}
	printf("uiwarp-replicate: %s %llu bytes in %.3f s: %.1f MiB/s (%.2f Gbit/s) over %s%s, "
	       "crc32c 0x%08x %s%s; streams %u, rtt %s, retrans %s%s\n",
	       o->sender ? "sent" : "received", (unsigned long long)s->bytes, s->seconds, mib, gbit,
	       o->tcp ? "tcp" : "rdma", o->tls ? " with TLS" : "", s->crc,
	       o->sender ? "verified by receiver" : "verified", verify, s->streams, rtt, retr,
	       chunks);
	fflush(stdout);
}

int rep_answer_timeout(const struct rep_opts *o, uint64_t size)
{
	uint64_t t;

	if (!o->timeout)
		return 0;
	t = (uint64_t)o->timeout + (size >> 26); /* + 1 s per 64 MiB */
	return t > 86400 ? 86400 : (int)t;
}

bool rep_hello_check(const struct rep_hello *h, bool tcp, const struct rep_hello *first)
{
	uint16_t n = be16toh(h->streams), i = be16toh(h->stream);

	if (be32toh(h->magic) != REP_MAGIC || be16toh(h->version) != REP_VERSION ||
	    !!(be16toh(h->flags) & REP_HELLO_TCP) != tcp || n < 1 || n > REP_MAX_STREAMS)
		return false;
	if (!first)
		return i == 0 && be32toh(h->chunk) >= REP_MIN_CHUNK &&
		       be32toh(h->chunk) <= REP_MAX_CHUNK;
	return i < n && h->size == first->size && h->chunk == first->chunk &&
	       h->streams == first->streams;
}

int rep_rx_hello(struct rep_rx *rx, const struct rep_hello *h, bool tcp, const struct rep_opts *o,
		 struct rep_dest *dest, struct rep_accept *acc)
{
	uint32_t i = be16toh(h->stream);
	int r;

	memset(acc, 0, sizeof(*acc));
	acc->magic = htobe32(REP_MAGIC);
	acc->version = htobe16(REP_VERSION);
	if (!rep_hello_check(h, tcp, rx->streams ? &rx->first : NULL) ||
	    (rx->streams && rx->taken[i])) {
		rep_err("refused a connection that is not from uiwarp-replicate send%s of this "
			"version, or not a stream of this transfer",
			tcp ? " --tcp" : "");
		acc->status = htobe16(REP_ACCEPT_PROTO);
		return rx->streams ? -1 : -2;
	}
	if (!rx->streams) {
		rx->first = *h;
		rx->streams = be16toh(h->streams);
		rx->size = be64toh(h->size);
		rx->chunk = be32toh(h->chunk);
		r = rep_dest_open(dest, o->path, rx->size, o->no_mmap, o->resume);
		if (r) {
			rep_err("cannot write %s (%llu bytes): %s", o->path,
				(unsigned long long)rx->size, strerror(-r));
			acc->status = htobe16(REP_ACCEPT_CREATE);
			acc->err = htobe32((uint32_t)-r);
			return -2;
		}
	}
	acc->chunk = htobe32(rx->chunk);
	return (int)i;
}

void rep_rx_accepted(struct rep_rx *rx, uint32_t i, const struct rep_opts *o,
		     const struct rep_dest *dest)
{
	rx->taken[i] = true;
	rx->got++;
	if (i != 0)
		return;
	fprintf(stderr, "uiwarp-replicate: receiving %llu bytes into %s.part over %u stream%s%s\n",
		(unsigned long long)rx->size, o->path, rx->streams, rx->streams == 1 ? "" : "s",
		dest->resumed && (be16toh(rx->first.flags) & REP_HELLO_RESUME) ? " (resuming)"
									       : "");
	fflush(stderr);
}

const char *rep_result_str(int status)
{
	switch (status) {
	case REP_RESULT_OK:
		return "verified";
	case REP_RESULT_LENGTH:
		return "length mismatch";
	case REP_RESULT_CHECKSUM:
		return "checksum mismatch";
	case REP_RESULT_IO:
		return "I/O error on the receiver";
	case REP_RESULT_PROTO:
		return "protocol error";
	}
	return "unknown status";
}

/* ---- receiver's destination file ---- */

static void *map_anon(uint64_t size)
{
	void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

/* Writes the anonymous buffer to the file (write) or reads the file into it.
 * Returns 0 or -1 with errno (EIO for a file shorter than d->size). */
static int file_io(struct rep_dest *d, bool write)
{
	char *p = d->map;
	uint64_t off = 0;

	while (off < d->size) {
		size_t n = d->size - off > (1u << 30) ? (1u << 30) : (size_t)(d->size - off);
		ssize_t r = write ? pwrite(d->fd, p + off, n, (off_t)off)
				  : pread(d->fd, p + off, n, (off_t)off);

		if (r < 0) {
			if (errno == EINTR && !rep_interrupted)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		off += (uint64_t)r;
	}
	return 0;
}

int rep_dest_open(struct rep_dest *d, const char *path, uint64_t size, bool anon, bool resume)
{
	size_t n = strlen(path);
	int ret;

	struct stat st;

	memset(d, 0, sizeof(*d));
	d->fd = -1;
	d->size = size;
	if (size > (uint64_t)SIZE_MAX || size > (uint64_t)INT64_MAX)
		return -EFBIG;
	/* The final rename would fail after the whole transfer: say it now. */
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return -EISDIR;
	d->path = strdup(path);
	d->part_path = malloc(n + sizeof(".part"));
	if (!d->path || !d->part_path) {
		ret = -ENOMEM;
		goto fail;
	}
	memcpy(d->part_path, path, n);
	memcpy(d->part_path + n, ".part", sizeof(".part"));

	if (resume) {
		d->fd = open(d->part_path, O_RDWR | O_CLOEXEC);
		if (d->fd >= 0 && fstat(d->fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_size == size) {
			d->resumed = true;
		} else if (d->fd >= 0) {
			close(d->fd);
			d->fd = -1;
		}
	}
	if (d->fd < 0)
		d->fd = open(d->part_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (d->fd < 0) {
		ret = -errno;
		goto fail;
	}
	if (size > 0) {
		/* Reserve the blocks now: running out of space later would be a
		 * SIGBUS on a mapped page instead of an error we can report. */
		ret = posix_fallocate(d->fd, 0, (off_t)size);
		if (ret == EOPNOTSUPP || ret == EINVAL) {
			if (ftruncate(d->fd, (off_t)size) < 0)
				ret = errno;
			else
				ret = 0;
		}
		if (ret) {
			ret = -ret;
			goto fail;
		}
		if (anon) {
			d->map = map_anon(size);
			d->anon = true;
		} else {
			d->map =
			    mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd, 0);
			if (d->map == MAP_FAILED)
				d->map = NULL;
		}
		if (!d->map) {
			ret = -errno;
			goto fail;
		}
		if (anon && d->resumed && file_io(d, false) < 0) {
			ret = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	if (d->resumed) {
		/* Not ours to remove: the next --resume run may still use it. */
		free(d->part_path);
		d->part_path = NULL;
	}
	rep_dest_abort(d);
	return ret;
}

int rep_dest_table(const struct rep_dest *d, uint32_t chunk, uint32_t **out, uint64_t *count)
{
	uint64_t n = d->size ? (d->size + chunk - 1) / chunk : 0;
	uint32_t *t;

	*out = NULL;
	*count = 0;
	if (!n)
		return 0;
	t = malloc((size_t)n * sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = i * chunk;
		size_t len = d->size - off < chunk ? (size_t)(d->size - off) : chunk;

		t[i] = rep_crc32c(0, (const char *)d->map + off, len);
	}
	*out = t;
	*count = n;
	return 0;
}

void rep_dest_keep(struct rep_dest *d)
{
	bool ok = d->fd >= 0;

	if (d->anon && d->map && file_io(d, true) < 0)
		ok = false;
	else if (!d->anon && d->map && msync(d->map, (size_t)d->size, MS_SYNC) < 0)
		ok = false;
	if (d->fd >= 0 && fsync(d->fd) < 0)
		ok = false;
	if (d->part_path) {
		if (ok)
			rep_err("kept %s for --resume", d->part_path);
		else
			rep_err("could not save %s: %s (removed)", d->part_path, strerror(errno));
		if (ok) {
			free(d->part_path);
			d->part_path = NULL;
		}
	}
	rep_dest_abort(d);
}

int rep_dest_use_anon(struct rep_dest *d)
{
	void *m;

	if (d->anon || !d->map)
		return 0;
	m = map_anon(d->size);
	if (!m)
		return -errno;
	munmap(d->map, (size_t)d->size);
	d->map = m;
	d->anon = true;
	return 0;
}

int rep_dest_finish(struct rep_dest *d, uint64_t length, uint32_t want_crc, uint32_t *crc, int *err)
{
	*err = 0;
	*crc = 0;
	if (length != d->size) {
		rep_dest_abort(d);
		return REP_RESULT_LENGTH;
	}
	*crc = d->size ? rep_crc32c(0, d->map, (size_t)d->size) : 0;
	if (*crc != want_crc) {
		rep_dest_abort(d);
		return REP_RESULT_CHECKSUM;
	}
	if (d->anon) {
		if (d->map && file_io(d, true) < 0)
			goto io;
	} else if (d->map && msync(d->map, (size_t)d->size, MS_SYNC) < 0) {
		goto io;
	}
	if (fsync(d->fd) < 0)
		goto io;
	if (rename(d->part_path, d->path) < 0)
		goto io;
	/* DEST is complete: nothing left to remove. */
	free(d->part_path);
	d->part_path = NULL;
	rep_dest_abort(d);
	return REP_RESULT_OK;
io:
	*err = errno;
	rep_dest_abort(d);
	return REP_RESULT_IO;
}

void rep_dest_abort(struct rep_dest *d)
{
	if (d->map) {
		munmap(d->map, (size_t)d->size);
		d->map = NULL;
	}
	if (d->fd >= 0) {
		close(d->fd);
		d->fd = -1;
	}
	if (d->part_path) {
		unlink(d->part_path);
		free(d->part_path);
		d->part_path = NULL;
	}
	free(d->path);
	d->path = NULL;
}

/* ---- sender's source file ---- */

int rep_src_open(struct rep_src *s, const char *path, bool no_mmap)
{
	struct stat st;
	int ret;

	memset(s, 0, sizeof(*s));
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0) {
		ret = -errno;
		rep_err("cannot open %s: %s", path, strerror(errno));
		return ret;
	}
	if (fstat(s->fd, &st) < 0) {
		ret = -errno;
		rep_err("cannot stat %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		rep_err("%s is not a regular file", path);
		goto fail;
	}
	s->size = (uint64_t)st.st_size;
	if (s->size > 0 && !no_mmap && s->size <= (uint64_t)SIZE_MAX) {
		void *m = mmap(NULL, (size_t)s->size, PROT_READ, MAP_SHARED, s->fd, 0);

		if (m != MAP_FAILED) {
			madvise(m, (size_t)s->size, MADV_SEQUENTIAL);
			s->map = m;
		}
	}
	return 0;
fail:
	close(s->fd);
	s->fd = -1;
	return ret;
}

void rep_src_close(struct rep_src *s)
{
	if (s->map) {
		munmap((void *)(uintptr_t)s->map, (size_t)s->size);
		s->map = NULL;
	}
	if (s->fd >= 0) {
		close(s->fd);
		s->fd = -1;
	}
}

int rep_src_read(struct rep_src *s, void *buf, size_t n, uint64_t off)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = pread(s->fd, p, n, (off_t)off);

		if (r < 0) {
			if (errno == EINTR && !rep_interrupted)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO; /* file shrank under us */
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int rep_src_crc(struct rep_src *s, uint32_t *crc)
{
	enum { BUF = 1 << 20 };
	char *buf;
	uint64_t off;
	int ret = 0;

	*crc = 0;
	if (s->map || !s->size) {
		*crc = s->size ? rep_crc32c(0, s->map, (size_t)s->size) : 0;
		return 0;
	}
	buf = malloc(BUF);
	if (!buf)
		return -ENOMEM;
	for (off = 0; off < s->size && !ret;) {
		size_t n = s->size - off < BUF ? (size_t)(s->size - off) : BUF;

		ret = rep_src_read(s, buf, n, off);
		if (!ret)
			*crc = rep_crc32c(*crc, buf, n);
		off += n;
	}
	free(buf);
	return ret;
}

/* ---- sender's work list ---- */

int rep_plan_init(struct rep_plan *p, struct rep_src *s, const struct rep_opts *o, uint32_t chunk,
		  const uint32_t *table, uint64_t count, struct rep_stats *st)
{
	char *buf = NULL;
	int ret = 0;

	memset(p, 0, sizeof(*p));
	p->size = s->size;
	p->chunk = chunk;
	p->nchunks = s->size ? (s->size + chunk - 1) / chunk : 0;
	p->nsend = p->nchunks;
	p->send_bytes = s->size;
	p->stop_after = o->stop_after;
	st->chunks_sent = p->nchunks;
	st->chunks_skipped = 0;
	if (!table || count != p->nchunks || !count)
		return 0;
	p->send_idx = malloc((size_t)p->nchunks * sizeof(*p->send_idx));
	if (!s->map)
		buf = malloc(chunk);
	if (!p->send_idx || (!s->map && !buf)) {
		rep_err("out of memory");
		ret = -ENOMEM;
		goto out;
	}
	p->nsend = 0;
	p->send_bytes = 0;
	for (uint64_t i = 0; i < p->nchunks; i++) {
		uint64_t off = i * chunk;
		size_t n = s->size - off < chunk ? (size_t)(s->size - off) : chunk;
		const void *d = (const char *)s->map + off;
		uint32_t c;

		if (!s->map) {
			ret = rep_src_read(s, buf, n, off);
			if (ret) {
				rep_err("cannot read the source: %s", strerror(-ret));
				goto out;
			}
			d = buf;
		}
		c = rep_crc32c(0, d, n);
		p->crc = rep_crc32c(p->crc, d, n);
		if (c != table[i]) {
			p->send_idx[p->nsend++] = i;
			p->send_bytes += n;
		}
	}
	p->have_crc = true;
	st->chunks_sent = p->nsend;
	st->chunks_skipped = p->nchunks - p->nsend;
	fprintf(stderr,
		"uiwarp-replicate: resume: the receiver holds %llu of %llu chunks with a good "
		"CRC32c; sending %llu\n",
		(unsigned long long)st->chunks_skipped, (unsigned long long)p->nchunks,
		(unsigned long long)p->nsend);
out:
	free(buf);
	return ret;
}

bool rep_plan_next(struct rep_plan *p, uint64_t *off, uint32_t *len)
{
	uint64_t i, k;

	if (atomic_load(&p->stop))
		return false;
	i = atomic_fetch_add(&p->next, 1);
	if (i >= p->nsend)
		return false;
	k = p->send_idx ? p->send_idx[i] : i;
	*off = k * p->chunk;
	*len = p->size - *off < p->chunk ? (uint32_t)(p->size - *off) : p->chunk;
	return true;
}

void rep_plan_complete(struct rep_plan *p, uint32_t len)
{
	atomic_fetch_add(&p->acked, len);
	if (atomic_fetch_add(&p->completed, 1) + 1 == p->stop_after && p->stop_after) {
		fprintf(stderr, "uiwarp-replicate: --stop-after %llu: exiting (test)\n",
			(unsigned long long)p->stop_after);
		_exit(3);
	}
}

void rep_plan_free(struct rep_plan *p)
{
	free(p->send_idx);
	p->send_idx = NULL;
}

/* ---- TCP_INFO for the summary line ---- */

void rep_tcp_info_add(int fd, struct rep_stats *s)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	double sum;

	memset(&ti, 0, sizeof(ti));
	/* Any state with a connection behind it (the peer may have closed
	 * already: CLOSE_WAIT); not LISTEN (10) or CLOSE (7). */
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 || ti.tcpi_state == 10 ||
	    ti.tcpi_state == 7)
		return;
	sum = s->rtt_ms * s->tcp_socks + ti.tcpi_rtt / 1000.0;
	s->tcp_socks++;
	s->rtt_ms = sum / s->tcp_socks;
	s->retrans += ti.tcpi_total_retrans;
}

/* True when a and b are IP addresses of the same family and value. */
static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}

void rep_tcp_info_scan(const struct sockaddr *peer, struct rep_stats *s)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;

	if (!dir || !peer)
		goto out;
	while ((e = readdir(dir))) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd, type;
		socklen_t tl = sizeof(type);
		char *end;
		long l = strtol(e->d_name, &end, 10);

		if (*end || l < 0 || l == dirfd(dir))
			continue;
		fd = (int)l;
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
			continue;
		if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0 ||
		    !same_ip((struct sockaddr *)&ss, peer))
			continue;
		rep_tcp_info_add(fd, s);
	}
out:
	if (dir)
		closedir(dir);
}

int rep_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t block, old;
	int r;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	r = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r)
		rep_err("pthread_create: %s", strerror(r));
	return r;
}

uint32_t rep_run_streams(struct rep_plan *p, struct rep_src *s, const struct rep_opts *o,
			 struct rep_progress *prog, void *(*fn)(void *), void *args,
			 size_t arg_size, uint32_t *crc)
{
	pthread_t th[REP_MAX_STREAMS];
	uint32_t n = 0;
	int r;

	atomic_store(&p->running, (int)o->streams);
	for (; n < o->streams; n++) {
		r = rep_thread_start(&th[n], fn, (char *)args + n * arg_size);
		if (r) {
			atomic_store(&p->stop, 1);
			atomic_fetch_sub(&p->running, (int)(o->streams - n));
			break;
		}
	}
	/* Checksum while the data is on its way (unless resume computed it). */
	if (p->have_crc) {
		*crc = p->crc;
	} else {
		r = rep_src_crc(s, crc);
		if (r) {
			rep_err("cannot read %s: %s", o->path, strerror(-r));
			atomic_store(&p->stop, 1);
		}
	}
	while (atomic_load(&p->running) > 0) {
		if (rep_interrupted)
			atomic_store(&p->stop, 1); /* the threads stop at their next chunk */
		rep_progress_update(prog, atomic_load(&p->acked), false);
		usleep(20000);
	}
	for (uint32_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	if (rep_interrupted) {
		rep_progress_end(prog);
		rep_err("interrupted after %llu of %llu bytes",
			(unsigned long long)atomic_load(&p->acked),
			(unsigned long long)p->send_bytes);
	}
	return n;
}
