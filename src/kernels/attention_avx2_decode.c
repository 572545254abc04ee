/*
 * AVX2 attention for units of a few query rows (a decode step: one token
 * times the heads of a kv group, e.g. SmolLM2's 3, gemma3's 4), the
 * canonical arithmetic of attention_ref.c bit for bit. attention_avx2.c
 * puts query rows in lanes, which leaves 5 of 8 lanes idle for 3 rows; here
 * lanes are keys (scores, exp, partial sums) and dims (outputs):
 *
 *  - pass 1: a tile of keys staged transposed (Kt: per block of 8 keys, per
 *    d, the 8 keys' element d), then s = fma chain over d of broadcast q[d]
 *    times Kt[d] for several key blocks and all rows at once; scaled and
 *    masked (-inf outside [lo, n)) like the reference, stored per row;
 *  - pass 2: per row e = exp(s - mx), the 16 partials j % 16 as two vectors
 *    (key blocks start at multiples of 16: blocks at 16a feed partials 0-7,
 *    blocks at 16a + 8 partials 8-15), kvs_tree16 of them;
 *  - pass 3: o[d] = fma chain over j of broadcast e_j times v_j[d..d+7] (V
 *    read in place: its rows are contiguous dims), all rows sharing each V
 *    vector.
 * Masked keys have e = +0 and add exactly +0 (attention_ref.c), so every
 * row runs over the same key blocks from the rows' smallest lo rounded down
 * to 16. Rows with recalibration (kvs_attn_recal) take the general path.
 * The same passes split across threads for one decode token are at the
 * end (kvs_attention_split_*_avx2).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>

#include "kernels/avx2_util.h"

int kvs_attention_decode_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);
int kvs_attention_split_units_avx2(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_avx2(const kvs_attn_call *c, int phase, int u, float *work);

#define DEC_ROWS 4 /* most query rows of a unit this path takes */

/* Key blocks per pass-1 step and 8-dim blocks per pass-3 step for r rows:
 * as many accumulators as the 16 registers hold beside the r broadcasts
 * and the shared operand (8 to 12, enough chains to hide the fma latency). */
#define KEY_BLOCKS(r) ((r) == 1 ? 8 : (r) == 2 ? 4 : (r) == 3 ? 3 : 2)
#define DIM_BLOCKS(r) ((r) <= 3 ? 4 : 2)

AI __m256 kv_load8(const void *base, int kv_type, size_t idx) {
    if (kv_type == 0) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + idx)));
    return _mm256_loadu_ps((const float *)base + idx);
}

/* One block of 8 keys (from key kb), dims d0 .. d0 + 7, transposed into
 * dst (8 vectors: dim d0 + t of the 8 keys). Named variables, so that the
 * block stays in registers (as arrays GCC kept it on the stack). */
