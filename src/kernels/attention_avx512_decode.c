/*
 * AVX-512 attention, the decode layout (fewer than 8 rows a unit: lane =
 * key; see attention_avx512.c): scores on transposed key tiles, weights,
 * P.V; and one decode token's attention split across threads where its
 * units would leave threads idle (the end of this file): the same passes,
 * so the same bits.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

#include "kernels/attention_avx512.h"

int kvs_attention_split_units_avx512(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_avx512(const kvs_attn_call *c, int phase, int un, float *work);

/* 16 floats of K/V row j starting at dim d. */
AI __m512 kv_load16(const void *base, int kv_type, size_t idx) {
    if (kv_type == 0) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + idx)));
    return _mm512_loadu_ps((const float *)base + idx);
}

/* Software prefetch in the decode layout (few rows): at long context K and
 * V stream from L3 or DRAM once per token (SmolLM2 at 4096: 94 MB a token),
 * and the loads of each key tile waited on memory. K: the rows about
 * PF_K_BYTES ahead of the tile; V: the strip of the row PF_V_ROWS ahead.
 * Measured (Xeon, SmolLM2 Q4_1, decode at depth 4096, old and new builds
 * alternating): 44.0-44.3 -> 50.2-52.1 tok/s at 1 thread, 77.7-79.4 ->
 * 90.8-92.5 at 2, depth 512 unchanged; 8 KB or 24 KB for K, 16 or 64 rows
 * for V were slower. Into L2 (T1), not L1: perf put the tiles' time on
 * the prefetches themselves (each waits for a free L1 fill buffer); at
 * depth 4096 58.2-58.7 -> 61.5-62.7 tok/s at 1 thread, 105-107 -> 109-122
 * at 2; depth 1024 and gemma3 at 4096 unchanged; 32 KB / 64 rows ahead
 * into L2 no better. Hints only: the bits do not change. */
#define PF_K_BYTES 16384
#define PF_V_ROWS 32

/* Prefetches bytes [base + off, base + off + n) line by line (past the
 * buffer: harmless hints; addresses as integers, never out-of-bounds
 * pointers). */
AI void prefetch_span(const void *base, size_t off, size_t n) {
    const uintptr_t a = (uintptr_t)base + off;
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(a + o), _MM_HINT_T1);
}

/* --------------------------------------------------- scores, lane = key */

/* Rows [r0, r0 + nr) x tiles [0, nt): the chains' sums s become scaled
 * scores, -inf where masked, stored in S; mx takes their lane maxima. */
AI void store_scores(unit_ctx *u, __m512 s[4][2], int r0, int nr, int nt, int j0, __m512 *mx) {
    const __m512 scale = _mm512_set1_ps(u->c->scale), ninf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
#pragma GCC unroll 2
        for (int b = 0; b < nt; b++) {
            int r = r0 + i, jb = j0 + 16 * b;
            __m512i jv = _mm512_add_epi32(lane, _mm512_set1_epi32(jb));
            __mmask16 live = _mm512_cmplt_epi32_mask(jv, _mm512_set1_epi32(u->n[r])) &
                             _mm512_cmpge_epi32_mask(jv, _mm512_set1_epi32(u->lo[r]));
            __m512 v = _mm512_mask_mov_ps(ninf, live, _mm512_mul_ps(s[i][b], scale));
            mx[r] = _mm512_max_ps(mx[r], v);
            _mm512_storeu_ps(u->S + (size_t)r * u->ctxs + jb, v);
        }
    }
}

/* The chains' sums of rows [r0, r0 + nr) x tiles [0, nt), zeroed. */
AI void qk_zero(__m512 s[4][2], int nr, int nt) {
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
        for (int b = 0; b < nt; b++) s[i][b] = _mm512_setzero_ps();
}

/* Step d of the chains: s[i][b] += q_{r0+i}[d] * kt[b] (16 keys). */
AI void qk_fma(__m512 s[4][2], const float *const *qr, int r0, int nr, int nt, int d, const __m512 *kt) {
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        __m512 qd = _mm512_set1_ps(qr[r0 + i][d]);
#pragma GCC unroll 2
        for (int b = 0; b < nt; b++) s[i][b] = _mm512_fmadd_ps(qd, kt[b], s[i][b]);
    }
}

/* Scores of rows [r0, r0 + nr) for the nt (1 or 2) transposed key tiles at
 * Kt (tile b at Kt + b * D * 16, keys j0 + 16 b ..): nr * nt independent fma
 * chains over d. */
