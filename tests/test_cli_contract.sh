#!/usr/bin/env bash
# The CLI's reporting contract (issue 10): stop_reason for every way
# generation ends (JSON and the stats line), timings that add up to ttft_ms,
# prefill_tok_s null below a chunk, cache_hit_ratio = reused / prompt tokens
# on every path, progress on a terminal only (script(1) gives the command a
# pty), --version, tokenize --pieces. Prints "ok NAME" / "FAIL NAME".
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
# quick mode (CI's sanitizer pass): the checks marked "full" are left out
QUICK="${KVSTITCH_TEST_QUICK:-0}"
full() { [ "$QUICK" != 1 ]; }
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
gen() { timeout 300 "$CLI" generate -m "$MODEL" --threads 2 "$@"; }
# the timings phases before the first token add up to ttft_ms (within 1 ms)
SUM='abs(sum(d["timings"][k] for k in ("tokenize_ms","lookup_ms","assemble_ms","repair_ms","prefill_ms","first_token_ms")) - d["ttft_ms"]) < 1.0'
Q="What is the capital of France?"

# --- stop reasons -----------------------------------------------------------
gen --chat -p "$Q" -n 64 --json >"$tmp/eos.json" 2>"$tmp/eos.err"
[ "$(j "$tmp/eos.json" 'd["stop_reason"]')" = eos ] && [ "$(j "$tmp/eos.json" "$SUM")" = True ] \
    && ok stop_reason_eos || fail stop_reason_eos "$(head -c 300 "$tmp/eos.json") $(cat "$tmp/eos.err")"
gen --chat -p "$Q" -n 2 --json >"$tmp/len.json"
[ "$(j "$tmp/len.json" 'd["stop_reason"] == "length" and len(d["tokens"]) == 2')" = True ] \
    && ok stop_reason_length || fail stop_reason_length "$(head -c 300 "$tmp/len.json")"
gen --chat -p "$Q" -n 64 --stop Paris --json >"$tmp/stop.json"
[ "$(j "$tmp/stop.json" 'd["stop_reason"] == "stop" and "Paris" not in d["text"]')" = True ] \
    && ok stop_reason_stop || fail stop_reason_stop "$(head -c 300 "$tmp/stop.json")"
# the chat prompt takes 37 tokens: a context of 40 leaves room for 4
gen --chat -p "$Q" -n 32 --ctx 40 --json >"$tmp/ctx.json" 2>"$tmp/ctx.err"
[ "$(j "$tmp/ctx.json" 'd["stop_reason"] == "context" and len(d["tokens"]) == 40 - d["prompt_tokens"] + 1')" = True ] \
    && grep -q 'at most 4 of the -n 32 tokens can be generated' "$tmp/ctx.err" \
    && ok stop_reason_context || fail stop_reason_context "$(head -c 300 "$tmp/ctx.json") $(cat "$tmp/ctx.err")"
gen --chat -p "$Q" -n 2 >/dev/null 2>"$tmp/stats.err"
grep -q 'stop: length\]' "$tmp/stats.err" && ok stop_reason_stats_line || fail stop_reason_stats_line "$(cat "$tmp/stats.err")"

# --- rates ------------------------------------------------------------------
[ "$(j "$tmp/eos.json" 'd["prefill_tok_s"] is None and d["prefilled_tokens"] == d["prompt_tokens"] < 64')" = True ] \
    && ok prefill_rate_null_below_a_chunk || fail prefill_rate_null_below_a_chunk "$(head -c 300 "$tmp/eos.json")"
python3 -c 'import sys; sys.stdout.write("The quick brown fox jumps over the lazy dog. " * 12)' >"$tmp/med.txt"
gen -f "$tmp/med.txt" -n 1 --json >"$tmp/med.json"
[ "$(j "$tmp/med.json" 'd["prefilled_tokens"] >= 64 and d["prefill_tok_s"] > 0 and abs(d["prefill_tok_s"] - d["prefilled_tokens"] * 1000 / d["prefill_ms"]) < 1e-6 * d["prefill_tok_s"]')" = True ] \
    && ok prefill_rate_on_prefilled_tokens || fail prefill_rate_on_prefilled_tokens "$(head -c 300 "$tmp/med.json")"

