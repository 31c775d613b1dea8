#!/bin/bash
# ceph.sh UIWARP_RUN MODE: a throwaway Ceph 16.2 cluster across two network
# namespaces (Debian ceph-mon, ceph-mgr, ceph-osd, ceph-common; issue 11,
# docs/storage.md): namespace A (203.0.113.1) runs mon.a, mgr.x and osd.0,
# namespace B (203.0.113.2) osd.1, joined by a veth pair; memstore OSDs
# (6 GiB each, in RAM as it fills: 10 s of 4 MiB writes at TCP's rate here
# put up to 3.3 GB on each, more than the 3 GiB this once had: the OSDs
# reached their full ratio and the data check after the benches timed out),
# cephx off, pool "bench" replicated with size 2 and min_size 2, so every
# write goes OSD to OSD.
# MODE rdma: ms_type async+rdma, ms_async_rdma_type iwarp,
# ms_async_rdma_cm true, every daemon and client (ceph, rados) under
# uiwarp-run with the receive pool sized as docs/storage.md says; MODE
# posix: Ceph's TCP messenger (the baseline). Waits (bounded, UP_TIMEOUT,
# default 180 s) for HEALTH_OK with every PG active+clean, runs rados bench
# write then seq (BENCH_SECS, default 10; 16 x 4 MiB in flight), then puts
# 24 MiB of random data from A, gets it in B and compares. Passes when the
# cluster came up, both benches ran and the data matched; prints
# "RESULT mode=M up=y time=Ns write=MB/s seq=MB/s data=ok". Everything is
# torn down on exit (trap): daemons, namespaces, temporary files.
# Skipped (77) unless UIWARP_CEPH=1 (scripts/test.sh's Ceph step, in CI,
# sets it and installs the packages; ~35 s per mode), without root, or
# without the packages. UIWV_LOG_DIR keeps the daemons' logs.
#
# Environment: RDMA_EXTRA (ceph.conf [global] lines for rdma mode,
# "\n"-separated, replacing the buffer counts), RDMA_DEFAULTS=1 (Ceph's own
# buffer counts), FAULT=1 (after the data check: a 20 s rados bench rand
# while osd.1 then osd.0 are marked down, FAULT_ROUNDS times; each rebinds
# and its connections are made again under load; then active+clean again
# and a second data check), CYCLES=N (at the end: N rados connections from
# namespace B, each reading an object; every one must succeed and no fatal
# QP event or Terminate may be logged), UP_TIMEOUT, BENCH_SECS, DEBUG_MS
# (default 1).
set -u
UIWARP_RUN=${1:?usage: ceph.sh UIWARP_RUN posix|rdma}
MODE=${2:?usage: ceph.sh UIWARP_RUN posix|rdma}
case "$MODE" in posix | rdma) ;; *)
	echo "mode must be posix or rdma" >&2
	exit 2
	;;
esac
if [ "${UIWARP_CEPH:-0}" != 1 ]; then
	echo "SKIP: the Ceph test runs only when asked: UIWARP_CEPH=1 (scripts/test.sh installs ceph then)"
	exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
for p in ceph-mon ceph-mgr ceph-osd ceph rados monmaptool ceph-authtool uuidgen ip; do
	command -v "$p" >/dev/null || { echo "SKIP: $p is not installed (Debian: ceph-mon ceph-mgr ceph-osd ceph-common)"; exit 77; }
done
OUT=${UIWV_LOG_DIR:-}
[ -n "$OUT" ] && OUT=$OUT/ceph-$MODE-$$
KEEP_OUT=${OUT:+1}
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/uiw-ceph-out.XXXXXX)
UP_TIMEOUT=${UP_TIMEOUT:-180}
BENCH_SECS=${BENCH_SECS:-10}
DEBUG_MS=${DEBUG_MS:-1}
export UIWARP_LOG=${UIWARP_LOG:-info}
export UIWARP_STATS_KEEP=0
NSA=uiwcephA$$ NSB=uiwcephB$$ IPA=203.0.113.1 IPB=203.0.113.2
VA=uwcA$$ VB=uwcB$$
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/cephrun.XXXXXX)
SUM=$OUT/summary.txt
: > "$SUM"
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$SUM"; }
PIDS=()

if [ "$MODE" = rdma ]; then WRAP=$UIWARP_RUN; else WRAP=; fi

