/*
 * AMX (Intel Advanced Matrix Extensions: amx-tile, amx-bf16, amx-int8) matmul for
 * Q4_0 / Q4_1 / Q5_0 / Q4_K / Q8_0 weights and many activation rows (prefill).
 * Produces exactly the bits of the scalar reference (the canonical order of
 * kernels_impl.h and kquant.h, the same for every type).
 *
 * Why BF16 tiles give exact integers: a block's integer dot is
 * i_b = sum_e w_e (256 hi_e + lo_e) with w_e in [-16, 15], hi_e, lo_e in
 * [-127, 127]. 256 hi_e, lo_e and w_e are exact in bf16, every product and
 * every partial sum is an integer of magnitude <= 32 * 16 * 32639 < 2^24,
 * so TDPBF16PS (fp32 accumulation) computes i_b exactly, whatever its
 * internal order: the tile holds exactly the reference's (float)i_b, hi and
 * lo accumulate into the same tile, and the vector epilogue is only the
 * canonical float steps. (Q5_1's and Q5_K's dots reach 2^25: they stay on
 * AVX-512; Q6_K's scales are per half block.)
 *
 * Q8_0 (w_e in [-128, 127]): i_b reaches 2^27, past fp32's exact integers,
 * so it runs on int8 tiles (amx-int8): TDPBSSD's int32 sums are exact at
 * any size. K = 32 (one block; A tiles 16 rows x 32 bytes, B tiles 8 rows
 * x 64), hi and lo on tiles of their own (a tile cannot weigh hi by 256);
 * the epilogue forms 256 dot_hi + dot_lo in int32 (< 2^28) and converts it
 * once: (float)i_b. Against the bf16 tiles it ran on before (two fp32 tiles,
 * one vaddps), a K = 32 int8 product costs half a bf16 one and the tiles
 * load half the bytes (SmolLM2 Q8_0 pp512, paired runs on the AMX Xeon:
 * 1.24x at 1 thread, 1.08-1.14x at 2). The 4-bit types stay on bf16: on int8
 * tiles their two levels would need a tile and a store each, where bf16
 * adds both into one (measured slower: Q4_0 / Q4_1 576x576 at m = 512,
 * 0.7-1.1x). Its panels run block stage by block stage (panel_q8), not row
 * tile by row tile (panel).
 *
 * Activations ("xa", kernels_impl.h): each row in natural element order,
 * bf16 256*hi[nb][32], bf16 lo[nb][32], float dx[nb], float sx[nb], so one
 * tile load (row stride xa_row) gives block b of 16 rows; for Q8_0 int8
 * hi[32] and lo[32] of each block in one 64-byte line.
 *
 * Weights: per chunk of up to 32 output columns ("panel", two halves of 16)
 * every block is repacked once into the TDPBF16PS B layout (16 rows of 64
 * bytes: row r, dword n = elements 2r, 2r+1 of weight row n as bf16, Q4_0
 * already minus 8, Q5_0 minus 16; Q8_0: the TDPBSSD B layout, 8 rows of
 * 64 bytes, dword n = 4 bytes of weight row n), plus dw (and mw) per
 * column; in per-thread scratch, reused by every 16-row tile of the call.
 * Q8_0 / Q4_0 / Q4_1 / Q5_0 read their blocks from the tiles where the
 * arena holds them (kvs_wmat_tiles_to: plain loads), the other types
 * gather them from the rows.
 *
 * Work unit: 16 rows x the panel's 32 columns. Its tiles (tmm2/3: A =
 * 256 hi / lo of the 16 rows, shared by both halves; tmm4/5: B of the
 * halves; C of even blocks in tmm0/1, of odd blocks in tmm6/7; K = 32
 * elements = one block) leave (float)i_b of every block in a buffer: per
 * block and half 2 TDPBF16PS and one tile store. Then each row runs the
 * canonical float steps with its 16 chains (block b -> chain b % 16) in
 * registers, lanes = 16 output columns: the tree (kvs_tree16 order, lane-
 * wise), then the tail blocks in order. The tiles of the next row tile are
 * issued between the rows of the current one (two buffers), so the tile
 * unit and the vector units can work at the same time (on the AMX Xeon
 * VM they barely do: bench/roofline_probe's amx_overlap).
 *
 * Activation rows come in blocks that keep their xa in L2 (dispatch.c
 * splits the call by rows as well as columns for this path).
 */
#include <float.h>

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2,prfchw,amx-tile,amx-bf16,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2,prfchw,amx-tile,amx-bf16,amx-int8")
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx_util.h"
#include "kernels/avx512_util.h"

/* ------------------------------------------------------------ quantize x */

/* Exact float -> bf16 of small integers (the low 16 bits are zero). */
AI __m256i bf16_of(__m512 f) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16)); }

/* 16 elements' levels as the bf16 xa stores them: bf16 of 256 hi at hb, of lo at lb. */
AI void store_levels(__m512i qh, __m512i ql, uint16_t *hb, uint16_t *lb) {
    _mm256_storeu_si256((__m256i *)hb, bf16_of(_mm512_cvtepi32_ps(_mm512_slli_epi32(qh, 8))));
    _mm256_storeu_si256((__m256i *)lb, bf16_of(_mm512_cvtepi32_ps(ql)));
}

