/* MPA connection setup (mpa/mpa_cm.c) over real loopback TCP sockets.
 *
 * Two kinds of test: our initiator against our responder (a pthread), and
 * one of ours against a raw socket speaking hand-written bytes, which pins
 * the wire layout (RFC 5044 §7.1, RFC 6581 §5) independently of our parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mpa/mpa.h"
#include "mpa_test_util.h"

/* One loopback connection: ini is our initiator end; resp is the other end,
 * used either through our responder or raw through rfd. */
struct conn {
	struct uiw_stream *ini, *resp;
	int rfd;
};

static int setup(void **state)
{
	struct conn *c = calloc(1, sizeof(*c));
	int fds[2] = {-1, -1};

	if (!c || tcp_pair(fds) < 0)
		return -1;
	c->ini = uiw_stream_tcp(fds[0]);
	c->resp = uiw_stream_tcp(fds[1]);
	if (!c->ini || !c->resp)
		return -1;
	c->rfd = fds[1];
	sock_timeouts(c->rfd, 3000); /* raw reads in the tests never hang */
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct conn *c = *state;

	c->ini->ops->destroy(c->ini);
	c->resp->ops->destroy(c->resp);
	free(c);
	return 0;
}

/* ------------------------------------------------- our responder (thread) */

struct peer {
	struct uiw_stream *llp;
	struct mpa_config cfg;
	uint16_t ird, ord;
	bool reject;
	const void *pd;
	uint16_t pd_len;
	/* results */
	int rc_req, rc_rep;
	struct mpa_params req;
	struct mpa_negotiated neg;
};

static void *responder(void *arg)
{
	struct peer *p = arg;

	p->rc_req = mpa_recv_request(p->llp, 5000, &p->req);
	if (p->rc_req < 0)
		return NULL;
	if (p->reject)
		p->rc_rep = mpa_send_reject(p->llp, &p->req, p->pd, p->pd_len);
	else
		p->rc_rep = mpa_send_accept(p->llp, &p->cfg, &p->req, p->ird, p->ord, p->pd,
					    p->pd_len, &p->neg);
	return NULL;
}

static void peer_init(struct peer *p, struct conn *c)
{
	memset(p, 0, sizeof(*p));
	p->llp = c->resp;
	mpa_config_default(&p->cfg);
	p->ird = 1;
	p->ord = 1;
	p->rc_req = p->rc_rep = 99;
}

/* Runs our initiator against our responder p; returns mpa_initiate's
 * result. The responder's results are in p. */
static int handshake(struct conn *c, const struct mpa_config *cfg, uint16_t ird, uint16_t ord,
		     const void *pd, uint16_t pd_len, struct peer *p, struct mpa_params *reply,
		     struct mpa_negotiated *neg, uint8_t *term)
{
	pthread_t t;
	int rc;

	assert_int_equal(pthread_create(&t, NULL, responder, p), 0);
	rc = mpa_initiate(c->ini, cfg, ird, ord, pd, pd_len, reply, neg, term);
	assert_int_equal(pthread_join(t, NULL), 0);
	return rc;
}

static void assert_mirror(const struct mpa_negotiated *i, const struct mpa_negotiated *r)
{
	assert_true(i->initiator);
	assert_false(r->initiator);
	assert_int_equal(i->rev, r->rev);
	assert_int_equal(i->crc, r->crc);
	assert_int_equal(i->p2p, r->p2p);
	assert_int_equal(i->rtr, r->rtr);
	assert_int_equal(i->ord, r->ird);
	assert_int_equal(i->ird, r->ord);
}

/* Rev 2, P2P, Write and Read offered: Write is chosen, both ends agree. */
static void test_default_write_rtr(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params reply;
	struct mpa_negotiated neg;
	struct peer p;
	uint8_t term = 0xee;

	mpa_config_default(&cfg);
	assert_int_equal(cfg.rev, MPA_REV_2);
	assert_true(cfg.crc);
	assert_false(cfg.crc_required);
	assert_true(cfg.p2p);
	assert_int_equal(cfg.rtr_offer, MPA_RTR_WRITE | MPA_RTR_READ);
	assert_int_equal(cfg.timeout_ms, 10000);

	peer_init(&p, c);
	p.ird = 2;
	p.ord = 16;
	assert_int_equal(handshake(c, &cfg, 4, 8, NULL, 0, &p, &reply, &neg, &term), 0);
	assert_int_equal(p.rc_req, 0);
	assert_int_equal(p.rc_rep, 0);
	assert_int_equal(term, 0);
	/* what the responder saw */
	assert_int_equal(p.req.rev, 2);
	assert_true(p.req.enhanced);
	assert_true(p.req.p2p);
	assert_true(p.req.crc);
	assert_false(p.req.markers);
	assert_int_equal(p.req.rtr, MPA_RTR_WRITE | MPA_RTR_READ);
	assert_int_equal(p.req.ird, 4);
	assert_int_equal(p.req.ord, 8);
	assert_int_equal(p.req.pd_len, 0);
	/* what the initiator saw */
	assert_int_equal(reply.rev, 2);
	assert_true(reply.enhanced);
	assert_true(reply.p2p);
	assert_int_equal(reply.rtr, MPA_RTR_WRITE);
	assert_int_equal(reply.ird, 2);
	assert_int_equal(reply.ord, 4);
	/* outcome */
	assert_int_equal(neg.rtr, MPA_RTR_WRITE);
	assert_true(neg.p2p);
	assert_true(neg.crc);
	assert_int_equal(neg.rev, 2);
	assert_int_equal(neg.ord, 2); /* min(our ORD 8, peer IRD 2) */
	assert_int_equal(neg.ird, 4); /* min(our IRD 4, peer ORD 16) */
	assert_mirror(&neg, &p.neg);
}

