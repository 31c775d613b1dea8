#!/bin/sh
# UIWARP_MPA_RTR_DELAY_US (docs/configuration.md): an initiator waits that
# long after the MPA Reply before its first FPDU (the RTR in peer-to-peer
# mode), for responders that read their socket only some time after sending
# the Reply (kernel siw's accept race, docs/interop.md siw bug 1).
# iwpeer.py (tests/hostile, an independent MPA responder) stamps each FPDU it
# reads with the time since it sent its Reply; rping -c under uiwarp-run is
# the initiator (its first Send stays unanswered: timeout ends it).
#   rtr_delay.sh UIWARP_RUN RPING IWPEER
# Checks: with the delay at 300 ms, the first FPDU is the Write RTR (tagged,
# opcode 0, no payload) and arrives >= 300 ms after the Reply, the rping
# Send after it; without the variable, the RTR still comes first (its gap is
# printed, not checked: no timed assertion on the fast path).
set -u
RUN=$1
RPING=$2
IWPEER=$3
. "$(dirname "$0")/../port.sh"
T=$(mktemp -d /tmp/uiw-rtrdelay.XXXXXX) || exit 1
trap 'kill $RESP 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; cat "$T"/resp.* 2>/dev/null; exit 1; }

# one_run NAME DELAY_US: responder + rping client; responder output in $T/resp.NAME
one_run() {
	name=$1 delay=$2
	port=$(uiw_free_port "$delay")
	python3 "$IWPEER" responder 127.0.0.1 "$port" >"$T/resp.$name" 2>&1 &
	RESP=$!
	i=0
	while ! grep -q '^LISTEN' "$T/resp.$name" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "$name: responder did not listen"
		sleep 0.1
	done
	if [ "$delay" -gt 0 ]; then
		UIWARP_MPA_RTR_DELAY_US=$delay timeout -k 2 3 "$RUN" "$RPING" -c -a 127.0.0.1 \
			-p "$port" -C 1 -S 64 >"$T/rping.$name" 2>&1
	else
		env -u UIWARP_MPA_RTR_DELAY_US timeout -k 2 3 "$RUN" "$RPING" -c -a 127.0.0.1 \
			-p "$port" -C 1 -S 64 >"$T/rping.$name" 2>&1
	fi
	i=0
	while kill -0 $RESP 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 200 ] && fail "$name: responder did not end"
		sleep 0.1
	done
	wait $RESP || fail "$name: responder failed"
	echo "--- $name (UIWARP_MPA_RTR_DELAY_US=$delay)"
	cat "$T/resp.$name"
	first=$(grep -m1 '^FPDU' "$T/resp.$name")
	second=$(grep '^FPDU' "$T/resp.$name" | sed -n 2p)
	echo "$first" | grep -q 'crc_ok=1 .*tagged op=0 L=1 .* len=0$' ||
		fail "$name: the first FPDU is not a Write RTR: $first"
	echo "$second" | grep -q 'untagged op=3 ' || fail "$name: no Send after the RTR: $second"
	FIRST_MS=$(echo "$first" | sed 's/.* ms=\([0-9.]*\) .*/\1/')
}

one_run delayed 300000
awk -v m="$FIRST_MS" 'BEGIN { exit !(m >= 300) }' ||
	fail "delayed: the RTR came $FIRST_MS ms after the Reply, not >= 300"
D=$FIRST_MS
one_run plain 0
echo "PASS: RTR $D ms after the Reply with a 300 ms delay, $FIRST_MS ms without"
