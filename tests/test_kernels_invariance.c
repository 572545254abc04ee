/*
 * Batch invariance: the bytes computed for one row never depend on how many
 * rows share the call, where the call starts, the tile a row lands in, or
 * the thread count. Every comparison is memcmp, for every ISA path.
 */
#include "base/threadpool.h"
#include "harness.h"
#include "kernels/kernels_impl.h"
#include "test_kernels_util.h"

static const char *isas[] = {"scalar", "avx2", "avx512vnni", "amx"};
enum { N_ISAS = sizeof isas / sizeof isas[0] };
/* configurations checked per ISA path, over all tests */
static int exercised[N_ISAS];

/* Selects path s; 0 if this CPU lacks it. Counts a use. */
static int use_isa(size_t s) {
    if (kvs_kernels_set_isa(isas[s]) != 0) return 0;
    exercised[s]++;
    return 1;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* rows [i0, i0 + cnt) of x through one matmul call into y (row stride n) */
static void mm_rows(kvs_pool *pool, const kvs_wmat *w, const float *x, int i0, int cnt, float *y) {
    void *work = xmalloc(kvs_matmul_work_size(w, cnt));
    kvs_matmul(pool, w, x + (size_t)i0 * w->k, cnt, y + (size_t)i0 * w->n, work);
    free(work);
}

TEST(test_matmul_invariance) {
    const int types[] = {KVS_TYPE_Q4_1, KVS_TYPE_Q8_0, KVS_TYPE_Q4_0, KVS_TYPE_F16, KVS_TYPE_F32,
                         KVS_TYPE_BF16};
    /* {37, 100}: float types only (k % 16: the masked last chunk) */
    struct { int n, k; } shapes[] = {{576, 576}, {192, 576}, {100, 1536}, {45, 544}, {37, 100}};
    kvs_pool *pools[5] = {NULL};
    for (int t = 2; t <= 4; t++) pools[t] = kvs_pool_new(t);
    const int m = 41;
    int checked = 0;
    for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
        if (!use_isa(s)) continue;
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
            for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
                int n = shapes[si].n, k = shapes[si].k;
                if (s == 0 && n * k > 200000) continue; /* keep the scalar run short */
                if (k % kvs_type_traits_of(types[ti])->block_size) continue;
                kvs_wmat w = kt_rand_wmat(types[ti], n, k);
                float *x = xmalloc(sizeof(float) * m * k);
                kt_rand_vec(x, (size_t)m * k, 2.0f);
                size_t ybytes = sizeof(float) * m * n;
                float *ref = xmalloc(ybytes), *y = xmalloc(ybytes);
                mm_rows(NULL, &w, x, 0, m, ref);

                /* one row at a time (decode); float weights on AVX-512 both
                 * ways (distant row pairs, 4-row tiles), whichever the CPU
                 * takes by default */
                for (int pairs = 0; pairs <= 1; pairs++) {
                    kvs_kernels_set_f_decode_pairs(pairs);
                    memset(y, 0xff, ybytes);
                    for (int i = 0; i < m; i++) mm_rows(NULL, &w, x, i, 1, y);
                    CHECK_MSG(memcmp(ref, y, ybytes) == 0, "%s type %d %dx%d: m=1 differs (f pairs %d)", isas[s],
                              types[ti], n, k, pairs);
                }
                kvs_kernels_set_f_decode_pairs(-1);

                /* every call size 1..13 from row 0 (few_rows and many_rows
                 * have a copy per row count) */
                for (int cnt = 1; cnt <= 13; cnt++) {
                    memset(y, 0xff, ybytes);
                    mm_rows(NULL, &w, x, 0, cnt, y);
                    CHECK_MSG(memcmp(ref, y, sizeof(float) * cnt * n) == 0, "%s type %d %dx%d: a call of %d rows differs",
                              isas[s], types[ti], n, k, cnt);
                }

                /* random splits (row offsets, odd sizes), random thread counts */
                for (int rep = 0; rep < 3; rep++) {
                    memset(y, 0xff, ybytes);
                    for (int i = 0; i < m;) {
                        int cnt = 1 + (int)(kt_rand() % 13);
                        if (cnt > m - i) cnt = m - i;
                        int th = 1 + (int)(kt_rand() % 4);
                        mm_rows(pools[th], &w, x, i, cnt, y);
                        i += cnt;
                    }
                    CHECK_MSG(memcmp(ref, y, ybytes) == 0, "%s type %d %dx%d: split %d differs",
                              isas[s], types[ti], n, k, rep);
                }

                /* whole batch on 2..4 threads */
                for (int th = 2; th <= 4; th++) {
                    memset(y, 0xff, ybytes);
                    mm_rows(pools[th], &w, x, 0, m, y);
                    CHECK_MSG(memcmp(ref, y, ybytes) == 0, "%s type %d %dx%d: %d threads differ",
                              isas[s], types[ti], n, k, th);
                }
                checked++;
                free(x); free(ref); free(y); free((void *)w.data);
            }
    }
    kvs_kernels_set_isa("best");
    for (int t = 2; t <= 4; t++) kvs_pool_free(pools[t]);
    printf("  %d matmul configurations\n", checked);
}

