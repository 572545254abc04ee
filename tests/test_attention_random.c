/*
 * Random attention calls on Q8 caches: every SIMD path this CPU runs, on 1
 * and 2 threads, gives the scalar path's bits. The shapes the fixed cases
 * (test_kernels) name one by one, drawn together: 1-4 kv heads of 1-4
 * query heads, head_dim 16-256, 1-4 tokens a call (decode units of up to 4
 * rows) or, one call in four, 5-24 (prefill units of 5-48 rows, several
 * row blocks: keys every row of a block sees and keys only some do); the
 * tokens at consecutive positions or anywhere, so that a unit's rows see
 * very different keys; sliding windows, n_ctx up to 2000 and
 * small ones around the kernels' multiples of 8, 16 and 512, peaked rows,
 * rows whose scores are all negative, levels of -128 (no quantizer writes
 * them) and damaged scales (NaN, +-inf, -0, a negative value scale). A
 * fixed seed (kt_rand's): the same cases every run.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "test_kernels_util.h"

typedef struct rnd_case {
    int n_kv, n_head, head_dim, m, n_ctx, window;
    int32_t pos[24];
    void *k, *v;
    float *q;
} rnd_case;

/* One drawn case: K and V stored as Q8 rows from random floats. */
static int rnd_case_make(rnd_case *c) {
    static const int dims[] = {16, 32, 48, 64, 80, 96, 128, 256};
    const int group = 1 + (int)(kt_rand() % 4);
    c->n_kv = 1 + (int)(kt_rand() % 4);
    c->n_head = c->n_kv * group;
    c->head_dim = dims[kt_rand() % 8];
    c->m = group <= 2 ? 1 + (int)(kt_rand() % 4) : 1;
    if (kt_rand() % 4 == 0) c->m = 5 + (int)(kt_rand() % 20);
    static const int small[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 511, 512, 513, 1025};
    c->n_ctx = c->m + (int)(kt_rand() % 2000);
    if (kt_rand() % 6 == 0) {
        c->n_ctx = small[kt_rand() % (sizeof small / sizeof small[0])];
        if (c->n_ctx < c->m) c->n_ctx = c->m;
    }
    int start = c->n_ctx - c->m;
    if (kt_rand() % 3 == 0) start -= (int)(kt_rand() % (uint32_t)(start + 1)); /* not at the end */
    const int anywhere = kt_rand() % 4 == 0;
    for (int t = 0; t < c->m; t++) c->pos[t] = anywhere ? (int32_t)(kt_rand() % (uint32_t)c->n_ctx) : start + t;
    c->window = kt_rand() % 3 == 0 ? 1 + (int)(kt_rand() % 600) : 0;
    const size_t rows = (size_t)c->n_kv * c->n_ctx, n = rows * c->head_dim;
    const size_t rb = kvs_kv_row_bytes(KVS_KV_Q8, c->head_dim), qn = (size_t)c->m * c->n_head * c->head_dim;
    float *kf = malloc(n * sizeof *kf), *vf = malloc(n * sizeof *vf);
    c->k = malloc(rows * rb);
    c->v = malloc(rows * rb);
    c->q = malloc(qn * sizeof *c->q);
    if (!kf || !vf || !c->k || !c->v || !c->q) {
        free(kf);
        free(vf);
        return -1;
    }
    /* one call in eight has every score negative (keys above 0, queries
     * below): a maximum that started at 0 instead of -inf would show */
    const int negative = kt_rand() % 8 == 0;
    for (size_t i = 0; i < n; i++) kf[i] = kt_randf() + (negative ? 1.5f : 0.0f), vf[i] = kt_randf();
    kvs_kv_rows_store(KVS_KV_Q8, kf, c->k, (int)rows, c->head_dim);
    kvs_kv_rows_store(KVS_KV_Q8, vf, c->v, (int)rows, c->head_dim);
    free(kf);
    free(vf);
    const float peak = kt_rand() % 3 == 0 ? 6.0f : 1.0f; /* peaked rows: a few keys take most weight */
    for (size_t i = 0; i < qn; i++) c->q[i] = (negative ? -fabsf(kt_randf()) - 0.25f : kt_randf()) * peak;
    static const float damaged[] = {NAN, INFINITY, -INFINITY, -0.0f, -1.0f};
    if (kt_rand() % 8 == 0) { /* a damaged value scale */
        const float d = damaged[kt_rand() % 5];
        memcpy((char *)c->v + (size_t)(kt_rand() % rows) * rb + c->head_dim, &d, sizeof d);
    }
    if (kt_rand() % 8 == 0) { /* a damaged key scale */
        const float d = damaged[kt_rand() % 5];
        memcpy((char *)c->k + (size_t)(kt_rand() % rows) * rb + c->head_dim, &d, sizeof d);
    }
    if (kt_rand() % 8 == 0) /* levels of -128 in every third row */
        for (size_t r = 0; r < rows; r += 3) {
            ((int8_t *)c->k)[r * rb + kt_rand() % (uint32_t)c->head_dim] = -128;
            ((int8_t *)c->v)[r * rb + kt_rand() % (uint32_t)c->head_dim] = -128;
        }
    if (c->n_ctx > 600 && kt_rand() % 4 == 0) /* far keys silent: a value scale of +0 for slots [0, 512) of
                                                * every kv head, so a whole block of levels is 0 before live ones */
        for (int g = 0; g < c->n_kv; g++)
            for (int j = 0; j < 512; j++) {
                const float zero = 0.0f;
                memcpy((char *)c->v + ((size_t)g * c->n_ctx + (size_t)j) * rb + c->head_dim, &zero, sizeof zero);
            }
    return 0;
}

