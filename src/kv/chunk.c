#include "kv/chunk.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Payloads are 64-byte aligned so that copies and checksums run on whole
 * cache lines. */
#define KVS_CHUNK_ALIGN 64

int64_t kvs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The KV dtypes: name and codec unit. */
static const struct {
    const char *name;
    size_t unit;
} kv_types[] = {
    [KVS_KV_F16] = {"f16", 2},
    [KVS_KV_F32] = {"f32", 4},
    [KVS_KV_Q8] = {"q8", 1}, /* levels and scale bytes: no wider unit lines up */
};
#define N_KV_TYPES (int)(sizeof kv_types / sizeof kv_types[0])

size_t kvs_kv_dtype_size(kvs_kv_type dtype) {
    return (int)dtype >= 0 && (int)dtype < N_KV_TYPES ? kv_types[dtype].unit : 0;
}

const char *kvs_kv_type_name(kvs_kv_type type) {
    return (int)type >= 0 && (int)type < N_KV_TYPES ? kv_types[type].name : NULL;
}

int kvs_kv_type_parse(const char *name, kvs_kv_type *out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_kv_type_parse: NULL out");
    for (int t = 0; name && t < N_KV_TYPES; t++)
        if (!strcmp(name, kv_types[t].name)) {
            *out = (kvs_kv_type)t;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown KV type '%s' (f16, f32 or q8)", name ? name : "(null)");
}

int kvs_kv_shape_check(const kvs_kv_shape *s) {
    if (!s) return kvs_error(KVS_ERR_INVALID_ARG, "kv shape: NULL");
    if (s->n_layer <= 0 || s->n_layer > 4096 || s->n_kv_head <= 0 || s->n_kv_head > 4096 ||
        s->head_dim <= 0 || s->head_dim > 65536)
        return kvs_error(KVS_ERR_INVALID_ARG, "kv shape: n_layer %d, n_kv_head %d, head_dim %d out of range",
                         s->n_layer, s->n_kv_head, s->head_dim);
    if (!kvs_kv_dtype_size(s->dtype))
        return kvs_error(KVS_ERR_INVALID_ARG, "kv shape: unknown dtype %d", (int)s->dtype);
    return KVS_OK;
}

int kvs_kv_shape_equal(const kvs_kv_shape *a, const kvs_kv_shape *b) {
    return a->n_layer == b->n_layer && a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
           a->dtype == b->dtype;
}

size_t kvs_kv_payload_bytes(const kvs_kv_shape *s, int n_tok) {
    return (size_t)s->n_layer * 2 * (size_t)s->n_kv_head * (size_t)n_tok * kvs_kv_shape_row_bytes(s);
}

int kvs_chunk_new(const kvs_kv_shape *shape, int n_tok, int with_payload, kvs_chunk **out) {
    int rc = kvs_kv_shape_check(shape);
    if (rc) return rc;
    if (n_tok <= 0 || n_tok > (1 << 24))
        return kvs_error(KVS_ERR_INVALID_ARG, "chunk: n_tok %d out of range", n_tok);
    /* struct and token ids in one allocation; the payload apart, because a
     * disk-backed chunk drops and reloads it while staying indexed. */
    kvs_chunk *c = calloc(1, sizeof *c + (size_t)n_tok * sizeof(int32_t));
    if (!c) return kvs_error(KVS_ERR_NOMEM, "chunk: out of memory for %d tokens", n_tok);
    c->shape = *shape;
    c->n_tok = n_tok;
    c->tokens = (int32_t *)(c + 1);
    c->kv_bytes = kvs_kv_payload_bytes(shape, n_tok);
    if (with_payload) {
        size_t alloc = (c->kv_bytes + KVS_CHUNK_ALIGN - 1) / KVS_CHUNK_ALIGN * KVS_CHUNK_ALIGN;
        c->kv = aligned_alloc(KVS_CHUNK_ALIGN, alloc);
        if (!c->kv) {
            free(c);
            return kvs_error(KVS_ERR_NOMEM, "chunk: out of memory for a %zu-byte payload", alloc);
        }
    }
    c->created_ns = kvs_now_ns();
    atomic_init(&c->last_access_ns, c->created_ns);
    atomic_init(&c->n_access, 0);
    atomic_init(&c->refs, 1);
    c->tier = -1;
    *out = c;
    return KVS_OK;
}

kvs_chunk *kvs_chunk_ref(kvs_chunk *c) {
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}

/* Drops that left a chunk with one reference: a store's, once the last
 * pin is gone (kvs_chunk_unpins). One counter for the process: a drop in
 * another store costs a store at most one needless walk. */
static _Atomic uint64_t unpins;

uint64_t kvs_chunk_unpins(void) { return atomic_load(&unpins); }

void kvs_chunk_unref(kvs_chunk *c) {
    if (!c) return;
    /* acq_rel: the thread that frees must see every other thread's use. */
    const int had = atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel);
    if (had == 1) {
        free(c->kv);
        free(c);
    } else if (had == 2) {
        atomic_fetch_add(&unpins, 1); /* seq_cst: a later check on any thread sees it */
    }
}

