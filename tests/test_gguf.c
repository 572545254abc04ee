/* GGUF reader on valid files: a builder-made file using every value type, the
 * shared tiny model and vocabularies, and the real SmolLM2 model. Expected
 * values for the real files were read with the PyPI gguf package. */
#include "harness.h"

#include "gguf_builder.h"
#include "gguf/gguf.h"
#include "kvstitch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SMOL_N_VOCAB 49152

static char shared_path[1024];
static const char *shared(const char *rel) {
    snprintf(shared_path, sizeof shared_path, "%s/%s", kt_shared_dir(), rel);
    return shared_path;
}

static kvs_gguf *open_or_fail(const char *path) {
    kvs_gguf *g = NULL;
    int st = path ? kvs_gguf_open(path, &g) : KVS_ERR_INVALID_ARG;
    CHECK_MSG(st == KVS_OK, "open %s: %s", path ? path : "(null)", kvs_last_error());
    return st == KVS_OK ? g : NULL;
}

static int str_is(kvs_gguf_str s, const char *c) { return kvs_gguf_str_eq(s, c); }

/* Checks every accessor on the builder's small file. */
static void check_small(kvs_gguf *g, uint32_t version) {
    CHECK_EQ_INT(kvs_gguf_version(g), version);
    CHECK_EQ_INT(kvs_gguf_alignment(g), 64);
    CHECK_EQ_INT(kvs_gguf_n_kv(g), GB_SMALL_N_KV);
    CHECK_EQ_INT(kvs_gguf_n_tensors(g), 3);

    int64_t i = kvs_gguf_find_key(g, "test.u16");
    CHECK(i >= 0);
    CHECK(str_is(kvs_gguf_key(g, i), "test.u16"));
    CHECK_EQ_INT(kvs_gguf_kv_type(g, i), KVS_GGUF_U16);
    CHECK_EQ_INT(kvs_gguf_find_key(g, "test.u1"), -1);
    CHECK_EQ_INT(kvs_gguf_find_key(g, "missing"), -1);
    CHECK(kvs_gguf_key(g, -1).ptr == NULL);
    CHECK(kvs_gguf_key(g, GB_SMALL_N_KV).ptr == NULL);
    CHECK_EQ_INT(kvs_gguf_kv_type(g, GB_SMALL_N_KV), KVS_GGUF_VTYPE_COUNT);
    /* Every key is found at its own index. */
    for (int64_t k = 0; k < kvs_gguf_n_kv(g); k++) {
        char name[64];
        kvs_gguf_str s = kvs_gguf_key(g, k);
        snprintf(name, sizeof name, "%.*s", (int)s.len, s.ptr);
        CHECK_EQ_INT(kvs_gguf_find_key(g, name), k);
    }

    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f = 0;
    int b = 0;
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.u8", &u32), KVS_OK); CHECK_EQ_INT(u32, 200);
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.u16", &u32), KVS_OK); CHECK_EQ_INT(u32, 60000);
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.u32", &u32), KVS_OK); CHECK_EQ_INT(u32, 4000000000u);
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.i8", &i64), KVS_OK); CHECK_EQ_INT(i64, -5);
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.i16", &i64), KVS_OK); CHECK_EQ_INT(i64, -300);
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.i32", &i64), KVS_OK); CHECK_EQ_INT(i64, -70000);
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.u64", &i64), KVS_OK); CHECK_EQ_INT(i64, 1ll << 40);
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.i64", &i64), KVS_OK); CHECK_EQ_INT(i64, -(1ll << 40));
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "test.u32", &i64), KVS_OK); CHECK_EQ_INT(i64, 4000000000ll);
    CHECK_EQ_INT(kvs_gguf_get_f32(g, "test.f32", &f), KVS_OK); CHECK(f == 1.5f);
    CHECK_EQ_INT(kvs_gguf_get_f32(g, "test.f64", &f), KVS_OK); CHECK(f == 2.25f);
    CHECK_EQ_INT(kvs_gguf_get_bool(g, "test.bool", &b), KVS_OK); CHECK_EQ_INT(b, 1);
    kvs_gguf_str s = {0};
    CHECK_EQ_INT(kvs_gguf_get_str(g, "general.architecture", &s), KVS_OK);
    CHECK(str_is(s, "llama"));

    /* Values that do not fit, or the wrong type: FORMAT naming the key. */
    u32 = 77;
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.i8", &u32), KVS_ERR_FORMAT);
    CHECK(strstr(kvs_last_error(), "test.i8") != NULL);
    CHECK_EQ_INT(u32, 77); /* untouched on failure */
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.u64", &u32), KVS_ERR_FORMAT);
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "test.f32", &u32), KVS_ERR_FORMAT);
    CHECK_EQ_INT(kvs_gguf_get_f32(g, "test.u8", &f), KVS_ERR_FORMAT);
    CHECK_EQ_INT(kvs_gguf_get_bool(g, "test.u8", &b), KVS_ERR_FORMAT);
    CHECK_EQ_INT(kvs_gguf_get_str(g, "test.u8", &s), KVS_ERR_FORMAT);
    CHECK(strstr(kvs_last_error(), "test.u8") != NULL);
    CHECK(strstr(kvs_last_error(), "expected string") != NULL);
    /* an absent key: NOT_FOUND and no message (optional keys are read on every
     * load; the caller that needs one names it) */
    CHECK_EQ_INT(kvs_gguf_get_i64(g, "nope.key", &i64), KVS_ERR_NOT_FOUND);
    CHECK(strstr(kvs_last_error(), "expected string") != NULL);

    /* String array, indexed. */
    kvs_gguf_vtype et = KVS_GGUF_VTYPE_COUNT;
    uint64_t n = 0;
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "test.strings", &et, &n), KVS_OK);
    CHECK_EQ_INT(et, KVS_GGUF_STRING);
    CHECK_EQ_INT(n, 4);
    for (uint64_t k = 0; k < 4; k++) {
        CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "test.strings", k, &s), KVS_OK);
        CHECK(str_is(s, gb_small_strings[k]));
    }
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "test.strings", 4, &s), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "test.i32s", 0, &s), KVS_ERR_FORMAT);
    const void *data = NULL;
    CHECK_EQ_INT(kvs_gguf_get_arr_data(g, "test.strings", &data), KVS_ERR_FORMAT);
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "test.u8", &et, &n), KVS_ERR_FORMAT);

    /* Numeric array. */
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "test.i32s", &et, &n), KVS_OK);
    CHECK_EQ_INT(et, KVS_GGUF_I32);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(kvs_gguf_get_arr_data(g, "test.i32s", &data), KVS_OK);
    int32_t v[3];
    memcpy(v, data, sizeof v);
    CHECK(v[0] == 7 && v[1] == -8 && v[2] == 9);

    /* Nested array: reported as an array of arrays. */
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "test.nested", &et, &n), KVS_OK);
    CHECK_EQ_INT(et, KVS_GGUF_ARRAY);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(kvs_gguf_get_arr_data(g, "test.nested", &data), KVS_ERR_FORMAT);

    /* Tensors. */
    const uint8_t *base = kvs_gguf_base(g);
    size_t data_off = kvs_gguf_data_offset(g);
    CHECK_EQ_INT(data_off % 64, 0);
    const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "t.b");
    CHECK(t != NULL);
    if (t) {
        CHECK(t == kvs_gguf_tensor_at(g, 1));
        CHECK_EQ_INT(t->type, KVS_TYPE_Q8_0);
        CHECK_EQ_INT(t->n_dims, 2);
        CHECK(t->ne[0] == 32 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
        CHECK_EQ_INT(t->nbytes, 68);
        CHECK_EQ_INT(t->offset, 64);
        CHECK((const uint8_t *)t->data == base + data_off + 64);
        CHECK_EQ_INT(((const uint8_t *)t->data)[0], 64);
    }
    t = kvs_gguf_find_tensor(g, "t.a");
    CHECK(t && t->type == KVS_TYPE_F32 && t->nbytes == 32 && t->data == base + data_off);
    t = kvs_gguf_find_tensor(g, "t.c");
    CHECK(t && t->type == KVS_TYPE_F16 && t->n_dims == 1 && t->ne[0] == 8 && t->nbytes == 16);
    CHECK(t && ((const uint8_t *)t->data)[15] == 207);
    CHECK(kvs_gguf_find_tensor(g, "t.") == NULL);
    CHECK(kvs_gguf_find_tensor(g, "t.a.") == NULL);
    CHECK(kvs_gguf_tensor_at(g, -1) == NULL);
    CHECK(kvs_gguf_tensor_at(g, 3) == NULL);
}

