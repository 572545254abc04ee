/*
 * Storage tiers below RAM and the cache directory as an attacker meets it:
 *   - a tier serves a prompt by key without having been scanned (the
 *     directory tier attached to a memory-only store; a dummy tier defined
 *     here in one ops row, as a Redis tier plugs in), and a chunk by key and
 *     token path (a document's lookup)
 *   - damage on every chunk of a path: one request drops and rewrites all
 *   - a failed write (a directory in an entry's place) is counted, not stored
 *   - a directory that cannot be listed opens degraded (no index, no write,
 *     reads by key), as a read-only one costs the cache, not the caller
 *   - a FIFO in an entry's place never hangs a scan, a lookup, clear, prune
 *   - clear / prune touch only files whose names and headers are the cache's,
 *     and stale junk (an entry's name without the magic); the bound counts
 *     stale junk and reclaims it before any entry
 *   - the byte bound evicts the least recently used entries; the RAM
 *     index's records of chunks only a tier holds are bounded likewise
 *   - unreachable entries and old entries are reported and pruned
 * KV is the fake of test_kv_fake.h: a reuse is right iff its bytes equal the
 * cold bytes.
 */
#include "harness.h"

#include "kv/disk.h"
#include "kv/disk_budget.h"
#include "kv/store.h"
#include "kv/tier_dir.h"
#include "kvstitch.h"
#include "test_kv_dir.h"
#include "test_kv_fake.h"

#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static const kvs_kv_shape SHAPE = {2, 2, 16, KVS_KV_F16};
enum { N = 300 }; /* chunks [0,64) [64,128) [128,192) [192,256) [256,300) */

static int32_t toks[N];
static fake_kv *cold, *warm;
static kvs_key FP;

static kvs_store *open_store(const char *dir, uint64_t max_bytes) {
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 64u << 20;
    p.cache_dir = dir;
    p.cache_max_bytes = max_bytes;
    kvs_store *s = NULL;
    int rc = kvs_store_open(&FP, &SHAPE, p, &s);
    CHECK_MSG(rc == KVS_OK, "open %s: %s", dir ? dir : "(memory)", kvs_last_error());
    return s;
}

static char *populated_dir(void) {
    char *dir = new_dir();
    kvs_store *s = open_store(dir, 0);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 5);
    kvs_store_free(s);
    return dir;
}

static void chunk_key(int i, kvs_key *out) {
    kvs_key k = FP;
    for (int j = 0; j <= i; j++) {
        int a = 64 * j, b = a + 64 < N ? a + 64 : N;
        kvs_key next;
        kvs_key_prefix(&k, toks + a, b - a, &next);
        k = next;
    }
    *out = k;
}

static void entry_path(const char *dir, int i, char *out, size_t cap) {
    kvs_key k;
    chunk_key(i, &k);
    kvs_disk_path(dir, &k, out, cap);
}

/* Tokens served into warm (checked against the cold bytes), -1 if wrong. */
static int serve_into(kvs_store *s, int n) {
    fake_kv_fill(cold, toks, N);
    fake_kv_zero(warm);
    kvs_prefix_hit hit;
    if (kvs_store_lookup_into(s, toks, n, &warm->kv, &hit) != KVS_OK) return -1;
    int got = fake_kv_equal(cold, warm, 0, hit.n_cached) ? hit.n_cached : -1;
    kvs_prefix_hit_release(&hit);
    return got;
}

/* A memory-only store with dir attached as a tier it never scanned. */
static kvs_store *store_over_unscanned_dir(const char *dir) {
    kvs_store *s = open_store(NULL, 0);
    kvs_tier_dir_params dp = {dir, 0, 0, NULL};
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_tier_dir_open(&dp, &FP, &SHAPE, &t), KVS_OK);
    CHECK_EQ_INT(kvs_store_attach_tier(s, t), KVS_OK);
    return s;
}

TEST(dir_tier_serves_by_key_without_scan) {
    char *dir = populated_dir();
    for (int mode = 0; mode < 2; mode++) { /* 0: into a KV buffer (get_into), 1: resident (get_many) */
        kvs_store *s = store_over_unscanned_dir(dir);
        kvs_store_stats st;
        kvs_store_get_stats(s, &st);
        CHECK_EQ_INT(st.entries, 0); /* nothing scanned */
        if (mode == 0) {
            CHECK_EQ_INT(serve_into(s, N), N);
        } else {
            kvs_prefix_hit hit;
            CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, N - 10, &hit), KVS_OK);
            CHECK_EQ_INT(hit.n_cached, 256); /* the grid chunks within N - 10 tokens */
            fake_kv_zero(warm);
            CHECK_EQ_INT(kvs_prefix_hit_copy_to_kv(&hit, &warm->kv), KVS_OK);
            CHECK(fake_kv_equal(cold, warm, 0, hit.n_cached));
            kvs_prefix_hit_release(&hit);
        }
        kvs_store_get_stats(s, &st);
        CHECK_EQ_INT(st.tier_key_hits, mode == 0 ? 5 : 4);
        CHECK_EQ_INT(st.entries, mode == 0 ? 5 : 4); /* indexed on the way */
        CHECK_EQ_INT(st.n_tiers, 1);
        CHECK(st.tier_name[0] && !strcmp(st.tier_name[0], "dir"));
        /* again: from the RAM index now, also at an off-grid length */
        CHECK_EQ_INT(serve_into(s, 200), 200);
        kvs_store_get_stats(s, &st);
        CHECK_EQ_INT(st.tier_key_hits, mode == 0 ? 5 : 4);
        kvs_store_free(s);
    }
    rm_dir(dir);
    free(dir);
}

/* A RAM budget below one chunk (a large model or large chunks): every
 * chunk still goes to the cache directory, and lookups read them from it
 * by key, in this store and in a fresh one. It had been dropped before the
 * write: the directory (and Redis) got nothing. */
TEST(chunks_larger_than_the_ram_budget_go_to_the_tiers) {
    char *dir = new_dir();
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 1024; /* below one chunk */
    p.cache_dir = dir;
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &s), KVS_OK);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_MSG(r.n_new == 5 && r.n_skipped == 0 && r.n_write_errors == 0, "new %d, skipped %d, write errors %d",
              r.n_new, r.n_skipped, r.n_write_errors);
    for (int i = 0; i < 5; i++) {
        char path[4096];
        struct stat sb;
        entry_path(dir, i, path, sizeof path);
        CHECK_MSG(stat(path, &sb) == 0, "chunk %d has no entry in the cache dir", i);
    }
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.resident, 0);
    CHECK_EQ_INT(serve_into(s, N - 1), N - 1);
    kvs_store_free(s);
    kvs_store *fresh = store_over_unscanned_dir(dir);
    CHECK_EQ_INT(serve_into(fresh, N - 1), 256); /* (the tail's key needs all of its tokens) */
    CHECK_EQ_INT(serve_into(fresh, N), N);
    kvs_store_free(fresh);
    rm_dir(dir);
    free(dir);
}

/* The records of chunks a tier holds without their KV in RAM are bounded
 * (stub_bytes): the least recently used leave the index, their tier keeps
 * them, and a lookup still finds them there by key. Before, every chunk a
 * long-lived process wrote to Redis or the dir stayed indexed for good. */
