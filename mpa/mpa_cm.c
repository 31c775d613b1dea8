/* MPA connection setup: Request / Reply / Reject (RFC 5044 §7.1) with the
 * RFC 6581 enhancements (IRD/ORD word, peer-to-peer RTR negotiation).
 *
 * Frames are read with uiw_stream_recv_exact, first the 20-byte header and then
 * exactly PD_Length bytes, so nothing behind a frame (the first FPDU may
 * share the segment) is consumed. Policy follows
 * ../shared/reference/iwarp-interop-notes.md §0, §1.4 and §8.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "mpa/mpa.h"

#define RR_HDR_LEN ((int)sizeof(struct mpa_rr_hdr))
#define V2_LEN ((int)sizeof(struct mpa_v2_ird_ord))
#define ULP_PD_MAX (MPA_MAX_PD - V2_LEN)

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left before deadline (>= 0), or -1 when there is none. */
static int left_ms(int timeout_ms, int64_t deadline)
{
	int64_t left;

	if (timeout_ms < 0)
		return -1;
	left = deadline - now_ms();
	return left > 0 ? (int)left : 0;
}

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get_be16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint16_t clamp14(uint16_t v)
{
	return v > MPA_V2_IRD_ORD_MASK ? MPA_V2_IRD_ORD_MASK : v;
}

/* Relaxed negotiation of one depth (RFC 6581 IRD/ORD, as siw/cxgb4 do it): the
 * smaller of ours and the peer's, where the peer's 0x3FFF means "no limit"
 * (Intel's IETF_NO_IRD_ORD) and leaves ours. */
static uint16_t relax(uint16_t ours, uint16_t peers)
{
	if (peers == MPA_V2_IRD_ORD_NONE)
		return ours;
	return ours < peers ? ours : peers;
}

/* Builds and sends one Request/Reply frame: header, then the RFC 6581 word
 * (when word is true) with ird_w/ord_w, then pd[0..pd_len). pd_len <=
 * ULP_PD_MAX. Returns 0, -ETIMEDOUT (no room for 10 s) or -errno from the
 * stream. */
static int send_frame(struct uiw_stream *s, const char *key, uint8_t flags, uint8_t rev, bool word,
		      uint16_t ird_w, uint16_t ord_w, const void *pd, uint16_t pd_len)
{
	uint8_t buf[RR_HDR_LEN + MPA_MAX_PD];
	size_t len = RR_HDR_LEN;
	struct iovec iov;
	/* a frame is small: a stream that cannot take it in this long is dead */
	const int timeout_ms = 10000;

	memcpy(buf, key, MPA_KEY_LEN);
	/* reserved bits go out as zero, but for uiwarp's RFC 7306 bit and
	 * siw's large-FPDU bit, which callers set only when configured
	 * (mpa_wire.h) */
	buf[16] =
	    flags & (uint8_t) ~(MPA_FLAG_RES_MASK & ~(MPA_FLAG_RFC7306 | MPA_FLAG_LARGE_FPDU));
	buf[17] = rev;
	put_be16(&buf[18], (uint16_t)(pd_len + (word ? V2_LEN : 0)));
	if (word) {
		put_be16(&buf[len], ird_w);
		put_be16(&buf[len + 2], ord_w);
		len += V2_LEN;
	}
	if (pd_len) {
		memcpy(&buf[len], pd, pd_len);
		len += pd_len;
	}
	iov.iov_base = buf;
	iov.iov_len = len;
	return uiw_stream_send_all(s, &iov, 1, timeout_ms);
}

/* Reads one frame with key (MPA_KEY_REQ/REP) within timeout_ms (< 0:
 * forever) and decodes it into *p; *reject gets the R flag. The RFC 6581
 * word is present when rev is 2 and E is set; it is removed from p->pd.
 * Without the word (rev 1, or rev 2 without E) the peer's IRD/ORD are
 * unknown: they are reported as 1, the default RFC 6581 assumes when nothing
 * is exchanged (rsockets likewise forces initiator_depth = 1 on iWARP). Note
 * that siw instead runs such connections with IRD = ORD = 0 (interop notes
 * §8), so a Read over a rev 1 link to siw fails on its side. Reserved flag
 * bits are ignored. A reject carrying E but fewer than 4 bytes is taken as
 * plain private data (it only needs to be shown to the user). Of the
 * reserved bits only uiwarp's RFC 7306 bit (p->rfc7306) and siw's
 * large-FPDU bit (p->large_fpdu) are reported.
 * Returns 0, -EPROTO (key, revision 0, PD_Length > 512, short RFC 6581
 * word), -EPROTONOSUPPORT (right key, revision above 2: nothing after the
 * 20-byte header was read, p->rev holds the revision), -ETIMEDOUT,
 * -ECONNRESET or -errno. */
