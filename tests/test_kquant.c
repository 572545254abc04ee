/*
 * Q5_0 / Q5_1 / K-quant kernels (src/kernels/kquant.h):
 *  - dequantization equals the PyPI gguf package's (gguf.quants.dequantize,
 *    the reference of the GGUF block layouts) on random blocks;
 *  - every ISA path of the matmul is memcmp-equal to the scalar reference,
 *    for row counts 1..37 and k with and without a multiple of 16 blocks;
 *  - the matmul is within the activation quantization's error bound of a
 *    float64 dot of the dequantized weights;
 *  - a row's bits do not depend on the other rows of the call or the
 *    thread count (batch invariance);
 *  - every SIMD quantizer of activation rows (K-quant and Q4 / Q8 layouts)
 *    writes the reference's bytes, for hand-placed and random hostile rows.
 */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "kernels/kernels_impl.h"
#include "kernels/kquant.h"
#include "test_kernels_util.h"

static const int k_types[] = {KVS_TYPE_Q5_0, KVS_TYPE_Q5_1, KVS_TYPE_Q4_K, KVS_TYPE_Q5_K, KVS_TYPE_Q6_K};

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* Weights of a kquant type: every byte fill (-1: random) but sane f16 scales. */
static kvs_wmat kq_weights(int type, int n, int k, int fill) {
    const kvs_type_traits *tr = kvs_type_traits_of(type);
    kvs_wmat w = {.type = type, .n = n, .k = k, .row_bytes = kvs_type_row_bytes(type, k)};
    size_t bytes = w.row_bytes * (size_t)n;
    uint8_t *p = xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) p[i] = fill < 0 ? (uint8_t)kt_rand() : (uint8_t)fill;
    for (size_t b = 0; b < bytes / (size_t)tr->type_size; b++) {
        uint8_t *blk = p + b * (size_t)tr->type_size;
        uint16_t d = kvs_f32_to_f16(0.0005f + 0.01f * (kt_randf() + 1.0f));
        uint16_t m = kvs_f32_to_f16(0.002f * kt_randf());
        switch (type) {
        case KVS_TYPE_Q5_0: memcpy(blk, &d, 2); break;
        case KVS_TYPE_Q5_1: memcpy(blk, &d, 2); memcpy(blk + 2, &m, 2); break;
        case KVS_TYPE_Q4_K: case KVS_TYPE_Q5_K: {
            uint16_t dmin = kvs_f32_to_f16(0.0002f + 0.001f * (kt_randf() + 1.0f));
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
            break;
        }
        case KVS_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        }
    }
    w.data = p;
    return w;
}
/* Random weights of a kquant type: random bytes with sane f16 scales. */
static kvs_wmat rand_kq(int type, int n, int k) { return kq_weights(type, n, k, -1); }

static const char *venv_python(void) {
    static char path[1024];
    if (path[0]) return path;
    FILE *f = popen("scripts/setup-venv.sh 2>/dev/null | tail -n 1", "r");
    if (!f) return NULL;
    if (!fgets(path, sizeof path, f)) path[0] = 0;
    pclose(f);
    path[strcspn(path, "\n")] = 0;
    return path[0] ? path : NULL;
}

/* gguf.quants.dequantize of the rows of w, as float32 (n * k). */
static float *gguf_dequant(const kvs_wmat *w) {
    const char *py = venv_python();
    if (!py) return NULL;
    char in[] = "/tmp/kvs_kq_XXXXXX";
    int fd = mkstemp(in);
    if (fd < 0) return NULL;
    size_t bytes = w->row_bytes * (size_t)w->n, nf = (size_t)w->n * w->k;
    int ok = write(fd, w->data, bytes) == (ssize_t)bytes;
    close(fd);
    char out[64], cmd[2048];
    snprintf(out, sizeof out, "%s.f32", in);
    snprintf(cmd, sizeof cmd,
             "%s -c 'import sys, numpy as np; from gguf.quants import dequantize; from gguf import GGMLQuantizationType as T; "
             "raw = np.fromfile(sys.argv[1], dtype=np.uint8).reshape(%d, -1); "
             "dequantize(raw, T(%d)).astype(np.float32).tofile(sys.argv[2])' %s %s",
             py, w->n, w->type, in, out);
    float *res = NULL;
    if (ok && system(cmd) == 0) {
        FILE *f = fopen(out, "rb");
        res = xmalloc(nf * 4);
        if (!f || fread(res, 4, nf, f) != nf) { free(res); res = NULL; }
        if (f) fclose(f);
    }
    unlink(in);
    unlink(out);
    return res;
}

