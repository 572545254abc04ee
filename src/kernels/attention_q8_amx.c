/*
 * AMX parts of the AVX-512 Q8 attention prefill (attention_q8_avx512.c):
 * the two dot products of attention_q8_ref.c as int8 tile products, the
 * float steps around them unchanged. Every product is an exact integer, so
 * the bits are the reference's.
 *
 *   scores  C[key][row] = K (A: 16 keys x 64 levels, from the staged
 *           keys, or the cache rows in place where the kv head is not
 *           staged) times the staged
 *           queries Qt (B: its (D / 4, 16 lanes) words of one 16-row
 *           block), tdpbssd (signed x signed: I itself, no +128 offset).
 *           A tile row is one key with a lane per query row: the vector
 *           layout of the score rows, so score_out takes it as the VNNI
 *           pass takes its accumulators.
 *   P.V     C[dim][row] = V^T (A: 16 dims x 64 keys, staged below) times
 *           the weights' byte words of 16 groups of 4 keys (B: lo or hi,
 *           as weights_rows writes them over the scores: a group's lo word
 *           at 128-byte steps, hi 64 bytes on), tdpbsud; per PV block
 *           acc = (C_hi << 8) + C_lo, the integer sum_j p_j v_j[d] the
 *           VNNI pass makes, and o += (float)acc in the same block order.
 *
 * Why: on an AMX core a tile product does 16 x 16 x 64 multiply-adds where
 * vpdpbusd does 64, and at long context the dots were most of the work
 * (a 512-token prefill after 7680 on the AMX Xeon: 2.7x the per-token cost
 * after 512 with the matmuls on tiles and attention on VNNI).
 *
 * Staged keys (kvs_attn_q8_amx_stage_keys): one per 64-byte-aligned slot.
 * Staged values (kvs_attn_q8_amx_stage_values): per 64 absolute slots (staged_lo
 * is a multiple of 64), D rows of 64 bytes, row d = the 16 four-key words
 * of dim d (value_words' byte order), so an A tile is 16 consecutive rows.
 * The same bytes a slot as stage_values4's layout, in the same region.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")
#endif

#include <immintrin.h>
#include <string.h>

#include "kernels/amx_util.h"
#include "kernels/attention_q8_avx512.h"

#define CHUNK 64 /* keys a tile product takes (64 bytes of A's row) */

/* Head dims the tiles take: whole 64-level rows of A. */
int kvs_attn_q8_amx_on(int D) { return D % 64 == 0 && kvs_kernels_amx(); }

/* Every tile 16 rows of 64 bytes: A, B and C tiles alike. */
void kvs_attn_q8_amx_begin(void) {
    amx_tilecfg cfg __attribute__((aligned(64)));
    amx_config_square(&cfg);
    amx_load_config(&cfg);
}

void kvs_attn_q8_amx_end(void) { _tile_release(); }

/* Block b's 16-key groups: C_b (tile 4 + b) += K (tile 0) times Qt block b
 * (tile 1 + b; reloaded per 64-dim step where D > 64). The tile numbers are
 * literals: the intrinsics paste them into the instruction. */
#define SCORE_TILES(b, qtile, ctile)                              \
    do {                                                          \
        if (nb > (b)) {                                           \
            if (reload) _tile_loadd(qtile, qt + 16 * (b), 48 * 4); \
            _tile_dpbssd(ctile, 0, qtile);                        \
        }                                                         \
    } while (0)

/* kvs_attn_q8_amx_scores for nb (a constant) row blocks. Each key's
 * scores go out for all blocks before the next key's: the blocks' running
 * maxima are three independent chains of vmaxps (one block's keys in turn
 * waited on each max's latency). */
