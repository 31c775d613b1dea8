#!/usr/bin/env bash
# Two routed paths between two host namespaces, for Multipath TCP (RFC 8684)
# tests: one connection, a TCP subflow per path.
#
#   tests/mptcp/mp_paths.sh up [--name N] [--rate RATE] [--delay1-ms MS] [--delay2-ms MS]
#                              [--signal-port PORT]
#   tests/mptcp/mp_paths.sh cut|restore [--name N] --path 1|2
#   tests/mptcp/mp_paths.sh down [--name N]
#   tests/mptcp/mp_paths.sh show [--name N]
#
#            198.51.100.65/28 -- N-r1 -- 198.51.100.82/28
#   N-a (a1)                                              (b1) N-b
#        (a2) 203.0.113.65/28 -- N-r2 -- 203.0.113.82/28  (b2)
#
# N (default "mp", every name begins with "mp") has four namespaces: the
# hosts N-a and N-b, and a router per path, N-r1 and N-r2 (links
# 198.51.100.64/28 + .80/28 and 203.0.113.64/28 + .80/28). Only a1 <-> b1
# takes path 1: whatever is from or to a path-2 address takes path 2
# (source rules on the hosts; N-r2 routes the path-1 host addresses on).
# Multipath TCP: net.mptcp.enabled=1 in both hosts, `ip mptcp limits set
# subflow 2 add_addr_accepted 2` on both; N-b listens, N-a connects to
# 198.51.100.82 from 198.51.100.65. The second subflow, one of:
#  - default: on N-a the endpoint `ip mptcp endpoint add 203.0.113.65 dev
#    a2 subflow`; the kernel path manager opens a subflow from it to the
#    server's address and port once a connection is up, which the server's
#    listener must still take (an MP_JOIN SYN to a closed port is reset);
#  - --signal-port PORT: on N-b `ip mptcp endpoint add 203.0.113.82 dev b2
#    signal port PORT`; the server announces 203.0.113.82:PORT (ADD_ADDR),
#    its kernel listens there itself, and the client's path manager opens
#    a subflow to it (from 203.0.113.65, by the route): this one joins
#    after the application closed its listener (uiwarp-replicate recv
#    does, after its one connection).
# On each router, in both directions:
#   rate   a tbf qdisc on both egresses (e.g. 200mbit; default none),
#          buffer for 50 ms of it;
#   delay  every forwarded packet held MS ms (each direction) by
#          uiwarp-wan-delay (tests/wan/wan_delay.c) through NFQUEUE 7;
#          path 1 and path 2 may differ. Default 0: no delay program.
# cut puts `iptables -I FORWARD 1 -j DROP` (comment mpcut) on that path's
# router: a path that dies in the middle, the links stay up; restore takes
# it out. Root only. `down` kills the delay programs, deletes their logs
# (/run/uiwarp-mptcp) and the namespaces; `up` first does a `down`.
#
# Env: UIW_BUILD (default build/ beside the sources) for uiwarp-wan-delay;
# MP_DELAY_SECS bounds the delay programs' lifetime (default 3600 s).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
UIW_BUILD=${UIW_BUILD:-$ROOT/build}
NAME=mp
RATE=""
D1=0
D2=0
PATHNO=""
SIGNAL_PORT=""

usage() {
	sed -n '2,45p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

[ $# -ge 1 ] || usage
CMD=$1
shift
while [ $# -gt 0 ]; do
	case $1 in
	--name) NAME=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--delay1-ms) D1=$2; shift 2 ;;
	--delay2-ms) D2=$2; shift 2 ;;
	--path) PATHNO=$2; shift 2 ;;
	--signal-port) SIGNAL_PORT=$2; shift 2 ;;
	-h | --help) usage 0 ;;
	*) echo "mp_paths.sh: unknown option $1" >&2; usage ;;
	esac
done
case $NAME in mp*) ;; *) echo "mp_paths.sh: --name must begin with mp" >&2; exit 2 ;; esac

NA=$NAME-a
NB=$NAME-b
NR1=$NAME-r1
NR2=$NAME-r2
PIDDIR=/run/uiwarp-mptcp
mkdir -p "$PIDDIR"

down() {
	local f ns pid i
	for f in "$PIDDIR/$NAME".*.pid; do
		[ -e "$f" ] || continue
		pid=$(cat "$f")
		# the pid is timeout's (-k 3): it passes the TERM on and kills
		# the delay program 3 s later if that is still there (an ASan
		# build's exit once hung in LeakSanitizer's tracer)
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		rm -f "$f"
	done
	rm -f "$PIDDIR/$NAME".*.log
	for ns in "$NA" "$NB" "$NR1" "$NR2"; do
		ip netns del "$ns" 2>/dev/null || true
	done
}

# delay NS MS: uiwarp-wan-delay on the FORWARD chain of NS, MS ms each way
delay() {
	local ns=$1 ms=$2 log=$PIDDIR/$NAME.$1.log i
	ip netns exec "$ns" iptables -A FORWARD -j NFQUEUE --queue-num 7
	ip netns exec "$ns" timeout -k 3 "${MP_DELAY_SECS:-3600}" "$UIW_BUILD/bin/uiwarp-wan-delay" \
		-q 7 -d $((ms * 1000)) -v >"$log" 2>&1 &
	echo $! >"$PIDDIR/$NAME.$ns.pid"
	for ((i = 0; i < 50; i++)); do
		grep -q 'queue 7' "$log" 2>/dev/null && return 0
		sleep 0.1
	done
	cat "$log" >&2
	echo "mp_paths.sh: uiwarp-wan-delay did not start in $ns" >&2
	down
	exit 1
}

