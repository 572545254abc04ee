#!/usr/bin/env bash
# APE's attention recalibration in bench/rag_eval (issue 13's third lever):
# the strategies with and without it, on plain and on baked document KV, on
# the standard 15 prompts (rag_eval_recal.*), then a small sweep of APE's
# two parameters on `none` and `query` (rag_eval_recal_T_S.*). Quality
# columns are deterministic; TTFT excludes the baking (offline). About 15
# minutes for the first run and 5 per sweep point on 2 idle cores.
#   BUILD   build dir (default build); RECAL_SWEEP "T,S ..." (default
#   "0.8,0.8 1.0,0.8 0.8,1.0"; "" skips it); extra arguments go to every run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
make --no-print-directory BUILD="$BUILD" "$BUILD/bench/rag_eval" >/dev/null
model=$(scripts/fetch-model.sh | tail -n 1)
export KVSTITCH_MODEL="$model" KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(readlink -f ../shared)}"
common=(--items 6 --wiki 3 --cold-items 0 --reps 1 --out bench/results)
"$BUILD/bench/rag_eval" "${common[@]}" --tag recal --recal 0.9,0.9 \
    --configs none,none+recal,query:0.1,query+recal:0.1,cacheblend+seams:0.1,cacheblend+seams+recal:0.1,none+bake,none+recal+bake,query+bake:0.1,query+recal+bake:0.1 "$@"
for ts in ${RECAL_SWEEP-0.8,0.8 1.0,0.8 0.8,1.0}; do
    "$BUILD/bench/rag_eval" "${common[@]}" --tag "recal_${ts/,/_}" --recal "$ts" \
        --configs none+recal,query+recal:0.1 "$@"
done
