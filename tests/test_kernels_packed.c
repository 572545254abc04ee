/*
 * Packed weights (kvs_wmat_pack, matmul_avx2_packed.c) and batched decode:
 *  - the AVX2 path on packed Q4_0 / Q4_1 / Q8_0 rows gives the scalar
 *    reference's bits on the unpacked rows (memcmp), for every m in 1..17
 *    and prefill sizes, k with and without tail blocks, 1 and 2 threads;
 *  - batch invariance of batched decode: row i of a call of m = 2..16 rows
 *    is memcmp-equal to a call of that row alone, on every available path
 *    (packed or not);
 *  - the two-level rounding edges (ties, clamped lo, zero and subnormal
 *    blocks, huge values) through the packed path;
 *  - Q8_0 weight bytes of -128 (|w| = 128 in the sign trick);
 *  - the far prefetch of weights that stream from DRAM (far_rows): when it
 *    is chosen, and the same bits with it.
 */
#include <float.h>
#include <math.h>

#include "harness.h"
#include "kernels/kernels_impl.h"
#include "test_kernels_util.h"

static const int qtypes[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static int quick(void) {
    const char *e = getenv("KVSTITCH_TEST_QUICK");
    return e && *e && *e != '0';
}

/* y of kvs_matmul on the given ISA ("scalar" ignores packed rows). */
static void mm(const char *isa, kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y) {
    void *work = xmalloc(kvs_matmul_work_size(w, m));
    kvs_kernels_set_isa(isa);
    kvs_matmul(pool, w, x, m, y, work);
    kvs_kernels_set_isa("best");
    free(work);
}

static int first_diff(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4)) return i;
    return -1;
}

TEST(test_packed_equals_scalar) {
    /* the AVX2 and AVX-512 kernels read every packed type */
    const char *isas[] = {"avx2", "avx512vnni"};
    int have[2], any = 0;
    for (int s = 0; s < 2; s++) any |= have[s] = kvs_kernels_set_isa(isas[s]) == 0;
    kvs_kernels_set_isa("best");
    if (!any) {
        printf("  (skip: no AVX2 on this CPU)\n");
        return;
    }
    const int ks[] = {32, 96, 512, 544, 576, 1536};
    const int ns[] = {1, 7, 45, 130};
    const int ms[] = {1, 2, 3, 4, 5, 8, 13, 16, 17, 40, 100}; /* 100: a row block a thread on 2 (dispatch.c, mm_rows) */
    kvs_pool *pool2 = kvs_pool_new(2);
    CHECK(pool2 != NULL);
    int compared = 0;
    for (size_t t = 0; t < sizeof(qtypes) / sizeof(qtypes[0]); t++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                if (quick() && (ki + ni) % 2) continue;
                int type = qtypes[t], k = ks[ki], n = ns[ni];
                kvs_wmat w = kt_rand_wmat(type, n, k);
                kvs_wmat wp = w;
                CHECK_EQ_INT(kvs_wmat_pack(&wp, 1), 0);
                CHECK(wp.packed != NULL);
                for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                    int m = ms[mi];
                    float *x = xmalloc(sizeof(float) * m * k);
                    float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
                    kt_rand_vec(x, (size_t)m * k, 3.0f);
                    mm("scalar", NULL, &w, x, m, y0);
                    for (int s = 0; s < 2; s++)
                        for (int th = 0; have[s] && th < 2; th++) {
                            mm(isas[s], th ? pool2 : NULL, &wp, x, m, y1);
                            int bad = first_diff(y0, y1, m * n);
                            CHECK_MSG(bad < 0, "%s packed type %d k %d n %d m %d threads %d: y[%d] %.9g vs scalar %.9g",
                                      isas[s], type, k, n, m, th + 1, bad, bad < 0 ? 0 : y1[bad], bad < 0 ? 0 : y0[bad]);
                            compared++;
                        }
                    free(x); free(y0); free(y1);
                }
                kvs_wmat_unpack(&wp);
                CHECK(wp.packed == NULL);
                free((void *)w.data);
            }
    kvs_pool_free(pool2);
    printf("  %d packed/scalar matmul comparisons\n", compared);
}

