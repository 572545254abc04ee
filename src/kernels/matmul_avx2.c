/*
 * AVX2 (+FMA, F16C) matmul for CPUs without AVX-512. Produces exactly the
 * bits of the scalar reference (matmul_ref.c), like the AVX-512 path:
 *
 *  - full groups: lane = block, the 16 chains as two 8-lane halves; weight
 *    dwords are gathered into the xq lane order once per weight row (prep)
 *    and reused for every activation row;
 *  - exact block dots with vpmaddubsw + vpmaddwd (u8 x s8 pairs cannot
 *    saturate: Q4 nibbles <= 15; Q8_0 uses |w| x sign(w) * x <= 128 * 127),
 *    once per activation plane (hi, lo: quant.h), combined as 256 hi + lo;
 *  - the tail blocks (nb % 16) per output with one 32-byte dot each.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <math.h>

#include "kernels/avx2_util.h"
#include "kernels/quant_avx2.h"

#define NR 4

typedef struct prep2 {
    __m256i v[2][8]; /* [half][vec] */
    __m256 dw[2], mw[2];
} prep2;

/* Sum of u8 x s8 products, 4 per int32 lane (exact for our operand ranges). */
AI __m256i dot4(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Q8_0: w and x both signed. */
AI __m256i dot4_ss(__m256i w, __m256i x) {
    return dot4(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* ------------------------------------------------------------------ prep */

static void prep_row(const kvs_wmat *w, const uint8_t *row, int ng, prep2 *out) {
    const int type = w->type;
    const int bs = type == KVS_TYPE_Q4_1 ? 20 : type == KVS_TYPE_Q4_0 ? 18 : 34;
    const int qoff = type == KVS_TYPE_Q4_1 ? 4 : 2;
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int g = 0; g < ng; g++) {
        prep2 *p = &out[g];
        for (int h = 0; h < 2; h++) {
            const uint8_t *src = row + (size_t)(g * 16 + 8 * h) * bs;
            __m256i base = _mm256_mullo_epi32(lane, _mm256_set1_epi32(bs));
            /* first dword of each block: d (low half) and, for Q4_1, m */
            __m256i dm = _mm256_i32gather_epi32((const int *)src, base, 1);
            __m128i d16 = _mm_packus_epi32(_mm256_castsi256_si128(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff))),
                                           _mm256_extracti128_si256(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff)), 1));
            __m128i m16 = _mm_packus_epi32(_mm256_castsi256_si128(_mm256_srli_epi32(dm, 16)),
                                           _mm256_extracti128_si256(_mm256_srli_epi32(dm, 16), 1));
            p->dw[h] = _mm256_cvtph_ps(d16);
            p->mw[h] = type == KVS_TYPE_Q4_1 ? _mm256_cvtph_ps(m16) : _mm256_setzero_ps();
            if (type == KVS_TYPE_Q8_0) {
                for (int r = 0; r < 8; r++)
                    p->v[h][r] = _mm256_i32gather_epi32((const int *)src,
                                                        _mm256_add_epi32(base, _mm256_set1_epi32(qoff + 4 * r)), 1);
            } else {
                for (int r = 0; r < 4; r++) {
                    __m256i q = _mm256_i32gather_epi32((const int *)src,
                                                       _mm256_add_epi32(base, _mm256_set1_epi32(qoff + 4 * r)), 1);
                    p->v[h][2 * r] = _mm256_and_si256(q, lo4);
                    p->v[h][2 * r + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ tail */

/* y = fma chain over the tail blocks of weight row `row` for activation row
 * sub of quad (canonical order after the tree). The block's integer dot is
 * 256 * dot(w, hi) + dot(w, lo), formed lane-wise before the sum. */
static float tail_dot(const kvs_wmat *w, const uint8_t *row, int ng, int nt, const uint8_t *quad,
                      int sub, float y) {
    const int type = w->type;
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    const __m256i gidx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    for (int t = 0; t < nt; t++) {
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
        /* x dwords in vec order 0..7, hi and lo planes */
        __m256i xh = _mm256_i32gather_epi32((const int *)(qt + 4 * sub), gidx, 1);
        __m256i xl = _mm256_i32gather_epi32((const int *)(qt + KVS_XQ_TAIL_PLANE + 4 * sub), gidx, 1);
        int b = ng * 16 + t;
        int32_t isum;
        float dw, mw = 0.0f;
        if (type == KVS_TYPE_Q8_0) {
            const kvs_block_q8_0 *blk = (const kvs_block_q8_0 *)row + b;
            __m256i wq = _mm256_loadu_si256((const __m256i *)blk->qs); /* elements 0..31 */
            /* reorder w dwords to vec order: vec 2r' = dword r', vec 2r'+1 = dword 4+r' */
            wq = _mm256_permutevar8x32_epi32(wq, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            const __m256i c80 = _mm256_set1_epi8((char)0x80);
            isum = hsum_i32(_mm256_add_epi32(_mm256_slli_epi32(dot4_ss(wq, _mm256_xor_si256(xh, c80)), 8),
                                             dot4_ss(wq, _mm256_xor_si256(xl, c80))));
            dw = kvs_f16_to_f32(blk->d);
        } else {
            const uint8_t *qs;
            if (type == KVS_TYPE_Q4_1) {
                const kvs_block_q4_1 *blk = (const kvs_block_q4_1 *)row + b;
                qs = blk->qs;
                dw = kvs_f16_to_f32(blk->d);
                mw = kvs_f16_to_f32(blk->m);
            } else {
                const kvs_block_q4_0 *blk = (const kvs_block_q4_0 *)row + b;
                qs = blk->qs;
                dw = kvs_f16_to_f32(blk->d);
            }
            __m128i q = _mm_loadu_si128((const __m128i *)qs);
            __m128i l = _mm_and_si128(q, lo4), hgh = _mm_and_si128(_mm_srli_epi16(q, 4), lo4);
            /* vec order: lo dword 0, hi dword 0, lo dword 1, ... */
            __m256i wq = _mm256_setr_m128i(_mm_unpacklo_epi32(l, hgh), _mm_unpackhi_epi32(l, hgh));
            isum = hsum_i32(_mm256_add_epi32(_mm256_slli_epi32(dot4(wq, xh), 8), dot4(wq, xl)));
            if (type == KVS_TYPE_Q4_0) isum += kvs_xq_tail_c((uint8_t *)quad, t)[sub];
        }
        y = fmaf((float)isum, dw * kvs_xq_tail_d((uint8_t *)quad, t)[sub], y);
        if (type == KVS_TYPE_Q4_1) y = fmaf(mw, kvs_xq_tail_s((uint8_t *)quad, t)[sub], y);
    }
    return y;
}

/* --------------------------------------------------------------- kernels */

/* One activation row against nr prepped weight rows, all full groups. Per
 * block: 256 * dot(w, hi) + dot(w, lo) (+ c for Q4_0), one plane of x in
 * registers at a time. */
AI void kern_row(const prep2 *pw, int ng, const uint8_t *xq, int type, int nr, __m256 C[NR][2]) {
    for (int j = 0; j < nr; j++) C[j][0] = C[j][1] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
        for (int h = 0; h < 2; h++) {
            __m256i A[NR];
            for (int plane = 0; plane < 2; plane++) {
                __m256i X[8];
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++) {
                    int xv = type == KVS_TYPE_Q8_0 ? xq_of_q8[v] : v;
                    X[v] = _mm256_loadu_si256((const __m256i *)(grp + plane * KVS_XQ_PLANE + 64 * xv + 32 * h));
                    if (type == KVS_TYPE_Q8_0) X[v] = _mm256_xor_si256(X[v], _mm256_set1_epi8((char)0x80));
                }
#pragma GCC unroll 4
                for (int j = 0; j < nr; j++) {
                    const prep2 *p = pw + (size_t)j * ng + g;
                    __m256i acc = plane ? _mm256_slli_epi32(A[j], 8) : _mm256_setzero_si256();
#pragma GCC unroll 8
                    for (int v = 0; v < 8; v++)
                        acc = _mm256_add_epi32(acc, type == KVS_TYPE_Q8_0 ? dot4_ss(p->v[h][v], X[v])
                                                                         : dot4(p->v[h][v], X[v]));
                    A[j] = acc;
                }
            }
            __m256 dx = _mm256_loadu_ps((const float *)(grp + KVS_XQ_GROUP_QS) + 8 * h);
            __m256 sx = _mm256_loadu_ps((const float *)(grp + KVS_XQ_GROUP_QS) + 16 + 8 * h);
            __m256i c0 = _mm256_loadu_si256((const __m256i *)(grp + KVS_XQ_GROUP_QS + 128 + 32 * h));
#pragma GCC unroll 4
            for (int j = 0; j < nr; j++) {
                const prep2 *p = pw + (size_t)j * ng + g;
                __m256i acc = type == KVS_TYPE_Q4_0 ? _mm256_add_epi32(A[j], c0) : A[j];
                __m256 s = _mm256_mul_ps(p->dw[h], dx);
                C[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), s, C[j][h]);
                if (type == KVS_TYPE_Q4_1) C[j][h] = _mm256_fmadd_ps(p->mw[h], sx, C[j][h]);
            }
        }
    }
}

#define KROW_CASE(t, n) \
    case (t) * 8 + (n): kern_row(pw, ng, xq, t, n, C); break;

static void row_tile(const prep2 *pw, int ng, const uint8_t *xq, int type, int nr, __m256 C[NR][2]) {
    switch (type * 8 + nr) {
        KROW_CASE(KVS_TYPE_Q4_0, 1) KROW_CASE(KVS_TYPE_Q4_0, 2) KROW_CASE(KVS_TYPE_Q4_0, 3) KROW_CASE(KVS_TYPE_Q4_0, 4)
        KROW_CASE(KVS_TYPE_Q4_1, 1) KROW_CASE(KVS_TYPE_Q4_1, 2) KROW_CASE(KVS_TYPE_Q4_1, 3) KROW_CASE(KVS_TYPE_Q4_1, 4)
        KROW_CASE(KVS_TYPE_Q8_0, 1) KROW_CASE(KVS_TYPE_Q8_0, 2) KROW_CASE(KVS_TYPE_Q8_0, 3) KROW_CASE(KVS_TYPE_Q8_0, 4)
    }
}

/* Float weights: 16-element chunks as two halves (chain = e % 16). */
AI __m256 load_w8(const uint8_t *row, int e, int type) {
    if (type == KVS_TYPE_F32) return _mm256_loadu_ps((const float *)row + e);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + e));
    if (type == KVS_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Element e of a float weight row (the scalar reads of a tail). */
AI float w_at(const uint8_t *row, int e, int type) {
    float f;
    if (type == KVS_TYPE_F32) {
        memcpy(&f, row + 4 * (size_t)e, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * (size_t)e, 2);
    return type == KVS_TYPE_F16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
}

/* The finish of a float-weight output: its two chains, the reference's
 * scalar tail (elements e .. k - 1), the tree. */
AI float finish_f(__m256 lo, __m256 hi, const float *x, const uint8_t *row, int e, int k, int type) {
    if (e == k) return tree16_2(lo, hi);
    float acc[16];
    _mm256_storeu_ps(acc, lo);
    _mm256_storeu_ps(acc + 8, hi);
    for (int l = 0; e < k; e++, l++) acc[l] = fmaf(x[e], w_at(row, e, type), acc[l]);
    return kvs_tree16(acc);
}

/* Float weights, decode and batched decode (m < 16; prefill: ptile
 * below): tiles of FR activation rows x FC weight rows, each
 * output's two chains (chain = e % 16, the reference's order) in registers,
 * 12 accumulators. Per 16 elements a tile loads FR + FC vectors per half for
 * FR * FC fmas, where one row at a time loads two per fma (the loads, not
 * the fmas, bound that loop). F16 / BF16 weights are widened as they are
 * read (a vcvtph2ps per vector, no widened copy); the chunk's weight rows
 * stay in L1 / L2 while the activation rows pass once per chunk (a pass per
 * four weight rows streamed them from L3). Tail and tree per output as
 * finish_f. F16 576x576, m = 512, one Zen 3 core: 7.3 -> 4.7 ms. */
#define FR 3 /* activation rows per tile */
#define FC 2 /* weight rows per tile */
/* Decode's software prefetch distance per stream: measured on Zen 3, SmolLM2
 * F16 at 1 thread, 0 / 1 / 2 KiB: 47 / 53 / 49 tok/s (medians). */
#define F_PREFETCH 1024
#define F_BLOCK 32 /* columns every activation row meets while they are in L1 / L2 */

/* y[r * ldy + c * ystep] = x_r . (weight row c at row0 + c * wstep) for
 * r < mr, c < nc (x rows k apart). stream: one activation row whose weight
 * rows are streams of their own (decode, matmul_cols_f), each prefetched
 * F_PREFETCH ahead. */
AI void tile_f(const uint8_t *row0, size_t wstep, const float *x, int k, float *y, size_t ldy, size_t ystep,
               int mr, int nc, int type, int stream) {
    __m256 C[FR][FC][2];
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) C[r][c][0] = C[r][c][1] = _mm256_setzero_ps();
    const int esz = type == KVS_TYPE_F32 ? 4 : 2;
    int e = 0;
    for (; e + 16 <= k; e += 16) {
        if (mr == 1 && stream && (e * esz & 63) == 0) /* a line per stream per line read */
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++)
                _mm_prefetch((const char *)row0 + (size_t)c * wstep + (size_t)e * esz + F_PREFETCH, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 W[FC];
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++) {
                W[c] = load_w8(row0 + (size_t)c * wstep, e + 8 * h, type);
                if (type == KVS_TYPE_F32) __asm__("" : "+x"(W[c])); /* a register, as xv below */
            }
#pragma GCC unroll 3
            for (int r = 0; r < mr; r++) {
                __m256 xv = _mm256_loadu_ps(x + (size_t)r * k + e + 8 * h);
                /* in a register: GCC would fold the load into each fma
                 * (a load per fma, and the loads, not the fmas, bound) */
                __asm__("" : "+x"(xv));
#pragma GCC unroll 2
                for (int c = 0; c < nc; c++) C[r][c][h] = _mm256_fmadd_ps(xv, W[c], C[r][c][h]);
            }
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++)
            y[(size_t)r * ldy + (size_t)c * ystep] =
                finish_f(C[r][c][0], C[r][c][1], x + (size_t)r * k, row0 + (size_t)c * wstep, e, k, type);
}

#define TF_TYPES(mr, nc)                                                                                     \
    case (mr) * 4 + (nc):                                                                                    \
        if (type == KVS_TYPE_F32) tile_f(row0, wstep, x, k, y, ldy, ystep, mr, nc, KVS_TYPE_F32, stream);    \
        else if (type == KVS_TYPE_F16) tile_f(row0, wstep, x, k, y, ldy, ystep, mr, nc, KVS_TYPE_F16, stream); \
        else tile_f(row0, wstep, x, k, y, ldy, ystep, mr, nc, KVS_TYPE_BF16, stream);                        \
        break;

static void tile_f_any(const uint8_t *row0, size_t wstep, const float *x, int k, float *y, size_t ldy,
                       size_t ystep, int mr, int nc, int type, int stream) {
    switch (mr * 4 + nc) {
        TF_TYPES(1, 1) TF_TYPES(1, 2) TF_TYPES(2, 1) TF_TYPES(2, 2) TF_TYPES(3, 1) TF_TYPES(3, 2)
    }
}

/* Prefill (m >= 16) with float weights: tiles of PR activation rows x PC
 * weight rows, one chain (the reference's chain = e % 16 < 8, then >= 8) a
 * pass: 12 accumulators, and per 8 elements PC + PR loads for PR * PC fmas
 * (7 for 12), where FR x FC holds both chains in registers (12 for 6
 * outputs, 5 loads for 6 fmas). F16 576x576, m = 512, one Zen 3 core,
 * thread CPU time: 62-74 -> 81-82 GOPS (5.5 -> 4.1 ms), of a 98.6 peak. */
#define PR 4 /* activation rows per prefill tile */
#define PC 3 /* weight rows per prefill tile */

/* One chain (h = 0: elements e % 16 < 8; h = 1: the rest) of a prefill
 * tile's outputs over the whole 16-element blocks, into out. */
AI void ptile_chain(const uint8_t *row0, size_t wstep, const float *x, int k, int k16, int mr, int nc, int type,
                    int h, float out[PR][PC][8]) {
    __m256 C[PR][PC];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++) C[r][c] = _mm256_setzero_ps();
    for (int e = 8 * h; e < k16; e += 16) {
        __m256 W[PC];
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++) {
            W[c] = load_w8(row0 + (size_t)c * wstep, e, type);
            if (type == KVS_TYPE_F32) __asm__("" : "+x"(W[c])); /* a register, as xv below */
        }
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)r * k + e);
            __asm__("" : "+x"(xv)); /* as in tile_f: a load per row, not per fma */
