/* The Redis tier under the chunk store (kvs_store_attach_tier), with the
 * fake KV of test_kv_fake.h (no model): a fresh store (a new process's view:
 * empty RAM) serves a prompt's prefix from Redis with the cold bytes; a
 * chunk missing in Redis ends the reuse exactly before it; a chunk that
 * disappears from Redis after it was indexed (lookup, then eviction from RAM,
 * then DEL) ends the reuse there too, and the rest is a miss, never wrong
 * bytes; another model's store never sees the chunks. A prompt's partial
 * tail chunk (shorter than the grid step) is served to a later prompt that
 * extends it, as RAM and the cache directory serve it; a prompt that stops
 * or diverges inside a stored chunk gets the part it shares, through the
 * tier's partial-chunk markers (redis_marker.h), and a hostile marker never
 * leads to another chunk's bytes; junk under its every length costs two
 * reads. */
#include "harness.h"
#include "test_kv_fake.h"
#include "test_redis_util.h"

#include "cache/fingerprint.h"
#include "kv/chunking.h"
#include "kv/entry_mac.h"
#include "test_forge.h"
#include "kv/keys.h"
#include "kv/redis_marker.h"
#include "kv/store.h"
#include "kv/tier_redis.h"

static const kvs_kv_shape SHAPE = {3, 2, 16, KVS_KV_F16};
#define N_TOK 640 /* 10 chunks of 64 */

/* A store over Redis at port whose lookups ask the tiers on a grid of
 * `grid` tokens (0: 64). */
static kvs_store *open_store_keyed(const kvs_key *fp, int port, int grid, const kvs_entry_mac *mac) {
    kvs_store *s = NULL;
    kvs_store_params sp = kvs_store_default_params();
    sp.chunk_tokens = grid;
    CHECK_EQ_INT(kvs_store_open(fp, &SHAPE, sp, &s), KVS_OK);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    kvs_redis_tier_params p;
    kvs_redis_tier_default_params(&p);
    p.url = url;
    p.timeout_ms = 2000; /* hits, not outages, are tested here */
    p.mac = mac;
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_redis_tier_open(&p, fp, &SHAPE, &t), KVS_OK);
    CHECK_EQ_INT(kvs_store_attach_tier(s, t), KVS_OK);
    return s;
}

static kvs_store *open_store_grid(const kvs_key *fp, int port, int grid) {
    return open_store_keyed(fp, port, grid, NULL);
}

static kvs_store *open_store(const kvs_key *fp, int port) { return open_store_grid(fp, port, 0); }

/* The tier's key of chunk k (tier_redis.h: kvs:<fp16>:<prefix key hex>). */
static void redis_key(const kvs_key *fp, const kvs_key *k, char *buf) {
    char f[65], h[65];
    kvs_key_to_hex(fp, f);
    kvs_key_to_hex(k, h);
    snprintf(buf, 96, "kvs:%.16s:%s", f, h);
}

/* Redis's integer answer to "CMD key" for the key of span `span` of the
 * first n tokens cut on the 64-token grid (DEL, EXISTS); -1 on another
 * answer. */
/* The tier's key of span `span` of the first n tokens on the 64-token grid
 * into key (and its prefix key into *pk if not NULL); 0, or -1 past the
 * last span. */
static int span_key(const kvs_key *fp, const int32_t *tokens, int n, int span, char *key, kvs_key *pk) {
    kvs_key keys[16];
    kvs_span spans[16];
    int n_spans = 0;
    CHECK_EQ_INT(kvs_chunking_split(n, 0, 64, NULL, 0, spans, 16, &n_spans), KVS_OK);
    CHECK_EQ_INT(kvs_key_prefix_chain(fp, tokens, spans, n_spans, keys), KVS_OK);
    if (span >= n_spans) return -1;
    redis_key(fp, &keys[span], key);
    if (pk) *pk = keys[span];
    return 0;
}

static long long span_key_cmd(int port, const char *cmd, const kvs_key *fp, const int32_t *tokens, int n, int span) {
    char key[96];
    if (span_key(fp, tokens, n, span, key, NULL)) return -1;
    redisReply *x = rt_cmd(port, "%s %s", cmd, key);
    long long v = x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    if (x) freeReplyObject(x);
    return v;
}

/* N_TOK pseudo-random token ids from seed. */
static void random_tokens(int32_t *tokens, uint64_t seed) {
    for (int i = 0; i < N_TOK; i++) tokens[i] = (int32_t)(rt_rand(&seed) % 30000);
}

/* n_cached of a lookup of the first n of tokens into a zeroed buffer, every
 * served slot checked against cold (the cold KV of tokens). */