static int recv_frame(struct uiw_stream *s, const char *key, int timeout_ms, struct mpa_params *p,
		      bool *reject)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : 0;
	uint8_t hdr[RR_HDR_LEN];
	uint8_t raw[MPA_MAX_PD_RFC];
	uint16_t len, off = 0;
	int r;

	r = uiw_stream_recv_exact(s, hdr, sizeof(hdr), left_ms(timeout_ms, deadline));
	if (r < 0)
		return r;
	if (memcmp(hdr, key, MPA_KEY_LEN) != 0)
		return -EPROTO;
	if (hdr[17] > MPA_REV_2) {
		memset(p, 0, sizeof(*p));
		p->rev = hdr[17];
		return -EPROTONOSUPPORT;
	}
	if (hdr[17] != MPA_REV_1 && hdr[17] != MPA_REV_2)
		return -EPROTO;
	len = get_be16(&hdr[18]);
	if (len > MPA_MAX_PD_RFC)
		return -EPROTO;
	if (len) {
		r = uiw_stream_recv_exact(s, raw, len, left_ms(timeout_ms, deadline));
		if (r < 0)
			return r;
	}

	memset(p, 0, sizeof(*p));
	*reject = hdr[16] & MPA_FLAG_REJECT;
	p->rev = hdr[17];
	p->markers = hdr[16] & MPA_FLAG_MARKERS;
	p->crc = hdr[16] & MPA_FLAG_CRC;
	p->rfc7306 = hdr[16] & MPA_FLAG_RFC7306;
	p->large_fpdu = hdr[16] & MPA_FLAG_LARGE_FPDU;
	p->enhanced = p->rev == MPA_REV_2 && (hdr[16] & MPA_FLAG_ENHANCED);
	if (p->enhanced && len < V2_LEN) {
		if (!*reject)
			return -EPROTO;
		p->enhanced = false;
	}
	if (p->enhanced) {
		uint16_t ird_w = get_be16(&raw[0]), ord_w = get_be16(&raw[2]);

		p->ird = ird_w & MPA_V2_IRD_ORD_MASK;
		p->ord = ord_w & MPA_V2_IRD_ORD_MASK;
		p->p2p = ird_w & MPA_V2_PEER_TO_PEER;
		if (ird_w & MPA_V2_RTR_SEND)
			p->rtr |= MPA_RTR_SEND;
		if (ord_w & MPA_V2_RTR_WRITE)
			p->rtr |= MPA_RTR_WRITE;
		if (ord_w & MPA_V2_RTR_READ)
			p->rtr |= MPA_RTR_READ;
		off = V2_LEN;
	} else {
		/* rev 1 (or rev 2 without E): IRD/ORD not exchanged, assume 1 */
		p->ird = 1;
		p->ord = 1;
	}
	p->pd_len = (uint16_t)(len - off);
	if (p->pd_len)
		memcpy(p->pd, &raw[off], p->pd_len);
	return 0;
}

/* See mpa/mpa.h. Fills *cfg (not NULL) with the interop profile (interop
 * notes §0): rev 2 with the RFC 6581 word (RFC 6581 §5), CRC asked for but
 * not required (RFC 5044 §7.1), peer-to-peer offering Write and Read RTR,
 * 10000 ms to wait for the peer (siw's initiator timeout), markers neither
 * honoured nor asked for, the RFC 7306 bit not sent, the large-FPDU bit
 * sent (mpa_wire.h). No errors. */
void mpa_config_default(struct mpa_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->rev = MPA_REV_2;
	cfg->crc = true;
	cfg->crc_required = false;
	cfg->p2p = true;
	cfg->rtr_offer = MPA_RTR_WRITE | MPA_RTR_READ;
	cfg->timeout_ms = 10000;
	cfg->rfc7306 = false;
	/* RFC 5044 §7.1.2: a responder refuses only what it cannot do,
	 * and markers it can: a peer asking for them gets them */
	cfg->markers = true;
	cfg->want_markers = false;
	cfg->large_fpdu = true;
}

static void set_term(uint8_t *term_code, uint8_t code)
{
	if (term_code)
		*term_code = code;
}