/* Row i of an m-row call == the call of row i alone (m = 1), per path. */
TEST(test_batched_rows_equal_m1) {
    const char *isas[] = {"scalar", "avx2", "avx512vnni", "best"};
    const int types[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0, KVS_TYPE_F16, KVS_TYPE_F32};
    const int k = 576, n = 200;
    kvs_pool *pool2 = kvs_pool_new(2);
    int compared = 0;
    for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
        if (kvs_kernels_set_isa(isas[s]) != 0) continue;
        kvs_kernels_set_isa("best");
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
            for (int packed = 0; packed < 2; packed++) {
                if (packed && !kvs_wtype_is_quant(types[t])) continue;
                kvs_wmat w = kt_rand_wmat(types[t], n, k);
                if (packed) CHECK_EQ_INT(kvs_wmat_pack(&w, 1), 0);
                float *x = xmalloc(sizeof(float) * 16 * k);
                float *yb = xmalloc(sizeof(float) * 16 * n), *y1 = xmalloc(sizeof(float) * n);
                kt_rand_vec(x, (size_t)16 * k, 1.5f);
                for (int m = 2; m <= 16; m += quick() ? 7 : 1) {
                    mm(isas[s], pool2, &w, x, m, yb);
                    for (int i = 0; i < m; i++) {
                        mm(isas[s], NULL, &w, x + (size_t)i * k, 1, y1);
                        int bad = first_diff(y1, yb + (size_t)i * n, n);
                        CHECK_MSG(bad < 0, "%s type %d packed %d m %d row %d: col %d differs from m = 1", isas[s],
                                  types[t], packed, m, i, bad);
                        compared++;
                    }
                }
                free(x); free(yb); free(y1);
                kvs_wmat_unpack(&w);
                free((void *)w.data);
            }
    }
    kvs_pool_free(pool2);
    printf("  %d batched rows compared with m = 1\n", compared);
}

/* The rounding edges of quant.h and extreme weights through the packed path. */
TEST(test_packed_edges) {
    if (kvs_kernels_set_isa("avx2") != 0) {
        printf("  (skip: no AVX2 on this CPU)\n");
        kvs_kernels_set_isa("best");
        return;
    }
    kvs_kernels_set_isa("best");
    const int k = 576, n = 33, m = 6;
    float *x = xmalloc(sizeof(float) * m * k);
    for (int i = 0; i < m * k; i++) {
        int e = i % 32, b = i / 32;
        switch (b % 6) {
        case 0: x[i] = 0.0f; break;                                       /* all-zero block */
        case 1: x[i] = (e == 0 ? 127.0f : (float)(e - 16) + 0.5f); break; /* ties of v */
        case 2: x[i] = e == 0 ? 127.0f : (float)(e - 16) + 0.5f / 256.0f + 0.5f / 256.0f * (e & 1); break;
        case 3: x[i] = 1e-38f * (float)(e - 16); break;                   /* subnormal scale */
        /* huge but finite: divide first (3e38 * 32 would be inf, and an
         * infinite activation has no quantization) */
        case 4: x[i] = (e & 1 ? -3e38f : 3e38f) / 33.0f * (float)(e + 1); break;
        default: x[i] = kt_randf() * 100.0f;
        }
    }
    for (size_t t = 0; t < sizeof(qtypes) / sizeof(qtypes[0]); t++) {
        kvs_wmat w = kt_rand_wmat(qtypes[t], n, k);
        if (qtypes[t] == KVS_TYPE_Q8_0) /* row 0: every quant -128, row 1: +127 */
            for (int b = 0; b < k / 32; b++) {
                memset((uint8_t *)w.data + (size_t)b * 34 + 2, 0x80, 32);
                memset((uint8_t *)w.data + w.row_bytes + (size_t)b * 34 + 2, 0x7f, 32);
            }
        else /* row 0: every nibble 15, row 1: every nibble 0 */
            for (int b = 0; b < k / 32; b++) {
                size_t qo = qtypes[t] == KVS_TYPE_Q4_1 ? 4 : 2, bs = qtypes[t] == KVS_TYPE_Q4_1 ? 20 : 18;
                memset((uint8_t *)w.data + (size_t)b * bs + qo, 0xff, 16);
                memset((uint8_t *)w.data + w.row_bytes + (size_t)b * bs + qo, 0x00, 16);
            }
        kvs_wmat wp = w;
        CHECK_EQ_INT(kvs_wmat_pack(&wp, 1), 0);
        float *y0 = xmalloc(sizeof(float) * m * n), *y1 = xmalloc(sizeof(float) * m * n);
        mm("scalar", NULL, &w, x, m, y0);
        mm("avx2", NULL, &wp, x, m, y1);
        int bad = first_diff(y0, y1, m * n);
        CHECK_MSG(bad < 0, "packed edges type %d: y[%d] %.9g vs scalar %.9g", qtypes[t], bad,
                  bad < 0 ? 0 : y1[bad], bad < 0 ? 0 : y0[bad]);
        free(y0); free(y1);
        kvs_wmat_unpack(&wp);
        free((void *)w.data);
    }
    free(x);
}

