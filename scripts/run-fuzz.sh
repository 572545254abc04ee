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
# shellcheck source=scripts/find-shared.sh
. scripts/find-shared.sh
shared="${KVSTITCH_SHARED:-$(find_shared)}"
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

# fuzz_cc ARGS...: the project's compile line for a fuzz target (add $san
# for the fuzzer itself, -DKVS_FUZZ_SEEDGEN for its seed generator).
fuzz_cc() { "$clang" -g -O1 -D_GNU_SOURCE -Iinclude -Isrc -Itests "$@"; }

# The GGUF reader needs only the error module from src/base.
src="src/gguf/*.c src/base/error.c src/base/file.c"
# shellcheck disable=SC2086
fuzz_cc $san fuzz/fuzz_gguf.c $src -o "$out/fuzz_gguf"
# shellcheck disable=SC2086
fuzz_cc -DKVS_FUZZ_SEEDGEN fuzz/fuzz_gguf.c $src -o "$out/seedgen"

# Seeds: the shared tiny model and vocabularies, plus builder-made files.
for f in "$shared/models/llama-2-tiny-random.gguf" "$shared"/tokenizer-tests/*.gguf; do
    [ -f "$f" ] && cp -f "$f" "$out/corpus/"
done
"$out/seedgen" "$out/corpus"

# run_target NAME SECONDS MAX_LEN CORPUS: runs build $out/NAME on its corpus,
# prints its executions, and exits non-zero with the log's tail on a crash.
run_target() {
    local name=$1 secs=$2 max_len=$3 corpus=$4 log="$out/$1.log" rc execs
    echo "run-fuzz: $name for ${secs}s, corpus $corpus ($(ls "$corpus" | wc -l) files), max_len $max_len"
    set +e
    "$out/$name" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$out/$name-" "$corpus" > "$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$execs" ] || execs=$(grep -o '#[0-9]*' "$log" | tail -1 | tr -d '#')
    if [ $rc -ne 0 ]; then
        tail -n 40 "$log" >&2
        echo "run-fuzz: $name CRASHED after ${execs:-?} executions (exit $rc); artifacts in $out/$name-*, log $log" >&2
        exit 1
    fi
    echo "run-fuzz: $name: ${execs:-?} executions in ${secs}s, no crash (log $log)"
}
run_target fuzz_gguf "$secs" "$max_len" "$out/corpus"

# The server's request parser (JSON -> request; needs cJSON, and the UTF-8
# repair of its error messages), seeded with example bodies, for at most 30 s
# of the budget.
mkdir -p "$out/serve_corpus"
cp -f fuzz/serve_seeds/*.json "$out/serve_corpus/"
# shellcheck disable=SC2046
fuzz_cc $san fuzz/fuzz_serve_request.c server/request.c src/tokenizer/unicode.c src/base/error.c \
    $(pkg-config --cflags --libs libcjson) -o "$out/fuzz_serve_request"
run_target fuzz_serve_request $(( secs < 30 ? secs : 30 )) 4096 "$out/serve_corpus"

# The cache entry codecs (a Redis value, the disk tier's entry header in
# it: the bytes a hostile Redis or cache directory hands the store), seeded
# with valid values of every codec, for at most 20 s.
entry_src="src/kv/redis_value.c src/kv/redis_marker.c src/kv/disk.c src/kv/entry_mac.c src/kv/keys.c src/kv/checksum.c src/kv/chunk.c src/model/kv_written.c src/base/sha256.c
           src/base/error.c src/base/file.c"
mkdir -p "$out/entry_corpus"
# shellcheck disable=SC2086
fuzz_cc $san fuzz/fuzz_cache_entry.c $entry_src -lzstd -lcrypto -o "$out/fuzz_cache_entry"
# shellcheck disable=SC2086
fuzz_cc -DKVS_FUZZ_SEEDGEN fuzz/fuzz_cache_entry.c $entry_src -lzstd -lcrypto -o "$out/entry_seedgen"
"$out/entry_seedgen" "$out/entry_corpus"
run_target fuzz_cache_entry $(( secs < 20 ? secs : 20 )) 4096 "$out/entry_corpus"

# The tokenizers and the streaming detokenizer (client text in, streamed
# text out) on the shared GPT-2 and Llama vocabularies, for at most 20 s;
# skipped, and said so, where those files are not there.
vocab_dir="$shared/tokenizer-tests"
if [ -f "$vocab_dir/ggml-vocab-gpt-2.gguf" ] && [ -f "$vocab_dir/ggml-vocab-llama-spm.gguf" ]; then
    mkdir -p "$out/tokenizer_corpus"
    cp -f fuzz/tokenizer_seeds/* "$out/tokenizer_corpus/"
    # shellcheck disable=SC2086
    fuzz_cc $san fuzz/fuzz_tokenizer.c src/tokenizer/*.c src/gguf/*.c src/base/error.c src/base/file.c \
        -o "$out/fuzz_tokenizer"
    KVS_FUZZ_VOCAB_DIR="$vocab_dir" run_target fuzz_tokenizer $(( secs < 20 ? secs : 20 )) 512 "$out/tokenizer_corpus"
else
    echo "run-fuzz: fuzz_tokenizer skipped: no GPT-2 / Llama vocabularies in $vocab_dir"
fi
