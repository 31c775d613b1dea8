# Shared port picker for the shell test harnesses (POSIX sh; sourced).
#
#   uiw_free_port [SEED]   prints a TCP port for a test server to listen on
#
# The port lies in [20000, 32768), below Linux's default ephemeral range
# (net.ipv4.ip_local_port_range 32768-60999): a test that made many
# connections leaves client ports of that range in TIME_WAIT, and a listener
# cannot bind a port a TIME_WAIT socket without SO_REUSEADDR still holds
# (EADDRINUSE: cm_rping_q failed so once in CI). Starting from a pid-derived
# port (+ SEED), it skips every port that any socket of this network
# namespace uses, in any state (ss -tan), trying at most 200 ports.
uiw_free_port() {
	_uiw_p=$((20000 + ($$ * 7 + ${1:-0}) % 12768))
	_uiw_i=0
	while [ $_uiw_i -lt 200 ]; do
		if ! command -v ss >/dev/null 2>&1 ||
			[ -z "$(ss -Htan "( sport = :$_uiw_p )" 2>/dev/null)" ]; then
			echo $_uiw_p
			return 0
		fi
		_uiw_p=$((20000 + (_uiw_p - 20000 + 97) % 12768))
		_uiw_i=$((_uiw_i + 1))
	done
	echo $_uiw_p
}
