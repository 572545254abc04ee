/*
 * Kernel benchmark at SmolLM2-135M shapes: matmul GOPS (2*m*n*k per second)
 * and weight GB/s for m = 1 (decode), m = 8 (8 streams batched) and m = 512
 * (prefill), per ISA path (SIMD paths: GGUF rows and packed rows) and thread count; attention prefill/decode at 512, 2048, 4096 context; the
 * cost of an empty kvs_pool_run. Medians over several repetitions.
 * --gemma3: the matmuls at gemma3-270m Q4_K_M's shapes and types instead
 * (Q5_0 where k = 640 is no multiple of 256, Q4_K / Q6_K, the Q8_0 head),
 * and its attention shape (4 heads on one kv head of 256 dims).
 * --f16: SmolLM2's shapes with F16 weights (the float path: widened rows,
 * f32 activations); --f32: the same with F32 weights (nothing to widen:
 * whether vcvtph2ps bounds a kernel); --q8_0 / --q4_0: the same with Q8_0 /
 * Q4_0 weights. --shape NAME and --m M time only that shape (a prefix of its
 * name, e.g. ffn_down) and that row count (any; by default 1, 8 and 512):
 * A/B runs of one kernel in seconds, not a minute. --attn-depth D times the
 * attention of 512 tokens after D instead (a model's pp512 at depth D);
 * --q-scale S multiplies the queries (S 6: rows peaked as on real text).
 *
 *   bench_kernels [--quick] [--isa NAME] [--threads N] [--cpu] [--no-attn] [--kv-type f16|f32|q8] [--gemma3 | --f16 | --f32 | --q8_0 | --q4_0 | --q5_0]
 *                 [--shape NAME] [--m M] [--attn-depth D] [--q-scale S]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

/* --cpu: single-thread figures from the thread's CPU time, which excludes
 * time the thread was descheduled (useful on a shared, loaded machine). */
static int use_cpu_clock;
static const char *only_shape; /* --shape: a prefix of the shape's name */
static int only_m;             /* --m: 0 for all */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(void) { return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f; }

static size_t row_bytes(int type, int k) {
    switch (type) {
    case KVS_TYPE_Q4_0: return (size_t)k / 32 * 18;
    case KVS_TYPE_Q4_1: return (size_t)k / 32 * 20;
    case KVS_TYPE_Q8_0: return (size_t)k / 32 * 34;
    case KVS_TYPE_Q5_0: return (size_t)k / 32 * 22;
    case KVS_TYPE_Q4_K: return (size_t)k / 256 * 144;
    case KVS_TYPE_Q6_K: return (size_t)k / 256 * 210;
    case KVS_TYPE_F16: return (size_t)k * 2;
    default: return (size_t)k * 4;
    }
}

static kvs_wmat make_w(int type, int n, int k) {
    kvs_wmat w = {.type = type, .n = n, .k = k, .row_bytes = row_bytes(type, k)};
    size_t bytes = w.row_bytes * (size_t)n;
    /* on 2 MiB pages where the kernel allows it, as a model's arena holds
     * the rows its kernels stream (weights.c, pack.c kvs_huge_alloc), so
     * that a matrix larger than the caches (gemma3's head) streams as it
     * does in a model */
    uint8_t *p = kvs_huge_alloc((bytes + 63) & ~(size_t)63);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    if (type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q8_0) {
        size_t bs = type == KVS_TYPE_Q4_0 ? 18 : type == KVS_TYPE_Q4_1 ? 20 : 34;
        for (size_t b = 0; b < bytes / bs; b++) {
            uint16_t d = kvs_f32_to_f16(0.01f), m = kvs_f32_to_f16(-0.05f);
            memcpy(p + b * bs, &d, 2);
            if (type == KVS_TYPE_Q4_1) memcpy(p + b * bs + 2, &m, 2);
        }
    } else if (type == KVS_TYPE_Q5_0 || type == KVS_TYPE_Q4_K || type == KVS_TYPE_Q6_K) {
        /* the f16 scales (and Q4_K's min) at their offsets in each block */
        size_t bs = type == KVS_TYPE_Q5_0 ? 22 : type == KVS_TYPE_Q4_K ? 144 : 210;
        size_t at = type == KVS_TYPE_Q6_K ? 208 : 0;
        for (size_t b = 0; b < bytes / bs; b++) {
            uint16_t d = kvs_f32_to_f16(0.01f);
            memcpy(p + b * bs + at, &d, 2);
            if (type == KVS_TYPE_Q4_K) memcpy(p + b * bs + 2, &d, 2);
        }
    } else if (type == KVS_TYPE_F32) { /* finite values: random bytes hold NaNs and subnormals */
        for (size_t i = 0; i < bytes / 4; i++) {
            float f = rndf();
            memcpy(p + 4 * i, &f, 4);
        }
    } else if (type == KVS_TYPE_F16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            uint16_t h = kvs_f32_to_f16(rndf());
            memcpy(p + 2 * i, &h, 2);
        }
    }
    w.data = p;
    return w;
}

