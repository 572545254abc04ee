/*
 * Kernel correctness:
 *  - the scalar references against plain double-precision math (dequantize,
 *    then dot / normalize / rotate / softmax), with the tolerance stated at
 *    each check;
 *  - every SIMD path against the scalar reference: the canonical arithmetic
 *    (kernels_impl.h) makes them bit-identical, so these compare with memcmp.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>

#include "harness.h"
#include "kernels/kernels_impl.h"
#include "test_kernels_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const int all_types[] = {KVS_TYPE_F32, KVS_TYPE_F16, KVS_TYPE_BF16,
                                KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0};
static const char *simd_isas[] = {"avx2", "avx512vnni", "amx"};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
#endif

TEST(test_f16_conversions) {
    int bad_rt = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvs_f16_to_f32((uint16_t)h);
        if (!isnan(f) && kvs_f32_to_f16(f) != h) bad_rt++;
#if defined(__x86_64__)
        if (kvs_kernels_cpu_level() >= 1) {
            float g = hw_f16_to_f32((uint16_t)h);
            if (memcmp(&f, &g, 4) != 0 && !(isnan(f) && isnan(g))) bad_hw++;
        }
#endif
    }
    CHECK_EQ_INT(bad_rt, 0);
    CHECK_EQ_INT(bad_hw, 0);
#if defined(__x86_64__)
    if (kvs_kernels_cpu_level() >= 1) {
        int bad = 0;
        for (int i = 0; i < 2000000; i++) {
            uint32_t b = kt_rand() | (kt_rand() << 21);
            float f;
            memcpy(&f, &b, 4);
            if (isnan(f)) continue;
            if (kvs_f32_to_f16(f) != hw_f32_to_f16(f)) bad++;
        }
        /* ties and boundaries explicitly */
        float edge[] = {65504.0f, 65519.99f, 65520.0f, 5.9604645e-8f, 2.9802322e-8f,
                        2.9802326e-8f, 6.1035156e-5f, 6.1035152e-5f, -0.0f, 1.0009765625f + 0.00048828125f};
        for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
            if (kvs_f32_to_f16(edge[i]) != hw_f32_to_f16(edge[i])) bad++;
        CHECK_EQ_INT(bad, 0);
    }
#endif
    /* row helpers (SIMD where available) agree with the scalar conversion */
    float src[100];
    uint16_t h1[100];
    float back[100];
    kt_rand_vec(src, 100, 1000.0f);
    kvs_f32_to_f16_row(src, h1, 100);
    kvs_f16_to_f32_row(h1, back, 100);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ_INT(h1[i], kvs_f32_to_f16(src[i]));
        CHECK(back[i] == kvs_f16_to_f32(h1[i]));
    }
}

/* Dequantize against the block formulas, in double. */
TEST(test_dequantize) {
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++) {
        int type = all_types[t], k = 96;
        kvs_wmat w = kt_rand_wmat(type, 3, k);
        float row[96];
        kvs_wmat_get_row(&w, 2, row);
        const uint8_t *r = (const uint8_t *)w.data + 2 * w.row_bytes;
        for (int e = 0; e < k; e++) {
            double want;
            int b = e / 32, i = e % 32;
            switch (type) {
            case KVS_TYPE_F32: { float f; memcpy(&f, r + 4 * e, 4); want = f; break; }
            case KVS_TYPE_F16: { uint16_t h; memcpy(&h, r + 2 * e, 2); want = kvs_f16_to_f32(h); break; }
            case KVS_TYPE_BF16: { uint16_t h; memcpy(&h, r + 2 * e, 2); want = kvs_bf16_to_f32(h); break; }
            case KVS_TYPE_Q4_0: {
                const kvs_block_q4_0 *bl = (const kvs_block_q4_0 *)r + b;
                int q = i < 16 ? (bl->qs[i] & 15) : (bl->qs[i - 16] >> 4);
                want = (q - 8) * (double)kvs_f16_to_f32(bl->d);
                break;
            }
            case KVS_TYPE_Q4_1: {
                const kvs_block_q4_1 *bl = (const kvs_block_q4_1 *)r + b;
                int q = i < 16 ? (bl->qs[i] & 15) : (bl->qs[i - 16] >> 4);
                want = q * (double)kvs_f16_to_f32(bl->d) + kvs_f16_to_f32(bl->m);
                break;
            }
            default: {
                const kvs_block_q8_0 *bl = (const kvs_block_q8_0 *)r + b;
                want = bl->qs[i] * (double)kvs_f16_to_f32(bl->d);
            }
            }
            CHECK_NEAR(row[e], want, 1e-6 * fabs(want) + 1e-12); /* one float rounding */
        }
        free((void *)w.data);
    }
}

/* Scalar matmul against dequantize-then-dot in double, two ways:
 *  - tight: against the activations as the spec quantizes them (quant.h: per
 *    block of 32, d = amax / 127, v = x / d, hi = round-half-even(v),
 *    lo = clamp(round-half-even(256 v) - 256 hi, +-127), x' = (256 hi + lo) d / 256),
 *    so only float rounding differs: tolerance 2e-6 * sum |w x'| (a few ulp
 *    of float accumulation over k <= 1536 terms);
 *  - loose: against the unquantized x, where the two-level rounding adds at
 *    most d / 256 per element (d / 512, or d / 256 where lo is clamped):
 *    sum_b d_b / 256 * sum_{e in b} |w_e|, plus 1e-5 relative. A single
 *    8-bit level (error up to d / 2) fails this bound.
 * Float weights: x is used as is, tolerance 1e-5 * sum |w x|. */
TEST(test_matmul_ref_vs_double) {
    kvs_kernels_set_isa("scalar");
    const int ks[] = {32, 64, 544, 576, 1536};
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++) {
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
            int type = all_types[t], k = ks[ki], n = 19, m = 3;
            kvs_wmat w = kt_rand_wmat(type, n, k);
            float *x = xmalloc(sizeof(float) * m * k), *y = xmalloc(sizeof(float) * m * n);
            float *wr = xmalloc(sizeof(float) * k);
            double *xh = xmalloc(sizeof(double) * k);
            kt_rand_vec(x, (size_t)m * k, 3.0f);
            void *work = xmalloc(kvs_matmul_work_size(&w, m));
            kvs_matmul(NULL, &w, x, m, y, work);
            int quant = kvs_wtype_is_quant(type);
            for (int i = 0; i < m; i++) {
                const float *xi = x + (size_t)i * k;
                for (int b = 0; b < k / 32; b++) { /* the spec's quantized x */
                    float amax = 0.0f;
                    for (int e = b * 32; e < b * 32 + 32; e++) amax = fmaxf(amax, fabsf(xi[e]));
                    float d = amax / 127.0f, id = d >= FLT_MIN ? 1.0f / d : 0.0f;
                    for (int e = b * 32; e < b * 32 + 32; e++) {
                        float v = xi[e] * id;
                        double hi = nearbyintf(v), lo = nearbyintf(v * 256.0f) - 256.0 * hi;
                        lo = lo > 127 ? 127 : lo < -127 ? -127 : lo;
                        xh[e] = quant ? (256.0 * hi + lo) * ((double)d / 256.0) : xi[e];
                    }
                }
                for (int j = 0; j < n; j++) {
                    kvs_wmat_get_row(&w, j, wr);
                    double dot = 0, dot_h = 0, mag = 0, mag_h = 0, qerr = 0;
                    for (int b = 0; b < k / 32; b++) {
                        double amax = 0, wabs = 0;
                        for (int e = b * 32; e < b * 32 + 32; e++) {
                            dot += (double)wr[e] * xi[e];
                            dot_h += (double)wr[e] * xh[e];
                            mag += fabs((double)wr[e] * xi[e]);
                            mag_h += fabs((double)wr[e] * xh[e]);
                            amax = fmax(amax, fabs(xi[e]));
                            wabs += fabs(wr[e]);
                        }
                        qerr += amax / 127.0 / 256.0 * wabs * 1.0001;
                    }
                    double got = y[(size_t)i * n + j];
                    double tol = (quant ? qerr : 0) + 1e-5 * mag + 1e-6;
                    double tol_h = 2e-6 * mag_h + 1e-6;
                    if (!(fabs(got - dot) <= tol) || !(fabs(got - dot_h) <= tol_h)) {
                        fprintf(stderr, "  type %d k %d (%d,%d): %.9g vs %.9g (tol %g), vs quantized-x %.9g (tol %g)\n",
                                type, k, i, j, got, dot, tol, dot_h, tol_h);
                        kt_test_failed++;
                    }
                }
            }
            free(x); free(y); free(wr); free(xh); free(work); free((void *)w.data);
        }
    }
    kvs_kernels_set_isa("best");
}

