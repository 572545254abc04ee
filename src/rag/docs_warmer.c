/* kvs_docs_warmer (kvstitch.h): kvs_warm_docs a slice at a time, so that a
 * scheduler computes a request's uncached prompt prefix (the system
 * segment, before the first document) and documents between the decode
 * steps of its other streams instead of in one long step. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "kv/store.h"
#include "rag/segment_gen.h"

struct kvs_docs_warmer {
    kvs_context *ctx;
    kvs_cache *cache;
    kvs_seg_layout lay;
    int use_baked;
    kvs_key parent;       /* the doc prefix's key */
    kvs_doc_computer dc;  /* initialised at the first uncached document */
    int prefix_done;      /* the exact prefix [0, D) is in the context and stored */
    int n_prefix_at;      /* tokens of it in the context (looked up, then computed) */
    int n_prefix_computed;
    int n_exact_doc_computed; /* the first document's tokens, computed here at its own prefix */
    int32_t *pos;         /* (D) 0, 1, 2, ... */
    int j;                /* the segment being looked at */
    int computing;        /* segment j is uncached: n_done of its tokens are computed */
    int n_done;
    kvs_seg_report rep;
    double ms;
};

int kvs_docs_warmer_new(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, int use_baked,
                        kvs_docs_warmer **out) {
    if (!ctx || !cache || !seg || !out) /* (*out untouched on failure, as every constructor's) */
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_docs_warmer_new: need a context, a cache, segments and an output");
    int st = kvs_reuse_check_context(ctx, cache);
    if (st) return st;
    kvs_docs_warmer *w = calloc(1, sizeof *w);
    if (!w) return kvs_error(KVS_ERR_NOMEM, "kvs_docs_warmer_new: out of memory");
    if ((st = kvs_seg_docs_layout(ctx, seg, &w->lay)) || (st = kvs_seg_layout_check_docs(ctx, &w->lay))) {
        kvs_docs_warmer_free(w);
        return st;
    }
    w->ctx = ctx;
    w->cache = cache;
    w->use_baked = use_baked != 0;
    kvs_doc_parent_key(&cache->fp, w->lay.doc_prefix, w->lay.n_doc_prefix, &w->parent);
    *out = w;
    return KVS_OK;
}

/* Segment j is cached (its baked entry with use_baked, else its plain one). */
static int is_cached(kvs_docs_warmer *w, const kvs_seg *s, int *cached) {
    const int32_t *doc = w->lay.tokens + s->start;
    const int n = s->end - s->start;
    kvs_chunk *c = NULL;
    int st = w->use_baked ? kvs_doc_lookup_baked(w->cache->store, &w->parent, doc, n, &c) : KVS_OK;
    if (!st && !c)
        st = kvs_doc_lookup(w->cache->store, &w->cache->fp, &w->parent, w->lay.doc_prefix, w->lay.n_doc_prefix, doc,
                            n, &c);
    *cached = c != NULL;
    kvs_chunk_unref(c);
    return st;
}

/* The prompt before the first document, as kvs_generate_segments serves it
 * exactly: looked up (the cached part copied into the context), the rest
 * computed in slices of the budget, then stored by prefix with the layout's
 * chunk borders (generate's own store), so the request's lookup hits it. */
static int prefix_step(kvs_docs_warmer *w, int *budget) {
    const int j0 = kvs_seg_layout_first_doc(&w->lay);
    const int D = j0 < 0 ? 0 : w->lay.segs[j0].start;
    int st = KVS_OK;
    if (D > 0 && !w->pos) {
        if (!(w->pos = malloc((size_t)D * sizeof *w->pos))) return kvs_error(KVS_ERR_NOMEM, "docs warmer: out of memory");
        for (int i = 0; i < D; i++) w->pos[i] = i;
        kvs_prefix_hit hit;
        memset(&hit, 0, sizeof hit);
        st = kvs_store_lookup_into(w->cache->store, w->lay.tokens, D, kvs_context_kv(w->ctx), &hit);
        w->n_prefix_at = hit.n_cached;
        kvs_store_release_hit(w->cache->store, &hit);
        if (st) return st;
    }
    if (w->n_prefix_at < D) {
        int m = D - w->n_prefix_at < *budget ? D - w->n_prefix_at : *budget;
        if ((st = kvs_decode(w->ctx, w->lay.tokens + w->n_prefix_at, w->pos + w->n_prefix_at, m, NULL))) return st;
        w->n_prefix_at += m;
        w->n_prefix_computed += m;
        *budget -= m;
        if (w->n_prefix_at < D) return KVS_OK;
    }
    if (w->n_prefix_computed > 0) { /* a failed store leaves it to the request */
        kvs_put_report put;
        memset(&put, 0, sizeof put);
        kvs_store_put_prefix(w->cache->store, w->lay.tokens, D, w->cache->chunk_tokens, w->lay.borders,
                             w->lay.n_borders, kvs_context_kv(w->ctx), &put);
    }
    w->prefix_done = 1;
    return KVS_OK;
}

