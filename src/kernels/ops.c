/*
 * Row kernels: RMSNorm, RoPE, SiLU, half conversions, dequantization.
 * Each is a pure function of its row, written as an explicit sequence of
 * float operations (fmaf, no contraction), so results are batch-invariant and
 * identical whether the compiler vectorizes them or not.
 */
#include <math.h>

#include "kernels/kernels_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

void kvs_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
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

void kvs_silu_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = (g / (1.0f + expf_sat(-g))) * up[i];
    }
}

/*
 * theta_i = pos * freq_scale * base^(-2i/rope_dim), evaluated in double, and
 * the rotation itself in double, rounded once to float: rotating by +p and
 * then by -p returns each value within an ulp or two.
 */
void kvs_rope(float *x, int n_head, int head_dim, int rope_dim, int32_t pos,
              float freq_base, float freq_scale, int neox) {
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        double inv_freq = pow((double)freq_base, -2.0 * i / (double)rope_dim);
        double theta = (double)pos * (double)freq_scale * inv_freq;
        double c = cos(theta), s = sin(theta);
        for (int h = 0; h < n_head; h++) {
            float *xh = x + (size_t)h * head_dim;
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = (float)(x0 * c - x1 * s);
            xh[b] = (float)(x0 * s + x1 * c);
        }
    }
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

int kvs_kernels_simd_allowed(void);

void kvs_f32_to_f16_row(const float *src, uint16_t *dst, int n) {
#if defined(__x86_64__)
    if (kvs_kernels_simd_allowed() && __builtin_cpu_supports("f16c")) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++) dst[i] = kvs_f32_to_f16(src[i]);
}

void kvs_f16_to_f32_row(const uint16_t *src, float *dst, int n) {
#if defined(__x86_64__)
    if (kvs_kernels_simd_allowed() && __builtin_cpu_supports("f16c")) {
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
        kvs_f16_to_f32_row((const uint16_t *)src, dst, k);
        break;
    case KVS_TYPE_BF16: {
        const uint16_t *s = (const uint16_t *)src;
        for (int i = 0; i < k; i++) dst[i] = kvs_bf16_to_f32(s[i]);
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
    default: /* unsupported types never reach here (kvs_type_traits_of) */
        memset(dst, 0, (size_t)k * 4);
        break;
    }
}

void kvs_wmat_get_row(const kvs_wmat *w, int i, float *dst) {
    kvs_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)i * w->row_bytes, dst, w->k);
}