TEST(test_kq_dequant_matches_gguf) {
    for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++) {
        kvs_wmat w = rand_kq(k_types[t], 8, 512);
        float *ref = gguf_dequant(&w);
        CHECK_MSG(ref != NULL, "type %s: the gguf package could not dequantize (scripts/setup-venv.sh)",
                  kvs_type_traits_of(w.type)->name);
        if (ref) {
            float *got = xmalloc((size_t)w.k * 4);
            double worst = 0;
            for (int j = 0; j < w.n; j++) {
                kvs_dequantize_row(w.type, (const uint8_t *)w.data + (size_t)j * w.row_bytes, got, w.k);
                for (int e = 0; e < w.k; e++) {
                    double r = ref[(size_t)j * w.k + e], err = fabs(got[e] - r) / (fabs(r) + 1e-3);
                    if (err > worst) worst = err;
                }
            }
            /* the formulas differ only by one fused rounding: ~1 float ulp */
            CHECK_MSG(worst < 1e-6, "type %s: max rel error %g vs gguf", kvs_type_traits_of(w.type)->name, worst);
            free(got);
            free(ref);
        }
        free((void *)w.data);
    }
}

static float *matmul(const kvs_wmat *w, const float *x, int m, kvs_pool *pool) {
    float *y = xmalloc((size_t)m * w->n * 4);
    void *work = xmalloc(kvs_matmul_work_size(w, m));
    kvs_matmul(pool, w, x, m, y, work);
    free(work);
    return y;
}

TEST(test_kq_simd_equals_scalar) {
    /* 96, 576, 640: 3, 18 and 20 blocks, a partial last octet of <= 4 blocks (the batch path merges two rows' into
     * one, kquant_avx2_batch.c merge_tails; 576: SmolLM2's Q5_0 rows in a Q4_K_M file); 192: 6 blocks, a partial
     * octet of more; 288, 416, 800: the partial octet odd (chains 8-15) (Q5_0 / Q5_1 only: K-quants need 256); on
     * AVX-512 (groups of 16 blocks) 96, 576 and 640 end in a group of <= 4 blocks (four weight rows share it), 192
     * and 256 <= 8 (two), 288, 416, 800 more, 1280 two full groups and 8 blocks; 8192, 10240, 16384: several groups
     * of tiles per chunk, 16384 the longest rows of the batch path (MAX_OCTETS); 32768, 33024: longer, several rows
     * go through decode row by row (kq_lanes). 45..48 weight rows, turning over independently of k: the batch path's
     * tiles of four, the last with 1, 2, 3 or 4 rows of its own (the others repeat a row, computed and not stored) */
    const int ks[] = {96, 192, 256, 288, 416, 576, 640, 800, 1280, 2048, 8192, 10240, 16384, 32768, 33024};
    const int ns[] = {45, 46, 47, 48};
    const int ms[] = {1, 3, 16, 37};
    int compared = 0;
    for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            if (ks[ki] % 256 && !(k_types[t] == KVS_TYPE_Q5_0 || k_types[t] == KVS_TYPE_Q5_1)) continue;
            kvs_wmat w = rand_kq(k_types[t], ns[(t + ki) % 4], ks[ki]);
            for (size_t mi = 0; mi < 4; mi++) {
                if (w.k > 8192 && ms[mi] > 3) continue; /* long rows: one and three rows suffice */
                float *x = xmalloc((size_t)ms[mi] * w.k * 4);
                kt_rand_vec(x, (size_t)ms[mi] * w.k, 3.0f);
                kvs_kernels_set_isa("scalar");
                float *ref = matmul(&w, x, ms[mi], NULL);
                const char *isas[] = {"avx2", "avx512vnni"};
                for (int a = 0; a < 2; a++) {
                    if (kvs_kernels_set_isa(isas[a]) != 0) continue;
                    float *got = matmul(&w, x, ms[mi], NULL);
                    CHECK_MSG(memcmp(ref, got, (size_t)ms[mi] * w.n * 4) == 0, "%s k %d m %d: %s differs",
                              kvs_type_traits_of(w.type)->name, w.k, ms[mi], isas[a]);
                    compared++;
                    free(got);
                    kvs_wmat wp = w; /* Q5_0 / Q5_1: the repacked rows too (pack.c) */
                    CHECK_EQ_INT(kvs_wmat_pack(&wp, 1), 0);
                    if (wp.packed) {
                        got = matmul(&wp, x, ms[mi], NULL);
                        CHECK_MSG(memcmp(ref, got, (size_t)ms[mi] * w.n * 4) == 0, "%s k %d m %d: %s packed differs",
                                  kvs_type_traits_of(w.type)->name, w.k, ms[mi], isas[a]);
                        compared++;
                        free(got);
                        kvs_wmat_unpack(&wp);
                    }
                }
                kvs_kernels_set_isa("best");
                free(ref);
                free(x);
            }
            free((void *)w.data);
        }
    printf("  %d ISA comparisons\n", compared);
}

