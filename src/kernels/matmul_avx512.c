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
 *   dw (16 floats), mw (Q4_1), corr (Q8_0: -257 * 128 * sum of the block's
 *   bytes, see avx512_util.h)
 *
 * Tiles: MR activation rows x NR weight rows of outputs (4 x 4), each output
 * one zmm accumulator (16 chains); the k loop runs over full groups, two
 * activation rows at a time (kern_tile). Then the 16 accumulators of the
 * tile are reduced (a transposed kvs_tree16, a row's 4 as soon as they are
 * final) into one vector whose lane 4j + i is output (i, j), and the tail blocks
 * (nb % 16, e.g. 2 of SmolLM2's 18) are computed with lanes = outputs: the
 * tail weight dwords are prepared as lane 4j + i = row j, the activation
 * dwords of the tile's 4 rows are one 16-byte broadcast (quant.h), so eight
 * vpdpbusd give the tail block's integer dots of all 16 outputs at once.
 * Any tile shape gives the same bits per output, so m = 1 and m = 512 agree.
 * One activation row (decode), and Q4_0 / Q4_1 calls of up to 12 rows, take
 * the paths of matmul_avx512_m1.c.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2")
#endif

#include "kernels/avx512_util.h"

#define MR 4
#define NR 4
#define XQ_BLOCK_BYTES (256 * 1024) /* quantized activations per row block (L2) */
#ifndef PREP_L1_BYTES
#define PREP_L1_BYTES (24 * 1024) /* prepared weights that stay in L1 */
#endif
#define PREP_TILES 8 /* column tiles prepared together, at most */
#ifndef PREP_PF_ROWS
#define PREP_PF_ROWS 8 /* weight rows ahead that the preparation prefetches */
#endif

/* ------------------------------------------------------------ quantize x */

/* One block, two-level (quant.h): signed hi bytes of elements 0..15 (h[0])
 * and 16..31 (h[1]), lo bytes likewise (l[0], l[1]); returns the scale of Q,
 * writes sum Q. */
AI float quantize_block(const float *xb, __m128i h[2], __m128i l[2], int32_t *sum) {
    __m512i qh[2], ql[2];
    float dx = quantize_block_levels(xb, qh, ql, sum);
    for (int k = 0; k < 2; k++) {
        h[k] = _mm512_cvtepi32_epi8(qh[k]);
        l[k] = _mm512_cvtepi32_epi8(ql[k]);
    }
    return dx;
}

/* dword r of pa -> vec 2r, of pb -> vec 2r+1; vec v at dst + v * stride;
 * bytes xor off (0x80 turns s8 into the u8 + 128 of Q8_0 weights). */
AI void scatter_dwords(uint8_t *dst, size_t stride, __m128i pa, __m128i pb, __m128i off) {
    pa = _mm_xor_si128(pa, off);
    pb = _mm_xor_si128(pb, off);
    _mm_storeu_si32(dst + 0 * stride, pa);
    _mm_storeu_si32(dst + 1 * stride, pb);
    _mm_storeu_si32(dst + 2 * stride, _mm_srli_si128(pa, 4));
    _mm_storeu_si32(dst + 3 * stride, _mm_srli_si128(pb, 4));
    _mm_storeu_si32(dst + 4 * stride, _mm_srli_si128(pa, 8));
    _mm_storeu_si32(dst + 5 * stride, _mm_srli_si128(pb, 8));
    _mm_storeu_si32(dst + 6 * stride, _mm_srli_si128(pa, 12));
    _mm_storeu_si32(dst + 7 * stride, _mm_srli_si128(pb, 12));
}

/* A full group of 16 blocks at once, in the group's own lane = block form
 * (quantize_group_planes: every element and block takes the operations of
 * quantize_block, so the bits are its bits), its planes stored in the xq
 * order of the Q8_0 weights and sum Q from the bytes: 8 streams of SmolLM2
 * spent ~3% of a step, prefill ~4%, in the block-at-a-time version
 * (horizontal reductions, two scalar divisions and 16 dword stores a
 * block). */
static void quantize_group(const float *x, int wtype, uint8_t *grp) {
    __m512i zh[8], zl[8];
    const __m512 d = quantize_group_planes(x, 16, zh, zl);
    const __m512i ones = _mm512_set1_epi8(1), off = _mm512_set1_epi8(wtype == KVS_TYPE_Q8_0 ? (char)0x80 : 0);
    __m512i sh = _mm512_setzero_si512(), sl = _mm512_setzero_si512();
    for (int r = 0; r < 8; r++) {
        sh = _mm512_dpbusd_epi32(sh, ones, zh[r]);
        sl = _mm512_dpbusd_epi32(sl, ones, zl[r]);
        _mm512_storeu_si512(grp + 64 * xq_of_q8[r], _mm512_xor_si512(zh[r], off));
        _mm512_storeu_si512(grp + KVS_XQ_PLANE + 64 * xq_of_q8[r], _mm512_xor_si512(zl[r], off));
    }
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(sh, 8), sl);
    const __m512 dx = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 256.0f));
    _mm512_storeu_ps(kvs_xq_d(grp), dx);
    _mm512_storeu_ps(kvs_xq_s(grp), _mm512_mul_ps(dx, _mm512_cvtepi32_ps(sum)));
    /* kvs_xq_sum_word: -8 sum for Q4_0 weights */
    _mm512_storeu_si512(kvs_xq_sum(grp), wtype == KVS_TYPE_Q4_0 ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)) : sum);
}

static void quantize_row(const float *x, int k, int wtype, uint8_t *xq, uint8_t *quad, int sub) {
    int ng = kvs_xq_groups(k), nt = kvs_xq_tail_blocks(k);
    const __m128i off = _mm_set1_epi8(wtype == KVS_TYPE_Q8_0 ? (char)0x80 : 0);
    __m128i h[2], l[2];
    int32_t sum;
    for (int g = 0; g < ng; g++)
        quantize_group(x + (size_t)g * KVS_XQ_GROUP * KVS_QK, wtype, xq + (size_t)g * KVS_XQ_GROUP_BYTES);
    for (int t = 0; t < nt; t++) {
        float d = quantize_block(x + (size_t)(ng * KVS_XQ_GROUP + t) * KVS_QK, h, l, &sum);
        uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES + 4 * sub;
        scatter_dwords(qt, 16, h[0], h[1], off);
        scatter_dwords(qt + KVS_XQ_TAIL_PLANE, 16, l[0], l[1], off);
        kvs_xq_tail_d(quad, t)[sub] = d;
        kvs_xq_tail_s(quad, t)[sub] = d * (float)sum;
        kvs_xq_tail_c(quad, t)[sub] = kvs_xq_sum_word(wtype, sum);
    }
}

static void avx512_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    for (int i = i0; i < i1; i++)
        quantize_row(c->x + (size_t)i * c->w->k, c->w->k, c->w->type,
                     (uint8_t *)c->xq + (size_t)i * c->xq_row,
                     (uint8_t *)c->xq_tail + (size_t)(i / 4) * c->xq_quad, i % 4);
}

