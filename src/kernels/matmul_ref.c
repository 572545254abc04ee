/*
 * Scalar reference of the matmul: activation quantization and the per-output
 * dot products, in exactly the canonical order of kernels_impl.h. Every SIMD
 * path must produce the same bits as these functions.
 */
#include <math.h>

#include "kernels/kernels_impl.h"

int kvs_wtype_is_quant(int type) {
    return type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q8_0;
}

void kvs_quantize_row_ref(const float *x, int k, int wtype, uint8_t *xq) {
    int nb = k / KVS_QK, ng = kvs_xq_groups(k);
    int offset = wtype == KVS_TYPE_Q8_0 ? 128 : 0; /* Q8_0: x is the unsigned operand */
    for (int g = 0; g < ng; g++) {
        uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
        float *gd = kvs_xq_d(grp), *gs = kvs_xq_s(grp);
        int32_t *gsum = kvs_xq_sum(grp);
        for (int l = 0; l < KVS_XQ_GROUP; l++) {
            int b = g * KVS_XQ_GROUP + l;
            if (b >= nb) {
                for (int e = 0; e < KVS_QK; e++) grp[kvs_xq_pos(l, e)] = (uint8_t)offset;
                gd[l] = 0.0f;
                gs[l] = 0.0f;
                gsum[l] = 0;
                continue;
            }
            const float *xb = x + (size_t)b * KVS_QK;
            float amax = 0.0f;
            for (int e = 0; e < KVS_QK; e++) amax = fmaxf(amax, fabsf(xb[e]));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t sum = 0;
            for (int e = 0; e < KVS_QK; e++) {
                int q = (int)nearbyintf(xb[e] * id);
                sum += q;
                grp[kvs_xq_pos(l, e)] = (uint8_t)(q + offset);
            }
            gd[l] = d;
            gs[l] = d * (float)sum;
            gsum[l] = wtype == KVS_TYPE_Q4_0 ? -8 * sum : sum;
        }
    }
}

/* Signed value of element e of block b of the quantized x row. */
static inline int xq_get(const uint8_t *xq, int b, int e, int offset) {
    const uint8_t *grp = xq + (size_t)(b / KVS_XQ_GROUP) * KVS_XQ_GROUP_BYTES;
    uint8_t v = grp[kvs_xq_pos(b % KVS_XQ_GROUP, e)];
    return offset ? (int)v - offset : (int)(int8_t)v;
}

float kvs_dot_q_ref(const kvs_wmat *w, int j, const uint8_t *xq) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
    int nb = w->k / KVS_QK;
    float acc[16] = {0};
    for (int b = 0; b < nb; b++) {
        uint8_t *grp = (uint8_t *)xq + (size_t)(b / KVS_XQ_GROUP) * KVS_XQ_GROUP_BYTES;
        float dx = kvs_xq_d(grp)[b % KVS_XQ_GROUP];
        float sx = kvs_xq_s(grp)[b % KVS_XQ_GROUP];
        int32_t isum = 0;
        float dw, mw = 0.0f;
        switch (w->type) {
        case KVS_TYPE_Q4_0: {
            const kvs_block_q4_0 *blk = (const kvs_block_q4_0 *)row + b;
            for (int e = 0; e < 16; e++) {
                isum += ((blk->qs[e] & 15) - 8) * xq_get(xq, b, e, 0);
                isum += ((blk->qs[e] >> 4) - 8) * xq_get(xq, b, e + 16, 0);
            }
            dw = kvs_f16_to_f32(blk->d);
            break;
        }
        case KVS_TYPE_Q4_1: {
            const kvs_block_q4_1 *blk = (const kvs_block_q4_1 *)row + b;
            for (int e = 0; e < 16; e++) {
                isum += (blk->qs[e] & 15) * xq_get(xq, b, e, 0);
                isum += (blk->qs[e] >> 4) * xq_get(xq, b, e + 16, 0);
            }
            dw = kvs_f16_to_f32(blk->d);
            mw = kvs_f16_to_f32(blk->m);
            break;
        }
        default: { /* KVS_TYPE_Q8_0 */
            const kvs_block_q8_0 *blk = (const kvs_block_q8_0 *)row + b;
            for (int e = 0; e < KVS_QK; e++) isum += blk->qs[e] * xq_get(xq, b, e, 128);
            dw = kvs_f16_to_f32(blk->d);
            break;
        }
        }
        int c = b % 16;
        acc[c] = fmaf((float)isum, dw * dx, acc[c]);
        if (w->type == KVS_TYPE_Q4_1) acc[c] = fmaf(mw, sx, acc[c]);
    }
    return kvs_tree16(acc);
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

static void scalar_quantize_rows(const kvs_mm_call *c, int i0, int i1) {
    for (int i = i0; i < i1; i++)
        kvs_quantize_row_ref(c->x + (size_t)i * c->w->k, c->w->k, c->w->type,
                             (uint8_t *)c->xq + (size_t)i * c->xq_row);
}

static void scalar_matmul_cols(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    for (int i = 0; i < c->m; i++) {
        float *yi = c->y + (size_t)i * w->n;
        if (c->xq) {
            const uint8_t *xqi = c->xq + (size_t)i * c->xq_row;
            for (int j = j0; j < j1; j++) yi[j] = kvs_dot_q_ref(w, j, xqi);
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
};
