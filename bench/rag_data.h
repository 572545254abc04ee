/*
 * The RAG evaluation data and measures shared by bench/rag_eval.c and
 * bench/rag_anatomy.c, so both run the same prompts (../shared/data, from
 * the CacheBlend authors' inputs/):
 *   MuSiQue dev   the first RAG_MUSIQUE_DOCS passages of each item as docs
 *                 ("title: text\n\n"), the question, the gold answers
 *   2WikiMQA dev  the given chunks as docs, the given query as the question
 * and the first-token KL divergence. Header-only (static); the JSON is read
 * with cJSON through tools/json_util.h (errors name the file and field).
 */
#ifndef KVS_BENCH_RAG_DATA_H
#define KVS_BENCH_RAG_DATA_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_util.h"

#define MAX_DOCS 10
#define MUSIQUE_DOCS 6
#define MAX_POOL 14   /* MuSiQue: the item's next passages (not in the prompt), a corpus for baking */

static const char *k_system =
    "You will read several passages and then answer a question about them. Answer directly from the passages, in "
    "at most five words. Do not repeat the question and do not explain.";

/* ---------------------------------------------------------------------- */
/* data                                                                    */

typedef struct item {
    const char *dataset;      /* "musique" / "2wikimqa" */
    char *docs[MAX_DOCS];
    int n_docs;
    char *pool[MAX_POOL];     /* MuSiQue: passages after the first MUSIQUE_DOCS */
    int n_pool;
    char *question;
    char **answers;           /* (n_answers), none for 2wikimqa */
    int n_answers;
} item;

static inline void item_free(item *it) {
    for (int i = 0; i < it->n_docs; i++) free(it->docs[i]);
    for (int i = 0; i < it->n_pool; i++) free(it->pool[i]);
    free(it->question);
    for (int i = 0; i < it->n_answers; i++) free(it->answers[i]);
    free(it->answers);
}

static inline cJSON *load_json(const char *path) {
    json_error e;
    cJSON *root = json_read_file(path, &e);
    if (!root) fprintf(stderr, "rag: %s\n", e.msg);
    return root;
}

/* A string member, or NULL (a wrong type is reported, naming the file and key). */
static inline const char *str_field(const cJSON *o, const char *key, const char *path) {
    const char *v = NULL;
    json_error e;
    if (json_get_string(o, key, 0, &v, &e) < 0) fprintf(stderr, "rag: %s: %s\n", path, e.msg);
    return v;
}

static inline char *cat(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = malloc(la + lb + lc + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

static inline int load_musique(const char *dir, int max_items, item *out) {
    char path[1100];
    snprintf(path, sizeof path, "%s/musique_dev.json", dir);
    cJSON *root = load_json(path);
    if (!cJSON_IsArray(root)) {
        if (root) fprintf(stderr, "rag: %s: expected an array of items\n", path);
        cJSON_Delete(root);
        return -1;
    }
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, root) {
        if (n >= max_items) break;
        const cJSON *ctxs = NULL, *ans = NULL;
        const char *q = str_field(o, "question", path);
        json_error e;
        if (!q || json_get_array(o, "ctxs", 1, &ctxs, &e) || json_get_array(o, "answers", 1, &ans, &e)) continue;
        item *it = &out[n++];
        memset(it, 0, sizeof *it);
        it->dataset = "musique";
        const cJSON *c;
        cJSON_ArrayForEach(c, ctxs) {
            if (it->n_docs >= MUSIQUE_DOCS && it->n_pool >= MAX_POOL) break;
            const char *t = str_field(c, "text", path), *ti = str_field(c, "title", path);
            if (!t) continue;
            const char *title = ti ? ti : "";
            char *head = *title ? cat(title, ": ", "") : cat("", "", "");
            if (it->n_docs < MUSIQUE_DOCS) it->docs[it->n_docs++] = cat(head, t, "\n\n");
            else it->pool[it->n_pool++] = cat(head, t, "\n\n");
            free(head);
        }
        it->question = cat("Question: ", q, "\nAnswer in at most five words.");
        it->answers = calloc((size_t)cJSON_GetArraySize(ans) + 1, sizeof *it->answers);
        const cJSON *a;
        cJSON_ArrayForEach(a, ans)
            if (cJSON_IsString(a)) it->answers[it->n_answers++] = strdup(a->valuestring);
    }
    cJSON_Delete(root);
    return n;
}

static inline int load_wiki(const char *dir, int max_items, item *out) {
    int n = 0;
    for (int f = 1; n < max_items; f++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/wikimqa_dev/%d.json", dir, f);
        if (access(path, R_OK)) break;
        cJSON *o = load_json(path);
        const char *q = o ? str_field(o, "query", path) : NULL;
        if (!q) {
            cJSON_Delete(o);
            continue;
        }
        item *it = &out[n++];
        memset(it, 0, sizeof *it);
        it->dataset = "2wikimqa";
        for (int k = 0; k < MAX_DOCS; k++) {
            char key[16];
            snprintf(key, sizeof key, "%d", k);
            const char *t = str_field(o, key, path);
            if (!t) break;
            it->docs[it->n_docs++] = strdup(t);
        }
        it->question = strdup(q);
        cJSON_Delete(o);
    }
    return n;
}

/* MuSiQue items [skip, skip + n) into out (room for skip + n); returns the
 * count, -1 if the file cannot be read. */
static inline int load_musique_range(const char *dir, int skip, int n, item *out) {
    int got = load_musique(dir, skip + n, out);
    if (got <= 0 || skip <= 0) return got;
    int k = skip < got ? skip : got;
    for (int i = 0; i < k; i++) item_free(&out[i]);
    memmove(out, out + k, (size_t)(got - k) * sizeof *out);
    return got - k;
}

/* KL(ref || q) of the two softmax distributions over n logits (float64). */
static inline double kl_first(const float *ref, const float *q, int n) {
    double mr = -INFINITY, m = -INFINITY, sr = 0, s = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        if (ref[i] > mr) mr = ref[i];
        if (q[i] > m) m = q[i];
    }
    for (int i = 0; i < n; i++) {
        sr += exp((double)ref[i] - mr);
        s += exp((double)q[i] - m);
    }
    double lr = mr + log(sr), l = m + log(s);
    for (int i = 0; i < n; i++) {
        double lp = ref[i] - lr, lq = q[i] - l;
        if (lp > -60) kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

#endif