/* |y - w.x| <= sum over blocks of |w|_1 * d_x / 256 (the activation error)
 * plus float rounding: checked against float64 of the dequantized weights. */
TEST(test_kq_vs_double) {
    for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++) {
        kvs_wmat w = rand_kq(k_types[t], 16, 1024);
        float *x = xmalloc((size_t)w.k * 4), *wr = xmalloc((size_t)w.k * 4);
        kt_rand_vec(x, w.k, 2.0f);
        float *y = matmul(&w, x, 1, NULL);
        double worst = 0;
        for (int j = 0; j < w.n; j++) {
            kvs_dequantize_row(w.type, (const uint8_t *)w.data + (size_t)j * w.row_bytes, wr, w.k);
            double ref = 0, bound = 0;
            for (int b = 0; b < w.k / 32; b++) {
                double amax = 0, l1 = 0;
                for (int e = 0; e < 32; e++) {
                    ref += (double)wr[b * 32 + e] * x[b * 32 + e];
                    amax = fmax(amax, fabs(x[b * 32 + e]));
                    l1 += fabs(wr[b * 32 + e]);
                }
                bound += l1 * amax / 127.0 / 256.0 * 0.5;
            }
            double excess = fabs(y[j] - ref) - bound - 1e-5 * fabs(ref) - 1e-6;
            if (excess > worst) worst = excess;
        }
        CHECK_MSG(worst <= 0, "type %s: error exceeds the bound by %g", kvs_type_traits_of(w.type)->name, worst);
        free(x);
        free(wr);
        free(y);
        free((void *)w.data);
    }
}

/* A row of a call of m rows on a pool = the row alone. m = 70 on 2
 * threads and 97 on 3 take a row block a thread (kquant.c kq_rows, or
 * dispatch.c mm_rows where AMX takes the type): blocks of 35, and 33, 33,
 * 31 rows. */
TEST(test_kq_batch_invariant) {
    kvs_pool *pools[3] = {kvs_pool_new(2), kvs_pool_new(2), kvs_pool_new(3)};
    const int ms[3] = {21, 70, 97};
    for (int c = 0; c < 3; c++) {
        CHECK(pools[c] != NULL);
        for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++) {
            kvs_wmat w = rand_kq(k_types[t], 80, 512);
            const int m = ms[c];
            float *x = xmalloc((size_t)m * w.k * 4);
            kt_rand_vec(x, (size_t)m * w.k, 1.0f);
            float *all = matmul(&w, x, m, pools[c]);
            for (int i = 0; i < m; i += 3) {
                float *one = matmul(&w, x + (size_t)i * w.k, 1, NULL);
                CHECK_MSG(memcmp(one, all + (size_t)i * w.n, (size_t)w.n * 4) == 0, "%s m %d on %d threads: row %d",
                          kvs_type_traits_of(w.type)->name, m, kvs_pool_size(pools[c]), i);
                free(one);
            }
            free(all);
            free(x);
            free((void *)w.data);
        }
        kvs_pool_free(pools[c]);
    }
}

/* kvs_matmul_multi on Q5 / K-quant matrices of one k (q / k / v, gate /
 * up: the activations quantized once, kvs_kq_matmul_multi) gives the bytes
 * of separate calls, also for mixed types. */
