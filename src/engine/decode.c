/* kvs_decode: run the model over tokens at given positions, n_batch rows at a time. */
#include "base/error.h"
#include "engine/context.h"

int kvs_context_check_batch(const kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n) {
    int n_vocab = kvs_context_n_vocab(ctx), n_ctx = ctx->params.n_ctx;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return kvs_error(KVS_ERR_INVALID_ARG, "token %d of %d: id %d is outside the vocabulary (0..%d)", i, n,
                             (int)tokens[i], n_vocab - 1);
        if (pos[i] < 0)
            return kvs_error(KVS_ERR_INVALID_ARG, "token %d of %d: position %d is negative", i, n, (int)pos[i]);
        if (pos[i] >= n_ctx)
            return kvs_error(KVS_ERR_CONTEXT_FULL,
                             "token %d of %d: position %d does not fit the context of %d tokens (slots 0..%d)", i, n,
                             (int)pos[i], n_ctx, n_ctx - 1);
    }
    /* Slots never written hold the buffer's zeros: attending to them gave
     * garbage without a word. A call runs n_batch tokens at a time: a
     * chunk's tokens attend to what it and the chunks before it wrote. */
    const int B = ctx->params.n_batch;
    for (int c0 = 0; c0 < n; c0 += B) {
        const int end = n - c0 < B ? n : c0 + B;
        int hi = pos[c0];
        for (int i = c0 + 1; i < end; i++) hi = pos[i] > hi ? pos[i] : hi;
        const int gap = kvs_kv_first_unwritten(&ctx->kv, pos, end, hi);
        for (int i = c0; gap >= 0 && i < end; i++)
            if (pos[i] > gap)
                return kvs_error(KVS_ERR_INVALID_ARG, "token %d of %d: position %d attends to slot %d, which was never "
                                 "written (write slots 0..%d first: decode, load or move into them; in one call, a "
                                 "slot a later batch of n_batch = %d tokens writes does not count)", i, n,
                                 (int)pos[i], gap, (int)pos[i] - 1, B);
    }
    return KVS_OK;
}

int kvs_decode_logits(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n, float *logits,
                      int n_logits) {
    if (!ctx || !tokens || !pos || n <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode: need a context, tokens, positions and n > 0 (n = %d)", n);
    if (n_logits < 0 || n_logits > n || (n_logits > 0 && !logits))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_decode: n_logits %d must be in 0..%d with a logits buffer",
                         n_logits, n);
    int st = kvs_context_check_batch(ctx, tokens, pos, n);
    if (st) return st;
    for (int i = 0; i < n; i++) kvs_kv_recal_end(&ctx->kv, pos[i]);

    kvs_fwd *f = ctx->fwd;
    const int n_layer = kvs_model_hparams(ctx->model)->n_layer, n_vocab = kvs_context_n_vocab(ctx);
    const int B = ctx->params.n_batch, first = n - n_logits;
    /* Progress only for calls that span several batches: one batch is short. */
    const int report = ctx->params.on_progress && n > B;
    const double t_start = report ? kvs_now_ms() : 0.0;
    for (int c0 = 0; c0 < n; c0 += B) {
        int m = n - c0 < B ? n - c0 : B;
        if ((st = kvs_context_poll_stop(ctx, n > 1 ? "a forward pass" : "a decode step", c0, n, "tokens"))) return st;
        kvs_fwd_embed(f, tokens + c0, m);
        for (int l = 0; l < n_layer; l++) kvs_fwd_layer(f, l, pos + c0, m, &ctx->kv);
        if ((st = kvs_fwd_overflow_status(f))) return st; /* (its slots are not exact) */
        kvs_kv_exact_extend(&ctx->kv, tokens + c0, pos + c0, m);
        /* Only the rows whose logits were asked for pay for the output head. */
        int i0 = first > c0 ? first : c0, k = 0;
        for (int i = i0; i < c0 + m; i++) ctx->rows[k++] = i - c0;
        if (k > 0 && (st = kvs_fwd_logits(f, ctx->rows, k, logits + (size_t)(i0 - first) * n_vocab))) return st;
        if (report) {
            kvs_progress pr = {c0 + m, n, kvs_now_ms() - t_start, 0.0, 0.0};
            pr.tok_s = pr.elapsed_ms > 0 ? pr.done * 1000.0 / pr.elapsed_ms : 0.0;
            pr.eta_ms = pr.tok_s > 0 ? (pr.total - pr.done) * 1000.0 / pr.tok_s : 0.0;
            ctx->params.on_progress(ctx->params.progress_user, &pr);
        }
    }
    return KVS_OK;
}

int kvs_decode(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n, float *logits) {
    return kvs_decode_logits(ctx, tokens, pos, n, logits, logits ? 1 : 0);
}
