/*
 * What a forger who can write the cache dir or the Redis (but holds no cache
 * key) can do to an entry header (disk.h layout): after changing the payload,
 * recompute the payload checksum (kvs_checksum64, non-cryptographic) and the
 * header digest (an unkeyed SHA-256). test_kv_disk.c, test_redis_store.c.
 */
#ifndef KVS_TEST_FORGE_H
#define KVS_TEST_FORGE_H

#include "base/le.h"
#include "base/sha256.h"
#include "kv/checksum.h"
#include "kv/disk.h"

/* Re-signs entry header h (its payload: payload[0, n)) as an attacker can. */
static inline void forge_resign(uint8_t *h, const void *payload, size_t n) {
    const size_t covered = KVS_DISK_FIXED_BYTES + 4 * (size_t)kvs_get_le32(h + 160);
    kvs_put_le64(h + 184, kvs_checksum64(payload, n, 0));
    kvs_sha256_digest(h, covered, h + covered);
}

#endif