TEST(test_kq_multi_equals_separate) {
    kvs_pool *pool = kvs_pool_new(2);
    CHECK(pool != NULL);
    const int m_list[] = {1, 3, 37};
    int compared = 0;
    for (int mixed = 0; mixed <= 1; mixed++)
        for (size_t mi = 0; mi < 3; mi++) {
            const int m = m_list[mi], k = 512;
            kvs_wmat wq = rand_kq(KVS_TYPE_Q5_0, 96, k);
            kvs_wmat wk = rand_kq(mixed ? KVS_TYPE_Q4_K : KVS_TYPE_Q5_0, 33, k);
            kvs_wmat wv = rand_kq(mixed ? KVS_TYPE_Q6_K : KVS_TYPE_Q5_0, 50, k);
            const kvs_wmat *ws[3] = {&wq, &wk, &wv};
            float *x = xmalloc((size_t)m * k * 4);
            kt_rand_vec(x, (size_t)m * k, 2.0f);
            void *work = xmalloc(kvs_matmul_multi_work_size(3, ws, m));
            float *sep[3], *got[3];
            for (int i = 0; i < 3; i++) {
                sep[i] = matmul(ws[i], x, m, pool);
                got[i] = xmalloc((size_t)m * ws[i]->n * 4);
                memset(got[i], 0xff, (size_t)m * ws[i]->n * 4);
            }
            kvs_matmul_multi(pool, 3, ws, x, m, got, work);
            for (int i = 0; i < 3; i++) {
                CHECK_MSG(memcmp(sep[i], got[i], (size_t)m * ws[i]->n * 4) == 0, "mixed %d m %d matrix %d", mixed, m, i);
                compared++;
                free(sep[i]);
                free(got[i]);
                free((void *)ws[i]->data);
            }
            free(work);
            free(x);
        }
    kvs_pool_free(pool);
    printf("  %d matrices compared\n", compared);
}

/* The integer extremes: every weight integer at its type's maximum (all
 * bytes 0xff: 31 for Q5_0, 63 for Q6_K) against activations at +-127 on the
 * hi plane and large lo values. The SIMD paths add vpmaddubsw products in
 * int16 as long as they cannot overflow (kquant_avx2_batch.c tile_sums): one
 * step more and these sums wrap. */
TEST(test_kq_integer_extremes) {
    int compared = 0;
    for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++) {
        kvs_wmat w = kq_weights(k_types[t], 8, 512, 0xff);
        const int m = 6;
        float *x = xmalloc((size_t)m * w.k * 4);
        for (int i = 0; i < m; i++) /* 127 d once per block, the rest 126.4 d (hi 126, lo 102), signs by row */
            for (int e = 0; e < w.k; e++) x[(size_t)i * w.k + e] = (i % 2 ? -1.0f : 1.0f) * (e % 32 ? 126.4f : 127.0f);
        kvs_kernels_set_isa("scalar");
        float *ref = matmul(&w, x, m, NULL);
        const char *isas[] = {"avx2", "avx512vnni"};
        for (int a = 0; a < 2; a++) {
            if (kvs_kernels_set_isa(isas[a]) != 0) continue;
            for (int mm = 1; mm <= m; mm += m - 1) { /* decode (one row) and batch */
                float *got = matmul(&w, x, mm, NULL);
                CHECK_MSG(memcmp(ref, got, (size_t)mm * w.n * 4) == 0, "%s m %d: %s differs",
                          kvs_type_traits_of(w.type)->name, mm, isas[a]);
                compared++;
                free(got);
            }
        }
        kvs_kernels_set_isa("best");
        free(ref);
        free(x);
        free((void *)w.data);
    }
    printf("  %d ISA comparisons\n", compared);
}

#if defined(__x86_64__)
/* An ISA's quantized rows for a call of two rows (b) against the
 * reference's (a, natural order): the lane layout of `lanes` blocks a group
 * (group g, plane p, vector r, lane l = block g * lanes + l, elements
 * 4r..4r+3), the same integers, scales and sums. On AVX2 (8 lanes) a last
 * group of cnt <= 4 blocks has lane l hold lane l % 4, integers and
 * trailer, for the kernels that share it between two weight rows; other
 * lanes past the row are zero (AVX-512's 16 lanes: all of them). */
