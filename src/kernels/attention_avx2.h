/*
 * What the AVX2 attention kernels on float rows (attention_avx2.c) and on Q8
 * rows (attention_q8_avx2.c, attention_q8_avx2_decode.c) share: lane = query row in blocks of RB rows,
 * a row block's scores or weights at RB floats a key, and the
 * recalibration of a block's rows. Include inside an AVX2 target region.
 */
#ifndef KVS_KERNELS_ATTENTION_AVX2_H
#define KVS_KERNELS_ATTENTION_AVX2_H

#include "kernels/avx2_util.h"

#define RB 8 /* rows per block */

/* kvs_tree16 of 16 vectors of partials, lane by lane (P is overwritten). */
AI __m256 tree16_8(__m256 P[16]) {
    for (int i = 0; i < 8; i++) P[i] = _mm256_add_ps(P[i], P[i + 8]);
    for (int i = 0; i < 4; i++) P[i] = _mm256_add_ps(P[i], P[i + 4]);
    for (int i = 0; i < 2; i++) P[i] = _mm256_add_ps(P[i], P[i + 2]);
    return _mm256_add_ps(P[0], P[1]);
}

/* A block's recalibrated rows (mask rc): their documents' weights [d0, d1)
 * summed (Pd) and the other keys' of [j0, j1) (R: the block's keys, +0
 * where a row has none), the factor, the weights scaled; returns the new
 * sum fma(f, Pd, R), or the sum as it was where f = 1 (attention_ref.c),
 * and, where factor is not NULL, the factors in it (1 in the other lanes). */
static inline __m256 recal_block(const kvs_attn_call *c, float *Sb, int j0, int d0, int d1, int j1, __m256 rc, __m256 mx,
                                 __m256 sum, __m256 *factor) {
    __m256 P[16], R[16];
    for (int i = 0; i < 16; i++) P[i] = R[i] = _mm256_setzero_ps();
    for (int j = j0; j < j1; j++) {
        const __m256 e = _mm256_loadu_ps(Sb + (size_t)j * RB);
        if (j >= d0 && j < d1) P[j % 16] = _mm256_add_ps(P[j % 16], e);
        else R[j % 16] = _mm256_add_ps(R[j % 16], e);
    }
    float pd[RB], mxs[RB], rcs[RB], f[RB];
    const __m256 rest = tree16_8(R);
    _mm256_storeu_ps(pd, tree16_8(P));
    _mm256_storeu_ps(mxs, mx);
    _mm256_storeu_ps(rcs, rc);
    for (int l = 0; l < RB; l++) f[l] = rcs[l] != 0.0f ? kvs_attn_recal_factor(mxs[l], pd[l], c->recal.s) : 1.0f;
    const __m256 fv = _mm256_loadu_ps(f);
    if (factor) *factor = fv;
    for (int j = d0; j < d1; j++)
        _mm256_storeu_ps(Sb + (size_t)j * RB, _mm256_mul_ps(_mm256_loadu_ps(Sb + (size_t)j * RB), fv));
    const __m256 changed = _mm256_and_ps(rc, _mm256_cmp_ps(fv, _mm256_set1_ps(1.0f), _CMP_NEQ_UQ)); /* f = 1: sum as it was */
    return _mm256_blendv_ps(sum, _mm256_fmadd_ps(fv, _mm256_loadu_ps(pd), rest), changed);
}

#endif
