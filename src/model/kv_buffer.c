/* KV buffer allocation (layout in kv_buffer.h). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/kv_buffer.h"

int kvs_kv_buffer_init(kvs_kv_buffer *kv, int n_layer, int n_kv_head, int n_ctx, int head_dim,
                       kvs_kv_type type) {
    if (n_layer <= 0 || n_kv_head <= 0 || n_ctx <= 0 || head_dim <= 0 || !kvs_kv_row_bytes(type, head_dim))
        return kvs_error(KVS_ERR_INVALID_ARG, "kv buffer: bad shape (%d layers, %d heads, %d slots, dim %d, type %d)",
                         n_layer, n_kv_head, n_ctx, head_dim, (int)type);
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_kv_head = n_kv_head;
    kv->n_ctx = n_ctx;
    kv->head_dim = head_dim;
    kv->type = type;
    kv->row_bytes = kvs_kv_row_bytes(type, head_dim);
    kv->head_bytes = (size_t)n_ctx * kv->row_bytes;
    kv->plane_bytes = (size_t)n_kv_head * kv->head_bytes;
    /* calloc of a large block maps zero pages lazily: a context sized for
     * 8192 tokens costs resident memory only for the slots it writes. */
    kv->data = calloc((size_t)n_layer * 2, kv->plane_bytes);
    if (!kv->data)
        return kvs_error(KVS_ERR_NOMEM, "kv buffer: cannot allocate %zu bytes for %d slots",
                         (size_t)n_layer * 2 * kv->plane_bytes, n_ctx);
    return KVS_OK;
}

void kvs_kv_buffer_release(kvs_kv_buffer *kv) {
    free(kv->data);
    kv->data = NULL;
}

size_t kvs_kv_buffer_bytes(const kvs_kv_buffer *kv) {
    return (size_t)kv->n_layer * 2 * kv->plane_bytes;
}
