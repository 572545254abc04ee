/* The chunk store in memory: exact prefix reuse at any shared length (against
 * a fake engine whose KV is a pure function of the token prefix), dedup, LRU
 * eviction with pins, chains, descendants of evicted chunks, stats, and
 * concurrent readers with a writer. */
#include "harness.h"

#include "kv/store.h"
#include "test_kv_fake.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static const kvs_kv_shape SHAPE = {2, 2, 16, KVS_KV_F16};

static kvs_key fingerprint(int which) {
    kvs_key k;
    for (int i = 0; i < 32; i++) k.b[i] = (uint8_t)(i + 17 * which);
    return k;
}

static kvs_store *open_mem(size_t budget) {
    kvs_key fp = fingerprint(1);
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = budget;
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&fp, &SHAPE, p, &s), KVS_OK);
    return s;
}

static void make_tokens(int32_t *t, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(fake_mix(seed * 1000003u + (uint64_t)i) % 49152);
}

/* Stores tokens[0..n) through the fake engine. */
static kvs_put_report put(kvs_store *s, const int32_t *t, int n, fake_kv *scratch) {
    fake_kv_fill(scratch, t, n);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, t, n, 64, NULL, 0, &scratch->kv, &r), KVS_OK);
    return r;
}

/* Looks up tokens[0..n), copies the hit into a zeroed buffer and checks it
 * against the cold KV. Returns n_cached (or -1 on a mismatch). */
static int reuse(kvs_store *s, const int32_t *t, int n, fake_kv *cold, fake_kv *warm) {
    kvs_prefix_hit hit;
    if (kvs_store_lookup_prefix(s, t, n, &hit) != KVS_OK) return -1;
    fake_kv_fill(cold, t, n);
    fake_kv_zero(warm);
    int ok = kvs_prefix_hit_copy_to_kv(&hit, &warm->kv) == KVS_OK && fake_kv_equal(cold, warm, 0, hit.n_cached) &&
             fake_kv_is_zero(warm, hit.n_cached, n);
    int at = 0;
    for (int i = 0; i < hit.n_segs; i++) { /* segments tile [0, n_cached) */
        ok &= hit.segs[i].from == at && hit.segs[i].to > at;
        at = hit.segs[i].to;
    }
    ok &= at == hit.n_cached;
    int r = ok ? hit.n_cached : -1;
    kvs_prefix_hit_release(&hit);
    return r;
}

/* The bit-exactness grid of issue 4, on the store alone: a prompt B that
 * shares L tokens with a cached prompt A reuses exactly L tokens, whatever L
 * (on or off the 64-token grid), and the copied KV equals B's cold KV. */
TEST(reuse_at_every_shared_length) {
    enum { NA = 600, NB = 700 };
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 1024), *cold = fake_kv_new(SHAPE, 1024), *warm = fake_kv_new(SHAPE, 1024);
    static int32_t a[NA], b[NB];
    make_tokens(a, NA, 1);
    kvs_put_report r = put(s, a, NA, f);
    CHECK_EQ_INT(r.n_chunks, 10);
    CHECK_EQ_INT(r.n_new, 10);
    CHECK_EQ_INT(r.partial_tail, 600 - 576);
    int grid[] = {1, 2, 63, 64, 65, 127, 128, 129, 200, 511, 512, 513, 576, 577, 599, 600};
    for (size_t g = 0; g < sizeof grid / sizeof grid[0]; g++) {
        int L = grid[g];
        memcpy(b, a, (size_t)L * sizeof *b);
        make_tokens(b + L, NB - L, 1000 + (uint64_t)L);
        if (L < NA && b[L] == a[L]) b[L] ^= 1;
        int got = reuse(s, b, NB, cold, warm);
        CHECK_MSG(got == L, "shared %d: reused %d", L, got);
        /* the one-call form gives the same bytes */
        fake_kv_zero(warm);
        kvs_prefix_hit hit;
        CHECK_EQ_INT(kvs_store_lookup_into(s, b, NB, &warm->kv, &hit), KVS_OK);
        CHECK(hit.n_cached == L && fake_kv_equal(cold, warm, 0, L) && fake_kv_is_zero(warm, L, NB));
        kvs_prefix_hit_release(&hit);
        /* asking for exactly the shared part */
        got = reuse(s, b, L, cold, warm);
        CHECK_MSG(got == L, "prompt of %d: reused %d", L, got);
    }
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.lookups, 48);
    CHECK_EQ_INT(st.hits, 48);
    CHECK_EQ_INT(st.misses, 0);
    CHECK(st.lookups_per_s > 0);
    kvs_store_free(s);
    fake_kv_free(f);
    fake_kv_free(cold);
    fake_kv_free(warm);
}

