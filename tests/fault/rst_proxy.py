#!/usr/bin/env python3
"""A TCP proxy that resets a uiwarp connection in the middle of an FPDU.

rst_proxy.py LISTEN_ADDR LISTEN_PORT TARGET_ADDR TARGET_PORT DIR AFTER INTO

Accepts one connection on LISTEN_ADDR:LISTEN_PORT, connects to
TARGET_ADDR:TARGET_PORT and forwards bytes both ways. In direction DIR
("c2s": client to server, "s2c": server to client) it follows the MPA
framing (RFC 5044 sections 6 and 4: the Request or Reply frame, 20 bytes +
private data, then FPDUs of 2 + ULPDU_Length + pad to 4 + 4 CRC bytes;
markers must be off, as they are by default). Once AFTER bytes went that
way it waits for the next FPDU whose ULPDU is at least INTO + 64 bytes long,
forwards its first 2 + INTO bytes and then closes both sockets with
SO_LINGER 0, so both ends get an RST while the receiver holds part of an
FPDU. Prints "listening" when ready and "rst after N bytes, INTO bytes into
an FPDU of ULPDU length L rst_ms=MS" (the wall clock of the reset, in ms)
when it cut; exits 0 then, 1 when a side closed
first or the framing did not parse, 2 when nothing connected in 30 s.
Every loop is bounded by a 60 s deadline.
"""
import select
import socket
import struct
import sys
import time

MPA_FRAME = 20  # key (16) + flags + rev + PD_Length (RFC 5044 section 7.1)


class Framer:
    """Follows the MPA framing of one direction, byte by byte counts."""

    def __init__(self):
        self.hdr = b""  # the bytes of a header being read
        self.need = 0  # bytes left in the current frame (after its header)
        self.first = True  # the Request / Reply frame comes first
        self.total = 0  # bytes forwarded before this chunk
        self.cutting = None  # bytes of the FPDU to cut still to forward
        self.ulpdu = 0

    def cut(self, data, after, into):
        """Returns (bytes of data to forward before the reset, the FPDU's
        ULPDU length), or None to forward it all."""
        i = 0
        while i < len(data):
            if self.cutting is not None:
                n = min(self.cutting, len(data) - i)
                self.cutting -= n
                i += n
                if self.cutting == 0:
                    self.total += i
                    return i, self.ulpdu
                continue
            if self.need:
                n = min(self.need, len(data) - i)
                self.need -= n
                i += n
                continue
            want = MPA_FRAME if self.first else 2
            n = min(want - len(self.hdr), len(data) - i)
            self.hdr += data[i:i + n]
            i += n
            if len(self.hdr) < want:
                break
            if self.first:
                self.need = struct.unpack(">H", self.hdr[18:20])[0]
                self.first = False
            else:
                ulpdu = struct.unpack(">H", self.hdr)[0]
                if self.total + i >= after and ulpdu >= into + 64:
                    self.cutting, self.ulpdu = into, ulpdu
                else:
                    self.need = ulpdu + (-(2 + ulpdu) % 4) + 4
            self.hdr = b""
        self.total += len(data)
        return None


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def main():
    laddr, lport, taddr, tport, direction, after, into = sys.argv[1:8]
    lport, tport, after, into = int(lport), int(tport), int(after), int(into)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((laddr, lport))
    ls.listen(1)
    print("listening", flush=True)
    ls.settimeout(30)
    try:
        c, _ = ls.accept()
    except socket.timeout:
        print("nothing connected", flush=True)
        return 2
    srv = socket.create_connection((taddr, tport), timeout=10)
    srv.settimeout(None)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    watched = c if direction == "c2s" else srv
    framer = Framer()
    peer = {c: srv, srv: c}
    end = time.monotonic() + 60
    while time.monotonic() < end:
        r, _, _ = select.select([c, srv], [], [], 1.0)
        for s in r:
            data = s.recv(65536)
            if not data:
                print("a side closed before the cut", flush=True)
                return 1
            if s is watched:
                cut = framer.cut(data, after, into)
                if cut is not None:
                    n, ulpdu = cut
                    peer[s].sendall(data[:n])
                    time.sleep(0.2)  # let the partial FPDU reach the receiver
                    rst_ms = int(time.time() * 1000)
                    reset(c)
                    reset(srv)
                    print(f"rst after {framer.total} bytes, {into} bytes into an "
                          f"FPDU of ULPDU length {ulpdu} rst_ms={rst_ms}", flush=True)
                    return 0
            peer[s].sendall(data)
    print("no cut within 60 s", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
