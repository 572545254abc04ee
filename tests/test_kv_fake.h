/*
 * A fake engine for src/kv/ tests: a KV buffer shaped like the engine's
 * (per layer K and V of (n_kv_head, n_ctx, head_dim)) whose content is a
 * pure function of the token prefix, like real causal KV: the element
 * (layer, K|V, head, slot t, d) depends on tokens[0..t] and nothing else.
 * So "cold" KV of any prompt is known exactly, and a reuse is correct iff
 * the copied bytes equal the cold bytes.
 */
#ifndef KVS_TEST_KV_FAKE_H
#define KVS_TEST_KV_FAKE_H

#include "kv/chunk.h"
#include "kv/keys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake_kv {
    kvs_kv_shape shape;
    int n_ctx;
    void *k[64], *v[64]; /* (n_layer) layer planes inside kv: (n_kv_head, n_ctx, head_dim) */
    kvs_kv_buffer kv;    /* the engine's KV buffer type */
} fake_kv;

static inline uint64_t fake_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline fake_kv *fake_kv_new(kvs_kv_shape shape, int n_ctx) {
    fake_kv *f = calloc(1, sizeof *f);
    f->shape = shape;
    f->n_ctx = n_ctx;
    if (kvs_kv_buffer_init(&f->kv, shape.n_layer, shape.n_kv_head, n_ctx, shape.head_dim, shape.dtype)) {
        free(f);
        return NULL;
    }
    for (int l = 0; l < shape.n_layer; l++) {
        f->k[l] = kvs_kv_k(&f->kv, l);
        f->v[l] = kvs_kv_v(&f->kv, l);
    }
    return f;
}

static inline void fake_kv_free(fake_kv *f) {
    if (!f) return;
    kvs_kv_buffer_release(&f->kv);
    free(f);
}

static inline void fake_kv_zero(fake_kv *f) {
    size_t bytes = (size_t)f->shape.n_kv_head * (size_t)f->n_ctx * (size_t)f->shape.head_dim *
                   kvs_kv_dtype_size(f->shape.dtype);
    for (int l = 0; l < f->shape.n_layer; l++) {
        memset(f->k[l], 0, bytes);
        memset(f->v[l], 0, bytes);
    }
}

/* The value of one element given the hash of the prefix up to its token. */
static inline uint32_t fake_elem(uint64_t prefix_hash, int l, int half, int h, int d) {
    return (uint32_t)fake_mix(prefix_hash ^ ((uint64_t)l << 40) ^ ((uint64_t)half << 39) ^ ((uint64_t)h << 24) ^
                              (uint64_t)d);
}

/* "Prefill": writes the cold KV of tokens[0..n) into slots [0, n). */
static inline void fake_kv_fill(fake_kv *f, const int32_t *tokens, int n) {
    const kvs_kv_shape *s = &f->shape;
    uint64_t ph = 0x1234567;
    for (int t = 0; t < n; t++) {
        ph = fake_mix(ph ^ (uint32_t)tokens[t]) + (uint64_t)t;
        for (int l = 0; l < s->n_layer; l++)
            for (int half = 0; half < 2; half++) {
                uint8_t *base = half ? f->v[l] : f->k[l];
                for (int h = 0; h < s->n_kv_head; h++)
                    for (int d = 0; d < s->head_dim; d++) {
                        uint32_t x = fake_elem(ph, l, half, h, d);
                        size_t idx = ((size_t)h * (size_t)f->n_ctx + (size_t)t) * (size_t)s->head_dim + (size_t)d;
                        if (s->dtype == KVS_KV_F16) ((uint16_t *)base)[idx] = (uint16_t)x;
                        else ((uint32_t *)base)[idx] = x;
                    }
            }
    }
}

/* 1 if slots [from, to) of a and b hold the same bytes in every layer. */
static inline int fake_kv_equal(const fake_kv *a, const fake_kv *b, int from, int to) {
    const kvs_kv_shape *s = &a->shape;
    size_t row = (size_t)s->head_dim * kvs_kv_dtype_size(s->dtype);
    for (int l = 0; l < s->n_layer; l++)
        for (int half = 0; half < 2; half++) {
            const uint8_t *pa = half ? a->v[l] : a->k[l], *pb = half ? b->v[l] : b->k[l];
            for (int h = 0; h < s->n_kv_head; h++) {
                size_t off = ((size_t)h * (size_t)a->n_ctx + (size_t)from) * row;
                if (memcmp(pa + off, pb + off, (size_t)(to - from) * row)) return 0;
            }
        }
    return 1;
}

/* 1 if slots [from, to) of f are all zero bytes. */
static inline int fake_kv_is_zero(const fake_kv *f, int from, int to) {
    const kvs_kv_shape *s = &f->shape;
    size_t row = (size_t)s->head_dim * kvs_kv_dtype_size(s->dtype);
    for (int l = 0; l < s->n_layer; l++)
        for (int half = 0; half < 2; half++) {
            const uint8_t *p = half ? f->v[l] : f->k[l];
            for (int h = 0; h < s->n_kv_head; h++) {
                const uint8_t *q = p + ((size_t)h * (size_t)f->n_ctx + (size_t)from) * row;
                for (size_t i = 0; i < (size_t)(to - from) * row; i++)
                    if (q[i]) return 0;
            }
        }
    return 1;
}

/* A chunk of tokens[start, end) of a path whose cold KV is in f; parent is
 * the previous chunk's prefix key (or the fingerprint when start is 0). */
static inline kvs_chunk *fake_chunk(const fake_kv *f, const kvs_key *fp, const kvs_key *parent,
                                    const int32_t *tokens, int start, int end) {
    kvs_chunk *c;
    if (kvs_chunk_new(&f->shape, end - start, 1, &c)) return NULL;
    c->pos0 = start;
    memcpy(c->tokens, tokens + start, (size_t)(end - start) * sizeof(int32_t));
    c->parent_key = *parent;
    kvs_key_prefix(parent, c->tokens, c->n_tok, &c->prefix_key);
    kvs_key_content(fp, c->tokens, c->n_tok, &c->content_key);
    kvs_chunk_copy_from_kv(c, 0, c->n_tok, &f->kv, start);
    return c;
}

#endif
