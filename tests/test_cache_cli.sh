#!/usr/bin/env bash
# CLI contract of the prompt KV cache: warm, generate --cache-dir/--reuse,
# cache stats|ls|clear. Every generate run is a fresh process, so reuse goes
# through the cache directory. Outputs are compared by first_logits_sha256
# and tokens with --reuse none (no tolerance). Prints "ok NAME" / "FAIL NAME".
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
TINY="$SHARED/models/llama-2-tiny-random.gguf"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
D="$tmp/cache"
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
# j FILE EXPR: evaluates a Python expression over the JSON object d of FILE
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
gen() { "$CLI" generate -m "$MODEL" --threads 2 -n 6 --json "$@"; }

# --- help and usage errors ----------------------------------------------------------
for c in warm cache; do
    "$CLI" $c --help | grep -q "usage: kvstitch $c" && ok "cache_cli_help_$c" || fail "cache_cli_help_$c" "no usage"
done
"$CLI" generate --help | grep -q -- "--cache-dir" && ok cache_cli_help_generate || fail cache_cli_help_generate "no --cache-dir"
usage_err() { # name, expected text in stderr, args...
    local name=$1 want=$2; shift 2
    "$CLI" "$@" >/dev/null 2>"$tmp/e"; local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/e" && ok "$name" || fail "$name" "rc=$rc $(cat "$tmp/e")"
}
usage_err cache_cli_err_warm_no_dir "--cache-dir" warm -m "$MODEL" hello
usage_err cache_cli_err_warm_no_text "at least one prompt" warm -m "$MODEL" --cache-dir "$D"
usage_err cache_cli_err_reuse_mode "prefix or none" generate -m "$MODEL" -p hi --cache-dir "$D" --reuse sideways
usage_err cache_cli_err_reuse_needs_dir "need --cache-dir" generate -m "$MODEL" -p hi --reuse none
usage_err cache_cli_err_cache_action "unknown action" cache frobnicate --cache-dir "$D"
usage_err cache_cli_err_cache_dir "--cache-dir" cache stats

