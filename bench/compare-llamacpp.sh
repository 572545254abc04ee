#!/usr/bin/env bash
# Runs our engine and llama.cpp side by side on the same GGUF, same prompt
# lengths, same thread count, in one run, and prints ours/theirs ratios for
# prefill (pp) and decode (tg), like llama-bench's pp512 / pp2048 / tg128.
#
#   bench/compare-llamacpp.sh [MODEL] [--threads 2] [--reps 3] [--rounds 1]
#                             [-p 512,2048] [-n 128] [--llama-bench PATH]
#                             [--flash-attn auto|on|off] [--no-save]
#
# MODEL defaults to the one scripts/fetch-model.sh prints. Each round runs
# ours, then llama.cpp (median of --reps each); with --rounds K > 1 the two
# alternate K times and the median over rounds is reported, which evens out
# a shared machine's load between the engines.
# The table also goes to bench/results/compare-llamacpp-<date>.txt with the
# machine and the git commit (--no-save: print only).
#
# llama.cpp comes from llama-cpp-python (scripts/setup-llamacpp.sh), or from a
# llama-bench binary given with --llama-bench. If neither is there, this says
# how to install it and exits 0 ("skipped"): benchmarks may use llama.cpp,
# tests never do.
#   BUILD           our build dir (default build); KVSTITCH_CLI overrides the binary
#   LLAMACPP_PYTHON python with llama_cpp (default: the setup-llamacpp.sh venv)
set -euo pipefail
cd "$(dirname "$0")/.."

model="" threads=2 reps=3 rounds=1 pps="512,2048" ngen=128 llama_bench="" fa=auto save=1
while [ $# -gt 0 ]; do
    case "$1" in
        --threads|-t) threads="$2"; shift 2;;
        --reps|-r) reps="$2"; shift 2;;
        --rounds) rounds="$2"; shift 2;;
        -p) pps="$2"; shift 2;;
        -n) ngen="$2"; shift 2;;
        --llama-bench) llama_bench="$2"; shift 2;;
        --flash-attn) fa="$2"; shift 2;;
        --no-save) save=0; shift;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
        -*) echo "compare-llamacpp: unknown option $1" >&2; exit 2;;
        *) model="$1"; shift;;
    esac
done
for v in threads reps rounds ngen; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "compare-llamacpp: --$v needs a number" >&2; exit 2; }
done

BUILD="${BUILD:-build}"
cli="${KVSTITCH_CLI:-$BUILD/kvstitch}"
pyll="${LLAMACPP_PYTHON:-${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/venv-llamacpp/bin/python}"

# --- the peer: llama-bench binary or llama-cpp-python, else skip -------------
if [ -n "$llama_bench" ]; then
    [ -x "$llama_bench" ] || { echo "compare-llamacpp: $llama_bench is not executable" >&2; exit 2; }
    peer="llama-bench"
elif [ -x "$pyll" ] && "$pyll" -c 'import llama_cpp' 2>/dev/null; then
    peer="llama-cpp-python"
else
    echo "compare-llamacpp: skipped: llama.cpp is not installed."
    echo "  Install it (builds llama.cpp natively, several minutes): scripts/setup-llamacpp.sh"
    echo "  or pass a llama-bench binary: $0 --llama-bench /path/to/llama-bench"
    exit 0
fi

if [ -z "$model" ]; then
    model=$(scripts/fetch-model.sh | tail -n 1)
fi
[ -f "$model" ] || { echo "compare-llamacpp: model $model not found" >&2; exit 2; }
if [ ! -x "$cli" ]; then
    echo "compare-llamacpp: our CLI $cli is not built (run make, or set BUILD / KVSTITCH_CLI)" >&2
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-llamacpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
IFS=',' read -r -a plist <<<"$pps"

# timed WHO CMD...: runs CMD, appends "real user sys" seconds to $tmp/WHO.time,
# from which the report gives each engine's CPU share: CPU time it got over
# wall time x threads (well under 1: the shared machine was busy during it).
timed() {
    local who="$1" TIMEFORMAT='%R %U %S' rc=0
    shift
    { time "$@" 2>&3 ; } 3>&2 2>>"$tmp/$who.time" || rc=$?
    return $rc
}

