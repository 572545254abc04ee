/*
 * The attention KV of one sequence: every layer's keys and values, one slot
 * per absolute position. The forward pass writes slot = position in place and
 * attention reads slots 0..pos; the reuse layers copy, move and compare slots.
 *
 *   data: +----------- layer 0 ------------+----------- layer 1 ---- ...
 *         | K (n_kv_head, n_ctx, head_dim) | V (n_kv_head, n_ctx, head_dim) | K ...
 *         +--------------------------------+--------------------------------+
 *
 * A slot of one head is one KV row of kvs_kv_type (kernels.h: head_dim F16
 * or F32 elements, or Q8's head_dim levels and a scale), row_bytes long; a
 * head's slots are contiguous, so
 * a range of positions of one (layer, K/V, head) is one contiguous run.
 */
#ifndef KVS_MODEL_KV_BUFFER_H
#define KVS_MODEL_KV_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kvstitch.h"

typedef struct kvs_kv_buffer {
    int n_layer, n_kv_head, n_ctx, head_dim;
    kvs_kv_type type;
    size_t row_bytes;    /* one slot of one head: kvs_kv_row_bytes(type, head_dim) */
    size_t head_bytes;   /* bytes of one head's slots: n_ctx * row_bytes */
    size_t plane_bytes;  /* bytes of one layer's K (== its V): n_kv_head * head_bytes */
    void *data;          /* (n_layer, 2, n_kv_head, n_ctx, head_dim), zero-filled */
    /* Moved documents at slots [recal.lo, recal.hi) that later rows attend to
     * recalibrated (APE); set after the assembly of a request, ended by any
     * write before its end (kvs_kv_recal_end). Zero: none. */
    kvs_attn_recal recal;
} kvs_kv_buffer;

/* Allocates a zeroed buffer (pages are touched only as slots get written). */
int kvs_kv_buffer_init(kvs_kv_buffer *kv, int n_layer, int n_kv_head, int n_ctx, int head_dim,
                       kvs_kv_type type);
void kvs_kv_buffer_release(kvs_kv_buffer *kv); /* safe on a zeroed struct */
size_t kvs_kv_buffer_bytes(const kvs_kv_buffer *kv);

/* A write to slot pos (a forward, a copy, a move) starts another sequence
 * there when pos is before the recalibrated documents' end: they end too. */
static inline void kvs_kv_recal_end(kvs_kv_buffer *kv, int pos) {
    if (pos < kv->recal.hi) memset(&kv->recal, 0, sizeof kv->recal);
}

/* Layer l's K or V plane: (n_kv_head, n_ctx) rows. */
static inline void *kvs_kv_k(const kvs_kv_buffer *kv, int l) {
    return (char *)kv->data + (size_t)l * 2 * kv->plane_bytes;
}
static inline void *kvs_kv_v(const kvs_kv_buffer *kv, int l) {
    return (char *)kv->data + ((size_t)l * 2 + 1) * kv->plane_bytes;
}
/* Address of (layer l, plane 0=K / 1=V, head h, slot pos). */
static inline void *kvs_kv_at(const kvs_kv_buffer *kv, int l, int plane, int h, int pos) {
    return (char *)kv->data + ((size_t)l * 2 + (size_t)plane) * kv->plane_bytes + (size_t)h * kv->head_bytes +
           (size_t)pos * kv->row_bytes;
}

#endif
