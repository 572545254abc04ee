/* GGUF reader on malformed, truncated and hostile files: each case gives the
 * right status and a message naming the key/tensor, and nothing crashes or
 * reads out of bounds (run under ASan: every buffer handed to the reader is an
 * exact-size heap copy, so a read past its end is caught). */
#include "harness.h"

#include "gguf_builder.h"
#include "gguf/gguf.h"
#include "kvstitch.h"

#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

/* Opens an exact-size copy of data[0..len). Returns the status; the handle, if
 * any, is closed. *out must stay untouched on failure. */
static int open_copy(const void *data, size_t len) {
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) { CHECK(0); return KVS_ERR_NOMEM; }
    if (len) memcpy(copy, data, len);
    kvs_gguf *g = (kvs_gguf *)&copy; /* sentinel */
    int st = kvs_gguf_open_memory(copy, len, &g);
    if (st == KVS_OK) kvs_gguf_close(g);
    else CHECK_MSG(g == (kvs_gguf *)&copy, "out changed on failure");
    free(copy);
    return st;
}

/* Expects status and every NULL-terminated substring in the message. */
static void expect_v(const gb_buf *b, int status, const char *what, va_list ap) {
    int st = open_copy(b->p, b->len);
    CHECK_MSG(st == status, "%s: status %d, want %d (%s)", what, st, status,
              st ? kvs_last_error() : "opened");
    if (st == KVS_OK) return;
    const char *msg = kvs_last_error();
    for (const char *sub; (sub = va_arg(ap, const char *)) != NULL;)
        CHECK_MSG(strstr(msg, sub) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, sub);
}

static void expect(const gb_buf *b, int status, const char *what, ...) {
    va_list ap;
    va_start(ap, what);
    expect_v(b, status, what, ap);
    va_end(ap);
}

