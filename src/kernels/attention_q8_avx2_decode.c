/*
 * AVX2 attention on Q8 rows for decode units (at most DEC_ROWS query rows,
 * none recalibrated: a few tokens' heads of one kv group), the arithmetic of
 * attention_q8_ref.c bit for bit, with keys, then dims, in lanes
 * (kvs_attention_decode_unit_q8_avx2); and one decode token split across threads
 * (kvs_attention_split_*_q8_avx2, at the end).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <float.h>
#include <immintrin.h>
#include <math.h>

#include "kernels/attention_q8_avx2.h"

/* Score row DEC_ROWS of the scratch, which a decode unit does not use,
 * holds its values' scales. */
_Static_assert(DEC_ROWS + 1 <= KVS_ATTN_ROWS, "the decode unit's scale row fits the scratch");

/* Keys ahead of the score pass that it prefetches. */
#define SCORES_AHEAD 32

/* The scales of Q8 rows j .. j + 7 (base: the kv head's rows), 0 from end
 * on, built in a register (8 scalar stores read back at once as a vector
 * had stalled on store forwarding). */
AI __m256 row_scales8(const int8_t *base, size_t rb, int D, int j, int end) {
#define RS(k) (j + (k) < end ? kvs_q8_row_scale(base + (size_t)(j + (k)) * rb, D) : 0.0f)
    return _mm256_setr_ps(RS(0), RS(1), RS(2), RS(3), RS(4), RS(5), RS(6), RS(7));
#undef RS
}

/* The lines of Q8 rows j .. j + 7 (base: the kv head's rows) before end,
 * into the L1: the unit's first reads of its keys and values, which from
 * DRAM had waited on each line (the pass ran at a third of the read
 * bandwidth). */
AI void prefetch_rows8(const int8_t *base, size_t rb, int j, int end) {
    if (j >= end) return;
    const int n = end - j < 8 ? end - j : 8;
    const char *p = (const char *)(base + (size_t)j * rb);
    const size_t bytes = (size_t)n * rb;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
}

/* Scores of R rows against keys j .. j + 7, as two groups of 4: per 16
 * dims, the 4 keys' widened rows transposed within 128-bit lanes (T_i lane
 * k = word i of key k, lane 4 + k its word 4 + i), times the row's query
 * words in the same places (qv[r][d / 4 + i]); the lanes' halves are added
 * at the end. One accumulator a row and group, the keys loaded once for
 * all rows: a full 8 x 8 transpose per row of keys had spilled to the
 * stack. Integer sums: any order gives the same bits. Keys from maxall on
 * read as 0 (their scores are masked). */
