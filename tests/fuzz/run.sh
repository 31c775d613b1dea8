#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, docs/fuzzing.md) in
# build-fuzz/ with clang and runs each for SECONDS (default 60) over its
# seed corpus, one after the other, single process.
#
#   tests/fuzz/run.sh [SECONDS]
#
# New inputs go to build-fuzz/fuzz-corpus/<harness>/ (the seeds in
# tests/fuzz/corpus/ are only read); a crash, a sanitizer report, a leak
# or a hang (an input over 10 s) stops that harness, leaves the input in
# build-fuzz/fuzz-artifacts/ and makes the script exit 1. Every harness's
# line in the summary gives its executions, exec/s and coverage (cov: and
# ft: of libFuzzer). Exit 0 all clean, 1 a finding or a build failure,
# 77 clang or libFuzzer missing (nothing was run).
#
# Environment: UIW_FUZZ_BUILD build directory (default build-fuzz),
# UIW_FUZZ_ONLY a space-separated subset of the harnesses.
set -uo pipefail

SECS=${1:-60}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UIW_FUZZ_BUILD:-$ROOT/build-fuzz}
HARNESSES=(fuzz_mpa_rr fuzz_fpdu fuzz_rdmap_rx fuzz_iwpm)
[ -n "${UIW_FUZZ_ONLY:-}" ] && read -r -a HARNESSES <<<"$UIW_FUZZ_ONLY"
declare -A MAXLEN=([fuzz_mpa_rr]=1024 [fuzz_fpdu]=8192 [fuzz_rdmap_rx]=8192 [fuzz_iwpm]=128)

log() {
	printf '[fuzz %s] %s\n' "$(date -u +%H:%M:%S)" "$*"
}

if ! command -v clang >/dev/null; then
	log "SKIP: clang is not installed (apt-get install clang)"
	exit 77
fi
probe=$(mktemp -d /tmp/uiw-fuzz-probe.XXXXXX)
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ return (int)(d && n) * 0; }\n' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
	log "SKIP: clang cannot link libFuzzer: $(head -3 "$probe/err")"
	rm -rf "$probe"
	exit 77
fi
rm -rf "$probe"

# a build dir configured from another source tree or compiler: afresh
if [ -f "$BUILD/CMakeCache.txt" ] &&
	! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD/CMakeCache.txt"; then
	rm -rf "$BUILD"
fi
mkdir -p "$BUILD"
log "configure and build $BUILD (clang, -fsanitize=fuzzer,address,undefined)"
CC=clang cmake -S "$ROOT" -B "$BUILD" -DUIWARP_FUZZ=ON -DUIWARP_BUILD_TESTS=OFF \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD/configure.log" 2>&1 ||
	{
		cat "$BUILD/configure.log"
		log "FAILED: configure"
		exit 1
	}
cmake --build "$BUILD" -j2 --target "${HARNESSES[@]}" ||
	{
		log "FAILED: build"
		exit 1
	}

mkdir -p "$BUILD/fuzz-corpus" "$BUILD/fuzz-artifacts" "$BUILD/fuzz-logs"
status=0
summary=()
for h in "${HARNESSES[@]}"; do
	work=$BUILD/fuzz-corpus/$h
	out=$BUILD/fuzz-logs/$h.log
	mkdir -p "$work"
	log "$h: ${SECS} s over tests/fuzz/corpus/$h (log: $out)"
	t0=$(date +%s)
	# -timeout: an input over 10 s is a hang; the wall limit covers a
	# run that stops making progress altogether
	timeout -k 30 $((SECS + 300)) "$BUILD/bin/$h" -max_total_time="$SECS" -timeout=10 \
		-rss_limit_mb=2048 -max_len="${MAXLEN[$h]:-4096}" -dict="$ROOT/tests/fuzz/$h.dict" \
		-artifact_prefix="$BUILD/fuzz-artifacts/$h-" -print_final_stats=1 \
		"$work" "$ROOT/tests/fuzz/corpus/$h" </dev/null >"$out" 2>&1
	rc=$?
	last=$(grep -E '^#[0-9]+' "$out" | tail -1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out")
	cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\).*/cov \1 ft \2/p' <<<"$last")
	eps=$(sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p' <<<"$last")
	line="$h: $(($(date +%s) - t0)) s, ${execs:-?} execs, ${eps:-?} exec/s, ${cov:-cov ?}"
	if [ "$rc" != 0 ]; then
		status=1
		line="$line: FINDING (rc $rc): $(grep -m1 -E 'ERROR|SUMMARY|deadly|Test unit written' "$out")"
		grep -E 'Test unit written|SUMMARY' "$out"
		tail -60 "$out"
	fi
	log "$line"
	summary+=("$line")
done
log "summary:"
for l in "${summary[@]}"; do
	log "  $l"
done
exit $status
