/* Generation from a segmented prompt with non-prefix reuse (segment_gen.h). */
#include "rag/segment_gen.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "rag/doc_cache.h"
#include "rag/move.h"

kvs_seg_options kvs_seg_default_options(void) {
    kvs_seg_options o = {1, 1, 1, 1, {0.0f, 0.0f}};
    return o;
}

int kvs_recal_params_check(const kvs_recal_params *p) {
    if (p->temperature == 0 && p->scale == 0) return KVS_OK;
    if (!(p->temperature >= KVS_RECAL_MIN && p->temperature <= KVS_RECAL_MAX && p->scale >= KVS_RECAL_MIN &&
          p->scale <= KVS_RECAL_MAX))
        return kvs_error(KVS_ERR_INVALID_ARG, "recalibration: temperature %g and scale %g must both be 0 (off) or "
                         "both in [%g, %g]", (double)p->temperature, (double)p->scale, (double)KVS_RECAL_MIN,
                         (double)KVS_RECAL_MAX);
    return KVS_OK;
}

int kvs_seg_layout_too_long_doc(const kvs_context *ctx, const kvs_seg_layout *lay) {
    for (int i = 0; i < lay->n_segs; i++) {
        const kvs_seg *s = &lay->segs[i];
        if (s->kind == KVS_SEG_DOC && lay->n_doc_prefix + (s->end - s->start) > kvs_context_n_ctx(ctx)) return s->doc;
    }
    return -1;
}

int kvs_seg_layout_check_docs(const kvs_context *ctx, const kvs_seg_layout *lay) {
    if (!lay->tokens || lay->n_tokens <= 0 || lay->n_segs <= 0 || lay->segs[lay->n_segs - 1].kind != KVS_SEG_QUESTION)
        return kvs_error(KVS_ERR_INVALID_ARG, "segments: a layout must end with a non-empty question segment");
    int at = 0, seen_doc = 0, seen_q = 0;
    for (int i = 0; i < lay->n_segs; i++) {
        const kvs_seg *s = &lay->segs[i];
        if (s->start != at || s->end <= s->start)
            return kvs_error(KVS_ERR_INVALID_ARG, "segments: segment %d [%d, %d) does not continue at %d", i, s->start,
                             s->end, at);
        if ((s->kind == KVS_SEG_PREFIX && (seen_doc || i > 0)) || seen_q)
            return kvs_error(KVS_ERR_INVALID_ARG, "segments: the order must be prefix, docs, question");
        if (s->kind == KVS_SEG_DOC && lay->n_doc_prefix + (s->end - s->start) > kvs_context_n_ctx(ctx))
            return kvs_error(KVS_ERR_CONTEXT_FULL, "segments: doc %d has %d tokens; after the doc prefix of %d they do "
                             "not fit the context of %d", s->doc, s->end - s->start, lay->n_doc_prefix,
                             kvs_context_n_ctx(ctx));
        seen_doc |= s->kind == KVS_SEG_DOC;
        seen_q |= s->kind == KVS_SEG_QUESTION;
        at = s->end;
    }
    if (at != lay->n_tokens)
        return kvs_error(KVS_ERR_INVALID_ARG, "segments: the segments cover %d of %d tokens", at, lay->n_tokens);
    return kvs_reuse_check_tokens(ctx, lay->tokens, lay->n_tokens);
}

int kvs_seg_layout_check(const kvs_context *ctx, const kvs_seg_layout *lay) {
    if (lay->n_tokens > kvs_context_n_ctx(ctx))
        return kvs_error(KVS_ERR_CONTEXT_FULL, "the prompt has %d tokens but the context holds %d", lay->n_tokens,
                         kvs_context_n_ctx(ctx));
    return kvs_seg_layout_check_docs(ctx, lay);
}

/* Longest doc of segments [j0, n_segs). */
int kvs_seg_max_doc_len(const kvs_seg_layout *lay, int j0) {
    int m = 0;
    for (int j = j0; j < lay->n_segs; j++)
        if (lay->segs[j].kind == KVS_SEG_DOC && lay->segs[j].end - lay->segs[j].start > m)
            m = lay->segs[j].end - lay->segs[j].start;
    return m;
}

