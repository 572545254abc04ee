/*
 * Private to src/model/: the model struct and the loader's internal steps.
 */
#ifndef KVS_MODEL_IMPL_H
#define KVS_MODEL_IMPL_H

#include <pthread.h>

#include "model/model.h"

struct kvs_model {
    char *path;                 /* copy of the path given to kvs_model_load */
    kvs_gguf *gguf;             /* owns the read-only mapping */
    kvs_tokenizer *tok;
    int vocab_only;             /* no tensors or params.vocab_only: tokenizer + metadata only */
    char arch[32];              /* general.architecture ("llama", "qwen2", ...) */
    char *name;                 /* general.name, NUL-terminated copy ("" if absent) */
    const char *chat_family;    /* kvs_model_params.chat_template (a static name), or NULL: detect */
    int32_t eot_id;             /* tokenizer.ggml.eot_token_id, -1 if absent */
    kvs_hparams hp;
    kvs_layer_hparams *layer_hp; /* (n_layer), hp.layer points here */
    float *rope_factors;        /* (rope_dim / 2) llama3 factors computed from keys, or NULL */
    const char *rope_scaling;   /* kvs_model_rope_scaling(); NULL = "none" */
    kvs_wmat tok_embd;          /* (n_vocab, n_embd) */
    kvs_wmat output;            /* (n_vocab, n_embd) */
    const float *output_norm;   /* (n_embd) */
    int tied_output;
    kvs_layer_weights *layers;  /* (n_layer) */
    void *pack_arena;           /* the packed copies of the streamed matrices (weights.c), or NULL */
    int far_rows;               /* their far prefetch (weights.c), kvs_model_far_prefetch */
    double far_check_ms[2];     /* a decode step's matmuls with it and without, where the load timed them */
    float *vec_copies;          /* (vec_copies_cap) float-aligned copies of the F32 vectors a file with
                                 * general.alignment < 4 places off the float grid (weights.c), or NULL */
    size_t vec_copies_cap, vec_copies_used; /* in floats */
    int64_t n_params;
    uint64_t weight_bytes;
    /* kvs_model_memo_*: lazily derived values (see model.h). */
    pthread_mutex_t memo_mu;
    unsigned memo_set;          /* bit i: memo[i] holds a value */
    uint8_t memo[KVS_MODEL_MEMO_N][32];
};

/* hparams.c: reads {arch}.* keys into m->hp. required = 0 reads what is there
 * (vocabulary-only files) and never fails on a missing key. */
int kvs_model_read_hparams(kvs_model *m, int required);
/* rope_scaling.c: {arch}.rope.scaling.* into hp.rope_freq_scale and, for
 * llama3 keys, m->rope_factors (called by kvs_model_read_hparams). */
int kvs_model_read_rope_scaling(kvs_model *m, int required);
/* rope_scaling.c: after binding, the frequency factors of each layer
 * (rope_freqs.weight or the keys' factors). */
int kvs_model_bind_rope_factors(kvs_model *m);
/* weights.c: builds the tensor views with shape and type checks. */
int kvs_model_bind_weights(kvs_model *m);
/* weights.c: the n floats of F32 tensor t as a float-aligned pointer: its
 * data in the mapping, or, where the file placed it off the float grid, a
 * copy in m->vec_copies (sized by kvs_model_bind_weights). NULL if that
 * space is exhausted. */
const float *kvs_model_float_vector(kvs_model *m, const kvs_gguf_tensor *t, int n);
/* weights.c: kernel-layout copies of the streamed matrices (kvs_wmat_pack),
 * made after binding, freed before the mapping closes; also sets their
 * far_rows (kvs_far_prefetch_rows). */
void kvs_model_pack_weights(kvs_model *m);
void kvs_model_unpack_weights(kvs_model *m);

#endif
