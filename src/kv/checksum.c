#include "kv/checksum.h"

#include <string.h>

/* Odd constants with well-spread bits (a multiplication by an odd number is
 * a bijection mod 2^64). */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t step(uint64_t lane, uint64_t w) { return rotl(lane + w * P2, 29) * P1; }

/* Final avalanche of one 64-bit value (xorshift-multiply, bijective). */
static inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 31;
    h *= P3;
    h ^= h >> 29;
    h *= P2;
    h ^= h >> 32;
    return h;
}

uint64_t kvs_checksum64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t lane[8];
    for (int i = 0; i < 8; i++) lane[i] = seed + P1 * (uint64_t)(i + 1);
    size_t n = len;
    /* Eight independent chains keep the multiplier busy. */
    for (; n >= 64; n -= 64, p += 64)
        for (int i = 0; i < 8; i++) lane[i] = step(lane[i], load64(p + 8 * i));
    /* Tail: zero-padded to a block; the length is folded in below. */
    if (n) {
        uint8_t tail[64] = {0};
        memcpy(tail, p, n);
        for (int i = 0; i < 8; i++) lane[i] = step(lane[i], load64(tail + 8 * i));
    }
    uint64_t h = (uint64_t)len * P3 + seed;
    for (int i = 0; i < 8; i++) h = rotl(h ^ avalanche(lane[i]), 27) * P1;
    return avalanche(h);
}
