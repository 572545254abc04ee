/* Hyperparameters from the {arch}.* GGUF keys, per-layer RoPE and windows
 * as the architecture's row (arch.h) describes them. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model_impl.h"

/* Reads {arch}.{suffix} as a positive int. A missing key gives dflt when it is
 * >= 0, else KVS_ERR_NOT_FOUND naming the key (only when required). */
static int get_int(kvs_model *m, const char *suffix, int dflt, int required, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    int64_t v;
    int st = kvs_gguf_get_i64(m->gguf, key, &v);
    if (st == KVS_ERR_NOT_FOUND) {
        if (dflt >= 0 || !required) { *out = dflt >= 0 ? dflt : 0; return KVS_OK; }
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: key %s is missing", m->path, key);
    }
    if (st != KVS_OK) return required ? kvs_error_prefix(st, "%s", m->path) : KVS_OK;
    if (v <= 0 || v > (1 << 24)) {
        if (!required) return KVS_OK;
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s = %lld is out of range", m->path, key, (long long)v);
    }
    *out = (int)v;
    return KVS_OK;
}

static int get_float(kvs_model *m, const char *suffix, float dflt, int required, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    int st = kvs_gguf_get_f32(m->gguf, key, out);
    if (st == KVS_ERR_NOT_FOUND) { *out = dflt; return KVS_OK; }
    if (st != KVS_OK) return required ? kvs_error_prefix(st, "%s", m->path) : KVS_OK;
    return KVS_OK;
}

/* Per-layer RoPE and window: sliding-window rows alternate local layers
 * (window, their own RoPE base, no scaling) with global ones. */
static int read_layers(kvs_model *m) {
    kvs_hparams *hp = &m->hp;
    const kvs_arch *a = hp->arch;
    int st, period = a->swa_period;
    float swa_base = a->swa_rope_base > 0.0f ? a->swa_rope_base : hp->rope_freq_base;
    if (period) {
        if ((st = get_int(m, "attention.sliding_window", -1, 1, &hp->n_swa)) ||
            (st = get_int(m, "attention.sliding_window_pattern", period, 1, &period)) ||
            (st = get_float(m, "rope.freq_base_swa", swa_base, 1, &swa_base)))
            return st;
        if (!(swa_base > 0.0f))
            return kvs_error(KVS_ERR_FORMAT, "%s: %s.rope.freq_base_swa = %g must be positive", m->path, m->arch,
                             swa_base);
    }
    if (!(m->layer_hp = calloc((size_t)hp->n_layer, sizeof *m->layer_hp)))
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", m->path);
    for (int l = 0; l < hp->n_layer; l++) {
        kvs_layer_hparams *lh = &m->layer_hp[l];
        int local = period > 0 && (l + 1) % period != 0;
        lh->rope_freq_base = local ? swa_base : hp->rope_freq_base;
        lh->rope_freq_scale = local ? 1.0f : hp->rope_freq_scale;
        lh->window = local ? hp->n_swa : 0;
    }
    hp->layer = m->layer_hp;
    return KVS_OK;
}

