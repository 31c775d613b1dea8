/* uiwarp-replicate --tcp: the same copy over a plain TCP socket, with the
 * same hello / accept / done / result messages as the RDMA path (see
 * replicate.h), so both numbers come from the same tool and the same rules. */
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "replicate.h"

/* Sets send and receive timeouts of fd to sec seconds (0 = none). */
static void set_timeouts(int fd, int sec)
{
	struct timeval tv = {.tv_sec = sec, .tv_usec = 0};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* The congestion control uiwarp's own sockets get from UIWARP_TCP_CONGESTION
 * (docs/configuration.md), so that --tcp and RDMA copies compare on equal
 * terms; unset or empty leaves the system default. */
static void set_congestion(int fd)
{
	const char *cc = getenv("UIWARP_TCP_CONGESTION");

	if (cc && *cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) < 0)
		rep_err("TCP_CONGESTION %s: %s (using the system default)", cc, strerror(errno));
}

/* Writes n bytes. Returns 0 or -errno (-ETIMEDOUT after the socket timeout,
 * -EINTR on a signal). */
static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR && !rep_interrupted)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return -ETIMEDOUT;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes. Returns 0, -ECONNRESET on end of stream (*got has
 * the bytes read), -ETIMEDOUT, -EINTR or another -errno. */
static int read_all(int fd, void *buf, size_t n, size_t *got)
{
	char *p = buf;
	size_t done = 0;

	while (done < n) {
		ssize_t r = recv(fd, p + done, n - done, 0);

		if (r == 0) {
			if (got)
				*got = done;
			return -ECONNRESET;
		}
		if (r < 0) {
			if (errno == EINTR && !rep_interrupted)
				continue;
			if (got)
				*got = done;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return -ETIMEDOUT;
			return -errno;
		}
		done += (size_t)r;
	}
	if (got)
		*got = done;
	return 0;
}

static const char *errstr(int neg)
{
	if (neg == -ECONNRESET)
		return "connection closed by peer";
	if (neg == -ETIMEDOUT)
		return "timed out";
	if (neg == -EINTR)
		return "interrupted";
	return strerror(-neg);
}