AI void scores8(const q8_unit2 *x, int j, int maxall, const __m256i (*qv)[KVS_ATTN_Q8_MAX_DIM / 4], int R,
                __m256i *out) {
    static const int8_t zero_row[KVS_ATTN_Q8_MAX_DIM];
    __m256i acc[2][DEC_ROWS];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* the 4 keys' rows, once: tested and addressed per 16 dims, the
         * loop had spent a compare and a multiply per key on each */
        const int8_t *kr[4];
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; kk++) {
            const int key = j + 4 * h + kk;
            kr[kk] = key < maxall ? x->K + (size_t)key * x->rb : zero_row;
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[h][r] = _mm256_setzero_si256();
        for (int d = 0; d < x->D; d += 16) {
            __m256i k[4];
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; kk++) k[kk] = widen16(kr[kk] + d);
            const __m256i t0 = _mm256_unpacklo_epi32(k[0], k[1]), t1 = _mm256_unpackhi_epi32(k[0], k[1]);
            const __m256i t2 = _mm256_unpacklo_epi32(k[2], k[3]), t3 = _mm256_unpackhi_epi32(k[2], k[3]);
            const __m256i T[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                                  _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    acc[h][r] = _mm256_add_epi32(acc[h][r], _mm256_madd_epi16(T[i], qv[r][d / 4 + i]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        out[r] = _mm256_add_epi32(_mm256_permute2x128_si256(acc[0][r], acc[1][r], 0x20),
                                  _mm256_permute2x128_si256(acc[0][r], acc[1][r], 0x31));
}

/* The words of value pair (j, j + 1) at dims d0 .. d0 + 15 (a: key j's
 * row there, b: key j + 1's or NULL past the buffer): v_j[d] | v_j+1[d] <<
 * 16, v[0] for dims d0 + 0..3 and 8..11, v[1] for 4..7 and 12..15 (the
 * in-lane unpacks' order; pv16's callers keep their sums in it). */
AI void value_pair16(const int8_t *a, const int8_t *b, __m256i v[2]) {
    const __m256i wa = widen16(a), wb = b ? widen16(b) : _mm256_setzero_si256();
    v[0] = _mm256_unpacklo_epi16(wa, wb);
    v[1] = _mm256_unpackhi_epi16(wa, wb);
}

/* P.V of R rows over the value pairs of keys [b0, b1) (b0 even; one
 * block), dims d0 .. d0 + 15 in value_pair16's order, read from the cache
 * rows below end (a key from end on reads as 0: its level is 0): each
 * pair's words made once for all rows (P[r]: row r's levels, 0 past its
 * keys). live (NULL: every pair): the nlive pairs to take, as offsets
 * from b0 / 2 (dec_live_pairs). Staging the pairs first had written and
 * read again 64 KB a tile, each word used once (23% of the unit's samples).
 * Integer sums: any order gives the same bits. */
AI void pv16(const q8_unit2 *x, const int16_t *const *P, int R, int b0, int b1, const uint16_t *live, int nlive,
             int end, int d0, __m256i out[][2]) {
    __m256i acc[DEC_ROWS][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#define PV_PAIR16(j)                                                                                               \
    do {                                                                                                           \
        const int8_t *va = x->V + (size_t)(j) * x->rb + d0;                                                       \
        __m256i v[2];                                                                                              \
        value_pair16(va, (j) + 1 < end ? va + x->rb : NULL, v);                                                    \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                                      \
            int32_t pw;                                                                                            \
            memcpy(&pw, P[r] + (j), 4); /* (p_j, p_j+1) */                                                         \
            const __m256i pb = _mm256_set1_epi32(pw);                                                              \
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(pb, v[0]));                                  \
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(pb, v[1]));                                  \
        }                                                                                                          \
    } while (0)
    if (!live)
        for (int j = b0; j < b1; j += 2) PV_PAIR16(j);
    else
        for (int n = 0; n < nlive; n++) PV_PAIR16(b0 + 2 * live[n]);
#undef PV_PAIR16
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) out[r][0] = acc[r][0], out[r][1] = acc[r][1];
}

/* The pairs of keys [b0, b1) (b0, b1 even; one PV block, so at most
 * PV_BLOCK / 2 pairs) whose level pairs are not 0 in some row, as offsets
 * from b0 / 2, into live; returns their count, and where every pair is live
 * leaves live unwritten. A pair whose levels are 0 in every row adds
 * 0 to the exact sums: far from the token most weights are under half a
 * level of the row's top (SmolLM2, Q8 KV, decode on the GPL-3 text after
 * 3428 / 6379 tokens: 46% / 62% of the pairs). Masks of 8 pairs first (a
 * vector of the rows' levels or-ed, a 32-bit lane a pair), the list only
 * where some pair is 0: building it for a block with none cost 3-5% of a
 * decode's attention. */
static int dec_live_pairs(const int16_t *const *P, int rows, int b0, int b1, uint16_t *live) {
    uint8_t mask[PV_BLOCK / 16];
    int groups = 0, nl = 0;
    for (int j = b0; j < b1; j += 16, groups++) {
        unsigned m = 0;
        if (j + 16 <= b1) {
            __m256i w = _mm256_setzero_si256();
            for (int r = 0; r < rows; r++) w = _mm256_or_si256(w, _mm256_loadu_si256((const __m256i *)(P[r] + j)));
            m = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(w, _mm256_setzero_si256()))) & 0xffu;
        } else
            for (int k = 0; j + 2 * k < b1; k++) {
                uint32_t w = 0;
                for (int r = 0; r < rows; r++) {
                    uint32_t pw;
                    memcpy(&pw, P[r] + j + 2 * k, 4);
                    w |= pw;
                }
                m |= (unsigned)(w != 0) << k;
            }
        mask[groups] = (uint8_t)m;
        nl += __builtin_popcount(m);
    }
    if (nl == (b1 - b0) / 2) return nl;
    nl = 0;
    for (int g = 0; g < groups; g++)
        for (unsigned m = mask[g]; m; m &= m - 1) live[nl++] = (uint16_t)(8 * g + __builtin_ctz(m));
    return nl;
}

