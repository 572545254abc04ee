/*
 * AVX-512 VNNI attention on Q8 KV rows: the arithmetic of
 * attention_q8_ref.c, bit for bit. Layout as the float prefill
 * (attention_avx512.c): lane = query row, blocks of 16 rows, up to 3 blocks
 * (the unit's rows) sharing every broadcast key or value element.
 *
 *   scores  Qt[b][d/4] lane l = the 4 signed levels q8[d..d+3] of row 16b+l;
 *           the staged key tile holds k + 128 (the unsigned operand), so
 *           vpdpbusd(bcast 4 key bytes, Qt) sums I + 128 sum(q8), and the
 *           row's 128 sum(q8) comes off in integers: exact.
 *   weights each p_j (15 bits, >= 0) split as 256 hi + lo, both unsigned
 *           bytes; per 4 keys j.. (j a multiple of 4) lane l of PL holds the
 *           4 lo bytes of row l, PH the 4 hi bytes, in key order (j, j+2,
 *           j+1, j+3), written in place over the scores.
 *   P.V     the value tile staged per 4 keys as V4[(j - j0)/4][d] = the 4
 *           bytes v[d] of those keys in that order; vpdpbusd(acc, PH, bcast
 *           V4) over the groups where some row's PH is not 0, acc << 8, then
 *           vpdpbusd(acc, PL, bcast V4) over every group: acc = sum p_j
 *           v_j[d], exact. Most weights are below 1/128 of their row's
 *           largest (hi = 0): in a 4096-token prefill of real text, the hi
 *           bytes of a unit's 48 rows are all 0 in 53% of the 4-key groups,
 *           so P.V takes ~1.5 vpdpbusd where 16-bit pairs took 2 vpdpwssd
 *           (and with every hi byte set, what they took). The decode (lane =
 *           dim) does the same per row. The int32 sums are flushed to float
 *           per KVS_ATTN_Q8_PV_BLOCK absolute slots, tiles being aligned to
 *           them. A damaged cache's negative value scale makes p negative
 *           (no unsigned hi): such units are rerun by the AVX2 unit.
 *
 * Staging: a prefill call of several units per kv head has each head's
 * keys and values staged once for all of its units
 * (kvs_attention_stage_q8_avx512, from dispatch.c; 7 vector operations a
 * key against the score pass's 48 dots a key of a 48-row unit); otherwise
 * each unit stages its tiles itself.
 *
 * Units with recalibrated rows take the AVX2 Q8 unit (rare: a RAG request's
 * question and output after moved documents).
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

#define QK_KEYS 4 /* keys per register pass of the scores: 3 blocks x 4 accumulators */
#ifndef PV_DIMS
#define PV_DIMS 4 /* output dims per register pass (3 blocks x 8 made GCC spill) */
#endif

/* 32-bit words (4 levels) a staged key group holds per key: D rounded up
 * to 64 bytes, over 4. */
static int key_words(int D) { return (D + 63) / 64 * 16; }

/* Keys [j0, j0 + nk) with 128 added to every level, in groups of QK_KEYS = 4
 * keys interleaved by 4-byte word: group g's word w of key jj at
 * kst[(g * key_words(D) + w) * 4 + jj] (32-bit units), so the score pass
 * broadcasts all 4 keys' words from one pointer (indexing 4 key rows and
 * the query blocks apart ran out of registers and spilled). Each 64 bytes of
 * 4 keys: a 4 x 16 word transpose. Keys past nk (and dims past D) stage as
 * 0x80: their query words are 0 or their scores are never stored. */
