#!/usr/bin/env bash
# The Redis tier end to end through fresh CLI processes: process A warms a
# ~4,000-token prompt into Redis; process B (empty RAM, no cache dir) serves
# a 95%-overlap prompt from Redis, bit-identical to a cold run (same
# first_logits_sha256 and tokens), with the default per-operation timeout.
# The same on a 3-master + 3-replica Redis Cluster. Then outages through the
# CLI (Redis down, DEBUG SLEEP, a damaged value): output equal to cold, exit
# 0. cache stats/ls/clear on Redis (SCAN on kvs:*, other keys untouched; -m: the model's
# entries by KV type). A prompt's partial tail chunk serves a prompt that extends it; documents,
# plain and baked, come back from Redis by key in a fresh process.
# Every redis-server is started here on a free loopback port (maxmemory +
# allkeys-lru, as README recommends) and killed on exit.
#
# Where the time goes is the model's prefill, so the script keeps it to what
# the checks need: three ~4,000-token prefills (cold B, A into Redis, A into
# the cluster) and small ones; the outage checks run on a ~370-token prompt C
# in its own database (they compare with C's cold run; their length does not
# matter to them), and the cluster starts in the background meanwhile.
# Servers are waited for by readiness (our pid answering), never by sleeps.
# KVSTITCH_TEST_QUICK=1: ~1,000 tokens instead of ~4,000.
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d)
cluster_job=
cleanup() {
    [ -n "$cluster_job" ] && kill "$cluster_job" 2>/dev/null && wait "$cluster_job" 2>/dev/null
    for f in "$tmp"/redis-*/pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
gen() { timeout 600 "$CLI" generate -m "$MODEL" --threads 2 -n 4 --json "$@"; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# start_redis NAME LOW [extra args]: prints the port, from [LOW, LOW + 10000)
# (single nodes and cluster nodes start at once from disjoint ranges); the
# pid is in $tmp/redis-NAME/pid. Ready when INFO shows our own pid (not a
# server that took the port first).
start_redis() {
    local name=$1 low=$2; shift 2
    local port pid dir=$tmp/redis-$name
    mkdir -p "$dir"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$((low + RANDOM % 10000))
        port_free "$port" && port_free $((port + 10000)) || continue
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
            --logfile "$dir/log" --maxmemory 512mb --maxmemory-policy allkeys-lru \
            --enable-debug-command yes "$@" >/dev/null 2>&1 &
        pid=$!
        echo "$pid" >"$dir/pid"
        for _ in $(seq 200); do
            redis-cli -p "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid" \
                && { echo "$port"; return 0; }
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null
    done
    return 1
}

# start_cluster: six cluster-mode nodes joined as 3 masters + 3 replicas;
# writes their ports to $tmp/cluster.ports when every node says
# cluster_state:ok, else the reason to $tmp/cluster.err. Run in the background.
start_cluster() {
    local ports=() p i
    for i in 1 2 3 4 5 6; do
        p=$(start_redis "c$i" 30000 --cluster-enabled yes --cluster-config-file "$tmp/redis-c$i/nodes.conf" \
            --cluster-node-timeout 1000) || { echo "node $i did not start" >"$tmp/cluster.err"; return 1; }
        ports+=("$p")
    done
    # shellcheck disable=SC2046
    timeout 60 redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-replicas 1 \
        --cluster-yes >"$tmp/cc" 2>&1 || { tail -5 "$tmp/cc" >"$tmp/cluster.err"; return 1; }
    for _ in $(seq 300); do
        for p in "${ports[@]}"; do redis-cli -p "$p" cluster info | grep -q cluster_state:ok || continue 2; done
        echo "${ports[*]}" >"$tmp/cluster.ports"
        return 0
    done
    echo "cluster_state not ok after 60 s" >"$tmp/cluster.err"
    return 1
}

quick=0; [ -n "${KVSTITCH_TEST_QUICK:-}" ] && [ "${KVSTITCH_TEST_QUICK}" != 0 ] && quick=1
chars=15500; [ $quick = 1 ] && chars=4500   # ~4,000 / ~1,000 tokens of prose
python3 - "$SHARED/data/musique_dev.json" "$tmp" "$chars" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))
text = "\n\n".join(c["title"] + "\n" + c["text"] for it in items[:40] for c in it["ctxs"])
n = int(sys.argv[3])
a = text[:n]
open(sys.argv[2] + "/a.txt", "w").write(a)
# B: A's first 95% (cut at a space), then other text
cut = a.rfind(" ", 0, n * 95 // 100)
open(sys.argv[2] + "/b.txt", "w").write(a[:cut] + " Meanwhile, in another story entirely, " + text[n * 3 : n * 3 + n // 20])
# C: ~370 tokens for the outage checks (six grid chunks); C2 extends it
c = text[60000:61700]
open(sys.argv[2] + "/c.txt", "w").write(c)
open(sys.argv[2] + "/c2.txt", "w").write(c + "\n\nQuestion: who is named above?")
PY

start_cluster & cluster_job=$!

# The cold references: no cache at all.
gen -f "$tmp/b.txt" >"$tmp/cold.json" 2>"$tmp/e" || fail redis_cli_cold "$(cat "$tmp/e")"
gen -f "$tmp/c.txt" >"$tmp/cold_c.json" 2>"$tmp/e" || fail redis_cli_cold_c "$(cat "$tmp/e")"
n_prompt=$(j "$tmp/cold.json" 'd["prompt_tokens"]')

# same_as_cold NAME FILE MIN_CACHED [COLD_JSON]: bits equal to the cold run
# (of B by default), at least MIN_CACHED tokens from the cache
same_as_cold() {
    local verdict
    verdict=$(python3 - "$2" "${4:-$tmp/cold.json}" "$3" <<'PY'
import json, sys
d, c, least = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
same = d["first_logits_sha256"] == c["first_logits_sha256"] and d["tokens"] == c["tokens"]
print("ok" if same and d["cached_tokens"] >= least else
      f'sha {d["first_logits_sha256"]} vs {c["first_logits_sha256"]}, tokens {d["tokens"]} vs {c["tokens"]}, '
      f'cached {d["cached_tokens"]} (want >= {least})')
PY
)
    if [ "$verdict" = ok ]; then ok "$1"; else fail "$1" "$verdict"; fi
}

# --- single node -------------------------------------------------------------------
# The first n keys of db $1 that hold chunks (a value starting "KVSR"), not
# partial-chunk markers ("KVSM").
chunk_keys() {
    local db=$1 n=$2 k
    redis-cli -p "$P" -n "$db" --scan --pattern 'kvs:*' | grep -E '^kvs:[0-9a-f]{16}:[0-9a-f]{64}$' |
        while read -r k; do
            [ "$(redis-cli -p "$P" -n "$db" getrange "$k" 0 3)" = KVSR ] && echo "$k"
        done | head -n "$n"
}

# common_tokens F1 F2: how many leading tokens the two prompt files share
common_tokens() {
    for f in "$1" "$2"; do "$CLI" tokenize -m "$MODEL" -f "$f"; done | python3 -c 'import sys
a, b = (l.split() for l in sys.stdin)
k = 0
while k < min(len(a), len(b)) and a[k] == b[k]: k += 1
print(k)'
}
P=$(start_redis single 20000) || { fail redis_cli_start "redis-server did not start"; exit 1; }
URL="redis://127.0.0.1:$P"
redis-cli -p "$P" set user:keep 1 >/dev/null
# The warm is the setup (its writes get a generous timeout); B's reads use
# the default one, whose budget grows with the bytes read (redis_conn.h).
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL" --redis-timeout 2000 --json -f "$tmp/a.txt" >"$tmp/wa.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/wa.json" 'd["prompts"][0]["chunks_stored"] > 10')" = True ] \
    && ok redis_cli_warm || fail redis_cli_warm "$(cat "$tmp/wa.json" "$tmp/e")"
# B leaves A mid-chunk: every token they share comes from Redis (the chunk B
# leaves A in through its partial-chunk marker: B had lost it)
k_ab=$(common_tokens "$tmp/a.txt" "$tmp/b.txt")
gen --redis "$URL" -f "$tmp/b.txt" --no-store >"$tmp/b.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_b_from_redis_equals_cold "$tmp/b.json" "$k_ab" \
    || fail redis_cli_b_from_redis_equals_cold "$(cat "$tmp/e")"

"$CLI" cache stats --redis "$URL" --json >"$tmp/s.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/s.json" 'd["entries"] > 10 and d["models"] == 1 and d["damaged"] == 0')" = True ] \
    && ok redis_cli_cache_stats || fail redis_cli_cache_stats "$(cat "$tmp/s.json" "$tmp/e")"
"$CLI" cache ls --redis "$URL" -m "$MODEL" --json >"$tmp/ls.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/ls.json" 'len(d["entries"]) == '"$(j "$tmp/s.json" 'd["entries"]')"' and d["entries"][0]["pos0"] == 0 and len(d["entries"][0]["text"]) > 0')" = True ] \
    && ok redis_cli_cache_ls || fail redis_cli_cache_ls "$(head -c 600 "$tmp/ls.json") $(cat "$tmp/e")"

