#!/usr/bin/env bash
# The standard RAG evaluation of non-prefix reuse (bench/rag_eval.c) and its
# chart: builds rag_eval, runs it on ../shared/data, writes
# bench/results/rag_eval.{md,tsv} and bench/results/rag_eval.png (gnuplot;
# Debian: apt-get install -y gnuplot-nox).
#   BUILD   build dir (default build)
#   extra arguments go to rag_eval (e.g. --all for every MuSiQue item,
#   --items 4 for a shorter run; rag_eval --help lists them)
# About 20-25 minutes on 2 idle cores; longer on a shared machine. The
# error anatomy (bench/rag_anatomy: where the error of moved KV comes from)
# is a separate run: $BUILD/bench/rag_anatomy --items 4 (about 3 minutes).
. "$(dirname "$0")/rag_eval_env.sh"
"$BUILD/bench/rag_eval" --standard --out bench/results "$@"
if command -v gnuplot >/dev/null; then
    gnuplot -e "tsv='bench/results/rag_eval.tsv'; png='bench/results/rag_eval.png'" bench/rag_eval.gp
    echo "written: bench/results/rag_eval.png"
else
    echo "rag_eval.sh: gnuplot not found (apt-get install -y gnuplot-nox): no chart" >&2
fi
