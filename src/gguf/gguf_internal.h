/*
 * Internals shared by the GGUF reader's files (parse in gguf.c, metadata
 * getters in gguf_meta.c). Not part of any contract; include gguf.h instead.
 */
#ifndef KVS_GGUF_INTERNAL_H
#define KVS_GGUF_INTERNAL_H

#include "gguf/gguf.h"

#include <stdint.h>

/* One metadata pair. The key must stay the first member: the name index
 * reads names at entry + i * stride, for kvs and tensors alike. */
typedef struct kvs_gguf_kv {
    kvs_gguf_str key;
    kvs_gguf_vtype type;
    size_t value_off;          /* file offset of the value (after the type tag) */
    /* Arrays only. */
    kvs_gguf_vtype elem_type;
    uint64_t n;                /* element count */
    size_t data_off;           /* file offset of the first element */
    uint64_t *str_offs;        /* string arrays: file offset of each element's u64 length */
} kvs_gguf_kv;

/* Name index (gguf_index.c): pointers to the entries' names, sorted. */
typedef struct kvs_gguf_index {
    const kvs_gguf_str **sorted; /* (n) */
    int64_t n;
    const void *entries;         /* entry i's name is at entries + i * stride */
    size_t stride;
} kvs_gguf_index;

struct kvs_gguf {
    const uint8_t *base;       /* the whole file */
    size_t size;
    int mapped;                /* 1: base is our mmap, unmap on close */
    char *path;                /* for messages; "<memory>" for open_memory */
    uint32_t version;
    size_t alignment;
    size_t data_offset;        /* start of the tensor data section */
    int64_t n_kv;
    kvs_gguf_kv *kv;           /* (n_kv) */
    int64_t n_tensors;
    kvs_gguf_tensor *tensors;  /* (n_tensors) */
    kvs_gguf_index key_index;
    kvs_gguf_index tensor_index;
};

/* Builds the index over n entries. Reports the first duplicate name in file
 * order as (*dup_first, *dup_second) entry indices, else both -1. Returns
 * KVS_ERR_NOMEM (no message) if allocation fails. */
int kvs_gguf_index_build(kvs_gguf_index *ix, const void *entries, size_t stride, int64_t n,
                         int64_t *dup_first, int64_t *dup_second);
/* Entry index of name, or -1. */
int64_t kvs_gguf_index_find(const kvs_gguf_index *ix, const char *name, size_t len);
void kvs_gguf_index_free(kvs_gguf_index *ix);

#endif
