/*
 * AVX-512 VNNI attention on Q8 KV rows, the decode layout (units of fewer
 * than KVS_ATTN_Q8_PREFILL_ROWS rows: scores lane = key, P.V lane = dim;
 * the arithmetic and the prefill layout: attention_q8_avx512.c), the
 * decode layout's copy of the cache (kvs_attention_layout_q8_avx512), and
 * one decode token's attention split across threads where its units would
 * leave threads idle (the end of this file): the same passes, so the same
 * bits.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
/* Scheduling before register allocation, pressure-aware: without it GCC
 * copies the tied vpdpbusd accumulators between registers
 * every key (ctx 4096 prefill: 142 -> 121 ms on the Zen 5 VM) */
#pragma GCC optimize("schedule-insns", "sched-pressure")
#endif

#include "kernels/attention_q8_avx512.h"

/* As stage_values4, for positions [da, db) (multiples of 16) with each 64 dims' words
 * left in value_words' order: position d + 16 i + 4 L + k holds dim d + 16
 * L + 4 i + k (8 of the 24 vector operations of 4 keys saved; the decode
 * layout's values). For the decode, whose P.V sums each position on its
 * own: its outputs are put back in order once (lanes_transpose4 again, the
 * permutation being its own inverse). */
AI void values4_lanes(const int8_t *V, size_t rb, int n_ctx, int D, int j0, int nk, int da, int db, int32_t *v4) {
    for (int j = j0; j < j0 + nk; j += 4) {
        int32_t *out = v4 + (size_t)((j - j0) / 4) * D;
        for (int d = da & ~63; d < db; d += 64) {
            __m512i c[4];
            value_words(V, rb, n_ctx, D, j, d, c);
            for (int i = 0; i < 4; i++)
                if (d + 16 * i >= da && d + 16 * i < db) _mm512_storeu_si512(out + d + 16 * i, c[i]);
        }
    }
}

/* ------------------------------------------------ decode, lane = key / dim */

/* Keys j.. j + 15 of rows K transposed, 64 dims at a time: kt[d/4] lane k
 * = the 4 bytes d.. of key j + k, plus 128 (a last part of fewer than 64
 * dims is loaded masked, its transposed tail never read; keys past the
 * buffer read as 0). The decode layout's keys (kernels.h). */
AI void key_tile16(const int8_t *K, size_t rb, int n_ctx, int D, int j, __m512i *kt) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int c = 0; c < (D + 63) / 64; c++) {
        const __mmask64 m = D - 64 * c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (D - 64 * c)) - 1;
        __m512 t[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            t[k] = j + k < n_ctx ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(m, K + (size_t)(j + k) * rb + 64 * c))
                                 : _mm512_setzero_ps();
        transpose16(t);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) kt[16 * c + i] = _mm512_xor_si512(_mm512_castps_si512(t[i]), bias);
    }
}

/* How far ahead the decode prefetches the layout's keys and values (into
 * L1), the score and P.V passes each streaming their part of it from DRAM
 * once a token. Without it the transfers and the passes' arithmetic added up:
 * 30 layers of SmolLM2's K and V after 8192 keys (3.2 MB a layer) took
 * 199-211 us a layer from DRAM against 64 us with them in the L3 (full-width
 * Zen 5, 1 thread); with it 95-100 us (4 KB ahead 120, 8 KB 108, 16 KB 96,
 * 32 KB 104, 48 KB 105), the read probe's rate being ~89 us a layer. */
#define DECODE_PREFETCH_BYTES 16384

/* From this many bytes of a kv head's keys on (2048 keys at D = 64), the
 * decode reads its keys and values in two streams, the first and the second
 * half of a range in turn, each prefetched into the L2 (not the L1). Why:
 * on the AMX Xeon one thread's single stream from DRAM ran at ~12 GB/s
 * (its line fill buffers' limit: a read probe over 96 MB gave 11.9 GB/s
 * for one stream, 15.4 for two, 15-16 for one prefetched into the L2), and
 * SmolLM2's decode after 7680 tokens streams 94 MB of Q8 K and V a token:
 * 1.10-1.13x the tokens/s (1 thread, 6 alternating rounds), 1.11-1.16x at 2
 * threads. Below it the keys are in the caches, where the L1 prefetch of a
 * single stream did better (two streams with L2 prefetches at every size:
 * 0.969x after 512 tokens, 10 rounds). */
#define DECODE_FAR_BYTES (128 * 1024)

/* Whether kv head x's keys reach DECODE_FAR_BYTES (all of them, whatever
 * part of them a split unit takes). */
static inline int decode_far(const q8_unit *x) {
    return (size_t)(unit_maxn(&x->u) - x->u.jmin) * x->u.D >= DECODE_FAR_BYTES;
}

/* The decode's order over n items (key blocks, value groups): far, a visit
 * of the first and of the second half in turn (half = (n + 1) / 2; visit i
 * takes item stream_item(i, half, 1), past n for the last visit where n is
 * odd: skipped), else in order. */
static inline int stream_visits(int n, int far) { return far ? 2 * ((n + 1) / 2) : n; }
static inline int stream_item(int i, int half, int far) { return far ? (i >> 1) + (i & 1) * half : i; }

/* A prefetch of the line at p: into the L1, or (far) the L2. */
AI void decode_prefetch(const char *p, int far) {
    if (far) _mm_prefetch(p, _MM_HINT_T1);
    else _mm_prefetch(p, _MM_HINT_T0);
}

/* acc + the dot of u8's bytes with the 4 signed bytes at s8, broadcast
 * from memory by the instruction itself (no broadcast of its own: the
 * decode's query words, one per 4 dims a row). */
AI __m512i dpbusd_bcast(__m512i acc, __m512i u8, const int32_t *s8) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*s8));
    return acc;
}

/* The decode's query rows (decode_queries): each row's levels as 32-bit
 * words (4 levels), so a dot broadcasts them from memory, its integer
 * offset 128 sum(q8) and qd * scale; and its scores' running maxima
 * (decode_scores_t). */
