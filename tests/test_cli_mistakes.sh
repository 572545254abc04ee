#!/usr/bin/env bash
# User mistakes across every command (issue 10): each must exit with the
# expected non-zero code (2 = usage, 1 = the input or the run failed), never
# 0, never a crash or a hang (every call runs under a timeout), with a message
# on stderr that names the option or file, the value and what is accepted.
# Prints "ok NAME" / "FAIL NAME" per mistake (counted by scripts/run-tests.sh).
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0; n=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }

# mistake NAME RC FRAGMENT ARGS...: runs the CLI, checks the exit code and
# that stderr contains FRAGMENT (fixed string).
mistake() {
    local name=$1 want=$2 frag=$3; shift 3
    n=$((n + 1))
    timeout 60 "$CLI" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; local rc=$?
    if [ $rc -eq "$want" ] && grep -qF -- "$frag" "$tmp/err"; then ok "mistake_$name"
    else fail "mistake_$name" "rc=$rc (want $want), stderr: $(head -c 400 "$tmp/err")"; fi
}

echo "a doc" >"$tmp/doc.txt"
printf 'before\0after' >"$tmp/nul.txt"
mkfifo "$tmp/fifo"
echo "not a directory" >"$tmp/file"
head -c 100000 "$MODEL" >"$tmp/trunc.gguf"
D="$tmp/cache"
# ~9000 tokens: past SmolLM2's trained context (8192)
python3 -c 'import sys; sys.stdout.write("The quick brown fox jumps over the lazy dog. " * 1000)' >"$tmp/long.txt"

M=(-m "$MODEL")
# the command line itself
mistake no_command 2 "usage: kvstitch COMMAND"
mistake unknown_command 2 "unknown command 'frobnicate'" frobnicate
# the kernel path asked in the environment (bash exports a function's
# assignments to what it runs)
KVS_ISA=avx3 mistake isa_env_unknown 1 "KVS_ISA=avx3: unknown (scalar, avx2, avx512vnni, amx or best)" \
    generate "${M[@]}" -p hi -n 1
if ! "$CLI" --version | grep -q 'paths on this CPU: .*amx'; then
    KVS_ISA=amx mistake isa_env_absent 1 "KVS_ISA=amx: this CPU lacks that path" generate "${M[@]}" -p hi -n 1
