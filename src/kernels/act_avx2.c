/*
 * AVX2 versions of the activation row kernels (SiLU: ops.c, GELU-tanh:
 * act.c): the scalar loops' operations, 8 elements a vector, with the
 * attention's exp (kvs_exp8 = kvs_expf_ref lane by lane), so the bits are
 * the scalar ones; tails run the scalar loop's steps on the last elements.
 * Every CPU above the scalar level runs them (AVX-512 ones SiLU in 16 lanes,
 * ops.c).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <math.h>

#include "kernels/avx2_util.h"

/* e^(-v) saturating at 88 as the scalar exp_sat: a NaN stays NaN (and
 * kvs_exp8 gives it 0), so no min instruction (it would pick 88). */
AI __m256 exp_neg_sat(__m256 v) {
    const __m256 sat = _mm256_set1_ps(88.0f);
    __m256 y = _mm256_xor_ps(v, _mm256_set1_ps(-0.0f));
    return kvs_exp8(_mm256_blendv_ps(y, sat, _mm256_cmp_ps(y, sat, _CMP_GT_OQ)));
}

void kvs_silu_mul_avx2(float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_neg_sat(g);
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) kvs_silu_mul_ref(gate + i, up + i, n - i);
}

void kvs_gelu_tanh_mul_avx2(float *gate, const float *up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), k0 = _mm256_set1_ps(KVS_GELU_K0), k1 = _mm256_set1_ps(KVS_GELU_K1);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(gate + i);
        __m256 u2 = _mm256_mul_ps(x, _mm256_fmadd_ps(k1, _mm256_mul_ps(x, x), k0));
        __m256 e = exp_neg_sat(u2);
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) kvs_gelu_tanh_mul_ref(gate + i, up + i, n - i);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
