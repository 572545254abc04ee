/*
 * AVX2 dot products for Q5_0 / Q5_1 / K-quant weights, the parts decode
 * (kquant_avx2.c) and the batch path (kquant_avx2_batch.c) share: octets,
 * their unpacking, their float steps. The canonical arithmetic of kquant.h
 * bit for bit.
 *
 * Lanes are blocks. Blocks are taken by octets (8 consecutive blocks, b0 a
 * multiple of 8), so lane l of a float vector is block b0 + l and its chain
 * c = b % 16 is lane l of the low (b0 % 16 == 0) or the high accumulator:
 * the reference's 16 chains are two registers and every float step of eight
 * blocks is one vector instruction in the reference's order.
 *
 * A weight octet is unpacked (unpack_octet) into unsigned integers qu =
 * q_w + off (0..63, off 16 for Q5_0, 32 for Q6_K, else 0) and per-block
 * float scales, zero past the row. The offset comes off exactly as off *
 * (sum of Q over the half), which the quantized row carries (kquant.h).
 * Integers are exact, so only the float steps are ordered, and they are the
 * reference's.
 *
 * Decode (one activation row, natural order, kquant_avx2.c): each octet
 * from memory to registers, used at once.
 *
 * Several activation rows (prefill, the server's batch; the quantizer's
 * lane layout, a lane per block): weight rows by tiles of four, unpacked
 * and transposed once per call (unpack_tile, tile_sums; kquant_avx2_batch.c);
 * a lane accumulates its block directly, no horizontal step.
 *
 * Decode and batch loops are compiled per type as functions of their own
 * (KQ_SHAPES, k_type_fns in kquant_avx2.c). Include this after the AVX2
 * target pragma.
 */
#ifndef KVS_KERNELS_KQUANT_AVX2_OCTET_H
#define KVS_KERNELS_KQUANT_AVX2_OCTET_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kquant.h"
#include "kernels/quant_avx2.h"

/* Octets a row may have for the batch path's buffer on the stack (k <=
 * 16384 elements: a tile of 4 rows x 64 octets x 352 bytes = 88 KiB, as
 * much as the pair buffer before it took). Several activation rows of
 * longer rows go one row at a time through decode (kq_lanes), which needs
 * no buffer. */
#define MAX_OCTETS 64

/* 1 where a call of m activation rows of k elements takes the batch path
 * and its quantized rows are in the lane layout; else natural order, and
 * each row goes through decode. The quantizer and the routing both ask
 * this. */
static inline int kq_lanes(int k, int m) { return m > 1 && (k / 32 + 7) / 8 <= MAX_OCTETS; }

/* The lanes a last group of cnt blocks takes in a group of `lanes` weight
 * blocks (8 on AVX2, 16 on AVX-512): 4 or 8 where the blocks fit, so one
 * group holds 2 or 4 weight rows' tails, each in its own lanes (AVX2: one
 * group of integer work for two rows, on activation lanes its quantizer
 * copies; AVX-512 then lays them out as lanes = outputs), else the whole
 * group. */
static inline int kq_tail_span(int cnt, int lanes) {
    const int span = cnt <= 4 ? 4 : cnt <= 8 ? 8 : 16;
    return span < lanes ? span : lanes;
}

/* 1 where an octet of cnt blocks (the last of a row, or more: 0) is short
 * enough for two weight rows' to share one octet in the AVX2 lane layout
 * (merge_tails). */
static inline int kq_merged_tail(int cnt) { return kq_tail_span(cnt, 8) < 8; }

/* One octet of a weight row, unpacked: unsigned integers of blocks b0..b0+7
 * (zero past the row), their half scales and mins (zero past the row). */
typedef struct octet {
    __m256i qu[8];
    __m256 dw0, dw1, mw;
} octet;

/* Per-type constants of the dot loops (KQ_SHAPES: each type's loops are
 * compiled with them as literals, without the others' branches;
 * kvs_kq_split_scales / kvs_kq_has_min say the same). */