# --- warm, then generate in fresh processes ----------------------------------------------
# KVSTITCH_TEST_QUICK=1 (sanitizer runs): one passage instead of two
n_passages=2; [ -n "${KVSTITCH_TEST_QUICK:-}" ] && [ "${KVSTITCH_TEST_QUICK}" != 0 ] && n_passages=1
python3 - "$SHARED/data/musique_dev.json" "$tmp" "$n_passages" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))
doc = "\n\n".join(c["title"] + "\n" + c["text"] for c in items[3]["ctxs"][:int(sys.argv[3])])
open(sys.argv[2] + "/doc.txt", "w").write(doc)
open(sys.argv[2] + "/a.txt", "w").write(doc + "\n\nQuestion: " + items[3]["question"] + "\nAnswer:")
open(sys.argv[2] + "/b.txt", "w").write(doc + "\n\nList every person named above.")
# a prompt sharing an off-grid prefix: the doc cut inside, another ending
open(sys.argv[2] + "/c.txt", "w").write(doc[: len(doc) * 2 // 3] + " -- and that is all we know.")
PY
"$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 --json -f "$tmp/doc.txt" >"$tmp/w.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/w.json" 'd["prompts"][0]["chunks_stored"] == d["prompts"][0]["chunks"] > 1 and d["tokens"] > 300')" = True ] \
    && [ "$(j "$tmp/w.json" 'sorted(d["prompts"][0]) == sorted(["source","tokens","chunk_tokens","chunks","chunks_stored","chunks_existing","cached_tokens","computed_tokens","aligned","partial_tail_tokens","border_stable","stable_tokens","warning","ms"])')" = True ] \
    && ok cache_cli_warm_json || fail cache_cli_warm_json "$(cat "$tmp/w.json" "$tmp/e")"
doc_tokens=$(j "$tmp/w.json" 'd["prompts"][0]["tokens"]')
stable=$(j "$tmp/w.json" 'd["prompts"][0]["stable_tokens"]')

# same prompt file warmed again: nothing new, all reused
"$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 -f "$tmp/doc.txt" >"$tmp/w2.txt" 2>&1 \
    && grep -q "0 stored, [0-9]* cached already" "$tmp/w2.txt" && ok cache_cli_warm_again || fail cache_cli_warm_again "$(cat "$tmp/w2.txt")"

# longest common token prefix of the last file with any of the others, and its length
common() {
    local f; for f in "$@"; do "$CLI" tokenize -m "$MODEL" -f "$f"; done >"$tmp/toks"
    python3 -c 'import sys
rows=[l.split() for l in open(sys.argv[1])]; b=rows[-1]; best=0
for a in rows[:-1]:
    k=0
    while k < min(len(a),len(b)) and a[k]==b[k]: k+=1
    best=max(best,k)
print(best, len(b))' "$tmp/toks"
}

# a, b, c in turn: each is stored after its run, so later ones may share more with earlier ones
done_files=("$tmp/doc.txt")
for p in a b c; do
    gen -f "$tmp/$p.txt" --cache-dir "$D" >"$tmp/$p.warm.json" 2>"$tmp/e" || fail "cache_cli_generate_$p" "$(cat "$tmp/e")"
    gen -f "$tmp/$p.txt" --cache-dir "$D" --reuse none >"$tmp/$p.none.json" 2>"$tmp/e" || fail "cache_cli_generate_$p" "$(cat "$tmp/e")"
    # and a run with no cache at all (no --cache-dir): what every prompt must equal
    gen -f "$tmp/$p.txt" >"$tmp/$p.plain.json" 2>"$tmp/e" || fail "cache_cli_generate_$p" "$(cat "$tmp/e")"
    read -r k n <<<"$(common "${done_files[@]}" "$tmp/$p.txt")"
    done_files+=("$tmp/$p.txt")
    [ "$k" -ge "$n" ] && k=$((n - 1))
    cached=$(j "$tmp/$p.warm.json" 'd["cached_tokens"]')
    s_warm=$(j "$tmp/$p.warm.json" 'd["first_logits_sha256"], d["tokens"]')
    s_none=$(j "$tmp/$p.none.json" 'd["first_logits_sha256"], d["tokens"]')
    s_plain=$(j "$tmp/$p.plain.json" 'd["first_logits_sha256"], d["tokens"]')
    if [ "$cached" = "$k" ] && [ "$k" -gt 64 ] && [ "$s_warm" = "$s_none" ] && [ "$s_none" = "$s_plain" ] \
        && [ "$(j "$tmp/$p.none.json" 'd["cached_tokens"] == 0 and d["reuse"] == "none"')" = True ] \
        && [ "$(j "$tmp/$p.warm.json" 'd["live_tokens"] + d["cached_tokens"] == d["prompt_tokens"] and abs(d["cache_hit_ratio"] - d["cached_tokens"] / d["prompt_tokens"]) < 1e-6 and d["reuse"] == "prefix" and d["chunk_ends"][-1] == d["prompt_tokens"]')" = True ]; then
        ok "cache_cli_bit_exact_$p"
        echo "  $p: $cached of $n prompt tokens reused (common prefix $k, warmed $doc_tokens, stable $stable)"
    else
        fail "cache_cli_bit_exact_$p" "cached=$cached expected=$k warm=$s_warm none=$s_none plain=$s_plain"
    fi
done
# the plain JSON keeps its nine fields (+ stop_reason, prefilled_tokens, timings: issue 10); with --cache-dir the cache fields follow
[ "$(j "$tmp/a.plain.json" 'len(d)')" = 12 ] && [ "$(j "$tmp/a.warm.json" 'list(d)[9:13]')" = "['cached_tokens', 'live_tokens', 'cache_hit_ratio', 'reuse']" ] \
    && ok cache_cli_json_fields || fail cache_cli_json_fields "$(head -c 300 "$tmp/a.warm.json")"
# a second run of the same prompt reuses all but the last token (its own chunks were stored)
gen -f "$tmp/a.txt" --cache-dir "$D" >"$tmp/a2.json" \
    && [ "$(j "$tmp/a2.json" 'd["live_tokens"] == 1 and d["stored_chunks"] == 0')" = True ] \
    && [ "$(j "$tmp/a2.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/a.none.json" 'd["first_logits_sha256"]')" ] \
    && ok cache_cli_full_hit || fail cache_cli_full_hit "$(head -c 400 "$tmp/a2.json")"

# --- stats, ls ---------------------------------------------------------------------------
"$CLI" cache stats --cache-dir "$D" --json >"$tmp/s.json" \
    && [ "$(j "$tmp/s.json" 'd["entries"] > 5 and d["models"] == 1 and d["damaged"] == 0 and d["bytes"] > 0')" = True ] \
    && ok cache_cli_stats || fail cache_cli_stats "$(cat "$tmp/s.json")"
n_entries=$(j "$tmp/s.json" 'd["entries"]')
"$CLI" cache ls --cache-dir "$D" --json >"$tmp/ls.json" \
    && [ "$(j "$tmp/ls.json" 'len(d["entries"])')" = "$n_entries" ] \
    && [ "$(j "$tmp/ls.json" 'all(len(e["prefix_key"]) == 64 and e["tokens"] > 0 for e in d["entries"])')" = True ] \
    && ok cache_cli_ls_json || fail cache_cli_ls_json "$(head -c 300 "$tmp/ls.json")"
"$CLI" cache ls --cache-dir "$D" -m "$MODEL" >"$tmp/ls.txt" && grep -q "prefix key" "$tmp/ls.txt" \
    && [ "$(($(wc -l <"$tmp/ls.txt") - 1))" = "$n_entries" ] && ok cache_cli_ls_text || fail cache_cli_ls_text "$(head -3 "$tmp/ls.txt")"
# an empty cache lists no entries (it had sorted a NULL array: UBSan's abort, exit 1)
mkdir -p "$tmp/empty"
"$CLI" cache ls --cache-dir "$tmp/empty" --json >"$tmp/le.json" 2>"$tmp/le.err" \
    && [ "$(j "$tmp/le.json" 'len(d["entries"])')" = 0 ] && [ ! -s "$tmp/le.err" ] \
    && ok cache_cli_ls_empty || fail cache_cli_ls_empty "$(head -c 300 "$tmp/le.json" "$tmp/le.err")"

# --- damage: a flipped payload byte is found by --verify, never served, then repaired --------
# (before the chat prompts: until then every cached path shares its first 192 tokens, so the
# chunk at 128 is the one prompt b reads)
victim=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=[e for e in d["entries"] if e["pos0"]==128 and e["tokens"]==64]; print(e[0]["prefix_key"])' "$tmp/ls.json")
python3 - "$D/$victim.kvc" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, 2); b = f.read(1); f.seek(-100, 2); f.write(bytes([b[0] ^ 0x40]))
PY
"$CLI" cache stats --cache-dir "$D" --json >"$tmp/s1.json"
"$CLI" cache stats --cache-dir "$D" --verify --json >"$tmp/s2.json"
[ "$(j "$tmp/s1.json" 'd["damaged"]')" = 0 ] && [ "$(j "$tmp/s2.json" 'd["damaged"]')" = 1 ] \
    && ok cache_cli_verify || fail cache_cli_verify "$(cat "$tmp/s1.json" "$tmp/s2.json")"