/* ------------------------------------------------------------------ prep */

/* One weight row's groups as the kernels read them (unpack_row_group,
 * avx512_util.h: the decode kernels' unpacking, stored). type is a constant
 * in each call. */
static void prep_groups(const kvs_wmat *w, const uint8_t *row, int ng, int type, prep_grp *out) {
    for (int g = 0; g < ng; g++) unpack_row_group(w, row, g, type, &out[g]);
}

/* noinline: inlined, the GGUF transposition changed the code of the tile
 * loops around it, and Q8_0 prefill (m = 256) ran 6-8% slower though the
 * preparation is faster */
__attribute__((noinline)) static void prep_q8_0(const kvs_wmat *w, const uint8_t *row, int ng, prep_grp *out) {
    prep_groups(w, row, ng, KVS_TYPE_Q8_0, out);
}

static void prep_rows(const kvs_wmat *w, int j0, int nr, prep_grp *out, int ng) {
    for (int j = 0; j < nr; j++) {
        /* the packed groups where there are (pack.c), which need no permutes */
        const uint8_t *row = q_row(w, j0 + j);
        /* the row PREP_PF_ROWS further, in the layout read: with few
         * activation rows the preparation waits on weights from L3 or DRAM
         * otherwise (8 streams of SmolLM2 decode: +7%) */
        const uintptr_t pf0 = (uintptr_t)row + PREP_PF_ROWS * w->row_bytes;
        for (uintptr_t a = pf0 & ~(uintptr_t)63; PREP_PF_ROWS && a < pf0 + w->row_bytes; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
        if (w->type == KVS_TYPE_Q4_1) prep_groups(w, row, ng, KVS_TYPE_Q4_1, out + (size_t)j * ng);
        else if (w->type == KVS_TYPE_Q4_0) prep_groups(w, row, ng, KVS_TYPE_Q4_0, out + (size_t)j * ng);
        else prep_q8_0(w, row, ng, out + (size_t)j * ng);
    }
}

/* The same from a whole packed tile's transposed tails (pack.c), the 4 rows
 * half .. half + 3 of the tile at a (half = 0 or 4): per dword, one permute
 * spreads the 4 rows' dwords (Q8_0: their word pairs 2r and 2r + 1) to
 * lanes 4j + i; the scales likewise. Prefill then reads none of the GGUF
 * rows the packed copy replaced (their pages can be given back). */
static const uint16_t tile_tail_words[2][32] __attribute__((aligned(64))) = {
#define TW(h, j) (h) + (j), 8 + (h) + (j), (h) + (j), 8 + (h) + (j), (h) + (j), 8 + (h) + (j), (h) + (j), 8 + (h) + (j)
    {TW(0, 0), TW(0, 1), TW(0, 2), TW(0, 3)},
    {TW(4, 0), TW(4, 1), TW(4, 2), TW(4, 3)},
#undef TW
};

static void prep_tail_packed(int type, const uint8_t *a, int half, prep_grp *p) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const __m512i rows4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const int nvec = type == KVS_TYPE_Q8_0 ? 8 : 4; /* the tile's q bytes: 32 per vector */
    const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(a + 32 * nvec + 2 * half)));
    p->dw = _mm512_permutexvar_ps(rows4, _mm512_castps128_ps512(d4));
    p->mw = _mm512_setzero_ps();
    p->corr = _mm512_setzero_si512();
    if (type == KVS_TYPE_Q8_0) {
        const __m512i words = _mm512_load_si512(tile_tail_words[half / 4]);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            p->v[r] = _mm512_permutexvar_epi16(words, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 32 * r))));
        p->corr = q8_lanes_corr(p->v);
        return;
    }
    if (type == KVS_TYPE_Q4_1) {
        const __m128 m4 = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(a + 144 + 2 * half)));
        p->mw = _mm512_permutexvar_ps(rows4, _mm512_castps128_ps512(m4));
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const __m512i q = _mm512_permutexvar_epi32(rows4, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(a + 32 * r + 4 * half))));
        p->v[2 * r] = _mm512_and_si512(q, lo4);
        p->v[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
    }
}

/* Tail blocks of the tile's nr rows, lane 4j + i = row j (any i). Vector v
 * pairs with xq vec v (Q4) or xq vec xq_of_q8[v] (Q8_0). Missing rows: 0.
 * Each row's 16 (or 32) q bytes go into one 128-bit lane of Z (lane 4j + r
 * = dword r of row j), and one permute per dword r spreads it. */
static void prep_tail(const kvs_wmat *w, int j0, int nr, int ng, int nt, prep_grp *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const int type = w->type;
    if (w->packed && nr == NR && kvs_packed_tiled(w, j0 + NR - 1)) {
        const int bs = kvs_q_block_bytes(type);
        const uint8_t *tail = kvs_packed_tile_tail(w, j0 & ~(KVS_PACK_TILE - 1));
        for (int t = 0; t < nt; t++) prep_tail_packed(type, tail + (size_t)t * KVS_PACK_TILE * bs, j0 & 4, &out[t]);
        return;
    }
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
            p->corr = q8_corr(corr);
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

/* A tile's end: R, its full groups' chains reduced (lane 4j + i = output
 * (i, j)), gets the tail blocks added with lanes = outputs, and the outputs
 * are stored. type: Q4_0, Q4_1 (weight nibbles u8, xq s8) or Q8_0 (xq u8,
 * weight bytes s8: see kern_tile). */
AI void tile_finish(__m512 R, const prep_grp *pt, int nt, const uint8_t *quad, float *y, size_t ldy, int mr, int nr,
                    int type) {
    const int q8 = type == KVS_TYPE_Q8_0;
    for (int t = 0; t < nt; t++) {
        const prep_grp *p = pt + t;
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
        __m512i acc = _mm512_setzero_si512();
        __m512i lac = q8 ? _mm512_load_si512(&p->corr)
                      : type == KVS_TYPE_Q4_1 ? _mm512_setzero_si512() : bcast16(qt + KVS_XQ_TAIL_C);
        #pragma GCC unroll 8
        for (int v = 0; v < 8; v++) { /* the hi and lo chains side by side */
            const __m512i wv = in_register(_mm512_load_si512(&p->v[v])); /* one load for both chains */
            const int xv = q8 ? xq_of_q8[v] : v;
            const __m512i xh = bcast16(qt + 16 * xv), xl = bcast16(qt + KVS_XQ_TAIL_PLANE + 16 * xv);
            acc = q8 ? _mm512_dpbusd_epi32(acc, xh, wv) : _mm512_dpbusd_epi32(acc, wv, xh);
            lac = q8 ? _mm512_dpbusd_epi32(lac, xl, wv) : _mm512_dpbusd_epi32(lac, wv, xl);
        }
        acc = _mm512_add_epi32(_mm512_slli_epi32(acc, 8), lac);
        __m512 dx = _mm512_castsi512_ps(bcast16(qt + KVS_XQ_TAIL_D));
        R = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_load_ps(&p->dw), dx), R);
        if (type == KVS_TYPE_Q4_1) {
            __m512 sx = _mm512_castsi512_ps(bcast16(qt + KVS_XQ_TAIL_S));
            R = _mm512_fmadd_ps(_mm512_load_ps(&p->mw), sx, R);
        }
    }
    store_tile(R, y, ldy, mr, nr);
}

