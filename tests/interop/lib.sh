# shellcheck shell=bash
# Helpers for the uiwarp <-> kernel siw interop matrix (tests/interop).
#
# The peer is Linux Soft-iWARP in the qemu lab (../shared/lab, or $UIWARP_LAB):
# host side = netns "iwlab", 198.51.100.1 on tap0, programs run with ns.sh
# under uiwarp-run; guest side = 198.51.100.2, siw0, programs run with exec.sh.
#
#   ilab_init            finds the lab and the tools, boots the guest if needed
#                        (exit 77 with a clear message when the lab cannot run)
#   siw_set k=v ...      sets siw module parameters (new connections)
#   siw_reset            siw's defaults
#   cap_start NAME PORT / cap_stop    tcpdump on tap0 (host side of the link)
#   gbg VAR SECS NAME 'CMD'           guest job in the background (exec.sh -t)
#   hrun SECS NAME [ENV=V ...] PROG ARGS...   host program over uiwarp, in the netns
#   hbg  VAR SECS NAME [ENV=V ...] PROG ARGS...  same, in the background
#   result CASE PASS|FAIL|XFAIL NOTE  appends to the results table
set -u

IL_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IL_ROOT=$(cd "$IL_SRC/../.." && pwd)
E2E_SRC=$IL_ROOT/tests/e2e
PYTHON=${PYTHON:-python3}
GIP=198.51.100.2
HIP=198.51.100.1
IL_PIDS=()
IL_BOOTED=0

