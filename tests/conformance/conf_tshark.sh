#!/usr/bin/env bash
# One conformance mode under tcpdump, decoded by tshark (issue 3: captures in
# every negotiated mode, no malformed frames, good CRCs, markers where
# negotiated).
#
#   conf_tshark.sh BIN MODE PORT CORRUPT-FIELD EXPECT -- TSHARK-CHECK-ARGS...
#
# Runs conf_roundtrip MODE (its UIWARP_* environment comes from ctest) with
# its proxy on 127.0.0.1:PORT (CONF_PROXY_PORT; the next free port of
# PORT, PORT+1000, PORT+2000 when taken), captures "tcp port PORT" on lo with
# tcpdump, and checks the capture with tests/e2e/tshark_check.py --two-pass
# TSHARK-CHECK-ARGS. Then the negative half: a copy of the capture with one
# octet of the field CORRUPT-FIELD flipped (conf_pcap_corrupt.py) must fail
# the same check with a message containing EXPECT.
# Exit 0 pass, 1 fail, 77 skip (not root, tcpdump / tshark missing, or the
# mode itself skipped).
set -u
BIN=$1 MODE=$2 PORT=$3 CORRUPT=$4 EXPECT=$5
shift 5
[ "${1:-}" = "--" ] && shift
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK="$HERE/../e2e/tshark_check.py"
PY=${PYTHON:-python3}

skip() {
	echo "SKIP: $*"
	exit 77
}
fail() {
	echo "FAIL [$MODE]: $*"
	exit 1
}
[ "$(id -u)" = 0 ] || skip "not root (tcpdump on lo)"
command -v tcpdump >/dev/null || skip "tcpdump not installed"
command -v tshark >/dev/null || skip "tshark not installed"

# a socket on the port (TIME-WAIT left by an earlier run does not count: the
# proxy sets SO_REUSEADDR. PORT lies below the ephemeral range, so no
# client socket in TIME-WAIT holds it as its own port: with ports of 39100+
# one did, and the proxy's bind failed with EADDRINUSE)
port_busy() { ss -Htan "( sport = :$1 or dport = :$1 )" 2>/dev/null | grep -qv "^TIME-WAIT"; }
for p in "$PORT" $((PORT + 1000)) $((PORT + 2000)); do
	port_busy "$p" || break
done
port_busy "$p" && fail "ports $PORT, +1000, +2000 all in use"
PORT=$p

TMP=$(mktemp -d /tmp/conf_tshark.XXXXXX)
TCPDUMP=
cleanup() {
	if [ -n "$TCPDUMP" ] && kill -0 "$TCPDUMP" 2>/dev/null; then
		kill -INT "$TCPDUMP" 2>/dev/null
		wait "$TCPDUMP" 2>/dev/null
	fi
	if [ -n "${KEEP_PCAP:-}" ]; then
		echo "capture kept in $TMP"
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT

timeout 120 tcpdump -i lo --immediate-mode -B 32768 -U -w "$TMP/cap.pcap" \
	"tcp port $PORT" 2>"$TMP/tcpdump.err" &
TCPDUMP=$!
for _ in $(seq 100); do
	grep -q "listening on" "$TMP/tcpdump.err" && break
	kill -0 "$TCPDUMP" 2>/dev/null || break
	sleep 0.1
done
grep -q "listening on" "$TMP/tcpdump.err" || {
	cat "$TMP/tcpdump.err"
	fail "tcpdump did not start"
}

CONF_PROXY_PORT=$PORT timeout -k 5 90 "$BIN" "$MODE" >"$TMP/rt.log" 2>&1
rc=$?
cat "$TMP/rt.log"
[ $rc = 77 ] && skip "conf_roundtrip skipped the mode"
[ $rc = 0 ] || fail "conf_roundtrip $MODE exited $rc"
grep -q "^PROXY port $PORT\$" "$TMP/rt.log" || fail "the proxy was not on port $PORT"

sleep 0.3
kill -INT "$TCPDUMP"
wait "$TCPDUMP"
TCPDUMP=
cat "$TMP/tcpdump.err"
grep -q "^0 packets dropped by kernel" "$TMP/tcpdump.err" ||
	fail "tcpdump dropped packets: the capture is incomplete"

echo "== tshark_check.py --two-pass $*"
"$PY" "$CHECK" "$TMP/cap.pcap" "$PORT" --two-pass "$@" || fail "tshark check of the capture"

echo "== negative: $CORRUPT corrupted in a copy"
"$PY" "$HERE/conf_pcap_corrupt.py" "$TMP/cap.pcap" "$TMP/bad.pcap" "$PORT" "$CORRUPT" ||
	fail "could not corrupt $CORRUPT"
if "$PY" "$CHECK" "$TMP/bad.pcap" "$PORT" --two-pass "$@" >"$TMP/bad.out" 2>&1; then
	cat "$TMP/bad.out"
	fail "the check accepted a capture with a corrupted $CORRUPT"
fi
grep -v "^tshark: " "$TMP/bad.out" | head -5
grep -q -- "$EXPECT" "$TMP/bad.out" || {
	cat "$TMP/bad.out"
	fail "the corrupted capture failed, but without '$EXPECT'"
}
echo "PASS [$MODE] (port $PORT)"