TEST(small_file_v3_memory) {
    gb_small sm;
    gb_build_small(&sm, 3);
    kvs_gguf *g = NULL;
    int st = kvs_gguf_open_memory(sm.b.p, sm.b.len, &g);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (g) {
        check_small(g, 3);
        CHECK(kvs_gguf_base(g) == sm.b.p);
        CHECK_EQ_INT(kvs_gguf_size(g), sm.b.len);
        CHECK(strcmp(kvs_gguf_path(g), "<memory>") == 0);
    }
    kvs_gguf_close(g);
    gb_free(&sm.b);
}

TEST(small_file_v2_mmap) {
    gb_small sm;
    gb_build_small(&sm, 2);
    char path[] = "/tmp/kvs_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) { gb_free(&sm.b); return; }
    close(fd);
    CHECK(gb_write_file(&sm.b, path) == 0);
    kvs_gguf *g = open_or_fail(path);
    if (g) {
        check_small(g, 2);
        CHECK(strcmp(kvs_gguf_path(g), path) == 0);
        CHECK_EQ_INT(kvs_gguf_size(g), sm.b.len);
    }
    kvs_gguf_close(g);
    unlink(path);
    gb_free(&sm.b);
}

TEST(alignment_default_32) {
    /* No general.alignment: the data section starts at the next multiple of 32. */
    gb_buf b = {0};
    gb_header(&b, 3, 1, 1);
    gb_key(&b, "general.architecture", GB_STRING);
    gb_str(&b, "llama");
    uint64_t ne[1] = {4};
    gb_tensor_info(&b, "w", 1, ne, GB_T_F32, 0);
    size_t end = b.len;
    gb_pad(&b, 32);
    for (int i = 0; i < 16; i++) gb_u8(&b, (uint8_t)i);
    kvs_gguf *g = NULL;
    CHECK_EQ_INT(kvs_gguf_open_memory(b.p, b.len, &g), KVS_OK);
    if (g) {
        CHECK_EQ_INT(kvs_gguf_alignment(g), 32);
        CHECK_EQ_INT(kvs_gguf_data_offset(g), (end + 31) / 32 * 32);
        CHECK((const uint8_t *)kvs_gguf_tensor_at(g, 0)->data == b.p + kvs_gguf_data_offset(g));
    }
    kvs_gguf_close(g);
    gb_free(&b);
}

