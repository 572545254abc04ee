/* Sampler: greedy, top-k/top-p/min-p cut-offs, temperature, repetition
 * penalty, presence/frequency penalties, and determinism of the seeded draw. No model needed. */
#include <limits.h>
#include <math.h>

#include "engine/sampler.h"
#include "harness.h"

static kvs_sampler *make(kvs_sampler_params p, int n) {
    kvs_sampler *s = NULL;
    int st = kvs_sampler_new(p, n, &s);
    CHECK_EQ_INT(st, KVS_OK);
    return s;
}

static kvs_sampler_params plain(float temp) {
    kvs_sampler_params p = kvs_sampler_default_params();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    return p;
}

TEST(test_greedy_argmax_and_ties) {
    float l[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, -5.0f};
    kvs_sampler *s = make(plain(0.0f), 6);
    if (!s) return;
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 1); /* tie between 1 and 3: lower id */
    l[3] = 2.5f;
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 3);
    kvs_sampler_free(s);
}

/* NULL sampler or logits: -1 and a message (both had crashed). */
TEST(test_null_arguments_refused) {
    float l[2] = {0.0f, 1.0f};
    kvs_sampler *s = make(plain(0.0f), 2);
    if (!s) return;
    CHECK_EQ_INT(kvs_sampler_sample(NULL, l), -1);
    CHECK(strstr(kvs_last_error(), "sampler") != NULL);
    CHECK_EQ_INT(kvs_sampler_sample(s, NULL), -1);
    CHECK(strstr(kvs_last_error(), "logits") != NULL);
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 1);
    kvs_sampler_free(s);
    /* a NULL out is refused (it had been written through: SEGV); accepting
     * into a NULL sampler does nothing (it had crashed) */
    CHECK_EQ_INT(kvs_sampler_new(plain(0.0f), 2, NULL), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "out is NULL") != NULL);
    kvs_sampler_accept(NULL, 1);
    kvs_sampler_accept_prompt(NULL, 1);
}

/* A window of INT_MAX tokens: no 8 GiB allocated up front (the ring grows
 * as it fills), and the penalty as with a window that holds everything. */
TEST(test_repetition_window_grows) {
    enum { V = 2048 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)(V - i); /* 0 best, then 1, ... */
    kvs_sampler_params p = plain(0.0f);
    p.repeat_penalty = 4096.0f; /* any penalised id drops below every other */
    p.repeat_last_n = INT_MAX;
    kvs_sampler *s = make(p, V);
    if (!s) return;
    for (int i = 0; i < 1000; i++) kvs_sampler_accept(s, i); /* past the ring's first size */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 1000);
    kvs_sampler_free(s);
}

TEST(test_default_is_greedy) {
    kvs_sampler_params p = kvs_sampler_default_params();
    CHECK(p.temperature <= 0.0f);
    CHECK(p.repeat_penalty == 1.0f);
}

