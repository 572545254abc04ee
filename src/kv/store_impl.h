/*
 * The store's private state, shared by the files that make it up, one job
 * each:
 *
 *   store.c         open/free, tier attach, insert, put_prefix, remove,
 *                   clear, tier sync, foreach
 *   store_index.c   the indexes: hash maps + radix tree, index add/remove,
 *                   radix paths of chunks found by a tier scan
 *   store_lru.c     the LRU lists, touches, eviction within the RAM budget
 *                   and of payload-less entries within the index bound
 *   store_fetch.c   payloads from the tiers below RAM (one place that reads
 *                   a tier, counts, and drops what fails)
 *   store_lookup.c  the one lookup path: RAM index, then tiers by key
 *   store_stats.c   statistics
 *
 * Locks: `lock` (rwlock) guards the indexes, SF_INDEXED and eviction;
 * `lru_mu` the LRU links and lru_flags (SF_IN_LRU, SF_IN_STUBS); `load_mu` payload transitions
 * (c->kv NULL <-> resident) of indexed chunks made under the read lock.
 */
#ifndef KVS_KV_STORE_IMPL_H
#define KVS_KV_STORE_IMPL_H

#include "kv/chunk_map.h"
#include "kv/radix.h"
#include "kv/store.h"
#include "kv/tier.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define SF_INDEXED 1u  /* in the maps (write lock) */
#define SF_VERIFIED 2u /* its tier entry verified past a hit (store_lookup.c step 5): not read there again
                        * (write lock) */
/* lru_flags (lru_mu) */
#define SF_IN_LRU 1u   /* in the resident chunks' LRU list */
#define SF_IN_STUBS 2u /* in the payload-less chunks' LRU list */

#define KVS_STORE_MAX_TIERS 8

struct kvs_store {
    kvs_key fp;
    kvs_kv_shape shape;
    size_t budget;
    int chunk_tokens;       /* grid of the chunks asked from tiers by key */

    kvs_tier *tiers[KVS_STORE_MAX_TIERS]; /* below RAM, in lookup order; owned */
    int n_tiers;
    kvs_tier *dir_tier;     /* the cache dir's tier (also in tiers[]), or NULL */

    pthread_rwlock_t lock;
    pthread_mutex_t lru_mu;
    pthread_mutex_t load_mu;

    /* Most recent first: [KVS_LRU_RESIDENT] chunks with a payload,
     * [KVS_LRU_STUBS] indexed chunks a tier holds, without one. */
    struct kvs_lru_list { kvs_chunk *head, *tail; } lru[2];
    /* Bound on the payload-less entries' struct and token bytes
     * (tier_meta_bytes): without one, a long-lived process indexed every
     * chunk it ever wrote to or read from Redis for good. */
    size_t stub_budget;
    kvs_chunk_map pmap, cmap;       /* by prefix key, by content key */
    kvs_radix *radix;

    _Atomic uint64_t entries, resident, bytes, tier_meta_bytes;
    _Atomic uint64_t lookups, hits, misses, hit_tokens, lookup_tokens, lookup_ns;
    _Atomic uint64_t inserts, insert_exists, insert_too_big, evictions, stub_drops;
    /* Eviction walks over the resident LRU list (stats), and what a walk
     * that found no chunk to evict left: evictable_events + 1 as it began
     * (store_lru.c), 0 once a walk ends within its target. While pins hold the store over
     * its budget, every lookup and release would walk the whole list under
     * the write lock to find nothing again: they skip the walk until a pin
     * is dropped or a chunk joins the list (lru_adds). */
    _Atomic uint64_t evict_walks, evict_stuck, lru_adds;
    /* per tier (index as tiers[]): the cache directory's are the stats'
     * disk_* (Redis had been counted there too) */
    _Atomic uint64_t tier_writes[KVS_STORE_MAX_TIERS], tier_write_errors[KVS_STORE_MAX_TIERS];
    _Atomic uint64_t tier_loads[KVS_STORE_MAX_TIERS], tier_load_bytes[KVS_STORE_MAX_TIERS],
        tier_load_ns[KVS_STORE_MAX_TIERS];
    _Atomic uint64_t tier_bad, tier_bad_mac, tier_foreign, tier_missing, tier_orphans, tier_key_hits;
    _Atomic uint64_t tier_partial_hits;
};

