/*
 * The two ceilings of the roofline report (bench/roofline.sh):
 *  - read bandwidth: T threads stream disjoint slices of a buffer larger
 *    than the last-level cache (256 MiB), four prefetched streams each
 *    (read_slice); GB/s per T;
 *  - int8 dot peak of the ISA path the matmuls use: independent chains of
 *    the kernels' own instruction (AVX2: vpmaddubsw + int16 add, 32 int8
 *    multiply-adds; AVX-512 VNNI: vpdpbusd, 64), in registers; GMAC/s per T;
 *  - where the prefill matmuls run on AMX tiles (kvs_kernels_amx()): the
 *    tile peaks (TDPBF16PS, TDPBSSD on four independent accumulators, tiles
 *    in registers; GMAC/s per T) and the tile work a prefill block cannot
 *    do without (amx_block_step): per 16 x 16 outputs of one 32-element
 *    block, the hi and lo products and the tile store(s) that hand the
 *    exact integer dots to the float epilogue (Q4_0 / Q4_1 / Q4_K / Q5_0:
 *    bf16, both levels in one tile, one store; Q8_0: int8 tiles of one
 *    block (K = 32), one tile and store each, matmul_amx.c says why): G
 *    block dots/s per T; and, one thread, how much of a vector epilogue of
 *    the Q8_0 kernel's shape (16 rows: two loads, shift, add, convert, mul,
 *    fma) hides behind that tile work: amx_overlap = time(both interleaved)
 *    / (time(tiles) + time(vector)), 1 = none, max/sum = all; and the same
 *    for the step's products alone and its stores alone (amx_overlap_by_op:
 *    on the AMX Xeon VM the products mostly hide behind the epilogue and
 *    the stores not at all, so the stores are what a batch step's tiles
 *    add to its vector work).
 *  - the core clock: a chain of dependent adds per thread (base/core_clock.h),
 *    GHz a core: on a shared VM it shows how much of its cores the host gave.
 * Each figure is the median and the best of several repetitions, all threads
 * started together, from two clocks: wall (what the machine gave) and each
 * thread's CPU time (what a core gives while it runs: on a shared, loaded
 * machine the honest estimate of the ceiling). The load is printed too.
 *
 *   roofline_probe [--threads N] [--mib 256] [--reps 7] [--read-only]
 * --read-only: the read figures alone (roofline.sh also reads a buffer the
 * size of each model's weights: on a CPU whose last-level cache holds a
 * good part of them, that is the ceiling a decode step meets).
 * Output: one "key value..." line per figure (parsed by bench/roofline.sh).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/core_clock.h"
#include "kernels/amx_util.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum job_kind {
    JOB_CLOCK, /* a chain of dependent adds (base/core_clock.h) */
    JOB_READ,
    JOB_DOT_AVX2,
    JOB_DOT_VNNI,
    JOB_DOT_VNNI_FLOAT, /* vpdpbusd with a block group's float steps */
    JOB_AMX_BF16,    /* TDPBF16PS peak */
    JOB_AMX_INT8,    /* TDPBSSD peak */
    JOB_AMX_STEP_Q4, /* a prefill block step, both levels in one tile */
    JOB_AMX_STEP_Q8, /* a Q8_0 prefill block step, a tile per level */
    JOB_AMX_VEC,     /* the vector epilogue of a Q8_0 block step alone */
    JOB_AMX_BOTH,    /* Q8_0 block steps and their epilogues interleaved */
    JOB_AMX_PRODUCTS,     /* a step's two products alone (no store) */
    JOB_AMX_PRODUCTS_VEC, /* ... interleaved with the epilogue */
    JOB_AMX_STORES,       /* a step's two tile stores alone (no product) */
    JOB_AMX_STORES_VEC,   /* ... interleaved with the epilogue */
};

typedef struct job {
    int kind;            /* job_kind */
    const uint8_t *p;    /* read: this thread's slice */
    size_t bytes;
    long iters;          /* dot: loop iterations */
    pthread_barrier_t *bar;
    double t0, t1;
    double cpu;          /* this thread's CPU time (what it got of a shared machine) */
    uint64_t sink;
} job;

#if defined(__x86_64__)
/* Four streams (the quarters of the slice), each prefetched 2 KiB ahead:
 * the way the decode kernels read (several weight rows at once, prefetched).
 * On the Xeon this gives ~30% more than one stream without prefetch, which
 * the decode kernels did beat; on Zen 3 the two are alike. */