int rep_tcp_send(const struct rep_opts *o)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
	struct rep_progress prog;
	struct rep_stats st = {0};
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_done done;
	struct rep_result result;
	struct rep_src src;
	char *buf = NULL;
	uint64_t off;
	uint32_t crc = 0;
	double t0;
	int fd = -1, ret, one = 1, err = 0;

	if (rep_src_open(&src, o->path, o->no_mmap) < 0)
		return 1;
	if (!src.map && src.size > 0) {
		buf = malloc(o->chunk);
		if (!buf) {
			rep_err("out of memory");
			goto fail;
		}
	}

	ret = getaddrinfo(o->host, o->port, &hints, &res);
	if (ret) {
		rep_err("cannot resolve %s: %s", o->host, gai_strerror(ret));
		goto fail;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		set_timeouts(fd, o->timeout);
		set_congestion(fd);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		err = errno == EINPROGRESS ? ETIMEDOUT : errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		rep_err("cannot connect to %s port %s: %s", o->host, o->port, strerror(err));
		goto fail;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	hello = (struct rep_hello){.magic = htobe32(REP_MAGIC),
				   .version = htobe16(REP_VERSION),
				   .flags = htobe16(REP_HELLO_TCP),
				   .size = htobe64(src.size),
				   .chunk = htobe32(o->chunk)};
	ret = write_all(fd, &hello, sizeof(hello));
	if (!ret)
		ret = read_all(fd, &acc, sizeof(acc), NULL);
	if (ret) {
		rep_err("handshake with %s failed: %s (is the receiver in --tcp mode too?)",
			o->host, errstr(ret));
		goto fail;
	}
	if (be32toh(acc.magic) != REP_MAGIC || be16toh(acc.version) != REP_VERSION) {
		rep_err("%s is not a uiwarp-replicate receiver (bad reply)", o->host);
		goto fail;
	}
	if (be16toh(acc.status) != REP_ACCEPT_OK) {
		rep_err("receiver refused: cannot create the destination: %s",
			strerror((int)be32toh(acc.err)));
		goto fail;
	}

	rep_progress_init(&prog, o, src.size);
	t0 = rep_now();
	for (off = 0; off < src.size;) {
		size_t n = src.size - off < o->chunk ? (size_t)(src.size - off) : o->chunk;
		const void *p;

		if (src.map) {
			p = (const char *)src.map + off;
		} else {
			ret = rep_src_read(&src, buf, n, off);
			if (ret) {
				rep_err("cannot read %s: %s", o->path, strerror(-ret));
				goto fail;
			}
			p = buf;
		}
		crc = rep_crc32c(crc, p, n);
		ret = write_all(fd, p, n);
		if (ret) {
			rep_progress_end(&prog);
			rep_err("sending to %s failed after %llu of %llu bytes: %s", o->host,
				(unsigned long long)off, (unsigned long long)src.size, errstr(ret));
			goto fail;
		}
		off += n;
		rep_progress_update(&prog, off, off == src.size);
	}
	done = (struct rep_done){.magic = htobe32(REP_MAGIC),
				 .version = htobe16(REP_VERSION),
				 .length = htobe64(src.size),
				 .crc = htobe32(crc)};
	ret = write_all(fd, &done, sizeof(done));
	/* The receiver still checksums and syncs everything before answering. */
	set_timeouts(fd, rep_answer_timeout(o, src.size));
	if (!ret)
		ret = read_all(fd, &result, sizeof(result), NULL);
	rep_progress_end(&prog);
	if (ret) {
		rep_err("no answer from the receiver: %s", errstr(ret));
		goto fail;
	}
	st.seconds = rep_now() - t0;
	if (be32toh(result.magic) != REP_MAGIC) {
		rep_err("bad answer from the receiver");
		goto fail;
	}
	if (be16toh(result.status) != REP_RESULT_OK) {
		rep_err("receiver rejected the copy: %s%s%s (sent crc32c 0x%08x, receiver computed "
			"0x%08x); DEST was not written",
			rep_result_str(be16toh(result.status)), result.err ? ": " : "",
			result.err ? strerror((int)be32toh(result.err)) : "", crc,
			be32toh(result.crc));
		goto fail;
	}
	st.verify_seconds = (double)be64toh(result.verify_us) * 1e-6;
	if (st.seconds > st.verify_seconds)
		st.seconds -= st.verify_seconds;
	st.bytes = src.size;
	st.crc = crc;
	rep_print_result(o, &st);
	close(fd);
	free(buf);
	rep_src_close(&src);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	rep_src_close(&src);
	return 1;
}

/* Creates a listening socket on o->bind (any IPv4 address if NULL) and o->port.
 * Returns the fd or -1 (message printed). */