typedef struct kq_shape {
    int type;
    int off_shift; /* off = 1 << off_shift, 0: no offset (off 0) */
    int split;     /* Q6_K: a scale per half */
    int has_min;   /* Q5_1, Q4_K, Q5_K */
    int depth;     /* vpmaddubsw results (pair sums) an int16 sum holds (tile_sums): 8 for 4-bit weights, 4 for 5, 2 for 6 */
} kq_shape;

/* 0xff in byte e where bit e of the 32-bit word is set. */
AI __m256i bytes_from_bits(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

AI uint16_t u16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Q5_0 / Q5_1 in GGUF layout: cnt (<= 8) blocks from b0, each with its own
 * f16 scale (and min). Unrolled, the scales gathered in integers: with a
 * loop the vectors went through the stack and the first multiply waited
 * for the stores (a partial octet is a fifth of a k = 640 row). */
AI void unpack_q5(const uint8_t *row, int b0, int cnt, int q51, octet *o) {
    const int bs = q51 ? 24 : 22, qh_at = q51 ? 4 : 2;
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    uint64_t d[2] = {0, 0}, m[2] = {0, 0};
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        if (i >= cnt) { /* padding: zero integers and scales */
            o->qu[i] = _mm256_setzero_si256();
            continue;
        }
        const uint8_t *p = row + (size_t)(b0 + i) * bs;
        uint32_t qh;
        memcpy(&qh, p + qh_at, 4);
        __m128i v = _mm_loadu_si128((const __m128i *)(p + qh_at + 4));
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        o->qu[i] = _mm256_or_si256(q, _mm256_and_si256(bytes_from_bits(qh), b16));
        d[i / 4] |= (uint64_t)u16_at(p) << (16 * (i % 4));
        if (q51) m[i / 4] |= (uint64_t)u16_at(p + 2) << (16 * (i % 4));
    }
    o->dw0 = o->dw1 = _mm256_cvtph_ps(_mm_set_epi64x((long long)d[1], (long long)d[0]));
    o->mw = _mm256_cvtph_ps(_mm_set_epi64x((long long)m[1], (long long)m[0]));
}

/* The scales (and Q5_1's mins) of a packed Q5 octet (pack.c). */
AI void scales_q5_packed(const uint8_t *oct, int q51, octet *o) {
    o->dw0 = o->dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(oct + 160)));
    o->mw = q51 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(oct + 176))) : _mm256_setzero_ps();
}

/* A full Q5_0 / Q5_1 octet from b0 of a packed row (pack.c): 4-bit parts
 * two blocks per vector, the 5th bits as bit planes (bit i of byte e:
 * block i), scales contiguous. */
AI void unpack_q5_packed(const uint8_t *row, int b0, int q51, octet *o) {
    const uint8_t *oct = row + (size_t)b0 * (q51 ? 24 : 22);
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(oct + 128));
    /* bit i of each byte to bit 4 (16-bit shifts: the masked bit never
     * crosses into the other byte), made where used (fewer live registers) */
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(oct + 32 * p));
        const int i0 = 2 * p, i1 = 2 * p + 1;
        __m256i h0 = i0 < 4 ? _mm256_slli_epi16(hb, 4 - i0) : _mm256_srli_epi16(hb, i0 - 4);
        __m256i h1 = i1 < 4 ? _mm256_slli_epi16(hb, 4 - i1) : _mm256_srli_epi16(hb, i1 - 4);
        o->qu[i0] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(h0, b16));
        o->qu[i1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(h1, b16));
    }
    scales_q5_packed(oct, q51, o);
}

/* A packed last half octet (4 blocks from b0, pack.c): qs as a full
 * octet's first two vectors, the 5th bits of elements e and e + 16 in one
 * byte (bits i and 4 + i: the high 128-bit half takes them shifted by 4
 * more), 4 scales (and mins); blocks 4-7 zero. */