/* Types without a packed layout are left alone; packing twice is a no-op. */
TEST(test_pack_scope) {
    kvs_wmat f = kt_rand_wmat(KVS_TYPE_F16, 4, 64);
    CHECK_EQ_INT(kvs_wmat_pack(&f, 1), 0);
    CHECK(f.packed == NULL);
    free((void *)f.data);
    kvs_wmat q = kt_rand_wmat(KVS_TYPE_Q4_1, 4, 64);
    CHECK_EQ_INT(kvs_wmat_pack(&q, 1), 0);
    const void *p = q.packed;
    CHECK(p != NULL);
    CHECK_EQ_INT(kvs_wmat_pack(&q, 1), 0);
    CHECK(q.packed == p);
    kvs_wmat_unpack(&q);
    free((void *)q.data);
}

/* Packing into caller memory (the model's arena, model/weights.c): the
 * size kvs_wmat_pack would allocate, the same bytes at any 64-byte offset,
 * the same matmul bits; nothing to pack for float weights. */
TEST(test_pack_to_arena) {
    /* float weights: no packed layout; on the SIMD paths a plain copy in the
     * arena, read in place of the mapping, with the same bits */
    kvs_wmat f = kt_rand_wmat(KVS_TYPE_F16, 45, 576), fc = f;
    CHECK(kvs_wmat_packed_bytes(&f, 1) == 0);
    const size_t fbytes = kvs_wmat_arena_bytes(&f);
    const char *env = getenv("KVS_PACK");
    const int simd_path = kvs_kernels_cpu_level() >= 1 && kvs_kernels_simd_allowed() && !(env && !strcmp(env, "0"));
    CHECK(fbytes == (simd_path ? f.row_bytes * 45 : 0));
    if (fbytes) {
        uint8_t *copy = aligned_alloc(64, (fbytes + 63) & ~(size_t)63); /* (a multiple of the alignment) */
        CHECK(copy != NULL);
        kvs_wmat_arena_place(&fc, copy);
        CHECK(fc.data == copy && fc.packed == NULL && memcmp(fc.data, f.data, fbytes) == 0);
        float x[576], y0[45], y1[45];
        kt_rand_vec(x, 576, 2.0f);
        mm("best", NULL, &f, x, 1, y0);
        mm("best", NULL, &fc, x, 1, y1);
        CHECK(first_diff(y0, y1, 45) < 0);
        free(copy);
    }
    free((void *)f.data);
    const int k = 576, n = 45; /* 5 whole tiles and 5 rows past them, 2 tail blocks */
    for (size_t t = 0; t < sizeof(qtypes) / sizeof(qtypes[0]); t++) {
        kvs_wmat alone = kt_rand_wmat(qtypes[t], n, k), in_arena = alone;
        /* the model's arena packs quantized matrices where a path reads
         * them: every type on the AVX2 and AVX-512 paths */
        CHECK(kvs_wmat_arena_bytes(&alone) == (simd_path ? alone.row_bytes * (size_t)n : 0));
        const size_t bytes = kvs_wmat_packed_bytes(&alone, 1);
        CHECK(bytes == alone.row_bytes * (size_t)n);
        CHECK_EQ_INT(kvs_wmat_pack(&alone, 1), 0);
        uint8_t *arena = aligned_alloc(64, (bytes + 64 + 63) & ~(size_t)63);
        CHECK(arena != NULL);
        kvs_wmat_pack_to(&in_arena, arena + 64);
        CHECK(in_arena.packed == arena + 64);
        CHECK(memcmp(in_arena.packed, alone.packed, bytes) == 0);
        float x[576], y0[45], y1[45];
        kt_rand_vec(x, (size_t)k, 2.0f);
        mm("best", NULL, &alone, x, 1, y0);
        mm("best", NULL, &in_arena, x, 1, y1);
        CHECK_MSG(first_diff(y0, y1, n) < 0, "type %d: arena-packed matmul differs", qtypes[t]);
        in_arena.packed = NULL;
        free(arena);
        kvs_wmat_unpack(&alone);
        free((void *)alone.data);
    }
}