/* Elements 16h..16h+15 of block b into xa row `row` of nb blocks: bf16, or
 * (i8: Q8_0's layout) int8 hi at byte 64 b + 16 h, int8 lo 32 bytes on. */
AI void put_levels(uint8_t *row, int nb, int b, int h, __m512i qh, __m512i ql, int i8) {
    if (i8) {
        uint8_t *p = row + (size_t)64 * b + 16 * h;
        _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(qh));
        _mm_storeu_si128((__m128i *)(p + 32), _mm512_cvtepi32_epi8(ql));
    } else {
        uint16_t *hb = (uint16_t *)row + 32 * b + 16 * h;
        store_levels(qh, ql, hb, hb + (size_t)nb * KVS_QK);
    }
}

/* One block b, two-level (quant.h), the reference's arithmetic lane-wise:
 * writes its levels, returns dx (the scale of Q), sets sum Q. */
AI float quantize_block(const float *xb, uint8_t *row, int nb, int b, int i8, int32_t *sum) {
    __m512i qh[2], ql[2];
    float dx = quantize_block_levels(xb, qh, ql, sum);
    for (int h = 0; h < 2; h++) put_levels(row, nb, b, h, qh[h], ql[h], i8);
    return dx;
}

/* A full group of 16 blocks (blocks 16 g..16 g + 15) at once (as
 * matmul_avx512.c's quantize_group): the blocks' maxima by one transposed
 * tree, d and id of the 16 lanes by one division each, sum Q of each block
 * by one transposed tree of the exact integer sums (< 2^24, so any order
 * gives them), not two horizontal reductions and two scalar divisions a
 * block. The same operations per element and block as quantize_block, so
 * the same bits. */
AI void quantize_group(const float *x, uint8_t *row, int nb, int g, int i8, float *dx, float *sx) {
    __m512 qs[16], id;
    const __m512 d = group_scales(x, &id);
    for (int b = 0; b < 16; b++) {
        const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id);
        __m512i q = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i qh, ql;
            two_levels(_mm512_loadu_ps(x + 32 * b + 16 * h), idb, &qh, &ql);
            put_levels(row, nb, 16 * g + b, h, qh, ql, i8);
            q = _mm512_add_epi32(q, _mm512_add_epi32(_mm512_slli_epi32(qh, 8), ql));
        }
        qs[slot_of(b)] = _mm512_cvtepi32_ps(q);
    }
    const __m512 dxv = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 256.0f));
    _mm512_storeu_ps(dx, dxv);
    _mm512_storeu_ps(sx, _mm512_mul_ps(dxv, tree16x16(qs)));
}

/* Rows i0..i1 of the call's x into xa, bf16 or (i8) int8 levels; inlined
 * once per layout so the choice is not made per element. */
AI void quantize_rows_as(const kvs_mm_call *c, int i0, int i1, int i8) {
    const int k = c->w->k, nb = k / KVS_QK, type = c->w->type;
    for (int i = i0; i < i1; i++) {
        const float *x = c->x + (size_t)i * k;
        uint8_t *row = (uint8_t *)c->xq + (size_t)i * c->xq_row;
        float *dx = kvs_xa_dx(row, type, nb), *sx = kvs_xa_sx(row, type, nb);
        for (int g = 0; g < nb / 16; g++) quantize_group(x + (size_t)g * 512, row, nb, g, i8, dx + 16 * g, sx + 16 * g);
        for (int b = nb / 16 * 16; b < nb; b++) {
            int32_t sum;
            float d = quantize_block(x + (size_t)b * KVS_QK, row, nb, b, i8, &sum);
            dx[b] = d;
            sx[b] = d * (float)sum;
        }
    }
}

static void amx_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    if (kvs_xa_int8(c->w->type)) quantize_rows_as(c, i0, i1, 1);
    else quantize_rows_as(c, i0, i1, 0);
}

/* ------------------------------------------------------------------ prep */

#define PANEL 32 /* output columns per weight panel (two B tiles) */

/* One block of a panel: B tiles of columns 0..15 and 16..31, dw, mw. */
typedef struct amx_blk {
    uint16_t b[2][16][32];
    float dw[PANEL];
    float mw[PANEL];
} amx_blk;

/* Bits 0..3 of every dword lane of t, one to a byte: byte j = bit j (the
 * shifted copies of t * 0x00204081 never overlap, so no carries). */
AI __m512i bits_to_bytes(__m512i t) {
    const __m512i four = _mm512_and_si512(t, _mm512_set1_epi32(15));
    return _mm512_and_si512(_mm512_mullo_epi32(four, _mm512_set1_epi32(0x00204081)), _mm512_set1_epi32(0x01010101));
}

/* The 32-word vpermw table of the weight integers: word v = bf16(v - off)
 * (Q4_1 and Q4_K 0, Q4_0 8, Q5_0 16: vpermw sees all five bits). */
AI __m512i bf16_table(int off) {
    const __m512i v = _mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm512_set1_epi32(off));
    return _mm512_inserti64x4(_mm512_castsi256_si512(bf16_of(_mm512_cvtepi32_ps(v))),
                              bf16_of(_mm512_cvtepi32_ps(_mm512_add_epi32(v, _mm512_set1_epi32(16)))), 1);
}

