/* ggml tensor type table: block geometry of every type id the reader knows. */
#include "gguf/gguf.h"

#include <stdint.h>
#include <string.h>

/* Block sizes and bytes per block follow ggml's block structs:
 *   Q4_0 = f16 d + 16 B nibbles, Q4_1 = f16 d, m + 16 B, Q5_0 = d + 4 B high bits + 16 B,
 *   Q5_1 = d, m + 4 B + 16 B, Q8_0 = d + 32 i8, Q8_1 = d, s + 32 i8,
 *   Q2_K = 16 B scales + 64 B q + d, dmin; Q3_K = 32 B hmask + 64 B q + 12 B scales + d;
 *   Q4_K = d, dmin + 12 B scales + 128 B q; Q5_K = Q4_K + 32 B high bits;
 *   Q6_K = 128 B ql + 64 B qh + 16 B scales + d; Q8_K = f32 d + 256 i8 + 16 i16 sums. */
#define F16 KVS_SCALE_F16
static const kvs_type_traits type_table[] = {
    [KVS_TYPE_F32]  = {"F32", 1, 4, 1, KVS_SCALE_F32, 1, {0}},
    [KVS_TYPE_F16]  = {"F16", 1, 2, 1, F16, 1, {0}},
    [KVS_TYPE_Q4_0] = {"Q4_0", 32, 18, 1, F16, 1, {0}},
    [KVS_TYPE_Q4_1] = {"Q4_1", 32, 20, 1, F16, 2, {0, 2}},
    [KVS_TYPE_Q5_0] = {"Q5_0", 32, 22, 1, F16, 1, {0}},
    [KVS_TYPE_Q5_1] = {"Q5_1", 32, 24, 1, F16, 2, {0, 2}},
    [KVS_TYPE_Q8_0] = {"Q8_0", 32, 34, 1, F16, 1, {0}},
    [KVS_TYPE_Q8_1] = {"Q8_1", 32, 36, 0, F16, 2, {0, 2}},
    [KVS_TYPE_Q2_K] = {"Q2_K", 256, 84, 0, F16, 2, {80, 82}},
    [KVS_TYPE_Q3_K] = {"Q3_K", 256, 110, 0, F16, 1, {108}},
    [KVS_TYPE_Q4_K] = {"Q4_K", 256, 144, 1, F16, 2, {0, 2}},
    [KVS_TYPE_Q5_K] = {"Q5_K", 256, 176, 1, F16, 2, {0, 2}},
    [KVS_TYPE_Q6_K] = {"Q6_K", 256, 210, 1, F16, 1, {208}},
    [KVS_TYPE_Q8_K] = {"Q8_K", 256, 292, 0, KVS_SCALE_F32, 1, {0}},
    [KVS_TYPE_BF16] = {"BF16", 1, 2, 1, KVS_SCALE_BF16, 1, {0}},
};
#undef F16

const kvs_type_traits *kvs_type_traits_of(int type) {
    if (type < 0 || (size_t)type >= sizeof type_table / sizeof type_table[0]) return NULL;
    /* Gaps in the table (removed ids 4, 5 and the i-quants) have no name. */
    return type_table[type].name ? &type_table[type] : NULL;
}

size_t kvs_type_row_bytes(int type, int64_t n) {
    const kvs_type_traits *t = kvs_type_traits_of(type);
    if (!t || n <= 0 || n % t->block_size != 0) return 0;
    uint64_t blocks = (uint64_t)(n / t->block_size);
    if (blocks > SIZE_MAX / (uint64_t)t->type_size) return 0;
    return (size_t)blocks * (size_t)t->type_size;
}

/* A float encoding's exponent bits: all set is inf or NaN. */
static uint32_t exponent_mask(int enc) {
    return enc == KVS_SCALE_F16 ? 0x7c00u : enc == KVS_SCALE_BF16 ? 0x7f80u : 0x7f800000u;
}

/* Whether the field of encoding enc at p is inf or NaN. */
static int field_nonfinite(int enc, const uint8_t *p) {
    const uint32_t mask = exponent_mask(enc);
    uint16_t h;
    uint32_t u;
    if (enc == KVS_SCALE_F32) {
        memcpy(&u, p, 4);
        return (u & mask) == mask;
    }
    memcpy(&h, p, 2);
    return (h & mask) == mask;
}

/* Whether any of n elements has all of mask's bits set (inf or NaN): a
 * branch-free OR over the run, which the compiler vectorizes (the loop
 * is asked to be: GCC 12's -O2 would not); p aligned to the element. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("tree-vectorize")))
#else
#define VECTORIZE
#endif
static VECTORIZE int any_all_ones16(const uint16_t *p, size_t n, uint16_t mask) {
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (p[i] & mask) == mask;
    return bad != 0;
}
static VECTORIZE int any_all_ones32(const uint32_t *p, size_t n, uint32_t mask) {
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (p[i] & mask) == mask;
    return bad != 0;
}
#undef VECTORIZE

/* Whether elements [i0, i0 + len) of an aligned float tensor p may hold an
 * inf or NaN: any_all_ones over them. */
static int run_may_hold(int enc, const uint8_t *p, size_t i0, size_t len) {
    const uint32_t mask = exponent_mask(enc);
    return enc == KVS_SCALE_F32 ? any_all_ones32((const uint32_t *)p + i0, len, mask)
                                : any_all_ones16((const uint16_t *)p + i0, len, (uint16_t)mask);
}

/* The first block in [b0, b1) one of whose float fields is inf or NaN; -1 if none. */
static int64_t first_nonfinite(const kvs_type_traits *t, const uint8_t *p, size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; b++)
        for (int f = 0; f < t->n_scales; f++)
            if (field_nonfinite(t->scale_enc, p + b * (size_t)t->type_size + t->scale_off[f])) return (int64_t)b;
    return -1;
}

/* Float tensors (blocks of one element), when aligned, go in runs of RUN:
 * the vectorized run_may_hold, first_nonfinite only inside a run that may
 * hold one. Quantized blocks (and a file with general.alignment 1) go in
 * one run, block by block. */
#define RUN 4096
int64_t kvs_type_find_nonfinite(int type, const void *data, size_t nbytes) {
    const kvs_type_traits *t = kvs_type_traits_of(type);
    if (!t || t->scale_enc == KVS_SCALE_NONE) return -1;
    const uint8_t *p = data;
    const size_t nblocks = nbytes / (size_t)t->type_size;
    const int runs = t->block_size == 1 && (uintptr_t)p % (uintptr_t)t->type_size == 0;
    const size_t step = runs ? RUN : nblocks;
    for (size_t b0 = 0; b0 < nblocks; b0 += step) {
        const size_t b1 = nblocks - b0 < step ? nblocks : b0 + step;
        if (runs && !run_may_hold(t->scale_enc, p, b0, b1 - b0)) continue;
        const int64_t bad = first_nonfinite(t, p, b0, b1);
        if (bad >= 0) return bad;
    }
    return -1;
}
#undef RUN
