/*
 * AVX-512 VNNI Q5_0 / Q5_1 / K-quant weights as block pairs: what the
 * decode (kquant_avx512.c) and the batch path (kquant_avx512_batch.c)
 * share. An octet of 8 blocks becomes 4 registers of pairs (0, 2), (1, 3),
 * (4, 6), (5, 7) (block a's 32 unsigned integers q_w + off in the low half,
 * b's in the high), the order in which packed Q5 and Q4_K / Q5_K nibble
 * planes come, so a 64-byte load, a mask and a shift give two pairs (the
 * 5th bits, Q6_K's planes: a shift per half). Decode meets them with the
 * activation row in the same pairs (KQ_PAIRS); the batch path turns them
 * into lanes = blocks. Include after an AVX-512 target pragma (avx512f, bw,
 * vl, dq, vnni, with avx2, fma, f16c).
 */
#ifndef KVS_KERNELS_KQUANT_AVX512_PAIRS_H
#define KVS_KERNELS_KQUANT_AVX512_PAIRS_H

#include "kernels/kquant_avx2_octet.h"

/* Octet o of a weight row as 4 vectors of block pairs (0, 2), (1, 3),
 * (4, 6), (5, 7) (KQ_PAIRS: block a's 32 unsigned integers in the low
 * half, b's in the high), and its scales (sc: dw0, dw1, mw in block
 * order). Full octets of packed Q5 rows and of Q4_K / Q5_K / Q6_K are
 * unpacked whole-register (the nibble planes already come in these pairs;
 * the 5th / 6th bits by a shift per half); Q5 blocks in GGUF layout (rows
 * not packed, a partial last octet) by unpack_q5_pairs. K-quant rows are
 * whole superblocks (a GGUF row of them is a multiple of 256 elements), so
 * their octets are always full. */

/* q with 16 added to the bytes whose 5th bit is set: bit ia of hb's byte
 * (hb broadcast to both halves) for the pair's block a (low half), bit ib
 * for block b (high half); a byte mask, no shifts. */
AI __m512i with_fifth_bits(__m512i q, __m512i hb, int ia, int ib) {
    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << ia)), _mm256_set1_epi8((char)(1 << ib)), 1);
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, sel), q, _mm512_set1_epi8(16));
}

/* The first block (a) of an octet's pair vector v (0..3): pairs (0, 2),
 * (1, 3), (4, 6), (5, 7). */
AI int pair_first_block(int v) { return (v / 2) * 4 + v % 2; }

/* Q5_0 / Q5_1 blocks in GGUF layout (cnt <= 8 from b0: those past a packed
 * row's last full octet, or a row not packed) as pairs: each block's 16 qs
 * bytes twice (low nibbles: elements 0-15, high: 16-31), its 32 5th bits a
 * byte mask; the scales gathered in integers (as unpack_q5). */
AI void unpack_q5_pairs(const uint8_t *row, int b0, int cnt, int q51, __m512i W[4], octet *sc) {
    const int bs = q51 ? 24 : 22, qh_at = q51 ? 4 : 2;
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const __m512i nib_shift = _mm512_setr_epi32(0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004,
                                                0x40004, 0x40004, 0x40004); /* chunks 1, 3: high nibbles */
    uint64_t d[2] = {0, 0}, m[2] = {0, 0};
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const int a = pair_first_block(v), b = a + 2;
        if (a >= cnt) {
            W[v] = _mm512_setzero_si512();
            continue;
        }
        const uint8_t *pa = row + (size_t)(b0 + a) * bs, *pb = row + (size_t)(b0 + b) * bs;
        const __m128i qa = _mm_loadu_si128((const __m128i *)(pa + qh_at + 4));
        const __m128i qb = b < cnt ? _mm_loadu_si128((const __m128i *)(pb + qh_at + 4)) : _mm_setzero_si128();
        uint32_t ha, hb = 0;
        memcpy(&ha, pa + qh_at, 4);
        if (b < cnt) memcpy(&hb, pb + qh_at, 4);
        __m512i z = _mm512_inserti32x4(_mm512_castsi128_si512(qa), qa, 1);
        z = _mm512_inserti32x4(_mm512_inserti32x4(z, qb, 2), qb, 3);
        z = _mm512_and_si512(_mm512_srlv_epi16(z, nib_shift), m4);
        W[v] = _mm512_mask_add_epi8(z, (__mmask64)((uint64_t)ha | (uint64_t)hb << 32), z, b16);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        if (i >= cnt) break;
        const uint8_t *p = row + (size_t)(b0 + i) * bs;
        d[i / 4] |= (uint64_t)u16_at(p) << (16 * (i % 4));
        if (q51) m[i / 4] |= (uint64_t)u16_at(p + 2) << (16 * (i % 4));
    }
    sc->dw0 = sc->dw1 = _mm256_cvtph_ps(_mm_set_epi64x((long long)d[1], (long long)d[0]));
    sc->mw = _mm256_cvtph_ps(_mm_set_epi64x((long long)m[1], (long long)m[0]));
}

