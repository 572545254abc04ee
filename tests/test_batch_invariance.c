/*
 * Batch invariance on the real model: the logits and the KV bytes computed
 * for a token must not depend on how the sequence is cut into kvs_decode
 * calls, on n_batch, or on the thread count. Every comparison is memcmp:
 * no tolerance. On a mismatch the first differing KV element is reported
 * (layer, K/V, head, slot), which points at the kernel that broke the rule.
 */
#include "engine/context.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "kv/chunk.h"
#include "kvstitch.h"
#include "test_greedy.h"

#define N_CTX 512
#define N_VOCAB 49152

static kvs_model *g_model;
static int32_t g_toks[N_CTX];
static int32_t g_pos[N_CTX];

typedef struct run {
    float *logits; /* (n, N_VOCAB): logits of every token */
    unsigned char *kv;
    size_t kv_bytes;
} run;

static void run_free(run *r) {
    free(r->logits);
    free(r->kv);
    memset(r, 0, sizeof *r);
}

/* Runs tokens [0, n) in calls of the given sizes (cycled), n_batch rows per
 * forward chunk, on n_threads, and records every token's logits and the KV. */
static int do_run(int n, const int *sizes, int n_sizes, int n_batch, int n_threads, kvs_kv_type kv_type, run *out) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = n_batch;
    cp.n_threads = n_threads;
    cp.kv_type = kv_type;
    kvs_context *ctx = NULL;
    int st = kvs_context_new(g_model, cp, &ctx);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return st;
    memset(out, 0, sizeof *out);
    out->logits = malloc((size_t)n * N_VOCAB * sizeof(float));
    const kvs_kv_buffer *kv = kvs_context_kv(ctx);
    out->kv_bytes = kvs_kv_buffer_bytes(kv);
    out->kv = malloc(out->kv_bytes);
    for (int i = 0, s = 0; i < n && st == KVS_OK; s++) {
        int m = sizes[s % n_sizes];
        if (m > n - i) m = n - i;
        st = kvs_decode_logits(ctx, g_toks + i, g_pos + i, m, out->logits + (size_t)i * N_VOCAB, m);
        i += m;
    }
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    memcpy(out->kv, kv->data, out->kv_bytes);
    kvs_context_free(ctx);
    return st;
}

/* memcmp of logits and KV; on a mismatch says where. */
static int same(const char *what, const run *a, const run *b, int n, kvs_kv_type kv_type) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (memcmp(a->logits + (size_t)i * N_VOCAB, b->logits + (size_t)i * N_VOCAB, N_VOCAB * sizeof(float))) {
            fprintf(stderr, "  %s: logits of token %d differ\n", what, i);
            ok = 0;
            break;
        }
    }
    if (a->kv_bytes != b->kv_bytes || memcmp(a->kv, b->kv, a->kv_bytes)) {
        ok = 0;
        const kvs_hparams *hp = kvs_model_hparams(g_model);
        const size_t row = kvs_kv_row_bytes(kv_type, hp->head_dim), head = (size_t)N_CTX * row;
        size_t plane = head * hp->n_head_kv;
        for (size_t off = 0; off < a->kv_bytes; off++) {
            if (a->kv[off] == b->kv[off]) continue;
            size_t lp = off / plane, h = off % plane / head, slot = off % head / row;
            fprintf(stderr, "  %s: KV differs first at layer %zu %s head %zu slot %zu, byte %zu of its row\n", what,
                    lp / 2, lp % 2 ? "V" : "K", h, slot, off % row);
            break;
        }
    }
    return ok;
}

/* Fills g_toks with real text tokens. */
static int make_tokens(void) {
    static const char *sent[] = {
        "The river runs through the old town, past the mill and the church. ",
        "In 1887 the bridge was rebuilt in stone; it still carries 4,200 cars a day. ",
        "Ask anyone at the market: the best bread comes from the bakery by the square! ",
        "def f(x):\n    return x * 2 + 1  # a line of code\n",
        "Les enfants jouent dans le parc, et le soleil brille sur l'eau. ",
    };
    char text[16384];
    size_t len = 0;
    for (int i = 0; len < sizeof text - 200; i++) {
        const char *s = sent[i % 5];
        memcpy(text + len, s, strlen(s));
        len += strlen(s);
    }
    int n = 0;
    static int32_t all[sizeof text];
    int st = kvs_tokenize(g_model, text, len, 0, all, (int)(sizeof text), &n);
    if (st == KVS_OK && n < N_CTX) st = KVS_ERR_INTERNAL;
    memcpy(g_toks, all, sizeof g_toks);
    for (int i = 0; i < N_CTX; i++) g_pos[i] = i;
    return st;
}

static uint64_t rng_state = 0x1234567;
static int rnd(int lo, int hi) { /* inclusive */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int)((rng_state >> 33) % (uint64_t)(hi - lo + 1));
}

