#!/usr/bin/env bash
# uiwarp over Multipath TCP (UIWARP_MPTCP=1) between two namespaces joined
# by two routed paths (tests/mptcp/mp_paths.sh: namespaces "mpt<pid>-*",
# deleted on exit): path 1 5 ms each way, path 2 10 ms each way, each
# path RATE (default 200mbit) in each direction. Every copy is
# uiwarp-replicate (RDMA Writes; the receiver checks length and CRC32c,
# exit 0 only then) from N-a to N-b, and the copy is compared with cmp.
#   paths     one copy over plain TCP on path 1 (UIWARP_MPTCP=0), one with
#             MPTCP: while it runs, the MPTCP connection has 2 subflows
#             (ss -M: subflows:1 besides the first; ss -t: one established
#             TCP socket per path), and it runs faster than one path can
#             carry (> 1.2 × RATE); both rates and their ratio printed
#   cut1      an MPTCP copy, and path 1 (the first subflow's) cut with
#             iptables DROP on its router once both paths carry data: the
#             copy still completes and verifies, the cut dropped packets,
#             the copy was still running when cut, and neither side logs
#             an error (no WR flushed or failed)
#   cut2      the same with path 2 (the joined subflow's) cut
#   endpoint  mp_paths.sh's default second subflow, from the client's
#             `subflow` endpoint to the server's listening port: rping -V
#             (which keeps listening) ping-pongs 200 × 60000 bytes,
#             verified, over 2 subflows
#   dead      UIWARP_DEAD_PEER_MS=3000, an MPTCP copy, both paths cut: the
#             sender (uiwarp's watchdog on MPTCP_INFO's acknowledged bytes:
#             the kernel keeps no TCP_USER_TIMEOUT under MPTCP) and the
#             receiver (keepalive) each log "peer timeout" within 4 s of
#             the cut (bound + 10 % + slack), both fail, no file appears,
#             the sender gets a fatal QP event
#   fallback  an MPTCP client and a plain server, then a plain client and
#             an MPTCP server: both copies verify over plain TCP and the
#             MPTCP side says so (UIWARP_LOG=info); then with
#             net.mptcp.enabled=0 in both hosts an MPTCP client and server
#             get plain TCP sockets (warning logged) and the copy verifies
# Env: UIW_BUILD, UIW_SRC, MPT_RATE. Root, MPTCP (net.mptcp.enabled
# present), `ip mptcp`, iptables and uiwarp-wan-delay (endpoint: rping),
# else exit 77. paths, cut1, cut2 and fallback use mp_paths.sh
# --signal-port (uiwarp-replicate recv closes its listener after one
# connection, so a client endpoint's join would be reset).
set -u
MODE=${1:-paths}
UIW_SRC=${UIW_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
UIW_BUILD=${UIW_BUILD:-$UIW_SRC/build}
export UIW_BUILD
NAME=mpt$$
PATHS=("$UIW_SRC/tests/mptcp/mp_paths.sh")
TMP=$(mktemp -d "/tmp/$NAME.XXXXXX")
REP=$UIW_BUILD/bin/uiwarp-replicate
RUN=$UIW_BUILD/bin/uiwarp-run
RATE=${MPT_RATE:-200mbit}
SRV=198.51.100.82
PIDS=()

TEST_AREA=mptcp
net_down() { bash "${PATHS[@]}" down --name "$NAME"; }
# shellcheck source=../netns_lib.sh
. "$UIW_SRC/tests/netns_lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root"
[ -e /proc/sys/net/mptcp/enabled ] || skip "kernel without Multipath TCP (CONFIG_MPTCP)"
ip mptcp limits show >/dev/null 2>&1 || skip "iproute2 without ip mptcp"
command -v iptables >/dev/null || skip "iptables not installed"
[ -x "$UIW_BUILD/bin/uiwarp-wan-delay" ] || skip "uiwarp-wan-delay not built"
[ -x "$REP" ] || skip "uiwarp-replicate not built"

up() {
	MP_DELAY_SECS=300 bash "${PATHS[@]}" up --name "$NAME" --rate "$RATE" --delay1-ms 5 \
		--delay2-ms 10 "$@" || fail "mp_paths.sh up"
}
# the second subflow from the server's announced address with a port of
# its own: uiwarp-replicate recv closes its listener after one connection
up_signal() { up --signal-port 24199; }

# start_copy CLIENT_MPTCP SERVER_MPTCP MIB PORT: uiwarp-replicate recv in
# N-b and send in N-a, in the background (SEND_PID, RECV_PID)
start_copy() {
	local cm=$1 sm=$2 mib=$3 port=$4
	local src=$TMP/src$mib.bin
	[ -f "$src" ] || head -c $((mib * 1048576)) /dev/urandom >"$src"
	UIWARP_MPTCP=$sm UIWARP_LOG=info ip netns exec "$NAME-b" timeout 150 "$RUN" "$REP" recv \
		--bind $SRV --port "$port" --timeout 120 "$TMP/dst$port.bin" >"$TMP/recv$port.out" 2>&1 &
	RECV_PID=$!
	PIDS+=("$RECV_PID")
	local i
	for ((i = 0; i < 50; i++)); do
		grep -q listening "$TMP/recv$port.out" 2>/dev/null && break
		sleep 0.1
	done
	UIWARP_MPTCP=$cm UIWARP_LOG=info ip netns exec "$NAME-a" timeout 150 "$RUN" "$REP" send \
		--port "$port" --quiet --timeout 120 "$src" $SRV >"$TMP/send$port.out" 2>&1 &
	SEND_PID=$!
	PIDS+=("$SEND_PID")
}

# end_copy MIB PORT: waits for both, checks the copy; the sender's MiB/s
# in COPY_RATE (not a subshell: the copy's processes are this shell's)
end_copy() {
	local mib=$1 port=$2
	wait "$SEND_PID" || {
		cat "$TMP/send$port.out" "$TMP/recv$port.out" >&2
		fail "sender exited $?"
	}
	wait "$RECV_PID" || {
		cat "$TMP/send$port.out" "$TMP/recv$port.out" >&2
		fail "receiver exited $?"
	}
	cmp -s "$TMP/src$mib.bin" "$TMP/dst$port.bin" || fail "copy on port $port differs"
	rm -f "$TMP/dst$port.bin"
	COPY_RATE=$(grep -ho '[0-9.]* MiB/s' "$TMP/send$port.out" | head -1 | cut -d' ' -f1)
}

# no_errors PORT: neither side logged a warning or an error (a flushed or
# failed WR, a fatal QP, a peer timeout)
no_errors() {
	local port=$1
	if grep -hE ' (warn|error) |FATAL|FLUSH|flush|timeout' "$TMP/send$port.out" \
		"$TMP/recv$port.out"; then
		fail "an error was logged on port $port"
	fi
}

# subflows_seen: waits (up to 10 s) until N-a has an MPTCP connection to
# the server with one joined subflow (ss -M: subflows:1) and a TCP socket
# established on each path; 0 then, 1 if never
subflows_seen() {
	local i m p1 p2
	for ((i = 0; i < 100; i++)); do
		m=$(ip netns exec "$NAME-a" ss -MiH state established 2>/dev/null |
			grep -c 'subflows:1 ')
		p1=$(ip netns exec "$NAME-a" ss -tnH state established src 198.51.100.65 | grep -c .)
		p2=$(ip netns exec "$NAME-a" ss -tnH state established src 203.0.113.65 | grep -c .)
		if [ "$m" -ge 1 ] && [ "$p1" -ge 1 ] && [ "$p2" -ge 1 ]; then
			log "MPTCP: 1 connection with 2 subflows (198.51.100.65 on path 1," \
				"203.0.113.65 on path 2)"
			return 0
		fi
		sleep 0.1
	done
	ip netns exec "$NAME-a" ss -MiH >&2
	ip netns exec "$NAME-a" ss -tniH >&2
	return 1
}

# sent_bytes NS: bytes the router NS's tbf toward N-b has sent
sent_bytes() {
	ip netns exec "$1" tc -s qdisc show dev rb | awk '/Sent/ { print $2; exit }'
}

# cut_test PATH: see cut1 / cut2 above
cut_test() {
	local path=$1 mib=192 port=$((24110 + $1)) i b1 b2 dropped
	up_signal
	start_copy 1 1 $mib $port
	subflows_seen || fail "no second subflow"
	# both paths carry data (8 MB each past the routers)
	for ((i = 0; i < 100; i++)); do
		b1=$(sent_bytes "$NAME-r1")
		b2=$(sent_bytes "$NAME-r2")
		[ "${b1:-0}" -gt 8000000 ] && [ "${b2:-0}" -gt 8000000 ] && break
		sleep 0.1
	done
	[ "${b1:-0}" -gt 8000000 ] && [ "${b2:-0}" -gt 8000000 ] ||
		fail "the paths did not both carry data (path 1 $b1 B, path 2 $b2 B)"
	kill -0 "$SEND_PID" 2>/dev/null || fail "the copy ended before the cut"
	bash "${PATHS[@]}" cut --name "$NAME" --path "$path" || fail "cut"
	log "path $path cut (iptables DROP) with $b1 B through path 1, $b2 B through path 2"
	sleep 2
	kill -0 "$SEND_PID" 2>/dev/null || log "the copy ended within 2 s of the cut"
	end_copy $mib $port
	dropped=$(ip netns exec "$NAME-r$path" iptables -vnxL FORWARD |
		awk '/mpcut/ { print $1; exit }')
	log "path $path cut mid-copy: $mib MiB verified at $COPY_RATE MiB/s overall;" \
		"${dropped:-0} packets dropped on the cut path"
	[ "${dropped:-0}" -gt 0 ] || fail "the cut dropped nothing"
	no_errors $port
}

case $MODE in
paths)
	up_signal
	start_copy 0 0 128 24101
	end_copy 128 24101
	r_tcp=$COPY_RATE
	grep -q "stream: " "$TMP/send24101.out" && fail "a stream line with UIWARP_MPTCP=0"
	start_copy 1 1 128 24102
	subflows_seen || fail "no second subflow"
	end_copy 128 24102
	r_mp=$COPY_RATE
	grep -q "stream: Multipath TCP" "$TMP/send24102.out" || fail "the sender did not get MPTCP"
	grep -q "stream: Multipath TCP" "$TMP/recv24102.out" || fail "the receiver did not get MPTCP"
	no_errors 24102
	ratio=$(awk -v a="$r_mp" -v b="$r_tcp" 'BEGIN { printf "%.2f", a / b }')
	log "128 MiB, each path $RATE: plain TCP on path 1 $r_tcp MiB/s, MPTCP over both" \
		"$r_mp MiB/s: ${ratio}x (rough figures on a shared machine)"
	one=$(awk -v r="$RATE" 'BEGIN { n = r + 0; u = 1e6; if (r ~ /gbit/) u = 1e9;
		if (r ~ /kbit/) u = 1e3; printf "%.2f", n * u / 8 / 1048576 }')
	awk -v a="$r_mp" -v o="$one" 'BEGIN { exit !(a > 1.2 * o) }' ||
		fail "MPTCP ran at $r_mp MiB/s, not above 1.2 x one path's $one MiB/s"
	;;
