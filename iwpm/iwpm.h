/* uiwarp iWARP port mapper: client and responder of rdma-core iwpmd's UDP
 * protocol (port 3935; wire format in iwpm/iwpm_wire.h, docs/iwpm.md).
 *
 * Client: before a TCP connect to a kernel iWARP host that runs iwpmd, ask
 * its port mapper where the RNIC really listens (iwpmd maps every listener
 * to a fresh port). Falls back to the application's port on REJECT, on an
 * ICMP unreachable, or after a short timeout.
 *
 * Responder: when no port mapper owns UDP 3935 on this host, answer kernel
 * iWARP initiators' queries for uiwarp's listeners (ACCEPT with the
 * listener's port, the mapped one for a listener whose application port a
 * host socket holds; REJECT otherwise), so their connect does not stall
 * for iwpmd's 10 s timeout. It starts lazily (first listener), never from a
 * library constructor, and is fork-aware: a child that inherited a running
 * responder starts its own on its first listener if the port is free.
 *
 * Environment (read at each call):
 *   UIWARP_IWPM=0             no queries, no responder
 *   UIWARP_IWPM_TIMEOUT_MS=n  client timeout, default 300, 0 = no queries,
 *                             clamped to 10000
 *   UIWARP_IWPM_RESPONDER=0   no responder (queries still made)
 *
 * All functions are thread-safe.
 */
#ifndef UIWARP_IWPM_H
#define UIWARP_IWPM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define IWPM_DEFAULT_TIMEOUT_MS 300
#define IWPM_MAX_TIMEOUT_MS 10000

/* ------------------------------------------------------------------ client */

enum iwpm_outcome {
	IWPM_ACCEPTED = 0, /* the peer's mapper answered ACCEPT (ACK sent) */
	IWPM_REJECTED,	   /* it answered REJECT: use the application's port */
	IWPM_TIMEDOUT,	   /* nothing answered within the timeout */
	IWPM_NO_MAPPER,	   /* ICMP port/host unreachable for the mapper port */
	IWPM_DISABLED,	   /* UIWARP_IWPM=0 or timeout 0: nothing sent */
	IWPM_SEND_FAILED,  /* the REQUEST could not be sent (no route, ...) */
};

/* Asks the port mapper at remote's IP, UDP 3935, which TCP port to connect
 * to for remote (the application's destination).
 *
 * local: the TCP socket's local address if known (its port goes into the
 * REQUEST's cpport, the peer's iwpmd reports it to its kernel), or NULL /
 * wildcard / port 0. remote: AF_INET or AF_INET6 (IPv4-mapped IPv6 is
 * queried as IPv4) with a non-zero port. timeout_ms: total time budget in
 * milliseconds; < 0 takes UIWARP_IWPM_TIMEOUT_MS (default 300); 0 does not
 * query. The REQUEST is sent at 0, 50, 150, 350, ... ms (interval doubling,
 * at most 1 s) until an answer or the timeout; the call returns at the
 * latest about timeout_ms after it was made.
 *
 * Always fills *mapped_remote with remote (same family and form) whose port
 * is the one to connect to. Returns that port (host order, 1..65535): the
 * ACCEPT's apport, or remote's own port on REJECT, timeout, ICMP error,
 * send error or when disabled. Returns -EINVAL (NULL remote or
 * mapped_remote, remote port 0, local of another family) or -EAFNOSUPPORT
 * without sending anything; *mapped_remote is then filled if possible. */
int iwpm_query(const struct sockaddr *local, const struct sockaddr *remote, int timeout_ms,
	       struct sockaddr_storage *mapped_remote);

/* iwpm_query with the mapper's UDP port pm_port (host order; tests use a
 * non-privileged port, real peers 3935) and the outcome in *outcome (may be
 * NULL). Same return values. */
int iwpm_query_ex(const struct sockaddr *local, const struct sockaddr *remote, int timeout_ms,
		  uint16_t pm_port, struct sockaddr_storage *mapped_remote,
		  enum iwpm_outcome *outcome);

/* The name of an outcome ("accepted", ...), for logs. */
const char *iwpm_outcome_str(enum iwpm_outcome o);

/* The client timeout in ms from the environment (see above). */
int iwpm_timeout_ms(void);
/* false when UIWARP_IWPM=0. */
bool iwpm_enabled(void);

/* --------------------------------------------------------------- responder */

