/* Prefix reuse in one page: a long shared context is computed once, and a
 * second question over it only computes its own tokens. Prints both times to
 * first token and checks the promise: the cached run's first logits are the
 * cold run's, byte for byte.
 *   cc prefix_reuse.c $(pkg-config --cflags --libs kvstitch) -o prefix_reuse
 *   ./prefix_reuse model.gguf */
#include <kvstitch.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call) do { int st_ = (call); if (st_ != KVS_OK) { \
    fprintf(stderr, "%s: %s (%s)\n", #call, kvs_strerror(st_), kvs_last_error()); return 1; } } while (0)

static int tokenize(kvs_model *m, const char *text, int32_t *ids, int cap, int *n) {
    return kvs_tokenize(m, text, strlen(text), KVS_TOKENIZE_ADD_BOS, ids, cap, n);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s model.gguf\n", argv[0]); return 2; }
    printf("kvstitch %s (header %d.%d.%d)\n", kvs_version(),
           KVS_VERSION_MAJOR, KVS_VERSION_MINOR, KVS_VERSION_PATCH);
    kvs_model *model = NULL; kvs_context *ctx = NULL; kvs_cache *cache = NULL;
    CHECK(kvs_model_load(argv[1], kvs_model_default_params(), &model));
    CHECK(kvs_context_new(model, kvs_context_default_params(), &ctx));
    CHECK(kvs_cache_open(model, kvs_cache_default_params(), &cache)); /* memory only */

    char text[4096] = "A manual. ";
    for (int i = 0; i < 24; i++) strcat(text, "Press the green button twice to start the pump. ");
    static int32_t a[2048], b[2048]; int na, nb;
    strcat(text, "Question: how do I start the pump?");
    CHECK(tokenize(model, text, a, 2048, &na));
    strcpy(strstr(text, "Question:"), "Question: what colour is the button?");
    CHECK(tokenize(model, text, b, 2048, &nb));

    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 8;
    kvs_reuse_params cold = kvs_reuse_default_params(), warm = kvs_reuse_default_params();
    cold.mode = KVS_REUSE_NONE; cold.store = 0;
    kvs_generate_result ra = {0}, rb_cold = {0}, rb = {0};
    CHECK(kvs_generate_cached(ctx, cache, a, na, &gp, &warm, &ra));      /* stores A's chunks */
    CHECK(kvs_generate_cached(ctx, cache, b, nb, &gp, &cold, &rb_cold)); /* B, nothing reused */
    CHECK(kvs_generate_cached(ctx, cache, b, nb, &gp, &warm, &rb));      /* B, A's prefix reused */

    int same = rb.n_vocab == rb_cold.n_vocab &&
               memcmp(rb.first_logits, rb_cold.first_logits, sizeof(float) * (size_t)rb.n_vocab) == 0;
    printf("prompt B: %d tokens, %d from the cache\n", rb.n_prompt, rb.reuse ? rb.reuse->n_cached : 0);
    printf("ttft cold %.1f ms, cached %.1f ms\n", rb_cold.ttft_ms, rb.ttft_ms);
    printf("answer: %s\n", rb.text);
    printf("first logits bit-identical to cold: %s\n", same ? "yes" : "NO");

    kvs_generate_result_free(&ra); kvs_generate_result_free(&rb_cold); kvs_generate_result_free(&rb);
    kvs_cache_free(cache); kvs_context_free(ctx); kvs_model_free(model); /* model last */
    return same ? 0 : 1;
}