/* Where AMX is on, the model's arena also holds a plain copy of the GGUF
 * rows its batch paths stream (Q4_K; Q8_0, Q4_0, Q4_1 and Q5_0 as their
 * tiles, which their prefill reads too: every type of the AMX prefill path;
 * kvs_wmat_rows_copy_bytes): the same bytes, read in place of the mapping by
 * a batch of 8 rows with the same bits; only
 * then, or without AMX, do the source pages of an AMX type go back
 * (kvs_wmat_arena_replaces_source). */
TEST(test_rows_copy_for_amx_batches) {
    const char *env = getenv("KVS_PACK");
    const int simd = kvs_kernels_cpu_level() >= 2 && kvs_kernels_simd_allowed() && !(env && !strcmp(env, "0"));
    const int amx = kvs_kernels_amx() && simd;
    const int n = 40, k = 768, m = 8;
    enum { NT = 5 };
    kvs_wmat batch[NT] = {kt_rand_wmat(KVS_TYPE_Q8_0, n, k), kt_rand_wmat(KVS_TYPE_Q4_0, n, k),
                          kt_rand_wmat(KVS_TYPE_Q4_1, n, k), kt_rand_wmat(KVS_TYPE_Q5_0, n, k),
                          kt_rand_wmat(KVS_TYPE_Q4_K, n, k)};
    kvs_wmat f16 = kt_rand_wmat(KVS_TYPE_F16, n, k);
    CHECK(kvs_wmat_rows_copy_bytes(&f16) == 0);
    CHECK_EQ_INT(kvs_wmat_arena_replaces_source(&f16), simd);
    for (int t = 0; t < NT; t++) {
        const kvs_wmat *w = &batch[t];
        /* Q8_0, Q4_0, Q4_1, Q5_0: their tiles instead (kvs_wmat_tiles_to), whole panels of 16 rows */
        const int tiled = w->type == KVS_TYPE_Q8_0 || w->type == KVS_TYPE_Q4_0 || w->type == KVS_TYPE_Q4_1 ||
                          w->type == KVS_TYPE_Q5_0;
        const size_t bytes = tiled ? kvs_wmat_tiles_bytes(w) : w->row_bytes * (size_t)n;
        CHECK_EQ_INT(kvs_wmat_tiles_bytes(w) != 0, tiled);
        CHECK(!tiled || bytes == (size_t)(n + 15) / 16 * 16 * w->row_bytes);
        CHECK(kvs_wmat_rows_copy_bytes(w) == (amx ? bytes : 0));
        CHECK_EQ_INT(kvs_wmat_arena_replaces_source(w), simd);
        if (!amx) continue;
        kvs_wmat copied = *w;
        uint8_t *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        CHECK(dst != NULL);
        kvs_wmat_rows_copy_place(&copied, dst);
        if (tiled) CHECK(copied.tiles == dst && copied.data == w->data);
        else CHECK(copied.data == dst && memcmp(dst, w->data, bytes) == 0);
        float *x = xmalloc(sizeof(float) * m * k), y0[8 * 40], y1[8 * 40]; /* m * n */
        kt_rand_vec(x, (size_t)m * k, 2.0f);
        mm("best", NULL, w, x, m, y0);
        mm("best", NULL, &copied, x, m, y1);
        CHECK_MSG(first_diff(y0, y1, m * n) < 0, "type %d: the copied rows give other bits", w->type);
        free(x);
        free(dst);
    }
    for (int t = 0; t < NT; t++) free((void *)batch[t].data);
    free((void *)f16.data);
}