static void stage_keys(const q8_unit *x, int j0, int nk, uint8_t *kst) {
    const int D = x->u.D, kw = key_words(D);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int j = 0; j < nk; j += QK_KEYS) {
        __m512i *out = (__m512i *)(kst + (size_t)(j / QK_KEYS) * kw * 4 * QK_KEYS);
        for (int d = 0; d < D; d += 64, out += 4) {
            const __mmask64 m = D - d >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (D - d)) - 1;
            __m512i k[QK_KEYS];
#pragma GCC unroll 4
            for (int jj = 0; jj < QK_KEYS; jj++)
                k[jj] = _mm512_xor_si512(j + jj < nk ? _mm512_maskz_loadu_epi8(m, x->K + (size_t)(j0 + j + jj) * x->rb + d)
                                                     : _mm512_setzero_si512(),
                                         bias);
            /* u_i lane L = word 4L + i of keys 0..3; then lanes regrouped */
            const __m512i t0 = _mm512_unpacklo_epi32(k[0], k[1]), t1 = _mm512_unpackhi_epi32(k[0], k[1]);
            const __m512i t2 = _mm512_unpacklo_epi32(k[2], k[3]), t3 = _mm512_unpackhi_epi32(k[2], k[3]);
            const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
            const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
            __m512i w[4];
            lanes_transpose4(u0, u1, u2, u3, w); /* w[i]: words 4i..4i+3 */
            for (int i = 0; i < 4; i++) _mm512_storeu_si512(out + i, w[i]);
        }
    }
}

/* Slot j's group (j - staged_lo a multiple of 4) in the call's staged keys
 * and values (kvs_attention_stage_q8_avx512). */
static uint8_t *staged_keys_at(const kvs_attn_call *c, int j) {
    return kvs_attn_q8_staged_at(c, 0) + (size_t)((j - c->staged_lo) / 4) * key_words(c->head_dim) * 4 * QK_KEYS;
}
static int32_t *staged_values_at(const kvs_attn_call *c, int j) {
    return (int32_t *)kvs_attn_q8_staged_at(c, 1) + (size_t)((j - c->staged_lo) / 4) * c->head_dim;
}

/* Scores of keys [j0, j0 + nk) (staged at kst) for the nb blocks, running
 * maxima in x->mx. As the float kernel's qk_group: QK_KEYS keys at a time,
 * each broadcast shared by the blocks. Qt: (D / 4, 3 blocks, 16 lanes). */
AI void qk_group(q8_unit *x, int nb, const int32_t *Qt, const uint8_t *kst, int j0, int nk) {
    const int D = x->u.D, D4 = D / 4, kw = key_words(D);
    for (int j = 0; j < nk; j += QK_KEYS) {
        const int n8 = nk - j < QK_KEYS ? nk - j : QK_KEYS;
        const int32_t *kg = (const int32_t *)kst + (size_t)(j / QK_KEYS) * kw * QK_KEYS, *qt = Qt;
        __m512i acc[3][QK_KEYS];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 4
            for (int jj = 0; jj < QK_KEYS; jj++) acc[b][jj] = _mm512_setzero_si512();
        for (int d4 = 0; d4 < D4; d4++, kg += QK_KEYS, qt += 3 * 16) {
            __m512i qv[3];
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) qv[b] = _mm512_loadu_si512(qt + 16 * b);
#pragma GCC unroll 4
            for (int jj = 0; jj < QK_KEYS; jj++) {
                const __m512i k = _mm512_set1_epi32(kg[jj]);
#pragma GCC unroll 3
                for (int b = 0; b < nb; b++) acc[b][jj] = dpbusd(acc[b][jj], k, qv[b]);
            }
        }
#pragma GCC unroll 8
        for (int jj = 0; jj < QK_KEYS; jj++) {
            if (jj >= n8) break; /* constant indices into acc: it stays in registers */
            const int jabs = j0 + j + jj;
            const __m512 kd = _mm512_set1_ps(q8_key_scale(x, jabs));
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) score_out(x, &x->mx[b], b, jabs, _mm512_sub_epi32(acc[b][jj], x->qoff[b]), kd, 1);
        }
    }
}

