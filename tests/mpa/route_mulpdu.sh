#!/bin/sh
# FPDU sizes on a real path, checked on the wire. Two network namespaces
# joined by a veth (link MTU 1500), TCP timestamps off, one segment per
# packet in the capture (gso_max_segs 1); two uiwarp endpoints
# (route_mulpdu_ep) exchange a 64 KiB RDMA Write and an 8 KiB Send each way
# while tcpdump records the veth. Checks: route_mulpdu_check.py (its own
# stream walk of the capture) and, for the large-FPDU runs,
# tests/e2e/tshark_check.py.
#
#   route_mulpdu.sh EP CHECKER route   the route-bounded MULPDU (RFC 5044
#       §4.1, §6): routes toward the other end with `mtu lock 1200`, so the
#       kernel's MSS is 1160 while a segment on the path carries at most
#       1200 - 20 - 20 - 12 = 1148 bytes when timestamps are in use: every
#       FPDU must be at most 1148 bytes (stream/tcp.c:tcp_emss bounds the
#       EMSS by the route's path MTU from rtnetlink), no segment exceeds the
#       locked MTU, each end's EMSS (UIWARP_DEBUG) is within the bound. Large
#       FPDUs off on both ends (the hardware profile).
#   route_mulpdu.sh EP CHECKER large   the large-FPDU negotiation
#       (mpa/mpa_wire.h, siw's bit 0x08), three runs: both ends announce it
#       -> FPDUs above one segment both ways (decoded by tshark); only the
#       client announces it -> MSS-sized FPDUs both ways (the server never
#       sends large ones, and the client does not either, the server did
#       not announce it); neither -> MSS-sized both ways.
#   route_mulpdu.sh EP CHECKER segments   whole segments (rdmap/tx.c
#       may_hold): the client streams 128 Sends of 64 KiB in large FPDUs,
#       16 outstanding (route_mulpdu_ep ... stream), and says how many
#       sendmsg calls (pushes) carried them; the server takes every message
#       in, then checks every byte. Without autocorking a push that ends
#       off a segment boundary leaves a short segment on the wire, so at
#       most half of the pushes may have left one (UIW_SEGMENTS_SHORT_PCT,
#       default 50). Measured on an Intel Xeon host: 19-32 % with the
#       feature (Release and ASan), 60-83 % with pushes ending whole.
# Needs root (exit 77 otherwise).
set -u
EP=$1
CHECK=$2
MODE=${3:-route}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tcpdump >/dev/null; then
	echo "SKIP: needs root, ip and tcpdump"
	exit 77
