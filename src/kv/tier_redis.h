/*
 * The Redis and Redis Cluster tiers (one kvs_tier_ops row, two open modes).
 *
 *   get_many ----> redis_pipe: GETRANGE key 0 <limit> for every key, one
 *                  pipeline per node -> redis_value decode + checks -> chunk
 *                  (a partial-chunk marker: one more batch for the chunks
 *                  the markers name, redis_marker.h)
 *   put --------> bounded queue (pinned chunk refs) --> writer thread:
 *                  encode (redis_value) -> SET pipelines on the wr conns,
 *                  then SET NX of each stored chunk's markers
 *   contains/remove: EXISTS / DEL pipelines; scan / clear: SCAN MATCH on
 *                  every master (never FLUSHALL, never another prefix)
 *
 * Keys: "kvs:<first 16 hex digits of the model fingerprint>:<prefix key hex>".
 * The prefix key alone is unique (SHA-256 rooted in the fingerprint); the
 * fingerprint part lets `cache ls/clear` find one model's keys with
 * SCAN MATCH kvs:<fp16>:* and `kvs:` keeps the project's keys apart from
 * everything else in a shared Redis. No hash tag: the chunks of one prompt
 * spread over all masters (load and memory balance; a lookup still costs
 * one round trip per node, sent to all nodes at once).
 *
 * Reads use GETRANGE with the value limit, so an oversized value costs at
 * most limit + 1 bytes of memory, is counted as bad and never decoded.
 *
 * Eviction is Redis's: configure maxmemory and maxmemory-policy allkeys-lru
 * (a missing chunk is a miss; the reuse ends before it and the rest is
 * computed). Writes are SET without expiry.
 *
 * Failure policy (redis_conn.h): per-operation timeout, a budget that grows
 * with the bytes a batch moves (a read expects chunk_tokens tokens of the
 * KV shape per key), reconnect with backoff, circuit breaker. A down, slow
 * or garbage-answering Redis makes lookups misses and writes drops; no op
 * blocks longer than its budget (put never blocks at all).
 */
#ifndef KVS_KV_TIER_REDIS_H
#define KVS_KV_TIER_REDIS_H

#include "kv/redis_value.h"
#include "kv/tier.h"

#include <stddef.h>
#include <stdint.h>

#define KVS_REDIS_PASSWORD_ENV "KVSTITCH_REDIS_PASSWORD"

typedef struct kvs_redis_tier_params {
    const char *url;           /* redis://[user[:password]@]host[:port][/db] (port 6379, db 0) */
    const char *cluster;       /* or: host:port[,host:port...] (any nodes of the cluster) */
    const char *password_file; /* optional: the password is the first line of this file */
    /* Without a password in the URL or a file, KVSTITCH_REDIS_PASSWORD is used if set. */
    int timeout_ms;            /* per socket operation (0 = 50); large batches get more (redis_conn.h) */
    int min_mb_per_s;          /* slowest transfer a batch of large values may have (0 = 50) */
    int chunk_tokens;          /* the store's chunk grid: the value size a read expects (0 = 64) */
    int breaker_failures;      /* 0 = 3 */
    int breaker_open_ms;       /* 0 = 2000 */
    size_t max_value_bytes;    /* values above it are never read whole (0 = 64 MiB) */
    int queue_chunks;          /* write queue bound in chunks (0 = 256) */
    size_t queue_bytes;        /* and in payload bytes (0 = 256 MiB) */
    int flush_timeout_ms;      /* close waits at most this for queued writes (0 = 10000) */
    kvs_rv_codec codec;        /* value codec (KVS_RV_CODEC_DEFAULT) */
    int level;                 /* zstd level (0 = KVS_RV_ZSTD_LEVEL_DEFAULT) */
    const kvs_entry_mac *mac;  /* NULL, or the cache key: values are written with their MAC and
                                  this model's are served only if it verifies (redis_value.h);
                                  not owned, must outlive the tier */
} kvs_redis_tier_params;

void kvs_redis_tier_default_params(kvs_redis_tier_params *p);

/* Opens the tier for one fingerprint + KV shape (both NULL: every model's
 * keys, for scan and clear only: `cache ls/clear` without a model). Fails only for bad
 * parameters (a malformed URL, an unreadable password file): an unreachable
 * Redis opens fine and behaves as an empty tier until it answers. */
int kvs_redis_tier_open(const kvs_redis_tier_params *p, const kvs_key *fingerprint, const kvs_kv_shape *shape,
                        kvs_tier **out);

/* scan with each value's fingerprint and size (for listing every model).
 * *n_bad (optional) += values whose header fails its checks. */
typedef int (*kvs_redis_visit_fp_fn)(void *user, kvs_chunk *chunk, const kvs_key *fp, uint64_t value_bytes);
int kvs_redis_tier_scan_fp(kvs_tier *t, kvs_redis_visit_fp_fn fn, void *user, uint64_t *n_bad);

/* Redis-specific counters (tier stats have the common ones). */
typedef struct kvs_redis_tier_stats {
    uint64_t connects, connect_fails, op_fails, timeouts, skipped, breaker_opens;
    uint64_t moved, ask, refreshes;
    uint64_t queued, queue_peak;   /* chunks waiting now, most ever */
    uint64_t oversized;            /* values over max_value_bytes (also in bad) */
    uint64_t bad_removed;          /* damaged values a read met and removed (redis_drop.h) */
    uint64_t put_too_large;        /* chunks whose value would pass max_value_bytes: not
                                    * written (also in the tier's put_dropped) */
    uint64_t max_value_bytes;      /* the limit in force */
    uint64_t markers;              /* partial-chunk markers written (redis_marker.h) */
    uint64_t marker_hits;          /* reads that a marker led to a longer chunk */
    int nodes;                     /* nodes known (cluster: masters and replicas met) */
} kvs_redis_tier_stats;

/* kvs_redis_tier_stats of t (t must be a Redis tier). */
void kvs_redis_tier_get_stats(kvs_tier *t, kvs_redis_tier_stats *st);
/* Waits until the write queue is empty (at most timeout_ms). 1 if empty. */
int kvs_redis_tier_flush(kvs_tier *t, int timeout_ms);
/* "redis HOST:PORT: <why>" of the first node whose last connect failed
 * (the server's words where it gave some: "AUTH: WRONGPASS ..."), "" if
 * every node's last connect worked. */
void kvs_redis_tier_why_down(kvs_tier *t, char *out, size_t cap);
/* 1 if t is a Redis or Redis Cluster tier. */
int kvs_tier_is_redis(const kvs_tier *t);
/* The key of prefix_key in t: "kvs:<fp16>:<hex>" (buf >= 96 bytes). */
void kvs_redis_tier_key(const kvs_tier *t, const kvs_key *prefix_key, char *buf);

#endif
