#!/usr/bin/env bash
# CLI contract of non-prefix reuse: warm --doc, generate --doc --reuse
# none|selective|cacheblend|firstk|query|full and the repair options, JSON fields.
# Every run is a fresh process, so documents come through the cache
# directory. Invariants compared by first_logits_sha256 (no tolerance):
# full == full on a cold cache; the default (query) at ratio 1 == full; ratio 0 ==
# none; narrowing from r to r == no narrowing. Prints "ok NAME" / "FAIL NAME".
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
D="$tmp/cache"
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
# j FILE EXPR: evaluates a Python expression over the JSON object d of FILE
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
Q="Question: Where was the author of Hannibal and Scipio educated?"
SYS="Answer from the passages in a few words."
gen() { "$CLI" generate -m "$MODEL" --threads 2 -n 4 --json --chat --system "$SYS" -p "$Q" "$@"; }

"$CLI" generate --help | grep -q -- "--recompute-ratio" && ok repair_cli_help_generate || fail repair_cli_help_generate "no --recompute-ratio"
"$CLI" warm --help | grep -q -- "--doc FILE" && ok repair_cli_help_warm || fail repair_cli_help_warm "no --doc"
usage_err() { # name, expected text in stderr, args...
    local name=$1 want=$2; shift 2
    "$CLI" "$@" >/dev/null 2>"$tmp/e"; local rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/e" && ok "$name" || fail "$name" "rc=$rc $(cat "$tmp/e")"
}
echo "a doc" >"$tmp/x.txt"
usage_err repair_cli_err_doc_needs_dir "--doc needs --cache-dir" generate -m "$MODEL" -p hi --doc "$tmp/x.txt"
usage_err repair_cli_err_ratio_needs_doc "need --doc" generate -m "$MODEL" -p hi --cache-dir "$D" --recompute-ratio 0.3
usage_err repair_cli_err_mode "none, selective, cacheblend" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --reuse sideways
usage_err repair_cli_err_no_store "always cached" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --no-store
usage_err repair_cli_err_ratio_range "in \[0, 1\]" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --recompute-ratio 2
usage_err repair_cli_err_narrow_range "narrow-from must be" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --narrow-from 0.05
usage_err repair_cli_err_narrow_layers "narrow-layers must be" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --narrow-from 0.5 --narrow-layers 0
usage_err repair_cli_err_narrow_needs_doc "need --doc" generate -m "$MODEL" -p hi --cache-dir "$D" --narrow-from 0.5

python3 - "$SHARED/data/musique_dev.json" "$tmp" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))
for i, c in enumerate(items[0]["ctxs"][:3]):
    t = c["text"][:900]
    open("%s/d%d.txt" % (sys.argv[2], i), "w").write(t[: t.rfind(" ")] + "\n\n")
PY
docs=(--doc "$tmp/d0.txt" --doc "$tmp/d1.txt" --doc "$tmp/d2.txt")
rdocs=(--doc "$tmp/d2.txt" --doc "$tmp/d0.txt" --doc "$tmp/d1.txt")

# warm the documents, twice
"$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 --chat --json "${docs[@]}" >"$tmp/w.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/w.json" 'd["docs"]["docs"] == 3 and d["docs"]["computed"] == 3 and d["docs"]["tokens"] > 300')" = True ] \
    && ok repair_cli_warm_docs || fail repair_cli_warm_docs "$(cat "$tmp/w.json" "$tmp/e")"
"$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 --chat "${docs[@]}" >"$tmp/w2.txt" 2>&1 \
    && grep -q "3 cached already, 0 computed" "$tmp/w2.txt" && ok repair_cli_warm_docs_again || fail repair_cli_warm_docs_again "$(cat "$tmp/w2.txt")"

