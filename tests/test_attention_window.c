/*
 * Sliding-window and recalibrated attention (kvs_attention_window): every
 * ISA path is memcmp-equal to the scalar reference, a window that covers
 * every visible slot gives the bits of kvs_attention, a recalibration with
 * T = S = 1 (or on rows before the documents' end) gives the bits of none,
 * both are batch-invariant (each query alone = all together), and the
 * results match float64 formulas: a softmax over slots (pos - window, pos],
 * and APE's merge of the documents' softmax at temperature T, weighed by
 * their sum of weights to the power S (tolerances stated below).
 */
#include "harness.h"
#include "test_kernels_util.h"

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

typedef struct wcase {
    int m, n_head, n_kv, hd, n_ctx, kv_type, window;
    float *q;
    void *k, *v;
    int32_t *pos;
} wcase;

static wcase make(int m, int nh, int nkv, int hd, int ctx, int kv_type, int start, int window) {
    wcase c = {m, nh, nkv, hd, ctx, kv_type, window, NULL, NULL, NULL, NULL};
    size_t kvn = (size_t)nkv * ctx * hd, qn = (size_t)m * nh * hd;
    c.q = xmalloc(qn * 4);
    kt_rand_vec(c.q, qn, 2.0f);
    float *kf = xmalloc(kvn * 4), *vf = xmalloc(kvn * 4);
    kt_rand_vec(kf, kvn, 2.0f);
    kt_rand_vec(vf, kvn, 1.0f);
    if (kv_type != KVS_KV_F32) { /* F16, Q8: rows of their own size */
        c.k = xmalloc(kvs_kv_row_bytes(kv_type, hd) * nkv * ctx);
        c.v = xmalloc(kvs_kv_row_bytes(kv_type, hd) * nkv * ctx);
        kvs_kv_rows_store(kv_type, kf, c.k, nkv * ctx, hd);
        kvs_kv_rows_store(kv_type, vf, c.v, nkv * ctx, hd);
        free(kf);
        free(vf);
    } else {
        c.k = kf;
        c.v = vf;
    }
    c.pos = xmalloc((size_t)m * 4);
    for (int t = 0; t < m; t++) c.pos[t] = start + t < ctx ? start + t : ctx - 1;
    return c;
}

static void drop(wcase *c) { free(c->q); free(c->k); free(c->v); free(c->pos); }

/* out (m, n_head, hd); rows [t0, t0 + mm) of the case only. */
static void run_recal(const wcase *c, kvs_pool *pool, int nth, int window, const kvs_attn_recal *rc, int t0, int mm,
                      float *out) {
    void *work = xmalloc(kvs_attention_work_size(nth, c->n_ctx));
    size_t row = (size_t)c->n_head * c->hd;
    kvs_attention_window(pool, out + t0 * row, c->q + t0 * row, c->pos + t0, mm, c->k, c->v, c->kv_type,
                         c->n_head, c->n_kv, c->hd, c->n_ctx, 1.0f / sqrtf((float)c->hd), window, rc, NULL, work);
    free(work);
}

static void run(const wcase *c, kvs_pool *pool, int nth, int window, int t0, int mm, float *out) {
    run_recal(c, pool, nth, window, NULL, t0, mm, out);
}

static const struct { int m, nh, nkv, hd, ctx, start, window; } k_cases[] = {
    {1, 4, 1, 256, 700, 690, 512},  /* decode, gemma3-like head (256 dims, one kv head) */
    {1, 9, 3, 64, 600, 517, 100},   /* decode, window not a multiple of 16 */
    {1, 9, 3, 64, 600, 517, 1},     /* sees itself only */
    {37, 9, 3, 64, 300, 100, 33},   /* prefill rows with different lo */
    {64, 4, 1, 256, 200, 0, 48},    /* prefill from 0 across the window edge */
    {20, 8, 1, 128, 90, 60, 16},
    {5, 4, 4, 32, 50, 20, 7},
    {48, 4, 1, 256, 1100, 1000, 512},
    /* units of at most 4 rows (attention_avx2_decode.c: keys in lanes) */
    {2, 4, 2, 64, 300, 250, 40},    /* two tokens of a group of 2: rows with different n and lo */
    {2, 9, 3, 64, 500, 400, 100},   /* two tokens of a group of 3 (AVX-512 Q8: 3 rows a token share loads) */
    {1, 4, 4, 128, 200, 199, 0},    /* one row */
    {1, 4, 2, 32, 333, 300, 77},    /* two rows, head_dim 32 */
};

