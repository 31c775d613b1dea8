/* Live counters: the process's shared-memory segment (stat/stat_shm.h) and
 * the QPs' slots in it. docs/design.md, "Counters".
 *
 * The segment is made with the process's first QP (or first connection
 * event), not in a constructor (qperf's server forks per request; a fork
 * before that makes nothing). It is a file in /dev/shm, mode 0600, named
 * after the PID, removed at exit (kept with UIWARP_STATS_KEEP=1, for
 * uiwarp-stat to read a short run's final counts). A forked child keeps its parent's slots
 * as a private copy (its old QPs are unusable anyway) and makes its own
 * segment for its own QPs.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdmap/stat.h"

/* Used before the segment exists and when it cannot be made: nobody
 * reads it. */
static struct uiw_stat_hdr priv_hdr;

static struct {
	pthread_mutex_t lock;
	struct uiw_stat_hdr *hdr; /* the segment, or &priv_hdr */
	bool tried;		  /* a segment was tried in this process */
	int fd;
	pid_t pid; /* who made it (and removes it at exit) */
	bool keep; /* UIWARP_STATS_KEEP=1: left for uiwarp-stat after exit */
	char name[32];
	unsigned char used[UIW_STAT_SLOTS];
	unsigned next; /* where the search for a free slot starts */
} seg = {.lock = PTHREAD_MUTEX_INITIALIZER, .hdr = &priv_hdr, .fd = -1};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void seg_remove_at_exit(void)
{
	if (seg.pid == getpid() && seg.name[0] && !seg.keep)
		shm_unlink(seg.name);
}

/* In a forked child: the parent's segment becomes a private copy (the
 * slots of QPs inherited from the parent stay valid memory), and the
 * child makes its own segment when it needs one. */
static void seg_atfork_child(void)
{
	pthread_mutex_init(&seg.lock, NULL);
	if (seg.hdr != &priv_hdr && seg.fd >= 0)
		(void)mmap(seg.hdr, UIW_STAT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
			   seg.fd, 0);
	if (seg.fd >= 0)
		close(seg.fd);
	seg.fd = -1;
	seg.hdr = &priv_hdr;
	seg.tried = false;
	seg.name[0] = 0;
	memset(seg.used, 0, sizeof(seg.used));
	seg.next = 0;
}

static void seg_register_atfork(void)
{
	pthread_atfork(NULL, NULL, seg_atfork_child);
	atexit(seg_remove_at_exit);
}

/* Field 22 of /proc/self/stat: the start time in clock ticks since boot. */
static uint64_t proc_start_time(void)
{
	char buf[1024];
	FILE *f = fopen("/proc/self/stat", "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* comm may hold spaces */
	unsigned long long v = 0;
	if (p && sscanf(p + 2,
			"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
			"%*d %*d %llu",
			&v) != 1)
		v = 0;
	return v;
}

/* Removes the segments of processes that are gone without removing
 * theirs (killed; a forked child that left with _exit), unless they were
 * kept on purpose (UIWARP_STATS_KEEP=1). A PID that runs again is left
 * alone. Only our own files can be removed (/dev/shm is sticky). */
static void seg_sweep(void)
{
	DIR *d = opendir(UIW_STAT_DIR);
	if (!d)
		return;
	struct dirent *e;
	size_t plen = strlen(UIW_STAT_PREFIX) - 1;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, &UIW_STAT_PREFIX[1], plen))
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char name[64];
		snprintf(name, sizeof(name), UIW_STAT_PREFIX "%ld", pid);
		int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
		if (fd < 0)
			continue;
		struct uiw_stat_hdr h;
		bool keep = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
			    h.magic == UIW_STAT_MAGIC && h.keep;
		close(fd);
		if (!keep && shm_unlink(name) == 0)
			uiw_log(UIW_LOG_DEBUG, NULL, "stat: removed %s%s (PID %ld is gone)",
				UIW_STAT_DIR, name, pid);
	}
	closedir(d);
}

/* Makes the segment (seg.lock held). On any failure the process goes on
 * with priv_hdr. */
