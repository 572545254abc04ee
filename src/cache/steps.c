/*
 * The chunk cache, one step at a time, for a caller that drives the forward
 * passes itself (the server's scheduler interleaves chunked prefills of
 * several slots with batched decode steps, so it cannot hand a whole request
 * to kvs_generate_cached):
 *
 *   kvs_cache_peek_prefix     how many prompt tokens a lookup would serve
 *                             (admission order: least remaining work first)
 *   kvs_cache_load_prefix     the longest cached prefix copied into a context
 *   kvs_cache_store_context   a context's KV of tokens[0..n) stored by prefix,
 *                             generated tokens included (multi-turn reuse)
 *
 * Same bits as kvs_generate_cached: the copied KV is what a cold prefill
 * writes, and a batch-invariant decode of the rest completes it.
 */
#include <string.h>

#include "base/error.h"
#include "cache/cache.h"
#include "engine/context.h"

static int cache_peek_prefix_body(kvs_cache *cache, const int32_t *tokens, int n, int *n_hit) {
    if (!cache || !tokens || n < 0 || !n_hit)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_peek_prefix: need a cache, tokens, n >= 0 (got %d), n_hit", n);
    /* ids outside the vocabulary are refused as by every other call (a
     * peek had answered 0 for them) */
    int st = kvs_cache_check_tokens(kvs_model_hparams(cache->model)->n_vocab, tokens, n);
    if (st) return kvs_error_prefix(st, "kvs_cache_peek_prefix");
    *n_hit = 0;
    if (n == 0) return KVS_OK;
    return kvs_store_peek_prefix(cache->store, tokens, n, n_hit);
}

int kvs_cache_peek_prefix(kvs_cache *cache, const int32_t *tokens, int n, int *n_hit) {
    KVS_ERROR_KEPT(cache_peek_prefix_body(cache, tokens, n, n_hit));
}

/* The checks both copies share. */
static int check(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, const char *what) {
    if (n > kvs_context_n_ctx(ctx))
        return kvs_error(KVS_ERR_CONTEXT_FULL, "%s: %d tokens but the context holds %d", what, n,
                         kvs_context_n_ctx(ctx));
    int st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_reuse_check_tokens(ctx, tokens, n);
    return st;
}

static int cache_load_prefix_body(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_loaded) {
    if (!ctx || !cache || !tokens || n < 0 || !n_loaded)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_load_prefix: need a context, a cache, tokens, n >= 0 "
                         "(got %d), n_loaded", n);
    int st = n ? check(ctx, cache, tokens, n, "kvs_cache_load_prefix") : KVS_OK;
    if (st) return st; /* (n_loaded untouched, as the header's out-parameters) */
    *n_loaded = 0;
    if (n == 0) return KVS_OK;
    kvs_prefix_hit hit;
    memset(&hit, 0, sizeof hit);
    st = kvs_store_lookup_into(cache->store, tokens, n, kvs_context_kv(ctx), &hit);
    if (!st) *n_loaded = hit.n_cached;
    /* The KV was copied: the pins may go now. */
    kvs_store_release_hit(cache->store, &hit);
    return st;
}

int kvs_cache_load_prefix(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_loaded) {
    KVS_ERROR_KEPT(cache_load_prefix_body(ctx, cache, tokens, n, n_loaded));
}

static int cache_store_context_body(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_new) {
    if (!ctx || !cache || !tokens || n <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_store_context: need a context, a cache and n > 0 tokens "
                         "(got %d)", n);
    int st = check(ctx, cache, tokens, n, "kvs_cache_store_context");
    if (st) return st;
    /* Stored under these tokens' keys, the KV must be what a cold prefill
     * of them writes (a slot never written had been stored as zeros). */
    const kvs_kv_buffer *kv = kvs_context_kv(ctx);
    const int exact = kvs_kv_exact_match(kv, tokens, n);
    if (exact < n) {
        if (exact < kv->exact->len)
            return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_store_context: slot %d holds the KV of token %d, not %d",
                             exact, (int)kv->exact->tok[exact], (int)tokens[exact]);
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_store_context: slots from %d on (of the %d given) hold no "
                         "exact KV of these tokens (never written, or not by kvs_decode from slot 0 in order or a "
                         "cache load: a document's moved KV is not stored by prefix)", exact, n);
    }
    kvs_put_report rep;
    memset(&rep, 0, sizeof rep);
    st = kvs_store_put_prefix(cache->store, tokens, n, cache->chunk_tokens, NULL, 0, kvs_context_kv(ctx), &rep);
    if (n_new) *n_new = rep.n_new;
    return st;
}

int kvs_cache_store_context(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_new) {
    KVS_ERROR_KEPT(cache_store_context_body(ctx, cache, tokens, n, n_new));
}
