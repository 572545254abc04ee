/*
 * The measured choice between a prefill's AMX and AVX-512 paths
 * (src/kernels/path_tuner.c): its policy on given costs, and, where the CPU
 * has AMX, that matmul calls under it take both paths and every output is
 * the scalar reference's, byte for byte.
 */
#include <math.h>
#include <stdlib.h>

#include "harness.h"
#include "kernels/kernels_impl.h"
#include "test_kernels_util.h"

/* Runs n calls on fixed costs; returns how many took path 1. */
static int run_calls(kvs_tune_stats *s, int n, double cost0, double cost1) {
    int ones = 0;
    for (int i = 0; i < n; i++) {
        const int p = kvs_tune_choose(s);
        ones += p;
        kvs_tune_update(s, p, p ? cost1 : cost0);
    }
    return ones;
}

TEST(test_tune_warms_up_in_turn) {
    kvs_tune_stats s = {0};
    const int want[] = {0, 1, 0, 1};
    for (int i = 0; i < 4; i++) {
        const int p = kvs_tune_choose(&s);
        CHECK_MSG(p == want[i], "call %d took path %d", i, p);
        kvs_tune_update(&s, p, p ? 2.0 : 1.0);
    }
    CHECK(s.samples[0] == 2 && s.samples[1] == 2 && s.calls == 4);
}

TEST(test_tune_follows_the_faster_path) {
    kvs_tune_stats s = {0};
    run_calls(&s, 4, 1.0, 2.0);
    /* path 1 twice the cost: far behind, looked at once in 64 calls */
    CHECK(run_calls(&s, 640, 1.0, 2.0) == 10);
    /* close costs (1.1x): once in 16 */
    kvs_tune_stats c = {0};
    run_calls(&c, 4, 1.0, 1.1);
    CHECK(run_calls(&c, 640, 1.0, 1.1) == 40);
    /* path 0 faster only on the other side: the mirror */
    kvs_tune_stats m = {0};
    run_calls(&m, 4, 1.1, 1.0);
    CHECK(run_calls(&m, 640, 1.1, 1.0) == 600);
}

TEST(test_tune_sees_the_host_change) {
    kvs_tune_stats s = {0};
    run_calls(&s, 100, 1.0, 1.5); /* path 0 ahead */
    CHECK(kvs_tune_choose(&s) == 0 || s.calls % 64 == 63);
    /* path 0 slows to 3x: within a few of its own calls the choice turns */
    run_calls(&s, 100, 3.0, 1.5);
    CHECK(s.cost[0] > s.cost[1]);
    CHECK(run_calls(&s, 64, 3.0, 1.5) >= 63);
}

TEST(test_tune_ignores_bad_clocks) {
    kvs_tune_stats s = {0};
    kvs_tune_update(&s, 0, -1.0);
    kvs_tune_update(&s, 1, NAN);
    CHECK(s.samples[0] == 0 && s.samples[1] == 0 && s.calls == 0);
}

/* Under KVS_AMX=auto (the default) calls of one shape run both paths (the
 * warm-up) and each gives the scalar bytes; KVS_AMX=1 (kvs_kernels_set_isa
 * "amx") keeps every call on the tiles. */
TEST(test_tune_calls_give_the_scalar_bits) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    const int types[] = {KVS_TYPE_Q8_0, KVS_TYPE_Q4_1, KVS_TYPE_Q4_K};
    kvs_pool *pool = kvs_pool_new(2);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const int type = types[ti], n = 48, k = 512, m = 40;
        kvs_wmat w = kt_rand_wmat(type, n, k);
        float *x = malloc(sizeof(float) * m * k), *y0 = malloc(sizeof(float) * m * n),
              *y1 = malloc(sizeof(float) * m * n);
        void *work = malloc(kvs_matmul_work_size(&w, m));
        CHECK(x && y0 && y1 && work);
        kt_rand_vec(x, (size_t)m * k, 2.0f);
        kvs_kernels_set_isa("scalar");
        kvs_matmul(NULL, &w, x, m, y0, work);
        kvs_tune_stats before = {0}, after = {0};
        kvs_kernels_set_isa("amx"); /* forced: the record does not move */
        kvs_path_tune_stats_of(type, k, n, m, &before);
        kvs_matmul(pool, &w, x, m, y1, work);
        CHECK_MSG(memcmp(y0, y1, sizeof(float) * m * n) == 0, "type %d forced AMX", type);
        kvs_path_tune_stats_of(type, k, n, m, &after);
        CHECK(after.calls == before.calls);
        setenv("KVS_AMX", "auto", 1);
        kvs_kernels_set_isa("best");
        for (int call = 0; call < 8; call++) {
            memset(y1, 0xff, sizeof(float) * m * n);
            kvs_matmul(call % 2 ? pool : NULL, &w, x, m, y1, work);
            CHECK_MSG(memcmp(y0, y1, sizeof(float) * m * n) == 0, "type %d call %d", type, call);
        }
        CHECK(kvs_path_tune_stats_of(type, k, n, m, &after) == 0);
        CHECK_MSG(after.samples[0] >= 2 && after.samples[1] >= 2, "type %d: %d AMX, %d AVX-512 calls", type,
                  after.samples[0], after.samples[1]);
        free(x); free(y0); free(y1); free(work);
        free((void *)w.data);
    }
    kvs_pool_free(pool);
    unsetenv("KVS_AMX");
    kvs_kernels_set_isa("best");
}

int main(void) {
    RUN(test_tune_warms_up_in_turn);
    RUN(test_tune_follows_the_faster_path);
    RUN(test_tune_sees_the_host_change);
    RUN(test_tune_ignores_bad_clocks);
    RUN(test_tune_calls_give_the_scalar_bits);
    return kt_summary();
}
