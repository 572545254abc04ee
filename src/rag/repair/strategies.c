/* The strategy table (strategy.h): lookup, names, parameter checks, and the
 * row builders shared by the fixed-range strategies. */
#include "rag/repair/strategy.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"

#define KVS_REPAIR_ROW_PTR(name) &kvs_repair_##name,
static const kvs_repair_strategy *const g_rows[] = {KVS_REPAIR_STRATEGIES(KVS_REPAIR_ROW_PTR)};
#undef KVS_REPAIR_ROW_PTR
enum { N_ROWS = (int)(sizeof g_rows / sizeof g_rows[0]) };

const kvs_repair_strategy *kvs_repair_strategy_of(kvs_repair_mode mode) {
    for (int i = 0; i < N_ROWS; i++)
        if (g_rows[i]->mode == mode) return g_rows[i];
    return NULL;
}

const char *kvs_repair_mode_name(kvs_repair_mode mode) {
    const kvs_repair_strategy *s = kvs_repair_strategy_of(mode);
    return s ? s->name : NULL;
}

int kvs_repair_mode_parse(const char *name, kvs_repair_mode *out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_repair_mode_parse: NULL out");
    char names[256] = "";
    for (int i = 0; i < N_ROWS; i++) {
        if (name && !strcmp(name, g_rows[i]->name)) {
            *out = g_rows[i]->mode;
            return KVS_OK;
        }
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", g_rows[i]->name);
    }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown repair strategy '%s' (%s)", name ? name : "", names);
}

/* One parameter struct serves every strategy, so every row's fields must be
 * in range whatever the mode (a bad value is an error even where unused). */
int kvs_repair_params_check(const kvs_repair_params *p, int n_layer) {
    if (!kvs_repair_strategy_of(p->mode))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: unknown mode %d", (int)p->mode);
    for (int i = 0; i < N_ROWS; i++) {
        int st = g_rows[i]->check ? g_rows[i]->check(p, n_layer) : KVS_OK;
        if (st) return st;
    }
    return KVS_OK;
}

int kvs_repair_rows_all(const kvs_repair_job *job, kvs_rowset *rs) {
    const kvs_repair_region *rg = job->rg;
    int st = kvs_rowset_alloc(rs, rg->end - rg->start, job->f->hp->n_embd);
    if (st) return st;
    for (int r = 0; r < rs->n; r++) {
        rs->pos[r] = rg->start + r;
        rs->tok[r] = rg->tokens[rg->start + r];
    }
    kvs_rowset_embed(job->f, rs);
    return KVS_OK;
}

/* [lo, hi) of doc i, clipped to the doc, in prompt slots. */
static void doc_range(const kvs_repair_job *job, kvs_repair_range_fn range, int i, int *lo, int *hi) {
    const kvs_seg *s = &job->rg->docs[i];
    int len = s->end - s->start, a = 0, b = len;
    range(job->p, len, &a, &b);
    a = a < 0 ? 0 : a > len ? len : a;
    b = b < a ? a : b > len ? len : b;
    *lo = s->start + a;
    *hi = s->start + b;
}

int kvs_repair_rows_per_doc(const kvs_repair_job *job, kvs_repair_range_fn range, kvs_rowset *rs) {
    int n = 0, lo, hi;
    for (int i = 0; i < job->rg->n_docs; i++) {
        doc_range(job, range, i, &lo, &hi);
        n += hi - lo;
    }
    int st = kvs_rowset_alloc(rs, n, job->f->hp->n_embd);
    if (st) return st;
    int k = 0;
    for (int i = 0; i < job->rg->n_docs; i++) {
        doc_range(job, range, i, &lo, &hi);
        for (int t = lo; t < hi; t++, k++) {
            rs->pos[k] = t;
            rs->tok[k] = job->rg->tokens[t];
        }
    }
    kvs_rowset_embed(job->f, rs);
    return KVS_OK;
}

void kvs_repair_range_seam(const kvs_repair_params *p, int doc_len, int *lo, int *hi) {
    *lo = doc_len - (p->overlap < doc_len ? p->overlap : doc_len);
    *hi = doc_len;
}
