#!/usr/bin/env bash
# The Python package (python/): its pytest suite against the library this
# build made ($BUILD/libkvstitch.so), in the project venv (scripts/setup-venv.sh:
# cffi, pytest). One "ok NAME" / "FAIL NAME" line per pytest test.
# Sanitizer builds are skipped: an instrumented libkvstitch.so cannot be
# loaded into an uninstrumented python (the plain `make test` pass runs it).
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
if [ -n "${SANITIZE:-}" ] || [ "$BUILD" != build ]; then echo "skipped test_python.sh (sanitizer build)"; exit 0; fi
: "${KVSTITCH_MODEL:?}"
py=$(scripts/setup-venv.sh | tail -n 1) || { echo "FAIL python_venv: scripts/setup-venv.sh failed"; exit 1; }
out=$(PYTHONPATH=python KVSTITCH_LIB="$BUILD/libkvstitch.so" "$py" -m pytest -q -rA -p no:cacheprovider \
      python/tests 2>&1); rc=$?
# -rA summary lines: "PASSED python/tests/test_x.py::test_name", FAILED/ERROR likewise
sed -n -E 's/^PASSED python\/tests\/(test_[a-z_]+)\.py::([A-Za-z0-9_]+).*/ok python_\1.\2/p' <<<"$out"
sed -n -E 's/^(FAILED|ERROR) python\/tests\/(test_[a-z_]+)\.py::([A-Za-z0-9_]+)(.*)/FAIL python_\2.\3\4/p' <<<"$out"
if [ $rc -ne 0 ]; then printf '%s\n' "$out" | tail -40; fi
exit $rc
