#!/usr/bin/env python3
"""Decodes a capture with tshark's iWARP dissectors and checks it.

    tshark_check.py PCAP PORT [--min-fpdus N] [--opcodes 0,1,2,3]
                    [--allow-terminate] [--verbose]
                    [--two-pass] [--crc on|off] [--markers any|on|off]
                    [--min-markers N] [--rfc7306] [--large-fpdu on|off|any]

Wireshark's iwarp_mpa dissector is a TCP heuristic (enabled by default):
it recognises the connection by the MPA Request key and then decodes every
later segment of the connection as FPDUs (and hands the ULPDU to
iwarp_ddp_rdmap). So the capture must start before the connection. We ask
tshark to try heuristics first, and turn off the RPC-over-RDMA and SMB
Direct heuristics that sit on top of iwarp_ddp_rdmap: they would claim
rping's 16-byte Sends and flag them malformed.

Checks: an MPA Request and an MPA Reply are seen (no R bit); at least N
FPDUs; each FPDU has a CRC check field saying "Good CRC32" (so CRC was
negotiated and every CRC is right); each FPDU decodes as DDP version 1 /
RDMAP version 1 with a known opcode; no _ws.malformed and no expert info of
severity error anywhere; no Terminate unless --allow-terminate; the given
RDMAP opcodes all appear. Prints a summary line; exit 0 when all hold.

Options for the negotiated modes (tests/conformance/conf_tshark.sh; the
defaults keep the checks above unchanged):
  --two-pass   tshark -2: a segment whose bytes belong to an FPDU reassembled
               in a later frame is then marked as such (large FPDUs split
               over segments, as on loopback with 1 MiB Writes); a TCP
               retransmission (its bytes were decoded in the original
               segment) is not counted as undecoded. Every byte sent
               again must equal its first copy; a segment that is wholly
               such a copy is not counted as undecoded, and a TCP reassembly
               error tshark gives it (a copy overlapping a PDU it already
               reassembled) is not an error.
  --crc off    CRC not negotiated: neither the Request nor the Reply has C,
               and every FPDU carries a CRC field that is zero (tshark shows
               iwarp_mpa.crc instead of a CRC check). --crc on (default):
               every FPDU "Good CRC32".
  --markers on  both directions negotiated markers (M in Request and Reply):
               every decoded FPDU's markers are checked: reserved zero,
               FPDUPTR = the marker's distance from the FPDU's first octet,
               512 octets apart and, for an FPDU decoded from one segment, at
               stream offsets 0, 512, ... counted from the first octet after
               the Request / Reply, as many as that span holds; at least
               --min-markers markers decoded in each direction. tshark 4.0's
               MPA dissector computes a wrong PDU length for an FPDU with
               markers that does not start and end with its TCP segment and
               loses the framing of that direction from there on: segments
               it could not decode are then counted, not failed (the
               in-process decoder of conf_roundtrip checks every marker).
  --markers off  no M flag, no marker decoded anywhere.
  --large-fpdu the MPA Request/Reply must (on) / must not (off) carry the
               large-FPDU bit 0x08 (mpa/mpa_wire.h); any: it may
  --rfc7306    RFC 7306 opcodes accepted: 0xA / 0xB (tshark 4.0 knows them:
               Atomic Request / Response) and 0x8 / 0x9 (Immediate Data,
               with SE: tshark 4.0 has no name for them); the MPA Res bit
               uiwarp uses for its RFC 7306 offer only draws a tshark warning.
"""
import argparse
import collections
import subprocess
import sys
import xml.etree.ElementTree as ET

SEV_ERROR = 0x00800000
OPNAMES = {0: "Write", 1: "ReadReq", 2: "ReadResp", 3: "Send", 4: "SendInv", 5: "SendSE",
           6: "SendSEInv", 7: "Terminate"}
OPNAMES_7306 = {8: "Imm", 9: "ImmSE", 10: "AtomicReq", 11: "AtomicResp"}
MARKER_INTERVAL = 512