/* Builds the small file, lets patch() corrupt it, checks the outcome. */
#define SMALL_CASE(version, patch_stmt, status, ...)                             \
    do {                                                                         \
        gb_small sm;                                                             \
        gb_build_small(&sm, version);                                            \
        gb_buf *b = &sm.b;                                                       \
        (void)b;                                                                 \
        patch_stmt;                                                              \
        expect(&sm.b, status, #patch_stmt, __VA_ARGS__, (const char *)NULL);     \
        gb_free(&sm.b);                                                          \
    } while (0)

TEST(valid_small_file_opens) {
    gb_small sm;
    gb_build_small(&sm, 3);
    CHECK_EQ_INT(open_copy(sm.b.p, sm.b.len), KVS_OK);
    gb_free(&sm.b);
}

TEST(bad_magic) {
    SMALL_CASE(3, b->p[0] = 'X', KVS_ERR_FORMAT, "<memory>", "not a GGUF file", "offset 0");
    SMALL_CASE(3, memcpy(b->p, "FUGG", 4), KVS_ERR_FORMAT, "not a GGUF file");
    gb_buf tiny = {0};
    gb_put(&tiny, "GG", 2);
    expect(&tiny, KVS_ERR_FORMAT, "2-byte file", "not a GGUF file", "2 bytes, shorter than the 4-byte magic",
           (const char *)NULL); /* (its missing bytes had been shown as magic 47 47 00 00) */
    tiny.len = 0;
    expect(&tiny, KVS_ERR_FORMAT, "0-byte file", "not a GGUF file", (const char *)NULL);
    gb_free(&tiny);
}

TEST(unsupported_versions) {
    SMALL_CASE(3, gb_set_u32(b, sm.off_version, 1), KVS_ERR_UNSUPPORTED, "version 1", "header");
    SMALL_CASE(3, gb_set_u32(b, sm.off_version, 0), KVS_ERR_UNSUPPORTED, "version 0");
    SMALL_CASE(3, gb_set_u32(b, sm.off_version, 4), KVS_ERR_UNSUPPORTED, "version 4");
    SMALL_CASE(3, gb_set_u32(b, sm.off_version, 0x03000000), KVS_ERR_UNSUPPORTED, "big-endian");
}

/* Every prefix of a valid file must fail cleanly with FORMAT. */
static void truncate_every_prefix(uint32_t version) {
    gb_small sm;
    gb_build_small(&sm, version);
    int bad = 0;
    for (size_t len = 0; len < sm.b.len; len++) {
        int st = open_copy(sm.b.p, len);
        if (st != KVS_ERR_FORMAT) {
            if (bad++ < 5) fprintf(stderr, "  prefix %zu of %zu: status %d\n", len, sm.b.len, st);
            continue;
        }
        const char *msg = kvs_last_error();
        if (!strstr(msg, "<memory>: ") || !strstr(msg, "at offset ")) {
            if (bad++ < 5) fprintf(stderr, "  prefix %zu: message \"%s\"\n", len, msg);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(open_copy(sm.b.p, sm.b.len), KVS_OK);
    gb_free(&sm.b);
}

TEST(truncation_every_prefix_v3) { truncate_every_prefix(3); }
TEST(truncation_every_prefix_v2) { truncate_every_prefix(2); }

TEST(truncation_messages_name_the_section) {
    gb_small sm;
    gb_build_small(&sm, 3);
    gb_buf b = sm.b;
    b.len = 20; /* inside the metadata count */
    expect(&b, KVS_ERR_FORMAT, "cut in header", "header", "truncated", (const char *)NULL);
    /* (Early cuts fail the coarse "count cannot fit" bound on n_kv/n_tensors
     * instead; later ones reach the item itself.) borders[12] ends test.i64 (0 = header end);
     * test.f64's key (8 + 8 bytes) and type tag (4) follow. */
    b.len = sm.borders[12] + 22; /* inside test.f64's value */
    expect(&b, KVS_ERR_FORMAT, "cut in value", "key test.f64", "truncated", (const char *)NULL);
    b.len = sm.off_arch_len + 3;
    expect(&b, KVS_ERR_FORMAT, "cut early", "header", "metadata count 17 cannot fit",
           (const char *)NULL);
    b.len = sm.off_strs_elem0_len + 10; /* inside the first string of test.strings */
    expect(&b, KVS_ERR_FORMAT, "cut in string array", "key test.strings", (const char *)NULL);
    b.len = sm.off_ttype[2] + 2; /* inside t.c's type */
    expect(&b, KVS_ERR_FORMAT, "cut in tensor info", "tensor t.c", "truncated", (const char *)NULL);
    b.len = sm.off_data + 100; /* inside t.b's data */
    expect(&b, KVS_ERR_FORMAT, "cut in data", "tensor t.b", "past the end", (const char *)NULL);
    gb_free(&sm.b);
}

TEST(absurd_counts) {
    SMALL_CASE(3, gb_set_u64(b, sm.off_n_kv, UINT64_MAX), KVS_ERR_FORMAT, "metadata count", "header");
    SMALL_CASE(3, gb_set_u64(b, sm.off_n_kv, 1ull << 40), KVS_ERR_FORMAT, "metadata count");
    SMALL_CASE(3, gb_set_u64(b, sm.off_n_tensors, UINT64_MAX), KVS_ERR_FORMAT, "tensor count");
    SMALL_CASE(3, gb_set_u64(b, sm.off_n_tensors, 1ull << 33), KVS_ERR_FORMAT, "tensor count");
    /* One tensor more than written: the directory runs into the data. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_n_tensors, 4), KVS_ERR_FORMAT, "tensor");
}

TEST(absurd_string_lengths) {
    SMALL_CASE(3, gb_set_u64(b, sm.off_arch_len, UINT64_MAX), KVS_ERR_FORMAT,
               "key general.architecture", "exceeds");
    SMALL_CASE(3, gb_set_u64(b, sm.off_arch_len, b->len - sm.off_arch_len - 8 + 1), KVS_ERR_FORMAT,
               "key general.architecture");
    SMALL_CASE(3, gb_set_u64(b, sm.off_key_u8, 1ull << 62), KVS_ERR_FORMAT, "metadata entry #2",
               "key length");
    SMALL_CASE(3, gb_set_u64(b, sm.off_strs_elem0_len, UINT64_MAX - 7), KVS_ERR_FORMAT,
               "key test.strings", "exceeds");
    SMALL_CASE(3, gb_set_u64(b, sm.off_tname[2], UINT64_MAX), KVS_ERR_FORMAT, "tensor #2",
               "tensor name length");
}

TEST(absurd_array_lengths) {
    SMALL_CASE(3, gb_set_u64(b, sm.off_strs_len, UINT64_MAX), KVS_ERR_FORMAT, "key test.strings",
               "cannot fit");
    SMALL_CASE(3, gb_set_u64(b, sm.off_strs_len, 1ull << 61), KVS_ERR_FORMAT, "key test.strings");
    SMALL_CASE(3, gb_set_u64(b, sm.off_nested_len, 1ull << 60), KVS_ERR_FORMAT, "key test.nested",
               "cannot fit");
    /* A numeric array claiming more elements than bytes left. */
    gb_buf a = {0};
    gb_header(&a, 3, 0, 1);
    gb_key(&a, "big", GB_ARRAY);
    gb_u32(&a, GB_F64);
    gb_u64(&a, 3);
    gb_f64(&a, 1);
    gb_f64(&a, 2); /* only 2 of 3 */
    expect(&a, KVS_ERR_FORMAT, "short f64 array", "key big", "cannot fit", (const char *)NULL);
    gb_free(&a);
}

static void build_nested(gb_buf *b, int depth) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "bomb", GB_ARRAY);
    for (int i = 1; i < depth; i++) { gb_u32(b, GB_ARRAY); gb_u64(b, 1); }
    gb_u32(b, GB_U8);
    gb_u64(b, 1);
    gb_u8(b, 42);
}

TEST(nested_array_depth) {
    gb_buf b = {0};
    build_nested(&b, 8); /* 8 array levels: the limit */
    CHECK_EQ_INT(open_copy(b.p, b.len), KVS_OK);
    gb_free(&b);
    build_nested(&b, 9);
    expect(&b, KVS_ERR_FORMAT, "depth 9", "key bomb", "nested deeper", (const char *)NULL);
    gb_free(&b);
    build_nested(&b, 100000); /* a depth bomb: no stack overflow */
    expect(&b, KVS_ERR_FORMAT, "depth 100000", "key bomb", "nested deeper", (const char *)NULL);
    gb_free(&b);
    /* Wide rather than deep: 100000 empty sub-arrays are fine and cheap. */
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "wide", GB_ARRAY);
    gb_u32(&b, GB_ARRAY);
    gb_u64(&b, 100000);
    for (int i = 0; i < 100000; i++) { gb_u32(&b, GB_U32); gb_u64(&b, 0); }
    CHECK_EQ_INT(open_copy(b.p, b.len), KVS_OK);
    gb_free(&b);
}

