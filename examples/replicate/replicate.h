/* uiwarp-replicate: copy one file to another host with RDMA Writes (standard
 * verbs + rdma_cm, so it runs over uiwarp or real RDMA hardware) or, with
 * --tcp, over a plain TCP socket with the same framing and the same rules.
 *
 * Wire protocol (all integers big-endian, structs naturally aligned):
 *   sender -> receiver  hello   (rdma_connect private data / first TCP bytes)
 *   receiver -> sender  accept  (rdma_accept or rdma_reject private data / TCP reply)
 *   sender -> receiver  data    (RDMA Writes into {addr, rkey} / TCP byte stream)
 *   sender -> receiver  done    (a Send / TCP bytes after the data): length + CRC32c
 *   receiver -> sender  result  (a Send / TCP bytes): verified or why not
 * The receiver writes DEST.part and renames it to DEST only after the length
 * and CRC32c matched and the data was synced; on any failure DEST.part is
 * removed (kept for the next run with --resume) and DEST is left untouched.
 *
 * Version 2 adds, on top of version 1's messages:
 *   --streams N: the sender opens N connections (N QPs, or N TCP sockets),
 *     each with its own hello {streams = N, stream = i}; the receiver accepts
 *     all N, the data is spread over them chunk by chunk, and every stream
 *     ends with its own done (ordered behind that stream's data); the
 *     receiver verifies once all N dones arrived and answers on stream 0.
 *   --resume (hello flag REP_HELLO_RESUME): on stream 0, right after the
 *     accept, the receiver sends a table: struct rep_table then count
 *     big-endian CRC32c values, one per chunk of the sender's chunk size, of
 *     what DEST.part already holds (count 0: nothing to reuse). The sender
 *     sends only the chunks whose CRC32c differs from its own.
 *   --tcp: every chunk on a stream is preceded by struct rep_chunk_hdr; a
 *     header with len 0 ends the stream's data and its done follows.
 */
#ifndef UIWARP_REPLICATE_H
#define UIWARP_REPLICATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/socket.h>

#define REP_MAGIC 0x55495752u /* "UIWR" */
#define REP_VERSION 2
#define REP_DEFAULT_PORT 18515
#define REP_DEFAULT_CHUNK (1u << 20)
#define REP_DEFAULT_WINDOW 16
/* The default per stream with --streams N > 1: what a stream has posted
 * and not yet handed to its socket is what it can trail the others by at
 * the end of the copy, when the link's other shares must move over to it
 * (bbr takes seconds for that at a 50 ms RTT) */
#define REP_DEFAULT_WINDOW_STREAMS 4
#define REP_DEFAULT_TIMEOUT 60 /* seconds */
#define REP_MIN_CHUNK 4096u
#define REP_MAX_CHUNK (1u << 30)
#define REP_MAX_WINDOW 1024
#define REP_MAX_STREAMS 64
/* Largest resume table (chunks): 4M CRCs = 16 MiB; beyond it --resume is off. */
#define REP_MAX_TABLE (1u << 22)

enum rep_hello_flags {
	REP_HELLO_TCP = 1,    /* data follows on this TCP stream */
	REP_HELLO_RESUME = 2, /* sender wants the receiver's table (stream 0) */
};

struct rep_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint64_t size;	  /* bytes of the file */
	uint32_t chunk;	  /* bytes per RDMA Write / TCP send the sender wants */
	uint16_t streams; /* connections of this transfer, 1..REP_MAX_STREAMS */
	uint16_t stream;  /* index of this connection, 0..streams-1 */
};

enum rep_accept_status {
	REP_ACCEPT_OK = 0,
	REP_ACCEPT_CREATE = 1,	 /* cannot create/size/map DEST.part; err = errno */
	REP_ACCEPT_REGISTER = 2, /* ibv_reg_mr failed; err = errno */
	REP_ACCEPT_PROTO = 3,	 /* bad hello */
};

