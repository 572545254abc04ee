/* Doc chunks: keys, lookup, and computing a doc after the shared prefix (doc_cache.h). */
#include "rag/doc_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sha256.h"
#include "kv/keys.h"
#include "rag/move.h"

void kvs_doc_parent_key(const kvs_key *fp, const int32_t *prefix, int n, kvs_key *out) {
    if (n > 0) kvs_key_prefix(fp, prefix, n, out);
    else *out = *fp;
}

void kvs_doc_baked_parent_key(const kvs_key *parent, kvs_key *out) {
    static const char tag[] = "kvstitch baked document after";
    kvs_sha256 h;
    kvs_sha256_init(&h);
    kvs_sha256_update(&h, tag, sizeof tag);
    kvs_sha256_update(&h, parent->b, sizeof parent->b);
    kvs_sha256_final(&h, out->b);
}

/* The chunk holds exactly doc[0..n), computed at position n_prefix after parent. */
static int doc_matches(const kvs_chunk *c, const kvs_key *parent, int n_prefix, const int32_t *doc, int n) {
    return c->kv && c->n_tok == n && c->pos0 == n_prefix && !(c->origin & KVS_CHUNK_BAKED) &&
           kvs_key_equal(&c->parent_key, parent) && memcmp(c->tokens, doc, (size_t)n * sizeof *doc) == 0;
}

int kvs_doc_lookup_baked(kvs_store *store, const kvs_key *parent, const int32_t *doc, int n, kvs_chunk **out) {
    *out = NULL;
    if (!store || !doc || n <= 0) return kvs_error(KVS_ERR_INVALID_ARG, "doc lookup: need a store and a non-empty doc");
    kvs_key bp, pk;
    kvs_doc_baked_parent_key(parent, &bp);
    kvs_key_prefix(&bp, doc, n, &pk);
    kvs_chunk *c = NULL;
    int st = kvs_store_get_path(store, &pk, NULL, 0, &c); /* (RAM, then the tiers by key) */
    if (st == KVS_OK && c->kv && c->n_tok == n && (c->origin & KVS_CHUNK_BAKED) && kvs_key_equal(&c->parent_key, &bp) &&
        memcmp(c->tokens, doc, (size_t)n * sizeof *doc) == 0) {
        *out = c;
        return KVS_OK;
    }
    kvs_chunk_unref(c);
    return KVS_OK;
}

int kvs_doc_lookup(kvs_store *store, const kvs_key *fp, const kvs_key *parent, const int32_t *prefix, int n_prefix,
                   const int32_t *doc, int n, kvs_chunk **out) {
    *out = NULL;
    if (!store || !doc || n <= 0 || n_prefix < 0 || (n_prefix && !prefix))
        return kvs_error(KVS_ERR_INVALID_ARG, "doc lookup: need a store, a non-empty doc and its prefix's tokens");
    kvs_key ck, pk;
    kvs_key_content(fp, doc, n, &ck);
    kvs_chunk *c = NULL;
    int st = kvs_store_lookup_content(store, &ck, &c);
    if (st == KVS_OK && doc_matches(c, parent, n_prefix, doc, n)) {
        *out = c;
        return KVS_OK;
    }
    kvs_chunk_unref(c);
    /* The content key names the most recent chunk with these tokens, which
     * may have another history: ask for the exact one. */
    kvs_key_prefix(parent, doc, n, &pk);
    int32_t *path = malloc(((size_t)n_prefix + (size_t)n) * sizeof *path); /* a tier's chunk is indexed under it */
    if (!path) return kvs_error(KVS_ERR_NOMEM, "doc lookup: out of memory");
    if (n_prefix) memcpy(path, prefix, (size_t)n_prefix * sizeof *path);
    memcpy(path + n_prefix, doc, (size_t)n * sizeof *path);
    c = NULL;
    st = kvs_store_get_path(store, &pk, path, n_prefix + n, &c);
    free(path);
    if (st == KVS_OK && doc_matches(c, parent, n_prefix, doc, n)) {
        *out = c;
        return KVS_OK;
    }
    kvs_chunk_unref(c);
    return KVS_OK; /* a miss (or an entry that failed to load: counted by the store) */
}

int kvs_doc_computer_init(kvs_doc_computer *dc, kvs_context *ctx, const kvs_cache *cache, const int32_t *prefix,
                          int n_prefix, int max_doc) {
    memset(dc, 0, sizeof *dc);
    if (n_prefix < 0 || max_doc <= 0 || n_prefix + max_doc > kvs_context_n_ctx(ctx))
        return kvs_error(KVS_ERR_CONTEXT_FULL, "doc chunks: a doc prefix of %d tokens and a doc of %d do not fit the "
                         "context of %d", n_prefix, max_doc, kvs_context_n_ctx(ctx));
    const kvs_kv_shape *s = &cache->shape;
    int n = n_prefix + max_doc, st;
    if ((st = kvs_kv_buffer_init(&dc->kv, s->n_layer, s->n_kv_head, n, s->head_dim, s->dtype))) return st;
    dc->pos = malloc((size_t)n * sizeof *dc->pos);
    if (!dc->pos) {
        kvs_doc_computer_release(dc);
        return kvs_error(KVS_ERR_NOMEM, "doc chunks: out of memory");
    }
    for (int i = 0; i < n; i++) dc->pos[i] = i;
    dc->ctx = ctx;
    dc->cache = cache;
    dc->prefix = prefix;
    dc->n_prefix = n_prefix;
    dc->max_doc = max_doc;
    kvs_doc_parent_key(&cache->fp, prefix, n_prefix, &dc->parent);
    return KVS_OK;
}