TEST(unknown_value_types) {
    SMALL_CASE(3, gb_set_u32(b, sm.off_type_u32, 13), KVS_ERR_FORMAT, "key test.u32",
               "unknown value type 13");
    SMALL_CASE(3, gb_set_u32(b, sm.off_type_u32, 0xffffffffu), KVS_ERR_FORMAT, "key test.u32",
               "unknown value type");
    SMALL_CASE(3, gb_set_u32(b, sm.off_strs_etype, 99), KVS_ERR_FORMAT, "key test.strings",
               "unknown array element type 99");
}

TEST(unknown_tensor_types) {
    SMALL_CASE(3, gb_set_u32(b, sm.off_ttype[1], 41), KVS_ERR_UNSUPPORTED, "<memory>: tensor t.b: ",
               "type 41 is not supported");
    SMALL_CASE(3, gb_set_u32(b, sm.off_ttype[1], 4), KVS_ERR_UNSUPPORTED, "tensor t.b", "type 4 ");
    SMALL_CASE(3, gb_set_u32(b, sm.off_ttype[2], 0xffffffffu), KVS_ERR_UNSUPPORTED, "tensor t.c",
               "type 4294967295 is not supported");
    /* ne[0] must be a multiple of the block size. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[1][0], 33), KVS_ERR_FORMAT, "tensor t.b", "block size 32");
}

TEST(bad_alignment) {
    SMALL_CASE(3, gb_set_u32(b, sm.off_align_val, 0), KVS_ERR_FORMAT, "key general.alignment",
               "not a power of two");
    SMALL_CASE(3, gb_set_u32(b, sm.off_align_val, 3), KVS_ERR_FORMAT, "key general.alignment",
               "alignment 3");
    SMALL_CASE(3, gb_set_u32(b, sm.off_align_val, 96), KVS_ERR_FORMAT, "alignment 96");
    SMALL_CASE(3, gb_set_u32(b, sm.off_align_type, GB_I32), KVS_ERR_FORMAT, "key general.alignment",
               "expected u32");
    /* A valid but larger alignment makes the 64-aligned offset of t.b wrong. */
    SMALL_CASE(3, gb_set_u32(b, sm.off_align_val, 128), KVS_ERR_FORMAT, "tensor t.b", "alignment 128");
}

