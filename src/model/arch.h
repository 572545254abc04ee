/*
 * The architecture table: one row per GGUF `general.architecture` that the
 * engine runs. Everything that differs between decoder families is a field
 * of the row; hparams.c, weights.c and forward.c read the row and never
 * compare the architecture's name (arch.c is the only place that does).
 *
 * The shared recipe of one decoder block (forward.h), with the row's choices
 * in brackets:
 *
 *   x  = embed(token) [* sqrt(n_embd) if embd_scale_sqrt]
 *   per layer l:
 *     h  = rmsnorm(x, attn_norm)
 *     q, k, v = h Wq, h Wk, h Wv  [+ bias: KVS_ARCH_QKV_BIAS]
 *     q, k = rmsnorm per head [KVS_ARCH_QK_NORM]
 *     q, k = rope(pos, layer's base / scale [/ frequency factors: rope_freqs]) [pairs: rope_neox]
 *     a  = attention(q, K, V, scale, layer's window) Wo
 *     a  = rmsnorm(a, attn_post_norm) [KVS_ARCH_POST_NORM]
 *     x += a
 *     h  = rmsnorm(x, ffn_norm)
 *     f  = (act(h Wgate) * h Wup) Wdown   [act: SiLU or GELU-tanh]
 *     f  = rmsnorm(f, ffn_post_norm) [KVS_ARCH_POST_NORM]
 *     x += f
 *   logits = rmsnorm(x, output_norm) Wout [softcap from the metadata]
 *
 * Adding an architecture: a row in arch.c (and, for a new kind of step, a
 * flag here that forward.c honours). Layers alternate between global and
 * sliding-window attention by swa_period (every swa_period-th layer global).
 */
#ifndef KVS_MODEL_ARCH_H
#define KVS_MODEL_ARCH_H

#include <stddef.h>

/* Tensors beyond the common set that a row requires (a bit mask). Tensors of
 * a bit the row does not set are still used when a file has them (a llama
 * file with QKV biases runs them), so the mask is about what must be there. */
enum {
    KVS_ARCH_QKV_BIAS = 1u << 0,  /* blk.N.attn_{q,k,v}.bias */
    KVS_ARCH_QK_NORM = 1u << 1,   /* blk.N.attn_{q,k}_norm.weight: RMSNorm of each head */
    KVS_ARCH_POST_NORM = 1u << 2, /* blk.N.post_attention_norm / post_ffw_norm.weight */
};

typedef enum kvs_ffn_act {
    KVS_ACT_SILU = 0,      /* SwiGLU: silu(gate) * up */
    KVS_ACT_GELU_TANH = 1, /* GeGLU: gelu_tanh(gate) * up */
} kvs_ffn_act;

typedef struct kvs_arch {
    const char *name;       /* general.architecture, also the prefix of its hparam keys */
    unsigned tensors;       /* KVS_ARCH_* that every layer must have */
    int rope_neox;          /* 1: pairs (i, i + rope_dim/2) (HF layout); 0: (2i, 2i+1) (llama's permuted rows) */
    kvs_ffn_act act;
    int embd_scale_sqrt;    /* embeddings are multiplied by sqrtf(n_embd) */
    /* Sliding-window attention: 0 = none. Else layer l is global when
     * (l + 1) % swa_period == 0 and local (window from
     * {arch}.attention.sliding_window) otherwise; {arch}.attention.
     * sliding_window_pattern overrides the period when a file has it. */
    int swa_period;
    float swa_rope_base;    /* RoPE base of the local layers (no scaling there); 0: the global base */
    int rope_freqs;         /* accepts Llama 3 RoPE frequency factors (rope_freqs.weight or
                             * rope.scaling.type llama3, rope_scaling.c); others refuse them */
} kvs_arch;

/* The row for a general.architecture value, or NULL if unsupported. */
const kvs_arch *kvs_arch_find(const char *name);
/* "llama, qwen2, ..." (NUL-terminated, cut at cap) for error messages. */
void kvs_arch_names(char *buf, size_t cap);

#endif