#define READ_STREAMS 4
#define READ_PF_BYTES 2048
__attribute__((target("avx2"))) static uint64_t read_slice(const uint8_t *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    size_t part = bytes / READ_STREAMS & ~(size_t)63;
    for (size_t o = 0; o < part; o += 64) {
        for (int s = 0; s < READ_STREAMS; s++) {
            const uint8_t *q = p + s * part + o;
            _mm_prefetch((const char *)q + READ_PF_BYTES, _MM_HINT_T0);
            a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)q));
            a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(q + 32)));
        }
    }
    __m256i a = _mm256_xor_si256(a0, a1);
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

/* 6 independent chains (6 weight registers, one x), 8 steps per iteration:
 * 48 x 32 MACs. One asm statement per step so that the compiler neither
 * merges identical products nor spills the chains. */
#define DOT_CHAINS 6
#define DOT_STEPS 8
__attribute__((target("avx2"))) static uint64_t dot_avx2(long iters) {
    __m256i x = _mm256_set1_epi8(-3), t0, t1;
    __m256i w0 = _mm256_set1_epi8(7), w1 = _mm256_set1_epi8(8), w2 = _mm256_set1_epi8(9);
    __m256i w3 = _mm256_set1_epi8(10), w4 = _mm256_set1_epi8(11), w5 = _mm256_set1_epi8(12);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    for (long it = 0; it < iters; it++)
        for (int r = 0; r < DOT_STEPS; r++)
            __asm__ volatile("vpmaddubsw %[x], %[w0], %[t0]\n\tvpaddw %[t0], %[a0], %[a0]\n\t"
                             "vpmaddubsw %[x], %[w1], %[t1]\n\tvpaddw %[t1], %[a1], %[a1]\n\t"
                             "vpmaddubsw %[x], %[w2], %[t0]\n\tvpaddw %[t0], %[a2], %[a2]\n\t"
                             "vpmaddubsw %[x], %[w3], %[t1]\n\tvpaddw %[t1], %[a3], %[a3]\n\t"
                             "vpmaddubsw %[x], %[w4], %[t0]\n\tvpaddw %[t0], %[a4], %[a4]\n\t"
                             "vpmaddubsw %[x], %[w5], %[t1]\n\tvpaddw %[t1], %[a5], %[a5]"
                             : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4),
                               [a5] "+x"(a5), [t0] "=&x"(t0), [t1] "=&x"(t1)
                             : [x] "x"(x), [w0] "x"(w0), [w1] "x"(w1), [w2] "x"(w2), [w3] "x"(w3), [w4] "x"(w4),
                               [w5] "x"(w5));
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    s = _mm256_xor_si256(s, _mm256_xor_si256(a4, a5));
    return (uint64_t)_mm256_extract_epi64(s, 0);
}

/* vpdpbusd accumulates in place, so its chains wait on its latency (5
 * cycles) where the AVX2 pair waits on a 1-cycle add: 12 chains (two asm
 * statements of 6 per step; 6 chains left a core that issues two vpdpbusd a
 * cycle at 60% of that), 8 steps: 96 x 64 MACs. */
#define VNNI_CHAINS 12
#define VNNI_SIX(a0, a1, a2, a3, a4, a5)                                                                        \
    __asm__ volatile("vpdpbusd %[x], %[w0], %[b0]\n\tvpdpbusd %[x], %[w1], %[b1]\n\t"                          \
                     "vpdpbusd %[x], %[w2], %[b2]\n\tvpdpbusd %[x], %[w3], %[b3]\n\t"                          \
                     "vpdpbusd %[x], %[w4], %[b4]\n\tvpdpbusd %[x], %[w5], %[b5]"                                \
                     : [b0] "+v"(a0), [b1] "+v"(a1), [b2] "+v"(a2), [b3] "+v"(a3), [b4] "+v"(a4), [b5] "+v"(a5) \
                     : [x] "v"(x), [w0] "v"(w0), [w1] "v"(w1), [w2] "v"(w2), [w3] "v"(w3), [w4] "v"(w4),           \
                       [w5] "v"(w5))