typedef struct decode_rows {
    int32_t qw[8][KVS_ATTN_Q8_MAX_DIM / 4];
    int32_t qoff[8];
    float qs[8];
    __m512 mx[8];
} decode_rows;

/* The key or value scales of a kv head's slots: the decode layout's own
 * (lay, slots [l0, ln), multiples of 16) where it holds them, else a copy
 * from the rows (own, indexed by slot as well). Blocks of 16 slots from a
 * multiple of 16 lie wholly on one side. Read in place: copying the
 * layout's (8 bytes a key) had been 3.9% of a decode after 7680 tokens. */
typedef struct scales_view {
    const float *lay, *own;
    int l0, ln;
} scales_view;

static inline scales_view scales_of(const q8_unit *x, const float *lay, const float *own) {
    return x->ln > x->l0 ? (scales_view){lay, own, x->l0, x->ln} : (scales_view){own, own, 0, 0};
}

/* The scales of slots j .. j + 15 (j a multiple of 16) start at the
 * returned pointer + j. */
static inline const float *scales_block(scales_view v, int j) {
    return j >= v.l0 && j + 16 <= v.ln ? v.lay : v.own;
}

/* Rows [r0, r0 + NR) of 16 keys' scores (key words kt, lane = key): each
 * key word loaded once for the NR rows, two chains a row (even and odd 4
 * dims: summed, exact). masked: some lane is no key of some row (past jb,
 * n or before lo): those score -inf. */
AI void scores16_rows(const q8_unit *x, int NR, int D4, int r0, const __m512i *kt, decode_rows *dr, __m512 kd,
                      int masked, __mmask16 in, __m512i jv, float *S) {
    __m512i acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int d4 = 0; d4 < D4; d4 += 2) {
        const __m512i k0 = kt[d4], k1 = kt[d4 + 1];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            acc[r][0] = dpbusd_bcast(acc[r][0], k0, &dr->qw[r0 + r][d4]);
            acc[r][1] = dpbusd_bcast(acc[r][1], k1, &dr->qw[r0 + r][d4 + 1]);
        }
    }
    const size_t ctxs = x->u.ctxs;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const int row = r0 + r;
        const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(acc[r][0], acc[r][1]), _mm512_set1_epi32(dr->qoff[row]));
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), kd), _mm512_set1_ps(dr->qs[row]));
        if (masked) {
            const __mmask16 live = in & _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(x->u.n[row]), jv) &
                                   _mm512_cmple_epi32_mask(_mm512_set1_epi32(x->u.lo[row]), jv);
            v = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), live, v);
        }
        dr->mx[row] = _mm512_max_ps(v, dr->mx[row]);
        _mm512_storeu_ps(S + (size_t)row * ctxs, v);
    }
}

/* Every row's scores of 16 keys, rows 4 at a time (D4: D / 4, a constant
 * where the caller has one). */
AI void scores16(const q8_unit *x, int D4, int rows, const __m512i *kt, decode_rows *dr, __m512 kd, int masked,
                 __mmask16 in, __m512i jv, float *S) {
    for (int r0 = 0; r0 < rows; r0 += 4) {
        switch (rows - r0) {
        case 1: scores16_rows(x, 1, D4, r0, kt, dr, kd, masked, in, jv, S); break;
        case 2: scores16_rows(x, 2, D4, r0, kt, dr, kd, masked, in, jv, S); break;
        case 3: scores16_rows(x, 3, D4, r0, kt, dr, kd, masked, in, jv, S); break;
        default: scores16_rows(x, 4, D4, r0, kt, dr, kd, masked, in, jv, S); break;
        }
    }
}

/* Every row's scores of keys [ja, jb) (ja a multiple of 16) with keys in
 * lanes: each 16 keys' words (key_tile16, or the decode layout's where it
 * holds them) for all the unit's rows, which then take one vpdpbusd per 4
 * dims against their broadcast levels. Blocks every row sees whole skip
 * the masks. */
AI void decode_scores_d(q8_unit *x, int D4, int rows, decode_rows *dr, scales_view kds, int ja, int jb) {
    const int D = x->u.D, n_ctx = x->u.c->n_ctx;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    int nmin = jb, lomax = 0; /* keys [lomax, nmin) are live for every row */
    for (int r = 0; r < rows; r++) {
        if (x->u.n[r] < nmin) nmin = x->u.n[r];
        if (x->u.lo[r] > lomax) lomax = x->u.lo[r];
    }
    /* key blocks of 16 (16 D bytes) prefetched ahead, within the layout and the call's keys */
    const int ahead = DECODE_PREFETCH_BYTES / (16 * D) > 0 ? DECODE_PREFETCH_BYTES / (16 * D) : 1;
    const int lend = x->ln < jb ? x->ln : jb;
    __m512i tile[KVS_ATTN_Q8_MAX_DIM / 4];
    /* far (DECODE_FAR_BYTES): two streams, a block of the first and of the
     * second half in turn, each prefetching within its half (the order of
     * the keys changes nothing: each key's score is its own, and the maxima
     * are order-free, as the split decode's) */
    const int far = decode_far(x);
    const int nblk = (jb - ja + 15) / 16, part = far ? (nblk + 1) / 2 : nblk;
    for (int i = 0; i < stream_visits(nblk, far); i++) {
        const int blk = stream_item(i, part, far);
        if (blk >= nblk) continue;
        const int j = ja + 16 * blk;
        const int end = blk >= part || ja + 16 * part > lend ? lend : ja + 16 * part; /* its half's */
        const __m512i *kt = tile;
        if (j >= x->l0 && j + 16 <= x->ln) kt = x->lk + (size_t)(j / 16) * (D / 4);
        else key_tile16(x->K, x->rb, n_ctx, D, j, tile);
        if (j + 16 * ahead + 16 <= end) { /* the layout's keys stream from DRAM: see DECODE_PREFETCH_BYTES */
            const char *pf = (const char *)(x->lk + (size_t)(j / 16 + ahead) * (D / 4));
            for (int q = 0; q < D / 4; q++) decode_prefetch(pf + 64 * q, far);
        }
        const __m512i jv = _mm512_add_epi32(_mm512_set1_epi32(j), lane);
        const __mmask16 in = _mm512_cmplt_epi32_mask(jv, _mm512_set1_epi32(jb));
        float *S = x->u.S + j;
        if (j >= lomax && j + 16 <= nmin)
            scores16(x, D4, rows, kt, dr, _mm512_loadu_ps(scales_block(kds, j) + j), 0, in, jv, S);
        else
            scores16(x, D4, rows, kt, dr, _mm512_maskz_loadu_ps(in, scales_block(kds, j) + j), 1, in, jv, S);
    }
}

