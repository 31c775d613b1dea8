#!/usr/bin/env bash
# Infrastructure self-check, independent of the uiwarp engine: the Python
# peer (tests/hostile/iwpeer.py) plays MPA initiator against a trivial Python
# MPA responder between two namespaces; dumpcap captures it and tshark must
# decode MPA Request, Reply and FPDUs (also several FPDUs in one segment)
# with good CRCs and nothing malformed. A second run with one corrupted CRC
# must be caught. This proves the capture + decode recipe that
# tshark_rping.sh uses, and that iwpeer's framing and CRC agree with
# Wireshark's dissectors.
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
e2e_init tsc
command -v tshark >/dev/null || e2e_skip "tshark not installed"
e2e_ns_pair 203.0.113

# run_pair PORT PCAP INITIATOR-ARGS...
run_pair() {
	local port=$1 pcap=$2
	shift 2
	e2e_capture_start "$NS_A" "$IF_A" "$port" "$pcap"
	e2e_bg RESP ip netns exec "$NS_A" "$PYTHON" "$HOSTILE_SRC/iwpeer.py" responder \
		"$ADDR_A" "$port" >"$pcap.resp" 2>&1
	e2e_wait_for "$pcap.resp" '^LISTEN' 10 || e2e_fail "responder did not listen"
	e2e_run ip netns exec "$NS_B" timeout 30 "$PYTHON" "$HOSTILE_SRC/iwpeer.py" initiator \
		"$ADDR_A" "$port" "$@" >"$pcap.init" 2>&1 || {
		cat "$pcap.init"
		e2e_fail "initiator failed"
	}
	e2e_wait_pid "$RESP" 20 || {
		cat "$pcap.resp"
		e2e_fail "responder failed"
	}
	e2e_capture_stop
	cat "$pcap.init" "$pcap.resp"
}

PORT=$(e2e_port 3)
run_pair "$PORT" "$E2E_TMP/good.pcap" --coalesce
grep -q 'DONE fpdus=7' "$E2E_TMP/good.pcap.resp" || e2e_fail "responder did not see 7 FPDUs"
grep -q 'crc_ok=0' "$E2E_TMP/good.pcap.resp" && e2e_fail "responder saw a bad CRC"
"$PYTHON" "$E2E_SRC/tshark_check.py" "$E2E_TMP/good.pcap" "$PORT" --min-fpdus 7 \
	--opcodes 0,1,3 || e2e_fail "tshark did not decode the good capture cleanly"

PORT2=$((PORT + 1))
run_pair "$PORT2" "$E2E_TMP/bad.pcap" --bad-crc
grep -q 'crc_ok=0' "$E2E_TMP/bad.pcap.resp" || e2e_fail "responder missed the bad CRC"
if "$PYTHON" "$E2E_SRC/tshark_check.py" "$E2E_TMP/bad.pcap" "$PORT2" --min-fpdus 5 \
	>"$E2E_TMP/bad.check" 2>&1; then
	cat "$E2E_TMP/bad.check"
	e2e_fail "tshark_check accepted a capture with a bad CRC"
fi
cat "$E2E_TMP/bad.check"
grep -q 'Bad CRC32' "$E2E_TMP/bad.check" || e2e_fail "bad CRC not reported by tshark"
e2e_log "PASS"