static size_t prompt_records(void) { /* 4 chunks of 64 + a tail of 44 */
    return 4 * (sizeof(kvs_chunk) + 64 * sizeof(int32_t)) + sizeof(kvs_chunk) + 44 * sizeof(int32_t);
}

static uint64_t key_hits(kvs_store *s) {
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    return st.tier_key_hits;
}

TEST(records_without_kv_are_bounded_least_recently_used_first) {
    char *dir = new_dir();
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 1024; /* below one chunk: every chunk is a record in RAM, its KV in the dir */
    p.cache_dir = dir;
    p.stub_bytes = 2 * prompt_records(); /* two prompts' */
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &s), KVS_OK);
    int32_t first = toks[0];
    kvs_put_report r;
    for (int k = 1; k <= 2; k++) { /* prompts A, B */
        toks[0] = 1000 + k;
        fake_kv_fill(cold, toks, N);
        CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
        CHECK_EQ_INT(r.n_new, 5);
    }
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 10);
    CHECK_EQ_INT(st.stub_drops, 0);
    toks[0] = 1001; /* A again, from the index: its records are the newest now */
    uint64_t h0 = key_hits(s);
    CHECK_EQ_INT(serve_into(s, N), N);
    CHECK_EQ_INT(key_hits(s), h0);
    for (int k = 3; k <= 6; k++) { /* C .. F, A touched before each */
        toks[0] = 1001;
        CHECK_EQ_INT(serve_into(s, N), N);
        toks[0] = 1000 + k;
        fake_kv_fill(cold, toks, N);
        CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
        CHECK_EQ_INT(r.n_new, 5);
        kvs_store_get_stats(s, &st);
        CHECK_MSG(st.stub_bytes <= st.stub_budget_bytes, "records %llu bytes over their bound %llu",
                  (unsigned long long)st.stub_bytes, (unsigned long long)st.stub_budget_bytes);
        CHECK_EQ_INT(st.entries, 10);
    }
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.stub_drops, 20); /* B, C, D, E */
    toks[0] = 1001; /* A, touched, stayed */
    h0 = key_hits(s);
    CHECK_EQ_INT(serve_into(s, N), N);
    CHECK_EQ_INT(key_hits(s), h0);
    toks[0] = 1002; /* B left the index, not the dir: served by key */
    CHECK_EQ_INT(serve_into(s, N), N);
    CHECK_EQ_INT(key_hits(s), h0 + 5);
    kvs_store_get_stats(s, &st);
    CHECK(st.stub_bytes <= st.stub_budget_bytes);
    toks[0] = first;
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* Chunks a tier serves by key are indexed first to last; the lookup
 * touches them after, last to first, so the chain's head is the newest
 * record and the bound drops its tail first (it had dropped the head and
 * kept four records no prefix lookup could reach). */
TEST(records_bound_keeps_the_head_of_a_chain_a_tier_served) {
    char *dir = populated_dir(); /* toks: 5 chunks in the dir */
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 1024;           /* nothing resident */
    p.stub_bytes = prompt_records(); /* exactly toks' 5 records */
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &s), KVS_OK);
    kvs_tier_dir_params dp = {dir, 0, 0, NULL};
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_tier_dir_open(&dp, &FP, &SHAPE, &t), KVS_OK);
    CHECK_EQ_INT(kvs_store_attach_tier(s, t), KVS_OK); /* unscanned */
    CHECK_EQ_INT(serve_into(s, N), N);                 /* all 5 by key, indexed */
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 5);
    int32_t first = toks[0];
    toks[0] = 7777; /* one more record, of one chunk: one of toks' must go */
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, 64, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    toks[0] = first;
    kvs_store_get_stats(s, &st);
    CHECK(st.stub_drops >= 1);
    kvs_key k0, k4;
    chunk_key(0, &k0);
    chunk_key(4, &k4);
    CHECK_MSG(kvs_store_contains(s, &k0), "the chain's head was dropped first");
    CHECK_MSG(!kvs_store_contains(s, &k4), "the chain's tail was kept");
    uint64_t h0 = key_hits(s);
    CHECK_EQ_INT(serve_into(s, N), N);
    CHECK_MSG(key_hits(s) - h0 <= 2, "%llu of 5 chunks from the tier: the RAM index served too few",
              (unsigned long long)(key_hits(s) - h0));
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* A server's path: resident chunks evicted to records, records loaded back,
 * both bounds kept on every request, the bytes served right, all counts
 * back to 0 after a clear. */
TEST(records_evicted_and_loaded_back_keep_both_bounds) {
    char *dir = new_dir();
    kvs_store_params p = kvs_store_default_params();
    size_t one = sizeof(kvs_chunk) + 64 * 4 + (size_t)2 * 2 * 2 * 16 * 2 * 64; /* ~a chunk counted */
    p.budget_bytes = 6 * one;
    p.cache_dir = dir;
    p.stub_bytes = prompt_records();
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &s), KVS_OK);
    int32_t first = toks[0];
    kvs_put_report r;
    kvs_store_stats st;
    for (int round = 0; round < 3; round++)
        for (int k = 1; k <= 6; k++) {
            toks[0] = 2000 + k;
            fake_kv_fill(cold, toks, N);
            CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
            kvs_prefix_hit hit;
            CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, N, &hit), KVS_OK); /* records made resident */
            fake_kv_zero(warm);
            CHECK_EQ_INT(kvs_prefix_hit_copy_to_kv(&hit, &warm->kv), KVS_OK);
            CHECK_EQ_INT(hit.n_cached, N);
            CHECK(fake_kv_equal(cold, warm, 0, hit.n_cached));
            kvs_prefix_hit_release(&hit);
            CHECK_EQ_INT(serve_into(s, N), N);
            kvs_store_get_stats(s, &st);
            CHECK(st.stub_bytes <= st.stub_budget_bytes);
            CHECK(st.bytes <= st.budget_bytes);
        }
    kvs_store_get_stats(s, &st);
    CHECK(st.stub_drops > 0 && st.evictions > 0);
    CHECK(st.entries <= 12); /* 6 resident at most, the records of ~one prompt */
    kvs_store_clear(s, 0);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.bytes, 0);
    CHECK_EQ_INT(st.stub_bytes, 0);
    CHECK_EQ_INT(st.resident, 0);
    toks[0] = first;
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* A cache dir listing more records than the bound: the deepest go, so every
 * record kept is reachable by prefix (in readdir order 5 of 9 kept had been
 * "orphans" of a dir with no broken chain). */
