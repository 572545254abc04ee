/*
 * AVX-512 VNNI attention on Q8 KV rows, what the prefill layout
 * (attention_q8_avx512.c) and the decode layout with its split
 * (attention_q8_avx512_decode.c) share: the dot as inline asm, the unit and
 * its rows (and decode layout), the value words of 4 keys, the queries'
 * levels. The arithmetic is attention_q8_ref.c's (see attention_q8_avx512.c).
 * Include after the AVX-512 VNNI target pragma.
 */
#ifndef KVS_KERNELS_ATTENTION_Q8_AVX512_H
#define KVS_KERNELS_ATTENTION_Q8_AVX512_H

#include <float.h>

#include "kernels/attention_avx512.h"

#define PV_BLOCK KVS_ATTN_Q8_PV_BLOCK

/* The dot products as inline asm: through the intrinsics, GCC 12 copies
 * or spills the tied accumulators of vpdpbusd between
 * iterations (the score pass at ctx 4096 ran at ~1/8 of the dot peak; with
 * these, 2.1x faster). Same instructions, so the same exact integers. */
AI __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
    return acc;
}

typedef struct q8_unit {
    unit_ctx u;
    const int8_t *K, *V; /* kv head g's rows */
    size_t rb;           /* bytes per row */
    /* slot j's key and value scales at kds / vds + j * sstride: the cache
     * rows', or the staged arrays (kvs_attn_q8_staged_scales) */
    const uint8_t *kds, *vds;
    size_t sstride;
    int nrb, maxall, maxn[3], nr[3];
    __m512i nvec[3], lovec[3];
    __m512i qoff[3]; /* 128 * sum(q8) per lane */
    __m512 qs[3];    /* qd * scale per lane */
    __m512 mx[3], pd[3];
    float vdmax[KVS_ATTN_ROWS]; /* per row (0 past the unit's): kvs_attn_q8_vd_max, for the prefill's levels */
    int negative; /* a weight level < 0 (negative value scales): no byte split */
    /* kv head g's decode layout (kernels.h kvs_attn_layout), slots [l0, ln):
     * keys' words per 16 slots, their scales, values' 4-key words, scales */
    const __m512i *lk;
    const float *lkd, *lvd;
    const int32_t *lv;
    int l0, ln;
} q8_unit;

/* Kv head g's parts of a decode layout of nb blocks at head (writable:
 * kvs_attention_layout_q8_avx512 fills it). */
typedef struct layout_head {
    __m512i *k;
    float *kd, *vd;
    int32_t *v;
} layout_head;

static inline layout_head layout_head_at(void *data, int D, int n_ctx, int g) {
    const size_t nb = (size_t)(n_ctx + 15) / 16;
    uint8_t *h = (uint8_t *)data + (size_t)g * kvs_attn_layout_head_bytes(D, n_ctx);
    layout_head l = {.k = (__m512i *)h};
    l.kd = (float *)(h + nb * 16 * D);
    l.v = (int32_t *)(h + nb * (16 * D + 64));
    l.vd = (float *)(h + nb * (32 * D + 64));
    return l;
}

/* Slot j's key scale and value scale (q8_unit's kds / vds). */
static inline float q8_key_scale(const q8_unit *x, int j) {
    float d;
    memcpy(&d, x->kds + (size_t)j * x->sstride, sizeof d);
    return d;
}
static inline float q8_value_scale(const q8_unit *x, int j) {
    float d;
    memcpy(&d, x->vds + (size_t)j * x->sstride, sizeof d);
    return d;
}

