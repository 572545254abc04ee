/*
 * AVX2 attention on Q8 KV rows: the arithmetic of attention_q8_ref.c, bit
 * for bit, for CPUs without AVX-512, and for recalibrated (APE) rows on
 * AVX-512 ones (attention_q8_avx512.c hands those units over, as the float
 * path does). Lane = query row in blocks of RB = 8 rows, as the float AVX2
 * kernel (attention_avx2.c); units of at most DEC_ROWS rows (decode) put
 * keys, then dims, in lanes instead (attention_q8_avx2_decode.c). AVX2 has no
 * VNNI, and vpmaddubsw's pair sums saturate, so the dot products are
 * vpmaddwd on 16-bit pairs (exact):
 *
 *   scores  Qt[b][d/2] lane l = (q8[d], q8[d+1]) of row 8b + l as int16;
 *           the staged keys K2[j][d/2] = (k_j[d], k_j[d+1]) (a row widened
 *           to int16); vpmaddwd(Qt, bcast K2) summed by vpaddd: I_j.
 *   softmax kvs_exp_q8_ref in 8 lanes (kvs_exp8_q8), partials j % 16, the
 *           recalibration of attention_avx2.h; w = e vd, their levels.
 *   P.V     P2[j/2] lane l = (p_j, p_j+1) of row l, written over the
 *           weights; V2[(j - j0)/2][d] = (v_j[d], v_j+1[d]); vpmaddwd(P2,
 *           bcast V2) summed in int32 per KVS_ATTN_Q8_PV_BLOCK absolute
 *           slots, then one float add per block.
 *
 * Two row blocks share each broadcast, 4 keys (scores) or 4 dims (P.V) a
 * register pass: 8 accumulators and their operands in AVX2's 16 registers.
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

#define GB 2 /* row blocks per register pass */
#define NJ 4 /* keys or dims per register pass */
#define QT_STRIDE (NB_MAX * RB) /* int32 of Qt per query word: (D / 2, NB_MAX, RB) */

/* Keys [j0, j0 + nk) widened to int16 (the int32 word d/2 of a key is the
 * pair (k[d], k[d+1])), in groups of NJ = 4 keys interleaved by word:
 * group g's word w of key jj at kv2[(g D/2 + w) 4 + jj], so the score pass
 * broadcasts the 4 keys' words from one pointer (4 key pointers ran GCC out
 * of registers). Keys past nk stage as 0 (their scores are not stored). */
static void stage_keys(const q8_unit2 *x, int j0, int nk) {
    const int D = x->D;
    for (int j = 0; j < nk; j += NJ) {
        __m256i *out = (__m256i *)(x->kv2 + (size_t)j * (D / 2));
        for (int d = 0; d < D; d += 16, out += 4) {
            __m256i k[NJ];
            for (int jj = 0; jj < NJ; jj++)
                k[jj] = j + jj < nk ? widen16(x->K + (size_t)(j0 + j + jj) * x->rb + d) : _mm256_setzero_si256();
            /* u_i 128-bit lane L = word 4L + i of keys 0..3 */
            const __m256i t0 = _mm256_unpacklo_epi32(k[0], k[1]), t1 = _mm256_unpackhi_epi32(k[0], k[1]);
            const __m256i t2 = _mm256_unpacklo_epi32(k[2], k[3]), t3 = _mm256_unpackhi_epi32(k[2], k[3]);
            const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
            const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
            _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(u0, u1, 0x20)); /* words 0, 1 */
            _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u2, u3, 0x20)); /* 2, 3 */
            _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u0, u1, 0x31)); /* 4, 5 */
            _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u2, u3, 0x31)); /* 6, 7 */
        }
    }
}

/* Pairs a 16-dim group of the staged value pairs holds: a tile's. */
#define V2_PAIRS (PV_BLOCK / 2)

/* The staged word of value pair p (keys j0 + 2p, j0 + 2p + 1), dim d: in
 * groups of 16 dims, each group's pairs one run (V2_PAIRS x 16 words), so
 * a P.V pass over a block's pairs for some dims of a group reads
 * consecutive lines. Rows of D words (before) put a pass's 256 lines at
 * D = 64 into a quarter of the L1's sets, 16 a set where 8-12 ways hold:
 * P.V blocks of 512 keys ran 1.02-1.03x slower than blocks of 128. */
AI int32_t *v2_at(const q8_unit2 *x, int p, int d) {
    return x->kv2 + ((size_t)(d / 16) * V2_PAIRS + (size_t)p) * 16 + d % 16;
}

