#!/usr/bin/env bash
# The dead-peer bound (UIWARP_DEAD_PEER_MS): a transfer between two
# namespaces loses its path mid-way and both ends must notice within the
# bound, with nothing left hanging. Modes:
#   oneway     the client's namespace drops every packet it receives
#              (iptables INPUT DROP): the sender's data is never
#              acknowledged (TCP_USER_TIMEOUT)
#   partition  the client's namespace drops everything both ways: each end
#              must find out by itself (the receiver through keepalive)
#   linkdown   the client's veth goes down, and comes back up after the
#              bound: the connection stays ended
#   replicate  uiwarp-replicate over a 200 Mbit/s path (tbf), partitioned
#              mid-copy: both ends exit with an error, no file in place
# Each end runs with UIWARP_DEAD_PEER_MS=3000 and UIWARP_LOG=info; the test
# wants every end out within LIMIT (12) s of the fault, a non-zero exit, and
# "peer timeout: no answer within the dead-peer bound" in the log of each
# end that had to find out by itself. Without the bound the
# kernel would retransmit for about 15 minutes. Env: UIW_BUILD.
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
MODE=${1:-oneway}
e2e_init "dp${MODE:0:4}"
uiw_need_run
command -v iptables >/dev/null || e2e_skip "iptables not installed"
command -v ib_write_bw >/dev/null || e2e_skip "perftest not installed"
LIMIT=12
export UIWARP_DEAD_PEER_MS=3000 UIWARP_LOG=info

e2e_ns_pair 198.51.100
PORT=$(e2e_port 3)

# fault: cut the path in NS_B the way MODE says
fault() {
	case $MODE in
	oneway) ip netns exec "$NS_B" iptables -A INPUT -j DROP ;;
	partition | replicate)
		ip netns exec "$NS_B" iptables -A INPUT -j DROP
		ip netns exec "$NS_B" iptables -A OUTPUT -j DROP
		;;
	linkdown) ip -n "$NS_B" link set "$IF_B" down ;;
	esac
}

# ms_of_day HH:MM:SS.mmm -> milliseconds since midnight
ms_of_day() {
	awk -F'[:.]' '{ printf "%d", (($1 * 60 + $2) * 60 + $3) * 1000 + $4 }' <<<"$1"
}

# check_log FILE WHO: FILE says the connection ended on the bound (the
# line logged when the engine decides, before it flushes: the FATAL and
# DISCONNECTED lines come after the flush, and perftest may exit on its
# flushed WC first), and when: the time from the fault is printed against
# issue 14's goal, the bound + 10 % (3300 ms; measured 2094-3254 ms in
# 16 ends on a quiet machine), and must stay within that + 400 ms of
# scheduling slack (CI runs this beside other work; the log's clock is the
# wall clock, as T0_MS)
check_log() {
	local line at d goal=$((UIWARP_DEAD_PEER_MS * 11 / 10)) max=$((UIWARP_DEAD_PEER_MS * 11 / 10 + 400))
	line=$(grep -m1 'peer timeout: no answer within the dead-peer bound' "$1") || {
		tail -n 20 "$1"
		e2e_fail "$2: no 'peer timeout' in its log"
	}
	at=$(sed -n 's/^uiwarp\[[0-9]*\] \([0-9:.]*\) .*/\1/p' <<<"$line")
	[ -n "$at" ] || e2e_fail "$2: no time in '$line'"
	d=$(($(ms_of_day "$at") - T0_MS))
	[ "$d" -lt 0 ] && d=$((d + 86400000))
	e2e_log "$2: peer timeout $d ms after the fault (bound $UIWARP_DEAD_PEER_MS ms, + 10 %: $goal;" \
		"$([ "$d" -le "$goal" ] && echo within || echo PAST) the goal)"
	[ "$d" -le "$max" ] || e2e_fail "$2: the dead peer was reported $d ms after the fault, past $max ms"
}

