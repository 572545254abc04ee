/* Engine on the real model: context params, kvs_decode checks, greedy
 * continuation, kvs_decode_logits, generation (streaming, stop strings,
 * callbacks, seeds, first logits / top logprobs, context limits). */
#include <math.h>
#include <string.h>

#include "engine/context.h"
#include "harness.h"
#include "test_stopper.h"
#include "test_greedy.h"
#include "kvstitch.h"

static kvs_model *g_model;

static kvs_context *new_ctx(int n_ctx, int n_threads) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    kvs_context *ctx = NULL;
    int st = kvs_context_new(g_model, cp, &ctx);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    return ctx;
}

static int tokenize(const char *text, int flags, int32_t *out, int cap) {
    int n = 0;
    int st = kvs_tokenize(g_model, text, strlen(text), flags, out, cap, &n);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    return st ? 0 : n;
}

static int chat_prompt(const char *user, int32_t *out, int cap) {
    kvs_chat_message msg = {"user", user};
    char *text = NULL;
    int st = kvs_chat_render(g_model, NULL, &msg, 1, 1, &text);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return 0;
    int n = tokenize(text, KVS_TOKENIZE_PARSE_SPECIAL, out, cap);
    free(text);
    return n;
}

TEST(test_context_params) {
    kvs_context *ctx = new_ctx(0, 1);
    if (!ctx) return;
    CHECK_EQ_INT(kvs_context_n_ctx(ctx), 8192); /* model's 8192, capped at 8192 */
    CHECK_EQ_INT(kvs_context_n_batch(ctx), 512);
    kvs_context_free(ctx);
    ctx = new_ctx(100, 2);
    if (!ctx) return;
    CHECK_EQ_INT(kvs_context_n_ctx(ctx), 100);
    CHECK_EQ_INT(kvs_context_n_batch(ctx), 100); /* never more rows than slots */
    CHECK_EQ_INT(kvs_context_n_threads(ctx), 2);
    kvs_context_free(ctx);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = -1;
    CHECK_EQ_INT(kvs_context_new(g_model, cp, &ctx), KVS_ERR_INVALID_ARG);
    kvs_context_free(NULL);
}

/* NULL handles and out-pointers where the header does not make them a
 * caller error: an error or an empty answer, never a write through NULL (an
 * attack on the API found these). A clock probe asked for forever returns. */
TEST(test_null_arguments) {
    CHECK(kvs_kv_type_parse("q8", NULL) == KVS_ERR_INVALID_ARG);
    CHECK(kvs_repair_mode_parse("full", NULL) == KVS_ERR_INVALID_ARG);
    CHECK(kvs_deviation_parse("k-cos", NULL) == KVS_ERR_INVALID_ARG);
    CHECK(kvs_reuse_mode_parse("none", NULL) == KVS_ERR_INVALID_ARG);
    kvs_model_info info;
    memset(&info, 0xff, sizeof info);
    kvs_model_get_info(NULL, &info);
    CHECK(info.n_vocab == 0 && info.path == NULL);
    kvs_model_get_info(g_model, NULL);
    int counts[KVS_MAX_TENSOR_TYPES] = {7};
    kvs_model_tensor_type_counts(NULL, counts);
    CHECK(counts[0] == 0);
    CHECK(!strcmp(kvs_model_rope_scaling(NULL), "none"));
    CHECK_EQ_INT(kvs_context_n_ctx(NULL), 0);
    char hex[65] = "x";
    kvs_cache_fingerprint_hex(NULL, hex);
    CHECK(hex[0] == 0);
    kvs_cache_get_stats(NULL, NULL);
    const double g = kvs_core_clock_ghz(INFINITY); /* had never returned; now ~2 s */
    CHECK(g >= 0 && g < 100);
}

TEST(test_decode_checks) {
    kvs_context *ctx = new_ctx(64, 1);
    if (!ctx) return;
    float *logits = malloc(49152 * sizeof(float));
    int32_t tok[2] = {1, 2}, pos[2] = {0, 64};
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 2, logits), KVS_ERR_CONTEXT_FULL);
    CHECK_MSG(strstr(kvs_last_error(), "64") != NULL, "%s", kvs_last_error());
    pos[1] = 1;
    tok[1] = 49152;
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 2, logits), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "49152") != NULL, "%s", kvs_last_error());
    tok[1] = -3;
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 2, logits), KVS_ERR_INVALID_ARG);
    pos[1] = -1;
    tok[1] = 2;
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 2, logits), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 0, logits), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_decode_logits(ctx, tok, pos, 1, logits, 2), KVS_ERR_INVALID_ARG);
    free(logits);
    kvs_context_free(ctx);
}