fi
# version takes no arguments (a stray one had been ignored, exit 0)
mistake version_extra 2 "kvstitch version: unexpected argument 'extra'" version extra
mistake version_dashdash_extra 2 "kvstitch version: unexpected argument 'extra'" --version extra
mistake version_unknown_option 2 "kvstitch version: unknown option: --json" version --json
# generate: required arguments and combinations
mistake gen_no_model 2 "-m MODEL is required" generate -p hi
mistake gen_no_prompt 2 "exactly one of -p TEXT or -f FILE" generate "${M[@]}"
mistake gen_two_prompts 2 "exactly one of -p TEXT or -f FILE" generate "${M[@]}" -p hi -f "$tmp/doc.txt"
mistake gen_unknown_option 2 "unknown option: --bogus" generate "${M[@]}" -p hi --bogus
mistake gen_missing_value 2 "--temp needs a value" generate "${M[@]}" -p hi --temp
# generate: every numeric value out of range names the option, the value and the range
mistake gen_temp_negative 2 "--temp must be a number in [0, 100], got '-1'" generate "${M[@]}" -p hi --temp -1
mistake gen_temp_nan 2 "--temp must be a number in [0, 100], got 'nan' (not a finite number)" generate "${M[@]}" -p hi --temp nan
mistake gen_temp_text 2 "--temp must be a number in [0, 100], got 'abc' (not a number)" generate "${M[@]}" -p hi --temp abc
mistake gen_ctx_zero 2 "--ctx must be an integer in [1, 1048576], got '0'" generate "${M[@]}" -p hi --ctx 0
mistake gen_threads_zero 2 "--threads must be an integer in [1, 256], got '0'" generate "${M[@]}" -p hi --threads 0
mistake gen_threads_1000 2 "--threads must be an integer in [1, 256], got '1000'" generate "${M[@]}" -p hi --threads 1000
mistake gen_n_negative 2 "--n-predict must be an integer in [0, 1048576], got '-5'" generate "${M[@]}" -p hi -n -5
mistake gen_n_junk 2 "got '12abc' (not an integer)" generate "${M[@]}" -p hi -n 12abc
mistake gen_top_p_zero 2 "--top-p must be a number in (0, 1], got '0'" generate "${M[@]}" -p hi --top-p 0
mistake gen_top_p_big 2 "--top-p must be a number in (0, 1], got '1.5'" generate "${M[@]}" -p hi --top-p 1.5
mistake gen_min_p 2 "--min-p must be a number in [0, 1], got '-0.1'" generate "${M[@]}" -p hi --min-p -0.1
mistake gen_repeat_penalty 2 "--repeat-penalty must be a number in (0, 10], got '0'" generate "${M[@]}" -p hi --repeat-penalty 0
mistake gen_top_k 2 "--top-k must be an integer in [0, 1048576], got '-1'" generate "${M[@]}" -p hi --top-k -1
mistake gen_seed 2 "--seed must be an integer" generate "${M[@]}" -p hi --seed -3
# numbers with white space around them: refused on both sides (strtol/strtod had skipped a leading one)
mistake gen_n_leading_space 2 "--n-predict must be an integer in [0, 1048576], got ' 1' (not an integer)" generate "${M[@]}" -p hi -n " 1"
mistake gen_n_trailing_space 2 "--n-predict must be an integer in [0, 1048576], got '1 ' (not an integer)" generate "${M[@]}" -p hi -n "1 "
mistake gen_temp_leading_space 2 "--temp must be a number in [0, 100], got ' 0.5' (not a number)" generate "${M[@]}" -p hi --temp " 0.5"
mistake gen_seed_leading_space 2 "--seed must be an integer in [0, " generate "${M[@]}" -p hi --seed $'\t3'
mistake warm_bytes_leading_space 2 "--cache-max-bytes" warm "${M[@]}" --cache-dir "$D" --cache-max-bytes " 1M" hi
# numbers are plain decimal, as serve's (strtol/strtod had taken -n +5 as 5, --temp 0x1 as 1, --temp 1e-1 as 0.1)
mistake gen_n_plus 2 "--n-predict must be an integer in [0, 1048576], got '+5' (a '+' sign is not accepted)" generate "${M[@]}" -p hi -n +5
mistake gen_n_hex 2 "--n-predict must be an integer in [0, 1048576], got '0x10' (not an integer)" generate "${M[@]}" -p hi -n 0x10
mistake gen_temp_plus 2 "--temp must be a number in [0, 100], got '+0.5' (a '+' sign is not accepted)" generate "${M[@]}" -p hi --temp +0.5
mistake gen_temp_hex 2 "--temp must be a number in [0, 100], got '0x1' (not a plain decimal number" generate "${M[@]}" -p hi --temp 0x1
mistake gen_temp_exponent 2 "--temp must be a number in [0, 100], got '1e-1' (not a plain decimal number" generate "${M[@]}" -p hi --temp 1e-1
mistake gen_penalty_minus_plus 2 "--presence-penalty must be a number in [-2, 2], got '-+1' (not a number)" generate "${M[@]}" -p hi --presence-penalty -+1
mistake gen_seed_plus 2 "--seed must be an integer in [0, 18446744073709551615], got '+3' (a '+' sign is not accepted)" generate "${M[@]}" -p hi --seed +3
mistake warm_redis_timeout_plus 2 "--redis-timeout must be an integer in [1, 60000], got '+50' (a '+' sign is not accepted)" \
    warm "${M[@]}" --redis redis://127.0.0.1:1 --redis-timeout +50 hi
