/*
 * AVX-512 attention, what the prefill layout (attention_avx512.c) and the
 * decode layout and its split (attention_avx512_decode.c) share: the
 * in-register transpose and the unit's context (exp and tree sums:
 * avx512_math.h). Include after the AVX-512 target pragma.
 */
#ifndef KVS_KERNELS_ATTENTION_AVX512_H
#define KVS_KERNELS_ATTENTION_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "kernels/avx512_math.h"
#include "kernels/kernels_impl.h"

#define AI __attribute__((always_inline)) static inline

/* 16 x 16 float transpose in registers. */
AI void transpose16(__m512 r[16]) {
    __m512 t[16], u[16], v[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512 a = t[4 * i], b = t[4 * i + 1], cc = t[4 * i + 2], d = t[4 * i + 3];
        u[4 * i + 0] = _mm512_shuffle_ps(a, cc, 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(a, cc, 0xee);
        u[4 * i + 2] = _mm512_shuffle_ps(b, d, 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(b, d, 0xee);
    }
    /* u[4i + c], 128-bit lane L = rows 4i..4i+3 of column 4L + c */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        v[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);      /* L0, L2 of rows 0-7 */
        v[4 + c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);  /* L1, L3 */
        v[8 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        v[12 + c] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0x88);       /* column c */
        r[8 + c] = _mm512_shuffle_f32x4(v[c], v[8 + c], 0xdd);   /* column 8 + c */
        r[4 + c] = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v[4 + c], v[12 + c], 0xdd);
    }
}

typedef struct unit_ctx {
    const kvs_attn_call *c;
    int t0, t1, g, group, D, rows;
    size_t kv_off;   /* start of kv head g */
    size_t ctxs;     /* floats per score row (padded n_ctx) */
    float *S;        /* scores / probabilities */
    float *stage;    /* Qt / Kt staging */
    float inv[KVS_ATTN_ROWS];
    int n[KVS_ATTN_ROWS];   /* row r sees slots [lo[r], n[r]) */
    int lo[KVS_ATTN_ROWS];
    int jmin;               /* min lo, rounded down to 16 */
} unit_ctx;


/* The unit (tokens [t0, t1) of kv head g) with its score rows at S and its
 * staging at stage. */
static inline void unit_init(unit_ctx *u, const kvs_attn_call *c, int t0, int t1, int g, float *S, float *stage) {
    const int group = c->n_head / c->n_kv_head;
    u->c = c;
    u->t0 = t0;
    u->t1 = t1;
    u->g = g;
    u->group = group;
    u->D = c->head_dim;
    u->rows = (t1 - t0) * group;
    u->kv_off = (size_t)g * c->n_ctx * c->head_dim;
    u->ctxs = kvs_attn_score_stride(c->n_ctx);
    u->S = S;
    u->stage = stage;
    u->jmin = c->n_ctx;
    for (int r = 0; r < u->rows; r++) {
        u->n[r] = kvs_attn_n(c, c->pos[t0 + r / group]);
        u->lo[r] = kvs_attn_lo(c, u->n[r]);
        if (u->lo[r] < u->jmin) u->jmin = u->lo[r];
    }
    u->jmin &= ~15;
}


/* The largest n of the unit's rows: scores are computed up to it. */
static inline int unit_maxn(const unit_ctx *u) {
    int maxn = 0;
    for (int r = 0; r < u->rows; r++) if (u->n[r] > maxn) maxn = u->n[r];
    return maxn;
}

/* One decode token split across threads (kvs_isa's attention_split_*, f16
 * / f32 in attention_avx512_decode.c, Q8 in attention_q8_avx512_decode.c):
 * kv head g's unit with its score rows in thread 0's (c->work, which every
 * phase's units share) and its staging in the thread's own work. */
static inline void split_unit_init(unit_ctx *u, const kvs_attn_call *c, int g, float *work) {
    const size_t ctxs = kvs_attn_score_stride(c->n_ctx);
    const int group = c->n_head / c->n_kv_head;
    unit_init(u, c, 0, 1, g, c->work + (size_t)g * group * ctxs, work + KVS_ATTN_ROWS * ctxs);
}

/* Phase 0 (scores): about 8 units per thread, each at least
 * SPLIT_UNIT_BYTES of keys (a unit's first keys are not prefetched by
 * itself: units of 32 KB of SmolLM2's f16 keys were 1.5x slower than of
 * 128 KB). Keys per unit (a multiple of 32) of a span of keys of key_bytes
 * each, and the units per kv head. */
#define SPLIT_UNIT_BYTES (128 * 1024)
static inline int split_key_units(const kvs_attn_call *c, int span, size_t key_bytes, int *keys_per_unit) {
    const int nth = c->n_threads > 0 ? c->n_threads : 1;
    const int want = (8 * nth + c->n_kv_head - 1) / c->n_kv_head;
    const int min_keys = (int)(SPLIT_UNIT_BYTES / key_bytes);
    int kpu = (span + want - 1) / want;
    if (kpu < min_keys) kpu = min_keys;
    kpu = (kpu + 31) & ~31;
    *keys_per_unit = kpu;
    return (span + kpu - 1) / kpu;
}

/* Kv heads that phase 2 (outputs) takes whole: those the threads share
 * evenly; the rest are cut by dims. */
static inline int split_whole_heads(const kvs_attn_call *c) {
    return c->n_threads > 0 ? c->n_kv_head - c->n_kv_head % c->n_threads : 0;
}

/* The decode layout's passes for a unit of fewer than 8 rows
 * (attention_avx512_decode.c). */
void kvs_avx512_decode_unit(unit_ctx *u);

#endif
