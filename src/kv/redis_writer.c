/*
 * The Redis tier's write path: put() pins the chunk and appends it to a
 * bounded ring (never blocking: a full ring drops the chunk and counts it);
 * one background thread takes up to WRITE_BATCH chunks at a time, encodes
 * them (redis_value.h) and SETs them in one pipeline per node on the
 * nodes' wr connections, so writes never wait behind a request's reads.
 *
 * A queued chunk is a reference to the store's chunk (a pin: its payload
 * stays resident and immutable, chunk.h), not a copy, so a put costs a
 * reference count; the queue's bound in bytes caps what it can pin.
 */
#include "kv/tier_redis_impl.h"

#include "base/error.h"
#include "kv/keys.h"
#include "kv/redis_marker.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WRITE_BATCH 16

typedef struct write_batch {
    redis_tier *rt;
    kvs_chunk *c[WRITE_BATCH];
    char key[WRITE_BATCH][KVS_REDIS_KEY_CAP];
    const char *keys[WRITE_BATCH];
    size_t key_len[WRITE_BATCH];
    uint8_t *val[WRITE_BATCH];
    size_t val_len[WRITE_BATCH];
    size_t moved[WRITE_BATCH];      /* bytes sent per SET: its node's deadline */
    kvs_chunk *src[WRITE_BATCH];    /* the chunk of item i */
    uint8_t stored[WRITE_BATCH];    /* item i's SET answered OK */
    uint64_t skipped;
} write_batch;

static int set_command(void *user, int i, const char **argv, size_t *argvlen) {
    write_batch *b = user;
    argv[0] = "SET";
    argvlen[0] = 3;
    argv[1] = b->keys[i];
    argvlen[1] = b->key_len[i];
    argv[2] = (const char *)b->val[i];
    argvlen[2] = b->val_len[i];
    return 3;
}

static void set_reply(void *user, int i, const redisReply *r) {
    write_batch *b = user;
    redis_tier *rt = b->rt;
    if (r && r->type == REDIS_REPLY_STATUS) {
        atomic_fetch_add(&rt->put_bytes, b->val_len[i]);
        b->stored[i] = 1;
        kvs_redis_note_answered(rt, "write");
    } else {
        atomic_fetch_add(&rt->put_errors, 1);
        kvs_redis_note_refusal(rt, "write", r); /* OOM over maxmemory, NOAUTH, READONLY... */
    }
}

/* --- partial-chunk markers (redis_marker.h) --- */

typedef struct marker_batch {
    redis_tier *rt;
    int n;
    char (*key)[KVS_REDIS_KEY_CAP];
    const char **keys;
    size_t *key_len;
    uint8_t (*val)[KVS_RM_BYTES];
} marker_batch;

/* SET of a marker unless a chunk is stored under its key (a chunk's value
 * starts "KVSR"): it overwrites an older marker (redis_marker.h). A key of
 * another type makes GETRANGE, and so the script, fail: nothing written. */
static const char set_marker_script[] =
    "if redis.call('GETRANGE', KEYS[1], 0, 3) == 'KVSR' then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) return 1";

static int set_marker_command(void *user, int i, const char **argv, size_t *argvlen) {
    marker_batch *b = user;
    argv[0] = "EVAL";
    argvlen[0] = 4;
    argv[1] = set_marker_script;
    argvlen[1] = sizeof set_marker_script - 1;
    argv[2] = "1";
    argvlen[2] = 1;
    argv[3] = b->keys[i];
    argvlen[3] = b->key_len[i];
    argv[4] = (const char *)b->val[i];
    argvlen[4] = KVS_RM_BYTES;
    return 5;
}

static void set_marker_reply(void *user, int i, const redisReply *r) {
    marker_batch *b = user;
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1) atomic_fetch_add(&b->rt->markers, 1);
}

/* The markers of the chunks stored (kvs_rm_lengths of each), one pipeline
 * per node. Best effort: a marker lost costs a partial hit only. */
