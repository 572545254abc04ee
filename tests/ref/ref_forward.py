#!/usr/bin/env python3
"""
A small, readable numpy reference forward pass for GGUF Llama models
(and Qwen3, and Llama 3's RoPE frequency factors).

Independent of the C engine: weights are read with the PyPI `gguf` package
(GGUFReader + gguf.quants.dequantize) and every op is plain numpy, computed
in float64 by default (float32 on request). It exists to produce golden data
(tests/ref/gen_golden.py) that the C tests compare against, so clarity wins
over speed: one function per op, no fusion.

Model (GGUF arch "llama"):
    x = token_embd[tokens]                                   # (n, d)
    for each layer:
        h = rmsnorm(x) * attn_norm
        q, k, v = h Wq^T, h Wk^T, h Wv^T                      # (n, H*hd), (n, Hkv*hd) x2
        q, k = rope(q), rope(k)      # ADJACENT pairs (2i, 2i+1), see rope() below
        x += attention(q, k, v) Wo^T  # causal, GQA: q head h uses kv head h // (H/Hkv)
        h = rmsnorm(x) * ffn_norm
        x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T            # SwiGLU
    logits = (rmsnorm(x) * output_norm) Wout^T               # Wout = output or token_embd (tied)

Llama 3.1+ RoPE scaling: theta_i = pos * base^(-2i/d) / ff_i, with ff_i from
the tensor rope_freqs.weight (what llama.cpp's converter writes) or, with
llama.rope.scaling.type = llama3, computed from the scaling keys the way HF
transformers' _compute_llama3_parameters does (llama3_factors below).

Qwen2 (GGUF arch "qwen2"): biases on q, k, v, NeoX pairs.
Qwen3 (GGUF arch "qwen3"): as above but q and k are RMS-normed per head
(attn_q_norm / attn_k_norm) before RoPE, the rotation pairs are NeoX's
(i, i + d/2) (no row permutation in its converter), and head_dim comes from
attention.key_length (n_head * head_dim may differ from n_embd).

Why adjacent pairs: llama.cpp's HF->GGUF converter permutes the rows of
attn_q / attn_k of "llama" models so that the HF "rotate_half" (NeoX) pairing
(i, i + d/2) becomes the original Meta pairing (2i, 2i+1). A GGUF "llama"
model must therefore be rotated on adjacent pairs. `--rope neox` exists only
to show that the other convention gives garbage (see `selfcheck`).

Command line (for humans; gen_golden.py imports this module):
    ref_forward.py MODEL selfcheck      greedy text + perplexity, both rope modes
    ref_forward.py MODEL predict        expected deviation of the engine's activation rounding
    ref_forward.py MODEL ids 1 2 3      last-position top-5 for given ids
"""

