/*
 * RoPE scaling: which rotation the global layers use beyond plain RoPE.
 *
 *   {arch}.rope.scaling.type   none | linear | llama3; anything else is refused
 *   linear   positions * 1 / {arch}.rope.scaling.factor (older files:
 *            {arch}.rope.scale_linear)
 *   llama3   per-pair frequency factors ff_i: theta_i = pos * base^(-2i/d) / ff_i.
 *            Two ways a file carries them:
 *            - the tensor rope_freqs.weight (rope_dim/2 F32), which llama.cpp's
 *              HF converter writes for Llama 3.1+ (and no scaling.type key);
 *            - the keys {arch}.rope.scaling.{factor, low_freq_factor,
 *              high_freq_factor, original_context_length} with type llama3,
 *              from which the factors are computed as HF's
 *              _compute_llama3_parameters does.
 *            A file with both must agree (else it is refused).
 *
 * Local (sliding-window) layers keep plain RoPE: the factors go to the
 * global layers only (hparams.c gives local layers scale 1 for the same
 * reason). Rows that do not set kvs_arch.rope_freqs refuse both forms.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model_impl.h"

#define ROPE_FREQS_TENSOR "rope_freqs.weight"

static void key_of(const kvs_model *m, const char *suffix, char *key, size_t cap) {
    snprintf(key, cap, "%s.%s", m->arch, suffix);
}

/* A required float key of the llama3 scaling (missing: an error naming it). */
static int need_float(const kvs_model *m, const char *suffix, float *out) {
    char key[128];
    key_of(m, suffix, key, sizeof key);
    int st = kvs_gguf_get_f32(m->gguf, key, out);
    if (st == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: %s.rope.scaling.type is llama3 but key %s is missing", m->path,
                         m->arch, key);
    if (st) return kvs_error_prefix(st, "%s", m->path);
    if (!isfinite(*out) || !(*out > 0.0f))
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s = %g must be a positive number", m->path, key, *out);
    return KVS_OK;
}

/* HF transformers' _compute_llama3_parameters, per rotating pair. */
static int llama3_factors(kvs_model *m) {
    const kvs_hparams *hp = &m->hp;
    float factor, low, high;
    int st;
    if ((st = need_float(m, "rope.scaling.factor", &factor)) ||
        (st = need_float(m, "rope.scaling.low_freq_factor", &low)) ||
        (st = need_float(m, "rope.scaling.high_freq_factor", &high)))
        return st;
    char key[128];
    key_of(m, "rope.scaling.original_context_length", key, sizeof key);
    int64_t orig = 0;
    st = kvs_gguf_get_i64(m->gguf, key, &orig);
    if (st == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: %s.rope.scaling.type is llama3 but key %s is missing", m->path,
                         m->arch, key);
    if (st) return kvs_error_prefix(st, "%s", m->path);
    if (orig <= 0 || orig > (1 << 24))
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s = %lld is out of range", m->path, key, (long long)orig);
    if (!(high > low))
        return kvs_error(KVS_ERR_UNSUPPORTED,
                         "%s: %s.rope.scaling.high_freq_factor %g must exceed low_freq_factor %g (llama3 scaling)",
                         m->path, m->arch, high, low);
    int half = hp->rope_dim / 2;
    if (!(m->rope_factors = malloc((size_t)(half > 0 ? half : 1) * sizeof(float))))
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", m->path);
    const double pi = 3.14159265358979323846;
    double low_wavelen = (double)orig / low, high_wavelen = (double)orig / high;
    for (int i = 0; i < half; i++) {
        double freq = pow((double)hp->rope_freq_base, -2.0 * i / (double)hp->rope_dim);
        double wavelen = 2.0 * pi / freq, ff;
        if (wavelen < high_wavelen) ff = 1.0;            /* high frequencies: unchanged */
        else if (wavelen > low_wavelen) ff = factor;     /* low frequencies: divided by factor */
        else {                                           /* in between: interpolated */
            double smooth = ((double)orig / wavelen - low) / ((double)high - low);
            ff = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        m->rope_factors[i] = (float)ff;
    }
    return KVS_OK;
}

/* 1 / the linear factor in {arch}.{suffix}, or 1 when absent or 0 (llama.cpp
 * reads 0 as unset). A value of the wrong type, negative or not finite is an
 * error naming the key (when required). */
static int linear_scale(kvs_model *m, const char *suffix, int required, float *scale) {
    char key[128];
    key_of(m, suffix, key, sizeof key);
    float factor = 1.0f;
    int st = kvs_gguf_get_f32(m->gguf, key, &factor);
    *scale = 1.0f;
    if (st == KVS_ERR_NOT_FOUND || !required) {
        if (st == KVS_OK && factor > 0.0f && isfinite(1.0f / factor)) *scale = 1.0f / factor;
        return KVS_OK;
    }
    if (st) return kvs_error_prefix(st, "%s", m->path);
    if (factor == 0.0f) return KVS_OK;
    /* (a positive factor whose reciprocal is inf, e.g. 1e-40, had loaded
     * and made every RoPE angle NaN) */
    if (!isfinite(factor) || !(factor > 0.0f) || !isfinite(1.0f / factor))
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s = %g must be a positive number (with a finite reciprocal)",
                         m->path, key, factor);
    *scale = 1.0f / factor;
    return KVS_OK;
}

