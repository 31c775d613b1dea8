/* uiwarp-replicate: helpers shared by both transports and both sides. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "replicate.h"

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

/* ISA-L's crc32_iscsi runs the reflected CRC32c register without the initial
 * and final inversion, so we add both: the result is the standard CRC32c
 * ("123456789" -> 0xE3069283) and chains on finished values. CRC32c because
 * ISA-L computes it with the SSE4.2 crc32 instruction / PCLMUL at several
 * GB/s per core (faster than the link), the project already depends on
 * libisal for MPA, and it is the checksum iSCSI/MPA/ext4 use. */
uint32_t rep_crc32c(uint32_t crc, const void *p, size_t n)
{
	unsigned char *b = (unsigned char *)(uintptr_t)p; /* ISA-L only reads it */
	uint32_t reg = ~crc;

	while (n > 0) {
		size_t piece = n > (size_t)(INT_MAX & ~0xfff) ? (size_t)(INT_MAX & ~0xfff) : n;

		reg = crc32_iscsi(b, (int)piece, reg);
		b += piece;
		n -= piece;
	}
	return ~reg;
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
	char bar[WIDTH + 1], a[32], b[32], rate[32];
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
	fprintf(stderr, "\r[%s] %3.0f%% %s / %s  %s/s  %.1f s ", bar, frac * 100.0, a, b, rate, el);
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

	char verify[64] = "";

	if (o->sender)
		snprintf(verify, sizeof(verify), " (+%.3f s checksum/sync on the receiver)",
			 s->verify_seconds);
	printf("uiwarp-replicate: %s %llu bytes in %.3f s: %.1f MiB/s (%.2f Gbit/s) over %s, "
	       "crc32c 0x%08x %s%s\n",
	       o->sender ? "sent" : "received", (unsigned long long)s->bytes, s->seconds, mib, gbit,
	       o->tcp ? "tcp" : "rdma", s->crc, o->sender ? "verified by receiver" : "verified",
	       verify);
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

int rep_dest_open(struct rep_dest *d, const char *path, uint64_t size, bool anon)
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
	}
	return 0;
fail:
	rep_dest_abort(d);
	return ret;
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

/* Writes the anonymous buffer to the file. Returns 0 or -1 with errno. */
static int write_out(struct rep_dest *d)
{
	const char *p = d->map;
	uint64_t off = 0;

	while (off < d->size) {
		size_t n = d->size - off > (1u << 30) ? (1u << 30) : (size_t)(d->size - off);
		ssize_t w = pwrite(d->fd, p + off, n, (off_t)off);

		if (w < 0) {
			if (errno == EINTR && !rep_interrupted)
				continue;
			return -1;
		}
		off += (uint64_t)w;
	}
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
		if (d->map && write_out(d) < 0)
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