TEST(bad_tensor_offsets) {
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[1], 65), KVS_ERR_FORMAT, "tensor t.b",
               "not a multiple of the alignment 64");
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[2], 1ull << 40), KVS_ERR_FORMAT, "tensor t.c",
               "past the end");
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[2], UINT64_MAX - 63), KVS_ERR_FORMAT, "tensor t.c",
               "past the end");
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[2], 256), KVS_ERR_FORMAT, "tensor t.c", "past the end");
    /* Data bigger than the file, offset fine. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[2][0], 16), KVS_ERR_FORMAT, "tensor t.c", "past the end");
}

TEST(overlapping_tensors) {
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[1], 0), KVS_ERR_FORMAT, "overlaps", "t.a", "t.b");
    /* t.b [64, 132) and t.c moved to 128: overlap by 4 bytes. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_toff[2], 128), KVS_ERR_FORMAT, "tensor t.c", "overlaps tensor t.b");
    /* Same offset for all three. */
    SMALL_CASE(3, (gb_set_u64(b, sm.off_toff[0], 64), gb_set_u64(b, sm.off_toff[2], 64)),
               KVS_ERR_FORMAT, "overlaps");
}

TEST(bad_dims) {
    SMALL_CASE(3, gb_set_u32(b, sm.off_ndims[0], 0), KVS_ERR_FORMAT, "tensor t.a", "n_dims 0");
    SMALL_CASE(3, gb_set_u32(b, sm.off_ndims[0], 5), KVS_ERR_FORMAT, "tensor t.a", "n_dims 5");
    SMALL_CASE(3, gb_set_u32(b, sm.off_ndims[1], 0xffffffffu), KVS_ERR_FORMAT, "tensor t.b", "n_dims");
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[0][1], 0), KVS_ERR_FORMAT, "tensor t.a", "ne[1] = 0");
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[0][0], 1ull << 63), KVS_ERR_FORMAT, "tensor t.a", "ne[0]");
    /* Element count overflow: t.a is [4, 2]; 2^62 * 2 > 2^63 - 1. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[0][0], 1ull << 62), KVS_ERR_FORMAT, "tensor t.a",
               "element count overflows");
    /* Count fits (2^61 * 2), bytes (x 4) do not. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[0][0], 1ull << 61), KVS_ERR_FORMAT, "tensor t.a", "overflow");
    /* Huge but representable: caught by the file size. */
    SMALL_CASE(3, gb_set_u64(b, sm.off_ne[0][0], 1ull << 40), KVS_ERR_FORMAT, "tensor t.a", "past the end");
}

