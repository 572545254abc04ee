/*
 * kvs_decode_batch: one decode step over several contexts must give every
 * row the bits it gets alone (kvs_decode with one token), whatever the other
 * rows, their number, their order, or the thread count. memcmp, no tolerance.
 * Also: the cache in steps (load_prefix + decode) equals a cold prefill, and
 * the argument checks name what is wrong.
 */
#include "harness.h"
#include "test_greedy.h"
#include "test_kv_dir.h"

#include <sys/stat.h>
#include "kvstitch.h"

#define N_CTX 256
#define N_SEQ 10 /* rounds of 5 and 10 rows (AVX-512: many_rows); fewer below */
#define N_STEPS 6

static kvs_model *g_model;
static int g_vocab;

/* Sequence s: a prompt of 5 + 9 s tokens, derived from s. */
static int prompt_of(int s, int32_t *out) {
    int n = 5 + 9 * s;
    for (int i = 0; i < n; i++) out[i] = (int32_t)((s * 7919 + i * 104729) % 20000 + 100);
    return n;
}

static kvs_context *new_ctx(int n_threads) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_threads = n_threads;
    cp.n_batch = 64;
    kvs_context *c = NULL;
    int st = kvs_context_new(g_model, cp, &c);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    return c;
}

/* Reference: sequence s alone, greedy, N_STEPS decode steps; logits of the
 * prompt's last token and of every step: (N_STEPS + 1, n_vocab). */
static float *run_alone(int s, int n_threads) {
    int32_t p[N_CTX], pos[N_CTX];
    int n = prompt_of(s, p);
    for (int i = 0; i < N_CTX; i++) pos[i] = i;
    kvs_context *c = new_ctx(n_threads);
    float *lg = malloc((size_t)(N_STEPS + 1) * g_vocab * sizeof(float));
    if (!c || !lg) return lg;
    CHECK(kvs_decode(c, p, pos, n, lg) == KVS_OK);
    for (int t = 0; t < N_STEPS; t++) {
        int32_t tok = kt_argmax(lg + (size_t)t * g_vocab, g_vocab), ps = n + t;
        CHECK(kvs_decode(c, &tok, &ps, 1, lg + (size_t)(t + 1) * g_vocab) == KVS_OK);
    }
    kvs_context_free(c);
    return lg;
}

/* Sequences 0..n_seq-1 together, sequence s joining at step s % 2
 * (continuous batching: rows come and go), rows in reverse order on odd
 * steps. */
static void run_batched(int n_threads, float *ref[N_SEQ], int n_seq) {
    kvs_context *c[N_SEQ];
    int32_t p[N_CTX], pos[N_CTX], n[N_SEQ], next[N_SEQ];
    int step[N_SEQ] = {0};
    for (int i = 0; i < N_CTX; i++) pos[i] = i;
    float *lg = malloc((size_t)N_SEQ * g_vocab * sizeof(float)), *one = malloc((size_t)g_vocab * sizeof(float));
    for (int s = 0; s < n_seq; s++) {
        c[s] = new_ctx(n_threads);
        if (!c[s]) return;
        n[s] = prompt_of(s, p);
        CHECK(kvs_decode(c[s], p, pos, n[s], one) == KVS_OK);
        CHECK_MSG(memcmp(one, ref[s], (size_t)g_vocab * sizeof(float)) == 0, "seq %d prefill logits", s);
        next[s] = kt_argmax(one, g_vocab);
    }
    for (int round = 0; round < N_STEPS + 1; round++) {
        kvs_context *bc[N_SEQ];
        int32_t bt[N_SEQ], bp[N_SEQ];
        int who[N_SEQ], m = 0;
        for (int k = 0; k < n_seq; k++) {
            int s = round % 2 ? n_seq - 1 - k : k;
            if (round < s % 2 || step[s] >= N_STEPS) continue;
            bc[m] = c[s];
            bt[m] = next[s];
            bp[m] = n[s] + step[s];
            who[m++] = s;
        }
        if (m == 0) break;
        CHECK_MSG(kvs_decode_batch(bc, bt, bp, m, lg) == KVS_OK, "%s", kvs_last_error());
        for (int r = 0; r < m; r++) {
            int s = who[r];
            step[s]++;
            const float *want = ref[s] + (size_t)step[s] * g_vocab;
            CHECK_MSG(memcmp(lg + (size_t)r * g_vocab, want, (size_t)g_vocab * sizeof(float)) == 0,
                      "seq %d step %d (row %d of %d, %d threads): logits differ from the sequence alone", s, step[s],
                      r, m, n_threads);
            next[s] = kt_argmax(lg + (size_t)r * g_vocab, g_vocab);
        }
    }
    for (int s = 0; s < n_seq; s++) {
        CHECK_EQ_INT(step[s], N_STEPS);
        kvs_context_free(c[s]);
    }
    free(lg);
    free(one);
}