TEST(empty_file_no_kv_no_tensors) {
    gb_buf b = {0};
    gb_header(&b, 3, 0, 0);
    kvs_gguf *g = NULL;
    CHECK_EQ_INT(kvs_gguf_open_memory(b.p, b.len, &g), KVS_OK);
    if (g) {
        CHECK_EQ_INT(kvs_gguf_n_kv(g), 0);
        CHECK_EQ_INT(kvs_gguf_n_tensors(g), 0);
        CHECK_EQ_INT(kvs_gguf_find_key(g, "x"), -1);
        CHECK(kvs_gguf_find_tensor(g, "x") == NULL);
    }
    kvs_gguf_close(g);
    gb_free(&b);
}

/* Builds n_kv u32 keys and n_t F32 [1] tensors with names in a scrambled
 * order; if dup_at >= 0, entry dup_at repeats the name of entry 0. */
static void build_many(gb_buf *b, int n_kv, int n_t, int dup_at) {
    gb_header(b, 3, (uint64_t)n_t, (uint64_t)n_kv);
    char name[64];
    for (int i = 0; i < n_kv; i++) {
        snprintf(name, sizeof name, "key.%d.x", i == dup_at ? 0 : (i * 7919) % n_kv);
        gb_key(b, name, GB_U32);
        gb_u32(b, (uint32_t)((i * 7919) % n_kv));
    }
    for (int i = 0; i < n_t; i++) {
        uint64_t ne[1] = {1};
        snprintf(name, sizeof name, "blk.%d.w", (i * 31) % n_t);
        gb_tensor_info(b, name, 1, ne, GB_T_F32, (uint64_t)i * 32);
    }
    gb_pad(b, 32);
    for (int i = 0; i < n_t * 32; i++) gb_u8(b, 0);
}