/* Words (w0, w1) of every dword lane of the 4 weight integers x (bytes):
 * e01 = elements 0, 1, e23 = elements 2, 3, each word the bf16 of its
 * integer through tbl (vpermw). */
AI void bf16_pairs(__m512i x, __m512i tbl, __m512i *e01, __m512i *e23) {
    const __m512i bytew = _mm512_set1_epi32(0xff);
    const __m512i a = _mm512_or_si512(_mm512_and_si512(x, bytew),
                                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 8), bytew), 16));
    const __m512i b = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 16), bytew),
                                      _mm512_slli_epi32(_mm512_srli_epi32(x, 24), 16));
    *e01 = _mm512_permutexvar_epi16(a, tbl);
    *e23 = _mm512_permutexvar_epi16(b, tbl);
}

/* Repacks columns [j0, j0 + nr) of all nb blocks (the halves that have
 * columns; missing columns of a half: zero, never stored) from w->tiles
 * where it has them (Q4_0 / Q4_1 / Q5_0), else from the rows. Q5_0 (| f16 d |
 * u32 qh | qs[16] |): the fifth bit of element e is bit e of qh. */
static void prep_panel(const kvs_wmat *w, int j0, int nr, int nb, amx_blk *out) {
    const int q41 = w->type == KVS_TYPE_Q4_1, q5 = w->type == KVS_TYPE_Q5_0;
    const int bs = q41 ? 20 : q5 ? 22 : 18, qoff = q41 ? 4 : q5 ? 6 : 2;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)w->row_bytes));
    const __m512i tbl = bf16_table(q41 ? 0 : q5 ? 16 : 8);
    const __m512i z = _mm512_setzero_si512();
    const kvs_wtiles t = kvs_wtiles_of(w); /* where w->tiles (j0 a multiple of 16) */
    for (int h = 0; 16 * h < nr; h++) {
        int cnt = nr - 16 * h;
        __mmask16 mk = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
        const uint8_t *base = (const uint8_t *)w->data + (size_t)(j0 + 16 * h) * w->row_bytes;
        const size_t s0 = (size_t)((j0 + 16 * h) / 16) * nb;
        for (int b = 0; b < nb; b++) {
            amx_blk *p = &out[b];
            const uint8_t *blk = base + (size_t)b * bs;
            const uint8_t *tq = w->tiles ? kvs_wtiles_q(&t, s0 + b) : NULL;
            /* d (and m for Q4_1): the slot's scales, or the first dword of
             * each block (for Q4_0 / Q5_0 the 4 bytes stay inside it) */
            const __m512i qh = !q5 ? z
                               : tq ? _mm512_load_si512(tq + 4 * t.stride)
                                    : _mm512_mask_i32gather_epi32(z, mk, idx, blk + 2, 1);
            if (tq) {
                const uint8_t *td = kvs_wtiles_d(&t, s0 + b);
                _mm512_store_ps(p->dw + 16 * h, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)td)));
                _mm512_store_ps(p->mw + 16 * h, q41 ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(td + 32)))
                                                    : _mm512_setzero_ps());
            } else {
                const __m512i dm = _mm512_mask_i32gather_epi32(z, mk, idx, blk, 1);
                _mm512_store_ps(p->dw + 16 * h, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
                _mm512_store_ps(p->mw + 16 * h, q41 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)))
                                                    : _mm512_setzero_ps());
            }
            for (int r = 0; r < 4; r++) {
                /* lane n: qs[4r..4r+3] of column n; low nibbles are elements
                 * 4r..4r+3 (B rows 2r, 2r+1), high nibbles 16+4r.. (rows 8+2r, 9+2r) */
                __m512i q = tq ? _mm512_load_si512(tq + r * t.stride)
                               : _mm512_mask_i32gather_epi32(z, mk, idx, blk + qoff + 4 * r, 1);
                __m512i nib[2] = {_mm512_and_si512(q, lo4), _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4)};
                if (q5)
                    for (int u = 0; u < 2; u++) /* elements 16u + 4r + j: qh bit 16u + 4r + j -> 16 */
                        nib[u] = _mm512_or_si512(nib[u], _mm512_slli_epi32(bits_to_bytes(_mm512_srli_epi32(qh, 16 * u + 4 * r)), 4));
                for (int u = 0; u < 2; u++) {
                    __m512i e01, e23;
                    bf16_pairs(nib[u], tbl, &e01, &e23);
                    _mm512_store_si512(p->b[h][8 * u + 2 * r], e01);
                    _mm512_store_si512(p->b[h][8 * u + 2 * r + 1], e23);
                }
            }
        }
    }
}

/* Byte j (0..3) of every dword lane. */
AI __m512i byte_of(__m512i d, int j) { return _mm512_and_si512(_mm512_srli_epi32(d, 8 * j), _mm512_set1_epi32(0xff)); }

/* prep_panel for Q4_K (| f16 d | f16 dmin | scales[12] | qs[128] |, 256
 * elements): per sub-block j of 32 (block 8 sb + j), dw = d * sc_j and mw =
 * -(dmin * m_j) as kvs_kq_scales computes them (ggml's 6-bit get_scale_min_k4,
 * lane-wise), integers q = the low (j even) or high (j odd) nibbles of
 * qs[32 (j / 2) ..], element l at byte l. */
