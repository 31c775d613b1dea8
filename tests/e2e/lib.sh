# shellcheck shell=bash
# Helpers for the uiwarp end-to-end tests (sourced by bash).
#
# Every test makes its own network namespaces (prefix "uiwe"), with a veth
# pair between them, and deletes them on exit, so tests run in parallel
# safely. Addresses: TEST-NET-2 (198.51.100.0/24) or TEST-NET-3
# (203.0.113.0/24); the namespaces are isolated, so two tests may use the
# same addresses at once.
#
#   e2e_init NAME          sets E2E_TAG (unique), E2E_TMP (a temp dir) and the
#                          EXIT trap that kills our jobs and deletes our netns
#   e2e_ns_pair [SUBNET]   creates $NS_A / $NS_B joined by a veth pair;
#                          SUBNET "198.51.100" (default) or "203.0.113";
#                          sets ADDR_A (.1) ADDR_B (.2), IF_A, IF_B
#   e2e_bg VAR CMD...      starts CMD in the background, records its pid in VAR
#                          (and in the kill list)
#   e2e_run CMD...         runs CMD (killable by the EXIT trap), returns its status
#   e2e_wait_for FILE REGEX SECONDS   polls FILE until a line matches
#   e2e_skip MSG           prints MSG and exits 77 (ctest SKIP_RETURN_CODE)
#   e2e_fail MSG           prints MSG and exits 1
# shellcheck source=tests/cleanup.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cleanup.sh"

set -u

E2E_PIDS=()
E2E_NETNS=()
E2E_BIG_FILES=() # removed even when the temp dir is kept for a failure
E2E_KEEP=${E2E_KEEP:-0}

e2e_log() {
	printf '[%s %s] %s\n' "$(date -u +%H:%M:%S)" "${E2E_TAG:-e2e}" "$*"
}

e2e_fail() {
	e2e_log "FAIL: $*"
	exit 1
}

e2e_skip() {
	e2e_log "SKIP: $*"
	exit 77
}