SRV_ERR=$E2E_TMP/server.err
CLI_ERR=$E2E_TMP/client.err
if [ "$MODE" = replicate ]; then
	REP=$UIW_BUILD/bin/uiwarp-replicate
	[ -x "$REP" ] || e2e_skip "$REP not built"
	# 200 Mbit/s each way: 256 MiB take ~11 s, so the copy is mid-way at 2 s
	for side in "$NS_A $IF_A" "$NS_B $IF_B"; do
		read -r ns ifc <<<"$side"
		ip netns exec "$ns" tc qdisc add dev "$ifc" root tbf rate 200mbit burst 64kb latency 50ms ||
			e2e_fail "tc tbf"
	done
	SRC=$E2E_TMP/src.bin
	DST=$E2E_TMP/dst.bin
	E2E_BIG_FILES+=("$SRC" "$DST" "$DST.part")
	head -c $((256 * 1048576)) /dev/urandom >"$SRC" || e2e_fail "cannot write $SRC"
	e2e_bg SRV ip netns exec "$NS_A" timeout 120 "${UIW_RUN[@]}" "$REP" recv --bind "$ADDR_A" \
		--port "$PORT" --timeout 60 "$DST" >"$E2E_TMP/server.out" 2>"$SRV_ERR"
	uiw_wait_listen "$NS_A" "$PORT" 20 "$SRV" || e2e_fail "receiver did not listen"
	e2e_bg CLI ip netns exec "$NS_B" timeout 120 "${UIW_RUN[@]}" "$REP" send --port "$PORT" \
		--quiet --timeout 60 "$SRC" "$ADDR_A" >"$E2E_TMP/client.out" 2>"$CLI_ERR"
else
	e2e_bg SRV ip netns exec "$NS_A" timeout 120 "${UIW_RUN[@]}" ib_write_bw -R -p "$PORT" \
		-D 60 -s 65536 >"$E2E_TMP/server.out" 2>"$SRV_ERR"
	uiw_wait_listen "$NS_A" "$PORT" 20 "$SRV" || e2e_fail "ib_write_bw server did not listen"
	e2e_bg CLI ip netns exec "$NS_B" timeout 120 "${UIW_RUN[@]}" ib_write_bw -R -p "$PORT" \
		-D 60 -s 65536 "$ADDR_A" >"$E2E_TMP/client.out" 2>"$CLI_ERR"
fi
# the transfer runs: the data QP (perftest's second, the tool's only one)
# is established and moving bytes
DATA_QP=2
[ "$MODE" = replicate ] && DATA_QP=1
e2e_wait_for "$CLI_ERR" "qp=$DATA_QP .*established" 20 || {
	tail -n 20 "$CLI_ERR" "$SRV_ERR"
	e2e_fail "no data connection"
}
sleep 2
kill -0 "$CLI" 2>/dev/null || e2e_fail "the client ended before the fault"
e2e_log "fault: $MODE"
t0=$(date +%s%N)
T0_MS=$(ms_of_day "$(date +%H:%M:%S.%3N)")
fault
e2e_wait_pid "$CLI" "$LIMIT"
CLI_RC=$?
e2e_wait_pid "$SRV" $((LIMIT - ($(date +%s%N) - t0) / 1000000000))
SRV_RC=$?
secs=$((($(date +%s%N) - t0) / 1000000))
e2e_log "client exited $CLI_RC, server $SRV_RC, both within $((secs / 1000)).$((secs % 1000 / 100)) s of the fault"
[ "$MODE" = linkdown ] && ip -n "$NS_B" link set "$IF_B" up
[ "$CLI_RC" != 124 ] || {
	tail -n 20 "$CLI_ERR"
	e2e_fail "the client still ran $LIMIT s after the fault"
}
[ "$SRV_RC" != 124 ] || {
	tail -n 20 "$SRV_ERR"
	e2e_fail "the server still ran $LIMIT s after the fault"
}
[ "$CLI_RC" != 0 ] || e2e_fail "the client exited 0 after losing its peer"
[ "$SRV_RC" != 0 ] || e2e_fail "the server exited 0 after losing its peer"
# the client (the sender) always finds out by itself; the server too when
# nothing reaches it from the client any more
check_log "$CLI_ERR" client
[ "$MODE" = oneway ] || check_log "$SRV_ERR" server
if [ "$MODE" = replicate ]; then
	[ ! -e "$DST" ] || e2e_fail "$DST was put in place"
	# the QP's IBV_EVENT_QP_FATAL, as the tool reports its async events
	for f in "$CLI_ERR" "$SRV_ERR"; do
		grep -q 'async event: local work queue catastrophic error' "$f" || {
			tail -n 20 "$f"
			e2e_fail "no IBV_EVENT_QP_FATAL in $f"
		}
	done
	e2e_log "both ends got IBV_EVENT_QP_FATAL"
fi
e2e_log "PASS ($MODE)"