static void prep_panel_q4k(const kvs_wmat *w, int j0, int nr, int nb, amx_blk *out) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f), m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)w->row_bytes));
    const __m512i tbl = bf16_table(0);
    const __m512i z = _mm512_setzero_si512();
    for (int h = 0; 16 * h < nr; h++) {
        const int cnt = nr - 16 * h;
        const __mmask16 mk = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
        const uint8_t *base = (const uint8_t *)w->data + (size_t)(j0 + 16 * h) * w->row_bytes;
        for (int sb = 0; sb < nb / 8; sb++) {
            const uint8_t *blk = base + (size_t)sb * 144;
            const __m512i dd = _mm512_mask_i32gather_epi32(z, mk, idx, blk, 1);
            const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
            const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
            __m512i q[3]; /* scales[0..11] */
            for (int v = 0; v < 3; v++) q[v] = _mm512_mask_i32gather_epi32(z, mk, idx, blk + 4 + 4 * v, 1);
            for (int j = 0; j < 8; j++) {
                __m512i sc, m;
                if (j < 4) {
                    sc = _mm512_and_si512(byte_of(q[0], j), m63);
                    m = _mm512_and_si512(byte_of(q[1], j), m63);
                } else {
                    sc = _mm512_or_si512(_mm512_and_si512(byte_of(q[2], j - 4), m15),
                                         _mm512_slli_epi32(_mm512_srli_epi32(byte_of(q[0], j - 4), 6), 4));
                    m = _mm512_or_si512(_mm512_srli_epi32(byte_of(q[2], j - 4), 4),
                                        _mm512_slli_epi32(_mm512_srli_epi32(byte_of(q[1], j - 4), 6), 4));
                }
                amx_blk *p = &out[8 * sb + j];
                _mm512_store_ps(p->dw + 16 * h, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
                _mm512_store_ps(p->mw + 16 * h, _mm512_sub_ps(_mm512_setzero_ps(),
                                                              _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m))));
            }
            for (int pj = 0; pj < 4; pj++) /* sub-blocks 2 pj (low nibbles), 2 pj + 1 (high) */
                for (int r = 0; r < 8; r++) {
                    const __m512i x = _mm512_mask_i32gather_epi32(z, mk, idx, blk + 16 + 32 * pj + 4 * r, 1);
                    const __m512i nib[2] = {_mm512_and_si512(x, lo4), _mm512_and_si512(_mm512_srli_epi16(x, 4), lo4)};
                    for (int u = 0; u < 2; u++) { /* elements 4r..4r+3: B rows 2r, 2r + 1 */
                        __m512i e01, e23;
                        bf16_pairs(nib[u], tbl, &e01, &e23);
                        amx_blk *p = &out[8 * sb + 2 * pj + u];
                        _mm512_store_si512(p->b[h][2 * r], e01);
                        _mm512_store_si512(p->b[h][2 * r + 1], e23);
                    }
                }
        }
    }
}

/* prep_panel for Q8_0 (| f16 d | qs[32] signed |), int8 tiles: the first
 * 512 bytes of b[h] are the TDPBSSD B tile (8 rows of 16 dwords: row v,
 * dword n = qs[4v..4v+3] of column n), the bytes as the GGUF holds them:
 * gathered from the rows, or copied from w->tiles, which hold them so. */
static void prep_panel_q8(const kvs_wmat *w, int j0, int nr, int nb, amx_blk *out) {
    const kvs_wtiles t = kvs_wtiles_of(w);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)w->row_bytes));
    const __m512i z = _mm512_setzero_si512();
    for (int h = 0; 16 * h < nr; h++) {
        const int cnt = nr - 16 * h;
        const __mmask16 mk = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
        if (w->tiles) { /* the same bytes, laid out (kvs_wmat_tiles_to; j0 a multiple of 16) */
            const size_t s0 = (size_t)((j0 + 16 * h) / 16) * nb;
            for (int b = 0; b < nb; b++) {
                _mm512_store_ps(out[b].dw + 16 * h,
                                _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)kvs_wtiles_d(&t, s0 + b))));
                for (int v = 0; v < 8; v++)
                    _mm512_store_si512((uint8_t *)out[b].b[h] + 64 * v,
                                       _mm512_load_si512(kvs_wtiles_q(&t, s0 + b) + v * t.stride));
            }
            continue;
        }
        const uint8_t *base = (const uint8_t *)w->data + (size_t)(j0 + 16 * h) * w->row_bytes;
        for (int b = 0; b < nb; b++) {
            amx_blk *p = &out[b];
            const uint8_t *blk = base + (size_t)b * 34;
            const __m512i d = _mm512_mask_i32gather_epi32(z, mk, idx, blk, 1); /* d, then qs[0..1] */
            _mm512_store_ps(p->dw + 16 * h, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
            for (int v = 0; v < 8; v++)
                _mm512_store_si512((uint8_t *)p->b[h] + 64 * v, _mm512_mask_i32gather_epi32(z, mk, idx, blk + 2 + 4 * v, 1));
        }
    }
}

/* ------------------------------------------------------------- kernel */

/* A unit of work: 16 rows (row tile t) x the panel's columns. Its tiles
 * store (float)i_b of every block into cb[nb][2 halves][16 rows][16 cols],
 * each C tile's 1 KiB in one piece (rows nb * 128 bytes apart, the layout
 * before, ran 2-17% slower: gemma3's shapes, paired runs), then the epilogue
 * runs row by row with the 16 chains in registers. */
