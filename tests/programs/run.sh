#!/bin/bash
# run.sh UIWARP_RUN MODE CASE: runs one unmodified rdma-core program case
# (tests/programs/CMakeLists.txt lists them) over uiwarp, either on
# loopback (MODE lo: 127.0.0.1) or between two network namespaces joined by
# a veth pair (MODE ns: server 198.51.100.1, client 198.51.100.2; needs
# root, else exit 77). *_ipv6 cases use ::1 / 2001:db8:5100::1, *_ll cases
# the server's link-local fe80::a with each side's own interface as scope
# (@ADDR@ for the client, @SADDR@ for the server; ns only). Passes when server and client exit 0 and the
# client's output matches the case's pattern (the program's own data check
# or result line). "refuse" cases pass when the program fails cleanly: a
# non-zero exit that is neither a signal nor a timeout. A missing program
# skips (77). Every wait is bounded (timeout(1)); namespaces are named
# uiwv-* and deleted on exit. UIWV_LOG_DIR, if set, keeps the outputs.
# libfabric and Open MPI cases (lo_if=1) need an interface with an address
# besides lo (libfabric's verbs provider ignores loopback interfaces): their
# "lo" mode is one namespace with a veth pair, 198.51.100.1 on one end,
# server and client in it (root only). "clean_error" cases pass when the
# program reports the expected error (server_pattern) and nothing dies of a
# signal; "detect" cases pass when the server's data checks catch a fault
# the client makes on purpose (server_pattern) and both ends fail cleanly;
# the "mpi" case runs mpirun (both ranks in one namespace, or one
# per namespace through an rsh agent of ours) under a capture and checks
# the MPA Request / Reply and FPDUs of a verbs connection with tshark.
set -u
run=$1
mode=$2
case_name=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/programs/lib.sh
. "$here/lib.sh"
uiwv_init "$case_name-$mode"

kind=pair # pair | single | refuse
server_env=""
client_env=""
pattern=""
server_pattern=""
kill_server=0 # servers that never exit on their own (qperf, cmtime)
af=4          # 4, 6 (IPv6) or ll (IPv6 link-local, ns only)
ssecs=40 # bounded: a hung case costs at most this (the suite runs serially)
csecs=20
need=""
lo_if=0 # "lo" mode: a namespace with a veth pair (libfabric, Open MPI)
bindir=$(cd "$(dirname "$run")" && pwd)

# --------------------------------------------------------------- cases
pt() { # perftest: pt PROGRAM ARGS... (same args both ends; -R always)
	need=$1
	server="$1 -R -F -p @PORT@ ${*:2}"
	client="$1 -R -F -p @PORT@ ${*:2} @ADDR@"
}
case "$case_name" in
# perftest -R (rdma_cm); the pattern is the result line "<size> <iters>"
write_bw) pt ib_write_bw -n 200 -s 65536; pattern='^ 65536 +200 ' ;;
read_bw) pt ib_read_bw -n 200 -s 65536; pattern='^ 65536 +200 ' ;;
send_bw) pt ib_send_bw -n 200 -s 65536; pattern='^ 65536 +200 ' ;;
write_lat) pt ib_write_lat -n 200 -s 8; pattern='^ 8 +200 ' ;;
read_lat) pt ib_read_lat -n 200 -s 8; pattern='^ 8 +200 ' ;;
send_lat) pt ib_send_lat -n 200 -s 8; pattern='^ 8 +200 ' ;;
write_bw_all) csecs=40
	pt ib_write_bw -a -n 5; pattern='^ 8388608 +5 ' ;;
send_bw_all) csecs=40
	pt ib_send_bw -a -n 5; pattern='^ 8388608 +5 ' ;;
read_bw_all) csecs=40
	pt ib_read_bw -a -n 5; pattern='^ 8388608 +5 ' ;;