static int served_n(kvs_store *s, const int32_t *tokens, int n, const fake_kv *cold) {
    fake_kv *w = fake_kv_new(SHAPE, N_TOK);
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_into(s, tokens, n, &w->kv, &hit), KVS_OK);
    int got = hit.n_cached;
    CHECK_MSG(got == 0 || fake_kv_equal(w, cold, 0, got), "served KV differs from cold in [0, %d)", got);
    kvs_prefix_hit_release(&hit);
    fake_kv_free(w);
    return got;
}

/* n_cached of a lookup of tokens[0, N_TOK - 1) (served_n). */
static int served(kvs_store *s, const int32_t *tokens, const fake_kv *cold) {
    return served_n(s, tokens, N_TOK - 1, cold);
}

TEST(fresh_store_serves_from_redis_and_stops_at_a_missing_chunk) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp, other;
    rt_fill_key(&fp, 1);
    rt_fill_key(&other, 2);
    int32_t tokens[N_TOK];
    uint64_t seed = 11;
    for (int i = 0; i < N_TOK; i++) tokens[i] = (int32_t)(rt_rand(&seed) % 30000);
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, tokens, N_TOK);

    /* process A: computes and stores (through to Redis) */
    kvs_store *a = open_store(&fp, r.port);
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(a, tokens, N_TOK, 64, NULL, 0, &cold->kv, &rep), KVS_OK);
    CHECK_EQ_INT(rep.n_new, 10);
    kvs_store_free(a); /* waits for the queued writes */

    /* process B: empty RAM, everything from Redis that its keys name: the
     * lookup of N_TOK - 1 tokens cuts its last span at 639, whose key is
     * the marker of the stored [576, 640)'s first 63 tokens (it had been
     * no key at all: 9 whole chunks were served) */
    kvs_store *b = open_store(&fp, r.port);
    CHECK_EQ_INT(served(b, tokens, cold), N_TOK - 1);
    /* another model: nothing */
    kvs_store *o = open_store(&other, r.port);
    CHECK_EQ_INT(served(o, tokens, cold), 0);
    kvs_store_free(o);

    /* chunk 5 missing in Redis: a fresh store stops exactly before it */
    CHECK(span_key_cmd(r.port, "DEL", &fp, tokens, N_TOK, 5) == 1);
    kvs_store *c = open_store(&fp, r.port);
    CHECK_EQ_INT(served(c, tokens, cold), 5 * 64);
    kvs_store_free(c);

    /* B indexed all ten from Redis; chunk 3 now disappears from Redis and
     * B's RAM drops the payloads: B's next lookup ends before chunk 3 */
    CHECK(span_key_cmd(r.port, "DEL", &fp, tokens, N_TOK, 3) == 1);
    kvs_store_trim(b, 0);
    int n = served(b, tokens, cold);
    CHECK_MSG(n == 3 * 64, "after a DEL: %d tokens served, want %d", n, 3 * 64);
    kvs_store_free(b);
    fake_kv_free(cold);
    rt_redis_stop(&r);
}

/* Prompt A (300 tokens: 4 grid chunks and a 44-token tail [256, 300)) is
 * stored through Redis; a fresh store (empty RAM, Redis only) then looks up
 * prompts that start with A. The tail had been written but never read: a
 * lookup asks for the grid chunks of the new prompt, and [256, 320) or
 * [256, 399) is not A's [256, 300), so every longer prompt got 256 tokens
 * where a store holding A in RAM or in its directory gives 300. */
