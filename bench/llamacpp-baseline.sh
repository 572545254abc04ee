#!/usr/bin/env bash
# Measures llama.cpp alone (llama-cpp-python, scripts/setup-llamacpp.sh) on the
# model: pp512, pp2048, pp4096 and tg128 with --threads, --runs separate
# invocations of bench/llamacpp_bench.py (each the median of --reps), and
# writes the table with the spread between runs to
# bench/results/llamacpp-baseline.txt. Also records llama.cpp's first-token
# logits for the golden ChatML prompts in bench/results/llamacpp-logits-capital.txt.
#   bench/llamacpp-baseline.sh [MODEL] [--threads 2] [--reps 3] [--runs 3] [--variants] [--logits-only]
# --variants adds one run each with flash attention off and without the AMX /
# repacked weight buffers, to show what those paths are worth.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" threads=2 reps=3 runs=3 variants=0 perf=1
while [ $# -gt 0 ]; do
    case "$1" in
        --threads|-t) threads="$2"; shift 2;;
        --reps|-r) reps="$2"; shift 2;;
        --runs) runs="$2"; shift 2;;
        --variants) variants=1; shift;;
        --logits-only) perf=0; shift;;
        -*) echo "llamacpp-baseline: unknown option $1" >&2; exit 2;;
        *) model="$1"; shift;;
    esac
done
pyll="${LLAMACPP_PYTHON:-${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/venv-llamacpp/bin/python}"
if ! { [ -x "$pyll" ] && "$pyll" -c 'import llama_cpp' 2>/dev/null; }; then
    echo "llamacpp-baseline: skipped: llama.cpp is not installed (scripts/setup-llamacpp.sh)"
    exit 0
fi
[ -n "$model" ] || model=$(scripts/fetch-model.sh | tail -n 1)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-baseline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

bench() {  # bench NAME ARGS...: one invocation, JSON to $tmp/NAME.json
    local name="$1"; shift
    echo "llamacpp-baseline: $name (load $(cut -d' ' -f1 /proc/loadavg))..." >&2
    "$pyll" bench/llamacpp_bench.py -m "$model" -p 512,2048,4096 -n 128 -t "$threads" \
        -r "$reps" "$@" >"$tmp/$name.json"
}
stamp=$(cat "$(dirname "$pyll")/../.kvstitch-llamacpp" 2>/dev/null || echo "unknown build")
if [ "$perf" -eq 1 ]; then
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    for ((i = 1; i <= runs; i++)); do bench "run$i"; done
    if [ "$variants" -eq 1 ]; then
        bench "fa-off" --flash-attn off
        bench "no-amx" --extra-bufts off
    fi
    load1=$(cut -d' ' -f1-3 /proc/loadavg)

    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx512_bf16\|amx_int8' | tr '\n' ' ')
    mkdir -p bench/results
    {
        echo "llama.cpp baseline: $(date -u '+%Y-%m-%d %H:%M UTC'), written by bench/llamacpp-baseline.sh"
        echo "model:    $model"
        echo "machine:  ${cpu:-unknown CPU} (${isa% }), $(nproc) cores, SHARED with other work:"
        echo "          load average $load0 before, $load1 after"
        echo "build:    $stamp"
        echo "threads:  $threads; each run = one process, median of $reps reps after a warm-up;"
        echo "          prefill into an empty KV cache, tg = $((128)) single-token decodes from an empty cache"
        echo
        python3 - "$tmp" "$runs" "$variants" <<'PY'
import json, statistics, sys
tmp, runs, variants = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = [f"run{i}" for i in range(1, runs + 1)]
data = {n: json.load(open(f"{tmp}/{n}.json")) for n in names}
if variants:
    for n in ("fa-off", "no-amx"):
        data[n] = json.load(open(f"{tmp}/{n}.json"))
d0 = data[names[0]]
print(f"llama.cpp config: llama-cpp-python {d0['llama_cpp_python']}, n_batch {d0['n_batch']}, "
      f"n_ubatch {d0['n_ubatch']}, flash_attn {d0['flash_attn']}, extra_bufts (AMX/repack) {d0['extra_bufts']}")
if d0.get("note"):
    print(f"note: {d0['note']}")
metrics = ["pp512", "pp2048", "pp4096", "tg128"]
hdr = f"{'metric':<8}" + "".join(f"{n:>10}" for n in names) + f"{'median':>10}{'spread':>9}{'max':>10}"
print("\ntok/s; share = CPU time the process got / (wall x threads), median over the tests: "
      "well under 1 = machine busy, figures depressed")
print(hdr)
for m in metrics:
    vals = [data[n][f"{m}_tok_s"] for n in names]
    med = statistics.median(vals)
    spread = (max(vals) - min(vals)) / med if med else 0
    print(f"{m:<8}" + "".join(f"{v:10.1f}" for v in vals) + f"{med:10.1f}{spread:8.0%} {max(vals):10.1f}")
print(f"{'share':<8}" + "".join(f"{statistics.median(data[n][f'{m}_cpu_share'] for m in metrics):10.2f}" for n in names))
med512 = statistics.median(data[n]["pp512_tok_s"] for n in names)
med4096 = statistics.median(data[n]["pp4096_tok_s"] for n in names)
print(f"\nper-token cost at 4096 vs 512: {med512 / med4096:.2f}x")
print(f"wall-clock vs llama.cpp's own timings (llama_perf_context): largest difference "
      f"{max(data[n]['wall_vs_perf_max_rel_diff'] for n in names):.3%}")
if variants:
    print("\nvariants (one run each, same settings otherwise):")
    for n, what in (("fa-off", "flash attention off"), ("no-amx", "no AMX / repack buffers")):
        d = data[n]
        print(f"  {what:<24}" + "".join(f"{m} {d[f'{m}_tok_s']:7.1f}  " for m in metrics)
              + f"(share {statistics.median(d[f'{m}_cpu_share'] for m in metrics):.2f})")
PY
    } >"$tmp/baseline.txt"
    cp "$tmp/baseline.txt" bench/results/llamacpp-baseline.txt
    cat bench/results/llamacpp-baseline.txt
fi

# First-token logits for the ChatML prompts: the brief's (no system prompt) and
# the golden case chat_france (tests/data/golden), compared with its float64
# numpy reference logits where that file exists.
{
    echo "llama.cpp first-token logits: $(date -u '+%Y-%m-%d %H:%M UTC'), written by bench/llamacpp-baseline.sh"
    echo "model: $model; build: $stamp"
    echo "tokenized by llama.cpp (special tokens parsed, BOS as the model says: none for SmolLM2)"
    for fa in auto off; do
        for case in plain system; do
            if [ "$case" = plain ]; then
                text=$'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
                ref=()
            else
                text=$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n'
                ref=()
                [ -f tests/data/golden/smollm2_chat_france.f32 ] && ref=(--logits-ref tests/data/golden/smollm2_chat_france.f32)
            fi
            echo
            "$pyll" bench/llamacpp_bench.py -m "$model" -t "$threads" --flash-attn "$fa" \
                --logits "$text" --top-k 5 --text "${ref[@]}"
        done
    done
} >"$tmp/logits.txt"
cp "$tmp/logits.txt" bench/results/llamacpp-logits-capital.txt
cat bench/results/llamacpp-logits-capital.txt
