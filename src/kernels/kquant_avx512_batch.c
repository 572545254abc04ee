/*
 * AVX-512 VNNI Q5_0 / Q5_1 / K-quant kernels for several activation rows
 * (prefill, the server's batch): the canonical arithmetic of kquant.h bit
 * for bit, on groups of 16 blocks ("hexadecets").
 *
 * Lane l of a zmm is block g0 + l of a hexadecet (g0 a multiple of 16), so
 * its chain b % 16 is lane l: one register holds a weight row's 16 chains
 * and each float step of 16 blocks is one instruction, in the reference's
 * order. The activation rows are in the 16-lane layout (quantize_hexas:
 * per hexadecet a hi plane of 8 vectors, vector r lane l = elements
 * 4r..4r+3 of block l, then the lo plane), the weights' unsigned integers
 * q_w + off alike (unpack_tile: the block pairs of kquant_avx512_pairs.h
 * transposed), so vpdpbusd leaves each block's integer dot in its lane: 16
 * of them (hi and lo planes) per weight row and hexadecet, where AVX2's
 * vpmaddubsw path needs ~90 instructions for the same 16 blocks
 * (kquant_avx2_batch.c). Integers are exact in any order; I = 256 * (w .
 * hi) + (w . lo) - off * s, as in kquant_avx2_octet.h.
 *
 * A row's tail (the nb % 16 blocks after its whole hexadecets; kquant.h
 * takes their steps after the tree, in order) goes with lanes = outputs,
 * as matmul_avx512.c's: a tile's 4 weight rows meet 4 activation rows (a
 * quad), lane 4 i + j = output (i, j), and per tail block 8 hi and 8 lo
 * vpdpbusd give the block's integer dots of all 16 outputs, its steps one
 * fma each on the 16 trees. The weights (the tile's tail hexas,
 * unpack_tile) broadcast a 128-bit chunk (rows 0..3), the activations
 * (quad_tail) hold each row's dword in its chunk, both built once: per
 * tile, and per quad and call (kvs_kq_avx512_prep_quads, beside the
 * quantizer). On chains
 * b % 16 in block lanes, SmolLM2's 2-block tail (k = 576: 16 + 2 blocks)
 * had cost as much as its 16 full blocks (session 55). Weight rows go by
 * tiles of four, unpacked once per call into a buffer, as on AVX2.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

#include "kernels/avx512_util.h"
#include "kernels/kquant_avx512_pairs.h"

/* One weight row's hexadecet, unpacked and transposed (64-byte aligned:
 * the kernel loads it whole). */
typedef struct hexa {
    __m512i qu[8];
    __m512 dw0, dw1, mw;
} hexa;

#define BATCH_HEXAS (2 * MAX_OCTETS) /* a tile of the longest rows: 88 KiB */
#define PASS_BYTES 24576             /* activation rows per pass: as many as fit this */

/* A hexadecet of 16 lanes of blocks from nsrc sources (row, b0, cnt): 2
 * octets (lanes 0-7 and 8-15: a row's blocks g0..g0 + 15, or two rows'
 * short last octets), or 4 short octets of <= 4 blocks (lanes 4 s..4 s + 3:
 * four rows' last blocks), lanes past a source's cnt zero. The sources'
 * block pairs (unpack_pairs: vector v lane 8 h + r = dword r of block a(v)
 * + 2 h; a source of 4 gives its pairs (0, 2) and (1, 3)) become lanes =
 * blocks by three rounds of vpermt2d, round k swapping bit k of the vector
 * index with bit k of the lane (dword r becomes the vector, lane 8 h + v),
 * then one permute into block order: about half the work of AVX2 octets
 * transposed and placed (the batch path's cost at a few rows, a server
 * step). */
static const int32_t pair_tr_idx[3][2][16] __attribute__((aligned(64))) = {
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}, {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}, {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}, {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
};