/* One random (type, k, n, m) matmul on ISA path isa (on pool's threads, or
 * the caller's with NULL) and on the scalar reference; a failure if the
 * bytes differ, naming the first. zero_first: x[0] = 0 (an all-small block
 * edge). */
static void matmul_vs_scalar(const char *isa, kvs_pool *pool, int type, int k, int n, int m, int zero_first) {
    kvs_wmat w = kt_rand_wmat(type, n, k);
    float *x = xmalloc(sizeof(float) * m * k);
    float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
    kt_rand_vec(x, (size_t)m * k, 2.0f);
    if (zero_first) x[0] = 0.0f;
    void *work = xmalloc(kvs_matmul_work_size(&w, m));
    memset(y1, 0xff, sizeof(float) * m * n);
    kvs_kernels_set_isa(isa);
    kvs_matmul(pool, &w, x, m, y1, work);
    kvs_kernels_set_isa("scalar");
    kvs_matmul(NULL, &w, x, m, y0, work);
    if (memcmp(y0, y1, sizeof(float) * m * n) != 0) {
        int bad = 0;
        while (y0[bad] == y1[bad]) bad++;
        fprintf(stderr, "  %s type %d k %d n %d m %d threads %d: y[%d] %.9g vs scalar %.9g\n", isa, type, k, n, m,
                pool ? kvs_pool_size(pool) : 1, bad, y1[bad], y0[bad]);
        kt_test_failed++;
    }
    free(x); free(y0); free(y1); free(work); free((void *)w.data);
}

/* Quantized weights at an odd address (a GGUF file with general.alignment
 * 1 maps its tensors anywhere): every path, the scalar reference's block
 * structs included, reads them (they had been 2-aligned structs: UBSan's
 * alignment check stopped the sanitizer build) and gives the bytes of the
 * same weights at an aligned address. */
TEST(test_matmul_weights_at_odd_address) {
    const int types[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0};
    const char *isas[] = {"scalar", "avx2", "avx512vnni"};
    const int n = 37, k = 96, m = 3;
    for (int t = 0; t < 3; t++) {
        kvs_wmat w = kt_rand_wmat(types[t], n, k);
        size_t bytes = (size_t)n * w.row_bytes;
        uint8_t *odd_buf = xmalloc(bytes + 1);
        memcpy(odd_buf + 1, w.data, bytes);
        kvs_wmat wo = w;
        wo.data = odd_buf + 1;
        float *x = xmalloc(sizeof(float) * m * k), *y0 = xmalloc(sizeof(float) * m * n),
              *y1 = xmalloc(sizeof(float) * m * n), row0[96], row1[96];
        kt_rand_vec(x, (size_t)m * k, 2.0f);
        void *work = xmalloc(kvs_matmul_work_size(&w, m));
        for (int s = 0; s < 3; s++) {
            if (kvs_kernels_set_isa(isas[s]) != 0) continue; /* not on this CPU */
            for (int mm = 1; mm <= m; mm += m - 1) {
                kvs_matmul(NULL, &w, x, mm, y0, work);
                kvs_matmul(NULL, &wo, x, mm, y1, work);
                CHECK_MSG(memcmp(y0, y1, sizeof(float) * (size_t)mm * n) == 0, "type %d %s m %d", types[t], isas[s], mm);
            }
        }
        kvs_wmat_get_row(&w, 5, row0);
        kvs_wmat_get_row(&wo, 5, row1);
        CHECK(memcmp(row0, row1, sizeof row0) == 0);
        kvs_kernels_set_isa("best");
        free(x); free(y0); free(y1); free(work); free(odd_buf); free((void *)w.data);
    }
}

/* Every SIMD path gives the same bytes as the scalar reference, for shapes
 * with tails in n (not a multiple of the tile), k (not a multiple of 16
 * blocks) and m. */
TEST(test_matmul_simd_equals_scalar) {
    /* 992: a group and 15 tail blocks, the most a row can have */
    const int ks[] = {32, 64, 96, 544, 576, 992, 1536};
    const int ns[] = {1, 5, 16, 45, 100};
    /* AVX-512: 1-4 few_rows (by quads of rows), 5-12 many_rows, 13 on the
     * prepared tiles */
    const int ms[] = {1, 2, 3, 4, 5, 8, 12, 13, 17};
    int compared = 0;
    for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
        if (kvs_kernels_set_isa(simd_isas[s]) != 0) {
            printf("  (skip %s: not supported by this CPU)\n", simd_isas[s]);
            continue;
        }
        for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++)
            for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
                for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                    for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++, compared++)
                        matmul_vs_scalar(simd_isas[s], NULL, all_types[t], ks[ki], ns[ni], ms[mi], ki == 0);
    }
    kvs_kernels_set_isa("best");
    printf("  %d SIMD/scalar matmul comparisons\n", compared);
}

/* Every SIMD path against the scalar reference on float weights (F32, F16,
 * BF16) of each k x n x m shape given, on the caller's thread and, with a
 * pool, on its threads too; returns the comparisons made. */
static int float_shapes_vs_scalar(const int *ks, int nk, const int *ns, int nn, const int *ms, int nm, kvs_pool *pool) {
    int compared = 0;
    for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
        if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
        for (int t = 0; t < 3; t++) /* all_types' float entries */
            for (int ki = 0; ki < nk; ki++)
                for (int ni = 0; ni < nn; ni++)
                    for (int mi = 0; mi < nm; mi++)
                        for (int th = 0; th < (pool ? 2 : 1); th++, compared++)
                            matmul_vs_scalar(simd_isas[s], th ? pool : NULL, all_types[t], ks[ki], ns[ni], ms[mi], 0);
    }
    kvs_kernels_set_isa("best");
    return compared;
}

/* float_shapes_vs_scalar with a pool of two threads (and without one). */
static void float_shapes_on_two_threads(const int *ks, int nk, const int *ns, int nn, const int *ms, int nm,
                                        const char *what) {
    kvs_pool *pool = kvs_pool_new(2);
    CHECK(pool != NULL);
    int compared = float_shapes_vs_scalar(ks, nk, ns, nn, ms, nm, pool);
    kvs_pool_free(pool);
    CHECK(compared > 0);
    printf("  %d float-weight %s comparisons\n", compared, what);
}

/* Float weights, one activation row (a decode step) or a few (a batched
 * step), on one and two threads: the AVX2 path pairs row j with row j + h
 * of its column chunk at m = 1 (two streams) and walks long chunks (the
 * decode chunks) in blocks of 32 columns at m < 16, so every chunk length
 * (even, odd, 1), block split and split of the columns between threads must
 * give the scalar bytes. */
TEST(test_matmul_float_decode_chunks) {
    const int ks[] = {16, 576, 583};
    const int ns[] = {1, 2, 3, 16, 33, 100, 577};
    const int ms[] = {1, 2, 5, 8};
    float_shapes_on_two_threads(ks, 3, ns, 7, ms, 4, "decode");
}

/* Float weights at prefill (m >= 16), on one and two threads: the AVX2
 * path takes chunks of 48 columns in tiles of 4 activation rows x 3 weight
 * rows, each of an output's two chains in a pass of its own, so chunk and
 * tile edges in both directions (n % 48, n % 3, m % 4), the threads' row
 * blocks (m >= 32) and k's tail must give the scalar bytes. */
TEST(test_matmul_float_prefill_tiles) {
    const int ks[] = {8, 576, 583};
    const int ns[] = {1, 47, 49, 100};
    const int ms[] = {16, 19, 34, 67};
    float_shapes_on_two_threads(ks, 3, ns, 4, ms, 4, "prefill");
}

/* The decode chunks (kvs_decode_cols): whole tiles (a multiple of 16), never
 * empty (callers divide by the width), at most one chunk per thread, and
 * together they cover every column. */