TEST(many_names_lookup) {
    gb_buf b = {0};
    build_many(&b, 3000, 1000, -1); /* 3000, 1000 coprime with 7919 and 31 */
    kvs_gguf *g = NULL;
    CHECK_EQ_INT(kvs_gguf_open_memory(b.p, b.len, &g), KVS_OK);
    if (g) {
        char name[64];
        int bad = 0;
        for (int i = 0; i < 3000; i++) {
            snprintf(name, sizeof name, "key.%d.x", i);
            uint32_t v = 0;
            if (kvs_gguf_get_u32(g, name, &v) != KVS_OK || v != (uint32_t)i) bad++;
        }
        for (int i = 0; i < 1000; i++) {
            snprintf(name, sizeof name, "blk.%d.w", i);
            const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, name);
            if (!t || !kvs_gguf_str_eq(t->name, name)) bad++;
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(kvs_gguf_find_key(g, "key.3000.x"), -1);
        CHECK_EQ_INT(kvs_gguf_find_key(g, "key.1"), -1);
        CHECK_EQ_INT(kvs_gguf_find_key(g, ""), -1);
        CHECK(kvs_gguf_find_tensor(g, "blk.1000.w") == NULL);
        CHECK(kvs_gguf_find_tensor(g, "blk.") == NULL);
    }
    kvs_gguf_close(g);
    gb_free(&b);
    /* A duplicate far apart in the file is still found. */
    build_many(&b, 3000, 10, 2500);
    g = NULL;
    CHECK_EQ_INT(kvs_gguf_open_memory(b.p, b.len, &g), KVS_ERR_FORMAT);
    CHECK_MSG(strstr(kvs_last_error(), "key key.0.x: duplicate key (entries #0 and #2500)") != NULL,
              "%s", kvs_last_error());
    CHECK(g == NULL);
    gb_free(&b);
}

TEST(type_traits) {
    static const struct { int type; const char *name; int bs, ts, sup; } want[] = {
        {KVS_TYPE_F32, "F32", 1, 4, 1},      {KVS_TYPE_F16, "F16", 1, 2, 1},
        {KVS_TYPE_BF16, "BF16", 1, 2, 1},    {KVS_TYPE_Q4_0, "Q4_0", 32, 18, 1},
        {KVS_TYPE_Q4_1, "Q4_1", 32, 20, 1},  {KVS_TYPE_Q5_0, "Q5_0", 32, 22, 1},
        {KVS_TYPE_Q5_1, "Q5_1", 32, 24, 1},  {KVS_TYPE_Q8_0, "Q8_0", 32, 34, 1},
        {KVS_TYPE_Q8_1, "Q8_1", 32, 36, 0},  {KVS_TYPE_Q2_K, "Q2_K", 256, 84, 0},
        {KVS_TYPE_Q3_K, "Q3_K", 256, 110, 0}, {KVS_TYPE_Q4_K, "Q4_K", 256, 144, 1},
        {KVS_TYPE_Q5_K, "Q5_K", 256, 176, 1}, {KVS_TYPE_Q6_K, "Q6_K", 256, 210, 1},
        {KVS_TYPE_Q8_K, "Q8_K", 256, 292, 0},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const kvs_type_traits *t = kvs_type_traits_of(want[k].type);
        CHECK_MSG(t != NULL, "type %d", want[k].type);
        if (!t) continue;
        CHECK(strcmp(t->name, want[k].name) == 0);
        CHECK_EQ_INT(t->block_size, want[k].bs);
        CHECK_EQ_INT(t->type_size, want[k].ts);
        CHECK_EQ_INT(t->supported, want[k].sup);
    }
    static const int unknown[] = {-1, 4, 5, 16, 29, 31, 41, 1000, 0x7fffffff};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++)
        CHECK_MSG(kvs_type_traits_of(unknown[k]) == NULL, "type %d", unknown[k]);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_Q4_1, 576), 18 * 20);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_F32, 3), 12);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_Q6_K, 512), 420);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_Q4_1, 33), 0);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_Q4_1, 0), 0);
    CHECK_EQ_INT(kvs_type_row_bytes(41, 32), 0);
    CHECK_EQ_INT(kvs_type_row_bytes(KVS_TYPE_F32, INT64_MAX), 0); /* 4 * 2^63 overflows */
}