typedef struct amx_run {
    const amx_blk *pan;
    const uint8_t *xq; /* xa of the call */
    size_t xa_row;
    int nb, nh, m, nr;
    int type;          /* the weights' */
    float *y;          /* y of the call at the panel's first column */
    size_t ldy;
} amx_run;

/* Blocks [b0, b1) of row tile t: C of even blocks in tmm0/1 (halves), odd
 * blocks in tmm6/7, so a block's products need not wait for the previous
 * block's stores; the A tiles serve both halves. */
AI void unit_tiles(const amx_run *r, int t, int b0, int b1, float *cb) {
    const uint8_t *xa = r->xq + (size_t)t * 16 * r->xa_row;
    const size_t ldc = 64; /* a C tile row: 16 floats, the next row right after */
    float *cb1 = cb + 256; /* the second half's tile of a block */
    for (int b = b0; b < b1; b++) {
        _tile_loadd(2, xa + (size_t)b * 64, r->xa_row);
        _tile_loadd(3, xa + (size_t)(r->nb + b) * 64, r->xa_row);
        _tile_loadd(4, r->pan[b].b[0], 64);
        if (r->nh > 1) _tile_loadd(5, r->pan[b].b[1], 64);
        if (b & 1) {
            _tile_zero(6);
            _tile_dpbf16ps(6, 2, 4);
            _tile_dpbf16ps(6, 3, 4);
            if (r->nh > 1) {
                _tile_zero(7);
                _tile_dpbf16ps(7, 2, 5);
                _tile_dpbf16ps(7, 3, 5);
            }
            _tile_stored(6, cb + 512 * b, ldc);
            if (r->nh > 1) _tile_stored(7, cb1 + 512 * b, ldc);
        } else {
            _tile_zero(0);
            _tile_dpbf16ps(0, 2, 4);
            _tile_dpbf16ps(0, 3, 4);
            if (r->nh > 1) {
                _tile_zero(1);
                _tile_dpbf16ps(1, 2, 5);
                _tile_dpbf16ps(1, 3, 5);
            }
            _tile_stored(0, cb + 512 * b, ldc);
            if (r->nh > 1) _tile_stored(1, cb1 + 512 * b, ldc);
        }
    }
}

/* Block b of one output row into chain v: v = fma((float)i_b, dw * dx, v),
 * Q4_1: v = fma(mw, sx, v). */
AI __m512 step(const amx_blk *p, int h, const float *cr, const float *dx, const float *sx, int b,
               __m512 v, int q41) {
    __m512 s = _mm512_mul_ps(_mm512_load_ps(p->dw + 16 * h), _mm512_set1_ps(dx[b]));
    v = _mm512_fmadd_ps(_mm512_load_ps(cr + 512 * b), s, v);
    if (q41) v = _mm512_fmadd_ps(_mm512_load_ps(p->mw + 16 * h), _mm512_set1_ps(sx[b]), v);
    return v;
}

/* Row i, half h of row tile t, its dots in cb: the canonical float steps
 * (kernels_impl.h, kquant.h: the same order for every type). */
AI void unit_row(const amx_run *r, int t, int h, int i, const float *cb, int q41) {
    const int nb = r->nb, nf = nb / 16 * 16;
    const float *cr = cb + (size_t)(h * 16 + i) * 16;
    uint8_t *row = (uint8_t *)r->xq + (size_t)(t * 16 + i) * r->xa_row;
    const float *dx = kvs_xa_dx(row, r->type, nb), *sx = kvs_xa_sx(row, r->type, nb);
    __m512 y = _mm512_setzero_ps(); /* no full group: the sum of 16 zero chains */
    if (nf) {
        __m512 a[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) a[c] = _mm512_setzero_ps();
        for (int b0 = 0; b0 < nf; b0 += 16)
#pragma GCC unroll 16
            for (int c = 0; c < 16; c++) a[c] = step(&r->pan[b0 + c], h, cr, dx, sx, b0 + c, a[c], q41);
        y = tree16_lanes(a);
    }
    for (int b = nf; b < nb; b++) y = step(&r->pan[b], h, cr, dx, sx, b, y, q41);
    int cnt = r->nr - 16 * h;
    __mmask16 mk = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
    _mm512_mask_storeu_ps(r->y + (size_t)(t * 16 + i) * r->ldy + 16 * h, mk, y);
}

#define CB_PAD KVS_AMX_CB_PAD

/* All row tiles of a panel, software-pipelined: while the rows of tile t
 * run their float steps, the tiles of t + 1 fill the other buffer (a
 * sixteenth of its blocks per row), so the tile unit and the vector unit
 * work at the same time. */
AI void panel(const amx_run *r, float *cbuf, int q41) {
    const int nt = (r->m + 15) / 16;
    /* floats of one buffer, plus 17 lines so the two buffers never sit a
     * multiple of 4 KiB apart (loads from one would falsely wait on tile
     * stores to the other) */
    const size_t cbn = (size_t)16 * 2 * r->nb * 16 + CB_PAD;
    unit_tiles(r, 0, 0, r->nb, cbuf);
    for (int t = 0; t < nt; t++) {
        int mr = r->m - 16 * t < 16 ? r->m - 16 * t : 16;
        const float *cb = cbuf + (t & 1) * cbn;
        float *cb1 = cbuf + ((t + 1) & 1) * cbn;
        for (int i = 0; i < 16; i++) {
            if (t + 1 < nt) unit_tiles(r, t + 1, i * r->nb / 16, (i + 1) * r->nb / 16, cb1);
            if (i < mr)
                for (int h = 0; h < r->nh; h++) unit_row(r, t, h, i, cb, q41);
        }
    }
}