AI void unpack_hexa(const uint8_t *const rows[4], const int b0[4], const int cnt[4], int nsrc, int packed, kq_shape sh,
                    hexa *o) {
    __m512i z[8], u[8];
    octet sc[4];
    if (nsrc == 2) {
        unpack_pairs(rows[0], b0[0], cnt[0], packed, sh, z, &sc[0]);
        unpack_pairs(rows[1], b0[1], cnt[1], packed, sh, z + 4, &sc[1]);
    } else {
        for (int s = 0; s < 4; s++) {
            __m512i p[4];
            unpack_pairs(rows[s], b0[s], cnt[s], packed, sh, p, &sc[s]);
            z[2 * s] = p[0];
            z[2 * s + 1] = p[1];
        }
    }
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++) {
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            const int x = v & ~(1 << k), ob = (v >> k) & 1;
            u[v] = _mm512_permutex2var_epi32(z[x], _mm512_load_si512(pair_tr_idx[k][ob]), z[x | 1 << k]);
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) z[v] = u[v];
    }
    /* lane 8 hh + v holds, for 2 sources, block 8 (v / 4) + i (pair v % 4 =
     * (i / 4) * 2 + i % 2, hh = (i / 2) % 2); for 4, block 4 (v / 2) + i
     * (pair v % 2 = i % 2, hh = i / 2): the same permute */
    const __m512i order = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) o->qu[r] = _mm512_permutexvar_epi32(order, z[r]);
    if (nsrc == 2) {
        o->dw0 = _mm512_insertf32x8(_mm512_castps256_ps512(sc[0].dw0), sc[1].dw0, 1);
        o->dw1 = _mm512_insertf32x8(_mm512_castps256_ps512(sc[0].dw1), sc[1].dw1, 1);
        o->mw = _mm512_insertf32x8(_mm512_castps256_ps512(sc[0].mw), sc[1].mw, 1);
    } else {
        o->dw0 = o->dw1 = o->mw = _mm512_setzero_ps();
        for (int s = 0; s < 4; s++) { /* lanes 0-3 of each source's scales */
            o->dw0 = _mm512_mask_broadcast_f32x4(o->dw0, (__mmask16)(0xfu << 4 * s), _mm256_castps256_ps128(sc[s].dw0));
            o->dw1 = _mm512_mask_broadcast_f32x4(o->dw1, (__mmask16)(0xfu << 4 * s), _mm256_castps256_ps128(sc[s].dw1));
            o->mw = _mm512_mask_broadcast_f32x4(o->mw, (__mmask16)(0xfu << 4 * s), _mm256_castps256_ps128(sc[s].mw));
        }
    }
}

/* A tail hexa's lane 4 k + q (k: block 4 u + k of the tail, q: weight row
 * q of the tile) from the span-laid hexas tmp (kq_tail_span): span 4, one
 * hexa, row q in lanes 4 q..; span 8, two, rows 2 t, 2 t + 1 in lanes 0..
 * and 8.. of hexa t; span 16, a hexa a row. */
AI __m512i tail_lanes(const __m512i v[4], int span, int u) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i k = _mm512_srli_epi32(lane, 2), q = _mm512_and_si512(lane, _mm512_set1_epi32(3));
    const __m512i q1 = _mm512_and_si512(q, _mm512_set1_epi32(1)), c = _mm512_add_epi32(k, _mm512_set1_epi32(4 * u));
    if (span == 4) return _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, 2), k), v[0]);
    if (span == 8) /* (q / 2) * 16 + 8 (q % 2) + c */
        return _mm512_permutex2var_epi32(
            v[0], _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(q, 1), 4), _mm512_slli_epi32(q1, 3)), c),
            v[1]);
    const __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(q1, 4), c); /* rows 0 | 1, 2 | 3 by q % 2 */
    return _mm512_mask_blend_epi32((__mmask16)0xCCCC, _mm512_permutex2var_epi32(v[0], idx, v[1]),
                                   _mm512_permutex2var_epi32(v[2], idx, v[3]));
}

/* The tile of weight rows [j, j + 4) (rows past j1 repeat the last:
 * computed, not stored): row q's full hexadecet h at tb[4 h + q] (the
 * four rows' side by side: one base pointer for all four), then the
 * tile's tail (cnt blocks from g0 = 16 nfull) in (cnt + 3) / 4 tail hexas:
 * tail hexa u, qu[r] lane 4 k + q = dword r of block g0 + 4 u + k of row
 * q, dw0 / dw1 / mw likewise (a 128-bit chunk per block, broadcast against
 * a quad_tail). pf_n: the matrix's rows where the call streams them (rows
 * fetched KQ_PF_ROWS ahead), else 0. */
