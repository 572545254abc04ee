/*
 * Layer-granular forward pass. A full forward over m token rows is
 *
 *   kvs_fwd_embed(f, tokens, m);
 *   for l in 0..n_layer: kvs_fwd_layer(f, l, pos, m, kv);
 *   kvs_fwd_logits(f, rows, n_rows, logits);
 *
 * and each layer splits further into qkv -> store_kv -> attn_ffn, so a caller
 * can look at (or replace) a layer's fresh K/V before they are written, run
 * later layers for a subset of rows only (CacheBlend), or write K/V for rows
 * it then drops. Rows carry explicit absolute positions; row r's K/V go to
 * slot pos[r] of the KV buffer and row r attends to slots 0..pos[r], so every
 * slot it reads must have been written (in this call or an earlier one).
 *
 * All scratch is allocated once by kvs_fwd_new for at most max_rows rows and
 * n_ctx slots; nothing is allocated while running. Batch-invariant: a row's
 * bits do not depend on m, on its index among the rows, or on the thread
 * count (the kernels guarantee it per row; everything here is per row too).
 * Not thread-safe: one kvs_fwd per context.
 */
#ifndef KVS_MODEL_FORWARD_H
#define KVS_MODEL_FORWARD_H

#include <stdatomic.h>

#include "base/threadpool.h"
#include "model/kv_buffer.h"
#include "model/model.h"

/* RoPE's cos and sin at every row's position for one rope configuration of
 * the layers (base, scale, frequency factors): computed by the first layer
 * of a pass that needs them and kept for the later ones, whose rows sit at
 * the same positions. Valid only for the rows and positions copied in pos. */
typedef struct kvs_fwd_rope {
    int valid, m;
    float base, scale;
    const float *factors; /* the model's, for as long as the kvs_fwd */
    int32_t *pos;         /* (max_rows) */
    double *cs;           /* (max_rows, rope_dim): row r's cos (rope_dim / 2), then its sin */
} kvs_fwd_rope;

/* Configurations kept at once: gemma3's local and global layers alternate. */
#define KVS_FWD_ROPE_TABLES 2

typedef struct kvs_fwd {
    const kvs_model *model;
    const kvs_hparams *hp;
    kvs_pool *pool;     /* may be NULL: single-threaded */
    int max_rows;       /* rows per call at most */
    int n_ctx;          /* KV slots the attention scratch is sized for */
    /* Activations, row-major, max_rows rows each. Callers may read and edit
     * x between layers (it is the residual stream), and k/v between
     * kvs_fwd_layer_qkv and kvs_fwd_layer_store_kv. */
    float *x;           /* (max_rows, n_embd) residual stream */
    float *xn;          /* (max_rows, n_embd) normed input of a sublayer; also its output */
    float *q;           /* (max_rows, n_head * head_dim) roped queries */
    float *k, *v;       /* (max_rows, n_head_kv * head_dim) fresh roped keys, values */
    float *att;         /* (max_rows, n_head * head_dim) attention output */
    float *gate, *up;   /* (max_rows, n_ff) */
    void *mm_work;      /* kvs_matmul scratch, sized for the largest matrix */
    void *att_work;     /* kvs_attention scratch */
    kvs_fwd_rope rope[KVS_FWD_ROPE_TABLES];
    int rope_next;      /* the table a new configuration replaces */
    _Atomic int overflow_layer; /* 0, or 1 + a layer where a matmul's or the attention's input was not finite
                                 * (kvs_fwd_overflow_status) */
    /* (max_rows) The same per row, each row's first: a batched decode fails
     * only the rows that overflowed (kvs_fwd_overflow_rows). Plain ints: a
     * row's ops run on one thread at a time, pool runs apart. Nonzero only
     * while overflow_layer is, and cleared with it. */
    int *row_overflow;
} kvs_fwd;

int kvs_fwd_new(const kvs_model *model, kvs_pool *pool, int max_rows, int n_ctx, kvs_fwd **out);
void kvs_fwd_free(kvs_fwd *f);

/* x[r] = embedding of tokens[r], r < m, times the architecture's embedding
 * scale. Ids must be < n_vocab (caller checks). */
void kvs_fwd_embed(kvs_fwd *f, const int32_t *tokens, int m);
/* The same into out (m rows of n_embd): rows computed apart from f->x (the
 * repair's rowsets). */
