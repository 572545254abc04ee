/*
 * Pieces shared by the AVX-512 matmul files (matmul_avx512.c: quantization,
 * prep, the m > 1 tiles; matmul_avx512_m1.c: decode). Include it only inside
 * an AVX-512 target region (the functions inherit the target).
 */
#ifndef KVS_KERNELS_AVX512_UTIL_H
#define KVS_KERNELS_AVX512_UTIL_H

#include <float.h>
#include <immintrin.h>

#include "kernels/avx512_math.h"
#include "kernels/kernels_impl.h"

#define AI __attribute__((always_inline)) static inline

/* One weight row's group of 16 blocks, rearranged to the xq lane order:
 * v[0..7] (u8 nibbles or s8 bytes), dw (16 floats), mw (Q4_1), corr (Q8_0:
 * -257 * 128 * sum of the block's bytes, the correction for x stored as
 * x + 128 in both planes: 256 * (hi + 128) w + (lo + 128) w sums to
 * 256 hi w + lo w + 257 * 128 w). */
typedef struct prep_grp {
    __m512i v[8];
    __m512 dw;
    __m512 mw;
    __m512i corr;
} prep_grp;

/* corr of a prep_grp from 128 * sum w (see above): -(256 + 1) * that. */
AI __m512i q8_corr(__m512i s128) {
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(_mm512_slli_epi32(s128, 8), s128));
}

/* |x|, and 0 where x is NaN: the maxima of quant.h's amax ignore NaN, as
 * fmaxf does, and vmaxps returns its second operand where either is NaN, so
 * a NaN met in the second place of a max, or in a tree, lost the other
 * lanes' values or made amax NaN. max(NaN, 0) is 0 (the second operand),
 * and 0 never raises a maximum of absolute values. */
AI __m512 abs_or_zero(__m512 x) {
    return _mm512_max_ps(_mm512_and_ps(x, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff))), _mm512_setzero_ps());
}

/* hi and lo of 16 elements x given 1 / d (vid), lane-wise (quant.h). */
AI void two_levels(__m512 x, __m512 vid, __m512i *qh, __m512i *ql) {
    const __m512 v = _mm512_mul_ps(x, vid);
    *qh = _mm512_cvtps_epi32(v); /* round half even */
    const __m512i l = _mm512_sub_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(256.0f))),
                                       _mm512_slli_epi32(*qh, 8));
    *ql = _mm512_max_epi32(_mm512_min_epi32(l, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}

/* The two-level rounding of one block of 32 (quant.h), lane-wise as the
 * reference: qh[h] / ql[h] = hi / lo of elements 16h..16h+15 as int32;
 * returns dx (the scale of Q = 256 hi + lo), writes sum Q. */
AI float quantize_block_levels(const float *xb, __m512i qh[2], __m512i ql[2], int32_t *sum) {
    __m512 x[2] = {_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)};
    __m512 mx = _mm512_max_ps(abs_or_zero(x[0]), abs_or_zero(x[1]));
    float amax = _mm512_reduce_max_ps(mx);
    float d = amax / 127.0f;
    float id = d >= FLT_MIN ? 1.0f / d : 0.0f; /* 1 / subnormal d would overflow */
    __m512 vid = _mm512_set1_ps(id);
    __m512i qsum = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        two_levels(x[h], vid, &qh[h], &ql[h]);
        qsum = _mm512_add_epi32(qsum, _mm512_add_epi32(_mm512_slli_epi32(qh[h], 8), ql[h]));
    }
    *sum = _mm512_reduce_add_epi32(qsum);
    return d * (1.0f / 256.0f);
}

/* The 16 bytes at p in all four 128-bit lanes (a tail block's dword of 4 rows). */
AI __m512i bcast16(const uint8_t *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }


/* Q4_1: a 16-block group is 80 dwords (z[0..4]); block l's dwords are 5l
 * (d, m) and 5l+1+r (qs dword r). Lane l of the result = dword 5l + c. One
 * index vector serves all three permutes: vpermt2d reads its low 5 bits
 * (dwords 0..31 of z0:z1, or 32..63 of z2:z3), vpermd its low 4 (64..79). */