TEST(duplicates) {
    /* "test.i8" -> "test.u8" */
    SMALL_CASE(3, b->p[sm.off_key_i8 + 8 + 5] = 'u', KVS_ERR_FORMAT, "key test.u8", "duplicate key");
    /* "t.b" -> "t.a" */
    SMALL_CASE(3, b->p[sm.off_tname[1] + 8 + 2] = 'a', KVS_ERR_FORMAT, "tensor t.a",
               "duplicate tensor name");
}

TEST(empty_names) {
    gb_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "", GB_U8);
    gb_u8(&b, 1);
    gb_u64(&b, 0); /* slack, so the count bound passes and the key itself is read */
    expect(&b, KVS_ERR_FORMAT, "empty key", "empty key", "metadata entry #0", (const char *)NULL);
    gb_free(&b);
    uint64_t ne[1] = {4};
    gb_header(&b, 3, 1, 0);
    gb_tensor_info(&b, "", 1, ne, GB_T_F32, 0);
    gb_pad(&b, 32);
    for (int i = 0; i < 16; i++) gb_u8(&b, 0);
    expect(&b, KVS_ERR_FORMAT, "empty tensor name", "empty tensor name", "tensor #0", (const char *)NULL);
    gb_free(&b);
}

/* Hostile names are escaped in messages (no raw control bytes). */
TEST(names_escaped_in_messages) {
    gb_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "bad\x1b[31mkey", 77);
    expect(&b, KVS_ERR_FORMAT, "escape", "bad\\x1b[31mkey", "unknown value type 77", (const char *)NULL);
    CHECK(strchr(kvs_last_error(), 0x1b) == NULL);
    gb_free(&b);
}

TEST(file_errors_name_the_path) {
    gb_small sm;
    gb_build_small(&sm, 3);
    gb_set_u32(&sm.b, sm.off_ttype[0], 41);
    char path[] = "/tmp/kvs_test_gguf_bad_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        close(fd);
        CHECK(gb_write_file(&sm.b, path) == 0);
        kvs_gguf *g = NULL;
        CHECK_EQ_INT(kvs_gguf_open(path, &g), KVS_ERR_UNSUPPORTED);
        char want[128];
        snprintf(want, sizeof want, "%s: tensor t.a: type 41 is not supported", path);
        CHECK_MSG(strstr(kvs_last_error(), want) != NULL, "%s", kvs_last_error());
        CHECK(g == NULL);
        unlink(path);
    }
    gb_free(&sm.b);
}

/* Every byte of the small file set to 0x00, 0xff and +1 (wrapped): no crash,
 * and any failure comes with a message naming where. */
TEST(byte_corruptions) {
    gb_small sm;
    gb_build_small(&sm, 3);
    static const int how[3] = {0, 1, 2};
    int n_ok = 0, n_fail = 0;
    for (size_t i = 0; i < sm.b.len; i++) {
        for (int h = 0; h < 3; h++) {
            uint8_t keep = sm.b.p[i];
            sm.b.p[i] = how[h] == 0 ? 0 : how[h] == 1 ? 0xff : (uint8_t)(keep + 1);
            int st = open_copy(sm.b.p, sm.b.len);
            sm.b.p[i] = keep;
            if (st == KVS_OK) { n_ok++; continue; }
            n_fail++;
            CHECK_MSG(st == KVS_ERR_FORMAT || st == KVS_ERR_UNSUPPORTED, "byte %zu: status %d", i, st);
            CHECK_MSG(strstr(kvs_last_error(), "at offset") != NULL, "byte %zu: %s", i, kvs_last_error());
        }
    }
    printf("  %d corruptions rejected, %d still valid\n", n_fail, n_ok);
    CHECK(n_fail > 0);
    gb_free(&sm.b);
}

/* --- truncations of the real files --------------------------------------- */

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Section borders taken from a successful open: header fields, every kv's key,
 * type and value, every tensor info, the data section, every tensor's data. */