import argparse
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def _field(reader, key, default=None):
    """Scalar/string metadata value, or default when the key is absent."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def llama3_factors(base, dim, factor, low, high, orig_ctx):
    """HF transformers' _compute_llama3_parameters as per-pair divisors of
    the frequency (what llama.cpp's converter stores in rope_freqs.weight)."""
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * np.pi / inv
    smooth = (orig_ctx / wavelen - low) / (high - low)
    ff = 1.0 / ((1 - smooth) / factor + smooth)
    ff = np.where(wavelen < orig_ctx / high, 1.0, ff)
    return np.where(wavelen > orig_ctx / low, factor, ff)


class Hparams:
    def __init__(self, reader):
        arch = _field(reader, "general.architecture")
        if arch not in ("llama", "qwen2", "qwen3"):
            raise ValueError(f"ref_forward: arch {arch!r} is not supported (llama, qwen2, qwen3)")
        self.arch = arch
        p = arch + "."
        self.n_layer = int(_field(reader, p + "block_count"))
        self.n_embd = int(_field(reader, p + "embedding_length"))
        self.n_ff = int(_field(reader, p + "feed_forward_length"))
        self.n_head = int(_field(reader, p + "attention.head_count"))
        self.n_head_kv = int(_field(reader, p + "attention.head_count_kv", self.n_head))
        self.head_dim = int(_field(reader, p + "attention.key_length", self.n_embd // self.n_head))
        self.eps = float(_field(reader, p + "attention.layer_norm_rms_epsilon"))
        # llama.cpp's defaults when the keys are absent (the tiny model has no freq_base).
        self.rope_base = float(_field(reader, p + "rope.freq_base", 10000.0))
        self.rope_dim = int(_field(reader, p + "rope.dimension_count", self.head_dim))
        scaling = _field(reader, p + "rope.scaling.type", "none")
        factor = float(_field(reader, p + "rope.scaling.factor", 0.0) or 0.0)
        # Linear scaling divides the position by the factor.
        self.rope_freq_scale = 1.0 / factor if scaling == "linear" and factor > 0 else 1.0
        self.freq_factors = None  # (rope_dim/2) divisors, or None
        if scaling == "llama3":
            self.freq_factors = llama3_factors(
                self.rope_base, self.rope_dim, factor,
                float(_field(reader, p + "rope.scaling.low_freq_factor")),
                float(_field(reader, p + "rope.scaling.high_freq_factor")),
                int(_field(reader, p + "rope.scaling.original_context_length")))
        elif scaling not in ("none", "linear"):
            raise ValueError(f"ref_forward: rope scaling {scaling!r} is not supported")

    def __repr__(self):
        return ("Hparams(n_layer=%d n_embd=%d n_ff=%d n_head=%d n_head_kv=%d head_dim=%d "
                "eps=%g rope_base=%g rope_dim=%d rope_freq_scale=%g)" % (
                    self.n_layer, self.n_embd, self.n_ff, self.n_head, self.n_head_kv,
                    self.head_dim, self.eps, self.rope_base, self.rope_dim,
                    self.rope_freq_scale))


class RefModel:
    """Float weights in memory (dtype float64 by default) + forward pass."""

    def __init__(self, path, dtype=np.float64, rope_mode=None, emulate_engine=False, act_levels=2,
                 freq_factors=True):
        """emulate_engine: round what the engine rounds (activations per 32-block
        before a quantized matmul, K/V to float16), to PREDICT the deviation it
        shows. act_levels 2: our engine's two 8-bit levels (a 16-bit integer,
        src/kernels/quant.h); 1: one 8-bit level like llama.cpp's Q8_1. Never
        used for golden data. rope_mode None: the architecture's (llama
        adjacent, qwen3 neox). freq_factors False ignores Llama 3's factors
        (to show that a test tells the two apart)."""
        reader = gguf.GGUFReader(path)
        self.hp = Hparams(reader)
        if rope_mode is None:
            rope_mode = "adjacent" if self.hp.arch == "llama" else "neox"
        if rope_mode not in ("adjacent", "neox"):
            raise ValueError("rope_mode must be 'adjacent' or 'neox'")
        self.path = path
        self.dtype = dtype
        self.rope_mode = rope_mode
        self.emulate = emulate_engine
        self.act_levels = act_levels
        self.w = {}
        self.quantized = {}  # name -> True if the GGUF type is a block quant
        for t in reader.tensors:
            # dequantize() returns float32 with numpy shape (ne1, ne0) = (out, in);
            # F16/F32 tensors come back converted as well.
            a = dequantize(t.data, t.tensor_type)
            self.w[t.name] = np.ascontiguousarray(a, dtype=dtype)
            self.quantized[t.name] = t.tensor_type not in (
                gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                gguf.GGMLQuantizationType.BF16)
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]  # tied head
            self.quantized["output.weight"] = self.quantized["token_embd.weight"]
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        # inv_freq[i] = base^(-2i/rope_dim), i < rope_dim/2
        i = np.arange(self.hp.rope_dim // 2, dtype=np.float64)
        self.inv_freq = self.hp.rope_base ** (-2.0 * i / self.hp.rope_dim)
        ff = self.hp.freq_factors
        if "rope_freqs.weight" in self.w:
            ff = self.w["rope_freqs.weight"].reshape(-1).astype(np.float64)
        self.freq_factors = ff if freq_factors else None
        if self.freq_factors is not None:
            self.inv_freq = self.inv_freq / self.freq_factors

    # ---------------------------------------------------------------- ops
    def rmsnorm(self, x, w):  # x: (n, d), w: (d,)
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.hp.eps) * w

    def rope(self, x, pos):
        """x: (n, heads, head_dim), pos: (n,) absolute positions. Rotates the
        first rope_dim dims of each head; the rest pass through."""
        hp = self.hp
        theta = (np.asarray(pos, dtype=np.float64) * hp.rope_freq_scale)[:, None] \
            * self.inv_freq[None, :]                       # (n, rope_dim/2)
        cos = np.cos(theta).astype(self.dtype)[:, None, :]  # (n, 1, rope_dim/2)
        sin = np.sin(theta).astype(self.dtype)[:, None, :]
        out = x.copy()
        r = hp.rope_dim
        if self.rope_mode == "adjacent":
            a, b = x[..., 0:r:2], x[..., 1:r:2]            # pairs (2i, 2i+1)
            out[..., 0:r:2] = a * cos - b * sin
            out[..., 1:r:2] = a * sin + b * cos
        else:
            a, b = x[..., : r // 2], x[..., r // 2: r]     # pairs (i, i + r/2)
            out[..., : r // 2] = a * cos - b * sin
            out[..., r // 2: r] = a * sin + b * cos
        return out

    def matmul(self, x, name):  # x: (n, in) -> (n, out) = x W^T
        if self.emulate and self.quantized[name]:
            x = self._q8_roundtrip(x) if self.act_levels == 1 else self._q16_roundtrip(x)
        return x @ self.w[name].T

    def _q8_roundtrip(self, x):
        """Q8 activation rounding: per block of 32, scale d = max|x|/127 kept
        as float16, values round(x/d) as int8."""
        n, k = x.shape
        b = x.reshape(n, k // 32, 32)
        d = (np.abs(b).max(axis=2, keepdims=True) / 127.0).astype(np.float16).astype(self.dtype)
        q = np.round(np.divide(b, d, out=np.zeros_like(b), where=d != 0))
        return (q * d).reshape(n, k)

    def _q16_roundtrip(self, x):
        """Two-level rounding: per block of 32, d = max|x|/127, v = x/d,
        hi = round(v), lo = round(256 v) - 256 hi clamped to +-127; the value
        is (256 hi + lo) d / 256."""
        n, k = x.shape
        b = x.reshape(n, k // 32, 32)
        d = np.abs(b).max(axis=2, keepdims=True) / 127.0
        v = np.divide(b, d, out=np.zeros_like(b), where=d != 0)
        hi = np.round(v)
        lo = np.clip(np.round(256.0 * v) - 256.0 * hi, -127, 127)
        return ((256.0 * hi + lo) * (d / 256.0)).reshape(n, k)

    def _kv_round(self, x):
        return x.astype(np.float16).astype(self.dtype) if self.emulate else x

    @staticmethod
    def silu(x):
        return x / (1.0 + np.exp(-x))

    # ------------------------------------------------------------ forward
    def new_cache(self):
        """Per-layer K and V of the tokens seen so far: lists of (n_past, Hkv, hd)."""
        hp = self.hp
        empty = np.zeros((0, hp.n_head_kv, hp.head_dim), dtype=self.dtype)
        return {"k": [empty] * hp.n_layer, "v": [empty] * hp.n_layer, "n": 0}

    def forward(self, tokens, cache=None, want_hidden=False):
        """Runs tokens at positions cache['n']..; returns logits (n, n_vocab).
        The cache (if given) is extended in place. With want_hidden, also
        returns the residual stream after every layer, list of (n, d)."""
        hp, w = self.hp, self.w
        if cache is None:
            cache = self.new_cache()
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        p0 = cache["n"]
        pos = np.arange(p0, p0 + n)
        group = hp.n_head // hp.n_head_kv
        scale = 1.0 / np.sqrt(hp.head_dim)
        # mask[i, j]: query i (position p0+i) may see key j (position j) iff j <= p0+i
        mask = np.arange(p0 + n)[None, :] <= pos[:, None]   # (n, p0+n)

        x = w["token_embd.weight"][tokens]                   # (n, d)
        hidden = []
        for l in range(hp.n_layer):
            b = f"blk.{l}."
            h = self.rmsnorm(x, w[b + "attn_norm.weight"])
            q = self.matmul(h, b + "attn_q.weight").reshape(n, hp.n_head, hp.head_dim)
            k = self.matmul(h, b + "attn_k.weight").reshape(n, hp.n_head_kv, hp.head_dim)
            v = self.matmul(h, b + "attn_v.weight").reshape(n, hp.n_head_kv, hp.head_dim)
            if b + "attn_q.bias" in w:  # qwen2: QKV biases
                q = q + w[b + "attn_q.bias"].reshape(hp.n_head, hp.head_dim)
                k = k + w[b + "attn_k.bias"].reshape(hp.n_head_kv, hp.head_dim)
                v = v + w[b + "attn_v.bias"].reshape(hp.n_head_kv, hp.head_dim)
            if b + "attn_q_norm.weight" in w:  # qwen3: RMSNorm of each head
                q = self.rmsnorm(q, w[b + "attn_q_norm.weight"])
                k = self.rmsnorm(k, w[b + "attn_k_norm.weight"])
            q, k = self.rope(q, pos), self._kv_round(self.rope(k, pos))
            v = self._kv_round(v)
            K = np.concatenate([cache["k"][l], k], axis=0)     # (p0+n, Hkv, hd)
            V = np.concatenate([cache["v"][l], v], axis=0)
            cache["k"][l], cache["v"][l] = K, V

            att = np.empty((n, hp.n_head, hp.head_dim), dtype=self.dtype)
            for hh in range(hp.n_head):
                kv = hh // group
                s = (q[:, hh, :] @ K[:, kv, :].T) * scale        # (n, p0+n)
                s = np.where(mask, s, -np.inf)
                s = s - s.max(axis=1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=1, keepdims=True)
                att[:, hh, :] = p @ V[:, kv, :]
            x = x + self.matmul(att.reshape(n, hp.n_head * hp.head_dim), b + "attn_output.weight")

            h = self.rmsnorm(x, w[b + "ffn_norm.weight"])
            g = self.silu(self.matmul(h, b + "ffn_gate.weight"))   # (n, n_ff)
            u = self.matmul(h, b + "ffn_up.weight")
            x = x + self.matmul(g * u, b + "ffn_down.weight")
            if want_hidden:
                hidden.append(x.copy())
        cache["n"] = p0 + n
        logits = self.matmul(self.rmsnorm(x, w["output_norm.weight"]), "output.weight")
        return (logits, hidden) if want_hidden else logits

    # ------------------------------------------------------------- helpers
    def greedy(self, prompt, n_new):
        """Greedy continuation of n_new tokens (never stops at EOS, so the
        comparison length is fixed). Returns (tokens, margins, first_logits);
        margins[i] = top1 - top2 logit at step i (how safe the argmax is)."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)[-1]
        first = logits.copy()
        out, margins = [], []
        for _ in range(n_new):
            top2 = np.argsort(logits)[-2:]
            t = int(top2[1])
            out.append(t)
            margins.append(float(logits[top2[1]] - logits[top2[0]]))
            logits = self.forward([t], cache)[-1]
        return out, margins, first

    def teacher_forced(self, tokens):
        """Logits at every position of tokens (one causal pass)."""
        return self.forward(tokens)

    @staticmethod
    def nll(logits, tokens):
        """Mean negative log-likelihood of tokens[1:] given logits[:-1]."""
        lg = logits[:-1]
        m = lg.max(axis=1, keepdims=True)
        logz = (m[:, 0] + np.log(np.exp(lg - m).sum(axis=1)))
        return float(np.mean(logz - lg[np.arange(len(lg)), tokens[1:]]))


# ---------------------------------------------------------------- CLI
PLAIN_TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, "
    "France. It is named after the engineer Gustave Eiffel, whose company designed and "
    "built the tower from 1887 to 1889. Locally nicknamed \"La dame de fer\" (French for "
    "\"Iron Lady\"), it was constructed as the centrepiece of the 1889 World's Fair, and "
    "to crown the centennial anniversary of the French Revolution. Although initially "
    "criticised by some of France's leading artists and intellectuals for its design, it "
    "has since become a global cultural icon of France and one of the most recognisable "
    "structures in the world. The tower received 5,889,000 visitors in 2022. The Eiffel "
    "Tower is the most visited monument with an entrance fee in the world: 6.91 million "
    "people ascended it in 2015. It was designated a monument historique in 1964, and was "
    "named part of a UNESCO World Heritage Site (\"Paris, Banks of the Seine\") in 1991."
)


def _tokenizer():
    from tokenizers import Tokenizer
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.environ.get("KVSTITCH_SHARED") or os.path.join(here, "..", "..", "..", "shared")
    return Tokenizer.from_file(os.path.join(shared, "reference", "smollm2-tokenizer.json"))


def selfcheck(path, dtype):
    """Shows the rope reading is right: sensible greedy text and low perplexity
    with adjacent pairs, garbage with NeoX pairs."""
    tok = _tokenizer()
    chat = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
            "<|im_end|>\n<|im_start|>assistant\n")
    prompt = tok.encode(chat).ids
    text_ids = np.array(tok.encode(PLAIN_TEXT).ids)
    for mode in ("adjacent", "neox"):
        m = RefModel(path, dtype=dtype, rope_mode=mode)
        toks, margins, _ = m.greedy(prompt, 32)
        ppl = float(np.exp(m.nll(m.teacher_forced(text_ids), text_ids)))
        print(f"rope={mode}: perplexity on {len(text_ids)} tokens of English = {ppl:.3f}")
        print(f"  greedy: {tok.decode(toks, skip_special_tokens=False)!r}")
        print(f"  min greedy margin: {min(margins):.4f}")


def predict(path, dtype):
    """How far should our engine (two-level 8-bit activations for quantized
    matmuls, float16 K/V) land from the exact reference, and how far would a
    llama.cpp-style engine (one 8-bit level)? Prints the figures the C
    golden-test tolerances are set from."""
    tok = _tokenizer()
    exact = RefModel(path, dtype=dtype)
    for levels in (2, 1):
        print(f"activations rounded to {8 * levels} bits ({levels} level{'s' if levels > 1 else ''}), K/V float16:")
        _predict_one(tok, exact, RefModel(path, dtype=dtype, emulate_engine=True, act_levels=levels))


def _predict_one(tok, exact, approx):
    chat = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
            "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
            "<|im_end|>\n<|im_start|>assistant\n")
    for name, text in (("chat", chat), ("plain text", PLAIN_TEXT)):
        ids = np.array(tok.encode(text).ids)
        a, b = exact.forward(ids), approx.forward(ids)
        d = np.abs(a - b).max(axis=1)
        rms = np.sqrt(np.mean((a - b) ** 2, axis=1))
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        agree = float(np.mean(a.argmax(1) == b.argmax(1)))
        # How far the rounding moves the gap between the exact top-1 and top-2:
        # an argmax can only flip where the exact margin is below this.
        r = np.arange(len(ids))
        i1, i2 = np.argsort(a, axis=1)[:, -1], np.argsort(a, axis=1)[:, -2]
        margin = a[r, i1] - a[r, i2]
        shift = np.abs((b[r, i1] - b[r, i2]) - margin)
        miss = a.argmax(1) != b.argmax(1)
        print(f"  {name}: {len(ids)} positions; last-position max|diff| {d[-1]:.4f} rms {rms[-1]:.4f}, "
              f"worst position max|diff| {d.max():.4f} rms {rms.max():.4f}, min cosine {cos.min():.7f}, "
              f"top-1 agreement {100 * agree:.2f}%, largest exact margin at a flip "
              f"{margin[miss].max() if miss.any() else 0:.4f}, top-1/top-2 gap shift p95 "
              f"{np.percentile(shift, 95):.4f} max {shift.max():.4f}, ppl exact "
              f"{np.exp(exact.nll(a, ids)):.4f} emulated {np.exp(exact.nll(b, ids)):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("cmd", choices=["selfcheck", "predict", "ids"])
    ap.add_argument("ids", nargs="*", type=int)
    ap.add_argument("--float32", action="store_true", help="compute in float32 (default float64)")
    ap.add_argument("--rope", choices=["adjacent", "neox"], default=None, help="default: the architecture's")
    a = ap.parse_args()
    dtype = np.float32 if a.float32 else np.float64
    if a.cmd == "selfcheck":
        selfcheck(a.model, dtype)
    elif a.cmd == "predict":
        predict(a.model, dtype)
    else:
        m = RefModel(a.model, dtype=dtype, rope_mode=a.rope)
        print(m.hp)
        lg = m.forward(a.ids)[-1]
        top = np.argsort(lg)[::-1][:5]
        print("top5:", [(int(t), round(float(lg[t]), 4)) for t in top])


if __name__ == "__main__":
    sys.exit(main())