TEST(partial_tail_served_to_a_prompt_that_extends_it) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp;
    rt_fill_key(&fp, 3);
    enum { A = 300 };
    int32_t tokens[N_TOK], other[N_TOK];
    random_tokens(tokens, 12);
    memcpy(other, tokens, sizeof other);
    other[280] = (tokens[280] + 1) % 30000; /* diverges inside A's tail */
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK), *cold_other = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, tokens, N_TOK);
    fake_kv_fill(cold_other, other, N_TOK);

    kvs_store *a = open_store(&fp, r.port);
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(a, tokens, A, 64, NULL, 0, &cold->kv, &rep), KVS_OK);
    CHECK_EQ_INT(rep.n_new, 5);
    CHECK_EQ_INT(rep.partial_tail, A - 256);
    /* the reference: A's own store (its RAM index) serves the whole tail */
    CHECK_EQ_INT(served_n(a, tokens, 399, cold), A);
    kvs_store_free(a); /* waits for the queued writes */

    CHECK_MSG(span_key_cmd(r.port, "EXISTS", &fp, tokens, A, 4) == 1, "A's tail [256, 300) is not in Redis");

    /* fresh stores, one lookup each (a hit is indexed in RAM: the next
     * lookup would find it there) */
    const int lens[] = {399, 319, 301, 320, 600};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        kvs_store *b = open_store(&fp, r.port);
        int n = served_n(b, tokens, lens[i], cold);
        CHECK_MSG(n == A, "a prompt of %d tokens that extends A: %d served from Redis, want %d", lens[i], n, A);
        kvs_store_free(b);
    }
    /* exactly A's tokens: its tail by its own key, as before */
    kvs_store *b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, tokens, A, cold), A);
    kvs_store_free(b);
    /* shorter than A (A again: its last token is computed): the tail's
     * marker of 43 tokens (a key needs all of its tokens: 256 before) */
    b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, tokens, A - 1, cold), A - 1);
    kvs_store_free(b);
    /* a prompt that diverges at 280, inside the tail: the tail's first 24
     * tokens, by their marker (256 before), never a byte past them */
    b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, other, 399, cold_other), 280);
    kvs_store_free(b);
    /* one that diverges at 100, inside grid chunk 1: its first 36 tokens */
    int32_t early[N_TOK];
    memcpy(early, tokens, sizeof early);
    early[100] = (tokens[100] + 1) % 30000;
    fake_kv *cold_early = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold_early, early, N_TOK);
    b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, early, 399, cold_early), 100);
    kvs_store_free(b);
    fake_kv_free(cold_early);
    fake_kv_free(cold);
    fake_kv_free(cold_other);
    rt_redis_stop(&r);
}

/* GETRANGE calls Redis has answered since its stats were reset. */
static long long getrange_calls(int port) {
    redisReply *x = rt_cmd(port, "INFO commandstats");
    const char *p = x && x->type == REDIS_REPLY_STRING ? strstr(x->str, "cmdstat_getrange:calls=") : NULL;
    long long n = p ? atoll(p + strlen("cmdstat_getrange:calls=")) : 0;
    if (x) freeReplyObject(x);
    return n;
}

/* Junk under every tail length of a prompt's last chunk (as a hostile or
 * damaged Redis may hold): the lookup reads two of them at most, serves the
 * grid chunks, never the junk. It had read every one (63 reads a 64-token
 * chunk, each with its own allowance: 6.4 s against a server that answered
 * each just in time, minutes at 512-token chunks). */
/* Sets key (the tier's key of prefix key k) to the n bytes of v. */
static void set_raw(int port, const kvs_key *fp, const kvs_key *k, const void *v, size_t n) {
    char key[96];
    redis_key(fp, k, key);
    redisReply *x = rt_cmd(port, "SET %s %b", key, v, n);
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    if (x) freeReplyObject(x);
}

/* Entries and damaged values a listing of the tier finds. */
static int count_entry(void *user, kvs_chunk *c, const kvs_key *fp, uint64_t bytes) {
    (*(int *)user)++;
    kvs_chunk_unref(c);
    return 0;
}

/* A (300 tokens) and B (300 other tokens) stored; then the marker that a
 * lookup of A's first 299 tokens reads first (the key of A's tail's first
 * 43 tokens, asked as the lookup's last span) is replaced by hostile
 * values in turn. None may serve a byte past what it names or another
 * chunk's bytes: each is dropped, and the next marker down (42 tokens)
 * leads to A's tail, which serves on to 299. Markers are no entries of their own: a listing finds A's and
 * B's chunks only, and no damage. */