TEST(test_top_k_ids_order) {
    float x[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    int32_t out[4], heap[4];
    kvs_top_k_ids(x, 8, 4, out, heap);
    CHECK_EQ_INT(out[0], 5);
    CHECK_EQ_INT(out[1], 7);
    CHECK_EQ_INT(out[2], 4);
    CHECK_EQ_INT(out[3], 2);
    float y[5] = {1, 1, 1, 1, 1};
    int32_t o2[3], h2[3];
    kvs_top_k_ids(y, 5, 3, o2, h2);
    CHECK(o2[0] == 0 && o2[1] == 1 && o2[2] == 2);
}

TEST(test_seed_determinism) {
    enum { N = 100, DRAWS = 2000 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)((i * 37) % 17) * 0.3f;
    kvs_sampler_params p = plain(1.0f);
    p.seed = 1234;
    kvs_sampler *a = make(p, N), *b = make(p, N);
    p.seed = 1235;
    kvs_sampler *c = make(p, N);
    if (!a || !b || !c) return;
    int same = 1, differs = 0;
    int32_t first[DRAWS];
    for (int i = 0; i < DRAWS; i++) {
        int32_t ta = kvs_sampler_sample(a, l), tb = kvs_sampler_sample(b, l), tc = kvs_sampler_sample(c, l);
        first[i] = ta;
        same &= ta == tb;
        differs |= ta != tc;
    }
    CHECK(same);
    CHECK(differs);
    /* reset restarts the same stream */
    kvs_sampler_reset(a);
    int again = 1;
    for (int i = 0; i < DRAWS; i++) again &= kvs_sampler_sample(a, l) == first[i];
    CHECK(again);
    kvs_sampler_free(a);
    kvs_sampler_free(b);
    kvs_sampler_free(c);
}

TEST(test_distribution_matches_softmax) {
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    kvs_sampler_params p = plain(1.0f);
    p.seed = 7;
    kvs_sampler *s = make(p, 3);
    if (!s) return;
    int cnt[3] = {0};
    enum { DRAWS = 30000 };
    for (int i = 0; i < DRAWS; i++) cnt[kvs_sampler_sample(s, l)]++;
    /* binomial sd <= sqrt(0.25 / 30000) = 0.003; allow ~5 sd */
    CHECK_NEAR(cnt[0] / (double)DRAWS, 0.5, 0.015);
    CHECK_NEAR(cnt[1] / (double)DRAWS, 0.3, 0.015);
    CHECK_NEAR(cnt[2] / (double)DRAWS, 0.2, 0.015);
    kvs_sampler_free(s);
}

TEST(test_temperature_flattens_and_sharpens) {
    float l[2] = {1.0f, 0.0f}; /* p0 = 0.731 at T = 1 */
    kvs_sampler_params p = plain(4.0f);
    kvs_sampler *hot = make(p, 2);
    p.temperature = 0.25f;
    kvs_sampler *cold = make(p, 2);
    if (!hot || !cold) return;
    int h = 0, c = 0;
    for (int i = 0; i < 20000; i++) {
        h += kvs_sampler_sample(hot, l) == 0;
        c += kvs_sampler_sample(cold, l) == 0;
    }
    /* T = 4: p0 = 1/(1+e^-0.25) = 0.562; T = 0.25: p0 = 1/(1+e^-4) = 0.982 */
    CHECK_NEAR(h / 20000.0, 0.562, 0.02);
    CHECK_NEAR(c / 20000.0, 0.982, 0.01);
    kvs_sampler_free(hot);
    kvs_sampler_free(cold);
}

/* Draws many times and returns a bitmask of the ids seen (n <= 32). */
static unsigned seen_ids(kvs_sampler_params p, const float *l, int n) {
    kvs_sampler *s = make(p, n);
    if (!s) return 0;
    unsigned m = 0;
    for (int i = 0; i < 5000; i++) m |= 1u << kvs_sampler_sample(s, l);
    kvs_sampler_free(s);
    return m;
}

TEST(test_top_k_top_p_min_p_cutoffs) {
    float l[5] = {logf(0.4f), logf(0.3f), logf(0.15f), logf(0.1f), logf(0.05f)};
    kvs_sampler_params p = plain(1.0f);
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x1f); /* all five appear without cut-offs */
    p.top_k = 2;
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x3);
    p = plain(1.0f);
    p.top_p = 0.65f; /* 0.4 + 0.3 >= 0.65 */
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x3);
    p.top_p = 0.71f; /* needs the third */
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x7);
    p = plain(1.0f);
    p.min_p = 0.3f; /* keep p >= 0.12 */
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x7);
    p.min_p = 1.0f;
    CHECK_EQ_INT(seen_ids(p, l, 5), 0x1);
}

TEST(test_repetition_penalty) {
    float l[4] = {2.0f, 1.5f, -1.0f, -0.9f};
    kvs_sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    kvs_sampler *s = make(p, 4);
    if (!s) return;
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_accept(s, 0);
    kvs_sampler_accept(s, 0); /* counted once: 2.0 / 2 = 1.0 < 1.5 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 1);
    kvs_sampler_accept(s, 1); /* 1.5 / 2 = 0.75 < 1.0 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    /* window of 3: pushing two more drops both 0s out of the history */
    kvs_sampler_accept(s, 3);
    kvs_sampler_accept(s, 2);
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_free(s);
    /* negative logits are multiplied: -0.9 * 2 = -1.8 < -1.0 */
    float neg[2] = {-1.0f, -0.9f};
    s = make(p, 2);
    if (!s) return;
    kvs_sampler_accept(s, 1);
    CHECK_EQ_INT(kvs_sampler_sample(s, neg), 0);
    kvs_sampler_free(s);
}

/* OpenAI's additive penalties: logit -= frequency * count + presence *
 * (count > 0), over generated tokens only (prompt tokens never count);
 * reset clears the counts. */