# Ours: one `kvstitch bench` per prompt length (its -p takes one length);
# decode is measured with the first one. Output: $tmp/ours.<round>.<P>.json
run_ours() {
    local r="$1" i p n
    for i in "${!plist[@]}"; do
        p="${plist[$i]}"; n=0
        [ "$i" -eq 0 ] && n="$ngen"
        if ! timed ours "$cli" bench -m "$model" -p "$p" -n "$n" --reps "$reps" --threads "$threads" --json \
                >"$tmp/ours.$r.$p.json" 2>"$tmp/ours.err"; then
            echo "compare-llamacpp: '$cli bench -m $model -p $p -n $n --reps $reps --threads $threads --json' failed:" >&2
            cat "$tmp/ours.err" >&2
            exit 1
        fi
    done
}

run_peer() {
    local r="$1"
    if [ "$peer" = "llama-bench" ]; then
        timed peer "$llama_bench" -m "$model" -p "$pps" -n "$ngen" -t "$threads" -r "$reps" -o json \
            >"$tmp/peer.$r.json" 2>"$tmp/peer.err" \
            || { echo "compare-llamacpp: llama-bench failed:" >&2; cat "$tmp/peer.err" >&2; exit 1; }
    else
        timed peer "$pyll" bench/llamacpp_bench.py -m "$model" -p "$pps" -n "$ngen" -t "$threads" \
            -r "$reps" --flash-attn "$fa" >"$tmp/peer.$r.json" 2>"$tmp/peer.err" \
            || { echo "compare-llamacpp: bench/llamacpp_bench.py failed:" >&2; cat "$tmp/peer.err" >&2; exit 1; }
        cat "$tmp/peer.err" >&2   # its warning if wall-clock and llama.cpp's timings disagree
    fi
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < rounds; r++)); do
    echo "compare-llamacpp: round $((r + 1))/$rounds: ours ($cli)..." >&2
    run_ours "$r"
    echo "compare-llamacpp: round $((r + 1))/$rounds: llama.cpp ($peer)..." >&2
    run_peer "$r"
done

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
isa=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx512_bf16\|amx_int8' | tr '\n' ' ')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo "no commit")
[ -n "$(git status --porcelain 2>/dev/null | head -n 1)" ] && commit+=" (+ uncommitted changes)"
if [ "$peer" = "llama-bench" ]; then
    peer_version=$("$llama_bench" --version 2>&1 | head -n 1 || true)
else
    peer_version=$("$pyll" -c 'import llama_cpp; print("llama-cpp-python", llama_cpp.__version__)')
fi