TEST(test_decode_cols) {
    const int ns[] = {1, 15, 16, 17, 33, 192, 576, 577, 1536, 49152, 262144};
    int checked = 0;
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
        for (int nth = 0; nth <= 5; nth++) {
            const int n = ns[a], c = kvs_decode_cols(n, nth), chunks = (n + c - 1) / c;
            CHECK_MSG(c >= 16 && c % 16 == 0, "n %d threads %d: %d columns", n, nth, c);
            CHECK_MSG(chunks <= (nth < 1 ? 1 : nth), "n %d threads %d: %d chunks", n, nth, chunks);
            CHECK((long)chunks * c >= n);
            checked++;
        }
    CHECK(kvs_decode_cols(0, 2) == 16);
    printf("  %d (columns, threads) pairs\n", checked);
}

/* Float weights (F32, F16, BF16) take any k: the register tiles of the
 * SIMD paths (activation rows x weight rows) end with the reference's
 * scalar tail when k is not a multiple of 16; every tile shape (m and n
 * edges) must give the scalar bytes. */
TEST(test_matmul_float_k_tails) {
    /* m >= 12 takes AVX-512's widened panels, k = 2071 the path past them;
     * below them 8 x 2 tiles for whole blocks of 8 rows (m = 8, 9, 11),
     * k = 1100 in k blocks (the chains carried from one to the next) */
    const int ks[] = {7, 16, 40, 583, 1100, 2071};
    const int ns[] = {1, 3, 17};
    const int ms[] = {1, 2, 3, 4, 7, 8, 9, 11, 12, 13, 31};
    int compared = float_shapes_vs_scalar(ks, 6, ns, 3, ms, 11, NULL);
    CHECK(compared > 0);
    printf("  %d float-weight tail comparisons\n", compared);
}

/* A chain can hold -0 (a negative product that underflows, added to +0).
 * The reference makes no step past k, so such a chain stays -0 there and a
 * dot of only such chains is -0; a path that ran a zero step on the lanes
 * past k (fma(0, 0, -0) = +0) would return +0. */
TEST(test_matmul_float_negative_zero_chains) {
    enum { N = 5 };
    const int ks[] = {23, 583};
    const int ms[] = {1, 2, 5, 12, 13};
    int compared = 0;
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        int k = ks[ki];
        float *wf = xmalloc(sizeof(float) * N * k);
        for (int e = 0; e < N * k; e++) wf[e] = 1e-30f;
        kvs_wmat w = {.type = KVS_TYPE_F32, .n = N, .k = k, .row_bytes = sizeof(float) * (size_t)k, .data = wf};
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            int m = ms[mi];
            float *x = xmalloc(sizeof(float) * m * k), *y0 = xmalloc(sizeof(float) * m * N),
                  *y1 = xmalloc(sizeof(float) * m * N);
            for (int e = 0; e < m * k; e++) x[e] = -1e-30f;
            kvs_kernels_set_isa("scalar");
            kvs_matmul(NULL, &w, x, m, y0, NULL);
            CHECK(y0[0] == 0.0f && signbit(y0[0])); /* the premise: -0 */
            for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
                if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
                kvs_matmul(NULL, &w, x, m, y1, NULL);
                compared++;
                if (memcmp(y0, y1, sizeof(float) * m * N) != 0) {
                    fprintf(stderr, "  %s k %d m %d: y[0] %g, scalar %g\n", simd_isas[s], k, m, y1[0], y0[0]);
                    kt_test_failed++;
                }
            }
            free(x); free(y0); free(y1);
        }
        free(wf);
    }
    kvs_kernels_set_isa("best");
    CHECK(compared > 0);
}

/* The edges of the two-level activation rounding (quant.h), where a path
 * could round differently from the scalar reference: exact ties of v and of
 * 256 v, lo at +-128 (clamped to +-127), all-zero blocks, blocks too small to
 * scale (subnormal d), the largest floats. Every ISA must give the scalar
 * bytes, and the scalar result must stay within d / 256 per element of the
 * exact dot (d / 256 is the clamped worst case). With amax = 127, d = 1 and
 * v = x exactly, so the ties below are exact. */
TEST(test_matmul_two_level_edges) {
    enum { K = 576, M = 6, N = 21 };
    static const float ties[] = {0.5f, 1.5f, -2.5f, 126.5f, -126.5f, 127.0f, -127.0f,
                                 127.5f / 256, -127.5f / 256, 128.5f / 256, -128.5f / 256,
                                 0.25f + 128.0f / 256, 3.0f - 128.0f / 256, 1.0f / 512, -1.0f / 512,
                                 1.0f / 1024, 0.0f, -0.0f, 1e-30f, 100.0f + 1.0f / 512};
    const int nties = (int)(sizeof(ties) / sizeof(ties[0]));
    float *x = xmalloc(sizeof(float) * M * K);
    for (int e = 0; e < K; e++) {
        x[0 * K + e] = e % 32 == 0 ? 127.0f : ties[(e * 7) % nties];     /* amax 127 per block */
        x[1 * K + e] = 0.0f;                                               /* d = 0 */
        x[2 * K + e] = (e % 3 ? 1e-40f : -2e-41f);                         /* subnormal: rounds to 0 */
        x[3 * K + e] = (e % 32 == 5 ? 3e34f : kt_randf() * 1e34f);         /* huge, dots stay finite */
        x[4 * K + e] = e % 32 == 0 ? 127.0f : (float)((int)(kt_rand() % 255) - 127) + ties[e % nties];
        x[5 * K + e] = kt_randf() * (e < K / 2 ? 1e-3f : 50.0f);
    }
    const int qtypes[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0};
    for (size_t t = 0; t < 3; t++) {
        kvs_wmat w = kt_rand_wmat(qtypes[t], N, K);
        float *y0 = xmalloc(sizeof(float) * M * N), *y1 = xmalloc(sizeof(float) * M * N);
        float *wr = xmalloc(sizeof(float) * K);
        void *work = xmalloc(kvs_matmul_work_size(&w, M));
        kvs_kernels_set_isa("scalar");
        kvs_matmul(NULL, &w, x, M, y0, work);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                kvs_wmat_get_row(&w, j, wr);
                double dot = 0, tol = 0;
                for (int b = 0; b < K / 32; b++) {
                    double amax = 0, wabs = 0;
                    for (int e = b * 32; e < b * 32 + 32; e++) {
                        dot += (double)wr[e] * x[(size_t)i * K + e];
                        amax = fmax(amax, fabs(x[(size_t)i * K + e]));
                        wabs += fabs(wr[e]);
                    }
                    tol += (amax / 127.0 >= FLT_MIN ? amax / 127.0 / 256.0 : amax) * wabs * 1.0001;
                }
                double got = y0[(size_t)i * N + j], mag = fabs(dot) + tol;
                if (!(fabs(got - dot) <= tol + 1e-5 * mag + 1e-30)) {
                    fprintf(stderr, "  type %d row %d col %d: %.9g vs exact %.9g (tol %g)\n", qtypes[t], i, j,
                            got, dot, tol);
                    kt_test_failed++;
                }
            }
        for (int m = 1; m <= M; m++) /* every m: the m = 1 paths as well */
            for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
                if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
                for (int i0 = 0; i0 + m <= M; i0 += m) {
                    kvs_matmul(NULL, &w, x + (size_t)i0 * K, m, y1, work);
                    if (memcmp(y0 + (size_t)i0 * N, y1, sizeof(float) * m * N) != 0) {
                        fprintf(stderr, "  %s type %d m %d rows %d..: differs from scalar\n", simd_isas[s],
                                qtypes[t], m, i0);
                        kt_test_failed++;
                    }
                }
            }
        kvs_kernels_set_isa("best");
        free(y0); free(y1); free(wr); free(work); free((void *)w.data);
    }
    free(x);
}

/* ------------------------------------------------------------------------ */

TEST(test_rmsnorm) {
    const int n = 576;
    float x[576], w[576], y[576];
    kt_rand_vec(x, n, 4.0f);
    kt_rand_vec(w, n, 2.0f);
    kvs_rmsnorm(y, x, w, n, 1e-5f);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) CHECK_NEAR(y[i], x[i] * r * w[i], 1e-6 * fabs(x[i] * r * w[i]) + 1e-7);
    /* in place gives the same bits */
    float z[576];
    memcpy(z, x, sizeof(z));
    kvs_rmsnorm(z, z, w, n, 1e-5f);
    CHECK(memcmp(z, y, sizeof(z)) == 0);
}

