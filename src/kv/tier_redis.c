/* The Redis / Redis Cluster tier: the kvs_tier_ops row (tier_redis.h). */
#include "kv/tier_redis_impl.h"

#include "base/error.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "kv/redis_drop.h"
#include "kv/redis_marker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Listing reads this much of each value: the wrapper and an entry header of
 * up to ~16K tokens, never the payload. */
#define SCAN_HEAD_BYTES 65536
#define SCAN_COUNT "512"
#define SCAN_MAX_CALLS (1L << 26) /* per node: 2^35 buckets at SCAN_COUNT (a backstop: a cursor handed back is caught at once) */

static redis_tier *impl(const kvs_tier *t) { return t->impl; }

size_t kvs_redis_make_key(const redis_tier *rt, const kvs_key *prefix_key, char *buf) {
    char hex[65];
    kvs_key_to_hex(prefix_key, hex);
    return (size_t)snprintf(buf, KVS_REDIS_KEY_CAP, "%s%s", rt->key_prefix, hex);
}

void kvs_redis_tier_key(const kvs_tier *t, const kvs_key *prefix_key, char *buf) {
    kvs_redis_make_key(impl(t), prefix_key, buf);
}

/* Keys of a batch of prefix keys (one allocation). */
typedef struct key_set {
    char (*key)[KVS_REDIS_KEY_CAP];
    const char **keys;
    size_t *lens;
} key_set;

static int key_set_make(const redis_tier *rt, const kvs_key *pk, int n, key_set *ks) {
    ks->key = malloc((size_t)n * sizeof *ks->key);
    ks->keys = malloc((size_t)n * sizeof *ks->keys);
    ks->lens = malloc((size_t)n * sizeof *ks->lens);
    if (!ks->key || !ks->keys || !ks->lens) {
        free(ks->key);
        free(ks->keys);
        free(ks->lens);
        return kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory for %d keys", n);
    }
    for (int i = 0; i < n; i++) {
        ks->lens[i] = kvs_redis_make_key(rt, &pk[i], ks->key[i]);
        ks->keys[i] = ks->key[i];
    }
    return KVS_OK;
}

static void key_set_free(key_set *ks) {
    free(ks->key);
    free(ks->keys);
    free(ks->lens);
}

/* --- get_many ----------------------------------------------------------------- */

typedef struct get_ctx {
    redis_tier *rt;
    const kvs_key *prefix_keys;
    key_set ks;
    char limit[24];
    kvs_chunk **out;
    kvs_rm_marker *markers; /* (n) or NULL: a marker read here is damage */
    uint8_t *is_marker;     /* (n) with markers: 1 where markers[i] was read */
    size_t *expect;         /* (n) bytes each reply may bring: the read's deadline */
    kvs_redis_damaged *damage; /* (n) what a damaged value read looked like, where is_damaged[i] */
    uint8_t *is_damaged;       /* (n) */
} get_ctx;

static int getrange_command(void *user, int i, const char **argv, size_t *argvlen) {
    get_ctx *g = user;
    argv[0] = "GETRANGE";
    argv[1] = g->ks.keys[i];
    argv[2] = "0";
    argv[3] = g->limit;
    argvlen[0] = 8;
    argvlen[1] = g->ks.lens[i];
    argvlen[2] = 1;
    argvlen[3] = strlen(g->limit);
    return 4;
}

/* Counts the verdict on value r of item i; damage (not another model's or
 * a newer version's value) is noted for removal (redis_drop.h). */
static void count_verdict(get_ctx *g, int i, const redisReply *r, kvs_disk_verdict v) {
    redis_tier *rt = g->rt;
    atomic_fetch_add(v == KVS_DISK_FOREIGN ? &rt->foreign : &rt->bad, 1);
    if (v == KVS_DISK_BAD_MAC) atomic_fetch_add(&rt->bad_mac, 1);
    if (v != KVS_DISK_FOREIGN && v != KVS_DISK_BAD_VERSION) {
        kvs_redis_damaged_note(&g->damage[i], r->str, (size_t)r->len, 0);
        g->is_damaged[i] = 1;
    }
}

