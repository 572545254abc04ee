#!/usr/bin/env bash
# CLI contract tests: tokenize / info output, --help, and error handling.
# Prints "ok NAME" / "FAIL NAME" per check (counted by scripts/run-tests.sh).
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi; }

# Every llama.cpp vector through the CLI (the same strings the C tests use), with --no-bos.
vectors() {
    local vocab=$1 n=0 bad=0
    python3 - "$SHARED/tokenizer-tests/$vocab.inp" "$tmp/$vocab" <<'PY'
import sys, os
parts = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
os.makedirs(sys.argv[2], exist_ok=True)
for i, p in enumerate(parts[:-1] if parts[-1] == "" else parts):
    open(os.path.join(sys.argv[2], "%04d.txt" % i), "w", encoding="utf-8").write(p)
PY
    local i=0
    while IFS= read -r expected; do
        f=$(printf '%s/%s/%04d.txt' "$tmp" "$vocab" $i)
        [ -f "$f" ] || break
        got=$("$CLI" tokenize -m "$SHARED/tokenizer-tests/$vocab" --no-bos --no-special -f "$f" 2>&1)
        exp=$(echo "$expected" | xargs)
        [ "$got" = "$exp" ] || { bad=$((bad+1)); [ $bad -le 3 ] && echo "  $vocab #$i: got '$got' want '$exp'"; }
        n=$((n+1)); i=$((i+1))
    done < "$SHARED/tokenizer-tests/$vocab.out"
    echo "  $vocab: $((n-bad))/$n vectors match"
    [ $n -gt 0 ] && [ $bad -eq 0 ]
}
check cli_tokenize_vectors_gpt2 vectors ggml-vocab-gpt-2.gguf
check cli_tokenize_vectors_spm vectors ggml-vocab-llama-spm.gguf

# Special tokens parsed by default, kept as text with --no-special.
got=$("$CLI" tokenize -m "$MODEL" "<|im_start|>user")
first=${got%% *}
[ "$first" = "1" ] && ok cli_tokenize_special || fail cli_tokenize_special "got '$got'"
got=$("$CLI" tokenize -m "$MODEL" --no-special "<|im_start|>user")
first=${got%% *}
[ "$first" != "1" ] && ok cli_tokenize_no_special || fail cli_tokenize_no_special "got '$got'"

# "--" ends the options: a TEXT that starts with "-" (it had been "unknown option: --")
printf -- '-5' >"$tmp/dash.txt"
got=$("$CLI" tokenize -m "$MODEL" -- -5 2>&1); rc=$?
want=$("$CLI" tokenize -m "$MODEL" -f "$tmp/dash.txt" 2>&1)
[ $rc -eq 0 ] && [ -n "$got" ] && [ "$got" = "$want" ] && ok cli_double_dash_ends_options \
    || fail cli_double_dash_ends_options "rc=$rc got '$got' want '$want'"

# --no-bos never adds BOS, even for a model whose GGUF asks for it (llama SPM vocab).
with=$("$CLI" tokenize -m "$SHARED/tokenizer-tests/ggml-vocab-llama-spm.gguf" "Hello world")
without=$("$CLI" tokenize -m "$SHARED/tokenizer-tests/ggml-vocab-llama-spm.gguf" --no-bos "Hello world")
[ "${with%% *}" = "1" ] && [ "${without%% *}" != "1" ] && [ "$with" = "1 $without" ] \
    && ok cli_tokenize_bos || fail cli_tokenize_bos "with='$with' without='$without'"

# info names the architecture and the shapes.
out=$("$CLI" info -m "$MODEL")
grep -q "architecture: *llama" <<<"$out" && grep -q "layers: *30" <<<"$out" && grep -q "Q4_1 x210" <<<"$out" \
    && grep -q "chat template: *chatml" <<<"$out" && ok cli_info || fail cli_info "$out"
"$CLI" info -m "$MODEL" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["n_layer"]==30 and d["n_vocab"]==49152 and d["tensor_types"]["Q8_0"]==1' \
    && ok cli_info_json || fail cli_info_json "bad JSON"
