/*
 * A fast 64-bit checksum for cache payloads (tens of MB per request, where
 * SHA-256 would cost more than the load itself). Not cryptographic: it
 * detects damage (bit flips, torn or truncated writes), while the entry's
 * header, which names it, is covered by SHA-256.
 *
 * Construction: eight 64-bit lanes; each 64-byte block feeds one 8-byte
 * little-endian word w to each lane as lane = rotl(lane + w * P2, 29) * P1,
 * a bijection of w for a fixed lane and of the lane for a fixed w. The tail
 * is zero-padded to a block; the lanes and the length are folded the same
 * way at the end. So changing any one word, or the length, always changes
 * the result; wider damage collides with probability about 2^-64. The value
 * is the same on every host.
 *
 * The incremental form gives the same value as the one-shot for any split
 * of the data into updates (payloads are checked as they are read into
 * scattered destinations). Thread-safe; a state is used by one thread.
 */
#ifndef KVS_KV_CHECKSUM_H
#define KVS_KV_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

uint64_t kvs_checksum64(const void *data, size_t len, uint64_t seed);

typedef struct kvs_checksum_state {
    uint64_t lane[8];
    uint64_t seed, len;
    uint8_t buf[64]; /* partial block */
    size_t buf_len;
} kvs_checksum_state;

void kvs_checksum64_init(kvs_checksum_state *st, uint64_t seed);
void kvs_checksum64_update(kvs_checksum_state *st, const void *data, size_t len);
uint64_t kvs_checksum64_final(const kvs_checksum_state *st);

#endif