static void get_reply(void *user, int i, const redisReply *r) {
    get_ctx *g = user;
    redis_tier *rt = g->rt;
    if (!r) {
        atomic_fetch_add(&rt->errors, 1);
        return;
    }
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
        atomic_fetch_add(&rt->errors, 1);
        kvs_redis_note_refusal(rt, "read", r); /* the server's words: NOAUTH, a WRONGTYPE value... */
        return;
    }
    kvs_redis_note_answered(rt, "read");
    /* GETRANGE of a missing key is "" (nil in old servers). */
    if (r->type == REDIS_REPLY_NIL || r->len == 0) return;
    if ((size_t)r->len > rt->max_value_bytes) { /* GETRANGE gave limit + 1 bytes: larger than allowed */
        atomic_fetch_add(&rt->oversized, 1);
        atomic_fetch_add(&rt->bad, 1);
        kvs_redis_damaged_note(&g->damage[i], r->str, (size_t)r->len, 1);
        g->is_damaged[i] = 1;
        return;
    }
    kvs_disk_verdict v;
    if (kvs_rm_is_marker((const uint8_t *)r->str, (size_t)r->len)) {
        /* where a marker's chunk should be: that chunk was evicted and
         * another's marker written there, a miss (redis_marker.h) */
        if (!g->markers) return;
        if (kvs_rm_decode((const uint8_t *)r->str, (size_t)r->len, &rt->fp, &g->prefix_keys[i], KVS_DISK_MAX_TOKENS,
                          &g->markers[i], &v) == KVS_OK)
            g->is_marker[i] = 1;
        else
            count_verdict(g, i, r, v);
        return;
    }
    kvs_rv_expect x = {&rt->fp, &rt->shape, &g->prefix_keys[i], rt->max_value_bytes, rt->mac};
    kvs_chunk *c;
    if (kvs_rv_decode((const uint8_t *)r->str, (size_t)r->len, &x, g->ks.keys[i], &c, &v) == KVS_OK) {
        g->out[i] = c;
        atomic_fetch_add(&rt->get_bytes, c->kv_bytes);
    } else {
        count_verdict(g, i, r, v);
    }
}

/* One GETRANGE batch: out[i] = the chunk under pk[i]; with markers, a
 * marker under pk[i] is decoded into markers[i] (is_marker[i] = 1).
 * n_tok[i] (NULL: a grid chunk each): the tokens value i should hold, for
 * the read's deadline. */
static int read_values(redis_tier *rt, const kvs_key *pk, int n, kvs_chunk **out, kvs_rm_marker *markers,
                       uint8_t *is_marker, const int *n_tok) {
    get_ctx g = {.rt = rt, .prefix_keys = pk, .out = out, .markers = markers, .is_marker = is_marker};
    snprintf(g.limit, sizeof g.limit, "%zu", rt->max_value_bytes); /* inclusive: limit + 1 bytes at most */
    g.expect = malloc((size_t)n * sizeof *g.expect);
    g.damage = malloc((size_t)n * sizeof *g.damage);
    g.is_damaged = calloc((size_t)n, 1);
    if (!g.expect || !g.damage || !g.is_damaged) {
        free(g.expect);
        free(g.damage);
        free(g.is_damaged);
        return kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory for %d keys", n);
    }
    for (int i = 0; i < n; i++) {
        const size_t b = n_tok ? kvs_kv_payload_bytes(&rt->shape, n_tok[i]) : rt->expect_value_bytes;
        g.expect[i] = b < rt->max_value_bytes ? b : rt->max_value_bytes;
    }
    int st = key_set_make(rt, pk, n, &g.ks);
    if (!st) {
        kvs_redis_batch b = {n, g.ks.keys, g.ks.lens, getrange_command, get_reply, &g, 0, g.expect};
        st = kvs_redis_run_batch(&rt->nodes, &b, NULL);
        kvs_redis_drop_damaged(rt, g.ks.keys, g.ks.lens, g.damage, g.is_damaged, n);
        key_set_free(&g.ks);
    }
    free(g.expect);
    free(g.damage);
    free(g.is_damaged);
    return st;
}

/* The chunks the markers among out[0, n) point to, read in one more batch
 * (redis_marker.h): out[i] = the target where it fits its marker. Best
 * effort: out of memory leaves them misses. */
static void follow_markers(redis_tier *rt, const kvs_rm_marker *markers, const uint8_t *is_marker, int n,
                           kvs_chunk **out) {
    int m = 0;
    for (int i = 0; i < n; i++) m += is_marker[i];
    if (!m) return;
    kvs_key *targets = malloc((size_t)m * sizeof *targets);
    int *n_tok = malloc((size_t)m * sizeof *n_tok);
    kvs_chunk **got = calloc((size_t)m, sizeof *got);
    int st = targets && n_tok && got ? KVS_OK : KVS_ERR_NOMEM;
    for (int i = 0, j = 0; !st && i < n; i++)
        if (is_marker[i]) {
            targets[j] = markers[i].target;
            n_tok[j++] = markers[i].n_target;
        }
    if (!st) st = read_values(rt, targets, m, got, NULL, NULL, n_tok);
    for (int i = 0, j = 0; !st && i < n; i++) {
        if (!is_marker[i]) continue;
        kvs_chunk *c = got[j++];
        if (!c) continue; /* the target is gone (evicted): a miss */
        if (kvs_rm_target_fits(&markers[i], c)) {
            out[i] = c;
            atomic_fetch_add(&rt->marker_hits, 1);
        } else {
            kvs_chunk_unref(c);
            atomic_fetch_add(&rt->bad, 1);
        }
    }
    free(targets);
    free(n_tok);
    free(got);
}

