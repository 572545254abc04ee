/*
 * AVX-512 (F, BW, VL, VNNI, VBMI) matmul. Produces exactly the bits of the
 * scalar reference (matmul_ref.c); see the canonical order in kernels_impl.h.
 *
 * Quantized weights: one zmm lane per block. A group of 16 weight blocks is
 * rearranged once per weight row ("prep") so that vector v holds, in lane l,
 * the 4 bytes of block l that meet the 4 activation bytes of lane l in the
 * interleaved xq layout (quant.h). Eight vpdpbusd then leave each block's
 * exact integer dot product in its own lane, and the float work is one
 * cvt + mul + fma (+ fma for Q4_1) per 16 blocks, lane l being chain l.
 *
 *   prep of one weight row, group g:  v[0..7] (u8 nibbles or s8 bytes),
 *   dw (16 floats), mw (Q4_1), corr (Q8_0: -128 * sum of the block's bytes)
 *
 * Tiles: MR activation rows x NR weight rows of outputs (4 x 4), each output
 * one zmm accumulator (16 chains); the k loop runs over full groups. Then the
 * 16 accumulators of the tile are reduced together (a transposed kvs_tree16)
 * into one vector whose lane 4j + i is output (i, j), and the tail blocks
 * (nb % 16, e.g. 2 of SmolLM2's 18) are computed with lanes = outputs: the
 * tail weight dwords are prepared as lane 4j + i = row j, the activation
 * dwords of the tile's 4 rows are one 16-byte broadcast (quant.h), so eight
 * vpdpbusd give the tail block's integer dots of all 16 outputs at once.
 * Any tile shape gives the same bits per output, so m = 1 and m = 512 agree.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2")
#endif

#include <immintrin.h>
#include <pthread.h>

#include "kernels/kernels_impl.h"

#define MR 4
#define NR 4
#define AI __attribute__((always_inline)) static inline

typedef struct prep_grp {
    __m512i v[8];
    __m512 dw;
    __m512 mw;   /* Q4_1 */
    __m512i corr; /* Q8_0 */
} prep_grp;

/* ---------------------------------------------------------------- helpers */

/* kvs_tree16 on a register: halves, quarters, pairs, then the last pair. */
AI float hsum_tree(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

/* ------------------------------------------------------------ quantize x */

/* One block: q bytes of elements 0..15 (pa) and 16..31 (pb), d, sum. */
AI float quantize_block(const float *xb, __m128i off, __m128i *pa, __m128i *pb, int32_t *sum) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
    __m512 mx = _mm512_max_ps(_mm512_and_ps(a, absmask), _mm512_and_ps(b, absmask));
    float amax = _mm512_reduce_max_ps(mx);
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vid)); /* round half even */
    __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vid));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
    *pa = _mm_xor_si128(_mm512_cvtepi32_epi8(qa), off);
    *pb = _mm_xor_si128(_mm512_cvtepi32_epi8(qb), off);
    return d;
}

/* dword r of pa -> vec 2r, of pb -> vec 2r+1; vec v at dst + v * stride. */
AI void scatter_dwords(uint8_t *dst, size_t stride, __m128i pa, __m128i pb) {
    _mm_storeu_si32(dst + 0 * stride, pa);
    _mm_storeu_si32(dst + 1 * stride, pb);
    _mm_storeu_si32(dst + 2 * stride, _mm_srli_si128(pa, 4));
    _mm_storeu_si32(dst + 3 * stride, _mm_srli_si128(pb, 4));
    _mm_storeu_si32(dst + 4 * stride, _mm_srli_si128(pa, 8));
    _mm_storeu_si32(dst + 5 * stride, _mm_srli_si128(pb, 8));
    _mm_storeu_si32(dst + 6 * stride, _mm_srli_si128(pa, 12));
    _mm_storeu_si32(dst + 7 * stride, _mm_srli_si128(pb, 12));
}

