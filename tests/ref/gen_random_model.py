#!/usr/bin/env python3
"""
Small random-weight GGUF models of the architectures no real model in the
test data covers (Llama 3 with its RoPE frequency factors, Qwen3), and the
float64 numpy reference logits for a token sequence (ref_forward.py, weights
dequantized by the gguf package). tests/test_arch_random.c runs this at test
time into a temporary directory: nothing binary is committed.

    gen_random_model.py OUTDIR [--seed N] [--tokens N]

writes, for each model NAME in MODELS below:
    NAME.gguf        the model (deterministic from the seed)
    NAME.ids         the token ids, one line, space-separated
    NAME.ref.f64     reference logits (n_tokens, n_vocab), float64, row-major
    NAME.wrong.f64   the same with one architectural detail done wrong
                     (llama3: no frequency factors; qwen2/3: adjacent rotation
                     pairs): the C test checks the engine is far from these,
                     so its tolerance cannot hide that detail.
and prints one line per model: name, vocabulary, quant mix, round-trip error.

The vocabulary is a small byte-level BPE (256 byte tokens, a few merges, the
family's special tokens) with the family's pre-tokenizer name and a chat
template whose markers select the family, so the loader, `kvstitch info`
and the chat code see what a real file of that family has.
"""
import argparse
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kquant_np  # noqa: E402
from ref_forward import RefModel  # noqa: E402

T = gguf.GGMLQuantizationType

# Q4_K_M-like: Q4_K for most matrices, Q6_K for attn_v / output (Q5_K on
# ffn_down here so all three K-quants appear), Q8_0 embeddings.
MIX = {"token_embd": T.Q8_0, "output": T.Q6_K, "attn_q": T.Q4_K, "attn_k": T.Q4_K, "attn_v": T.Q6_K,
       "attn_output": T.Q4_K, "ffn_gate": T.Q4_K, "ffn_up": T.Q4_K, "ffn_down": T.Q5_K}
F16 = {k: T.F16 for k in MIX}
F16["token_embd"] = T.F32

# name: architecture, dims, quant table, RoPE scaling form, tied head
MODELS = {
    # Llama 3.1-style: the factors in rope_freqs.weight (as llama.cpp's converter writes them)
    "llama3-q4km": dict(arch="llama", n_layer=3, n_embd=256, n_head=8, n_kv=2, head_dim=32, n_ff=512,
                        quant=MIX, scaling="tensor", tied=False),
    # the same family with rope.scaling.type = llama3 and its keys, F16, tied head
    "llama3-keys-f16": dict(arch="llama", n_layer=2, n_embd=256, n_head=4, n_kv=1, head_dim=64, n_ff=512,
                            quant=F16, scaling="keys", tied=True),
    "qwen3-q4km": dict(arch="qwen3", n_layer=3, n_embd=256, n_head=8, n_kv=2, head_dim=64, n_ff=512,
                       quant=MIX, scaling=None, tied=False),
    "qwen2-q4km": dict(arch="qwen2", n_layer=3, n_embd=256, n_head=8, n_kv=2, head_dim=32, n_ff=512,
                       quant=MIX, scaling=None, tied=False),
    "qwen3-f16": dict(arch="qwen3", n_layer=2, n_embd=256, n_head=4, n_kv=2, head_dim=128, n_ff=768,
                      quant=F16, scaling=None, tied=True),
}

# Files the loader must refuse, each with an error naming what it does not
# understand (no reference for these): a RoPE scaling type it does not run,
# llama3 scaling without one of its keys, and frequency factors on a row that
# has none. Tiny: one layer, float weights.
BAD = {
    "bad-yarn": dict(arch="llama", scaling="yarn"),
    "bad-llama3-no-low": dict(arch="llama", scaling="keys-no-low"),
    "bad-qwen3-rope-freqs": dict(arch="qwen3", scaling="tensor"),
    # its type as a number: it had read as absent, the model run unscaled
    "bad-scaling-type-u32": dict(arch="llama", scaling="type-u32"),
    # linear with a positive factor whose reciprocal is inf: it had loaded,
    # every RoPE angle NaN
    "bad-linear-tiny-factor": dict(arch="llama", scaling="linear-tiny"),
    # an attention scale past the bound under which no score can overflow:
    # 3e38 had loaded, the scores inf, the output garbage with exit 0
    "bad-attn-scale": dict(arch="llama", scaling=None, attn_scale=3e38),
}
for _cfg in BAD.values():
    _cfg.update(n_layer=1, n_embd=256, n_head=4, n_kv=2, head_dim=64, n_ff=256, quant=F16, tied=True)

