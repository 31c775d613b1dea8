/* uiwarp-stat: the live counters of processes running on uiwarp, read from
 * another process (stat/stat_shm.h), and the TCP socket under each QP
 * (TCP_INFO through NETLINK_SOCK_DIAG, as `ss -ti` reads it).
 *
 *   uiwarp-stat [-j] [-w [-i SEC] [-n COUNT]] [--no-tcp] [PID...]
 *   uiwarp-stat --clean
 *
 * Without a PID: one line per process that has a segment. With PIDs: each
 * one's device counters, then every QP's. -w repeats every SEC (default
 * 1) with rates, until COUNT samples or until every PID has exited; the
 * last sample of a process that exited is its final count (marked
 * "exited"). -j prints one JSON object per process and sample, one line
 * each. Exit status: 0, 1 if a PID has no readable segment, 2 usage.
 * Man page: uiwarp-stat(1) (docs/man/uiwarp-stat.1.md).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libmnl/libmnl.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stat/stat_shm.h"

#define MAX_PIDS 64

/* The counters in the order they are printed; offsets into
 * struct uiw_stat_counters. */
static const struct {
	const char *name;
	size_t off;
	bool rate; /* watch mode prints a per-second rate */
} ctr_names[] = {
#define C(f, r)                                                                                    \
	{                                                                                          \
#f, offsetof(struct uiw_stat_counters, f), r                                       \
	}
    C(tx_fpdus, true),	 C(tx_bytes, true),    C(tx_syscalls, true),  C(rx_fpdus, true),
    C(rx_bytes, true),	 C(rx_syscalls, true), C(sq_wrs, true),	      C(sq_bytes, true),
    C(rq_wrs, true),	 C(rq_bytes, true),    C(flushed_wrs, false), C(crc_errors, false),
    C(term_sent, false), C(term_recv, false),
#undef C
};
#define NCTR (sizeof(ctr_names) / sizeof(ctr_names[0]))

struct qp_snap {
	uint32_t qpn, conn, close_reason, term, family, ports, mode, mulpdu, ird, ord;
	uint8_t laddr[16], raddr[16];
	uint64_t since_ns;
	uint64_t c[NCTR];
	bool tcp_ok;
	struct tcp_info ti;
	size_t ti_len;
};

struct snap {
	bool ok;
	bool exited;
	uint64_t t_ns; /* CLOCK_MONOTONIC when read */
	int pid;
	char comm[17], dev[33];
	uint64_t qps_created, qps_destroyed, qps_untracked, conn_active, conn_passive, conn_failed,
	    rej_sent, rej_recv;
	uint64_t term_sent_by[UIW_STAT_TERM_LAYERS][UIW_STAT_TERM_ETYPES];
	uint64_t term_recv_by[UIW_STAT_TERM_LAYERS][UIW_STAT_TERM_ETYPES];
	uint64_t total[NCTR]; /* closed + every live QP */
	int nqp;
	struct qp_snap *qp; /* UIW_STAT_SLOTS entries */
};

struct target {
	int pid;
	const struct uiw_stat_hdr *h; /* mapped read-only */
	uint64_t start_time;
	bool exited;
	struct snap prev, cur;
	struct mnl_socket *nl; /* NETLINK_SOCK_DIAG in the process's network namespace */
};

static bool opt_json, opt_tcp = true;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t ld64(const _Atomic uint64_t *p)
{
	return atomic_load_explicit(p, memory_order_relaxed);
}
static uint32_t ld32(const _Atomic uint32_t *p)
{
	return atomic_load_explicit(p, memory_order_relaxed);
}

/* Field 22 of /proc/PID/stat; 0 if the process is gone. */
static uint64_t proc_start_time(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long long v = 0;
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu",
			 &v) != 1)
		return 0;
	return v;
}

/* Maps /dev/shm/uiwarp-PID read-only. NULL (and a reason on stderr when
 * loud) if there is none or it is not one of ours. */