# warm with --system warms the prompt before the documents as well (it had
# been dropped: the request computed and stored it), so the request takes it
# as its exact prefix and stores nothing
DS="$tmp/warm_system"
"$CLI" warm -m "$MODEL" --cache-dir "$DS" --threads 2 --chat --system "$SYS" --json "${docs[@]}" >"$tmp/ws.json" 2>"$tmp/e" \
    && gen --cache-dir "$DS" "${docs[@]}" >"$tmp/gs.json" 2>>"$tmp/e" \
    && [ "$(j "$tmp/ws.json" 'd["docs"]["prefix_computed"] > 0')" = True ] \
    && [ "$(j "$tmp/gs.json" 'd["docs_hit"] == 3 and d["stored_chunks"] == 0 and d["cached_tokens"] > 0')" = True ] \
    && ok repair_cli_warm_system_prefix || fail repair_cli_warm_system_prefix "$(cat "$tmp/ws.json" "$tmp/gs.json" "$tmp/e")"

# the default strategy (query, 0.10: exactly the ratio's share) from the warmed documents
gen --cache-dir "$D" "${docs[@]}" >"$tmp/q.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/q.json" 'd["docs_hit"] == 3 and d["docs_computed"] == 0 and d["reuse"] == "query" and d["moved_tokens"] > 300 and d["recomputed_tokens"] == int(0.10 * d["moved_tokens"] + 0.5)')" = True ] \
    && ok repair_cli_default_query_json || fail repair_cli_default_query_json "$(cat "$tmp/q.json" "$tmp/e")"
# query with selective's tokens on top (--query-seams): beyond the ratio, at most --overlap per seam
gen --cache-dir "$D" "${docs[@]}" --query-seams --overlap 8 >"$tmp/qs.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/qs.json" 'd["reuse"] == "query" and int(0.10 * d["moved_tokens"] + 0.5) < d["recomputed_tokens"] <= int(0.10 * d["moved_tokens"] + 0.5) + 3 * 8')" = True ] \
    && "$CLI" generate --help | grep -q -- "--query-seams" \
    && ok repair_cli_query_seams || fail repair_cli_query_seams "$(cat "$tmp/qs.json" "$tmp/e")"
# cacheblend (the hybrid with seams at 0.10)
gen --cache-dir "$D" "${docs[@]}" --reuse cacheblend >"$tmp/cb.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/cb.json" 'd["docs_hit"] == 3 and d["docs_computed"] == 0 and d["reuse"] == "cacheblend" and d["moved_tokens"] > 300 and int(0.10 * d["moved_tokens"] + 0.5) < d["recomputed_tokens"] <= int(0.10 * d["moved_tokens"] + 0.5) + 3 * 16')" = True ] \
    && ok repair_cli_cacheblend_json || fail repair_cli_cacheblend_json "$(cat "$tmp/cb.json" "$tmp/e")"

# invariants of the default strategy: ratio 1 == full (checked below), ratio 0 == none
gen --cache-dir "$D" "${docs[@]}" --recompute-ratio 1 >"$tmp/r1.json" 2>"$tmp/e"
# (the cost, recomputed_token_layers: every document token in every layer)
[ -s "$tmp/r1.json" ] && [ "$(j "$tmp/r1.json" 'd["recomputed_tokens"] == d["moved_tokens"] > 0 and d["recomputed_token_layers"] % d["moved_tokens"] == 0 and d["recomputed_token_layers"] >= 2 * d["moved_tokens"]')" = True ] \
    && ok repair_cli_ratio_one || fail repair_cli_ratio_one "$(cat "$tmp/r1.json" "$tmp/e")"
sha_r1=$(j "$tmp/r1.json" 'd["first_logits_sha256"]')
gen --cache-dir "$D" "${docs[@]}" --recompute-ratio 0 >"$tmp/r0.json" 2>"$tmp/e"
gen --cache-dir "$D" "${docs[@]}" --reuse none >"$tmp/none.json" 2>>"$tmp/e"
[ -s "$tmp/r0.json" ] && [ "$(j "$tmp/r0.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/none.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/none.json" 'd["recomputed_tokens"] == 0 and d["recomputed_token_layers"] == 0 and d["reuse"] == "none" and d["moved_tokens"] > 0')" = True ] \
    && ok repair_cli_ratio_zero_is_none || fail repair_cli_ratio_zero_is_none "$(cat "$tmp/r0.json" "$tmp/none.json" "$tmp/e")"
sha_none=$(j "$tmp/none.json" 'd["first_logits_sha256"]')