/* A tile of mr activation rows x nr weight rows, Q4_0 / Q4_1 (weight
 * nibbles u8, xq bytes s8) or Q8_0 (xq bytes u8 = x + 128, weight bytes
 * s8). Per block the integer dot is 256 * dot(w, hi) + dot(w, lo), plus c
 * for Q4_0 (quant.h) or the weights' corr for Q8_0 (prep_grp): a hi and a
 * lo vpdpbusd chain, then a shift and an add.
 *
 * The rows go in passes of two: per group, vector v of the nr weight rows
 * is loaded once and meets both rows' hi and lo vectors, 16 vpdpbusd for 8
 * loads, in 16 chains (a vpdpbusd waits some 4-5 cycles for its
 * accumulator: 8 chains left the unit idle). Before, one weight row's 8
 * vectors stayed in registers (Q8_0: one activation row's) and every
 * vpdpbusd loaded its other operand: a core that loads two zmm a cycle and
 * issues two vpdpbusd a cycle could not feed both. At the end of a pass
 * each row's 4 output vectors are reduced to one (tree16x16_quarter), so
 * the 16 chains, 8 outputs, 4 weight vectors, 1 activation vector and the
 * 2 finished rows fit the 32 registers (with the first pass's 8 outputs
 * left in memory instead, the spills and reloads cost more than the loads
 * saved: SmolLM2 Q4_0 prefill 0.85-0.91x). SmolLM2's shapes at m = 512, one
 * thread, a Zen 5 VM (bench/ab-kernels.sh, 7 rounds): Q4_0 0.85-0.89x the
 * time; the whole prefill (bench/ab.sh, 6 rounds) Q4_0 1.07x tokens/s, Q4_1
 * 1.04x, Q8_0 1.62x. Integer sums wrap, so any order gives the same dots;
 * the float steps per output and the tree are unchanged: the same bits for
 * every tile shape. */
AI void kern_tile(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq, size_t xq_row,
                  const uint8_t *quad, float *y, size_t ldy, int mr, int nr, int type) {
    const int q8 = type == KVS_TYPE_Q8_0;
    __m512 Q[4]; /* row i's 4 outputs' chains, reduced as far as they go alone (tree16x16_quarter) */
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) Q[i] = _mm512_setzero_ps(); /* rows past mr */
    #pragma GCC unroll 2
    for (int i0 = 0; i0 < mr; i0 += 2) {
        const int pr = mr - i0 < 2 ? 1 : 2;
        __m512 Cp[2][NR]; /* this pass's outputs' chains (zero past nr) */
        #pragma GCC unroll 2
        for (int i = 0; i < pr; i++)
            #pragma GCC unroll 4
            for (int j = 0; j < NR; j++) Cp[i][j] = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            const prep_grp *p0 = pw + g; /* weight row j's group: p0 + j ng */
            __m512i H[2][NR], L[2][NR];
            const uint8_t *grp[2];
            #pragma GCC unroll 2
            for (int i = 0; i < pr; i++) {
                grp[i] = xq + (size_t)(i0 + i) * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
                const __m512i c = type == KVS_TYPE_Q4_0 ? _mm512_loadu_si512(grp[i] + KVS_XQ_GROUP_QS + 128)
                                                        : _mm512_setzero_si512();
                #pragma GCC unroll 4
                for (int j = 0; j < nr; j++) {
                    H[i][j] = _mm512_setzero_si512();
                    L[i][j] = q8 ? _mm512_load_si512(&p0[(size_t)j * ng].corr) : c;
                }
            }
            #pragma GCC unroll 8
            for (int v = 0; v < 8; v++) {
                const int xv = q8 ? xq_of_q8[v] : v;
                __m512i W[NR];
                #pragma GCC unroll 4
                for (int j = 0; j < nr; j++) W[j] = in_register(_mm512_load_si512(&p0[(size_t)j * ng].v[v]));
                #pragma GCC unroll 2
                for (int i = 0; i < pr; i++) {
                    const __m512i xh = in_register(_mm512_loadu_si512(grp[i] + 64 * xv));
                    #pragma GCC unroll 4
                    for (int j = 0; j < nr; j++)
                        H[i][j] = q8 ? _mm512_dpbusd_epi32(H[i][j], xh, W[j]) : _mm512_dpbusd_epi32(H[i][j], W[j], xh);
                    const __m512i xl = in_register(_mm512_loadu_si512(grp[i] + KVS_XQ_PLANE + 64 * xv));
                    #pragma GCC unroll 4
                    for (int j = 0; j < nr; j++)
                        L[i][j] = q8 ? _mm512_dpbusd_epi32(L[i][j], xl, W[j]) : _mm512_dpbusd_epi32(L[i][j], W[j], xl);
                }
            }
            #pragma GCC unroll 2
            for (int i = 0; i < pr; i++) {
                const __m512 dx = _mm512_loadu_ps(grp[i] + KVS_XQ_GROUP_QS);
                #pragma GCC unroll 4
                for (int j = 0; j < nr; j++) {
                    const prep_grp *p = p0 + (size_t)j * ng;
                    const __m512i acc = _mm512_add_epi32(_mm512_slli_epi32(H[i][j], 8), L[i][j]);
                    Cp[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_load_ps(&p->dw), dx), Cp[i][j]);
                    if (type == KVS_TYPE_Q4_1)
                        Cp[i][j] = _mm512_fmadd_ps(_mm512_load_ps(&p->mw), _mm512_loadu_ps(grp[i] + KVS_XQ_GROUP_QS + 64),
                                                   Cp[i][j]);
                }
            }
        }
        #pragma GCC unroll 2
        for (int i = 0; i < pr; i++) Q[i0 + i] = tree16x16_quarter(Cp[i], 0);
    }
    tile_finish(tree16x16_of_quarters(Q, 0), pt, nt, quad, y, ldy, mr, nr, type);
}

#define KQ_CASE(a, b) \
    case (a) * 8 + (b): kern_tile(pw, pt, ng, nt, xq, xq_row, quad, y, ldy, a, b, TYPE); break;
#define KQ_CASES                                                              \
    switch (mr * 8 + nr) {                                                    \
        KQ_CASE(1, 1) KQ_CASE(1, 2) KQ_CASE(1, 3) KQ_CASE(1, 4)               \
        KQ_CASE(2, 1) KQ_CASE(2, 2) KQ_CASE(2, 3) KQ_CASE(2, 4)               \
        KQ_CASE(3, 1) KQ_CASE(3, 2) KQ_CASE(3, 3) KQ_CASE(3, 4)               \
        KQ_CASE(4, 1) KQ_CASE(4, 2) KQ_CASE(4, 3) KQ_CASE(4, 4)               \
    }

