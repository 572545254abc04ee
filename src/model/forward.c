/*
 * The decoder forward pass, one layer at a time (see forward.h).
 *
 * Matmuls run through the pool inside the kernels. The per-row glue (norms,
 * bias, RoPE, KV stores, residual adds, SiLU) runs here, split over threads
 * by whole rows, so each row is computed by the same code whatever the split.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/forward.h"

/* Below this many elements a row op is not worth waking the pool for
 * (decode: one row per call). */
#define KVS_FWD_INLINE_ELEMS 2048

typedef enum row_op {
    OP_ATTN_NORM,     /* xn = rmsnorm(x, attn_norm) */
    OP_QKV_POST,      /* q, k, v += bias; q, k = rmsnorm per head (q/k norm); rope q, k */
    OP_STORE_KV,      /* kv[pos] = k, v */
    OP_RESID_FFN_NORM,/* [xn = rmsnorm(xn, attn_post_norm)]; x += xn; xn = rmsnorm(x, ffn_norm) */
    OP_ACT_MUL,       /* gate = act(gate) * up (the row's activation) */
    OP_RESID,         /* [xn = rmsnorm(xn, ffn_post_norm)]; x += xn */
    OP_OUT_NORM,      /* xn[i] = rmsnorm(x[rows[i]], output_norm) */
} row_op;

typedef struct row_task {
    kvs_fwd *f;
    row_op op;
    int l, m;
    const int32_t *pos;
    kvs_kv_buffer *kv;
    const int *rows;
    kvs_fwd_rope *rope; /* OP_QKV_POST: the rows' cos and sin */
    int rope_fill;      /* ... which this pass computes first */
} row_task;