static int docs_warmer_step_body(kvs_docs_warmer *w, int max_tokens, int *done) {
    if (!w || !done || max_tokens < 1)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_docs_warmer_step: need a warmer, max_tokens >= 1 and an output");
    double t0 = kvs_now_ms();
    int st = KVS_OK, budget = max_tokens;
    if (!w->prefix_done) st = prefix_step(w, &budget);
    while (!st && w->prefix_done && budget > 0 && w->j < w->lay.n_segs) {
        const kvs_seg *s = &w->lay.segs[w->j];
        if (s->kind != KVS_SEG_DOC) {
            w->j++;
            continue;
        }
        if (!w->computing) {
            int cached = 0;
            if ((st = is_cached(w, s, &cached))) break;
            if (cached) {
                w->rep.n_docs++;
                w->rep.n_docs_hit++;
                w->j++;
                continue;
            }
            if (!w->dc.ctx && (st = kvs_doc_computer_init(&w->dc, w->ctx, w->cache, w->lay.doc_prefix,
                                                          w->lay.n_doc_prefix, kvs_seg_max_doc_len(&w->lay, 0))))
                break;
            w->computing = 1;
            w->n_done = 0;
        }
        const int before = w->n_done;
        kvs_chunk *c = NULL;
        st = kvs_doc_compute_slice(&w->dc, w->lay.tokens + s->start, s->end - s->start, &w->n_done, budget, &c);
        budget -= w->n_done - before;
        if (c) { /* a failed insert (budget, memory, disk) leaves it to the request */
            (void)kvs_store_insert_counted(w->cache->store, c, NULL, &w->rep.docs_put); /* (write errors: reported) */
            if (w->j == kvs_seg_layout_first_doc(&w->lay) && kvs_seg_doc_at_own_prefix(&w->lay, s))
                w->n_exact_doc_computed = s->end - s->start;
            kvs_chunk_unref(c);
            w->rep.n_docs++;
            w->rep.n_docs_computed++;
            w->computing = 0;
            w->j++;
        }
    }
    w->ms += kvs_now_ms() - t0;
    *done = !st && w->j >= w->lay.n_segs;
    return st;
}

int kvs_docs_warmer_step(kvs_docs_warmer *w, int max_tokens, int *done) {
    KVS_ERROR_KEPT(docs_warmer_step_body(w, max_tokens, done));
}

void kvs_docs_warmer_report(const kvs_docs_warmer *w, kvs_warm_docs_report *rep) {
    if (!rep) return;
    memset(rep, 0, sizeof *rep);
    if (!w) return;
    rep->n_docs = w->rep.n_docs;
    rep->n_cached = w->rep.n_docs_hit;
    rep->n_computed = w->rep.n_docs_computed;
    rep->n_write_errors = w->rep.docs_put.n_write_errors; /* (the warmer had reported none) */
    for (int i = 0; i < w->lay.n_segs; i++)
        if (w->lay.segs[i].kind == KVS_SEG_DOC) rep->n_tokens += w->lay.segs[i].end - w->lay.segs[i].start;
    rep->ms = w->ms;
    rep->n_prefix_computed = w->n_prefix_computed;
    rep->too_long_doc = -1;
}

int kvs_docs_warmer_exact_computed(const kvs_docs_warmer *w) {
    return w ? w->n_prefix_computed + w->n_exact_doc_computed : 0;
}

void kvs_docs_warmer_free(kvs_docs_warmer *w) {
    if (!w) return;
    kvs_doc_computer_release(&w->dc);
    kvs_seg_layout_free(&w->lay);
    free(w->pos);
    free(w);
}