/* Dim d's place in the P.V sums' order (value_pair16): the middle two
 * quads of each 16 swapped. */
static inline int pv16_place(int d) {
    const int q = d & 12;
    return q == 4 || q == 8 ? d ^ 12 : d;
}

/* The unit's rows, R of them (1 to DEC_ROWS), as compile-time constants:
 * the loops over rows unroll and their accumulators stay in registers. */
_Static_assert(DEC_ROWS == 4, "DEC_BY_ROWS names every row count");
#define DEC_BY_ROWS(R, call)                                                                                          \
    switch (R) {                                                                                                       \
    case 1: call(1); break;                                                                                            \
    case 2: call(2); break;                                                                                            \
    case 3: call(3); break;                                                                                            \
    default: call(4); break;                                                                                           \
    }

/* A decode unit's rows: their key ranges and quantized queries. */
typedef struct dec_rows {
    int rows, jmin, maxall; /* keys [jmin, maxall): every row's, jmin a multiple of 16 */
    int n[DEC_ROWS], lo[DEC_ROWS];
    float qs[DEC_ROWS];
    __m256i qv[DEC_ROWS][KVS_ATTN_Q8_MAX_DIM / 4]; /* scores8's query words */
} dec_rows;

/* The rows' key ranges; with queries, their words too. */
static void dec_rows_init(const q8_unit2 *x, dec_rows *dr, int queries) {
    const kvs_attn_call *c = x->c;
    const int D = x->D, D2 = D / 2;
    int8_t q8[KVS_ATTN_Q8_MAX_DIM];
    dr->rows = x->rows;
    dr->maxall = 0;
    dr->jmin = c->n_ctx;
    for (int r = 0; r < x->rows; r++) {
        const int t = x->t0 + r / x->group;
        dr->n[r] = kvs_attn_n(c, c->pos[t]);
        dr->lo[r] = kvs_attn_lo(c, dr->n[r]);
        if (dr->n[r] > dr->maxall) dr->maxall = dr->n[r];
        if (dr->lo[r] < dr->jmin) dr->jmin = dr->lo[r];
        if (!queries) continue;
        const float *q = c->q + ((size_t)t * c->n_head + (size_t)x->g * x->group + r % x->group) * D;
        dr->qs[r] = kvs_q8_row(q, q8, D) * c->scale;
        for (int w = 0; w < D2; w += 8) /* words w + i and w + 4 + i, i < 4 */
            for (int i = 0; i < 4; i++)
                dr->qv[r][w / 2 + i] = _mm256_set_m128i(_mm_set1_epi32(level_pair(q8 + 2 * (w + 4 + i))),
                                                        _mm_set1_epi32(level_pair(q8 + 2 * (w + i))));
    }
    dr->jmin &= ~15;
}

/* Scores of keys [ja, jb) (ja - jmin a multiple of 8) into the rows' score
 * rows (masked: -inf outside a row's [lo, n)), the values' scales into
 * vds, each row's lane maxima into mx[r] (mx NULL: not taken). */
static void dec_scores(const q8_unit2 *x, const dec_rows *dr, int ja, int jb, float *vds, __m256 *mx) {
    const int D = x->D;
    for (int j = ja; j < ja + SCORES_AHEAD; j += 8) {
        prefetch_rows8(x->K, x->rb, j, jb);
        prefetch_rows8(x->V, x->rb, j, jb);
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = ja; j < jb; j += 8) {
        prefetch_rows8(x->K, x->rb, j + SCORES_AHEAD, jb);
        prefetch_rows8(x->V, x->rb, j + SCORES_AHEAD, jb);
        const __m256 kd = row_scales8(x->K, x->rb, D, j, dr->maxall);
        _mm256_storeu_ps(vds + j, row_scales8(x->V, x->rb, D, j, dr->maxall));
        const __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(j), lane);
        __m256i acc[DEC_ROWS];
#define DEC_SCORES(R) scores8(x, j, dr->maxall, (const __m256i(*)[KVS_ATTN_Q8_MAX_DIM / 4])dr->qv, R, acc)
        DEC_BY_ROWS(dr->rows, DEC_SCORES)
#undef DEC_SCORES
        for (int r = 0; r < dr->rows; r++) {
            const __m256 s =
                _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r]), kd), _mm256_set1_ps(dr->qs[r]));
            const __m256i before = _mm256_cmpgt_epi32(_mm256_set1_epi32(dr->lo[r]), jv);
            const __m256 live =
                _mm256_castsi256_ps(_mm256_andnot_si256(before, _mm256_cmpgt_epi32(_mm256_set1_epi32(dr->n[r]), jv)));
            const __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, live);
            if (mx) mx[r] = _mm256_max_ps(v, mx[r]);
            _mm256_storeu_ps(x->S + (size_t)r * x->ctxs + j, v);
        }
    }
}