write_bw_dur) pt ib_write_bw -D 1 -s 65536; pattern='^ 65536 +[0-9]+ ' ;;
write_bw_qps) pt ib_write_bw -q 4 -n 200 -s 16384; pattern='^ 16384 +800 ' ;;
send_bw_srq) pt ib_send_bw --use-srq -n 200 -s 4096; pattern='^ 4096 +200 ' ;;
send_lat_event) pt ib_send_lat -e -n 200 -s 64; pattern='^ 64 +200 ' ;;
# -n 199, not 200: perftest 4.5's iWARP send credits (ctx->send_rcredit) can
# leave an even -n client blocked in ibv_get_cq_event with nothing in
# flight (docs/verbs.md, known problems); an odd -n rounds rx_depth past it
send_bw_event) pt ib_send_bw -e -n 199 -s 4096; pattern='^ 4096 +199 ' ;;
write_lat_inline) pt ib_write_lat -I 64 -n 200 -s 32; pattern='^ 32 +200 ' ;;
send_lat_inline) pt ib_send_lat -I 64 -n 200 -s 32; pattern='^ 32 +200 ' ;;
write_bw_bidir) pt ib_write_bw -b -n 200 -s 65536; pattern='^ 65536 +200 ' ;;
send_bw_bidir) pt ib_send_bw -b -n 200 -s 65536; pattern='^ 65536 +200 ' ;;
atomic_bw)
	pt ib_atomic_bw -n 200
	server_env="UIWARP_RFC7306=1"
	client_env="UIWARP_RFC7306=1"
	pattern='^ 8 +200 '
	;;
atomic_lat)
	pt ib_atomic_lat -n 200
	server_env="UIWARP_RFC7306=1"
	client_env="UIWARP_RFC7306=1"
	pattern='^ 8 +200 '
	;;
atomic_refused) # one end without RFC 7306: the posts fail, cleanly
	pt ib_atomic_bw -n 50
	server_env="UIWARP_RFC7306=1"
	kind=refuse
	;;
# qperf -cm1 (the server forks per request and never exits)
qperf_*)
	need=qperf
	t=${case_name#qperf_}
	server="qperf -lp @PORT@"
	client="qperf -cm1 -lp @PORT@ -t 1 @ADDR@ $t"
	kill_server=1
	case $t in
	rc_bw | rc_rdma_write_bw)
		# Each message consumes a receive (Send, Write with Immediate).
		# qperf's server posts 1024 receives and reposts only after
		# polling, without flow control; iWARP has no RNR retry, so a
		# server that falls 1024 messages behind (descheduled on a
		# loaded machine, ASan) gets its QP terminated (DDP "no buffer
		# available", RFC 5040 §4.8), as on an RNIC. With 4 MiB messages
		# that takes 4 GiB of lag, more than one second moves.
		client="qperf -cm1 -lp @PORT@ -t 1 -m 4M @ADDR@ $t"
		;;
	esac
	case $t in
	rc_rdma_write_bw | rc_rdma_write_lat | rc_compare_swap_mr | rc_fetch_add_mr)
		# Write with Immediate and atomics: RFC 7306 on both ends
		server_env="UIWARP_RFC7306=1"
		client_env="UIWARP_RFC7306=1"
		;;
	esac
	case $t in
	*bw) pattern='bw += +[0-9.]+ [KMG]B/sec' ;;
	*lat) pattern='latency += +[0-9.]+ [mun]?s' ;;
	*_mr) pattern='msg_rate += +[0-9.]+ [KM]?/sec' ;;
	esac
	;;
# rdmacm-utils
rping)
	need=rping
	server="rping -s -a @ADDR@ -p @PORT@ -C 10 -v"
	client="rping -c -a @ADDR@ -p @PORT@ -C 10 -v -S 64"
	pattern='^ping data: rdma-ping-9: '
	;;
rping_q)
	need=rping
	server="rping -s -q -a @ADDR@ -p @PORT@ -C 5 -v -S 100"
	client="rping -c -q -a @ADDR@ -p @PORT@ -C 5 -v -S 100"
	pattern='^ping data: rdma-ping-4: '
	;;