/* Calls with more activation rows than one row block of the AVX-512 tile
 * loop (~256 KB of quantized x: 68 rows at k = 1600) against one row at a
 * time and uneven splits: a row's bytes must not depend on its block. On 2
 * threads m = 150 is also two row blocks, one a thread (dispatch.c,
 * mm_rows: the sub-calls' quantized rows, tail quads, int16 rows). */
TEST(test_matmul_invariance_row_blocks) {
    const int types[] = {KVS_TYPE_Q4_1, KVS_TYPE_Q4_0, KVS_TYPE_Q8_0, KVS_TYPE_F16};
    const int m = 150, n = 24, k = 1600; /* 3 groups + 2 tail blocks */
    kvs_pool *pool = kvs_pool_new(2);
    int checked = 0;
    for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
        if (!use_isa(s)) continue;
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            kvs_wmat w = kt_rand_wmat(types[ti], n, k);
            float *x = xmalloc(sizeof(float) * m * k);
            kt_rand_vec(x, (size_t)m * k, 2.0f);
            size_t ybytes = sizeof(float) * m * n;
            float *ref = xmalloc(ybytes), *y = xmalloc(ybytes);
            mm_rows(pool, &w, x, 0, m, ref);
            memset(y, 0xff, ybytes);
            for (int i = 0; i < m; i++) mm_rows(NULL, &w, x, i, 1, y);
            CHECK_MSG(memcmp(ref, y, ybytes) == 0, "%s type %d: m=1 differs from m=%d", isas[s], types[ti], m);
            memset(y, 0xff, ybytes);
            for (int i = 0, cnt = 71; i < m; i += cnt, cnt = 79) /* blocks start off the call's grid */
                mm_rows(pool, &w, x, i, i + cnt > m ? m - i : cnt, y);
            CHECK_MSG(memcmp(ref, y, ybytes) == 0, "%s type %d: split 71+79 differs", isas[s], types[ti]);
            checked++;
            free(x); free(ref); free(y); free((void *)w.data);
        }
    }
    kvs_kernels_set_isa("best");
    kvs_pool_free(pool);
    printf("  %d row-block configurations\n", checked);
}

/* kvs_matmul_multi gives the bytes of separate calls (q/k/v-like shapes),
 * including when the types differ (fallback); m = 150 on 2 and 3 threads
 * takes AMX's row blocks a thread (dispatch.c, mm_rows: chunks rb-major
 * over the matrices), 3 threads a short last block. */
TEST(test_matmul_multi_equals_separate) {
    kvs_pool *pools[2] = {kvs_pool_new(2), kvs_pool_new(3)};
    const int m_list[] = {1, 3, 37, 150};
    for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
        if (!use_isa(s)) continue;
        for (int mixed = 0; mixed <= 1; mixed++)
            for (size_t mi = 0; mi < 4 * 2; mi++) {
                kvs_pool *pool = pools[mi % 2];
                int m = m_list[mi / 2], k = 576;
                kvs_wmat wq = kt_rand_wmat(KVS_TYPE_Q4_1, 576, k);
                kvs_wmat wk = kt_rand_wmat(mixed ? KVS_TYPE_Q8_0 : KVS_TYPE_Q4_1, 192, k);
                kvs_wmat wv = kt_rand_wmat(KVS_TYPE_Q4_1, 100, k);
                const kvs_wmat *ws[3] = {&wq, &wk, &wv};
                float *x = xmalloc(sizeof(float) * m * k);
                kt_rand_vec(x, (size_t)m * k, 2.0f);
                float *a[3], *b[3];
                for (int i = 0; i < 3; i++) {
                    a[i] = xmalloc(sizeof(float) * m * ws[i]->n);
                    b[i] = xmalloc(sizeof(float) * m * ws[i]->n);
                    memset(b[i], 0xff, sizeof(float) * m * ws[i]->n);
                }
                void *work = xmalloc(kvs_matmul_multi_work_size(3, ws, m));
                for (int i = 0; i < 3; i++) kvs_matmul(pool, ws[i], x, m, a[i], work);
                kvs_matmul_multi(pool, 3, ws, x, m, b, work);
                for (int i = 0; i < 3; i++)
                    CHECK_MSG(memcmp(a[i], b[i], sizeof(float) * m * ws[i]->n) == 0,
                              "%s mixed %d m %d matrix %d, %d threads", isas[s], mixed, m, i, kvs_pool_size(pool));
                for (int i = 0; i < 3; i++) { free(a[i]); free(b[i]); free((void *)ws[i]->data); }
                free(x); free(work);
            }
    }
    kvs_kernels_set_isa("best");
    kvs_pool_free(pools[0]);
    kvs_pool_free(pools[1]);
}

