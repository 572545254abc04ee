/* The architecture table (arch.h): one row per supported general.architecture. */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

static const kvs_arch k_arches[] = {
    /* Llama 1/2/3, SmolLM, Mistral: the converter permutes Q/K rows so
     * adjacent pairs rotate together. Llama 3.1+ scale RoPE with per-pair
     * frequency factors (rope_freqs.weight). */
    {.name = "llama", .tensors = 0, .rope_neox = 0, .act = KVS_ACT_SILU, .rope_freqs = 1},
    /* Qwen2 / 2.5: QKV biases, HF rotation layout. */
    {.name = "qwen2", .tensors = KVS_ARCH_QKV_BIAS, .rope_neox = 1, .act = KVS_ACT_SILU},
    /* Qwen3 (dense): Q/K RMSNorm per head before RoPE, no QKV bias, HF
     * rotation layout; head_dim from attention.key_length (128 in the
     * published models, so n_head * head_dim may differ from n_embd). */
    {.name = "qwen3", .tensors = KVS_ARCH_QK_NORM, .rope_neox = 1, .act = KVS_ACT_SILU},
    /* Gemma 3: Q/K norms, sandwich norms, GeGLU, embeddings scaled by
     * sqrt(d), 5 local (window, base 10000) : 1 global layers. The GGUF
     * converter folds Gemma's (1 + w) into the norm weights, so the norms are
     * plain RMSNorms here. */
    {.name = "gemma3", .tensors = KVS_ARCH_QK_NORM | KVS_ARCH_POST_NORM, .rope_neox = 1,
     .act = KVS_ACT_GELU_TANH, .embd_scale_sqrt = 1, .swa_period = 6, .swa_rope_base = 10000.0f},
};

const kvs_arch *kvs_arch_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof k_arches / sizeof k_arches[0]; i++)
        if (strcmp(k_arches[i].name, name) == 0) return &k_arches[i];
    return NULL;
}

void kvs_arch_names(char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof k_arches / sizeof k_arches[0] && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", k_arches[i].name);
        if (n < 0) break;
        used += (size_t)n;
    }
}
