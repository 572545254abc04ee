/*
 * The Q8 attention's exp (kvs_exp_q8_ref, attention_q8_ref.c) in its vector
 * forms, exp16_q8 (AVX-512) and kvs_exp8_q8 (AVX2), bit for bit on its
 * domain (x <= 0, -inf, NaN; exp16_q8 passes NaN on, so not NaN there):
 * every float from where 2^y leaves the normal range (y = x log2 e near
 * -126: the results turn subnormal) to where it rounds to 0 (-150), a
 * stride through the rest, and y just below the integers (where f = y -
 * floor(y) must round down, not to 1). And the bound the AVX-512 prefill's
 * levels rely on (no clamp: attention_q8_avx512.c exp_levels4): the
 * polynomial is at most 2 on every float of [0, 1], so e^x <= 1.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels_impl.h"

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq")
#endif
#include "kernels/avx2_util.h"
#include "kernels/avx512_math.h"
static void exp16_block(const float *x, float *y) { _mm512_storeu_ps(y, exp16_q8(_mm512_loadu_ps(x))); }
static void exp8_block(const float *x, float *y) {
    _mm256_storeu_ps(y, kvs_exp8_q8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, kvs_exp8_q8(_mm256_loadu_ps(x + 8)));
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

typedef void (*exp_block_fn)(const float *x, float *y);

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int nan_passes_on; /* the form under test leaves NaN inputs NaN (exp16_q8) */

/* Count of the 16 lanes of x where fn differs from the reference in bits. */
static int block_mismatches(exp_block_fn fn, const float *x) {
    float y[16];
    fn(x, y);
    int bad = 0;
    for (int l = 0; l < 16; l++) {
        if (x[l] != x[l] && nan_passes_on) {
            bad += y[l] == y[l];
            continue;
        }
        const float want = kvs_exp_q8_ref(x[l]);
        bad += memcmp(&want, &y[l], 4) != 0;
    }
    return bad;
}

/* Floats of bit patterns [lo, hi] (negative floats: larger patterns are
 * more negative) at the given stride, 16 a block. */
static long range_mismatches(exp_block_fn fn, uint32_t lo, uint32_t hi, uint32_t stride) {
    float x[16];
    long bad = 0;
    int k = 0;
    for (uint64_t u = lo; u <= hi; u += stride) {
        x[k++] = from_bits((uint32_t)u);
        if (k == 16) {
            bad += block_mismatches(fn, x);
            k = 0;
        }
    }
    for (; k > 0 && k < 16; k++) x[k] = x[0];
    if (k) bad += block_mismatches(fn, x);
    return bad;
}

static void check_path(const char *name, exp_block_fn fn) {
    uint32_t edge_lo, edge_hi, u;
    const float a = -86.5f, b = -104.5f; /* y from -124.8 to -150.8 */
    memcpy(&edge_lo, &a, 4);
    memcpy(&edge_hi, &b, 4);
    memcpy(&u, &(float){-INFINITY}, 4);
    /* every float across the edge; a stride of 97 from -0 to -inf */
    long bad = range_mismatches(fn, edge_lo, edge_hi, 1);
    bad += range_mismatches(fn, 0x80000000u, u, 97);
    /* y just below and at the integers (f rounded down below 1, or 0), and
     * at k + 1/2 */
    float ties[16];
    int k = 0;
    for (int n = -150; n <= 0; n++)
        for (int d = -2; d <= 2; d++) {
            float x = ((float)n + (d & 1 ? 0.5f : 0.0f)) / 1.44269504088896341f;
            uint32_t xb;
            memcpy(&xb, &x, 4);
            ties[k++] = from_bits(xb + (uint32_t)d);
            if (k == 16) {
                bad += block_mismatches(fn, ties);
                k = 0;
            }
        }
    const float specials[16] = {-0.0f, 0.0f, NAN, -NAN, -INFINITY, -1e-45f, -1e-38f, -87.33654f,
                                -87.33655f, -0.34657359f, -0.34657362f, -1e-30f, -100.0f, -3.4e38f, -207.9f, -208.0f};
    bad += block_mismatches(fn, specials);
    CHECK_MSG(bad == 0, "%s: %ld floats differ from kvs_exp_q8_ref", name, bad);
}

TEST(exp_q8_poly_at_most_two) {
    long over = 0;
    for (float f = 0.5f; f <= 1.0f; f = nextafterf(f, 2.0f)) over += kvs_exp_q8_poly(f) > 2.0f;
    for (float f = 0.0f; f < 0.5f; f += 1.0f / 4096) over += kvs_exp_q8_poly(f) > 2.0f;
    CHECK_MSG(over == 0, "%ld floats f in [0, 1] with p(f) > 2", over);
    CHECK(kvs_exp_q8_poly(0.0f) == 1.0f && kvs_exp_q8_poly(1.0f) == 2.0f);
}

TEST(exp_q8_vector_forms_equal_reference) {
#if defined(__x86_64__)
    if (kvs_kernels_cpu_level() < 1) SKIP("no AVX2 on this CPU: only the scalar exp runs here");
    check_path("kvs_exp8_q8 (AVX2)", exp8_block);
    nan_passes_on = 1;
    if (kvs_kernels_cpu_level() >= 2) check_path("exp16_q8 (AVX-512)", exp16_block);
    else printf("  no AVX-512 on this CPU: exp16_q8 not checked\n");
    nan_passes_on = 0;
#else
    SKIP("not x86-64: no vector forms");
#endif
}

int main(void) {
    RUN(exp_q8_poly_at_most_two);
    RUN(exp_q8_vector_forms_equal_reference);
    return kt_summary();
}
