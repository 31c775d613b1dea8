#!/usr/bin/env python3
"""Decodes a capture with tshark's iWARP dissectors and checks it.

    tshark_check.py PCAP PORT [--min-fpdus N] [--opcodes 0,1,2,3]
                    [--allow-terminate] [--verbose]

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
"""
import argparse
import collections
import subprocess
import sys
import xml.etree.ElementTree as ET

SEV_ERROR = 0x00800000
OPNAMES = {0: "Write", 1: "ReadReq", 2: "ReadResp", 3: "Send", 4: "SendInv", 5: "SendSE",
           6: "SendSEInv", 7: "Terminate"}


def tshark_pdml(pcap, port):
    cmd = ["tshark", "-r", pcap, "-n",
           "-o", "tcp.try_heuristic_first:TRUE",
           "--disable-protocol", "rpcordma",
           "--disable-protocol", "smb_direct",
           "-Y", "tcp.port==%d" % port,
           "-T", "pdml"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit("tshark failed (%d): %s" % (p.returncode, " ".join(cmd)))
    return p.stdout


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("port", type=int)
    ap.add_argument("--min-fpdus", type=int, default=1)
    ap.add_argument("--opcodes", default="")
    ap.add_argument("--allow-terminate", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    root = ET.fromstring(tshark_pdml(a.pcap, a.port))
    errors = []
    n_pkts = n_req = n_rep = n_fpdu = n_crc_good = n_crc_bad = n_ddp = n_term = 0
    n_payload_pkts = n_undecoded = 0
    ops = collections.Counter()
    for pkt in root.iter("packet"):
        n_pkts += 1
        fnum = None
        tcp_len = 0
        has_mpa = False
        reassembled_elsewhere = False
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
                if op not in OPNAMES:
                    errors.append("frame %s: unknown RDMAP opcode %s" % (fnum, show))
            elif name == "_ws.malformed":
                errors.append("frame %s: malformed: %s" % (fnum, sn or show))
            elif name == "_ws.expert.severity":
                sev = num(show)
                if sev is not None and sev >= SEV_ERROR:
                    errors.append("frame %s: expert error: %s" % (fnum, sn))
        if tcp_len > 0:
            n_payload_pkts += 1
            if not has_mpa and not reassembled_elsewhere:
                n_undecoded += 1
                if a.verbose:
                    print("frame %s: %d TCP payload bytes not decoded as MPA" % (fnum, tcp_len))

    if n_req < 1:
        errors.append("no MPA Request seen")
    if n_rep < 1:
        errors.append("no MPA Reply seen")
    if n_fpdu < a.min_fpdus:
        errors.append("only %d FPDUs decoded (want >= %d)" % (n_fpdu, a.min_fpdus))
    if n_crc_good + n_crc_bad != n_fpdu:
        errors.append("%d FPDUs but %d CRC checks (CRC not negotiated?)" %
                      (n_fpdu, n_crc_good + n_crc_bad))
    if n_ddp < n_fpdu:
        errors.append("%d FPDUs but only %d DDP/RDMAP decodes" % (n_fpdu, n_ddp))
    if n_term and not a.allow_terminate:
        errors.append("%d Terminate messages on the wire" % n_term)
    if n_undecoded:
        errors.append("%d segments with TCP payload not decoded as MPA" % n_undecoded)
    for o in filter(None, a.opcodes.split(",")):
        if ops[int(o, 0)] == 0:
            errors.append("no RDMAP %s (opcode %s) seen" % (OPNAMES.get(int(o, 0), "?"), o))

    opstr = " ".join("%s=%d" % (OPNAMES.get(k, str(k)), v) for k, v in sorted(ops.items(),
                     key=lambda kv: -1 if kv[0] is None else kv[0]))
    print("tshark: packets=%d payload=%d mpa_req=%d mpa_rep=%d fpdus=%d crc_good=%d crc_bad=%d "
          "ddp=%d terminates=%d ops[%s]" % (n_pkts, n_payload_pkts, n_req, n_rep, n_fpdu,
                                            n_crc_good, n_crc_bad, n_ddp, n_term, opstr))
    for e in errors[:50]:
        print("tshark check: " + e)
    if len(errors) > 50:
        print("tshark check: ... %d more" % (len(errors) - 50))
    print("tshark check: %s" % ("OK" if not errors else "FAILED"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
