/*
 * Generation from a segmented prompt with non-prefix reuse. One request:
 *
 *   exact     longest cached exact prefix (bit-exact path, as prefix.c):
 *             slots [0, E); if E ends inside a doc it is cut back to the
 *             doc's start
 *   live      the rest of the prefix segment, [E, D) computed fully
 *   docs      every doc from D on: its chunk looked up (doc_cache.h; its
 *             baked chunk first, with use_baked), or computed after the doc
 *             prefix and stored on the spot; moved
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
#include "rag/doc_cache.h"
#include "rag/segments.h"

typedef struct kvs_seg_report {
    int n_prompt;
    int n_exact;          /* tokens in place as an exact prefix: the hit, then the first doc where
                           * it sits after its own prefix (exact_first_doc) */
    int n_exact_now;      /* of them, computed by this request (that doc computed, the tokens before it) */
    int n_live;           /* tokens computed fully: rest of the prefix + question (+ docs for full) */
    int n_moved;          /* doc tokens placed from doc chunks (moved) */
    int n_recomputed;     /* moved tokens the strategy recomputed (full: the doc tokens) */
    int n_check;          /* cacheblend: tokens run through the check layers */
    long n_token_layers;  /* doc (token, layer) pairs with fresh K/V (repair.h; full: doc tokens x n_layer) */
    int n_docs;           /* doc segments placed from chunks */
    int n_docs_hit;       /* of them, found in the cache */
    int n_docs_computed;  /* of them, computed now (and stored) */
    int n_docs_baked;     /* of the hits, baked ones (kvs_seg_bake_docs) */
    int n_stored;         /* prefix chunks stored after the request */
    kvs_put_report docs_put; /* the computed docs' stores (n_write_errors: kept in memory only) */
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
    int use_baked;        /* 1 (default): a doc's baked chunk when there is one, else its plain one */
    kvs_recal_params recal; /* {0, 0} (default): none; else the question and generation read
                             * the moved documents recalibrated (kvs_attn_recal) */
} kvs_seg_options;

kvs_seg_options kvs_seg_default_options(void);

/* KVS_OK for {0, 0} (off) or both values in [KVS_RECAL_MIN, KVS_RECAL_MAX]. */
#define KVS_RECAL_MIN 0.1f
#define KVS_RECAL_MAX 4.0f
int kvs_recal_params_check(const kvs_recal_params *p);

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
 * missing ones; each doc must fit the context after the doc prefix, not
 * all of them together). rep (may be NULL): n_docs, n_docs_hit, n_docs_computed,
 * doc_compute_ms. */
int kvs_seg_warm_docs(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, kvs_seg_report *rep);

/* The layout of seg's documents for warming (segments_api.c): a question is
 * needed for the layout only ("?" when seg has none). */
int kvs_seg_docs_layout(kvs_context *ctx, const kvs_segments *seg, kvs_seg_layout *lay);

/* KVS_OK if the layout is prefix, docs, question, tiling its tokens, with
 * valid token ids, and fits the context. */
int kvs_seg_layout_check(const kvs_context *ctx, const kvs_seg_layout *lay);
/* The same, but only each doc after the doc prefix must fit the context
 * (warming and baking docs: a set of docs may be longer than one prompt). */
int kvs_seg_layout_check_docs(const kvs_context *ctx, const kvs_seg_layout *lay);
/* The input index of the first document that does not fit the context
 * after the doc prefix (check_docs's KVS_ERR_CONTEXT_FULL), else -1. */
int kvs_seg_layout_too_long_doc(const kvs_context *ctx, const kvs_seg_layout *lay);
/* The longest doc among segments [j0, n_segs). */
int kvs_seg_max_doc_len(const kvs_seg_layout *lay, int j0);

/* The plain chunk of doc segment j (the doc computed after the doc prefix
 * alone): cached, or computed now with dc (initialised on first use with
 * room for max_doc tokens) and stored if store. *out is a reference the
 * caller drops; rep counts n_docs, n_docs_hit, n_docs_computed. */
int kvs_seg_acquire_plain_doc(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, int j, int max_doc,
                              int store, kvs_doc_computer *dc, kvs_seg_report *rep, kvs_chunk **out);

/* What kvs_seg_bake_docs did (plain: as kvs_seg_warm_docs). */
typedef struct kvs_seg_bake_report {
    kvs_seg_report plain;
    int n_baked;          /* docs baked now and stored */
    int n_bake_cached;    /* docs that had a baked chunk already (kept: the first baking wins) */
    int n_unbaked;        /* docs with no neighbour to bake with (a single doc, or none fits the context) */
    double bake_ms;
} kvs_seg_bake_report;

/* Cross-document baking (FusionRAG's offline step): every doc of the
 * layout is computed again after the cached KV of up to n_neighbours other
 * docs of the layout (< 0: all of them), most similar last (closest), and
 * stored as its baked chunk (doc_cache.h). Similarity: shared distinct
 * tokens over the union (Jaccard), ties by layout order; neighbours that do
 * not fit the context with the doc are dropped, least similar first. The
 * plain chunks are made sure of first. rep may be NULL. */
int kvs_seg_bake_docs(kvs_context *ctx, kvs_cache *cache, const kvs_seg_layout *lay, int n_neighbours,
                      kvs_seg_bake_report *rep);

#endif