AI void unpack_tile(const uint8_t *base, size_t row_bytes, int j, int j1, int nb, int packed, kq_shape sh, hexa *tb,
                    int pf_n) {
    const int nfull = nb / 16, cnt = nb % 16, span = kq_tail_span(cnt, 16), g0 = 16 * nfull;
    const uint8_t *rows[4];
    for (int q = 0; q < 4; q++) rows[q] = base + (size_t)(j + q < j1 ? j + q : j1 - 1) * row_bytes;
    for (int q = 0; q < 4; q++) {
        kq_prefetch_ahead(rows[q], row_bytes, j + q, 0, pf_n, KQ_PF_ROWS);
        for (int h = 0; h < nfull; h++) {
            const uint8_t *src[4] = {rows[q], rows[q]};
            const int b0[4] = {16 * h, 16 * h + 8}, n[4] = {8, 8};
            unpack_hexa(src, b0, n, 2, packed, sh, &tb[4 * h + q]);
        }
    }
    if (!cnt) return;
    hexa tt[4]; /* the tail as the span lays it: 16 / span rows a hexa */
    if (span == 16) /* a hexa a row: its blocks g0.. in two octets */
        for (int q = 0; q < 4; q++) {
            const uint8_t *src[4] = {rows[q], rows[q]};
            const int b0[4] = {g0, g0 + 8}, n[4] = {8, cnt - 8};
            unpack_hexa(src, b0, n, 2, packed, sh, &tt[q]);
        }
    else if (span == 8) /* rows 2 t, 2 t + 1 */
        for (int t = 0; t < 2; t++) {
            const uint8_t *src[4] = {rows[2 * t], rows[2 * t + 1]};
            const int b0[4] = {g0, g0}, n[4] = {cnt, cnt};
            unpack_hexa(src, b0, n, 2, packed, sh, &tt[t]);
        }
    else {
        const int b0[4] = {g0, g0, g0, g0}, n[4] = {cnt, cnt, cnt, cnt};
        unpack_hexa(rows, b0, n, 4, packed, sh, &tt[0]);
    }
    const int ntt = 4 * span / 16; /* hexas tt holds */
    hexa *to = tb + 4 * nfull;
    for (int u = 0; 4 * u < cnt; u++) {
        __m512i v[4], d0[4], d1[4], mw[4];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            for (int t = 0; t < 4; t++) v[t] = t < ntt ? tt[t].qu[r] : _mm512_setzero_si512();
            to[u].qu[r] = tail_lanes(v, span, u);
        }
        for (int t = 0; t < 4; t++) {
            d0[t] = t < ntt ? _mm512_castps_si512(tt[t].dw0) : _mm512_setzero_si512();
            d1[t] = t < ntt ? _mm512_castps_si512(tt[t].dw1) : _mm512_setzero_si512();
            mw[t] = t < ntt ? _mm512_castps_si512(tt[t].mw) : _mm512_setzero_si512();
        }
        to[u].dw0 = _mm512_castsi512_ps(tail_lanes(d0, span, u));
        to[u].dw1 = _mm512_castsi512_ps(tail_lanes(d1, span, u));
        to[u].mw = _mm512_castsi512_ps(tail_lanes(mw, span, u));
    }
}

/* Exact integer sums of the 4 weight hexas w[q] against activation
 * hexadecet xo (hi plane vector r at xo + 64 r, lo plane at xo + 512 + 64
 * r): lane l of I[q][0] is block l over both halves (split scales: half 0,
 * and I[q][1] half 1), on 8 vpdpbusd chains; integers, so the split keeps
 * the values. */
AI __m512i chains_sum(__m512i *H, __m512i *L) {
    const __m512i s = _mm512_add_epi32(_mm512_slli_epi32(*H, 8), *L);
    *H = *L = _mm512_setzero_si512();
    return s;
}