TEST(open_errors) {
    kvs_gguf *g = (kvs_gguf *)0x1;
    CHECK_EQ_INT(kvs_gguf_open("/nonexistent/dir/model.gguf", &g), KVS_ERR_IO);
    CHECK(strstr(kvs_last_error(), "/nonexistent/dir/model.gguf") != NULL);
    CHECK(g == (kvs_gguf *)0x1);
    CHECK_EQ_INT(kvs_gguf_open("/tmp", &g), KVS_ERR_IO);
    CHECK(strstr(kvs_last_error(), "not a regular file") != NULL);
    CHECK_EQ_INT(kvs_gguf_open("/dev/null", &g), KVS_ERR_IO);
    char path[] = "/tmp/kvs_test_gguf_empty_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
        CHECK_EQ_INT(kvs_gguf_open(path, &g), KVS_ERR_FORMAT);
        CHECK(strstr(kvs_last_error(), path) != NULL);
        unlink(path);
    }
    CHECK(g == (kvs_gguf *)0x1);
    CHECK_EQ_INT(kvs_gguf_open(NULL, &g), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_gguf_open_memory(NULL, 10, &g), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_gguf_open_memory(NULL, 0, &g), KVS_ERR_FORMAT);
    kvs_gguf_close(NULL);
}

/* Counts tensors per type and checks each tensor's byte size and range. */
static void check_tensor_table(kvs_gguf *g, int counts[KVS_MAX_TENSOR_TYPES]) {
    memset(counts, 0, sizeof(int) * KVS_MAX_TENSOR_TYPES);
    const uint8_t *base = kvs_gguf_base(g);
    size_t size = kvs_gguf_size(g);
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(g, i);
        CHECK(t->type >= 0 && t->type < KVS_MAX_TENSOR_TYPES);
        if (t->type < 0 || t->type >= KVS_MAX_TENSOR_TYPES) continue;
        counts[t->type]++;
        size_t rows = (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        CHECK_EQ_INT(t->nbytes, kvs_type_row_bytes(t->type, t->ne[0]) * rows);
        CHECK((const uint8_t *)t->data >= base && (const uint8_t *)t->data + t->nbytes <= base + size);
        CHECK(((uintptr_t)t->data - (uintptr_t)base) % kvs_gguf_alignment(g) == 0);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK(kvs_gguf_find_tensor(g, name) == t);
    }
}

TEST(shared_tiny_model) {
    kvs_gguf *g = open_or_fail(shared("models/llama-2-tiny-random.gguf"));
    if (!g) return;
    CHECK_EQ_INT(kvs_gguf_version(g), 3);
    CHECK_EQ_INT(kvs_gguf_n_kv(g), 18);
    CHECK_EQ_INT(kvs_gguf_n_tensors(g), 12);
    CHECK_EQ_INT(kvs_gguf_data_offset(g), 724416);
    int counts[KVS_MAX_TENSOR_TYPES];
    check_tensor_table(g, counts);
    CHECK_EQ_INT(counts[KVS_TYPE_F32], 3);
    CHECK_EQ_INT(counts[KVS_TYPE_F16], 9);
    const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == KVS_TYPE_F16 && t->ne[0] == 8 && t->ne[1] == 32000 && t->nbytes == 512000);
    t = kvs_gguf_find_tensor(g, "output.weight");
    CHECK(t && (const uint8_t *)t->data - (const uint8_t *)kvs_gguf_base(g) == 1238560);
    uint32_t u = 0;
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "llama.block_count", &u), KVS_OK);
    CHECK_EQ_INT(u, 1);
    kvs_gguf_str s;
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s), KVS_OK);
    CHECK(str_is(s, "<unk>"));
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 31999, &s), KVS_OK);
    CHECK(str_is(s, "\xe7\xbb\x99")); /* 给 */
    kvs_gguf_vtype et;
    uint64_t n;
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n), KVS_OK);
    CHECK(et == KVS_GGUF_F32 && n == 32000);
    kvs_gguf_close(g);
}

