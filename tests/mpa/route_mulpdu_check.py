#!/usr/bin/env python3
"""Checks a capture of two uiwarp endpoints (route_mulpdu.sh).

    route_mulpdu_check.py CAP.pcap MTU CLIENT.err SERVER.err
        a path whose route MTU is locked: every FPDU (MPA length + ULPDU +
        pad + CRC, RFC 5044 §4.1) fits the payload of one TCP segment of the
        path (MTU - 52: IP, TCP and the timestamp option), no segment carries
        more than MTU - 40 bytes, and each end's EMSS (UIWARP_DEBUG line of
        stream/tcp.c:tcp_emss) saw the route's MTU and stays within MTU - 52.
    route_mulpdu_check.py CAP.pcap MTU --expect IP=large|mss ...
        the large-FPDU negotiation (mpa/mpa_wire.h): the FPDUs IP sends are
        all within one segment (mss, at least 50 of them) or at least one
        is larger than a segment (large).
"""
import re
import struct
import sys


def segments(path):
    """{(src, sport, dst, dport): [(seq, payload, syn)]} from a pcap file
    (Ethernet, IPv4, TCP)."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        end = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        end = ">"
    else:
        raise SystemExit("not a pcap file")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit("link type %d, want Ethernet" % linktype)
    off, flows = 24, {}
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 14 or struct.unpack(">H", pkt[12:14])[0] != 0x0800:
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 0xF) * 4
        tot = struct.unpack(">H", ip[2:4])[0]
        if ip[9] != 6:
            continue
        src, dst = ip[12:16], ip[16:20]
        tcp = ip[ihl:tot]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        syn = bool(tcp[13] & 0x02)
        flows.setdefault((src, sport, dst, dport), []).append((seq, tcp[doff:], syn))
    return flows


def check_flow(name, segs, mtu, bound, large=False):
    isn = next((s for s, _, syn in segs if syn), None)
    if isn is None:
        raise SystemExit("%s: no SYN captured" % name)
    base = (isn + 1) & 0xFFFFFFFF
    seen, ivals, stream = set(), [], bytearray()
    for seq, pl, _ in segs:
        if not pl:
            continue
        rel = (seq - base) & 0xFFFFFFFF
        if rel in seen:
            continue  # a retransmission
        seen.add(rel)
        if len(pl) > mtu - 40:
            raise SystemExit("%s: a segment of %d payload bytes > MTU %d - 40" %
                             (name, len(pl), mtu))
        ivals.append((rel, rel + len(pl)))
    ivals.sort()
    pos = 0
    for a, b in ivals:
        if a != pos:
            raise SystemExit("%s: capture has a hole at stream offset %d" % (name, pos))
        pos = b
    for seq, pl, _ in sorted(((seq - base) & 0xFFFFFFFF, pl, syn) for seq, pl, syn in segs):
        if pl and seq == len(stream):
            stream += pl
    # the MPA Request or Reply first (RFC 5044 §7.1)
    if stream[:16] not in (b"MPA ID Req Frame", b"MPA ID Rep Frame"):
        raise SystemExit("%s: stream does not start with an MPA frame" % name)
    o = 20 + struct.unpack(">H", stream[18:20])[0]
    n, biggest, k, crossing = 0, 0, 0, 0
    while o + 2 <= len(stream):
        ulen = struct.unpack(">H", stream[o:o + 2])[0]
        flen = 2 + ulen + ((-(2 + ulen)) & 3) + 4
        while k < len(ivals) and ivals[k][1] <= o:
            k += 1
        if flen > bound and not large:
            raise SystemExit("%s: the FPDU at stream offset %d is %d bytes, more than one "
                             "segment of the path carries (%d)" % (name, o, flen, bound))
        if k == len(ivals) or not (ivals[k][0] <= o and o + flen <= ivals[k][1]):
            crossing += 1
        n, biggest, o = n + 1, max(biggest, flen), o + flen
    if o != len(stream):
        raise SystemExit("%s: %d bytes of a cut FPDU at the end" % (name, len(stream) - o))
    # Kernel TCP packs the byte stream of a multi-FPDU send into MSS-sized
    # segments, so an FPDU may start inside one segment and end in the next
    # (uiwarp is no MPA-aware TCP, RFC 5044 §6 alignment is a SHOULD); what
    # MULPDU guarantees is that each FPDU is no larger than one segment.
    print("%s: %d FPDUs, largest %d bytes (bound %d); largest segment %d bytes; "
          "%d FPDUs not aligned to a segment (not asserted)" %
          (name, n, biggest, bound, max(b - a for a, b in ivals), crossing))
    if large and biggest <= bound:
        raise SystemExit("%s: large FPDUs negotiated, but no FPDU is larger than one "
                         "segment (%d)" % (name, bound))
    return n


def main(argv):
    cap, mtu, errs = argv[1], int(argv[2]), argv[3:]
    flows = segments(cap)
    if len(flows) != 2:
        raise SystemExit("want 2 TCP directions in the capture, got %d" % len(flows))
    bound = mtu - 20 - 20 - 12
    if errs and errs[0] == "--expect":
        # --expect IP=large|mss, repeated: one per direction
        want = dict(x.split("=") for x in errs[1::2])
        for (src, sport, dst, dport), segs in flows.items():
            ip = ".".join(map(str, src))
            name = "%s:%d -> %s:%d" % (ip, sport, ".".join(map(str, dst)), dport)
            if ip not in want:
                raise SystemExit("%s: no --expect for %s" % (name, ip))
            n = check_flow(name, segs, mtu, mtu - 40, want[ip] == "large")
            if want[ip] == "mss" and n < 50:
                raise SystemExit("%s: too few FPDUs for MSS-sized ones (%d)" % (name, n))
        print("PASS")
        return 0
    for (src, sport, dst, dport), segs in flows.items():
        name = "%s:%d -> %s:%d" % (".".join(map(str, src)), sport, ".".join(map(str, dst)),
                                   dport)
        if check_flow(name, segs, mtu, bound) < 50:
            raise SystemExit("%s: too few FPDUs to mean anything" % name)
    for e in errs:
        text = open(e).read()
        m = re.search(r"EMSS (\d+) from (.*?) \(TCP_MAXSEG (\d+), route path MTU (\d+) -> "
                      r"segment payload bound (\d+)\)", text)
        if not m:
            raise SystemExit("%s: no UIWARP_DEBUG EMSS line" % e)
        emss, src, maxseg, pmtu = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        print("%s: EMSS %d from %s (TCP_MAXSEG %d, route path MTU %d)" %
              (e, emss, src, maxseg, pmtu))
        if pmtu != mtu:
            raise SystemExit("%s: the route's path MTU %d was not seen (want %d)" %
                             (e, pmtu, mtu))
        if emss > bound:
            raise SystemExit("%s: EMSS %d above the path's segment payload bound %d "
                             "(TCP_MAXSEG %d)" % (e, emss, bound, maxseg))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
