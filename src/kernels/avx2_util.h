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

/* kvs_expf_ref, 8 lanes, same operations. */
AI __m256 kvs_exp8(__m256 x) {
    __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), ok);
}

/* kvs_exp_q8_ref, 8 lanes, on its domain (x <= 0, -inf or NaN). y is
 * clamped to -252 first (vmaxps: NaN and -inf too), where the result is 0
 * as the reference's (p <= 2: 2^-251 rounds to 0), so no mask is needed.
 * AVX2 has no vreduceps: f rounded down by hand; nor vscalefps: p 2^n as
 * (p 2^(n + 126)) 2^-126, the first product exact (a normal float for n >=
 * -252) and the second rounding once, as ldexpf, where the result is
 * subnormal. */
AI __m256 kvs_exp8_q8(__m256 x) {
    const __m256 y = _mm256_max_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(-252.0f));
    const __m256 n = _mm256_floor_ps(y);
    /* f = y - n rounded down: the nearest s, one float lower (its bits - 1:
     * s > 0 there) where it rounded up, s + n > y (exact, as the reference) */
    const __m256 s = _mm256_sub_ps(y, n);
    const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(_mm256_add_ps(s, n), y, _CMP_GT_OQ)); /* -1 or 0 */
    const __m256 f = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(s), up));
    __m256 p = _mm256_set1_ps(1.3555741868913174e-2f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.2032362669706345e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.413797825574875e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.930320858955383e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    /* 2^(n + 126)'s bits, (n + 253) << 23, from one add: n + 2^23 + 253 is
     * an exact integer in (2^23, 2^23 + 256), so its low 8 mantissa bits are
     * n + 253 (in [1, 253]) and the shift drops everything above them (the
     * cvt, add and shift this was: one operation fewer) */
    const __m256 k = _mm256_add_ps(n, _mm256_set1_ps(0x1p23f + 253.0f));
    return _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(k), 23))),
                         _mm256_set1_ps(0x1p-126f));
}

/* kvs_tree16 of lanes lo (0..7) and hi (8..15): halves, quarters, pairs. */
AI float tree16_2(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* The next tile of K or V (len bytes from base), prefetched a few 64-byte
 * lines per step of the current tile's work (steps of them), into L1 (l1)
 * or L2: staging the tile then reads cache, where a burst from L3 or DRAM
 * stalled the fmas, and the reads are spread, not a burst of their own. */
typedef struct kvs_ahead {
    const char *base;
    size_t off, len;
    int lines, l1;
} kvs_ahead;

AI kvs_ahead kvs_ahead_new(const void *base, size_t len, int steps, int l1) {
    const size_t st = steps > 0 ? (size_t)steps : 1, lines = (len + 63) / 64;
    return (kvs_ahead){.base = (const char *)base, .len = len, .lines = (int)((lines + st - 1) / st), .l1 = l1};
}

AI void kvs_ahead_step(kvs_ahead *a) {
    for (int i = 0; i < a->lines && a->off < a->len; i++, a->off += 64) {
        if (a->l1) _mm_prefetch(a->base + a->off, _MM_HINT_T0);
        else _mm_prefetch(a->base + a->off, _MM_HINT_T1);
    }
}

/* tree16_2 of 8 rows at once: C[p] holds the chains (lo, hi) of one row,
 * row o at position tree16x8_pos[o]; lane o of
 * the result is row o's tree16_2, by the same additions in the same order:
 * a = lo + hi, b_i = a_i + a_{i+4}, c_i = b_i + b_{i+2}, y = c_0 + c_1
 * (128-bit halves swapped between row pairs, then in-lane shuffles). */
static const int tree16x8_pos[8] = {0, 2, 4, 6, 1, 3, 5, 7};
AI __m256 tree16x8(const __m256 C[8][2]) {
    __m256 a[8], b[4];
    for (int p = 0; p < 8; p++) a[p] = _mm256_add_ps(C[p][0], C[p][1]);
    for (int q = 0; q < 4; q++) /* [row of 2q: b0..3 | row of 2q+1: b0..3] */
        b[q] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * q], a[2 * q + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * q], a[2 * q + 1], 0x31));
    /* [c0 c1 of 2 rows | of 2 rows] */
    __m256 c0 = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x44), _mm256_shuffle_ps(b[0], b[1], 0xEE));
    __m256 c1 = _mm256_add_ps(_mm256_shuffle_ps(b[2], b[3], 0x44), _mm256_shuffle_ps(b[2], b[3], 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(c0, c1, 0x88), _mm256_shuffle_ps(c0, c1, 0xDD));
}