AI void qk_keys(unit_ctx *u, const float *const *qr, const float *Kt, int r0, int nr, int nt, int j0,
                __m512 *mx) {
    const int D = u->D;
    __m512 s[4][2];
    qk_zero(s, nr, nt);
    for (int d = 0; d < D; d++) {
        __m512 kt[2];
#pragma GCC unroll 2
        for (int b = 0; b < nt; b++) kt[b] = _mm512_loadu_ps(Kt + ((size_t)b * D + d) * 16);
        qk_fma(s, qr, r0, nr, nt, d, kt);
    }
    store_scores(u, s, r0, nr, nt, j0, mx);
}

/* F16 caches with D % 32 == 0: key tiles transposed as f16, 16 keys x 32
 * dims at a time (one line per key; 64 word shuffles where the f32
 * transposes took 128 plus 32 conversions), converted by the score loop.
 * Shuffles and conversions share one port (p5 on Intel), which bounded the
 * scoring: 320 -> 192 of its ops per 16 keys x 64 dims. In a transposed
 * block of 32 dims, vector o holds dims i and 8 + i (o = 2i) or 16 + i and
 * 24 + i (o = 2i + 1) of the 16 keys, 16 words each. */
AI int t16_off(int dd) { return ((dd & 7) * 2 + (dd >> 4)) * 32 + ((dd >> 3) & 1) * 16; }

AI void transpose16x32_f16(__m512i r[16]) {
    __m512i a[16], b[16];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) { /* keys 2p, 2p + 1: dims 0-3 / 4-7 of each lane */
        a[p] = _mm512_unpacklo_epi16(r[2 * p], r[2 * p + 1]);
        a[8 + p] = _mm512_unpackhi_epi16(r[2 * p], r[2 * p + 1]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) { /* keys 4q..4q+3: dim pairs (0,1) (2,3) (4,5) (6,7) */
        b[q] = _mm512_unpacklo_epi32(a[2 * q], a[2 * q + 1]);
        b[4 + q] = _mm512_unpackhi_epi32(a[2 * q], a[2 * q + 1]);
        b[8 + q] = _mm512_unpacklo_epi32(a[8 + 2 * q], a[8 + 2 * q + 1]);
        b[12 + q] = _mm512_unpackhi_epi32(a[8 + 2 * q], a[8 + 2 * q + 1]);
    }
    /* c[g][i]: lane L holds dim 8L + i of keys 8g..8g+7 */
    __m512i c[2][8];
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
#pragma GCC unroll 4
        for (int e = 0; e < 4; e++) {
            c[g][2 * e] = _mm512_unpacklo_epi64(b[4 * e + 2 * g], b[4 * e + 2 * g + 1]);
            c[g][2 * e + 1] = _mm512_unpackhi_epi64(b[4 * e + 2 * g], b[4 * e + 2 * g + 1]);
        }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        r[2 * i] = _mm512_permutex2var_epi64(c[0][i], lo, c[1][i]);
        r[2 * i + 1] = _mm512_permutex2var_epi64(c[0][i], hi, c[1][i]);
    }
}

/* qk_keys over f16 tiles at Kt16 (tile b at Kt16 + b * D * 16 words, its
 * 32-dim blocks 512 words apart, laid out as t16_off says). */
AI void qk_keys16(unit_ctx *u, const float *const *qr, const uint16_t *Kt16, int r0, int nr, int nt, int j0,
                  __m512 *mx) {
    const int D = u->D;
    __m512 s[4][2];
    qk_zero(s, nr, nt);
    for (int d0 = 0; d0 < D; d0 += 32) {
#pragma GCC unroll 32
        for (int dd = 0; dd < 32; dd++) {
            __m512 kt[2];
#pragma GCC unroll 2
            for (int b = 0; b < nt; b++)
                kt[b] = _mm512_cvtph_ps(_mm256_loadu_si256(
                    (const __m256i *)(Kt16 + (size_t)b * D * 16 + (size_t)d0 * 16 + t16_off(dd))));
            qk_fma(s, qr, r0, nr, nt, d0 + dd, kt);
        }
    }
    store_scores(u, s, r0, nr, nt, j0, mx);
}

#define QKK_CASE(a, b)                                                      \
    case (a) * 4 + (b):                                                     \
        if (f16) qk_keys16(u, qr, (const uint16_t *)Kt, r, a, b, j0, mx);   \
        else qk_keys(u, qr, Kt, r, a, b, j0, mx);                           \
        break;

/* Keys [jt, jt + nk) of the unit's kv head (nk <= 16; keys past nk are
 * zeros), transposed into Kt: 16 x 16 f32 blocks, Kt[d][16 keys]. A whole
 * tile also prefetches, one line per key line it reads, the keys pf_keys
 * further, spread among the loads (a burst per step waited on full fill
 * buffers). */