# Llama 3 scaling with a short original context, so that at the test's
# positions (< 128) the factors change the rotation of most pairs (with the
# published 8192 they would only matter far beyond the test's prompt).
LLAMA3_SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context_length=64)
ROPE_BASE = {"llama": 10000.0, "qwen2": 1000000.0, "qwen3": 1000000.0}

SPECIALS = {
    "llama": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
}
PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}
# Short templates with each family's markers (the real ones are longer Jinja;
# kvstitch recognises the family by its markers and renders it by hand).
TEMPLATES = {
    "llama": ("{{- bos_token }}{%- for m in messages %}{{- '<|start_header_id|>' + m['role'] + "
              "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "qwen2": ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
              "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
              "{%- endif %}"),
    "qwen3": ("{%- for message in messages %}{%- if message.role == 'assistant' and '</think>' in message.content %}"
              "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
              "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined "
              "and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"),
}


def byte_tokens():
    """GPT-2's bytes_to_unicode: the printable stand-in of each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, (chr(c) for c in cs)))
    return [table[b] for b in range(256)]


def vocabulary(arch):
    toks = byte_tokens()
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"), ("Ġ", "s"),
                 ("r", "e"), ("a", "t"), ("Ġ", "w"), ("o", "r"), ("e", "n"), ("Ġ", "c"), ("i", "s"), ("Ġ", "the")]:
        if a + b not in toks:
            merges.append(f"{a} {b}")
            toks.append(a + b)
    n_normal = len(toks)
    toks += SPECIALS[arch]
    types = [1] * n_normal + [3] * len(SPECIALS[arch])  # NORMAL, CONTROL
    return toks, types, merges, n_normal


def rand_mat(rng, n, k, scale=1.0):
    return (rng.standard_normal((n, k)) * scale / np.sqrt(k)).astype(np.float32)


def norm_w(rng, n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def write_model(path, cfg, rng):
    arch = cfg["arch"]
    toks, types, merges, n_normal = vocabulary(arch)
    n_vocab = len(toks)
    d, hd, L = cfg["n_embd"], cfg["head_dim"], cfg["n_layer"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.basename(path))
    p = arch + "."
    w.add_uint32(p + "block_count", L)
    w.add_uint32(p + "context_length", 4096)
    w.add_uint32(p + "embedding_length", d)
    w.add_uint32(p + "feed_forward_length", cfg["n_ff"])
    w.add_uint32(p + "attention.head_count", cfg["n_head"])
    w.add_uint32(p + "attention.head_count_kv", cfg["n_kv"])
    w.add_float32(p + "rope.freq_base", ROPE_BASE[arch])
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    if arch != "llama":
        w.add_uint32(p + "attention.key_length", hd)
        w.add_uint32(p + "attention.value_length", hd)
    else:
        w.add_uint32(p + "rope.dimension_count", hd)
    if cfg.get("attn_scale"):
        w.add_float32(p + "attention.scale", cfg["attn_scale"])
    if cfg["scaling"] in ("keys", "keys-no-low"):
        w.add_string(p + "rope.scaling.type", "llama3")
        w.add_float32(p + "rope.scaling.factor", LLAMA3_SCALING["factor"])
        if cfg["scaling"] == "keys":
            w.add_float32(p + "rope.scaling.low_freq_factor", LLAMA3_SCALING["low_freq_factor"])
        w.add_float32(p + "rope.scaling.high_freq_factor", LLAMA3_SCALING["high_freq_factor"])
        w.add_uint32(p + "rope.scaling.original_context_length", LLAMA3_SCALING["original_context_length"])
    elif cfg["scaling"] == "yarn":
        w.add_string(p + "rope.scaling.type", "yarn")
        w.add_float32(p + "rope.scaling.factor", 4.0)
    elif cfg["scaling"] == "linear-tiny":
        w.add_string(p + "rope.scaling.type", "linear")
        w.add_float32(p + "rope.scaling.factor", 1e-40)
    elif cfg["scaling"] == "type-u32":
        w.add_uint32(p + "rope.scaling.type", 1)
        w.add_float32(p + "rope.scaling.factor", 4.0)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", PRE[arch])
    w.add_array("tokenizer.ggml.tokens", toks)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    sp = {t: n_normal + i for i, t in enumerate(SPECIALS[arch])}
    if arch == "llama":
        w.add_uint32("tokenizer.ggml.bos_token_id", sp["<|begin_of_text|>"])
        w.add_uint32("tokenizer.ggml.eos_token_id", sp["<|eot_id|>"])
        w.add_bool("tokenizer.ggml.add_bos_token", True)
    else:
        w.add_uint32("tokenizer.ggml.bos_token_id", sp["<|endoftext|>"])
        w.add_uint32("tokenizer.ggml.eos_token_id", sp["<|im_end|>"])
        w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", TEMPLATES[arch])

    quant, errs = cfg["quant"], {}

    def mat(name, kind, n, k, scale=1.0):
        x = rand_mat(rng, n, k, scale)
        qt = quant[kind]
        if qt == T.F32:
            w.add_tensor(name, x)
        elif qt == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            raw = kquant_np.quantize(x, qt)
            errs[qt.name] = max(errs.get(qt.name, 0.0), kquant_np.check(x, qt, raw))
            w.add_tensor(name, raw, raw_dtype=qt)

    mat("token_embd.weight", "token_embd", n_vocab, d, scale=np.sqrt(d))  # unit-variance embeddings
    w.add_tensor("output_norm.weight", norm_w(rng, d))
    if not cfg["tied"]:
        mat("output.weight", "output", n_vocab, d)
    if cfg["scaling"] == "tensor":
        s = LLAMA3_SCALING
        ff = llama3_factors_of(ROPE_BASE[arch], hd, s)
        w.add_tensor("rope_freqs.weight", ff.astype(np.float32))
    qd, kvd = cfg["n_head"] * hd, cfg["n_kv"] * hd
    for l in range(L):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", norm_w(rng, d))
        mat(b + "attn_q.weight", "attn_q", qd, d)
        mat(b + "attn_k.weight", "attn_k", kvd, d)
        mat(b + "attn_v.weight", "attn_v", kvd, d)
        mat(b + "attn_output.weight", "attn_output", d, qd)
        if arch == "qwen2":
            for nm, nn in (("attn_q.bias", qd), ("attn_k.bias", kvd), ("attn_v.bias", kvd)):
                w.add_tensor(b + nm, (0.5 * rng.standard_normal(nn)).astype(np.float32))
        if arch == "qwen3":
            w.add_tensor(b + "attn_q_norm.weight", norm_w(rng, hd))
            w.add_tensor(b + "attn_k_norm.weight", norm_w(rng, hd))
        w.add_tensor(b + "ffn_norm.weight", norm_w(rng, d))
        mat(b + "ffn_gate.weight", "ffn_gate", cfg["n_ff"], d)
        mat(b + "ffn_up.weight", "ffn_up", cfg["n_ff"], d)
        mat(b + "ffn_down.weight", "ffn_down", d, cfg["n_ff"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_normal, n_vocab, errs


def llama3_factors_of(base, dim, s):
    from ref_forward import llama3_factors
    return llama3_factors(base, dim, s["factor"], s["low_freq_factor"], s["high_freq_factor"],
                          s["original_context_length"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--only", help="one model name")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for i, (name, cfg) in enumerate(BAD.items()):
        write_model(os.path.join(a.outdir, name + ".gguf"), cfg, np.random.default_rng([a.seed, 100 + i]))
    for i, (name, cfg) in enumerate(MODELS.items()):
        if a.only and name != a.only:
            continue
        rng = np.random.default_rng([a.seed, i])
        path = os.path.join(a.outdir, name + ".gguf")
        n_normal, n_vocab, errs = write_model(path, cfg, rng)
        ids = rng.integers(0, n_normal, a.tokens)
        with open(os.path.join(a.outdir, name + ".ids"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        ref = RefModel(path).forward(ids)
        assert ref.shape == (a.tokens, n_vocab)
        ref.astype(np.float64).tofile(os.path.join(a.outdir, name + ".ref.f64"))
        if cfg["arch"] != "llama":
            wrong = RefModel(path, rope_mode="adjacent").forward(ids)
        else:
            wrong = RefModel(path, freq_factors=False).forward(ids)
        wrong.astype(np.float64).tofile(os.path.join(a.outdir, name + ".wrong.f64"))
        mix = ", ".join(f"{k} rms {v:.3f}" for k, v in sorted(errs.items())) or "float"
        print(f"{name}: vocab {n_vocab}, ref logits rms {np.sqrt(np.mean(ref ** 2)):.3f}, "
              f"wrong-vs-ref max {np.abs(wrong - ref).max():.3f}; round trip: {mix}")


if __name__ == "__main__":
    main()