int kvs_seg_acquire_plain_doc(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, int j, int max_doc,
                              int store, kvs_doc_computer *dc, kvs_seg_report *rep, kvs_chunk **out) {
    const kvs_seg *s = &lay->segs[j];
    const int32_t *doc = lay->tokens + s->start;
    int n = s->end - s->start;
    kvs_key parent;
    kvs_doc_parent_key(&cache->fp, lay->doc_prefix, lay->n_doc_prefix, &parent);
    int st = kvs_doc_lookup(cache->store, &cache->fp, &parent, lay->doc_prefix, lay->n_doc_prefix, doc, n, out);
    if (st) return st;
    rep->n_docs++;
    if (*out) {
        rep->n_docs_hit++;
        return KVS_OK;
    }
    double t0 = kvs_now_ms();
    if (!dc->ctx && (st = kvs_doc_computer_init(dc, ctx, cache, lay->doc_prefix, lay->n_doc_prefix, max_doc)))
        return st;
    if ((st = kvs_doc_compute(dc, doc, n, out))) return st;
    /* A failed insert (budget, memory, disk: counted by the store and in
     * docs_put) leaves the doc uncached; this request still has its chunk. */
    if (store) (void)kvs_store_insert_counted(cache->store, *out, NULL, &rep->docs_put);
    rep->n_docs_computed++;
    rep->doc_compute_ms += kvs_now_ms() - t0;
    return KVS_OK;
}

/* The chunk of doc segment j for a request: its baked chunk if asked and
 * there is one, else the plain one. */
static int acquire_doc(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, int j, int j0,
                       const kvs_seg_options *opt, kvs_doc_computer *dc, kvs_seg_report *rep, kvs_chunk **out) {
    if (opt->use_baked) {
        const kvs_seg *s = &lay->segs[j];
        kvs_key parent;
        kvs_doc_parent_key(&cache->fp, lay->doc_prefix, lay->n_doc_prefix, &parent);
        int st = kvs_doc_lookup_baked(cache->store, &parent, lay->tokens + s->start, s->end - s->start, out);
        if (st) return st;
        if (*out) {
            rep->n_docs++;
            rep->n_docs_hit++;
            rep->n_docs_baked++;
            return KVS_OK;
        }
    }
    return kvs_seg_acquire_plain_doc(ctx, cache, lay, j, kvs_seg_max_doc_len(lay, j0), opt->store_docs, dc, rep, out);
}

int kvs_seg_warm_docs(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, kvs_seg_report *rep) {
    kvs_seg_report r;
    memset(&r, 0, sizeof r);
    if (!ctx || !cache || !lay)
        return kvs_error(KVS_ERR_INVALID_ARG, "warm docs: need a context, a cache and a layout");
    int st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_seg_layout_check_docs(ctx, lay);
    if (st) return st;
    kvs_doc_computer dc;
    memset(&dc, 0, sizeof dc);
    for (int j = 0; j < lay->n_segs && !st; j++) {
        if (lay->segs[j].kind != KVS_SEG_DOC) continue;
        kvs_chunk *c = NULL;
        st = kvs_seg_acquire_plain_doc(ctx, cache, lay, j, kvs_seg_max_doc_len(lay, 0), 1, &dc, &r, &c);
        kvs_chunk_unref(c);
    }
    kvs_doc_computer_release(&dc);
    r.n_prompt = lay->n_tokens;
    if (rep) *rep = r;
    return st;
}

typedef struct req {
    kvs_context *ctx;
    kvs_cache *cache;
    const kvs_seg_layout *lay;
    const kvs_repair_params *rp;
    kvs_seg_options opt;
    kvs_seg_report rep;
    kvs_kv_buffer *kv;  /* the context's KV buffer */
    int32_t *pos;       /* (n) 0, 1, 2, ... */
    kvs_seg *moved;     /* (n_segs) the doc segments placed from chunks */
    kvs_doc_computer dc;
} req;

/* Doc segment s's KV from its chunk c, moved to the segment's slots, from
 * slot `from` on (s->start, or past what an exact hit already holds). */
static int place_doc(req *q, const kvs_chunk *c, const kvs_seg *s, int from) {
    kvs_rope_cfg rc = kvs_rope_cfg_of(kvs_model_hparams(kvs_context_model(q->ctx)));
    return kvs_move_chunk_to_kv(c, from - s->start, s->end - from, kvs_context_kv(q->ctx), from, &rc,
                                kvs_context_fwd(q->ctx)->pool);
}