/* Q8_0 on int8 tiles (TDPBSSD, exact int32): the hi and lo dots of a
 * block's half h (a "unit") on the C tiles of one of two sets, 0/1 (B in
 * 4) and 6/7 (B in 5), alternating unit by unit; q8_unit_store puts them
 * at the block's buffer + 256 h (hi) and + 512 + 256 h (lo), 256 int32
 * each, rows of 16. */
AI void q8_unit_products(const amx_run *r, int b, int h, int set) {
    if (set) {
        _tile_loadd(5, r->pan[b].b[h], 64);
        _tile_zero(6);
        _tile_zero(7);
        _tile_dpbssd(6, 2, 5);
        _tile_dpbssd(7, 3, 5);
    } else {
        _tile_loadd(4, r->pan[b].b[h], 64);
        _tile_zero(0);
        _tile_zero(1);
        _tile_dpbssd(0, 2, 4);
        _tile_dpbssd(1, 3, 4);
    }
}

AI void q8_unit_store(float *dst, int set) {
    if (set) {
        _tile_stored(6, dst, 64);
        _tile_stored(7, dst + 512, 64);
    } else {
        _tile_stored(0, dst, 64);
        _tile_stored(1, dst + 512, 64);
    }
}

/* Q8_0 panel. Its two tiles per block and half (hi and lo) would double
 * the 1 KiB tile stores into the whole-row-tile buffers of panel(), and a
 * tile store into lines L1 no longer holds costs ~4x one into lines it
 * does. So the blocks run in stages of at most 4 whose tiles fit one of
 * two 16 KiB buffer sets that L1 keeps, and the next stage's tiles are
 * issued before the current stage's float steps. The full groups' stages:
 *  - one block a chain (16 <= nb < 32, every k = 576 shape): stage q < 4
 *    is the tree's quarter q, blocks q, q + 4, q + 8, q + 12, each the one
 *    block of its chain; its first two tree levels ((q + q + 8) + (q + 4 +
 *    q + 12), kvs_tree16's pairing) run in the stage, so a row keeps one
 *    vector of it, not four (the chains' stores and the tree's loads had
 *    taken a third of the kernel's time);
 *  - else stage c < 16 is chain c (blocks c, c + 16, ..: the chain in
 *    registers, 16 rows of one half at a time, then stored for the tree).
 * After the last of them each row's tree gives acc; the stages after it
 * are the tail blocks in order (on acc, or on zero without a full group). */
#define Q8_STAGE 4                       /* blocks per stage: k <= 2048 gives <= 4 per chain */
#define Q8_BUF (1024 + 16)               /* 4-byte words (int32 dots) of one block's tiles, plus a line */
#define Q8_SET (Q8_STAGE * Q8_BUF + 256) /* a buffer set, plus 16 lines */
#define CH_ROW 17                        /* chains of one row and half, plus one (measured) */

typedef enum { Q8_CHAIN, Q8_QUARTER, Q8_TAIL } q8_kind;

typedef struct q8_stage {
    int first, count, stride;
    int slot;     /* Q8_CHAIN: the chain; Q8_QUARTER: the quarter; Q8_TAIL: -1 */
    q8_kind kind;
} q8_stage;

/* Stages of the full groups: 4 quarters where each chain has one block. */
AI int q8_group_stages(int nb) {
    const int nf = nb / 16 * 16;
    return nf == 16 ? 4 : nf ? 16 : 0;
}

AI q8_stage q8_stage_of(int nb, int s) {
    const int nf = nb / 16 * 16, ng = q8_group_stages(nb);
    if (s < ng) return ng == 4 ? (q8_stage){s, 4, 4, s, Q8_QUARTER} : (q8_stage){s, nf / 16, 16, s, Q8_CHAIN};
    const int first = nf + Q8_STAGE * (s - ng);
    return (q8_stage){first, nb - first < Q8_STAGE ? nb - first : Q8_STAGE, 1, -1, Q8_TAIL};
}

/* A stage's blocks of row tile t, unit by unit, each unit's tiles stored
 * after the next unit's products are issued: a store right behind its own
 * products waits for them, one a unit behind overlaps the next products
 * (tiles alone, in L1, on the AMX Xeon: 23 ns a block of both halves
 * against 34 storing each unit at once). */
AI void q8_stage_tiles(const amx_run *r, int t, q8_stage st, float *set) {
    const uint8_t *xa = r->xq + (size_t)t * 16 * r->xa_row;
    float *pending = NULL;
    int u = 0;
    for (int g = 0; g < st.count; g++) {
        const int b = st.first + g * st.stride;
        _tile_loadd(2, xa + (size_t)b * 64, r->xa_row);
        _tile_loadd(3, xa + (size_t)b * 64 + 32, r->xa_row);
        for (int h = 0; h < r->nh; h++, u++) {
            q8_unit_products(r, b, h, u & 1);
            if (pending) q8_unit_store(pending, (u - 1) & 1);
            pending = set + g * Q8_BUF + 256 * h;
        }
    }
    if (pending) q8_unit_store(pending, (u - 1) & 1);
}