/* A random KV cache of kvn elements per tensor (rows of hd): f16, f32 or
 * Q8 rows (kv_type 0, 1, 2). */
typedef struct rand_kv {
    void *k, *v;
} rand_kv;

static rand_kv rand_kv_shifted(size_t kvn, int kv_type, int hd, float key_shift) {
    float *kf = xmalloc(kvn * 4), *vf = xmalloc(kvn * 4);
    kt_rand_vec(kf, kvn, 2.0f);
    for (size_t i = 0; i < kvn; i++) kf[i] += key_shift;
    kt_rand_vec(vf, kvn, 1.0f);
    if (kv_type == KVS_KV_F32) return (rand_kv){kf, vf};
    const int rows = (int)(kvn / (size_t)hd);
    rand_kv kv = {xmalloc(kvs_kv_row_bytes(kv_type, hd) * rows), xmalloc(kvs_kv_row_bytes(kv_type, hd) * rows)};
    kvs_kv_rows_store(kv_type, kf, kv.k, rows, hd);
    kvs_kv_rows_store(kv_type, vf, kv.v, rows, hd);
    free(kf);
    free(vf);
    return kv;
}

static rand_kv rand_kv_new(size_t kvn, int kv_type, int hd) { return rand_kv_shifted(kvn, kv_type, hd, 0.0f); }

/* Attention: tokens of one sequence (positions start..start+m-1) computed in
 * one call, one per call, in random chunks, and on 1..4 threads; f16, f32
 * and Q8 caches (a Q8 call of several units per kv head stages its keys
 * and values once on AVX-512, split across the threads). */
TEST(test_attention_invariance) {
    kvs_pool *pools[5] = {NULL};
    for (int t = 2; t <= 4; t++) pools[t] = kvs_pool_new(t);
    const int n_head = 9, n_kv = 3, hd = 64, n_ctx = 256, m = 70, start = 150;
    int checked = 0;
    for (size_t s = 0; s < sizeof(isas) / sizeof(isas[0]); s++) {
        if (!use_isa(s)) continue;
        for (int kv_type = 0; kv_type <= 2; kv_type++) {
            size_t kvn = (size_t)n_kv * n_ctx * hd, qn = (size_t)m * n_head * hd;
            float *q = xmalloc(qn * 4), *ref = xmalloc(qn * 4), *out = xmalloc(qn * 4);
            int32_t *pos = xmalloc(m * 4);
            kt_rand_vec(q, qn, 2.0f);
            const rand_kv kv = rand_kv_new(kvn, kv_type, hd);
            const void *k = kv.k, *v = kv.v;
            for (int t = 0; t < m; t++) pos[t] = start + t;
            void *work = xmalloc(kvs_attention_work_size(4, n_ctx));
            float scale = 0.125f;
#define ATTN(pool, t0, cnt, dst)                                                              \
    kvs_attention(pool, (dst) + (size_t)(t0) * n_head * hd, q + (size_t)(t0) * n_head * hd,  \
                  pos + (t0), cnt, k, v, kv_type, n_head, n_kv, hd, n_ctx, scale, work)
            ATTN(NULL, 0, m, ref);
            memset(out, 0xff, qn * 4);
            for (int t = 0; t < m; t++) ATTN(NULL, t, 1, out);
            CHECK_MSG(memcmp(ref, out, qn * 4) == 0, "%s kv %d: per-token differs", isas[s], kv_type);
            for (int rep = 0; rep < 3; rep++) {
                memset(out, 0xff, qn * 4);
                for (int t = 0; t < m;) {
                    int cnt = 1 + (int)(kt_rand() % 23);
                    if (cnt > m - t) cnt = m - t;
                    int th = 1 + (int)(kt_rand() % 4);
                    ATTN(pools[th], t, cnt, out);
                    t += cnt;
                }
                CHECK_MSG(memcmp(ref, out, qn * 4) == 0, "%s kv %d: split %d differs", isas[s], kv_type, rep);
            }
            for (int th = 2; th <= 4; th++) {
                memset(out, 0xff, qn * 4);
                ATTN(pools[th], 0, m, out);
                CHECK_MSG(memcmp(ref, out, qn * 4) == 0, "%s kv %d: %d threads differ", isas[s], kv_type, th);
            }
#undef ATTN
            checked++;
            free(work); free(q); free(ref); free(out); free(pos); free(kv.k); free(kv.v);
        }
    }
    kvs_kernels_set_isa("best");
    for (int t = 2; t <= 4; t++) kvs_pool_free(pools[t]);
    printf("  %d attention configurations\n", checked);
}