TEST(records_bound_at_open_keeps_no_orphans) {
    char *dir = new_dir();
    kvs_store *w = open_store(dir, 0);
    int32_t first = toks[0];
    kvs_put_report r;
    for (int k = 1; k <= 4; k++) {
        toks[0] = 3000 + k;
        fake_kv_fill(cold, toks, N);
        CHECK_EQ_INT(kvs_store_put_prefix(w, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    }
    kvs_store_free(w);
    toks[0] = first;
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 64u << 20;
    p.cache_dir = dir;
    p.stub_bytes = 2 * prompt_records();
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &s), KVS_OK);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK(st.stub_drops > 0);
    CHECK(st.entries >= 8 && st.stub_bytes <= st.stub_budget_bytes);
    CHECK_EQ_INT(st.disk_orphans, 0);
    CHECK_EQ_INT(st.prefix_reachable, st.entries);
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* A chunk asked by prefix key and token path (kvs_store_get_path, as a
 * document lookup asks): an unscanned tier serves it only where its tokens
 * end the path, and it is then found in RAM. */
TEST(chunk_by_key_and_path_from_an_unscanned_tier) {
    char *dir = populated_dir();
    kvs_store *s = store_over_unscanned_dir(dir);
    kvs_key k1;
    chunk_key(1, &k1); /* tokens [64, 128) */
    kvs_chunk *c = NULL;
    CHECK_EQ_INT(kvs_store_get(s, &k1, &c), KVS_ERR_NOT_FOUND); /* RAM only: never scanned */
    int32_t other[128];
    memcpy(other, toks, sizeof other);
    other[100] ^= 1;
    CHECK_EQ_INT(kvs_store_get_path(s, &k1, other, 128, &c), KVS_ERR_NOT_FOUND); /* not its tokens */
    CHECK_EQ_INT(kvs_store_get_path(s, &k1, toks, 127, &c), KVS_ERR_NOT_FOUND);  /* not where it ends */
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(kvs_store_get_path(s, &k1, toks, 128, &c), KVS_OK);
    CHECK(c && c->pos0 == 64 && c->n_tok == 64 && c->kv);
    fake_kv_fill(cold, toks, N);
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 0, 64, &warm->kv, 64), KVS_OK);
    CHECK(fake_kv_equal(cold, warm, 64, 128));
    kvs_chunk_unref(c);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.tier_key_hits, 1);
    CHECK_EQ_INT(st.entries, 1); /* indexed: the plain get finds it now */
    c = NULL;
    CHECK_EQ_INT(kvs_store_get(s, &k1, &c), KVS_OK);
    kvs_chunk_unref(c);
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* --- a dummy tier: one ops row over a shared in-memory table ---------------- */

typedef struct mem_shelf {
    pthread_mutex_t mu;
    kvs_chunk *c[64];
    int n, puts, gets;
    int mute; /* contains_many answers KVS_TIER_UNKNOWN (a Redis timing out) */
} mem_shelf;

static kvs_chunk *shelf_find(mem_shelf *m, const kvs_key *k) {
    for (int i = 0; i < m->n; i++)
        if (kvs_key_equal(&m->c[i]->prefix_key, k)) return m->c[i];
    return NULL;
}

static int mem_get_many(kvs_tier *t, const kvs_key *keys, int n, kvs_chunk **out) {
    mem_shelf *m = t->impl;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n; i++) {
        kvs_chunk *src = shelf_find(m, &keys[i]), *c = NULL;
        m->gets++;
        if (src && kvs_chunk_new(&src->shape, src->n_tok, 1, &c) == KVS_OK) {
            c->prefix_key = src->prefix_key;
            c->parent_key = src->parent_key;
            c->content_key = src->content_key;
            c->pos0 = src->pos0;
            memcpy(c->tokens, src->tokens, (size_t)src->n_tok * sizeof(int32_t));
            memcpy(c->kv, src->kv, src->kv_bytes);
        }
        out[i] = c;
    }
    pthread_mutex_unlock(&m->mu);
    return KVS_OK;
}

static int mem_put(kvs_tier *t, const kvs_chunk *c) {
    mem_shelf *m = t->impl;
    pthread_mutex_lock(&m->mu);
    int rc = KVS_OK;
    if (!shelf_find(m, &c->prefix_key)) {
        if (m->n == 64) rc = KVS_ERR_NOMEM;
        else m->c[m->n++] = kvs_chunk_ref((kvs_chunk *)c); /* the test never changes a stored chunk */
    }
    m->puts++;
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int mem_contains_many(kvs_tier *t, const kvs_key *keys, int n, uint8_t *present) {
    mem_shelf *m = t->impl;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n; i++)
        present[i] = m->mute ? KVS_TIER_UNKNOWN : shelf_find(m, &keys[i]) ? KVS_TIER_HELD : KVS_TIER_ABSENT;
    pthread_mutex_unlock(&m->mu);
    return KVS_OK;
}

static int mem_remove(kvs_tier *t, const kvs_key *k) { return KVS_ERR_NOT_FOUND; }
static int mem_clear(kvs_tier *t, uint64_t *n) { return KVS_OK; }
static void mem_stats(kvs_tier *t, kvs_tier_stats *st) {
    memset(st, 0, sizeof *st);
    st->puts = (uint64_t)((mem_shelf *)t->impl)->puts;
}
static void mem_close(kvs_tier *t) { free(t); } /* the shelf outlives the tiers */

static const kvs_tier_ops mem_ops = {
    .name = "mem", .get_many = mem_get_many, .put = mem_put, .contains_many = mem_contains_many,
    .remove = mem_remove, .clear = mem_clear, .stats = mem_stats, .close = mem_close,
};

static kvs_tier *mem_tier(mem_shelf *m) {
    kvs_tier *t = calloc(1, sizeof *t);
    t->ops = &mem_ops;
    t->impl = m;
    return t;
}

TEST(dummy_tier_plugs_in_by_its_ops_row) {
    static mem_shelf shelf = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0};
    kvs_store *a = open_store(NULL, 0), *b = open_store(NULL, 0);
    CHECK_EQ_INT(kvs_store_attach_tier(a, mem_tier(&shelf)), KVS_OK);
    CHECK_EQ_INT(kvs_store_attach_tier(b, mem_tier(&shelf)), KVS_OK);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(a, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 5);
    CHECK_EQ_INT(shelf.puts, 5);
    /* b never saw a's inserts: it finds them by key, in one get_many */
    CHECK_EQ_INT(serve_into(b, N), N);
    CHECK_EQ_INT(shelf.gets, 5);
    kvs_store_free(a);
    kvs_store_free(b);
    for (int i = 0; i < shelf.n; i++) kvs_chunk_unref(shelf.c[i]);
}

/* A put goes on writing a chain to a tier that cannot say whether the
 * chain's parent is there (unknown is not absent: a Redis check that timed
 * out had cut the prompt off Redis); a parent the tier says it lacks stops
 * the chain there. */
TEST(a_tier_that_cannot_answer_keeps_the_chain) {
    static mem_shelf shelf = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0};
    kvs_store *s = open_store(NULL, 0);
    CHECK_EQ_INT(kvs_store_attach_tier(s, mem_tier(&shelf)), KVS_OK);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, 128, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(shelf.n, 2);
    shelf.mute = 1;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, 192, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(shelf.n, 3); /* written */
    shelf.mute = 0;
    kvs_chunk_unref(shelf.c[--shelf.n]); /* the tier lost chunk 2 (another process's bound) */
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(shelf.n, 2); /* past a parent it lacks: nothing */
    kvs_store_free(s);
    for (int i = 0; i < shelf.n; i++) kvs_chunk_unref(shelf.c[i]);
}