TEST(test_silu_mul) {
    const int n = 1000;
    float g[1000], u[1000], g0[1000];
    kt_rand_vec(g, n, 12.0f);
    g[0] = -100.0f; g[1] = 100.0f; g[2] = 0.0f; g[3] = -87.5f;
    kt_rand_vec(u, n, 2.0f);
    memcpy(g0, g, sizeof(g));
    kvs_silu_mul(g, u, n);
    for (int i = 0; i < n; i++) {
        double want = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        CHECK_NEAR(g[i], want, 4e-7 * fabs(want) + 1e-30);
    }
}

/* SIMD row kernels give the scalar bytes (odd sizes exercise the tails). */
TEST(test_rowops_simd_equals_scalar) {
    const int ns[] = {1, 15, 16, 64, 576, 1000, 1536};
    for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
        if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            int n = ns[ni];
            float *x = xmalloc(4 * n), *w = xmalloc(4 * n), *y0 = xmalloc(4 * n), *y1 = xmalloc(4 * n);
            float *g0 = xmalloc(4 * n), *g1 = xmalloc(4 * n), *h0 = xmalloc(4 * n), *h1 = xmalloc(4 * n);
            kt_rand_vec(x, n, 30.0f);
            kt_rand_vec(w, n, 2.0f);
            if (n > 3) { x[0] = 100.0f; x[1] = -100.0f; x[2] = 0.0f; }
            if (n > 15) { /* the exp's saturation, NaN, infinities, -0, tiny */
                x[3] = 88.5f; x[4] = -88.5f; x[5] = NAN; x[6] = INFINITY; x[7] = -INFINITY;
                x[8] = -0.0f; x[9] = 1e-30f; x[10] = -9.5f; x[11] = 9.5f;
            }
            memcpy(g0, x, 4 * n);
            memcpy(g1, x, 4 * n);
            memcpy(h0, x, 4 * n);
            memcpy(h1, x, 4 * n);
            kvs_kernels_set_isa("scalar");
            kvs_rmsnorm(y0, x, w, n, 1e-5f);
            kvs_silu_mul(g0, w, n);
            kvs_gelu_tanh_mul(h0, w, n);
            kvs_kernels_set_isa(simd_isas[s]);
            kvs_rmsnorm(y1, x, w, n, 1e-5f);
            kvs_silu_mul(g1, w, n);
            kvs_gelu_tanh_mul(h1, w, n);
            CHECK_MSG(memcmp(y0, y1, 4 * n) == 0, "%s rmsnorm n=%d", simd_isas[s], n);
            CHECK_MSG(memcmp(g0, g1, 4 * n) == 0, "%s silu n=%d", simd_isas[s], n);
            CHECK_MSG(memcmp(h0, h1, 4 * n) == 0, "%s gelu_tanh n=%d", simd_isas[s], n);
            free(x); free(w); free(y0); free(y1); free(g0); free(g1); free(h0); free(h1);
        }
    }
    kvs_kernels_set_isa("best");
}

/* kvs_q8_row (Q8 KV rows, the Q8 attention's query rows) on every ISA:
 * the same levels and scale as the scalar loop, with NaN, infinities, -0,
 * ties at half a level, an all-zero row and a subnormal maximum. */
TEST(test_q8_row_simd_equals_scalar) {
    const int ns[] = {1, 7, 8, 9, 16, 31, 64, 65, 128, 256};
    for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
        if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
            for (int variant = 0; variant < 6; variant++) {
                const int n = ns[ni];
                float x[256];
                int8_t q0[256], q1[256];
                kt_rand_vec(x, n, 4.0f);
                if (variant == 1) /* ties: 127 levels of 1, so k + 0.5 is a tie */
                    for (int i = 0; i < n; i++) x[i] = i == 0 ? 127.0f : (float)(i % 100) - 50.5f;
                if (variant == 2 && n > 6) { x[1] = NAN; x[2] = -0.0f; x[3] = 1e-30f; x[n - 1] = NAN; }
                if (variant == 3 && n > 2) { x[0] = INFINITY; x[1] = -1.0f; }
                if (variant == 4) for (int i = 0; i < n; i++) x[i] = i % 2 ? -0.0f : 0.0f;
                if (variant == 5) for (int i = 0; i < n; i++) x[i] = (float)(i % 5 - 2) * 1e-40f; /* subnormal */
                memset(q0, 0x55, sizeof q0);
                memset(q1, 0x55, sizeof q1);
                kvs_kernels_set_isa("scalar");
                const float d0 = kvs_q8_row(x, q0, n);
                kvs_kernels_set_isa(simd_isas[s]);
                const float d1 = kvs_q8_row(x, q1, n);
                CHECK_MSG(memcmp(&d0, &d1, 4) == 0 && memcmp(q0, q1, sizeof q0) == 0, "%s q8 row n=%d variant %d",
                          simd_isas[s], n, variant);
                if (variant == 1 && n > 2) CHECK(q1[1] == -50 && q1[2] == -48); /* -50.5, -48.5: even */
            }
    }
    kvs_kernels_set_isa("best");
}