/* Only a Read RTR offered, IRD = ORD = 0 on both ends: Read is chosen and
 * both depths it needs are bumped to 1. */
static void test_read_rtr_bumps(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params reply;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	cfg.rtr_offer = MPA_RTR_READ;
	peer_init(&p, c);
	p.ird = 0;
	p.ord = 0;
	assert_int_equal(handshake(c, &cfg, 0, 0, NULL, 0, &p, &reply, &neg, NULL), 0);
	assert_int_equal(p.rc_rep, 0);
	assert_int_equal(p.req.rtr, MPA_RTR_READ);
	assert_int_equal(p.req.ord, 1); /* raised in the request */
	assert_int_equal(neg.rtr, MPA_RTR_READ);
	assert_true(neg.ord >= 1);
	assert_true(p.neg.ird >= 1);
	assert_int_equal(reply.rtr, MPA_RTR_READ);
	assert_true(reply.ird >= 1);
	assert_mirror(&neg, &p.neg);
}

/* Only a Send RTR offered: Send is chosen (the B bit in the IRD word). */
static void test_send_rtr(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	cfg.rtr_offer = MPA_RTR_SEND;
	peer_init(&p, c);
	assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL), 0);
	assert_int_equal(p.req.rtr, MPA_RTR_SEND);
	assert_int_equal(neg.rtr, MPA_RTR_SEND);
	assert_mirror(&neg, &p.neg);
}

/* P2P off: no A, no RTR, IRD/ORD still exchanged. */
static void test_no_p2p(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	cfg.p2p = false;
	peer_init(&p, c);
	p.ird = 3;
	p.ord = 3;
	assert_int_equal(handshake(c, &cfg, 5, 2, NULL, 0, &p, NULL, &neg, NULL), 0);
	assert_false(p.req.p2p);
	assert_int_equal(p.req.rtr, 0);
	assert_false(neg.p2p);
	assert_int_equal(neg.rtr, 0);
	assert_int_equal(neg.ord, 2);
	assert_int_equal(neg.ird, 3);
	assert_mirror(&neg, &p.neg);
}

/* Private data of 0, 1 and 252 bytes each way (252 + the 4-byte word =
 * 256, the interop limit). */
static void test_private_data_sizes(void **state)
{
	static const uint16_t sizes[] = {0, 1, 252};
	uint8_t a[252], b[252];

	(void)state;
	for (int i = 0; i < 252; i++) {
		a[i] = (uint8_t)(i + 1);
		b[i] = (uint8_t)(0xff - i);
	}
	for (unsigned s = 0; s < 3; s++) {
		struct conn *c;
		struct mpa_config cfg;
		struct mpa_params reply;
		struct mpa_negotiated neg;
		struct peer p;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		peer_init(&p, c);
		p.pd = b;
		p.pd_len = sizes[s];
		assert_int_equal(handshake(c, &cfg, 1, 1, a, sizes[s], &p, &reply, &neg, NULL), 0);
		assert_int_equal(p.rc_rep, 0);
		assert_int_equal(p.req.pd_len, sizes[s]);
		assert_int_equal(reply.pd_len, sizes[s]);
		if (sizes[s]) {
			assert_memory_equal(p.req.pd, a, sizes[s]);
			assert_memory_equal(reply.pd, b, sizes[s]);
		}
		teardown(&st);
	}
}

/* 253 bytes is one too many, on every sending path; nothing goes out. */
static void test_private_data_too_long(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	static uint8_t pd[MPA_MAX_PD];

	mpa_config_default(&cfg);
	memset(&req, 0, sizeof(req));
	req.rev = 2;
	req.enhanced = true;
	req.ird = req.ord = 1;
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, pd, 253, NULL, NULL, NULL), -EMSGSIZE);
	assert_int_equal(mpa_send_accept(c->resp, &cfg, &req, 1, 1, pd, 253, NULL), -EMSGSIZE);
	assert_int_equal(mpa_send_reject(c->resp, &req, pd, 253), -EMSGSIZE);
	assert_true(raw_quiet(c->rfd, 50));
	assert_true(raw_quiet(c->ini->fd, 50));
}

/* A reject with private data: -ECONNREFUSED, the data reaches the user. */
static void test_reject_with_pd(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params reply;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	peer_init(&p, c);
	p.reject = true;
	p.pd = "go away";
	p.pd_len = 7;
	assert_int_equal(handshake(c, &cfg, 1, 1, "hi", 2, &p, &reply, &neg, NULL), -ECONNREFUSED);
	assert_int_equal(p.rc_rep, 0);
	assert_int_equal(reply.pd_len, 7);
	assert_memory_equal(reply.pd, "go away", 7);
	assert_int_equal(reply.rev, 2);
}

/* The reject's layout: rev 2 + E request → R|E, the word (zero), the data;
 * rev 1 request → R, rev 1, just the data. */
