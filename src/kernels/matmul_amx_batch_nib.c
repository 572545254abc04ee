/*
 * AMX for a batch of streams on 4- and 5-bit weights: Q4_0, Q4_1, Q5_0,
 * Q4_K, and Q8_0 where the arena holds its tiles (kvs_wmat_tiles_to: B read
 * as it is, nothing unpacked), against up to KVS_AMX_BATCH_MAX_M activation
 * rows (the server's batched decode step; from KVS_AMX_BATCH_MIN_M rows on,
 * Q4_0 / Q4_1 from KVS_AMX_BATCH_Q4_MIN_M), int8 tiles, exactly the bits of
 * the scalar reference (the canonical order of kernels_impl.h and kquant.h,
 * the same for every type).
 *
 * Why: at 8 rows the AVX-512 paths (matmul_avx512_m1.c many_rows on Q4_0 /
 * Q4_1, kquant_avx512_batch.c on Q5_0 / Q4_K) spend two vpdpbusd per weight
 * row, activation row and block plus their float steps: ~50 ns (Q4_1) and
 * ~77 ns (Q5_0) per 16 weight rows x 8 rows x one block on the AMX Xeon.
 * One tile product does those 16 x 16 dots (8 rows' hi and lo levels).
 *
 * Unlike matmul_amx_batch.c (Q8_0 on its GGUF rows, which load as a tile
 * as they are), the weights are the B operand, one column a weight row. Q8_0
 * from its tiles (kvs_wmat_tiles_to) loads as it is: 16 outputs then take 5
 * vector ops and 3 loads where matmul_amx_batch.c's pairs take 9 and 4, and
 * no gather (kernel calls at m = 8: 0.85-0.97x the time; docs/
 * performance-log.md, session 45). The others need unpacking: per block of
 * the panel's 16 rows, vectors of the rows' qs dwords, lane n = row n:
 * Q4_0 / Q4_1 / Q5_0 loaded from their tiles (kvs_wmat_tiles_to: 4-5
 * loads; from the GGUF rows 5-6 gathers and their permutes: 8 streams of
 * SmolLM2 Q4_1 1.20x, session 46), else gathered (two dwords a gather element:
 * qword gathers of 8 rows, gather_dword_pair); their low and high nibbles
 * (Q5_0: with the fifth bits from qh) are B rows 0..3 and 4..7 (B row r:
 * elements 4r..4r+3, natural order; Q4_K: one sub-block's 32 nibbles in
 * order, the pair's other sub-block in the other nibbles) - no transpose.
 * Tiles, per block b:
 *   A  the call's activations of block b ("xc", quantized once per call):
 *      16 rows of 32 signed bytes, row i < 8 the hi level of activation row
 *      i, row 8 + i its lo level (rows past m zero).
 *   B  the 16 weight rows' integers of block b: Q4_0 q - 8, Q5_0 q - 16 and
 *      Q8_0's bytes signed (TDPBSSD), Q4_1's and Q4_K's q unsigned (TDPBSUD).
 *   C  = A B: C[i][n] = dot(hi_i, w_n), C[8 + i][n] = dot(lo_i, w_n), exact
 *      int32 (|dot| <= 32 * 16 * 127 < 2^17; Q8_0 32 * 128 * 127 < 2^19).
 * The epilogue runs activation row by activation row, lanes = the panel's 16
 * weight rows: i_b = 256 hi + lo (exact in int32; < 2^24, Q8_0's < 2^27
 * rounded as the reference's (float)i_b) converted once, then the
 * canonical float steps lane-wise on 16 chains in registers, and the row's
 * 16 outputs stored as they are. A panel's blocks go in passes of NIB_PASS
 * (unpack, tiles, then each row's steps), the rows' chains kept between
 * passes.
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

static void nib_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    const int k = c->w->k, nb = k / KVS_QK;
    uint8_t *tiles = (uint8_t *)c->xq;
    float *dxv = kvs_xc_dx(tiles, nb), *sxv = kvs_xc_sx(tiles, nb);
    for (int i = i0; i < i1; i++)
        for (int b = 0; b < nb; b++) {
            __m512i qh[2], ql[2];
            int32_t sum;
            const float dx = quantize_block_levels(c->x + (size_t)i * k + (size_t)b * KVS_QK, qh, ql, &sum);
            uint8_t *t = tiles + (size_t)b * KVS_XB_TILE;
            for (int h = 0; h < 2; h++) { /* levels are in [-127, 127]: vpmovdb keeps them */
                _mm_storeu_si128((__m128i *)(t + 32 * i + 16 * h), _mm512_cvtepi32_epi8(qh[h]));
                _mm_storeu_si128((__m128i *)(t + 32 * (KVS_AMX_BATCH_MAX_M + i) + 16 * h), _mm512_cvtepi32_epi8(ql[h]));
            }
            dxv[KVS_AMX_BATCH_MAX_M * b + i] = dx;
            sxv[KVS_AMX_BATCH_MAX_M * b + i] = dx * (float)sum;
        }
}