AI void stage_block8(const kvs_attn_call *c, int kv_type, size_t kv_off, int D, int kb, int d0, float *dst) {
#define KEY_ROW(i) kv_load8(c->k, kv_type, kv_off + (size_t)(kb + (i)) * D + d0)
    __m256 r0 = KEY_ROW(0), r1 = KEY_ROW(1), r2 = KEY_ROW(2), r3 = KEY_ROW(3);
    __m256 r4 = KEY_ROW(4), r5 = KEY_ROW(5), r6 = KEY_ROW(6), r7 = KEY_ROW(7);
#undef KEY_ROW
    /* pairs of keys interleaved, then quads, then the 128-bit halves */
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(dst + 0, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 16, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 24, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 32, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 40, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 48, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 56, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* Keys j0 .. j0 + 8 nkb - 1 transposed into Kt (nkb blocks of D x 8
 * floats); keys at or past jend are zeros (masked in pass 1, never read). */
static void stage_keys(const kvs_attn_call *c, size_t kv_off, int D, int j0, int jend, int nkb, float *Kt) {
    for (int b = 0; b < nkb; b++) {
        int kb = j0 + 8 * b, live = jend - kb < 8 ? jend - kb : 8;
        float *dst = Kt + (size_t)b * D * 8;
        if (live == 8) {
            for (int d0 = 0; d0 < D; d0 += 8) {
                if (c->kv_type == 0) stage_block8(c, 0, kv_off, D, kb, d0, dst + (size_t)d0 * 8);
                else stage_block8(c, 1, kv_off, D, kb, d0, dst + (size_t)d0 * 8);
            }
            continue;
        }
        for (int d = 0; d < D; d++) /* the last, partial block of the context */
            for (int i = 0; i < 8; i++) {
                size_t idx = kv_off + (size_t)(kb + i) * D + d;
                dst[(size_t)d * 8 + i] = i >= live         ? 0.0f
                                         : c->kv_type == 0 ? kvs_f16_to_f32(((const uint16_t *)c->k)[idx])
                                                           : ((const float *)c->k)[idx];
            }
    }
}

typedef struct dec_rows {
    int nr, D;
    const float *q[DEC_ROWS];
    float *S[DEC_ROWS]; /* scores, then weights, by absolute slot */
    __m256i n[DEC_ROWS], lo[DEC_ROWS];
    float scale;
} dec_rows;

/* Pass 1, one step: key blocks jb, jb + 8, .. (nkb = KEY_BLOCKS(nr) of
 * them, Kt at the first) for the rows; blocks at or past jend not stored. */
AI void score_step(dec_rows *dr, int nr, const float *Kt, int jb, int jend) {
    enum { KB_MAX = 8 };
    const int nkb = KEY_BLOCKS(nr), D = dr->D;
    __m256 acc[DEC_ROWS][KB_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int b = 0; b < nkb; b++) acc[r][b] = _mm256_setzero_ps();
    for (int d = 0; d < D; d++) {
        __m256 qd[DEC_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) qd[r] = _mm256_broadcast_ss(dr->q[r] + d);
#pragma GCC unroll 8
        for (int b = 0; b < nkb; b++) {
            __m256 kt = _mm256_loadu_ps(Kt + ((size_t)b * D + d) * 8);
            __asm__("" : "+x"(kt)); /* a register: not a load folded into each row's fma */
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[r][b] = _mm256_fmadd_ps(qd[r], kt, acc[r][b]);
        }
    }
    const __m256 scale = _mm256_set1_ps(dr->scale), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 8
    for (int b = 0; b < nkb; b++) {
        int jk = jb + 8 * b;
        if (jk >= jend) break;
        __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(jk), lane);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m256 live = _mm256_castsi256_ps(
                _mm256_andnot_si256(_mm256_cmpgt_epi32(dr->lo[r], jv), _mm256_cmpgt_epi32(dr->n[r], jv)));
            __m256 v = _mm256_blendv_ps(ninf, _mm256_mul_ps(acc[r][b], scale), live);
            _mm256_storeu_ps(dr->S[r] + jk, v);
        }
    }
}

/* The steps of a staged tile; meanwhile pf (the next tile's keys) is
 * prefetched, spread over the steps. */
static void score_steps(dec_rows *dr, const float *Kt, int j0, int nsteps, int jend, kvs_ahead *pf) {
    for (int s = 0; s < nsteps; s++) {
        kvs_ahead_step(pf);
        const float *kt = Kt + (size_t)s * KEY_BLOCKS(dr->nr) * dr->D * 8;
        int jb = j0 + s * 8 * KEY_BLOCKS(dr->nr);
        switch (dr->nr) {
        case 1: score_step(dr, 1, kt, jb, jend); break;
        case 2: score_step(dr, 2, kt, jb, jend); break;
        case 3: score_step(dr, 3, kt, jb, jend); break;
        default: score_step(dr, 4, kt, jb, jend); break;
        }
    }
}

/* Pass 3, dims d0 .. d0 + 8 DIM_BLOCKS(nr) - 1 of every row: the fma chains
 * over j in [j0, j1), then out = o * inv. */