TEST(hostile_markers_never_lead_to_other_bytes) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp, other_fp;
    rt_fill_key(&fp, 5);
    rt_fill_key(&other_fp, 6);
    enum { A = 300 };
    int32_t a[N_TOK], bt[N_TOK];
    random_tokens(a, 21);
    random_tokens(bt, 22);
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK), *cold_b = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, a, N_TOK);
    fake_kv_fill(cold_b, bt, N_TOK);
    kvs_store *s = open_store(&fp, r.port);
    CHECK_EQ_INT(kvs_store_put_prefix(s, a, A, 64, NULL, 0, &cold->kv, NULL), KVS_OK);
    CHECK_EQ_INT(kvs_store_put_prefix(s, bt, A, 64, NULL, 0, &cold_b->kv, NULL), KVS_OK);
    kvs_store_free(s);

    kvs_redis_tier_params p;
    kvs_redis_tier_default_params(&p);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    p.url = url;
    p.timeout_ms = 2000;
    kvs_tier *t = NULL;
    CHECK_EQ_INT(kvs_redis_tier_open(&p, &fp, &SHAPE, &t), KVS_OK);
    int entries = 0;
    uint64_t bad = 0;
    CHECK_EQ_INT(kvs_redis_tier_scan_fp(t, count_entry, &entries, &bad), KVS_OK);
    CHECK_MSG(entries == 10 && bad == 0, "listing: %d entries, %llu bad; want 10 chunks and no damage", entries,
              (unsigned long long)bad);
    /* a command the listing uses refused (an ACL here; rename-command the
     * same): the server's words, and no value counted damaged (every valid
     * one had been) */
    redisReply *acl = rt_cmd(r.port, "ACL SETUSER default -getrange");
    if (acl) freeReplyObject(acl);
    entries = 0;
    bad = 0;
    int st = kvs_redis_tier_scan_fp(t, count_entry, &entries, &bad);
    CHECK_MSG(st != KVS_OK && strstr(kvs_last_error(), "GETRANGE") && strstr(kvs_last_error(), "NOPERM"),
              "listing with GETRANGE refused: %d, '%s'", st, kvs_last_error());
    CHECK_MSG(bad == 0, "%llu values counted damaged", (unsigned long long)bad);
    acl = rt_cmd(r.port, "ACL SETUSER default +getrange");
    if (acl) freeReplyObject(acl);
    kvs_tier_close(t);
    /* the markers are there: 63 for each grid chunk, 43 for each tail */
    redisReply *x = rt_cmd(r.port, "DBSIZE");
    CHECK_MSG(x && x->type == REDIS_REPLY_INTEGER && x->integer == 10 + 2 * (4 * 63 + 43),
              "%lld keys in Redis, want 10 chunks and %d markers", x && x->type == REDIS_REPLY_INTEGER ? x->integer : -1,
              2 * (4 * 63 + 43));
    if (x) freeReplyObject(x);

    /* the chain keys of A and B (grid at 64) */
    kvs_key ca[8], cb[8], k43[1], k42[1];
    kvs_span spans[8];
    int n_spans = 0;
    CHECK_EQ_INT(kvs_chunking_split(A, 0, 64, NULL, 0, spans, 8, &n_spans), KVS_OK);
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, a, spans, n_spans, ca), KVS_OK);
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, bt, spans, n_spans, cb), KVS_OK);
    kvs_key_prefix_lengths(&ca[3], a + 256, 43, 43, k43);
    kvs_key_prefix_lengths(&ca[3], a + 256, 42, 42, k42);
    kvs_key missing;
    rt_fill_key(&missing, 7);

    /* clean: the marker leads to A's tail, which serves all 299 */
    kvs_chunk *tail = NULL;
    CHECK_EQ_INT(kvs_redis_tier_open(&p, &fp, &SHAPE, &t), KVS_OK);
    CHECK_EQ_INT(kvs_tier_get_many(t, &k43[0], 1, &tail), KVS_OK);
    CHECK(tail && tail->n_tok == 44 && kvs_key_equal(&tail->prefix_key, &ca[4]));
    kvs_chunk_unref(tail);
    kvs_tier_close(t);
    s = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(s, a, A - 1, cold), A - 1);
    kvs_store_free(s);

    const struct {
        const char *what;
        kvs_rm_marker m;
        const kvs_key *fp;
        size_t len;
    } cases[] = {
        {"points to B's tail", {43, 44, k43[0], cb[4], {{0}}}, &fp, KVS_RM_BYTES},
        {"points to A's chunk 3 (not its extension)", {43, 64, k43[0], ca[3], {{0}}}, &fp, KVS_RM_BYTES},
        {"claims A's tail is 64 tokens", {43, 64, k43[0], ca[4], {{0}}}, &fp, KVS_RM_BYTES},
        {"another model's", {43, 44, k43[0], ca[4], {{0}}}, &other_fp, KVS_RM_BYTES},
        {"cut short", {43, 44, k43[0], ca[4], {{0}}}, &fp, KVS_RM_BYTES - 1},
        {"points to a missing key", {43, 44, k43[0], missing, {{0}}}, &fp, KVS_RM_BYTES},
        {"points to another marker", {43, 44, k43[0], k42[0], {{0}}}, &fp, KVS_RM_BYTES},
        {"names more tokens than its target", {44, 44, k43[0], ca[4], {{0}}}, &fp, KVS_RM_BYTES},
        {"names another key", {43, 44, k42[0], ca[4], {{0}}}, &fp, KVS_RM_BYTES},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t v[KVS_RM_BYTES];
        kvs_rm_marker m = cases[i].m;
        m.fp = *cases[i].fp;
        kvs_rm_encode(&m, v);
        set_raw(r.port, &fp, &k43[0], v, cases[i].len);
        /* the tier itself returns nothing for it (the store checks the
         * parent key and tokens again) */
        kvs_chunk *got = NULL;
        CHECK_EQ_INT(kvs_redis_tier_open(&p, &fp, &SHAPE, &t), KVS_OK);
        CHECK_EQ_INT(kvs_tier_get_many(t, &k43[0], 1, &got), KVS_OK);
        CHECK_MSG(!got, "a marker that %s: the tier returned a chunk of %d tokens", cases[i].what, got ? got->n_tok : 0);
        kvs_chunk_unref(got);
        kvs_tier_close(t);
        s = open_store(&fp, r.port);
        int n = served_n(s, a, A - 1, cold); /* checks every served byte */
        CHECK_MSG(n == A - 1, "a marker that %s: %d served, want %d (through the next marker down, to A's tail)",
                  cases[i].what, n, A - 1);
        kvs_store_free(s);
    }
    /* the last case left a marker of another key under k43, damage the
     * reads met: they removed it (redis_drop.h); a listing finds the 10
     * chunks and nothing damaged */
    char k43_key[96];
    redis_key(&fp, &k43[0], k43_key);
    x = rt_cmd(r.port, "EXISTS %s", k43_key);
    CHECK_MSG(x && x->type == REDIS_REPLY_INTEGER && x->integer == 0, "the damaged marker is still there");
    if (x) freeReplyObject(x);
    CHECK_EQ_INT(kvs_redis_tier_open(&p, &fp, &SHAPE, &t), KVS_OK);
    entries = 0;
    bad = 0;
    CHECK_EQ_INT(kvs_redis_tier_scan_fp(t, count_entry, &entries, &bad), KVS_OK);
    CHECK_MSG(entries == 10 && bad == 0, "listing: %d entries, %llu bad; want 10 and none", entries,
              (unsigned long long)bad);
    kvs_tier_close(t);
    fake_kv_free(cold);
    fake_kv_free(cold_b);
    rt_redis_stop(&r);
}

