/* Strategy "cacheblend": the check layers for every moved token, then the
 * top recompute_ratio by deviation from there on (blend.c has the method);
 * with cacheblend_seams, selective's tokens are kept as well. */
#include <stdlib.h>

#include "base/error.h"
#include "rag/repair/blend.h"
#include "rag/repair/strategy.h"

static int check_cacheblend(const kvs_repair_params *p, int n_layer) {
    if (!(p->recompute_ratio >= 0.0f && p->recompute_ratio <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: recompute ratio must be in [0, 1], got %g",
                         (double)p->recompute_ratio);
    if (!(p->min_deviation >= 0.0f))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: min deviation must be >= 0, got %g", (double)p->min_deviation);
    /* against the model's layers only where it is used: the default (1) had
     * made every documents request on a 1-layer model fail, whatever its
     * strategy */
    if (p->check_layer < 0 || (p->mode == KVS_REPAIR_CACHEBLEND && p->check_layer >= n_layer))
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
    return KVS_OK;
}

/* force[r] = 1 for the rows selective would pick (the seams), rows being
 * every moved token. NULL without seams or on allocation failure (*st). */
static unsigned char *seam_rows(const kvs_repair_job *job, int n, int *st) {
    *st = KVS_OK;
    if (!job->p->cacheblend_seams) return NULL;
    unsigned char *force = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!force) {
        *st = kvs_error(KVS_ERR_NOMEM, "repair: out of memory");
        return NULL;
    }
    for (int i = 0; i < job->rg->n_docs; i++) {
        const kvs_seg *s = &job->rg->docs[i];
        int lo, hi;
        kvs_repair_range_seam(job->p, s->end - s->start, &lo, &hi);
        for (int t = s->start + lo; t < s->start + hi; t++) force[t - job->rg->start] = 1;
    }
    return force;
}

static int select_cacheblend(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    const kvs_repair_params *p = job->p;
    /* Nothing to recompute: the check layers would only serve a selection. */
    if (p->recompute_ratio <= 0.0f) {
        *l0 = job->f->hp->n_layer;
        return kvs_rowset_alloc(rs, 0, job->f->hp->n_embd);
    }
    int st = kvs_repair_rows_all(job, rs);
    if (st) return st;
    rep->n_check = rs->n;
    unsigned char *force = seam_rows(job, rs->n, &st);
    long tl = 0;
    if (!st) st = kvs_blend_select(job->ctx, job->f, job->kv, rs, p, force, job->trace, job->ud, l0, &tl);
    free(force);
    if (st) {
        kvs_rowset_free(rs);
        return st;
    }
    /* layer *l0's fresh K/V of the kept rows are written (and counted in
     * tl) already; the executor re-runs that layer for their hidden states
     * and counts it again, so take it out here */
    rep->n_token_layers = tl - rs->n;
    return KVS_OK;
}

const kvs_repair_strategy kvs_repair_cacheblend = {KVS_REPAIR_CACHEBLEND, "cacheblend", check_cacheblend,
                                                   select_cacheblend};
