/*
 * KV rows in the cache's types (kernels.h): the one place that knows how a
 * key or value row of each kvs_kv_type is laid out, so the forward pass, the
 * moves and the repairs store and read rows without a branch of their own.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

float kvs_q8_row(const float *x, int8_t *q, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* fmaxf's result (NaN ignored), without its libm call */
    }
    const float d = amax / 127.0f;
    const float id = d >= FLT_MIN ? 1.0f / d : 0.0f; /* 1 / subnormal d would overflow */
    for (int i = 0; i < n; i++) q[i] = (int8_t)kvs_level_of(x[i] * id, 127.0f); /* |x id| <= 127 but for NaN */
    return d;
}

void kvs_kv_row_store(int kv_type, const float *x, void *dst, int head_dim) {
    switch (kv_type) {
    case KVS_KV_F16: kvs_f32_to_f16_row(x, dst, head_dim); break;
    case KVS_KV_F32: memcpy(dst, x, (size_t)head_dim * sizeof(float)); break;
    case KVS_KV_Q8: {
        const float d = kvs_q8_row(x, dst, head_dim);
        memcpy((uint8_t *)dst + head_dim, &d, sizeof d);
        break;
    }
    default: break;
    }
}

void kvs_kv_row_load(int kv_type, const void *src, float *x, int head_dim) {
    switch (kv_type) {
    case KVS_KV_F16: kvs_f16_to_f32_row(src, x, head_dim); break;
    case KVS_KV_F32: memcpy(x, src, (size_t)head_dim * sizeof(float)); break;
    case KVS_KV_Q8: {
        const int8_t *q = src;
        float d;
        memcpy(&d, q + head_dim, sizeof d);
        for (int i = 0; i < head_dim; i++) x[i] = (float)q[i] * d;
        break;
    }
    default: break;
    }
}

void kvs_kv_rows_load(int kv_type, const void *src, float *x, int n, int head_dim) {
    /* the float types' rows are one run of elements: one conversion */
    if (kv_type != KVS_KV_Q8) {
        kvs_kv_row_load(kv_type, src, x, n * head_dim);
        return;
    }
    const size_t rb = kvs_kv_row_bytes(kv_type, head_dim);
    for (int r = 0; r < n; r++)
        kvs_kv_row_load(kv_type, (const uint8_t *)src + (size_t)r * rb, x + (size_t)r * head_dim, head_dim);
}

void kvs_kv_rows_store(int kv_type, const float *x, void *dst, int n, int head_dim) {
    if (kv_type != KVS_KV_Q8) {
        kvs_kv_row_store(kv_type, x, dst, n * head_dim);
        return;
    }
    const size_t rb = kvs_kv_row_bytes(kv_type, head_dim);
    for (int r = 0; r < n; r++)
        kvs_kv_row_store(kv_type, x + (size_t)r * head_dim, (uint8_t *)dst + (size_t)r * rb, head_dim);
}