/* A token may attend only to slots that were written: by this call or an
 * earlier one (a fresh context's slots hold zeros: decoding at position 5
 * first had given garbage logits with KVS_OK). */
TEST(test_decode_refuses_unwritten_slots) {
    kvs_context *ctx = new_ctx(256, 1), *other = new_ctx(256, 1);
    float *logits = malloc(2 * 49152 * sizeof(float));
    if (!ctx || !other || !logits) goto done;
    int32_t tok[4] = {1, 2, 3, 4}, pos[4] = {5, 6, 7, 8};
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 1, logits), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "slot 0, which was never written") != NULL, "%s", kvs_last_error());
    /* the call's own slots count, in any order */
    int32_t back[4] = {3, 2, 1, 0};
    CHECK_EQ_INT(kvs_decode(ctx, tok, back, 4, logits), KVS_OK);
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 1, logits), KVS_ERR_INVALID_ARG); /* slot 4 */
    CHECK_MSG(strstr(kvs_last_error(), "slot 4") != NULL, "%s", kvs_last_error());
    int32_t skip[2] = {4, 6};
    CHECK_EQ_INT(kvs_decode(ctx, tok, skip, 2, logits), KVS_ERR_INVALID_ARG); /* slot 5 */
    CHECK_MSG(strstr(kvs_last_error(), "token 1 of 2: position 6 attends to slot 5") != NULL, "%s",
              kvs_last_error());
    int32_t four = 4;
    CHECK_EQ_INT(kvs_decode(ctx, tok, &four, 1, logits), KVS_OK);
    CHECK_EQ_INT(kvs_decode(ctx, tok, pos, 4, logits), KVS_OK);
    /* past the 64-slot words of the flags */
    int32_t far = 200;
    CHECK_EQ_INT(kvs_decode(ctx, tok, &far, 1, logits), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "slot 9,") != NULL, "%s", kvs_last_error());
    /* a batch step names the row */
    kvs_context *both[2] = {ctx, other};
    int32_t bt[2] = {5, 6}, bp[2] = {9, 1};
    CHECK_EQ_INT(kvs_decode_batch(both, bt, bp, 2, logits), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "row 1 of 2") != NULL, "%s", kvs_last_error());
    bp[1] = 0;
    CHECK_EQ_INT(kvs_decode_batch(both, bt, bp, 2, logits), KVS_OK);
    /* a call runs n_batch tokens at a time: a slot a later batch writes
     * does not count for the batches before it (they had read its zeros) */
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    cp.n_batch = 4;
    kvs_context *small = NULL;
    CHECK_EQ_INT(kvs_context_new(g_model, cp, &small), KVS_OK);
    int32_t late_tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, late_pos[8] = {4, 5, 6, 7, 0, 1, 2, 3};
    if (small) {
        CHECK_EQ_INT(kvs_decode(small, late_tok, late_pos, 8, logits), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), "token 0 of 8: position 4 attends to slot 0") != NULL, "%s",
                  kvs_last_error());
        kvs_context_free(small);
    }
    cp.n_batch = 8; /* one batch: its own slots count */
    CHECK_EQ_INT(kvs_context_new(g_model, cp, &small), KVS_OK);
    if (small) {
        CHECK_EQ_INT(kvs_decode(small, late_tok, late_pos, 8, logits), KVS_OK);
        kvs_context_free(small);
    }
done:
    free(logits);
    kvs_context_free(ctx);
    kvs_context_free(other);
}

TEST(test_greedy_continuation) {
    int32_t toks[32], pos[32];
    int n = tokenize("The capital of France is", 0, toks, 32);
    CHECK(n > 3);
    if (n <= 3) return;
    for (int i = 0; i < n; i++) pos[i] = i;
    kvs_context *ctx = new_ctx(64, 2);
    if (!ctx) return;
    float *logits = malloc(49152 * sizeof(float));
    CHECK_EQ_INT(kvs_decode(ctx, toks, pos, n, logits), KVS_OK);
    char piece[64];
    size_t len = 0;
    int32_t best = kt_argmax(logits, 49152);
    CHECK_EQ_INT(kvs_token_to_bytes(g_model, best, 0, piece, sizeof piece - 1, &len), KVS_OK);
    piece[len < sizeof piece ? len : sizeof piece - 1] = 0;
    CHECK_MSG(!strcmp(piece, " Paris"), "next token %d = '%s'", best, piece);
    free(logits);
    kvs_context_free(ctx);
}