int kvs_model_read_rope_scaling(kvs_model *m, int required) {
    kvs_hparams *hp = &m->hp;
    char key[128];
    key_of(m, "rope.scaling.type", key, sizeof key);
    kvs_gguf_str stype;
    int st_type = kvs_gguf_get_str(m->gguf, key, &stype);
    /* present but not a string: an error (it had read as absent, and the
     * model ran without its scaling) */
    if (st_type != KVS_OK && st_type != KVS_ERR_NOT_FOUND) return st_type;
    int has_type = st_type == KVS_OK;
    hp->rope_freq_scale = 1.0f;
    /* Older files carry only rope.scale_linear. */
    if (!has_type) {
        int st = linear_scale(m, "rope.scale_linear", required, &hp->rope_freq_scale);
        if (hp->rope_freq_scale != 1.0f) m->rope_scaling = "linear";
        return st;
    }
    if (kvs_gguf_str_eq(stype, "none")) return KVS_OK;
    if (kvs_gguf_str_eq(stype, "linear")) {
        m->rope_scaling = "linear";
        return linear_scale(m, "rope.scaling.factor", required, &hp->rope_freq_scale);
    }
    if (!required) return KVS_OK;
    if (kvs_gguf_str_eq(stype, "llama3") && hp->arch && hp->arch->rope_freqs) {
        m->rope_scaling = "llama3 (rope.scaling.* keys)";
        return llama3_factors(m);
    }
    return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not supported for architecture '%s' (%s)", m->path,
                     key, (int)(stype.len > 64 ? 64 : stype.len), stype.ptr, m->arch,
                     hp->arch && hp->arch->rope_freqs ? "none, linear or llama3" : "none or linear");
}

int kvs_model_bind_rope_factors(kvs_model *m) {
    kvs_hparams *hp = &m->hp;
    const int half = hp->rope_dim / 2;
    const float *ff = m->rope_factors;
    const kvs_gguf_tensor *t = kvs_gguf_find_tensor(m->gguf, ROPE_FREQS_TENSOR);
    if (t) {
        if (!hp->arch->rope_freqs)
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "%s: tensor %s (RoPE frequency factors) is not supported for architecture '%s'", m->path,
                             ROPE_FREQS_TENSOR, m->arch);
        if (t->ne[0] != half || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
            return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: shape (%lld, %lld) but rope_dim / 2 = %d", m->path,
                             ROPE_FREQS_TENSOR, (long long)t->ne[0], (long long)t->ne[1], half);
        if (t->type != KVS_TYPE_F32)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor %s: type %d, expected F32", m->path, ROPE_FREQS_TENSOR,
                             t->type);
        const float *tf = kvs_model_float_vector(m, t, half); /* float-aligned (weights.c) */
        if (!tf)
            return kvs_error(KVS_ERR_INTERNAL, "%s: tensor %s: no room left for its aligned copy", m->path,
                             ROPE_FREQS_TENSOR);
        for (int i = 0; i < half; i++) {
            if (!isfinite(tf[i]) || !(tf[i] > 0.0f))
                return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: factor %d = %g must be positive", m->path,
                                 ROPE_FREQS_TENSOR, i, tf[i]);
            /* Both forms present: they describe one rotation or the file is
             * contradictory (float32 conversions differ by ulps only). */
            if (ff && fabs((double)ff[i] - tf[i]) > 1e-4 * tf[i])
                return kvs_error(KVS_ERR_FORMAT,
                                 "%s: tensor %s: factor %d = %g but the %s.rope.scaling.* keys give %g", m->path,
                                 ROPE_FREQS_TENSOR, i, tf[i], m->arch, ff[i]);
        }
        ff = tf;
        m->rope_scaling = m->rope_factors ? "llama3 (rope_freqs.weight, equal to the rope.scaling.* keys)"
                                          : "llama3 (rope_freqs.weight)";
    }
    for (int l = 0; l < hp->n_layer; l++) {
        kvs_layer_hparams *lh = &m->layer_hp[l];
        lh->rope_freq_factors = lh->window ? NULL : ff;
    }
    return KVS_OK;
}
