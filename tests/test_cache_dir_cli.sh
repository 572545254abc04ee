#!/usr/bin/env bash
# The cache directory as an attacker and a full disk meet it, through the CLI:
# FIFOs in place of the model, the weights memo and a cache entry (every
# command finishes within a timeout); a full tmpfs and a read-only mount
# (failed writes are reported, never counted as stored); a directory that
# cannot be listed (costs the cache, not the generation); foreign files
# survive clear; prune; and three concurrent processes filling a directory
# past --cache-max-bytes (the bound holds, every remaining entry verifies,
# outputs stay bit-identical to cold runs). Prints "ok NAME" / "FAIL NAME";
# a check that needs a tmpfs mount prints "skip NAME" where mount fails.
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
QUICK=0; [ -n "${KVSTITCH_TEST_QUICK:-}" ] && [ "${KVSTITCH_TEST_QUICK}" != 0 ] && QUICK=1
tmp=$(mktemp -d)
mounts=()
cleanup() {
    local m; for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
# Every command is bounded: a hang is a failure (rc 124), never a stuck test.
# (Generous: a prefill of a few hundred tokens on a loaded 2-core machine.)
T() { timeout 300 "$@"; }
kvc_bytes() { find "$1" -maxdepth 1 -name '*.kvc' -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
kvc_count() { find "$1" -maxdepth 1 -name '*.kvc' -type f | wc -l; }

python3 - "$SHARED/data/musique_dev.json" "$tmp" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))
for k in range(6):  # six distinct prompts of ~300-400 tokens
    it = items[10 + k]
    doc = "\n\n".join(c["title"] + "\n" + c["text"] for c in it["ctxs"][:2])
    open(f"{sys.argv[2]}/p{k}.txt", "w").write(doc[:1500] + "\n\nQuestion: " + it["question"] + "\nAnswer:")
PY

# --- FIFOs never hang -------------------------------------------------------------------
mkfifo "$tmp/model.fifo"
T "$CLI" info -m "$tmp/model.fifo" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "not a regular file|is a FIFO, expected a regular file" "$tmp/e" && ok cache_dir_fifo_model \
    || fail cache_dir_fifo_model "rc=$rc $(cat "$tmp/e")"

D="$tmp/fifo"
T "$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 -f "$tmp/p0.txt" >/dev/null 2>"$tmp/e" || fail cache_dir_fifo_setup "$(cat "$tmp/e")"
memo=$(find "$D" -maxdepth 1 -name '.weights-*.memo' | head -1)
entry=$(find "$D" -maxdepth 1 -name '*.kvc' | sort | head -1)
if [ -n "$memo" ] && [ -n "$entry" ]; then
    rm -f "$memo" "$entry"; mkfifo "$memo" "$entry"
    T "$CLI" generate -m "$MODEL" --cache-dir "$D" --threads 2 -n 2 --json -f "$tmp/p0.txt" >"$tmp/g.json" 2>"$tmp/e"; rc=$?
    [ $rc -eq 0 ] && ok cache_dir_fifo_memo_and_entry_generate || fail cache_dir_fifo_memo_and_entry_generate "rc=$rc $(cat "$tmp/e")"
    # generate may rename its own new files over them (the names are the
    # cache's); clear and prune must leave them alone
    rm -f "$memo" "$entry"; mkfifo "$memo" "$entry"
    for verb in "stats" "stats --verify" "ls" "prune --max-bytes 1G" "clear"; do
        T "$CLI" cache $verb --cache-dir "$D" -m "$MODEL" >/dev/null 2>"$tmp/e" ||
            T "$CLI" cache $verb --cache-dir "$D" >/dev/null 2>>"$tmp/e"; rc=$?
        [ $rc -eq 0 ] && ok "cache_dir_fifo_cache_${verb%% *}" || fail "cache_dir_fifo_cache_${verb%% *}" "rc=$rc $(cat "$tmp/e")"
    done
    # the entry FIFO is not the cache's (no header): clear and prune leave it;
    # the memo may be replaced by a fresh one (atomic rename, never opened)
    [ -p "$entry" ] && { [ -p "$memo" ] || [ -f "$memo" ]; } && ok cache_dir_fifo_left_alone \
        || fail cache_dir_fifo_left_alone "$(ls -la "$D")"