# the other strategies and options; documents in another order still hit
gen --cache-dir "$D" "${rdocs[@]}" --reuse selective --overlap 8 >"$tmp/sel.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/sel.json" 'd["recomputed_tokens"] == 24 and d["docs_hit"] == 3')" = True ] \
    && ok repair_cli_selective || fail repair_cli_selective "$(cat "$tmp/sel.json" "$tmp/e")"
gen --cache-dir "$D" "${rdocs[@]}" --reuse firstk --first-k 5 >"$tmp/fk.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/fk.json" 'd["recomputed_tokens"] == 15 and d["docs_hit"] == 3')" = True ] \
    && ok repair_cli_firstk || fail repair_cli_firstk "$(cat "$tmp/fk.json" "$tmp/e")"
gen --cache-dir "$D" "${rdocs[@]}" --reuse cacheblend --recompute-ratio 0.3 --deviation k-cos --check-layer 2 --no-seams >"$tmp/kc.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/kc.json" 'd["recomputed_tokens"] == int(0.3 * d["moved_tokens"] + 0.5)')" = True ] \
    && ok repair_cli_cacheblend_options || fail repair_cli_cacheblend_options "$(cat "$tmp/kc.json" "$tmp/e")"
# gradual narrowing: recomputed_tokens is the final set; from r to r is
# no narrowing, bit for bit
gen --cache-dir "$D" "${rdocs[@]}" --reuse cacheblend --recompute-ratio 0.1 --no-seams >"$tmp/n0.json" 2>"$tmp/e"
gen --cache-dir "$D" "${rdocs[@]}" --reuse cacheblend --recompute-ratio 0.1 --no-seams --narrow-from 0.1 >"$tmp/n1.json" 2>>"$tmp/e"
gen --cache-dir "$D" "${rdocs[@]}" --reuse cacheblend --recompute-ratio 0.1 --no-seams --narrow-from 0.4 --narrow-layers 3 >"$tmp/n2.json" 2>>"$tmp/e"
[ -s "$tmp/n2.json" ] && [ "$(j "$tmp/n0.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/n1.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/n2.json" 'd["recomputed_tokens"] == int(0.1 * d["moved_tokens"] + 0.5) and d["docs_hit"] == 3')" = True ] \
    && [ "$(j "$tmp/n2.json" 'd["recomputed_token_layers"]')" -gt "$(j "$tmp/n0.json" 'd["recomputed_token_layers"]')" ] \
    && "$CLI" generate --help | grep -q -- "--narrow-from" \
    && ok repair_cli_narrowing || fail repair_cli_narrowing "$(cat "$tmp/n0.json" "$tmp/n1.json" "$tmp/n2.json" "$tmp/e")"
# a new document is computed on the fly and stored
cp "$tmp/d1.txt" "$tmp/d3.txt"; echo "One more line." >>"$tmp/d3.txt"
gen --cache-dir "$D" --doc "$tmp/d3.txt" --doc "$tmp/d0.txt" >"$tmp/new.json" 2>"$tmp/e" \
    && gen --cache-dir "$D" --doc "$tmp/d0.txt" --doc "$tmp/d3.txt" >"$tmp/new2.json" 2>>"$tmp/e" \
    && [ "$(j "$tmp/new.json" 'd["docs_computed"] == 1 and d["docs_hit"] == 1')" = True ] \
    && [ "$(j "$tmp/new2.json" 'd["docs_computed"] == 0 and d["docs_hit"] == 2')" = True ] \
    && ok repair_cli_doc_on_the_fly || fail repair_cli_doc_on_the_fly "$(cat "$tmp/new.json" "$tmp/new2.json" "$tmp/e")"
# full (recompute everything; it stores the whole prompt by prefix, so it
# runs on a copy of the directory): with the system segment an exact hit,
# and on a cold directory: the same bits, and those of ratio 1
cp -r "$D" "$tmp/copy"
gen --cache-dir "$tmp/copy" "${docs[@]}" --reuse full >"$tmp/full.json" 2>"$tmp/e"
gen --cache-dir "$tmp/cold" "${docs[@]}" --reuse full >"$tmp/full_cold.json" 2>>"$tmp/e"
[ -s "$tmp/full.json" ] && [ "$(j "$tmp/full.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/full_cold.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/full.json" 'd["cached_tokens"] > 0 and d["moved_tokens"] == 0 and d["reuse"] == "full"')" = True ] \
    && ok repair_cli_full_exact || fail repair_cli_full_exact "$(cat "$tmp/full.json" "$tmp/full_cold.json" "$tmp/e")"
