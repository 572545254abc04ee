/* Context lifecycle: resolve params, create the pool, KV buffer and scratch;
 * its accessors and its stop poll. */
#include <stdlib.h>
#include <unistd.h>

#include "base/error.h"
#include "engine/context.h"

#define KVS_CTX_MAX_DEFAULT 8192
#define KVS_BATCH_DEFAULT 512

kvs_context_params kvs_context_default_params(void) {
    kvs_context_params p = {0};
    p.n_ctx = 0;
    p.n_threads = 0;
    p.n_batch = 0;
    p.kv_type = KVS_KV_F16;
    return p;
}

int kvs_context_new(kvs_model *model, kvs_context_params p, kvs_context **out) {
    if (!model || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_context_new: model and out must not be NULL");
    if (kvs_model_is_vocab_only(model))
        return kvs_error(KVS_ERR_INVALID_ARG,
                         "%s: cannot create an inference context: the model was loaded without weights "
                         "(vocabulary-only file or vocab_only = 1)", kvs_model_path(model));
    const kvs_hparams *hp = kvs_model_hparams(model);
    if (p.n_ctx < 0 || p.n_threads < 0 || p.n_batch < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_context_new: n_ctx %d, n_threads %d, n_batch %d must not be negative",
                         p.n_ctx, p.n_threads, p.n_batch);
    if (p.n_threads > KVS_MAX_THREADS)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_context_new: n_threads %d is more than %d", p.n_threads,
                         KVS_MAX_THREADS);
    if (!kvs_kv_row_bytes(p.kv_type, 1))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_context_new: unknown kv_type %d", (int)p.kv_type);
    if (p.kv_type == KVS_KV_Q8 && hp->head_dim > KVS_KV_Q8_MAX_HEAD_DIM)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a Q8 KV cache takes heads of up to %d dims, this model's have %d",
                         kvs_model_path(model), KVS_KV_Q8_MAX_HEAD_DIM, hp->head_dim);
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train < KVS_CTX_MAX_DEFAULT ? hp->n_ctx_train : KVS_CTX_MAX_DEFAULT;
    if (p.n_ctx <= 0) p.n_ctx = KVS_CTX_MAX_DEFAULT;
    /* Past its trained length a model without RoPE scaling produces
     * nonsense, silently: that takes an explicit opt-in. */
    if (hp->n_ctx_train > 0 && p.n_ctx > hp->n_ctx_train && !p.allow_beyond_train) {
        kvs_model_info info;
        kvs_model_get_info(model, &info);
        return kvs_error(KVS_ERR_CONTEXT_FULL,
                         "%s: a context of %d tokens exceeds the %d tokens the model was trained on "
                         "(%s.context_length); going beyond it takes an explicit opt-in (allow_beyond_train; the "
                         "CLI's --ctx-beyond-train), and the output degrades",
                         kvs_model_path(model), p.n_ctx, hp->n_ctx_train, info.arch);
    }
    if (p.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = n > 0 ? (int)n : 1;
    }
    if (p.n_batch == 0) p.n_batch = KVS_BATCH_DEFAULT;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;

    kvs_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return kvs_error(KVS_ERR_NOMEM, "kvs_context_new: out of memory");
    ctx->model = model;
    ctx->params = p;
    int st = KVS_OK;
    if (p.n_threads > 1 && !(ctx->pool = kvs_pool_new(p.n_threads))) {
        st = kvs_error(KVS_ERR_NOMEM, "kvs_context_new: cannot start %d threads", p.n_threads);
        goto fail;
    }
    if ((st = kvs_kv_buffer_init(&ctx->kv, hp->n_layer, hp->n_head_kv, p.n_ctx, hp->head_dim, p.kv_type))) goto fail;
    if ((st = kvs_kv_buffer_track_exact(&ctx->kv)) || (st = kvs_kv_buffer_track_written(&ctx->kv))) goto fail;
    if ((st = kvs_fwd_new(model, ctx->pool, p.n_batch, p.n_ctx, &ctx->fwd))) goto fail;
    ctx->rows = malloc((size_t)p.n_batch * sizeof *ctx->rows);
    ctx->row_status = malloc((size_t)p.n_batch * sizeof *ctx->row_status);
    if (!(ctx->logits = malloc((size_t)hp->n_vocab * sizeof(float))) || !ctx->rows || !ctx->row_status) {
        st = kvs_error(KVS_ERR_NOMEM, "kvs_context_new: out of memory");
        goto fail;
    }
    *out = ctx;
    return KVS_OK;
fail:
    kvs_context_free(ctx);
    return st;
}

void kvs_context_free(kvs_context *ctx) {
    if (!ctx) return;
    kvs_fwd_free(ctx->fwd);
    kvs_kv_buffer_release(&ctx->kv);
    kvs_pool_free(ctx->pool);
    free(ctx->logits);
    free(ctx->rows);
    free(ctx->row_status);
    free(ctx);
}

int kvs_context_n_ctx(const kvs_context *ctx) { return ctx ? ctx->params.n_ctx : 0; }

int kvs_context_poll_stop(const kvs_context *ctx, const char *what, int done, int total, const char *unit) {
    if (!ctx->should_stop || !ctx->should_stop(ctx->stop_user)) return KVS_OK;
    return kvs_error(KVS_ERR_INTERRUPTED, "%s stopped by the context's should_stop poll after %d of %d %s", what, done,
                     total, unit);
}

void kvs_context_set_should_stop(kvs_context *ctx, kvs_stop_callback fn, void *user) {
    if (!ctx) return;
    ctx->should_stop = fn;
    ctx->stop_user = user;
}

int kvs_stop_when_set(void *flag) { return flag && __atomic_load_n((const int *)flag, __ATOMIC_RELAXED) != 0; }
void kvs_stop_flag_set(void *flag, int value) {
    if (flag) __atomic_store_n((int *)flag, value, __ATOMIC_RELAXED);
}
kvs_kv_buffer *kvs_context_kv(kvs_context *ctx) { return &ctx->kv; }
kvs_fwd *kvs_context_fwd(kvs_context *ctx) { return ctx->fwd; }
const kvs_model *kvs_context_model(const kvs_context *ctx) { return ctx->model; }
int kvs_context_n_batch(const kvs_context *ctx) { return ctx->params.n_batch; }
int kvs_context_n_threads(const kvs_context *ctx) { return ctx->params.n_threads; }
int kvs_context_n_vocab(const kvs_context *ctx) { return kvs_model_hparams(ctx->model)->n_vocab; }
