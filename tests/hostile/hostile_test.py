#!/usr/bin/env python3
"""Hostile-peer tests: iwpeer.py (an independent Python iWARP peer) against
uiw_target (a uiwarp endpoint on the engine API) over real TCP on loopback.

    hostile_test.py CASE --target PATH/uiw_target

The peer does the MPA handshake as initiator (rev 2, C, E, P2P, IRD/ORD 4/4
with the Write RTR offered), checks the Reply (rev 2, C, E, P2P echoed, Write
RTR picked), sends the Write RTR (zero-length tagged Write, STag 1, TO 0),
waits for the target's READY line (its STag/IOVA/length) and then:

    control       a valid 100-byte RDMA Write into the MR -> exactly those
                  100 bytes change (changed=100), no Terminate
    read_back     a valid RDMA Write, then an RDMA Read Request for the same
                  bytes -> a Read Response to our sink STag carrying them
    send_ok       a valid 100-byte Send -> the first receive completes with
                  100 bytes
    garbage       one FPDU's worth of junk bytes -> a Terminate, then the
                  stream closes, target SURVIVED, changed=0
    bad_crc       an RDMA Write (32 B, into the MR) with a wrong CRC ->
                  Terminate layer 2 (LLP) code 0x02 (CRC), close, changed=0
    unknown_stag  an RDMA Write to an STag nobody registered -> Terminate
                  layer 1 (DDP) etype 1 (tagged) code 0x00 (invalid STag),
                  close, changed=0
    bounds        an RDMA Write running 48 bytes past the end of the MR ->
                  Terminate layer 1 etype 1 code 0x01 (base/bounds), close,
                  changed=0
  and more (ERROR_CASES below): big_bad_crc (8 KiB: may be placed before the
  CRC is known, but only inside the addressed range), before_base, to_wrap,
  ddp_version, rdmap_version, bad_opcode, write_no_access, read_unknown_stag,
  read_bounds, read_no_access, send_too_long, bad_qn, msn_range, bad_mo;
  mpa_rev1 (an MPA rev 1 connection, no RTR, then the control Write);
  send_segments / write_segments (one message in three DDP segments),
  dribble (an FPDU one byte per TCP segment), burst (64 FPDUs in one
  send); peer_terminate (our Terminate must not be answered by one); and
  bad connection setups that must be refused (MPA_CASES: markers asked for,
  a bad key, a bad revision, PD_Length over 512).

RULE_CASES (below) add one case per receive-side rule of issue 3, each with
the exact Terminate expected (see README.md and docs/conformance.md);
KNOWN_BAD lists those the engine does not answer right yet.

Every Terminate must be an untagged DDP segment on QN 2 with RDMAP opcode 7
(RFC 5040 §4.8); its control word is Layer(4) EType(4) ErrCode(8) M D R.
In every case the target must print "SURVIVED placed_outside=0 ..." and
exit 0. Exit status: 0 pass, 1 fail.
"""
import argparse
import os
import queue
import re
import socket
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iwpeer as iw  # noqa: E402

IO_TIMEOUT = 10.0
_PRINT_LOCK = threading.Lock()


def say(msg):
    with _PRINT_LOCK:
        print(msg, flush=True)


def MR_PATTERN(i):
    """Byte i of the target's MR before anything is written (uiw_target.c
    pattern())."""
    return (i * 7 + 3) & 0xFF


class Target:
    def __init__(self, path, wait_s, req_ms, opts="", env=None):
        cmd = [path] if not path.endswith(".py") else [sys.executable, path]
        self.proc = subprocess.Popen(cmd + ["0", str(wait_s), str(req_ms)] +
                                     ([opts] if opts else []),
                                     env=dict(os.environ, **(env or {})),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     bufsize=1, universal_newlines=True, errors="replace")
        self.lines = []
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._reader, daemon=True)
        self.t.start()

    def _reader(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            say("target| " + line)
            self.lines.append(line)
            self.q.put(line)
        self.q.put(None)

    def wait_line(self, regex, timeout):
        """The first line (from now on) matching regex, or None."""
        deadline = time.monotonic() + timeout
        r = re.compile(regex)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            m = r.search(line)
            if m:
                return m

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            say("hostile: target did not exit within %ds (killed)" % timeout)
            rc = "killed"
        self.t.join(timeout=5)
        return rc

    def find(self, regex):
        r = re.compile(regex)
        for line in self.lines:
            m = r.search(line)
            if m:
                return m
        return None


class Failed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failed(msg)
    say("hostile: ok: " + msg)


def read_until_close(sock, crc):
    """Reads FPDUs until the stream closes. Returns (list of Ddp, closed,
    leftover bytes of an incomplete FPDU)."""
    out = []
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        try:
            f = iw.read_fpdu(sock, deadline, crc)
        except EOFError as e:
            return out, True, getattr(e, "partial", b"")
        except TimeoutError:
            return out, False, b""
        if not f.crc_ok:
            say("hostile: FPDU from target with BAD CRC: %s" % f.raw.hex())
        d = iw.Ddp(f.ulpdu)
        d.crc_ok = f.crc_ok
        say("hostile: from target: %s" % d)
        out.append(d)


def terminates_of(ddps):
    ts = []
    for d in ddps:
        if d.opcode == iw.OP_TERMINATE:
            expect(not d.tagged and d.qn == iw.QN_TERMINATE,
                   "Terminate is untagged on QN 2 (tagged=%d qn=%s)" % (d.tagged, d.qn))
            expect(d.last, "Terminate has the L bit")
            expect(d.dv == 1 and d.rv == 1, "Terminate DDP/RDMAP versions are 1")
            expect(d.crc_ok, "Terminate CRC is good")
            t = iw.Terminate(d)
            say("hostile: " + str(t))
            ts.append(t)
    return ts


F_RFC7306 = 0x01  # uiwarp's RFC 7306 offer in the MPA flags (mpa/mpa_wire.h)


def connect(port, crc=True, rev=2, ird=4, ord_=4, rfc7306=False, markers=False):
    """markers: ask for markers (M in the Request). True: from a target
    started with UIWARP_MPA_MARKERS=2, which asks for them too (M in the
    Reply): the returned socket is an iw.MarkedConn with markers both ways.
    "peer": from a target with the default (1), which honours our M without
    asking (no M in the Reply): markers only in what the target sends."""
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    iw.set_nodelay(s)
    deadline = time.monotonic() + IO_TIMEOUT
    rep = iw.initiator_handshake(s, deadline, ird=ird, ord_=ord_, p2p=True, rtr_write=True,
                                 rtr_read=False, crc=crc, rev=rev,
                                 flags_extra=(F_RFC7306 if rfc7306 else 0) |
                                 (iw.F_M if markers else 0))
    if rfc7306:
        expect(rep.flags & F_RFC7306, "MPA Reply accepts uiwarp's RFC 7306 offer")
    say("hostile: reply " + str(rep))
    if rev == 1:
        # RFC 6581 §5: a rev 1 request gets a rev 1 reply; no IRD/ORD word, no RTR
        expect(rep.rev == 1, "MPA Reply rev 1 to a rev 1 request")
        expect(bool(rep.flags & iw.F_C) == crc, "MPA Reply C bit mirrors the request")
        expect(not rep.flags & (iw.F_M | iw.F_E), "MPA Reply has neither M nor E")
        return s
    expect(rep.rev == 2, "MPA Reply rev 2")
    expect(bool(rep.flags & iw.F_C) == crc, "MPA Reply C bit mirrors the request")
    expect(bool(rep.flags & iw.F_E), "MPA Reply has the enhanced (RFC 6581) bit")
    expect(bool(rep.flags & iw.F_M) == (markers is True),
           "MPA Reply %s markers" % ("asks for" if markers is True else "has no"))
    if markers:
        # RFC 5044 §5: marker offsets count from the first octet after the
        # Request (our direction) / the Reply (the target's)
        s = iw.MarkedConn(s, tx=markers is True, rx=True)
    expect(rep.p2p, "MPA Reply echoes P2P (RFC 6581 §9.2)")
    expect(rep.rtr_write and not rep.rtr_read and not rep.rtr_send,
           "MPA Reply picks the Write RTR only")
    expect(rep.ird <= ord_ and rep.ord <= ird,
           "MPA Reply IRD/ORD %d/%d within our ORD/IRD %d/%d (RFC 6581 §5)" %
           (rep.ird, rep.ord, ord_, ird))
    s.sendall(iw.write_rtr(crc))
    return s


# ---------------------------------------------------------------- cases
#
# An error case is a function (ctx) -> (bytes to send, header we expect to be
# echoed in the Terminate or None) plus what must happen: the acceptable
# (layer, etype or None, code) triples of the Terminate, and what the target
# reports afterwards.

class Ctx:
    def __init__(self, stag, iova, length, rstag, riova):
        self.stag, self.iova, self.length = stag, iova, length
        self.rstag, self.riova = rstag, riova
        self.x = {}  # extra regions (uiw_target "extra")
        self.reads = None  # the target's Read Requests (uiw_target "reads")

    def unknown_stag(self):
        bad = self.stag ^ 0x00ABCD00
        if bad in (self.rstag, 1, 0):
            bad = self.stag ^ 0x00CDAB00
        return bad


def raw_tagged(ctrl, rctrl, stag, to, payload):
    return struct.pack(">BBIQ", ctrl, rctrl, stag, to) + payload


def c_garbage(c):
    junk = bytes(((i * 37 + 11) ^ (i >> 3)) & 0xFF for i in range(62))
    return b"\x00\x3a" + junk, None  # ULPDU_Length 58: one 64-byte FPDU


def c_bad_crc(c):
    data = bytes(MR_PATTERN(i) ^ 0x5A for i in range(32))
    return iw.rdma_write(c.stag, c.iova, data, corrupt_crc=True), None


def c_big_bad_crc(c):
    # larger than uiwarp's staging size: placed before the CRC is known
    data = bytes(MR_PATTERN(8192 + i) ^ 0xFF for i in range(8192))
    return iw.rdma_write(c.stag, c.iova + 8192, data, corrupt_crc=True), None


def c_unknown_stag(c):
    hdr = iw.tagged(iw.OP_WRITE, c.unknown_stag(), c.iova)
    return iw.fpdu(hdr + bytes(32)), hdr


def c_bounds(c):
    hdr = iw.tagged(iw.OP_WRITE, c.stag, c.iova + c.length - 16)
    data = bytes(MR_PATTERN(c.length - 16 + i) ^ 0xFF for i in range(64))
    return iw.fpdu(hdr + data), hdr


def c_before_base(c):
    hdr = iw.tagged(iw.OP_WRITE, c.stag, c.iova - 16)
    return iw.fpdu(hdr + b"\xee" * 32), hdr


def c_to_wrap(c):
    hdr = iw.tagged(iw.OP_WRITE, c.stag, (1 << 64) - 32)
    return iw.fpdu(hdr + b"\xee" * 64), hdr


def c_ddp_version(c):
    hdr = raw_tagged(0xC2, 0x40, c.stag, c.iova, b"")  # DV = 2
    return iw.fpdu(hdr + b"\xee" * 32), hdr


def c_rdmap_version(c):
    hdr = raw_tagged(0xC1, 0x80, c.stag, c.iova, b"")  # RV = 2
    return iw.fpdu(hdr + b"\xee" * 32), hdr


def c_bad_opcode(c):
    hdr = raw_tagged(0xC1, 0x4F, c.stag, c.iova, b"")  # opcode 0xF: none
    return iw.fpdu(hdr + b"\xee" * 32), hdr


def c_write_no_access(c):
    hdr = iw.tagged(iw.OP_WRITE, c.rstag, c.riova)  # receive MR: LOCAL_WRITE only
    return iw.fpdu(hdr + b"\xee" * 32), hdr


def _rreq(c, src_stag, src_to, size):
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, size, src_stag, src_to)
    hdr = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0)
    return iw.fpdu(hdr + body), hdr, body


def c_read_unknown_stag(c):
    return _rreq(c, c.unknown_stag(), c.iova, 64)


def c_read_bounds(c):
    return _rreq(c, c.stag, c.iova + c.length - 16, 64)


def c_read_no_access(c):
    return _rreq(c, c.rstag, c.riova, 64)


def c_send_too_long(c):
    hdr = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0)
    return iw.fpdu(hdr + b"\x77" * 2000), hdr  # receive buffers are 1024 bytes


def c_bad_qn(c):
    hdr = iw.untagged(iw.OP_SEND, 5, 1, 0)
    return iw.fpdu(hdr + b"\x77" * 16), hdr


def c_msn_range(c):
    hdr = iw.untagged(iw.OP_SEND, iw.QN_SEND, 100, 0)
    return iw.fpdu(hdr + b"\x77" * 16), hdr


def c_bad_mo(c):
    hdr = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 4096)
    return iw.fpdu(hdr + b"\x77" * 16), hdr


