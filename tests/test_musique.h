/*
 * Test data from ../shared: the ctx-th passage of MuSiQue dev item `item`
 * (a crude JSON scan of musique_dev.json, enough for its "text" strings).
 * max = 0: the whole passage; else cut to at most max bytes and back to the
 * last space. NULL if the file is missing. malloc'd.
 */
#ifndef KVS_TEST_MUSIQUE_H
#define KVS_TEST_MUSIQUE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static inline char *kt_musique_passage(int item, int ctx, size_t max) {
    char path[512];
    snprintf(path, sizeof path, "%s/data/musique_dev.json", kt_shared_dir());
    char *all = kt_read_file(path, NULL);
    if (!all) return NULL;
    const char *p = all;
    int want = item * 10 + ctx;
    for (int i = 0; p && i <= want; i++) {
        p = strstr(p, "\"text\": \"");
        if (p && i < want) p += 9;
    }
    char *out = NULL;
    if (p) {
        p += 9;
        const char *e = p;
        while (*e && !(*e == '"' && e[-1] != '\\')) e++;
        out = malloc((size_t)(e - p) + 1);
        size_t k = 0;
        for (const char *c = p; c < e && (!max || k < max); c++) {
            if (*c == '\\' && c + 1 < e) { c++; out[k++] = *c == 'n' ? '\n' : *c; continue; }
            out[k++] = *c;
        }
        if (max)
            while (k > 0 && out[k - 1] != ' ') k--;
        out[k] = 0;
    }
    free(all);
    return out;
}

#endif