AI void hexa_sums(const hexa *const w[4], const int8_t *xo, kq_shape sh, __m512i I[4][2]) {
    /* each chain starts from zero at its first step, not from a zeroed
     * array: GCC turned the zeroing loop into a memset call of 2 KiB per
     * tile and row, which kept the chains in memory (11% of gemma3's
     * prefill at one thread) */
    __m512i H[4], L[4];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const __m512i xh = in_register(_mm512_loadu_si512(xo + 64 * r)), xl = in_register(_mm512_loadu_si512(xo + 512 + 64 * r));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i wv = in_register(_mm512_load_si512(&w[q]->qu[r]));
            H[q] = _mm512_dpbusd_epi32(r ? H[q] : _mm512_setzero_si512(), wv, xh);
            L[q] = _mm512_dpbusd_epi32(r ? L[q] : _mm512_setzero_si512(), wv, xl);
        }
        if (sh.split && r == 3)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) I[q][0] = chains_sum(&H[q], &L[q]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        I[q][sh.split] = chains_sum(&H[q], &L[q]);
        if (!sh.split) I[q][1] = _mm512_setzero_si512();
    }
}

/* The four outputs of tile tb (unpack_tile) for activation row xr (nb
 * blocks, the 16-lane layout) before the row's tail: full hexadecets in
 * order, each weight row's accumulator in a register, then their trees'
 * first two rounds (tree16x16_quarter; tile_quad finishes them). */
AI __m512 tile_row(const hexa *tb, int nb, const uint8_t *xr, kq_shape sh) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xr, 32 * nb);
    const int nfull = nb / 16;
    __m512 A[4];
    for (int q = 0; q < 4; q++) A[q] = _mm512_setzero_ps();
    __m512i I[4][2];
    for (int h = 0; h < nfull; h++) {
        const hexa *w[4] = {tb + 4 * h, tb + 4 * h + 1, tb + 4 * h + 2, tb + 4 * h + 3};
        hexa_sums(w, (const int8_t *)xr + (size_t)h * 1024, sh, I);
        const hx_act a = hx_act_of(&tr, 16 * h, sh);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I[q], &a, sh);
            A[q] = hx_apply(A[q], &op, sh);
        }
    }
    return tree16x16_quarter(A, 0);
}

/* hexa_sums for two activation rows at once (x0, x1): each weight vector
 * loaded once for both, 16 vpdpbusd chains. The loads go through
 * in_register: GCC had folded each into all 4 of its vpdpbusd, so every
 * vpdpbusd loaded (gemma3's Q4_K / Q6_K / Q5_0 shapes at m = 512, one
 * thread, Zen 5: 0.77-0.95x the time with one load each; its prefill
 * 1.08x tokens/s). */
AI void hexa_sums2(const hexa *const w[4], const int8_t *x0, const int8_t *x1, kq_shape sh, __m512i I0[4][2],
                   __m512i I1[4][2]) {
    __m512i H0[4], L0[4], H1[4], L1[4];
    for (int q = 0; q < 4; q++) H0[q] = L0[q] = H1[q] = L1[q] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const __m512i xh0 = in_register(_mm512_loadu_si512(x0 + 64 * r)), xl0 = in_register(_mm512_loadu_si512(x0 + 512 + 64 * r));
        const __m512i xh1 = in_register(_mm512_loadu_si512(x1 + 64 * r)), xl1 = in_register(_mm512_loadu_si512(x1 + 512 + 64 * r));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i wv = in_register(_mm512_load_si512(&w[q]->qu[r]));
            H0[q] = _mm512_dpbusd_epi32(H0[q], wv, xh0);
            L0[q] = _mm512_dpbusd_epi32(L0[q], wv, xl0);
            H1[q] = _mm512_dpbusd_epi32(H1[q], wv, xh1);
            L1[q] = _mm512_dpbusd_epi32(L1[q], wv, xl1);
        }
        if (sh.split && r == 3)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                I0[q][0] = chains_sum(&H0[q], &L0[q]);
                I1[q][0] = chains_sum(&H1[q], &L1[q]);
            }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        I0[q][sh.split] = chains_sum(&H0[q], &L0[q]);
        I1[q][sh.split] = chains_sum(&H1[q], &L1[q]);
        if (!sh.split) I0[q][1] = I1[q][1] = _mm512_setzero_si512();
    }
}

/* tile_row for two activation rows (xr0, xr1): their full hexadecets
 * together (hexa_sums2), then each row's quarter tree. */