DDP_T = 1
DDP_U = 2
# name: (function, acceptable (layer, etype|None, code), allowed MR change)
# allowed MR change: 0, or (lo, hi): changed bytes may only lie in [lo, hi)
ERROR_CASES = {
    "garbage": (c_garbage, "any", 0),
    "bad_crc": (c_bad_crc, [(2, None, 0x02)], 0),
    "big_bad_crc": (c_big_bad_crc, [(2, None, 0x02)], (8192, 16384)),
    "unknown_stag": (c_unknown_stag, [(1, DDP_T, 0x00)], 0),
    "bounds": (c_bounds, [(1, DDP_T, 0x01)], 0),
    "before_base": (c_before_base, [(1, DDP_T, 0x01)], 0),
    "to_wrap": (c_to_wrap, [(1, DDP_T, 0x03), (1, DDP_T, 0x01)], 0),
    "ddp_version": (c_ddp_version, [(1, DDP_T, 0x04)], 0),
    "rdmap_version": (c_rdmap_version, [(0, 2, 0x05)], 0),
    "bad_opcode": (c_bad_opcode, [(0, 2, 0x06)], 0),
    # RFC 5040: remote protection / access rights; siw reports DDP invalid STag
    "write_no_access": (c_write_no_access, [(0, 1, 0x02), (1, DDP_T, 0x00)], 0),
    "read_unknown_stag": (c_read_unknown_stag, [(0, 1, 0x00)], 0),
    "read_bounds": (c_read_bounds, [(0, 1, 0x01)], 0),
    "read_no_access": (c_read_no_access, [(0, 1, 0x02)], 0),
    # RFC 5041: 5 = message too long; siw reports 2 = no buffer
    "send_too_long": (c_send_too_long, [(1, DDP_U, 0x05), (1, DDP_U, 0x02)], 0),
    "bad_qn": (c_bad_qn, [(1, DDP_U, 0x01)], 0),
    "msn_range": (c_msn_range, [(1, DDP_U, 0x03), (1, DDP_U, 0x02)], 0),
    "bad_mo": (c_bad_mo, [(1, DDP_U, 0x04), (1, DDP_U, 0x05)], 0),
}
GOOD_CASES = ("control", "read_back", "send_ok", "send_segments", "write_segments", "dribble",
              "burst", "mpa_rev1")
# Bad connection setup (RFC 5044 §7.1, RFC 6581): the target must refuse it
# (a Reply with R, or just a close) and never report a connection.
MPA_CASES = {
    # markers asked for while the target runs with UIWARP_MPA_MARKERS=0
    # (configured off; the default honours them, hostile_markers_default):
    # a Reply with R. The marker_* rule cases
    # negotiate them with a target that has them on.
    "mpa_markers": (lambda: iw.mpa_frame(iw.KEY_REQ, iw.F_M | iw.F_C | iw.F_E, 2,
                                         struct.pack(">HH", iw.V2_P2P | 4, iw.V2_RTR_WRITE | 4)),
                    "reject"),
    "mpa_bad_key": (lambda: b"MPA ID Bad Frame" + struct.pack(">BBH", iw.F_C, 2, 0), "close"),
    "mpa_bad_rev": (lambda: iw.mpa_frame(iw.KEY_REQ, iw.F_C, 7, b""), "close"),
    "mpa_pd_too_long": (lambda: iw.KEY_REQ + struct.pack(">BBH", iw.F_C | iw.F_E, 2, 600) +
                        struct.pack(">HH", iw.V2_P2P | 4, iw.V2_RTR_WRITE | 4) + bytes(596),
                        "close"),
}
ALL_CASES = GOOD_CASES + tuple(ERROR_CASES) + ("peer_terminate",) + tuple(MPA_CASES)
# the cases mock_target.py implements (hostile_harness_selfcheck)
MOCK_CASES = ALL_CASES


def good_case(case, sock, c):
    """Valid traffic, then our FIN. Returns (MR bytes that must change,
    receive-buffer bytes that must change, byte_len of the first receive
    completion or None)."""
    off = 4096
    data = bytes(MR_PATTERN(off + i) ^ 0xFF for i in range(100))
    wc = None
    if case == "send_ok":
        sock.sendall(iw.fpdu(iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x42" * 100)))
        want = (0, 100)
        wc = 100
    elif case == "send_segments":
        # one Send message in three DDP segments (MO 0/40/80, L only on the last)
        for mo, last in ((0, False), (40, False), (80, True)):
            n = 40 if not last else 20
            sock.sendall(iw.fpdu(iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, mo, b"\x43" * n,
                                             last=last)))
        want = (0, 100)
        wc = 100
    elif case == "write_segments":
        # one RDMA Write in three tagged segments (L only on the last)
        for i, last in ((0, False), (1, False), (2, True)):
            chunk = bytes(MR_PATTERN(off + 100 * i + j) ^ 0xFF for j in range(100))
            sock.sendall(iw.fpdu(iw.tagged(iw.OP_WRITE, c.stag, c.iova + off + 100 * i, chunk,
                                           last=last)))
        want = (300, 0)
    elif case == "dribble":
        # one FPDU, one byte per TCP segment
        f = iw.rdma_write(c.stag, c.iova + off, data)
        for i in range(len(f)):
            sock.sendall(f[i:i + 1])
            time.sleep(0.002)
        want = (100, 0)
    elif case == "burst":
        # 64 Writes of 16 bytes, all in one sendall (many FPDUs per segment)
        blob = b""
        for k in range(64):
            o = off + 32 * k
            blob += iw.rdma_write(c.stag, c.iova + o,
                                  bytes(MR_PATTERN(o + j) ^ 0xFF for j in range(16)))
        sock.sendall(blob)
        want = (64 * 16, 0)
    else:
        sock.sendall(iw.rdma_write(c.stag, c.iova + off, data))
        want = (100, 0)
    if case == "read_back":
        sink = 0x00C0FFEE
        sock.sendall(iw.read_request(1, sink, 0x40, len(data), c.stag, c.iova + off))
        got = b""
        deadline = time.monotonic() + IO_TIMEOUT
        while len(got) < len(data):
            f = iw.read_fpdu(sock, deadline)
            d = iw.Ddp(f.ulpdu)
            say("hostile: from target: %s" % d)
            expect(f.crc_ok, "Read Response CRC good")
            expect(d.tagged and d.opcode == iw.OP_READ_RESP, "tagged Read Response (opcode 2)")
            expect(d.stag == sink, "Read Response to our sink STag")
            expect(d.to == 0x40 + len(got), "Read Response TO = sink TO + offset")
            got += d.payload
            if d.last:
                break
        expect(got == data, "Read Response carries the written bytes")
    sock.shutdown(socket.SHUT_WR)
    ddps, closed, _ = read_until_close(sock, True)
    ts = terminates_of(ddps)
    if ts:
        say("hostile: WARNING: Terminate after a graceful close: %s" % ts[0])
    expect(closed, "target closed the stream after our FIN")
    return want + (wc,)


def peer_terminate_case(sock, c):
    """We send a Terminate (RDMAP, remote operation, unspecified): the target
    must go to ERR and close without answering with a Terminate of its own
    (RFC 5040 §5.3: a Terminate is never answered with one)."""
    ctrl = struct.pack(">BBH", (0 << 4) | 2, 0xFF, 0)
    sock.sendall(iw.fpdu(iw.untagged(iw.OP_TERMINATE, iw.QN_TERMINATE, 1, 0, ctrl)))
    ddps, closed, rest = read_until_close(sock, True)
    expect(not any(d.opcode == iw.OP_TERMINATE for d in ddps),
           "no Terminate sent back for our Terminate")
    expect(closed, "the target closed the stream")


def error_case(case, sock, c):
    fn, want_terms, allowed = ERROR_CASES[case]
    res = fn(c)
    data, hdr = res[0], res[1]
    rhdr = res[2] if len(res) > 2 else None
    sock.sendall(data)
    ddps, closed, rest = read_until_close(sock, True)
    ts = terminates_of(ddps)
    expect(len(ts) >= 1, "a Terminate arrived")
    t = ts[0]
    if want_terms == "any":
        expect(t.layer in (0, 1, 2), "Terminate layer is RDMAP/DDP/LLP (%d)" % t.layer)
    else:
        ok = any(t.layer == l and (e is None or t.etype == e) and t.code == k
                 for l, e, k in want_terms)
        expect(ok, "Terminate layer/etype/code %d/%d/0x%02x is one of %s" %
               (t.layer, t.etype, t.code,
                ", ".join("%d/%s/0x%02x" % (l, "*" if e is None else e, k)
                          for l, e, k in want_terms)))
        if t.layer == 2 and t.etype != 0:
            say("hostile: note: LLP Terminate etype %d (RFC 5040: 0; cxgb4/irdma: 3)" % t.etype)
    expect(t.ddp.msn == 1 and t.ddp.mo == 0,
           "Terminate MSN 1 / MO 0 (got %s/%s)" % (t.ddp.msn, t.ddp.mo))
    if hdr is not None and t.d:
        n = len(hdr)
        expect(t.rest[:n] == hdr, "Terminate echoes the offending DDP header (%s)" %
               t.rest[:n].hex())
    if rhdr is not None and t.r:
        o = len(hdr) if t.d else 0
        expect(t.rest[o:o + 28] == rhdr, "Terminate echoes the offending Read Request (%s)" %
               t.rest[o:o + 28].hex())
    expect(ddps[-1].opcode == iw.OP_TERMINATE, "nothing after the Terminate")
    expect(closed, "the stream closed after the Terminate")
    expect(not rest, "no partial FPDU before the close")
    return allowed


def mpa_case(case, port):
    """Sends a bad MPA Request; the target must answer with a Reply with R
    or close, never accept."""
    make, want = MPA_CASES[case]
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    try:
        s.sendall(make())
        deadline = time.monotonic() + 15
        try:
            rep = iw.read_mpa_frame(s, deadline)
        except EOFError:
            rep = None
        if rep is not None:
            say("hostile: reply " + str(rep))
            expect(rep.key == iw.KEY_REP and rep.flags & iw.F_R,
                   "the only acceptable answer is a Reply with R (reject)")
        if want == "reject":
            expect(rep is not None, "a Reply with R (reject) arrived")
        try:
            more = iw.recv_exact(s, 1, time.monotonic() + 15)
        except EOFError:
            more = b""
        expect(more == b"", "the stream closed with nothing more")
    finally:
        s.close()


# ---------------------------------------------------------------- rule cases
#
# One case per receive-side rule of RFC 5041 / RFC 5040 (issue 3). A rule case
# is a function (sock, c) that sends its traffic and returns an Expect: the
# exact Terminate the RFCs ask for (or none, for traffic that must be
# accepted), the offending header that must be echoed, and what may change in
# the target's memory. Cases whose RFC answer uiwarp does not give today are
# listed in KNOWN_BAD: they still assert the RFC's answer (and so fail), and
# ctest runs them with WILL_FAIL under the label known-bad, so that a fixed
# engine turns them red until they are moved out of KNOWN_BAD.

RDMAP, DDP, LLP = 0, 1, 2
RP_PROT, RP_OP = 1, 2  # RDMAP etypes: remote protection, remote operation
READ_SRC = ((0x5EED01, 0x1000), (0x5EED02, 0x2000))  # uiw_target "reads"
READ_SINK_OFF = (8192, 12288)
READ_LEN = 64
U64 = 1 << 64


class Expect:
    """What the target must do. terms: acceptable (layer, etype, code)
    triples, or None for 'no Terminate, the connection ends with our FIN'.
    hdr: the DDP header the Terminate must echo (D set, M with the segment
    length seg_len); rhdr: the Read Request body it must echo (R set).
    mr: exact number of MR bytes that change, or a list of [lo, hi) ranges
    the changes must stay in. rchanged: exact count, or (max,) for 'at most'.
    wcs / no_wcs: regexes the target's WC lines must / must not match.
    x: exact changed-byte counts of the extra regions (default all 0).
    read_resp: (sink STag, sink TO, data) of a Read Response the target must
    send."""

    def __init__(self, terms=None, hdr=None, seg_len=None, rhdr=None, mr=0, rchanged=0,
                 wcs=(), no_wcs=(), x=None, read_resp=None, close=None, reset=False,
                 bare=False):
        # bare: the Terminate carries nothing after its control word (M, D,
        # R clear: an LLP error with no DDP segment to echo)
        self.bare = bare
        # close: the CLOSE reason the target must report (uiw_qp_close_reason;
        # default: 1 graceful without a Terminate, 2 with one); reset: we
        # reset the connection ourselves, nothing more to read
        self.close, self.reset = close, reset
        self.terms, self.hdr, self.seg_len, self.rhdr = terms, hdr, seg_len, rhdr
        self.mr, self.rchanged, self.wcs, self.no_wcs = mr, rchanged, wcs, no_wcs
        self.x = x or {}
        self.read_resp = read_resp


def flipped(off, n):
    """n bytes that differ from the MR pattern at every offset from off."""
    return bytes(MR_PATTERN(off + i) ^ 0xFF for i in range(n))


def send_fpdus(sock, *ulpdus, gap=0.0):
    for u in ulpdus:
        sock.sendall(iw.fpdu(u))
        if gap:
            time.sleep(gap)


def ulp_of(f):
    """The ULPDU inside an FPDU we built."""
    n = struct.unpack(">H", f[:2])[0]
    return f[2:2 + n]


FLUSHED = r"WC wr_id=103 status=5 "  # the last posted receive flushed
NO_RECV_OK = (r"WC wr_id=10[0-3] status=0 ",)


def err(terms, u, **kw):
    """An error Expect whose offending segment is ULPDU u (header echoed)."""
    tagged = bool(u[0] & 0x80)
    hlen = 14 if tagged else 18
    kw.setdefault("wcs", (FLUSHED,))
    return Expect(terms, hdr=u[:hlen], seg_len=len(u), **kw)


# --- interleaving (RFC 5041 §5.3, RFC 5040 §5.5; issue 3: tagged and
# untagged may interleave, two messages of the same class may not)

def r_interleave_send_write(sock, c):
    """A Send in two segments with a whole RDMA Write between them: allowed."""
    off = 4096
    send_fpdus(sock,
               iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x51" * 40, last=False),
               iw.tagged(iw.OP_WRITE, c.stag, c.iova + off, flipped(off, 100)),
               iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 40, b"\x52" * 60))
    return Expect(None, mr=100, rchanged=100,
                  wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=100 ",))


def r_interleave_write_send(sock, c):
    """An RDMA Write in two segments with a whole Send between them: allowed."""
    off = 4096
    d = flipped(off, 200)
    send_fpdus(sock,
               iw.tagged(iw.OP_WRITE, c.stag, c.iova + off, d[:100], last=False),
               iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x53" * 30),
               iw.tagged(iw.OP_WRITE, c.stag, c.iova + off + 100, d[100:]))
    return Expect(None, mr=200, rchanged=30,
                  wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=30 ",))


def r_interleave_send_readreq(sock, c):
    """A Read Request (QN 1) between two segments of a Send (QN 0): allowed;
    the Read is answered and the Send completes."""
    off = 4096
    send_fpdus(sock,
               iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x54" * 40, last=False),
               ulp_of(iw.read_request(1, 0xC0FFEE, 0x80, 32, c.stag, c.iova + off)),
               iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 40, b"\x55" * 8))
    return Expect(None, rchanged=48, wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=48 ",),
                  read_resp=(0xC0FFEE, 0x80, bytes(MR_PATTERN(off + i) for i in range(32))))


def r_interleave_send_send(sock, c):
    """A second Send (MSN 2) starts before the first (MSN 1) has its last
    segment: two untagged messages of one queue interleaved."""
    first = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x56" * 40, last=False)
    second = iw.untagged(iw.OP_SEND, iw.QN_SEND, 2, 0, b"\x57" * 40)
    send_fpdus(sock, first, second)
    return err([(DDP, 2, 0x03)], second, rchanged=(40,), no_wcs=NO_RECV_OK)


def r_interleave_read_resp(sock, c):
    """Read Response 2 arrives while Read Response 1 is half done."""
    (s1, t1, _), (s2, t2, _) = c.reads
    a = iw.tagged(iw.OP_READ_RESP, s1, t1, flipped(READ_SINK_OFF[0], 32), last=False)
    b = iw.tagged(iw.OP_READ_RESP, s2, t2, flipped(READ_SINK_OFF[1], READ_LEN))
    send_fpdus(sock, a, b)
    lo = READ_SINK_OFF[0]
    return err([(DDP, 1, 0x01), (RDMAP, RP_OP, 0x06)], b, mr=[(lo, lo + 32)],
               wcs=(FLUSHED, r"WC wr_id=200 status=[1-9]", r"WC wr_id=201 status=[1-9]"))


# --- Read Responses (RFC 5040 §4.5, §5.2.2, §7)

def r_read_resp_ok(sock, c):
    """Both of the target's Reads answered, the second in two segments."""
    (s1, t1, _), (s2, t2, _) = c.reads
    d2 = flipped(READ_SINK_OFF[1], READ_LEN)
    send_fpdus(sock,
               iw.tagged(iw.OP_READ_RESP, s1, t1, flipped(READ_SINK_OFF[0], READ_LEN)),
               iw.tagged(iw.OP_READ_RESP, s2, t2, d2[:20], last=False),
               iw.tagged(iw.OP_READ_RESP, s2, t2 + 20, d2[20:]))
    return Expect(None, mr=2 * READ_LEN,
                  wcs=(r"WC wr_id=200 status=0 opcode=2 ", r"WC wr_id=201 status=0 opcode=2 "))


def r_read_resp_unsolicited(sock, c):
    """A Read Response when no Read is outstanding."""
    u = iw.tagged(iw.OP_READ_RESP, c.stag, c.iova + 4096, flipped(4096, 32))
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u)


