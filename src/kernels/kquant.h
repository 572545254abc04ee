/*
 * Q5_0, Q5_1 and the K-quants (Q4_K, Q5_K, Q6_K): weight block layouts
 * (ggml's, byte for byte), their unpacking, and the matmul these kernels
 * run. dispatch.c routes weights of these types here (kvs_kq_handles).
 *
 *   Q5_0  | f16 d | u8 qh[4] | u8 qs[16] |            32 el., 22 B: x = d * (q - 16)
 *   Q5_1  | f16 d | f16 m | u8 qh[4] | u8 qs[16] |    32 el., 24 B: x = d * q + m
 *         q = nibble of qs (low: e < 16, high: e >= 16) | bit e of qh << 4
 *   Q4_K  | f16 d | f16 dmin | u8 scales[12] | u8 qs[128] |            256 el., 144 B
 *   Q5_K  | f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128] | 256 el., 176 B
 *         8 sub-blocks of 32 with 6-bit scale sc and min m (packed in scales[]):
 *         x = (d * sc) * q - (dmin * m); sub-block j takes the low (j even) or
 *         high (j odd) nibbles of qs[32 (j/2) ..], Q5_K adds bit j of qh[l] << 4
 *   Q6_K  | u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d |            256 el., 210 B
 *         16 sub-blocks of 16: x = (d * scale) * (q - 32), q 6 bits
 *
 * Every type is seen as 32-element blocks b: integers q_w[32] (the ggml
 * integer of each element, e.g. q - 16 for Q5_0), a scale dw per half
 * (both halves equal except Q6_K) and an additive min mw (Q5_1, Q4_K, Q5_K:
 * x = dw * q_w + mw). The canonical arithmetic of y = x . w (all ISA paths
 * reproduce it bit for bit):
 *
 *   x row -> two-level quantized blocks of 32 (quant.h's definition: Q, dx =
 *   d / 256, sx = dx * sum Q), stored here in natural element order
 *   (kvs_kq_xrow_bytes).
 *   I_h = exact integer dot of q_w and Q over half h (elements 16h..16h+15);
 *   nf = 16 * (nb / 16) (the blocks of whole groups of 16);
 *   for every block b < nf, a = acc[b % 16]:
 *     split scales (Q6_K): a = fma((float)I_0, dw_0 * dx, a);
 *                          a = fma((float)I_1, dw_1 * dx, a)
 *     otherwise:           a = fma((float)(I_0 + I_1), dw * dx, a)
 *     with a min:          a = fma(mw, sx, a)
 *   y = kvs_tree16(acc);
 *   the tail blocks b = nf .. nb - 1, in order: the same steps with a = y.
 * This is kernels_impl.h's order for Q4_0 / Q4_1 / Q8_0 too: a row's tail
 * (SmolLM2's k = 576 is 16 + 2 blocks, gemma3's 640 16 + 4) is computed with
 * lanes = outputs by the batch paths, at the cost of its blocks alone (on
 * chains b % 16 it took as long as the row's 16 full blocks: session 56).
 */
#ifndef KVS_KERNELS_KQUANT_H
#define KVS_KERNELS_KQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* 1 if w's type runs through the kernels of this file. */
int kvs_kq_handles(int type);

/* Quantized activation row, nbp = nb rounded up to 16: 64 * nbp bytes of
 * integers (the reference: nb blocks of {i8 hi[32], i8 lo[32]}; an ISA may
 * use another order of the same values, see its quantize_row), then, each
 * nbp long and zero past nb (an ISA's layout may fill those lanes with
 * copies its kernels use, see its quantize_row): float dx[nbp], float sx[nbp], int32 s0[nbp],
 * int32 s1[nbp] (s_h = sum of Q over half h of the block: the SIMD paths
 * take weights as unsigned q_w + off and subtract off * s_h, exactly). */