AI void tile_rows2(const hexa *tb, int nb, const uint8_t *xr0, const uint8_t *xr1, kq_shape sh, __m512 *y0, __m512 *y1) {
    const kvs_kq_trailer tr0 = kvs_kq_trailer_of(xr0, 32 * nb), tr1 = kvs_kq_trailer_of(xr1, 32 * nb);
    const int nfull = nb / 16;
    __m512 A0[4], A1[4];
    for (int q = 0; q < 4; q++) A0[q] = A1[q] = _mm512_setzero_ps();
    __m512i I0[4][2], I1[4][2];
    for (int h = 0; h < nfull; h++) {
        const hexa *w[4] = {tb + 4 * h, tb + 4 * h + 1, tb + 4 * h + 2, tb + 4 * h + 3};
        hexa_sums2(w, (const int8_t *)xr0 + (size_t)h * 1024, (const int8_t *)xr1 + (size_t)h * 1024, sh, I0, I1);
        const hx_act a0 = hx_act_of(&tr0, 16 * h, sh), a1 = hx_act_of(&tr1, 16 * h, sh);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op0 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I0[q], &a0, sh);
            A0[q] = hx_apply(A0[q], &op0, sh);
            const hx_ops op1 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I1[q], &a1, sh);
            A1[q] = hx_apply(A1[q], &op1, sh);
        }
    }
    *y0 = tree16x16_quarter(A0, 0);
    *y1 = tree16x16_quarter(A1, 0);
}

/* A quad's activations for one tail block, lanes = outputs: chunk i (lanes
 * 4 i..4 i + 3) holds activation row i's value in each lane (hi / lo dword
 * r; dx, sx, the half sums s0, s1: whatever the weight type). */
typedef struct quad_tail {
    __m512i h[8], l[8];
    __m512 dx, sx;
    __m512i s0, s1;
} quad_tail;

/* Chunk i of the result = lane c of v[i] in every lane: c's 128-bit chunk
 * u of the four vectors into chunks 0..3 (two two-source permutes and a
 * blend), then lane c % 4 of each chunk spread over it. */
AI __m512i quad_spread(const __m512i v[4], int c) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(4 * (c / 4) + c % 4),
                                         _mm512_and_si512(_mm512_slli_epi32(lane, 2), _mm512_set1_epi32(16)));
    /* idx lane 4 i + l: 4 u + c % 4, plus 16 for odd chunks (the second source) */
    const __m512i lo = _mm512_permutex2var_epi32(v[0], idx, v[1]), hi = _mm512_permutex2var_epi32(v[2], idx, v[3]);
    return _mm512_mask_blend_epi32((__mmask16)0xFF00, lo, hi);
}

/* The quad of activation rows xr[0..nr) (nr <= 4; rows past nr zero): its
 * tail blocks c < cnt (from g0) into qt[c]. */
AI void quad_tails(const uint8_t *const xr[4], int nr, int nb, quad_tail *qt) {
    const int g0 = nb / 16 * 16, cnt = nb - g0;
    kvs_kq_trailer tr[4];
    for (int i = 0; i < 4; i++) tr[i] = kvs_kq_trailer_of(xr[i], 32 * nb);
    __m512i v[4];
#define QT_LOAD(expr) for (int i = 0; i < 4; i++) v[i] = i < nr ? _mm512_loadu_si512(expr) : _mm512_setzero_si512()
    for (int r = 0; r < 8; r++) { /* the tail hexadecet's plane vectors r: lane c = block g0 + c */
        QT_LOAD(xr[i] + (size_t)g0 * 64 + 64 * r);
        for (int c = 0; c < cnt; c++) qt[c].h[r] = quad_spread(v, c);
        QT_LOAD(xr[i] + (size_t)g0 * 64 + 512 + 64 * r);
        for (int c = 0; c < cnt; c++) qt[c].l[r] = quad_spread(v, c);
    }
    QT_LOAD(tr[i].dx + g0);
    for (int c = 0; c < cnt; c++) qt[c].dx = _mm512_castsi512_ps(quad_spread(v, c));
    QT_LOAD(tr[i].sx + g0);
    for (int c = 0; c < cnt; c++) qt[c].sx = _mm512_castsi512_ps(quad_spread(v, c));
    QT_LOAD(tr[i].s0 + g0);
    for (int c = 0; c < cnt; c++) qt[c].s0 = quad_spread(v, c);
    QT_LOAD(tr[i].s1 + g0);
    for (int c = 0; c < cnt; c++) qt[c].s1 = quad_spread(v, c);
#undef QT_LOAD
}