static int redis_get_many(kvs_tier *t, const kvs_key *pk, int n, kvs_chunk **out) {
    redis_tier *rt = impl(t);
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (n <= 0) return KVS_OK;
    int64_t t0 = kvs_redis_mono_ns();
    kvs_rm_marker *markers = malloc((size_t)n * sizeof *markers);
    uint8_t *is_marker = calloc((size_t)n, 1);
    int st = markers && is_marker ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory for %d keys", n);
    if (!st) st = read_values(rt, pk, n, out, markers, is_marker, NULL);
    if (!st) follow_markers(rt, markers, is_marker, n, out);
    free(markers);
    free(is_marker);
    int found = 0;
    for (int i = 0; i < n; i++) found += out[i] != NULL;
    atomic_fetch_add(&rt->gets, (uint64_t)n);
    atomic_fetch_add(&rt->hits, (uint64_t)found);
    atomic_fetch_add(&rt->misses, (uint64_t)(n - found));
    atomic_fetch_add(&rt->get_ns, (uint64_t)(kvs_redis_mono_ns() - t0));
    return st;
}

/* --- contains / remove ---------------------------------------------------------- */

typedef struct key_cmd_ctx {
    redis_tier *rt;
    key_set ks;
    const char *cmd;
    long long *result; /* (n) integer replies, -1 = no answer */
} key_cmd_ctx;

static int key_command(void *user, int i, const char **argv, size_t *argvlen) {
    key_cmd_ctx *k = user;
    argv[0] = k->cmd;
    argvlen[0] = strlen(k->cmd);
    argv[1] = k->ks.keys[i];
    argvlen[1] = k->ks.lens[i];
    return 2;
}

static void key_reply(void *user, int i, const redisReply *r) {
    key_cmd_ctx *k = user;
    k->result[i] = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (k->result[i] < 0) atomic_fetch_add(&k->rt->errors, 1);
}

/* cmd (EXISTS, DEL) on every key; result[i] its integer reply or -1. */
static int key_commands(redis_tier *rt, const char *cmd, const kvs_key *pk, int n, long long *result) {
    key_cmd_ctx k = {.rt = rt, .cmd = cmd, .result = result};
    int st = key_set_make(rt, pk, n, &k.ks);
    if (st) return st;
    kvs_redis_batch b = {n, k.ks.keys, k.ks.lens, key_command, key_reply, &k, 0, NULL};
    st = kvs_redis_run_batch(&rt->nodes, &b, NULL);
    key_set_free(&k.ks);
    return st;
}

static int redis_contains_many(kvs_tier *t, const kvs_key *pk, int n, uint8_t *present) {
    if (n <= 0) return KVS_OK;
    long long *res = malloc((size_t)n * sizeof *res);
    if (!res) return kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory");
    int st = key_commands(impl(t), "EXISTS", pk, n, res);
    /* A chunk still in the write queue is held: a server storing a prompt a
     * prefill step at a time checks each step's parent while the SET of the
     * step before may be queued, and an absent parent had cut the chain
     * off Redis (healthy, under load: 49 of 51 chunks written). */
    for (int i = 0; i < n; i++)
        present[i] = st || res[i] < 0 ? KVS_TIER_UNKNOWN
                     : res[i] > 0 || kvs_redis_writer_pending(impl(t), &pk[i]) ? KVS_TIER_HELD
                                                                              : KVS_TIER_ABSENT;
    free(res);
    return st;
}

static int redis_remove(kvs_tier *t, const kvs_key *pk) {
    long long res = -1;
    int st = key_commands(impl(t), "DEL", pk, 1, &res);
    if (st) return st;
    if (res < 0) return kvs_error(KVS_ERR_IO, "redis tier: DEL got no answer");
    return res > 0 ? KVS_OK : KVS_ERR_NOT_FOUND;
}

/* --- scan / clear: SCAN MATCH <prefix>* on every master ---------------------------- */

/* Calls fn(user, node, keys) for every batch of this tier's keys on every
 * master. A node that fails is reported as an error (the rest go on). */
typedef int (*scan_batch_fn)(redis_tier *rt, int node, const redisReply *keys, void *user);

/* Whether a key SCAN matched is one the tier writes, "kvs:<16 hex>:<64 hex>"
 * (kvs_redis_make_key): MATCH kvs:* also finds another application's
 * "kvs:session:..." or a list named "kvs:queue", which clear had deleted
 * and stats had counted as damaged values. */
static int tier_key(const redisReply *k) {
    if (k->type != REDIS_REPLY_STRING || k->len != 4 + 16 + 1 + 64 || memcmp(k->str, "kvs:", 4) || k->str[20] != ':')
        return 0;
    for (size_t i = 4; i < (size_t)k->len; i++) /* lowercase, as kvs_key_to_hex writes */
        if (i != 20 && !((k->str[i] >= '0' && k->str[i] <= '9') || (k->str[i] >= 'a' && k->str[i] <= 'f'))) return 0;
    return 1;
}

/* Moves the batch's tier keys to its front (the reply still owns every
 * element) and returns how many there are. */
static size_t front_tier_keys(redisReply *keys) {
    size_t n = 0;
    for (size_t i = 0; i < keys->elements; i++)
        if (tier_key(keys->element[i])) {
            redisReply *t = keys->element[n];
            keys->element[n++] = keys->element[i];
            keys->element[i] = t;
        }
    return n;
}