# --- cache_hit_ratio, one definition: reused (exact + moved, not recomputed) / prompt
D="$tmp/cache"
gen -f "$tmp/med.txt" -n 1 --cache-dir "$D" --json >/dev/null
gen -f "$tmp/med.txt" -n 1 --cache-dir "$D" --json >"$tmp/pre.json"
[ "$(j "$tmp/pre.json" 'd["reused_tokens"] == d["cached_tokens"] == d["prompt_tokens"] - 1 and abs(d["cache_hit_ratio"] - d["reused_tokens"] / d["prompt_tokens"]) < 1e-9 and '"$SUM")" = True ] \
    && ok hit_ratio_prefix || fail hit_ratio_prefix "$(head -c 400 "$tmp/pre.json")"
python3 -c 'import sys; sys.stdout.write("Paris is the capital and largest city of France. " * 3)' >"$tmp/d1.txt"
python3 -c 'import sys; sys.stdout.write("Berlin is the capital and largest city of Germany. " * 3)' >"$tmp/d2.txt"
timeout 300 "$CLI" warm -m "$MODEL" --threads 2 --cache-dir "$D" --chat --doc "$tmp/d1.txt" --doc "$tmp/d2.txt" >/dev/null
# a document too long for the context is named by its file (it had been "doc 1")
python3 -c 'import sys; sys.stdout.write("word " * 700)' >"$tmp/long-doc.txt"
timeout 300 "$CLI" warm -m "$MODEL" --threads 2 --cache-dir "$D" --ctx 512 --doc "$tmp/d1.txt" --doc "$tmp/long-doc.txt" \
    >/dev/null 2>"$tmp/long.err"
rc=$?
[ $rc = 1 ] && grep -q -- "--doc $tmp/long-doc.txt: context window exceeded" "$tmp/long.err" \
    && ok warm_names_the_too_long_doc || fail warm_names_the_too_long_doc "exit $rc: $(cat "$tmp/long.err")"
gen --chat --cache-dir "$D" --doc "$tmp/d2.txt" --doc "$tmp/d1.txt" -p "$Q" -n 4 --json >"$tmp/docs.json"
[ "$(j "$tmp/docs.json" 'd["moved_tokens"] > 0 and d["reused_tokens"] == d["cached_tokens"] + d["moved_tokens"] - d["recomputed_tokens"] and d["cache_hit_ratio"] > 0 and abs(d["cache_hit_ratio"] - d["reused_tokens"] / d["prompt_tokens"]) < 1e-9')" = True ] \
    && ok hit_ratio_counts_moved_tokens || fail hit_ratio_counts_moved_tokens "$(head -c 600 "$tmp/docs.json")"
[ "$(j "$tmp/docs.json" "$SUM"' and d["timings"]["tokenize_ms"] > 0')" = True ] \
    && ok timings_sum_docs || fail timings_sum_docs "$(head -c 600 "$tmp/docs.json")"
full && { gen --chat --cache-dir "$D" --doc "$tmp/d2.txt" --doc "$tmp/d1.txt" -p "$Q" -n 4 --reuse full --json >"$tmp/full.json"
[ "$(j "$tmp/full.json" 'd["reused_tokens"] == d["cached_tokens"] and d["moved_tokens"] == 0')" = True ] \
    && ok hit_ratio_full_reuses_only_exact || fail hit_ratio_full_reuses_only_exact "$(head -c 600 "$tmp/full.json")"; }

# --- progress: on a terminal only --------------------------------------------
# 150 tokens in batches of 16: ten forward calls, each reported
script -qfec "$CLI generate -m '$MODEL' --threads 2 --batch 16 -f '$tmp/med.txt' -n 1" /dev/null >"$tmp/tty.out" 2>&1
grep -q '\[prefill: [0-9]*/[0-9]* tokens ([0-9]*%), [0-9]* tok/s, ETA' "$tmp/tty.out" \
    && ok progress_prefill_on_terminal || fail progress_prefill_on_terminal "$(head -c 300 "$tmp/tty.out")"
