/*
 * The cache directory end to end on the real model: damaged, truncated and
 * foreign entries are never served (the output equals a cold run, bit for
 * bit) and are counted; the model fingerprint separates models, KV dtypes
 * and builds; the weights digest memo is used only for the same file.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/context.h"
#include "harness.h"
#include "test_greedy.h"
#include "kv/store.h"
#include "model/model.h"
#include "kvstitch.h"
#include "cache/cache.h"
#include "cache/fingerprint.h"

#define N_CTX 512

static kvs_model *g_model;
static kvs_context *g_ctx;
static char g_dir[256];
static int32_t g_prompt[N_CTX];
static int g_n;      /* 300 tokens: chunks at 0, 64, 128, 192, 256 (200: the last at 192) */
static int g_chunks; /* 5 (4) */

static void rm_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", dir);
}

static kvs_cache *open_cache(kvs_model *m, const char *dir) {
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = dir;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(m, cp, &c);
    CHECK_MSG(st == KVS_OK, "cache open: %s", kvs_last_error());
    return c;
}

static kvs_generate_params greedy(void) {
    const char *q = getenv("KVSTITCH_TEST_QUICK");
    return kt_greedy(q && *q && strcmp(q, "0") ? 2 : 4);
}

static void check_same(const kvs_generate_result *a, const kvs_generate_result *b, const char *what) {
    int ok = a->n_vocab == b->n_vocab && !memcmp(a->first_logits, b->first_logits, (size_t)a->n_vocab * sizeof(float)) &&
             a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
    CHECK_MSG(ok, "%s: output differs from the cold run", what);
}

/* Cold output of g_prompt (computed once). */
static kvs_generate_result g_cold;

/* Fresh directory with g_prompt's chunks. */
static int warm_dir(void) {
    rm_dir(g_dir);
    kvs_cache *c = open_cache(g_model, g_dir);
    if (!c) return -1;
    kvs_warm_report r;
    int st = kvs_warm(g_ctx, c, g_prompt, g_n, &r);
    CHECK_MSG(st == KVS_OK && r.n_stored == g_chunks, "warm: %s, %d stored", kvs_last_error(), r.n_stored);
    kvs_cache_free(c);
    return st;
}

/* Path of the entry holding the chunk at pos0. */
typedef struct find_pos {
    int pos0;
    char key[65];
} find_pos;

static int find_cb(void *user, const kvs_cache_entry *e) {
    find_pos *f = user;
    if (e->pos0 != f->pos0) return 0;
    memcpy(f->key, e->prefix_key, 65);
    return 1;
}

static int entry_path(int pos0, char *path, size_t cap) {
    find_pos f = {pos0, ""};
    kvs_cache_dir_stats st;
    CHECK_EQ_INT(kvs_cache_dir_scan(g_dir, find_cb, &f, &st), KVS_OK);
    if (!f.key[0]) return -1;
    snprintf(path, cap, "%s/%s.kvc", g_dir, f.key);
    return 0;
}

static void flip_byte(const char *path, off_t off_from_end) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    if (fd < 0) return;
    off_t at = lseek(fd, 0, SEEK_END) - off_from_end;
    unsigned char b = 0;
    CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

/* NaNs in every KV slot: a warm run must write every slot it reads. */
static void poison(kvs_context *ctx) {
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    memset(kv->data, 0x7e, kvs_kv_buffer_bytes(kv));
    kvs_kv_forget_written(kv); /* (so a writer that does not mark its slots fails the next decode) */
}

/* Generates g_prompt with a fresh cache on g_dir; returns n_cached. */
static int generate_fresh(kvs_cache_stats *st, const char *what) {
    kvs_cache *c = open_cache(g_model, g_dir);
    if (!c) return -1;
    kvs_generate_params gp = greedy();
    kvs_generate_result r;
    poison(g_ctx);
    int rc = kvs_generate_cached(g_ctx, c, g_prompt, g_n, &gp, NULL, &r);
    CHECK_MSG(rc == KVS_OK, "%s: %s", what, kvs_last_error());
    int n = -1;
    if (!rc) {
        check_same(&r, &g_cold, what);
        n = r.reuse->n_cached;
        kvs_generate_result_free(&r);
    }
    kvs_cache_get_stats(c, st);
    kvs_cache_free(c);
    return n;
}

TEST(test_intact_dir_serves_all) {
    if (warm_dir()) return;
    kvs_cache_stats st;
    CHECK_EQ_INT(generate_fresh(&st, "intact"), g_n - 1);
    CHECK_EQ_INT(st.disk_bad, 0);
    CHECK_EQ_INT(st.entries, g_chunks);
}

/* A bit flip in a payload is caught by the checksum when it is read: the
 * reuse ends before that chunk, the entry is dropped, and the next request
 * stores it again. */