static void test_reject_layout(void **state)
{
	struct conn *c = *state;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0xc0, 0x01};
	struct mpa_params req;
	size_t n;

	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_reject(c->ini, &req, "no", 2), 0);
	assert_int_equal(raw_read(c->rfd, got, 26), 0);
	{
		static const uint8_t exp[26] = {'M',  'P',  'A', ' ', 'I', 'D', ' ', 'R',  'e',
						'p',  ' ',  'F', 'r', 'a', 'm', 'e', 0x30, 0x02,
						0x00, 0x06, 0,	 0,   0,   0,	'n', 'o'};

		assert_memory_equal(got, exp, 26);
	}

	n = build_frame(frame, MPA_KEY_REQ, 0x40, 1, NULL, 0);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_reject(c->ini, &req, "no", 2), 0);
	assert_int_equal(raw_read(c->rfd, got, 22), 0);
	assert_memory_equal(got, MPA_KEY_REP, 16);
	assert_int_equal(got[16], 0x20);
	assert_int_equal(got[17], 1);
	assert_int_equal(got[18], 0);
	assert_int_equal(got[19], 2);
	assert_memory_equal(got + 20, "no", 2);
}

/* With markers configured off (UIWARP_MPA_MARKERS=0), a request asking for
 * them is answered with a reject (R, no M) and the responder returns
 * -EPROTO. */
static void test_markers_request_rejected(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0xc0, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.markers = false;
	n = build_frame(frame, MPA_KEY_REQ, MPA_FLAG_MARKERS | MPA_FLAG_CRC | MPA_FLAG_ENHANCED, 2,
			word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_true(req.markers);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, NULL), -EPROTO);
	assert_int_equal(raw_read(c->rfd, got, 20), 0);
	assert_memory_equal(got, MPA_KEY_REP, 16);
	assert_true(got[16] & MPA_FLAG_REJECT);
	assert_false(got[16] & MPA_FLAG_MARKERS);
	assert_int_equal(got[17], 2);
}

/* Our initiator never asks for markers; with markers configured off
 * (UIWARP_MPA_MARKERS=0) a reply with M is refused (by default it is
 * honoured: test_markers_negotiation). */
static void test_markers_in_reply(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.markers = false;
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0xd0, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -EPROTO);
}

/* A silent peer: -ETIMEDOUT after about the configured time, for the
 * initiator, for the responder, and when only part of a frame arrives. */
static void test_timeouts(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	int64_t t0, dt;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 200;
	t0 = test_now_ms();
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);

	/* the request arrived at the other end; now that end waits for one */
	t0 = test_now_ms();
	assert_int_equal(mpa_recv_request(c->ini, 200, &req), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);

	/* 10 bytes of a header, then nothing: still bounded by 200 ms total */
	assert_int_equal(raw_write(c->rfd, MPA_KEY_REP, 10), 0);
	t0 = test_now_ms();
	assert_int_equal(mpa_recv_request(c->ini, 200, &req), -ETIMEDOUT);
	dt = test_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
}

/* The peer closes instead of answering. */
static void test_peer_closes(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	shutdown(c->rfd, SHUT_WR);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -ECONNRESET);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -ECONNRESET);
}

/* Wrong keys: a Req key in a reply, garbage in a request. */
static void test_bad_key(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	uint8_t frame[64], term = 0xee;
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, &term), -EPROTO);
	assert_int_equal(term, 0);

	n = build_frame(frame, "MPA ID Req Fram!", 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
}

/* Revisions other than 1 and 2 are refused. */
static void test_bad_revision(void **state)
{
	struct conn *c = *state;
	struct mpa_params req;
	uint8_t frame[64];
	size_t n;

	n = build_frame(frame, MPA_KEY_REQ, 0x40, 3, NULL, 0);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
	n = build_frame(frame, MPA_KEY_REQ, 0x40, 0, NULL, 0);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
}

/* Rev 1 through our own initiator: no word, rev 1 reply, no RTR. */
static void test_rev1_handshake(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params reply;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	cfg.rev = MPA_REV_1;
	peer_init(&p, c);
	p.pd = "r1";
	p.pd_len = 2;
	assert_int_equal(handshake(c, &cfg, 4, 4, "abc", 3, &p, &reply, &neg, NULL), 0);
	assert_int_equal(p.rc_rep, 0);
	assert_int_equal(p.req.rev, 1);
	assert_false(p.req.enhanced);
	assert_int_equal(p.req.pd_len, 3);
	assert_memory_equal(p.req.pd, "abc", 3);
	assert_int_equal(p.req.ird, 1); /* unknown: assumed 1 */
	assert_int_equal(p.req.ord, 1);
	assert_int_equal(reply.rev, 1);
	assert_int_equal(reply.pd_len, 2);
	assert_memory_equal(reply.pd, "r1", 2);
	assert_int_equal(neg.rev, 1);
	assert_int_equal(p.neg.rev, 1);
	assert_false(neg.p2p);
	assert_int_equal(neg.rtr, 0);
	assert_int_equal(neg.ord, 1);
	assert_int_equal(neg.ird, 1);
	assert_true(neg.crc);
}

/* A hand-written rev 1 request (its reserved 0x10 bit set, which rev 1 does
 * not define): accepted, and answered with a rev 1 reply without a word. */