/* ------------------------------------------------------------- weights */

/* A type's GGUF block: its bytes, where qs and Q5_0's qh (else -1) start,
 * the offset subtracted from q (0: unsigned), whether it has a min (Q4_1:
 * its f16 m after d). */
typedef struct nib_type {
    int bytes, qs_at, qh_at, offset, min;
} nib_type;

static nib_type nib_type_of(int type) {
    switch (type) {
    case KVS_TYPE_Q8_0: return (nib_type){34, 2, -1, 0, 0}; /* its tiles (kvs_wmat_tiles_to): nothing to unpack */
    case KVS_TYPE_Q4_0: return (nib_type){18, 2, -1, 8, 0};
    case KVS_TYPE_Q4_1: return (nib_type){20, 4, -1, 0, 1};
    case KVS_TYPE_Q4_K: return (nib_type){144, 16, -1, 0, 1}; /* per 8 blocks: unpack_q4k */
    default: return (nib_type){22, 6, 2, 16, 0}; /* Q5_0 */
    }
}

/* Q5_0: the bytes of B row v (elements 4v..4v+3 of each lane's row) whose
 * fifth bit is clear: each byte of a lane takes the lane's qh byte v / 2 (a
 * byte shuffle) and tests its bit 4 (v % 2) + the byte's index. */
AI __mmask64 q5_bit_clear(__m512i qh, int v) {
    /* every byte of dword d of a 128-bit lane reads byte 4 d + v / 2 */
    const __m512i pick = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c)),
                                         _mm512_set1_epi8((char)(v / 2)));
    const __m512i bits = _mm512_set1_epi32(v % 2 ? (int)0x80402010 : 0x08040201);
    return _mm512_testn_epi8_mask(_mm512_shuffle_epi8(qh, pick), bits);
}

/* Dwords a and a + 1 of the live rows' bytes at blk (lane n: row n's byte
 * offset from blk), as two vectors lane n = row n: qword gathers of rows
 * 0..7 and 8..15 and two dword permutes. A gather costs about a load per
 * element: 16 qwords load where 32 dwords did. */
static const int32_t qword_halves[2][16] __attribute__((aligned(64))) = {
    {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
    {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};

AI void gather_dword_pair(const uint8_t *blk, __m512i rows, __mmask16 live, __m512i *a0, __m512i *a1) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i g0 = _mm512_mask_i32gather_epi64(z, (__mmask8)live, _mm512_castsi512_si256(rows), blk, 1);
    const __m512i g1 =
        _mm512_mask_i32gather_epi64(z, (__mmask8)(live >> 8), _mm512_extracti64x4_epi64(rows, 1), blk, 1);
    *a0 = _mm512_permutex2var_epi32(g0, _mm512_load_si512(qword_halves[0]), g1);
    *a1 = _mm512_permutex2var_epi32(g0, _mm512_load_si512(qword_halves[1]), g1);
}

/* A block's qs dwords (qs[r], lane n = dword r of row n) into a B tile (8
 * rows of 16 dwords) at bt: their low and high nibbles are B rows r and
 * 4 + r (Q5_0 with the fifth bits from qh, Q4_0 minus 8); lanes past live
 * zero. */
AI void split_nibbles(const __m512i qs[4], __m512i qh, __mmask16 live, nib_type t, uint8_t *bt) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const __m512i q = qs[r];
        __m512i v[2] = {_mm512_and_si512(q, lo4), _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4)};
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) { /* elements 16 h + 4 r .. */
            if (t.qh_at >= 0) /* w = q - 16, q = nibble | fifth bit << 4 */
                v[h] = _mm512_mask_sub_epi8(v[h], q5_bit_clear(_mm512_srli_epi32(qh, 16 * h), r), v[h],
                                            _mm512_set1_epi8(16));
            else if (t.offset)
                v[h] = _mm512_sub_epi8(v[h], _mm512_set1_epi8((char)t.offset));
            _mm512_store_si512(bt + 64 * (4 * h + r), _mm512_maskz_mov_epi32(live, v[h]));
        }
    }
}