AI void stage_tile(const unit_ctx *u, float *Kt, int jt, int nk, int pf_keys) {
    const kvs_attn_call *c = u->c;
    const int D = u->D;
    const size_t elem = kvs_attn_elem_bytes(c), key_bytes = (size_t)D * elem;
    for (int d0 = 0; d0 < D; d0 += 16) {
        __m512 t[16];
        const size_t at = u->kv_off + (size_t)jt * D + d0;
        if (nk == 16) {
            const uintptr_t pa = (uintptr_t)c->k + (at + (size_t)pf_keys * D) * elem;
            const int pf = (d0 * elem) % 64 == 0;
#pragma GCC unroll 16
            for (int jj = 0; jj < 16; jj++) {
                if (pf) _mm_prefetch((const char *)(pa + (size_t)jj * key_bytes), _MM_HINT_T1);
                t[jj] = kv_load16(c->k, c->kv_type, at + (size_t)jj * D);
            }
        } else {
            for (int jj = 0; jj < 16; jj++)
                t[jj] = jj < nk ? kv_load16(c->k, c->kv_type, at + (size_t)jj * D) : _mm512_setzero_ps();
        }
        transpose16(t);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) _mm512_storeu_ps(Kt + (size_t)(d0 + i) * 16, t[i]);
    }
}

/* The same for f16 caches with D % 32 == 0, as f16 (transpose16x32_f16). */
AI void stage_tile16(const unit_ctx *u, uint16_t *Kt16, int jt, int nk, int pf_keys) {
    const kvs_attn_call *c = u->c;
    const int D = u->D;
    const uint16_t *k = (const uint16_t *)c->k;
    for (int d0 = 0; d0 < D; d0 += 32) {
        __m512i t[16];
        const size_t at = u->kv_off + (size_t)jt * D + d0;
        if (nk == 16) {
#pragma GCC unroll 16
            for (int jj = 0; jj < 16; jj++) {
                _mm_prefetch((const char *)((uintptr_t)(k + at + (size_t)(pf_keys + jj) * D)), _MM_HINT_T1);
                t[jj] = _mm512_loadu_si512((const void *)(k + at + (size_t)jj * D));
            }
        } else {
            for (int jj = 0; jj < 16; jj++)
                t[jj] = jj < nk ? _mm512_loadu_si512((const void *)(k + at + (size_t)jj * D)) : _mm512_setzero_si512();
        }
        transpose16x32_f16(t);
#pragma GCC unroll 16
        for (int o = 0; o < 16; o++) _mm512_storeu_si512((void *)(Kt16 + (size_t)d0 * 16 + o * 32), t[o]);
    }
}

/* Scores of all rows for the steps of 32 keys j0 in [ja, jb) (ja - jmin a
 * multiple of 32), stored in S (masked keys -inf, up to the unit's maxn);
 * mx[r]: the lanes' maxima over the key blocks, ascending. */
static void scores_keys(unit_ctx *u, int ja, int jb, __m512 *mx) {
    const kvs_attn_call *c = u->c;
    const int D = u->D, R = u->rows, maxn = unit_maxn(u);
    const int f16 = c->kv_type == 0 && D % 32 == 0;
    float *Kt = u->stage; /* two transposed key tiles: (2, D, 16) f32 or f16 */
    const float *qr[KVS_ATTN_ROWS];
    for (int r = 0; r < R; r++) {
        mx[r] = _mm512_set1_ps(-INFINITY);
        qr[r] = c->q + ((size_t)(u->t0 + r / u->group) * c->n_head + (size_t)u->g * u->group +
                        r % u->group) * D;
    }
    const size_t key_bytes = (size_t)D * kvs_attn_elem_bytes(c);
    const int pf_keys = (int)(PF_K_BYTES / key_bytes) < 32 ? 32 : (int)(PF_K_BYTES / key_bytes);
    if (jb > maxn) jb = maxn;
    for (int j0 = ja; j0 < jb; j0 += 32) {
        int nt = maxn - j0 > 16 ? 2 : 1;
        for (int b = 0; b < nt; b++) {
            int jt = j0 + 16 * b, nk = maxn - jt < 16 ? maxn - jt : 16;
            if (f16) stage_tile16(u, (uint16_t *)Kt + (size_t)b * D * 16, jt, nk, pf_keys);
            else stage_tile(u, Kt + (size_t)b * D * 16, jt, nk, pf_keys);
        }
        for (int r = 0; r < R; r += 4) {
            int nr = R - r < 4 ? R - r : 4;
            switch (nr * 4 + nt) {
                QKK_CASE(1, 1) QKK_CASE(1, 2) QKK_CASE(2, 1) QKK_CASE(2, 2)
                QKK_CASE(3, 1) QKK_CASE(3, 2) QKK_CASE(4, 1) QKK_CASE(4, 2)
            }
        }
    }
}

