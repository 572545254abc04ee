/*
 * Pieces shared by the AVX2 matmul files (matmul_avx2.c: GGUF rows,
 * matmul_avx2_packed.c: packed rows). Include it only inside an AVX2 target
 * region (the functions inherit the target).
 */
#ifndef KVS_KERNELS_AVX2_UTIL_H
#define KVS_KERNELS_AVX2_UTIL_H

#include <immintrin.h>

#include "kernels/kernels_impl.h"

#define AI __attribute__((always_inline)) static inline

/* Q8_0 weight vector r (elements 4r..4r+3) pairs with xq vec xq_of_q8[r]. */
static const int xq_of_q8[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* kvs_tree16 of lanes lo (0..7) and hi (8..15): halves, quarters, pairs. */
AI float tree16_2(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* The lane sums of 8 int32 vectors, transposed: H0 lane o = v[o]'s lanes
 * 0-3 summed, H1 lane o = its lanes 4-7 (exact integers; H0 + H1 = each
 * vector's total). */
AI void hsum8_halves(const __m256i v[8], __m256i *H0, __m256i *H1) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    *H0 = _mm256_permute2x128_si256(a, b, 0x20);
    *H1 = _mm256_permute2x128_si256(a, b, 0x31);
}

AI int32_t hsum_i32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

#endif
