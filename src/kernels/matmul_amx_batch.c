/*
 * AMX for a batch of streams: Q8_0 weights against KVS_AMX_BATCH_MIN_M..
 * KVS_AMX_BATCH_MAX_M activation rows (the server's batched decode step),
 * int8 tiles, exactly the bits of the scalar reference (kernels_impl.h's
 * canonical order).
 *
 * Why: at 8 rows the AVX-512 path (matmul_avx512_m1.c many_rows) spends 16
 * vpdpbusd and 17 loads per activation row, weight row and group of 16
 * blocks, ~26% of the vpdpbusd peak; the Q8_0 output head is half of a
 * gemma3 step of 8 streams. One TDPBSSD does 16 weight rows x 16 columns of
 * a block in ~16 cycles. With the weights in L2 (bench_kernels, SmolLM2's
 * Q8_0 shapes, m = 8, 1 thread) the calls at k = 576 take ~0.7x the AVX-512
 * path's time (at k = 1536, whose 48 KiB of C outgrew L1 before the passes
 * below, 1.0-1.2x); in a model the weights stream from L3 or DRAM and the
 * tile loads wait on them (the next panels are prefetched into L2), so a
 * whole step gains less (docs/performance-log.md, sessions 35 and 37).
 *
 * Tiles, per block b of a panel of 16 weight rows:
 *   A  the 16 weight rows' 32 signed bytes of block b, loaded straight from
 *      the GGUF rows (tile rows row_bytes apart, 34-byte blocks: d, then
 *      the bytes): no repack, the weights are read once per call.
 *   B  the call's activations of block b ("xb", quantized once per call):
 *      8 rows (row r: elements 4r..4r+3) x 16 dword columns, column i < 8
 *      the hi level of activation row i, column 8 + i its lo level (rows
 *      past m zero).
 *   C  = A B: C[n][i] = dot(w_n, hi_i), C[n][8 + i] = dot(w_n, lo_i), exact
 *      int32 (|dot| <= 32 * 128 * 127 < 2^19).
 * The epilogue takes weight rows in pairs (n, n + 1): lanes 0..7 are
 * outputs (i, n), lanes 8..15 (i, n + 1); i_b = 256 hi + lo is exact in
 * int32 (< 2^27) and converted once, as the reference's (float)i_b; then
 * the canonical float steps lane-wise: blocks b < nf on chain b % 16 in
 * registers, kvs_tree16, the tail blocks in order. A panel's blocks go in
 * passes of BATCH_PASS (tiles, then each pair's steps), the pairs' chains
 * kept between passes.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,bmi2,amx-tile,amx-int8")
#endif

#include <string.h>

#include "kernels/amx_util.h"
#include "kernels/avx512_util.h"

/* ------------------------------------------------------------ quantize x */

static void batch_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    const int k = c->w->k, nb = k / KVS_QK;
    uint8_t *tiles = (uint8_t *)c->xq;
    float *dxv = kvs_xb_dx(tiles, nb);
    const __m128i tile_rows = _mm_setr_epi32(0, 64, 128, 192); /* dwords 4h..4h+3: B rows 4h.. */
    for (int i = i0; i < i1; i++)
        for (int b = 0; b < nb; b++) {
            __m512i qh[2], ql[2];
            int32_t sum;
            const float dx = quantize_block_levels(c->x + (size_t)i * k + (size_t)b * KVS_QK, qh, ql, &sum);
            uint8_t *t = tiles + (size_t)b * KVS_XB_TILE;
            for (int h = 0; h < 2; h++) { /* levels are in [-127, 127]: vpmovdb keeps them */
                _mm_i32scatter_epi32(t + 256 * h + 4 * i, tile_rows, _mm512_cvtepi32_epi8(qh[h]), 1);
                _mm_i32scatter_epi32(t + 256 * h + 4 * (KVS_AMX_BATCH_MAX_M + i), tile_rows,
                                     _mm512_cvtepi32_epi8(ql[h]), 1);
            }
            dxv[16 * b + i] = dxv[16 * b + KVS_AMX_BATCH_MAX_M + i] = dx;
        }
}

/* ------------------------------------------------------------- kernel */

static void configure(int nr) {
    amx_tilecfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) { /* C (nr x 16 dwords), A (nr x 32 bytes), B (8 x 16 dwords) */
        cfg.rows[t] = (uint8_t)nr;
        cfg.colsb[t] = 64;
        cfg.rows[2 + t] = (uint8_t)nr;
        cfg.colsb[2 + t] = 32;
        cfg.rows[4 + t] = 8;
        cfg.colsb[4 + t] = 64;
    }
    amx_load_config(&cfg);
}