static void add_row(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

static void store_row(const kvs_kv_buffer *kv, int l, int plane, const float *src, int32_t pos) {
    for (int h = 0; h < kv->n_kv_head; h++) {
        kvs_kv_row_store(kv->type, src + (size_t)h * kv->head_dim, kvs_kv_at(kv, l, plane, h, pos), kv->head_dim);
    }
}

/* RMSNorm of one head in place (Q/K norm), with the model's epsilon. */
static void norm_head(float *x, const float *w, const kvs_hparams *hp) {
    kvs_rmsnorm(x, x, w, hp->head_dim, hp->norm_eps);
}

/* Layer l's activations overflowed in row r (the first layer flagged is
 * kept, for the pass and for the row; a task's rows share their layer). */
static void flag_overflow(kvs_fwd *f, int l, int r) {
    int none = 0;
    atomic_compare_exchange_strong(&f->overflow_layer, &none, l + 1);
    if (!f->row_overflow[r]) f->row_overflow[r] = l + 1;
}

/* Row v (row r's) of n floats has overflowed (kvs_row_overflows):
 * flag_overflow. Checked where an overflow could be lost: the attention's
 * inputs (it takes a NaN score as masked; below the bound its scores and so
 * its output cannot overflow), down's input (a quantized matmul takes a NaN
 * activation as 0), and the residual stream, which only adds, so an
 * overflow anywhere else reaches it, and which feeds every other input (a
 * norm of it with huge weights overflows into q, k, v or down's input, all
 * checked); a row before a norm (q and k before theirs, wo's and down's
 * outputs before gemma3's post-norms: past the bound a norm gives zeros);
 * and the K and V an F16 buffer stores (store_kv_rows). */
static void check_row(kvs_fwd *f, int l, int r, const float *v, int n) {
    if (kvs_row_overflows(v, n)) flag_overflow(f, l, r);
}

/* Row r's K and V into kv at pos. An F16 buffer stores a magnitude past
 * its range as inf, which the attention takes as a NaN score, masked: so
 * such a row is an overflow too (keys of 1.2e5 from a patched wk had given
 * other logits with exit 0, and been marked exact). */
static void store_kv_rows(kvs_fwd *f, const kvs_kv_buffer *kv, int l, int r, int32_t pos) {
    const int kvd = kv->n_kv_head * kv->head_dim;
    const float *k = f->k + (size_t)r * kvd, *v = f->v + (size_t)r * kvd;
    if (kv->type == KVS_KV_F16 &&
        (kvs_row_reaches(k, kvd, KVS_F16_INF_FROM) || kvs_row_reaches(v, kvd, KVS_F16_INF_FROM)))
        flag_overflow(f, l, r);
    store_row(kv, l, 0, k, pos);
    store_row(kv, l, 1, v, pos);
}

static int overflow_error(int l) {
    return kvs_error(KVS_ERR_FORMAT, "the activations of layer %d are not finite or past 2^40: the model's activations "
                     "overflow (weights of extreme size?)", l - 1);
}

int kvs_fwd_overflow_status(kvs_fwd *f) {
    const int l = atomic_exchange(&f->overflow_layer, 0);
    if (!l) return KVS_OK;
    memset(f->row_overflow, 0, (size_t)f->max_rows * sizeof *f->row_overflow);
    return overflow_error(l);
}

int kvs_fwd_overflow_rows(kvs_fwd *f, int m, int *row_status) {
    int n_bad = 0, first_layer = 0;
    for (int r = 0; r < m; r++) {
        row_status[r] = f->row_overflow[r] ? KVS_ERR_FORMAT : KVS_OK;
        if (f->row_overflow[r] && n_bad++ == 0) first_layer = f->row_overflow[r];
    }
    kvs_fwd_overflow_status(f); /* clears all (rows past m: none, the pass ran m) */
    if (n_bad) overflow_error(first_layer);
    return n_bad;
}

static void row_op_one(const row_task *t, int r) {
    kvs_fwd *f = t->f;
    const kvs_hparams *hp = f->hp;
    const int d = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const kvs_layer_weights *w = t->op == OP_OUT_NORM ? NULL : kvs_model_layer(f->model, t->l);
    float *x = f->x + (size_t)r * d, *xn = f->xn + (size_t)r * d;
    switch (t->op) {
    case OP_ATTN_NORM:
        kvs_rmsnorm(xn, x, w->attn_norm, d, hp->norm_eps);
        break;
    case OP_QKV_POST: {
        float *q = f->q + (size_t)r * qd, *k = f->k + (size_t)r * kvd, *v = f->v + (size_t)r * kvd;
        const kvs_layer_hparams *lh = &hp->layer[t->l];
        if (w->bq) add_row(q, w->bq, qd);
        if (w->bk) add_row(k, w->bk, kvd);
        if (w->bv) add_row(v, w->bv, kvd);
        /* (before a norm too: past the bound its sum of squares overflows and
         * it gives zeros, which no later check sees) */
        if (w->q_norm) {
            check_row(f, t->l, r, q, qd);
            for (int h = 0; h < hp->n_head; h++) norm_head(q + (size_t)h * hp->head_dim, w->q_norm, hp);
        }
        if (w->k_norm) {
            check_row(f, t->l, r, k, kvd);
            for (int h = 0; h < hp->n_head_kv; h++) norm_head(k + (size_t)h * hp->head_dim, w->k_norm, hp);
        }
        double *c = t->rope->cs + (size_t)r * hp->rope_dim, *s = c + hp->rope_dim / 2;
        if (t->rope_fill)
            kvs_rope_cos_sin(hp->rope_dim, t->pos[r], lh->rope_freq_base, lh->rope_freq_scale, lh->rope_freq_factors,
                             c, s);
        kvs_rope_apply(q, hp->n_head, hp->head_dim, hp->rope_dim, hp->rope_neox, c, s);
        kvs_rope_apply(k, hp->n_head_kv, hp->head_dim, hp->rope_dim, hp->rope_neox, c, s);
        check_row(f, t->l, r, q, qd); /* the attention's inputs */
        check_row(f, t->l, r, k, kvd);
        check_row(f, t->l, r, v, kvd);
        break;
    }
    case OP_STORE_KV:
        store_kv_rows(f, t->kv, t->l, r, t->pos[r]);
        break;
    case OP_RESID_FFN_NORM:
        if (w->attn_post_norm) {
            check_row(f, t->l, r, xn, d); /* wo's output, before its norm */
            kvs_rmsnorm(xn, xn, w->attn_post_norm, d, hp->norm_eps);
        }
        add_row(x, xn, d);
        kvs_rmsnorm(xn, x, w->ffn_norm, d, hp->norm_eps);
        break;
    case OP_ACT_MUL:
        if (hp->arch->act == KVS_ACT_GELU_TANH)
            kvs_gelu_tanh_mul(f->gate + (size_t)r * hp->n_ff, f->up + (size_t)r * hp->n_ff, hp->n_ff);
        else
            kvs_silu_mul(f->gate + (size_t)r * hp->n_ff, f->up + (size_t)r * hp->n_ff, hp->n_ff);
        check_row(f, t->l, r, f->gate + (size_t)r * hp->n_ff, hp->n_ff); /* down's */
        break;
    case OP_RESID:
        if (w->ffn_post_norm) {
            check_row(f, t->l, r, xn, d); /* down's output, before its norm */
            kvs_rmsnorm(xn, xn, w->ffn_post_norm, d, hp->norm_eps);
        }
        add_row(x, xn, d);
        check_row(f, t->l, r, x, d);
        break;
    case OP_OUT_NORM:
        kvs_rmsnorm(xn, f->x + (size_t)t->rows[r] * d, kvs_model_output_norm(f->model), d, hp->norm_eps);
        break;
    }
}

/* Rows per pool chunk: small enough to balance two threads when one of them
 * is descheduled, and to split a step of 8 streams (with 8 rows a chunk and
 * 16384 elements above, its row ops ran on one thread while the other
 * waited; perf put 12% of a 2-thread step's samples in the pool's waits;
 * measured with MM_QUANT_ROWS, kernels/dispatch.c), large enough to
 * amortise the hand-out. */
#define KVS_FWD_ROWS_PER_CHUNK 4

static void row_chunk_fn(void *arg, int chunk, int ith) {
    const row_task *t = arg;
    int r0 = chunk * KVS_FWD_ROWS_PER_CHUNK, r1 = r0 + KVS_FWD_ROWS_PER_CHUNK;
    if (r1 > t->m) r1 = t->m;
    for (int r = r0; r < r1; r++) row_op_one(t, r);
}

static void run_task(kvs_fwd *f, row_task t) {
    const row_op op = t.op;
    const int m = t.m;
    int width = op == OP_ACT_MUL ? f->hp->n_ff : f->hp->n_embd;
    int n_chunks = (m + KVS_FWD_ROWS_PER_CHUNK - 1) / KVS_FWD_ROWS_PER_CHUNK;
    if (!f->pool || (long long)m * width < KVS_FWD_INLINE_ELEMS) {
        for (int c = 0; c < n_chunks; c++) row_chunk_fn(&t, c, 0);
    } else {
        kvs_pool_for_spans(f->pool, n_chunks, row_chunk_fn, &t); /* a thread's rows stay in its cache (dispatch.c, mm_rows) */
    }
}

static void run_rows(kvs_fwd *f, row_op op, int l, int m, const int32_t *pos, kvs_kv_buffer *kv,
                     const int *rows) {
    run_task(f, (row_task){f, op, l, m, pos, kv, rows, NULL, 0});
}

/* The table of layer l's rope configuration for rows at pos (m of them),
 * *fill set where its values are still to be computed (the table is then
 * taken for them). A prefill of 512 rows had computed 32 sincos per row in
 * every layer: ~1% of its time. */
static kvs_fwd_rope *rope_table(kvs_fwd *f, int l, const int32_t *pos, int m, int *fill) {
    const kvs_layer_hparams *lh = &f->hp->layer[l];
    for (int i = 0; i < KVS_FWD_ROPE_TABLES; i++) {
        kvs_fwd_rope *t = &f->rope[i];
        if (t->valid && t->m == m && t->base == lh->rope_freq_base && t->scale == lh->rope_freq_scale &&
            t->factors == lh->rope_freq_factors && memcmp(t->pos, pos, (size_t)m * sizeof *pos) == 0) {
            *fill = 0;
            return t;
        }
    }
    kvs_fwd_rope *t = &f->rope[f->rope_next];
    f->rope_next = (f->rope_next + 1) % KVS_FWD_ROPE_TABLES;
    *t = (kvs_fwd_rope){.valid = 0, .m = m, .base = lh->rope_freq_base, .scale = lh->rope_freq_scale,
                        .factors = lh->rope_freq_factors, .pos = t->pos, .cs = t->cs};
    memcpy(t->pos, pos, (size_t)m * sizeof *pos);
    *fill = 1;
    return t;
}

/* ------------------------------------------------------------------------ */

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

int kvs_fwd_new(const kvs_model *model, kvs_pool *pool, int max_rows, int n_ctx, kvs_fwd **out) {
    if (kvs_model_is_vocab_only(model))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the model was loaded without weights (vocabulary only)",
                         kvs_model_path(model));
    if (max_rows <= 0 || n_ctx <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "forward: max_rows %d and n_ctx %d must be positive", max_rows, n_ctx);
    const kvs_hparams *hp = kvs_model_hparams(model);
    kvs_fwd *f = calloc(1, sizeof *f);
    if (!f) return kvs_error(KVS_ERR_NOMEM, "forward: out of memory");
    f->model = model;
    f->hp = hp;
    f->pool = pool;
    f->max_rows = max_rows;
    f->n_ctx = n_ctx;

    size_t R = (size_t)max_rows, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    /* xn doubles as the output of wo / w_down (n_embd wide) and as the input
     * of the output head; both fit in (max_rows, n_embd). */
    f->x = malloc(R * hp->n_embd * sizeof(float));
    f->xn = malloc(R * hp->n_embd * sizeof(float));
    f->q = malloc(R * qd * sizeof(float));
    f->k = malloc(R * kvd * sizeof(float));
    f->v = malloc(R * kvd * sizeof(float));
    f->att = malloc(R * qd * sizeof(float));
    f->gate = malloc(R * hp->n_ff * sizeof(float));
    f->up = malloc(R * hp->n_ff * sizeof(float));
    f->row_overflow = calloc(R, sizeof *f->row_overflow);
    int rope_ok = 1;
    for (int i = 0; i < KVS_FWD_ROPE_TABLES; i++) {
        f->rope[i].pos = malloc(R * sizeof(int32_t));
        f->rope[i].cs = malloc((R * hp->rope_dim + 1) * sizeof(double));
        rope_ok = rope_ok && f->rope[i].pos && f->rope[i].cs;
    }

    size_t mm = kvs_matmul_work_size(kvs_model_output(model), max_rows);
    for (int l = 0; l < hp->n_layer; l++) {
        const kvs_layer_weights *w = kvs_model_layer(model, l);
        const kvs_wmat *mats[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            mm = max_size(mm, kvs_matmul_work_size(mats[i], max_rows));
        const kvs_wmat *qkv[] = {&w->wq, &w->wk, &w->wv}, *gate_up[] = {&w->w_gate, &w->w_up};
        mm = max_size(mm, kvs_matmul_multi_work_size(3, qkv, max_rows));
        mm = max_size(mm, kvs_matmul_multi_work_size(2, gate_up, max_rows));
    }
    size_t aw = kvs_attention_work_size(pool ? kvs_pool_size(pool) : 1, n_ctx);
    /* 64-byte aligned so SIMD kernels can use aligned loads on their scratch. */
    f->mm_work = aligned_alloc(64, (mm + 63) / 64 * 64 + 64);
    f->att_work = aligned_alloc(64, (aw + 63) / 64 * 64 + 64);
    if (!f->x || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up || !f->row_overflow ||
        !f->mm_work || !f->att_work || !rope_ok) {
        kvs_fwd_free(f);
        return kvs_error(KVS_ERR_NOMEM, "forward: cannot allocate scratch for %d rows, %d slots", max_rows, n_ctx);
    }
    *out = f;
    return KVS_OK;
}

void kvs_fwd_free(kvs_fwd *f) {
    if (!f) return;
    free(f->x);
    free(f->xn);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->gate);
    free(f->up);
    free(f->row_overflow);
    free(f->mm_work);
    free(f->att_work);
    for (int i = 0; i < KVS_FWD_ROPE_TABLES; i++) {
        free(f->rope[i].pos);
        free(f->rope[i].cs);
    }
    free(f);
}