TEST(partial_tail_then_extension) {
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 512), *cold = fake_kv_new(SHAPE, 512), *warm = fake_kv_new(SHAPE, 512);
    static int32_t t[300];
    make_tokens(t, 300, 7);
    kvs_put_report r = put(s, t, 100, f);
    CHECK(r.n_chunks == 2 && r.n_new == 2 && r.partial_tail == 36);
    /* the whole first prompt serves a longer one, up to its last token */
    CHECK_EQ_INT(reuse(s, t, 150, cold, warm), 100);
    /* storing the longer one adds [64,128) and the new tail [128,150) */
    r = put(s, t, 150, f);
    CHECK(r.n_chunks == 3 && r.n_new == 2 && r.n_existing == 1 && r.partial_tail == 22);
    CHECK_EQ_INT(reuse(s, t, 300, cold, warm), 150);
    /* the same again: nothing new */
    r = put(s, t, 150, f);
    CHECK(r.n_new == 0 && r.n_existing == 3);
    /* a miss */
    static int32_t other[50];
    make_tokens(other, 50, 99);
    CHECK_EQ_INT(reuse(s, other, 50, cold, warm), 0);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 4);
    CHECK_EQ_INT(st.misses, 1);
    CHECK_EQ_INT(st.hit_tokens, 100 + 150);
    CHECK_EQ_INT(st.lookup_tokens, 150 + 300 + 50);
    kvs_store_free(s);
    fake_kv_free(f);
    fake_kv_free(cold);
    fake_kv_free(warm);
}

TEST(segment_borders) {
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 512);
    static int32_t t[200];
    make_tokens(t, 200, 3);
    fake_kv_fill(f, t, 200);
    int borders[] = {30, 150};
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, t, 200, 64, borders, 2, &f->kv, &r), KVS_OK);
    /* [0,30) [30,64) [64,128) [128,150) [150,192) [192,200) */
    CHECK_EQ_INT(r.n_chunks, 6);
    CHECK_EQ_INT(r.partial_tail, 8);
    kvs_store_free(s);
    fake_kv_free(f);
}

