/*
 * AVX-512 matmul for one activation row (decode) and for Q4 calls of up to
 * 12 rows (a batch of streams), bit-identical to the scalar reference like
 * every path (kernels_impl.h). Here weight bytes are amortized over few
 * activation rows or none, so nothing is prepared into memory:
 *  - Q4_0 / Q4_1: 16 weight rows per tile; full groups lane = block, from
 *    the packed rows (pack.c, as loaded) or with the rearrangement fused
 *    into the dot, shared by the rows; one tree per row for its 16 outputs;
 *    tail blocks with lane = weight row (two packed 8-row tiles' transposed
 *    tails, or gathered from the GGUF rows);
 *    up to 4 rows in registers (few_q4), 5..12 in a loop (many_q4). The
 *    prepared tiles of matmul_avx512.c cost as much as 2 calls of one row at
 *    m = 2 (the preparation is paid per call) and more than many_q4 up to
 *    m = 12 (8 streams of SmolLM2 decode: +13%);
 *  - Q8_0 (the output head): lane = weight row for every block, natural
 *    32-byte loads, a transposed integer reduction per pair of blocks; x in
 *    natural order comes from the quantizer (kvs_mm_call.xn).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2")
#endif

#include "kernels/avx512_util.h"

/* ------------------------------------------------------------ m = 1 (decode) */

/* Weight rows the decode paths prefetch ahead: weights stream from L3 or
 * DRAM once per token, and the hardware prefetcher alone leaves the m = 1
 * loops waiting (measured: +15% decode tokens/s at one thread). */
#ifndef KVS_M1_PF_ROWS
#define KVS_M1_PF_ROWS 16
#endif
#ifndef KVS_M1_Q8_PF_ROWS
#define KVS_M1_Q8_PF_ROWS 16
#endif

/* Q4_0 / Q4_1 calls of up to KVS_FEW_MAX_M activation rows take few_q4
 * (rows in registers), up to KVS_MANY_MAX_M many_q4; more rows take the
 * prepared tiles of matmul_avx512.c. */
#ifndef KVS_FEW_MAX_M
#define KVS_FEW_MAX_M 4
#endif
#ifndef KVS_MANY_MAX_M
#define KVS_MANY_MAX_M 12
#endif
#if KVS_MANY_MAX_M < KVS_FEW_MAX_M
#error "KVS_MANY_MAX_M (many_q4's rows) must be at least KVS_FEW_MAX_M (few_q4's)"
#endif

/* Tree input slot of weight row rho so that tree16x16 puts it in lane rho
 * (slot o lands in lane 4 (o % 4) + o / 4: an involution). */
static inline int slot_of(int rho) { return 4 * (rho % 4) + rho / 4; }

/* Tail block blk (of weight row 0; rows at roff) of the live rows, lane =
 * weight row: W as unpack_q4_group, gathered. */
AI void gather_q4_tail(const uint8_t *blk, __m512i roff, __mmask16 live, int q41, __m512i W[8], __m512 *dw,
                       __m512 *mw) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk, 1);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512i q = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk + (q41 ? 4 : 2) + 4 * r, 1);
        W[2 * r] = _mm512_and_si512(q, lo4);
        W[2 * r + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
    }
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    *mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}

/* One activation row's full group against W (lane = block): acc + the
 * blocks' dw * dx * dot (+ mw * sx for Q4_1), in the reference's order. */
AI __m512 row_q4_group(const __m512i W[8], __m512 dw, __m512 mw, const uint8_t *gi, int q41, __m512 acc) {
    __m512i ha = _mm512_setzero_si512(), hb = _mm512_setzero_si512(), lb = _mm512_setzero_si512();
    /* Q4_0: the trailer's -8 sum Q turns sum q Q into sum (q - 8) Q */
    __m512i la = q41 ? _mm512_setzero_si512() : _mm512_loadu_si512(gi + KVS_XQ_GROUP_QS + 128);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        ha = _mm512_dpbusd_epi32(ha, W[2 * r], _mm512_loadu_si512(gi + 128 * r));
        hb = _mm512_dpbusd_epi32(hb, W[2 * r + 1], _mm512_loadu_si512(gi + 128 * r + 64));
        la = _mm512_dpbusd_epi32(la, W[2 * r], _mm512_loadu_si512(gi + KVS_XQ_PLANE + 128 * r));
        lb = _mm512_dpbusd_epi32(lb, W[2 * r + 1], _mm512_loadu_si512(gi + KVS_XQ_PLANE + 128 * r + 64));
    }
    __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(ha, hb), 8), _mm512_add_epi32(la, lb));
    __m512 dx = _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), acc);
    if (q41) acc = _mm512_fmadd_ps(mw, _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS + 64), acc);
    return acc;
}