# One model in two KV types (C warmed as q8 beside A's f16): stats -m breaks the model's entries
# down by KV type (it had shown no model view on Redis at all), --kv-type picks the view and the
# chunks ls -m lists.
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL" --redis-timeout 2000 --kv-type q8 --json -f "$tmp/c.txt" >"$tmp/wq.json" 2>"$tmp/e" \
    || fail redis_cli_cache_stats_by_kv_type "q8 warm: $(cat "$tmp/e")"
"$CLI" cache stats --redis "$URL" -m "$MODEL" --json >"$tmp/sk.json" 2>"$tmp/e"
"$CLI" cache stats --redis "$URL" -m "$MODEL" --kv-type q8 --json >"$tmp/skq.json" 2>>"$tmp/e"
"$CLI" cache ls --redis "$URL" -m "$MODEL" --kv-type q8 --json >"$tmp/lsq.json" 2>>"$tmp/e"
"$CLI" cache stats --redis "$URL" -m "$MODEL" >"$tmp/sk.txt" 2>>"$tmp/e"
python3 - "$tmp/s.json" "$tmp/sk.json" "$tmp/skq.json" "$tmp/lsq.json" "$tmp/wq.json" <<'PY' \
    && grep -q "by KV type: *f16 [0-9]* entries (.*), q8 [0-9]* entries" "$tmp/sk.txt" \
    && ok redis_cli_cache_stats_by_kv_type || fail redis_cli_cache_stats_by_kv_type "$(cat "$tmp/sk.json" "$tmp/skq.json" "$tmp/sk.txt" "$tmp/e")"
