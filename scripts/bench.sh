#!/bin/bash
# uiwarp benchmark suite: uiwarp against raw TCP and against the software a
# user would pick instead (libfabric's tcp provider, UCX over TCP), over the
# same paths in the same run, with ratios computed by the script.
#
# usage (as root on Debian bookworm): scripts/bench.sh [options]
#   --quick            smoke mode: paths lo,veth, cc cubic, 64 B and 64 KiB,
#                      1 s runs, 1 and 16 QPs, a 256 MiB job, 3 runs
#                      (a few minutes)
#   --paths LIST       of lo, veth, routed (default all three), wan, wanloss
#                      (the emulated WAN of scripts/wan.sh: 25 ms each way,
#                      --wan-rate, 0.1 % loss (wan) or 1 % (wanloss); give
#                      them a --duration of 20 or more: 50 ms RTT)
#   --wan-rate RATE    the wan paths' rate, tc units (default 1gbit)
#   --job-streams N    uiwarp-replicate --streams N in the job group, both
#                      modes (default 1)
#   --cc LIST          congestion controls, e.g. cubic,bbr (default cubic,bbr)
#   --runs N           repetitions; every row's median covers N samples
#                      (default 5)
#   --sizes LIST       message sizes in bytes (default 64,4096,65536,1048576)
#   --groups LIST      of bw, rate, lat, qps, job, peers (default all), tls
#                      (not in the default: RDMA Write over uiwarp's TLS
#                      stream against a TLS socket stream, uiwarp-bench-tls,
#                      and uiwarp Write without TLS, at each size; with job
#                      too, uiwarp-replicate --tls against --tcp --tls)
#                      storage (not in the default: issue #11's rows on
#                      the lo and veth paths: tgt's iSER target read by
#                      libiscsi's iscsi-perf over iser:// under uiwarp-run
#                      against the same tgtd's iSCSI/TCP portal, 128 and
#                      256 KiB requests, 16 in flight, tests/programs/iser.sh;
#                      on veth, a Ceph cluster of tests/programs/ceph.sh,
#                      rados bench write and seq, async+rdma over uiwarp
#                      against async+posix; installs tgt, libiscsi-bin and
#                      ceph, ~350 MB)
#   --tls-suites LIST  TLS 1.3 suites of the tls group (default
#                      TLS_AES_128_GCM_SHA256; e.g. add
#                      TLS_CHACHA20_POLY1305_SHA256)
#   --qps LIST         QP / socket counts of the qps group (default 1,16,1000)
#   --duration SEC     length of each throughput run, whole seconds (default 2)
#   --lat-iters N      iterations of each perftest latency run (default 20000)
#   --job-size SIZE    file size of the main job (default 1G)
#   --dir DIR          where the job's input and copies go (default /var/tmp)
#   --out DIR          results (default bench-results/<UTC date-time>)
#   --build-dir DIR    build tree (default build/ of this tree; configured
#                      Release if it does not exist yet)
#   --tcpbench PATH    raw TCP tool (default ../shared/bench/bin/tcpbench,
#                      built from ../shared/bench/src if missing)
#   --no-build         use the build as it is
#   --no-install       do not apt-get missing packages
#   --estimate         print the plan and its estimated duration, then exit
#   -h, --help
#
# The bw group measures, beside raw TCP and uiwarp, the framing floor:
# uiwarp-bench-mpa sends each message as MPA FPDUs with CRC32c over a plain
# TCP socket and reads them with one-copy placement, no RDMA above (what
# framing and the CRC alone cost on the path; "mpa" in the tables).
# Every repetition runs every row once, and within a row the tools take
# turns in an order that rotates from one repetition to the next (A/B/C,
# B/C/A, ...). Each path gets its own network namespaces (deleted on exit):
# lo (loopback only), veth (two namespaces, a veth pair with MTU 1500),
# routed (three namespaces, the middle one forwarding; MTU 1500).
# Output in --out: samples.tsv (one line per sample and metric, with load1),
# summary.md (median [min-max] (n), ratios, the goals), plots (PNG),
# raw/ (every program's output), meta.txt. docs/performance.md explains the rows.
set -u
set -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
quick=0 paths="" ccs="" runs="" sizes="" groups="bw,rate,lat,qps,job,peers" qpslist="" dur=""
latn="" jobsize="" parent=/var/tmp out="" build="$root/build" build_it=1 install=1
tcpbench="" estimate_only=0 wanrate=1gbit jobstreams=1 tlssuites=TLS_AES_128_GCM_SHA256

orig_args=("$@")

say() { echo "bench: $*" >&2; }
die() {
	say "error: $*"
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1; shift ;;
	--paths) paths=$2; shift 2 ;;
	--cc) ccs=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--sizes) sizes=$2; shift 2 ;;
	--groups) groups=$2; shift 2 ;;
	--qps) qpslist=$2; shift 2 ;;
	--duration) dur=$2; shift 2 ;;
	--lat-iters) latn=$2; shift 2 ;;
	--job-size) jobsize=$2; shift 2 ;;
	--dir) parent=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--build-dir) build=$2; shift 2 ;;
	--tcpbench) tcpbench=$2; shift 2 ;;
	--wan-rate) wanrate=$2; shift 2 ;;
	--job-streams) jobstreams=$2; shift 2 ;;
	--tls-suites) tlssuites=$2; shift 2 ;;
	--no-build) build_it=0; shift ;;
	--no-install) install=0; shift ;;
	--estimate) estimate_only=1; shift ;;
	-h | --help)
		sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

if [ "$quick" = 1 ]; then
	: "${paths:=lo,veth}" "${ccs:=cubic}" "${runs:=3}" "${sizes:=64,65536}" "${qpslist:=1,16}"
	: "${dur:=1}" "${latn:=5000}" "${jobsize:=256M}"
else
	: "${paths:=lo,veth,routed}" "${ccs:=cubic,bbr}" "${runs:=5}" "${sizes:=64,4096,65536,1048576}"
	: "${qpslist:=1,16,1000}" "${dur:=2}" "${latn:=20000}" "${jobsize:=1G}"
fi
IFS=, read -r -a PATHS <<<"$paths"
IFS=, read -r -a CCS <<<"$ccs"
IFS=, read -r -a SIZES <<<"$sizes"
IFS=, read -r -a QPSL <<<"$qpslist"
for p in "${PATHS[@]}"; do case "$p" in lo | veth | routed | wan | wanloss) ;; *) die "unknown path $p" ;; esac; done
for c in "${CCS[@]}"; do case "$c" in [a-z]*) ;; *) die "bad congestion control $c" ;; esac; done
for s in "${SIZES[@]}" "${QPSL[@]}" "$runs" "$latn" "$jobstreams"; do
	case "$s" in '' | *[!0-9]* | 0) die "not a positive number: '$s'" ;; esac