/* Values of key pairs from j0 (even) to j0 + nk (at most a tile): pair
 * p's word of dim d (v2_at) = v_j[d] | v_j+1[d] << 16, j = j0 + 2p. A key
 * past the buffer (n_ctx odd) reads as 0. The 64-bit lanes are reordered
 * first so that the in-lane unpacks give dims d .. d + 7, then d + 8 ..
 * d + 15. */
static void stage_values(const q8_unit2 *x, int j0, int nk) {
    const int D = x->D, n_ctx = x->c->n_ctx;
    for (int j = 0; j < nk; j += 2) {
        const int8_t *va = x->V + (size_t)(j0 + j) * x->rb;
        const int8_t *vb = j0 + j + 1 < n_ctx ? va + x->rb : NULL;
        for (int d = 0; d < D; d += 16) {
            int32_t *out = v2_at(x, j / 2, d);
            const __m256i a = _mm256_permute4x64_epi64(widen16(va + d), 0xd8);
            const __m256i b = vb ? _mm256_permute4x64_epi64(widen16(vb + d), 0xd8) : _mm256_setzero_si256();
            _mm256_storeu_si256((__m256i *)out, _mm256_unpacklo_epi16(a, b));
            _mm256_storeu_si256((__m256i *)(out + 8), _mm256_unpackhi_epi16(a, b));
        }
    }
}

/* Score of key jabs for block b from its int32 dot sum: scaled, masked,
 * recalibrated, maxed, stored. */
AI void store_score(q8_unit2 *x, int b, int jabs, __m256i isum) {
    const kvs_attn_call *c = x->c;
    const __m256 kd = _mm256_set1_ps(kvs_q8_row_scale(x->K + (size_t)jabs * x->rb, x->D));
    __m256 s = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum), kd), x->qs[b]);
    if (x->any_rc[b] && jabs >= c->recal.lo && jabs < c->recal.hi)
        s = _mm256_blendv_ps(s, _mm256_mul_ps(s, _mm256_set1_ps(c->recal.inv_t)), x->rcm[b]);
    __m256 v = s; /* most keys of a long context: no mask (1.03-1.08x the attention after 4096 keys) */
    if (jabs < x->all_lo[b] || jabs >= x->all_hi[b]) {
        const __m256i jv = _mm256_set1_epi32(jabs);
        const __m256i live =
            _mm256_andnot_si256(_mm256_cmpgt_epi32(x->lovec[b], jv), _mm256_cmpgt_epi32(x->nvec[b], jv));
        v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, _mm256_castsi256_ps(live));
    }
    x->mx[b] = _mm256_max_ps(v, x->mx[b]); /* a NaN score leaves the max, as the reference's s > mx */
    _mm256_storeu_ps(x->S + ((size_t)b * x->ctxs + (size_t)jabs) * RB, v);
}

/* Scores of the staged keys [j0, j0 + nk) for blocks b0 .. b0 + nb - 1. */
AI void score_pass(q8_unit2 *x, int b0, int nb, int j0, int nk) {
    const int D2 = x->D / 2;
    for (int j = 0; j < nk; j += NJ) {
        __m256i acc[GB][NJ];
#pragma GCC unroll 2
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
            for (int jj = 0; jj < NJ; jj++) acc[b][jj] = _mm256_setzero_si256();
        const int32_t *kw = x->kv2 + (size_t)j * D2, *qt = x->Qt + (size_t)b0 * RB;
        for (int d2 = 0; d2 < D2; d2++, kw += NJ, qt += QT_STRIDE) {
            __m256i q[GB];
#pragma GCC unroll 2
            for (int b = 0; b < nb; b++) {
                q[b] = _mm256_loadu_si256((const __m256i *)(qt + b * RB));
                /* in a register: GCC folded the load into each of the 4
                 * keys' vpmaddwd, 12 loads for 8 multiplies (folded, one
                 * layer's attention after 4096 keys ran 1.05-1.08x slower) */
                __asm__("" : "+x"(q[b]));
            }
#pragma GCC unroll 4
            for (int jj = 0; jj < NJ; jj++) {
                const __m256i k = _mm256_set1_epi32(kw[jj]);
#pragma GCC unroll 2
                for (int b = 0; b < nb; b++) acc[b][jj] = _mm256_add_epi32(acc[b][jj], _mm256_madd_epi16(q[b], k));
            }
        }
#pragma GCC unroll 2
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
            for (int jj = 0; jj < NJ; jj++)
                if (j + jj < nk) store_score(x, b0 + b, j0 + j + jj, acc[b][jj]);
    }
}