def r_read_resp_extra(sock, c):
    """Both Reads answered, then a third Read Response nobody asked for."""
    (s1, t1, _), (s2, t2, _) = c.reads
    send_fpdus(sock,
               iw.tagged(iw.OP_READ_RESP, s1, t1, flipped(READ_SINK_OFF[0], READ_LEN)),
               iw.tagged(iw.OP_READ_RESP, s2, t2, flipped(READ_SINK_OFF[1], READ_LEN)))
    u = iw.tagged(iw.OP_READ_RESP, s1, t1, b"\xee" * READ_LEN)
    time.sleep(0.05)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u, mr=2 * READ_LEN,
               wcs=(FLUSHED, r"WC wr_id=200 status=0 opcode=2 ",
                    r"WC wr_id=201 status=0 opcode=2 "))


def r_read_resp_bad_stag(sock, c):
    """The Read Response names an STag nobody registered (not the sink)."""
    (s1, t1, _), _ = c.reads
    u = iw.tagged(iw.OP_READ_RESP, c.unknown_stag(), t1, b"\xee" * READ_LEN)
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x00)], u, wcs=(FLUSHED, r"WC wr_id=200 status=[1-9]"))


def r_read_resp_outside_sink(sock, c):
    """The Read Response's TO lies inside the sink MR but outside the range
    the Read asked for."""
    (s1, t1, _), _ = c.reads
    u = iw.tagged(iw.OP_READ_RESP, s1, t1 + 1024, b"\xee" * READ_LEN)
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x01)], u, wcs=(FLUSHED, r"WC wr_id=200 status=[1-9]"))


def r_read_resp_too_long(sock, c):
    """A Read Response longer than the Read (128 bytes for 64)."""
    (s1, t1, _), _ = c.reads
    u = iw.tagged(iw.OP_READ_RESP, s1, t1, b"\xee" * (2 * READ_LEN))
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x01)], u, wcs=(FLUSHED, r"WC wr_id=200 status=[1-9]"))


# --- untagged buffers: MSN, MO, length, buffers (RFC 5041 §5.3, §7.2)

def r_msn_old(sock, c):
    u = iw.untagged(iw.OP_SEND, iw.QN_SEND, 0, 0, b"\x77" * 16)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x03)], u, no_wcs=NO_RECV_OK)


def r_mo_gap(sock, c):
    """Segment 2 of a Send starts at MO 80 where 40 bytes were received."""
    a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x58" * 40, last=False)
    b = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 80, b"\x59" * 40)
    send_fpdus(sock, a, b)
    return err([(DDP, 2, 0x04)], b, rchanged=(40,), no_wcs=NO_RECV_OK)


def r_too_long_segments(sock, c):
    """A Send whose third 400-byte segment passes the 1024-byte buffer."""
    segs = [iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 400 * k, b"\x5a" * 400, last=k == 2)
            for k in range(3)]
    send_fpdus(sock, *segs)
    return err([(DDP, 2, 0x05)], segs[2], rchanged=(800,), no_wcs=NO_RECV_OK)


def r_no_buffer(sock, c):
    """Five Sends, four receives posted: the fifth has no buffer (the RFC's
    error, not a hang)."""
    us = [iw.untagged(iw.OP_SEND, iw.QN_SEND, k + 1, 0, bytes([0x60 + k]) * 16)
          for k in range(5)]
    send_fpdus(sock, *us)
    return err([(DDP, 2, 0x02)], us[4], rchanged=64,
               wcs=tuple(r"WC wr_id=%d status=0 opcode=128 byte_len=16 " % (100 + k)
                         for k in range(4)))


def r_send_qn1(sock, c):
    """A Send on QN 1 (the Read Request queue)."""
    u = iw.untagged(iw.OP_SEND, iw.QN_READ_REQ, 1, 0, b"\x77" * 16)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x01)], u)


def r_read_req_msn(sock, c):
    """A Read Request with MSN 5 where 1 is expected."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 32, c.stag, c.iova)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 5, 0, body)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x03)], u)


def r_read_req_ird0(sock, c):
    """We negotiated ORD 0 (so the target's IRD is 0) and send a Read
    Request anyway: more Reads than IRD (RFC 5040 §6.5 / RFC 6581 §5)."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 32, c.stag, c.iova)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x02), (DDP, 2, 0x03)], u, rhdr=body)


# --- zero-length operations (RFC 5040 §4.4 / §5.2: a zero-length Read or
# Write carries no data: STag and TO are not checked)

def r_zero_write(sock, c):
    send_fpdus(sock, iw.tagged(iw.OP_WRITE, c.unknown_stag(), 0xDEAD0000))
    return Expect(None)


def r_zero_send(sock, c):
    send_fpdus(sock, iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0))
    return Expect(None, wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=0 ",))


def r_zero_read(sock, c):
    """A zero-length Read of an STag nobody registered: answered with a
    zero-length Read Response to our sink."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0x40, 0, c.unknown_stag(), 0xDEAD0000)
    send_fpdus(sock, iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body))
    return Expect(None, read_resp=(0xC0FFEE, 0x40, b""))


# --- versions, opcodes, reserved fields (RFC 5041 §4.1, RFC 5040 §4.2/§4.3)

def r_ddp_version_untagged(sock, c):
    u = bytearray(iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x77" * 16))
    u[0] = (u[0] & ~3) | 2
    u = bytes(u)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x06)], u, no_wcs=NO_RECV_OK)


def r_rdmap_version_untagged(sock, c):
    u = bytearray(iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x77" * 16))
    u[1] = 0x80 | iw.OP_SEND  # RV 2
    u = bytes(u)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x05)], u, no_wcs=NO_RECV_OK)


def r_send_tagged(sock, c):
    """Opcode Send in a tagged segment."""
    u = iw.tagged(iw.OP_SEND, c.stag, c.iova, b"\x77" * 16)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u)


def r_write_untagged(sock, c):
    """Opcode RDMA Write in an untagged segment on QN 0."""
    u = iw.untagged(iw.OP_WRITE, iw.QN_SEND, 1, 0, b"\x77" * 16)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u, no_wcs=NO_RECV_OK)


def r_imm_not_negotiated(sock, c):
    """RFC 7306 Immediate Data (opcode 0x8) when RFC 7306 was not
    negotiated: an unexpected opcode."""
    u = iw.untagged(0x8, iw.QN_SEND, 1, 0, b"\x12\x34\x56\x78" * 2)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u, no_wcs=NO_RECV_OK)


def r_atomic_not_negotiated(sock, c):
    """RFC 7306 Atomic Request (opcode 0xA, QN 1) when RFC 7306 was not
    negotiated: an unexpected opcode."""
    body = struct.pack(">IIIQQQQQQ", 0, 1, c.stag, c.iova, 1, 0, 0, 0, 0)
    u = iw.untagged(0xA, iw.QN_ATOMIC_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u, no_wcs=NO_RECV_OK)


def r_ddp_rsvd_set(sock, c):
    """DDP reserved bits set: not checked on receive (RFC 5041 §4.1)."""
    off = 4096
    u = bytearray(iw.tagged(iw.OP_WRITE, c.stag, c.iova + off, flipped(off, 64)))
    u[0] |= 0x3C
    send_fpdus(sock, bytes(u))
    return Expect(None, mr=64)


def r_rdmap_rsvd_set(sock, c):
    """RDMAP reserved bits set: not checked on receive (RFC 5040 §4.2)."""
    off = 4096
    u = bytearray(iw.tagged(iw.OP_WRITE, c.stag, c.iova + off, flipped(off, 64)))
    u[1] |= 0x30
    send_fpdus(sock, bytes(u))
    return Expect(None, mr=64)


def r_send_rsvdulp_set(sock, c):
    """A plain Send whose 32-bit RsvdULP field is not zero: not checked
    (RFC 5040 §4.3: only Send with Invalidate gives it a meaning)."""
    send_fpdus(sock, iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x61" * 16,
                                 inv_stag=0xDEADBEEF))
    return Expect(None, rchanged=16,
                  wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=16 flags=0 ",))


# --- STags: access per operation, protection domains, TO wrap
# (RFC 5040 §5.1 / §7, RFC 5041 §7.2; uiw_target "extra" regions)

def r_write_ro_mr(sock, c):
    u = iw.tagged(iw.OP_WRITE, c.x["ro"], 0x2000000, b"\xee" * 32)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x02)], u)


def r_read_wo_mr(sock, c):
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 32, c.x["wo"], 0x3000000)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x02)], u, rhdr=body)


def r_write_other_pd(sock, c):
    u = iw.tagged(iw.OP_WRITE, c.x["pd2"], 0x4000000, b"\xee" * 32)
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x02)], u)


def r_read_other_pd(sock, c):
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 32, c.x["pd2"], 0x4000000)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x03)], u, rhdr=body)


def r_write_hi_end(sock, c):
    """A Write of the last 16 bytes of an MR whose last byte is at 2^64 - 2:
    valid (no wrap)."""
    hi = c.x["hiiova"]
    to = hi + 4096 - 16
    send_fpdus(sock, iw.tagged(iw.OP_WRITE, c.x["hi"], to,
                               bytes(MR_PATTERN(4080 + i) ^ 0xFF for i in range(16))))
    return Expect(None, x={"hi": 16})


def r_to_wrap_hi(sock, c):
    """A Write at TO 2^64 - 16 of 32 bytes into the high MR: TO wrap."""
    u = iw.tagged(iw.OP_WRITE, c.x["hi"], U64 - 16, b"\xee" * 32)
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x03)], u)


def r_read_to_wrap(sock, c):
    """A Read Request of 32 bytes at source TO 2^64 - 16 (high MR)."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 32, c.x["hi"], U64 - 16)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x04)], u, rhdr=body)


# --- Send with Invalidate (RFC 5040 §5.3 / §7: "STag cannot be
# Invalidated", RDMAP code 0x09)

def r_send_inv_unknown(sock, c):
    """Send with Invalidate naming an STag nobody registered."""
    u = iw.untagged(iw.OP_SEND_INV, iw.QN_SEND, 1, 0, b"\x62" * 16, inv_stag=c.unknown_stag())
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x09), (RDMAP, RP_OP, 0x09)], u, rchanged=(16,),
               no_wcs=NO_RECV_OK)


def r_send_se_inv_other_pd(sock, c):
    """Send with SE and Invalidate naming the STag of another PD's MR."""
    u = iw.untagged(iw.OP_SEND_SE_INV, iw.QN_SEND, 1, 0, b"\x63" * 16, inv_stag=c.x["pd2"])
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x09), (RDMAP, RP_OP, 0x09)], u, rchanged=(16,),
               no_wcs=NO_RECV_OK)