/* One function per weight type: each holds its 16 tile shapes. */
#define TYPE KVS_TYPE_Q4_0
static void tile_q4_0(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                      size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr) { KQ_CASES }
#undef TYPE
#define TYPE KVS_TYPE_Q4_1
static void tile_q4_1(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                      size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr) { KQ_CASES }
#undef TYPE
#define TYPE KVS_TYPE_Q8_0
static void tile_q8_0(const prep_grp *pw, const prep_grp *pt, int ng, int nt, const uint8_t *xq,
                      size_t xq_row, const uint8_t *quad, float *y, size_t ldy, int mr, int nr) { KQ_CASES }
#undef TYPE

/* Float weights: chunks of 16 elements, lane l = chain l (e % 16 == l). */
AI __m512 load_w16(const uint8_t *row, int e, int type, __mmask16 mk) {
    if (type == KVS_TYPE_F32) return _mm512_maskz_loadu_ps(mk, row + 4 * (size_t)e);
    __m256i h = _mm256_maskz_loadu_epi16(mk, row + 2 * (size_t)e);
    if (type == KVS_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define F_PF_ROWS 16 /* weight rows ahead that the float paths prefetch */

/* With pf (the first row tile of the call's rows), the bytes of the nr
 * weight rows F_PF_ROWS rows further, spread over the chunks (nr * 16
 * elements a chunk) so that they overlap the fmas: with none the loads waited
 * on DRAM, and a burst at the start of each tile waited on full fill buffers
 * (8 rows of SmolLM2 F16's layers, one Xeon thread: 38 ms a step with the
 * burst, 31.6 -> 26.5 ms spread; one row, decode: 40.4-41.2 -> 41.7-43.4
 * tok/s at 1 thread, 78-83 -> 83-87 at 2). f_pf_base: none without pf;
 * near_rows: F_PF_ROWS, or kern_f8's own distance. */
typedef struct f_pf {
    uintptr_t near, far; /* 0: none */
} f_pf;
/* With far, weights that stream from DRAM (w->far_rows) also go into L2
 * far_rows ahead, spread the same way: SmolLM2 F16 decode 50.5-50.9 ->
 * 60.3-63.6 tok/s on one Xeon thread, 105-111 -> 120-126 on two (the near
 * prefetch alone left the loads waiting). Not for 8 rows (kern_f8), which
 * compute longer per byte: 8 streams +3% on one thread, -7% on two. */
AI f_pf f_pf_base(const kvs_wmat *w, int j0, int pf, int near_rows, int far) {
    const uintptr_t data = (uintptr_t)w->data;
    return (f_pf){pf ? data + (size_t)(j0 + near_rows) * w->row_bytes : 0,
                  pf && far && w->far_rows ? data + (size_t)(j0 + w->far_rows) * w->row_bytes : 0};
}
/* near_l2 (a constant in each copy): the near rows into L2 (T1), not L1 */
AI void f_pf_chunk(f_pf pfb, int e, int nr, int type, int near_l2) {
    const size_t chunk_bytes = (size_t)nr * 16 * (type == KVS_TYPE_F32 ? 4 : 2), at = (size_t)(e / 16) * chunk_bytes;
    if (pfb.near && near_l2)
        for (size_t o = 0; o < chunk_bytes; o += 64) _mm_prefetch((const char *)(pfb.near + at + o), _MM_HINT_T1);
    else if (pfb.near)
        for (size_t o = 0; o < chunk_bytes; o += 64) _mm_prefetch((const char *)(pfb.near + at + o), _MM_HINT_T0);
    if (pfb.far)
        for (size_t o = 0; o < chunk_bytes; o += 64) _mm_prefetch((const char *)(pfb.far + at + o), _MM_HINT_T1);
}

AI void kern_f(const kvs_wmat *w, int j0, const float *x, int k, float *y, size_t ldy, int mr,
               int nr, int type, int pf) {
    __m512 C[MR][NR];
    #pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) C[i][j] = _mm512_setzero_ps();
    const uint8_t *rows[NR];
    #pragma GCC unroll 4
    for (int j = 0; j < nr; j++) rows[j] = (const uint8_t *)w->data + (size_t)(j0 + j) * w->row_bytes;
    const f_pf pfb = f_pf_base(w, j0, pf, F_PF_ROWS, 1);
    int e = 0;
    /* whole chunks: plain loads and fmas (merge-masked ones with a full
     * mask cost 8 streams of SmolLM2 F16 15%: 38 -> 33 ms a step) */
    for (; e + 16 <= k; e += 16) {
        f_pf_chunk(pfb, e, nr, type, 0);
        __m512 W[NR];
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) W[j] = load_w16(rows[j], e, type, 0xffff);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)i * k + e);
            #pragma GCC unroll 4
            for (int j = 0; j < nr; j++) C[i][j] = _mm512_fmadd_ps(xv, W[j], C[i][j]);
        }
    }
    if (e < k) {
        __mmask16 mk = (__mmask16)((1u << (k - e)) - 1);
        __m512 W[NR];
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) W[j] = load_w16(rows[j], e, type, mk);
        #pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)i * k + e);
            #pragma GCC unroll 4
            /* merge-masked: lanes past k keep their chain as it is (a -0 stays -0) */
            for (int j = 0; j < nr; j++) C[i][j] = _mm512_mask3_fmadd_ps(xv, W[j], C[i][j], mk);
        }
    }
    if (mr == 1) { /* decode: one tree per output */
        #pragma GCC unroll 4
        for (int j = 0; j < nr; j++) y[j] = hsum_tree(C[0][j]);
        return;
    }
    /* the tile's outputs reduced together (one hsum_tree each: 33 -> 31.6
     * ms, as above): C[i][j] -> lane 4j + i */
    __m512 T[16];
    #pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
        #pragma GCC unroll 4
        for (int j = 0; j < NR; j++) T[4 * i + j] = i < mr && j < nr ? C[i][j] : _mm512_setzero_ps();
    store_tile(tree16x16(T), y, ldy, mr, nr);
}

/* 8 activation rows x 2 weight rows (a batch of 8 streams): each weight
 * chunk is loaded and widened once for 8 rows, not twice as by two 4 x 4
 * tiles (vcvtph2ps shares the fma ports), and each activation chunk once
 * for both weight rows. C[i][j]: output (i, j), 16 accumulators; the same
 * chains, tree and bits as every tile shape. Elements [e0, e1) of k: a
 * block that starts past 0 resumes the chains from acc, one that ends
 * before k leaves them there (acc[2 i + j]) and outputs nothing. */
#define F8_ROWS 8
/* kern_f8 prefetches the rows F8_PF_ROWS ahead into L2, not L1: 8 rows'
 * chunk of xr (kept in L1 for the tile, 24 KiB a k block) and 16 weight
 * rows ahead in L1 crowded each other out. SmolLM2 F16, 8 streams, one
 * Xeon: L1 at 16 rows 298-303 tok/s (1 thread) / 519-528 (2 threads); L2
 * at 8, 12, 16, 24 rows 313-319 / 570-584, 321 / 558-571, 316-323 /
 * 509-571, 316-319 / 518-547; at 32 rows 315-320 (1 thread). */