static void write_markers(redis_tier *rt, kvs_chunk *const *chunks, int n) {
    int lens[KVS_RM_MAX], total = 0;
    for (int i = 0; i < n; i++) total += kvs_rm_lengths(chunks[i]->n_tok, lens);
    if (!total) return;
    marker_batch b = {.rt = rt};
    b.key = malloc((size_t)total * sizeof *b.key);
    b.keys = malloc((size_t)total * sizeof *b.keys);
    b.key_len = malloc((size_t)total * sizeof *b.key_len);
    b.val = malloc((size_t)total * sizeof *b.val);
    if (b.key && b.keys && b.key_len && b.val) {
        for (int i = 0; i < n; i++) {
            const kvs_chunk *c = chunks[i];
            kvs_key named[KVS_RM_MAX];
            const int m = kvs_rm_lengths(c->n_tok, lens);
            kvs_key_prefix_at(&c->parent_key, c->tokens, lens, m, named);
            for (int k = 0; k < m; k++) {
                kvs_rm_marker mk = {lens[k], c->n_tok, named[k], c->prefix_key, rt->fp};
                kvs_rm_encode(&mk, b.val[b.n]);
                b.key_len[b.n] = kvs_redis_make_key(rt, &mk.named, b.key[b.n]);
                b.keys[b.n] = b.key[b.n];
                b.n++;
            }
        }
        kvs_redis_batch batch = {b.n, b.keys, b.key_len, set_marker_command, set_marker_reply, &b, 1, NULL};
        if (b.n) kvs_redis_run_batch(&rt->nodes, &batch, NULL);
    }
    free(b.key);
    free(b.keys);
    free(b.key_len);
    free(b.val);
}

static void write_chunks(redis_tier *rt, kvs_chunk **chunks, int n) {
    write_batch b;
    memset(&b, 0, sizeof b);
    b.rt = rt;
    int m = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *v;
        size_t len;
        if (kvs_rv_encode(&rt->fp, chunks[i], rt->codec, rt->level, rt->mac, &v, &len)) {
            atomic_fetch_add(&rt->put_errors, 1);
            continue;
        }
        if (len > rt->max_value_bytes) { /* readers would reject it: do not store it */
            free(v);
            atomic_fetch_add(&rt->put_dropped, 1);
            atomic_fetch_add(&rt->put_too_large, 1);
            continue;
        }
        b.key_len[m] = kvs_redis_make_key(rt, &chunks[i]->prefix_key, b.key[m]);
        b.keys[m] = b.key[m];
        b.val[m] = v;
        b.val_len[m] = len;
        b.moved[m] = len + b.key_len[m];
        b.src[m] = chunks[i];
        m++;
    }
    kvs_redis_batch batch = {m, b.keys, b.key_len, set_command, set_reply, &b, 1, b.moved};
    kvs_redis_batch_counts cnt = {0};
    if (m && kvs_redis_run_batch(&rt->nodes, &batch, &cnt)) atomic_fetch_add(&rt->put_errors, (uint64_t)m);
    /* Items a node's breaker or backoff skipped were dropped by design,
     * not failed: move them from put_errors to put_dropped. */
    if (cnt.skipped) {
        atomic_fetch_sub(&rt->put_errors, cnt.skipped);
        atomic_fetch_add(&rt->put_dropped, cnt.skipped);
    }
    for (int i = 0; i < m; i++) free(b.val[i]);
    int stored = 0;
    for (int i = 0; i < m; i++)
        if (b.stored[i]) b.src[stored++] = b.src[i];
    write_markers(rt, b.src, stored);
}

_Static_assert(sizeof ((redis_tier *)0)->q_taken / sizeof(kvs_chunk *) == WRITE_BATCH, "q_taken holds a batch");

static void *writer_main(void *arg) {
    redis_tier *rt = arg;
    kvs_chunk **batch = rt->q_taken;
    pthread_mutex_lock(&rt->q_mu);
    for (;;) {
        while (!rt->q_len && !rt->q_stop) pthread_cond_wait(&rt->q_cv, &rt->q_mu);
        if (rt->q_stop) break;
        int n = 0;
        size_t bytes = 0;
        while (rt->q_len && n < WRITE_BATCH) {
            batch[n] = rt->q[rt->q_head];
            bytes += batch[n]->kv_bytes;
            n++;
            rt->q_head = (rt->q_head + 1) % rt->q_cap;
            rt->q_len--;
        }
        rt->q_busy = n;
        pthread_mutex_unlock(&rt->q_mu);
        write_chunks(rt, batch, n);
        pthread_mutex_lock(&rt->q_mu);
        for (int i = 0; i < n; i++) kvs_chunk_unref(batch[i]); /* (under the lock: kvs_redis_writer_pending reads them) */
        rt->q_bytes -= bytes;
        rt->q_busy = 0;
        if (!rt->q_len) pthread_cond_broadcast(&rt->q_idle);
    }
    pthread_mutex_unlock(&rt->q_mu);
    return NULL;
}