mistake cache_redis_timeout_plus 2 "--redis-timeout expects a decimal integer, got '+50'" \
    cache --redis redis://127.0.0.1:1 --redis-timeout +50 stats
# a single-valued option given twice: refused (it had kept the last value silently)
mistake gen_prompt_twice 2 "-p given more than once (again with 'b'): it takes one value" generate "${M[@]}" -p a -p b
mistake gen_n_twice 2 "--n-predict given more than once (again with '8'): it takes one value" generate "${M[@]}" -p a -n 4 --n-predict=8
mistake warm_system_twice 2 "--system given more than once" warm "${M[@]}" --cache-dir "$D" --chat --system x --system y hi
# generate: files
mistake gen_model_missing 2 "--model: $tmp/none.gguf: No such file or directory" generate -m "$tmp/none.gguf" -p hi
mistake gen_model_fifo 2 "is a FIFO, expected a regular file" generate -m "$tmp/fifo" -p hi
mistake gen_model_dir 2 "is a directory, expected a regular file" generate -m "$tmp" -p hi
mistake gen_file_missing 2 "--file: $tmp/none.txt: No such file" generate "${M[@]}" -f "$tmp/none.txt"
mistake gen_file_nul 1 "byte 6 of 12 is a NUL byte" generate "${M[@]}" -f "$tmp/nul.txt"
mistake gen_doc_nul 1 "byte 6 of 12 is a NUL byte" generate "${M[@]}" --cache-dir "$D" --doc "$tmp/nul.txt" -p q
# generate: options that need others
mistake gen_system_no_chat 2 "--system needs --chat" generate "${M[@]}" -p hi --system x
mistake gen_chat_template_no_chat 2 "--chat-template needs --chat" generate "${M[@]}" -p hi --chat-template gemma
# an unknown family is a usage error found before the model loads (it had
# been found by the load, exit 1)
mistake gen_chat_template_unknown 2 "--chat-template: chat template family 'jinja' is not one kvstitch renders (chatml, qwen3, llama3, llama2, gemma)" \
    generate "${M[@]}" -p hi --chat --chat-template jinja
mistake gen_chat_template_empty 2 "--chat-template: chat template family is empty (chatml, qwen3" \
    generate "${M[@]}" -p hi --chat --chat-template ""
mistake warm_chat_template_unknown 2 "--chat-template: chat template family 'jinja' is not one" \
    warm "${M[@]}" --cache-dir "$D" --chat --chat-template jinja hi
# a repair option for a strategy the request does not use (it had been ignored)
mistake gen_firstk_under_query 2 "--first-k does not apply to --reuse query, the default (it tunes: firstk)" \
    generate "${M[@]}" --cache-dir "$D" --doc "$tmp/doc.txt" -p q --first-k 5
mistake gen_check_layer_under_selective 2 "--check-layer does not apply to --reuse selective (it tunes: cacheblend)" \
    generate "${M[@]}" --cache-dir "$D" --doc "$tmp/doc.txt" -p q --reuse selective --check-layer 2
mistake gen_recal_under_full 2 "--recal does not apply to --reuse full" \
    generate "${M[@]}" --cache-dir "$D" --doc "$tmp/doc.txt" -p q --reuse full --recal
mistake gen_overlap_query_no_seams 2 "--overlap under --reuse query needs --query-seams" \
    generate "${M[@]}" --cache-dir "$D" --doc "$tmp/doc.txt" -p q --overlap 4
mistake warm_chat_template_no_chat 2 "--chat-template needs --chat" warm "${M[@]}" --cache-dir "$D" --chat-template gemma hi
# --doc-prefix without --doc had been ignored without a word (generate refused it)
mistake warm_doc_prefix_no_doc 2 "--doc-prefix needs --doc" warm "${M[@]}" --cache-dir "$D" --doc-prefix ZZZ hi
mistake gen_reuse_no_dir 2 "--reuse needs --cache-dir" generate "${M[@]}" -p hi --reuse none
mistake gen_reuse_unknown 2 "--reuse must be prefix or none without --doc, got 'sideways'" \
    generate "${M[@]}" -p hi --cache-dir "$D" --reuse sideways