#define VNNI_TARGET __attribute__((target("avx512f,avx512vnni")))
/* The same chains with the float steps every AVX-512 integer kernel owes
 * the reference per 16 vpdpbusd of one (weight row, activation row) block
 * group: the scale product (mul) and the accumulation (fma), here on 6
 * float chains, one mul and one fma in 6 of the 8 steps (96 vpdpbusd, 6 mul,
 * 6 fma: 16 : 1 : 1). Some cores (Zen 5) issue vpdpbusd on the same two
 * pipes as mul and fma, so these steps are not free beside the dots; the
 * loads, converts and integer adds of the kernels run on other ports. The
 * values stay put (x 1, + 0 x 0): no denormal ever slows a step. */
#define FLOAT_STEP(f, g)                                                                                       \
    __asm__ volatile("vmulps %[one], %[pm], %[pm]\n\tvfmadd231ps %[zero], %[zero], %[pa]"                     \
                     : [pm] "+v"(f), [pa] "+v"(g)                                                              \
                     : [one] "v"(one), [zero] "v"(zero))
/* The chains, with the float steps or without (a constant in each caller). */
VNNI_TARGET __attribute__((always_inline)) static inline uint64_t vnni_chains(long iters, int with_float) {
    __m512i x = _mm512_set1_epi8(-3);
    __m512i w0 = _mm512_set1_epi8(7), w1 = _mm512_set1_epi8(8), w2 = _mm512_set1_epi8(9);
    __m512i w3 = _mm512_set1_epi8(10), w4 = _mm512_set1_epi8(11), w5 = _mm512_set1_epi8(12);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m512i a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 f0 = one, f1 = one, f2 = one, g0 = zero, g1 = zero, g2 = zero;
    for (long it = 0; it < iters; it++) {
        if (!with_float) {
            for (int r = 0; r < DOT_STEPS; r++) {
                VNNI_SIX(a0, a1, a2, a3, a4, a5);
                VNNI_SIX(a6, a7, a8, a9, a10, a11);
            }
            continue;
        }
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++) { /* 6 x 12 vpdpbusd, 3 float steps */
            VNNI_SIX(a0, a1, a2, a3, a4, a5);
            FLOAT_STEP(f0, g0);
            VNNI_SIX(a6, a7, a8, a9, a10, a11);
            VNNI_SIX(a0, a1, a2, a3, a4, a5);
            FLOAT_STEP(f1, g1);
            VNNI_SIX(a6, a7, a8, a9, a10, a11);
            VNNI_SIX(a0, a1, a2, a3, a4, a5);
            FLOAT_STEP(f2, g2);
            VNNI_SIX(a6, a7, a8, a9, a10, a11);
        }
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++) { /* 2 x 12 more: 96 in all, as without */
            VNNI_SIX(a0, a1, a2, a3, a4, a5);
            VNNI_SIX(a6, a7, a8, a9, a10, a11);
        }
    }
    __m512i s = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    s = _mm512_xor_si512(s, _mm512_xor_si512(a4, a5));
    s = _mm512_xor_si512(s, _mm512_xor_si512(_mm512_xor_si512(a6, a7), _mm512_xor_si512(a8, a9)));
    s = _mm512_xor_si512(s, _mm512_xor_si512(a10, a11));
    const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(f0, f1), _mm512_add_ps(f2, g0)), _mm512_add_ps(g1, g2));
    return (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(s)) ^ (uint64_t)_mm512_reduce_add_ps(t);
}
VNNI_TARGET static uint64_t dot_vnni(long iters) { return vnni_chains(iters, 0); }
VNNI_TARGET static uint64_t dot_vnni_float(long iters) { return vnni_chains(iters, 1); }

/* ---- AMX tiles (matmul_amx.c's configurations: 8 tiles of 16 rows x 64
 * bytes; for Q8_0's int8 block step A tiles 2, 3 of 16 x 32 bytes and B
 * tiles 4, 5 of 8 x 64) */
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,fma,amx-tile,amx-int8,amx-bf16")))
#define AMX_TILE_MACS_BF16 (16 * 16 * 32)
#define AMX_TILE_MACS_INT8 (16 * 16 * 64)
#define AMX_STEP_DOTS 256 /* a block step: 16 rows x 16 columns of block dots */

/* Tiles 2..5 (A, A, B, B) hold small integers (bf16 or int8 alike: the
 * timing does not depend on the values); the results land in out, which
 * rotates over 8 KiB so the stores stay in L1 as the kernel's do. */
static uint8_t g_tile_src[2048] __attribute__((aligned(64)));