/* See mpa/mpa.h. RFC 5044 §7.1 (initiator side), RFC 6581 §5 (enhanced
 * setup: IRD/ORD word, P2P, RTR) and the interop notes §1.4 / §8.
 * ird/ord: our depths, clamped to 0x3FFF; with a Read RTR offered, ord is
 * raised to 1 (the RTR itself is a Read). cfg->rev 1 sends no RFC 6581 word
 * (no P2P, no RTR). M is sent when cfg->want_markers (the responder must
 * then insert markers towards us: neg->markers_rx); the RFC 7306 bit when
 * cfg->rfc7306 (neg->rfc7306 when the reply echoes it); the large-FPDU bit
 * when cfg->large_fpdu (neg->large_tx when the reply has it too and no
 * markers go out). Checks on the
 * reply: key, same revision as ours (a revision above 2 is -EPROTO too),
 * M only when cfg->markers (then neg->markers_tx: RFC 5044 §7.1, M declares
 * the receiver's requirement), CRC (-EPROTO when cfg->crc_required and the
 * reply has no C: stricter than RFC 5044 §7.1, which turns CRC on when
 * either side sets C, as siw's mpa_crc_strict), the
 * word when we sent one (-EPROTO, term MPA_TERM_BAD_REQREP), P2P echoed with
 * exactly one RTR kind out of our offer (-EPROTO, MPA_TERM_NO_MATCHING_RTR),
 * and a Read RTR with a peer IRD of 0 (-EPROTO, MPA_TERM_INSUFFICIENT_IRD).
 * Other -EPROTO leave *term_code 0 (just close). Errors -EINVAL for bad
 * arguments (NULL s/cfg, pd NULL with pd_len, cfg->rev not 1 or 2). */
int mpa_initiate(struct uiw_stream *s, const struct mpa_config *cfg, uint16_t ird, uint16_t ord,
		 const void *pd, uint16_t pd_len, struct mpa_params *reply,
		 struct mpa_negotiated *neg, uint8_t *term_code)
{
	struct mpa_params local_reply;
	struct mpa_negotiated n = {0};
	uint16_t my_ird = clamp14(ird), my_ord = clamp14(ord);
	uint16_t ird_w, ord_w;
	uint8_t flags = 0, offer = 0;
	bool enh, p2p, reject = false;
	int r;

	set_term(term_code, 0);
	if (!s || !cfg || (pd_len && !pd))
		return -EINVAL;
	if (cfg->rev != MPA_REV_1 && cfg->rev != MPA_REV_2)
		return -EINVAL;
	if (pd_len > ULP_PD_MAX)
		return -EMSGSIZE;
	if (!reply)
		reply = &local_reply;

	enh = cfg->rev == MPA_REV_2;
	p2p = enh && cfg->p2p;
	if (p2p)
		offer = cfg->rtr_offer & (MPA_RTR_SEND | MPA_RTR_WRITE | MPA_RTR_READ);
	if ((offer & MPA_RTR_READ) && my_ord == 0)
		my_ord = 1;
	if (cfg->crc || cfg->crc_required)
		flags |= MPA_FLAG_CRC;
	if (enh)
		flags |= MPA_FLAG_ENHANCED;
	if (cfg->want_markers)
		flags |= MPA_FLAG_MARKERS;
	if (cfg->rfc7306)
		flags |= MPA_FLAG_RFC7306;
	if (cfg->large_fpdu)
		flags |= MPA_FLAG_LARGE_FPDU;
	ird_w = my_ird;
	ord_w = my_ord;
	if (p2p)
		ird_w |= MPA_V2_PEER_TO_PEER;
	if (offer & MPA_RTR_SEND)
		ird_w |= MPA_V2_RTR_SEND;
	if (offer & MPA_RTR_WRITE)
		ord_w |= MPA_V2_RTR_WRITE;
	if (offer & MPA_RTR_READ)
		ord_w |= MPA_V2_RTR_READ;

	r = send_frame(s, MPA_KEY_REQ, flags, cfg->rev, enh, ird_w, ord_w, pd, pd_len);
	if (r < 0)
		return r;
	r = recv_frame(s, MPA_KEY_REP, cfg->timeout_ms, reply, &reject);
	if (r == -EPROTONOSUPPORT)
		return -EPROTO;
	if (r < 0)
		return r;
	if (reject)
		return -ECONNREFUSED;

	/* the responder answers in the request's revision (RFC 5044 §7.1,
	 * RFC 6581); a different one is not something we can use */
	if (reply->rev != cfg->rev || (reply->markers && !cfg->markers))
		return -EPROTO;
	if (cfg->crc_required && !reply->crc)
		return -EPROTO;
	if (enh && !reply->enhanced) {
		set_term(term_code, MPA_TERM_BAD_REQREP);
		return -EPROTO;
	}