void kvs_fwd_embed_rows(const kvs_fwd *f, const int32_t *tokens, int m, float *out) {
    const kvs_wmat *emb = kvs_model_tok_embd(f->model);
    const int d = f->hp->n_embd;
    const float s = f->hp->embd_scale; /* gemma3: sqrt(n_embd) */
    for (int r = 0; r < m; r++) {
        float *x = out + (size_t)r * d;
        kvs_wmat_get_row(emb, tokens[r], x);
        if (s != 1.0f)
            for (int i = 0; i < d; i++) x[i] *= s;
    }
}

void kvs_fwd_embed(kvs_fwd *f, const int32_t *tokens, int m) { kvs_fwd_embed_rows(f, tokens, m, f->x); }

void kvs_fwd_layer_qkv(kvs_fwd *f, int l, const int32_t *pos, int m) {
    const kvs_layer_weights *w = kvs_model_layer(f->model, l);
    run_rows(f, OP_ATTN_NORM, l, m, pos, NULL, NULL);
    /* One quantization of xn and one pool run for the three projections. */
    const kvs_wmat *mats[] = {&w->wq, &w->wk, &w->wv};
    float *const outs[] = {f->q, f->k, f->v};
    kvs_matmul_multi(f->pool, 3, mats, f->xn, m, outs, f->mm_work);
    int fill;
    kvs_fwd_rope *rope = rope_table(f, l, pos, m, &fill);
    run_task(f, (row_task){f, OP_QKV_POST, l, m, pos, NULL, NULL, rope, fill});
    rope->valid = 1;
}