static void quantize_row(const float *x, int k, int wtype, uint8_t *xq, uint8_t *quad, int sub) {
    int ng = kvs_xq_groups(k), nt = kvs_xq_tail_blocks(k);
    const __m128i off = _mm_set1_epi8(wtype == KVS_TYPE_Q8_0 ? (char)0x80 : 0);
    __m128i pa, pb;
    int32_t sum;
    for (int g = 0; g < ng; g++) {
        uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
        for (int l = 0; l < KVS_XQ_GROUP; l++) {
            float d = quantize_block(x + (size_t)(g * KVS_XQ_GROUP + l) * KVS_QK, off, &pa, &pb, &sum);
            scatter_dwords(grp + 4 * l, 64, pa, pb);
            kvs_xq_d(grp)[l] = d;
            kvs_xq_s(grp)[l] = d * (float)sum;
            kvs_xq_sum(grp)[l] = wtype == KVS_TYPE_Q4_0 ? -8 * sum : sum;
        }
    }
    for (int t = 0; t < nt; t++) {
        float d = quantize_block(x + (size_t)(ng * KVS_XQ_GROUP + t) * KVS_QK, off, &pa, &pb, &sum);
        scatter_dwords(quad + (size_t)t * KVS_XQ_TAIL_BYTES + 4 * sub, 16, pa, pb);
        kvs_xq_tail_d(quad, t)[sub] = d;
        kvs_xq_tail_s(quad, t)[sub] = d * (float)sum;
        kvs_xq_tail_c(quad, t)[sub] = wtype == KVS_TYPE_Q4_0 ? -8 * sum : sum;
    }
}

static void avx512_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    for (int i = i0; i < i1; i++)
        quantize_row(c->x + (size_t)i * c->w->k, c->w->k, c->w->type,
                     (uint8_t *)c->xq + (size_t)i * c->xq_row,
                     (uint8_t *)c->xq_tail + (size_t)(i / 4) * c->xq_quad, i % 4);
}

/* ------------------------------------------------------------------ prep */

/* Q4_1: a 16-block group is 80 dwords; block l's dwords are 5l (d, m) and
 * 5l+1+r (qs dword r). Three permutes gather dword 5l+c into lane l. */
typedef struct perm3 {
    __m512i i01, i23, i4;
    __mmask16 m23, m4;
} perm3;

static perm3 q41_perm[5];

static void init_q41_perm(void) {
    for (int cidx = 0; cidx < 5; cidx++) {
        int32_t a[16], b[16], d[16];
        __mmask16 m23 = 0, m4 = 0;
        for (int l = 0; l < 16; l++) {
            int s = 5 * l + cidx;
            a[l] = s & 31;
            b[l] = (s - 32) & 31;
            d[l] = (s - 64) & 15;
            if (s >= 32 && s < 64) m23 |= (__mmask16)(1u << l);
            if (s >= 64) m4 |= (__mmask16)(1u << l);
        }
        q41_perm[cidx].i01 = _mm512_loadu_si512(a);
        q41_perm[cidx].i23 = _mm512_loadu_si512(b);
        q41_perm[cidx].i4 = _mm512_loadu_si512(d);
        q41_perm[cidx].m23 = m23;
        q41_perm[cidx].m4 = m4;
    }
}

AI __m512i gather5(const __m512i z[5], const perm3 *p) {
    __m512i r = _mm512_permutex2var_epi32(z[0], p->i01, z[1]);
    r = _mm512_mask_mov_epi32(r, p->m23, _mm512_permutex2var_epi32(z[2], p->i23, z[3]));
    return _mm512_mask_permutexvar_epi32(r, p->m4, p->i4, z[4]);
}

static void prep_q4_1(const uint8_t *row, int ng, prep_grp *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    for (int g = 0; g < ng; g++) {
        const uint8_t *src = row + (size_t)g * 16 * 20;
        __m512i z[5];
        for (int t = 0; t < 5; t++) z[t] = _mm512_loadu_si512(src + 64 * t);
        prep_grp *p = &out[g];
        __m512i dm = gather5(z, &q41_perm[0]);
        p->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        p->mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        for (int r = 0; r < 4; r++) {
            __m512i q = gather5(z, &q41_perm[1 + r]);
            p->v[2 * r] = _mm512_and_si512(q, lo4);
            p->v[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
        }
    }
}

/* Q4_0 (18-byte blocks) and Q8_0 (34-byte blocks) are not dword aligned:
 * gather dwords at byte offsets (masked for the tail). */
static void prep_gather(const uint8_t *row, int ng, int type, prep_grp *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const int bs = type == KVS_TYPE_Q4_0 ? 18 : 34;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i base = _mm512_mullo_epi32(lane, _mm512_set1_epi32(bs));
    for (int g = 0; g < ng; g++) {
        const uint8_t *src = row + (size_t)g * 16 * bs;
        prep_grp *p = &out[g];
        /* d: the first 2 bytes of each block; reading 4 bytes stays inside
         * the block (qs follows), so the gather never leaves the row. */
        __m512i dv = _mm512_i32gather_epi32(base, src, 1);
        p->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv));
        p->mw = _mm512_setzero_ps();
        if (type == KVS_TYPE_Q4_0) {
            for (int r = 0; r < 4; r++) {
                __m512i off = _mm512_add_epi32(base, _mm512_set1_epi32(2 + 4 * r));
                __m512i q = _mm512_i32gather_epi32(off, src, 1);
                p->v[2 * r] = _mm512_and_si512(q, lo4);
                p->v[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
            }
        } else {
            __m512i corr = _mm512_setzero_si512();
            const __m512i c128 = _mm512_set1_epi8((char)0x80);
            for (int r = 0; r < 8; r++) {
                __m512i off = _mm512_add_epi32(base, _mm512_set1_epi32(2 + 4 * r));
                __m512i q = _mm512_i32gather_epi32(off, src, 1);
                p->v[r] = q;
                corr = _mm512_dpbusd_epi32(corr, c128, q); /* 128 * sum of w bytes */
            }
            p->corr = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
        }
    }
}

