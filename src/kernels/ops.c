/*
 * Row kernels: RMSNorm, RoPE, SiLU, half conversions, dequantization.
 * Each is a pure function of its row, written as an explicit sequence of
 * float operations (fmaf, no contraction), so results are batch-invariant and
 * identical whether the compiler vectorizes them or not.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "kernels/kquant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__x86_64__)
/* AVX-512 versions of the row kernels: the same operations as the scalar
 * loops below, lane l of a register being element l of each 16-chunk. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")
#endif
#include "kernels/avx512_math.h"

static float rms_sumsq_avx512(const float *x, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i);
        acc = _mm512_fmadd_ps(v, v, acc); /* masked lanes add +0 */
    }
    float a[16];
    _mm512_storeu_ps(a, acc);
    return kvs_tree16(a);
}

static void scale_mul_avx512(float *y, const float *x, const float *w, float r, int n) {
    __m512 vr = _mm512_set1_ps(r);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vr), _mm512_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = (x[i] * r) * w[i];
}

static void silu_mul_avx512(float *gate, const float *up, int n) {
    const __m512 hi = _mm512_set1_ps(88.0f), one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 x = _mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), g), hi);
        __m512 e = exp16(x); /* kvs_expf_ref */
        __m512 y = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i));
        _mm512_storeu_ps(gate + i, y);
    }
    for (; i < n; i++) {
        float g = gate[i], x = -g;
        if (x > 88.0f) x = 88.0f;
        gate[i] = (g / (1.0f + kvs_expf_ref(x))) * up[i];
    }
}
/* rotate_pairs for the pairs below half & ~7, 8 at a time (returns that
 * count; the caller rotates the rest): each lane the scalar steps in double
 * (x0 c - x1 s, x0 s + x1 c, each product rounded, then the sum, then one
 * rounding to float), so the same bits. neox = 0: pairs are neighbours, 16
 * floats hold 8 pairs and c, s go to both lanes of a pair; neox = 1: x0 and
 * x1 are 8 floats half a rotation apart. */
static int rotate_pairs_avx512(float *x, int n_head, int head_dim, int half, int neox, const double *c, const double *s) {
    const int i8 = half & ~7;
    for (int h = 0; h < n_head; h++) {
        float *xh = x + (size_t)h * head_dim;
        for (int i = 0; i < i8; i += 8) {
            const __m512d vc = _mm512_loadu_pd(c + i), vs = _mm512_loadu_pd(s + i);
            if (neox) {
                const __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(xh + i)), x1 = _mm512_cvtps_pd(_mm256_loadu_ps(xh + i + half));
                _mm256_storeu_ps(xh + i, _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_mul_pd(x0, vc), _mm512_mul_pd(x1, vs))));
                _mm256_storeu_ps(xh + i + half, _mm512_cvtpd_ps(_mm512_add_pd(_mm512_mul_pd(x0, vs), _mm512_mul_pd(x1, vc))));
            } else {
                /* pairs 2i.. as doubles: lanes (x0, x1) of 4 pairs per vector */
                const __m512 v = _mm512_loadu_ps(xh + 2 * i);
                const __m512i lo4 = _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), hi4 = _mm512_setr_epi64(4, 4, 5, 5, 6, 6, 7, 7);
                __m256 out[2];
                for (int q = 0; q < 2; q++) {
                    const __m512d p = _mm512_cvtps_pd(q ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
                    const __m512d cc = _mm512_permutexvar_pd(q ? hi4 : lo4, vc), ss = _mm512_permutexvar_pd(q ? hi4 : lo4, vs);
                    const __m512d sw = _mm512_permute_pd(p, 0x55); /* (x1, x0) */
                    const __m512d pc = _mm512_mul_pd(p, cc), qs = _mm512_mul_pd(sw, ss);
                    /* lane x0: x0 c - x1 s; lane x1: x1 c + x0 s (= x0 s + x1 c: the sum commutes) */
                    out[q] = _mm512_cvtpd_ps(_mm512_mask_sub_pd(_mm512_add_pd(pc, qs), (__mmask8)0x55, pc, qs));
                }
                _mm512_storeu_ps(xh + 2 * i, _mm512_insertf32x8(_mm512_castps256_ps512(out[0]), out[1], 1));
            }
        }
    }
    return i8;
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* The row kernels follow the matmul's ISA choice (so tests can pin it). */
static int use_avx512(void) { return strcmp(kvs_kernels_isa(), "avx512vnni") == 0; }
#endif