AI void value_step(const kvs_attn_call *c, const dec_rows *dr, int nr, size_t kv_off, int j0, int j1, int d0,
                   float *const out[DEC_ROWS], const float inv[DEC_ROWS]) {
    enum { DB_MAX = 4 };
    const int ndb = DIM_BLOCKS(nr), D = dr->D;
    __m256 acc[DEC_ROWS][DB_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int b = 0; b < ndb; b++) acc[r][b] = _mm256_setzero_ps();
    for (int j = j0; j < j1; j++) {
        __m256 e[DEC_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) e[r] = _mm256_broadcast_ss(dr->S[r] + j);
#pragma GCC unroll 4
        for (int b = 0; b < ndb; b++) {
            __m256 v = kv_load8(c->v, c->kv_type, kv_off + (size_t)j * D + d0 + 8 * b);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[r][b] = _mm256_fmadd_ps(e[r], v, acc[r][b]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int b = 0; b < ndb; b++)
            _mm256_storeu_ps(out[r] + d0 + 8 * b, _mm256_mul_ps(acc[r][b], _mm256_set1_ps(inv[r])));
}

/* Pass 3 for dims [d_lo, d_hi) of the rows over keys [j0, j1), a step of
 * 8 DIM_BLOCKS(nr) dims at a time. */
static void value_dims(const kvs_attn_call *c, const dec_rows *dr, size_t kv_off, int j0, int j1, int d_lo,
                       int d_hi, float *const out[DEC_ROWS], const float inv[DEC_ROWS]) {
    for (int d0 = d_lo; d0 < d_hi; d0 += 8 * DIM_BLOCKS(dr->nr)) {
        switch (dr->nr) {
        case 1: value_step(c, dr, 1, kv_off, j0, j1, d0, out, inv); break;
        case 2: value_step(c, dr, 2, kv_off, j0, j1, d0, out, inv); break;
        case 3: value_step(c, dr, 3, kv_off, j0, j1, d0, out, inv); break;
        default: value_step(c, dr, 4, kv_off, j0, j1, d0, out, inv); break;
        }
    }
}

/* The nr rows of the unit (t0, g) (row r: token t0 + r / group, head
 * g * group + r % group) into dr, row r's scores at S0 + r * ctxs;
 * the keys they need: [*jmin, *jend) scored (jmin a multiple of 16, jend of
 * 8), values to *maxn. Returns 0 when a row has recalibration. */
static int dec_rows_init(const kvs_attn_call *c, int t0, int g, int nr, float *S0, size_t ctxs,
                         dec_rows *dr, float *out[DEC_ROWS], int *jmin, int *jend, int *maxn) {
    const int group = c->n_head / c->n_kv_head, D = c->head_dim;
    *dr = (dec_rows){.nr = nr, .D = D, .scale = c->scale};
    int lo_min = c->n_ctx, n_max = 0;
    for (int i = 0; i < nr; i++) {
        const int t = t0 + i / group, h = g * group + i % group;
        if (kvs_attn_recal_row(c, c->pos[t])) return 0;
        int n = kvs_attn_n(c, c->pos[t]), lo = kvs_attn_lo(c, n);
        if (lo < lo_min) lo_min = lo;
        if (n > n_max) n_max = n;
        dr->q[i] = c->q + ((size_t)t * c->n_head + h) * D;
        out[i] = c->out + ((size_t)t * c->n_head + h) * D;
        dr->S[i] = S0 + (size_t)i * ctxs;
        dr->n[i] = _mm256_set1_epi32(n);
        dr->lo[i] = _mm256_set1_epi32(lo);
    }
    *jmin = lo_min & ~15;
    *jend = (n_max + 7) & ~7;
    *maxn = n_max;
    return 1;
}

/* A thread's staging tile in its scratch (kvs_attn_thread_floats): past
 * its KVS_ATTN_ROWS score rows and the SIMD paths' 3 x 16 x 256 floats. */
AI float *stage_area(float *work, size_t ctxs) { return work + (size_t)KVS_ATTN_ROWS * ctxs + 3 * 16 * 256; }

/* Pass 1 for keys [j0, j1) of the rows (j0 - jmin and j1 multiples of 8;
 * scores stored below j1 only), through tiles of whole steps staged
 * transposed in Kt (KVS_ATTN_F_TILE_FLOATS). While a tile is scored the
 * next one is prefetched: staging reads a tile in a burst and scoring reads
 * nothing, so DRAM had idled through the scoring. Measured (Zen 3, one
 * thread, layers from DRAM, old and new builds alternating): SmolLM2's shape at 4096 keys
 * 1.07x, at 512 1.08-1.26x, gemma3's (head_dim 256) 1.15-1.25x; 2 threads
 * on SmolLM2 1.0x (bandwidth-bound). Prefetching V ahead in pass 3 was
 * 0.9x (its reads are already a stream). */
static void score_keys(const kvs_attn_call *c, dec_rows *dr, size_t kv_off, int j0, int j1, int maxn, float *Kt) {
    const int D = dr->D, step_keys = 8 * KEY_BLOCKS(dr->nr);
    const int tile = (KVS_ATTN_F_TILE_FLOATS / D / step_keys) * step_keys;
    for (int a = j0; a < j1; a += tile) {
        int nk = j1 - a < tile ? j1 - a : tile, nsteps = (nk + step_keys - 1) / step_keys;
        stage_keys(c, kv_off, D, a, maxn, nsteps * KEY_BLOCKS(dr->nr), Kt);
        /* the next tile's keys that exist (below maxn) */
        const int nxt = a + tile, end = j1 < maxn ? j1 : maxn, nn = end - nxt < tile ? end - nxt : tile;
        const size_t esz = kvs_attn_elem_bytes(c);
        kvs_ahead pf = nn > 0 ? kvs_ahead_new((const char *)c->k + (kv_off + (size_t)nxt * D) * esz,
                                              (size_t)nn * D * esz, nsteps, 1)
                              : kvs_ahead_new(c->k, 0, nsteps, 1); /* no pointer past the keys */
        score_steps(dr, Kt, a, nsteps, j1, &pf);
    }
}

/* Pass 2 for one row: its scores S[jmin, jend) become the weights e =
 * exp(s - mx), in place; returns 1 / sum. mx: the lanes' maxima over the key
 * blocks in ascending order (the order matters only to NaN), then across
 * the lanes. */
static float weights_row(float *S, int jmin, int jend) {
    __m256 mxv = _mm256_set1_ps(-INFINITY);
    for (int j = jmin; j < jend; j += 8) mxv = _mm256_max_ps(mxv, _mm256_loadu_ps(S + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mxv), _mm256_extractf128_ps(mxv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const __m256 mx = _mm256_broadcastss_ps(m4);
    __m256 P[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int j = jmin; j < jend; j += 8) {
        __m256 e = kvs_exp8(_mm256_sub_ps(_mm256_loadu_ps(S + j), mx));
        _mm256_storeu_ps(S + j, e);
        P[(j >> 3) & 1] = _mm256_add_ps(P[(j >> 3) & 1], e);
    }
    return 1.0f / tree16_2(P[0], P[1]);
}

/* Runs the unit and returns 1 when it suits this path, else returns 0
 * having done nothing. work: kvs_attn_thread_floats(n_ctx) floats. */
int kvs_attention_decode_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    const int group = c->n_head / c->n_kv_head, D = c->head_dim, rows = (t1 - t0) * group;
    if (rows > DEC_ROWS || D % 32 != 0 || D > 256) return 0;
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    const size_t kv_off = (size_t)g * c->n_ctx * D;
    dec_rows dr;
    float *out[DEC_ROWS];
    int jmin, jend, maxn;
    if (!dec_rows_init(c, t0, g, rows, work, ctxs, &dr, out, &jmin, &jend, &maxn)) return 0;
    score_keys(c, &dr, kv_off, jmin, jend, maxn, stage_area(work, ctxs));
    float inv[DEC_ROWS];
    for (int r = 0; r < rows; r++) inv[r] = weights_row(dr.S[r], jmin, jend);
    /* pass 3: outputs (keys past a row's n have e = +0) */
    value_dims(c, &dr, kv_off, jmin, maxn, 0, D, out, inv);
    return 1;
}

/* ------------------------------------------------------------------------
 * One decode token's attention split across threads (kvs_isa's
 * attention_split_*): the units above are (token, kv head), so gemma3's one
 * kv head ran on one thread of two, while at long context attention reads
 * as many bytes as the weights. Three phases,
 * each a kvs_pool_for, over the same passes as one unit, so the same bits:
 *  0. scores, units (kv head, SPLIT_KEYS keys): each key's score is its own
 *     chain over d;
 *  1. weights, units heads: per row the lanes' maxima over the key blocks in
 *     ascending order and pass 2 (one thread per row: its partial sums are
 *     chains over the keys);
 *  2. outputs, units (kv head, 32 dims): the chains over the keys per dim.
 * The rows' scores and weights live in thread 0's score rows (c->work, head
 * h at h * ctxs, 1 / sum in its last float), which every phase's units share:
 * the phases run one after another. */

#define SPLIT_KEYS 256 /* keys per unit of phase 0 (a multiple of 8) */

typedef struct split_shape {
    int group; /* rows per kv head (at most DEC_ROWS: one row unit) */
    int jmin, jend;
    size_t ctxs;
} split_shape;

/* Groups of at most DEC_ROWS rows only: their units take the passes above
 * too (kvs_attention_decode_avx2), so the split gives their bits even where
 * the order of the maxima matters (NaN scores); larger groups' units take
 * attention_avx2.c's passes. */
static int split_shape_of(const kvs_attn_call *c, split_shape *s) {
    const int D = c->head_dim, group = c->n_head / c->n_kv_head;
    if (c->m != 1 || group > DEC_ROWS || D % 32 != 0 || D > 256) return 0;
    if (kvs_attn_recal_row(c, c->pos[0])) return 0;
    const int n = kvs_attn_n(c, c->pos[0]);
    s->group = group;
    s->jmin = kvs_attn_lo(c, n) & ~15;
    s->jend = (n + 7) & ~7;
    s->ctxs = kvs_attn_score_stride(c->n_ctx);
    return 1;
}

int kvs_attention_split_units_avx2(const kvs_attn_call *c, int phase) {
    split_shape s;
    if (!split_shape_of(c, &s)) return 0;
    if (phase == 0) return c->n_kv_head * ((s.jend - s.jmin + SPLIT_KEYS - 1) / SPLIT_KEYS);
    if (phase == 1) return c->n_head;
    return c->n_kv_head * (c->head_dim / 32);
}

void kvs_attention_split_unit_avx2(const kvs_attn_call *c, int phase, int u, float *work) {
    split_shape s;
    if (!split_shape_of(c, &s)) return;
    float *scores = c->work;
    const int D = c->head_dim;
    dec_rows dr;
    float *out[DEC_ROWS];
    int jmin, jend, maxn;
    if (phase == 1) { /* row u (head u) */
        float *S = scores + (size_t)u * s.ctxs;
        S[s.ctxs - 1] = weights_row(S, s.jmin, s.jend);
        return;
    }
    const int per_g = phase == 0 ? (s.jend - s.jmin + SPLIT_KEYS - 1) / SPLIT_KEYS : D / 32, g = u / per_g;
    dec_rows_init(c, 0, g, s.group, scores + (size_t)g * s.group * s.ctxs, s.ctxs, &dr, out, &jmin, &jend, &maxn);
    if (phase == 0) {
        const int j0 = s.jmin + (u % per_g) * SPLIT_KEYS, j1 = j0 + SPLIT_KEYS < s.jend ? j0 + SPLIT_KEYS : s.jend;
        score_keys(c, &dr, (size_t)g * c->n_ctx * D, j0, j1, maxn, stage_area(work, s.ctxs));
        return;
    }
    const int d0 = u % per_g * 32;
    float inv[DEC_ROWS];
    for (int i = 0; i < s.group; i++) inv[i] = dr.S[i][s.ctxs - 1];
    value_dims(c, &dr, (size_t)g * c->n_ctx * D, jmin, maxn, d0, d0 + 32, out, inv);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
