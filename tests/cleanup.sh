# Shared cleanup for the shell test harnesses (sourced by tests/e2e/lib.sh
# and tests/programs/lib.sh).
#
#   uiw_stop_pids PID...   SIGTERM each, wait up to 1 s for each, then SIGKILL
#   uiw_del_netns NS...    SIGKILL what still runs in each namespace, delete it

uiw_stop_pids() {
	local p
	for p in "$@"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "$@"; do
		# bounded wait, then force
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null
	done
}

uiw_del_netns() {
	local n p
	for n in "$@"; do
		ip netns pids "$n" 2>/dev/null | while read -r p; do kill -KILL "$p" 2>/dev/null; done
		ip netns del "$n" 2>/dev/null
	done
}