static int scan_keys(redis_tier *rt, scan_batch_fn fn, void *user) {
    char match[48];
    snprintf(match, sizeof match, "%s*", rt->key_prefix);
    kvs_redis_refresh(&rt->nodes, 1);
    int masters[KVS_REDIS_MAX_NODES];
    int n_masters = kvs_redis_masters(&rt->nodes, masters, KVS_REDIS_MAX_NODES);
    int st = KVS_OK;
    if (!n_masters) { /* and why, where a refresh learnt it */
        char why[sizeof rt->nodes.slots_why];
        pthread_rwlock_rdlock(&rt->nodes.lock);
        snprintf(why, sizeof why, "%s", rt->nodes.slots_why);
        pthread_rwlock_unlock(&rt->nodes.lock);
        st = why[0] ? kvs_error(KVS_ERR_IO, "redis tier: no reachable node (%s)", why)
                    : kvs_error(KVS_ERR_IO, "redis tier: no reachable node");
    }
    for (int m = 0; m < n_masters; m++) {
        kvs_redis_conn *c = &rt->nodes.node[masters[m]]->rd;
        char cursor[32] = "0";
        int stop = 0;
        long calls = 0;
        do {
            redisContext *ctx = kvs_redis_conn_acquire(c);
            if (!ctx) {
                char why[192];
                kvs_redis_conn_why_down(c, why, sizeof why);
                st = kvs_error(KVS_ERR_IO, "redis %s:%d: %s", c->host, c->port, why);
                break;
            }
            redisReply *r = kvs_redis_command_by(c, kvs_redis_due_ns(&rt->policy, 0), "SCAN %s MATCH %s COUNT " SCAN_COUNT,
                                                 cursor, match);
            int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_ARRAY;
            kvs_redis_conn_release(c, r != NULL);
            if (!ok) { /* the server's words where it said why (NOAUTH: no password given), else the
                        * transport's (a timeout, a protocol error, a reset: "SCAN failed" alone had named none) */
                char down[192];
                if (!r) kvs_redis_conn_why_down(c, down, sizeof down);
                st = r && r->type == REDIS_REPLY_ERROR
                         ? kvs_error(KVS_ERR_IO, "redis %s:%d: SCAN: %.*s", c->host, c->port, (int)r->len, r->str)
                     : r ? kvs_error(KVS_ERR_IO, "redis %s:%d: SCAN answered with no [cursor, keys] pair", c->host,
                                     c->port)
                         : kvs_error(KVS_ERR_IO, "redis %s:%d: SCAN: %s", c->host, c->port, down);
                if (r) freeReplyObject(r);
                break;
            }
            /* a server that never ends its cursor had kept the cache
             * commands in this loop for good: one that hands the cursor
             * back as it was given makes no progress (Redis never does),
             * and past SCAN_MAX_CALLS calls (2^29 buckets) it is given up */
            if ((strcmp(cursor, "0") && !strcmp(cursor, r->element[0]->str)) || ++calls > SCAN_MAX_CALLS) {
                st = kvs_error(KVS_ERR_IO, "redis %s:%d: SCAN did not finish (cursor %.20s after %ld calls)", c->host,
                               c->port, r->element[0]->str, calls);
                freeReplyObject(r);
                break;
            }
            snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
            redisReply *keys = r->element[1];
            const size_t all = keys->elements;
            keys->elements = front_tier_keys(keys); /* fn sees the tier's keys only */
            if (keys->elements) stop = fn(rt, masters[m], keys, user);
            keys->elements = all; /* freed whole */
            freeReplyObject(r);
        } while (!stop && strcmp(cursor, "0"));
        if (stop) break;
    }
    return st;
}

/* The rd connection of node, or NULL with *st set to an error naming it. */
static redisContext *acquire_node(redis_tier *rt, int node, kvs_redis_conn **c, int *st) {
    *c = &rt->nodes.node[node]->rd;
    redisContext *ctx = kvs_redis_conn_acquire(*c);
    if (!ctx) {
        char why[192];
        kvs_redis_conn_why_down(*c, why, sizeof why);
        *st = kvs_error(KVS_ERR_IO, "redis %s:%d: %s", (*c)->host, (*c)->port, why);
    }
    return ctx;
}

typedef struct clear_ctx {
    uint64_t removed;
    int st;
} clear_ctx;

/* In a cluster, each command of a listing or a clear goes after ASKING: a
 * node importing a slot lists keys migrated to it, which answer only so
 * (MOVED otherwise: `cache stats` had failed on them and `cache clear`
 * had left them, reporting success). On a node that owns the slot it
 * changes nothing. */
static int append_asking(redis_tier *rt, redisContext *ctx) {
    return !rt->nodes.cluster || redisAppendCommand(ctx, "ASKING") == REDIS_OK;
}

/* Reads the reply of an ASKING appended before, where one was. */
static int skip_asking(redis_tier *rt, kvs_redis_conn *c, int64_t due) {
    if (!rt->nodes.cluster) return 1;
    redisReply *r = NULL;
    const int ok = kvs_redis_reply_by(c, due, &r) == 0;
    if (r) freeReplyObject(r);
    return ok;
}