cut1) cut_test 1 ;;
cut2) cut_test 2 ;;
fallback)
	up_signal
	start_copy 1 0 16 24121
	end_copy 16 24121
	grep -q "stream: plain TCP, no Multipath TCP" "$TMP/send24121.out" ||
		fail "the MPTCP client did not report the fallback"
	log "MPTCP client, plain server: plain TCP, copy verified"
	start_copy 0 1 16 24122
	end_copy 16 24122
	grep -q "stream: plain TCP, no Multipath TCP" "$TMP/recv24122.out" ||
		fail "the MPTCP server did not report the fallback"
	log "plain client, MPTCP server: plain TCP, copy verified"
	for ns in "$NAME-a" "$NAME-b"; do ip netns exec "$ns" sysctl -qw net.mptcp.enabled=0; done
	start_copy 1 1 16 24123
	end_copy 16 24123
	for f in send recv; do
		grep -q "no Multipath TCP socket" "$TMP/${f}24123.out" ||
			fail "$f: no warning with net.mptcp.enabled=0"
		grep -q "stream: plain TCP, no Multipath TCP" "$TMP/${f}24123.out" ||
			fail "$f: not reported as plain TCP"
	done
	log "net.mptcp.enabled=0: plain TCP sockets (warned), copy verified"
	;;