static const struct uiw_stat_hdr *seg_map(int pid, bool loud)
{
	char path[64];
	snprintf(path, sizeof(path), UIW_STAT_DIR UIW_STAT_PREFIX "%d", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (loud)
			fprintf(stderr,
				"uiwarp-stat: %s: %s (is %d running on uiwarp, with a QP, "
				"and UIWARP_STATS not 0?)\n",
				path, strerror(errno), pid);
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(struct uiw_stat_hdr)) {
		close(fd);
		if (loud)
			fprintf(stderr, "uiwarp-stat: %s: too short\n", path);
		return NULL;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	const struct uiw_stat_hdr *h = m;
	/* a segment being made: its magic is written last (bounded wait) */
	for (int i = 0; i < 200 && !atomic_load((_Atomic uint64_t *)&h->magic); i++)
		usleep(5000);
	if (h->magic != UIW_STAT_MAGIC || h->version != UIW_STAT_VERSION ||
	    h->hdr_size != sizeof(struct uiw_stat_hdr) ||
	    h->slot_size != sizeof(struct uiw_stat_qp) ||
	    (size_t)st.st_size < h->hdr_size + (size_t)h->nslots * h->slot_size) {
		if (loud)
			fprintf(stderr,
				"uiwarp-stat: %s: not a uiwarp counter segment of this "
				"version (%u)\n",
				path, UIW_STAT_VERSION);
		munmap(m, (size_t)st.st_size);
		return NULL;
	}
	return h;
}

static void counters_read(const struct uiw_stat_counters *c, uint64_t *out)
{
	for (size_t i = 0; i < NCTR; i++)
		out[i] = ld64((const _Atomic uint64_t *)((const char *)c + ctr_names[i].off));
}

/* A consistent snapshot of segment h (see stat/stat_shm.h). */
static bool snap_take(const struct uiw_stat_hdr *h, struct snap *s)
{
	struct uiw_stat_hdr *hh = (struct uiw_stat_hdr *)h;
	for (int attempt = 0; attempt < 1000; attempt++) {
		uint64_t g1 = atomic_load_explicit(&hh->gen, memory_order_acquire);
		if (g1 & 1) {
			usleep(100);
			continue;
		}
		s->nqp = 0;
		counters_read(&hh->closed, s->total);
		for (unsigned i = 0; i < h->nslots; i++) {
			struct uiw_stat_qp *q = uiw_stat_slot(hh, i);
			uint32_t q1 = atomic_load_explicit(&q->seq, memory_order_acquire);
			if ((q1 & 1) || !ld32(&q->in_use))
				continue;
			struct qp_snap *o = &s->qp[s->nqp];
			memset(o, 0, sizeof(*o));
			o->qpn = ld32(&q->qpn);
			o->conn = ld32(&q->conn);
			o->close_reason = ld32(&q->close_reason);
			o->term = ld32(&q->term);
			o->family = ld32(&q->family);
			o->ports = ld32(&q->ports);
			o->mode = ld32(&q->mode);
			o->mulpdu = ld32(&q->mulpdu);
			o->ird = ld32(&q->ird);
			o->ord = ld32(&q->ord);
			o->since_ns = ld64(&q->since_ns);
			memcpy(o->laddr, q->laddr, 16);
			memcpy(o->raddr, q->raddr, 16);
			counters_read(&q->c, o->c);
			if (atomic_load_explicit(&q->seq, memory_order_acquire) != q1)
				continue; /* changed under us: it is in closed or the next try */
			for (size_t k = 0; k < NCTR; k++)
				s->total[k] += o->c[k];
			s->nqp++;
		}
		s->qps_created = ld64(&hh->qps_created);
		s->qps_destroyed = ld64(&hh->qps_destroyed);
		s->qps_untracked = ld64(&hh->qps_untracked);
		s->conn_active = ld64(&hh->conn_active);
		s->conn_passive = ld64(&hh->conn_passive);
		s->conn_failed = ld64(&hh->conn_failed);
		s->rej_sent = ld64(&hh->mpa_rejects_sent);
		s->rej_recv = ld64(&hh->mpa_rejects_recv);
		for (int l = 0; l < UIW_STAT_TERM_LAYERS; l++)
			for (int e = 0; e < UIW_STAT_TERM_ETYPES; e++) {
				s->term_sent_by[l][e] = ld64(&hh->term_sent_by[l][e]);
				s->term_recv_by[l][e] = ld64(&hh->term_recv_by[l][e]);
			}
		if (atomic_load_explicit(&hh->gen, memory_order_acquire) != g1)
			continue;
		s->pid = h->pid;
		snprintf(s->comm, sizeof(s->comm), "%.16s", h->comm);
		snprintf(s->dev, sizeof(s->dev), "%.32s", h->dev);
		s->t_ns = now_ns();
		s->ok = true;
		return true;
	}
	return false;
}

/* ------------------------------------------------------------- TCP_INFO */

/* A NETLINK_SOCK_DIAG socket in pid's network namespace (entered for the
 * socket() call only, when it differs from ours and we may: root). */
static struct mnl_socket *diag_open(int pid)
{
	char path[64];
	struct stat a, b;
	int self = -1;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
	bool other = stat("/proc/self/ns/net", &a) == 0 && stat(path, &b) == 0 &&
		     (a.st_ino != b.st_ino || a.st_dev != b.st_dev);
	if (other) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || self < 0 || setns(fd, CLONE_NEWNET) < 0) {
			if (fd >= 0)
				close(fd);
			if (self >= 0)
				close(self);
			return NULL; /* not root: TCP_INFO is shown from the same namespace only */
		}
		close(fd);
	}
	struct mnl_socket *nl = mnl_socket_open(NETLINK_SOCK_DIAG);
	if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		mnl_socket_close(nl);
		nl = NULL;
	}
	if (self >= 0) {
		if (setns(self, CLONE_NEWNET) < 0) {
			perror("uiwarp-stat: setns back");
			exit(1);
		}
		close(self);
	}
	return nl;
}