done
# whole seconds: perftest's -D takes an integer
case "$dur" in '' | *[!0-9]* | 0) die "--duration takes whole seconds (1, 2, ...), not '$dur'" ;; esac
has_group() { [[ ",$groups," == *",$1,"* ]]; }
for g in ${groups//,/ }; do
	case "$g" in bw | rate | lat | qps | job | peers | tls | storage) ;; *) die "unknown group $g" ;; esac
done
jobbytes=$(numfmt --from=iec "${jobsize%B}" 2>/dev/null) || die "bad --job-size $jobsize"

# ---------------------------------------------------------------- plan
# Runs per repetition and a rough duration (s) of each: the estimate.
np=${#PATHS[@]} nc=${#CCS[@]} ns=${#SIZES[@]} nq=${#QPSL[@]}
peers=0
has_group peers && peers=1
n_bw=0 n_lat=0 n_qps=0 n_job=0
has_group bw && n_bw=$((np * nc * ns * (5 + 2 * peers)))
has_group rate && n_bw=$((n_bw + np * nc * 3))
has_group lat && n_lat=$((np * nc * (5 + 2 * peers)))
has_group qps && n_qps=$((np * nc * nq * 2))
has_group job && n_job=$((np * nc * 2))
IFS=, read -r -a TLSS <<<"$tlssuites"
nt=${#TLSS[@]}
has_group tls && n_bw=$((n_bw + np * nc * ns * (1 + 2 * nt)))
has_group tls && has_group job && n_job=$((n_job + np * nc * 2 * nt))
# storage: iscsi-perf runs of at least 3 s, rados bench phases of at least 10
isecs=$((dur < 3 ? 3 : dur)) cephsecs=$((dur < 10 ? 10 : dur))
# storage: per iSER run 4 iscsi-perf runs of --duration and ~6 s of setup;
# Ceph (veth only) two clusters of ~35 s setup and teardown plus two benches
n_sto=0 sto_s=0
if has_group storage; then
	for p in "${PATHS[@]}"; do
		case "$p" in
		lo) n_sto=$((n_sto + nc)) sto_s=$((sto_s + nc * (4 * isecs + 6))) ;;
		veth) n_sto=$((n_sto + 3 * nc)) sto_s=$((sto_s + nc * (4 * isecs + 6 + 2 * (35 + 2 * cephsecs)))) ;;
		esac
	done
fi
runs_per_rep=$((n_bw + n_lat + n_qps + n_job + n_sto))
total_runs=$((runs_per_rep * runs))
# (per-run overheads as measured on the 2-vCPU development machine)
job_s=$(awk -v b="$jobbytes" 'BEGIN { printf "%d", b / (400 * 1048576) + 2 }')
qsetup=0
for q in "${QPSL[@]}"; do qsetup=$((qsetup + q / 250)); done
est=$(awk -v r="$runs" -v bw="$n_bw" -v lat="$n_lat" -v q="$n_qps" -v j="$n_job" -v d="$dur" \
	-v js="$job_s" -v ln="$latn" -v qs="$qsetup" -v np="$np" -v nc="$nc" -v st="$sto_s" \
	'BEGIN { l = ln * 30e-6 + 0.8; if (l < 1.2) l = 1.2
		printf "%d", r * (bw * (d + 0.6) + lat * l + q * (d + 1) + 2 * np * nc * qs + j * js + st) + 20 + js }')
plan() {
	echo "paths: ${PATHS[*]}; congestion control: ${CCS[*]}; runs: $runs; sizes: ${SIZES[*]}"
	echo "groups: $groups; QPs: ${QPSL[*]}; run length: $dur s; latency iterations: $latn;" \
		"job: $jobsize"
	echo "$runs_per_rep runs per repetition, $total_runs in all; estimated $((est / 60)) min" \
		"$((est % 60)) s"
}
if [ "$estimate_only" = 1 ]; then
	plan
	exit 0
fi
[ "$(id -u)" = 0 ] || die "run as root (network namespaces)"

# ---------------------------------------------------------------- packages
pkgs=(perftest iproute2 iputils-ping python3)
has_group peers && pkgs+=(libfabric-bin ucx-utils)
has_group storage && pkgs+=(tgt libiscsi-bin ceph-mon ceph-mgr ceph-osd ceph-common)
pkgs+=(python3-matplotlib)
if [ "$build_it" = 1 ]; then
	pkgs+=(build-essential cmake pkg-config libisal-dev libibverbs-dev librdmacm-dev libcmocka-dev
		libmnl-dev libssl-dev)
fi
if [ "$install" = 1 ]; then
	missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		timeout --foreground 900 apt-get update -q >&2 || die "apt-get update failed"
		timeout --foreground 1800 apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
			die "apt-get install failed"
	fi
fi
for c in ip ss timeout awk numfmt ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat \
	ib_send_lat; do
	command -v "$c" >/dev/null || die "$c not found (drop --no-install?)"
done
if has_group peers; then
	for c in ucx_perftest fi_pingpong; do
		command -v "$c" >/dev/null || die "$c not found (drop --no-install, or leave out peers)"
	done
fi
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, with python3-matplotlib

# ---------------------------------------------------------------- build
if [ "$build_it" = 1 ]; then
	if [ ! -f "$build/CMakeCache.txt" ]; then
		say "configuring a Release build in $build"
		timeout --foreground 1800 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2 ||
			die "cmake configure failed"
	fi
	say "building the benchmark's programs in $build"
	timeout --foreground 1800 cmake --build "$build" -j"$(nproc)" --target uiwarp-replicate \
		uiwarp-bench-qps uiwarp-bench-tcpconns uiwarp-bench-cpu uiwarp-bench-cc uiwarp-bench-tls uiwarp-bench-mpa \
		ibverbs rdmacm >&2 ||
		die "build failed"
fi
run="$build/bin/uiwarp-run"
cpu="$build/bin/uiwarp-bench-cpu"
qpsbin="$build/bin/uiwarp-bench-qps"
tcbin="$build/bin/uiwarp-bench-tcpconns"
repbin="$build/bin/uiwarp-replicate"
tlsbin="$build/bin/uiwarp-bench-tls"
mpabin="$build/bin/uiwarp-bench-mpa"
ccso="$build/lib/libuiwarp-bench-cc.so"
for f in "$run" "$cpu" "$qpsbin" "$tcbin" "$repbin" "$ccso" "$mpabin"; do
	[ -e "$f" ] || die "$f is missing (build it, or drop --no-build)"
done
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)

# ---------------------------------------------------------------- output
[ -n "$out" ] || out="$root/bench-results/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out/raw" || die "cannot create $out"
out=$(cd "$out" && pwd)
raw="$out/raw"
samples="$out/samples.tsv"
logf="$out/bench.log"
: >"$logf"
printf 'seq\ttime\trep\tpath\tcc\ttool\top\tsize\tmetric\tvalue\tload1\tnote\n' >"$samples"