import json, sys
before, s, sq, ls, w = (json.load(open(f)) for f in sys.argv[1:6])
n16, n_q8 = before["entries"], w["prompts"][0]["chunks_stored"]
m, q = s["model"], sq["model"]
k = m["kv_types"]
assert n_q8 > 0 and s["entries"] == n16 + n_q8 and s["models"] == 2, (s, n16, n_q8)
assert m["kv_type"] == "f16" and m["fingerprint"] == k["f16"]["fingerprint"] and m["entries"] == k["f16"]["entries"] == n16, m
assert k["q8"]["entries"] == n_q8 and k["f32"]["entries"] == 0 and m["other_models"] == 0, m
assert q["kv_type"] == "q8" and q["fingerprint"] == k["q8"]["fingerprint"] != m["fingerprint"] and q["entries"] == n_q8, q
e = ls["entries"]
assert len(e) == n_q8 and all(x["kv_type"] == "q8" and x["fingerprint"] == q["fingerprint"] for x in e), e[:2]
assert sum(x["kv_bytes"] for x in e) == k["q8"]["kv_bytes"], k
PY

# --redis-codec: C warmed with shuffle-zstd into db 5 (its values say codec 2 and are smaller
# than raw's in db 1 below), read back by a process that writes raw: the cold bits
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL/5" --redis-timeout 2000 --redis-codec shuffle-zstd \
    --json -f "$tmp/c.txt" >"$tmp/wz.json" 2>"$tmp/e" || fail redis_cli_codec "warm: $(cat "$tmp/e")"
