/*
 * Exact prefix reuse on the real model: bit-exactness at every reuse length.
 *
 * For two prompt pairs and a grid of shared lengths L (on and off the
 * 64-token chunk grid), prompt A = base[0..L) + tail_a is cached first
 * (pair 1: generated with the cache, pair 2: warmed), then prompt B =
 * base[0..L) + tail_b, which shares exactly L tokens with A, is generated
 * three ways: from the cache in memory, from a fresh cache opened on the
 * same directory (its KV read from the entry files, as a new process
 * would), and cold with no cache. The first logits (memcmp of the raw
 * floats, and their SHA-256) and the greedy tokens must be identical, and
 * exactly min(L, |B| - 1) tokens must come from the cache. No tolerance.
 *
 * KVSTITCH_TEST_QUICK=1 (sanitizer runs) uses a sparser grid that still has
 * off-grid points.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "engine/context.h"
#include "harness.h"
#include "test_greedy.h"
#include "kvstitch.h"

#define N_CTX 1024
/* greedy tokens compared per run (fewer under KVSTITCH_TEST_QUICK) */
#define N_GEN (quick() ? 2 : 4)
#define MAX_BASE 700

static int quick(void) {
    const char *q = getenv("KVSTITCH_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

static kvs_model *g_model;
static kvs_context *g_ctx;
static int g_n_vocab;

typedef struct pair {
    const char *name;
    int32_t base[MAX_BASE];
    int n_base;
    int32_t tail_a[32], tail_b[32];
    int n_tail_a, n_tail_b;
    int warm_a; /* 1: A is cached by kvs_warm, 0: by kvs_generate_cached */
} pair;

static pair g_pairs[2];


static int tokenize(const char *text, int32_t *out, int cap) {
    int n = 0;
    int st = kvs_tokenize(g_model, text, strlen(text), KVS_TOKENIZE_PARSE_SPECIAL, out, cap, &n);
    if (st == KVS_ERR_BUFFER_TOO_SMALL) return cap; /* truncated to cap: fine for a base */
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    return st ? 0 : n;
}

/* A slice of the MuSiQue passages (real text), cut at an ASCII byte. */
static char *text_slice(size_t from, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/data/musique_dev.json", kt_shared_dir());
    size_t n = 0;
    char *all = kt_read_file(path, &n);
    if (!all || n < from + len) {
        free(all);
        return NULL;
    }
    while (from < n && ((unsigned char)all[from] & 0xC0) == 0x80) from++;
    size_t end = from + len;
    while (end > from && ((unsigned char)all[end] & 0x80)) end--;
    char *s = malloc(end - from + 1);
    memcpy(s, all + from, end - from);
    s[end - from] = 0;
    free(all);
    return s;
}

static int setup_pairs(void) {
    char *t1 = text_slice(1000, 4000), *t2 = text_slice(30000, 4000);
    CHECK_MSG(t1 && t2, "cannot read %s/data/musique_dev.json", kt_shared_dir());
    if (!t1 || !t2) return -1;
    pair *p = &g_pairs[0];
    p->name = "musique-text";
    p->n_base = tokenize(t1, p->base, MAX_BASE);
    p->n_tail_a = tokenize(" Question: who wrote the passage above, and when?", p->tail_a, 32);
    p->n_tail_b = tokenize("\n\nSummarize the text in one sentence.", p->tail_b, 32);
    p->warm_a = 0;

    /* Pair 2: a chat prompt, the passages inside the user turn. */
    p = &g_pairs[1];
    p->name = "chat";
    kvs_chat_message msgs[2] = {{"system", "You answer questions about the given passages."}, {"user", t2}};
    char *rendered = NULL;
    CHECK_EQ_INT(kvs_chat_render(g_model, NULL, msgs, 2, 0, &rendered), KVS_OK);
    if (rendered) p->n_base = tokenize(rendered, p->base, MAX_BASE);
    free(rendered);
    p->n_tail_a = tokenize("<|im_start|>assistant\nThe passages", p->tail_a, 32);
    p->n_tail_b = tokenize(" Which city is named first?<|im_end|>\n<|im_start|>assistant\n", p->tail_b, 32);
    p->warm_a = 1;
    free(t1);
    free(t2);
    for (int i = 0; i < 2; i++) {
        p = &g_pairs[i];
        CHECK_MSG(p->n_base >= 600, "pair %s: base of %d tokens", p->name, p->n_base);
        if (p->n_base < 600 || p->n_tail_a < 2 || p->n_tail_b < 2) return -1;
    }
    return 0;
}

/* prompt = base[0..L) + tail; returns its length. */
static int make_prompt(const pair *p, int L, int b, int32_t *out) {
    memcpy(out, p->base, (size_t)L * sizeof *out);
    const int32_t *t = b ? p->tail_b : p->tail_a;
    int nt = b ? p->n_tail_b : p->n_tail_a;
    memcpy(out + L, t, (size_t)nt * sizeof *out);
    return L + nt;
}

static void sha_hex(const kvs_generate_result *r, char hex[65]) {
    kvs_sha256_hex(r->first_logits, (size_t)r->n_vocab * sizeof(float), hex);
}

/* warm == cold, bit for bit; reports what differs. */
static int same_output(const kvs_generate_result *w, const kvs_generate_result *c, const char *what) {
    int ok = w->n_vocab == c->n_vocab && !memcmp(w->first_logits, c->first_logits, (size_t)c->n_vocab * sizeof(float));
    char hw[65], hc[65];
    sha_hex(w, hw);
    sha_hex(c, hc);
    ok &= !strcmp(hw, hc);
    ok &= w->n_tokens == c->n_tokens && !memcmp(w->tokens, c->tokens, (size_t)c->n_tokens * sizeof(int32_t));
    CHECK_MSG(ok, "%s: warm output differs from cold (sha %.16s vs %.16s, %d vs %d tokens)", what, hw, hc,
              w->n_tokens, c->n_tokens);
    return ok;
}

/* Fills the context's KV buffer with NaNs (F16 0x7e7e), so that a warm run
 * that failed to write any slot it reads cannot pass by reading what an
 * earlier run (the cold one, say) left there. */
static void poison(kvs_context *ctx) {
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    memset(kv->data, 0x7e, kvs_kv_buffer_bytes(kv));
    kvs_kv_forget_written(kv); /* (so a writer that does not mark its slots fails the next decode) */
}

static char g_dir[256];
static kvs_cache *g_mem; /* the cache that stored A, KV in memory */

static void rm_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", dir);
}

static kvs_cache *open_cache(const char *dir, size_t budget) {
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = dir;
    cp.budget_bytes = budget;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(g_model, cp, &c);
    CHECK_MSG(st == KVS_OK, "cache open: %s", kvs_last_error());
    return c;
}

/* Caches prompt A = the whole base + tail_a into a fresh cache directory:
 * every B_L below shares exactly its first L tokens with it. */
static int cache_a(const pair *p) {
    static int32_t a[N_CTX];
    /* the grid goes up to 513: the quick mode caches just past it */
    int na = make_prompt(p, quick() ? 530 : p->n_base, 0, a);
    rm_dir(g_dir);
    kvs_cache *c = open_cache(g_dir, 0);
    if (!c) return -1;
    int st;
    if (p->warm_a) {
        kvs_warm_report rep;
        st = kvs_warm(g_ctx, c, a, na, &rep);
        CHECK_EQ_INT(rep.n_stored, (na + 63) / 64);
    } else {
        kvs_generate_params g1 = kt_greedy(1);
        kvs_generate_result ra;
        st = kvs_generate_cached(g_ctx, c, a, na, &g1, NULL, &ra);
        if (!st) CHECK_EQ_INT(ra.reuse->n_chunks_stored, (na + 63) / 64);
        kvs_generate_result_free(&ra);
    }
    CHECK_MSG(st == KVS_OK, "%s: caching A: %s", p->name, kvs_last_error());
    g_mem = c;
    return st;
}

/* One grid point: B_L warm from memory, warm from a fresh cache on the
 * directory, and cold. Returns the number of warm runs bit-identical to cold
 * with the expected number of cached tokens (0..2). */
static int grid_point(const pair *p, int L) {
    static int32_t b[N_CTX];
    int nb = make_prompt(p, L, 1, b);
    char what[96];
    snprintf(what, sizeof what, "%s L=%d", p->name, L);
    CHECK_MSG(p->tail_b[0] != p->base[L], "%s: B would share more than L tokens", what);
    int good = 0, expect = L < nb - 1 ? L : nb - 1;
    kvs_generate_params gp = kt_greedy(N_GEN);
    /* B is not stored (store = 0), so every run reuses exactly the L tokens
     * it shares with A. */
    kvs_reuse_params rp = kvs_reuse_default_params();
    rp.store = 0;
    kvs_generate_result warm_mem, warm_disk, cold;
    memset(&warm_mem, 0, sizeof warm_mem);
    memset(&warm_disk, 0, sizeof warm_disk);
    memset(&cold, 0, sizeof cold);
    int st3 = kvs_generate(g_ctx, b, nb, &gp, &cold);
    CHECK_EQ_INT(st3, KVS_OK);
    /* 1. the cache that stored A: KV in memory */
    poison(g_ctx);
    int st = kvs_generate_cached(g_ctx, g_mem, b, nb, &gp, &rp, &warm_mem);
    CHECK_MSG(st == KVS_OK, "%s: %s", what, kvs_last_error());
    /* 2. a fresh cache on the directory: KV read from the entry files */
    kvs_cache *c2 = open_cache(g_dir, 0);
    poison(g_ctx);
    int st2 = c2 ? kvs_generate_cached(g_ctx, c2, b, nb, &gp, &rp, &warm_disk) : KVS_ERR_INTERNAL;
    CHECK_MSG(st2 == KVS_OK, "%s (disk): %s", what, kvs_last_error());
    if (!st && !st3) {
        CHECK_MSG(warm_mem.reuse->n_cached == expect, "%s: %d cached tokens, expected %d", what, warm_mem.reuse->n_cached, expect);
        good += warm_mem.reuse->n_cached == expect && warm_mem.n_live == nb - expect && same_output(&warm_mem, &cold, what);
    }
    if (!st2 && !st3) {
        CHECK_MSG(warm_disk.reuse->n_cached == expect, "%s (disk): %d cached tokens, expected %d", what, warm_disk.reuse->n_cached,
                  expect);
        kvs_cache_stats s;
        kvs_cache_get_stats(c2, &s);
        CHECK(s.disk_loads > 0 && s.disk_bad == 0 && s.disk_foreign == 0);
        CHECK_EQ_INT(s.resident, 0); /* read straight into the context, not kept */
        snprintf(what + strlen(what), sizeof what - strlen(what), " (disk)");
        good += warm_disk.reuse->n_cached == expect && same_output(&warm_disk, &cold, what);
    }
    kvs_cache_free(c2);
    kvs_generate_result_free(&warm_mem);
    kvs_generate_result_free(&warm_disk);
    kvs_generate_result_free(&cold);
    return good;
}

TEST(test_bit_exact_grid) {
    static const int full[] = {1, 2, 63, 64, 65, 127, 128, 129, 200, 511, 512, 513};
    static const int sparse[] = {1, 63, 65, 513};
    const int *grid = quick() ? sparse : full;
    int n_grid = quick() ? (int)(sizeof sparse / sizeof *sparse) : (int)(sizeof full / sizeof *full);
    int good = 0, total = 0;
    for (int pi = 0; pi < 2; pi++) {
        if (cache_a(&g_pairs[pi])) continue;
        for (int i = 0; i < n_grid; i++) {
            total += 2;
            good += grid_point(&g_pairs[pi], grid[i]);
        }
        kvs_cache_free(g_mem);
        g_mem = NULL;
    }
    printf("  grid: %d/%d points bit-identical (%d lengths x 2 pairs, in memory and from disk; %s grid)\n", good,
           total, n_grid, quick() ? "sparse" : "full");
    CHECK_EQ_INT(total, 4 * n_grid);
    CHECK_EQ_INT(good, total);
}

/* The whole prompt cached: one live token remains, and it is still exact. */
TEST(test_full_hit_keeps_one_live_token) {
    const pair *p = &g_pairs[0];
    static int32_t a[N_CTX];
    int na = make_prompt(p, 130, 0, a);
    kvs_cache *c = open_cache(NULL, 0);
    if (!c) return;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result r1, r2, cold;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, a, na, &gp, NULL, &r1), KVS_OK);
    CHECK_EQ_INT(r1.reuse->n_cached, 0);
    CHECK_EQ_INT(r1.n_live, na);
    /* 130 + tail tokens cut at 64: chunk ends 64, 128, na */
    CHECK_EQ_INT(r1.reuse->n_chunks, 3);
    CHECK(r1.reuse->chunk_ends && r1.reuse->chunk_ends[0] == 64 && r1.reuse->chunk_ends[1] == 128 && r1.reuse->chunk_ends[2] == na);
    CHECK_EQ_INT(r1.reuse->n_chunks_stored, 3);
    poison(g_ctx);
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, a, na, &gp, NULL, &r2), KVS_OK);
    CHECK_EQ_INT(r2.reuse->n_cached, na - 1);
    CHECK_EQ_INT(r2.n_live, 1);
    CHECK_NEAR(r2.reuse->cache_hit_ratio, (double)(na - 1) / na, 1e-12);
    CHECK_EQ_INT(r2.reuse->n_chunks_stored, 0);
    CHECK_EQ_INT(kvs_generate(g_ctx, a, na, &gp, &cold), KVS_OK);
    same_output(&r1, &cold, "first run");
    same_output(&r2, &cold, "full hit");
    CHECK(r2.ttft_ms >= r2.timings.lookup_ms);
    kvs_generate_result_free(&r1);
    kvs_generate_result_free(&r2);
    kvs_generate_result_free(&cold);
    /* reuse none: nothing read, same bits */
    kvs_reuse_params rp = kvs_reuse_default_params();
    rp.mode = KVS_REUSE_NONE;
    kvs_generate_result rn;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, a, na, &gp, &rp, &rn), KVS_OK);
    CHECK_EQ_INT(rn.reuse->n_cached, 0);
    CHECK_EQ_INT(rn.n_live, na);
    kvs_generate_result_free(&rn);
    kvs_cache_free(c);
}

