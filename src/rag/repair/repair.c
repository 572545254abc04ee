/* Repair strategies and the sparse layer-major recompute (repair.h). */
#include "rag/repair/repair.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

kvs_repair_params kvs_repair_default_params(void) {
    kvs_repair_params p;
    memset(&p, 0, sizeof p);
    p.mode = KVS_REPAIR_CACHEBLEND;
    /* Chosen with bench/rag_eval (bench/results/rag_eval.md): the hybrid at
     * 0.10 was as fast as plain CacheBlend at 0.15 and closer to full. */
    p.recompute_ratio = 0.10f;
    p.min_deviation = 0.0f;
    p.check_layer = 1;
    p.deviation = KVS_DEVIATION_V_L2;
    p.overlap = 16;
    p.first_k = 16;
    p.cacheblend_seams = 1;
    p.narrow_from = 0.0f; /* off: see bench/results/rag_eval.md */
    p.narrow_layers = 4;
    return p;
}

const char *kvs_repair_mode_name(kvs_repair_mode mode) {
    switch (mode) {
    case KVS_REPAIR_NONE: return "none";
    case KVS_REPAIR_SELECTIVE: return "selective";
    case KVS_REPAIR_CACHEBLEND: return "cacheblend";
    case KVS_REPAIR_FIRSTK: return "firstk";
    case KVS_REPAIR_FULL: return "full";
    }
    return NULL;
}

int kvs_repair_mode_parse(const char *name, kvs_repair_mode *out) {
    for (int m = KVS_REPAIR_NONE; name && m <= KVS_REPAIR_FULL; m++)
        if (!strcmp(name, kvs_repair_mode_name((kvs_repair_mode)m))) {
            *out = (kvs_repair_mode)m;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown repair strategy '%s' (none, selective, cacheblend, firstk, full)",
                     name ? name : "");
}

const char *kvs_deviation_name(kvs_deviation d) {
    switch (d) {
    case KVS_DEVIATION_V_L2: return "v-l2";
    case KVS_DEVIATION_K_COS: return "k-cos";
    }
    return NULL;
}

int kvs_deviation_parse(const char *name, kvs_deviation *out) {
    for (int d = KVS_DEVIATION_V_L2; name && d <= KVS_DEVIATION_K_COS; d++)
        if (!strcmp(name, kvs_deviation_name((kvs_deviation)d))) {
            *out = (kvs_deviation)d;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown deviation metric '%s' (v-l2, k-cos)", name ? name : "");
}

int kvs_repair_params_check(const kvs_repair_params *p, int n_layer) {
    if (!kvs_repair_mode_name(p->mode)) return kvs_error(KVS_ERR_INVALID_ARG, "repair: unknown mode %d", (int)p->mode);
    if (!(p->recompute_ratio >= 0.0f && p->recompute_ratio <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: recompute ratio must be in [0, 1], got %g",
                         (double)p->recompute_ratio);
    if (!(p->min_deviation >= 0.0f))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: min deviation must be >= 0, got %g", (double)p->min_deviation);
    if (p->check_layer < 0 || p->check_layer >= n_layer)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: check layer must be in 0..%d, got %d", n_layer - 1,
                         p->check_layer);
    if (!kvs_deviation_name(p->deviation))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: unknown deviation metric %d", (int)p->deviation);
    if (p->cacheblend_seams != 0 && p->cacheblend_seams != 1)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: cacheblend_seams must be 0 or 1, got %d", p->cacheblend_seams);
    if (p->narrow_from != 0.0f && !(p->narrow_from >= p->recompute_ratio && p->narrow_from <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARG,
                         "repair: narrow-from must be 0 (off) or in [recompute ratio %g, 1], got %g",
                         (double)p->recompute_ratio, (double)p->narrow_from);
    if (p->narrow_from != 0.0f && p->narrow_layers < 1)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: narrow layers must be >= 1, got %d", p->narrow_layers);
    if (p->overlap < 0 || p->first_k < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: overlap (%d) and first-k (%d) must be >= 0", p->overlap,
                         p->first_k);
    return KVS_OK;
}

/* --- rowsets -------------------------------------------------------------- */

int kvs_rowset_alloc(kvs_rowset *rs, int n, int n_embd) {
    memset(rs, 0, sizeof *rs);
    size_t rows = n > 0 ? (size_t)n : 1;
    rs->pos = malloc(rows * sizeof *rs->pos);
    rs->tok = malloc(rows * sizeof *rs->tok);
    rs->x = malloc(rows * (size_t)n_embd * sizeof *rs->x);
    if (!rs->pos || !rs->tok || !rs->x) {
        kvs_rowset_free(rs);
        return kvs_error(KVS_ERR_NOMEM, "repair: cannot allocate the state of %d rows", n);
    }
    rs->n = n;
    return KVS_OK;
}

void kvs_rowset_free(kvs_rowset *rs) {
    free(rs->pos);
    free(rs->tok);
    free(rs->x);
    memset(rs, 0, sizeof *rs);
}

void kvs_rowset_embed(kvs_fwd *f, kvs_rowset *rs) {
    const kvs_wmat *emb = kvs_model_tok_embd(f->model);
    const size_t d = (size_t)f->hp->n_embd;
    for (int r = 0; r < rs->n; r++) kvs_wmat_get_row(emb, rs->tok[r], rs->x + (size_t)r * d);
}

void kvs_rowset_layers(kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, int l0, int l1) {
    const size_t d = (size_t)f->hp->n_embd;
    const int B = f->max_rows;
    for (int l = l0; l < l1; l++) {
        for (int b0 = 0; b0 < rs->n; b0 += B) {
            int m = rs->n - b0 < B ? rs->n - b0 : B;
            /* The rows' residual stream goes through the forward scratch. */
            memcpy(f->x, rs->x + (size_t)b0 * d, (size_t)m * d * sizeof(float));
            kvs_fwd_layer(f, l, rs->pos + b0, m, kv);
            memcpy(rs->x + (size_t)b0 * d, f->x, (size_t)m * d * sizeof(float));
        }
    }
}

/* --- strategies ------------------------------------------------------------- */

/* Rows of a fixed-set strategy: per doc, [lo, hi) clipped to the doc. */
static int fixed_rows(const kvs_repair_region *rg, const kvs_repair_params *p, kvs_rowset *rs, int n_embd) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        int k = 0;
        for (int i = 0; i < rg->n_docs; i++) {
            const kvs_seg *s = &rg->docs[i];
            int lo = s->start, hi = s->end, len = s->end - s->start;
            if (p->mode == KVS_REPAIR_SELECTIVE) lo = s->end - (p->overlap < len ? p->overlap : len);
            else if (p->mode == KVS_REPAIR_FIRSTK) hi = s->start + (p->first_k < len ? p->first_k : len);
            for (int t = lo; t < hi; t++, k++)
                if (pass == 1) {
                    rs->pos[k] = t;
                    rs->tok[k] = rg->tokens[t];
                }
        }
        if (pass == 0) {
            n = k;
            int st = kvs_rowset_alloc(rs, n, n_embd);
            if (st) return st;
        }
    }
    return KVS_OK;
}

static int all_rows(const kvs_repair_region *rg, kvs_rowset *rs, int n_embd) {
    int st = kvs_rowset_alloc(rs, rg->end - rg->start, n_embd);
    if (st) return st;
    for (int r = 0; r < rs->n; r++) {
        rs->pos[r] = rg->start + r;
        rs->tok[r] = rg->tokens[rg->start + r];
    }
    return KVS_OK;
}

int kvs_repair_run(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p, kvs_repair_report *rep) {
    return kvs_repair_run_traced(ctx, rg, p, NULL, NULL, rep);
}

int kvs_repair_run_traced(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p,
                          kvs_blend_trace_fn trace, void *ud, kvs_repair_report *rep) {
    memset(rep, 0, sizeof *rep);
    kvs_fwd *f = kvs_context_fwd(ctx);
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    const int n_layer = f->hp->n_layer, n_embd = f->hp->n_embd;
    int st = kvs_repair_params_check(p, n_layer);
    if (st) return st;
    if (rg->start < 0 || rg->end < rg->start || rg->end > kv->n_ctx)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: region [%d, %d) does not fit %d slots", rg->start, rg->end,
                         kv->n_ctx);
    if (p->mode == KVS_REPAIR_NONE || rg->end == rg->start) return KVS_OK;
    /* Nothing to recompute: the check layers would only serve a selection. */
    if (p->mode == KVS_REPAIR_CACHEBLEND && p->recompute_ratio <= 0.0f) return KVS_OK;

    kvs_rowset rs;
    double t0 = kvs_now_ms();
    int l0 = 0;
    if (p->mode == KVS_REPAIR_CACHEBLEND) {
        if ((st = all_rows(rg, &rs, n_embd))) return st;
        rep->n_check = rs.n;
        unsigned char *force = NULL;
        if (p->cacheblend_seams) {
            /* selective's rows: the last `overlap` tokens of every doc */
            if (!(force = calloc((size_t)rs.n, 1))) {
                kvs_rowset_free(&rs);
                return kvs_error(KVS_ERR_NOMEM, "repair: out of memory");
            }
            for (int i = 0; i < rg->n_docs; i++) {
                const kvs_seg *s = &rg->docs[i];
                int len = s->end - s->start, lo = s->end - (p->overlap < len ? p->overlap : len);
                for (int t = lo; t < s->end; t++) force[t - rg->start] = 1;
            }
        }
        kvs_rowset_embed(f, &rs);
        st = kvs_blend_select(f, kv, &rs, p, force, trace, ud, &l0, &rep->n_token_layers);
        free(force);
        if (st) {
            kvs_rowset_free(&rs);
            return st;
        }
        /* layer l0's fresh K/V are written (and counted) already; the
         * rows re-run it for their hidden states */
        rep->n_token_layers += (long)rs.n * (n_layer - l0 - 1);
    } else {
        st = p->mode == KVS_REPAIR_FULL ? all_rows(rg, &rs, n_embd) : fixed_rows(rg, p, &rs, n_embd);
        if (st) return st;
        kvs_rowset_embed(f, &rs);
        rep->n_token_layers = (long)rs.n * n_layer;
    }
    double t1 = kvs_now_ms();
    kvs_rowset_layers(f, kv, &rs, l0, n_layer);
    rep->n_recomputed = rs.n;
    rep->select_ms = t1 - t0;
    rep->recompute_ms = kvs_now_ms() - t1;
    kvs_rowset_free(&rs);
    return KVS_OK;
}