static void seg_create_locked(void)
{
	seg.tried = true;
	const char *off = getenv("UIWARP_STATS");
	if (off && !strcmp(off, "0"))
		return;
	pthread_once(&atfork_once, seg_register_atfork);
	snprintf(seg.name, sizeof(seg.name), UIW_STAT_PREFIX "%ld", (long)getpid());
	int fd = shm_open(seg.name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* left by an earlier process with this PID that did not exit */
		shm_unlink(seg.name);
		fd = shm_open(seg.name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, (off_t)UIW_STAT_SIZE) < 0)
		goto fail_unlink;
	void *m = mmap(NULL, UIW_STAT_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto fail_unlink;
	struct uiw_stat_hdr *h = m;
	h->version = UIW_STAT_VERSION;
	h->hdr_size = sizeof(struct uiw_stat_hdr);
	h->slot_size = sizeof(struct uiw_stat_qp);
	h->nslots = UIW_STAT_SLOTS;
	h->pid = (int32_t)getpid();
	h->start_time = proc_start_time();
	FILE *f = fopen("/proc/self/comm", "re");
	if (f) {
		if (fgets(h->comm, sizeof(h->comm), f))
			h->comm[strcspn(h->comm, "\n")] = 0;
		fclose(f);
	}
	const char *dev = getenv("UIWARP_DEV_NAME");
	snprintf(h->dev, sizeof(h->dev), "%s", dev && *dev ? dev : "uiw0");
	/* what happened before the segment existed */
	atomic_store(&h->conn_failed, atomic_load(&priv_hdr.conn_failed));
	atomic_store(&h->mpa_rejects_sent, atomic_load(&priv_hdr.mpa_rejects_sent));
	atomic_store(&h->mpa_rejects_recv, atomic_load(&priv_hdr.mpa_rejects_recv));
	const char *keep = getenv("UIWARP_STATS_KEEP");
	seg.keep = keep && !strcmp(keep, "1");
	h->keep = seg.keep;
	atomic_thread_fence(memory_order_release);
	h->magic = UIW_STAT_MAGIC;
	seg.fd = fd;
	seg.pid = getpid();
	seg.hdr = h;
	uiw_log(UIW_LOG_DEBUG, NULL, "stat: counters in %s%s", UIW_STAT_DIR, seg.name);
	seg_sweep();
	return;
fail_unlink:
	shm_unlink(seg.name);
fail:
	uiw_log(UIW_LOG_WARN, NULL, "stat: no counter segment %s: %s", seg.name, strerror(errno));
	if (fd >= 0)
		close(fd);
	seg.name[0] = 0;
}

static struct uiw_stat_hdr *seg_hdr(void)
{
	pthread_mutex_lock(&seg.lock);
	if (!seg.tried)
		seg_create_locked();
	struct uiw_stat_hdr *h = seg.hdr;
	pthread_mutex_unlock(&seg.lock);
	return h;
}

static void counters_zero(struct uiw_stat_counters *c)
{
	_Atomic uint64_t *v = (_Atomic uint64_t *)c;
	for (size_t i = 0; i < sizeof(*c) / sizeof(*v); i++)
		atomic_store_explicit(&v[i], 0, memory_order_relaxed);
}

/* Moves a slot's counters into the device's closed totals (under gen, so a
 * reader sums each connection once). seg.lock held. */
static void fold_locked(struct uiw_stat_hdr *h, struct uiw_stat_counters *c)
{
	_Atomic uint64_t *from = (_Atomic uint64_t *)c, *to = (_Atomic uint64_t *)&h->closed;
	atomic_fetch_add_explicit(&h->gen, 1, memory_order_acq_rel);
	for (size_t i = 0; i < sizeof(*c) / sizeof(*from); i++) {
		uint64_t v = atomic_load_explicit(&from[i], memory_order_relaxed);
		atomic_fetch_add_explicit(&to[i], v, memory_order_relaxed);
		atomic_store_explicit(&from[i], 0, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&h->gen, 1, memory_order_acq_rel);
}

static void who_set(struct uiw_qp *qp, const char *tuple)
{
	snprintf(qp->stat->who, sizeof(qp->stat->who), "qp=%u%s%s", qp->qpn, tuple ? " " : "",
		 tuple ? tuple : "");
}

int uiw_stat_qp_open(struct uiw_qp *qp)
{
	struct uiw_qp_stat *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->s = &st->priv;
	st->idx = -1;
	qp->stat = st;
	who_set(qp, NULL);
	struct uiw_stat_hdr *h = seg_hdr();
	atomic_fetch_add_explicit(&h->qps_created, 1, memory_order_relaxed);
	pthread_mutex_lock(&seg.lock);
	if (seg.hdr == h && h != &priv_hdr) {
		for (unsigned k = 0; k < UIW_STAT_SLOTS; k++) {
			unsigned i = (seg.next + k) % UIW_STAT_SLOTS;
			if (!seg.used[i]) {
				seg.used[i] = 1;
				seg.next = i + 1;
				st->idx = (int)i;
				st->seg = h;
				st->s = uiw_stat_slot(h, i);
				break;
			}
		}
		if (st->idx < 0)
			atomic_fetch_add_explicit(&h->qps_untracked, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&seg.lock);
	struct uiw_stat_qp *s = st->s;
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel); /* odd */
	counters_zero(&s->c);
	UIW_STAT_SET(s->qpn, qp->qpn);
	UIW_STAT_SET(s->conn, UIW_STAT_IDLE);
	UIW_STAT_SET(s->close_reason, 0);
	UIW_STAT_SET(s->term, 0);
	UIW_STAT_SET(s->family, 0);
	UIW_STAT_SET(s->in_use, 1);
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel); /* even */
	return 0;
}

void uiw_stat_qp_close(struct uiw_qp *qp)
{
	struct uiw_qp_stat *st = qp->stat;
	if (!st)
		return;
	uiw_stat_tx(qp);
	uiw_stat_rx(qp);
	pthread_mutex_lock(&seg.lock);
	struct uiw_stat_hdr *h = seg.hdr;
	atomic_fetch_add_explicit(&h->qps_destroyed, 1, memory_order_relaxed);
	if (st->idx >= 0 && st->seg == h) {
		struct uiw_stat_qp *s = st->s;
		atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel);
		fold_locked(h, &s->c);
		UIW_STAT_SET(s->in_use, 0);
		atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel);
		seg.used[st->idx] = 0;
	}
	pthread_mutex_unlock(&seg.lock);
	qp->stat = NULL;
	free(st);
}

