/*
 * The RAG evaluation data and measures shared by bench/rag_eval.c and
 * bench/rag_anatomy.c, so both run the same prompts (../shared/data, from
 * the CacheBlend authors' inputs/):
 *   MuSiQue dev   the first RAG_MUSIQUE_DOCS passages of each item as docs
 *                 ("title: text\n\n"), the question, the gold answers
 *   2WikiMQA dev  the given chunks as docs, the given query as the question
 * and the first-token KL divergence. Header-only (static), like rag_json.h.
 */
#ifndef KVS_BENCH_RAG_DATA_H
#define KVS_BENCH_RAG_DATA_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rag_json.h"

#define MAX_DOCS 10
#define MUSIQUE_DOCS 6

static const char *k_system =
    "You will read several passages and then answer a question about them. Answer directly from the passages, in "
    "at most five words. Do not repeat the question and do not explain.";

/* ---------------------------------------------------------------------- */
/* data                                                                    */

typedef struct item {
    const char *dataset;      /* "musique" / "2wikimqa" */
    char *docs[MAX_DOCS];
    int n_docs;
    char *question;
    char **answers;           /* (n_answers), none for 2wikimqa */
    int n_answers;
} item;

static inline void item_free(item *it) {
    for (int i = 0; i < it->n_docs; i++) free(it->docs[i]);
    free(it->question);
    for (int i = 0; i < it->n_answers; i++) free(it->answers[i]);
    free(it->answers);
}

static inline rj_node *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "rag: cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    const char *err = NULL;
    rj_node *root = got == (size_t)n ? rj_parse(buf, (size_t)n, &err) : NULL;
    if (!root) fprintf(stderr, "rag: %s: %s\n", path, err ? err : "read error");
    free(buf);
    return root;
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
    rj_node *root = load_json(path);
    if (!root || root->kind != RJ_ARR) {
        rj_free(root);
        return -1;
    }
    int n = 0;
    for (int i = 0; i < root->n && n < max_items; i++) {
        rj_node *o = root->kids[i], *ctxs = rj_get(o, "ctxs"), *q = rj_get(o, "question"), *ans = rj_get(o, "answers");
        if (!ctxs || ctxs->kind != RJ_ARR || !q || q->kind != RJ_STR || !ans || ans->kind != RJ_ARR) continue;
        item *it = &out[n++];
        memset(it, 0, sizeof *it);
        it->dataset = "musique";
        for (int k = 0; k < ctxs->n && it->n_docs < MUSIQUE_DOCS; k++) {
            rj_node *t = rj_get(ctxs->kids[k], "text"), *ti = rj_get(ctxs->kids[k], "title");
            if (!t || t->kind != RJ_STR) continue;
            const char *title = ti && ti->kind == RJ_STR ? ti->s : "";
            char *head = *title ? cat(title, ": ", "") : cat("", "", "");
            it->docs[it->n_docs++] = cat(head, t->s, "\n\n");
            free(head);
        }
        it->question = cat("Question: ", q->s, "\nAnswer in at most five words.");
        it->answers = calloc((size_t)ans->n + 1, sizeof *it->answers);
        for (int k = 0; k < ans->n; k++)
            if (ans->kids[k]->kind == RJ_STR) it->answers[it->n_answers++] = strdup(ans->kids[k]->s);
    }
    rj_free(root);
    return n;
}

static inline int load_wiki(const char *dir, int max_items, item *out) {
    int n = 0;
    for (int f = 1; n < max_items; f++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/wikimqa_dev/%d.json", dir, f);
        if (access(path, R_OK)) break;
        rj_node *o = load_json(path), *q = rj_get(o, "query");
        if (!o || !q || q->kind != RJ_STR) {
            rj_free(o);
            continue;
        }
        item *it = &out[n++];
        memset(it, 0, sizeof *it);
        it->dataset = "2wikimqa";
        for (int k = 0; k < MAX_DOCS; k++) {
            char key[16];
            snprintf(key, sizeof key, "%d", k);
            rj_node *t = rj_get(o, key);
            if (!t || t->kind != RJ_STR) break;
            it->docs[it->n_docs++] = strdup(t->s);
        }
        it->question = strdup(q->s);
        rj_free(o);
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