/* kvs_decode_logits gives, for each of the last k tokens, the same bits as
 * running the prefix up to that token with kvs_decode. */
TEST(test_decode_logits_rows) {
    int32_t toks[64], pos[64];
    int n = tokenize("One, two, three, four, five, six, seven, eight, nine, ten.", 0, toks, 64);
    CHECK(n > 10);
    if (n <= 10) return;
    for (int i = 0; i < n; i++) pos[i] = i;
    kvs_context *a = new_ctx(128, 2), *b = new_ctx(128, 2);
    if (!a || !b) { kvs_context_free(a); kvs_context_free(b); return; }
    const int k = 5, V = 49152;
    float *all = malloc((size_t)k * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    CHECK_EQ_INT(kvs_decode_logits(a, toks, pos, n, all, k), KVS_OK);
    CHECK_EQ_INT(kvs_decode(b, toks, pos, n - k + 1, one), KVS_OK);
    CHECK(memcmp(one, all, (size_t)V * sizeof(float)) == 0);
    for (int j = 1; j < k; j++) {
        int i = n - k + j;
        CHECK_EQ_INT(kvs_decode(b, &toks[i], &pos[i], 1, one), KVS_OK);
        CHECK_MSG(memcmp(one, all + (size_t)j * V, (size_t)V * sizeof(float)) == 0, "row %d", j);
    }
    free(all);
    free(one);
    kvs_context_free(a);
    kvs_context_free(b);
}

typedef struct collect {
    char buf[8192];
    size_t len;
    int calls, stop_after;
} collect;

static int on_token(void *user, int32_t token, const char *piece, size_t len) {
    collect *c = user;
    CHECK(strlen(piece) == len); /* NUL-terminated piece */
    if (c->len + len < sizeof c->buf) {
        memcpy(c->buf + c->len, piece, len);
        c->len += len;
        c->buf[c->len] = 0;
    }
    c->calls++;
    return c->stop_after && c->calls >= c->stop_after;
}

static kvs_context *new_ctx_stopping(kt_stopper *s) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    cp.n_batch = 16;
    kvs_context *ctx = NULL;
    CHECK_MSG(kvs_context_new(g_model, cp, &ctx) == KVS_OK, "%s", kvs_last_error());
    kvs_context_set_should_stop(ctx, kt_stop_at_poll, s);
    return ctx;
}

/* A prefill of 40 tokens in batches of 16 stopped at its third poll: the
 * call says so and where; the two batches run before it stay written, so
 * going on from token 32 gives the bits of an uninterrupted prefill. A
 * generation stops before the token whose poll says so. */
