/*
 * Generation from a segmented prompt with non-prefix reuse. One request:
 *
 *   exact     longest cached exact prefix (bit-exact path, as prefix.c):
 *             slots [0, E); if E ends inside a doc it is cut back to the
 *             doc's start
 *   live      the rest of the prefix segment, [E, D) computed fully
 *   docs      every doc from D on: its chunk looked up (doc_cache.h), or
 *             computed after the doc prefix and stored on the spot; moved
 *             into its slots (K rotated by the position delta, move.h)
 *   repair    the strategy recomputes its chosen tokens (repair.h)
 *   question  prefilled at its positions, then generation (kvs_generate_from)
 *   store     the exact part of the prompt, [0, D) (all of it for `full`),
 *             by prefix key, so a later request's system segment hits
 *
 * `full` never reads doc chunks: it computes every token after the exact
 * prefix, which is a cold prefill's bits.
 *
 * Threads: one request uses one context (its KV buffer and forward
 * scratch); the cache may be shared by requests on other contexts (the
 * store is thread-safe; a doc computed twice concurrently is stored once).
 */
#ifndef KVS_REUSE_SEGMENT_GEN_H
#define KVS_REUSE_SEGMENT_GEN_H

#include "kvstitch.h"
#include "cache/cache.h"
#include "rag/repair/repair.h"
#include "rag/segments.h"

typedef struct kvs_seg_report {
    int n_prompt;
    int n_exact;          /* tokens served by the exact prefix hit */
    int n_live;           /* tokens computed fully: rest of the prefix + question (+ docs for full) */
    int n_moved;          /* doc tokens placed from doc chunks (moved) */
    int n_recomputed;     /* moved tokens the strategy recomputed (full: the doc tokens) */
    int n_check;          /* cacheblend: tokens run through the check layers */
    long n_token_layers;  /* doc (token, layer) pairs with fresh K/V (repair.h; full: doc tokens x n_layer) */
    int n_docs;           /* doc segments placed from chunks */
    int n_docs_hit;       /* of them, found in the cache */
    int n_docs_computed;  /* of them, computed now (and stored) */
    int n_stored;         /* prefix chunks stored after the request */
    double lookup_ms;     /* the exact prefix lookup and copy (part of assemble_ms) */
    double assemble_ms;   /* exact lookup + live prefix + doc lookup/compute + move */
    double doc_compute_ms;/* computing missing docs (part of assemble_ms) */
    double move_ms;       /* moving doc chunks into place (part of assemble_ms) */
    double repair_ms;     /* the strategy's recompute */
} kvs_seg_report;

typedef struct kvs_seg_options {
    int use_exact;        /* 1 (default): serve the longest exact prefix from the cache */
    int store_prefix;     /* 1 (default): store the exact part of the prompt by prefix key */
    int store_docs;       /* 1 (default): store docs computed by this request */
} kvs_seg_options;

kvs_seg_options kvs_seg_default_options(void);

/* Generates from lay->tokens with the reuse above. out as kvs_generate
 * (reuse and docs parts set: n_cached = exact tokens; n_live = fully
 * computed ones; ttft_ms counts the whole assembly). rep may be NULL. opt may be NULL (defaults). The
 * context's KV slots [0, n_prompt) hold the prompt's (approximate) KV
 * afterwards, for teacher forcing. */
int kvs_seg_generate(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, const kvs_generate_params *gp,
                     const kvs_repair_params *rp, const kvs_seg_options *opt, kvs_generate_result *out,
                     kvs_seg_report *rep);

/* The same, with the request start t0 (kvs_now_ms clock) that ttft_ms and
 * assemble_ms count from (the caller tokenized the segments after it). */
int kvs_seg_generate_at(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, const kvs_generate_params *gp,
                        const kvs_repair_params *rp, const kvs_seg_options *opt, double t0, kvs_generate_result *out,
                        kvs_seg_report *rep);

/* Makes sure every doc of the layout is cached (computing and storing the
 * missing ones). rep (may be NULL): n_docs, n_docs_hit, n_docs_computed,
 * doc_compute_ms. */
int kvs_seg_warm_docs(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, kvs_seg_report *rep);

#endif
