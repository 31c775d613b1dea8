# Shared scaffolding of the shell tests that build network namespaces of
# their own (tests/wan/wan_test.sh, tests/mptcp/mptcp_test.sh); bash,
# sourced.
#
# Before sourcing, the test sets TEST_AREA (the tag of its log lines),
# MODE, TMP (a directory of its own: deleted after a pass, kept after a
# failure), PIDS=() (background processes, killed on exit) and defines
# net_down (deletes its namespaces; its output is discarded). Sourcing
# installs the EXIT trap (cleanup) and turns INT / TERM / HUP into exit
# 130, which runs it.
#
#   log MSG...   "[HH:MM:SS AREA MODE] MSG" on stdout
#   fail MSG...  logs "FAIL: MSG" and exits 1
#   skip MSG...  logs "SKIP: MSG" and exits 77 (ctest SKIP_RETURN_CODE)

log() { printf '[%s %s %s] %s\n' "$(date -u +%H:%M:%S)" "$TEST_AREA" "$MODE" "$*"; }
fail() {
	log "FAIL: $*"
	exit 1
}
skip() {
	log "SKIP: $*"
	exit 77
}
cleanup() {
	local rc=$? p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	net_down >/dev/null 2>&1
	[ "$rc" = 0 ] && rm -rf "$TMP"
	[ "$rc" = 0 ] || log "kept $TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