AI __m512i gather5(const __m512i z[5], int c) {
    const __m512i idx = _mm512_add_epi32(
        _mm512_setr_epi32(0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75), _mm512_set1_epi32(c));
    const __mmask16 m23 = c < 2 ? 0x1f80 : c < 4 ? 0x1fc0 : 0x0fc0; /* 32 <= 5l + c < 64 */
    const __mmask16 m4 = c < 4 ? 0xe000 : 0xf000;                    /* 5l + c >= 64 */
    __m512i r = _mm512_permutex2var_epi32(z[0], idx, z[1]);
    r = _mm512_mask_mov_epi32(r, m23, _mm512_permutex2var_epi32(z[2], idx, z[3]));
    return _mm512_mask_permutexvar_epi32(r, m4, idx, z[4]);
}

/* Q4_0: a 16-block group is 288 bytes (z[0..4], z[4] loaded masked to its
 * 32 bytes); lane l of the result = bytes 18l + off .. 18l + off + 3, off =
 * 0 for the scale (d and two q bytes) and 2 + 4r for q dword r (c = 1 + r).
 * Byte permutes, where 16-lane gathers of unaligned dwords were the bulk of
 * a Q4_0 decode step: q40_idx holds each byte's index mod 256 (vpermt2b reads
 * the low 7 bits, vpermb the low 6), q40_seg whether it lies in z0:z1, z2:z3
 * or z4. */
#define Q40_B(l, off, b) (18 * (l) + (off) + (b))
#define Q40_I(l, off) (uint8_t)Q40_B(l, off, 0), (uint8_t)Q40_B(l, off, 1), (uint8_t)Q40_B(l, off, 2), (uint8_t)Q40_B(l, off, 3)
#define Q40_SEG(x) ((x) < 128 ? 0 : (x) < 256 ? 1 : 2)
#define Q40_S(l, off) Q40_SEG(Q40_B(l, off, 0)), Q40_SEG(Q40_B(l, off, 1)), Q40_SEG(Q40_B(l, off, 2)), Q40_SEG(Q40_B(l, off, 3))
#define Q40_ROW(M, off)                                                                                   \
    {M(0, off), M(1, off), M(2, off), M(3, off), M(4, off), M(5, off), M(6, off), M(7, off), M(8, off), \
     M(9, off), M(10, off), M(11, off), M(12, off), M(13, off), M(14, off), M(15, off)}
static const uint8_t q40_idx[5][64] __attribute__((aligned(64))) = {
    Q40_ROW(Q40_I, 0), Q40_ROW(Q40_I, 2), Q40_ROW(Q40_I, 6), Q40_ROW(Q40_I, 10), Q40_ROW(Q40_I, 14)};
static const uint8_t q40_seg[5][64] __attribute__((aligned(64))) = {
    Q40_ROW(Q40_S, 0), Q40_ROW(Q40_S, 2), Q40_ROW(Q40_S, 6), Q40_ROW(Q40_S, 10), Q40_ROW(Q40_S, 14)};

AI void load_q40_group(const uint8_t *src, __m512i z[5]) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) z[t] = _mm512_loadu_si512(src + 64 * t);
    z[4] = _mm512_maskz_loadu_epi8(0xffffffffull, src + 256); /* 288 bytes: never past the group */
}

AI __m512i gather18(const __m512i z[5], int c) {
    const __m512i idx = _mm512_load_si512(q40_idx[c]), seg = _mm512_load_si512(q40_seg[c]);
    __m512i r = _mm512_permutex2var_epi8(z[0], idx, z[1]);
    r = _mm512_mask_mov_epi8(r, _mm512_cmpeq_epi8_mask(seg, _mm512_set1_epi8(1)), _mm512_permutex2var_epi8(z[2], idx, z[3]));
    return _mm512_mask_permutexvar_epi8(r, _mm512_cmpeq_epi8_mask(seg, _mm512_set1_epi8(2)), idx, z[4]);
}

/* x, made to live in a register: a load that several vpdpbusd share stays
 * one load. GCC otherwise folds it into each of them as a memory operand,
 * and a kernel meant to load once for 2-4 vpdpbusd loads for every one:
 * the load ports, not the dot unit, then set the pace. */
AI __m512i in_register(__m512i x) {
    __asm__("" : "+v"(x));
    return x;
}

/* a + b, or max(a, b) (is_max, a constant in each copy). */
AI __m512 tree_step(__m512 a, __m512 b, int is_max) { return is_max ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b); }

/* The reduction tree of kvs_tree16 (is_max 0), or the maxima by the same
 * pairing (1), of 16 vectors at once. C[4i + j] -> lane 4j + i of the result.
 * In two stages, so that a caller can reduce C[4i..4i+3] (a quarter) as soon
 * as those are final and keep one register instead of four. */
