#!/usr/bin/env python3
"""A Python stand-in for uiw_target, to check the hostile-test harness itself
(hostile_test.py + iwpeer.py) without the uiwarp engine.

Same command line and stdout lines as uiw_target.c: LISTEN, READY, WC,
EVENT TERMINATE / EVENT DISCONNECTED, SURVIVED. It is an MPA responder that
picks the Write RTR, waits for it, places valid tagged Writes into a 64 KiB
"MR" (same pattern as uiw_target), places Sends into 4 x 1024-byte receive
buffers, answers Read Requests, and answers errors with Terminates laid out
as RFC 5040 §4.8 says (Layer/EType/code, M + segment length, D + the
offending DDP header). Payloads up to 4 KiB are CRC-checked before they are
placed, larger ones after (like uiwarp).
"""
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iwpeer as iw  # noqa: E402

MR_LEN = 65536
IOVA = 0x1000000
STAG = 0x2A00
RSTAG = 0x2B00
RIOVA = 0x7F0000
NRECV, RECV_LEN = 4, 1024
STAGE_MAX = 4096


def say(s):
    print(s, flush=True)


class Term(Exception):
    def __init__(self, layer, etype, code, hdr=None, seglen=None):
        self.layer, self.etype, self.code, self.hdr, self.seglen = layer, etype, code, hdr, seglen