static void rnd_case_free(rnd_case *c) {
    free(c->k);
    free(c->v);
    free(c->q);
}

static void attend(const rnd_case *c, kvs_pool *pool, float *out, void *work) {
    kvs_attention_window(pool, out, c->q, c->pos, c->m, c->k, c->v, KVS_KV_Q8, c->n_head, c->n_kv, c->head_dim,
                         c->n_ctx, 0.125f, c->window, NULL, NULL, work);
}

TEST(test_attention_q8_random_calls_equal_scalar) {
    static const char *isas[] = {"avx2", "avx512vnni", "amx"};
    kvs_pool *pools[3] = {NULL, NULL, kvs_pool_new(2)};
    const char *q = getenv("KVSTITCH_TEST_QUICK");
    const int n_cases = q && *q && strcmp(q, "0") ? 150 : 1500;
    int compared = 0, differ = 0;
    for (int ci = 0; ci < n_cases; ci++) {
        rnd_case c;
        if (rnd_case_make(&c)) {
            CHECK_MSG(0, "case %d: out of memory", ci);
            rnd_case_free(&c);
            break;
        }
        const size_t qn = (size_t)c.m * c.n_head * c.head_dim;
        float *ref = malloc(qn * sizeof *ref), *out = malloc(qn * sizeof *out);
        void *work = malloc(kvs_attention_work_size(2, c.n_ctx));
        if (ref && out && work) {
            kvs_kernels_set_isa("scalar");
            attend(&c, NULL, ref, work);
            for (size_t s = 0; s < sizeof isas / sizeof isas[0]; s++) {
                if (kvs_kernels_set_isa(isas[s]) != 0) continue;
                for (int th = 1; th <= 2; th++) {
                    memset(out, 0xff, qn * sizeof *out);
                    attend(&c, pools[th], out, work);
                    compared++;
                    if (memcmp(ref, out, qn * sizeof *out) && differ++ < 5)
                        fprintf(stderr, "  %s, %d threads, case %d: kv heads %d, heads %d, dim %d, tokens %d from %d, "
                                "n_ctx %d, window %d: differs from scalar\n", isas[s], th, ci, c.n_kv, c.n_head,
                                c.head_dim, c.m, c.pos[0], c.n_ctx, c.window);
                }
            }
        } else {
            CHECK_MSG(0, "case %d: out of memory", ci);
        }
        free(ref);
        free(out);
        free(work);
        rnd_case_free(&c);
    }
    kvs_kernels_set_isa("best");
    kvs_pool_free(pools[2]);
    CHECK_MSG(differ == 0, "%d of %d calls differ from the scalar path", differ, compared);
    CHECK(compared >= n_cases * 2); /* avx2 at least runs on every x86-64 this project takes */
    printf("  %d random Q8 attention calls compared with the scalar path\n", compared);
}

int main(void) {
    RUN(test_attention_q8_random_calls_equal_scalar);
    return kt_summary();
}