TEST(insert_checks) {
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 256);
    static int32_t t[128];
    make_tokens(t, 128, 5);
    fake_kv_fill(f, t, 128);
    kvs_key fp = fingerprint(1), wrong = fingerprint(2);
    kvs_chunk *c0 = fake_chunk(f, &fp, &fp, t, 0, 64);
    kvs_chunk *bad = fake_chunk(f, &fp, &wrong, t, 0, 64); /* position 0 not rooted in the fingerprint */
    CHECK_EQ_INT(kvs_store_insert(s, bad, t), KVS_ERR_INVALID_ARG);
    static int32_t t2[128];
    memcpy(t2, t, sizeof t2);
    t2[5] ^= 1;
    CHECK_EQ_INT(kvs_store_insert(s, c0, t2), KVS_ERR_INVALID_ARG); /* path disagrees */
    CHECK_EQ_INT(kvs_store_insert(s, c0, t), KVS_OK);
    CHECK_EQ_INT(kvs_store_insert(s, c0, t), KVS_ERR_INVALID_ARG); /* already in a store */
    kvs_chunk *dup = fake_chunk(f, &fp, &fp, t, 0, 64);
    CHECK_EQ_INT(kvs_store_insert(s, dup, t), KVS_STORE_EXISTS);
    CHECK(kvs_store_contains(s, &c0->prefix_key));
    CHECK(!kvs_store_contains(s, &bad->prefix_key));
    kvs_kv_shape other = SHAPE;
    other.n_layer = 3;
    kvs_chunk *wrong_shape;
    CHECK_EQ_INT(kvs_chunk_new(&other, 4, 1, &wrong_shape), KVS_OK);
    CHECK_EQ_INT(kvs_store_insert(s, wrong_shape, NULL), KVS_ERR_INVALID_ARG);
    kvs_chunk_unref(wrong_shape);
    kvs_chunk_unref(bad);
    kvs_chunk_unref(dup);
    kvs_chunk_unref(c0);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 1);
    CHECK_EQ_INT(st.insert_exists, 1);
    kvs_store_free(s);
    fake_kv_free(f);
}

static size_t chunk_cost(int n_tok) {
    return sizeof(kvs_chunk) + (size_t)n_tok * sizeof(int32_t) + kvs_kv_payload_bytes(&SHAPE, n_tok);
}

/* Six one-chunk prompts in a budget of four: the least recently used go
 * first, a pinned chunk is never evicted, a touched one moves to the front. */
TEST(lru_eviction_and_pins) {
    kvs_store *s = open_mem(4 * chunk_cost(64) + 100);
    fake_kv *f = fake_kv_new(SHAPE, 128), *cold = fake_kv_new(SHAPE, 128), *warm = fake_kv_new(SHAPE, 128);
    static int32_t t[8][64];
    for (int i = 0; i < 8; i++) make_tokens(t[i], 64, 50 + (uint64_t)i);
    for (int i = 0; i < 4; i++) put(s, t[i], 64, f);
    /* touch 0, pin 1 */
    CHECK_EQ_INT(reuse(s, t[0], 64, cold, warm), 64);
    kvs_key fp = fingerprint(1), k1;
    kvs_key_prefix(&fp, t[1], 64, &k1);
    kvs_chunk *pinned = NULL;
    CHECK_EQ_INT(kvs_store_get(s, &k1, &pinned), KVS_OK);
    /* two more: the LRU order is 3 2 1 0 -> 0 3 2 1; 1 is pinned, so 2 and 3 go */
    put(s, t[4], 64, f);
    put(s, t[5], 64, f);
    CHECK_EQ_INT(reuse(s, t[0], 64, cold, warm), 64);
    CHECK_EQ_INT(reuse(s, t[1], 64, cold, warm), 64);
    CHECK_EQ_INT(reuse(s, t[2], 64, cold, warm), 0);
    CHECK_EQ_INT(reuse(s, t[3], 64, cold, warm), 0);
    CHECK_EQ_INT(reuse(s, t[4], 64, cold, warm), 64);
    CHECK_EQ_INT(reuse(s, t[5], 64, cold, warm), 64);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.evictions, 2);
    CHECK_EQ_INT(st.entries, 4);
    CHECK(st.bytes <= st.budget_bytes);
    /* a pinned chunk survives even a trim to zero; unpinned it goes */
    CHECK_EQ_INT(kvs_store_trim(s, 0), 3);
    CHECK_EQ_INT(reuse(s, t[1], 64, cold, warm), 64);
    kvs_chunk_unref(pinned);
    CHECK_EQ_INT(kvs_store_trim(s, 0), 1);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.bytes, 0);
    /* a chunk bigger than the whole budget is refused, not stored */
    kvs_store *tiny = open_mem(chunk_cost(64) / 2);
    kvs_put_report r = put(tiny, t[6], 64, f);
    CHECK(r.n_new == 0 && r.n_skipped == 1);
    kvs_store_get_stats(tiny, &st);
    CHECK_EQ_INT(st.insert_too_big, 1);
    kvs_store_free(tiny);
    kvs_store_free(s);
    fake_kv_free(f);
    fake_kv_free(cold);
    fake_kv_free(warm);
}

