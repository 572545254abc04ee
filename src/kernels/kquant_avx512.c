/*
 * AVX-512 VNNI Q5_0 / Q5_1 / K-quant kernels: decode (one activation row,
 * and rows too long for the batch buffer), the quantizer of activation
 * rows, and the ISA row that routes several rows to the batch path
 * (kquant_avx512_batch.c). The canonical arithmetic of kquant.h bit for
 * bit.
 *
 * Decode: each weight octet as 4 registers of block pairs
 * (kquant_avx512_pairs.h), the activation row in the same pairs
 * (KQ_PAIRS), vpdpbusd, and two rounds of unpack-and-add plus a permute
 * leave each block's half sums in its lane: a group of 16 blocks (two
 * octets) takes the batch path's float steps on a register of all 16
 * chains (kquant_avx512_pairs.h), a row's tail the same integer work on
 * fewer lanes and its steps after the tree. Q4_K
 * 2048x640, cache-resident, one core: 10.8 -> 14.9 GB/s; Q6_K 10.4 -> 17.7
 * (the AVX2 decode, kquant_avx2.c).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")
#endif

#include "kernels/avx512_util.h"
#include "kernels/kquant_avx512_pairs.h"

/* The 256 (w . hi) + (w . lo) of pair vector W against its activation
 * pair at xp (KQ_PAIRS: hi, then lo 64 bytes further), exact: lanes 0-3
 * block a half 0 (4 elements a lane), 4-7 a half 1, 8-11 b half 0, 12-15 b
 * half 1. */
AI __m512i pair_dot(__m512i W, const int8_t *xp) {
    const __m512i h = _mm512_dpbusd_epi32(_mm512_setzero_si512(), W, _mm512_loadu_si512(xp));
    return _mm512_dpbusd_epi32(_mm512_slli_epi32(h, 8), W, _mm512_loadu_si512(xp + 64));
}

/* Two rounds of unpack-and-add over an octet's 4 pair dots: in 128-bit
 * chunk c, lane v the chunk c sum of pair v, i.e. the halves of blocks (0,
 * 1, 4, 5) in chunks 0 (half 0) and 1 (half 1), of (2, 3, 6, 7) in chunks 2
 * and 3. */
