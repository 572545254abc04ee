/* Weight views into the GGUF mapping, with type and shape checks per tensor. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "model/model_impl.h"

static const kvs_gguf_tensor *find(const kvs_model *m, const char *name) {
    return kvs_gguf_find_tensor(m->gguf, name);
}

static int shape_error(const kvs_model *m, const char *name, const kvs_gguf_tensor *t, int64_t e0, int64_t e1) {
    return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: shape (%lld, %lld, %lld) but the hyperparameters need (%lld, %lld)",
                     m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)e0, (long long)e1);
}

/* A matrix with ne = (k, n). */
static int bind_mat(const kvs_model *m, const char *name, int k, int n, kvs_wmat *w) {
    const kvs_gguf_tensor *t = find(m, name);
    if (!t) return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor %s is missing", m->path, name);
    if (t->ne[0] != k || t->ne[1] != n || t->ne[2] != 1 || t->ne[3] != 1) return shape_error(m, name, t, k, n);
    const kvs_type_traits *tr = kvs_type_traits_of(t->type);
    if (!tr || !tr->supported)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor %s: type %s (%d) is not supported", m->path, name,
                         tr ? tr->name : "unknown", t->type);
    size_t row = kvs_type_row_bytes(t->type, k);
    if (!row || row * (size_t)n > t->nbytes)
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: %d columns do not fit type %s", m->path, name, k, tr->name);
    w->data = t->data;
    w->type = t->type;
    w->n = n;
    w->k = k;
    w->row_bytes = row;
    return KVS_OK;
}

/* An F32 vector of n elements (norm weights, biases). optional: absent -> NULL. */
static int bind_vec(const kvs_model *m, const char *name, int n, int optional, const float **out) {
    const kvs_gguf_tensor *t = find(m, name);
    if (!t) {
        if (optional) { *out = NULL; return KVS_OK; }
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor %s is missing", m->path, name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) return shape_error(m, name, t, n, 1);
    if (t->type != KVS_TYPE_F32)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor %s: type %d, expected F32", m->path, name, t->type);
    *out = t->data; /* the reader validated alignment, so the floats are aligned */
    return KVS_OK;
}

int kvs_model_bind_weights(kvs_model *m) {
    kvs_hparams *hp = &m->hp;
    int st;
    const kvs_gguf_tensor *emb = find(m, "token_embd.weight");
    if (!emb) return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor token_embd.weight is missing", m->path);
    if (emb->ne[1] <= 0 || emb->ne[1] > (1 << 24))
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor token_embd.weight: %lld rows", m->path, (long long)emb->ne[1]);
    hp->n_vocab = (int)emb->ne[1];
    if ((st = bind_mat(m, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd))) return st;
    if ((st = bind_vec(m, "output_norm.weight", hp->n_embd, 0, &m->output_norm))) return st;
    m->tied_output = find(m, "output.weight") == NULL;
    if (m->tied_output) m->output = m->tok_embd;
    else if ((st = bind_mat(m, "output.weight", hp->n_embd, hp->n_vocab, &m->output))) return st;

    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    int qkv_bias = strcmp(m->arch, "qwen2") == 0;
    for (int l = 0; l < hp->n_layer; l++) {
        kvs_layer_weights *w = &m->layers[l];
        char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d." s, l), name)
        if ((st = bind_vec(m, NAME("attn_norm.weight"), hp->n_embd, 0, &w->attn_norm)) ||
            (st = bind_mat(m, NAME("attn_q.weight"), hp->n_embd, q_dim, &w->wq)) ||
            (st = bind_mat(m, NAME("attn_k.weight"), hp->n_embd, kv_dim, &w->wk)) ||
            (st = bind_mat(m, NAME("attn_v.weight"), hp->n_embd, kv_dim, &w->wv)) ||
            (st = bind_mat(m, NAME("attn_output.weight"), q_dim, hp->n_embd, &w->wo)) ||
            (st = bind_vec(m, NAME("attn_q.bias"), q_dim, !qkv_bias, &w->bq)) ||
            (st = bind_vec(m, NAME("attn_k.bias"), kv_dim, !qkv_bias, &w->bk)) ||
            (st = bind_vec(m, NAME("attn_v.bias"), kv_dim, !qkv_bias, &w->bv)) ||
            (st = bind_vec(m, NAME("ffn_norm.weight"), hp->n_embd, 0, &w->ffn_norm)) ||
            (st = bind_mat(m, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, &w->w_gate)) ||
            (st = bind_mat(m, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, &w->w_up)) ||
            (st = bind_mat(m, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, &w->w_down)))
            return st;
#undef NAME
    }
    return KVS_OK;
}

/* Repacked copies of the matrices a forward pass streams (kernels/pack.c:
 * same bits, faster decode where the kernels read them; none where they do
 * not). token_embd is only read a row at a time, so a tied output head gets
 * its own packed copy and tok_embd none. A failed allocation leaves a matrix
 * unpacked, which only costs speed. */
static void for_each_streamed(kvs_model *m, void (*fn)(kvs_wmat *)) {
    fn(&m->output);
    for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
        kvs_layer_weights *w = &m->layers[l];
        kvs_wmat *mats[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) fn(mats[i]);
    }
}

static void pack_one(kvs_wmat *w) { (void)kvs_wmat_pack(w, 0); }

void kvs_model_pack_weights(kvs_model *m) { for_each_streamed(m, pack_one); }
void kvs_model_unpack_weights(kvs_model *m) { for_each_streamed(m, kvs_wmat_unpack); }