/* Kv head g's rows and, where the call has one, its decode layout. */
static inline void q8_unit_rows(q8_unit *x, const kvs_attn_call *c, int g) {
    x->rb = kvs_kv_row_bytes(KVS_KV_Q8, c->head_dim);
    x->K = (const int8_t *)c->k + (size_t)g * c->n_ctx * x->rb;
    x->V = (const int8_t *)c->v + (size_t)g * c->n_ctx * x->rb;
    x->kds = (const uint8_t *)(x->K + c->head_dim);
    x->vds = (const uint8_t *)(x->V + c->head_dim);
    x->sstride = x->rb;
    x->l0 = x->ln = 0;
    if (c->layout.data && kvs_attn_layout_fits(KVS_KV_Q8, c->head_dim)) {
        const layout_head l = layout_head_at((void *)c->layout.data, c->head_dim, c->n_ctx, g);
        x->lk = l.k;
        x->lkd = l.kd;
        x->lv = l.v;
        x->lvd = l.vd;
        x->ln = (c->layout.n < c->n_ctx ? c->layout.n : c->n_ctx) & ~15;
        x->l0 = c->layout.lo < 0 ? 0 : (c->layout.lo + 15) & ~15;
        if (x->l0 >= x->ln) x->l0 = x->ln = 0;
    }
}

/* out[i] 128-bit lane L = a[L] lane i, a = (c0, c1, c2, c3): the 4 x 4
 * transpose of 128-bit lanes. */
AI void lanes_transpose4(__m512i c0, __m512i c1, __m512i c2, __m512i c3, __m512i out[4]) {
    const __m512i v0 = _mm512_shuffle_i32x4(c0, c1, 0x44), v1 = _mm512_shuffle_i32x4(c0, c1, 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(c2, c3, 0x44), v3 = _mm512_shuffle_i32x4(c2, c3, 0xee);
    out[0] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    out[1] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    out[2] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    out[3] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
}

/* The values v_j.. v_j+3 of dims d..d+63 (fewer past D) as 4-key byte
 * words (bytes v_j[d], v_j+2[d], v_j+1[d], v_j+3[d]: the order weights_rows
 * packs p in): c[i] 128-bit lane L holds the words of dims d + 16 L + 4 i
 * .. + 3. Keys past the buffer read as 0: their weight is 0 anyway. */
AI void value_words(const int8_t *V, size_t rb, int n_ctx, int D, int j, int d, __m512i c[4]) {
    const __mmask64 m = D - d >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (D - d)) - 1;
    __m512i k[4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        k[h] = j + h < n_ctx ? _mm512_maskz_loadu_epi8(m, V + (size_t)(j + h) * rb + d) : _mm512_setzero_si512();
    const __m512i alo = _mm512_unpacklo_epi8(k[0], k[2]), ahi = _mm512_unpackhi_epi8(k[0], k[2]);
    const __m512i blo = _mm512_unpacklo_epi8(k[1], k[3]), bhi = _mm512_unpackhi_epi8(k[1], k[3]);
    c[0] = _mm512_unpacklo_epi16(alo, blo);
    c[1] = _mm512_unpackhi_epi16(alo, blo);
    c[2] = _mm512_unpacklo_epi16(ahi, bhi);
    c[3] = _mm512_unpackhi_epi16(ahi, bhi);
}

/* Values of keys [j0, j0 + nk) (j0 a multiple of 4) per 4 keys, for the
 * prefill's byte weights: v4[(j - j0) / 4 * D + d] = the 4-key word of dim
 * d (value_words), for the 64-dim parts that hold dims [da, db). */
static inline void stage_values4(const q8_unit *x, int j0, int nk, int da, int db, int32_t *v4) {
    const int D = x->u.D;
    for (int j = j0; j < j0 + nk; j += 4) {
        int32_t *out = v4 + (size_t)((j - j0) / 4) * D;
        for (int d = da & ~63; d < db; d += 64) {
            __m512i c[4], w[4];
            value_words(x->V, x->rb, x->u.c->n_ctx, D, j, d, c);
            lanes_transpose4(c[0], c[1], c[2], c[3], w);
            for (int i = 0; i < 4 && d + 16 * i < D; i++) _mm512_storeu_si512(out + d + 16 * i, w[i]);
        }
    }
}

/* A query row's levels, the integer offset 128 sum(q8) that the keys' + 128
 * add to its dots, and qd * scale. The levels are kvs_q8_row's, in vectors
 * (D a multiple of 16; scalar, the queries took 8% of a 4096-token
 * prefill's attention): the lane maxima keep its "a > amax" rule
 * (vmaxps(a, amax) returns amax for a NaN a), and a maximum's order is
 * free; x id clamped to +-127, NaN to 0, rounded to even as nearbyintf. */
static inline float query_levels(const kvs_attn_call *c, const float *q, int8_t *q8, int32_t *off) {
    const int D = c->head_dim;
    __m512 amax = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) amax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(q + d)), amax);
    const float qd = _mm512_reduce_max_ps(amax) / 127.0f;
    const __m512 id = _mm512_set1_ps(qd >= FLT_MIN ? 1.0f / qd : 0.0f);
    const __m512 top = _mm512_set1_ps(127.0f), bottom = _mm512_set1_ps(-127.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int d = 0; d < D; d += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(q + d), id);
        const __m512i l = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q),
                                                   _mm512_max_ps(_mm512_min_ps(v, top), bottom));
        _mm_storeu_si128((__m128i *)(q8 + d), _mm512_cvtepi32_epi8(l));
        sum = _mm512_add_epi32(sum, l);
    }
    *off = 128 * _mm512_reduce_add_epi32(sum);
    return qd * c->scale;
}