AI void unpack_q5_half_packed(const uint8_t *row, int b0, int q51, octet *o) {
    const uint8_t *oct = row + (size_t)b0 * (q51 ? 24 : 22);
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(oct + 64)));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* bit i (low half) or 4 + i (high) of each byte to bit 4 */
        const __m256i h = _mm256_blend_epi32(_mm256_slli_epi16(hb, 4 - i), _mm256_srli_epi16(hb, i), 0xF0);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(oct + 32 * (i / 2)));
        const __m256i nib = i % 2 ? _mm256_srli_epi16(v, 4) : v;
        o->qu[i] = _mm256_or_si256(_mm256_and_si256(nib, m4), _mm256_and_si256(h, b16));
        o->qu[4 + i] = _mm256_setzero_si256();
    }
    o->dw0 = o->dw1 = _mm256_cvtph_ps(_mm_loadl_epi64((const __m128i *)(oct + 80)));
    o->mw = q51 ? _mm256_cvtph_ps(_mm_loadl_epi64((const __m128i *)(oct + 88))) : _mm256_setzero_ps();
}

/* The half scales and mins of Q4_K / Q5_K superblock sb (octet o's dw0,
 * dw1, mw). */
AI void scales_k45(const uint8_t *sb, octet *o) {
    const uint8_t *q = sb + 4;
    /* ggml's get_scale_min_k4 for the 8 sub-blocks (kquant_ref.c) in one
     * vector (scalar stores read back as a vector stalled the loop: no
     * store forwarding): bytes 0-7 the scales, 8-15 the mins.
     *   sc[j] = q[j] & 63,  sc[j + 4] = (q[j + 8] & 15) | (q[j] >> 6) << 4
     *   mn[j] = q[j + 4] & 63,  mn[j + 4] = (q[j + 8] >> 4) | (q[j + 4] >> 6) << 4
     * (16 bytes read: the 12 scale bytes and 4 of qs after them) */
    const __m128i B = _mm_loadu_si128((const __m128i *)q);
    const __m128i A = _mm_shuffle_epi8(B, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i C = _mm_shuffle_epi8(B, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i hi4 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1);
    const __m128i A4 = _mm_blendv_epi8(A, _mm_srli_epi16(A, 4), hi4);
    const __m128i keep = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m128i R = _mm_or_si128(_mm_and_si128(A4, keep), _mm_and_si128(_mm_srli_epi16(C, 2), _mm_set1_epi8(0x30)));
    __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)u16_at(sb)));
    __m256 dmin = _mm256_cvtph_ps(_mm_set1_epi16((short)u16_at(sb + 2)));
    o->dw0 = o->dw1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(R)));
    __m256 mw = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(R, 8))));
    o->mw = _mm256_xor_ps(mw, _mm256_set1_ps(-0.0f)); /* -(dmin * m), exact */
}

/* Q4_K / Q5_K: superblock s is the octet from 8 s. */
AI void unpack_k45(const uint8_t *row, int s, int k5, octet *o) {
    const uint8_t *sb = row + (size_t)s * (k5 ? 176 : 144);
    const uint8_t *qs = sb + (k5 ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i qh = k5 ? _mm256_loadu_si256((const __m256i *)(sb + 16)) : _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (k5) { /* bit j of qh[l] is bit 4 of element l of sub-block j */
            const int j = 2 * p;
            __m256i bl = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), one);
            __m256i bh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j + 1)), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
        }
        o->qu[2 * p] = lo;
        o->qu[2 * p + 1] = hi;
    }
    scales_k45(sb, o);
}

/* The half scales of Q6_K superblock sb (octet o's dw0, dw1; mw zero). */
AI void scales_q6k(const uint8_t *sb, octet *o) {
    __m128i sc = _mm_loadu_si128((const __m128i *)(sb + 192));
    __m128i eo = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)u16_at(sb + 208)));
    o->dw0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eo)));
    o->dw1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(eo, 8))));
    o->mw = _mm256_setzero_ps();
}

/* Q6_K: superblock s is the octet from 8 s; sub-block j reads ql half
 * (j % 4 < 2: low nibbles) of ql[64 (j / 4) + 32 (j % 2)] and 2 bits of
 * qh[32 (j / 4)] at 2 (j % 4); its half scales are scales[2 j], [2 j + 1]. */
AI void unpack_q6k(const uint8_t *row, int s, octet *o) {
    const uint8_t *sb = row + (size_t)s * 210;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; n++) {
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)(sb + 64 * n));
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(sb + 64 * n + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * n));
        __m256i lo[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                         _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
        for (int r = 0; r < 4; r++) {
            __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * r)), m3);
            o->qu[4 * n + r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(hb, 4));
        }
    }
    scales_q6k(sb, o);
}