AI __m512i pair_sums(const __m512i A[4]) {
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(A[0], A[1]), _mm512_unpackhi_epi32(A[0], A[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(A[2], A[3]), _mm512_unpackhi_epi32(A[2], A[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

/* Weight rows prefetched ahead in decode. 4 left SmolLM2's short Q5_0 rows
 * (396 bytes) 1.6 KB of lead; 12 (paired decode, session 55): SmolLM2
 * Q4_K_M 1.078x at 1 thread (8 rounds, every one ahead) and 1.058x at 2,
 * gemma3 1.049x (10 rounds); 8 and 16 measured 1.117x / 1.025x, 24 1.061x
 * on SmolLM2 (6 rounds each, noisier). */
#define PF_ROWS 12

/* The float steps' operands of hexadecet g0 (cnt blocks from g0: 16, or a
 * row's tail of 1..15) of weight row `row`, lane l = block g0 + l: the
 * octets' pair sums into 16 lanes at once, then the batch path's 16-lane
 * operands (hx_ops_of); pairs past cnt are zero. */
AI hx_ops decode_hexa(const uint8_t *row, int packed, const uint8_t *xq, const kvs_kq_trailer *tr, int g0, int cnt,
                      kq_shape sh) {
    __m512i W[8], P[8];
    octet s0, s1;
    const int c0 = cnt < 8 ? cnt : 8, c1 = cnt - c0;
    unpack_pairs(row, g0, c0, packed, sh, W, &s0);
    if (c1) {
        unpack_pairs(row, g0 + 8, c1, packed, sh, W + 4, &s1);
    } else {
        W[4] = W[5] = W[6] = W[7] = _mm512_setzero_si512();
        s1.dw0 = s1.dw1 = s1.mw = _mm256_setzero_ps();
    }
    const int8_t *xo = (const int8_t *)xq + (size_t)g0 * 64;
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) /* octet v / 4's pair v % 4 */
        P[v] = 8 * (v / 4) + pair_first_block(v % 4) < cnt ? pair_dot(W[v], xo + 512 * (v / 4) + 128 * (v % 4))
                                                           : _mm512_setzero_si512();
    const __m512i t0 = pair_sums(P), t1 = pair_sums(P + 4);
    const __m512i h0 = _mm512_permutex2var_epi32(
        t0, _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 16, 17, 24, 25, 18, 19, 26, 27), t1);
    const __m512i h1 = _mm512_permutex2var_epi32(
        t0, _mm512_setr_epi32(4, 5, 12, 13, 6, 7, 14, 15, 20, 21, 28, 29, 22, 23, 30, 31), t1);
    const __m512i I[2] = {sh.split ? h0 : _mm512_add_epi32(h0, h1), sh.split ? h1 : _mm512_setzero_si512()};
    const hx_act a = hx_act_of(tr, g0, sh);
    return hx_ops_of(_mm512_insertf32x8(_mm512_castps256_ps512(s0.dw0), s1.dw0, 1),
                     _mm512_insertf32x8(_mm512_castps256_ps512(s0.dw1), s1.dw1, 1),
                     _mm512_insertf32x8(_mm512_castps256_ps512(s0.mw), s1.mw, 1), I, &a, sh);
}

/* Lane l of the result's 128-bit chunk c: lane c0 + c of v[l] (c < 4),
 * four rows' operands of one block side by side. */
AI __m512 rows4_lanes(const __m512 v[4], int c0) {
    const __m512i il = _mm512_add_epi32(_mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 0, 16, 1, 17, 2, 18, 3, 19),
                                        _mm512_set1_epi32(c0)); /* lanes 2 c + (0, 1): v[0 | 2], v[1 | 3] */
    const __m512 g = _mm512_permutex2var_ps(v[0], il, v[1]), h = _mm512_permutex2var_ps(v[2], il, v[3]);
    return _mm512_permutex2var_ps(g, _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23), h);
}

AI __m128 chunk_of(__m512 v, int c) {
    switch (c) {
    case 0: return _mm512_castps512_ps128(v);
    case 1: return _mm512_extractf32x4_ps(v, 1);
    case 2: return _mm512_extractf32x4_ps(v, 2);
    default: return _mm512_extractf32x4_ps(v, 3);
    }
}

/* The tails (cnt blocks from g0) of four rows after their trees y (lane q
 * = row q): the blocks' steps in order (kquant.h), on the four rows at
 * once from their operands in lanes (op[q]). */
AI __m128 tail_rows4(__m128 y, const hx_ops op[4], int cnt, kq_shape sh) {
    for (int c0 = 0; c0 < cnt; c0 += 4) {
        __m512 f0, p0, f1 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps(), m = _mm512_setzero_ps(), s = m;
        {
            const __m512 a[4] = {op[0].f0, op[1].f0, op[2].f0, op[3].f0}, b[4] = {op[0].p0, op[1].p0, op[2].p0, op[3].p0};
            f0 = rows4_lanes(a, c0);
            p0 = rows4_lanes(b, c0);
        }
        if (sh.split) {
            const __m512 a[4] = {op[0].f1, op[1].f1, op[2].f1, op[3].f1}, b[4] = {op[0].p1, op[1].p1, op[2].p1, op[3].p1};
            f1 = rows4_lanes(a, c0);
            p1 = rows4_lanes(b, c0);
        }
        if (sh.has_min) {
            const __m512 a[4] = {op[0].m, op[1].m, op[2].m, op[3].m}, b[4] = {op[0].s, op[1].s, op[2].s, op[3].s};
            m = rows4_lanes(a, c0);
            s = rows4_lanes(b, c0);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            if (c0 + c >= cnt) break;
            y = _mm_fmadd_ps(chunk_of(f0, c), chunk_of(p0, c), y);
            if (sh.split) y = _mm_fmadd_ps(chunk_of(f1, c), chunk_of(p1, c), y);
            if (sh.has_min) y = _mm_fmadd_ps(chunk_of(m, c), chunk_of(s, c), y);
        }
    }
    return y;
}

/* Four weight rows from j (rows past j1 repeat the last: computed, not
 * stored) against activation row xq: each row's whole hexadecets on its
 * 16-chain accumulator, the four trees at once (tree16x4_512), then the
 * tails (cnt blocks) on the four outputs. One tree for four rows, where
 * a row at a time (tree16_2, and its tail's steps from memory) spent a
 * quarter of SmolLM2's k = 576 decode on them. */
AI __m128 decode_rows4(const kvs_wmat *w, const uint8_t *base, int packed, const uint8_t *xq, const kvs_kq_trailer *tr,
                       int j, int j0, int j1, int cnt, kq_shape sh) {
    const int nb = w->k / 32, nf = nb - cnt;
    const uint8_t *rows[4];
    __m512 A[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        rows[q] = base + (size_t)(j + q < j1 ? j + q : j1 - 1) * w->row_bytes;
        kq_prefetch_ahead(rows[q], w->row_bytes, j + q, j0, w->n, PF_ROWS);
        if (w->far_rows) kq_prefetch_far(rows[q], w->row_bytes, j + q, j0, w->n, w->far_rows);
        A[q] = _mm512_setzero_ps();
    }
    for (int g0 = 0; g0 < nf; g0 += 16)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op = decode_hexa(rows[q], packed, xq, tr, g0, 16, sh); /* 16: folded */
            A[q] = hx_apply(A[q], &op, sh);
        }
    __m128 y = tree16x4_512(A[0], A[1], A[2], A[3]);
    if (cnt) {
        hx_ops op[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) op[q] = decode_hexa(rows[q], packed, xq, tr, nf, cnt, sh);
        y = tail_rows4(y, op, cnt, sh);
    }
    return y;
}