static void lane_layout_check(kvs_kq_isa isa, int lanes, const float *x, int k, const uint8_t *a, uint8_t *b,
                              int variant) {
    const size_t bytes = kvs_kq_xrow_bytes(k);
    memset(b, 0x55, bytes);
    isa.quantize_row(x, k, b, 2);
    const kvs_kq_trailer ta = kvs_kq_trailer_of(a, k), tb = kvs_kq_trailer_of(b, k);
    const int nb = k / 32;
    int lane_bad = 0, trailer_bad = 0, zero_bad = 0;
    for (int blk = 0; blk < (nb + lanes - 1) / lanes * lanes; blk++) {
        const int g0 = blk - blk % lanes, cnt = nb - g0 < lanes ? nb - g0 : lanes;
        const int span = lanes == 8 && cnt <= 4 ? 4 : lanes;
        const int src = (blk - g0) % span < cnt ? g0 + (blk - g0) % span : -1;
        for (int p = 0; p < 2; p++)
            for (int e = 0; e < 32; e++) {
                const size_t at = (size_t)g0 * 64 + (size_t)p * 32 * lanes + (size_t)(e / 4) * 4 * lanes +
                                  (size_t)(blk - g0) * 4 + e % 4;
                lane_bad += src >= 0 ? a[(size_t)src * 64 + p * 32 + e] != b[at] : b[at] != 0;
            }
        if (src < 0) {
            zero_bad += tb.dx[blk] != 0 || tb.sx[blk] != 0 || tb.s0[blk] != 0 || tb.s1[blk] != 0;
            continue;
        }
        trailer_bad += memcmp(&ta.dx[src], &tb.dx[blk], 4) || memcmp(&ta.sx[src], &tb.sx[blk], 4) ||
                       ta.s0[src] != tb.s0[blk] || ta.s1[src] != tb.s1[blk];
    }
    CHECK_MSG(lane_bad == 0 && trailer_bad == 0 && zero_bad == 0,
              "variant %d, k %d, %s: lane layout differs (%d integers, %d blocks' sums, %d padding lanes)", variant, k,
              isa.name, lane_bad, trailer_bad, zero_bad);
}
#endif

#if defined(__x86_64__)
/* AVX-512's decode layout (one row, or rows too long for its batch path):
 * per octet 4 pairs of blocks (0, 2), (1, 3), (4, 6), (5, 7), each a hi
 * vector (block a's 32 bytes, then b's) and a lo vector; the trailer as
 * the reference's; blocks past the row zero. */
static void pairs_layout_check(const float *x, int k, const uint8_t *a, uint8_t *b, int m, int variant) {
    const size_t bytes = kvs_kq_xrow_bytes(k);
    memset(b, 0x55, bytes);
    kvs_kq_isa_avx512.quantize_row(x, k, b, m);
    const int nb = k / 32, nbp = kvs_kq_nbp(k);
    int bad = 0;
    for (int blk = 0; blk < nbp; blk++) {
        const int l = blk % 8;
        const size_t at = (size_t)(blk / 8) * 512 + (size_t)(128 * ((l / 4) * 2 + l % 2) + 32 * ((l / 2) % 2));
        for (int p = 0; p < 2; p++)
            for (int e = 0; e < 32; e++)
                bad += b[at + (size_t)p * 64 + e] != (blk < nb ? a[(size_t)blk * 64 + p * 32 + e] : 0);
    }
    const size_t tail = (size_t)nbp * 64; /* the trailer: the reference's bytes */
    CHECK_MSG(bad == 0 && memcmp(a + tail, b + tail, bytes - tail) == 0,
              "variant %d, k %d, m %d: avx512vnni's decode layout differs (%d integers, trailer %s)", variant, k, m, bad,
              memcmp(a + tail, b + tail, bytes - tail) ? "differs" : "equal");
}
#endif

#if defined(__x86_64__)
/* Row x (k elements) through every SIMD quantizer against the reference:
 * the K-quant row (natural order, AVX2's 8 and AVX-512's 16 lanes,
 * AVX-512's decode pairs) and the Q4_0 / Q4_1 / Q8_0 layout (quant.h:
 * groups, tail quads; AVX2 and AVX-512). a, b: kvs_kq_xrow_bytes(k) bytes
 * of scratch. Returns the rows compared. */