/* Q8_0 weights meet x stored as x + 128 (unsigned): the weight bytes of
 * vector r are elements 4r..4r+3 of the block, while the xq layout puts
 * elements 4r'..4r'+3 (r' = 0..3) in vec 2r' and 16+4r'.. in vec 2r'+1.
 * So prep vector r pairs with xq vec xq_of_q8[r]. */
static const int xq_of_q8[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static void prep_rows(const kvs_wmat *w, int j0, int nr, prep_grp *out, int ng) {
    for (int j = 0; j < nr; j++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(j0 + j) * w->row_bytes;
        if (w->type == KVS_TYPE_Q4_1) prep_q4_1(row, ng, out + (size_t)j * ng);
        else prep_gather(row, ng, w->type, out + (size_t)j * ng);
    }
}

/* Tail blocks of the tile's nr rows, lane 4j + i = row j (any i). Vector v
 * pairs with xq vec v (Q4) or xq vec xq_of_q8[v] (Q8_0). Missing rows: 0.
 * Each row's 16 (or 32) q bytes go into one 128-bit lane of Z (lane 4j + r
 * = dword r of row j), and one permute per dword r spreads it. */
static void prep_tail(const kvs_wmat *w, int j0, int nr, int ng, int nt, prep_grp *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const int type = w->type;
    const int bs = type == KVS_TYPE_Q4_1 ? 20 : type == KVS_TYPE_Q4_0 ? 18 : 34;
    const int qoff = type == KVS_TYPE_Q4_1 ? 4 : 2;
    __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m128i rowoff = _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32((int)w->row_bytes));
    const __mmask8 rows = (__mmask8)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) {
        const uint8_t *blk0 = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes + (size_t)(ng * 16 + t) * bs;
        __m512i Z0 = _mm512_setzero_si512(), Z1 = _mm512_setzero_si512();
        for (int j = 0; j < nr; j++) {
            const uint8_t *b = blk0 + (size_t)j * w->row_bytes;
            Z0 = _mm512_mask_loadu_epi32(Z0, (__mmask16)(0xfu << (4 * j)), b + qoff - 16 * j);
            if (type == KVS_TYPE_Q8_0)
                Z1 = _mm512_mask_loadu_epi32(Z1, (__mmask16)(0xfu << (4 * j)), b + qoff + 16 - 16 * j);
        }
        /* first dword of each block: d (and m for Q4_1) */
        __m128i dm = _mm_mmask_i32gather_epi32(_mm_setzero_si128(), rows, rowoff, blk0, 1);
        prep_grp *p = &out[t];
        /* lane 4j + i <- row j */
        __m512i dm16 = _mm512_permutexvar_epi32(_mm512_srli_epi32(idx0, 2), _mm512_castsi128_si512(dm));
        p->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm16));
        p->mw = type == KVS_TYPE_Q4_1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm16, 16)))
                                      : _mm512_setzero_ps();
        __m512i idx = idx0;
        if (type == KVS_TYPE_Q8_0) {
            const __m512i c128 = _mm512_set1_epi8((char)0x80);
            __m512i corr = _mm512_setzero_si512();
            for (int r = 0; r < 8; r++) {
                __m512i q = _mm512_permutexvar_epi32(idx, r < 4 ? Z0 : Z1);
                p->v[r] = q;
                corr = _mm512_dpbusd_epi32(corr, c128, q);
                idx = r == 3 ? idx0 : _mm512_add_epi32(idx, _mm512_set1_epi32(1));
            }
            p->corr = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
        } else {
            for (int r = 0; r < 4; r++) {
                __m512i q = _mm512_permutexvar_epi32(idx, Z0);
                p->v[2 * r] = _mm512_and_si512(q, lo4);
                p->v[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
                idx = _mm512_add_epi32(idx, _mm512_set1_epi32(1));
            }
            p->corr = _mm512_setzero_si512();
        }
    }
}