/* The octet from b0 (cnt blocks of the row there, <= 8) of a weight row;
 * packed: the row is kvs_wmat.packed's (Q5_0 / Q5_1 only), else GGUF's. */
AI void unpack_octet(int type, const uint8_t *row, int b0, int cnt, int packed, octet *o) {
    switch (type) {
    case KVS_TYPE_Q5_0:
    case KVS_TYPE_Q5_1:
        if (packed && cnt == 8) unpack_q5_packed(row, b0, type == KVS_TYPE_Q5_1, o);
        else if (packed && cnt == 4) unpack_q5_half_packed(row, b0, type == KVS_TYPE_Q5_1, o);
        else unpack_q5(row, b0, cnt, type == KVS_TYPE_Q5_1, o);
        break;
    case KVS_TYPE_Q4_K: unpack_k45(row, b0 / 8, 0, o); break;
    case KVS_TYPE_Q5_K: unpack_k45(row, b0 / 8, 1, o); break;
    default: unpack_q6k(row, b0 / 8, o); break;
    }
}

/* Quantized activations of one row, from the octet at b0 on (kquant.h). */
typedef struct xoct {
    const int8_t *q; /* block b0's hi */
    const float *dx, *sx;
    const int32_t *s0, *s1;
} xoct;

/* An octet's float steps, their operands made ahead (octet_ops_of,
 * octet_prep) and the steps taken on the accumulator in the reference's
 * order (octet_apply):
 *   A = fma(f0, p0, A); split: A = fma(f1, p1, A); min: A = fma(m, s, A). */
typedef struct octet_ops {
    __m256 f0, p0, f1, p1, m, s;
} octet_ops;

/* The activations' offsets of an octet (off_shift types: the half sums s0,
 * s1 times 2^off_shift; zero otherwise), subtracted from the integer sums. */
AI void octet_offsets(xoct x, kq_shape sh, __m256i *o0, __m256i *o1) {
    *o0 = *o1 = _mm256_setzero_si256();
    if (sh.off_shift) {
        const __m128i c = _mm_cvtsi32_si128(sh.off_shift);
        *o0 = _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)x.s0), c);
        *o1 = _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)x.s1), c);
    }
}

/* The operands from the integer half sums H0, H1, the offsets o0, o1, the
 * activations' dx and sx. Not split: one step on (H0 + H1) - (o0 + o1),
 * the same integer as (H0 - o0) + (H1 - o1) (exact), so a caller may hold
 * the whole in H0 with H1 zero. What the rows of a tile share (offsets, dx,
 * sx, o0 + o1) is the same value for each, made once when inlined. */
AI octet_ops octet_ops_of(const octet *w, __m256i H0, __m256i H1, __m256i o0, __m256i o1, __m256 dx, __m256 sx,
                          kq_shape sh) {
    octet_ops op;
    if (sh.split) {
        op.f0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(H0, o0));
        op.p0 = _mm256_mul_ps(w->dw0, dx);
        op.f1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(H1, o1));
        op.p1 = _mm256_mul_ps(w->dw1, dx);
    } else {
        op.f0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_add_epi32(H0, H1), _mm256_add_epi32(o0, o1)));
        op.p0 = _mm256_mul_ps(w->dw0, dx);
        op.f1 = op.p1 = _mm256_setzero_ps();
    }
    op.m = sh.has_min ? w->mw : _mm256_setzero_ps();
    op.s = sh.has_min ? sx : _mm256_setzero_ps();
    return op;
}

/* octet_ops_of with the row's activations read from x. */
AI octet_ops octet_prep(const octet *w, __m256i H0, __m256i H1, xoct x, kq_shape sh) {
    __m256i o0, o1;
    octet_offsets(x, sh, &o0, &o1);
    return octet_ops_of(w, H0, H1, o0, o1, _mm256_loadu_ps(x.dx),
                        sh.has_min ? _mm256_loadu_ps(x.sx) : _mm256_setzero_ps(), sh);
}

AI __m256 octet_apply(__m256 A, const octet_ops *op, kq_shape sh) {
    A = _mm256_fmadd_ps(op->f0, op->p0, A);
    if (sh.split) A = _mm256_fmadd_ps(op->f1, op->p1, A);
    if (sh.has_min) A = _mm256_fmadd_ps(op->m, op->s, A);
    return A;
}

/* Block c of four rows side by side: out[c] lane q = lane c of v[q], for
 * blocks c < cnt (two 4x4 transposes, the second only past 4 blocks). */
AI void rows4_blocks(const __m256 v[4], int cnt, __m128 out[8]) {
    for (int h = 0; 4 * h < cnt; h++) {
        __m128 r0 = h ? _mm256_extractf128_ps(v[0], 1) : _mm256_castps256_ps128(v[0]);
        __m128 r1 = h ? _mm256_extractf128_ps(v[1], 1) : _mm256_castps256_ps128(v[1]);
        __m128 r2 = h ? _mm256_extractf128_ps(v[2], 1) : _mm256_castps256_ps128(v[2]);
        __m128 r3 = h ? _mm256_extractf128_ps(v[3], 1) : _mm256_castps256_ps128(v[3]);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        out[4 * h] = r0;
        out[4 * h + 1] = r1;
        out[4 * h + 2] = r2;
        out[4 * h + 3] = r3;
    }
}

/* A tail octet's steps (kquant.h: after the tree, in block order) on four
 * rows' outputs y (lane q = row q), from the rows' operands op[q] in lanes
 * = blocks (cnt of them). */
AI __m128 tail_steps4(__m128 y, const octet_ops op[4], int cnt, kq_shape sh) {
    __m128 f0[8], p0[8], f1[8], p1[8], m[8], s[8];
    {
        const __m256 a[4] = {op[0].f0, op[1].f0, op[2].f0, op[3].f0}, b[4] = {op[0].p0, op[1].p0, op[2].p0, op[3].p0};
        rows4_blocks(a, cnt, f0);
        rows4_blocks(b, cnt, p0);
    }
    if (sh.split) {
        const __m256 a[4] = {op[0].f1, op[1].f1, op[2].f1, op[3].f1}, b[4] = {op[0].p1, op[1].p1, op[2].p1, op[3].p1};
        rows4_blocks(a, cnt, f1);
        rows4_blocks(b, cnt, p1);
    }
    if (sh.has_min) {
        const __m256 a[4] = {op[0].m, op[1].m, op[2].m, op[3].m}, b[4] = {op[0].s, op[1].s, op[2].s, op[3].s};
        rows4_blocks(a, cnt, m);
        rows4_blocks(b, cnt, s);
    }
    for (int c = 0; c < cnt; c++) {
        y = _mm_fmadd_ps(f0[c], p0[c], y);
        if (sh.split) y = _mm_fmadd_ps(f1[c], p1[c], y);
        if (sh.has_min) y = _mm_fmadd_ps(m[c], s[c], y);
    }
    return y;
}

/* The layout of AVX-512's decode (one activation row, or rows too long for
 * its batch path): per octet of 8 blocks 4 pairs of blocks, (0, 2), (1, 3),
 * (4, 6), (5, 7), the order the packed Q5 and Q4_K nibbles come in, each
 * pair a 64-byte hi vector (block a's 32 bytes, then block b's) and then a
 * lo vector: block l's hi at kq_pair_at(l) in the octet, its lo 64 bytes
 * further. */
#define KQ_PAIRS 2
static inline size_t kq_pair_at(int l) { return (size_t)(128 * ((l / 4) * 2 + l % 2) + 32 * ((l / 2) % 2)); }

/* kvs_kq_quantize_row with the vector block quantizer, in the order an
 * ISA's kernels read. lanes 0 (one row; rows too long for a batch path):
 * natural order, the reference's bytes; KQ_PAIRS: AVX-512's decode order.
 * lanes 8 (AVX2's batch path): per octet of blocks from g0, a hi plane of
 * 8 vectors of 32 bytes (vector r, lane l: elements 4r..4r+3 of block g0 +
 * l), then the lo plane; the same values and scales in another order.
 * Lanes past the row are zero, except in a last octet whose blocks fit a
 * span of 4 lanes (kq_tail_span, merge_tails): there lane l holds lane l %
 * span, integers and trailer. (AVX-512's batch layout, the same with 16
 * lanes, is kquant_avx512.c's quantize_hexas.) */
AI void kq_quantize_lanes(const float *x, int k, uint8_t *xrow, int lanes) {
    const int nb = k / 32, nbp = kvs_kq_nbp(k);
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xrow, k);
    memset(tr.dx, 0, (size_t)nbp * 16);
    int g0 = 0;
    for (; g0 < nb; g0 += 8) {
        const int cnt = nb - g0 < 8 ? nb - g0 : 8, span = lanes == 8 ? kq_tail_span(cnt, 8) : 8;
        uint8_t *base = xrow + (size_t)g0 * 64;
        __m256i hi[8], lo[8];
        for (int l = 0; l < 8; l++) {
            const int b = g0 + l, src = l % span;
            if (src >= cnt) {
                hi[l] = lo[l] = _mm256_setzero_si256();
                continue;
            }
            int32_t s[2];
            const float d = kvs_avx2_quantize_block(x + (size_t)(g0 + src) * 32, &hi[l], &lo[l], s);
            tr.dx[b] = d * (1.0f / 256.0f);
            tr.sx[b] = tr.dx[b] * (float)(int32_t)((uint32_t)s[0] + (uint32_t)s[1]);
            tr.s0[b] = s[0];
            tr.s1[b] = s[1];
        }
        if (lanes < 8) { /* natural order, or KQ_PAIRS */
            for (int l = 0; l < 8; l++) {
                const size_t at = lanes ? kq_pair_at(l) : (size_t)l * 64;
                _mm256_storeu_si256((__m256i *)(base + at), hi[l]);
                _mm256_storeu_si256((__m256i *)(base + at + (lanes ? 64 : 32)), lo[l]);
            }
            continue;
        }
        __m256i t[8];
        transpose8_epi32(hi, t);
        for (int r = 0; r < 8; r++) _mm256_storeu_si256((__m256i *)(base + (size_t)r * 32), t[r]);
        transpose8_epi32(lo, t);
        for (int r = 0; r < 8; r++) _mm256_storeu_si256((__m256i *)(base + (size_t)(32 + 4 * r) * 8), t[r]);
    }
    memset(xrow + (size_t)g0 * 64, 0, (size_t)(nbp - g0) * 64); /* the octets no kernel reads */
}

/* One ISA's kernels of one type: decode (one activation row at a time) and
 * the batch path (several rows in the ISA's lane layout). */
typedef struct kq_type_fns {
    int type;
    void (*decode)(const kvs_wmat *w, const uint8_t *xq, float *y, int j0, int j1);
    void (*batch)(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, int j0,
                  int j1);
} kq_type_fns;

/* An ISA's dot_cols over its table fns[0..n): several rows in the lane
 * layout (kq_lanes) go to the type's batch path, else each row to decode. */
static inline void kq_route(const kq_type_fns *fns, size_t n, const kvs_wmat *w, const uint8_t *xq, size_t xq_row,
                            int m, const uint8_t *xt, float *y, int j0, int j1) {
    for (size_t t = 0; t < n; t++)
        if (fns[t].type == w->type) {
            if (kq_lanes(w->k, m)) fns[t].batch(w, xq, xq_row, m, xt, y, j0, j1);
            else
                for (int i = 0; i < m; i++) fns[t].decode(w, xq + (size_t)i * xq_row, y + (size_t)i * w->n, j0, j1);
            return;
        }
    kvs_kq_isa_scalar.dot_cols(w, xq, xq_row, m, xt, y, j0, j1); /* (kvs_kq_handles: not reached) */
}

/* Decode streams the weights once: every other row, the two rows `ahead`
 * rows further are fetched (row j of [j0, n), row_bytes apart). */
