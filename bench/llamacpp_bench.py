#!/usr/bin/env python3
"""Peer benchmark: llama.cpp (through llama-cpp-python's ctypes API) on a GGUF.

Measures what llama-bench calls pp<P> (prefill of P tokens into an empty KV
cache) and tg<N> (N single-token decodes into an empty KV cache), the median
over --reps runs after one warm-up, and prints one JSON object:

  {"engine": "llama.cpp", "pp512_tok_s": ..., "pp2048_tok_s": ...,
   "tg128_tok_s": ..., "pp512_tok_s_runs": [...], "pp512_perf_tok_s": ...,
   "threads": T, "n_batch": B, "n_ubatch": U, "flash_attn": ..., ...}

It drives the low-level API (llama_decode on llama_batch_get_one) rather than
Llama.eval, so no per-token Python work (logits copies, batch filling loops)
lands inside the timed region. The *_perf_tok_s fields are the same runs as
llama.cpp itself timed them (llama_perf_context): if they diverge from the
wall-clock figures by more than a few percent, Python overhead is distorting
the measurement, and the script says so on stderr.

--logits TEXT instead prints llama.cpp's last-position logits for TEXT
(tokenized by llama.cpp, special tokens parsed): top-k ids, logits, pieces.

Run it with the venv from scripts/setup-llamacpp.sh.
"""
import argparse
import ctypes
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

try:
    import llama_cpp
except ImportError:
    sys.stderr.write("llamacpp_bench: llama_cpp is not importable; "
                     "install it with scripts/setup-llamacpp.sh\n")
    sys.exit(3)


@llama_cpp.llama_log_callback
def _quiet_log(level, text, user_data):
    # llama.cpp logs model loading line by line on stderr; the JSON on stdout
    # is what the caller wants, and errors still surface as failed calls.
    pass