/* kvs_tree16 of 16 vectors at once. C[4i + j] -> lane 4j + i of the result. */
AI __m512 tree16x16(const __m512 C[16]) {
    __m512 z[8], w4[4], v2[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++)
        z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(C[2 * p], C[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(C[2 * p], C[2 * p + 1], 0xee));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        w4[k] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], 0x88),
                              _mm512_shuffle_f32x4(z[2 * k], z[2 * k + 1], 0xdd));
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++)
        v2[a] = _mm512_add_ps(_mm512_shuffle_ps(w4[2 * a], w4[2 * a + 1], 0x44),
                              _mm512_shuffle_ps(w4[2 * a], w4[2 * a + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(v2[0], v2[1], 0x88), _mm512_shuffle_ps(v2[0], v2[1], 0xdd));
}

/* Writes lane 4j + i of r to y[i * ldy + j] for i < mr, j < nr. */
AI void store_tile(__m512 r, float *y, size_t ldy, int mr, int nr) {
    const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 t = _mm512_permutexvar_ps(tr, r); /* lane 4i + j */
    __mmask16 mk = (__mmask16)((1u << nr) - 1);
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        _mm512_mask_storeu_ps(y + (size_t)i * ldy - 4 * i, (__mmask16)(mk << (4 * i)), t);
}

/* --------------------------------------------------------------- kernels */

/* Q4_0 / Q4_1: weight nibbles (u8) in registers, xq bytes (s8) from memory. */
AI void kern_q4(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr, int q41) {
    __m512 C[16];
    #pragma GCC unroll 16
    for (int o = 0; o < 16; o++) C[o] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            const prep_grp *p = pw + (size_t)j * ng + g;
            __m512i W[8];
            #pragma GCC unroll 8
            for (int v = 0; v < 8; v++) W[v] = _mm512_load_si512(&p->v[v]);
            __m512 dw = _mm512_load_ps(&p->dw), mw = _mm512_load_ps(&p->mw);
            #pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const uint8_t *grp = xq + (size_t)i * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
                __m512i acc = q41 ? _mm512_setzero_si512()
                                  : _mm512_loadu_si512(grp + KVS_XQ_GROUP_QS + 128); /* -8 sum */
                #pragma GCC unroll 8
                for (int v = 0; v < 8; v++)
                    acc = _mm512_dpbusd_epi32(acc, W[v], _mm512_loadu_si512(grp + 64 * v));
                __m512 dx = _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS);
                __m512 s = _mm512_mul_ps(dw, dx);
                C[4 * i + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, C[4 * i + j]);
                if (q41) {
                    __m512 sx = _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS + 64);
                    C[4 * i + j] = _mm512_fmadd_ps(mw, sx, C[4 * i + j]);
                }
            }
        }
    }
    __m512 R = tree16x16(C);
    for (int t = 0; t < nt; t++) {
        const prep_grp *p = pt + t;
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
        __m512i acc = q41 ? _mm512_setzero_si512()
                          : _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qt + 160)));
        #pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
            acc = _mm512_dpbusd_epi32(acc, _mm512_load_si512(&p->v[v]),
                                      _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qt + 16 * v))));
        __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)(qt + 128)));
        R = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_load_ps(&p->dw), dx), R);
        if (q41) {
            __m512 sx = _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)(qt + 144)));
            R = _mm512_fmadd_ps(_mm512_load_ps(&p->mw), sx, R);
        }
    }
    store_tile(R, y, ldy, mr, nr);
}

