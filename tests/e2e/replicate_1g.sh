#!/usr/bin/env bash
# 1 GiB file replication between two namespaces with uiwarp-replicate
# (examples/replicate) over uiwarp: `recv` in one namespace, `send` in the
# other, then cmp, and the throughput line is printed. Skips (77) when the
# binary is not built. Env: UIW_BUILD, REPLICATE_MIB (default 1024).
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_init rep
MIB=${REPLICATE_MIB:-1024}
UIW_BUILD=${UIW_BUILD:-}
REP=$UIW_BUILD/bin/uiwarp-replicate
[ -x "$REP" ] || e2e_skip "$REP not built (examples/replicate)"
uiw_need_run
avail_kib=$(df -Pk "$E2E_TMP" | awk 'NR == 2 { print $4 }')
[ "$avail_kib" -gt $((MIB * 1024 * 3)) ] || e2e_skip "need $((MIB * 3)) MiB free in $E2E_TMP"

e2e_ns_pair 198.51.100
PORT=$(e2e_port 2)
SRC=$E2E_TMP/src.bin
DST=$E2E_TMP/dst.bin
E2E_BIG_FILES+=("$SRC" "$DST" "$DST.part")
e2e_log "making $MIB MiB of random data"
head -c $((MIB * 1048576)) /dev/urandom >"$SRC" || e2e_fail "cannot write $SRC"

e2e_log "recv in $NS_A on $ADDR_A:$PORT"
e2e_bg RECV ip netns exec "$NS_A" timeout 500 "${UIW_RUN[@]}" "$REP" recv --bind "$ADDR_A" \
	--port "$PORT" --timeout 120 "$DST" >"$E2E_TMP/recv.out" 2>"$E2E_TMP/recv.err"
uiw_wait_listen "$NS_A" "$PORT" 20 "$RECV" || {
	cat "$E2E_TMP/recv.out" "$E2E_TMP/recv.err"
	e2e_fail "receiver did not listen on $PORT"
}
e2e_log "send from $NS_B"
e2e_run ip netns exec "$NS_B" timeout 500 "${UIW_RUN[@]}" "$REP" send --port "$PORT" --quiet \
	--timeout 120 "$SRC" "$ADDR_A" >"$E2E_TMP/send.out" 2>"$E2E_TMP/send.err"
SRC_RC=$?
e2e_wait_pid "$RECV" 60
RECV_RC=$?
if [ "$SRC_RC" != 0 ] || [ "$RECV_RC" != 0 ]; then
	cat "$E2E_TMP/send.out" "$E2E_TMP/recv.out"
	tail -n 20 "$E2E_TMP/send.err" "$E2E_TMP/recv.err"
fi
[ "$SRC_RC" = 0 ] || e2e_fail "send exited $SRC_RC"
[ "$RECV_RC" = 0 ] || e2e_fail "recv exited $RECV_RC"
[ -f "$DST" ] || e2e_fail "$DST missing"
cmp "$SRC" "$DST" || e2e_fail "copy differs"
grep -h 'MiB/s' "$E2E_TMP/send.out" "$E2E_TMP/recv.out" | sed 's/^/throughput: /'
e2e_log "PASS ($MIB MiB, cmp equal)"
