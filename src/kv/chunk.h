/*
 * A chunk: the attention K and V of a span of tokens, computed at a known
 * absolute position, plus its keys and bookkeeping. src/kv/ knows shapes and
 * bytes, never models: a chunk is described by a kvs_kv_shape only.
 *
 * Payload layout (one contiguous block, dtype f16 or f32):
 *
 *   layer 0                       layer 1            ...  layer n_layer-1
 *   +-------------+-------------+-------------+-------------+
 *   | K (h, t, d) | V (h, t, d) | K (h, t, d) | V (h, t, d) | ...
 *   +-------------+-------------+-------------+-------------+
 *     h = n_kv_head, t = n_tok, d = head_dim
 *
 * so one head of one layer is a contiguous run of n_tok * head_dim elements,
 * matching a run of the engine's per-layer KV buffer (n_kv_head, n_ctx,
 * head_dim) where slot = absolute position. Copy-in/out is therefore one
 * memcpy per (layer, K|V, head).
 *
 * Ownership: chunks are reference counted. kvs_chunk_new() returns a chunk
 * with one reference owned by the caller; the store takes its own reference
 * when it indexes a chunk, and every lookup hands out a pinned reference that
 * the caller drops with kvs_chunk_unref(). A chunk with a pin (a reference
 * beyond the store's) is never evicted or freed.
 *
 * Thread-safety: kvs_chunk_ref/unref are atomic and may be called from any
 * thread. Once a chunk is published in a store its identity fields, tokens
 * and (while pinned) payload are immutable and may be read concurrently.
 * Filling a chunk (kvs_chunk_copy_from_kv) must happen before it is shared.
 */
#ifndef KVS_KV_CHUNK_H
#define KVS_KV_CHUNK_H

#include "kvstitch.h"
#include "model/kv_buffer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A 32-byte key (SHA-256 digest): model fingerprint, prefix key, content key. */
typedef struct kvs_key {
    uint8_t b[32];
} kvs_key;

/* The KV geometry of one model + KV dtype. */
typedef struct kvs_kv_shape {
    int n_layer;
    int n_kv_head;
    int head_dim;
    kvs_kv_type dtype; /* KVS_KV_F16, F32 or Q8 rows (kernels.h) */
} kvs_kv_shape;

/* Bytes of the unit a codec shuffles in dtype's rows (2 F16, 4 F32, 1 Q8),
 * 0 for an unknown dtype. */
size_t kvs_kv_dtype_size(kvs_kv_type dtype);
/* Bytes of one token of one head: kvs_kv_row_bytes. */
static inline size_t kvs_kv_shape_row_bytes(const kvs_kv_shape *s) { return kvs_kv_row_bytes(s->dtype, s->head_dim); }
/* KVS_OK if every field is in range, else KVS_ERR_INVALID_ARG with a message. */
int kvs_kv_shape_check(const kvs_kv_shape *shape);
int kvs_kv_shape_equal(const kvs_kv_shape *a, const kvs_kv_shape *b);
/* Payload bytes of n_tok tokens: n_layer * 2 * n_kv_head * n_tok * row bytes. */
size_t kvs_kv_payload_bytes(const kvs_kv_shape *shape, int n_tok);

/*
 * The KV buffer src/kv/ reads and writes is the engine's own kvs_kv_buffer
 * (model/kv_buffer.h: one flat block, slot = position): one type for the
 * engine, the store, the tiers and the repair, so no adapter is built per
 * request. Its geometry as a chunk shape: */
static inline kvs_kv_shape kvs_kv_buffer_shape(const kvs_kv_buffer *kv) {
    kvs_kv_shape s = {kv->n_layer, kv->n_kv_head, kv->head_dim, kv->type};
    return s;
}

/* kvs_chunk.origin. A chunk of an exact history has 0: its parent chain
 * leads to position 0. */
#define KVS_CHUNK_DOC 1u    /* a document's KV computed after a doc prefix (rag/doc_cache.h): found by
                               its content, never by a prefix path; its parent is the doc prefix's key,
                               which need not be stored */
#define KVS_CHUNK_BAKED 2u  /* (with DOC) computed after neighbour documents' moved KV (kvs_bake_docs):
                               never an exact history */
#define KVS_CHUNK_NEIGHBOURS_SHIFT 8 /* bits 8..15 of a baked chunk: the neighbours it saw (at most 255) */
#define KVS_CHUNK_ORIGIN_MASK (KVS_CHUNK_DOC | KVS_CHUNK_BAKED | (0xFFu << KVS_CHUNK_NEIGHBOURS_SHIFT))
static inline int kvs_chunk_neighbours(uint32_t origin) { return (int)((origin >> KVS_CHUNK_NEIGHBOURS_SHIFT) & 0xFF); }

