/*
 * doc_reuse_ttft: time to first token of a document prompt whose documents
 * are computed on the spot (an empty cache: computed and stored) against the
 * same prompt with the documents cached (moved and repaired), side by side
 * in each repetition. Moved here from tests/test_repair.c, which asserted
 * "cached docs are faster" inside a correctness test. Public API only.
 *   KVSTITCH_MODEL   the model (make bench sets it)
 *   argv[1]          repetitions (default 3)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstitch.h"

#define N_DOCS 3
#define MAX_REPS 15

/* ~250 words of deterministic filler text per document. */
static char *make_doc(int which) {
    static const char *const words[] = {"river", "castle", "winter", "scholar", "harbor", "engine", "garden",
                                        "treaty", "signal", "market", "forest", "author", "bridge", "valley"};
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    unsigned x = 2654435761u * (unsigned)(which + 1);
    for (int i = 0; i < 250; i++) {
        x = x * 1103515245u + 12345u;
        len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? (i % 12 ? " " : ". ") : "", words[(x >> 16) % 14]);
    }
    snprintf(s + len, cap - len, ".");
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *mp = getenv("KVSTITCH_MODEL");
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (!mp || !*mp) {
        fprintf(stderr, "doc_reuse_ttft: set KVSTITCH_MODEL\n");
        return 1;
    }
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "doc_reuse_ttft: repetitions must be in 1..%d, got %s\n", MAX_REPS, argv[1]);
        return 1;
    }
    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    if (kvs_model_load(mp, kvs_model_default_params(), &model) != KVS_OK) {
        fprintf(stderr, "doc_reuse_ttft: %s\n", kvs_last_error());
        return 1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 2048;
    int rc = 1;
    char *docs[N_DOCS] = {0};
    if (kvs_context_new(model, cp, &ctx) != KVS_OK) goto out;
    for (int i = 0; i < N_DOCS; i++)
        if (!(docs[i] = make_doc(i))) goto out;
    const char *dp[N_DOCS] = {docs[0], docs[1], docs[2]};
    kvs_segments seg = {1, "Answer from the passages.", dp, NULL, N_DOCS, "\n\nQuestion: which river?", NULL};
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1;
    gp.sampling.temperature = 0;
    double cold[MAX_REPS], warm[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        kvs_cache *c = NULL;
        if (kvs_cache_open(model, kvs_cache_default_params(), &c) != KVS_OK) goto out;
        kvs_generate_result a, b;
        int st = kvs_generate_segments(ctx, c, &seg, &gp, NULL, &a); /* documents computed and stored */
        if (!st) {
            st = kvs_generate_segments(ctx, c, &seg, &gp, NULL, &b); /* documents cached */
            if (!st) {
                cold[r] = a.ttft_ms;
                warm[r] = b.ttft_ms;
                kvs_generate_result_free(&b);
            }
            kvs_generate_result_free(&a);
        }
        kvs_cache_free(c);
        if (st) {
            fprintf(stderr, "doc_reuse_ttft: %s\n", kvs_last_error());
            goto out;
        }
    }
    qsort(cold, (size_t)reps, sizeof cold[0], cmp_double);
    qsort(warm, (size_t)reps, sizeof warm[0], cmp_double);
    printf("doc_reuse_ttft: %d docs, default repair, median of %d: documents computed %.1f ms, cached %.1f ms, "
           "%.2fx\n",
           N_DOCS, reps, cold[reps / 2], warm[reps / 2], cold[reps / 2] / warm[reps / 2]);
    rc = 0;
out:
    for (int i = 0; i < N_DOCS; i++) free(docs[i]);
    kvs_context_free(ctx);
    kvs_model_free(model);
    return rc;
}