struct diag_cb {
	struct qp_snap *q;
};

static int diag_attr_cb(const struct nlattr *attr, void *data)
{
	struct qp_snap *q = data;
	if (mnl_attr_get_type(attr) == INET_DIAG_INFO) {
		size_t n = mnl_attr_get_payload_len(attr);
		if (n > sizeof(q->ti))
			n = sizeof(q->ti);
		memset(&q->ti, 0, sizeof(q->ti));
		memcpy(&q->ti, mnl_attr_get_payload(attr), n);
		q->ti_len = n;
		q->tcp_ok = true;
	}
	return MNL_CB_OK;
}

static int diag_msg_cb(const struct nlmsghdr *nlh, void *data)
{
	mnl_attr_parse(nlh, sizeof(struct inet_diag_msg), diag_attr_cb, data);
	return MNL_CB_OK;
}

/* Asks the kernel for the TCP socket of q's 4-tuple (an exact lookup). */
static void diag_query(struct mnl_socket *nl, struct qp_snap *q)
{
	if (!nl || !q->family || q->conn != UIW_STAT_OPEN)
		return;
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	nlh->nlmsg_seq = (unsigned)time(NULL);
	struct inet_diag_req_v2 *r = mnl_nlmsg_put_extra_header(nlh, sizeof(*r));
	r->sdiag_family = (uint8_t)q->family;
	r->sdiag_protocol = IPPROTO_TCP;
	r->idiag_ext = 1 << (INET_DIAG_INFO - 1);
	r->idiag_states = ~0u;
	r->id.idiag_sport = htons((uint16_t)(q->ports >> 16));
	r->id.idiag_dport = htons((uint16_t)q->ports);
	memcpy(r->id.idiag_src, q->laddr, 16);
	memcpy(r->id.idiag_dst, q->raddr, 16);
	r->id.idiag_cookie[0] = r->id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return;
	int n = (int)mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (n > 0)
		mnl_cb_run(buf, (size_t)n, 0, 0, diag_msg_cb, q);
}