/* One decode token at long context on 2 and 4 threads, where the (token, kv
 * head) units leave threads idle (fewer kv heads than threads, or 3 on 2
 * past 4096 keys) and a path may split one kv head's keys, rows and dims
 * across threads (kvs_isa's attention_split_*): the bits of the scalar path
 * on one thread, for groups of 1 to 4 rows (split on AVX2 and AVX-512), 7
 * (split on AVX-512) and 16 (not split), head_dim 32 to 256, windows, f16,
 * f32 and Q8 caches (gemma3's shape also with every score negative: keys
 * above 0, queries below); then with a NaN key element (Q8: a NaN key scale), the
 * bits of the same path on one thread; Q8 also with a negative value scale
 * (a damaged cache: the split declines its last phase and the units rerun
 * the head on AVX2), the scalar bits. Q8 on a path that reads a decode
 * layout (kvs_attn_layout) also with one built up to 16 slots, half the
 * keys and all, from a third of the keys and from the window on (its
 * unbuilt part junk): the same bits. */
TEST(test_attention_decode_split) {
    struct { int nh, nkv, hd, ctx, pos, window, negative; } cases[] = {
        {9, 3, 64, 1100, 1099, 0, 0}, {9, 3, 64, 1100, 511, 0, 0}, {9, 3, 64, 1100, 700, 0, 0},
        {4, 1, 256, 900, 899, 0, 0},  {7, 1, 32, 1030, 1029, 0, 0}, {16, 1, 64, 600, 599, 0, 0},
        {8, 2, 128, 800, 777, 0, 0},  {9, 3, 64, 1100, 1000, 600, 0}, {4, 1, 256, 1300, 1290, 512, 0},
        /* 3 kv heads on 2 threads past attention_split_uneven_keys (AVX-512 splits) */
        {9, 3, 64, 4200, 4199, 0, 0}, {9, 3, 64, 4400, 4300, 4100, 0}, {4, 1, 256, 900, 899, 0, 1},
    };
    kvs_pool *pools[5] = {NULL, NULL, kvs_pool_new(2), NULL, kvs_pool_new(4)};
    int checked = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int kv_type = 0; kv_type <= 2; kv_type++) {
            const int nh = cases[ci].nh, nkv = cases[ci].nkv, hd = cases[ci].hd, ctx = cases[ci].ctx;
            size_t kvn = (size_t)nkv * ctx * hd, qn = (size_t)nh * hd;
            float *q = xmalloc(qn * 4), *ref = xmalloc(qn * 4), *out = xmalloc(qn * 4);
            kt_rand_vec(q, qn, 2.0f);
            if (cases[ci].negative)
                for (size_t i = 0; i < qn; i++) q[i] = -fabsf(q[i]) - 0.25f;
            const rand_kv kv = rand_kv_shifted(kvn, kv_type, hd, cases[ci].negative ? 2.5f : 0.0f);
            const void *k = kv.k, *v = kv.v;
            const int32_t pos = cases[ci].pos;
            void *work = xmalloc(kvs_attention_work_size(4, ctx));
            const size_t lay_bytes = (size_t)nkv * kvs_attn_layout_head_bytes(hd, ctx);
            void *lay_data = aligned_alloc(64, (lay_bytes + 63) & ~(size_t)63);
            if (!lay_data) abort();
#define ATTN_L(pool, dst, lay)                                                                                 \
    kvs_attention_window(pool, dst, q, &pos, 1, k, v, kv_type, nh, nkv, hd, ctx, 0.125f, cases[ci].window, NULL, \
                         lay, work)
#define ATTN(pool, dst) ATTN_L(pool, dst, NULL)
            /* then a NaN key element: no path matches fmaxf's NaN rule, but
             * each gives its own one-thread bits on any thread count */
            const size_t q8_rb = kvs_kv_row_bytes(KVS_KV_Q8, hd);
            for (int nan = 0; nan <= (kv_type == KVS_KV_Q8 ? 2 : 1); nan++) {
                const size_t nan_at = (size_t)(pos / 2) * hd + 1; /* kv head 0, key pos / 2 */
                const float bad_scale = nan == 1 ? NAN : -0.5f;
                if (nan && kv_type == KVS_KV_Q8) /* nan 1: key pos / 2's scale; 2: value pos / 3's */
                    memcpy((int8_t *)(nan == 1 ? kv.k : kv.v) + (size_t)(pos / (nan + 1)) * q8_rb + hd, &bad_scale, 4);
                else if (nan && kv_type == 0) ((uint16_t *)kv.k)[nan_at] = 0x7e00;
                else if (nan) ((float *)kv.k)[nan_at] = NAN;
                kvs_kernels_set_isa("scalar");
                ATTN(NULL, ref);
                for (size_t s = 1; s < N_ISAS; s++) {
                    if (!use_isa(s)) continue;
                    if (nan == 1) ATTN(NULL, ref);
                    for (int th = 2; th <= 4; th += 2) {
                        memset(out, 0xff, qn * 4);
                        ATTN(pools[th], out);
                        CHECK_MSG(memcmp(ref, out, qn * 4) == 0, "%s case %zu kv %d%s, %d threads: differs from %s",
                                  isas[s], ci, kv_type, nan == 2 ? " negative value scale" : nan ? " NaN key" : "", th,
                                  nan == 1 ? "1 thread" : "scalar");
                        checked++;
                    }
                    if (!kvs_attn_layout_wanted(kv_type, hd, nh / nkv)) continue;
                    /* slots [from, built): a prefix; all; from a third on;
                     * from the window's first slot on */
                    const int win = cases[ci].window, all = (pos + 1) & ~15;
                    const int from[5] = {0, 0, 0, pos / 3 & ~15, win && pos + 1 > win ? (pos + 1 - win) & ~15 : 0};
                    const int built[5] = {16, pos / 2 & ~15, all, all, all};
                    for (int b = 0; b < 5; b++) {
                        memset(lay_data, 0xa5, lay_bytes);
                        CHECK(kvs_attn_layout_build(kv_type, k, v, nkv, hd, ctx, from[b], built[b], lay_data) == 0);
                        const kvs_attn_layout lay = {.data = lay_data, .n = built[b], .lo = from[b]};
                        for (int th = 1; th <= 4; th *= 2) {
                            memset(out, 0xff, qn * 4);
                            ATTN_L(pools[th], out, &lay);
                            CHECK_MSG(memcmp(ref, out, qn * 4) == 0,
                                      "%s case %zu%s, %d threads, layout of slots [%d, %d): differs from %s", isas[s],
                                      ci, nan == 2 ? " negative value scale" : nan ? " NaN key" : "", th, from[b], built[b],
                                      nan == 1 ? "1 thread" : "scalar");
                            checked++;
                        }
                    }
                }
            }
#undef ATTN
#undef ATTN_L
            free(work); free(q); free(ref); free(out); free(kv.k); free(kv.v); free(lay_data);
        }
    kvs_kernels_set_isa("best");
    kvs_pool_free(pools[2]);
    kvs_pool_free(pools[4]);
    printf("  %d decode attention comparisons on 2 and 4 threads\n", checked);
}

