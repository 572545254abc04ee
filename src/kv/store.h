/*
 * The chunk store: chunks of one model (one fingerprint, one KV shape) in
 * memory within a byte budget, backed by storage tiers below RAM (tier.h:
 * the cache directory first, then any attached, e.g. Redis).
 *
 *   kvs_store
 *   +-- prefix map   prefix_key  -> chunk     (identity; dedup)
 *   +-- content map  content_key -> chunk(s)  (non-prefix reuse)
 *   +-- radix tree   token paths, chunks hanging at their end depth (radix.h)
 *   +-- LRU list     resident chunks, most recent first
 *   +-- tiers[]      below RAM, in order (tier_dir.h: DIR/<prefix hex>.kvc);
 *                    written through on insert, asked in order on lookup
 *
 * The files, one job each (store_impl.h): store.c (open, attach, insert,
 * put, remove, clear, sync), store_index.c, store_lru.c, store_fetch.c,
 * store_lookup.c (the one lookup path), store_stats.c.
 *
 * Reuse. kvs_store_lookup_prefix() answers "which cached KV covers the
 * longest prefix of these tokens" with segments (chunk, tokens [from, to)).
 * Any part of a chunk can serve: the KV of token t depends only on tokens
 * 0..t, so a chunk whose path agrees with the prompt up to token m holds the
 * exact KV of its tokens before m. A reuse can thus stop at any token, on or
 * off the chunk grid. kvs_prefix_hit_copy_to_kv() then copies the KV into
 * the engine's buffer at slot = position. Past what the RAM index covers,
 * the lookup asks the tiers for the prompt's grid chunks by prefix key,
 * then for the shorter lengths of the chunk where they stop (a prompt's
 * partial tail: store_lookup.c), so a tier that was never scanned serves too.
 *
 * Eviction. Resident chunks form one LRU list; when the bytes they count
 * (chunk struct, token ids and payload of every resident chunk) exceed the
 * budget, the least recently used chunks that nobody pins are evicted: a chunk a
 * tier holds only drops its payload (it stays indexed and is reloaded on the next
 * hit), a memory-only chunk leaves every index. A prefix hit touches its
 * chunks from the last to the first, and kvs_store_insert_chain() inserts
 * likewise, so within a chain the later chunks are evicted first. The
 * budget is enforced by inserts and by loads; pins can hold the store above
 * it until the next of those (or kvs_store_trim). The index of disk-only
 * chunks (struct + tokens, ~0.5 KB a chunk) is reported as index_bytes; they
 * form a second LRU list, bounded by stub_bytes: past it the least recently
 * used unpinned ones leave the index (stub_drops). Their tier keeps them, and
 * a lookup finds their grid chunks there by key (an off-grid one, e.g. after
 * a segment border, needs a marker or kvs_store_sync_disk to be found again).
 *
 * Descendants of an evicted chunk (chunks further down the same token path)
 * are KEPT: they stay in the radix tree and the content map. A prefix lookup
 * cannot reach them (the coverage it returns has a hole at the evicted chunk
 * and stops there), but a content-key lookup can, and when the missing chunk
 * is stored again (the next request that recomputes it) the whole chain is
 * reachable by prefix once more without recomputing the rest. They are never
 * touched by prefix hits while unreachable, so the LRU retires them in turn.
 * At open, entries of the cache directory whose parent chain is broken are
 * indexed the same way: by content key, not in the radix tree (their token
 * path cannot be rebuilt); kvs_store_sync_disk attaches them once the
 * missing parent has been stored again.
 *
 * The request path (src/cache/prefix.c, kvs_generate_cached, does exactly this):
 *
 *   kvs_prefix_hit hit;
 *   kvs_store_lookup_into(store, prompt, n - 1, kv, &hit); // >= 1 live token for the logits
 *   ... prefill prompt[hit.n_cached .. n) at positions hit.n_cached .. n-1 ...
 *   kvs_prefix_hit_release(&hit);
 *   kvs_store_put_prefix(store, prompt, n, 64, borders, n_borders, kv, &report);
 *
 * (or kvs_store_lookup_prefix + kvs_prefix_hit_copy_to_kv in a long-lived
 * process that wants loaded payloads to stay resident for later requests).
 *
 * Pinning. A chunk is pinned while someone other than the store holds a
 * reference: every lookup returns pinned chunks; kvs_prefix_hit_release()
 * and kvs_chunk_unref() unpin. Pinned chunks are never evicted, and their
 * payload stays valid and immutable. A chunk removed from the store while
 * pinned lives until its last reference goes.
 *
 * Thread-safety. Every kvs_store_* call is safe from any thread at any time
 * except kvs_store_open/free (no call may run concurrently with free).
 * Lookups share a read lock and run in parallel; insert, remove, clear,
 * eviction and the indexing step of disk sync take the write lock (file
 * writes and header reads happen before it, unlocked). LRU touches happen
 * under the read lock with a small mutex. kvs_store_lookup_prefix makes disk
 * payloads resident under the read lock, one load at a time (a mutex), so a
 * writer waits for a load in progress; kvs_store_lookup_into reads into the
 * caller's buffer outside every lock (its chunks are pinned), and so do the
 * tier reads by key (what they serve is indexed afterwards, write lock). Statistics
 * are atomics (a snapshot is consistent per field, not across fields).
 *
 * Processes. Several processes may share a cache directory: files appear by
 * atomic rename, every read is verified (disk.h). A lookup finds other
 * processes' new grid chunks (and tails) by key; kvs_store_sync_disk() indexes all
 * their entries (off-grid tails too). An entry removed by another process
 * (or evicted by the directory's byte bound, disk_budget.h) is dropped
 * (counted as missing) when a lookup tries to load it. A damaged or missing
 * entry ends the hit and makes the lookup verify the rest of the prompt's
 * indexed path, so that one request drops, recomputes and stores them all.
 */