static void decode_scores_t(q8_unit *x, int rows, decode_rows *dr, scales_view kds, int ja, int jb) {
    if (x->u.D == 64) decode_scores_d(x, 16, rows, dr, kds, ja, jb);
    else decode_scores_d(x, x->u.D / 4, rows, dr, kds, ja, jb);
}

/* Keys a P.V pass of the decode takes at a time (group_words' 32 groups of
 * 4): its values stay in the L1 from the hi words' pass to the lo words'
 * (a pass over a whole PV block of 512 keys, 32 KB of values at D = 64,
 * took 1.05x the time). */
#define DECODE_PV_KEYS 128

/* A PV block's value tile in up to two parts: group g (from the block's
 * first) at v4 + g D for g < gs (the decode layout's values, read in
 * place), else at v4s + (g - gs) D (the newest slots, staged): the block's
 * integer sums run on over both, so a block is never cut where the layout
 * ends (which had re-staged up to a block of it every token). */
typedef struct pv_values {
    const int32_t *v4, *v4s;
    int gs;
} pv_values;

/* t from dim d0 on (both parts; a part not used stays NULL). */
static inline pv_values pv_values_dims(pv_values t, int d0) {
    return (pv_values){.v4 = t.v4 ? t.v4 + d0 : NULL, .v4s = t.v4s + d0, .gs = t.gs};
}

static inline const int32_t *pv_value_at(pv_values t, int g, int D) {
    return g < t.gs ? t.v4 + (size_t)g * D : t.v4s + (size_t)(g - t.gs) * D;
}

/* acc[0 / 1][i] += the lo words of groups [g, g1) (even / odd of each
 * pair) times their values from v (group g's), nv vectors; with pf, the
 * groups' lines DECODE_PREFETCH_BYTES ahead (pv_rows). */
AI void pv_lo_pairs(__m512i acc[2][8], const int32_t *P, const int32_t *v4, int D, int g, int g1, int nv,
                    const char *pf, int npf) {
    for (; g + 2 <= g1; g += 2, v4 += 2 * D) {
        if (pf) {
            for (int l = 0; l < npf; l++) { /* the two groups' lines */
                _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
                _mm_prefetch(pf + 4 * (size_t)D + 64 * l, _MM_HINT_T0);
            }
            pf += 8 * (size_t)D;
        }
        const __m512i p0 = _mm512_set1_epi32(P[2 * g]), p1 = _mm512_set1_epi32(P[2 * g + 2]);
#pragma GCC unroll 8
        for (int i = 0; i < nv; i++) {
            acc[0][i] = dpbusd(acc[0][i], p0, _mm512_loadu_si512(v4 + 16 * i));
            acc[1][i] = dpbusd(acc[1][i], p1, _mm512_loadu_si512(v4 + D + 16 * i));
        }
    }
    if (g < g1) {
        const __m512i p0 = _mm512_set1_epi32(P[2 * g]);
#pragma GCC unroll 8
        for (int i = 0; i < nv; i++) acc[0][i] = dpbusd(acc[0][i], p0, _mm512_loadu_si512(v4 + 16 * i));
    }
}

/* One decode row's integer sums oi[16 i] += P.V over the groups [g0, g1)
 * of 4 keys (a pass within one PV block): the row's weights P as
 * weights_rows lays them out (group g's lo bytes at P[2 g], hi at
 * P[2 g + 1]), the values t from group g0 (+ d0), nv vectors of 16 dims. The hi words of the groups whose bit
 * g - g0 is set in hot, << 8, then every lo word, in two sets of
 * sums (even and odd groups: twice the independent chains for vpdpbusd's
 * latency); integers, so their sum is the same. With pf, as pv_rows. */
