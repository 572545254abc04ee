/*
 * AVX-512 matmul for one activation row (decode) and for calls of up to 12
 * rows (a batch of streams), Q4_0 / Q4_1 / Q8_0, bit-identical to the scalar
 * reference like every path (kernels_impl.h). Here weight bytes are
 * amortized over few activation rows or none, so nothing is prepared into
 * memory: 16 weight rows per tile (one row: 8 from each of two streams,
 * KVS_M1_TWO_STREAMS); full groups lane = block
 * (unpack_row_group: from the packed rows, pack.c, as loaded, or with the
 * rearrangement fused into the dot), shared by the rows; one tree per row
 * for its 16 outputs; tail blocks with lane = weight row (two packed 8-row
 * tiles' transposed tails, or gathered from the GGUF rows); up to 4 rows in
 * registers (few_rows), 5..12 in a loop (many_rows). The prepared tiles of
 * matmul_avx512.c cost as much as 2 calls of one row at m = 2 (the
 * preparation is paid per call) and more than many_rows up to m = 12
 * (8 streams of SmolLM2 decode: +13%).
 *
 * Q8_0 weights are the s8 operand of vpdpbusd and the call's xq bytes (x +
 * 128, quant.h) the u8 one, a group's corr (prep_grp) removing the offset;
 * Q4 nibbles are the u8 operand and xq the s8 one.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2")
#endif

#include "kernels/avx512_util.h"
#include "kernels/prefetch_rows.h"

/* ------------------------------------------------------------ m = 1 (decode) */

/* Calls of up to KVS_FEW_MAX_M activation rows take few_rows (rows in
 * registers), up to KVS_MANY_MAX_M many_rows; more rows take the
 * prepared tiles of matmul_avx512.c. */
#ifndef KVS_FEW_MAX_M
#define KVS_FEW_MAX_M 4
#endif
#ifndef KVS_MANY_MAX_M
#define KVS_MANY_MAX_M 12
#endif

/* One activation row (a decode step) reads a thread's columns (of at least
 * KVS_M1_TWO_MIN_ROWS rows) as two streams, the first and the second half
 * of its range: a few_rows tile is 8 rows of each, taken in turn. One
 * stream waited on its misses: the m = 1 kernel spent ~70% of its samples
 * on the instruction after a prefetch, and a plain read of one stream ran
 * at 70-83% of four (bench/roofline_probe with READ_STREAMS 1). Paired
 * runs on the AMX Xeon (session 44), one
 * stream / two: SmolLM2 decode Q8_0 1.13x at 1 thread and 1.06x at 2, Q4_0
 * 1.12x / 1.05x, Q4_1 1.07x / 1.04x, gemma3 (its Q8_0 head and matrices)
 * 1.06x / 1.08x. Tiles of 16 rows from two streams 16 rows at a time (not
 * row by row) lost 7%; 4 activation rows (4 streams of a server step) lost
 * too (Q8_0 0.90x, Q4_1 0.98x: more arithmetic per weight byte), so only
 * m = 1 takes it. KVS_M1_TWO_STREAMS=0 at build time turns it off. */
#ifndef KVS_M1_TWO_STREAMS
#define KVS_M1_TWO_STREAMS 1
#endif
#define KVS_M1_TWO_MIN_ROWS 64
#if KVS_MANY_MAX_M < KVS_FEW_MAX_M
#error "KVS_MANY_MAX_M (many_rows' rows) must be at least KVS_FEW_MAX_M (few_rows')"
#endif
#if KVS_FEW_MAX_M != 4 || KVS_MANY_MAX_M > 12
#error "few_rows_of has copies for 1..4 rows and many_rows_of for 5..12"
#endif

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

/* One activation row's full group against a Q4 group p (lane = block):
 * acc + the blocks' dw * dx * dot (+ mw * sx for Q4_1), in the reference's
 * order. */