#define F8_PF_ROWS 8
AI void kern_f8(const kvs_wmat *w, int j0, const float *xr, int k, int e0, int e1, __m512 *acc, float *y,
                size_t ldy, int nr, int type, int pf) {
    __m512 C[F8_ROWS][2];
    #pragma GCC unroll 8
    for (int i = 0; i < F8_ROWS; i++) {
        C[i][0] = e0 ? acc[2 * i] : _mm512_setzero_ps();
        C[i][1] = e0 ? acc[2 * i + 1] : _mm512_setzero_ps();
    }
    const uint8_t *row0 = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes, *rows[2] = {row0, row0 + w->row_bytes};
    const f_pf pfb = f_pf_base(w, j0, pf, F8_PF_ROWS, 0);
    int e = e0;
    const float *xc = xr + (size_t)(e0 / 16) * 128; /* chunk e's 8 rows */
    for (; e + 16 <= e1; e += 16, xc += 128) {
        f_pf_chunk(pfb, e, nr, type, 1);
        __m512 W[2];
        #pragma GCC unroll 2
        for (int j = 0; j < nr; j++) W[j] = load_w16(rows[j], e, type, 0xffff);
        #pragma GCC unroll 8
        for (int i = 0; i < F8_ROWS; i++) {
            __m512 xv = _mm512_load_ps(xc + 16 * i);
            /* one load, not one per fma: folded into both fmas, each
             * activation vector was loaded twice through an indexed address
             * (the pointer xc and this: SmolLM2 F16, 8 streams, one Xeon
             * thread, 282 -> 304 tok/s; cache-resident ffn_down 140 -> 128
             * us) */
            __asm__("" : "+v"(xv));
            #pragma GCC unroll 2
            for (int j = 0; j < nr; j++) C[i][j] = _mm512_fmadd_ps(xv, W[j], C[i][j]);
        }
    }
    if (e1 < k) {
        #pragma GCC unroll 8
        for (int i = 0; i < F8_ROWS; i++) {
            acc[2 * i] = C[i][0];
            acc[2 * i + 1] = C[i][1];
        }
        return;
    }
    if (e < k) {
        const __mmask16 mk = (__mmask16)((1u << (k - e)) - 1);
        __m512 W[2];
        #pragma GCC unroll 2
        for (int j = 0; j < nr; j++) W[j] = load_w16(rows[j], e, type, mk);
        #pragma GCC unroll 8
        for (int i = 0; i < F8_ROWS; i++) {
            const __m512 xv = _mm512_load_ps(xr + (size_t)(e / 16) * 128 + 16 * i); /* zero past k */
            #pragma GCC unroll 2
            for (int j = 0; j < nr; j++) C[i][j] = _mm512_mask3_fmadd_ps(xv, W[j], C[i][j], mk);
        }
    }
    /* output (i, j) into lane l = 2i + j: tree16x16 puts input 4a + b in lane 4b + a */
    __m512 T[16];
    #pragma GCC unroll 8
    for (int i = 0; i < F8_ROWS; i++)
        #pragma GCC unroll 2
        for (int j = 0; j < 2; j++) T[4 * ((2 * i + j) % 4) + (2 * i + j) / 4] = C[i][j];
    const __m512 r = tree16x16(T);
    const __mmask16 mk = (__mmask16)((1u << nr) - 1);
    #pragma GCC unroll 8
    for (int i = 0; i < F8_ROWS; i++) _mm512_mask_storeu_ps(y + (size_t)i * ldy - 2 * i, (__mmask16)(mk << (2 * i)), r);
}

static void tile_f8(const kvs_wmat *w, int j0, const float *xr, int k, int e0, int e1, __m512 *acc, float *y,
                    size_t ldy, int nr, int pf) {
    const int type = w->type;
    if (nr == 2) {
        if (type == KVS_TYPE_F32) kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 2, KVS_TYPE_F32, pf);
        else if (type == KVS_TYPE_F16) kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 2, KVS_TYPE_F16, pf);
        else kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 2, KVS_TYPE_BF16, pf);
    } else {
        if (type == KVS_TYPE_F32) kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 1, KVS_TYPE_F32, pf);
        else if (type == KVS_TYPE_F16) kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 1, KVS_TYPE_F16, pf);
        else kern_f8(w, j0, xr, k, e0, e1, acc, y, ldy, 1, KVS_TYPE_BF16, pf);
    }
}

#define KF_CASE(a, b)                                                                   \
    case (a) * 8 + (b):                                                                 \
        if (type == KVS_TYPE_F32) kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_F32, pf);      \
        else if (type == KVS_TYPE_F16) kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_F16, pf); \
        else kern_f(w, j0, x, k, y, ldy, a, b, KVS_TYPE_BF16, pf);                          \
        break;

static void tile_f(const kvs_wmat *w, int j0, const float *x, int k, float *y, size_t ldy, int mr,
                   int nr, int pf) {
    int type = w->type;
    switch (mr * 8 + nr) {
        KF_CASE(1, 1) KF_CASE(1, 2) KF_CASE(1, 3) KF_CASE(1, 4)
        KF_CASE(2, 1) KF_CASE(2, 2) KF_CASE(2, 3) KF_CASE(2, 4)
        KF_CASE(3, 1) KF_CASE(3, 2) KF_CASE(3, 3) KF_CASE(3, 4)
        KF_CASE(4, 1) KF_CASE(4, 2) KF_CASE(4, 3) KF_CASE(4, 4)
    }
}

/* Several activation rows (prefill, batched decode): PNR weight rows are
 * widened to f32 once into a panel (k padded with zero to 16) that every
 * PMR-row tile of the call then reads; widening them per tile had the cvts
 * take half the fma ports (vcvtph2ps is two uops on the fma ports). A
 * tile's outputs are reduced 16 at a time (tree16x16); the last partial
 * step is a merge-masked fma, so chains past k are left exactly as they
 * are, as in the reference, which has no step there.
 * 3 x 8 tiles (24 chains, 11 loads per 24 fmas), not 2 x 8 (10 per 16):
 * on the Xeon (AMX one; sessions 31-34) a loop of zmm loads and fmas from
 * L1 runs at ~7 G loads + fmas a second between them (fmas alone 6.5 G/s),
 * so fmas per load set the pace: 2 x 8 4.4 G fmas/s, 3 x 8 4.75, 4 x 4
 * 4.5, 1 x 16 3.7 (4 x 6 4.9 in that loop, but spilled as compiled here);
 * bench_kernels --f16, one thread, m = 512: 102-115 -> 115-128 GOPS with
 * the prefetch below (PANEL_X_PREFETCH). */
