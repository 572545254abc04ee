/*
 * Scalar reference of causal attention and of the exp it uses. The canonical
 * arithmetic for one query row (token t, head h, kv head g, n = pos[t] + 1):
 *
 *   s_j  = (fma chain over d = 0..D-1 of q[d] * k_j[d], from 0) * scale
 *   mx   = max_j s_j
 *   e_j  = kvs_expf_ref(s_j - mx)
 *   S    = kvs_tree16 of 16 partial sums, e_j added to partial j % 16
 *   o[d] = fma chain over j = 0..n-1 of e_j * v_j[d], from 0
 *   out[d] = o[d] * (1 / S)
 *
 * Recalibrated rows (kvs_attn_recal: the row's position >= hi, D = the
 * document slots [lo, hi)):
 *
 *   s_j  = s_j * inv_t for j in D (before the max)
 *   Pd   = kvs_tree16 of 16 partial sums of e_j over j in D (partial j % 16)
 *   R    = kvs_tree16 of 16 partial sums of e_j over the other keys
 *   f    = kvs_attn_recal_factor(mx, Pd, s), e_j = e_j * f for j in D
 *   S    = fma(f, Pd, R), or S as it was where f = 1 (T = S = 1, or a
 *          scale of 1: the same bits as no recalibration)
 *
 * (S had been fma(f - 1, Pd, S) over all keys: with the documents holding
 * nearly all of the weight, S - Pd lost the other keys' sum to rounding, and
 * a small f (temperature and scale 0.2: f ~ 1e-8) gave S = 0 and NaN
 * outputs.)
 *
 * Keys and values are taken in ascending slot order. SIMD paths reproduce
 * these operations exactly (only the grouping of independent work changes).
 *
 * Sliding window (window > 0): j runs over lo..n-1 only, lo = n - window
 * when n > window. A masked key is the same as a key with e_j = +0: it adds
 * exactly +0 to partial j % 16 and to every o[d] (fma(+0, v, o) = o), so the
 * SIMD paths may mask keys in a tile or skip them, with the same bits, as
 * long as partials stay indexed by the absolute slot j % 16.
 */
#include <math.h>

#include "kernels/kernels_impl.h"

/* Cephes-style expf: x = n ln2 + r, e^r by a degree-7 polynomial; written as
 * explicit fma/mul/add so that vector code can repeat it bit for bit. */
float kvs_expf_ref(float x) {
    if (!(x >= -87.0f)) return 0.0f; /* also -inf and nan: masked keys */
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float r2 = r * r;
    p = fmaf(p, r2, r);
    p = p + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

float kvs_attn_recal_factor(float mx, float pd, float s) {
    if (!(pd > 0.0f) || !isfinite(mx)) return 1.0f;
    double e = ((double)s - 1.0) * ((double)mx + log((double)pd));
    /* bounded so that f and f * Pd stay finite floats */
    if (e > 60.0) e = 60.0;
    if (e < -60.0) e = -60.0;
    return (float)exp(e);
}

size_t kvs_attn_thread_floats(int n_ctx) {
    /* scores for KVS_ATTN_ROWS rows, then (SIMD) Qt / partial outputs of 3
     * blocks of 16 rows x 256 dims, and a staged f32 K/V tile */
    size_t ctx = kvs_attn_score_stride(n_ctx);
    return KVS_ATTN_ROWS * ctx + 3 * 16 * 256 + KVS_ATTN_STAGE_FLOATS + 64;
}

static inline float kv_get(const void *base, int kv_type, size_t idx) {
    if (kv_type == 0) return kvs_f16_to_f32(((const uint16_t *)base)[idx]);
    return ((const float *)base)[idx];
}

float kvs_attn_softmax_ref(const kvs_attn_call *c, float *s, int lo, int n, float mx, int rc, float (*exp_fn)(float),
                           float *factor) {
    const int dlo = rc ? c->recal.lo : 0, dhi = rc ? c->recal.hi : 0;
    float part[16] = {0}, dpart[16] = {0}, rpart[16] = {0};
    for (int j = lo; j < n; j++) {
        s[j] = exp_fn(s[j] - mx);
        part[j % 16] += s[j];
        if (j >= dlo && j < dhi) dpart[j % 16] += s[j];
        else rpart[j % 16] += s[j];
    }
    if (factor) *factor = 1.0f;
    if (!rc) return kvs_tree16(part);
    float pd = kvs_tree16(dpart), f = kvs_attn_recal_factor(mx, pd, c->recal.s);
    if (factor) *factor = f;
    for (int j = lo > dlo ? lo : dlo; j < n && j < dhi; j++) s[j] = s[j] * f;
    return f == 1.0f ? kvs_tree16(part) : fmaf(f, pd, kvs_tree16(rpart));
}

void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    int D = c->head_dim, group = c->n_head / c->n_kv_head;
    size_t kv_off = (size_t)g * c->n_ctx * D;
    float *s = work; /* (n_ctx) scores of one row */
    for (int t = t0; t < t1; t++) {
        const int n = kvs_attn_n(c, c->pos[t]), lo = kvs_attn_lo(c, n);
        const int rc = kvs_attn_recal_row(c, c->pos[t]);
        const int dlo = rc ? c->recal.lo : 0, dhi = rc ? c->recal.hi : 0;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *q = c->q + ((size_t)t * c->n_head + h) * D;
            float *out = c->out + ((size_t)t * c->n_head + h) * D;
            float mx = -INFINITY;
            for (int j = lo; j < n; j++) {
                float acc = 0.0f;
                for (int d = 0; d < D; d++)
                    acc = fmaf(q[d], kv_get(c->k, c->kv_type, kv_off + (size_t)j * D + d), acc);
                s[j] = acc * c->scale;
                if (j >= dlo && j < dhi) s[j] = s[j] * c->recal.inv_t;
                mx = fmaxf(mx, s[j]);
            }
            float sum = kvs_attn_softmax_ref(c, s, lo, n, mx, rc, kvs_expf_ref, NULL);
            float inv = 1.0f / sum;
            for (int d = 0; d < D; d++) {
                float o = 0.0f;
                for (int j = lo; j < n; j++)
                    o = fmaf(s[j], kv_get(c->v, c->kv_type, kv_off + (size_t)j * D + d), o);
                out[d] = o * inv;
            }
        }
    }
}
