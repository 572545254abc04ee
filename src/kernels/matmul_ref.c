/*
 * Scalar reference of the matmul: activation quantization and the per-output
 * dot products, in exactly the canonical order of kernels_impl.h. Every SIMD
 * path must produce the same bits as these functions.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels_impl.h"

int kvs_wtype_is_quant(int type) {
    return type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q8_0;
}

/* Quantizes one block of 32 (two-level, quant.h): hi and lo bytes (+ offset),
 * returns the scale of Q = 256 * hi + lo, and sum Q. */
static float quantize_block(const float *xb, int offset, uint8_t hi[KVS_QK], uint8_t lo[KVS_QK],
                            int32_t *sum) {
    float amax = 0.0f;
    for (int e = 0; e < KVS_QK; e++) amax = fmaxf(amax, fabsf(xb[e]));
    float d = amax / 127.0f;
    float id = d >= FLT_MIN ? 1.0f / d : 0.0f; /* 1 / subnormal d would overflow */
    int32_t s = 0;
    for (int e = 0; e < KVS_QK; e++) {
        int h, l;
        kvs_xq_split(xb[e] * id, &h, &l);
        s = (int32_t)((uint32_t)s + 256u * (uint32_t)h + (uint32_t)l); /* wrapping, as the SIMD lanes */
        hi[e] = (uint8_t)(h + offset);
        lo[e] = (uint8_t)(l + offset);
    }
    *sum = s;
    return d * (1.0f / 256.0f); /* exact: a power of two */
}

void kvs_quantize_row_layout(kvs_xq_block_fn quantize, const float *x, int k, int wtype, uint8_t *xq,
                             uint8_t *quad, int sub) {
    int ng = kvs_xq_groups(k), nt = kvs_xq_tail_blocks(k);
    int offset = wtype == KVS_TYPE_Q8_0 ? 128 : 0; /* Q8_0: x is the unsigned operand */
    uint8_t hi[KVS_QK], lo[KVS_QK];
    int32_t sum;
    /* elements 4j..4j+3 of a block stay together in every layout: dword copies */
    for (int g = 0; g < ng; g++) {
        uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
        for (int l = 0; l < KVS_XQ_GROUP; l++) {
            float d = quantize(x + (size_t)(g * KVS_XQ_GROUP + l) * KVS_QK, offset, hi, lo, &sum);
            for (int e = 0; e < KVS_QK; e += 4) {
                memcpy(grp + kvs_xq_pos(l, e), hi + e, 4);
                memcpy(grp + KVS_XQ_PLANE + kvs_xq_pos(l, e), lo + e, 4);
            }
            kvs_xq_d(grp)[l] = d;
            kvs_xq_s(grp)[l] = d * (float)sum;
            kvs_xq_sum(grp)[l] = kvs_xq_sum_word(wtype, sum);
        }
    }
    for (int t = 0; t < nt; t++) {
        float d = quantize(x + (size_t)(ng * KVS_XQ_GROUP + t) * KVS_QK, offset, hi, lo, &sum);
        for (int e = 0; e < KVS_QK; e += 4) {
            memcpy(quad + kvs_xq_tail_pos(t, sub, e), hi + e, 4);
            memcpy(quad + KVS_XQ_TAIL_PLANE + kvs_xq_tail_pos(t, sub, e), lo + e, 4);
        }
        kvs_xq_tail_d(quad, t)[sub] = d;
        kvs_xq_tail_s(quad, t)[sub] = d * (float)sum;
        kvs_xq_tail_c(quad, t)[sub] = kvs_xq_sum_word(wtype, sum);
    }
}

void kvs_quantize_row_ref(const float *x, int k, int wtype, uint8_t *xq, uint8_t *quad, int sub) {
    kvs_quantize_row_layout(quantize_block, x, k, wtype, xq, quad, sub);
}

/* Exact integer dot of weight block b of row with the activation integers
 * q[e] (Q = 256 * hi + lo, already signed), and the block's scale (and min
 * for Q4_1). */
static int32_t block_dot(const kvs_wmat *w, const uint8_t *row, int b, const int q[KVS_QK],
                         float *dw, float *mw) {
    int32_t isum = 0;
    *mw = 0.0f;
    switch (w->type) {
    case KVS_TYPE_Q4_0: {
        const kvs_block_q4_0 *blk = (const kvs_block_q4_0 *)row + b;
        for (int e = 0; e < 16; e++)
            isum += ((blk->qs[e] & 15) - 8) * q[e] + ((blk->qs[e] >> 4) - 8) * q[e + 16];
        *dw = kvs_f16_to_f32(blk->d);
        break;
    }
    case KVS_TYPE_Q4_1: {
        const kvs_block_q4_1 *blk = (const kvs_block_q4_1 *)row + b;
        for (int e = 0; e < 16; e++) isum += (blk->qs[e] & 15) * q[e] + (blk->qs[e] >> 4) * q[e + 16];
        *dw = kvs_f16_to_f32(blk->d);
        *mw = kvs_f16_to_f32(blk->m);
        break;
    }
    default: { /* KVS_TYPE_Q8_0 */
        const kvs_block_q8_0 *blk = (const kvs_block_q8_0 *)row + b;
        for (int e = 0; e < KVS_QK; e++) isum += blk->qs[e] * q[e];
        *dw = kvs_f16_to_f32(blk->d);
        break;
    }
    }
    return isum;
}

