#!/bin/bash
# stat_sweep.sh BINDIR UIW_TARGET: counter segments of processes that did
# not exit() (killed) are removed by the next process that makes one;
# one kept on purpose (UIWARP_STATS_KEEP=1) stays, with its final counts
# readable, until `uiwarp-stat --clean`. uiw_target (tests/hostile) makes
# its QP before it waits for a connection (its arguments bound the wait).
set -u
stat=$1/uiwarp-stat
target=$2
rc=0
fail() {
	echo "FAIL: $*"
	rc=1
}
wait_seg() {
	for _ in $(seq 1 100); do
		[ -e "/dev/shm/uiwarp-$1" ] && return 0
		sleep 0.05
	done
	return 1
}
# 1. killed while it runs: its segment stays behind
"$target" 0 20 20000 >/dev/null 2>&1 &
k=$!
wait_seg "$k" || fail "no segment for $k"
kill -KILL "$k"
wait "$k" 2>/dev/null
# (its segment stays behind; any uiwarp process that starts now may sweep it)
# 2. kept on purpose, exits normally (no connection within 0.1 s)
UIWARP_STATS_KEEP=1 "$target" 0 1 100 >/dev/null 2>&1 &
p=$!
wait "$p"
[ -e "/dev/shm/uiwarp-$p" ] || fail "UIWARP_STATS_KEEP=1: segment of $p removed at exit"
"$stat" -j "$p" | grep -q '"exited":true,.*"qps_created":1,"qps_destroyed":1' ||
	fail "the kept segment's final count"
# 3. the next process sweeps the killed one's, not the kept one
"$target" 0 1 100 >/dev/null 2>&1
[ -e "/dev/shm/uiwarp-$k" ] && fail "the killed process's segment was not swept"
[ -e "/dev/shm/uiwarp-$p" ] || fail "the kept segment was swept"
# 4. --clean removes the kept one
"$stat" --clean
[ -e "/dev/shm/uiwarp-$p" ] && fail "--clean left the kept segment"
rm -f "/dev/shm/uiwarp-$k" "/dev/shm/uiwarp-$p"
[ $rc = 0 ] && echo PASS
exit $rc
