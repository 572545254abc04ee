/*
 * Block formats of the quantized weight types the kernels compute with, the
 * half-precision conversions, and the layout of quantized activations.
 * Weight layouts are ggml's, byte for byte (they are read from the mmapped
 * GGUF file):
 *
 *   Q4_0  +--------+------------------+   32 elements, 18 bytes
 *         | f16 d  | u8 qs[16]        |   x = (q - 8) * d
 *         +--------+------------------+   low nibble of qs[i] = element i,
 *   Q4_1  +--------+--------+---------+   high nibble = element i + 16
 *         | f16 d  | f16 m  | qs[16]  |   x = q * d + m; 20 bytes
 *         +--------+--------+---------+
 *   Q8_0  +--------+------------------+   x = q * d; 34 bytes
 *         | f16 d  | i8 qs[32]        |
 *         +--------+------------------+
 *
 * Supported weight types (keep in sync with kvs_type_traits_of in src/gguf):
 * F32, F16, BF16, Q4_0, Q4_1, Q8_0.
 */
#ifndef KVS_KERNELS_QUANT_H
#define KVS_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "gguf/gguf.h" /* kvs_ggml_type ids */

#define KVS_QK 32 /* elements per quantization block */

/* Packed (alignment 1): the blocks of a GGUF file with general.alignment 1
 * may start at any address, where a 2-aligned struct's member loads were
 * undefined behaviour (UBSan's alignment check; x86 forgives them). */
typedef struct __attribute__((packed)) kvs_block_q4_0 {
    uint16_t d;
    uint8_t qs[KVS_QK / 2];
} kvs_block_q4_0;

typedef struct __attribute__((packed)) kvs_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[KVS_QK / 2];
} kvs_block_q4_1;

typedef struct __attribute__((packed)) kvs_block_q8_0 {
    uint16_t d;
    int8_t qs[KVS_QK];
} kvs_block_q8_0;