/* The first document right after a layout equal to the documents' own
 * prefix (no system prompt or chat turn before it) is an exact prefix: its
 * plain chunk was computed there, and a later request finds that chunk by
 * the exact lookup (it is keyed as the prefix's continuation). The first
 * request takes it as exact too, after computing it: it had moved it by 0
 * and repaired it with the others, so that the first and every later run of
 * one request gave different bits (a warm before them changed the output).
 * An exact hit that ends inside the doc (another prompt's chunks, a prefix
 * of this one) is taken the same way, the chunk placed past the hit (both
 * hold a cold prefill's bits for the tokens they share; the hit had been
 * cut back to the doc's start and the doc repaired, so that an unrelated
 * earlier request changed the answer). *E (the exact hit, short of the doc's end) becomes the doc's end. */
/* The first document's segment index, -1 if none comes before the question. */
static int first_doc(const kvs_seg_layout *lay) {
    int jd = 0;
    while (jd < lay->n_segs && lay->segs[jd].kind != KVS_SEG_DOC) jd++;
    return jd < lay->n_segs - 1 ? jd : -1;
}


/* The exact hit E a request that moves its documents may take: up to its
 * first document's start, or its end where that document is an exact
 * prefix (exact_first_doc). A hit past it (the exact KV of the same text
 * another request stored: a `full` request, a plain prompt) had been taken
 * whole, so that the answer depended on what earlier requests had stored
 * (a determinism attack on the server: the same request answered otherwise
 * after a `full` one). */
static int exact_cap(const kvs_seg_layout *lay, int E) {
    const int jd = first_doc(lay);
    if (jd < 0) return E;
    const kvs_seg *s = &lay->segs[jd];
    const int cap = kvs_seg_doc_at_own_prefix(lay, s) ? s->end : s->start;
    return E < cap ? E : cap;
}

static int exact_first_doc(req *q, int *E) {
    const kvs_seg_layout *lay = q->lay;
    const int jd = first_doc(lay);
    if (jd < 0) return KVS_OK; /* no doc before the question */
    const kvs_seg *s = &lay->segs[jd];
    if (!kvs_seg_doc_at_own_prefix(lay, s)) return KVS_OK;
    if (*E >= s->end) { /* the hit holds the document: it came from the cache (as it does from RAM) */
        q->rep.n_docs++;
        q->rep.n_docs_hit++;
        return KVS_OK;
    }
    int st = KVS_OK;
    if (*E < s->start) {
        if ((st = kvs_decode(q->ctx, lay->tokens + *E, q->pos + *E, s->start - *E, NULL))) return st;
        q->rep.n_exact_now += s->start - *E;
    }
    kvs_chunk *c = NULL;
    const int computed = q->rep.n_docs_computed, from = *E > s->start ? *E : s->start;
    st = kvs_seg_acquire_plain_doc(q->ctx, q->cache, lay, jd, kvs_seg_max_doc_len(lay, jd), q->opt.store_docs, &q->dc,
                                   &q->rep, &c);
    if (!st) st = place_doc(q, c, s, from); /* by 0: its own slots */
    kvs_chunk_unref(c);
    if (!st && q->rep.n_docs_computed > computed) q->rep.n_exact_now += s->end - from; /* not from the cache */
    if (!st) *E = s->end;
    return st;
}

/* Exact prefix, live prefix, docs, repair. Returns the number of prompt
 * tokens whose KV is in place (the question and anything after starts there). */