sha_full=$(j "$tmp/full.json" 'd["first_logits_sha256"]')
[ "$sha_r1" = "$sha_full" ] && ok repair_cli_ratio_one_is_full || fail repair_cli_ratio_one_is_full "$sha_r1 vs $sha_full"
[ "$sha_none" != "$sha_full" ] && ok repair_cli_none_differs || fail repair_cli_none_differs "none gave full's bits"
# a repeated default prompt after full: its own bits, as before it (full stored the
# whole prompt's exact KV, which it had taken whole: the answer depended on what an
# earlier request stored); the repeated full takes that hit, with full's bits
gen --cache-dir "$tmp/copy" "${docs[@]}" >"$tmp/again.json" 2>"$tmp/e" \
    && gen --cache-dir "$tmp/copy" "${docs[@]}" --reuse full >"$tmp/full2.json" 2>>"$tmp/e" \
    && [ "$(j "$tmp/again.json" 'd["moved_tokens"] > 0')" = True ] \
    && [ "$(j "$tmp/again.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/q.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/full2.json" 'd["cached_tokens"] == d["prompt_tokens"] - 1')" = True ] \
    && [ "$(j "$tmp/full2.json" 'd["first_logits_sha256"]')" = "$sha_full" ] \
    && ok repair_cli_exact_after_full || fail repair_cli_exact_after_full "$(cat "$tmp/again.json" "$tmp/full2.json" "$tmp/e")"
# text mode prints the document line
"$CLI" generate -m "$MODEL" --threads 2 -n 2 --chat -p "$Q" --cache-dir "$D" "${docs[@]}" >/dev/null 2>"$tmp/t.txt" \
    && grep -q "documents: 3 from the cache" "$tmp/t.txt" && ok repair_cli_text || fail repair_cli_text "$(cat "$tmp/t.txt")"
# cross-document baking (on a copy: the other checks use plain documents):
# warm --doc-set bakes each document after the other two; generate moves the
# baked KV unless --plain-docs, which gives the unbaked directory's bits
B="$tmp/bake"; cp -r "$D" "$B"
"$CLI" warm -m "$MODEL" --cache-dir "$B" --threads 2 --chat --json --doc-set "${docs[@]}" >"$tmp/bw.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/bw.json" 'd["docs"]["baked"] == 3 and d["docs"]["cached"] == 3 and d["docs"]["unbaked"] == 0')" = True ] \
    && "$CLI" warm -m "$MODEL" --cache-dir "$B" --threads 2 --chat --json --bake-with-neighbours 1 "${docs[@]}" >"$tmp/bw2.json" 2>>"$tmp/e" \
    && [ "$(j "$tmp/bw2.json" 'd["docs"]["baked"] == 0 and d["docs"]["bake_cached"] == 3')" = True ] \
    && ok repair_cli_bake_warm || fail repair_cli_bake_warm "$(cat "$tmp/bw.json" "$tmp/bw2.json" "$tmp/e")"
"$CLI" cache ls --cache-dir "$B" --json >"$tmp/ls.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/ls.json" 'sum(e["origin"] == "baked" and e["neighbours"] == 2 for e in d["entries"]) == 3 and sum(e["origin"] == "doc" for e in d["entries"]) >= 3')" = True ] \
    && "$CLI" cache ls --cache-dir "$B" | grep -q "baked/2" \
    && ok repair_cli_bake_ls || fail repair_cli_bake_ls "$(cat "$tmp/ls.json" "$tmp/e")"