# a model path that is not UTF-8 (a path is bytes): strict JSON, the byte as U+FFFD
# (info's "file" and bench's "model" had carried the raw byte)
odd="$tmp/$(printf 'm_\377_x').gguf"
cp "$SHARED/models/llama-2-tiny-random.gguf" "$odd"
"$CLI" info -m "$odd" --json | python3 -c 'import json,sys; d=json.loads(sys.stdin.buffer.read().decode("utf-8")); assert d["file"].endswith("m_\ufffd_x.gguf"), d["file"]' \
    && "$CLI" bench -m "$odd" -p 8 -n 2 --reps 1 --threads 1 --json 2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.buffer.read().decode("utf-8")); assert d["model"].endswith("m_\ufffd_x.gguf"), d["model"]' \
    && ok cli_json_path_not_utf8 || fail cli_json_path_not_utf8 "raw bytes in JSON"

# bench: figures, and the core clock before and after the tests (dependent
# register adds: a real chain gives tenths of a GHz at least, text and JSON).
"$CLI" bench -m "$MODEL" -p 8 -n 4 --reps 1 --threads 1 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["core_clock_ghz"]
assert d["pp"]["tok_s"] > 0 and d["tg"]["tok_s"] > 0, d
assert 0.1 < c["start"] < 20 and 0.1 < c["end"] < 20, c' \
    && ok cli_bench_json_clock || fail cli_bench_json_clock "bad JSON"
out=$("$CLI" bench -m "$MODEL" -p 8 -n 0 --reps 1 --threads 1)
grep -Eq '^clock: +[0-9]+\.[0-9]{2} GHz before the tests, [0-9]+\.[0-9]{2} after' <<<"$out" \
    && ok cli_bench_clock_line || fail cli_bench_clock_line "$out"

# bench: the far prefetch the decode uses. KVS_FAR_PREFETCH forces it (and
# nothing is timed at load); unforced, where the load timed a step's matmuls
# both ways, it kept the faster way (kvs_model_far_prefetch; the JSON's
# figures are rounded to a microsecond, so a tie reads either way).
far_json() { "$CLI" bench -m "$MODEL" -p 0 -n 2 --reps 1 --threads 1 --json; }
KVS_FAR_PREFETCH=1 far_json | python3 -c '
import json, sys
f = json.load(sys.stdin)["far_prefetch"]
assert f["rows"] > 0 and "ms_with" not in f, f' \
    && ok cli_bench_far_forced_on || fail cli_bench_far_forced_on "bad JSON"
KVS_FAR_PREFETCH=0 far_json | python3 -c '
import json, sys
f = json.load(sys.stdin)["far_prefetch"]
assert f["rows"] == 0 and "ms_with" not in f, f' \
    && ok cli_bench_far_forced_off || fail cli_bench_far_forced_off "bad JSON"
(unset KVS_FAR_PREFETCH; far_json) | python3 -c '
import json, sys
f = json.load(sys.stdin)["far_prefetch"]
assert f["rows"] >= 0, f
if "ms_with" in f:
    assert f["ms_with"] > 0 and f["ms_without"] > 0, f
    if f["rows"] > 0: assert f["ms_with"] <= f["ms_without"], f
    else: assert f["ms_with"] >= f["ms_without"], f' \
    && ok cli_bench_far_checked || fail cli_bench_far_checked "bad JSON"
out=$(KVS_FAR_PREFETCH=0 "$CLI" bench -m "$MODEL" -p 0 -n 2 --reps 1 --threads 1)
grep -Eq '^far prefetch: off$' <<<"$out" && ok cli_bench_far_line || fail cli_bench_far_line "$out"

# --help everywhere, exit 0.
for c in tokenize info generate bench perplexity; do
    "$CLI" $c --help >/dev/null 2>&1 && ok "cli_help_$c" || fail "cli_help_$c" "exit $?"
done

# Errors: non-zero exit, message on stderr naming the problem.
"$CLI" tokenize -m "$tmp/missing.gguf" hi >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q "missing.gguf" "$tmp/e" && ok cli_error_missing_file || fail cli_error_missing_file "rc=$rc $(cat "$tmp/e")"
head -c 100000 "$MODEL" > "$tmp/trunc.gguf"
"$CLI" info -m "$tmp/trunc.gguf" >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && [ -s "$tmp/e" ] && ok cli_error_truncated || fail cli_error_truncated "rc=$rc $(cat "$tmp/e")"
printf 'bad \xff\xfe utf8' > "$tmp/bad.txt"
"$CLI" tokenize -m "$MODEL" -f "$tmp/bad.txt" >"$tmp/o" 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -qi "utf-8" "$tmp/e" && ok cli_error_utf8 || fail cli_error_utf8 "rc=$rc $(cat "$tmp/e")"
"$CLI" frobnicate >/dev/null 2>&1 && fail cli_error_unknown_command "exit 0" || ok cli_error_unknown_command
exit $status