static int quantizers_check(const float *x, int k, uint8_t *a, uint8_t *b, int variant) {
    const size_t bytes = kvs_kq_xrow_bytes(k);
    int rows = 0;
    memset(a, 0xaa, bytes);
    memset(b, 0x55, bytes);
    kvs_kq_isa_scalar.quantize_row(x, k, a, 1);
    kvs_kq_isa_avx2.quantize_row(x, k, b, 1);
    size_t bad = 0;
    while (bad < bytes && a[bad] == b[bad]) bad++;
    CHECK_MSG(bad == bytes, "variant %d, k %d: quantized rows differ at byte %zu of %zu", variant, k, bad, bytes);
    rows++;
    /* a call of several rows: the lane layouts (AVX2: 8 blocks a group, AVX-512: 16) */
    lane_layout_check(kvs_kq_isa_avx2, 8, x, k, a, b, variant);
    rows++;
    if (kvs_kernels_cpu_level() >= 2) {
        lane_layout_check(kvs_kq_isa_avx512, 16, x, k, a, b, variant);
        pairs_layout_check(x, k, a, b, 1, variant);
        rows += 2;
    }
    /* the same row in the Q4_0 / Q4_1 / Q8_0 layout (quant.h: groups, tail quads) */
    const int wtypes[] = {KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0};
    for (int t = 0; t < 3; t++) {
        kvs_wmat w = {.type = wtypes[t], .n = 1, .k = k};
        const size_t xb = kvs_xq_bytes(k, 1);
        uint8_t *qa = xmalloc(xb), *qb = xmalloc(xb);
        memset(qa, 0, xb);
        memset(qb, 0, xb);
        kvs_mm_call ca = {.w = &w, .x = x, .m = 1, .xq = qa, .xq_row = kvs_xq_row_bytes(k),
                          .xq_tail = qa + kvs_xq_row_bytes(k), .xq_quad = kvs_xq_quad_bytes(k)};
        kvs_mm_call cb = ca;
        cb.xq = qb;
        cb.xq_tail = qb + kvs_xq_row_bytes(k);
        kvs_isa_scalar.quantize_rows(&ca, 0, 1);
        kvs_isa_avx2.quantize_rows(&cb, 0, 1);
        CHECK_MSG(memcmp(qa, qb, xb) == 0, "variant %d, k %d, %s layout: quantized rows differ", variant, k,
                  kvs_type_traits_of(wtypes[t])->name);
        if (kvs_kernels_cpu_level() >= 2) { /* AVX-512's whole groups at once (quantize_group_planes) */
            memset(qb, 0, xb);
            kvs_isa_avx512.quantize_rows(&cb, 0, 1);
            CHECK_MSG(memcmp(qa, qb, xb) == 0, "variant %d, k %d, %s layout: AVX-512 quantized rows differ", variant,
                      k, kvs_type_traits_of(wtypes[t])->name);
        }
        free(qa);
        free(qb);
        rows++;
    }
    return rows;
}
#endif

/* The SIMD quantizers of activation rows write the reference's bytes (the
 * K-quant row and the Q4 / Q8 layout), also
 * for hostile rows: NaN, infinities, huge and subnormal values, all-zero
 * blocks, exact rounding ties (v * 256 on .5), a partial last octet. */