/* ------------------------------------------------------------- printing */

static void addr_str(uint32_t family, const uint8_t *a, uint16_t port, char *out, size_t n)
{
	char s[INET6_ADDRSTRLEN] = "?";
	if (family == AF_INET || family == AF_INET6)
		inet_ntop((int)family, a, s, sizeof(s));
	snprintf(out, n, family == AF_INET6 ? "[%s]:%u" : "%s:%u", s, port);
}

static const char *conn_name(uint32_t c)
{
	return c == UIW_STAT_OPEN ? "open" : c == UIW_STAT_CLOSED ? "closed" : "idle";
}

static const char *close_name(uint32_t r)
{
	static const char *const n[] = {"",	      "graceful",	   "terminate",
					"peer_reset", "peer_fin_mid_fpdu", "local_abort",
					"tcp_error"};
	return r < sizeof(n) / sizeof(n[0]) ? n[r] : "?";
}

static const char *rtr_name(uint32_t r)
{
	return r == 1 ? "write" : r == 2 ? "read" : r == 4 ? "send" : "none";
}

static const char *layer_name(int l)
{
	return l == 0 ? "rdmap" : l == 1 ? "ddp" : "llp";
}

static double rate(const struct snap *cur, const struct snap *prev, size_t k, uint32_t qpn,
		   bool per_qp)
{
	if (!prev || !prev->ok || cur->t_ns <= prev->t_ns)
		return -1;
	uint64_t a = 0, b = 0;
	if (!per_qp) {
		a = cur->total[k];
		b = prev->total[k];
	} else {
		bool found = false;
		for (int i = 0; i < cur->nqp; i++)
			if (cur->qp[i].qpn == qpn)
				a = cur->qp[i].c[k];
		for (int i = 0; i < prev->nqp; i++)
			if (prev->qp[i].qpn == qpn) {
				b = prev->qp[i].c[k];
				found = true;
			}
		if (!found)
			return -1;
	}
	return a < b ? 0 : (double)(a - b) * 1e9 / (double)(cur->t_ns - prev->t_ns);
}

static void print_ctrs_text(const uint64_t *c, const struct snap *cur, const struct snap *prev,
			    uint32_t qpn, bool per_qp, const char *indent)
{
	for (size_t k = 0; k < NCTR; k++) {
		double r = ctr_names[k].rate ? rate(cur, prev, k, qpn, per_qp) : -1;
		if (r >= 0)
			printf("%s%s: %llu (%.0f/s)\n", indent, ctr_names[k].name,
			       (unsigned long long)c[k], r);
		else
			printf("%s%s: %llu\n", indent, ctr_names[k].name, (unsigned long long)c[k]);
	}
}

static void print_tcp_text(const struct qp_snap *q)
{
	if (!q->tcp_ok)
		return;
	const struct tcp_info *t = &q->ti;
	printf("    tcp_state: %u\n    tcp_rtt_us: %u\n    tcp_rttvar_us: %u\n"
	       "    tcp_retrans: %u\n    tcp_total_retrans: %u\n    tcp_lost: %u\n"
	       "    tcp_snd_cwnd: %u\n    tcp_snd_mss: %u\n    tcp_rcv_mss: %u\n"
	       "    tcp_unacked: %u\n    tcp_bytes_acked: %llu\n    tcp_bytes_received: %llu\n"
	       "    tcp_delivery_rate: %llu\n",
	       t->tcpi_state, t->tcpi_rtt, t->tcpi_rttvar, t->tcpi_retrans, t->tcpi_total_retrans,
	       t->tcpi_lost, t->tcpi_snd_cwnd, t->tcpi_snd_mss, t->tcpi_rcv_mss, t->tcpi_unacked,
	       (unsigned long long)t->tcpi_bytes_acked, (unsigned long long)t->tcpi_bytes_received,
	       (unsigned long long)t->tcpi_delivery_rate);
}