void kvs_fwd_embed_rows(const kvs_fwd *f, const int32_t *tokens, int m, float *out);

/* Layer l, first part: q, k, v of rows 0..m from x (norm, projections, bias,
 * RoPE at pos[r]). Does not touch the KV buffer. */
void kvs_fwd_layer_qkv(kvs_fwd *f, int l, const int32_t *pos, int m);
/* Writes k, v rows into the buffer at slots pos[r] (converting to its type). */
void kvs_fwd_layer_store_kv(kvs_fwd *f, int l, const int32_t *pos, int m, kvs_kv_buffer *kv);
/* Layer l, second part: attention of q against kv, output projection, FFN;
 * x is updated in place. kv->n_ctx must be <= f->n_ctx. */
void kvs_fwd_layer_attn_ffn(kvs_fwd *f, int l, const int32_t *pos, int m, const kvs_kv_buffer *kv);
/* The attention and the FFN halves of kvs_fwd_layer_attn_ffn, for callers
 * whose rows live in different KV buffers (batched decode over several
 * contexts, src/engine/decode_batch.c): attention of rows r0..r0+m against
 * kv into att; then wo + FFN for rows 0..m. Row r's store into its own
 * buffer: kvs_fwd_layer_store_kv_row. Same bits as the fused calls. */
void kvs_fwd_layer_attn(kvs_fwd *f, int l, const int32_t *pos, int r0, int m, const kvs_kv_buffer *kv);
void kvs_fwd_layer_ffn(kvs_fwd *f, int l, const int32_t *pos, int m);
/* kvs_fwd_layer_attn for rows r0..r0+m, row r0 + i against its own buffer
 * kvs[i] (each n_ctx <= f->n_ctx): one pool run over
 * all rows' units (kvs_attention_rows) instead of one per row. Same bits. */
#define KVS_FWD_ATTN_ROWS 64
void kvs_fwd_layer_attn_rows(kvs_fwd *f, int l, const int32_t *pos, int r0, int m, const kvs_kv_buffer *const *kvs);
void kvs_fwd_layer_store_kv_row(kvs_fwd *f, int l, const int32_t *pos, int r, kvs_kv_buffer *kv);
/* The three steps above. */
void kvs_fwd_layer(kvs_fwd *f, int l, const int32_t *pos, int m, kvs_kv_buffer *kv);

/* Final norm + output head for the n rows listed in rows[] (indices into x,
 * n <= max_rows): logits (n, n_vocab). Only these rows pay for the head.
 * KVS_ERR_FORMAT when the layers' activations overflowed
 * (kvs_fwd_overflow_status), or a row's final hidden state or logits are
 * not finite: finite weights of extreme size, which the load's check of
 * every tensor for NaN / inf cannot see. */
int kvs_fwd_logits(kvs_fwd *f, const int *rows, int n, float *logits);
/* The same for rows that fail apart (batched decode over several contexts):
 * row_status[i] (n of them, the status of listed row i, rows[i]: from
 * kvs_fwd_overflow_rows where rows[i] = i) stays or becomes KVS_ERR_FORMAT
 * where that row overflowed, its logits then undefined; the other rows'
 * logits are exact. Returns KVS_OK, or KVS_ERR_FORMAT with the message of
 * the lowest listed row that fails here. */
int kvs_fwd_logits_rows(kvs_fwd *f, const int *rows, int n, float *logits, int *row_status);

/* KVS_ERR_FORMAT, naming the layer, if an input of a matmul or of the
 * attention was not finite since the last call (then clears it); else
 * KVS_OK. Every pass over layers checks it before using their results:
 * a quantized matmul takes a NaN activation as 0 (the block's largest
 * magnitude ignores it), and the attention a NaN score as masked, so an
 * overflow upstream had come out as finite, wrong logits. */
int kvs_fwd_overflow_status(kvs_fwd *f);
/* The same per row, for rows that are independent sequences (batched
 * decode: a row there reads no other row's KV, and the kernels are per
 * row, so an overflow stays in its row): row_status[r] = KVS_ERR_FORMAT
 * for each of rows 0..m whose own activations overflowed since the last
 * call, else KVS_OK. Then clears. Returns the number of such rows, the
 * message naming the first's layer. */
int kvs_fwd_overflow_rows(kvs_fwd *f, int m, int *row_status);

#endif