static const char *type_name(int t) {
    return t == KVS_TYPE_Q4_1 ? "Q4_1" : t == KVS_TYPE_Q8_0 ? "Q8_0" : t == KVS_TYPE_Q4_0 ? "Q4_0"
         : t == KVS_TYPE_Q5_0 ? "Q5_0" : t == KVS_TYPE_Q4_K ? "Q4_K" : t == KVS_TYPE_Q6_K ? "Q6_K"
         : t == KVS_TYPE_F16 ? "F16" : "F32";
}

/* Median seconds of one kvs_matmul call; repeats until ~min_s total. */
static double time_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y,
                          void *work, double min_s) {
    double t[64];
    int reps = 0;
    kvs_matmul(pool, w, x, m, y, work); /* warm */
    double start = now_s();
    while (reps < 64 && (reps < 5 || now_s() - start < min_s)) {
        double a = now_s();
        kvs_matmul(pool, w, x, m, y, work);
        t[reps++] = now_s() - a;
    }
    return median(t, reps);
}

typedef struct shape {
    const char *name;
    int type, k, n;
} shape;

static const shape k_smollm2[] = {
    {"attn_q/o 576->576", KVS_TYPE_Q4_1, 576, 576},
    {"attn_k/v 576->192", KVS_TYPE_Q4_1, 576, 192},
    {"ffn_up   576->1536", KVS_TYPE_Q4_1, 576, 1536},
    {"ffn_down 1536->576", KVS_TYPE_Q4_1, 1536, 576},
    {"output   576->49152", KVS_TYPE_Q8_0, 576, 49152},
    {NULL, 0, 0, 0},
};

static const shape k_gemma3[] = {
    {"attn_q   640->1024", KVS_TYPE_Q5_0, 640, 1024},
    {"ffn_up   640->2048", KVS_TYPE_Q5_0, 640, 2048},
    {"attn_o   1024->640", KVS_TYPE_Q4_K, 1024, 640},
    {"ffn_down 2048->640", KVS_TYPE_Q4_K, 2048, 640},
    {"ffn_down 2048->640", KVS_TYPE_Q6_K, 2048, 640},
    {"output   640->262144", KVS_TYPE_Q8_0, 640, 262144},
    {NULL, 0, 0, 0},
};

static const shape *g_shapes = k_smollm2;
static int g_type = -1; /* --f16 / --f32: every shape's weights of this type instead */