/* A tile's tail (cnt blocks, its tail hexas tt) against a quad (qt) on Y,
 * lane 4 i + j = output (i, j) after its tree: per block, its integer dots
 * of the 16 outputs (the hi and lo planes' halves on 4 chains), then the
 * steps in order (kquant.h). */
AI __m512 quad_tail_steps(__m512 Y, const hexa *tt, const quad_tail *qt, int cnt, kq_shape sh) {
    for (int c = 0; c < cnt; c++) {
        const hexa *t = tt + c / 4;
        const int k = c % 4;
        const quad_tail *x = qt + c;
        __m512i H[2], L[2];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const __m512i wv = in_register(bcast16((const uint8_t *)&t->qu[r] + 16 * k));
            const int hh = r / 4; /* half: split scales take them apart */
            H[hh] = _mm512_dpbusd_epi32(r % 4 ? H[hh] : _mm512_setzero_si512(), wv, x->h[r]);
            L[hh] = _mm512_dpbusd_epi32(r % 4 ? L[hh] : _mm512_setzero_si512(), wv, x->l[r]);
        }
        const __m512 dw0 = _mm512_castsi512_ps(bcast16((const uint8_t *)&t->dw0 + 16 * k));
        __m512i o0, o1;
        hx_offsets(x->s0, x->s1, sh, &o0, &o1);
        if (sh.split) {
            const __m512 dw1 = _mm512_castsi512_ps(bcast16((const uint8_t *)&t->dw1 + 16 * k));
            const __m512i I0 = _mm512_add_epi32(_mm512_slli_epi32(H[0], 8), L[0]);
            const __m512i I1 = _mm512_add_epi32(_mm512_slli_epi32(H[1], 8), L[1]);
            Y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(I0, o0)), _mm512_mul_ps(dw0, x->dx), Y);
            Y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(I1, o1)), _mm512_mul_ps(dw1, x->dx), Y);
        } else {
            const __m512i I = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(H[0], H[1]), 8),
                                               _mm512_add_epi32(L[0], L[1]));
            Y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(I, o0)), _mm512_mul_ps(dw0, x->dx), Y);
        }
        if (sh.has_min) Y = _mm512_fmadd_ps(_mm512_castsi512_ps(bcast16((const uint8_t *)&t->mw + 16 * k)), x->sx, Y);
    }
    return Y;
}

/* Chunk i of Y (activation row i's 4 outputs) to y0 + i * ldy, its live
 * lanes. */
AI void store_quad(__m512 Y, float *y0, size_t ldy, int nr, __mmask8 live) {
    _mm_mask_storeu_ps(y0, live, _mm512_castps512_ps128(Y));
    if (nr > 1) _mm_mask_storeu_ps(y0 + ldy, live, _mm512_extractf32x4_ps(Y, 1));
    if (nr > 2) _mm_mask_storeu_ps(y0 + 2 * ldy, live, _mm512_extractf32x4_ps(Y, 2));
    if (nr > 3) _mm_mask_storeu_ps(y0 + 3 * ldy, live, _mm512_extractf32x4_ps(Y, 3));
}

/* A tile against the quad of activation rows from xr0 (nr <= 4 rows,
 * xq_row apart): the full hexadecets two rows at a time, the 16 outputs'
 * trees at once (each row's quarter, then tree16x16_of_quarters: kvs_tree16
 * by the same additions as tree16x4_512, ~20% fewer instructions; the
 * trees were a quarter of SmolLM2's k = 576 calls), then the tail on the
 * quad's 16 outputs at once. */
AI __m512 tile_quad(const hexa *tb, int nb, const uint8_t *xr0, size_t xq_row, int nr, const quad_tail *qt,
                    kq_shape sh) {
    __m512 w4[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    if (nr >= 2) tile_rows2(tb, nb, xr0, xr0 + xq_row, sh, &w4[0], &w4[1]);
    else w4[0] = tile_row(tb, nb, xr0, sh);
    if (nr == 4) tile_rows2(tb, nb, xr0 + 2 * xq_row, xr0 + 3 * xq_row, sh, &w4[2], &w4[3]);
    else if (nr == 3) w4[2] = tile_row(tb, nb, xr0 + 2 * xq_row, sh);
    /* lane 4 j + i = (activation row i, weight row j) -> lane 4 i + j */
    __m512 Y = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                     tree16x16_of_quarters(w4, 0));
    const int cnt = nb % 16;
    if (cnt) { /* the common counts folded (k = 576, 640, 768) */
        const hexa *tt = tb + 4 * (nb / 16);
        switch (cnt) {
        case 2: Y = quad_tail_steps(Y, tt, qt, 2, sh); break;
        case 4: Y = quad_tail_steps(Y, tt, qt, 4, sh); break;
        case 8: Y = quad_tail_steps(Y, tt, qt, 8, sh); break;
        default: Y = quad_tail_steps(Y, tt, qt, cnt, sh); break;
        }
    }
    return Y;
}