static void qk_blocks(q8_unit *x, const int32_t *Qt, const uint8_t *kst, int j0, int nk) {
    switch (x->nrb) {
    case 1: qk_group(x, 1, Qt, kst, j0, nk); break;
    case 2: qk_group(x, 2, Qt, kst, j0, nk); break;
    default: qk_group(x, 3, Qt, kst, j0, nk); break;
    }
}

/* Keys j..j + 3 (j a multiple of 4) of a row block: e_j = exp(s_j - mx)
 * added to their partials P4[0..3], their levels round((e_j vd_j) ipd)
 * as byte words over S (the scores of j..j+3 read first): the lo word at S
 * + 16 (j / 2), the hi word 16 floats on; keys from j + live on weigh 0
 * (live may be <= 0). Returns sign with the levels' bits or'ed in.
 * No clamp: e_j <= 1 (kvs_exp_q8_poly <= 2 on [0, 1], so 2^y <= 1 for
 * y <= 0) and vd_j <= vdmax, so a healthy (w_j ipd) <= 32767 (1 + 2^-22)
 * rounds to at most 32767, where the reference's clamp changes nothing; a
 * negative level (a negative value scale) and the 0x80000000 of a NaN (a
 * NaN score: exp16_q8 passes it on) or of |v| >= 2^31 (an infinite scale)
 * set the sign, and such a unit is rerun on the AVX2 path, which clamps and
 * zeroes as the reference. mx: the block's maxima, -inf replaced by 0 (a
 * lane that sees no key, or only -inf scores: s - mx = -inf, e = 0, as the
 * reference's exp of -inf - -inf (NaN) gives; here NaN would rerun it). */
AI __m512i exp_levels4(const q8_unit *x, float *S, int j, int live, __m512 mx, __m512 ipd, __m512 *P4, __m512i sign) {
    __m512i p[4];
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++) {
        if (h >= live) {
            p[h] = _mm512_setzero_si512();
            continue;
        }
        const __m512 e = exp16_q8(_mm512_sub_ps(_mm512_loadu_ps(S + (size_t)(j + h) * 16), mx));
        P4[h] = _mm512_add_ps(P4[h], e);
        const __m512 w = _mm512_mul_ps(e, _mm512_set1_ps(q8_value_scale(x, j + h)));
        p[h] = _mm512_cvtps_epi32(_mm512_mul_ps(w, ipd));
    }
    sign = _mm512_ternarylogic_epi32(sign, p[0], p[1], 0xfe); /* a | b | c */
    sign = _mm512_ternarylogic_epi32(sign, p[2], p[3], 0xfe);
    /* int16 pairs (p_j, p_j+1), (p_j+2, p_j+3) (levels in [0, 32767]: a
     * negative one reruns the unit anyway); then their low bytes (lo) and
     * high bytes (hi), 4 a lane in the order j, j+2, j+1, j+3 */
    const __m512i bytes02 = _mm512_set1_epi32(0x00ff00ff);
    const __m512i t01 = _mm512_or_si512(p[0], _mm512_slli_epi32(p[1], 16));
    const __m512i t23 = _mm512_or_si512(p[2], _mm512_slli_epi32(p[3], 16));
    const __m512i lo = _mm512_ternarylogic_epi32(t01, _mm512_slli_epi32(t23, 8), bytes02, 0xe4); /* c ? a : b */
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(t01, 8), t23, bytes02, 0xe4);
    const size_t half = (size_t)j / 2; /* behind the scores read: j / 2 + 1 < j + 4 */
    _mm512_storeu_si512(S + half * 16, lo);
    _mm512_storeu_si512(S + (half + 1) * 16, hi);
    return sign;
}

/* Block b's exp (sum, 1 / sum) and, in the same pass, the weights' 15-bit
 * levels as byte words in place over S (exp_levels4): the bound on the
 * weights (x->vdmax, kvs_attn_q8_weight_top with no recalibration) is known
 * before any exp, so no weight is stored and read back (a pass of its own
 * was 12% of one layer's attention after 7680 keys). Keys from the block's
 * maxn to maxall (rounded up to 4) get weight 0. A level below 0 sets
 * x->negative. */