/* Row r's exp, sum and weights with its largest value scale (over its keys
 * [lo, n): the lanes it sees), from its largest score m, then their levels
 * in place (P[j] at 2 bytes a key, 0 from the row's last key to maxall's
 * pair: pv16 and dec_live_pairs read every row to the unit's last); its pd
 * and 1 / S. */
static void dec_weights_row(const q8_unit2 *x, const dec_rows *dr, int r, float m, const float *vds, float *pd,
                            float *inv) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 top = _mm256_set1_ps(32767.0f), bottom = _mm256_set1_ps(-32767.0f);
    const int n = dr->n[r], lo = dr->lo[r];
    float *S = x->S + (size_t)r * x->ctxs;
    __m256 part[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, vdmax = _mm256_setzero_ps();
    for (int j = dr->jmin; j < n; j += 8) {
        const __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(j), lane);
        const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), jv));
        const __m256 e = _mm256_and_ps(kvs_exp8_q8(_mm256_sub_ps(_mm256_loadu_ps(S + j), _mm256_set1_ps(m))), in);
        part[(j >> 3) & 1] = _mm256_add_ps(part[(j >> 3) & 1], e); /* keys j % 16 in lanes of lo, hi */
        const __m256 vd = _mm256_and_ps(_mm256_loadu_ps(vds + j), in);
        if (j < lo) { /* the keys before the row's first: not its scales */
            const __m256 before = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), jv));
            vdmax = _mm256_max_ps(_mm256_andnot_ps(before, vd), vdmax);
        } else vdmax = _mm256_max_ps(vd, vdmax); /* NaN and -0 leave it */
        _mm256_storeu_ps(S + j, _mm256_mul_ps(e, vd));
    }
    *inv = 1.0f / tree16_2(part[0], part[1]);
    float v8[8];
    _mm256_storeu_ps(v8, vdmax);
    float vm = 0.0f; /* >= +0, no NaN: the order is free */
    for (int k = 0; k < 8; k++) vm = v8[k] > vm ? v8[k] : vm;
    *pd = vm / 32767.0f;
    const __m256 ipd = _mm256_set1_ps(*pd >= FLT_MIN ? 1.0f / *pd : 0.0f);
    int16_t *Pr = (int16_t *)S;
    int j = dr->jmin;
    for (; j < n; j += 8) { /* to P[j + 7] <= 2 (j + 7): behind the reads */
        const __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(j), lane);
        const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), jv));
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(S + j), ipd);
        const __m256i p = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, top), bottom)),
                                           _mm256_castps_si256(_mm256_and_ps(in, _mm256_cmp_ps(v, v, _CMP_ORD_Q))));
        const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(p, p), 0x08); /* 8 int16 in order */
        _mm_storeu_si128((__m128i *)(Pr + j), _mm256_castsi256_si128(p16));
    }
    for (; j < ((dr->maxall + 1) & ~1); j += 8) /* to the last pair pv16 reads */
        _mm_storeu_si128((__m128i *)(Pr + j), _mm_setzero_si128());
}

/* The largest of a row's lane maxima (no lane is NaN: the order is free). */
static float lanes_max(__m256 mx) {
    float m8[8];
    _mm256_storeu_ps(m8, mx);
    float m = m8[0];
    for (int k = 1; k < 8; k++) m = m8[k] > m ? m8[k] : m;
    return m;
}

/* Outputs of dims [da, db) (multiples of 16) from the rows' levels: P.V
 * per PV block. Every row runs to the unit's last pair: past its own keys
 * its levels are 0, so its integer sums are the same, and a block whose
 * sums are 0 would add +0.0 to o, which leaves it as it is (o starts at +0
 * and never becomes -0): so a block with no live pair (dec_live_pairs) is
 * skipped. o[r] holds the dims in pv16's order (pv16_place: within each
 * 16). */