#ifndef PMR
#define PMR 3 /* activation rows of a panel tile */
#endif
/* Floats ahead of each activation row's chunk fetched into L1: the rows
 * stream from L2 once per panel (hardware prefetch alone left the first
 * loads of each chunk waiting: +3-8% at 2 x 8, up to +10% at 3 x 8). */
#ifndef PANEL_X_PREFETCH
#define PANEL_X_PREFETCH 128
#endif
#ifndef PANEL_MIN_M
#define PANEL_MIN_M 12
#endif
#ifndef PANEL_X_BYTES
#define PANEL_X_BYTES (1024 * 1024)
#endif
#define PANEL_BLOCK_CHUNKS 48 /* a panel block: PNR rows x 768 floats, 24 KiB */
#define PANEL_ACC_ROWS 128    /* activation rows of a block when k is split: ~64 KiB of chains (43 tiles x 24) */
#ifndef PNR
#define PNR 8 /* weight rows of a panel */
#endif
#define PANEL_FLOATS 16384 /* 64 KiB of stack: PNR rows of up to 16384 / PNR */

/* Elements [e0, e1) of weight rows j0.. widened into wf (row stride kbp,
 * element e at e - e0; zero past k and for rows past nr). */
static void widen_panel(const kvs_wmat *w, int j0, int nr, int e0, int e1, int kbp, float *wf) {
    for (int j = 0; j < PNR; j++) {
        float *dst = wf + (size_t)j * kbp;
        if (j >= nr) {
            memset(dst, 0, sizeof(float) * (size_t)kbp);
            continue;
        }
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(j0 + j) * w->row_bytes;
        for (int e = e0; e < e1; e += 16) {
            __mmask16 mk = w->k - e >= 16 ? 0xffff : (__mmask16)((1u << (w->k - e)) - 1);
            _mm512_store_ps(dst + (e - e0), load_w16(row, e, w->type, mk));
        }
    }
}

/* A tile over elements [e0, e1) of k, the panel holding those (wf, row
 * stride kbp): chains resumed from acc past e0, left in acc before k (no
 * output), as kern_f8. */
#define POUT (PMR * PNR) /* a tile's outputs, (i, j) at t = PNR i + j */
#define PTREES ((POUT + 15) / 16)
AI void kern_panel(const float *wf, int kbp, const float *x, int k, int e0, int e1, __m512 *acc, float *y,
                   size_t ldy, int mr, int nr) {
    __m512 C[16 * PTREES];
#pragma GCC unroll 32
    for (int t = 0; t < 16 * PTREES; t++) C[t] = e0 && t < POUT ? acc[t] : _mm512_setzero_ps();
    wf -= e0; /* wf[j * kbp + e] is element e of panel row j */
    int e = e0;
    for (; e + 16 <= e1; e += 16) {
        __m512 X[PMR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            /* (an address past the rows: a hint, no fault; integer arithmetic, no pointer past the array) */
            _mm_prefetch((const char *)((uintptr_t)(x + (size_t)i * k + e) + 4 * PANEL_X_PREFETCH), _MM_HINT_T0);
            X[i] = _mm512_loadu_ps(x + (size_t)i * k + e);
            __asm__("" : "+v"(X[i])); /* one load each, not one per fma */
        }
#pragma GCC unroll 8
        for (int j = 0; j < PNR; j++) {
            __m512 W = _mm512_load_ps(wf + (size_t)j * kbp + e);
            __asm__("" : "+v"(W));
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) C[PNR * i + j] = _mm512_fmadd_ps(X[i], W, C[PNR * i + j]);
        }
    }
    if (e1 < k) {
#pragma GCC unroll 32
        for (int t = 0; t < POUT; t++) acc[t] = C[t];
        return;
    }
    if (e < k) {
        __mmask16 mk = (__mmask16)((1u << (k - e)) - 1);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)i * k + e);
#pragma GCC unroll 8
            for (int j = 0; j < PNR; j++)
                C[PNR * i + j] = _mm512_mask3_fmadd_ps(xv, _mm512_load_ps(wf + (size_t)j * kbp + e), C[PNR * i + j], mk);
        }
    }
    float out[16 * PTREES] __attribute__((aligned(64)));
#pragma GCC unroll 2
    for (int r = 0; r < PTREES; r++) _mm512_store_ps(out + 16 * r, tree16x16(C + 16 * r)); /* C[16 r + u] in lane 4 (u % 4) + u / 4 */
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            int t = PNR * i + j, u = t % 16;
            y[(size_t)i * ldy + j] = out[16 * (t / 16) + 4 * (u % 4) + u / 4];
        }
}

static void tile_panel(const float *wf, int kbp, const float *x, int k, int e0, int e1, __m512 *acc, float *y,
                       size_t ldy, int mr, int nr) {
    switch (mr) {
    case 1: kern_panel(wf, kbp, x, k, e0, e1, acc, y, ldy, 1, nr); break;
#if PMR >= 2
    case 2: kern_panel(wf, kbp, x, k, e0, e1, acc, y, ldy, 2, nr); break;
#endif
#if PMR >= 3
    case 3: kern_panel(wf, kbp, x, k, e0, e1, acc, y, ldy, 3, nr); break;
#endif
#if PMR >= 4
    case 4: kern_panel(wf, kbp, x, k, e0, e1, acc, y, ldy, 4, nr); break;
#endif
    }
}

/* ------------------------------------------------------------ entry point */

/* Activation rows per block of at most budget bytes (a multiple of the tile's rows, at least one tile). */
static int rows_per_block(size_t budget, size_t row_bytes, int tile_rows) {
    int mb = (int)(budget / row_bytes);
    mb -= mb % tile_rows;
    return mb < tile_rows ? tile_rows : mb;
}

/* Float weights, 8..PANEL_MIN_M - 1 activation rows (8 streams): the first
 * 8 rows copied chunk by chunk side by side (xr[c][i][16]: one pointer
 * reaches them all; 8 row pointers spilled into vector registers and cost
 * more than the copy), then 8 x 2 tiles; rows past 8 on the 4 x 4 tiles.
 * Longer rows go in k blocks of at most F8_BLOCK_CHUNKS chunks (24 KiB of
 * xr) over F8_GROUP weight rows at a time, the chains kept in acc between
 * blocks: 8 rows of a 1536-long xr (48 KiB) left L1 for every pair of weight
 * rows, and its loads (8 per 16 fmas) waited on L2 (SmolLM2 F16 ffn_down,
 * 8 rows, one Xeon thread: 77 GOPS, the shorter shapes 120).
 * noinline: its 72 KiB of stack only while it runs. */