static void weights_rows(q8_unit *x, int b) {
    const int maxn = x->maxn[b], jmin = x->u.jmin, end = (x->maxall + 3) & ~3;
    float *S = x->u.S + (size_t)b * 16 * x->u.ctxs;
    const __m512 pd = _mm512_div_ps(_mm512_loadu_ps(x->vdmax + 16 * b), _mm512_set1_ps(32767.0f));
    const __mmask16 big = _mm512_cmp_ps_mask(pd, _mm512_set1_ps(FLT_MIN), _CMP_GE_OQ);
    const __m512 ipd = _mm512_maskz_div_ps(big, _mm512_set1_ps(1.0f), pd);
    x->pd[b] = pd;
    __m512 P[16];
    for (int i = 0; i < 16; i++) P[i] = _mm512_setzero_ps();
    /* partial i takes keys j = i mod 16 (jmin is a multiple of 16); whole
     * groups of 16 first, with no test a key (a test per key made each its
     * own basic block, which the compiler did not interleave), then the
     * rest, past maxn as weight 0 */
    const __m512 mx = _mm512_mask_mov_ps(x->mx[b], _mm512_cmp_ps_mask(x->mx[b], _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
                                         _mm512_setzero_ps());
    __m512i sign = _mm512_setzero_si512();
    int j0 = jmin;
    for (; j0 + 16 <= maxn; j0 += 16)
#pragma GCC unroll 4
        for (int i = 0; i < 16; i += 4) sign = exp_levels4(x, S, j0 + i, 4, mx, ipd, P + i, sign);
    for (int j = j0; j < end; j += 4) sign = exp_levels4(x, S, j, maxn - j, mx, ipd, P + (j - j0) % 16, sign);
    for (int i = 0; i < 8; i++) P[i] = _mm512_add_ps(P[i], P[i + 8]);
    for (int i = 0; i < 4; i++) P[i] = _mm512_add_ps(P[i], P[i + 4]);
    for (int i = 0; i < 2; i++) P[i] = _mm512_add_ps(P[i], P[i + 2]);
    float inv[16];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(P[0], P[1])));
    for (int l = 0; l < x->nr[b]; l++) x->u.inv[b * 16 + l] = inv[l];
    if (_mm512_movepi32_mask(sign)) x->negative = 1;
}

/* acc[b][dd] += the 4 bytes of P[b] times v[dd]'s, for dd < PV_DIMS and
 * the nb blocks (each value word broadcast once for them). */
AI void pv_dots(int nb, __m512i acc[3][PV_DIMS], const __m512i P[3], const int32_t *v) {
#pragma GCC unroll 8
    for (int dd = 0; dd < PV_DIMS; dd++) {
        const __m512i vb = _mm512_set1_epi32(v[dd]);
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) acc[b][dd] = dpbusd(acc[b][dd], P[b], vb);
    }
}

/* acc += the words at offset w (0: lo, 16: hi) of the n groups listed
 * (offsets g from the block's first: weights at pl + 32 g + w, values at v
 * + g D) times their values, for the nb blocks. */
AI void pv_listed(int nb, __m512i acc[3][PV_DIMS], const float *pl, size_t pstride, int w, const int32_t *v, int D,
                  const uint8_t *list, int n) {
    __m512i p[3];
    for (int i = 0; i < n; i++) {
        const int g = list[i];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) {
            p[b] = _mm512_loadu_si512(pl + b * pstride + 32 * g + w);
            __asm__("" : "+v"(p[b])); /* one load, not one per dot */
        }
        pv_dots(nb, acc, p, v + (size_t)g * D);
    }
}