/* Chunks a tier without get_into served (as Redis serves: made resident)
 * are pinned by the hits that hold them, so the lookups' eviction passes
 * over them; kvs_store_release_hit brings the RAM back within the budget
 * once they are let go (a server had stayed at 4x its budget after
 * concurrent hits from Redis, until it stopped). */
TEST(chunks_a_tier_made_resident_leave_when_released) {
    static mem_shelf shelf = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0};
    kvs_store *a = open_store(NULL, 0);
    CHECK_EQ_INT(kvs_store_attach_tier(a, mem_tier(&shelf)), KVS_OK);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(a, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    kvs_store_stats st;
    kvs_store_get_stats(a, &st);
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = st.bytes / 3; /* room for one of the five chunks */
    kvs_store *b = NULL;
    CHECK_EQ_INT(kvs_store_open(&FP, &SHAPE, p, &b), KVS_OK);
    CHECK_EQ_INT(kvs_store_attach_tier(b, mem_tier(&shelf)), KVS_OK);
    kvs_prefix_hit h1, h2;
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_store_lookup_into(b, toks, N, &warm->kv, &h1), KVS_OK);
    CHECK_EQ_INT(kvs_store_lookup_into(b, toks, N, &warm->kv, &h2), KVS_OK); /* two requests at once */
    CHECK_EQ_INT(h1.n_cached, N);
    CHECK(fake_kv_equal(cold, warm, 0, N));
    kvs_store_get_stats(b, &st);
    CHECK(st.bytes > st.budget_bytes); /* pinned */
    kvs_store_release_hit(b, &h1);
    kvs_store_release_hit(b, &h2);
    kvs_store_get_stats(b, &st);
    CHECK_MSG(st.bytes <= st.budget_bytes, "%llu bytes resident over a budget of %llu", (unsigned long long)st.bytes,
              (unsigned long long)st.budget_bytes);
    CHECK_EQ_INT(serve_into(b, N), N); /* still served from the tier */
    kvs_store_free(a);
    kvs_store_free(b);
    for (int i = 0; i < shelf.n; i++) kvs_chunk_unref(shelf.c[i]);
}

/* A tier whose write fails stops taking the put's chunks; the other tiers
 * take every one (a failed directory write had stopped the writes to every
 * tier: the shared tier got chunk 0 of each prompt). */
TEST(a_failing_tier_stops_only_itself) {
    static mem_shelf shelf = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0};
    char *dir = new_dir();
    char path[512];
    entry_path(dir, 1, path, sizeof path);
    CHECK_EQ_INT(plant_full_dir(path), 0); /* a directory in chunk 1's place */
    kvs_store *s = open_store(dir, 0);
    CHECK_EQ_INT(kvs_store_attach_tier(s, mem_tier(&shelf)), KVS_OK);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(shelf.n, 5);                  /* the shared tier: all five */
    CHECK_EQ_INT(count_files(dir, ".kvc"), 2); /* the directory: chunk 0, and the directory in 1's place */
    CHECK_EQ_INT(r.n_write_errors, 4);         /* chunk 1 failed there, 2..4 not written there */
    kvs_store_free(s);
    unplant_full_dir(path);
    rm_dir(dir);
    free(dir);
    for (int i = 0; i < shelf.n; i++) kvs_chunk_unref(shelf.c[i]);
}

TEST(damage_on_every_chunk_heals_in_one_request) {
    char *dir = populated_dir();
    char path[512];
    for (int i = 1; i < 5; i++) {
        entry_path(dir, i, path, sizeof path);
        struct stat sb;
        stat(path, &sb);
        flip(path, (long)sb.st_size - 7); /* inside the payload */
    }
    kvs_store *s = open_store(dir, 0);
    CHECK_EQ_INT(serve_into(s, N), 64);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_bad, 4); /* the first damaged one, and the rest of the path verified */
    /* the request recomputes and stores what it could not reuse: all four */
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 4);
    kvs_store_free(s);
    s = open_store(dir, 0);
    CHECK_EQ_INT(serve_into(s, N), N);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_bad, 0);
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

/* A chunk whose write fails is counted, not stored; the chunks after it
 * are not written (no lookup could reach them there: the tiers take a put
 * first to last), and count as failed writes too. */
TEST(failed_write_is_counted_not_stored) {
    char *dir = new_dir();
    char path[512], path3[512];
    entry_path(dir, 2, path, sizeof path);
    entry_path(dir, 3, path3, sizeof path3);
    CHECK_EQ_INT(plant_full_dir(path), 0); /* directories in two entries' places */
    CHECK_EQ_INT(plant_full_dir(path3), 0);
    kvs_store *s = open_store(dir, 0);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 2);
    CHECK_EQ_INT(r.n_write_errors, 3);
    CHECK(strstr(r.write_error, ".kvc") != NULL);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_write_errors, 3); /* chunk 2's, and 3 and 4 not written after it: as the report says */
    CHECK_EQ_INT(st.disk_writes, 2);
    kvs_store_free(s);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)); /* left alone */
    CHECK_EQ_INT(count_files(dir, ".kvc"), 4);          /* chunks 0 and 1 + the directories */
    CHECK_EQ_INT(count_files(dir, ".tmp"), 0);
    rm_dir(dir);
    free(dir);
}

/* In a long directory path, the failed write's reason survives the 200
 * bytes it is reported in (its start and end kept): "...kvc: write f" had
 * been all a 120-character cache dir left of it. */
TEST(failed_write_reason_survives_a_long_path) {
    char *base = new_dir(), dir[400], path[512];
    snprintf(dir, sizeof dir, "%s/%0150d", base, 0);
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    entry_path(dir, 0, path, sizeof path);
    CHECK_EQ_INT(plant_full_dir(path), 0); /* a directory in chunk 0's place */
    kvs_store *s = open_store(dir, 0);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 0);
    CHECK(strlen(r.write_error) < sizeof r.write_error);
    fprintf(stderr, "  reported: %s\n", r.write_error);
    CHECK_MSG(strstr(r.write_error, "Is a directory"), "'%s'", r.write_error); /* the reason, at the end */
    CHECK_MSG(strstr(r.write_error, " ... ") && !strncmp(r.write_error, "/tmp/kvs_test", 13), "'%s'", r.write_error);
    kvs_store_free(s);
    unplant_full_dir(path);
    rm_dir(dir);
    rmdir(base);
    free(base);
}

/* Root reads any directory (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): this
 * thread's effective set without them (on = 0) or with them back from the
 * permitted set (on = 1), so that root meets a directory's mode as its
 * owner does. 0, or -1 when the kernel refuses. */
static int dac_caps(int on) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &h, c)) return -1;
    const uint32_t dac = 1u << CAP_DAC_OVERRIDE | 1u << CAP_DAC_READ_SEARCH;
    c[0].effective = on ? c[0].effective | (c[0].permitted & dac) : c[0].effective & ~dac;
    return (int)syscall(SYS_capset, &h, c);
}

/* A directory this process may enter and write but not list (mode 0300:
 * opendir fails with EACCES) opens degraded, as a read-only one costs the
 * cache and not the caller: nothing indexed, its entries still read by
 * key, every write refused and reported naming the directory and the
 * error (its bound needs a listing), nothing written. The open had failed
 * ("cannot open cache dir: Permission denied"), and with it `generate`,
 * `warm` and `serve`, which all open through kvs_store_open. */
