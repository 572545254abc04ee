/*
 * Scalar reference of the Q5_0 / Q5_1 / K-quant kernels (kquant.h): block
 * unpacking, activation quantization, the canonical dot product, and
 * dequantization.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kquant.h"
#include "kernels/quant.h"

int kvs_kq_handles(int type) {
    return type == KVS_TYPE_Q5_0 || type == KVS_TYPE_Q5_1 || type == KVS_TYPE_Q4_K || type == KVS_TYPE_Q5_K ||
           type == KVS_TYPE_Q6_K;
}

int kvs_kq_has_min(int type) { return type == KVS_TYPE_Q5_1 || type == KVS_TYPE_Q4_K || type == KVS_TYPE_Q5_K; }
int kvs_kq_split_scales(int type) { return type == KVS_TYPE_Q6_K; }

static inline float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kvs_f16_to_f32(h);
}

/* ggml's get_scale_min_k4: 6-bit scale and min of sub-block j (0..7). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void kvs_kq_scales(int type, const uint8_t *row, int b, kvs_kq_block *o) {
    o->mw = 0.0f;
    switch (type) {
    case KVS_TYPE_Q5_0:
        o->dw[0] = o->dw[1] = half_at(row + (size_t)b * 22);
        break;
    case KVS_TYPE_Q5_1:
        o->dw[0] = o->dw[1] = half_at(row + (size_t)b * 24);
        o->mw = half_at(row + (size_t)b * 24 + 2);
        break;
    case KVS_TYPE_Q4_K:
    case KVS_TYPE_Q5_K: {
        const uint8_t *sb = row + (size_t)(b / 8) * (type == KVS_TYPE_Q5_K ? 176 : 144);
        int sc, m;
        scale_min_k4(b % 8, sb + 4, &sc, &m);
        o->dw[0] = o->dw[1] = half_at(sb) * (float)sc;
        o->mw = -(half_at(sb + 2) * (float)m);
        break;
    }
    default: { /* KVS_TYPE_Q6_K */
        const int j = b % 8;
        const uint8_t *sb = row + (size_t)(b / 8) * 210;
        const int8_t *sc = (const int8_t *)(sb + 192) + 8 * (j / 4) + 2 * (j % 4);
        float d = half_at(sb + 208);
        o->dw[0] = d * (float)sc[0];
        o->dw[1] = d * (float)sc[1];
        break;
    }
    }
}

void kvs_kq_unpack(int type, const uint8_t *row, int b, kvs_kq_block *o) {
    kvs_kq_scales(type, row, b, o);
    switch (type) {
    case KVS_TYPE_Q5_0:
    case KVS_TYPE_Q5_1: {
        const int m1 = type == KVS_TYPE_Q5_1;
        const uint8_t *blk = row + (size_t)b * (m1 ? 24 : 22);
        uint32_t qh;
        memcpy(&qh, blk + (m1 ? 4 : 2), 4);
        const uint8_t *qs = blk + (m1 ? 8 : 6);
        for (int e = 0; e < 16; e++) {
            int lo = (qs[e] & 15) | (int)((qh >> e) & 1) << 4;
            int hi = (qs[e] >> 4) | (int)((qh >> (e + 16)) & 1) << 4;
            o->q[e] = (int8_t)(m1 ? lo : lo - 16);
            o->q[e + 16] = (int8_t)(m1 ? hi : hi - 16);
        }
        break;
    }
    case KVS_TYPE_Q4_K:
    case KVS_TYPE_Q5_K: {
        const int k5 = type == KVS_TYPE_Q5_K, j = b % 8;
        const uint8_t *sb = row + (size_t)(b / 8) * (k5 ? 176 : 144);
        const uint8_t *qs = sb + (k5 ? 48 : 16) + 32 * (j / 2), *qh = sb + 16;
        for (int l = 0; l < 32; l++) {
            int v = j & 1 ? qs[l] >> 4 : qs[l] & 15;
            if (k5) v |= ((qh[l] >> j) & 1) << 4;
            o->q[l] = (int8_t)v;
        }
        break;
    }
    default: { /* KVS_TYPE_Q6_K */
        const int j = b % 8, n = j / 4, r = j % 4;
        const uint8_t *sb = row + (size_t)(b / 8) * 210;
        const uint8_t *ql = sb + 64 * n + (r & 1 ? 32 : 0), *qh = sb + 128 + 32 * n;
        for (int l = 0; l < 32; l++) {
            int v = (r < 2 ? ql[l] & 15 : ql[l] >> 4) | ((qh[l] >> (2 * r)) & 3) << 4;
            o->q[l] = (int8_t)(v - 32);
        }
        break;
    }
    }
}

