/*
 * Scalar reference of causal attention on Q8 KV rows (kvs_kv_type
 * KVS_KV_Q8: per key, D int8 levels k and a scale kd; likewise v, vd). The
 * canonical arithmetic for one query row (token t, head h, n = pos[t] + 1,
 * keys j in [lo, n) as in attention_ref.c):
 *
 *   qd   = kvs_q8_row(q -> q8)                 (the query row, 8-bit too)
 *   qs   = qd * scale
 *   s_j  = ((float)I_j * kd_j) * qs,  I_j = sum_d q8[d] * k_j[d]  (int32, exact)
 *   mx   = the largest s_j (s_j > mx replaces it: NaN never does)
 *   e_j  = kvs_exp_q8_ref(s_j - mx)
 *   S, recalibration: exactly as attention_ref.c, from these e_j and mx
 *   w_j  = e_j * vd_j                           (e_j after recalibration)
 *   pd   = wmax / 32767 (wmax: from +0, w_j > wmax replaces it),
 *   ipd  = pd >= FLT_MIN ? 1 / pd : 0,
 *   p_j  = kvs_level_of(w_j * ipd, 32767): in [0, 32767] (the clamp is
 *          for a damaged cache entry's negative value scale)
 *   A_b[d] = sum_{j in block b} p_j * v_j[d]    (int32, exact; block b = the
 *            keys of absolute slots [512 b, 512 b + 512): |A_b| < 2^31)
 *   o[d] = sum over blocks b ascending of (float)A_b[d], from +0 (fp32 adds)
 *   out[d] = (o[d] * pd) * (1 / S)
 *
 * Every sum of products is an exact integer, so a SIMD path may group the
 * multiply-adds any way it likes within a block; the float steps are
 * per-element (s_j, e_j, w_j, p_j) or per row (qd, pd, 1 / S), and the block
 * sums of o are the only float chain. A block whose keys a row does not see
 * adds +0 (o never is -0), so paths may skip it.
 *
 * Why these sizes: 8-bit keys and queries make the scores one vpdpbusd per 4
 * multiply-adds a lane (4x fp32's fma); the weights keep 15 bits relative to
 * the row's largest (a key at 1/32767 of the top still counts, which 8 bits
 * would drop: a row's many small weights can outweigh its largest), and
 * vpdpwssd takes them 2 per lane (2x fp32). Blocks of 512 keys, the most
 * the int32 sums hold at the largest weight and level (512 * 32767 * 128 <
 * 2^31): a block ends in a float add per output and, on AMX tiles, the
 * stores of its integer sums, which is what a block costs (blocks of 128
 * keys, before session 73, made one layer's prefill attention after 7680
 * keys 1.08x slower on the AMX Xeon). A SIMD unit's staged tile holds a
 * whole block (kernels_impl.h: KVS_ATTN_STAGE_FLOATS).
 */
#include <float.h>
#include <math.h>

#include "kernels/kernels_impl.h"

/* e^x for the softmax: x = s - mx, <= 0 or NaN (mx is the largest
 * non-NaN score), the domain on which the SIMD forms (exp16_q8,
 * kvs_exp8_q8) give these bits (checked once over every such float;
 * tests/test_exp_q8_paths.c checks the float edge whole and a stride of the
 * rest; past 0 they may differ). y = x log2 e = n + f (n the
 * nearest integer, |f| <= 1/2), 2^f by a degree-5 polynomial (coefficients
 * fitted here for relative error on [-1/2, 1/2] with p(0) = 1, so e^0 = 1:
 * 1.7e-7 in float), times
 * 2^n exactly (ldexpf; vscalefps in vectors). Not kvs_expf_ref: the Q8
 * weights keep 15 bits, and this takes 11 vector operations a lane group
 * against its 17 (the exp was as heavy as the score's dot products). */