/* tree16_2 of 4 rows at once, from each row's first step s_r = lo + hi
 * (lanes 0..7 + lanes 8..15): lane r of the result is kvs_tree16 of row r's
 * 16 chains, by the same additions in the same order (as tree16x8, on half
 * as many rows). */
AI __m128 tree16x4_sums(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
    /* [row 0: b0..3 | row 1: b0..3], [row 2 | row 3] */
    const __m256 b01 = _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
    const __m256 b23 = _mm256_add_ps(_mm256_permute2f128_ps(s2, s3, 0x20), _mm256_permute2f128_ps(s2, s3, 0x31));
    /* [c0 c1 of row 0, of row 2 | of row 1, of row 3] */
    const __m256 c = _mm256_add_ps(_mm256_shuffle_ps(b01, b23, 0x44), _mm256_shuffle_ps(b01, b23, 0xEE));
    /* [y0 y2 y0 y2 | y1 y3 y1 y3] */
    const __m256 y = _mm256_add_ps(_mm256_shuffle_ps(c, c, 0x88), _mm256_shuffle_ps(c, c, 0xDD));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
}

/* tree16x4_sums of 4 rows' chains in memory (acc[r]: lanes 0..15). */
AI __m128 tree16x4(const float *a0, const float *a1, const float *a2, const float *a3) {
    return tree16x4_sums(_mm256_add_ps(_mm256_load_ps(a0), _mm256_load_ps(a0 + 8)),
                         _mm256_add_ps(_mm256_load_ps(a1), _mm256_load_ps(a1 + 8)),
                         _mm256_add_ps(_mm256_load_ps(a2), _mm256_load_ps(a2 + 8)),
                         _mm256_add_ps(_mm256_load_ps(a3), _mm256_load_ps(a3 + 8)));
}

/* The lane sums of 8 int32 vectors v, transposed, from p[i] = hadd(v[2i],
 * v[2i + 1]) (a caller that adds each pair as soon as it has it keeps fewer
 * vectors live): H0 lane o = v[o]'s lanes 0-3 summed, H1 lane o = its lanes
 * 4-7 (exact integers; H0 + H1 = each vector's total). */
AI void hsum8_pairs(const __m256i p[4], __m256i *H0, __m256i *H1) {
    __m256i a = _mm256_hadd_epi32(p[0], p[1]), b = _mm256_hadd_epi32(p[2], p[3]);
    *H0 = _mm256_permute2x128_si256(a, b, 0x20);
    *H1 = _mm256_permute2x128_si256(a, b, 0x31);
}

/* 8 x 8 transpose of 32-bit lanes: out[v] lane o = in[o] lane v. */
AI void transpose8_epi32(const __m256i in[8], __m256i out[8]) {
    __m256i t[8], u[8];
    for (int p = 0; p < 4; p++) {
        t[2 * p] = _mm256_unpacklo_epi32(in[2 * p], in[2 * p + 1]);     /* a0 b0 a1 b1 | a4 b4 a5 b5 */
        t[2 * p + 1] = _mm256_unpackhi_epi32(in[2 * p], in[2 * p + 1]); /* a2 b2 a3 b3 | a6 b6 a7 b7 */
    }
    for (int q = 0; q < 2; q++) { /* rows 0-3 (q = 0) and 4-7 (q = 1) */
        u[4 * q] = _mm256_unpacklo_epi64(t[4 * q], t[4 * q + 2]);     /* a0 b0 c0 d0 | a4 .. */
        u[4 * q + 1] = _mm256_unpackhi_epi64(t[4 * q], t[4 * q + 2]); /* a1 .. | a5 .. */
        u[4 * q + 2] = _mm256_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        u[4 * q + 3] = _mm256_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
    for (int v = 0; v < 4; v++) {
        out[v] = _mm256_permute2x128_si256(u[v], u[4 + v], 0x20);
        out[v + 4] = _mm256_permute2x128_si256(u[v], u[4 + v], 0x31);
    }
}

AI int32_t hsum_i32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

#endif