static int assemble(req *q, int *n_ready, int *exact_end) {
    const kvs_seg_layout *lay = q->lay;
    const int n = lay->n_tokens;
    kvs_cache *cache = q->cache;
    int st, E = 0;
    if (q->opt.use_exact) {
        kvs_prefix_hit hit;
        memset(&hit, 0, sizeof hit);
        double t_lookup = kvs_now_ms();
        /* n - 1: the last token always runs, for the first logits. */
        st = kvs_store_lookup_into(cache->store, lay->tokens, n - 1, q->kv, &hit);
        q->rep.lookup_ms = kvs_now_ms() - t_lookup;
        E = hit.n_cached;
        kvs_store_release_hit(cache->store, &hit); /* copied into the context */
        if (st) return st;
    }
    /* (the full strategy computes all past the hit exactly: any hit gives its bits) */
    if (q->rp->mode != KVS_REPAIR_FULL) {
        E = exact_cap(lay, E);
        if (q->opt.use_exact && (st = exact_first_doc(q, &E))) return st;
    }
    /* The first doc the exact hit does not cover fully; the hit is cut back
     * to its start (its KV gets overwritten by the doc's chunk). */
    int j0 = -1;
    for (int j = 0; j < lay->n_segs; j++)
        if (lay->segs[j].kind == KVS_SEG_DOC && lay->segs[j].end > E) {
            j0 = j;
            break;
        }
    if (q->rp->mode == KVS_REPAIR_FULL || j0 < 0) {
        /* Everything after the hit is computed by the prefill: exact. */
        q->rep.n_exact = E;
        for (int j = 0; j < lay->n_segs; j++)
            if (lay->segs[j].kind == KVS_SEG_DOC) {
                int a = lay->segs[j].start > E ? lay->segs[j].start : E;
                if (lay->segs[j].end > a) q->rep.n_recomputed += lay->segs[j].end - a;
            }
        q->rep.n_token_layers =
            (long)q->rep.n_recomputed * kvs_model_hparams(kvs_context_model(q->ctx))->n_layer;
        q->rep.n_live = n - E;
        *n_ready = E;
        *exact_end = n;
        return KVS_OK;
    }
    const int D = lay->segs[j0].start, Q = lay->segs[lay->n_segs - 1].start;
    if (E > D) E = D;
    q->rep.n_exact = E;
    if (E < D && (st = kvs_decode(q->ctx, lay->tokens + E, q->pos + E, D - E, NULL))) return st;

    double t_move = 0.0;
    int n_moved_segs = 0;
    for (int j = j0; j < lay->n_segs - 1; j++) {
        const kvs_seg *s = &lay->segs[j];
        kvs_chunk *c = NULL;
        if ((st = acquire_doc(q->ctx, cache, lay, j, j0, &q->opt, &q->dc, &q->rep, &c))) return st;
        double t0 = kvs_now_ms();
        st = place_doc(q, c, s, s->start);
        t_move += kvs_now_ms() - t0;
        kvs_chunk_unref(c);
        if (st) return st;
        q->moved[n_moved_segs++] = *s;
        q->rep.n_moved += s->end - s->start;
    }
    q->rep.move_ms = t_move;
    q->rep.n_live = (D - E) + (n - Q);

    double t0 = kvs_now_ms();
    kvs_repair_region rg = {lay->tokens, D, Q, q->moved, n_moved_segs, lay->n_tokens};
    kvs_repair_report rr;
    if ((st = kvs_repair_run(q->ctx, &rg, q->rp, &rr))) return st;
    q->rep.repair_ms = kvs_now_ms() - t0;
    q->rep.n_recomputed = rr.n_recomputed;
    q->rep.n_check = rr.n_check;
    q->rep.n_token_layers = rr.n_token_layers;
    if (n_moved_segs > 0 && q->opt.recal.temperature > 0)
        q->kv->recal = (kvs_attn_recal){D, Q, 1.0f / q->opt.recal.temperature, q->opt.recal.scale};
    *n_ready = Q;
    *exact_end = D;
    return KVS_OK;
}

int kvs_seg_generate(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, const kvs_generate_params *gp,
                     const kvs_repair_params *rp, const kvs_seg_options *opt, kvs_generate_result *out,
                     kvs_seg_report *rep) {
    return kvs_seg_generate_at(ctx, cache, lay, gp, rp, opt, kvs_now_ms(), out, rep);
}