full && { script -qfec "$CLI warm -m '$MODEL' --threads 2 --batch 16 --cache-dir '$tmp/c2' -f '$tmp/med.txt'" /dev/null >"$tmp/tty2.out" 2>&1
grep -q '\[warm: [0-9]*/[0-9]* tokens' "$tmp/tty2.out" && ok progress_warm_on_terminal \
    || fail progress_warm_on_terminal "$(head -c 300 "$tmp/tty2.out")"; }
: >"$tmp/tty3.out"; : >"$tmp/tty4.out"
script -qfec "$CLI generate -m '$MODEL' --threads 2 --batch 16 -f '$tmp/med.txt' -n 1 --json" /dev/null >"$tmp/tty3.out" 2>&1
full && script -qfec "$CLI generate -m '$MODEL' --threads 2 --batch 16 -f '$tmp/med.txt' -n 1 --quiet" /dev/null >"$tmp/tty4.out" 2>&1
gen --batch 16 -f "$tmp/med.txt" -n 1 >"$tmp/pipe.out" 2>"$tmp/pipe.err"
! grep -q 'prefill:' "$tmp/tty3.out" "$tmp/tty4.out" "$tmp/pipe.out" "$tmp/pipe.err" && grep -q '^\[prompt' "$tmp/pipe.err" \
    && ok progress_absent_json_quiet_piped || fail progress_absent_json_quiet_piped "$(cat "$tmp/tty3.out" "$tmp/pipe.err" | head -c 400)"

# --- small things -------------------------------------------------------------
"$CLI" --version >"$tmp/v" && grep -q '^kvstitch .*(git ' "$tmp/v" && grep -q 'kernel paths on this CPU: .*scalar' "$tmp/v" \
    && ok version || fail version "$(cat "$tmp/v")"
# KVS_ISA: every path this CPU has runs the whole model when asked (--version
# and bench name it) and gives the default path's tokens
paths=$(sed -n 's/^kernel paths on this CPU: //p' "$tmp/v")
gen --chat -p "$Q" -n 8 --json >"$tmp/isa_best.json"
for p in $paths; do
    [ "$p" = scalar ] && ! full && continue
    KVS_ISA=$p "$CLI" --version | grep -qx "kernel path in use: $p (KVS_ISA)" \
        && KVS_ISA=$p timeout 300 "$CLI" bench -m "$MODEL" -p 8 -n 2 --reps 1 --json >"$tmp/isa_bench.json" \
        && [ "$(j "$tmp/isa_bench.json" 'd["isa"]')" = "$p" ] \
        && KVS_ISA=$p gen --chat -p "$Q" -n 8 --json >"$tmp/isa_$p.json" \
        && [ "$(j "$tmp/isa_$p.json" 'd["tokens"]')" = "$(j "$tmp/isa_best.json" 'd["tokens"]')" ] \
        && ok "isa_env_$p" || fail "isa_env_$p" "$(KVS_ISA=$p "$CLI" --version) $(head -c 300 "$tmp/isa_$p.json")"
done
"$CLI" tokenize -m "$MODEL" --pieces "Hello, world<|im_end|>" >"$tmp/p"
[ "$(cut -f2 "$tmp/p" | tr -d '\n')" = '"Hello"","" world""<|im_end|>"' ] && [ "$(cut -f1 "$tmp/p" | tr '\n' ' ')" = "$("$CLI" tokenize -m "$MODEL" "Hello, world<|im_end|>") " ] \
    && ok tokenize_pieces || fail tokenize_pieces "$(cat "$tmp/p")"
# a token holding part of a character is spelled "bytes:\xNN" (its raw bytes had
# made the line invalid JSON); each line's text is valid JSON
"$CLI" tokenize -m "$MODEL" --pieces "$(printf '\360\237\230\200 x')" >"$tmp/p2"
head -1 "$tmp/p2" | grep -q '^10813	"bytes:\\\\xf0\\\\x9f"$' && ! LC_ALL=C grep -q -P '[\x80-\xff]' "$tmp/p2" \
    && ok tokenize_pieces_partial_characters || fail tokenize_pieces_partial_characters "$(cat "$tmp/p2")"
exit $status