static int clear_batch(redis_tier *rt, int node, const redisReply *keys, void *user) {
    clear_ctx *x = user;
    kvs_redis_conn *c;
    redisContext *ctx = acquire_node(rt, node, &c, &x->st);
    if (!ctx) return 1;
    int ok = 1;
    /* each key's first 4 bytes, then DEL: a partial-chunk marker goes
     * too, but only chunks are counted as entries removed */
    for (size_t i = 0; ok && i < keys->elements; i++) {
        const char *argv[4] = {"GETRANGE", keys->element[i]->str, "0", "3"};
        size_t lens[4] = {8, keys->element[i]->len, 1, 1};
        ok = append_asking(rt, ctx) && redisAppendCommandArgv(ctx, 4, argv, lens) == REDIS_OK &&
             append_asking(rt, ctx) &&
             redisAppendCommandArgv(ctx, 2, (const char *[]){"DEL", keys->element[i]->str},
                                    (size_t[]){3, keys->element[i]->len}) == REDIS_OK;
    }
    const int64_t due = kvs_redis_due_ns(&rt->policy, 0);
    int refused = 0;
    for (size_t i = 0; ok && i < keys->elements; i++) {
        redisReply *head = NULL, *r = NULL;
        ok = skip_asking(rt, c, due) && kvs_redis_reply_by(c, due, &head) == 0 && skip_asking(rt, c, due) &&
             kvs_redis_reply_by(c, due, &r) == 0;
        const int marker = ok && head->type == REDIS_REPLY_STRING &&
                           kvs_rm_is_marker((const uint8_t *)head->str, (size_t)head->len);
        if (ok && r->type == REDIS_REPLY_INTEGER && !marker) x->removed += (uint64_t)r->integer;
        /* a DEL refused (NOPERM, READONLY, a slot moved on): the key stays,
         * and the clear fails with the server's words (it had reported
         * success, the keys all still there) */
        if (ok && r->type == REDIS_REPLY_ERROR && !refused++ && x->st == KVS_OK)
            x->st = kvs_error(KVS_ERR_IO, "redis %s:%d: DEL %.*s: %.*s (the key stays)", c->host, c->port,
                              (int)keys->element[i]->len, keys->element[i]->str, (int)r->len, r->str);
        if (head) freeReplyObject(head);
        if (r) freeReplyObject(r);
    }
    kvs_redis_conn_release(c, ok);
    if (!ok) x->st = kvs_error(KVS_ERR_IO, "redis %s:%d: DEL failed", c->host, c->port);
    return !ok;
}

static int redis_clear(kvs_tier *t, uint64_t *n_removed) {
    redis_tier *rt = impl(t);
    kvs_redis_writer_flush(rt, rt->flush_timeout_ms); /* queued writes would bring keys back */
    clear_ctx x = {0, KVS_OK};
    int st = scan_keys(rt, clear_batch, &x);
    if (n_removed) *n_removed = x.removed;
    return st ? st : x.st;
}

typedef struct list_ctx {
    kvs_redis_visit_fp_fn fn;
    void *user;
    int stop;
    int st;
    uint64_t *n_bad;
} list_ctx;

static void count_bad(redis_tier *rt, list_ctx *x) {
    atomic_fetch_add(&rt->bad, 1);
    if (x->n_bad) (*x->n_bad)++;
}

/* A partial-chunk marker met by a listing: no entry of its own; damaged if
 * it fails its checks (a marker copied under another key, cut short, or
 * naming another model than its key). */
static void check_marker(redis_tier *rt, list_ctx *x, const redisReply *key, const redisReply *value) {
    kvs_key named;
    char hex[65];
    memcpy(hex, key->str + 21, 64);
    hex[64] = 0;
    kvs_rm_marker m;
    kvs_disk_verdict v = KVS_DISK_BAD_HEADER;
    if (kvs_key_from_hex(hex, &named) != KVS_OK ||
        kvs_rm_decode((const uint8_t *)value->str, (size_t)value->len, rt->any_model ? NULL : &rt->fp, &named,
                      KVS_DISK_MAX_TOKENS, &m, &v) != KVS_OK) {
        if (v == KVS_DISK_FOREIGN) atomic_fetch_add(&rt->foreign, 1);
        else count_bad(rt, x);
        return;
    }
    char fp_hex[65];
    kvs_key_to_hex(&m.fp, fp_hex);
    if (memcmp(fp_hex, key->str + 4, 16)) count_bad(rt, x); /* another model's marker under this model's key */
}