	n.rev = cfg->rev;
	n.crc = (flags & MPA_FLAG_CRC) || reply->crc; /* RFC 5044 §7.1: either side asks */
	n.initiator = true;
	n.markers_tx = reply->markers;
	n.markers_rx = cfg->want_markers;
	n.rfc7306 = cfg->rfc7306 && reply->rfc7306;
	n.large_tx = cfg->large_fpdu && reply->large_fpdu && !n.markers_tx;
	if (p2p) {
		uint8_t chosen = reply->rtr;

		/* RFC 6581: the responder MUST echo A and picks exactly one of
		 * the offered kinds (interop notes §1.4, siw/cxgb4) */
		if (!reply->p2p || (chosen & (chosen - 1)) || (chosen & ~offer) ||
		    (offer && !chosen)) {
			set_term(term_code, MPA_TERM_NO_MATCHING_RTR);
			return -EPROTO;
		}
		n.p2p = true;
		n.rtr = chosen;
	}
	n.ord = relax(my_ord, reply->ird);
	n.ird = relax(my_ird, reply->ord);
	if (n.rtr == MPA_RTR_READ) {
		/* the Read RTR needs a slot at the responder ... */
		if (reply->ird == 0) {
			set_term(term_code, MPA_TERM_INSUFFICIENT_IRD);
			return -EPROTO;
		}
		/* ... and one here (my_ord >= 1 already) */
		if (n.ord == 0)
			n.ord = 1;
	}
	if (neg)
		*neg = n;
	return 0;
}

/* See mpa/mpa.h. RFC 5044 §7.1.2 (responder). timeout_ms: the whole
 * Request, < 0 waits forever. On 0, *req holds revision, flags, the peer's
 * IRD/ORD (1/1 when no RFC 6581 word: rev 1 or rev 2 without E), P2P and
 * offered RTR kinds, and the ULP private data. A request with M set is
 * returned as is (req->markers); mpa_send_accept rejects it unless
 * cfg->markers. A Request with revision > 2: RFC 5044 §7.1 lets a receiver
 * that cannot interoperate with the revision close; we first send a Reply
 * with R set in revision 2 (no private data, no RFC 6581 word), which tells
 * the peer the highest revision we speak, then return -EPROTO. */
int mpa_recv_request(struct uiw_stream *s, int timeout_ms, struct mpa_params *req)
{
	bool reject = false; /* R has no meaning in a request: ignored */
	int r;

	if (!s || !req)
		return -EINVAL;
	r = recv_frame(s, MPA_KEY_REQ, timeout_ms, req, &reject);
	if (r == -EPROTONOSUPPORT) {
		struct mpa_params ours = {.rev = MPA_REV_2};

		(void)mpa_send_reject(s, &ours, NULL, 0);
		return -EPROTO;
	}
	return r;
}

/* See mpa/mpa.h. RFC 5044 §7.1.2, RFC 6581 §5. The Reply has the
 * request's revision, the RFC 6581 word when the request had it, C when
 * either side asks (cfg->crc or cfg->crc_required, or the request's C), A
 * when the request had A, and the chosen RTR kind (WRITE, else READ, else
 * SEND, else none). The word carries our negotiated depths: ird/ord clamped
 * to 0x3FFF, then ord = min(ord, peer IRD), ird = min(ird, peer ORD) (a
 * peer 0x3FFF leaves ours), and ird >= 1 for a Read RTR; sending these makes
 * the initiator arrive at the mirror image. Errors: -EINVAL (NULL s, cfg
 * or req, pd NULL with pd_len, req->rev not 1 or 2), -EMSGSIZE (pd_len >
 * 252), -EPROTO (markers without cfg->markers: a reject went out), -errno
 * from the stream. Markers (RFC 5044 §7.1, per direction): the request's M
 * makes us insert markers (neg->markers_tx); cfg->want_markers puts M in the
 * reply (neg->markers_rx). The RFC 7306 bit goes in the reply, and
 * neg->rfc7306 is set, only when both cfg->rfc7306 and the request have it.
 * cfg->crc_required needs no reject here: our C forces CRC on both ways.
 * The large-FPDU bit goes in the reply when cfg->large_fpdu (it announces
 * what we take, whatever the request said); neg->large_tx when the request
 * had it too and no markers go out. */