mistake gen_reuse_unknown_doc 2 "--reuse must be a repair strategy with --doc (prefix = full): unknown repair strategy 'sideways' (none, selective, cacheblend" \
    generate "${M[@]}" -p hi --cache-dir "$D" --doc "$tmp/doc.txt" --reuse sideways
mistake gen_repair_no_doc 2 "got 'cacheblend' (a repair strategy: it needs --doc)" generate "${M[@]}" -p hi --cache-dir "$D" --reuse cacheblend
mistake gen_cache_dir_file 2 "--cache-dir: $tmp/file exists and is a file, expected a directory" \
    generate "${M[@]}" -p hi --cache-dir "$tmp/file"
# invalid UTF-8 names the option or file it is in, with the offset in it (--system's had
# been an offset into the rendered chat template, a --doc's "doc 1")
printf 'abc\xff' >"$tmp/bad_utf8.txt"
mistake gen_system_utf8 1 "--system: invalid UTF-8: invalid UTF-8 at byte offset 4 (byte 0xC3)" \
    generate "${M[@]}" -p ok --chat --system "$(printf 'sys \xc3')"
mistake gen_prompt_utf8 1 "-p: invalid UTF-8: invalid UTF-8 at byte offset 2 (byte 0xC3)" generate "${M[@]}" -p "$(printf 'ab\xc3')"
mistake gen_stop_utf8 1 "--stop: invalid UTF-8: invalid UTF-8 at byte offset 1 (byte 0xFF)" generate "${M[@]}" -p hi \
    --stop "$(printf 'a\xffb')"
mistake gen_doc_utf8 1 "$tmp/bad_utf8.txt: invalid UTF-8: invalid UTF-8 at byte offset 3 (byte 0xFF)" \
    generate "${M[@]}" -p hi --cache-dir "$D" --doc "$tmp/doc.txt" --doc "$tmp/bad_utf8.txt"
# an empty --doc file had been dropped without a word (warm said "docs": 0, exit 0)
: >"$tmp/empty_doc.txt"
mistake gen_doc_empty 1 "--doc $tmp/empty_doc.txt is empty" generate "${M[@]}" -p hi --cache-dir "$D" --doc "$tmp/empty_doc.txt"
mistake warm_doc_empty 1 "--doc $tmp/empty_doc.txt is empty" warm "${M[@]}" --cache-dir "$D" --doc "$tmp/empty_doc.txt"
mistake warm_text_utf8 1 "text 2 (an argument): invalid UTF-8: invalid UTF-8 at byte offset 1 (byte 0xFF)" \
    warm "${M[@]}" --cache-dir "$D" ok "$(printf 'b\xff')"
# a link to nowhere, or a loop: named as such (both had said "not a directory", later, exit 1)
ln -s "$tmp/no-such-target" "$tmp/dangle"; ln -s "$tmp/loop2" "$tmp/loop1"; ln -s "$tmp/loop1" "$tmp/loop2"
mistake gen_cache_dir_dangling_link 2 "--cache-dir: $tmp/dangle: a symbolic link to a missing target" \
    generate "${M[@]}" -p hi --cache-dir "$tmp/dangle"
mistake warm_cache_dir_link_loop 2 "--cache-dir: $tmp/loop1: Too many levels of symbolic links" \
    warm "${M[@]}" -f "$tmp/doc.txt" --cache-dir "$tmp/loop1"