AMX_TARGET static void amx_setup(int q8) {
    amx_tilecfg cfg __attribute__((aligned(64)));
    amx_config_square(&cfg);
    if (q8) {
        cfg.colsb[2] = cfg.colsb[3] = 32;
        cfg.rows[4] = cfg.rows[5] = 8;
    }
    amx_load_config(&cfg);
    _tile_loadd(2, g_tile_src, 64);
    _tile_loadd(3, g_tile_src + 1024, 64);
    _tile_loadd(4, g_tile_src, 64);
    _tile_loadd(5, g_tile_src + 1024, 64);
}

/* The vector epilogue of one Q8_0 block step as matmul_amx.c's panel_q8
 * runs it: per row (16 chains) 256 hi + lo of the int32 dots, converted,
 * scaled, fma'd. */
AMX_TARGET static inline void amx_epilogue(const float *c, __m512 v[16]) {
    const __m512 dw = _mm512_set1_ps(1.0f / 3.0f);
    for (int i = 0; i < 16; i++) {
        const __m512i hi = _mm512_load_si512(c + 16 * i), lo = _mm512_load_si512(c + 256 + 16 * i);
        v[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 8), lo)),
                               _mm512_mul_ps(dw, _mm512_set1_ps(c[16 * i + 1])), v[i]);
    }
}

/* Four independent accumulators (tiles 0, 1, 6, 7) of A tiles 2, 3 and B
 * tiles 4, 5 (tile numbers are immediates, hence a macro). */
#define AMX_FOUR_PRODUCTS(op) \
    do {                      \
        op(0, 2, 4);          \
        op(1, 3, 4);          \
        op(6, 2, 5);          \
        op(7, 3, 5);          \
    } while (0)

AMX_TARGET static uint64_t amx_run(int kind, long iters) {
    float out[4][512] __attribute__((aligned(64)));
    memset(out, 0, sizeof out);
    __m512 v[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_setzero_ps();
    amx_setup(kind >= JOB_AMX_STEP_Q8);
    for (long it = 0; it < iters; it++) {
        float *o = out[it & 3];
        switch (kind) {
        case JOB_AMX_BF16:
            AMX_FOUR_PRODUCTS(_tile_dpbf16ps);
            break;
        case JOB_AMX_INT8:
            AMX_FOUR_PRODUCTS(_tile_dpbssd);
            break;
        case JOB_AMX_STEP_Q4: /* even and odd steps on their own C, as panel() */
            if (it & 1) {
                _tile_zero(1);
                _tile_dpbf16ps(1, 2, 4);
                _tile_dpbf16ps(1, 3, 4);
                _tile_stored(1, o, 64);
            } else {
                _tile_zero(0);
                _tile_dpbf16ps(0, 2, 4);
                _tile_dpbf16ps(0, 3, 4);
                _tile_stored(0, o, 64);
            }
            break;
        case JOB_AMX_BOTH:
            amx_epilogue(out[(it + 3) & 3], v); /* the previous step's dots */
            /* fall through */
        case JOB_AMX_STEP_Q8: /* q8_block_tiles' products and stores for one half, on purpose */
            _tile_zero(0);
            _tile_zero(1);
            _tile_dpbssd(0, 2, 4);
            _tile_dpbssd(1, 3, 4);
            _tile_stored(0, o, 64);
            _tile_stored(1, o + 256, 64);
            break;
        case JOB_AMX_VEC:
            amx_epilogue(out[(it + 3) & 3], v);
            break;
        case JOB_AMX_PRODUCTS_VEC:
            amx_epilogue(out[(it + 3) & 3], v);
            /* fall through */
        case JOB_AMX_PRODUCTS: /* two accumulating chains: the products' throughput, not their latency */
            _tile_dpbssd(0, 2, 4);
            _tile_dpbssd(1, 3, 4);
            break;
        case JOB_AMX_STORES_VEC:
            amx_epilogue(out[(it + 3) & 3], v);
            /* fall through */
        case JOB_AMX_STORES:
            _tile_stored(0, o, 64);
            _tile_stored(1, o + 256, 64);
            break;
        }
    }
    _tile_release();
    for (int i = 1; i < 16; i++) v[0] = _mm512_add_ps(v[0], v[i]);
    return (uint64_t)_mm512_reduce_add_ps(v[0]) ^ (uint64_t)out[0][0];
}
#endif

static void *run_job(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    double c0 = cpu_s();
#if defined(__x86_64__)
    if (j->kind == JOB_CLOCK) j->sink = kvs_add_chain((uint64_t)j->iters);
    else if (j->kind == JOB_READ) j->sink = read_slice(j->p, j->bytes);
    else if (j->kind == JOB_DOT_AVX2) j->sink = dot_avx2(j->iters);
    else if (j->kind == JOB_DOT_VNNI) j->sink = dot_vnni(j->iters);
    else if (j->kind == JOB_DOT_VNNI_FLOAT) j->sink = dot_vnni_float(j->iters);
    else j->sink = amx_run(j->kind, j->iters);
#endif
    j->cpu = cpu_s() - c0;
    j->t1 = now_s();
    return NULL;
}

/* Runs kind on nt threads, each on its share (bytes / nt of the buffer, or
 * iters). Returns the work rate in units per second two ways: *wall from the
 * wall time (first start to last end), and the return value as the sum over
 * threads of share / own CPU time: what nt threads would do with a core each,
 * which a loaded machine does not give (the other threads' memory traffic
 * still counts, since they run at the same time when they run). */
static double run_threads(int kind, int nt, const uint8_t *buf, size_t bytes, long iters, double units,
                          double *wall) {
    pthread_t th[64];
    job jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    size_t slice = bytes / (size_t)nt & ~(size_t)127;
    for (int i = 0; i < nt; i++) {
        jobs[i] = (job){.kind = kind, .p = buf + (size_t)i * slice, .bytes = slice, .iters = iters, .bar = &bar};
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    }
    double t0 = 1e300, t1 = 0, rate = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].t0 < t0) t0 = jobs[i].t0;
        if (jobs[i].t1 > t1) t1 = jobs[i].t1;
        rate += units / nt / jobs[i].cpu;
    }
    pthread_barrier_destroy(&bar);
    *wall = units / (t1 - t0);
    return rate;
}