int mpa_send_accept(struct uiw_stream *s, const struct mpa_config *cfg,
		    const struct mpa_params *req, uint16_t ird, uint16_t ord, const void *pd,
		    uint16_t pd_len, struct mpa_negotiated *neg)
{
	struct mpa_negotiated n = {0};
	uint16_t peer_ird, peer_ord, ird_w, ord_w;
	uint8_t flags = 0, rtr = 0;
	bool enh, p2p;
	int r;

	if (!s || !cfg || !req || (pd_len && !pd))
		return -EINVAL;
	if (req->rev != MPA_REV_1 && req->rev != MPA_REV_2)
		return -EINVAL;
	if (pd_len > ULP_PD_MAX)
		return -EMSGSIZE;
	if (req->markers && !cfg->markers) {
		/* markers off (interop notes §0, as siw): answer with a reject */
		(void)mpa_send_reject(s, req, NULL, 0);
		return -EPROTO;
	}

	enh = req->rev == MPA_REV_2 && req->enhanced;
	p2p = enh && req->p2p;
	if (p2p) {
		if (req->rtr & MPA_RTR_WRITE)
			rtr = MPA_RTR_WRITE;
		else if (req->rtr & MPA_RTR_READ)
			rtr = MPA_RTR_READ;
		else if (req->rtr & MPA_RTR_SEND)
			rtr = MPA_RTR_SEND;
	}
	peer_ird = enh ? clamp14(req->ird) : 1;
	peer_ord = enh ? clamp14(req->ord) : 1;
	n.ord = relax(clamp14(ord), peer_ird);
	n.ird = relax(clamp14(ird), peer_ord);
	if (rtr == MPA_RTR_READ && n.ird == 0)
		n.ird = 1; /* the initiator's Read RTR lands here */
	n.rev = req->rev;
	n.crc = req->crc || cfg->crc || cfg->crc_required;
	n.p2p = p2p;
	n.rtr = rtr;
	n.initiator = false;
	n.markers_tx = req->markers;
	n.markers_rx = cfg->want_markers;
	n.rfc7306 = cfg->rfc7306 && req->rfc7306;
	n.large_tx = cfg->large_fpdu && req->large_fpdu && !n.markers_tx;

	if (n.crc)
		flags |= MPA_FLAG_CRC;
	if (enh)
		flags |= MPA_FLAG_ENHANCED;
	if (n.markers_rx)
		flags |= MPA_FLAG_MARKERS;
	if (n.rfc7306)
		flags |= MPA_FLAG_RFC7306;
	if (cfg->large_fpdu)
		flags |= MPA_FLAG_LARGE_FPDU;
	ird_w = n.ird;
	ord_w = n.ord;
	if (p2p)
		ird_w |= MPA_V2_PEER_TO_PEER;
	if (rtr == MPA_RTR_SEND)
		ird_w |= MPA_V2_RTR_SEND;
	else if (rtr == MPA_RTR_WRITE)
		ord_w |= MPA_V2_RTR_WRITE;
	else if (rtr == MPA_RTR_READ)
		ord_w |= MPA_V2_RTR_READ;

	r = send_frame(s, MPA_KEY_REP, flags, req->rev, enh, ird_w, ord_w, pd, pd_len);
	if (r < 0)
		return r;
	if (neg)
		*neg = n;
	return 0;
}

/* See mpa/mpa.h. RFC 5044 §7.1.2 (R flag). The reject answers in req's
 * revision (rev 2 when req is NULL or its revision is not 1) and, when the
 * request carried the RFC 6581 word, carries one too (E set, IRD = ORD = 0,
 * no flags) so the peer strips it before showing pd. Errors: -EINVAL (NULL
 * llp, pd NULL with pd_len), -EMSGSIZE (pd_len > 252), -errno. */
int mpa_send_reject(struct uiw_stream *s, const struct mpa_params *req, const void *pd,
		    uint16_t pd_len)
{
	uint8_t rev = req && req->rev == MPA_REV_1 ? MPA_REV_1 : MPA_REV_2;
	bool enh = req && req->rev == MPA_REV_2 && req->enhanced;
	uint8_t flags = MPA_FLAG_REJECT;

	if (!s || (pd_len && !pd))
		return -EINVAL;
	if (pd_len > ULP_PD_MAX)
		return -EMSGSIZE;
	if (enh)
		flags |= MPA_FLAG_ENHANCED;
	return send_frame(s, MPA_KEY_REP, flags, rev, enh, 0, 0, pd, pd_len);
}
