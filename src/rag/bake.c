/*
 * Cross-document baking (segment_gen.h: kvs_seg_bake_docs).
 *
 * Why: a moved document's KV was computed after the short doc prefix only,
 * so it lacks the attention to the other documents a full prefill gives it;
 * the repair can only buy that back token by token. Baking pays it once,
 * offline: each document is computed again after its neighbours' (plain,
 * moved) KV, so its own KV carries context of the kind it will meet, and a
 * request takes that chunk instead (FusionRAG's offline step). Neighbours
 * are the documents warmed together, ranked by shared tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "rag/segment_gen.h"

/* Distinct sorted token ids of one doc. */
typedef struct tokset {
    int32_t *v;
    int n;
} tokset;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int tokset_build(const int32_t *t, int n, tokset *out) {
    out->v = malloc((size_t)n * sizeof *out->v);
    if (!out->v) return kvs_error(KVS_ERR_NOMEM, "bake: out of memory");
    memcpy(out->v, t, (size_t)n * sizeof *t);
    qsort(out->v, (size_t)n, sizeof *out->v, cmp_i32);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || out->v[i] != out->v[k - 1]) out->v[k++] = out->v[i];
    out->n = k;
    return KVS_OK;
}

static int tokset_common(const tokset *a, const tokset *b) {
    int i = 0, j = 0, c = 0;
    while (i < a->n && j < b->n) {
        if (a->v[i] < b->v[j]) i++;
        else if (a->v[i] > b->v[j]) j++;
        else c++, i++, j++;
    }
    return c;
}

/* A candidate neighbour: Jaccard similarity as the exact fraction common / union. */
typedef struct cand {
    int doc;           /* index among the layout's docs */
    long common, uni;
} cand;

/* Most similar first; equal similarity: earlier in the layout first. Exact
 * integer comparison, so the order is the same on every machine. */
static int by_similarity(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    long l = a->common * b->uni, r = b->common * a->uni;
    if (l != r) return l > r ? -1 : 1;
    return (a->doc > b->doc) - (a->doc < b->doc);
}

typedef struct bake {
    const kvs_seg_layout *lay;
    int n_docs;
    int *seg_of;          /* (n_docs) layout segment of each doc */
    kvs_chunk **plain;    /* (n_docs) their plain chunks, pinned while baking */
    tokset *sets;         /* (n_docs) */
    cand *cands;          /* (n_docs) scratch */
    kvs_chunk **nb;       /* (n_docs) the neighbours of the doc being baked, in context order */
} bake;

static void bake_free(bake *b) {
    for (int i = 0; i < b->n_docs; i++) {
        if (b->plain) kvs_chunk_unref(b->plain[i]);
        if (b->sets) free(b->sets[i].v);
    }
    free(b->seg_of);
    free(b->plain);
    free(b->sets);
    free(b->cands);
    free(b->nb);
}

static int doc_len(const bake *b, int i) {
    const kvs_seg *s = &b->lay->segs[b->seg_of[i]];
    return s->end - s->start;
}

static int same_tokens(const bake *b, int i, int j) {
    const kvs_seg *s = &b->lay->segs[b->seg_of[i]], *t = &b->lay->segs[b->seg_of[j]];
    return s->end - s->start == t->end - t->start &&
           !memcmp(b->lay->tokens + s->start, b->lay->tokens + t->start, (size_t)(s->end - s->start) * sizeof(int32_t));
}

/* The neighbours of doc i into b->nb (least similar first, the most similar
 * right before the doc); returns how many. At most k (< 0: all), and no
 * more than fit room tokens. */
static int choose(bake *b, int i, int k, int room) {
    int nc = 0;
    for (int j = 0; j < b->n_docs; j++) {
        if (j == i || same_tokens(b, i, j)) continue;
        int dup = 0; /* a doc given twice is one neighbour */
        for (int c = 0; c < nc && !dup; c++) dup = same_tokens(b, j, b->cands[c].doc);
        if (dup) continue;
        long common = tokset_common(&b->sets[i], &b->sets[j]);
        b->cands[nc++] = (cand){j, common, (long)b->sets[i].n + b->sets[j].n - common};
    }
    qsort(b->cands, (size_t)nc, sizeof *b->cands, by_similarity);
    if (k >= 0 && nc > k) nc = k;
    int used = 0, n = 0;
    for (int c = 0; c < nc; c++) {
        int len = doc_len(b, b->cands[c].doc);
        if (used + len > room) break; /* the rest are less similar */
        used += len;
        n++;
    }
    for (int c = 0; c < n; c++) b->nb[c] = b->plain[b->cands[n - 1 - c].doc];
    return n;
}

