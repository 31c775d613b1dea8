#!/bin/sh
# check-exports.sh OURS REAL [NEWER]: compares the defined dynamic
# symbol@version sets of two shared libraries (readelf --dyn-syms -W) and
# their version definitions (readelf -V -W). NEWER (optional) lists what
# ours exports beyond REAL, one "symbol node parent" a line (# comments):
# those symbols (FUNC, default version) and nodes are expected in addition.
# Exit 0 if equal, 1 with a diff otherwise.
set -eu
ours=$1
real=$2
newer=${3:-}
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
if [ -n "$newer" ]; then
	grep -v '^#' "$newer" | awk 'NF == 3 { print "FUNC", $1 "@@" $2 }' >>"$tmp/real"
	sort -o "$tmp/real" "$tmp/real"
	# new nodes follow the real ones, each once, in file order
	grep -v '^#' "$newer" | awk 'NF == 3 && !seen[$2]++ { print $2; print "  parent", $3 }' \
		>>"$tmp/vreal"
fi
rc=0
if ! diff -u "$tmp/real" "$tmp/ours"; then
	echo "exported symbol@version sets differ (- expected, + ours)" >&2
	rc=1
fi
if ! diff -u "$tmp/vreal" "$tmp/vours"; then
	echo "version definitions differ (- expected, + ours)" >&2
	rc=1
fi
[ "$rc" = 0 ] && echo "$(wc -l <"$tmp/ours") symbols, version nodes: $(grep -cv parent "$tmp/vours"), identical"
exit $rc