ns_kill_all() {   # end every process inside our own namespaces (by pid)
	local ns p i
	for ns in $NSA $NSB; do
		ip netns list 2>/dev/null | grep -qw "^$ns" || continue
		for p in $(ip netns pids $ns 2>/dev/null); do kill -TERM "$p" 2>/dev/null; done
	done
	for i in $(seq 1 20); do
		local left=0
		for ns in $NSA $NSB; do
			ip netns list 2>/dev/null | grep -qw "^$ns" || continue
			[ -n "$(ip netns pids $ns 2>/dev/null)" ] && left=1
		done
		[ $left = 0 ] && break
		sleep 0.5
	done
	for ns in $NSA $NSB; do
		ip netns list 2>/dev/null | grep -qw "^$ns" || continue
		for p in $(ip netns pids $ns 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
	done
}

teardown() {
	local rc=$?
	trap - EXIT INT TERM
	log "teardown"
	local p
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 1
	ns_kill_all
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	ip netns del $NSA 2>/dev/null; ip netns del $NSB 2>/dev/null
	ip link del $VA 2>/dev/null
	[ "$rc" = 0 ] || tail -n 5 "$OUT"/*.stderr "$OUT/cli.stderr" 2>/dev/null | tail -n 40
	rm -rf "$RUN"
	for p in "${PIDS[@]}"; do rm -f /dev/shm/uiwarp-$p; done   # counter segments of our killed daemons
	log "done (rc=$rc)"
	[ -n "$KEEP_OUT" ] || rm -rf "$OUT"
	exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- network -------------------------------------------------------------------------------
ns_kill_all
ip netns del $NSA 2>/dev/null; ip netns del $NSB 2>/dev/null; ip link del $VA 2>/dev/null
ip netns add $NSA && ip netns add $NSB || exit 1
ip link add $VA type veth peer name $VB || exit 1
ip link set $VA netns $NSA; ip link set $VB netns $NSB
ip -n $NSA addr add $IPA/24 dev $VA; ip -n $NSB addr add $IPB/24 dev $VB
for ns in $NSA $NSB; do ip -n $ns link set lo up; done
ip -n $NSA link set $VA up; ip -n $NSB link set $VB up
ip netns exec $NSA ping -c1 -W2 $IPB >/dev/null || { log "veth ping failed"; exit 1; }

# --- config --------------------------------------------------------------------------------
FSID=$(uuidgen)
CONF=$RUN/ceph.conf
cat > "$CONF" <<EOF
[global]
fsid = $FSID
mon initial members = a
mon host = [v2:$IPA:3300,v1:$IPA:6789]
public network = 203.0.113.0/24
auth cluster required = none
auth service required = none
auth client required = none
keyring = $RUN/keyring
run dir = $RUN
admin socket = $RUN/\$name.asok
pid file = $RUN/\$name.pid
log file = $OUT/\$name.log
mon data = $RUN/mon.\$id
osd data = $RUN/osd.\$id
mgr data = $RUN/mgr.\$id
osd objectstore = memstore
memstore device bytes = 6442450944
osd pool default size = 2
osd pool default min size = 2
osd pool default pg num = 16
osd pool default pgp num = 16
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool delete = true
mon data avail warn = 2
mon data avail crit = 1
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
osd memory target = 939524096
ms connection ready timeout = 30
client mount timeout = 30
rados mon op timeout = 60
rados osd op timeout = 60
EOF
if [ "$MODE" = rdma ]; then
	cat >> "$CONF" <<EOF
ms type = async+rdma
ms async rdma type = iwarp
ms async rdma cm = true
ms async rdma device name = uiw0
EOF
	if [ "${RDMA_DEFAULTS:-0}" != 1 ] && [ -z "${RDMA_EXTRA:-}" ]; then
		cat >> "$CONF" <<EOF
ms async rdma receive buffers = 2048
ms async rdma send buffers = 1024
ms async rdma receive queue len = 1024
EOF
	fi
	[ -n "${RDMA_EXTRA:-}" ] && printf '%b\n' "$RDMA_EXTRA" >> "$CONF"
else
	echo "ms type = async+posix" >> "$CONF"
fi
cat >> "$CONF" <<EOF
[mon]
debug ms = $DEBUG_MS
[mgr]
debug ms = $DEBUG_MS
[osd]
debug ms = $DEBUG_MS
[client]
log to stderr = false
log file = $OUT/client.\$pid.log
debug ms = $DEBUG_MS
EOF
cp "$CONF" "$OUT/ceph.conf"
ulimit -l unlimited 2>/dev/null

# C NS CMD...: a client command in namespace NS, bounded
C() { local ns=$1; shift; ip netns exec $ns timeout ${CTO:-60} $WRAP "$@" -c "$CONF"; }
CEPH() { CTO=${CTO:-60} C $NSA ceph --connect-timeout 30 "$@"; }
daemon() {   # daemon NS NAME CMD...
	local ns=$1 name=$2; shift 2
	ip netns exec $ns $WRAP "$@" -c "$CONF" -f >"$OUT/$name.stderr" 2>&1 &
	PIDS+=($!)
	log "started $name in $ns (pid $!)"
}

# --- mon -----------------------------------------------------------------------------------
ceph-authtool --create-keyring $RUN/keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid $FSID --addv a "[v2:$IPA:3300,v1:$IPA:6789]" $RUN/monmap >/dev/null
ip netns exec $NSA ceph-mon -c "$CONF" --mkfs -i a --monmap $RUN/monmap --keyring $RUN/keyring || { log "mon mkfs failed"; exit 1; }
daemon $NSA mon.a ceph-mon -i a
ok=0
for i in $(seq 1 30); do
	if CTO=20 CEPH mon stat >/dev/null 2>>"$OUT/cli.stderr"; then ok=1; break; fi
	sleep 1
done
[ $ok = 1 ] || { log "mon not reachable"; exit 1; }
log "mon up"
daemon $NSA mgr.x ceph-mgr -i x

# --- osds ----------------------------------------------------------------------------------
for id in 0 1; do
	ns=$NSA; [ $id = 1 ] && ns=$NSB
	uuid=$(uuidgen)
	got=$(CEPH osd new $uuid 2>>"$OUT/cli.stderr") || { log "osd new failed"; exit 1; }
	[ "$got" = $id ] || { log "osd new gave '$got'"; exit 1; }
	mkdir -p $RUN/osd.$id
	ip netns exec $ns timeout 60 $WRAP ceph-osd -c "$CONF" -i $id --mkfs --osd-uuid $uuid >"$OUT/osd.$id.mkfs" 2>&1 || { log "osd.$id mkfs failed"; exit 1; }
	daemon $ns osd.$id ceph-osd -i $id
done

# --- pool and wait -------------------------------------------------------------------------
CEPH osd pool create bench 16 16 replicated >/dev/null 2>>"$OUT/cli.stderr" || { log "pool create failed"; exit 1; }
CEPH osd pool set bench size 2 >/dev/null 2>>"$OUT/cli.stderr"
CEPH osd pool set bench min_size 2 >/dev/null 2>>"$OUT/cli.stderr"
CEPH osd pool application enable bench rados >/dev/null 2>>"$OUT/cli.stderr"
TUP0=$(date +%s)
up=n
while [ $(( $(date +%s) - T0 )) -lt $UP_TIMEOUT ]; do
	st=$(CTO=30 CEPH pg stat 2>>"$OUT/cli.stderr")
	h=$(CTO=30 CEPH health 2>>"$OUT/cli.stderr")
	echo "$(( $(date +%s) - T0 ))s pg: $st | health: $h" >> "$OUT/wait.txt"
	n=$(echo "$st" | sed -n 's/^\([0-9]*\) pgs:.*/\1/p')
	c=$(echo "$st" | sed -n 's/.* \([0-9]*\) active+clean.*/\1/p')
	nup=$(CTO=30 CEPH osd stat 2>/dev/null | sed -n 's/.* \([0-9]*\) up.*/\1/p')
	if [ -n "$n" ] && [ "$n" = "$c" ] && [ "$n" -gt 0 ] && [ "${nup:-0}" = 2 ] && case "$h" in HEALTH_OK*) true;; *) false;; esac; then
		up=y; break
	fi
	sleep 2