e2e_cleanup() {
	local rc=$?
	uiw_stop_pids "${E2E_PIDS[@]}"
	uiw_del_netns "${E2E_NETNS[@]}"
	[ ${#E2E_BIG_FILES[@]} -gt 0 ] && rm -f "${E2E_BIG_FILES[@]}"
	if [ "$E2E_KEEP" = 1 ] || [ "$rc" != 0 ]; then
		[ -n "${E2E_TMP:-}" ] && e2e_log "kept $E2E_TMP"
	else
		[ -n "${E2E_TMP:-}" ] && rm -rf "$E2E_TMP"
	fi
	exit "$rc"
}

e2e_init() {
	local name=$1
	# unique per run: short name + pid (netns names must be unique on the host)
	E2E_TAG="uiwe-${name}-$$"
	E2E_TMP=$(mktemp -d "/tmp/${E2E_TAG}.XXXXXX")
	trap e2e_cleanup EXIT
	trap 'exit 130' INT TERM HUP
	if [ "$(id -u)" != 0 ]; then
		e2e_skip "needs root (network namespaces)"
	fi
}

e2e_ns_pair() {
	local subnet=${1:-198.51.100}
	local id
	id=$(printf '%05x' $(($$ % 1048576)))
	NS_A="${E2E_TAG}-a"
	NS_B="${E2E_TAG}-b"
	IF_A="ue${id}a"
	IF_B="ue${id}b"
	ADDR_A="${subnet}.1"
	ADDR_B="${subnet}.2"
	ip netns add "$NS_A" || e2e_fail "ip netns add $NS_A"
	E2E_NETNS+=("$NS_A")
	ip netns add "$NS_B" || e2e_fail "ip netns add $NS_B"
	E2E_NETNS+=("$NS_B")
	ip -n "$NS_A" link set lo up
	ip -n "$NS_B" link set lo up
	ip link add "$IF_A" netns "$NS_A" type veth peer name "$IF_B" netns "$NS_B" ||
		e2e_fail "veth $IF_A/$IF_B"
	ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
	ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
	ip -n "$NS_A" link set "$IF_A" up
	ip -n "$NS_B" link set "$IF_B" up
	# the link is up when a ping gets through (bounded: 5 tries)
	# both ends up (bounded: 5 s); ping when it is installed
	local i
	for ((i = 0; i < 50; i++)); do
		ip -n "$NS_A" link show "$IF_A" | grep -q 'state UP' &&
			ip -n "$NS_B" link show "$IF_B" | grep -q 'state UP' && break
		sleep 0.1
	done
	((i < 50)) || e2e_fail "veth $IF_A/$IF_B did not come up"
	if command -v ping >/dev/null; then
		ip netns exec "$NS_A" ping -c1 -W2 "$ADDR_B" >/dev/null 2>&1 ||
			e2e_fail "no ping from $ADDR_A to $ADDR_B"
	fi
}

# A single namespace with only loopback (for the loopback tests).
e2e_ns_lo() {
	NS_L="${E2E_TAG}-l"
	ip netns add "$NS_L" || e2e_fail "ip netns add $NS_L"
	E2E_NETNS+=("$NS_L")
	ip -n "$NS_L" link set lo up
}

e2e_bg() {
	local var=$1
	shift
	"$@" &
	local pid=$!
	E2E_PIDS+=("$pid")
	printf -v "$var" '%s' "$pid"
}

# Runs CMD in the background and waits for it: unlike a foreground command,
# `wait` is interrupted by a signal, so a timeout's TERM reaches the EXIT
# trap (which kills CMD and deletes the namespaces) at once. Returns CMD's
# status.
e2e_run() {
	"$@" &
	local pid=$!
	E2E_PIDS+=("$pid")
	wait "$pid"
}

e2e_wait_for() {
	local file=$1 re=$2 secs=$3
	local n=$((secs * 10)) i
	for ((i = 0; i < n; i++)); do
		grep -qE "$re" "$file" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# Waits for pid up to SECONDS; returns its exit status, or 124 after killing
# it on timeout.
e2e_wait_pid() {
	local pid=$1 secs=$2
	local n=$((secs * 10)) i
	for ((i = 0; i < n; i++)); do
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

# A port unlikely to collide: 20000 + (pid-derived) ; tests in separate
# namespaces do not collide anyway, loopback tests use their own netns too.
e2e_port() {
	echo $((20000 + ($$ * 7 + ${1:-0}) % 20000))
}

# Starts dumpcap in NS on IF for "tcp port PORT" into FILE and waits until it
# captures. Sets DUMPCAP_PID.
e2e_capture_start() {
	local ns=$1 ifname=$2 port=$3 file=$4
	command -v dumpcap >/dev/null || e2e_skip "dumpcap not installed (tshark package)"
	e2e_bg DUMPCAP_PID ip netns exec "$ns" dumpcap -q -i "$ifname" -f "tcp port $port" \
		-w "$file" 2>"$file.log"
	e2e_wait_for "$file.log" "Capturing on" 10 || {
		cat "$file.log"
		e2e_fail "dumpcap did not start"
	}
	sleep 0.3
}

e2e_capture_stop() {
	sleep 0.3
	kill -INT "$DUMPCAP_PID" 2>/dev/null
	e2e_wait_pid "$DUMPCAP_PID" 10 || true
}

# Repo paths: E2E_SRC (tests/e2e source dir), UIW_BUILD (build dir with bin/).
E2E_SRC=${E2E_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
HOSTILE_SRC=${HOSTILE_SRC:-$(cd "$E2E_SRC/../hostile" && pwd)}
PYTHON=${PYTHON:-python3}

# uiwarp-run, with the sanitizer runtimes preloaded when the build is
# sanitized (UIW_PRELOAD, set by CMake): an uninstrumented program such as
# rping must load libasan before our instrumented libraries.
# shellcheck disable=SC2034 # UIW_RUN is for the scripts that source this
uiw_need_run() {
	UIW_BUILD=${UIW_BUILD:-}
	[ -n "$UIW_BUILD" ] || e2e_fail "UIW_BUILD not set"
	[ -x "$UIW_BUILD/bin/uiwarp-run" ] || e2e_fail "$UIW_BUILD/bin/uiwarp-run not built"
	UIW_RUN=("$UIW_BUILD/bin/uiwarp-run")
	if [ -n "${UIW_PRELOAD:-}" ]; then
		UIW_RUN=(env "LD_PRELOAD=$UIW_PRELOAD"
			"ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}"
			"UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
			"$UIW_BUILD/bin/uiwarp-run")
	fi
}

# Waits until something listens on TCP PORT in NS (bounded); gives up early
# when PID (optional) has exited.
uiw_wait_listen() {
	local ns=$1 port=$2 secs=$3 pid=${4:-} i
	for ((i = 0; i < secs * 10; i++)); do
		ip netns exec "$ns" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}