/* Q8_0: xq bytes (u8, x + 128) in registers, weight bytes (s8) from memory. */
AI void kern_q8(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr) {
    __m512 C[16];
    #pragma GCC unroll 16
    for (int o = 0; o < 16; o++) C[o] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const uint8_t *grp = xq + (size_t)i * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
            __m512i X[8];
            #pragma GCC unroll 8
            for (int v = 0; v < 8; v++) X[v] = _mm512_loadu_si512(grp + 64 * xq_of_q8[v]);
            __m512 dx = _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS);
            #pragma GCC unroll 4
            for (int j = 0; j < nr; j++) {
                const prep_grp *p = pw + (size_t)j * ng + g;
                __m512i acc = _mm512_load_si512(&p->corr);
                #pragma GCC unroll 8
                for (int v = 0; v < 8; v++) acc = _mm512_dpbusd_epi32(acc, X[v], _mm512_load_si512(&p->v[v]));
                __m512 s = _mm512_mul_ps(_mm512_load_ps(&p->dw), dx);
                C[4 * i + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, C[4 * i + j]);
            }
        }
    }
    __m512 R = tree16x16(C);
    for (int t = 0; t < nt; t++) {
        const prep_grp *p = pt + t;
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
        __m512i acc = _mm512_load_si512(&p->corr);
        #pragma GCC unroll 8
        for (int v = 0; v < 8; v++)
            acc = _mm512_dpbusd_epi32(
                acc, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qt + 16 * xq_of_q8[v]))),
                _mm512_load_si512(&p->v[v]));
        __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps((const float *)(qt + 128)));
        R = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_load_ps(&p->dw), dx), R);
    }
    store_tile(R, y, ldy, mr, nr);
}

#define KQ4_CASE(a, b)                                                                 \
    case (a) * 8 + (b):                                                                \
        if (q41) kern_q4(pw, pt, ng, nt, xq, xq_row, quad, y, ldy, a, b, 1);           \
        else kern_q4(pw, pt, ng, nt, xq, xq_row, quad, y, ldy, a, b, 0);               \
        break;
#define KQ8_CASE(a, b) \
    case (a) * 8 + (b): kern_q8(pw, pt, ng, nt, xq, xq_row, quad, y, ldy, a, b); break;

static void tile_q4(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                    size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr, int q41) {
    switch (mr * 8 + nr) {
        KQ4_CASE(1, 1) KQ4_CASE(1, 2) KQ4_CASE(1, 3) KQ4_CASE(1, 4)
        KQ4_CASE(2, 1) KQ4_CASE(2, 2) KQ4_CASE(2, 3) KQ4_CASE(2, 4)
        KQ4_CASE(3, 1) KQ4_CASE(3, 2) KQ4_CASE(3, 3) KQ4_CASE(3, 4)
        KQ4_CASE(4, 1) KQ4_CASE(4, 2) KQ4_CASE(4, 3) KQ4_CASE(4, 4)
    }
}

static void tile_q8(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                    size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr) {
    switch (mr * 8 + nr) {
        KQ8_CASE(1, 1) KQ8_CASE(1, 2) KQ8_CASE(1, 3) KQ8_CASE(1, 4)
        KQ8_CASE(2, 1) KQ8_CASE(2, 2) KQ8_CASE(2, 3) KQ8_CASE(2, 4)
        KQ8_CASE(3, 1) KQ8_CASE(3, 2) KQ8_CASE(3, 3) KQ8_CASE(3, 4)
        KQ8_CASE(4, 1) KQ8_CASE(4, 2) KQ8_CASE(4, 3) KQ8_CASE(4, 4)
    }
}

/* Float weights: chunks of 16 elements, lane l = chain l (e % 16 == l). */
AI __m512 load_w16(const uint8_t *row, int e, int type, __mmask16 mk) {
    if (type == KVS_TYPE_F32) return _mm512_maskz_loadu_ps(mk, row + 4 * (size_t)e);
    __m256i h = _mm256_maskz_loadu_epi16(mk, row + 2 * (size_t)e);
    if (type == KVS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void kern_f(const kvs_wmat *w, int j0, const float *x, int k, float *y, size_t ldy, int mr,
               int nr, int type) {
    __m512 C[MR][NR];
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) C[i][j] = _mm512_setzero_ps();
    const uint8_t *rows[NR];
    #pragma GCC unroll 4
    for (int j = 0; j < nr; j++) rows[j] = (const uint8_t *)w->data + (size_t)(j0 + j) * w->row_bytes;
    for (int e = 0; e < k; e += 16) {
        __mmask16 mk = k - e >= 16 ? 0xffff : (__mmask16)((1u << (k - e)) - 1);
        __m512 W[NR];
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) W[j] = load_w16(rows[j], e, type, mk);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)i * k + e);
            #pragma GCC unroll 4
            for (int j = 0; j < nr; j++) C[i][j] = _mm512_fmadd_ps(xv, W[j], C[i][j]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) y[(size_t)i * ldy + j] = hsum_tree(C[i][j]);
}

#define KF_CASE(a, b)                                                                   \
    case (a) * 8 + (b):                                                                 \
        if (type == KVS_TYPE_F32) kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_F32);      \
        else if (type == KVS_TYPE_F16) kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_F16); \
        else kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_BF16);                          \
        break;