/* Pins that hold the store over its budget: lookups do not walk the LRU
 * list again (each had taken the write lock and walked every chunk to find
 * none unpinned) until a pin is dropped, and then the next one evicts. */
TEST(pinned_over_budget_walks_once) {
    kvs_store *s = open_mem(2 * chunk_cost(64) + 100);
    fake_kv *f = fake_kv_new(SHAPE, 128);
    static int32_t t[3][64];
    kvs_key fp = fingerprint(1), k[3];
    kvs_chunk *pin[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) { /* the third insert finds the other two pinned: over budget */
        make_tokens(t[i], 64, 900 + (uint64_t)i);
        put(s, t[i], 64, f);
        kvs_key_prefix(&fp, t[i], 64, &k[i]);
        CHECK_EQ_INT(kvs_store_get(s, &k[i], &pin[i]), KVS_OK);
    }
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 3);
    CHECK(st.bytes > st.budget_bytes);
    const uint64_t walks = st.evict_walks;
    CHECK(walks >= 1); /* the pinning lookup of chunk 2 walked and found none */
    for (int r = 0; r < 50; r++) { /* pins on pinned chunks: nothing becomes evictable */
        kvs_chunk *c = NULL;
        CHECK_EQ_INT(kvs_store_get(s, &k[r % 3], &c), KVS_OK);
        kvs_chunk_unref(c);
    }
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.evict_walks, walks);
    CHECK_EQ_INT(st.entries, 3);
    /* chunk 1's last pin goes: the next lookup walks and evicts it */
    kvs_chunk_unref(pin[1]);
    kvs_chunk *c = NULL;
    CHECK_EQ_INT(kvs_store_get(s, &k[0], &c), KVS_OK);
    kvs_chunk_unref(c);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.evict_walks, walks + 1);
    CHECK_EQ_INT(st.evictions, 1);
    CHECK_EQ_INT(st.entries, 2);
    CHECK(st.bytes <= st.budget_bytes);
    CHECK(!kvs_store_contains(s, &k[1]));
    kvs_chunk_unref(pin[0]);
    kvs_chunk_unref(pin[2]);
    kvs_store_free(s);
    fake_kv_free(f);
}

/* Within a chain the tail is evicted first, so a prefix is never cut in the
 * middle by the budget; the same after a lookup touched the chain. */
TEST(chain_evicts_tail_first) {
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 512), *cold = fake_kv_new(SHAPE, 512), *warm = fake_kv_new(SHAPE, 512);
    static int32_t t[256];
    make_tokens(t, 256, 11);
    put(s, t, 256, f);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    size_t per = chunk_cost(64);
    CHECK_EQ_INT(st.bytes, 4 * per);
    CHECK_EQ_INT(kvs_store_trim(s, 3 * per), 1);
    CHECK_EQ_INT(reuse(s, t, 256, cold, warm), 192);
    CHECK_EQ_INT(kvs_store_trim(s, 2 * per), 1);
    CHECK_EQ_INT(reuse(s, t, 256, cold, warm), 128);
    CHECK_EQ_INT(kvs_store_trim(s, 1 * per), 1);
    CHECK_EQ_INT(reuse(s, t, 256, cold, warm), 64);
    kvs_store_free(s);
    fake_kv_free(f);
    fake_kv_free(cold);
    fake_kv_free(warm);
}

/* Evicting a chunk keeps its descendants: unreachable by prefix, found by
 * content key, and reachable again as soon as the chunk is stored again. */