int kvs_redis_writer_start(redis_tier *rt, int queue_chunks, size_t queue_bytes) {
    rt->q_cap = queue_chunks;
    rt->q_max_bytes = queue_bytes;
    rt->q = calloc((size_t)queue_chunks, sizeof *rt->q);
    if (!rt->q) return kvs_error(KVS_ERR_NOMEM, "redis tier: out of memory for the write queue");
    pthread_mutex_init(&rt->q_mu, NULL);
    pthread_cond_init(&rt->q_cv, NULL);
    pthread_cond_init(&rt->q_idle, NULL);
    if (pthread_create(&rt->writer, NULL, writer_main, rt))
        return kvs_error(KVS_ERR_IO, "redis tier: cannot start the writer thread");
    rt->writer_started = 1;
    return KVS_OK;
}

int kvs_redis_writer_pending(redis_tier *rt, const kvs_key *prefix_key) {
    if (!rt->writer_started) return 0;
    int found = 0;
    pthread_mutex_lock(&rt->q_mu);
    for (int i = 0; i < rt->q_len && !found; i++)
        found = kvs_key_equal(&rt->q[(rt->q_head + i) % rt->q_cap]->prefix_key, prefix_key);
    for (int i = 0; i < rt->q_busy && !found; i++) found = kvs_key_equal(&rt->q_taken[i]->prefix_key, prefix_key);
    pthread_mutex_unlock(&rt->q_mu);
    return found;
}

int kvs_redis_writer_put(redis_tier *rt, const kvs_chunk *c) {
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "redis tier: put of a chunk without payload");
    atomic_fetch_add(&rt->puts, 1);
    pthread_mutex_lock(&rt->q_mu);
    int full = rt->q_len >= rt->q_cap || (rt->q_len && rt->q_bytes + c->kv_bytes > rt->q_max_bytes) || rt->q_stop;
    if (!full) {
        rt->q[(rt->q_head + rt->q_len) % rt->q_cap] = kvs_chunk_ref((kvs_chunk *)c);
        rt->q_len++;
        rt->q_bytes += c->kv_bytes;
        if ((uint64_t)rt->q_len > rt->q_peak) rt->q_peak = (uint64_t)rt->q_len;
        pthread_cond_signal(&rt->q_cv);
    }
    pthread_mutex_unlock(&rt->q_mu);
    if (full) atomic_fetch_add(&rt->put_dropped, 1);
    return KVS_OK;
}

int kvs_redis_writer_flush(redis_tier *rt, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&rt->q_mu);
    while ((rt->q_len || rt->q_busy) && pthread_cond_timedwait(&rt->q_idle, &rt->q_mu, &dl) == 0) {
    }
    int empty = !rt->q_len && !rt->q_busy;
    pthread_mutex_unlock(&rt->q_mu);
    return empty;
}

void kvs_redis_writer_stop(redis_tier *rt) {
    if (!rt->q) return;
    if (rt->writer_started) {
        kvs_redis_writer_flush(rt, rt->flush_timeout_ms);
        pthread_mutex_lock(&rt->q_mu);
        rt->q_stop = 1;
        pthread_cond_broadcast(&rt->q_cv);
        pthread_mutex_unlock(&rt->q_mu);
        pthread_join(rt->writer, NULL);
    }
    for (; rt->q_len; rt->q_len--) {
        kvs_chunk_unref(rt->q[rt->q_head]);
        rt->q_head = (rt->q_head + 1) % rt->q_cap;
        atomic_fetch_add(&rt->put_dropped, 1);
    }
    free(rt->q);
    rt->q = NULL;
    pthread_cond_destroy(&rt->q_cv);
    pthread_cond_destroy(&rt->q_idle);
    pthread_mutex_destroy(&rt->q_mu);
}
