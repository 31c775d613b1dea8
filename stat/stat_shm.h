/* The live counters' shared-memory segment: its layout, shared by the
 * engine (rdmap/stat.c, the writer) and uiwarp-stat (stat/uiwarp-stat.c,
 * a reader in another process). docs/design.md, "Counters".
 *
 * One file per process, /dev/shm/uiwarp-PID (mode 0600: the same user or
 * root can read it), created with the process's first QP unless
 * UIWARP_STATS=0, removed at exit; a process that dies without exit()
 * (killed, _exit in a forked child) leaves it, and the next process that
 * makes a segment removes those of processes that are gone (unless kept:
 * UIWARP_STATS_KEEP=1; uiwarp-stat --clean removes those). It holds a header (the device's
 * counters) and UIW_STAT_SLOTS slots, one per live QP.
 *
 * Writers: a slot's transfer counters are written by the thread that holds
 * the matching progress lock (tx_* under the send side's, rx_* under the
 * receive side's: one pass, a few plain stores), the WR counters under
 * qp->lock; the header's event counters with relaxed atomic adds. Every
 * field is naturally aligned and written whole, so a reader's relaxed
 * loads see each value torn-free (x86-64, aarch64); the set of values is a
 * snapshot within one progress pass.
 *
 * Readers: a slot whose seq is odd is being (re)initialised: skip it. A
 * slot is summed with the header's closed[] totals as long as hdr->gen
 * did not change while reading (a QP's counters move into closed[] when
 * it is destroyed, with gen odd meanwhile), so device totals never count a
 * QP twice and never go backwards.
 *
 * Units: bytes are octets on the TCP stream (MPA framing, DDP/RDMAP headers,
 * pad and CRC included) for *_bytes of the stream, payload bytes of the
 * work requests for sq_bytes / rq_bytes. Times: ns of CLOCK_MONOTONIC.
 */
#ifndef UIWARP_STAT_SHM_H
#define UIWARP_STAT_SHM_H

#include <stdatomic.h>
#include <stdint.h>

#define UIW_STAT_MAGIC 0x3054415453574955ull /* "UIWSTAT0" little-endian */
#define UIW_STAT_VERSION 1
#define UIW_STAT_SLOTS 1024
#define UIW_STAT_PREFIX "/uiwarp-" /* shm_open name: "/uiwarp-PID" */
#define UIW_STAT_DIR "/dev/shm"

/* Terminate histogram: layer (RFC 5040 §4.8: 0 RDMAP, 1 DDP, 2 LLP/MPA) x
 * error type (4 bits). */
#define UIW_STAT_TERM_LAYERS 3
#define UIW_STAT_TERM_ETYPES 16

/* One connection's (or a sum of connections') counters. */
struct uiw_stat_counters {
	_Atomic uint64_t tx_fpdus;    /* FPDUs handed to TCP */
	_Atomic uint64_t tx_bytes;    /* stream octets handed to TCP */
	_Atomic uint64_t tx_syscalls; /* sendmsg calls */
	_Atomic uint64_t rx_fpdus;    /* FPDUs received (header parsed) */
	_Atomic uint64_t rx_bytes;    /* stream octets read from TCP */
	_Atomic uint64_t rx_syscalls; /* recvmsg calls */
	_Atomic uint64_t sq_wrs;      /* send WRs completed successfully */
	_Atomic uint64_t sq_bytes;    /* their payload bytes (Send, Write, Read) */
	_Atomic uint64_t rq_wrs;      /* receive WRs completed successfully */
	_Atomic uint64_t rq_bytes;    /* bytes received into them */
	_Atomic uint64_t flushed_wrs; /* WRs completed with WR_FLUSH_ERR (send + receive) */
	_Atomic uint64_t crc_errors;  /* FPDUs whose CRC32c did not match */
	_Atomic uint64_t term_sent;   /* Terminates we sent */
	_Atomic uint64_t term_recv;   /* Terminates the peer sent */
};

/* Connection state of a slot. */
enum uiw_stat_conn {
	UIW_STAT_IDLE = 0,   /* not connected (yet) */
	UIW_STAT_OPEN = 1,   /* connected */
	UIW_STAT_CLOSED = 2, /* the connection ended (close_reason says why) */
};

/* One QP. */
struct uiw_stat_qp {
	_Atomic uint32_t seq;	 /* odd while being (re)initialised */
	_Atomic uint32_t in_use; /* 1 while the QP exists */
	_Atomic uint32_t qpn;
	_Atomic uint32_t conn;	       /* enum uiw_stat_conn */
	_Atomic uint32_t close_reason; /* enum uiw_close_reason (rdmap/rdmap.h) */
	/* the last Terminate: bit 31 valid, bit 30 sent by us, layer << 16,
	 * etype << 8, ecode (RFC 5040 §4.8) */
	_Atomic uint32_t term;
	/* the connection, set when it is established: TCP 4-tuple (network
	 * byte order addresses, host order ports) and what MPA settled */
	_Atomic uint32_t family; /* AF_INET or AF_INET6, 0 before */
	_Atomic uint32_t ports;	 /* local << 16 | peer */
	uint8_t laddr[16], raddr[16];
	_Atomic uint32_t mode;	 /* bits: 0 initiator, 1 crc, 2 markers tx, 3 markers rx,
				  * 4 p2p, 5 large FPDUs tx, 6 RFC 7306; 8-15 MPA rev;
				  * 16-23 RTR kind (MPA_RTR_*) */
	_Atomic uint32_t mulpdu; /* bytes of DDP header + payload per FPDU we send */
	_Atomic uint32_t ird, ord;
	_Atomic uint64_t since_ns; /* CLOCK_MONOTONIC when established */
	struct uiw_stat_counters c;
	uint8_t pad[64];
};

/* The process (the device). */
struct uiw_stat_hdr {
	uint64_t magic; /* UIW_STAT_MAGIC, written last at creation */
	uint32_t version, hdr_size, slot_size, nslots;
	int32_t pid;
	uint32_t keep;	      /* 1: UIWARP_STATS_KEEP, left after exit on purpose */
	uint64_t start_time;  /* the process's start time (/proc/PID/stat field 22) */
	char comm[16];	      /* /proc/self/comm */
	char dev[32];	      /* UIWARP_DEV_NAME or "uiw0" */
	_Atomic uint64_t gen; /* odd while a QP's counters move into closed */
	_Atomic uint64_t qps_created, qps_destroyed;
	_Atomic uint64_t qps_untracked;		    /* QPs created when every slot was taken */
	_Atomic uint64_t conn_active, conn_passive; /* connections established */
	_Atomic uint64_t conn_failed;		    /* connects / accepts that failed */
	_Atomic uint64_t mpa_rejects_sent, mpa_rejects_recv;
	_Atomic uint64_t term_sent_by[UIW_STAT_TERM_LAYERS][UIW_STAT_TERM_ETYPES];
	_Atomic uint64_t term_recv_by[UIW_STAT_TERM_LAYERS][UIW_STAT_TERM_ETYPES];
	struct uiw_stat_counters closed; /* connections no slot shows any more */
	uint8_t pad[64];
};

/* Byte size of a segment. */
#define UIW_STAT_SIZE (sizeof(struct uiw_stat_hdr) + UIW_STAT_SLOTS * sizeof(struct uiw_stat_qp))

static inline struct uiw_stat_qp *uiw_stat_slot(struct uiw_stat_hdr *h, unsigned i)
{
	return (struct uiw_stat_qp *)((char *)h + h->hdr_size + (uint64_t)i * h->slot_size);
}

#endif
