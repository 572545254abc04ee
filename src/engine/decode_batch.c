/*
 * kvs_decode_batch: one decode step for several sequences, each living in
 * its own context (a server slot), through ONE forward pass.
 *
 *   rows    r = 0..n-1, one per context: token[r] at position pos[r]
 *   stacked embed, QKV projections, wo, FFN, output head: one matmul per
 *           weight with m = n rows (the weights are read once per step)
 *   per row K/V stored into ctxs[r]'s buffer, attention against it (all
 *           rows' units in one pool run: kvs_attention_rows)
 *
 * The scratch (activations, matmul and attention work) is ctxs[0]'s, and so
 * is the thread pool. Batch invariance of the kernels makes row r's bits
 * those of kvs_decode(ctxs[r], &token[r], &pos[r], 1, ...) alone, and a
 * row whose activations overflow fails alone (kvs_decode_batch_rows).
 */
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "engine/context.h"

/* The step's rows r, each checked as kvs_decode would check it alone. */
static int check_rows(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n, float *logits) {
    if (!ctxs || !tokens || !pos || !logits || n <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: need contexts, tokens, positions, logits and n > 0 "
                         "(n = %d)", n);
    kvs_context *host = ctxs[0];
    if (!host) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: context 0 is NULL");
    if (n > host->params.n_batch)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: %d rows exceed context 0's n_batch of %d", n,
                         host->params.n_batch);
    for (int r = 0; r < n; r++) {
        const kvs_context *c = ctxs[r];
        if (!c) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: context %d is NULL", r);
        if (c->model != host->model)
            return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: context %d runs another model than context 0", r);
        /* Attention scratch is sized for context 0's window. */
        if (c->params.n_ctx > host->params.n_ctx)
            return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: context %d holds %d tokens, more than context "
                             "0's %d", r, c->params.n_ctx, host->params.n_ctx);
        for (int q = 0; q < r; q++)
            if (ctxs[q] == c)
                return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode_batch: contexts %d and %d are the same", q, r);
        int st = kvs_context_check_batch(c, tokens + r, pos + r, 1);
        if (st) { /* its message says "token 0 of 1": name the row */
            char why[400];
            snprintf(why, sizeof why, "%s", kvs_last_error());
            return kvs_error(st, "kvs_decode_batch: row %d of %d: %s", r, n, why);
        }
    }
    return KVS_OK;
}

static int first_failed(const int *row_status, int n) {
    for (int r = 0; r < n; r++)
        if (row_status[r]) return r;
    return -1;
}

/* The forward pass of the step: row r's KV into ctxs[r], its logits into
 * logits; row_status[r] its own overflow (kvs_fwd_overflow_rows, then the
 * final checks of kvs_fwd_logits_rows). Returns the first failed row (-1:
 * none), the last error naming why. */
static int step(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n, float *logits,
                int *row_status) {
    kvs_context *host = ctxs[0];
    for (int r = 0; r < n; r++) kvs_kv_recal_end(&ctxs[r]->kv, pos[r]);

    kvs_fwd *f = host->fwd;
    const int n_layer = kvs_model_hparams(host->model)->n_layer;
    kvs_fwd_embed(f, tokens, n);
    for (int l = 0; l < n_layer; l++) {
        kvs_fwd_layer_qkv(f, l, pos, n);
        for (int r = 0; r < n; r++) kvs_fwd_layer_store_kv_row(f, l, pos, r, &ctxs[r]->kv);
        for (int r0 = 0; r0 < n; r0 += KVS_FWD_ATTN_ROWS) {
            const kvs_kv_buffer *kvs[KVS_FWD_ATTN_ROWS];
            const int m = n - r0 < KVS_FWD_ATTN_ROWS ? n - r0 : KVS_FWD_ATTN_ROWS;
            for (int i = 0; i < m; i++) kvs[i] = &ctxs[r0 + i]->kv;
            kvs_fwd_layer_attn_rows(f, l, pos, r0, m, kvs);
        }
        kvs_fwd_layer_ffn(f, l, pos, n);
    }
    char early_why[400] = "";
    if (kvs_fwd_overflow_rows(f, n, row_status)) snprintf(early_why, sizeof early_why, "%s", kvs_last_error());
    const int early = first_failed(row_status, n);
    /* As kvs_decode: the slots of rows whose layers ran clean are exact,
     * whatever the final checks say (a cache may store that KV). */
    for (int r = 0; r < n; r++)
        if (!row_status[r]) kvs_kv_exact_extend(&ctxs[r]->kv, tokens + r, pos + r, 1);
    for (int r = 0; r < n; r++) host->rows[r] = r;
    const int late = kvs_fwd_logits_rows(f, host->rows, n, logits, row_status);
    /* The last error names the lowest row that failed in the logits; the
     * first overall may be one that failed in the layers. */
    const int first = first_failed(row_status, n);
    if (late && first == early) kvs_error(KVS_ERR_FORMAT, "%s", early_why);
    return first;
}

int kvs_decode_batch_rows(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n, float *logits,
                          int *row_status) {
    int st = check_rows(ctxs, tokens, pos, n, logits);
    if (st) {
        for (int r = 0; row_status && r < n; r++) row_status[r] = st;
        return st;
    }
    int *status = row_status ? row_status : ctxs[0]->row_status;
    const int first = step(ctxs, tokens, pos, n, logits, status);
    if (first < 0) return KVS_OK;
    int n_bad = 0;
    for (int r = 0; r < n; r++) n_bad += status[r] != KVS_OK;
    char why[400]; /* the first failed row's (row_status says which others) */
    snprintf(why, sizeof why, "%s", kvs_last_error());
    return kvs_error(status[first], "kvs_decode_batch: row %d of %d%s: %s", first, n,
                     n_bad > 1 ? " (and others)" : "", why);
}

int kvs_decode_batch(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n, float *logits) {
    return kvs_decode_batch_rows(ctxs, tokens, pos, n, logits, NULL);
}
