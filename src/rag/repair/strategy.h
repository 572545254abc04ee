/*
 * Repair strategies as a table: one row per strategy (strategies.c).
 *
 *   row         name          check (the fields it reads)      select (rows, from layer)
 *   none        "none"        -                                {}
 *   selective   "selective"   overlap >= 0                     last overlap of each doc, 0
 *   cacheblend  "cacheblend"  ratio, check layer, deviation,   check layers for all, then
 *                             seams, narrowing, min deviation  the top ratio (blend.c)
 *   firstk      "firstk"      first_k >= 0                     first first_k of each doc, 0
 *   full        "full"        -                                every moved token, 0
 *   query       "query"       ratio, query_seams (overlap)     top ratio by the question's
 *                                                              attention over the moved KV
 *                                                              (+ seams), 0
 *
 * A row's select fills a rowset with the rows to recompute, their hidden
 * states entering layer *l0, and runs whatever layers its choice needs
 * below *l0; the executor (repair.c) then runs layers [*l0, n_layer) for
 * them. Adding a strategy: one file <name>.c with its row, its name in
 * KVS_REPAIR_STRATEGIES below (the table line), and its value in
 * kvs_repair_mode (include/kvstitch.h: the mode is public API).
 */
#ifndef KVS_RAG_REPAIR_STRATEGY_H
#define KVS_RAG_REPAIR_STRATEGY_H

#include "rag/repair/repair.h"
#include "rag/repair/rowset.h"

/* What a strategy's select sees. */
typedef struct kvs_repair_job {
    const kvs_context *ctx; /* its stop poll (kvs_context_poll_stop) */
    kvs_fwd *f;
    kvs_kv_buffer *kv;
    const kvs_repair_region *rg;
    const kvs_repair_params *p;
    kvs_blend_trace_fn trace; /* may be NULL */
    void *ud;
} kvs_repair_job;

typedef struct kvs_repair_strategy {
    kvs_repair_mode mode;
    const char *name; /* as --reuse takes it */
    /* KVS_ERR_INVALID_ARG naming the first field of p this strategy reads
     * that is out of range; NULL: reads none. */
    int (*check)(const kvs_repair_params *p, int n_layer);
    /* Fills rs (allocated here; n = 0 for nothing to recompute) with the
     * rows to recompute from layer *l0 on, x entering *l0. rep->n_check and
     * rep->n_token_layers count the work done here: the executor adds
     * rs->n x (n_layer - *l0). */
    int (*select)(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep);
} kvs_repair_strategy;

/* The row of a mode, NULL if none. */
const kvs_repair_strategy *kvs_repair_strategy_of(kvs_repair_mode mode);

/* Helpers for rows that pick fixed token ranges. */

/* rs = every moved token [start, end), embedded. */
int kvs_repair_rows_all(const kvs_repair_job *job, kvs_rowset *rs);
/* rs = per doc s, the tokens [s.start + lo, s.start + hi) where
 * range(s) gives lo, hi (clipped to the doc), embedded, slots ascending. */
typedef void (*kvs_repair_range_fn)(const kvs_repair_params *p, int doc_len, int *lo, int *hi);
int kvs_repair_rows_per_doc(const kvs_repair_job *job, kvs_repair_range_fn range, kvs_rowset *rs);
/* selective's range: the last overlap tokens of a doc (cacheblend's seams too). */
void kvs_repair_range_seam(const kvs_repair_params *p, int doc_len, int *lo, int *hi);

/* Every strategy's row, in the order names are listed (one file each:
 * <name>.c defines kvs_repair_<name>). */
#define KVS_REPAIR_STRATEGIES(X) X(none) X(selective) X(cacheblend) X(firstk) X(full) X(query)
#define KVS_REPAIR_DECLARE_ROW(name) extern const kvs_repair_strategy kvs_repair_##name;
KVS_REPAIR_STRATEGIES(KVS_REPAIR_DECLARE_ROW)
#undef KVS_REPAIR_DECLARE_ROW

#endif