/* The 16-bit levels of weights w (lane = row) at the rows' 1 / pd: as
 * kvs_level_of, clamped to +-32767, NaN 0 (this path is the reference's
 * match for damaged caches too). */
AI __m256i level8(__m256 w, __m256 ipd) {
    const __m256 v = _mm256_mul_ps(w, ipd);
    const __m256 vc = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(32767.0f)), _mm256_set1_ps(-32767.0f));
    return _mm256_and_si256(_mm256_cvtps_epi32(vc), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
}

/* Levels a (key j, even) and b (key j + 1) as the int16 pair words P2[j/2]
 * over the block's rows: behind every read (j / 2 < j, or the pair just read). */
AI void store_pair(float *Sb, int j, __m256i a, __m256i b) {
    const __m256i pair = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(b, 16));
    _mm256_storeu_si256((__m256i *)(Sb + (size_t)(j / 2) * RB), pair);
}

/* The rows' pd = top / 32767 into x->pd[b]; returns 1 / pd (0 where pd is
 * below FLT_MIN). */
static __m256 weights_scale(q8_unit2 *x, int b, __m256 top) {
    const __m256 pd = _mm256_div_ps(top, _mm256_set1_ps(32767.0f));
    x->pd[b] = pd;
    return _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), pd), _mm256_cmp_ps(pd, _mm256_set1_ps(FLT_MIN), _CMP_GE_OQ));
}

/* Key j's e = exp(s - mx) into the partial *P and its level (weight e vd)
 * without level8's clamp: e <= 1 and vd <= vdmax keep e vd ipd <= 32767 (1 +
 * 2^-22), which rounds to at most 32767, so only a damaged cache (a negative
 * or NaN value scale) needs it; such a level has its sign bit set (a NaN's
 * conversion gives INT_MIN), collected in x->out_of_range, and the unit is
 * then rerun on the reference. Three operations a key fewer (min, max, the
 * NaN mask's compare and and, against one or). */
AI __m256i exp_level8(q8_unit2 *x, float *Sb, int b, int j, __m256 ipd, __m256 *P) {
    const __m256 e = kvs_exp8_q8(_mm256_sub_ps(_mm256_loadu_ps(Sb + (size_t)j * RB), x->mx[b]));
    *P = _mm256_add_ps(*P, e);
    const __m256 w = _mm256_mul_ps(e, _mm256_set1_ps(kvs_q8_row_scale(x->V + (size_t)j * x->rb, x->D)));
    const __m256i p = _mm256_cvtps_epi32(_mm256_mul_ps(w, ipd));
    x->out_of_range = _mm256_or_si256(x->out_of_range, p);
    return p;
}

/* Block b's exp (partials j % 16, 1 / sum) and the 16-bit level pairs of
 * its weights w = e vd in place: P2[j/2] over S, 0 from the block's maxn to
 * maxall (even). Without a recalibrated row the bound on the weights
 * (kvs_attn_q8_weight_top: the rows' vdmax) is known before any exp, so
 * each e becomes its level in the pass that computes it; a recalibrated
 * block stores e, scales its documents' by f, and then takes the levels. */