AI __m512 row_q4_group(const prep_grp *p, const uint8_t *gi, int q41, __m512 acc) {
    __m512i ha = _mm512_setzero_si512(), hb = _mm512_setzero_si512(), lb = _mm512_setzero_si512();
    /* Q4_0: the trailer's -8 sum Q turns sum q Q into sum (q - 8) Q */
    __m512i la = q41 ? _mm512_setzero_si512() : _mm512_loadu_si512(gi + KVS_XQ_GROUP_QS + 128);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        ha = _mm512_dpbusd_epi32(ha, p->v[2 * r], _mm512_loadu_si512(gi + 128 * r));
        hb = _mm512_dpbusd_epi32(hb, p->v[2 * r + 1], _mm512_loadu_si512(gi + 128 * r + 64));
        la = _mm512_dpbusd_epi32(la, p->v[2 * r], _mm512_loadu_si512(gi + KVS_XQ_PLANE + 128 * r));
        lb = _mm512_dpbusd_epi32(lb, p->v[2 * r + 1], _mm512_loadu_si512(gi + KVS_XQ_PLANE + 128 * r + 64));
    }
    __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(ha, hb), 8), _mm512_add_epi32(la, lb));
    __m512 dx = _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(p->dw, dx), acc);
    if (q41) acc = _mm512_fmadd_ps(p->mw, _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS + 64), acc);
    return acc;
}

/* A Q8_0 group's close: acc + dw * dx * (256 * (ha + hb) + la + lb), the
 * hi and lo chains' exact integer sums. */
AI __m512 q8_group_fma(const prep_grp *p, __m512i ha, __m512i hb, __m512i la, __m512i lb, __m512 dx, __m512 acc) {
    const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(ha, hb), 8), _mm512_add_epi32(la, lb));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(p->dw, dx), acc);
}

/* The same for a Q8_0 group: xq (x + 128) the u8 operand, the weights s8,
 * corr the offset's share. */
AI __m512 row_q8_group(const prep_grp *p, const uint8_t *gi, __m512 acc) {
    __m512i ha = _mm512_setzero_si512(), hb = _mm512_setzero_si512(), la = p->corr, lb = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < 8; r += 2) {
        const uint8_t *x0 = gi + 64 * xq_of_q8[r], *x1 = gi + 64 * xq_of_q8[r + 1];
        ha = _mm512_dpbusd_epi32(ha, _mm512_loadu_si512(x0), p->v[r]);
        hb = _mm512_dpbusd_epi32(hb, _mm512_loadu_si512(x1), p->v[r + 1]);
        la = _mm512_dpbusd_epi32(la, _mm512_loadu_si512(x0 + KVS_XQ_PLANE), p->v[r]);
        lb = _mm512_dpbusd_epi32(lb, _mm512_loadu_si512(x1 + KVS_XQ_PLANE), p->v[r + 1]);
    }
    return q8_group_fma(p, ha, hb, la, lb, _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS), acc);
}

/* Two Q8_0 weight rows' groups p and q against one activation row's group:
 * each activation vector loaded once for both rows, row_q8_group's chains
 * and order per row (so its bits), eight chains in flight instead of four.
 * Q8_0's weights are ready in p->v as unpacked, so the two rows cost no
 * more registers than the chains; two Q4_1 groups (16 vectors, scales and
 * mins) left no room for them, and the same pairing measured nothing for
 * Q4 (m = 8 ffn_up 85.6 -> 87.5-89.9 us). Written out: the same steps
 * through arrays of chains (helpers shared with row_q8_group) compiled
 * 10% slower (the m = 8 head 2.85 -> 3.14 ms). */