static void bench_matmul(const char *isa, int threads, int quick, int pack) {
    const shape *shapes = g_shapes;
    kvs_pool *pool = threads > 1 ? kvs_pool_new(threads) : NULL;
    /* decode, batched decode of 8 streams (GB/s(w): weights read once per call), prefill */
    int ms[] = {1, 8, 512};
    if (only_m) ms[0] = only_m; /* --m: that row count alone, any value */
    for (size_t s = 0; shapes[s].name; s++) {
        if (only_shape && strncmp(shapes[s].name, only_shape, strlen(only_shape))) continue;
        kvs_wmat w = make_w(g_type >= 0 ? g_type : shapes[s].type, shapes[s].n, shapes[s].k);
        /* packed rows (pack.c), as a model loads them: the SIMD paths read them;
         * with AMX, the tiles of Q8_0, Q4_0, Q4_1 and Q5_0 as well
         * (kvs_wmat_tiles_to: their batch and prefill tiles read them) */
        if (pack && kvs_wmat_pack(&w, 1) != 0) { fprintf(stderr, "bench_kernels: pack: out of memory\n"); exit(1); }
        void *tiles = NULL;
        if (pack && !strcmp(isa, "amx") && kvs_wmat_tiles_bytes(&w)) {
            tiles = aligned_alloc(64, (kvs_wmat_tiles_bytes(&w) + 63) & ~(size_t)63);
            if (!tiles) { fprintf(stderr, "bench_kernels: tiles: out of memory\n"); exit(1); }
            kvs_wmat_tiles_to(&w, tiles);
        }
        for (int mi = 0; mi < (only_m ? 1 : 3); mi++) {
            int m = ms[mi];
            if (!strcmp(isa, "scalar") && m > 1) continue; /* minutes, not informative */
            if (quick && m > 8 && shapes[s].n > 10000) m = 64;
            float *x = malloc(sizeof(float) * (size_t)m * w.k);
            float *y = malloc(sizeof(float) * (size_t)m * w.n);
            for (size_t i = 0; i < (size_t)m * w.k; i++) x[i] = rndf();
            void *work = malloc(kvs_matmul_work_size(&w, m) + 64);
            double t = time_matmul(pool, &w, x, m, y, work, quick ? 0.1 : 0.4);
            double gops = 2.0 * m * w.n * w.k / t / 1e9;
            double gbs = (double)w.row_bytes * w.n / t / 1e9;
            printf("  %-10s t=%d  %-20s %-4s%s m=%-4d %9.1f us  %7.1f GOPS  %6.1f GB/s(w)\n", isa,
                   threads, shapes[s].name, type_name(w.type), w.packed ? " packed" : "", m, t * 1e6, gops, gbs);
            fflush(stdout);
            free(x); free(y); free(work);
        }
        kvs_wmat_unpack(&w);
        free(tiles);
        free((void *)w.data);
    }
    kvs_pool_free(pool);
}

/* Attention shapes: query heads, kv heads, head_dim. */
typedef struct attn_shape {
    int nh, nkv, hd;
} attn_shape;
static const attn_shape k_attn_smollm2 = {9, 3, 64}, k_attn_gemma3 = {4, 1, 256};
static const attn_shape *g_attn = &k_attn_smollm2;
static int g_kv_type = KVS_KV_F16; /* --kv-type */

static int g_attn_depth = -1; /* --attn-depth: 512 tokens after this many */
static float g_q_scale = 1.0f; /* --q-scale: queries times this (peaked rows) */

/* Attention of one layer (g_attn; g_kv_type KV): prefill of ctx tokens (causal)
 * and decode of one token at position ctx-1; with --attn-depth D, the
 * prefill of 512 tokens after D (a model's pp512 at depth D). With fewer kv
 * heads than threads (gemma3 on 2) decode takes the split path (kvs_isa). */