AI __m512 tree16x16_quarter(const __m512 Q[4], int is_max) {
    const __m512 z0 = tree_step(_mm512_shuffle_f32x4(Q[0], Q[1], 0x44), _mm512_shuffle_f32x4(Q[0], Q[1], 0xee), is_max);
    const __m512 z1 = tree_step(_mm512_shuffle_f32x4(Q[2], Q[3], 0x44), _mm512_shuffle_f32x4(Q[2], Q[3], 0xee), is_max);
    return tree_step(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xdd), is_max);
}
AI __m512 tree16x16_of_quarters(const __m512 w4[4], int is_max) {
    __m512 v2[2];
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++)
        v2[a] = tree_step(_mm512_shuffle_ps(w4[2 * a], w4[2 * a + 1], 0x44),
                          _mm512_shuffle_ps(w4[2 * a], w4[2 * a + 1], 0xee), is_max);
    return tree_step(_mm512_shuffle_ps(v2[0], v2[1], 0x88), _mm512_shuffle_ps(v2[0], v2[1], 0xdd), is_max);
}
AI __m512 tree16x16_op(const __m512 C[16], int is_max) {
    __m512 w4[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) w4[k] = tree16x16_quarter(C + 4 * k, is_max);
    return tree16x16_of_quarters(w4, is_max);
}
AI __m512 tree16x16(const __m512 C[16]) { return tree16x16_op(C, 0); }

/* The 16 chains of a row whose blocks go in passes (the AMX batch paths):
 * from st, or zero at the first pass; back to st after a pass. */
AI void chains_load(__m512 a[16], const float *st, int first) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) a[c] = first ? _mm512_setzero_ps() : _mm512_load_ps(st + 16 * c);
}
AI void chains_store(float *st, const __m512 a[16]) {
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) _mm512_store_ps(st + 16 * c, a[c]);
}

/* kvs_tree16's pairing over 4 inputs, lane-wise: (a0 + a2) + (a1 + a3).
 * Its last two levels, and its first two over chains q, q + 4, q + 8,
 * q + 12 (as a0..a3). */
AI __m512 tree4_lanes(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    return _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
}

/* kvs_tree16, lane-wise (a[] is overwritten). */
AI __m512 tree16_lanes(__m512 a[16]) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) a[q] = _mm512_add_ps(a[q], a[q + 8]);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) a[q] = _mm512_add_ps(a[q], a[q + 4]);
    return tree4_lanes(a[0], a[1], a[2], a[3]);
}

/* Tree input slot of vector rho so that tree16x16 puts it in lane rho
 * (slot o lands in lane 4 (o % 4) + o / 4: an involution). */
static inline int slot_of(int rho) { return 4 * (rho % 4) + rho / 4; }

/* The scales of a full group of 16 activation blocks at x, lane b = block
 * b, as quantize_block_levels computes them: d = amax / 127 (returned) and
 * id = 1 / d (0 where d is below FLT_MIN: 1 / subnormal d would overflow,
 * quant.h); the maxima by one transposed tree, each division once. */
AI __m512 group_scales_n(const float *x, int n, __m512 *id) {
    __m512 mx[16];
    for (int b = 0; b < 16; b++) { /* blocks past n: zero, not read */
        const __mmask16 live = b < n ? 0xffff : 0;
        mx[slot_of(b)] = _mm512_max_ps(abs_or_zero(_mm512_maskz_loadu_ps(live, x + 32 * b)),
                                       abs_or_zero(_mm512_maskz_loadu_ps(live, x + 32 * b + 16)));
    }
    const __m512 d = _mm512_div_ps(tree16x16_op(mx, 1), _mm512_set1_ps(127.0f));
    *id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(FLT_MIN), _CMP_GE_OQ), _mm512_set1_ps(1.0f), d);
    return d;
}
AI __m512 group_scales(const float *x, __m512 *id) { return group_scales_n(x, 16, id); }


/* One Q4 group of 16 blocks of a weight row, lane = block: W[2r] / W[2r + 1]
 * the low / high nibbles of q dword r (u8), dw the scales, mw the Q4_1 mins
 * (Q4_1's 20-byte blocks by dword permutes, gather5; Q4_0's 18-byte ones by
 * byte permutes, gather18). */
