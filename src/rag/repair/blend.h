/*
 * CacheBlend's token selection (blend.c): the check layers for every row,
 * the ranking by K/V deviation, and gradual narrowing. Used by the
 * "cacheblend" strategy row (cacheblend.c).
 */
#ifndef KVS_RAG_REPAIR_BLEND_H
#define KVS_RAG_REPAIR_BLEND_H

#include "kvstitch.h"
#include "rag/repair/rowset.h"

/* Check layers for all rows of rs, select (and narrow, with
 * p->narrow_from), and leave rs holding only the selected rows, their x
 * entering layer *resume (the check layer, or the last narrowing layer),
 * which the caller runs on from. force (may be NULL): (rs->n) rows kept
 * whatever their deviation, on top of the ratio. *token_layers: fresh K/V
 * (token, layer) pairs written up to and including *resume. trace may be
 * NULL. */
int kvs_blend_select(const kvs_context *ctx, kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, const kvs_repair_params *p,
                     const unsigned char *force, kvs_blend_trace_fn trace, void *ud, int *resume,
                     long *token_layers);

/* The share of moved tokens kept entering layer check_layer + j,
 * 0 <= j <= the narrowing's length: narrow_from * (ratio / narrow_from)^(j / L)
 * (geometric; ratio itself from j = L on, or always without narrowing). */
double kvs_blend_share(const kvs_repair_params *p, int j, int n_layer);
/* The narrowing's length L in layers (0 without narrowing), clipped so
 * that it ends at the last layer at most. */
int kvs_blend_narrow_len(const kvs_repair_params *p, int n_layer);

#endif
