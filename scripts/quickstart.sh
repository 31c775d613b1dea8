#!/bin/bash
# uiwarp quick start: build, then copy a real file between two network
# namespaces with uiwarp-replicate over uiwarp (RDMA Writes, iWARP over kernel
# TCP) and over a plain TCP socket, and print both throughputs.
#
# usage (as root on Debian bookworm): scripts/quickstart.sh [options]
#   --size SIZE      size of the generated input, e.g. 256M, 4G (default 1G)
#   --file PATH      copy this file instead of generating one (never modified)
#   --dir DIR        where the temp dir for input and copies goes (default /var/tmp)
#   --build-dir DIR  build tree (default: build/ in the source tree)
#   --no-install     do not apt-get missing packages
#   --no-build       use the existing build
#   --timeout SEC    bound on each transfer (default: 120 + 1 s per 20 MiB)
#   --only MODE      run only rdma or only tcp
#   --mtu BYTES      MTU of the veth pair (default 1500)
#   --runs N         timed copies per mode; the median is reported (default 5)
#   --cc ALG         TCP congestion control of both modes' sockets (default:
#                    the namespace's, bbr here); UIWARP_TCP_CONGESTION does the same
#   -h, --help
#   --no-touch       do not touch and release memory before each copy (below)
# Fairness: the input is synced to disk before anything is timed, then one
# untimed warm-up copy reads it into the page cache for both modes; the copies
# then go in pairs, and the mode that goes first alternates from pair to pair.
# Before each timed copy as much memory as the copy will take (its size plus
# 256 MiB, at most half of MemAvailable) is written once in /dev/shm and
# freed: on a virtual machine that hands freed memory back to its host (free
# page reporting, as here) the first touch of such memory faults into the
# host and costs some copies half their speed in either mode; memory freed
# just before is still the guest's. Nothing to do on bare metal.
# Namespaces uiwqa (receiver, 198.51.100.1) and uiwqb (sender, 198.51.100.2)
# joined by a veth pair; removed on exit together with the temp files.
set -u
set -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
size=1G file="" parent=/var/tmp build="$root/build" install=1 build_it=1 limit="" only="" mtu=1500 runs=5 touch=1
cc_opt=${UIWARP_TCP_CONGESTION:-}
NS_R=uiwqa NS_S=uiwqb IP_R=198.51.100.1 IP_S=198.51.100.2 # veths uiwqa0 <-> uiwqb0

say() { echo "quickstart: $*" >&2; }
die() { say "error: $*"; exit 1; }

while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$2; shift 2 ;;
	--file) file=$2; shift 2 ;;
	--dir) parent=$2; shift 2 ;;
	--build-dir) build=$2; shift 2 ;;
	--no-install) install=0; shift ;;
	--no-build) build_it=0; shift ;;
	--no-touch) touch=0; shift ;;
	--timeout) limit=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--mtu) mtu=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--cc) cc_opt=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

case "$only" in ''|rdma|tcp) ;; *) die "--only takes rdma or tcp" ;; esac
case "$limit" in ''|[0-9]*) ;; *) die "bad --timeout $limit" ;; esac
case "$mtu" in [0-9]*) ;; *) die "bad --mtu $mtu" ;; esac
case "$runs" in [1-9] | [1-9][0-9]) ;; *) die "bad --runs $runs (1..99)" ;; esac
[ "$(id -u)" = 0 ] || die "run as root (network namespaces, apt-get)"

# ---------------------------------------------------------------- packages
pkgs=(build-essential cmake pkg-config libisal-dev libibverbs-dev librdmacm-dev libcmocka-dev libmnl-dev libssl-dev
	iproute2)
if [ "$install" = 1 ]; then
	missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		timeout --foreground 900 apt-get update -q >&2 || die "apt-get update failed"
		timeout --foreground 1800 apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
			die "apt-get install failed"
	fi
fi
for c in cmake ip cmp timeout; do
	command -v "$c" >/dev/null || die "$c not found (drop --no-install?)"
done