TEST(batched_rows_equal_alone) {
    float *ref[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) ref[s] = run_alone(s, 1);
    run_batched(1, ref, N_SEQ);
    run_batched(2, ref, N_SEQ);
    /* rounds of 4 and 8 rows, of 4 and 7: on AMX the Q8_0 output head and
     * the Q4_0 / Q4_1 matrices take the batch tiles (matmul_amx_batch.c,
     * matmul_amx_batch_nib.c) */
    run_batched(2, ref, 8);
    run_batched(1, ref, 7);
    for (int s = 0; s < N_SEQ; s++) free(ref[s]);
}

TEST(bad_arguments_are_named) {
    kvs_context *a = new_ctx(1), *b = new_ctx(1);
    float *lg = malloc((size_t)2 * g_vocab * sizeof(float));
    kvs_context *same[2] = {a, a}, *two[2] = {a, b};
    int32_t tok[2] = {1, 2}, pos[2] = {0, 0}, bad_tok[2] = {1, -5}, far[2] = {0, N_CTX};
    CHECK(kvs_decode_batch(same, tok, pos, 2, lg) == KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "same") != NULL);
    CHECK(kvs_decode_batch(two, bad_tok, pos, 2, lg) == KVS_ERR_INVALID_ARG);
    CHECK(kvs_decode_batch(two, tok, far, 2, lg) == KVS_ERR_CONTEXT_FULL);
    CHECK(kvs_decode_batch(two, tok, pos, 0, lg) == KVS_ERR_INVALID_ARG);
    CHECK(kvs_decode_batch(two, tok, pos, 2, lg) == KVS_OK);
    free(lg);
    kvs_context_free(a);
    kvs_context_free(b);
}

/* load_prefix + decode of the rest = cold prefill; store_context of prompt +
 * generated tokens makes a longer prompt that repeats them hit all of them. */