if [ -z "$tcpbench" ]; then
	tcpbench="$root/../shared/bench/bin/tcpbench"
	if [ ! -x "$tcpbench" ] && [ -f "$root/../shared/bench/src/tcpbench.c" ]; then
		mkdir -p "$out/bin"
		cc -O2 -o "$out/bin/tcpbench" "$root/../shared/bench/src/tcpbench.c" ||
			die "cannot build tcpbench"
		tcpbench="$out/bin/tcpbench"
	fi
fi
[ -x "$tcpbench" ] || die "tcpbench not found (--tcpbench PATH)"

# ---------------------------------------------------------------- namespaces
id=$(printf '%04x' $(($$ % 65536)))
NS_L="ubn$id-l" NS_VA="ubn$id-va" NS_VB="ubn$id-vb" NS_RA="ubn$id-ra" NS_RR="ubn$id-rr" NS_RB="ubn$id-rb"
made_ns=()
spid=""
work=""
summarized=0
cleanup() {
	local rc=$? n
	trap - EXIT INT TERM HUP
	if [ -n "$spid" ] && kill -0 "$spid" 2>/dev/null; then
		kill -TERM "$spid" 2>/dev/null
		sleep 0.5
		kill -KILL "$spid" 2>/dev/null
	fi
	for n in "${made_ns[@]}"; do
		ip netns pids "$n" 2>/dev/null | while read -r p; do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$n" 2>/dev/null
	done
	[ -n "$work" ] && rm -rf "$work"
	if [ "$summarized" = 0 ] && [ -s "$samples" ]; then
		say "writing the summary of what was measured"
		"$py" "$root/scripts/bench_summary.py" "$out" >/dev/null 2>&1
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

mkns() {
	ip netns add "$1" || die "cannot create namespace $1"
	made_ns+=("$1")
	ip -n "$1" link set lo up
}
# veth pair: NS_A IF_A NS_B IF_B
mkveth() {
	ip link add "$2" netns "$1" type veth peer name "$4" netns "$3" ||
		die "cannot create veth $1/$2 <-> $3/$4"
	ip -n "$1" link set "$2" mtu 1500 up && ip -n "$3" link set "$4" mtu 1500 up ||
		die "cannot bring veth up"
}
ns_setup() {
	local p
	for p in "${PATHS[@]}"; do
		case "$p" in
		lo) mkns "$NS_L" ;;
		veth)
			# both ends named ubench0 (names are per namespace): UCX_NET_DEVICES
			# and FI_TCP_IFACE take one name for both sides
			mkns "$NS_VA"
			mkns "$NS_VB"
			mkveth "$NS_VA" ubench0 "$NS_VB" ubench0
			ip -n "$NS_VA" addr add 198.51.100.1/24 dev ubench0
			ip -n "$NS_VB" addr add 198.51.100.2/24 dev ubench0
			;;
		routed)
			mkns "$NS_RA"
			mkns "$NS_RR"
			mkns "$NS_RB"
			mkveth "$NS_RA" ubench0 "$NS_RR" rr0
			mkveth "$NS_RB" ubench0 "$NS_RR" rr1
			ip -n "$NS_RA" addr add 198.51.100.1/24 dev ubench0
			ip -n "$NS_RR" addr add 198.51.100.254/24 dev rr0
			ip -n "$NS_RR" addr add 203.0.113.254/24 dev rr1
			ip -n "$NS_RB" addr add 203.0.113.1/24 dev ubench0
			ip netns exec "$NS_RR" sysctl -qw net.ipv4.ip_forward=1
			ip -n "$NS_RA" route add default via 198.51.100.254
			ip -n "$NS_RB" route add default via 203.0.113.254
			;;
		wan | wanloss)
			# scripts/wan.sh: A 198.51.100.1 <-> router <-> B 203.0.113.1
			local loss=0.001
			[ "$p" = wanloss ] && loss=0.01
			made_ns+=("ubn$id-$p-a" "ubn$id-$p-r" "ubn$id-$p-b")
			UIW_BUILD=$build WAN_DELAY_SECS=86400 bash "$root/scripts/wan.sh" up \
				--name "ubn$id-$p" --rate "$wanrate" --delay-ms 25 --loss "$loss" >&2 ||
				die "wan.sh up ($p)"
			;;
		esac
	done
	for p in "${PATHS[@]}"; do
		[ "$p" = lo ] && continue
		set_path "$p"
		local ok=0
		for _ in $(seq 50); do
			if ip netns exec "$cns" ping -c1 -W1 "$addr" >/dev/null 2>&1; then
				ok=1
				break
			fi
			sleep 0.1
		done
		[ "$ok" = 1 ] || die "path $p: $addr does not answer from $cns"
	done
}
# set_path P: sns (server namespace), cns (client), addr (server's address),
# dev (the interface UCX and libfabric are told to use)
set_path() {
	case "$1" in
	lo) sns=$NS_L cns=$NS_L addr=127.0.0.1 dev=lo ;;
	veth) sns=$NS_VA cns=$NS_VB addr=198.51.100.1 dev=ubench0 ;;
	routed) sns=$NS_RA cns=$NS_RB addr=198.51.100.1 dev=ubench0 ;;
	wan | wanloss) sns="ubn$id-$1-a" cns="ubn$id-$1-b" addr=198.51.100.1 dev=wa ;;
	esac
}

# ---------------------------------------------------------------- runner
seq=0 done_runs=0 t_start=$(date +%s)
rep=0 cur_path="" cur_cc=""
ulimit -n "$(ulimit -Hn)" 2>/dev/null # 1000 QPs / sockets in one process