gen --cache-dir "$B" "${rdocs[@]}" --reuse none >"$tmp/bn.json" 2>"$tmp/e"
gen --cache-dir "$B" "${rdocs[@]}" --reuse none --plain-docs >"$tmp/bp.json" 2>>"$tmp/e"
gen --cache-dir "$D" "${rdocs[@]}" --reuse none >"$tmp/pn.json" 2>>"$tmp/e"
[ -s "$tmp/pn.json" ] && [ "$(j "$tmp/bn.json" 'd["docs_baked"] == 3 and d["docs_hit"] == 3')" = True ] \
    && [ "$(j "$tmp/bp.json" 'd["docs_baked"] == 0 and d["docs_hit"] == 3')" = True ] \
    && [ "$(j "$tmp/bp.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/pn.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/bn.json" 'd["first_logits_sha256"]')" != "$(j "$tmp/pn.json" 'd["first_logits_sha256"]')" ] \
    && ok repair_cli_bake_generate || fail repair_cli_bake_generate "$(cat "$tmp/bn.json" "$tmp/bp.json" "$tmp/pn.json" "$tmp/e")"
# APE's recalibration: T = S = 1 is none's bits, 0.9 is not; ranges checked
gen --cache-dir "$D" "${rdocs[@]}" --reuse none >"$tmp/rc0.json" 2>"$tmp/e"
gen --cache-dir "$D" "${rdocs[@]}" --reuse none --recal >"$tmp/rc9.json" 2>>"$tmp/e"
gen --cache-dir "$D" "${rdocs[@]}" --reuse none --recal-temperature 1 --recal-scale 1 >"$tmp/rc1.json" 2>>"$tmp/e"
[ -s "$tmp/rc1.json" ] && [ "$(j "$tmp/rc1.json" 'd["first_logits_sha256"]')" = "$(j "$tmp/rc0.json" 'd["first_logits_sha256"]')" ] \
    && [ "$(j "$tmp/rc9.json" 'd["first_logits_sha256"]')" != "$(j "$tmp/rc0.json" 'd["first_logits_sha256"]')" ] \
    && ok repair_cli_recal || fail repair_cli_recal "$(cat "$tmp/e")"
usage_err repair_cli_err_recal_range "recal-temperature" generate -m "$MODEL" -p hi --cache-dir "$D" --doc "$tmp/x.txt" --recal-temperature 9
usage_err repair_cli_err_recal_needs_doc "need --doc" generate -m "$MODEL" -p hi --cache-dir "$D" --recal
usage_err repair_cli_err_bake_both "not both" warm -m "$MODEL" --cache-dir "$B" --doc "$tmp/x.txt" --doc-set --bake-with-neighbours 2
usage_err repair_cli_err_bake_needs_doc "need --doc" warm -m "$MODEL" --cache-dir "$B" --doc-set hi
usage_err repair_cli_err_bake_range "bake-with-neighbours" warm -m "$MODEL" --cache-dir "$B" --doc "$tmp/x.txt" --bake-with-neighbours 0
# a 1-layer model: documents under the default strategy work (cacheblend's
# default check layer, 1, had failed every documents request there); cacheblend
# itself says which check layers it takes
TINY="$SHARED/models/llama-2-tiny-random.gguf"
"$CLI" generate -m "$TINY" -p q --doc "$tmp/x.txt" --cache-dir "$tmp/tiny" -n 2 --threads 1 >"$tmp/t1" 2>"$tmp/e" \
    && "$CLI" generate -m "$TINY" -p q --doc "$tmp/x.txt" --cache-dir "$tmp/tiny" -n 2 --threads 1 --reuse none >>"$tmp/t1" 2>>"$tmp/e" \
    && ! "$CLI" generate -m "$TINY" -p q --doc "$tmp/x.txt" --cache-dir "$tmp/tiny" -n 2 --threads 1 --reuse cacheblend 2>"$tmp/e2" \
    && grep -q "check layer must be in 0..0" "$tmp/e2" \
    && "$CLI" generate -m "$TINY" -p q --doc "$tmp/x.txt" --cache-dir "$tmp/tiny" -n 2 --threads 1 --reuse cacheblend --check-layer 0 >>"$tmp/t1" 2>>"$tmp/e" \
    && ok repair_cli_one_layer_model || fail repair_cli_one_layer_model "$(cat "$tmp/e" "$tmp/e2")"
exit $status
