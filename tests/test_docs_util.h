/* Helpers of the tests that compare document (RAG) requests bit for bit:
 * a cache on the model, the same-bits check of two results, and removing a
 * test's temporary cache directory. */
#ifndef KVS_TEST_DOCS_UTIL_H
#define KVS_TEST_DOCS_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvstitch.h"
#include "rag/segments.h"
#include "test_musique.h"

/* The repair tests' prompt: this system message, MuSiQue passages, this question. */
#define KT_DOCS_SYSTEM "Answer the question from the passages, in a few words."
#define KT_DOCS_QUESTION "\n\nQuestion: Where was the author of Hannibal and Scipio educated?"

/* The repair tests' set-up: the test model, a context of 2048 tokens in
 * batches of 128 rows (so a repair runs in several batches per layer), and
 * the first n passages of MuSiQue dev item 0 cut to doc_bytes (400 under
 * KVSTITCH_TEST_QUICK: the sanitizer runs). -1 on failure. */
static inline int kt_docs_setup(size_t doc_bytes, int n, char **docs, kvs_model **model, kvs_context **ctx) {
    const char *mp = kt_model_path();
    if (!mp) return -1;
    if (kvs_model_load(mp, kvs_model_default_params(), model) != KVS_OK) {
        fprintf(stderr, "  %s: %s\n", mp, kvs_last_error());
        return -1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 2048;
    cp.n_batch = 128;
    if (kvs_context_new(*model, cp, ctx) != KVS_OK) return -1;
    const char *quick = getenv("KVSTITCH_TEST_QUICK");
    if (quick && *quick && strcmp(quick, "0")) doc_bytes = 400;
    for (int i = 0; i < n; i++)
        if (!(docs[i] = kt_musique_passage(0, i, doc_bytes))) return -1;
    return 0;
}

/* The repair tests' segments: a chat prompt of KT_DOCS_SYSTEM, docs and
 * KT_DOCS_QUESTION. */
static inline kvs_segments kt_docs_segments(char **docs, int n) {
    kvs_segments s = {1, KT_DOCS_SYSTEM, (const char *const *)docs, NULL, n, KT_DOCS_QUESTION, NULL};
    return s;
}

/* Doc segment i of a layout (NULL past the last). */
static inline const kvs_seg *kt_doc_seg(const kvs_seg_layout *lay, int i) {
    int k = 0;
    for (int j = 0; j < lay->n_segs; j++)
        if (lay->segs[j].kind == KVS_SEG_DOC && k++ == i) return &lay->segs[j];
    return NULL;
}

/* Frees a layout and what kt_docs_setup made. */
static inline void kt_docs_teardown(kvs_seg_layout *lay, char **docs, int n, kvs_context *ctx, kvs_model *model) {
    kvs_seg_layout_free(lay);
    for (int i = 0; i < n; i++) free(docs[i]);
    kvs_context_free(ctx);
    kvs_model_free(model);
}

/* A cache on model (dir: its directory, or NULL for memory only); NULL
 * after a failed check. */
static inline kvs_cache *kt_open_cache(kvs_model *model, const char *dir) {
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = dir;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(model, cp, &c);
    CHECK_MSG(st == KVS_OK, "cache open: %s", kvs_last_error());
    return c;
}

/* The same first logits (memcmp) and the same generated tokens. */
static inline int kt_same_result(const kvs_generate_result *a, const kvs_generate_result *b) {
    return a->n_vocab == b->n_vocab && !memcmp(a->first_logits, b->first_logits, (size_t)a->n_vocab * sizeof(float)) &&
           a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
}

/* rm -rf of a mkdtemp directory (the name has no quote in it). */
static inline void kt_remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", dir);
}

#endif