struct rep_accept {
	uint32_t magic;
	uint16_t version;
	uint16_t status; /* enum rep_accept_status */
	uint32_t err;	 /* errno on the receiver, 0 if none */
	uint32_t rkey;	 /* of the DEST mapping; 0 for an empty file or TCP */
	uint64_t addr;	 /* of the DEST mapping; 0 for an empty file or TCP */
	uint32_t chunk;	 /* bytes per write the receiver agreed to */
	uint32_t reserved;
};

/* Resume table header (receiver -> sender on stream 0, when the hello had
 * REP_HELLO_RESUME); count big-endian uint32 CRC32c values follow. */
struct rep_table {
	uint32_t magic;
	uint32_t count; /* 0 or ceil(size / chunk) */
};

/* --tcp: precedes each chunk's bytes on a stream. len 0 ends the data. */
struct rep_chunk_hdr {
	uint64_t off; /* byte offset in the file */
	uint32_t len; /* bytes that follow */
	uint32_t reserved;
};

struct rep_done {
	uint32_t magic;
	uint16_t version;
	uint16_t reserved;
	uint64_t length; /* bytes written */
	uint32_t crc;	 /* CRC32c (Castagnoli) of those bytes */
	uint32_t reserved2;
};

enum rep_result_status {
	REP_RESULT_OK = 0,
	REP_RESULT_LENGTH = 1,	 /* done.length != hello.size */
	REP_RESULT_CHECKSUM = 2, /* CRC32c mismatch: DEST not written */
	REP_RESULT_IO = 3,	 /* msync/rename failed; err = errno */
	REP_RESULT_PROTO = 4,	 /* bad done message */
};

struct rep_result {
	uint32_t magic;
	uint16_t version;
	uint16_t status;    /* enum rep_result_status */
	uint32_t err;	    /* errno on the receiver, 0 if none */
	uint32_t crc;	    /* CRC32c the receiver computed */
	uint64_t verify_us; /* receiver time for checksum + sync + rename, microseconds */
};

_Static_assert(sizeof(struct rep_hello) == 24, "hello layout");
_Static_assert(sizeof(struct rep_accept) == 32, "accept layout");
_Static_assert(sizeof(struct rep_done) == 24, "done layout");
_Static_assert(sizeof(struct rep_result) == 24, "result layout");
_Static_assert(sizeof(struct rep_table) == 8, "table layout");
_Static_assert(sizeof(struct rep_chunk_hdr) == 16, "chunk header layout");

/* Parsed command line. */
struct rep_opts {
	bool sender;
	bool tcp;
	bool tls;     /* --tls: RDMA over uiwarp's TLS stream, or TLS over the --tcp sockets */
	bool no_mmap; /* send: read SRC with pread; recv: anonymous buffer, write at the end */
	bool quiet;
	bool resume;	     /* keep DEST.part on failure / reuse its good chunks */
	const char *bind;    /* receiver: local address, NULL for any */
	const char *port;    /* decimal */
	const char *path;    /* sender: SRC, receiver: DEST */
	const char *host;    /* sender: receiver's address */
	uint32_t chunk;	     /* bytes */
	uint32_t window;     /* outstanding writes */
	int timeout;	     /* seconds per wait; 0 = no limit */
	uint32_t streams;    /* sender: connections (1..REP_MAX_STREAMS) */
	uint64_t stop_after; /* sender, tests only: _exit(3) after this many chunks; 0 = off */
};

/* --tcp --tls (tls.c): TLS 1.3 with OpenSSL on the plain sockets, with the
 * credentials of uiwarp's UIWARP_TLS_* variables (docs/configuration.md).
 * rep_tls_init builds the process's context (server: the receiver) and
 * returns 0 or -EINVAL (message printed). rep_tls_wrap runs the handshake
 * on the connected blocking socket fd (< 4096) and keeps its session:
 * 0 or -ECONNREFUSED / -ENOMEM (message printed). rep_tls_on says whether
 * fd has a session; rep_tls_write / rep_tls_read move bytes through it
 * (the count, 0 at the end of the stream for a read, or -errno: -EAGAIN
 * after the socket timeout, -EBADMSG for a record that failed);
 * rep_tls_close frees fd's session (not the socket). RFC 8446. */