/* Score s_j of key jabs (scale kd broadcast) for block b's 16 rows from
 * their exact integer dots isum: ((float)isum * kd) * qs as the reference,
 * -inf where a row does not see the key (masked 0: the caller knows that
 * all 16 rows see it); the running maxima *mx (the caller's copy of
 * x->mx[b], kept in a register) and the score row updated. The
 * score pass's epilogue on every path. */
AI void score_out(q8_unit *x, __m512 *mx, int b, int jabs, __m512i isum, __m512 kd, int masked) {
    const __m512 s = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), kd), x->qs[b]);
    __m512 v = s;
    if (masked) {
        const __m512i jv = _mm512_set1_epi32(jabs);
        const __mmask16 live = _mm512_cmpgt_epi32_mask(x->nvec[b], jv) & _mm512_cmple_epi32_mask(x->lovec[b], jv);
        v = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), live, s);
    }
    *mx = _mm512_max_ps(v, *mx); /* a NaN score leaves the max */
    _mm512_storeu_ps(x->u.S + (size_t)b * 16 * x->u.ctxs + (size_t)jabs * 16, v);
}

/* The AMX parts of the prefill layout (attention_q8_amx.c), where
 * kvs_attn_q8_amx_on(D): the scores as int8 tile products (from the keys
 * kvs_attn_q8_amx_stage_keys lays out, or from the cache rows in place),
 * P.V on tiles from the values staged as kvs_attn_q8_amx_stage_values lays them
 * out. */
int kvs_attn_q8_amx_on(int D);
void kvs_attn_q8_amx_begin(void);
void kvs_attn_q8_amx_end(void);
int kvs_attn_q8_amx_scores(q8_unit *x, const int32_t *Qt, int ja, int jb, const int8_t *rows, size_t stride, int whole);
void kvs_attn_q8_amx_stage_keys(const q8_unit *x, int j0, int j1, uint8_t *kt, size_t kb);
void kvs_attn_q8_amx_stage_values(const q8_unit *x, int j0, int j1, uint8_t *vt);
int kvs_attn_q8_amx_pv_fits(const q8_unit *x);
void kvs_attn_q8_amx_pv(q8_unit *x, const uint8_t *vt, int vlo, float *O);

/* The decode layout's unit (attention_q8_avx512_decode.c): 0, or 1 when a
 * weight level came out negative (the caller reruns it on the AVX2 path). */
int kvs_attention_decode_unit_q8_avx512(q8_unit *x);

#endif
