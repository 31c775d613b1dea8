/* uiwarp-wan-delay: holds every packet of an NFQUEUE queue for a fixed
 * time before letting it go, so a router namespace adds one-way delay to
 * a path on a kernel without the netem qdisc (scripts/wan.sh).
 *
 *   uiwarp-wan-delay -q QUEUE -d DELAY_US [-t SECONDS] [-v]
 *
 * iptables sends the packets (`-j NFQUEUE --queue-num QUEUE`); each one
 * is accepted DELAY_US microseconds after it was queued, in arrival order
 * (the delay is the same for all, so the order is kept: a path with
 * delay, not reordering). Only the packets' metadata is copied to user
 * space, and the due packets are let go with one batch verdict. The ring
 * holds up to 65536 packets: at 1 Gbit/s of 1500-byte packets that is
 * 0.78 s of delay (a GSO packet of up to 64 KiB counts once); when it is
 * full the held packets go early. With -t the program exits by itself after SECONDS (tests bound
 * every helper); SIGTERM / SIGINT end it at once, and the packets still
 * held are accepted first. -v prints the count of packets and the largest
 * number held at once on exit.
 *
 * Uses libnetfilter_queue (Debian libnetfilter-queue-dev). Exit status 0,
 * 1 on a setup error (no NFQUEUE support, not root).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#define HOLD_MAX 65536u

struct held {
	uint32_t id;
	uint64_t due_ns;
};

static struct held ring[HOLD_MAX];
static unsigned head, tail; /* ring[head..tail) are held, in due order */
static uint64_t delay_ns;
static unsigned long long total, most;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Accepts every held packet that is due (all of them when all), with one
 * batch verdict: the kernel numbers a queue's packets in arrival order and
 * they are due in that order, so "every id up to the last due one" is
 * exactly the due ones. */
static void release(struct nfq_q_handle *qh, int all)
{
	uint64_t now = now_ns();
	uint32_t last = 0;
	int any = 0;
	while (head != tail && (all || ring[head % HOLD_MAX].due_ns <= now)) {
		last = ring[head % HOLD_MAX].id;
		any = 1;
		head++;
	}
	if (any)
		(void)nfq_set_verdict_batch(qh, last, NF_ACCEPT);
}

/* A packet arrived: hold it (when the ring is full, the held ones go
 * early: never a drop or a reordering the path would not have made). */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *nfmsg, struct nfq_data *nfa,
		     void *data)
{
	(void)nfmsg;
	(void)data;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	if (!ph)
		return 0;
	uint32_t id = ntohl(ph->packet_id);
	total++;
	if (tail - head >= HOLD_MAX) {
		/* full: this one waits for the oldest (never a drop, never
		 * out of order), which goes now */
		release(qh, 1);
	}
	ring[tail % HOLD_MAX] = (struct held){id, now_ns() + delay_ns};
	tail++;
	if (tail - head > most)
		most = tail - head;
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	int queue = -1, opt, verbose = 0;
	long long delay_us = -1, secs = 0;
	while ((opt = getopt(argc, argv, "q:d:t:v")) != -1) {
		switch (opt) {
		case 'q':
			queue = atoi(optarg);
			break;
		case 'd':
			delay_us = atoll(optarg);
			break;
		case 't':
			secs = atoll(optarg);
			break;
		case 'v':
			verbose = 1;
			break;
		default:
			goto usage;
		}
	}
	if (queue < 0 || queue > 65535 || delay_us < 0 || delay_us > 10000000 || secs < 0)
		goto usage;
	delay_ns = (uint64_t)delay_us * 1000u;

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct nfq_handle *h = nfq_open();
	if (!h) {
		perror("uiwarp-wan-delay: nfq_open");
		return 1;
	}
	struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)queue, on_packet, NULL);
	if (!qh) {
		perror("uiwarp-wan-delay: nfq_create_queue");
		nfq_close(h);
		return 1;
	}
	if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, HOLD_MAX) < 0) {
		perror("uiwarp-wan-delay: queue setup");
		nfq_destroy_queue(qh);
		nfq_close(h);
		return 1;
	}
	int fd = nfq_fd(h);
	int rcvbuf = 16 << 20;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
	/* a full socket buffer drops packets: say so instead of failing */
	int one = 1;
	(void)setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
	printf("uiwarp-wan-delay: queue %d, delay %lld us\n", queue, delay_us);
	fflush(stdout);

	uint64_t end = secs ? now_ns() + (uint64_t)secs * 1000000000u : 0;
	static char buf[65536];
	while (!stop && (!end || now_ns() < end)) {
		uint64_t wait = 100000000; /* 100 ms: the -t bound and signals */
		if (head != tail) {
			uint64_t due = ring[head % HOLD_MAX].due_ns, now = now_ns();
			wait = due <= now ? 0 : due - now;
		}
		struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000u),
				      .tv_nsec = (long)(wait % 1000000000u)};
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n = ppoll(&pfd, 1, &ts, NULL);
		if (n > 0 && (pfd.revents & POLLIN)) {
			/* everything queued now, then release */
			for (int i = 0; i < 256; i++) {
				ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
				if (r <= 0)
					break;
				nfq_handle_packet(h, buf, (int)r);
			}
		}
		release(qh, 0);
	}
	release(qh, 1);
	if (verbose)
		fprintf(stderr, "uiwarp-wan-delay: %llu packets, at most %llu held\n", total, most);
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;

usage:
	fprintf(stderr, "usage: uiwarp-wan-delay -q QUEUE -d DELAY_US [-t SECONDS] [-v]\n");
	return 2;
}
