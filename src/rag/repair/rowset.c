/* The sparse layer-major executor (rowset.h). */
#include "rag/repair/rowset.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int kvs_rowset_alloc(kvs_rowset *rs, int n, int n_embd) {
    memset(rs, 0, sizeof *rs);
    size_t rows = n > 0 ? (size_t)n : 1;
    rs->pos = malloc(rows * sizeof *rs->pos);
    rs->tok = malloc(rows * sizeof *rs->tok);
    rs->x = malloc(rows * (size_t)n_embd * sizeof *rs->x);
    if (!rs->pos || !rs->tok || !rs->x) {
        kvs_rowset_free(rs);
        return kvs_error(KVS_ERR_NOMEM, "repair: cannot allocate the state of %d rows", n);
    }
    rs->n = n;
    return KVS_OK;
}

void kvs_rowset_free(kvs_rowset *rs) {
    free(rs->pos);
    free(rs->tok);
    free(rs->x);
    memset(rs, 0, sizeof *rs);
}

void kvs_rowset_embed(kvs_fwd *f, kvs_rowset *rs) {
    /* the forward's own embedding (with the architecture's scale): a rowset
     * row must enter layer 0 exactly as a prefill's row does */
    kvs_fwd_embed_rows(f, rs->tok, rs->n, rs->x);
}

int kvs_rowset_layers(const kvs_context *ctx, kvs_fwd *f, kvs_kv_buffer *kv, kvs_rowset *rs, int l0, int l1) {
    const size_t d = (size_t)f->hp->n_embd;
    const int B = f->max_rows;
    for (int l = l0; l < l1; l++) {
        int st = kvs_context_poll_stop(ctx, "a repair", l, f->hp->n_layer, "layers");
        if (st) return st;
        for (int b0 = 0; b0 < rs->n; b0 += B) {
            int m = rs->n - b0 < B ? rs->n - b0 : B;
            /* The rows' residual stream goes through the forward scratch. */
            memcpy(f->x, rs->x + (size_t)b0 * d, (size_t)m * d * sizeof(float));
            kvs_fwd_layer(f, l, rs->pos + b0, m, kv);
            memcpy(rs->x + (size_t)b0 * d, f->x, (size_t)m * d * sizeof(float));
        }
        if ((st = kvs_fwd_overflow_status(f))) return st;
    }
    return KVS_OK;
}