TEST(cache_steps_equal_cold) {
    kvs_cache_params pp = kvs_cache_default_params();
    kvs_cache *cache = NULL;
    CHECK_MSG(kvs_cache_open(g_model, pp, &cache) == KVS_OK, "%s", kvs_last_error());
    if (!cache) return;
    int32_t p[N_CTX], pos[N_CTX];
    int n = 150;
    for (int i = 0; i < N_CTX; i++) {
        p[i] = (int32_t)((i * 7907) % 20000 + 50);
        pos[i] = i;
    }
    float *cold = malloc((size_t)g_vocab * sizeof(float)), *warm = malloc((size_t)g_vocab * sizeof(float));
    kvs_context *c = new_ctx(1);
    CHECK(kvs_decode(c, p, pos, n, cold) == KVS_OK);
    int n_new = 0, n_hit = -1, n_loaded = -1;
    CHECK(kvs_cache_store_context(c, cache, p, n, &n_new) == KVS_OK);
    CHECK(n_new >= 2);
    kvs_context_free(c);
    CHECK(kvs_cache_peek_prefix(cache, p, n + 20, &n_hit) == KVS_OK);
    CHECK_EQ_INT(n_hit, n);
    /* ids outside the vocabulary: refused as by the other calls (a peek had
     * answered 0); a failed load leaves n_loaded as it was (it had zeroed it) */
    int32_t bad[2] = {p[0], -1};
    n_hit = 77;
    CHECK_EQ_INT(kvs_cache_peek_prefix(cache, bad, 2, &n_hit), KVS_ERR_INVALID_ARG);
    CHECK(n_hit == 77 && strstr(kvs_last_error(), "kvs_cache_peek_prefix: token 1 of 2: id -1"));
    c = new_ctx(1);
    n_loaded = 77;
    CHECK_EQ_INT(kvs_cache_load_prefix(c, cache, bad, 2, &n_loaded), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(n_loaded, 77);
    kvs_context_free(c);
    /* A new context, prompt = the stored tokens + 20 more: 150 served. */
    c = new_ctx(2);
    CHECK(kvs_cache_load_prefix(c, cache, p, n + 19, &n_loaded) == KVS_OK);
    CHECK_EQ_INT(n_loaded, n);
    CHECK(kvs_decode(c, p + n, pos + n, 20, warm) == KVS_OK);
    kvs_context *d = new_ctx(1);
    CHECK(kvs_decode(d, p, pos, n + 20, cold) == KVS_OK);
    CHECK_MSG(memcmp(cold, warm, (size_t)g_vocab * sizeof(float)) == 0, "warm logits differ from cold");
    kvs_context_free(c);
    kvs_context_free(d);
    kvs_cache_free(cache);
    free(cold);
    free(warm);
}

/* kvs_cache_store_context stores only slots that hold the exact KV of the
 * tokens given: written from slot 0 in order by kvs_decode or
 * kvs_decode_batch, or loaded from the cache. Slots never written had been
 * stored as zeros, which later prompts were served. */
TEST(store_context_refuses_what_is_not_exact_kv) {
    kvs_cache *cache = NULL;
    CHECK_MSG(kvs_cache_open(g_model, kvs_cache_default_params(), &cache) == KVS_OK, "%s", kvs_last_error());
    if (!cache) return;
    int32_t p[N_CTX], q[N_CTX], pos[N_CTX];
    for (int i = 0; i < N_CTX; i++) {
        p[i] = (int32_t)((i * 7919) % 20000 + 60);
        q[i] = p[i];
        pos[i] = i;
    }
    q[70] = p[70] + 1;
    int n_new = -1, n_hit = -1;
    kvs_context *c = new_ctx(1);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 128, &n_new), KVS_ERR_INVALID_ARG); /* nothing written */
    CHECK(strstr(kvs_last_error(), "slots from 0 on") != NULL);
    /* not in order from slot 0: [32, 64) then [0, 32) in one batch, then
     * [64, 128) (a token attends only to slots written: kvs_decode refuses
     * others) */
    int32_t swapped_tok[64], swapped_pos[64];
    for (int i = 0; i < 64; i++) {
        swapped_pos[i] = (i + 32) % 64;
        swapped_tok[i] = p[swapped_pos[i]];
    }
    CHECK(kvs_decode(c, swapped_tok, swapped_pos, 64, NULL) == KVS_OK);
    CHECK(kvs_decode(c, p + 64, pos + 64, 64, NULL) == KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 128, &n_new), KVS_ERR_INVALID_ARG);
    CHECK(kvs_decode(c, p, pos, 100, NULL) == KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, q, 100, &n_new), KVS_ERR_INVALID_ARG); /* another token */
    CHECK_MSG(strstr(kvs_last_error(), "slot 70 holds the KV of token") != NULL, "%s", kvs_last_error());
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 101, &n_new), KVS_ERR_INVALID_ARG); /* past the written */
    CHECK(kvs_cache_peek_prefix(cache, p, 128, &n_hit) == KVS_OK);
    CHECK_EQ_INT(n_hit, 0); /* none of it stored */
    /* a slot written again: the slots after it were computed against the old one */
    CHECK(kvs_decode(c, q + 70, pos + 70, 1, NULL) == KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, q, 72, &n_new), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, q, 71, &n_new), KVS_OK);
    CHECK(kvs_decode(c, p + 70, pos + 70, 58, NULL) == KVS_OK); /* back to p, on to 128 */
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 128, &n_new), KVS_OK);
    CHECK_EQ_INT(n_new, 1); /* [64, 128): q's store held [0, 64) */
    /* a cache load is exact, and a batched step extends it */
    kvs_context *d = new_ctx(1), *e = new_ctx(1);
    int n_loaded = 0;
    CHECK(kvs_cache_load_prefix(d, cache, p, 129, &n_loaded) == KVS_OK);
    CHECK_EQ_INT(n_loaded, 128);
    CHECK(kvs_decode(e, q, pos, 5, NULL) == KVS_OK);
    kvs_context *rows[2] = {d, e};
    int32_t tok[2] = {p[128], q[5]}, at[2] = {128, 5};
    float *lg = malloc((size_t)2 * g_vocab * sizeof(float));
    CHECK(kvs_decode_batch(rows, tok, at, 2, lg) == KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(d, cache, p, 129, &n_new), KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(e, cache, q, 6, &n_new), KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(e, cache, q, 7, &n_new), KVS_ERR_INVALID_ARG);
    free(lg);
    kvs_context_free(c);
    kvs_context_free(d);
    kvs_context_free(e);
    kvs_cache_free(cache);
}

/* The prefix key of the cache dir's entry at pos0 == want (a scan callback). */
typedef struct {
    int want;
    char key[65];
} find_entry;
static int find_at(void *user, const kvs_cache_entry *e) {
    find_entry *f = user;
    if (e->pos0 == f->want) memcpy(f->key, e->prefix_key, 65);
    return 0;
}

/* p[i] = (i * mult) % 20000 + add, pos[i] = i; p[0..192) computed in a new
 * context and stored in a cache on dir (closed again, 3 chunks). Returns
 * the context, NULL on failure. */
