#!/usr/bin/env python3
"""bench/results/serve-*.json -> serve.md (tables, ratios) and serve-ttft.svg
(TTFT of every request per turn, both servers). Standard library only."""
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
WHO = ["kvstitch", "llama-server"]


def load(sc, who):
    p = os.path.join(d, "serve-%s-%s.json" % (sc, who))
    return json.load(open(p)) if os.path.exists(p) else None


lines = ["# kvstitch serve vs llama-server", ""]
mach = os.path.join(d, "serve-machine.txt")
if os.path.exists(mach):
    lines += ["```", open(mach).read().strip(), "```", ""]

mt = {w: load("multiturn", w) for w in WHO}
if mt["kvstitch"] and not mt["llama-server"]:
    a = mt["kvstitch"]
    lines += ["## Multi-turn chat (kvstitch only: no llama-server in this run)", "",
              "| turn | TTFT p50 | TTFT p95 |", "|---:|---:|---:|"]
    for t in sorted(int(t) for t in a["per_turn"]):
        p = a["per_turn"][str(t)]
        lines.append("| %d | %.0f ms | %.0f ms |" % (t, p["ttft_p50_ms"], p["ttft_p95_ms"]))
    lines += ["", "TTFT p50 of turns 2+: %.0f ms (turn 1: %.0f ms, %.1fx). Aggregate decode %.1f tok/s (%d tokens in "
              "%.0f s)." % (a["ttft_p50_later_turns_ms"], a["per_turn"]["1"]["ttft_p50_ms"],
                            a["per_turn"]["1"]["ttft_p50_ms"] / a["ttft_p50_later_turns_ms"], a["decode_tok_s"],
                            a["completion_tokens"], a["wall_s"]), ""]