static void test_rev1_raw(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	size_t n;

	mpa_config_default(&cfg);
	n = build_frame(frame, MPA_KEY_REQ, 0x10, 1, "xyz", 3);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(req.rev, 1);
	assert_false(req.enhanced);
	assert_false(req.crc);
	assert_int_equal(req.pd_len, 3);
	assert_memory_equal(req.pd, "xyz", 3);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 8, 8, "ok", 2, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 22), 0);
	{
		static const uint8_t exp[22] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p',
						' ', 'F', 'r', 'a', 'm', 'e',
						/* C, and the default large-FPDU bit */
						0x48, 0x01, 0x00, 0x02, 'o', 'k'};

		assert_memory_equal(got, exp, 22);
	}
	assert_int_equal(neg.rev, 1);
	assert_true(neg.crc); /* we asked */
	assert_false(neg.p2p);
	assert_int_equal(neg.ird, 1);
	assert_int_equal(neg.ord, 1);
}

/* CRC on when either side asks, off only when neither does. */
static void test_crc_negotiation(void **state)
{
	static const bool combos[3][2] = {{false, true}, {true, false}, {false, false}};

	(void)state;
	for (int k = 0; k < 3; k++) {
		struct conn *c;
		struct mpa_config cfg;
		struct mpa_negotiated neg;
		struct peer p;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		cfg.crc = combos[k][0];
		peer_init(&p, c);
		p.cfg.crc = combos[k][1];
		assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL), 0);
		assert_int_equal(p.req.crc, combos[k][0]);
		assert_int_equal(neg.crc, combos[k][0] || combos[k][1]);
		assert_mirror(&neg, &p.neg);
		teardown(&st);
	}
}

/* crc_required: a reply without C is refused; our own responder, even with
 * crc off, mirrors the request's C and passes. */
static void test_crc_required(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64], got[24];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.crc = false;
	cfg.crc_required = true;
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, MPA_FLAG_ENHANCED, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -EPROTO);
	/* crc_required alone still puts C in the request */
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], MPA_FLAG_CRC | MPA_FLAG_ENHANCED | MPA_FLAG_LARGE_FPDU);
}

static void test_crc_required_vs_our_responder(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_negotiated neg;
	struct peer p;

	mpa_config_default(&cfg);
	cfg.crc_required = true;
	peer_init(&p, c);
	p.cfg.crc = false;
	assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL), 0);
	assert_true(neg.crc);
	assert_true(p.neg.crc);
}

/* The request's bytes: key, C|E = 0x50, rev 2, PD_Length 4 (+ ULP data),
 * IRD word A|1 = 80 01, ORD word C|D|1 = c0 01 (RFC 6581 §5). */
static void test_request_layout(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	static const uint8_t exp[27] = {'M',  'P',  'A',  ' ',	'I',  'D',  ' ', 'R',  'e',
					'q',  ' ',  'F',  'r',	'a',  'm',  'e', 0x58, 0x02,
					0x00, 0x07, 0x80, 0x01, 0xc0, 0x01, 'x', 'y',  'z'};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	/* the reply is already waiting when the initiator starts */
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, "xyz", 3, NULL, NULL, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 27), 0);
	assert_memory_equal(got, exp, 27);
	assert_true(raw_quiet(c->rfd, 20));
}

/* The reply's bytes for siw's default P2P request (8001c001 → 80018001). */
static void test_reply_layout(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0xc0, 0x01};
	static const uint8_t exp[24] = {'M',  'P',  'A',  ' ',	'I',  'D',  ' ',  'R',
					'e',  'p',  ' ',  'F',	'r',  'a',  'm',  'e',
					0x58, 0x02, 0x00, 0x04, 0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_memory_equal(got, exp, 24);
}

/* IRD/ORD above 14 bits are clamped to 0x3FFF on the wire; a peer's 0x3FFF
 * means "no limit" and leaves our own value. */
static void test_ird_ord_clamp(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x05, 0x80, 0x07};
	struct mpa_negotiated neg;
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 0xffff, 0x4000, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	/* A | 0x3fff, C | D | 0x3fff */
	assert_int_equal(got[20], 0xbf);
	assert_int_equal(got[21], 0xff);
	assert_int_equal(got[22], 0xff);
	assert_int_equal(got[23], 0xff);
	assert_int_equal(neg.ord, 5);
	assert_int_equal(neg.ird, 7);
}

static void test_ird_ord_no_limit(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_negotiated neg;
	struct peer p;

	/* our initiator sends 0x3FFF/0x3FFF; our responder keeps its 5/7 */
	mpa_config_default(&cfg);
	peer_init(&p, c);
	p.ird = 5;
	p.ord = 7;
	assert_int_equal(handshake(c, &cfg, 0x3fff, 0x3fff, NULL, 0, &p, NULL, &neg, NULL), 0);
	assert_int_equal(p.req.ird, 0x3fff);
	assert_int_equal(p.neg.ird, 5);
	assert_int_equal(p.neg.ord, 7);
	assert_mirror(&neg, &p.neg);
}

static void test_peer_reply_no_limit(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64];
	static const uint8_t word[4] = {0xbf, 0xff, 0xbf, 0xff};
	struct mpa_negotiated neg;
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 4, 8, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(neg.rtr, MPA_RTR_WRITE);
	assert_int_equal(neg.ord, 8);
	assert_int_equal(neg.ird, 4);
}

/* The first FPDU may arrive in the same segment as the reply: the
 * initiator must leave it in the stream. */