def r_send_inv_then_write(sock, c):
    """Send with Invalidate of the write-only MR's STag (remote invalidation
    of an MR is allowed by uiwarp), then an RDMA Write to that STag: the
    STag is no longer valid."""
    send_fpdus(sock, iw.untagged(iw.OP_SEND_INV, iw.QN_SEND, 1, 0, b"\x64" * 16,
                                 inv_stag=c.x["wo"]))
    time.sleep(0.05)
    u = iw.tagged(iw.OP_WRITE, c.x["wo"], 0x3000000, b"\xee" * 32)
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x00)], u, rchanged=16,
               wcs=(FLUSHED, r"WC wr_id=100 status=0 opcode=128 byte_len=16 flags=4 inv=0x%x" %
                    c.x["wo"]))


# --- RFC 7306 (negotiated: the target runs with UIWARP_RFC7306=1 and we
# offer it the uiwarp way). RFC 7306 §4.1 / §10: Immediate Data shares QN 0
# (and its MSNs) with Sends; Atomic Requests share QN 1 (and its MSNs) with
# RDMA Read Requests; Atomic Responses use QN 3.

OP_IMM, OP_IMM_SE, OP_ATOMIC_REQ, OP_ATOMIC_RESP = 0x8, 0x9, 0xA, 0xB


def atomic_req(stag, to, add=1):
    return struct.pack(">IIIQQQQQ", 0x0, 7, stag, to, add, ~0 & (U64 - 1), 0, 0)


def r_imm_ok(sock, c):
    """Immediate Data (8 bytes) consumes a receive and completes it."""
    send_fpdus(sock, iw.untagged(OP_IMM, iw.QN_SEND, 1, 0, b"\x12\x34\x56\x78\0\0\0\0"))
    return Expect(None, wcs=(r"WC wr_id=100 status=0 .*flags=2 ",))


def r_imm_no_buffer(sock, c):
    """Four Sends use the four receives; then Immediate Data: no buffer."""
    us = [iw.untagged(iw.OP_SEND, iw.QN_SEND, k + 1, 0, b"\x70" * 8) for k in range(4)]
    imm = iw.untagged(OP_IMM, iw.QN_SEND, 5, 0, b"\x12\x34\x56\x78\0\0\0\0")
    send_fpdus(sock, *us, imm)
    return err([(DDP, 2, 0x02)], imm, rchanged=32,
               wcs=tuple(r"WC wr_id=%d status=0 opcode=128 byte_len=8 " % (100 + k)
                         for k in range(4)))


def r_atomic_no_access(sock, c):
    """FetchAdd on the MR, which has no REMOTE_ATOMIC access."""
    u = iw.untagged(OP_ATOMIC_REQ, iw.QN_ATOMIC_REQ, 1, 0, atomic_req(c.stag, c.iova + 64))
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x02)], u)


def _atomic_bad_to(where):
    """FetchAdd on the MR, which has REMOTE_ATOMIC (target option "atomic"),
    at a Remote Tagged Offset the responder may not touch: "misaligned" (not
    8-byte aligned, inside the MR), "end" (8 bytes that straddle the MR's
    end), "past" (the first offset after the MR), "below" (8 bytes before
    its base). Outside the STag's region: RDMAP remote protection, base or
    bounds violation (0/1/0x01); inside but not 64-bit aligned: RFC 7306
    §8.2's RDMAP Remote Operation Error, "Catastrophic error, localized to
    RDMAP Stream" (0/2/0x07; rdmap/rx.c:atomic_req_finish). The DDP header
    is echoed (§8.1), and nothing of the MR changes (changed=0)."""
    def run(sock, c):
        to = {"misaligned": c.iova + 68, "end": c.iova + c.length - 4,
              "past": c.iova + c.length, "below": c.iova - 8}[where]
        u = iw.untagged(OP_ATOMIC_REQ, iw.QN_ATOMIC_REQ, 1, 0, atomic_req(c.stag, to))
        send_fpdus(sock, u)
        return err([(RDMAP, 2, 0x07) if where == "misaligned" else (RDMAP, RP_PROT, 0x01)], u)
    run.__doc__ = _atomic_bad_to.__doc__
    return run


def r_atomic_req_qn3(sock, c):
    """An Atomic Request on QN 3 (the Atomic Response queue): RFC 7306 puts
    Atomic Requests on QN 1, so this is an invalid QN."""
    u = iw.untagged(OP_ATOMIC_REQ, 3, 1, 0, atomic_req(c.stag, c.iova + 64))
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x01)], u)


def r_atomic_resp_qn4(sock, c):
    """An Atomic Response on QN 4: no such queue (RFC 7306: QN 3)."""
    u = iw.untagged(OP_ATOMIC_RESP, 4, 1, 0, struct.pack(">IQ", 7, 0))
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x01)], u)


def r_atomic_req_msn_shared(sock, c):
    """A zero-length Read Request (MSN 1, answered), then an Atomic Request
    with MSN 1 again: Atomic Requests share QN 1's MSN space with Read
    Requests (RFC 7306 §4.1), so MSN 1 is used up: MSN range error."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 0, c.stag, c.iova)
    rr = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    u = iw.untagged(OP_ATOMIC_REQ, iw.QN_ATOMIC_REQ, 1, 0, atomic_req(c.stag, c.iova + 64))
    send_fpdus(sock, rr, u)
    return err([(DDP, 2, 0x03)], u)


def r_atomic_resp_unsolicited(sock, c):
    """An Atomic Response when no Atomic Request is outstanding."""
    u = iw.untagged(OP_ATOMIC_RESP, iw.QN_ATOMIC_RESP, 1, 0, struct.pack(">IQ", 7, 0))
    send_fpdus(sock, u)
    return err([(RDMAP, RP_OP, 0x06)], u)


# --- Terminates from the peer (RFC 5040 §5.3 / §7.1: never answered with a
# Terminate; parsed leniently; every WR flushes)

def r_peer_terminate_full(sock, c):
    """Our Terminate with M, D and an echoed tagged header."""
    hdr = iw.tagged(iw.OP_WRITE, c.stag, c.iova)
    ctrl = struct.pack(">BBHH", (DDP << 4) | 1, 0x01, 0xC000, len(hdr) + 32) + hdr
    send_fpdus(sock, iw.untagged(iw.OP_TERMINATE, iw.QN_TERMINATE, 1, 0, ctrl))
    return Expect([], wcs=(r"WC wr_id=100 status=5 ", FLUSHED))


def r_peer_terminate_read(sock, c):
    """The target's two Reads are outstanding; our Terminate says the first
    one's source is an invalid STag (RDMAP remote protection 0/1/0x00, M, D
    with its Read Request's DDP header, R with its body): that Read (wr_id
    200) completes with REM_ACCESS_ERR (status 10), the other one and the
    receives flush (rdmap/rx.c term_fail_request)."""
    sink, to, size = c.reads[0]
    hdr = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0)
    body = struct.pack(">IQIIQ", sink, to, size, READ_SRC[0][0], READ_SRC[0][1])
    ctrl = struct.pack(">BBHH", (RDMAP << 4) | RP_PROT, 0x00, 0xE000, len(hdr) + len(body))
    send_fpdus(sock, iw.untagged(iw.OP_TERMINATE, iw.QN_TERMINATE, 1, 0, ctrl + hdr + body))
    return Expect([], wcs=(r"WC wr_id=200 status=10 ", r"WC wr_id=201 status=5 ", FLUSHED))


def r_peer_terminate_short(sock, c):
    """A Terminate whose payload is 2 bytes (shorter than its control word)."""
    send_fpdus(sock, iw.untagged(iw.OP_TERMINATE, iw.QN_TERMINATE, 1, 0, b"\x12\x01"))
    return Expect([], wcs=(FLUSHED,))


# --- a QP whose receives come from a shared receive queue (uiw_target
# "srq": two receives of 64 bytes, wr_id 100 and 101). The untagged rules of
# RFC 5041 §5.3 / §7 hold as for a QP's own receive queue; on the error the
# receive WQE in progress flushes, the ones still in the SRQ do not (the SRQ
# belongs to no QP).

def r_srq_no_buffer(sock, c):
    """Three Sends, two receives in the SRQ: the third has no buffer."""
    us = [iw.untagged(iw.OP_SEND, iw.QN_SEND, k + 1, 0, bytes([0x40 + k]) * 16)
          for k in range(3)]
    send_fpdus(sock, *us)
    return err([(DDP, 2, 0x02)], us[2], rchanged=32,
               wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=16 ",
                    r"WC wr_id=101 status=0 opcode=128 byte_len=16 "),
               no_wcs=(r"WC wr_id=10[01] status=5 ",))


def r_srq_too_long(sock, c):
    """A 100-byte Send into a 64-byte SRQ receive: too long (1/2/0x05); the
    receive it took (100) flushes, 101 stays in the SRQ; at most the 64
    bytes of that receive buffer may have been written."""
    u = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x47" * 100)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x05)], u, rchanged=(64,), wcs=(r"WC wr_id=100 status=5 ",),
               no_wcs=(r"WC wr_id=101 ", r"WC wr_id=100 status=0 "))


def r_srq_too_long_segments(sock, c):
    """A Send in two segments of 40 bytes into a 64-byte SRQ receive: the
    second segment runs past the buffer (1/2/0x05)."""
    a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x48" * 40, last=False)
    b = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 40, b"\x49" * 40)
    send_fpdus(sock, a, b)
    return err([(DDP, 2, 0x05)], b, rchanged=(64,), wcs=(r"WC wr_id=100 status=5 ",),
               no_wcs=(r"WC wr_id=101 ", r"WC wr_id=100 status=0 "))


def r_srq_msn(sock, c):
    """A Send with MSN 2 as the first message: MSN out of range (1/2/0x03);
    no SRQ receive was taken, none completes."""
    u = iw.untagged(iw.OP_SEND, iw.QN_SEND, 2, 0, b"\x4a" * 16)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x03)], u, wcs=(), no_wcs=(r"WC wr_id=10[01] ",))


def r_srq_bad_mo(sock, c):
    """The first segment of a Send at MO 8: invalid MO (1/2/0x04); nothing
    lands in the SRQ receives."""
    u = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 8, b"\x4b" * 16)
    send_fpdus(sock, u)
    return err([(DDP, 2, 0x04)], u, wcs=(), no_wcs=(r"WC wr_id=10[01] status=0 ",))


# --- memory windows (uiw_target "mw": type 2 windows of 1024 bytes bound
# over the MR: rw at MR offset 8192 with REMOTE_WRITE|READ, ro at 12288 with
# REMOTE_READ only; the MR itself allows remote writes everywhere). RFC 5040
# §5.1 / §7 and RFC 5041 §7: a window's STag is checked against the window,
# not against the MR under it.

MW_OFF_RW, MW_OFF_RO, MW_LEN = 8192, 12288, 1024


def r_mw_write_ok(sock, c):
    """A valid 64-byte Write through the rw window: exactly those bytes."""
    off = MW_OFF_RW + 100
    send_fpdus(sock, iw.tagged(iw.OP_WRITE, c.mw["rw"], c.iova + off, flipped(off, 64)))
    return Expect(None, mr=64)


def r_mw_bounds(sock, c):
    """A Write through the rw window that starts 16 bytes before its end and
    runs 48 bytes past it: still inside the MR, outside the window
    (1/1/0x01)."""
    off = MW_OFF_RW + MW_LEN - 16
    u = iw.tagged(iw.OP_WRITE, c.mw["rw"], c.iova + off, flipped(off, 64))
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x01)], u, wcs=(FLUSHED,))


def r_mw_before_base(sock, c):
    """A Write through the rw window at 16 bytes before its base (inside the
    MR): base/bounds (1/1/0x01)."""
    off = MW_OFF_RW - 16
    u = iw.tagged(iw.OP_WRITE, c.mw["rw"], c.iova + off, flipped(off, 32))
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x01)], u)


def r_mw_write_ro(sock, c):
    """A Write through the ro window: the MR allows remote writes, the
    window does not: access rights (RDMAP 0/1/0x02)."""
    off = MW_OFF_RO
    u = iw.tagged(iw.OP_WRITE, c.mw["ro"], c.iova + off, flipped(off, 32))
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x02)], u)


def r_mw_send_inv_then_write(sock, c):
    """Send with Invalidate naming the rw window (receive 100 completes with
    the invalidated STag), then a Write through it: invalid STag
    (1/1/0x00), nothing lands."""
    send_fpdus(sock, iw.untagged(iw.OP_SEND_INV, iw.QN_SEND, 1, 0, b"\x64" * 16,
                                 inv_stag=c.mw["rw"]))
    off = MW_OFF_RW
    u = iw.tagged(iw.OP_WRITE, c.mw["rw"], c.iova + off, flipped(off, 32))
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x00)], u, rchanged=16,
               wcs=(FLUSHED, r"WC wr_id=100 status=0 opcode=128 byte_len=16 flags=4 "
                    r"inv=0x%x" % c.mw["rw"]))


def r_mw_local_inv_then_write(sock, c):
    """The target invalidates the rw window itself (Local Invalidate,
    uiw_target "mwinv"); then a Write through it: invalid STag (1/1/0x00),
    nothing lands."""
    m = c.tgt.wait_line(r"LOCALINV status=(\d+)", IO_TIMEOUT)
    expect(m is not None and m.group(1) == "0", "the target's Local Invalidate completed")
    off = MW_OFF_RW
    u = iw.tagged(iw.OP_WRITE, c.mw["rw"], c.iova + off, flipped(off, 32))
    send_fpdus(sock, u)
    return err([(DDP, 1, 0x00)], u)


def r_mw_read_ro_bounds(sock, c):
    """An RDMA Read Request through the ro window for 64 bytes starting 32
    bytes before its end: base/bounds of the source (RDMAP 0/1/0x01)."""
    body = struct.pack(">IQIIQ", 0xC0FFEE, 0, 64, c.mw["ro"],
                       c.iova + MW_OFF_RO + MW_LEN - 32)
    u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
    send_fpdus(sock, u)
    return err([(RDMAP, RP_PROT, 0x01)], u, rhdr=body)


# --- closing (RFC 5040 §6, RFC 5044 §8): graceful vs abortive. What was
# completed stays completed, everything outstanding flushes (status 5), and
# the engine tells why the stream ended (uiw_qp_close_reason, CLOSE line).

CLOSE_GRACEFUL, CLOSE_TERMINATE, CLOSE_PEER_RESET, CLOSE_PEER_TRUNCATED, CLOSE_LOCAL_ABORT = \
    1, 2, 3, 4, 5


def r_peer_rst_mid_message(sock, c):
    """A complete Send (receive 100 completes), then the first 40 bytes of a
    second Send (L=0), then a TCP RST: abortive. No Terminate can be sent;
    receive 101 (the Send in progress) and 102/103 flush; 100 stays
    completed; only the bytes of the two Sends landed."""
    a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x71" * 24)
    b = iw.untagged(iw.OP_SEND, iw.QN_SEND, 2, 0, b"\x72" * 40, last=False)
    send_fpdus(sock, a, b)
    time.sleep(0.3)  # let the target place them before the reset
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    return Expect(None, reset=True, rchanged=(64,), close=CLOSE_PEER_RESET,
                  wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=24 ",
                       r"WC wr_id=101 status=5 ", r"WC wr_id=102 status=5 ", FLUSHED),
                  no_wcs=(r"WC wr_id=10[1-3] status=0 ",))


def r_peer_fin_mid_fpdu(sock, c):
    """A complete Send (receive 100 completes), then half of an RDMA Write
    FPDU (header and 20 of its 64 payload bytes), then our FIN: the stream
    ends inside an FPDU. The target answers with a Terminate LLP error 0x01
    (TCP connection lost, RFC 5044 §8; nothing to echo), places nothing of
    the Write (its CRC never came), flushes 101-103."""
    a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x73" * 24)
    w = iw.fpdu(iw.tagged(iw.OP_WRITE, c.stag, c.iova + 4096, flipped(4096, 64)))
    send_fpdus(sock, a)
    time.sleep(0.1)
    sock.sendall(w[:2 + 14 + 20])
    time.sleep(0.1)
    sock.shutdown(socket.SHUT_WR)
    return Expect([(LLP, 0, 0x01)], rchanged=24, close=CLOSE_PEER_TRUNCATED,
                  wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=24 ",
                       r"WC wr_id=101 status=5 ", FLUSHED))


def r_local_abort(sock, c):
    """The target posts two RDMA Reads and, while they are outstanding,
    moves its QP to ERR (uiw_target "abort"): an abortive local close. The
    stream closes without a Terminate, both Reads and all four receives
    flush. We send no FIN (it would close the stream gracefully first)."""
    ddps, closed, _ = read_until_close(sock, True)
    expect(not terminates_of(ddps), "no Terminate from the target")
    expect(closed, "the target closed the stream")
    return Expect(None, reset=True, close=CLOSE_LOCAL_ABORT,
                  wcs=(r"WC wr_id=200 status=5 ", r"WC wr_id=201 status=5 ",
                       r"WC wr_id=100 status=5 ", FLUSHED),
                  no_wcs=(r"WC wr_id=20[01] status=0 ",))


# --- IRD / ORD (RFC 5040 §6.5, RFC 6581 §5): a Read Request counts against
# the responder's IRD from its receipt until its Read Response has been sent
# in full; an initiator never has more than ORD Reads outstanding. uiw_target
# "big": an 8 MiB REMOTE_READ region, so a Read Response of it cannot be
# handed to the stream while we do not read (socket buffers are smaller).

BIG_LEN = 8 << 20
_BIG_PERIOD = bytes(((i * 7 + 3) & 0xFF) for i in range(256))


def big_pattern(off, n):
    """Bytes [off, off + n) of the target's "big" region (pattern())."""
    k = off % 256
    reps = (k + n + 255) // 256
    return (_BIG_PERIOD * reps)[k:k + n]