rping_ipv6 | rping_ll)
	need=rping
	af=${case_name#rping_}
	af=${af/ipv/}
	server="rping -s -a @SADDR@ -p @PORT@ -C 10 -v"
	client="rping -c -a @ADDR@ -p @PORT@ -C 10 -v -S 64"
	pattern='^ping data: rdma-ping-9: '
	;;
ucmatose_ipv6 | ucmatose_ll)
	need=ucmatose
	af=${case_name#ucmatose_}
	af=${af/ipv/}
	server="ucmatose -b @SADDR@ -p @PORT@ -c 2 -C 10"
	client="ucmatose -s @ADDR@ -p @PORT@ -c 2 -C 10"
	pattern='return status 0'
	server_pattern='return status 0'
	;;
ucmatose)
	need=ucmatose
	server="ucmatose -p @PORT@ -c 2 -C 10"
	client="ucmatose -s @ADDR@ -p @PORT@ -c 2 -C 10"
	pattern='return status 0'
	server_pattern='return status 0'
	;;
ucmatose_m)
	need=ucmatose
	server="ucmatose -p @PORT@ -c 2 -m"
	client="ucmatose -s @ADDR@ -p @PORT@ -c 2 -m"
	pattern='migrating to new event channel'
	server_pattern='return status 0'
	;;
rdma_server)
	need=rdma_server
	server="rdma_server -p @PORT@"
	client="rdma_client -s @ADDR@ -p @PORT@"
	pattern='rdma_client: end 0'
	server_pattern='rdma_server: end 0'
	;;
cmtime | cmtime_100)
	# connects, then rdma_disconnect + rdma_destroy_qp at once and waits
	# for every DISCONNECTED; the server (never exits) must not crash
	need=cmtime
	n=20
	[ "$case_name" = cmtime_100 ] && n=100
	server="cmtime -b @ADDR@ -p @PORT@"
	client="cmtime -s @ADDR@ -p @PORT@ -c $n"
	pattern='^disconnect +: +[0-9.]+'
	kill_server=1
	;;
rstream_refused) # rsockets are not implemented (docs/verbs.md): rsocket() is
	# ENOSYS, and rdmacm-utils' rstream says so and exits
	need=rstream
	server="rstream -p @PORT@"
	client="rstream -s @ADDR@ -p @PORT@"
	kind=refuse
	;;
udaddy_refused) # UD: not an iWARP QP type; fails with the adapter's error
	need=udaddy
	server="udaddy -p @PORT@"
	client="udaddy -s @ADDR@ -p @PORT@"
	kind=refuse
	;;
# ibverbs-utils (one process)
ibv_devices)
	need=ibv_devices
	kind=single
	client="ibv_devices"
	pattern='uiw0[[:space:]]+[0-9a-f]{16}'
	;;
ibv_devinfo)
	need=ibv_devinfo
	kind=single
	client="ibv_devinfo -v"
	pattern='vendor_id:.*0x1425'
	;;
ud_pingpong_refused)
	need=ibv_ud_pingpong
	kind=single_refuse
	client="ibv_ud_pingpong -d uiw0"
	;;
# libfabric 1.17 (libfabric-bin's fi_pingpong; our fi_check for what
# fabtests' fi_msg_pingpong / fi_msg_bw / fi_rma_bw / fi_rdm_pingpong do:
# fabtests is not packaged in Debian), provider verbs (FI_EP_MSG) and
# "verbs;ofi_rxm" (FI_EP_RDM); -c / fi_check check every byte
fi_pingpong_msg | fi_pingpong_rdm | fi_pingpong_rdm_tagged)
	need=fi_pingpong
	lo_if=1
	fp="fi_pingpong -p verbs -e msg"
	[ "$case_name" = fi_pingpong_msg ] || fp="fi_pingpong -p verbs;ofi_rxm -e rdm"
	[ "$case_name" = fi_pingpong_rdm_tagged ] && fp="$fp -m tagged"
	server="$fp -I 100 -c -B @PORT@"
	client="$fp -I 100 -c -P @PORT@ @ADDR@"
	pattern='^1m +100 +=100 '
	server_pattern='^1m +100 +=100 '
	;;