void uiw_stat_qp_connected(struct uiw_qp *qp, bool initiator)
{
	struct uiw_qp_stat *st = qp->stat;
	struct uiw_stat_qp *s = st->s;
	struct uiw_stat_hdr *h = seg_hdr();
	atomic_fetch_add_explicit(initiator ? &h->conn_active : &h->conn_passive, 1,
				  memory_order_relaxed);
	int fd = uiw_stream_fd(qp->stream);
	struct sockaddr_storage l, p;
	socklen_t ll = sizeof(l), pl = sizeof(p);
	if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0)
		l.ss_family = AF_UNSPEC;
	if (getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
		p.ss_family = AF_UNSPEC;
	char t[96];
	who_set(qp, uiw_log_tuple(fd, t, sizeof(t)));

	pthread_mutex_lock(&seg.lock);
	bool shared = st->idx >= 0 && st->seg == seg.hdr;
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel); /* odd */
	if (shared && atomic_load_explicit(&s->conn, memory_order_relaxed) != UIW_STAT_IDLE)
		fold_locked(seg.hdr, &s->c); /* an earlier connection of this QP */
	else
		counters_zero(&s->c);
	pthread_mutex_unlock(&seg.lock);
	memset(s->laddr, 0, sizeof(s->laddr));
	memset(s->raddr, 0, sizeof(s->raddr));
	uint32_t fam = 0, ports = 0;
	if (l.ss_family == AF_INET && p.ss_family == AF_INET) {
		const struct sockaddr_in *a = (void *)&l, *b = (void *)&p;
		memcpy(s->laddr, &a->sin_addr, 4);
		memcpy(s->raddr, &b->sin_addr, 4);
		ports = (uint32_t)ntohs(a->sin_port) << 16 | ntohs(b->sin_port);
		fam = AF_INET;
	} else if (l.ss_family == AF_INET6 && p.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (void *)&l, *b = (void *)&p;
		memcpy(s->laddr, &a->sin6_addr, 16);
		memcpy(s->raddr, &b->sin6_addr, 16);
		ports = (uint32_t)ntohs(a->sin6_port) << 16 | ntohs(b->sin6_port);
		fam = AF_INET6;
	}
	const struct mpa_negotiated *n = &qp->neg;
	uint32_t mode = (uint32_t)n->initiator | (uint32_t)n->crc << 1 |
			(uint32_t)n->markers_tx << 2 | (uint32_t)n->markers_rx << 3 |
			(uint32_t)n->p2p << 4 | (uint32_t)n->large_tx << 5 |
			(uint32_t)n->rfc7306 << 6 | (uint32_t)n->rev << 8 | (uint32_t)n->rtr << 16;
	UIW_STAT_SET(s->family, fam);
	UIW_STAT_SET(s->ports, ports);
	UIW_STAT_SET(s->mode, mode);
	UIW_STAT_SET(s->mulpdu, qp->mpa.mulpdu);
	UIW_STAT_SET(s->ird, qp->ird);
	UIW_STAT_SET(s->ord, qp->ord);
	UIW_STAT_SET(s->since_ns, uiw_now_ns());
	UIW_STAT_SET(s->close_reason, 0);
	UIW_STAT_SET(s->term, 0);
	UIW_STAT_SET(s->conn, UIW_STAT_OPEN);
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_acq_rel); /* even */
	/* indexed by the MPA_RTR_* bit (SEND 1, WRITE 2, READ 4) */
	static const char *const rtr[] = {"none", "send", "write", "?", "read"};
	uiw_qp_log(qp, UIW_LOG_INFO,
		   "established (%s): MPA rev %u, CRC %s, markers %s/%s, RTR %s, IRD %u ORD %u, "
		   "MULPDU %u%s%s",
		   initiator ? "active" : "passive", n->rev, n->crc ? "on" : "off",
		   n->markers_tx ? "tx" : "-", n->markers_rx ? "rx" : "-",
		   n->rtr < 5 ? rtr[n->rtr] : "?", qp->ird, qp->ord, qp->mpa.mulpdu,
		   n->large_tx ? ", large FPDUs" : "", n->rfc7306 ? ", RFC 7306" : "");
}

