/*
 * libFuzzer target for the GGUF reader: open the input with
 * kvs_gguf_open_memory and, if it opens, walk every accessor, touching every
 * byte the reader hands out (so ASan sees any pointer outside the input) and
 * checking the invariants that open promises (trap on violation).
 *
 * Built with -DKVS_FUZZ_SEEDGEN instead, this file is a small program that
 * writes builder-made seed files into a directory (scripts/run-fuzz.sh).
 */
#include "gguf/gguf.h"
#include "fuzz_util.h"
#include "kvstitch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int in_input(const void *p, size_t n, const uint8_t *data, size_t size) {
    const uint8_t *b = p;
    return b >= data && b <= data + size && n <= (size_t)(data + size - b);
}

/* NUL-terminated copy of a GGUF string, or NULL if it holds a NUL (then a C
 * string cannot name it exactly). Caller frees. */
static char *cstr(kvs_gguf_str s) {
    if (memchr(s.ptr, 0, s.len)) return NULL;
    char *c = malloc(s.len + 1);
    if (!c) return NULL;
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

static size_t elem_size(kvs_gguf_vtype t) {
    switch (t) {
    case KVS_GGUF_U8: case KVS_GGUF_I8: case KVS_GGUF_BOOL: return 1;
    case KVS_GGUF_U16: case KVS_GGUF_I16: return 2;
    case KVS_GGUF_U32: case KVS_GGUF_I32: case KVS_GGUF_F32: return 4;
    default: return 8;
    }
}

static void walk_kv(const kvs_gguf *g, int64_t i, const uint8_t *data, size_t size) {
    kvs_gguf_str k = kvs_gguf_key(g, i);
    FUZZ_CHECK(k.ptr && k.len > 0 && in_input(k.ptr, k.len, data, size));
    kvs_gguf_vtype t = kvs_gguf_kv_type(g, i);
    FUZZ_CHECK(t < KVS_GGUF_VTYPE_COUNT);
    char *key = cstr(k);
    if (!key) return;
    FUZZ_CHECK(kvs_gguf_find_key(g, key) == i);
    uint32_t u32;
    int64_t i64;
    float f;
    int b;
    kvs_gguf_str s;
    int st_u32 = kvs_gguf_get_u32(g, key, &u32);
    int st_i64 = kvs_gguf_get_i64(g, key, &i64);
    if (st_u32 == KVS_OK) FUZZ_CHECK(st_i64 == KVS_OK && (int64_t)u32 == i64);
    if (kvs_gguf_get_f32(g, key, &f) == KVS_OK) FUZZ_CHECK(t == KVS_GGUF_F32 || t == KVS_GGUF_F64);
    if (kvs_gguf_get_bool(g, key, &b) == KVS_OK) FUZZ_CHECK(t == KVS_GGUF_BOOL && (b == 0 || b == 1));
    if (kvs_gguf_get_str(g, key, &s) == KVS_OK) {
        FUZZ_CHECK(t == KVS_GGUF_STRING && in_input(s.ptr, s.len, data, size));
        touch(s.ptr, s.len);
    }
    kvs_gguf_vtype et;
    uint64_t n;
    if (kvs_gguf_get_arr(g, key, &et, &n) == KVS_OK) {
        FUZZ_CHECK(t == KVS_GGUF_ARRAY && et < KVS_GGUF_VTYPE_COUNT);
        const void *arr;
        int st = kvs_gguf_get_arr_data(g, key, &arr);
        if (et == KVS_GGUF_STRING || et == KVS_GGUF_ARRAY) {
            FUZZ_CHECK(st == KVS_ERR_FORMAT);
        } else {
            FUZZ_CHECK(st == KVS_OK && n <= size && in_input(arr, (size_t)n * elem_size(et), data, size));
            touch(arr, (size_t)n * elem_size(et));
        }
        if (et == KVS_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                FUZZ_CHECK(kvs_gguf_get_arr_str(g, key, j, &s) == KVS_OK);
                FUZZ_CHECK(in_input(s.ptr, s.len, data, size));
                touch(s.ptr, s.len);
            }
            FUZZ_CHECK(kvs_gguf_get_arr_str(g, key, n, &s) == KVS_ERR_INVALID_ARG);
        } else {
            FUZZ_CHECK(kvs_gguf_get_arr_str(g, key, 0, &s) == KVS_ERR_FORMAT);
        }
    }
    free(key);
}

