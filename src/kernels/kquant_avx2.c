/*
 * AVX2 Q5_0 / Q5_1 / K-quant kernels (kquant_avx2_octet.h): decode, one
 * activation row in natural order, each weight octet from memory to
 * registers and used at once; the quantizer of activation rows; the ISA
 * row that routes several rows to the batch path (kquant_avx2_batch.c).
 * Decode's block dot: vpmaddubsw(qu, hi) and (qu, lo) widened by vpmaddwd
 * with 256 and 1 (lanes 0-3 half 0, 4-7 half 1); three rounds of vphaddd
 * over the octet's 8 block vectors leave each block's half sums in one
 * lane. One weight row at a time (two rows' unpacked octets and
 * accumulators did not fit the 16 registers), four rows' trees and tails
 * together.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "kernels/kquant_avx2_octet.h"

#define PF_ROWS 4 /* weight rows prefetched ahead in decode */

/* 256 dot(qu, hi) + dot(qu, lo) of one block: half 0 in lanes 0-3, half 1 in 4-7. */
AI __m256i block_dot(__m256i w, const int8_t *x) {
    const __m256i ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256i h = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)x));
    __m256i l = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(x + 32)));
    return _mm256_add_epi32(_mm256_madd_epi16(h, c256), _mm256_madd_epi16(l, ones));
}

/* Half sums of the octet's cnt blocks: H0 lane l = half 0 of block b0 + l,
 * H1 half 1 (lanes >= cnt: 0). */
AI void octet_sums(const octet *w, int cnt, const int8_t *xq, __m256i *H0, __m256i *H1) {
    /* each pair of block sums added as soon as it is made (fewer live
     * registers than all eight first), then hsum8_pairs */
    __m256i p[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m256i v0 = 2 * i < cnt ? block_dot(w->qu[2 * i], xq + (size_t)(2 * i) * 64) : _mm256_setzero_si256();
        __m256i v1 = 2 * i + 1 < cnt ? block_dot(w->qu[2 * i + 1], xq + (size_t)(2 * i + 1) * 64) : _mm256_setzero_si256();
        p[i] = _mm256_hadd_epi32(v0, v1);
    }
    hsum8_pairs(p, H0, H1);
}

/* Octet o (cnt blocks) of weight row `row` (GGUF or packed layout), unpacked
 * on the way into registers (decode uses each octet once: no buffer), and
 * activation row xr (trailer tr): the operands of its float steps. */
AI octet_ops octet_step(const uint8_t *row, int packed, int o, int cnt, const uint8_t *xr, const kvs_kq_trailer *tr,
                        kq_shape sh) {
    const int b0 = 8 * o;
    const xoct x = {(const int8_t *)xr + (size_t)b0 * 64, tr->dx + b0, tr->sx + b0, tr->s0 + b0, tr->s1 + b0};
    octet w;
    __m256i H0, H1;
    unpack_octet(sh.type, row, b0, cnt, packed, &w);
    octet_sums(&w, cnt, x.q, &H0, &H1);
    return octet_prep(&w, H0, H1, x, sh);
}

/* One weight row . one quantized activation row xr (natural order): s,
 * its tree's first step (chains 0-7 + 8-15; tree16x4_sums takes it on),
 * and the operands of its tail octets (kquant.h: after the tree, in order;
 * at most 2) in late. The whole groups' octets alternate between the low
 * (chains 0-7) and high (8-15) accumulators, by twos so the accumulators
 * stay in registers. The tail octets are computed first: computed last,
 * their latency was the call's (k = 640: 2 octets in the loop and a
 * partial one cost as much as 3 + 1). */
AI __m256 dot_row(const uint8_t *row, int packed, const uint8_t *xr, int nb, kq_shape sh, octet_ops late[2]) {
    const kvs_kq_trailer tr = kvs_kq_trailer_of(xr, 32 * nb);
    const int nfo = 2 * (nb / 16), no = (nb + 7) / 8; /* octets of whole groups; all */
    for (int o = nfo; o < no; o++)
        late[o - nfo] = octet_step(row, packed, o, nb - 8 * o < 8 ? nb - 8 * o : 8, xr, &tr, sh);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int o = 0; o < nfo; o += 2) {
        octet_ops op = octet_step(row, packed, o, 8, xr, &tr, sh);
        a0 = octet_apply(a0, &op, sh);
        op = octet_step(row, packed, o + 1, 8, xr, &tr, sh);
        a1 = octet_apply(a1, &op, sh);
    }
    return _mm256_add_ps(a0, a1);
}

/* Decode (one activation row): columns [j0, j1), four weight rows at a
 * time (rows past j1 repeat the last: computed, not stored), each octet
 * unpacked into registers on the way; one tree for the four rows
 * (tree16x4_sums), then their tails' steps together (tail_steps4). */
AI void decode_cols(const kvs_wmat *w, const uint8_t *xq, float *y, int j0, int j1, kq_shape sh) {
    const int nb = w->k / 32, nfo = 2 * (nb / 16), no = (nb + 7) / 8, packed = w->packed != NULL;
    const uint8_t *base = (const uint8_t *)(packed ? w->packed : w->data);
    for (int j = j0; j < j1; j += 4) {
        __m256 s[4];
        octet_ops late[4][2], op[4];
        for (int q = 0; q < 4; q++) {
            const uint8_t *ra = base + (size_t)(j + q < j1 ? j + q : j1 - 1) * w->row_bytes;
            kq_prefetch_ahead(ra, w->row_bytes, j + q, j0, w->n, PF_ROWS);
            s[q] = dot_row(ra, packed, xq, nb, sh, late[q]);
        }
        __m128 y4 = tree16x4_sums(s[0], s[1], s[2], s[3]);
        for (int o = nfo; o < no; o++) {
            for (int q = 0; q < 4; q++) op[q] = late[q][o - nfo];
            y4 = tail_steps4(y4, op, nb - 8 * o < 8 ? nb - 8 * o : 8, sh);
        }
        float v[4];
        _mm_storeu_ps(v, y4);
        memcpy(y + j, v, (size_t)(j1 - j < 4 ? j1 - j : 4) * sizeof(float));
    }
}

KQ_SHAPES(KQ_DECODE_FN)
#define KQ_BATCH_NAME(name) kvs_kq_avx2_batch_##name
KQ_ISA_DOT_COLS(avx2_dot_cols)

/* The lane layout of 8 blocks a group where the batch path takes the call
 * (kq_lanes), else natural order (kq_quantize_lanes). */
static void avx2_quantize_row(const float *x, int k, uint8_t *xrow, int m) {
    kq_quantize_lanes(x, k, xrow, kq_lanes(k, m) ? 8 : 0);
}

const kvs_kq_isa kvs_kq_isa_avx2 = {.name = "avx2", .dot_cols = avx2_dot_cols, .quantize_row = avx2_quantize_row};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