AI int scores_nb(q8_unit *x, const int nb, const int32_t *Qt, int ja, int jb, const int8_t *rows, size_t stride,
                int whole) {
    const int D = x->u.D, done = whole ? (jb - ja + 15) / 16 * 16 : (jb - ja) / 16 * 16;
    const int reload = D > CHUNK; /* one 64-dim step: the query tiles stay */
    int32_t c[3][256] __attribute__((aligned(64)));
    /* per block, the keys all 16 of its rows see: their scores need no
     * mask (a block of fewer rows has lanes that see none) */
    int all_lo[3], all_hi[3];
    __m512 mx[3];
    for (int b = 0; b < nb; b++) {
        all_lo[b] = _mm512_reduce_max_epi32(x->lovec[b]);
        all_hi[b] = _mm512_reduce_min_epi32(x->nvec[b]);
        mx[b] = x->mx[b];
    }
    if (!reload) {
        const int32_t *qt = Qt;
        if (nb > 0) _tile_loadd(1, qt, 48 * 4);
        if (nb > 1) _tile_loadd(2, qt + 16, 48 * 4);
        if (nb > 2) _tile_loadd(3, qt + 32, 48 * 4);
    }
    /* software-pipelined: group j's products are issued before group
     * j - 16's scores go out, so the vector work runs while the tiles
     * multiply (in turn, each store waited on its product) */
    for (int j = ja; j <= ja + done; j += 16) {
        if (j > ja) { /* group j - 16's products, stored */
            _tile_stored(4, c[0], 64);
            if (nb > 1) _tile_stored(5, c[1], 64);
            if (nb > 2) _tile_stored(6, c[2], 64);
        }
        if (j < ja + done) {
            /* the keys two groups on (the cache rows come from the L2 or
             * beyond: the tile load waited on them) */
            if (j + 48 <= jb)
                for (size_t o = 0; o < 16 * stride; o += 64)
                    _mm_prefetch((const char *)rows + (size_t)(j + 32 - ja) * stride + o, _MM_HINT_T0);
            _tile_zero(4);
            _tile_zero(5);
            _tile_zero(6);
            for (int d = 0; d < D; d += CHUNK) {
                const int32_t *qt = Qt + (size_t)(d / 4) * 48; /* rows d / 4.. of Qt */
                _tile_loadd(0, rows + (size_t)(j - ja) * stride + d, stride);
                SCORE_TILES(0, 1, 4);
                SCORE_TILES(1, 2, 5);
                SCORE_TILES(2, 3, 6);
            }
        }
        if (j == ja) continue;
        const int jg = j - 16;
        int full[3], all_full = 1;
        for (int b = 0; b < nb; b++) {
            full[b] = jg >= all_lo[b] && jg + 16 <= all_hi[b];
            all_full &= full[b];
        }
        const int ni = jb - jg < 16 ? jb - jg : 16; /* a last group past jb: its keys before it */
        if (all_full && ni == 16) { /* most groups at long context: no test a key */
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const __m512 kd = _mm512_set1_ps(q8_key_scale(x, jg + i));
#pragma GCC unroll 3
                for (int b = 0; b < nb; b++)
                    score_out(x, &mx[b], b, jg + i, _mm512_load_si512(c[b] + 16 * i), kd, 0);
            }
            continue;
        }
        for (int i = 0; i < ni; i++) {
            const __m512 kd = _mm512_set1_ps(q8_key_scale(x, jg + i));
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) {
                const __m512i isum = _mm512_load_si512(c[b] + 16 * i);
                if (full[b]) score_out(x, &mx[b], b, jg + i, isum, kd, 0);
                else score_out(x, &mx[b], b, jg + i, isum, kd, 1);
            }
        }
    }
    for (int b = 0; b < nb; b++) x->mx[b] = mx[b];
    return done < jb - ja ? done : jb - ja;
}

/* Scores of keys [ja, jb) for the unit's row blocks as score_out writes
 * them, from key rows at `rows` (key ja's; `stride` bytes apart); whole: the
 * rows are readable up to jb rounded up to 16 (the staged copy), else only
 * the whole 16-key groups are done (the cache rows in place). Returns the
 * keys done: the VNNI pass takes the rest. */
int kvs_attn_q8_amx_scores(q8_unit *x, const int32_t *Qt, int ja, int jb, const int8_t *rows, size_t stride, int whole) {
    switch (x->nrb) {
    case 1: return scores_nb(x, 1, Qt, ja, jb, rows, stride, whole);
    case 2: return scores_nb(x, 2, Qt, ja, jb, rows, stride, whole);
    default: return scores_nb(x, 3, Qt, ja, jb, rows, stride, whole);
    }
}

/* Keys of slots [j0, j1) (j0 a multiple of 64) as the tiles' A operand:
 * each key's levels at the start of its own 64-byte-aligned slot of kb
 * bytes (the cache rows' D + 4 bytes split most rows over two lines, and
 * the tile load waited on them), the 64-slot parts from j0 to j1 rounded
 * up, slots past the buffer 0. kt: slot j0's. */
void kvs_attn_q8_amx_stage_keys(const q8_unit *x, int j0, int j1, uint8_t *kt, size_t kb) {
    const int D = x->u.D, n_ctx = x->u.c->n_ctx, j2 = (j1 + CHUNK - 1) / CHUNK * CHUNK;
    for (int j = j0; j < j2; j++, kt += kb)
        for (int d = 0; d < D; d += 64)
            _mm512_store_si512(kt + d, j < n_ctx ? _mm512_loadu_si512(x->K + (size_t)j * x->rb + d) : _mm512_setzero_si512());
}

/* Values of slots [j0, j1) (j0 a multiple of 64) as the tiles' A operand:
 * per 64 slots, row d = the 16 four-key words of dim d; the 64-slot parts
 * from j0 to j1 rounded up (slots past the buffer read as 0). vt: slot
 * j0's part. */
