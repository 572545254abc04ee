/* Intrusive chunk hash map (chunk_map.h). */
#include "kv/chunk_map.h"

#include "kv/keys.h"

#include <stdlib.h>

static const kvs_key *map_key(const kvs_chunk_map *m, const kvs_chunk *c) {
    return m->content ? &c->content_key : &c->prefix_key;
}
static kvs_chunk **map_next(const kvs_chunk_map *m, kvs_chunk *c) {
    return m->content ? &c->hnext_content : &c->hnext_prefix;
}

int kvs_chunk_map_init(kvs_chunk_map *m, int content) {
    m->nb = 64;
    m->n = 0;
    m->content = content;
    m->b = calloc(m->nb, sizeof *m->b);
    return m->b ? 0 : -1;
}

void kvs_chunk_map_release(kvs_chunk_map *m) {
    free(m->b);
    m->b = NULL;
    m->nb = m->n = 0;
}

kvs_chunk *kvs_chunk_map_find(const kvs_chunk_map *m, const kvs_key *k) {
    kvs_chunk *c = m->b[kvs_key_hash(k) & (m->nb - 1)];
    while (c && !kvs_key_equal(map_key(m, c), k)) c = *map_next(m, c);
    return c;
}

static void grow(kvs_chunk_map *m) {
    size_t nb = m->nb * 2;
    kvs_chunk **b = calloc(nb, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < m->nb; i++) {
        kvs_chunk *x = m->b[i];
        while (x) {
            kvs_chunk *next = *map_next(m, x);
            size_t j = kvs_key_hash(map_key(m, x)) & (nb - 1);
            *map_next(m, x) = b[j];
            b[j] = x;
            x = next;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

void kvs_chunk_map_add(kvs_chunk_map *m, kvs_chunk *c) {
    if (m->n >= m->nb) grow(m);
    size_t j = kvs_key_hash(map_key(m, c)) & (m->nb - 1);
    *map_next(m, c) = m->b[j]; /* at the head: the newest is found first */
    m->b[j] = c;
    m->n++;
}

void kvs_chunk_map_del(kvs_chunk_map *m, kvs_chunk *c) {
    kvs_chunk **pp = &m->b[kvs_key_hash(map_key(m, c)) & (m->nb - 1)];
    while (*pp && *pp != c) pp = map_next(m, *pp);
    if (*pp) {
        *pp = *map_next(m, c);
        *map_next(m, c) = NULL;
        m->n--;
    }
}
