/*
 * AVX2 Q5_0 / Q5_1 / K-quant kernels (kquant_avx2_octet.h) for several
 * activation rows (prefill, the server's batch), on the quantizer's lane
 * layout (a lane per block: a lane accumulates its block directly, no
 * horizontal step). Weight rows go by tiles of four, unpacked and
 * transposed once per call into a buffer; the activation rows meet them in
 * passes that fit L1. Per octet of one activation row, each of its 16
 * vectors is loaded once and meets the four rows (tile_sums): 0.75 loads
 * per vpmaddubsw, where a row at a time needed 1.5 and the loads bound the
 * loop.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "kernels/kquant_avx2_octet.h"

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

/* Integer sums of one octet: nw (4, or 2 for merged tails: a constant)
 * transposed weight octets w[q] against one activation octet xo (lane
 * layout: hi plane vector r at xo + 32 r, lo plane at xo + 256 + 32 r).
 * Lane l of I[q][0]: block l over both halves (split scales: half 0, and
 * I[q][1] half 1). The vpmaddubsw products (pairs <= 2 * qmax * 128) add
 * up in int16, sh.depth of them (4 x 7936 for 5-bit weights), before one
 * vpmaddwd by 256 (hi) or 1 (lo) widens them: exact integers. The macros
 * are tile_sums' steps (its r, xh, xl, sh, I, c256, ones). */
#define TILE_MAC(wq, ph, pl)                                                                                           \
    do {                                                                                                               \
        const __m256i w_ = _mm256_load_si256(&(wq)->qu[r]);                                                            \
        const __m256i mh_ = _mm256_maddubs_epi16(w_, xh), ml_ = _mm256_maddubs_epi16(w_, xl);                          \
        ph = r % sh.depth ? _mm256_add_epi16(ph, mh_) : mh_;                                                           \
        pl = r % sh.depth ? _mm256_add_epi16(pl, ml_) : ml_;                                                           \
    } while (0)
#define TILE_WIDEN(q, ph, pl)                                                                                          \
    do {                                                                                                               \
        const __m256i v_ = _mm256_add_epi32(_mm256_madd_epi16(ph, c256), _mm256_madd_epi16(pl, ones));                 \
        const int h_ = sh.split && r >= 4; /* split: half 1 apart */                                                   \
        I[q][h_] = r < sh.depth || (h_ && r < 4 + sh.depth) ? v_ : _mm256_add_epi32(I[q][h_], v_);                     \
    } while (0)
AI void tile_sums(const octet *const w[4], int nw, const int8_t *xo, kq_shape sh, __m256i I[4][2]) {
    const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256i ph0, pl0, ph1, pl1, ph2, pl2, ph3, pl3;
    ph0 = pl0 = ph1 = pl1 = ph2 = pl2 = ph3 = pl3 = _mm256_setzero_si256();
    const octet *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        /* the pointers through an empty asm at every step: otherwise GCC
         * loaded all 16 activation vectors at once and spilled them */
        __asm__("" : "+r"(xo), "+r"(w0), "+r"(w1), "+r"(w2), "+r"(w3));
        __m256i xh = _mm256_loadu_si256((const __m256i *)(xo + 32 * r));
        __m256i xl = _mm256_loadu_si256((const __m256i *)(xo + 256 + 32 * r));
        __asm__("" : "+x"(xh), "+x"(xl)); /* in registers: loaded once for the four rows */
        TILE_MAC(w0, ph0, pl0);
        TILE_MAC(w1, ph1, pl1);
        if (nw > 2) {
            TILE_MAC(w2, ph2, pl2);
            TILE_MAC(w3, ph3, pl3);
        }
        /* in the order written: otherwise the compiler hoists the products
         * and spills them (as in the packed kernels) */
        __asm__("" : "+x"(ph0), "+x"(pl0), "+x"(ph1), "+x"(pl1), "+x"(ph2), "+x"(pl2), "+x"(ph3), "+x"(pl3));
        if (r % sh.depth == sh.depth - 1) {
            TILE_WIDEN(0, ph0, pl0);
            TILE_WIDEN(1, ph1, pl1);
            if (nw > 2) {
                TILE_WIDEN(2, ph2, pl2);
                TILE_WIDEN(3, ph3, pl3);
            }
        }
    }
    if (!sh.split) /* octet_prep takes the halves: the whole in half 0 */
        for (int q = 0; q < nw; q++) I[q][1] = _mm256_setzero_si256();
}
#undef TILE_MAC
#undef TILE_WIDEN