/* A packed last half octet (4 blocks, pack.c) as pairs (0, 2), (1, 3):
 * one 64-byte load is both, its nibbles as a full octet's first half; the
 * 5th bits of elements e and e + 16 share byte e (bits i, 4 + i), which
 * the 128-bit chunk of each element picks by its mask; pairs 2, 3 zero. */
AI void unpack_q5_half_pairs(const uint8_t *row, int b0, int q51, __m512i W[4], octet *sc) {
    const uint8_t *oct = row + (size_t)b0 * (q51 ? 24 : 22);
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const __m512i v = _mm512_loadu_si512(oct);
    const __m512i hb = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(oct + 64)));
    const __m512i nib[2] = {_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)};
#pragma GCC unroll 2
    for (int a = 0; a < 2; a++) { /* pair (a, a + 2): chunks = block a's halves, block a + 2's */
        const long long b0s = (long long)(0x0101010101010101ULL << a), b1s = (long long)(0x0101010101010101ULL << (4 + a)),
                        b2s = (long long)(0x0101010101010101ULL << (2 + a)), b3s = (long long)(0x0101010101010101ULL << (6 + a));
        const __m512i sel = _mm512_set_epi64(b3s, b3s, b2s, b2s, b1s, b1s, b0s, b0s); /* bit of each chunk's bytes */
        W[a] = _mm512_mask_add_epi8(nib[a], _mm512_test_epi8_mask(hb, sel), nib[a], b16);
    }
    W[2] = W[3] = _mm512_setzero_si512();
    sc->dw0 = sc->dw1 = _mm256_cvtph_ps(_mm_loadl_epi64((const __m128i *)(oct + 80)));
    sc->mw = q51 ? _mm256_cvtph_ps(_mm_loadl_epi64((const __m128i *)(oct + 88))) : _mm256_setzero_ps();
}

AI void unpack_pairs(const uint8_t *row, int b0, int cnt, int packed, kq_shape sh, __m512i W[4], octet *sc) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const int q5 = sh.type == KVS_TYPE_Q5_0 || sh.type == KVS_TYPE_Q5_1;
    if (q5 && packed && cnt == 4) {
        unpack_q5_half_pairs(row, b0, sh.type == KVS_TYPE_Q5_1, W, sc);
        return;
    }
    if (q5 && (cnt < 8 || !packed)) {
        unpack_q5_pairs(row, b0, cnt, sh.type == KVS_TYPE_Q5_1, W, sc);
        return;
    }
    if (sh.type == KVS_TYPE_Q6_K) {
        const uint8_t *sb = row + (size_t)(b0 / 8) * 210;
        const __m512i m3 = _mm512_set1_epi8(3);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) { /* sub-blocks j = 4 (p / 2) + p % 2 and j + 2 */
            const __m512i ql = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sb + 64 * (p / 2) + 32 * (p % 2))));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * (p / 2))));
            const __m512i nib = _mm512_and_si512(
                _mm512_srlv_epi16(ql, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1)), m4);
            const __m512i hs = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * (p % 2))),
                                                  _mm256_set1_epi16((short)(2 * (p % 2) + 4)), 1);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, hs), m3);
            W[p] = _mm512_or_si512(nib, _mm512_slli_epi16(hb, 4));
        }
        scales_q6k(sb, sc);
        return;
    }
    /* packed Q5 octet, Q4_K / Q5_K superblock: nibble planes of 32 bytes,
     * low nibbles block 2p, high 2p + 1; 5th bits byte e, bit i = block i */
    const uint8_t *nib, *hbits = NULL;
    if (q5) {
        nib = row + (size_t)b0 * (sh.type == KVS_TYPE_Q5_1 ? 24 : 22);
        hbits = nib + 128;
        scales_q5_packed(nib, sh.type == KVS_TYPE_Q5_1, sc);
    } else {
        const int k5 = sh.type == KVS_TYPE_Q5_K;
        const uint8_t *sb = row + (size_t)(b0 / 8) * (k5 ? 176 : 144);
        nib = sb + (k5 ? 48 : 16);
        if (k5) hbits = sb + 16;
        scales_k45(sb, sc);
    }
    const __m512i hb = hbits ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)hbits)) : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* pairs (4h, 4h + 2) and (4h + 1, 4h + 3) */
        const __m512i v = _mm512_loadu_si512(nib + 64 * h);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (hbits) {
            lo = with_fifth_bits(lo, hb, 4 * h, 4 * h + 2);
            hi = with_fifth_bits(hi, hb, 4 * h + 1, 4 * h + 3);
        }
        W[2 * h] = lo;
        W[2 * h + 1] = hi;
    }
}