def tshark_pdml(pcap, port, two_pass=False):
    # on lo a frame is a whole GSO segment: up to 64 KiB of small FPDUs, a few
    # protocol layers each, past tshark's default of 500 layers per frame
    # ("Dissector bug ... saved_layers_len < prefs.gui_max_tree_depth")
    cmd = ["tshark", "-r", pcap, "-n"] + (["-2"] if two_pass else []) + [
           "-o", "gui.max_tree_depth:8192",
           "-o", "tcp.try_heuristic_first:TRUE",
           "-o", "tcp.reassemble_out_of_order:TRUE",
           "--disable-protocol", "rpcordma",
           "--disable-protocol", "smb_direct",
           "-Y", "tcp.port==%d" % port,
           "-T", "pdml"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit("tshark failed (%d): %s" % (p.returncode, " ".join(cmd)))
    return p.stdout


def resent_segments(pcap, port):
    """Every TCP segment's payload, in capture order, against the bytes the
    same connection direction carried before at those sequence numbers.
    Returns (frames whose every byte had been sent before, errors): a byte
    sent again must equal its first copy (a retransmission carries what was
    sent; a buffer changed after it was handed to the kernel would not)."""
    cmd = ["tshark", "-r", pcap, "-n", "-o", "tcp.desegment_tcp_streams:FALSE",
           "-Y", "tcp.port==%d && tcp.len>0" % port, "-T", "fields",
           "-e", "frame.number", "-e", "tcp.stream", "-e", "tcp.srcport",
           "-e", "tcp.seq", "-e", "tcp.payload"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit("tshark failed (%d): %s" % (p.returncode, " ".join(cmd)))
    data = {}  # (stream, srcport) -> (bytearray of the stream, [[start, end), ...] seen)
    resent, errors = set(), []
    for line in p.stdout.decode().splitlines():
        f = line.split("\t")
        if len(f) < 5 or not f[4]:
            continue
        fnum, key, seq = int(f[0]), (f[1], f[2]), int(f[3])
        pl = bytes.fromhex(f[4].replace(":", ""))
        buf, seen = data.setdefault(key, (bytearray(), []))
        end, covered = seq + len(pl), 0
        for a, b in seen:
            lo, hi = max(a, seq), min(b, end)
            if lo < hi:
                covered += hi - lo
                if buf[lo:hi] != pl[lo - seq:hi - seq]:
                    errors.append("frame %d: bytes at relative seq %d..%d differ from the "
                                  "first copy sent" % (fnum, lo, hi))
        if covered == len(pl):
            resent.add(fnum)
        if len(buf) < end:
            buf.extend(bytes(end - len(buf)))
        buf[seq:end] = pl
        seen.append([seq, end])
        seen.sort()
        merged = [seen[0]]
        for a, b in seen[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        seen[:] = merged
    return resent, errors


def walk(elem):
    yield elem
    for c in elem:
        yield from walk(c)


def num(s):
    s = (s or "").strip()
    if not s:
        return None
    try:
        return int(s, 0)
    except ValueError:
        return None


def fields(elem, name):
    return [e for e in walk(elem) if e.get("name") == name]


class MarkerState:
    """Markers (and the MPA Request / Reply flags) as tshark decoded them."""

    def __init__(self):
        self.start = {}  # srcport -> relative TCP seq of the first octet after Req / Rep
        self.count = collections.Counter()  # "initiator"/"responder" -> markers
        self.role = {}
        self.fpdus = self.stream_checked = self.atomics = 0
        self.first_lost = None

    def total(self):
        return sum(self.count.values())

    def undecoded(self, pkt):
        if self.first_lost is None:
            f = fields(pkt, "frame.number")
            self.first_lost = f[0].get("show") if f else "?"

    def packet(self, pkt, errors, flags):
        def first(name):
            f = fields(pkt, name)
            return num(f[0].get("show")) if f else None

        fnum = first("frame.number")
        sport = first("tcp.srcport")
        seq = first("tcp.seq")
        tlen = first("tcp.len") or 0
        sp = fields(pkt, "tcp.srcport")
        hdr = first("tcp.hdr_len")
        if sport is None or seq is None or hdr is None or not sp:
            return
        payload_pos = num(sp[0].get("pos")) + hdr
        self.atomics += len(fields(pkt, "iwarp_rdma.atomic.opcode"))
        reassembled = bool(fields(pkt, "tcp.reassembled.length") or
                           fields(pkt, "tcp.reassembled.data"))
        for mpa in (e for e in walk(pkt) if e.tag == "proto" and e.get("name") == "iwarp_mpa"):
            mpos = num(mpa.get("pos")) or 0
            for kind, role in (("iwarp_mpa.req", "initiator"), ("iwarp_mpa.rep", "responder")):
                if fields(mpa, kind):
                    fl = 0
                    for fname, bit in (("iwarp_mpa.marker_flag", 0x80),
                                       ("iwarp_mpa.crc_flag", 0x40),
                                       ("iwarp_mpa.rej_flag", 0x20)):
                        f = fields(mpa, fname)
                        if f and num(f[0].get("show")):
                            fl |= bit
                    f = fields(mpa, "iwarp_mpa.res")
                    if f:
                        fl |= (num(f[0].get("show")) or 0) & 0x0f
                    flags[kind[-3:]] = fl
                    pdl = fields(mpa, "iwarp_mpa.pdlength")
                    pdlen = num(pdl[0].get("show")) if pdl else 0
                    self.start[sport] = seq + (mpos - payload_pos) + 20 + (pdlen or 0)
                    self.role[sport] = role
            mks = fields(mpa, "iwarp_mpa.marker_fpduptr")
            if not fields(mpa, "iwarp_mpa.fpdu") or not mks:
                continue
            self.fpdus += 1
            who = self.role.get(sport, str(sport))
            self.count[who] += len(mks)
            size = num(mpa.get("size")) or 0
            prev = None
            positions = []
            for m in mks:
                mpos_m = num(m.get("pos")) - 2  # the marker starts with 2 reserved octets
                ptr = num(m.get("show"))
                positions.append(mpos_m)
                if ptr != mpos_m - mpos:
                    errors.append("frame %s: marker at FPDU octet %d has FPDUPTR %s" %
                                  (fnum, mpos_m - mpos, ptr))
                if prev is not None and mpos_m - prev != MARKER_INTERVAL:
                    errors.append("frame %s: markers %d octets apart" % (fnum, mpos_m - prev))
                prev = mpos_m
            for r in fields(mpa, "iwarp_mpa.marker_res"):
                if num(r.get("show")):
                    errors.append("frame %s: marker reserved field %s" % (fnum, r.get("show")))
            # stream position: only for an FPDU tshark decoded from this segment
            in_frame = (not reassembled and mpos >= payload_pos and
                        mpos + size <= payload_pos + tlen)
            if in_frame and sport in self.start:
                s0 = seq + (mpos - payload_pos) - self.start[sport]
                want = -(-(s0 + size) // MARKER_INTERVAL) - -(-s0 // MARKER_INTERVAL)
                if len(mks) != want:
                    errors.append("frame %s: %d markers in an FPDU at stream offset %d, "
                                  "%d octets long: want %d" % (fnum, len(mks), s0, size, want))
                for p in positions:
                    off = seq + (p - payload_pos) - self.start[sport]
                    if off % MARKER_INTERVAL:
                        errors.append("frame %s: marker at stream offset %d, not a multiple "
                                      "of %d" % (fnum, off, MARKER_INTERVAL))
                self.stream_checked += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("port", type=int)
    ap.add_argument("--min-fpdus", type=int, default=1)
    ap.add_argument("--opcodes", default="")
    ap.add_argument("--allow-terminate", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--two-pass", action="store_true")
    ap.add_argument("--crc", choices=("on", "off"), default="on")
    ap.add_argument("--markers", choices=("any", "on", "off"), default="any")
    ap.add_argument("--min-markers", type=int, default=1)
    ap.add_argument("--rfc7306", action="store_true")
    ap.add_argument("--large-fpdu", choices=("on", "off", "any"), default="any")
    a = ap.parse_args()
    known_ops = dict(OPNAMES)
    if a.rfc7306:
        known_ops.update(OPNAMES_7306)

    root = ET.fromstring(tshark_pdml(a.pcap, a.port, a.two_pass))
    errors = []
    resent, n_resent_unreassembled = set(), 0
    if a.two_pass:
        resent, errors = resent_segments(a.pcap, a.port)
    n_pkts = n_req = n_rep = n_fpdu = n_crc_good = n_crc_bad = n_ddp = n_term = 0
    n_payload_pkts = n_undecoded = 0
    n_crc_zero = n_crc_nonzero = n_retrans = 0
    no_ddp = []  # (frame number, FPDUs tshark framed there without a DDP/RDMAP decode)
    ops = collections.Counter()
    mk = MarkerState()
    flags = {"req": None, "rep": None}
    for pkt in root.iter("packet"):
        mk.packet(pkt, errors, flags)
        n_pkts += 1
        pkt_fpdu, pkt_ddp = n_fpdu, n_ddp
        fnum = None
        tcp_len = 0
        has_mpa = False
        reassembled_elsewhere = False
        frame_errors, n_reassembly_errors = [], 0
        for e in walk(pkt):
            name = e.get("name", "")
            show = e.get("show", "")
            sn = e.get("showname", "") or ""
            if name == "frame.number":
                fnum = num(show)
            elif name == "tcp.len":
                tcp_len = num(show) or 0
            elif name in ("tcp.segment", "tcp.reassembled_in") or \
                    name == "tcp.pdu.size":
                reassembled_elsewhere = True
            elif a.two_pass and name in ("tcp.analysis.retransmission",
                                         "tcp.analysis.fast_retransmission",
                                         "tcp.analysis.spurious_retransmission"):
                # bytes tshark decoded in the original segment (loopback
                # under a full receive buffer does retransmit)
                reassembled_elsewhere = True
                n_retrans += 1
            elif name == "iwarp_mpa":
                has_mpa = True
            elif name == "iwarp_mpa.key.req":
                n_req += 1
            elif name == "iwarp_mpa.key.rep":
                n_rep += 1
            elif name == "iwarp_mpa.rej_flag" and num(show):
                # only meaningful in a reply; requests have it 0 anyway
                errors.append("frame %s: MPA frame with R (reject) bit" % fnum)
            elif name == "iwarp_mpa.fpdu":
                n_fpdu += 1
            elif name == "iwarp_mpa.crc_check":
                if "Good CRC32" in sn:
                    n_crc_good += 1
                else:
                    n_crc_bad += 1
                    errors.append("frame %s: %s" % (fnum, sn))
            elif name == "iwarp_mpa.crc":
                if num(show) == 0:
                    n_crc_zero += 1
                else:
                    n_crc_nonzero += 1
                    errors.append("frame %s: CRC field %s, want 0 (CRC not in use)" %
                                  (fnum, show))
            elif name == "iwarp_ddp_rdmap":
                n_ddp += 1
            elif name == "iwarp_ddp.dv" and num(show) != 1:
                errors.append("frame %s: DDP version %s" % (fnum, show))
            elif name == "iwarp_rdma.version" and num(show) != 1:
                errors.append("frame %s: RDMAP version %s" % (fnum, show))
            elif name == "iwarp_rdma.opcode":
                op = num(e.get("value", "")) if e.get("value") else num(show)
                if op is None:
                    op = num(show)
                ops[op] += 1
                if op == 7:
                    n_term += 1
                if op not in known_ops:
                    errors.append("frame %s: unknown RDMAP opcode %s" % (fnum, show))
            elif name == "_ws.malformed":
                frame_errors.append("frame %s: malformed: %s" % (fnum, sn or show))
            elif name == "_ws.malformed.reassembly":
                n_reassembly_errors += 1
            elif name == "_ws.expert.severity":
                sev = num(show)
                if sev is not None and sev >= SEV_ERROR:
                    frame_errors.append("frame %s: expert error: %s" % (fnum, sn))
        if fnum in resent:
            # every byte of it went before and is the same (resent_segments):
            # decoded there; tshark's TCP reassembly may refuse the copy of
            # a PDU it already reassembled ("New fragment overlaps old
            # data"), which is its limit, not a wire error
            reassembled_elsewhere = True
            if n_reassembly_errors:
                n_resent_unreassembled += 1
                frame_errors = [x for x in frame_errors if not (
                    "Reassembly error, protocol TCP" in x or x.endswith("malformed: Malformed Packet")
                    or x.endswith("expert error: Severity level: Error"))]
        errors.extend(frame_errors)
        if n_fpdu - pkt_fpdu > n_ddp - pkt_ddp:
            no_ddp.append((fnum or 0, (n_fpdu - pkt_fpdu) - (n_ddp - pkt_ddp)))
        if tcp_len > 0:
            n_payload_pkts += 1
            if not has_mpa and not reassembled_elsewhere:
                n_undecoded += 1
                mk.undecoded(pkt)
                if a.verbose:
                    print("frame %s: %d TCP payload bytes not decoded as MPA" % (fnum, tcp_len))

    if n_req < 1:
        errors.append("no MPA Request seen")
    if n_rep < 1:
        errors.append("no MPA Reply seen")
    if n_fpdu < a.min_fpdus:
        errors.append("only %d FPDUs decoded (want >= %d)" % (n_fpdu, a.min_fpdus))
    if a.crc == "on" and n_crc_good + n_crc_bad != n_fpdu:
        errors.append("%d FPDUs but %d CRC checks (CRC not negotiated?)" %
                      (n_fpdu, n_crc_good + n_crc_bad))
    if a.crc == "off":
        if n_crc_good + n_crc_bad:
            errors.append("%d FPDUs with a CRC check: CRC negotiated, want off" %
                          (n_crc_good + n_crc_bad))
        if n_crc_zero + n_crc_nonzero != n_fpdu:
            errors.append("%d FPDUs but %d CRC fields" % (n_fpdu, n_crc_zero + n_crc_nonzero))
        for k in ("req", "rep"):
            if flags[k] is not None and flags[k] & 0x40:
                errors.append("MPA %s has C (CRC) set, want CRC off" % k)
    for k in ("req", "rep"):
        if flags[k] is None:
            continue
        if a.markers == "on" and not flags[k] & 0x80:
            errors.append("MPA %s without M (markers), want markers" % k)
        if a.markers == "off" and flags[k] & 0x80:
            errors.append("MPA %s with M (markers), want none" % k)
        # reserved bits: 0x01 is uiwarp's RFC 7306 offer, 0x08 siw's
        # large-FPDU (GSO) bit that uiwarp announces by default
        # (mpa/mpa_wire.h); every other one must go out zero
        allowed = 0x08 if a.large_fpdu != "off" else 0
        if a.rfc7306:
            allowed |= 0x01
        if flags[k] & 0x0f & ~allowed:
            errors.append("MPA %s Res bits 0x%x set" % (k, flags[k] & 0x0f & ~allowed))
        if a.large_fpdu == "on" and not flags[k] & 0x08:
            errors.append("MPA %s without the large-FPDU bit 0x08" % k)
    if a.markers == "off" and mk.total():
        errors.append("%d markers decoded, none negotiated" % mk.total())
    if a.markers == "on":
        for d, n in sorted(mk.count.items()):
            if n < a.min_markers:
                errors.append("only %d markers decoded from %s (want >= %d)" %
                              (n, d, a.min_markers))
        if len(mk.count) < 2:
            errors.append("markers decoded in %d direction(s), want 2" % len(mk.count))
        # tshark 4.0 loses marker framing at the first FPDU not aligned to a
        # segment: that is its limit, not ours (see the header)
        if n_undecoded:
            print("tshark: %d segments not decoded (tshark 4.0 lost the marker framing: "
                  "first at frame %s)" % (n_undecoded, mk.first_lost))
            n_undecoded = 0
            # once lost, what it frames as an FPDU is at a wrong offset
            # and does not decode as DDP: those are not counted
            lost = num(mk.first_lost)
            late = sum(k for f, k in no_ddp if lost is not None and f >= lost)
            if late:
                print("tshark: %d FPDUs framed at or after frame %s without a DDP decode "
                      "(the lost framing) not counted" % (late, mk.first_lost))
                n_fpdu -= late
    if n_ddp < n_fpdu:
        errors.append("%d FPDUs but only %d DDP/RDMAP decodes" % (n_fpdu, n_ddp))
    if n_term and not a.allow_terminate:
        errors.append("%d Terminate messages on the wire" % n_term)
    if n_undecoded:
        errors.append("%d segments with TCP payload not decoded as MPA" % n_undecoded)
    for o in filter(None, a.opcodes.split(",")):
        if ops[int(o, 0)] == 0:
            errors.append("no RDMAP %s (opcode %s) seen" % (OPNAMES.get(int(o, 0), "?"), o))

    opstr = " ".join("%s=%d" % (known_ops.get(k, str(k)), v) for k, v in sorted(ops.items(),
                     key=lambda kv: -1 if kv[0] is None else kv[0]))
    if n_resent_unreassembled:
        print("tshark: %d segments resent with the bytes of their first copy that tshark's TCP "
              "reassembly refused (not counted)" % n_resent_unreassembled)
    print("tshark: packets=%d payload=%d mpa_req=%d mpa_rep=%d fpdus=%d crc_good=%d crc_bad=%d "
          "ddp=%d terminates=%d ops[%s]" % (n_pkts, n_payload_pkts, n_req, n_rep, n_fpdu,
                                            n_crc_good, n_crc_bad, n_ddp, n_term, opstr))
    if a.crc == "off" or a.markers != "any" or a.rfc7306:
        print("tshark: crc_zero=%d crc_nonzero=%d markers[%s] marker_fpdus=%d "
              "marker_fpdus_stream_checked=%d atomics=%d retransmissions=%d" %
              (n_crc_zero, n_crc_nonzero,
               " ".join("%s=%d" % kv for kv in sorted(mk.count.items())),
               mk.fpdus, mk.stream_checked, mk.atomics, n_retrans))
    for e in errors[:50]:
        print("tshark check: " + e)
    if len(errors) > 50:
        print("tshark check: ... %d more" % (len(errors) - 50))
    print("tshark check: %s" % ("OK" if not errors else "FAILED"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