void kvs_fwd_layer_store_kv(kvs_fwd *f, int l, const int32_t *pos, int m, kvs_kv_buffer *kv) {
    int lo = kv->n_ctx;
    for (int r = 0; r < m; r++) lo = pos[r] < lo ? pos[r] : lo;
    kvs_kv_wrote(kv, l, lo); /* here, not per row: the rows' threads would race on it */
    run_rows(f, OP_STORE_KV, l, m, pos, kv, NULL);
    if (l == kv->n_layer - 1) kvs_kv_mark_slots(kv, pos, m);
}

void kvs_fwd_layer_store_kv_row(kvs_fwd *f, int l, const int32_t *pos, int r, kvs_kv_buffer *kv) {
    kvs_kv_wrote(kv, l, pos[r]);
    store_kv_rows(f, kv, l, r, pos[r]);
    if (l == kv->n_layer - 1) kvs_kv_mark_slots(kv, pos + r, 1);
}

void kvs_fwd_layer_attn(kvs_fwd *f, int l, const int32_t *pos, int r0, int m, const kvs_kv_buffer *kv) {
    const kvs_hparams *hp = f->hp;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    /* a decode step: its slots 0..pos are final, the layout built up to them */
    kvs_attn_layout lay;
    const int group = hp->n_head / hp->n_head_kv;
    const kvs_attn_layout *layout =
        m == 1 ? kvs_kv_layout_for(kv, l, pos[r0] + 1, group, hp->layer[l].window, &lay) : NULL;
    kvs_attention_window(f->pool, f->att + (size_t)r0 * qd, f->q + (size_t)r0 * qd, pos + r0, m, kvs_kv_k(kv, l),
                         kvs_kv_v(kv, l), (int)kv->type, hp->n_head, hp->n_head_kv, hp->head_dim, kv->n_ctx,
                         hp->attn_scale, hp->layer[l].window, &kv->recal, layout, f->att_work);
}