static void tile_f(const kvs_wmat *w, int j0, const float *x, int k, float *y, size_t ldy, int mr,
                   int nr) {
    int type = w->type;
    switch (mr * 8 + nr) {
        KF_CASE(1, 1) KF_CASE(1, 2) KF_CASE(1, 3) KF_CASE(1, 4)
        KF_CASE(2, 1) KF_CASE(2, 2) KF_CASE(2, 3) KF_CASE(2, 4)
        KF_CASE(3, 1) KF_CASE(3, 2) KF_CASE(3, 3) KF_CASE(3, 4)
        KF_CASE(4, 1) KF_CASE(4, 2) KF_CASE(4, 3) KF_CASE(4, 4)
    }
}

/* ------------------------------------------------------------ m = 1 (decode) */

/* Tree input slot of weight row rho so that tree16x16 puts it in lane rho
 * (slot o lands in lane 4 (o % 4) + o / 4: an involution). */
static inline int slot_of(int rho) { return 4 * (rho % 4) + rho / 4; }

/* One activation row against up to 16 Q4 weight rows [j0, j0 + nr): full
 * groups lane = block (prep fused with the dot, nothing stored), then one
 * tree for the 16 outputs, then the tail blocks with lane = weight row
 * (gathered), each tail block adding its fma (and the Q4_1 min fma) in order. */
static void m1_q4(const kvs_wmat *w, int j0, int nr, const uint8_t *xq, const uint8_t *quad, float *y) {
    const int q41 = w->type == KVS_TYPE_Q4_1, bs = q41 ? 20 : 18;
    const int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m512 C[16];
    for (int o = 0; o < 16; o++) C[o] = _mm512_setzero_ps();
    for (int rho = 0; rho < nr; rho++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(j0 + rho) * w->row_bytes;
        __m512 acc = _mm512_setzero_ps();
        if (q41) {
            for (int g = 0; g < ng; g++) {
                const uint8_t *src = row + (size_t)g * 16 * 20;
                const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
                __m512i z[5];
#pragma GCC unroll 5
                for (int t = 0; t < 5; t++) z[t] = _mm512_loadu_si512(src + 64 * t);
                __m512i dm = gather5(z, &q41_perm[0]);
                __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
                __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
                __m512i ia = _mm512_setzero_si512(), ib = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    __m512i q = gather5(z, &q41_perm[1 + r]);
                    ia = _mm512_dpbusd_epi32(ia, _mm512_and_si512(q, lo4), _mm512_loadu_si512(grp + 128 * r));
                    ib = _mm512_dpbusd_epi32(ib, _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4),
                                             _mm512_loadu_si512(grp + 128 * r + 64));
                }
                __m512i isum = _mm512_add_epi32(ia, ib);
                __m512 dx = _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS), sx = _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS + 64);
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), acc);
                acc = _mm512_fmadd_ps(mw, sx, acc);
            }
        } else if (ng) {
            prep_grp pg[32] __attribute__((aligned(64)));
            prep_gather(row, ng, KVS_TYPE_Q4_0, pg);
            for (int g = 0; g < ng; g++) {
                const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
                __m512i isum = _mm512_loadu_si512(grp + KVS_XQ_GROUP_QS + 128);
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++) isum = _mm512_dpbusd_epi32(isum, pg[g].v[v], _mm512_loadu_si512(grp + 64 * v));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(pg[g].dw, _mm512_loadu_ps(grp + KVS_XQ_GROUP_QS)), acc);
            }
        }
        C[slot_of(rho)] = acc;
    }
    __m512 R = tree16x16(C); /* lane rho = weight row j0 + rho */
    if (nt) {
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i roff = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)w->row_bytes));
        const __mmask16 live = (__mmask16)((1u << nr) - 1);
        const uint8_t *base = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
        for (int t = 0; t < nt; t++) {
            const uint8_t *blk = base + (size_t)(ng * 16 + t) * bs;
            const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES; /* row sub 0 */
            __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk, 1);
            __m512i isum = q41 ? _mm512_setzero_si512() : _mm512_set1_epi32(*(const int32_t *)(qt + 160));
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512i q = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk + (q41 ? 4 : 2) + 4 * r, 1);
                isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(q, lo4), _mm512_set1_epi32(*(const int32_t *)(qt + 32 * r)));
                isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4),
                                           _mm512_set1_epi32(*(const int32_t *)(qt + 32 * r + 16)));
            }
            __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
            __m512 dx = _mm512_set1_ps(*(const float *)(qt + 128));
            R = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), R);
            if (q41) {
                __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
                R = _mm512_fmadd_ps(mw, _mm512_set1_ps(*(const float *)(qt + 144)), R);
            }
        }
    }
    _mm512_mask_storeu_ps(y + j0, (__mmask16)((1u << nr) - 1), R);
}

