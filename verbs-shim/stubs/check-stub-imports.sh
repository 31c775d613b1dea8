#!/bin/sh
# check-stub-imports.sh TSV LIB VERPREFIX: every symbol@version of the
# measured import list TSV (verbs-abi-imports.tsv: "symbol@version<TAB>
# importer") whose version starts with VERPREFIX (MLX5_ / EFA_) is defined
# by LIB under that version (readelf --dyn-syms -W). Exit 0 if all are.
set -eu
tsv=$1
lib=$2
prefix=$3
defined=$(readelf --dyn-syms -W "$lib" | awk '$7 != "UND" && $8 ~ /@/ { sub(/@@/, "@", $8); print $8 }')
missing=0
n=0
for s in $(grep -v '^#' "$tsv" | cut -f1 | grep "@$prefix" | sort -u); do
	n=$((n + 1))
	if ! printf '%s\n' "$defined" | grep -qx "$s"; then
		echo "missing: $s" >&2
		missing=$((missing + 1))
	fi
done
echo "$lib: $n imported $prefix* symbols, $missing missing"
[ "$missing" = 0 ] && [ "$n" -gt 0 ]