/* Share part of parts of the bytes [a0, a1) into L2. */
AI void prefetch_share(uintptr_t a0, uintptr_t a1, int part, int parts) {
    for (uintptr_t a = a0 + (a1 - a0) * part / parts; a < a0 + (a1 - a0) * (part + 1) / parts; a += 64)
        _mm_prefetch((const char *)a, _MM_HINT_T1);
}

/* Every block's C of a pass at wrow (the first row's first block's bytes) into
 * cb[b] (256 int32, rows of 16), a share of [pf0, pf1) prefetched with each
 * block; even and odd blocks on tiles of their own, so a block's product
 * need not wait for the previous block's store. */
static inline void pass_tiles(const uint8_t *wrow, size_t row_bytes, const uint8_t *xb, int nb, int32_t *cb,
                               uintptr_t pf0, uintptr_t pf1) {
    for (int b = 0; b < nb; b++) {
        prefetch_share(pf0, pf1, b, nb);
        const uint8_t *a = wrow + (size_t)b * 34, *bt = xb + (size_t)b * KVS_XB_TILE;
        int32_t *dst = cb + 256 * b;
        if (b & 1) {
            _tile_loadd(3, a, row_bytes);
            _tile_loadd(5, bt, 64);
            _tile_zero(1);
            _tile_dpbssd(1, 3, 5);
            _tile_stored(1, dst, 64);
        } else {
            _tile_loadd(2, a, row_bytes);
            _tile_loadd(4, bt, 64);
            _tile_zero(0);
            _tile_dpbssd(0, 2, 4);
            _tile_stored(0, dst, 64);
        }
    }
}

/* Block b of the pair at rows c0 (weight row n) and c1 (n + 1, or c0 again
 * when n is the panel's last row): (float)i_b of lanes (i, n), (i, n + 1). */
AI __m512 pair_dots(const int32_t *c0, const int32_t *c1) {
    const __m512i a = _mm512_load_si512(c0), d = _mm512_load_si512(c1);
    const __m512i s = _mm512_shuffle_i64x2(a, d, 0x4e);   /* lo of n | hi of n + 1 */
    const __m512i hi = _mm512_mask_blend_epi32(0xff00, a, s); /* hi of n | hi of n + 1 */
    const __m512i lo = _mm512_mask_blend_epi32(0xff00, s, d); /* lo of n | lo of n + 1 */
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo));
}

/* Block b's float step of pair p on acc: fma((float)i_b, dw * dx, acc);
 * pick takes the pair's two dw (rows 2p and r1) out of dwt[b]. */
AI __m512 pair_step(const int32_t *cb, const float *dwt, const float *dxv, int b, int p, int r1, __m512i pick,
                    __m512 acc) {
    const __m512 s = _mm512_mul_ps(_mm512_permutexvar_ps(pick, _mm512_load_ps(dwt + 16 * b)),
                                   _mm512_load_ps(dxv + 16 * b));
    return _mm512_fmadd_ps(pair_dots(cb + 256 * b + 32 * p, cb + 256 * b + 16 * r1), s, acc);
}

/* Blocks of a pass: a pass's C and dw, and the pairs' chains between
 * passes, stay in L1 while the weights stream in (640 -> 2048, 8 rows,
 * weights from memory, one Xeon thread: all 20 blocks at once 151-154 us a
 * call, passes of 8 142-147, of 4 150; gemma3, 8 streams,
 * 202-206 -> 226-231 tok/s with matmul_amx_batch_nib.c's passes alike). A
 * divisor of 16, so a pass's chains are contiguous and no pass holds blocks
 * on both sides of nf. */
#define BATCH_PASS 8

/* The canonical float steps of one pair p (rows 2p, 2p + 1 of the panel)
 * for the pass of blocks [p0, p1) (p0 a multiple of BATCH_PASS): blocks
 * b < nf on chain b % 16, after the last of them the tree, then blocks
 * b >= nf in order on its result. cb, dwt hold the pass's blocks (block b
 * at b - p0: dwt[b] the panel's 16 dw of block b), dxv every block's dx of
 * the rows twice. Between passes the pair's chains (or the tree's result,
 * in st[0]) wait in st[16]. Returns the outputs after the last pass. */