#pragma GCC unroll 3
            for (int c = 0; c < nc; c++) C[r][c] = _mm256_fmadd_ps(xv, W[c], C[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++) _mm256_store_ps(out[r][c], C[r][c]);
}

/* y[r * ldy + c] = x_r . (weight row c at row0 + c * wstep), r < mr, c < nc:
 * the two chains, then finish_f's tail and tree, as tile_f. */
AI void ptile(const uint8_t *row0, size_t wstep, const float *x, int k, float *y, size_t ldy, int mr, int nc,
              int type) {
    float lo[PR][PC][8] __attribute__((aligned(32))), hi[PR][PC][8] __attribute__((aligned(32)));
    const int k16 = k & ~15;
    ptile_chain(row0, wstep, x, k, k16, mr, nc, type, 0, lo);
    /* lo to memory now: GCC had kept it in registers through the second
     * pass, whose accumulators then spilled (40 GOPS instead of 82) */
    __asm__ volatile("" : : "r"(lo) : "memory");
    ptile_chain(row0, wstep, x, k, k16, mr, nc, type, 1, hi);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
        for (int c = 0; c < nc; c++)
            y[(size_t)r * ldy + c] = finish_f(_mm256_load_ps(lo[r][c]), _mm256_load_ps(hi[r][c]), x + (size_t)r * k,
                                              row0 + (size_t)c * wstep, k16, k, type);
}