static void print_text(const struct target *tg)
{
	const struct snap *s = &tg->cur, *p = tg->prev.ok ? &tg->prev : NULL;
	printf("pid %d (%s) device %s%s\n", s->pid, s->comm, s->dev,
	       tg->exited ? " (exited: final counts)" : "");
	printf("  qps: %d live, %llu created, %llu destroyed, %llu untracked\n", s->nqp,
	       (unsigned long long)s->qps_created, (unsigned long long)s->qps_destroyed,
	       (unsigned long long)s->qps_untracked);
	printf("  connections: %llu active, %llu passive, %llu failed; MPA rejects: %llu sent, "
	       "%llu received\n",
	       (unsigned long long)s->conn_active, (unsigned long long)s->conn_passive,
	       (unsigned long long)s->conn_failed, (unsigned long long)s->rej_sent,
	       (unsigned long long)s->rej_recv);
	for (int l = 0; l < UIW_STAT_TERM_LAYERS; l++)
		for (int e = 0; e < UIW_STAT_TERM_ETYPES; e++) {
			if (s->term_sent_by[l][e])
				printf("  terminates_sent[%s/0x%x]: %llu\n", layer_name(l), e,
				       (unsigned long long)s->term_sent_by[l][e]);
			if (s->term_recv_by[l][e])
				printf("  terminates_recv[%s/0x%x]: %llu\n", layer_name(l), e,
				       (unsigned long long)s->term_recv_by[l][e]);
		}
	printf("  device totals:\n");
	print_ctrs_text(s->total, s, p, 0, false, "    ");
	for (int i = 0; i < s->nqp; i++) {
		const struct qp_snap *q = &s->qp[i];
		char l[64], r[64];
		addr_str(q->family, q->laddr, (uint16_t)(q->ports >> 16), l, sizeof(l));
		addr_str(q->family, q->raddr, (uint16_t)q->ports, r, sizeof(r));
		printf("  qp %u %s", q->qpn, conn_name(q->conn));
		if (q->family)
			printf(" %s -> %s %s", l, r, q->mode & 1 ? "active" : "passive");
		if (q->conn == UIW_STAT_CLOSED)
			printf(" (%s)", close_name(q->close_reason));
		printf("\n");
		if (q->family)
			printf(
			    "    mpa: rev %u, crc %s, markers %s/%s, p2p %s, rtr %s, ird %u, ord "
			    "%u, mulpdu %u, large_fpdu %s, rfc7306 %s\n",
			    (q->mode >> 8) & 0xff, q->mode & 2 ? "on" : "off",
			    q->mode & 4 ? "tx" : "-", q->mode & 8 ? "rx" : "-",
			    q->mode & 16 ? "on" : "off", rtr_name((q->mode >> 16) & 0xff), q->ird,
			    q->ord, q->mulpdu, q->mode & 32 ? "on" : "off",
			    q->mode & 64 ? "on" : "off");
		if (q->term >> 31)
			printf("    terminate: %s layer %s etype 0x%x ecode 0x%02x\n",
			       q->term & (1u << 30) ? "sent" : "received",
			       layer_name((q->term >> 16) & 0xf), (q->term >> 8) & 0xf,
			       q->term & 0xff);
		print_ctrs_text(q->c, s, p, q->qpn, true, "    ");
		print_tcp_text(q);
	}
	fflush(stdout);
}

static void json_ctrs(const uint64_t *c)
{
	for (size_t k = 0; k < NCTR; k++)
		printf("%s\"%s\":%llu", k ? "," : "", ctr_names[k].name, (unsigned long long)c[k]);
}