TEST(test_quantize_rows_simd_equals_scalar) {
#if defined(__x86_64__)
    if (kvs_kernels_cpu_level() < 1) {
        printf("  (skip: no AVX2 on this CPU)\n");
        return;
    }
    const int k = 640; /* 20 blocks: nbp 32, padding past nb; a last group of 4 blocks */
    const size_t bytes = kvs_kq_xrow_bytes(k);
    float *x = xmalloc((size_t)k * 4);
    uint8_t *a = xmalloc(bytes), *b = xmalloc(bytes);
    int rows = 0;
    for (int variant = 0; variant < 10; variant++) {
        kt_rand_vec(x, (size_t)k, 3.0f);
        switch (variant) {
        case 1: for (int e = 32; e < 64; e++) x[e] = 0.0f; break;
        case 2: /* a NaN at every position of a block (each lane of the max reduction) */
            for (int q = 0; q < 20; q++) x[32 * q + q] = q % 2 ? NAN : -NAN;
            break;
        case 8:
            for (int q = 0; q < 20; q++) x[32 * q + 12 + q] = NAN;
            break;
        case 9: /* a NaN in every lane of a block's second half, beside a maximum in its first: vmaxps
                 * returns its second operand where either is NaN (the AVX-512 paths had lost the
                 * maximum or made amax NaN) */
            for (int q = 0; q < 20; q++) {
                x[32 * q + q % 16] = 9.0f;
                x[32 * q + 16 + q % 16] = NAN;
            }
            break;
        case 3: x[40] = INFINITY; x[41] = -INFINITY; x[300] = INFINITY; break;
        case 4: for (int e = 0; e < k; e += 3) x[e] = 3e38f * (e % 2 ? -1.0f : 1.0f); break;
        case 5: for (int e = 0; e < k; e++) x[e] *= 1e-39f; break; /* subnormal, below FLT_MIN scales */
        case 6: for (int e = 0; e < k; e++) x[e] = (float)(e % 255 - 127) / 2.0f; break; /* ties */
        case 7: for (int e = 0; e < k; e++) x[e] = (float)((e * 37) % 513 - 256) / 512.0f; break;
        }
        rows += quantizers_check(x, k, a, b, variant);
    }
    /* the lane layouts' other last groups: 3 blocks (no full group), 6 (<= 8), 9 and 25 (more) */
    const int ks[] = {96, 192, 288, 800};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int kk = ks[ki];
        float *xk = xmalloc((size_t)kk * 4);
        uint8_t *ak = xmalloc(kvs_kq_xrow_bytes(kk)), *bk = xmalloc(kvs_kq_xrow_bytes(kk));
        kt_rand_vec(xk, (size_t)kk, 3.0f);
        rows += quantizers_check(xk, kk, ak, bk, -1);
        free(xk);
        free(ak);
        free(bk);
    }
    printf("  %d hostile rows compared\n", rows);
    free(x);
    free(a);
    free(b);
#endif
}

/* Random hostile rows (fixed seed): values of random magnitude (1e-40 to
 * 1e38, subnormal to near overflow) with NaN (either sign), infinities,
 * zero blocks and exact rounding ties at random places, every SIMD
 * quantizer against the reference (quantizers_check). The hand-placed
 * variants above had missed the AVX-512 maxima's NaN case (abs_or_zero,
 * session 57): without that fix this test fails 153 times. */
TEST(test_quantize_rows_fuzz) {
#if defined(__x86_64__)
    if (kvs_kernels_cpu_level() < 1) {
        printf("  (skip: no AVX2 on this CPU)\n");
        return;
    }
    const int ks[] = {96, 288, 576, 640, 1536};
    const int kmax = 1536;
    float *x = xmalloc((size_t)kmax * 4);
    uint8_t *a = xmalloc(kvs_kq_xrow_bytes(kmax)), *b = xmalloc(kvs_kq_xrow_bytes(kmax));
    int rows = 0;
    for (int trial = 0; trial < 200; trial++) {
        const int k = ks[kt_rand() % (sizeof ks / sizeof ks[0])];
        const float scale = powf(10.0f, (float)((int)(kt_rand() % 79) - 40));
        kt_rand_vec(x, (size_t)k, scale);
        const int specials = (int)(kt_rand() % 24);
        for (int s = 0; s < specials; s++) {
            const int e = (int)(kt_rand() % (unsigned)k);
            switch (kt_rand() % 7) {
            case 0: x[e] = NAN; break;
            case 1: x[e] = -NAN; break;
            case 2: x[e] = kt_rand() % 2 ? INFINITY : -INFINITY; break;
            case 3: x[e] = kt_rand() % 2 ? 3.4e38f : -3.4e38f; break;
            case 4: x[e] = 1e-45f * (float)(kt_rand() % 100); break; /* subnormal */
            case 5: memset(x + e / 32 * 32, 0, 32 * sizeof(float)); break; /* a zero block */
            default: x[e] = scale * (float)((int)(kt_rand() % 255) - 127) / 2.0f; break; /* ties */
            }
        }
        rows += quantizers_check(x, k, a, b, 1000 + trial);
    }
    printf("  %d random rows compared\n", rows);
    free(x);
    free(a);
    free(b);
#endif
}

/* Whole matmuls on hostile activation rows (NaN, infinities, 3.4e38 and
 * subnormals among ordinary values; whole blocks of them): every ISA path,
 * one row (decode) and several (the batch paths), packed rows too, gives
 * the scalar reference's bytes, NaN and infinite outputs included, for
 * the K-quant types, Q4_0 / Q4_1 / Q8_0 and the float types. */