TEST(shared_vocab_files) {
    kvs_gguf *g = open_or_fail(shared("tokenizer-tests/ggml-vocab-gpt-2.gguf"));
    if (g) {
        CHECK_EQ_INT(kvs_gguf_n_tensors(g), 0);
        CHECK_EQ_INT(kvs_gguf_n_kv(g), 16);
        kvs_gguf_vtype et;
        uint64_t n = 0;
        CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n), KVS_OK);
        CHECK(et == KVS_GGUF_STRING && n == 50257);
        CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n), KVS_OK);
        CHECK(et == KVS_GGUF_STRING && n == 50000);
        kvs_gguf_str s;
        CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 50256, &s), KVS_OK);
        CHECK(str_is(s, "<|endoftext|>"));
        CHECK_EQ_INT(kvs_gguf_get_str(g, "tokenizer.ggml.pre", &s), KVS_OK);
        CHECK(str_is(s, "gpt-2"));
        CHECK(kvs_gguf_data_offset(g) <= kvs_gguf_size(g));
        kvs_gguf_close(g);
    }
    g = open_or_fail(shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"));
    if (g) {
        CHECK_EQ_INT(kvs_gguf_n_kv(g), 22);
        int b = -1;
        CHECK_EQ_INT(kvs_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), KVS_OK);
        CHECK_EQ_INT(b, 1);
        kvs_gguf_str s;
        CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &s), KVS_OK);
        CHECK(str_is(s, "<s>"));
        kvs_gguf_close(g);
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

