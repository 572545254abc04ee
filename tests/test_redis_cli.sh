#!/usr/bin/env bash
# The Redis tier end to end through fresh CLI processes: process A warms a
# ~4,000-token prompt into Redis; process B (empty RAM, no cache dir) serves
# a 95%-overlap prompt from Redis, bit-identical to a cold run (same
# first_logits_sha256 and tokens). The same on a 3-master + 3-replica Redis
# Cluster. Then outages through the CLI (Redis down, DEBUG SLEEP): output
# equal to cold, exit 0. cache stats/ls/clear on Redis (SCAN on kvs:*, other
# keys untouched). Every redis-server is started here on a free loopback
# port (maxmemory + allkeys-lru, as README recommends) and killed on exit.
# KVSTITCH_TEST_QUICK=1: ~1,000 tokens instead of ~4,000.
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
SHARED="${KVSTITCH_SHARED:-../shared}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
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
# start_redis NAME [extra args]: prints the port; the server's pid joins pids
start_redis() {
    local name=$1; shift
    local port dir=$tmp/redis-$name
    mkdir -p "$dir"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$((20000 + RANDOM % 20000))
        port_free "$port" && port_free $((port + 10000)) || continue
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
            --logfile "$dir/log" --maxmemory 512mb --maxmemory-policy allkeys-lru \
            --enable-debug-command yes "$@" >/dev/null 2>&1 &
        echo $! >"$dir/pid"
        for _ in $(seq 50); do
            redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && { echo "$port"; return 0; }
            sleep 0.1
        done
        kill -9 "$(cat "$dir/pid")" 2>/dev/null
    done
    return 1
}

quick=0; [ -n "${KVSTITCH_TEST_QUICK:-}" ] && [ "${KVSTITCH_TEST_QUICK}" != 0 ] && quick=1
chars=18000; [ $quick = 1 ] && chars=4500   # ~4,000 / ~1,000 tokens of prose
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
PY

# The cold reference: no cache at all.
gen -f "$tmp/b.txt" >"$tmp/cold.json" 2>"$tmp/e" || fail redis_cli_cold "$(cat "$tmp/e")"
cold_sha=$(j "$tmp/cold.json" 'd["first_logits_sha256"]'); cold_tok=$(j "$tmp/cold.json" 'd["tokens"]')
n_prompt=$(j "$tmp/cold.json" 'd["prompt_tokens"]')

# same_as_cold NAME FILE MIN_CACHED: bits equal to cold, at least MIN_CACHED tokens from the cache
same_as_cold() {
    local sha tok cached
    sha=$(j "$2" 'd["first_logits_sha256"]') tok=$(j "$2" 'd["tokens"]') cached=$(j "$2" 'd["cached_tokens"]')
    if [ "$sha" = "$cold_sha" ] && [ "$tok" = "$cold_tok" ] && [ "$cached" -ge "$3" ]; then ok "$1"
    else fail "$1" "sha $sha vs $cold_sha, tokens $tok vs $cold_tok, cached $cached (want >= $3)"; fi
}

# --- single node -------------------------------------------------------------------
P=$(start_redis single) || { fail redis_cli_start "redis-server did not start"; exit 1; }
pids+=("$(cat "$tmp/redis-single/pid")")
URL="redis://127.0.0.1:$P"
redis-cli -p "$P" set user:keep 1 >/dev/null
# Hits are checked with a generous per-operation timeout: on a loaded machine a
# 50 ms deadline may expire (then the chunks are computed: correct, but not a hit).
timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis "$URL" --redis-timeout 2000 --json -f "$tmp/a.txt" >"$tmp/wa.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/wa.json" 'd["prompts"][0]["chunks_stored"] > 10')" = True ] \
    && ok redis_cli_warm || fail redis_cli_warm "$(cat "$tmp/wa.json" "$tmp/e")"
gen --redis "$URL" --redis-timeout 2000 -f "$tmp/b.txt" --no-store >"$tmp/b.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_b_from_redis_equals_cold "$tmp/b.json" $((n_prompt * 85 / 100)) \
    || fail redis_cli_b_from_redis_equals_cold "$(cat "$tmp/e")"

"$CLI" cache stats --redis "$URL" --json >"$tmp/s.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/s.json" 'd["entries"] > 10 and d["models"] == 1 and d["damaged"] == 0')" = True ] \
    && ok redis_cli_cache_stats || fail redis_cli_cache_stats "$(cat "$tmp/s.json" "$tmp/e")"
