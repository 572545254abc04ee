/*
 * Exact prefix reuse in generation: one request is
 *
 *   plan      longest cached prefix of prompt[0..n-1) in the radix index
 *             (the last token always runs: its logits start generation)
 *   assemble  its chunks' KV copied into the context's buffer at slot =
 *             position (disk-only chunks read straight into it), pinned
 *   prefill   prompt[n_cached..n) at positions n_cached..n-1
 *   decode    as kvs_generate
 *   release   the pins
 *   store     the prompt's chunks not cached yet (not the generated tokens)
 *
 * Why it is bit-exact at any reuse length: the KV of token t depends only on
 * tokens 0..t, and the engine computes a token's bits independently of how a
 * sequence is split into calls (batch invariance), so the cached KV of tokens
 * [0, n_cached) is byte for byte what a cold prefill writes there, and
 * everything after is computed from identical inputs.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "kv/chunking.h"
#include "cache/cache.h"

int kvs_reuse_chunk_ends(int n, int chunk_tokens, const int *borders, int n_borders, int32_t **ends, int *n_ends) {
    *ends = NULL;
    *n_ends = 0;
    if (n <= 0) return KVS_OK;
    int cap = kvs_chunking_max_spans(n, chunk_tokens, n_borders), n_spans = 0;
    kvs_span *spans = malloc((size_t)cap * sizeof *spans);
    int32_t *e = malloc((size_t)cap * sizeof *e);
    int st = spans && e ? kvs_chunking_split(n, 0, chunk_tokens, borders, n_borders, spans, cap, &n_spans)
                        : kvs_error(KVS_ERR_NOMEM, "chunking: out of memory");
    if (st == KVS_OK) {
        for (int i = 0; i < n_spans; i++) e[i] = spans[i].end;
        *ends = e;
        *n_ends = n_spans;
    } else {
        free(e);
    }
    free(spans);
    return st;
}

static int generate_cached_body(kvs_context *ctx, kvs_cache *cache, const int32_t *prompt, int n_prompt,
                        const kvs_generate_params *params, const kvs_reuse_params *reuse, kvs_generate_result *out) {
    double t0 = kvs_now_ms();
    if (!ctx || !cache || !prompt || !params || !out || n_prompt <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_cached: need a context, a cache, a prompt of at least one "
                         "token (got %d), params and a result", n_prompt);
    int st = kvs_generate_params_check(params, "kvs_generate_cached");
    if (st) return st;
    kvs_reuse_params rp = reuse ? *reuse : kvs_reuse_default_params();
    if (!kvs_reuse_mode_name(rp.mode))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_cached: unknown reuse mode %d", (int)rp.mode);
    if (rp.n_borders < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_cached: n_borders = %d is negative", rp.n_borders);
    if (rp.n_borders > 0 && !rp.borders)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate_cached: n_borders = %d without borders", rp.n_borders);
    for (int i = 0; i < rp.n_borders; i++) /* (outside the prompt or out of order they had been taken silently) */
        if (rp.borders[i] < 0 || rp.borders[i] > n_prompt || (i && rp.borders[i] <= rp.borders[i - 1]))
            return kvs_error(KVS_ERR_INVALID_ARG,
                             "kvs_generate_cached: borders[%d] = %d: borders must rise strictly within 0..%d (the "
                             "prompt's tokens)", i, rp.borders[i], n_prompt);
    if (n_prompt > kvs_context_n_ctx(ctx))
        return kvs_error(KVS_ERR_CONTEXT_FULL, "the prompt has %d tokens but the context holds %d", n_prompt,
                         kvs_context_n_ctx(ctx));
    st = kvs_reuse_check_context(ctx, cache);
    if (!st) st = kvs_reuse_check_tokens(ctx, prompt, n_prompt);
    if (st) return st;

    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    kvs_prefix_hit hit;
    memset(&hit, 0, sizeof hit);
    if (rp.mode == KVS_REUSE_PREFIX) {
        /* n_prompt - 1: the last prompt token is always computed, for the
         * logits that start generation. */
        st = kvs_store_lookup_into(cache->store, prompt, n_prompt - 1, kv, &hit);
    }
    double t_assembled = kvs_now_ms();
    kvs_generate_result r;
    memset(&r, 0, sizeof r);
    if (!st) st = kvs_generate_from(ctx, prompt, n_prompt, hit.n_cached, params, t0, &r);
    if (!st && !(r.reuse = calloc(1, sizeof *r.reuse))) st = kvs_error(KVS_ERR_NOMEM, "generate: out of memory");
    if (!st) {
        r.timings.lookup_ms = t_assembled - t0;
        r.reuse->n_cached = r.reuse->n_reused = hit.n_cached;
        r.reuse->cache_hit_ratio = (double)hit.n_cached / n_prompt;
        st = kvs_reuse_chunk_ends(n_prompt, cache->chunk_tokens, rp.borders, rp.n_borders, &r.reuse->chunk_ends,
                                  &r.reuse->n_chunks);
    }
    /* The pins end with the use: the KV was copied and generation is over.
     * Releasing them before storing lets this request's inserts evict the
     * chunks it used if the budget asks for it. */
    kvs_store_release_hit(cache->store, &hit);
    if (!st && rp.store) {
        /* The prompt's KV is intact in slots [0, n_prompt): generation only
         * wrote the slots after it. A failure to store (no memory, disk
         * full: counted in the stats) does not fail the request, whose
         * output is complete and correct. */
        kvs_put_report rep;
        kvs_store_put_prefix(cache->store, prompt, n_prompt, cache->chunk_tokens, rp.borders, rp.n_borders, kv,
                             &rep);
        r.reuse->n_chunks_stored = rep.n_new;
        r.reuse->n_write_errors = rep.n_write_errors;
        snprintf(r.reuse->write_error, sizeof r.reuse->write_error, "%s", rep.write_error);
    }
    if (st) {
        kvs_generate_result_free(&r);
        return st;
    }
    *out = r;
    return KVS_OK;
}

int kvs_generate_cached(kvs_context *ctx, kvs_cache *cache, const int32_t *prompt, int n_prompt,
                        const kvs_generate_params *params, const kvs_reuse_params *reuse, kvs_generate_result *out) {
    KVS_ERROR_KEPT(generate_cached_body(ctx, cache, prompt, n_prompt, params, reuse, out));
}
