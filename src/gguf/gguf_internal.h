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

/* Open-addressing hash index over names: slot holds entry index + 1, 0 = empty. */
typedef struct kvs_gguf_index {
    int64_t *slots;
    size_t mask;               /* slot count - 1 (power of two) */
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

/* Index lookup; -1 if absent. entries/stride as described above. */
int64_t kvs_gguf_index_find(const kvs_gguf_index *ix, const void *entries, size_t stride,
                            const char *name, size_t len);

#endif