up() {
	[ "$(id -u)" = 0 ] || { echo "mp_paths.sh: needs root" >&2; exit 1; }
	if [ "$D1" != 0 ] || [ "$D2" != 0 ]; then
		[ -x "$UIW_BUILD/bin/uiwarp-wan-delay" ] || {
			echo "mp_paths.sh: $UIW_BUILD/bin/uiwarp-wan-delay not built" >&2
			exit 1
		}
		command -v iptables >/dev/null || { echo "mp_paths.sh: no iptables" >&2; exit 1; }
	fi
	down
	local ns l ifc
	for ns in "$NA" "$NB" "$NR1" "$NR2"; do
		ip netns add "$ns"
		ip -n "$ns" link set lo up
		ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
			net.ipv4.conf.default.rp_filter=0
	done
	ip link add a1 netns "$NA" type veth peer name ra netns "$NR1"
	ip link add b1 netns "$NB" type veth peer name rb netns "$NR1"
	ip link add a2 netns "$NA" type veth peer name ra netns "$NR2"
	ip link add b2 netns "$NB" type veth peer name rb netns "$NR2"
	ip -n "$NA" addr add 198.51.100.65/28 dev a1
	ip -n "$NR1" addr add 198.51.100.66/28 dev ra
	ip -n "$NR1" addr add 198.51.100.81/28 dev rb
	ip -n "$NB" addr add 198.51.100.82/28 dev b1
	ip -n "$NA" addr add 203.0.113.65/28 dev a2
	ip -n "$NR2" addr add 203.0.113.66/28 dev ra
	ip -n "$NR2" addr add 203.0.113.81/28 dev rb
	ip -n "$NB" addr add 203.0.113.82/28 dev b2
	for l in "$NA a1" "$NA a2" "$NB b1" "$NB b2" "$NR1 ra" "$NR1 rb" "$NR2 ra" "$NR2 rb"; do
		read -r ns ifc <<<"$l"
		ip -n "$ns" link set "$ifc" up
	done
	# Only a1 <-> b1 takes path 1: a packet from or to a path-2 address
	# takes path 2 (each host: the far network through its router, and
	# from its path-2 address always through N-r2, which routes the
	# path-1 host addresses on).
	ip -n "$NA" route add 198.51.100.80/28 via 198.51.100.66
	ip -n "$NA" route add 203.0.113.80/28 via 203.0.113.66
	ip -n "$NA" route add default via 203.0.113.66 table 102
	ip -n "$NA" rule add from 203.0.113.65 table 102
	ip -n "$NB" route add 198.51.100.64/28 via 198.51.100.81
	ip -n "$NB" route add 203.0.113.64/28 via 203.0.113.81
	ip -n "$NB" route add default via 203.0.113.81 table 102
	ip -n "$NB" rule add from 203.0.113.82 table 102
	ip -n "$NR2" route add 198.51.100.82/32 via 203.0.113.82
	ip -n "$NR2" route add 198.51.100.65/32 via 203.0.113.65
	for ns in "$NR1" "$NR2"; do
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
		if [ -n "$RATE" ]; then
			for ifc in ra rb; do
				ip netns exec "$ns" tc qdisc add dev "$ifc" root tbf rate "$RATE" \
					burst 128kb latency 50ms
			done
		fi
	done
	for ns in "$NA" "$NB"; do
		ip netns exec "$ns" sysctl -qw net.mptcp.enabled=1
		ip -n "$ns" mptcp limits set subflow 2 add_addr_accepted 2
	done
	if [ -z "$SIGNAL_PORT" ]; then
		ip -n "$NA" mptcp endpoint add 203.0.113.65 dev a2 subflow
	else
		ip -n "$NB" mptcp endpoint add 203.0.113.82 dev b2 signal port "$SIGNAL_PORT"
	fi
	[ "$D1" = 0 ] || delay "$NR1" "$D1"
	[ "$D2" = 0 ] || delay "$NR2" "$D2"
	echo "mp_paths.sh: $NA <-> $NB over path 1 (198.51.100.64/28, $NR1, ${D1} ms each way)" \
		"and path 2 (203.0.113.64/28, $NR2, ${D2} ms each way), rate ${RATE:-unlimited} each"
}

# router NS of --path
router() {
	case $PATHNO in
	1) echo "$NR1" ;;
	2) echo "$NR2" ;;
	*) echo "mp_paths.sh: --path 1 or 2" >&2; exit 2 ;;
	esac
}

cut() {
	ip netns exec "$(router)" iptables -I FORWARD 1 -m comment --comment mpcut -j DROP
}

restore() {
	local ns i
	ns=$(router)
	for ((i = 0; i < 10; i++)); do
		ip netns exec "$ns" iptables -D FORWARD -m comment --comment mpcut -j DROP \
			2>/dev/null || return 0
	done
}

show() {
	local ns
	for ns in "$NR1" "$NR2"; do
		echo "== $ns"
		ip netns exec "$ns" tc -s qdisc show 2>/dev/null || true
		ip netns exec "$ns" iptables -vnxL FORWARD 2>/dev/null || true
	done
	ip -n "$NA" mptcp endpoint show 2>/dev/null || true
	ip -n "$NA" mptcp limits show 2>/dev/null || true
}

case $CMD in
up) up ;;
down) down ;;
cut) cut ;;
restore) restore ;;
show) show ;;
*) usage ;;
esac
