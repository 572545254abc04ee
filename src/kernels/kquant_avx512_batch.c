/*
 * AVX-512 VNNI Q5_0 / Q5_1 / K-quant kernels for several activation rows
 * (prefill, the server's batch): the canonical arithmetic of kquant.h bit
 * for bit, on groups of 16 blocks ("hexadecets").
 *
 * Lane l of a zmm is block g0 + l of a hexadecet (g0 a multiple of 16), so
 * its chain b % 16 is lane l: one register holds a weight row's 16 chains
 * and each float step of 16 blocks is one instruction, in the reference's
 * order. The activation rows are in the 16-lane layout (kq_quantize_lanes:
 * per hexadecet a hi plane of 8 vectors, vector r lane l = elements
 * 4r..4r+3 of block l, then the lo plane), the weights' unsigned integers
 * q_w + off alike (unpack_tile: the block pairs of kquant_avx512_pairs.h
 * transposed), so vpdpbusd leaves each block's integer dot in its lane: 16
 * of them (hi and lo planes) per weight row and hexadecet, where AVX2's
 * vpmaddubsw path needs ~90 instructions for the same 16 blocks
 * (kquant_avx2_batch.c). Integers are exact in any order; I = 256 * (w .
 * hi) + (w . lo) - off * s, as in kquant_avx2_octet.h.
 *
 * A last hexadecet of <= 4 (<= 8) blocks holds 4 (2) weight rows, each in
 * its own lanes, against activation lanes the quantizer copied (Q5_0 at k =
 * 640: 16 + 4 blocks, 1.25 hexadecets of work a row, not 2); each row's
 * float steps take its lanes back to lanes 0.. first. Weight rows go by
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

/* The tile of weight rows [j, j + 4) (rows past j1 repeat the last:
 * computed, not stored): row q's full hexadecets at tb[q * nfull + h], then
 * the last hexadecet's (cnt blocks) ntail = 4 span / 16 hexas, hexa t
 * holding rows t * (16 / span) + i in lanes [i * span, i * span + span).
 * pf_n: the matrix's rows where the call streams them (rows fetched
 * KQ_PF_ROWS ahead), else 0. */
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
            unpack_hexa(src, b0, n, 2, packed, sh, &tb[q * nfull + h]);
        }
    }
    if (!cnt) return;
    hexa *tt = tb + 4 * nfull;
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
}

/* Exact integer sums of nw weight hexas w[q] against activation hexadecet
 * xo (hi plane vector r at xo + 64 r, lo plane at xo + 512 + 64 r): lane l
 * of I[q][0] is block l over both halves (split scales: half 0, and
 * I[q][1] half 1). 8 vpdpbusd chains whatever nw (4 / nw a row: a merged
 * tail's one hexa on two chains waited on their latency); integers, so
 * the split keeps the values. */
AI __m512i chains_sum(__m512i H[4], __m512i L[4], int nc) {
    __m512i h = H[0], l = L[0];
    for (int c = 1; c < nc; c++) {
        h = _mm512_add_epi32(h, H[c]);
        l = _mm512_add_epi32(l, L[c]);
    }
    for (int c = 0; c < nc; c++) H[c] = L[c] = _mm512_setzero_si512();
    return _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
}

AI void hexa_sums(const hexa *const w[4], int nw, const int8_t *xo, kq_shape sh, __m512i I[4][2]) {
    const int nc = 4 / nw; /* chains a weight hexa */
    /* each chain starts from zero at its first step (r < nc), not from a
     * zeroed array: GCC turned the zeroing loop into a memset call of 2 KiB
     * per tile and row, which kept the chains in memory (11% of gemma3's
     * prefill at one thread) */
    __m512i H[4][4], L[4][4];
    const __m512i z = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        const __m512i xh = in_register(_mm512_loadu_si512(xo + 64 * r)), xl = in_register(_mm512_loadu_si512(xo + 512 + 64 * r));
#pragma GCC unroll 4
        for (int q = 0; q < nw; q++) {
            const __m512i wv = in_register(_mm512_load_si512(&w[q]->qu[r]));
            H[q][r % nc] = _mm512_dpbusd_epi32(r < nc ? z : H[q][r % nc], wv, xh);
            L[q][r % nc] = _mm512_dpbusd_epi32(r < nc ? z : L[q][r % nc], wv, xl);
        }
        if (sh.split && r == 3)
#pragma GCC unroll 4
            for (int q = 0; q < nw; q++) I[q][0] = chains_sum(H[q], L[q], nc);
    }
#pragma GCC unroll 4
    for (int q = 0; q < nw; q++) {
        I[q][sh.split] = chains_sum(H[q], L[q], nc);
        if (!sh.split) I[q][1] = _mm512_setzero_si512();
    }
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