TEST(test_presence_and_frequency_penalties) {
    float l[3] = {3.0f, 2.2f, 1.0f};
    kvs_sampler_params p = plain(0.0f);
    p.presence_penalty = 0.5f;
    kvs_sampler *s = make(p, 3);
    if (!s) return;
    kvs_sampler_accept_prompt(s, 0); /* the prompt: no effect */
    kvs_sampler_accept_prompt(s, 0);
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_accept(s, 0); /* 3.0 - 0.5 = 2.5 > 2.2 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_accept(s, 0); /* presence counts once: still 2.5 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_free(s);

    p = plain(0.0f);
    p.frequency_penalty = 0.5f;
    s = make(p, 3);
    if (!s) return;
    kvs_sampler_accept(s, 0); /* 3.0 - 0.5 = 2.5 > 2.2 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_accept(s, 0); /* 3.0 - 1.0 = 2.0 < 2.2 */
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 1);
    kvs_sampler_reset(s);
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 0);
    kvs_sampler_free(s);

    /* negative values encourage repeats: 1.0 + 2 * 1.5 = 4.0 > 3.0 */
    p = plain(0.0f);
    p.frequency_penalty = -1.5f;
    s = make(p, 3);
    if (!s) return;
    kvs_sampler_accept(s, 2);
    kvs_sampler_accept(s, 2);
    CHECK_EQ_INT(kvs_sampler_sample(s, l), 2);
    kvs_sampler_free(s);

    kvs_sampler *bad = NULL;
    p = plain(1.0f);
    p.presence_penalty = NAN;
    CHECK_EQ_INT(kvs_sampler_new(p, 3, &bad), KVS_ERR_INVALID_ARG);
    p = plain(1.0f);
    p.frequency_penalty = INFINITY;
    CHECK_EQ_INT(kvs_sampler_new(p, 3, &bad), KVS_ERR_INVALID_ARG);
    CHECK(bad == NULL);
}

TEST(test_logits_untouched_and_bad_params) {
    float l[3] = {1, 2, 3}, c[3] = {1, 2, 3};
    kvs_sampler_params p = plain(0.7f);
    p.repeat_penalty = 1.5f;
    kvs_sampler *s = make(p, 3);
    if (!s) return;
    kvs_sampler_accept(s, 2);
    kvs_sampler_sample(s, l);
    CHECK(memcmp(l, c, sizeof l) == 0);
    kvs_sampler_free(s);
    kvs_sampler *bad = NULL;
    p.top_k = -1;
    CHECK_EQ_INT(kvs_sampler_new(p, 3, &bad), KVS_ERR_INVALID_ARG);
    CHECK(bad == NULL);
    p = plain(1.0f);
    CHECK_EQ_INT(kvs_sampler_new(p, 0, &bad), KVS_ERR_INVALID_ARG);
}

/* kvs_logprobs: a distribution (exp sums to 1), the order of kvs_top_k_ids,
 * the chosen token's value equal to its top entry, -inf for a -inf logit,
 * more than 64 ids (scratch allocated) agreeing with the first 64, and the
 * refusals. */