TEST(test_should_stop_interrupts_prefill_and_generate) {
    int32_t toks[128], pos[128];
    int n = tokenize("One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, "
                     "fourteen, fifteen, sixteen, seventeen, eighteen, nineteen, twenty.", 0, toks, 128);
    CHECK(n >= 40);
    if (n < 40) return;
    n = 40;
    for (int i = 0; i < n; i++) pos[i] = i;
    kt_stopper s = {0, 3}, never = {0, 0};
    kvs_context *ctx = new_ctx_stopping(&s), *ref = new_ctx_stopping(&never);
    float *a = malloc(49152 * sizeof(float)), *b = malloc(49152 * sizeof(float));
    if (!ctx || !ref || !a || !b) goto out;
    CHECK_EQ_INT(kvs_decode(ctx, toks, pos, n, a), KVS_ERR_INTERRUPTED);
    CHECK_EQ_INT(s.polls, 3); /* nothing polled after the stop */
    CHECK_MSG(strstr(kvs_last_error(), "after 32 of 40 tokens") != NULL, "%s", kvs_last_error());
    CHECK(!strcmp(kvs_strerror(KVS_ERR_INTERRUPTED), "interrupted"));
    s.stop_at = 0;
    CHECK_EQ_INT(kvs_decode(ctx, toks + 32, pos + 32, n - 32, a), KVS_OK);
    /* the library's flag poll: stops once the int is set */
    int flag = 0;
    kvs_stop_flag_set(&flag, 1); /* (the store callers without C11 atomics use) */
    CHECK_EQ_INT(flag, 1);
    kvs_context_set_should_stop(ref, kvs_stop_when_set, &flag);
    CHECK_EQ_INT(kvs_decode(ref, toks, pos, n, b), KVS_ERR_INTERRUPTED);
    CHECK_MSG(strstr(kvs_last_error(), "after 0 of 40 tokens") != NULL, "%s", kvs_last_error());
    kvs_stop_flag_set(&flag, 0);
    CHECK_EQ_INT(kvs_decode(ref, toks, pos, n, b), KVS_OK);
    CHECK(!memcmp(a, b, 49152 * sizeof(float)));

    /* generate: the prompt's 3 batches, then a poll before each decode step */
    kvs_generate_params gp = kt_greedy(8);
    kvs_generate_result r;
    memset(&r, 0, sizeof r);
    s.polls = 0;
    s.stop_at = 5;
    CHECK_EQ_INT(kvs_generate(ctx, toks, n, &gp, &r), KVS_ERR_INTERRUPTED);
    CHECK_EQ_INT(s.polls, 5);
    CHECK_MSG(strstr(kvs_last_error(), "decode step") != NULL, "%s", kvs_last_error());
    kvs_generate_result_free(&r);
    /* and the context still generates what a fresh one does */
    kvs_generate_result r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    s.stop_at = 0;
    CHECK_EQ_INT(kvs_generate(ctx, toks, n, &gp, &r1), KVS_OK);
    CHECK_EQ_INT(kvs_generate(ref, toks, n, &gp, &r2), KVS_OK);
    CHECK(r1.n_tokens == r2.n_tokens && r1.n_tokens > 0 &&
          !memcmp(r1.tokens, r2.tokens, (size_t)r1.n_tokens * sizeof(int32_t)));
    kvs_generate_result_free(&r1);
    kvs_generate_result_free(&r2);
out:
    free(a);
    free(b);
    kvs_context_free(ctx);
    kvs_context_free(ref);
}

TEST(test_generate_greedy_chat) {
    int32_t prompt[128];
    /* A prompt whose greedy answer is not a near tie in the float64
     * reference (first-token margin 1.7 nats), so 8-bit activations keep it. */
    int n = chat_prompt("What color is the sky on a clear day?", prompt, 128);
    CHECK(n > 5);
    if (n <= 5) return;
    kvs_context *ctx = new_ctx(256, 2);
    if (!ctx) return;
    collect c = {0};
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 24;
    gp.on_token = on_token;
    gp.user = &c;
    gp.n_top_logprobs = 20;
    kvs_generate_result r;
    int st = kvs_generate(ctx, prompt, n, &gp, &r);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) { kvs_context_free(ctx); return; }
    CHECK_MSG(strstr(r.text, "blue") != NULL, "text: %s", r.text);
    CHECK(r.n_tokens >= 1 && r.n_tokens <= 24);
    CHECK_EQ_INT(r.n_prompt, n);
    CHECK_EQ_INT(r.n_vocab, 49152);
    CHECK(!strcmp(c.buf, r.text)); /* the stream is the text */
    CHECK(r.ttft_ms >= r.timings.prefill_ms && r.timings.prefill_ms > 0 && r.timings.decode_ms >= 0);
    /* greedy: the first token is the argmax of the first logits = top logprob */
    CHECK_EQ_INT(r.n_top, 20);
    CHECK_EQ_INT(r.tokens[0], kt_argmax(r.first_logits, 49152));
    CHECK_EQ_INT(r.top_ids[0], r.tokens[0]);
    double mass = 0;
    int sorted = 1;
    for (int i = 0; i < r.n_top; i++) {
        mass += exp(r.top_logprobs[i]);
        if (i) sorted &= r.top_logprobs[i] <= r.top_logprobs[i - 1];
        CHECK(r.top_logprobs[i] <= 0.0f);
    }
    CHECK(sorted);
    CHECK(mass > 0.3 && mass <= 1.0001);
    /* first_logits are the bits of a plain prefill */
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    for (int i = 0; i < n; i++) pos[i] = i;
    float *logits = malloc(49152 * sizeof(float));
    CHECK_EQ_INT(kvs_decode(ctx, prompt, pos, n, logits), KVS_OK);
    CHECK(memcmp(logits, r.first_logits, 49152 * sizeof(float)) == 0);
    /* the same request again gives the same tokens */
    kvs_generate_result r2;
    gp.on_token = NULL;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r2), KVS_OK);
    CHECK_EQ_INT(r2.n_tokens, r.n_tokens);
    CHECK(r2.n_tokens == r.n_tokens && !memcmp(r2.tokens, r.tokens, (size_t)r.n_tokens * 4));
    kvs_generate_result_free(&r2);
    kvs_generate_result_free(&r);
    kvs_generate_result_free(&r); /* freeing twice is harmless: fields are cleared */
    free(pos);
    free(logits);
    kvs_context_free(ctx);
}