AI void pv_decode_dims(const int32_t *P, pv_values t, int D, int g0, int g1, uint32_t hot, int nv, const char *pf,
                       int npf, int32_t *oi) {
    __m512i acc[2][8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[0][i] = acc[1][i] = _mm512_setzero_si512();
    for (; hot; hot &= hot - 1) {
        const int g = __builtin_ctz(hot);
        const __m512i ph = _mm512_set1_epi32(P[2 * (g0 + g) + 1]);
        const int32_t *v = pv_value_at(t, g, D);
#pragma GCC unroll 8
        for (int i = 0; i < nv; i++) acc[0][i] = dpbusd(acc[0][i], ph, _mm512_loadu_si512(v + 16 * i));
    }
#pragma GCC unroll 8
    for (int i = 0; i < nv; i++) acc[0][i] = _mm512_slli_epi32(acc[0][i], 8);
    /* the lo words, the layout's groups then the staged ones */
    const int gs = g0 + t.gs < g1 ? g0 + t.gs : g1;
    pv_lo_pairs(acc, P, t.v4, D, g0, gs, nv, pf, npf);
    pv_lo_pairs(acc, P, t.v4s, D, gs, g1, nv, NULL, 0);
#pragma GCC unroll 8
    for (int i = 0; i < nv; i++) {
        const __m512i a = _mm512_add_epi32(acc[0][i], acc[1][i]);
        _mm512_storeu_si512(oi + 16 * i, _mm512_add_epi32(_mm512_loadu_si512(oi + 16 * i), a));
    }
}

/* Which of the ng <= 32 groups from g0 have a lo or a hi word that is not
 * 0 in some of the nr rows P: bit k of *lo (*hi) set for group g0 + k's
 * P[r][2 (g0 + k)] (+ 1). A group's two words read as one 64-bit lane, the
 * rows or-ed before the tests. */
AI void group_words(const int32_t *const *P, int nr, int g0, int ng, uint32_t *lo, uint32_t *hi) {
    const __m512i lo_word = _mm512_set1_epi64(0xffffffffll), hi_word = _mm512_set1_epi64((long long)0xffffffff00000000ull);
    *lo = *hi = 0;
    for (int k = 0; k < ng; k += 8) {
        const __mmask8 in = ng - k >= 8 ? 0xff : (__mmask8)((1u << (ng - k)) - 1);
        __m512i w = _mm512_maskz_loadu_epi64(in, P[0] + 2 * (g0 + k));
        for (int r = 1; r < nr; r++) w = _mm512_or_si512(w, _mm512_maskz_loadu_epi64(in, P[r] + 2 * (g0 + k)));
        *lo |= (uint32_t)_mm512_test_epi64_mask(w, lo_word) << k;
        *hi |= (uint32_t)_mm512_test_epi64_mask(w, hi_word) << k;
    }
}

/* The set bits of m, ascending, plus base, into out[0..) (room for 48:
 * each half is stored as a whole vector); returns their count. */
AI int group_list(uint32_t m, int base, int32_t *out) {
    const __m512i iota = _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(base));
    const int n0 = __builtin_popcount(m & 0xffff);
    _mm512_storeu_si512(out, _mm512_maskz_compress_epi32((__mmask16)m, iota));
    _mm512_storeu_si512(out + n0, _mm512_maskz_compress_epi32((__mmask16)(m >> 16),
                                                               _mm512_add_epi32(iota, _mm512_set1_epi32(16))));
    return n0 + __builtin_popcount(m >> 16);
}

/* A pass's groups (bit k: group g0 + k) whose words some row needs: hi
 * and lo not 0; ahead, lo not 0 in the group a prefetch reaches from
 * group g0 + k (pv_rows: only those are fetched); live, the lo mask as a
 * list of nl offsets, made once a pass for all its dims. */
typedef struct pv_groups {
    uint32_t hi, lo, ahead;
    int nl;
    int32_t live[48];
} pv_groups;

/* Decode rows of one token (the same keys), NR of them, oi_r[16 i] += P.V
 * (integers) over the groups [g0, g1) of a pass within one PV block for NV
 * vectors of 16 dims (the values t from group g0, + the dims' offset): each
 * value vector loaded once for the NR rows, NR x NV independent sums. The
 * hi words of the groups set in gr.hi (some row's is not 0: a row's 0 adds
 * 0), << 8, then the lo words of those set in gr.lo: integers, so the sums
 * are pv_decode_dims'. A group whose lo words are all 0 is neither read nor
 * fetched: after 7680 tokens of SmolLM2 that is 54% of them (3 rows, real
 * text; 37% after 3428), and the values stream from DRAM. With pf, the
 * layout's groups DECODE_PREFETCH_BYTES ahead (group k + pf_groups) whose
 * lo words are not all 0 (gr.ahead) are prefetched, npf lines each, while
 * the live groups are summed; far (DECODE_FAR_BYTES): in two streams, the
 * first and the second half of the pass in turn. */