#ifndef KVS_KV_STORE_H
#define KVS_KV_STORE_H

#include "kv/chunk.h"
#include "kv/disk.h"
#include "kv/tier.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kvs_store kvs_store;

/* Positive soft outcomes of insert. */
#define KVS_STORE_EXISTS 1   /* a chunk with this prefix key is stored already (it was touched) */
#define KVS_STORE_TOO_BIG 2  /* the chunk alone exceeds the budget: not stored */
#define KVS_STORE_TIER_ONLY 3 /* the chunk alone exceeds the budget: written to the tiers only (not
                               * indexed in RAM: a lookup finds it in them by key) */

typedef struct kvs_store_params {
    size_t budget_bytes;   /* bytes of resident chunks; 0 = default: 1/4 of physical RAM */
    const char *cache_dir; /* NULL or "": memory only; else the directory tier (tier_dir.h)
                              is opened and attached first. Created if missing; copied. */
    int fsync;             /* 1: fsync every written entry (durable); 0 (default): page cache */
    uint64_t cache_max_bytes; /* bound on the cache dir's bytes; 0 = its default (disk_budget.h) */
    int chunk_tokens;      /* grid of the chunks asked from tiers by key; 0 = KVS_CHUNK_TOKENS_DEFAULT */
    size_t stub_bytes;     /* bound on the struct and token bytes of indexed chunks without a
                              payload (a tier holds them); 0 = default: budget / 8, >= 64 MiB */
    const kvs_entry_mac *mac; /* NULL, or the cache key of the directory tier's entries
                              (disk.h "Keyed readers"); not owned: must outlive the store */
} kvs_store_params;

kvs_store_params kvs_store_default_params(void);

/* The default budget: physical RAM / 4 (sysconf), 1 GiB if unknown. */
size_t kvs_store_default_budget(void);

/* Opens a store for one model. With a cache_dir, reads the headers of its
 * entries (not the payloads) and indexes this model's valid ones; damaged and
 * foreign entries are counted (see stats) and skipped. On failure *out is
 * untouched. */
int kvs_store_open(const kvs_key *fingerprint, const kvs_kv_shape *shape, kvs_store_params params,
                   kvs_store **out);
/* Appends a tier below RAM (after the cache dir's, if any): lookups ask it,
 * in order, for the prompt's grid chunks past what RAM and the tiers before
 * it serve, then for a partial tail where they stop (by prefix key: it needs
 * no scan); inserts put() to it. The store
 * owns t from now on (also on failure) and closes it in kvs_store_free.
 * Call before the store is shared between threads. */
int kvs_store_attach_tier(kvs_store *s, kvs_tier *t);

/* Drops the store's references (pinned chunks live on until unpinned) and
 * frees the store. Files stay on disk. NULL is a no-op. */