static void bench_attention(const char *isa, int threads, int quick) {
    kvs_pool *pool = threads > 1 ? kvs_pool_new(threads) : NULL;
    const int nh = g_attn->nh, nkv = g_attn->nkv, hd = g_attn->hd;
    int ctxs[] = {512, 2048, 4096}, ncase = 3;
    if (g_attn_depth >= 0) {
        ctxs[0] = g_attn_depth + 512;
        ncase = 1;
    }
    for (int ci = 0; ci < ncase; ci++) {
        const int ctx = ctxs[ci], first = g_attn_depth >= 0 ? g_attn_depth : 0, m = ctx - first;
        if (!strcmp(isa, "scalar") && ctx > 512) continue;
        const size_t kvn = (size_t)nkv * ctx * hd, kvb = (size_t)nkv * ctx * kvs_kv_row_bytes(g_kv_type, hd);
        float *kf = malloc(kvn * sizeof *kf), *vf = malloc(kvn * sizeof *vf);
        for (size_t i = 0; i < kvn; i++) { kf[i] = rndf(); vf[i] = rndf(); }
        void *k = malloc(kvb), *v = malloc(kvb);
        kvs_kv_rows_store(g_kv_type, kf, k, nkv * ctx, hd);
        kvs_kv_rows_store(g_kv_type, vf, v, nkv * ctx, hd);
        free(kf);
        free(vf);
        float *q = malloc(sizeof(float) * (size_t)ctx * nh * hd), *out = malloc(sizeof(float) * (size_t)ctx * nh * hd);
        for (size_t i = 0; i < (size_t)ctx * nh * hd; i++) q[i] = rndf() * g_q_scale;
        int32_t *pos = malloc(sizeof(int32_t) * ctx);
        for (int t = 0; t < ctx; t++) pos[t] = first + t;
        void *work = malloc(kvs_attention_work_size(threads, ctx));
        double tp[16], td[64];
        int reps = quick ? 2 : g_attn_depth >= 0 ? 7 : (ctx >= 4096 ? 3 : 5);
        for (int r = 0; r < reps; r++) {
            double a = now_s();
            kvs_attention(pool, out, q, pos, m, k, v, g_kv_type, nh, nkv, hd, ctx, 0.125f, work);
            tp[r] = now_s() - a;
        }
        /* decode with the rows' decode layout (kernels.h) where the path
         * reads one, alternating with the decode without */
        const int lay_on = kvs_attn_layout_wanted(g_kv_type, hd, nh / nkv);
        void *lay_data = lay_on ? aligned_alloc(64, (size_t)nkv * kvs_attn_layout_head_bytes(hd, ctx)) : NULL;
        const kvs_attn_layout lay = {.data = lay_data, .n = ctx & ~15};
        if (lay_data) kvs_attn_layout_build(g_kv_type, k, v, nkv, hd, ctx, 0, lay.n, lay_data);
        double tl[32];
        for (int r = 0; r < 32; r++) {
            double a = now_s();
            kvs_attention(pool, out, q, pos + m - 1, 1, k, v, g_kv_type, nh, nkv, hd, ctx, 0.125f, work);
            td[r] = now_s() - a;
            if (!lay_data) continue;
            a = now_s();
            kvs_attention_window(pool, out, q, pos + m - 1, 1, k, v, g_kv_type, nh, nkv, hd, ctx, 0.125f, 0, NULL,
                                 &lay, work);
            tl[r] = now_s() - a;
        }
        free(lay_data);
        double p = median(tp, reps), d = median(td, 32);
        /* flops: QK and PV, 2 flops per MAC, the keys of each row (causal) */
        double flops = 2.0 * 2.0 * nh * hd * ((double)ctx * (ctx + 1) / 2 - (double)first * (first + 1) / 2);
        printf("  %-10s t=%d  attention %s %dx%dx%d ctx=%-5d after %-5d prefill %9.2f ms (%6.1f GFLOPS, %7.2f us/token)  decode %8.1f us",
               isa, threads, kvs_kv_type_name(g_kv_type), nh, nkv, hd, ctx, first, p * 1e3, flops / p / 1e9,
               p / m * 1e6, d * 1e6);
        if (lay_data) printf("  decode-with-layout %8.1f us", median(tl, 32) * 1e6);
        printf("\n");
        fflush(stdout);
        free(k); free(v); free(q); free(out); free(pos); free(work);
    }
    kvs_pool_free(pool);
}

static void noop(void *a, int ith, int nth) { (void)a; (void)ith; (void)nth; }

static void noop_chunk(void *a, int chunk, int ith) { (void)a; (void)chunk; (void)ith; }

