/*
 * AVX-512 attention. Reproduces the scalar reference (attention_ref.c) bit for
 * bit: only the grouping of independent work changes.
 *
 * One unit = query tokens [t0, t1) x the query heads of kv head g, so every
 * K and V row is loaded once for all heads of the group (GQA). Rows are
 * r = (t - t0) * group + (h - g * group).
 *
 * Scores, two layouts, chosen by the number of rows (same bits either way):
 *  - many rows (prefill, this file): lane = row. Qt[d] holds q[d] of 16
 *    rows; 8 keys at a time, s[key] = fma chain over d of Qt[d] *
 *    broadcast(k[d]). Scores are stored as S[j][16 rows] per block of 16
 *    rows.
 *  - few rows (decode, attention_avx512_decode.c): lane = key. A tile of 16
 *    keys is transposed to Kt[d] (16 keys), s = fma chain over d of
 *    broadcast(q[d]) * Kt[d]. Scores are stored per row, S_r[j].
 * Softmax sums use 16 partials indexed j % 16 (lanes in the decode layout,
 * 16 registers in the prefill layout). P.V: lane = d, fma chain over j per
 * output element, the rows of one token together so each V row is
 * converted once.
 * Sliding window: keys below a row's lo are masked like keys past its n,
 * and every loop over keys starts at jmin, the unit's smallest lo rounded
 * down to 16 (so partials keep their j % 16 index).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

#include "kernels/attention_avx512.h"

void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);
void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work);

/* ------------------------------------------------ prefill, lane = row */

/* Keys per staged K/V tile (converted to f32 once per unit, shared by all
 * row blocks). */
static inline int tile_keys(int D) { return (KVS_ATTN_F_TILE_FLOATS / D) & ~15; }

/* f32 rows [j0, j0 + nk) of K or V of the unit's kv head (f16 converted into
 * stage, f32 used in place). */
static const float *stage_rows(const unit_ctx *u, const void *base, int j0, int nk, float *stage) {
    const int D = u->D;
    if (u->c->kv_type != 0) return (const float *)base + u->kv_off + (size_t)j0 * D;
    const uint16_t *src = (const uint16_t *)base + u->kv_off + (size_t)j0 * D;
    for (size_t i = 0; i < (size_t)nk * D; i += 16)
        _mm512_storeu_ps(stage + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    return stage;
}

/* Scores of keys [j0, j0 + nk) for the nb (1..3) row blocks rb0.. (lane =
 * row), from f32 keys kf (nk, D); running maxima in mx[rb]. The blocks share
 * each broadcast key element (11 loads per 24 fmas instead of 9 per 8: one
 * block per broadcast was bound by the loads). A block's keys past its own
 * maxn are computed too and stored as -inf (no row of it sees them), and no
 * later pass reads them. nb is a constant in each copy (qk_blocks). */
AI void qk_group(const unit_ctx *u, int rb0, int nb, const float *Qt, const float *kf, int j0, int nk,
                 const __m512i *nvec, const __m512i *lovec, __m512 *mx) {
    const int D = u->D;
    const __m512 scale = _mm512_set1_ps(u->c->scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nk; j += 8) {
        int n8 = nk - j < 8 ? nk - j : 8;
        const float *kb = kf + (size_t)j * D;
        __m512 s[3][8];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
            for (int jj = 0; jj < 8; jj++) s[b][jj] = _mm512_setzero_ps();
        if (n8 == 8) {
            for (int d = 0; d < D; d++) {
                __m512 qd[3];
#pragma GCC unroll 3
                for (int b = 0; b < nb; b++) {
                    qd[b] = _mm512_loadu_ps(Qt + ((size_t)(rb0 + b) * D + d) * 16);
                    __asm__("" : "+v"(qd[b])); /* one load, not one per fma */
                }
#pragma GCC unroll 8
                for (int jj = 0; jj < 8; jj++) {
                    __m512 k = _mm512_set1_ps(kb[jj * D + d]);
#pragma GCC unroll 3
                    for (int b = 0; b < nb; b++) s[b][jj] = _mm512_fmadd_ps(qd[b], k, s[b][jj]);
                }
            }
        } else {
            for (int d = 0; d < D; d++)
                for (int b = 0; b < nb; b++) {
                    __m512 qd = _mm512_loadu_ps(Qt + ((size_t)(rb0 + b) * D + d) * 16);
                    for (int jj = 0; jj < n8; jj++)
                        s[b][jj] = _mm512_fmadd_ps(qd, _mm512_set1_ps(kb[jj * D + d]), s[b][jj]);
                }
        }
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) {
            float *S = u->S + (size_t)(rb0 + b) * 16 * u->ctxs;
            for (int jj = 0; jj < n8; jj++) {
                __m512i jv = _mm512_set1_epi32(j0 + j + jj);
                __mmask16 live = _mm512_cmpgt_epi32_mask(nvec[rb0 + b], jv) & _mm512_cmple_epi32_mask(lovec[rb0 + b], jv);
                __m512 v = _mm512_mask_mov_ps(ninf, live, _mm512_mul_ps(s[b][jj], scale));
                mx[rb0 + b] = _mm512_max_ps(mx[rb0 + b], v);
                _mm512_storeu_ps(S + (size_t)(j0 + j + jj) * 16, v);
            }
        }
    }
}