TEST(test_damaged_payload_never_served) {
    if (warm_dir()) return;
    char path[512];
    CHECK_EQ_INT(entry_path(128, path, sizeof path), 0);
    flip_byte(path, 1);
    kvs_cache_stats st;
    CHECK_EQ_INT(generate_fresh(&st, "damaged payload"), 128);
    CHECK_EQ_INT(st.disk_bad, 1);
    /* the request dropped the entry, computed the chunk, and stored it anew */
    CHECK_EQ_INT(generate_fresh(&st, "repaired"), g_n - 1);
    CHECK_EQ_INT(st.disk_bad, 0);
}

/* Damage in a header (token ids) is caught when the directory is indexed. */
TEST(test_damaged_header_never_served) {
    if (warm_dir()) return;
    char path[512];
    CHECK_EQ_INT(entry_path(64, path, sizeof path), 0);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    /* a token id: header bytes 192.. hold the ids; the payload is the last kv_bytes */
    size_t payload = (size_t)64 * 30 * 2 * 3 * 64 * 2;
    flip_byte(path, (off_t)(payload + 100));
    kvs_cache_stats st;
    CHECK_EQ_INT(generate_fresh(&st, "damaged header"), 64);
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK(st.disk_orphans >= 1); /* the chunks after it lost their parent */
}

TEST(test_truncated_entry_never_served) {
    if (warm_dir()) return;
    char path[512];
    CHECK_EQ_INT(entry_path(0, path, sizeof path), 0);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    CHECK_EQ_INT(truncate(path, sb.st_size - 4096), 0);
    kvs_cache_stats st;
    CHECK_EQ_INT(generate_fresh(&st, "truncated"), 0);
    CHECK_EQ_INT(st.disk_bad, 1);
}

/* A directory written by another model (the tiny random Llama) with the
 * very same token ids is never served to SmolLM2. */
TEST(test_other_model_never_served) {
    rm_dir(g_dir);
    char tiny[512];
    snprintf(tiny, sizeof tiny, "%s/models/llama-2-tiny-random.gguf", kt_shared_dir());
    kvs_model *tm = NULL;
    int st = kvs_model_load(tiny, kvs_model_default_params(), &tm);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    cp.n_threads = 1;
    kvs_context *tctx = NULL;
    CHECK_EQ_INT(kvs_context_new(tm, cp, &tctx), KVS_OK);
    kvs_cache *tc = open_cache(tm, g_dir);
    if (tctx && tc) {
        kvs_warm_report r;
        CHECK_EQ_INT(kvs_warm(tctx, tc, g_prompt, g_n, &r), KVS_OK); /* ids < 32000 fit both vocabularies */
        CHECK_EQ_INT(r.n_stored, g_chunks);
        /* and the tiny model cannot use a SmolLM2 context with its cache */
        kvs_generate_params gp = greedy();
        kvs_generate_result gr;
        CHECK_EQ_INT(kvs_generate_cached(g_ctx, tc, g_prompt, g_n, &gp, NULL, &gr), KVS_ERR_MODEL_MISMATCH);
    }
    char a[65], b[65];
    kvs_cache *sc = open_cache(g_model, g_dir);
    if (tc && sc) {
        kvs_cache_fingerprint_hex(tc, a);
        kvs_cache_fingerprint_hex(sc, b);
        CHECK(strcmp(a, b) != 0);
    }
    kvs_cache_free(sc);
    kvs_cache_free(tc);
    kvs_context_free(tctx);
    kvs_model_free(tm);
    kvs_cache_stats s;
    CHECK_EQ_INT(generate_fresh(&s, "other model"), 0);
    CHECK_EQ_INT(s.disk_foreign, g_chunks);
    CHECK_EQ_INT(s.disk_bad, 0);
}

/* Same KV shape, another fingerprint (what another build of the engine or a
 * fine-tune of the same architecture would write): foreign, never served. */
TEST(test_other_fingerprint_same_shape_never_served) {
    rm_dir(g_dir);
    kvs_key bogus;
    memset(bogus.b, 0xab, sizeof bogus.b);
    const kvs_hparams *hp = kvs_model_hparams(g_model);
    kvs_kv_shape shape = {hp->n_layer, hp->n_head_kv, hp->head_dim, KVS_KV_F16};
    kvs_store_params sp = kvs_store_default_params();
    sp.cache_dir = g_dir;
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&bogus, &shape, sp, &s), KVS_OK);
    if (!s) return;
    /* the real KV of g_prompt, under the wrong fingerprint */
    int32_t pos[N_CTX];
    for (int i = 0; i < g_n; i++) pos[i] = i;
    CHECK_EQ_INT(kvs_decode(g_ctx, g_prompt, pos, g_n, NULL), KVS_OK);
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(s, g_prompt, g_n, 64, NULL, 0, kvs_context_kv(g_ctx), &rep), KVS_OK);
    CHECK_EQ_INT(rep.n_new, g_chunks);
    kvs_store_free(s);
    kvs_cache_stats st;
    CHECK_EQ_INT(generate_fresh(&st, "other fingerprint"), 0);
    CHECK_EQ_INT(st.disk_foreign, g_chunks);
}

