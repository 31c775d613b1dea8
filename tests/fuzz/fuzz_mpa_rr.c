/* libFuzzer harness: MPA connection setup (RFC 5044 §7.1, RFC 6581 §5):
 * the peer's Request (we are the responder: mpa_recv_request, then
 * mpa_send_accept) or the peer's Reply (we are the initiator:
 * mpa_initiate), with private data and the RFC 6581 IRD/ORD word, read
 * from a real stream (uiw_stream_tcp on a socketpair) that holds the input
 * and then ends.
 *
 * Input: byte 0 selects the side and our configuration, the rest is what
 * the peer sent.
 *   0x01 responder (else initiator)    0x02 cfg.markers (accept M)
 *   0x04 cfg.crc_required              0x08 cfg.rfc7306
 *   0x10 initiator: revision 1         0x20 cfg.p2p off
 *   0x40 cfg.want_markers              0x80 cfg.large_fpdu off
 * Checked: no sanitizer report; only documented results; an accepted
 * frame's fields are in range (private data <= 512 bytes, IRD/ORD 14
 * bits, at most one RTR kind chosen, markers/CRC as negotiated), and the
 * Reply we send back starts with the Reply key. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mpa/mpa.h"

#define MAX_IN 4096

static void check_params(const struct mpa_params *p)
{
	if (p->pd_len > MPA_MAX_PD_RFC || (p->rev != MPA_REV_1 && p->rev != MPA_REV_2) ||
	    p->ird > MPA_V2_IRD_ORD_MASK || p->ord > MPA_V2_IRD_ORD_MASK ||
	    (p->enhanced && p->rev != MPA_REV_2))
		__builtin_trap();
}

static void check_neg(const struct mpa_negotiated *n)
{
	/* one RTR kind at most (RFC 6581 §5: the responder chooses one) */
	if (n->rtr & (n->rtr - 1))
		__builtin_trap();
	if (n->ird > MPA_V2_IRD_ORD_MASK || n->ord > MPA_V2_IRD_ORD_MASK)
		__builtin_trap();
	if (n->large_tx && n->markers_tx)
		__builtin_trap(); /* mpa.h: large FPDUs only without markers */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > MAX_IN)
		return 0;
	uint8_t sel = data[0];
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 0;
	/* the peer's bytes, then its FIN: every read ends, none waits */
	if (write(sv[1], data + 1, size - 1) != (ssize_t)(size - 1)) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	shutdown(sv[1], SHUT_WR);
	struct uiw_stream *s = uiw_stream_tcp(sv[0]);
	if (!s) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	struct mpa_config cfg;
	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	cfg.markers = sel & 0x02;
	cfg.crc_required = sel & 0x04;
	cfg.rfc7306 = sel & 0x08;
	cfg.rev = (sel & 0x10) ? MPA_REV_1 : MPA_REV_2;
	cfg.p2p = !(sel & 0x20);
	cfg.want_markers = sel & 0x40;
	cfg.large_fpdu = !(sel & 0x80);
	struct mpa_params p;
	struct mpa_negotiated neg;
	int r;
	if (sel & 0x01) {
		r = mpa_recv_request(s, cfg.timeout_ms, &p);
		if (r != 0 && r != -EPROTO && r != -ECONNRESET)
			__builtin_trap();
		if (r == 0) {
			check_params(&p);
			r = mpa_send_accept(s, &cfg, &p, 8, 8, "pd", 2, &neg);
			if (r == 0) {
				check_neg(&neg);
				if (neg.initiator || neg.markers_tx != p.markers)
					__builtin_trap();
				char key[MPA_KEY_LEN];
				if (read(sv[1], key, sizeof(key)) != (ssize_t)sizeof(key) ||
				    memcmp(key, MPA_KEY_REP, MPA_KEY_LEN))
					__builtin_trap();
			} else if (r != -EPROTO) {
				__builtin_trap();
			}
		}
	} else {
		uint8_t term = 0;
		r = mpa_initiate(s, &cfg, 8, 8, "hello", 5, &p, &neg, &term);
		if (r != 0 && r != -EPROTO && r != -ECONNRESET && r != -ECONNREFUSED)
			__builtin_trap();
		if (r == 0) {
			check_params(&p);
			check_neg(&neg);
			if (!neg.initiator || (cfg.crc_required && !neg.crc))
				__builtin_trap();
		}
		if (r == -EPROTO && term > MPA_TERM_NO_MATCHING_RTR)
			__builtin_trap();
	}
	s->ops->destroy(s);
	close(sv[1]);
	return 0;
}
