#!/usr/bin/env python3
"""
A small numpy reference forward pass for GGUF Gemma 3 models (float64),
independent of the C engine: weights dequantized by the PyPI `gguf` package,
every op plain numpy. It writes golden data for tests/test_gemma3.c.

Model (GGUF arch "gemma3", as llama.cpp runs it):
    x = token_embd[tokens] * sqrt(n_embd)
    for each layer l (global when (l + 1) % 6 == 0, else sliding window W):
        h = rmsnorm(x) * attn_norm
        q, k, v = h Wq^T, h Wk^T, h Wv^T
        q, k = rmsnorm(q per head) * q_norm, rmsnorm(k per head) * k_norm
        q, k = rope_neox(q, k, base = 1e6 global / 1e4 local)
        a = softmax(q k^T / sqrt(head_dim), causal [and pos - j < W]) v Wo^T
        x += rmsnorm(a) * post_attention_norm
        h = rmsnorm(x) * ffn_norm
        f = (gelu_tanh(h Wgate^T) * (h Wup^T)) Wdown^T
        x += rmsnorm(f) * post_ffw_norm
    logits = (rmsnorm(x) * output_norm) token_embd^T      (tied head)
The GGUF converter stores Gemma's norm weights as (1 + w), so every norm
here is a plain RMSNorm with the stored weight (selfcheck prints their mean).

    ref_gemma3.py MODEL golden OUT ids...   teacher-forced top-1 + margins per position
    ref_gemma3.py MODEL selfcheck           greedy continuation of a few ids
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


class Gemma3:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        assert field(r, "general.architecture") == "gemma3"
        p = "gemma3."
        self.n_layer = int(field(r, p + "block_count"))
        self.d = int(field(r, p + "embedding_length"))
        self.n_head = int(field(r, p + "attention.head_count"))
        self.n_kv = int(field(r, p + "attention.head_count_kv"))
        self.hd = int(field(r, p + "attention.key_length"))
        self.eps = float(field(r, p + "attention.layer_norm_rms_epsilon"))
        self.base = float(field(r, p + "rope.freq_base"))
        self.window = int(field(r, p + "attention.sliding_window"))
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type)
            self.w[t.name] = np.asarray(a, dtype=np.float32 if t.name == "token_embd.weight" else np.float64)

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos, base):  # x (n, heads, hd), NeoX pairs (i, i + hd/2)
        half = self.hd // 2
        inv = base ** (-2.0 * np.arange(half) / self.hd)
        th = pos[:, None].astype(np.float64) * inv[None, :]
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    def forward(self, tokens):
        w, n = self.w, len(tokens)
        pos = np.arange(n)
        x = w["token_embd.weight"][tokens].astype(np.float64) * np.sqrt(np.float32(self.d))
        g = self.n_head // self.n_kv
        for l in range(self.n_layer):
            b = f"blk.{l}."
            local = (l + 1) % 6 != 0
            h = self.rmsnorm(x, w[b + "attn_norm.weight"])
            q = (h @ w[b + "attn_q.weight"].T).reshape(n, self.n_head, self.hd)
            k = (h @ w[b + "attn_k.weight"].T).reshape(n, self.n_kv, self.hd)
            v = (h @ w[b + "attn_v.weight"].T).reshape(n, self.n_kv, self.hd)
            q = self.rmsnorm(q, w[b + "attn_q_norm.weight"])
            k = self.rmsnorm(k, w[b + "attn_k_norm.weight"])
            base = 10000.0 if local else self.base
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            vis = pos[None, :] <= pos[:, None]
            if local:
                vis &= (pos[:, None] - pos[None, :]) < self.window
            out = np.zeros((n, self.n_head, self.hd))
            for hh in range(self.n_head):
                s = q[:, hh, :] @ k[:, hh // g, :].T / np.sqrt(self.hd)
                s = np.where(vis, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                out[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hh // g, :]
            a = out.reshape(n, -1) @ w[b + "attn_output.weight"].T
            x = x + self.rmsnorm(a, w[b + "post_attention_norm.weight"])
            h = self.rmsnorm(x, w[b + "ffn_norm.weight"])
            f = self.gelu_tanh(h @ w[b + "ffn_gate.weight"].T) * (h @ w[b + "ffn_up.weight"].T)
            f = f @ w[b + "ffn_down.weight"].T
            x = x + self.rmsnorm(f, w[b + "post_ffw_norm.weight"])
        h = self.rmsnorm(x, w["output_norm.weight"])
        E = w["token_embd.weight"]
        logits = np.empty((n, E.shape[0]))
        for c in range(0, E.shape[0], 32768):
            logits[:, c:c + 32768] = h @ E[c:c + 32768].astype(np.float64).T
        return logits


def main():
    m = Gemma3(sys.argv[1])
    if sys.argv[2] == "selfcheck":
        print("attn_norm mean", m.w["blk.0.attn_norm.weight"].mean(), "(about 1 or more: folded 1 + w)")
        ids = [2, 818, 5279, 529, 7001, 563]
        for _ in range(8):
            ids.append(int(np.argmax(m.forward(ids)[-1])))
        print(ids)
        return
    out, ids = sys.argv[3], [int(t) for t in sys.argv[4:]]
    lg = m.forward(ids)
    top2 = np.argsort(-lg, axis=1)[:, :2]
    with open(out, "w") as f:
        f.write("# gemma3 golden: ids, then per position: ref top-1 and its margin over top-2 (float64)\n")
        f.write(" ".join(map(str, ids)) + "\n")
        for i in range(len(ids)):
            a, b = top2[i]
            f.write("%d %.6f\n" % (a, lg[i, a] - lg[i, b]))


if __name__ == "__main__":
    main()
