#!/bin/bash
# uiwarp's iwpm against rdma-core's iwpmd in the siw lab guest (../shared/lab), both roles:
#   1. uiwarp client -> the guest's iwpmd: REJECT for a port nobody listens on, ACCEPT (identity:
#      siw maps with IWPM_FLAGS_NO_PORT_MAP) for a kernel siw listener (rping -s);
#   2. kernel initiator (guest rping -c, its iwpmd asks first) -> uiwarp's responder on the
#      host's UDP 3935 in the lab netns: ACCEPT + ACK, and the TCP connection arrives without the
#      10 s stall. LAB_IWPM_CONTROL=1 adds the control (nothing on UDP 3935 -> the stall);
#      LAB_IWPM_UIWARP=1 uses uiwarp's own rping server as the listener (a full rping exchange).
#
# Usage: tests/iwpm/lab_iwpmd.sh [IWPM_TOOL]   (default: $UIW_BUILD/bin/iwpm_tool, UIW_BUILD=build)
# Exit: 0 pass, 1 fail, 77 skipped (lab not up, not root, no iwpmd in the guest, tool not built).
#
# It never starts, stops or reboots the lab. While it runs (~30 s) it runs `iwpmd -s` in the guest
# (unless one already runs there) and kills it at the end: with iwpmd up, a siw client that
# connects to a host without a port mapper stalls 10 s, so do not run it alongside other lab tests.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LAB="${UIWARP_LAB:-$ROOT/../shared/lab}"
[ -d "$LAB" ] || LAB=/work/shared/lab
TOOL="${1:-${UIW_BUILD:-$ROOT/build}/bin/iwpm_tool}"
HOST_IP=198.51.100.1 GUEST_IP=198.51.100.2
P_NONE=7390 P_SIW=7391 P_UIW=7392 P_CTL=7393

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }
log() { echo "[lab_iwpmd $(date +%H:%M:%S)] $*"; }

[ "$(id -u)" = 0 ] || skip "not root"
[ -x "$LAB/exec.sh" ] || skip "no lab at $LAB"
[ -x "$TOOL" ] || skip "iwpm_tool not built ($TOOL)"
timeout 30 "$LAB/exec.sh" -t 20 true >/dev/null 2>&1 || skip "lab guest is not up (this script never starts it)"
gx() { timeout $(( ${2:-20} + 10 )) "$LAB/exec.sh" -t "${2:-20}" "$1"; }
gx 'command -v iwpmd >/dev/null && command -v rping >/dev/null' || skip "no iwpmd / rping in the guest"