il_log() { printf '[interop %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
il_skip() {
	il_log "SKIP: $*"
	exit 77
}

# Sends signal SIG to those of IL_PIDS that are still children of this
# shell: a job that ended was reaped by bash and its PID may belong to
# another program by now (pid_max 32768 wraps within a matrix run; a plain
# kill of every recorded PID once killed another session's daemons).
il_kill_ours() { # SIG
	local p
	for p in "${IL_PIDS[@]}"; do
		[ "$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')" = "$$" ] && kill "-$1" "$p" 2>/dev/null
	done
}

il_cleanup() {
	local rc=$?
	il_kill_ours TERM
	sleep 0.5
	il_kill_ours KILL
	if [ "$IL_BOOTED" = 1 ] && [ "${UIWARP_LAB_KEEP:-0}" != 1 ]; then
		il_log "stopping the lab guest we booted"
		"$LAB/stop.sh" --netns >/dev/null 2>&1
	elif [ -n "${LAB:-}" ] && [ -x "$LAB/exec.sh" ]; then
		siw_reset >/dev/null 2>&1
		"$LAB/exec.sh" -t 20 'lab-netem off' >/dev/null 2>&1
	fi
	exit "$rc"
}

ilab_init() {
	[ "$(id -u)" = 0 ] || il_skip "interop needs root (the lab's netns and qemu)"
	UIW_BUILD=${UIW_BUILD:-}
	[ -x "$UIW_BUILD/bin/uiwarp-run" ] || { il_log "FAIL: UIW_BUILD/bin/uiwarp-run missing"; exit 1; }
	if [ -n "${UIWARP_LAB:-}" ]; then
		LAB=$UIWARP_LAB
	elif [ -d "$IL_ROOT/../shared/lab" ]; then
		LAB=$(cd "$IL_ROOT/../shared/lab" && pwd)
	else
		il_skip "no siw lab: set UIWARP_LAB to the lab directory (../shared/lab not found from $IL_ROOT)"
	fi
	[ -x "$LAB/start.sh" ] && [ -x "$LAB/exec.sh" ] && [ -x "$LAB/ns.sh" ] ||
		il_skip "UIWARP_LAB=$LAB is not the siw lab (no start.sh/exec.sh/ns.sh)"
	local t
	for t in tcpdump tshark rping ib_write_bw ib_read_bw ib_send_bw ib_send_lat timeout; do
		command -v "$t" >/dev/null || il_skip "$t not installed on the host"
	done
	LAB_CACHE=${LAB_CACHE:-/var/tmp/iwlab-cache}
	LAB_SHARE=${LAB_SHARE:-$LAB_CACHE/share}
	if ! [ -f "$LAB_CACHE/guest.img" ] || ! [ -f "$LAB_CACHE/vmlinuz" ]; then
		if [ "${UIWARP_INTEROP_BUILD_LAB:-1}" = 1 ]; then
			command -v qemu-system-x86_64 >/dev/null || [ -x /usr/sbin/debootstrap ] ||
				il_log "lab packages missing: build.sh installs them"
			il_log "lab not built: running $LAB/build.sh (about 4 min, needs network + apt; UIWARP_INTEROP_BUILD_LAB=0 to skip instead)"
			timeout 1200 "$LAB/build.sh" >"$IL_OUT/lab-build.log" 2>&1 ||
				il_skip "lab build failed (log: $IL_OUT/lab-build.log)"
		else
			il_skip "lab not built ($LAB_CACHE/guest.img missing) and UIWARP_INTEROP_BUILD_LAB=0"
		fi
	fi
	trap il_cleanup EXIT
	trap 'exit 130' INT TERM HUP
	if ! "$LAB/exec.sh" -t 20 true >/dev/null 2>&1; then
		il_log "booting the lab guest ($LAB/start.sh)"
		LAB_BOOT_TIMEOUT=${LAB_BOOT_TIMEOUT:-300} "$LAB/start.sh" >"$IL_OUT/lab-start.log" 2>&1 ||
			il_skip "lab guest did not boot (log: $IL_OUT/lab-start.log)"
		IL_BOOTED=1
	fi
	"$LAB/exec.sh" -t 30 'ibv_devices | grep -q siw0 && test -d /sys/module/siw/parameters' ||
		il_skip "lab guest has no siw0 or no siw module parameters (built with LAB_SIW_STOCK=1?)"
	# iw_cmtool into the share (the guest runs the same binary over siw)
	mkdir -p "$LAB_SHARE/interop/bin" "$LAB_SHARE/interop/lib"
	cp -f "$UIW_BUILD/bin/iw_cmtool" "$LAB_SHARE/interop/bin/" 2>/dev/null ||
		{ il_log "FAIL: $UIW_BUILD/bin/iw_cmtool not built"; exit 1; }
	cp -f "$UIW_BUILD/bin/uiwarp-replicate" "$LAB_SHARE/interop/bin/"
	# uiwarp-replicate uses ISA-L for its checksum; the guest image has none
	local isal
	isal=$(ldd "$UIW_BUILD/bin/uiwarp-replicate" | awk '/libisal/ {print $3}')
	[ -n "$isal" ] && cp -fL "$isal" "$LAB_SHARE/interop/lib/"
	UIW_RUN=("$UIW_BUILD/bin/uiwarp-run")
	siw_reset
}
# A few ms of delay on the link (netem in the guest): kernel siw (6.1) has a
# race in siw_accept() -- it sends the MPA Reply and only then installs the
# data_ready callback that reads the RTR / first FPDU; a peer answering faster
# than that (uiwarp on the host vs siw under TCG: ~0.1 ms) leaves the RTR
# unread in the socket and the connection stalls, and killing the stalled
# server then hits BUG() in iw_cm (docs/interop.md, "siw bugs"). The delay
# only widens the gap between Reply and RTR. UIWARP_INTEROP_NETEM=off: none.
lab_netem() {
	local a=${UIWARP_INTEROP_NETEM:-delay 5ms}
	"$LAB/exec.sh" -t 30 "lab-netem off; [ '$a' = off ] || lab-netem '$a'" >/dev/null 2>&1
}
# siw's debug messages into dmesg (each case saves guest-dmesg.txt)
siw_debug() {
	"$LAB/exec.sh" -t 15 "echo 'module siw +p' > /sys/kernel/debug/dynamic_debug/control" >/dev/null 2>&1
}

G() { "$LAB/exec.sh" "$@"; }

SIW_P=/sys/module/siw/parameters
siw_set() {
	local kv cmd=""
	for kv in "$@"; do cmd+="echo ${kv#*=} > $SIW_P/${kv%%=*}; "; done
	G -t 20 "$cmd" >/dev/null
}
siw_reset() {
	siw_set mpa_version=2 mpa_crc_required=0 mpa_crc_strict=0 peer_to_peer=0 rtr_type=0xc000 try_gso=0
}
siw_show() {
	G -t 20 "cd $SIW_P && for f in mpa_version mpa_crc_required mpa_crc_strict peer_to_peer rtr_type try_gso; do printf '%s=%s ' \$f \$(cat \$f); done; echo"
}

cap_start() { # NAME PORT
	CAP_FILE=$CASE_DIR/$1.pcap
	"$LAB/ns.sh" tcpdump --immediate-mode -B 131072 -U -s 0 -i tap0 -w "$CAP_FILE" "tcp port $2" 2>"$CASE_DIR/$1.tcpdump.log" &
	CAP_PID=$!
	IL_PIDS+=("$CAP_PID")
	local i
	for ((i = 0; i < 50; i++)); do
		grep -q "listening on" "$CASE_DIR/$1.tcpdump.log" 2>/dev/null && break
		sleep 0.1
	done
	sleep 0.2
}
cap_stop() {
	sleep 0.5
	kill -INT "$CAP_PID" 2>/dev/null
	local i
	for ((i = 0; i < 50; i++)); do
		kill -0 "$CAP_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$CAP_PID" 2>/dev/null
	wait "$CAP_PID" 2>/dev/null
	# an incomplete capture cannot be checked (tshark loses the FPDU framing)
	if grep -qE '^[1-9][0-9]* packets dropped by kernel' "${CAP_FILE%.pcap}.tcpdump.log"; then
		bad "capture incomplete: tcpdump $(grep 'dropped by kernel' "${CAP_FILE%.pcap}.tcpdump.log")"
	fi
}

# gbg VAR SECS NAME 'CMD' : guest job, output in $CASE_DIR/NAME.out, rc in NAME.rc
gbg() {
	local var=$1 secs=$2 name=$3 cmd=$4
	(
		"$LAB/exec.sh" -t "$secs" "$cmd" >"$CASE_DIR/$name.out" 2>&1
		echo $? >"$CASE_DIR/$name.rc"
	) &
	local p=$!
	IL_PIDS+=("$p")
	printf -v "$var" '%s' "$p"
}
# grun SECS NAME 'CMD' : guest job in the foreground
grun() {
	"$LAB/exec.sh" -t "$1" "$3" >"$CASE_DIR/$2.out" 2>&1
	local rc=$?
	echo $rc >"$CASE_DIR/$2.rc"
	return $rc
}
# hrun SECS NAME [VAR=VAL ...] PROG ARGS... : uiwarp program in the lab netns
hrun() {
	local secs=$1 name=$2
	shift 2
	"$LAB/ns.sh" timeout -k 5 "$secs" env "$@" >"$CASE_DIR/$name.out" 2>"$CASE_DIR/$name.err" &
	local p=$!
	IL_PIDS+=("$p")
	wait "$p"
	local rc=$?
	echo $rc >"$CASE_DIR/$name.rc"
	return $rc
}
hbg() {
	local var=$1 secs=$2 name=$3
	shift 3
	(
		"$LAB/ns.sh" timeout -k 5 "$secs" env "$@" >"$CASE_DIR/$name.out" 2>"$CASE_DIR/$name.err"
		echo $? >"$CASE_DIR/$name.rc"
	) &
	local p=$!
	IL_PIDS+=("$p")
	printf -v "$var" '%s' "$p"
}
# waits for a background job (subshell pid) up to SECS; returns its rc
jwait() {
	local pid=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		return 124
	fi
	wait "$pid" 2>/dev/null
	return $?
}
# host listener up on PORT in the lab netns
h_wait_listen() {
	local port=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		"$LAB/ns.sh" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
		sleep 0.1
	done
	return 1
}
# guest listener up on PORT
g_wait_listen() {
	G -t $(($2 + 5)) "for i in \$(seq $(($2 * 5))); do ss -Hltn 'sport = :$1' | grep -q . && exit 0; sleep 0.2; done; exit 1" >/dev/null 2>&1
}

# the guest's kernel is broken (siw / iw_cm oops, BUG, hung agent)?
siw_broken() { # DMESG-FILE
	if ! "$LAB/exec.sh" -t 15 true >/dev/null 2>&1; then
		echo "agent dead" >>"$1"
		return 0
	fi
	grep -qE 'kernel BUG|BUG:|Oops|general protection|WARNING:.*(siw|iw_cm|iwcm)' "$1"
}
# siw bugs that do not break the kernel but fail a connection (docs/interop.md):
#  - siw_get_hdr() re-entered with a partial Send / Read Request header (split
#    across TCP segments, e.g. by a retransmission) over-reads into the next FPDU:
#    "rreq with mpa len" / "rx error -71"
siw_known_bug() { # DMESG-FILE -> prints the signature
	grep -m1 -oE 'rreq with mpa len [0-9]+' "$1"
}
lab_reboot() {
	"$LAB/stop.sh" >"$IL_OUT/lab-stop.log" 2>&1
	LAB_BOOT_TIMEOUT=${LAB_BOOT_TIMEOUT:-300} "$LAB/start.sh" >"$IL_OUT/lab-start.log" 2>&1 || return 1
	IL_REBOOTS=$((${IL_REBOOTS:-0} + 1))
	siw_reset
	siw_debug
	lab_netem
}

result() { # CASE STATUS NOTE
	printf '%-34s %-5s %s\n' "$1" "$2" "$3" | tee -a "$IL_OUT/results.txt"
}