/* Q of element e from its hi and lo bytes. */
static inline int xq_value(uint8_t hi, uint8_t lo, int offset) {
    int h = offset ? (int)hi - offset : (int)(int8_t)hi;
    int l = offset ? (int)lo - offset : (int)(int8_t)lo;
    return 256 * h + l;
}

float kvs_dot_q_ref(const kvs_wmat *w, int j, const uint8_t *xq, const uint8_t *quad, int sub) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
    int ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    int offset = w->type == KVS_TYPE_Q8_0 ? 128 : 0;
    int q[KVS_QK];
    float dw, mw;
    float acc[16] = {0};
    for (int b = 0; b < ng * KVS_XQ_GROUP; b++) {
        uint8_t *grp = (uint8_t *)xq + (size_t)(b / KVS_XQ_GROUP) * KVS_XQ_GROUP_BYTES;
        int l = b % KVS_XQ_GROUP;
        for (int e = 0; e < KVS_QK; e++)
            q[e] = xq_value(grp[kvs_xq_pos(l, e)], grp[KVS_XQ_PLANE + kvs_xq_pos(l, e)], offset);
        int32_t isum = block_dot(w, row, b, q, &dw, &mw);
        acc[l] = fmaf((float)isum, dw * kvs_xq_d(grp)[l], acc[l]);
        if (w->type == KVS_TYPE_Q4_1) acc[l] = fmaf(mw, kvs_xq_s(grp)[l], acc[l]);
    }
    float y = kvs_tree16(acc);
    for (int t = 0; t < nt; t++) {
        for (int e = 0; e < KVS_QK; e++)
            q[e] = xq_value(quad[kvs_xq_tail_pos(t, sub, e)], quad[KVS_XQ_TAIL_PLANE + kvs_xq_tail_pos(t, sub, e)],
                            offset);
        int32_t isum = block_dot(w, row, ng * KVS_XQ_GROUP + t, q, &dw, &mw);
        uint8_t *qd = (uint8_t *)quad;
        y = fmaf((float)isum, dw * kvs_xq_tail_d(qd, t)[sub], y);
        if (w->type == KVS_TYPE_Q4_1) y = fmaf(mw, kvs_xq_tail_s(qd, t)[sub], y);
    }
    return y;
}

float kvs_dot_f_ref(const kvs_wmat *w, int j, const float *x) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
    float acc[16] = {0};
    for (int e = 0; e < w->k; e++) {
        float wv;
        if (w->type == KVS_TYPE_F32) {
            memcpy(&wv, row + 4 * (size_t)e, 4);
        } else {
            uint16_t h;
            memcpy(&h, row + 2 * (size_t)e, 2);
            wv = w->type == KVS_TYPE_F16 ? kvs_f16_to_f32(h) : kvs_bf16_to_f32(h);
        }
        acc[e % 16] = fmaf(x[e], wv, acc[e % 16]);
    }
    return kvs_tree16(acc);
}

void kvs_quantize_rows_with(kvs_xq_block_fn quantize, const kvs_mm_call *c, int i0, int i1) {
    for (int i = i0; i < i1; i++)
        kvs_quantize_row_layout(quantize, c->x + (size_t)i * c->w->k, c->w->k, c->w->type,
                                (uint8_t *)c->xq + (size_t)i * c->xq_row,
                                (uint8_t *)c->xq_tail + (size_t)(i / 4) * c->xq_quad, i % 4);
}

static void scalar_quantize_rows(const kvs_mm_call *c, int i0, int i1) { kvs_quantize_rows_with(quantize_block, c, i0, i1); }

static void scalar_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    for (int i = 0; i < c->m; i++) {
        float *yi = c->y + (size_t)i * w->n;
        if (c->xq) {
            const uint8_t *xqi = c->xq + (size_t)i * c->xq_row;
            const uint8_t *quad = c->xq_tail + (size_t)(i / 4) * c->xq_quad;
            for (int j = j0; j < j1; j++) yi[j] = kvs_dot_q_ref(w, j, xqi, quad, i % 4);
        } else {
            const float *xi = c->x + (size_t)i * w->k;
            for (int j = j0; j < j1; j++) yi[j] = kvs_dot_f_ref(w, j, xi);
        }
    }
}

void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);

const kvs_isa kvs_isa_scalar = {
    .name = "scalar",
    .quantize_rows = scalar_quantize_rows,
    .matmul_cols = scalar_matmul_cols,
    .attention_unit = kvs_attention_unit_ref,
    .attention_unit_recal = kvs_attention_unit_ref,
};