done
UPT=$(( $(date +%s) - T0 ))
CTO=30 CEPH -s > "$OUT/status.txt" 2>&1
CTO=30 CEPH health detail >> "$OUT/status.txt" 2>&1
if [ $up != y ]; then
	log "NOT UP after ${UPT}s: $(tail -1 $OUT/wait.txt)"
	echo "RESULT mode=$MODE up=n time=${UPT}s write=- seq=- data=-" | tee -a "$SUM"
	exit 1
fi
log "cluster up (HEALTH_OK, all PGs active+clean) after ${UPT}s"

# --- bench ---------------------------------------------------------------------------------
R() { local ns=$1; shift; CTO=$(( BENCH_SECS + 90 )) C $ns rados "$@"; }
R $NSA -p bench bench $BENCH_SECS write --no-cleanup -t 16 -b 4M > "$OUT/bench-write.txt" 2>&1
wrc=$?
R $NSA -p bench bench $BENCH_SECS seq -t 16 > "$OUT/bench-seq.txt" 2>&1
src=$?
W=$(sed -n 's/^Bandwidth (MB\/sec): *//p' "$OUT/bench-write.txt")
S=$(sed -n 's/^Bandwidth (MB\/sec): *//p' "$OUT/bench-seq.txt")
log "bench write rc=$wrc ${W:-?} MB/s, seq rc=$src ${S:-?} MB/s"