static void report(const char *key, const char *extra, int nt, double *cpu, double *wall, int n) {
    qsort(cpu, (size_t)n, sizeof(double), cmp_d);
    qsort(wall, (size_t)n, sizeof(double), cmp_d);
    printf("%s %s threads %d cpu_median %.2f cpu_best %.2f wall_median %.2f wall_best %.2f\n", key, extra, nt,
           cpu[n / 2], cpu[n - 1], wall[n / 2], wall[n - 1]);
    fflush(stdout);
}

#if defined(__x86_64__)
static void amx_ceilings(int max_threads, int reps) {
    double v[100], w[100];
    const long iters = 4000000; /* ~0.05-0.15 s of one idle core per kind */
    static const struct {
        int kind;
        const char *key, *extra;
        double units; /* per iteration, in 1e9 */
    } peaks[] = {
        {JOB_AMX_BF16, "amx_gmacs", "bf16", 4.0 * AMX_TILE_MACS_BF16 / 1e9},
        {JOB_AMX_INT8, "amx_gmacs", "int8", 4.0 * AMX_TILE_MACS_INT8 / 1e9},
        {JOB_AMX_STEP_Q4, "amx_block_gdots", "q4", AMX_STEP_DOTS / 1e9},
        {JOB_AMX_STEP_Q8, "amx_block_gdots", "q8", AMX_STEP_DOTS / 1e9},
    };
    for (size_t p = 0; p < sizeof peaks / sizeof peaks[0]; p++)
        for (int nt = 1; nt <= max_threads; nt++) {
            for (int r = 0; r < reps; r++)
                v[r] = run_threads(peaks[p].kind, nt, NULL, 0, iters, peaks[p].units * (double)iters * nt, &w[r]);
            report(peaks[p].key, peaks[p].extra, nt, v, w, reps);
        }
    /* one thread, CPU time: the best of reps of each, then the ratio; then
     * which tile operation holds the vector work up: each alone, and each
     * interleaved with the epilogue */
    enum { N_OVERLAP = 7 };
    double best[N_OVERLAP];
    const int kinds[N_OVERLAP] = {JOB_AMX_STEP_Q8, JOB_AMX_VEC,    JOB_AMX_BOTH,      JOB_AMX_PRODUCTS,
                                  JOB_AMX_PRODUCTS_VEC, JOB_AMX_STORES, JOB_AMX_STORES_VEC};
    for (int k = 0; k < N_OVERLAP; k++) best[k] = 1e300;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < N_OVERLAP; k++) {
            double wall, rate = run_threads(kinds[k], 1, NULL, 0, iters, 1.0, &wall);
            if (1.0 / rate < best[k]) best[k] = 1.0 / rate;
        }
    for (int k = 0; k < N_OVERLAP; k++) best[k] = best[k] / iters * 1e9;
    printf("amx_overlap q8 threads 1 tiles_ns %.2f vector_ns %.2f both_ns %.2f ratio %.3f\n", best[0], best[1], best[2],
           best[2] / (best[0] + best[1]));
    printf("amx_overlap_by_op q8 threads 1 products_ns %.2f products_vector_ns %.2f stores_ns %.2f "
           "stores_vector_ns %.2f\n",
           best[3], best[4], best[5], best[6]);
    fflush(stdout);
}
#endif

