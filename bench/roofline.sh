#!/usr/bin/env bash
# Roofline report: how close decode comes to the memory-bandwidth bound and
# prefill to the int8 peak, per quant type and thread count, with llama.cpp
# beside us. Writes bench/results/roofline-<cpu>.md (--no-save: print only).
#
#   bench/roofline.sh [--threads "1 2"] [--reps 3] [--rounds 2] [-p 512] [-n 64]
#                     [--streams 8] [--types "Q4_1 Q4_0 Q8_0 F16"] [--llama-bin DIR] [--no-save]
#
# Ceilings (build/bench/roofline_probe): read bandwidth over 256 MiB and the
# int8 dot peak of the ISA path, per thread count, by wall clock (what the
# machine gave during this run) and by thread CPU time (what a core gives
# while it runs; on a shared machine the estimate of an idle machine), and
# that peak beside the float steps the kernels owe per block group (a mul
# and an fma per 16 vpdpbusd), the matmuls' own ceiling where those share
# the dot's pipes.
#  - kernel level (build/bench/bench_kernels --cpu, 1 thread, thread CPU
#    time): each SmolLM2 matmul at m = 1 as weight GB/s and its share of the
#    CPU-time bandwidth; m = 8 (8 streams in one call) as aggregate rows/s;
#  - model level (kvstitch bench vs llama-bench, same file, same threads,
#    alternating for --rounds, medians): decode tok/s, its bound
#    (wall read GB/s of the same run / weight bytes per token: the tied head
#    reads every weight once per token) and the share; prefill tok/s and the
#    int8 work it implies (a prompt token's MACs, the output head on the
#    last row only, x 2 for the two-level activations) as a share of the
#    wall int8 peak;
#  - batched decode: --streams N sequences stepped together (kvstitch bench
#    --streams, the server's batched step), aggregate tok/s over the
#    one-stream decode of the same round (0: skip); beside it llama.cpp's N
#    parallel sequences where its build has llama-batched-bench (-npl 1,N,
#    a one-token prompt each, the same decode length).
#  - on a CPU where our prefill runs on AMX tiles (kvstitch --version lists
#    amx first, KVS_AMX not 0): prefill once more with KVS_AMX=0 (the
#    AVX-512 VNNI path on the same machine) each round, and "-amx" in the
#    report's file name, so an AMX machine's report never overwrites the
#    report of an AVX-512 one.
# Models: the Q4_1 file of scripts/fetch-model.sh; type gemma3 (not in the
# default list: --types "... gemma3") is gemma-3-270m Q4_K_M
# (scripts/fetch-model.sh gemma3: Q5_0 / Q4_K / Q6_K matrices, Q8_0 head);
# Q4_0 / Q8_0 / F16 are made
# from it with llama-quantize --allow-requantize when llama.cpp's binaries
# are found (--llama-bin DIR with llama-bench and llama-quantize; default:
# a cmake build of llama-cpp-python's vendored llama.cpp under
# $KVSTITCH_CACHE/llamacpp-src/*/vendor/llama.cpp/build/bin).
# Without llama.cpp the report has our columns only.
set -euo pipefail
cd "$(dirname "$0")/.."

threads="1 2" reps=3 rounds=2 pp=512 ngen=64 streams=8 types="Q4_1 Q4_0 Q8_0 F16" llbin="" save=1
while [ $# -gt 0 ]; do
    case "$1" in
        --threads) threads="$2"; shift 2;;
        --reps) reps="$2"; shift 2;;
        --rounds) rounds="$2"; shift 2;;
        -p) pp="$2"; shift 2;;
        -n) ngen="$2"; shift 2;;
        --streams) streams="$2"; shift 2;;
        --types) types="$2"; shift 2;;
        --llama-bin) llbin="$2"; shift 2;;
        --no-save) save=0; shift;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
        *) echo "roofline: unknown option $1 (see --help)" >&2; exit 2;;
    esac
