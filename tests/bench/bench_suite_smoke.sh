#!/bin/bash
# Smoke test of the benchmark suite (scripts/bench.sh): its quickest form on
# one path (lo, in a namespace of its own), one size, one run of the
# throughput group, then checks that summary.md has a numeric uiwarp / TCP
# ratio. Functional only: no figure is judged. Skips (77) without root,
# iproute2, perftest or the raw TCP tool.
#   bench_suite_smoke.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 77; }
for c in ip ss ib_write_bw python3; do
	command -v "$c" >/dev/null || { echo "SKIP: $c is not installed"; exit 77; }
done
if [ ! -x "$src/../shared/bench/bin/tcpbench" ] && [ ! -f "$src/../shared/bench/src/tcpbench.c" ]; then
	echo "SKIP: no tcpbench in ../shared/bench"
	exit 77
fi
out=$(mktemp -d /tmp/uiwarp-bench-smoke.XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT
timeout -k 5 100 "$src/scripts/bench.sh" --quick --paths lo --cc cubic --runs 1 --sizes 65536 \
	--groups bw --duration 1 --no-install --no-build --build-dir "$build" --out "$out"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: bench.sh exit $rc"; cat "$out/bench.log" 2>/dev/null; exit 1; }
for f in samples.tsv summary.md meta.txt; do
	[ -s "$out/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
# a row of the throughput table: | 64 KiB | TCP | Write | **ratio** ...
if ! grep -Eq '^\| 64 KiB \|.*\| \*\*[0-9]+\.[0-9]+\*\*' "$out/summary.md"; then
	echo "FAIL: no numeric uiwarp/TCP ratio in summary.md:"
	cat "$out/summary.md"
	exit 1
fi
# the framing floor's row (uiwarp-bench-mpa ran and its receiver checked
# every CRC): | 64 KiB | TCP | MPA + CRC | **MPA/TCP** | ...
if ! sed -n '/^## The framing floor/,/^## /p' "$out/summary.md" |
	grep -Eq '^\| 64 KiB \| [0-9.]+ .*\| [0-9.]+ \[.*\| \*\*[0-9]+\.[0-9]+\*\*'; then
	echo "FAIL: no framing floor row in summary.md:"
	cat "$out/summary.md"
	exit 1
fi
grep -E '^\| 64 KiB' "$out/summary.md"
echo PASS
