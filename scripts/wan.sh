#!/usr/bin/env bash
# An emulated wide-area path between two host namespaces, through a router
# namespace that sets its rate, one-way delay and random loss.
#
#   scripts/wan.sh up [--name N] [--rate RATE] [--delay-ms MS] [--loss P] [--mtu M] [--gso]
#   scripts/wan.sh down [--name N]
#   scripts/wan.sh show [--name N]
#
#   N-a  198.51.100.1/24 --- 198.51.100.254  N-r  203.0.113.254 --- 203.0.113.1/24  N-b
#
# N defaults to "uiwan". The router forwards between its two veths, and on
# each one, in both directions:
#   rate   a tbf qdisc on each router egress (e.g. 1gbit, 200mbit; default
#          none), buffer for 50 ms of it;
#   delay  every forwarded packet goes through NFQUEUE to uiwarp-wan-delay
#          (tests/wan/wan_delay.c, built as build/bin/uiwarp-wan-delay),
#          which holds it MS ms (each direction: RTT = 2 × MS);
#   loss   iptables `-m statistic --mode random --probability P -j DROP` in
#          the router's FORWARD chain (each direction: P of the packets).
#          Segmentation offload (TSO/GSO) is off on every veth of the path,
#          so each packet the router sees is one MTU-sized packet as on a
#          wire: with it on, a sender's 64 KiB GSO packet crossed the router
#          as one and was dropped or kept whole, and a connection that
#          happened to send large GSO packets saw ~40x fewer loss events per
#          byte than one that sent small ones (`--gso` keeps it on).
# This kernel has no netem qdisc, hence NFQUEUE. What it holds on a 2-vCPU
# machine: docs/wan.md. Root only. `down` kills the delay programs and
# deletes the namespaces; `up` first does a `down`.
#
# Env: UIW_BUILD (default build/ beside this script) for uiwarp-wan-delay;
# WAN_DELAY_SECS bounds the delay programs' lifetime (default 7200 s).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UIW_BUILD=${UIW_BUILD:-$ROOT/build}
NAME=uiwan
RATE=""
DELAY_MS=0
LOSS=0
MTU=1500
GSO=off

usage() {
	sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

[ $# -ge 1 ] || usage
CMD=$1
shift
while [ $# -gt 0 ]; do
	case $1 in
	--name) NAME=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--delay-ms) DELAY_MS=$2; shift 2 ;;
	--loss) LOSS=$2; shift 2 ;;
	--mtu) MTU=$2; shift 2 ;;
	--gso) GSO=on; shift ;;
	-h | --help) usage 0 ;;
	*) echo "wan.sh: unknown option $1" >&2; usage ;;
	esac
done

NA=$NAME-a
NR=$NAME-r
NB=$NAME-b
PIDDIR=/run/uiwarp-wan
mkdir -p "$PIDDIR"

down() {
	local f
	for f in "$PIDDIR/$NAME".*.pid; do
		[ -e "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	for ns in "$NA" "$NR" "$NB"; do
		ip netns del "$ns" 2>/dev/null || true
	done
}

up() {
	[ "$(id -u)" = 0 ] || { echo "wan.sh: needs root" >&2; exit 1; }
	command -v iptables >/dev/null || { echo "wan.sh: iptables not installed" >&2; exit 1; }
	local delay_bin=$UIW_BUILD/bin/uiwarp-wan-delay
	if [ "$DELAY_MS" != 0 ] && [ ! -x "$delay_bin" ]; then
		echo "wan.sh: $delay_bin not built (libnetfilter-queue-dev)" >&2
		exit 1
	fi
	down
	ip netns add "$NA"
	ip netns add "$NR"
	ip netns add "$NB"
	for ns in "$NA" "$NR" "$NB"; do ip -n "$ns" link set lo up; done
	# interface names are per namespace: short fixed ones
	ip link add wa netns "$NA" type veth peer name ra netns "$NR"
	ip link add wb netns "$NB" type veth peer name rb netns "$NR"
	ip -n "$NA" addr add 198.51.100.1/24 dev wa
	ip -n "$NR" addr add 198.51.100.254/24 dev ra
	ip -n "$NR" addr add 203.0.113.254/24 dev rb
	ip -n "$NB" addr add 203.0.113.1/24 dev wb
	for l in "$NA wa" "$NR ra" "$NR rb" "$NB wb"; do
		read -r ns ifc <<<"$l"
		ip -n "$ns" link set "$ifc" mtu "$MTU" up
		if [ "$GSO" = off ]; then
			ip netns exec "$ns" ethtool -K "$ifc" tso off gso off >/dev/null 2>&1 ||
				{ echo "wan.sh: ethtool -K $ifc tso off gso off failed (ethtool installed?)" >&2; down; exit 1; }
		fi
	done
	ip -n "$NA" route add default via 198.51.100.254
	ip -n "$NB" route add default via 203.0.113.254
	ip netns exec "$NR" sysctl -qw net.ipv4.ip_forward=1
	if [ -n "$RATE" ]; then
		# buffer: 50 ms at the rate (at least 64 KiB), burst one GSO packet
		for ifc in ra rb; do
			ip netns exec "$NR" tc qdisc add dev "$ifc" root tbf rate "$RATE" \
				burst 128kb latency 50ms
		done
	fi
	if [ "$LOSS" != 0 ]; then
		ip netns exec "$NR" iptables -A FORWARD -m statistic --mode random \
			--probability "$LOSS" -j DROP
	fi
	if [ "$DELAY_MS" != 0 ]; then
		ip netns exec "$NR" iptables -A FORWARD -j NFQUEUE --queue-num 7
		ip netns exec "$NR" timeout -k 3 "${WAN_DELAY_SECS:-7200}" "$delay_bin" -q 7 \
			-d $((DELAY_MS * 1000)) -v >"$PIDDIR/$NAME.delay.log" 2>&1 &
		echo $! >"$PIDDIR/$NAME.delay.pid"
		local i
		for ((i = 0; i < 50; i++)); do
			grep -q 'queue 7' "$PIDDIR/$NAME.delay.log" 2>/dev/null && break
			sleep 0.1
		done
		grep -q 'queue 7' "$PIDDIR/$NAME.delay.log" || {
			cat "$PIDDIR/$NAME.delay.log" >&2
			echo "wan.sh: uiwarp-wan-delay did not start" >&2
			down
			exit 1
		}
	fi
	echo "wan.sh: $NA 198.51.100.1 <-> $NR <-> $NB 203.0.113.1: rate ${RATE:-unlimited}," \
		"delay ${DELAY_MS} ms each way, loss ${LOSS} per packet, MTU $MTU, segmentation offload $GSO"
}

show() {
	ip netns exec "$NR" tc -s qdisc show 2>/dev/null || true
	ip netns exec "$NR" iptables -vnL FORWARD 2>/dev/null || true
	cat "$PIDDIR/$NAME.delay.log" 2>/dev/null || true
}

case $CMD in
up) up ;;
down) down ;;
show) show ;;
*) usage ;;
esac