fi_msg_pingpong | fi_msg_bw | fi_msg_rma | fi_rdm_tagged | fi_rdm_bw | fi_rdm_bw_rndv)
	need=$bindir/fi_check
	lo_if=1
	t=${case_name#fi_}
	if [ "$case_name" = fi_rdm_bw_rndv ]; then
		# rxm's SAR limit down to its eager size: 64 KiB by rendezvous too
		t=rdm_bw
		server_env="FI_OFI_RXM_SAR_LIMIT=16384"
		client_env=$server_env
	fi
	prov=verbs
	case $t in
	rdm_*) prov="verbs;ofi_rxm" ;;
	esac
	server="$need -p $prov -t $t -B @PORT@"
	client="$need -p $prov -t $t -B @PORT@ @ADDR@"
	pattern="fi_check: $t .* ok: client, [0-9]+ bytes checked, provider $prov, fabric Ethernet-iWARP, domain uiw0"
	server_pattern="fi_check: $t .* ok: server"
	;;
# rdm_bw's checks must catch a fault the client makes on purpose (-F): a
# flipped bit, a message one byte short, the last message left out
fi_rdm_bw_corrupt | fi_rdm_bw_short | fi_rdm_bw_missing)
	need=$bindir/fi_check
	lo_if=1
	kind=detect
	csecs=40
	f=${case_name#fi_rdm_bw_}
	server="$need -p verbs;ofi_rxm -t rdm_bw -B @PORT@"
	client="$need -p verbs;ofi_rxm -t rdm_bw -F $f -B @PORT@ @ADDR@"
	case $f in
	corrupt) server_pattern='FAIL: message [0-9]+ \(1048576 bytes\): byte 524305 is 0x' ;;
	short) server_pattern='FAIL: message [0-9]+: 1048575 bytes, not 1048576' ;;
	missing) server_pattern='FAIL: no completion within 10000 ms' ;;
	esac
	;;
# Open MPI 4.1, two ranks over the ofi MTL with "verbs;ofi_rxm"
mpi_pingpong)
	need=$bindir/mpi_pingpong
	lo_if=1
	kind=mpi
	;;
# fio's rdma engine (rdma_cm ports): the server is the rw=read job
fio_write | fio_read | fio_send | fio_send_deep)
	need=fio
	ssecs=20
	csecs=12
	verb=${case_name#fio_}
	sdepth=16
	if [ "$case_name" = fio_send_deep ]; then
		# fio's SEND mode has no flow control (engines/rdma.c posts a
		# receive per queued io_u, the client sends as fast as its sends
		# complete) and relies on IB's RNR retry, which iWARP lacks.
		# fio's own advice (its comment before usleep(500000) in
		# fio_rdmaio_connect): a deeper receive side. 512 = 32m / 64k:
		# every receive is posted before the first data Send.
		verb=send
		sdepth=512
	fi
	server="fio --name=srv --ioengine=rdma --port=@PORT@ --bs=64k --size=32m --rw=read --iodepth=$sdepth"
	client="fio --name=cli --ioengine=rdma --hostname=@ADDR@ --port=@PORT@ --verb=$verb --bs=64k --size=32m --rw=write --iodepth=16"
	pattern='err= 0'
	server_pattern='err= 0'
	;;
fio_send_1024)
	# fio 3.33's server job with iodepth > 512 overruns its own
	# rmt_us[FIO_RDMA_MAX_IO_DEPTH] table (fio_rdmaio_init_io_u writes an
	# entry per io_u) and overwrites rd->pd with an rkey and a size; the
	# next ibv_reg_mr gets that stray PD. It must fail with EINVAL, not
	# crash (docs/verbs.md, known problems)
	need=fio
	ssecs=20
	csecs=12
	kind=clean_error
	server="fio --name=srv --ioengine=rdma --port=@PORT@ --bs=64k --size=64m --rw=read --iodepth=1024"
	client="fio --name=cli --ioengine=rdma --hostname=@ADDR@ --port=@PORT@ --verb=send --bs=64k --size=64m --rw=write --iodepth=16"
	server_pattern='ibv_reg_mr io_u failed: Invalid argument'
	;;
