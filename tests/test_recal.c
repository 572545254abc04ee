/*
 * APE's attention recalibration on the real model (kvs_reuse_params.recal,
 * kvs_attn_recal): three MuSiQue passages as documents of a chat prompt.
 *
 * Exact invariants (memcmp of the first logits and the greedy tokens):
 *   T = S = 1 gives the bits of no recalibration (none and query)
 *   `full` (nothing moved) is not changed by it
 *   the same request on 1 and 2 threads gives the same bits
 *   it lasts for the request only: a cold prefill and a request without it
 *   on the same context afterwards give the bits they gave before
 *   the server's way (the prompt, then batched decode steps) gives the
 *   tokens of one kvs_generate_segments call: decode keeps recalibrating
 * It changes something (T = S = 0.9 differs from off), and out-of-range
 * parameters are refused.
 */
#include <math.h>
#include <stdint.h>

#include "engine/context.h"
#include "harness.h"
#include "test_docs_util.h"
#include "test_greedy.h"
#include "kvstitch.h"

#define N_DOCS 3
#define N_GEN 4

static kvs_model *g_model;
static kvs_context *g_ctx, *g_ctx1; /* default threads, and 1 thread */
static char *g_docs[N_DOCS];
static kvs_cache *g_cache;

static kvs_reuse_params reuse(kvs_repair_mode mode, float t, float s) {
    kvs_reuse_params r = kvs_reuse_default_params();
    r.repair.mode = mode;
    r.repair.recompute_ratio = 0.1f;
    r.recal.temperature = t;
    r.recal.scale = s;
    /* full's prompt stored by prefix would serve later requests exactly:
     * nothing moved, nothing to recalibrate */
    r.store = mode != KVS_REPAIR_FULL;
    return r;
}

static int gen(kvs_context *ctx, kvs_reuse_params r, int n_predict, kvs_generate_result *out) {
    kvs_segments seg = kt_docs_segments(g_docs, N_DOCS);
    kvs_generate_params gp = kt_greedy(n_predict);
    int st = kvs_generate_segments(ctx, g_cache, &seg, &gp, &r, out);
    CHECK_MSG(st == KVS_OK, "generate: %s", kvs_last_error());
    return st;
}

/* Compares two requests' results; frees both. */
static int same(kvs_reuse_params a, kvs_reuse_params b) {
    kvs_generate_result ra, rb;
    if (gen(g_ctx, a, N_GEN, &ra)) return -1;
    if (gen(g_ctx, b, N_GEN, &rb)) {
        kvs_generate_result_free(&ra);
        return -1;
    }
    int eq = kt_same_result(&ra, &rb);
    kvs_generate_result_free(&ra);
    kvs_generate_result_free(&rb);
    return eq;
}

TEST(identity_and_effect) {
    const kvs_repair_mode modes[] = {KVS_REPAIR_NONE, KVS_REPAIR_QUERY};
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(same(reuse(modes[i], 0, 0), reuse(modes[i], 1, 1)) == 1, "%s: T = S = 1 differs from off",
                  kvs_repair_mode_name(modes[i]));
        CHECK_MSG(same(reuse(modes[i], 0, 0), reuse(modes[i], 0.9f, 0.9f)) == 0, "%s: T = S = 0.9 changes nothing",
                  kvs_repair_mode_name(modes[i]));
    }
    CHECK_MSG(same(reuse(KVS_REPAIR_FULL, 0, 0), reuse(KVS_REPAIR_FULL, 0.9f, 0.9f)) == 1,
              "full moves nothing, yet the recalibration changed it");
}