table=$(python3 - "$tmp" "$rounds" "$pps" "$ngen" "$peer" "$threads" <<'PY'
import json, statistics, sys
tmp, rounds, pps, ngen, peer = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
threads = int(sys.argv[6])
plist = [int(p) for p in pps.split(",") if p.strip()]

def first(d, keys):
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None

def ours_round(r):
    """Our bench JSON (tools/cmd_bench.c), one file per prompt length:
    {"pp": {"n": P, "tok_s": X, "runs": [...]}, "tg": {"n": N, "tok_s": Y, ...}}.
    Flat names are accepted too: pp<P>_tok_s / prefill_tok_s, tg<N>_tok_s /
    decode_tok_s."""
    out = {}
    for i, p in enumerate(plist):
        with open(f"{tmp}/ours.{r}.{p}.json") as f:
            d = json.load(f)
        pp, tg = d.get("pp"), d.get("tg")
        v = pp.get("tok_s") if isinstance(pp, dict) and pp.get("n") == p else None
        v = v if isinstance(v, (int, float)) and v > 0 else first(d, [f"pp{p}_tok_s", "prefill_tok_s"])
        if v is None:
            sys.exit(f"compare-llamacpp: our bench JSON for -p {p} has no prefill tok/s "
                     f"(keys: {sorted(d)})")
        out[f"pp{p}"] = float(v)
        if i == 0 and ngen > 0:
            v = tg.get("tok_s") if isinstance(tg, dict) and tg.get("n") == ngen else None
            v = v if isinstance(v, (int, float)) and v > 0 else first(d, [f"tg{ngen}_tok_s", "decode_tok_s"])
            if v is None:
                sys.exit(f"compare-llamacpp: our bench JSON has no decode tok/s (keys: {sorted(d)})")
            out[f"tg{ngen}"] = float(v)
    return out

def peer_round(r):
    with open(f"{tmp}/peer.{r}.json") as f:
        d = json.load(f)
    out = {}
    if peer == "llama-bench":   # a list of tests: n_prompt, n_gen, avg_ts
        for t in d:
            if t.get("n_gen", 0) == 0:
                out[f"pp{t['n_prompt']}"] = float(t["avg_ts"])
            elif t.get("n_prompt", 0) == 0:
                out[f"tg{t['n_gen']}"] = float(t["avg_ts"])
    else:
        for k, v in d.items():
            if k.endswith("_tok_s") and isinstance(v, (int, float)):
                out[k[:-len("_tok_s")]] = float(v)
    return out

ours = [ours_round(r) for r in range(rounds)]
theirs = [peer_round(r) for r in range(rounds)]
metrics = [f"pp{p}" for p in plist] + ([f"tg{ngen}"] if ngen > 0 else [])
rows = []
for m in metrics:
    o = statistics.median(x[m] for x in ours)
    t = [x[m] for x in theirs if m in x]
    t = statistics.median(t) if t else None
    rows.append((m, o, t, o / t if t else None))
print(f"{'metric':<10} {'ours tok/s':>12} {'llama.cpp tok/s':>16} {'ours/theirs':>12}")
for m, o, t, q in rows:
    ts = f"{t:16.1f}" if t else f"{'n/a':>16}"
    qs = f"{q:11.2f}x" if q else f"{'n/a':>12}"
    print(f"{m:<10} {o:12.1f} {ts} {qs}")

def cpu_share(who):
    real = cpu = 0.0
    with open(f"{tmp}/{who}.time") as f:
        for line in f:
            r, u, s = (float(x) for x in line.split())
            real, cpu = real + r, cpu + u + s
    return cpu / (real * threads) if real > 0 else 0.0
if peer != "llama-bench":
    with open(f"{tmp}/peer.0.json") as f:
        d = json.load(f)
    print(f"\nllama.cpp config: flash_attn={d.get('flash_attn')}, n_batch={d.get('n_batch')}, "
          f"n_ubatch={d.get('n_ubatch')}, extra_bufts={d.get('extra_bufts')}"
          f", wall vs llama.cpp's own timing within {d.get('wall_vs_perf_max_rel_diff', 0):.1%}")
    if d.get("note"):
        print(f"note: {d['note']}")
so, sp = cpu_share('ours'), cpu_share('peer')
print(f"\nCPU share (CPU time / (wall x {threads} threads), whole runs incl. load and "
      f"warm-up): ours {so:.2f}, llama.cpp {sp:.2f}")
if min(so, sp) < 0.8:
    print("WARNING: the machine was busy (CPU share < 0.8): these ratios measure how each "
          "engine's threads cope with contention (spinning barriers suffer most), not the "
          "speed of its kernels. Rerun on an idle machine for the real ratios.")
PY
)

report="compare-llamacpp: $(date -u '+%Y-%m-%d %H:%M UTC')
model:    $model
machine:  ${cpu:-unknown CPU} (${isa% }), $(nproc) cores; load average before the run: $load0
commit:   $commit
ours:     $cli bench (median of $reps reps per round)
peer:     $peer_version (median of $reps reps per round, flash-attn $fa)
threads:  $threads   rounds: $rounds (engines alternate; median over rounds)

$table"
printf '%s\n' "$report"
if [ "$save" -eq 1 ]; then
    mkdir -p bench/results
    out="bench/results/compare-llamacpp-$(date -u '+%Y%m%d-%H%M').txt"
    printf '%s\n' "$report" >"$out"
    echo "compare-llamacpp: written to $out" >&2
fi
