/*
 * The model fingerprint guards the cache: entries written under one
 * fingerprint are never served under another. Each component of the
 * fingerprint (fingerprint.h: weights digest, tensor directory,
 * architecture, hparams, RoPE, KV dtype, numerics probe) is perturbed in
 * turn with the test-only hook kvs_fingerprint_test_perturb, as another
 * model, file, build or dtype would change it; a fresh cache on a directory
 * written under the real fingerprint must then serve nothing (n_cached 0,
 * the entries counted as foreign, the output a cold run's), while with the
 * hook off the same directory serves the whole prefix (so the check can
 * fail). A component left out of the hash would make its row fail.
 * kvs_model_fingerprint_hex gives a cache's fingerprint without one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/fingerprint.h"
#include "engine/context.h"
#include "harness.h"
#include "test_greedy.h"
#include "kvstitch.h"

#define N_PROMPT 160 /* chunks at 0 and 64, the tail at 128 */

static kvs_model *g_model;
static kvs_context *g_ctx;
static char g_dir[64];
static int32_t g_prompt[N_PROMPT];
static kvs_generate_result g_cold;

static kvs_cache *open_cache(void) {
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = g_dir;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(g_model, cp, &c);
    CHECK_MSG(st == KVS_OK, "cache open: %s", kvs_last_error());
    return c;
}

static int same(const kvs_generate_result *a, const kvs_generate_result *b) {
    return a->n_vocab == b->n_vocab && !memcmp(a->first_logits, b->first_logits, (size_t)a->n_vocab * sizeof(float)) &&
           a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
}

/* The prompt through a fresh cache on g_dir: n_cached (-1 on error), the
 * directory's foreign entries in *foreign. */
static int served(uint64_t *foreign, char fp_hex[65]) {
    kvs_cache *c = open_cache();
    if (!c) return -1;
    kvs_cache_fingerprint_hex(c, fp_hex);
    kvs_generate_params gp = kt_greedy(1);
    kvs_generate_result r;
    int n = -1, st = kvs_generate_cached(g_ctx, c, g_prompt, N_PROMPT, &gp, NULL, &r);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        CHECK_MSG(same(&r, &g_cold), "output differs from the cold run");
        n = r.reuse->n_cached;
        kvs_generate_result_free(&r);
    }
    kvs_cache_stats s;
    kvs_cache_get_stats(c, &s);
    *foreign = s.disk_foreign;
    kvs_cache_free(c);
    return n;
}

static const struct {
    const char *name;
    unsigned mask;
} k_components[] = {
    {"weights_digest", KVS_FP_PERTURB_WEIGHTS}, {"tensor_directory", KVS_FP_PERTURB_TENSORS},
    {"architecture", KVS_FP_PERTURB_ARCH},      {"hparams", KVS_FP_PERTURB_HPARAMS},
    {"rope", KVS_FP_PERTURB_ROPE},              {"kv_dtype", KVS_FP_PERTURB_KV_TYPE},
    {"numerics_probe", KVS_FP_PERTURB_PROBE},   {"layers", KVS_FP_PERTURB_LAYERS},
    {"metadata", KVS_FP_PERTURB_METADATA},
};
enum { N_COMPONENTS = sizeof k_components / sizeof k_components[0] };

/* The control: under the real fingerprint a fresh cache on g_dir (warmed
 * by setup) serves all but the last token. */
TEST(real_fingerprint_serves) {
    kvs_fingerprint_test_perturb(0);
    uint64_t foreign = 0;
    char hex[65];
    CHECK_EQ_INT(served(&foreign, hex), N_PROMPT - 1);
    CHECK_EQ_INT(foreign, 0);
}