TEST(real_model) {
    const char *path = kt_model_path();
    if (!path) return;
    double t0 = now_ms();
    kvs_gguf *g = open_or_fail(path);
    double open_ms = now_ms() - t0;
    if (!g) return;
    printf("  open %s: %.2f ms\n", path, open_ms);
    CHECK_EQ_INT(kvs_gguf_version(g), 3);
    CHECK_EQ_INT(kvs_gguf_n_kv(g), 33);
    CHECK_EQ_INT(kvs_gguf_n_tensors(g), 272);
    CHECK_EQ_INT(kvs_gguf_alignment(g), 32);
    CHECK_EQ_INT(kvs_gguf_data_offset(g), 1785664);
    int counts[KVS_MAX_TENSOR_TYPES];
    check_tensor_table(g, counts);
    CHECK_EQ_INT(counts[KVS_TYPE_Q4_1], 210);
    CHECK_EQ_INT(counts[KVS_TYPE_F32], 61);
    CHECK_EQ_INT(counts[KVS_TYPE_Q8_0], 1);

    const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == KVS_TYPE_Q8_0 && t->ne[0] == 576 && t->ne[1] == SMOL_N_VOCAB &&
          t->nbytes == 30081024 && t->offset == 0);
    t = kvs_gguf_find_tensor(g, "blk.9.attn_v.weight");
    CHECK(t && t->type == KVS_TYPE_Q4_1 && t->ne[0] == 576 && t->ne[1] == 192 && t->nbytes == 69120);
    CHECK(t && (const uint8_t *)t->data - (const uint8_t *)kvs_gguf_base(g) == 98291008);
    t = kvs_gguf_find_tensor(g, "output_norm.weight");
    CHECK(t && t->type == KVS_TYPE_F32 && t->n_dims == 1 && t->ne[0] == 576);
    CHECK(kvs_gguf_find_tensor(g, "output.weight") == NULL); /* tied to token_embd */

    uint32_t u = 0;
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "llama.block_count", &u), KVS_OK); CHECK_EQ_INT(u, 30);
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "llama.embedding_length", &u), KVS_OK); CHECK_EQ_INT(u, 576);
    CHECK_EQ_INT(kvs_gguf_get_u32(g, "llama.attention.head_count_kv", &u), KVS_OK); CHECK_EQ_INT(u, 3);
    float f = 0;
    CHECK_EQ_INT(kvs_gguf_get_f32(g, "llama.rope.freq_base", &f), KVS_OK); CHECK(f == 100000.0f);
    CHECK_EQ_INT(kvs_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), KVS_OK);
    CHECK_NEAR(f, 1e-5, 1e-9);
    kvs_gguf_str s;
    CHECK_EQ_INT(kvs_gguf_get_str(g, "general.architecture", &s), KVS_OK); CHECK(str_is(s, "llama"));
    CHECK_EQ_INT(kvs_gguf_get_str(g, "tokenizer.ggml.pre", &s), KVS_OK); CHECK(str_is(s, "smollm"));
    CHECK_EQ_INT(kvs_gguf_get_str(g, "tokenizer.chat_template", &s), KVS_OK);
    CHECK(s.len > 100 && memmem(s.ptr, s.len, "<|im_start|>", 12) != NULL);

    kvs_gguf_vtype et;
    uint64_t n = 0;
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n), KVS_OK);
    CHECK(et == KVS_GGUF_STRING && n == SMOL_N_VOCAB);
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n), KVS_OK);
    CHECK(et == KVS_GGUF_STRING && n == 48900);
    CHECK_EQ_INT(kvs_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n), KVS_OK);
    CHECK(et == KVS_GGUF_I32 && n == SMOL_N_VOCAB);
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s), KVS_OK);
    CHECK(str_is(s, "<|endoftext|>"));
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &s), KVS_OK);
    CHECK(str_is(s, "<|im_start|>"));
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", SMOL_N_VOCAB - 1, &s), KVS_OK);
    CHECK(str_is(s, "ectable"));
    CHECK_EQ_INT(kvs_gguf_get_arr_str(g, "tokenizer.ggml.merges", 0, &s), KVS_OK);
    CHECK(str_is(s, "\xc4\xa0 t")); /* "Ġ t" */

    /* Random access over the whole vocabulary, back to front: O(1) per string. */
    t0 = now_ms();
    uint64_t total = 0;
    for (uint64_t i = SMOL_N_VOCAB; i-- > 0;) {
        if (kvs_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s) != KVS_OK) { CHECK(0); break; }
        total += s.len;
    }
    printf("  49152 token strings (%llu bytes) read in %.2f ms\n", (unsigned long long)total,
           now_ms() - t0);
    CHECK(total > SMOL_N_VOCAB);
    kvs_gguf_close(g);
}

/* kvs_type_find_nonfinite over every type with float fields: finite scales
 * pass whatever the other bytes hold; inf, -inf and NaNs (quiet, signalling,
 * negative) in any one field of block 3 are found there; float types over
 * several runs of the vectorized scan, and from an unaligned start. */