/* Damaged values the store's Redis tier counted (tier 0: the only one). */
static uint64_t tier_bad(kvs_store *s) {
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    return st.n_tiers ? st.tier[0].bad : 0;
}

/* Prompt P1 (300 tokens) is stored, then Redis evicts its tail T1 [256,
 * 300) (DEL). P2, which leaves P1 at 280, stores its own tail T2: its
 * markers over the 24 tokens they share replace P1's, which point at
 * nothing now. So P3, leaving both at 280 too, gets 280 tokens through T2.
 * (With SET NX the first marker under a key stayed for good, kept alive in
 * an LRU Redis by the reads that met it: P3 got 256, and so did every
 * later prompt.) A marker found where its chunk should be (the chunk
 * evicted, another marker written there) is a miss, not damage. */
TEST(a_marker_whose_chunk_was_evicted_gives_way_to_the_next) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp;
    rt_fill_key(&fp, 8);
    enum { A = 300 };
    int32_t p1[N_TOK], p2[N_TOK], p3[N_TOK];
    random_tokens(p1, 31);
    memcpy(p2, p1, sizeof p2);
    memcpy(p3, p1, sizeof p3);
    p2[280] = (p1[280] + 1) % 30000;
    p3[280] = (p1[280] + 2) % 30000;
    fake_kv *c1 = fake_kv_new(SHAPE, N_TOK), *c2 = fake_kv_new(SHAPE, N_TOK), *c3 = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(c1, p1, N_TOK);
    fake_kv_fill(c2, p2, N_TOK);
    fake_kv_fill(c3, p3, N_TOK);
    kvs_store *s = open_store(&fp, r.port);
    CHECK_EQ_INT(kvs_store_put_prefix(s, p1, A, 64, NULL, 0, &c1->kv, NULL), KVS_OK);
    kvs_store_free(s);
    CHECK(span_key_cmd(r.port, "DEL", &fp, p1, A, 4) == 1); /* T1 evicted */
    s = open_store(&fp, r.port);
    CHECK_EQ_INT(kvs_store_put_prefix(s, p2, A, 64, NULL, 0, &c2->kv, NULL), KVS_OK);
    kvs_store_free(s);
    s = open_store(&fp, r.port);
    int n = served_n(s, p3, 399, c3);
    CHECK_MSG(n == 280, "after P1's tail was evicted and P2 stored its own: %d served, want 280", n);
    CHECK_EQ_INT(tier_bad(s), 0);
    kvs_store_free(s);

    /* T2's key now holds a valid marker of another chunk (T2 evicted, a
     * marker written there): P2's own lookup meets it through its markers
     * and counts a miss, not damage */
    kvs_key chain[8];
    kvs_span spans[8];
    int n_spans = 0;
    CHECK_EQ_INT(kvs_chunking_split(A, 0, 64, NULL, 0, spans, 8, &n_spans), KVS_OK);
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, p2, spans, n_spans, chain), KVS_OK);
    kvs_rm_marker m = {44, 64, chain[4], chain[2], fp};
    uint8_t v[KVS_RM_BYTES];
    kvs_rm_encode(&m, v);
    set_raw(r.port, &fp, &chain[4], v, sizeof v);
    s = open_store(&fp, r.port);
    n = served_n(s, p2, A - 1, c2);
    CHECK_MSG(n == 256 && tier_bad(s) == 0, "a marker under T2's key: %d served (want 256), %llu counted damaged",
              n, (unsigned long long)tier_bad(s));
    kvs_store_free(s);
    fake_kv_free(c1);
    fake_kv_free(c2);
    fake_kv_free(c3);
    rt_redis_stop(&r);
}