TEST(test_expf) {
    double worst = 0;
    for (int i = 0; i <= 1000000; i++) {
        float x = -87.0f * (float)i / 1000000.0f;
        double want = exp((double)x), got = kvs_expf_ref(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(worst < 3e-7, "max relative error %g", worst); /* ~2.5 ulp */
    CHECK(kvs_expf_ref(0.0f) == 1.0f);
    CHECK(kvs_expf_ref(-INFINITY) == 0.0f);
    CHECK(kvs_expf_ref(-200.0f) == 0.0f);
}

/* The Q8 attention's exp: 2^y, y = x log2 e, so the roundings of y (|y|
 * 2^-24) and of log2 e to float (1.3e-8 relative) add |x| log2 e (2^-24 +
 * 1.3e-8) ln 2 = |x| 7.3e-8 to the polynomial's 3.4e-6 (9.8e-6 at -87). */
TEST(test_exp_q8) {
    double worst = 0;
    for (int i = 0; i <= 1000000; i++) {
        float x = -87.0f * (float)i / 1000000.0f;
        double want = exp((double)x), got = kvs_exp_q8_ref(x);
        double rel = fabs(got - want) / want, bound = 3.5e-6 + fabs((double)x) * 7.4e-8;
        if (rel / bound > worst) worst = rel / bound;
    }
    CHECK_MSG(worst < 1.0, "relative error %g of the bound", worst);
    CHECK(kvs_exp_q8_ref(0.0f) == 1.0f);
    CHECK(kvs_exp_q8_ref(-0.0f) == 1.0f);
    CHECK(kvs_exp_q8_ref(-INFINITY) == 0.0f);
    CHECK(kvs_exp_q8_ref(NAN) == 0.0f);
    CHECK(kvs_exp_q8_ref(-88.0f) > 0.0f && kvs_exp_q8_ref(-88.0f) < FLT_MIN); /* y = -126.96: subnormal */
    CHECK(kvs_exp_q8_ref(-104.0f) == 0.0f);                                   /* y = -150.04: rounds to 0 */
    CHECK(kvs_exp_q8_ref(-1e30f) == 0.0f);
    CHECK(isinf(kvs_exp_q8_ref(1e30f)));   /* past its domain (x <= 0): still defined */
}

static void rope_double(double *x, int n_head, int hd, int rd, double pos, double base, double fs,
                        int neox) {
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < rd / 2; i++) {
            double th = pos * fs * pow(base, -2.0 * i / rd), c = cos(th), s = sin(th);
            int a = neox ? i : 2 * i, b = neox ? i + rd / 2 : 2 * i + 1;
            double x0 = x[h * hd + a], x1 = x[h * hd + b];
            x[h * hd + a] = x0 * c - x1 * s;
            x[h * hd + b] = x0 * s + x1 * c;
        }
}

TEST(test_rope) {
    const int nh = 3, hd = 64;
    for (int neox = 0; neox <= 1; neox++) {
        for (int rd = 32; rd <= 64; rd += 32) {
            int32_t positions[] = {0, 1, 17, 511, 4095, 8191, -300};
            for (size_t pi = 0; pi < sizeof(positions) / sizeof(positions[0]); pi++) {
                float x[192], x0[192];
                double xd[192];
                kt_rand_vec(x, 192, 2.0f);
                memcpy(x0, x, sizeof(x));
                for (int i = 0; i < 192; i++) xd[i] = x[i];
                kvs_rope(x, nh, hd, rd, positions[pi], 100000.0f, 1.0f, neox);
                rope_double(xd, nh, hd, rd, positions[pi], 100000.0, 1.0, neox);
                for (int i = 0; i < 192; i++) CHECK_NEAR(x[i], xd[i], 3e-7 * 2.0 + 1e-12);
                /* +p then -p is nearly lossless: within 2 ulp of the input scale */
                kvs_rope(x, nh, hd, rd, -positions[pi], 100000.0f, 1.0f, neox);
                for (int i = 0; i < 192; i++) CHECK_NEAR(x[i], x0[i], 2.5e-7);
            }
        }
    }
    /* rotating by a then by b equals rotating by a + b (chunk moves) */
    float a[64], b[64];
    kt_rand_vec(a, 64, 1.0f);
    memcpy(b, a, sizeof(a));
    kvs_rope(a, 1, 64, 64, 1000, 10000.0f, 1.0f, 0);
    kvs_rope(a, 1, 64, 64, 234, 10000.0f, 1.0f, 0);
    kvs_rope(b, 1, 64, 64, 1234, 10000.0f, 1.0f, 0);
    for (int i = 0; i < 64; i++) CHECK_NEAR(a[i], b[i], 3e-7);
    /* freq_scale multiplies the angle */
    kt_rand_vec(a, 64, 1.0f);
    memcpy(b, a, sizeof(a));
    kvs_rope(a, 1, 64, 64, 100, 10000.0f, 0.25f, 0);
    kvs_rope(b, 1, 64, 64, 25, 10000.0f, 1.0f, 0);
    for (int i = 0; i < 64; i++) CHECK_NEAR(a[i], b[i], 1e-7);
}

/* Every ISA path rotates to the same bits (the AVX-512 rotation: 8 pairs a
 * vector, a scalar tail); the two-step form (the forward pass's table) gives
 * kvs_rope_ff's bits; a rope_dim past the memo's 1024 takes its angles in
 * blocks and still matches the float64 reference. */
TEST(test_rope_paths) {
    const char *isas[] = {"scalar", "avx2", "avx512vnni"};
    const int dims[][2] = {{64, 64}, {32, 64}, {20, 24}, {256, 256}, {2050, 2050}}; /* rope_dim <= head_dim */
    float ff[1025];
    for (int i = 0; i < 1025; i++) ff[i] = 1.0f + (float)(i % 7) * 0.5f;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int rd = dims[di][0], hd = dims[di][1], nh = 3, n = nh * hd;
        float *x = xmalloc(sizeof(float) * n), *ref = xmalloc(sizeof(float) * n), *y = xmalloc(sizeof(float) * n);
        double *c = xmalloc(sizeof(double) * rd), *xd = xmalloc(sizeof(double) * n);
        kt_rand_vec(x, n, 2.0f);
        for (int neox = 0; neox <= 1; neox++)
            for (int with_ff = 0; with_ff <= 1; with_ff++)
                for (int32_t pos = -37; pos <= 5000; pos += 2519) {
                    const float *fac = with_ff && rd / 2 <= 1025 ? ff : NULL;
                    int have_ref = 0;
                    for (int si = 0; si < 3; si++) {
                        if (kvs_kernels_set_isa(isas[si]) != 0) continue; /* not on this CPU */
                        memcpy(y, x, sizeof(float) * n);
                        kvs_rope_ff(y, nh, hd, rd, pos, 10000.0f, 0.5f, neox, fac);
                        if (!have_ref) {
                            memcpy(ref, y, sizeof(float) * n);
                            have_ref = 1;
                        }
                        CHECK_MSG(memcmp(y, ref, sizeof(float) * n) == 0, "rope_dim %d neox %d %s pos %d", rd, neox,
                                  isas[si], pos);
                        memcpy(y, x, sizeof(float) * n);
                        kvs_rope_cos_sin(rd, pos, 10000.0f, 0.5f, fac, c, c + rd / 2);
                        kvs_rope_apply(y, nh, hd, rd, neox, c, c + rd / 2);
                        CHECK_MSG(memcmp(y, ref, sizeof(float) * n) == 0, "two steps, rope_dim %d neox %d %s", rd, neox,
                                  isas[si]);
                    }
                    if (!fac) { /* the float64 reference at half the position (freq_scale 0.5) */
                        for (int i = 0; i < n; i++) xd[i] = x[i];
                        rope_double(xd, nh, hd, rd, pos * 0.5, 10000.0, 1.0, neox);
                        for (int i = 0; i < n; i++) CHECK_NEAR(ref[i], xd[i], 3e-7 * 2.0 + 1e-12);
                    }
                }
        kvs_kernels_set_isa("best");
        free(x);
        free(ref);
        free(y);
        free(c);
        free(xd);
    }
}

/* ------------------------------------------------------------------------ */

typedef struct attn_case {
    int m, n_head, n_kv, hd, n_ctx, kv_type;
    float *q, *out;
    void *k, *v;
    int32_t *pos;
} attn_case;

static attn_case attn_make(int m, int n_head, int n_kv, int hd, int n_ctx, int kv_type, int start) {
    attn_case c = {m, n_head, n_kv, hd, n_ctx, kv_type, NULL, NULL, NULL, NULL, NULL};
    size_t kvn = (size_t)n_kv * n_ctx * hd, qn = (size_t)m * n_head * hd;
    c.q = xmalloc(qn * 4);
    c.out = xmalloc(qn * 4);
    c.pos = xmalloc((size_t)m * 4);
    kt_rand_vec(c.q, qn, 2.0f);
    float *kf = xmalloc(kvn * 4), *vf = xmalloc(kvn * 4);
    kt_rand_vec(kf, kvn, 2.0f);
    kt_rand_vec(vf, kvn, 1.0f);
    if (kv_type != KVS_KV_F32) { /* F16, Q8: rows of their own size */
        const int rows = n_kv * n_ctx;
        c.k = xmalloc(kvs_kv_row_bytes(kv_type, hd) * rows);
        c.v = xmalloc(kvs_kv_row_bytes(kv_type, hd) * rows);
        kvs_kv_rows_store(kv_type, kf, c.k, rows, hd);
        kvs_kv_rows_store(kv_type, vf, c.v, rows, hd);
        free(kf);
        free(vf);
    } else {
        c.k = kf;
        c.v = vf;
    }
    for (int t = 0; t < m; t++) c.pos[t] = start + t;
    return c;
}

static void attn_free(attn_case *c) {
    free(c->q); free(c->out); free(c->pos); free(c->k); free(c->v);
}

static void attn_run(attn_case *c, kvs_pool *pool, int nth) {
    void *work = xmalloc(kvs_attention_work_size(nth, c->n_ctx));
    kvs_attention(pool, c->out, c->q, c->pos, c->m, c->k, c->v, c->kv_type, c->n_head, c->n_kv,
                  c->hd, c->n_ctx, 1.0f / sqrtf((float)c->hd), work);
    free(work);
}

/* Element i of (n_kv, n_ctx, hd) K or V as stored (Q8: level times scale). */
static double kv_at(const attn_case *c, const void *base, size_t i) {
    float row[256];
    kvs_kv_row_load(c->kv_type, (const uint8_t *)base + i / c->hd * kvs_kv_row_bytes(c->kv_type, c->hd), row, c->hd);
    return row[i % c->hd];
}

/* Attention against a double-precision softmax(q k^T) v. */
/* c under the scalar path (its output into ref), then under isa (in
 * c->out): how many outputs differ in their bytes (NaN and infinities
 * compared as bits), *first the first of them. */
static size_t attn_against_scalar(attn_case *c, const char *isa, float *ref, size_t *first) {
    const size_t qn = (size_t)c->m * c->n_head * c->hd;
    kvs_kernels_set_isa("scalar");
    attn_run(c, NULL, 1);
    memcpy(ref, c->out, qn * 4);
    kvs_kernels_set_isa(isa);
    attn_run(c, NULL, 1);
    size_t nbad = 0;
    *first = qn;
    for (size_t i = 0; i < qn; i++)
        if (memcmp(&ref[i], &c->out[i], 4) && !nbad++) *first = i;
    return nbad;
}