load1() { cut -d' ' -f1 /proc/loadavg; }
# rec TOOL OP SIZE METRIC VALUE [NOTE]
rec() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$seq" "$(date -u +%H:%M:%S)" "$rep" \
		"$cur_path" "$cur_cc" "$1" "$2" "$3" "$4" "$5" "$(load1)" "${6:-}" >>"$samples"
}
# why FILE...: the last line that looks like an error, one line, no tabs
why() {
	local l
	l=$(cat "$@" 2>/dev/null | grep -Ei 'error|fail|couldn|unable|refus|timed out|abort|cannot|reject' |
		tail -n1)
	[ -n "$l" ] || l=$(cat "$@" 2>/dev/null | grep -v '^[- ]*$' | tail -n1)
	printf '%s' "$l" | tr '\t\r\n' '   ' | cut -c1-160
}
wait_listen() { # NS PORT SECS PID
	local i
	for ((i = 0; i < $3 * 20; i++)); do
		kill -0 "$4" 2>/dev/null || return 1
		[ -n "$(ip netns exec "$1" ss -ltnH "sport = :$2" 2>/dev/null)" ] && return 0
		sleep 0.05
	done
	return 1
}
wait_gone() { # PID SECS: its exit status, or 124 after killing it
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		if ! kill -0 "$1" 2>/dev/null; then
			wait "$1"
			return $?
		fi
		sleep 0.05
	done
	kill -TERM "$1" 2>/dev/null
	sleep 0.5
	kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	return 124
}
# cpu_of FILE: "user sys threads wall" (zeros when missing)
cpu_of() {
	local l
	l=$(cat "$1" 2>/dev/null)
	awk -v l="$l" 'BEGIN { n = split(l, f, " "); u = s = t = w = 0
		for (i = 1; i <= n; i++) { split(f[i], kv, "=")
			if (kv[1] == "cpu_user") u = kv[2]; if (kv[1] == "cpu_sys") s = kv[2]
			if (kv[1] == "threads_max") t = kv[2]; if (kv[1] == "wall") w = kv[2] }
		print u, s, t, w }'
}
# rec_cpu TOOL OP SIZE BYTES: CPU seconds per GiB on each side
rec_cpu() {
	local cu cs su ss
	read -r cu cs _ _ <<<"$(cpu_of "$R.ccpu")"
	read -r su ss _ _ <<<"$(cpu_of "$R.scpu")"
	awk -v b="$4" 'BEGIN { exit !(b > 0) }' || return 0
	rec "$1" "$2" "$3" cpu_c "$(awk -v u="$cu" -v s="$cs" -v b="$4" \
		'BEGIN { printf "%.4f", (u + s) / (b / 1073741824) }')"
	rec "$1" "$2" "$3" cpu_s "$(awk -v u="$su" -v s="$ss" -v b="$4" \
		'BEGIN { printf "%.4f", (u + s) / (b / 1073741824) }')"
}

progress() {
	local now el eta
	done_runs=$((done_runs + 1))
	now=$(date +%s)
	el=$((now - t_start))
	eta=$((el * (total_runs - done_runs) / done_runs))
	printf '[%s] %d/%d rep %d %s %s: %s  (elapsed %dm%02ds, left ~%dm%02ds)\n' \
		"$(date -u +%H:%M:%S)" "$done_runs" "$total_runs" "$rep" "$cur_path" "$cur_cc" "$*" \
		$((el / 60)) $((el % 60)) $((eta / 60)) $((eta % 60)) | tee -a "$logf" >&2
}

# pair TAG SECS: the server S_CMD (env S_ENV) in $sns, then once it listens on
# $PORT the client C_CMD (env C_ENV) in $cns, each under uiwarp-bench-cpu;
# bounded by SECS. Sets R (raw file prefix), crc, src. Returns 0 when both
# ended with 0.
S_ENV=() C_ENV=() S_CMD=() C_CMD=() PORT=0
pair() {
	local tag=$1 secs=$2
	seq=$((seq + 1))
	PORT=$((20000 + seq % 20000))
	R="$raw/$(printf '%05d' "$seq")-$cur_path-$cur_cc-$tag"
	S_CMD=("${S_CMD[@]//@PORT@/$PORT}")
	C_CMD=("${C_CMD[@]//@PORT@/$PORT}")
	printf '%s\n' "server: ${S_ENV[*]} ${S_CMD[*]}" "client: ${C_ENV[*]} ${C_CMD[*]}" >"$R.cmd"
	ip netns exec "$sns" env "${S_ENV[@]}" "$cpu" -o "$R.scpu" -- "${S_CMD[@]}" >"$R.sout" 2>&1 &
	spid=$!
	crc=125 src=125
	if ! wait_listen "$sns" "$PORT" 15 "$spid"; then
		wait_gone "$spid" 1
		src=$?
		spid=""
		echo "server did not listen on $PORT: $(why "$R.sout")" >"$R.cout"
		return 1
	fi
	timeout -k 5 "$secs" ip netns exec "$cns" env "${C_ENV[@]}" "$cpu" -o "$R.ccpu" -- \
		"${C_CMD[@]}" >"$R.cout" 2>&1
	crc=$?
	wait_gone "$spid" 15
	src=$?
	spid=""
	[ "$crc" = 124 ] && echo "client timed out after $secs s" >>"$R.cout"
	[ "$crc" = 0 ] && [ "$src" = 0 ]
}
# fail_note: why the last pair failed
fail_note() {
	local w
	w=$(why "$R.cout" "$R.sout")
	echo "exit client $crc server $src: ${w:-no output}"
}

# ---------------------------------------------------------------- measurements
ucx_env() { C_ENV=(LD_PRELOAD="$ccso" UIWARP_BENCH_CC="$cur_cc" UCX_TLS=tcp UCX_NET_DEVICES="$dev"
	UCX_WARN_UNUSED_ENV_VARS=n)
	S_ENV=("${C_ENV[@]}"); }
fi_env() { C_ENV=(LD_PRELOAD="$ccso" UIWARP_BENCH_CC="$cur_cc" FI_TCP_IFACE="$dev")
	S_ENV=("${C_ENV[@]}"); }
# uiwarp's environment; with cur_tls (a TLS 1.3 suite) its TLS stream, PSK
# authentication (the tls group)
cur_tls=""
tlspsk=75697761727020626563686d61726b20707265736861726564206b6579212121
uiw_env() {
	C_ENV=(UIWARP_TCP_CONGESTION="$cur_cc")
	[ -n "$cur_tls" ] && C_ENV+=(UIWARP_TLS=on UIWARP_TLS_PSK="$tlspsk" UIWARP_TLS_CIPHERS="$cur_tls")
	S_ENV=("${C_ENV[@]}")
}