*)
	uiwv_fail "unknown case $case_name"
	;;
esac

command -v "$need" >/dev/null 2>&1 || uiwv_skip "$need is not installed"
if [ "$kind" = mpi ]; then
	command -v mpirun >/dev/null 2>&1 || uiwv_skip "mpirun (openmpi-bin) is not installed"
fi

# ------------------------------------------------------------- placement
if [ "$mode" = ns ]; then
	uiwv_ns_pair
	srv_addr=$UIWV_ADDR_A
	in_srv=(ip netns exec "$UIWV_NS_A")
	in_cli=(ip netns exec "$UIWV_NS_B")
elif [ "$lo_if" = 1 ]; then
	# one namespace, an interface with an address besides lo
	[ "$(id -u)" = 0 ] || uiwv_skip "needs root: libfabric ignores loopback interfaces"
	command -v ip >/dev/null || uiwv_skip "iproute2 is not installed"
	uiwv_ns_lo_if
	srv_addr=$UIWV_ADDR_A
	in_srv=(ip netns exec "$UIWV_NS_L")
	in_cli=(ip netns exec "$UIWV_NS_L")
elif [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
	# loopback inside a private namespace: no port clashes, no leftovers
	uiwv_ns_lo
	srv_addr=127.0.0.1
	in_srv=(ip netns exec "$UIWV_NS_L")
	in_cli=(ip netns exec "$UIWV_NS_L")
else
	srv_addr=127.0.0.1
	in_srv=()
	in_cli=()
fi
sv_addr=$srv_addr
case "$af:$mode" in
6:ns) srv_addr=$UIWV_ADDR6_A sv_addr=$srv_addr ;;
6:lo) srv_addr=::1 sv_addr=::1 ;;
ll:ns) # the same address, each side with its own interface as scope id
	srv_addr="$UIWV_LL_A%$UIWV_IF_B"
	sv_addr="$UIWV_LL_A%$UIWV_IF_A"
	;;