kz=$(chunk_keys 5 1)
codec=$(redis-cli -p "$P" -n 5 --raw getrange "$kz" 8 8 | head -c 1 | od -An -tu1 | tr -d ' \n')
gen --redis "$URL/5" -f "$tmp/c.txt" --no-store >"$tmp/cz.json" 2>"$tmp/e" \
    && [ "$codec" = 2 ] \
    && same_as_cold redis_cli_codec "$tmp/cz.json" 320 "$tmp/cold_c.json" \
    || fail redis_cli_codec "codec byte '$codec' (want 2); $(cat "$tmp/e")"
for bad in "--redis-codec lz4" "--redis-codec"; do
    # shellcheck disable=SC2086
    "$CLI" warm -m "$MODEL" --redis "$URL/5" $bad -f "$tmp/c.txt" >/dev/null 2>"$tmp/e"
    rc=$?
    [ $rc = 2 ] && grep -q -- "--redis-codec" "$tmp/e" && ok "redis_cli_codec_refused: $bad" \
        || fail redis_cli_codec_refused "$bad: exit $rc, $(cat "$tmp/e")"
done
"$CLI" warm -m "$MODEL" --redis-codec zstd -f "$tmp/c.txt" >/dev/null 2>"$tmp/e"
rc=$?
[ $rc = 2 ] && grep -q -- "--redis" "$tmp/e" && ok redis_cli_codec_needs_redis \
    || fail redis_cli_codec_needs_redis "exit $rc, $(cat "$tmp/e")"

# --- outages through the CLI, on prompt C in db 1: output equals cold, exit 0 ------------
URL1="$URL/1"
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL1" --redis-timeout 2000 --json -f "$tmp/c.txt" >"$tmp/wc.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/wc.json" 'd["prompts"][0]["chunks_stored"] >= 4 and d["redis_write_errors"] + d["redis_dropped"] == 0')" = True ] \
    && ! grep -q 'not written to Redis' "$tmp/e" \
    && ok redis_cli_warm_c || fail redis_cli_warm_c "$(cat "$tmp/wc.json" "$tmp/e")"
# C ends off the grid: its partial tail is in Redis too, and a fresh process serves it to C2,
# which extends C, up to their last common token (a lookup asks Redis for C2's grid chunks, whose
# keys never name C's shorter tail: the tail had been written and never read, C2 got 320 tokens)
k=$(common_tokens "$tmp/c.txt" "$tmp/c2.txt")
gen -f "$tmp/c2.txt" >"$tmp/cold_c2.json" 2>"$tmp/e" || fail redis_cli_partial_tail_served "$(cat "$tmp/e")"
if [ "$((k % 64))" -ne 0 ] && [ "$(j "$tmp/wc.json" 'd["prompts"][0]["partial_tail_tokens"]')" -gt 0 ]; then
    gen --redis "$URL1" -f "$tmp/c2.txt" --no-store >"$tmp/c2.json" 2>"$tmp/e" \
        && same_as_cold redis_cli_partial_tail_served "$tmp/c2.json" "$k" "$tmp/cold_c2.json" \
        || fail redis_cli_partial_tail_served "$(cat "$tmp/e")"
else
    fail redis_cli_partial_tail_served "C and C2 share $k tokens: not inside a tail, the check would not check it"
fi
# Documents come back from Redis by key in a fresh process (db 2): a doc chunk has no grid key,
# and a process that had not scanned Redis computed every moved document again (a --cache-dir
# served them); now none is computed (the first one may come as the prompt's prefix), with
# the bits of the first run.
python3 - "$tmp" <<'PY'
import sys
t = open(sys.argv[1] + "/c.txt").read()
for i in range(3):
    open("%s/doc%d.txt" % (sys.argv[1], i), "w").write(t[i * 400:(i + 1) * 400])