/* Q8 (attention_q8_ref.c) against the same with its query rows quantized
 * (kvs_q8_row) and the rest in double: what is left is its 16-bit weights'
 * rounding (1 / 65534 of the largest) and float steps. */
TEST(test_attention_ref_vs_double) {
    kvs_kernels_set_isa("scalar");
    for (int kv_type = 0; kv_type <= 2; kv_type++) {
        attn_case c = attn_make(9, 6, 2, 64, 80, kv_type, 60);
        c.pos[3] = 0; /* a token that sees only slot 0 */
        attn_run(&c, NULL, 1);
        double worst = 0;
        for (int t = 0; t < c.m; t++)
            for (int h = 0; h < c.n_head; h++) {
                int g = h / (c.n_head / c.n_kv), n = c.pos[t] + 1;
                float q[64];
                memcpy(q, c.q + ((size_t)t * c.n_head + h) * c.hd, sizeof q);
                if (kv_type == KVS_KV_Q8) {
                    int8_t q8[64];
                    const float qd = kvs_q8_row(q, q8, 64);
                    for (int d = 0; d < 64; d++) q[d] = (float)q8[d] * qd;
                }
                double *s = xmalloc(sizeof(double) * n), mx = -1e300, sum = 0;
                for (int j = 0; j < n; j++) {
                    double a = 0;
                    for (int d = 0; d < c.hd; d++)
                        a += q[d] * kv_at(&c, c.k, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    s[j] = a / sqrt((double)c.hd);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
                for (int d = 0; d < c.hd; d++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += s[j] * kv_at(&c, c.v, ((size_t)g * c.n_ctx + j) * c.hd + d);
                    o /= sum;
                    double got = c.out[((size_t)t * c.n_head + h) * c.hd + d];
                    if (fabs(got - o) > worst) worst = fabs(got - o);
                }
                free(s);
            }
        /* |v| <= 1; Q8's weights: 1 / 65534 of the largest, at most ~80 keys */
        const double tol = kv_type == KVS_KV_Q8 ? 2e-4 : 2e-5;
        CHECK_MSG(worst < tol, "kv_type %d: max abs error %g", kv_type, worst);
        attn_free(&c);
    }
    kvs_kernels_set_isa("best");
}

TEST(test_attention_simd_equals_scalar) {
    struct { int m, nh, nkv, hd, ctx, start; } cases[] = {
        {1, 9, 3, 64, 600, 517}, {1, 9, 3, 64, 40, 0}, {37, 9, 3, 64, 300, 100},
        {64, 9, 3, 64, 64, 0},   {5, 4, 4, 32, 50, 20}, {20, 8, 1, 128, 90, 60},
        {3, 6, 2, 48, 30, 10},
        /* units of at most 4 rows (keys in lanes on AVX2): 1, 2, 3, 4 rows,
         * rows of different tokens (different n), head_dim 32 to 256 */
        {1, 4, 4, 32, 70, 69},   {1, 4, 2, 128, 300, 150}, {3, 2, 2, 64, 100, 40},
        {2, 4, 2, 256, 50, 10},  {1, 8, 2, 32, 1000, 999},
        /* AVX-512 Q8 decode units: rows of one token 4 at a time (7 rows:
         * 4 + 3), two tokens of 3 rows each, 48 dims (3 vectors) */
        {1, 14, 2, 48, 333, 332}, {2, 9, 3, 64, 200, 150},
        /* prefill over several staged key tiles (256 keys at head_dim 64,
         * 64 at 256): the next tile prefetched, the keys every row sees
         * stored unmasked, the causal edge masked */
        {40, 9, 3, 64, 1100, 1000}, {24, 4, 1, 256, 700, 600}, {19, 9, 3, 64, 600, 250},
        /* an odd n_ctx with its last slot seen (Q8: the value pair past the
         * buffer reads 0), head_dim 16 and not a multiple of 64 (Q8:
         * masked key staging) */
        {1, 4, 2, 80, 301, 300}, {7, 4, 2, 16, 99, 92}, {20, 6, 2, 96, 257, 237},
    };
    int compared = 0;
    for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
        if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
        for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++)
            for (int kv_type = 0; kv_type <= 2; kv_type++)
                for (int peaked = 0; peaked < 2; peaked++) {
                    attn_case c = attn_make(cases[ci].m, cases[ci].nh, cases[ci].nkv, cases[ci].hd,
                                            cases[ci].ctx, kv_type, cases[ci].start);
                    /* rows as peaked as a real model's (random ones are flat): most
                     * weights below 1/128 of their row's largest, so Q8's AVX-512
                     * P.V runs its hi bytes for some 4-key groups, not all */
                    if (peaked)
                        for (size_t i = 0; i < (size_t)c.m * c.n_head * c.hd; i++) c.q[i] *= 6.0f;
                    float *ref = xmalloc((size_t)c.m * c.n_head * c.hd * 4);
                    size_t bad;
                    if (attn_against_scalar(&c, simd_isas[s], ref, &bad)) {
                        fprintf(stderr, "  %s case %zu kv %d peaked %d: out[%zu] %.9g vs scalar %.9g\n",
                                simd_isas[s], ci, kv_type, peaked, bad, c.out[bad], ref[bad]);
                        kt_test_failed++;
                    }
                    compared++;
                    free(ref);
                    attn_free(&c);
                }
    }
    kvs_kernels_set_isa("best");
    printf("  %d SIMD/scalar attention comparisons\n", compared);
}

/* A Q8 prefill over many keys (several units per kv head, so AVX-512
 * stages each kv head once, and on AMX the scores and P.V run as tile
 * products) with a sliding window whose first key is no multiple of 16 or
 * 64, the last tile's keys no multiple of 16, head_dim 64 and 256: every
 * SIMD path on 1, 2 and 3 threads gives the scalar path's bits. */
TEST(test_attention_q8_window_prefill_equals_scalar) {
    struct { int m, nh, nkv, hd, ctx, start, window; } cases[] = {
        {40, 9, 3, 64, 1100, 1050, 300}, {40, 9, 3, 64, 1100, 1000, 777}, {33, 9, 3, 64, 900, 830, 0},
        {24, 4, 1, 256, 700, 670, 333},
    };
    kvs_pool *pools[4] = {NULL, NULL, kvs_pool_new(2), kvs_pool_new(3)};
    int compared = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        attn_case c = attn_make(cases[ci].m, cases[ci].nh, cases[ci].nkv, cases[ci].hd, cases[ci].ctx, KVS_KV_Q8,
                                cases[ci].start);
        for (size_t i = 0; i < (size_t)c.m * c.n_head * c.hd; i++) c.q[i] *= 6.0f; /* peaked rows: hi bytes in use */
        const size_t qn = (size_t)c.m * c.n_head * c.hd;
        float *ref = xmalloc(qn * 4);
        void *work = xmalloc(kvs_attention_work_size(3, c.n_ctx));
#define ATTN_W(pool, dst)                                                                                      \
    kvs_attention_window(pool, dst, c.q, c.pos, c.m, c.k, c.v, KVS_KV_Q8, c.n_head, c.n_kv, c.hd, c.n_ctx, 0.125f, \
                         cases[ci].window, NULL, NULL, work)
        kvs_kernels_set_isa("scalar");
        ATTN_W(NULL, ref);
        for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
            if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
            for (int th = 1; th <= 3; th++) {
                memset(c.out, 0xff, qn * 4);
                ATTN_W(pools[th], c.out);
                CHECK_MSG(memcmp(ref, c.out, qn * 4) == 0, "%s case %zu, %d threads: differs from scalar", simd_isas[s],
                          ci, th);
                compared++;
            }
        }
#undef ATTN_W
        free(work);
        free(ref);
        attn_free(&c);
    }
    kvs_pool_free(pools[2]);
    kvs_pool_free(pools[3]);
    kvs_kernels_set_isa("best");
    printf("  %d windowed Q8 prefills compared\n", compared);
}


/* The scale of Q8 row r of K or V. */
static void q8_set_scale(attn_case *c, void *base, int r, float d) {
    memcpy((int8_t *)base + (size_t)r * kvs_kv_row_bytes(KVS_KV_Q8, c->hd) + c->hd, &d, 4);
}

