/*
 * A fast 64-bit checksum for cache payloads (tens of MB per request, where
 * SHA-256 would cost more than the load itself). Not cryptographic: it
 * detects damage (bit flips, torn or truncated writes), while the entry's
 * header, which names it, is covered by SHA-256.
 *
 * Construction: eight 64-bit lanes, each 8-byte word w enters its lane as
 * lane = rotl(lane + w * P2, 29) * P1, a bijection of w for a fixed lane and
 * of the lane for a fixed w; the lanes and the length are folded the same
 * way at the end. So changing any one word, or the length, always changes
 * the result; wider damage collides with probability about 2^-64.
 * Little-endian words: the value is the same on every host. Thread-safe.
 */
#ifndef KVS_KV_CHECKSUM_H
#define KVS_KV_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

uint64_t kvs_checksum64(const void *data, size_t len, uint64_t seed);

#endif
