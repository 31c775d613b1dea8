#!/usr/bin/env bash
# The MPA stream over TLS 1.3 (stream/tls.c, UIWARP_TLS), end to end through
# real sockets in a namespace of its own ("uiwtls<pid>", loopback only,
# deleted on exit). Certificates are made at test time with the openssl
# CLI: a CA, a server and a client certificate (mutual authentication), and
# a second CA that signed nothing of ours. Modes:
#   rping      rping -v (20 pings of 2000 bytes, every byte checked) over
#              TLS with certificates both ways, under tcpdump: tshark
#              decodes the capture as TLS (application data records) and
#              finds no MPA frame; the same run with UIWARP_TLS=off is
#              captured too and tshark must find MPA there (so the check
#              can fail); a plain client against a UIWARP_TLS=on server
#              still connects (one port serves both)
#   refuse     each must fail cleanly, the client with an rdma_cm error
#              event and a log line that says what failed, the server
#              still serving the next client (rping -s -P): a client that
#              trusts another CA ("certificate"), a client expecting
#              another server name ("hostname mismatch"), a plain client
#              against UIWARP_TLS=required (RDMA_CM_EVENT_REJECTED), a
#              client without a certificate against a server that asks
#              for one; then a good client, whose 5 pings must pass; a PSK
#              that differs (PSK server); a server certificate that expired
#              ("certificate has expired")
#   replicate  uiwarp-replicate --tls of 64 MiB with a PSK: over RDMA with
#              AES-128-GCM and with ChaCha20-Poly1305, and with --tcp (TLS
#              on the plain sockets): the receiver verifies the CRC32c, the
#              copy equals the source
#   tamper     a proxy between the two ends flips one byte of the client's
#              stream 4 MiB into a uiwarp-replicate copy (inside a TLS
#              record): the receiver's record fails authentication, it
#              logs so, the copy fails on both sides, and no file appears
#              under the final name
# Env: UIW_BUILD, UIW_SRC. Root (namespaces), openssl, rping; tshark and
# tcpdump for rping, python3 for tamper; else exit 77.
set -u
MODE=${1:-rping}
UIW_SRC=${UIW_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
UIW_BUILD=${UIW_BUILD:-$UIW_SRC/build}
NS=uiwtls$$
TMP=$(mktemp -d "/tmp/$NS.XXXXXX")
RUN=$UIW_BUILD/bin/uiwarp-run
REP=$UIW_BUILD/bin/uiwarp-replicate
PIDS=()

TEST_AREA=tls
net_down() { ip netns del "$NS"; }
# shellcheck source=../netns_lib.sh
. "$UIW_SRC/tests/netns_lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root"
command -v openssl >/dev/null || skip "openssl not installed"
command -v rping >/dev/null || skip "rping (rdmacm-utils) not installed"
[ -x "$RUN" ] || skip "uiwarp-run not built"

ip netns add "$NS" || fail "ip netns add"
ip -n "$NS" link set lo up
inns() { ip netns exec "$NS" "$@"; }
ADDR=127.0.0.1
PORT=24000

# ---------------------------------------------------------- certificates
mkcert() { # NAME CA: a P-256 key and a certificate for NAME.uiwarp.test signed by CA
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1.uiwarp.test" \
		-addext "subjectAltName=DNS:$1.uiwarp.test" -keyout "$TMP/$1.key" -out "$TMP/$1.csr" \
		2>/dev/null &&
		openssl x509 -req -in "$TMP/$1.csr" -CA "$TMP/$2.pem" -CAkey "$TMP/$2.key" \
			-CAcreateserial -days 1 -copy_extensions copy -out "$TMP/$1.pem" 2>/dev/null
}
for ca in ca otherca; do
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
		-subj "/CN=uiwarp test $ca" -keyout "$TMP/$ca.key" -out "$TMP/$ca.pem" 2>/dev/null ||
		fail "openssl: CA $ca"
done
mkcert server ca && mkcert client ca || fail "openssl: certificates"
PSK=5c1e0f2a9b3d4c6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6
SRV_ENV=(UIWARP_TLS=on "UIWARP_TLS_CERT=$TMP/server.pem" "UIWARP_TLS_KEY=$TMP/server.key"
	"UIWARP_TLS_CA=$TMP/ca.pem")
CLI_ENV=(UIWARP_TLS=on "UIWARP_TLS_CERT=$TMP/client.pem" "UIWARP_TLS_KEY=$TMP/client.key"
	"UIWARP_TLS_CA=$TMP/ca.pem" UIWARP_TLS_PEER_NAME=server.uiwarp.test)

# rping_pair TAG "SERVER ENV" "CLIENT ENV" [COUNT]: one rping -v server and
# client in the namespace; returns the client's status; TMP/TAG.{s,c}.log
rping_pair() {
	local tag=$1 count=${4:-20} sp rc
	# shellcheck disable=SC2086
	inns env $2 UIWARP_LOG=info timeout 30 "$RUN" rping -s -a $ADDR -p $PORT -C "$count" -S 2000 -v \
		>"$TMP/$tag.s.log" 2>&1 &
	sp=$!
	PIDS+=("$sp")
	sleep 0.5
	# shellcheck disable=SC2086
	inns env $3 UIWARP_LOG=info timeout 30 "$RUN" rping -c -a $ADDR -p $PORT -C "$count" -S 2000 -v \
		>"$TMP/$tag.c.log" 2>&1
	rc=$?
	wait "$sp"
	return $rc
}
pings() { grep -c "ping data: rdma-ping-" "$1"; }

mode_rping() {
	command -v tcpdump >/dev/null || skip "tcpdump not installed"
	command -v tshark >/dev/null || skip "tshark not installed"
	local kind
	for kind in tls plain; do
		# not through inns: a function run in the background is a
		# subshell, and killing it (kill "$dp" below) left tcpdump running
		ip netns exec "$NS" tcpdump -i lo -w "$TMP/$kind.pcap" -U -s 0 "tcp port $PORT" \
			>"$TMP/$kind.tcpdump" 2>&1 &
		local dp=$!
		PIDS+=("$dp")
		sleep 1
		if [ $kind = tls ]; then
			rping_pair $kind "${SRV_ENV[*]}" "${CLI_ENV[*]}" || fail "rping over TLS: client failed"
		else
			rping_pair $kind UIWARP_TLS=off UIWARP_TLS=off || fail "plain rping failed"
		fi
		sleep 0.5
		kill "$dp"
		wait "$dp" 2>/dev/null
		[ "$(pings "$TMP/$kind.c.log")" = 20 ] && [ "$(pings "$TMP/$kind.s.log")" = 20 ] ||
			fail "$kind: not 20 checked pings on each side"
		local tls mpa
		tls=$(tshark -r "$TMP/$kind.pcap" -d "tcp.port==$PORT,tls" -Y "tls.record.opaque_type == 23" \
			2>/dev/null | wc -l)
		mpa=$(tshark -r "$TMP/$kind.pcap" -Y "iwarp_mpa" 2>/dev/null | wc -l)
		log "$kind: tshark finds $tls packets with TLS application data, $mpa with MPA"
		if [ $kind = tls ]; then
			grep -q "stream: TLSv1.3" "$TMP/tls.c.log" || fail "client log does not say TLSv1.3"
			# the AEAD tag covers every byte: MPA's CRC32c is not asked for
			grep -q "established.*CRC off" "$TMP/tls.c.log" || fail "CRC32c negotiated under TLS"
			[ "$tls" -gt 0 ] && [ "$mpa" = 0 ] || fail "TLS capture: expected TLS records and no MPA"
		else
			[ "$tls" = 0 ] && [ "$mpa" -gt 0 ] || fail "plain capture: expected MPA and no TLS"
		fi
	done
	rping_pair mixed "${SRV_ENV[*]}" UIWARP_TLS=off 5 || fail "plain client against UIWARP_TLS=on"
	[ "$(pings "$TMP/mixed.c.log")" = 5 ] || fail "plain client against UIWARP_TLS=on: pings"
	grep -q "stream: TLS" "$TMP/mixed.s.log" && fail "plain client got TLS"
	log "PASS: TLS on the wire, MPA only inside it; one port serves plain peers too"
}

mode_refuse() {
	# one persistent server for all the clients (-P)
	inns env "${SRV_ENV[@]}" UIWARP_TLS=required UIWARP_LOG=info timeout 60 "$RUN" rping -s -P \
		-a $ADDR -p $PORT -C 5 -S 2000 -v >"$TMP/server.log" 2>&1 &
	PIDS+=($!)
	sleep 0.5
	local n=0
	client() { # TAG EXPECT-EVENT EXPECT-LOG ENV...
		local tag=$1 ev=$2 why=$3
		shift 3
		n=$((n + 1))
		inns env "$@" UIWARP_LOG=info timeout 20 "$RUN" rping -c -a $ADDR -p $PORT -C 5 -S 2000 -v \
			>"$TMP/$tag.log" 2>&1 && fail "$tag: the client succeeded"
		grep -q "$ev" "$TMP/$tag.log" || fail "$tag: no $ev"
		grep -q "$why" "$TMP/$tag.log" "$TMP/server.log" || fail "$tag: no log line with '$why'"
		log "$tag: $ev, '$why' logged"
	}
	client other-ca RDMA_CM_EVENT_CONNECT_ERROR "certificate" UIWARP_TLS=on \
		"UIWARP_TLS_CERT=$TMP/client.pem" "UIWARP_TLS_KEY=$TMP/client.key" "UIWARP_TLS_CA=$TMP/otherca.pem"
	client wrong-name RDMA_CM_EVENT_CONNECT_ERROR "hostname mismatch" UIWARP_TLS=on \
		"UIWARP_TLS_CERT=$TMP/client.pem" "UIWARP_TLS_KEY=$TMP/client.key" "UIWARP_TLS_CA=$TMP/ca.pem" \
		UIWARP_TLS_PEER_NAME=other.uiwarp.test
	client plain RDMA_CM_EVENT_REJECTED "plain MPA request rejected" UIWARP_TLS=off
	client no-cert "RDMA_CM_EVENT_" "certificate" UIWARP_TLS=on "UIWARP_TLS_CA=$TMP/ca.pem"
	inns env "${CLI_ENV[@]}" UIWARP_LOG=info timeout 20 "$RUN" rping -c -a $ADDR -p $PORT -C 5 -S 2000 -v \
		>"$TMP/good.log" 2>&1 || fail "a good client after the refused ones failed"
	[ "$(pings "$TMP/good.log")" = 5 ] || fail "good client: not 5 checked pings"
	# a PSK that differs, against a PSK server of its own (another port)
	PORT=$((PORT + 2))
	inns env UIWARP_TLS=required UIWARP_TLS_PSK=$PSK UIWARP_LOG=info timeout 20 "$RUN" rping -s \
		-a $ADDR -p $PORT -C 5 -S 2000 -v >"$TMP/psk-server.log" 2>&1 &
	PIDS+=($!)
	sleep 0.5
	client psk-mismatch RDMA_CM_EVENT_REJECTED "TLS handshake failed" UIWARP_TLS=on \
		UIWARP_TLS_PSK=00${PSK:2}
	# a server whose certificate expired yesterday
	openssl x509 -req -in "$TMP/server.csr" -CA "$TMP/ca.pem" -CAkey "$TMP/ca.key" -days -1 \
		-copy_extensions copy -out "$TMP/expired.pem" 2>/dev/null || fail "openssl: expired certificate"
	PORT=$((PORT + 2))
	inns env UIWARP_TLS=on "UIWARP_TLS_CERT=$TMP/expired.pem" "UIWARP_TLS_KEY=$TMP/server.key" \
		UIWARP_LOG=info timeout 20 "$RUN" rping -s -a $ADDR -p $PORT -C 5 -S 2000 -v \
		>"$TMP/expired-server.log" 2>&1 &
	PIDS+=($!)
	sleep 0.5
	client expired RDMA_CM_EVENT_CONNECT_ERROR "certificate has expired" UIWARP_TLS=on \
		"UIWARP_TLS_CA=$TMP/ca.pem" UIWARP_TLS_PEER_NAME=server.uiwarp.test
	log "PASS: $n refused clients, each with its event and reason; the server kept serving"
}

mode_replicate() {
	[ -x "$REP" ] || skip "uiwarp-replicate not built"
	head -c $((64 << 20)) /dev/urandom >"$TMP/src"
	local suite how
	for how in "TLS_AES_128_GCM_SHA256" "TLS_CHACHA20_POLY1305_SHA256" "TLS_AES_128_GCM_SHA256 --tcp"; do
		read -r suite tcp <<<"$how"
		rm -f "$TMP/dst"
		# --tls sets UIWARP_TLS itself (on / required); the PSK and the
		# suite come from the environment, as for any uiwarp program
		local E=(UIWARP_TLS_PSK=$PSK UIWARP_TLS_CIPHERS=$suite UIWARP_LOG=info)
		# shellcheck disable=SC2086
		inns env "${E[@]}" timeout 60 "$RUN" "$REP" recv -q --tls $tcp --port $PORT "$TMP/dst" \
			>"$TMP/recv.log" 2>&1 &
		local rp=$!
		PIDS+=("$rp")
		sleep 0.3
		# shellcheck disable=SC2086
		inns env "${E[@]}" timeout 60 "$RUN" "$REP" send -q --tls $tcp --port $PORT "$TMP/src" $ADDR \
			>"$TMP/send.log" 2>&1 || fail "$how: sender failed: $(tail -2 "$TMP/send.log")"
		wait "$rp" || fail "$how: receiver failed"
		cmp -s "$TMP/src" "$TMP/dst" || fail "$how: copy differs"
		grep -q "with TLS" "$TMP/send.log" || fail "$how: the final line does not say TLS"
		[ -z "$tcp" ] && { grep -q "$suite" "$TMP/send.log" || fail "$suite: not the suite in use"; }
		log "$how: $(grep -o 'sent .*with TLS' "$TMP/send.log")"
	done
	log "PASS: 64 MiB over uiwarp's TLS stream with each cipher and over TLS-wrapped TCP, copies equal"
}

mode_tamper() {
	[ -x "$REP" ] || skip "uiwarp-replicate not built"
	command -v python3 >/dev/null || skip "python3 not installed"
	head -c $((16 << 20)) /dev/urandom >"$TMP/src"
	local E=(UIWARP_TLS=required UIWARP_TLS_PSK=$PSK UIWARP_LOG=info)
	local PPORT=$((PORT + 1))
	# the proxy: one connection, client -> server bytes copied, one of them
	# flipped at offset FLIP (inside a record: the stream is all records)
	inns timeout 60 python3 - $ADDR $PPORT $PORT $((4 << 20)) >"$TMP/proxy.log" 2>&1 <<'EOF' &
import socket, sys, threading
addr, lport, dport, flip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((addr, lport)); ls.listen(1); ls.settimeout(30)
c, _ = ls.accept(); s = socket.create_connection((addr, dport))
def pipe(a, b, tamper):
    n = 0
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            if tamper and n <= flip < n + len(d):
                d = bytearray(d); d[flip - n] ^= 0x40; d = bytes(d)
                print("flipped byte", flip, flush=True)
            n += len(d); b.sendall(d)
    except OSError: pass
    for x in (a, b):
        try: x.shutdown(socket.SHUT_RDWR)
        except OSError: pass
t = threading.Thread(target=pipe, args=(s, c, False)); t.start()
pipe(c, s, True); t.join()
EOF
	PIDS+=($!)
	inns env "${E[@]}" timeout 60 "$RUN" "$REP" recv -q -t 20 --port $PORT "$TMP/dst" >"$TMP/recv.log" 2>&1 &
	local rp=$!
	PIDS+=("$rp")
	sleep 0.5
	inns env "${E[@]}" timeout 60 "$RUN" "$REP" send -q -t 20 --port $PPORT "$TMP/src" $ADDR \
		>"$TMP/send.log" 2>&1 && fail "the sender succeeded through a flipped byte"
	wait "$rp" && fail "the receiver succeeded through a flipped byte"
	grep -q "flipped byte" "$TMP/proxy.log" || fail "the proxy flipped nothing"
	grep -q "TLS read failed" "$TMP/recv.log" || fail "the receiver does not say the record failed"
	[ -e "$TMP/dst" ] && fail "a file appeared under the final name"
	log "receiver: $(grep -m1 'TLS read failed' "$TMP/recv.log" | sed 's/.*TLS/TLS/')"
	log "PASS: the flipped record failed authentication, the copy failed on both sides, no file"
}

case $MODE in
rping | refuse | replicate | tamper) "mode_$MODE" ;;
*) fail "unknown mode $MODE" ;;
esac