static void print_json(const struct target *tg)
{
	const struct snap *s = &tg->cur;
	printf("{\"pid\":%d,\"comm\":\"%s\",\"dev\":\"%s\",\"exited\":%s,\"t_ns\":%llu,", s->pid,
	       s->comm, s->dev, tg->exited ? "true" : "false", (unsigned long long)s->t_ns);
	printf("\"qps_live\":%d,\"qps_created\":%llu,\"qps_destroyed\":%llu,\"qps_untracked\":%llu,"
	       "\"conn_active\":%llu,\"conn_passive\":%llu,\"conn_failed\":%llu,"
	       "\"mpa_rejects_sent\":%llu,\"mpa_rejects_recv\":%llu,",
	       s->nqp, (unsigned long long)s->qps_created, (unsigned long long)s->qps_destroyed,
	       (unsigned long long)s->qps_untracked, (unsigned long long)s->conn_active,
	       (unsigned long long)s->conn_passive, (unsigned long long)s->conn_failed,
	       (unsigned long long)s->rej_sent, (unsigned long long)s->rej_recv);
	printf("\"terminates_sent\":{");
	bool first = true;
	for (int l = 0; l < UIW_STAT_TERM_LAYERS; l++)
		for (int e = 0; e < UIW_STAT_TERM_ETYPES; e++)
			if (s->term_sent_by[l][e]) {
				printf("%s\"%s/0x%x\":%llu", first ? "" : ",", layer_name(l), e,
				       (unsigned long long)s->term_sent_by[l][e]);
				first = false;
			}
	printf("},\"terminates_recv\":{");
	first = true;
	for (int l = 0; l < UIW_STAT_TERM_LAYERS; l++)
		for (int e = 0; e < UIW_STAT_TERM_ETYPES; e++)
			if (s->term_recv_by[l][e]) {
				printf("%s\"%s/0x%x\":%llu", first ? "" : ",", layer_name(l), e,
				       (unsigned long long)s->term_recv_by[l][e]);
				first = false;
			}
	printf("},\"total\":{");
	json_ctrs(s->total);
	printf("},\"qps\":[");
	for (int i = 0; i < s->nqp; i++) {
		const struct qp_snap *q = &s->qp[i];
		char l[64], r[64];
		addr_str(q->family, q->laddr, (uint16_t)(q->ports >> 16), l, sizeof(l));
		addr_str(q->family, q->raddr, (uint16_t)q->ports, r, sizeof(r));
		printf("%s{\"qpn\":%u,\"conn\":\"%s\",\"close_reason\":\"%s\",\"local\":\"%s\","
		       "\"peer\":\"%s\",\"initiator\":%s,\"mpa_rev\":%u,\"crc\":%s,\"mulpdu\":%u,"
		       "\"ird\":%u,\"ord\":%u,\"large_fpdu\":%s,",
		       i ? "," : "", q->qpn, conn_name(q->conn), close_name(q->close_reason),
		       q->family ? l : "", q->family ? r : "", q->mode & 1 ? "true" : "false",
		       (q->mode >> 8) & 0xff, q->mode & 2 ? "true" : "false", q->mulpdu, q->ird,
		       q->ord, q->mode & 32 ? "true" : "false");
		if (q->term >> 31)
			printf(
			    "\"terminate\":{\"sent\":%s,\"layer\":%u,\"etype\":%u,\"ecode\":%u},",
			    q->term & (1u << 30) ? "true" : "false", (q->term >> 16) & 0xf,
			    (q->term >> 8) & 0xf, q->term & 0xff);
		json_ctrs(q->c);
		if (q->tcp_ok)
			printf(
			    ",\"tcp\":{\"state\":%u,\"rtt_us\":%u,\"rttvar_us\":%u,\"retrans\":%u,"
			    "\"total_retrans\":%u,\"lost\":%u,\"snd_cwnd\":%u,\"snd_mss\":%u,"
			    "\"unacked\":%u,\"bytes_acked\":%llu,\"bytes_received\":%llu}",
			    q->ti.tcpi_state, q->ti.tcpi_rtt, q->ti.tcpi_rttvar, q->ti.tcpi_retrans,
			    q->ti.tcpi_total_retrans, q->ti.tcpi_lost, q->ti.tcpi_snd_cwnd,
			    q->ti.tcpi_snd_mss, q->ti.tcpi_unacked,
			    (unsigned long long)q->ti.tcpi_bytes_acked,
			    (unsigned long long)q->ti.tcpi_bytes_received);
		printf("}");
	}
	printf("]}\n");
	fflush(stdout);
}