TEST(test_matmul_hostile_rows) {
    const int types[] = {KVS_TYPE_Q5_0, KVS_TYPE_Q5_1, KVS_TYPE_Q4_K, KVS_TYPE_Q5_K, KVS_TYPE_Q6_K,
                         KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q8_0, KVS_TYPE_F16,  KVS_TYPE_BF16, KVS_TYPE_F32};
    const int k = 768, m = 6; /* 24 blocks: a full group and a tail of 8 */
    const char *isas[] = {"avx2", "avx512vnni"};
    float *x = xmalloc((size_t)m * k * 4);
    kt_rand_vec(x, (size_t)m * k, 2.0f);
    x[3] = NAN;                                                     /* row 0: one NaN */
    x[(size_t)1 * k + 40] = INFINITY;                               /* row 1: an infinity */
    x[(size_t)2 * k + 17] = 3.4e38f;                                /* row 2: near overflow */
    x[(size_t)2 * k + 600] = -3.4e38f;
    for (int e = 0; e < 32; e++) x[(size_t)3 * k + 64 + e] = NAN;   /* row 3: a block of NaN */
    for (int e = 0; e < k; e += 5) x[(size_t)4 * k + e] = 1e-42f;  /* row 4: subnormals among values */
    x[(size_t)5 * k + 700] = -NAN;                                  /* row 5: in the tail blocks */
    x[(size_t)5 * k + 701] = -INFINITY;
    int compared = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int packed = 0; packed < 2; packed++) {
            kvs_wmat w = kvs_kq_handles(types[t]) ? rand_kq(types[t], 37, k) : kt_rand_wmat(types[t], 37, k);
            if (packed && kvs_wmat_pack(&w, 1) != 0) {
                free((void *)w.data);
                continue;
            }
            kvs_kernels_set_isa("scalar");
            float *ref = matmul(&w, x, m, NULL);
            for (int a = 0; a < 2; a++) {
                if (kvs_kernels_set_isa(isas[a]) != 0) continue;
                for (int mm = 1; mm <= m; mm += m - 1) {
                    float *got = matmul(&w, x, mm, NULL);
                    CHECK_MSG(memcmp(ref, got, (size_t)mm * w.n * 4) == 0, "%s packed %d m %d: %s differs",
                              kvs_type_traits_of(w.type)->name, packed, mm, isas[a]);
                    compared++;
                    free(got);
                }
            }
            kvs_kernels_set_isa("best");
            free(ref);
            kvs_wmat_unpack(&w);
            free((void *)w.data);
        }
    printf("  %d hostile matmuls compared\n", compared);
    free(x);
}

/* Weights that stream from DRAM (kvs_wmat.far_rows: decode also prefetches
 * rows far ahead into L2): a prefetch only, the same bits, packed or not,
 * the rows ahead past the matrix's end included. */
TEST(test_kq_far_prefetch) {
    for (size_t t = 0; t < sizeof k_types / sizeof k_types[0]; t++)
        for (int packed = 0; packed < 2; packed++) {
            kvs_wmat w = rand_kq(k_types[t], 100, 512);
            if (packed) CHECK_EQ_INT(kvs_wmat_pack(&w, 1), 0);
            float *x = xmalloc((size_t)w.k * 4);
            kt_rand_vec(x, w.k, 2.0f);
            float *y0 = matmul(&w, x, 1, NULL);
            w.far_rows = 48;
            float *y1 = matmul(&w, x, 1, NULL);
            CHECK_MSG(memcmp(y0, y1, (size_t)w.n * 4) == 0, "type %s packed %d: far prefetch changed bits",
                      kvs_type_traits_of(w.type)->name, packed);
            free(x); free(y0); free(y1);
            kvs_wmat_unpack(&w);
            free((void *)w.data);
        }
}

int main(void) {
    RUN(test_kq_dequant_matches_gguf);
    RUN(test_kq_simd_equals_scalar);
    RUN(test_kq_vs_double);
    RUN(test_kq_batch_invariant);
    RUN(test_kq_multi_equals_separate);
    RUN(test_kq_integer_extremes);
    RUN(test_quantize_rows_simd_equals_scalar);
    RUN(test_quantize_rows_fuzz);
    RUN(test_matmul_hostile_rows);
    RUN(test_kq_far_prefetch);
    return kt_summary();
}