int kvs_model_read_hparams(kvs_model *m, int required) {
    kvs_hparams *hp = &m->hp;
    int st;
    if ((st = get_int(m, "block_count", -1, required, &hp->n_layer)) ||
        (st = get_int(m, "embedding_length", -1, required, &hp->n_embd)) ||
        (st = get_int(m, "feed_forward_length", -1, required, &hp->n_ff)) ||
        (st = get_int(m, "attention.head_count", -1, required, &hp->n_head)))
        return st;
    if ((st = get_int(m, "attention.head_count_kv", hp->n_head, required, &hp->n_head_kv)) ||
        (st = get_int(m, "context_length", 2048, required, &hp->n_ctx_train)))
        return st;
    if ((st = get_float(m, "attention.layer_norm_rms_epsilon", 1e-5f, required, &hp->norm_eps)) ||
        (st = get_float(m, "rope.freq_base", 10000.0f, required, &hp->rope_freq_base)))
        return st;

    hp->head_dim = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    int key_len = 0, val_len = 0;
    if ((st = get_int(m, "attention.key_length", 0, required, &key_len)) ||
        (st = get_int(m, "attention.value_length", 0, required, &val_len)))
        return st;
    if (key_len) hp->head_dim = key_len;
    if ((st = get_int(m, "rope.dimension_count", hp->head_dim, required, &hp->rope_dim))) return st;

    /* Linear or llama3 scaling (rope_scaling.c); others are refused. */
    if ((st = kvs_model_read_rope_scaling(m, required))) return st;

    hp->rope_neox = hp->arch ? hp->arch->rope_neox : 0;
    hp->attn_scale = hp->head_dim > 0 ? 1.0f / sqrtf((float)hp->head_dim) : 0.0f;
    if ((st = get_float(m, "attention.scale", hp->attn_scale, required, &hp->attn_scale)) ||
        (st = get_float(m, "final_logit_softcapping", 0.0f, required, &hp->logit_softcap)))
        return st;
    hp->embd_scale = hp->arch && hp->arch->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f;

    if (!required) return KVS_OK;
    /* every layer has tensors of its own: a block_count past the file's
     * tensors is a damaged or hostile header (16,777,216 in a 12-tensor file
     * had allocated 8 GB of layer state over 15 s before a missing tensor
     * refused it) */
    const int64_t n_tensors = kvs_gguf_n_tensors(m->gguf);
    if (hp->n_layer > n_tensors)
        return kvs_error(KVS_ERR_FORMAT, "%s: %s.block_count = %d, but the file holds %lld tensors in all", m->path,
                         m->arch, hp->n_layer, (long long)n_tensors);
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: %s.attention.head_count_kv = %d does not divide head_count = %d",
                         m->path, m->arch, hp->n_head_kv, hp->n_head);
    if (!key_len && hp->n_embd % hp->n_head != 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: embedding_length %d is not a multiple of head_count %d",
                         m->path, hp->n_embd, hp->n_head);
    if (val_len && val_len != hp->head_dim)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: key_length %d != value_length %d", m->path,
                         hp->head_dim, val_len);
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return kvs_error(KVS_ERR_FORMAT, "%s: %s.rope.dimension_count = %d does not fit head_dim %d",
                         m->path, m->arch, hp->rope_dim, hp->head_dim);
    /* int widths of the attention projections (weights.c, forward.c): a
     * product past INT_MAX had wrapped to a size the tensors matched */
    if ((int64_t)hp->n_head * hp->head_dim > INT_MAX / 4 || (int64_t)hp->n_head_kv * hp->head_dim > INT_MAX / 4)
        return kvs_error(KVS_ERR_FORMAT, "%s: head_count %d x head_dim %d is too large", m->path, hp->n_head,
                         hp->head_dim);
    /* finite too: an infinite scale or softcap had made every logit NaN, an
     * infinite epsilon every logit 0, with no error */
    if (!(hp->norm_eps > 0.0f && isfinite(hp->norm_eps)) || !(hp->rope_freq_base > 0.0f && isfinite(hp->rope_freq_base)))
        return kvs_error(KVS_ERR_FORMAT, "%s: rms epsilon %g / rope base %g must be positive and finite", m->path,
                         hp->norm_eps, hp->rope_freq_base);
    /* the scale at most KVS_MAX_ATTN_SCALE: with the queries and keys below
     * the forward's overflow bound (kvs_row_overflows) no score can overflow
     * (3e38 had made the scores inf and the outputs garbage, exit 0) */
    if (!(hp->attn_scale > 0.0f && hp->attn_scale <= KVS_MAX_ATTN_SCALE) ||
        !(hp->logit_softcap >= 0.0f && isfinite(hp->logit_softcap)))
        return kvs_error(KVS_ERR_FORMAT, "%s: %s.attention.scale %g (0 < scale <= %g) / final_logit_softcapping %g out "
                         "of range", m->path, m->arch, hp->attn_scale, (double)KVS_MAX_ATTN_SCALE, hp->logit_softcap);
    return read_layers(m);
}