PY
docs=(--doc "$tmp/doc0.txt" --doc "$tmp/doc1.txt" --doc "$tmp/doc2.txt" -p "Who is named in these passages?")
gen --redis "$URL/2" --redis-timeout 2000 "${docs[@]}" >"$tmp/d1.json" 2>"$tmp/e" \
    && gen --redis "$URL/2" "${docs[@]}" >"$tmp/d2.json" 2>>"$tmp/e" \
    && [ "$(python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
print(a["docs_computed"] >= 2 and b["docs_computed"] == 0 and b["docs_hit"] >= a["docs_computed"] - 1
      and b["first_logits_sha256"] == a["first_logits_sha256"] and b["tokens"] == a["tokens"])' "$tmp/d1.json" "$tmp/d2.json")" = True ] \
    && ok redis_cli_documents_from_redis \
    || fail redis_cli_documents_from_redis "$(cat "$tmp/d1.json" "$tmp/d2.json" "$tmp/e" 2>/dev/null | head -c 1500)"
# reuse full (db 6): the prompt is stored with its segment borders ([0, k) [k, 64) ...), and a
# fresh process is served all of it but the live question's tail from Redis (it had been the
# system message alone: no grid key names a chunk after a border), with the cold bits.
gen --redis "$URL/6" --redis-timeout 2000 --reuse full "${docs[@]}" >"$tmp/f1.json" 2>"$tmp/e" \
    && gen --redis "$URL/6" --reuse full "${docs[@]}" >"$tmp/f2.json" 2>>"$tmp/e" \
    && [ "$(python3 -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
print(a["cached_tokens"] == 0 and b["cached_tokens"] >= b["prompt_tokens"] - 8
      and b["first_logits_sha256"] == a["first_logits_sha256"] and b["tokens"] == a["tokens"])' "$tmp/f1.json" "$tmp/f2.json")" = True ] \
    && ok redis_cli_full_documents_past_their_borders \
    || fail redis_cli_full_documents_past_their_borders "$(cat "$tmp/f1.json" "$tmp/f2.json" "$tmp/e" 2>/dev/null | head -c 1500)"
# Baked documents too (warm --doc-set in db 3, then another order in a fresh process): their
# chunks are keyed after a baked parent, no path; they had been found in RAM and a scanned
# directory only (0 baked from Redis). The bits equal those of the same two steps on a --cache-dir.
bake=(--doc "$tmp/doc0.txt" --doc "$tmp/doc1.txt" --doc "$tmp/doc2.txt" --doc-set)
order=(--doc "$tmp/doc2.txt" --doc "$tmp/doc0.txt" --doc "$tmp/doc1.txt" -p "Who is named in these passages?")
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL/3" --redis-timeout 2000 "${bake[@]}" >/dev/null 2>"$tmp/e" \
    && timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --cache-dir "$tmp/bakedir" "${bake[@]}" >/dev/null 2>>"$tmp/e" \
    && gen --redis "$URL/3" "${order[@]}" >"$tmp/b1.json" 2>>"$tmp/e" \
    && gen --cache-dir "$tmp/bakedir" "${order[@]}" >"$tmp/b2.json" 2>>"$tmp/e" \
    && [ "$(python3 -c 'import json, sys
r, d = (json.load(open(f)) for f in sys.argv[1:3])
print(r["docs_baked"] >= 2 and r["docs_baked"] == d["docs_baked"] and r["docs_computed"] == 0
      and r["first_logits_sha256"] == d["first_logits_sha256"] and r["tokens"] == d["tokens"])' "$tmp/b1.json" "$tmp/b2.json")" = True ] \
    && ok redis_cli_baked_documents_from_redis \
    || fail redis_cli_baked_documents_from_redis "$(cat "$tmp/b1.json" "$tmp/b2.json" "$tmp/e" 2>/dev/null | head -c 1500)"
dead=$((P + 1)); while ! port_free $dead; do dead=$((dead + 1)); done
# writes to a Redis that is down are said to be lost (they had been reported
# as stored, with no warning): JSON counts and a warning on stderr
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "redis://127.0.0.1:$dead" --json -f "$tmp/c.txt" >"$tmp/wd.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/wd.json" 'd["redis_write_errors"] + d["redis_dropped"] == d["prompts"][0]["chunks_stored"] > 0')" = True ] \
    && grep -q "chunks were not written to Redis" "$tmp/e" \
    && ok redis_cli_warm_down_says_not_written || fail redis_cli_warm_down_says_not_written "$(cat "$tmp/wd.json" "$tmp/e")"
gen --redis "redis://127.0.0.1:$dead" -f "$tmp/c.txt" --no-store >"$tmp/down.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_down_equals_cold "$tmp/down.json" 0 "$tmp/cold_c.json" \
    || fail redis_cli_down_equals_cold "$(cat "$tmp/e")"
# a long host name (241 bytes, valid) keeps the warning's reason whole (at
# 256 bytes it had been cut to "...a.b:6379: n")
long_host=$(python3 -c "print('a.' * 120 + 'b')")
gen --redis "redis://$long_host:6379" -f "$tmp/c.txt" --no-store >/dev/null 2>"$tmp/e"
grep -q -- "a\.b:6379: not reachable (" "$tmp/e" \
    && ok redis_cli_long_host_keeps_the_reason || fail redis_cli_long_host_keeps_the_reason "$(cat "$tmp/e")"
# a sleep longer than the read's budget (~0.5 s for C): the chunks are computed
( redis-cli -p "$P" debug sleep 2 >/dev/null 2>&1 & )
sleep 0.2
gen --redis "$URL1" -f "$tmp/c.txt" --no-store >"$tmp/slow.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_slow_equals_cold "$tmp/slow.json" 0 "$tmp/cold_c.json" \
    || fail redis_cli_slow_equals_cold "$(cat "$tmp/e")"
redis-cli -p "$P" ping >/dev/null   # answered when the sleep is over

# a damaged value in place of one chunk: the reuse ends there, output still equals cold
key=$(chunk_keys 1 1)
redis-cli -p "$P" -n 1 setrange "$key" 600 XXXX >/dev/null
gen --redis "$URL1" -f "$tmp/c.txt" --no-store >"$tmp/bad.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_damaged_value_equals_cold "$tmp/bad.json" 0 "$tmp/cold_c.json" \
    || fail redis_cli_damaged_value_equals_cold "$(cat "$tmp/e")"
# said on stderr, and removed by the read even with --no-store (it had stayed, silent)
grep -q "warning: 1 damaged values met in Redis" "$tmp/e" \
    && [ "$(redis-cli -p "$P" -n 1 exists "$key")" = 0 ] \
    && ok redis_cli_damaged_value_said_and_removed || fail redis_cli_damaged_value_said_and_removed "$(cat "$tmp/e")"

# a key of ours (kvs:<16 hex>:<64 hex>) holding another type (WRONGTYPE to
# STRLEN), and a value copied under another chunk's key: counted as damaged
# (the copy had listed as valid). Another application's keys that merely
# start with "kvs:" are not ours: neither counted nor cleared (clear had
# deleted them). The keys left are listed with sort -u: SCAN returns a key
# at least once, twice where the table is resized mid-scan (as after clear's
# deletions: a fresh clone's run once failed on the right two keys).
redis-cli -p "$P" rpush "kvs:0123456789abcdef:$(printf 'a%.0s' {1..64})" x >/dev/null
ours=$(chunk_keys 0 2)
read -r k0 k1 <<<"$(echo $ours)"
redis-cli -p "$P" copy "$k0" "${k1%????}ffff" >/dev/null
redis-cli -p "$P" set kvs:myapp:session x >/dev/null
redis-cli -p "$P" rpush kvs:queue job >/dev/null
"$CLI" cache stats --redis "$URL" --json >"$tmp/s2.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/s2.json" 'd["damaged"] == 2')" = True ] \
    && ok redis_cli_cache_stats_damaged_values || fail redis_cli_cache_stats_damaged_values "$(cat "$tmp/s2.json" "$tmp/e")"
"$CLI" cache clear --redis "$URL" --json >"$tmp/c.json" 2>"$tmp/e" \
    && [ "$(redis-cli -p "$P" --scan --pattern 'kvs:*' | sort -u | tr '\n' ' ')" = "kvs:myapp:session kvs:queue " ] \
    && [ "$(redis-cli -p "$P" get user:keep)" = 1 ] \
    && ok redis_cli_cache_clear_only_ours \
    || fail redis_cli_cache_clear_only_ours "$(cat "$tmp/c.json" "$tmp/e"); kvs:* left: $(redis-cli -p "$P" --scan \
        --pattern 'kvs:*' | sort -u | tr '\n' ' '); user:keep='$(redis-cli -p "$P" get user:keep)'; $(redis-cli -p "$P" \
        info stats | grep -E '^evicted_keys')"
# a connect the server refuses says why (it had said "not reachable")
"$CLI" cache stats --redis "$URL/99" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q "SELECT 99: ERR DB index is out of range" "$tmp/e" \
    && ok redis_cli_connect_error_says_why || fail redis_cli_connect_error_says_why "rc=$rc $(cat "$tmp/e")"
# ... and so do generate and warm, which had said only that chunks were not written: a wrong
# password (the server's words), and a server that wants one none was given for
PW=$(start_redis auth 20000) && redis-cli -p "$PW" config set requirepass s3cret >/dev/null \
    || fail redis_cli_generate_says_why "redis-server did not start"
gen --redis "redis://:wrong@127.0.0.1:$PW" -f "$tmp/c.txt" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && grep -q "warning: redis 127.0.0.1:$PW: AUTH: WRONGPASS" "$tmp/e" \
    && ok redis_cli_generate_says_why || fail redis_cli_generate_says_why "rc=$rc $(cat "$tmp/e")"
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "redis://127.0.0.1:$PW" -f "$tmp/c.txt" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc = 0 ] && grep -q "warning: redis: a .* was refused: .*\(NOAUTH\|unauthenticated\).*wants a password" "$tmp/e" \
    && ok redis_cli_warm_says_why || fail redis_cli_warm_says_why "rc=$rc $(cat "$tmp/e")"