int rep_tls_init(bool server);
int rep_tls_wrap(int fd, bool server);
bool rep_tls_on(int fd);
ssize_t rep_tls_write(int fd, const void *buf, size_t n);
ssize_t rep_tls_read(int fd, void *buf, size_t n);
void rep_tls_close(int fd);

/* Outcome of a transfer, for the final line. */
struct rep_stats {
	uint64_t bytes;
	double seconds;	       /* sender: first data byte to verified result */
	double verify_seconds; /* receiver's checksum + sync + rename time */
	uint32_t crc;
	uint32_t streams;
	uint64_t chunks_sent, chunks_skipped; /* sender */
	int tcp_socks;	  /* TCP connections TCP_INFO was read from; 0 = none found */
	double rtt_ms;	  /* mean of their tcpi_rtt, milliseconds */
	uint64_t retrans; /* sum of their tcpi_total_retrans, segments */
};

/* ---- util.c ---- */

/* Prints "uiwarp-replicate: " + message + newline to stderr. */
void rep_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic time in seconds. */
double rep_now(void);
/* Finished CRC32c of p[0..n) chained onto the finished CRC32c crc (0 to start). */
uint32_t rep_crc32c(uint32_t crc, const void *p, size_t n);
/* Parses "123", "4k", "1M", "2G" (powers of 1024) into *out bytes; false on error. */
bool rep_parse_size(const char *s, uint64_t *out);
/* Set by SIGINT/SIGTERM/SIGHUP; long waits check it and fail with EINTR. */
extern volatile int rep_interrupted;
void rep_install_signals(void);

/* Progress bar on stderr when it is a terminal (and not --quiet). */
struct rep_progress {
	bool on;
	uint64_t total; /* bytes */
	double start, last;
};
void rep_progress_init(struct rep_progress *p, const struct rep_opts *o, uint64_t total);
/* done: bytes finished so far; redraws at most every 100 ms unless force. */
void rep_progress_update(struct rep_progress *p, uint64_t done, bool force);
void rep_progress_end(struct rep_progress *p);

/* Prints the final line of a side to stdout. */
void rep_print_result(const struct rep_opts *o, const struct rep_stats *s);

/* Receiver's file handling, shared by both transports.
 * The data lands either in a shared mapping of DEST.part (default) or in an
 * anonymous buffer written to DEST.part after verification (--no-mmap, or
 * when the RDMA stack refuses to register file pages: Linux >= 6.5 will not
 * pin most file-backed mappings for writing on real hardware). */
struct rep_dest {
	char *path;	 /* DEST */
	char *part_path; /* DEST.part */
	int fd;
	void *map;    /* where the data goes; NULL when size is 0 */
	bool anon;    /* map is an anonymous buffer, not the file */
	bool resumed; /* DEST.part was reused (--resume), not created */
	uint64_t size;
};
/* Creates DEST.part with size bytes reserved and (if size > 0) maps it
 * read/write shared, or an anonymous buffer when anon. With resume, an
 * existing DEST.part of exactly size bytes is kept as it is (read into the
 * buffer when anon) and d->resumed is set; any other DEST.part is
 * truncated. Returns 0 or -errno; on error nothing is left (a kept DEST.part
 * stays). */
int rep_dest_open(struct rep_dest *d, const char *path, uint64_t size, bool anon, bool resume);
/* CRC32c of every chunk bytes of the data (the last one shorter), into a
 * new array *out of *count = ceil(size / chunk) entries (caller frees; NULL
 * and 0 for an empty file). Returns 0 or -ENOMEM. */
int rep_dest_table(const struct rep_dest *d, uint32_t chunk, uint32_t **out, uint64_t *count);
/* Failure with --resume: writes an anonymous buffer back, syncs and closes
 * DEST.part and frees d, leaving DEST.part for the next run. Prints what it
 * kept. */
void rep_dest_keep(struct rep_dest *d);
/* Replaces the file mapping with an anonymous buffer of the same size.
 * Returns 0 or -errno (then d is unchanged). */
