#!/bin/bash
# One uiwarp-replicate case on 127.0.0.1: replicate_test.sh BIN CASE PORT
#   {rdma,tcp}_odd      3 MiB + 12345 bytes (not a multiple of the chunk): exit 0, identical copy
#   {rdma,tcp}_empty    empty file: exit 0, empty DEST
#   {rdma,tcp}_missing  missing SRC: sender fails before connecting, no DEST, no DEST.part
#   {rdma,tcp}_baddest  receiver cannot create DEST: both sides fail with a clear message
#   {rdma,tcp}_nommap   odd size, --no-mmap on both sides (sender: registered bounce buffer;
#                       receiver: memory, file written at the end), small chunk and window
#   {rdma,tcp}_killsend sender killed (SIGKILL) mid-transfer: receiver fails, removes DEST.part
set -u
bin=$1 case=$2 port=$3
here=$(cd "$(dirname "$0")" && pwd)
pair="$here/../../examples/replicate/run-pair.sh"
work=$(mktemp -d /tmp/uiwarp-replicate-test.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL [$case]: $*" >&2; exit 1; }

mode=${case%%_*}
kind=${case#*_}
args=()
[ "$mode" = tcp ] && args+=(--tcp)

run() { # SRC DEST TIMEOUT [extra args]: runs the pair, output in $work/out, status in $rc
	local s=$1 d=$2 t=$3
	shift 3
	timeout --foreground -k 5 $((t + 40)) "$pair" --bin "$bin" --port "$port" --timeout "$t" \
		--logdir "$work" "$s" "$d" 127.0.0.1 -- "${args[@]}" "$@" >"$work/out" 2>"$work/err"
	rc=$?
	cat "$work/out"
}

case "$kind" in
odd|nommap)
	head -c $((3 * 1024 * 1024 + 12345)) /dev/urandom >"$work/src"
	extra=()
	[ "$kind" = nommap ] && extra=(--no-mmap --chunk 64k --window 4)
	run "$work/src" "$work/dst" 30 "${extra[@]}"
	[ "$rc" = 0 ] || { cat "$work/err" >&2; fail "transfer failed (exit $rc)"; }
	cmp "$work/src" "$work/dst" || fail "copy differs"
	[ -e "$work/dst.part" ] && fail "dst.part left behind"
	grep -q "sent $((3 * 1024 * 1024 + 12345)) bytes" "$work/out" ||
		fail "no final line with the byte count"
	grep -q "received $((3 * 1024 * 1024 + 12345)) bytes" "$work/recv.out" ||
		fail "receiver printed no final line"
	;;
empty)
	: >"$work/src"
	echo stale >"$work/dst" # replaced by the (empty) copy
	run "$work/src" "$work/dst" 30
	[ "$rc" = 0 ] || { cat "$work/err" >&2; fail "transfer failed (exit $rc)"; }
	[ -f "$work/dst" ] && [ ! -s "$work/dst" ] || fail "dst is not an empty file"
	[ -e "$work/dst.part" ] && fail "dst.part left behind"
	grep -q "sent 0 bytes" "$work/out" || fail "no final line"
	;;
missing)
	run "$work/nonexistent" "$work/dst" 3
	[ "$rc" != 0 ] || fail "succeeded with a missing source"
	grep -q "cannot open .*nonexistent: No such file or directory" "$work/send.log" ||
		fail "no clear error: $(cat "$work/send.log")"
	[ "$(wc -l <"$work/send.log")" = 1 ] || fail "sender said more than the error"
	grep -q "receiving" "$work/recv.log" && fail "sender connected anyway"
	[ -e "$work/dst" ] || [ -e "$work/dst.part" ] && fail "dst created"
	;;
baddest)
	head -c 100000 /dev/urandom >"$work/src"
	run "$work/src" "$work/no/such/dir/dst" 10
	[ "$rc" != 0 ] || fail "succeeded with an impossible destination"
	grep -q "receiver refused: cannot create the destination: No such file or directory" \
		"$work/send.log" || fail "sender gave no clear error: $(cat "$work/send.log")"
	grep -q "cannot write .*dst (100000 bytes): No such file or directory" "$work/recv.log" ||
		fail "receiver gave no clear error: $(cat "$work/recv.log")"
	;;
killsend)
	# 1 GiB sparse source (nothing to generate); 4 KiB writes one at a time
	# keep the transfer going for seconds; the kill comes within ~20 ms.
	truncate -s 1G "$work/src"
	timeout --foreground -k 5 60 "$bin" recv --port "$port" --timeout 20 "${args[@]}" "$work/dst" \
		>"$work/recv.out" 2>"$work/recv.log" &
	rpid=$!
	for _ in $(seq 250); do grep -q listening "$work/recv.log" && break; sleep 0.02; done
	# not under timeout(1): spid must be the tool itself; the trap ends it
	"$bin" send --port "$port" --window 1 --chunk 4k "${args[@]}" \
		"$work/src" 127.0.0.1 >"$work/send.out" 2>"$work/send.log" &
	spid=$!
	trap 'kill -KILL $spid $rpid 2>/dev/null; rm -rf "$work"' EXIT
	for _ in $(seq 500); do grep -q receiving "$work/recv.log" && break; sleep 0.02; done
	grep -q receiving "$work/recv.log" || fail "transfer did not start: $(cat "$work"/*.log)"
	kill -KILL "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	for _ in $(seq 300); do kill -0 "$rpid" 2>/dev/null || break; sleep 0.1; done
	wait "$rpid"
	rc=$?
	cat "$work/recv.log"
	[ "$rc" != 0 ] || fail "receiver succeeded (transfer finished before the kill?)"
	[ "$rc" = 124 ] && fail "receiver did not notice the sender's death"
	grep -q "connection lost\|connection closed by peer" "$work/recv.log" ||
		fail "no clear error from the receiver"
	[ -e "$work/dst" ] || [ -e "$work/dst.part" ] && fail "dst or dst.part left behind"
	;;
*)
	fail "unknown case"
	;;
esac
echo "PASS [$case]"