def read_responses(sock, reqs, timeout=30.0, then_terminate=False):
    """Reads the target's FPDUs: Read Responses for reqs [(sink STag, sink TO,
    size, source offset)], complete and in request order, until a Terminate
    (not consumed: returned as the FPDU bytes) or all reqs are answered.
    CRCs are checked on FPDUs up to 4 KiB (iwpeer's CRC is slow Python).
    Returns (number of complete Read Responses, Terminate FPDU or None)."""
    deadline = time.monotonic() + timeout
    done, got, parts = 0, 0, []
    while done < len(reqs) or then_terminate:
        f = iw.read_fpdu(sock, deadline, crc=False)
        d = iw.Ddp(f.ulpdu)
        if d.opcode == iw.OP_TERMINATE:
            expect(got == 0, "the Terminate follows a complete Read Response (%d bytes of "
                   "response %d before it)" % (got, done + 1))
            return done, f
        expect(done < len(reqs), "no Read Response beyond the %d accepted Reads (got %s)" %
               (len(reqs), d))
        sink, to, size, off = reqs[done]
        expect(d.tagged and d.opcode == iw.OP_READ_RESP and d.stag == sink and
               d.to == to + got, "Read Response %d segment at sink 0x%x/0x%x (got %s)" %
               (done + 1, sink, to + got, d))
        if len(f.raw) <= 4096:
            expect(f.raw[-4:] == iw.crc_wire(f.raw[:-4]), "CRC of a Read Response FPDU")
        parts.append(d.payload)
        got += len(d.payload)
        expect(got <= size, "Read Response %d no longer than asked" % (done + 1))
        if d.last:
            expect(got == size, "Read Response %d complete: %d of %d bytes" %
                   (done + 1, got, size))
            data = b"".join(parts)
            expect(data == big_pattern(off, size),
                   "Read Response %d carries the source bytes" % (done + 1))
            say("hostile: Read Response %d complete (%d bytes)" % (done + 1, size))
            done, got, parts = done + 1, 0, []
    return done, None


class Pushback:
    """A socket whose first recv returns bytes already read (a Terminate
    FPDU consumed by read_responses), for read_until_close."""

    def __init__(self, sock, data):
        self.sock, self.data = sock, data

    def settimeout(self, t):
        self.sock.settimeout(t)

    def recv(self, n):
        if self.data:
            out, self.data = self.data[:n], self.data[n:]
            return out
        return self.sock.recv(n)


def big_rreq(c, msn, k, size=BIG_LEN, off=0):
    body = struct.pack(">IQIIQ", 0xC0FFEE, k * BIG_LEN, size, c.big[0], c.big[1] + off)
    return iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, msn, 0, body), body, \
        (0xC0FFEE, k * BIG_LEN, size, off)


def _ird_beyond(ird, pause):
    def case(sock, c):
        reqs = [big_rreq(c, k + 1, k) for k in range(ird + 1)]
        if pause:
            # the IRD Reads first; their Responses are being sent (and stay
            # in flight: we do not read) when the next Request arrives
            send_fpdus(sock, *[u for u, _, _ in reqs[:ird]])
            time.sleep(0.3)
            send_fpdus(sock, reqs[ird][0])
        else:
            sock.sendall(b"".join(iw.fpdu(u) for u, _, _ in reqs))
        # the target waits up to 0.2 s for Responses in flight, then
        # terminates; its Terminate waits (up to 2 s) behind the Responses
        time.sleep(1.0)
        n, term = read_responses(sock, [r for _, _, r in reqs[:ird]], then_terminate=True)
        say("hostile: %d complete Read Responses before the Terminate" % n)
        expect(term is not None, "a Terminate instead of Read Response %d" % (ird + 1))
        if pause:
            expect(n >= 1, "the Read Responses in flight were completed before it")
        u, body, _ = reqs[ird]
        c.pushback = term.raw
        return err([(DDP, DDP_U, 0x03), (DDP, DDP_U, 0x02)], u, rhdr=body)
    case.__doc__ = ("IRD %d: %d Read Requests of 8 MiB %s, without reading the "
                    "Responses: the last one is beyond the IRD (1/2/0x03, echoed with R)" %
                    (ird, ird + 1, "(the last after 0.3 s)" if pause else "back to back"))
    return case


def _ird_after_completion(ird):
    def case(sock, c):
        """IRD Read Requests outstanding all the time: the next one is sent
        as soon as a Read Response has arrived in full; IRD + 3 in all."""
        total, size = ird + 3, 1 << 20
        reqs = [big_rreq(c, k + 1, k, size, k * 4096) for k in range(total)]
        send_fpdus(sock, *[u for u, _, _ in reqs[:ird]])
        for k in range(total):
            n, term = read_responses(sock, [reqs[k][2]])
            expect(term is None and n == 1, "Read Response %d arrived in full" % (k + 1))
            if k + ird < total:
                send_fpdus(sock, reqs[k + ird][0])
        return Expect(None)
    return case


def _ord_limit(ord_):
    def case(sock, c):
        """uiw_target "ordtest" posts 5 RDMA Reads at once; we negotiated an
        IRD of ord_ (so its ORD is ord_). We answer a Read only after 0.3 s
        without a new Request: at no time may more than ORD be outstanding,
        and the limit is reached."""
        outstanding, nxt, answered, most = [], 1, 0, 0
        while answered < 5:
            deadline = time.monotonic() + 0.3
            while True:
                try:
                    f = iw.read_fpdu(sock, deadline)
                except TimeoutError:
                    break
                d = iw.Ddp(f.ulpdu)
                say("hostile: from target: %s" % d)
                expect(f.crc_ok and not d.tagged and d.opcode == iw.OP_READ_REQ and
                       d.qn == iw.QN_READ_REQ and d.msn == nxt,
                       "Read Request MSN %d (CRC good)" % nxt)
                sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ",
                                                                           d.payload)
                i = nxt - 1
                expect((sink_stag, sink_to, size, src_stag, src_to) ==
                       (c.stag, c.iova + 16384 + 256 * i, 64, 0x5eed10 + i, 0x10000 * (i + 1)),
                       "Read Request %d names the posted sink/source" % nxt)
                outstanding.append((sink_stag, sink_to, i))
                nxt += 1
                most = max(most, len(outstanding))
                expect(len(outstanding) <= ord_, "at most ORD %d Reads outstanding (%d)" %
                       (ord_, len(outstanding)))
            expect(outstanding, "the target sent its next Read Request")
            sink_stag, sink_to, i = outstanding.pop(0)
            off = 16384 + 256 * i
            send_fpdus(sock, iw.tagged(iw.OP_READ_RESP, sink_stag, sink_to, flipped(off, 64)))
            answered += 1
        expect(most == ord_, "the ORD limit %d was reached (at most %d outstanding)" %
               (ord_, most))
        return Expect(None, mr=5 * 64,
                      wcs=tuple(r"WC wr_id=%d status=0 opcode=2 byte_len=64 " % (400 + i)
                                for i in range(5)))
    return case


def r_local_inv_fails(sock, c):
    """uiw_target "badinv" posts a Send (500), a Local Invalidate of an
    unknown STag (501) and a Send (502). The Local Invalidate fails locally:
    iWARP has no SQE state, so (as siw) the connection ends without a
    Terminate; 500 arrives and completes, 501 completes with LOC_PROT_ERR
    (4), 502 and the receives flush (5), UIW_QP_EV_FATAL, the QP in ERR."""
    ddps, closed, rest = read_until_close(sock, True)
    expect(not terminates_of(ddps), "no Terminate from the target")
    sends = [d for d in ddps if not d.tagged and d.opcode == iw.OP_SEND]
    expect(len(sends) == 1 and sends[0].msn == 1 and len(sends[0].payload) == 16,
           "exactly the Send before the failing WR arrived (%d Sends)" % len(sends))
    expect(closed and not rest, "the target closed the stream")
    return Expect(None, reset=True, close=CLOSE_LOCAL_ABORT,
                  wcs=(r"WC wr_id=500 status=0 ", r"WC wr_id=501 status=4 ",
                       r"WC wr_id=502 status=5 ", FLUSHED, r"EVENT FATAL",
                       r"STATS .* state=6"),
                  no_wcs=(r"WC wr_id=502 status=0 ",))


# --- markers (RFC 5044 §5): the target runs with UIWARP_MPA_MARKERS=2 and we
# ask for markers: both directions carry them (iw.MarkedConn inserts ours and
# checks the target's strictly: position, FPDUPTR, reserved zero, CRC over
# them).

def _fit(tx, make, want, what):
    """The first n in 1..1023 whose FPDU make(n), put at tx.off, satisfies
    want(end offset, wire length, [(FPDU-relative marker position, FPDUPTR)])."""
    for n in range(1, 1024):
        w = tx.fpdu(make(n), crc=False, commit=False)
        if want(tx.off + len(w), len(w), tx.last_markers):
            return n
    raise Failed("no FPDU length gives " + what)


def _send_marked(sock, u, **kw):
    w = sock.tx.fpdu(u, **kw)
    marks = sock.tx.last_markers
    say("hostile: sent FPDU of %d octets, markers (pos, FPDUPTR) %s" % (len(w), marks))
    sock.send_raw(w)
    sock.last_wire_len = len(w)
    return marks