AI void pv_rows(int NR, int NV, const int32_t *const *P, pv_values t, int D, int g0, int g1, const pv_groups *gr,
                const char *pf, int npf, int far, int32_t *const *oi) {
    __m512i acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NV; i++) acc[r][i] = _mm512_setzero_si512();
    for (uint32_t hot = gr->hi; hot; hot &= hot - 1) {
        const int g = __builtin_ctz(hot);
        const int32_t *v = pv_value_at(t, g, D);
        __m512i vv[4];
#pragma GCC unroll 4
        for (int i = 0; i < NV; i++) vv[i] = _mm512_loadu_si512(v + 16 * i);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m512i ph = _mm512_set1_epi32(P[r][2 * (g0 + g) + 1]);
#pragma GCC unroll 4
            for (int i = 0; i < NV; i++) acc[r][i] = dpbusd(acc[r][i], ph, vv[i]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NV; i++) acc[r][i] = _mm512_slli_epi32(acc[r][i], 8);
    /* the live groups' lo words (listed: no branch a group), the prefetches
     * (listed too: the first and, far, the second half's) spread over them */
    const int ng = g1 - g0, half = far ? (ng + 1) / 2 : ng;
    int32_t pf1[48], pf2[48];
    const int nl = gr->nl;
    int n1 = 0, n2 = 0;
    if (pf) { /* only the layout's groups (q < t.gs) prefetch */
        const uint32_t a = gr->ahead & (uint32_t)((1ull << (t.gs < ng ? t.gs : ng)) - 1);
        n1 = group_list(a & (uint32_t)((1ull << half) - 1), 0, pf1);
        n2 = group_list((uint32_t)((uint64_t)a >> half), half, pf2);
    }
    const int n = nl > n1 ? (nl > n2 ? nl : n2) : (n1 > n2 ? n1 : n2);
    for (int k = 0; k < n; k++) {
        if (k < n1)
            for (int l = 0; l < npf; l++) decode_prefetch(pf + (size_t)pf1[k] * 4 * D + 64 * l, far);
        if (k < n2)
            for (int l = 0; l < npf; l++) decode_prefetch(pf + (size_t)pf2[k] * 4 * D + 64 * l, far);
        if (k >= nl) continue;
        const int q = gr->live[k]; /* the group from g0 */
        const int32_t *v4 = pv_value_at(t, q, D);
        __m512i vv[4];
#pragma GCC unroll 4
        for (int i = 0; i < NV; i++) vv[i] = _mm512_loadu_si512(v4 + 16 * i);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m512i pl = _mm512_set1_epi32(P[r][2 * (g0 + q)]);
#pragma GCC unroll 4
            for (int i = 0; i < NV; i++) acc[r][i] = dpbusd(acc[r][i], pl, vv[i]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NV; i++)
            _mm512_storeu_si512(oi[r] + 16 * i, _mm512_add_epi32(_mm512_loadu_si512(oi[r] + 16 * i), acc[r][i]));
}

/* pv_rows for NR = 2..4 rows and NV = 1..4 vectors (constants: the sums
 * stay in registers). */
AI void pv_rows_n(int nr, int nv, const int32_t *const *P, pv_values t, int D, int g0, int g1, const pv_groups *gr,
                  const char *pf, int npf, int far, int32_t *const *oi) {
#define PV_ROWS_NV(NR)                                                               \
    switch (nv) {                                                                    \
    case 1: pv_rows(NR, 1, P, t, D, g0, g1, gr, pf, npf, far, oi); break;           \
    case 2: pv_rows(NR, 2, P, t, D, g0, g1, gr, pf, npf, far, oi); break;           \
    case 3: pv_rows(NR, 3, P, t, D, g0, g1, gr, pf, npf, far, oi); break;           \
    default: pv_rows(NR, 4, P, t, D, g0, g1, gr, pf, npf, far, oi); break;          \
    }
    switch (nr) {
    case 2: PV_ROWS_NV(2) break;
    case 3: PV_ROWS_NV(3) break;
    default: PV_ROWS_NV(4) break;
    }
#undef PV_ROWS_NV
}

/* The decode rows' query levels, integer offsets and scales; their maxima
 * -inf. */
static void decode_queries(const q8_unit *x, decode_rows *dr) {
    const kvs_attn_call *c = x->u.c;
    for (int r = 0; r < x->u.rows; r++) {
        const float *q = c->q + ((size_t)(x->u.t0 + r / x->u.group) * c->n_head + (size_t)x->u.g * x->u.group +
                                 r % x->u.group) * x->u.D;
        dr->qs[r] = query_levels(c, q, (int8_t *)dr->qw[r], &dr->qoff[r]); /* bytes: char-typed writes */
        dr->mx[r] = _mm512_set1_ps(-INFINITY);
    }
}

/* The scales of rows [ja, jb) of K and V into kds[j], vds[j]. */
static void row_scales(const int8_t *K, const int8_t *V, size_t rb, int D, int ja, int jb, float *kds, float *vds) {
    for (int j = ja; j < jb; j++) {
        kds[j] = kvs_q8_row_scale(K + (size_t)j * rb, D);
        vds[j] = kvs_q8_row_scale(V + (size_t)j * rb, D);
    }
}

/* The scales of keys and values [ja, jb) that the decode layout does not
 * hold, gathered once for every row into kds[j], vds[j] (scales_view's
 * own). */
static void decode_scales(const q8_unit *x, int ja, int jb, float *kds, float *vds) {
    int la = x->l0 > ja ? x->l0 : ja, lb = x->ln < jb ? x->ln : jb; /* the layout's part */
    if (la >= lb) la = lb = jb;
    row_scales(x->K, x->V, x->rb, x->u.D, ja, la, kds, vds);
    row_scales(x->K, x->V, x->rb, x->u.D, lb, jb, kds, vds);
}

/* Row r's exp, sum, weights and their 16-bit levels in place (lane = key),
 * given its score maximum m: *pd, *inv; returns the OR of its levels (the
 * sign bit set: a negative value scale, no unsigned hi bytes). */
static __m512i decode_weights_row(const q8_unit *x, int r, float m, scales_view vds, float *pd, float *inv) {
    const __m512 top = _mm512_set1_ps(32767.0f), bottom = _mm512_set1_ps(-32767.0f);
    const __m128i order = _mm_set_epi8(15, 13, 14, 12, 11, 9, 10, 8, 7, 5, 6, 4, 3, 1, 2, 0);
    const int n = x->u.n[r], first = x->u.lo[r], jmin = x->u.jmin;
    float *S = x->u.S + (size_t)r * x->u.ctxs;
    __m512 part = _mm512_setzero_ps(), vdmax = _mm512_setzero_ps();
    for (int j = jmin; j < n; j += 16) {
        const __mmask16 in = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        const __mmask16 seen = in & (__mmask16)(first <= j ? 0xffffu : first - j >= 16 ? 0u : 0xffffu << (first - j));
        const __m512 sm = _mm512_sub_ps(_mm512_loadu_ps(S + j), _mm512_set1_ps(m));
        const __m512 e = _mm512_maskz_mov_ps(in & _mm512_cmp_ps_mask(sm, sm, _CMP_ORD_Q), exp16_q8(sm)); /* NaN: 0 */
        part = _mm512_add_ps(part, e); /* lane i: keys i mod 16, as the reference's partials */
        const __m512 vd = _mm512_maskz_loadu_ps(in, scales_block(vds, j) + j);
        vdmax = _mm512_mask_max_ps(vdmax, seen, vd, vdmax); /* the row's keys [first, n); NaN and -0 leave it */
        _mm512_storeu_ps(S + j, _mm512_mul_ps(e, vd));
    }
    *inv = 1.0f / hsum_tree(part);
    const float vm = _mm512_reduce_max_ps(vdmax); /* >= +0, no NaN: the order is free */
    *pd = vm / 32767.0f;
    const __m512 ipd = _mm512_set1_ps(*pd >= FLT_MIN ? 1.0f / *pd : 0.0f);
    /* levels in place as weights_rows lays them out: the lo and hi bytes of
     * keys j.. (in the order j, j+2, j+1, j+3) at P[j / 2] and P[j / 2 + 1] */
    int32_t *P = (int32_t *)S;
    __m512i sign = _mm512_setzero_si512();
    for (int j = jmin; j < ((n + 3) & ~3); j += 16) {
        const __mmask16 in = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(S + j), ipd);
        const __m512 vc = _mm512_max_ps(_mm512_min_ps(v, top), bottom);
        const __m512i p = _mm512_maskz_cvtps_epi32(in & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), vc);
        sign = _mm512_or_si512(sign, p);
        const __m128i lo = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(p), order);
        const __m128i hi = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(_mm512_srai_epi32(p, 8)), order);
        _mm_storeu_si128((__m128i *)(P + j / 2), _mm_unpacklo_epi32(lo, hi)); /* to P[j / 2 + 7] < j: behind */
        _mm_storeu_si128((__m128i *)(P + j / 2 + 4), _mm_unpackhi_epi32(lo, hi));
    }
    return sign;
}

