#!/bin/sh
# check-doc-table.sh VERBS_MD CMAKELISTS: every case named in the last
# column of docs/verbs.md's "First runs" table (`name`) is a case of
# tests/programs/CMakeLists.txt (UIW_PROGRAM_CASES), so the table users read
# is the one the tests check. Exit 0 if all are, and the table names some.
set -eu
md=$1
cml=$2
cases=$(sed -n '/^set(UIW_PROGRAM_CASES/,/)/p' "$cml" | tr -d '()' | tr -s ' \t' '\n' |
	grep -v '^set$\|^UIW_PROGRAM_CASES$\|^$')
table=$(awk '/^### First runs/{f=1} f && /^\| /{print} f && /^fabtests/{exit}' "$md")
n=0
missing=0
for c in $(printf '%s\n' "$table" | awk -F'|' '!/^\| program/ { print $(NF-1) }' | grep -o '`[a-z0-9_]*`' | tr -d '`'); do
	n=$((n + 1))
	if ! printf '%s\n' "$cases" | grep -qx "$c"; then
		echo "docs table names case '$c', not in UIW_PROGRAM_CASES" >&2
		missing=$((missing + 1))
	fi
done
echo "$n cases named in the table, $missing missing"
[ "$missing" = 0 ] && [ "$n" -gt 0 ]
