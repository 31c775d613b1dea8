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
 * removed and DEST is left untouched.
 */
#ifndef UIWARP_REPLICATE_H
#define UIWARP_REPLICATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REP_MAGIC 0x55495752u /* "UIWR" */
#define REP_VERSION 1
#define REP_DEFAULT_PORT 18515
#define REP_DEFAULT_CHUNK (1u << 20)
#define REP_DEFAULT_WINDOW 16
#define REP_DEFAULT_TIMEOUT 60 /* seconds */
#define REP_MIN_CHUNK 4096u
#define REP_MAX_CHUNK (1u << 30)
#define REP_MAX_WINDOW 1024

enum rep_hello_flags {
	REP_HELLO_TCP = 1, /* data follows on this TCP stream */
};

struct rep_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint64_t size;	/* bytes of the file */
	uint32_t chunk; /* bytes per RDMA Write / TCP send the sender wants */
	uint32_t reserved;
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

/* Parsed command line. */
struct rep_opts {
	bool sender;
	bool tcp;
	bool no_mmap; /* send: read SRC with pread; recv: anonymous buffer, write at the end */
	bool quiet;
	const char *bind; /* receiver: local address, NULL for any */
	const char *port; /* decimal */
	const char *path; /* sender: SRC, receiver: DEST */
	const char *host; /* sender: receiver's address */
	uint32_t chunk;	  /* bytes */
	uint32_t window;  /* outstanding writes */
	int timeout;	  /* seconds per wait; 0 = no limit */
};

/* Outcome of a transfer, for the final line. */
struct rep_stats {
	uint64_t bytes;
	double seconds;	       /* sender: first data byte to verified result */
	double verify_seconds; /* receiver's checksum + sync + rename time */
	uint32_t crc;
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
	void *map; /* where the data goes; NULL when size is 0 */
	bool anon; /* map is an anonymous buffer, not the file */
	uint64_t size;
};
/* Creates DEST.part with size bytes reserved and (if size > 0) maps it
 * read/write shared, or an anonymous buffer when anon. Returns 0 or -errno;
 * on error nothing is left. */
int rep_dest_open(struct rep_dest *d, const char *path, uint64_t size, bool anon);
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

/* Seconds the sender waits for the receiver's answer once all size bytes are
 * out: --timeout plus 1 s per 64 MiB for the receiver's checksum and sync
 * (0 when --timeout is 0). */
int rep_answer_timeout(const struct rep_opts *o, uint64_t size);
/* Text for an enum rep_result_status. */
const char *rep_result_str(int status);

/* ---- rdma.c / tcp.c: return 0 on a verified copy, non-zero otherwise (message printed). ---- */
int rep_rdma_send(const struct rep_opts *o);
int rep_rdma_recv(const struct rep_opts *o);
int rep_tcp_send(const struct rep_opts *o);
int rep_tcp_recv(const struct rep_opts *o);

#endif