static const int one_call[1] = {N_CTX};
static const int token_by_token[1] = {1};

TEST(test_one_call_vs_token_by_token) {
    const int n = 203;
    run a, b;
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_F16, &a)) return;
    if (do_run(n, token_by_token, 1, 512, 2, KVS_KV_F16, &b) == KVS_OK) {
        CHECK(same("one call vs token by token", &a, &b, n, KVS_KV_F16));
        run_free(&b);
    }
    run_free(&a);
}

TEST(test_random_splits) {
    const int ns[3] = {203, 131, 300};
    for (int t = 0; t < 3; t++) {
        int n = ns[t], sizes[64];
        for (int i = 0; i < 64; i++) sizes[i] = rnd(1, 70);
        run a, b;
        if (do_run(n, one_call, 1, 512, 2, KVS_KV_F16, &a)) return;
        if (do_run(n, sizes, 64, 512, 2, KVS_KV_F16, &b) == KVS_OK) {
            char what[64];
            snprintf(what, sizeof what, "random splits, n = %d", n);
            CHECK(same(what, &a, &b, n, KVS_KV_F16));
            run_free(&b);
        }
        run_free(&a);
    }
}

TEST(test_n_batch_chunks) {
    /* One kvs_decode call cut by the context into forward chunks of 7 and 64 rows. */
    const int n = 257;
    run a, b, c;
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_F16, &a)) return;
    if (do_run(n, one_call, 1, 7, 2, KVS_KV_F16, &b) == KVS_OK) {
        CHECK(same("n_batch 512 vs 7", &a, &b, n, KVS_KV_F16));
        run_free(&b);
    }
    if (do_run(n, one_call, 1, 64, 2, KVS_KV_F16, &c) == KVS_OK) {
        CHECK(same("n_batch 512 vs 64", &a, &c, n, KVS_KV_F16));
        run_free(&c);
    }
    run_free(&a);
}

TEST(test_thread_counts) {
    const int n = 173;
    int sizes[3] = {50, 1, 77};
    run a, b, c;
    if (do_run(n, one_call, 1, 512, 1, KVS_KV_F16, &a)) return;
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_F16, &b) == KVS_OK) {
        CHECK(same("threads 1 vs 2", &a, &b, n, KVS_KV_F16));
        run_free(&b);
    }
    if (do_run(n, sizes, 3, 512, 3, KVS_KV_F16, &c) == KVS_OK) {
        CHECK(same("threads 1 vs 3 with splits", &a, &c, n, KVS_KV_F16));
        run_free(&c);
    }
    run_free(&a);
}

TEST(test_f32_kv) {
    const int n = 151;
    int sizes[4] = {1, 33, 2, 64};
    run a, b;
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_F32, &a)) return;
    if (do_run(n, sizes, 4, 512, 1, KVS_KV_F32, &b) == KVS_OK) {
        CHECK(same("F32 KV: one call vs splits, 2 vs 1 threads", &a, &b, n, KVS_KV_F32));
        run_free(&b);
    }
    run_free(&a);
}

/* Q8 KV (integer attention): the same bits for one call, token by token and
 * uneven splits, on 1 and 2 threads, and close to the F16 run. */
TEST(test_q8_kv) {
    const int n = 151;
    int sizes[4] = {1, 33, 2, 64};
    run a, b, c, f;
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_Q8, &a)) return;
    if (do_run(n, sizes, 4, 512, 1, KVS_KV_Q8, &b) == KVS_OK) {
        CHECK(same("Q8 KV: one call vs splits, 2 vs 1 threads", &a, &b, n, KVS_KV_Q8));
        run_free(&b);
    }
    if (do_run(n, token_by_token, 1, 512, 2, KVS_KV_Q8, &c) == KVS_OK) {
        CHECK(same("Q8 KV: one call vs token by token", &a, &c, n, KVS_KV_Q8));
        run_free(&c);
    }
    if (do_run(n, one_call, 1, 512, 2, KVS_KV_F16, &f) == KVS_OK) {
        /* not the same bits (8-bit keys and values): the same next token
         * almost everywhere (an 8-bit KV cache's known cost, cf. llama.cpp's
         * q8_0 cache), on real text */
        int agree = 0;
        for (int i = 0; i < n; i++) {
            const float *x = a.logits + (size_t)i * N_VOCAB, *y = f.logits + (size_t)i * N_VOCAB;
            int ax = 0, ay = 0;
            for (int v = 1; v < N_VOCAB; v++) {
                if (x[v] > x[ax]) ax = v;
                if (y[v] > y[ay]) ay = v;
            }
            agree += ax == ay;
        }
        printf("  Q8 vs F16 KV: top-1 agrees at %d of %d tokens\n", agree, n);
        CHECK_MSG(agree >= n * 95 / 100, "Q8 vs F16 KV: top-1 agrees at only %d of %d tokens", agree, n);
        run_free(&f);
    }
    run_free(&a);
}