/* The last hexadecet (cnt blocks from g0) of a tile's four rows: its
 * 4 span / 16 hexas tt against activation hexadecet xo. A hexa shared by
 * 2 or 4 rows (span 8 or 4: row q in lanes [(q % per) span, ...), chains
 * 0..cnt - 1) takes its steps once, on the rows' chains gathered into the
 * same lanes (128-bit chunk shuffles), which then go back; the values and
 * order of each chain's steps are those of a row alone. */
AI void tail_steps(__m512 A[4], const hexa *tt, const int8_t *xo, const kvs_kq_trailer *tr, int g0, int cnt, int span,
                   kq_shape sh) {
    const int per = 16 / span; /* rows a hexa holds */
    const hexa *w[4] = {tt, tt + 1, tt + 2, tt + 3};
    __m512i I[4][2];
    hexa_sums(w, 4 / per, xo, sh, I);
    const hx_act a = hx_act_of(tr, g0, sh);
    const __mmask16 k = (__mmask16)((1u << cnt) - 1);
    if (per == 1) {
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I[q], &a, sh);
            A[q] = hx_apply(A[q], &op, k, sh);
        }
    } else if (per == 2) { /* rows 2 t, 2 t + 1: chunks 0-1 of each */
#pragma GCC unroll 2
        for (int t = 0; t < 2; t++) {
            const hx_ops op = hx_ops_of(w[t]->dw0, w[t]->dw1, w[t]->mw, I[t], &a, sh);
            __m512 C = _mm512_shuffle_f32x4(A[2 * t], A[2 * t + 1], 0x44);
            C = hx_apply(C, &op, (__mmask16)(k | k << 8), sh);
            A[2 * t] = _mm512_mask_shuffle_f32x4(A[2 * t], 0x00ff, C, C, 0x04);
            A[2 * t + 1] = _mm512_mask_shuffle_f32x4(A[2 * t + 1], 0x00ff, C, C, 0x0e);
        }
    } else { /* four rows: chunk 0 of each */
        const hx_ops op = hx_ops_of(w[0]->dw0, w[0]->dw1, w[0]->mw, I[0], &a, sh);
        const __m512 t01 = _mm512_shuffle_f32x4(A[0], A[1], 0x00), t23 = _mm512_shuffle_f32x4(A[2], A[3], 0x00);
        __m512 C = _mm512_shuffle_f32x4(t01, t23, 0x88);
        C = hx_apply(C, &op, (__mmask16)(k * 0x1111u), sh);
        A[0] = _mm512_mask_shuffle_f32x4(A[0], 0x000f, C, C, 0);
        A[1] = _mm512_mask_shuffle_f32x4(A[1], 0x000f, C, C, 1);
        A[2] = _mm512_mask_shuffle_f32x4(A[2], 0x000f, C, C, 2);
        A[3] = _mm512_mask_shuffle_f32x4(A[3], 0x000f, C, C, 3);
    }
}

/* The four outputs of tile tb (unpack_tile) for activation row xr (nb
 * blocks, the 16-lane layout): full hexadecets in order, each row's
 * accumulator in a register, then the tail's steps on lanes [0, cnt). */
AI __m128 tile_row(const hexa *tb, int nb, const uint8_t *xr, kq_shape sh) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xr, 32 * nb);
    const int nfull = nb / 16, cnt = nb % 16;
    __m512 A[4];
    for (int q = 0; q < 4; q++) A[q] = _mm512_setzero_ps();
    __m512i I[4][2];
    for (int h = 0; h < nfull; h++) {
        const hexa *w[4] = {tb + h, tb + nfull + h, tb + 2 * nfull + h, tb + 3 * nfull + h};
        hexa_sums(w, 4, (const int8_t *)xr + (size_t)h * 1024, sh, I);
        const hx_act a = hx_act_of(&tr, 16 * h, sh);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I[q], &a, sh);
            A[q] = hx_apply(A[q], &op, (__mmask16)0xffff, sh);
        }
    }
    if (cnt) { /* span a literal in each call: the rows' loop unrolled, the operands in registers */
        const int8_t *xo = (const int8_t *)xr + (size_t)nfull * 1024;
        const hexa *tt = tb + 4 * nfull;
        switch (kq_tail_span(cnt, 16)) {
        case 4: tail_steps(A, tt, xo, &tr, 16 * nfull, cnt, 4, sh); break;
        case 8: tail_steps(A, tt, xo, &tr, 16 * nfull, cnt, 8, sh); break;
        default: tail_steps(A, tt, xo, &tr, 16 * nfull, cnt, 16, sh); break;
        }
    }
    return tree16x4_512(A[0], A[1], A[2], A[3]);
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
                I0[q][0] = chains_sum(&H0[q], &L0[q], 1);
                I1[q][0] = chains_sum(&H1[q], &L1[q], 1);
            }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        I0[q][sh.split] = chains_sum(&H0[q], &L0[q], 1);
        I1[q][sh.split] = chains_sum(&H1[q], &L1[q], 1);
        if (!sh.split) I0[q][1] = I1[q][1] = _mm512_setzero_si512();
    }
}

