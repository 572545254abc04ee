#!/usr/bin/env python3
"""Writes the roofline report (markdown) from bench/roofline.sh's raw outputs.

usage: roofline_report.py PROBE KERNELS RUNS CPU NPROC COMMIT PP NGEN ROUNDS REPS PEER PARAMS [AMX]
  PROBE    roofline_probe output      KERNELS  bench_kernels --cpu output
  RUNS     one JSON object per run (who, type, threads, pp, tg[, bytes]), and per type
           the probe's read over a buffer of the file's size (who "probe", wall GB/s)
  PARAMS   parameters of the SmolLM2 model (multiply-adds per token, ~ all weights);
           type gemma3 (the Q4_K_M file) gets no int8 share: 168M of its 268M
           parameters are the embedding, which prefill does not multiply
  AMX      1 where our prefill ran on AMX tiles: RUNS then also hold prefill without
           AMX (who "ours_noamx", KVS_AMX=0), reported beside it, and the batch of
           streams without AMX (who "ours_streams_noamx") beside the batch
  RUNS may hold llama.cpp's parallel sequences (who "llama_streams": tg the
  aggregate, tg1 one sequence, from llama-batched-bench), reported beside ours.
"""
import json
import re
import statistics
import sys


STEP_DOTS = 256  # block dots in one AMX block step: 16 rows x 16 columns (roofline_probe.c AMX_STEP_DOTS)


def figures(f):
    """The "name value name value ..." tail of a probe line (from its 5th field) as a dict."""
    return dict(zip(f[4::2], map(float, f[5::2])))


def parse_probe(path):
    probe = {"read": {}, "int8": {}, "int8_float": {}, "clock": {}, "amx": {}, "overlap": None, "overlap_by_op": None,
             "load": "?", "isa": "?"}
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "load":
            probe["load"] = " ".join(f[1:4])
        elif f[0] == "isa":
            probe["isa"] = f[1]
        elif f[0] in ("read_gbs", "int8_gmacs"):
            kv = figures(f)
            key = "read" if f[0] == "read_gbs" else "int8"
            if key == "int8" and f[1] != probe["isa"]:
                continue  # the peak of the path the matmuls use
            probe[key][int(f[3])] = kv
        elif f[0] == "int8_float_gmacs" and f[1] == probe["isa"]:
            probe["int8_float"][int(f[3])] = figures(f)
        elif f[0] == "clock_ghz":
            probe["clock"][int(f[3])] = figures(f)
        elif f[0] in ("amx_gmacs", "amx_block_gdots"):
            probe["amx"].setdefault((f[0], f[1]), {})[int(f[3])] = figures(f)
        elif f[0] == "amx_overlap":
            probe["overlap"] = figures(f)
        elif f[0] == "amx_overlap_by_op":
            probe["overlap_by_op"] = figures(f)
    return probe


