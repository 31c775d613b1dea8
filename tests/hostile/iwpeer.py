#!/usr/bin/env python3
"""iwpeer: an independent iWARP wire peer (MPA + DDP + RDMAP) in plain Python.

Standard library only. Nothing here uses uiwarp code: the CRC32c is a table
implementation of its own, the framing follows the RFCs directly, so it is an
oracle for what uiwarp puts on the wire and what it accepts.

    RFC 5044  MPA: request/reply frames (§7), FPDU = ULPDU_Length(be16)
              ULPDU PAD(0..3) CRC32c(4), CRC bytes least significant first.
    RFC 6581  enhanced setup: IRD/ORD word at the start of private data,
              P2P (A), RTR kinds (B send, C write, D read).
    RFC 5041  DDP tagged header (14 B) / untagged header (18 B).
    RFC 5040  RDMAP opcodes, Read Request body, Terminate (§4.8).

Command line (used by the tests):
    iwpeer.py selftest                 CRC vectors + frame round trips
    iwpeer.py responder HOST PORT      a trivial MPA responder (accepts one
                                       connection, replies, reads FPDUs until
                                       EOF, prints what it saw)
    iwpeer.py initiator HOST PORT [--coalesce] [--bad-crc]
                                       handshake + RTR + a few FPDUs with good
                                       CRCs (for the tshark self-check);
                                       --coalesce: 3 more FPDUs in one
                                       segment; --bad-crc: one more FPDU
                                       whose CRC is wrong
"""
import os
import socket
import struct
import sys
import time

# ---------------------------------------------------------------- CRC32c

_POLY_REFLECTED = 0x82F63B78  # Castagnoli, reflected


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY_REFLECTED if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c(data, crc=0):
    """Finished CRC32c of data (preset ~0, final complement), chainable."""
    c = crc ^ 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc_wire(data):
    """The 4 CRC bytes as MPA sends them: least significant byte first."""
    return struct.pack("<I", crc32c(data))


# ---------------------------------------------------------------- MPA

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
F_M, F_C, F_R, F_E = 0x80, 0x40, 0x20, 0x10
V2_P2P, V2_RTR_SEND = 0x8000, 0x4000  # IRD word
V2_RTR_WRITE, V2_RTR_READ = 0x8000, 0x4000  # ORD word


def mpa_frame(key, flags, rev, pd):
    return key + struct.pack(">BBH", flags, rev, len(pd)) + pd


def mpa_request(ird=4, ord_=4, p2p=True, rtr_write=True, rtr_read=False, crc=True,
                private=b"", rev=2, flags_extra=0):
    """flags_extra: more flag bits, e.g. uiwarp's RFC 7306 offer (Res bit
    0x01, a uiwarp convention, not an RFC)."""
    pd = b""
    flags = (F_C if crc else 0) | flags_extra
    if rev == 2:
        flags |= F_E
        iw = (ird & 0x3FFF) | (V2_P2P if p2p else 0)
        ow = (ord_ & 0x3FFF) | (V2_RTR_WRITE if rtr_write else 0) | \
            (V2_RTR_READ if rtr_read else 0)
        pd = struct.pack(">HH", iw, ow)
    return mpa_frame(KEY_REQ, flags, rev, pd + private)


class MpaFrame:
    def __init__(self, key, flags, rev, pd):
        self.key, self.flags, self.rev, self.pd = key, flags, rev, pd
        self.ird = self.ord = None
        self.p2p = self.rtr_write = self.rtr_read = self.rtr_send = False
        if rev == 2 and flags & F_E and len(pd) >= 4:
            iw, ow = struct.unpack(">HH", pd[:4])
            self.ird, self.ord = iw & 0x3FFF, ow & 0x3FFF
            self.p2p = bool(iw & V2_P2P)
            self.rtr_send = bool(iw & V2_RTR_SEND)
            self.rtr_write = bool(ow & V2_RTR_WRITE)
            self.rtr_read = bool(ow & V2_RTR_READ)

    def __str__(self):
        return ("key=%r flags=0x%02x rev=%d pd_len=%d ird=%s ord=%s p2p=%d rtr[w=%d r=%d s=%d]" %
                (self.key, self.flags, self.rev, len(self.pd), self.ird, self.ord,
                 self.p2p, self.rtr_write, self.rtr_read, self.rtr_send))


