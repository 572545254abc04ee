/*
 * AVX2 attention for CPUs without AVX-512: the canonical arithmetic of
 * attention_ref.c (bit-identical), with lane = query row in blocks of 8 rows
 * for every m (decode included: no key transposes, at the price of idle
 * lanes when a kv group has fewer than 8 query rows).
 *
 * Per unit (tokens [t0, t1) x the heads of kv head g): K and V are staged as
 * f32 tiles once and shared by all row blocks; pass 1 scores (a few keys
 * at a time for a group of row blocks, fma chain over d), pass 2 exp and the 16 partial sums (j % 16), pass
 * 3 o[d] = fma chain over j (keys a row does not see have e = 0 and add +0).
 * A sliding window masks keys below a row's lo as well; all passes start at
 * the rows' smallest lo rounded down to 16 (partials stay j % 16).
 * Recalibrated rows (kvs_attn_recal) scale their document scores in pass 1;
 * after pass 2 their document weights are summed again (partials j % 16) and
 * scaled by the row's factor; other lanes take factor 1 (same bits).
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

#include "kernels/attention_avx2.h"

void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);
void kvs_attention_unit_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);
int kvs_attention_decode_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);

static inline int tile_keys(int D) { return (KVS_ATTN_F_TILE_FLOATS / D) & ~15; }

/* n floats of K or V from element off: f16 converted into kvf, f32 in place. */
static const float *stage_f32(const void *base, int kv_type, size_t off, size_t n, float *kvf) {
    if (kv_type != 0) return (const float *)base + off;
    const uint16_t *src = (const uint16_t *)base + off;
    for (size_t i = 0; i < n; i += 8) /* n: whole keys of D % 8 == 0 floats */
        _mm256_storeu_ps(kvf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    return kvf;
}

/* Pass 1's or 3's prefetch of the tile after keys [j0, j0 + nk) of the
 * unit's kv head (kvs_ahead, into L2: the staging reads it a tile later),
 * over `steps` steps of the current tile's work. */
static kvs_ahead ahead_tile(const kvs_attn_call *c, const void *kv, size_t kv_off, int j0, int nk, int maxall,
                            int steps) {
    const int D = c->head_dim, JT = tile_keys(D), next = j0 + nk, nk_next = maxall - next < JT ? maxall - next : JT;
    const size_t es = c->kv_type != 0 ? sizeof(float) : sizeof(uint16_t);
    return kvs_ahead_new((const char *)kv + (kv_off + (size_t)next * D) * es, (size_t)nk_next * D * es, steps, 0);
}

/* Passes 1 and 3 take row blocks in groups of up to GB so that one
 * broadcast key (or value) element serves GB blocks: per step GB + 4 loads
 * for 12 fmas in 12 accumulators, where one block at a time loaded one per
 * fma (and the loads bound). Each score and each o[d] keeps its own fma
 * chain in the reference order; a group runs to its longest block's keys
 * (pass 2 sets e = +0 past a block's own). SmolLM2's layer at 512 tokens,
 * one Zen 3 core: 7.9 -> 4.5 ms. */
#define GB 3 /* row blocks per group */
#define KJ_MAX 8
/* keys per score tile and dims per output tile: 8 chains for one block (as
 * many as hide the fma latency), 4 per block for two or three */
#define KJ(nb) ((nb) == 1 ? 8 : 4)

/* One row block's view in pass 1: where its scores go and how they are
 * masked (keys below lo or at or past n: -inf; recalibrated lanes rc). */
typedef struct score_block {
    float *Sb;
    __m256i nvec, lovec;
    __m256 rcm, *mx;
    int nkr, any_rc;
    int open_lo, open_hi; /* keys every lane sees (max lo, min n): no mask there */
} score_block;

typedef struct score_consts {
    __m256 scale, ninf, inv_t;
    int dlo, dhi;
} score_consts;

/* Scores s (of keys j0 + j .. j0 + j + n - 1) scaled, masked, maxed, stored
 * (out of line: inlined, it cost the score loop a register: an accumulator
 * went to the stack). */
static __attribute__((noinline)) void store_scores_masked(const score_block *sb, const score_consts *k, int j0, int j,
                                                          int n, const __m256 *s) {
    for (int jj = 0; jj < n && j + jj < sb->nkr; jj++) {
        int jg = j0 + j + jj;
        __m256i jv = _mm256_set1_epi32(jg);
        __m256 live = _mm256_castsi256_ps(
            _mm256_andnot_si256(_mm256_cmpgt_epi32(sb->lovec, jv), _mm256_cmpgt_epi32(sb->nvec, jv)));
        __m256 v = _mm256_blendv_ps(k->ninf, _mm256_mul_ps(s[jj], k->scale), live);
        if (sb->any_rc && jg >= k->dlo && jg < k->dhi) v = _mm256_blendv_ps(v, _mm256_mul_ps(v, k->inv_t), sb->rcm);
        *sb->mx = _mm256_max_ps(*sb->mx, v);
        _mm256_storeu_ps(sb->Sb + (size_t)jg * RB, v);
    }
}

/* The same, inline for keys that every lane of the block sees (the bulk of
 * a long context), where the mask would keep every lane. */
AI void store_scores(const score_block *sb, const score_consts *k, int j0, int j, int n, const __m256 *s) {
    if (!sb->any_rc && j0 + j >= sb->open_lo && j0 + j + n <= sb->open_hi && j + n <= sb->nkr) {
        for (int jj = 0; jj < n; jj++) {
            __m256 v = _mm256_mul_ps(s[jj], k->scale);
            *sb->mx = _mm256_max_ps(*sb->mx, v);
            _mm256_storeu_ps(sb->Sb + (size_t)(j0 + j + jj) * RB, v);
        }
        return;
    }
    store_scores_masked(sb, k, j0, j, n, s);
}

/* Pass 1 for a group of nb blocks (Qt at the group's first block) over the
 * staged keys kf[0 .. nk), nk = the group's longest. */
AI void score_group_nb(const float *Qt, const score_block *sb, const score_consts *k, int nb, const float *kf,
                       int D, int j0, int nk, kvs_ahead *pf) {
    const int nj = KJ(nb);
    int j = 0;
    for (; j + nj <= nk; j += nj) {
        kvs_ahead_step(pf);
        __m256 s[GB][KJ_MAX];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
            for (int jj = 0; jj < nj; jj++) s[b][jj] = _mm256_setzero_ps();
        const float *kb = kf + (size_t)j * D;
        for (int d = 0; d < D; d++) {
            __m256 qd[GB];
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) {
                qd[b] = _mm256_loadu_ps(Qt + ((size_t)b * D + d) * RB);
                __asm__("" : "+x"(qd[b])); /* a register, not a load folded into each fma */
            }
#pragma GCC unroll 8
            for (int jj = 0; jj < nj; jj++) {
                __m256 kd = _mm256_broadcast_ss(kb + (size_t)jj * D + d);
#pragma GCC unroll 3
                for (int b = 0; b < nb; b++) s[b][jj] = _mm256_fmadd_ps(qd[b], kd, s[b][jj]);
            }
        }
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) {
            __m256 out[KJ_MAX]; /* a copy: s itself taken by address stayed in memory, stored every step */
#pragma GCC unroll 8
            for (int jj = 0; jj < nj; jj++) out[jj] = s[b][jj];
            store_scores(&sb[b], k, j0, j, nj, out);
        }
    }
    for (; j < nk; j++) /* the last keys one at a time (no reads past them) */
        for (int b = 0; b < nb; b++) {
            __m256 acc = _mm256_setzero_ps();
            for (int d = 0; d < D; d++)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(Qt + ((size_t)b * D + d) * RB),
                                      _mm256_broadcast_ss(kf + (size_t)j * D + d), acc);
            store_scores(&sb[b], k, j0, j, 1, &acc);
        }
}