static int list_batch(redis_tier *rt, int node, const redisReply *keys, void *user) {
    list_ctx *x = user;
    kvs_redis_conn *c;
    redisContext *ctx = acquire_node(rt, node, &c, &x->st);
    if (!ctx) return 1;
    /* up to SCAN_HEAD_BYTES per key come back: the budget of that */
    const int64_t due = kvs_redis_due_ns(&rt->policy, (uint64_t)keys->elements * SCAN_HEAD_BYTES);
    int ok = 1;
    for (size_t i = 0; ok && i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        ok = append_asking(rt, ctx) && redisAppendCommand(ctx, "STRLEN %b", k, keys->element[i]->len) == REDIS_OK &&
             append_asking(rt, ctx) &&
             redisAppendCommand(ctx, "GETRANGE %b 0 %d", k, keys->element[i]->len, SCAN_HEAD_BYTES - 1) == REDIS_OK;
    }
    for (size_t i = 0; ok && i < keys->elements; i++) {
        redisReply *len = NULL, *head = NULL;
        ok = skip_asking(rt, c, due) && kvs_redis_reply_by(c, due, &len) == 0 && skip_asking(rt, c, due) &&
             kvs_redis_reply_by(c, due, &head) == 0;
        /* a key deleted between SCAN and here reads as "" : not counted */
        const int marker = ok && head->type == REDIS_REPLY_STRING &&
                           kvs_rm_is_marker((const uint8_t *)head->str, (size_t)head->len);
        if (marker && !x->stop) {
            check_marker(rt, x, keys->element[i], head);
        } else if (ok && !x->stop && len->type == REDIS_REPLY_INTEGER && head->type == REDIS_REPLY_STRING &&
                   head->len) {
            /* the key the name says, which the value's header must hold: a value
             * copied or swapped under another key had listed as valid */
            kvs_key named;
            char hex[65];
            memcpy(hex, keys->element[i]->str + 21, 64);
            hex[64] = 0;
            const int have_name = kvs_key_from_hex(hex, &named) == KVS_OK;
            kvs_rv_expect e = {rt->any_model ? NULL : &rt->fp, rt->any_model ? NULL : &rt->shape,
                               have_name ? &named : NULL, rt->max_value_bytes, rt->mac};
            kvs_chunk *chunk;
            kvs_key vfp;
            kvs_disk_verdict v;
            int st = kvs_rv_decode_header((const uint8_t *)head->str, (size_t)head->len, (size_t)len->integer, &e,
                                          keys->element[i]->str, &chunk, &vfp, &v);
            char fp_hex[65];
            if (st == KVS_OK) kvs_key_to_hex(&vfp, fp_hex);
            if (st == KVS_OK && memcmp(fp_hex, keys->element[i]->str + 4, 16)) { /* another model's value, or KV type's */
                kvs_chunk_unref(chunk);
                count_bad(rt, x);
            } else if (st == KVS_OK)
                x->stop = x->fn(x->user, chunk, &vfp, (uint64_t)len->integer);
            else if (v == KVS_DISK_FOREIGN) atomic_fetch_add(&rt->foreign, 1);
            else {
                count_bad(rt, x);
                if (v == KVS_DISK_BAD_MAC) atomic_fetch_add(&rt->bad_mac, 1);
            }
        } else if (ok && !x->stop && (len->type == REDIS_REPLY_ERROR || head->type == REDIS_REPLY_ERROR)) {
            const redisReply *er = len->type == REDIS_REPLY_ERROR ? len : head;
            if (er->str && !strncmp(er->str, "WRONGTYPE", 9)) {
                count_bad(rt, x); /* a list, hash, ... under one of our keys: damaged too */
            } else { /* the command refused (renamed away, NOAUTH): the server's words, not damage (every
                      * valid value had been counted damaged); the rest of the replies are read, unused */
                x->st = kvs_error(KVS_ERR_IO, "redis %s:%d: %s: %.*s", c->host, c->port,
                                  er == len ? "STRLEN" : "GETRANGE", (int)er->len, er->str);
                x->stop = 1;
            }
        }
        if (len) freeReplyObject(len);
        if (head) freeReplyObject(head);
    }
    kvs_redis_conn_release(c, ok);
    if (!ok) x->st = kvs_error(KVS_ERR_IO, "redis %s:%d: listing failed", c->host, c->port);
    return !ok || x->stop;
}

int kvs_redis_tier_scan_fp(kvs_tier *t, kvs_redis_visit_fp_fn fn, void *user, uint64_t *n_bad) {
    list_ctx x = {fn, user, 0, KVS_OK, n_bad};
    int st = scan_keys(impl(t), list_batch, &x);
    return st ? st : x.st;
}

typedef struct visit_adapter {
    kvs_tier_visit_fn fn;
    void *user;
} visit_adapter;

static int visit_without_fp(void *user, kvs_chunk *chunk, const kvs_key *fp, uint64_t value_bytes) {
    visit_adapter *a = user;
    return a->fn(a->user, chunk);
}

static int redis_scan(kvs_tier *t, kvs_tier_visit_fn fn, void *user) {
    visit_adapter a = {fn, user};
    return kvs_redis_tier_scan_fp(t, visit_without_fp, &a, NULL);
}

/* --- stats / put / close --------------------------------------------------------------- */

static void redis_stats(kvs_tier *t, kvs_tier_stats *st) {
    redis_tier *rt = impl(t);
    memset(st, 0, sizeof *st);
    st->gets = atomic_load(&rt->gets);
    st->hits = atomic_load(&rt->hits);
    st->misses = atomic_load(&rt->misses);
    st->get_bytes = atomic_load(&rt->get_bytes);
    st->get_seconds = (double)atomic_load(&rt->get_ns) * 1e-9;
    st->puts = atomic_load(&rt->puts);
    st->put_errors = atomic_load(&rt->put_errors);
    st->put_dropped = atomic_load(&rt->put_dropped);
    st->put_bytes = atomic_load(&rt->put_bytes);
    st->bad = atomic_load(&rt->bad);
    st->bad_mac = atomic_load(&rt->bad_mac);
    st->foreign = atomic_load(&rt->foreign);
    st->errors = atomic_load(&rt->errors);
}