TEST(descendants_of_evicted_chunk) {
    kvs_store *s = open_mem(64u << 20);
    fake_kv *f = fake_kv_new(SHAPE, 512), *cold = fake_kv_new(SHAPE, 512), *warm = fake_kv_new(SHAPE, 512);
    static int32_t t[192];
    make_tokens(t, 192, 13);
    put(s, t, 192, f);
    kvs_key fp = fingerprint(1), k0, c2;
    kvs_key_prefix(&fp, t, 64, &k0);
    kvs_key_content(&fp, t + 128, 64, &c2);
    CHECK_EQ_INT(kvs_store_remove(s, &k0, 0), KVS_OK);
    CHECK_EQ_INT(kvs_store_remove(s, &k0, 0), KVS_ERR_NOT_FOUND);
    CHECK_EQ_INT(reuse(s, t, 192, cold, warm), 0);
    kvs_chunk *c = NULL;
    CHECK_EQ_INT(kvs_store_lookup_content(s, &c2, &c), KVS_OK);
    CHECK(c && c->pos0 == 128 && c->n_tok == 64);
    /* its KV is the cold KV of tokens [128, 192) */
    fake_kv_fill(cold, t, 192);
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_chunk_copy_to_kv(c, 0, 64, &warm->kv, 128), KVS_OK);
    CHECK(fake_kv_equal(cold, warm, 128, 192));
    kvs_chunk_unref(c);
    kvs_put_report r = put(s, t, 192, f);
    CHECK(r.n_new == 1 && r.n_existing == 2);
    CHECK_EQ_INT(reuse(s, t, 192, cold, warm), 192);
    kvs_key none = fingerprint(9);
    CHECK_EQ_INT(kvs_store_lookup_content(s, &none, &c), KVS_ERR_NOT_FOUND);
    CHECK_EQ_INT(kvs_store_clear(s, 0), KVS_OK);
    CHECK_EQ_INT(reuse(s, t, 192, cold, warm), 0);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK(st.entries == 0 && st.bytes == 0 && st.prefix_reachable == 0);
    kvs_store_free(s);
    fake_kv_free(f);
    fake_kv_free(cold);
    fake_kv_free(warm);
}

/* ---- threads ---------------------------------------------------------------- */

enum { NPROMPT = 8, PLEN = 300, NREADERS = 3 };
static int32_t prompts[NPROMPT][PLEN];
static fake_kv *colds[NPROMPT];
static kvs_store *shared;
static atomic_int stop_flag;
static atomic_int mismatches, served, lookups_done;

static void *reader(void *arg) {
    uint64_t rng = (uint64_t)(intptr_t)arg;
    fake_kv *warm = fake_kv_new(SHAPE, PLEN);
    while (!atomic_load(&stop_flag)) {
        rng = fake_mix(rng);
        int p = (int)(rng % NPROMPT), n = 1 + (int)((rng >> 8) % PLEN);
        kvs_prefix_hit hit;
        fake_kv_zero(warm);
        int into = (rng >> 20) & 1; /* both lookup forms */
        int rc = into ? kvs_store_lookup_into(shared, prompts[p], n, &warm->kv, &hit)
                      : kvs_store_lookup_prefix(shared, prompts[p], n, &hit);
        if (rc != KVS_OK) {
            atomic_fetch_add(&mismatches, 1);
            continue;
        }
        if ((!into && kvs_prefix_hit_copy_to_kv(&hit, &warm->kv) != KVS_OK) ||
            !fake_kv_equal(colds[p], warm, 0, hit.n_cached))
            atomic_fetch_add(&mismatches, 1);
        if (hit.n_cached) atomic_fetch_add(&served, 1);
        atomic_fetch_add(&lookups_done, 1);
        kvs_prefix_hit_release(&hit);
    }
    fake_kv_free(warm);
    return NULL;
}

