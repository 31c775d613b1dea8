/* uiwarp-replicate --tcp: the same copy over plain TCP sockets (one per
 * --streams), with the same hello / accept / table / done / result messages
 * as the RDMA path (see replicate.h), so both numbers come from the same tool
 * and the same rules. Each stream is served by a thread of its own. */
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* One send / recv on fd, through its TLS session when it has one (--tls):
 * the count, 0 at the end of the stream (recv), or -errno (-EAGAIN after
 * the socket timeout, -EINTR, -EBADMSG for a TLS record that failed). */
static ssize_t sock_send(int fd, const void *p, size_t n)
{
	if (rep_tls_on(fd))
		return rep_tls_write(fd, p, n);
	ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
	return w < 0 ? -errno : w;
}

static ssize_t sock_recv(int fd, void *p, size_t n)
{
	if (rep_tls_on(fd))
		return rep_tls_read(fd, p, n);
	ssize_t r = recv(fd, p, n, 0);
	return r < 0 ? -errno : r;
}

/* Writes n bytes. Returns 0 or -errno (-ETIMEDOUT after the socket timeout,
 * -EINTR on a signal). */
static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = sock_send(fd, p, n);

		if (w < 0) {
			if (w == -EINTR && !rep_interrupted)
				continue;
			if (w == -EAGAIN || w == -EWOULDBLOCK)
				return -ETIMEDOUT;
			return (int)w;
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
		ssize_t r = sock_recv(fd, p + done, n - done);

		if (r == 0) {
			if (got)
				*got = done;
			return -ECONNRESET;
		}
		if (r < 0) {
			if (r == -EINTR && !rep_interrupted)
				continue;
			if (got)
				*got = done;
			if (r == -EAGAIN || r == -EWOULDBLOCK)
				return -ETIMEDOUT;
			return (int)r;
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

/* Connects to o->host port o->port with the socket options of a data stream.
 * Returns the fd or -1 (message printed). */
static int tcp_connect(const struct rep_opts *o)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
	int fd = -1, ret, one = 1, err = 0;

	ret = getaddrinfo(o->host, o->port, &hints, &res);
	if (ret) {
		rep_err("cannot resolve %s: %s", o->host, gai_strerror(ret));
		return -1;
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
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (o->tls && rep_tls_wrap(fd, false) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Closes fd and its TLS session. */
static void sock_close(int fd)
{
	rep_tls_close(fd);
	close(fd);
}

/* Sends the hello of stream i and reads the accept (and, on stream 0 with
 * --resume, the table into *table / *count, caller frees). Returns 0 or -1
 * (message printed). */
static int tcp_handshake(int fd, const struct rep_opts *o, uint64_t size, uint32_t i,
			 uint32_t **table, uint64_t *count)
{
	struct rep_hello hello;
	struct rep_accept acc;
	struct rep_table th;
	int ret;

	hello = (struct rep_hello){
	    .magic = htobe32(REP_MAGIC),
	    .version = htobe16(REP_VERSION),
	    .flags = htobe16(REP_HELLO_TCP | (o->resume && i == 0 ? REP_HELLO_RESUME : 0)),
	    .size = htobe64(size),
	    .chunk = htobe32(o->chunk),
	    .streams = htobe16((uint16_t)o->streams),
	    .stream = htobe16((uint16_t)i)};
	ret = write_all(fd, &hello, sizeof(hello));
	if (!ret)
		ret = read_all(fd, &acc, sizeof(acc), NULL);
	if (ret) {
		rep_err("handshake with %s failed: %s (is the receiver in --tcp mode too?)",
			o->host, errstr(ret));
		return -1;
	}
	if (be32toh(acc.magic) != REP_MAGIC || be16toh(acc.version) != REP_VERSION) {
		rep_err("%s is not a uiwarp-replicate receiver of this version (bad reply)",
			o->host);
		return -1;
	}
	if (be16toh(acc.status) == REP_ACCEPT_PROTO) {
		rep_err("receiver refused stream %u of %u (it is busy with another transfer?)", i,
			o->streams);
		return -1;
	}
	if (be16toh(acc.status) != REP_ACCEPT_OK) {
		rep_err("receiver refused: cannot create the destination: %s",
			strerror((int)be32toh(acc.err)));
		return -1;
	}
	if (!(be16toh(hello.flags) & REP_HELLO_RESUME))
		return 0;
	ret = read_all(fd, &th, sizeof(th), NULL);
	if (ret || be32toh(th.magic) != REP_MAGIC || be32toh(th.count) > REP_MAX_TABLE) {
		rep_err("no valid resume table from the receiver: %s",
			ret ? errstr(ret) : "bad header");
		return -1;
	}
	*count = be32toh(th.count);
	if (!*count)
		return 0;
	*table = malloc((size_t)*count * sizeof(**table));
	if (!*table) {
		rep_err("out of memory");
		return -1;
	}
	ret = read_all(fd, *table, (size_t)*count * sizeof(**table), NULL);
	if (ret) {
		rep_err("reading the resume table failed: %s", errstr(ret));
		return -1;
	}
	for (uint64_t k = 0; k < *count; k++)
		(*table)[k] = be32toh((*table)[k]);
	return 0;
}

/* One sender stream: its socket, the shared plan, what went wrong. */
struct tcp_tx {
	int fd;
	struct rep_plan *plan;
	struct rep_src *src;
	uint64_t off; /* of the failed chunk */
	int err;      /* -errno, 0 if none */
	bool read_err;
};

static void *tcp_tx_thread(void *arg)
{
	struct tcp_tx *t = arg;
	struct rep_chunk_hdr h;
	char *buf = NULL;
	uint64_t off;
	uint32_t n;

	if (!t->src->map && t->src->size)
		buf = malloc(t->plan->chunk);
	if (!t->src->map && t->src->size && !buf) {
		t->err = -ENOMEM;
		goto out;
	}
	while (rep_plan_next(t->plan, &off, &n)) {
		const void *p = (const char *)t->src->map + off;

		if (buf) {
			t->err = rep_src_read(t->src, buf, n, off);
			if (t->err) {
				t->read_err = true;
				break;
			}
			p = buf;
		}
		h = (struct rep_chunk_hdr){.off = htobe64(off), .len = htobe32(n)};
		t->err = write_all(t->fd, &h, sizeof(h));
		if (!t->err)
			t->err = write_all(t->fd, p, n);
		if (t->err)
			break;
		rep_plan_complete(t->plan, n);
	}
	if (!t->err) {
		h = (struct rep_chunk_hdr){0};
		t->err = write_all(t->fd, &h, sizeof(h));
	}
out:
	if (t->err) {
		t->off = off;
		atomic_store(&t->plan->stop, 1);
	}
	free(buf);
	atomic_fetch_sub(&t->plan->running, 1);
	return NULL;
}

int rep_tcp_send(const struct rep_opts *o)
{
	struct rep_progress prog;
	struct rep_stats st = {0};
	struct rep_done done;
	struct rep_result result;
	struct rep_src src;
	struct rep_plan plan = {0};
	struct tcp_tx tx[REP_MAX_STREAMS] = {0};
	uint32_t nthr = 0, *table = NULL, crc = 0;
	uint64_t count = 0;
	double t0;
	int ret, fail = 1;

	for (uint32_t i = 0; i < REP_MAX_STREAMS; i++)
		tx[i].fd = -1;
	if (rep_src_open(&src, o->path, o->no_mmap) < 0)
		return 1;
	if (o->resume && (src.size + o->chunk - 1) / o->chunk > REP_MAX_TABLE)
		rep_err("note: more than %u chunks: the receiver will not offer to resume; use a "
			"larger --chunk",
			REP_MAX_TABLE);
	for (uint32_t i = 0; i < o->streams; i++) {
		tx[i].fd = tcp_connect(o);
		if (tx[i].fd < 0)
			goto out;
		if (tcp_handshake(tx[i].fd, o, src.size, i, &table, &count))
			goto out;
	}
	if (rep_plan_init(&plan, &src, o, o->chunk, table, count, &st))
		goto out;

	rep_progress_init(&prog, o, plan.send_bytes);
	t0 = rep_now();
	for (uint32_t i = 0; i < o->streams; i++) {
		tx[i].plan = &plan;
		tx[i].src = &src;
	}
	nthr = rep_run_streams(&plan, &src, o, &prog, tcp_tx_thread, tx, sizeof(*tx), &crc);
	if (nthr < o->streams || atomic_load(&plan.stop))
		goto failed;
	for (uint32_t i = 0; i < nthr; i++)
		if (tx[i].err)
			goto failed;
	rep_progress_update(&prog, plan.send_bytes, true);

	done = (struct rep_done){.magic = htobe32(REP_MAGIC),
				 .version = htobe16(REP_VERSION),
				 .length = htobe64(src.size),
				 .crc = htobe32(crc)};
	for (uint32_t i = 0; i < o->streams; i++) {
		ret = write_all(tx[i].fd, &done, sizeof(done));
		if (ret) {
			rep_progress_end(&prog);
			rep_err("sending the final message failed: %s", errstr(ret));
			goto out;
		}
	}
	/* The receiver still checksums and syncs everything before answering. */
	set_timeouts(tx[0].fd, rep_answer_timeout(o, src.size));
	ret = read_all(tx[0].fd, &result, sizeof(result), NULL);
	rep_progress_end(&prog);
	if (ret) {
		rep_err("no answer from the receiver: %s", errstr(ret));
		goto out;
	}
	st.seconds = rep_now() - t0;
	if (be32toh(result.magic) != REP_MAGIC) {
		rep_err("bad answer from the receiver");
		goto out;
	}
	if (be16toh(result.status) != REP_RESULT_OK) {
		rep_err("receiver rejected the copy: %s%s%s (sent crc32c 0x%08x, receiver computed "
			"0x%08x); DEST was not written",
			rep_result_str(be16toh(result.status)), result.err ? ": " : "",
			result.err ? strerror((int)be32toh(result.err)) : "", crc,
			be32toh(result.crc));
		goto out;
	}
	st.verify_seconds = (double)be64toh(result.verify_us) * 1e-6;
	if (st.seconds > st.verify_seconds)
		st.seconds -= st.verify_seconds;
	st.bytes = src.size;
	st.crc = crc;
	st.streams = o->streams;
	for (uint32_t i = 0; i < o->streams; i++)
		rep_tcp_info_add(tx[i].fd, &st);
	rep_print_result(o, &st);
	fail = 0;
	goto out;
failed:
	rep_progress_end(&prog);
	for (uint32_t i = 0; i < nthr; i++) {
		if (tx[i].read_err)
			rep_err("cannot read %s: %s", o->path, strerror(-tx[i].err));
		else if (tx[i].err)
			rep_err("sending to %s failed on stream %u at byte %llu of %llu: %s",
				o->host, i, (unsigned long long)tx[i].off,
				(unsigned long long)src.size, errstr(tx[i].err));
	}
out:
	for (uint32_t i = 0; i < o->streams; i++)
		if (tx[i].fd >= 0)
			sock_close(tx[i].fd);
	free(table);
	rep_plan_free(&plan);
	rep_src_close(&src);
	return fail;
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
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, REP_MAX_STREAMS) < 0) {
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

/* One receiver stream: its socket, where the data goes, its done message. */
struct tcp_rx {
	int fd;
	atomic_int *running; /* threads still reading; this one decrements it */
	struct rep_dest *dest;
	uint32_t chunk;
	struct rep_done done;
	uint64_t bytes; /* received on this stream */
	int err;	/* -errno, 0 if none */
	bool proto;	/* bad chunk header */
};

/* Reads chunks (header, bytes into dest) until the end header, then the done. */
static void tcp_rx_stream(struct tcp_rx *t)
{
	struct rep_chunk_hdr h;

	for (;;) {
		uint64_t off;
		uint32_t len;

		t->err = read_all(t->fd, &h, sizeof(h), NULL);
		if (t->err)
			return;
		off = be64toh(h.off);
		len = be32toh(h.len);
		if (!len)
			break;
		if (len > t->chunk || off > t->dest->size || len > t->dest->size - off) {
			t->proto = true;
			t->err = -EPROTO;
			return;
		}
		t->err = read_all(t->fd, (char *)t->dest->map + off, len, NULL);
		if (t->err)
			return;
		t->bytes += len;
	}
	t->err = read_all(t->fd, &t->done, sizeof(t->done), NULL);
}

static void *tcp_rx_thread(void *arg)
{
	struct tcp_rx *t = arg;

	tcp_rx_stream(t);
	atomic_fetch_sub(t->running, 1);
	return NULL;
}

/* Sends the resume table of dest (count 0 when it was not resumed). Returns 0
 * or -errno. */
static int tcp_send_table(int fd, const struct rep_dest *dest, uint32_t chunk)
{
	struct rep_table th = {.magic = htobe32(REP_MAGIC)};
	uint32_t *t = NULL;
	uint64_t count = 0;
	int ret;

	if (dest->resumed) {
		ret = rep_dest_table(dest, chunk, &t, &count);
		if (ret)
			return ret;
		if (count > REP_MAX_TABLE)
			count = 0;
	}
	for (uint64_t k = 0; k < count; k++)
		t[k] = htobe32(t[k]);
	th.count = htobe32((uint32_t)count);
	ret = write_all(fd, &th, sizeof(th));
	if (!ret && count)
		ret = write_all(fd, t, (size_t)count * sizeof(*t));
	if (!ret && count)
		fprintf(stderr,
			"uiwarp-replicate: resume: offered the CRC32c of %llu chunks of "
			"%s.part\n",
			(unsigned long long)count, dest->path);
	free(t);
	return ret;
}

/* Waits up to timeout seconds (0 = none) for a connection on lfd, watching
 * the n streams of rx accepted so far: the sender sends nothing on them until
 * all are connected, so one that turns readable was closed (a sender that
 * failed to set up a later stream). Returns 1 when lfd is ready, 0 on
 * timeout, -ECONNRESET when a stream was closed, -1 with errno. */
static int wait_listen(int lfd, const struct tcp_rx *rx, uint32_t n, int timeout)
{
	struct pollfd pfd[1 + REP_MAX_STREAMS];
	uint32_t np = 0;
	int r;

	pfd[np++] = (struct pollfd){.fd = lfd, .events = POLLIN};
	for (uint32_t k = 0; k < n; k++)
		if (rx[k].fd >= 0)
			pfd[np++] = (struct pollfd){.fd = rx[k].fd, .events = POLLIN | POLLRDHUP};
	r = poll(pfd, np, timeout ? timeout * 1000 : -1);
	if (r <= 0)
		return r;
	for (uint32_t k = 1; k < np; k++)
		if (pfd[k].revents)
			return -ECONNRESET;
	return 1;
}

int rep_tcp_recv(const struct rep_opts *o)
{
	struct rep_hello hello;
	struct rep_rx rxs = {0};
	struct rep_accept acc;
	struct rep_result result;
	struct rep_dest dest = {.fd = -1};
	struct rep_stats st = {0};
	struct tcp_rx rx[REP_MAX_STREAMS];
	pthread_t th[REP_MAX_STREAMS];
	atomic_int running = 0;
	uint32_t crc, nthr = 0;
	double t0 = 0, tv;
	int lfd, ret, r, status, err, fail = 1;

	for (uint32_t i = 0; i < REP_MAX_STREAMS; i++)
		rx[i].fd = -1;
	lfd = tcp_listen(o);
	if (lfd < 0)
		return 1;
	/* Stream 0 first (the sender connects one after the other), then the rest. */
	while (!rxs.streams || rxs.got < rxs.streams) {
		uint32_t i;
		int fd;

		ret = wait_listen(lfd, rx, rxs.streams, o->timeout);
		if (ret <= 0) {
			if (ret == -ECONNRESET)
				rep_err("the sender closed a stream before all %u were connected",
					rxs.streams);
			else if (ret == 0)
				rep_err("no sender connected within %d s (%u of %u streams)",
					o->timeout, rxs.got, rxs.streams ? rxs.streams : 1);
			else
				rep_err("waiting for a sender: %s",
					rep_interrupted ? "interrupted" : strerror(errno));
			goto fail;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			rep_err("accept: %s", strerror(errno));
			goto fail;
		}
		set_timeouts(fd, o->timeout);
		if (o->tls && rep_tls_wrap(fd, true) != 0) {
			close(fd);
			goto fail;
		}
		ret = read_all(fd, &hello, sizeof(hello), NULL);
		if (ret) {
			rep_err("no hello from the sender: %s", errstr(ret));
			sock_close(fd);
			goto fail;
		}
		r = rep_rx_hello(&rxs, &hello, true, o, &dest, &acc);
		if (r < 0) {
			write_all(fd, &acc, sizeof(acc));
			sock_close(fd);
			if (r == -2)
				goto fail;
			continue;
		}
		i = (uint32_t)r;
		rx[i].fd = fd;
		ret = write_all(fd, &acc, sizeof(acc));
		if (!ret && i == 0 && (be16toh(hello.flags) & REP_HELLO_RESUME))
			ret = tcp_send_table(fd, &dest, rxs.chunk);
		if (ret) {
			rep_err("sending the accept failed: %s", errstr(ret));
			goto fail;
		}
		rep_rx_accepted(&rxs, i, o, &dest);
		if (i == 0)
			t0 = rep_now();
	}
	close(lfd);
	lfd = -1;

	running = (int)rxs.streams;
	for (; nthr < rxs.streams; nthr++) {
		rx[nthr].dest = &dest;
		rx[nthr].chunk = rxs.chunk;
		rx[nthr].bytes = 0;
		rx[nthr].err = 0;
		rx[nthr].proto = false;
		rx[nthr].running = &running;
		if (rep_thread_start(&th[nthr], tcp_rx_thread, &rx[nthr]))
			goto fail;
	}
	/* Signals come here: end the streams so the threads return. */
	while (atomic_load(&running) > 0) {
		if (rep_interrupted) {
			for (uint32_t i = 0; i < nthr; i++)
				shutdown(rx[i].fd, SHUT_RDWR);
			break;
		}
		usleep(20000);
	}
	ret = 0;
	for (uint32_t i = 0; i < nthr; i++) {
		pthread_join(th[i], NULL);
		if (rx[i].err && !ret) {
			ret = rx[i].err;
			rep_err("receiving failed on stream %u after %llu bytes: %s", i,
				(unsigned long long)rx[i].bytes,
				rep_interrupted ? "interrupted"
				: rx[i].proto	? "bad chunk header"
						: errstr(rx[i].err));
		}
	}
	nthr = 0;
	if (ret)
		goto fail;
	st.seconds = rep_now() - t0;
	memset(&result, 0, sizeof(result));
	result.magic = htobe32(REP_MAGIC);
	result.version = htobe16(REP_VERSION);
	for (uint32_t i = 0; i < rxs.streams; i++) {
		if (be32toh(rx[i].done.magic) != REP_MAGIC ||
		    rx[i].done.length != rx[0].done.length || rx[i].done.crc != rx[0].done.crc) {
			rep_err("bad final message from the sender on stream %u", i);
			result.status = htobe16(REP_RESULT_PROTO);
			write_all(rx[0].fd, &result, sizeof(result));
			goto fail;
		}
	}
	tv = rep_now();
	status =
	    rep_dest_finish(&dest, be64toh(rx[0].done.length), be32toh(rx[0].done.crc), &crc, &err);
	result.status = htobe16((uint16_t)status);
	result.err = htobe32((uint32_t)err);
	result.crc = htobe32(crc);
	result.verify_us = htobe64((uint64_t)((rep_now() - tv) * 1e6));
	st.streams = rxs.streams;
	for (uint32_t i = 0; i < rxs.streams; i++)
		rep_tcp_info_add(rx[i].fd, &st);
	ret = write_all(rx[0].fd, &result, sizeof(result));
	if (status != REP_RESULT_OK) {
		rep_err("%s: %s%s%s (length %llu, expected %llu; crc32c 0x%08x, expected 0x%08x); "
			"removed %s.part",
			o->path, rep_result_str(status), err ? ": " : "", err ? strerror(err) : "",
			(unsigned long long)be64toh(rx[0].done.length),
			(unsigned long long)rxs.size, crc, be32toh(rx[0].done.crc), o->path);
		goto fail;
	}
	if (ret)
		rep_err("warning: could not send the result to the sender: %s", errstr(ret));
	st.bytes = rxs.size;
	st.crc = crc;
	rep_print_result(o, &st);
	fail = 0;
fail:
	if (nthr) {
		/* Threads still reading: end their streams so they return. */
		for (uint32_t i = 0; i < nthr; i++)
			shutdown(rx[i].fd, SHUT_RDWR);
		for (uint32_t i = 0; i < nthr; i++)
			pthread_join(th[i], NULL);
	}
	if (lfd >= 0)
		close(lfd);
	if (fail && o->resume)
		rep_dest_keep(&dest);
	else
		rep_dest_abort(&dest);
	for (uint32_t i = 0; i < REP_MAX_STREAMS; i++)
		if (rx[i].fd >= 0)
			sock_close(rx[i].fd);
	return fail;
}
