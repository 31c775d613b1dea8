#!/bin/sh
# rping.sh UIWARP_RUN RPING: runs the real rping (rdmacm-utils) server and
# client on 127.0.0.1 over uiwarp, 10 pings of 64 bytes, verbose; passes if
# the client printed the 10 ping data lines and both exited 0. Bounded by
# timeout(1).
set -u
run=$1
rping=$2
tmp=$(mktemp -d)
trap 'kill $spid 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../port.sh"
port=$(uiw_free_port)

timeout 40 "$run" "$rping" -s -a 127.0.0.1 -p "$port" -C 10 -v >"$tmp/server" 2>&1 &
spid=$!
# wait (at most 5 s) until the server listens
i=0
while [ $i -lt 50 ]; do
	if command -v ss >/dev/null 2>&1; then
		ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port " && break
	else
		sleep 0.5
		break
	fi
	sleep 0.1
	i=$((i + 1))
done
timeout 30 "$run" "$rping" -c -a 127.0.0.1 -p "$port" -C 10 -v -S 64 >"$tmp/client" 2>&1
crc=$?
wait $spid
src=$?
echo "--- client (exit $crc)"
cat "$tmp/client"
echo "--- server (exit $src)"
cat "$tmp/server"
n=$(grep -c "^ping data: rdma-ping-" "$tmp/client")
echo "--- client ping data lines: $n"
[ "$crc" = 0 ] && [ "$src" = 0 ] && [ "$n" = 10 ]
