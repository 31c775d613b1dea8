#!/usr/bin/env python3
"""Summary of a scripts/bench.sh run: bench_summary.py OUT_DIR

Reads OUT_DIR/samples.tsv (one line per sample and metric) and meta.txt,
writes OUT_DIR/summary.md (median [min-max] (n) of every row, ratios of
uiwarp to raw TCP and to its peers, and the goals of issue #10 with the
measured value beside each) and PNG plots (matplotlib, if installed).

A ratio is the ratio of the two medians; the brackets beside it hold the
smallest and largest ratio of two samples taken in the same repetition
(the tools take turns within a repetition, so those pairs ran back to back).
"""
import collections
import math
import os
import statistics
import sys

SIZE_NAMES = {64: "64 B", 4096: "4 KiB", 65536: "64 KiB", 1048576: "1 MiB"}


def size_name(s):
    s = int(s)
    if s in SIZE_NAMES:
        return SIZE_NAMES[s]
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if s >= div and s % div == 0:
            return "%d %s" % (s // div, unit)
    return "%d B" % s


def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    if a >= 0.01:
        return "%.3f" % v
    return "%.2g" % v


class Data:
    def __init__(self, path):
        self.vals = collections.defaultdict(list)  # key -> [(rep, value)]
        self.fails = collections.defaultdict(list)  # key -> [note]
        self.paths, self.ccs, self.sizes, self.qps = [], [], [], []
        with open(path) as f:
            header = f.readline().rstrip("\n").split("\t")
            for line in f:
                row = dict(zip(header, line.rstrip("\n").split("\t")))
                if len(row) < 10:
                    continue
                key = (row["path"], row["cc"], row["tool"], row["op"], int(row["size"]),
                       row["metric"])
                for lst, v in ((self.paths, row["path"]), (self.ccs, row["cc"])):
                    if v not in lst:
                        lst.append(v)
                if row["op"] == "qps":
                    if int(row["size"]) not in self.qps:
                        self.qps.append(int(row["size"]))
                elif row["tool"] in ("tcp", "uiwarp", "ucx") and row["metric"] == "gbps":
                    if int(row["size"]) not in self.sizes:
                        self.sizes.append(int(row["size"]))
                if row["value"] == "fail":
                    self.fails[key].append(row.get("note", ""))
                else:
                    try:
                        self.vals[key].append((int(row["rep"]), float(row["value"])))
                    except ValueError:
                        self.fails[key].append("unparsable value %r" % row["value"])
        self.sizes.sort()
        self.qps.sort()

    def values(self, key):
        return [v for _, v in self.vals.get(key, [])]

    def median(self, key):
        v = self.values(key)
        return statistics.median(v) if v else None

    def cell(self, key):
        """median [min–max] (n), with failures counted."""
        v = self.values(key)
        nf = len(self.fails.get(key, []))
        if not v:
            if nf:
                return "fail (%d)" % nf
            return "–"
        s = "%s [%s–%s] (%d)" % (fmt(statistics.median(v)), fmt(min(v)), fmt(max(v)), len(v))
        if nf:
            s += " +%d fail" % nf
        return s

    def ratio(self, ka, kb, invert=False):
        """(ratio of medians, min pair ratio, max pair ratio) or None."""
        ma, mb = self.median(ka), self.median(kb)
        if ma is None or mb is None or (mb == 0 and not invert) or (ma == 0 and invert):
            return None
        r = mb / ma if invert else ma / mb
        a = dict(self.vals.get(ka, []))
        b = dict(self.vals.get(kb, []))
        pairs = []
        for rep in a:
            if rep in b and (a[rep] if invert else b[rep]) > 0:
                pairs.append(b[rep] / a[rep] if invert else a[rep] / b[rep])
        lo = min(pairs) if pairs else None
        hi = max(pairs) if pairs else None
        return (r, lo, hi)

    def rcell(self, ka, kb, invert=False):
        r = self.ratio(ka, kb, invert)
        if r is None:
            return "–"
        if r[1] is None:
            return "**%.2f**" % r[0]
        return "**%.2f** [%.2f–%.2f]" % r


def read_meta(path):
    meta = {}
    try:
        with open(path) as f:
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    meta[k.strip()] = v.strip()
    except OSError:
        pass
    return meta


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"


def summarize(d, meta):
    md = []
    K = lambda p, c, t, o, s, m: (p, c, t, o, s, m)  # noqa: E731
    md.append("# uiwarp benchmark suite: results\n")
    md.append("- run: %s, %s" % (meta.get("date", "?"), meta.get("elapsed", "not finished")))
    md.append("- tree: %s; build: %s" % (meta.get("tree", "?"), meta.get("build", "?")))
    md.append("- machine: kernel %s" % meta.get("kernel", "?"))
    md.append("- command: `%s`" % meta.get("command", "?"))
    md.append("- perftest %s, UCX %s, libfabric %s" % (meta.get("perftest", "?"),
                                                      meta.get("ucx", "?"),
                                                      meta.get("libfabric", "?")))
    if meta.get("uiwarp_env"):
        md.append("- uiwarp environment: `%s`" % meta["uiwarp_env"])
    md.append("- **TCP congestion control**: the `cc` of each table, set on every socket of every "
              "tool (tcpbench `-C`, uiwarp `UIWARP_TCP_CONGESTION`, UCX and libfabric through "
              "the LD_PRELOAD `libuiwarp-bench-cc.so`); the namespaces' default is %s."
              % meta.get("ns_default_cc", "?"))
    md.append("- cells: median [min–max] (number of samples); ratios: ratio of the medians "
              "[smallest–largest ratio of two samples of the same repetition]; "
              "`fail (n)`: the run failed n times (reasons at the end).")
    md.append("")

    goals = []  # (goal, where, measured, target, met)

    def goal(name, where, val, target, ok):
        if val is None:
            return
        goals.append((name, where, val, target, "yes" if ok else "**no**"))

    # ------------------------------------------------ throughput
    if d.sizes:
        md.append("## Throughput, Gbit/s (one connection, `-D %s` s runs)\n" % meta.get("duration", "?"))
        md.append("TCP: `tcpbench bw -N` (blocking `send` of SIZE, TCP_NODELAY); uiwarp: perftest "
                  "`ib_write_bw` / `ib_read_bw` / `ib_send_bw -R` under `uiwarp-run`, BW average.\n")
        for p in d.paths:
            for c in d.ccs:
                rows = []
                for s in d.sizes:
                    t = K(p, c, "tcp", "stream", s, "gbps")
                    r = [size_name(s), d.cell(t)]
                    for op in ("write", "read", "send"):
                        u = K(p, c, "uiwarp", op, s, "gbps")
                        r += [d.cell(u), d.rcell(u, t)]
                    rows.append(r)
                    for op, target in (("write", 0.90), ("send", 0.90), ("read", 0.85)):
                        if s in (65536, 1048576) and p in ("lo", "veth"):
                            rr = d.ratio(K(p, c, "uiwarp", op, s, "gbps"), t)
                            goal("%s ≥ %.2f× raw TCP" % (op.capitalize(), target),
                                 "%s %s %s" % (p, c, size_name(s)),
                                 rr and rr[0], "≥ %.2f" % target, rr and rr[0] >= target)
                if any(d.values(K(p, c, tl, op, s, "gbps")) or d.fails.get(K(p, c, tl, op, s, "gbps"))
                       for s in d.sizes for tl, op in (("tcp", "stream"), ("uiwarp", "write"))):
                    md.append("### %s, %s\n" % (p, c))
                    md.append(table(["size", "TCP", "Write", "Write/TCP", "Read", "Read/TCP",
                                     "Send", "Send/TCP"], rows))

    # ------------------------------------------------ the framing floor
    if any(k[2] == "mpa" for k in list(d.vals) + list(d.fails)):
        md.append("## The framing floor: MPA framing and CRC32c over the same TCP, Gbit/s\n")
        md.append("`uiwarp-bench-mpa`: each message as the FPDUs uiwarp sends a software peer "
                  "(ULPDUs of up to 65 532 bytes, DDP tagged header, CRC32c by ISA-L), gathered "
                  "`sendmsg` of 256 KiB or one message, one blocking `recvmsg` per FPDU placing "
                  "the payload (one copy), the CRC checked; no RDMA above it. MPA/TCP is what "
                  "framing and the CRC cost on the path; Write/MPA is what uiwarp's RDMA layers "
                  "cost on top.\n")
        for p in d.paths:
            for c in d.ccs:
                rows = []
                for s in d.sizes:
                    t, m = K(p, c, "tcp", "stream", s, "gbps"), K(p, c, "mpa", "stream", s, "gbps")
                    w = K(p, c, "uiwarp", "write", s, "gbps")
                    if not (d.values(m) or d.fails.get(m)):
                        continue
                    rows.append([size_name(s), d.cell(t), d.cell(m), d.rcell(m, t), d.cell(w),
                                 d.rcell(w, m)])
                if rows:
                    md.append("### %s, %s\n" % (p, c))
                    md.append(table(["size", "TCP", "MPA + CRC", "MPA/TCP", "uiwarp Write",
                                     "Write/MPA"], rows))

    # ------------------------------------------------ peers
    if any(k[2] in ("ucx", "fabric") for k in list(d.vals) + list(d.fails)):
        md.append("## uiwarp against its peers, Gbit/s\n")
        md.append("UCX 'put' is `ucx_perftest -t put_bw -x tcp -D zcopy` (UCT), 'tag' is "
                  "`-t tag_bw` (UCP), both `UCX_TLS=tcp`; uiwarp Write against UCX put, "
                  "uiwarp Send against UCX tag. libfabric's `fi_msg_bw` / `fi_rma_bw` are not in "
                  "Debian's libfabric-bin (they belong to fabtests), so libfabric appears only "
                  "in the latency table (`fi_pingpong`).\n")
        for p in d.paths:
            for c in d.ccs:
                rows = []
                for s in d.sizes:
                    w, up = K(p, c, "uiwarp", "write", s, "gbps"), K(p, c, "ucx", "put", s, "gbps")
                    se, ut = K(p, c, "uiwarp", "send", s, "gbps"), K(p, c, "ucx", "tag", s, "gbps")
                    if not (d.values(up) or d.fails.get(up) or d.values(ut) or d.fails.get(ut)):
                        continue
                    rows.append([size_name(s), d.cell(w), d.cell(up), d.rcell(w, up),
                                 d.cell(se), d.cell(ut), d.rcell(se, ut)])
                    for a, b, n in ((w, up, "Write ahead of UCX put_bw"),
                                    (se, ut, "Send ahead of UCX tag_bw")):
                        rr = d.ratio(a, b)
                        goal(n, "%s %s %s" % (p, c, size_name(s)), rr and rr[0], "> 1",
                             rr and rr[0] > 1)
                if rows:
                    md.append("### %s, %s\n" % (p, c))
                    md.append(table(["size", "uiwarp Write", "UCX put", "Write/put",
                                     "uiwarp Send", "UCX tag", "Send/tag"], rows))

    # ------------------------------------------------ message rate
    rate_cols = (("tcp", "stream", "TCP"), ("uiwarp", "write", "uiwarp Write"),
                 ("uiwarp", "send", "uiwarp Send"), ("uiwarp", "read", "uiwarp Read"),
                 ("ucx", "put", "UCX put"), ("ucx", "tag", "UCX tag"),
                 ("tcp", "stream_x16", "TCP, 16 per send"),
                 ("uiwarp", "write_pl16", "uiwarp Write, post_list 16"),
                 ("uiwarp", "send_pl16", "uiwarp Send, post_list 16"))
    rate_cols = [x for x in rate_cols
                 if any(d.values(K(p, c, x[0], x[1], 64, "mpps")) or
                        d.fails.get(K(p, c, x[0], x[1], 64, "mpps"))
                        for p in d.paths for c in d.ccs)]
    if rate_cols:
        md.append("## Message rate at 64 B, million messages/s (one QP / one socket)\n")
        md.append("Without batching, from the 64 B throughput runs: perftest's MsgRate (one "
                  "`ibv_post_send` per message: perftest's default `--post_list 1`, tx depth 128), "
                  "TCP one `send` per 64 B message (TCP_NODELAY), UCX its message rate. With "
                  "batching: perftest `--post_list 16` (16 WRs per `ibv_post_send`), TCP 16 "
                  "messages of 64 B per `send` (`tcpbench bw -s 1024 -N`).\n")
        rows = []
        for p in d.paths:
            for c in d.ccs:
                rows.append([p, c] + [d.cell(K(p, c, tl, op, 64, "mpps")) for tl, op, _ in rate_cols])
                for op, target in (("write", 2.0), ("send", 1.0)):
                    for suffix, how in (("", "post_list 1"), ("_pl16", "post_list 16")):
                        m = d.median(K(p, c, "uiwarp", op + suffix, 64, "mpps"))
                        goal("64 B %s rate per QP (%s)" % (op.capitalize(), how), "%s %s" % (p, c),
                             m, "≥ %.1f M/s" % target, m is not None and m >= target)
        md.append(table(["path", "cc"] + [x[2] for x in rate_cols], rows))

    # ------------------------------------------------ latency
    lat_keys = [("tcp", "pp_spin", "TCP ping-pong, both busy-poll (`tcpbench pp -P`)", "typ_us"),
                ("tcp", "pp_block", "TCP ping-pong, blocking (`tcpbench pp`)", "typ_us"),
                ("uiwarp", "write_lat", "uiwarp `ib_write_lat`", "typ_us"),
                ("uiwarp", "send_lat", "uiwarp `ib_send_lat`", "typ_us"),
                ("uiwarp", "read_lat", "uiwarp `ib_read_lat` (full round trip)", "typ_us"),
                ("ucx", "am_lat", "UCX `am_lat` (UCT tcp, bcopy), 50th percentile", "typ_us"),
                ("fabric", "pingpong", "libfabric tcp `fi_pingpong -e msg` (mean)", "avg_us")]
    if any(k[3] in [x[1] for x in lat_keys] for k in list(d.vals) + list(d.fails)):
        md.append("## Latency at 64 B, µs\n")
        md.append("Half round trip except `ib_read_lat`, which perftest reports as the whole round "
                  "trip. Typical: perftest's t_typical, tcpbench's median, UCX's 50th percentile. "
                  "perftest busy-polls; the ratio column divides by the busy-poll TCP typical.\n")
        for p in d.paths:
            for c in d.ccs:
                rows = []
                spin = K(p, c, "tcp", "pp_spin", 64, "typ_us")
                for tl, op, name, met in lat_keys:
                    k = K(p, c, tl, op, 64, met)
                    if not (d.values(k) or d.fails.get(k)):
                        continue
                    k99 = K(p, c, tl, op, 64, "p99_us")
                    r99 = d.ratio(k99, k) if d.values(k99) else None
                    rows.append([name, d.cell(k), d.cell(k99) if d.values(k99) else "–",
                                 ("%.1f" % r99[0]) if r99 else "–", d.rcell(k, spin)])
                if rows:
                    md.append("### %s, %s\n" % (p, c))
                    md.append(table(["tool", "typical", "99th percentile", "p99/typical",
                                     "/ TCP busy-poll"], rows))
                w = K(p, c, "uiwarp", "write_lat", 64, "typ_us")
                rr = d.ratio(w, spin)
                goal("ib_write_lat ≤ 1.3× busy-poll TCP half-RTT", "%s %s" % (p, c),
                     rr and rr[0], "≤ 1.3", rr and rr[0] <= 1.3)
                rd = K(p, c, "uiwarp", "read_lat", 64, "typ_us")
                rr = d.ratio(K(p, c, "uiwarp", "read_lat", 64, "p99_us"), rd)
                goal("ib_read_lat 99% ≤ 3× its typical", "%s %s" % (p, c), rr and rr[0], "≤ 3",
                     rr and rr[0] <= 3)
                for tl, op, met, n in (("ucx", "am_lat", "typ_us", "UCX am_lat"),
                                       ("fabric", "pingpong", "avg_us", "libfabric fi_pingpong")):
                    rr = d.ratio(w, K(p, c, tl, op, 64, met))
                    goal("ib_write_lat below %s" % n, "%s %s" % (p, c), rr and rr[0], "< 1",
                         rr and rr[0] < 1)

    # ------------------------------------------------ main job
    jobs = sorted({k[4] for k in list(d.vals) + list(d.fails) if k[3] == "replicate"})
    if jobs:
        md.append("## The main job: uiwarp-replicate, MiB/s\n")
        md.append("`uiwarp-replicate` over RDMA Writes against its own `--tcp` mode, the same input "
                  "(synced to disk, then read once by an untimed warm-up copy), the mode that goes "
                  "first alternating; the tool's own figure (first data byte to all of it placed at "
                  "the receiver, checksum verified).\n")
        rows = []
        for p in d.paths:
            for c in d.ccs:
                for s in jobs:
                    u = K(p, c, "uiwarp", "replicate", s, "mibps")
                    t = K(p, c, "tcp", "replicate", s, "mibps")
                    if not (d.values(u) or d.fails.get(u) or d.values(t)):
                        continue
                    uv, tv = d.values(u), d.values(t)
                    slow = (min(uv) / statistics.median(uv)) if uv else None
                    tslow = (min(tv) / statistics.median(tv)) if tv else None
                    rows.append([p, c, size_name(s), d.cell(u), d.cell(t), d.rcell(u, t),
                                 fmt(slow) if slow is not None else "–",
                                 fmt(tslow) if tslow is not None else "–"])
                    rr = d.ratio(u, t)
                    goal("main job ≥ 0.90× its --tcp mode", "%s %s" % (p, c), rr and rr[0],
                         "≥ 0.90", rr and rr[0] >= 0.90)
                    goal("slowest uiwarp copy ≥ 0.75× its median", "%s %s" % (p, c), slow,
                         "≥ 0.75", slow is not None and slow >= 0.75)
        md.append(table(["path", "cc", "file", "uiwarp (RDMA Writes)", "--tcp", "uiwarp/tcp",
                         "slowest/median uiwarp", "slowest/median --tcp"], rows))

    # ------------------------------------------------ TLS (the tls group)
    suites = sorted({k[3].split(":", 1)[1] for k in list(d.vals) + list(d.fails)
                     if k[2] == "tls" and k[3].startswith("stream:")})
    if suites:
        md.append("## TLS 1.3 under MPA: RDMA Write over uiwarp's TLS stream, Gbit/s\n")
        md.append("TLS socket: `uiwarp-bench-tls` (OpenSSL, one TCP connection, PSK, TCP_NODELAY, "
                  "SIZE-byte `SSL_write_ex`); uiwarp: `ib_write_bw -R` with `UIWARP_TLS=on`, the "
                  "same PSK and suite, and without TLS in the same repetition.\n")
        rows = []
        tsizes = sorted({k[4] for k in list(d.vals) + list(d.fails)
                         if k[2] == "tls" and k[3].startswith("stream:")})
        for p in d.paths:
            for c in d.ccs:
                for st in suites:
                    for sz in tsizes:
                        t = K(p, c, "tls", "stream:" + st, sz, "gbps")
                        u = K(p, c, "uiwarp", "write:" + st, sz, "gbps")
                        w = K(p, c, "uiwarp", "write", sz, "gbps")
                        if not (d.values(t) or d.values(u) or d.fails.get(u)):
                            continue
                        rows.append([p, c, st, size_name(sz), d.cell(t), d.cell(u), d.rcell(u, t),
                                     d.cell(w), d.rcell(u, w)])
                        if sz in (65536, 1048576) and p in ("lo", "veth"):
                            rr = d.ratio(u, t)
                            goal("#15: Write over TLS ≥ 0.90× a TLS socket stream",
                                 "%s %s %s %s" % (p, c, st, size_name(sz)), rr and rr[0], "≥ 0.90",
                                 rr and rr[0] >= 0.90)
        md.append(table(["path", "cc", "suite", "size", "TLS socket", "Write over TLS",
                         "Write-TLS/TLS socket", "Write, no TLS", "Write-TLS/Write"], rows))
        rows = []
        for p in d.paths:
            for c in d.ccs:
                for st in suites:
                    for sz in sorted({k[4] for k in d.vals if k[3] == "replicate:" + st}):
                        u = K(p, c, "uiwarp", "replicate:" + st, sz, "mibps")
                        t = K(p, c, "tcp", "replicate:" + st, sz, "mibps")
                        if not (d.values(u) or d.values(t)):
                            continue
                        rows.append([p, c, st, size_name(sz), d.cell(u), d.cell(t),
                                     d.rcell(u, t)])
                        rr = d.ratio(u, t)
                        goal("#15: main job --tls ≥ 0.90× --tcp --tls", "%s %s %s" % (p, c, st),
                             rr and rr[0], "≥ 0.90", rr and rr[0] >= 0.90)
        if rows:
            md.append("`uiwarp-replicate --tls` (RDMA Writes over uiwarp's TLS stream) against "
                      "`--tcp --tls` (TLS on the plain sockets), MiB/s:\n")
            md.append(table(["path", "cc", "suite", "file", "uiwarp --tls", "--tcp --tls",
                             "ratio"], rows))

    # ------------------------------------------------ many QPs
    if d.qps:
        md.append("## Many QPs in one process against as many TCP sockets, aggregate Gbit/s\n")
        md.append("`uiwarp-bench-qps`: N RC QPs, each keeping 8 RDMA Writes of 64 KiB outstanding, "
                  "one CQ busy-polled by one application thread; `uiwarp-bench-tcpconns`: N TCP "
                  "sockets, one thread and one epoll set per side, 64 KiB non-blocking sends. "
                  "Threads: the most each process had (`/proc/PID/status`, sampled every 50 ms), "
                  "client/server.\n")
        rows = []
        for p in d.paths:
            for c in d.ccs:
                for n in d.qps:
                    u, t = K(p, c, "uiwarp", "qps", n, "gbps"), K(p, c, "tcp", "qps", n, "gbps")
                    if not (d.values(u) or d.fails.get(u) or d.values(t) or d.fails.get(t)):
                        continue
                    th = "%s / %s" % (fmt(d.median(K(p, c, "uiwarp", "qps", n, "threads_c"))),
                                      fmt(d.median(K(p, c, "uiwarp", "qps", n, "threads_s"))))
                    rows.append([p, c, str(n), d.cell(t), d.cell(u), d.rcell(u, t), th])
                    if n >= 1000:
                        rr = d.ratio(u, t)
                        goal("%d QPs ≥ 0.9× %d TCP sockets" % (n, n), "%s %s" % (p, c),
                             rr and rr[0], "≥ 0.90", rr and rr[0] >= 0.9)
        md.append(table(["path", "cc", "N", "TCP sockets", "uiwarp QPs", "uiwarp/TCP",
                         "uiwarp threads"], rows))

    # ------------------------------------------------ storage (the storage group)
    isizes = sorted({k[4] for k in list(d.vals) + list(d.fails) if k[3] in ("iser", "iscsi")})
    if isizes:
        md.append("## Storage: tgt's iSER target over uiwarp against iSCSI over TCP, MB/s\n")
        md.append("`iscsi-perf -m 16` (libiscsi) reading tgt's file-backed LUN for a fixed time: over "
                  "`iser://` with the initiator and tgtd under `uiwarp-run`, and over `iscsi://` to "
                  "the same tgtd's TCP portal (`tests/programs/iser.sh` with `UIWV_ISER_PERF`); veth "
                  "rows: target and initiator in two namespaces (iser.sh `ns`). Issue #11's goal: "
                  "iSER ≥ 1.5× iSCSI/TCP for reads.\n")
        rows = []
        for p in d.paths:
            for c in d.ccs:
                for s in isizes:
                    u, t = K(p, c, "uiwarp", "iser", s, "mbps"), K(p, c, "tcp", "iscsi", s, "mbps")
                    if not (d.values(u) or d.fails.get(u) or d.values(t) or d.fails.get(t)):
                        continue
                    rows.append([p, c, size_name(s), d.cell(t), d.cell(u), d.rcell(u, t)])
                    rr = d.ratio(u, t)
                    goal("#11: iSER reads ≥ 1.5× iSCSI/TCP", "%s %s %s" % (p, c, size_name(s)),
                         rr and rr[0], "≥ 1.5", rr and rr[0] >= 1.5)
        md.append(table(["path", "cc", "request", "iSCSI/TCP", "iSER over uiwarp", "iSER/TCP"],
                        rows))
    if any(k[3].startswith("ceph-") for k in list(d.vals) + list(d.fails)):
        md.append("## Storage: Ceph async+rdma over uiwarp against async+posix, MB/s\n")
        md.append("`tests/programs/ceph.sh`: mon, mgr and osd.0 in one namespace, osd.1 in another "
                  "(a veth pair), memstore OSDs, a pool of size 2 (every write replicated OSD to "
                  "OSD), `rados bench` from the first namespace, 16 × 4 MiB in flight; every "
                  "daemon and client under `uiwarp-run` for rdma. Issue #11's goal: ≥ 1.0× "
                  "async+posix.\n")
        rows = []
        for p in d.paths:
            for c in d.ccs:
                for op, name in (("ceph-write", "write"), ("ceph-seq", "seq read")):
                    u, t = K(p, c, "uiwarp", op, 4194304, "mbps"), K(p, c, "tcp", op, 4194304, "mbps")
                    if not (d.values(u) or d.fails.get(u) or d.values(t) or d.fails.get(t)):
                        continue
                    rows.append([p, c, name, d.cell(t), d.cell(u), d.rcell(u, t)])
                    rr = d.ratio(u, t)
                    goal("#11: Ceph %s ≥ 1.0× async+posix" % name, "%s %s" % (p, c),
                         rr and rr[0], "≥ 1.0", rr and rr[0] >= 1.0)
        md.append(table(["path", "cc", "rados bench", "async+posix", "async+rdma (uiwarp)",
                         "rdma/posix"], rows))

    # ------------------------------------------------ CPU
    cpu_rows = []
    for p in d.paths:
        for c in d.ccs:
            for s in d.sizes:
                for tl, op in (("tcp", "stream"), ("mpa", "stream"), ("uiwarp", "write"),
                               ("uiwarp", "read"),
                               ("uiwarp", "send"), ("ucx", "put"), ("ucx", "tag"),
                               ("tcp", "stream_x16"), ("uiwarp", "write_pl16"),
                               ("uiwarp", "send_pl16")):
                    kc, ks = K(p, c, tl, op, s, "cpu_c"), K(p, c, tl, op, s, "cpu_s")
                    if d.values(kc):
                        cpu_rows.append([p, c, size_name(s), "%s %s" % (tl, op), d.cell(kc),
                                         d.cell(ks)])
            for n in d.qps:
                for tl in ("tcp", "uiwarp"):
                    kc, ks = K(p, c, tl, "qps", n, "cpu_c"), K(p, c, tl, "qps", n, "cpu_s")
                    if d.values(kc):
                        cpu_rows.append([p, c, "64 KiB", "%s %d %s" % (
                            tl, n, "QPs" if tl == "uiwarp" else "sockets"), d.cell(kc), d.cell(ks)])
            for s in jobs:
                for tl in ("tcp", "uiwarp"):
                    kc, ks = K(p, c, tl, "replicate", s, "cpu_c"), K(p, c, tl, "replicate", s, "cpu_s")
                    if d.values(kc):
                        cpu_rows.append([p, c, size_name(s), "job " + ("--tcp" if tl == "tcp" else "uiwarp"),
                                         d.cell(kc), d.cell(ks)])
    if cpu_rows:
        md.append("## CPU seconds per GiB moved, each side\n")
        md.append("user + system time of each process (`wait4`, every thread, through "
                  "`uiwarp-bench-cpu`) over the whole run including setup, divided by the GiB it "
                  "moved. Client = the sender for Write/Send/TCP/jobs, the reader for Read.\n")
        md.append(table(["path", "cc", "size", "run", "client s/GiB", "server s/GiB"], cpu_rows))

    # ------------------------------------------------ goals
    if goals:
        md.append("## The goals of issue #10 (and #11, #15, marked), as measured in this run\n")
        met = sum(1 for g in goals if g[4] == "yes")
        md.append("%d of %d met.\n" % (met, len(goals)))
        md.append(table(["goal", "where", "measured", "target", "met"],
                        [[g[0], g[1], "%.2f" % g[2], g[3], g[4]] for g in goals]))

    # ------------------------------------------------ failures
    if d.fails:
        md.append("## Failures\n")
        rows = []
        for k, notes in sorted(d.fails.items()):
            for note, cnt in collections.Counter(notes).items():
                rows.append([k[0], k[1], "%s %s" % (k[2], k[3]), size_name(k[4]), str(cnt),
                             note.replace("|", "/") or "–"])
        md.append(table(["path", "cc", "run", "size", "times", "reason (last error line)"], rows))
    return "\n".join(md) + "\n"


def plots(d, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench_summary: matplotlib is not installed (python3-matplotlib): no plots",
              file=sys.stderr)
        return []
    made = []
    K = lambda p, c, t, o, s, m: (p, c, t, o, s, m)  # noqa: E731
    series = [("tcp", "stream", "raw TCP", "k", "o"), ("uiwarp", "write", "uiwarp Write", "C0", "s"),
              ("uiwarp", "read", "uiwarp Read", "C1", "^"), ("uiwarp", "send", "uiwarp Send", "C2", "v"),
              ("ucx", "put", "UCX put_bw", "C3", "x"), ("ucx", "tag", "UCX tag_bw", "C4", "+")]
    if d.sizes:
        nr, nc = len(d.ccs), len(d.paths)
        fig, axes = plt.subplots(nr, nc, figsize=(4.2 * nc, 3.4 * nr), squeeze=False)
        for i, c in enumerate(d.ccs):
            for j, p in enumerate(d.paths):
                ax = axes[i][j]
                for tl, op, name, col, mk in series:
                    xs, ys, lo, hi = [], [], [], []
                    for s in d.sizes:
                        v = d.values(K(p, c, tl, op, s, "gbps"))
                        if v:
                            m = statistics.median(v)
                            xs.append(s)
                            ys.append(m)
                            lo.append(m - min(v))
                            hi.append(max(v) - m)
                    if xs:
                        ax.errorbar(xs, ys, yerr=[lo, hi], label=name, color=col, marker=mk,
                                    capsize=2, linewidth=1)
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_xticks(d.sizes)
                ax.set_xticklabels([size_name(s) for s in d.sizes], fontsize=7)
                ax.set_title("%s, %s" % (p, c), fontsize=9)
                ax.set_ylabel("Gbit/s (median, min–max)", fontsize=7)
                ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=6)
        fig.suptitle("Throughput, one connection", fontsize=10)
        fig.tight_layout()
        f = os.path.join(out, "bench-throughput.png")
        fig.savefig(f, dpi=110)
        plt.close(fig)
        made.append(f)

    # ratios uiwarp / TCP (throughput at each size, job, QPs)
    labels, vals, errs, cols = [], [], [[], []], []
    for p in d.paths:
        for c in d.ccs:
            for op, col in (("write", "C0"), ("read", "C1"), ("send", "C2")):
                for s in d.sizes:
                    r = d.ratio(K(p, c, "uiwarp", op, s, "gbps"), K(p, c, "tcp", "stream", s, "gbps"))
                    if r:
                        labels.append("%s %s %s %s" % (p, c, op, size_name(s)))
                        vals.append(r[0])
                        errs[0].append(r[0] - (r[1] if r[1] is not None else r[0]))
                        errs[1].append((r[2] if r[2] is not None else r[0]) - r[0])
                        cols.append(col)
            for s in sorted({k[4] for k in d.vals if k[3] == "replicate"}):
                r = d.ratio(K(p, c, "uiwarp", "replicate", s, "mibps"),
                            K(p, c, "tcp", "replicate", s, "mibps"))
                if r:
                    labels.append("%s %s job %s" % (p, c, size_name(s)))
                    vals.append(r[0])
                    errs[0].append(r[0] - (r[1] if r[1] is not None else r[0]))
                    errs[1].append((r[2] if r[2] is not None else r[0]) - r[0])
                    cols.append("C5")
            for n in d.qps:
                r = d.ratio(K(p, c, "uiwarp", "qps", n, "gbps"), K(p, c, "tcp", "qps", n, "gbps"))
                if r:
                    labels.append("%s %s %d QPs" % (p, c, n))
                    vals.append(r[0])
                    errs[0].append(r[0] - (r[1] if r[1] is not None else r[0]))
                    errs[1].append((r[2] if r[2] is not None else r[0]) - r[0])
                    cols.append("C6")
    if vals:
        h = max(3.0, 0.22 * len(vals) + 1.2)
        fig, ax = plt.subplots(figsize=(7.5, h))
        ys = list(range(len(vals)))[::-1]
        ax.barh(ys, vals, xerr=errs, color=cols, capsize=2)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=6)
        for x, ls in ((0.9, "--"), (0.85, ":"), (1.0, "-")):
            ax.axvline(x, color="k", linestyle=ls, linewidth=0.8)
        ax.set_xlabel("uiwarp / raw TCP (ratio of medians; bars: min–max of same-repetition pairs)",
                      fontsize=7)
        ax.set_title("uiwarp against raw TCP (goals: 0.90 Write/Send/job, 0.85 Read)", fontsize=9)
        fig.tight_layout()
        f = os.path.join(out, "bench-ratios.png")
        fig.savefig(f, dpi=110)
        plt.close(fig)
        made.append(f)

    # latency
    lat = [("tcp", "pp_spin", "typ_us", "TCP busy-poll"), ("tcp", "pp_block", "typ_us", "TCP blocking"),
           ("uiwarp", "write_lat", "typ_us", "ib_write_lat"), ("uiwarp", "send_lat", "typ_us", "ib_send_lat"),
           ("uiwarp", "read_lat", "typ_us", "ib_read_lat (RTT)"), ("ucx", "am_lat", "typ_us", "UCX am_lat"),
           ("fabric", "pingpong", "avg_us", "fi_pingpong")]
    groups = [(p, c) for p in d.paths for c in d.ccs
              if any(d.values(K(p, c, t, o, 64, m)) for t, o, m, _ in lat)]
    if groups:
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(groups) + 2), 3.6))
        w = 0.8 / len(lat)
        for i, (t, o, m, name) in enumerate(lat):
            xs, ys, p99 = [], [], []
            for g, (p, c) in enumerate(groups):
                v = d.median(K(p, c, t, o, 64, m))
                if v is not None:
                    xs.append(g + i * w)
                    ys.append(v)
                    p99.append(d.median(K(p, c, t, o, 64, "p99_us")))
            if xs:
                ax.bar(xs, ys, width=w, label=name, color="C%d" % i)
                for x, q in zip(xs, p99):
                    if q is not None:
                        ax.plot([x], [q], marker="_", color="k", markersize=8)
        ax.set_xticks([g + 0.4 - w / 2 for g in range(len(groups))])
        ax.set_xticklabels(["%s %s" % g for g in groups], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("µs at 64 B (bar: typical, dash: 99th percentile)", fontsize=7)
        ax.legend(fontsize=6, ncol=2)
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        f = os.path.join(out, "bench-latency.png")
        fig.savefig(f, dpi=110)
        plt.close(fig)
        made.append(f)
    return made


def main():
    if len(sys.argv) != 2:
        print("usage: bench_summary.py OUT_DIR", file=sys.stderr)
        return 2
    out = sys.argv[1]
    d = Data(os.path.join(out, "samples.tsv"))
    meta = read_meta(os.path.join(out, "meta.txt"))
    md = summarize(d, meta)
    made = plots(d, out)
    if made:
        md += "\n" + "\n".join("![%s](%s)" % (os.path.basename(f), os.path.basename(f))
                               for f in made) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