/* test_attention_simd_equals_scalar on hostile rows: scores far past
 * softmax's range (q x 1e3, x 1e8: one key takes all; x 25: keys at the exps'
 * cut-offs), a NaN or an
 * infinity in q, keys of 1e30 (scores overflow to +-inf), a NaN in v: every
 * path keeps the scalar bits, NaN and infinity included (the quantizers'
 * AVX-512 maxima had not, session 57). */
TEST(test_attention_hostile_simd_equals_scalar) {
    struct { int m, nh, nkv, hd, ctx, start; } cases[] = {
        {1, 9, 3, 64, 600, 517}, {37, 9, 3, 64, 300, 100}, {5, 4, 4, 32, 50, 20}, {40, 9, 3, 64, 1100, 1000}};
    int compared = 0;
    for (int variant = 0; variant < 9; variant++)
        for (size_t s = 0; s < sizeof(simd_isas) / sizeof(simd_isas[0]); s++) {
            if (kvs_kernels_set_isa(simd_isas[s]) != 0) continue;
            for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++)
                for (int kv_type = 0; kv_type <= 2; kv_type++) {
                    /* 4, 5: f32 keys and values only (1e30 is no f16); 6, 7: Q8 rows */
                    if ((variant == 4 || variant == 5) && kv_type != KVS_KV_F32) continue;
                    if ((variant == 6 || variant == 7) && kv_type != KVS_KV_Q8) continue;
                    attn_case c = attn_make(cases[ci].m, cases[ci].nh, cases[ci].nkv, cases[ci].hd, cases[ci].ctx,
                                            kv_type, cases[ci].start);
                    const size_t qn = (size_t)c.m * c.n_head * c.hd, kvn = (size_t)c.n_kv * c.n_ctx * c.hd;
                    switch (variant) {
                    case 0: for (size_t i = 0; i < qn; i++) c.q[i] *= 1e3f; break;
                    case 1: for (size_t i = 0; i < qn; i++) c.q[i] *= 1e8f; break;
                    case 8: /* s - mx down to ~ -200: many keys at the exps' cut-offs */
                        for (size_t i = 0; i < qn; i++) c.q[i] *= 25.0f;
                        break;
                    case 2: c.q[5] = NAN; break;
                    case 3: c.q[7] = INFINITY; break;
                    case 4: ((float *)c.k)[100] = 1e30f; ((float *)c.k)[kvn - 3] = -1e30f; break;
                    case 5: ((float *)c.v)[64 * 3 + 1] = NAN; break;
                    case 6: /* hostile Q8 scales (a damaged cache entry): inf, NaN, -0, 3e38 */
                        q8_set_scale(&c, c.k, 2, INFINITY);
                        q8_set_scale(&c, c.k, c.n_kv * c.n_ctx - 1, NAN);
                        q8_set_scale(&c, c.k, 5, 3e38f); /* scores overflow to +-inf */
                        q8_set_scale(&c, c.v, 3, NAN);
                        q8_set_scale(&c, c.v, 4, -0.0f);
                        q8_set_scale(&c, c.v, 7, -1.0f);
                        break;
                    default: /* levels of -128 (no quantizer writes them), every V scale 0 on head 0 */
                        for (int r = 0; r < c.n_kv * c.n_ctx; r += 3) {
                            ((int8_t *)c.k)[(size_t)r * (c.hd + 4)] = -128;
                            ((int8_t *)c.v)[(size_t)r * (c.hd + 4) + 1] = -128;
                        }
                        for (int r = 0; r < c.n_ctx; r++) q8_set_scale(&c, c.v, r, 0.0f);
                        break;
                    }
                    float *ref = xmalloc(qn * 4);
                    size_t first;
                    const size_t nbad = attn_against_scalar(&c, simd_isas[s], ref, &first);
                    if (nbad) {
                        fprintf(stderr, "  variant %d %s case %zu kv %d: %zu outputs differ, out[%zu] %.9g vs scalar %.9g\n",
                                variant, simd_isas[s], ci, kv_type, nbad, first, c.out[first], ref[first]);
                        kt_test_failed++;
                    }
                    compared++;
                    free(ref);
                    attn_free(&c);
                }
        }
    kvs_kernels_set_isa("best");
    printf("  %d hostile SIMD/scalar attention comparisons\n", compared);
}

/* The AMX path (Q4_0 / Q4_1 / Q5_0 / Q4_K / Q8_0, >= KVS_AMX_MIN_M rows) gives the scalar
 * bytes for m around the 16-row tile and the threshold, k with and without
 * tail blocks (and past KVS_AMX_MAX_K: the AVX-512 fallback), n around the
 * 32-column panel, on one and two threads, including rows at the two-level
 * rounding edges (Q8_0 with nb < 16, 16..31 and several groups of chains,
 * tail stages of 1..4 blocks: its stage order, panel_q8). Q5_0
 * and Q4_K follow the K-quant order (tail blocks on their chains: k = 640 is
 * gemma3's) and are taken to their extremes (weight row 0 all -16 / all 15
 * against a row of 127.5: the largest block dots the tiles must hold
 * exactly); Q4_K only where k is a multiple of its 256. */
/* Q8_0 on AMX at large integer dots: weight and activation blocks of the
 * same sign pattern, |w| 119..128 and levels of random magnitude, so i_b
 * (~5e7..1e8) lies past 2^24 and (float)i_b rounds: the hi and lo tiles'
 * sum must round exactly as the scalar reference's conversion does. (The
 * SDM has TDPBF16PS round at each accumulation, so one tile of both could
 * round several times; the Xeon of session 33 rounds once per instruction,
 * and a one-tile variant passed here too: the two tiles are for the spec.) */
static int q8x_sign(int b, int e) { return (e * 7 + b * 3) % 5 < 2 ? -1 : 1; }

static void q8_extremes(int m);

TEST(test_matmul_amx_q8_extremes) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    for (int m = 48; m > 0; m = m == 48 ? 8 : m == 8 ? 7 : 0) /* prefill tiles; batch tiles (int32 i_b) */
        q8_extremes(m);
}

static void q8_extremes(int m) {
    const int k = 576, n = 40;
    kvs_wmat w = kt_rand_wmat(KVS_TYPE_Q8_0, n, k);
    uint8_t *wd = (uint8_t *)w.data;
    for (int j = 0; j < n; j++)
        for (int b = 0; b < k / 32; b++)
            for (int e = 0; e < 32; e++) {
                const int r = (j * 13 + e * 5 + b) % 9;
                wd[(size_t)j * w.row_bytes + (size_t)b * 34 + 2 + e] =
                    (uint8_t)(int8_t)(q8x_sign(b, e) > 0 ? 127 - r : -128 + r);
            }
    float *x = xmalloc(sizeof(float) * m * k);
    float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
    for (int i = 0; i < m; i++)
        for (int e = 0; e < k; e++) { /* element 0 of a block sets amax; odd rows the opposite signs */
            const float mag = e % 32 == 0 ? 1.0f : 0.55f + 0.45f * (float)((i * 31 + e * 17) % 101) / 101.0f;
            x[(size_t)i * k + e] = (float)(q8x_sign(e / 32, e % 32) * (i % 2 ? -1 : 1)) * mag;
        }
    void *work = xmalloc(kvs_matmul_work_size(&w, m));
    kvs_kernels_set_isa("scalar");
    kvs_matmul(NULL, &w, x, m, y0, work);
    kvs_kernels_set_isa("amx");
    kvs_matmul(NULL, &w, x, m, y1, work);
    kvs_kernels_set_isa("best");
    int same = memcmp(y0, y1, sizeof(float) * m * n) == 0;
    CHECK(same);
    if (!same) {
        int bad = 0;
        while (y0[bad] == y1[bad]) bad++;
        fprintf(stderr, "  q8 extremes m %d: y[%d] %.9g vs scalar %.9g\n", m, bad, y1[bad], y0[bad]);
    }
    free(x); free(y0); free(y1); free(work); free((void *)w.data);
}

