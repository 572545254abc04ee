/*
 * Moves with per-layer RoPE (src/rag/move.h): architectures whose layers
 * rotate with different bases (gemma3: local sliding-window layers base
 * 1e4, global layers 1e6) must move each layer's keys with that layer's
 * base. A key roped at p with layer l's base and moved by d equals the key
 * roped at p + d with the same base (within 2^-22 of its pair, f32), and
 * is far from what the other layer's base would give.
 */
#include <math.h>
#include <stdint.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "rag/move.h"

#define HD 64
#define NT 20

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 4.0 - 2.0);
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

TEST(test_move_uses_layer_base) {
    const kvs_layer_hparams layers[2] = {{.rope_freq_base = 10000.0f, .rope_freq_scale = 1.0f, .window = 512},
                                         {.rope_freq_base = 1000000.0f, .rope_freq_scale = 1.0f, .window = 0}};
    kvs_rope_cfg rc = {HD, HD, 1, 1000000.0f, 1.0f, layers};
    const int32_t p = 100, d = 377;
    float raw[NT * HD];
    for (int i = 0; i < NT * HD; i++) raw[i] = frand();
    for (int l = 0; l < 2; l++) {
        float at_p[NT * HD], direct[NT * HD], moved[NT * HD], other[NT * HD];
        memcpy(at_p, raw, sizeof raw);
        memcpy(direct, raw, sizeof raw);
        memcpy(other, raw, sizeof raw);
        for (int t = 0; t < NT; t++) {
            kvs_rope(at_p + t * HD, 1, HD, HD, p + t, layers[l].rope_freq_base, 1.0f, 1);
            kvs_rope(direct + t * HD, 1, HD, HD, p + d + t, layers[l].rope_freq_base, 1.0f, 1);
            kvs_rope(other + t * HD, 1, HD, HD, p + d + t, layers[1 - l].rope_freq_base, 1.0f, 1);
        }
        kvs_move_k_run_layer(&rc, l, KVS_KV_F32, at_p, moved, NT, d);
        double err = max_abs_diff(moved, direct, NT * HD), far = max_abs_diff(moved, other, NT * HD);
        CHECK_MSG(err <= 4.0 * ldexp(1.0, -22) * 2.0, "layer %d: moved vs direct %g", l, err); /* |pair| <= 2 sqrt 2 */
        CHECK_MSG(far > 0.1, "layer %d: the other base gives nearly the same keys (%g)", l, far);
    }
    /* Without a layer table every layer uses freq_base. */
    kvs_rope_cfg flat = {HD, HD, 1, 10000.0f, 1.0f, NULL};
    float a[NT * HD], b[NT * HD];
    kvs_move_k_run_layer(&flat, 1, KVS_KV_F32, raw, a, NT, d);
    kvs_move_k_run(&flat, KVS_KV_F32, raw, b, NT, d);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* Llama 3 scaling: a layer's per-pair frequency factors (rope_freqs.weight)
 * are part of its rotation, so a move with them equals a rope at p + d with
 * them, and is far from a move without them. */
TEST(test_move_uses_layer_freq_factors) {
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++) ff[i] = i < HD / 8 ? 1.0f : i < HD / 4 ? 2.5f : 8.0f;
    const kvs_layer_hparams layer = {.rope_freq_base = 500000.0f, .rope_freq_scale = 1.0f, .rope_freq_factors = ff};
    kvs_rope_cfg rc = {HD, HD, 0, 500000.0f, 1.0f, &layer};
    const int32_t p = 40, d = 1234;
    float at_p[NT * HD], direct[NT * HD], moved[NT * HD], plain[NT * HD];
    for (int i = 0; i < NT * HD; i++) at_p[i] = direct[i] = frand();
    for (int t = 0; t < NT; t++) {
        kvs_rope_ff(at_p + t * HD, 1, HD, HD, p + t, 500000.0f, 1.0f, 0, ff);
        kvs_rope_ff(direct + t * HD, 1, HD, HD, p + d + t, 500000.0f, 1.0f, 0, ff);
    }
    kvs_move_k_run_layer(&rc, 0, KVS_KV_F32, at_p, moved, NT, d);
    kvs_move_k_run(&rc, KVS_KV_F32, at_p, plain, NT, d); /* no layer table: no factors */
    double err = max_abs_diff(moved, direct, NT * HD), far = max_abs_diff(plain, direct, NT * HD);
    CHECK_MSG(err <= 4.0 * ldexp(1.0, -22) * 2.0, "moved with factors vs direct %g", err);
    CHECK_MSG(far > 0.1, "a move without the factors gives nearly the same keys (%g)", far);
}

int main(void) {
    RUN(test_move_uses_layer_base);
    RUN(test_move_uses_layer_freq_factors);
    return kt_summary();
}