/* The SIMD paths the CPU has against ref (the scalar result of the case);
 * returns the number of comparisons. */
static int check_isas(const wcase *c, const kvs_attn_recal *rc, const float *ref, const char *label) {
    const char *isas[] = {"avx2", "avx512vnni"};
    size_t n = (size_t)c->m * c->n_head * c->hd;
    float *got = xmalloc(n * 4);
    int compared = 0;
    for (size_t a = 0; a < 2; a++) {
        if (kvs_kernels_set_isa(isas[a]) != 0) continue; /* CPU lacks it */
        memset(got, 0xff, n * 4);
        run_recal(c, NULL, 1, c->window, rc, 0, c->m, got);
        CHECK_MSG(memcmp(ref, got, n * 4) == 0, "%s: %s differs from scalar", label, isas[a]);
        compared++;
    }
    kvs_kernels_set_isa("best");
    free(got);
    return compared;
}

TEST(test_window_simd_equals_scalar) {
    int compared = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        for (int kv_type = 0; kv_type <= 2; kv_type++) {
            wcase c = make(k_cases[i].m, k_cases[i].nh, k_cases[i].nkv, k_cases[i].hd, k_cases[i].ctx, kv_type,
                           k_cases[i].start, k_cases[i].window);
            size_t n = (size_t)c.m * c.n_head * c.hd;
            float *ref = xmalloc(n * 4);
            kvs_kernels_set_isa("scalar");
            run(&c, NULL, 1, c.window, 0, c.m, ref);
            char label[64];
            snprintf(label, sizeof label, "case %zu kv_type %d", i, kv_type);
            compared += check_isas(&c, NULL, ref, label);
            free(ref);
            drop(&c);
        }
    printf("  %d ISA comparisons\n", compared);
}

/* A window wider than every query's history is no window at all. */
TEST(test_window_covering_equals_full) {
    wcase c = make(30, 8, 2, 64, 200, 0, 120, 0);
    size_t n = (size_t)c.m * c.n_head * c.hd;
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    run(&c, NULL, 1, 0, 0, c.m, a);
    run(&c, NULL, 1, 200, 0, c.m, b);
    CHECK(memcmp(a, b, n * 4) == 0);
    run(&c, NULL, 1, 150, 0, c.m, b); /* max pos 149: sees 150 slots */
    CHECK(memcmp(a, b, n * 4) == 0);
    run(&c, NULL, 1, 149, 0, c.m, b); /* the last query loses slot 0 */
    CHECK(memcmp(a, b, n * 4) != 0);
    free(a);
    free(b);
    drop(&c);
}

/* Each query alone, one at a time, on 2 threads (and in calls of 7) vs all
 * at once on 1. */
static void check_batch_invariant(const wcase *c, int window, const kvs_attn_recal *rc) {
    kvs_pool *pool = kvs_pool_new(2);
    CHECK(pool != NULL);
    size_t n = (size_t)c->m * c->n_head * c->hd;
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    run_recal(c, NULL, 1, window, rc, 0, c->m, a);
    for (int t = 0; t < c->m; t++) run_recal(c, pool, 2, window, rc, t, 1, b);
    CHECK(memcmp(a, b, n * 4) == 0);
    for (int t = 0; t < c->m; t += 7) run_recal(c, pool, 2, window, rc, t, c->m - t < 7 ? c->m - t : 7, b);
    CHECK(memcmp(a, b, n * 4) == 0);
    free(a);
    free(b);
    kvs_pool_free(pool);
}

TEST(test_window_batch_invariant) {
    wcase c = make(40, 4, 1, 256, 400, 0, 300, 64);
    check_batch_invariant(&c, c.window, NULL);
    drop(&c);
}