int kvs_seg_generate_at(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, const kvs_generate_params *gp,
                        const kvs_repair_params *rp, const kvs_seg_options *opt, double t0, kvs_generate_result *out,
                        kvs_seg_report *rep) {
    if (!ctx || !cache || !lay || !gp || !rp || !out)
        return kvs_error(KVS_ERR_INVALID_ARG, "segments: need a context, a cache, a layout, params and a result");
    int st = kvs_generate_params_check(gp, "segments");
    if (!st) st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_seg_layout_check(ctx, lay);
    if (!st) st = kvs_repair_params_check(rp, kvs_model_hparams(kvs_context_model(ctx))->n_layer);
    if (!st && opt) st = kvs_recal_params_check(&opt->recal);
    if (st) return st;

    req q;
    memset(&q, 0, sizeof q);
    q.ctx = ctx;
    q.cache = cache;
    q.lay = lay;
    q.rp = rp;
    q.opt = opt ? *opt : kvs_seg_default_options();
    q.rep.n_prompt = lay->n_tokens;
    const int n = lay->n_tokens;
    q.pos = malloc((size_t)n * sizeof *q.pos);
    q.moved = malloc((size_t)lay->n_segs * sizeof *q.moved);
    if (!q.pos || !q.moved) st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
    for (int i = 0; !st && i < n; i++) q.pos[i] = i;
    q.kv = kvs_context_kv(ctx);
    kvs_kv_recal_end(q.kv, 0); /* a new sequence */

    int n_ready = 0, exact_end = 0;
    kvs_generate_result r;
    memset(&r, 0, sizeof r);
    if (!st) st = assemble(&q, &n_ready, &exact_end);
    kvs_doc_computer_release(&q.dc); /* before generation: its buffer can be large */
    q.rep.assemble_ms = kvs_now_ms() - t0 - q.rep.repair_ms;
    if (!st) st = kvs_generate_from(ctx, lay->tokens, n, n_ready, gp, t0, &r);
    if (!st && (!(r.reuse = calloc(1, sizeof *r.reuse)) || !(r.docs = calloc(1, sizeof *r.docs))))
        st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
    if (!st) {
        r.n_live = q.rep.n_live;
        /* The phases before the prefill, consecutive from t0. */
        r.timings.lookup_ms = q.rep.lookup_ms;
        r.timings.assemble_ms = q.rep.assemble_ms - q.rep.lookup_ms;
        r.timings.repair_ms = q.rep.repair_ms;
        /* cached: what the cache served, not the exact prefix this request
         * computed itself (an empty cache had reported the first document
         * as cached tokens) */
        r.reuse->n_cached = q.rep.n_exact - q.rep.n_exact_now;
        /* Reused = served without recompute: the exact prefix, plus the moved
         * tokens the repair kept (`full` moves nothing). */
        int kept = q.rep.n_moved - q.rep.n_recomputed;
        r.reuse->n_reused = r.reuse->n_cached + (q.rp->mode != KVS_REPAIR_FULL && kept > 0 ? kept : 0);
        r.reuse->cache_hit_ratio = (double)r.reuse->n_reused / n;
        r.docs->n_moved = q.rep.n_moved;
        /* of the moved tokens: a cold run (KVS_REUSE_NONE) moves none, and
         * its documents are computed, not recomputed (the server had
         * reported -89 cached tokens for one) */
        r.docs->n_recomputed = q.rep.n_recomputed < q.rep.n_moved ? q.rep.n_recomputed : q.rep.n_moved;
        r.docs->n_docs_hit = q.rep.n_docs_hit;
        r.docs->n_docs_computed = q.rep.n_docs_computed;
        r.docs->n_docs_baked = q.rep.n_docs_baked;
        r.docs->n_token_layers = q.rep.n_token_layers;
        st = kvs_reuse_chunk_ends(n, cache->chunk_tokens, lay->borders, lay->n_borders, &r.reuse->chunk_ends,
                                  &r.reuse->n_chunks);
    }
    if (!st && q.opt.store_prefix && exact_end > 0) {
        /* Only the exact part: moved and repaired KV must never be served as
         * an exact prefix. A failed store does not fail the request. */
        kvs_put_report put;
        memset(&put, 0, sizeof put);
        kvs_store_put_prefix(cache->store, lay->tokens, exact_end, cache->chunk_tokens, lay->borders, lay->n_borders,
                             q.kv, &put);
        q.rep.n_stored = put.n_new;
        r.reuse->n_chunks_stored = put.n_new;
        r.reuse->n_write_errors = put.n_write_errors;
        snprintf(r.reuse->write_error, sizeof r.reuse->write_error, "%s", put.write_error);
    }
    if (!st) { /* docs that only memory holds */
        r.reuse->n_write_errors += q.rep.docs_put.n_write_errors;
        if (!r.reuse->write_error[0])
            snprintf(r.reuse->write_error, sizeof r.reuse->write_error, "%s", q.rep.docs_put.write_error);
    }
    free(q.pos);
    free(q.moved);
    if (st) {
        kvs_generate_result_free(&r);
        return st;
    }
    *out = r;
    if (rep) *rep = q.rep;
    return KVS_OK;
}