const char *uiw_term_layer_name(unsigned layer)
{
	static const char *const names[] = {"RDMAP", "DDP", "LLP"};
	return layer < 3 ? names[layer] : "?";
}

const char *uiw_close_reason_name(enum uiw_close_reason why)
{
	switch (why) {
	case UIW_CLOSE_NONE:
		return "none";
	case UIW_CLOSE_GRACEFUL:
		return "graceful";
	case UIW_CLOSE_TERMINATE:
		return "terminate";
	case UIW_CLOSE_PEER_RESET:
		return "peer reset";
	case UIW_CLOSE_PEER_TRUNCATED:
		return "peer FIN inside an FPDU";
	case UIW_CLOSE_LOCAL_ABORT:
		return "local abort";
	case UIW_CLOSE_LLP_ERROR:
		return "TCP error";
	case UIW_CLOSE_PEER_TIMEOUT:
		return "peer timeout";
	}
	return "?";
}

void uiw_stat_qp_term(struct uiw_qp *qp, bool sent, uint8_t layer, uint8_t etype, uint8_t ecode)
{
	struct uiw_stat_qp *s = qp->stat->s;
	struct uiw_stat_hdr *h = seg_hdr();
	/* one writer: a QP's Terminates are counted under qp->lock or by the
	 * receive side's holder, once each way */
	if (sent)
		UIW_STAT_ADD(s->c.term_sent, 1);
	else
		UIW_STAT_ADD(s->c.term_recv, 1);
	if (sent && layer == RDMAP_LAYER_LLP && ecode == MPA_TERM_CRC)
		UIW_STAT_ADD(s->c.crc_errors, 1);
	UIW_STAT_SET(s->term, 1u << 31 | (uint32_t)sent << 30 | (uint32_t)(layer & 0xf) << 16 |
				  (uint32_t)(etype & 0xf) << 8 | ecode);
	if (layer < UIW_STAT_TERM_LAYERS)
		atomic_fetch_add_explicit(sent ? &h->term_sent_by[layer][etype & 0xf]
					       : &h->term_recv_by[layer][etype & 0xf],
					  1, memory_order_relaxed);
	uiw_qp_log(qp, UIW_LOG_WARN, "Terminate %s: layer %s, error type 0x%x, code 0x%02x%s",
		   sent ? "sent" : "received", uiw_term_layer_name(layer), etype, ecode,
		   layer == RDMAP_LAYER_LLP && ecode == MPA_TERM_CRC ? " (CRC error)" : "");
}

void uiw_stat_qp_ended(struct uiw_qp *qp, enum uiw_close_reason why)
{
	struct uiw_stat_qp *s = qp->stat->s;
	UIW_STAT_SET(s->close_reason, (uint32_t)why);
	UIW_STAT_SET(s->conn, UIW_STAT_CLOSED);
	/* the application's own close (a graceful one, or its abort: ERR
	 * by ibv_modify_qp, as Ceph closes every connection) is no warning;
	 * a send WR that failed locally is logged as fatal on its own */
	uiw_qp_log(qp,
		   why == UIW_CLOSE_GRACEFUL || why == UIW_CLOSE_NONE ||
			   why == UIW_CLOSE_LOCAL_ABORT
		       ? UIW_LOG_INFO
		       : UIW_LOG_WARN,
		   "disconnected (%s): sent %llu FPDUs / %llu bytes, received %llu FPDUs / %llu "
		   "bytes",
		   uiw_close_reason_name(why), (unsigned long long)atomic_load(&s->c.tx_fpdus),
		   (unsigned long long)atomic_load(&s->c.tx_bytes),
		   (unsigned long long)atomic_load(&s->c.rx_fpdus),
		   (unsigned long long)atomic_load(&s->c.rx_bytes));
}

void uiw_stat_event(enum uiw_stat_event ev)
{
	struct uiw_stat_hdr *h = seg_hdr();
	_Atomic uint64_t *c = ev == UIW_STAT_EV_CONN_FAILED   ? &h->conn_failed
			      : ev == UIW_STAT_EV_REJECT_SENT ? &h->mpa_rejects_sent
							      : &h->mpa_rejects_recv;
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}