static void dec_outputs(const q8_unit2 *x, const dec_rows *dr, const float *pd, const float *inv, int da, int db) {
    const kvs_attn_call *c = x->c;
    const int D = x->D, rows = dr->rows;
    const int16_t *P[DEC_ROWS];
    float o[DEC_ROWS][KVS_ATTN_Q8_MAX_DIM];
    for (int r = 0; r < rows; r++) {
        P[r] = (const int16_t *)(x->S + (size_t)r * x->ctxs);
        memset(o[r] + da, 0, (size_t)(db - da) * sizeof(float));
    }
    const int hi = (dr->maxall + 1) & ~1;
    for (int b0 = dr->jmin, b1; b0 < hi; b0 = b1) {
        b1 = kvs_attn_q8_block_end(b0, hi);
        uint16_t live[PV_BLOCK / 2];
        const int nl = dec_live_pairs(P, rows, b0, b1, live);
        if (!nl) continue; /* every sum 0: o + (+0) is o */
        const uint16_t *take = nl < (b1 - b0) / 2 ? live : NULL; /* all live: every pair */
        for (int d0 = da; d0 < db; d0 += 16) {
            __m256i acc[DEC_ROWS][2];
#define DEC_PV(R) pv16(x, P, R, b0, b1, take, nl, dr->maxall, d0, acc)
            DEC_BY_ROWS(rows, DEC_PV)
#undef DEC_PV
            for (int r = 0; r < rows; r++)
                for (int i = 0; i < 2; i++) {
                    float *od = o[r] + d0 + 8 * i;
                    _mm256_storeu_ps(od, _mm256_add_ps(_mm256_loadu_ps(od), _mm256_cvtepi32_ps(acc[r][i])));
                }
        }
    }
    for (int r = 0; r < rows; r++) {
        float *out = c->out + ((size_t)(x->t0 + r / x->group) * c->n_head + (size_t)x->g * x->group + r % x->group) * D;
        for (int d = da; d < db; d++) out[d] = (o[r][pv16_place(d)] * pd[r]) * inv[r];
    }
}

/* A unit of at most DEC_ROWS rows, none recalibrated: scores with keys in
 * lanes (scores8: 4 keys transposed within 128-bit lanes, for all the
 * unit's rows at once), exp and levels lane = key (partials j % 16 as two
 * vectors), P.V lane = dim (pv16: value pairs made from the cache rows,
 * each row's level pair broadcast). The lane = row layout idled 5 of 8
 * lanes on SmolLM2's 3-row decode units: 2.7-3.5x F16's decode time. The
 * rows share each key's and value's loads: a row at a time over staged
 * keys and values (session 88's unit) took 2.5x this one's time. */
void kvs_attention_decode_unit_q8_avx2(q8_unit2 *x) {
    dec_rows dr;
    dec_rows_init(x, &dr, 1);
    float *vds = x->S + (size_t)DEC_ROWS * x->ctxs; /* the values' scales, for the exp pass */
    __m256 mx[DEC_ROWS];
    for (int r = 0; r < dr.rows; r++) mx[r] = _mm256_set1_ps(-INFINITY);
    dec_scores(x, &dr, dr.jmin, dr.maxall, vds, mx);
    float pd[DEC_ROWS], inv[DEC_ROWS];
    for (int r = 0; r < dr.rows; r++) dec_weights_row(x, &dr, r, lanes_max(mx[r]), vds, &pd[r], &inv[r]);
    dec_outputs(x, &dr, pd, inv, 0, x->D);
}

/* ------------------------------------- one decode token split across threads
 *
 * kvs_isa's attention_split_*_q8 (dispatch.c's attention_split), where the
 * (token, kv head) units would leave threads idle: gemma3's one kv head on
 * 2 threads ran on one of them. Three phases over the unit's passes above,
 * so the same bits:
 *  0. scores, units (kv head, SPLIT_KEYS keys): each key's score is its own
 *     integer dot; the values' scales of the range;
 *  1. weights, units heads: the row's lane maxima over its score row in the
 *     unit's operand order (max(score, running): a NaN score never enters),
 *     then dec_weights_row (its partial sums are chains over the keys);
 *  2. outputs, units (kv head, split_dims(D) dims): per dim, the block sums
 *     in ascending order.
 * Shared, in thread 0's score rows (c->work): head h's scores, then levels,
 * at row h, its pd and 1 / S in the row's last 2 floats (past every key's
 * lanes: a row holds n_ctx + 16 floats), kv head g's value scales at row
 * n_head + g. The phases run one after another. */