/* The largest magnitude's bits, a branch-free max the compiler vectorizes
 * (asked to: GCC 12's -O2 would not; as gguf_types.c's check of weights),
 * two vector ops a vector, then one compare. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize")))
#endif
int kvs_row_reaches(const float *x, int n, float limit) {
    uint32_t top = 0, at;
    memcpy(&at, &limit, 4);
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        u &= 0x7fffffffu;
        top = u > top ? u : top;
    }
    return top >= at;
}

int kvs_row_overflows(const float *x, int n) { return kvs_row_reaches(x, n, 0x1p40f); }

void kvs_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
#if defined(__x86_64__)
    if (use_avx512()) {
        float mean = rms_sumsq_avx512(x, n) / (float)n;
        scale_mul_avx512(y, x, w, 1.0f / sqrtf(mean + eps), n);
        return;
    }
#endif
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(x[i + l], x[i + l], acc[l]);
    for (int l = 0; i < n; i++, l++) acc[l] = fmaf(x[i], x[i], acc[l]);
    float mean = kvs_tree16(acc) / (float)n;
    float r = 1.0f / sqrtf(mean + eps);
    for (i = 0; i < n; i++) y[i] = (x[i] * r) * w[i];
}

/* e^x for silu: saturating at both ends (no inf from the polynomial scale). */
static inline float expf_sat(float x) {
    if (x > 88.0f) x = 88.0f;
    return kvs_expf_ref(x);
}

void kvs_silu_mul_ref(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = (g / (1.0f + expf_sat(-g))) * up[i];
    }
}

void kvs_silu_mul(float *gate, const float *up, int n) {
#if defined(__x86_64__)
    if (use_avx512()) {
        silu_mul_avx512(gate, up, n);
        return;
    }
    if (strcmp(kvs_kernels_isa(), "avx2") == 0) {
        kvs_silu_mul_avx2(gate, up, n);
        return;
    }
#endif
    kvs_silu_mul_ref(gate, up, n);
}

/*
 * theta_i = pos * freq_scale * base^(-2i/rope_dim) / ff_i, evaluated in
 * double, and the rotation itself in double, rounded once to float: rotating
 * by +p and then by -p returns each value within an ulp or two. ff_i are the
 * per-pair frequency factors of Llama 3's RoPE scaling (1 without them).
 */
/* Per-thread memo: the frequencies of the last (base, dim, factors) and the
 * cos/sin of the last (pos, scale); q and k of a token reuse them. Values are
 * the same as computing afresh (same expressions), so the memo changes no
 * bits. The factors are compared by value (a copy), never by pointer: a
 * freed model's address may be reused by the next one. */
#define ROPE_MEMO_HALF 512
typedef struct rope_memo {
    float base, scale;
    int dim, have_freq, have_pos, have_ff;
    int32_t pos;
    float ff[ROPE_MEMO_HALF];
    double inv_freq[ROPE_MEMO_HALF], c[ROPE_MEMO_HALF], s[ROPE_MEMO_HALF];
} rope_memo;
static _Thread_local rope_memo g_rope;

static double rope_inv_freq(float freq_base, int i, int rope_dim, const float *ff) {
    double f = pow((double)freq_base, -2.0 * i / (double)rope_dim);
    return ff ? f / (double)ff[i] : f;
}

/* The memo's frequencies for (base, rope_dim, ff), refreshed if they are
 * another's; rope_dim / 2 <= ROPE_MEMO_HALF. */