/* Block b of the live rows (lane n: row n's byte offset from blk, the
 * block's first byte in row 0) into a B tile at bt, their dw (and Q4_1's
 * mw) at dw (mw). */
AI void unpack_block(const uint8_t *blk, __m512i rows, __mmask16 live, nib_type t, uint8_t *bt, float *dw, float *mw) {
    const __m512i z = _mm512_setzero_si512();
    __m512i qs[4], head = z;
    if (t.qs_at >= 4) { /* with the dword before qs (Q4_1's d m, Q5_0's qh); qs 2 twice */
        gather_dword_pair(blk + t.qs_at - 4, rows, live, &head, &qs[0]);
        gather_dword_pair(blk + t.qs_at + 4, rows, live, &qs[1], &qs[2]);
        gather_dword_pair(blk + t.qs_at + 8, rows, live, &qs[2], &qs[3]);
    } else { /* Q4_0 */
        gather_dword_pair(blk + t.qs_at, rows, live, &qs[0], &qs[1]);
        gather_dword_pair(blk + t.qs_at + 8, rows, live, &qs[2], &qs[3]);
    }
    /* d, then m (Q4_1; else bytes nobody reads) */
    const __m512i dm = t.min ? head : _mm512_mask_i32gather_epi32(z, live, rows, blk, 1);
    _mm512_store_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
    if (t.min) _mm512_store_ps(mw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))));
    split_nibbles(qs, head, live, t, bt);
}

/* unpack_block from a Q4_0 / Q4_1 / Q5_0 slot of the tiles
 * (kvs_wmat_tiles_to): four or five loads where the rows take 5-6 gathers. */
AI void unpack_slot(const kvs_wtiles *wt, size_t s, __mmask16 live, nib_type t, uint8_t *bt, float *dw, float *mw) {
    const uint8_t *q = kvs_wtiles_q(wt, s), *d = kvs_wtiles_d(wt, s);
    const __m512i qs[4] = {_mm512_load_si512(q), _mm512_load_si512(q + wt->stride),
                           _mm512_load_si512(q + 2 * wt->stride), _mm512_load_si512(q + 3 * wt->stride)};
    _mm512_store_ps(dw, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)d)));
    if (t.min) _mm512_store_ps(mw, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(d + 32))));
    split_nibbles(qs, t.qh_at >= 0 ? _mm512_load_si512(q + 4 * wt->stride) : _mm512_setzero_si512(), live, t, bt);
}

/* Q4_K (kquant.h): the 8 sub-blocks of the live rows' super-block at sb
 * (lane n: row n's offset from sb) as B tiles at bt + 512 j, their dw = d *
 * sc and mw = -(dmin * m) (the reference's float steps, lane-wise) at dw +
 * 16 j, mw + 16 j. Sub-blocks 2p and 2p + 1 are the low and high nibbles of
 * the same 32 qs bytes: one gather of each dword serves both. */
AI __m512i byte_of(__m512i x, int k) { return _mm512_and_si512(_mm512_srli_epi32(x, 8 * k), _mm512_set1_epi32(0xff)); }