/* A cache too small for the prompt: chunks are evicted, hits get shorter,
 * output stays exact. */
TEST(test_small_budget_stays_exact) {
    const pair *p = &g_pairs[0];
    static int32_t a[N_CTX], b[N_CTX];
    int L = quick() ? 200 : 300;
    int na = make_prompt(p, L, 0, a), nb = make_prompt(p, L, 1, b);
    /* ~2.5 chunks of 64 tokens (23 KB a token in F16) */
    size_t chunk_bytes = (size_t)64 * 30 * 2 * 3 * 64 * 2;
    kvs_cache *c = open_cache(NULL, chunk_bytes * 5 / 2);
    if (!c) return;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result ra, rb, cold;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, a, na, &gp, NULL, &ra), KVS_OK);
    poison(g_ctx);
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, b, nb, &gp, NULL, &rb), KVS_OK);
    kvs_cache_stats s;
    kvs_cache_get_stats(c, &s);
    CHECK(s.evictions > 0);
    CHECK(s.bytes <= s.budget_bytes);
    /* the first chunks are the most recently used and survive */
    CHECK_MSG(rb.reuse->n_cached >= 64 && rb.reuse->n_cached < L, "%d cached", rb.reuse->n_cached);
    CHECK_EQ_INT(kvs_generate(g_ctx, b, nb, &gp, &cold), KVS_OK);
    same_output(&rb, &cold, "small budget");
    kvs_generate_result_free(&ra);
    kvs_generate_result_free(&rb);
    kvs_generate_result_free(&cold);
    kvs_cache_free(c);
}