TEST(test_logprobs) {
    enum { N = 3000 };
    static float l[N];
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        l[i] = (float)(r >> 8) / (float)(1u << 24) * 20.0f - 10.0f;
    }
    l[7] = l[8] = 12.0f; /* a tie at the top: id 7 first */
    l[9] = -INFINITY;
    static int32_t ids[N], ids_ref[N], heap[N];
    static float lp[N];
    float tok_lp = 0.0f;
    CHECK_EQ_INT(kvs_logprobs(l, N, 8, &tok_lp, N, ids, lp), KVS_OK);
    kvs_top_k_ids(l, N, N, ids_ref, heap);
    double mass = 0.0;
    int same_order = 1, nonpositive = 1;
    for (int i = 0; i < N; i++) {
        same_order &= ids[i] == ids_ref[i];
        nonpositive &= lp[i] <= 0.0f || isnan(lp[i]);
        mass += exp((double)lp[i]);
    }
    CHECK(same_order);
    CHECK(nonpositive);
    CHECK(fabs(mass - 1.0) < 1e-5);
    CHECK_EQ_INT(ids[0], 7);
    CHECK_EQ_INT(ids[1], 8);
    CHECK(tok_lp == lp[1] && lp[0] == lp[1]);
    CHECK(ids[N - 1] == 9 && isinf(lp[N - 1]) && lp[N - 1] < 0);
    int32_t few[5];
    float few_lp[5];
    CHECK_EQ_INT(kvs_logprobs(l, N, -1, NULL, 5, few, few_lp), KVS_OK);
    CHECK(!memcmp(few, ids, sizeof few) && !memcmp(few_lp, lp, sizeof few_lp));
    CHECK_EQ_INT(kvs_logprobs(l, N, 3, &tok_lp, 0, NULL, NULL), KVS_OK);
    CHECK(exp((double)tok_lp) > 0.0 && tok_lp < 0.0f);
    CHECK_EQ_INT(kvs_logprobs(l, N, N, &tok_lp, 0, NULL, NULL), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_logprobs(l, N, 0, NULL, 0, NULL, NULL), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_logprobs(l, N, -1, NULL, N + 1, ids, lp), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_logprobs(l, N, -1, NULL, 2, NULL, lp), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_logprobs(l, 0, -1, NULL, 0, NULL, NULL), KVS_ERR_INVALID_ARG);
    /* NaN, +inf, all -inf (an attack found each broke every logprob: NaN):
     * a NaN logit is left out of the sum (its own logprob NaN, ranked last),
     * +inf logits share the probability, nothing possible is -inf */
    float m[6] = {1.0f, NAN, 2.0f, -INFINITY, 0.5f, 1.5f};
    int32_t mid[6];
    float mlp[6];
    CHECK_EQ_INT(kvs_logprobs(m, 6, 2, &tok_lp, 6, mid, mlp), KVS_OK);
    double mmass = 0.0;
    for (int i = 0; i < 6; i++)
        if (!isnan(mlp[i])) mmass += exp((double)mlp[i]);
    CHECK(isfinite(tok_lp) && tok_lp < 0.0f && fabs(mmass - 1.0) < 1e-6);
    CHECK(mid[5] == 1 && isnan(mlp[5]));
    float inf2[4] = {INFINITY, 3.0f, INFINITY, NAN};
    CHECK_EQ_INT(kvs_logprobs(inf2, 4, 0, &tok_lp, 4, mid, mlp), KVS_OK);
    CHECK(fabsf(tok_lp + logf(2.0f)) < 1e-6f && mid[0] == 0 && mid[1] == 2 && mlp[1] == tok_lp);
    CHECK(isinf(mlp[2]) && mlp[2] < 0 && isnan(mlp[3]));
    /* several NaN: last, the lower id first among them (the header's rule;
     * their order had depended on the heap's) */
    float nans[8] = {NAN, -INFINITY, INFINITY, 1.0f, NAN, INFINITY, 0.0f, NAN};
    int32_t nid[8];
    float nlp[8];
    CHECK_EQ_INT(kvs_logprobs(nans, 8, -1, NULL, 8, nid, nlp), KVS_OK);
    CHECK_MSG(nid[5] == 0 && nid[6] == 4 && nid[7] == 7, "NaN ids ranked %d %d %d", nid[5], nid[6], nid[7]);
    float all_nan[4] = {NAN, NAN, NAN, NAN};
    CHECK_EQ_INT(kvs_logprobs(all_nan, 4, -1, NULL, 4, nid, nlp), KVS_OK);
    CHECK(nid[0] == 0 && nid[1] == 1 && nid[2] == 2 && nid[3] == 3);
    float none[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(kvs_logprobs(none, 3, 1, &tok_lp, 0, NULL, NULL), KVS_OK);
    CHECK(isinf(tok_lp) && tok_lp < 0);
}

/* Every out-of-range field is refused with KVS_ERR_INVALID_ARG and a message
 * that names it (top_p 0 had been a silent greedy, min_p 2 too, temperature
 * inf a uniform draw; temperature nan was refused by a message listing the
 * other fields but not the temperature). */