void kvs_store_free(kvs_store *s);

const kvs_key *kvs_store_fingerprint(const kvs_store *s);
const kvs_kv_shape *kvs_store_shape(const kvs_store *s);

/* --- insert ----------------------------------------------------------------- */

/* 1 if a chunk with this prefix key is stored (resident or on disk). Use it
 * before copying a chunk out of a KV buffer, to skip work. */
int kvs_store_contains(kvs_store *s, const kvs_key *prefix_key);

/* Stores a chunk whose identity (keys, pos0, tokens) and payload are filled.
 * path: the whole token history, path[0 .. pos0 + n_tok), whose tail must
 * equal chunk->tokens; it is indexed in the radix tree. NULL = content-key
 * only for now (kvs_store_sync_disk attaches it to the radix tree later if
 * its parent chain of prefix keys is stored down to the fingerprint). The
 * store takes its own reference: the caller still owns (and must unref) the
 * one it had, and while it holds it the chunk is pinned. A chunk belongs to
 * one store at most. Writes the cache-dir file first (outside the
 * lock); a failed write leaves the chunk memory-only and is counted.
 * Returns KVS_OK, KVS_STORE_EXISTS (nothing stored; the existing chunk was
 * touched), KVS_STORE_TIER_ONLY or KVS_STORE_TOO_BIG (larger than the RAM
 * budget: written to the tiers only, or with no tier that took it not
 * stored), or an error (store unchanged). May evict. */
int kvs_store_insert(kvs_store *s, kvs_chunk *chunk, const int32_t *path);

/* Inserts chunks[0..n) of one token path (chunk i ends where i+1 starts), in
 * reverse so that the first chunk ends up most recently used. path covers at
 * least the last chunk's end. Returns the first error, else KVS_OK; *n_new
 * (if not NULL) = chunks actually added. */
int kvs_store_insert_chain(kvs_store *s, kvs_chunk *const *chunks, int n, const int32_t *path, int *n_new);

/* What kvs_store_put_prefix did. */
typedef struct kvs_put_report {
    int n_tokens;      /* tokens of the sequence */
    int chunk_tokens;  /* the grid step used */
    int n_chunks;      /* chunks the sequence was cut into */
    int n_new;         /* stored now */
    int n_existing;    /* already stored (touched) */
    int n_skipped;     /* not stored: too big for the budget with no tier to take it, or an error */
    int n_write_errors;/* kept in memory, but a tier's write failed (disk full, read-only,
                          ...): not counted in n_new, which counts only what the tiers hold */
    char write_error[200]; /* the first failed write's message, "" if none */
    int partial_tail;  /* tokens of the last chunk if it ends off the grid, else 0 */
} kvs_put_report;

/* kvs_store_insert, its outcome counted in r (n_new, n_existing,
 * n_skipped, n_write_errors and the first write_error). Same return. */
int kvs_store_insert_counted(kvs_store *s, kvs_chunk *c, const int32_t *path, kvs_put_report *r);

/* The request path's store step: tokens[0..n) sit at positions 0..n-1 and
 * their KV is in view at slots 0..n-1. Cuts them with kvs_chunking_split
 * (chunk_tokens, 0 = KVS_CHUNK_TOKENS_DEFAULT; borders as there), computes
 * the prefix-key chain, touches the chunks already stored, and copies out
 * and inserts the others, last first. rep may be NULL. Returns the first
 * error (the chunks before it in that order are stored), else KVS_OK. */
int kvs_store_put_prefix(kvs_store *s, const int32_t *tokens, int n, int chunk_tokens, const int *borders,
                         int n_borders, const kvs_kv_buffer *kv, kvs_put_report *rep);

/* --- lookup ------------------------------------------------------------------ */

/* One piece of a prefix hit: prompt tokens [from, to) are served by chunk
 * tokens [from - chunk->pos0, to - chunk->pos0), at slots [from, to). */
typedef struct kvs_hit_seg {
    kvs_chunk *chunk; /* pinned; payload resident after kvs_store_lookup_prefix,
                         maybe not after kvs_store_lookup_into (it read it into the view) */
    int from, to;
} kvs_hit_seg;