/* One row per component: perturbed, nothing is served. */
static void component_never_served(int i) {
    char real[65], other[65];
    uint64_t foreign = 0;
    kvs_fingerprint_test_perturb(0);
    kvs_key a, b;
    CHECK_EQ_INT(kvs_fingerprint(g_model, KVS_KV_F16, NULL, &a), KVS_OK);
    kvs_fingerprint_test_perturb(k_components[i].mask);
    CHECK_EQ_INT(kvs_fingerprint(g_model, KVS_KV_F16, NULL, &b), KVS_OK);
    CHECK_MSG(memcmp(a.b, b.b, sizeof a.b), "%s: perturbed, the fingerprint is unchanged", k_components[i].name);
    int n = served(&foreign, other);
    CHECK_MSG(n == 0, "%s: %d tokens served under another fingerprint", k_components[i].name, n);
    CHECK_MSG(foreign >= 2, "%s: %llu foreign entries, want >= 2", k_components[i].name,
              (unsigned long long)foreign);
    kvs_fingerprint_test_perturb(0);
    /* the hook off again: the real fingerprint, and the entries serve */
    CHECK_EQ_INT(served(&foreign, real), N_PROMPT - 1);
    CHECK_MSG(strcmp(real, other), "%s: the cache's fingerprint is unchanged", k_components[i].name);
}

#define COMPONENT_TEST(idx, fn) \
    TEST(fn) { component_never_served(idx); }
COMPONENT_TEST(0, weights_digest_never_served)
COMPONENT_TEST(1, tensor_directory_never_served)
COMPONENT_TEST(2, architecture_never_served)
COMPONENT_TEST(3, hparams_never_served)
COMPONENT_TEST(4, rope_never_served)
COMPONENT_TEST(5, kv_dtype_never_served)
COMPONENT_TEST(6, numerics_probe_never_served)
COMPONENT_TEST(7, layers_never_served)
COMPONENT_TEST(8, metadata_never_served)

/* A real edited file, not the hook: a copy of the model with one byte of
 * its metadata changed (the first letter of general.name, which no forward
 * pass reads: the same weights, tensors, hparams and probe) is another file
 * and gets nothing from g_dir. v1 hashed only what this build derives from
 * the metadata, so a changed key it did not derive (gemma3's sliding
 * window, edited in place) was served the original's entries. */
TEST(edited_metadata_never_served) {
    kvs_fingerprint_test_perturb(0);
    const char *mp = kt_model_path();
    FILE *f = fopen(mp, "rb");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)size);
    CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    if (!buf) return;
    static const char key[] = "general.name";
    char *at = memmem(buf, (size_t)(size < (1 << 22) ? size : 1 << 22), key, sizeof key - 1);
    CHECK_MSG(at != NULL, "no general.name in the first 4 MiB of %s", mp);
    char path[128];
    snprintf(path, sizeof path, "%s.edited.gguf", g_dir);
    kvs_model *m2 = NULL;
    kvs_context *c2 = NULL;
    kvs_cache *cache = NULL;
    if (at) {
        char *value = at + sizeof key - 1 + 4 + 8; /* type (string), length, then the bytes */
        *value ^= 0x20;                            /* its case */
        f = fopen(path, "wb");
        CHECK(f && fwrite(buf, 1, (size_t)size, f) == (size_t)size);
        if (f) fclose(f);
    }
    free(buf);
    if (!at) return;
    CHECK_EQ_INT(kvs_model_load(path, kvs_model_default_params(), &m2), KVS_OK);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 256;
    if (m2) CHECK_EQ_INT(kvs_context_new(m2, cp, &c2), KVS_OK);
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = g_dir;
    if (c2) CHECK_EQ_INT(kvs_cache_open(m2, pp, &cache), KVS_OK);
    if (cache) {
        kvs_generate_params gp = kt_greedy(1);
        kvs_generate_result r;
        CHECK_EQ_INT(kvs_generate_cached(c2, cache, g_prompt, N_PROMPT, &gp, NULL, &r), KVS_OK);
        CHECK_EQ_INT(r.reuse->n_cached, 0);
        CHECK_MSG(same(&r, &g_cold), "the edited name changed the output");
        kvs_generate_result_free(&r);
        kvs_cache_stats s;
        kvs_cache_get_stats(cache, &s);
        CHECK_MSG(s.disk_foreign >= 2, "%llu foreign entries, want >= 2", (unsigned long long)s.disk_foreign);
        kvs_cache_free(cache);
    }
    kvs_context_free(c2);
    kvs_model_free(m2);
    unlink(path);
}