float kvs_exp_q8_ref(float x) {
    const float y = x * 1.44269504088896341f;
    if (!(y >= -126.0f)) return 0.0f; /* also NaN and -inf: masked keys */
    const float n = nearbyintf(y), f = y - n;
    float p = 1.3287432957440615e-3f;
    p = fmaf(p, f, 9.671506471931934e-3f);
    p = fmaf(p, f, 5.550655722618103e-2f);
    p = fmaf(p, f, 2.4022242426872253e-1f);
    p = fmaf(p, f, 6.931470632553101e-1f);
    p = fmaf(p, f, 1.0f);
    return ldexpf(p, n > 200.0f ? 200 : (int)n); /* the clamp keeps (int)n defined */
}

/* The int32 block sums cover this many absolute slots. */
#define Q8_PV_BLOCK KVS_ATTN_Q8_PV_BLOCK

void kvs_attention_unit_q8_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    const int D = c->head_dim, group = c->n_head / c->n_kv_head;
    const size_t rb = kvs_kv_row_bytes(KVS_KV_Q8, D);
    const int8_t *K = (const int8_t *)c->k + (size_t)g * c->n_ctx * rb;
    const int8_t *V = (const int8_t *)c->v + (size_t)g * c->n_ctx * rb;
    float *s = work; /* (n_ctx) scores, then weights, of one row */
    int8_t q8[KVS_ATTN_Q8_MAX_DIM];
    int32_t acc[KVS_ATTN_Q8_MAX_DIM];
    float o[KVS_ATTN_Q8_MAX_DIM];
    for (int t = t0; t < t1; t++) {
        const int n = kvs_attn_n(c, c->pos[t]), lo = kvs_attn_lo(c, n);
        const int rc = kvs_attn_recal_row(c, c->pos[t]);
        const int dlo = rc ? c->recal.lo : 0, dhi = rc ? c->recal.hi : 0;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *q = c->q + ((size_t)t * c->n_head + h) * D;
            float *out = c->out + ((size_t)t * c->n_head + h) * D;
            const float qs = kvs_q8_row(q, q8, D) * c->scale;
            float mx = -INFINITY;
            for (int j = lo; j < n; j++) {
                const int8_t *k = K + (size_t)j * rb;
                int32_t isum = 0;
                for (int d = 0; d < D; d++) isum += (int32_t)q8[d] * k[d];
                s[j] = ((float)isum * kvs_q8_row_scale(k, D)) * qs;
                if (j >= dlo && j < dhi) s[j] = s[j] * c->recal.inv_t;
                if (s[j] > mx) mx = s[j]; /* NaN leaves it (vmaxps(s, mx) alike) */
            }
            const float inv = 1.0f / kvs_attn_softmax_ref(c, s, lo, n, mx, rc, kvs_exp_q8_ref);
            float wmax = 0.0f;
            for (int j = lo; j < n; j++) {
                s[j] = s[j] * kvs_q8_row_scale(V + (size_t)j * rb, D);
                if (s[j] > wmax) wmax = s[j]; /* NaN and -0 leave it */
            }
            const float pd = wmax / 32767.0f, ipd = pd >= FLT_MIN ? 1.0f / pd : 0.0f;
            for (int d = 0; d < D; d++) o[d] = 0.0f;
            for (int b0 = lo / Q8_PV_BLOCK * Q8_PV_BLOCK; b0 < n; b0 += Q8_PV_BLOCK) {
                for (int d = 0; d < D; d++) acc[d] = 0;
                const int j1 = b0 + Q8_PV_BLOCK < n ? b0 + Q8_PV_BLOCK : n;
                for (int j = b0 > lo ? b0 : lo; j < j1; j++) {
                    const int32_t p = kvs_level_of(s[j] * ipd, 32767.0f);
                    const int8_t *v = V + (size_t)j * rb;
                    for (int d = 0; d < D; d++) acc[d] += p * v[d];
                }
                for (int d = 0; d < D; d++) o[d] += (float)acc[d];
            }
            for (int d = 0; d < D; d++) out[d] = (o[d] * pd) * inv;
        }
    }
}