/* The groups of a PV block whose weights P.V needs (offsets from its first
 * key / 4, < 128): hi, those whose hi bytes are not all 0 in some row
 * block; lo, likewise for the lo bytes, and nlo == ng (every group) where
 * none is 0 in all of them. */
typedef struct pv_lists {
    uint8_t hi[PV_BLOCK / 4], lo[PV_BLOCK / 4];
    int nhi, nlo, ng;
} pv_lists;

/* o += P.V for keys [ja, jb) (ja and jb multiples of 4, one PV block; the
 * value tile from j0), dims d0.. of the nb blocks: the hi bytes of the
 * groups listed in ls->hi, << 8, then the lo bytes of those in ls->lo,
 * or where every group is live, of each by pointer steps (no index
 * arithmetic); one float add per output. A row's 0 adds 0, so the sums are
 * those of every group. */
AI void pv_group(q8_unit *x, int nb, const int32_t *v4, int j0, int ja, int jb, int d0, const pv_lists *ls, float *O) {
    const int D = x->u.D;
    const size_t pstride = 16 * x->u.ctxs; /* floats from one row block's weights to the next's */
    const float *pl = x->u.S + (size_t)(ja / 2) * 16; /* group g's lo at pl + 32 g, hi 16 further */
    const int32_t *v = v4 + (size_t)((ja - j0) / 4) * D + d0;
    __m512i acc[3][PV_DIMS], p[3];
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int dd = 0; dd < PV_DIMS; dd++) acc[b][dd] = _mm512_setzero_si512();
    pv_listed(nb, acc, pl, pstride, 16, v, D, ls->hi, ls->nhi);
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int dd = 0; dd < PV_DIMS; dd++) acc[b][dd] = _mm512_slli_epi32(acc[b][dd], 8);
    if (ls->nlo < ls->ng) pv_listed(nb, acc, pl, pstride, 0, v, D, ls->lo, ls->nlo);
    else
        for (int j = ja; j < jb; j += 4, pl += 32, v += D) {
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) {
                p[b] = _mm512_loadu_si512(pl + b * pstride);
                __asm__("" : "+v"(p[b]));
            }
            pv_dots(nb, acc, p, v);
        }
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int dd = 0; dd < PV_DIMS; dd++) {
            float *o = O + ((size_t)b * D + d0 + dd) * 16;
            _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_cvtepi32_ps(acc[b][dd])));
        }
}

/* The tile's keys [ja, jb), block by block, every dim; per block, the
 * groups whose hi bytes, and those whose lo bytes, are not all 0 in some
 * row block (pv_lists). Most hi bytes are 0 (in a 4096-token prefill of
 * real text, 53% of the groups'); at long context many lo bytes too (after
 * 7680 random tokens of SmolLM2, 21% of the 4-key groups of a 48-row unit:
 * weights below 1 / 65534 of their row's largest in every row). */
AI void pv_tile_nb(q8_unit *x, int nb, const int32_t *v4, int j0, int ja, int jb, float *O) {
    for (int b0 = ja, b1; b0 < jb; b0 = b1) {
        b1 = kvs_attn_q8_block_end(b0, jb);
        pv_lists ls;
        ls.nhi = ls.nlo = 0;
        ls.ng = (b1 - b0) / 4;
        const float *pw = x->u.S + (size_t)(b0 / 2) * 16; /* group g's lo words at pw + 32 g, hi 16 further */
        for (int g = 0; g < ls.ng; g++) {
            __m512i l = _mm512_loadu_si512(pw + 32 * g), h = _mm512_loadu_si512(pw + 32 * g + 16);
            for (int b = 1; b < nb; b++) {
                l = _mm512_or_si512(l, _mm512_loadu_si512(pw + (size_t)b * 16 * x->u.ctxs + 32 * g));
                h = _mm512_or_si512(h, _mm512_loadu_si512(pw + (size_t)b * 16 * x->u.ctxs + 32 * g + 16));
            }
            ls.hi[ls.nhi] = ls.lo[ls.nlo] = (uint8_t)g;
            ls.nhi += _mm512_test_epi32_mask(h, h) != 0;
            ls.nlo += _mm512_test_epi32_mask(l, l) != 0;
        }
        for (int d0 = 0; d0 < x->u.D; d0 += PV_DIMS) pv_group(x, nb, v4, j0, b0, b1, d0, &ls, O);
    }
}