#define SPLIT_KEYS 512 /* keys per unit of phase 0 (a multiple of scores8's 8) */

/* Dims per unit of phase 2 (a multiple of 16 that divides D): a 64-byte
 * line of each value row where the head has several. */
static int split_dims(int D) { return D % 64 == 0 && D >= 128 ? 64 : D % 32 == 0 ? 32 : 16; }

static int split_suits(const kvs_attn_call *c) {
    const int group = c->n_head / c->n_kv_head;
    return c->m == 1 && group <= DEC_ROWS && kvs_attn_q8_simd_shape(c->head_dim, group) &&
           c->n_head + c->n_kv_head <= KVS_ATTN_ROWS && !kvs_attn_recal_row(c, c->pos[0]);
}

/* Kv head g's decode unit over the shared rows (queries: with its query
 * words, for phase 0). */
static void split_unit_init(q8_unit2 *x, dec_rows *dr, const kvs_attn_call *c, int g, int queries, float *work) {
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    q8_unit2_init(x, c, 0, 1, g, c->work + (size_t)g * (c->n_head / c->n_kv_head) * ctxs, work);
    dec_rows_init(x, dr, queries);
}

/* Kv head g's value scales. */
static float *split_vds(const kvs_attn_call *c, int g) {
    return c->work + (size_t)(c->n_head + g) * kvs_attn_score_stride(c->n_ctx);
}

/* Phase 0's units per kv head: the token's keys [lo & ~15, n) (its rows
 * see the same: dec_rows_init's jmin and maxall). */
static int split_key_units(const kvs_attn_call *c) {
    const int n = kvs_attn_n(c, c->pos[0]);
    return (n - (kvs_attn_lo(c, n) & ~15) + SPLIT_KEYS - 1) / SPLIT_KEYS;
}

int kvs_attention_split_units_q8_avx2(const kvs_attn_call *c, int phase) {
    if (!split_suits(c)) return 0;
    if (phase == 1) return c->n_head;
    if (phase == 2) return c->n_kv_head * (c->head_dim / split_dims(c->head_dim));
    return c->n_kv_head * split_key_units(c);
}

void kvs_attention_split_unit_q8_avx2(const kvs_attn_call *c, int phase, int u, float *work) {
    if (!split_suits(c)) return;
    const int group = c->n_head / c->n_kv_head, D = c->head_dim;
    q8_unit2 x;
    dec_rows dr;
    if (phase == 0) {
        const int per_g = split_key_units(c), g = u / per_g;
        split_unit_init(&x, &dr, c, g, 1, work);
        const int ja = dr.jmin + u % per_g * SPLIT_KEYS, jb = ja + SPLIT_KEYS < dr.maxall ? ja + SPLIT_KEYS : dr.maxall;
        dec_scores(&x, &dr, ja, jb, split_vds(c, g), NULL); /* phase 1 takes the maxima from the rows */
        return;
    }
    if (phase == 1) { /* row u (head u) */
        split_unit_init(&x, &dr, c, u / group, 0, work);
        const int r = u % group;
        float *row = x.S + (size_t)r * x.ctxs;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int j = dr.jmin; j < dr.maxall; j += 8) mx = _mm256_max_ps(_mm256_loadu_ps(row + j), mx);
        dec_weights_row(&x, &dr, r, lanes_max(mx), split_vds(c, u / group), &row[x.ctxs - 2], &row[x.ctxs - 1]);
        return;
    }
    const int dims = split_dims(D), per_g = D / dims, da = u % per_g * dims;
    split_unit_init(&x, &dr, c, u / per_g, 0, work);
    float pd[DEC_ROWS], inv[DEC_ROWS];
    for (int r = 0; r < dr.rows; r++) {
        pd[r] = x.S[(size_t)r * x.ctxs + x.ctxs - 2];
        inv[r] = x.S[(size_t)r * x.ctxs + x.ctxs - 1];
    }
    dec_outputs(&x, &dr, pd, inv, da, da + dims);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