TEST(test_generate_stop_string_and_callback_stop) {
    int32_t prompt[128];
    int n = chat_prompt("Write one sentence about the sea.", prompt, 128);
    if (n <= 5) { CHECK(0); return; }
    kvs_context *ctx = new_ctx(256, 2);
    if (!ctx) return;
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 20;
    kvs_generate_result full;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &full), KVS_OK);
    size_t L = strlen(full.text);
    CHECK(L > 12);
    if (L > 12) {
        /* Stop at a 3-byte string from the middle of the greedy text. */
        char stop[4];
        memcpy(stop, full.text + L / 2, 3);
        stop[3] = 0;
        const char *stops[2] = {"\x01never", stop};
        size_t cut = (size_t)(strstr(full.text, stop) - full.text);
        collect c = {0};
        gp.stop = stops;
        gp.n_stop = 2;
        gp.on_token = on_token;
        gp.user = &c;
        kvs_generate_result r;
        CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_OK);
        CHECK_EQ_INT(strlen(r.text), cut);
        CHECK(!strncmp(r.text, full.text, cut));
        CHECK(!strcmp(c.buf, r.text)); /* nothing of the stop string was streamed */
        CHECK(r.n_tokens < full.n_tokens);
        kvs_generate_result_free(&r);

        /* on_token returning nonzero stops after that token */
        collect c2 = {0};
        c2.stop_after = 1;
        gp.stop = NULL;
        gp.n_stop = 0;
        gp.user = &c2;
        CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_OK);
        CHECK_EQ_INT(r.n_tokens, 1);
        CHECK_EQ_INT(c2.calls, 1);
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&full);
    kvs_context_free(ctx);
}

TEST(test_generate_seeded_sampling) {
    int32_t prompt[128];
    int n = chat_prompt("Tell me a story.", prompt, 128);
    if (n <= 5) { CHECK(0); return; }
    kvs_context *ctx = new_ctx(128, 2);
    if (!ctx) return;
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 16;
    gp.sampling.temperature = 1.2f;
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1.0f;
    gp.sampling.min_p = 0.0f;
    gp.sampling.seed = 11;
    kvs_generate_result a, b, c;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &a), KVS_OK);
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &b), KVS_OK);
    gp.sampling.seed = 12;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &c), KVS_OK);
    CHECK(a.n_tokens == b.n_tokens && !memcmp(a.tokens, b.tokens, (size_t)a.n_tokens * 4));
    CHECK(!strcmp(a.text, b.text));
    int differ = a.n_tokens != c.n_tokens || memcmp(a.tokens, c.tokens, (size_t)a.n_tokens * 4) != 0;
    CHECK(differ);
    kvs_generate_result_free(&a);
    kvs_generate_result_free(&b);
    kvs_generate_result_free(&c);
    kvs_context_free(ctx);
}

TEST(test_generate_context_limits) {
    int32_t prompt[128];
    int n = chat_prompt("Count from one to fifty.", prompt, 128);
    if (n <= 5) { CHECK(0); return; }
    kvs_context *ctx = new_ctx(n + 3, 1);
    if (!ctx) return;
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 50;
    kvs_generate_result r;
    /* a full context ends generation without an error: n_ctx - n + 1 tokens */
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_OK);
    CHECK(r.n_tokens <= 4);
    kvs_generate_result_free(&r);
    kvs_context_free(ctx);
    ctx = new_ctx(n - 1, 1);
    if (!ctx) return;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_ERR_CONTEXT_FULL);
    CHECK_MSG(strstr(kvs_last_error(), "context") != NULL, "%s", kvs_last_error());
    gp.n_predict = 0;
    kvs_context_free(ctx);
    ctx = new_ctx(n, 1);
    if (!ctx) return;
    CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_OK); /* prefill only */
    CHECK_EQ_INT(r.n_tokens, 0);
    CHECK(r.first_logits != NULL && r.text != NULL && r.text[0] == 0);
    kvs_generate_result_free(&r);
    kvs_context_free(ctx);
}