/* kvs_attention_rows (batched decode: each row a token of its own sequence,
 * against its own KV) against each row's own kvs_attention_window call: rows
 * of different cache sizes and types, positions (some past 4096 keys, where
 * a row alone may split across threads), a window, a recalibrated row; 1 to
 * 4 threads, every path. */
TEST(test_attention_rows_equal_each_alone) {
    enum { NR = 7 };
    const int nh = 9, nkv = 3, hd = 64;
    const int ctxs[NR] = {300, 4400, 64, 1200, 300, 4200, 17};
    const int poss[NR] = {299, 4350, 5, 800, 120, 4199, 16};
    const int types[NR] = {0, 0, 1, 0, 1, 0, 0};
    kvs_pool *pools[5] = {NULL, NULL, kvs_pool_new(2), kvs_pool_new(3), kvs_pool_new(4)};
    rand_kv kv[NR];
    for (int r = 0; r < NR; r++) kv[r] = rand_kv_new((size_t)nkv * ctxs[r] * hd, types[r], hd);
    const size_t qn = (size_t)NR * nh * hd;
    float *q = xmalloc(qn * 4), *ref = xmalloc(qn * 4), *out = xmalloc(qn * 4);
    kt_rand_vec(q, qn, 2.0f);
    void *work = xmalloc(kvs_attention_work_size(4, 4400));
    const kvs_attn_recal recal = {.lo = 200, .hi = 700, .inv_t = 0.8f, .s = 0.9f}; /* row 3 (pos 800) */
    int checked = 0;
    for (int window = 0; window <= 1000; window += 1000)
        for (size_t s = 0; s < N_ISAS; s++) {
            if (!use_isa(s)) continue;
            kvs_attn_row rows[NR];
            for (int r = 0; r < NR; r++) {
                const size_t at = (size_t)r * nh * hd;
                rows[r] = (kvs_attn_row){.out = out + at, .q = q + at, .pos = poss[r], .k = kv[r].k, .v = kv[r].v,
                                         .kv_type = types[r], .n_ctx = ctxs[r], .recal = r == 3 ? &recal : NULL};
                kvs_attention_window(NULL, ref + at, q + at, &rows[r].pos, 1, kv[r].k, kv[r].v, types[r], nh, nkv, hd,
                                     ctxs[r], 0.125f, window, rows[r].recal, NULL, work);
            }
            for (int th = 1; th <= 4; th++)
                for (int n = 1; n <= NR; n += NR - 1) { /* one row (its own call) and all */
                    memset(out, 0xff, qn * 4);
                    kvs_attention_rows(pools[th], n, rows, nh, nkv, hd, 0.125f, window, work);
                    CHECK_MSG(memcmp(ref, out, (size_t)n * nh * hd * 4) == 0, "%s window %d, %d threads, %d rows differ",
                              isas[s], window, th, n);
                    checked++;
                }
        }
    kvs_kernels_set_isa("best");
    for (int r = 0; r < NR; r++) { free(kv[r].k); free(kv[r].v); }
    free(q); free(ref); free(out); free(work);
    for (int t = 2; t <= 4; t++) kvs_pool_free(pools[t]);
    printf("  %d row-batched attention comparisons\n", checked);
}