static kvs_context *stored_in_dir(const char *dir, int mult, int add, int32_t *p, int32_t *pos) {
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = dir;
    kvs_cache *cache = NULL;
    CHECK_MSG(kvs_cache_open(g_model, pp, &cache) == KVS_OK, "%s", kvs_last_error());
    if (!cache) return NULL;
    for (int i = 0; i < N_CTX; i++) {
        p[i] = (int32_t)((i * mult) % 20000 + add);
        pos[i] = i;
    }
    kvs_context *c = new_ctx(1);
    int n_new = 0;
    CHECK(kvs_decode(c, p, pos, 192, NULL) == KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 192, &n_new), KVS_OK);
    CHECK_EQ_INT(n_new, 3);
    kvs_cache_free(cache);
    return c;
}

/* A context holding exact KV of p[0..192) loads p from a cache dir whose
 * entry for [64, 128) is damaged: the load serves 64 and the read of the
 * damaged entry wrote its bytes before its checksum failed, so slots from
 * 64 on are exact no longer; storing them is refused (the context's record
 * had been restored whole, and the damaged bytes stored again under p's
 * keys with a valid checksum). */
TEST(a_load_that_ends_on_damage_leaves_no_exact_slots_past_it) {
    char *dir = new_dir();
    int32_t p[N_CTX], pos[N_CTX];
    kvs_context *c = stored_in_dir(dir, 7937, 70, p, pos);
    if (!c) return;
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = dir;
    kvs_cache *cache = NULL;
    int n_new = 0, n_loaded = 0;
    find_entry f = {64, ""};
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, find_at, &f, NULL), KVS_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.kvc", dir, f.key);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    flip(path, (long)sb.st_size - 100); /* inside the payload */
    CHECK_MSG(kvs_cache_open(g_model, pp, &cache) == KVS_OK, "%s", kvs_last_error());
    if (!cache) return;
    CHECK_EQ_INT(kvs_cache_load_prefix(c, cache, p, 192, &n_loaded), KVS_OK);
    CHECK_EQ_INT(n_loaded, 64);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 64, &n_new), KVS_OK);
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 192, &n_new), KVS_ERR_INVALID_ARG);
    CHECK(kvs_decode(c, p + 64, pos + 64, 128, NULL) == KVS_OK); /* computed again: exact */
    CHECK_EQ_INT(kvs_cache_store_context(c, cache, p, 192, &n_new), KVS_OK);
    kvs_context_free(c);
    kvs_cache_free(cache);
    rm_dir(dir);
    free(dir);
}

/* A peek reads no payload the cache indexes: a cache dir opened with a
 * budget below the prompt's KV answers peeks from its index (each peek had
 * loaded the whole prefix from disk; with the budget enforced on release,
 * every scheduler pass of a server had read it again), and the load that
 * follows reads and verifies it. */
TEST(peeks_read_no_payload_the_index_has) {
    char *dir = new_dir();
    int32_t p[N_CTX], pos[N_CTX];
    kvs_context *c = stored_in_dir(dir, 7919, 90, p, pos);
    if (!c) return;
    int n_hit = -1, n_loaded = 0;
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = dir;
    pp.budget_bytes = 1 << 20; /* below one 64-token chunk's KV */
    kvs_cache *cache = NULL;
    CHECK_MSG(kvs_cache_open(g_model, pp, &cache) == KVS_OK, "%s", kvs_last_error());
    if (!cache) return;
    kvs_cache_stats st;
    for (int r = 0; r < 3; r++) {
        CHECK_EQ_INT(kvs_cache_peek_prefix(cache, p, 200, &n_hit), KVS_OK);
        CHECK_EQ_INT(n_hit, 192);
    }
    kvs_cache_get_stats(cache, &st);
    CHECK_EQ_INT((int)st.disk_loads, 0);
    CHECK_EQ_INT(kvs_cache_load_prefix(c, cache, p, 200, &n_loaded), KVS_OK);
    CHECK_EQ_INT(n_loaded, 192);
    kvs_context_free(c);
    kvs_cache_free(cache);
    rm_dir(dir);
    free(dir);
}

int main(void) {
    const char *path = kt_model_path();
    if (!path || kvs_model_load(path, kvs_model_default_params(), &g_model)) {
        printf("FAIL load_model\n");
        return 1;
    }
    g_vocab = kvs_vocab_size(g_model);
    RUN(batched_rows_equal_alone);
    RUN(bad_arguments_are_named);
    RUN(cache_steps_equal_cold);
    RUN(store_context_refuses_what_is_not_exact_kv);
    RUN(a_load_that_ends_on_damage_leaves_no_exact_slots_past_it);
    RUN(peeks_read_no_payload_the_index_has);
    kvs_model_free(g_model);
    return kt_summary();
}