TEST(unlistable_dir_opens_degraded) {
    char *dir = populated_dir();
    CHECK_EQ_INT(chmod(dir, 0300), 0);
    const int root = geteuid() == 0;
    if (root && dac_caps(0)) {
        chmod(dir, 0755);
        rm_dir(dir);
        free(dir);
        SKIP("root, and the kernel refuses to drop CAP_DAC_OVERRIDE from this thread");
    }
    DIR *probe = opendir(dir);
    if (probe) {
        closedir(probe);
        if (root) dac_caps(1);
        chmod(dir, 0755);
        rm_dir(dir);
        free(dir);
        SKIP("a directory of mode 0300 still lists here");
    }
    kvs_store *s = open_store(dir, 0);
    if (s) {
        kvs_store_stats st;
        kvs_store_get_stats(s, &st);
        CHECK_EQ_INT(st.entries, 0);       /* nothing listed, nothing indexed */
        CHECK_EQ_INT(serve_into(s, N), N); /* read by name */
        static int32_t t2[N];
        for (int i = 0; i < N; i++) t2[i] = toks[i] + 1;
        fake_kv *f = fake_kv_new(SHAPE, N);
        fake_kv_fill(f, t2, N);
        kvs_put_report r;
        CHECK_EQ_INT(kvs_store_put_prefix(s, t2, N, 64, NULL, 0, &f->kv, &r), KVS_OK);
        CHECK_EQ_INT(r.n_new, 0);
        CHECK_EQ_INT(r.n_write_errors, 5);
        CHECK_MSG(strstr(r.write_error, dir) && strstr(r.write_error, "Permission denied"), "'%s'", r.write_error);
        kvs_store_get_stats(s, &st);
        CHECK_EQ_INT(st.disk_writes, 0);
        CHECK_EQ_INT(st.disk_write_errors, 5);
        kvs_store_free(s);
        fake_kv_free(f);
    }
    if (root) CHECK_EQ_INT(dac_caps(1), 0);
    CHECK_EQ_INT(chmod(dir, 0755), 0);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 5); /* the first prompt's, no more */
    CHECK_EQ_INT(count_files(dir, ".tmp"), 0);
    rm_dir(dir);
    free(dir);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL fifo_in_place_never_hangs (timed out)\n";
    if (write(1, msg, sizeof msg - 1)) _exit(1);
    _exit(1);
}

TEST(fifo_in_place_never_hangs) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 1, path, sizeof path);
    CHECK_EQ_INT(unlink(path), 0);
    CHECK_EQ_INT(mkfifo(path, 0644), 0);
    signal(SIGALRM, on_alarm);
    alarm(30);
    kvs_store *s = open_store(dir, 0);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_NOT_REGULAR], 1);
    CHECK_EQ_INT(serve_into(s, N), 64);
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, N, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 64);
    kvs_prefix_hit_release(&hit);
    kvs_store_free(s);
    kvs_cache_dir_stats ds;
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.unreadable, 1);
    CHECK_EQ_INT(kvs_cache_dir_verify(dir, &ds), KVS_OK);
    kvs_cache_prune_params pp = {1, 0, 0};
    kvs_cache_prune_report pr;
    CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
    uint64_t removed;
    CHECK_EQ_INT(kvs_cache_dir_clear(dir, &removed), KVS_OK);
    alarm(0);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode)); /* never ours: left alone */
    rm_dir(dir);
    free(dir);
}

/* A pid that is certainly not running: a child that has exited and been reaped. */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

static void put_file(const char *dir, const char *name, const char *content, time_t mtime) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(content, f);
        fclose(f);
    }
    if (mtime) {
        struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
        utimensat(AT_FDCWD, p, ts, 0);
    }
}

static int exists(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

TEST(clear_and_prune_touch_only_own_files) {
    for (int use_prune = 0; use_prune < 2; use_prune++) {
        char *dir = populated_dir();
        char hex[65], stale[160], live[160], fake_entry[80], fresh_junk[80];
        kvs_key k;
        chunk_key(0, &k);
        kvs_key_to_hex(&k, hex);
        time_t old = time(NULL) - 7200;
        snprintf(stale, sizeof stale, ".%s.%ld.3.tmp", hex, dead_pid());
        snprintf(live, sizeof live, ".%s.%ld.4.tmp", hex, (long)getpid());
        snprintf(fake_entry, sizeof fake_entry, "%064d.kvc", 5);
        snprintf(fresh_junk, sizeof fresh_junk, "%064d.kvc", 6);
        put_file(dir, stale, "KVSC partial", 0);
        put_file(dir, live, "KVSC partial", 0);
        put_file(dir, ".x.tmp", "someone else's", old);      /* old, but not a writer's name */
        put_file(dir, fake_entry, "not a cache entry", old); /* an entry's name, not its header: junk, stale */
        put_file(dir, fresh_junk, "being written", 0);       /* junk, but a foreign writer may be at it */
        put_file(dir, "notes.txt", "mine", old);
        kvs_cache_dir_stats ds;
        CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
        CHECK_EQ_INT(ds.tmp, 2);
        CHECK_EQ_INT(ds.stale_tmp, 1);
        CHECK_EQ_INT(ds.other_files, 2); /* .x.tmp, notes.txt (the junk counts as damaged) */
        CHECK_EQ_INT(ds.damaged, 2);
        if (use_prune) {
            kvs_cache_prune_params pp = {1, 0, 0}; /* a 1-byte bound: every entry goes */
            kvs_cache_prune_report pr;
            CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
            CHECK_EQ_INT(pr.removed, 5);
            CHECK_EQ_INT(pr.tmp_removed, 1);
            CHECK_EQ_INT(pr.junk_removed, 1);
            CHECK_EQ_INT(pr.junk_bytes, strlen("not a cache entry"));
        } else {
            uint64_t removed = 0;
            CHECK_EQ_INT(kvs_cache_dir_clear(dir, &removed), KVS_OK);
            CHECK_EQ_INT(removed, 5);
        }
        CHECK(!exists(dir, stale));
        CHECK(exists(dir, live)); /* a live writer's */
        CHECK(exists(dir, ".x.tmp"));
        CHECK(!exists(dir, fake_entry));
        CHECK(exists(dir, fresh_junk));
        CHECK(exists(dir, "notes.txt"));
        CHECK_EQ_INT(count_files(dir, ".kvc"), 1);
        rm_dir(dir);
        free(dir);
    }
}

/* A file with an entry's name but not its header is never removed, so it
 * does not count toward the bound either: a 4-entry fake, used just now,
 * beside the 5 real entries under a bound they fit in alone: nothing goes.
 * (Counted, it had made the bound evict every real entry after each
 * write.) */
TEST(bound_ignores_files_not_its_own) {
    char *dir = populated_dir();
    kvs_disk_usage u;
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    const uint64_t real = u.bytes;
    char fake_entry[80], *big = malloc(4 * real + 1);
    memset(big, 'x', 4 * real);
    big[4 * real] = 0;
    snprintf(fake_entry, sizeof fake_entry, "%064d.kvc", 7);
    put_file(dir, fake_entry, big, 0);
    free(big);
    kvs_disk_prune_params pp = {real + 1, 0, 0, NULL, 0};
    kvs_disk_prune_report pr;
    CHECK_EQ_INT(kvs_disk_prune(dir, &pp, &pr), KVS_OK);
    CHECK_EQ_INT(pr.removed, 0);
    CHECK_EQ_INT(pr.entries, 5);
    CHECK_EQ_INT(pr.bytes, real);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 6);
    /* a bound below the real entries still evicts them, and only them */
    pp.max_bytes = real / 2;
    CHECK_EQ_INT(kvs_disk_prune(dir, &pp, &pr), KVS_OK);
    CHECK(pr.removed >= 2 && pr.bytes <= real / 2);
    CHECK(exists(dir, fake_entry));
    rm_dir(dir);
    free(dir);
}