#define PT_TYPES(mr, nc)                                                                        \
    case (mr) * 4 + (nc):                                                                       \
        if (type == KVS_TYPE_F32) ptile(row0, wstep, x, k, y, ldy, mr, nc, KVS_TYPE_F32);        \
        else if (type == KVS_TYPE_F16) ptile(row0, wstep, x, k, y, ldy, mr, nc, KVS_TYPE_F16);   \
        else ptile(row0, wstep, x, k, y, ldy, mr, nc, KVS_TYPE_BF16);                            \
        break;

static void ptile_any(const uint8_t *row0, size_t wstep, const float *x, int k, float *y, size_t ldy, int mr, int nc,
                      int type) {
    switch (mr * 4 + nc) {
        PT_TYPES(1, 1) PT_TYPES(1, 2) PT_TYPES(1, 3) PT_TYPES(2, 1) PT_TYPES(2, 2) PT_TYPES(2, 3)
        PT_TYPES(3, 1) PT_TYPES(3, 2) PT_TYPES(3, 3) PT_TYPES(4, 1) PT_TYPES(4, 2) PT_TYPES(4, 3)
    }
}

/* Columns j0 .. j1 - 1 for every activation row: the rows outside, so each
 * meets the chunk's weight rows while they are cached. One activation row
 * (a decode step) instead pairs weight row j with row j + h of the chunk's
 * other half: two streams far apart, each a line prefetched ahead, read a
 * Zen 3 core's DRAM ~1.3x faster than one (bench/roofline_probe reads four
 * such streams for the same reason), where two neighbouring rows were a
 * third slower than one (measured, SmolLM2 F16 decode). */