TEST(test_matmul_amx_equals_scalar) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    CHECK(kvs_kernels_amx() == 1);
    kvs_kernels_set_isa("avx512vnni");
    CHECK(kvs_kernels_amx() == 0);
    const int qtypes[] = {KVS_TYPE_Q4_1, KVS_TYPE_Q4_0, KVS_TYPE_Q5_0, KVS_TYPE_Q4_K, KVS_TYPE_Q8_0};
    /* 5..8: the batch tiles (matmul_amx_batch.c for Q8_0,
     * matmul_amx_batch_nib.c for Q5_0 / Q4_K from KVS_AMX_BATCH_MIN_M rows,
     * Q4_0 / Q4_1 from KVS_AMX_BATCH_Q4_MIN_M), 2 and 9 the AVX-512 paths
     * around them */
    const int ms[] = {2, 5, 6, 7, 8, 9, 16, 17, 31, 32, 33, 47, 48, 70};
    const int ks[] = {32, 96, 320, 512, 544, 576, 640, 736, 1024, 1536, 2048, 2080, 2304};
    const int ns[] = {1, 5, 16, 17, 31, 32, 33, 45, 100};
    kvs_pool *pool = kvs_pool_new(2);
    int compared = 0, idx = 0;
    for (size_t t = 0; t < sizeof(qtypes) / sizeof(qtypes[0]); t++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++, idx++) {
                int type = qtypes[t], k = ks[ki], m = ms[mi];
                int n = ns[(size_t)idx % (sizeof(ns) / sizeof(ns[0]))];
                if (type == KVS_TYPE_Q4_K && k % 256) continue;
                if (k >= 2048 && m > 33) continue; /* keep the scalar runs short */
                kvs_wmat w = kt_rand_wmat(type, n, k);
                float *x = xmalloc(sizeof(float) * m * k);
                float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
                kt_rand_vec(x, (size_t)m * k, 2.0f);
                for (int e = 0; e < k; e++) { /* rounding edges in row 1 (ties of v and 256 v) */
                    static const float edge[] = {127.0f, 0.5f, -2.5f, 126.5f, 127.5f / 256, -128.5f / 256,
                                                 0.0f, 1e-40f, 3.0f - 128.0f / 256, -127.0f};
                    x[k + e] = edge[e % 10];
                }
                if (m >= 3)
                    for (int e = 0; e < 32; e++) x[2 * k + e] = 0.0f; /* an all-zero block */
                if ((type == KVS_TYPE_Q5_0 || type == KVS_TYPE_Q4_K) && m >= 4) { /* row 3, column 0: the largest |dot| */
                    for (int e = 0; e < k; e++) x[3 * k + e] = 127.5f; /* Q = 32512 */
                    if (type == KVS_TYPE_Q5_0)
                        for (int b = 0; b < k / 32; b++) /* weight row 0: q = 0 (qh, qs zero), w = -16 */
                            memset((uint8_t *)w.data + (size_t)b * 22 + 2, 0, 20);
                    else
                        for (int b = 0; b < k / 256; b++) /* weight row 0: every nibble 15 */
                            memset((uint8_t *)w.data + (size_t)b * 144 + 16, 0xff, 128);
                }
                void *work = xmalloc(kvs_matmul_work_size(&w, m));
                kvs_kernels_set_isa("scalar");
                kvs_matmul(NULL, &w, x, m, y0, work);
                /* Q8_0 / Q4_0 / Q4_1 / Q5_0 also from their tiles (kvs_wmat_tiles_to:
                 * the batch tiles through matmul_amx_batch_nib.c, the
                 * prefill's copy) */
                void *tiles = NULL;
                for (int tl = 0; tl < (kvs_wmat_tiles_bytes(&w) ? 2 : 1); tl++) {
                    if (tl) {
                        tiles = aligned_alloc(64, (kvs_wmat_tiles_bytes(&w) + 63) & ~(size_t)63);
                        CHECK(tiles != NULL);
                        kvs_wmat_tiles_to(&w, tiles);
                    }
                    for (int th = 0; th < 2; th++) {
                        kvs_kernels_set_isa("amx");
                        memset(y1, 0xff, sizeof(float) * m * n);
                        kvs_matmul(th ? pool : NULL, &w, x, m, y1, work);
                        if (memcmp(y0, y1, sizeof(float) * m * n) != 0) {
                            int bad = 0;
                            while (y0[bad] == y1[bad]) bad++;
                            fprintf(stderr, "  amx type %d k %d n %d m %d th %d tiles %d: y[%d] %.9g vs scalar %.9g\n",
                                    type, k, n, m, th + 1, tl, bad, y1[bad], y0[bad]);
                            kt_test_failed++;
                        }
                        compared++;
                    }
                }
                free(tiles); free(x); free(y0); free(y1); free(work); free((void *)w.data);
            }
    /* enough rows that the call is split into row blocks (each block's
     * activations sized for L2, dispatch.c): 200 rows at k = 2048 */
    for (size_t t = 0; t < sizeof(qtypes) / sizeof(qtypes[0]); t++, compared++)
        matmul_vs_scalar("amx", pool, qtypes[t], 2048, 33, 200, 0);
    kvs_pool_free(pool);
    kvs_kernels_set_isa("best");
    printf("  %d AMX/scalar matmul comparisons\n", compared);
}

/* The AMX path's scratch (~410 KB) lives on the heap, per thread: a
 * caller thread with a small stack (192 KB here) must work. */
typedef struct amx_stack_job {
    kvs_wmat w;
    const float *x;
    float *y;
    void *work;
    int m;
} amx_stack_job;

static void *amx_stack_run(void *arg) {
    amx_stack_job *j = arg;
    kvs_matmul(NULL, &j->w, j->x, j->m, j->y, j->work);
    return NULL;
}

TEST(test_matmul_amx_small_stack) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    const int m = 64, k = 2048, n = 48;
    kvs_wmat w = kt_rand_wmat(KVS_TYPE_Q4_1, n, k);
    float *x = xmalloc(sizeof(float) * m * k);
    float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
    kt_rand_vec(x, (size_t)m * k, 2.0f);
    void *work = xmalloc(kvs_matmul_work_size(&w, m));
    kvs_kernels_set_isa("scalar");
    kvs_matmul(NULL, &w, x, m, y0, work);
    kvs_kernels_set_isa("amx");
    memset(y1, 0xff, sizeof(float) * m * n);
    amx_stack_job job = {w, x, y1, work, m};
    pthread_attr_t attr;
    pthread_t th;
    CHECK(pthread_attr_init(&attr) == 0);
    CHECK(pthread_attr_setstacksize(&attr, 192 * 1024) == 0);
    CHECK(pthread_create(&th, &attr, amx_stack_run, &job) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    pthread_attr_destroy(&attr);
    CHECK_MSG(memcmp(y0, y1, sizeof(float) * m * n) == 0, "amx on a 192 KB stack differs from scalar");
    kvs_kernels_set_isa("best");
    free(x); free(y0); free(y1); free(work); free((void *)w.data);
}

TEST(test_isa_selection) {
    const char *isa = kvs_kernels_isa();
    printf("  dispatcher picked %s\n", isa);
    CHECK(isa && *isa);
    CHECK(kvs_kernels_set_isa("no-such-isa") == -1);
    kvs_kernels_force_scalar(1);
    CHECK(strcmp(kvs_kernels_isa(), "scalar") == 0);
    kvs_kernels_force_scalar(0);
    CHECK(strcmp(kvs_kernels_isa(), isa) == 0);
}

int main(void) {
    RUN(test_f16_conversions);
    RUN(test_dequantize);
    RUN(test_expf);
    RUN(test_exp_q8);
    RUN(test_matmul_ref_vs_double);
    RUN(test_matmul_simd_equals_scalar);
    RUN(test_matmul_weights_at_odd_address);
    RUN(test_matmul_float_k_tails);
    RUN(test_matmul_float_decode_chunks);
    RUN(test_matmul_float_prefill_tiles);
    RUN(test_decode_cols);
    RUN(test_matmul_float_negative_zero_chains);
    RUN(test_matmul_two_level_edges);
    RUN(test_matmul_amx_equals_scalar);
    RUN(test_matmul_amx_q8_extremes);
    RUN(test_rmsnorm);
    RUN(test_silu_mul);
    RUN(test_rowops_simd_equals_scalar);
    RUN(test_q8_row_simd_equals_scalar);
    RUN(test_rope);
    RUN(test_rope_paths);
    RUN(test_attention_ref_vs_double);
    RUN(test_attention_simd_equals_scalar);
    RUN(test_attention_q8_window_prefill_equals_scalar);
    RUN(test_attention_hostile_simd_equals_scalar);
    RUN(test_matmul_amx_small_stack);
    RUN(test_isa_selection);
    return kt_summary();
}