static void weights_block(q8_unit2 *x, int b) {
    const kvs_attn_call *c = x->c;
    const int maxn = x->maxn[b], jmin = x->jmin, end = (x->maxall + 1) & ~1;
    float *Sb = x->S + (size_t)b * x->ctxs * RB;
    const __m256i zero = _mm256_setzero_si256();
    __m256 P[16];
    for (int i = 0; i < 16; i++) P[i] = _mm256_setzero_ps();
    __m256 top = _mm256_loadu_ps(x->vdmax + b * RB);
    if (!x->any_rc[b]) {
        const __m256 ipd = weights_scale(x, b, top);
        int j0 = jmin; /* a multiple of 16: partial i takes keys j0 + i */
        for (; j0 + 16 <= maxn; j0 += 16)
#pragma GCC unroll 8
            for (int i = 0; i < 16; i += 2)
                store_pair(Sb, j0 + i, exp_level8(x, Sb, b, j0 + i, ipd, &P[i]), exp_level8(x, Sb, b, j0 + i + 1, ipd, &P[i + 1]));
        for (int j = j0; j < end; j += 2) {
            const __m256i a = j < maxn ? exp_level8(x, Sb, b, j, ipd, &P[(j - j0) % 16]) : zero;
            const __m256i bl = j + 1 < maxn ? exp_level8(x, Sb, b, j + 1, ipd, &P[(j + 1 - j0) % 16]) : zero;
            store_pair(Sb, j, a, bl);
        }
        x->inv[b] = _mm256_div_ps(_mm256_set1_ps(1.0f), tree16_8(P));
        return;
    }
    for (int j0 = jmin; j0 < maxn; j0 += 16) /* jmin is a multiple of 16 */
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (j0 + i >= maxn) break;
            float *s = Sb + (size_t)(j0 + i) * RB;
            const __m256 e = kvs_exp8_q8(_mm256_sub_ps(_mm256_loadu_ps(s), x->mx[b]));
            P[i] = _mm256_add_ps(P[i], e);
            _mm256_storeu_ps(s, e);
        }
    const int d0 = c->recal.lo > jmin ? c->recal.lo : jmin, d1 = c->recal.hi < maxn ? c->recal.hi : maxn;
    __m256 f;
    const __m256 sum = recal_block(c, Sb, jmin, d0, d1, maxn, x->rcm[b], x->mx[b], tree16_8(P), &f);
    /* kvs_attn_q8_weight_top: vdmax * f where f > 1 */
    top = _mm256_blendv_ps(top, _mm256_mul_ps(top, f), _mm256_cmp_ps(f, _mm256_set1_ps(1.0f), _CMP_GT_OQ));
    x->inv[b] = _mm256_div_ps(_mm256_set1_ps(1.0f), sum);
    const __m256 ipd = weights_scale(x, b, top);
    for (int j = jmin; j < end; j += 2) {
        __m256i p[2];
        for (int h = 0; h < 2; h++) {
            const int k = j + h;
            p[h] = k < maxn ? level8(_mm256_mul_ps(_mm256_loadu_ps(Sb + (size_t)k * RB),
                                                   _mm256_set1_ps(kvs_q8_row_scale(x->V + (size_t)k * x->rb, x->D))),
                                     ipd)
                            : zero;
        }
        store_pair(Sb, j, p[0], p[1]);
    }
}

/* O += P.V for key pairs [ja, jb) (even ja, one PV block) of the staged
 * tile from j0, dims d0 .. d0 + NJ - 1, blocks b0 .. b0 + nb - 1: the
 * block's int32 sums, then one float add per output. live (NULL: every
 * pair): the pairs to take, as offsets from ja / 2 (live_pairs); a pair
 * whose levels are 0 in every lane adds 0 to the exact sums. The loop steps
 * pointers: with indices from j / 2, GCC kept an accumulator on the stack,
 * a chain through memory every pair (the pass ran 1.7x slower per
 * multiply-add than the score pass). Each level pair is loaded once into a
 * register for its 4 dims: folded into every vpmaddwd (GCC's choice), the
 * pass made 12 loads a pair for 8 multiplies, and one layer's prefill of
 * 512 tokens after 4096 keys ran 1.06-1.07x slower (random rows, every pair
 * live). */
AI void pv_pass(q8_unit2 *x, int b0, int nb, int j0, int ja, int jb, const uint16_t *live, int nlive, int d0) {
    const int D = x->D;
    __m256i acc[GB][NJ];
#pragma GCC unroll 2
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
        for (int dd = 0; dd < NJ; dd++) acc[b][dd] = _mm256_setzero_si256();
    const size_t bstride = x->ctxs * RB; /* floats from one block's P2 to the next's */
    const float *p = x->S + (size_t)b0 * bstride + (size_t)(ja / 2) * RB;
    const int32_t *v = v2_at(x, (ja - j0) / 2, d0); /* d0 .. d0 + 3: one group; pairs 16 words apart */
#define PV_PAIR(pp, vv)                                                                                            \
    do {                                                                                                           \
        __m256i pw[GB];                                                                                            \
        _Pragma("GCC unroll 2") for (int b = 0; b < nb; b++) {                                                     \
            pw[b] = _mm256_loadu_si256((const __m256i *)((pp) + b * bstride));                                     \
            __asm__("" : "+x"(pw[b])); /* in a register: GCC folds the load into each dim's vpmaddwd */            \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int dd = 0; dd < NJ; dd++) {                                                  \
            const __m256i vb = _mm256_set1_epi32((vv)[dd]);                                                       \
            _Pragma("GCC unroll 2") for (int b = 0; b < nb; b++) acc[b][dd] =                                      \
                _mm256_add_epi32(acc[b][dd], _mm256_madd_epi16(pw[b], vb));                                        \
        }                                                                                                          \
    } while (0)
    if (!live)
        for (int n = (jb - ja + 1) / 2; n > 0; n--, p += RB, v += 16) PV_PAIR(p, v);
    else /* by index (stepping from one listed pair to the next measured the same:
          * in-process A/B, one layer's prefill after 4096 keys, peaked rows) */
        for (int n = 0; n < nlive; n++) PV_PAIR(p + (size_t)live[n] * RB, v + (size_t)live[n] * 16);
#undef PV_PAIR
#pragma GCC unroll 2
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
        for (int dd = 0; dd < NJ; dd++) {
            float *o = x->O + ((size_t)(b0 + b) * D + d0 + dd) * RB;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_cvtepi32_ps(acc[b][dd])));
        }
}