/* Several activation rows (16-lane layout; their quads' tails at xt,
 * kvs_kq_avx512_prep_quads): columns [j0, j1) by groups of tiles that fit
 * the buffer; per group, passes of activation rows (whole quads), and per
 * pass each tile meets each quad of it. */
AI void batch_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, int j0, int j1,
                   kq_shape sh) {
    hexa buf[BATCH_HEXAS] __attribute__((aligned(64)));
    const int nb = w->k / 32, cnt = nb % 16, packed = w->packed != NULL;
    const int tile_hexas = 4 * (nb / 16) + (cnt + 3) / 4;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    const quad_tail *qts = (const quad_tail *)xt;
    int pass = (int)(PASS_BYTES / xq_row) & ~3;
    if (pass < 4) pass = 4;
    /* rows: >= 4 (kq_lanes); a call of one pass (a server step) meets each
     * tile once: a tile at a time, its buffer in L1, the weights streamed
     * (kq_prefetch_ahead) */
    const int group = m <= pass ? 4 : 4 * (BATCH_HEXAS / tile_hexas);
    for (int g0 = j0; g0 < j1; g0 += group) {
        const int g1 = g0 + group < j1 ? g0 + group : j1, nt = (g1 - g0 + 3) / 4;
        for (int t = 0; t < nt; t++)
            unpack_tile(base, w->row_bytes, g0 + 4 * t, g1, nb, packed, sh, buf + (size_t)t * tile_hexas,
                        group == 4 ? w->n : 0);
        for (int i0 = 0; i0 < m; i0 += pass) {
            const int i1 = i0 + pass < m ? i0 + pass : m;
            for (int t = 0; t < nt; t++) {
                const int j = g0 + 4 * t, nj = g1 - j < 4 ? g1 - j : 4;
                const __mmask8 live = (__mmask8)((1u << nj) - 1);
                for (int i = i0; i < i1; i += 4) {
                    const int nr = i1 - i < 4 ? i1 - i : 4;
                    const __m512 Y = tile_quad(buf + (size_t)t * tile_hexas, nb, xq + (size_t)i * xq_row, xq_row, nr,
                                               qts + (size_t)(i / 4) * cnt, sh);
                    store_quad(Y, y + (size_t)i * w->n + j, (size_t)w->n, nr, live);
                }
            }
        }
    }
}

_Static_assert(sizeof(quad_tail) == KVS_KQ_QUAD_BLOCK_BYTES, "kvs_kq_quads_bytes sizes quad_tail");

/* Rows [0, m) of a call of m_call (rows from a multiple of 4): their
 * quads' tails into xt, where a call of several rows on the 16-lane layout
 * (kq_lanes) has a tail. Once a call, so every column chunk of every
 * thread reads them (built in the kernel, per chunk of 16 columns and
 * pass, they cost a quarter of SmolLM2's k = 576 calls). */
void kvs_kq_avx512_prep_quads(int k, const uint8_t *xq, size_t xq_row, int m, int m_call, uint8_t *xt) {
    const int nb = k / 32, cnt = nb % 16;
    if (!cnt || !kq_lanes(k, m_call)) return;
    for (int i = 0; i < m; i += 4) {
        const uint8_t *xr[4];
        for (int q = 0; q < 4; q++) xr[q] = xq + (size_t)(i + q < m ? i + q : i) * xq_row;
        quad_tails(xr, m - i < 4 ? m - i : 4, nb, (quad_tail *)xt + (size_t)(i / 4) * cnt);
    }
}

/* One batch function per type, compiled on its own with the type's constants. */
#define KQ_BATCH_NAME(name) kvs_kq_avx512_batch_##name
KQ_SHAPES(KQ_BATCH_FN)

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
