#!/bin/bash
# log_rping.sh BINDIR: UIWARP_LOG (util/log.h) on a real connection. rping
# over uiwarp on loopback: with UIWARP_LOG=info each side logs
# "uiwarp[PID] HH:MM:SS.mmm info qp=N LOCAL->PEER established (...)" and
# "disconnected (graceful)" with the other side's 4-tuple mirrored; unset,
# nothing; UIWARP_DEBUG=1 is debug (the EMSS and MULPDU lines); a refused
# connect logs "connect failed at TCP connect" at warn. Bounded (timeout).
set -u
run=$1/uiwarp-run
command -v rping >/dev/null || {
	echo "SKIP: rping (rdmacm-utils) is not installed"
	exit 77
}
T=$(mktemp -d /tmp/uiwl.XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/../port.sh"
PORT=$(uiw_free_port)
rc=0
fail() {
	echo "FAIL: $*"
	rc=1
}
pair() { # pair TAG ENV...: one rping pair; stderr in $T/TAG.{s,c}
	local tag=$1
	shift
	env "$@" timeout 20 "$run" rping -s -a 127.0.0.1 -p "$PORT" -C 20 >/dev/null 2>"$T/$tag.s" &
	local s=$!
	sleep 0.3
	env "$@" timeout 20 "$run" rping -c -a 127.0.0.1 -p "$PORT" -C 20 >/dev/null 2>"$T/$tag.c"
	local c=$?
	wait $s
	[ $c = 0 ] || fail "$tag: rping client exited $c"
	NPAIR=$((${NPAIR:-0} + 1))
	PORT=$(uiw_free_port "$NPAIR")
}
pair info UIWARP_LOG=info
cat "$T/info.s" "$T/info.c"
re='^uiwarp\[[0-9]+\] [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} info qp=[0-9]+ 127\.0\.0\.1:[0-9]+->127\.0\.0\.1:[0-9]+ '
grep -Eq "${re}established \(passive\): MPA rev 2, CRC on" "$T/info.s" || fail "server: no established line"
grep -Eq "${re}established \(active\): MPA rev 2, CRC on" "$T/info.c" || fail "client: no established line"
grep -Eq "${re}disconnected \(graceful\): sent [0-9]+ FPDUs" "$T/info.c" || fail "client: no disconnected line"
# the two ends name the same connection, mirrored
ct=$(grep -Eo 'qp=[0-9]+ [0-9.:]+->[0-9.:]+ established' "$T/info.c" | head -1 | cut -d' ' -f2)
st=$(grep -Eo 'qp=[0-9]+ [0-9.:]+->[0-9.:]+ established' "$T/info.s" | head -1 | cut -d' ' -f2)
[ -n "$ct" ] && [ "${ct#*->}->${ct%->*}" = "$st" ] || fail "4-tuples do not mirror: client $ct server $st"
grep -q 'debug' "$T/info.s" "$T/info.c" && fail "info shows debug lines"

pair none
grep -q '^uiwarp\[' "$T/none.s" "$T/none.c" && fail "without UIWARP_LOG something was logged"

pair dbg UIWARP_DEBUG=1
grep -Eq ' debug .*stream: EMSS [0-9]+ from ' "$T/dbg.c" || fail "UIWARP_DEBUG=1: no EMSS line"
grep -Eq ' debug .*mpa: MULPDU [0-9]+ ' "$T/dbg.c" || fail "UIWARP_DEBUG=1: no MULPDU line"

# nothing listens on this port: the connect is refused
UIWARP_LOG=warn UIWARP_CONNECT_RETRY_MS=0 timeout 20 "$run" rping -c -a 127.0.0.1 -p "$PORT" -C 1 \
	>/dev/null 2>"$T/refused.c"
cat "$T/refused.c"
grep -Eq ' warn qp=[0-9]+ ->127\.0\.0\.1:'"$PORT"' connect failed at TCP connect: Connection refused' \
	"$T/refused.c" || fail "refused connect not logged"
[ $rc = 0 ] && echo PASS
exit $rc
