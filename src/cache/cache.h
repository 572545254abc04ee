/*
 * The public kvs_cache handle and what the request code of src/cache/ and src/rag/ shares:
 * a cache is one chunk store (src/kv/store.h) for one (model, KV dtype),
 * rooted in the model fingerprint (fingerprint.h), plus the chunking policy.
 *
 *   kvs_cache
 *   +-- model        not owned; must outlive the cache
 *   +-- fp           fingerprint of (model, kv_type): the root of every key
 *   +-- shape        (n_layer, n_kv_head, head_dim, kv_type) of every chunk
 *   +-- chunk_tokens the grid step of new chunks
 *   +-- store        chunks in memory (LRU, budget) + the cache dir
 *
 * The request path (prefix.c) copies cached KV straight into the context's
 * KV buffer (kvs_context_kv: the one kvs_kv_buffer type of engine and store).
 */
#ifndef KVS_REUSE_CACHE_H
#define KVS_REUSE_CACHE_H

#include "kv/store.h"
#include "kv/tier.h"
#include "kvstitch.h"

struct kvs_cache {
    kvs_model *model;
    kvs_key fp;
    kvs_kv_shape shape;
    int chunk_tokens;
    kvs_store *store;
    char *dir;          /* NULL: memory only */
    kvs_tier *redis;    /* the Redis tier, NULL if none (owned by the store) */
    kvs_entry_mac *mac; /* the cache key (entry_mac.h), NULL if none; fp is then the keyed
                         * fingerprint (fingerprint.h). Owned; freed after the store */
};

/* The Redis tier's counters into st (cache_redis.c; no-op without one). */
void kvs_cache_redis_stats(kvs_cache *c, kvs_cache_stats *st);

/* Opens the Redis tier of params (if any) and attaches it to the store
 * (cache_redis.c; called by kvs_cache_open after the store is open). */
int kvs_cache_open_redis(kvs_cache *c, const kvs_cache_params *p);

/* KVS_OK if ctx computes the KV this cache holds: same fingerprint (model
 * and numerics) and KV dtype. KVS_ERR_MODEL_MISMATCH otherwise. */
int kvs_reuse_check_context(kvs_context *ctx, kvs_cache *cache);

/* A listing entry for chunk c of the model with fingerprint fp (resident and
 * prefix_reachable left 0). */
void kvs_reuse_fill_entry(const kvs_chunk *c, const kvs_key *fp, kvs_cache_entry *e);

/* The verdict of reading c's entry in dir whole, as a request would:
 * KVS_DISK_OK, or why not (cache_dir.c; `cache stats --verify`). */
kvs_disk_verdict kvs_cache_payload_verdict(const char *dir, const kvs_key *fp, const kvs_entry_mac *mac,
                                           const kvs_chunk *c);

/* The end index of every chunk tokens [0, n) are cut into (chunking.h), as a
 * malloc'd array (*ends = NULL when n = 0). */
int kvs_reuse_chunk_ends(int n, int chunk_tokens, const int *borders, int n_borders, int32_t **ends, int *n_ends);

/* KVS_ERR_INVALID_ARG naming the first id outside the vocabulary. */
int kvs_reuse_check_tokens(const kvs_context *ctx, const int32_t *tokens, int n);
/* The same against a vocabulary of n_vocab ids (a call with a cache and no context). */
int kvs_cache_check_tokens(int n_vocab, const int32_t *tokens, int n);

#endif