TEST(test_bad_params_named) {
    static const struct {
        const char *field;
        int which; /* 0 temperature, 1 top_p, 2 min_p, 3 repeat_penalty, 4 top_k, 5 repeat_last_n */
        float v;
    } bad[] = {
        {"temperature", 0, NAN},  {"temperature", 0, INFINITY}, {"temperature", 0, -INFINITY},
        {"top_p", 1, 0.0f},       {"top_p", 1, -0.5f},          {"top_p", 1, 1.5f},
        {"top_p", 1, NAN},        {"min_p", 2, 2.0f},           {"min_p", 2, -0.1f},
        {"min_p", 2, NAN},        {"repeat_penalty", 3, 0.0f},  {"repeat_penalty", 3, INFINITY},
        {"top_k", 4, -1},         {"repeat_last_n", 5, -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvs_sampler_params p = plain(0.7f);
        switch (bad[i].which) {
        case 0: p.temperature = bad[i].v; break;
        case 1: p.top_p = bad[i].v; break;
        case 2: p.min_p = bad[i].v; break;
        case 3: p.repeat_penalty = bad[i].v; break;
        case 4: p.top_k = (int)bad[i].v; break;
        default: p.repeat_last_n = (int)bad[i].v; break;
        }
        kvs_sampler *s = NULL;
        CHECK_EQ_INT(kvs_sampler_new(p, 3, &s), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), bad[i].field) != NULL, "%s %g: %s", bad[i].field, (double)bad[i].v,
                  kvs_last_error());
        CHECK(s == NULL);
        kvs_sampler_free(s);
    }
    /* the edges stay accepted: top_p 1 and min_p 1, min_p 0, a negative temperature (greedy) */
    kvs_sampler_params p = plain(-1.0f);
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    kvs_sampler *s = make(p, 3);
    kvs_sampler_free(s);
    p.min_p = 0.0f;
    s = make(p, 3);
    kvs_sampler_free(s);
}

/* A temperature so small that 1 / T overflows (a denormal: the CLI's
 * [0, 100] lets 1e-40 through) is greedy: its 0 * inf had made every
 * probability NaN -> 0 and the draw return the last of the top-k. */
TEST(test_tiny_temperature_is_greedy) {
    float l[5] = {0.5f, 3.0f, 1.0f, 2.0f, -1.0f};
    kvs_sampler_params p = plain(1e-40f);
    p.top_k = 4;
    kvs_sampler *s = make(p, 5);
    if (!s) return;
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(kvs_sampler_sample(s, l), 1);
    kvs_sampler_free(s);
}

/* A logit of +inf (a presence penalty of -3e38 reaches it with the
 * API's finite values) takes all the mass, shared among such logits, as
 * kvs_logprobs gives it: inf - inf had made the best candidate's weight 0,
 * and the draw return the last candidate, the least likely token. */
TEST(test_infinite_logits_take_the_mass) {
    float one[4] = {INFINITY, 3.0f, 2.0f, 1.0f}, two[5] = {1.0f, INFINITY, 0.0f, INFINITY, 2.0f};
    kvs_sampler_params p = plain(1.0f);
    int seen[5] = {0};
    for (uint64_t seed = 1; seed <= 64; seed++) {
        p.seed = seed;
        kvs_sampler *s = make(p, 4);
        if (!s) return;
        CHECK_EQ_INT(kvs_sampler_sample(s, one), 0);
        kvs_sampler_free(s);
        s = make(p, 5);
        if (!s) return;
        const int32_t t = kvs_sampler_sample(s, two);
        CHECK_MSG(t == 1 || t == 3, "seed %llu drew %d, not one of the +inf logits", (unsigned long long)seed, (int)t);
        if (t >= 0 && t < 5) seen[t]++;
        kvs_sampler_free(s);
    }
    CHECK_MSG(seen[1] > 8 && seen[3] > 8, "the +inf logits drawn %d and %d times of 64", seen[1], seen[3]);
    float none[3] = {-INFINITY, -INFINITY, -INFINITY}; /* nothing possible: any, not a fixed last one */
    kvs_sampler *s = make(p, 3);
    if (s) {
        const int32_t t = kvs_sampler_sample(s, none);
        CHECK(t >= 0 && t < 3);
        kvs_sampler_free(s);
    }
}

int main(void) {
    RUN(test_greedy_argmax_and_ties);
    RUN(test_null_arguments_refused);
    RUN(test_default_is_greedy);
    RUN(test_top_k_ids_order);
    RUN(test_seed_determinism);
    RUN(test_distribution_matches_softmax);
    RUN(test_temperature_flattens_and_sharpens);
    RUN(test_top_k_top_p_min_p_cutoffs);
    RUN(test_repetition_penalty);
    RUN(test_repetition_window_grows);
    RUN(test_presence_and_frequency_penalties);
    RUN(test_logits_untouched_and_bad_params);
    RUN(test_logprobs);
    RUN(test_bad_params_named);
    RUN(test_tiny_temperature_is_greedy);
    RUN(test_infinite_logits_take_the_mass);
    return kt_summary();
}
