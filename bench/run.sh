#!/usr/bin/env bash
# What `make bench` runs: every benchmark program built from bench/*.c into
# $BUILD/bench/, then `kvstitch bench` on the real model, then the side-by-side
# comparison with llama.cpp if llama-cpp-python is installed
# (scripts/setup-llamacpp.sh). Aims at a few minutes in all on 2 cores.
#   BUILD          build dir (default build)
#   BENCH_THREADS  threads for the model benchmarks (default 2)
#   BENCH_REPS     repetitions for the model benchmarks (default 3)
# Exits non-zero if any step failed, after running the others.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD="${BUILD:-build}"
threads="${BENCH_THREADS:-2}"
reps="${BENCH_REPS:-3}"
failed=()

step() { printf '\n== %s\n' "$*"; }

echo "bench: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores;" \
     "load $(cut -d' ' -f1-3 /proc/loadavg) (the machine may be shared: timings are noisy)"

# The model benchmarks (bench/prefix_reuse) find the model and ../shared here.
model=$(scripts/fetch-model.sh | tail -n 1) || { echo "bench: model fetch failed" >&2; exit 1; }
export KVSTITCH_MODEL="$model" KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(readlink -f ../shared)}"

for b in "$BUILD"/bench/*; do
    { [ -f "$b" ] && [ -x "$b" ]; } || continue
    case "$b" in *.d|*.o) continue;; esac
    step "$(basename "$b")"
    "$b" || failed+=("$(basename "$b")")
done

step "kvstitch bench (-p 512 -n 128, -p 2048; $threads threads, $reps reps)"
if [ -x "$BUILD/kvstitch" ]; then
    "$BUILD/kvstitch" bench -m "$model" -p 512 -n 128 --reps "$reps" --threads "$threads" \
        || failed+=("kvstitch bench -p 512")
    "$BUILD/kvstitch" bench -m "$model" -p 2048 -n 0 --reps "$reps" --threads "$threads" \
        || failed+=("kvstitch bench -p 2048")
else
    echo "bench: $BUILD/kvstitch is not built" >&2
    failed+=("kvstitch")
fi

step "ours vs llama.cpp"
BUILD="$BUILD" bench/compare-llamacpp.sh "$model" --threads "$threads" --reps "$reps" \
    || failed+=("compare-llamacpp")

if [ ${#failed[@]} -gt 0 ]; then
    printf '\nbench: failed: %s\n' "${failed[*]}"
    exit 1
fi
printf '\nbench: done\n'
