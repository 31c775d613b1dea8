#!/bin/sh
# Every symbol@version the real libibverbs.so.1 exports must be exported by
# ours in the same form (name@@VER default, name@VER hidden), except the
# hidden ibv_*@IBVERBS_1.0 compat duplicates (verbs-abi.md section 3); and
# every version node the real one defines must exist in ours.
# usage: check-symbols.sh OUR_LIB REAL_LIB
set -eu
ours=$1
real=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
syms() {
	# defined, non-local symbols carrying a version
	readelf --dyn-syms -W "$1" | awk '$7 != "UND" && $5 != "LOCAL" && $8 ~ /@/ {print $8}' |
		sort -u
}
syms "$real" | grep -v '[^@]@IBVERBS_1\.0$' >"$tmp/real"
syms "$ours" >"$tmp/ours"
nodes() {
	readelf -V -W "$1" | awk '/Version definition/,/Version needs/' |
		grep -o 'Name: [A-Za-z_0-9.]*' | sed 's/Name: //' | grep -v '^lib' | sort -u
}
nodes "$real" >"$tmp/nreal"
nodes "$ours" >"$tmp/nours"
status=0
missing=$(comm -23 "$tmp/real" "$tmp/ours")
if [ -n "$missing" ]; then
	echo "symbol@version missing from $ours:"
	echo "$missing"
	status=1
fi
nmissing=$(comm -23 "$tmp/nreal" "$tmp/nours")
if [ -n "$nmissing" ]; then
	echo "version nodes missing from $ours:"
	echo "$nmissing"
	status=1
fi
echo "real: $(wc -l <"$tmp/real") symbol@version and $(wc -l <"$tmp/nreal") nodes checked;" \
	"ours exports $(wc -l <"$tmp/ours") symbol@version in $(wc -l <"$tmp/nours") nodes"
exit $status