/* A prompt stored with segment borders (as a documents request under
 * `reuse: full` stores it: [0, 10) [10, 64) [64, 100) [100, 128) ...) is
 * served from Redis whole to a fresh store: after the partial chunk at a
 * border, the lookup goes on from the border's key (it had served the
 * first 10 tokens: no grid key names the chunks after a border). And a
 * store of other chunk_tokens (16) is served what a 64-token writer left. */
TEST(chains_with_borders_are_served_past_them) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp;
    rt_fill_key(&fp, 9);
    enum { A = 400 };
    int32_t tokens[N_TOK];
    random_tokens(tokens, 41);
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, tokens, N_TOK);
    kvs_store *s = open_store(&fp, r.port);
    const int borders[] = {10, 100, 300, 301};
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(s, tokens, A, 64, borders, 4, &cold->kv, &rep), KVS_OK);
    CHECK_MSG(rep.n_new >= 10, "%d chunks stored", rep.n_new);
    kvs_store_free(s);
    s = open_store(&fp, r.port);
    int n = served_n(s, tokens, A - 1, cold);
    CHECK_MSG(n == A - 1, "a chain with borders: %d of %d served from Redis", n, A - 1);
    kvs_store_free(s);
    s = open_store(&fp, r.port);
    n = served_n(s, tokens, 250, cold); /* stops inside [128, 192)'s successor [192, 256) */
    CHECK_MSG(n == 250, "the first 250 tokens: %d served", n);
    kvs_store_free(s);
    /* a store whose RAM holds the chain's start up to a grid line ([0, 10)
     * [10, 64)): the grid's key at 64 is not its own, and the lookup goes
     * on in Redis from its own (it had stopped at 64) */
    s = open_store(&fp, r.port);
    CHECK_EQ_INT(kvs_store_put_prefix(s, tokens, 64, 64, borders, 1, &cold->kv, NULL), KVS_OK);
    n = served_n(s, tokens, A - 1, cold);
    CHECK_MSG(n == A - 1, "RAM holding [0, 10) [10, 64): %d of %d served", n, A - 1);
    kvs_store_free(s);
    fake_kv_free(cold);
    rt_redis_stop(&r);
}

/* A writer of other chunk sizes than the reader's grid: a chunk a marker
 * leads to serves as far as it matches the prompt, and the lookup goes on
 * from its key (a reader of 16-token spans had been served 16 tokens of a
 * 64-token writer's chain, a 64 reader 63 of a 512 writer's). */
TEST(writers_of_other_chunk_sizes_serve_a_reader_whole) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    enum { A = 400 };
    const int sizes[][2] = {{512, 64}, {64, 16}, {16, 64}, {512, 16}, {128, 64}}; /* writer, reader grid */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        kvs_key fp;
        rt_fill_key(&fp, 20 + (int)k);
        int32_t tokens[N_TOK];
        random_tokens(tokens, 50 + k);
        fake_kv *cold = fake_kv_new(SHAPE, N_TOK);
        fake_kv_fill(cold, tokens, N_TOK);
        kvs_store *w = open_store(&fp, r.port);
        CHECK_EQ_INT(kvs_store_put_prefix(w, tokens, A, sizes[k][0], NULL, 0, &cold->kv, NULL), KVS_OK);
        kvs_store_free(w);
        kvs_store *rd = open_store_grid(&fp, r.port, sizes[k][1]);
        int n = served_n(rd, tokens, A - 1, cold);
        CHECK_MSG(n == A - 1, "writer chunks of %d, reader grid %d: %d of %d served", sizes[k][0], sizes[k][1], n,
                  A - 1);
        kvs_store_free(rd);
        fake_kv_free(cold);
    }
    rt_redis_stop(&r);
}