AI void unpack_q4k(const uint8_t *sb, __m512i rows, __mmask16 live, uint8_t *bt, float *dw, float *mw) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f), six = _mm512_set1_epi32(63);
    __m512i dm, q[3]; /* d dmin, scales[0..11] (ggml's get_scale_min_k4) */
    gather_dword_pair(sb, rows, live, &dm, &q[0]);
    gather_dword_pair(sb + 8, rows, live, &q[1], &q[2]);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)), dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m512i sc, m;
        if (j < 4) {
            sc = _mm512_and_si512(byte_of(q[0], j), six);
            m = _mm512_and_si512(byte_of(q[1], j), six);
        } else {
            const __m512i hi = byte_of(q[2], j - 4);
            sc = _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0xf)),
                                 _mm512_slli_epi32(_mm512_srli_epi32(byte_of(q[0], j - 4), 6), 4));
            m = _mm512_or_si512(_mm512_srli_epi32(hi, 4), _mm512_slli_epi32(_mm512_srli_epi32(byte_of(q[1], j - 4), 6), 4));
        }
        _mm512_store_ps(dw + 16 * j, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        const __m512 dm_m = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m));
        _mm512_store_ps(mw + 16 * j, _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dm_m), _mm512_set1_epi32((int)0x80000000u))));
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
#pragma GCC unroll 4
        for (int r = 0; r < 8; r += 2) {
            __m512i v[2];
            gather_dword_pair(sb + 16 + 32 * p + 4 * r, rows, live, &v[0], &v[1]);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                uint8_t *lo = bt + 512 * (2 * p) + 64 * (r + h), *hi = lo + 512;
                _mm512_store_si512(lo, _mm512_maskz_mov_epi32(live, _mm512_and_si512(v[h], lo4)));
                _mm512_store_si512(hi, _mm512_maskz_mov_epi32(live, _mm512_and_si512(_mm512_srli_epi16(v[h], 4), lo4)));
            }
        }
}

/* ------------------------------------------------------------- kernel */

static void configure(void) {
    amx_tilecfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) { /* C (16 x 16 dwords), A (16 x 32 bytes), B (8 x 16 dwords) */
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
        cfg.rows[2 + t] = 16;
        cfg.colsb[2 + t] = 32;
        cfg.rows[4 + t] = 8;
        cfg.colsb[4 + t] = 64;
    }
    amx_load_config(&cfg);
}

/* Every block's C of a pass into cb[b] (256 int32, rows of 16); even and
 * odd blocks on tiles of their own, so a block's product need not wait for
 * the previous block's store. */
/* One block on tiles C, A, B (literal tile numbers: the intrinsics name
 * their registers). */
#define NIB_BLOCK_TILES(C, A, B)                    \
    do {                                            \
        _tile_loadd(A, at, 32);                     \
        _tile_loadd(B, bt, b_stride);               \
        _tile_zero(C);                              \
        if (signed_w) _tile_dpbssd(C, A, B);        \
        else _tile_dpbsud(C, A, B);                 \
        _tile_stored(C, dst, 64);                   \
    } while (0)

static inline void pass_tiles(const uint8_t *xc, const uint8_t *wb, size_t wb_block, size_t b_stride, int nb,
                              int signed_w, int32_t *cb) {
    for (int b = 0; b < nb; b++) {
        const uint8_t *at = xc + (size_t)b * KVS_XB_TILE, *bt = wb + (size_t)b * wb_block;
        int32_t *dst = cb + 256 * b;
        if (b & 1) NIB_BLOCK_TILES(1, 3, 5);
        else NIB_BLOCK_TILES(0, 2, 4);
    }
}

/* Block b's float steps for activation row i on acc, lanes = weight rows:
 * fma((float)i_b, dw * dx, acc), then Q4_1's fma(mw, sx, acc). */
AI __m512 row_step(const int32_t *cb, const float *dwt, const float *mwt, const float *dxv, const float *sxv, int b,
                   int i, int min, __m512 acc) {
    const __m512i hi = _mm512_load_si512(cb + 256 * b + 16 * i);
    const __m512i lo = _mm512_load_si512(cb + 256 * b + 16 * (KVS_AMX_BATCH_MAX_M + i));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo));
    const int s = KVS_AMX_BATCH_MAX_M * b + i;
    acc = _mm512_fmadd_ps(f, _mm512_mul_ps(_mm512_load_ps(dwt + 16 * b), _mm512_set1_ps(dxv[s])), acc);
    if (min) acc = _mm512_fmadd_ps(_mm512_load_ps(mwt + 16 * b), _mm512_set1_ps(sxv[s]), acc);
    return acc;
}

