#!/bin/bash
# docs_man.sh SRCDIR BUILDDIR: the man pages cannot drift from the doc and
# the programs: each page renders without a groff warning; every variable
# of docs/configuration.md's tables is in uiwarp.7 and in `uiwarp-run
# --help`, and nothing else is; every long option a program's --help lists
# is in its page and every option its page lists is in --help.
set -u
src=$1
build=$2
man=$build/man
rc=0
fail() {
	echo "FAIL: $*"
	rc=1
}
command -v groff >/dev/null || {
	echo "SKIP: groff is not installed"
	exit 77
}
for p in uiwarp-run.1 uiwarp-replicate.1 uiwarp-stat.1 uiwarp.7; do
	[ -f "$man/$p" ] || {
		fail "$p was not generated"
		continue
	}
	w=$(groff -k -man -Tutf8 -ww -z "$man/$p" 2>&1)
	[ -z "$w" ] || fail "$p: groff says: $w"
done
doc=$(grep -o '^| `UIWARP_[A-Z0-9_]*`' "$src/docs/configuration.md" | tr -d '|` ' | sort -u)
page=$(groff -k -man -Tutf8 "$man/uiwarp.7" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g; s/.\x08//g' |
	grep -o 'UIWARP_[A-Z0-9_]*' | sort -u)
help=$("$build/bin/uiwarp-run" --help | grep -o '^  UIWARP_[A-Z0-9_]*' | tr -d ' ' | sort -u)
[ -n "$doc" ] || fail "no variables in docs/configuration.md"
for v in $doc; do
	echo "$page" | grep -qx "$v" || fail "$v (docs/configuration.md) not in uiwarp.7"
	echo "$help" | grep -qx "$v" || fail "$v (docs/configuration.md) not in uiwarp-run --help"
done
for v in $help; do
	echo "$doc" | grep -qx "$v" || fail "$v in uiwarp-run --help, not in docs/configuration.md"
done
echo "variables: $(echo "$doc" | wc -l) in the doc, the page and --help"
for prog in uiwarp-run uiwarp-replicate uiwarp-stat; do
	hopts=$("$build/bin/$prog" --help 2>&1 | sed '/^Environment variables/,$d' | grep -o -- '--[a-z][a-z-]*' | sort -u)
	popts=$(grep -o -- '\*\*--[a-z][a-z-]*\*\*' "$src/docs/man/$prog.1.md" | tr -d '*' | sort -u)
	for o in $hopts; do
		echo "$popts" | grep -qx -- "$o" || fail "$prog: $o in --help, not in $prog.1"
	done
	for o in $popts; do
		echo "$hopts" | grep -qx -- "$o" || fail "$prog: $o in $prog.1, not in --help"
	done
	echo "$prog: options $(echo $hopts)"
done
[ $rc = 0 ] && echo PASS
exit $rc