static void pv_tile(q8_unit *x, const int32_t *v4, int j0, int ja, int jb, float *O) {
    switch (x->nrb) {
    case 1: pv_tile_nb(x, 1, v4, j0, ja, jb, O); break;
    case 2: pv_tile_nb(x, 2, v4, j0, ja, jb, O); break;
    default: pv_tile_nb(x, 3, v4, j0, ja, jb, O); break;
    }
}
/* kvs_attn_q8_vd_scan_fn for scales in a float array (stride 4: the
 * staged ones), 16 at a time: lanes start at m >= +0 and only a larger
 * scale replaces one (vmaxps returns its second operand for NaN and equal
 * zeros), so the lanes' maximum is the scalar scan's float. */
static float vd_scan16(const uint8_t *vds, size_t stride, int a, int b, float m) {
    const float *vd = (const float *)vds;
    __m512 acc = _mm512_set1_ps(m);
    int j = a;
    for (; j + 16 <= b; j += 16) acc = _mm512_max_ps(_mm512_loadu_ps(vd + j), acc);
    if (j < b) {
        const __mmask16 in = (__mmask16)((1u << (b - j)) - 1);
        acc = _mm512_mask_max_ps(acc, in, _mm512_maskz_loadu_ps(in, vd + j), acc);
    }
    return _mm512_reduce_max_ps(acc);
}

/* Rows' queries quantized (kvs_q8_row, as the reference) into Qt, with
 * their integer offsets and scales. */
static void stage_queries(q8_unit *x, int32_t *Qt) {
    const kvs_attn_call *c = x->u.c;
    const int D = x->u.D, D4 = D / 4;
    int8_t q8[KVS_ATTN_Q8_MAX_DIM];
    x->maxall = 0;
    for (int b = 0; b < x->nrb; b++) {
        const int r0 = b * 16;
        int nv[16], lv[16], off[16];
        float qs[16];
        x->nr[b] = x->u.rows - r0 < 16 ? x->u.rows - r0 : 16;
        x->maxn[b] = 0;
        for (int l = 0; l < 16; l++) {
            const int r = r0 + l;
            int32_t *qt = Qt + (size_t)b * 16 + l;
            if (l >= x->nr[b]) {
                nv[l] = lv[l] = off[l] = 0;
                qs[l] = 0.0f;
                for (int d4 = 0; d4 < D4; d4++) qt[d4 * 48] = 0;
                continue;
            }
            nv[l] = x->u.n[r];
            lv[l] = x->u.lo[r];
            if (nv[l] > x->maxn[b]) x->maxn[b] = nv[l];
            const float *q = c->q + ((size_t)(x->u.t0 + r / x->u.group) * c->n_head +
                                     (size_t)x->u.g * x->u.group + r % x->u.group) * D;
            qs[l] = query_levels(c, q, q8, &off[l]);
            for (int d4 = 0; d4 < D4; d4++) memcpy(&qt[d4 * 48], q8 + 4 * d4, 4);
        }
        if (x->maxn[b] > x->maxall) x->maxall = x->maxn[b];
        x->nvec[b] = _mm512_loadu_si512(nv);
        x->lovec[b] = _mm512_loadu_si512(lv);
        x->qoff[b] = _mm512_loadu_si512(off);
        x->qs[b] = _mm512_loadu_ps(qs);
        x->mx[b] = _mm512_set1_ps(-INFINITY);
    }
}

/* 0, or 1 when a weight level came out negative (the caller reruns the
 * unit on the AVX2 path). */