/* tile_row for two activation rows (xr0, xr1): their full hexadecets
 * together (hexa_sums2), each row's tail and tree as tile_row's. */
AI void tile_rows2(const hexa *tb, int nb, const uint8_t *xr0, const uint8_t *xr1, kq_shape sh, __m128 *y0, __m128 *y1) {
    const kvs_kq_trailer tr0 = kvs_kq_trailer_of(xr0, 32 * nb), tr1 = kvs_kq_trailer_of(xr1, 32 * nb);
    const int nfull = nb / 16, cnt = nb % 16;
    __m512 A0[4], A1[4];
    for (int q = 0; q < 4; q++) A0[q] = A1[q] = _mm512_setzero_ps();
    __m512i I0[4][2], I1[4][2];
    for (int h = 0; h < nfull; h++) {
        const hexa *w[4] = {tb + h, tb + nfull + h, tb + 2 * nfull + h, tb + 3 * nfull + h};
        hexa_sums2(w, (const int8_t *)xr0 + (size_t)h * 1024, (const int8_t *)xr1 + (size_t)h * 1024, sh, I0, I1);
        const hx_act a0 = hx_act_of(&tr0, 16 * h, sh), a1 = hx_act_of(&tr1, 16 * h, sh);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const hx_ops op0 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I0[q], &a0, sh);
            A0[q] = hx_apply(A0[q], &op0, (__mmask16)0xffff, sh);
            const hx_ops op1 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I1[q], &a1, sh);
            A1[q] = hx_apply(A1[q], &op1, (__mmask16)0xffff, sh);
        }
    }
    if (cnt) {
        const hexa *tt = tb + 4 * nfull;
        const int8_t *xo0 = (const int8_t *)xr0 + (size_t)nfull * 1024, *xo1 = (const int8_t *)xr1 + (size_t)nfull * 1024;
        switch (kq_tail_span(cnt, 16)) {
        case 4: tail_steps(A0, tt, xo0, &tr0, 16 * nfull, cnt, 4, sh); tail_steps(A1, tt, xo1, &tr1, 16 * nfull, cnt, 4, sh); break;
        case 8: tail_steps(A0, tt, xo0, &tr0, 16 * nfull, cnt, 8, sh); tail_steps(A1, tt, xo1, &tr1, 16 * nfull, cnt, 8, sh); break;
        default: tail_steps(A0, tt, xo0, &tr0, 16 * nfull, cnt, 16, sh); tail_steps(A1, tt, xo1, &tr1, 16 * nfull, cnt, 16, sh); break;
        }
    }
    *y0 = tree16x4_512(A0[0], A0[1], A0[2], A0[3]);
    *y1 = tree16x4_512(A1[0], A1[1], A1[2], A1[3]);
}

/* Several activation rows (16-lane layout): columns [j0, j1) by groups of
 * tiles that fit the buffer; per group, passes of activation rows, and per
 * pass each tile meets each row of it. */
AI void batch_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, float *y, int j0, int j1, kq_shape sh) {
    hexa buf[BATCH_HEXAS] __attribute__((aligned(64)));
    const int nb = w->k / 32, packed = w->packed != NULL;
    const int tile_hexas = 4 * (nb / 16) + (nb % 16 ? 4 * kq_tail_span(nb % 16, 16) / 16 : 0);
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    int pass = (int)(PASS_BYTES / xq_row) & ~1; /* pairs of rows (tile_rows2) */
    if (pass < 2) pass = 2;
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
                int i = i0;
                for (; i + 1 < i1; i += 2) {
                    __m128 y0, y1;
                    tile_rows2(buf + (size_t)t * tile_hexas, nb, xq + (size_t)i * xq_row, xq + (size_t)(i + 1) * xq_row,
                               sh, &y0, &y1);
                    _mm_mask_storeu_ps(y + (size_t)i * w->n + j, live, y0);
                    _mm_mask_storeu_ps(y + (size_t)(i + 1) * w->n + j, live, y1);
                }
                if (i < i1)
                    _mm_mask_storeu_ps(y + (size_t)i * w->n + j, live,
                                       tile_row(buf + (size_t)t * tile_hexas, nb, xq + (size_t)i * xq_row, sh));
            }
        }
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