/* One weight row's float steps of a full octet on its accumulator A (the
 * octet's half of the row's chains). */
AI __m256 full_step(__m256 A, const octet *w, const __m256i I[2], __m256i o0, __m256i o1, __m256 dx, __m256 sx,
                    kq_shape sh) {
    const octet_ops op = octet_ops_of(w, I[0], I[1], o0, o1, dx, sx, sh);
    return octet_apply(A, &op, sh);
}

/* A full octet of a tile (rows w[q]) against activation octet x: the
 * integer sums, then each row's float steps on its accumulator (a0..a3, in
 * registers across the octets); what the rows share (dx, sx, offsets) is
 * made once. */
AI void tile_octet(const octet *const w[4], xoct x, kq_shape sh, __m256 *a0, __m256 *a1, __m256 *a2, __m256 *a3) {
    __m256i I[4][2];
    tile_sums(w, 4, x.q, sh, I);
    const __m256 dx = _mm256_loadu_ps(x.dx), sx = sh.has_min ? _mm256_loadu_ps(x.sx) : _mm256_setzero_ps();
    __m256i o0, o1;
    octet_offsets(x, sh, &o0, &o1);
    *a0 = full_step(*a0, w[0], I[0], o0, o1, dx, sx, sh);
    *a1 = full_step(*a1, w[1], I[1], o0, o1, dx, sx, sh);
    *a2 = full_step(*a2, w[2], I[2], o0, o1, dx, sx, sh);
    *a3 = full_step(*a3, w[3], I[3], o0, o1, dx, sx, sh);
}

/* Block c (< 4) of a merged tail's two octets side by side: out[c] =
 * rows 0..3's operand, from v01 (rows 0 | 1 in lanes 0-3 | 4-7) and v23:
 * two unpacks a pair of blocks, where a transpose of four rows' octets
 * (rows4_blocks) first needed each odd row's lanes moved down. */
AI void merged_blocks(__m256 v01, __m256 v23, int cnt, __m128 out[4]) {
    const __m256 g = _mm256_unpacklo_ps(v01, v23); /* [r0 b0, r2 b0, r0 b1, r2 b1 | r1 .., r3 ..] */
    const __m128 gl = _mm256_castps256_ps128(g), gh = _mm256_extractf128_ps(g, 1);
    out[0] = _mm_unpacklo_ps(gl, gh);
    out[1] = _mm_unpackhi_ps(gl, gh);
    if (cnt > 2) {
        const __m256 h = _mm256_unpackhi_ps(v01, v23);
        const __m128 hl = _mm256_castps256_ps128(h), hh = _mm256_extractf128_ps(h, 1);
        out[2] = _mm_unpacklo_ps(hl, hh);
        out[3] = _mm_unpackhi_ps(hl, hh);
    }
}

/* A merged tail's steps (cnt <= 4 blocks; rows 0 | 1 in op01, 2 | 3 in
 * op23) on the four rows' outputs y, in block order. */