typedef struct kvs_prefix_hit {
    int n_tokens;      /* the prompt length looked up */
    int n_matched;     /* longest common prefix with any cached path */
    int n_cached;      /* tokens [0, n_cached) are served; 0 = miss */
    int n_segs;
    kvs_hit_seg *segs; /* (n_segs) owned by the hit */
} kvs_prefix_hit;

/* Longest cached prefix of tokens[0..n). Fills *hit (release it with
 * kvs_prefix_hit_release, also after a miss). Payloads of disk-backed chunks
 * are loaded and verified here; a damaged or vanished entry is dropped from
 * the index (and its file removed), counted, and the hit ends before it.
 * Engines that need the logits of the last prompt token should look up
 * n - 1 tokens (or recompute the last one). Touches the chunks used. */
int kvs_store_lookup_prefix(kvs_store *s, const int32_t *tokens, int n, kvs_prefix_hit *hit);

/* Lookup and copy-in in one call, for a process that will not reuse the
 * payloads itself (the one-shot CLI): like kvs_store_lookup_prefix followed
 * by kvs_prefix_hit_copy_to_kv, except that chunks living on disk only are
 * read straight into view (kvs_disk_read_into_kv: no payload buffer, no
 * second copy) and do not become resident. On return view slots
 * [0, hit->n_cached) hold the KV; slots of a chunk that failed verification
 * (the hit ends before it) hold undefined bytes, which the caller's prefill
 * of [n_cached, n) overwrites as usual. view->n_ctx must be >= n. */
int kvs_store_lookup_into(kvs_store *s, const int32_t *tokens, int n, kvs_kv_buffer *kv,
                          kvs_prefix_hit *hit);

/* How many tokens of tokens[0..n) a lookup would serve (*n_hit), reading
 * no payload the index has: its chunks count as they stand (one evicted to
 * a tier as that tier held it when last seen: a lookup verifies it), and
 * only what it lacks is looked for in the tiers (read once, then indexed).
 * A peek by lookup had loaded every disk-only chunk of the prefix; with a
 * budget below the prompt's KV, each of a server's scheduler passes had
 * read the whole prefix from the tier again. */
int kvs_store_peek_prefix(kvs_store *s, const int32_t *tokens, int n, int *n_hit);

/* Unpins the hit's chunks and frees its segments. Safe on a zeroed hit. */
void kvs_prefix_hit_release(kvs_prefix_hit *hit);
/* kvs_prefix_hit_release, then s's resident bytes brought back within its
 * budget: what a tier without get_into served (Redis: made resident) is
 * pinned by the hit, so the lookup's own eviction passes over it, and
 * nothing evicted it after concurrent requests let go (a server had stayed
 * at 4x its budget). The request paths release with this. */
void kvs_store_release_hit(kvs_store *s, kvs_prefix_hit *hit);

/* Copies every segment's KV into view at slots [from, to). Reads only.
 * For a hit of kvs_store_lookup_prefix (its payloads are resident). */
int kvs_prefix_hit_copy_to_kv(const kvs_prefix_hit *hit, const kvs_kv_buffer *kv);

/* A chunk by content key (same tokens, any context or position; the most
 * recently inserted if several), pinned and resident: unref it when done.
 * KVS_ERR_NOT_FOUND if none. Counts as a lookup (hit or miss). */
int kvs_store_lookup_content(kvs_store *s, const kvs_key *content_key, kvs_chunk **out);

/* A chunk by prefix key, pinned and resident. KVS_ERR_NOT_FOUND if none. */
int kvs_store_get(kvs_store *s, const kvs_key *prefix_key, kvs_chunk **out);

/* As kvs_store_get, then, where RAM and the scanned index miss, the tiers
 * by key in order (Redis: no process holds its index; a directory another
 * process wrote to since the scan): path[0..n_path) is the chunk's token
 * path from position 0, its own tokens last. A tier's chunk counts only if
 * it has that key, shape and path end; it is then indexed in RAM under the
 * path (so the next lookup finds it there) and returned pinned. path NULL
 * (a baked chunk, whose KV is no prefix's): no path check, indexed by its
 * keys only; the caller checks the chunk. */
int kvs_store_get_path(kvs_store *s, const kvs_key *prefix_key, const int32_t *path, int n_path, kvs_chunk **out);

/* --- maintenance --------------------------------------------------------------- */

/* Removes one chunk from the store (and its file with and_disk).
 * KVS_ERR_NOT_FOUND if it is not indexed. */