mistake gen_chunk_tokens 2 "--chunk-tokens must be an integer in [1, 4096], got '0'" generate "${M[@]}" -p hi --cache-dir "$D" --chunk-tokens 0
mistake gen_ratio 2 "--recompute-ratio must be a number in [0, 1], got '2'" generate "${M[@]}" -p hi --cache-dir "$D" --doc "$tmp/doc.txt" --recompute-ratio 2
# generate: context limits (after tokenizing; the model's trained length is 8192)
mistake gen_prompt_past_train 1 "was trained on at most 8192 (llama.context_length): shorten it by at least" \
    generate "${M[@]}" -f "$tmp/long.txt" -n 4
mistake gen_ctx_past_train 1 "--ctx 20000 exceeds the 8192 tokens the model was trained on" generate "${M[@]}" -p hi --ctx 20000
mistake gen_prompt_past_ctx 1 "holds only 16: raise --ctx to at least" generate "${M[@]}" --ctx 16 \
    -p "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
# a model trained on a context of 1 token (the tiny random llama, patched): no advice to shorten
# the prompt to nothing (it had said "shorten it by at least 3 tokens" of a 3-token prompt)
python3 - "${KVSTITCH_SHARED:-../shared}/models/llama-2-tiny-random.gguf" "$tmp/ctx1.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
at = b.index(b"llama.context_length") + len(b"llama.context_length")
assert struct.unpack_from("<I", b, at)[0] == 4  # u32
struct.pack_into("<I", b, at + 4, 1)
open(sys.argv[2], "wb").write(b)
PY
mistake gen_prompt_past_train_of_1 1 "trained on a context of only 1 token (llama.context_length), and the prompt's layout alone (BOS, chat template) takes 1: no text fits" \
    generate -m "$tmp/ctx1.gguf" -p "hello world" -n 2