_Static_assert(KVS_AMX_MAX_K / KVS_QK / 16 <= Q8_STAGE, "a Q8_0 chain's blocks fit one stage");

/* Row i's block g of a stage, half h: fma((float)i_b, dw * dx, v). */
AI __m512 q8_step(const float *c, int i, __m512 dw, const float *dx, size_t xa_row, __m512 v) {
    const __m512i hi = _mm512_load_si512(c + 16 * i), lo = _mm512_load_si512(c + 512 + 16 * i);
    const __m512 ib = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo));
    const float dxi = *(const float *)((const uint8_t *)dx + (size_t)i * xa_row);
    return _mm512_fmadd_ps(ib, _mm512_mul_ps(dw, _mm512_set1_ps(dxi)), v);
}

/* A stage's float steps for the 16 rows of half h: chains or the tail on
 * v[] (from acc for the tail), or a quarter's four one-block chains and
 * their first two tree levels; the rows' results into ch (chain, quarter)
 * or acc (tail). */
AI void q8_stage_steps(const amx_run *r, q8_stage st, int h, const float *set, const float *dx0, float *ch,
                       float *acc) {
    if (st.kind == Q8_QUARTER) {
        __m512 dw[4];
        const float *c[4], *dx[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const int b = st.first + 4 * g;
            dw[g] = _mm512_load_ps(r->pan[b].dw + 16 * h);
            c[g] = set + g * Q8_BUF + 256 * h;
            dx[g] = dx0 + b;
        }
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            __m512 p[4];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) p[g] = q8_step(c[g], i, dw[g], dx[g], r->xa_row, _mm512_setzero_ps());
            _mm512_store_ps(ch + ((size_t)(h * 16 + i) * CH_ROW + st.slot) * 16, tree4_lanes(p[0], p[1], p[2], p[3]));
        }
        return;
    }
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        v[i] = st.kind == Q8_CHAIN ? _mm512_setzero_ps() : _mm512_load_ps(acc + (size_t)(h * 16 + i) * 16);
    for (int g = 0; g < st.count; g++) {
        const int b = st.first + g * st.stride;
        const float *c = set + g * Q8_BUF + 256 * h;
        const __m512 dw = _mm512_load_ps(r->pan[b].dw + 16 * h);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) v[i] = q8_step(c, i, dw, dx0 + b, r->xa_row, v[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        _mm512_store_ps(st.kind == Q8_CHAIN ? ch + ((size_t)(h * 16 + i) * CH_ROW + st.slot) * 16
                                            : acc + (size_t)(h * 16 + i) * 16,
                        v[i]);
}

/* After the last group stage: each row's tree (of its 16 chains, or the
 * last two levels over its 4 quarters) into acc. */
AI void q8_trees(const amx_run *r, q8_kind kind, const float *ch, float *acc) {
    for (int q = 0; q < r->nh * 16; q++) {
        const float *cq = ch + (size_t)q * CH_ROW * 16;
        if (kind == Q8_QUARTER) {
            _mm512_store_ps(acc + 16 * q, tree4_lanes(_mm512_load_ps(cq), _mm512_load_ps(cq + 16),
                                                      _mm512_load_ps(cq + 32), _mm512_load_ps(cq + 48)));
            continue;
        }
        __m512 a[16];
#pragma GCC unroll 16
        for (int u = 0; u < 16; u++) a[u] = _mm512_load_ps(cq + 16 * u);
        _mm512_store_ps(acc + 16 * q, tree16_lanes(a));
    }
}

AI void panel_q8(const amx_run *r, float *buf, float *ch, float *acc) {
    const int nt = (r->m + 15) / 16, nb = r->nb, nf = nb / 16 * 16, ng = q8_group_stages(nb);
    const int nst = ng + (nb - nf + Q8_STAGE - 1) / Q8_STAGE;
    unsigned seq = 0;
    q8_stage_tiles(r, 0, q8_stage_of(nb, 0), buf);
    for (int t = 0; t < nt; t++) {
        const uint8_t *row0 = r->xq + (size_t)t * 16 * r->xa_row;
        const float *dx0 = kvs_xa_dx((uint8_t *)row0, r->type, nb);
        const int mr = r->m - 16 * t < 16 ? r->m - 16 * t : 16;
        /* the row tile's output lines, for writing (prefetchw), while its
         * stages run: 16 rows ldy apart whose stores at the end had waited
         * for their lines (SmolLM2's 576 x 49152 head at m = 512, y 100 MB:
         * 0.80x the time; the model's shapes 0.97-0.99x) */
        for (int i = 0; i < mr; i++)
            for (int h = 0; h < r->nh; h++) __builtin_prefetch(r->y + (size_t)(t * 16 + i) * r->ldy + 16 * h, 1, 3);
        if (!nf)
            for (int q = 0; q < 2 * 16; q++) _mm512_store_ps(acc + 16 * q, _mm512_setzero_ps());
        for (int s = 0; s < nst; s++, seq++) {
            if (s + 1 < nst) q8_stage_tiles(r, t, q8_stage_of(nb, s + 1), buf + ((seq + 1) & 1) * Q8_SET);
            else if (t + 1 < nt) q8_stage_tiles(r, t + 1, q8_stage_of(nb, 0), buf + ((seq + 1) & 1) * Q8_SET);
            const float *set = buf + (seq & 1) * Q8_SET;
            const q8_stage st = q8_stage_of(nb, s);
            for (int h = 0; h < r->nh; h++) q8_stage_steps(r, st, h, set, dx0, ch, acc);
            if (s == ng - 1) q8_trees(r, st.kind, ch, acc); /* the full groups done: each row's tail starts */
        }
        for (int h = 0; h < r->nh; h++) {
            const int cnt = r->nr - 16 * h;
            const __mmask16 mk = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
            for (int i = 0; i < mr; i++)
                _mm512_mask_storeu_ps(r->y + (size_t)(t * 16 + i) * r->ldy + 16 * h, mk,
                                      _mm512_load_ps(acc + (size_t)(h * 16 + i) * 16));
        }
    }
}

/* ------------------------------------------------------------ entry point */

/* Per-thread scratch: the repacked weight panel and the two tile result
 * buffers, ~410 KB: too much for the stack of an arbitrary caller thread,
 * so every thread allocates it once, on its first AMX call, and frees it
 * when it exits (pthread key destructor). */
typedef struct amx_scratch {
    amx_blk pan[KVS_AMX_MAX_K / KVS_QK];
    float cbuf[KVS_AMX_CBUF_FLOATS];
} amx_scratch;

_Static_assert(2 * Q8_SET + 2 * 16 * CH_ROW * 16 + 2 * 16 * 16 <= sizeof(((amx_scratch *)0)->cbuf) / sizeof(float),
               "panel_q8's buffers, chains and acc fit cbuf");

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_key_ok;

static void scratch_key_init(void) { g_scratch_key_ok = pthread_key_create(&g_scratch_key, free) == 0; }

static amx_scratch *thread_scratch(void) {
    pthread_once(&g_scratch_once, scratch_key_init);
    if (!g_scratch_key_ok) return NULL;
    amx_scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = aligned_alloc(64, (sizeof *s + 63) & ~(size_t)63);
        if (s && pthread_setspecific(g_scratch_key, s)) {
            free(s);
            s = NULL;
        }
    }
    return s;
}

