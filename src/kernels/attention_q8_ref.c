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
 *   vdmax = the largest vd_j, j in [lo, n) (from +0, vd_j > vdmax
 *          replaces it: NaN and -0 never do)
 *   pd   = top / 32767, top = kvs_attn_q8_weight_top(vdmax, f): vdmax, or
 *          vdmax * f where the recalibration's factor f > 1,
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
 * sums of o are the only float chain. A block whose levels are all 0 for a
 * row (keys it does not see, or weights under half a level) adds +0 (o never
 * is -0), so paths may skip it, and a key whose level is 0 adds 0 to the
 * exact sum.
 *
 * Why these sizes: 8-bit keys and queries make the scores one vpdpbusd per 4
 * multiply-adds a lane (4x fp32's fma); the weights keep 15 bits relative to
 * top (a key at 1/32767 of it still counts, which 8 bits would drop: a
 * row's many small weights can outweigh its largest), and vpdpwssd takes
 * them 2 per lane (2x fp32). Why top and not the largest w_j (before
 * session 75): e_j <= 1 (or f), so top bounds every w_j before any exp is
 * taken, and a SIMD pass turns each e_j into its level as it computes it
 * instead of storing w_j and reading it back once the largest is known (the
 * AVX-512 prefill's level pass was 12% of one layer's attention after 7680
 * keys); the largest weight's level is vd_j / vdmax of 32767, and SmolLM2's
 * Q8 KV perplexity on the GPL-3 text (ctx 2048, 3 windows) went from
 * 17.1349 to 17.1192 (F16 KV 17.1195); with the floor-split exp below as
 * well, 17.1383. Blocks of 512 keys, the most
 * the int32 sums hold at the largest weight and level (512 * 32767 * 128 <
 * 2^31): a block ends in a float add per output and, on AMX tiles, the
 * stores of its integer sums, which is what a block costs (blocks of 128
 * keys, before session 73, made one layer's prefill attention after 7680
 * keys 1.08x slower on the AMX Xeon). A SIMD unit's staged tile holds a
 * whole block (kernels_impl.h: KVS_ATTN_STAGE_FLOATS).
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* 2^f for f in [0, 1] by a degree-4 polynomial, coefficients fitted here
 * for relative error on [0, 1] with p(0) = 1 and p(1) = 2 (3.4e-6 in
 * float; exactly 1 and 2 at the ends), p <= 2 on every float of [0, 1]
 * (tests/test_exp_q8_paths.c), so e^x <= 1 for x <= 0. */
float kvs_exp_q8_poly(float f) {
    float p = 1.3555741868913174e-2f;
    p = fmaf(p, f, 5.2032362669706345e-2f);
    p = fmaf(p, f, 2.413797825574875e-1f);
    p = fmaf(p, f, 6.930320858955383e-1f);
    return fmaf(p, f, 1.0f);
}

/* e^x for the softmax: x = s - mx, <= 0 or NaN (mx is the largest
 * non-NaN score). y = x log2 e = n + f, n = floor(y), f = y - n rounded
 * down (in [0, 1)), 2^f by
 * kvs_exp_q8_poly, times 2^n (ldexpf: one rounding where the result is
 * subnormal; 0 below). 0 for y <= -300 (where it rounds to 0 anyway), -inf
 * (masked keys) and NaN. Why floor and not the nearest integer (before
 * session 75): vscalefps scales by 2^floor(y) itself and vreduceps gives f
 * in one instruction, so the AVX-512 form (exp16_q8) is a multiply, a
 * reduce, 4 fmas and a vscalefps, with no mask and no n: 7 operations a
 * lane group where the degree-5 form on [-1/2, 1/2] with its mask took 11.
 * The vector forms (exp16_q8 on x <= 0 or -inf, kvs_exp8_q8 on the whole
 * domain) give these bits (tests/test_exp_q8_paths.c). Not kvs_expf_ref:
 * the Q8 weights keep 15 bits, and this is well inside them. */
float kvs_exp_q8_ref(float x) {
    const float y = x * 1.44269504088896341f;
    if (!(y > -300.0f)) return 0.0f;
    /* f = y - n rounded down, as vreduceps's floor mode: the nearest s, one
     * float lower where it rounded up, i.e. where s + n > y (s + n is exact:
     * s is y - n itself where y <= -1/2, and s - 1 for s in [1/2, 1]) */
    const float n = floorf(y), s = y - n;
    const float f = s + n > y ? nextafterf(s, -INFINITY) : s;
    return ldexpf(kvs_exp_q8_poly(f), n > 200.0f ? 200 : (int)n); /* the clamp keeps (int)n defined */
}

/* kvs_attn_q8_vd_scan_fn in scalars. */
static float vd_max_from(const uint8_t *vds, size_t stride, int a, int b, float m) {
    for (int j = a; j < b; j++) {
        float vd;
        memcpy(&vd, vds + (size_t)j * stride, sizeof vd);
        if (vd > m) m = vd;
    }
    return m;
}

void kvs_attn_q8_vd_max(const uint8_t *vds, size_t stride, const int *lo, const int *n, int rows, float *out,
                        kvs_attn_q8_vd_scan_fn scan) {
    int a = 0, b = INT_MAX; /* the slots every row sees: [a, b) */
    for (int r = 0; r < rows; r++) {
        if (lo[r] > a) a = lo[r];
        if (n[r] < b) b = n[r];
    }
    if (!scan) scan = vd_max_from;
    const float common = a < b ? scan(vds, stride, a, b, 0.0f) : 0.0f;
    for (int r = 0; r < rows; r++) /* the ends are short: in scalars */
        out[r] = a < b ? vd_max_from(vds, stride, b, n[r], vd_max_from(vds, stride, lo[r], a, common))
                       : scan(vds, stride, lo[r], n[r], 0.0f);
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
            float f;
            const float inv = 1.0f / kvs_attn_softmax_ref(c, s, lo, n, mx, rc, kvs_exp_q8_ref, &f);
            for (int j = lo; j < n; j++) s[j] = s[j] * kvs_q8_row_scale(V + (size_t)j * rb, D);
            const float vdmax = vd_max_from((const uint8_t *)(V + D), rb, lo, n, 0.0f);
            const float pd = kvs_attn_q8_weight_top(vdmax, f) / 32767.0f, ipd = pd >= FLT_MIN ? 1.0f / pd : 0.0f;
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