static void matmul_cols_f(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    const int k = w->k, n = w->n;
    const uint8_t *data = (const uint8_t *)w->data;
    if (c->m == 1) {
        const int h = (j1 - j0) / 2;
        for (int j = j0; j < j0 + h; j++)
            tile_f_any(data + (size_t)j * w->row_bytes, (size_t)h * w->row_bytes, c->x, k, c->y + j, 0, (size_t)h, 1, 2,
                       w->type, 1);
        if ((j1 - j0) % 2)
            tile_f_any(data + (size_t)(j1 - 1) * w->row_bytes, 0, c->x, k, c->y + j1 - 1, 0, 0, 1, 1, w->type, 1);
        return;
    }
    if (c->m >= 16) { /* prefill: the chunk's weight rows (dispatch.c's mm_cols) stay in L2 while a tile's
                        * activation rows, in L1, meet them all */
        for (int i = 0; i < c->m; i += PR) {
            const int mr = c->m - i < PR ? c->m - i : PR;
            for (int j = j0; j < j1; j += PC)
                ptile_any(data + (size_t)j * w->row_bytes, w->row_bytes, c->x + (size_t)i * k, k, c->y + (size_t)i * n + j,
                          n, mr, j1 - j < PC ? j1 - j : PC, w->type);
        }
        return;
    }
    for (int b0 = j0; b0 < j1; b0 += F_BLOCK) {
        const int b1 = b0 + F_BLOCK < j1 ? b0 + F_BLOCK : j1;
        /* a few rows (batched decode): the next block's rows (b1 ..), a
         * share before every tile, while this block is computed from L1 /
         * L2 (SmolLM2 F16, 8 streams, paired A/B: 1.6-1.75x at 1 thread with
         * the chunks of kvs_decode_cols). Prefill (above) leaves it to the
         * hardware prefetchers (with it, 1 thread: 0.83-1.10x, no gain
         * shown). */
        const int nj = b1 + F_BLOCK < n ? F_BLOCK : n - b1;
        const char *pf = (const char *)(data + (size_t)b1 * w->row_bytes), *pf_end = pf + (size_t)nj * w->row_bytes;
        const int tiles = (c->m + FR - 1) / FR * ((b1 - b0 + FC - 1) / FC);
        const size_t pf_step = (((size_t)nj * w->row_bytes + 63) / 64 + tiles - 1) / tiles * 64; /* bytes per tile */
        for (int i = 0; i < c->m; i += FR) {
            int mr = c->m - i < FR ? c->m - i : FR;
            for (int j = b0; j < b1; j += FC) {
                int nc = b1 - j < FC ? b1 - j : FC;
                for (size_t b = 0; b < pf_step && pf < pf_end; b += 64, pf += 64) _mm_prefetch(pf, _MM_HINT_T0);
                tile_f_any(data + (size_t)j * w->row_bytes, w->row_bytes, c->x + (size_t)i * k, k,
                           c->y + (size_t)i * n + j, n, 1, mr, nc, w->type, 0);
            }
        }
    }
}