FAILED=0 IWPMD_JOB="" JOBS=() TMP="$(mktemp -d /tmp/uiwp-lab.XXXXXX)"
cleanup() {
    local j
    for j in "${JOBS[@]}"; do timeout 20 "$LAB/exec.sh" -k "$j" >/dev/null 2>&1; done
    # shellcheck disable=SC2317  # (runs from the trap)
    [ -n "$IWPMD_JOB" ] && timeout 20 "$LAB/exec.sh" -k "$IWPMD_JOB" >/dev/null 2>&1
    [ -n "${RESP_PID:-}" ] && kill "$RESP_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# --- iwpmd in the guest ----------------------------------------------------------------------
if gx 'pgrep -x iwpmd >/dev/null'; then
    log "iwpmd already runs in the guest; using it"
else
    IWPMD_JOB="$(timeout 20 "$LAB/exec.sh" -b 'exec iwpmd -s')"
    log "started iwpmd -s in the guest (job $IWPMD_JOB)"
fi
gx 'for i in $(seq 50); do ss -Huln "sport = :3935" | grep -q . && exit 0; sleep 0.2; done; exit 1' \
    || { fail "iwpmd does not listen on UDP 3935 in the guest"; exit 1; }
gx 'ss -Huln "sport = :3935"; rdma link 2>/dev/null | head -3'

# --- role 1: uiwarp client -> iwpmd --------------------------------------------------------------
out="$("$LAB/ns.sh" "$TOOL" query -t 2000 "$HOST_IP" "$GUEST_IP:$P_NONE")"
log "query $GUEST_IP:$P_NONE (no listener): $out"
[[ "$out" == "outcome=rejected port=$P_NONE "* ]] || fail "expected REJECT from iwpmd: $out"

JOBS+=("$(timeout 20 "$LAB/exec.sh" -b "exec rping -s -a $GUEST_IP -p $P_SIW -v")")
gx "for i in \$(seq 50); do ss -Htln \"sport = :$P_SIW\" | grep -q . && exit 0; sleep 0.2; done; exit 1" \
    || fail "rping -s did not listen on $P_SIW"
out="$("$LAB/ns.sh" "$TOOL" query -t 2000 "$HOST_IP" "$GUEST_IP:$P_SIW")"
log "query $GUEST_IP:$P_SIW (siw listener): $out"
[[ "$out" == "outcome=accepted port="* ]] || fail "expected ACCEPT from iwpmd: $out"
# a retransmitted query gets a fresh answer (new assochandle)
out="$("$LAB/ns.sh" "$TOOL" query -t 2000 "$HOST_IP" "$GUEST_IP:$P_SIW")"
[[ "$out" == "outcome=accepted port="* ]] || fail "second query: $out"
timeout 20 "$LAB/exec.sh" -k "${JOBS[0]}" >/dev/null 2>&1; JOBS=()

# --- role 2: kernel initiator -> uiwarp responder ------------------------------------------------
# The responder runs as its own process (iwpm_tool) until the lead wires it into rdmap/cm.c.
# Default: iwpm_tool also listens on TCP and holds the connection (silent), so what is measured is
# the time until the kernel's TCP connection arrives (no stall: ~1-2 s including exec.sh's
# latency; without an answer on UDP 3935: > 10 s). The guest's rping then fails its MPA exchange
# and is killed. LAB_IWPM_UIWARP=1: the listener is uiwarp's own `uiwarp-run rping -s` instead and
# the kernel's rping -c -C 3 must succeed within 5 s.
UIWRUN="$(dirname "$TOOL")/uiwarp-run"
guest_rping() {  # guest_rping PORT -> "elapsed_ms=N rc=N"
    gx "s=\$(date +%s%N); timeout -s KILL 14 rping -c -a $HOST_IP -p $1 -C 3 -v >/tmp/iwpm_rping.out 2>&1; rc=\$?; echo elapsed_ms=\$(( (\$(date +%s%N) - s) / 1000000 )) rc=\$rc" 30 | tail -1
}
srv_start() {  # srv_start PORT OUTFILE: uiwarp's rping server in the lab netns
    "$LAB/ns.sh" timeout 45 "$UIWRUN" rping -s -a "$HOST_IP" -p "$1" -C 3 -v >"$2" 2>&1 &
    for _ in $(seq 100); do
        "$LAB/ns.sh" ss -Htln "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.1
    done
    return 1
}
resp_start() {  # resp_start ARGS...: iwpm_tool respond in the lab netns; 0 when ready
    "$LAB/ns.sh" "$TOOL" respond -s 60 "$@" >"$TMP/resp.out" 2>&1 &
    RESP_PID=$!
    for _ in $(seq 50); do grep -q '^ready\|^busy' "$TMP/resp.out" && break; sleep 0.1; done
    grep -q '^ready' "$TMP/resp.out" || { cat "$TMP/resp.out"; fail "responder could not bind UDP 3935 in the lab netns"; return 1; }
}
resp_stop() {
    kill -TERM "$RESP_PID" 2>/dev/null; wait "$RESP_PID"; RESP_PID=""
    cat "$TMP/resp.out"
    grep -q 'accepts=[1-9]' "$TMP/resp.out" || fail "the responder sent no ACCEPT"
    grep -q 'acks=[1-9]' "$TMP/resp.out" || fail "iwpmd sent no ACK"
}
if [ "${LAB_IWPM_UIWARP:-0}" != 1 ]; then
    if resp_start -T "$HOST_IP:$P_UIW"; then
        res="$(guest_rping $P_UIW)"
        resp_stop
        acc_ms="$(sed -n 's/^tcp_accept ms=\([0-9]*\).*/\1/p' "$TMP/resp.out" | head -1)"
        log "kernel rping -c to uiwarp's responder + TCP listener: TCP connection after ${acc_ms:-?} ms ($res)"
        if [ -z "$acc_ms" ]; then fail "no TCP connection arrived"
        elif [ "$acc_ms" -ge 6000 ]; then fail "TCP connection after $acc_ms ms (stall?)"; fi
    fi
    if [ "${LAB_IWPM_CONTROL:-0}" = 1 ]; then
        # control: a TCP listener, nothing on UDP 3935 -> iwpmd waits 10 s for an answer
        "$LAB/ns.sh" timeout 20 python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4); t = time.monotonic()
c, _ = s.accept(); print("TCP connection after %d ms" % ((time.monotonic() - t) * 1000))
time.sleep(15)
' "$HOST_IP" "$P_CTL" >"$TMP/ctl.out" 2>&1 &
        sleep 0.5
        guest_rping $P_CTL >/dev/null
        wait
        log "control, no responder: $(cat "$TMP/ctl.out") (expected > 10000 ms)"
    fi
elif [ ! -x "$UIWRUN" ] || ! command -v rping >/dev/null; then
    fail "LAB_IWPM_UIWARP=1 needs $UIWRUN and the host's rping (rdmacm-utils)"
elif ! srv_start $P_UIW "$TMP/srv.out"; then
    cat "$TMP/srv.out"; fail "uiwarp rping -s did not listen on $HOST_IP:$P_UIW"
else
    if resp_start "$HOST_IP:$P_UIW"; then
        res="$(guest_rping $P_UIW)"
        resp_stop
        log "kernel rping -c -C 3 to uiwarp's rping -s, responder on: $res"
        ms="$(sed -n 's/.*elapsed_ms=\([0-9]*\).*/\1/p' <<<"$res")"
        [[ "$res" == *" rc=0" ]] || fail "kernel rping failed: $res"
        if [ -z "$ms" ] || [ "$ms" -ge 5000 ]; then fail "rping took ${ms:-?} ms (stall?)"; fi
    fi
    wait
fi

if [ "$FAILED" = 0 ]; then log "PASS"; else log "FAILED"; fi
exit "$FAILED"
