/* Private state of the Redis tiers, shared by tier_redis.c (ops, open),
 * redis_writer.c (the write queue and its thread) and redis_url.c. */
#ifndef KVS_KV_TIER_REDIS_IMPL_H
#define KVS_KV_TIER_REDIS_IMPL_H

#include "kv/redis_pipe.h"
#include "kv/tier_redis.h"

#include <pthread.h>
#include <stdatomic.h>

#define KVS_REDIS_KEY_CAP 96

typedef struct redis_tier {
    kvs_tier tier;                 /* tier.impl points back here */
    kvs_redis_policy policy;       /* user / password point into the strings below */
    char *user, *password;
    kvs_redis_nodes nodes;
    kvs_key fp;
    kvs_kv_shape shape;
    const kvs_entry_mac *mac;      /* NULL: keyless (not owned) */
    int any_model;                 /* opened without a fingerprint: scan / clear of "kvs:*" only */
    char key_prefix[32];           /* "kvs:<fp16>:" */
    size_t max_value_bytes;
    size_t expect_value_bytes;     /* a full grid chunk's raw KV: what a read budgets per key */
    kvs_rv_codec codec;
    int level;
    int flush_timeout_ms;

    /* Write queue: a ring of pinned chunk references (redis_writer.c). */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;           /* items arrived / stop */
    pthread_cond_t q_idle;         /* queue drained */
    kvs_chunk **q;
    int q_cap, q_head, q_len;
    size_t q_bytes, q_max_bytes;
    int q_busy;                    /* chunks the writer took and has not finished: */
    kvs_chunk *q_taken[16];        /* those (WRITE_BATCH), pinned until q_busy is 0 again */
    int q_stop;
    uint64_t q_peak;
    pthread_t writer;
    int writer_started;

    /* Counters (tier.h's common ones, then Redis-specific). */
    _Atomic uint64_t gets, hits, misses, get_bytes, get_ns;
    _Atomic uint64_t puts, put_errors, put_dropped, put_bytes;
    _Atomic uint64_t put_too_large; /* of put_dropped: values past max_value_bytes */
    _Atomic uint64_t bad, bad_mac, foreign, errors, oversized;
    _Atomic uint64_t bad_removed;  /* damaged values a read met and removed (redis_drop.h) */
    _Atomic uint64_t markers, marker_hits; /* partial-chunk markers written, read to a chunk (redis_marker.h) */
    pthread_mutex_t why_mu;
    char why_refused[2][192];      /* the last error a read [0] / write [1] got ("NOAUTH ..."), "" if none */
    atomic_int refused_kinds;      /* bit k: why_refused[k] is set */
} redis_tier;

/* The key of prefix_key: key_prefix + 64 hex digits. Returns its length. */
size_t kvs_redis_make_key(const redis_tier *rt, const kvs_key *prefix_key, char *buf);

/* Keeps the words of an error reply to a read or write (what: "read",
 * "write") for kvs_redis_tier_why_down; other replies are ignored. */
void kvs_redis_note_refusal(redis_tier *rt, const char *what, const redisReply *r);
/* A read or write (what) the server answered: a refusal of the same kind
 * noted before is over ("" again: a failover's CLUSTERDOWN had stayed in
 * redis_why_down after the cluster was back). Cheap when none is noted. */
void kvs_redis_note_answered(redis_tier *rt, const char *what);

/* Writer (redis_writer.c). */
int kvs_redis_writer_start(redis_tier *rt, int queue_chunks, size_t queue_bytes);
/* 1 if a chunk under prefix_key is queued or being written (its SET not
 * answered yet): a put's check of its parent takes it as held, where
 * Redis alone would say absent. */
int kvs_redis_writer_pending(redis_tier *rt, const kvs_key *prefix_key);
int kvs_redis_writer_put(redis_tier *rt, const kvs_chunk *c);
int kvs_redis_writer_flush(redis_tier *rt, int timeout_ms);
void kvs_redis_writer_stop(redis_tier *rt); /* bounded flush, then stop and drop the rest */

/* URL and password (redis_url.c): fills rt->nodes / user / password / db. */
int kvs_redis_setup_endpoint(redis_tier *rt, const kvs_redis_tier_params *p);

#endif