AI void row_q8_group_pair(const prep_grp *p, const prep_grp *q, const uint8_t *gi, __m512 *ap, __m512 *aq) {
    const __m512i z = _mm512_setzero_si512();
    __m512i pha = z, phb = z, pla = p->corr, plb = z, qha = z, qhb = z, qla = q->corr, qlb = z;
#pragma GCC unroll 4
    for (int r = 0; r < 8; r += 2) {
        const uint8_t *x0 = gi + 64 * xq_of_q8[r], *x1 = gi + 64 * xq_of_q8[r + 1];
        const __m512i h0 = in_register(_mm512_loadu_si512(x0)), h1 = in_register(_mm512_loadu_si512(x1));
        const __m512i l0 = in_register(_mm512_loadu_si512(x0 + KVS_XQ_PLANE));
        const __m512i l1 = in_register(_mm512_loadu_si512(x1 + KVS_XQ_PLANE));
        pha = _mm512_dpbusd_epi32(pha, h0, p->v[r]);
        qha = _mm512_dpbusd_epi32(qha, h0, q->v[r]);
        phb = _mm512_dpbusd_epi32(phb, h1, p->v[r + 1]);
        qhb = _mm512_dpbusd_epi32(qhb, h1, q->v[r + 1]);
        pla = _mm512_dpbusd_epi32(pla, l0, p->v[r]);
        qla = _mm512_dpbusd_epi32(qla, l0, q->v[r]);
        plb = _mm512_dpbusd_epi32(plb, l1, p->v[r + 1]);
        qlb = _mm512_dpbusd_epi32(qlb, l1, q->v[r + 1]);
    }
    const __m512 dx = _mm512_loadu_ps(gi + KVS_XQ_GROUP_QS);
    *ap = q8_group_fma(p, pha, phb, pla, plb, dx, *ap);
    *aq = q8_group_fma(q, qha, qhb, qla, qlb, dx, *aq);
}

AI __m512 row_group(const prep_grp *p, const uint8_t *gi, int type, __m512 acc) {
    if (type == KVS_TYPE_Q8_0) return row_q8_group(p, gi, acc);
    return row_q4_group(p, gi, type == KVS_TYPE_Q4_1, acc);
}

/* Activation row sub of a quad's tail block qt against a tail block p of
 * the 16 weight rows (lane = weight row): r + the block's dw * dx * dot (+
 * mw * sx for Q4_1). */
AI __m512 row_tail(const prep_grp *p, const uint8_t *qt, int sub, int type, __m512 r) {
    const int q41 = type == KVS_TYPE_Q4_1, q8 = type == KVS_TYPE_Q8_0;
    const uint8_t *ql = qt + KVS_XQ_TAIL_PLANE;
    __m512i h = _mm512_setzero_si512(), l = q8 ? p->corr : _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) {
        /* Q4: W[v] pairs with xq vec v; Q8_0: q dword v with xq vec xq_of_q8[v] */
        const int xv = q8 ? xq_of_q8[v] : v;
        const __m512i xh = _mm512_set1_epi32(*(const int32_t *)(qt + 16 * xv + 4 * sub));
        const __m512i xl = _mm512_set1_epi32(*(const int32_t *)(ql + 16 * xv + 4 * sub));
        h = q8 ? _mm512_dpbusd_epi32(h, xh, p->v[v]) : _mm512_dpbusd_epi32(h, p->v[v], xh);
        l = q8 ? _mm512_dpbusd_epi32(l, xl, p->v[v]) : _mm512_dpbusd_epi32(l, p->v[v], xl);
    }
    __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
    if (type == KVS_TYPE_Q4_0) isum = _mm512_add_epi32(isum, _mm512_set1_epi32(*(const int32_t *)(qt + KVS_XQ_TAIL_C + 4 * sub)));
    __m512 dx = _mm512_set1_ps(*(const float *)(qt + KVS_XQ_TAIL_D + 4 * sub));
    r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(p->dw, dx), r);
    if (q41) r = _mm512_fmadd_ps(p->mw, _mm512_set1_ps(*(const float *)(qt + KVS_XQ_TAIL_S + 4 * sub)), r);
    return r;
}

/* Byte offsets from row j0 of the tile's weight rows (gather indices, lane
 * = weight row): lanes 0..7 rows j0.., lanes 8..15 rows jb.. (j0 + 8 where
 * the tile's rows are contiguous). */
