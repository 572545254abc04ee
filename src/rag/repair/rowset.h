/*
 * The sparse, layer-major executor of a repair: a set of prompt rows carried
 * through layers with their hidden states, attending to the whole KV buffer.
 *
 *   rowset          pos (n)          tok (n)        x (n, n_embd)
 *                   slots ascending  token ids      residual stream entering
 *                                                   the next layer to run
 *
 * In each layer the rows run qkv -> store K/V -> attention + FFN in
 * ascending batches, so every slot a row attends to has been written before
 * (by an earlier batch, by this batch's store, or by whoever filled the
 * buffer). Slots outside the set keep whatever K/V the buffer holds: that is
 * what makes the recompute sparse. Strategies (strategy.h) choose the rows;
 * this file only runs them.
 */
#ifndef KVS_RAG_REPAIR_ROWSET_H
#define KVS_RAG_REPAIR_ROWSET_H

#include <stdint.h>

#include "engine/context.h"

/* A set of prompt rows carried through layers: hidden state per row. */
typedef struct kvs_rowset {
    int n;
    int32_t *pos;           /* (n) slots = positions, ascending */
    int32_t *tok;           /* (n) token ids */
    float *x;               /* (n, n_embd) residual stream entering the next layer */
} kvs_rowset;

/* A trace of a selection (cacheblend): called after each selection with the
 * rows kept entering `layer`'s attention. */
typedef void (*kvs_blend_trace_fn)(void *ud, int layer, const kvs_rowset *rs);

/* Allocates room for n rows (n may be 0); rows are filled by the caller. */
int kvs_rowset_alloc(kvs_rowset *rs, int n, int n_embd);
void kvs_rowset_free(kvs_rowset *rs);
/* x = token embeddings. */
void kvs_rowset_embed(kvs_fwd *f, kvs_rowset *rs);
/* Runs layers [l0, l1) for the rows, layer-major, in ascending batches of
 * at most f->max_rows, polling ctx's stop before each layer (KVS_OK or
 * KVS_ERR_INTERRUPTED). */
int kvs_rowset_layers(const kvs_context *ctx, kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, int l0, int l1);

#endif
