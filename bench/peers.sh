#!/usr/bin/env bash
# kvstitch bench beside one or more llama-bench builds (llama.cpp,
# ik_llama.cpp, ... : any fork whose llama-bench writes `-o json`), same
# GGUF files, same threads, engines alternating within each round; prints a
# markdown table of medians (tok/s) and our ratio to each peer.
#
#   bench/peers.sh --peer NAME=CMD [--peer NAME=CMD ...] [--types "Q4_1 Q4_0 Q8_0 F16"]
#                  [--threads "1 2"] [--rounds 2] [--reps 3] [-p 512] [-n 64]
#
# CMD is the peer's llama-bench path, optionally followed by its own flags
# (word-split), e.g. --peer "ik-rtr=/path/to/llama-bench -rtr 1". The files are
# $KVSTITCH_CACHE/models/SmolLM2-135M-Instruct.<TYPE>.gguf (Q4_1 from
# scripts/fetch-model.sh; bench/roofline.sh makes the others with
# llama-quantize); a type without its file is skipped. Nothing of a peer is
# built or fetched here: benchmarks take the peer's path.
set -euo pipefail
cd "$(dirname "$0")/.."

types="Q4_1 Q4_0 Q8_0 F16" threads="1 2" rounds=2 reps=3 pp=512 ngen=64
names=() cmds=()
while [ $# -gt 0 ]; do
    case "$1" in
        --peer) names+=("${2%%=*}"); cmds+=("${2#*=}"); shift 2;;
        --types) types="$2"; shift 2;;
        --threads) threads="$2"; shift 2;;
        --rounds) rounds="$2"; shift 2;;
        --reps) reps="$2"; shift 2;;
        -p) pp="$2"; shift 2;;
        -n) ngen="$2"; shift 2;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
        *) echo "peers: unknown option $1 (see --help)" >&2; exit 2;;
    esac
done
. bench/bench_lib.sh
need_numbers peers rounds reps pp ngen
[ ${#names[@]} -gt 0 ] || { echo "peers: name at least one --peer NAME=CMD" >&2; exit 2; }
for c in "${cmds[@]}"; do
    read -r exe _ <<< "$c"
    [ -x "$exe" ] || { echo "peers: $exe is not an executable" >&2; exit 2; }
done
BUILD="${BUILD:-build}"
[ -x "$BUILD/kvstitch" ] || { echo "peers: $BUILD/kvstitch is not built (make)" >&2; exit 2; }
cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}"
scripts/fetch-model.sh > /dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in $types; do
    m="$cache/models/SmolLM2-135M-Instruct.$t.gguf"
    [ -f "$m" ] || { echo "peers: no $m (bench/roofline.sh makes it): $t skipped" >&2; continue; }
    for th in $threads; do
        for r in $(seq "$rounds"); do
            echo "peers: $t threads $th round $r" >&2
            "$BUILD/kvstitch" bench -m "$m" -p "$pp" -n "$ngen" --reps "$reps" --threads "$th" --json \
                | python3 bench/bench_json.py kvstitch kvstitch type="$t" threads="$th" \
                >> "$tmp/runs.jsonl"
            for i in "${!names[@]}"; do
                # shellcheck disable=SC2086
                ${cmds[$i]} -m "$m" -p "$pp" -n "$ngen" -t "$th" -r "$reps" -o json 2>"$tmp/peer.err" \
                    | python3 bench/bench_json.py llama "${names[$i]}" type="$t" threads="$th" \
                    >> "$tmp/runs.jsonl" || { echo "peers: ${names[$i]} failed" >&2; tail -3 "$tmp/peer.err" >&2; }
            done
        done
    done
done

python3 - "$tmp/runs.jsonl" "$pp" "$ngen" "$rounds" "$reps" "${names[@]}" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
pp, ngen, rounds, reps, peers = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def med(who, typ, th, key):
    v = [r[key] for r in runs if r["who"] == who and r["type"] == typ and r["threads"] == th and r.get(key)]
    return statistics.median(v) if v else None
f = lambda v: "-" if v is None else "%.1f" % v
ratio = lambda a, b: "-" if not a or not b else "%.2fx" % (a / b)
print("Medians over %s rounds of %s reps (engines alternating); pp%s = prefill, tg%s = decode, tok/s.\n" % (rounds, reps, pp, ngen))
for key, label in (("pp", "pp%s" % pp), ("tg", "tg%s" % ngen)):
    print("| %s | threads | kvstitch | %s | %s |" % (label, " | ".join(peers), " | ".join("ours / " + p for p in peers)))
    print("|---|---:|---:|%s%s" % ("---:|" * len(peers), "---:|" * len(peers)))
    keys = sorted({(r["type"], r["threads"]) for r in runs}, key=lambda k: (["Q4_1", "Q4_0", "Q8_0", "F16"].index(k[0]) if k[0] in ("Q4_1", "Q4_0", "Q8_0", "F16") else 9, k[1]))
    for typ, th in keys:
        ours = med("kvstitch", typ, th, key)
        vals = [med(p, typ, th, key) for p in peers]
        print("| %s | %d | %s | %s | %s |" % (typ, th, f(ours), " | ".join(f(v) for v in vals), " | ".join(ratio(ours, v) for v in vals)))
    print()
EOF