AI __m512i rows_offsets(size_t row_bytes, int j0, int jb) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i row = _mm512_mask_add_epi32(lane, (__mmask16)0xff00, lane, _mm512_set1_epi32(jb - j0 - 8));
    return _mm512_mullo_epi32(row, _mm512_set1_epi32((int)row_bytes));
}

/* Whether the tile's 16 weight rows (j0.., jb..) are two whole packed tiles
 * (their tail blocks transposed, pack.c). */
AI int two_packed_tiles(const kvs_wmat *w, int j0, int jb, int nr) {
    return w->packed && nr == 16 && kvs_packed_tiled(w, j0 + 7) && kvs_packed_tiled(w, jb + 7) &&
           j0 % KVS_PACK_TILE == 0 && jb % KVS_PACK_TILE == 0;
}

/* Q4 tail block t of the 16 weight rows j0.. as gather_q4_tail gives it:
 * from the packed tiles' transposed tails (rows j0..j0+7 and j0+8..j0+15,
 * lane = row, two 32-byte halves per vector) where the 16 rows are both
 * whole tiles, else gathered from the GGUF rows. */
AI void q4_tail(const kvs_wmat *w, int j0, int jb, int nr, int ng, int t, int q41, prep_grp *p) {
    const int bs = q41 ? 20 : 18;
    p->corr = _mm512_setzero_si512();
    if (two_packed_tiles(w, j0, jb, nr)) {
        const uint8_t *a = kvs_packed_tile_tail(w, j0) + (size_t)t * KVS_PACK_TILE * bs;
        const uint8_t *b = kvs_packed_tile_tail(w, jb) + (size_t)t * KVS_PACK_TILE * bs;
        const __m512i lo4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 32 * v))),
                                                 _mm256_loadu_si256((const __m256i *)(b + 32 * v)), 1);
            p->v[2 * v] = _mm512_and_si512(q, lo4);
            p->v[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
        }
        const __m256i d = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 128))),
                                                  _mm_loadu_si128((const __m128i *)(b + 128)), 1);
        p->dw = _mm512_cvtph_ps(d);
        if (q41) {
            const __m256i mm = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 144))),
                                                       _mm_loadu_si128((const __m128i *)(b + 144)), 1);
            p->mw = _mm512_cvtph_ps(mm);
        } else {
            p->mw = _mm512_setzero_ps();
        }
        return;
    }
    const uint8_t *base = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
    gather_q4_tail(base + (size_t)(ng * 16 + t) * bs, rows_offsets(w->row_bytes, j0, jb), (__mmask16)((1u << nr) - 1), q41,
                   p->v, &p->dw, &p->mw);
    if (!q41) p->mw = _mm512_setzero_ps();
}

/* Q8_0 tail block t of the 16 weight rows j0.., lane = weight row, v[r] =
 * q dword r: from two packed tiles' tails (pack.c: word pair u of the 8 rows
 * at 16 u, so 32 bytes hold pairs 2r and 2r + 1; one word permute puts row
 * o's two pairs side by side in dword o, the second tile's rows in lanes
 * 8..15), else gathered from the GGUF rows. */
static const uint16_t q8_tail_words[32] __attribute__((aligned(64))) = {
    0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
    16, 24, 17, 25, 18, 26, 19, 27, 20, 28, 21, 29, 22, 30, 23, 31};

