/* One-token generate through the C library, the reference for the Python
 * binding's overhead (bench/python_overhead.py runs the same loop through
 * kvstitch.Session.generate): tokenize a short prompt, kvs_generate_cached
 * with n_predict = 1 (the prompt's prefix cached after the first call: one
 * live token), free the result. Prints the median, p10 and p90 per call.
 *   generate_one [calls=200] [threads=1]     model: $KVSTITCH_MODEL */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvstitch.h"

#define PROMPT "The quick brown fox jumps over the lazy dog."

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int one_call(kvs_context *ctx, kvs_cache *cache, const kvs_model *model, int *n_cached) {
    int32_t ids[64]; int n = 0;
    int st = kvs_tokenize(model, PROMPT, strlen(PROMPT), KVS_TOKENIZE_ADD_BOS, ids, 64, &n);
    if (st != KVS_OK) return st;
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1;
    kvs_generate_result r = {0};
    st = kvs_generate_cached(ctx, cache, ids, n, &gp, NULL, &r);
    if (st != KVS_OK) return st;
    *n_cached = r.reuse ? r.reuse->n_cached : 0;
    kvs_generate_result_free(&r);
    return KVS_OK;
}

int main(int argc, char **argv) {
    const char *path = getenv("KVSTITCH_MODEL");
    int calls = argc > 1 ? atoi(argv[1]) : 200, threads = argc > 2 ? atoi(argv[2]) : 1;
    if (!path || calls < 1) { fprintf(stderr, "usage: KVSTITCH_MODEL=m.gguf generate_one [calls] [threads]\n"); return 2; }
    kvs_model *model = NULL; kvs_context *ctx = NULL; kvs_cache *cache = NULL;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 256; cp.n_threads = threads;
    kvs_cache_params kp = kvs_cache_default_params();
    kp.budget_bytes = 64u << 20;
    if (kvs_model_load(path, kvs_model_default_params(), &model) || kvs_context_new(model, cp, &ctx) ||
        kvs_cache_open(model, kp, &cache)) {
        fprintf(stderr, "generate_one: %s\n", kvs_last_error()); return 1;
    }
    double *ms = malloc(sizeof *ms * (size_t)calls);
    int n_cached = 0;
    for (int i = 0; i < 20 + calls; i++) { /* 20 warm-up calls */
        double t0 = now_ms();
        if (one_call(ctx, cache, model, &n_cached)) { fprintf(stderr, "generate_one: %s\n", kvs_last_error()); return 1; }
        if (i >= 20) ms[i - 20] = now_ms() - t0;
    }
    qsort(ms, (size_t)calls, sizeof *ms, cmp_double);
    printf("generate_one: 1-token generate, %d calls, %d thread(s), %d cached prompt tokens: "
           "median %.3f ms p10 %.3f p90 %.3f\n", calls, threads, n_cached,
           ms[calls / 2], ms[calls / 10], ms[calls * 9 / 10]);
    free(ms);
    kvs_cache_free(cache); kvs_context_free(ctx); kvs_model_free(model);
    return 0;
}