/* Blocks of a pass: a pass's C, B tiles and scales, and the rows' chains
 * between passes, stay in L1 while the weights stream in (Q5_0 640 ->
 * 2048, 8 rows, weights from memory, one Xeon thread: all 20 blocks at
 * once 173-179 us a call, passes of 8 132-136, of 4 135; with the weights
 * in cache 112 / 108-111 / 122 us). A divisor of 16, so a pass's chains
 * are contiguous and no pass holds blocks on both sides of nf. */
#define NIB_PASS 8

/* Activation row i's float steps for the pass of blocks [p0, p1) (p0 a
 * multiple of NIB_PASS): blocks b < nf on chain b % 16, after the last of
 * them the tree, then blocks b >= nf in order on its result (nf = whole
 * groups of 16, every type). cb, dwt, mwt hold the pass's blocks (block b at b - p0), dxv and
 * sxv every block's. Between passes the row's chains (or the tree's
 * result, in st[0]) wait in st[16]. Returns the outputs after the last
 * pass. */
AI __m512 row_pass(const int32_t *cb, const float *dwt, const float *mwt, const float *dxv, const float *sxv, int p0,
                   int p1, int nf, int nb, int i, int min, float *st) {
    const int n = p1 - p0;
    const float *dx = dxv + KVS_AMX_BATCH_MAX_M * p0, *sx = sxv + KVS_AMX_BATCH_MAX_M * p0;
    __m512 y;
    if (p0 < nf) {
        __m512 a[16];
        chains_load(a, st, p0 == 0);
#pragma GCC unroll 16
        for (int q = 0; q < 16; q += NIB_PASS) /* chains q.. (constant indices: a[] stays in registers) */
            if (p0 % 16 == q)
#pragma GCC unroll 8
                for (int c = 0; c < NIB_PASS; c++)
                    if (c < n) a[q + c] = row_step(cb, dwt, mwt, dx, sx, c, i, min, a[q + c]);
        if (p1 < nf) {
            chains_store(st, a);
            return _mm512_setzero_ps();
        }
        y = tree16_lanes(a);
    } else {
        y = p0 ? _mm512_load_ps(st) : _mm512_setzero_ps(); /* no full group: the sum of 16 zero chains */
        for (int c = 0; c < n; c++) y = row_step(cb, dwt, mwt, dx, sx, c, i, min, y);
    }
    if (p1 < nb) _mm512_store_ps(st, y);
    return y;
}

/* Panels ahead that a panel prefetches into L2 (SmolLM2 Q4_1 on this path,
 * 8 streams, 1 thread, before the passes: none 0.85x, 1 or 3 into L1
 * 0.88x, 6 into L2 0.95x of 3 into L2). */
#define NIB_PF_PANELS 3

/* Columns [j0, j1) of every row. scratch: NIB_PASS * 256 int32 of C, as
 * many * 128 of B tiles, * 16 dw, * 16 mw, then the rows' chains. */
