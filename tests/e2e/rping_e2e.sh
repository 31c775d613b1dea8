#!/usr/bin/env bash
# Unmodified Debian rping (rdma-core) over uiwarp.
#
#   rping_e2e.sh veth     server in one namespace, client in another (veth)
#   rping_e2e.sh lo       both in one namespace, over 127.0.0.1
#   rping_e2e.sh tshark   veth, with a capture decoded by tshark's iWARP
#                         dissectors (see tshark_check.py)
#
# Runs `uiwarp-run rping -s -a ADDR -p PORT -C N -v` and
# `uiwarp-run rping -c -a ADDR -p PORT -C N -v`; both must exit 0, the
# client must print N "ping data:" lines with rping's rotating pattern and
# the server N "server ping data:" lines.
# Env: UIW_BUILD (build dir), RPING_COUNT (default 100), RPING_SIZE (rping
# -S: buffer bytes, default rping's 64; up to 65536, so that one RDMA Read
# Response / Write spans many FPDUs).
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
MODE=${1:-veth}
COUNT=${RPING_COUNT:-100}
SIZE=${RPING_SIZE:-}
SOPT=()
[ -n "$SIZE" ] && SOPT=(-S "$SIZE")
e2e_init "rp${MODE:0:2}${SIZE:+s}"
uiw_need_run
command -v rping >/dev/null || e2e_skip "rping not installed (rdmacm-utils)"
[ "$MODE" = tshark ] && ! command -v tshark >/dev/null && e2e_skip "tshark not installed"

case $MODE in
veth | tshark)
	e2e_ns_pair 198.51.100
	SRV_NS=$NS_A CLI_NS=$NS_B ADDR=$ADDR_A
	;;
lo)
	e2e_ns_lo
	SRV_NS=$NS_L CLI_NS=$NS_L ADDR=127.0.0.1
	;;
*) e2e_fail "unknown mode $MODE" ;;
esac
PORT=$(e2e_port 1)

if [ "$MODE" = tshark ]; then
	PCAP=$E2E_TMP/rping.pcap
	e2e_capture_start "$NS_A" "$IF_A" "$PORT" "$PCAP"
fi

e2e_log "server: rping -s -a $ADDR -p $PORT -C $COUNT ${SOPT[*]} -v (netns $SRV_NS)"
e2e_bg SRV ip netns exec "$SRV_NS" timeout 120 "${UIW_RUN[@]}" rping -s -a "$ADDR" -p "$PORT" \
	-C "$COUNT" "${SOPT[@]}" -v >"$E2E_TMP/server.out" 2>"$E2E_TMP/server.err"
uiw_wait_listen "$SRV_NS" "$PORT" 20 "$SRV" || {
	cat "$E2E_TMP/server.out" "$E2E_TMP/server.err"
	e2e_fail "rping server did not listen on $PORT"
}

e2e_log "client: rping -c -a $ADDR -p $PORT -C $COUNT ${SOPT[*]} -v (netns $CLI_NS)"
e2e_run ip netns exec "$CLI_NS" timeout 120 "${UIW_RUN[@]}" rping -c -a "$ADDR" -p "$PORT" \
	-C "$COUNT" "${SOPT[@]}" -v >"$E2E_TMP/client.out" 2>"$E2E_TMP/client.err"
CRC=$?
e2e_wait_pid "$SRV" 30
SRC=$?
[ "$MODE" = tshark ] && e2e_capture_stop

e2e_log "client exit $CRC, server exit $SRC"
tail -n 3 "$E2E_TMP/client.out" | cut -c 1-120
for f in client.err server.err; do
	[ -s "$E2E_TMP/$f" ] && { echo "--- $f"; tail -n 20 "$E2E_TMP/$f"; }
done
fail=0
[ "$CRC" = 0 ] || { e2e_log "client exited $CRC"; fail=1; }
[ "$SRC" = 0 ] || { e2e_log "server exited $SRC"; fail=1; }
"$PYTHON" "$E2E_SRC/rping_check.py" "$E2E_TMP/client.out" "$COUNT" --size "${SIZE:-64}" \
	--prefix 'ping data: ' || fail=1
"$PYTHON" "$E2E_SRC/rping_check.py" "$E2E_TMP/server.out" "$COUNT" --size "${SIZE:-64}" \
	--prefix 'server ping data: ' || fail=1
if [ "$MODE" = tshark ]; then
	# rping: Send (3) for the rkey/addr adverts, Read Request (1) + Read
	# Response (2) for the ping, Write (0) for the pong.
	# --two-pass: large FPDUs span segments (both ends announce them)
	e2e_run "$PYTHON" "$E2E_SRC/tshark_check.py" "$PCAP" "$PORT" --min-fpdus $((4 * COUNT)) \
		--two-pass --opcodes 0,1,2,3 || fail=1
fi
[ "$fail" = 0 ] || e2e_fail "rping over uiwarp ($MODE)"
e2e_log "PASS"