int kvs_store_remove(kvs_store *s, const kvs_key *prefix_key, int and_disk);

/* Removes every chunk from the store; with and_disk also every entry file of
 * the cache dir (any model; see kvs_disk_clear). */
int kvs_store_clear(kvs_store *s, int and_disk);

/* Evicts least recently used unpinned chunks until the counted bytes are at
 * most target (e.g. 0 to drop every unpinned payload). Returns evictions. */
size_t kvs_store_trim(kvs_store *s, size_t target);

/* Indexes entries that other processes wrote since open, in every tier
 * that can be listed (no-op without one). *n_new (if not NULL) = entries
 * added. */
int kvs_store_sync_disk(kvs_store *s, int *n_new);
/* The same for the cache directory alone (never a scan of a shared Redis). */
int kvs_store_sync_dir(kvs_store *s, int *n_new);

/* Calls fn(user, chunk, resident, reachable) for every indexed chunk, in no
 * particular order: resident = payload in memory, reachable = in the radix
 * tree (both as they were when the call started). The chunks are pinned
 * during the calls; fn may read them but must not call into the store.
 * A nonzero return stops the iteration. */
typedef int (*kvs_store_visit_fn)(void *user, const kvs_chunk *chunk, int resident, int reachable);
int kvs_store_foreach(kvs_store *s, kvs_store_visit_fn fn, void *user);

/* --- statistics ----------------------------------------------------------------- */

typedef struct kvs_store_stats {
    uint64_t entries;          /* chunks indexed (resident or disk-only) */
    uint64_t resident;         /* chunks with a payload in memory */
    uint64_t bytes;            /* bytes counted against the budget: resident chunks */
    uint64_t budget_bytes;
    uint64_t index_bytes;      /* radix tree + hash tables + disk-only chunk structs (not budgeted) */
    uint64_t prefix_reachable; /* chunks in the radix tree */
    uint64_t lookups;          /* prefix + content lookups */
    uint64_t hits, misses;     /* prefix lookups serving >= 1 token, content lookups found */
    uint64_t hit_tokens;       /* tokens served by prefix hits */
    uint64_t lookup_tokens;    /* tokens asked for by prefix lookups */
    double lookup_seconds;     /* time inside lookups, loads included */
    double lookups_per_s;      /* lookups / lookup_seconds (lookup throughput) */
    uint64_t inserts, insert_exists, insert_too_big;
    uint64_t evictions;        /* payload drops + removals by the budget */
    uint64_t evict_walks;      /* walks of the LRU list for them (none while pins hold the store
                                * over budget and nothing was unpinned or added since one) */
    uint64_t stub_drops;       /* payload-less entries dropped from the index by its bound */
    uint64_t stub_bytes;       /* their struct and token bytes now (in index_bytes), and the bound */
    uint64_t stub_budget_bytes;
    uint64_t disk_writes, disk_write_errors; /* the cache directory's writes, failed ones */
    uint64_t disk_loads, disk_load_bytes;    /* payloads read from the cache directory (other
                                              * tiers count their own: tier[]) */
    double disk_load_seconds;
    uint64_t disk_bad;         /* damaged entries found (scan or load): never served */
    uint64_t disk_bad_mac;     /* of disk_bad: refused by the MAC check (a keyed cache) */
    uint64_t disk_foreign;     /* entries of another model / KV shape, skipped */
    uint64_t disk_missing;     /* entries that vanished before a load */
    uint64_t disk_orphans;     /* entries indexed by content key only (broken parent chain) */
    uint64_t tier_key_hits;    /* chunks served by a tier by key (not indexed before) */
    uint64_t tier_partial_hits; /* of those, chunks longer than the prompt's span, served in part
                                 * (Redis's partial-chunk markers led to them) */
    kvs_disk_counts last_scan; /* verdict counts of the last directory scan */
    uint64_t dir_max_bytes;    /* the cache dir's byte bound (0 without a dir) */
    int n_tiers;               /* tiers below RAM, in lookup order */
    const char *tier_name[8];  /* (n_tiers) their kinds ("dir", "redis", ...) */
    kvs_tier_stats tier[8];    /* (n_tiers) their own counters */
} kvs_store_stats;

void kvs_store_get_stats(kvs_store *s, kvs_store_stats *st);

#endif