TEST(junk_at_every_tail_length_costs_two_reads) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp;
    rt_fill_key(&fp, 4);
    enum { A = 300 };
    int32_t tokens[N_TOK];
    random_tokens(tokens, 13);
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, tokens, N_TOK);
    kvs_store *a = open_store(&fp, r.port);
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(a, tokens, A, 64, NULL, 0, &cold->kv, &rep), KVS_OK);
    kvs_store_free(a);
    /* the reads of a clean lookup: the grid's, then A's tail (one read, served) */
    redisReply *x = rt_cmd(r.port, "CONFIG RESETSTAT");
    if (x) freeReplyObject(x);
    kvs_store *b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, tokens, 399, cold), A);
    kvs_store_free(b);
    const long long clean = getrange_calls(r.port);
    /* junk under every length 1..63 of the chunk at 256 (A's own tail among them) */
    kvs_key chain[16], tails[63];
    kvs_span spans[16];
    int n_spans = 0;
    CHECK_EQ_INT(kvs_chunking_split(A, 0, 64, NULL, 0, spans, 16, &n_spans), KVS_OK);
    CHECK_EQ_INT(kvs_key_prefix_chain(&fp, tokens, spans, n_spans, chain), KVS_OK);
    kvs_key_prefix_lengths(&chain[3], tokens + 256, 1, 63, tails);
    for (int k = 0; k < 63; k++) {
        char key[96];
        redis_key(&fp, &tails[k], key);
        x = rt_cmd(r.port, "SET %s not-a-chunk-value", key);
        CHECK(x && x->type == REDIS_REPLY_STATUS);
        if (x) freeReplyObject(x);
    }
    x = rt_cmd(r.port, "CONFIG RESETSTAT");
    if (x) freeReplyObject(x);
    b = open_store(&fp, r.port);
    CHECK_EQ_INT(served_n(b, tokens, 399, cold), 256);
    kvs_store_free(b);
    const long long junk = getrange_calls(r.port);
    /* the grid's 7 keys of 399 tokens in one batch, then the tail: 2 reads
     * at most (the clean lookup read A's tail, then went on past it); each
     * junk value read is removed, its script reading it once more */
    int left = 0;
    for (int k = 0; k < 63; k++) {
        char key[96];
        redis_key(&fp, &tails[k], key);
        x = rt_cmd(r.port, "EXISTS %s", key);
        left += x && x->type == REDIS_REPLY_INTEGER && x->integer == 1;
        if (x) freeReplyObject(x);
    }
    const long long removed = 63 - left;
    CHECK_MSG(removed >= 1 && removed <= 2, "%lld junk values removed, want the 1 or 2 read", removed);
    CHECK_MSG(clean > 7 && junk - removed >= 7 + 1 && junk - removed <= 7 + 2,
              "%lld reads with junk at every tail length (%lld clean, %lld removed): want 7 grid reads and 2 tail "
              "reads at most", junk, clean, removed);
    fake_kv_free(cold);
    rt_redis_stop(&r);
}

/* A keyed store (cache key: its values carry an HMAC, the key id folded
 * into its fingerprint) round-trips through Redis exactly; a value forged
 * as a writer of the Redis without the key can (raw payload changed, its
 * checksum, the header digest and the wrapper recomputed, the key kept) is
 * refused as "bad MAC" and the lookup stops before it; a keyless store of
 * the same model sees none of the keyed values. Without the MAC check the
 * forged value had been served; it counts as damaged and as a bad MAC. */