static int redis_put(kvs_tier *t, const kvs_chunk *c) { return kvs_redis_writer_put(impl(t), c); }

static void redis_free(redis_tier *rt) {
    kvs_redis_writer_stop(rt);
    if (rt->nodes.policy) kvs_redis_nodes_destroy(&rt->nodes);
    if (rt->password) memset(rt->password, 0, strlen(rt->password));
    free(rt->password);
    free(rt->user);
    pthread_mutex_destroy(&rt->why_mu);
    free(rt);
}

static void redis_close(kvs_tier *t) {
    if (t && t->impl) redis_free(impl(t));
}

/* One row, under two names (stats and messages say which). */
#define REDIS_OPS_ROW(row_name)                                                                                  \
    {                                                                                                            \
        .name = row_name, .get_many = redis_get_many, .get_into = NULL, .put = redis_put,                        \
        .contains_many = redis_contains_many, .remove = redis_remove, .scan = redis_scan, .clear = redis_clear,  \
        .stats = redis_stats, .close = redis_close,                                                              \
    }
static const kvs_tier_ops redis_ops = REDIS_OPS_ROW("redis");
static const kvs_tier_ops redis_cluster_ops = REDIS_OPS_ROW("redis-cluster");

int kvs_tier_is_redis(const kvs_tier *t) { return t && (t->ops == &redis_ops || t->ops == &redis_cluster_ops); }

void kvs_redis_tier_default_params(kvs_redis_tier_params *p) {
    memset(p, 0, sizeof *p);
    p->codec = KVS_RV_CODEC_DEFAULT;
}

int kvs_redis_tier_open(const kvs_redis_tier_params *p, const kvs_key *fp, const kvs_kv_shape *shape,
                        kvs_tier **out) {
    if (!p || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_redis_tier_open: NULL argument");
    int st = !fp && !shape ? KVS_OK : !fp || !shape ? kvs_error(KVS_ERR_INVALID_ARG, "kvs_redis_tier_open: fingerprint and shape go together") : kvs_kv_shape_check(shape);
    if (st) return st;
    if ((unsigned)p->codec >= KVS_RV_CODEC_COUNT)
        return kvs_error(KVS_ERR_INVALID_ARG, "redis tier: unknown codec %d", (int)p->codec);
    redis_tier *rt = calloc(1, sizeof *rt);
    if (!rt) return kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory");
    pthread_mutex_init(&rt->why_mu, NULL);
    kvs_redis_policy_defaults(&rt->policy);
    if (p->timeout_ms > 0) rt->policy.timeout_ms = p->timeout_ms;
    if (p->breaker_failures > 0) rt->policy.breaker_failures = p->breaker_failures;
    if (p->breaker_open_ms > 0) rt->policy.breaker_open_ms = p->breaker_open_ms;
    if (p->min_mb_per_s > 0) rt->policy.min_mb_per_s = p->min_mb_per_s;
    if (fp) {
        rt->fp = *fp;
        rt->shape = *shape;
        rt->mac = p->mac;
        char hex[65];
        kvs_key_to_hex(fp, hex);
        snprintf(rt->key_prefix, sizeof rt->key_prefix, "kvs:%.16s:", hex);
        /* raw bytes: a compressed value is smaller, so the budget errs long */
        rt->expect_value_bytes = kvs_kv_payload_bytes(shape, p->chunk_tokens > 0 ? p->chunk_tokens : KVS_CHUNK_TOKENS_DEFAULT);
    } else {
        rt->any_model = 1; /* listing and clearing every model's keys */
        snprintf(rt->key_prefix, sizeof rt->key_prefix, "kvs:");
    }
    rt->max_value_bytes = p->max_value_bytes ? p->max_value_bytes : (size_t)64 << 20;
    /* GETRANGE asks limit + 1 bytes of a value at most: a reply past that
     * (and its framing) is no Redis answer (redis_conn.c, reply guards) */
    rt->policy.max_reply_bytes = rt->max_value_bytes + ((size_t)1 << 20);
    rt->codec = p->codec;
    rt->level = p->level ? p->level : KVS_RV_ZSTD_LEVEL_DEFAULT;
    rt->flush_timeout_ms = p->flush_timeout_ms > 0 ? p->flush_timeout_ms : 10000;
    st = kvs_redis_setup_endpoint(rt, p);
    if (!st)
        st = kvs_redis_writer_start(rt, p->queue_chunks > 0 ? p->queue_chunks : 256,
                                    p->queue_bytes ? p->queue_bytes : (size_t)256 << 20);
    if (st) {
        redis_free(rt);
        return st;
    }
    rt->tier.ops = rt->nodes.cluster ? &redis_cluster_ops : &redis_ops;
    rt->tier.impl = rt;
    *out = &rt->tier;
    return KVS_OK;
}

void kvs_redis_tier_get_stats(kvs_tier *t, kvs_redis_tier_stats *st) {
    redis_tier *rt = impl(t);
    memset(st, 0, sizeof *st);
    pthread_rwlock_rdlock(&rt->nodes.lock);
    st->nodes = rt->nodes.n_nodes;
    for (int i = 0; i < rt->nodes.n_nodes; i++)
        for (int w = 0; w < 2; w++) {
            kvs_redis_conn_counters *n = w ? &rt->nodes.node[i]->wr.n : &rt->nodes.node[i]->rd.n;
            st->connects += atomic_load(&n->connects);
            st->connect_fails += atomic_load(&n->connect_fails);
            st->op_fails += atomic_load(&n->op_fails);
            st->timeouts += atomic_load(&n->timeouts);
            st->skipped += atomic_load(&n->skipped);
            st->breaker_opens += atomic_load(&n->breaker_opens);
        }
    pthread_rwlock_unlock(&rt->nodes.lock);
    st->moved = atomic_load(&rt->nodes.moved);
    st->ask = atomic_load(&rt->nodes.ask);
    st->refreshes = atomic_load(&rt->nodes.refreshes);
    st->oversized = atomic_load(&rt->oversized);
    st->bad_removed = atomic_load(&rt->bad_removed);
    st->put_too_large = atomic_load(&rt->put_too_large);
    st->max_value_bytes = rt->max_value_bytes;
    st->markers = atomic_load(&rt->markers);
    st->marker_hits = atomic_load(&rt->marker_hits);
    pthread_mutex_lock(&rt->q_mu);
    st->queued = (uint64_t)(rt->q_len + rt->q_busy);
    st->queue_peak = rt->q_peak;
    pthread_mutex_unlock(&rt->q_mu);
}

int kvs_redis_tier_flush(kvs_tier *t, int timeout_ms) { return kvs_redis_writer_flush(impl(t), timeout_ms); }

void kvs_redis_note_refusal(redis_tier *rt, const char *what, const redisReply *r) {
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str) return;
    pthread_mutex_lock(&rt->why_mu);
    const int k = what[0] == 'w'; /* (each kind its own: a read's refusal had hidden a standing write's) */
    snprintf(rt->why_refused[k], sizeof rt->why_refused[k], "a %s was refused: %.*s", what, (int)r->len, r->str);
    atomic_fetch_or(&rt->refused_kinds, 1 << k);
    pthread_mutex_unlock(&rt->why_mu);
}