void kvs_fwd_layer_attn_rows(kvs_fwd *f, int l, const int32_t *pos, int r0, int m, const kvs_kv_buffer *const *kvs) {
    const kvs_hparams *hp = f->hp;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const int group = hp->n_head / hp->n_head_kv;
    kvs_attn_row rows[KVS_FWD_ATTN_ROWS];
    kvs_attn_layout lay[KVS_FWD_ATTN_ROWS];
    for (int i0 = 0; i0 < m; i0 += KVS_FWD_ATTN_ROWS) {
        const int n = m - i0 < KVS_FWD_ATTN_ROWS ? m - i0 : KVS_FWD_ATTN_ROWS;
        for (int i = 0; i < n; i++) {
            const int r = r0 + i0 + i;
            const kvs_kv_buffer *kv = kvs[i0 + i];
            rows[i] = (kvs_attn_row){.out = f->att + (size_t)r * qd, .q = f->q + (size_t)r * qd, .pos = pos[r],
                                     .k = kvs_kv_k(kv, l), .v = kvs_kv_v(kv, l), .kv_type = (int)kv->type,
                                     .n_ctx = kv->n_ctx, .recal = &kv->recal,
                                     .layout = kvs_kv_layout_for(kv, l, pos[r] + 1, group, hp->layer[l].window,
                                                                 &lay[i])};
        }
        kvs_attention_rows(f->pool, n, rows, hp->n_head, hp->n_head_kv, hp->head_dim, hp->attn_scale,
                           hp->layer[l].window, f->att_work);
    }
}

