/*
 * GGUF reader (v2, v3). The file is mmapped read-only; every string and array
 * returned points into the mapping and lives as long as the kvs_gguf.
 *
 * File layout:
 *   +---------+---------+-----------+----------+------------------------+
 *   | "GGUF"  | version | n_tensors | n_kv     | kv pairs (key, type,   |
 *   | u32     | u32     | u64       | u64      | value)...              |
 *   +---------+---------+-----------+----------+------------------------+
 *   | tensor infos (name, n_dims, ne[n_dims] u64, type u32, offset u64)  |
 *   +--------------------------------------------------------------------+
 *   | padding to general.alignment (default 32) | tensor data ...        |
 *   +--------------------------------------------------------------------+
 *
 * Opening validates everything up front (bounds, counts, string lengths,
 * nested arrays, tensor types, shapes, alignment, data ranges), so the
 * accessors below never read out of bounds. Errors return KVS_ERR_FORMAT /
 * KVS_ERR_UNSUPPORTED with kvs_last_error() naming the key or tensor.
 *
 * A kvs_gguf is immutable after open: any number of threads may use the
 * accessors at once. (A file truncated by someone else while mapped can
 * still fault with SIGBUS, as with any mmap.)
 */
#ifndef KVS_GGUF_H
#define KVS_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef enum kvs_gguf_vtype {
    KVS_GGUF_U8 = 0, KVS_GGUF_I8 = 1, KVS_GGUF_U16 = 2, KVS_GGUF_I16 = 3,
    KVS_GGUF_U32 = 4, KVS_GGUF_I32 = 5, KVS_GGUF_F32 = 6, KVS_GGUF_BOOL = 7,
    KVS_GGUF_STRING = 8, KVS_GGUF_ARRAY = 9, KVS_GGUF_U64 = 10, KVS_GGUF_I64 = 11,
    KVS_GGUF_F64 = 12,
    KVS_GGUF_VTYPE_COUNT
} kvs_gguf_vtype;

/* ggml tensor type ids, as stored in GGUF. */
typedef enum kvs_ggml_type {
    KVS_TYPE_F32 = 0, KVS_TYPE_F16 = 1, KVS_TYPE_Q4_0 = 2, KVS_TYPE_Q4_1 = 3,
    KVS_TYPE_Q5_0 = 6, KVS_TYPE_Q5_1 = 7, KVS_TYPE_Q8_0 = 8, KVS_TYPE_Q8_1 = 9,
    KVS_TYPE_Q2_K = 10, KVS_TYPE_Q3_K = 11, KVS_TYPE_Q4_K = 12, KVS_TYPE_Q5_K = 13,
    KVS_TYPE_Q6_K = 14, KVS_TYPE_Q8_K = 15, KVS_TYPE_BF16 = 30,
} kvs_ggml_type;

/* How a block's float scale is encoded (kvs_type_traits.scale_enc). */
typedef enum kvs_scale_enc { KVS_SCALE_NONE = 0, KVS_SCALE_F16, KVS_SCALE_BF16, KVS_SCALE_F32 } kvs_scale_enc;

typedef struct kvs_type_traits {
    const char *name;   /* "Q4_1" */
    int block_size;     /* elements per block (1 for F32/F16/BF16) */
    int type_size;      /* bytes per block */
    int supported;      /* 1 if the kernels can compute with it */
    /* The block's float fields (scales, mins; for float types the element
     * itself): n_scales of them, encoded as scale_enc, at byte offsets
     * scale_off. Read by kvs_type_find_nonfinite. */
    int scale_enc;      /* kvs_scale_enc */
    int n_scales;
    int scale_off[2];
} kvs_type_traits;

/* NULL for type ids the reader does not know. */
const kvs_type_traits *kvs_type_traits_of(int type);
/* Bytes of one row of n elements; 0 if n is not a multiple of the block size. */
size_t kvs_type_row_bytes(int type, int64_t n);
/* Index of the first block of data (nbytes: whole blocks of type) one of
 * whose float fields is inf or NaN (for float types: of the first such
 * element); -1 if there is none. A model's weights are checked with it at
 * load: a non-finite scale makes every output it touches NaN or inf, and a
 * NaN's payload bits would depend on each kernel's operand order (so the
 * ISA paths would no longer agree bit for bit). */
