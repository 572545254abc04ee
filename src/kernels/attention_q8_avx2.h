/*
 * What the AVX2 attention on Q8 rows shares between its prefill units
 * (attention_q8_avx2.c: lane = query row) and its decode units and split
 * (attention_q8_avx2_decode.c: lane = key / dim): a unit's state and the
 * 16-bit level pairs. Include inside an AVX2 target region.
 */
#ifndef KVS_KERNELS_ATTENTION_Q8_AVX2_H
#define KVS_KERNELS_ATTENTION_Q8_AVX2_H

#include <string.h>

#include "kernels/attention_avx2.h"

#define PV_BLOCK KVS_ATTN_Q8_PV_BLOCK
#define NB_MAX (KVS_ATTN_ROWS / RB)

typedef struct q8_unit2 {
    const kvs_attn_call *c;
    int t0, g, group, D, rows, nrb, jmin, maxall;
    size_t rb, ctxs;
    const int8_t *K, *V;
    float *S;     /* prefill: (nrb, ctxs, RB) scores, weights, then level pairs; decode:
                   * a row's at r ctxs, its values' scales at row DEC_ROWS (the split's: attention_q8_avx2_decode.c) */
    int32_t *Qt;  /* (D / 2, NB_MAX, RB) query pairs */
    float *O;     /* (nrb, D, RB) outputs, over Qt once the scores are done */
    int32_t *kv2; /* the staged tile: key rows or value pairs as int16 */
    int maxn[NB_MAX], any_rc[NB_MAX];
    __m256i out_of_range; /* sign bits: a fused level below 0 or not a number */
    __m256i nvec[NB_MAX], lovec[NB_MAX];
    int all_lo[NB_MAX], all_hi[NB_MAX]; /* keys every lane of the block sees (none where one pads) */
    __m256 rcm[NB_MAX], qs[NB_MAX], mx[NB_MAX], pd[NB_MAX], inv[NB_MAX];
    float vdmax[NB_MAX * RB]; /* per row (0 past the unit's rows): kvs_attn_q8_vd_max */
} q8_unit2;

/* Two levels as an int16 pair in an int32 word (q[0] low). */
AI int32_t level_pair(const int8_t *q) { return (int32_t)((uint32_t)(uint16_t)q[0] | (uint32_t)(uint16_t)q[1] << 16); }

/* 16 levels widened to int16 (dims d .. d + 15 of a row). */
AI __m256i widen16(const int8_t *p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)); }

#define DEC_ROWS 4 /* decode units: at most this many rows (and none recalibrated) */

/* Unit (tokens [t0, t1), kv head g): its rows' scores from S (score rows
 * of ctxs floats), the prefill's query pairs, outputs and staged tiles
 * in work past its KVS_ATTN_ROWS score rows. */
static inline void q8_unit2_init(q8_unit2 *x, const kvs_attn_call *c, int t0, int t1, int g, float *S, float *work) {
    const int group = c->n_head / c->n_kv_head, rows = (t1 - t0) * group;
    memset(x, 0, sizeof *x);
    x->c = c, x->t0 = t0, x->g = g, x->group = group, x->D = c->head_dim, x->rows = rows;
    x->nrb = (rows + RB - 1) / RB;
    x->ctxs = kvs_attn_score_stride(c->n_ctx);
    x->rb = kvs_kv_row_bytes(KVS_KV_Q8, x->D);
    x->K = (const int8_t *)c->k + (size_t)g * c->n_ctx * x->rb;
    x->V = (const int8_t *)c->v + (size_t)g * c->n_ctx * x->rb;
    x->S = S;
    x->Qt = (int32_t *)(work + (size_t)KVS_ATTN_ROWS * x->ctxs);
    x->O = (float *)x->Qt;
    x->kv2 = (int32_t *)((float *)x->Qt + (size_t)3 * 16 * 256);
}

/* A unit of at most DEC_ROWS rows, none recalibrated
 * (attention_q8_avx2_decode.c). */
void kvs_attention_decode_unit_q8_avx2(q8_unit2 *x);

#endif