/* Q8_0, one activation row: lane = weight row for every block. Per pair of
 * blocks, each weight row's 64 q bytes (two 32-byte loads) meet x in natural
 * order: vpdpbusd(w + 128, x) leaves 8 partial lanes per block, which a
 * transposed integer reduction turns into one vector per block over the 16
 * rows; subtracting 128 * sum(x) gives the exact block dot. Float work is
 * then lane-wise: chains as vectors C[b % 16] for full-group blocks, tree,
 * then tail blocks in order. xn: (nb, 32) s8 x; xs: 128 * sum per block. */
AI void reduce_pair(const __m512i A[16], __m512i *v0, __m512i *v1) {
    __m512i l1[8], l2[4], l3[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++)
        l1[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(A[2 * p], A[2 * p + 1]),
                                 _mm512_unpackhi_epi32(A[2 * p], A[2 * p + 1]));
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        l2[p] = _mm512_add_epi32(_mm512_unpacklo_epi64(l1[2 * p], l1[2 * p + 1]),
                                 _mm512_unpackhi_epi64(l1[2 * p], l1[2 * p + 1]));
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++)
        l3[p] = _mm512_add_epi32(_mm512_shuffle_i32x4(l2[2 * p], l2[2 * p + 1], 0x88),
                                 _mm512_shuffle_i32x4(l2[2 * p], l2[2 * p + 1], 0xdd));
    *v0 = _mm512_shuffle_i32x4(l3[0], l3[1], 0x88); /* rows 0..15 of the first block */
    *v1 = _mm512_shuffle_i32x4(l3[0], l3[1], 0xdd);
}

static void m1_q8(const kvs_wmat *w, int j0, int nr, const int8_t *xn, const int32_t *xs,
                  const float *dxv, float *y) {
    const int nb = w->k / KVS_QK, nf = kvs_xq_groups(w->k) * 16;
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i roff = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)w->row_bytes));
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const uint8_t *base = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
    __m512 C[16], R = _mm512_setzero_ps();
    for (int c = 0; c < 16; c++) C[c] = _mm512_setzero_ps();
    for (int b0 = 0; b0 < nb; b0 += 2) {
        int two = b0 + 1 < nb;
        __m512i X = two ? _mm512_loadu_si512(xn + 32 * b0)
                        : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xn + 32 * b0)));
        __m512i A[16];
#pragma GCC unroll 16
        for (int rho = 0; rho < 16; rho++) {
            if (rho < nr) {
                const uint8_t *blk = base + (size_t)rho * w->row_bytes + (size_t)b0 * 34 + 2;
                __m512i W = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk));
                if (two) W = _mm512_inserti64x4(W, _mm256_loadu_si256((const __m256i *)(blk + 34)), 1);
                A[rho] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(W, c80), X);
            } else {
                A[rho] = _mm512_setzero_si512();
            }
        }
        __m512i v[2];
        reduce_pair(A, &v[0], &v[1]);
        for (int h = 0; h <= two; h++) {
            int b = b0 + h;
            __m512i isum = _mm512_sub_epi32(v[h], _mm512_set1_epi32(xs[b]));
            __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, base + (size_t)b * 34, 1);
            __m512 s = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)), _mm512_set1_ps(dxv[b]));
            if (b < nf) {
                C[b % 16] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, C[b % 16]);
            } else {
                if (b == nf) { /* first tail block: reduce the chains (kvs_tree16, lane-wise) */
                    for (int i = 0; i < 8; i++) C[i] = _mm512_add_ps(C[i], C[i + 8]);
                    for (int i = 0; i < 4; i++) C[i] = _mm512_add_ps(C[i], C[i + 4]);
                    for (int i = 0; i < 2; i++) C[i] = _mm512_add_ps(C[i], C[i + 2]);
                    R = _mm512_add_ps(C[0], C[1]);
                }
                R = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, R);
            }
        }
    }
    if (nf == nb) {
        for (int i = 0; i < 8; i++) C[i] = _mm512_add_ps(C[i], C[i + 8]);
        for (int i = 0; i < 4; i++) C[i] = _mm512_add_ps(C[i], C[i + 4]);
        for (int i = 0; i < 2; i++) C[i] = _mm512_add_ps(C[i], C[i + 2]);
        R = _mm512_add_ps(C[0], C[1]);
    }
    _mm512_mask_storeu_ps(y + j0, live, R);
}