/* Decode (one activation row xq, KQ_PAIRS): columns [j0, j1), four weight
 * rows at a time (decode_rows4): each row's whole hexadecets on one
 * 16-chain accumulator, the tree, then the tail (nb % 16 blocks) in order
 * on the result. */
AI void decode_cols(const kvs_wmat *w, const uint8_t *xq, float *y, int j0, int j1, kq_shape sh) {
    const int nb = w->k / 32, packed = w->packed != NULL;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xq, w->k);
    for (int j = j0; j < j1; j += 4) {
        __m128 y4;
        switch (nb % 16) { /* the common tails folded (k = 576, 640, 768) */
        case 0: y4 = decode_rows4(w, base, packed, xq, &tr, j, j0, j1, 0, sh); break;
        case 2: y4 = decode_rows4(w, base, packed, xq, &tr, j, j0, j1, 2, sh); break;
        case 4: y4 = decode_rows4(w, base, packed, xq, &tr, j, j0, j1, 4, sh); break;
        case 8: y4 = decode_rows4(w, base, packed, xq, &tr, j, j0, j1, 8, sh); break;
        default: y4 = decode_rows4(w, base, packed, xq, &tr, j, j0, j1, nb % 16, sh); break;
        }
        _mm_mask_storeu_ps(y + j, (__mmask8)(j1 - j < 4 ? (1u << (j1 - j)) - 1 : 0xf), y4);
    }
}

KQ_SHAPES(KQ_DECODE_FN)
#define KQ_BATCH_NAME(name) kvs_kq_avx512_batch_##name
KQ_ISA_DOT_COLS(avx512_dot_cols)

/* The batch path's 16-lane layout: per hexadecet of blocks from g0, a hi
 * plane of 8 vectors (vector r, lane l: elements 4r..4r+3 of block g0 +
 * l), then the lo plane, and the trailer's 16 lanes; lanes past the row
 * zero. A hexadecet at a time (quantize_group_planes: its planes come out
 * in this layout and are stored as they are; the half sums from the
 * bytes). Block by block (kq_quantize_lanes' AVX2 quantizer, horizontal
 * reductions and a transpose per octet) the quantizer took a third of a k
 * = 576 call of 192 columns at m = 512, 3.4x the Q4 paths' time a row. */
static void quantize_hexas(const float *x, int k, uint8_t *xrow) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xrow, k);
    const __m512i ones = _mm512_set1_epi8(1);
    const int nb = k / 32;
    for (int g0 = 0; g0 < nb; g0 += 16) {
        __m512i zh[8], zl[8];
        const __m512 d = quantize_group_planes(x + (size_t)g0 * 32, nb - g0 < 16 ? nb - g0 : 16, zh, zl);
        uint8_t *base = xrow + (size_t)g0 * 64;
        __m512i sh[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, sl[2] = {sh[0], sh[1]};
        for (int r = 0; r < 8; r++) { /* elements 4r..4r+3: half r / 4 */
            _mm512_storeu_si512(base + 64 * r, zh[r]);
            _mm512_storeu_si512(base + 512 + 64 * r, zl[r]);
            sh[r / 4] = _mm512_dpbusd_epi32(sh[r / 4], ones, zh[r]);
            sl[r / 4] = _mm512_dpbusd_epi32(sl[r / 4], ones, zl[r]);
        }
        const __m512i s0 = _mm512_add_epi32(_mm512_slli_epi32(sh[0], 8), sl[0]);
        const __m512i s1 = _mm512_add_epi32(_mm512_slli_epi32(sh[1], 8), sl[1]);
        const __m512 dx = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 256.0f));
        _mm512_storeu_ps(tr.dx + g0, dx);
        _mm512_storeu_ps(tr.sx + g0, _mm512_mul_ps(dx, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1))));
        _mm512_storeu_si512(tr.s0 + g0, s0);
        _mm512_storeu_si512(tr.s1 + g0, s1);
    }
}

static void avx512_quantize_row(const float *x, int k, uint8_t *xrow, int m) {
    if (kq_lanes(k, m)) quantize_hexas(x, k, xrow);
    else kq_quantize_lanes(x, k, xrow, KQ_PAIRS);
}

const kvs_kq_isa kvs_kq_isa_avx512 = {.name = "avx512vnni",
                                     .dot_cols = avx512_dot_cols,
                                     .quantize_row = avx512_quantize_row,
                                     .prep_quads = kvs_kq_avx512_prep_quads};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