static const double *memo_freqs(rope_memo *mm, float freq_base, int rope_dim, const float *ff) {
    const int half = rope_dim / 2;
    if (!mm->have_freq || mm->base != freq_base || mm->dim != rope_dim || mm->have_ff != (ff != NULL) ||
        (ff && memcmp(mm->ff, ff, (size_t)half * sizeof *ff) != 0)) {
        for (int i = 0; i < half; i++) mm->inv_freq[i] = rope_inv_freq(freq_base, i, rope_dim, ff);
        mm->base = freq_base;
        mm->dim = rope_dim;
        mm->have_ff = ff != NULL;
        if (ff) memcpy(mm->ff, ff, (size_t)half * sizeof *ff);
        mm->have_freq = 1;
        mm->have_pos = 0;
    }
    return mm->inv_freq;
}

/* cos and sin of theta_i for pairs i0 <= i < i1 into c[i - i0], s[i - i0];
 * inv: the memo's frequencies, or NULL (each computed here). */
static void rope_angles(int i0, int i1, int rope_dim, int32_t pos, float freq_base, float freq_scale,
                        const float *ff, const double *inv, double *c, double *s) {
    for (int i = i0; i < i1; i++) {
        double theta = (double)pos * (double)freq_scale * (inv ? inv[i] : rope_inv_freq(freq_base, i, rope_dim, ff));
        sincos(theta, &s[i - i0], &c[i - i0]);
    }
}

void kvs_rope_cos_sin(int rope_dim, int32_t pos, float freq_base, float freq_scale, const float *freq_factors,
                      double *c, double *s) {
    const double *inv = rope_dim / 2 <= ROPE_MEMO_HALF ? memo_freqs(&g_rope, freq_base, rope_dim, freq_factors) : NULL;
    rope_angles(0, rope_dim / 2, rope_dim, pos, freq_base, freq_scale, freq_factors, inv, c, s);
}

/* Rotates pairs i0 <= i < i1 of every head by c[i - i0], s[i - i0]. */
static void rotate_pairs(float *x, int n_head, int head_dim, int rope_dim, int neox, int i0, int i1,
                         const double *c, const double *s) {
    const int half = rope_dim / 2;
    int from = i0; /* the first pair left to the scalar loop */
#if defined(__x86_64__)
    if (use_avx512() && i0 == 0 && i1 == half) from = rotate_pairs_avx512(x, n_head, head_dim, half, neox, c, s);
#endif
    for (int i = from; i < i1; i++)
        for (int h = 0; h < n_head; h++) {
            float *xh = x + (size_t)h * head_dim;
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = (float)(x0 * c[i - i0] - x1 * s[i - i0]);
            xh[b] = (float)(x0 * s[i - i0] + x1 * c[i - i0]);
        }
}

void kvs_rope_apply(float *x, int n_head, int head_dim, int rope_dim, int neox, const double *c, const double *s) {
    rotate_pairs(x, n_head, head_dim, rope_dim, neox, 0, rope_dim / 2, c, s);
}

void kvs_rope(float *x, int n_head, int head_dim, int rope_dim, int32_t pos,
              float freq_base, float freq_scale, int neox) {
    kvs_rope_ff(x, n_head, head_dim, rope_dim, pos, freq_base, freq_scale, neox, NULL);
}

void kvs_rope_ff(float *x, int n_head, int head_dim, int rope_dim, int32_t pos,
                 float freq_base, float freq_scale, int neox, const float *freq_factors) {
    const int half = rope_dim / 2;
    rope_memo *mm = &g_rope;
    if (half > ROPE_MEMO_HALF) { /* beyond any real head size: no memo, the angles in blocks */
        double c[ROPE_MEMO_HALF], s[ROPE_MEMO_HALF];
        for (int i0 = 0; i0 < half; i0 += ROPE_MEMO_HALF) {
            const int i1 = half - i0 < ROPE_MEMO_HALF ? half : i0 + ROPE_MEMO_HALF;
            rope_angles(i0, i1, rope_dim, pos, freq_base, freq_scale, freq_factors, NULL, c, s);
            rotate_pairs(x, n_head, head_dim, rope_dim, neox, i0, i1, c, s);
        }
        return;
    }
    const double *inv = memo_freqs(mm, freq_base, rope_dim, freq_factors);
    if (!(mm->have_pos && mm->pos == pos && mm->scale == freq_scale)) {
        rope_angles(0, half, rope_dim, pos, freq_base, freq_scale, freq_factors, inv, mm->c, mm->s);
        mm->pos = pos;
        mm->scale = freq_scale;
        mm->have_pos = 1;
    }
    rotate_pairs(x, n_head, head_dim, rope_dim, neox, 0, half, mm->c, mm->s);
}