def amx_section(probe, w):
    """The AMX tile ceilings (roofline_probe's amx_* lines), where the probe found AMX."""
    a = probe["amx"]
    cols = [("amx_gmacs", "bf16", "TDPBF16PS GMAC/s"), ("amx_gmacs", "int8", "TDPBSSD GMAC/s"),
            ("amx_block_gdots", "q4", "block step Q4 G dots/s"), ("amx_block_gdots", "q8", "block step Q8_0 G dots/s")]
    w("\nAMX tiles (CPU time, median / best):\n")
    w("| threads | " + " | ".join(c[2] for c in cols) + " |")
    w("|---:|" + "---:|" * len(cols))
    for t in sorted({t for v in a.values() for t in v}):
        w("| %d | %s |" % (t, " | ".join(
            "%.1f / %.1f" % (a[c[:2]][t]["cpu_median"], a[c[:2]][t]["cpu_best"]) if t in a.get(c[:2], {}) else "-"
            for c in cols)))
    text = ("\nA block step is the tile work our AMX prefill cannot do without for 16 x 16 outputs of one "
            "32-element block (`src/kernels/matmul_amx.c`): the hi and lo products and the tile store that hands "
            "the exact integer dots to the float epilogue; Q8_0's dots reach 2^27, so its two levels need a tile "
            "and a store each. A tile store costs about what a product does, so a step runs far below the "
            "TDPBF16PS peak.")
    o = probe["overlap"]
    if o:
        text += (" Overlap, one thread: %.1f ns of Q8_0 block steps and %.1f ns of their vector epilogue (16 rows: "
                 "two loads, add, mul, fma) took %.1f ns interleaved, %.2f of their sum: here the tile unit and the "
                 "vector unit %s, so a prefill's epilogue adds to its tile time (Q8_0's ceiling with its epilogue: "
                 "%.1f G dots/s a thread)." % (
                     o["tiles_ns"], o["vector_ns"], o["both_ns"], o["ratio"],
                     "hardly overlap" if o["ratio"] > 0.85 else "partly overlap", STEP_DOTS / o["both_ns"]))
    b = probe["overlap_by_op"]
    if b and o:
        def hidden(alone, with_vector):
            return max(0.0, (alone + o["vector_ns"] - with_vector) / alone)
        text += (" By operation: the step's two products alone %.1f ns, with the epilogue %.1f ns (%.0f%% of them "
                 "hidden); its two tile stores alone %.1f ns, with the epilogue %.1f ns (%.0f%% hidden)%s." % (
                     b["products_ns"], b["products_vector_ns"], 100 * hidden(b["products_ns"], b["products_vector_ns"]),
                     b["stores_ns"], b["stores_vector_ns"], 100 * hidden(b["stores_ns"], b["stores_vector_ns"]),
                     ": the stores are what the tiles add to the vector work" if hidden(b["stores_ns"], b["stores_vector_ns"])
                     < 0.5 * hidden(b["products_ns"], b["products_vector_ns"]) else ""))
    w(text + "\n")


KERNEL_RE = re.compile(r"t=(\d+)\s+(.+?)\s+(Q4_0|Q4_1|Q8_0|F16|F32)( packed)?\s+m=(\d+)\s+([\d.]+) us\s+"
                       r"([\d.]+) GOPS\s+([\d.]+) GB/s")


def parse_kernels(path):
    rows = []
    for line in open(path):
        m = KERNEL_RE.search(line)
        if m:
            rows.append({"shape": m.group(2).strip(), "type": m.group(3), "packed": bool(m.group(4)),
                         "m": int(m.group(5)), "us": float(m.group(6)), "gops": float(m.group(7)),
                         "gbs": float(m.group(8))})
    return rows


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(x, spec="%.0f"):
    return "-" if x is None else spec % x


def block_share(probe, typ, th, pp, params):
    """Prefill's block dots/s as a share of the AMX block-step ceiling (SmolLM2's quantized types)."""
    step = probe["amx"].get(("amx_block_gdots", "q8" if typ == "Q8_0" else "q4"), {}).get(th, {}).get("wall_median")
    if not step or not pp or typ in ("F16", "gemma3"):
        return None
    return pp * params / 32 / (step * 1e9) * 100


