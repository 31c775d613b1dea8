#!/usr/bin/env python3
"""Copies a pcap with one byte of one decoded field flipped (the negative
half of conf_tshark.sh: the tshark check must then fail).

    conf_pcap_corrupt.py IN.pcap OUT.pcap PORT FIELD [NTH]

FIELD is a tshark field name (iwarp_mpa.crc_check, iwarp_mpa.crc,
iwarp_mpa.marker_fpduptr, ...); the NTH (default 0) occurrence in the
capture, as tshark decodes it with the same options as tshark_check.py, has
the last octet of the field XORed with 0x01 (0x5a for a field that is 0, so
a zero CRC field becomes non-zero). Only a field in the frame's own bytes
(not in a reassembled buffer) is used. Classic pcap (tcpdump -w) only.
Prints the frame and offset changed.
"""
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET


def main():
    src, dst, port, field = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    nth = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    cmd = ["tshark", "-r", src, "-n", "-2", "-o", "tcp.try_heuristic_first:TRUE",
           "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
           "-Y", "tcp.port==%d" % port, "-T", "pdml"]
    root = ET.fromstring(subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        check=True, timeout=300).stdout)
    seen = 0
    target = None
    for pkt in root.iter("packet"):
        fnum = None
        caplen = None
        reassembled = False
        hits = []
        for e in pkt.iter():
            n = e.get("name", "")
            if n == "frame.number":
                fnum = int(e.get("show"))
            elif n == "frame.cap_len":
                caplen = int(e.get("show"))
            elif n in ("tcp.reassembled.length", "tcp.reassembled.data"):
                reassembled = True
            elif n == field:
                hits.append((int(e.get("pos")), int(e.get("size")), e.get("show")))
        if reassembled or fnum is None:
            continue
        for pos, size, show in hits:
            if caplen is not None and pos + size > caplen:
                continue
            if seen == nth:
                target = (fnum, pos + size - 1, show)
                break
            seen += 1
        if target:
            break
    if not target:
        raise SystemExit("no occurrence %d of %s in a frame's own bytes" % (nth, field))
    fnum, off, show = target
    data = bytearray(open(src, "rb").read())
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xa1b2c3d4, 0xa1b23c4d):
        endian = "<"
    elif magic in (0xd4c3b2a1, 0x4d3cb2a1):
        endian = ">"
    else:
        raise SystemExit("not a classic pcap file")
    p = 24
    for _ in range(fnum - 1):
        incl = struct.unpack(endian + "I", data[p + 8:p + 12])[0]
        p += 16 + incl
    at = p + 16 + off
    data[at] ^= 0x5a if data[at] == 0 else 0x01
    open(dst, "wb").write(data)
    print("corrupted frame %d octet %d (%s %s)" % (fnum, off, field, show))


if __name__ == "__main__":
    main()