# raw TCP stream: tcpbench bw, TCP_NODELAY (-N) as uiwarp sets on its sockets
m_tcp_bw() {
	local size=$1 l
	S_ENV=() C_ENV=()
	S_CMD=("$tcpbench" server -B "$addr" -p @PORT@ -n 1 -T 300 -C "$cur_cc")
	C_CMD=("$tcpbench" bw -H "$addr" -p @PORT@ -s "$size" -t "$dur" -N -C "$cur_cc")
	if pair "tcp-bw-$size" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(grep '^bw ' "$R.cout") && [ -n "$l" ]; then
		local g m b
		g=$(sed -n 's/.*Gbit\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		m=$(sed -n 's/.*msg\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		b=$(sed -n 's/.* rcvd=\([0-9]*\).*/\1/p' <<<"$l")
		rec tcp stream "$size" gbps "$g"
		rec tcp stream "$size" mpps "$(awk -v m="$m" 'BEGIN { printf "%.4f", m / 1e6 }')"
		rec_cpu tcp stream "$size" "$b"
		progress "tcp stream $size B: $g Gbit/s"
	else
		rec tcp stream "$size" gbps fail "$(fail_note)"
		progress "tcp stream $size B: FAIL"
	fi
}

# the framing floor: MPA FPDUs with CRC32c over a plain TCP socket, no RDMA
# (uiwarp-bench-mpa: one-copy receive, gathered sends, blocking sockets)
m_mpa_bw() {
	local size=$1 l
	S_ENV=() C_ENV=()
	S_CMD=("$mpabin" server -B "$addr" -p @PORT@ -T 300 -C "$cur_cc")
	C_CMD=("$mpabin" bw -H "$addr" -p @PORT@ -s "$size" -t "$dur" -C "$cur_cc")
	if pair "mpa-bw-$size" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(grep '^bw ' "$R.cout") && [ -n "$l" ]; then
		local g b
		g=$(sed -n 's/.*Gbit\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		b=$(sed -n 's/.* rcvd=\([0-9]*\).*/\1/p' <<<"$l")
		rec mpa stream "$size" gbps "$g"
		rec_cpu mpa stream "$size" "$b"
		progress "MPA framing + CRC over TCP $size B: $g Gbit/s"
	else
		rec mpa stream "$size" gbps fail "$(fail_note)"
		progress "MPA framing + CRC over TCP $size B: FAIL"
	fi
}

# uiwarp: perftest ib_{write,read,send}_bw -R under uiwarp-run on both ends
m_pt_bw() {
	local op=$1 size=$2 l rop=""
	[ -n "$cur_tls" ] && rop=":$cur_tls"
	uiw_env
	S_CMD=("$run" "ib_${op}_bw" -R -F -p @PORT@ -D "$dur" -s "$size" --report_gbits)
	C_CMD=("${S_CMD[@]}" "$addr")
	if pair "uiw-$op-bw-$size" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(awk -v s="$size" '$1 == s && NF >= 5 { print $2, $5 }' "$R.cout" | tail -n1) &&
		[ -n "$l" ]; then
		local it mr g
		read -r it mr <<<"$l"
		g=$(awk -v m="$mr" -v s="$size" 'BEGIN { printf "%.4f", m * s * 8 / 1000 }')
		rec uiwarp "$op$rop" "$size" gbps "$g"
		rec uiwarp "$op$rop" "$size" mpps "$mr"
		rec_cpu uiwarp "$op$rop" "$size" "$((it * size))"
		progress "uiwarp $op$rop $size B: $g Gbit/s"
	else
		rec uiwarp "$op$rop" "$size" gbps fail "$(fail_note)"
		progress "uiwarp $op$rop $size B: FAIL"
	fi
}

# the tls group's baseline: a TLS 1.3 socket stream (uiwarp-bench-tls, PSK,
# TCP_NODELAY) with the suite cur_tls; recorded as tool "tls", op "stream:SUITE"
m_tls_bw() {
	local size=$1 l
	S_ENV=() C_ENV=()
	S_CMD=("$tlsbin" server -B "$addr" -p @PORT@ -T 300 -C "$cur_cc" -c "$cur_tls")
	C_CMD=("$tlsbin" bw -H "$addr" -p @PORT@ -s "$size" -t "$dur" -C "$cur_cc" -c "$cur_tls")
	if pair "tls-bw-$size" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(grep '^bw ' "$R.cout") && [ -n "$l" ]; then
		local g b
		g=$(sed -n 's/.*Gbit\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		b=$(sed -n 's/.* rcvd=\([0-9]*\).*/\1/p' <<<"$l")
		rec tls "stream:$cur_tls" "$size" gbps "$g"
		rec_cpu tls "stream:$cur_tls" "$size" "$b"
		progress "TLS socket $cur_tls $size B: $g Gbit/s"
	else
		rec tls "stream:$cur_tls" "$size" gbps fail "$(fail_note)"
		progress "TLS socket $cur_tls $size B: FAIL"
	fi
}

# message rate with batching: perftest --post_list 16 (16 WRs per
# ibv_post_send) at 64 B; raw TCP counterpart: 16 messages of 64 B per send()
# (tcpbench bw -s 1024 -N), counted as 64 B messages
m_pt_rate() {
	local op=$1 l
	uiw_env
	S_CMD=("$run" "ib_${op}_bw" -R -F -p @PORT@ -D "$dur" -s 64 --post_list 16 --report_gbits)
	C_CMD=("${S_CMD[@]}" "$addr")
	if pair "uiw-$op-rate" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(awk '$1 == 64 && NF >= 5 { print $2, $5 }' "$R.cout" | tail -n1) && [ -n "$l" ]; then
		local it mr
		read -r it mr <<<"$l"
		rec uiwarp "${op}_pl16" 64 mpps "$mr"
		rec_cpu uiwarp "${op}_pl16" 64 "$((it * 64))"
		progress "uiwarp $op 64 B --post_list 16: $mr M/s"
	else
		rec uiwarp "${op}_pl16" 64 mpps fail "$(fail_note)"
		progress "uiwarp $op 64 B --post_list 16: FAIL"
	fi
}
m_tcp_rate() {
	local l
	S_ENV=() C_ENV=()
	S_CMD=("$tcpbench" server -B "$addr" -p @PORT@ -n 1 -T 300 -C "$cur_cc")
	C_CMD=("$tcpbench" bw -H "$addr" -p @PORT@ -s 1024 -t "$dur" -N -C "$cur_cc")
	if pair "tcp-rate" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(grep '^bw ' "$R.cout") && [ -n "$l" ]; then
		local m b
		m=$(sed -n 's/.*msg\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		b=$(sed -n 's/.* rcvd=\([0-9]*\).*/\1/p' <<<"$l")
		m=$(awk -v m="$m" 'BEGIN { printf "%.4f", m * 16 / 1e6 }')
		rec tcp stream_x16 64 mpps "$m"
		rec_cpu tcp stream_x16 64 "$b"
		progress "tcp 16 x 64 B per send: $m M/s"
	else
		rec tcp stream_x16 64 mpps fail "$(fail_note)"
		progress "tcp 16 x 64 B per send: FAIL"
	fi
}

# iterations for ucx_perftest / fi_pingpong (no duration option): from the
# rate the same row had last time, else a guess; aimed at $dur seconds
declare -A ITERS
iters_for() { # KEY GUESS
	echo "${ITERS[$1]:-$2}"
}
iters_next() { # KEY ITERS SECONDS_IT_TOOK TARGET_SECONDS
	ITERS[$1]=$(awk -v n="$2" -v t="$3" -v d="$4" 'BEGIN { if (t <= 0) t = d; x = n * d / t
		if (x > 4 * n) x = 4 * n; if (x < n / 4) x = n / 4
		if (x < 500) x = 500; if (x > 5000000) x = 5000000; printf "%d", x }')
}

# UCX over TCP: put_bw (UCT tcp, zcopy) and tag_bw (UCP), same path and cc
m_ucx_bw() {
	local op=$1 size=$2 key n l
	key="ucx-$op-$cur_path-$cur_cc-$size"
	n=$(iters_for "$key" "$(awk -v s="$size" -v d="$dur" \
		'BEGIN { r = s <= 64 ? 150000 * s : 2.5e9; printf "%d", r * d / s }')")
	ucx_env
	S_CMD=(ucx_perftest -p @PORT@)
	C_CMD=(ucx_perftest "$addr" -p @PORT@ -f -s "$size" -n "$n" -w $((n / 10 + 10)))
	if [ "$op" = put ]; then
		C_CMD+=(-t put_bw -x tcp -d "$dev" -D zcopy)
	else
		C_CMD+=(-t tag_bw)
	fi
	if pair "ucx-$op-bw-$size" 120 &&
		l=$(awk 'NF == 8 && $1 ~ /^[0-9]+$/ { l = $0 } END { print l }' "$R.cout") &&
		[ -n "$l" ]; then
		local it bw mr g secs
		read -r it _ _ _ bw _ mr _ <<<"$l"
		g=$(awk -v b="$bw" 'BEGIN { printf "%.4f", b * 1048576 * 8 / 1e9 }')
		rec ucx "$op" "$size" gbps "$g"
		rec ucx "$op" "$size" mpps "$(awk -v m="$mr" 'BEGIN { printf "%.4f", m / 1e6 }')"
		rec_cpu ucx "$op" "$size" "$((it * size))"
		secs=$(awk -v b="$bw" -v n="$it" -v s="$size" 'BEGIN { if (b > 0) print n * s / (b * 1048576); else print 0 }')
		iters_next "$key" "$it" "$secs" "$dur"
		progress "ucx ${op}_bw $size B: $g Gbit/s"
	else
		rec ucx "$op" "$size" gbps fail "$(fail_note)"
		progress "ucx ${op}_bw $size B: FAIL"
	fi
}

# perftest latency, 64 B: typical and 99th percentile (write and send: half
# the round trip; read: the whole round trip, as perftest prints them)
m_pt_lat() {
	local op=$1 l
	uiw_env
	S_CMD=("$run" "ib_${op}_lat" -R -F -p @PORT@ -s 64 -n "$latn")
	C_CMD=("${S_CMD[@]}" "$addr")
	if pair "uiw-$op-lat" $((40 + latn / 500)) &&
		l=$(awk '$1 == 64 && NF >= 8 { print $5, $8 }' "$R.cout" | tail -n1) && [ -n "$l" ]; then
		local t p
		read -r t p <<<"$l"
		rec uiwarp "${op}_lat" 64 typ_us "$t"
		rec uiwarp "${op}_lat" 64 p99_us "$p"
		progress "uiwarp ${op}_lat 64 B: $t us typical, $p us 99%"
	else
		rec uiwarp "${op}_lat" 64 typ_us fail "$(fail_note)"
		progress "uiwarp ${op}_lat: FAIL"
	fi
}

# raw TCP ping-pong, 64 B, half round trip: -P both ends busy-poll
m_tcp_pp() {
	local mode=$1 l flag=()
	[ "$mode" = spin ] && flag=(-P)
	S_ENV=() C_ENV=()
	S_CMD=("$tcpbench" server -B "$addr" -p @PORT@ -n 1 -T 300 -C "$cur_cc")
	C_CMD=("$tcpbench" pp -H "$addr" -p @PORT@ -s 64 -t "$dur" "${flag[@]}" -C "$cur_cc")
	if pair "tcp-pp-$mode" "$(awk -v d="$dur" 'BEGIN { printf "%d", d + 40 }')" &&
		l=$(grep '^pp' "$R.cout") && [ -n "$l" ]; then
		local t p
		t=$(sed -n 's/.*median=\([0-9.]*\).*/\1/p' <<<"$l")
		p=$(sed -n 's/.*p99=\([0-9.]*\).*/\1/p' <<<"$l")
		rec tcp "pp_$mode" 64 typ_us "$t"
		rec tcp "pp_$mode" 64 p99_us "$p"
		progress "tcp pp $mode 64 B: $t us median, $p us 99%"
	else
		rec tcp "pp_$mode" 64 typ_us fail "$(fail_note)"
		progress "tcp pp $mode: FAIL"
	fi
}

# UCX am_lat (UCT tcp, bcopy), 64 B: 50th percentile, busy-polling
m_ucx_lat() {
	local key n l
	key="ucx-lat-$cur_path-$cur_cc"
	n=$(iters_for "$key" 50000)
	ucx_env
	S_CMD=(ucx_perftest -p @PORT@)
	C_CMD=(ucx_perftest "$addr" -p @PORT@ -f -s 64 -n "$n" -w $((n / 10 + 10)) -t am_lat -x tcp
		-d "$dev" -D bcopy)
	if pair ucx-am-lat 120 &&
		l=$(awk 'NF == 8 && $1 ~ /^[0-9]+$/ { l = $0 } END { print l }' "$R.cout") &&
		[ -n "$l" ]; then
		local it t avg
		read -r it t avg _ <<<"$l"
		rec ucx am_lat 64 typ_us "$t"
		iters_next "$key" "$it" "$(awk -v n="$it" -v a="$avg" 'BEGIN { print n * a * 2e-6 }')" "$dur"
		progress "ucx am_lat 64 B: $t us"
	else
		rec ucx am_lat 64 typ_us fail "$(fail_note)"
		progress "ucx am_lat: FAIL"
	fi
}

# libfabric tcp provider, fi_pingpong -e msg, 64 B: usec/xfer (mean half
# round trip; it busy-polls its CQ)
m_fi_lat() {
	local key n l
	key="fi-lat-$cur_path-$cur_cc"
	n=$(iters_for "$key" 50000)
	fi_env
	S_CMD=(fi_pingpong -p tcp -e msg -B @PORT@ -S 64 -I "$n")
	C_CMD=(fi_pingpong -p tcp -e msg -P @PORT@ -S 64 -I "$n" "$addr")
	if pair fi-pingpong 120 &&
		l=$(awk 'h && NF >= 7 { print $7; exit } /^bytes/ { h = 1 }' "$R.cout") && [ -n "$l" ]; then
		rec fabric pingpong 64 avg_us "$l"
		iters_next "$key" "$n" "$(awk -v n="$n" -v a="$l" 'BEGIN { print n * a * 2e-6 }')" "$dur"
		progress "libfabric tcp fi_pingpong 64 B: $l us"
	else
		rec fabric pingpong 64 avg_us fail "$(fail_note)"
		progress "libfabric fi_pingpong: FAIL"
	fi
}

# N QPs in one process (uiwarp-bench-qps) against N TCP sockets in one
# process (uiwarp-bench-tcpconns, epoll), 64 KiB messages
m_qps() {
	local kind=$1 n=$2 l secs
	secs=$(awk -v d="$dur" -v n="$n" 'BEGIN { printf "%d", d + 60 + n / 20 }')
	if [ "$kind" = uiwarp ]; then
		uiw_env
		S_CMD=("$run" "$qpsbin" server -b "$addr" -p @PORT@ -T "$secs")
		C_CMD=("$run" "$qpsbin" client -a "$addr" -p @PORT@ -n "$n" -s 65536 -w 8 -t "$dur"
			-T "$secs")
	else
		S_ENV=() C_ENV=()
		S_CMD=("$tcbin" server -b "$addr" -p @PORT@ -C "$cur_cc" -T "$secs")
		C_CMD=("$tcbin" client -a "$addr" -p @PORT@ -n "$n" -s 65536 -t "$dur" -C "$cur_cc"
			-T "$secs")
	fi
	if pair "$kind-qps-$n" $((secs + 20)) && l=$(grep 'Gbit/s=' "$R.cout") && [ -n "$l" ]; then
		local g b tc ts
		g=$(sed -n 's/.*Gbit\/s=\([0-9.]*\).*/\1/p' <<<"$l")
		b=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$l")
		read -r _ _ tc _ <<<"$(cpu_of "$R.ccpu")"
		read -r _ _ ts _ <<<"$(cpu_of "$R.scpu")"
		rec "$kind" qps "$n" gbps "$g"
		rec "$kind" qps "$n" threads_c "$tc"
		rec "$kind" qps "$n" threads_s "$ts"
		rec_cpu "$kind" qps "$n" "$b"
		progress "$kind $n QPs/sockets: $g Gbit/s, threads $tc/$ts"
	else
		rec "$kind" qps "$n" gbps fail "$(fail_note)"
		progress "$kind $n QPs/sockets: FAIL"
	fi
}

# The main job: uiwarp-replicate over RDMA Writes and with --tcp, same
# input (synced, then read once untimed), congestion control for both from
# UIWARP_TCP_CONGESTION. The copy is checked by the tool (CRC32c, verified by
# the receiver); the timed part is the tool's own figure.
input=""
job_input() {
	[ -n "$input" ] && return 0
	mkdir -p "$parent" || die "cannot use $parent"
	work=$(mktemp -d "$parent/uiwarp-bench.XXXXXX") || die "cannot make a temp dir in $parent"
	input="$work/input"
	say "writing $jobsize of input from /dev/urandom to $input"
	timeout --foreground 900 head -c "$jobbytes" /dev/urandom >"$input" || die "cannot write $input"
	# on stable storage before any timed copy, then a settle
	sync "$input" || die "sync $input failed"
	sleep 2
	# untimed warm-up copy (reads the input into the page cache for both modes)
	local saved_cc=$cur_cc
	say "untimed warm-up copy"
	m_job rdma warmup
	cur_cc=$saved_cc
}
m_job() {
	local mode=$1 warm=${2:-} extra=() sextra=() l jt jop=replicate
	[ "$mode" = tcp ] && extra=(--tcp)
	# the tls group: both modes with --tls (uiwarp's TLS stream / TLS on
	# the sockets), the same PSK and suite
	[ -n "$cur_tls" ] && extra+=(--tls) && jop="replicate:$cur_tls"
	[ "$jobstreams" -gt 1 ] && sextra=(--streams "$jobstreams")
	jt=$((120 + jobbytes / (20 * 1048576)))
	uiw_env
	S_CMD=("$repbin" recv --bind "$addr" --port @PORT@ --timeout "$jt" --quiet "${extra[@]}"
		"$work/copy")
	C_CMD=("$repbin" send --port @PORT@ --timeout "$jt" --quiet "${extra[@]}" "${sextra[@]}"
		"$input" "$addr")
	pair "job-$mode${warm:+-$warm}" $((jt + 30))
	local ok=$?
	rm -f "$work/copy" "$work/copy.part"
	[ -n "$warm" ] && return 0
	if [ "$ok" = 0 ] && l=$(grep -m1 ' MiB/s' "$R.cout") && [ -n "$l" ]; then
		local m b
		m=$(sed -n 's/.* s: \([0-9.]*\) MiB\/s.*/\1/p' <<<"$l")
		b=$(sed -n 's/.* sent \([0-9]*\) bytes.*/\1/p' <<<"$l")
		rec "$([ "$mode" = tcp ] && echo tcp || echo uiwarp)" "$jop" "$jobbytes" mibps "$m"
		rec_cpu "$([ "$mode" = tcp ] && echo tcp || echo uiwarp)" "$jop" "$jobbytes" "$b"
		progress "job $mode${cur_tls:+ TLS}: $m MiB/s"
	else
		rec "$([ "$mode" = tcp ] && echo tcp || echo uiwarp)" "$jop" "$jobbytes" mibps fail \
			"$(fail_note)"
		progress "job $mode${cur_tls:+ TLS}: FAIL"
	fi
}

# The storage group (issue #11). tgt's iSER target read by iscsi-perf over
# iser:// under uiwarp-run against the same tgtd's iSCSI/TCP portal read
# without it (tests/programs/iser.sh's perf mode, in namespaces of its own:
# MODE lo, or ns = two namespaces joined by a veth pair), both request
# sizes, the transport that goes first alternating; every TCP socket of
# tgtd, libiscsi and uiwarp gets the row's congestion control (the preload).
m_iser() {
	local mode=$1 order="iser tcp" tr b v tool op rc
	[ $((rep % 2)) = 0 ] && order="tcp iser"
	seq=$((seq + 1))
	R="$raw/$(printf '%05d' "$seq")-$cur_path-$cur_cc-iser"
	timeout -k 10 $((8 * isecs + 120)) env LD_PRELOAD="$ccso" UIWARP_BENCH_CC="$cur_cc" \
		UIWARP_TCP_CONGESTION="$cur_cc" UIWV_ISER_PERF="$isecs" UIWV_ISER_PERF_ORDER="$order" \
		UIWV_LOG_DIR="$R.d" bash "$root/tests/programs/iser.sh" "$run" "$mode" >"$R.out" 2>&1
	rc=$?
	for tr in iser tcp; do
		for b in 131072 262144; do
			tool=uiwarp op=iser
			[ "$tr" = tcp ] && tool=tcp op=iscsi
			v=$(sed -n "s/^RESULT transport=$tr bytes=$b mbps=\([0-9]*\)\$/\1/p" "$R.out")
			if [ -n "$v" ]; then
				rec "$tool" "$op" "$b" mbps "$v"
			else
				rec "$tool" "$op" "$b" mbps fail "exit $rc: $(why "$R.out")"
			fi
		done
	done
	progress "iSER / iSCSI-TCP ($mode): $(grep -c '^RESULT' "$R.out") of 4 runs" \
		"$(sed -n 's/^RESULT transport=\([a-z]*\) bytes=\([0-9]*\) mbps=\([0-9]*\)/\1 \2 \3 MB\/s;/p' "$R.out" | tr '\n' ' ')"
}
# A Ceph cluster of tests/programs/ceph.sh (mon, mgr and osd.0 in one
# namespace, osd.1 in another, a veth pair; pool of size 2): rados bench
# write then seq, 16 x 4 MiB in flight, MODE rdma (async+rdma over uiwarp)
# or posix (async+posix), the row's congestion control on every socket.
m_ceph() {
	local mode=$1 tool=uiwarp w sq rc
	[ "$mode" = posix ] && tool=tcp
	seq=$((seq + 1))
	R="$raw/$(printf '%05d' "$seq")-$cur_path-$cur_cc-ceph-$mode"
	timeout -k 10 $((4 * cephsecs + 400)) env LD_PRELOAD="$ccso" UIWARP_BENCH_CC="$cur_cc" \
		UIWARP_TCP_CONGESTION="$cur_cc" UIWARP_CEPH=1 BENCH_SECS="$cephsecs" \
		UIWV_LOG_DIR="$R.d" bash "$root/tests/programs/ceph.sh" "$run" "$mode" >"$R.out" 2>&1
	rc=$?
	w=$(sed -n "s/^RESULT mode=$mode up=y .* write=\([0-9.]*\) seq=.*/\1/p" "$R.out" | tail -1)
	sq=$(sed -n "s/^RESULT mode=$mode up=y .* seq=\([0-9.]*\) .*/\1/p" "$R.out" | tail -1)
	if [ "$rc" = 0 ] && [ -n "$w" ] && [ -n "$sq" ]; then
		rec "$tool" ceph-write 4194304 mbps "$w"
		rec "$tool" ceph-seq 4194304 mbps "$sq"
		progress "Ceph $mode: write $w MB/s, seq $sq MB/s"
	else
		rec "$tool" ceph-write 4194304 mbps fail "exit $rc: $(why "$R.out")"
		rec "$tool" ceph-seq 4194304 mbps fail "exit $rc: $(why "$R.out")"
		progress "Ceph $mode: FAIL (exit $rc)"
	fi
}

# rotate K WORD...: the words, starting at the K-th (mod count)
rotate() {
	local k=$1
	shift
	local n=$# i a=("$@")
	for ((i = 0; i < n; i++)); do echo "${a[$(((i + k) % n))]}"; done
}

# ---------------------------------------------------------------- run
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "command: $0 ${orig_args[*]}"
	echo "tree: $(git -C "$root" describe --always --dirty 2>/dev/null) ($(git -C "$root" rev-parse --abbrev-ref HEAD 2>/dev/null))"
	echo "build: $build (${btype:-unknown})"
	echo "kernel: $(uname -r); CPUs: $(nproc); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "paths: ${PATHS[*]}"
	echo "cc: ${CCS[*]}"
	echo "runs: $runs"
	echo "sizes: ${SIZES[*]}"
	echo "groups: $groups"
	echo "qps: ${QPSL[*]}"
	echo "duration: $dur"
	echo "lat_iters: $latn"
	echo "job_size: $jobsize ($jobbytes bytes)"
	echo "perftest: $(dpkg-query -W -f='${Version}' perftest 2>/dev/null)"
	echo "ucx: $(dpkg-query -W -f='${Version}' ucx-utils 2>/dev/null)"
	echo "libfabric: $(dpkg-query -W -f='${Version}' libfabric-bin 2>/dev/null)"
	echo "tcpbench: $tcpbench"
	echo "wan_rate: $wanrate (wan: 25 ms each way, 0.1 % loss; wanloss: 1 %)"
	echo "job_streams: $jobstreams"
	echo "tls_suites: $tlssuites"
	echo "uiwarp_env: $(env | grep '^UIWARP_' | tr '\n' ' ')"
} >"$out/meta.txt"

plan | tee -a "$logf" >&2
say "results in $out"
ns_setup
echo "ns_default_cc: $(ip netns exec "$(set_path "${PATHS[0]}"; echo "$sns")" \
	cat /proc/sys/net/ipv4/tcp_congestion_control)" >>"$out/meta.txt"

for ((rep = 1; rep <= runs; rep++)); do
	for cur_path in "${PATHS[@]}"; do
		set_path "$cur_path"
		for cur_cc in "${CCS[@]}"; do
			if has_group bw; then
				for size in "${SIZES[@]}"; do
					tools=(tcp mpa write read send)
					# UCX and libfabric take one interface name for both
					# ends; the wan paths have two
					has_group peers && [[ $cur_path != wan* ]] && tools+=(ucx-put ucx-tag)
					for t in $(rotate "$rep" "${tools[@]}"); do
						case "$t" in
						tcp) m_tcp_bw "$size" ;;
						mpa) m_mpa_bw "$size" ;;
						ucx-put) m_ucx_bw put "$size" ;;
						ucx-tag) m_ucx_bw tag "$size" ;;
						*) m_pt_bw "$t" "$size" ;;
						esac
					done
				done
			fi
			if has_group rate; then
				for t in $(rotate "$rep" tcp write send); do
					if [ "$t" = tcp ]; then m_tcp_rate; else m_pt_rate "$t"; fi
				done
			fi
			if has_group lat; then
				tools=(write read send spin block)
				has_group peers && [[ $cur_path != wan* ]] && tools+=(ucx fabric)
				for t in $(rotate "$rep" "${tools[@]}"); do
					case "$t" in
					spin | block) m_tcp_pp "$t" ;;
					ucx) m_ucx_lat ;;
					fabric) m_fi_lat ;;
					*) m_pt_lat "$t" ;;
					esac
				done
			fi
			if has_group qps; then
				for n in "${QPSL[@]}"; do
					for t in $(rotate "$rep" uiwarp tcp); do m_qps "$t" "$n"; done
				done
			fi
			if has_group job; then
				job_input
				# the mode that goes first alternates
				for t in $(rotate "$rep" rdma tcp); do m_job "$t"; done
			fi
			if has_group tls; then
				for size in "${SIZES[@]}"; do
					tools=(write)
					for st in "${TLSS[@]}"; do tools+=("tls:$st" "write:$st"); done
					for t in $(rotate "$rep" "${tools[@]}"); do
						cur_tls=${t#*:}
						[ "$cur_tls" = "$t" ] && cur_tls=""
						case "$t" in
						tls:*) m_tls_bw "$size" ;;
						write*) m_pt_bw write "$size" ;;
						esac
						cur_tls=""
					done
				done
				if has_group job; then
					for st in "${TLSS[@]}"; do
						cur_tls=$st
						for t in $(rotate "$rep" rdma tcp); do m_job "$t"; done
						cur_tls=""
					done
				fi
			fi
			if has_group storage; then
				case "$cur_path" in
				lo) m_iser lo ;;
				veth)
					m_iser ns
					for t in $(rotate "$rep" rdma posix); do m_ceph "$t"; done
					;;
				esac
			fi
		done
	done
done

el=$(($(date +%s) - t_start))
echo "elapsed: $((el / 60)) min $((el % 60)) s" >>"$out/meta.txt"
say "all runs done in $((el / 60)) min $((el % 60)) s; summarizing"
"$py" "$root/scripts/bench_summary.py" "$out" || die "the summary failed (samples in $samples)"
summarized=1
say "table: $out/summary.md; plots: $(cd "$out" && ls ./*.png 2>/dev/null | tr '\n' ' ')"
exit 0