TEST(thread_count_invariant) {
    kvs_generate_result a, b;
    if (gen(g_ctx, reuse(KVS_REPAIR_QUERY, 0.9f, 0.9f), N_GEN, &a)) return;
    if (!gen(g_ctx1, reuse(KVS_REPAIR_QUERY, 0.9f, 0.9f), N_GEN, &b)) {
        CHECK_MSG(kt_same_result(&a, &b), "1 thread and %d threads differ", kvs_context_n_threads(g_ctx));
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
}

/* A cold prefill and a request without recalibration on a fresh context,
 * and on the test's context after one with it. */
TEST(ends_with_the_request) {
    kvs_segments seg = kt_docs_segments(g_docs, N_DOCS);
    int32_t *toks = NULL;
    int n = 0;
    kvs_context *fresh = NULL;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = kvs_context_n_ctx(g_ctx);
    if (kvs_segments_tokenize(g_model, &seg, &toks, &n) != KVS_OK || kvs_context_new(g_model, cp, &fresh) != KVS_OK) {
        CHECK_MSG(0, "set-up: %s", kvs_last_error());
        kvs_free(toks);
        return;
    }
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result cold0, cold1, off0, off1, on;
    CHECK(kvs_generate(fresh, toks, n, &gp, &cold0) == KVS_OK);
    CHECK(!gen(fresh, reuse(KVS_REPAIR_NONE, 0, 0), N_GEN, &off0));
    CHECK(!gen(g_ctx, reuse(KVS_REPAIR_NONE, 0.9f, 0.9f), N_GEN, &on));
    kvs_generate_result_free(&on);
    CHECK(kvs_generate(g_ctx, toks, n, &gp, &cold1) == KVS_OK);
    CHECK(!gen(g_ctx, reuse(KVS_REPAIR_NONE, 0.9f, 0.9f), N_GEN, &on));
    kvs_generate_result_free(&on);
    CHECK(!gen(g_ctx, reuse(KVS_REPAIR_NONE, 0, 0), N_GEN, &off1));
    CHECK_MSG(kt_same_result(&cold0, &cold1), "a cold prefill after a recalibrated request differs");
    CHECK_MSG(kt_same_result(&off0, &off1), "a request without recalibration after one with it differs");
    kvs_generate_result_free(&cold0);
    kvs_generate_result_free(&cold1);
    kvs_generate_result_free(&off0);
    kvs_generate_result_free(&off1);
    kvs_context_free(fresh);
    kvs_free(toks);
}

/* As the server runs it: the prompt with one token, then batched decode
 * steps (here a batch of one context beside a second one). */
TEST(batched_decode_keeps_it) {
    kvs_generate_result whole, first;
    if (gen(g_ctx, reuse(KVS_REPAIR_QUERY, 0.9f, 0.9f), N_GEN, &whole)) return;
    if (gen(g_ctx, reuse(KVS_REPAIR_QUERY, 0.9f, 0.9f), 1, &first)) {
        kvs_generate_result_free(&whole);
        return;
    }
    CHECK(first.n_tokens == 1 && whole.n_tokens == N_GEN && first.tokens[0] == whole.tokens[0]);
    const int n_vocab = kvs_context_n_vocab(g_ctx);
    float *logits = malloc(2 * (size_t)n_vocab * sizeof *logits);
    kvs_context *ctxs[2] = {g_ctx, g_ctx1};
    int32_t tok[2] = {first.tokens[0], 0}, pos[2] = {first.n_prompt, 0};
    for (int i = 1; logits && i < N_GEN; i++) {
        if (kvs_decode_batch(ctxs, tok, pos, 2, logits) != KVS_OK) {
            CHECK_MSG(0, "decode batch: %s", kvs_last_error());
            break;
        }
        tok[0] = kt_argmax(logits, n_vocab);
        pos[0]++;
        pos[1]++;
        CHECK_MSG(tok[0] == whole.tokens[i], "token %d: batched decode %d, kvs_generate_segments %d", i, tok[0],
                  whole.tokens[i]);
    }
    free(logits);
    kvs_generate_result_free(&whole);
    kvs_generate_result_free(&first);
}

TEST(params_checked) {
    const float bad[][2] = {{0.9f, 0}, {0, 0.9f}, {5, 1}, {1, 0.05f}, {NAN, 1}, {-1, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvs_generate_result r;
        kvs_segments seg = kt_docs_segments(g_docs, N_DOCS);
        kvs_generate_params gp = kt_greedy(1);
        kvs_reuse_params rp = reuse(KVS_REPAIR_NONE, bad[i][0], bad[i][1]);
        int st = kvs_generate_segments(g_ctx, g_cache, &seg, &gp, &rp, &r);
        CHECK_MSG(st == KVS_ERR_INVALID_ARG, "T %g S %g accepted (%d)", (double)bad[i][0], (double)bad[i][1], st);
        CHECK_MSG(strstr(kvs_last_error(), "recalibration") != NULL, "error names it: %s", kvs_last_error());
        if (st == KVS_OK) kvs_generate_result_free(&r);
    }
}

int main(void) {
    if (kt_docs_setup(900, N_DOCS, g_docs, &g_model, &g_ctx)) return kt_setup_failed(kvs_last_error());
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 2048;
    cp.n_batch = 128;
    cp.n_threads = 1;
    if (kvs_context_new(g_model, cp, &g_ctx1) != KVS_OK) return kt_setup_failed(kvs_last_error());
    if (!(g_cache = kt_open_cache(g_model, NULL))) return kt_summary();
    RUN(identity_and_effect);
    RUN(thread_count_invariant);
    RUN(ends_with_the_request);
    RUN(batched_decode_keeps_it);
    RUN(params_checked);
    kvs_cache_free(g_cache);
    kvs_context_free(g_ctx1);
    kvs_seg_layout lay = {0};
    kt_docs_teardown(&lay, g_docs, N_DOCS, g_ctx, g_model);
    return kt_summary();
}
