/* ggml tensor type table: block geometry of every type id the reader knows. */
#include "gguf/gguf.h"

#include <stdint.h>

/* Block sizes and bytes per block follow ggml's block structs:
 *   Q4_0 = f16 d + 16 B nibbles, Q4_1 = f16 d, m + 16 B, Q5_0 = d + 4 B high bits + 16 B,
 *   Q5_1 = d, m + 4 B + 16 B, Q8_0 = d + 32 i8, Q8_1 = d, s + 32 i8,
 *   Q2_K = 16 B scales + 64 B q + d, dmin; Q3_K = 32 B hmask + 64 B q + 12 B scales + d;
 *   Q4_K = d, dmin + 12 B scales + 128 B q; Q5_K = Q4_K + 32 B high bits;
 *   Q6_K = 128 B ql + 64 B qh + 16 B scales + d; Q8_K = f32 d + 256 i8 + 16 i16 sums. */
static const kvs_type_traits type_table[] = {
    [KVS_TYPE_F32]  = {"F32", 1, 4, 1},
    [KVS_TYPE_F16]  = {"F16", 1, 2, 1},
    [KVS_TYPE_Q4_0] = {"Q4_0", 32, 18, 1},
    [KVS_TYPE_Q4_1] = {"Q4_1", 32, 20, 1},
    [KVS_TYPE_Q5_0] = {"Q5_0", 32, 22, 1},
    [KVS_TYPE_Q5_1] = {"Q5_1", 32, 24, 1},
    [KVS_TYPE_Q8_0] = {"Q8_0", 32, 34, 1},
    [KVS_TYPE_Q8_1] = {"Q8_1", 32, 36, 0},
    [KVS_TYPE_Q2_K] = {"Q2_K", 256, 84, 0},
    [KVS_TYPE_Q3_K] = {"Q3_K", 256, 110, 0},
    [KVS_TYPE_Q4_K] = {"Q4_K", 256, 144, 1},
    [KVS_TYPE_Q5_K] = {"Q5_K", 256, 176, 1},
    [KVS_TYPE_Q6_K] = {"Q6_K", 256, 210, 1},
    [KVS_TYPE_Q8_K] = {"Q8_K", 256, 292, 0},
    [KVS_TYPE_BF16] = {"BF16", 1, 2, 1},
};

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