int64_t kvs_type_find_nonfinite(int type, const void *data, size_t nbytes);

typedef struct kvs_gguf_str {
    const char *ptr; /* NOT NUL-terminated; points into the mapping */
    uint64_t len;
} kvs_gguf_str;

typedef struct kvs_gguf_tensor {
    kvs_gguf_str name;
    int n_dims;
    int64_t ne[4];       /* ne[0] = contiguous (row) dimension; unused dims = 1 */
    int type;            /* kvs_ggml_type */
    uint64_t offset;     /* relative to the data section */
    const void *data;    /* absolute pointer into the mapping */
    size_t nbytes;
} kvs_gguf_tensor;

typedef struct kvs_gguf kvs_gguf;

/* Opens and validates a file (mmap). On failure *out is untouched and the
 * last error names the path and the problem. */
int kvs_gguf_open(const char *path, kvs_gguf **out);
/* Same over a caller-owned buffer (must outlive the handle); used by fuzzing. */
int kvs_gguf_open_memory(const void *data, size_t size, kvs_gguf **out);
void kvs_gguf_close(kvs_gguf *g);
/* Gives the mapping's pages wholly inside [p, p + bytes) back to the kernel
 * (a hint, for tensors a copy has replaced): read again, they come back from
 * the file, page by page (no readahead). Nothing for an open_memory handle
 * or a range outside the map. */
void kvs_gguf_release_pages(const kvs_gguf *g, const void *p, size_t bytes);

uint32_t kvs_gguf_version(const kvs_gguf *g);
size_t kvs_gguf_alignment(const kvs_gguf *g);
const void *kvs_gguf_base(const kvs_gguf *g); /* start of the mapping */
size_t kvs_gguf_size(const kvs_gguf *g);
const char *kvs_gguf_path(const kvs_gguf *g); /* as given to open; "<memory>" for open_memory */
size_t kvs_gguf_data_offset(const kvs_gguf *g); /* file offset of the tensor data section */

/* --- metadata --- */
int64_t kvs_gguf_n_kv(const kvs_gguf *g);
int64_t kvs_gguf_find_key(const kvs_gguf *g, const char *key); /* -1 if absent */
kvs_gguf_str kvs_gguf_key(const kvs_gguf *g, int64_t i);
kvs_gguf_vtype kvs_gguf_kv_type(const kvs_gguf *g, int64_t i);

/* Typed getters by key. Return KVS_ERR_NOT_FOUND if absent (no message: the
 * caller that needs the key names it), KVS_ERR_FORMAT
 * (naming the key) if the stored type does not fit. Integer getters accept any
 * integer type whose value fits; float getters accept F32/F64. */
int kvs_gguf_get_u32(const kvs_gguf *g, const char *key, uint32_t *out);
int kvs_gguf_get_i64(const kvs_gguf *g, const char *key, int64_t *out);
int kvs_gguf_get_f32(const kvs_gguf *g, const char *key, float *out);
int kvs_gguf_get_bool(const kvs_gguf *g, const char *key, int *out);
int kvs_gguf_get_str(const kvs_gguf *g, const char *key, kvs_gguf_str *out);

/* Arrays. elem_type is the element type (KVS_GGUF_ARRAY for nested arrays). */
int kvs_gguf_get_arr(const kvs_gguf *g, const char *key, kvs_gguf_vtype *elem_type, uint64_t *n);
/* Pointer to the packed elements of a numeric array (unaligned: memcpy out). */
int kvs_gguf_get_arr_data(const kvs_gguf *g, const char *key, const void **data);
/* i-th string of a string array; i < n is the caller's duty (checked, returns
 * KVS_ERR_INVALID_ARG otherwise). O(1): offsets are indexed at open. */
int kvs_gguf_get_arr_str(const kvs_gguf *g, const char *key, uint64_t i, kvs_gguf_str *out);

/* --- tensors --- */
int64_t kvs_gguf_n_tensors(const kvs_gguf *g);
const kvs_gguf_tensor *kvs_gguf_tensor_at(const kvs_gguf *g, int64_t i);
const kvs_gguf_tensor *kvs_gguf_find_tensor(const kvs_gguf *g, const char *name); /* NULL if absent */

/* Compares a kvs_gguf_str with a C string. */
int kvs_gguf_str_eq(kvs_gguf_str s, const char *c);

#endif