static void nib_cols(const kvs_mm_call *c, int j0, int j1, float *scratch) {
    const kvs_wmat *w = c->w;
    const nib_type t = nib_type_of(w->type);
    const int q4k = w->type == KVS_TYPE_Q4_K, q8 = w->type == KVS_TYPE_Q8_0, nb = w->k / KVS_QK, min = t.min;
    const kvs_wtiles qt = kvs_wtiles_of(w); /* used where w->tiles (Q8_0: always on this path) */
    const int tiled = w->tiles != NULL;
    const int nf = nb / 16 * 16; /* every type (kernels_impl.h, kquant.h): whole groups on chains, then the tail */
    int32_t *cb = (int32_t *)scratch;
    uint8_t *wb = (uint8_t *)(cb + NIB_PASS * 256);
    float *dwt = (float *)(wb + NIB_PASS * KVS_XB_TILE), *mwt = dwt + NIB_PASS * 16, *st = mwt + NIB_PASS * 16;
    const uint8_t *xc = c->xq;
    const float *dxv = kvs_xc_dx((uint8_t *)xc, nb), *sxv = kvs_xc_sx((uint8_t *)xc, nb);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)w->row_bytes));
    configure();
    for (int jt = j0; jt < j1; jt += 16) {
        const int nr = j1 - jt < 16 ? j1 - jt : 16;
        const __mmask16 live = (__mmask16)((1u << nr) - 1);
        const uint8_t *wrow = (const uint8_t *)w->data + (size_t)jt * w->row_bytes;
        const size_t s0 = (size_t)(jt / 16) * nb; /* tiles: the panel's first slot (kvs_wtiles) */
        /* the rows of the panel NIB_PF_PANELS ahead (contiguous) into L2,
         * with the blocks' unpacking: a gather waits for all 16 rows */
        const int ahead = jt + NIB_PF_PANELS * 16 < j1; /* that panel is this call's */
        const size_t pf_bytes = ahead ? 16 * w->row_bytes : 0;
        const uintptr_t pf0 = (uintptr_t)wrow + NIB_PF_PANELS * 16 * w->row_bytes;
        for (int p0 = 0, p1; p0 < nb; p0 = p1) {
            p1 = p0 + NIB_PASS < nb ? p0 + NIB_PASS : nb;
            for (int b = p0; b < p1; b++) {
                if (tiled) { /* the same slot NIB_PF_PANELS panels ahead, its line in each stream */
                    if (ahead) {
                        const size_t sa = s0 + (size_t)NIB_PF_PANELS * nb + b;
                        for (int r = 0; r < qt.q_streams; r++)
                            _mm_prefetch((const char *)kvs_wtiles_q(&qt, sa) + r * qt.stride, _MM_HINT_T1);
                        _mm_prefetch((const char *)kvs_wtiles_d(&qt, sa), _MM_HINT_T1);
                    }
                    if (q8)
                        _mm512_store_ps(dwt + 16 * (b - p0), _mm512_cvtph_ps(_mm256_load_si256(
                                                                 (const __m256i *)kvs_wtiles_d(&qt, s0 + b))));
                    else
                        unpack_slot(&qt, s0 + b, live, t, wb + (size_t)(b - p0) * KVS_XB_TILE, dwt + 16 * (b - p0),
                                    mwt + 16 * (b - p0));
                    continue;
                }
                for (uintptr_t a = pf0 + pf_bytes * b / nb; a < pf0 + pf_bytes * (b + 1) / nb; a += 64)
                    _mm_prefetch((const char *)a, _MM_HINT_T1);
                if (!q4k)
                    unpack_block(wrow + (size_t)b * t.bytes, rows, live, t, wb + (size_t)(b - p0) * KVS_XB_TILE,
                                 dwt + 16 * (b - p0), mwt + 16 * (b - p0));
            }
            if (q4k) /* a pass is one super-block */
                unpack_q4k(wrow + (size_t)(p0 / 8) * 144, rows, live, wb, dwt, mwt);
            if (q8) /* B straight from the tiles' streams: Q8_0's bytes are signed */
                pass_tiles(xc + (size_t)p0 * KVS_XB_TILE, kvs_wtiles_q(&qt, s0 + p0), 64, qt.stride, p1 - p0, 1,
                           cb);
            else
                pass_tiles(xc + (size_t)p0 * KVS_XB_TILE, wb, KVS_XB_TILE, 64, p1 - p0, t.offset != 0, cb);
            for (int i = 0; i < c->m; i++) { /* min a constant in each copy */
                const __m512 y = min ? row_pass(cb, dwt, mwt, dxv, sxv, p0, p1, nf, nb, i, 1, st + 256 * i)
                                     : row_pass(cb, dwt, mwt, dxv, sxv, p0, p1, nf, nb, i, 0, st + 256 * i);
                if (p1 == nb) _mm512_mask_storeu_ps(c->y + (size_t)i * w->n + jt, live, y);
            }
        }
    }
    _tile_release();
}

KVS_AMX_COLS_ON_SCRATCH(nib_matmul_cols, nib_cols, NIB_PASS * (256 + 128 + 32) + KVS_AMX_BATCH_MAX_M * 256)

const kvs_isa kvs_isa_amx_batch_nib = {
    .name = "amx",
    .quantize_rows = nib_quantize_rows,
    .matmul_cols = nib_matmul_cols,
    .attention_unit = kvs_attention_unit_avx512,
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
