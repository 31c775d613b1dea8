#!/bin/sh
# stat_target.sh: a uiw_target (tests/hostile) for hostile_test.py --target
# whose counters stay readable after it exits (UIWARP_STATS_KEEP=1).
# Environment: UIW_TARGET (the uiw_target binary), UIW_PID_FILE (gets the
# target's PID: it is exec'd, so it keeps this shell's).
echo $$ >"$UIW_PID_FILE"
UIWARP_STATS_KEEP=1 exec "$UIW_TARGET" "$@"