static void set_atime(const char *path, time_t t) {
    struct timespec ts[2] = {{t, 0}, {0, UTIME_OMIT}};
    CHECK_EQ_INT(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* Junk, files with an entry's name that do not start with the magic (a
 * zero-length one a crash left, another writer's bytes), had never been
 * removed nor counted: they leaked for good. Stale (untouched for an
 * hour), they count toward the bound and go first, before any entry, when
 * a put needs room; fresh junk (a foreign writer may be filling it right
 * now) and a symlink named like an entry (never followed) stay. */
/* Junk shares its name with an entry: a writer may rename the entry into
 * place after the junk was checked and before it is removed. The removal
 * must then leave the entry (it moves the junk aside and checks it is the
 * file it classified). Here the rename lands deterministically between
 * the two: an unlink by name had removed the entry. */
TEST(junk_removal_spares_an_entry_renamed_into_place) {
    char *dir = populated_dir();
    DIR *d = opendir(dir);
    struct dirent *de;
    char entry[80] = "";
    while ((de = readdir(d)))
        if (strlen(de->d_name) == 68 && !strcmp(de->d_name + 64, KVS_DISK_EXT)) memcpy(entry, de->d_name, 69); /* 64 + ".kvc" + NUL */
    closedir(d);
    CHECK(entry[0] != 0);
    char path[600], saved[600];
    snprintf(path, sizeof path, "%s/%s", dir, entry);
    snprintf(saved, sizeof saved, "%s/saved", dir);
    CHECK_EQ_INT(rename(path, saved), 0);
    put_file(dir, entry, "", time(NULL) - 7200); /* stale zero-length junk under the entry's name */
    struct stat st;
    CHECK_EQ_INT(kvs_disk_classify(dir, entry, 1, &st), KVS_DISK_FILE_JUNK);
    CHECK_EQ_INT(rename(saved, path), 0); /* a writer's rename lands after the check */
    errno = 0;
    CHECK_EQ_INT(kvs_disk_unlink_checked(dir, entry, KVS_DISK_FILE_JUNK, &st), -1);
    CHECK_EQ_INT(errno, EAGAIN);
    struct stat now;
    CHECK_EQ_INT(stat(path, &now), 0);
    CHECK(now.st_size > 1000); /* the entry, whole */
    CHECK_EQ_INT(kvs_disk_classify(dir, entry, 1, &now), KVS_DISK_FILE_ENTRY);
    /* nothing left aside */
    int tmp = 0;
    d = opendir(dir);
    while ((de = readdir(d))) tmp += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    CHECK_EQ_INT(tmp, 0);
    /* and junk that stays junk goes */
    char junk[80];
    snprintf(junk, sizeof junk, "%064x%s", 7, KVS_DISK_EXT);
    put_file(dir, junk, "", time(NULL) - 7200);
    CHECK_EQ_INT(kvs_disk_classify(dir, junk, 1, &st), KVS_DISK_FILE_JUNK);
    CHECK_EQ_INT(kvs_disk_unlink_checked(dir, junk, KVS_DISK_FILE_JUNK, &st), 0);
    CHECK(!exists(dir, junk));
    rm_dir(dir);
    free(dir);
}

/* Writers name entries in lowercase hex (kvs_key_to_hex): a name in
 * capitals is another program's file, which prune and clear leave alone
 * even when it looks like stale junk (they had removed it). */
TEST(capital_hex_names_are_not_the_caches) {
    for (int use_prune = 0; use_prune < 2; use_prune++) {
        char *dir = populated_dir();
        char name[80];
        snprintf(name, sizeof name, "%064X%s", 0xABCDEFu, KVS_DISK_EXT);
        put_file(dir, name, "", time(NULL) - 7200);
        if (use_prune) {
            kvs_cache_prune_params pp = {0};
            kvs_cache_prune_report r;
            CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &r), KVS_OK);
            CHECK_EQ_INT(r.junk_removed, 0);
        } else {
            uint64_t n = 0;
            CHECK_EQ_INT(kvs_cache_dir_clear(dir, &n), KVS_OK);
        }
        CHECK(exists(dir, name));
        rm_dir(dir);
        free(dir);
    }
}

/* Only a refusal (EACCES, EPERM) opens the tier without its listing: any
 * other opendir failure (here EMFILE, no descriptor left) still fails the
 * open, as it did before the degraded mode, rather than leaving the cache
 * unbounded and unwritten for the life of the process. */