/* P.V of every row over dims [da, db) (multiples of 16), values staged once
 * a tile for all the rows (or read from the decode layout where it holds
 * the tile), and those dims of the outputs. */
static void decode_outputs(q8_unit *x, const float *pd, const float *inv, int da, int db) {
    const kvs_attn_call *c = x->u.c;
    const int D = x->u.D, JT = kvs_attn_q8_tile_keys(D), rows = x->u.rows, jmin = x->u.jmin;
    const int jstart = jmin / PV_BLOCK * PV_BLOCK;
    int32_t *stage = (int32_t *)(x->u.stage + (size_t)3 * 16 * 256);
    const int maxall = unit_maxn(&x->u);
    const int far = decode_far(x); /* the values from DRAM */
    /* groups from one a prefetch reaches to the one it fetches: DECODE_PREFETCH_BYTES of the layout's values */
    const int pf_groups = DECODE_PREFETCH_BYTES / (4 * D) > 0 ? DECODE_PREFETCH_BYTES / (4 * D) : 1;
    /* heads of 64-dim parts, units of whole or half parts: the values in
     * lanes order, [da, db) being positions (values4_lanes), a half part the
     * position vectors i = 0, 1 or 2, 3 of it */
    const int lanes = D % 64 == 0 && da % 32 == 0 && db % 32 == 0;
    float o[8][KVS_ATTN_Q8_MAX_DIM];
    int32_t oi[4][KVS_ATTN_Q8_MAX_DIM]; /* a PV block's integer sums, rows of one token */
    for (int r = 0; r < rows; r++) memset(o[r] + da, 0, (size_t)(db - da) * sizeof(float));
    for (int j0 = jstart; j0 < maxall; j0 += JT) {
        const int ja = j0 > jmin ? j0 : jmin;
        const int jb = ((j0 + JT < maxall ? j0 + JT : maxall) + 3) & ~3;
        /* keys [ja, ls) read from the layout where it holds them (in lanes
         * order), the rest staged: only the slots past the layout's end */
        const int ls = lanes && ja >= x->l0 && ja < x->ln ? (x->ln < jb ? x->ln : jb) : ja;
        if (ls < jb) {
            if (lanes) values4_lanes(x->V, x->rb, c->n_ctx, D, ls, jb - ls, da, db, stage);
            else stage_values4(x, ls, jb - ls, da, db, stage);
        }
        for (int r0 = 0, r1; r0 < rows; r0 = r1) { /* rows of one token (the same n), up to 4 at a time */
            for (r1 = r0 + 1; r1 < rows && r1 - r0 < 4 && x->u.n[r1] == x->u.n[r0];) r1++;
            const int nr = r1 - r0, n4 = (x->u.n[r0] + 3) & ~3, hi = n4 < jb ? n4 : jb;
            const int32_t *P[4];
            for (int r = 0; r < nr; r++) P[r] = (const int32_t *)(x->u.S + (size_t)(r0 + r) * x->u.ctxs);
            for (int b0 = ja, b1; b0 < hi; b0 = b1) {
                b1 = kvs_attn_q8_block_end(b0, hi);
                /* the block's integer sums over its passes, then one float add */
                for (int r = 0; r < nr; r++) memset(oi[r] + da, 0, (size_t)(db - da) * sizeof(int32_t));
                for (int s0 = b0, s1; s0 < b1; s0 = s1) {
                    s1 = (s0 / DECODE_PV_KEYS + 1) * DECODE_PV_KEYS;
                    if (s1 > b1) s1 = b1;
                    const int g0 = s0 / 4, g1 = s1 / 4;
                    const pv_values t = {.v4 = ls > s0 ? x->lv + (size_t)g0 * D : NULL,
                                         .v4s = stage + (size_t)(((s0 > ls ? s0 : ls) - ls) / 4) * D,
                                         .gs = ls > s0 ? (ls - s0) / 4 : 0};
                    /* the groups some row needs, here and, where pv_rows prefetches (from the
                     * layout), where the prefetches reach (up to the token's last key: its
                     * weights are written that far) */
                    pv_groups gr = {.ahead = 0};
                    group_words(P, nr, g0, g1 - g0, &gr.lo, &gr.hi);
                    if (nr > 1) {
                        const int ga = g0 + pf_groups, na = n4 / 4 - ga < g1 - g0 ? n4 / 4 - ga : g1 - g0;
                        uint32_t ahead_hi;
                        if (t.gs && na > 0) group_words(P, nr, ga, na, &gr.ahead, &ahead_hi);
                        gr.nl = group_list(gr.lo, 0, gr.live);
                    }
                    /* the first dims' pass prefetches the call's dims of the groups ahead where the
                     * values stream from the layout (past its end: the next kv head's rows, or
                     * nothing a prefetch can fault on) */
                    const char *pf = t.gs ? (const char *)(t.v4 + (size_t)pf_groups * D + da) : NULL;
                    const int npf = (db - da) / 16;
                    if (nr == 1) {
                        for (int d0 = da; d0 < db; d0 += 128, pf = NULL) {
                            const int nv = (db - d0) / 16 < 8 ? (db - d0) / 16 : 8;
                            const pv_values td = pv_values_dims(t, d0);
                            int32_t *od = oi[0] + d0;
                            switch (nv) { /* constant counts: sums in registers */
                            case 4: pv_decode_dims(P[0], td, D, g0, g1, gr.hi, 4, pf, npf, od); break;
                            case 8: pv_decode_dims(P[0], td, D, g0, g1, gr.hi, 8, pf, npf, od); break;
                            default: pv_decode_dims(P[0], td, D, g0, g1, gr.hi, nv, pf, npf, od); break;
                            }
                        }
                        continue;
                    }
                    for (int d0 = da; d0 < db; d0 += 64, pf = NULL) {
                        int32_t *od[4];
                        for (int r = 0; r < nr; r++) od[r] = oi[r] + d0;
                        const int nv = (db - d0) / 16 < 4 ? (db - d0) / 16 : 4;
                        pv_rows_n(nr, nv, P, pv_values_dims(t, d0), D, g0, g1, &gr, pf, npf, far, od);
                    }
                }
                for (int r = 0; r < nr; r++)
                    for (int d = da; d < db; d += 16)
                        _mm512_storeu_ps(o[r0 + r] + d, _mm512_add_ps(_mm512_loadu_ps(o[r0 + r] + d),
                                                                     _mm512_cvtepi32_ps(_mm512_loadu_si512(oi[r] + d))));
            }
        }
    }
    /* out = (o * pd) * (1 / S), positions back to dims: a whole part by
     * lanes_transpose4 (its own inverse), a half part's vector i by its
     * 128-bit lanes L (dims 16 L + 4 i ..) */
    for (int r = 0; r < rows; r++) {
        float *out = c->out + ((size_t)(x->u.t0 + r / x->u.group) * c->n_head + (size_t)x->u.g * x->u.group +
                               r % x->u.group) * D;
        const __m512 pdr = _mm512_set1_ps(pd[r]), invr = _mm512_set1_ps(inv[r]);
        if (!lanes) {
            for (int d = da; d < db; d += 16)
                _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o[r] + d), pdr), invr));
            continue;
        }
        for (int d = da & ~63; d < db; d += 64) {
            const int i0 = da > d ? (da - d) / 16 : 0, i1 = db < d + 64 ? (db - d) / 16 : 4;
            __m512 t[4];
            for (int i = i0; i < i1; i++) t[i] = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o[r] + d + 16 * i), pdr), invr);
            if (i0 == 0 && i1 == 4) {
                __m512i w[4];
                lanes_transpose4(_mm512_castps_si512(t[0]), _mm512_castps_si512(t[1]), _mm512_castps_si512(t[2]),
                                 _mm512_castps_si512(t[3]), w);
                for (int i = 0; i < 4; i++) _mm512_storeu_si512(out + d + 16 * i, w[i]);
                continue;
            }
            for (int i = i0; i < i1; i++) {
                _mm_storeu_ps(out + d + 4 * i, _mm512_castps512_ps128(t[i]));
                _mm_storeu_ps(out + d + 16 + 4 * i, _mm512_extractf32x4_ps(t[i], 1));
                _mm_storeu_ps(out + d + 32 + 4 * i, _mm512_extractf32x4_ps(t[i], 2));
                _mm_storeu_ps(out + d + 48 + 4 * i, _mm512_extractf32x4_ps(t[i], 3));
            }
        }
    }
}

