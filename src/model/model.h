/*
 * The loaded model: the GGUF mapping, hyperparameters, weight views and the
 * tokenizer. Immutable after kvs_model_load(); shared by contexts.
 *
 * Weight views point into the read-only GGUF mapping: nothing is copied.
 * Matrices follow GGUF/ggml order: a kvs_wmat has n rows (output features)
 * of k contiguous elements (input features), i.e. tensor ne = (k, n).
 */
#ifndef KVS_MODEL_H
#define KVS_MODEL_H

#include "kvstitch.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/arch.h"
#include "tokenizer/tokenizer.h"

/* Accessors for other modules (the struct itself is private to src/model/). */
const kvs_gguf *kvs_model_gguf(const kvs_model *model);
const kvs_tokenizer *kvs_model_tokenizer(const kvs_model *model);

/* What differs between the layers of one model: the RoPE of each layer and
 * its attention window (sliding-window architectures, arch.h). */
typedef struct kvs_layer_hparams {
    float rope_freq_base;
    float rope_freq_scale;  /* 1 / linear scaling factor */
    const float *rope_freq_factors; /* (rope_dim / 2) divisors of each pair's frequency
                                     * (Llama 3 scaling, rope_scaling.c) or NULL */
    int window;             /* a query at p sees slots (p - window, p]; 0 = all of 0..p */
} kvs_layer_hparams;

/* Hyperparameters of the decoder. All zero for a vocabulary-only model. */
typedef struct kvs_hparams {
    const kvs_arch *arch;    /* the architecture's row (NULL: vocabulary-only, unknown) */
    int n_layer;
    int n_embd;          /* residual width */
    int n_head, n_head_kv;
    int head_dim;        /* n_embd / n_head unless attention.key_length says otherwise */
    int n_ff;            /* feed-forward width */
    int n_vocab;         /* rows of the output head (= rows of token_embd) */
    int n_ctx_train;
    int rope_dim;        /* leading dims of each head that rotate */
    int rope_neox;       /* 1: pairs (i, i + rope_dim/2) (qwen2); 0: (2i, 2i+1) (llama) */
    float rope_freq_base;  /* of the global layers (layer[l] has each layer's) */
    float rope_freq_scale; /* 1 / linear scaling factor (global layers) */
    float norm_eps;
    float attn_scale;      /* scores = q.k * attn_scale: {arch}.attention.scale or 1/sqrt(head_dim) */
    float embd_scale;      /* embeddings * embd_scale (1 unless the row scales them) */
    float logit_softcap;   /* logits = c * tanh(logits / c) when > 0 ({arch}.final_logit_softcapping) */
    int n_swa;             /* sliding window of the local layers, 0 if none */
    const kvs_layer_hparams *layer; /* (n_layer); NULL for a vocabulary-only model */
} kvs_hparams;

/* One decoder block's weights. Norm weights and biases are F32 vectors;
 * the optional ones (arch.h's KVS_ARCH_* masks) are NULL when absent. */
typedef struct kvs_layer_weights {
    const float *attn_norm;   /* (n_embd) */
    kvs_wmat wq;              /* (n_head * head_dim, n_embd) */
    kvs_wmat wk, wv;          /* (n_head_kv * head_dim, n_embd) */
    kvs_wmat wo;              /* (n_embd, n_head * head_dim) */
    const float *bq;          /* (n_head * head_dim) or NULL */
    const float *bk, *bv;     /* (n_head_kv * head_dim) or NULL */
    const float *q_norm;      /* (head_dim) or NULL: RMSNorm of each query head */
    const float *k_norm;      /* (head_dim) or NULL: RMSNorm of each key head */
    const float *attn_post_norm; /* (n_embd) or NULL: RMSNorm of the attention output */
    const float *ffn_norm;    /* (n_embd) */
    const float *ffn_post_norm;  /* (n_embd) or NULL: RMSNorm of the FFN output */
    kvs_wmat w_gate, w_up;    /* (n_ff, n_embd) */
    kvs_wmat w_down;          /* (n_embd, n_ff) */
} kvs_layer_weights;

int kvs_model_is_vocab_only(const kvs_model *model);
/* The chat template family its chat layouts use: the load's choice, else
 * the detected one, else "" (kvs_model_info.chat_template_family). */
const char *kvs_model_chat_family(const kvs_model *model);
/* The load's choice (kvs_model_params.chat_template) alone, or NULL. */
const char *kvs_model_chat_choice(const kvs_model *model);
const kvs_hparams *kvs_model_hparams(const kvs_model *model);
const kvs_layer_weights *kvs_model_layer(const kvs_model *model, int l); /* l < n_layer */
const kvs_wmat *kvs_model_tok_embd(const kvs_model *model);   /* (n_vocab, n_embd) */
const kvs_wmat *kvs_model_output(const kvs_model *model);     /* (n_vocab, n_embd); == tok_embd when tied */
const float *kvs_model_output_norm(const kvs_model *model);   /* (n_embd) */
const char *kvs_model_path(const kvs_model *model);

/* Memo slots: 32-byte values derived from the model that other modules
 * compute lazily once per loaded model (src/cache/fingerprint.c: the weights
 * digest and the cache fingerprint per KV dtype). The model stays logically
 * immutable; the slots are guarded by a mutex, so any thread may get/set. */
enum {
    KVS_MODEL_MEMO_WEIGHTS = 0, /* SHA-256 of the tensor data section */
    KVS_MODEL_MEMO_FP_F16,      /* cache fingerprint with F16 KV */
    KVS_MODEL_MEMO_FP_F32,      /* cache fingerprint with F32 KV */
    KVS_MODEL_MEMO_FP_Q8,       /* cache fingerprint with Q8 KV */
    KVS_MODEL_MEMO_N
};
/* 1 and *out filled if the slot is set, else 0. */
int kvs_model_memo_get(const kvs_model *model, int slot, uint8_t out[32]);
void kvs_model_memo_set(const kvs_model *model, int slot, const uint8_t v[32]);

#endif