#if defined(__x86_64__)
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(const float *src, uint16_t *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; i++) dst[i] = kvs_f32_to_f16(src[i]);
}
__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(const uint16_t *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = kvs_f16_to_f32(src[i]);
}
#endif

void kvs_f32_to_f16_row(const float *src, uint16_t *dst, int n) {
#if defined(__x86_64__)
    if (kvs_kernels_simd_allowed() && kvs_kernels_cpu_level() >= 1) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) dst[i] = kvs_f32_to_f16(src[i]);
}

void kvs_f16_to_f32_row(const uint16_t *src, float *dst, int n) {
#if defined(__x86_64__)
    if (kvs_kernels_simd_allowed() && kvs_kernels_cpu_level() >= 1) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) dst[i] = kvs_f16_to_f32(src[i]);
}

void kvs_dequantize_row(int type, const void *src, float *dst, int k) {
    int nb = k / KVS_QK;
    switch (type) {
    case KVS_TYPE_F32:
        memcpy(dst, src, (size_t)k * 4);
        break;
    case KVS_TYPE_F16:
    case KVS_TYPE_BF16: {
        /* Weight rows of a file with general.alignment 1 may start at an odd
         * address: read the halves through memcpy there (same values). */
        if (type == KVS_TYPE_F16 && (uintptr_t)src % 2 == 0) {
            kvs_f16_to_f32_row((const uint16_t *)src, dst, k);
            break;
        }
        const uint8_t *s = src;
        for (int i = 0; i < k; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * (size_t)i, 2);
            dst[i] = type == KVS_TYPE_F16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
        }
        break;
    }
    case KVS_TYPE_Q4_0: {
        const kvs_block_q4_0 *b = (const kvs_block_q4_0 *)src;
        for (int i = 0; i < nb; i++) {
            float d = kvs_f16_to_f32(b[i].d);
            for (int e = 0; e < 16; e++) {
                dst[i * 32 + e] = (float)((b[i].qs[e] & 15) - 8) * d;
                dst[i * 32 + e + 16] = (float)((b[i].qs[e] >> 4) - 8) * d;
            }
        }
        break;
    }
    case KVS_TYPE_Q4_1: {
        const kvs_block_q4_1 *b = (const kvs_block_q4_1 *)src;
        for (int i = 0; i < nb; i++) {
            float d = kvs_f16_to_f32(b[i].d), m = kvs_f16_to_f32(b[i].m);
            for (int e = 0; e < 16; e++) {
                dst[i * 32 + e] = fmaf((float)(b[i].qs[e] & 15), d, m);
                dst[i * 32 + e + 16] = fmaf((float)(b[i].qs[e] >> 4), d, m);
            }
        }
        break;
    }
    case KVS_TYPE_Q8_0: {
        const kvs_block_q8_0 *b = (const kvs_block_q8_0 *)src;
        for (int i = 0; i < nb; i++) {
            float d = kvs_f16_to_f32(b[i].d);
            for (int e = 0; e < 32; e++) dst[i * 32 + e] = (float)b[i].qs[e] * d;
        }
        break;
    }
    default: /* Q5 / K-quants (kquant.c); unsupported types never reach here */
        if (kvs_kq_handles(type)) kvs_kq_dequantize_row(type, src, dst, k);
        else memset(dst, 0, (size_t)k * 4);
        break;
    }
}

void kvs_wmat_get_row(const kvs_wmat *w, int i, float *dst) {
    kvs_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)i * w->row_bytes, dst, w->k);
}
