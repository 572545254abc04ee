#!/usr/bin/env bash
# Builds and runs the libFuzzer targets for a bounded time.
#   scripts/run-fuzz.sh [SECONDS]      (default 30; `make fuzz FUZZ_SECONDS=N`)
# Env: CLANG (default clang), FUZZ_MAX_LEN (default 65536: larger seeds are cut,
# which keeps executions fast; the builder seeds cover the tensor directory),
# FUZZ_OUT (default build/fuzz).
# Prints the executions and exits non-zero if the fuzzer found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
out="${FUZZ_OUT:-build/fuzz}"
clang="${CLANG:-clang}"
max_len="${FUZZ_MAX_LEN:-65536}"
shared="${KVSTITCH_SHARED:-../shared}"
san="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
mkdir -p "$out/corpus"

# libFuzzer ships with clang's compiler-rt; install it if this clang lacks it.
have_libfuzzer() {
    command -v "$clang" >/dev/null 2>&1 || return 1
    printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
        > "$out/probe.c"
    "$clang" $san "$out/probe.c" -o "$out/probe" >/dev/null 2>&1
}
if ! have_libfuzzer; then
    echo "run-fuzz: $clang with libFuzzer not found; trying apt-get install clang libclang-rt-dev" >&2
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if command -v apt-get >/dev/null 2>&1; then
        $sudo apt-get update -qq >&2 || true
        $sudo apt-get install -y -qq clang libclang-rt-dev >&2 || \
            $sudo apt-get install -y -qq clang "libclang-rt-$(clang --version 2>/dev/null | sed -n 's/.*version \([0-9]*\).*/\1/p' | head -1)-dev" >&2 || true
    fi
    have_libfuzzer || { echo "run-fuzz: error: need clang with libFuzzer (Debian: apt-get install clang libclang-rt-dev)" >&2; exit 2; }
fi

# The GGUF reader needs only the error module from src/base.
src="src/gguf/*.c src/base/error.c src/base/file.c"
# shellcheck disable=SC2086
"$clang" -g -O1 -D_GNU_SOURCE $san -Iinclude -Isrc -Itests fuzz/fuzz_gguf.c $src -o "$out/fuzz_gguf"
# shellcheck disable=SC2086
"$clang" -g -O1 -D_GNU_SOURCE -DKVS_FUZZ_SEEDGEN -Iinclude -Isrc -Itests fuzz/fuzz_gguf.c $src -o "$out/seedgen"

# Seeds: the shared tiny model and vocabularies, plus builder-made files.
for f in "$shared/models/llama-2-tiny-random.gguf" "$shared"/tokenizer-tests/*.gguf; do
    [ -f "$f" ] && cp -f "$f" "$out/corpus/"
done
"$out/seedgen" "$out/corpus"

log="$out/fuzz_gguf.log"
echo "run-fuzz: fuzz_gguf for ${secs}s, corpus $out/corpus ($(ls "$out/corpus" | wc -l) files), max_len $max_len"
set +e
"$out/fuzz_gguf" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus" > "$log" 2>&1
rc=$?
set -e
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ -z "$execs" ]; then
    execs=$(grep -o '#[0-9]*' "$log" | tail -1 | tr -d '#')
fi
if [ $rc -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "run-fuzz: fuzz_gguf CRASHED after ${execs:-?} executions (exit $rc); artifacts in $out/, log $log" >&2
    exit 1
fi
echo "run-fuzz: fuzz_gguf: ${execs:-?} executions in ${secs}s, no crash (log $log)"

# The server's request parser (JSON -> request; needs only cJSON), seeded
# with example bodies, for at most 30 s of the budget.
serve_secs=$(( secs < 30 ? secs : 30 ))
mkdir -p "$out/serve_corpus"
cp -f fuzz/serve_seeds/*.json "$out/serve_corpus/"
# shellcheck disable=SC2046
"$clang" -g -O1 -D_GNU_SOURCE $san -Iinclude fuzz/fuzz_serve_request.c server/request.c \
    $(pkg-config --cflags --libs libcjson) -o "$out/fuzz_serve_request"
log="$out/fuzz_serve_request.log"
set +e
"$out/fuzz_serve_request" -max_total_time="$serve_secs" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$out/serve-" "$out/serve_corpus" > "$log" 2>&1
rc=$?
set -e
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ $rc -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "run-fuzz: fuzz_serve_request CRASHED after ${execs:-?} executions (exit $rc); log $log" >&2
    exit 1
fi
echo "run-fuzz: fuzz_serve_request: ${execs:-?} executions in ${serve_secs}s, no crash (log $log)"
