#!/usr/bin/env bash
# Tests of the emulated WAN (scripts/wan.sh), each on a path of its own
# (namespaces "uiwt<pid>-a/-r/-b", "rw<pid>-…" for streams, deleted on exit).
#   check      plain TCP first: with 10 ms each way and 200 Mbit/s, a TCP
#              ping-pong's median RTT is 20–30 ms and a 32 MiB copy
#              (uiwarp-replicate --tcp) runs at no more
#              than the rate; with 1 % loss set, the router's counters show
#              0.5–2 % of the forwarded packets dropped
#   replicate  uiwarp-replicate over 10 ms each way, 200 Mbit/s, 0.01 %
#              loss: RDMA Writes and the --tcp mode each copy 64 MiB, the
#              copies equal the source; both rates are printed (a figure,
#              not asserted: speed is the benchmark suite's job)
#   streams    uiwarp-replicate --streams 4 over 10 ms each way, 200 Mbit/s,
#              0.5 % loss each way: RDMA and --tcp each copy 16 MiB, the copies
#              equal the source, and the sender's final line states "streams
#              4", an rtt of at least 15 ms over 4 connections and more than 0
#              retransmitted segments (TCP_INFO of the 4 connections); then
#              --resume: a sender that dies after 6 of 64 chunks leaves
#              dst.part (no dst), and the restarted copy sends only part of
#              the chunks and ends identical
#   lossy      50 ms RTT (25 ms each way), 200 Mbit/s, 1 % loss each way:
#              rping (10 pings of 2000 bytes, every byte checked by rping -v)
#              and uiwarp-replicate --streams 8 of 4 MiB (RDMA, copy equal)
#   ucmatose64 ucmatose with 64 connections through the router (20 ms RTT,
#              200 Mbit/s): every connection set up, 10 messages each way,
#              "return status 0" on both sides
# Env: UIW_BUILD, UIW_SRC. Root, iptables and uiwarp-wan-delay, else 77.
set -u
MODE=${1:-check}
UIW_SRC=${UIW_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
UIW_BUILD=${UIW_BUILD:-$UIW_SRC/build}
export UIW_BUILD
NAME=uiwt$$
[ "$MODE" = streams ] && NAME=rw$$
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

# copy "FLAGS" MIB PORT [SENDER FLAGS...]: uiwarp-replicate from B to A (FLAGS
# for both sides, split at spaces); prints its MiB/s; the sender's output stays
# in $TMP/send$PORT.out
copy() {
	local mib=$2 port=$3 out
	local flag=()
	read -ra flag <<<"$1"
	local sflag=("${@:4}")
	local src=$TMP/src.bin dst=$TMP/dst$port.bin
	[ -f "$src" ] || head -c $((mib * 1048576)) /dev/urandom >"$src"
	ip netns exec "$NAME-a" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" recv "${flag[@]}" \
		--bind 198.51.100.1 --port "$port" --timeout 120 "$dst" >"$TMP/recv$port.out" 2>&1 &
	local rp=$!
	PIDS+=("$rp")
	sleep 0.5
	ip netns exec "$NAME-b" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" send "${flag[@]}" \
		${sflag[@]+"${sflag[@]}"} --port "$port" --quiet --timeout 120 "$src" 198.51.100.1 \
		>"$TMP/send$port.out" 2>&1 ||
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
streams)
	up --rate 200mbit --delay-ms 10 --loss 0.005
	for f in "" --tcp; do
		port=$((24021 + ${#f}))
		r=$(copy "$f" 16 "$port" --streams 4) || exit 1
		line=$(grep 'sent 16777216 bytes' "$TMP/send$port.out") ||
			fail "no final line: $(cat "$TMP/send$port.out")"
		log "16 MiB, --streams 4 ${f:-(rdma)}, 20 ms RTT, 0.5 % loss: $r MiB/s; ${line#*; }"
		rtt=$(sed -n 's/.*streams 4, rtt \([0-9.]*\) ms (4 connections), retrans \([0-9]*\) segments.*/\1 \2/p' \
			<<<"$line")
		[ -n "$rtt" ] || fail "final line lacks streams 4 / rtt / 4 connections / retrans: $line"
		read -r rtt retrans <<<"$rtt"
		awk -v r="$rtt" 'BEGIN { exit !(r >= 15) }' || fail "rtt $rtt ms below the path's 20 ms"
		[ "$retrans" -gt 0 ] || fail "no retransmitted segments reported under 0.5 % loss"
	done
	# --resume over the path: the sender dies after 6 of 64 chunks (--stop-after),
	# the receiver keeps dst.part, the restarted copy skips what arrived intact
	dst=$TMP/dst24031.bin
	ip netns exec "$NAME-a" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" recv --resume \
		--bind 198.51.100.1 --port 24031 --timeout 60 "$dst" >"$TMP/recv24031.out" 2>&1 &
	rp=$!
	PIDS+=("$rp")
	sleep 0.5
	ip netns exec "$NAME-b" timeout 150 "$UIW_BUILD/bin/uiwarp-run" "$REP" send --resume \
		--streams 4 --chunk 256k --window 2 --stop-after 6 --port 24031 --quiet --timeout 60 "$TMP/src.bin" \
		198.51.100.1 >"$TMP/send24031.out" 2>&1
	src_rc=$?
	wait "$rp"
	[ "$src_rc" = 3 ] || fail "sender with --stop-after 6 exited $src_rc: $(cat "$TMP/send24031.out")"
	[ -e "$dst" ] && fail "$dst exists after the interrupted copy"
	[ -e "$dst.part" ] || fail "no dst.part kept: $(cat "$TMP/recv24031.out")"
	# copy() reuses $dst (its name comes from the port) and checks the result
	r=$(copy --resume 16 24031 --streams 4 --chunk 256k) || exit 1
	line=$(grep 'sent 16777216 bytes' "$TMP/send24031.out")
	log "resumed after --stop-after 6: $r MiB/s; ${line#*; }"
	read -r sent skipped < <(sed -n 's/.*chunks sent \([0-9]*\) skipped \([0-9]*\).*/\1 \2/p' <<<"$line")
	[ "$((sent + skipped))" = 64 ] && [ "$skipped" -ge 1 ] && [ "$sent" -ge 1 ] ||
		fail "resume sent ${sent:-?} and skipped ${skipped:-?} of 64 chunks"
	;;
lossy)
	up --rate 200mbit --delay-ms 25 --loss 0.01
	ip netns exec "$NAME-a" timeout 120 "$UIW_BUILD/bin/uiwarp-run" rping -s -a 198.51.100.1 \
		-p 24041 -C 10 -S 2000 -v >"$TMP/rping_s.out" 2>&1 &
	rp=$!
	PIDS+=("$rp")
	sleep 0.5
	t0=$(date +%s.%N)
	ip netns exec "$NAME-b" timeout 120 "$UIW_BUILD/bin/uiwarp-run" rping -c -a 198.51.100.1 \
		-p 24041 -C 10 -S 2000 -v >"$TMP/rping_c.out" 2>&1 ||
		{
			cat "$TMP/rping_c.out" "$TMP/rping_s.out" >&2
			fail "rping over 50 ms RTT and 1 % loss failed"
		}
	wait "$rp" || fail "rping server exited $?"
	n=$(grep -c '^ping data: rdma-ping-' "$TMP/rping_c.out")
	[ "$n" = 10 ] || fail "rping client verified $n of 10 pings"
	log "rping: 10 pings of 2000 bytes verified in $(awk -v t="$t0" -v n="$(date +%s.%N)" \
		'BEGIN { printf "%.1f", n - t }') s over 50 ms RTT, 1 % loss"
	r=$(copy "" 4 24042 --streams 8 --chunk 256k) || exit 1
	line=$(grep 'sent 4194304 bytes' "$TMP/send24042.out")
	log "4 MiB, --streams 8, 50 ms RTT, 1 % loss: $r MiB/s; ${line#*; }"
	read -r dropped < <(ip netns exec "$NAME-r" iptables -vnxL FORWARD |
		awk '/statistic/ { print $1 + 0 }')
	log "the router dropped $dropped packets"
	[ "${dropped:-0}" -gt 0 ] || fail "no packet dropped: the loss was not in effect"
	;;
ucmatose64)
	command -v ucmatose >/dev/null || skip "ucmatose (rdmacm-utils) not installed"
	up --rate 200mbit --delay-ms 10
	ip netns exec "$NAME-a" timeout 120 "$UIW_BUILD/bin/uiwarp-run" ucmatose -b 198.51.100.1 \
		-p 24051 -c 64 -C 10 >"$TMP/uc_s.out" 2>&1 &
	sp=$!
	PIDS+=("$sp")
	sleep 0.5
	ip netns exec "$NAME-b" timeout 120 "$UIW_BUILD/bin/uiwarp-run" ucmatose -s 198.51.100.1 \
		-p 24051 -c 64 -C 10 >"$TMP/uc_c.out" 2>&1
	crc=$?
	wait "$sp"
	src=$?
	if [ "$crc" != 0 ] || [ "$src" != 0 ] || ! grep -q "return status 0" "$TMP/uc_c.out" ||
		! grep -q "return status 0" "$TMP/uc_s.out"; then
		tail -20 "$TMP/uc_c.out" "$TMP/uc_s.out" >&2
		fail "ucmatose -c 64 through the router: client $crc, server $src"
	fi
	log "ucmatose: 64 connections through the router, 10 messages each: $(grep -m1 'connect' \
		"$TMP/uc_c.out")"
	;;
*) fail "unknown mode $MODE" ;;
esac
log PASS