TEST(test_fingerprint_separates) {
    kvs_key f16a, f16b, f32, q8;
    CHECK_EQ_INT(kvs_fingerprint(g_model, KVS_KV_F16, NULL, &f16a), KVS_OK);
    CHECK_EQ_INT(kvs_fingerprint(g_model, KVS_KV_F32, NULL, &f32), KVS_OK);
    CHECK_EQ_INT(kvs_fingerprint(g_model, KVS_KV_Q8, NULL, &q8), KVS_OK);
    CHECK(memcmp(f16a.b, f32.b, 32) != 0);
    CHECK(memcmp(f16a.b, q8.b, 32) != 0);
    CHECK(memcmp(f32.b, q8.b, 32) != 0);
    CHECK_EQ_INT(kvs_fingerprint(g_model, (kvs_kv_type)3, NULL, &q8), KVS_ERR_INVALID_ARG);
    /* another handle of the same file: same fingerprint, computed anew */
    kvs_model *m2 = NULL;
    CHECK_EQ_INT(kvs_model_load(kvs_model_path(g_model), kvs_model_default_params(), &m2), KVS_OK);
    if (m2) {
        CHECK_EQ_INT(kvs_fingerprint(m2, KVS_KV_F16, NULL, &f16b), KVS_OK);
        CHECK(memcmp(f16a.b, f16b.b, 32) == 0);
        /* and a cache of one handle serves a context of the other */
        kvs_cache *c = open_cache(g_model, NULL);
        kvs_context_params cp = kvs_context_default_params();
        cp.n_ctx = 64;
        kvs_context *ctx2 = NULL;
        CHECK_EQ_INT(kvs_context_new(m2, cp, &ctx2), KVS_OK);
        kvs_warm_report r;
        if (c && ctx2) CHECK_EQ_INT(kvs_warm(ctx2, c, g_prompt, 10, &r), KVS_OK);
        kvs_context_free(ctx2);
        kvs_cache_free(c);
        kvs_model_free(m2);
    }
}

/* The weights digest memo is keyed by the file's identity: a reload of the
 * same file uses it, a modified copy does not. */
TEST(test_weights_memo) {
    rm_dir(g_dir);
    mkdir(g_dir, 0755);
    char src[512], copy[600], cmd[4096];
    snprintf(src, sizeof src, "%s/models/llama-2-tiny-random.gguf", kt_shared_dir());
    snprintf(copy, sizeof copy, "%s/model-copy.gguf", g_dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod u+w '%s'", src, copy, copy);
    CHECK_EQ_INT(system(cmd), 0);
    uint8_t d1[32], d2[32], d3[32];
    int memo = -1;
    kvs_model *m = NULL;
    CHECK_EQ_INT(kvs_model_load(copy, kvs_model_default_params(), &m), KVS_OK);
    if (!m) return;
    CHECK_EQ_INT(kvs_weights_digest(m, g_dir, d1, &memo), KVS_OK);
    CHECK_EQ_INT(memo, 0); /* computed, and remembered in the dir */
    kvs_model_free(m);
    CHECK_EQ_INT(kvs_model_load(copy, kvs_model_default_params(), &m), KVS_OK);
    if (!m) return;
    CHECK_EQ_INT(kvs_weights_digest(m, g_dir, d2, &memo), KVS_OK);
    CHECK_EQ_INT(memo, 1); /* a new handle (as in a new process) read the memo */
    CHECK(memcmp(d1, d2, 32) == 0);
    kvs_model_free(m);
    /* the same bytes written again: new mtime/ctime, so hashed again (same digest) */
    usleep(20000);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.tmp' && cat '%s.tmp' > '%s' && rm '%s.tmp'", copy, copy, copy, copy, copy);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(kvs_model_load(copy, kvs_model_default_params(), &m), KVS_OK);
    if (!m) return;
    CHECK_EQ_INT(kvs_weights_digest(m, g_dir, d3, &memo), KVS_OK);
    CHECK_EQ_INT(memo, 0);
    CHECK(memcmp(d1, d3, 32) == 0);
    kvs_model_free(m);
}

/* A context and a cache (in RAM, or on dir) of one KV type, the prompt's
 * first 65 tokens warmed into the cache; 0 when any step failed. */
static int typed_warm(kvs_kv_type type, const char *dir, kvs_context **ctx, kvs_cache **c) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = N_CTX;
    cp.kv_type = type;
    CHECK_EQ_INT(kvs_context_new(g_model, cp, ctx), KVS_OK);
    kvs_cache_params pp = kvs_cache_default_params();
    pp.kv_type = type;
    pp.cache_dir = dir;
    CHECK_EQ_INT(kvs_cache_open(g_model, pp, c), KVS_OK);
    if (!*ctx || !*c) return 0;
    kvs_warm_report wr;
    CHECK_EQ_INT(kvs_warm(*ctx, *c, g_prompt, 65, &wr), KVS_OK);
    return 1;
}

