#!/bin/sh
# The route-bounded MULPDU (RFC 5044 §6: MULPDU from the path's EMSS, every
# FPDU in one TCP segment; stream/tcp.c:tcp_emss bounds the EMSS by the
# route's path MTU from rtnetlink). Two network namespaces joined by a veth
# (link MTU 1500), routes toward the other end with `mtu lock 1200`, TCP
# timestamps off (so the kernel's MSS is 1160 while a segment on the path
# carries at most 1200 - 20 - 20 - 12 = 1148 bytes when timestamps are in
# use: the bound is the stricter rule); two uiwarp endpoints
# (route_mulpdu_ep) exchange RDMA Writes and Sends while tcpdump records
# the veth. Checks (route_mulpdu_check.py): every FPDU on the wire is at
# most 1148 bytes (one segment of the path), no segment exceeds the locked
# MTU, and each end's EMSS (UIWARP_DEBUG) is within the path bound 1148
# with the route's MTU seen. Without the route bound the EMSS would be
# TCP_MAXSEG (1160) and FPDUs of 1160 bytes would fail the check.
# Needs root (exit 77 otherwise). Usage: route_mulpdu.sh EP CHECKER
set -u
EP=$1
CHECK=$2
MTU=1200
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tcpdump >/dev/null; then
	echo "SKIP: needs root, ip and tcpdump"
	exit 77
fi
T=$(mktemp -d /tmp/uiw-mulpdu.XXXXXX) || exit 1
NA=uiwmulpduA$$
NB=uiwmulpduB$$
VA=uiwmA$$
VB=uiwmB$$
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
for n in "$NA:$VA:203.0.113.1:203.0.113.2" "$NB:$VB:203.0.113.2:203.0.113.1"; do
	ns=${n%%:*}; r=${n#*:}; dev=${r%%:*}; r=${r#*:}; me=${r%%:*}; peer=${r#*:}
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "$dev" mtu 1500 up
	ip -n "$ns" addr add "$me/32" dev "$dev"
	ip -n "$ns" route add "$peer/32" dev "$dev" mtu lock $MTU
	ip netns exec "$ns" sysctl -qw net.ipv4.tcp_timestamps=0
	# the capture must show the segments as they go on the wire: one
	# segment per packet (no GSO super-packets; veth does no GRO by default)
	ip -n "$ns" link set "$dev" gso_max_segs 1
done
set +e
ip netns exec "$NA" timeout 30 tcpdump -i "$VA" -s 0 -U -n -w "$T/cap.pcap" tcp port 7471 \
	>"$T/td.out" 2>&1 &
TD=$!
for i in $(seq 1 50); do
	grep -q "listening on" "$T/td.out" && break
	sleep 0.1
done
# large FPDUs off (UIWARP_MPA_LARGE_FPDU=0): the hardware profile, where
# every FPDU must fit one segment
export UIWARP_MPA_LARGE_FPDU=0
UIWARP_DEBUG=1 ip netns exec "$NB" timeout 30 "$EP" server 203.0.113.2 7471 >"$T/b.out" 2>"$T/b.err" &
SB=$!
sleep 0.3
UIWARP_DEBUG=1 ip netns exec "$NA" timeout 30 "$EP" client 203.0.113.2 7471 >"$T/a.out" 2>"$T/a.err"
RA=$?
wait $SB
RB=$?
sleep 0.5
kill "$TD" 2>/dev/null
wait "$TD" 2>/dev/null
TD=
echo "--- client (rc $RA)"; cat "$T/a.out" "$T/a.err"
echo "--- server (rc $RB)"; cat "$T/b.out" "$T/b.err"
if [ $RA != 0 ] || [ $RB != 0 ]; then
	echo "FAIL: an endpoint failed"
	exit 1
fi
python3 "$CHECK" "$T/cap.pcap" $MTU "$T/a.err" "$T/b.err"