#define ADD(field, v) atomic_fetch_add_explicit(&(field), (uint64_t)(v), memory_order_relaxed)
#define SUB(field, v) atomic_fetch_sub_explicit(&(field), (uint64_t)(v), memory_order_relaxed)
#define GET(field) atomic_load_explicit(&(field), memory_order_relaxed)

uint64_t kvs_store_mono_ns(void);

/* The budget counts resident chunks whole (struct, token ids, payload). A
 * tier-only chunk's struct and tokens count as index memory instead: the
 * budget could not be met by evicting them (their payload is gone already). */
static inline size_t kvs_store_meta_bytes(const kvs_chunk *c) {
    return sizeof *c + (size_t)c->n_tok * sizeof(int32_t);
}
static inline size_t kvs_store_counted(const kvs_chunk *c) { return kvs_store_meta_bytes(c) + c->kv_bytes; }

/* --- store_index.c (write lock held unless said otherwise) --- */
void kvs_store_index_add(kvs_store *s, kvs_chunk *c);    /* takes the store's reference */
void kvs_store_index_remove(kvs_store *s, kvs_chunk *c); /* drops it */
/* Indexes a chunk served by a tier (payload or not) under its token path,
 * unless its key is indexed already. Takes the write lock. */
void kvs_store_index_from_tier(kvs_store *s, kvs_chunk *c, const int32_t *path, int tier); /* path NULL: keys only */
/* Puts every indexed chunk that is not prefix-reachable, and whose parent
 * chain resolves to the fingerprint, into the radix tree. */
void kvs_store_attach_paths(kvs_store *s);

/* --- store_lru.c --- */
enum { KVS_LRU_RESIDENT = 0, KVS_LRU_STUBS = 1 };
/* The default stub_budget: a share of the RAM budget, at least
 * KVS_STORE_STUB_BYTES_MIN (~100K chunks of 64 tokens). */
#define KVS_STORE_STUB_BYTES_MIN ((size_t)64 << 20)
size_t kvs_store_default_stub_budget(size_t budget);
void kvs_store_touch(kvs_store *s, kvs_chunk *c);       /* any lock */
void kvs_store_lru_front(kvs_store *s, kvs_chunk *c);   /* takes lru_mu; the list of c's kind */
void kvs_store_lru_unlink(kvs_store *s, kvs_chunk *c);  /* takes lru_mu */
size_t kvs_store_evict_locked(kvs_store *s, size_t target); /* then trims the stubs */
size_t kvs_store_trim_stubs_locked(kvs_store *s, size_t target); /* unpinned, oldest first */
void kvs_store_enforce_budget(kvs_store *s);            /* takes the write lock if over */

/* --- store_fetch.c --- */
typedef enum kvs_fetch_fault {
    KVS_FETCH_OK = 0,
    KVS_FETCH_GONE,      /* the tier no longer holds it */
    KVS_FETCH_DAMAGED,   /* found but failed verification (the tier dropped it) */
    KVS_FETCH_TRANSIENT, /* read error, no memory, tier down: not the entry's fault */
} kvs_fetch_fault;

/* Serves chunk tokens [off, off + n) of an indexed, pinned chunk: into kv
 * at slots [slot, slot + n) when kv is not NULL (straight from the tier if
 * it can, else via a resident payload), else makes it resident. */
kvs_fetch_fault kvs_store_fetch(kvs_store *s, kvs_chunk *c, const kvs_kv_buffer *kv, int off, int n, int slot);
/* The fault a tier status means (tier.h), and the counters of one fetch
 * (rc: the tier's status, which tells a bad MAC from other damage). */
kvs_fetch_fault kvs_store_fault_of(int rc);
void kvs_store_count_fetch(kvs_store *s, int tier, const kvs_chunk *c, int rc, uint64_t t0);
/* Reads a non-resident indexed chunk's entry whole and checks it (nothing
 * kept): how one request that met a damaged entry verifies the rest of its
 * path, so that every damaged one is dropped and stored again at once. */
kvs_fetch_fault kvs_store_verify(kvs_store *s, kvs_chunk *c);
/* Drops indexed chunks whose entries failed (out of the index, tier entry
 * removed). Takes the write lock; unrefs the pins. */
void kvs_store_drop(kvs_store *s, kvs_chunk **bad, int n);

#endif
