/*
 * AVX2 dot products for Q5_0 / Q5_1 / K-quant weights: the canonical
 * arithmetic of kquant.h bit for bit. A weight block is unpacked once per
 * (column, block) and used for every activation row of the call; the
 * integer dots run in 16-bit pairs (|q_w| <= 32, |hi|, |lo| <= 127: no
 * saturation) and are exact, and the float steps are the reference's, in
 * its order.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#include <immintrin.h>
#include <math.h>

#include "kernels/kquant.h"
#include "kernels/quant.h"

#define MAX_ROWS 16 /* activation rows per pass (accumulators on the stack) */

/* Sum of the 8 int32 lanes (exact). */
static inline int32_t hsum_i32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

/* int32 lanes: lanes 0-3 hold elements 0-15 (half 0), lanes 4-7 half 1. */
static inline __m256i dot32(__m256i aw, __m256i sw, const int8_t *x) {
    __m256i xv = _mm256_loadu_si256((const __m256i *)x);
    __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, sw));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static void avx2_dot_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, float *y, int j0, int j1) {
    const int nb = w->k / 32, split = kvs_kq_split_scales(w->type), has_min = kvs_kq_has_min(w->type);
    for (int i0 = 0; i0 < m; i0 += MAX_ROWS) {
        const int mr = m - i0 < MAX_ROWS ? m - i0 : MAX_ROWS;
        for (int j = j0; j < j1; j++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
            float acc[MAX_ROWS][16];
            for (int r = 0; r < mr; r++)
                for (int c = 0; c < 16; c++) acc[r][c] = 0.0f;
            kvs_kq_block blk;
            for (int b = 0; b < nb; b++) {
                kvs_kq_unpack(w->type, row, b, &blk);
                __m256i wv = _mm256_loadu_si256((const __m256i *)blk.q);
                __m256i aw = _mm256_sign_epi8(wv, wv); /* |q_w| as the unsigned operand */
                for (int r = 0; r < mr; r++) {
                    const uint8_t *xr = xq + (size_t)(i0 + r) * xq_row;
                    const int8_t *hi = (const int8_t *)xr + (size_t)b * 64;
                    const float *dx = (const float *)(xr + (size_t)nb * 64), *sx = dx + nb;
                    __m256i iv = _mm256_add_epi32(_mm256_slli_epi32(dot32(aw, wv, hi), 8), dot32(aw, wv, hi + 32));
                    float *a = &acc[r][b % 16];
                    if (split) {
                        __m128i h0 = _mm256_castsi256_si128(iv), h1 = _mm256_extracti128_si256(iv, 1);
                        h0 = _mm_add_epi32(h0, _mm_shuffle_epi32(h0, 0x4e));
                        h0 = _mm_add_epi32(h0, _mm_shuffle_epi32(h0, 0xb1));
                        h1 = _mm_add_epi32(h1, _mm_shuffle_epi32(h1, 0x4e));
                        h1 = _mm_add_epi32(h1, _mm_shuffle_epi32(h1, 0xb1));
                        *a = fmaf((float)_mm_cvtsi128_si32(h0), blk.dw[0] * dx[b], *a);
                        *a = fmaf((float)_mm_cvtsi128_si32(h1), blk.dw[1] * dx[b], *a);
                    } else {
                        *a = fmaf((float)hsum_i32(iv), blk.dw[0] * dx[b], *a);
                    }
                    if (has_min) *a = fmaf(blk.mw, sx[b], *a);
                }
            }
            for (int r = 0; r < mr; r++) y[(size_t)(i0 + r) * w->n + j] = kvs_tree16(acc[r]);
        }
    }
}

const kvs_kq_isa kvs_kq_isa_avx2 = {.name = "avx2", .dot_cols = avx2_dot_cols};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
