/*
 * KV rows in the cache's types (kernels.h): the one place that knows how a
 * key or value row of each kvs_kv_type is laid out, so the forward pass, the
 * moves and the repairs store and read rows without a branch of their own.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* kvs_q8_row's two passes 8 elements a step, for every SIMD level (each
 * has AVX2); the scalar loops below finish the rest. The same bits: the
 * maximum is exact in any order (vmaxps(|x|, amax) keeps amax for a NaN,
 * as the scalar's a > amax; |x| is never -0), each level the same float
 * product, clamp and round-half-even (cvtps2dq), NaN masked to 0; |level|
 * <= 127, so the saturating packs are exact. A Q8 KV prefill quantizes two
 * rows a token, layer and kv head (and the AVX2 attention its query rows):
 * the scalar loop, a branch an element, was 2.4% of a 512-token prefill's
 * samples on SmolLM2 (AMX Xeon, 1 thread). Both return the elements done. */
__attribute__((target("avx2"))) static int q8_amax_avx2(const float *x, int n, float *amax) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), vmax);
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    for (int l = 0; l < 8; l++) *amax = lanes[l] > *amax ? lanes[l] : *amax;
    return i;
}

__attribute__((target("avx2"))) static int q8_levels_avx2(const float *x, int n, float id, int8_t *q) {
    const __m256 vid = _mm256_set1_ps(id), top = _mm256_set1_ps(127.0f), bottom = _mm256_set1_ps(-127.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vid);
        const __m256i l = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, top), bottom)),
                                           _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(w, w));
    }
    return i;
}
#endif

float kvs_q8_row(const float *x, int8_t *q, int n) {
#if defined(__x86_64__)
    const int simd = strcmp(kvs_kernels_isa(), "scalar") != 0;
#endif
    float amax = 0.0f;
    int i = 0;
#if defined(__x86_64__)
    if (simd) i = q8_amax_avx2(x, n, &amax);
#endif
    for (; i < n; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax; /* fmaxf's result (NaN ignored), without its libm call */
    }
    const float d = amax / 127.0f;
    const float id = d >= FLT_MIN ? 1.0f / d : 0.0f; /* 1 / subnormal d would overflow */
    i = 0;
#if defined(__x86_64__)
    if (simd) i = q8_levels_avx2(x, n, id, q);
#endif
    for (; i < n; i++) q[i] = (int8_t)kvs_level_of(x[i] * id, 127.0f); /* |x id| <= 127 but for NaN */
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