static size_t collect_borders(const kvs_gguf *g, size_t *out, size_t cap, int tensor_step) {
    const uint8_t *base = kvs_gguf_base(g);
    size_t n = 0;
#define ADD(x) do { if (n < cap) out[n++] = (size_t)(x); } while (0)
    ADD(4); ADD(8); ADD(16); ADD(24);
    for (int64_t i = 0; i < kvs_gguf_n_kv(g); i++) {
        kvs_gguf_str k = kvs_gguf_key(g, i);
        size_t at = (size_t)((const uint8_t *)k.ptr - base);
        ADD(at - 8); ADD(at); ADD(at + k.len); ADD(at + k.len + 4);
    }
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i += tensor_step) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(g, i);
        size_t at = (size_t)((const uint8_t *)t->name.ptr - base);
        ADD(at - 8); ADD(at + t->name.len); ADD(at + t->name.len + 4);
        size_t d = (size_t)((const uint8_t *)t->data - base);
        ADD(d); ADD(d + t->nbytes - 1);
    }
    ADD(kvs_gguf_data_offset(g));
#undef ADD
    return n;
}

/* Truncates at every border (of every tensor_step-th tensor), border +- 1 and
 * n_random random points; every prefix must fail with FORMAT. Cuts up to
 * copy_limit bytes are opened from an exact-size heap copy (so ASan sees any
 * over-read); longer ones reuse the file's mapping, which checks the status
 * without copying megabytes of weights that are never read. */
static void truncate_file(const char *path, int n_random, int tensor_step, size_t copy_limit) {
    kvs_gguf *g = NULL;
    CHECK_MSG(path && kvs_gguf_open(path, &g) == KVS_OK, "open %s: %s", path ? path : "(null)",
              kvs_last_error());
    if (!g) return;
    const uint8_t *data = kvs_gguf_base(g);
    size_t len = kvs_gguf_size(g);
    static size_t borders[4096];
    size_t nb = collect_borders(g, borders, 4096, tensor_step);
    uint64_t seed = 12345;
    int tried = 0, bad = 0;
    for (size_t k = 0; k < nb * 3 + (size_t)n_random; k++) {
        size_t cut = k < nb * 3 ? borders[k / 3] + (k % 3) - 1 : (size_t)(lcg(&seed) % len);
        if (cut >= len) continue;
        int st;
        if (cut <= copy_limit) {
            st = open_copy(data, cut);
        } else {
            kvs_gguf *h = NULL;
            st = kvs_gguf_open_memory(data, cut, &h);
            kvs_gguf_close(h);
        }
        tried++;
        if (st != KVS_ERR_FORMAT && bad++ < 5)
            fprintf(stderr, "  %s cut at %zu: status %d (%s)\n", path, cut, st, kvs_last_error());
    }
    printf("  %s: %d truncations rejected\n", path, tried - bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(tried > n_random / 2);
    kvs_gguf_close(g);
}

TEST(truncated_tiny_model) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", kt_shared_dir());
    truncate_file(path, 200, 1, SIZE_MAX);
}

TEST(truncated_real_model) {
    /* Every kv border, every 8th tensor's borders, 200 random cuts; copies
     * up to the end of the metadata region (~1.8 MB). */
    truncate_file(kt_model_path(), 200, 8, 2u << 20);
}

int main(void) {
    RUN(valid_small_file_opens);
    RUN(bad_magic);
    RUN(unsupported_versions);
    RUN(truncation_every_prefix_v3);
    RUN(truncation_every_prefix_v2);
    RUN(truncation_messages_name_the_section);
    RUN(absurd_counts);
    RUN(absurd_string_lengths);
    RUN(absurd_array_lengths);
    RUN(nested_array_depth);
    RUN(unknown_value_types);
    RUN(unknown_tensor_types);
    RUN(bad_alignment);
    RUN(bad_tensor_offsets);
    RUN(overlapping_tensors);
    RUN(bad_dims);
    RUN(duplicates);
    RUN(empty_names);
    RUN(names_escaped_in_messages);
    RUN(file_errors_name_the_path);
    RUN(byte_corruptions);
    RUN(truncated_tiny_model);
    RUN(truncated_real_model);
    return kt_summary();
}