AI void q8_tail(const kvs_wmat *w, int j0, int jb, int nr, int ng, int t, prep_grp *p) {
    p->mw = _mm512_setzero_ps();
    if (two_packed_tiles(w, j0, jb, nr)) {
        const uint8_t *a = kvs_packed_tile_tail(w, j0) + (size_t)t * KVS_PACK_TILE * 34;
        const uint8_t *b = kvs_packed_tile_tail(w, jb) + (size_t)t * KVS_PACK_TILE * 34;
        const __m512i words = _mm512_load_si512(q8_tail_words);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 32 * r))),
                                                 _mm256_loadu_si256((const __m256i *)(b + 32 * r)), 1);
            p->v[r] = _mm512_permutexvar_epi16(words, z);
        }
        p->dw = _mm512_cvtph_ps(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 256))), _mm_loadu_si128((const __m128i *)(b + 256)), 1));
    } else {
        const uint8_t *blk = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes + (size_t)(ng * 16 + t) * 34;
        const __m512i roff = rows_offsets(w->row_bytes, j0, jb);
        const __mmask16 live = (__mmask16)((1u << nr) - 1);
        /* 4 bytes at the block's start: d and two q bytes (never past the block) */
        const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk, 1);
        p->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            p->v[r] = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, roff, blk + 2 + 4 * r, 1);
    }
    p->corr = q8_lanes_corr(p->v);
}

AI void tail_group(const kvs_wmat *w, int j0, int jb, int nr, int ng, int t, int type, prep_grp *p) {
    if (type == KVS_TYPE_Q8_0) q8_tail(w, j0, jb, nr, ng, t, p);
    else q4_tail(w, j0, jb, nr, ng, t, type == KVS_TYPE_Q4_1, p);
}

/* Up to 4 activation rows (the rows of one quad: a decode step, or a batch of
 * up to 4 streams) against up to 16 weight rows, lanes 0..7 rows j0.., lanes
 * 8..15 rows jb.. (jb = j0 + 8: 16 neighbouring rows, nr of them; else two
 * streams, nr = 16, their rows taken in turn): full groups
 * lane = block (the rearrangement fused into the dot, nothing stored, and
 * shared by the rows), then one tree per activation row for its 16 outputs,
 * then the tail blocks with lane = weight row (taken once for the rows),
 * each tail block adding its fma (and the Q4_1 min fma) in order. Every
 * block's integer dot is 256 * dot(w, hi) + dot(w, lo) (quant.h): the
 * unpacked weights serve both planes and every row. mr and type are
 * constants in each copy (few_rows_of). */
AI void few_rows(const kvs_wmat *w, int j0, int jb, int nr, const uint8_t *xq, size_t xq_row, const uint8_t *quad,
                 int mr, int type, float *y, size_t ldy) {
    const int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k), two = jb != j0 + 8;
    /* every live row's slot is set below: only the tree's lanes past nr
     * start at zero (a zeroing loop over all 16 became a memset call) */
    __m512 C[4][16];
    for (int i = 0; i < mr; i++)
        for (int rho = nr; rho < 16; rho++) C[i][slot_of(rho)] = _mm512_setzero_ps();
    for (int k = 0; k < nr; k++) {
        /* two streams: their rows alternate (each row's sums are its own) */
        const int rho = two ? (k & 1) * 8 + k / 2 : k, j = rho < 8 ? j0 + rho : jb + rho - 8;
        const uint8_t *row = q_row(w, j);
        kvs_prefetch_row_ahead(w, j);
        __m512 acc[4];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) acc[i] = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            prep_grp p;
            unpack_row_group(w, row, g, type, &p);
            const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) acc[i] = row_group(&p, grp + (size_t)i * xq_row, type, acc[i]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) C[i][slot_of(rho)] = acc[i];
    }
    __m512 R[4];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) R[i] = tree16x16(C[i]); /* lane rho = the tile's weight row rho */
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) {
        prep_grp p;
        tail_group(w, j0, jb, nr, ng, t, type, &p);
        const uint8_t *qt = quad + (size_t)t * KVS_XQ_TAIL_BYTES;
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) R[i] = row_tail(&p, qt, i, type, R[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        float *yi = y + (size_t)i * ldy;
        if (two) {
            _mm512_mask_storeu_ps(yi + j0, (__mmask16)0x00ff, R[i]);
            _mm512_mask_storeu_ps(yi + jb - 8, (__mmask16)0xff00, R[i]);
        } else {
            _mm512_mask_storeu_ps(yi + j0, live, R[i]);
        }
    }
}

