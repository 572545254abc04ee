/*
 * CacheBlend token selection (Yao et al., "CacheBlend: Fast Large Language
 * Model Serving for RAG with Cached Knowledge Fusion", EuroSys 2025).
 *
 * Idea: a moved chunk's KV is wrong only where its tokens should have
 * attended to the chunks before them, and in a given layer that error is
 * concentrated on a few tokens, which are mostly the same tokens layer after
 * layer. So run the first layers for all moved tokens (cheap: 1-2 layers of
 * 30), measure at the check layer how far each token's fresh K/V lies from
 * its cached K/V, and recompute only the worst tokens in the remaining
 * layers. Everything else keeps its cached KV.
 *
 * Here: layers [0, check) run fully for every moved token (their K/V are
 * written: exact); at the check layer every token's fresh q/k/v is computed
 * once, its deviation measured against the cached K/V still in the buffer,
 * and the fresh K/V written (exact too, and already paid for); the top
 * recompute_ratio of tokens by deviation (above min_deviation), and any
 * forced ones, stay in the rowset, entering the check layer's attention
 * with exact hidden states.
 *
 * Gradual narrowing (the paper's "gradual filtering"; narrow_from > 0):
 * the check layer keeps narrow_from of the tokens instead; at each of the
 * next L layers the kept rows run that layer's q/k/v, are ranked again by
 * the deviation of their fresh K/V from the cached K/V at that layer (still
 * in the buffer: nobody has written it), the fresh K/V of all of them are
 * written (computed anyway, and closer to the truth than the cached ones:
 * at the first narrowing layer they are even exact, since the rows' inputs
 * went through a layer whose K/V were all fresh), and the top share for
 * that layer stays (kvs_blend_share). A dropped row's hidden state stops
 * there: from the next layer on its token keeps the cached K/V. The rows
 * kept re-run their q/k/v inside kvs_fwd_layer (the same bits: the kernels
 * are batch-invariant); that repeat is the narrowing's overhead, ~1/6 of a
 * layer for the kept rows on SmolLM2.
 *
 * Forced rows: at the check layer they are ranked with the others and stay
 * whatever their rank (as without narrowing). A narrowing layer ranks only
 * the rows chosen by deviation at the layer before; forced rows stay in
 * every set without using up the share. So narrowing from r to r drops
 * nothing and gives the bits of no narrowing. min_deviation is the check
 * layer's floor only: later layers just rank.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "rag/repair/blend.h"

typedef struct ranked {
    float dev;
    int row;
} ranked;

/* Larger deviation first; ties to the earlier row (deterministic). */
static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->dev != y->dev) return x->dev > y->dev ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Reads one (layer, plane, slot)'s heads as float: out (n_kv_head * head_dim). */
static void read_slot(const kvs_kv_buffer *kv, int l, int plane, int pos, float *out) {
    for (int h = 0; h < kv->n_kv_head; h++) {
        kvs_kv_row_load(kv->type, kvs_kv_at(kv, l, plane, h, pos), out + (size_t)h * kv->head_dim, kv->head_dim);
    }
}

/* Deviation of a token's fresh (k, v) from the cached ones at its slot. */
static float deviation(kvs_deviation metric, const kvs_kv_buffer *kv, int l, int pos, const float *k, const float *v,
                       float *tmp) {
    const int n = kv->n_kv_head * kv->head_dim;
    if (metric == KVS_DEVIATION_V_L2) {
        read_slot(kv, l, 1, pos, tmp);
        double s = 0.0;
        for (int i = 0; i < n; i++) {
            double d = (double)v[i] - tmp[i];
            s += d * d;
        }
        return (float)sqrt(s);
    }
    read_slot(kv, l, 0, pos, tmp);
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int i = 0; i < n; i++) {
        dot += (double)k[i] * tmp[i];
        na += (double)k[i] * k[i];
        nb += (double)tmp[i] * tmp[i];
    }
    if (na == 0.0 || nb == 0.0) return na == nb ? 0.0f : 1.0f;
    return (float)(1.0 - dot / sqrt(na * nb));
}

double kvs_blend_share(const kvs_repair_params *p, int j, int n_layer) {
    int L = kvs_blend_narrow_len(p, n_layer);
    if (L == 0 || j >= L) return (double)p->recompute_ratio;
    if (j <= 0) return (double)p->narrow_from;
    return (double)p->narrow_from * pow((double)p->recompute_ratio / p->narrow_from, (double)j / L);
}

int kvs_blend_narrow_len(const kvs_repair_params *p, int n_layer) {
    if (!(p->narrow_from > 0.0f) || p->narrow_layers <= 0) return 0;
    int room = n_layer - 1 - p->check_layer;
    return p->narrow_layers < room ? p->narrow_layers : room;
}

/* Rows whose rank counts against the share: the top `want` of them by
 * deviation (above floor) keep the flag; the rest lose it. */
static void rank_keep(ranked *rk, int n_cand, int want, float floor, unsigned char *by_dev) {
    qsort(rk, (size_t)n_cand, sizeof *rk, cmp_ranked);
    for (int i = 0; i < n_cand; i++) by_dev[rk[i].row] = i < want && rk[i].dev > floor;
}

/* Compacts the rowset to the rows with by_dev or force set, in slot order:
 * an in-place forward copy (row r moves to an index <= r); the flags move
 * with their rows. */
static void compact(kvs_rowset *rs, size_t d, unsigned char *by_dev, unsigned char *force) {
    int w = 0;
    for (int r = 0; r < rs->n; r++) {
        if (!by_dev[r] && !(force && force[r])) continue;
        if (w != r) {
            rs->pos[w] = rs->pos[r];
            rs->tok[w] = rs->tok[r];
            memcpy(rs->x + (size_t)w * d, rs->x + (size_t)r * d, d * sizeof(float));
            by_dev[w] = by_dev[r];
            if (force) force[w] = force[r];
        }
        w++;
    }
    rs->n = w;
}

/* q/k/v of every row at layer l, each row's deviation against the cached
 * K/V there (rk[row], for the rows with cand set, or all if cand is NULL),
 * then the fresh K/V written. Returns the number of ranked rows. */
static int measure_layer(kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, const kvs_repair_params *p, int l,
                         const unsigned char *cand, ranked *rk, float *tmp) {
    const int n = rs->n, B = f->max_rows;
    const size_t d = (size_t)f->hp->n_embd, kvd = (size_t)f->hp->n_head_kv * f->hp->head_dim;
    int k = 0;
    for (int b0 = 0; b0 < n; b0 += B) {
        int m = n - b0 < B ? n - b0 : B;
        memcpy(f->x, rs->x + (size_t)b0 * d, (size_t)m * d * sizeof(float));
        kvs_fwd_layer_qkv(f, l, rs->pos + b0, m);
        for (int r = 0; r < m; r++) {
            if (cand && !cand[b0 + r]) continue;
            rk[k].row = b0 + r;
            rk[k].dev = deviation(p->deviation, kv, l, rs->pos[b0 + r], f->k + (size_t)r * kvd,
                                  f->v + (size_t)r * kvd, tmp);
            k++;
        }
        kvs_fwd_layer_store_kv(f, l, rs->pos + b0, m, kv);
    }
    return k;
}

int kvs_blend_select(const kvs_context *ctx, kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, const kvs_repair_params *p,
                     const unsigned char *force_in, kvs_blend_trace_fn trace, void *ud, int *resume,
                     long *token_layers) {
    const int c = p->check_layer, n = rs->n, n_layer = f->hp->n_layer;
    const int L = kvs_blend_narrow_len(p, n_layer);
    const size_t d = (size_t)f->hp->n_embd, kvd = (size_t)f->hp->n_head_kv * f->hp->head_dim;
    const size_t cap = n > 0 ? (size_t)n : 1;
    ranked *rk = malloc(cap * sizeof *rk);
    float *tmp = malloc(kvd * sizeof *tmp);
    unsigned char *by_dev = calloc(cap, 1), *force = force_in ? malloc(cap) : NULL;
    if (!rk || !tmp || !by_dev || (force_in && !force)) {
        free(rk);
        free(tmp);
        free(by_dev);
        free(force);
        return kvs_error(KVS_ERR_NOMEM, "cacheblend: out of memory for %d tokens", n);
    }
    if (force) memcpy(force, force_in, (size_t)n); /* compacted with the rows */

    /* Layers before the check layer: every moved token, exactly. */
    int st = kvs_rowset_layers(ctx, f, kv, rs, 0, c);
    long tl = (long)n * c;

    /* The check layer: fresh K/V of every token against the cached ones.
     * Rounded to nearest, so ratio 1 keeps every token and a tiny ratio of
     * a short region may keep none. */
    if (!st) {
        int nr = measure_layer(f, kv, rs, p, c, NULL, rk, tmp);
        tl += n;
        if (!(st = kvs_fwd_overflow_status(f))) {
            int want = (int)(kvs_blend_share(p, 0, n_layer) * n + 0.5);
            rank_keep(rk, nr, want > n ? n : want, p->min_deviation, by_dev);
            compact(rs, d, by_dev, force);
            if (trace) trace(ud, c, rs);
        }
    }

    /* Narrowing: layer c + j re-ranks the rows chosen by deviation so far. */
    for (int j = 1; !st && j <= L; j++) {
        const int l = c + j;
        if ((st = kvs_rowset_layers(ctx, f, kv, rs, l - 1, l))) break; /* the kept rows through layer l - 1 */
        int nr = measure_layer(f, kv, rs, p, l, by_dev, rk, tmp);
        if ((st = kvs_fwd_overflow_status(f))) break;
        tl += rs->n;
        int want = (int)(kvs_blend_share(p, j, n_layer) * n + 0.5);
        rank_keep(rk, nr, want, -INFINITY, by_dev);
        compact(rs, d, by_dev, force);
        if (trace) trace(ud, l, rs);
    }
    *resume = c + L;
    *token_layers = tl;
    free(by_dev);
    free(force);
    free(rk);
    free(tmp);
    return st;
}
