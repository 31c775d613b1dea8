#!/usr/bin/env bash
# Tests of the emulated WAN (scripts/wan.sh), each on a path of its own
# (namespaces "uiwt<pid>-a/-r/-b", deleted on exit).
#   check      plain TCP first: with 10 ms each way and 200 Mbit/s, a TCP
#              ping-pong's median RTT is 20–30 ms and a 32 MiB copy
#              (uiwarp-replicate --tcp) runs at no more
#              than the rate; with 1 % loss set, the router's counters show
#              0.5–2 % of the forwarded packets dropped
#   replicate  uiwarp-replicate over 10 ms each way, 200 Mbit/s, 0.01 %
#              loss: RDMA Writes and the --tcp mode each copy 64 MiB, the
#              copies equal the source; both rates are printed (a figure,
#              not asserted: speed is the benchmark suite's job)
# Env: UIW_BUILD, UIW_SRC. Root, iptables and uiwarp-wan-delay, else 77.
set -u
MODE=${1:-check}
UIW_SRC=${UIW_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
UIW_BUILD=${UIW_BUILD:-$UIW_SRC/build}
export UIW_BUILD
NAME=uiwt$$
WAN=("$UIW_SRC/scripts/wan.sh")
TMP=$(mktemp -d "/tmp/$NAME.XXXXXX")
REP=$UIW_BUILD/bin/uiwarp-replicate
PIDS=()

TEST_AREA=wan
net_down() { bash "${WAN[@]}" down --name "$NAME"; }
# shellcheck source=../netns_lib.sh
. "$UIW_SRC/tests/netns_lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root"
command -v iptables >/dev/null || skip "iptables not installed"
[ -x "$UIW_BUILD/bin/uiwarp-wan-delay" ] || skip "uiwarp-wan-delay not built"
[ -x "$REP" ] || skip "uiwarp-replicate not built"

up() {
	WAN_DELAY_SECS=300 bash "${WAN[@]}" up --name "$NAME" "$@" || fail "wan.sh up $*"
}

# rtt_ms: median round trip of 64-byte TCP ping-pongs from B to A, in ms
rtt_ms() {
	local port=$1
	ip netns exec "$NAME-a" timeout 60 python3 - "$port" <<'EOF' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.1", int(sys.argv[1]))); s.listen(1); s.settimeout(30)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    b = c.recv(64)
    if not b:
        break
    c.sendall(b)
EOF
	PIDS+=($!)
	sleep 0.5
	ip netns exec "$NAME-b" timeout 60 python3 - "$port" <<'EOF'
import socket, statistics, sys, time
c = socket.create_connection(("198.51.100.1", int(sys.argv[1])), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for i in range(21):
    t = time.monotonic(); c.sendall(b"x" * 64)
    got = 0
    while got < 64:
        got += len(c.recv(64 - got))
    rtts.append((time.monotonic() - t) * 1000)
print("%.2f" % statistics.median(rtts[1:]))
EOF
}

# copy MODE_FLAG MIB PORT: uiwarp-replicate from B to A; prints its MiB/s
copy() {
	local mib=$2 port=$3 out
	local flag=()
	[ -n "$1" ] && flag=("$1")
	local src=$TMP/src.bin dst=$TMP/dst$port.bin
	[ -f "$src" ] || head -c $((mib * 1048576)) /dev/urandom >"$src"
	ip netns exec "$NAME-a" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" recv "${flag[@]}" \
		--bind 198.51.100.1 --port "$port" --timeout 120 "$dst" >"$TMP/recv$port.out" 2>&1 &
	local rp=$!
	PIDS+=("$rp")
	sleep 0.5
	ip netns exec "$NAME-b" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" send "${flag[@]}" \
		--port "$port" --quiet --timeout 120 "$src" 198.51.100.1 >"$TMP/send$port.out" 2>&1 ||
		{
			cat "$TMP/send$port.out" "$TMP/recv$port.out" >&2
			fail "copy ${flag[*]} failed"
		}
	wait "$rp" || fail "receiver ${flag[*]} exited $?"
	cmp -s "$src" "$dst" || fail "copy ${flag[*]} differs"
	rm -f "$dst"
	out=$(grep -ho '[0-9.]* MiB/s' "$TMP/send$port.out" | head -1)
	echo "${out%% *}"
}

case $MODE in
check)
	up --rate 200mbit --delay-ms 10
	rtt=$(rtt_ms 24001) || fail "no ping-pong through the path"
	log "TCP ping-pong median RTT $rtt ms (set: 2 × 10 ms)"
	awk -v r="$rtt" 'BEGIN { exit !(r >= 20 && r <= 30) }' || fail "RTT $rtt ms not in 20–30 ms"
	rate=$(copy --tcp 32 24002)
	log "TCP copy of 32 MiB: $rate MiB/s (set: 200 Mbit/s = 23.8 MiB/s)"
	awk -v r="$rate" 'BEGIN { exit !(r > 0 && r <= 23.84 * 1.1) }' ||
		fail "TCP ran at $rate MiB/s, above the 200 Mbit/s set"
	up --rate 200mbit --delay-ms 10 --loss 0.01
	copy --tcp 4 24003 >/dev/null
	read -r dropped passed < <(ip netns exec "$NAME-r" iptables -vnxL FORWARD |
		awk '/statistic/ { d = $1 } /NFQUEUE/ { q = $1 } END { print d + 0, q + 0 }')
	pct=$(awk -v d="$dropped" -v q="$passed" 'BEGIN { printf "%.2f", 100 * d / (d + q) }')
	log "loss set 1 %: $dropped of $((dropped + passed)) forwarded packets dropped ($pct %)"
	awk -v p="$pct" 'BEGIN { exit !(p >= 0.5 && p <= 2) }' || fail "loss $pct % not in 0.5–2 %"
	;;
replicate)
	up --rate 200mbit --delay-ms 10 --loss 0.0001
	r1=$(copy "" 64 24011)
	r2=$(copy --tcp 64 24012)
	log "64 MiB over 20 ms RTT, 200 Mbit/s, 0.01 % loss: uiwarp $r1 MiB/s, --tcp $r2 MiB/s"
	;;
*) fail "unknown mode $MODE" ;;
esac
log PASS