/* The single x row of a Q8_0 call in natural order (s8), 128 * sum(q), d. */
static void m1_q8_unpack(const kvs_mm_call *c, int8_t *xn, int32_t *xs, float *dx) {
    int nb = c->w->k / KVS_QK, nf = kvs_xq_groups(c->w->k) * 16;
    for (int b = 0; b < nb; b++) {
        for (int e = 0; e < KVS_QK; e++) {
            uint8_t v;
            int32_t sum;
            float d;
            if (b < nf) {
                uint8_t *grp = (uint8_t *)c->xq + (size_t)(b / 16) * KVS_XQ_GROUP_BYTES;
                v = grp[kvs_xq_pos(b % 16, e)];
                sum = kvs_xq_sum(grp)[b % 16];
                d = kvs_xq_d(grp)[b % 16];
            } else {
                uint8_t *quad = (uint8_t *)c->xq_tail;
                v = quad[kvs_xq_tail_pos(b - nf, 0, e)];
                sum = kvs_xq_tail_c(quad, b - nf)[0];
                d = kvs_xq_tail_d(quad, b - nf)[0];
            }
            xn[32 * b + e] = (int8_t)(v ^ 0x80);
            xs[b] = 128 * sum;
            dx[b] = d;
        }
    }
}

/* ------------------------------------------------------------ entry point */

static pthread_once_t perm_once = PTHREAD_ONCE_INIT;

static void avx512_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    int m = c->m, n = w->n;
    if (!c->xq) {
        for (int jt = j0; jt < j1; jt += NR) {
            int nr = j1 - jt < NR ? j1 - jt : NR;
            for (int it = 0; it < m; it += MR) {
                int mr = m - it < MR ? m - it : MR;
                tile_f(w, jt, c->x + (size_t)it * w->k, w->k, c->y + (size_t)it * n + jt, n, mr, nr);
            }
        }
        return;
    }
    pthread_once(&perm_once, init_q41_perm);
    int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    /* prep of NR rows x all full groups (704 bytes each) + tail, on the stack */
    prep_grp pw[NR * 32] __attribute__((aligned(64)));
    prep_grp pt[KVS_XQ_GROUP] __attribute__((aligned(64)));
    if (ng > 32) { /* k > 16384: larger than any model here; scalar stays correct */
        kvs_isa_scalar.matmul_cols(c, j0, j1);
        return;
    }
    int q41 = w->type == KVS_TYPE_Q4_1;
    if (m == 1 && w->type == KVS_TYPE_Q8_0 && w->k <= 16384) {
        int8_t xn[16384] __attribute__((aligned(64)));
        int32_t xs[512];
        float dx[512];
        m1_q8_unpack(c, xn, xs, dx);
        for (int jt = j0; jt < j1; jt += 16) m1_q8(w, jt, j1 - jt < 16 ? j1 - jt : 16, xn, xs, dx, c->y);
        return;
    }
    if (m == 1 && w->type != KVS_TYPE_Q8_0) {
        for (int jt = j0; jt < j1; jt += 16)
            m1_q4(w, jt, j1 - jt < 16 ? j1 - jt : 16, c->xq, c->xq_tail, c->y);
        return;
    }
    for (int jt = j0; jt < j1; jt += NR) {
        int nr = j1 - jt < NR ? j1 - jt : NR;
        prep_rows(w, jt, nr, pw, ng);
        if (nt) prep_tail(w, jt, nr, ng, nt, pt);
        for (int it = 0; it < m; it += MR) {
            int mr = m - it < MR ? m - it : MR;
            const uint8_t *xq = c->xq + (size_t)it * c->xq_row;
            const uint8_t *quad = c->xq_tail + (size_t)(it / 4) * c->xq_quad;
            float *y = c->y + (size_t)it * n + jt;
            if (w->type == KVS_TYPE_Q8_0) tile_q8(pw, pt, ng, nt, xq, c->xq_row, quad, y, n, mr, nr);
            else tile_q4(pw, pt, ng, nt, xq, c->xq_row, quad, y, n, mr, nr, q41);
        }
    }
}

void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work);

const kvs_isa kvs_isa_avx512 = {
    .name = "avx512vnni",
    .quantize_rows = avx512_quantize_rows,
    .matmul_cols = avx512_matmul_cols,
    .attention_unit = kvs_attention_unit_avx512,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