void kvs_attn_q8_amx_stage_values(const q8_unit *x, int j0, int j1, uint8_t *vt) {
    const int D = x->u.D;
    int32_t words[16 * KVS_ATTN_Q8_MAX_DIM] __attribute__((aligned(64))); /* 16 groups x D words */
    for (int j = j0; j < j1; j += CHUNK, vt += (size_t)CHUNK * D) {
        stage_values4(x, j, CHUNK, 0, D, words);
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512 r[16];
            for (int g = 0; g < 16; g++) r[g] = _mm512_castsi512_ps(_mm512_loadu_si512(words + (size_t)g * D + d0));
            transpose16(r); /* r[i]: dim d0 + i's word of every group */
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(vt + (size_t)(d0 + i) * 64, r[i]);
        }
    }
}

/* The slots P.V's tiles cover: from the unit's first key down to a
 * multiple of 64, to its last rounded up to one. */
static int pv_lo(const q8_unit *x) { return x->u.jmin / CHUNK * CHUNK; }
static int pv_hi(const q8_unit *x) { return (x->maxall + CHUNK - 1) / CHUNK * CHUNK; }

/* 1 when the zero weights kvs_attn_q8_amx_pv writes up to pv_hi stay in
 * each block's score rows (a context shorter than ~32 slots may not). */
int kvs_attn_q8_amx_pv_fits(const q8_unit *x) { return (size_t)pv_hi(x) / 2 <= x->u.ctxs; }

/* Weight words of 0 for the groups of [j0, j1) (multiples of 4) of block b:
 * the keys a tile covers but no row of the unit weighs. */
static void zero_weights(q8_unit *x, int b, int j0, int j1) {
    float *S = x->u.S + (size_t)b * 16 * x->u.ctxs;
    for (int j = j0; j < j1; j += 4) {
        _mm512_storeu_si512(S + (size_t)(j / 2) * 16, _mm512_setzero_si512());
        _mm512_storeu_si512(S + (size_t)(j / 2 + 1) * 16, _mm512_setzero_si512());
    }
}

/* O (nrb, D, 16 lanes) += P.V over every PV block of the unit's keys, for
 * the weights weights_rows left in the score rows and the values staged at
 * vt from slot vlo. D a multiple of 64. */
void kvs_attn_q8_amx_pv(q8_unit *x, const uint8_t *vt, int vlo, float *O) {
    const int D = x->u.D, lo = pv_lo(x), hi = pv_hi(x);
    int32_t c[4][256] __attribute__((aligned(64))); /* lo, lo, hi, hi of two 16-dim slabs */
    for (int b = 0; b < x->nrb; b++) {
        zero_weights(x, b, lo, x->u.jmin);
        zero_weights(x, b, (x->maxall + 3) & ~3, hi);
    }
    /* block by block, so that its values (512 x D bytes) and its weights
     * (16 KB a row block) come from the L2 once and mostly from the L1 for
     * every row block and dim slab (walking each row block's keys in turn
     * read every tile from the L2: 2x the time) */
    for (int b0 = lo, b1; b0 < hi; b0 = b1) {
        b1 = kvs_attn_q8_block_end(b0, hi);
        for (int b = 0; b < x->nrb; b++) {
            const uint8_t *P = (const uint8_t *)(x->u.S + (size_t)b * 16 * x->u.ctxs);
            for (int d0 = 0; d0 < D; d0 += 32) {
                _tile_zero(4);
                _tile_zero(5);
                _tile_zero(6);
                _tile_zero(7);
                for (int j = b0; j < b1; j += CHUNK) {
                    const uint8_t *v = vt + (size_t)(j - vlo) * D + (size_t)d0 * 64;
                    _tile_loadd(0, v, 64);
                    _tile_loadd(1, v + 16 * 64, 64);
                    _tile_loadd(2, P + (size_t)j * 32, 128);      /* lo words */
                    _tile_loadd(3, P + (size_t)j * 32 + 64, 128); /* hi words */
                    _tile_dpbsud(4, 0, 2);
                    _tile_dpbsud(5, 1, 2);
                    _tile_dpbsud(6, 0, 3);
                    _tile_dpbsud(7, 1, 3);
                }
                _tile_stored(4, c[0], 64);
                _tile_stored(5, c[1], 64);
                _tile_stored(6, c[2], 64);
                _tile_stored(7, c[3], 64);
                for (int s = 0; s < 2; s++)
                    for (int i = 0; i < 16; i++) {
                        const __m512i acc = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[2 + s] + 16 * i), 8),
                                                             _mm512_load_si512(c[s] + 16 * i));
                        float *o = O + ((size_t)b * D + d0 + 16 * s + i) * 16;
                        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_cvtepi32_ps(acc)));
                    }
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