/* ---------------------------------------------------------------- modes */

/* Each /dev/shm/uiwarp-PID: calls fn(pid, live). */
static int each_segment(void (*fn)(int pid, bool live, const struct uiw_stat_hdr *h))
{
	DIR *d = opendir(UIW_STAT_DIR);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	size_t plen = strlen(UIW_STAT_PREFIX) - 1;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, UIW_STAT_PREFIX + 1, plen))
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end || pid <= 0)
			continue;
		const struct uiw_stat_hdr *h = seg_map((int)pid, false);
		bool live = h && proc_start_time((int)pid) == h->start_time && h->start_time;
		fn((int)pid, live, h);
		if (h)
			munmap((void *)h, UIW_STAT_SIZE);
		n++;
	}
	closedir(d);
	return n;
}

static struct snap list_snap;

static void list_one(int pid, bool live, const struct uiw_stat_hdr *h)
{
	if (!h) {
		printf("%7d %-16s (unreadable)\n", pid, "?");
		return;
	}
	if (!snap_take(h, &list_snap))
		return;
	printf("%7d %-16s %-8s %5d %12llu %16llu %12llu %16llu%s\n", pid, list_snap.comm,
	       list_snap.dev, list_snap.nqp, (unsigned long long)list_snap.total[0],
	       (unsigned long long)list_snap.total[1], (unsigned long long)list_snap.total[3],
	       (unsigned long long)list_snap.total[4], live ? "" : "  (gone)");
}

static int clean_count;
static void clean_one(int pid, bool live, const struct uiw_stat_hdr *h)
{
	(void)h;
	if (live || (proc_start_time(pid) && !h))
		return;
	char name[64];
	snprintf(name, sizeof(name), UIW_STAT_PREFIX "%d", pid);
	if (shm_unlink(name) == 0) {
		printf("removed %s%s\n", UIW_STAT_DIR, name);
		clean_count++;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uiwarp-stat [-j] [-w] [-i SEC] [-n COUNT] [--no-tcp] [PID...]\n"
		"       uiwarp-stat --clean\n"
		"\n"
		"Live counters of processes running on uiwarp (UIWARP_STATS=1, the default):\n"
		"without PID one line per process; with PIDs each one's device counters and\n"
		"every QP's, with the TCP socket's TCP_INFO (rtt, retransmits) as ss -ti.\n"
		"  -w, --watch        repeat every SEC with rates, until COUNT samples or until\n"
		"                     every PID exited (its last sample is its final count)\n"
		"  -i, --interval SEC seconds between samples (default 1, fractions allowed)\n"
		"  -n, --count COUNT  samples to take with -w (default: until the PIDs exit)\n"
		"  -j, --json         one JSON object per process and sample, one a line\n"
		"      --no-tcp       do not ask the kernel for TCP_INFO\n"
		"      --clean        remove segments left by processes that are gone\n"
		"  -h, --help         this text\n"
		"Counters (per QP and device totals): tx_/rx_fpdus, tx_/rx_bytes (stream\n"
		"octets), tx_/rx_syscalls, sq_wrs/sq_bytes (send WRs completed, payload),\n"
		"rq_wrs/rq_bytes (receives), flushed_wrs, crc_errors, term_sent, term_recv.\n"
		"See uiwarp-stat(1).\n");
}