static inline int kvs_kq_nbp(int k) { return (k / 32 + 15) & ~15; } /* whole groups of 16: the widest lane layout */
static inline size_t kvs_kq_xrow_bytes(int k) { return (size_t)kvs_kq_nbp(k) * 80; }
/* The per-block arrays after a quantized row's integers. */
typedef struct kvs_kq_trailer {
    float *dx, *sx;
    int32_t *s0, *s1;
} kvs_kq_trailer;
static inline kvs_kq_trailer kvs_kq_trailer_of(const uint8_t *xrow, int k) {
    const int nbp = kvs_kq_nbp(k);
    float *dx = (float *)(uintptr_t)(xrow + (size_t)nbp * 64);
    int32_t *s0 = (int32_t *)(dx + 2 * nbp);
    return (kvs_kq_trailer){dx, dx + nbp, s0, s0 + nbp};
}

/* The operands of the rows' tails by quads of 4 rows (the AVX-512 batch
 * path's lanes = outputs; kvs_kq_isa.prep_quads): bytes a call of m rows
 * of k elements keeps for them, after its quantized rows. */
#define KVS_KQ_QUAD_BLOCK_BYTES 1280 /* a quad's operands of one tail block */
static inline size_t kvs_kq_quads_bytes(int k, int m) {
    return (size_t)((m + 3) / 4) * (size_t)((k / 32) % 16) * KVS_KQ_QUAD_BLOCK_BYTES;
}

size_t kvs_kq_work_size(const kvs_wmat *w, int m);
void kvs_kq_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y, void *work);
/* nw matrices of these types and one k on the same x (work: the largest
 * kvs_kq_work_size): x quantized once, one parallel loop; each ys[i] gets
 * the bytes of kvs_kq_matmul. kvs_kq_multi_ok: whether it takes them. */
int kvs_kq_multi_ok(int nw, const kvs_wmat *const *ws);
void kvs_kq_matmul_multi(kvs_pool *pool, int nw, const kvs_wmat *const *ws, const float *x, int m, float *const *ys,
                         void *work);
/* Dequantizes k elements of a row (k a multiple of the type's block). */
void kvs_kq_dequantize_row(int type, const void *src, float *dst, int k);

/* ---- internals shared by kquant_ref.c and the SIMD files ---- */

/* Block b (32 elements) of a weight row: integers, half scales, min. */
typedef struct kvs_kq_block {
    int8_t q[32];
    float dw[2];
    float mw;
} kvs_kq_block;
void kvs_kq_unpack(int type, const uint8_t *row, int b, kvs_kq_block *out);
/* Only dw and mw of block b (the SIMD paths unpack the integers themselves). */
void kvs_kq_scales(int type, const uint8_t *row, int b, kvs_kq_block *out);
int kvs_kq_has_min(int type);
int kvs_kq_split_scales(int type);

/* x row i of the call quantized into xrow (kvs_kq_xrow_bytes(k) bytes). */
void kvs_kq_quantize_row(const float *x, int k, uint8_t *xrow);
/* The scalar reference of one output. */
float kvs_kq_dot_ref(const kvs_wmat *w, int j, const uint8_t *xrow);

/* One ISA row: y[i][j] for rows [0, m) and columns [j0, j1), on x rows its
 * own quantize_row wrote for a call of m rows (the values of
 * kvs_kq_quantize_row, bit for bit, in the order the ISA reads; lanes past
 * the row may hold copies the ISA's kernels use), and xt: the quads of
 * those rows from the first (prep_quads), or NULL where the ISA has no
 * prep_quads. prep_quads (NULL: none): after rows [0, m) of a call of
 * m_call rows are quantized, their quads' tail operands into xt (m a
 * multiple of 4 unless the call's last rows). */
typedef struct kvs_kq_isa {
    const char *name;
    void (*dot_cols)(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y, int j0,
                     int j1);
    void (*quantize_row)(const float *x, int k, uint8_t *xrow, int m);
    void (*prep_quads)(int k, const uint8_t *xq, size_t xq_row, int m, int m_call, uint8_t *xt);
} kvs_kq_isa;
extern const kvs_kq_isa kvs_kq_isa_scalar;
#if defined(__x86_64__)
extern const kvs_kq_isa kvs_kq_isa_avx2;
extern const kvs_kq_isa kvs_kq_isa_avx512;
#endif

#endif