static int q8_unit_run(q8_unit *x) {
    const kvs_attn_call *c = x->u.c;
    const int D = x->u.D, JT = kvs_attn_q8_tile_keys(D);
    int32_t *Qt = (int32_t *)x->u.stage; /* (D/4, 3, 16), then O (nrb, D, 16) floats */
    void *tile = x->u.stage + (size_t)3 * 16 * 256;
    stage_queries(x, Qt);
    /* tiles aligned to PV blocks (so no block spans two tiles); the first
     * starts at the unit's first key */
    const int jstart = x->u.jmin / PV_BLOCK * PV_BLOCK;
    /* keys and values staged once for every unit of the kv head
     * (dispatch.c), or here tile by tile */
    const int staged = c->staged && x->u.g == c->staged_g;
    if (staged) { /* slot j's at [j - staged_lo] (in the region: staged_lo < its offset) */
        x->kds = (const uint8_t *)(kvs_attn_q8_staged_scales(c, 0) - c->staged_lo);
        x->vds = (const uint8_t *)(kvs_attn_q8_staged_scales(c, 1) - c->staged_lo);
        x->sstride = sizeof(float);
    }
    /* each row's bound on its weights, for weights_rows' single pass */
    memset(x->vdmax, 0, sizeof x->vdmax);
    kvs_attn_q8_vd_max(x->vds, x->sstride, x->u.lo, x->u.n, x->u.rows, x->vdmax,
                       x->sstride == sizeof(float) ? vd_scan16 : NULL);
    /* on AMX the scores (every key from a kv head staged in the tiles'
     * layout, kvs_attention_stage_q8_avx512; else the whole 16-key groups
     * from the cache rows) and, from the staged values, P.V run as tile
     * products (attention_q8_amx.c) */
    const int amx = kvs_attn_q8_amx_on(D);
    if (amx) kvs_attn_q8_amx_begin();
    for (int j0 = jstart; j0 < x->maxall; j0 += JT) {
        int ja = j0 > x->u.jmin ? j0 : x->u.jmin;
        const int jb = j0 + JT < x->maxall ? j0 + JT : x->maxall;
        if (amx && staged) { /* every key, from the staged rows */
            const size_t kb = kvs_attn_q8_staged_key_bytes(D);
            ja += kvs_attn_q8_amx_scores(
                x, Qt, ja, jb, (const int8_t *)kvs_attn_q8_staged_at(c, 0) + (size_t)(ja - c->staged_lo) * kb, kb, 1);
        }
        else if (amx) /* whole 16-key groups from the cache rows */
            ja += kvs_attn_q8_amx_scores(x, Qt, ja, jb, x->K + (size_t)ja * x->rb, x->rb, 0);
        if (ja >= jb) continue;
        if (staged) qk_blocks(x, Qt, staged_keys_at(c, ja), ja, jb - ja);
        else {
            stage_keys(x, ja, jb - ja, tile);
            qk_blocks(x, Qt, tile, ja, jb - ja);
        }
    }
    x->negative = 0;
    for (int b = 0; b < x->nrb; b++) weights_rows(x, b);
    if (x->negative) {
        if (amx) kvs_attn_q8_amx_end();
        return 1;
    }
    float *O = x->u.stage;
    memset(O, 0, (size_t)x->nrb * D * 16 * sizeof(float));
    if (amx && staged && kvs_attn_q8_amx_pv_fits(x))
        kvs_attn_q8_amx_pv(x, kvs_attn_q8_staged_at(c, 1), c->staged_lo, O);
    else
        for (int j0 = jstart; j0 < x->maxall; j0 += JT) {
            const int ja = j0 > x->u.jmin ? j0 : x->u.jmin;
            const int jb = ((j0 + JT < x->maxall ? j0 + JT : x->maxall) + 3) & ~3;
            if (staged && !amx) pv_tile(x, staged_values_at(c, ja), ja, ja, jb, O);
            else { /* values staged in the tiles' layout, or not staged */
                stage_values4(x, ja, jb - ja, 0, D, tile);
                pv_tile(x, tile, ja, ja, jb, O);
            }
        }
    if (amx) kvs_attn_q8_amx_end();
    /* out = (o * pd) * (1 / S), rows back to (token, head) order */
    for (int b = 0; b < x->nrb; b++) {
        const __m512 pd = x->pd[b], inv = _mm512_loadu_ps(x->u.inv + b * 16);
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512 t[16];
            const float *o = O + ((size_t)b * D + d0) * 16;
            for (int dd = 0; dd < 16; dd++) t[dd] = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o + dd * 16), pd), inv);
            transpose16(t); /* t[l] = dims d0.. of row b * 16 + l */
            for (int l = 0; l < x->nr[b]; l++) {
                const int r = b * 16 + l;
                float *out = c->out + ((size_t)(x->u.t0 + r / x->u.group) * c->n_head +
                                      (size_t)x->u.g * x->u.group + r % x->u.group) * D + d0;
                _mm512_storeu_ps(out, t[l]);
            }
        }
    }
    return 0;
}

