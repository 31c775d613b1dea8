#!/bin/sh
# check-stub-exports.sh STUB REAL: the stub library STUB exports exactly the
# symbol@version set of the distribution's library REAL (readelf --dyn-syms
# -W, defined symbols with a version; @ and @@ compared as written). Prints
# the differences; exit 0 if there are none.
set -eu
stub=$1
real=$2
syms() {
	readelf --dyn-syms -W "$1" | awk '$7 != "UND" && $8 ~ /@/ { print $8 }' | sort -u
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
syms "$stub" >"$tmp/stub"
syms "$real" >"$tmp/real"
if ! diff "$tmp/real" "$tmp/stub" >"$tmp/diff"; then
	echo "$stub differs from $real (< only in the real library, > only in the stub):" >&2
	grep '^[<>]' "$tmp/diff" >&2
	exit 1
fi
echo "$stub: the $(wc -l <"$tmp/stub") symbol@version exports of $real"