def _marked_read(sock, c, src=20000, n=3000):
    """An RDMA Read (MSN 1) of n MR bytes at src into sink 0xC0FFEE/0x40;
    its Response must come back with good CRCs over at least five markers
    (n = 3000) and carry the MR's bytes."""
    before = sock.rx.markers
    sock.sendall(iw.read_request(1, 0xC0FFEE, 0x40, n, c.stag, c.iova + src))
    got = b""
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        f = iw.read_fpdu(sock, deadline)
        d = iw.Ddp(f.ulpdu)
        say("hostile: from target: %s (markers %s)" % (d, [(p, m.hex()) for p, m in f.markers]))
        expect(f.crc_ok, "the target's CRC (over its markers) is good")
        expect(d.tagged and d.opcode == iw.OP_READ_RESP and d.stag == 0xC0FFEE and
               d.to == 0x40 + len(got), "a Read Response to our sink")
        got += d.payload
        if d.last:
            break
    expect(got == bytes(MR_PATTERN(src + i) for i in range(n)),
           "the Read Response carries MR bytes [%d, %d)" % (src, src + n))
    expect(sock.rx.markers - before >= 5, "the target put %d markers in its Read Response(s)" %
           (sock.rx.markers - before))


def r_markers_ok(sock, c):
    """Markers both ways, valid traffic: four Sends sized so that a marker
    falls inside the second one's DDP header, one sits right in front of the
    third one's CRC field (inside the CRC), and the fourth ends at a marker
    position (the next FPDU starts with a marker, FPDUPTR 0); an RDMA Write
    of 3000 bytes in two 1500-byte FPDUs (each spanning two marker
    positions or more); an RDMA Read of 3000 bytes whose Response comes
    back with markers. Every byte lands; every receive completes."""
    tx = sock.tx
    send = lambda msn, n: iw.untagged(iw.OP_SEND, iw.QN_SEND, msn, 0, bytes([0x40 + msn]) * n)
    lens = []
    n = _fit(tx, lambda k: send(1, k), lambda end, w, m: end % 512 == 504,
             "a next FPDU 8 octets before a marker")
    lens.append(n)
    _send_marked(sock, send(1, n))
    marks = _send_marked(sock, send(2, 200))
    expect(any(pos == 8 for pos, _ in marks), "a marker inside Send 2's DDP header (octet 8)")
    lens.append(200)
    n = _fit(tx, lambda k: send(3, k),
             lambda end, w, m: any(p == w - 8 and p > 0 for p, _ in m),
             "a marker right in front of the CRC field")
    marks = _send_marked(sock, send(3, n))
    w = sock.last_wire_len
    expect((w - 8, w - 8) in marks,
           "Send 3 has a marker right in front of its CRC field (octet %d of %d)" % (w - 8, w))
    lens.append(n)
    n = _fit(tx, lambda k: send(4, k), lambda end, w, m: end % 512 == 0,
             "an FPDU that ends at a marker position")
    _send_marked(sock, send(4, n))
    lens.append(n)
    off = 4096
    for i in range(2):
        o = off + 1500 * i
        marks = _send_marked(sock, iw.tagged(iw.OP_WRITE, c.stag, c.iova + o, flipped(o, 1500),
                                             last=i == 1))
        expect(len(marks) >= 2, "Write segment %d spans %d marker positions" % (i + 1, len(marks)))
        if i == 0:
            expect(marks[0] == (0, 0), "Write segment 1 starts with a marker (FPDUPTR 0)")
    _marked_read(sock, c)
    return Expect(None, mr=3000, rchanged=sum(lens),
                  wcs=tuple(r"WC wr_id=%d status=0 opcode=128 byte_len=%d " % (100 + i, n)
                            for i, n in enumerate(lens)))