/* Row r's scores become its weights exp(s - max), in place; returns 1 / sum.
 * mx: the lanes' maxima (scores_keys). */
static float weights_row(const unit_ctx *u, int r, __m512 mx) {
    float m = _mm512_reduce_max_ps(mx);
    __m512 mv = _mm512_set1_ps(m), P = _mm512_setzero_ps();
    float *S = u->S + (size_t)r * u->ctxs;
    for (int j = u->jmin; j < u->n[r]; j += 16) {
        /* lanes past n (and below lo) hold -inf: exp gives 0 and adds +0 to partial j % 16 */
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(S + j), mv));
        _mm512_storeu_ps(S + j, e);
        P = _mm512_add_ps(P, e);
    }
    return 1.0f / hsum_tree(P);
}

/* ------------------------------------------------------------------ P.V */

/* Rows r0..r0+nr-1 (one token, same n), dims [d0, d0 + 16 nz). */
AI void pv_block(const unit_ctx *u, int r0, int nr, int d0, int nz, const float *const *e,
                 size_t estride) {
    const kvs_attn_call *c = u->c;
    const int D = u->D, n = u->n[r0];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int z = 0; z < nz; z++) acc[i][z] = _mm512_setzero_ps();
    const size_t elem = kvs_attn_elem_bytes(c);
    for (int j = u->jmin; j < n; j++) {
        __m512 v[4];
        prefetch_span(c->v, (u->kv_off + (size_t)(j + PF_V_ROWS) * D + d0) * elem, (size_t)nz * 16 * elem);
#pragma GCC unroll 4
        for (int z = 0; z < nz; z++) v[z] = kv_load16(c->v, c->kv_type, u->kv_off + (size_t)j * D + d0 + 16 * z);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512 p = _mm512_set1_ps(e[i][(size_t)j * estride]);
#pragma GCC unroll 4
            for (int z = 0; z < nz; z++) acc[i][z] = _mm512_fmadd_ps(p, v[z], acc[i][z]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
        int r = r0 + i;
        float *out = c->out + ((size_t)(u->t0 + r / u->group) * c->n_head + (size_t)u->g * u->group +
                               r % u->group) * D + d0;
        __m512 inv = _mm512_set1_ps(u->inv[r]);
#pragma GCC unroll 4
        for (int z = 0; z < nz; z++) _mm512_storeu_ps(out + 16 * z, _mm512_mul_ps(acc[i][z], inv));
    }
}

#define PV_CASE(a, b) case (a) * 8 + (b): pv_block(u, r0, a, d0, b, e, estride); break;

/* Outputs of all rows, dims [da, db) (multiples of 16). */
static void pv_keys(const unit_ctx *u, int da, int db) {
    for (int r0 = 0; r0 < u->rows;) {
        /* rows of one token share n: take up to 4 of them */
        int tok = r0 / u->group, nr = 0;
        while (nr < 4 && r0 + nr < u->rows && (r0 + nr) / u->group == tok) nr++;
        const float *e[4];
        size_t estride;
        for (int i = 0; i < nr; i++) {
            int r = r0 + i;
            e[i] = u->S + (size_t)r * u->ctxs;
        }
        estride = 1;
        for (int d0 = da; d0 < db; d0 += 64) {
            int nz = (db - d0) / 16 < 4 ? (db - d0) / 16 : 4;
            switch (nr * 8 + nz) {
                PV_CASE(1, 1) PV_CASE(1, 2) PV_CASE(1, 3) PV_CASE(1, 4)
                PV_CASE(2, 1) PV_CASE(2, 2) PV_CASE(2, 3) PV_CASE(2, 4)
                PV_CASE(3, 1) PV_CASE(3, 2) PV_CASE(3, 3) PV_CASE(3, 4)
                PV_CASE(4, 1) PV_CASE(4, 2) PV_CASE(4, 3) PV_CASE(4, 4)
            }
        }
        r0 += nr;
    }
}

void kvs_avx512_decode_unit(unit_ctx *u) {
    __m512 mx[KVS_ATTN_ROWS];
    scores_keys(u, u->jmin, u->c->n_ctx, mx);
    for (int r = 0; r < u->rows; r++) u->inv[r] = weights_row(u, r, mx[r]);
    pv_keys(u, 0, u->D);
}