size_t kvs_chunk_mem_bytes(const kvs_chunk *c) {
    return sizeof *c + (size_t)c->n_tok * sizeof(int32_t) + (c->kv ? c->kv_bytes : 0);
}

static int check_copy(const kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot,
                      const char *what) {
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "%s: chunk at pos %d has no resident payload", what, c->pos0);
    kvs_kv_shape shape = kvs_kv_buffer_shape(kv);
    if (!kvs_kv_shape_equal(&c->shape, &shape))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: chunk and KV buffer shapes differ", what);
    if (off < 0 || n < 0 || off > c->n_tok - n)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: tokens [%d, %d) outside the chunk's %d", what, off,
                         off + n, c->n_tok);
    if (slot < 0 || slot > kv->n_ctx - n)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: slots [%d, %d) outside the KV buffer's %d", what, slot,
                         slot + n, kv->n_ctx);
    return KVS_OK;
}

/* One memcpy per (layer, K|V, head): the runs are contiguous on both sides. */
static void copy_runs(const kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot, int to_kv) {
    const kvs_kv_shape *s = &c->shape;
    const size_t row = kvs_kv_shape_row_bytes(s);          /* one token of one head */
    const size_t run = (size_t)n * row;
    const size_t chunk_head = (size_t)c->n_tok * row;      /* one head in the chunk */
    const size_t chunk_half = (size_t)s->n_kv_head * chunk_head; /* K or V of a layer */
    uint8_t *payload = c->kv;
    for (int l = 0; l < s->n_layer; l++) {
        for (int half = 0; half < 2; half++) {
            uint8_t *cbase = payload + ((size_t)l * 2 + (size_t)half) * chunk_half + (size_t)off * row;
            for (int h = 0; h < s->n_kv_head; h++) {
                uint8_t *cp = cbase + (size_t)h * chunk_head;
                uint8_t *bp = kvs_kv_at(kv, l, half, h, slot);
                if (to_kv) memcpy(bp, cp, run);
                else memcpy(cp, bp, run);
            }
        }
    }
}

int kvs_chunk_copy_to_kv(const kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot) {
    int rc = check_copy(c, off, n, kv, slot, "chunk copy-in");
    if (rc) return rc;
    kvs_kv_wrote(kv, -1, slot);
    if (n) copy_runs(c, off, n, kv, slot, 1);
    kvs_kv_mark_run(kv, slot, n);
    return KVS_OK;
}

int kvs_chunk_copy_from_kv(kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot) {
    int rc = check_copy(c, off, n, kv, slot, "chunk copy-out");
    if (rc) return rc;
    if (n) copy_runs(c, off, n, kv, slot, 0);
    return KVS_OK;
}
