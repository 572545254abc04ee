# Chart of bench/results/rag_eval.tsv (written by bench/rag_eval): TTFT
# speedup over full against fidelity (first-token KL, top-1 agreement), and
# fidelity against the recompute cost (the share of doc token-layers whose
# K/V the repair wrote: deterministic, free of timing noise); one line per
# strategy through its parameter values (cacheblend, query: recompute ratio;
# selective / firstk: tokens per doc). Run by bench/rag_eval.sh:
#   gnuplot -e "tsv='...tsv'; png='...png'" bench/rag_eval.gp
if (!exists("tsv")) tsv = 'bench/results/rag_eval.tsv'
if (!exists("png")) png = 'bench/results/rag_eval.png'
if (!exists("groups")) groups = "cacheblend cacheblend+seams cacheblend+narrow cacheblend+seams+narrow query query+seams selective firstk none"
if (!exists("title")) title = "Non-prefix reuse on RAG prompts (SmolLM2-135M, 6 docs): speedup vs fidelity, fidelity vs recompute cost"
set terminal pngcairo size 1800,600 font ",10" noenhanced
set output png
set datafile separator "\t"
set key below horizontal
set grid
set logscale y 2
set yrange [1:96]
set multiplot layout 1,3 title title
# columns: 1 strategy, 2 param, 3 recomputed_frac, 4 ttft_ms, 5 speedup, 6 kl, 7 top1, 8 exact, 9 f1, 10 em,
# 11 full_f1, 12 fresh_kv_frac, 13 same_answer
# cacheblend* / query*: the recompute ratio (narrow: the final one; it starts at 3x); selective / firstk: tokens per doc
lbl(s, p, f) = (s[1:10] eq "cacheblend" || s[1:5] eq "query") ? sprintf("%.2f", p) : (s eq "none" ? "" : sprintf("%d", p))
set xlabel "first-token KL vs full (lower is better)"
set ylabel "TTFT speedup over full (docs cached)"
plot for [s in groups] tsv using (strcol(1) eq s ? $6 : NaN):5 \
        with linespoints pt 7 ps 1.2 title s, \
     tsv using 6:5:(lbl(strcol(1), $2, 0)) with labels offset 0,0.9 notitle
set xlabel "top-1 agreement over 32 teacher-forced tokens (higher is better)"
plot for [s in groups] tsv using (strcol(1) eq s ? $7 : NaN):5 \
        with linespoints pt 7 ps 1.2 title s, \
     tsv using 7:5:(lbl(strcol(1), $2, 0)) with labels offset 0,0.9 notitle
unset logscale y
set yrange [0:*]
set xrange [0:60]
set xlabel "recompute cost: doc token-layers with fresh K/V, % (full = 100)"
set ylabel "first-token KL vs full (lower is better)"
plot for [s in groups] tsv using (strcol(1) eq s ? 100 * $12 : NaN):6 \
        with linespoints pt 7 ps 1.2 title s, \
     tsv using (100 * $12):6:(lbl(strcol(1), $2, 0)) with labels offset 0,0.9 notitle
unset multiplot