def recv_exact(sock, n, deadline):
    """n bytes, or raises EOFError (stream closed, with what was read) /
    TimeoutError. ECONNRESET counts as a close."""
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out after %d of %d bytes" % (len(buf), n))
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise TimeoutError("timed out after %d of %d bytes" % (len(buf), n))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            e = EOFError("stream closed after %d of %d bytes" % (len(buf), n))
            e.partial = buf
            raise e
        buf += chunk
    return buf


def read_mpa_frame(sock, deadline):
    hdr = recv_exact(sock, 20, deadline)
    key = hdr[:16]
    flags, rev, pdlen = struct.unpack(">BBH", hdr[16:20])
    if key not in (KEY_REQ, KEY_REP):
        raise ValueError("not an MPA frame: %r" % hdr)
    if pdlen > 512:
        raise ValueError("PD_Length %d > 512" % pdlen)
    pd = recv_exact(sock, pdlen, deadline) if pdlen else b""
    return MpaFrame(key, flags, rev, pd)


# ---------------------------------------------------------------- FPDU

def pad_len(ulpdu_len):
    return (-(2 + ulpdu_len)) & 3


def fpdu(ulpdu, crc=True, corrupt_crc=False):
    """ULPDU_Length(be16) ULPDU PAD CRC32c(LE). CRC off: 4 zero bytes."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu + b"\0" * pad_len(len(ulpdu))
    c = crc_wire(body) if crc else b"\0\0\0\0"
    if corrupt_crc:
        c = bytes([c[0] ^ 0xFF]) + c[1:]
    return body + c


class Fpdu:
    def __init__(self, ulpdu, crc_ok, raw):
        self.ulpdu, self.crc_ok, self.raw = ulpdu, crc_ok, raw


# ---------------------------------------------------------------- markers
#
# RFC 5044 §5, as uiwarp (mpa/fpdu.c) and Wireshark read it: when a direction
# has markers, a 4-byte marker sits at every stream offset that is a multiple
# of 512, offsets counted from the first octet after the Request (initiator
# to responder) or the Reply (responder to initiator). Marker = Reserved(16,
# zero) FPDUPTR(16): FPDUPTR is the distance from the marker back to the
# ULPDU_Length of the FPDU it sits in; a marker at an FPDU's first octet
# (e.g. at stream offset 0) has FPDUPTR 0, belongs to that FPDU and the
# ULPDU_Length follows it. A marker position right after an FPDU's last
# octet is the next FPDU's first octet. The CRC covers every octet of the
# FPDU before the CRC field, markers included. FPDUs are multiples of 4
# octets and so are the marker positions: a marker never splits the CRC
# field (one may sit right in front of it, inside the CRC's scope).

MARKER_PERIOD, MARKER_LEN = 512, 4


def marker(ptr, rsvd=0):
    return struct.pack(">HH", rsvd, ptr & 0xFFFF)


class MarkerTx:
    """One direction's marker state on send: off is the stream offset of
    the next octet (markers counted)."""

    def __init__(self, off=0):
        self.off = off

    def fpdu(self, ulpdu, crc=True, corrupt_crc=False, bad_marker=None, commit=True):
        """The FPDU of ulpdu as it goes on the wire at self.off, markers in.
        bad_marker(i, pos, ptr) -> 4 bytes or None: replaces the i-th marker
        of this FPDU (pos: its FPDU-relative position, ptr: the right
        FPDUPTR) with other bytes (the CRC covers what is sent). Returns the
        bytes; with commit the offset advances past them. .last_markers
        lists (FPDU-relative position, FPDUPTR) of the markers put in."""
        body = struct.pack(">H", len(ulpdu)) + ulpdu + b"\0" * pad_len(len(ulpdu))
        start = pos = self.off
        lenpos = start
        out = bytearray()
        marks = []

        def put_marker():
            nonlocal pos, lenpos
            ptr = 0 if pos == start else pos - lenpos
            if pos == start:
                lenpos = start + MARKER_LEN
            m = marker(ptr)
            if bad_marker is not None:
                alt = bad_marker(len(marks), pos - start, ptr)
                if alt is not None:
                    m = alt
            marks.append((pos - start, ptr))
            out.extend(m)
            pos += MARKER_LEN

        i = 0
        while i < len(body):
            if pos % MARKER_PERIOD == 0:
                put_marker()
            k = min(len(body) - i, MARKER_PERIOD - pos % MARKER_PERIOD)
            out.extend(body[i:i + k])
            i += k
            pos += k
        if pos % MARKER_PERIOD == 0:
            put_marker()  # right in front of the CRC field: in the CRC
        c = crc_wire(bytes(out)) if crc else b"\0\0\0\0"
        if corrupt_crc:
            c = bytes([c[0] ^ 0xFF]) + c[1:]
        assert pos % MARKER_PERIOD <= MARKER_PERIOD - 4  # never splits the CRC
        out.extend(c)
        pos += 4
        if 0xFFFF < max([p for _, p in marks] + [0]):
            raise ValueError("FPDU too long for a 16-bit FPDUPTR")
        self.last_markers = marks
        if commit:
            self.off = pos
        return bytes(out)

    def wire_len(self, ulpdu_len):
        """Octets an FPDU with a ULPDU of ulpdu_len takes at self.off."""
        return len(self.fpdu(bytes(ulpdu_len), crc=False, commit=False))


class MarkerRx:
    """One direction's marker state on receive (the peer's stream offset).
    read_fpdu strips the markers and checks each one strictly: reserved
    bits zero, FPDUPTR 0 at the FPDU's first octet, else the distance back
    to the ULPDU_Length. A bad marker raises ValueError."""

    def __init__(self, off=0):
        self.off = off
        self.markers = 0  # markers seen so far

    def _take(self, sock, n, deadline, raw, marks):
        out = b""
        while len(out) < n:
            if self.off % MARKER_PERIOD == 0:
                m = recv_exact(sock, MARKER_LEN, deadline)
                marks.append((self.off, m))
                raw.extend(m)
                self.off += MARKER_LEN
                self.markers += 1
            k = min(n - len(out), MARKER_PERIOD - self.off % MARKER_PERIOD)
            b = recv_exact(sock, k, deadline)
            raw.extend(b)
            out += b
            self.off += k
        return out

    def read_fpdu(self, sock, deadline, crc=True):
        start = self.off
        raw = bytearray()
        marks = []
        lb = self._take(sock, 2, deadline, raw, marks)
        n = struct.unpack(">H", lb)[0]
        rest = self._take(sock, n + pad_len(n), deadline, raw, marks)
        scope = len(raw)
        c = self._take(sock, 4, deadline, raw, marks)
        if len(raw) - scope > 4:
            scope = len(raw) - 4  # a marker right in front of the CRC field
        ok = (c == crc_wire(bytes(raw[:scope]))) if crc else True
        lenpos = start + MARKER_LEN if marks and marks[0][0] == start else start
        for pos, m in marks:
            rsvd, ptr = struct.unpack(">HH", m)
            want = 0 if pos == start else pos - lenpos
            if rsvd != 0 or ptr != want:
                raise ValueError("bad marker from the target at stream offset %d (FPDU at "
                                 "%d): %s, want FPDUPTR %d" % (pos, start, m.hex(), want))
        f = Fpdu(rest[:n], ok, bytes(raw))
        f.markers = [(pos - start, m) for pos, m in marks]
        return f


class MarkedConn:
    """A connected socket with markers on one or both directions. sendall
    takes whole FPDUs as fpdu() builds them (no markers) and sends each
    with its markers (a good CRC is recomputed over the octets sent, a bad
    one stays bad); read_fpdu() (module function) reads through rx."""

    def __init__(self, sock, tx, rx):
        self.sock = sock
        self.tx = MarkerTx() if tx else None
        self.rx = MarkerRx() if rx else None

    def __getattr__(self, name):
        return getattr(self.sock, name)

    def recv(self, n):
        return self.sock.recv(n)

    def settimeout(self, t):
        self.sock.settimeout(t)

    def sendall(self, data):
        if self.tx is None:
            return self.sock.sendall(data)
        out = b""
        while data:
            n = struct.unpack(">H", data[:2])[0]
            end = 2 + n + pad_len(n) + 4
            if len(data) < end:
                raise ValueError("MarkedConn.sendall: not a whole FPDU")
            f, data = data[:end], data[end:]
            bad = f[-4:] != crc_wire(f[:-4])
            out += self.tx.fpdu(f[2:2 + n], corrupt_crc=bad)
        self.sock.sendall(out)

    def send_raw(self, data):
        self.sock.sendall(data)


def read_fpdu(sock, deadline, crc=True):
    if getattr(sock, "rx", None) is not None and isinstance(sock, MarkedConn):
        return sock.rx.read_fpdu(sock.sock, deadline, crc)
    lb = recv_exact(sock, 2, deadline)
    n = struct.unpack(">H", lb)[0]
    rest = recv_exact(sock, n + pad_len(n) + 4, deadline)
    raw = lb + rest
    body, c = raw[:-4], raw[-4:]
    ok = (c == crc_wire(body)) if crc else True
    return Fpdu(rest[:n], ok, raw)


# ---------------------------------------------------------------- DDP / RDMAP

DDP_T, DDP_L, DDP_DV = 0x80, 0x40, 0x01
RDMAP_RV = 0x40  # version 1 in the top two bits
OP_WRITE, OP_READ_REQ, OP_READ_RESP, OP_SEND = 0, 1, 2, 3
OP_SEND_INV, OP_SEND_SE, OP_SEND_SE_INV, OP_TERMINATE = 4, 5, 6, 7
QN_SEND, QN_READ_REQ, QN_TERMINATE = 0, 1, 2
# RFC 7306 §4.1 / §10: Atomic Requests share QN 1 with Read Requests;
# Atomic Responses have QN 3
QN_ATOMIC_REQ, QN_ATOMIC_RESP = QN_READ_REQ, 3


def tagged(op, stag, to, payload=b"", last=True):
    ctrl = DDP_T | (DDP_L if last else 0) | DDP_DV
    return struct.pack(">BBIQ", ctrl, RDMAP_RV | op, stag, to) + payload


def untagged(op, qn, msn, mo, payload=b"", last=True, inv_stag=0):
    ctrl = (DDP_L if last else 0) | DDP_DV
    return struct.pack(">BBIIII", ctrl, RDMAP_RV | op, inv_stag, qn, msn, mo) + payload


def rdma_write(stag, to, data, crc=True, corrupt_crc=False):
    return fpdu(tagged(OP_WRITE, stag, to, data), crc, corrupt_crc)


def write_rtr(crc=True):
    """RFC 6581 Write RTR as siw and uiwarp send it: zero-length tagged
    RDMA Write, STag 1, TO 0."""
    return rdma_write(1, 0, b"", crc)


def read_request(msn, sink_stag, sink_to, size, src_stag, src_to, crc=True):
    body = struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to)
    return fpdu(untagged(OP_READ_REQ, QN_READ_REQ, msn, 0, body), crc)


class Ddp:
    """A parsed DDP/RDMAP segment."""

    def __init__(self, ulpdu):
        if len(ulpdu) < 2:
            raise ValueError("ULPDU shorter than a DDP control field")
        c0, c1 = ulpdu[0], ulpdu[1]
        self.tagged = bool(c0 & DDP_T)
        self.last = bool(c0 & DDP_L)
        self.ddp_rsvd = (c0 >> 2) & 0xF
        self.dv = c0 & 3
        self.rv = c1 >> 6
        self.rdmap_rsvd = (c1 >> 4) & 3
        self.opcode = c1 & 0xF
        self.stag = self.to = self.qn = self.msn = self.mo = self.inv = None
        if self.tagged:
            if len(ulpdu) < 14:
                raise ValueError("tagged header short: %d" % len(ulpdu))
            self.stag, self.to = struct.unpack(">IQ", ulpdu[2:14])
            self.payload = ulpdu[14:]
        else:
            if len(ulpdu) < 18:
                raise ValueError("untagged header short: %d" % len(ulpdu))
            self.inv, self.qn, self.msn, self.mo = struct.unpack(">IIII", ulpdu[2:18])
            self.payload = ulpdu[18:]

    def __str__(self):
        if self.tagged:
            return "tagged op=%d L=%d dv=%d rv=%d stag=0x%x to=0x%x len=%d" % (
                self.opcode, self.last, self.dv, self.rv, self.stag, self.to, len(self.payload))
        return "untagged op=%d L=%d dv=%d rv=%d qn=%d msn=%d mo=%d len=%d" % (
            self.opcode, self.last, self.dv, self.rv, self.qn, self.msn, self.mo,
            len(self.payload))


LAYER_NAMES = {0: "RDMAP", 1: "DDP", 2: "LLP"}


class Terminate:
    """RFC 5040 §4.8 Terminate Control: Layer(4) EType(4) ErrCode(8) M D R
    Rsvd(13), then DDP Segment Length (16 bit, if M), the terminated DDP
    header (if D) and the terminated RDMAP header (28 B, if R)."""

    def __init__(self, ddp):
        p = ddp.payload
        if len(p) < 4:
            raise ValueError("Terminate payload shorter than its control word")
        self.ddp = ddp
        self.layer = p[0] >> 4
        self.etype = p[0] & 0xF
        self.code = p[1]
        flags = struct.unpack(">H", p[2:4])[0]
        self.m = bool(flags & 0x8000)
        self.d = bool(flags & 0x4000)
        self.r = bool(flags & 0x2000)
        self.rsvd = flags & 0x1FFF
        self.seg_len = None
        self.term_hdr = b""
        off = 4
        if self.m and len(p) >= off + 2:
            self.seg_len = struct.unpack(">H", p[off:off + 2])[0]
            off += 2
        self.rest = p[off:]

    def __str__(self):
        return ("TERMINATE layer=%d(%s) etype=%d code=0x%02x M=%d D=%d R=%d seglen=%s "
                "qn=%s msn=%s mo=%s extra=%s" %
                (self.layer, LAYER_NAMES.get(self.layer, "?"), self.etype, self.code,
                 self.m, self.d, self.r, self.seg_len, self.ddp.qn, self.ddp.msn,
                 self.ddp.mo, self.rest.hex()))


# ---------------------------------------------------------------- connection helpers

def initiator_handshake(sock, deadline, **req_kw):
    """Sends an MPA Request (rev 2, C, E, P2P, Write RTR offered by default),
    reads the Reply, sends the Write RTR if the reply picked it. Returns the
    reply frame."""
    sock.sendall(mpa_request(**req_kw))
    rep = read_mpa_frame(sock, deadline)
    if rep.key != KEY_REP:
        raise ValueError("expected an MPA Reply, got %r" % rep.key)
    if rep.flags & F_R:
        raise ValueError("MPA Reply has R (rejected): %s" % rep)
    return rep


def set_nodelay(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# ---------------------------------------------------------------- self test

def selftest():
    fails = 0
    count = 0

    def check(name, got, want):
        nonlocal fails, count
        count += 1
        ok = got == want
        print("%-40s %s%s" % (name, "ok" if ok else "FAIL",
                              "" if ok else " got %r want %r" % (got, want)))
        if not ok:
            fails += 1

    check("crc32c('123456789')", crc32c(b"123456789"), 0xE3069283)
    check("crc wire bytes", crc_wire(b"123456789"), bytes.fromhex("839206e3"))
    check("crc32c(32 x 00)", crc32c(b"\0" * 32), 0x8A9136AA)
    check("crc32c(32 x ff)", crc32c(b"\xff" * 32), 0x62A8AB43)
    check("crc chaining", crc32c(b"6789", crc32c(b"12345")), 0xE3069283)
    check("pad 14", pad_len(14), 0)
    check("pad 15", pad_len(15), 3)
    check("pad 16", pad_len(16), 2)
    rtr = write_rtr()
    check("RTR length", len(rtr), 2 + 14 + 0 + 4)
    check("RTR header", rtr[:16].hex(), "000ec14000000001" + "00" * 8)
    f = rdma_write(0x1234, 0x10, b"abc")
    check("write fpdu aligned", len(f) % 4, 0)
    d = Ddp(f[2:2 + struct.unpack(">H", f[:2])[0]])
    check("write parse", (d.tagged, d.opcode, d.stag, d.to, d.payload), (True, 0, 0x1234, 0x10, b"abc"))
    check("write crc", crc_wire(f[:-4]), f[-4:])
    t = fpdu(untagged(OP_TERMINATE, QN_TERMINATE, 1, 0, bytes([0x12, 0x01, 0x80, 0x00, 0, 5])))
    d = Ddp(t[2:2 + struct.unpack(">H", t[:2])[0]])
    tm = Terminate(d)
    check("terminate parse", (tm.layer, tm.etype, tm.code, tm.m, tm.seg_len, d.qn, d.opcode),
          (1, 2, 0x01, True, 5, 2, 7))
    req = mpa_request(ird=4, ord_=4)
    check("request bytes", req[16:24].hex(), "50020004" + "80048004")
    # markers (RFC 5044 §5): a 1200-octet ULPDU at stream offset 0 carries
    # a marker with FPDUPTR 0 in front, then 508 and 1020 (back to the
    # ULPDU_Length at offset 4); the CRC covers all three
    mt = MarkerTx()
    w = mt.fpdu(bytes(range(256)) * 4 + bytes(176))
    check("marker fpdu length", (len(w), mt.off), (1220, 1220))
    check("markers at 0/512/1024", (w[0:4], w[512:516], w[1024:1028]),
          (marker(0), marker(508), marker(1020)))
    check("marker fpdu crc", w[-4:], crc_wire(w[:-4]))
    # a marker right in front of the CRC field is inside the CRC
    mt = MarkerTx(512 - 2 - 14 - 4)
    w = mt.fpdu(tagged(OP_WRITE, 1, 0, b"abcd"))
    check("marker before crc", (len(w), w[-8:-4], w[-4:]),
          (28, marker(20), crc_wire(w[:-4])))
    a, b = socket.socketpair()
    try:
        mt, mr = MarkerTx(300), MarkerRx(300)
        fs = [untagged(OP_SEND, QN_SEND, k + 1, 0, bytes([k]) * (97 * k)) for k in range(12)]
        a.sendall(b"".join(mt.fpdu(u) for u in fs))
        got = [mr.read_fpdu(b, time.monotonic() + 5) for _ in fs]
        check("marker rx round trip", [(g.ulpdu, g.crc_ok) for g in got],
              [(u, True) for u in fs])
        a.sendall(MarkerTx(mr.off).fpdu(tagged(OP_WRITE, 1, 0, bytes(600)),
                                        bad_marker=lambda i, pos, ptr: marker(ptr + 4)))
        try:
            mr.read_fpdu(b, time.monotonic() + 5)
            check("marker rx refuses a bad FPDUPTR", False, True)
        except ValueError:
            check("marker rx refuses a bad FPDUPTR", True, True)
    finally:
        a.close()
        b.close()
    print("crc/framing self-test: %d of %d checks passed" % (count - fails, count))
    return 1 if fails else 0


# ---------------------------------------------------------------- trivial responder / initiator

def cmd_responder(host, port, timeout=20.0):
    """Accepts one connection, answers the MPA Request (mirrors C, picks the
    Write RTR), then reads FPDUs until EOF and prints them."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(1)
    ls.settimeout(timeout)
    print("LISTEN %s %d" % ls.getsockname(), flush=True)
    s, peer = ls.accept()
    set_nodelay(s)
    deadline = time.monotonic() + timeout
    req = read_mpa_frame(s, deadline)
    print("REQUEST", req, flush=True)
    crc = bool(req.flags & F_C)
    ow = V2_RTR_WRITE | 4 if req.rtr_write else (V2_RTR_READ | 4)
    pd = struct.pack(">HH", V2_P2P | 4, ow)
    s.sendall(mpa_frame(KEY_REP, (F_C if crc else 0) | F_E, 2, pd))
    t_reply = time.monotonic()
    n = 0
    while True:
        try:
            f = read_fpdu(s, deadline, crc)
        except EOFError:
            break
        n += 1
        # ms: when the FPDU was read, counted from the Reply's send
        print("FPDU crc_ok=%d ms=%.1f %s" % (f.crc_ok, (time.monotonic() - t_reply) * 1e3,
                                             Ddp(f.ulpdu)), flush=True)
    s.close()
    ls.close()
    print("DONE fpdus=%d" % n, flush=True)
    return 0