AI __m128 merged_tail_steps(__m128 y, const octet_ops *op01, const octet_ops *op23, int cnt, kq_shape sh) {
    __m128 f0[4], p0[4], f1[4], p1[4], m[4], s[4];
    merged_blocks(op01->f0, op23->f0, cnt, f0);
    merged_blocks(op01->p0, op23->p0, cnt, p0);
    if (sh.split) {
        merged_blocks(op01->f1, op23->f1, cnt, f1);
        merged_blocks(op01->p1, op23->p1, cnt, p1);
    }
    if (sh.has_min) {
        merged_blocks(op01->m, op23->m, cnt, m);
        merged_blocks(op01->s, op23->s, cnt, s);
    }
    for (int c = 0; c < cnt; c++) {
        y = _mm_fmadd_ps(f0[c], p0[c], y);
        if (sh.split) y = _mm_fmadd_ps(f1[c], p1[c], y);
        if (sh.has_min) y = _mm_fmadd_ps(m[c], s[c], y);
    }
    return y;
}

/* Tail octet o (cnt blocks: the row's tail, kquant.h) of a tile's four
 * rows: its steps on their outputs y (lane q = row q), from the merged
 * tails (cnt <= 4, merge_tails: rows 0|1 in row 0's octet, 2|3 in row 2's)
 * or four rows. */
AI __m128 tile_tail(__m128 y, const octet *tb, int no, int o, int cnt, xoct x, kq_shape sh) {
    __m256i I[4][2];
    octet_ops op[4];
    if (kq_merged_tail(cnt)) {
        const octet *w[4] = {tb + o, tb + 2 * no + o, tb + o, tb + 2 * no + o};
        tile_sums(w, 2, x.q, sh, I);
        op[0] = octet_prep(w[0], I[0][0], I[0][1], x, sh);
        op[2] = octet_prep(w[1], I[1][0], I[1][1], x, sh);
        return merged_tail_steps(y, &op[0], &op[2], cnt, sh);
    } else {
        const octet *w[4] = {tb + o, tb + no + o, tb + 2 * no + o, tb + 3 * no + o};
        tile_sums(w, 4, x.q, sh, I);
        for (int q = 0; q < 4; q++) op[q] = octet_prep(w[q], I[q][0], I[q][1], x, sh);
    }
    return tail_steps4(y, op, cnt, sh);
}

/* The four outputs of tile tb (its rows' no octets each) for activation
 * row xr (nb blocks): the whole groups' octets in order, by twos (even
 * octets: chains 0-7 in the l accumulators, odd: 8-15 in h), each chain's
 * steps in block order, the accumulators in registers (in memory, their
 * stores and reloads per octet and the trees cost as much as a third of
 * the integer work at k = 640); then the tree, then the tail octets'
 * steps on each output in block order (kquant.h). */
AI __m128 tile_row(const octet *tb, int no, int nb, const uint8_t *xr, kq_shape sh) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xr, 32 * nb);
    const int nfo = 2 * (nb / 16);
    __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, h0 = l0, h1 = l0, h2 = l0, h3 = l0;
#define TILE_X(o)                                                                                                      \
    ((xoct){(const int8_t *)xr + (size_t)(o) * 512, tr.dx + 8 * (o), tr.sx + 8 * (o), tr.s0 + 8 * (o), tr.s1 + 8 * (o)})
#define TILE_W(o) {tb + (o), tb + no + (o), tb + 2 * no + (o), tb + 3 * no + (o)}
    for (int o = 0; o < nfo; o += 2) {
        const octet *we[4] = TILE_W(o), *wo[4] = TILE_W(o + 1);
        tile_octet(we, TILE_X(o), sh, &l0, &l1, &l2, &l3);
        tile_octet(wo, TILE_X(o + 1), sh, &h0, &h1, &h2, &h3);
    }
    __m128 y4 = tree16x4_sums(_mm256_add_ps(l0, h0), _mm256_add_ps(l1, h1), _mm256_add_ps(l2, h2), _mm256_add_ps(l3, h3));
    for (int o = nfo; o < no; o++) y4 = tile_tail(y4, tb, no, o, nb - 8 * o < 8 ? nb - 8 * o : 8, TILE_X(o), sh);
#undef TILE_X
#undef TILE_W
    return y4;
}