/* Activation row sub of a quad's tail block qt against W (lane = weight
 * row): r + the block's dw * dx * dot (+ mw * sx for Q4_1). */
AI __m512 row_q4_tail(const __m512i W[8], __m512 dw, __m512 mw, const uint8_t *qt, int sub, int q41, __m512 r) {
    const uint8_t *ql = qt + KVS_XQ_TAIL_PLANE;
    __m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        h = _mm512_dpbusd_epi32(h, W[2 * q], _mm512_set1_epi32(*(const int32_t *)(qt + 32 * q + 4 * sub)));
        h = _mm512_dpbusd_epi32(h, W[2 * q + 1], _mm512_set1_epi32(*(const int32_t *)(qt + 32 * q + 16 + 4 * sub)));
        l = _mm512_dpbusd_epi32(l, W[2 * q], _mm512_set1_epi32(*(const int32_t *)(ql + 32 * q + 4 * sub)));
        l = _mm512_dpbusd_epi32(l, W[2 * q + 1], _mm512_set1_epi32(*(const int32_t *)(ql + 32 * q + 16 + 4 * sub)));
    }
    __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
    if (!q41) isum = _mm512_add_epi32(isum, _mm512_set1_epi32(*(const int32_t *)(qt + KVS_XQ_TAIL_C + 4 * sub)));
    __m512 dx = _mm512_set1_ps(*(const float *)(qt + KVS_XQ_TAIL_D + 4 * sub));
    r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), r);
    if (q41) r = _mm512_fmadd_ps(mw, _mm512_set1_ps(*(const float *)(qt + KVS_XQ_TAIL_S + 4 * sub)), r);
    return r;
}

/* Prefetches the row KVS_M1_PF_ROWS rows further, line by line (past the
 * matrix these are harmless hints). */
AI void prefetch_row_ahead(const uint8_t *row, size_t row_bytes) {
    const uintptr_t pf0 = (uintptr_t)row + KVS_M1_PF_ROWS * row_bytes;
    for (uintptr_t a = pf0 & ~(uintptr_t)63; a < pf0 + row_bytes; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/* Byte offsets of weight rows 0..15 (gather indices, lane = weight row). */
AI __m512i rows_offsets(size_t row_bytes) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)row_bytes));
}

/* Tail block t of the 16 weight rows j0.. as gather_q4_tail gives it: from
 * the packed tiles' transposed tails (rows j0..j0+7 and j0+8..j0+15, two
 * whole tiles: lane = row, two 32-byte halves per vector) where the 16 rows
 * are both whole tiles, else gathered from the GGUF rows. */
AI void q4_tail(const kvs_wmat *w, int j0, int nr, int ng, int t, int q41, __m512i W[8], __m512 *dw, __m512 *mw) {
    const int bs = q41 ? 20 : 18;
    if (w->packed && nr == 16 && kvs_packed_tiled(w, j0 + 15) && j0 % KVS_PACK_TILE == 0) {
        const uint8_t *a = kvs_packed_tile_tail(w, j0) + (size_t)t * KVS_PACK_TILE * bs;
        const uint8_t *b = kvs_packed_tile_tail(w, j0 + KVS_PACK_TILE) + (size_t)t * KVS_PACK_TILE * bs;
        const __m512i lo4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 32 * v))),
                                                 _mm256_loadu_si256((const __m256i *)(b + 32 * v)), 1);
            W[2 * v] = _mm512_and_si512(q, lo4);
            W[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
        }
        const __m256i d = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 128))),
                                                  _mm_loadu_si128((const __m128i *)(b + 128)), 1);
        *dw = _mm512_cvtph_ps(d);
        if (q41) {
            const __m256i mm = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 144))),
                                                       _mm_loadu_si128((const __m128i *)(b + 144)), 1);
            *mw = _mm512_cvtph_ps(mm);
        } else {
            *mw = _mm512_setzero_ps();
        }
        return;
    }
    const uint8_t *base = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
    gather_q4_tail(base + (size_t)(ng * 16 + t) * bs, rows_offsets(w->row_bytes), (__mmask16)((1u << nr) - 1), q41, W,
                   dw, mw);
}