# --- Redis Cluster: 3 masters + 3 replicas (started at the top) ----------------------
wait "$cluster_job"; cluster_job=
if [ -f "$tmp/cluster.ports" ]; then
    read -r -a ports <"$tmp/cluster.ports"
    SEEDS="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
    timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis-cluster "$SEEDS" --redis-timeout 2000 -f "$tmp/a.txt" >/dev/null 2>"$tmp/e" \
        || fail redis_cli_cluster_warm "$(cat "$tmp/e")"
    gen --redis-cluster "$SEEDS" -f "$tmp/b.txt" --no-store >"$tmp/cb.json" 2>"$tmp/e" \
        && same_as_cold redis_cli_cluster_b_equals_cold "$tmp/cb.json" $((n_prompt * 85 / 100)) \
        || fail redis_cli_cluster_b_equals_cold "$(cat "$tmp/e")"
    "$CLI" cache stats --redis-cluster "$SEEDS" --json >"$tmp/cs.json" 2>"$tmp/e" \
        && [ "$(j "$tmp/cs.json" 'd["entries"] > 10')" = True ] && ok redis_cli_cluster_stats \
        || fail redis_cli_cluster_stats "$(cat "$tmp/cs.json" "$tmp/e")"
    "$CLI" cache clear --redis-cluster "$SEEDS" >/dev/null 2>"$tmp/e" \
        && [ "$("$CLI" cache stats --redis-cluster "$SEEDS" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])')" = 0 ] \
        && ok redis_cli_cluster_clear || fail redis_cli_cluster_clear "$(cat "$tmp/e")"
else
    fail redis_cli_cluster_start "$(cat "$tmp/cluster.err" 2>/dev/null)"
fi
exit $status