TEST(find_nonfinite_every_type) {
    /* the float fields of ggml's block structs, written out here (not read
     * from the type table, which is what is checked): type, count, offsets */
    static const struct { int type, n, off[2]; } want[] = {
        {KVS_TYPE_F32, 1, {0}},      {KVS_TYPE_F16, 1, {0}},       {KVS_TYPE_BF16, 1, {0}},
        {KVS_TYPE_Q4_0, 1, {0}},     {KVS_TYPE_Q4_1, 2, {0, 2}},   {KVS_TYPE_Q5_0, 1, {0}},
        {KVS_TYPE_Q5_1, 2, {0, 2}},  {KVS_TYPE_Q8_0, 1, {0}},      {KVS_TYPE_Q8_1, 2, {0, 2}},
        {KVS_TYPE_Q2_K, 2, {80, 82}}, {KVS_TYPE_Q3_K, 1, {108}},   {KVS_TYPE_Q4_K, 2, {0, 2}},
        {KVS_TYPE_Q5_K, 2, {0, 2}},  {KVS_TYPE_Q6_K, 1, {208}},    {KVS_TYPE_Q8_K, 1, {0}},
    };
    /* per encoding: a finite value, then the non-finite patterns */
    static const uint32_t f16_bad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00, 0x7fff};
    static const uint32_t bf16_bad[] = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc0};
    static const uint32_t f32_bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu};
    int checked = 0;
    for (size_t ti = 0; ti < sizeof want / sizeof want[0]; ti++) {
        const int type = want[ti].type;
        const kvs_type_traits *tr = kvs_type_traits_of(type);
        CHECK(tr != NULL && tr->scale_enc != KVS_SCALE_NONE);
        if (!tr) continue;
        CHECK_MSG(tr->n_scales == want[ti].n, "%s: %d float fields in the table", tr->name, tr->n_scales);
        for (int f = 0; f < want[ti].n && f < tr->n_scales; f++)
            CHECK_MSG(tr->scale_off[f] == want[ti].off[f], "%s: field %d at %d in the table", tr->name, f, tr->scale_off[f]);
        const int fsize = tr->scale_enc == KVS_SCALE_F32 ? 4 : 2;
        const uint32_t finite = tr->scale_enc == KVS_SCALE_F32 ? 0x3f800000u : tr->scale_enc == KVS_SCALE_F16 ? 0x3c00 : 0x3f80;
        const uint32_t *bad = tr->scale_enc == KVS_SCALE_F32 ? f32_bad : tr->scale_enc == KVS_SCALE_F16 ? f16_bad : bf16_bad;
        const int n_bad = tr->scale_enc == KVS_SCALE_F32 ? 5 : tr->scale_enc == KVS_SCALE_F16 ? 6 : 5;
        /* float types: 3 runs of the scan and a bit; quantized: 7 blocks */
        const size_t nblocks = tr->block_size == 1 ? 3 * 4096 + 100 : 7;
        const size_t bytes = nblocks * (size_t)tr->type_size;
        uint8_t *buf = malloc(bytes + 8);
        CHECK(buf != NULL);
        if (!buf) continue;
        uint8_t *p = buf + 4; /* 4-aligned (malloc gives 16): the vectorized scan */
        memset(p, 0xff, bytes); /* every non-scale byte all ones: must not count */
        for (size_t b = 0; b < nblocks; b++)
            for (int f = 0; f < want[ti].n; f++) memcpy(p + b * tr->type_size + want[ti].off[f], &finite, fsize);
        CHECK_MSG(kvs_type_find_nonfinite(type, p, bytes) == -1, "%s: finite scales reported", tr->name);
        const size_t at[] = {3, nblocks - 1, tr->block_size == 1 ? 4096 + 7 : 5};
        for (int f = 0; f < want[ti].n; f++)
            for (int k = 0; k < n_bad; k++)
                for (int a = 0; a < 3; a++) {
                    uint8_t *field = p + at[a] * tr->type_size + want[ti].off[f];
                    memcpy(field, &bad[k], fsize);
                    int64_t got = kvs_type_find_nonfinite(type, p, bytes);
                    CHECK_MSG(got == (int64_t)at[a], "%s field %d pattern %#x at %zu: got %lld", tr->name, f, bad[k],
                              at[a], (long long)got);
                    if (tr->block_size == 1) { /* the unaligned fallback: same answer */
                        memmove(buf + 1, p, bytes);
                        got = kvs_type_find_nonfinite(type, buf + 1, bytes);
                        CHECK_MSG(got == (int64_t)at[a], "%s unaligned: got %lld", tr->name, (long long)got);
                        memmove(p, buf + 1, bytes);
                    }
                    memcpy(field, &finite, fsize);
                    checked++;
                }
        CHECK(kvs_type_find_nonfinite(type, p, bytes) == -1);
        free(buf);
    }
    printf("  %d non-finite fields found where they were put\n", checked);
    CHECK(checked > 100);
}

int main(void) {
    RUN(small_file_v3_memory);
    RUN(small_file_v2_mmap);
    RUN(alignment_default_32);
    RUN(empty_file_no_kv_no_tensors);
    RUN(many_names_lookup);
    RUN(type_traits);
    RUN(open_errors);
    RUN(shared_tiny_model);
    RUN(shared_vocab_files);
    RUN(real_model);
    RUN(find_nonfinite_every_type);
    return kt_summary();
}
