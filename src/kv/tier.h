/*
 * Storage tiers below the RAM store: one small vtable, one row per kind
 * (directory, Redis, Redis Cluster, ...). The store (store.h) keeps the index,
 * the RAM budget and the LRU; it reaches every tier below RAM only through
 * this interface, in order:
 *
 *   lookup:  RAM index --miss--> tier[0] --miss--> tier[1] ... --miss--> compute
 *            (by prefix key: the prompt's grid chunks past the RAM hit, one
 *            batched call per tier, then one contains_many per tier for the
 *            partial tails of the chunk where they stop; no scan needed, see
 *            store_lookup.c)
 *   insert:  RAM + put() on every tier (a tier may queue the write)
 *   attach:  kvs_store_attach_tier (store.h); the store owns and closes it
 *
 * A tier stores whole chunks (identity + tokens + payload) under the chunk's
 * prefix key, for one model fingerprint and one KV shape (given at open).
 * Everything a tier returns has been verified on its own: magic, version,
 * fingerprint, shape, keys recomputed from the tokens, checksums. A damaged,
 * truncated, oversized or foreign value is never returned: it is counted,
 * dropped where the tier can drop it, and reported as a miss (the request
 * recomputes). A tier that is down, slow or answering garbage behaves as a
 * miss too (bounded latency is the tier's job: timeouts, circuit breaker).
 *
 *   struct kvs_tier  +-- ops   (const kvs_tier_ops *: the row)
 *                    +-- impl  (the row's private state)
 *
 * Thread-safety: every op may be called from any thread concurrently,
 * except close (no op may run concurrently with it).
 *
 * Adding a tier: one new file with its ops row and an open function that
 * fills a kvs_tier; the store needs no change (tests/test_tiers.c plugs a
 * dummy one in that way). Rows: tier_dir.c (the cache directory).
 */
#ifndef KVS_KV_TIER_H
#define KVS_KV_TIER_H

#include "kv/chunk.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvs_tier kvs_tier;

/* Counters every tier keeps (monotonic since open). Tier-specific figures
 * go into the tier's own stats call; these are what `cache stats` and
 * /metrics show for every tier alike. */
typedef struct kvs_tier_stats {
    uint64_t gets, hits, misses;       /* get/get_many keys asked, found valid, not found */
    uint64_t get_bytes;                /* payload bytes returned */
    double get_seconds;
    uint64_t puts, put_errors;         /* puts done (or queued), failed */
    uint64_t put_dropped;              /* not written by design (queue full, breaker open) */
    uint64_t put_bytes;
    uint64_t bad;                      /* damaged values found (never served) */
    uint64_t bad_mac;                  /* of bad: refused by the MAC check of a keyed cache
                                        * (entry_mac.h): a forgery, or written without the key */
    uint64_t foreign;                  /* another model's / shape's values, skipped */
    uint64_t errors;                   /* I/O or connection errors (each a miss) */
    uint64_t entries;                  /* entries held, if the tier knows cheaply (else 0) */
    uint64_t bytes;                    /* bytes held, if the tier knows cheaply (else 0) */
} kvs_tier_stats;

/* Called by scan for each valid entry: chunk without payload (the callee
 * takes the reference). A nonzero return stops the scan. */
typedef int (*kvs_tier_visit_fn)(void *user, kvs_chunk *chunk);

enum { KVS_TIER_ABSENT = 0, KVS_TIER_HELD = 1, KVS_TIER_UNKNOWN = 2 }; /* contains_many's answers */