def r_markers_default(sock, c):
    """Our Request asks for markers; the target runs with the default
    UIWARP_MPA_MARKERS (1: honour a peer's M, RFC 5044 §7.1.2 leaves a
    responder no reason to refuse what it can do): the Reply has no M, so
    our FPDUs go without markers, and the target's carry them. A Send of 200
    bytes lands; an RDMA Read of 3000 bytes comes back with a marker every
    512 octets of the target's stream, each checked by iw.MarkedConn."""
    sock.sendall(iw.fpdu(iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x41" * 200)))
    _marked_read(sock, c)
    return Expect(None, rchanged=200, wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=200 ",))


def _markers_bad(which):
    def case(sock, c):
        a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x55" * 24)
        if which == "lead":
            # the Write starts at a marker position
            n = _fit(sock.tx, lambda k: iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x55" * k),
                     lambda end, w, m: end % 512 == 0, "an FPDU that ends at a marker")
            a = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x55" * n)
        _send_marked(sock, a)
        time.sleep(0.1)
        u = iw.tagged(iw.OP_WRITE, c.stag, c.iova + 4096, flipped(4096, 1500))
        sock.tx.fpdu(u, commit=False)
        good = sock.tx.last_markers
        if which == "lead":
            idx = 0
            expect(good[0] == (0, 0), "the Write starts with a marker")
        else:
            idx = [i for i, (pos, _) in enumerate(good) if pos > 2 + 14][0]
        marks = _send_marked(sock, u, bad_marker=lambda i, pos, ptr: iw.marker(ptr + 64)
                             if i == idx else None)
        say("hostile: marker %d (FPDU octet %d) carries FPDUPTR %d instead of %d" %
            (idx, marks[idx][0], marks[idx][1] + 64, marks[idx][1]))
        return Expect([(LLP, 0, 0x03)], bare=True, mr=0, rchanged=len(a) - 18,
                      wcs=(r"WC wr_id=100 status=0 opcode=128 byte_len=%d " % (len(a) - 18),
                           FLUSHED),
                      no_wcs=(r"WC wr_id=10[1-3] status=0 ",))
    case.__doc__ = (
        "Markers both ways: a valid Send (receive 100 completes), then a 1500-byte RDMA "
        "Write whose %s marker has a wrong FPDUPTR (+64): RFC 5044 §5 / §8, an LLP error: "
        "Terminate 2/0/0x03 (marker error; no DDP header echoed), the close, nothing of the "
        "Write placed, 101-103 flush" % ("leading (FPDU at a marker position)"
                                         if which == "lead" else "first in-payload"))
    return case


def _atomic_beyond_ird():
    def case(sock, c):
        # IRD 1 (we negotiated ORD 1): the Read's Response stays in flight
        # (8 MiB, we do not read); the Atomic Request (MSN 2: it shares QN
        # 1's MSNs with Read Requests) is the one beyond the IRD
        u1, _, r1 = big_rreq(c, 1, 0)
        send_fpdus(sock, u1)
        time.sleep(0.3)
        au = iw.untagged(OP_ATOMIC_REQ, iw.QN_ATOMIC_REQ, 2, 0, atomic_req(c.stag, c.iova + 64))
        send_fpdus(sock, au)
        time.sleep(1.0)
        n, term = read_responses(sock, [r1], then_terminate=True)
        say("hostile: %d complete Read Responses before the Terminate" % n)
        expect(term is not None, "a Terminate instead of the Atomic Response")
        expect(n == 1, "the Read Response in flight was completed before it")
        c.pushback = term.raw
        return err([(DDP, DDP_U, 0x03)], au)
    case.__doc__ = ("RFC 7306 §5 / RFC 5040 §6.5: IRD 1, an 8 MiB Read Request whose "
                    "Response stays in flight (we do not read), then an Atomic Request "
                    "(MSN 2): beyond the IRD, the same answer as a Read (1/2/0x03, the "
                    "DDP header echoed), nothing of the MR changes")
    return case


# --- registered memory the application took away (issue 13): uiw_target
# "gone" registers 8 pages, then munmaps pages 1-5 and makes page 6
# read-only. An access of the peer's that reaches them must be answered
# with a Terminate, not a crash: the remote protection error the STag
# checks give for bytes the STag does not reach / may not write (a Write:
# DDP 1/1/0x01 or RDMAP 0/1/0x02; a Read or an Atomic: RDMAP 0/1/0x01 or
# 0/1/0x02). A buffer of the target's own (a receive, a Read's sink): DDP
# local catastrophic 1/0/0x00 (as siw), that WR completes with LOC_PROT_ERR
# (status 4). What is still mapped keeps working.

GONE_PAGE = 4096


def gone_pat(off, n, flip=0xFF):
    """Bytes for gone-region offset off on: the pattern flipped."""
    return bytes(MR_PATTERN(off + i) ^ flip for i in range(n))


def _gone(e, p0=0, p6=0, p7=0, span0=None):
    e.gone = {"p0": p0, "p6": p6, "p7": p7}
    e.gone_span0 = span0  # page-0 offsets [lo, hi) changes must stay in
    return e


def r_gone_write(sock, c):
    """A 100-byte RDMA Write into page 1 (unmapped after registration):
    DDP tagged base or bounds 1/1/0x01; nothing else changes."""
    stag, iova = c.gone
    u = iw.tagged(iw.OP_WRITE, stag, iova + GONE_PAGE + 64, gone_pat(GONE_PAGE + 64, 100))
    send_fpdus(sock, u)
    return _gone(err([(DDP, DDP_T, 0x01)], u))


def r_gone_write_span(sock, c):
    """A 200-byte RDMA Write from 100 bytes before the end of page 0 into
    page 1: 1/1/0x01; page 0 changes only in its last 100 bytes."""
    stag, iova = c.gone
    off = GONE_PAGE - 100
    u = iw.tagged(iw.OP_WRITE, stag, iova + off, gone_pat(off, 200))
    send_fpdus(sock, u)
    e = err([(DDP, DDP_T, 0x01)], u)
    return _gone(e, p0=None, span0=(off, GONE_PAGE))


def _gone_write_big(split):
    def run(sock, c):
        stag, iova = c.gone
        off = GONE_PAGE - 4 if split else GONE_PAGE
        u = iw.tagged(iw.OP_WRITE, stag, iova + off, gone_pat(off, 18 * 1024))
        f = iw.fpdu(u)
        if split:
            # the length, the DDP header and 4 payload bytes alone (the
            # target reads 18 header bytes whatever the kind), then the
            # rest: the 4 bytes go from the ring into page 0, and the ring
            # is empty when the rest comes, so the target asks the kernel
            # to put it straight into page 1 (unmapped): recvmsg's EFAULT
            sock.sendall(f[:2 + 18])
            time.sleep(0.3)
            sock.sendall(f[2 + 18:])
            return _gone(err([(DDP, DDP_T, 0x01)], u), p0=None, span0=(off, GONE_PAGE))
        sock.sendall(f)
        return _gone(err([(DDP, DDP_T, 0x01)], u))
    run.__doc__ = ("An RDMA Write of 18 KiB in one FPDU (above MPA_RX_SMALL_MAX: placed as "
                   "it arrives)%s: 1/1/0x01" %
                   (" from 4 bytes before the end of page 0 on, its first 20 bytes sent "
                    "0.3 s before the rest (recvmsg straight into the unmapped page 1: "
                    "EFAULT); page 0 changes only in its last 4 bytes" if split else
                    " into pages 1-5 (unmapped; copied from the ring)"))
    return run


def r_gone_write_ro(sock, c):
    """A 100-byte RDMA Write into page 6 (read-only after registration):
    RDMAP remote protection, access rights 0/1/0x02; page 6 unchanged."""
    stag, iova = c.gone
    off = 6 * GONE_PAGE + 8
    u = iw.tagged(iw.OP_WRITE, stag, iova + off, gone_pat(off, 100))
    send_fpdus(sock, u)
    return _gone(err([(RDMAP, RP_PROT, 0x02)], u))


def r_gone_write_ok(sock, c):
    """RDMA Writes of 100 bytes into page 0 and page 7, which are still
    mapped: placed, no Terminate (the STag still works where the memory
    is)."""
    stag, iova = c.gone
    send_fpdus(sock, iw.tagged(iw.OP_WRITE, stag, iova + 8, gone_pat(8, 100)),
               iw.tagged(iw.OP_WRITE, stag, iova + 7 * GONE_PAGE, gone_pat(7 * GONE_PAGE, 100)))
    return _gone(Expect(None), p0=100, p7=100)


def _gone_read(page, size, terms):
    def run(sock, c):
        stag, iova = c.gone
        src = iova + page * GONE_PAGE + (0 if size > GONE_PAGE else 32)
        body = struct.pack(">IQIIQ", 0xC0FFEE, 0x100, size, stag, src)
        u = iw.untagged(iw.OP_READ_REQ, iw.QN_READ_REQ, 1, 0, body)
        send_fpdus(sock, u)
        if terms is None:
            off = src - iova
            return _gone(Expect(None, read_resp=(0xC0FFEE, 0x100, gone_pat(off, size, 0))))
        e = _gone(err(terms, u, rhdr=body))
        e.no_read_resp = size <= GONE_PAGE
        return e
    run.__doc__ = ("An RDMA Read Request of %d bytes from page %d%s" %
                   (size, page, {1: " (unmapped): RDMAP 0/1/0x01, the Read Request echoed, "
                                    "no byte of a Read Response",
                                 0: " on into page 1 (unmapped): RDMAP 0/1/0x01, the Read "
                                    "Request echoed",
                                 6: " (read-only): answered"}[page]))
    return run


def _gone_atomic(page, code):
    def run(sock, c):
        stag, iova = c.gone
        u = iw.untagged(OP_ATOMIC_REQ, iw.QN_ATOMIC_REQ, 1, 0,
                        atomic_req(stag, iova + page * GONE_PAGE + 64))
        send_fpdus(sock, u)
        return _gone(err([(RDMAP, RP_PROT, code)], u))
    run.__doc__ = ("A FetchAdd on page %d (%s): RDMAP 0/1/0x%02x, nothing changes" %
                   (page, "unmapped" if page != 6 else "read-only", code))
    return run


def r_gone_recv(sock, c):
    """A 100-byte Send while the receive buffers' page is unmapped: DDP
    local catastrophic 1/0/0x00; the receive it took completes with
    LOC_PROT_ERR (status 4), the rest flush."""
    u = iw.untagged(iw.OP_SEND, iw.QN_SEND, 1, 0, b"\x5a" * 100)
    send_fpdus(sock, u)
    return _gone(err([(DDP, 0, 0x00)], u, wcs=(r"WC wr_id=100 status=4 ", FLUSHED)))


def r_gone_read_sink(sock, c):
    """The target's RDMA Read (wr_id 210) into page 2 (unmapped): we answer
    it with a valid 64-byte Read Response: DDP local catastrophic 1/0/0x00
    (the target's own buffer is gone), the Read completes with LOC_PROT_ERR
    (status 4)."""
    deadline = time.monotonic() + IO_TIMEOUT
    f = iw.read_fpdu(sock, deadline)
    d = iw.Ddp(f.ulpdu)
    expect(d.opcode == iw.OP_READ_REQ, "the target's Read Request arrived")
    sink_stag, sink_to, size, _, _ = struct.unpack(">IQIIQ", d.payload)
    expect(size == 64 and sink_to == c.gone[1] + 2 * GONE_PAGE,
           "it names its sink in page 2 of the gone region")
    u = iw.tagged(iw.OP_READ_RESP, sink_stag, sink_to, b"\x33" * size)
    send_fpdus(sock, u)
    return _gone(err([(DDP, 0, 0x00)], u, wcs=(r"WC wr_id=210 status=4 ", FLUSHED)))


# name: (function, target options, MPA Request arguments)
RULE_CASES = {
    "interleave_send_write": (r_interleave_send_write, "", {}),
    "interleave_write_send": (r_interleave_write_send, "", {}),
    "interleave_send_readreq": (r_interleave_send_readreq, "", {}),
    "interleave_send_send": (r_interleave_send_send, "", {}),
    "interleave_read_resp": (r_interleave_read_resp, "reads", {}),
    "read_resp_ok": (r_read_resp_ok, "reads", {}),
    "read_resp_unsolicited": (r_read_resp_unsolicited, "", {}),
    "read_resp_extra": (r_read_resp_extra, "reads", {}),
    "read_resp_bad_stag": (r_read_resp_bad_stag, "reads", {}),
    "read_resp_outside_sink": (r_read_resp_outside_sink, "reads", {}),
    "read_resp_too_long": (r_read_resp_too_long, "reads", {}),
    "msn_old": (r_msn_old, "", {}),
    "mo_gap": (r_mo_gap, "", {}),
    "too_long_segments": (r_too_long_segments, "", {}),
    "no_buffer": (r_no_buffer, "", {}),
    "send_qn1": (r_send_qn1, "", {}),
    "read_req_msn": (r_read_req_msn, "", {}),
    "read_req_ird0": (r_read_req_ird0, "", {"ord_": 0}),
    "zero_write": (r_zero_write, "", {}),
    "zero_send": (r_zero_send, "", {}),
    "zero_read": (r_zero_read, "", {}),
    "ddp_version_untagged": (r_ddp_version_untagged, "", {}),
    "rdmap_version_untagged": (r_rdmap_version_untagged, "", {}),
    "send_tagged": (r_send_tagged, "", {}),
    "write_untagged": (r_write_untagged, "", {}),
    "imm_not_negotiated": (r_imm_not_negotiated, "", {}),
    "atomic_not_negotiated": (r_atomic_not_negotiated, "", {}),
    "ddp_rsvd_set": (r_ddp_rsvd_set, "", {}),
    "rdmap_rsvd_set": (r_rdmap_rsvd_set, "", {}),
    "send_rsvdulp_set": (r_send_rsvdulp_set, "", {}),
    "write_ro_mr": (r_write_ro_mr, "extra", {}),
    "read_wo_mr": (r_read_wo_mr, "extra", {}),
    "write_other_pd": (r_write_other_pd, "extra", {}),
    "read_other_pd": (r_read_other_pd, "extra", {}),
    "write_hi_end": (r_write_hi_end, "extra", {}),
    "to_wrap_hi": (r_to_wrap_hi, "extra", {}),
    "read_to_wrap": (r_read_to_wrap, "extra", {}),
    "send_inv_unknown": (r_send_inv_unknown, "", {}),
    "send_se_inv_other_pd": (r_send_se_inv_other_pd, "extra", {}),
    "send_inv_then_write": (r_send_inv_then_write, "extra", {}),
    "imm_ok": (r_imm_ok, "", {"rfc7306": True}),
    "imm_no_buffer": (r_imm_no_buffer, "", {"rfc7306": True}),
    "atomic_no_access": (r_atomic_no_access, "", {"rfc7306": True}),
    "atomic_resp_unsolicited": (r_atomic_resp_unsolicited, "", {"rfc7306": True}),
    "atomic_misaligned": (_atomic_bad_to("misaligned"), "atomic", {"rfc7306": True}),
    "atomic_bounds_end": (_atomic_bad_to("end"), "atomic", {"rfc7306": True}),
    "atomic_bounds_past": (_atomic_bad_to("past"), "atomic", {"rfc7306": True}),
    "atomic_bounds_below": (_atomic_bad_to("below"), "atomic", {"rfc7306": True}),
    "atomic_req_qn3": (r_atomic_req_qn3, "", {"rfc7306": True}),
    "atomic_resp_qn4": (r_atomic_resp_qn4, "", {"rfc7306": True}),
    "atomic_req_msn_shared": (r_atomic_req_msn_shared, "", {"rfc7306": True}),
    "peer_terminate_full": (r_peer_terminate_full, "", {}),
    "peer_terminate_short": (r_peer_terminate_short, "", {}),
    "peer_terminate_read": (r_peer_terminate_read, "reads", {}),
    "peer_rst_mid_message": (r_peer_rst_mid_message, "", {}),
    "peer_fin_mid_fpdu": (r_peer_fin_mid_fpdu, "", {}),
    "local_abort": (r_local_abort, "reads,abort", {}),
    "srq_no_buffer": (r_srq_no_buffer, "srq", {}),
    "srq_too_long": (r_srq_too_long, "srq", {}),
    "srq_too_long_segments": (r_srq_too_long_segments, "srq", {}),
    "srq_msn": (r_srq_msn, "srq", {}),
    "srq_bad_mo": (r_srq_bad_mo, "srq", {}),
    "mw_write_ok": (r_mw_write_ok, "mw", {}),
    "mw_bounds": (r_mw_bounds, "mw", {}),
    "mw_before_base": (r_mw_before_base, "mw", {}),
    "mw_write_ro": (r_mw_write_ro, "mw", {}),
    "mw_send_inv_then_write": (r_mw_send_inv_then_write, "mw", {}),
    "mw_local_inv_then_write": (r_mw_local_inv_then_write, "mwinv", {}),
    "mw_read_ro_bounds": (r_mw_read_ro_bounds, "mw", {}),
    "ird1_inflight": (_ird_beyond(1, True), "big", {"ord_": 1}),
    "ird2_inflight": (_ird_beyond(2, True), "big", {"ord_": 2}),
    "ird1_burst": (_ird_beyond(1, False), "big", {"ord_": 1}),
    "ird2_burst": (_ird_beyond(2, False), "big", {"ord_": 2}),
    "ird1_after_completion": (_ird_after_completion(1), "big", {"ord_": 1}),
    "ird2_after_completion": (_ird_after_completion(2), "big", {"ord_": 2}),
    "ord1_limit": (_ord_limit(1), "ordtest", {"ird": 1}),
    "ord2_limit": (_ord_limit(2), "ordtest", {"ird": 2}),
    "local_inv_fails": (r_local_inv_fails, "badinv", {}),
    "atomic_ird1_inflight": (_atomic_beyond_ird(), "big", {"ord_": 1, "rfc7306": True}),
    "markers_ok": (r_markers_ok, "", {"markers": True}),
    "markers_default": (r_markers_default, "", {"markers": "peer"}),
    "markers_bad_ptr": (_markers_bad("payload"), "", {"markers": True}),
    "markers_bad_lead": (_markers_bad("lead"), "", {"markers": True}),
    "gone_write": (r_gone_write, "gone", {}),
    "gone_write_span": (r_gone_write_span, "gone", {}),
    "gone_write_big": (_gone_write_big(False), "gone", {}),
    "gone_write_big_split": (_gone_write_big(True), "gone", {}),
    "gone_write_ro": (r_gone_write_ro, "gone", {}),
    "gone_write_ok": (r_gone_write_ok, "gone", {}),
    "gone_read": (_gone_read(1, 100, [(RDMAP, RP_PROT, 0x01)]), "gone", {}),
    "gone_read_span": (_gone_read(0, 2 * GONE_PAGE, [(RDMAP, RP_PROT, 0x01)]), "gone", {}),
    "gone_read_ro": (_gone_read(6, 64, None), "gone", {}),
    "gone_atomic": (_gone_atomic(1, 0x01), "gone", {"rfc7306": True}),
    "gone_atomic_ro": (_gone_atomic(6, 0x02), "gone", {"rfc7306": True}),
    "gone_recv": (r_gone_recv, "gonerecv", {}),
    "gone_read_sink": (r_gone_read_sink, "goneread", {}),
}
# Cases where uiwarp's answer differs from the RFC's today (see the report in
# docs/conformance.md, "Known-bad hostile cases"). ctest: WILL_FAIL, label
# known-bad. Move a case out of here when the engine is fixed.
KNOWN_BAD = (
)


def read_target_reads(sock, c):
    """The two RDMA Read Requests uiw_target posts with "reads"; checks their
    wire form and returns [(sink STag, sink TO, size)] in order."""
    out = []
    deadline = time.monotonic() + IO_TIMEOUT
    while len(out) < 2:
        f = iw.read_fpdu(sock, deadline)
        d = iw.Ddp(f.ulpdu)
        say("hostile: from target: %s" % d)
        expect(f.crc_ok, "Read Request CRC good")
        expect(not d.tagged and d.opcode == iw.OP_READ_REQ and d.qn == iw.QN_READ_REQ and
               d.last and d.mo == 0 and d.msn == len(out) + 1 and d.dv == 1 and d.rv == 1,
               "untagged Read Request on QN 1, MSN %d, MO 0, L" % (len(out) + 1))
        expect(d.ddp_rsvd == 0 and d.rdmap_rsvd == 0 and d.inv == 0,
               "reserved fields of the Read Request are zero")
        expect(len(d.payload) == 28, "Read Request body is 28 bytes")
        sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ", d.payload)
        i = len(out)
        expect(sink_stag == c.stag and sink_to == c.iova + READ_SINK_OFF[i] and
               size == READ_LEN and (src_stag, src_to) == READ_SRC[i],
               "Read Request %d names sink/size/source as posted" % (i + 1))
        out.append((sink_stag, sink_to, size))
    return out


def check_read_resp(ddps, want):
    sink, to, data = want
    got = b""
    seen = False
    for d in ddps:
        if d.tagged and d.opcode == iw.OP_READ_RESP:
            expect(d.stag == sink and d.to == to + len(got),
                   "Read Response to our sink STag/TO (0x%x/0x%x)" % (d.stag, d.to))
            got += d.payload
            seen = True
            if d.last:
                break
    expect(seen, "a Read Response arrived")
    expect(got == data, "Read Response carries the %d expected bytes" % len(data))


def rule_case(case, sock, c):
    fn = RULE_CASES[case][0]
    e = fn(sock, c)
    if e.read_resp is not None:
        # the answer to our Read first, then our FIN
        early = []
        deadline = time.monotonic() + IO_TIMEOUT
        while True:
            f = iw.read_fpdu(sock, deadline)
            d = iw.Ddp(f.ulpdu)
            say("hostile: from target: %s" % d)
            expect(f.crc_ok, "CRC of the target's FPDU is good")
            early.append(d)
            if d.opcode == iw.OP_TERMINATE or (d.opcode == iw.OP_READ_RESP and d.last):
                break
        check_read_resp(early, e.read_resp)
    if e.reset:
        return e
    if e.terms is None:
        sock.shutdown(socket.SHUT_WR)
    pb = getattr(c, "pushback", None)
    ddps, closed, rest = read_until_close(Pushback(sock, pb) if pb else sock, True)
    ts = terminates_of(ddps)
    if e.terms is None or e.terms == []:
        expect(not ts, "no Terminate from the target")
        expect(closed, "the target closed the stream")
        return e
    expect(len(ts) == 1, "exactly one Terminate arrived (%d)" % len(ts))
    t = ts[0]
    say("hostile: observed Terminate layer/etype/code %d/%d/0x%02x M=%d D=%d R=%d "
        "seglen=%s rest=%s" % (t.layer, t.etype, t.code, t.m, t.d, t.r, t.seg_len,
                               t.rest.hex()))
    expect(any(t.layer == l and t.etype == et and t.code == k for l, et, k in e.terms),
           "Terminate layer/etype/code %d/%d/0x%02x is one of %s" %
           (t.layer, t.etype, t.code,
            ", ".join("%d/%d/0x%02x" % x for x in e.terms)))
    expect(t.ddp.msn == 1 and t.ddp.mo == 0,
           "Terminate MSN 1 / MO 0 (got %s/%s)" % (t.ddp.msn, t.ddp.mo))
    expect(t.rsvd == 0, "Terminate reserved bits are zero")
    if e.bare:
        expect(not t.m and not t.d and not t.r and not t.rest,
               "Terminate has neither M, D nor R and nothing after its control word")
    if e.hdr is not None:
        expect(t.m and t.seg_len == e.seg_len,
               "Terminate has M and the offending DDP segment length %d (M=%d len=%s)" %
               (e.seg_len, t.m, t.seg_len))
        n = len(e.hdr)
        expect(t.d and t.rest[:n] == e.hdr,
               "Terminate has D and echoes the offending DDP header %s (got %s)" %
               (e.hdr.hex(), t.rest[:n].hex()))
        if e.rhdr is not None:
            expect(t.r and t.rest[n:n + 28] == e.rhdr,
                   "Terminate has R and echoes the offending Read Request %s (got %s)" %
                   (e.rhdr.hex(), t.rest[n:n + 28].hex()))
            n += 28
        elif t.r:
            n += 28  # a Read Request body echoed for a non-RDMAP error: fine
        expect(len(t.rest) == n, "nothing after the echoed headers (%d extra bytes)" %
               (len(t.rest) - n))
    if getattr(e, "no_read_resp", False):
        expect(not any(d.opcode == iw.OP_READ_RESP for d in ddps),
               "no byte of a Read Response before the Terminate")
    expect(ddps[-1].opcode == iw.OP_TERMINATE, "nothing after the Terminate")
    expect(closed, "the stream closed after the Terminate")
    expect(not rest, "no partial FPDU before the close")
    return e


def rule_checks(case, e, tgt, rc):
    m = tgt.find(r"SURVIVED placed_outside=(\d+) changed=(\d+) first=(-?\d+) last=(-?\d+) "
                 r"rchanged=(\d+)")
    expect(m is not None, "target printed SURVIVED")
    outside, changed, first, last, rchanged = (int(x) for x in m.groups())
    expect(outside == 0, "nothing placed outside the MR (placed_outside=%d)" % outside)
    if isinstance(e.mr, list):
        ok = changed == 0 or any(first >= lo and last < hi for lo, hi in e.mr)
        expect(ok, "MR changes only inside %s (changed=%d, %d..%d)" % (e.mr, changed, first,
                                                                        last))
    else:
        expect(changed == e.mr, "MR bytes changed: %d (want %d)" % (changed, e.mr))
    if isinstance(e.rchanged, tuple):
        expect(rchanged <= e.rchanged[0], "receive buffer bytes changed: %d (at most %d)" %
               (rchanged, e.rchanged[0]))
    else:
        expect(rchanged == e.rchanged, "receive buffer bytes changed: %d (want %d)" %
               (rchanged, e.rchanged))
    mx = tgt.find(r"xpd2=(\d+) xro=(\d+) xwo=(\d+) xhi=(\d+) xguard=(\d+)")
    if mx is not None:
        got = dict(zip(("pd2", "ro", "wo", "hi", "guard"), (int(v) for v in mx.groups())))
        for k, v in got.items():
            want = e.x.get(k, 0)
            expect(v == want, "extra region %s bytes changed: %d (want %d)" % (k, v, want))
    gone = getattr(e, "gone", None)
    if gone is not None:
        mg = tgt.find(r"GONECHANGED p0=(\d+) p6=(\d+) p7=(\d+) first0=(-?\d+) last0=(-?\d+)")
        expect(mg is not None, "target printed GONECHANGED")
        got = dict(zip(("p0", "p6", "p7", "first0", "last0"), (int(v) for v in mg.groups())))
        for k in ("p0", "p6", "p7"):
            if gone[k] is not None:
                expect(got[k] == gone[k], "gone region page %s bytes changed: %d (want %d)" %
                       (k[1:], got[k], gone[k]))
        if e.gone_span0 is not None:
            lo, hi = e.gone_span0
            expect(got["p0"] == 0 or (got["first0"] >= lo and got["last0"] < hi),
                   "page 0 changes only inside [%d, %d) (%d bytes, %d..%d)" %
                   (lo, hi, got["p0"], got["first0"], got["last0"]))
    for w in e.wcs:
        expect(tgt.find(w) is not None, "target printed a completion matching %r" % w)
    for w in e.no_wcs:
        expect(tgt.find(w) is None, "target printed no completion matching %r" % w)
    if e.terms:
        mt = tgt.find(r"TERMINFO sent=(\d) layer=(\d+) etype=(\d+) code=0x([0-9a-f]+)")
        expect(mt is not None and mt.group(1) == "1" and
               (int(mt.group(2)), int(mt.group(3)), int(mt.group(4), 16)) in e.terms,
               "the engine recorded the Terminate it sent (uiw_qp_term_info)")
    elif e.terms == []:
        mt = tgt.find(r"TERMINFO sent=(\d)")
        if case == "peer_terminate_short":
            # 2 bytes: Layer/EType and code but no flags; recording it is optional
            expect(mt is None or mt.group(1) == "0",
                   "no Terminate recorded as sent (uiw_qp_term_info)")
        else:
            expect(mt is not None and mt.group(1) == "0",
                   "the engine recorded a received Terminate (uiw_qp_term_info)")
    want_close = e.close if e.close is not None else (
        CLOSE_GRACEFUL if e.terms is None else CLOSE_TERMINATE)
    mc = tgt.find(r"CLOSE reason=(\d+)")
    expect(mc is not None and int(mc.group(1)) == want_close,
           "the engine's close reason is %d (uiw_qp_close_reason: %s)" %
           (want_close, mc.group(1) if mc else None))
    if e.terms is not None:
        expect(tgt.find(r"EVENT TERMINATE") is not None, "target reported EVENT TERMINATE")
    else:
        expect(tgt.find(r"EVENT TERMINATE") is None, "target reported no EVENT TERMINATE")
    expect(tgt.find(r"EVENT DISCONNECTED") is not None, "target reported EVENT DISCONNECTED")
    expect(rc == 0, "target exited 0 (rc=%s)" % rc)



def read_before_fin(target_path, rounds=10):
    """A Read Request immediately followed by our FIN (a TCP half-close: we
    still read). The Read arrived before the FIN, so it must be answered
    before the target closes (RFC 5040 §5.2.2 / §6: an accepted RDMA Read
    Request is answered; the graceful close completes outstanding work).
    The race is in the target, so the case runs several rounds."""
    for k in range(rounds):
        tgt = Target(target_path, 10, 10000)
        sock = None
        try:
            m = tgt.wait_line(r"LISTEN port=(\d+)", IO_TIMEOUT)
            expect(m is not None, "round %d: target listens" % k)
            sock = connect(int(m.group(1)))
            m = tgt.wait_line(r"READY stag=0x([0-9a-f]+) iova=0x([0-9a-f]+)", IO_TIMEOUT)
            expect(m is not None, "round %d: READY" % k)
            stag, iova = int(m.group(1), 16), int(m.group(2), 16)
            sock.sendall(iw.read_request(1, 0xC0FFEE, 0x40, 32, stag, iova + 64))
            sock.shutdown(socket.SHUT_WR)
            ddps, closed, _ = read_until_close(sock, True)
            expect(not terminates_of(ddps), "round %d: no Terminate" % k)
            check_read_resp(ddps, (0xC0FFEE, 0x40, bytes(MR_PATTERN(64 + i) for i in range(32))))
            expect(closed, "round %d: the target closed the stream" % k)
        finally:
            if sock:
                sock.close()
            rc = tgt.finish(30)
        expect(rc == 0 and tgt.find(r"SURVIVED placed_outside=0 changed=0 ") is not None,
               "round %d: target SURVIVED, exit 0" % k)
    return 0


def run(case, target_path):
    if case == "read_before_fin":
        try:
            return read_before_fin(target_path)
        except (Failed, EOFError, TimeoutError, ValueError, OSError) as e:
            say("hostile: FAIL [%s]: %s: %s" % (case, type(e).__name__, e))
            return 1
    mpa = case in MPA_CASES
    rule = case in RULE_CASES
    opts, conn_kw = (RULE_CASES[case][1], RULE_CASES[case][2]) if rule else ("", {})
    env = {}
    if conn_kw.get("rfc7306"):
        env["UIWARP_RFC7306"] = "1"
    if conn_kw.get("markers") is True:
        env["UIWARP_MPA_MARKERS"] = "2"  # honour our M, ask for markers too
    if case == "mpa_markers":
        env["UIWARP_MPA_MARKERS"] = "0"  # configured off: markers refused
    tgt = Target(target_path, 20, 4000 if mpa else 20000, opts, env)
    sock = None
    try:
        if case not in ALL_CASES and not rule:
            raise Failed("unknown case %s (cases: %s)" % (case, " ".join(ALL_CASES)))
        m = tgt.wait_line(r"LISTEN port=(\d+)", IO_TIMEOUT)
        expect(m is not None, "target listens")
        port = int(m.group(1))
        if mpa:
            mpa_case(case, port)
            rc = tgt.finish(30)
            m = tgt.find(r"SURVIVED placed_outside=(\d+) changed=(\d+)")
            expect(m is not None, "target printed SURVIVED")
            expect(tgt.find(r"^READY") is None, "target never reported a connection")
            expect(rc == 0, "target exited 0 (rc=%s)" % rc)
            return 0
        sock = connect(port, rev=1 if case == "mpa_rev1" else 2, **conn_kw)
        m = tgt.wait_line(r"READY stag=0x([0-9a-f]+) iova=0x([0-9a-f]+) len=(\d+) "
                          r"rstag=0x([0-9a-f]+) riova=0x([0-9a-f]+)", IO_TIMEOUT)
        expect(m is not None, "target accepted the connection (READY)")
        c = Ctx(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3)),
                int(m.group(4), 16), int(m.group(5), 16))
        if "extra" in opts:
            mx = tgt.find(r"EXTRA pd2=0x([0-9a-f]+) ro=0x([0-9a-f]+) wo=0x([0-9a-f]+) "
                          r"hi=0x([0-9a-f]+) hiiova=0x([0-9a-f]+)")
            expect(mx is not None, "target registered the extra regions (EXTRA)")
            c.x = dict(zip(("pd2", "ro", "wo", "hi", "hiiova"),
                           (int(v, 16) for v in mx.groups())))
        c.tgt = tgt
        if "big" in opts:
            mb = tgt.find(r"BIG stag=0x([0-9a-f]+) iova=0x([0-9a-f]+) len=(\d+)")
            expect(mb is not None and int(mb.group(3)) == BIG_LEN,
                   "target registered the big region (BIG)")
            c.big = (int(mb.group(1), 16), int(mb.group(2), 16))
        if "gone" in opts:
            mg = tgt.find(r"GONE stag=0x([0-9a-f]+) iova=0x([0-9a-f]+)")
            expect(mg is not None, "target registered the gone region (GONE)")
            c.gone = (int(mg.group(1), 16), int(mg.group(2), 16))
        if "mw" in opts:
            mw = tgt.find(r"MW rw=0x([0-9a-f]+) ro=0x([0-9a-f]+)")
            expect(mw is not None, "target bound its memory windows (MW)")
            c.mw = {"rw": int(mw.group(1), 16), "ro": int(mw.group(2), 16)}
        if "reads" in opts:
            c.reads = read_target_reads(sock, c)
        if rule:
            e = rule_case(case, sock, c)
            sock.close()
            sock = None
            rc = tgt.finish(30)
            rule_checks(case, e, tgt, rc)
            return 0
        wc = None
        if case in GOOD_CASES:
            want_changed, want_rchanged, wc = good_case(case, sock, c)
            allowed = None
        elif case == "peer_terminate":
            peer_terminate_case(sock, c)
            want_changed, want_rchanged, allowed = 0, 0, None
        else:
            allowed = error_case(case, sock, c)
            want_changed, want_rchanged = 0, 0

        sock.close()
        sock = None
        rc = tgt.finish(30)
        m = tgt.find(r"SURVIVED placed_outside=(\d+) changed=(\d+) first=(-?\d+) last=(-?\d+) "
                     r"rchanged=(\d+)")
        expect(m is not None, "target printed SURVIVED")
        outside, changed, first, last, rchanged = (int(x) for x in m.groups())
        expect(outside == 0, "nothing placed outside the MR (placed_outside=%d)" % outside)
        if isinstance(allowed, tuple):
            lo, hi = allowed
            expect(changed == 0 or (first >= lo and last < hi),
                   "MR changes only inside the validated range [%d, %d) (changed=%d, %d..%d)" %
                   (lo, hi, changed, first, last))
        else:
            expect(changed == want_changed, "MR bytes changed: %d (want %d)" %
                   (changed, want_changed))
        expect(rchanged == want_rchanged, "receive buffer bytes changed: %d (want %d)" %
               (rchanged, want_rchanged))
        if wc is not None:
            expect(tgt.find(r"WC wr_id=100 status=0 opcode=128 byte_len=%d" % wc) is not None,
                   "target completed the receive (status 0, %d bytes)" % wc)
        if case not in GOOD_CASES:
            expect(tgt.find(r"EVENT TERMINATE") is not None, "target reported EVENT TERMINATE")
        expect(tgt.find(r"EVENT DISCONNECTED") is not None, "target reported EVENT DISCONNECTED")
        expect(rc == 0, "target exited 0 (rc=%s)" % rc)
        return 0
    except (Failed, EOFError, TimeoutError, ValueError, OSError) as e:
        say("hostile: FAIL [%s]: %s: %s" % (case, type(e).__name__, e))
        if sock:
            sock.close()
        tgt.finish(10)
        return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="one of: " + " ".join(ALL_CASES + tuple(RULE_CASES)) +
                    ", or 'list', 'list-mock', 'list-known-bad'")
    ap.add_argument("--target", default="")
    a = ap.parse_args()
    if a.case == "list":
        print(" ".join(ALL_CASES + tuple(RULE_CASES) + ("read_before_fin",)))
        return 0
    if a.case == "list-mock":
        print(" ".join(MOCK_CASES))
        return 0
    if a.case == "list-known-bad":
        print(" ".join(KNOWN_BAD))
        return 0
    if not os.access(a.target, os.X_OK if not a.target.endswith(".py") else os.R_OK):
        say("hostile: target %s not built" % a.target)
        return 1
    rc = run(a.case, a.target)
    say("hostile: %s: %s" % (a.case, "PASS" if rc == 0 else "FAIL"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
