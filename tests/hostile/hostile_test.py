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
    def __init__(self, path, wait_s, req_ms):
        cmd = [path] if not path.endswith(".py") else [sys.executable, path]
        self.proc = subprocess.Popen(cmd + ["0", str(wait_s), str(req_ms)],
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


def connect(port, crc=True, rev=2):
    s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
    iw.set_nodelay(s)
    deadline = time.monotonic() + IO_TIMEOUT
    rep = iw.initiator_handshake(s, deadline, ird=4, ord_=4, p2p=True, rtr_write=True,
                                 rtr_read=False, crc=crc, rev=rev)
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
    expect(not rep.flags & iw.F_M, "MPA Reply has no markers")
    expect(rep.p2p, "MPA Reply echoes P2P (RFC 6581 §9.2)")
    expect(rep.rtr_write and not rep.rtr_read and not rep.rtr_send,
           "MPA Reply picks the Write RTR only")
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
    # markers: we never do them; interop notes §0 say reject with R
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


def run(case, target_path):
    mpa = case in MPA_CASES
    tgt = Target(target_path, 20, 4000 if mpa else 20000)
    sock = None
    try:
        if case not in ALL_CASES:
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
        sock = connect(port, rev=1 if case == "mpa_rev1" else 2)
        m = tgt.wait_line(r"READY stag=0x([0-9a-f]+) iova=0x([0-9a-f]+) len=(\d+) "
                          r"rstag=0x([0-9a-f]+) riova=0x([0-9a-f]+)", IO_TIMEOUT)
        expect(m is not None, "target accepted the connection (READY)")
        c = Ctx(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3)),
                int(m.group(4), 16), int(m.group(5), 16))
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
    ap.add_argument("case", help="one of: " + " ".join(ALL_CASES) + ", or 'list'")
    ap.add_argument("--target", default="")
    a = ap.parse_args()
    if a.case == "list":
        print(" ".join(ALL_CASES))
        return 0
    if not os.access(a.target, os.X_OK if not a.target.endswith(".py") else os.R_OK):
        say("hostile: target %s not built" % a.target)
        return 1
    rc = run(a.case, a.target)
    say("hostile: %s: %s" % (a.case, "PASS" if rc == 0 else "FAIL"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