/* The key pairs [ja, jb) (one PV block) whose levels are not 0 in every
 * lane of blocks b0 .. b0 + nb - 1, as offsets from ja / 2, into live;
 * returns their count. At long context many keys' weights round to level 0
 * (below half a level of top, kvs_attn_q8_weight_top) in every row of a
 * pass, and their multiply-adds add 0: SmolLM2, Q8 KV, the 512 tokens after
 * 4096, 27% of a pass's pairs are 0 in both its blocks on the GPL-3 text, 24%
 * on kvstitch bench's random tokens. */
static int live_pairs(const q8_unit2 *x, int b0, int nb, int ja, int jb, uint16_t *live) {
    const size_t bstride = x->ctxs * RB;
    const float *p = x->S + (size_t)b0 * bstride + (size_t)(ja / 2) * RB;
    int nl = 0;
    for (int k = 0; k < (jb - ja) / 2; k++, p += RB) { /* ja and jb even: pv_pass's pairs */
        __m256i w = _mm256_loadu_si256((const __m256i *)p);
        if (nb == 2) w = _mm256_or_si256(w, _mm256_loadu_si256((const __m256i *)(p + bstride)));
        live[nl] = (uint16_t)k;
        nl += !_mm256_testz_si256(w, w);
    }
    return nl;
}

/* Query rows quantized (kvs_q8_row, the reference's own) into Qt, with the
 * blocks' masks, recalibrated lanes and scales. */
static void stage_queries(q8_unit2 *x) {
    const kvs_attn_call *c = x->c;
    const int D = x->D, D2 = D / 2;
    int8_t q8[KVS_ATTN_Q8_MAX_DIM];
    int rn[NB_MAX * RB], rlo[NB_MAX * RB];
    x->maxall = 0;
    x->jmin = c->n_ctx;
    for (int b = 0; b < x->nrb; b++) {
        int *nv = rn + b * RB, *lv = rlo + b * RB, rv[RB];
        float qs[RB];
        x->maxn[b] = x->any_rc[b] = 0;
        for (int l = 0; l < RB; l++) {
            const int r = b * RB + l, t = x->t0 + r / x->group;
            int32_t *qt = x->Qt + (size_t)b * RB + l;
            if (r >= x->rows) {
                nv[l] = lv[l] = rv[l] = 0;
                qs[l] = 0.0f;
                for (int d2 = 0; d2 < D2; d2++) qt[d2 * QT_STRIDE] = 0;
                continue;
            }
            nv[l] = kvs_attn_n(c, c->pos[t]);
            lv[l] = kvs_attn_lo(c, nv[l]);
            rv[l] = kvs_attn_recal_row(c, c->pos[t]) ? -1 : 0;
            x->any_rc[b] |= rv[l];
            if (nv[l] > x->maxn[b]) x->maxn[b] = nv[l];
            if (lv[l] < x->jmin) x->jmin = lv[l];
            const float *q = c->q + ((size_t)t * c->n_head + (size_t)x->g * x->group + r % x->group) * D;
            qs[l] = kvs_q8_row(q, q8, D) * c->scale;
            for (int d2 = 0; d2 < D2; d2++)
                qt[d2 * QT_STRIDE] = level_pair(q8 + 2 * d2);
        }
        if (x->maxn[b] > x->maxall) x->maxall = x->maxn[b];
        x->all_lo[b] = 0;
        x->all_hi[b] = c->n_ctx;
        for (int l = 0; l < RB; l++) {
            if (lv[l] > x->all_lo[b]) x->all_lo[b] = lv[l];
            if (nv[l] < x->all_hi[b]) x->all_hi[b] = nv[l];
        }
        x->nvec[b] = _mm256_loadu_si256((const __m256i *)nv);
        x->lovec[b] = _mm256_loadu_si256((const __m256i *)lv);
        x->rcm[b] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)rv));
        x->qs[b] = _mm256_loadu_ps(qs);
        x->mx[b] = _mm256_set1_ps(-INFINITY);
    }
    x->jmin &= ~15;
    memset(x->vdmax, 0, sizeof x->vdmax);
    kvs_attn_q8_vd_max((const uint8_t *)(x->V + D), x->rb, rlo, rn, x->rows, x->vdmax, NULL);
}