dead)
	# both paths die mid-copy: MPTCP keeps no TCP_USER_TIMEOUT, so the
	# sender's bound is uiwarp's watchdog (acknowledged bytes, MPTCP_INFO)
	# and the receiver's is keepalive; both within the bound + 10 %
	# (3300 ms) + 700 ms of slack for a loaded machine and the 50 ms poll
	export UIWARP_DEAD_PEER_MS=3000
	up_signal
	start_copy 1 1 192 24141
	subflows_seen || fail "no second subflow"
	sleep 1
	kill -0 "$SEND_PID" 2>/dev/null || fail "the copy ended before the cut"
	bash "${PATHS[@]}" cut --name "$NAME" --path 1 || fail "cut 1"
	bash "${PATHS[@]}" cut --name "$NAME" --path 2 || fail "cut 2"
	t0=$(date +%s%3N)
	ts="" tr=""
	for ((i = 0; i < 300; i++)); do
		now=$(date +%s%3N)
		[ -z "$ts" ] && grep -q "peer timeout" "$TMP/send24141.out" && ts=$((now - t0))
		[ -z "$tr" ] && grep -q "peer timeout" "$TMP/recv24141.out" && tr=$((now - t0))
		[ -n "$ts" ] && [ -n "$tr" ] && break
		sleep 0.05
	done
	wait "$SEND_PID" && fail "the sender succeeded across a partition"
	wait "$RECV_PID" && fail "the receiver succeeded across a partition"
	log "both paths cut: 'peer timeout' after ${ts:-never} ms (sender), ${tr:-never} ms (receiver)"
	[ -n "$ts" ] && [ "$ts" -le 4000 ] || fail "the sender's watchdog: ${ts:-never} ms"
	[ -n "$tr" ] && [ "$tr" -le 4000 ] || fail "the receiver: ${tr:-never} ms"
	[ -e "$TMP/dst24141.bin" ] && fail "a file appeared under the final name"
	grep -q "QP_FATAL\|catastrophic" "$TMP/send24141.out" || fail "the sender saw no fatal QP event"
	;;
