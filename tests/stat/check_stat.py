#!/usr/bin/env python3
"""check_stat.py: checks uiwarp-stat -w -j samples (tests/stat).

  check_stat.py perftest CLIENT_OUT CLIENT_JSON SERVER_JSON
      ib_write_bw (rdma_cm, -n ITERS -s SIZE): see stat_perftest.sh.
  check_stat.py terminate KIND JSON
      the final count of a uiw_target that received a bad CRC (KIND crc:
      one CRC error, one Terminate sent, layer LLP type 0) or a Terminate
      (KIND peer: one received, none sent).
Exit 0 when every check holds; each failed check is printed.
"""
import json
import re
import sys

fails = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        fails.append(what)


def samples(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def final(ss, who):
    check(len(ss) > 0, "%s: uiwarp-stat printed samples" % who)
    if not ss:
        sys.exit(1)
    last = ss[-1]
    check(last["exited"], "%s: the last sample is the final count (process exited)" % who)
    return last


def perftest(client_out, cj, sj):
    text = open(client_out).read()
    m = re.search(r"^\s*(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+", text, re.M)
    check(m is not None, "perftest's result line (#bytes #iterations)")
    if not m:
        return
    size, iters = int(m.group(1)), int(m.group(2))
    payload = size * iters
    print("perftest: %d x %d = %d bytes" % (iters, size, payload))
    cs, ss = samples(cj), samples(sj)
    c, s = final(cs, "client"), final(ss, "server")
    ct, st = c["total"], s["total"]
    for k in ("tx_fpdus", "tx_bytes", "rx_fpdus", "rx_bytes", "sq_wrs", "sq_bytes", "rq_bytes"):
        print("  %-10s client %14d  server %14d" % (k, ct[k], st[k]))
    # live: samples taken while the transfer ran, growing
    live = [x for x in cs if not x["exited"] and x["total"]["sq_bytes"] > 0]
    mid = [x for x in live if x["total"]["sq_bytes"] < payload]
    check(len(mid) >= 2, "client: >= 2 samples during the transfer (%d)" % len(mid))
    prev = 0
    grows = True
    for x in cs:
        v = x["total"]["tx_bytes"]
        grows &= v >= prev
        prev = v
    check(grows, "client: tx_bytes never goes backwards")
    check(any(y > x for x, y in zip([m_["total"]["tx_bytes"] for m_ in mid],
                                    [m_["total"]["tx_bytes"] for m_ in mid[1:]])),
          "client: tx_bytes grew between samples during the transfer")
    # the data QP's socket: TCP_INFO through sock_diag
    tcp = [q["tcp"] for x in live for q in x["qps"] if "tcp" in q and q["tx_bytes"] > 1 << 20]
    check(len(tcp) > 0, "client: TCP_INFO of the data QP's socket in a live sample")
    if tcp:
        check(all(t["state"] == 1 for t in tcp), "TCP state ESTABLISHED while it ran")
        check(all(t["bytes_acked"] > 0 for t in tcp), "TCP bytes_acked > 0")
    # final counts add up
    check(ct["sq_bytes"] == payload + st["rq_bytes"],
          "client sq_bytes %d == perftest %d + server rq_bytes %d (control messages)" %
          (ct["sq_bytes"], payload, st["rq_bytes"]))
    check(st["sq_bytes"] == ct["rq_bytes"],
          "server sq_bytes %d == client rq_bytes %d" % (st["sq_bytes"], ct["rq_bytes"]))
    check(ct["tx_bytes"] == st["rx_bytes"], "client tx_bytes == server rx_bytes")
    check(ct["tx_fpdus"] == st["rx_fpdus"], "client tx_fpdus == server rx_fpdus")
    check(st["tx_bytes"] == ct["rx_bytes"], "server tx_bytes == client rx_bytes")
    check(st["tx_fpdus"] == ct["rx_fpdus"], "server tx_fpdus == client rx_fpdus")
    # framing: each FPDU adds 2 (length) + 14 or 18 (DDP/RDMAP header) + 4
    # (CRC) + 0..3 (pad) octets; Read Requests and the RTR carry 28 bytes of
    # body that no WR counts (none here but the RTR)
    over = ct["tx_bytes"] - ct["sq_bytes"]
    lo, hi = 20 * ct["tx_fpdus"], 27 * ct["tx_fpdus"] + 28
    check(lo <= over <= hi, "client framing overhead %d within [%d, %d] for %d FPDUs" %
          (over, lo, hi, ct["tx_fpdus"]))
    check(ct["tx_fpdus"] >= iters, "client sent >= one FPDU per iteration")
    for who, t in (("client", ct), ("server", st)):
        check(t["crc_errors"] == 0 and t["term_sent"] == 0 and t["term_recv"] == 0,
              "%s: no CRC errors, no Terminates" % who)
    check(c["conn_active"] >= 1 and s["conn_passive"] >= 1,
          "connections: client active, server passive")
    check(c["qps_created"] == c["qps_destroyed"], "client: every QP destroyed at exit")


def terminate(kind, path):
    t = final(samples(path), "target")
    tot = t["total"]
    print("  total: %s" % json.dumps(tot))
    print("  terminates_sent %s terminates_recv %s" % (t["terminates_sent"],
                                                       t["terminates_recv"]))
    if kind == "crc":
        check(tot["crc_errors"] == 1, "one CRC error counted")
        check(tot["term_sent"] == 1 and tot["term_recv"] == 0, "one Terminate sent, none received")
        check(t["terminates_sent"] == {"llp/0x0": 1}, "by layer/type: llp/0x0 once")
    else:
        check(tot["term_recv"] == 1 and tot["term_sent"] == 0, "one Terminate received, none sent")
        check(sum(t["terminates_recv"].values()) == 1, "by layer/type: one received")
        check(tot["crc_errors"] == 0, "no CRC error")
    check(t["conn_passive"] == 1, "one passive connection")


def main(argv):
    if argv[1] == "perftest":
        perftest(argv[2], argv[3], argv[4])
    elif argv[1] == "terminate":
        terminate(argv[2], argv[3])
    else:
        raise SystemExit(__doc__)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