_Static_assert(sizeof(kvs_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(kvs_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(kvs_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(_Alignof(kvs_block_q4_0) == 1 && _Alignof(kvs_block_q4_1) == 1 && _Alignof(kvs_block_q8_0) == 1,
               "blocks are read at any address");

/* Bytes of one block of a Q4_0 / Q4_1 / Q8_0 row. */
static inline int kvs_q_block_bytes(int type) {
    return type == KVS_TYPE_Q4_0 ? (int)sizeof(kvs_block_q4_0)
         : type == KVS_TYPE_Q4_1 ? (int)sizeof(kvs_block_q4_1) : (int)sizeof(kvs_block_q8_0);
}

/* IEEE half -> float, exact (handles subnormals, inf, nan). */
static inline float kvs_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* float -> IEEE half, round to nearest even (the same result as F16C's
 * vcvtps2ph with rounding mode 0, so scalar and SIMD KV bytes agree). */
static inline uint16_t kvs_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet and non-zero) */
        return sign | 0x7c00 | (ax > 0x7f800000u ? (uint16_t)(0x200 | ((ax >> 13) & 0x3ff)) : 0);
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00;
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return sign; /* < 2^-25 rounds to zero */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;          /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1) - ((uint32_t)(127 - 15) << 23);
    return sign | (uint16_t)(r >> 13);
}

static inline float kvs_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/*
 * Quantized activations ("xq"): one x row of k floats becomes blocks of 32,
 * each row on its own (batch invariance), each element a 16-bit integer Q
 * held as two signed bytes, hi and lo (two-level, "residual" quantization):
 *
 *   amax = max|x|, d = amax / 127, id = d >= FLT_MIN ? 1 / d : 0, v = x * id,
 *   hi = round_half_even(v)                         in [-127, 127]
 *   lo = clamp(round_half_even(v * 256) - 256 * hi, -127, 127)
 *   Q  = 256 * hi + lo,   x ~= Q * (d / 256)       (|error| <= d / 256)
 *
 * so an activation keeps ~15 bits instead of 8. A block's exact integer dot
 * with the weights is I = 256 * dot(w, hi) + dot(w, lo): two 8-bit integer
 * dots over the same unpacked weight bytes (vpdpbusd / pmaddubsw), combined
 * in integers, which leaves the float work per block as it is for 8 bits.
 * lo is clamped to +-127 (it could reach +-128 when v * 256 sits within half
 * a step of a tie) so both bytes keep the 8-bit paths' operand ranges: the
 * AVX2 sign trick and the Q8_0 "x + 128" unsigned operand both need |q| <= 127.
 *
 * The first 16 * floor(nb/16) blocks ("full groups") are laid out per row in
 * groups of 16 blocks, so that a 512-bit vpdpbusd lane l always holds 4
 * elements of block l of the group and eight dot-product steps leave block
 * l's exact integer dot in lane l:
 *
 *   group g (16 blocks): plane hi (512 bytes), then plane lo (512 bytes),
 *     each plane:  vec 2r   lane l = elements 4r .. 4r+3      of block 16g+l
 *                  vec 2r+1 lane l = elements 16+4r .. 19+4r  of block 16g+l
 *   then per group: float d[16] (= amax / 127 / 256, the scale of Q),
 *   float s[16] (= d * sum Q: for the Q4_1 min term, the sum of the rounded
 *   x rather than of x, so each block computes exactly w . (rounded x)),
 *   int32 c[16] where c = -8 * sum Q for Q4_0
 *   weights (the integer correction that turns sum q_w * Q into
 *   sum (q_w - 8) * Q), else sum Q.
 *
 * The remaining nb % 16 "tail" blocks are stored after all rows, by quads of
 * rows (rows 4a..4a+3 of the call), so that one 16-byte broadcast gives the
 * same dword of the 4 rows of a tile:
 *
 *   quad a, tail block t: hi q[8 vec][4 rows][4 bytes] (128 B), lo the same
 *                         (128 B), d[4 rows], s[4 rows], c[4 rows] (304 bytes)
 *
 * For Q8_0 weights the q bytes hold q + 128 (unsigned) because vpdpbusd
 * multiplies unsigned by signed bytes. Where the call has no row (last
 * quad) the bytes are zero.
 */
#define KVS_XQ_GROUP 16                         /* blocks per group */
#define KVS_XQ_PLANE (KVS_XQ_GROUP * KVS_QK)    /* 512 bytes: one plane (hi or lo) of a group */
#define KVS_XQ_GROUP_QS (2 * KVS_XQ_PLANE)      /* 1024 bytes of q per group; the trailer follows */
#define KVS_XQ_GROUP_BYTES (KVS_XQ_GROUP_QS + 3 * KVS_XQ_GROUP * 4) /* 1216 */
#define KVS_XQ_TAIL_PLANE 128                   /* one plane of a quad's tail block */
#define KVS_XQ_TAIL_QS (2 * KVS_XQ_TAIL_PLANE)  /* 256: q bytes of a tail block; its trailer follows */
#define KVS_XQ_TAIL_BYTES (KVS_XQ_TAIL_QS + 3 * 4 * 4) /* 304: one tail block of a quad */

static inline int kvs_xq_groups(int k) { return k / KVS_QK / KVS_XQ_GROUP; }
static inline int kvs_xq_tail_blocks(int k) { return k / KVS_QK % KVS_XQ_GROUP; }
static inline size_t kvs_xq_row_bytes(int k) { return (size_t)kvs_xq_groups(k) * KVS_XQ_GROUP_BYTES; }
static inline size_t kvs_xq_quad_bytes(int k) { return (size_t)kvs_xq_tail_blocks(k) * KVS_XQ_TAIL_BYTES; }
/* All quantized x of a call: m rows of full groups, then the tail quads. */
static inline size_t kvs_xq_bytes(int k, int m) {
    return (size_t)m * kvs_xq_row_bytes(k) + (size_t)((m + 3) / 4) * kvs_xq_quad_bytes(k);
}

/* Vector (0..7) and byte within the lane of element e (0..31) of a block. */
static inline int kvs_xq_vec(int e) { return 2 * ((e & 15) >> 2) + (e >= 16); }

/* Offset of element e of block l (0..15) inside a group's hi plane (add
 * KVS_XQ_PLANE for the lo plane). */
static inline int kvs_xq_pos(int l, int e) { return kvs_xq_vec(e) * 64 + 4 * l + (e & 3); }

/* Offset of element e of tail block t, row sub (0..3) inside a quad's hi
 * plane (add KVS_XQ_TAIL_PLANE for lo). */
static inline int kvs_xq_tail_pos(int t, int sub, int e) {
    return t * KVS_XQ_TAIL_BYTES + kvs_xq_vec(e) * 16 + sub * 4 + (e & 3);
}

/* The integer word of a block's trailer (the c / sum fields above): -8 sum
 * for Q4_0 weights, else sum; wrapping (a NaN row's sum is arbitrary). */
static inline int32_t kvs_xq_sum_word(int wtype, int32_t sum) {
    return wtype == KVS_TYPE_Q4_0 ? (int32_t)(0u - 8u * (uint32_t)sum) : sum;
}

/* Accessors of a group's trailer. */
static inline float *kvs_xq_d(uint8_t *grp) { return (float *)(grp + KVS_XQ_GROUP_QS); }
static inline float *kvs_xq_s(uint8_t *grp) { return (float *)(grp + KVS_XQ_GROUP_QS) + KVS_XQ_GROUP; }
static inline int32_t *kvs_xq_sum(uint8_t *grp) { return (int32_t *)(grp + KVS_XQ_GROUP_QS) + 2 * KVS_XQ_GROUP; }
/* ... and of a tail block's trailer (4 rows each). */
#define KVS_XQ_TAIL_D KVS_XQ_TAIL_QS            /* byte offsets inside a tail block */
#define KVS_XQ_TAIL_S (KVS_XQ_TAIL_QS + 16)
#define KVS_XQ_TAIL_C (KVS_XQ_TAIL_QS + 32)
static inline float *kvs_xq_tail_d(uint8_t *quad, int t) { return (float *)(quad + t * KVS_XQ_TAIL_BYTES + KVS_XQ_TAIL_D); }
static inline float *kvs_xq_tail_s(uint8_t *quad, int t) { return (float *)(quad + t * KVS_XQ_TAIL_BYTES + KVS_XQ_TAIL_S); }
static inline int32_t *kvs_xq_tail_c(uint8_t *quad, int t) { return (int32_t *)(quad + t * KVS_XQ_TAIL_BYTES + KVS_XQ_TAIL_C); }

/* The two-level quantization of one element, given v = x * id: writes hi and
 * lo (see above). The scalar reference's definition; SIMD quantizers do the
 * same operations lane-wise (cvtps2dq rounds half to even like nearbyintf). */
static inline void kvs_xq_split(float v, int *hi, int *lo) {
    int h = (int)nearbyintf(v);
    /* wrapping arithmetic, as the SIMD quantizers' integer lanes do: a v out
     * of range (an infinite or NaN activation) must not be undefined
     * behaviour in the reference */
    int l = (int)((unsigned)(int)nearbyintf(v * 256.0f) - 256u * (unsigned)h);
    *hi = h;
    *lo = l > 127 ? 127 : l < -127 ? -127 : l;
}

/* The fixed float reduction of 16 partial sums (the same tree a 512-bit
 * register reduction performs: halves, then quarters, ...). */
static inline float kvs_tree16(const float a[16]) {
    float t8[8], t4[4], t2[2];
    for (int i = 0; i < 8; i++) t8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) t4[i] = t8[i] + t8[i + 4];
    for (int i = 0; i < 2; i++) t2[i] = t4[i] + t4[i + 2];
    return t2[0] + t2[1];
}

#endif
