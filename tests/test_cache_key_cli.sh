#!/usr/bin/env bash
# --cache-key-file through the CLI (README "Trust"): a keyed warm run is
# bit-identical to a cold run without any cache; keyed and keyless runs on
# one directory (and a run with another key) each reuse their own entries
# only and remove none of the others'; a missing, empty or short key file is refused naming
# the file (exit != 0, the key never printed). Prints "ok NAME" / "FAIL NAME".
# (Forged entries and values: tests/test_kv_disk.c, tests/test_redis_store.c.)
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
T() { timeout 300 "$@"; }
kvc_count() { find "$1" -maxdepth 1 -name '*.kvc' -type f | wc -l; }

prompt="The cache key test: $(seq 1 70 | tr '\n' ' ')"
printf '  a-secret-cache-key-0123456789\n' > "$tmp/key"
printf 'another-secret-key-9876543210' > "$tmp/key2"
gen() { T "$CLI" generate -m "$MODEL" -p "$prompt" -n 6 --json "$@"; }
same() { [ "$(j "$1" "d['tokens'], d['first_logits_sha256']")" = "$(j "$2" "d['tokens'], d['first_logits_sha256']")" ]; }

gen > "$tmp/cold.json" || fail cold "rc $?"
d="$tmp/d"
gen --cache-dir "$d" --cache-key-file "$tmp/key" > "$tmp/k1.json" || fail keyed_write "rc $?"
gen --cache-dir "$d" --cache-key-file "$tmp/key" > "$tmp/k2.json" || fail keyed_read "rc $?"
n_keyed=$(kvc_count "$d")
if same "$tmp/cold.json" "$tmp/k2.json" && [ "$(j "$tmp/k2.json" "d['reused_tokens'] > 0")" = True ] && [ "$n_keyed" -gt 0 ]; then
    ok cache_key_warm_run_is_cold_output
else
    fail cache_key_warm_run_is_cold_output "reused $(j "$tmp/k2.json" "d['reused_tokens']"), $n_keyed entries"
fi

# keyless and another key on the same directory: nothing reused across, nothing removed
gen --cache-dir "$d" > "$tmp/n1.json"
gen --cache-dir "$d" --cache-key-file "$tmp/key2" > "$tmp/o1.json"
gen --cache-dir "$d" > "$tmp/n2.json"
gen --cache-dir "$d" --cache-key-file "$tmp/key" > "$tmp/k3.json"
if [ "$(j "$tmp/n1.json" "d['reused_tokens']")" = 0 ] && [ "$(j "$tmp/o1.json" "d['reused_tokens']")" = 0 ] &&
   [ "$(j "$tmp/n2.json" "d['reused_tokens'] > 0")" = True ] && [ "$(j "$tmp/k3.json" "d['reused_tokens'] > 0")" = True ] &&
   [ "$(kvc_count "$d")" = $((3 * n_keyed)) ] && same "$tmp/cold.json" "$tmp/n2.json" && same "$tmp/cold.json" "$tmp/k3.json"; then
    ok cache_key_keyed_and_keyless_coexist
else
    fail cache_key_keyed_and_keyless_coexist "reused $(j "$tmp/n1.json" "d['reused_tokens']") $(j "$tmp/o1.json" "d['reused_tokens']") $(j "$tmp/n2.json" "d['reused_tokens']") $(j "$tmp/k3.json" "d['reused_tokens']"), $(kvc_count "$d") files for $n_keyed per cache"
fi

# key file errors: named, exit != 0, nothing written, the key never echoed
: > "$tmp/empty"
printf '0123456789abcde\n' > "$tmp/short"
for case in missing empty short; do
    out=$(gen --cache-dir "$tmp/e" --cache-key-file "$tmp/$case" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -q "$tmp/$case" <<< "$out" && ! grep -q 0123456789abcde <<< "$out" &&
       [ "$(kvc_count "$tmp/e" 2>/dev/null || echo 0)" = 0 ]; then
        ok "cache_key_file_$case"
    else
        fail "cache_key_file_$case" "rc $rc: $out"
    fi
done
out=$(T "$CLI" generate -m "$MODEL" -p "x" -n 1 --cache-key-file "$tmp/key" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q -- "--cache-key-file" <<< "$out"; then ok cache_key_file_needs_a_cache; else fail cache_key_file_needs_a_cache "rc $rc: $out"; fi
exit $status