/* 5..KVS_MANY_MAX_M activation rows (a batch of more streams) against up to
 * 16 weight rows: as few_rows, each group unpacked once for all the rows
 * (the prepared tiles of matmul_avx512.c pay a stored preparation per call,
 * which at a few rows cost as much as the dots). m is a constant in each
 * copy (many_rows_of), so the rows' loop unrolls: their chains interleave
 * and a weight row's sums stay in registers over its groups, copied to the
 * tree inputs once. With m a run-time count the rows ran one after another,
 * each accumulating into memory: on the full-width Zen 5, 8 rows of SmolLM2's
 * packed Q4_0 shapes take 0.89-0.94x the time with m constant, Q4_1
 * 0.92-0.95x (bench_kernels --m 8). The Q8_0 pairs accumulate in memory
 * still: two rows' sums for 8-12 rows are too many registers. */
AI void many_rows(const kvs_wmat *w, int j0, int nr, const kvs_mm_call *c, int m, int type, float *y, size_t ldy) {
    const int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    __m512 C[KVS_MANY_MAX_M][16];
    for (int i = 0; i < m; i++)
        for (int rho = nr; rho < 16; rho++) C[i][slot_of(rho)] = _mm512_setzero_ps();
    int rho = 0;
    if (type == KVS_TYPE_Q8_0) /* weight rows in pairs (row_q8_group_pair) */
        for (; rho + 1 < nr; rho += 2) {
            const uint8_t *row0 = q_row(w, j0 + rho), *row1 = q_row(w, j0 + rho + 1);
            kvs_prefetch_row_ahead(w, j0 + rho);
            kvs_prefetch_row_ahead(w, j0 + rho + 1);
            const int s0 = slot_of(rho), s1 = slot_of(rho + 1);
            for (int i = 0; i < m; i++) C[i][s0] = C[i][s1] = _mm512_setzero_ps();
            for (int g = 0; g < ng; g++) {
                prep_grp p, q;
                unpack_row_group(w, row0, g, type, &p);
                unpack_row_group(w, row1, g, type, &q);
                const uint8_t *grp = c->xq + (size_t)g * KVS_XQ_GROUP_BYTES;
                for (int i = 0; i < m; i++)
                    row_q8_group_pair(&p, &q, grp + (size_t)i * c->xq_row, &C[i][s0], &C[i][s1]);
            }
        }
    for (; rho < nr; rho++) {
        const uint8_t *row = q_row(w, j0 + rho);
        kvs_prefetch_row_ahead(w, j0 + rho);
        const int s = slot_of(rho);
        __m512 A[KVS_MANY_MAX_M]; /* the rows' sums, in registers */
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) A[i] = _mm512_setzero_ps();
        for (int g = 0; g < ng; g++) {
            prep_grp p;
            unpack_row_group(w, row, g, type, &p);
            const uint8_t *grp = c->xq + (size_t)g * KVS_XQ_GROUP_BYTES;
#pragma GCC unroll 12
            for (int i = 0; i < m; i++) A[i] = row_group(&p, grp + (size_t)i * c->xq_row, type, A[i]);
        }
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) C[i][s] = A[i];
    }
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    prep_grp T[KVS_XQ_GROUP];
    for (int t = 0; t < nt; t++) tail_group(w, j0, j0 + 8, nr, ng, t, type, &T[t]);
    for (int i = 0; i < m; i++) {
        __m512 R = tree16x16(C[i]); /* lane rho = weight row j0 + rho */
        const uint8_t *quad = c->xq_tail + (size_t)(i / 4) * c->xq_quad;
        for (int t = 0; t < nt; t++) R = row_tail(&T[t], quad + (size_t)t * KVS_XQ_TAIL_BYTES, i % 4, type, R);
        _mm512_mask_storeu_ps(y + (size_t)i * ldy + j0, live, R);
    }
}