void kvs_redis_note_answered(redis_tier *rt, const char *what) {
    const int k = what[0] == 'w';
    if (!(atomic_load_explicit(&rt->refused_kinds, memory_order_relaxed) >> k & 1)) return;
    pthread_mutex_lock(&rt->why_mu);
    rt->why_refused[k][0] = 0;
    atomic_fetch_and(&rt->refused_kinds, ~(1 << k));
    pthread_mutex_unlock(&rt->why_mu);
}

/* The first node's last failure; words_only: only one in the server's
 * words (AUTH, SELECT), not the transport's (kvs_redis_why_is_transport). */
static void node_failure(redis_tier *rt, int words_only, char *out, size_t cap) {
    pthread_rwlock_rdlock(&rt->nodes.lock);
    for (int i = 0; i < rt->nodes.n_nodes && !out[0]; i++)
        for (int w = 0; w < 2 && !out[0]; w++) {
            kvs_redis_conn *c = w ? &rt->nodes.node[i]->wr : &rt->nodes.node[i]->rd;
            char why[192];
            kvs_redis_conn_last_failure(c, why, sizeof why);
            if (why[0] && !(words_only && kvs_redis_why_is_transport(why)))
                snprintf(out, cap, "redis %s:%d: %s", c->host, c->port, why);
        }
    pthread_rwlock_unlock(&rt->nodes.lock);
}

void kvs_redis_tier_why_down(kvs_tier *t, char *out, size_t cap) {
    redis_tier *rt = impl(t);
    out[0] = 0;
    node_failure(rt, 1, out, cap); /* the server's words first: a refused connect, */
    if (!out[0]) {                 /* a refused read or write, then a node not reached */
        pthread_mutex_lock(&rt->why_mu);
        const char *w = rt->why_refused[1], *r = rt->why_refused[0];
        if (*w || *r) snprintf(out, cap, "redis: %s%s%s", w, *w && *r ? "; " : "", r);
        pthread_mutex_unlock(&rt->why_mu);
    }
    if (!out[0]) node_failure(rt, 0, out, cap);
    if (!out[0]) { /* a cluster past the nodes this process keeps, or whose nodes gave no map */
        pthread_rwlock_rdlock(&rt->nodes.lock);
        if (rt->nodes.nodes_full[0]) snprintf(out, cap, "redis: %s", rt->nodes.nodes_full);
        else if (rt->nodes.slots_why[0]) snprintf(out, cap, "%s", rt->nodes.slots_why);
        pthread_rwlock_unlock(&rt->nodes.lock);
    }
    /* a Redis that wants a password refuses large values before any command
     * runs ("ERR Protocol error: unauthenticated bulk length"): say so */
    if ((strstr(out, "NOAUTH") || strstr(out, "unauthenticated")) && strlen(out) + 48 < cap)
        strcat(out, " (the server wants a password: none was given)");
}