#define F8_FLOATS 16384
#define F8_BLOCK_CHUNKS 48
#define F8_GROUP 16
__attribute__((noinline)) static void f8_rows(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    const int k = w->k, n = w->n, m = c->m, nch = (k + 15) / 16;
    const int nblk = (nch + F8_BLOCK_CHUNKS - 1) / F8_BLOCK_CHUNKS, kb = 16 * ((nch + nblk - 1) / nblk);
    float xr[F8_FLOATS] __attribute__((aligned(64)));
    __m512 acc[F8_GROUP / 2][2 * F8_ROWS];
    for (int ch = 0; ch < nch; ch++) {
        const int e = 16 * ch;
        const __mmask16 mk = k - e >= 16 ? 0xffff : (__mmask16)((1u << (k - e)) - 1);
        for (int i = 0; i < F8_ROWS; i++)
            _mm512_store_ps(xr + (size_t)ch * 128 + 16 * i, _mm512_maskz_loadu_ps(mk, c->x + (size_t)i * k + e));
    }
    for (int jg = j0; jg < j1; jg += F8_GROUP) {
        const int g1 = j1 - jg < F8_GROUP ? j1 : jg + F8_GROUP;
        for (int eb = 0; eb < k; eb += kb)
            for (int jh = jg; jh < g1; jh += 2)
                tile_f8(w, jh, xr, k, eb, k - eb <= kb ? k : eb + kb, acc[(jh - jg) / 2], c->y + jh, n,
                        g1 - jh < 2 ? 1 : 2, 1);
        for (int jt = jg; jt < g1; jt += NR) {
            const int nr = g1 - jt < NR ? g1 - jt : NR;
            for (int it = F8_ROWS; it < m; it += MR) {
                const int mr = m - it < MR ? m - it : MR;
                tile_f(w, jt, c->x + (size_t)it * k, k, c->y + (size_t)it * n + jt, n, mr, nr, 0);
            }
        }
    }
}

/* One activation row against float weights (decode): row j with row j + h
 * of the chunk's other half, two streams far apart, each prefetched a line
 * ahead per line read (as the AVX2 path, matmul_avx2.c, for the same
 * reason: a core reads DRAM faster from distant streams); kern_f's chain
 * and tree per output, so its bits. SmolLM2 F16 decode, tiles / pairs: a
 * Zen 5 VM, alternating, 57-78 -> 71-88 tok/s at 1 thread, 125-136 ->
 * 145-151 at 2; the AMX Xeon VM (session 44, paired, 5 rounds) 1.19x at 1
 * thread (1.08-1.27x) and 1.23x at 2 (1.13-1.40x). Until then Xeons had kept
 * kern_f's 4-row tiles (pairs unmeasured there); they remain for
 * KVS_F_DECODE=tiles and the tests. */
#define F_PAIR_AHEAD 1024
/* KVS_F_DECODE=pairs or tiles overrides the choice (benchmarks). */
static atomic_int g_f_pairs = -1; /* -1: not decided yet */
static int f_decode_pairs(void) {
    int p = atomic_load_explicit(&g_f_pairs, memory_order_relaxed);
    if (p < 0) {
        const char *e = getenv("KVS_F_DECODE");
        p = !(e && !strcmp(e, "tiles"));
        atomic_store_explicit(&g_f_pairs, p, memory_order_relaxed);
    }
    return p;
}
void kvs_kernels_set_f_decode_pairs(int pairs) { atomic_store(&g_f_pairs, pairs < 0 ? -1 : !!pairs); }
AI float f_dot_tail(__m512 acc, const uint8_t *row, const float *x, int e, int k, int type) {
    if (e < k) {
        const __mmask16 mk = (__mmask16)((1u << (k - e)) - 1);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + e), load_w16(row, e, type, mk), acc, mk);
    }
    return hsum_tree(acc);
}
AI void f_pair(const uint8_t *a, const uint8_t *b, const float *x, int k, float *ya, float *yb, int type) {
    const int esz = type == KVS_TYPE_F32 ? 4 : 2;
    __m512 ca = _mm512_setzero_ps(), cb = _mm512_setzero_ps();
    int e = 0;
    for (; e + 16 <= k; e += 16) {
        if (((e * esz) & 63) == 0) {
            _mm_prefetch((const char *)a + (size_t)e * esz + F_PAIR_AHEAD, _MM_HINT_T0);
            if (b) _mm_prefetch((const char *)b + (size_t)e * esz + F_PAIR_AHEAD, _MM_HINT_T0);
        }
        const __m512 xv = _mm512_loadu_ps(x + e);
        ca = _mm512_fmadd_ps(xv, load_w16(a, e, type, 0xffff), ca);
        if (b) cb = _mm512_fmadd_ps(xv, load_w16(b, e, type, 0xffff), cb);
    }
    *ya = f_dot_tail(ca, a, x, e, k, type);
    if (b) *yb = f_dot_tail(cb, b, x, e, k, type);
}
/* Rows [j0, j1): j with j + h, an odd count's last row alone. */
AI void f_pairs(const kvs_wmat *w, int j0, int j1, const float *x, float *y, int type) {
    const int h = (j1 - j0) / 2;
    const uint8_t *d = (const uint8_t *)w->data;
    for (int j = j0; j < j0 + h; j++)
        f_pair(d + (size_t)j * w->row_bytes, d + (size_t)(j + h) * w->row_bytes, x, w->k, y + j, y + j + h, type);
    if ((j1 - j0) % 2) f_pair(d + (size_t)(j1 - 1) * w->row_bytes, NULL, x, w->k, y + j1 - 1, NULL, type);
}