AI void unpack_q4_group(const uint8_t *src, int q41, __m512i W[8], __m512 *dw, __m512 *mw) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m512i z[5];
    if (q41) {
#pragma GCC unroll 5
        for (int t = 0; t < 5; t++) z[t] = _mm512_loadu_si512(src + 64 * t);
    } else {
        load_q40_group(src, z);
    }
    __m512i dm = q41 ? gather5(z, 0) : gather18(z, 0);
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    *mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512i q = q41 ? gather5(z, 1 + r) : gather18(z, 1 + r);
        W[2 * r] = _mm512_and_si512(q, lo4);
        W[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
    }
}

/* The same group from a packed row (pack.c: qv[4] vector r lane l = q dword
 * r of block l, then d[16], then Q4_1's m[16], all f16): no permutes. */
AI void unpack_q4_packed(const uint8_t *src, int q41, __m512i W[8], __m512 *dw, __m512 *mw) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const __m512i q = _mm512_loadu_si512(src + 64 * r);
        W[2 * r] = _mm512_and_si512(q, lo4);
        W[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
    }
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 256)));
    *mw = q41 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 288))) : _mm512_setzero_ps();
}

/* Row j's full groups of a Q4_0 / Q4_1 / Q8_0 matrix: packed
 * (kvs_packed_row) or GGUF. */
AI const uint8_t *q_row(const kvs_wmat *w, int j) {
    return w->packed ? kvs_packed_row(w, j) : (const uint8_t *)w->data + (size_t)j * w->row_bytes;
}

/* Group g of a Q4 row from q_row (packed or GGUF), as W / dw / mw. */
AI void unpack_q4_row_group(const kvs_wmat *w, const uint8_t *row, int g, int q41, __m512i W[8], __m512 *dw,
                            __m512 *mw) {
    const size_t gbytes = (size_t)16 * (q41 ? 20 : 18);
    if (w->packed) unpack_q4_packed(row + (size_t)g * gbytes, q41, W, dw, mw);
    else unpack_q4_group(row + (size_t)g * gbytes, q41, W, dw, mw);
}

/* Q8_0 (34-byte blocks), one GGUF group of 16 blocks, lane = block: W[r]
 * = q dword r (elements 4r..4r+3: xq vec xq_of_q8[r]) of each block, s8.
 * The 32 q bytes of blocks 2p and 2p + 1 go into z[p] (lane 8h + r = dword
 * r of block 2p + h), then an 8 x 16 dword transpose in three rounds of
 * vpermt2d (16-lane gathers of unaligned dwords, one per vector, cost ~3x
 * as much). Round k swaps bit 2 - k of the vector index (a block bit) with
 * bit 2 - k of the lane (a dword bit): output vector o of the pair (x, x |
 * vb) takes, in lane j, lane j with that bit := o's bit from the input whose
 * bit is j's (idx + 16 selects the second). The last round also puts the
 * block bits in lane order (lane l = block l, from lane 8 (l & 1) + l / 2 of
 * the plain swap). The scales: one gather. */
static const int32_t q8_tr_idx[3][2][16] __attribute__((aligned(64))) = {
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30},
     {1, 9, 17, 25, 3, 11, 19, 27, 5, 13, 21, 29, 7, 15, 23, 31}},
};

/* z[q] lane 8h + r = dword r of block 2q + h (16 blocks of 8 dwords) ->
 * z[r] lane l = dword r of block l, in place (the rounds above). */
AI void transpose_block_dwords(__m512i z[8]) {
    __m512i u[8];
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++) {
        const int vb = 4 >> k; /* vector bit of this round */
#pragma GCC unroll 8
        for (int o = 0; o < 8; o++) {
            const int x = o & ~vb; /* the pair: x (bit 0) and x | vb (bit 1) */
            u[o] = _mm512_permutex2var_epi32(z[x], _mm512_load_si512(q8_tr_idx[k][(o & vb) != 0]), z[x | vb]);
        }
#pragma GCC unroll 8
        for (int o = 0; o < 8; o++) z[o] = u[o];
    }
}

/* Byte i < 32 of vpermt2b(a, idx, b): the low byte of dword i of a (i < 16)
 * or of dword i - 16 of b (bit 6 picks b); the upper half is not used. */
static const uint8_t low_bytes_idx[64] __attribute__((aligned(64))) = {
    0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60,
    64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108, 112, 116, 120, 124};