/* far_rows (kvs_far_prefetch_rows): off for weights the last-level cache
 * holds, forced by KVS_FAR_PREFETCH; a prefetch only, so every path gives
 * the same bits with it, quantized (packed or not) and float weights, at
 * m = 1 (decode), 4 and 8 (batches of streams), the rows ahead past the
 * matrix's end included. */
TEST(test_far_prefetch) {
    const char *saved = getenv("KVS_FAR_PREFETCH");
    char *keep = saved ? strdup(saved) : NULL;
    unsetenv("KVS_FAR_PREFETCH");
    CHECK_EQ_INT(kvs_far_prefetch_rows(NULL, 0), 0);
    uint8_t *mib = xmalloc(1 << 20);
    memset(mib, 1, 1 << 20);
    const kvs_mem_span one_mib = {mib, 1 << 20};
    CHECK_EQ_INT(kvs_far_prefetch_rows(&one_mib, 1), 0); /* 1 MiB: any last-level cache holds most of it */
    /* 8 MiB in 4 spans: the probe's second pass finds it in the caches (its
     * own reference re-read is the whole of it, so the two rates differ
     * only by noise). A timing, so a busy host can lose a try to a
     * preemption in the one timed pass (the CI run of session 48 failed on one):
     * cached in at least one of 5 tries; a probe that never says so fails. */
    kvs_mem_span quarters[4];
    uint8_t *eight = xmalloc((size_t)8 << 20);
    memset(eight, 2, (size_t)8 << 20);
    for (int i = 0; i < 4; i++) quarters[i] = (kvs_mem_span){eight + ((size_t)i << 21), (size_t)2 << 20};
    int cached = 0;
    for (int try = 0; try < 5 && !cached; try++) cached = kvs_spans_stay_cached(quarters, 4);
    CHECK_EQ_INT(cached, 1);
    CHECK_EQ_INT(kvs_spans_stay_cached(quarters, 0), 1);
    free(eight);
    setenv("KVS_FAR_PREFETCH", "1", 1);
    const int far = kvs_far_prefetch_rows(&one_mib, 1);
    CHECK(far > 0);
    setenv("KVS_FAR_PREFETCH", "0", 1);
    const kvs_mem_span huge = {NULL, (size_t)1 << 40}; /* forced: never read */
    CHECK_EQ_INT(kvs_far_prefetch_rows(&huge, 1), 0);
    free(mib);
    if (keep) setenv("KVS_FAR_PREFETCH", keep, 1);
    else unsetenv("KVS_FAR_PREFETCH");
    free(keep);

    const int n = 100, k = 640, ms[] = {1, 4, 8};
    float *x = xmalloc(sizeof(float) * 8 * k), *y0 = xmalloc(sizeof(float) * 8 * n), *y1 = xmalloc(sizeof(float) * 8 * n);
    kt_rand_vec(x, (size_t)8 * k, 2.0f);
    const int types[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0, KVS_TYPE_F16, KVS_TYPE_F32, KVS_TYPE_BF16};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (int packed = 0; packed < 2; packed++) {
            kvs_wmat w = kt_rand_wmat(types[t], n, k);
            if (packed) CHECK_EQ_INT(kvs_wmat_pack(&w, 1), 0); /* (float weights: nothing to pack) */
            for (int mi = 0; mi < 3; mi++) {
                w.far_rows = 0;
                mm("best", NULL, &w, x, ms[mi], y0);
                w.far_rows = far;
                mm("best", NULL, &w, x, ms[mi], y1);
                CHECK_MSG(first_diff(y0, y1, ms[mi] * n) < 0, "type %d packed %d m=%d: far prefetch changed bits",
                          types[t], packed, ms[mi]);
            }
            kvs_wmat_unpack(&w);
            free((void *)w.data);
        }
    free(x); free(y0); free(y1);
}

int main(void) {
    RUN(test_packed_equals_scalar);
    RUN(test_batched_rows_equal_m1);
    RUN(test_packed_edges);
    RUN(test_pack_scope);
    RUN(test_pack_to_arena);
    RUN(test_rows_copy_for_amx_batches);
    RUN(test_far_prefetch);
    return kt_summary();
}
