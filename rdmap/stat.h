/* Live counters (stat/stat_shm.h): the engine's side. Internal to rdmap/.
 *
 * Every QP has a slot from uiw_stat_qp_open until uiw_stat_qp_close: in the
 * process's shared segment, or a private one when the segment is off
 * (UIWARP_STATS=0), could not be made, or is full; the data path never
 * checks which. docs/design.md, "Counters".
 */
#ifndef UIWARP_RDMAP_STAT_H
#define UIWARP_RDMAP_STAT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "rdmap/internal.h"
#include "stat/stat_shm.h"
#include "util/log.h"

/* A QP's handle on its slot (process memory). */
struct uiw_qp_stat {
	struct uiw_stat_qp *s; /* the slot: shared or &priv */
	int idx;	       /* slot index in the segment, -1 for priv */
	void *seg;	       /* the segment the slot is in */
	char who[112];	       /* "qp=N LOCAL->PEER" for the log */
	struct uiw_stat_qp priv;
};

/* A relaxed store of v (one plain store on x86-64 / aarch64). */
#define UIW_STAT_SET(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)
/* field += n by the one thread that may write it now (plain load + store). */
#define UIW_STAT_ADD(field, n)                                                                     \
	UIW_STAT_SET(field, atomic_load_explicit(&(field), memory_order_relaxed) + (n))

/* Gives qp a slot (qp->stat; the segment is created on first use) and
 * counts the QP. Returns 0 or -ENOMEM (no handle could be allocated). */
int uiw_stat_qp_open(struct uiw_qp *qp);
/* Moves qp's counters into the device's closed totals (taking the final
 * MPA counters first: the QP must be quiet) and frees its slot. */
void uiw_stat_qp_close(struct uiw_qp *qp);
/* qp's connection is established (cm.c, before the engine takes it):
 * records the 4-tuple and what MPA settled; counters of an earlier
 * connection of the QP move into the closed totals. */
void uiw_stat_qp_connected(struct uiw_qp *qp, bool initiator);
/* A Terminate was queued by us (sent) or received (RFC 5040 §4.8);
 * CRC failures (LLP, MPA_TERM_CRC) are counted too. */
void uiw_stat_qp_term(struct uiw_qp *qp, bool sent, uint8_t layer, uint8_t etype, uint8_t ecode);
/* The connection ended (DISCONNECTED is being reported). */
void uiw_stat_qp_ended(struct uiw_qp *qp, enum uiw_close_reason why);

/* Device events without a QP. */
enum uiw_stat_event {
	UIW_STAT_EV_CONN_FAILED,
	UIW_STAT_EV_REJECT_SENT,
	UIW_STAT_EV_REJECT_RECV,
};
void uiw_stat_event(enum uiw_stat_event ev);

/* Publishes the send side's MPA counters into qp's slot (tx_lock holder;
 * a few stores, once per pass). */
static inline void uiw_stat_tx(struct uiw_qp *qp)
{
	struct uiw_stat_counters *c = &qp->stat->s->c;
	UIW_STAT_SET(c->tx_fpdus, qp->mpa.tx_fpdus);
	UIW_STAT_SET(c->tx_bytes, qp->mpa.tx_bytes);
	UIW_STAT_SET(c->tx_syscalls, qp->mpa.tx_syscalls);
}
/* Likewise for the receive side (rx_lock holder). */
static inline void uiw_stat_rx(struct uiw_qp *qp)
{
	struct uiw_stat_counters *c = &qp->stat->s->c;
	UIW_STAT_SET(c->rx_fpdus, qp->mpa.rx_fpdus);
	UIW_STAT_SET(c->rx_bytes, qp->mpa.rx_bytes);
	UIW_STAT_SET(c->rx_syscalls, qp->mpa.rx_syscalls);
}

/* Logs a line about qp (util/log.h) with its "qp=N LOCAL->PEER". */
#define uiw_qp_log(qp, level, ...)                                                                 \
	do {                                                                                       \
		if (uiw_log_on(level))                                                             \
			uiw_log(level, (qp)->stat->who, __VA_ARGS__);                              \
	} while (0)

/* Names for the log and uiwarp-stat: a close reason, a Terminate's layer
 * and error type (RFC 5040 §4.8, RFC 5041 §7, RFC 5044 / 6581). */
const char *uiw_close_reason_name(enum uiw_close_reason why);
const char *uiw_term_layer_name(unsigned layer);

#endif
