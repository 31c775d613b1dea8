#!/bin/bash
# stat_terminate.sh BINDIR HOSTILE_DIR TARGET KIND: a hostile_test.py case
# (tests/hostile) against a uiw_target whose counters outlive it
# (stat_target.sh); then uiwarp-stat reads them and check_stat.py checks:
# KIND crc (case bad_crc: one CRC error, one Terminate sent, LLP/0) or
# peer (case peer_terminate: one Terminate received). Bounded by the
# case's own timeouts and timeout(1).
set -u
bindir=$1
hdir=$2
target=$3
kind=$4
here=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/uiws-t.XXXXXX)
trap 'rm -rf "$T"' EXIT
case "$kind" in
crc) case_name=bad_crc ;;
peer) case_name=peer_terminate ;;
*) exit 2 ;;
esac
UIW_TARGET=$target UIW_PID_FILE=$T/pid \
	timeout 120 python3 "$hdir/hostile_test.py" "$case_name" --target "$here/stat_target.sh" ||
	{
		echo "FAIL: hostile case $case_name"
		exit 1
	}
pid=$(cat "$T/pid")
# the target has exited; its segment was kept (UIWARP_STATS_KEEP=1)
"$bindir/uiwarp-stat" -j "$pid" >"$T/stat.json"
rm -f "/dev/shm/uiwarp-$pid"
python3 "$here/check_stat.py" terminate "$kind" "$T/stat.json"