/* The kvs_isa hook: slots [j0, j1) of kv head c->staged_g staged as the
 * units' tiles would be (stage_keys, stage_values4), at their place from
 * c->staged_lo. */
void kvs_attention_stage_q8_avx512(const kvs_attn_call *c, int j0, int j1) {
    q8_unit x;
    x.u.c = c;
    x.u.D = c->head_dim;
    q8_unit_rows(&x, c, c->staged_g);
    if (kvs_attn_q8_amx_on(x.u.D)) { /* as the tiles read them (j0 a multiple of 64) */
        const size_t kb = kvs_attn_q8_staged_key_bytes(x.u.D);
        kvs_attn_q8_amx_stage_keys(&x, j0, j1, kvs_attn_q8_staged_at(c, 0) + (size_t)(j0 - c->staged_lo) * kb, kb);
        kvs_attn_q8_amx_stage_values(&x, j0, j1, (uint8_t *)staged_values_at(c, j0));
    } else {
        stage_keys(&x, j0, j1 - j0, staged_keys_at(c, j0));
        stage_values4(&x, j0, j1 - j0, 0, x.u.D, staged_values_at(c, j0));
    }
    float *kd = kvs_attn_q8_staged_scales(c, 0), *vd = kvs_attn_q8_staged_scales(c, 1);
    for (int j = j0; j < j1 && j < c->n_ctx; j++) {
        kd[j - c->staged_lo] = q8_key_scale(&x, j);
        vd[j - c->staged_lo] = q8_value_scale(&x, j);
    }
}

void kvs_attention_unit_q8_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    const int group = c->n_head / c->n_kv_head, D = c->head_dim, rows = (t1 - t0) * group;
    int recal = 0;
    for (int t = t0; t < t1 && !recal; t++) recal = kvs_attn_recal_row(c, c->pos[t]);
    if (recal) { /* rare (a RAG request's question and output): the AVX2 unit takes them */
        kvs_attention_unit_q8_avx2(c, t0, t1, g, work);
        return;
    }
    if (!kvs_attn_q8_simd_shape(D, rows)) {
        kvs_attention_unit_q8_ref(c, t0, t1, g, work);
        return;
    }
    q8_unit x;
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    unit_init(&x.u, c, t0, t1, g, work, work + KVS_ATTN_ROWS * ctxs);
    q8_unit_rows(&x, c, g);
    x.nrb = (rows + 15) / 16;
    if (rows < KVS_ATTN_Q8_PREFILL_ROWS ? kvs_attention_decode_unit_q8_avx512(&x) : q8_unit_run(&x)) /* negative levels (a damaged cache): rare */
        kvs_attention_unit_q8_avx2(c, t0, t1, g, work);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif