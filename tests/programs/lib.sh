# shellcheck shell=bash
# Helpers for tests/programs/run.sh (sourced by bash).
#
#   uiwv_init NAME     UIWV_TAG (unique), UIWV_TMP, and the EXIT trap that
#                      kills our jobs and deletes our namespaces
#   uiwv_ns_pair       namespaces UIWV_NS_A / UIWV_NS_B (names uiwv-*) joined by
#                      a veth pair UIWV_IF_A / UIWV_IF_B, 198.51.100.1 / .2
#                      (UIWV_ADDR_A / _B), 2001:db8:5100::1 / ::2
#                      (UIWV_ADDR6_A / _B) and link-local fe80::a / fe80::b
#                      (UIWV_LL_A / _B, without scope); skips (77) when not root
#   uiwv_wait_listen "NETNS-PREFIX" PORT SECS [PID]   waits until PORT listens
#                      (fails early when PID exits)
#   uiwv_wait_pid PID SECS   its exit status, or 124 after killing it
#   uiwv_ns_lo         namespace UIWV_NS_L with only loopback (root only)
#   uiwv_ns_lo_if      namespace UIWV_NS_L with lo and a veth pair whose one
#                      end has 198.51.100.1/24 (UIWV_ADDR_A): one host with
#                      an interface besides lo (root only)
#   uiwv_port          a port derived from the pid
#   uiwv_pass / uiwv_fail MSG / uiwv_skip MSG   exit 0 / 1 / 77
# shellcheck source=tests/cleanup.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cleanup.sh"
set -u
UIWV_PIDS=()
UIWV_NETNS=()

uiwv_log() { printf '[%s %s] %s\n' "$(date -u +%H:%M:%S)" "${UIWV_TAG:-uiwv}" "$*"; }
uiwv_pass() {
	uiwv_log PASS
	exit 0
}
uiwv_fail() {
	uiwv_log "FAIL: $*"
	exit 1
}
uiwv_skip() {
	uiwv_log "SKIP: $*"
	exit 77
}

uiwv_cleanup() {
	local rc=$?
	uiw_stop_pids "${UIWV_PIDS[@]}"
	uiw_del_netns "${UIWV_NETNS[@]}"
	[ -n "${UIWV_TMP:-}" ] && rm -rf "$UIWV_TMP"
	exit "$rc"
}

uiwv_init() {
	UIWV_TAG="uiwv-$1-$$"
	UIWV_TMP=$(mktemp -d "/tmp/uiwv.XXXXXX")
	trap uiwv_cleanup EXIT
	trap 'exit 130' INT TERM HUP
}

