/*
 * The measured choice between a prefill's AMX and AVX-512 paths
 * (src/kernels/path_tuner.c): its policy on given costs, and, where the CPU
 * has AMX, that matmul calls under it take both paths and every output is
 * the scalar reference's, byte for byte.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    const int want[] = {0, 1, 0, 1, 0, 1};
    for (int i = 0; i < 6; i++) {
        const int p = kvs_tune_choose(&s);
        CHECK_MSG(p == want[i], "call %d took path %d", i, p);
        kvs_tune_update(&s, p, p ? 2.0 : 1.0);
    }
    CHECK(s.samples[0] == 3 && s.samples[1] == 3 && s.calls == 6);
}

TEST(test_tune_follows_the_faster_path) {
    kvs_tune_stats s = {0};
    run_calls(&s, 6, 1.0, 2.0);
    /* path 1 twice the cost: far behind once its window is full (call 15,
     * its fourth), then looked at once in 64 calls */
    CHECK(run_calls(&s, 640, 1.0, 2.0) == 11);
    /* close costs (1.1x): once in 16 */
    kvs_tune_stats c = {0};
    run_calls(&c, 6, 1.0, 1.1);
    CHECK(run_calls(&c, 640, 1.0, 1.1) == 40);
    /* path 0 faster only on the other side: the mirror */
    kvs_tune_stats m = {0};
    run_calls(&m, 6, 1.1, 1.0);
    CHECK(run_calls(&m, 640, 1.1, 1.0) == 600);
}

/* A path's first calls (cold: its scratch, pages and caches are first
 * touched) do not count against it: its cost is the lowest of its last
 * KVS_TUNE_WINDOW calls. */
TEST(test_tune_forgives_cold_first_calls) {
    kvs_tune_stats s = {0};
    const double costs[2][3] = {{1.6, 1.3, 0.8}, {0.9, 0.9, 0.9}}; /* [path][its call] */
    for (int i = 0; i < 6; i++) {
        const int p = kvs_tune_choose(&s);
        kvs_tune_update(&s, p, costs[p][s.samples[p]]);
    }
    CHECK(s.cost[0] == 0.8 && s.cost[1] == 0.9);
    CHECK(run_calls(&s, 9, 0.8, 0.9) == 0); /* up to the first look back (call 16) */
    /* nor does a one-off slow call of the path in use */
    kvs_tune_update(&s, 0, 5.0);
    CHECK(s.cost[0] == 0.8 && kvs_tune_choose(&s) == 0);
}

TEST(test_tune_sees_the_host_change) {
    kvs_tune_stats s = {0};
    /* path 0 ahead 1.5x: path 1 at the warm-up and at calls 15 and 63 only */
    CHECK(run_calls(&s, 100, 1.0, 1.5) == 5);
    /* path 0 slows to 3x: its cost passes path 1's once its window holds
     * slow calls only, not before */
    run_calls(&s, KVS_TUNE_WINDOW - 1, 3.0, 1.5);
    CHECK(s.cost[0] == 1.0 && kvs_tune_choose(&s) == 0);
    run_calls(&s, 1, 3.0, 1.5);
    CHECK(s.cost[0] > s.cost[1]);
    CHECK(kvs_tune_choose(&s) == 1);
    CHECK(run_calls(&s, 64, 3.0, 1.5) >= 60); /* path 0 looked at every 16th, then 64th call */
}

TEST(test_tune_ignores_bad_clocks) {
    kvs_tune_stats s = {0};
    kvs_tune_update(&s, 0, -1.0);
    kvs_tune_update(&s, 1, NAN);
    CHECK(s.samples[0] == 0 && s.samples[1] == 0 && s.calls == 0);
}

/* The caller's KVS_AMX, put back afterwards. */
static char *saved_amx(void) {
    const char *e = getenv("KVS_AMX");
    return e ? strdup(e) : NULL;
}

static void restore_amx(char *e) {
    if (e) setenv("KVS_AMX", e, 1);
    else unsetenv("KVS_AMX");
    free(e);
    kvs_kernels_set_isa("best");
}

/* Matrix w with, where its type has them, the tiles the AMX paths read (as
 * a model's arena holds them); *tiles: to free. */
static kvs_wmat tiled_wmat(int type, int n, int k, void **tiles) {
    kvs_wmat w = kt_rand_wmat(type, n, k);
    *tiles = NULL;
    const size_t tb = kvs_wmat_tiles_bytes(&w);
    if (tb) {
        *tiles = aligned_alloc(64, (tb + 63) & ~(size_t)63);
        if (*tiles) kvs_wmat_tiles_to(&w, *tiles);
    }
    return w;
}

/* Under KVS_AMX=auto (the default) calls of one shape run both paths (the
 * warm-up: the path that ran is what the record counts) and each gives the
 * scalar bytes, on one thread and on two (a record each); KVS_AMX=1 keeps
 * every call on the tiles (the record does not move). */