int rep_dest_use_anon(struct rep_dest *d);
/* Verifies length and CRC32c of the data against the sender's, writes it
 * (anonymous buffer) and syncs, then renames DEST.part to DEST. Returns enum
 * rep_result_status; *err gets an errno for REP_RESULT_IO; *crc gets the CRC
 * computed. Always releases d; on failure DEST.part is removed. */
int rep_dest_finish(struct rep_dest *d, uint64_t length, uint32_t want_crc, uint32_t *crc,
		    int *err);
/* Removes DEST.part (if still there) and frees d. Safe to call twice. */
void rep_dest_abort(struct rep_dest *d);

/* Sender's file handling, shared by both transports. */
struct rep_src {
	int fd;
	uint64_t size;
	const void *map; /* NULL when size is 0 or --no-mmap / mmap failed */
};
/* Opens and (if possible) maps SRC. Returns 0 or -errno (message printed). */
int rep_src_open(struct rep_src *s, const char *path, bool no_mmap);
void rep_src_close(struct rep_src *s);
/* Reads exactly n bytes at off into buf. Returns 0 or -errno (-EIO on a short file). */
int rep_src_read(struct rep_src *s, void *buf, size_t n, uint64_t off);

/* Whole-file CRC32c of SRC (reads it through a 1 MiB buffer without a
 * mapping). Returns 0 or -errno. */
int rep_src_crc(struct rep_src *s, uint32_t *crc);

/* Sender's work list, shared by its stream threads: which chunks go out,
 * handed out one at a time so a stream that stalls (loss recovery on its
 * connection) takes fewer of them. */
struct rep_plan {
	uint64_t size;		    /* bytes of SRC */
	uint32_t chunk;		    /* bytes per chunk */
	uint64_t nchunks;	    /* ceil(size / chunk) */
	uint64_t *send_idx;	    /* chunk indices to send; NULL = all of them */
	uint64_t nsend;		    /* entries of send_idx (nchunks when send_idx is NULL) */
	uint64_t send_bytes;	    /* bytes of those chunks */
	bool have_crc;		    /* crc already computed (by the resume comparison) */
	uint32_t crc;		    /* whole-file CRC32c when have_crc */
	uint64_t stop_after;	    /* tests: _exit(3) once this many chunks completed; 0 = off */
	_Atomic uint64_t next;	    /* next index into send_idx */
	_Atomic uint64_t acked;	    /* bytes of completed chunks */
	_Atomic uint64_t completed; /* chunks completed */
	_Atomic int stop;	    /* set by a failing stream: the others stop too */
	_Atomic int running;	    /* stream threads not yet finished */
};
/* Sets up p to send every chunk (chunk bytes each) of s, or, with a resume
 * table (count CRC32c values from the receiver, count == ceil(size /
 * chunk)), only the chunks whose CRC32c differs (computing the whole-file
 * CRC32c on the way, and saying on stderr how many are skipped). A table of
 * any other count is ignored (everything sent). Takes o->stop_after; sets
 * st->chunks_sent / chunks_skipped. Returns 0 or -errno (message printed). */
int rep_plan_init(struct rep_plan *p, struct rep_src *s, const struct rep_opts *o, uint32_t chunk,
		  const uint32_t *table, uint64_t count, struct rep_stats *st);
/* Takes the next chunk to send: *off (bytes) and *len (bytes, > 0). False
 * when none is left or a stream failed. Thread-safe. */
bool rep_plan_next(struct rep_plan *p, uint64_t *off, uint32_t *len);
/* Records a completed chunk of len bytes (RDMA: its Write completed; TCP: its
 * bytes are in the socket) and applies stop_after. Thread-safe. */
void rep_plan_complete(struct rep_plan *p, uint32_t len);
/* Frees p's chunk list (after its threads ended). Safe to call twice. */
void rep_plan_free(struct rep_plan *p);
/* pthread_create(t, NULL, fn, arg) with SIGINT/SIGTERM/SIGHUP blocked in the
 * new thread, so they reach the main thread, which acts on rep_interrupted.
 * Returns 0 or the error number (message printed). */
