# shellcheck shell=bash disable=SC2154 # run.sh's variables
# The "mpi" case of tests/programs/run.sh (sourced by it, after placement):
# Open MPI's mpirun runs tests/programs/mpi_pingpong.c's two ranks with the
# ofi MTL over libfabric's "verbs;ofi_rxm", i.e. over uiwarp. "lo" mode:
# both ranks in the namespace of uiwv_ns_lo_if; "ns" mode: one rank in each
# namespace of uiwv_ns_pair, the second started by mpirun through an rsh
# agent of ours (ip netns exec in place of ssh). A capture of the server
# namespace's interface (lo, or the veth in "ns" mode) must hold an MPA
# Request, and the connection it opens must decode with tshark's iWARP
# dissectors (tests/e2e/tshark_check.py --two-pass: MPA Request and Reply,
# CRC32c good in every FPDU, at least 100 FPDUs, no Terminate): the MPI
# traffic went over the verbs path, not over TCP sockets of Open MPI's own.
# Uses: run, mode, need, here, in_srv, UIWV_* (lib.sh). Ends the test.

command -v dumpcap >/dev/null || uiwv_skip "dumpcap is not installed (tshark package)"
command -v tshark >/dev/null || uiwv_skip "tshark is not installed"
capif=lo
[ "$mode" = ns ] && capif=$UIWV_IF_A
pcap=$UIWV_TMP/mpi.pcap
"${in_srv[@]}" timeout -k 3 90 dumpcap -q -i "$capif" -f tcp -w "$pcap" 2>"$pcap.log" &
dpid=$!
UIWV_PIDS+=("$dpid")
for ((i = 0; i < 100; i++)); do
	grep -q 'Capturing on' "$pcap.log" 2>/dev/null && break
	sleep 0.1
done
grep -q 'Capturing on' "$pcap.log" || uiwv_fail "dumpcap did not start: $(cat "$pcap.log")"

# mpirun's "ssh HOST CMD": into the namespace that holds HOST's address
# shellcheck disable=SC2016 # the agent's own $1 / $host / $*
{
	echo '#!/bin/sh'
	echo 'host=$1'
	echo 'shift'
	echo 'case "$host" in'
	echo "$UIWV_ADDR_A) ns=${UIWV_NS_A:-${UIWV_NS_L:-}} ;;"
	[ "$mode" = ns ] && echo "$UIWV_ADDR_B) ns=$UIWV_NS_B ;;"
	echo '*) echo "agent: unknown host $host" >&2; exit 255 ;;'
	echo 'esac'
	echo 'exec ip netns exec "$ns" sh -c "$*"'
} >"$UIWV_TMP/agent.sh"
chmod +x "$UIWV_TMP/agent.sh"

hosts="$UIWV_ADDR_A:2"
[ "$mode" = ns ] && hosts="$UIWV_ADDR_A,$UIWV_ADDR_B"
# the ranks get uiwarp's libraries from mpirun's environment
mcmd=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	"$run" mpirun -np 2 --host "$hosts" --mca plm_rsh_agent "$UIWV_TMP/agent.sh"
	--mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include 198.51.100.0/24
	--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm" --mca btl self
	-x LD_LIBRARY_PATH)
# in the sanitized tree uiwarp-run preloads the runtimes: the ranks need
# them as mpirun does
grep -q "^sanitize='1'" "$run" && mcmd+=(-x LD_PRELOAD -x ASAN_OPTIONS)
# 10 rounds of 1 B .. 64 KiB each way (~1.4 MB: the capture stays small
# enough for tshark's PDML)
mcmd+=("$need" 10 65536)
uiwv_log "mpirun: ${mcmd[*]}"
timeout -k 3 60 "${in_srv[@]}" "${mcmd[@]}" >"$UIWV_TMP/client" 2>&1
crc=$?
sleep 0.3
kill -INT "$dpid" 2>/dev/null
uiwv_wait_pid "$dpid" 10 >/dev/null
cat "$UIWV_TMP/client"
if [ -n "${UIWV_LOG_DIR:-}" ]; then
	mkdir -p "$UIWV_LOG_DIR"
	cp "$pcap" "$UIWV_LOG_DIR/$case_name-$mode.pcap"
	cp "$UIWV_TMP/client" "$UIWV_LOG_DIR/$case_name-$mode.client"
fi
[ "$crc" = 0 ] || uiwv_fail "mpirun exit $crc"
grep -Eq '^mpi_pingpong: ok: 2 ranks, [0-9]+ bytes checked' "$UIWV_TMP/client" ||
	uiwv_fail "mpi_pingpong did not report its check"

# the verbs path on the wire: the port an MPA Request went to (rxm's
# listener), and that connection decoded
mport=$(tshark -r "$pcap" -n -o tcp.try_heuristic_first:TRUE --disable-protocol rpcordma \
	--disable-protocol smb_direct -Y iwarp_mpa.key.req -T fields -e tcp.dstport 2>/dev/null |
	head -1)
[ -n "$mport" ] || uiwv_fail "no MPA Request in the capture"
uiwv_log "MPA Request to port $mport"
python3 "$here/../e2e/tshark_check.py" "$pcap" "$mport" --min-fpdus 100 --two-pass ||
	uiwv_fail "tshark: the MPA connection on port $mport does not decode as iWARP"
uiwv_pass
