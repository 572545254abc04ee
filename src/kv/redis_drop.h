/*
 * Damaged Redis values removed by the reader that met them, as the cache
 * directory removes a damaged entry (tier_dir.c): a value that fails its
 * checks (cut short, bit-flipped, another chunk's, past the size limit, a
 * marker that does not decode) is DELeted so that no process reads it
 * again. They had stayed until a writer stored the same chunk again, never
 * where nothing stores (--no-store), nor under a marker's key (its script
 * leaves a key holding a chunk alone).
 *
 * Only the bytes that were read go: a Lua script deletes the key while its
 * length and the SHA-1 of its bytes are what the read saw, so a good value
 * another process SET meanwhile (the same key's bytes) stays; a value past
 * the size limit while it still is (no good value is), unhashed. The
 * removal runs in the request, with a deadline for the bytes the script
 * reads: damage is rare, and each value is removed once. Another
 * model's value, a newer version's and a value of another Redis type are
 * never removed (the listing counts them apart).
 */
#ifndef KVS_KV_REDIS_DROP_H
#define KVS_KV_REDIS_DROP_H

#include "kv/tier_redis_impl.h"

#include <stddef.h>

/* What a read saw of a damaged value: its first n_read bytes (all of it
 * unless oversized: then the limit + 1 the read asked for) and their
 * SHA-1 in hex. */
typedef struct kvs_redis_damaged {
    size_t n_read;
    int oversized;
    char sha1[41];
} kvs_redis_damaged;

/* Notes the damaged value bytes[0, n) into *d. */
void kvs_redis_damaged_note(kvs_redis_damaged *d, const void *bytes, size_t n, int oversized);

/* Removes, in one pipeline per node, the keys i with is_damaged[i] whose
 * values are still the ones noted in d[i]; counted in rt->bad_removed.
 * Best effort: a failure leaves the value for a later reader. */
void kvs_redis_drop_damaged(redis_tier *rt, const char *const *keys, const size_t *key_lens,
                            const kvs_redis_damaged *d, const uint8_t *is_damaged, int n);

#endif
