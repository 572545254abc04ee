/*
 * Tokenizer speed: tokenizes every MuSiQue dev passage (50 items x 10 ctxs
 * texts, ~1.2 MB, ../shared/data/musique_dev.json) with the SmolLM2
 * tokenizer through the public API, 5 times, and prints the median time
 * and throughput. A timing print, not an assertion.
 *
 *   bench_tokenizer [MODEL.gguf] [musique_dev.json]
 * defaults: $KVSTITCH_MODEL and $KVSTITCH_SHARED/data/musique_dev.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json_util.h"
#include "kvstitch.h"

#define RUNS 5

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *model_path = argc > 1 ? argv[1] : getenv("KVSTITCH_MODEL");
    char data_path[1024];
    const char *shared = getenv("KVSTITCH_SHARED");
    snprintf(data_path, sizeof data_path, "%s", argc > 2 ? argv[2] : "");
    if (argc <= 2) snprintf(data_path, sizeof data_path, "%s/data/musique_dev.json", shared && *shared ? shared : "../shared");
    if (!model_path) { fprintf(stderr, "bench_tokenizer: set KVSTITCH_MODEL or pass the model path\n"); return 1; }

    json_error err;
    cJSON *json = json_read_file(data_path, &err);
    if (!json) { fprintf(stderr, "bench_tokenizer: %s\n", err.msg); return 1; }
    /* Passages: the "text" of every ctxs entry of every item. */
    char **texts = NULL;
    size_t *lens = NULL, n_texts = 0, cap_texts = 0, total = 0;
    const cJSON *item_, *ctx;
    cJSON_ArrayForEach(item_, json) {
        const cJSON *ctxs = NULL;
        if (json_get_array(item_, "ctxs", 0, &ctxs, &err)) continue;
        cJSON_ArrayForEach(ctx, ctxs) {
            const char *t = NULL;
            if (json_get_string(ctx, "text", 0, &t, &err)) continue;
            if (n_texts == cap_texts) {
                cap_texts = cap_texts ? 2 * cap_texts : 64;
                texts = realloc(texts, cap_texts * sizeof *texts);
                lens = realloc(lens, cap_texts * sizeof *lens);
            }
            texts[n_texts] = (char *)t;
            lens[n_texts] = strlen(t);
            total += lens[n_texts++];
        }
    }

    kvs_model_params mp = kvs_model_default_params();
    mp.vocab_only = 1;
    kvs_model *model = NULL;
    double t0 = now_ms();
    if (kvs_model_load(model_path, mp, &model) != KVS_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", kvs_last_error());
        return 1;
    }
    double load_ms = now_ms() - t0;

    int cap = 1 << 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    double times[RUNS];
    long n_tokens = 0;
    for (int r = 0; r < RUNS; r++) {
        n_tokens = 0;
        t0 = now_ms();
        for (size_t i = 0; i < n_texts; i++) {
            int n = 0;
            if (kvs_tokenize(model, texts[i], lens[i], 0, ids, cap, &n) != KVS_OK) {
                fprintf(stderr, "bench_tokenizer: passage %zu: %s\n", i, kvs_last_error());
                return 1;
            }
            n_tokens += n;
        }
        times[r] = now_ms() - t0;
    }
    for (int i = 1; i < RUNS; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double x = times[j]; times[j] = times[j - 1]; times[j - 1] = x;
        }
    double med = times[RUNS / 2];
    printf("tokenizer: %zu MuSiQue passages, %.2f MB, %ld tokens (SmolLM2 vocab load %.1f ms)\n", n_texts,
           total / 1e6, n_tokens, load_ms);
    printf("tokenizer: median of %d runs %.1f ms (min %.1f, max %.1f), %.2f MB/s, %.2f Mtok/s\n", RUNS, med,
           times[0], times[RUNS - 1], total / 1e6 / (med / 1e3), n_tokens / 1e6 / (med / 1e3));
    free(ids);
    free(texts);
    free(lens);
    cJSON_Delete(json);
    kvs_model_free(model);
    return 0;
}
