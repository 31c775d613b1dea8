#!/bin/sh
# check-exports.sh OURS REAL: compares the defined dynamic symbol@version sets
# of two shared libraries (readelf --dyn-syms -W) and their version
# definitions (readelf -V -W). Exit 0 if equal, 1 with a diff otherwise.
set -eu
ours=$1
real=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
syms() {
	readelf --dyn-syms -W "$1" | awk '$7 != "UND" && $8 ~ /@/ { print $4, $8 }' | sort
}
vdefs() {
	readelf -V -W "$1" | sed -n '/Version definition/,/Version needs/p' |
		sed -n 's/.*Flags: none.*Name: \([^ ]*\).*/\1/p; s/.*Parent 1: \([^ ]*\).*/  parent \1/p'
}
syms "$ours" >"$tmp/ours"
syms "$real" >"$tmp/real"
vdefs "$ours" >"$tmp/vours"
vdefs "$real" >"$tmp/vreal"
rc=0
if ! diff -u "$tmp/real" "$tmp/ours"; then
	echo "exported symbol@version sets differ (- real, + ours)" >&2
	rc=1
fi
if ! diff -u "$tmp/vreal" "$tmp/vours"; then
	echo "version definitions differ (- real, + ours)" >&2
	rc=1
fi
[ "$rc" = 0 ] && echo "$(wc -l <"$tmp/ours") symbols, version nodes: $(grep -cv parent "$tmp/vours"), identical"
exit $rc