if all(mt.values()):
    turns = sorted(int(t) for t in mt["kvstitch"]["per_turn"])
    lines += ["## Multi-turn chat", "", "| turn | kvstitch TTFT p50 / p95 | llama-server TTFT p50 / p95 | p50 ratio |",
              "|---:|---:|---:|---:|"]
    for t in turns:
        a, b = mt["kvstitch"]["per_turn"][str(t)], mt["llama-server"]["per_turn"][str(t)]
        lines.append("| %d | %.0f / %.0f ms | %.0f / %.0f ms | %.1fx |" % (
            t, a["ttft_p50_ms"], a["ttft_p95_ms"], b["ttft_p50_ms"], b["ttft_p95_ms"], b["ttft_p50_ms"] / a["ttft_p50_ms"]))
    a, b = mt["kvstitch"], mt["llama-server"]
    lines += ["", "TTFT p50 of turns 2+: kvstitch %.0f ms, llama-server %.0f ms (%.1fx). Aggregate decode: kvstitch "
              "%.1f tok/s, llama-server %.1f tok/s (%.2fx); %d vs %d completion tokens in %.0f vs %.0f s." % (
                  a["ttft_p50_later_turns_ms"], b["ttft_p50_later_turns_ms"],
                  b["ttft_p50_later_turns_ms"] / a["ttft_p50_later_turns_ms"], a["decode_tok_s"], b["decode_tok_s"],
                  a["decode_tok_s"] / b["decode_tok_s"], a["completion_tokens"], b["completion_tokens"], a["wall_s"],
                  b["wall_s"]), ""]
    # Chart: every request's TTFT per turn, kvstitch left, llama-server right.
    W, H, L, B = 760, 360, 60, 40
    ymax = max(x for w in WHO for t in turns for x in mt[w]["per_turn"][str(t)]["ttft_ms"]) * 1.1
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, H), '<rect width="100%" height="100%" fill="white"/>']
    px = lambda t, k: L + (t - 0.5) * (W - L - 20) / len(turns) + (k - 0.5) * 24
    py = lambda v: H - B - v / ymax * (H - B - 20)
    for i in range(6):
        v = ymax * i / 5
        svg.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">'
                   '%.0f</text>' % (L, W - 20, py(v), py(v), L - 4, py(v) + 4, v))
    for t in turns:
        svg.append('<text x="%.1f" y="%d" text-anchor="middle">turn %d</text>' % (px(t, 0.5), H - B + 16, t))
        for k, (w, col) in enumerate(zip(WHO, ["#2f7d32", "#c62828"])):
            xs = mt[w]["per_turn"][str(t)]["ttft_ms"]
            for j, v in enumerate(xs):
                svg.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.6"/>' % (
                    px(t, k) + (j % 5 - 2) * 2, py(v), col))
            med = mt[w]["per_turn"][str(t)]["ttft_p50_ms"]
            svg.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>' % (
                px(t, k) - 8, px(t, k) + 8, py(med), py(med), col))
    svg.append('<text x="14" y="%d" transform="rotate(-90 14 %d)">TTFT (ms)</text>' % (H // 2, H // 2))
    svg.append('<text x="%d" y="14" fill="#2f7d32">kvstitch</text><text x="%d" y="14" fill="#c62828">llama-server'
               '</text><text x="%d" y="14">(dots: requests, bars: medians)</text>' % (L, L + 70, L + 170))
    svg.append("</svg>")
    open(os.path.join(d, "serve-ttft.svg"), "w").write("\n".join(svg))
    lines += ["![TTFT per turn](serve-ttft.svg)", ""]

rag = {w: load("rag", w) for w in WHO}
if rag["kvstitch"] and not rag["llama-server"]:
    a = rag["kvstitch"]
    lines += ["## RAG (6 of 20 passages, random order; kvstitch only)", "",
              "TTFT p50 %.0f ms, p95 %.0f ms, %s prompt tokens on average." % (
                  a["ttft_p50_ms"], a["ttft_p95_ms"], a["prompt_tokens_mean"]), ""]
if all(rag.values()):
    a, b = rag["kvstitch"], rag["llama-server"]
    ks = [x[6] for x in a["samples"] if len(x) > 6 and x[6]]
    strat = sorted({k["strategy"] for k in ks if k.get("strategy")}) or ["?"]
    mean = lambda key: sum(k.get(key) or 0 for k in ks) / len(ks) if ks else float("nan")
    lines += ["## RAG (6 of 20 passages, random order)", "", "| server | TTFT p50 | TTFT p95 | prompt tokens (mean) |",
              "|---|---:|---:|---:|",
              "| kvstitch (`documents`, default repair: %s) | %.0f ms | %.0f ms | %s |" % (
                  "/".join(strat), a["ttft_p50_ms"], a["ttft_p95_ms"], a["prompt_tokens_mean"]),
              "| llama-server (documents in the user message, --cache-reuse 256) | %.0f ms | %.0f ms | %s |" % (
                  b["ttft_p50_ms"], b["ttft_p95_ms"], b["prompt_tokens_mean"]),
              "", "TTFT p50 ratio: %.1fx." % (b["ttft_p50_ms"] / a["ttft_p50_ms"]), ""]
    if ks:
        lines += ["Where kvstitch's prompt KV came from, mean per request: %.0f exact prefix, %.0f moved (reused), "
                  "%.0f recomputed by the repair, %.0f computed (documents not cached yet, the question)." % (
                      mean("cached_tokens"), mean("moved_tokens"), mean("recomputed_tokens"),
                      mean("computed_tokens")), ""]
    # Quality beside the speed: the same greedy requests on both servers; llama-server computes
    # every prompt token, so an answer that differs shows what reuse (or the other kernels) changed.
    if all(len(x) > 5 for x in a["samples"] + b["samples"]):
        ta, tb = {x[5]: x[3] for x in a["samples"]}, {x[5]: x[3] for x in b["samples"]}
        same = sum(1 for i in ta if i in tb and ta[i].strip() == tb[i].strip())
        lines += ["Answers identical to llama-server's (greedy, same request): %d of %d." % (same, len(ta)), ""]

sc = {w: load("scaling", w) for w in WHO}
if sc["kvstitch"] and not sc["llama-server"]:
    lines += ["## Throughput scaling (aggregate decode tok/s; kvstitch only)", "", "| streams | tok/s |", "|---:|---:|"]
    for n in sorted((k for k in sc["kvstitch"] if k.isdigit()), key=int):
        lines.append("| %s | %.1f |" % (n, sc["kvstitch"][n]["decode_tok_s"]))
    lines.append("")
if all(sc.values()):
    lines += ["## Throughput scaling (aggregate decode tok/s)", "", "| streams | kvstitch | llama-server | ratio |",
              "|---:|---:|---:|---:|"]
    for n in sorted(sc["kvstitch"], key=lambda x: int(x) if x.isdigit() else 0):
        if n == "args":
            continue
        a, b = sc["kvstitch"][n], sc["llama-server"][n]
        lines.append("| %s | %.1f | %.1f | %.2fx |" % (n, a["decode_tok_s"], b["decode_tok_s"],
                                                       a["decode_tok_s"] / b["decode_tok_s"]))
    lines.append("")

open(os.path.join(d, "serve.md"), "w").write("\n".join(lines))
print("\n".join(lines))
