/*
 * The two-level block quantization of quant.h with AVX2, lane-wise the
 * reference's float operations (matmul_ref.c quantize_block, kquant_ref.c):
 * the maximum ignores NaN as fmaxf does, then the same division, products
 * and round-half-even conversions; integer sums wrap as the reference's.
 * Include it only inside an AVX2 target region.
 */
#ifndef KVS_KERNELS_QUANT_AVX2_H
#define KVS_KERNELS_QUANT_AVX2_H

#include <float.h>
#include <immintrin.h>
#include <stdint.h>

#include "kernels/avx2_util.h"

/* The low bytes of the 32 int32 lanes of a..d, in lane order (a truncation,
 * as the reference's (int8_t) casts: a NaN activation's INT_MIN becomes 0). */
AI __m256i kvs_avx2_low_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ff = _mm256_set1_epi32(0xff);
    __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, ff), _mm256_and_si256(b, ff));
    __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, ff), _mm256_and_si256(d, ff));
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One block of 32 floats: hi and lo bytes (natural order, signed), the sums
 * of Q = 256 hi + lo over elements 0..15 (s[0]) and 16..31 (s[1]); returns
 * d = amax / 127 (the scale of hi; Q's is d / 256). */
AI float kvs_avx2_quantize_block(const float *xb, __m256i *hi, __m256i *lo, int32_t s[2]) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i c127 = _mm256_set1_epi32(127), m127 = _mm256_set1_epi32(-127);
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        amax = _mm256_max_ps(_mm256_and_ps(v[i], absmask), amax); /* a NaN lane keeps amax */
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float d = _mm_cvtss_f32(m4) / 127.0f;
    float id = d >= FLT_MIN ? 1.0f / d : 0.0f;
    __m256 idv = _mm256_set1_ps(id), c256 = _mm256_set1_ps(256.0f);
    __m256i h[4], l[4];
    for (int i = 0; i < 4; i++) {
        __m256 vi = _mm256_mul_ps(v[i], idv);
        h[i] = _mm256_cvtps_epi32(vi);
        l[i] = _mm256_sub_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vi, c256)), _mm256_slli_epi32(h[i], 8));
        l[i] = _mm256_max_epi32(_mm256_min_epi32(l[i], c127), m127);
    }
    *hi = kvs_avx2_low_bytes(h[0], h[1], h[2], h[3]);
    *lo = kvs_avx2_low_bytes(l[0], l[1], l[2], l[3]);
    s[0] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h[0], 8), l[0]),
                                     _mm256_add_epi32(_mm256_slli_epi32(h[1], 8), l[1])));
    s[1] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h[2], 8), l[2]),
                                     _mm256_add_epi32(_mm256_slli_epi32(h[3], 8), l[3])));
    return d;
}

#endif
