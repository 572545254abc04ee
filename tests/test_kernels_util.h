/* Shared helpers of the kernel tests: random weight matrices of every type. */
#ifndef KVS_TEST_KERNELS_UTIL_H
#define KVS_TEST_KERNELS_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

static uint64_t kt_rng = 0x9e3779b97f4a7c15ull;
static inline uint32_t kt_rand(void) {
    kt_rng ^= kt_rng << 13;
    kt_rng ^= kt_rng >> 7;
    kt_rng ^= kt_rng << 17;
    return (uint32_t)(kt_rng >> 11);
}
/* uniform in [-1, 1) */
static inline float kt_randf(void) { return (float)(kt_rand() & 0xffffff) / 8388608.0f - 1.0f; }

static inline size_t kt_row_bytes(int type, int k) {
    switch (type) {
    case KVS_TYPE_F32: return (size_t)k * 4;
    case KVS_TYPE_F16: case KVS_TYPE_BF16: return (size_t)k * 2;
    case KVS_TYPE_Q4_0: return (size_t)k / 32 * 18;
    case KVS_TYPE_Q4_1: return (size_t)k / 32 * 20;
    case KVS_TYPE_Q8_0: return (size_t)k / 32 * 34;
    case KVS_TYPE_Q5_0: return (size_t)k / 32 * 22;
    case KVS_TYPE_Q4_K: return (size_t)k / 256 * 144;
    }
    return 0;
}

/* Random n x k matrix of the given type (data malloc'd, caller frees). */
static inline kvs_wmat kt_rand_wmat(int type, int n, int k) {
    kvs_wmat w = {.type = type, .n = n, .k = k, .row_bytes = kt_row_bytes(type, k)};
    size_t bytes = w.row_bytes * (size_t)n;
    uint8_t *p = malloc(bytes + 64);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)kt_rand();
    /* Scales must be sane halves: rewrite them per block. */
    for (int j = 0; j < n; j++) {
        uint8_t *row = p + (size_t)j * w.row_bytes;
        int nb = k / 32;
        if (type == KVS_TYPE_F32) {
            for (int e = 0; e < k; e++) { float f = kt_randf(); memcpy(row + 4 * e, &f, 4); }
        } else if (type == KVS_TYPE_F16) {
            for (int e = 0; e < k; e++) { uint16_t h = kvs_f32_to_f16(kt_randf()); memcpy(row + 2 * e, &h, 2); }
        } else if (type == KVS_TYPE_BF16) {
            for (int e = 0; e < k; e++) {
                float f = kt_randf(); uint32_t b; memcpy(&b, &f, 4);
                uint16_t h = (uint16_t)(b >> 16); memcpy(row + 2 * e, &h, 2);
            }
        } else {
            size_t bs = type == KVS_TYPE_Q4_0 ? 18 : type == KVS_TYPE_Q4_1 ? 20 : type == KVS_TYPE_Q5_0 ? 22 : 34;
            if (type == KVS_TYPE_Q4_K) { /* super-blocks of 256: d, dmin (then random 6-bit scales) */
                bs = 144;
                nb = k / 256;
            }
            for (int b = 0; b < nb; b++) {
                uint16_t d = kvs_f32_to_f16(0.001f + 0.02f * (kt_randf() + 1.0f));
                uint16_t m = kvs_f32_to_f16(-0.1f * (kt_randf() + 1.0f));
                memcpy(row + b * bs, &d, 2);
                if (type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q4_K) memcpy(row + b * bs + 2, &m, 2);
            }
        }
    }
    w.data = p;
    return w;
}

static inline void kt_rand_vec(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = kt_randf() * scale;
}

#endif