int main(int argc, char **argv) {
    int max_threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 7, read_only = 0;
    size_t mib = 256;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--read-only")) read_only = 1;
        else {
            fprintf(stderr, "usage: roofline_probe [--threads N] [--mib 256] [--reps 7] [--read-only]\n");
            return 2;
        }
    }
    if (max_threads < 1 || max_threads > 64 || reps < 1 || reps > 100 || mib < 8 || mib > 65536) {
        fprintf(stderr, "roofline_probe: --threads 1..64, --reps 1..100, --mib 8..65536\n");
        return 2;
    }
#if !defined(__x86_64__)
    printf("isa none (x86-64 only)\n");
    return 0;
#else
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2"), vnni = __builtin_cpu_supports("avx512vnni");
    char load[64] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fgets(load, sizeof load, f)) load[strcspn(load, "\n")] = 0;
    if (f) fclose(f);
    printf("load %s\n", load);
    printf("isa %s\n", vnni ? "avx512vnni" : avx2 ? "avx2" : "none");
    double v[100], w[100];
    for (int nt = 1; nt <= max_threads; nt++) { /* GHz a core: the threads' mean */
        const long iters = 1 << 21; /* 16 M adds: ~8 ms of a 2 GHz core */
        const double gadds = (double)iters * KVS_ADD_CHAIN_ADDS / 1e9 * nt; /* all threads' */
        for (int r = 0; r < reps; r++) {
            v[r] = run_threads(JOB_CLOCK, nt, NULL, 0, iters, gadds, &w[r]) / nt;
            w[r] /= nt;
        }
        report("clock_ghz", "-", nt, v, w, reps);
    }
    if (!avx2) return 0;
    size_t bytes = mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "roofline_probe: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes); /* fault the pages in before timing */
    for (int nt = 1; nt <= max_threads; nt++) {
        run_threads(JOB_READ, nt, buf, bytes, 0, 1, w); /* warm */
        for (int r = 0; r < reps; r++) v[r] = run_threads(JOB_READ, nt, buf, bytes, 0, (double)bytes / 1e9, &w[r]);
        report("read_gbs", "-", nt, v, w, reps);
    }
    if (read_only) {
        free(buf);
        return 0;
    }
    const long iters = 1000000; /* ~0.1 s of one idle core */
    const double macs = (double)iters * DOT_CHAINS * DOT_STEPS / 1e9;
    for (int nt = 1; nt <= max_threads; nt++) {
        for (int r = 0; r < reps; r++) v[r] = run_threads(JOB_DOT_AVX2, nt, NULL, 0, iters, macs * 32 * nt, &w[r]);
        report("int8_gmacs", "avx2", nt, v, w, reps);
        if (vnni) {
            for (int r = 0; r < reps; r++)
                v[r] = run_threads(JOB_DOT_VNNI, nt, NULL, 0, iters, macs / DOT_CHAINS * VNNI_CHAINS * 64 * nt, &w[r]);
            report("int8_gmacs", "avx512vnni", nt, v, w, reps);
            /* 96 vpdpbusd an iteration, as dot_vnni's 8 steps of 12 */
            for (int r = 0; r < reps; r++)
                v[r] = run_threads(JOB_DOT_VNNI_FLOAT, nt, NULL, 0, iters, macs / DOT_CHAINS * VNNI_CHAINS * 64 * nt, &w[r]);
            report("int8_float_gmacs", "avx512vnni", nt, v, w, reps);
        }
    }
    if (vnni && kvs_kernels_amx()) amx_ceilings(max_threads, reps);
    free(buf);
    return 0;
#endif
}