/* ------------------------------------------------------------ entry point */

/* quant.h's block quantization with the vector quantizer (quant_avx2.h). */
static float quantize_block(const float *xb, int offset, uint8_t hi[KVS_QK], uint8_t lo[KVS_QK], int32_t *sum) {
    __m256i h, l;
    int32_t s[2];
    float d = kvs_avx2_quantize_block(xb, &h, &l, s);
    const __m256i off = _mm256_set1_epi8((char)offset); /* + 128 mod 256 = xor 0x80 */
    _mm256_storeu_si256((__m256i *)hi, _mm256_xor_si256(h, off));
    _mm256_storeu_si256((__m256i *)lo, _mm256_xor_si256(l, off));
    *sum = (int32_t)((uint32_t)s[0] + (uint32_t)s[1]);
    return d * (1.0f / 256.0f);
}

static void avx2_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    kvs_quantize_rows_with(quantize_block, c, i0, i1);
    if (c->xn) /* the int16 rows of the packed kernels */
        for (int i = i0; i < i1; i++) kvs_avx2_xn_row(c, i);
}

static void avx2_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    int m = c->m, n = w->n;
    if (!c->xq) {
        matmul_cols_f(c, j0, j1);
        return;
    }
    if (kvs_avx2_matmul_packed(c, j0, j1)) return;
    int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    prep2 pw[NR * 32] __attribute__((aligned(32)));
    if (ng > 32) {
        kvs_isa_scalar.matmul_cols(c, j0, j1);
        return;
    }
    for (int jt = j0; jt < j1; jt += NR) {
        int nr = j1 - jt < NR ? j1 - jt : NR;
        for (int j = 0; j < nr; j++)
            prep_row(w, (const uint8_t *)w->data + (size_t)(jt + j) * w->row_bytes, ng, pw + (size_t)j * ng);
        for (int i = 0; i < m; i++) {
            __m256 C[NR][2];
            row_tile(pw, ng, c->xq + (size_t)i * c->xq_row, w->type, nr, C);
            const uint8_t *quad = c->xq_tail + (size_t)(i / 4) * c->xq_quad;
            for (int j = 0; j < nr; j++) {
                float y = tree16_2(C[j][0], C[j][1]);
                if (nt) y = tail_dot(w, (const uint8_t *)w->data + (size_t)(jt + j) * w->row_bytes, ng, nt, quad, i % 4, y);
                c->y[(size_t)i * n + jt + j] = y;
            }
        }
    }
}

void kvs_attention_unit_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);
int kvs_attention_split_units_avx2(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_avx2(const kvs_attn_call *c, int phase, int u, float *work);

const kvs_isa kvs_isa_avx2 = {
    .name = "avx2",
    .quantize_rows = avx2_quantize_rows,
    .matmul_cols = avx2_matmul_cols,
    .attention_unit = kvs_attention_unit_avx2,
    .attention_unit_recal = kvs_attention_unit_avx2,
    .attention_unit_q8 = kvs_attention_unit_q8_avx2,
    .attention_split_units = kvs_attention_split_units_avx2,
    .attention_split_unit = kvs_attention_split_unit_avx2,
    .attention_split_units_q8 = kvs_attention_split_units_q8_avx2,
    .attention_split_unit_q8 = kvs_attention_split_unit_q8_avx2,
    /* Q8 (Zen 3, 2 threads, SmolLM2's 3 kv heads split 2 : 1, paired, 4
     * rounds each, session 90): decode after 1024 and 4096 keys 0.85x and
     * 0.88x: not split */
    .attention_split_uneven_keys_q8 = 0,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