TEST(unlistable_only_by_refusal) {
    char *dir = populated_dir();
    struct rlimit old;
    CHECK_EQ_INT(getrlimit(RLIMIT_NOFILE, &old), 0);
    int fds[4096], nfd = 0;
    struct rlimit low = old;
    low.rlim_cur = 64;
    CHECK_EQ_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
    while (nfd < 4096 && (fds[nfd] = open("/dev/null", O_RDONLY)) >= 0) nfd++; /* every descriptor taken */
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 64u << 20;
    p.cache_dir = dir;
    kvs_store *s = NULL;
    const int rc = kvs_store_open(&FP, &SHAPE, p, &s);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", kvs_last_error());
    for (int i = 0; i < nfd; i++) close(fds[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK_MSG(rc != KVS_OK, "opened with no descriptor left");
    CHECK_MSG(strstr(msg, "Too many open files") != NULL, "'%s'", msg);
    if (s) kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

TEST(bound_reclaims_stale_junk_first) {
    char *dir = populated_dir();
    kvs_disk_usage u;
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    char path[512], zero[80], garbage[80], fresh[80], link[80], target[600];
    entry_path(dir, 0, path, sizeof path);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    const uint64_t entry = (uint64_t)sb.st_size, first = u.bytes; /* a full entry; the first prompt's 5 */
    const uint64_t valid = 2 * first - entry; /* and a second prompt's 4 beside its shared chunk 0 */
    const size_t junk = (size_t)(3 * entry);
    char *big = malloc(junk + 1);
    memset(big, 'x', junk);
    big[junk] = 0;
    const time_t old = time(NULL) - 7200;
    snprintf(zero, sizeof zero, "%064d.kvc", 1);
    snprintf(garbage, sizeof garbage, "%064d.kvc", 2);
    snprintf(fresh, sizeof fresh, "%064d.kvc", 3);
    snprintf(link, sizeof link, "%064d.kvc", 4);
    snprintf(target, sizeof target, "%s.target", dir); /* outside the directory: old junk itself */
    put_file(dir, zero, "", old);
    put_file(dir, garbage, big, old);
    put_file(dir, fresh, "being written", 0);
    FILE *f = fopen(target, "wb");
    CHECK(f && fputs("not an entry", f) >= 0 && fclose(f) == 0);
    struct timespec ts[2] = {{old, 0}, {old, 0}};
    CHECK_EQ_INT(utimensat(AT_FDCWD, target, ts, 0), 0);
    snprintf(path, sizeof path, "%s/%s", dir, link);
    CHECK_EQ_INT(symlink(target, path), 0);
    /* a bound the valid entries fit in with room to spare (under its 90% low-water mark), the
     * stale junk beside them not: a second prompt sharing chunk 0 writes 4 chunks */
    static int32_t t2[N];
    memcpy(t2, toks, sizeof t2);
    for (int i = 64; i < N; i++) t2[i] = toks[i] + 1;
    kvs_store *s = open_store(dir, (valid / 9 + 1) * 10);
    fake_kv *fk = fake_kv_new(SHAPE, N);
    fake_kv_fill(fk, t2, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, t2, N, 64, NULL, 0, &fk->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 4);
    CHECK_EQ_INT(r.n_write_errors, 0);
    kvs_store_free(s);
    CHECK(!exists(dir, zero));
    CHECK(!exists(dir, garbage));
    CHECK(exists(dir, fresh));
    CHECK(lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(stat(target, &sb) == 0 && sb.st_size == (off_t)strlen("not an entry")); /* never followed */
    kvs_cache_dir_stats ds;
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.entries, 9); /* no valid entry was evicted for the junk's bytes */
    CHECK_EQ_INT(ds.bytes, valid);
    CHECK_EQ_INT(ds.unreachable, 0);
    CHECK_EQ_INT(ds.damaged, 1);    /* the fresh junk */
    CHECK_EQ_INT(ds.unreadable, 1); /* the symlink */
    s = open_store(dir, 0);
    CHECK_EQ_INT(serve_into(s, N), N);
    kvs_store_free(s);
    /* the prune's report counts it; junk goes before entries used longer ago than it (its
     * access stamp after every entry's; its mtime says stale) */
    put_file(dir, zero, "", old);
    put_file(dir, garbage, big, old);
    snprintf(path, sizeof path, "%s/%s", dir, zero);
    set_atime(path, time(NULL) + 3600);
    snprintf(path, sizeof path, "%s/%s", dir, garbage);
    set_atime(path, time(NULL) + 3600);
    kvs_cache_prune_params pp = {valid, 0, 0};
    kvs_cache_prune_report pr;
    CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
    CHECK_EQ_INT(pr.junk_removed, 2);
    CHECK_EQ_INT(pr.junk_bytes, junk);
    CHECK_EQ_INT(pr.removed, 0);
    CHECK_EQ_INT(pr.entries, 9);
    CHECK_EQ_INT(pr.bytes, valid);
    CHECK(!exists(dir, zero) && !exists(dir, garbage) && exists(dir, fresh));
    fake_kv_free(fk);
    free(big);
    snprintf(path, sizeof path, "%s/%s", dir, link);
    unlink(path);
    unlink(target);
    rm_dir(dir);
    free(dir);
}

TEST(bound_evicts_least_recently_used) {
    char *dir = populated_dir();
    kvs_disk_usage u;
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    uint64_t entry = u.bytes / 5 + 1; /* about one entry (the tail is smaller) */
    /* ages: chunk i last used i hours ago, except chunk 4, used just now */
    time_t now = time(NULL);
    char path[512];
    for (int i = 0; i < 4; i++) {
        entry_path(dir, i, path, sizeof path);
        set_atime(path, now - 3600 * (4 - i));
    }
    /* a second prompt sharing chunk 0; its writes push the dir over 6 entries' bound */
    static int32_t t2[N];
    memcpy(t2, toks, sizeof t2);
    for (int i = 64; i < N; i++) t2[i] = toks[i] + 1;
    kvs_store *s = open_store(dir, 6 * entry);
    fake_kv *f = fake_kv_new(SHAPE, N);
    fake_kv_fill(f, t2, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, t2, N, 64, NULL, 0, &f->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 4);
    kvs_store_free(s); /* the last check happens at close at the latest */
    fake_kv_free(f);
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    CHECK_MSG(u.bytes <= 6 * entry, "%llu bytes > bound %llu", (unsigned long long)u.bytes,
              (unsigned long long)(6 * entry));
    /* whole chains, least recently used first, each from its tail: the
     * first prompt's chunks 4, 3, 2, 1 (its newest use, chunk 4's, came
     * before the second prompt's writes); chunk 0 stays, the head of the
     * second prompt's chain (evicted first, as the oldest stamp, it had
     * left both chains unreachable) */
    entry_path(dir, 0, path, sizeof path);
    CHECK(access(path, F_OK) == 0);
    for (int i = 1; i < 5; i++) {
        entry_path(dir, i, path, sizeof path);
        CHECK_MSG(access(path, F_OK) != 0, "chunk %d of the first prompt stayed", i);
    }
    CHECK_EQ_INT(count_files(dir, ".kvc"), 5); /* chunk 0 and the second prompt's 4 */
    kvs_cache_dir_stats ds;
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.unreachable, 0);
    rm_dir(dir);
    free(dir);
}

TEST(unreachable_and_old_entries_pruned) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 0, path, sizeof path);
    CHECK_EQ_INT(unlink(path), 0); /* a killed writer lost the first chunk */
    kvs_cache_dir_stats ds;
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.entries, 4);
    CHECK_EQ_INT(ds.unreachable, 4);
    kvs_cache_prune_params pp = {0, 0, 1}; /* keep unreachable: nothing to do */
    kvs_cache_prune_report pr;
    CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
    CHECK_EQ_INT(pr.removed, 0);
    pp.keep_unreachable = 0;
    CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
    CHECK_EQ_INT(pr.unreachable_removed, 4);
    CHECK_EQ_INT(pr.entries, 0);
    rm_dir(dir);
    free(dir);
    /* --older-than: entries unused for two days go, the others stay */
    dir = populated_dir();
    for (int i = 3; i < 5; i++) {
        entry_path(dir, i, path, sizeof path);
        set_atime(path, time(NULL) - 2 * 86400);
    }
    /* older than the clock: nothing is (older_than_s * 1e9 had overflowed for
     * INT64_MAX and every entry was removed) */
    const int64_t never[] = {INT64_MAX, (int64_t)time(NULL) + 1, 9300000000};
    for (int i = 0; i < 3; i++) {
        pp = (kvs_cache_prune_params){0, never[i], 0};
        CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
        CHECK_MSG(pr.removed == 0 && pr.entries == 5, "older than %lld s: %llu removed", (long long)never[i],
                  (unsigned long long)pr.removed);
    }
    pp = (kvs_cache_prune_params){0, 86400, 0};
    CHECK_EQ_INT(kvs_cache_dir_prune(dir, &pp, &pr), KVS_OK);
    CHECK_EQ_INT(pr.removed, 2);
    CHECK_EQ_INT(pr.entries, 3);
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.unreachable, 0);
    rm_dir(dir);
    free(dir);
}