/* The decode layout for units of fewer than 8 rows (the float path's
 * choice too): scores lane = key, P.V lane = dim (the row's hi and lo
 * weight words of 4 keys broadcast against the staged 4-key value words), so
 * no lane idles. 0, or 1 when a weight level came out negative (the caller
 * reruns the unit on the AVX2 path). */
int kvs_attention_decode_unit_q8_avx512(q8_unit *x) {
    const int rows = x->u.rows;
    decode_rows dr;
    float pd[8], inv[8];
    const int maxall = unit_maxn(&x->u);
    decode_queries(x, &dr);
    /* the keys' and values' scales in score rows the decode layout leaves
     * free (it uses fewer than 8 of KVS_ATTN_ROWS) */
    float *kds = x->u.S + (size_t)(KVS_ATTN_ROWS - 2) * x->u.ctxs, *vds = kds + x->u.ctxs;
    decode_scales(x, x->u.jmin, maxall, kds, vds);
    decode_scores_t(x, rows, &dr, scales_of(x, x->lkd, kds), x->u.jmin, maxall);
    __m512i sign = _mm512_setzero_si512();
    for (int r = 0; r < rows; r++) /* no lane of mx is NaN: the order is free */
        sign = _mm512_or_si512(sign, decode_weights_row(x, r, _mm512_reduce_max_ps(dr.mx[r]), scales_of(x, x->lvd, vds),
                                                        &pd[r], &inv[r]));
    if (_mm512_movepi32_mask(sign)) return 1; /* a negative value scale: no unsigned hi bytes */
    decode_outputs(x, pd, inv, 0, x->u.D);
    return 0;
}

/* ------------------------------------- one decode token split across threads
 *
 * kvs_isa's attention_split_*_q8, where the (token, kv head) units would
 * leave threads idle (SmolLM2's 3 kv heads on 2 threads: 2 : 1; gemma3's
 * one). As the float path's split (attention_avx512_decode.c), three phases
 * over kvs_attention_decode_unit_q8_avx512's passes, so the same bits:
 *  0. scores, units (kv head, a range of keys): each key's score is its own
 *     integer dot; the keys' and values' scales gathered for the range;
 *  1. weights, units heads: the row's maxima recomputed lane by lane over
 *     its key blocks in ascending order, as decode_scores_t took them, then
 *     decode_weights_row (its partial sums are chains over the keys);
 *  2. outputs, units kv heads (those the threads share evenly), then (kv
 *     head, Q8_SPLIT_DIMS dims) for the rest.
 * Shared, in thread 0's score rows (c->work): head h's scores and levels at
 * row h, its pd, 1 / S and negative-level flag in the row's last 3 floats
 * (past every key's 16 lanes), kv head g's key and value scales at rows
 * n_head + 2 g and + 1. A negative level (a damaged cache's negative value
 * scale) makes phase 2 report -1: the call then runs its units, which rerun
 * such heads on AVX2. */

#define Q8_SPLIT_DIMS 32 /* head_dim a multiple of this */
/* Dims per unit of phase 2: each unit stages the 64-dim parts of the values
 * it reads, so 64 where a head has several (gemma3's 256: with 32, its 8
 * units each staged every value, and the split took 1.55x the time of the
 * unsplit call on 2 threads), 32 where it has one (SmolLM2's 64: two units
 * each read their half of the decode layout's lane order, or stage the part
 * twice where the layout does not hold the tile). */