uiwv_ns_pair() {
	local id i
	[ "$(id -u)" = 0 ] || uiwv_skip "needs root (network namespaces)"
	command -v ip >/dev/null || uiwv_skip "iproute2 is not installed"
	id=$(printf '%05x' $(($$ % 1048576)))
	UIWV_NS_A="uiwv-$id-a"
	UIWV_NS_B="uiwv-$id-b"
	UIWV_ADDR_A=198.51.100.1
	UIWV_ADDR_B=198.51.100.2
	ip netns add "$UIWV_NS_A" || uiwv_fail "ip netns add $UIWV_NS_A"
	UIWV_NETNS+=("$UIWV_NS_A")
	ip netns add "$UIWV_NS_B" || uiwv_fail "ip netns add $UIWV_NS_B"
	UIWV_NETNS+=("$UIWV_NS_B")
	ip -n "$UIWV_NS_A" link set lo up
	ip -n "$UIWV_NS_B" link set lo up
	ip link add "uv${id}a" netns "$UIWV_NS_A" type veth peer name "uv${id}b" netns "$UIWV_NS_B" ||
		uiwv_fail "veth"
	UIWV_IF_A="uv${id}a"
	UIWV_IF_B="uv${id}b"
	UIWV_ADDR6_A=2001:db8:5100::1
	UIWV_ADDR6_B=2001:db8:5100::2
	UIWV_LL_A=fe80::a
	UIWV_LL_B=fe80::b
	ip -n "$UIWV_NS_A" addr add "$UIWV_ADDR_A/24" dev "uv${id}a"
	ip -n "$UIWV_NS_B" addr add "$UIWV_ADDR_B/24" dev "uv${id}b"
	# IPv6 global and link-local; nodad: usable at once, not tentative
	ip -n "$UIWV_NS_A" addr add "$UIWV_ADDR6_A/64" dev "uv${id}a" nodad
	ip -n "$UIWV_NS_B" addr add "$UIWV_ADDR6_B/64" dev "uv${id}b" nodad
	ip -n "$UIWV_NS_A" addr add "$UIWV_LL_A/64" dev "uv${id}a" nodad
	ip -n "$UIWV_NS_B" addr add "$UIWV_LL_B/64" dev "uv${id}b" nodad
	ip -n "$UIWV_NS_A" link set "uv${id}a" up
	ip -n "$UIWV_NS_B" link set "uv${id}b" up
	for ((i = 0; i < 50; i++)); do
		ip -n "$UIWV_NS_A" link show "uv${id}a" | grep -q 'state UP' &&
			ip -n "$UIWV_NS_B" link show "uv${id}b" | grep -q 'state UP' && break
		sleep 0.1
	done
	((i < 50)) || uiwv_fail "veth did not come up"
}

# True if exit status RC is a program's own failure: not 0, not timeout(1)'s
# 124, not death by a signal (128+n); exit(-1) (255) counts as the program's.
uiwv_clean_fail() {
	local rc=$1
	[ "$rc" != 0 ] && [ "$rc" != 124 ] && { [ "$rc" -lt 128 ] || [ "$rc" = 255 ]; }
}

# A namespace with only loopback (root): the lo cases run in it, so that
# whatever a program leaves behind (fio's job processes) is killed with it.
uiwv_ns_lo() {
	UIWV_NS_L="uiwv-$(printf '%05x' $(($$ % 1048576)))-l"
	ip netns add "$UIWV_NS_L" || uiwv_fail "ip netns add $UIWV_NS_L"
	UIWV_NETNS+=("$UIWV_NS_L")
	ip -n "$UIWV_NS_L" link set lo up
}

uiwv_ns_lo_if() {
	local id i
	uiwv_ns_lo
	id=$(printf '%05x' $(($$ % 1048576)))
	UIWV_ADDR_A=198.51.100.1
	ip -n "$UIWV_NS_L" link add "ul${id}a" type veth peer name "ul${id}b" || uiwv_fail "veth"
	ip -n "$UIWV_NS_L" addr add "$UIWV_ADDR_A/24" dev "ul${id}a"
	ip -n "$UIWV_NS_L" link set "ul${id}a" up
	ip -n "$UIWV_NS_L" link set "ul${id}b" up
	for ((i = 0; i < 50; i++)); do
		ip -n "$UIWV_NS_L" link show "ul${id}a" | grep -q 'state UP' && break
		sleep 0.1
	done
	((i < 50)) || uiwv_fail "veth did not come up"
}

. "$(dirname "${BASH_SOURCE[0]}")/../port.sh"
uiwv_port() { uiw_free_port; }

uiwv_wait_listen() {
	local pre=$1 port=$2 secs=$3 pid=${4:-} i
	for ((i = 0; i < secs * 10; i++)); do
		[ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
		# shellcheck disable=SC2086 # pre is "ip netns exec NS" or empty
		$pre ss -ltnH 2>/dev/null | grep -q ":$port " && return 0
		sleep 0.1
	done
	return 1
}

uiwv_wait_pid() {
	local pid=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			return $?
		fi
		sleep 0.1
	done
	kill -TERM "$pid" 2>/dev/null
	sleep 0.5
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 124
}
