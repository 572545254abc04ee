/*
 * AVX-512 arithmetic several kernel files share (attention_avx512.h,
 * avx512_util.h, ops.c): the reference's exp and tree sum in 16 lanes.
 * Include after a target pragma with avx512f and avx512dq.
 */
#ifndef KVS_KERNELS_AVX512_MATH_H
#define KVS_KERNELS_AVX512_MATH_H

#include <immintrin.h>

/* kvs_expf_ref, 16 lanes, same operations. */
__attribute__((always_inline)) static inline __m512 exp16(__m512 x) {
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, p, _mm512_castsi512_ps(bits));
}

/* kvs_exp_q8_ref, 16 lanes, same operations, for x <= 0 and -inf (NaN
 * gives NaN, not the reference's 0: a caller that may meet one masks it,
 * or reruns what it touched): f = y - floor(y) in one vreduceps (rounded
 * down, its floor mode's rounding, as the reference), and vscalefps
 * multiplies by 2^floor(y) itself, rounding once as ldexpf (subnormals
 * included; 0 for -inf). */
__attribute__((always_inline)) static inline __m512 exp16_q8(__m512 x) {
    const __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    const __m512 f = _mm512_reduce_ps(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 p = _mm512_set1_ps(1.3555741868913174e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.2032362669706345e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.413797825574875e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930320858955383e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, y);
}

/* kvs_tree16 on a register: halves, quarters, pairs, then the last pair. */
__attribute__((always_inline)) static inline float hsum_tree(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

#endif
