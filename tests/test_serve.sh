#!/usr/bin/env bash
# The server suite (tests/serve/, pytest + the openai client + curl), run by
# scripts/run-tests.sh: prints one "ok NAME" / "FAIL NAME" line per test.
# The Python packages come from scripts/setup-venv.sh (a venv outside the
# tree); every server the tests start binds 127.0.0.1 on a free port and is
# stopped by the fixtures, also on failure. Bounded: 20 minutes at most.
set -uo pipefail
cd "$(dirname "$0")/.."
export KVSTITCH_CLI="${KVSTITCH_CLI:-build/kvstitch}"
case "$KVSTITCH_CLI" in /*) ;; *) KVSTITCH_CLI="$(pwd)/$KVSTITCH_CLI" ;; esac
if [ -z "${KVSTITCH_MODEL:-}" ]; then
    KVSTITCH_MODEL=$(scripts/fetch-model.sh | tail -n 1) || { echo "FAIL serve_model_fetch"; exit 1; }
    export KVSTITCH_MODEL
fi
if ! PY=$(scripts/setup-venv.sh | tail -n 1); then
    echo "FAIL serve_setup_venv (scripts/setup-venv.sh failed: the suite needs openai, pytest, requests)"
    exit 1
fi
if ! command -v curl >/dev/null; then
    echo "FAIL serve_curl_missing (install curl: scripts/install-deps.sh)"
    exit 1
fi
# Quick mode (CI's sanitizer pass): the parser, handlers and errors, the
# HTTP layer's limits, the load test (200 requests), cancellation and the
# drain; the rest runs in the plain pass.
sel=()
if [ "${KVSTITCH_TEST_QUICK:-0}" = 1 ] && [ $# -eq 0 ]; then
    sel=(-k "test_api or test_http or test_load or disconnect or queue_full or sigterm_answers or sigterm_finishes")
fi
out=$(timeout 1200 "$PY" -m pytest -p no:cacheprovider -q -rA tests/serve "${sel[@]}" "$@" 2>&1)
rc=$?
# Summary lines: "PASSED tests/serve/test_api.py::test_x", "FAILED ...", "ERROR ...".
# Measurements the tests print ("load: ...") go to the log as they are.
grep -E '^load: ' <<<"$out" | sort -u
sed -n -E 's/^PASSED (tests\/serve\/)?([^ ]*).*/ok serve:\2/p; s/^(FAILED|ERROR) (tests\/serve\/)?([^ ]*).*/FAIL serve:\3/p' <<<"$out"
if [ $rc -ne 0 ]; then
    # Each failure's traceback and assertion (pytest's FAILURES / ERRORS
    # sections, bounded), then the end: a flake that CI met once must leave
    # more in its log than the failing test's name.
    printf '%s\n' "$out" | sed -n -E '/^=+ (FAILURES|ERRORS) =+$/,/^=+ short test summary/p' | head -n 400 >&2
    printf '%s\n' "$out" | tail -n 80 >&2
    grep -qE '^(FAILED|ERROR) ' <<<"$out" || echo "FAIL serve_pytest (exit $rc)"
fi
exit $rc
