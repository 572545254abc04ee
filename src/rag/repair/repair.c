/* The repair of a moved region (repair.h): the strategy's row picks the
 * rows, the rowset executor recomputes them through the last layer. */
#include "rag/repair/repair.h"

#include <string.h>

#include "base/error.h"
#include "rag/repair/strategy.h"

kvs_repair_params kvs_repair_default_params(void) {
    kvs_repair_params p;
    memset(&p, 0, sizeof p);
    /* Chosen with bench/rag_eval over 15 prompts (bench/results/rag_eval_query.md):
     * query-guided selection at 0.10 has 2.6x less first-token KL to a full
     * prefill than the cacheblend + seams hybrid at 0.10 (0.057 vs 0.147: the
     * question reads few of the moved tokens, CacheBlend's deviation cannot
     * find them), agrees more often on the top token and the answer, and
     * recomputes fewer tokens; its scoring pass costs TTFT (4.7x vs 5.9x
     * faster than full in the same run). The cacheblend fields below are its
     * defaults when that strategy is chosen. */
    p.mode = KVS_REPAIR_QUERY;
    p.recompute_ratio = 0.10f;
    p.min_deviation = 0.0f;
    p.check_layer = 1;
    p.deviation = KVS_DEVIATION_V_L2;
    p.overlap = 16;
    p.first_k = 16;
    p.cacheblend_seams = 1;
    p.narrow_from = 0.0f; /* off: see bench/results/rag_eval.md */
    p.narrow_layers = 4;
    p.query_seams = 0;
    return p;
}

static const char *const g_deviation_names[] = {[KVS_DEVIATION_V_L2] = "v-l2", [KVS_DEVIATION_K_COS] = "k-cos"};
enum { N_DEVIATIONS = (int)(sizeof g_deviation_names / sizeof g_deviation_names[0]) };

const char *kvs_deviation_name(kvs_deviation d) {
    return (int)d >= 0 && (int)d < N_DEVIATIONS ? g_deviation_names[d] : NULL;
}

int kvs_deviation_parse(const char *name, kvs_deviation *out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_deviation_parse: NULL out");
    for (int d = 0; name && d < N_DEVIATIONS; d++)
        if (!strcmp(name, g_deviation_names[d])) {
            *out = (kvs_deviation)d;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown deviation metric '%s' (v-l2, k-cos)", name ? name : "");
}

int kvs_repair_run(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p, kvs_repair_report *rep) {
    return kvs_repair_run_traced(ctx, rg, p, NULL, NULL, rep);
}

int kvs_repair_run_traced(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p,
                          kvs_blend_trace_fn trace, void *ud, kvs_repair_report *rep) {
    memset(rep, 0, sizeof *rep);
    kvs_fwd *f = kvs_context_fwd(ctx);
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    const int n_layer = f->hp->n_layer;
    int st = kvs_repair_params_check(p, n_layer);
    if (st) return st;
    if (rg->start < 0 || rg->end < rg->start || rg->end > kv->n_ctx)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: region [%d, %d) does not fit %d slots", rg->start, rg->end,
                         kv->n_ctx);
    if (rg->end == rg->start) return KVS_OK;

    const kvs_repair_strategy *row = kvs_repair_strategy_of(p->mode);
    const kvs_repair_job job = {ctx, f, kv, rg, p, trace, ud};
    kvs_rowset rs;
    int l0 = n_layer;
    double t0 = kvs_now_ms();
    if ((st = row->select(&job, &rs, &l0, rep))) return st;
    double t1 = kvs_now_ms();
    if ((st = kvs_rowset_layers(ctx, f, kv, &rs, l0, n_layer))) {
        kvs_rowset_free(&rs);
        return st;
    }
    rep->n_token_layers += (long)rs.n * (n_layer - l0);
    rep->n_recomputed = rs.n;
    rep->select_ms = t1 - t0;
    rep->recompute_ms = kvs_now_ms() - t1;
    kvs_rowset_free(&rs);
    return KVS_OK;
}
