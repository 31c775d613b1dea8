#!/usr/bin/env python3
"""Checks rping -v output: COUNT lines "PREFIX rdma-ping-N: <pattern>".

    rping_check.py FILE COUNT [--prefix 'ping data: '] [--size 64]

rping (rdma-core) fills its ping buffer of SIZE bytes with
"rdma-ping-%d: " and then ASCII characters starting at 'A' + (N mod 58),
each next one +1, wrapping from 'z' (122) back to 'A' (65); the last byte
is a NUL. With -v the client prints "ping data: %s" after each round trip
(the bytes the server RDMA-wrote back), the server "server ping data: %s"
(the bytes it RDMA-read).
"""
import argparse
import sys


def expected(n, size):
    s = "rdma-ping-%d: " % n
    s = s[:size - 1]
    c = 65 + (n % 58)
    out = list(s)
    while len(out) < size - 1:
        out.append(chr(c))
        c += 1
        if c > 122:
            c = 65
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("count", type=int)
    ap.add_argument("--prefix", default="ping data: ")
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    lines = [l.rstrip("\n") for l in open(a.file, errors="replace")
             if l.startswith(a.prefix)]
    bad = 0
    for n in range(a.count):
        want = a.prefix + expected(n, a.size)
        if n >= len(lines):
            print("rping_check: line %d missing (only %d '%s' lines)" % (n, len(lines), a.prefix))
            bad += 1
            break
        if lines[n] != want:
            print("rping_check: line %d differs:\n  got  %r\n  want %r" % (n, lines[n], want))
            bad += 1
            if bad > 5:
                break
    if len(lines) > a.count:
        print("rping_check: %d extra lines" % (len(lines) - a.count))
        bad += 1
    print("rping_check: %s: %d '%s' lines, %s" % (a.file, len(lines), a.prefix.strip(),
                                               "OK" if not bad else "MISMATCH"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