static void test_no_read_beyond_reply(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64], after[8];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	memcpy(frame + n,
	       "\x00\x0e"
	       "FPDU..",
	       8);
	assert_int_equal(raw_write(c->rfd, frame, n + 8), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), 0);
	assert_int_equal(uiw_stream_recv_exact(c->ini, after, 8, 1000), 0);
	assert_memory_equal(after,
			    "\x00\x0e"
			    "FPDU..",
			    8);
}

/* Replies whose RTR we cannot use: -EPROTO with MPA_TERM_NO_MATCHING_RTR. */
static void test_rtr_mismatch(void **state)
{
	static const uint8_t words[][4] = {
	    {0x80, 0x01, 0x40, 0x01}, /* READ, not offered */
	    {0x80, 0x01, 0x00, 0x01}, /* A but no RTR */
	    {0x80, 0x01, 0xc0, 0x01}, /* two RTR kinds */
	    {0x00, 0x01, 0x80, 0x01}, /* no A */
	    {0xc0, 0x01, 0x00, 0x01}, /* SEND, not offered */
	};

	(void)state;
	for (unsigned k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		struct conn *c;
		struct mpa_config cfg;
		uint8_t frame[64], term = 0;
		size_t n;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		cfg.rtr_offer = MPA_RTR_WRITE;
		cfg.timeout_ms = 2000;
		n = build_frame(frame, MPA_KEY_REP, 0x50, 2, words[k], 4);
		assert_int_equal(raw_write(c->rfd, frame, n), 0);
		assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, &term),
				 -EPROTO);
		assert_int_equal(term, MPA_TERM_NO_MATCHING_RTR);
		teardown(&st);
	}
}

/* A Read RTR chosen by a peer that advertises IRD 0 cannot be sent. */
static void test_read_rtr_peer_ird0(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	uint8_t frame[64], term = 0;
	static const uint8_t word[4] = {0x80, 0x00, 0x40, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, &term), -EPROTO);
	assert_int_equal(term, MPA_TERM_INSUFFICIENT_IRD);
}

/* Other malformed replies: wrong revision, rev 2 without the word when we
 * sent one, PD_Length over 512. */
static void test_bad_replies(void **state)
{
	struct {
		uint8_t flags, rev;
		uint16_t pd_len;
		uint8_t term;
	} cases[] = {
	    {0x50, 1, 4, 0},
	    {0x40, 2, 0, MPA_TERM_BAD_REQREP},
	    {0x50, 2, 2, 0}, /* E but too short for the word */
	    {0x50, 2, 513, 0},
	};
	static uint8_t pd[600];

	(void)state;
	pd[0] = 0x80;
	pd[1] = 0x01;
	pd[2] = 0x80;
	pd[3] = 0x01;
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct conn *c;
		struct mpa_config cfg;
		uint8_t frame[700], term = 0xee;
		size_t n;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		cfg.timeout_ms = 2000;
		n = build_frame(frame, MPA_KEY_REP, cases[k].flags, cases[k].rev, pd,
				cases[k].pd_len);
		assert_int_equal(raw_write(c->rfd, frame, n), 0);
		assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, &term),
				 -EPROTO);
		assert_int_equal(term, cases[k].term);
		teardown(&st);
	}
}

/* A request with PD_Length 513 is refused; 512 (the RFC maximum) is read. */
static void test_request_pd_length_limit(void **state)
{
	struct conn *c = *state;
	struct mpa_params req;
	static uint8_t frame[20 + 513], pd[513];
	size_t n;

	pd[0] = 0x80;
	pd[1] = 0x01;
	pd[2] = 0xc0;
	pd[3] = 0x01;
	pd[511] = 0x5a;
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, pd, 512);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(req.pd_len, 508);
	assert_int_equal(req.pd[507], 0x5a);
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, pd, 513);
	assert_int_equal(raw_write(c->rfd, frame, 20), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
}

/* Reserved flag bits are ignored on receive (siw uses 0x08 for its GSO
 * experiment) and never sent (checked in the layout tests). */
static void test_reserved_bits_ignored(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x5f, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(neg.rtr, MPA_RTR_WRITE);

	n = build_frame(frame, MPA_KEY_REQ, 0x5f, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_true(req.crc);
	assert_true(req.enhanced);
}

/* Bad arguments. */
static void test_bad_args(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;

	mpa_config_default(&cfg);
	assert_int_equal(mpa_initiate(c->ini, NULL, 1, 1, NULL, 0, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 3, NULL, NULL, NULL), -EINVAL);
	cfg.rev = 3;
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -EINVAL);
	memset(&req, 0, sizeof(req));
	mpa_config_default(&cfg);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, NULL), -EINVAL);
	assert_int_equal(mpa_recv_request(c->ini, 0, NULL), -EINVAL);
	assert_true(raw_quiet(c->rfd, 20));
}

/* ------------------------------------------------------------ issue 3 */

/* Markers are negotiated per direction (RFC 5044 §7.1: M declares the
 * receiver's requirement): the Request's M makes the responder insert them,
 * the Reply's M the initiator. Both ends agree on each direction. */