#define IWPM_RESPONDER_BUSY 1	  /* another process (iwpmd) owns the UDP port */
#define IWPM_RESPONDER_DISABLED 2 /* UIWARP_IWPM=0 or UIWARP_IWPM_RESPONDER=0 */

/* Starts the responder on UDP 3935 if nothing else owns it: binds
 * 0.0.0.0:3935 and [::]:3935 (IPV6_V6ONLY, as iwpmd does; IPv6 skipped if
 * unavailable) and starts one thread with all signals blocked. Returns 0
 * (running, also if it already was), IWPM_RESPONDER_BUSY (the IPv4 port is
 * taken, by iwpmd or another uiwarp process: nothing started, a later call
 * tries again), IWPM_RESPONDER_DISABLED, or -errno (socket, bind other
 * than EADDRINUSE, pthread_create). */
int iwpm_responder_start(void);

/* iwpm_responder_start on UDP port (host order; 0 picks a free port, see
 * iwpm_responder_port), ignoring UIWARP_IWPM_RESPONDER; for tests. When a
 * responder already runs in this process, returns 0 if it is on port (or
 * port is 0) and -EALREADY otherwise. */
int iwpm_responder_start_port(uint16_t port);

/* The UDP port the responder is bound to (host order), 0 if not running. */
uint16_t iwpm_responder_port(void);

/* Stops the responder thread and closes its sockets; no-op if not running.
 * Registered listeners stay registered (a later start answers for them).
 * Must not be called from a fork child for a responder its parent started
 * (then it only forgets the inherited state). Returns nothing. */
void iwpm_responder_stop(void);

/* Registers a uiwarp TCP listener (its bound address: AF_INET or AF_INET6,
 * a specific or wildcard IP, non-zero port) so the responder ACCEPTs
 * queries for it; a wildcard IPv6 listener also matches IPv4 queries.
 * Registering the same address twice counts twice. Then starts the
 * responder if it does not run (iwpm_responder_start; its result is not
 * an error here). Returns 0, -EINVAL, -EAFNOSUPPORT, -ENOMEM. */
int iwpm_responder_add_listener(const struct sockaddr *addr);

/* Registers a uiwarp listener whose application address addr (AF_INET or
 * AF_INET6, specific or wildcard IP, non-zero port: the port the
 * application bound and peers ask for) really listens on TCP port
 * mapped_port (host order, non-zero) of the same IP, as iwpmd maps an RNIC
 * listener to a host port: queries for addr get ACCEPT with mapped_port.
 * v6only: an IPv6 wildcard that takes no IPv4 (RDMA_OPTION_ID_AFONLY), so
 * IPv4 queries for the port go to an IPv4 listener; without it a [::]
 * listener also answers IPv4 queries. A listener of the query's own IP
 * version is preferred over a dual-stack [::]. Counted like
 * iwpm_responder_add_listener (which is this with mapped_port = addr's port
 * and v6only false), undone by iwpm_responder_remove_listener(addr); starts
 * the responder if it does not run. Returns 0, -EINVAL (port or
 * mapped_port 0), -EAFNOSUPPORT, -ENOMEM. */
int iwpm_responder_add_mapping(const struct sockaddr *addr, uint16_t mapped_port, bool v6only);

/* Whether a listener registered here (any mapping) would clash with a TCP
 * listener on addr (IPV6_V6ONLY as v6only): same port, and the one's
 * addresses include the other's (same IP, a wildcard of the same version,
 * or a dual-stack [::] against IPv4). This process's uiwarp listeners, as
 * the rdma_cm port space sees them. */
bool iwpm_responder_holds(const struct sockaddr *addr, bool v6only);

/* Undoes one iwpm_responder_add_listener(addr). The responder keeps
 * running. Returns 0 or -ENOENT. */
int iwpm_responder_remove_listener(const struct sockaddr *addr);

/* Counters since the process started (all responders). */
struct iwpm_responder_stats {
	uint64_t requests;   /* REQUEST datagrams received (incl. duplicates) */
	uint64_t duplicates; /* REQUESTs whose assochandle was already answered */
	uint64_t accepts;    /* ACCEPTs sent (incl. re-sent for duplicates) */
	uint64_t rejects;    /* REJECTs sent (incl. re-sent for duplicates) */
	uint64_t acks;	     /* ACKs matching an answered REQUEST */
	uint64_t bad;	     /* undecodable or unexpected datagrams */
};
void iwpm_responder_get_stats(struct iwpm_responder_stats *out);

#endif