"$CLI" cache ls --redis "$URL" -m "$MODEL" --json >"$tmp/ls.json" 2>"$tmp/e" \
    && [ "$(j "$tmp/ls.json" 'len(d["entries"]) == '"$(j "$tmp/s.json" 'd["entries"]')"' and d["entries"][0]["pos0"] == 0 and len(d["entries"][0]["text"]) > 0')" = True ] \
    && ok redis_cli_cache_ls || fail redis_cli_cache_ls "$(head -c 600 "$tmp/ls.json") $(cat "$tmp/e")"

# --- outages through the CLI: output equals cold, exit 0 --------------------------------
dead=$((P + 1)); while ! port_free $dead; do dead=$((dead + 1)); done
gen --redis "redis://127.0.0.1:$dead" -f "$tmp/b.txt" --no-store >"$tmp/down.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_down_equals_cold "$tmp/down.json" 0 || fail redis_cli_down_equals_cold "$(cat "$tmp/e")"
( redis-cli -p "$P" debug sleep 3 >/dev/null 2>&1 & )
sleep 0.2
gen --redis "$URL" -f "$tmp/b.txt" --no-store >"$tmp/slow.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_slow_equals_cold "$tmp/slow.json" 0 || fail redis_cli_slow_equals_cold "$(cat "$tmp/e")"
sleep 3

# a damaged value in place of one chunk: the reuse ends there, output still equals cold
key=$(redis-cli -p "$P" --scan --pattern 'kvs:*' | head -1)
redis-cli -p "$P" setrange "$key" 600 XXXX >/dev/null
gen --redis "$URL" -f "$tmp/b.txt" --no-store >"$tmp/bad.json" 2>"$tmp/e" \
    && same_as_cold redis_cli_damaged_value_equals_cold "$tmp/bad.json" 0 || fail redis_cli_damaged_value_equals_cold "$(cat "$tmp/e")"

"$CLI" cache clear --redis "$URL" --json >"$tmp/c.json" 2>"$tmp/e" \
    && [ "$(redis-cli -p "$P" --scan --pattern 'kvs:*' | wc -l)" = 0 ] \
    && [ "$(redis-cli -p "$P" get user:keep)" = 1 ] \
    && ok redis_cli_cache_clear_only_ours || fail redis_cli_cache_clear_only_ours "$(cat "$tmp/c.json" "$tmp/e")"

# --- Redis Cluster: 3 masters + 3 replicas --------------------------------------------
ports=()
for i in 1 2 3 4 5 6; do
    p=$(start_redis "c$i" --cluster-enabled yes --cluster-config-file "$tmp/redis-c$i/nodes.conf" \
        --cluster-node-timeout 1000) || { fail redis_cli_cluster_start "node $i"; break; }
    pids+=("$(cat "$tmp/redis-c$i/pid")")
    ports+=("$p")
done
if [ ${#ports[@]} = 6 ]; then
    addrs=$(printf '127.0.0.1:%s ' "${ports[@]}")
    # shellcheck disable=SC2086
    timeout 60 redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes >"$tmp/cc" 2>&1 \
        || fail redis_cli_cluster_create "$(tail -5 "$tmp/cc")"
    for _ in $(seq 100); do
        redis-cli -p "${ports[0]}" cluster info | grep -q cluster_state:ok && break
        sleep 0.2
    done
    SEEDS="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
    timeout 600 "$CLI" warm -m "$MODEL" --threads 2 --redis-cluster "$SEEDS" --redis-timeout 2000 -f "$tmp/a.txt" >/dev/null 2>"$tmp/e" \
        || fail redis_cli_cluster_warm "$(cat "$tmp/e")"
    gen --redis-cluster "$SEEDS" --redis-timeout 2000 -f "$tmp/b.txt" --no-store >"$tmp/cb.json" 2>"$tmp/e" \
        && same_as_cold redis_cli_cluster_b_equals_cold "$tmp/cb.json" $((n_prompt * 85 / 100)) \
        || fail redis_cli_cluster_b_equals_cold "$(cat "$tmp/e")"
    "$CLI" cache stats --redis-cluster "$SEEDS" --json >"$tmp/cs.json" 2>"$tmp/e" \
        && [ "$(j "$tmp/cs.json" 'd["entries"] > 10')" = True ] && ok redis_cli_cluster_stats \
        || fail redis_cli_cluster_stats "$(cat "$tmp/cs.json" "$tmp/e")"
    "$CLI" cache clear --redis-cluster "$SEEDS" >/dev/null 2>"$tmp/e" \
        && [ "$("$CLI" cache stats --redis-cluster "$SEEDS" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["entries"])')" = 0 ] \
        && ok redis_cli_cluster_clear || fail redis_cli_cluster_clear "$(cat "$tmp/e")"
fi
exit $status