TEST(test_warm_report) {
    kvs_cache *c = open_cache(NULL, 0);
    if (!c) return;
    const pair *p = &g_pairs[0];
    kvs_warm_report r;
    /* 200 tokens: three full chunks and an 8-token tail */
    CHECK_EQ_INT(kvs_warm(g_ctx, c, p->base, 200, &r), KVS_OK);
    CHECK_EQ_INT(r.n_tokens, 200);
    CHECK_EQ_INT(r.chunk_tokens, 64);
    CHECK_EQ_INT(r.n_chunks, 4);
    CHECK_EQ_INT(r.n_stored, 4);
    CHECK_EQ_INT(r.aligned, 0);
    CHECK_EQ_INT(r.partial_tail, 8);
    CHECK_EQ_INT(r.n_computed, 200);
    CHECK_EQ_INT(r.border_stable, 1);
    /* again, longer and aligned: the first 200 come from the cache */
    CHECK_EQ_INT(kvs_warm(g_ctx, c, p->base, 256, &r), KVS_OK);
    CHECK_EQ_INT(r.n_cached, 200);
    CHECK_EQ_INT(r.n_computed, 56);
    CHECK_EQ_INT(r.aligned, 1);
    CHECK_EQ_INT(r.partial_tail, 0);
    CHECK_EQ_INT(r.n_existing, 3);
    CHECK_EQ_INT(r.n_stored, 1);

    /* texts whose end merges with what commonly follows: a trailing space
     * joins the next word, a newline joins the next newline */
    const char *ends[2] = {"The committee published its final recommendations in September. ",
                           "The committee published its final recommendations in September.\n"};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(kvs_warm_text(g_ctx, c, ends[i], strlen(ends[i]), 0, &r), KVS_OK);
        CHECK_EQ_INT(r.border_stable, 0);
        CHECK_EQ_INT(r.stable_tokens, r.n_tokens - 1);
        CHECK_MSG(strstr(r.warning, "tokenize differently") != NULL, "warning: '%s'", r.warning);
    }
    /* a text ending a sentence: stable for the probed continuations */
    const char *whole = "The committee published its final recommendations in September.";
    CHECK_EQ_INT(kvs_warm_text(g_ctx, c, whole, strlen(whole), 0, &r), KVS_OK);
    CHECK_MSG(r.border_stable == 1 && r.warning[0] == 0, "stable %d/%d: %s", r.stable_tokens, r.n_tokens, r.warning);
    CHECK_EQ_INT(r.stable_tokens, r.n_tokens);

    /* a prompt continuing the warmed text reuses it */
    static int32_t ids[256];
    const char *longer = "The committee published its final recommendations in September. What changed?";
    int n = 0;
    CHECK_EQ_INT(kvs_tokenize(g_model, longer, strlen(longer), 0, ids, 256, &n), KVS_OK);
    kvs_generate_params gp = kt_greedy(2);
    kvs_generate_result g, cold;
    poison(g_ctx);
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, ids, n, &gp, NULL, &g), KVS_OK);
    CHECK_EQ_INT(g.reuse->n_cached, r.n_tokens);
    CHECK_EQ_INT(kvs_generate(g_ctx, ids, n, &gp, &cold), KVS_OK);
    same_output(&g, &cold, "after warm_text");
    kvs_generate_result_free(&g);
    kvs_generate_result_free(&cold);
    kvs_cache_free(c);
}

