/*
 * Tiny in-memory GGUF writer for tests and fuzz seeds.
 *
 * Low level: gb_u32/gb_u64/gb_str/... append little-endian fields to a
 * growable buffer; gb_set_u32/gb_set_u64 patch a field in place.
 *
 * gb_build_small() writes one small valid v2/v3 file that uses every
 * metadata value type, a string array, a nested array and three tensors of
 * different types, and records the offset of each field a malformed-file test
 * wants to corrupt (gb_small.off_*), plus the section borders.
 */
#ifndef KVS_TEST_GGUF_BUILDER_H
#define KVS_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb_buf {
    uint8_t *p;
    size_t len, cap;
} gb_buf;

static inline void gb_put(gb_buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { fprintf(stderr, "gguf_builder: out of memory\n"); abort(); }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}
static inline void gb_u8(gb_buf *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u16(gb_buf *b, uint16_t v) { gb_put(b, &v, 2); }
static inline void gb_u32(gb_buf *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_u64(gb_buf *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_f32(gb_buf *b, float v) { gb_put(b, &v, 4); }
static inline void gb_f64(gb_buf *b, double v) { gb_put(b, &v, 8); }
static inline void gb_str(gb_buf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
/* Key and value-type tag of a metadata pair; the value follows. */
static inline void gb_key(gb_buf *b, const char *key, uint32_t vtype) {
    gb_str(b, key);
    gb_u32(b, vtype);
}
static inline void gb_pad(gb_buf *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}
static inline void gb_set_u32(gb_buf *b, size_t off, uint32_t v) { memcpy(b->p + off, &v, 4); }
static inline void gb_set_u64(gb_buf *b, size_t off, uint64_t v) { memcpy(b->p + off, &v, 8); }
static inline void gb_free(gb_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Header: magic, version, n_tensors, n_kv. */
static inline void gb_header(gb_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* Tensor info: name, n_dims, ne[], type, offset. */
static inline void gb_tensor_info(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                                  uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* Value type ids (same numbers as kvs_gguf_vtype; repeated so that the
 * builder does not depend on the reader it tests). */
enum {
    GB_U8 = 0, GB_I8 = 1, GB_U16 = 2, GB_I16 = 3, GB_U32 = 4, GB_I32 = 5, GB_F32 = 6,
    GB_BOOL = 7, GB_STRING = 8, GB_ARRAY = 9, GB_U64 = 10, GB_I64 = 11, GB_F64 = 12,
};
enum { GB_T_F32 = 0, GB_T_F16 = 1, GB_T_Q8_0 = 8 };

#define GB_SMALL_N_KV 17
#define GB_SMALL_N_TENSORS 3
#define GB_SMALL_MAX_SECTIONS 64

typedef struct gb_small {
    gb_buf b;
    /* Header fields. */
    size_t off_version, off_n_tensors, off_n_kv;
    /* Metadata: value-length field of general.architecture, the alignment
     * value, the key string of "test.u8" (len field), the value-type tag of
     * test.u32, the string array's element-type tag and length, the length of
     * its first element, the nested array's outer length. */
    size_t off_arch_len, off_align_val, off_align_type, off_key_u8, off_key_i8, off_type_u32;
    size_t off_strs_etype, off_strs_len, off_strs_elem0_len, off_nested_len;
    /* Tensor infos (t.a F32 [4,2], t.b Q8_0 [32,2], t.c F16 [8]). */
    size_t off_tname[GB_SMALL_N_TENSORS], off_ndims[GB_SMALL_N_TENSORS];
    size_t off_ne[GB_SMALL_N_TENSORS][4], off_ttype[GB_SMALL_N_TENSORS], off_toff[GB_SMALL_N_TENSORS];
    /* Section starts: kvs, tensor infos, data; and every field border. */
    size_t off_kvs, off_tinfo, off_data;
    size_t borders[GB_SMALL_MAX_SECTIONS];
    int n_borders;
} gb_small;

static inline void gb_mark(gb_small *s) {
    if (s->n_borders < GB_SMALL_MAX_SECTIONS) s->borders[s->n_borders++] = s->b.len;
}

static const char *const gb_small_strings[] = {"alpha", "", "\xce\xb3\xce\xb5\xce\xb9\xce\xb1", "d"};

/* Builds the small valid file into s->b (version 2 or 3). */
static inline void gb_build_small(gb_small *s, uint32_t version) {
    memset(s, 0, sizeof *s);
    gb_buf *b = &s->b;
    gb_header(b, version, GB_SMALL_N_TENSORS, GB_SMALL_N_KV);
    s->off_version = 4;
    s->off_n_tensors = 8;
    s->off_n_kv = 16;
    s->off_kvs = b->len;
    gb_mark(s);

    gb_key(b, "general.architecture", GB_STRING);
    s->off_arch_len = b->len;
    gb_str(b, "llama");
    gb_mark(s);
    gb_key(b, "general.alignment", GB_U32);
    s->off_align_type = b->len - 4;
    s->off_align_val = b->len;
    gb_u32(b, 64);
    gb_mark(s);
    s->off_key_u8 = b->len;
    gb_key(b, "test.u8", GB_U8); gb_u8(b, 200); gb_mark(s);
    s->off_key_i8 = b->len;
    gb_key(b, "test.i8", GB_I8); gb_u8(b, (uint8_t)-5); gb_mark(s);
    gb_key(b, "test.u16", GB_U16); gb_u16(b, 60000); gb_mark(s);
    gb_key(b, "test.i16", GB_I16); gb_u16(b, (uint16_t)-300); gb_mark(s);
    gb_key(b, "test.u32", GB_U32);
    s->off_type_u32 = b->len - 4;
    gb_u32(b, 4000000000u); gb_mark(s);
    gb_key(b, "test.i32", GB_I32); gb_u32(b, (uint32_t)-70000); gb_mark(s);
    gb_key(b, "test.f32", GB_F32); gb_f32(b, 1.5f); gb_mark(s);
    gb_key(b, "test.bool", GB_BOOL); gb_u8(b, 1); gb_mark(s);
    gb_key(b, "test.u64", GB_U64); gb_u64(b, 1ull << 40); gb_mark(s);
    gb_key(b, "test.i64", GB_I64); gb_u64(b, (uint64_t)-(1ll << 40)); gb_mark(s);
    gb_key(b, "test.f64", GB_F64); gb_f64(b, 2.25); gb_mark(s);
    gb_key(b, "test.strings", GB_ARRAY);
    s->off_strs_etype = b->len;
    gb_u32(b, GB_STRING);
    s->off_strs_len = b->len;
    gb_u64(b, 4);
    s->off_strs_elem0_len = b->len;
    for (int i = 0; i < 4; i++) { gb_str(b, gb_small_strings[i]); gb_mark(s); }
    gb_key(b, "test.i32s", GB_ARRAY);
    gb_u32(b, GB_I32); gb_u64(b, 3);
    gb_u32(b, 7); gb_u32(b, (uint32_t)-8); gb_u32(b, 9); gb_mark(s);
    /* [[1, 2], [3], []] as i16 */
    gb_key(b, "test.nested", GB_ARRAY);
    gb_u32(b, GB_ARRAY);
    s->off_nested_len = b->len;
    gb_u64(b, 3);
    gb_u32(b, GB_I16); gb_u64(b, 2); gb_u16(b, 1); gb_u16(b, 2); gb_mark(s);
    gb_u32(b, GB_I16); gb_u64(b, 1); gb_u16(b, 3); gb_mark(s);
    gb_u32(b, GB_I16); gb_u64(b, 0); gb_mark(s);
    gb_key(b, "tokenizer.chat_template", GB_STRING);
    gb_str(b, "{{ messages }}");
    gb_mark(s);

    /* Tensor infos. Offsets are multiples of the 64-byte alignment. */
    s->off_tinfo = b->len;
    static const char *names[GB_SMALL_N_TENSORS] = {"t.a", "t.b", "t.c"};
    static const uint32_t dims[GB_SMALL_N_TENSORS] = {2, 2, 1};
    static const uint64_t ne[GB_SMALL_N_TENSORS][2] = {{4, 2}, {32, 2}, {8, 1}};
    static const uint32_t types[GB_SMALL_N_TENSORS] = {GB_T_F32, GB_T_Q8_0, GB_T_F16};
    static const uint64_t offs[GB_SMALL_N_TENSORS] = {0, 64, 192};
    for (int t = 0; t < GB_SMALL_N_TENSORS; t++) {
        s->off_tname[t] = b->len;
        gb_str(b, names[t]);
        s->off_ndims[t] = b->len;
        gb_u32(b, dims[t]);
        for (uint32_t d = 0; d < dims[t]; d++) {
            s->off_ne[t][d] = b->len;
            gb_u64(b, ne[t][d]);
        }
        s->off_ttype[t] = b->len;
        gb_u32(b, types[t]);
        s->off_toff[t] = b->len;
        gb_u64(b, offs[t]);
        gb_mark(s);
    }
    gb_pad(b, 64);
    s->off_data = b->len;
    gb_mark(s);
    /* Data: t.a 32 B at 0, t.b 68 B at 64, t.c 16 B at 192; byte i = i & 0xff. */
    size_t data_len = 192 + 16;
    for (size_t i = 0; i < data_len; i++) gb_u8(b, (uint8_t)i);
    gb_mark(s);
}

/* Writes a buffer to a file; returns 0 on success. */
static inline int gb_write_file(const gb_buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(b->p, 1, b->len, f);
    return (fclose(f) == 0 && w == b->len) ? 0 : -1;
}

#endif