/* ------------------------------------------------------------------------
 * One decode token's attention split across threads (kvs_isa's
 * attention_split_*), where its (token, kv head) units would leave threads
 * idle: gemma3's one kv head on 2 threads, SmolLM2's 3 on 2 (2 : 1; on this
 * path decode attention is bound by its arithmetic, not by the bytes).
 * Three phases, each a kvs_pool_for, over the passes of one unit above, so
 * the same bits:
 *  0. scores, units (kv head, a range of keys): each key's score is its own
 *     chain over d;
 *  1. weights, units heads: a row's maxima recomputed lane by lane over its
 *     key blocks in ascending order, as the unit's scoring took them (the
 *     order matters only to NaN), then pass 2 (its partial sums are chains
 *     over the keys);
 *  2. outputs, units kv heads (the first n_kv_head - n_kv_head % n_threads,
 *     which the threads share evenly) then (kv head, SPLIT_DIMS dims) for
 *     the rest: the chains over the keys per dim. A unit of fewer dims has
 *     fewer chains (SmolLM2's 32 dims: 6, 1.5 fmas a cycle at most), so
 *     only the heads that would leave a thread idle are cut.
 * The rows' scores and weights live in thread 0's score rows (c->work, head
 * h at h * ctxs, 1 / sum in its last float), which every phase's units
 * share: the phases run one after another. */

#define SPLIT_DIMS 32 /* dims per unit of phase 2 (a multiple of 16) */

/* The decode layout only (rows < 8: scores_keys / pv_keys), so that the
 * split gives the unit's bits; no recalibrated row (those take AVX2's
 * units). */
static int split_suits(const kvs_attn_call *c) {
    const int D = c->head_dim, group = c->n_head / c->n_kv_head;
    return c->m == 1 && group < 8 && c->n_head <= KVS_ATTN_ROWS && D % SPLIT_DIMS == 0 && D <= 256 &&
           !kvs_attn_recal_row(c, c->pos[0]);
}

/* Phase 0's keys per unit and units per kv head. */
static int split_f_key_units(const unit_ctx *u, int *keys_per_unit) {
    return split_key_units(u->c, unit_maxn(u) - u->jmin, (size_t)u->D * kvs_attn_elem_bytes(u->c), keys_per_unit);
}

int kvs_attention_split_units_avx512(const kvs_attn_call *c, int phase) {
    if (!split_suits(c)) return 0;
    if (phase == 1) return c->n_head;
    if (phase == 2) {
        const int whole = split_whole_heads(c);
        return whole + (c->n_kv_head - whole) * (c->head_dim / SPLIT_DIMS);
    }
    unit_ctx u;
    int kpu;
    split_unit_init(&u, c, 0, c->work);
    return c->n_kv_head * split_f_key_units(&u, &kpu);
}

void kvs_attention_split_unit_avx512(const kvs_attn_call *c, int phase, int un, float *work) {
    if (!split_suits(c)) return;
    const int group = c->n_head / c->n_kv_head;
    unit_ctx u;
    if (phase == 0) {
        int kpu;
        split_unit_init(&u, c, 0, work);
        const int per_g = split_f_key_units(&u, &kpu), g = un / per_g;
        split_unit_init(&u, c, g, work);
        const int ja = u.jmin + (un % per_g) * kpu;
        __m512 mx[KVS_ATTN_ROWS];
        scores_keys(&u, ja, ja + kpu, mx);
        return;
    }
    if (phase == 1) { /* row un (head un) */
        split_unit_init(&u, c, un / group, work);
        const int r = un % group, maxn = unit_maxn(&u);
        const float *S = u.S + (size_t)r * u.ctxs;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int j = u.jmin; j < maxn; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(S + j));
        u.S[(size_t)r * u.ctxs + u.ctxs - 1] = weights_row(&u, r, mx);
        return;
    }
    const int whole = split_whole_heads(c), per_g = c->head_dim / SPLIT_DIMS;
    const int g = un < whole ? un : whole + (un - whole) / per_g;
    const int d0 = un < whole ? 0 : (un - whole) % per_g * SPLIT_DIMS;
    const int d1 = un < whole ? c->head_dim : d0 + SPLIT_DIMS;
    split_unit_init(&u, c, g, work);
    for (int r = 0; r < u.rows; r++) u.inv[r] = u.S[(size_t)r * u.ctxs + u.ctxs - 1];
    pv_keys(&u, d0, d1);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