# warm
mistake warm_no_dir 2 "--cache-dir DIR is required" warm "${M[@]}" hi
mistake warm_nothing 2 "give at least one prompt" warm "${M[@]}" --cache-dir "$D"
mistake warm_file_missing 2 "--file: $tmp/none.txt: No such file" warm "${M[@]}" --cache-dir "$D" -f "$tmp/none.txt"
mistake warm_file_fifo 2 "is a FIFO, expected a regular file" warm "${M[@]}" --cache-dir "$D" -f "$tmp/fifo"
mistake warm_chunk_tokens 2 "--chunk-tokens must be an integer in [1, 4096], got '0'" warm "${M[@]}" --cache-dir "$D" --chunk-tokens 0 hi
mistake warm_system_no_chat 2 "--system needs --chat" warm "${M[@]}" --cache-dir "$D" --system x hi
mistake warm_file_nul 1 "byte 6 of 12 is a NUL byte" warm "${M[@]}" --cache-dir "$D" -f "$tmp/nul.txt"
# tokenize: the same NUL rule as every command
mistake tok_no_text 2 "give exactly one of -f FILE or TEXT" tokenize "${M[@]}"
mistake tok_two_texts 2 "more than one TEXT argument" tokenize "${M[@]}" a b
mistake tok_file_nul 1 "byte 6 of 12 is a NUL byte" tokenize "${M[@]}" -f "$tmp/nul.txt"
mistake tok_fifo 2 "is a FIFO, expected a regular file" tokenize "${M[@]}" -f "$tmp/fifo"
# info
mistake info_no_model 2 "-m MODEL is required" info
mistake info_fifo 2 "is a FIFO, expected a regular file" info -m "$tmp/fifo"
mistake info_truncated 1 "trunc.gguf" info -m "$tmp/trunc.gguf"
# bench
mistake bench_reps 2 "--reps must be an integer in [1, 1000], got '0'" bench "${M[@]}" --reps 0
mistake bench_nothing 2 "-p and -n are both 0" bench "${M[@]}" -p 0 -n 0
mistake bench_batch 2 "--batch must be an integer in [1, 65536], got '0'" bench "${M[@]}" --batch 0
mistake bench_past_train 2 "-d 8190 + max(-p 0, -n 4) = 8194 tokens exceeds the 8192 the model was trained on" bench "${M[@]}" -p 0 -n 4 -d 8190
mistake bench_streams 2 "--streams must be an integer in [1, 64], got '65'" bench "${M[@]}" --streams 65
mistake bench_streams_no_decode 2 "--streams 4 needs the decode test (-n > 0)" bench "${M[@]}" -n 0 --streams 4
mistake bench_streams_batch 2 "--batch 2 is less than --streams 4" bench "${M[@]}" --batch 2 --streams 4
# perplexity
mistake ppl_no_file 2 "-m MODEL and -f FILE are required" perplexity "${M[@]}"
mistake ppl_ctx 2 "--ctx must be an integer in [4, 1048576], got '2'" perplexity "${M[@]}" -f "$tmp/doc.txt" --ctx 2
# serve: numbers as strictly as the other commands (strtod alone had taken these)
mistake serve_port_space 2 "--port: ' 1' is not a decimal integer in [0, 65535]" serve -m x --port " 1"
mistake serve_slots_fraction 2 "--slots: '1.5' is not a decimal integer in [1, 64]" serve -m x --slots 1.5
mistake serve_port_nan 2 "--port: 'nan' is not a decimal integer" serve -m x --port nan
mistake serve_ctx_huge 2 "--ctx: '1e300' is not a decimal integer" serve -m x --ctx 1e300
# strtod had taken these: --port 1e3 listened on 1000, --slots 0x2 ran 2 slots
mistake serve_port_exponent 2 "--port: '1e3' is not a decimal integer in [0, 65535]" serve -m x --port 1e3
mistake serve_slots_hex 2 "--slots: '0x2' is not a decimal integer in [1, 64]" serve -m x --slots 0x2
# refused before the port is taken (they had said "listening on", then exit 1)
mistake serve_model_dir 2 "--model $tmp: not a regular file" serve -m "$tmp" --port 0
mistake serve_model_fifo 2 "--model $tmp/fifo: not a regular file" serve -m "$tmp/fifo" --port 0
mistake serve_cache_dir_file 2 "--cache-dir $tmp/file: not a directory" serve "${M[@]}" --cache-dir "$tmp/file" --port 0
mistake serve_alias_empty 2 "--alias is empty" serve "${M[@]}" --alias "" --port 0
# serve: an option given twice is refused under either spelling (the last had won silently)
mistake serve_port_twice 2 "--port given twice" serve -m x --port 1 --port 2
mistake serve_model_both_spellings 2 "--model given twice" serve -m x --model y
# cache
mistake cache_no_action 2 "give an action" cache --cache-dir "$D"
# output that cannot be written (a full device): exit 1, not 0
full_out() {
    local name=$1; shift
    n=$((n + 1))
    timeout 60 "$CLI" "$@" >/dev/full 2>"$tmp/err" </dev/null; local rc=$?
    if [ $rc -eq 1 ] && grep -qF "cannot write the output" "$tmp/err"; then ok "mistake_$name"
    else fail "mistake_$name" "rc=$rc (want 1), stderr: $(head -c 400 "$tmp/err")"; fi
}
if [ -w /dev/full ]; then
    full_out stdout_full_generate generate "${M[@]}" -p hi -n 2 --threads 1
    full_out stdout_full_generate_json generate "${M[@]}" -p hi -n 2 --threads 1 --json
    full_out stdout_full_tokenize tokenize "${M[@]}" "hello world"
    full_out stdout_full_info info "${M[@]}" --json
    # the top-level help and serve's had exited 0 on a full device
    full_out stdout_full_help --help
    full_out stdout_full_serve_help serve --help
else
    echo "skip stdout_full_* (no /dev/full)"
fi

# the attacks: nothing above ever exits 0, and there are at least 40 of them
[ $n -ge 40 ] && ok "mistakes_count_$n" || fail mistakes_count "only $n mistakes"
exit $status