static void test_markers_negotiation(void **state)
{
	static const struct {
		bool i_markers, i_want, r_markers, r_want;
		int rc;
		bool i_tx, i_rx;
	} cases[] = {
	    {true, true, true, false, 0, false, true},	      /* responder -> initiator */
	    {true, false, true, false, 0, false, false},      /* the defaults, nobody asks */
	    {true, false, true, true, 0, true, false},	      /* initiator -> responder */
	    {true, true, true, true, 0, true, true},	      /* both ways */
	    {false, false, true, false, 0, false, false},     /* nobody asks */
	    {false, false, false, true, -EPROTO, 0, 0},	      /* reply M, initiator off */
	    {false, true, false, false, -ECONNREFUSED, 0, 0}, /* request M, responder off */
	};

	(void)state;
	/* the default (UIWARP_MPA_MARKERS=1) honours a peer's M and never
	 * asks: the first two rows */
	struct mpa_config def;
	mpa_config_default(&def);
	assert_true(def.markers);
	assert_false(def.want_markers);
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct conn *c;
		struct mpa_config cfg;
		struct mpa_negotiated neg;
		struct peer p;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		cfg.timeout_ms = 2000;
		cfg.markers = cases[k].i_markers;
		cfg.want_markers = cases[k].i_want;
		peer_init(&p, c);
		p.cfg.markers = cases[k].r_markers;
		p.cfg.want_markers = cases[k].r_want;
		memset(&neg, 0x5a, sizeof(neg));
		assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL),
				 cases[k].rc);
		assert_int_equal(p.req.markers, cases[k].i_want);
		if (cases[k].rc == 0) {
			assert_int_equal(neg.markers_tx, cases[k].i_tx);
			assert_int_equal(neg.markers_rx, cases[k].i_rx);
			assert_int_equal(p.neg.markers_tx, cases[k].i_rx);
			assert_int_equal(p.neg.markers_rx, cases[k].i_tx);
			assert_mirror(&neg, &p.neg);
		}
		teardown(&st);
	}
}

/* The M bit on the wire: 0xd0 (M|C|E) in a Request that asks; the Reply
 * of a responder that asks has M too. */
static void test_markers_wire(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	cfg.markers = true;
	cfg.want_markers = true;
	n = build_frame(frame, MPA_KEY_REP, 0xd0, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0xd0 | MPA_FLAG_LARGE_FPDU);
	assert_true(neg.markers_tx);
	assert_true(neg.markers_rx);

	n = build_frame(frame, MPA_KEY_REQ, 0xd0, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_memory_equal(got, MPA_KEY_REP, 16);
	assert_int_equal(got[16], 0xd0 | MPA_FLAG_LARGE_FPDU);
	assert_true(neg.markers_tx);
	assert_true(neg.markers_rx);
}

/* After a handshake with markers both ways, mpa_conn_init follows neg and
 * FPDUs cross in both directions with markers from stream offset 0 (the
 * first octet after each side's frame). */
static void test_markers_after_handshake(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_negotiated neg;
	struct peer p;
	struct mpa_conn ci, cr;
	static uint8_t pl[3000], got[3000];
	uint8_t hdr[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, h[14];

	mpa_config_default(&cfg);
	cfg.markers = cfg.want_markers = true;
	peer_init(&p, c);
	p.cfg.markers = p.cfg.want_markers = true;
	assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL), 0);
	assert_int_equal(mpa_conn_init(&ci, c->ini, &neg), 0);
	assert_int_equal(mpa_conn_init(&cr, c->resp, &p.neg), 0);
	assert_true(ci.markers_tx && ci.markers_rx && cr.markers_tx && cr.markers_rx);
	for (size_t i = 0; i < sizeof(pl); i++)
		pl[i] = (uint8_t)(i * 13);
	for (int dir = 0; dir < 2; dir++) {
		struct mpa_conn *tx = dir ? &cr : &ci, *rx = dir ? &ci : &cr;
		struct iovec v = {pl, sizeof(pl)};

		for (int f = 0; f < 3; f++) {
			assert_int_equal(mpa_tx_fpdu(tx, hdr, 14, &v, 1), 0);
			assert_int_equal(t_tx_flush(tx), 0);
			struct iovec o = {got, sizeof(got)};
			memset(got, 0, sizeof(got));
			assert_int_equal(t_rx_begin(rx, h, 14), 14 + (int)sizeof(pl));
			assert_memory_equal(h, hdr, 14);
			assert_int_equal(t_rx_small(rx, &o, 1, sizeof(pl)), 0);
			assert_memory_equal(got, pl, sizeof(pl));
		}
		assert_int_equal(rx->rx_off, tx->tx_off);
	}
	mpa_conn_fini(&ci);
	mpa_conn_fini(&cr);
}

/* uiwarp's RFC 7306 bit (reserved flag 0x01, mpa_wire.h): on/on -> both
 * true, on/off and off/on -> false; the responder echoes it only when
 * asked; a default Request's flags byte is unchanged (0x50). */
static void test_rfc7306_bit(void **state)
{
	static const bool combos[4][2] = {
	    {true, true}, {true, false}, {false, true}, {false, false}};

	(void)state;
	for (int k = 0; k < 4; k++) {
		struct conn *c;
		struct mpa_config cfg;
		struct mpa_negotiated neg;
		struct peer p;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		cfg.rfc7306 = combos[k][0];
		peer_init(&p, c);
		p.cfg.rfc7306 = combos[k][1];
		assert_int_equal(handshake(c, &cfg, 1, 1, NULL, 0, &p, NULL, &neg, NULL), 0);
		assert_int_equal(p.req.rfc7306, combos[k][0]);
		assert_int_equal(neg.rfc7306, combos[k][0] && combos[k][1]);
		assert_int_equal(p.neg.rfc7306, combos[k][0] && combos[k][1]);
		assert_mirror(&neg, &p.neg);
		teardown(&st);
	}
}

