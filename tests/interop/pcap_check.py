#!/usr/bin/env python3
"""Interop capture check: the MPA handshake bytes and, with CRC off, the FPDUs.

    pcap_check.py PCAP PORT [--crc on|off] [--min-fpdus N] [--allow-terminate]
                  [--handshake-only] [--expect-reject]

Prints the handshake as sent by each side (MPA Request, MPA Reply, and the
first FPDU of the initiator, which is the RTR in peer-to-peer mode), as hex.

With --crc on the FPDU checks are tests/e2e/tshark_check.py's (every FPDU has
a good CRC32c, DDP/RDMAP version 1, known opcodes, nothing malformed). With
--crc off tshark_check cannot be used (it wants a CRC on every FPDU), so this
checks the same things except that the CRC field must be present and zero.
"""
import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
TSHARK_CHECK = os.path.join(HERE, "..", "e2e", "tshark_check.py")
SEV_ERROR = 0x00800000


def tshark(args, timeout=300):
    p = subprocess.run(["tshark", "-n"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit("tshark failed: %s" % " ".join(args))
    return p.stdout.decode(errors="replace")


def streams(pcap, port):
    """Returns [(src 'ip:port', bytes)] in capture order, per direction concatenated."""
    out = tshark(["-r", pcap, "-Y", "tcp.port==%d && tcp.len>0" % port, "-T", "fields",
                  "-e", "ip.src", "-e", "tcp.srcport", "-e", "tcp.stream", "-e", "tcp.payload"])
    data = {}
    order = []
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 4 or not f[3]:
            continue
        key = (f[2], "%s:%s" % (f[0], f[1]))
        if key not in data:
            data[key] = b""
            order.append(key)
        data[key] += bytes.fromhex(f[3].replace(":", ""))
    return [(k, data[k]) for k in order]


def mpa_frame(b):
    if len(b) < 20 or b[:4] != b"MPA ":
        return None
    pdlen = int.from_bytes(b[18:20], "big")
    return b[:20 + pdlen]


def describe(fr):
    flags, rev, pdlen = fr[16], fr[17], int.from_bytes(fr[18:20], "big")
    names = [n for bit, n in ((0x80, "M"), (0x40, "C"), (0x20, "R"), (0x10, "E"), (0x08, "GSO"))
             if flags & bit]
    s = "%s flags=0x%02x[%s] rev=%d pd_len=%d" % (fr[:16].decode(errors="replace"), flags,
                                                 "".join(names), rev, pdlen)
    if rev == 2 and flags & 0x10 and pdlen >= 4:
        ird, ord_ = int.from_bytes(fr[20:22], "big"), int.from_bytes(fr[22:24], "big")
        bits = [n for v, bit, n in ((ird, 0x8000, "P2P"), (ird, 0x4000, "SendRTR"),
                                    (ord_, 0x8000, "WriteRTR"), (ord_, 0x4000, "ReadRTR"))
                if v & bit]
        s += " ird=%d ord=%d %s" % (ird & 0x3FFF, ord_ & 0x3FFF, "|".join(bits) or "-")
    return s


def handshake(pcap, port):
    st = streams(pcap, port)
    lines = []
    req = rep = None
    for (tcp_stream, src), b in st:
        fr = mpa_frame(b)
        if fr is None:
            continue
        kind = fr[:16]
        rest = b[len(fr):]
        lines.append("stream %s %s sent: %s" % (tcp_stream, src, describe(fr)))
        lines.append("  bytes: %s" % fr.hex(" "))
        if kind == b"MPA ID Req Frame":
            req = fr
        else:
            rep = fr
        if rest:
            ulen = int.from_bytes(rest[:2], "big")
            tot = 2 + ulen
            tot += (-tot) & 3
            first = rest[:tot + 4]
            lines.append("  first bytes after it: %s" % first.hex(" "))
    return req, rep, lines


_CRC_TAB = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TAB.append(_c)


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = _CRC_TAB[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def stream_check(pcap, port, sizes=None, flags=None):
    """Independent of the dissector's framing: reassembles each TCP stream (tshark
    follow), walks it FPDU by FPDU from the MPA frame on, and checks every CRC32c
    (when negotiated) and the DDP/RDMAP versions. Returns (ok, report lines);
    when sizes is a dict, sizes[source IP] gets the largest FPDU (octets on the
    wire: length field, ULPDU, pad, CRC) that IP sent; when flags is a dict,
    flags[source IP] the flags byte of the MPA Request or Reply that IP sent."""
    ids = sorted(set(tshark(["-r", pcap, "-Y", "tcp.port==%d" % port, "-T", "fields",
                             "-e", "tcp.stream"]).split()), key=int)
    ok, rep = True, []
    for sid in ids:
        out = tshark(["-r", pcap, "-q", "-z", "follow,tcp,raw,%s" % sid])
        dirs = {0: b"", 1: b""}
        node = {0: "", 1: ""}
        started = False
        for ln in out.splitlines():
            if ln.startswith("Node 0:"):
                node[0] = ln.split()[-1].rsplit(":", 1)[0]
                continue
            if ln.startswith("Node 1:"):
                node[1] = ln.split()[-1].rsplit(":", 1)[0]
                started = True
                continue
            if not started or ln.startswith("="):
                continue
            d = 1 if ln.startswith("\t") else 0
            h = ln.strip()
            if h and all(ch in "0123456789abcdef" for ch in h):
                dirs[d] += bytes.fromhex(h)
        if any(b"bytes missing in capture" in b for b in dirs.values()):
            rep.append("stream %s: capture incomplete (tshark: bytes missing in capture)" % sid)
            ok = False
        frames = {d: mpa_frame(b) for d, b in dirs.items()}
        crc_on = any(f is not None and f[16] & 0x40 for f in frames.values())
        if flags is not None:
            for d, f in frames.items():
                if f is not None:
                    flags[node[d]] = f[16]
        for d, b in dirs.items():
            fr = frames[d]
            if fr is None:
                continue
            i, n, nbad = len(fr), 0, 0
            while i + 2 <= len(b):
                ulen = int.from_bytes(b[i:i + 2], "big")
                tot = 2 + ulen + ((-(2 + ulen)) & 3)
                if i + tot + 4 > len(b):
                    break  # capture ended inside an FPDU
                body, crc = b[i:i + tot], b[i + tot:i + tot + 4]
                want = crc32c(body).to_bytes(4, "little") if crc_on else b"\0\0\0\0"
                if crc != want or ulen < 2 or (b[i + 2] & 3) != 1 or (b[i + 3] >> 6) != 1:
                    nbad += 1
                    if nbad <= 3:
                        rep.append("stream %s dir %d: bad FPDU at offset %d: %s" %
                                   (sid, d, i, b[i:i + 24].hex(" ")))
                n += 1
                if sizes is not None:
                    sizes[node[d]] = max(sizes.get(node[d], 0), tot + 4)
                i += tot + 4
            rep.append("stream %s dir %d (%s): %d FPDUs walked, %d bad, %d bytes left" %
                       (sid, d, "crc" if crc_on else "no crc", n, nbad, len(b) - i))
            ok = ok and nbad == 0
    return ok, rep


def crc_off_check(pcap, port, min_fpdus, allow_term):
    x = tshark(["-r", pcap, "-o", "tcp.try_heuristic_first:TRUE",
                "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
                "-Y", "tcp.port==%d" % port, "-T", "pdml"])
    root = ET.fromstring(x)
    errors = []
    n_fpdu = n_crc_zero = n_ddp = n_term = n_req = n_rep = 0
    for pkt in root.iter("packet"):
        fnum = None
        for e in pkt.iter():
            name, show, sn = e.get("name", ""), e.get("show", ""), e.get("showname", "") or ""
            if name == "frame.number":
                fnum = show
            elif name == "iwarp_mpa.key.req":
                n_req += 1
            elif name == "iwarp_mpa.key.rep":
                n_rep += 1
            elif name == "iwarp_mpa.fpdu":
                n_fpdu += 1
            elif name == "iwarp_mpa.crc":
                try:
                    v = int(show, 0)
                except ValueError:
                    v = -1
                if v == 0:
                    n_crc_zero += 1
                else:
                    errors.append("frame %s: CRC field %s with CRC off" % (fnum, show))
            elif name == "iwarp_ddp_rdmap":
                n_ddp += 1
            elif name == "iwarp_rdma.opcode":
                try:
                    if int(e.get("value") or show, 16 if e.get("value") else 0) == 7:
                        n_term += 1
                except ValueError:
                    pass
            elif name == "_ws.malformed":
                errors.append("frame %s: malformed: %s" % (fnum, sn or show))
            elif name == "_ws.expert.severity":
                try:
                    if int(show, 0) >= SEV_ERROR:
                        errors.append("frame %s: expert error: %s" % (fnum, sn))
                except ValueError:
                    pass
    if n_req < 1 or n_rep < 1:
        errors.append("MPA request/reply not decoded (req=%d rep=%d)" % (n_req, n_rep))
    if n_fpdu < min_fpdus:
        errors.append("only %d FPDUs (want >= %d)" % (n_fpdu, min_fpdus))
    if n_crc_zero != n_fpdu:
        errors.append("%d FPDUs, %d zero CRC fields" % (n_fpdu, n_crc_zero))
    if n_ddp < n_fpdu:
        errors.append("%d FPDUs, %d DDP/RDMAP decodes" % (n_fpdu, n_ddp))
    if n_term and not allow_term:
        errors.append("%d Terminates" % n_term)
    print("tshark (crc off): fpdus=%d crc_zero=%d ddp=%d terminates=%d" %
          (n_fpdu, n_crc_zero, n_ddp, n_term))
    for e in errors[:30]:
        print("tshark check: " + e)
    print("tshark check: %s" % ("OK" if not errors else "FAILED"))
    return 0 if not errors else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("port", type=int)
    ap.add_argument("--crc", choices=("on", "off"), default="on")
    ap.add_argument("--min-fpdus", type=int, default=1)
    ap.add_argument("--allow-terminate", action="store_true")
    ap.add_argument("--handshake-only", action="store_true")
    ap.add_argument("--expect-reject", action="store_true")
    ap.add_argument("--split-ok-from", default="",
                    help="source IPs, comma-separated (the kernel siw side; both sides when "
                         "large FPDUs are negotiated) whose FPDUs may be split across TCP "
                         "segments: tshark_check's 'not decoded as MPA' is accepted for them")
    ap.add_argument("--fpdu-rule", default="", metavar="IP:SEG",
                    help="uiwarp's address and the path's segment payload: IP may send FPDUs "
                         "above SEG octets only when both MPA frames carry the large-FPDU bit "
                         "0x08 (mpa/mpa_wire.h); otherwise every FPDU it sends fits SEG")
    ap.add_argument("--expect-large", action="store_true",
                    help="with --fpdu-rule: when both frames carry 0x08, IP must have sent an "
                         "FPDU above SEG (the case sends messages larger than a segment)")
    a = ap.parse_args()
    split_ok = set(x for x in a.split_ok_from.split(",") if x)

    req, rep, lines = handshake(a.pcap, a.port)
    for ln in lines:
        print(ln)
    rc = 0
    if req is None or rep is None:
        print("handshake: missing %s" % ("request" if req is None else "reply"))
        return 1
    if bool(rep[16] & 0x20) != a.expect_reject:
        print("handshake: reply R bit is %d, expected %d" % (bool(rep[16] & 0x20), a.expect_reject))
        rc = 1
    if not a.expect_reject:
        crc_on = bool(req[16] & 0x40 or rep[16] & 0x40)
        if crc_on != (a.crc == "on"):
            print("handshake: CRC negotiated %s, expected %s" % ("on" if crc_on else "off", a.crc))
            rc = 1
    if a.handshake_only:
        # still: nothing malformed anywhere
        x = tshark(["-r", a.pcap, "-Y", "tcp.port==%d && (_ws.malformed || _ws.expert.severity >= 8388608)" % a.port])
        if x.strip():
            print("tshark: malformed / expert errors:\n" + x)
            rc = 1
        return rc
    if a.crc == "on":
        args = [sys.executable, TSHARK_CHECK, a.pcap, str(a.port), "--min-fpdus", str(a.min_fpdus),
                "--verbose"]
        if a.allow_terminate:
            args.append("--allow-terminate")
        p = subprocess.run(args, timeout=600, stdout=subprocess.PIPE, universal_newlines=True)
        out = p.stdout
        sys.stdout.write(out)
        if p.returncode != 0 and a.split_ok_from:
            # the only failure: segments (from siw) carrying the tail/head of an FPDU
            # that tshark reassembled; TCP split the FPDU, the bytes are fine
            errs = [l for l in out.splitlines() if l.startswith("tshark check: ") and
                    not l.endswith(("OK", "FAILED"))]
            split = [l for l in out.splitlines() if "not decoded as MPA" in l and l.startswith("frame ")]
            frames = [l.split()[1].rstrip(":") for l in split]
            bad = []
            if frames:
                rows = tshark(["-r", a.pcap, "-Y", " || ".join("frame.number==%s" % f for f in frames),
                               "-T", "fields", "-e", "frame.number", "-e", "ip.src",
                               "-e", "tcp.analysis.retransmission"]).splitlines()
                for r in rows:
                    f = (r.split("\t") + ["", "", ""])[:3]
                    # siw's side may split an FPDU; either side's TCP may re-segment
                    # a retransmission: tshark reassembles both, the bytes are checked
                    if f[1] not in split_ok and not f[2]:
                        bad.append(f[0])
            # dissector errors (bad CRC / version / opcode after it lost the FPDU
            # framing) on siw-side frames: decide on the stream walk instead
            other = [l for l in errs if "not decoded as MPA" not in l]
            other_frames = set(l.split()[3].rstrip(":") for l in other if l.split()[2] == "frame")
            other_bad = []
            if other_frames:
                rows = tshark(["-r", a.pcap, "-Y", " || ".join("frame.number==%s" % f for f in other_frames),
                               "-T", "fields", "-e", "frame.number", "-e", "ip.src"]).splitlines()
                other_bad = [r for r in rows if r.split("\t")[1] not in split_ok]
            walk_ok, walk = stream_check(a.pcap, a.port)
            for ln in walk:
                print("stream walk: " + ln)
            only_known = all("not decoded as MPA" in l or l.split()[2] == "frame" for l in errs)
            if errs and only_known and not bad and not other_bad and walk_ok:
                print("accepted: tshark lost the FPDU framing on frames %s (siw side or TCP "
                      "retransmissions); the stream walk finds every FPDU intact" %
                      ",".join(sorted(set(frames) | other_frames, key=int)))
            else:
                rc |= 1
        else:
            rc |= p.returncode
    else:
        rc |= crc_off_check(a.pcap, a.port, a.min_fpdus, a.allow_terminate)
    if a.fpdu_rule:
        # FPDU sizes (RFC 5044 §4.1, the large-FPDU bit of mpa/mpa_wire.h)
        ip, seg = a.fpdu_rule.rsplit(":", 1)
        seg = int(seg)
        sizes, flags = {}, {}
        stream_check(a.pcap, a.port, sizes, flags)
        mine = flags.get(ip)
        peer = [f for k, f in flags.items() if k != ip]
        large_ok = mine is not None and bool(mine & 0x08) and bool(peer) and bool(peer[0] & 0x08)
        got = sizes.get(ip, 0)
        if large_ok:
            ok = got > seg or not a.expect_large
            print("fpdu size check: both frames carry 0x08: largest FPDU from %s is %d octets%s: %s"
                  % (ip, got, ", want > %d" % seg if a.expect_large else "",
                     "OK" if ok else "FAILED"))
        else:
            ok = got <= seg
            print("fpdu size check: large FPDUs not negotiated (frames 0x%02x / %s): largest FPDU "
                  "from %s is %d octets, want <= %d: %s" %
                  (mine or 0, " ".join("0x%02x" % f for f in peer), ip, got, seg,
                   "OK" if ok else "FAILED"))
        rc |= 0 if ok else 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
