/*
 * Activations beyond SiLU (ops.c): GELU-tanh for GeGLU FFNs and the tanh
 * soft-cap of logits, written as explicit float operations on kvs_expf_ref,
 * so every ISA level (GELU: act_avx2.c) and any batching give the same bits.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* e^x saturating at 88 (no inf from the polynomial's scale). */
static inline float exp_sat(float x) { return kvs_expf_ref(x > 88.0f ? 88.0f : x); }

void kvs_gelu_tanh_mul_ref(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        float u2 = x * fmaf(KVS_GELU_K1, x * x, KVS_GELU_K0);
        gate[i] = (x / (1.0f + exp_sat(-u2))) * up[i];
    }
}

void kvs_gelu_tanh_mul(float *gate, const float *up, int n) {
#if defined(__x86_64__)
    if (strcmp(kvs_kernels_isa(), "scalar") != 0) { /* every SIMD level has AVX2 (act_avx2.c) */
        kvs_gelu_tanh_mul_avx2(gate, up, n);
        return;
    }
#endif
    kvs_gelu_tanh_mul_ref(gate, up, n);
}

void kvs_softcap_row(float *y, int n, float cap) {
    float inv = 1.0f / cap;
    for (int i = 0; i < n; i++) {
        float t = 2.0f / (1.0f + exp_sat(-2.0f * (y[i] * inv))) - 1.0f; /* tanh */
        y[i] = cap * t;
    }
}