# --- data check ----------------------------------------------------------------------------
head -c $((24*1024*1024 + 12345)) /dev/urandom > $RUN/in.bin
# data_check NS_PUT NS_GET OBJ: put in.bin from one namespace, get it in the
# other, compare; prints ok or fail
data_check() {
	if CTO=90 C "$1" rados -p bench put "$3" $RUN/in.bin 2>>"$OUT/cli.stderr" &&
		CTO=90 C "$2" rados -p bench get "$3" $RUN/out.bin 2>>"$OUT/cli.stderr" &&
		cmp $RUN/in.bin $RUN/out.bin; then
		echo ok
	else
		echo fail
	fi
	rm -f $RUN/out.bin
}
data=$(data_check $NSA $NSB check.obj)
log "data check (24 MiB put in A, get in B, cmp): $data"
if [ "${FAULT:-0}" = 1 ]; then
	FR=${FAULT_ROUNDS:-1}
	R $NSA -p bench bench $(( 10 + 10 * FR )) rand -t 16 > "$OUT/bench-fault.txt" 2>&1 &
	bp=$!
	for r in $(seq 1 $FR); do
		sleep 5; CEPH osd down 1 >>"$OUT/fault.txt" 2>&1; log "fault: osd.1 marked down"
		sleep 5; CEPH osd down 0 >>"$OUT/fault.txt" 2>&1; log "fault: osd.0 marked down"
	done
	wait $bp; frc=$?
	F=$(sed -n 's/^Bandwidth (MB\/sec): *//p' "$OUT/bench-fault.txt")
	log "fault bench rc=$frc ${F:-?} MB/s"
	t1=$(date +%s); reup=n
	while [ $(( $(date +%s) - t1 )) -lt 120 ]; do
		st=$(CTO=30 CEPH pg stat 2>>"$OUT/cli.stderr")
		n=$(echo "$st" | sed -n 's/^\([0-9]*\) pgs:.*/\1/p')
		c=$(echo "$st" | sed -n 's/.* \([0-9]*\) active+clean.*/\1/p')
		if [ -n "$n" ] && [ "$n" = "$c" ]; then reup=y; break; fi
		sleep 2
	done
	log "after fault: active+clean again: $reup after $(( $(date +%s) - t1 ))s"
	fdata=$(data_check $NSB $NSA check2.obj)
	log "after fault: data check $fdata"
	echo "FAULT mode=$MODE bench=${F:-fail} reup=$reup data=$fdata" | tee -a "$SUM"
fi
if [ "${CYCLES:-0}" -gt 0 ]; then
	# connection cycles: each rados call (B, the other namespace than the
	# mon and osd.0) connects to the mon and the OSDs, reads the object of
	# the data check, and disconnects; every one must succeed, and no
	# process may log a fatal QP event
	cf=0
	t1=$(date +%s)
	for ((k = 1; k <= CYCLES; k++)); do
		CTO=30 C $NSB rados -p bench stat check.obj >/dev/null 2>>"$OUT/cycles.stderr" || cf=$((cf + 1))
	done
	fatal=$(cat "$OUT"/*.log "$OUT"/*.stderr 2>/dev/null | grep -c -E 'catastrophic|QP_FATAL|Terminate (sent|received)')
	log "cycles: $CYCLES rados connections from B, $cf failed, $fatal fatal QP events / Terminates logged, $(($(date +%s) - t1)) s"
	echo "CYCLES mode=$MODE n=$CYCLES failed=$cf fatal=$fatal" | tee -a "$SUM"
	[ "$cf" = 0 ] && [ "$fatal" = 0 ] || data=fail
fi
CTO=30 CEPH -s > "$OUT/status-end.txt" 2>&1
CTO=30 CEPH health detail >> "$OUT/status-end.txt" 2>&1
# RDMA perf counters of the daemons (admin socket, no network)
for n in mon.a mgr.x osd.0 osd.1; do
	timeout 10 ceph --admin-daemon $RUN/$n.asok perf dump > "$OUT/perf-$n.json" 2>>"$OUT/cli.stderr"
done
for p in "${PIDS[@]}"; do   # memory of each daemon after the runs
	echo "$p $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-60) $(grep -E '^(VmSize|VmRSS)' /proc/$p/status 2>/dev/null | tr -s ' \n' ' ')"
done > "$OUT/mem.txt"
if [ "$MODE" = rdma ]; then   # uiwarp's counters of each daemon (device totals; per-QP lines omitted)
	for p in "${PIDS[@]}"; do timeout 10 "$(dirname "$UIWARP_RUN")/uiwarp-stat" --no-tcp $p 2>&1 | head -8; done > "$OUT/uiwarp-stat.txt"
fi
echo "RESULT mode=$MODE up=y time=${UPT}s write=${W:-fail} seq=${S:-fail} data=$data" | tee -a "$SUM"
[ $data = ok ] && [ $wrc = 0 ] && [ $src = 0 ]