void kvs_fwd_layer_attn_ffn(kvs_fwd *f, int l, const int32_t *pos, int m, const kvs_kv_buffer *kv) {
    kvs_fwd_layer_attn(f, l, pos, 0, m, kv);
    kvs_fwd_layer_ffn(f, l, pos, m);
}

void kvs_fwd_layer_ffn(kvs_fwd *f, int l, const int32_t *pos, int m) {
    const kvs_layer_weights *w = kvs_model_layer(f->model, l);
    kvs_matmul(f->pool, &w->wo, f->att, m, f->xn, f->mm_work);
    run_rows(f, OP_RESID_FFN_NORM, l, m, pos, NULL, NULL);
    const kvs_wmat *mats[] = {&w->w_gate, &w->w_up};
    float *const outs[] = {f->gate, f->up};
    kvs_matmul_multi(f->pool, 2, mats, f->xn, m, outs, f->mm_work);
    run_rows(f, OP_ACT_MUL, l, m, pos, NULL, NULL);
    kvs_matmul(f->pool, &w->w_down, f->gate, m, f->xn, f->mm_work);
    run_rows(f, OP_RESID, l, m, pos, NULL, NULL);
}

void kvs_fwd_layer(kvs_fwd *f, int l, const int32_t *pos, int m, kvs_kv_buffer *kv) {
    kvs_fwd_layer_qkv(f, l, pos, m);
    kvs_fwd_layer_store_kv(f, l, pos, m, kv);
    kvs_fwd_layer_attn_ffn(f, l, pos, m, kv);
}

int kvs_fwd_logits_rows(kvs_fwd *f, const int *rows, int n, float *logits, int *row_status) {
    int st = KVS_OK, named = -1; /* named: the row the message names, the lowest that fails here */
    run_rows(f, OP_OUT_NORM, 0, n, NULL, NULL, rows);
    /* The final norm's output (its weights may be of extreme size; the
     * hidden state itself was checked at the last layer's residual add):
     * with quantized weights an overflow had given finite logits, all
     * equal, token 0 and an end of sequence, or garbage, with exit 0. Without
     * row_status the first failing row fails the call; with it, each row
     * fails alone. */
    const int d = f->hp->n_embd;
    for (int i = 0; i < n && (row_status || !st); i++) {
        if ((row_status && row_status[i]) || !kvs_row_overflows(f->xn + (size_t)i * d, d)) continue;
        if (!st)
            st = kvs_error(KVS_ERR_FORMAT, "the final hidden state of row %d of %d is not finite or past 2^40: the "
                           "model's activations overflow (weights of extreme size?)", i, n), named = i;
        if (row_status) row_status[i] = KVS_ERR_FORMAT;
    }
    if (st && !row_status) return st;
    kvs_matmul(f->pool, kvs_model_output(f->model), f->xn, n, logits, f->mm_work);
    const int n_vocab = f->hp->n_vocab;
    if (f->hp->logit_softcap > 0.0f)
        for (int i = 0; i < n; i++) kvs_softcap_row(logits + (size_t)i * n_vocab, n_vocab, f->hp->logit_softcap);
    /* An overflow upstream reaches every logit (each reads the whole final
     * hidden state), so three of them tell: the sampler had taken an all-NaN
     * row as token 0 and the run as an end of sequence, without an error. */
    for (int i = 0; i < n && (row_status || !st); i++) {
        const float *l = logits + (size_t)i * n_vocab;
        if ((row_status && row_status[i]) || (isfinite(l[0]) && isfinite(l[n_vocab / 2]) && isfinite(l[n_vocab - 1])))
            continue;
        if (named < 0 || i < named)
            st = kvs_error(KVS_ERR_FORMAT, "the logits of row %d of %d are not finite (%g, ...): the model's "
                           "activations overflow (weights of extreme size?)", i, n, (double)l[0]), named = i;
        if (row_status) row_status[i] = KVS_ERR_FORMAT;
    }
    return st;
}

int kvs_fwd_logits(kvs_fwd *f, const int *rows, int n, float *logits) {
    int st = kvs_fwd_overflow_status(f);
    if (st) return st;
    return kvs_fwd_logits_rows(f, rows, n, logits, NULL);
}