endpoint)
	# the client's subflow endpoint (mp_paths.sh's default) joins the
	# server's listening port, which rping -s keeps open
	up
	command -v rping >/dev/null || skip "rping not installed (rdmacm-utils)"
	UIWARP_MPTCP=1 ip netns exec "$NAME-b" timeout 100 "$RUN" rping -s -a $SRV -p 24131 \
		-C 200 -S 60000 -V >"$TMP/rping_s.out" 2>&1 &
	spid=$!
	PIDS+=("$spid")
	sleep 1
	UIWARP_MPTCP=1 UIWARP_LOG=info ip netns exec "$NAME-a" timeout 100 "$RUN" rping -c \
		-a $SRV -p 24131 -C 200 -S 60000 -V >"$TMP/rping_c.out" 2>&1 &
	cpid=$!
	PIDS+=("$cpid")
	subflows_seen || fail "no second subflow from the client's endpoint"
	wait "$cpid" || { cat "$TMP/rping_c.out" >&2; fail "rping client exited $?"; }
	wait "$spid" || { cat "$TMP/rping_s.out" >&2; fail "rping server exited $?"; }
	grep -q "stream: Multipath TCP" "$TMP/rping_c.out" || fail "the client did not get MPTCP"
	log "rping -V: 200 verified 60000-byte ping-pongs over 2 subflows"
	;;
*) fail "unknown mode $MODE" ;;
esac
log PASS