/* Out-of-range generation values are refused before any work, naming the
 * field: n_predict -1 had generated nothing and stored the prompt, top_p 0
 * / min_p 2 had been silent greedy draws, temperature inf a uniform one;
 * through the cache and the documents path too (nothing looked up,
 * computed or stored before the refusal). */
TEST(test_generate_bad_params_named) {
    int32_t prompt[64];
    int n = chat_prompt("Hi", prompt, 64);
    kvs_context *ctx = new_ctx(128, 1);
    kvs_cache *cache = NULL;
    kvs_cache_params cp = kvs_cache_default_params();
    cp.budget_bytes = 16u << 20;
    /* an unknown Redis codec is refused at open, naming it (the Redis
     * itself need not answer: an unreachable one opens) */
    {
        kvs_cache_params bad = cp;
        kvs_cache *bc = NULL;
        bad.redis_url = "redis://127.0.0.1:1";
        bad.redis_codec = "lz4";
        CHECK_EQ_INT(kvs_cache_open(g_model, bad, &bc), KVS_ERR_INVALID_ARG);
        CHECK_MSG(!bc && strstr(kvs_last_error(), "'lz4'") && strstr(kvs_last_error(), "shuffle-zstd"), "%s",
                  kvs_last_error());
    }
    CHECK_EQ_INT(kvs_cache_open(g_model, cp, &cache), KVS_OK);
    if (!ctx || !cache || n <= 0) { kvs_context_free(ctx); kvs_cache_free(cache); return; }
    static const char *const docs[] = {"The red fox lives in the old forest."};
    kvs_segments seg = {1, NULL, docs, NULL, 1, "Where does the fox live?", NULL};
    for (int k = 0; k < 8; k++) {
        kvs_generate_params gp = kvs_generate_default_params();
        const char *field;
        switch (k) {
        case 0: gp.n_predict = -1; field = "n_predict"; break;
        case 1: gp.sampling.top_p = 0.0f; field = "top_p"; break;
        case 2: gp.sampling.min_p = 2.0f; field = "min_p"; break;
        case 3: gp.sampling.temperature = INFINITY; field = "temperature"; break;
        case 4: gp.sampling.temperature = NAN; field = "temperature"; break;
        case 5: gp.n_top_logprobs = -1; field = "n_top_logprobs"; break;
        case 6: gp.n_stop = -1; field = "n_stop"; break;
        default: {
            static const char *const stops[] = {"x", NULL};
            gp.stop = stops;
            gp.n_stop = 2;
            field = "stop[1]";
        }
        }
        kvs_generate_result r;
        CHECK_EQ_INT(kvs_generate(ctx, prompt, n, &gp, &r), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), field) != NULL, "%s: %s", field, kvs_last_error());
        CHECK_EQ_INT(kvs_generate_cached(ctx, cache, prompt, n, &gp, NULL, &r), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), field) != NULL, "%s: %s", field, kvs_last_error());
        CHECK_EQ_INT(kvs_generate_segments(ctx, cache, &seg, &gp, NULL, &r), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), field) != NULL, "%s: %s", field, kvs_last_error());
    }
    kvs_cache_stats st;
    kvs_cache_get_stats(cache, &st);
    CHECK_EQ_INT(st.entries, 0); /* nothing was stored by the refused calls */
    kvs_cache_free(cache);
    kvs_context_free(ctx);
}

int main(void) {
    const char *path = kt_model_path();
    if (!path) return 1;
    int st = kvs_model_load(path, kvs_model_default_params(), &g_model);
    if (st) {
        fprintf(stderr, "cannot load %s: %s\n", path, kvs_last_error());
        return 1;
    }
    RUN(test_context_params);
    RUN(test_null_arguments);
    RUN(test_decode_checks);
    RUN(test_decode_refuses_unwritten_slots);
    RUN(test_greedy_continuation);
    RUN(test_decode_logits_rows);
    RUN(test_should_stop_interrupts_prefill_and_generate);
    RUN(test_generate_greedy_chat);
    RUN(test_generate_stop_string_and_callback_stop);
    RUN(test_generate_seeded_sampling);
    RUN(test_generate_context_limits);
    RUN(test_generate_bad_params_named);
    kvs_model_free(g_model);
    return kt_summary();
}
