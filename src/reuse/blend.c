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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "reuse/repair.h"

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
        const void *src = kvs_kv_at(kv, l, plane, h, pos);
        float *dst = out + (size_t)h * kv->head_dim;
        if (kv->type == KVS_KV_F16) kvs_f16_to_f32_row(src, dst, kv->head_dim);
        else memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
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

int kvs_blend_select(kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, const kvs_repair_params *p,
                     const unsigned char *force) {
    const int c = p->check_layer, n = rs->n, B = f->max_rows;
    const size_t d = (size_t)f->hp->n_embd, kvd = (size_t)f->hp->n_head_kv * f->hp->head_dim;
    ranked *rk = malloc((n > 0 ? (size_t)n : 1) * sizeof *rk);
    float *tmp = malloc(kvd * sizeof *tmp);
    if (!rk || !tmp) {
        free(rk);
        free(tmp);
        return kvs_error(KVS_ERR_NOMEM, "cacheblend: out of memory for %d tokens", n);
    }

    /* Layers before the check layer: every moved token, exactly. */
    kvs_rowset_layers(f, kv, rs, 0, c);

    /* The check layer: fresh K/V of every token against the cached ones. */
    for (int b0 = 0; b0 < n; b0 += B) {
        int m = n - b0 < B ? n - b0 : B;
        memcpy(f->x, rs->x + (size_t)b0 * d, (size_t)m * d * sizeof(float));
        kvs_fwd_layer_qkv(f, c, rs->pos + b0, m);
        for (int r = 0; r < m; r++) {
            rk[b0 + r].row = b0 + r;
            rk[b0 + r].dev = deviation(p->deviation, kv, c, rs->pos[b0 + r], f->k + (size_t)r * kvd,
                                       f->v + (size_t)r * kvd, tmp);
        }
        kvs_fwd_layer_store_kv(f, c, rs->pos + b0, m, kv);
    }

    /* The top ratio above the floor. Rounded to nearest, so ratio 1 keeps
     * every token and a tiny ratio of a short region may keep none. */
    int want = (int)((double)p->recompute_ratio * n + 0.5);
    if (want > n) want = n;
    qsort(rk, (size_t)n, sizeof *rk, cmp_ranked);
    int keep = 0;
    while (keep < want && rk[keep].dev > p->min_deviation) keep++;

    /* Compact the rowset to the kept rows in slot order: a keep flag per row,
     * then an in-place forward copy (row r moves to an index <= r). */
    unsigned char *flags = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!flags) {
        free(rk);
        free(tmp);
        return kvs_error(KVS_ERR_NOMEM, "cacheblend: out of memory for %d tokens", n);
    }
    for (int i = 0; i < keep; i++) flags[rk[i].row] = 1;
    for (int r = 0; force && r < n; r++) flags[r] |= force[r];
    int w = 0;
    for (int r = 0; r < n; r++) {
        if (!flags[r]) continue;
        if (w != r) {
            rs->pos[w] = rs->pos[r];
            rs->tok[w] = rs->tok[r];
            memcpy(rs->x + (size_t)w * d, rs->x + (size_t)r * d, d * sizeof(float));
        }
        w++;
    }
    rs->n = w;
    free(flags);
    free(rk);
    free(tmp);
    return KVS_OK;
}