static void concurrent(const char *dir) {
    /* prompts share prefixes of 0, 100 or 200 tokens */
    make_tokens(prompts[0], PLEN, 77);
    for (int p = 1; p < NPROMPT; p++) {
        int shared_len = 100 * (p % 3);
        memcpy(prompts[p], prompts[0], (size_t)shared_len * sizeof(int32_t));
        make_tokens(prompts[p] + shared_len, PLEN - shared_len, 200 + (uint64_t)p);
    }
    for (int p = 0; p < NPROMPT; p++) {
        colds[p] = fake_kv_new(SHAPE, PLEN);
        fake_kv_fill(colds[p], prompts[p], PLEN);
    }
    /* room for about half of the chunks: constant eviction (with a cache
     * dir: payloads dropped and loaded again) */
    kvs_store_params sp = kvs_store_default_params();
    sp.budget_bytes = NPROMPT * 5 * chunk_cost(64) / 2;
    sp.cache_dir = dir;
    kvs_key fp = fingerprint(1);
    CHECK_EQ_INT(kvs_store_open(&fp, &SHAPE, sp, &shared), KVS_OK);
    atomic_store(&mismatches, 0);
    atomic_store(&served, 0);
    atomic_store(&lookups_done, 0);
    atomic_store(&stop_flag, 0);
    pthread_t th[NREADERS];
    for (int i = 0; i < NREADERS; i++) pthread_create(&th[i], NULL, reader, (void *)(intptr_t)(i + 1));
    uint64_t rng = 5;
    int errors = 0;
    /* at least 400 writes, and on until the readers did 3000 lookups of
     * which 500 were served (bounded, in case of a bug) */
    int it = 0;
    for (; it < 400 || ((atomic_load(&lookups_done) < 3000 || atomic_load(&served) < 500) && it < 2000000); it++) {
        rng = fake_mix(rng);
        int p = (int)(rng % NPROMPT);
        int n = 1 + (int)((rng >> 8) % PLEN);
        if (kvs_store_put_prefix(shared, prompts[p], n, 64, NULL, 0, &colds[p]->kv, NULL) != KVS_OK) errors++;
        if (it % 200 == 199) kvs_store_trim(shared, 0);
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < NREADERS; i++) pthread_join(th[i], NULL);
    CHECK_EQ_INT(errors, 0);
    CHECK_EQ_INT(atomic_load(&mismatches), 0);
    kvs_store_stats st;
    kvs_store_get_stats(shared, &st);
    CHECK(st.evictions > 0);
    CHECK(st.lookups > 0);
    /* pins can hold the store above budget until the next insert or load;
     * with none left a trim to the budget meets it */
    kvs_store_trim(shared, st.budget_bytes);
    kvs_store_get_stats(shared, &st);
    CHECK(st.bytes <= st.budget_bytes);
    CHECK(atomic_load(&served) >= 500);
    CHECK(atomic_load(&lookups_done) >= 3000);
    if (dir) CHECK(st.disk_loads > 0 && st.disk_bad == 0);
    kvs_store_free(shared);
    for (int p = 0; p < NPROMPT; p++) fake_kv_free(colds[p]);
}

TEST(concurrent_readers_and_writer) { concurrent(NULL); }

TEST(concurrent_readers_and_writer_disk) {
    char dir[] = "/tmp/kvs_test_store_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    concurrent(dir);
    kvs_store_params p = kvs_store_default_params();
    p.cache_dir = dir;
    kvs_key fp = fingerprint(1);
    kvs_store *s;
    CHECK_EQ_INT(kvs_store_open(&fp, &SHAPE, p, &s), KVS_OK);
    kvs_store_clear(s, 1);
    kvs_store_free(s);
    CHECK_EQ_INT(rmdir(dir), 0);
}

int main(void) {
    RUN(reuse_at_every_shared_length);
    RUN(partial_tail_then_extension);
    RUN(segment_borders);
    RUN(insert_checks);
    RUN(lru_eviction_and_pins);
    RUN(pinned_over_budget_walks_once);
    RUN(chain_evicts_tail_first);
    RUN(descendants_of_evicted_chunk);
    RUN(concurrent_readers_and_writer);
    RUN(concurrent_readers_and_writer_disk);
    return kt_summary();
}
