#!/usr/bin/env bash
# --cache-key-file through the CLI (README "Trust"): a keyed warm run is
# bit-identical to a cold run without any cache; keyed and keyless runs on
# one directory (and a run with another key) each reuse their own entries
# only and remove none of the others'; a missing, empty or short key file is refused naming
# the file (exit != 0, the key never printed). `cache stats -m --verify` with
# the key tells a forged entry (checksums recomputed, the MAC the old one) from
# a damaged one, among the model's entries of every KV type; `cache stats|ls -m --cache-key-file` on Redis (a real
# redis-server on a free loopback port) shows the keyed fingerprint's entries.
# Prints "ok NAME" / "FAIL NAME".
# (Forged entries and values: tests/test_kv_disk.c, tests/test_redis_store.c.)
set -u
CLI="${KVSTITCH_CLI:-build/kvstitch}"
MODEL="${KVSTITCH_MODEL:?}"
tmp=$(mktemp -d)
redis_pid=
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
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

# --verify with the key: each keyed entry read whole as a request reads it, its MAC checked.
# A forged entry passes every checksum (the directory-wide figures cannot tell it); only the
# MAC does, and it is reported apart from a checksum failure. Without the MAC check the
# forgery had been a good entry of this model's.
v="$tmp/v"
gen --cache-dir "$v" --cache-key-file "$tmp/key" >/dev/null || fail verify_setup "rc $?"
mapfile -t files < <(find "$v" -maxdepth 1 -name '*.kvc' -type f | sort)
python3 tests/forge_entry.py forge "${files[0]}" && python3 tests/forge_entry.py damage "${files[1]}" ||
    fail verify_setup "forge_entry.py failed"
T "$CLI" cache stats --cache-dir "$v" -m "$MODEL" --cache-key-file "$tmp/key" --verify --json >"$tmp/vk.json" 2>"$tmp/err"
want="('checksums', 1, True, 'checksums+mac', ${#files[@]} - 2, 1, 1)"
got=$(j "$tmp/vk.json" "(d['checked'], d['damaged'], d['model']['keyed'], d['model']['verify']['checked'], d['model']['verify']['entries'], d['model']['verify']['damaged'], d['model']['verify']['bad_mac'])" 2>&1)
if [ "$got" = "$(python3 -c "print($want)")" ]; then ok cache_key_verify_tells_forged_from_damaged
else fail cache_key_verify_tells_forged_from_damaged "got $got, want $want: $(cat "$tmp/err")"; fi
T "$CLI" cache stats --cache-dir "$v" -m "$MODEL" --cache-key-file "$tmp/key" --verify >"$tmp/vk.txt" 2>"$tmp/err"
if grep -q "1 failed the checksum, 1 failed the MAC" "$tmp/vk.txt"; then ok cache_key_verify_text
else fail cache_key_verify_text "$(cat "$tmp/vk.txt" "$tmp/err")"; fi
# without the key: checksums only, and the keyed entries are not this (keyless) fingerprint's
T "$CLI" cache stats --cache-dir "$v" -m "$MODEL" --verify --json >"$tmp/vn.json" 2>"$tmp/err"
got=$(j "$tmp/vn.json" "(d['model']['keyed'], d['model']['verify']['checked'], d['model']['verify']['entries'], d['model']['verify']['bad_mac'], d['model']['other_models'])" 2>&1)
if [ "$got" = "(False, 'checksums', 0, 0, ${#files[@]})" ]; then ok cache_key_verify_without_key_says_what
else fail cache_key_verify_without_key_says_what "$got: $(cat "$tmp/err")"; fi