def cmd_initiator(host, port, bad_crc=False, coalesce=False, timeout=20.0):
    s = socket.create_connection((host, int(port)), timeout=timeout)
    set_nodelay(s)
    deadline = time.monotonic() + timeout
    rep = initiator_handshake(s, deadline)
    print("REPLY", rep, flush=True)
    crc = bool(rep.flags & F_C)
    s.sendall(write_rtr(crc))
    time.sleep(0.05)
    # One FPDU per TCP segment (as uiwarp sends them): small pauses between.
    s.sendall(rdma_write(0x100, 0x2000, b"hello iwarp " * 3, crc))
    time.sleep(0.05)
    s.sendall(fpdu(untagged(OP_SEND, QN_SEND, 1, 0, b"a send message"), crc))
    time.sleep(0.05)
    s.sendall(read_request(1, 0x200, 0x0, 64, 0x100, 0x2000, crc))
    time.sleep(0.05)
    if coalesce:
        # three FPDUs in one TCP segment
        s.sendall(rdma_write(0x100, 0x3000, b"x" * 10, crc) +
                  rdma_write(0x100, 0x3010, b"y" * 11, crc) +
                  fpdu(untagged(OP_SEND, QN_SEND, 2, 0, b"zz"), crc))
        time.sleep(0.05)
    if bad_crc:
        s.sendall(rdma_write(0x100, 0x4000, b"bad crc", crc, corrupt_crc=True))
        time.sleep(0.05)
    s.shutdown(socket.SHUT_WR)
    try:
        recv_exact(s, 1, time.monotonic() + 5)
    except (EOFError, TimeoutError):
        pass
    s.close()
    print("DONE", flush=True)
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    if argv[1] == "selftest":
        return selftest()
    if argv[1] == "responder" and len(argv) == 4:
        return cmd_responder(argv[2], argv[3])
    if argv[1] == "initiator" and len(argv) >= 4:
        return cmd_initiator(argv[2], argv[3], bad_crc="--bad-crc" in argv[4:],
                             coalesce="--coalesce" in argv[4:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