void kvs_attention_unit_q8_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    const int group = c->n_head / c->n_kv_head, D = c->head_dim, rows = (t1 - t0) * group;
    if (!kvs_attn_q8_simd_shape(D, rows)) {
        kvs_attention_unit_q8_ref(c, t0, t1, g, work);
        return;
    }
    q8_unit2 x;
    q8_unit2_init(&x, c, t0, t1, g, work, work);
    int recal = 0;
    for (int t = t0; t < t1 && !recal; t++) recal = kvs_attn_recal_row(c, c->pos[t]);
    if (rows <= DEC_ROWS && !recal) {
        kvs_attention_decode_unit_q8_avx2(&x);
        return;
    }
    stage_queries(&x);
    const int JT = kvs_attn_q8_tile_keys(D), jstart = x.jmin / PV_BLOCK * PV_BLOCK;
    /* tiles aligned to PV blocks, the first from the unit's first key */
    for (int j0 = jstart; j0 < x.maxall; j0 += JT) {
        const int ja = j0 > x.jmin ? j0 : x.jmin, jb = j0 + JT < x.maxall ? j0 + JT : x.maxall;
        stage_keys(&x, ja, jb - ja);
        for (int b0 = 0; b0 < x.nrb; b0 += GB) {
            const int nb = x.nrb - b0 < GB ? x.nrb - b0 : GB;
            int nk = 0; /* to the pass's longest block */
            for (int b = b0; b < b0 + nb; b++) {
                const int kb = (x.maxn[b] < jb ? x.maxn[b] : jb) - ja;
                if (kb > nk) nk = kb;
            }
            if (nb == 2) score_pass(&x, b0, 2, ja, nk);
            else score_pass(&x, b0, 1, ja, nk);
        }
    }
    x.out_of_range = _mm256_setzero_si256();
    for (int b = 0; b < x.nrb; b++) weights_block(&x, b);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(x.out_of_range))) { /* a damaged cache's weights */
        kvs_attention_unit_q8_ref(c, t0, t1, g, work);
        return;
    }
    memset(x.O, 0, (size_t)x.nrb * D * RB * sizeof(float));
    for (int j0 = jstart; j0 < x.maxall; j0 += JT) {
        const int ja = j0 > x.jmin ? j0 : x.jmin;
        const int jb = kvs_attn_q8_pairs_end(j0, JT, x.maxall);
        stage_values(&x, ja, jb - ja);
        for (int p0 = ja, p1; p0 < jb; p0 = p1) {
            p1 = kvs_attn_q8_block_end(p0, jb);
            for (int b0 = 0; b0 < x.nrb; b0 += GB) {
                const int nb = x.nrb - b0 < GB ? x.nrb - b0 : GB;
                uint16_t live[PV_BLOCK / 2];
                const int nl = live_pairs(&x, b0, nb, p0, p1, live);
                if (!nl) continue; /* every sum 0: o + (+0) is o, o never being -0 (attention_q8_ref.c) */
                const uint16_t *take = nl < (p1 - p0) / 2 ? live : NULL; /* all live: every pair */
                for (int d0 = 0; d0 < D; d0 += NJ) {
                    if (nb == 2) pv_pass(&x, b0, 2, ja, p0, p1, take, nl, d0);
                    else pv_pass(&x, b0, 1, ja, p0, p1, take, nl, d0);
                }
            }
        }
    }
    /* out = (o * pd) * (1 / S), lanes back to (token, head) rows */
    for (int b = 0; b < x.nrb; b++) {
        float pd[RB], inv[RB];
        _mm256_storeu_ps(pd, x.pd[b]);
        _mm256_storeu_ps(inv, x.inv[b]);
        for (int l = 0; l < RB && b * RB + l < rows; l++) {
            const int r = b * RB + l;
            float *out = c->out + ((size_t)(t0 + r / group) * c->n_head + (size_t)g * group + r % group) * D;
            for (int d = 0; d < D; d++) out[d] = (x.O[((size_t)b * D + d) * RB + l] * pd[l]) * inv[l];
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
