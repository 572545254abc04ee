/* The public entry points of non-prefix reuse (kvstitch.h): segmented
 * prompts, generation with moved documents, warming documents. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "rag/segment_gen.h"

int kvs_segments_tokenize(const kvs_model *model, const kvs_segments *seg, int32_t **tokens, int *n_tokens) {
    if (!model || !seg || !tokens || !n_tokens)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_segments_tokenize: model, segments and outputs must not be NULL");
    kvs_seg_layout lay;
    int st = kvs_seg_layout_build(model, seg, &lay);
    if (st) return st;
    *tokens = lay.tokens;
    *n_tokens = lay.n_tokens;
    lay.tokens = NULL;
    kvs_seg_layout_free(&lay);
    return KVS_OK;
}

static int generate_segments_body(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg,
                          const kvs_generate_params *params, const kvs_reuse_params *reuse,
                          kvs_generate_result *out) {
    double t0 = kvs_now_ms();
    if (!ctx || !cache || !seg || !params || !out)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_segments: need a context, a cache, segments, params and "
                         "a result");
    int st = kvs_generate_params_check(params, "kvs_generate_segments");
    if (st) return st;
    kvs_reuse_params rp = reuse ? *reuse : kvs_reuse_default_params();
    if (!kvs_reuse_mode_name(rp.mode))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_segments: unknown reuse mode %d", (int)rp.mode);
    kvs_seg_options opt = kvs_seg_default_options();
    opt.store_prefix = opt.store_docs = rp.store != 0;
    opt.use_baked = rp.use_baked != 0;
    opt.recal = rp.recal;
    if (rp.mode == KVS_REUSE_NONE) {
        /* Read nothing from the cache: every token is computed, a cold run. */
        opt.use_exact = 0;
        rp.repair.mode = KVS_REPAIR_FULL;
    }
    kvs_seg_layout lay;
    st = kvs_seg_layout_build(kvs_context_model(ctx), seg, &lay);
    if (st) return st;
    double tokenize_ms = kvs_now_ms() - t0;
    kvs_generate_result r;
    st = kvs_seg_generate_at(ctx, cache, &lay, params, &rp.repair, &opt, t0, &r, NULL);
    kvs_seg_layout_free(&lay);
    if (st) return st;
    /* The layout (tokenization) ran after t0: take it out of the assembly. */
    r.timings.tokenize_ms = tokenize_ms;
    r.timings.assemble_ms -= tokenize_ms;
    *out = r;
    return KVS_OK;
}

int kvs_generate_segments(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg,
                          const kvs_generate_params *params, const kvs_reuse_params *reuse,
                          kvs_generate_result *out) {
    KVS_ERROR_KEPT(generate_segments_body(ctx, cache, seg, params, reuse, out));
}

int kvs_seg_docs_layout(kvs_context *ctx, const kvs_segments *seg, kvs_seg_layout *lay) {
    kvs_segments s = *seg;
    if (!s.question || !*s.question) s.question = "?";
    return kvs_seg_layout_build(kvs_context_model(ctx), &s, lay);
}

static void fill_warm_report(const kvs_seg_layout *lay, const kvs_seg_report *sr, double t0, kvs_warm_docs_report *rep) {
    memset(rep, 0, sizeof *rep);
    rep->n_docs = sr->n_docs;
    rep->n_cached = sr->n_docs_hit;
    rep->n_computed = sr->n_docs_computed;
    rep->n_write_errors = sr->docs_put.n_write_errors;
    for (int i = 0; i < lay->n_segs; i++)
        if (lay->segs[i].kind == KVS_SEG_DOC) rep->n_tokens += lay->segs[i].end - lay->segs[i].start;
    rep->ms = kvs_now_ms() - t0;
    rep->too_long_doc = -1;
}

/* After a warm or bake that failed: where a document did not fit, the
 * report names it (the rest of it zero). */
static void report_too_long(kvs_context *ctx, const kvs_seg_layout *lay, int st, kvs_warm_docs_report *rep) {
    if (st != KVS_ERR_CONTEXT_FULL || !rep) return;
    memset(rep, 0, sizeof *rep);
    rep->too_long_doc = kvs_seg_layout_too_long_doc(ctx, lay);
}

static int warm_docs_body(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, kvs_warm_docs_report *rep) {
    double t0 = kvs_now_ms();
    if (!ctx || !cache || !seg)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_warm_docs: need a context, a cache and segments");
    kvs_seg_layout lay;
    int st = kvs_seg_docs_layout(ctx, seg, &lay);
    if (st) return st;
    kvs_seg_report sr;
    st = kvs_seg_warm_docs(ctx, cache, &lay, &sr);
    if (!st && rep) fill_warm_report(&lay, &sr, t0, rep);
    report_too_long(ctx, &lay, st, rep);
    kvs_seg_layout_free(&lay);
    return st;
}

int kvs_warm_docs(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, kvs_warm_docs_report *rep) {
    KVS_ERROR_KEPT(warm_docs_body(ctx, cache, seg, rep));
}

static int bake_docs_body(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, int n_neighbours,
                  kvs_warm_docs_report *rep) {
    double t0 = kvs_now_ms();
    if (!ctx || !cache || !seg)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_bake_docs: need a context, a cache and segments");
    if (n_neighbours == 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_bake_docs: n_neighbours must be > 0 (or < 0 for all the other "
                         "documents); 0 bakes nothing (kvs_warm_docs warms without baking)");
    kvs_seg_layout lay;
    int st = kvs_seg_docs_layout(ctx, seg, &lay);
    if (st) return st;
    kvs_seg_bake_report br;
    st = kvs_seg_bake_docs(ctx, cache, &lay, n_neighbours, &br);
    if (!st && rep) {
        fill_warm_report(&lay, &br.plain, t0, rep);
        rep->n_baked = br.n_baked;
        rep->n_bake_cached = br.n_bake_cached;
        rep->n_unbaked = br.n_unbaked;
    }
    report_too_long(ctx, &lay, st, rep);
    kvs_seg_layout_free(&lay);
    return st;
}

int kvs_bake_docs(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, int n_neighbours,
                  kvs_warm_docs_report *rep) {
    KVS_ERROR_KEPT(bake_docs_body(ctx, cache, seg, n_neighbours, rep));
}