/* Wall clock on purpose: the cost is waiting for the other thread. */
static void bench_pool(int threads) {
    kvs_pool *pool = kvs_pool_new(threads);
    double t[7], u[7];
    struct timespec ts;
    for (int r = 0; r < 7; r++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double a = ts.tv_sec + ts.tv_nsec * 1e-9;
        for (int i = 0; i < 20000; i++) kvs_pool_run(pool, noop, NULL);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double b = ts.tv_sec + ts.tv_nsec * 1e-9;
        for (int i = 0; i < 20000; i++) kvs_pool_for(pool, 2 * threads, noop_chunk, NULL);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t[r] = (b - a) / 20000;
        u[r] = (ts.tv_sec + ts.tv_nsec * 1e-9 - b) / 20000;
    }
    printf("  pool t=%d: empty kvs_pool_run %.3f us, kvs_pool_for of %d empty chunks %.3f us "
           "(medians of 7 x 20000)\n", threads, median(t, 7) * 1e6, 2 * threads, median(u, 7) * 1e6);
    kvs_pool_free(pool);
}

int main(int argc, char **argv) {
    int quick = 0, only_threads = 0, no_attn = 0, no_mm = 0;
    const char *only_isa = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) only_isa = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) use_cpu_clock = 1;
        else if (!strcmp(argv[i], "--no-attn")) no_attn = 1;
        else if (!strcmp(argv[i], "--no-mm")) no_mm = 1;
        else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
            kvs_kv_type t;
            if (kvs_kv_type_parse(argv[++i], &t)) return 2;
            g_kv_type = t;
        }
        else if (!strcmp(argv[i], "--f16")) g_type = KVS_TYPE_F16;
        else if (!strcmp(argv[i], "--f32")) g_type = KVS_TYPE_F32;
        else if (!strcmp(argv[i], "--q8_0")) g_type = KVS_TYPE_Q8_0;
        else if (!strcmp(argv[i], "--q4_0")) g_type = KVS_TYPE_Q4_0;
        else if (!strcmp(argv[i], "--q5_0")) g_type = KVS_TYPE_Q5_0;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) only_m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attn-depth") && i + 1 < argc) g_attn_depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--q-scale") && i + 1 < argc) g_q_scale = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--gemma3")) {
            g_shapes = k_gemma3;
            g_attn = &k_attn_gemma3;
        }
    }
    /* the machine and its load: timings on a shared machine are noisy */
    char model[128] = "?", load[64] = "?", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    f = fopen("/proc/loadavg", "r");
    if (f && fgets(load, sizeof load, f)) { /* the three averages only */
        char *sp = load;
        for (int i = 0; i < 3 && sp; i++) sp = strchr(sp + 1, ' ');
        if (sp) *sp = 0;
    }
    if (f) fclose(f);
    printf("bench_kernels: %s, %ld cores, load %s; best ISA %s%s; %s clock\n", model,
           sysconf(_SC_NPROCESSORS_ONLN), load, kvs_kernels_isa(), kvs_kernels_amx() ? " + amx" : "",
           use_cpu_clock ? "thread CPU" : "wall");
    /* amx: avx512vnni plus AMX tiles for the prefill matmuls and the Q8 attention prefill's dot products */
    const char *isas[] = {"amx", "avx512vnni", "avx2", "scalar"};
    for (int t = 1; t <= 2; t++) {
        if (only_threads && t != only_threads) continue;
        if (use_cpu_clock && t > 1) continue; /* thread CPU time is per thread */
        bench_pool(t);
        for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
            if (only_isa && strcmp(only_isa, isas[s])) continue;
            if (kvs_kernels_set_isa(isas[s]) != 0) continue;
            if (!no_mm) bench_matmul(isas[s], t, quick, 0);
            if (!no_mm && strcmp(isas[s], "scalar")) bench_matmul(isas[s], t, quick, 1); /* side by side */
            if (!no_attn) bench_attention(isas[s], t, quick);
        }
    }
    return 0;
}