static void score_group(const float *Qt, const score_block *sb, const score_consts *k, int nb, const float *kf,
                        int D, int j0, int nk, kvs_ahead *pf) {
    if (nb == 3) score_group_nb(Qt, sb, k, 3, kf, D, j0, nk, pf);
    else if (nb == 2) score_group_nb(Qt, sb, k, 2, kf, D, j0, nk, pf);
    else score_group_nb(Qt, sb, k, 1, kf, D, j0, nk, pf);
}

/* O (blocks b < nb, dims d0 .. d0 + KJ(nb) - 1) += e_j (block b) * v_j[d]
 * for j < nk, each chain in j order; first: O starts at zero. */
AI void value_tile(float *O, const float *const Sb[GB], int nb, const float *vf, int D, int d0, int nk, int first) {
    const int nd = KJ(nb);
    __m256 acc[GB][KJ_MAX];
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int dd = 0; dd < nd; dd++)
            acc[b][dd] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(O + ((size_t)b * D + d0 + dd) * RB);
    for (int j = 0; j < nk; j++) {
        __m256 e[GB];
#pragma GCC unroll 3
        for (int b = 0; b < nb; b++) {
            e[b] = _mm256_loadu_ps(Sb[b] + (size_t)j * RB);
            __asm__("" : "+x"(e[b]));
        }
#pragma GCC unroll 8
        for (int dd = 0; dd < nd; dd++) {
            __m256 vd = _mm256_broadcast_ss(vf + (size_t)j * D + d0 + dd);
#pragma GCC unroll 3
            for (int b = 0; b < nb; b++) acc[b][dd] = _mm256_fmadd_ps(e[b], vd, acc[b][dd]);
        }
    }
#pragma GCC unroll 3
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int dd = 0; dd < nd; dd++) _mm256_storeu_ps(O + ((size_t)b * D + d0 + dd) * RB, acc[b][dd]);
}

/* Pass 3 for a group of nb blocks (O at the group's first block). */
static void value_group(float *O, const float *const Sb[GB], int nb, const float *vf, int D, int nk, int first,
                        kvs_ahead *pf) {
    for (int d0 = 0; d0 < D; d0 += KJ(nb)) { /* D % 8 == 0 */
        kvs_ahead_step(pf);
        if (nb == 3) value_tile(O, Sb, 3, vf, D, d0, nk, first);
        else if (nb == 2) value_tile(O, Sb, 2, vf, D, d0, nk, first);
        else value_tile(O, Sb, 1, vf, D, d0, nk, first);
    }
}

void kvs_attention_unit_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    const int group = c->n_head / c->n_kv_head, D = c->head_dim, rows = (t1 - t0) * group;
    if (D % 8 != 0 || D > 256 || rows > KVS_ATTN_ROWS) {
        kvs_attention_unit_ref(c, t0, t1, g, work);
        return;
    }
    if (kvs_attention_decode_avx2(c, t0, t1, g, work)) return; /* a few rows: keys in lanes */
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    const size_t kv_off = (size_t)g * c->n_ctx * D;
    const int nrb = (rows + RB - 1) / RB, JT = tile_keys(D);
    float *S = work;                                   /* (nrb, ctxs, 8) */
    float *Qt = work + (size_t)KVS_ATTN_ROWS * ctxs;   /* (nrb, D, 8), then O */
    float *kvf = Qt + (size_t)3 * 16 * 256;            /* (JT, D) staged tile */
    const float *qrow[KVS_ATTN_ROWS];
    int n[KVS_ATTN_ROWS], lo[KVS_ATTN_ROWS], maxn[KVS_ATTN_ROWS / RB], maxall = 0, jmin = c->n_ctx;
    for (int r = 0; r < rows; r++) {
        int t = t0 + r / group;
        n[r] = kvs_attn_n(c, c->pos[t]);
        lo[r] = kvs_attn_lo(c, n[r]);
        if (lo[r] < jmin) jmin = lo[r];
        qrow[r] = c->q + ((size_t)t * c->n_head + (size_t)g * group + r % group) * D;
    }
    jmin &= ~15;
    __m256 mx[KVS_ATTN_ROWS / RB];
    __m256i nvec[KVS_ATTN_ROWS / RB], lovec[KVS_ATTN_ROWS / RB];
    __m256 rcm[KVS_ATTN_ROWS / RB]; /* recalibrated lanes */
    int any_rc[KVS_ATTN_ROWS / RB], open_lo[KVS_ATTN_ROWS / RB], open_hi[KVS_ATTN_ROWS / RB];
    for (int rb = 0; rb < nrb; rb++) {
        int nv[RB], lv[RB], rv[RB];
        maxn[rb] = 0;
        any_rc[rb] = 0;
        open_lo[rb] = 0;
        open_hi[rb] = c->n_ctx;
        for (int l = 0; l < RB; l++) {
            int r = rb * RB + l;
            nv[l] = r < rows ? n[r] : 0;
            lv[l] = r < rows ? lo[r] : 0;
            rv[l] = r < rows && kvs_attn_recal_row(c, c->pos[t0 + r / group]) ? -1 : 0;
            any_rc[rb] |= rv[l];
            if (nv[l] > maxn[rb]) maxn[rb] = nv[l];
            if (nv[l] < open_hi[rb]) open_hi[rb] = nv[l];
            if (lv[l] > open_lo[rb]) open_lo[rb] = lv[l];
            for (int d = 0; d < D; d++) Qt[((size_t)rb * D + d) * RB + l] = r < rows ? qrow[r][d] : 0.0f;
        }
        if (maxn[rb] > maxall) maxall = maxn[rb];
        nvec[rb] = _mm256_loadu_si256((const __m256i *)nv);
        lovec[rb] = _mm256_loadu_si256((const __m256i *)lv);
        rcm[rb] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)rv));
        mx[rb] = _mm256_set1_ps(-INFINITY);
    }
    const score_consts sc = {.scale = _mm256_set1_ps(c->scale), .ninf = _mm256_set1_ps(-INFINITY),
                             .inv_t = _mm256_set1_ps(c->recal.inv_t), .dlo = c->recal.lo, .dhi = c->recal.hi};
    /* pass 1: scores */
    for (int j0 = jmin; j0 < maxall; j0 += JT) {
        int nk = maxall - j0 < JT ? maxall - j0 : JT;
        const float *kf = stage_f32(c->k, c->kv_type, kv_off + (size_t)j0 * D, (size_t)nk * D, kvf);
        kvs_ahead pf = ahead_tile(c, c->k, kv_off, j0, nk, maxall, (nrb + GB - 1) / GB * (nk / KJ(GB)));
        for (int rb0 = 0; rb0 < nrb; rb0 += GB) {
            int nb = nrb - rb0 < GB ? nrb - rb0 : GB, nkg = 0;
            score_block sb[GB];
            for (int b = 0; b < nb; b++) {
                int rb = rb0 + b;
                sb[b] = (score_block){.Sb = S + (size_t)rb * ctxs * RB, .nvec = nvec[rb], .lovec = lovec[rb],
                                      .rcm = rcm[rb], .mx = &mx[rb], .any_rc = any_rc[rb],
                                      .open_lo = open_lo[rb], .open_hi = open_hi[rb],
                                      .nkr = maxn[rb] - j0 < nk ? maxn[rb] - j0 : nk};
                if (sb[b].nkr > nkg) nkg = sb[b].nkr;
            }
            score_group(Qt + (size_t)rb0 * D * RB, sb, &sc, nb, kf, D, j0, nkg, &pf);
        }
    }
    /* pass 2: probabilities and 1 / sum (partials j % 16, kvs_tree16) */
    float inv[KVS_ATTN_ROWS];
    for (int rb = 0; rb < nrb; rb++) {
        float *Sb = S + (size_t)rb * ctxs * RB;
        __m256 P[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) P[i] = _mm256_setzero_ps();
        int j = jmin;
        for (; j + 16 <= maxn[rb]; j += 16)
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                __m256 e = kvs_exp8(_mm256_sub_ps(_mm256_loadu_ps(Sb + (size_t)(j + i) * RB), mx[rb]));
                _mm256_storeu_ps(Sb + (size_t)(j + i) * RB, e);
                P[i] = _mm256_add_ps(P[i], e);
            }
        for (int i = 0; j < maxn[rb]; j++, i++) {
            __m256 e = kvs_exp8(_mm256_sub_ps(_mm256_loadu_ps(Sb + (size_t)j * RB), mx[rb]));
            _mm256_storeu_ps(Sb + (size_t)j * RB, e);
            P[i] = _mm256_add_ps(P[i], e);
        }
        __m256 sum = tree16_8(P);
        if (any_rc[rb]) {
            /* rows of the block before jmin are unwritten, rows past maxn unread */
            int d0 = sc.dlo > jmin ? sc.dlo : jmin, d1 = sc.dhi < maxn[rb] ? sc.dhi : maxn[rb];
            sum = recal_block(c, Sb, jmin, d0, d1, maxn[rb], rcm[rb], mx[rb], sum, NULL);
        }
        /* e = +0 for the keys past the block's rows up to the longest
         * block's: pass 3 runs a group of blocks to its longest (adds +0) */
        for (j = maxn[rb]; j < maxall; j++) _mm256_storeu_ps(Sb + (size_t)j * RB, _mm256_setzero_ps());
        __m256 iv = _mm256_div_ps(_mm256_set1_ps(1.0f), sum);
        _mm256_storeu_ps(inv + rb * RB, iv); /* rows past `rows` unused */
    }
    /* pass 3: o = sum_j e_j v_j, V staged per tile, partial o in O (Qt's space) */
    float *O = Qt;
    for (int j0 = jmin; j0 < maxall; j0 += JT) {
        int nk = maxall - j0 < JT ? maxall - j0 : JT;
        const float *vf = stage_f32(c->v, c->kv_type, kv_off + (size_t)j0 * D, (size_t)nk * D, kvf);
        kvs_ahead pf = ahead_tile(c, c->v, kv_off, j0, nk, maxall, (nrb + GB - 1) / GB * (D / KJ(GB)));
        for (int rb0 = 0; rb0 < nrb; rb0 += GB) {
            int nb = nrb - rb0 < GB ? nrb - rb0 : GB, nkg = 0;
            const float *Sb[GB];
            for (int b = 0; b < nb; b++) {
                int nkr = maxn[rb0 + b] - j0 < nk ? maxn[rb0 + b] - j0 : nk;
                if (nkr > nkg) nkg = nkr;
                Sb[b] = S + (size_t)(rb0 + b) * ctxs * RB + (size_t)j0 * RB;
            }
            value_group(O + (size_t)rb0 * D * RB, Sb, nb, vf, D, nkg, j0 == jmin, &pf);
        }
    }
    for (int r = 0; r < rows; r++) {
        int rb = r / RB, l = r % RB;
        float *out = c->out + ((size_t)(t0 + r / group) * c->n_head + (size_t)g * group + r % group) * D;
        for (int d = 0; d < D; d++) out[d] = O[((size_t)rb * D + d) * RB + l] * inv[r];
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