TEST(test_api_errors) {
    kvs_cache *c = open_cache(NULL, 0);
    if (!c) return;
    int32_t t[4] = {1, 2, 3, 4};
    kvs_generate_params gp = kt_greedy(1);
    kvs_generate_result r;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, t, 0, &gp, NULL, &r), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_generate_cached(NULL, c, t, 4, &gp, NULL, &r), KVS_ERR_INVALID_ARG);
    int32_t bad[2] = {5, 999999};
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, bad, 2, &gp, NULL, &r), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "999999") != NULL);
    kvs_reuse_params rp = kvs_reuse_default_params();
    rp.mode = (kvs_reuse_mode)42;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, t, 4, &gp, &rp, &r), KVS_ERR_INVALID_ARG);
    /* borders outside the prompt, repeated or falling: named (they had been
     * taken silently) */
    rp = kvs_reuse_default_params();
    static const int bad_borders[4][2] = {{-5, 2}, {2, 2}, {1, 5}, {3, 1}};
    for (int i = 0; i < 4; i++) {
        rp.borders = bad_borders[i];
        rp.n_borders = 2;
        CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, t, 4, &gp, &rp, &r), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), "borders must rise strictly within 0..4"), "%d: %s", i, kvs_last_error());
    }
    static const int good_borders[2] = {1, 3};
    rp.borders = good_borders;
    CHECK_EQ_INT(kvs_generate_cached(g_ctx, c, t, 4, &gp, &rp, &r), KVS_OK);
    kvs_generate_result_free(&r);
    rp.mode = (kvs_reuse_mode)42;
    kvs_reuse_mode m;
    CHECK_EQ_INT(kvs_reuse_mode_parse("prefix", &m), KVS_OK);
    CHECK_EQ_INT(m, KVS_REUSE_PREFIX);
    CHECK_EQ_INT(kvs_reuse_mode_parse("none", &m), KVS_OK);
    CHECK_EQ_INT(m, KVS_REUSE_NONE);
    CHECK_EQ_INT(kvs_reuse_mode_parse("bogus", &m), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "bogus") != NULL);
    kvs_warm_report wr;
    CHECK_EQ_INT(kvs_warm_text(g_ctx, c, "", 0, 0, &wr), KVS_ERR_INVALID_ARG);
    /* a context with F32 KV cannot use an F16 cache */
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 64;
    cp.kv_type = KVS_KV_F32;
    kvs_context *ctx32 = NULL;
    CHECK_EQ_INT(kvs_context_new(g_model, cp, &ctx32), KVS_OK);
    if (ctx32) {
        CHECK_EQ_INT(kvs_generate_cached(ctx32, c, t, 4, &gp, NULL, &r), KVS_ERR_MODEL_MISMATCH);
        CHECK_EQ_INT(kvs_warm(ctx32, c, t, 4, &wr), KVS_ERR_MODEL_MISMATCH);
        kvs_context_free(ctx32);
    }
    kvs_cache_free(c);
    /* the chunk grid's bounds, as the CLI's and Python's (INT_MAX had been taken) */
    kvs_cache_params pp = kvs_cache_default_params();
    kvs_cache *none = NULL;
    const int bad_steps[3] = {-1, KVS_MAX_CHUNK_TOKENS + 1, INT32_MAX};
    for (int i = 0; i < 3; i++) {
        pp.chunk_tokens = bad_steps[i];
        CHECK_EQ_INT(kvs_cache_open(g_model, pp, &none), KVS_ERR_INVALID_ARG);
        CHECK_MSG(strstr(kvs_last_error(), "chunk_tokens must be in 0..4096") != NULL, "%s", kvs_last_error());
        CHECK(none == NULL);
    }
    pp.chunk_tokens = KVS_MAX_CHUNK_TOKENS;
    CHECK_EQ_INT(kvs_cache_open(g_model, pp, &none), KVS_OK);
    kvs_cache_free(none);
}

