#!/usr/bin/env bash
# Cross-document baking in bench/rag_eval (issue 13's second lever): the
# strategies on plain and on baked document KV, side by side, and the chart
# bench/results/rag_eval_bake.png. Three runs on the standard 15 prompts:
#   doc set  each document baked after all the prompt's other documents
#            (documents known to be retrieved together): rag_eval_bake.*
#   corpus   each document baked after its 2 most similar passages among the
#            prompt's 6 and 8 more passages of the same MuSiQue item, which
#            the prompt does not contain (neighbours found by shared tokens
#            in a corpus): rag_eval_bake_pool.*
#   control  each document baked after 2 passages of another MuSiQue item
#            (unrelated text): how much of the gain is context of any kind
#            rather than the right neighbours: rag_eval_bake_foreign.*
# Quality columns are deterministic; TTFT excludes the baking (offline; its
# time per item is in the header). About 15-20 minutes per run on 2 idle cores.
#   BUILD   build dir (default build); extra arguments go to both runs.
. "$(dirname "$0")/rag_eval_env.sh"
common=(--items 6 --wiki 3 --cold-items 0 --reps 1 --out bench/results)
"$BUILD/bench/rag_eval" "${common[@]}" --tag bake \
    --configs none,none+bake,query:0.1,query+bake:0.1,query+bake:0.05,query:0.2,query+bake:0.2,cacheblend+seams:0.1,cacheblend+seams+bake:0.1 "$@"
"$BUILD/bench/rag_eval" "${common[@]}" --tag bake_pool --bake 2 --bake-pool 8 \
    --configs none,none+bake,query:0.1,query+bake:0.1,query+bake:0.05,cacheblend+seams+bake:0.1 "$@"
"$BUILD/bench/rag_eval" "${common[@]}" --tag bake_foreign --bake-foreign 2 \
    --configs none,none+bake,query:0.1,query+bake:0.1 "$@"
if command -v gnuplot >/dev/null; then
    gnuplot -e "tsv='bench/results/rag_eval_bake.tsv'; png='bench/results/rag_eval_bake.png'; \
groups='none none+bake query query+bake cacheblend+seams cacheblend+seams+bake'; \
title='Cross-document baking (SmolLM2-135M, 6 docs, each doc baked after the other docs of its prompt): speedup vs fidelity, fidelity vs cost'" \
        bench/rag_eval.gp
    echo "written: bench/results/rag_eval_bake.png"
else
    echo "rag_eval_bake.sh: gnuplot not found (apt-get install -y gnuplot-nox): no chart" >&2
fi