int rep_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);
/* Runs the sender's streams: starts o->streams threads fn(args + i *
 * arg_size) (each takes chunks from p and, when it ends, decrements
 * p->running and sets p->stop if it failed), computes the whole-file CRC32c
 * of s into *crc meanwhile (unless p has it), draws prog from p->acked until
 * all ended (on SIGINT/SIGTERM/SIGHUP it sets p->stop), and joins them. Returns the number of
 * threads started and run
 * (< o->streams when pthread_create failed: message printed); the caller
 * checks p->stop and its threads' errors. */
uint32_t rep_run_streams(struct rep_plan *p, struct rep_src *s, const struct rep_opts *o,
			 struct rep_progress *prog, void *(*fn)(void *), void *args,
			 size_t arg_size, uint32_t *crc);

/* Adds TCP_INFO of the TCP socket fd to s: tcpi_rtt (smoothed RTT, us) into
 * the mean rtt_ms, tcpi_total_retrans (segments retransmitted over the
 * connection's life) into retrans, one to tcp_socks. Silently skips a socket
 * that is not TCP, listening or closed. */
void rep_tcp_info_add(int fd, struct rep_stats *s);
/* RDMA: uiwarp's TCP connections are sockets of this process. Adds TCP_INFO
 * (as rep_tcp_info_add) of every connected TCP socket of the process whose
 * peer has peer's IP address; over real RDMA hardware there is none and
 * s->tcp_socks stays 0. */
void rep_tcp_info_scan(const struct sockaddr *peer, struct rep_stats *s);

/* Seconds the sender waits for the receiver's answer once all size bytes are
 * out: --timeout plus 1 s per 64 MiB for the receiver's checksum and sync
 * (0 when --timeout is 0). */
int rep_answer_timeout(const struct rep_opts *o, uint64_t size);
/* Receiver: checks the hello of a connection: magic, version, transport
 * (REP_HELLO_TCP set iff tcp), streams in 1..REP_MAX_STREAMS; for the first
 * connection (first NULL) that it is stream 0 with a chunk size in
 * REP_MIN_CHUNK..REP_MAX_CHUNK, for a later one that it has
 * first's size, chunk and streams and an index below streams (whether that
 * index is taken already is the caller's check). */
bool rep_hello_check(const struct rep_hello *h, bool tcp, const struct rep_hello *first);

/* Receiver's view of a transfer, from stream 0's hello on. */
struct rep_rx {
	struct rep_hello first; /* stream 0's hello */
	uint32_t streams;	/* 0 until stream 0's hello was taken */
	uint64_t size;		/* bytes */
	uint32_t chunk;		/* bytes */
	uint32_t got;		/* streams accepted */
	bool taken[REP_MAX_STREAMS];
};
/* Takes the hello h of a new connection (tcp: a --tcp one): checks it
 * (rep_hello_check, index not taken), fills *acc (magic, version, chunk;
 * status and err when refused) and, for stream 0, opens dest
 * (rep_dest_open with --no-mmap / --resume). Returns the stream index to
 * accept (>= 0), -1 to refuse this connection with *acc and wait for the
 * next, -2 to refuse it and give up (message printed for both). */
int rep_rx_hello(struct rep_rx *rx, const struct rep_hello *h, bool tcp, const struct rep_opts *o,
		 struct rep_dest *dest, struct rep_accept *acc);
/* Stream i was accepted: counts it, and for stream 0 says on stderr that the
 * data is coming (over how many streams, resuming or not). */
void rep_rx_accepted(struct rep_rx *rx, uint32_t i, const struct rep_opts *o,
		     const struct rep_dest *dest);
/* Text for an enum rep_result_status. */
const char *rep_result_str(int status);

/* ---- rdma.c / tcp.c: return 0 on a verified copy, non-zero otherwise (message printed). ---- */
int rep_rdma_send(const struct rep_opts *o);
int rep_rdma_recv(const struct rep_opts *o);
int rep_tcp_send(const struct rep_opts *o);
int rep_tcp_recv(const struct rep_opts *o);

#endif