/* Up to 4 activation rows (the rows of one quad: a decode step, or a batch of
 * up to 4 streams) against up to 16 Q4 weight rows [j0, j0 + nr): full
 * groups lane = block (the rearrangement fused into the dot, nothing stored,
 * and shared by the rows), then one tree per activation row for its 16
 * outputs, then the tail blocks with lane = weight row (gathered once for
 * the rows), each tail block adding its fma (and the Q4_1 min fma) in order.
 * Every block's integer dot is 256 * dot(w, hi) + dot(w, lo) (quant.h): the
 * unpacked weight nibbles serve both planes and every row (Q4_1's 20-byte
 * blocks by dword permutes, gather5; Q4_0's 18-byte ones by byte permutes,
 * gather18). mr and q41 are constants in each copy (few_q4_rows). */
AI void few_q4(const kvs_wmat *w, int j0, int nr, const uint8_t *xq, size_t xq_row, const uint8_t *quad,
               int mr, int q41, float *y, size_t ldy) {
    const int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    __m512 C[4][16];
    for (int i = 0; i < mr; i++)
        for (int o = 0; o < 16; o++) C[i][o] = _mm512_setzero_ps();
    for (int rho = 0; rho < nr; rho++) {
        const uint8_t *row = q4_row(w, j0 + rho);
        prefetch_row_ahead(row, w->row_bytes);
        __m512 acc[4];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) acc[i] = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            __m512i W[8];
            __m512 dw, mw;
            unpack_q4_row_group(w, row, g, q41, W, &dw, &mw);
            const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) acc[i] = row_q4_group(W, dw, mw, grp + (size_t)i * xq_row, q41, acc[i]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) C[i][slot_of(rho)] = acc[i];
    }
    __m512 R[4];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) R[i] = tree16x16(C[i]); /* lane rho = weight row j0 + rho */
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) {
        __m512i W[8];
        __m512 dw, mw;
        q4_tail(w, j0, nr, ng, t, q41, W, &dw, &mw);
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) R[i] = row_q4_tail(W, dw, mw, qt, i, q41, R[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) _mm512_mask_storeu_ps(y + (size_t)i * ldy + j0, live, R[i]);
}

/* 5..KVS_MANY_MAX_M activation rows (a batch of more streams) against up to
 * 16 Q4 weight rows: as few_q4, each group unpacked once for all the rows
 * (the prepared tiles of matmul_avx512.c pay a stored preparation per call,
 * which at a few rows cost as much as the dots); the rows' accumulators and
 * tree inputs live in memory, the rows run in a loop. */
AI void many_q4(const kvs_wmat *w, int j0, int nr, const kvs_mm_call *c, int q41, float *y, size_t ldy) {
    const int m = c->m;
    const int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    __m512 C[KVS_MANY_MAX_M][16], acc[KVS_MANY_MAX_M];
    for (int i = 0; i < m; i++)
        for (int rho = nr; rho < 16; rho++) C[i][slot_of(rho)] = _mm512_setzero_ps();
    for (int rho = 0; rho < nr; rho++) {
        const uint8_t *row = q4_row(w, j0 + rho);
        prefetch_row_ahead(row, w->row_bytes);
        for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            __m512i W[8];
            __m512 dw, mw;
            unpack_q4_row_group(w, row, g, q41, W, &dw, &mw);
            const uint8_t *grp = c->xq + (size_t)g * KVS_XQ_GROUP_BYTES;
            for (int i = 0; i < m; i++) acc[i] = row_q4_group(W, dw, mw, grp + (size_t)i * c->xq_row, q41, acc[i]);
        }
        for (int i = 0; i < m; i++) C[i][slot_of(rho)] = acc[i];
    }
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    __m512i TW[KVS_XQ_GROUP][8];
    __m512 Tdw[KVS_XQ_GROUP], Tmw[KVS_XQ_GROUP];
    for (int t = 0; t < nt; t++) q4_tail(w, j0, nr, ng, t, q41, TW[t], &Tdw[t], &Tmw[t]);
    for (int i = 0; i < m; i++) {
        __m512 R = tree16x16(C[i]); /* lane rho = weight row j0 + rho */
        const uint8_t *quad = c->xq_tail + (size_t)(i / 4) * c->xq_quad;
        for (int t = 0; t < nt; t++) R = row_q4_tail(TW[t], Tdw[t], Tmw[t], quad + (size_t)t * KVS_XQ_TAIL_BYTES, i % 4, q41, R);
        _mm512_mask_storeu_ps(y + (size_t)i * ldy + j0, live, R);
    }
}

#define FEW_CASE(a, b) \
    case (a) * 2 + (b): few_q4(w, j0, nr, xq, xq_row, quad, a, b, y, ldy); break;