typedef struct kvs_chunk {
    /* Identity: set before the chunk is published, immutable after. */
    kvs_key prefix_key;  /* SHA-256(parent_key || tokens): see keys.h */
    kvs_key parent_key;  /* prefix key of the chunk before it, or the fingerprint at pos0 = 0 */
    kvs_key content_key; /* SHA-256(fingerprint || tokens) */
    kvs_kv_shape shape;
    int32_t pos0;        /* absolute position of tokens[0] when the KV was computed */
    int32_t n_tok;
    int32_t *tokens;     /* (n_tok) token ids; points inside this allocation */
    uint32_t origin;     /* KVS_CHUNK_DOC, KVS_CHUNK_BAKED | neighbours: how the KV was computed
                            (0: a piece of a prompt's exact history); the entry header's flags */

    /* Payload: NULL while the chunk lives on disk only (see store.h). */
    void *kv;            /* (n_layer, 2, n_kv_head, n_tok, head_dim) of shape.dtype */
    size_t kv_bytes;     /* kvs_kv_payload_bytes(shape, n_tok), resident or not */

    /* Bookkeeping. Times are CLOCK_REALTIME nanoseconds (they go to disk). */
    int64_t created_ns;
    _Atomic int64_t last_access_ns;
    _Atomic uint64_t n_access;

    /* Reference count: the creator's, the store's, and one per pin. */
    atomic_int refs;

    /* Private to the store (store_impl.h: LRU list, hash chains, flags). */
    struct kvs_chunk *lru_prev, *lru_next;
    struct kvs_chunk *hnext_prefix, *hnext_content;
    void *radix_node;    /* the radix node it hangs on, NULL if not prefix-reachable */
    unsigned store_flags; /* SF_INDEXED (the write lock) */
    unsigned lru_flags;   /* which LRU list it is in (lru_mu): its own word, as touches write it
                             under lru_mu alone while a load reads store_flags */
    int tier;            /* the store's tier below RAM that holds it (index in its tier list,
                            0 = the first, e.g. the cache dir); -1 = memory only */
} kvs_chunk;

/* Allocates a chunk for n_tok tokens with an uninitialised payload (payload
 * allocation is skipped when with_payload is 0: a disk-only chunk). Keys are
 * zero, created_ns = now, refs = 1. On failure *out is untouched. */
int kvs_chunk_new(const kvs_kv_shape *shape, int n_tok, int with_payload, kvs_chunk **out);
/* Adds a reference (a pin). Returns chunk. */
kvs_chunk *kvs_chunk_ref(kvs_chunk *chunk);
/* Drops a reference; frees the chunk at zero. NULL is a no-op. */
void kvs_chunk_unref(kvs_chunk *chunk);
/* How many kvs_chunk_unref calls so far (every chunk of the process) left
 * their chunk with exactly one reference: a store's eviction, which takes
 * only chunks nobody pins, knows from it whether any may have become
 * evictable since it last found none (store_lru.c). Monotonic. */
uint64_t kvs_chunk_unpins(void);

/* Bytes the chunk holds in memory: struct + tokens + resident payload.
 * This is what a store's byte budget counts. */
size_t kvs_chunk_mem_bytes(const kvs_chunk *chunk);

/* Copies tokens [off, off + n) of the chunk into the KV buffer at slots
 * [slot, slot + n) of every layer (K and V). For exact prefix reuse slot is
 * chunk->pos0 + off. Requires a resident payload and a matching shape; checks
 * bounds and returns KVS_ERR_INVALID_ARG without copying anything otherwise.
 * Safe to run concurrently on the same chunk (it only reads the chunk). */
int kvs_chunk_copy_to_kv(const kvs_chunk *chunk, int off, int n, const kvs_kv_buffer *kv, int slot);

/* Fills tokens [off, off + n) of the chunk's payload from slots [slot, slot + n)
 * of the buffer. The chunk must not be shared yet (no concurrent readers). */
int kvs_chunk_copy_from_kv(kvs_chunk *chunk, int off, int n, const kvs_kv_buffer *kv, int slot);

/* K and V of layer l inside a resident payload:
 * (n_kv_head, n_tok, head_dim) of shape.dtype each. */
static inline void *kvs_chunk_layer_k(const kvs_chunk *c, int l) {
    return (uint8_t *)c->kv + (size_t)l * 2 * (c->kv_bytes / (2 * (size_t)c->shape.n_layer));
}
static inline void *kvs_chunk_layer_v(const kvs_chunk *c, int l) {
    return (uint8_t *)c->kv + ((size_t)l * 2 + 1) * (c->kv_bytes / (2 * (size_t)c->shape.n_layer));
}

/* Current CLOCK_REALTIME in nanoseconds. */
int64_t kvs_now_ns(void);

#endif