/* kvs_model_fingerprint_hex, without a cache, is what a cache of each KV
 * type roots its keys in (`cache stats -m` sorts entries by KV type with
 * it), one per KV type; a model handle loaded again gets the same. */
TEST(model_fingerprint_per_kv_type) {
    kvs_fingerprint_test_perturb(0);
    char hex[3][65];
    const kvs_kv_type types[3] = {KVS_KV_F16, KVS_KV_F32, KVS_KV_Q8};
    kvs_model *m2 = NULL;
    CHECK_EQ_INT(kvs_model_load(kt_model_path(), kvs_model_default_params(), &m2), KVS_OK);
    for (int t = 0; t < 3; t++) {
        CHECK_EQ_INT(kvs_model_fingerprint_hex(g_model, types[t], hex[t]), KVS_OK);
        kvs_cache_params cp = kvs_cache_default_params();
        cp.kv_type = types[t];
        kvs_cache *c = NULL;
        char of_cache[65] = "", again[65] = "";
        CHECK_EQ_INT(kvs_cache_open(g_model, cp, &c), KVS_OK);
        kvs_cache_fingerprint_hex(c, of_cache);
        kvs_cache_free(c);
        CHECK_MSG(!strcmp(hex[t], of_cache), "%s: %s, a cache of it: %s", kvs_kv_type_name(types[t]), hex[t], of_cache);
        if (m2) CHECK_EQ_INT(kvs_model_fingerprint_hex(m2, types[t], again), KVS_OK);
        CHECK_MSG(!strcmp(hex[t], again), "%s: another handle of the model: %s", kvs_kv_type_name(types[t]), again);
        for (int u = 0; u < t; u++) CHECK_MSG(strcmp(hex[t], hex[u]), "%s and %s share a fingerprint",
                                              kvs_kv_type_name(types[t]), kvs_kv_type_name(types[u]));
    }
    char untouched[65] = "x";
    CHECK_EQ_INT(kvs_model_fingerprint_hex(g_model, (kvs_kv_type)77, untouched), KVS_ERR_INVALID_ARG);
    CHECK(!strcmp(untouched, "x"));
    CHECK_EQ_INT(kvs_model_fingerprint_hex(NULL, KVS_KV_F16, untouched), KVS_ERR_INVALID_ARG);
    kvs_model_free(m2);
}

static int setup(void) {
    const char *mp = kt_model_path();
    if (!mp) return -1;
    if (kvs_model_load(mp, kvs_model_default_params(), &g_model) != KVS_OK) return -1;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 256;
    if (kvs_context_new(g_model, cp, &g_ctx) != KVS_OK) return -1;
    int n_vocab = kvs_context_n_vocab(g_ctx);
    for (int i = 0; i < N_PROMPT; i++) g_prompt[i] = (int32_t)((i * 4099 + 7) % n_vocab);
    kvs_generate_params gp = kt_greedy(1);
    if (kvs_generate(g_ctx, g_prompt, N_PROMPT, &gp, &g_cold) != KVS_OK) return -1;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvs-test-fp-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    /* g_dir: the prompt's chunks under the real fingerprint */
    kvs_cache *c = open_cache();
    if (!c) return -1;
    kvs_warm_report w;
    int st = kvs_warm(g_ctx, c, g_prompt, N_PROMPT, &w);
    kvs_cache_free(c);
    return st || w.n_stored < 2 ? -1 : 0;
}

int main(void) {
    if (setup()) return kt_setup_failed(kvs_last_error());
    RUN(real_fingerprint_serves);
    RUN(weights_digest_never_served);
    RUN(tensor_directory_never_served);
    RUN(architecture_never_served);
    RUN(hparams_never_served);
    RUN(rope_never_served);
    RUN(kv_dtype_never_served);
    RUN(numerics_probe_never_served);
    RUN(layers_never_served);
    RUN(metadata_never_served);
    RUN(edited_metadata_never_served);
    RUN(model_fingerprint_per_kv_type);
    kvs_fingerprint_test_perturb(0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", g_dir);
    kvs_generate_result_free(&g_cold);
    kvs_context_free(g_ctx);
    kvs_model_free(g_model);
    return kt_summary();
}
