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

/* Whole 64-byte blocks; eight independent chains keep the multiplier busy. */
static void blocks(uint64_t lane[8], const uint8_t *p, size_t n_blocks) {
    uint64_t l0 = lane[0], l1 = lane[1], l2 = lane[2], l3 = lane[3];
    uint64_t l4 = lane[4], l5 = lane[5], l6 = lane[6], l7 = lane[7];
    for (; n_blocks; n_blocks--, p += 64) {
        l0 = step(l0, load64(p));
        l1 = step(l1, load64(p + 8));
        l2 = step(l2, load64(p + 16));
        l3 = step(l3, load64(p + 24));
        l4 = step(l4, load64(p + 32));
        l5 = step(l5, load64(p + 40));
        l6 = step(l6, load64(p + 48));
        l7 = step(l7, load64(p + 56));
    }
    lane[0] = l0; lane[1] = l1; lane[2] = l2; lane[3] = l3;
    lane[4] = l4; lane[5] = l5; lane[6] = l6; lane[7] = l7;
}

void kvs_checksum64_init(kvs_checksum_state *st, uint64_t seed) {
    for (int i = 0; i < 8; i++) st->lane[i] = seed + P1 * (uint64_t)(i + 1);
    st->seed = seed;
    st->len = 0;
    st->buf_len = 0;
}

void kvs_checksum64_update(kvs_checksum_state *st, const void *data, size_t len) {
    const uint8_t *p = data;
    st->len += len;
    if (st->buf_len) {
        size_t take = 64 - st->buf_len < len ? 64 - st->buf_len : len;
        memcpy(st->buf + st->buf_len, p, take);
        st->buf_len += take;
        p += take;
        len -= take;
        if (st->buf_len < 64) return;
        blocks(st->lane, st->buf, 1);
        st->buf_len = 0;
    }
    blocks(st->lane, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
    memcpy(st->buf, p, len);
    st->buf_len = len;
}

uint64_t kvs_checksum64_final(const kvs_checksum_state *st) {
    uint64_t lane[8];
    memcpy(lane, st->lane, sizeof lane);
    if (st->buf_len) {
        uint8_t tail[64] = {0};
        memcpy(tail, st->buf, st->buf_len);
        blocks(lane, tail, 1);
    }
    uint64_t h = st->len * P3 + st->seed;
    for (int i = 0; i < 8; i++) h = rotl(h ^ avalanche(lane[i]), 27) * P1;
    return avalanche(h);
}

uint64_t kvs_checksum64(const void *data, size_t len, uint64_t seed) {
    kvs_checksum_state st;
    kvs_checksum64_init(&st, seed);
    kvs_checksum64_update(&st, data, len);
    return kvs_checksum64_final(&st);
}