TEST(test_tune_calls_give_the_scalar_bits) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    char *env = saved_amx();
    const int types[] = {KVS_TYPE_Q8_0, KVS_TYPE_Q4_0, KVS_TYPE_Q4_1, KVS_TYPE_Q5_0, KVS_TYPE_Q4_K};
    kvs_pool *pool = kvs_pool_new(2);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const int type = types[ti], n = 48, k = 512, m = 40;
        void *tiles;
        kvs_wmat w = tiled_wmat(type, n, k, &tiles);
        float *x = malloc(sizeof(float) * m * k), *y0 = malloc(sizeof(float) * m * n),
              *y1 = malloc(sizeof(float) * m * n);
        void *work = malloc(kvs_matmul_work_size(&w, m));
        CHECK(x && y0 && y1 && work);
        kt_rand_vec(x, (size_t)m * k, 2.0f);
        kvs_kernels_set_isa("scalar");
        kvs_matmul(NULL, &w, x, m, y0, work);
        kvs_tune_stats before = {0}, after = {0};
        setenv("KVS_AMX", "1", 1);
        kvs_kernels_set_isa("best");
        kvs_path_tune_stats_of(type, k, n, m, 2, &before);
        kvs_matmul(pool, &w, x, m, y1, work);
        CHECK_MSG(memcmp(y0, y1, sizeof(float) * m * n) == 0, "type %d, KVS_AMX=1", type);
        kvs_path_tune_stats_of(type, k, n, m, 2, &after);
        CHECK(after.calls == before.calls);
        setenv("KVS_AMX", "auto", 1);
        kvs_kernels_set_isa("best");
        for (int call = 0; call < 8; call++) {
            memset(y1, 0xff, sizeof(float) * m * n);
            kvs_matmul(call % 2 ? pool : NULL, &w, x, m, y1, work);
            CHECK_MSG(memcmp(y0, y1, sizeof(float) * m * n) == 0, "type %d call %d", type, call);
        }
        for (int nth = 1; nth <= 2; nth++) {
            CHECK(kvs_path_tune_stats_of(type, k, n, m, nth, &after) == 0);
            CHECK_MSG(after.samples[0] >= 2 && after.samples[1] >= 2, "type %d, %d threads: %d AMX, %d AVX-512 calls",
                      type, nth, after.samples[0], after.samples[1]);
        }
        free(x); free(y0); free(y1); free(work); free(tiles);
        free((void *)w.data);
    }
    kvs_pool_free(pool);
    restore_amx(env);
}

/* kvs_matmul_multi (q / k / v on one x) under the tuner: one record for
 * the call (its total n), both paths, the scalar bytes for every matrix. */
TEST(test_tune_multi_gives_the_scalar_bits) {
    if (kvs_kernels_set_isa("amx") != 0) SKIP("no AMX on this CPU / OS");
    char *env = saved_amx();
    const int types[] = {KVS_TYPE_Q8_0, KVS_TYPE_Q4_K};
    kvs_pool *pool = kvs_pool_new(2);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const int type = types[ti], k = 256, m = 33, ns[3] = {64, 32, 16};
        kvs_wmat w[3];
        void *tiles[3];
        float *y0[3], *y1[3];
        const kvs_wmat *ws[3];
        size_t wsz = 0;
        for (int i = 0; i < 3; i++) {
            w[i] = tiled_wmat(type, ns[i], k, &tiles[i]);
            ws[i] = &w[i];
            y0[i] = malloc(sizeof(float) * m * ns[i]);
            y1[i] = malloc(sizeof(float) * m * ns[i]);
            CHECK(y0[i] && y1[i]);
        }
        wsz = kvs_matmul_multi_work_size(3, ws, m);
        float *x = malloc(sizeof(float) * m * k);
        void *work = malloc(wsz);
        CHECK(x && work);
        kt_rand_vec(x, (size_t)m * k, 2.0f);
        kvs_kernels_set_isa("scalar");
        for (int i = 0; i < 3; i++) kvs_matmul(NULL, &w[i], x, m, y0[i], work);
        setenv("KVS_AMX", "auto", 1);
        kvs_kernels_set_isa("best");
        for (int call = 0; call < 4; call++) {
            for (int i = 0; i < 3; i++) memset(y1[i], 0xff, sizeof(float) * m * ns[i]);
            kvs_matmul_multi(pool, 3, ws, x, m, y1, work);
            for (int i = 0; i < 3; i++)
                CHECK_MSG(memcmp(y0[i], y1[i], sizeof(float) * m * ns[i]) == 0, "type %d call %d matrix %d", type, call, i);
        }
        kvs_tune_stats st = {0};
        CHECK(kvs_path_tune_stats_of(type, k, 64 + 32 + 16, m, 2, &st) == 0);
        CHECK_MSG(st.samples[0] == 2 && st.samples[1] == 2, "type %d: %d AMX, %d AVX-512 calls", type, st.samples[0],
                  st.samples[1]);
        for (int i = 0; i < 3; i++) {
            free(y0[i]); free(y1[i]); free(tiles[i]);
            free((void *)w[i].data);
        }
        free(x); free(work);
    }
    kvs_pool_free(pool);
    restore_amx(env);
}

int main(void) {
    RUN(test_tune_warms_up_in_turn);
    RUN(test_tune_follows_the_faster_path);
    RUN(test_tune_forgives_cold_first_calls);
    RUN(test_tune_sees_the_host_change);
    RUN(test_tune_ignores_bad_clocks);
    RUN(test_tune_calls_give_the_scalar_bits);
    RUN(test_tune_multi_gives_the_scalar_bits);
    return kt_summary();
}