static void avx512_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    int m = c->m, n = w->n;
    int kp = (w->k + 15) & ~15;
    if (!c->xq && m >= PANEL_MIN_M && kp * PNR <= PANEL_FLOATS) {
        float wf[PANEL_FLOATS] __attribute__((aligned(64)));
        /* k in blocks whose panel stays in L1 (as f8_rows: a 1536-long panel,
         * 48 KiB, was read from L2 by every tile: SmolLM2 F16 ffn_down, 512
         * rows, one Xeon thread, 84 GOPS, the shorter shapes 120; blocked:
         * 96-106); the tiles' chains wait in acc between blocks, so the
         * activation rows of a block are fewer (PANEL_ACC_ROWS: 32, 64, 128
         * rows gave 90, 96, 106 GOPS, 256 and 512 no more) */
        const int nch = kp / 16, nblk = (nch + PANEL_BLOCK_CHUNKS - 1) / PANEL_BLOCK_CHUNKS;
        const int kb = 16 * ((nch + nblk - 1) / nblk);
        __m512 acc[nblk > 1 ? (PANEL_ACC_ROWS + PMR - 1) / PMR : 1][POUT];
        /* activation rows in blocks that stay in L2 while the panels pass */
        int mb = rows_per_block(PANEL_X_BYTES, sizeof(float) * (size_t)kp, PMR);
        if (nblk > 1 && mb > PANEL_ACC_ROWS) mb = PANEL_ACC_ROWS;
        for (int i0 = 0; i0 < m; i0 += mb) {
            int i1 = m - i0 < mb ? m : i0 + mb;
            for (int jt = j0; jt < j1; jt += PNR) {
                int nr = j1 - jt < PNR ? j1 - jt : PNR;
                for (int eb = 0; eb < w->k; eb += kb) {
                    const int e1 = w->k - eb <= kb ? w->k : eb + kb;
                    widen_panel(w, jt, nr, eb, e1, kb, wf);
                    for (int it = i0; it < i1; it += PMR) {
                        int mr = i1 - it < PMR ? i1 - it : PMR;
                        tile_panel(wf, kb, c->x + (size_t)it * w->k, w->k, eb, e1, acc[nblk > 1 ? (it - i0) / PMR : 0],
                                   c->y + (size_t)it * n + jt, n, mr, nr);
                    }
                }
            }
        }
        return;
    }
    if (!c->xq && m >= F8_ROWS && kp * F8_ROWS <= F8_FLOATS) {
        f8_rows(c, j0, j1);
        return;
    }
    if (!c->xq && m == 1 && f_decode_pairs()) {
        if (w->type == KVS_TYPE_F16) f_pairs(w, j0, j1, c->x, c->y, KVS_TYPE_F16);
        else if (w->type == KVS_TYPE_F32) f_pairs(w, j0, j1, c->x, c->y, KVS_TYPE_F32);
        else f_pairs(w, j0, j1, c->x, c->y, KVS_TYPE_BF16);
        return;
    }
    if (!c->xq) {
        for (int jt = j0; jt < j1; jt += NR) {
            int nr = j1 - jt < NR ? j1 - jt : NR;
            for (int it = 0; it < m; it += MR) {
                int mr = m - it < MR ? m - it : MR;
                tile_f(w, jt, c->x + (size_t)it * w->k, w->k, c->y + (size_t)it * n + jt, n, mr, nr, it == 0);
            }
        }
        return;
    }
    if (kvs_avx512_matmul_m1(c, j0, j1)) return;
    int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    /* prep of the column tiles prepared together, on the stack: per tile NR
     * rows x all full groups (704 bytes each), then its tail blocks; room
     * for one tile of the longest rows (more tiles only where they fit
     * PREP_L1_BYTES, far less) */
    prep_grp pw[NR * 32 + KVS_XQ_GROUP] __attribute__((aligned(64)));
    if (ng > 32) { /* k > 16384: larger than any model here; scalar stays correct */
        kvs_isa_scalar.matmul_cols(c, j0, j1);
        return;
    }
    void (*tile_fn)(const prep_grp *, const prep_grp *, int, int, const uint8_t *, size_t, const uint8_t *, float *,
                    size_t, int, int) = w->type == KVS_TYPE_Q8_0   ? tile_q8_0
                                     : w->type == KVS_TYPE_Q4_1 ? tile_q4_1
                                                                : tile_q4_0;
    /* Column tiles prepared together: as many as keep their preparation
     * within PREP_L1_BYTES, so that a tile of activation rows, read from L2
     * once, meets all of them from L1 (one column tile at a time read each
     * activation byte from L2 for 4 weight rows: L2 bandwidth, not the dot
     * unit, set the pace) */
    int tiles = (int)(PREP_L1_BYTES / ((size_t)NR * (ng + 1) * sizeof(prep_grp))); /* + 1: the tail's share */
    tiles = tiles < 1 ? 1 : tiles > PREP_TILES ? PREP_TILES : tiles;
    const int per_tile = NR * ng + nt; /* prep_grps of a column tile in pw */
    /* Activation rows in blocks whose xq stays in L2 while the column tiles
     * of the chunk pass over it (the weights are prepared once per block). */
    size_t row_bytes = c->xq_row + c->xq_quad / 4 + 1;
    int mb = rows_per_block(XQ_BLOCK_BYTES, row_bytes, MR);
    for (int i0 = 0; i0 < m; i0 += mb) {
        int i1 = m - i0 < mb ? m : i0 + mb;
        for (int jb = j0; jb < j1; jb += tiles * NR) {
            int jb1 = j1 - jb < tiles * NR ? j1 : jb + tiles * NR;
            for (int jt = jb; jt < jb1; jt += NR) {
                int nr = jb1 - jt < NR ? jb1 - jt : NR;
                prep_grp *tile = pw + (size_t)((jt - jb) / NR) * per_tile;
                prep_rows(w, jt, nr, tile, ng);
                if (nt) prep_tail(w, jt, nr, ng, nt, tile + NR * ng);
            }
            for (int it = i0; it < i1; it += MR) {
                int mr = i1 - it < MR ? i1 - it : MR;
                const uint8_t *xq = c->xq + (size_t)it * c->xq_row;
                const uint8_t *quad = c->xq_tail + (size_t)(it / 4) * c->xq_quad;
                for (int jt = jb; jt < jb1; jt += NR) {
                    int nr = jb1 - jt < NR ? jb1 - jt : NR;
                    const prep_grp *tw = pw + (size_t)((jt - jb) / NR) * per_tile, *tt = tw + NR * ng;
                    float *y = c->y + (size_t)it * n + jt;
                    tile_fn(tw, tt, ng, nt, xq, c->xq_row, quad, y, n, mr, nr);
                }
            }
        }
    }
}

void kvs_attention_unit_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);
int kvs_attention_split_units_avx512(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_avx512(const kvs_attn_call *c, int phase, int u, float *work);

const kvs_isa kvs_isa_avx512 = {
    .name = "avx512vnni",
    .quantize_rows = avx512_quantize_rows,
    .matmul_cols = avx512_matmul_cols,
    .attention_unit = kvs_attention_unit_avx512,
    /* recalibrated rows are rare (a RAG request's question and output) */
    .attention_unit_recal = kvs_attention_unit_avx2,
    .attention_unit_q8 = kvs_attention_unit_q8_avx512,
    .attention_stage_q8 = kvs_attention_stage_q8_avx512,
    .attention_layout_q8 = kvs_attention_layout_q8_avx512,
    .attention_split_units = kvs_attention_split_units_avx512,
    .attention_split_unit = kvs_attention_split_unit_avx512,
    /* SmolLM2's 3 kv heads on 2 threads, decode attention of 30 layers
     * (Xeon, alternating): 1.1-1.35x at 4096 and 6144 keys, 0.9-1.0x at
     * 1024-3072 (the phases' pool runs and score rows crossing cores) */
    .attention_split_uneven_keys = 4096,
    .attention_split_units_q8 = kvs_attention_split_units_q8_avx512,
    .attention_split_unit_q8 = kvs_attention_split_unit_q8_avx512,
    /* Q8 (Zen 5, 2 threads, pp0 tg32 after 7680, 8 paired rounds): gemma3's
     * one kv head split 1.07x (its kernel alone 0.64-0.67x the time after
     * 2048-7680 keys); SmolLM2's 3 kv heads split 2 : 1 0.90x and 0.95x
     * (kernel 0.95-1.04x): not split. Session 64 (full-width Zen 5, the
     * decode prefetched, the split's 32-dim units reading the layout): 0.81x
     * after 7680, 0.93x after 4096 (6 rounds each), the kernel in the L3
     * 42.6-46.6 us against 45.4-45.7: the phases' pool runs cost what the
     * third head's idle thread would gain */
    .attention_split_uneven_keys_q8 = 0,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
void kvs_kernels_set_f_decode_pairs(int pairs) { (void)pairs; } /* no AVX-512 path to steer */
#endif