def send_terminate(sock, t, crc):
    flags = 0
    extra = b""
    if t.seglen is not None:
        flags |= 0x8000
        extra += struct.pack(">H", t.seglen)
    if t.hdr is not None:
        flags |= 0x4000
        extra += t.hdr
    ctrl = struct.pack(">BBH", (t.layer << 4) | t.etype, t.code, flags) + extra
    sock.sendall(iw.fpdu(iw.untagged(iw.OP_TERMINATE, iw.QN_TERMINATE, 1, 0, ctrl), crc))
    say("EVENT TERMINATE")


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    wait_s = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    mem = bytearray(((i * 7 + 3) & 0xFF) for i in range(MR_LEN))
    orig = bytes(mem)
    rbuf = bytearray(NRECV * RECV_LEN)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(1)
    ls.settimeout(20)
    say("LISTEN port=%d" % ls.getsockname()[1])
    s, _ = ls.accept()
    deadline = time.monotonic() + wait_s

    def refuse(why):
        say("NO_REQUEST %s" % why)
        s.close()
        say("SURVIVED placed_outside=0 changed=0 first=-1 last=-1 rchanged=0 terminate_events=0")
        return 0

    try:
        req = iw.read_mpa_frame(s, deadline)
    except (ValueError, EOFError, TimeoutError) as e:
        return refuse(e)
    if req.key != iw.KEY_REQ or req.rev not in (1, 2):
        return refuse("bad key/rev")
    say("REQUEST ird=%s ord=%s pd_len=%d" % (req.ird, req.ord, len(req.pd)))
    crc = bool(req.flags & iw.F_C)
    if req.flags & iw.F_M:
        s.sendall(iw.mpa_frame(iw.KEY_REP, iw.F_R | (iw.F_C if crc else 0), req.rev, b""))
        say("ACCEPT_FAILED markers")
        return refuse("markers")
    if req.rev == 2 and req.flags & iw.F_E:
        pd = struct.pack(">HH", iw.V2_P2P | 4, iw.V2_RTR_WRITE | 4)
        s.sendall(iw.mpa_frame(iw.KEY_REP, (iw.F_C if crc else 0) | iw.F_E, 2, pd))
        rtr = iw.read_fpdu(s, deadline, crc)
        d = iw.Ddp(rtr.ulpdu)
        if not (rtr.crc_ok and d.tagged and d.opcode == 0 and d.stag == 1 and not d.payload):
            say("ACCEPT_FAILED bad RTR")
            return refuse("bad RTR")
    else:
        s.sendall(iw.mpa_frame(iw.KEY_REP, iw.F_C if crc else 0, req.rev, b""))
    say("READY stag=0x%x iova=0x%x len=%d rstag=0x%x riova=0x%x" %
        (STAG, IOVA, MR_LEN, RSTAG, RIOVA))
    terms = 0
    msn = {0: 1, 1: 1}
    while True:
        try:
            f = iw.read_fpdu(s, deadline, crc)
        except (EOFError, TimeoutError):
            break
        try:
            u = f.ulpdu
            big = len(u) > STAGE_MAX
            if not f.crc_ok and not big:
                raise Term(2, 0, 0x02)
            if len(u) < 2:
                raise Term(1, 0, 0x00)
            tagged = bool(u[0] & 0x80)
            hlen = 14 if tagged else 18
            if len(u) < hlen:
                raise Term(1, 0, 0x00)
            hdr = u[:hlen]
            seg = len(u)
            d = iw.Ddp(u)
            if d.dv != 1:
                raise Term(1, 1 if tagged else 2, 0x04 if tagged else 0x06, hdr, seg)
            if d.rv != 1:
                raise Term(0, 2, 0x05, hdr, seg)
            if tagged:
                if d.opcode not in (iw.OP_WRITE, iw.OP_READ_RESP):
                    raise Term(0, 2, 0x06, hdr, seg)
                if d.stag == RSTAG:
                    raise Term(0, 1, 0x02, hdr, seg)
                if d.stag != STAG:
                    raise Term(1, 1, 0x00, hdr, seg)
                if d.to + len(d.payload) >= 1 << 64:
                    raise Term(1, 1, 0x03, hdr, seg)
                if d.to < IOVA or d.to + len(d.payload) > IOVA + MR_LEN:
                    raise Term(1, 1, 0x01, hdr, seg)
                o = d.to - IOVA
                mem[o:o + len(d.payload)] = d.payload
                if not f.crc_ok:
                    raise Term(2, 0, 0x02)
                continue
            if d.opcode == iw.OP_TERMINATE and d.qn == iw.QN_TERMINATE:
                say("EVENT TERMINATE")  # received: close, never answer it
                terms += 1
                break
            if d.opcode in (iw.OP_SEND, iw.OP_SEND_SE):
                if d.qn != 0:
                    raise Term(1, 2, 0x01, hdr, seg)
                if d.msn < msn[0] or d.msn >= msn[0] + NRECV:
                    raise Term(1, 2, 0x03, hdr, seg)
                if d.mo >= RECV_LEN:
                    raise Term(1, 2, 0x04, hdr, seg)
                if d.mo + len(d.payload) > RECV_LEN:
                    raise Term(1, 2, 0x05, hdr, seg)
                i = d.msn - 1
                rbuf[i * RECV_LEN + d.mo:i * RECV_LEN + d.mo + len(d.payload)] = d.payload
                if d.last:
                    say("WC wr_id=%d status=0 opcode=128 byte_len=%d" %
                        (100 + i, d.mo + len(d.payload)))
                    msn[0] += 1
                continue
            if d.opcode == iw.OP_READ_REQ:
                if d.qn != 1:
                    raise Term(1, 2, 0x01, hdr, seg)
                sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ",
                                                                           d.payload[:28])
                if src_stag == RSTAG:
                    raise Term(0, 1, 0x02, hdr, seg)
                if src_stag != STAG:
                    raise Term(0, 1, 0x00, hdr, seg)
                if src_to < IOVA or src_to + size > IOVA + MR_LEN:
                    raise Term(0, 1, 0x01, hdr, seg)
                o = src_to - IOVA
                s.sendall(iw.fpdu(iw.tagged(iw.OP_READ_RESP, sink_stag, sink_to,
                                            bytes(mem[o:o + size])), crc))
                continue
            raise Term(0, 2, 0x06, hdr, seg)
        except Term as t:
            send_terminate(s, t, crc)
            terms += 1
            break
    s.close()
    say("EVENT DISCONNECTED")
    ch = [i for i in range(MR_LEN) if mem[i] != orig[i]]
    say("SURVIVED placed_outside=0 changed=%d first=%d last=%d rchanged=%d terminate_events=%d" %
        (len(ch), ch[0] if ch else -1, ch[-1] if ch else -1, sum(1 for b in rbuf if b), terms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
