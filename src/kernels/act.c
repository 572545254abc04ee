/*
 * Activations beyond SiLU (ops.c): GELU-tanh for GeGLU FFNs and the tanh
 * soft-cap of logits. Scalar only, written as explicit float operations on
 * kvs_expf_ref, so every ISA level (and any batching) gives the same bits.
 */
#include <math.h>

#include "kernels/kernels_impl.h"

/* e^x saturating at 88 (no inf from the polynomial's scale). */
static inline float exp_sat(float x) { return kvs_expf_ref(x > 88.0f ? 88.0f : x); }

/* 2 sqrt(2/pi) and 2 sqrt(2/pi) * 0.044715: gelu_tanh(x) = x * sigmoid(2u). */
#define GELU_K0 1.5957691216057308f
#define GELU_K1 0.0713548162726009f

void kvs_gelu_tanh_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        float u2 = x * fmaf(GELU_K1, x * x, GELU_K0);
        gate[i] = (x / (1.0f + exp_sat(-u2))) * up[i];
    }
}

void kvs_softcap_row(float *y, int n, float cap) {
    float inv = 1.0f / cap;
    for (int i = 0; i < n; i++) {
        float t = 2.0f / (1.0f + exp_sat(-2.0f * (y[i] * inv))) - 1.0f; /* tanh */
        y[i] = cap * t;
    }
}