static double kv_at(const wcase *c, const void *base, size_t i) {
    return c->kv_type == 0 ? kvs_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* Against a float64 softmax over the window only. */
TEST(test_window_vs_double) {
    for (int kv_type = 0; kv_type <= 1; kv_type++) {
        wcase c = make(9, 6, 2, 64, 300, kv_type, 250, 37);
        c.pos[2] = 10; /* a query whose history is shorter than the window */
        size_t n = (size_t)c.m * c.n_head * c.hd;
        float *out = xmalloc(n * 4);
        run(&c, NULL, 1, c.window, 0, c.m, out);
        double worst = 0;
        for (int t = 0; t < c.m; t++)
            for (int h = 0; h < c.n_head; h++) {
                int g = h / (c.n_head / c.n_kv), hi = c.pos[t] + 1, lo = hi > c.window ? hi - c.window : 0;
                const float *q = c.q + ((size_t)t * c.n_head + h) * c.hd;
                double s[64], mx = -1e300, sum = 0;
                for (int j = lo; j < hi; j++) {
                    double a = 0;
                    for (int d = 0; d < c.hd; d++) a += q[d] * kv_at(&c, c.k, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    s[j - lo] = a / sqrt((double)c.hd);
                    if (s[j - lo] > mx) mx = s[j - lo];
                }
                for (int j = lo; j < hi; j++) { s[j - lo] = exp(s[j - lo] - mx); sum += s[j - lo]; }
                for (int d = 0; d < c.hd; d++) {
                    double o = 0;
                    for (int j = lo; j < hi; j++) o += s[j - lo] * kv_at(&c, c.v, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    double err = fabs(out[((size_t)t * c.n_head + h) * c.hd + d] - o / sum);
                    if (err > worst) worst = err;
                }
            }
        CHECK_MSG(worst < 2e-5, "kv_type %d: max abs error %g", kv_type, worst); /* |v| <= 1 */
        free(out);
        drop(&c);
    }
}

/* Documents at [lo, hi); the case's queries straddle hi (rows before it are
 * not recalibrated). */
static const struct { int m, nh, nkv, hd, ctx, start, window, lo, hi; float t, s; } k_recal[] = {
    {1, 9, 3, 64, 600, 517, 0, 40, 400, 0.9f, 0.9f},     /* decode, SmolLM2-like heads */
    {30, 9, 3, 64, 300, 150, 0, 17, 161, 0.9f, 0.9f},    /* question rows from before hi to after */
    {48, 4, 1, 256, 700, 600, 512, 100, 610, 0.7f, 1.2f}, /* gemma3-like, window cuts into the documents */
    {20, 8, 2, 128, 90, 60, 0, 0, 61, 1.5f, 0.5f},       /* documents from slot 0 */
    {7, 4, 4, 32, 50, 20, 7, 3, 22, 0.9f, 0.9f},         /* head_dim 32, short window */
};

static kvs_attn_recal recal_of(size_t i) {
    return (kvs_attn_recal){k_recal[i].lo, k_recal[i].hi, 1.0f / k_recal[i].t, k_recal[i].s};
}

TEST(test_recal_simd_equals_scalar) {
    int compared = 0;
    for (size_t i = 0; i < sizeof k_recal / sizeof k_recal[0]; i++)
        for (int kv_type = 0; kv_type <= 2; kv_type++) {
            wcase c = make(k_recal[i].m, k_recal[i].nh, k_recal[i].nkv, k_recal[i].hd, k_recal[i].ctx, kv_type,
                           k_recal[i].start, k_recal[i].window);
            kvs_attn_recal rc = recal_of(i);
            size_t n = (size_t)c.m * c.n_head * c.hd;
            float *ref = xmalloc(n * 4), *plain = xmalloc(n * 4);
            kvs_kernels_set_isa("scalar");
            run_recal(&c, NULL, 1, c.window, &rc, 0, c.m, ref);
            run(&c, NULL, 1, c.window, 0, c.m, plain);
            /* recalibrated rows differ from plain ones, the others do not */
            size_t row = (size_t)c.n_head * c.hd;
            for (int t = 0; t < c.m; t++)
                CHECK_MSG((memcmp(ref + t * row, plain + t * row, row * 4) != 0) == (c.pos[t] >= rc.hi),
                          "case %zu row %d (pos %d, hi %d)", i, t, c.pos[t], rc.hi);
            char label[64];
            snprintf(label, sizeof label, "recal case %zu kv_type %d", i, kv_type);
            compared += check_isas(&c, &rc, ref, label);
            free(ref);
            free(plain);
            drop(&c);
        }
    printf("  %d ISA comparisons\n", compared);
}

/* Documents holding nearly all of the weight with a small temperature and
 * scale (T = S = 0.2, allowed: 0.1..4): f ~ 1e-8, and S + (f - 1) Pd had
 * lost the other keys' sum to rounding: S = 0, outputs NaN (the CLI's
 * generate answered end-of-sequence from NaN logits). Finite on every
 * path, and each path the scalar bits. */
TEST(test_recal_small_temperature_and_scale_finite) {
    for (int kv_type = 0; kv_type <= 2; kv_type++) {
        wcase c = make(30, 9, 3, 64, 300, kv_type, 150, 0);
        kvs_attn_recal rc = {17, 161, 1.0f / 0.2f, 0.2f};
        size_t n = (size_t)c.m * c.n_head * c.hd;
        float *ref = xmalloc(n * 4);
        kvs_kernels_set_isa("scalar");
        run_recal(&c, NULL, 1, 0, &rc, 0, c.m, ref);
        int finite = 1;
        for (size_t i = 0; i < n; i++) finite &= isfinite(ref[i]) != 0;
        CHECK_MSG(finite, "kv_type %d: non-finite outputs", kv_type);
        char label[64];
        snprintf(label, sizeof label, "recal T = S = 0.2, kv_type %d", kv_type);
        check_isas(&c, &rc, ref, label);
        free(ref);
        drop(&c);
    }
    kvs_kernels_set_isa("best");
}

/* T = S = 1 is no recalibration, bit for bit (every path). */
TEST(test_recal_identity) {
    wcase c = make(24, 9, 3, 64, 400, 0, 300, 0);
    kvs_attn_recal rc = {50, 310, 1.0f, 1.0f};
    size_t n = (size_t)c.m * c.n_head * c.hd;
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    const char *isas[] = {"scalar", "avx2", "best"};
    for (int i = 0; i < 3; i++) {
        if (kvs_kernels_set_isa(isas[i]) != 0) continue;
        run(&c, NULL, 1, 0, 0, c.m, a);
        run_recal(&c, NULL, 1, 0, &rc, 0, c.m, b);
        CHECK_MSG(memcmp(a, b, n * 4) == 0, "%s", isas[i]);
    }
    kvs_kernels_set_isa("best");
    free(a);
    free(b);
    drop(&c);
}

TEST(test_recal_batch_invariant) {
    wcase c = make(40, 9, 3, 64, 400, 0, 280, 0);
    kvs_attn_recal rc = {30, 300, 1.0f / 0.9f, 0.9f};
    check_batch_invariant(&c, 0, &rc);
    drop(&c);
}

/* APE's formula in float64, with absolute (unshifted) weights: the documents
 * D at temperature T, w_D = sum over D of e^(s_j / T), the rest R plain:
 * out = (sum_R e^s_j v_j + w_D^(S-1) sum_D e^(s_j/T) v_j) / (sum_R e^s_j + w_D^S). */
TEST(test_recal_vs_double) {
    for (int kv_type = 0; kv_type <= 1; kv_type++) {
        wcase c = make(6, 6, 2, 64, 300, kv_type, 200, 0);
        const double T = 0.8, S = 0.85;
        kvs_attn_recal rc = {20, 180, (float)(1.0 / T), (float)S};
        size_t n = (size_t)c.m * c.n_head * c.hd;
        float *out = xmalloc(n * 4);
        run_recal(&c, NULL, 1, 0, &rc, 0, c.m, out);
        double worst = 0;
        for (int t = 0; t < c.m; t++)
            for (int h = 0; h < c.n_head; h++) {
                int g = h / (c.n_head / c.n_kv), hi = c.pos[t] + 1;
                const float *q = c.q + ((size_t)t * c.n_head + h) * c.hd;
                double w[300], sum_r = 0, sum_d = 0;
                for (int j = 0; j < hi; j++) {
                    double a = 0;
                    for (int d = 0; d < c.hd; d++) a += q[d] * kv_at(&c, c.k, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    a /= sqrt((double)c.hd);
                    int doc = j >= rc.lo && j < rc.hi;
                    w[j] = exp(doc ? a / T : a);
                    if (doc) sum_d += w[j];
                    else sum_r += w[j];
                }
                double fd = pow(sum_d, S - 1.0);
                for (int d = 0; d < c.hd; d++) {
                    double o = 0;
                    for (int j = 0; j < hi; j++)
                        o += (j >= rc.lo && j < rc.hi ? fd : 1.0) * w[j] *
                             kv_at(&c, c.v, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    double err = fabs(out[((size_t)t * c.n_head + h) * c.hd + d] - o / (sum_r + fd * sum_d));
                    if (err > worst) worst = err;
                }
            }
        CHECK_MSG(worst < 3e-5, "kv_type %d: max abs error %g", kv_type, worst); /* |v| <= 1 */
        free(out);
        drop(&c);
    }
}

int main(void) {
    RUN(test_window_simd_equals_scalar);
    RUN(test_recal_simd_equals_scalar);
    RUN(test_recal_small_temperature_and_scale_finite);
    RUN(test_recal_identity);
    RUN(test_recal_batch_invariant);
    RUN(test_recal_vs_double);
    RUN(test_window_covering_equals_full);
    RUN(test_window_batch_invariant);
    RUN(test_window_vs_double);
    return kt_summary();
}