done
. bench/bench_lib.sh
need_numbers roofline reps rounds pp ngen streams

BUILD="${BUILD:-build}"
cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}"
for b in "$BUILD/kvstitch" "$BUILD/bench/roofline_probe" "$BUILD/bench/bench_kernels"; do
    [ -x "$b" ] || { echo "roofline: $b is not built (make && make bench)" >&2; exit 2; }
done
if [ -z "$llbin" ]; then
    llbin=$(ls -d "$cache"/llamacpp-src/*/vendor/llama.cpp/build/bin 2>/dev/null | head -n 1 || true)
fi
have_ll=0 have_llb=0
[ -n "$llbin" ] && [ -x "$llbin/llama-bench" ] && [ -x "$llbin/llama-quantize" ] && have_ll=1
[ $have_ll = 1 ] && [ -x "$llbin/llama-batched-bench" ] && have_llb=1

# AMX: our prefill's path here; prefill is also measured without it
amx=$(amx_prefill "$BUILD/kvstitch")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
q41=$(scripts/fetch-model.sh | tail -n 1)
# MACs per token: a decoded token's = the parameters (less a separate
# token_embd, a lookup); a prompt token's less the output head too, which
# runs on the last row only. Read before the runs, so that an info without
# these lines stops here and not after them.
info=$("$BUILD/kvstitch" info -m "$q41")
params=$(sed -n 's/^parameters: *\([0-9]*\).*/\1/p' <<< "$info")
vocab=$(sed -n 's/^vocabulary: *\([0-9]*\).*/\1/p' <<< "$info")
embd=$(sed -n 's/^embedding: *\([0-9]*\).*/\1/p' <<< "$info")
[ -n "$params" ] && [ -n "$vocab" ] && [ -n "$embd" ] ||
    { echo "roofline: kvstitch info -m $q41 printed no parameters / vocabulary / embedding line" >&2; exit 1; }
head_macs=$((vocab * embd))
grep -q '^output head: *tied' <<< "$info" || params=$((params - head_macs))
pp_macs=$((params - head_macs))

model_of() { # type -> path ('' if it cannot be had)
    local t="$1" out="$cache/models/SmolLM2-135M-Instruct.$1.gguf"
    [ "$t" = Q4_1 ] && { echo "$q41"; return; }
    [ "$t" = gemma3 ] && { scripts/fetch-model.sh gemma3 | tail -n 1; return; }
    if [ ! -f "$out" ] && [ $have_ll = 1 ]; then
        "$llbin/llama-quantize" --allow-requantize "$q41" "$out.tmp" "$t" >"$tmp/quant.log" 2>&1 \
            && mv "$out.tmp" "$out" || { echo "roofline: llama-quantize $t failed" >&2; tail -3 "$tmp/quant.log" >&2; }
    fi
    [ -f "$out" ] && echo "$out" || echo ""
}

echo "roofline: probe" >&2
"$BUILD/bench/roofline_probe" --reps 5 > "$tmp/probe.txt"
echo "roofline: kernels (1 thread, CPU time)" >&2
"$BUILD/bench/bench_kernels" --cpu --no-attn --threads 1 --quick \
    --isa "$(sed -n 's/^isa //p' "$tmp/probe.txt")" > "$tmp/kernels.txt"

: > "$tmp/runs.jsonl"
for t in $types; do
    m=$(model_of "$t")
    [ -n "$m" ] || { echo "roofline: no $t model (llama-quantize missing): skipped" >&2; continue; }
    # the read ceiling over a buffer the size of this file's weights (what a
    # decode step walks through; above the 256 MiB figure where the
    # last-level cache holds part of it); the best of the reps: a ceiling
    mib=$(( ($(stat -c %s "$m") + 1048575) / 1048576 ))
    "$BUILD/bench/roofline_probe" --read-only --reps 5 --mib "$mib" \
        | python3 -c 'import json,sys
for l in sys.stdin:
    f = l.split()
    if f[0] == "read_gbs": print(json.dumps({"who": "probe", "type": sys.argv[1], "mib": int(sys.argv[2]), "threads": int(f[3]), "wall": float(f[11])}))' "$t" "$mib" \
        >> "$tmp/runs.jsonl"
    for th in $threads; do
        for r in $(seq "$rounds"); do
            echo "roofline: $t threads $th round $r" >&2
            "$BUILD/kvstitch" bench -m "$m" -p "$pp" -n "$ngen" --reps "$reps" --threads "$th" --json \
                | python3 bench/bench_json.py kvstitch ours type="$t" threads="$th" \
                >> "$tmp/runs.jsonl"
            if [ "$streams" -gt 1 ]; then
                "$BUILD/kvstitch" bench -m "$m" -p 0 -n "$ngen" --reps "$reps" --threads "$th" --streams "$streams" \
                    --json | python3 bench/bench_json.py kvstitch ours_streams type="$t" threads="$th" streams="$streams" \
                    >> "$tmp/runs.jsonl"
            fi
            if [ $amx = 1 ]; then
                KVS_AMX=0 "$BUILD/kvstitch" bench -m "$m" -p "$pp" -n 0 --reps "$reps" --threads "$th" --json \
                    | python3 bench/bench_json.py kvstitch ours_noamx type="$t" threads="$th" >> "$tmp/runs.jsonl"
                # the batch without tiles: the AVX-512 paths a CPU without AMX runs
                if [ "$streams" -gt 1 ]; then
                    KVS_AMX=0 "$BUILD/kvstitch" bench -m "$m" -p 0 -n "$ngen" --reps "$reps" --threads "$th" \
                        --streams "$streams" --json | python3 bench/bench_json.py kvstitch ours_streams_noamx \
                        type="$t" threads="$th" streams="$streams" >> "$tmp/runs.jsonl"
                fi
            fi
            if [ $have_ll = 1 ]; then
                "$llbin/llama-bench" -m "$m" -p "$pp" -n "$ngen" -t "$th" -r "$reps" -o json 2>"$tmp/ll.err" \
                    | python3 bench/bench_json.py llama llama.cpp type="$t" threads="$th" \
                    >> "$tmp/runs.jsonl" || { echo "roofline: llama-bench failed" >&2; cat "$tmp/ll.err" >&2; }
            fi
            if [ $have_llb = 1 ] && [ "$streams" -gt 1 ]; then
                "$llbin/llama-batched-bench" -m "$m" -c $((streams * (ngen + 1) + 64)) -b 2048 -ub 512 -npp 1 \
                    -ntg "$ngen" -npl "1,$streams" -t "$th" --output-format jsonl 2>"$tmp/llb.err" \
                    | python3 bench/bench_json.py llama-batched llama_streams type="$t" threads="$th" \
                        streams="$streams" >> "$tmp/runs.jsonl" \
                    || { echo "roofline: llama-batched-bench failed" >&2; tail -5 "$tmp/llb.err" >&2; }
            fi
        done
    done
done

cpu=$(cpu_label)
out="bench/results/roofline-$(report_slug "$BUILD/kvstitch").md"
python3 bench/roofline_report.py "$tmp/probe.txt" "$tmp/kernels.txt" "$tmp/runs.jsonl" \
    "$cpu" "$(nproc)" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$pp" "$ngen" "$rounds" "$reps" \
    "$(if [ $have_ll = 1 ]; then { "$llbin/llama-bench" --version 2>&1 || true; } | grep -m1 -i version | sed 's/^version: /llama.cpp /'; else echo 'not available'; fi)" \
    "$params" "$amx" "$pp_macs" > "$tmp/report.md"
cat "$tmp/report.md"
if [ $save = 1 ]; then cp "$tmp/report.md" "$out"; echo "roofline: wrote $out" >&2; fi