static void amx_cols(const kvs_mm_call *c, int j0, int j1, amx_blk *pan, float *cbuf) {
    const kvs_wmat *w = c->w;
    const int nb = w->k / KVS_QK;
    amx_tilecfg cfg __attribute__((aligned(64)));
    amx_config_square(&cfg); /* C, C, A hi, A lo, B, B, C, C: 16 rows x 64 bytes */
    if (kvs_xa_int8(w->type)) { /* int8, K = one block: A 16 x 32 bytes, B 8 x 64 */
        cfg.colsb[2] = cfg.colsb[3] = 32;
        cfg.rows[4] = cfg.rows[5] = 8;
    }
    amx_load_config(&cfg); /* per thread, per call: released below */
    for (int jt = j0; jt < j1; jt += PANEL) {
        int nr = j1 - jt < PANEL ? j1 - jt : PANEL;
        if (w->type == KVS_TYPE_Q4_K) prep_panel_q4k(w, jt, nr, nb, pan);
        else if (w->type == KVS_TYPE_Q8_0) prep_panel_q8(w, jt, nr, nb, pan);
        else prep_panel(w, jt, nr, nb, pan);
        /* rows past m exist in xa (rounded up to 16, zero): tiles stay full */
        amx_run r = {.pan = pan, .xq = c->xq, .xa_row = c->xq_row, .nb = nb, .nh = nr > 16 ? 2 : 1,
                     .m = c->m, .type = w->type, .nr = nr, .y = c->y + jt, .ldy = (size_t)w->n};
        if (w->type == KVS_TYPE_Q4_1 || w->type == KVS_TYPE_Q4_K) panel(&r, cbuf, 1); /* a min */
        else if (w->type == KVS_TYPE_Q8_0) /* scratch: two buffer sets, the chains, acc */
            panel_q8(&r, cbuf, cbuf + 2 * Q8_SET, cbuf + 2 * Q8_SET + 2 * 16 * CH_ROW * 16);
        else panel(&r, cbuf, 0);
    }
    _tile_release();
}

/* Only if a thread's scratch cannot be allocated: the same work with the
 * scratch on the stack (the activations are already in the AMX layout, so
 * another ISA cannot take over). */
__attribute__((noinline)) static void amx_cols_stack(const kvs_mm_call *c, int j0, int j1) {
    amx_scratch s __attribute__((aligned(64)));
    amx_cols(c, j0, j1, s.pan, s.cbuf);
}

float *kvs_amx_thread_cbuf(void) {
    amx_scratch *s = thread_scratch();
    return s ? s->cbuf : NULL;
}

static void amx_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    amx_scratch *s = thread_scratch();
    if (s) amx_cols(c, j0, j1, s->pan, s->cbuf);
    else amx_cols_stack(c, j0, j1);
}

const kvs_isa kvs_isa_amx = {
    .name = "amx",
    .quantize_rows = amx_quantize_rows,
    .matmul_cols = amx_matmul_cols,
    .attention_unit = kvs_attention_unit_avx512,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
