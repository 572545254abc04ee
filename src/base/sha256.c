/* SHA-256 per FIPS 180-4. The block function has a portable version and, on
 * x86, one built on the SHA-NI instructions (about 4-5x faster), chosen once
 * from CPUID. Both are tested against each other and the FIPS vectors. */
#include "base/sha256.h"

#include "kvstitch.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define KVS_SHA_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n_blocks) {
    for (; n_blocks; n_blocks--, p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
                   (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
}

#ifdef KVS_SHA_X86
/* The SHA-NI round instruction keeps the state as two vectors, ABEF and CDGH
 * (lane 0 = F, H), and does two rounds per call with W+K from lanes 0-1. */
__attribute__((target("sha,sse4.1")))
static void blocks_shani(uint32_t h[8], const uint8_t *p, size_t n_blocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]); /* lanes a b c d */
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]); /* lanes e f g h */
    __m128i badc = _mm_shuffle_epi32(dcba, 0xB1);           /* lanes b a d c */
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);           /* lanes h g f e */
    __m128i abef = _mm_alignr_epi8(badc, efgh, 8);          /* lanes f e b a */
    __m128i cdgh = _mm_blend_epi16(efgh, badc, 0xF0);       /* lanes h g d c */
    for (; n_blocks; n_blocks--, p += 64) {
        __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w[4]; /* w[r % 4] = words 4r..4r+3 of the schedule */
        for (int r = 0; r < 16; r++) {
            __m128i x;
            if (r < 4) {
                x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * r)), bswap);
            } else {
                x = _mm_sha256msg1_epu32(w[r % 4], w[(r + 1) % 4]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w[(r + 3) % 4], w[(r + 2) % 4], 4));
                x = _mm_sha256msg2_epu32(x, w[(r + 3) % 4]);
            }
            w[r % 4] = x;
            __m128i wk = _mm_add_epi32(x, _mm_loadu_si128((const __m128i *)&K[4 * r]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
            /* after two calls the roles are back: abef holds A,B,E,F */
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);     /* lanes a b e f */
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);     /* lanes g h c d */
    dcba = _mm_blend_epi16(feba, dchg, 0xF0);         /* lanes a b c d */
    hgfe = _mm_alignr_epi8(dchg, feba, 8);            /* lanes e f g h */
    _mm_storeu_si128((__m128i *)&h[0], dcba);
    _mm_storeu_si128((__m128i *)&h[4], hgfe);
}

static int cpu_has_shani(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int sha = (b >> 29) & 1;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int sse41 = (c >> 19) & 1, ssse3 = (c >> 9) & 1;
    return sha && sse41 && ssse3;
}

/* AVX usable: the CPU has it and the OS saves the YMM state. */
static int cpu_has_avx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1) || !((c >> 28) & 1)) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

/* The SHA-NI instructions have only legacy-SSE forms, and legacy-SSE code
 * run while the upper halves of the vector registers are dirty (left so by
 * 256- or 512-bit code, here kvs_sha256_init's ymm copy of the IV) pays a
 * state transition on Intel: the AMX Xeon VM hashed 10.6 MB/s instead of
 * 1.2 GB/s, ~10 s for SmolLM2's weights digest. VZEROUPPER first, where
 * AVX exists (a CPU with SHA-NI may have none: Goldmont). */
__attribute__((target("avx"), noinline)) static void clean_upper_state(void) { _mm256_zeroupper(); }
#endif

/* -1 = not probed yet, 0 = portable, 1 = SHA-NI, 2 = SHA-NI after VZEROUPPER.
 * Atomic: any thread may probe. */
static _Atomic int use_hw = -1;

static int hw_enabled(void) {
    int v = atomic_load_explicit(&use_hw, memory_order_relaxed);
    if (v < 0) {
#ifdef KVS_SHA_X86
        v = cpu_has_shani() ? 1 + cpu_has_avx() : 0;
#else
        v = 0;
#endif
        atomic_store_explicit(&use_hw, v, memory_order_relaxed);
    }
    return v;
}

int kvs_sha256_use_hw(int enable) {
    int v = 0;
#ifdef KVS_SHA_X86
    v = enable && cpu_has_shani() ? 1 + cpu_has_avx() : 0;
#else
    (void)enable;
#endif
    atomic_store_explicit(&use_hw, v, memory_order_relaxed);
    return v != 0;
}

static void blocks(uint32_t h[8], const uint8_t *p, size_t n_blocks) {
#ifdef KVS_SHA_X86
    const int hw = hw_enabled();
    if (hw) {
        if (hw == 2) clean_upper_state();
        blocks_shani(h, p, n_blocks);
        return;
    }
#else
    (void)hw_enabled;
#endif
    blocks_portable(h, p, n_blocks);
}

void kvs_sha256_init(kvs_sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->n_bytes = 0;
    s->buf_len = 0;
}

void kvs_sha256_update(kvs_sha256 *s, const void *data, size_t len) {
    const uint8_t *p = data;
    s->n_bytes += len;
    if (s->buf_len) {
        size_t take = 64 - s->buf_len < len ? 64 - s->buf_len : len;
        memcpy(s->buf + s->buf_len, p, take);
        s->buf_len += take;
        p += take;
        len -= take;
        if (s->buf_len < 64) return;
        blocks(s->h, s->buf, 1);
        s->buf_len = 0;
    }
    if (len >= 64) {
        blocks(s->h, p, len / 64);
        p += len & ~(size_t)63;
        len &= 63;
    }
    if (len) { memcpy(s->buf, p, len); s->buf_len = len; }
}

void kvs_sha256_final(kvs_sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->n_bytes * 8;
    /* 0x80, zeros to 56 mod 64, then the big-endian bit length. */
    uint8_t pad[72] = {0x80};
    size_t n_pad = (s->buf_len < 56 ? 56 : 120) - s->buf_len;
    for (int i = 0; i < 8; i++) pad[n_pad + i] = (uint8_t)(bits >> (56 - 8 * i));
    uint64_t keep = s->n_bytes;
    kvs_sha256_update(s, pad, n_pad + 8);
    s->n_bytes = keep;
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void kvs_sha256_digest(const void *data, size_t len, uint8_t out[32]) {
    kvs_sha256 s;
    kvs_sha256_init(&s);
    kvs_sha256_update(&s, data, len);
    kvs_sha256_final(&s, out);
}

void kvs_sha256_to_hex(const uint8_t digest[32], char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = 0;
}

void kvs_sha256_hex(const void *data, size_t len, char hex[65]) {
    uint8_t d[32];
    kvs_sha256_digest(data, len, d);
    kvs_sha256_to_hex(d, hex);
}