static void few_q4_rows(const kvs_wmat *w, int j0, int nr, const uint8_t *xq, size_t xq_row, const uint8_t *quad,
                        int mr, float *y, size_t ldy) {
    switch (mr * 2 + (w->type == KVS_TYPE_Q4_1)) { /* both constant in each copy */
        FEW_CASE(1, 0) FEW_CASE(1, 1) FEW_CASE(2, 0) FEW_CASE(2, 1)
        FEW_CASE(3, 0) FEW_CASE(3, 1) FEW_CASE(4, 0) FEW_CASE(4, 1)
    }
}

static void many_q4_rows(const kvs_wmat *w, int j0, int nr, const kvs_mm_call *c) {
    if (w->type == KVS_TYPE_Q4_1) many_q4(w, j0, nr, c, 1, c->y, w->n); /* q41 constant in each copy */
    else many_q4(w, j0, nr, c, 0, c->y, w->n);
}

/* Q8_0, one activation row: lane = weight row for every block. Per pair of
 * blocks, each weight row's 64 q bytes (two 32-byte loads) meet x in natural
 * order: vpdpbusd(w + 128, hi), shifted by 8, then vpdpbusd(w + 128, lo) on
 * the same accumulator leaves 8 partial lanes per block of
 * sum (w + 128) Q, which a transposed integer reduction turns into one
 * vector per block over the 16 rows; subtracting 128 * sum(Q) gives the
 * exact block dot. Float work is then lane-wise: chains as vectors C[b % 16]
 * for full-group blocks, tree, then tail blocks in order.
 * xh, xl: (nb, 32) s8 hi and lo of x; xs: 128 * sum Q per block. */
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

static void m1_q8(const kvs_wmat *w, int j0, int nr, const int8_t *xh, const int8_t *xl, const int32_t *xs,
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
        __m512i XH = two ? _mm512_loadu_si512(xh + 32 * b0)
                         : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xh + 32 * b0)));
        __m512i XL = two ? _mm512_loadu_si512(xl + 32 * b0)
                         : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xl + 32 * b0)));
        __m512i A[16];
#pragma GCC unroll 16
        for (int rho = 0; rho < 16; rho++) {
            if (rho < nr) {
                const uint8_t *blk = base + (size_t)rho * w->row_bytes + (size_t)b0 * 34 + 2;
                /* the same bytes of the next tile's rows (16 rows further) */
                _mm_prefetch((const char *)(blk + KVS_M1_Q8_PF_ROWS * w->row_bytes), _MM_HINT_T0);
                __m512i W = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)blk));
                if (two) W = _mm512_inserti64x4(W, _mm256_loadu_si256((const __m256i *)(blk + 34)), 1);
                W = _mm512_xor_si512(W, c80);
                __m512i a = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), W, XH), 8);
                A[rho] = _mm512_dpbusd_epi32(a, W, XL);
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

int kvs_avx512_matmul_m1(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    if (!c->xq || w->k > 16384) return 0;
    if (c->m > (w->type == KVS_TYPE_Q8_0 ? 1 : KVS_MANY_MAX_M)) return 0;
    if (w->type == KVS_TYPE_Q8_0) {
        if (!c->xn) return 0; /* not quantized by the AVX-512 quantizer: the tile path */
        const int nb = w->k / KVS_QK;
        const int8_t *xh = (const int8_t *)c->xn, *xl = xh + 32 * nb;
        const int32_t *xs = (const int32_t *)(c->xn + 64 * nb);
        const float *dx = (const float *)(c->xn + 68 * nb);
        for (int jt = j0; jt < j1; jt += 16) m1_q8(w, jt, j1 - jt < 16 ? j1 - jt : 16, xh, xl, xs, dx, c->y);
        return 1;
    }
    if (c->m > KVS_FEW_MAX_M) {
        for (int jt = j0; jt < j1; jt += 16) many_q4_rows(w, jt, j1 - jt < 16 ? j1 - jt : 16, c);
        return 1;
    }
    for (int jt = j0; jt < j1; jt += 16)
        for (int i0 = 0; i0 < c->m; i0 += 4)
            few_q4_rows(w, jt, j1 - jt < 16 ? j1 - jt : 16, c->xq + (size_t)i0 * c->xq_row, c->xq_row,
                        c->xq_tail + (size_t)(i0 / 4) * c->xq_quad, c->m - i0 < 4 ? c->m - i0 : 4,
                        c->y + (size_t)i0 * w->n, w->n);
    return 1;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