static int q8_split_dims(int D) { return D % 64 == 0 && D >= 128 ? 64 : Q8_SPLIT_DIMS; }

/* The decode layout only (kvs_attention_decode_unit_q8_avx512), no recalibrated row (those take
 * the AVX2 unit), and room in thread 0's score rows for the heads' rows and
 * the kv heads' scales. */
static int q8_split_suits(const kvs_attn_call *c) {
    const int D = c->head_dim, group = c->n_head / c->n_kv_head;
    return c->m == 1 && kvs_attn_q8_simd_shape(D, group) && group < KVS_ATTN_Q8_PREFILL_ROWS &&
           D % Q8_SPLIT_DIMS == 0 && c->n_head + 2 * c->n_kv_head <= KVS_ATTN_ROWS &&
           !kvs_attn_recal_row(c, c->pos[0]);
}

/* Kv head g's decode unit of the split. */
static void q8_split_init(q8_unit *x, const kvs_attn_call *c, int g, float *work) {
    split_unit_init(&x->u, c, g, work);
    q8_unit_rows(x, c, g);
    x->nrb = 1;
}

/* Kv head g's key scales (its value scales one score row further). */
static float *q8_split_scales(const kvs_attn_call *c, int g) {
    return c->work + (size_t)(c->n_head + 2 * g) * kvs_attn_score_stride(c->n_ctx);
}

/* Phase 0's keys per unit and units per kv head; *maxn: the rows' largest
 * n, where the scores end. */
static int q8_split_key_units(const q8_unit *x, int *keys_per_unit, int *maxn) {
    *maxn = unit_maxn(&x->u);
    return split_key_units(x->u.c, *maxn - x->u.jmin, x->rb, keys_per_unit);
}

int kvs_attention_split_units_q8_avx512(const kvs_attn_call *c, int phase) {
    if (!q8_split_suits(c)) return 0;
    if (phase == 1) return c->n_head;
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    if (phase == 2) {
        for (int h = 0; h < c->n_head; h++)
            if (c->work[(size_t)h * ctxs + ctxs - 3] != 0.0f) return -1;
        const int whole = split_whole_heads(c);
        return whole + (c->n_kv_head - whole) * (c->head_dim / q8_split_dims(c->head_dim));
    }
    q8_unit x;
    int kpu, maxn;
    q8_split_init(&x, c, 0, c->work);
    return c->n_kv_head * q8_split_key_units(&x, &kpu, &maxn);
}

void kvs_attention_split_unit_q8_avx512(const kvs_attn_call *c, int phase, int un, float *work) {
    if (!q8_split_suits(c)) return;
    const int group = c->n_head / c->n_kv_head;
    q8_unit x;
    if (phase == 0) {
        int kpu, maxn;
        q8_split_init(&x, c, 0, work);
        const int per_g = q8_split_key_units(&x, &kpu, &maxn), g = un / per_g;
        q8_split_init(&x, c, g, work);
        const int ja = x.u.jmin + (un % per_g) * kpu, jb = ja + kpu < maxn ? ja + kpu : maxn;
        decode_rows dr;
        decode_queries(&x, &dr);
        float *kds = q8_split_scales(c, g);
        decode_scales(&x, ja, jb, kds, kds + x.u.ctxs);
        decode_scores_t(&x, group, &dr, scales_of(&x, x.lkd, kds), ja, jb);
        return;
    }
    if (phase == 1) { /* row un (head un) */
        const int g = un / group, r = un % group;
        q8_split_init(&x, c, g, work);
        float *row = x.u.S + (size_t)r * x.u.ctxs, pd, inv;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int j = x.u.jmin, maxn = unit_maxn(&x.u); j < maxn; j += 16) mx = _mm512_max_ps(_mm512_loadu_ps(row + j), mx);
        const __m512i sign = decode_weights_row(&x, r, _mm512_reduce_max_ps(mx),
                                                scales_of(&x, x.lvd, q8_split_scales(c, g) + x.u.ctxs), &pd, &inv);
        row[x.u.ctxs - 1] = inv;
        row[x.u.ctxs - 2] = pd;
        row[x.u.ctxs - 3] = _mm512_movepi32_mask(sign) ? 1.0f : 0.0f;
        return;
    }
    const int whole = split_whole_heads(c), dims = q8_split_dims(c->head_dim), per_g = c->head_dim / dims;
    const int g = un < whole ? un : whole + (un - whole) / per_g;
    const int da = un < whole ? 0 : (un - whole) % per_g * dims;
    const int db = un < whole ? c->head_dim : da + dims;
    q8_split_init(&x, c, g, work);
    float pd[8], inv[8];
    for (int r = 0; r < group; r++) {
        inv[r] = x.u.S[(size_t)r * x.u.ctxs + x.u.ctxs - 1];
        pd[r] = x.u.S[(size_t)r * x.u.ctxs + x.u.ctxs - 2];
    }
    decode_outputs(&x, pd, inv, da, db);
}

/* The kvs_isa hook: slots [from, to) of every kv head's decode layout
 * (kernels.h), as the decode would transpose and stage them. */
void kvs_attention_layout_q8_avx512(const void *k, const void *v, int n_kv_head, int D, int n_ctx, int from, int to,
                                    void *data) {
    const size_t rb = kvs_kv_row_bytes(KVS_KV_Q8, D);
    for (int g = 0; g < n_kv_head; g++) {
        const int8_t *K = (const int8_t *)k + (size_t)g * n_ctx * rb, *V = (const int8_t *)v + (size_t)g * n_ctx * rb;
        const layout_head l = layout_head_at(data, D, n_ctx, g);
        for (int j = from; j < to; j += 16) key_tile16(K, rb, n_ctx, D, j, l.k + (size_t)(j / 16) * (D / 4));
        row_scales(K, V, rb, D, from, to, l.kd, l.vd);
        values4_lanes(V, rb, n_ctx, D, from, to - from, 0, D, l.v + (size_t)(from / 4) * D);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif