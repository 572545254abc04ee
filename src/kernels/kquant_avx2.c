/*
 * AVX2 dot products for Q5_0 / Q5_1 / K-quant weights: the canonical
 * arithmetic of kquant.h bit for bit.
 *
 * Lanes are blocks. Blocks are taken by octets (8 consecutive blocks, b0 a
 * multiple of 8), so lane l of a float vector is block b0 + l and its chain
 * c = b % 16 is lane l of the low (b0 % 16 == 0) or the high accumulator:
 * the reference's 16 chains are two registers and every float step of eight
 * blocks is one vector instruction in the reference's order.
 *
 * A weight octet is unpacked (unpack_octet) into unsigned integers qu =
 * q_w + off (0..63, off 16 for Q5_0, 32 for Q6_K, else 0) and per-block
 * float scales, zero past the row. With several activation rows (the
 * server's batch, prefill) pairs of weight rows are unpacked once into
 * buffers, a group of pairs at a time, and every activation row meets the
 * group (batch_cols); in decode each octet goes from memory to registers
 * and is used at once. The dot loop is the same for every type:
 *
 *   block dot: vpmaddubsw(qu, hi) and (qu, lo) (pairs <= 2 * 63 * 127: no
 *   saturation), widened by vpmaddwd with 256 and 1: lanes 0-3 hold half 0,
 *   lanes 4-7 half 1; three rounds of vphaddd over the octet's 8 block
 *   vectors leave each block's half sums in one lane; the offset comes off
 *   exactly as off * (sum of Q over the half), which the quantized row
 *   carries (kquant.h). Integers are exact, so only the float steps are
 *   ordered, and they are the reference's.
 *
 * With several activation rows two weight rows are computed together (two
 * independent chains); decode takes one row at a time (two rows' unpacked
 * octets and accumulators did not fit the 16 registers: the accumulators
 * went to the stack). Decode and batch loops are compiled per type as
 * functions of their own (k_type_fns).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <string.h>

#include "kernels/kquant.h"
#include "kernels/quant_avx2.h"

/* Octets a row may have for the unpacked buffers on the stack (k <= 32768
 * elements: 2 rows x 128 octets x 352 bytes = 88 KiB); longer rows take
 * the scalar reference. */
#define MAX_OCTETS 128
#define PF_ROWS 4 /* weight rows prefetched ahead in decode */

/* One octet of a weight row, unpacked: unsigned integers of blocks b0..b0+7
 * (zero past the row), their half scales and mins (zero past the row). */
typedef struct octet {
    __m256i qu[8];
    __m256 dw0, dw1, mw;
} octet;

/* Per-type constants of the dot loop (avx2_dot_cols passes them as
 * literals so that each type's loop is compiled without the others'
 * branches; kvs_kq_split_scales / kvs_kq_has_min say the same). */
typedef struct kq_shape {
    int type;
    int off_shift; /* off = 1 << off_shift, 0: no offset (off 0) */
    int split;     /* Q6_K: a scale per half */
    int has_min;   /* Q5_1, Q4_K, Q5_K */
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
    o->dw0 = o->dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(oct + 160)));
    o->mw = q51 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(oct + 176))) : _mm256_setzero_ps();
}

/* Q4_K / Q5_K: superblock s is the octet from 8 s. */
AI void unpack_k45(const uint8_t *row, int s, int k5, octet *o) {
    const uint8_t *sb = row + (size_t)s * (k5 ? 176 : 144), *q = sb + 4;
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
    __m128i sc = _mm_loadu_si128((const __m128i *)(sb + 192));
    __m128i eo = _mm_shuffle_epi8(sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)u16_at(sb + 208)));
    o->dw0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eo)));
    o->dw1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(eo, 8))));
    o->mw = _mm256_setzero_ps();
}

/* The octet from b0 (cnt blocks of the row there, <= 8) of a weight row;
 * packed: the row is kvs_wmat.packed's (Q5_0 / Q5_1 only), else GGUF's. */
AI void unpack_octet(int type, const uint8_t *row, int b0, int cnt, int packed, octet *o) {
    switch (type) {
    case KVS_TYPE_Q5_0:
    case KVS_TYPE_Q5_1:
        if (packed && cnt == 8) unpack_q5_packed(row, b0, type == KVS_TYPE_Q5_1, o);
        else unpack_q5(row, b0, cnt, type == KVS_TYPE_Q5_1, o);
        break;
    case KVS_TYPE_Q4_K: unpack_k45(row, b0 / 8, 0, o); break;
    case KVS_TYPE_Q5_K: unpack_k45(row, b0 / 8, 1, o); break;
    default: unpack_q6k(row, b0 / 8, o); break;
    }
}

/* 256 dot(qu, hi) + dot(qu, lo) of one block: half 0 in lanes 0-3, half 1 in 4-7. */
AI __m256i block_dot(__m256i w, const int8_t *x) {
    const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256i h = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)x));
    __m256i l = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(x + 32)));
    return _mm256_add_epi32(_mm256_madd_epi16(h, c256), _mm256_madd_epi16(l, ones));
}

/* Quantized activations of one row, from the octet at b0 on (kquant.h). */
typedef struct xoct {
    const int8_t *q; /* block b0's hi */
    const float *dx, *sx;
    const int32_t *s0, *s1;
} xoct;

/* Half sums of the octet's cnt blocks: H0 lane l = half 0 of block b0 + l,
 * H1 half 1 (lanes >= cnt: 0). */
AI void octet_sums(const octet *w, int cnt, const int8_t *xq, __m256i *H0, __m256i *H1) {
    /* each pair of block sums added as soon as it is made (fewer live
     * registers than all eight first), then hsum8_pairs */
    __m256i p[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m256i v0 = 2 * i < cnt ? block_dot(w->qu[2 * i], xq + (size_t)(2 * i) * 64) : _mm256_setzero_si256();
        __m256i v1 = 2 * i + 1 < cnt ? block_dot(w->qu[2 * i + 1], xq + (size_t)(2 * i + 1) * 64) : _mm256_setzero_si256();
        p[i] = _mm256_hadd_epi32(v0, v1);
    }
    hsum8_pairs(p, H0, H1);
}

/* octet_sums on the lane layout (several activation rows): the weight
 * octet transposed (transpose8_epi32: a vector per block becomes a lane per
 * block), the activations likewise (the quantizer's lane layout: hi plane
 * vec r at xo + 32 r, lo plane at xo + 256 + 32 r).
 * Lane l accumulates block l directly: two vpmaddubsw per plane summed in
 * int16 (pairs <= 2 * 63 * 127, two of them <= 32004), widened once; no
 * horizontal step. */
AI void octet_sums_lanes(const octet *wt, const int8_t *xo, __m256i *H0, __m256i *H1) {
    const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256i H[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const int r = 4 * h + 2 * p;
            const int8_t *xh = xo + 32 * r, *xl = xh + 256;
            __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(wt->qu[r], _mm256_loadu_si256((const __m256i *)xh)),
                                          _mm256_maddubs_epi16(wt->qu[r + 1], _mm256_loadu_si256((const __m256i *)(xh + 32))));
            __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(wt->qu[r], _mm256_loadu_si256((const __m256i *)xl)),
                                          _mm256_maddubs_epi16(wt->qu[r + 1], _mm256_loadu_si256((const __m256i *)(xl + 32))));
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(ph, c256), _mm256_madd_epi16(pl, ones)));
        }
        H[h] = acc;
    }
    *H0 = H[0];
    *H1 = H[1];
}

/* An octet's float steps, their operands made ahead (octet_prep) and the
 * steps taken on the accumulator in the reference's order (octet_apply):
 *   A = fma(f0, p0, A); split: A = fma(f1, p1, A); min: A = fma(m, s, A). */
typedef struct octet_ops {
    __m256 f0, p0, f1, p1, m, s;
} octet_ops;

AI octet_ops octet_prep(const octet *w, __m256i H0, __m256i H1, xoct x, kq_shape sh) {
    octet_ops op;
    if (sh.off_shift) {
        const __m128i c = _mm_cvtsi32_si128(sh.off_shift);
        H0 = _mm256_sub_epi32(H0, _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)x.s0), c));
        H1 = _mm256_sub_epi32(H1, _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)x.s1), c));
    }
    __m256 dxv = _mm256_loadu_ps(x.dx);
    if (sh.split) {
        op.f0 = _mm256_cvtepi32_ps(H0);
        op.p0 = _mm256_mul_ps(w->dw0, dxv);
        op.f1 = _mm256_cvtepi32_ps(H1);
        op.p1 = _mm256_mul_ps(w->dw1, dxv);
    } else {
        op.f0 = _mm256_cvtepi32_ps(_mm256_add_epi32(H0, H1));
        op.p0 = _mm256_mul_ps(w->dw0, dxv);
        op.f1 = op.p1 = _mm256_setzero_ps();
    }
    op.m = sh.has_min ? w->mw : _mm256_setzero_ps();
    op.s = sh.has_min ? _mm256_loadu_ps(x.sx) : _mm256_setzero_ps();
    return op;
}

/* The operands of lanes 4-7 in lanes 0-3 (a merged tail's second row). */
AI octet_ops octet_ops_high(const octet_ops *op) {
    octet_ops h;
    h.f0 = _mm256_permute2f128_ps(op->f0, op->f0, 0x01);
    h.p0 = _mm256_permute2f128_ps(op->p0, op->p0, 0x01);
    h.f1 = _mm256_permute2f128_ps(op->f1, op->f1, 0x01);
    h.p1 = _mm256_permute2f128_ps(op->p1, op->p1, 0x01);
    h.m = _mm256_permute2f128_ps(op->m, op->m, 0x01);
    h.s = _mm256_permute2f128_ps(op->s, op->s, 0x01);
    return h;
}

AI __m256 octet_apply(__m256 A, const octet_ops *op, kq_shape sh) {
    A = _mm256_fmadd_ps(op->f0, op->p0, A);
    if (sh.split) A = _mm256_fmadd_ps(op->f1, op->p1, A);
    if (sh.has_min) A = _mm256_fmadd_ps(op->m, op->s, A);
    return A;
}

/* Where the octets of a pair of weight rows come from: unpacked buffers
 * (calls of several activation rows: unpacked once, met by every row), or
 * the rows themselves, unpacked on the way (decode: each octet is used
 * once, so it goes from memory to registers without a buffer). */
typedef struct wsrc {
    int direct;            /* 1: unpack from the rows (a constant at every call: two loops) */
    const octet *buf[2];   /* the buffers (direct 0) */
    const uint8_t *row[2]; /* the weight rows, GGUF or packed (direct 1) */
    int packed;
} wsrc;

AI const octet *octet_of(const wsrc *src, int r, int o, int cnt, kq_shape sh, octet *tmp) {
    if (!src->direct) return &src->buf[r][o];
    unpack_octet(sh.type, src->row[r], 8 * o, cnt, src->packed, tmp);
    return tmp;
}

/* Weight row r's octet o: its float steps' operands. */
AI octet_ops octet_step(const wsrc *src, int r, int o, int cnt, xoct x, kq_shape sh) {
    octet t;
    __m256i H0, H1;
    const octet *w = octet_of(src, r, o, cnt, sh, &t);
    if (src->direct) octet_sums(w, cnt, x.q, &H0, &H1);
    else octet_sums_lanes(w, x.q, &H0, &H1); /* buffers hold transposed octets, x the lane layout */
    return octet_prep(w, H0, H1, x, sh);
}

/* Octet o (cnt blocks) of nr (1 or 2, a constant) weight rows: the
 * operands of their float steps (ops[r]); xr: the activation row, tr its
 * trailer. */
AI void octet_rows(const wsrc *src, int nr, int o, int cnt, const uint8_t *xr, const kvs_kq_trailer *tr, kq_shape sh,
                   octet_ops *ops) {
    const int b0 = 8 * o;
    const xoct x = {(const int8_t *)xr + (size_t)b0 * 64, tr->dx + b0, tr->sx + b0, tr->s0 + b0, tr->s1 + b0};
    ops[0] = octet_step(src, 0, o, cnt, x, sh);
    if (nr > 1) ops[1] = octet_step(src, 1, o, cnt, x, sh);
}

/* The steps of ops onto the accumulators a (row 0) and b (row 1); a
 * partial octet (cnt < 8, Q5_0 / Q5_1) leaves lanes past the row as they
 * were. (No arrays indexed by row for the accumulators: the compiler kept
 * those on the stack.) */
AI void octet_apply_rows(int nr, int cnt, const octet_ops *ops, kq_shape sh, __m256 *a, __m256 *b) {
    __m256 na = octet_apply(*a, &ops[0], sh);
    __m256 nb_ = nr > 1 ? octet_apply(*b, &ops[1], sh) : *b;
    if (cnt < 8) {
        const __m256 keep = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(cnt - 1)));
        na = _mm256_blendv_ps(na, *a, keep);
        nb_ = _mm256_blendv_ps(nb_, *b, keep);
    }
    *a = na;
    *b = nb_;
}

/* y[r] = weight row r . one quantized activation row xr, for nr (1 or 2, a
 * constant) rows. Octets alternate between the low (chains 0-7) and high
 * (8-15) accumulators; the loop takes them by twos so the accumulators stay
 * in registers. The octets after the loop (an odd one, a partial one) are
 * computed first and their float steps taken last, in order: computed
 * last, their latency was the call's (k = 640: 2 octets in the loop and a
 * partial one cost as much as 3 + 1). */
AI void dot_rows(const wsrc *src, int nr, const uint8_t *xr, int nb, kq_shape sh, float *y) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xr, 32 * nb);
    const int nfull = nb / 8, no = (nb + 7) / 8, first_late = nfull & ~1;
    octet_ops late[2][2];
    for (int o = first_late; o < no; o++) {
        const int cnt = nb - 8 * o < 8 ? nb - 8 * o : 8;
        if (nr > 1 && !src->direct && cnt <= 4) { /* buffers: both rows in one octet (merge_tails) */
            octet_rows(src, 1, o, cnt, xr, &tr, sh, late[o - first_late]);
            late[o - first_late][1] = octet_ops_high(&late[o - first_late][0]);
        } else {
            octet_rows(src, nr, o, cnt, xr, &tr, sh, late[o - first_late]);
        }
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    for (int o = 0; o < first_late; o += 2) {
        octet_ops ops[2];
        octet_rows(src, nr, o, 8, xr, &tr, sh, ops);
        octet_apply_rows(nr, 8, ops, sh, &a0, &b0);
        octet_rows(src, nr, o + 1, 8, xr, &tr, sh, ops);
        octet_apply_rows(nr, 8, ops, sh, &a1, &b1);
    }
    for (int o = first_late; o < no; o++) { /* at most 2: chains 0-7, then 8-15 */
        const int cnt = nb - 8 * o < 8 ? nb - 8 * o : 8;
        if (o == first_late) octet_apply_rows(nr, cnt, late[0], sh, &a0, &b0);
        else octet_apply_rows(nr, cnt, late[1], sh, &a1, &b1);
    }
    y[0] = tree16_2(a0, a1);
    if (nr > 1) y[1] = tree16_2(b0, b1);
}

/* Decode (one activation row): columns [j0, j1), a weight row at a time,
 * each octet unpacked into registers on the way. */
AI void decode_cols(const kvs_wmat *w, const uint8_t *xq, float *y, int j0, int j1, kq_shape sh) {
    const int nb = w->k / 32, packed = w->packed != NULL;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    for (int j = j0; j < j1; j++) {
        const uint8_t *ra = base + (size_t)j * w->row_bytes;
        if ((j - j0) % 2 == 0 && j + PF_ROWS + 1 < w->n) { /* decode streams the weights once: fetch ahead */
            const uint8_t *pf = ra + PF_ROWS * w->row_bytes;
            for (size_t o = 0; o < 2 * w->row_bytes; o += 64) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
        }
        const wsrc src = {.direct = 1, .row = {ra, ra}, .packed = packed};
        dot_rows(&src, 1, xq, nb, sh, &y[j]);
    }
}

/* A pair's partial last octets of <= 4 blocks (lanes 0-3 of each, the lane
 * layout) as one: a's blocks in lanes 0-3, b's in 4-7. The quantizer copies
 * such an octet's activation lanes 0-3 into 4-7 (avx2_quantize_row), so one
 * octet of integer work gives both rows' sums (Q5_0 at k = 640: 2 full
 * octets and 4 blocks, 2.5 octets of work instead of 3). */
AI void merge_tails(octet *a, const octet *b) {
    for (int r = 0; r < 8; r++)
        a->qu[r] = _mm256_blend_epi32(a->qu[r], _mm256_permute2x128_si256(b->qu[r], b->qu[r], 0x00), 0xF0);
    a->dw0 = _mm256_blend_ps(a->dw0, _mm256_permute2f128_ps(b->dw0, b->dw0, 0x00), 0xF0);
    a->dw1 = _mm256_blend_ps(a->dw1, _mm256_permute2f128_ps(b->dw1, b->dw1, 0x00), 0xF0);
    a->mw = _mm256_blend_ps(a->mw, _mm256_permute2f128_ps(b->mw, b->mw, 0x00), 0xF0);
}

/* Unpacks and transposes weight rows ra and ra + row_bytes (pair 0: ra
 * alone, the odd last row) into bufa / bufb, no octets each. */
AI void unpack_pair(const uint8_t *ra, size_t row_bytes, int nb, int pair, int packed, kq_shape sh, octet *bufa,
                    octet *bufb) {
    const int no = (nb + 7) / 8;
    for (int o = 0; o < no; o++) {
        const int cnt = nb - 8 * o < 8 ? nb - 8 * o : 8;
        octet t;
        unpack_octet(sh.type, ra, 8 * o, cnt, packed, &t);
        bufa[o] = t;
        transpose8_epi32(t.qu, bufa[o].qu);
        if (pair) {
            unpack_octet(sh.type, ra + row_bytes, 8 * o, cnt, packed, &t);
            bufb[o] = t;
            transpose8_epi32(t.qu, bufb[o].qu);
        }
    }
    if (nb % 8 > 0 && nb % 8 <= 4) merge_tails(&bufa[no - 1], pair ? &bufb[no - 1] : &bufa[no - 1]);
}

/* Several activation rows: columns [j0, j1), two weight rows at a time
 * (an odd last row is computed twice and stored once), unpacked and
 * transposed once into L1/L2 buffers and met by every activation row.
 * Pairs are taken by groups (as many as BATCH_OCTETS holds, up to the whole
 * chunk) and each activation row meets the whole group before the next: a
 * pair at a time, prefill's 512 rows (~850 KB at k = 640) came from L3 once
 * per pair, the loop waited on them (20% of the Q5_0 time). */
#define BATCH_OCTETS (2 * MAX_OCTETS)
#define MAX_GROUP 16 /* pairs */
AI void batch_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, float *y, int j0, int j1, kq_shape sh) {
    octet buf[BATCH_OCTETS];
    const int nb = w->k / 32, no = (nb + 7) / 8;
    const int packed = w->packed != NULL;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    int group = BATCH_OCTETS / (2 * no);
    if (group > MAX_GROUP) group = MAX_GROUP;
    for (int g0 = j0; g0 < j1; g0 += 2 * group) {
        const int g1 = g0 + 2 * group < j1 ? g0 + 2 * group : j1, np = (g1 - g0 + 1) / 2;
        for (int p = 0; p < np; p++) {
            const int j = g0 + 2 * p;
            octet *a = buf + (size_t)2 * p * no;
            unpack_pair(base + (size_t)j * w->row_bytes, w->row_bytes, nb, j + 1 < g1, packed, sh, a, a + no);
        }
        for (int i = 0; i < m; i++) {
            const uint8_t *xr = xq + (size_t)i * xq_row;
            float *yi = y + (size_t)i * w->n;
            for (int p = 0; p < np; p++) {
                const int j = g0 + 2 * p;
                const octet *a = buf + (size_t)2 * p * no;
                const wsrc src = {.direct = 0, .buf = {a, j + 1 < g1 ? a + no : a}};
                float yy[2];
                dot_rows(&src, 2, xr, nb, sh, yy);
                yi[j] = yy[0];
                if (j + 1 < g1) yi[j + 1] = yy[1];
            }
        }
    }
}

/* One decode and one batch function per type, each compiled on its own with
 * the type's constants {type, offset shift, split scales, min} (in one
 * function of every instance, the accumulators lived on the stack). */
#define KQ_TYPE_FNS(name, ...)                                                                                    \
    static __attribute__((noinline)) void decode_##name(const kvs_wmat *w, const uint8_t *xq, float *y, int j0,  \
                                                        int j1) {                                                 \
        decode_cols(w, xq, y, j0, j1, (kq_shape){__VA_ARGS__});                                                   \
    }                                                                                                             \
    static __attribute__((noinline)) void batch_##name(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, \
                                                       float *y, int j0, int j1) {                                \
        batch_cols(w, xq, xq_row, m, y, j0, j1, (kq_shape){__VA_ARGS__});                                         \
    }
KQ_TYPE_FNS(q5_0, KVS_TYPE_Q5_0, 4, 0, 0)
KQ_TYPE_FNS(q5_1, KVS_TYPE_Q5_1, 0, 0, 1)
KQ_TYPE_FNS(q4_k, KVS_TYPE_Q4_K, 0, 0, 1)
KQ_TYPE_FNS(q5_k, KVS_TYPE_Q5_K, 0, 0, 1)
KQ_TYPE_FNS(q6_k, KVS_TYPE_Q6_K, 5, 1, 0)

static const struct {
    int type;
    void (*decode)(const kvs_wmat *w, const uint8_t *xq, float *y, int j0, int j1);
    void (*batch)(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, float *y, int j0, int j1);
} k_type_fns[] = {
    {KVS_TYPE_Q5_0, decode_q5_0, batch_q5_0}, {KVS_TYPE_Q5_1, decode_q5_1, batch_q5_1},
    {KVS_TYPE_Q4_K, decode_q4_k, batch_q4_k}, {KVS_TYPE_Q5_K, decode_q5_k, batch_q5_k},
    {KVS_TYPE_Q6_K, decode_q6_k, batch_q6_k},
};

static void avx2_dot_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, float *y, int j0, int j1) {
    for (size_t i = 0; (w->k / 32 + 7) / 8 <= MAX_OCTETS && i < sizeof k_type_fns / sizeof k_type_fns[0]; i++)
        if (k_type_fns[i].type == w->type) {
            if (m == 1) k_type_fns[i].decode(w, xq, y, j0, j1);
            else k_type_fns[i].batch(w, xq, xq_row, m, y, j0, j1);
            return;
        }
    kvs_kq_isa_scalar.dot_cols(w, xq, xq_row, m, y, j0, j1); /* rows too long for the buffers */
}

/* kvs_kq_quantize_row (kquant_ref.c) with the vector block quantizer. One
 * row (decode): blocks in natural order, as the reference's. Several rows:
 * the lane layout of octet_sums_lanes (per octet a hi plane of 8 vectors,
 * vector r lane l = elements 4r..4r+3 of block l, then the lo plane; blocks
 * past the row zero). The values are the same. */
static void avx2_quantize_row(const float *x, int k, uint8_t *xrow, int m) {
    const int nb = k / 32;
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xrow, k);
    float *dx = tr.dx, *sx = tr.sx;
    int32_t *s0 = tr.s0, *s1 = tr.s1;
    memset(dx, 0, (size_t)kvs_kq_nbp(k) * 16);
    for (int b0 = 0; b0 < nb; b0 += 8) {
        __m256i hi[8], lo[8];
        for (int l = 0; l < 8; l++) {
            const int b = b0 + l;
            if (b >= nb) {
                hi[l] = lo[l] = _mm256_setzero_si256();
                continue;
            }
            int32_t s[2];
            float d = kvs_avx2_quantize_block(x + (size_t)b * 32, &hi[l], &lo[l], s);
            dx[b] = d * (1.0f / 256.0f);
            sx[b] = dx[b] * (float)(int32_t)((uint32_t)s[0] + (uint32_t)s[1]);
            s0[b] = s[0];
            s1[b] = s[1];
        }
        __m256i *dst = (__m256i *)(xrow + (size_t)b0 * 64);
        if (m == 1) {
            for (int l = 0; l < 8; l++) {
                _mm256_storeu_si256(dst + 2 * l, hi[l]);
                _mm256_storeu_si256(dst + 2 * l + 1, lo[l]);
            }
            continue;
        }
        if (nb - b0 <= 4) { /* a partial octet of <= 4 blocks: lanes 4-7 copy 0-3 (merge_tails) */
            for (int l = 4; l < 4 + nb - b0; l++) {
                hi[l] = hi[l - 4];
                lo[l] = lo[l - 4];
                dx[b0 + l] = dx[b0 + l - 4];
                sx[b0 + l] = sx[b0 + l - 4];
                s0[b0 + l] = s0[b0 + l - 4];
                s1[b0 + l] = s1[b0 + l - 4];
            }
        }
        __m256i t[8];
        transpose8_epi32(hi, t);
        for (int r = 0; r < 8; r++) _mm256_storeu_si256(dst + r, t[r]);
        transpose8_epi32(lo, t);
        for (int r = 0; r < 8; r++) _mm256_storeu_si256(dst + 8 + r, t[r]);
    }
}

const kvs_kq_isa kvs_kq_isa_avx2 = {.name = "avx2", .dot_cols = avx2_dot_cols, .quantize_row = avx2_quantize_row};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
