/* RoPE delta rotation of cached keys (move.h). */
#include "rag/move.h"

#include <stdatomic.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"

/* Tokens rotated per kernel call: the whole block shares one delta, so
 * kvs_rope evaluates the angles once (its per-thread memo) and treats the
 * block's tokens as heads. */
#define MOVE_BLOCK 16

kvs_rope_cfg kvs_rope_cfg_of(const kvs_hparams *hp) {
    kvs_rope_cfg rc = {hp->head_dim, hp->rope_dim, hp->rope_neox, hp->rope_freq_base, hp->rope_freq_scale, hp->layer};
    return rc;
}

static int rotate_run(const kvs_rope_cfg *rc, float base, float scale, const float *freq_factors, kvs_kv_type type,
                      const void *src, void *dst, int n_tok, int32_t delta);

int kvs_move_k_run(const kvs_rope_cfg *rc, kvs_kv_type type, const void *src, void *dst, int n_tok, int32_t delta) {
    return rotate_run(rc, rc->freq_base, rc->freq_scale, NULL, type, src, dst, n_tok, delta);
}

int kvs_move_k_run_layer(const kvs_rope_cfg *rc, int l, kvs_kv_type type, const void *src, void *dst, int n_tok,
                         int32_t delta) {
    /* The layer's own base, scale and (Llama 3) frequency factors: the same
     * rotation the forward pass applied, so a move is a rotation by delta. */
    if (!rc->layer) return rotate_run(rc, rc->freq_base, rc->freq_scale, NULL, type, src, dst, n_tok, delta);
    return rotate_run(rc, rc->layer[l].rope_freq_base, rc->layer[l].rope_freq_scale, rc->layer[l].rope_freq_factors,
                      type, src, dst, n_tok, delta);
}

static int rotate_run(const kvs_rope_cfg *rc, float base, float scale, const float *freq_factors, kvs_kv_type type,
                      const void *src, void *dst, int n_tok, int32_t delta) {
    const int hd = rc->head_dim;
    const size_t row = kvs_kv_row_bytes(type, hd);
    if (delta == 0) {
        if (src != dst) memmove(dst, src, (size_t)n_tok * row);
        return 0;
    }
    int overflow = 0;
    float buf[MOVE_BLOCK * KVS_MOVE_MAX_HEAD_DIM]; /* (MOVE_BLOCK, head_dim) */
    for (int t0 = 0; t0 < n_tok; t0 += MOVE_BLOCK) {
        int m = n_tok - t0 < MOVE_BLOCK ? n_tok - t0 : MOVE_BLOCK;
        size_t off = (size_t)t0 * row;
        /* Q8 keys come back quantized again: a moved Q8 key is the rotation
         * of its levels, rounded to levels (F16 likewise rounds to halves) */
        kvs_kv_rows_load(type, (const uint8_t *)src + off, buf, m, hd);
        kvs_rope_ff(buf, m, hd, rc->rope_dim, delta, base, scale, rc->neox, freq_factors);
        /* a rotation keeps a pair's length, not its parts: an F16 key past
         * 65520 / sqrt(2) may come out as inf, which the attention masks */
        overflow |= type == KVS_KV_F16 && kvs_row_reaches(buf, m * hd, KVS_F16_INF_FROM);
        kvs_kv_rows_store(type, buf, (uint8_t *)dst + off, m, hd);
    }
    return overflow;
}

typedef struct move_task {
    const kvs_chunk *c;
    kvs_kv_buffer *kv;
    const kvs_rope_cfg *rc;
    int off, n, slot;
    int32_t delta;
    _Atomic int overflow; /* a moved F16 key past the type's range */
} move_task;

/* One task = one (layer, head): its K run rotated, its V run copied. */
static void move_one(void *arg, int task, int ith) {
    (void)ith;
    move_task *t = arg;
    const kvs_chunk *c = t->c;
    const int nh = c->shape.n_kv_head, l = task / nh, h = task % nh;
    const size_t row = t->kv->row_bytes;
    /* Chunk layer planes are (n_kv_head, n_tok) rows. */
    size_t src_off = ((size_t)h * c->n_tok + (size_t)t->off) * row;
    const char *ks = (const char *)kvs_chunk_layer_k(c, l) + src_off;
    const char *vs = (const char *)kvs_chunk_layer_v(c, l) + src_off;
    if (kvs_move_k_run_layer(t->rc, l, t->kv->type, ks, kvs_kv_at(t->kv, l, 0, h, t->slot), t->n, t->delta))
        atomic_store(&t->overflow, 1);
    memcpy(kvs_kv_at(t->kv, l, 1, h, t->slot), vs, (size_t)t->n * row);
}

int kvs_move_chunk_to_kv(const kvs_chunk *c, int off, int n, kvs_kv_buffer *kv, int slot, const kvs_rope_cfg *rc,
                         kvs_pool *pool) {
    if (!c || !kv || !rc || !c->kv)
        return kvs_error(KVS_ERR_INVALID_ARG, "move: need a resident chunk, a KV buffer and a RoPE config");
    if (c->shape.n_layer != kv->n_layer || c->shape.n_kv_head != kv->n_kv_head || c->shape.head_dim != kv->head_dim ||
        c->shape.dtype != kv->type || rc->head_dim != kv->head_dim)
        return kvs_error(KVS_ERR_INVALID_ARG, "move: the chunk's KV shape (%d layers, %d heads x %d, %s) is not the "
                         "buffer's (%d layers, %d heads x %d, %s)", c->shape.n_layer, c->shape.n_kv_head,
                         c->shape.head_dim, c->shape.dtype == KVS_KV_F16 ? "f16" : "f32", kv->n_layer, kv->n_kv_head,
                         kv->head_dim, kv->type == KVS_KV_F16 ? "f16" : "f32");
    if (kv->head_dim > KVS_MOVE_MAX_HEAD_DIM)
        return kvs_error(KVS_ERR_UNSUPPORTED, "move: head_dim %d exceeds %d", kv->head_dim, KVS_MOVE_MAX_HEAD_DIM);
    kvs_kv_recal_end(kv, slot);
    kvs_kv_wrote(kv, -1, slot);
    if (off < 0 || n < 0 || off + n > c->n_tok || slot < 0 || slot + n > kv->n_ctx)
        return kvs_error(KVS_ERR_INVALID_ARG, "move: tokens [%d, %d) of a %d-token chunk do not fit slots [%d, %d) of "
                         "%d", off, off + n, c->n_tok, slot, slot + n, kv->n_ctx);
    if (n == 0) return KVS_OK;
    move_task t = {c, kv, rc, off, n, slot, (int32_t)(slot - (c->pos0 + off)), 0};
    kvs_pool_for(pool, kv->n_layer * kv->n_kv_head, move_one, &t);
    if (atomic_load(&t.overflow))
        return kvs_error(KVS_ERR_FORMAT, "move: a key of the chunk at %d, moved by %d positions, is past an F16 KV "
                         "slot's range: the model's activations overflow (weights of extreme size?)", c->pos0,
                         (int)t.delta);
    kvs_kv_mark_run(kv, slot, n);
    return KVS_OK;
}