def request_amx():
    """Asks Linux for AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA). Without it the first AMX instruction is an illegal
    instruction, and the llama.cpp in llama-cpp-python 0.3.36 uses AMX for
    Q4_1 on CPUs that have it without asking first (SIGILL in
    ggml_backend_amx_mul_mat on this machine). Asking is harmless elsewhere:
    the call fails and llama.cpp takes its other paths. Returns True if granted."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18
        return libc.syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


FA_TYPES = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
            "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
            "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED}


def bench_tokens(n, n_vocab, seed):
    """Fixed pseudo-random token ids in [0, n_vocab): the same 64-bit LCG
    as tools/cmd_bench.c, so with seed 42 both engines see the same ids.
    Token identity does not change the cost of a dense forward pass;
    fixing them makes runs repeatable and the engines comparable."""
    out = []
    x = seed & 0xFFFFFFFFFFFFFFFF
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        out.append((x >> 33) % n_vocab)
    return out


class Engine:
    def __init__(self, path, threads, n_ctx, n_batch, n_ubatch, flash_attn, extra_bufts):
        self.amx_permitted = request_amx()
        llama_cpp.llama_log_set(_quiet_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        # The CPU "extra" buffer types: AMX and repacked weight layouts.
        mp.use_extra_bufts = extra_bufts
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit(f"llamacpp_bench: {path}: llama.cpp could not load the model")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_ubatch
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = FA_TYPES[flash_attn]
        cp.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit(f"llamacpp_bench: {path}: llama.cpp could not create a context (n_ctx={n_ctx})")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.extra_bufts = extra_bufts

    def clear(self):
        llama_cpp.llama_memory_clear(self.mem, True)

    def decode(self, arr, offset, n):
        """Decodes n tokens of the ctypes array arr starting at offset, at the
        next positions of sequence 0; logits only for the last token."""
        ptr = ctypes.cast(ctypes.byref(arr, offset * ctypes.sizeof(llama_cpp.llama_token)),
                          ctypes.POINTER(llama_cpp.llama_token))
        batch = llama_cpp.llama_batch_get_one(ptr, n)
        rc = llama_cpp.llama_decode(self.ctx, batch)
        if rc != 0:
            raise SystemExit(f"llamacpp_bench: llama_decode failed ({rc})")

    def prefill(self, arr, n):
        for off in range(0, n, self.n_batch):
            self.decode(arr, off, min(self.n_batch, n - off))

    def perf(self):
        return llama_cpp.llama_perf_context(self.ctx)

    def perf_reset(self):
        llama_cpp.llama_perf_context_reset(self.ctx)

    def sync(self):
        llama_cpp.llama_synchronize(self.ctx)


def run_pp(eng, toks, p):
    """One prefill of p tokens into an empty cache: (wall tok/s, llama.cpp's tok/s)."""
    arr = (llama_cpp.llama_token * p)(*toks[:p])
    eng.clear()
    eng.perf_reset()
    t0 = time.perf_counter()
    eng.prefill(arr, p)
    eng.sync()
    dt = time.perf_counter() - t0
    pc = eng.perf()
    perf = pc.n_p_eval / (pc.t_p_eval_ms / 1e3) if pc.t_p_eval_ms > 0 else None
    return p / dt, perf


def run_tg(eng, toks, n):
    """n single-token decodes into an empty cache, as llama-bench's tg."""
    arr = (llama_cpp.llama_token * n)(*toks[:n])
    eng.clear()
    eng.perf_reset()
    t0 = time.perf_counter()
    for i in range(n):
        eng.decode(arr, i, 1)
    eng.sync()
    dt = time.perf_counter() - t0
    pc = eng.perf()
    perf = pc.n_eval / (pc.t_eval_ms / 1e3) if pc.t_eval_ms > 0 else None
    return n / dt, perf


def piece(eng, tok):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(eng.vocab, tok, buf, len(buf), 0, True)
    return buf.raw[:max(n, 0)].decode("utf-8", errors="replace")


def tokenize(eng, text):
    raw = text.encode("utf-8")
    cap = len(raw) + 16
    out = (llama_cpp.llama_token * cap)()
    # add_special=True: BOS only if the model's metadata asks for it;
    # parse_special=True: "<|im_start|>" becomes its control token.
    n = llama_cpp.llama_tokenize(eng.vocab, raw, len(raw), out, cap, True, True)
    if n < 0:
        raise SystemExit("llamacpp_bench: tokenize failed")
    return list(out[:n])


def do_logits(eng, text, top_k, ref_path=None):
    toks = tokenize(eng, text)
    arr = (llama_cpp.llama_token * len(toks))(*toks)
    eng.clear()
    eng.prefill(arr, len(toks))
    ptr = llama_cpp.llama_get_logits_ith(eng.ctx, -1)
    logits = [ptr[i] for i in range(eng.n_vocab)]
    raw = (ctypes.c_float * eng.n_vocab)(*logits)
    mx = max(logits)
    import math
    lse = mx + math.log(sum(math.exp(v - mx) for v in logits))
    order = sorted(range(eng.n_vocab), key=lambda i: (-logits[i], i))[:top_k]
    out = {
        "engine": "llama.cpp",
        "llama_cpp_python": llama_cpp.__version__,
        "extra_bufts": eng.extra_bufts,
        "prompt": text,
        "prompt_tokens": toks,
        "logits_sha256": hashlib.sha256(bytes(raw)).hexdigest(),
        "top": [{"id": i, "logit": logits[i], "logprob": logits[i] - lse,
                 "piece": piece(eng, i)} for i in order],
    }
    if ref_path:
        # A float32 logits file of the same prompt from another engine (e.g.
        # tests/data/golden/*.f32 from the numpy reference): how far apart.
        with open(ref_path, "rb") as f:
            ref = (ctypes.c_float * eng.n_vocab).from_buffer_copy(f.read())
        diffs = [abs(a - b) for a, b in zip(logits, ref)]
        ref_order = sorted(range(eng.n_vocab), key=lambda i: (-ref[i], i))[:top_k]
        out["ref"] = {"file": ref_path,
                      "max_abs_diff": max(diffs),
                      "mean_abs_diff": sum(diffs) / len(diffs),
                      "top1_agree": ref_order[0] == order[0],
                      "top": [{"id": i, "logit": ref[i]} for i in ref_order]}
    return out


def probe_extra_bufts(a):
    """Runs a small prefill with the extra buffer types in a child process:
    if the child dies of a signal (the AMX path's SIGILL), the benchmark runs
    without them, and says so. Returns (use_extra_bufts, note or None)."""
    cmd = [sys.executable, __file__, "--probe", "-m", a.model, "-t", str(a.threads),
           "--n-batch", str(a.n_batch), "--n-ubatch", str(a.n_ubatch),
           "--flash-attn", a.flash_attn]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode == 0:
        return True, None
    why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
    return False, (f"llama.cpp with its extra CPU buffer types (AMX / repack) failed "
                   f"a probe ({why}); measured without them (use_extra_bufts=false)")


def logits_text(d, fa):
    """The --logits result as a few readable lines (bench/results/*.txt)."""
    lines = [f"== prompt: {json.dumps(d['prompt'])}",
             f"   flash_attn {fa}, extra_bufts (AMX) {d['extra_bufts']}; "
             f"{len(d['prompt_tokens'])} tokens: {' '.join(map(str, d['prompt_tokens']))}",
             f"   sha256 of the float32 logits: {d['logits_sha256']}",
             "   top-5  id     logit      logprob  piece"]
    for t in d["top"]:
        lines.append(f"         {t['id']:<6} {t['logit']:9.4f} {t['logprob']:9.4f}  {json.dumps(t['piece'])}")
    r = d.get("ref")
    if r:
        lines.append(f"   vs the float64 numpy reference ({r['file']}): max |diff| "
                     f"{r['max_abs_diff']:.4f}, mean |diff| {r['mean_abs_diff']:.4f}, "
                     f"top-1 agrees: {r['top1_agree']}")
        lines.append("   reference top-5: " + ", ".join(f"{t['id']} {t['logit']:.4f}" for t in r["top"]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--prompt-lengths", default="512,2048",
                    help="comma-separated prefill lengths (default 512,2048)")
    ap.add_argument("-n", "--gen", type=int, default=128, help="decode tokens (default 128)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--flash-attn", choices=sorted(FA_TYPES), default="auto",
                    help="llama.cpp flash attention (default auto, as llama-bench)")
    ap.add_argument("--extra-bufts", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp's AMX / repacked weight buffers; auto: on unless a "
                         "probe in a child process crashes with them (default auto)")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=42,
                    help="seed of the token ids (default 42: the ids `kvstitch bench` uses)")
    ap.add_argument("--logits", metavar="TEXT", help="print last-position logits for TEXT instead")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--text", action="store_true", help="with --logits: readable lines, not JSON")
    ap.add_argument("--logits-ref", metavar="F32", help="with --logits: compare with this float32 logits file")
    a = ap.parse_args()

    pps = [int(x) for x in a.prompt_lengths.split(",") if x.strip()]
    n_ctx = max(pps + [a.gen, 4096]) + 16
    if a.probe:   # child of probe_extra_bufts: one small prefill and decode
        eng = Engine(a.model, a.threads, 256, a.n_batch, a.n_ubatch, a.flash_attn, True)
        run_pp(eng, bench_tokens(64, eng.n_vocab, 1), 64)
        run_tg(eng, bench_tokens(2, eng.n_vocab, 1), 2)
        return 0
    extra, note = a.extra_bufts == "on", None
    if a.extra_bufts == "auto":
        extra, note = probe_extra_bufts(a)
    eng = Engine(a.model, a.threads, n_ctx, a.n_batch, a.n_ubatch, a.flash_attn, extra)

    if a.logits is not None:
        d = do_logits(eng, a.logits, a.top_k, a.logits_ref)
        print(logits_text(d, a.flash_attn) if a.text else json.dumps(d))
        return 0

    toks = bench_tokens(max(pps + [a.gen]), eng.n_vocab, a.seed)
    if note:
        sys.stderr.write(f"llamacpp_bench: {note}\n")
    res = {"engine": "llama.cpp", "llama_cpp_python": llama_cpp.__version__,
           "threads": a.threads, "n_batch": a.n_batch, "n_ubatch": a.n_ubatch,
           "flash_attn": a.flash_attn, "extra_bufts": extra,
           "amx_permitted": eng.amx_permitted, "reps": a.reps, "seed": a.seed}
    if note:
        res["note"] = note
    # One warm-up (as llama-bench): page in the mmapped weights, size buffers.
    run_pp(eng, toks, min(pps) if pps else 32)
    run_tg(eng, toks, min(a.gen, 8) if a.gen > 0 else 1)
    worst = 0.0
    tests = [("pp", p) for p in pps] + ([("tg", a.gen)] if a.gen > 0 else [])
    for kind, n in tests:
        walls, perfs = [], []
        c0, t0 = os.times(), time.perf_counter()
        for _ in range(a.reps):
            w, p = (run_pp if kind == "pp" else run_tg)(eng, toks, n)
            walls.append(w)
            perfs.append(p)
        c1, t1 = os.times(), time.perf_counter()
        key = f"{kind}{n}"
        # CPU time this process got / (wall time x threads): well under 1
        # means the (shared) machine was busy and the figure is depressed.
        res[f"{key}_cpu_share"] = ((c1.user - c0.user) + (c1.system - c0.system)) / \
            ((t1 - t0) * a.threads)
        res[f"{key}_tok_s"] = statistics.median(walls)
        res[f"{key}_tok_s_runs"] = walls
        good = [p for p in perfs if p]
        if good:
            res[f"{key}_perf_tok_s"] = statistics.median(good)
            worst = max(worst, abs(res[f"{key}_perf_tok_s"] / res[f"{key}_tok_s"] - 1))
    res["wall_vs_perf_max_rel_diff"] = worst
    if worst > 0.05:
        sys.stderr.write(f"llamacpp_bench: wall-clock and llama.cpp's own timings differ by "
                         f"{worst:.1%}: Python overhead or a busy machine distorts the figures\n")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
