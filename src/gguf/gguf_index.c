/*
 * Name index for keys and tensors: entry pointers sorted by name, binary
 * search to look up. Chosen over a hash table because its cost cannot be
 * driven up by a hostile file (no collisions to craft): building is
 * O(n log n) comparisons, a lookup O(log n), and it finds duplicates for free.
 */
#include "gguf/gguf_internal.h"

#include "kvstitch.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int name_cmp(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    uint64_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, (size_t)n) : 0;
    if (c) return c;
    return alen < blen ? -1 : (alen > blen);
}

static int entry_cmp(const void *x, const void *y) {
    const kvs_gguf_str *a = *(const kvs_gguf_str *const *)x, *b = *(const kvs_gguf_str *const *)y;
    int c = name_cmp(a->ptr, a->len, b->ptr, b->len);
    if (c) return c;
    return a < b ? -1 : (a > b); /* equal names: file order, so the first stays first */
}

int kvs_gguf_index_build(kvs_gguf_index *ix, const void *entries, size_t stride, int64_t n,
                         int64_t *dup_first, int64_t *dup_second) {
    ix->n = n;
    ix->entries = entries;
    ix->stride = stride;
    ix->sorted = malloc((size_t)(n ? n : 1) * sizeof *ix->sorted);
    if (!ix->sorted) return KVS_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++)
        ix->sorted[i] = (const kvs_gguf_str *)((const char *)entries + (size_t)i * stride);
    qsort(ix->sorted, (size_t)n, sizeof *ix->sorted, entry_cmp);
    *dup_first = *dup_second = -1;
    for (int64_t i = 1; i < n; i++) {
        const kvs_gguf_str *a = ix->sorted[i - 1], *b = ix->sorted[i];
        if (name_cmp(a->ptr, a->len, b->ptr, b->len) != 0) continue;
        int64_t ia = (int64_t)(((const char *)a - (const char *)entries) / stride);
        int64_t ib = (int64_t)(((const char *)b - (const char *)entries) / stride);
        /* Report the earliest second occurrence in file order. */
        if (*dup_second < 0 || ib < *dup_second) { *dup_first = ia; *dup_second = ib; }
    }
    return KVS_OK;
}

int64_t kvs_gguf_index_find(const kvs_gguf_index *ix, const char *name, size_t len) {
    int64_t lo = 0, hi = ix->n; /* search [lo, hi) */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const kvs_gguf_str *e = ix->sorted[mid];
        int c = name_cmp(e->ptr, e->len, name, len);
        if (c == 0) return (int64_t)(((const char *)e - (const char *)ix->entries) / ix->stride);
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

void kvs_gguf_index_free(kvs_gguf_index *ix) {
    free(ix->sorted);
    ix->sorted = NULL;
    ix->n = 0;
}

/* The index reads an entry's name at the entry's own address. */
_Static_assert(offsetof(kvs_gguf_kv, key) == 0, "key must be the first member of kvs_gguf_kv");
_Static_assert(offsetof(kvs_gguf_tensor, name) == 0, "name must be the first member of kvs_gguf_tensor");
