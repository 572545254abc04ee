/*
 * Repair of moved chunks: which tokens of the moved region to recompute,
 * and the sparse, layer-major recompute itself.
 *
 * After assembly (segment_gen.c) the KV buffer holds, at every layer,
 *
 *   [0, start)      exact KV (prefix hit or computed live)
 *   [start, end)    moved doc chunks: KV computed after the shared doc prefix,
 *                   rotated to their slots; stale where a token should have
 *                   attended to the docs before it
 *   [end, n)        empty: the question, computed afterwards by generation
 *
 * A strategy picks a set S of moved tokens; S is recomputed layer by layer
 * with the merged KV as context: in layer l the rows of S run
 * qkv -> store K/V -> attention + FFN, attending to slots 0..pos, where
 * tokens outside S keep their cached K/V. Only the hidden states of S are
 * carried from layer to layer, so the cost is |S| rows per layer (plus the
 * attention over the whole context for those rows).
 *
 *   none        S = {}                  (concatenation as is)
 *   selective   last `overlap` tokens of every moved doc (the ones just
 *               before each seam), from layer 0
 *   firstk      first `first_k` tokens of every moved doc (EPIC's
 *               attention-sink repair), from layer 0
 *   cacheblend  layers 0..check-1 for ALL moved tokens (exact: they are
 *               computed fully), then at the check layer fresh K/V for all
 *               are compared with the cached (moved) K/V per token; the top
 *               recompute_ratio of them (deviation > min_deviation) are S
 *               from the check layer on (blend.c). No full forward pass is
 *               ever run to choose them. With cacheblend_seams (the
 *               default) the tokens selective would pick are kept as well
 *               (a hybrid: on SmolLM2-135M the tokens just before each seam
 *               and the question matter more than their deviation shows).
 *               With narrow_from > 0 (gradual narrowing, CacheBlend's
 *               "gradual filtering"): the check layer keeps narrow_from of
 *               the tokens; in each of the next narrow_layers layers the
 *               kept tokens' fresh K/V are computed (and written: they are
 *               closer to the truth than the cached ones, and paid for),
 *               ranked by their deviation from the cached K/V at that layer,
 *               and the set shrinks geometrically to recompute_ratio. A
 *               token dropped at layer l has fresh K/V up to l and keeps its
 *               cached K/V from l + 1 on (its hidden state stops at l).
 *               Each set is a subset of the one before; forced (seams)
 *               tokens stay in every set without counting against the
 *               ratio; min_deviation applies at the check layer only.
 *   full        S = everything, from layer 0: the prompt's exact KV
 *
 * Each strategy is a row of the table in strategy.h (one file each); the
 * executor that carries S through the layers is rowset.h; CacheBlend's
 * selection is blend.h. This file's kvs_repair_run dispatches on the row.
 *
 * Invariants (tests/test_repair.c): full gives the bits of a cold prefill;
 * cacheblend with ratio 1.0 gives the bits of full (every row is computed
 * in every layer from exact inputs; the kernels are batch-invariant);
 * cacheblend with ratio 0 is none (nothing to recompute, so the check
 * layers are skipped: the check only serves the selection; the seams
 * hybrid adds to a non-empty selection only); narrowing from ratio 1 to 1,
 * or from r to r, gives the bits without narrowing (nothing is dropped).
 *
 * Counts: recomputed_tokens (n_recomputed) is |S| through the last layer
 * (with narrowing: the final set); n_token_layers counts every (token,
 * layer) whose fresh K/V the repair wrote, the cost measure that compares
 * strategies (full: doc tokens x n_layer).
 */
#ifndef KVS_REUSE_REPAIR_H
#define KVS_REUSE_REPAIR_H

#include <stdint.h>

#include "engine/context.h"
#include "rag/repair/rowset.h"
#include "rag/segments.h"

/* kvs_repair_mode, kvs_deviation, kvs_repair_params and their
 * defaults / names / parsers are public (kvstitch.h). */

/* KVS_ERR_INVALID_ARG naming the first field out of range. */
int kvs_repair_params_check(const kvs_repair_params *p, int n_layer);

/* The moved region of a prompt. */
typedef struct kvs_repair_region {
    const int32_t *tokens;  /* the whole prompt (token t sits at slot t) */
    int start, end;         /* moved tokens [start, end) */
    const kvs_seg *docs;    /* (n_docs) the moved doc segments, ascending, tiling [start, end) */
    int n_docs;
    int n_tokens;           /* prompt length: the question is [end, n_tokens) (query reads it; 0 = none) */
} kvs_repair_region;

typedef struct kvs_repair_report {
    int n_recomputed;       /* moved tokens recomputed through the last layer (|S|; narrowing: the final set) */
    int n_check;            /* tokens run through the check layers (cacheblend), else 0 */
    long n_token_layers;    /* (token, layer) pairs with fresh K/V written by the repair */
    double select_ms;       /* cacheblend: the check layers + selection */
    double recompute_ms;    /* the recompute of S */
} kvs_repair_report;

/* Repairs the moved region of the context's KV buffer in place. Uses the
 * context's forward scratch; allocates the per-request row state
 * (|rows| x n_embd floats) once. */
int kvs_repair_run(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p, kvs_repair_report *rep);
/* The same, with a trace of cacheblend's selections (may be NULL): called
 * after each selection with the rows kept entering `layer`'s attention (the
 * check layer, then each narrowing layer); tests check that every set is a
 * subset of the one before. */
int kvs_repair_run_traced(kvs_context *ctx, const kvs_repair_region *rg, const kvs_repair_params *p,
                          kvs_blend_trace_fn trace, void *ud, kvs_repair_report *rep);

#endif