/* F32 KV: its own fingerprint, and exact reuse too. */
TEST(test_f32_cache_exact) {
    kvs_context *ctx = NULL;
    kvs_cache *c = NULL;
    if (!typed_warm(KVS_KV_F32, NULL, &ctx, &c)) return;
    kvs_generate_params gp = greedy();
    kvs_generate_result w, cold;
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    memset(kv->data, 0x7f, kvs_kv_buffer_bytes(kv)); /* F32 NaNs */
    CHECK_EQ_INT(kvs_generate_cached(ctx, c, g_prompt, 150, &gp, NULL, &w), KVS_OK);
    CHECK_EQ_INT(w.reuse->n_cached, 65);
    CHECK_EQ_INT(kvs_generate(ctx, g_prompt, 150, &gp, &cold), KVS_OK);
    check_same(&w, &cold, "f32");
    kvs_generate_result_free(&w);
    kvs_generate_result_free(&cold);
    kvs_cache_free(c);
    kvs_context_free(ctx);
}

/* Q8 KV through the disk tier: a second cache on the same directory (empty
 * RAM) reads the warmed chunks from disk, and the output is the cold run's,
 * bit for bit. */
TEST(test_q8_cache_exact_from_disk) {
    kvs_context *ctx = NULL;
    kvs_cache *c = NULL, *c2 = NULL;
    if (!typed_warm(KVS_KV_Q8, g_dir, &ctx, &c)) return;
    kvs_generate_params gp = greedy();
    kvs_cache_free(c);
    kvs_cache_params pp = kvs_cache_default_params();
    pp.kv_type = KVS_KV_Q8;
    pp.cache_dir = g_dir;
    CHECK_EQ_INT(kvs_cache_open(g_model, pp, &c2), KVS_OK);
    if (!c2) return;
    kvs_generate_result w, cold;
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    memset(kv->data, 0x5a, kvs_kv_buffer_bytes(kv)); /* stale levels and scales */
    CHECK_EQ_INT(kvs_generate_cached(ctx, c2, g_prompt, 150, &gp, NULL, &w), KVS_OK);
    CHECK_EQ_INT(w.reuse->n_cached, 65);
    kvs_cache_stats st;
    kvs_cache_get_stats(c2, &st);
    CHECK(st.disk_loads > 0);
    CHECK_EQ_INT(kvs_generate(ctx, g_prompt, 150, &gp, &cold), KVS_OK);
    check_same(&w, &cold, "q8");
    kvs_generate_result_free(&w);
    kvs_generate_result_free(&cold);
    kvs_cache_free(c2);
    kvs_context_free(ctx);
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
    snprintf(g_dir, sizeof g_dir, "/tmp/kvs_test_prefix_disk.%d", (int)getpid());
    /* 300 ids below 32000 (valid for the tiny Llama vocabulary too) */
    const char *q = getenv("KVSTITCH_TEST_QUICK");
    g_n = q && *q && strcmp(q, "0") ? 200 : 300; /* KVSTITCH_TEST_QUICK: sanitizer runs */
    g_chunks = (g_n + 63) / 64;
    for (int i = 0; i < g_n; i++) g_prompt[i] = (int32_t)(((int64_t)i * 7919 + 101) % 31000 + 500);
    kvs_generate_params gp = greedy();
    if (kvs_generate(g_ctx, g_prompt, g_n, &gp, &g_cold)) {
        fprintf(stderr, "%s\n", kvs_last_error());
        return 1;
    }
    RUN(test_intact_dir_serves_all);
    RUN(test_damaged_payload_never_served);
    RUN(test_damaged_header_never_served);
    RUN(test_truncated_entry_never_served);
    RUN(test_other_model_never_served);
    RUN(test_other_fingerprint_same_shape_never_served);
    RUN(test_fingerprint_separates);
    RUN(test_weights_memo);
    RUN(test_f32_cache_exact);
    RUN(test_q8_cache_exact_from_disk);
    rm_dir(g_dir);
    kvs_generate_result_free(&g_cold);
    kvs_context_free(g_ctx);
    kvs_model_free(g_model);
    return kt_summary();
}
