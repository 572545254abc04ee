/* KV buffer allocation (layout in kv_buffer.h) and its decode layout. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/kv_buffer.h"

int kvs_kv_buffer_init(kvs_kv_buffer *kv, int n_layer, int n_kv_head, int n_ctx, int head_dim,
                       kvs_kv_type type) {
    if (n_layer <= 0 || n_kv_head <= 0 || n_ctx <= 0 || head_dim <= 0 || !kvs_kv_row_bytes(type, head_dim))
        return kvs_error(KVS_ERR_INVALID_ARG, "kv buffer: bad shape (%d layers, %d heads, %d slots, dim %d, type %d)",
                         n_layer, n_kv_head, n_ctx, head_dim, (int)type);
    memset(kv, 0, sizeof *kv);
    kv->n_layer = n_layer;
    kv->n_kv_head = n_kv_head;
    kv->n_ctx = n_ctx;
    kv->head_dim = head_dim;
    kv->type = type;
    kv->row_bytes = kvs_kv_row_bytes(type, head_dim);
    kv->head_bytes = (size_t)n_ctx * kv->row_bytes;
    kv->plane_bytes = (size_t)n_kv_head * kv->head_bytes;
    /* calloc of a large block maps zero pages lazily: a context sized for
     * 8192 tokens costs resident memory only for the slots it writes. */
    kv->data = calloc((size_t)n_layer * 2, kv->plane_bytes);
    if (!kv->data)
        return kvs_error(KVS_ERR_NOMEM, "kv buffer: cannot allocate %zu bytes for %d slots",
                         (size_t)n_layer * 2 * kv->plane_bytes, n_ctx);
    /* rows some path can lay out (whether the path in use reads it is
     * asked per step: tests switch paths) */
    if (kvs_attn_layout_fits(type, head_dim)) {
        kv->layout = calloc(1, sizeof *kv->layout);
        if (kv->layout && !(kv->layout->built = calloc((size_t)n_layer * 2, sizeof(int)))) {
            free(kv->layout);
            kv->layout = NULL;
        }
        if (kv->layout) {
            kv->layout->layer_bytes = (size_t)n_kv_head * kvs_attn_layout_head_bytes(head_dim, n_ctx);
            kv->layout->base = kv->layout->built + n_layer;
        }
    }
    return KVS_OK;
}

int kvs_kv_buffer_track_exact(kvs_kv_buffer *kv) {
    kv->exact = calloc(1, sizeof *kv->exact);
    if (kv->exact && !(kv->exact->tok = malloc((size_t)kv->n_ctx * sizeof *kv->exact->tok))) {
        free(kv->exact);
        kv->exact = NULL;
    }
    return kv->exact ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "kv buffer: out of memory for %d slots' tokens", kv->n_ctx);
}

void kvs_kv_buffer_release(kvs_kv_buffer *kv) {
    free(kv->data);
    kv->data = NULL;
    free(kv->written);
    kv->written = NULL;
    if (kv->exact) {
        free(kv->exact->tok);
        free(kv->exact);
        kv->exact = NULL;
    }
    if (kv->layout) {
        free(kv->layout->raw);
        free(kv->layout->built);
        free(kv->layout);
        kv->layout = NULL;
    }
}

/* An environment switch read once: 1 set (not "0"), 0 "0", else dflt. */
static int env_switch(atomic_int *cached, const char *name, int dflt) {
    int v = atomic_load_explicit(cached, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv(name);
        v = e && *e ? strcmp(e, "0") != 0 : dflt;
        atomic_store_explicit(cached, v, memory_order_relaxed);
    }
    return v;
}

/* KVSTITCH_VERIFY_KV_LAYOUT=1: check every layout read (the tests). */
static int verify_layout(void) {
    static atomic_int on = -1;
    return env_switch(&on, "KVSTITCH_VERIFY_KV_LAYOUT", 0);
}

/* KVS_DECODE_LAYOUT=0: no decode layout (Q8 at half f16's memory while
 * decoding too; side-by-side benchmarks). */
static int layout_on(void) {
    static atomic_int on = -1;
    return env_switch(&on, "KVS_DECODE_LAYOUT", 1);
}

/* Layer l's built slots rebuilt from its rows over a copy: a stale one
 * (a writer without kvs_kv_wrote) aborts. */
static void check_layout(const kvs_kv_buffer *kv, int l, const uint8_t *have) {
    const kvs_kv_layout *ly = kv->layout;
    void *fresh = aligned_alloc(64, ly->layer_bytes);
    if (!fresh) return;
    memcpy(fresh, have, ly->layer_bytes);
    kvs_attn_layout_build(kv->type, kvs_kv_k(kv, l), kvs_kv_v(kv, l), kv->n_kv_head, kv->head_dim, kv->n_ctx,
                          ly->base[l], ly->built[l], fresh);
    if (memcmp(fresh, have, ly->layer_bytes) != 0) {
        fprintf(stderr, "kv buffer: layer %d's decode layout of slots [%d, %d) differs from its rows (a write "
                        "without kvs_kv_wrote)\n", l, ly->base[l], ly->built[l]);
        abort();
    }
    free(fresh);
}

/* Builds slots [from, to) of layer l's layout at data; 0, or -1 (no
 * builder after all: the path switched since kvs_attn_layout_wanted). */
static int build_slots(const kvs_kv_buffer *kv, int l, int from, int to, uint8_t *data) {
    return kvs_attn_layout_build(kv->type, kvs_kv_k(kv, l), kvs_kv_v(kv, l), kv->n_kv_head, kv->head_dim, kv->n_ctx,
                                 from, to, data);
}

const kvs_attn_layout *kvs_kv_layout_for(const kvs_kv_buffer *kv, int l, int n, int group, int window,
                                         kvs_attn_layout *out) {
    kvs_kv_layout *ly = kv->layout;
    if (!ly || ly->off || !layout_on() || !kvs_attn_layout_wanted(kv->type, kv->head_dim, group)) return NULL;
    if (!ly->data) {
        /* calloc, as the rows: pages mapped as slots get built (2 MiB pages
         * measured no faster: 1.000x, 8 paired rounds) */
        ly->raw = calloc(1, (size_t)kv->n_layer * ly->layer_bytes + 64);
        if (!ly->raw) {
            ly->off = 1;
            return NULL;
        }
        ly->data = (void *)(((uintptr_t)ly->raw + 63) & ~(uintptr_t)63);
    }
    uint8_t *data = (uint8_t *)ly->data + (size_t)l * ly->layer_bytes;
    if (verify_layout()) check_layout(kv, l, data);
    if (n > kv->n_ctx) n = kv->n_ctx;
    const int to = n & ~15;
    /* a sliding window's layer: from the step's first visible slot on */
    int want = window > 0 && n > window ? (n - window) & ~15 : 0;
    if (want > to) want = to;
    int *lo = &ly->base[l], *hi = &ly->built[l];
    if (*hi <= *lo) *lo = *hi = want; /* nothing built: start there */
    if (want < *lo) {
        if (build_slots(kv, l, want, *lo, data)) return NULL;
        *lo = want;
    }
    if (to > *hi) {
        if (build_slots(kv, l, *hi, to, data)) return NULL;
        *hi = to;
    }
    *out = (kvs_attn_layout){.data = data, .n = *hi, .lo = *lo};
    return out;
}

size_t kvs_kv_buffer_bytes(const kvs_kv_buffer *kv) {
    return (size_t)kv->n_layer * 2 * kv->plane_bytes;
}