/* One context's life with Q8 KV, rewriting slots its decode layout holds
 * (model/kv_buffer.h): 200 tokens, 40 decode steps; 63 other tokens over
 * slots 37..99 in one call; one token over slot 60; a chunk (another
 * context's slots 0..47) copied over slots 0..47; a batched step with the
 * other context writing slot 70; then 40 decode steps after each. Logits of
 * every decode step into out (Q8_REWRITE_STEPS rows). */
#define Q8_REWRITE_STEPS 200
static int q8_rewrites(float *out) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_threads = 2;
    cp.kv_type = KVS_KV_Q8;
    kvs_context *ctx = NULL, *other = NULL;
    kvs_chunk *chunk = NULL;
    int st = kvs_context_new(g_model, cp, &ctx);
    if (!st) st = kvs_context_new(g_model, cp, &other);
    const kvs_kv_shape shape = kvs_kv_buffer_shape(kvs_context_kv(ctx));
    if (!st) st = kvs_chunk_new(&shape, 48, 1, &chunk);
    int32_t alt[N_CTX];
    for (int i = 0; i < N_CTX; i++) alt[i] = g_toks[(i * 7 + 3) % N_CTX];
    int steps = 0;
#define STEPS(from, n) kt_decode_steps(ctx, g_toks, from, n, out, N_VOCAB, &steps, &st);
    if (!st) st = kvs_decode(ctx, g_toks, g_pos, 200, NULL);
    STEPS(200, 40)
    if (!st) st = kvs_decode(ctx, alt + 37, g_pos + 37, 63, NULL);
    STEPS(100, 40)
    if (!st) st = kvs_decode(ctx, alt + 5, g_pos + 60, 1, NULL);
    STEPS(140, 40)
    if (!st) st = kvs_decode(other, alt, g_pos, 48, NULL);
    if (!st) st = kvs_chunk_copy_from_kv(chunk, 0, 48, kvs_context_kv(other), 0);
    if (!st) st = kvs_chunk_copy_to_kv(chunk, 0, 48, kvs_context_kv(ctx), 0);
    STEPS(180, 40)
    kvs_context *pair[2] = {ctx, other};
    const int32_t pair_tok[2] = {alt[9], alt[11]}, pair_pos[2] = {70, 48};
    float *pair_logits = malloc((size_t)2 * N_VOCAB * sizeof(float));
    if (!st) st = pair_logits ? kvs_decode_batch(pair, pair_tok, pair_pos, 2, pair_logits) : KVS_ERR_NOMEM;
    free(pair_logits);
    STEPS(220, 40)
#undef STEPS
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    kvs_chunk_unref(chunk);
    kvs_context_free(other);
    kvs_context_free(ctx);
    return st;
}

/* The decode steps of q8_rewrites read the layout where the kernels do
 * (AVX-512): their logits are those of AVX2, which reads the rows (the
 * same bits on every path). */
TEST(test_q8_layout_after_rewrites) {
    if (kvs_kernels_set_isa("avx2") != 0) {
        SKIP("no AVX2 path on this CPU");
        return;
    }
    const size_t n = (size_t)Q8_REWRITE_STEPS * N_VOCAB;
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    const int st = q8_rewrites(want);
    kvs_kernels_set_isa("best");
    if (!st) {
        const kvs_hparams *hp = kvs_model_hparams(g_model);
        if (!kvs_attn_layout_wanted(KVS_KV_Q8, hp->head_dim, hp->n_head / hp->n_head_kv))
            printf("  (the best path reads no decode layout: both runs read the rows)\n");
        if (q8_rewrites(got) == KVS_OK)
            for (int i = 0; i < Q8_REWRITE_STEPS; i++)
                if (memcmp(want + (size_t)i * N_VOCAB, got + (size_t)i * N_VOCAB, N_VOCAB * sizeof(float))) {
                    CHECK_MSG(0, "decode step %d after the rewrites: logits differ from AVX2's", i);
                    break;
                }
    }
    free(want);
    free(got);
}

int main(void) {
    const char *path = kt_model_path();
    if (!path) return 1;
    if (kvs_model_load(path, kvs_model_default_params(), &g_model)) {
        fprintf(stderr, "cannot load %s: %s\n", path, kvs_last_error());
        return 1;
    }
    if (make_tokens()) {
        fprintf(stderr, "tokenize: %s\n", kvs_last_error());
        return 1;
    }
    RUN(test_one_call_vs_token_by_token);
    RUN(test_random_splits);
    RUN(test_n_batch_chunks);
    RUN(test_thread_counts);
    RUN(test_f32_kv);
    RUN(test_q8_kv);
    RUN(test_q8_layout_after_rewrites);
    kvs_model_free(g_model);
    return kt_summary();
}