/* type index: 0 Q4_0, 1 Q4_1, 2 Q8_0; the dispatch below keys its copies on
 * rows * 4 + index */
static int type_index(int type) { return type == KVS_TYPE_Q4_0 ? 0 : type == KVS_TYPE_Q4_1 ? 1 : 2; }
#define TYPE_OF_INDEX(T) ((T) == 0 ? KVS_TYPE_Q4_0 : (T) == 1 ? KVS_TYPE_Q4_1 : KVS_TYPE_Q8_0)

#define FEW_CASE(a, T) \
    case (a) * 4 + (T): few_rows(w, j0, jb, nr, xq, xq_row, quad, a, TYPE_OF_INDEX(T), y, ldy); break;
#define FEW_CASES(a) FEW_CASE(a, 0) FEW_CASE(a, 1) FEW_CASE(a, 2)

static void few_rows_of(const kvs_wmat *w, int j0, int jb, int nr, const uint8_t *xq, size_t xq_row,
                        const uint8_t *quad, int mr, float *y, size_t ldy) {
    switch (mr * 4 + type_index(w->type)) { /* both constant in each copy */
        FEW_CASES(1) FEW_CASES(2) FEW_CASES(3) FEW_CASES(4)
    }
}

#define MANY_CASE(a, T) \
    case (a) * 4 + (T): many_rows(w, j0, nr, c, a, TYPE_OF_INDEX(T), c->y, w->n); break;
#define MANY_CASES(a) MANY_CASE(a, 0) MANY_CASE(a, 1) MANY_CASE(a, 2)

static void many_rows_of(const kvs_wmat *w, int j0, int nr, const kvs_mm_call *c) {
    switch (c->m * 4 + type_index(w->type)) { /* both constant in each copy */
        MANY_CASES(5) MANY_CASES(6) MANY_CASES(7) MANY_CASES(8) MANY_CASES(9) MANY_CASES(10) MANY_CASES(11) MANY_CASES(12)
    }
}

/* One tile of every row quad of the call: weight rows j0..j0 + 7 in lanes
 * 0..7, jb.. in lanes 8..15 (jb = j0 + 8: 16 neighbouring rows). */
static void few_tile(const kvs_mm_call *c, int j0, int jb, int nr) {
    for (int i0 = 0; i0 < c->m; i0 += 4)
        few_rows_of(c->w, j0, jb, nr, c->xq + (size_t)i0 * c->xq_row, c->xq_row,
                    c->xq_tail + (size_t)(i0 / 4) * c->xq_quad, c->m - i0 < 4 ? c->m - i0 : 4,
                    c->y + (size_t)i0 * c->w->n, c->w->n);
}

int kvs_avx512_matmul_m1(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    if (!c->xq || w->k > 16384 || c->m > KVS_MANY_MAX_M) return 0;
    if (c->m > KVS_FEW_MAX_M) {
        for (int jt = j0; jt < j1; jt += 16) many_rows_of(w, jt, j1 - jt < 16 ? j1 - jt : 16, c);
        return 1;
    }
    int jt = j0;
    const int half = (j1 - j0) / (2 * KVS_PACK_TILE) * KVS_PACK_TILE;
    /* the tails' gathers reach the second stream by int32 byte offsets */
    if (KVS_M1_TWO_STREAMS && c->m == 1 && j0 % KVS_PACK_TILE == 0 && j1 - j0 >= KVS_M1_TWO_MIN_ROWS &&
        (size_t)(half + 8) * w->row_bytes <= (size_t)INT32_MAX) {
        for (int a = j0; a < j0 + half; a += KVS_PACK_TILE) few_tile(c, a, a + half, 16);
        jt = j0 + 2 * half;
    }
    for (; jt < j1; jt += 16) few_tile(c, jt, jt + 8, j1 - jt < 16 ? j1 - jt : 16);
    return 1;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