# the damaged entry counts nowhere else: not as an entry, not in the bytes (its children are
# unreachable, as a header-damaged parent's are)
python3 - "$tmp/s1.json" "$tmp/s2.json" <<'PY' && ok cache_cli_verify_consistent || fail cache_cli_verify_consistent "$(cat "$tmp/s1.json" "$tmp/s2.json")"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["entries"] == a["entries"] - 1 and b["bytes"] < a["bytes"], (a, b)
assert b["unreachable"] >= a["unreachable"] and b["unreachable"] <= b["entries"], (a, b)
PY
# every payload damaged (200 bytes from the end: the victim above keeps its own flip): no
# entries, nothing unreachable (it had said 0 entries and 4 of them unreachable), and the
# model's header-based view says what it is
rm -rf "$tmp/all_bad"; cp -r "$D" "$tmp/all_bad"
for f in "$tmp/all_bad"/*.kvc; do
    python3 -c 'import sys; f=open(sys.argv[1],"r+b"); f.seek(-200,2); b=f.read(1); f.seek(-200,2); f.write(bytes([b[0]^0x40]))' "$f"
done
n_files=$(ls "$tmp/all_bad"/*.kvc | wc -l)
"$CLI" cache stats --cache-dir "$tmp/all_bad" --verify --json >"$tmp/s_bad.json"
"$CLI" cache stats --cache-dir "$tmp/all_bad" --verify -m "$MODEL" >"$tmp/s_bad.txt" 2>&1
[ "$(j "$tmp/s_bad.json" 'd["entries"], d["unreachable"], d["unreachable_bytes"], d["bytes"], d["models"], d["damaged"]')" = "(0, 0, 0, 0, 0, $n_files)" ] \
    && grep -q "figures come from the entries' headers" "$tmp/s_bad.txt" \
    && ok cache_cli_verify_all_damaged || fail cache_cli_verify_all_damaged "$(cat "$tmp/s_bad.json" "$tmp/s_bad.txt")"
gen -f "$tmp/b.txt" --cache-dir "$D" >"$tmp/bd.json"
[ "$(j "$tmp/bd.json" 'd["cached_tokens"]')" = 128 ] \
    && [ "$(j "$tmp/bd.json" 'd["first_logits_sha256"], d["tokens"]')" = "$(j "$tmp/b.none.json" 'd["first_logits_sha256"], d["tokens"]')" ] \
    && ok cache_cli_damaged_not_served || fail cache_cli_damaged_not_served "$(head -c 300 "$tmp/bd.json")"
"$CLI" cache stats --cache-dir "$D" --verify --json >"$tmp/s3.json"
[ "$(j "$tmp/s3.json" 'd["damaged"]')" = 0 ] && ok cache_cli_damaged_repaired || fail cache_cli_damaged_repaired "$(cat "$tmp/s3.json")"
# a damaged header is counted by a plain stats
first=$(ls "$D"/*.kvc | head -1)
printf 'XXXX' | dd of="$first" bs=1 seek=0 conv=notrunc 2>/dev/null
"$CLI" cache stats --cache-dir "$D" --json >"$tmp/s4.json"
[ "$(j "$tmp/s4.json" 'd["damaged"]')" = 1 ] && ok cache_cli_bad_magic || fail cache_cli_bad_magic "$(cat "$tmp/s4.json")"

# --- chat: warm the system + user text, generate a chat prompt that starts with it -----------
SYS="You answer from the passages."
"$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 --chat --system "$SYS" --json -f "$tmp/doc.txt" >"$tmp/wc.json" 2>"$tmp/e" \
    || fail cache_cli_chat "$(cat "$tmp/e")"
gen --chat --system "$SYS" -f "$tmp/a.txt" --cache-dir "$D" >"$tmp/ca.json" 2>"$tmp/e"
gen --chat --system "$SYS" -f "$tmp/a.txt" >"$tmp/cp.json" 2>>"$tmp/e"
wt=$(j "$tmp/wc.json" 'd["prompts"][0]["stable_tokens"]')
[ "$(j "$tmp/ca.json" 'd["cached_tokens"]')" -ge "$wt" ] \
    && [ "$(j "$tmp/ca.json" 'd["first_logits_sha256"], d["tokens"]')" = "$(j "$tmp/cp.json" 'd["first_logits_sha256"], d["tokens"]')" ] \
    && ok cache_cli_chat || fail cache_cli_chat "warm stable $wt, $(head -c 300 "$tmp/ca.json") $(cat "$tmp/e")"

# --- another model's directory is never served --------------------------------------------
T="$tmp/tiny"
"$CLI" generate -m "$TINY" --threads 1 -n 2 --json -f "$tmp/a.txt" --cache-dir "$T" >"$tmp/tiny.json" 2>"$tmp/e" \
    || fail cache_cli_other_model "tiny: $(cat "$tmp/e")"
n_tiny=$("$CLI" cache stats --cache-dir "$T" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])')
"$CLI" cache stats --cache-dir "$T" -m "$MODEL" --json >"$tmp/ts.json"
gen -f "$tmp/a.txt" --cache-dir "$T" >"$tmp/ta.json"
[ "$n_tiny" -gt 0 ] && [ "$(j "$tmp/ts.json" 'd["model"]["foreign"] == '"$n_tiny"' and d["model"]["entries"] == 0')" = True ] \
    && [ "$(j "$tmp/ta.json" 'd["cached_tokens"]')" = 0 ] \
    && [ "$(j "$tmp/ta.json" 'd["first_logits_sha256"], d["tokens"]')" = "$(j "$tmp/a.none.json" 'd["first_logits_sha256"], d["tokens"]')" ] \
    && ok cache_cli_other_model || fail cache_cli_other_model "tiny entries $n_tiny; $(cat "$tmp/ts.json"); $(head -c 200 "$tmp/ta.json")"
"$CLI" cache stats --cache-dir "$T" --json >"$tmp/ts2.json"
[ "$(j "$tmp/ts2.json" 'd["models"]')" = 2 ] && ok cache_cli_two_models || fail cache_cli_two_models "$(cat "$tmp/ts2.json")"

# --- one model in two KV types: stats -m tells them apart ---------------------------------
# The KV type is part of the fingerprint: this model's q8 entries had counted as "other models'"
# beside the f16 view that -m opened (and there was no --kv-type to look at them).
"$CLI" warm -m "$MODEL" --cache-dir "$T" --threads 2 --kv-type q8 --json -f "$tmp/doc.txt" >"$tmp/wq.json" 2>"$tmp/e" \
    || fail cache_cli_stats_by_kv_type "q8 warm: $(cat "$tmp/e")"
n_q8=$(j "$tmp/wq.json" 'd["prompts"][0]["chunks_stored"]')
"$CLI" cache stats --cache-dir "$T" -m "$MODEL" --json >"$tmp/k16.json" 2>"$tmp/e"
"$CLI" cache stats --cache-dir "$T" -m "$MODEL" --kv-type q8 --json >"$tmp/kq8.json" 2>>"$tmp/e"
"$CLI" cache ls --cache-dir "$T" -m "$MODEL" --kv-type q8 --json >"$tmp/lq8.json" 2>>"$tmp/e"
"$CLI" cache stats --cache-dir "$T" -m "$MODEL" >"$tmp/k16.txt" 2>>"$tmp/e"
if python3 - "$tmp/k16.json" "$tmp/kq8.json" "$tmp/lq8.json" "$n_tiny" "$n_q8" <<'PY'
import json, sys
f16, q8, ls = (json.load(open(f)) for f in sys.argv[1:4])
n_tiny, n_q8 = int(sys.argv[4]), int(sys.argv[5])
a, q = f16["model"], q8["model"]
k = a["kv_types"]
assert sorted(k) == ["f16", "f32", "q8"], k
assert a["kv_type"] == "f16" and k["f16"]["fingerprint"] == a["fingerprint"] and k["f16"]["entries"] == a["entries"] > 0, a
assert k["q8"]["entries"] == n_q8 > 0 and k["q8"]["kv_bytes"] > 0 and k["f32"]["entries"] == k["f32"]["kv_bytes"] == 0, k
assert len({t["fingerprint"] for t in k.values()}) == 3, k
# other_models: the tiny model's entries only; foreign keeps its meaning (every other fingerprint)
assert a["other_models"] == n_tiny and a["foreign"] == n_tiny + n_q8, a
assert k["f16"]["entries"] + n_q8 + n_tiny == f16["entries"], (f16["entries"], k)
# --kv-type q8: the model's view is of its q8 fingerprint; the breakdown is the same
assert q["kv_type"] == "q8" and q["fingerprint"] == k["q8"]["fingerprint"], q
assert q["entries"] == q["prefix_reachable"] == n_q8 and q["kv_types"] == k and q["other_models"] == n_tiny, q
e = ls["entries"]
assert len(e) == n_q8 and all(x["kv_type"] == "q8" and x["fingerprint"] == q["fingerprint"] for x in e), e[:2]
assert sum(x["kv_bytes"] for x in e) == k["q8"]["kv_bytes"], (sum(x["kv_bytes"] for x in e), k)
PY
then
    grep -q "by KV type: *f16 [0-9]* entries (.*), q8 $n_q8 entries" "$tmp/k16.txt" \
        && grep -q "other models': *$n_tiny entries" "$tmp/k16.txt" \
        && ok cache_cli_stats_by_kv_type || fail cache_cli_stats_by_kv_type "$(cat "$tmp/k16.txt" "$tmp/e")"
else
    fail cache_cli_stats_by_kv_type "$(cat "$tmp/k16.json" "$tmp/kq8.json" "$tmp/e")"
fi
usage_err cache_cli_err_kv_type_needs_model "goes with -m" cache stats --cache-dir "$T" --kv-type q8
usage_err cache_cli_err_kv_type_unknown "unknown KV type 'q4'" cache ls --cache-dir "$T" -m "$MODEL" --kv-type q4

# --- clear ----------------------------------------------------------------------------------
"$CLI" cache clear --cache-dir "$T" --json >"$tmp/c.json" \
    && [ "$(j "$tmp/c.json" 'd["removed"]')" -gt "$n_tiny" ] \
    && [ "$("$CLI" cache stats --cache-dir "$T" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])')" = 0 ] \
    && ok cache_cli_clear || fail cache_cli_clear "$(cat "$tmp/c.json")"
exit $status