/* A bound smaller than one entry: no chunk is written (each had been
 * written, reported stored, and evicted at once with every other entry by
 * its own bound check); the chunks are reported as failed writes, naming
 * the bound, and kept in memory only. */
TEST(bound_below_one_entry_writes_nothing) {
    char *dir = new_dir();
    kvs_store *s = open_store(dir, 4096);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 0);
    CHECK_EQ_INT(r.n_write_errors, 5);
    CHECK_MSG(strstr(r.write_error, "4096") && strstr(r.write_error, "bound"), "%s", r.write_error);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_writes, 0);
    CHECK_EQ_INT(st.disk_write_errors, 5); /* chunk 0's, and the rest, unreachable without it, not written */
    CHECK_EQ_INT(serve_into(s, N), N); /* memory still serves them in this process */
    kvs_store_free(s);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 0);
    CHECK_EQ_INT(count_files(dir, ".tmp"), 0);
    rm_dir(dir);
    free(dir);
}

/* A bound that holds one entry but not its low-water mark (90%): a chain's
 * head just written is not evicted by its own write's bound check (it had
 * been: the check evicted down to 90% of the bound, the new entry last),
 * so a put that reports chunks stored leaves them on disk; the next chunk
 * does not fit beside its head and is not kept, reported as a failed write
 * naming the bound, and the chunks after it are not written. */
TEST(bound_keeps_the_entry_just_written) {
    char *dir = populated_dir();
    kvs_disk_usage u;
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    char path[512];
    entry_path(dir, 0, path, sizeof path);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    const uint64_t entry = (uint64_t)sb.st_size; /* a full 64-token entry */
    rm_dir(dir);
    free(dir);
    dir = new_dir();
    kvs_store *s = open_store(dir, entry + entry / 20);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    /* 4 full chunks, written first to last: the second crosses the bound */
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, 256, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 1);
    CHECK_EQ_INT(r.n_write_errors, 3);
    CHECK_MSG(strstr(r.write_error, "earlier entries") && strstr(r.write_error, "not kept"), "%s", r.write_error);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 1); /* chunk 0 */
    entry_path(dir, 0, path, sizeof path);
    CHECK_EQ_INT(access(path, F_OK), 0);
    kvs_store_free(s);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 1);
    rm_dir(dir);
    free(dir);
}

/* Names of entries on things that are not regular files, FIFO, directory,
 * symlink (to a valid entry, and dangling): each is counted once, as
 * unreadable (they had counted as unreadable and also as "other files"; the
 * symlink to a valid entry as valid and other), and never removed. */
TEST(non_regular_entry_names_counted_once) {
    char *dir = populated_dir();
    char p1[512], p2[512], p3[512], dangling[600], moved[600];
    entry_path(dir, 1, p1, sizeof p1);
    entry_path(dir, 2, p2, sizeof p2);
    entry_path(dir, 3, p3, sizeof p3);
    snprintf(moved, sizeof moved, "%s.moved", dir); /* outside the directory */
    snprintf(dangling, sizeof dangling, "%s/%064d.kvc", dir, 9);
    CHECK_EQ_INT(unlink(p1), 0);
    CHECK_EQ_INT(mkfifo(p1, 0644), 0);
    CHECK_EQ_INT(unlink(p2), 0);
    CHECK_EQ_INT(mkdir(p2, 0755), 0);
    CHECK_EQ_INT(rename(p3, moved), 0);
    CHECK_EQ_INT(symlink(moved, p3), 0);
    CHECK_EQ_INT(symlink("/nonexistent/entry", dangling), 0);
    kvs_cache_dir_stats ds;
    CHECK_EQ_INT(kvs_cache_dir_scan(dir, NULL, NULL, &ds), KVS_OK);
    CHECK_EQ_INT(ds.entries, 2); /* chunks 0 and 4 */
    CHECK_EQ_INT(ds.unreadable, 4);
    CHECK_EQ_INT(ds.other_files, 0);
    CHECK_EQ_INT(ds.damaged, 0);
    kvs_disk_usage u;
    CHECK_EQ_INT(kvs_disk_usage_get(dir, &u), KVS_OK);
    CHECK_EQ_INT(u.entries, 2);
    CHECK_EQ_INT(u.other, 0);
    kvs_store *s = open_store(dir, 0);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_NOT_REGULAR], 4);
    kvs_store_free(s);
    uint64_t removed = 0;
    CHECK_EQ_INT(kvs_cache_dir_clear(dir, &removed), KVS_OK);
    CHECK_EQ_INT(removed, 2);
    struct stat sb;
    CHECK(lstat(p1, &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK(lstat(p2, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(lstat(p3, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(lstat(dangling, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK_EQ_INT(access(moved, F_OK), 0); /* a symlink's target is never touched */
    unlink(p3);
    unlink(dangling);
    rmdir(p2);
    unlink(moved);
    rm_dir(dir);
    free(dir);
}

int main(void) {
    for (int i = 0; i < N; i++) toks[i] = (int32_t)(fake_mix((uint64_t)i + 7) % 49152);
    for (int i = 0; i < 32; i++) FP.b[i] = (uint8_t)(5 * i + 1);
    cold = fake_kv_new(SHAPE, N);
    warm = fake_kv_new(SHAPE, N);
    RUN(dir_tier_serves_by_key_without_scan);
    RUN(chunks_larger_than_the_ram_budget_go_to_the_tiers);
    RUN(records_without_kv_are_bounded_least_recently_used_first);
    RUN(records_bound_keeps_the_head_of_a_chain_a_tier_served);
    RUN(records_evicted_and_loaded_back_keep_both_bounds);
    RUN(records_bound_at_open_keeps_no_orphans);
    RUN(chunk_by_key_and_path_from_an_unscanned_tier);
    RUN(dummy_tier_plugs_in_by_its_ops_row);
    RUN(a_tier_that_cannot_answer_keeps_the_chain);
    RUN(chunks_a_tier_made_resident_leave_when_released);
    RUN(a_failing_tier_stops_only_itself);
    RUN(damage_on_every_chunk_heals_in_one_request);
    RUN(failed_write_is_counted_not_stored);
    RUN(failed_write_reason_survives_a_long_path);
    RUN(unlistable_dir_opens_degraded);
    RUN(fifo_in_place_never_hangs);
    RUN(clear_and_prune_touch_only_own_files);
    RUN(bound_ignores_files_not_its_own);
    RUN(bound_evicts_least_recently_used);
    RUN(bound_reclaims_stale_junk_first);
    RUN(junk_removal_spares_an_entry_renamed_into_place);
    RUN(capital_hex_names_are_not_the_caches);
    RUN(unlistable_only_by_refusal);
    RUN(unreachable_and_old_entries_pruned);
    RUN(bound_below_one_entry_writes_nothing);
    RUN(bound_keeps_the_entry_just_written);
    RUN(non_regular_entry_names_counted_once);
    fake_kv_free(cold);
    fake_kv_free(warm);
    return kt_summary();
}