# ---------------------------------------------------------------- build
bin="$build/bin/uiwarp-replicate"
if [ "$build_it" = 1 ]; then
	say "building (Release) in $build"
	timeout --foreground 1800 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2 ||
		die "cmake configure failed"
	# only what the demo runs (the libraries come with it as dependencies)
	timeout --foreground 1800 cmake --build "$build" -j"$(nproc)" --target uiwarp-replicate >&2 ||
		die "build failed"
fi
[ -x "$bin" ] || die "$bin is missing"
verbs_lib=$(ldd "$bin" | awk '$1 == "libibverbs.so.1" { print $3 }')
verbs_lib=$(readlink -f "$verbs_lib" 2>/dev/null)
case "$only:$verbs_lib" in
tcp:* | *:"$(readlink -f "$build")"/lib/*) ;;
*) die "uiwarp-replicate would load libibverbs from '${verbs_lib:-nowhere}', not $build/lib" ;;
esac

# ---------------------------------------------------------------- cleanup
netns="$root/examples/replicate/netns-pair.sh"
tmp=""
cleanup() {
	"$netns" down "$NS_R" "$NS_S"
	[ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

# ---------------------------------------------------------------- network
"$netns" up "$NS_R" "$NS_S" "$IP_R/24" "$IP_S/24" || die "cannot set up the namespaces"
ip -n "$NS_R" link set "${NS_R}0" mtu "$mtu" && ip -n "$NS_S" link set "${NS_S}0" mtu "$mtu" ||
	die "cannot set MTU $mtu"
cc=$(ip netns exec "$NS_S" cat /proc/sys/net/ipv4/tcp_congestion_control)
if [ -n "$cc_opt" ]; then
	# both modes: uiwarp's sockets and uiwarp-replicate --tcp's read it
	export UIWARP_TCP_CONGESTION=$cc_opt
	cc="$cc_opt (set per socket; namespace default $cc)"
fi

# ---------------------------------------------------------------- input
mkdir -p "$parent" || die "cannot use $parent"
tmp=$(mktemp -d "$parent/uiwarp-quickstart.XXXXXX") || die "cannot make a temp dir in $parent"
if [ -n "$file" ]; then
	[ -f "$file" ] && [ -r "$file" ] || die "$file is not a readable regular file"
	src=$(cd "$(dirname "$file")" && pwd)/$(basename "$file")
	what="$src"
else
	s=${size%B}
	bytes=$(numfmt --from=iec "${s%i}" 2>/dev/null) || die "bad --size $size"
	src="$tmp/input"
	say "making $size of input from /dev/urandom in $tmp"
	timeout --foreground 600 head -c "$bytes" /dev/urandom >"$src" || die "cannot write $src"
	what="$size from /dev/urandom"
fi
bytes=$(stat -c %s "$src")
[ -n "$limit" ] || limit=$((120 + bytes / (20 * 1024 * 1024)))
# The input on stable storage before the first timed copy (a file written just
# before is still being written back while the first copy reads it), then a
# settle. Only this file is synced: dropping the whole machine's caches would
# also throw away what other programs use and is not needed for fairness,
# since the warm-up copy below puts the input in the page cache for both modes.
say "syncing the input to disk"
timeout --foreground 600 sync "$src" || die "cannot sync $src"
sleep 2

# ---------------------------------------------------------------- runs
# touch_memory: writes the copy's worth of memory once in /dev/shm and frees
# it, so the copy that follows takes memory the guest still holds (see the top)
touch_memory() {
	[ "$touch" = 1 ] && [ -d /dev/shm ] || return 0
	local avail mib
	avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
	mib=$((bytes / 1048576 + 256))
	[ -n "$avail" ] && [ "$mib" -gt $((avail / 2)) ] && mib=$((avail / 2))
	local f
	f=$(mktemp /dev/shm/uiwarp-quickstart-touch.XXXXXX) || return 0
	dd if=/dev/zero of="$f" bs=1M count="$mib" status=none 2>/dev/null
	rm -f "$f"
}
# run MODE [warmup]: copies src to $tmp/copy-MODE, checks it, appends "MiB/s
# seconds" to $tmp/MODE.txt and the sender's line to $tmp/MODE.lines (not for
# the untimed warm-up copy)
run() {
	local mode=$1 warm=${2:-} out extra=()
	[ "$mode" = tcp ] && extra=(--tcp)
	[ -n "$warm" ] || touch_memory
	say "copying $(numfmt --to=iec-i --suffix=B "$bytes") $NS_S -> $NS_R over $mode"
	out=$("$root/examples/replicate/run-pair.sh" --bin "$bin" --recv-ns "$NS_R" \
		--send-ns "$NS_S" --bind "$IP_R" --timeout "$limit" \
		"$src" "$tmp/copy-$mode" "$IP_R" -- "${extra[@]}") || die "$mode copy failed"
	echo "$out" >&2
	timeout --foreground 600 cmp "$src" "$tmp/copy-$mode" || die "$mode copy differs from the source"
	rm -f "$tmp/copy-$mode"
	[ -n "$warm" ] && return 0
	echo "$out" >>"$tmp/$mode.lines"
	sed -n 's/.* in \([0-9.]*\) s: \([0-9.]*\) MiB\/s.*/\2 \1/p' <<<"$out" >>"$tmp/$mode.txt"
}
modes=()
[ "$only" = tcp ] || modes+=(rdma)
[ "$only" = rdma ] || modes+=(tcp)
say "untimed warm-up copy"
run "${modes[0]}" warmup
for i in $(seq "$runs"); do
	# pairs alternate which mode goes first: rdma tcp, tcp rdma, ...
	if [ $((i % 2)) = 1 ]; then
		for m in "${modes[@]}"; do run "$m"; done
	else
		for ((k = ${#modes[@]} - 1; k >= 0; k--)); do run "${modes[$k]}"; done
	fi
done

# median MODE -> "MiB/s seconds" of the median run; all MODE -> the MiB/s of every run
median() { sort -n "$tmp/$1.txt" | sed -n "$(((runs + 1) / 2))p"; }
all() { awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 }' "$tmp/$1.txt"; }
r_mibs=0 t_mibs=0
crc=$(sed -n 's/.*crc32c \(0x[0-9a-f]*\).*/\1/p' "$tmp"/*.lines | head -n1)

echo
echo "uiwarp quick start: $bytes bytes ($what), $NS_S ($IP_S) -> $NS_R ($IP_R) over veth, MTU $mtu"
echo "TCP congestion control (sender namespace): $cc; uiwarp runs over the same kernel TCP"
[ "$runs" -gt 1 ] && echo "median of $runs runs each, alternating which goes first, after an untimed warm-up (every run in brackets):"
if [ -f "$tmp/rdma.txt" ]; then
	read -r r_mibs r_sec <<<"$(median rdma)"
	printf '  uiwarp RDMA Writes (iWARP over TCP): %8.1f MiB/s  (%s s)  [%s]\n' \
		"$r_mibs" "$r_sec" "$(all rdma)"
fi
if [ -f "$tmp/tcp.txt" ]; then
	read -r t_mibs t_sec <<<"$(median tcp)"
	printf '  plain TCP socket:                    %8.1f MiB/s  (%s s)  [%s]\n' \
		"$t_mibs" "$t_sec" "$(all tcp)"
fi
awk -v a="$r_mibs" -v b="$t_mibs" \
	'BEGIN { if (a > 0 && b > 0) printf "  ratio uiwarp / TCP:                  %.2f\n", a / b }'
if [ -f "$tmp/rdma.txt" ] && [ "$runs" -gt 1 ]; then
	sort -n "$tmp/rdma.txt" | awk -v m="$r_mibs" 'NR == 1 && m > 0 {
		printf "  slowest uiwarp copy / median:        %.2f\n", $1 / m }'
fi
# the same for TCP: how steady the path itself was in this run
if [ -f "$tmp/tcp.txt" ] && [ "$runs" -gt 1 ]; then
	sort -n "$tmp/tcp.txt" | awk -v m="$t_mibs" 'NR == 1 && m > 0 {
		printf "  slowest TCP copy / median:           %.2f\n", $1 / m }'
fi
echo "Copies identical to the source (cmp; crc32c $crc). Times run from the first data byte"
echo "to the receiver holding all of it; the receiver's checksum and sync are excluded."
exit 0