# --verify reads the model's entries of every KV type that has any (each type a fingerprint
# of its own), whichever --kv-type is shown: a forged q8 entry beside the f16 ones is found
# from the f16 view too (it had been read only with --kv-type q8)
gen --cache-dir "$v" --cache-key-file "$tmp/key" --kv-type q8 >/dev/null || fail verify_types_setup "rc $?"
mapfile -t all < <(find "$v" -maxdepth 1 -name '*.kvc' -type f | sort)
q8file=$(comm -13 <(printf '%s\n' "${files[@]}") <(printf '%s\n' "${all[@]}") | head -n 1)
if [ -n "$q8file" ] && python3 tests/forge_entry.py forge "$q8file"; then
    want="(['f16', 'q8'], ${#all[@]} - 3, 1, 2)"
    for shown in f16 q8; do
        T "$CLI" cache stats --cache-dir "$v" -m "$MODEL" --cache-key-file "$tmp/key" --kv-type "$shown" --verify --json \
            >"$tmp/vt.json" 2>"$tmp/err"
        got=$(j "$tmp/vt.json" "(d['model']['verify']['kv_types'], d['model']['verify']['entries'], d['model']['verify']['damaged'], d['model']['verify']['bad_mac'])" 2>&1)
        if [ "$got" = "$(python3 -c "print($want)")" ]; then ok "cache_key_verify_every_kv_type_$shown"
        else fail "cache_key_verify_every_kv_type_$shown" "got $got, want $want: $(cat "$tmp/err")"; fi
    done
    T "$CLI" cache stats --cache-dir "$v" -m "$MODEL" --cache-key-file "$tmp/key" --verify >"$tmp/vt.txt" 2>"$tmp/err"
    if grep -q "f16 + q8 entries: .* 1 failed the checksum, 2 failed the MAC" "$tmp/vt.txt"; then ok cache_key_verify_every_kv_type_text
    else fail cache_key_verify_every_kv_type_text "$(cat "$tmp/vt.txt" "$tmp/err")"; fi
else
    fail verify_types_setup "no q8 entry written (${#files[@]} before, ${#all[@]} after)"
fi

# cache stats|ls -m --cache-key-file on Redis: the keyed fingerprint's entries (refused before)
if command -v redis-server >/dev/null; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" >/dev/null 2>&1 &
    redis_pid=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
    URL="redis://127.0.0.1:$port"
    gen --redis "$URL" --cache-key-file "$tmp/key" >"$tmp/r1.json" || fail redis_setup "rc $?"
    n=$(j "$tmp/r1.json" "d['stored_chunks']")
    T "$CLI" cache stats --redis "$URL" -m "$MODEL" --cache-key-file "$tmp/key" --json >"$tmp/rk.json" 2>"$tmp/err"; rc=$?
    T "$CLI" cache stats --redis "$URL" -m "$MODEL" --json >"$tmp/rn.json" 2>>"$tmp/err"
    T "$CLI" cache ls --redis "$URL" -m "$MODEL" --cache-key-file "$tmp/key" --json >"$tmp/rl.json" 2>>"$tmp/err"
    fp=$(j "$tmp/rk.json" "d['model']['fingerprint']" 2>/dev/null)
    if [ $rc -eq 0 ] && [ "$n" -gt 0 ] &&
       [ "$(j "$tmp/rk.json" "(d['model']['keyed'], d['model']['entries'], d['model']['other_models'])")" = "(True, $n, 0)" ] &&
       [ "$(j "$tmp/rn.json" "(d['model']['keyed'], d['model']['entries'], d['model']['other_models'])")" = "(False, 0, $n)" ] &&
       [ "$(j "$tmp/rl.json" "sorted(set(e['fingerprint'] for e in d['entries'])), len(d['entries'])")" = "(['$fp'], $n)" ]; then
        ok cache_key_redis_stats_ls
    else
        fail cache_key_redis_stats_ls "rc $rc, $n stored: $(cat "$tmp/rk.json" "$tmp/rn.json" "$tmp/err")"
    fi
else
    echo "skip cache_key_redis_stats_ls (no redis-server)"
fi
# a key names one model's keyed cache: without -m it is refused, naming -m
out=$(T "$CLI" cache stats --cache-dir "$v" --cache-key-file "$tmp/key" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q -- "goes with -m" <<< "$out"; then ok cache_key_stats_needs_a_model; else fail cache_key_stats_needs_a_model "rc $rc: $out"; fi
exit $status