/* siw's large-FPDU bit (reserved flag 0x08, mpa_wire.h): we announce it by
 * default, in the Request and in the Reply (whatever the Request said), and
 * send large FPDUs only to a peer whose frame has it, never with markers. */
static void test_large_fpdu_bit(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	assert_true(cfg.large_fpdu);
	cfg.timeout_ms = 2000;
	/* initiator: the peer announces it too -> large FPDUs */
	n = build_frame(frame, MPA_KEY_REP, 0x58, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x58);
	assert_true(neg.large_tx);
	/* the peer does not (hardware, siw without try_gso) -> MSS-sized */
	n = build_frame(frame, MPA_KEY_REP, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_false(neg.large_tx);
	/* turned off here: not announced, not used even if the peer has it */
	cfg.large_fpdu = false;
	n = build_frame(frame, MPA_KEY_REP, 0x58, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x50);
	assert_false(neg.large_tx);
	/* responder, default: announces it whatever the request said */
	mpa_config_default(&cfg);
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_false(req.large_fpdu);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x58);
	assert_false(neg.large_tx);
	n = build_frame(frame, MPA_KEY_REQ, 0x58, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_true(req.large_fpdu);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_true(neg.large_tx);
	/* markers towards the peer: every FPDU fits a segment */
	cfg.markers = true;
	n = build_frame(frame, MPA_KEY_REQ, 0xd8, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_true(neg.markers_tx);
	assert_false(neg.large_tx);
	/* responder off: no bit, no large FPDUs */
	mpa_config_default(&cfg);
	cfg.large_fpdu = false;
	n = build_frame(frame, MPA_KEY_REQ, 0x58, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x50);
	assert_false(neg.large_tx);
}

static void test_rfc7306_wire(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	/* default: 0x50, and a reply with 0x01 does not turn it on */
	mpa_config_default(&cfg);
	assert_false(cfg.rfc7306);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x51, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x50 | MPA_FLAG_LARGE_FPDU);
	assert_false(neg.rfc7306);
	/* on: 0x51 in the Request */
	cfg.rfc7306 = true;
	n = build_frame(frame, MPA_KEY_REP, 0x51, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, &neg, NULL), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x51 | MPA_FLAG_LARGE_FPDU);
	assert_true(neg.rfc7306);
	/* responder on, request without it: reply 0x50 */
	n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_false(req.rfc7306);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x50 | MPA_FLAG_LARGE_FPDU);
	assert_false(neg.rfc7306);
	/* responder on, request with it: reply 0x51 */
	n = build_frame(frame, MPA_KEY_REQ, 0x51, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_true(req.rfc7306);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], 0x51 | MPA_FLAG_LARGE_FPDU);
	assert_true(neg.rfc7306);
	/* a reject never carries it */
	assert_int_equal(mpa_send_reject(c->ini, &req, NULL, 0), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], MPA_FLAG_REJECT | MPA_FLAG_ENHANCED);
}

/* A Request in a revision above 2 gets a Reply rejecting it in revision 2
 * (our highest), with no private data; revision 0 is just refused. A
 * Reply in a revision above 2 is refused by our initiator. */
static void test_rev_above_2(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	for (uint8_t rev = 3; rev != 0; rev = rev == 3 ? 0xff : 0) {
		n = build_frame(frame, MPA_KEY_REQ, 0x50, rev, word, 4);
		assert_int_equal(raw_write(c->rfd, frame, n), 0);
		assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
		assert_int_equal(raw_read(c->rfd, got, 20), 0);
		assert_memory_equal(got, MPA_KEY_REP, 16);
		assert_int_equal(got[16], MPA_FLAG_REJECT);
		assert_int_equal(got[17], 2);
		assert_int_equal(got[18], 0);
		assert_int_equal(got[19], 0);
		teardown(state);
		assert_int_equal(setup(state), 0);
		c = *state;
	}
	n = build_frame(frame, MPA_KEY_REQ, 0x40, 0, NULL, 0);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), -EPROTO);
	assert_true(raw_quiet(c->rfd, 50));

	mpa_config_default(&cfg);
	cfg.timeout_ms = 2000;
	n = build_frame(frame, MPA_KEY_REP, 0x50, 3, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_initiate(c->ini, &cfg, 1, 1, NULL, 0, NULL, NULL, NULL), -EPROTO);
}

/* A rev 1 Request (an old peer) is answered in rev 1, without the RFC 6581
 * word even when we would do P2P, and with markers when asked and allowed. */
static void test_rev1_request_markers(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	size_t n;

	mpa_config_default(&cfg);
	cfg.markers = true;
	n = build_frame(frame, MPA_KEY_REQ, MPA_FLAG_MARKERS, 1, "ab", 2);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_int_equal(req.rev, 1);
	assert_int_equal(req.pd_len, 2);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 4, 4, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 20), 0);
	assert_int_equal(got[16], MPA_FLAG_CRC | MPA_FLAG_LARGE_FPDU);
	assert_int_equal(got[17], 1);
	assert_int_equal(got[19], 0);
	assert_true(raw_quiet(c->rfd, 20));
	assert_int_equal(neg.rev, 1);
	assert_false(neg.p2p);
	assert_true(neg.markers_tx);
	assert_false(neg.markers_rx);
	assert_true(neg.crc);
}