void kvs_doc_computer_release(kvs_doc_computer *dc) {
    if (!dc) return;
    kvs_kv_buffer_release(&dc->kv);
    free(dc->pos);
    memset(dc, 0, sizeof *dc);
}

/* Full forward of tokens at positions pos[0..n) into the scratch buffer,
 * max_rows at a time (as kvs_decode does for the context's buffer, and
 * polling its should_stop as it does). */
static int prefill(kvs_doc_computer *dc, const int32_t *tokens, const int32_t *pos, int n) {
    kvs_fwd *f = kvs_context_fwd(dc->ctx);
    const int n_layer = f->hp->n_layer;
    for (int c0 = 0; c0 < n; c0 += f->max_rows) {
        int m = n - c0 < f->max_rows ? n - c0 : f->max_rows;
        int st = kvs_context_poll_stop(dc->ctx, "a document", c0, n, "tokens");
        if (st) return st;
        kvs_fwd_embed(f, tokens + c0, m);
        for (int l = 0; l < n_layer; l++) kvs_fwd_layer(f, l, pos + c0, m, &dc->kv);
        if ((st = kvs_fwd_overflow_status(f))) return st;
    }
    return KVS_OK;
}

/* The chunk of doc[0..n), whose KV sits in dc->kv at slots at.. (after the
 * prefix and n_nb neighbours' n_ctx tokens). */
static int make_chunk(kvs_doc_computer *dc, const int32_t *doc, int n, int at, int n_nb, kvs_chunk **out) {
    const kvs_cache *cache = dc->cache;
    kvs_chunk *c = NULL;
    int st;
    if ((st = kvs_chunk_new(&cache->shape, n, 1, &c))) return st;
    memcpy(c->tokens, doc, (size_t)n * sizeof *doc);
    c->pos0 = at;
    c->origin = KVS_CHUNK_DOC;
    c->parent_key = dc->parent;
    if (n_nb > 0) {
        c->origin |= KVS_CHUNK_BAKED | (uint32_t)(n_nb < 255 ? n_nb : 255) << KVS_CHUNK_NEIGHBOURS_SHIFT;
        kvs_doc_baked_parent_key(&dc->parent, &c->parent_key);
    }
    kvs_key_prefix(&c->parent_key, doc, n, &c->prefix_key);
    kvs_key_content(&cache->fp, doc, n, &c->content_key);
    if ((st = kvs_chunk_copy_from_kv(c, 0, n, &dc->kv, at))) {
        kvs_chunk_unref(c);
        return st;
    }
    *out = c;
    return KVS_OK;
}

/* The prefix's KV, once (not marked done if stopped: the next call redoes it). */
static int ensure_prefix(kvs_doc_computer *dc) {
    if (dc->prefix_done) return KVS_OK;
    int st = dc->n_prefix > 0 ? prefill(dc, dc->prefix, dc->pos, dc->n_prefix) : KVS_OK;
    if (!st) dc->prefix_done = 1;
    return st;
}

int kvs_doc_compute_after(kvs_doc_computer *dc, kvs_chunk *const *nb, int n_nb, const int32_t *doc, int n,
                          kvs_chunk **out) {
    int n_ctx = 0;
    for (int i = 0; i < n_nb; i++) n_ctx += nb[i]->n_tok;
    if (n <= 0 || n_nb < 0 || n_ctx + n > dc->max_doc)
        return kvs_error(KVS_ERR_INVALID_ARG, "doc chunks: a doc of %d tokens after %d of neighbours (at most %d "
                         "here)", n, n_ctx, dc->max_doc);
    int st = kvs_reuse_check_tokens(dc->ctx, doc, n);
    if (!st) st = ensure_prefix(dc);
    if (st) return st;
    /* The neighbours' KV, moved to follow the prefix. */
    int at = dc->n_prefix;
    kvs_rope_cfg rc = kvs_rope_cfg_of(kvs_model_hparams(kvs_context_model(dc->ctx)));
    for (int i = 0; i < n_nb; i++) {
        if ((st = kvs_move_chunk_to_kv(nb[i], 0, nb[i]->n_tok, &dc->kv, at, &rc, kvs_context_fwd(dc->ctx)->pool)))
            return st;
        at += nb[i]->n_tok;
    }
    /* Slots past the doc may hold an earlier doc's KV: never read, since a
     * row attends to slots 0..pos only. */
    if ((st = prefill(dc, doc, dc->pos + at, n))) return st;
    return make_chunk(dc, doc, n, at, n_nb, out);
}

int kvs_doc_compute_slice(kvs_doc_computer *dc, const int32_t *doc, int n, int *done, int max_tokens,
                          kvs_chunk **out) {
    *out = NULL;
    if (n <= 0 || n > dc->max_doc || *done < 0 || *done >= n || max_tokens <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "doc chunks: a slice of %d tokens from %d of a doc of %d (at most %d "
                         "here)", max_tokens, *done, n, dc->max_doc);
    int st;
    if (*done == 0 && (st = kvs_reuse_check_tokens(dc->ctx, doc, n))) return st;
    if ((st = ensure_prefix(dc))) return st;
    /* Rows attend to slots 0..pos only, so computing the doc in slices
     * writes the bytes one call writes (the kernels are batch-invariant). */
    int m = n - *done < max_tokens ? n - *done : max_tokens;
    if ((st = prefill(dc, doc + *done, dc->pos + dc->n_prefix + *done, m))) return st;
    *done += m;
    return *done == n ? make_chunk(dc, doc, n, dc->n_prefix, 0, out) : KVS_OK;
}

int kvs_doc_compute(kvs_doc_computer *dc, const int32_t *doc, int n, kvs_chunk **out) {
    return kvs_doc_compute_after(dc, NULL, 0, doc, n, out);
}