/* Two threads, each with its own context, share one cache. */
typedef struct thread_job {
    const int32_t *prompt;
    int n;
    kvs_cache *cache;
    kvs_generate_result warm, cold;
    int st;
} thread_job;

#include <pthread.h>

static void *thread_main(void *arg) {
    thread_job *j = arg;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    kvs_context *ctx = NULL;
    j->st = kvs_context_new(g_model, cp, &ctx);
    kvs_generate_params gp = kt_greedy(3);
    for (int rep = 0; rep < 2 && !j->st; rep++) {
        if (rep) kvs_generate_result_free(&j->warm);
        poison(ctx);
        j->st = kvs_generate_cached(ctx, j->cache, j->prompt, j->n, &gp, NULL, &j->warm);
    }
    if (!j->st) j->st = kvs_generate(ctx, j->prompt, j->n, &gp, &j->cold);
    kvs_context_free(ctx);
    return NULL;
}

TEST(test_threads_share_a_cache) {
    rm_dir(g_dir);
    kvs_cache *c = open_cache(g_dir, 0);
    if (!c) return;
    static int32_t a[N_CTX], b[N_CTX];
    thread_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[0].n = make_prompt(&g_pairs[0], 150, 0, a);
    jobs[1].n = make_prompt(&g_pairs[0], 150, 1, b);
    jobs[0].prompt = a;
    jobs[1].prompt = b;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        jobs[i].cache = c;
        pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(jobs[i].st == KVS_OK, "thread %d: %s", i, kvs_last_error());
        if (jobs[i].st) continue;
        CHECK_EQ_INT(jobs[i].warm.reuse->n_cached, jobs[i].n - 1); /* its second run hits its own first */
        same_output(&jobs[i].warm, &jobs[i].cold, "thread");
        kvs_generate_result_free(&jobs[i].warm);
        kvs_generate_result_free(&jobs[i].cold);
    }
    kvs_cache_free(c);
}

int main(void) {
    const char *path = kt_model_path();
    if (!path) return 1;
    if (kvs_model_load(path, kvs_model_default_params(), &g_model)) {
        fprintf(stderr, "%s\n", kvs_last_error());
        return 1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    if (kvs_context_new(g_model, cp, &g_ctx)) {
        fprintf(stderr, "%s\n", kvs_last_error());
        return 1;
    }
    g_n_vocab = kvs_vocab_size(g_model);
    snprintf(g_dir, sizeof g_dir, "/tmp/kvs_test_prefix_reuse.%d", (int)getpid());
    kt_test_failed = 0;
    if (setup_pairs()) {
        printf("FAIL setup_pairs\n");
        return 1;
    }
    RUN(test_bit_exact_grid);
    RUN(test_full_hit_keeps_one_live_token);
    RUN(test_small_budget_stays_exact);
    RUN(test_warm_report);
    RUN(test_api_errors);
    RUN(test_threads_share_a_cache);
    rm_dir(g_dir);
    kvs_context_free(g_ctx);
    kvs_model_free(g_model);
    return kt_summary();
}