int kvs_seg_bake_docs(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, int n_neighbours,
                      kvs_seg_bake_report *rep) {
    kvs_seg_bake_report r;
    memset(&r, 0, sizeof r);
    if (!ctx || !cache || !lay) return kvs_error(KVS_ERR_INVALID_ARG, "bake docs: need a context, a cache and a layout");
    int st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_seg_layout_check_docs(ctx, lay);
    if (st) return st;

    bake b;
    memset(&b, 0, sizeof b);
    b.lay = lay;
    for (int j = 0; j < lay->n_segs; j++) b.n_docs += lay->segs[j].kind == KVS_SEG_DOC;
    int nd = b.n_docs;
    b.seg_of = calloc((size_t)nd + 1, sizeof *b.seg_of);
    b.plain = calloc((size_t)nd + 1, sizeof *b.plain);
    b.sets = calloc((size_t)nd + 1, sizeof *b.sets);
    b.cands = calloc((size_t)nd + 1, sizeof *b.cands);
    b.nb = calloc((size_t)nd + 1, sizeof *b.nb);
    if (!b.seg_of || !b.plain || !b.sets || !b.cands || !b.nb) st = kvs_error(KVS_ERR_NOMEM, "bake: out of memory");

    /* The plain chunks, pinned: the neighbours' KV comes from them even if
     * the store's budget cannot keep them all. */
    kvs_doc_computer dc;
    memset(&dc, 0, sizeof dc);
    for (int j = 0, i = 0; !st && j < lay->n_segs; j++) {
        if (lay->segs[j].kind != KVS_SEG_DOC) continue;
        b.seg_of[i] = j;
        st = kvs_seg_acquire_plain_doc(ctx, cache, lay, j, kvs_seg_max_doc_len(lay, 0), 1, &dc, &r.plain,
                                       &b.plain[i]);
        if (!st) st = tokset_build(lay->tokens + lay->segs[j].start, lay->segs[j].end - lay->segs[j].start, &b.sets[i]);
        i++;
    }
    kvs_doc_computer_release(&dc);

    /* One computer for every baking: room for the doc prefix, the context and the doc. */
    double t0 = kvs_now_ms();
    int n_ctx = kvs_context_n_ctx(ctx), total = 0;
    for (int i = 0; i < nd; i++) total += doc_len(&b, i);
    int room = n_ctx - lay->n_doc_prefix; /* for neighbours + doc */
    if (!st && nd > 1 && room > 0)
        st = kvs_doc_computer_init(&dc, ctx, cache, lay->doc_prefix, lay->n_doc_prefix, total < room ? total : room);
    kvs_key parent;
    kvs_doc_parent_key(&cache->fp, lay->doc_prefix, lay->n_doc_prefix, &parent);
    for (int i = 0; !st && i < nd; i++) {
        const kvs_seg *s = &lay->segs[b.seg_of[i]];
        const int32_t *doc = lay->tokens + s->start;
        int n = s->end - s->start, dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = same_tokens(&b, i, j);
        if (dup) continue; /* baked (or not) with its first copy */
        kvs_chunk *c = NULL;
        if ((st = kvs_doc_lookup_baked(cache->store, &parent, doc, n, &c))) break;
        if (c) {
            r.n_bake_cached++;
            kvs_chunk_unref(c);
            continue;
        }
        int k = dc.ctx ? choose(&b, i, n_neighbours, dc.max_doc - n) : 0;
        if (k == 0) {
            r.n_unbaked++;
            continue;
        }
        if ((st = kvs_doc_compute_after(&dc, b.nb, k, doc, n, &c))) break;
        int ins = kvs_store_insert(cache->store, c, NULL);
        kvs_chunk_unref(c);
        if (ins < 0) {
            st = ins;
            break;
        }
        r.n_baked += ins == KVS_OK || ins == KVS_STORE_TIER_ONLY;
        r.n_bake_cached += ins == KVS_STORE_EXISTS; /* baked meanwhile by another request */
    }
    r.bake_ms = kvs_now_ms() - t0;
    kvs_doc_computer_release(&dc);
    bake_free(&b);
    r.plain.n_prompt = lay->n_tokens;
    if (!st && rep) *rep = r;
    return st;
}