fi
T=$(mktemp -d /tmp/uiw-mulpdu.XXXXXX) || exit 1
NA=uiwmulpduA$$
NB=uiwmulpduB$$
VA=uiwmA$$
VB=uiwmB$$
A=203.0.113.1
B=203.0.113.2
TD=
cleanup() {
	[ -n "$TD" ] && kill "$TD" 2>/dev/null
	ip netns del "$NA" 2>/dev/null
	ip netns del "$NB" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
set -e
ip netns add "$NA"
ip netns add "$NB"
# created inside the namespaces: nothing appears in (or can be left in) the
# host's namespace
ip link add "$VA" netns "$NA" type veth peer name "$VB" netns "$NB"
for n in "$NA:$VA:$A:$B" "$NB:$VB:$B:$A"; do
	ns=${n%%:*}; r=${n#*:}; dev=${r%%:*}; r=${r#*:}; me=${r%%:*}; peer=${r#*:}
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "$dev" mtu 1500 up
	ip -n "$ns" addr add "$me/32" dev "$dev"
	if [ "$MODE" = route ]; then
		ip -n "$ns" route add "$peer/32" dev "$dev" mtu lock 1200
	else
		ip -n "$ns" route add "$peer/32" dev "$dev"
	fi
	ip netns exec "$ns" sysctl -qw net.ipv4.tcp_timestamps=0
	# segments: no autocorking, so that a push ending short shows as a short
	# segment whatever the timing (a corked tail may otherwise be joined by
	# the next push: 26-53 short segments without the feature on one host)
	[ "$MODE" = segments ] && ip netns exec "$ns" sysctl -qw net.ipv4.tcp_autocorking=0
	# the capture must show the segments as they go on the wire: one
	# segment per packet (no GSO super-packets; veth does no GRO by default)
	ip -n "$ns" link set "$dev" gso_max_segs 1
done
set +e

# pair NAME CLIENT_LARGE SERVER_LARGE : one exchange, captured in $T/NAME.pcap
pair() {
	name=$1
	# -B: a 16 MiB capture buffer (the default 2 MiB dropped ~300 of the
	# segments test's 2 900 packets under ASan on a fast host)
	ip netns exec "$NA" timeout 30 tcpdump -i "$VA" -B 16384 -s 0 -U -n -w "$T/$name.pcap" tcp port 7471 \
		>"$T/$name.td" 2>&1 &
	TD=$!
	for i in $(seq 1 50); do
		grep -q "listening on" "$T/$name.td" && break
		sleep 0.1
	done
	UIWARP_MPA_LARGE_FPDU=$3 UIWARP_DEBUG=1 ip netns exec "$NB" timeout 30 "$EP" server $B 7471 $EPMODE \
		>"$T/$name.b.out" 2>"$T/$name.b.err" &
	SB=$!
	sleep 0.3
	UIWARP_MPA_LARGE_FPDU=$2 UIWARP_DEBUG=1 ip netns exec "$NA" timeout 30 "$EP" client $B 7471 $EPMODE \
		>"$T/$name.a.out" 2>"$T/$name.a.err"
	RA=$?
	wait $SB
	RB=$?
	sleep 0.5
	kill "$TD" 2>/dev/null
	wait "$TD" 2>/dev/null
	TD=
	echo "--- $name: client (large $2, rc $RA)"
	cat "$T/$name.a.out" "$T/$name.a.err"
	echo "--- $name: server (large $3, rc $RB)"
	cat "$T/$name.b.out" "$T/$name.b.err"
	if [ $RA != 0 ] || [ $RB != 0 ]; then
		echo "FAIL: an endpoint failed"
		exit 1
	fi
}

EPMODE=
if [ "$MODE" = segments ]; then
	EPMODE=stream
	pair segments 1 1
	# payload lengths of the client's segments (one per packet: gso_max_segs 1)
	tcpdump -nn -r "$T/segments.pcap" "src host $A and tcp" 2>/dev/null |
		sed -n 's/.* length \([0-9]*\).*/\1/p' >"$T/lens"
	full=$(sort -n "$T/lens" | tail -1)
	data=$(awk '$1 > 0' "$T/lens" | wc -l)
	short=$(awk -v f="$full" '$1 > 0 && $1 < f' "$T/lens" | wc -l)
	# packets the capture lost (tcpdump's count at exit) are neither full
	# nor short: they count toward the total only
	dropped=$(sed -n 's/^\([0-9]*\) packets\{0,1\} dropped by kernel.*/\1/p' "$T/segments.td" | head -1)
	dropped=${dropped:-0}
	pushes=$(sed -n 's/^PUSHES \([0-9]*\)$/\1/p' "$T/segments.a.out")
	pct=${UIW_SEGMENTS_SHORT_PCT:-50}
	echo "client data segments: $data, full ($full bytes): $((data - short)), short: $short; not captured: $dropped; pushes: ${pushes:-?}"
	if [ -z "$pushes" ] || [ "$pushes" -lt 1 ]; then
		echo "FAIL: the client did not say how many pushes it made"
		exit 1
	fi
	if [ $((data + dropped)) -lt 5740 ] || [ $((100 * short)) -gt $((pct * pushes)) ]; then
		echo "FAIL: want >= 5740 data segments (128 x 64 KiB) and short ones after at most $pct % of the pushes"
		exit 1
	fi
	echo PASS
	exit 0
fi
if [ "$MODE" = route ]; then
	pair route 0 0
	python3 "$CHECK" "$T/route.pcap" 1200 "$T/route.a.err" "$T/route.b.err" || exit 1
	exit 0
fi
pair both 1 1
python3 "$CHECK" "$T/both.pcap" 1500 --expect $A=large --expect $B=large || exit 1
python3 "$HERE/../e2e/tshark_check.py" "$T/both.pcap" 7471 --two-pass --min-fpdus 6 \
	--opcodes 0,3 --large-fpdu on || exit 1
pair client_only 1 0
python3 "$CHECK" "$T/client_only.pcap" 1500 --expect $A=mss --expect $B=mss || exit 1
pair neither 0 0
python3 "$CHECK" "$T/neither.pcap" 1500 --expect $A=mss --expect $B=mss || exit 1
echo PASS