/* Octets in the batch buffer: a tile of the longest rows (MAX_OCTETS);
 * rows of fewer octets take more tiles at a time. */
#define BATCH_OCTETS (4 * MAX_OCTETS) /* 88 KiB */
#define PASS_BYTES 16384 /* activation rows per pass: as many as fit this */

/* Unpacks and transposes weight rows [j, j + 4) (rows past j1 repeat the
 * last: computed, not stored) into tile tb; pf_n: the matrix's rows where
 * the call streams them (rows fetched KQ_PF_ROWS ahead), else 0. */
AI void unpack_tile(const uint8_t *base, size_t row_bytes, int j, int j1, int nb, int packed, kq_shape sh, octet *tb,
                    int pf_n) {
    const int no = (nb + 7) / 8;
    for (int q = 0; q < 4; q++) {
        const uint8_t *row = base + (size_t)(j + q < j1 ? j + q : j1 - 1) * row_bytes;
        kq_prefetch_ahead(row, row_bytes, j + q, 0, pf_n, KQ_PF_ROWS);
        for (int o = 0; o < no; o++) {
            const int cnt = nb - 8 * o < 8 ? nb - 8 * o : 8;
            octet t;
            unpack_octet(sh.type, row, 8 * o, cnt, packed, &t);
            tb[q * no + o] = t;
            transpose8_epi32(t.qu, tb[q * no + o].qu);
        }
    }
    if (nb % 8 > 0 && kq_merged_tail(nb % 8)) {
        merge_tails(&tb[no - 1], &tb[2 * no - 1]);
        merge_tails(&tb[3 * no - 1], &tb[4 * no - 1]);
    }
}

/* Several activation rows: columns [j0, j1) by groups of tiles that fit the
 * buffer; per group, passes of activation rows, and per pass each tile
 * meets each row of it. */
AI void batch_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, int j0, int j1,
                   kq_shape sh) {
    (void)xt; /* no prep_quads: each row's tail on its own (tile_row) */
    octet buf[BATCH_OCTETS];
    const int nb = w->k / 32, no = (nb + 7) / 8, packed = w->packed != NULL;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    int pass = (int)(PASS_BYTES / xq_row);
    if (pass < 1) pass = 1;
    /* rows: >= 4 as no <= MAX_OCTETS (kq_lanes); a call of one pass meets
     * each tile once: a tile at a time, streamed (kq_prefetch_ahead) */
    const int group = m <= pass ? 4 : (BATCH_OCTETS / no) & ~3;
    for (int g0 = j0; g0 < j1; g0 += group) {
        const int g1 = g0 + group < j1 ? g0 + group : j1, nt = (g1 - g0 + 3) / 4;
        for (int t = 0; t < nt; t++)
            unpack_tile(base, w->row_bytes, g0 + 4 * t, g1, nb, packed, sh, buf + (size_t)4 * t * no,
                        group == 4 ? w->n : 0);
        for (int i0 = 0; i0 < m; i0 += pass) {
            const int i1 = i0 + pass < m ? i0 + pass : m;
            for (int t = 0; t < nt; t++) {
                const int j = g0 + 4 * t, nj = g1 - j < 4 ? g1 - j : 4;
                for (int i = i0; i < i1; i++) {
                    const __m128 y4 = tile_row(buf + (size_t)4 * t * no, no, nb, xq + (size_t)i * xq_row, sh);
                    float *yi = y + (size_t)i * w->n + j;
                    if (nj == 4) {
                        _mm_storeu_ps(yi, y4);
                    } else {
                        float v[4];
                        _mm_storeu_ps(v, y4);
                        memcpy(yi, v, (size_t)nj * sizeof(float));
                    }
                }
            }
        }
    }
}

/* One batch function per type, compiled on its own with the type's constants. */
#define KQ_BATCH_NAME(name) kvs_kq_avx2_batch_##name
KQ_SHAPES(KQ_BATCH_FN)

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