ll:lo) uiwv_skip "link-local needs two namespaces" ;;
esac
port=$(uiwv_port)
server=${server:-}
server=${server//@SADDR@/$sv_addr}
server=${server//@PORT@/$port}
server=${server//@ADDR@/$srv_addr}
client=${client:-}
client=${client//@PORT@/$port}
client=${client//@ADDR@/$srv_addr}

# env VAR=... uiwarp-run PROG: word splitting of the commands is on purpose
# shellcheck disable=SC2206
scmd=(env $server_env "$run" $server)
# shellcheck disable=SC2206
ccmd=(env $client_env "$run" $client)

if [ "$kind" = mpi ]; then
	# shellcheck source=tests/programs/mpi_case.sh
	. "$here/mpi_case.sh"
fi

if [ "$kind" = single ] || [ "$kind" = single_refuse ]; then
	uiwv_log "client: ${ccmd[*]}"
	timeout -k 3 "$csecs" "${in_cli[@]}" "${ccmd[@]}" >"$UIWV_TMP/client" 2>&1
	crc=$?
	cat "$UIWV_TMP/client"
	if [ "$kind" = single_refuse ]; then
		uiwv_clean_fail "$crc" || uiwv_fail "expected a clean failure, exit $crc"
		uiwv_pass
	fi
	[ "$crc" = 0 ] || uiwv_fail "exit $crc"
	grep -Eq "$pattern" "$UIWV_TMP/client" || uiwv_fail "output lacks /$pattern/"
	uiwv_pass
fi

uiwv_log "server: ${scmd[*]}"
timeout -k 3 "$ssecs" "${in_srv[@]}" "${scmd[@]}" >"$UIWV_TMP/server" 2>&1 &
spid=$!
UIWV_PIDS+=("$spid")
if ! uiwv_wait_listen "${in_srv[*]}" "$port" 10 "$spid"; then
	cat "$UIWV_TMP/server"
	if [ "$kind" = refuse ] && ! kill -0 "$spid" 2>/dev/null; then
		wait "$spid"
		src=$?
		uiwv_clean_fail "$src" && uiwv_pass
		uiwv_fail "server exit $src: not a clean failure"
	fi
	uiwv_fail "server did not listen on $port"
fi
uiwv_log "client: ${ccmd[*]}"
timeout -k 3 "$csecs" "${in_cli[@]}" "${ccmd[@]}" >"$UIWV_TMP/client" 2>&1
crc=$?
server_died=0
if [ "$kill_server" = 1 ]; then
	# a server that never exits on its own must still be running
	kill -0 "$spid" 2>/dev/null || server_died=1
	kill -TERM "$spid" 2>/dev/null
fi
uiwv_wait_pid "$spid" 20
src=$?
echo "--- client (exit $crc)"
cat "$UIWV_TMP/client"
echo "--- server (exit $src)"
cat "$UIWV_TMP/server"
if [ -n "${UIWV_LOG_DIR:-}" ]; then
	mkdir -p "$UIWV_LOG_DIR"
	cp "$UIWV_TMP/client" "$UIWV_LOG_DIR/$case_name-$mode.client"
	cp "$UIWV_TMP/server" "$UIWV_LOG_DIR/$case_name-$mode.server"
fi

if [ "$kind" = clean_error ]; then
	# the expected error, reported; no end killed by a signal or a timeout
	for rc in "$crc" "$src"; do
		[ "$rc" = 0 ] || uiwv_clean_fail "$rc" || uiwv_fail "exit $rc: not a clean end"
	done
	! grep -q 'got signal' "$UIWV_TMP/client" "$UIWV_TMP/server" ||
		uiwv_fail "a job died of a signal"
	grep -Eq "$server_pattern" "$UIWV_TMP/server" || uiwv_fail "server output lacks /$server_pattern/"
	uiwv_pass
fi
if [ "$kind" = detect ]; then
	# the server's checks catch the client's fault: it fails cleanly with
	# the expected report, and the client does not report success either
	uiwv_clean_fail "$src" || uiwv_fail "server exit $src: expected a clean failure"
	grep -Eq "$server_pattern" "$UIWV_TMP/server" || uiwv_fail "server output lacks /$server_pattern/"
	uiwv_clean_fail "$crc" || uiwv_fail "client exit $crc: expected a clean failure"
	! grep -q ' ok: ' "$UIWV_TMP/client" || uiwv_fail "the client reported success"
	uiwv_pass
fi
if [ "$kind" = refuse ]; then
	# a clean failure: some end exits 1..123 (not 124 timeout, not >= 128
	# signal), neither end crashes
	for rc in "$crc" "$src"; do
		[ "$rc" = 0 ] || uiwv_clean_fail "$rc" || [ "$kill_server" = 1 ] ||
			uiwv_fail "expected a clean failure, got exit $rc"
	done
	[ "$crc" != 0 ] || [ "$src" != 0 ] || uiwv_fail "expected a failure, both ends succeeded"
	uiwv_pass
fi
[ "$crc" = 0 ] || uiwv_fail "client exit $crc"
[ "$server_died" = 0 ] || uiwv_fail "server exited (status $src) before it was stopped"
if [ "$kill_server" = 0 ]; then
	[ "$src" = 0 ] || uiwv_fail "server exit $src"
fi
grep -Eq "$pattern" "$UIWV_TMP/client" || uiwv_fail "client output lacks /$pattern/"
if grep -Eq 'failed|Couldn.t|error' "$UIWV_TMP/client" && [ "$need" = qperf ]; then
	uiwv_fail "qperf reported a failure"
fi
if [ -n "$server_pattern" ]; then
	grep -Eq "$server_pattern" "$UIWV_TMP/server" || uiwv_fail "server output lacks /$server_pattern/"
fi
uiwv_pass
