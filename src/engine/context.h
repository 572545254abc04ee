/*
 * Inference context internals: the model, a thread pool, one sequence's KV
 * buffer and the forward scratch, all sized once at kvs_context_new. Other
 * modules (reuse, tests) reach the KV buffer and the forward pass through
 * these accessors.
 */
#ifndef KVS_ENGINE_CONTEXT_H
#define KVS_ENGINE_CONTEXT_H

#include "base/core_clock.h" /* kvs_now_ms, for the callers that time requests */
#include "base/threadpool.h"
#include "kvstitch.h"
#include "model/forward.h"
#include "model/kv_buffer.h"

struct kvs_context {
    kvs_model *model;
    kvs_context_params params; /* as resolved: no zeros left */
    kvs_pool *pool;            /* NULL when n_threads == 1 */
    kvs_kv_buffer kv;          /* (n_layer, 2, n_kv_head, n_ctx, head_dim) */
    kvs_fwd *fwd;              /* scratch for n_batch rows */
    float *logits;             /* (n_vocab) last logits of kvs_decode, for generation */
    int *rows;                 /* (n_batch) row indices handed to kvs_fwd_logits */
    int *row_status;           /* (n_batch) kvs_decode_batch's rows' status where its caller takes none */
    kvs_stop_callback should_stop; /* kvs_context_set_should_stop; NULL: never polled */
    void *stop_user;
};

kvs_kv_buffer *kvs_context_kv(kvs_context *ctx);
kvs_fwd *kvs_context_fwd(kvs_context *ctx);
const kvs_model *kvs_context_model(const kvs_context *ctx);
int kvs_context_n_batch(const kvs_context *ctx);
int kvs_context_n_threads(const kvs_context *ctx);
int kvs_context_n_vocab(const kvs_context *ctx);

/* Checks tokens/positions for kvs_decode-like calls: ids < n_vocab,
 * 0 <= pos < n_ctx (KVS_ERR_CONTEXT_FULL naming the numbers), and no slot
 * a token attends to that was never written (KVS_ERR_INVALID_ARG). */
int kvs_context_check_batch(const kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n);

/* The stop poll (kvs_context_set_should_stop): KVS_OK, or KVS_ERR_INTERRUPTED
 * naming what stopped after done of total units (what: "a forward pass", "a
 * document", "a repair"; unit: "tokens", "layers"). */
int kvs_context_poll_stop(const kvs_context *ctx, const char *what, int done, int total, const char *unit);

#endif