typedef struct kvs_tier_ops {
    const char *name; /* "dir", "redis", "redis-cluster": in stats and messages */

    /* n chunks by prefix key in one round trip where the tier can batch
     * (Redis: one pipeline per node). out[i] = a new resident chunk (caller
     * owns the reference) or NULL (missing, damaged, foreign, error); a
     * tier may answer a key of a chunk's first tokens with that longer
     * chunk (Redis's partial-chunk markers, redis_marker.h): its prefix
     * key is then its own, and the caller uses the part the key names. The
     * keys of a lookup are one prompt's chain and only the leading run of
     * hits is used, so a tier may stop at its first miss (NULL after it).
     * Returns KVS_OK even when some or all are missing; an error status
     * only for bad arguments or out of memory (out[] all NULL then). */
    int (*get_many)(kvs_tier *t, const kvs_key *prefix_keys, int n, kvs_chunk **out);

    /* Optional (NULL = the store uses get_many + kvs_chunk_copy_to_kv):
     * reads chunk tokens [off, off + n) of c's entry (c: identity, no
     * payload needed) straight into slots [slot, slot + n) of kv, verifying
     * the entry whole and that it describes c. KVS_OK, or a status for a
     * miss (nothing valid written: the slots hold undefined bytes):
     * KVS_ERR_NOT_FOUND the entry is gone; KVS_ERR_IO / KVS_ERR_NOMEM not
     * the entry's fault (it stays); any other status: damaged (dropped). */
    int (*get_into)(kvs_tier *t, const kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot);

    /* Optional (NULL = get_many): the verified payload of c's entry in a
     * new 64-byte-aligned buffer of c->kv_bytes (*payload, caller frees).
     * Statuses as get_into. */
    int (*load)(kvs_tier *t, const kvs_chunk *c, void **payload);

    /* Stores a resident chunk. May be asynchronous (the tier copies what it
     * needs before returning; the caller may drop its reference at once).
     * KVS_OK means written or queued, never "failed silently": a write that
     * fails later is counted in put_errors. */
    int (*put)(kvs_tier *t, const kvs_chunk *c);

    /* present[i] = KVS_TIER_HELD if prefix_keys[i] is held (cheap check, may
     * be stale), KVS_TIER_ABSENT if not, KVS_TIER_UNKNOWN if the tier gave
     * no answer for it (a Redis timeout): a reader takes that as not held,
     * a writer must not take it as absent. */
    int (*contains_many)(kvs_tier *t, const kvs_key *prefix_keys, int n, uint8_t *present);

    /* Removes one entry: KVS_OK, or KVS_ERR_NOT_FOUND. */
    int (*remove)(kvs_tier *t, const kvs_key *prefix_key);

    /* Optional (NULL = the tier cannot list its entries cheaply): every
     * valid entry of this tier's model, headers only. */
    int (*scan)(kvs_tier *t, kvs_tier_visit_fn fn, void *user);

    /* Removes every entry that belongs to this project (never anything
     * else: a Redis tier deletes its key prefix only). *n_removed optional. */
    int (*clear)(kvs_tier *t, uint64_t *n_removed);

    void (*stats)(kvs_tier *t, kvs_tier_stats *st);

    /* Flushes queued writes (bounded wait) and frees the tier. */
    void (*close)(kvs_tier *t);
} kvs_tier_ops;

/* What get_into and load return for an entry that failed the MAC check of
 * a keyed tier: damage like any other (kvs_store_fault_of: dropped), told
 * apart so that the store counts bad MACs of their own (disk_bad_mac). The
 * store never lets it out: callers above it see faults, not statuses. */
#define KVS_TIER_ERR_BAD_MAC (-1000)

struct kvs_tier {
    const kvs_tier_ops *ops;
    void *impl;
};

/* Convenience wrappers: NULL-safe on optional ops. */
static inline int kvs_tier_get_many(kvs_tier *t, const kvs_key *keys, int n, kvs_chunk **out) {
    return t->ops->get_many(t, keys, n, out);
}
static inline int kvs_tier_put(kvs_tier *t, const kvs_chunk *c) { return t->ops->put(t, c); }
static inline void kvs_tier_close(kvs_tier *t) {
    if (t && t->ops) t->ops->close(t);
}

#endif