static void walk_tensor(const kvs_gguf *g, int64_t i, const uint8_t *data, size_t size) {
    const kvs_gguf_tensor *t = kvs_gguf_tensor_at(g, i);
    FUZZ_CHECK(t && t->name.len > 0 && in_input(t->name.ptr, t->name.len, data, size));
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4);
    const kvs_type_traits *tt = kvs_type_traits_of(t->type);
    FUZZ_CHECK(tt != NULL);
    int64_t rows = 1;
    for (int d = 0; d < 4; d++) {
        FUZZ_CHECK(t->ne[d] >= 1);
        if (d > 0) rows *= t->ne[d];
        if (d >= t->n_dims) FUZZ_CHECK(t->ne[d] == 1);
    }
    FUZZ_CHECK(t->nbytes == kvs_type_row_bytes(t->type, t->ne[0]) * (size_t)rows);
    FUZZ_CHECK(t->offset % kvs_gguf_alignment(g) == 0);
    FUZZ_CHECK((const uint8_t *)t->data == data + kvs_gguf_data_offset(g) + t->offset);
    FUZZ_CHECK(in_input(t->data, t->nbytes, data, size));
    touch(t->data, 1);
    touch((const uint8_t *)t->data + t->nbytes - 1, 1);
    char *name = cstr(t->name);
    if (name) FUZZ_CHECK(kvs_gguf_find_tensor(g, name) == t);
    free(name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvs_gguf *g = NULL;
    int st = kvs_gguf_open_memory(data, size, &g);
    if (st != KVS_OK) {
        FUZZ_CHECK(g == NULL);
        FUZZ_CHECK(st == KVS_ERR_FORMAT || st == KVS_ERR_UNSUPPORTED || st == KVS_ERR_NOMEM);
        FUZZ_CHECK(strstr(kvs_last_error(), "<memory>: ") == kvs_last_error());
        return 0;
    }
    FUZZ_CHECK(kvs_gguf_version(g) == 2 || kvs_gguf_version(g) == 3);
    size_t a = kvs_gguf_alignment(g);
    FUZZ_CHECK(a > 0 && (a & (a - 1)) == 0);
    FUZZ_CHECK(kvs_gguf_base(g) == (const void *)data && kvs_gguf_size(g) == size);
    FUZZ_CHECK(kvs_gguf_data_offset(g) <= size);
    for (int64_t i = 0; i < kvs_gguf_n_kv(g); i++) walk_kv(g, i, data, size);
    FUZZ_CHECK(kvs_gguf_key(g, kvs_gguf_n_kv(g)).ptr == NULL);
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) walk_tensor(g, i, data, size);
    FUZZ_CHECK(kvs_gguf_tensor_at(g, kvs_gguf_n_tensors(g)) == NULL);
    kvs_gguf_close(g);
    return 0;
}

#ifdef KVS_FUZZ_SEEDGEN
#include "gguf_builder.h"

static int write_seed(const char *dir, const char *name, gb_buf *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = gb_write_file(b, path);
    if (rc) fprintf(stderr, "seedgen: cannot write %s\n", path);
    gb_free(b);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
    const char *dir = argv[1];
    int rc = 0;
    gb_small sm;
    gb_build_small(&sm, 3);
    rc |= write_seed(dir, "seed-small-v3.gguf", &sm.b);
    gb_build_small(&sm, 2);
    rc |= write_seed(dir, "seed-small-v2.gguf", &sm.b);

    /* Default alignment, one tensor of each K-quant-sized block. */
    gb_buf b = {0};
    gb_header(&b, 3, 2, 1);
    gb_key(&b, "general.architecture", GB_STRING);
    gb_str(&b, "llama");
    uint64_t ne_q6k[2] = {256, 2}, ne_bf16[1] = {16};
    gb_tensor_info(&b, "q6k", 2, ne_q6k, 14, 0);
    gb_tensor_info(&b, "bf16", 1, ne_bf16, 30, 448);
    gb_pad(&b, 32);
    for (int i = 0; i < 448 + 32; i++) gb_u8(&b, (uint8_t)(i * 7));
    rc |= write_seed(dir, "seed-kquant.gguf", &b);

    /* Nested arrays of mixed element types, no tensors. */
    gb_header(&b, 3, 0, 2);
    gb_key(&b, "nest", GB_ARRAY);
    gb_u32(&b, GB_ARRAY);
    gb_u64(&b, 2);
    gb_u32(&b, GB_STRING); gb_u64(&b, 2); gb_str(&b, "x"); gb_str(&b, "yz");
    gb_u32(&b, GB_ARRAY); gb_u64(&b, 1); gb_u32(&b, GB_F64); gb_u64(&b, 1); gb_f64(&b, 0.5);
    gb_key(&b, "general.alignment", GB_U32);
    gb_u32(&b, 16);
    rc |= write_seed(dir, "seed-nested.gguf", &b);

    /* Values that end exactly at the end of the file (off-by-one bait). */
    gb_header(&b, 3, 0, 3);
    gb_key(&b, "general.architecture", GB_STRING);
    gb_str(&b, "gpt2");
    gb_key(&b, "tokenizer.ggml.token_type", GB_ARRAY);
    gb_u32(&b, GB_I32); gb_u64(&b, 2); gb_u32(&b, 1); gb_u32(&b, 3);
    gb_key(&b, "tokenizer.ggml.tokens", GB_ARRAY);
    gb_u32(&b, GB_STRING); gb_u64(&b, 3); gb_str(&b, "a"); gb_str(&b, "<s>"); gb_str(&b, "zz");
    rc |= write_seed(dir, "seed-ends-with-strings.gguf", &b);

    /* Header only. */
    gb_header(&b, 3, 0, 0);
    rc |= write_seed(dir, "seed-empty.gguf", &b);
    return rc ? 1 : 0;
}
#endif