TEST(keyed_values_verified_forgeries_refused) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_entry_mac *mac = NULL;
    CHECK_EQ_INT(kvs_entry_mac_new("a secret key of 24 bytes", 24, "test key", &mac), KVS_OK);
    kvs_key model_fp, fp;
    rt_fill_key(&model_fp, 1);
    kvs_fingerprint_keyed(&model_fp, kvs_entry_mac_key_id(mac), &fp);
    int32_t tokens[N_TOK];
    random_tokens(tokens, 12);
    fake_kv *cold = fake_kv_new(SHAPE, N_TOK);
    fake_kv_fill(cold, tokens, N_TOK);
    kvs_store *a = open_store_keyed(&fp, r.port, 0, mac);
    kvs_put_report rep;
    CHECK_EQ_INT(kvs_store_put_prefix(a, tokens, N_TOK, 64, NULL, 0, &cold->kv, &rep), KVS_OK);
    kvs_store_free(a);
    kvs_store *b = open_store_keyed(&fp, r.port, 0, mac);
    CHECK_EQ_INT(served(b, tokens, cold), N_TOK - 1); /* exact (served checks the bytes) */
    kvs_store_free(b);
    kvs_store *k = open_store(&model_fp, r.port); /* keyless: other names */
    CHECK_EQ_INT(served(k, tokens, cold), 0);
    kvs_store_free(k);

    /* forge chunk 3's value */
    char key[96];
    kvs_key pk3;
    CHECK_EQ_INT(span_key(&fp, tokens, N_TOK, 3, key, &pk3), 0);
    redisReply *x = rt_cmd(r.port, "GET %s", key);
    CHECK(x && x->type == REDIS_REPLY_STRING);
    size_t len = x ? (size_t)x->len : 0;
    uint8_t *v = malloc(len);
    if (x) memcpy(v, x->str, len);
    if (x) freeReplyObject(x);
    uint8_t *h = v + KVS_RV_PREFIX_BYTES;
    CHECK(kvs_get_le32(h + 12) & KVS_DISK_FLAG_MAC);
    const size_t hb = kvs_get_le32(h + 8);
    CHECK_EQ_INT(kvs_get_le32(v + 8), KVS_RV_CODEC_RAW);
    for (size_t i = KVS_RV_PREFIX_BYTES + hb; i < len; i += 5) v[i] ^= 0x42; /* the attacker's KV */
    forge_resign(h, h + hb, len - KVS_RV_PREFIX_BYTES - hb);
    rt_rewrap(v, len, KVS_RV_PREFIX_BYTES + hb);
    kvs_rv_expect ex = {&fp, &SHAPE, &pk3, 0, mac};
    kvs_chunk *c = NULL;
    kvs_disk_verdict verdict;
    CHECK(kvs_rv_decode(v, len, &ex, "forged", &c, &verdict) == KVS_ERR_CORRUPT && verdict == KVS_DISK_BAD_MAC);
    ex.mac = NULL; /* the checksums and the digest pass: only the MAC objects */
    CHECK_EQ_INT(kvs_rv_decode(v, len, &ex, "forged", &c, &verdict), KVS_OK);
    kvs_chunk_unref(c);
    set_raw(r.port, &fp, &pk3, v, len);
    free(v);
    kvs_store *d = open_store_keyed(&fp, r.port, 0, mac);
    CHECK_EQ_INT(served(d, tokens, cold), 3 * 64);
    kvs_store_stats ss;
    kvs_store_get_stats(d, &ss);
    CHECK_MSG(ss.tier[0].bad >= 1, "bad %llu", (unsigned long long)ss.tier[0].bad);
    /* counted apart as a bad MAC too (redis_bad_mac): damage would not be */
    CHECK_EQ_INT((int)ss.tier[0].bad_mac, (int)ss.tier[0].bad);
    kvs_store_free(d);
    fake_kv_free(cold);
    kvs_entry_mac_free(mac);
    rt_redis_stop(&r);
}

/* The Redis listing and clear succeed past a damaged value (counted) and
 * leave kvs_last_error() as it was: the listing had left the value's
 * message behind. */
TEST(redis_scan_and_clear_keep_the_last_error) {
    rt_redis r;
    if (rt_redis_start(&r, 0)) {
        CHECK(0);
        return;
    }
    kvs_key fp, k;
    rt_fill_key(&fp, 91);
    rt_fill_key(&k, 92);
    char key[160], url[64];
    redis_key(&fp, &k, key);
    redisReply *x = rt_cmd(r.port, "SET %s %b", key, "KVSR-cut-short", (size_t)14);
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    if (x) freeReplyObject(x);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    kvs_cache_params p = kvs_cache_default_params();
    p.redis_url = url;
    const char *want = "invalid UTF-8 at byte offset 0";
    CHECK(kvs_utf8_check("\xff", 1) != KVS_OK && strstr(kvs_last_error(), want));
    kvs_cache_dir_stats st;
    CHECK_EQ_INT(kvs_cache_redis_scan(&p, NULL, NULL, &st), KVS_OK);
    CHECK_EQ_INT(st.damaged, 1);
    CHECK_MSG(strstr(kvs_last_error(), want) != NULL, "after the scan: %s", kvs_last_error());
    uint64_t n = 0;
    CHECK_EQ_INT(kvs_cache_redis_clear(&p, &n), KVS_OK);
    CHECK_MSG(strstr(kvs_last_error(), want) != NULL, "after the clear: %s", kvs_last_error());
    rt_redis_stop(&r);
}

int main(void) {
    RUN(fresh_store_serves_from_redis_and_stops_at_a_missing_chunk);
    RUN(keyed_values_verified_forgeries_refused);
    RUN(partial_tail_served_to_a_prompt_that_extends_it);
    RUN(hostile_markers_never_lead_to_other_bytes);
    RUN(a_marker_whose_chunk_was_evicted_gives_way_to_the_next);
    RUN(chains_with_borders_are_served_past_them);
    RUN(writers_of_other_chunk_sizes_serve_a_reader_whole);
    RUN(junk_at_every_tail_length_costs_two_reads);
    RUN(redis_scan_and_clear_keep_the_last_error);
    return kt_summary();
}
