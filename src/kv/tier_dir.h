/*
 * The cache directory as a storage tier (tier.h): kvs_tier_ops over the
 * entry files of disk.h, within a byte bound kept across processes
 * (disk_budget.h: access times are the files' atimes, set explicitly on
 * every hit and write; any process over the bound evicts the least
 * recently used entries, no global lock).
 *
 *   get_many / load / get_into   verified reads (disk.h); a damaged entry is
 *                                removed, a missing one is a miss
 *   put                          tmp + rename (synchronous); then the bound
 *   contains_many                one stat per key
 *   scan                         headers of this model's entries (the store
 *                                indexes them at open, for `cache ls`, and
 *                                for chunks that end off the grid)
 *
 * A directory that cannot be listed at open (opendir fails: EACCES on a
 * directory of mode 0300 to this process) opens degraded, as a read-only
 * one costs the cache and not the request: scan finds nothing, every put
 * fails naming the directory and the error (the bound cannot be kept
 * without a listing), reads by key go on (a name needs no listing).
 */
#ifndef KVS_KV_TIER_DIR_H
#define KVS_KV_TIER_DIR_H

#include "kv/disk.h"
#include "kv/tier.h"

typedef struct kvs_tier_dir_params {
    const char *dir;     /* created (one level) if missing; copied */
    int fsync;           /* 1: fsync every entry (durable); 0: page cache */
    uint64_t max_bytes;  /* bound on the directory's entry bytes; 0 = the default
                            (kvs_disk_default_max_bytes at open) */
    const kvs_entry_mac *mac; /* NULL, or the cache key: entries are written with their MAC
                            and this model's entries are served only if it verifies
                            (disk.h "Keyed readers"); not owned, must outlive the tier */
} kvs_tier_dir_params;

int kvs_tier_dir_open(const kvs_tier_dir_params *p, const kvs_key *fingerprint, const kvs_kv_shape *shape,
                      kvs_tier **out);

/* 1 if t is a directory tier. */
int kvs_tier_is_dir(const kvs_tier *t);
/* Verdict counts of t's last scan (zeros if none or not a directory tier). */
void kvs_tier_dir_last_scan(const kvs_tier *t, kvs_disk_counts *out);
/* The byte bound in force. */
uint64_t kvs_tier_dir_max_bytes(const kvs_tier *t);

#endif
