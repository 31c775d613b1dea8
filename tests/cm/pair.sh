#!/bin/sh
# pair.sh UIWARP_RUN SERVER_CMD CLIENT_CMD [PATTERN]: runs a server and a
# client program (each a single string; @PORT@ is replaced by a port) on
# 127.0.0.1 through uiwarp-run, each bounded by timeout(1). Passes if both
# exit 0 and, when given, PATTERN (grep -E) occurs in the client's output.
set -u
run=$1
server=$2
client=$3
pattern=${4-}
tmp=$(mktemp -d)
spid=
trap '[ -n "$spid" ] && kill $spid 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/../port.sh"
port=$(uiw_free_port)
server=$(printf '%s' "$server" | sed "s/@PORT@/$port/g")
client=$(printf '%s' "$client" | sed "s/@PORT@/$port/g")

# shellcheck disable=SC2086 # the commands are word-split on purpose
timeout 60 "$run" $server >"$tmp/server" 2>&1 &
spid=$!
i=0
while [ $i -lt 50 ]; do
	if command -v ss >/dev/null 2>&1; then
		ss -ltn 2>/dev/null | grep -q ":$port " && break
	else
		sleep 1
		break
	fi
	sleep 0.1
	i=$((i + 1))
done
# shellcheck disable=SC2086
timeout 45 "$run" $client >"$tmp/client" 2>&1
crc=$?
wait $spid
src=$?
spid=
echo "--- client: $client (exit $crc)"
cat "$tmp/client"
echo "--- server: $server (exit $src)"
cat "$tmp/server"
[ "$crc" = 0 ] && [ "$src" = 0 ] || exit 1
if [ -n "$pattern" ] && ! grep -Eq "$pattern" "$tmp/client"; then
	echo "--- client output lacks /$pattern/"
	exit 1
fi
exit 0