static void qk_blocks(const unit_ctx *u, int nb, const float *Qt, const float *kf, int j0, int nk,
                      const __m512i *nvec, const __m512i *lovec, __m512 *mx) {
    switch (nb) {
    case 1: qk_group(u, 0, 1, Qt, kf, j0, nk, nvec, lovec, mx); break;
    case 2: qk_group(u, 0, 2, Qt, kf, j0, nk, nvec, lovec, mx); break;
    default: qk_group(u, 0, 3, Qt, kf, j0, nk, nvec, lovec, mx); break;
    }
}

/* exp in place and 1 / sum for row block rb. */
static void softmax_rows(unit_ctx *u, int rb, int maxn, __m512 mx, int nr) {
    float *S = u->S + (size_t)rb * 16 * u->ctxs;
    __m512 P[16];
    for (int i = 0; i < 16; i++) P[i] = _mm512_setzero_ps();
    int j = u->jmin;
    for (; j + 16 <= maxn; j += 16)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(S + (size_t)(j + i) * 16), mx));
            _mm512_storeu_ps(S + (size_t)(j + i) * 16, e);
            P[i] = _mm512_add_ps(P[i], e);
        }
    for (int i = 0; j < maxn; j++, i++) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(S + (size_t)j * 16), mx));
        _mm512_storeu_ps(S + (size_t)j * 16, e);
        P[i] = _mm512_add_ps(P[i], e);
    }
    for (int i = 0; i < 8; i++) P[i] = _mm512_add_ps(P[i], P[i + 8]);
    for (int i = 0; i < 4; i++) P[i] = _mm512_add_ps(P[i], P[i + 4]);
    for (int i = 0; i < 2; i++) P[i] = _mm512_add_ps(P[i], P[i + 2]);
    __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(P[0], P[1]));
    float tmp[16];
    _mm512_storeu_ps(tmp, inv);
    for (int l = 0; l < nr; l++) u->inv[rb * 16 + l] = tmp[l];
}

/* o[d] += e_j * v_j[d] for the keys of the unit's nb (<= 3, a constant in
 * each copy) row blocks, PV_DIMS dims at d0, lane = row: acc[b][dd] holds
 * dim d0 + dd of block b's 16 rows, and block b takes keys [j0, j0 +
 * nkr[b]) of the staged tile vf. The blocks share each broadcast V element
 * over the keys they all take (one block per broadcast: 17 loads per 16
 * fmas, the pass bound by the loads; now 11 per 24 as in qk_group), then
 * each block its own last keys (its rows see fewer or more). Keys a row does
 * not see have e = 0 and add exactly +0; per output the chain over j keeps
 * its order. */
#define PV_DIMS 8
AI void pv_group(const unit_ctx *u, int nb, const float *vf, int j0, const int *nkr, int d0,
                 __m512 acc[3][PV_DIMS]) {
    const int D = u->D;
    const float *S[3];
    int nmin = nkr[0];
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++) {
        S[b] = u->S + (size_t)b * 16 * u->ctxs + (size_t)j0 * 16;
        if (nkr[b] < nmin) nmin = nkr[b];
    }
    for (int j = 0; j < nmin; j++) {
        __m512 e[3];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) {
            e[b] = _mm512_loadu_ps(S[b] + (size_t)j * 16);
            __asm__("" : "+v"(e[b])); /* one load, not one per fma */
        }
        const float *v = vf + (size_t)j * D + d0;
#pragma GCC unroll 8
        for (int dd = 0; dd < PV_DIMS; dd++) {
            const __m512 vb = _mm512_set1_ps(v[dd]);
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) acc[b][dd] = _mm512_fmadd_ps(e[b], vb, acc[b][dd]);
        }
    }
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
        for (int j = nmin; j < nkr[b]; j++) {
            const __m512 e = _mm512_loadu_ps(S[b] + (size_t)j * 16);
            const float *v = vf + (size_t)j * D + d0;
#pragma GCC unroll 8
            for (int dd = 0; dd < PV_DIMS; dd++) acc[b][dd] = _mm512_fmadd_ps(e, _mm512_set1_ps(v[dd]), acc[b][dd]);
        }
}

/* pv_group over the D dims of the unit's nb row blocks, partial outputs
 * in O (rb, D, 16): from zero at the first tile, else where the last tile
 * left them. */
AI void pv_blocks_nb(const unit_ctx *u, int nb, const float *vf, int j0, const int *nkr, float *O) {
    const int D = u->D;
    for (int d0 = 0; d0 < D; d0 += PV_DIMS) {
        __m512 acc[3][PV_DIMS];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
            for (int dd = 0; dd < PV_DIMS; dd++)
                acc[b][dd] = j0 == u->jmin ? _mm512_setzero_ps()
                                           : _mm512_loadu_ps(O + ((size_t)b * D + d0 + dd) * 16);
        pv_group(u, nb, vf, j0, nkr, d0, acc);
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
            for (int dd = 0; dd < PV_DIMS; dd++) _mm512_storeu_ps(O + ((size_t)b * D + d0 + dd) * 16, acc[b][dd]);
    }
}