void kvs_kq_dequantize_row(int type, const void *src, float *dst, int k) {
    kvs_kq_block blk;
    for (int b = 0; b < k / 32; b++) {
        kvs_kq_unpack(type, src, b, &blk);
        for (int e = 0; e < 32; e++) dst[b * 32 + e] = fmaf(blk.dw[e >> 4], (float)blk.q[e], blk.mw);
    }
}

/* quant.h's two-level quantization of one block, natural order. */
void kvs_kq_quantize_row(const float *x, int k, uint8_t *xrow) {
    const int nb = k / 32, nbp = kvs_kq_nbp(k);
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xrow, k);
    float *dx = tr.dx, *sx = tr.sx;
    int32_t *s0 = tr.s0, *s1 = tr.s1;
    memset(xrow + (size_t)nb * 64, 0, (size_t)(nbp - nb) * 64 + (size_t)nbp * 16); /* the padding past nb */
    for (int b = 0; b < nb; b++) {
        const float *xb = x + (size_t)b * 32;
        int8_t *hi = (int8_t *)xrow + (size_t)b * 64, *lo = hi + 32;
        float amax = 0.0f;
        for (int e = 0; e < 32; e++) amax = fmaxf(amax, fabsf(xb[e]));
        float d = amax / 127.0f;
        float id = d >= FLT_MIN ? 1.0f / d : 0.0f;
        int32_t s[2] = {0, 0};
        for (int e = 0; e < 32; e++) {
            int h, l;
            kvs_xq_split(xb[e] * id, &h, &l);
            hi[e] = (int8_t)h;
            lo[e] = (int8_t)l;
            /* wrapping, as the SIMD lanes: a NaN activation's h is INT_MIN */
            s[e >> 4] = (int32_t)((uint32_t)s[e >> 4] + 256u * (uint32_t)h + (uint32_t)l);
        }
        dx[b] = d * (1.0f / 256.0f);
        sx[b] = dx[b] * (float)(int32_t)((uint32_t)s[0] + (uint32_t)s[1]);
        s0[b] = s[0];
        s1[b] = s[1];
    }
}

float kvs_kq_dot_ref(const kvs_wmat *w, int j, const uint8_t *xrow) {
    const int nb = w->k / 32, split = kvs_kq_split_scales(w->type), has_min = kvs_kq_has_min(w->type);
    const uint8_t *row = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xrow, w->k);
    const float *dx = tr.dx, *sx = tr.sx;
    const int nf = nb / 16 * 16;
    float acc[16] = {0}, y = 0.0f;
    kvs_kq_block blk;
    for (int b = 0; b < nb; b++) {
        if (b == nf) y = kvs_tree16(acc); /* the full groups done: the tail blocks follow on y */
        const int8_t *hi = (const int8_t *)xrow + (size_t)b * 64, *lo = hi + 32;
        kvs_kq_unpack(w->type, row, b, &blk);
        int32_t I[2] = {0, 0};
        for (int e = 0; e < 32; e++) I[e >> 4] += blk.q[e] * (256 * hi[e] + lo[e]);
        float *a = b < nf ? &acc[b % 16] : &y;
        if (split) {
            *a = fmaf((float)I[0], blk.dw[0] * dx[b], *a);
            *a = fmaf((float)I[1], blk.dw[1] * dx[b], *a);
        } else {
            *a = fmaf((float)(I[0] + I[1]), blk.dw[0] * dx[b], *a);
        }
        if (has_min) *a = fmaf(blk.mw, sx[b], *a);
    }
    return nf == nb ? kvs_tree16(acc) : y;
}

static void scalar_dot_cols(const kvs_wmat *w, const uint8_t *xq, size_t xq_row, int m, const uint8_t *xt, float *y,
                            int j0, int j1) {
    (void)xt; /* no prep_quads */
    for (int i = 0; i < m; i++)
        for (int j = j0; j < j1; j++) y[(size_t)i * w->n + j] = kvs_kq_dot_ref(w, j, xq + (size_t)i * xq_row);
}

static void scalar_quantize_row(const float *x, int k, uint8_t *xrow, int m) {
    (void)m; /* one layout */
    kvs_kq_quantize_row(x, k, xrow);
}

const kvs_kq_isa kvs_kq_isa_scalar = {.name = "scalar", .dot_cols = scalar_dot_cols, .quantize_row = scalar_quantize_row};