static int tcp_listen(const struct rep_opts *o)
{
	struct addrinfo hints = {.ai_family = o->bind ? AF_UNSPEC : AF_INET,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
			*res;
	int fd, one = 1, ret;

	ret = getaddrinfo(o->bind, o->port, &hints, &res);
	if (ret) {
		rep_err("cannot resolve %s: %s", o->bind, gai_strerror(ret));
		return -1;
	}
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd < 0) {
		rep_err("socket: %s", strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	set_congestion(fd); /* accepted sockets inherit it */
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1) < 0) {
		rep_err("cannot listen on %s port %s: %s", o->bind ? o->bind : "*", o->port,
			strerror(errno));
		close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	fprintf(stderr, "uiwarp-replicate: listening on %s port %s (tcp)\n",
		o->bind ? o->bind : "*", o->port);
	fflush(stderr);
	return fd;
}

int rep_tcp_recv(const struct rep_opts *o)
{
	struct pollfd pfd;
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_done done;
	struct rep_result result;
	struct rep_dest dest = {.fd = -1};
	struct rep_stats st = {0};
	uint64_t size, off;
	uint32_t crc;
	double t0, tv;
	int lfd, fd = -1, ret, status, err;

	lfd = tcp_listen(o);
	if (lfd < 0)
		return 1;
	pfd = (struct pollfd){.fd = lfd, .events = POLLIN};
	ret = poll(&pfd, 1, o->timeout ? o->timeout * 1000 : -1);
	if (ret <= 0) {
		if (ret == 0)
			rep_err("no sender connected within %d s", o->timeout);
		else
			rep_err("waiting for a sender: %s",
				rep_interrupted ? "interrupted" : strerror(errno));
		close(lfd);
		return 1;
	}
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	close(lfd);
	if (fd < 0) {
		rep_err("accept: %s", strerror(errno));
		return 1;
	}
	set_timeouts(fd, o->timeout);

	ret = read_all(fd, &hello, sizeof(hello), NULL);
	if (ret) {
		rep_err("no hello from the sender: %s", errstr(ret));
		goto fail;
	}
	memset(&acc, 0, sizeof(acc));
	acc.magic = htobe32(REP_MAGIC);
	acc.version = htobe16(REP_VERSION);
	if (be32toh(hello.magic) != REP_MAGIC || be16toh(hello.version) != REP_VERSION ||
	    !(be16toh(hello.flags) & REP_HELLO_TCP)) {
		rep_err("bad hello from the sender (not uiwarp-replicate --tcp?)");
		acc.status = htobe16(REP_ACCEPT_PROTO);
		write_all(fd, &acc, sizeof(acc));
		goto fail;
	}
	size = be64toh(hello.size);
	ret = rep_dest_open(&dest, o->path, size, o->no_mmap);
	if (ret) {
		rep_err("cannot write %s (%llu bytes): %s", o->path, (unsigned long long)size,
			strerror(-ret));
		acc.status = htobe16(REP_ACCEPT_CREATE);
		acc.err = htobe32((uint32_t)-ret);
		write_all(fd, &acc, sizeof(acc));
		goto fail;
	}
	acc.chunk = hello.chunk;
	ret = write_all(fd, &acc, sizeof(acc));
	if (ret) {
		rep_err("sending the accept failed: %s", errstr(ret));
		goto fail;
	}

	fprintf(stderr, "uiwarp-replicate: receiving %llu bytes into %s.part\n",
		(unsigned long long)size, o->path);
	fflush(stderr);
	t0 = rep_now();
	for (off = 0; off < size;) {
		size_t n = size - off < (1u << 30) ? (size_t)(size - off) : (1u << 30), got = 0;

		ret = read_all(fd, (char *)dest.map + off, n, &got);
		off += got;
		if (ret) {
			rep_err("receiving failed after %llu of %llu bytes: %s",
				(unsigned long long)off, (unsigned long long)size, errstr(ret));
			goto fail;
		}
	}
	ret = read_all(fd, &done, sizeof(done), NULL);
	if (ret) {
		rep_err("no final message from the sender: %s", errstr(ret));
		goto fail;
	}
	st.seconds = rep_now() - t0;
	memset(&result, 0, sizeof(result));
	result.magic = htobe32(REP_MAGIC);
	result.version = htobe16(REP_VERSION);
	if (be32toh(done.magic) != REP_MAGIC) {
		rep_err("bad final message from the sender");
		result.status = htobe16(REP_RESULT_PROTO);
		write_all(fd, &result, sizeof(result));
		goto fail;
	}
	tv = rep_now();
	status = rep_dest_finish(&dest, be64toh(done.length), be32toh(done.crc), &crc, &err);
	result.status = htobe16((uint16_t)status);
	result.err = htobe32((uint32_t)err);
	result.crc = htobe32(crc);
	result.verify_us = htobe64((uint64_t)((rep_now() - tv) * 1e6));
	ret = write_all(fd, &result, sizeof(result));
	if (status != REP_RESULT_OK) {
		rep_err("%s: %s%s%s (length %llu, expected %llu; crc32c 0x%08x, expected 0x%08x); "
			"removed %s.part",
			o->path, rep_result_str(status), err ? ": " : "", err ? strerror(err) : "",
			(unsigned long long)be64toh(done.length), (unsigned long long)size, crc,
			be32toh(done.crc), o->path);
		goto fail;
	}
	if (ret)
		rep_err("warning: could not send the result to the sender: %s", errstr(ret));
	st.bytes = size;
	st.crc = crc;
	rep_print_result(o, &st);
	close(fd);
	return 0;
fail:
	rep_dest_abort(&dest);
	if (fd >= 0)
		close(fd);
	return 1;
}