def main():
    (probe_p, kern_p, runs_p, cpu, nproc, commit, pp, ngen, rounds, reps, peer, params) = sys.argv[1:13]
    amx = len(sys.argv) > 13 and sys.argv[13] == "1"
    # a prompt token's MACs: the output head runs on the last row only (the
    # caller passes params less the head's vocabulary x embedding)
    pp_macs = float(sys.argv[14]) if len(sys.argv) > 14 else float(params)
    probe, kern = parse_probe(probe_p), parse_kernels(kern_p)
    runs = [json.loads(l) for l in open(runs_p) if l.strip()]
    params = float(params)
    out = []
    w = out.append
    w("# Roofline: %s (%s cores, ISA path %s)\n" % (cpu, nproc, probe["isa"] + (" + AMX tiles for prefill" if amx else "")))
    w("Commit %s. Load average at the probe: %s (the machine is shared: wall-clock figures are what it "
      "gave during this run; CPU-time figures are what a core gives while it runs). Written by "
      "`bench/roofline.sh`.\n" % (commit, probe["load"]))
    w("## Ceilings (build/bench/roofline_probe)\n")
    w("| threads | read GB/s, CPU time (median / best) | read GB/s, wall (median / best) | int8 GMAC/s (%s), CPU time | int8 GMAC/s, wall "
      "| with the float steps, CPU time / wall | core clock GHz, CPU time / wall |" % probe["isa"])
    w("|---:|---:|---:|---:|---:|---:|---:|")
    for t in sorted(probe["read"]):
        r, i, c = probe["read"][t], probe["int8"].get(t, {}), probe["clock"].get(t, {})
        fl = probe["int8_float"].get(t, {})
        clock = "%.2f / %.2f" % (c["cpu_median"], c["wall_median"]) if c else "-"
        flt = "%.1f / %.1f" % (fl["cpu_median"], fl["wall_median"]) if fl else "-"
        w("| %d | %.1f / %.1f | %.1f / %.1f | %s | %s | %s | %s |" % (t, r["cpu_median"], r["cpu_best"], r["wall_median"], r["wall_best"],
                                                                 fmt(i.get("cpu_median"), "%.1f"), fmt(i.get("wall_median"), "%.1f"), flt, clock))
    w("\nint8 MACs: vpmaddubsw = 32, vpdpbusd = 64. The two-level activations (quant.h) cost two int8 "
      "MACs per weight multiply-add. Core clock: a chain of dependent register adds on each thread "
      "(base/core_clock.h), the threads' mean: on a quiet machine the cores' clock; below it, or a wall "
      "figure below the CPU-time one, the host gave less than whole cores. With the float steps: the same "
      "vpdpbusd chains beside the scale product and the accumulation (one mul and one fma per 16 "
      "vpdpbusd) that every AVX-512 integer kernel owes the reference per block group: the kernels' own "
      "ceiling on a core that issues vpdpbusd, mul and fma on the same pipes (Zen 5: 16 / 18 of the peak; "
      "Q4_1 owes one fma more, 16 / 19).")
    if probe["amx"]:
        amx_section(probe, w)
    else:
        w("")

    bw1 = probe["read"].get(1, {}).get("cpu_median")
    pk1 = probe["int8"].get(1, {}).get("cpu_median")
    w("## Kernels, 1 thread, thread CPU time (build/bench/bench_kernels --cpu)\n")
    w("SmolLM2-135M shapes, random weights. m = 1 is one decode step; share of bandwidth = weight GB/s / "
      "read GB/s (CPU time, 1 thread, %s); share of int8 peak = two-level int8 MAC/s / peak (%s). m = 8: "
      "eight rows (streams) in one call; speedup = 8 x time(m = 1) / time(m = 8). The call is repeated on one "
      "matrix, so all but the output head are read from cache: a share above 100%% says the kernel "
      "outruns DRAM there, not that it would in a model.\n"
      % (fmt(bw1, "%.1f"), fmt(pk1, "%.1f")))
    w("| matrix | type | rows | m = 1 us | weight GB/s | share of bandwidth | share of int8 peak | m = 8 us | batch speedup |")
    w("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in kern:
        if r["m"] != 1:
            continue
        r8 = next((x for x in kern if x["m"] == 8 and x["shape"] == r["shape"] and x["packed"] == r["packed"]), None)
        quant = r["type"] in ("Q4_0", "Q4_1", "Q8_0")
        w("| %s | %s | %s | %.1f | %.1f | %s | %s | %s | %s |" % (
            r["shape"], r["type"], "packed" if r["packed"] else "GGUF", r["us"], r["gbs"],
            fmt(r["gbs"] / bw1 * 100 if bw1 else None, "%.0f%%"),
            fmt(r["gops"] / pk1 * 100 if pk1 and quant else None, "%.0f%%"),
            fmt(r8["us"] if r8 else None, "%.1f"), fmt(8 * r["us"] / r8["us"] if r8 else None, "%.1fx")))

    w("\n## Model: SmolLM2-135M (type gemma3: gemma-3-270m Q4_K_M), kvstitch bench vs llama-bench (wall clock)\n")
    w("Same file, same threads; %s rounds alternating ours and llama.cpp, each the median of %s reps; "
      "medians over the rounds. tg = decode of %s tokens, pp = prefill of %s. Decode bound = wall read "
      "GB/s of the probe at that thread count (the best of its reps: a ceiling, which other tenants' "
      "traffic only lowers), read over a buffer the size of the file (the working set "
      "a decode step walks through), / weight bytes per token; DRAM bound: the same from the 256 MiB "
      "read (the two differ where the last-level cache holds part of the weights). Prefill int8 share = pp tok/s x "
      "%.0fM MACs (a prompt token's: the output head runs on the last row only) x 2 (two-level) / wall int8 peak "
      "(quantized types). Peer: %s.\n"
      % (rounds, reps, ngen, pp, pp_macs / 1e6, peer))
    if amx:
        w("Our prefill runs on AMX tiles here (Q4_0 / Q4_1 / Q5_0 / Q4_K / Q8_0 matrices: `src/kernels/matmul_amx.c`; the other types "
          "on AVX-512 VNNI), each shape's calls on the tiles or on AVX-512 by their measured speed unless KVS_AMX=1 "
          "(`src/kernels/path_tuner.c`); \"pp ours, no AMX\" is the same run's prefill with KVS_AMX=0 (AVX-512 VNNI for "
          "every type), its ratio against the same llama.cpp runs (which use AMX where ggml has AMX kernels). "
          "The int8 share is of the VNNI peak: AMX prefill can pass 100%%. The block-step share is of the "
          "AMX ceiling above: pp tok/s x %.0fM / 32 block dots / wall block steps' dots/s at that thread "
          "count (Q8_0: its own step; the other AMX types: the Q4 step).\n" % (pp_macs / 1e6))
    w("| type | threads | tg ours | tg llama.cpp | ours / llama.cpp | bound | share of bound | DRAM bound | pp ours | pp llama.cpp | ours / llama.cpp | pp share of int8 peak |"
      + (" pp share of AMX block steps | pp ours, no AMX | no AMX / llama.cpp |" if amx else ""))
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if amx else ""))
    keys = sorted({(r["type"], r["threads"]) for r in runs if r["who"] != "probe"}, key=lambda k: (["Q4_1", "Q4_0", "Q8_0", "F16", "gemma3"].index(k[0])
                                                                             if k[0] in ("Q4_1", "Q4_0", "Q8_0", "F16", "gemma3") else 9, k[1]))
    for typ, th in keys:
        ours = [r for r in runs if r["who"] == "ours" and r["type"] == typ and r["threads"] == th]
        peer_r = [r for r in runs if r["who"] == "llama.cpp" and r["type"] == typ and r["threads"] == th]
        tg, pp_o = med([r["tg"] for r in ours]), med([r["pp"] for r in ours])
        tg_p, pp_p = med([r["tg"] for r in peer_r]), med([r["pp"] for r in peer_r])
        pp_n = med([r["pp"] for r in runs if r["who"] == "ours_noamx" and r["type"] == typ and r["threads"] == th])
        nbytes = ours[0]["bytes"] if ours else None
        bw = probe["read"].get(th, {}).get("wall_best")
        dram = bw * 1e9 / nbytes if bw and nbytes else None
        sized = [r["wall"] for r in runs if r["who"] == "probe" and r["type"] == typ and r["threads"] == th]
        bound = sized[0] * 1e9 / nbytes if sized and nbytes else dram
        pk = probe["int8"].get(th, {}).get("wall_median")
        ppshare = pp_o * pp_macs * 2 / (pk * 1e9) * 100 if pk and pp_o and typ not in ("F16", "gemma3") else None
        w("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            typ, th, fmt(tg, "%.1f"), fmt(tg_p, "%.1f"), fmt(tg / tg_p if tg and tg_p else None, "%.2fx"),
            fmt(bound, "%.1f"), fmt(tg / bound * 100 if tg and bound else None, "%.0f%%"), fmt(dram, "%.1f"),
            fmt(pp_o, "%.1f"), fmt(pp_p, "%.1f"), fmt(pp_o / pp_p if pp_o and pp_p else None, "%.2fx"),
            fmt(ppshare, "%.0f%%")) + ("" if not amx else " %s | %s | %s |" % (
            fmt(block_share(probe, typ, th, pp_o, pp_macs), "%.0f%%"),
            fmt(pp_n, "%.1f"), fmt(pp_n / pp_p if pp_n and pp_p else None, "%.2fx"))))
    batched = [r for r in runs if r["who"] == "ours_streams"]
    if batched:
        ns = batched[0]["streams"]
        w("\n## Batched decode: %d streams in one step (kvstitch bench --streams %d)\n" % (ns, ns))
        w("Aggregate decode tok/s of %d sequences stepped together (kvs_decode_batch: each weight matrix read "
          "once per step for all of them, every row's bits those of the sequence alone), medians over the "
          "rounds; speedup = aggregate / one-stream decode (tg ours above). Issue #16's target: >= 5x at 8 "
          "streams. Share of the float-step ceiling: aggregate tok/s x %.0fM MACs (a decoded token's, the head "
          "included) x 2 (two-level) / the wall int8 GMAC/s with the float steps at that thread count, the whole "
          "step (attention, norms) counted against the matmuls' ceiling (quantized SmolLM2 types%s); 5x: the share "
          "five one-stream decodes would need.\n"
          % (ns, params / 1e6, "; where the batch runs on AMX tiles it can pass 100%" if amx else ""))
        if amx:
            w("\"Without AMX\" is the same run's batch with KVS_AMX=0: the AVX-512 batch paths, which a CPU "
              "without AMX tiles (a Zen 5) runs; one-stream decode never uses the tiles.\n")
        peer = [r for r in runs if r["who"] == "llama_streams"]
        if peer:
            w("llama.cpp: `llama-batched-bench -npl 1,%d` in the same rounds (one-token prompts, the same decode "
              "length): its %d parallel sequences' aggregate decode, its speedup over its own one sequence, "
              "and ours / its aggregate.\n" % (ns, ns))
        w("| type | threads | tg, 1 stream | tg, %d streams (aggregate) | speedup | share of the float-step ceiling | 5x |" % ns
          + (" %d streams without AMX | speedup without AMX |" % ns if amx else "")
          + (" llama.cpp, %d sequences | its speedup | ours / llama.cpp |" % ns if peer else ""))
        w("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if amx else "") + ("---:|---:|---:|" if peer else ""))
        for typ, th in keys:
            one = med([r["tg"] for r in runs if r["who"] == "ours" and r["type"] == typ and r["threads"] == th])
            agg = med([r["tg"] for r in batched if r["type"] == typ and r["threads"] == th])
            agg_n = med([r["tg"] for r in runs
                         if r["who"] == "ours_streams_noamx" and r["type"] == typ and r["threads"] == th])
            mine = [r for r in peer if r["type"] == typ and r["threads"] == th]
            agg_p, one_p = med([r["tg"] for r in mine]), med([r["tg1"] for r in mine if r.get("tg1")])
            fl = probe["int8_float"].get(th, {}).get("wall_median")
            quant = typ in ("Q4_0", "Q4_1", "Q8_0")
            share = lambda tok_s: tok_s * params * 2 / (fl * 1e9) * 100 if fl and tok_s and quant else None
            w("| %s | %d | %s | %s | %s | %s | %s |" % (typ, th, fmt(one, "%.1f"), fmt(agg, "%.1f"),
                                                     fmt(agg / one if agg and one else None, "%.2fx"),
                                                     fmt(share(agg), "%.0f%%"), fmt(share(5 * one if one else None), "%.0f%%"))
              + ("" if not amx else " %s | %s |" % (fmt(agg_n, "%.1f"),
                                                    fmt(agg_n / one if agg_n and one else None, "%.2fx")))
              + ("" if not peer else " %s | %s | %s |" % (
                  fmt(agg_p, "%.1f"), fmt(agg_p / one_p if agg_p and one_p else None, "%.2fx"),
                  fmt(agg / agg_p if agg and agg_p else None, "%.2fx"))))
    print("\n".join(out))


if __name__ == "__main__":
    main()
