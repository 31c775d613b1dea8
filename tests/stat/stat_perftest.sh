#!/bin/bash
# stat_perftest.sh BINDIR [MODE]: the live counters against what perftest
# reports. ib_write_bw (rdma_cm, -n ITERS -s SIZE) runs over uiwarp on
# loopback (MODE lo, default) or between two namespaces joined by a veth
# pair (MODE ns: 198.51.100.1/.2, root, else skipped with 77); while it
# runs, uiwarp-stat -w -j watches both processes; check_stat.py then checks
# the samples: counters seen while the transfer ran, growing, with TCP_INFO
# of the data QP's socket; the final counts (read after each process
# exited) add up: the client's completed send bytes are perftest's
# #bytes x #iterations plus the server's received control bytes, every
# FPDU and stream byte sent was received, and the framing overhead per FPDU
# is within MPA + DDP header bounds. Also: each process's segment is gone
# after it exits, and UIWARP_STATS=0 makes none. Bounded: every wait has a
# timeout; namespaces are named uiws-* and deleted on exit.
set -u
bindir=$1
mode=${2:-lo}
here=$(cd "$(dirname "$0")" && pwd)
run=$bindir/uiwarp-run
stat=$bindir/uiwarp-stat
command -v ib_write_bw >/dev/null || {
	echo "SKIP: ib_write_bw (perftest) is not installed"
	exit 77
}
T=$(mktemp -d /tmp/uiws.XXXXXX)
NA=uiws-a-$$
NB=uiws-b-$$
cleanup() {
	for p in $(jobs -p); do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$mode" = ns ]; then
		ip netns del "$NA" 2>/dev/null
		ip netns del "$NB" 2>/dev/null
	fi
	rm -rf "$T"
}
trap cleanup EXIT
ITERS=20000
SIZE=65536
. "$here/../port.sh"
PORT=$(uiw_free_port)
srv=(env)
cli=(env)
addr=127.0.0.1
if [ "$mode" = ns ]; then
	[ "$(id -u)" = 0 ] || {
		echo "SKIP: namespaces need root"
		exit 77
	}
	ip netns add "$NA" && ip netns add "$NB" || exit 1
	ip link add uiws-a netns "$NA" type veth peer name uiws-b netns "$NB" || exit 1
	ip -n "$NA" addr add 198.51.100.2/24 dev uiws-a
	ip -n "$NB" addr add 198.51.100.1/24 dev uiws-b
	for n in "$NA" "$NB"; do
		ip -n "$n" link set lo up
	done
	ip -n "$NA" link set uiws-a up
	ip -n "$NB" link set uiws-b up
	srv=(ip netns exec "$NB")
	cli=(ip netns exec "$NA")
	addr=198.51.100.1
fi

# wait_seg PID: until /dev/shm/uiwarp-PID exists (bounded: 10 s)
wait_seg() {
	for _ in $(seq 1 200); do
		[ -e "/dev/shm/uiwarp-$1" ] && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

"${srv[@]}" timeout 60 "$run" ib_write_bw -R -F -p "$PORT" -n "$ITERS" -s "$SIZE" \
	>"$T/server.out" 2>&1 &
spid=$!
sleep 0.3
"${cli[@]}" timeout 60 "$run" ib_write_bw -R -F -p "$PORT" -n "$ITERS" -s "$SIZE" "$addr" \
	>"$T/client.out" 2>&1 &
cpid=$!
prog_pid() { # the ib_write_bw that timeout (PID $1) runs: its child
	local p
	for _ in $(seq 1 100); do
		p=$(pgrep -n -P "$1" ib_write_bw 2>/dev/null)
		[ -n "$p" ] && echo "$p" && return 0
		sleep 0.05
	done
	return 1
}
sp=$(prog_pid "$spid") || {
	echo "FAIL: no server process"
	exit 1
}
cp=$(prog_pid "$cpid") || {
	echo "FAIL: no client process"
	exit 1
}
echo "server pid $sp, client pid $cp"
wait_seg "$sp" || echo "no segment for the server (yet)"
wait_seg "$cp" || echo "no segment for the client (yet)"
# -w: samples every 0.1 s until the process exits; the last is its final count
"${srv[@]}" timeout 60 "$stat" -w -i 0.1 -j "$sp" >"$T/server.json" 2>"$T/server.stat.err" &
w1=$!
"${cli[@]}" timeout 60 "$stat" -w -i 0.1 -j "$cp" >"$T/client.json" 2>"$T/client.stat.err" &
w2=$!
wait "$cpid"
crc=$?
wait "$spid"
src=$?
wait "$w1" "$w2"
echo "--- client output"
cat "$T/client.out"
echo "--- server output (tail)"
tail -5 "$T/server.out"
cat "$T/server.stat.err" "$T/client.stat.err"
if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
	echo "FAIL: ib_write_bw exited with client $crc server $src"
	exit 1
fi
rc=0
python3 "$here/check_stat.py" perftest "$T/client.out" "$T/client.json" "$T/server.json" || rc=1
for p in "$sp" "$cp"; do
	if [ -e "/dev/shm/uiwarp-$p" ]; then
		echo "FAIL: /dev/shm/uiwarp-$p is still there after the process exited"
		rc=1
	fi
done

# UIWARP_STATS=0: no segment (rping, a short run)
if command -v rping >/dev/null; then
	P2=$((PORT + 1))
	"${srv[@]}" env UIWARP_STATS=0 timeout 20 "$run" rping -s -a "$addr" -p "$P2" -C 200 \
		>"$T/rs.out" 2>&1 &
	rs=$!
	sleep 0.3
	"${cli[@]}" env UIWARP_STATS=0 timeout 20 "$run" rping -c -a "$addr" -p "$P2" -C 200 \
		>"$T/rc.out" 2>&1 &
	rcpid=$!
	seen=0
	for _ in $(seq 1 20); do
		for p in $(pgrep -f "rping -[sc] -a $addr -p $P2"); do
			[ -e "/dev/shm/uiwarp-$p" ] && seen=1
		done
		sleep 0.05
	done
	wait "$rcpid" "$rs"
	if [ "$seen" = 1 ]; then
		echo "FAIL: UIWARP_STATS=0 made a segment"
		rc=1
	else
		echo "ok: UIWARP_STATS=0 made no segment"
	fi
fi
[ "$rc" = 0 ] && echo "PASS" || echo "FAIL"
exit $rc