/* A full group of 16 activation blocks at x (32 floats each) quantized
 * (quant.h) in lane = block form: zh[r] / zl[r] lane l = the hi / lo bytes
 * (s8) of elements 4r..4r+3 of block l; returns each block's d = amax / 127.
 * The 16 blocks' maxima reduced together and each division once
 * (group_scales), then per block the levels of quantize_block_levels
 * (two_levels), its int32s as 32 bytes by one byte permute (the low byte,
 * as vpmovdb keeps; two blocks a vector) and the 8 x 16 dword transpose
 * (transpose_block_dwords). Every element and block takes the operations of
 * quantize_block_levels, so the bits are its bits. n < 16: blocks n..15
 * are not read, their lanes zero (d, id and the bytes: what a block of
 * zeros quantizes to). Needs AVX-512 VBMI. */
AI __m512 quantize_group_planes(const float *x, int n, __m512i zh[8], __m512i zl[8]) {
    __m512 id;
    const __m512 d = group_scales_n(x, n, &id);
    const __m512i pick = _mm512_load_si512(low_bytes_idx);
    for (int b = 0; b < 16; b++) {
        __m512i h32 = _mm512_setzero_si512(), l32 = h32;
        if (b < n) {
            const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id);
            __m512i qh[2], ql[2];
            for (int h = 0; h < 2; h++) two_levels(_mm512_loadu_ps(x + 32 * b + 16 * h), idb, &qh[h], &ql[h]);
            /* the block's 32 bytes in natural order: block 2p in the low half of z[p], 2p + 1 in the high */
            h32 = _mm512_permutex2var_epi8(qh[0], pick, qh[1]);
            l32 = _mm512_permutex2var_epi8(ql[0], pick, ql[1]);
        }
        if (b % 2 == 0) {
            zh[b / 2] = h32;
            zl[b / 2] = l32;
        } else {
            zh[b / 2] = _mm512_inserti64x4(zh[b / 2], _mm512_castsi512_si256(h32), 1);
            zl[b / 2] = _mm512_inserti64x4(zl[b / 2], _mm512_castsi512_si256(l32), 1);
        }
    }
    transpose_block_dwords(zh);
    transpose_block_dwords(zl);
    return d;
}

AI void unpack_q8_group(const uint8_t *src, __m512i W[8], __m512 *dw) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* d: the first 2 bytes of each block; reading 4 bytes stays inside the
     * block (qs follows), so the gather never leaves the row. */
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32(34)), src, 1)));
    __m512i z[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++)
        z[q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(src + 68 * q + 2))),
                                  _mm256_loadu_si256((const __m256i *)(src + 68 * q + 36)), 1);
    transpose_block_dwords(z);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) W[r] = z[r];
}

/* The same group from a packed row (pack.c: qv[8] vector r lane l = q dword
 * r of block l, then d[16] f16): plain loads. */
AI void unpack_q8_packed(const uint8_t *src, __m512i W[8], __m512 *dw) {
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) W[r] = _mm512_loadu_si512(src + 64 * r);
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 512)));
}

/* corr of the 16 lanes of W (one block or one row's block each): the xq
 * bytes of a Q8_0 call hold x + 128 (quant.h), see prep_grp. */
AI __m512i q8_lanes_corr(const __m512i W[8]) {
    const __m512i c128 = _mm512_set1_epi8((char)0x80);
    __m512i s[4]; /* 128 * sum of w bytes, four chains: the dots of every row wait on it */
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) s[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, W[r]);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) s[r] = _mm512_dpbusd_epi32(s[r], c128, W[r + 4]);
    return q8_corr(_mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3])));
}

/* Group g of a row from q_row, as a prep_grp (v, dw, and mw or corr): the
 * form every AVX-512 Q4_0 / Q4_1 / Q8_0 kernel consumes. */
AI void unpack_row_group(const kvs_wmat *w, const uint8_t *row, int g, int type, prep_grp *p) {
    if (type == KVS_TYPE_Q8_0) {
        const uint8_t *src = row + (size_t)g * 16 * 34;
        if (w->packed) unpack_q8_packed(src, p->v, &p->dw);
        else unpack_q8_group(src, p->v, &p->dw);
        p->mw = _mm512_setzero_ps();
        p->corr = q8_lanes_corr(p->v);
        return;
    }
    unpack_q4_row_group(w, row, g, type == KVS_TYPE_Q4_1, p->v, &p->dw, &p->mw);
    if (type == KVS_TYPE_Q4_0) p->mw = _mm512_setzero_ps();
    p->corr = _mm512_setzero_si512();
}

/* Paths for one activation row, and for Q4 calls of up to 4 rows
 * (matmul_avx512_m1.c); returns 0 if it does not apply. */
int kvs_avx512_matmul_m1(const kvs_mm_call *c, int j0, int j1);

#endif
