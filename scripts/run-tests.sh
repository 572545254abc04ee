#!/usr/bin/env bash
# Runs every test binary in $BUILD/tests and prints "N passed, N failed,
# N skipped" last. A test prints "ok NAME", "FAIL NAME" or "skip NAME: reason"
# (tests/harness.h SKIP); skips are counted apart, never as passes, and their
# lines are shown.
# Tests find the model in $KVSTITCH_MODEL (fetched here if unset) and
# ../shared in $KVSTITCH_SHARED (found here if unset).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
# shellcheck source=scripts/find-shared.sh
. scripts/find-shared.sh
KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(find_shared)}"
export KVSTITCH_SHARED
if [ -z "${KVSTITCH_MODEL:-}" ]; then
    KVSTITCH_MODEL=$(scripts/fetch-model.sh | tail -n 1) || { echo "run-tests: model fetch failed" >&2; exit 1; }
    export KVSTITCH_MODEL
fi
export KVSTITCH_CLI="$BUILD/kvstitch"
# Every decode step checks the Q8 decode layout it reads against the rows
# (model/kv_buffer.h): a writer of KV slots that does not mark them fails.
export KVSTITCH_VERIFY_KV_LAYOUT="${KVSTITCH_VERIFY_KV_LAYOUT:-1}"

pass=0; fail=0; skip=0; failed_bins=()
# C test programs (built by make) and shell tests (tests/test_*.sh, run with bash).
for t in "$BUILD"/tests/test_* tests/test_*.sh; do
    [ -f "$t" ] || continue
    case "$t" in *.d|*.o) continue;; esac
    name=$(basename "$t")
    # KVSTITCH_TEST_SKIP: an extended regex of test names to leave out (CI's sanitizer pass).
    if [ -n "${KVSTITCH_TEST_SKIP:-}" ] && [[ "$name" =~ ${KVSTITCH_TEST_SKIP} ]]; then
        echo "skip $name: left out by KVSTITCH_TEST_SKIP"; skip=$((skip + 1)); continue
    fi
    t0=$(date +%s.%N)
    # Say which test is running when it takes more than a few seconds (the
    # sleeps get no stdout/stderr, so none outlives the test holding a pipe).
    ( sleep 5 </dev/null >/dev/null 2>&1; s=5
      while :; do echo "  ... $name running (${s}s)" >&2; sleep 30 </dev/null >/dev/null 2>&1; s=$((s + 30)); done ) &
    notice=$!
    if [[ "$t" == *.sh ]]; then out=$(bash "$t" 2>&1); rc=$?; else out=$("$t" 2>&1); rc=$?; fi
    kill "$notice" 2>/dev/null; wait "$notice" 2>/dev/null
    p=$(grep -c '^ok ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out"); s=$(grep -c '^skip ' <<<"$out")
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; out+=$'\n'"FAIL $name (exit $rc)"; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    if [ "$f" -gt 0 ]; then failed_bins+=("$name"); printf '%s\n' "$out";
    elif [ "$s" -gt 0 ]; then grep '^skip ' <<<"$out"; fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    printf '%-32s %3d passed %3d failed %3d skipped %7ss\n' "$name" "$p" "$f" "$s" "$secs"
done
[ ${#failed_bins[@]} -gt 0 ] && echo "failed: ${failed_bins[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