AI __m512 pair_pass(const int32_t *cb, const float *dwt, const float *dxv, int p0, int p1, int nf, int nb, int p,
                    int nr, float *st) {
    const int r1 = 2 * p + 1 < nr ? 2 * p + 1 : 2 * p, n = p1 - p0;
    const __m512i pick = _mm512_set_epi32(r1, r1, r1, r1, r1, r1, r1, r1, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p,
                                          2 * p, 2 * p);
    const float *dx = dxv + 16 * p0;
    __m512 y;
    if (p0 < nf) {
        __m512 a[16];
        chains_load(a, st, p0 == 0);
#pragma GCC unroll 16
        for (int q = 0; q < 16; q += BATCH_PASS) /* chains q.. (constant indices: a[] stays in registers) */
            if (p0 % 16 == q)
#pragma GCC unroll 8
                for (int c = 0; c < BATCH_PASS; c++)
                    if (c < n) a[q + c] = pair_step(cb, dwt, dx, c, p, r1, pick, a[q + c]);
        if (p1 < nf) {
            chains_store(st, a);
            return _mm512_setzero_ps();
        }
        y = tree16_lanes(a);
    } else {
        y = p0 ? _mm512_load_ps(st) : _mm512_setzero_ps(); /* no full group: the sum of 16 zero chains */
        for (int c = 0; c < n; c++) y = pair_step(cb, dwt, dx, c, p, r1, pick, y);
    }
    if (p1 < nb) _mm512_store_ps(st, y);
    return y;
}

/* Panels ahead that a panel prefetches into L2 (SmolLM2 Q8_0, 8 streams, 2
 * threads, against the AVX-512 path: no prefetch ~0.75x, 1 panel into L1
 * about even, 3 into L2 1.04-1.11x, 2 or 4 the same within noise, 8 less). */
#define BATCH_PF_PANELS 3

/* Columns [j0, j1) of every row. scratch: BATCH_PASS * 256 int32 of C,
 * BATCH_PASS * 16 dw, 8 pairs' chains (16 * 16 floats each), 8 * 16
 * outputs. */
static void batch_cols(const kvs_mm_call *c, int j0, int j1, float *scratch) {
    const kvs_wmat *w = c->w;
    const int nb = w->k / KVS_QK, nf = nb / 16 * 16;
    int32_t *cb = (int32_t *)scratch;
    float *dwt = scratch + BATCH_PASS * 256, *st = dwt + BATCH_PASS * 16, *out = st + 8 * 256;
    const uint8_t *xb = c->xq;
    const float *dxv = kvs_xb_dx((uint8_t *)xb, nb);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)w->row_bytes));
    const __m512i out_idx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    int configured = 0;
    for (int jt = j0; jt < j1; jt += 16) {
        const int nr = j1 - jt < 16 ? j1 - jt : 16;
        const __mmask16 live = (__mmask16)((1u << nr) - 1);
        if (nr != configured) configure(configured = nr);
        const uint8_t *wrow = (const uint8_t *)w->data + (size_t)jt * w->row_bytes;
        /* the rows of the panel BATCH_PF_PANELS ahead (contiguous) into L2,
         * each pass its share, half with the blocks' tiles, half with the
         * pairs: a tile load waits for all its 16 rows, and the hardware
         * prefetchers follow late */
        const size_t pf_bytes = jt + BATCH_PF_PANELS * 16 < j1 ? 16 * w->row_bytes : 0;
        const uintptr_t pf0 = (uintptr_t)wrow + BATCH_PF_PANELS * 16 * w->row_bytes;
        for (int p0 = 0, p1; p0 < nb; p0 = p1) {
            p1 = p0 + BATCH_PASS < nb ? p0 + BATCH_PASS : nb;
            const uintptr_t s0 = pf0 + pf_bytes * p0 / nb, s1 = pf0 + pf_bytes * p1 / nb, sm = s0 + (s1 - s0) / 2;
            pass_tiles(wrow + 2 + (size_t)p0 * 34, w->row_bytes, xb + (size_t)p0 * KVS_XB_TILE, p1 - p0, cb, s0, sm);
            for (int b = p0; b < p1; b++) /* the blocks' f16 d of the nr rows */
                _mm512_store_ps(dwt + 16 * (b - p0), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(
                                                         _mm512_setzero_si512(), live, rows, wrow + (size_t)b * 34, 1))));
            for (int p = 0; 2 * p < nr; p++) {
                prefetch_share(sm, s1, p, 8);
                const __m512 y = pair_pass(cb, dwt, dxv, p0, p1, nf, nb, p, nr, st + 256 * p);
                if (p1 == nb) _mm512_store_ps(out + 16 * p, y);
            }
        }
        for (int i = 0; i < c->m; i++) /* out[p][8h + i] is (i, 2p + h): lane n of row i at 8n + i */
            _mm512_mask_storeu_ps(c->y + (size_t)i * w->n + jt, live,
                                  _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live,
                                                           _mm512_add_epi32(out_idx, _mm512_set1_epi32(i)), out, 4));
    }
    if (configured) _tile_release();
}

KVS_AMX_COLS_ON_SCRATCH(batch_matmul_cols, batch_cols, BATCH_PASS * (256 + 16) + 8 * 256 + 8 * 16)

const kvs_isa kvs_isa_amx_batch = {
    .name = "amx",
    .quantize_rows = batch_quantize_rows,
    .matmul_cols = batch_matmul_cols,
    .attention_unit = kvs_attention_unit_avx512,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
