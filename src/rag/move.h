/*
 * Moving cached KV to another position.
 *
 * RoPE rotates each (pair of) key dimension(s) by an angle proportional to
 * the absolute position, and rotations compose: R(p + d) = R(d) R(p). A key
 * computed at position p is therefore moved to p + d by rotating it by d;
 * values carry no position and are copied as they are. (What does not move
 * is the context: a moved chunk's KV still reflects the tokens it was
 * computed after; the repair strategies (repair.h) deal with that.)
 *
 * Precision: each move reads the stored element (f16 or f32), rotates it in
 * double (the kvs_rope kernel: angle and rotation in double, one rounding to
 * float) and rounds once to the storage type. Moves always start from the
 * stored chunk, never from an already moved copy, so a placement costs one
 * rounding whatever the history. Moving by d and back by -d returns each
 * element within one storage ulp of its pair's magnitude
 * (|error| <= 2^-10 * |(x_a, x_b)| for f16, 2^-22 for f32; tests/test_move.c).
 */
#ifndef KVS_REUSE_MOVE_H
#define KVS_REUSE_MOVE_H

#include <stdint.h>

#include "base/threadpool.h"
#include "kv/chunk.h"
#include "model/kv_buffer.h"
#include "model/model.h"

/* Largest head_dim a move handles (the scratch is on the stack). */
#define KVS_MOVE_MAX_HEAD_DIM 512

/* The RoPE configuration of a model's keys. Layers may rotate with their
 * own base (sliding-window layers of gemma3): layer[l] then overrides
 * freq_base / freq_scale for layer l. */
typedef struct kvs_rope_cfg {
    int head_dim, rope_dim, neox;
    float freq_base, freq_scale;     /* of every layer when layer is NULL */
    const kvs_layer_hparams *layer;  /* (n_layer) or NULL; owned by the model */
} kvs_rope_cfg;

kvs_rope_cfg kvs_rope_cfg_of(const kvs_hparams *hp);

/* Rotates the keys of n_tok consecutive tokens of one head by delta
 * positions: src and dst are (n_tok, head_dim) elements of type (they may be
 * the same buffer). delta = 0 copies. kvs_move_k_run uses rc's freq_base /
 * freq_scale; kvs_move_k_run_layer those of layer l. Returns 1 if an F16
 * key came out past the type's range (stored as inf), else 0. */
int kvs_move_k_run(const kvs_rope_cfg *rc, kvs_kv_type type, const void *src, void *dst, int n_tok, int32_t delta);
int kvs_move_k_run_layer(const kvs_rope_cfg *rc, int l, kvs_kv_type type, const void *src, void *dst, int n_tok,
                         int32_t delta);

/* Places tokens [off, off + n) of a resident chunk into kv at slots
 * [slot, slot + n) of every layer: V copied, K rotated by
 * slot - (chunk->pos0 + off) with the layer's RoPE. Splits over the pool by (layer, head).
 * KVS_ERR_INVALID_ARG (nothing written) if the shapes differ, the chunk has
 * no payload or the range does not fit; KVS_ERR_FORMAT if a moved F16 key
 * came out past the type's range (kvs_move_k_run_layer). */
int kvs_move_chunk_to_kv(const kvs_chunk *c, int off, int n, kvs_kv_buffer *kv, int slot, const kvs_rope_cfg *rc,
                         kvs_pool *pool);

#endif