/* The paths above skip what the CPU lacks; this makes sure that what it has
 * was checked: the CPU's best level (kvs_kernels_cpu_level: 0 scalar, 1
 * avx2, 2 avx512vnni; + amx where the OS grants tiles) and every level below
 * it ran through all four tests. Missing paths are reported as skips, one
 * per path. */
TEST(test_best_isa_exercised) {
    int level = kvs_kernels_cpu_level(), amx = kvs_kernels_amx_available();
    size_t best = amx ? 3 : (size_t)level;
    CHECK_MSG(level >= 0 && level <= 2 && best < N_ISAS, "cpu level %d", level);
    if (best >= N_ISAS) return;
    for (size_t s = 0; s <= best; s++)
        CHECK_MSG(exercised[s] >= 4, "path %s (the CPU's best: %s) ran in %d of the 4 tests", isas[s], isas[best],
                  exercised[s]);
    printf("  best path: %s, exercised in %d tests\n", isas[best], exercised[best]);
}

/* One line per path this CPU lacks, counted as skipped by run-tests.sh. */
static void report_missing_paths(void) {
    for (size_t s = 0; s < N_ISAS; s++)
        if (!exercised[s]) printf("skip invariance_%s: not supported by this CPU / OS\n", isas[s]);
}

int main(void) {
    RUN(test_matmul_invariance);
    RUN(test_matmul_invariance_row_blocks);
    RUN(test_matmul_multi_equals_separate);
    RUN(test_attention_invariance);
    RUN(test_attention_decode_split);
    RUN(test_attention_rows_equal_each_alone);
    RUN(test_best_isa_exercised);
    report_missing_paths();
    return kt_summary();
}