AI void kq_prefetch_rows(const uint8_t *row, size_t row_bytes, int j, int j0, int n, int ahead, int to_l2) {
    if ((j - j0) % 2 == 0 && j + ahead + 1 < n) {
        const uint8_t *pf = row + (size_t)ahead * row_bytes;
        for (size_t o = 0; o < 2 * row_bytes; o += 64) {
            if (to_l2) _mm_prefetch((const char *)pf + o, _MM_HINT_T1);
            else _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
        }
    }
}
AI void kq_prefetch_ahead(const uint8_t *row, size_t row_bytes, int j, int j0, int n, int ahead) {
    kq_prefetch_rows(row, row_bytes, j, j0, n, ahead, 0);
}
/* Weights that stream from DRAM (kvs_wmat.far_rows): the same far ahead, into L2. */
AI void kq_prefetch_far(const uint8_t *row, size_t row_bytes, int j, int j0, int n, int far_rows) {
    kq_prefetch_rows(row, row_bytes, j, j0, n, far_rows, 1);
}

/* Weight rows the batch paths fetch ahead (kq_prefetch_ahead) on a call of
 * one pass of activation rows (a server step), which streams them. */
#define KQ_PF_ROWS 8

/* Each type's shape: X(name, type, offset shift, split scales, min, int16
 * depth), the fields of kq_shape. */
#define KQ_SHAPES(X)                                                                                                   \
    X(q5_0, KVS_TYPE_Q5_0, 4, 0, 0, 4)                                                                                 \
    X(q5_1, KVS_TYPE_Q5_1, 0, 0, 1, 4)                                                                                 \
    X(q4_k, KVS_TYPE_Q4_K, 0, 0, 1, 8)                                                                                 \
    X(q5_k, KVS_TYPE_Q5_K, 0, 0, 1, 4)                                                                                 \
    X(q6_k, KVS_TYPE_Q6_K, 5, 1, 0, 2)

/* The batch path of each type (kquant_avx2_batch.c): y rows [0, m) x
 * columns [j0, j1) on activation rows in the lane layout. */
#define KQ_BATCH_DECL(name, ...)                                                                                       \
    void kvs_kq_avx2_batch_##name(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt,        \
                                  float *y, int j0, int j1);
KQ_SHAPES(KQ_BATCH_DECL)
#undef KQ_BATCH_DECL

/* What an ISA file of these kernels defines from its decode_cols and batch
 * functions (named by its KQ_BATCH_NAME(name)): one decode function per
 * type, compiled on its own with the type's constants (in one function of
 * every instance, the accumulators lived on the stack), the table of its
 * types and its dot_cols (kq_route). */
#define KQ_DECODE_FN(name, ...)                                                                                        \
    static __attribute__((noinline)) void decode_##name(const kvs_wmat *w, const uint8_t *xq, float *y, int j0,        \
                                                        int j1) {                                                      \
        decode_cols(w, xq, y, j0, j1, (kq_shape){__VA_ARGS__});                                                        \
    }
#define KQ_BATCH_FN(name, ...)                                                                                         \
    void KQ_BATCH_NAME(name)(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, \
                             int j0, int j1) {                                                                         \
        batch_cols(w, xq, xq_row, m, xt, y, j0, j1, (kq_shape){__VA_ARGS__});                                          \
    }
#define KQ_TYPE_ROW(name, type, ...) {type, decode_##name, KQ_BATCH_NAME(name)},
#define KQ_ISA_DOT_COLS(fn)                                                                                            \
    static const kq_type_fns k_type_fns[] = {KQ_SHAPES(KQ_TYPE_ROW)};                                                  \
    static void fn(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, int j0,    \
                   int j1) {                                                                                           \
        kq_route(k_type_fns, sizeof k_type_fns / sizeof k_type_fns[0], w, xq, xq_row, m, xt, y, j0, j1);               \
    }

/* tile_sums widens after every depth results: depth divides the 8 vectors
 * of an octet, and split scales keep the halves (4 vectors each) apart. */
#define KQ_SHAPE_CHECK(name, type, off, split, min, depth)                                                             \
    _Static_assert(8 % (depth) == 0 && (!(split) || (depth) <= 4), #name ": int16 depth must divide the octet");
KQ_SHAPES(KQ_SHAPE_CHECK)
#undef KQ_SHAPE_CHECK

#endif
