#!/bin/bash
# Runs one uiwarp-replicate transfer: the receiver (optionally in a network
# namespace), waits until it listens, then the sender (optionally in another
# namespace). Every wait is bounded. Used by scripts/quickstart.sh and
# tests/replicate/; reusable for tests/e2e.
#
# usage: run-pair.sh [options] SRC DEST HOST [-- ARGS for both sides, e.g. --tcp]
#   --bin PATH      uiwarp-replicate (default: build/bin/uiwarp-replicate of this tree)
#   --recv-ns NS    run the receiver in network namespace NS
#   --send-ns NS    run the sender in network namespace NS
#   --bind ADDR     receiver's --bind
#   --port PORT     both sides' --port (default: the tool's default)
#   --timeout SEC   bound on the whole transfer (default 120)
#   --logdir DIR    keep recv.log / send.log there (default: a temp dir, removed)
#   --send-arg ARG  one more argument for the sender only (e.g. --streams 4); repeatable
# Prints the sender's final line on stdout. Exit status: 0 when both sides
# succeeded, 1 when either failed (logs are shown on stderr), 2 on bad usage.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin="$here/../../build/bin/uiwarp-replicate"
recv_ns="" send_ns="" bind="" port="" total=120 logdir=""
send_only=()

die() { echo "run-pair: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--bin) bin=$2; shift 2 ;;
	--recv-ns) recv_ns=$2; shift 2 ;;
	--send-ns) send_ns=$2; shift 2 ;;
	--bind) bind=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--timeout) total=$2; shift 2 ;;
	--logdir) logdir=$2; shift 2 ;;
	--send-arg) send_only+=("$2"); shift 2 ;;
	-h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--) break ;;
	-*) die "unknown option $1" ;;
	*) break ;;
	esac
done
[ $# -ge 3 ] || die "need SRC DEST HOST (see --help)"
src=$1 dest=$2 host=$3
shift 3
[ "${1:-}" = "--" ] && shift
extra=("$@")
[ -x "$bin" ] || die "$bin is not built"
case "$total" in ''|*[!0-9]*) die "bad --timeout $total" ;; esac

own_logdir=0
if [ -z "$logdir" ]; then
	logdir=$(mktemp -d /tmp/uiwarp-run-pair.XXXXXX) || exit 1
	own_logdir=1
fi
rpid=""
cleanup() {
	if [ -n "$rpid" ] && kill -0 "$rpid" 2>/dev/null; then
		kill -TERM "$rpid" 2>/dev/null
		# bounded: the receiver removes DEST.part and exits on SIGTERM
		for _ in $(seq 50); do kill -0 "$rpid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$rpid" 2>/dev/null
	fi
	[ "$own_logdir" = 1 ] && rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

in_ns() { # NS CMD...: run CMD in namespace NS (or here when NS is empty)
	local ns=$1
	shift
	if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

common=(--timeout "$total" "${extra[@]}")
[ -n "$port" ] && common+=(--port "$port")
rargs=(recv "${common[@]}")
[ -n "$bind" ] && rargs+=(--bind "$bind")

: >"$logdir/recv.log"
in_ns "$recv_ns" timeout --foreground -k 5 $((total + 10)) "$bin" "${rargs[@]}" "$dest" \
	>"$logdir/recv.out" 2>"$logdir/recv.log" &
rpid=$!

# Wait (at most 10 s) for the receiver to listen.
ready=0
for _ in $(seq 100); do
	if grep -q "listening on" "$logdir/recv.log"; then ready=1; break; fi
	kill -0 "$rpid" 2>/dev/null || break
	sleep 0.1
done
if [ "$ready" != 1 ]; then
	echo "run-pair: receiver did not start listening:" >&2
	cat "$logdir/recv.log" >&2
	exit 1
fi

in_ns "$send_ns" timeout --foreground -k 5 $((total + 5)) "$bin" send "${common[@]}" \
	${send_only[@]+"${send_only[@]}"} "$src" "$host" \
	>"$logdir/send.out" 2>"$logdir/send.log" </dev/null
src_rc=$?

# The receiver exits by itself once the transfer is over or failed.
rrc=""
for _ in $(seq $(((total + 20) * 10))); do
	kill -0 "$rpid" 2>/dev/null || break
	sleep 0.1
done
wait "$rpid"
rrc=$?
rpid=""

cat "$logdir/send.out"
if [ "$src_rc" != 0 ] || [ "$rrc" != 0 ]; then
	echo "run-pair: sender exit $src_rc, receiver exit $rrc" >&2
	echo "--- sender:" >&2
	cat "$logdir/send.log" >&2
	echo "--- receiver:" >&2
	cat "$logdir/recv.log" "$logdir/recv.out" >&2
	exit 1
fi
exit 0