int main(int argc, char **argv)
{
	bool watch = false, clean = false;
	double interval = 1.0;
	long count = 0;
	static const struct option lo[] = {
	    {"watch", no_argument, NULL, 'w'},	     {"interval", required_argument, NULL, 'i'},
	    {"count", required_argument, NULL, 'n'}, {"json", no_argument, NULL, 'j'},
	    {"no-tcp", no_argument, NULL, 'T'},	     {"clean", no_argument, NULL, 'C'},
	    {"help", no_argument, NULL, 'h'},	     {NULL, 0, NULL, 0}};
	int o;
	while ((o = getopt_long(argc, argv, "wi:n:jh", lo, NULL)) != -1) {
		switch (o) {
		case 'w':
			watch = true;
			break;
		case 'i':
			interval = strtod(optarg, NULL);
			if (interval < 0.01 || interval > 3600) {
				fprintf(stderr, "uiwarp-stat: bad interval %s\n", optarg);
				return 2;
			}
			break;
		case 'n':
			count = strtol(optarg, NULL, 10);
			if (count < 1) {
				fprintf(stderr, "uiwarp-stat: bad count %s\n", optarg);
				return 2;
			}
			break;
		case 'j':
			opt_json = true;
			break;
		case 'T':
			opt_tcp = false;
			break;
		case 'C':
			clean = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (clean) {
		each_segment(clean_one);
		return 0;
	}
	if (optind == argc) {
		list_snap.qp = calloc(UIW_STAT_SLOTS, sizeof(struct qp_snap));
		if (!list_snap.qp)
			return 1;
		printf("%7s %-16s %-8s %5s %12s %16s %12s %16s\n", "PID", "COMM", "DEV", "QPS",
		       "TX_FPDUS", "TX_BYTES", "RX_FPDUS", "RX_BYTES");
		each_segment(list_one);
		return 0;
	}
	int nt = argc - optind;
	if (nt > MAX_PIDS) {
		fprintf(stderr, "uiwarp-stat: at most %d PIDs\n", MAX_PIDS);
		return 2;
	}
	struct target *tg = calloc((size_t)nt, sizeof(*tg));
	if (!tg)
		return 1;
	int rc = 0, live = 0;
	for (int i = 0; i < nt; i++) {
		char *end;
		long pid = strtol(argv[optind + i], &end, 10);
		if (*end || pid <= 0 || pid > 1 << 30) {
			fprintf(stderr, "uiwarp-stat: not a PID: %s\n", argv[optind + i]);
			return 2;
		}
		tg[i].pid = (int)pid;
		tg[i].h = seg_map((int)pid, true);
		tg[i].cur.qp = calloc(UIW_STAT_SLOTS, sizeof(struct qp_snap));
		tg[i].prev.qp = calloc(UIW_STAT_SLOTS, sizeof(struct qp_snap));
		if (!tg[i].cur.qp || !tg[i].prev.qp)
			return 1;
		if (!tg[i].h) {
			rc = 1;
			continue;
		}
		tg[i].start_time = tg[i].h->start_time;
		if (opt_tcp)
			tg[i].nl = diag_open((int)pid);
		live++;
	}
	signal(SIGPIPE, SIG_DFL);
	for (long sample = 0; live > 0; sample++) {
		live = 0;
		for (int i = 0; i < nt; i++) {
			struct target *t = &tg[i];
			if (!t->h || (t->exited && sample > 0 && t->cur.exited))
				continue;
			/* read whether it is gone first: then the snapshot that
			 * follows is final */
			t->exited = proc_start_time(t->pid) != t->start_time;
			struct qp_snap *keep = t->prev.qp;
			t->prev = t->cur;
			t->cur.qp = keep;
			t->cur.ok = false;
			if (!snap_take(t->h, &t->cur)) {
				fprintf(stderr, "uiwarp-stat: %d: no consistent snapshot\n",
					t->pid);
				rc = 1;
				continue;
			}
			t->cur.exited = t->exited;
			if (!t->exited)
				for (int q = 0; q < t->cur.nqp; q++)
					diag_query(t->nl, &t->cur.qp[q]);
			if (opt_json)
				print_json(t);
			else
				print_text(t);
			if (!t->exited)
				live++;
		}
		if (!watch || (count && sample + 1 >= count))
			break;
		if (live) {
			struct timespec ts = {(time_t)interval,
					      (long)((interval - (double)(time_t)interval) * 1e9)};
			nanosleep(&ts, NULL);
		}
	}
	for (int i = 0; i < nt; i++)
		if (tg[i].nl)
			mnl_socket_close(tg[i].nl);
	return rc;
}
