/*
 * An intrusive chained hash map over chunks, keyed by one of their keys
 * (prefix key or content key). The chain links live in the chunk
 * (hnext_prefix / hnext_content), so adding never allocates a node.
 *
 *   b[0] -> chunk -> chunk -> NULL       bucket = key hash & (nb - 1)
 *   b[1] -> NULL
 *   ...
 *
 * Average O(1) find/add/del. Not thread-safe: the store's lock guards it.
 */
#ifndef KVS_KV_CHUNK_MAP_H
#define KVS_KV_CHUNK_MAP_H

#include "kv/chunk.h"

#include <stddef.h>

typedef struct kvs_chunk_map {
    kvs_chunk **b; /* (nb) bucket heads; nb a power of two */
    size_t nb, n;
    int content;   /* 0: prefix_key / hnext_prefix, 1: content_key / hnext_content */
} kvs_chunk_map;

/* 0, or -1 when out of memory. */
int kvs_chunk_map_init(kvs_chunk_map *m, int content);
void kvs_chunk_map_release(kvs_chunk_map *m);
/* The chunk with key k (the most recently added if several), or NULL. */
kvs_chunk *kvs_chunk_map_find(const kvs_chunk_map *m, const kvs_key *k);
/* Adds c at the head of its chain. Never fails: if growing the table
 * fails the chains just get longer. */
void kvs_chunk_map_add(kvs_chunk_map *m, kvs_chunk *c);
/* Removes c if present. */
void kvs_chunk_map_del(kvs_chunk_map *m, kvs_chunk *c);

#endif