/* crc_required as responder: a Request without C gets a Reply with C, so
 * CRC is on both ways (RFC 5044 §7.1: either side's C turns it on); no
 * reject is needed or sent. */
static void test_crc_required_responder(void **state)
{
	struct conn *c = *state;
	struct mpa_config cfg;
	struct mpa_params req;
	struct mpa_negotiated neg;
	uint8_t frame[64], got[64];
	static const uint8_t word[4] = {0x80, 0x01, 0x80, 0x01};
	size_t n;

	mpa_config_default(&cfg);
	cfg.crc = false;
	cfg.crc_required = true;
	n = build_frame(frame, MPA_KEY_REQ, MPA_FLAG_ENHANCED, 2, word, 4);
	assert_int_equal(raw_write(c->rfd, frame, n), 0);
	assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
	assert_false(req.crc);
	assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 1, 1, NULL, 0, &neg), 0);
	assert_int_equal(raw_read(c->rfd, got, 24), 0);
	assert_int_equal(got[16], MPA_FLAG_CRC | MPA_FLAG_ENHANCED | MPA_FLAG_LARGE_FPDU);
	assert_true(neg.crc);
}

/* The responder's RTR choice for each offer (RFC 6581, interop notes §1.4):
 * WRITE if offered, else READ, else SEND (the B bit in the IRD word), and
 * none when none is offered; the reply always echoes A. */
static void test_responder_rtr_choice(void **state)
{
	static const struct {
		uint8_t ird_hi, ord_hi; /* offer bits in the request's words */
		uint8_t rtr;		/* chosen */
		uint8_t rep_ird_hi, rep_ord_hi;
	} cases[] = {
	    {0xc0, 0xc0, MPA_RTR_WRITE, 0x80, 0x80}, /* all three */
	    {0xc0, 0x40, MPA_RTR_READ, 0x80, 0x40},  /* SEND | READ */
	    {0xc0, 0x00, MPA_RTR_SEND, 0xc0, 0x00},  /* SEND only */
	    {0x80, 0x00, 0, 0x80, 0x00},	     /* P2P, nothing offered */
	    {0x00, 0xc0, 0, 0x00, 0x00},	     /* RTR bits without A: no P2P */
	};

	(void)state;
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct conn *c;
		struct mpa_config cfg;
		struct mpa_params req;
		struct mpa_negotiated neg;
		uint8_t frame[64], got[64];
		uint8_t word[4] = {cases[k].ird_hi, 0x02, cases[k].ord_hi, 0x02};
		size_t n;
		void *st;

		assert_int_equal(setup(&st), 0);
		c = st;
		mpa_config_default(&cfg);
		n = build_frame(frame, MPA_KEY_REQ, 0x50, 2, word, 4);
		assert_int_equal(raw_write(c->rfd, frame, n), 0);
		assert_int_equal(mpa_recv_request(c->ini, 1000, &req), 0);
		assert_int_equal(mpa_send_accept(c->ini, &cfg, &req, 2, 2, NULL, 0, &neg), 0);
		assert_int_equal(raw_read(c->rfd, got, 24), 0);
		assert_int_equal(neg.rtr, cases[k].rtr);
		assert_int_equal(got[20], cases[k].rep_ird_hi | 0x00);
		assert_int_equal(got[22], cases[k].rep_ord_hi);
		teardown(&st);
	}
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_default_write_rtr),
	    T(test_read_rtr_bumps),
	    T(test_send_rtr),
	    T(test_no_p2p),
	    cmocka_unit_test(test_private_data_sizes),
	    T(test_private_data_too_long),
	    T(test_reject_with_pd),
	    T(test_reject_layout),
	    T(test_markers_request_rejected),
	    T(test_markers_in_reply),
	    T(test_timeouts),
	    T(test_peer_closes),
	    T(test_bad_key),
	    T(test_bad_revision),
	    T(test_rev1_handshake),
	    T(test_rev1_raw),
	    cmocka_unit_test(test_crc_negotiation),
	    T(test_crc_required),
	    T(test_crc_required_vs_our_responder),
	    T(test_request_layout),
	    T(test_reply_layout),
	    T(test_ird_ord_clamp),
	    T(test_ird_ord_no_limit),
	    T(test_peer_reply_no_limit),
	    T(test_no_read_beyond_reply),
	    cmocka_unit_test(test_rtr_mismatch),
	    T(test_read_rtr_peer_ird0),
	    cmocka_unit_test(test_bad_replies),
	    T(test_request_pd_length_limit),
	    T(test_reserved_bits_ignored),
	    T(test_bad_args),
	    cmocka_unit_test(test_markers_negotiation),
	    T(test_markers_wire),
	    T(test_markers_after_handshake),
	    cmocka_unit_test(test_rfc7306_bit),
	    T(test_large_fpdu_bit),
	    T(test_rfc7306_wire),
	    T(test_rev_above_2),
	    T(test_rev1_request_markers),
	    T(test_crc_required_responder),
	    cmocka_unit_test(test_responder_rtr_choice),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