static void pv_blocks(const unit_ctx *u, int nb, const float *vf, int j0, const int *nkr, float *O) {
    switch (nb) {
    case 1: pv_blocks_nb(u, 1, vf, j0, nkr, O); break;
    case 2: pv_blocks_nb(u, 2, vf, j0, nkr, O); break;
    default: pv_blocks_nb(u, 3, vf, j0, nkr, O); break;
    }
}

static void prefill_unit(unit_ctx *u) {
    const kvs_attn_call *c = u->c;
    const int D = u->D, nrb = (u->rows + 15) / 16, JT = tile_keys(D);
    float *Qt = u->stage;                              /* (nrb, D, 16), then O (nrb, D, 16) */
    float *kvf = u->stage + (size_t)3 * 16 * 256;      /* (JT, D) staged K or V tile */
    __m512i nvec[3], lovec[3];
    __m512 mx[3];
    int maxn[3], nr[3], maxall = 0;
    for (int rb = 0; rb < nrb; rb++) {
        int r0 = rb * 16, nv[16], lv[16];
        nr[rb] = u->rows - r0 < 16 ? u->rows - r0 : 16;
        maxn[rb] = 0;
        float *qt = Qt + (size_t)rb * D * 16;
        for (int l = 0; l < 16; l++) {
            int r = r0 + l;
            nv[l] = l < nr[rb] ? u->n[r] : 0;
            lv[l] = l < nr[rb] ? u->lo[r] : 0;
            if (nv[l] > maxn[rb]) maxn[rb] = nv[l];
            const float *q = l < nr[rb] ? c->q + ((size_t)(u->t0 + r / u->group) * c->n_head +
                                                  (size_t)u->g * u->group + r % u->group) * D
                                        : NULL;
            for (int d = 0; d < D; d++) qt[d * 16 + l] = q ? q[d] : 0.0f;
        }
        if (maxn[rb] > maxall) maxall = maxn[rb];
        nvec[rb] = _mm512_loadu_si512(nv);
        lovec[rb] = _mm512_loadu_si512(lv);
        mx[rb] = _mm512_set1_ps(-INFINITY);
    }
    /* pass 1: scores, K staged once per tile for all row blocks */
    for (int j0 = u->jmin; j0 < maxall; j0 += JT) {
        int nk = maxall - j0 < JT ? maxall - j0 : JT;
        const float *kf = stage_rows(u, c->k, j0, nk, kvf);
        qk_blocks(u, nrb, Qt, kf, j0, nk, nvec, lovec, mx); /* nk: to the longest block's keys */
    }
    /* pass 2: probabilities */
    for (int rb = 0; rb < nrb; rb++) softmax_rows(u, rb, maxn[rb], mx[rb], nr[rb]);
    /* pass 3: P.V, V staged once per tile; partial outputs live in O */
    float *O = Qt;
    for (int j0 = u->jmin; j0 < maxall; j0 += JT) {
        int nk = maxall - j0 < JT ? maxall - j0 : JT;
        const float *vf = stage_rows(u, c->v, j0, nk, kvf);
        int nkr[3];
        for (int rb = 0; rb < nrb; rb++) {
            nkr[rb] = maxn[rb] - j0 < nk ? maxn[rb] - j0 : nk;
            if (nkr[rb] < 0) nkr[rb] = 0;
        }
        pv_blocks(u, nrb, vf, j0, nkr, O);
    }
    /* out = o * (1 / S), rows back to (token, head) order */
    for (int rb = 0; rb < nrb; rb++) {
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512 t[16];
            const float *o = O + ((size_t)rb * D + d0) * 16;
            for (int dd = 0; dd < 16; dd++) t[dd] = _mm512_loadu_ps(o + dd * 16);
            transpose16(t); /* t[l] = dims d0.. of row rb * 16 + l */
            for (int l = 0; l < nr[rb]; l++) {
                int r = rb * 16 + l;
                float *out = c->out + ((size_t)(u->t0 + r / u->group) * c->n_head +
                                      (size_t)u->g * u->group + r % u->group) * D + d0;
                _mm512_storeu_ps(out, _mm512_mul_ps(t[l], _mm512_set1_ps(u->inv[r])));
            }
        }
    }
}

void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    int group = c->n_head / c->n_kv_head, D = c->head_dim;
    int rows = (t1 - t0) * group;
    if (D % 16 != 0 || D > 256 || rows > KVS_ATTN_ROWS) {
        kvs_attention_unit_ref(c, t0, t1, g, work);
        return;
    }
    unit_ctx u;
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    unit_init(&u, c, t0, t1, g, work, work + KVS_ATTN_ROWS * ctxs);
    if (rows >= 8) {
        prefill_unit(&u);
    } else {
        kvs_avx512_decode_unit(&u);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