/* The activations of hexadecet g0 of a row: offsets (2^off_shift * s_h;
 * not split: their sum in o0), dx, sx. */
typedef struct hx_act {
    __m512i o0, o1;
    __m512 dx, sx;
} hx_act;

/* The offsets of half sums s0, s1 (zero for types without one). */
AI void hx_offsets(__m512i s0, __m512i s1, kq_shape sh, __m512i *o0, __m512i *o1) {
    *o0 = sh.off_shift ? _mm512_slli_epi32(sh.split ? s0 : _mm512_add_epi32(s0, s1), sh.off_shift) : _mm512_setzero_si512();
    *o1 = sh.off_shift ? _mm512_slli_epi32(s1, sh.off_shift) : _mm512_setzero_si512();
}

AI hx_act hx_act_of(const kvs_kq_trailer *tr, int g0, kq_shape sh) {
    hx_act a;
    a.o0 = a.o1 = _mm512_setzero_si512();
    if (sh.off_shift) hx_offsets(_mm512_loadu_si512(tr->s0 + g0), _mm512_loadu_si512(tr->s1 + g0), sh, &a.o0, &a.o1);
    a.dx = _mm512_loadu_ps(tr->dx + g0);
    a.sx = sh.has_min ? _mm512_loadu_ps(tr->sx + g0) : _mm512_setzero_ps();
    return a;
}

/* A hexadecet's float steps: the operands (in the hexa's lanes) and the
 * steps on A's lanes, the reference's order:
 *   A = fma(f0, p0, A); split: A = fma(f1, p1, A); min: A = fma(m, s, A).
 * Not split, f0 is (I0 + I1) - off * (s0 + s1), the same integer as the
 * reference's (I0 - off s0) + (I1 - off s1). */
typedef struct hx_ops {
    __m512 f0, p0, f1, p1, m, s;
} hx_ops;

AI hx_ops hx_ops_of(__m512 dw0, __m512 dw1, __m512 mw, const __m512i I[2], const hx_act *a, kq_shape sh) {
    hx_ops op;
    op.f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(I[0], a->o0));
    op.p0 = _mm512_mul_ps(dw0, a->dx);
    op.f1 = sh.split ? _mm512_cvtepi32_ps(_mm512_sub_epi32(I[1], a->o1)) : _mm512_setzero_ps();
    op.p1 = sh.split ? _mm512_mul_ps(dw1, a->dx) : _mm512_setzero_ps();
    op.m = sh.has_min ? mw : _mm512_setzero_ps();
    op.s = a->sx;
    return op;
}

AI __m512 hx_apply(__m512 A, const hx_ops *op, kq_shape sh) {
    A = _mm512_fmadd_ps(op->f0, op->p0, A);
    if (sh.split) A = _mm512_fmadd_ps(op->f1, op->p1, A);
    if (sh.has_min) A = _mm512_fmadd_ps(op->m, op->s, A);
    return A;
}

/* hsum_tree (kvs_tree16) of four registers at once: lane q of the result
 * is a[q]'s, by the same additions in the same order (halves, quarters,
 * pairs, the last pair). */
AI __m128 tree16x4_512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
    const __m512 c = _mm512_add_ps(b, _mm512_permute_ps(b, 0xEE));
    const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, 0x55));
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), d));
}

/* The batch path of each type (kquant_avx512_batch.c): y rows [0, m) x
 * columns [j0, j1) on activation rows in the 16-lane layout. */
#define KQ512_BATCH_DECL(name, ...)                                                                                    \
    void kvs_kq_avx512_batch_##name(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt,    \
                                    float *y, int j0, int j1);
KQ_SHAPES(KQ512_BATCH_DECL)
#undef KQ512_BATCH_DECL
/* kvs_kq_isa_avx512's prep_quads (kquant_avx512_batch.c). */
void kvs_kq_avx512_prep_quads(int k, const uint8_t *xq, size_t xq_row, int m, int m_call, uint8_t *xt);

#endif