else
    fail cache_dir_fifo_setup "no memo or entry in $D"
fi

# --- failed writes: full tmpfs, read-only mount -------------------------------------------
small="$tmp/small"; mkdir -p "$small"
if mount -t tmpfs -o size=2m tmpfs "$small" 2>/dev/null; then
    mounts+=("$small")
    # a bound above the file system's size: writes run into ENOSPC (under the
    # default bound the cache would evict its own entries to make room)
    T "$CLI" warm -m "$MODEL" --cache-dir "$small" --cache-max-bytes 1G --threads 2 --json -f "$tmp/p1.txt" \
        >"$tmp/w.json" 2>"$tmp/e"; rc=$?
    on_disk=$(kvc_count "$small")
    if [ $rc -eq 0 ] && [ "$(j "$tmp/w.json" 'd["chunks_stored"] == '"$on_disk"' and d["write_errors"] > 0 and d["chunks_stored"] + d["write_errors"] == d["prompts"][0]["chunks"]')" = True ] \
        && [ "$(j "$tmp/w.json" '"could not be written" in d["prompts"][0]["warning"]')" = True ]; then
        ok cache_dir_full_fs_reported
    else
        fail cache_dir_full_fs_reported "rc=$rc on_disk=$on_disk $(cat "$tmp/w.json" "$tmp/e")"
    fi
    T "$CLI" generate -m "$MODEL" --cache-dir "$small" --cache-max-bytes 1G --threads 2 -n 2 --json -f "$tmp/p2.txt" \
        >"$tmp/g.json" 2>"$tmp/e"; rc=$?
    # the warning and the JSON say why (they had given the count alone)
    [ $rc -eq 0 ] && [ "$(j "$tmp/g.json" 'd["write_errors"] > 0 and "space" in d["write_error"]')" = True ] \
        && grep -q "could not be written.*: .*space" "$tmp/e" \
        && ok cache_dir_full_fs_generate || fail cache_dir_full_fs_generate "rc=$rc $(cat "$tmp/g.json" "$tmp/e")"
    rm -rf "${small:?}"/* "$small"/.[!.]* 2>/dev/null
    if mount -o remount,ro "$small" 2>/dev/null; then
        T "$CLI" warm -m "$MODEL" --cache-dir "$small" --threads 2 --json -f "$tmp/p1.txt" >"$tmp/w.json" 2>"$tmp/e"; rc=$?
        [ $rc -eq 0 ] && [ "$(j "$tmp/w.json" 'd["chunks_stored"] == 0 and d["write_errors"] == d["prompts"][0]["chunks"]')" = True ] \
            && [ "$(kvc_count "$small")" -eq 0 ] && ok cache_dir_read_only_reported \
            || fail cache_dir_read_only_reported "rc=$rc $(cat "$tmp/w.json" "$tmp/e")"
        # documents too (their failed writes had not been counted at all)
        printf 'The red fox lives in the old forest by the river.\n' >"$tmp/docA.txt"
        printf 'Owls hunt small animals at night.\n' >"$tmp/docB.txt"
        T "$CLI" generate -m "$MODEL" --cache-dir "$small" --threads 2 -n 2 --json --doc "$tmp/docA.txt" \
            --doc "$tmp/docB.txt" -p "What is the fox?" >"$tmp/gd.json" 2>"$tmp/e"; rc=$?
        [ $rc -eq 0 ] && [ "$(j "$tmp/gd.json" 'd["docs_computed"] == 2 and d["write_errors"] >= 2 and "Read-only" in d["write_error"]')" = True ] \
            && grep -q "could not be written.*: .*Read-only" "$tmp/e" && ok cache_dir_read_only_docs_generate \
            || fail cache_dir_read_only_docs_generate "rc=$rc $(cat "$tmp/gd.json" "$tmp/e")"
        T "$CLI" warm -m "$MODEL" --cache-dir "$small" --threads 2 --json --doc "$tmp/docA.txt" --doc "$tmp/docB.txt" \
            >"$tmp/wd.json" 2>"$tmp/e"; rc=$?
        [ $rc -eq 0 ] && [ "$(j "$tmp/wd.json" 'd["docs"]["computed"] == 2 and d["docs"]["write_errors"] == 2')" = True ] \
            && grep -q "documents could not be written" "$tmp/e" && ok cache_dir_read_only_docs_warm \
            || fail cache_dir_read_only_docs_warm "rc=$rc $(cat "$tmp/wd.json" "$tmp/e")"
    else
        echo "skip cache_dir_read_only_reported (remount,ro failed)"
    fi
else
    echo "skip cache_dir_full_fs_reported (cannot mount a tmpfs here)"
fi

# --- writes refused by the bound: what the reports say -------------------------------------
# (a document not written had been called "computed and stored" in the text report; a
# prompt's warning had gone to stdout, and nowhere with --json; its reason had been cut at 150
# bytes, mid-word)
printf 'The red fox lives in the old forest by the river.\n' >"$tmp/docT.txt"
T "$CLI" warm -m "$MODEL" --cache-dir "$tmp/bound1" --cache-max-bytes 1 --threads 2 --doc "$tmp/docT.txt" \
    >"$tmp/wt.out" 2>"$tmp/e"; rc=$?
[ $rc -eq 0 ] && grep -q "1 computed, 1 of them not written (not stored)" "$tmp/wt.out" \
    && ! grep -q "computed and stored" "$tmp/wt.out" && grep -q "documents could not be written" "$tmp/e" \
    && ok cache_dir_unwritten_doc_not_called_stored \
    || fail cache_dir_unwritten_doc_not_called_stored "rc=$rc $(cat "$tmp/wt.out" "$tmp/e")"
for json in "" --json; do
    T "$CLI" warm -m "$MODEL" --cache-dir "$tmp/bound1" --cache-max-bytes 1 --threads 2 $json -f "$tmp/p1.txt" \
        >"$tmp/wp.out" 2>"$tmp/e"; rc=$?
    [ $rc -eq 0 ] && ! grep -q "^ *warning:\|kvstitch warm: warning" "$tmp/wp.out" \
        && grep -q "^kvstitch warm: warning: .*could not be written to the cache dir (.*); they are not stored$" "$tmp/e" \
        && ok "cache_dir_warm_warning_on_stderr${json:+_json}" \
        || fail "cache_dir_warm_warning_on_stderr${json:+_json}" "rc=$rc $(cat "$tmp/wp.out" "$tmp/e")"
done

# --- a cache dir that cannot be listed -------------------------------------------------------
# Mode 0300: entered and written, never listed (opendir: EACCES). It costs the cache, as a
# read-only one does: generate succeeds with the cold output, warns naming the dir and the
# error, and writes no entry (its bound needs a listing); it had failed ("cannot open cache
# dir: Permission denied"). Root lists any directory, so as root the run drops
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv: root then meets the mode as its owner
# does); skipped where that is not possible.
U="$tmp/unlistable"; mkdir -p "$U"; chmod 300 "$U"
as_owner=(env)
[ "$(id -u)" = 0 ] && as_owner=(setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search)
if "${as_owner[@]}" true 2>/dev/null && ! "${as_owner[@]}" ls "$U" >/dev/null 2>&1; then
    T "${as_owner[@]}" "$CLI" generate -m "$MODEL" --cache-dir "$U" --threads 2 -n 4 --json -f "$tmp/p3.txt" \
        >"$tmp/gu.json" 2>"$tmp/e"; rc=$?
    T "$CLI" generate -m "$MODEL" --threads 2 -n 4 --json -f "$tmp/p3.txt" >"$tmp/gc.json" 2>>"$tmp/e"
    [ $rc -eq 0 ] && [ "$(j "$tmp/gu.json" 'd["first_logits_sha256"], d["tokens"]')" = "$(j "$tmp/gc.json" 'd["first_logits_sha256"], d["tokens"]')" ] \
        && [ "$(j "$tmp/gu.json" 'd["stored_chunks"] == 0 and d["write_errors"] > 0')" = True ] \
        && grep -q "warning: .*could not be written.*$U: cannot open cache dir: Permission denied" "$tmp/e" \
        && [ "$(kvc_count "$U")" -eq 0 ] && ok cache_dir_unlistable_generate \
        || fail cache_dir_unlistable_generate "rc=$rc $(cat "$tmp/gu.json" "$tmp/e")"
else
    echo "skip cache_dir_unlistable_generate (a directory of mode 0300 lists here, or setpriv cannot drop the DAC capabilities)"
fi
chmod 755 "$U"

# --- clear and prune touch only the cache's files ------------------------------------------
# (its parents made as mkdir -p does: a dir under a missing ~/.cache had failed; the weights
# memo beside the entries is the cache's own, no "other file")
D="$tmp/own/nested/kvs"
T "$CLI" warm -m "$MODEL" --cache-dir "$D" --threads 2 -f "$tmp/p0.txt" >/dev/null 2>"$tmp/e" || fail cache_dir_own_setup "$(cat "$tmp/e")"
ls "$D"/.weights-*.memo >/dev/null 2>&1 || fail cache_dir_own_setup "no weights memo in $D"
echo "someone else's" >"$D/.x.tmp"; touch -d '2 hours ago' "$D/.x.tmp"
echo "notes" >"$D/notes.txt"
T "$CLI" cache stats --cache-dir "$D" --json >"$tmp/s.json" 2>"$tmp/e"
[ "$(j "$tmp/s.json" 'd["other_files"] == 2 and d["max_bytes"] > 0 and d["entries"] > 0')" = True ] \
    && ok cache_dir_stats_budget_and_others || fail cache_dir_stats_budget_and_others "$(cat "$tmp/s.json" "$tmp/e")"
# stale junk (an entry's name, not the magic, untouched for an hour): clear removes it and
# says so as prune does (it had been removed unreported)
junk="$D/$(printf 'a%.0s' $(seq 64)).kvc"
printf 'junk bytes' >"$junk"; touch -d '2 hours ago' "$junk"
n_entries=$(( $(kvc_count "$D") - 1 ))
T "$CLI" cache clear --cache-dir "$D" --json >"$tmp/c.json" 2>"$tmp/e"
[ -f "$D/.x.tmp" ] && [ -f "$D/notes.txt" ] && [ "$(kvc_count "$D")" -eq 0 ] && ok cache_dir_clear_own_only \
    || fail cache_dir_clear_own_only "$(ls -la "$D")"
[ "$(j "$tmp/c.json" "(d['removed'], d['junk_removed'], d['junk_bytes'], d['removed_bytes'] > 0)")" = "($n_entries, 1, 10, True)" ] \
    && ok cache_dir_clear_reports_junk || fail cache_dir_clear_reports_junk "$n_entries entries: $(cat "$tmp/c.json" "$tmp/e")"
printf 'junk bytes' >"$junk"; touch -d '2 hours ago' "$junk"
T "$CLI" cache clear --cache-dir "$D" >"$tmp/c.txt" 2>"$tmp/e"
grep -q "removed 0 entries (0.0 MiB), 1 junk file (0.0 MiB)" "$tmp/c.txt" && [ ! -e "$junk" ] \
    && ok cache_dir_clear_reports_junk_text || fail cache_dir_clear_reports_junk_text "$(cat "$tmp/c.txt" "$tmp/e")"
T "$CLI" cache stats --cache-dir "$tmp/does-not-exist" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "does-not-exist" "$tmp/e" && ok cache_dir_stats_missing_dir || fail cache_dir_stats_missing_dir "rc=$rc"
T "$CLI" cache prune --cache-dir "$D" --max-bytes 0 >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--max-bytes" "$tmp/e" && ok cache_dir_prune_bad_bytes || fail cache_dir_prune_bad_bytes "rc=$rc"
T "$CLI" cache prune --cache-dir "$D" --older-than 5x >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--older-than" "$tmp/e" && ok cache_dir_prune_bad_age || fail cache_dir_prune_bad_age "rc=$rc"

# --- three processes past --cache-max-bytes -------------------------------------------------
# One 64-token chunk of this model is ~1.5 MB; each process warms a prompt of
# 5-6 chunks (2 without KVSTITCH_TEST_QUICK); the bound holds less than all.
D="$tmp/bound"
mkdir -p "$D"
BOUND=$((12 << 20))
n_each=2; [ $QUICK = 1 ] && n_each=1
pids=()
for w in 0 1 2; do
    files=(); for ((k = 0; k < n_each; k++)); do files+=(-f "$tmp/p$(( (w * n_each + k) % 6 )).txt"); done
    "$CLI" warm -m "$MODEL" --cache-dir "$D" --cache-max-bytes $BOUND --threads 1 --json "${files[@]}" \
        >"$tmp/bw$w.json" 2>"$tmp/be$w" &
    pids+=($!)
done
bad=0; for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
total=$(kvc_bytes "$D")
[ $bad -eq 0 ] && [ "$total" -le $BOUND ] && [ "$total" -gt 0 ] && ok cache_dir_bound_three_processes \
    || fail cache_dir_bound_three_processes "bad=$bad total=$total bound=$BOUND $(cat "$tmp"/be*)"
T "$CLI" cache stats --cache-dir "$D" --verify --json >"$tmp/s.json" 2>"$tmp/e"
[ "$(j "$tmp/s.json" 'd["damaged"] == 0 and d["unreadable"] == 0 and d["entries"] > 0')" = True ] \
    && ok cache_dir_bound_entries_verify || fail cache_dir_bound_entries_verify "$(cat "$tmp/s.json" "$tmp/e")"
n_gen=2; [ $QUICK = 1 ] && n_gen=1
same=0
for ((k = 0; k < n_gen; k++)); do
    f="$tmp/p$(( (k * 2) % 6 )).txt"
    T "$CLI" generate -m "$MODEL" --cache-dir "$D" --cache-max-bytes $BOUND --threads 2 -n 4 --json -f "$f" >"$tmp/gw.json" 2>"$tmp/e"
    T "$CLI" generate -m "$MODEL" --threads 2 -n 4 --json -f "$f" >"$tmp/gc.json" 2>>"$tmp/e"
    [ "$(j "$tmp/gw.json" 'd["first_logits_sha256"], d["tokens"]')" = "$(j "$tmp/gc.json" 'd["first_logits_sha256"], d["tokens"]')" ] \
        && same=$((same + 1))
done
[ $same -eq $n_gen ] && ok cache_dir_bound_outputs_bit_identical || fail cache_dir_bound_outputs_bit_identical "$same of $n_gen"
[ "$(kvc_bytes "$D")" -le $BOUND ] && ok cache_dir_bound_after_generate || fail cache_dir_bound_after_generate "$(kvc_bytes "$D")"
T "$CLI" cache prune --cache-dir "$D" --max-bytes 4M --json >"$tmp/pr.json" 2>"$tmp/e"
[ "$(j "$tmp/pr.json" 'd["bytes"] <= 4 << 20 and d["removed"] > 0')" = True ] && [ "$(kvc_bytes "$D")" -le $((4 << 20)) ] \
    && ok cache_dir_prune_max_bytes || fail cache_dir_prune_max_bytes "$(cat "$tmp/pr.json" "$tmp/e")"

# --- prune by a user who may not remove the entries -----------------------------------------
# A directory this process cannot write (another user's, or read-only): prune
# must say so and fail, and report the entries that are still there, never
# count a refused unlink as an entry removed (it had printed "0 entry files
# remain" with all of them in place). Root removes anything, so the prune
# runs as nobody (setpriv); skipped where that is not possible.
ro_parent=$(mktemp -d); chmod 755 "$ro_parent"; R="$ro_parent/ro"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && cp -a "$D" "$R" && chmod -R a+rX "$R" && chmod 555 "$R" \
    && setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$CLI" 2>/dev/null; then
    n_before=$(kvc_count "$R")
    T setpriv --reuid=65534 --regid=65534 --clear-groups "$CLI" cache prune --cache-dir "$R" --max-bytes 1K \
        >"$tmp/pro.out" 2>"$tmp/e"; rc=$?
    [ $rc -eq 1 ] && grep -q "refused" "$tmp/e" && grep -q "Permission denied" "$tmp/e" \
        && grep -q "$n_before entry files" "$tmp/pro.out" \
        && [ "$n_before" -gt 0 ] && [ "$(kvc_count "$R")" -eq "$n_before" ] && ok cache_dir_prune_refused_unlink \
        || fail cache_dir_prune_refused_unlink "rc=$rc n=$n_before/$(kvc_count "$R") $(cat "$tmp/pro.out" "$tmp/e")"
else
    echo "skip cache_dir_prune_refused_unlink (needs root, setpriv and a CLI nobody may run)"
fi
chmod -R u+w "$ro_parent"; rm -rf "$ro_parent"

# --- a writer killed before its weights memo's rename ---------------------------------------
# Its temporary file is a writer's like any entry's: counted as one, removed
# by prune once its writer is gone (".weights.<pid>.<address>.tmp" had been
# "other", left for good). strace injects the kill at the first rename.
if command -v strace >/dev/null; then
    D="$tmp/memo"
    (strace -f -o /dev/null -e inject=rename:signal=KILL:when=1 \
        "$CLI" generate -m "$MODEL" -p hello -n 1 --threads 2 --cache-dir "$D") >/dev/null 2>&1
    T "$CLI" cache stats --cache-dir "$D" --json >"$tmp/memo.json" 2>"$tmp/e"
    [ "$(j "$tmp/memo.json" 'd["tmp_files"], d["other_files"]')" = "(1, 0)" ] && ok cache_dir_memo_tmp_counted \
        || fail cache_dir_memo_tmp_counted "$(cat "$tmp/memo.json" "$tmp/e"; ls -a "$D")"
    T "$CLI" cache prune --cache-dir "$D" >/dev/null 2>"$tmp/e"
    [ -z "$(find "$D" -maxdepth 1 -name '*.tmp')" ] && ok cache_dir_memo_tmp_pruned \
        || fail cache_dir_memo_tmp_pruned "$(ls -a "$D"; cat "$tmp/e")"
else
    echo "skip cache_dir_memo_tmp (needs strace)"
fi

# --- a long chain of entries --------------------------------------------------------------
# stats, ls and prune walk each entry's parents down to position 0; past 64
# links the walk had gone round forever (a long prompt at the default chunk
# size: 4,200 tokens; here 100 chunks of one token).
D="$tmp/chain"
python3 -c "print(' '.join(['apple'] * 100))" >"$tmp/chain.txt"
T "$CLI" generate -m "$MODEL" -f "$tmp/chain.txt" -n 1 --threads 2 --cache-dir "$D" --chunk-tokens 1 >/dev/null 2>"$tmp/e" \
    || fail cache_dir_chain_setup "$(cat "$tmp/e")"
n_chain=$(kvc_count "$D")
for verb in stats ls prune; do
    timeout 60 "$CLI" cache $verb --cache-dir "$D" --json >"$tmp/chain.json" 2>"$tmp/e"; rc=$?
    [ $rc -eq 0 ] && ok "cache_dir_chain_${verb}_ends" || fail "cache_dir_chain_${verb}_ends" "rc=$rc $(cat "$tmp/e")"
done
timeout 60 "$CLI" cache stats --cache-dir "$D" --json >"$tmp/chain.json" 2>"$tmp/e"
[ "$n_chain" -gt 64 ] && [ "$(j "$tmp/chain.json" 'd["unreachable"]')" = 0 ] && ok cache_dir_chain_all_reachable \
    || fail cache_dir_chain_all_reachable "$n_chain entries, $(cat "$tmp/chain.json" "$tmp/e")"
exit $status
