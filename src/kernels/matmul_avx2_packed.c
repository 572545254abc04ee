/*
 * AVX2 matmul on packed weights (kvs_wmat.packed, pack.c): Q4_0, Q4_1 and
 * Q8_0 for any number of activation rows, bit-identical to the scalar
 * reference (kernels_impl.h) like every path.
 *
 * Lane l of a packed vector is block l of a 16-block group, the lane order of
 * the quantized activations' full groups (quant.h), so the weights need no
 * gather and no shuffle: one 32-byte load gives 8 blocks' dwords r. Per
 * weight row, activation rows are taken in passes of ROWS: the unpacked
 * weight vectors of a half group stay in registers while every row of the
 * pass meets them, so a decode step of m = 1..16 streams for rows (streams
 * of the server's batch) reads each weight byte from memory once.
 *
 * Exact block dots:
 *  - Q4: u4 weight x s8 activation pairs are <= 2 * 15 * 127 = 3810, so the
 *    8 vpmaddubsw of a plane add up in int16 (<= 30480); one vpmaddwd by 256
 *    (hi plane) or by 1 (lo plane) widens them: 256 * dot(w, hi) + dot(w, lo);
 *  - Q8_0, and every tail block: weights widened to int16 against the
 *    activations' Q = 256 hi + lo as int16 (kvs_avx2_xn_row, once per row
 *    and call), one vpmaddwd per 16 weights.
 * Then the canonical float steps: chain c = b % 16 is lane c, the tree, and
 * the tail blocks (nb % 16) in order with the activations in natural order.
 * Weight rows go by whole tiles of 8 (pack.c): the 8 rows' trees side by
 * side in one vector (tree16x8), whose lane o then takes row o's tail
 * blocks from the tile's transposed tails (tail_prep8, tail_rows8).
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <math.h>

#include "kernels/avx2_util.h"
#include "kernels/prefetch_rows.h"

#define ROWS 16   /* activation rows per pass over a weight row */

/* A tail block of one activation row: Q = 256 hi + lo as int16 in natural
 * element order (|Q| <= 127 * 257: quant.h), the operand of every tail dot;
 * d, s, c of its trailer. Written once per row by the quantizer into the
 * row's xn (kvs_avx2_xn_row), after the int16 groups. */
typedef struct xtail {
    int16_t q[32];
    float d, s;
    int32_t c, pad;
} xtail;
_Static_assert(sizeof(xtail) == 80, "xtail: kvs_xn_bytes allows 80 bytes per tail block");

AI const xtail *row_tails(const kvs_mm_call *c, int i) {
    return (const xtail *)(c->xn + (size_t)i * c->xn_row + (size_t)kvs_xq_groups(c->w->k) * 1024);
}

/* Full groups of four Q4 weight rows (pw[r]; a tile of fewer repeats its
 * last row) against mr activation rows: the four rows' weights unpacked
 * once per half group (L1) and, per weight vector, one activation row's hi
 * and lo vectors (in registers) meet all four: 8 vpmaddubsw per 6 loads,
 * where one weight row at a time needs a load per vpmaddubsw (and the loads
 * bound the loop). acc[r][i] gets the 16 chains of activation row i for
 * weight row r. Per block: 256 * dot(w, hi) + dot(w, lo) (+ c for Q4_0),
 * then the canonical float steps. */
static void q4_groups4(const uint8_t *const pw[4], int ng, int q41, const uint8_t *xq, size_t xq_row, int mr,
                       float (*acc)[ROWS][16]) {
    const int gb = q41 ? 320 : 288;
    const __m256i lo4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256i Wu_[8][4] __attribute__((aligned(32)));
    /* through a pointer the compiler cannot follow: given the array itself,
     * GCC copied all 32 vectors to other stack slots before every row pass */
    __m256i(*Wu)[4] = Wu_;
    __asm__("" : "+r"(Wu));
    __m256i S[ROWS][4][2] __attribute__((aligned(32))); /* int16 sums of a half group: [row][weight row][hi, lo] */
    const __m256 zero = _mm256_setzero_ps(); /* group 0's steps start from it (acc is not cleared) */
    for (int g = 0; g < ng; g++) {
        for (int h = 0; h < 2; h++) {
            __m256 dw[4], mw[4];
            for (int r = 0; r < 4; r++) {
                const uint8_t *pg = pw[r] + (size_t)g * gb;
                for (int v = 0; v < 4; v++) {
                    __m256i q = _mm256_loadu_si256((const __m256i *)(pg + 64 * v + 32 * h));
                    Wu[2 * v][r] = _mm256_and_si256(q, lo4);
                    Wu[2 * v + 1][r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
                }
                dw[r] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 256 + 16 * h)));
                mw[r] = q41 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 288 + 16 * h))) : _mm256_setzero_ps();
            }
            for (int i = 0; i < mr; i++) {
                const uint8_t *grp = xq + (size_t)i * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
                const uint8_t *xh = grp + 32 * h, *xl = xh + KVS_XQ_PLANE;
                /* named variables, not arrays: arrays indexed by the loop's
                 * row were kept in memory (8 stores per weight vector step,
                 * then copied into S) */
                __m256i ph0, pl0, ph1, pl1, ph2, pl2, ph3, pl3;
#define Q4_MAC(r, ph, pl)                                                                                          \
    do {                                                                                                           \
        const __m256i w_ = _mm256_load_si256(&Wu[v][r]);                                                          \
        const __m256i mh_ = _mm256_maddubs_epi16(w_, a), ml_ = _mm256_maddubs_epi16(w_, b);                       \
        ph = v ? _mm256_add_epi16(ph, mh_) : mh_;                                                                  \
        pl = v ? _mm256_add_epi16(pl, ml_) : ml_;                                                                  \
    } while (0)
                ph0 = pl0 = ph1 = pl1 = ph2 = pl2 = ph3 = pl3 = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++) {
                    __m256i a = _mm256_loadu_si256((const __m256i *)(xh + 64 * v));
                    __m256i b = _mm256_loadu_si256((const __m256i *)(xl + 64 * v));
                    __asm__("" : "+x"(a), "+x"(b)); /* in registers: loaded once, not once per weight row */
                    Q4_MAC(0, ph0, pl0);
                    Q4_MAC(1, ph1, pl1);
                    Q4_MAC(2, ph2, pl2);
                    Q4_MAC(3, ph3, pl3);
                    /* the tile's order as written: otherwise the compiler
                     * hoists the products and spills them */
                    __asm__("" : "+x"(ph0), "+x"(pl0), "+x"(ph1), "+x"(pl1), "+x"(ph2), "+x"(pl2), "+x"(ph3), "+x"(pl3));
                }
#undef Q4_MAC
                _mm256_store_si256(&S[i][0][0], ph0);
                _mm256_store_si256(&S[i][0][1], pl0);
                _mm256_store_si256(&S[i][1][0], ph1);
                _mm256_store_si256(&S[i][1][1], pl1);
                _mm256_store_si256(&S[i][2][0], ph2);
                _mm256_store_si256(&S[i][2][1], pl2);
                _mm256_store_si256(&S[i][3][0], ph3);
                _mm256_store_si256(&S[i][3][1], pl3);
            }
            /* The float steps of every row of the pass, apart from the
             * integer loop: a short loop whose iterations overlap, where
             * after each row's long integer loop they held it up (the
             * out-of-order window holds about one row): 9.9 -> 9.4 cycles
             * per weight vector step (1 thread, the kernel alone, best of
             * 60 runs). */
            for (int i = 0; i < mr; i++) {
                const uint8_t *grp = xq + (size_t)i * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
                const float *trailer = (const float *)(grp + KVS_XQ_GROUP_QS);
                __m256 dx = _mm256_loadu_ps(trailer + 8 * h);
                __m256i c0 = q41 ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(trailer + 32 + 8 * h));
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(_mm256_load_si256(&S[i][r][0]), c256),
                                                    _mm256_madd_epi16(_mm256_load_si256(&S[i][r][1]), ones));
                    if (!q41) isum = _mm256_add_epi32(isum, c0);
                    float *ac = acc[r][i] + 8 * h;
                    __m256 C = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw[r], dx), g ? _mm256_load_ps(ac) : zero);
                    if (q41) C = _mm256_fmadd_ps(mw[r], _mm256_loadu_ps(trailer + 16 + 8 * h), C);
                    _mm256_store_ps(ac, C);
                }
            }
        }
    }
}

/* Full groups of four Q8_0 weight rows (pw[r], as q4_groups4) on the int16
 * activation rows (kvs_avx2_xn_row): the rows' weights widened to int16
 * once (L1), one vpmaddwd per 16 weights gives the exact 256 dot(w, hi) +
 * dot(w, lo) (no sign juggling, half the multiplies of the 8-bit planes);
 * per weight vector, one activation row's two int16 vectors (in registers)
 * meet the four rows: 1.25 loads per vpmaddwd. Lanes as in q8_m1_pair16. */
static void q8_groups16x4(const uint8_t *const pw[4], int ng, const uint8_t *xq, size_t xq_row, const uint8_t *xn,
                          size_t xn_row, int mr, float (*acc)[ROWS][16]) {
    __m256i W[8][4][2] __attribute__((aligned(32)));
    const __m256 zero = _mm256_setzero_ps(); /* as in q4_groups4 */
    for (int g = 0; g < ng; g++) {
        for (int h = 0; h < 2; h++) {
            __m256 dw[4];
            for (int o = 0; o < 4; o++) {
                const uint8_t *pg = pw[o] + (size_t)g * 544;
                for (int r = 0; r < 8; r++) {
                    W[r][o][0] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(pg + 64 * r + 32 * h)));
                    W[r][o][1] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(pg + 64 * r + 32 * h + 16)));
                }
                dw[o] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 512 + 16 * h)));
            }
            for (int i = 0; i < mr; i++) {
                const int16_t *x16 = (const int16_t *)(xn + (size_t)i * xn_row) + (size_t)g * 512 + 32 * h;
                __m256i sa0, sb0, sa1, sb1, sa2, sb2, sa3, sb3; /* named: as q4_groups4's sums */
#define Q8_MAC(o, sa, sb)                                                                                          \
    do {                                                                                                           \
        const __m256i pa_ = _mm256_madd_epi16(_mm256_load_si256(&W[r][o][0]), xa);                                \
        const __m256i pb_ = _mm256_madd_epi16(_mm256_load_si256(&W[r][o][1]), xb);                                \
        sa = r ? _mm256_add_epi32(sa, pa_) : pa_;                                                                  \
        sb = r ? _mm256_add_epi32(sb, pb_) : pb_;                                                                  \
    } while (0)
                sa0 = sb0 = sa1 = sb1 = sa2 = sb2 = sa3 = sb3 = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    __m256i xa = _mm256_loadu_si256((const __m256i *)(x16 + 64 * r));
                    __m256i xb = _mm256_loadu_si256((const __m256i *)(x16 + 64 * r + 16));
                    __asm__("" : "+x"(xa), "+x"(xb)); /* in registers: loaded once, not once per weight row */
                    Q8_MAC(0, sa0, sb0);
                    Q8_MAC(1, sa1, sb1);
                    Q8_MAC(2, sa2, sb2);
                    Q8_MAC(3, sa3, sb3);
                    __asm__("" : "+x"(sa0), "+x"(sb0), "+x"(sa1), "+x"(sb1), "+x"(sa2), "+x"(sb2), "+x"(sa3), "+x"(sb3));
                }
#undef Q8_MAC
                const float *trailer = (const float *)(xq + (size_t)i * xq_row + (size_t)g * KVS_XQ_GROUP_BYTES + KVS_XQ_GROUP_QS);
                const __m256 dx = _mm256_loadu_ps(trailer + 8 * h);
#define Q8_STEP(o, sa, sb)                                                                                         \
    do {                                                                                                           \
        const __m256i isum_ = _mm256_permute4x64_epi64(_mm256_hadd_epi32(sa, sb), 0xD8);                          \
        float *ac_ = acc[o][i] + 8 * h;                                                                            \
        _mm256_store_ps(ac_, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum_), _mm256_mul_ps(dw[o], dx), g ? _mm256_load_ps(ac_) : zero)); \
    } while (0)
                Q8_STEP(0, sa0, sb0);
                Q8_STEP(1, sa1, sb1);
                Q8_STEP(2, sa2, sb2);
                Q8_STEP(3, sa3, sb3);
#undef Q8_STEP
            }
        }
    }
}

/* The exact integer dot of one tail block (GGUF layout) with one activation
 * row's tail block: 8 int32 partial sums, one vpmaddwd per 16 weights. */
AI __m256i tail_isum(int type, const uint8_t *blk, const xtail *x) {
    __m256i w0, w1; /* elements 0..15, 16..31 as int16 */
    if (type == KVS_TYPE_Q8_0) {
        w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2)));
        w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 18)));
    } else {
        const __m128i lo4 = _mm_set1_epi8(0x0f);
        __m128i q = _mm_loadu_si128((const __m128i *)(blk + (type == KVS_TYPE_Q4_1 ? 4 : 2)));
        w0 = _mm256_cvtepu8_epi16(_mm_and_si128(q, lo4));
        w1 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(q, 4), lo4));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)x->q)),
                            _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(x->q + 16))));
}

AI float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The tail blocks of one weight row for one activation row, after the tree:
 * y = fma chain in block order (kernels_impl.h). */
static float tail_blocks(int type, const uint8_t *blk, int nt, const xtail *xt, float y) {
    const int bs = kvs_q_block_bytes(type);
    for (int t = 0; t < nt; t++, blk += bs) {
        int32_t isum = hsum_i32(tail_isum(type, blk, &xt[t]));
        if (type == KVS_TYPE_Q4_0) isum += xt[t].c;
        y = fmaf((float)isum, f16_at(blk) * xt[t].d, y);
        if (type == KVS_TYPE_Q4_1) y = fmaf(f16_at(blk + 2), xt[t].s, y);
    }
    return y;
}

/* Vector u (0..15) of a tile's tail block p (pack.c's transposed tails):
 * lane o = the int16 elements 2u, 2u + 1 of row o's block. */
AI __m256i tail_wvec(int type, const uint8_t *p, int u) {
    if (type == KVS_TYPE_Q8_0) /* pair u: elements 2u, 2u + 1 of the 8 rows, sign-extended at once */
        return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 16 * u)));
    /* dword v: low nibbles elements 4v .. 4v + 3, high 16 + 4v ..; bytes 0, 1
     * (even u) or 2, 3 (odd u) of each dword, zero-extended into its two words */
    const __m256i z01 = _mm256_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1,
                                         0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1);
    const __m256i z = u % 2 ? _mm256_add_epi8(z01, _mm256_set1_epi16(2)) : z01, lo4 = _mm256_set1_epi8(0x0f);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 32 * ((u % 8) / 2)));
    return _mm256_shuffle_epi8(_mm256_and_si256(u >= 8 ? _mm256_srli_epi16(q, 4) : q, lo4), z);
}

/* Block p's scales: wd lane o = row o's d, wm its m (Q4_1; else 0). */
AI void tail_scales(int type, const uint8_t *p, __m256 *wd, __m256 *wm) {
    const int qbytes = type == KVS_TYPE_Q8_0 ? 256 : 128;
    *wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + qbytes)));
    *wm = type == KVS_TYPE_Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + qbytes + 16)))
                                : _mm256_setzero_ps();
}

/* The tail blocks of a whole tile of 8 weight rows (tt: the tile's
 * transposed tails, pack.c), unpacked for calls of several activation rows:
 * wt[16 t + u] = tail_wvec of block t, wd[t] / wm[t] lane o = its d / m.
 * Then one activation row's tail is 16 vpmaddwd per block with a broadcast
 * pair of its int16 Q, and lane o is row o's exact integer dot at once (no
 * horizontal sums). */
static void tail_prep8(int type, const uint8_t *tt, int nt, __m256i *wt, __m256 *wd, __m256 *wm) {
    const int bs = kvs_q_block_bytes(type);
    for (int t = 0; t < nt; t++) {
        const uint8_t *p = tt + (size_t)t * KVS_PACK_TILE * bs;
        __m256i v[16]; /* all made before any store: the loads they share are loaded once */
        for (int u = 0; u < 16; u++) v[u] = tail_wvec(type, p, u);
        for (int u = 0; u < 16; u++) wt[16 * t + u] = v[u];
        tail_scales(type, p, &wd[t], &wm[t]);
    }
}

/* The float steps of tail block t for one activation row (x: its tail
 * block, s0 + s1: its exact integer dot with each of the tile's 8 rows, lane
 * o = row o), onto y: the canonical order of kernels_impl.h. */
AI __m256 tail_step(int type, const __m256 *wd, const __m256 *wm, int t, const xtail *x, __m256i s0, __m256i s1,
                    __m256 y) {
    __m256i isum = _mm256_add_epi32(s0, s1);
    if (type == KVS_TYPE_Q4_0) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(x->c));
    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(wd[t], _mm256_set1_ps(x->d)), y);
    if (type == KVS_TYPE_Q4_1) y = _mm256_fmadd_ps(wm[t], _mm256_set1_ps(x->s), y);
    return y;
}

/* One tail block's exact integer dots with a tile's 8 rows (lane o: row
 * o; s0 + s1), from one activation row's int16 pairs qd: the weight vectors
 * from wt (tail_prep8's) or, with made (a constant at each call), made on
 * the way from block p (tail_wvec). */
AI void tail_isums8(int type, int made, const __m256i *wt, const uint8_t *p, const int32_t *qd, __m256i *s0,
                    __m256i *s1) {
#define TAIL_W(u) (made ? tail_wvec(type, p, u) : wt[u])
    __m256i a = _mm256_madd_epi16(TAIL_W(0), _mm256_set1_epi32(qd[0]));
    __m256i b = _mm256_madd_epi16(TAIL_W(1), _mm256_set1_epi32(qd[1]));
#pragma GCC unroll 7
    for (int v = 2; v < 16; v += 2) {
        a = _mm256_add_epi32(a, _mm256_madd_epi16(TAIL_W(v), _mm256_set1_epi32(qd[v])));
        b = _mm256_add_epi32(b, _mm256_madd_epi16(TAIL_W(v + 1), _mm256_set1_epi32(qd[v + 1])));
    }
#undef TAIL_W
    *s0 = a;
    *s1 = b;
}

/* The tail of one activation row (its blocks xt) against the 8 rows of
 * tail_prep8: lane o takes the steps of tail_blocks for row o, from y. */
AI __m256 tail_rows8(int type, const __m256i *wt, const __m256 *wd, const __m256 *wm, int nt, const xtail *xt,
                     __m256 y) {
    for (int t = 0; t < nt; t++) {
        __m256i s0, s1; /* dword v of the activations: elements 2v, 2v + 1 */
        tail_isums8(type, 0, wt + 16 * t, NULL, (const int32_t *)xt[t].q, &s0, &s1);
        y = tail_step(type, wd, wm, t, &xt[t], s0, s1, y);
    }
    return y;
}

/* tail_rows8 for one activation row (decode) straight from the tile's
 * tails (tt): each weight vector made and used at once (tail_wvec), where
 * tail_prep8 stored the tile's 16 nt vectors and tail_rows8 read them back
 * (a tile's tails are used once in decode; 8% of gemma3's decode went to
 * that for its 262144 x 640 head, 4 tail blocks of 20). Same integer sums
 * (exact) and float steps. */
AI __m256 tail_rows8_direct(int type, const uint8_t *tt, int nt, const xtail *xt, __m256 y) {
    const int bs = kvs_q_block_bytes(type);
    for (int t = 0; t < nt; t++) {
        const uint8_t *p = tt + (size_t)t * KVS_PACK_TILE * bs;
        __m256i s0, s1;
        __m256 wd, wm;
        tail_isums8(type, 1, NULL, p, (const int32_t *)xt[t].q, &s0, &s1);
        tail_scales(type, p, &wd, &wm);
        y = tail_step(type, &wd, &wm, 0, &xt[t], s0, s1, y);
    }
    return y;
}

/* One activation row (decode) against two Q4 weight rows at once: two
 * independent chains for the out-of-order core, x loaded once for both, the
 * 16 chains of each row in registers (lanes). Same operations per output as
 * q4_groups4. */
AI void q4_m1_pair(const uint8_t *pa, const uint8_t *pb, int ng, int q41, const uint8_t *xq, __m256 C[2][2]) {
    const int gb = q41 ? 320 : 288;
    const __m256i lo4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    C[0][0] = C[0][1] = C[1][0] = C[1][1] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const uint8_t *grp = xq + (size_t)g * KVS_XQ_GROUP_BYTES;
        const float *trailer = (const float *)(grp + KVS_XQ_GROUP_QS);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *xh = grp + 32 * h, *xl = xh + KVS_XQ_PLANE;
            __m256i ph[2], pl[2];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m256i x0 = _mm256_loadu_si256((const __m256i *)(xh + 128 * r));
                __m256i x1 = _mm256_loadu_si256((const __m256i *)(xh + 128 * r + 64));
                __m256i l0 = _mm256_loadu_si256((const __m256i *)(xl + 128 * r));
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(xl + 128 * r + 64));
#pragma GCC unroll 2
                for (int o = 0; o < 2; o++) {
                    const uint8_t *pg = (o ? pb : pa) + (size_t)g * gb;
                    __m256i q = _mm256_loadu_si256((const __m256i *)(pg + 64 * r + 32 * h));
                    __m256i wa = _mm256_and_si256(q, lo4), wb = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
                    __m256i sh = _mm256_add_epi16(_mm256_maddubs_epi16(wa, x0), _mm256_maddubs_epi16(wb, x1));
                    __m256i sl = _mm256_add_epi16(_mm256_maddubs_epi16(wa, l0), _mm256_maddubs_epi16(wb, l1));
                    ph[o] = r ? _mm256_add_epi16(ph[o], sh) : sh;
                    pl[o] = r ? _mm256_add_epi16(pl[o], sl) : sl;
                }
                /* the order as written: otherwise the compiler hoists the
                 * products of all four steps and spills them */
                __asm__("" : "+x"(ph[0]), "+x"(pl[0]), "+x"(ph[1]), "+x"(pl[1]));
            }
            __m256 dx = _mm256_loadu_ps(trailer + 8 * h);
#pragma GCC unroll 2
            for (int o = 0; o < 2; o++) {
                const uint8_t *pg = (o ? pb : pa) + (size_t)g * gb;
                __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(ph[o], c256), _mm256_madd_epi16(pl[o], ones));
                if (!q41) isum = _mm256_add_epi32(isum, _mm256_loadu_si256((const __m256i *)(trailer + 32 + 8 * h)));
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 256 + 16 * h)));
                C[o][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), C[o][h]);
                if (q41) {
                    __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 288 + 16 * h)));
                    C[o][h] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(trailer + 16 + 8 * h), C[o][h]);
                }
            }
        }
    }
}

/* Row i of kvs_mm_call.xn (kvs_xn_bytes(k) bytes), written after the row
 * is quantized:
 *  - Q8_0 weights: the full groups' Q = 256 hi + lo as int16 in the packed
 *    weights' order: group g, weight vector r, half h: 32 int16 = the 4
 *    elements (4r..4r+3) of blocks 8h .. 8h+7 (1024 bytes per group);
 *  - every type: then the tail blocks as xtail, out of their quads
 *    (quant.h: the dword of row sub in vec v holds elements
 *    4 (v / 2) + 16 (v % 2) .. +3), once per row instead of once per
 *    column chunk. */
/* 16 elements' Q = 256 hi + lo as int16, from their signed hi and lo bytes. */
AI __m256i q16_of(__m128i hi, __m128i lo) {
    return _mm256_add_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(hi), 8), _mm256_cvtepi8_epi16(lo));
}

void kvs_avx2_xn_row(const kvs_mm_call *c, int i) {
    const __m256i c80 = _mm256_set1_epi8((char)0x80);
    const int ng = kvs_xq_groups(c->w->k), nt = kvs_xq_tail_blocks(c->w->k);
    const int q8 = c->w->type == KVS_TYPE_Q8_0;
    int16_t *x16 = (int16_t *)(c->xn + (size_t)i * c->xn_row);
    for (int g = 0; g < ng && q8; g++) {
        const uint8_t *grp = c->xq + (size_t)i * c->xq_row + (size_t)g * KVS_XQ_GROUP_BYTES;
        for (int r = 0; r < 8; r++)
            for (int h = 0; h < 2; h++) {
                const uint8_t *xh = grp + 64 * xq_of_q8[r] + 32 * h;
                __m256i hi = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)xh), c80);
                __m256i lo = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(xh + KVS_XQ_PLANE)), c80);
                int16_t *dst = x16 + ((size_t)(g * 8 + r) * 2 + h) * 32;
                for (int q = 0; q < 2; q++) {
                    __m128i hq = q ? _mm256_extracti128_si256(hi, 1) : _mm256_castsi256_si128(hi);
                    __m128i lq = q ? _mm256_extracti128_si256(lo, 1) : _mm256_castsi256_si128(lo);
                    _mm256_storeu_si256((__m256i *)(dst + 16 * q), q16_of(hq, lq));
                }
            }
    }
    const __m128i off = _mm_set1_epi8(q8 ? (char)0x80 : 0);
    const uint8_t *quad = c->xq_tail + (size_t)(i / 4) * c->xq_quad;
    const int sub = i % 4;
    xtail *xt = (xtail *)(c->xn + (size_t)i * c->xn_row + (size_t)ng * 1024);
    for (int t = 0; t < nt; t++) {
        __m128i pl[2][2]; /* [plane hi / lo][elements 0..15 / 16..31] as s8 */
        for (int p = 0; p < 2; p++) {
            const uint8_t *src = quad + (size_t)t * KVS_XQ_TAIL_BYTES + p * KVS_XQ_TAIL_PLANE + 4 * sub;
            int32_t d[8];
            for (int v = 0; v < 8; v++) memcpy(&d[v], src + 16 * v, 4);
            /* vecs 0,2,4,6: elements 0..15; vecs 1,3,5,7: 16..31 */
            pl[p][0] = _mm_xor_si128(_mm_setr_epi32(d[0], d[2], d[4], d[6]), off);
            pl[p][1] = _mm_xor_si128(_mm_setr_epi32(d[1], d[3], d[5], d[7]), off);
        }
        for (int h = 0; h < 2; h++)
            _mm256_storeu_si256((__m256i *)(xt[t].q + 16 * h), q16_of(pl[0][h], pl[1][h]));
        xt[t].d = kvs_xq_tail_d((uint8_t *)quad, t)[sub];
        xt[t].s = kvs_xq_tail_s((uint8_t *)quad, t)[sub];
        xt[t].c = kvs_xq_tail_c((uint8_t *)quad, t)[sub];
        xt[t].pad = 0;
    }
}

/* One activation row (decode) against two Q8_0 weight rows, on the row's
 * int16 Q (kvs_avx2_xn_row): one vpmaddwd per 16 weights gives the exact
 * 256 dot(w, hi) + dot(w, lo) directly, half the multiplies of the two
 * 8-bit planes and no sign juggling. Lanes: a
 * vpmaddwd of blocks 8h..8h+3 leaves two partial sums per block; one
 * vphaddd and a 64-bit permute put block l in lane l. Same bits. */
static void q8_m1_pair16(const uint8_t *pa, const uint8_t *pb, int ng, const uint8_t *xq, const int16_t *x16,
                     __m256 C[2][2]) {
    C[0][0] = C[0][1] = C[1][0] = C[1][1] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const float *trailer = (const float *)(xq + (size_t)g * KVS_XQ_GROUP_BYTES + KVS_XQ_GROUP_QS);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i sa[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            __m256i sb[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const int16_t *xr = x16 + ((size_t)(g * 8 + r) * 2 + h) * 32;
                __m256i xa = _mm256_loadu_si256((const __m256i *)xr), xb = _mm256_loadu_si256((const __m256i *)(xr + 16));
                __asm__("" : "+x"(xa), "+x"(xb)); /* in registers: loaded once for both rows */
#pragma GCC unroll 2
                for (int o = 0; o < 2; o++) {
                    const uint8_t *pw = (o ? pb : pa) + (size_t)g * 544 + 64 * r + 32 * h;
                    __m256i wa = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)pw));
                    __m256i wb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(pw + 16)));
                    sa[o] = _mm256_add_epi32(sa[o], _mm256_madd_epi16(wa, xa));
                    sb[o] = _mm256_add_epi32(sb[o], _mm256_madd_epi16(wb, xb));
                }
                /* the order as written: otherwise GCC hoists the products of
                 * all eight steps and spills them to the stack (Zen 3, the
                 * kernel alone from L1: 3.0 -> 2.2 cycles per block) */
                __asm__("" : "+x"(sa[0]), "+x"(sb[0]), "+x"(sa[1]), "+x"(sb[1]));
            }
            __m256 dx = _mm256_loadu_ps(trailer + 8 * h);
#pragma GCC unroll 2
            for (int o = 0; o < 2; o++) {
                const uint8_t *pg = (o ? pb : pa) + (size_t)g * 544;
                __m256i isum = _mm256_permute4x64_epi64(_mm256_hadd_epi32(sa[o], sb[o]), 0xD8);
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pg + 512 + 16 * h)));
                C[o][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), C[o][h]);
            }
        }
    }
}

/* The chains of one activation row against weight rows pa and pb
 * (C[o][h]: row o's chains 8h .. 8h + 7), by type. */
AI void m1_pair(int type, const uint8_t *pa, const uint8_t *pb, int ng, const uint8_t *xq, const int16_t *x16,
                __m256 C[2][2]) {
    if (type == KVS_TYPE_Q8_0) q8_m1_pair16(pa, pb, ng, xq, x16, C);
    else q4_m1_pair(pa, pb, ng, type == KVS_TYPE_Q4_1, xq, C);
}

/* A whole tile's outputs for one activation row from its rows' chains (C,
 * row o at tree16x8_pos[o]): the 8 trees side by side (tree16x8), then the
 * tile's tail blocks (tail_rows8_direct, compiled per type), one store. */
AI void tile_out8(const kvs_mm_call *c, int j8, const __m256 C[8][2], int nt, const xtail *xt, float *yrow) {
    __m256 y = tree16x8(C);
    if (nt) {
        const uint8_t *tt = kvs_packed_tile_tail(c->w, j8);
        switch (c->w->type) {
        case KVS_TYPE_Q4_0: y = tail_rows8_direct(KVS_TYPE_Q4_0, tt, nt, xt, y); break;
        case KVS_TYPE_Q4_1: y = tail_rows8_direct(KVS_TYPE_Q4_1, tt, nt, xt, y); break;
        default: y = tail_rows8_direct(KVS_TYPE_Q8_0, tt, nt, xt, y); break;
        }
    }
    _mm256_storeu_ps(yrow + j8, y);
}

/* Activation row i against weight rows [j0, j1), by whole tiles of 8 rows.
 * The chunk's whole tiles are read as two halves side by side: tile t with
 * tile t + half, row o of one with row o of the other (m1_pair), two
 * streams far apart where the rows of a pair had been neighbours (a Zen 3
 * core reads DRAM faster from two distant streams than from one: see
 * matmul_avx2.c, matmul_cols_f). Measured, SmolLM2 decode, paired A/B: Q8_0
 * 1.06x at 1 thread, 1.14x at 2; Q4_0 / Q4_1 unchanged (their unpacking
 * bounds them, not the memory). Each stream's rows KVS_M1_PF_ROWS ahead are
 * prefetched (prefetch_rows.h): on Zen 3 no better than none, on the AMX
 * Xeon's cores (KVS_ISA=avx2) SmolLM2 Q4_1 1.6x tokens/s. What is
 * left (an odd whole tile, a last partial tile) goes pair by pair inside its
 * tile (an odd last row is computed twice and stored once). xt: row i's
 * tail blocks. */
static void matmul_row(const kvs_mm_call *c, int i, int j0, int j1, const xtail *xt) {
    const kvs_wmat *w = c->w;
    const int type = w->type, ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    const size_t gbytes = kvs_packed_groups_bytes(w);
    const uint8_t *xq = c->xq + (size_t)i * c->xq_row;
    const int16_t *x16 = (const int16_t *)(c->xn + (size_t)i * c->xn_row);
    float *yrow = c->y + (size_t)i * w->n;
    const int half = (j1 - j0) / KVS_PACK_TILE / 2;
    for (int t = 0; t < half; t++) {
        const int ja = j0 + t * KVS_PACK_TILE, jb = ja + half * KVS_PACK_TILE;
        __m256 CA[8][2], CB[8][2]; /* row o's chains at position tree16x8_pos[o] */
        for (int o = 0; o < KVS_PACK_TILE; o++) {
            __m256 P[2][2];
            kvs_prefetch_row_ahead(w, ja + o);
            kvs_prefetch_row_ahead(w, jb + o);
            m1_pair(type, kvs_packed_row(w, ja + o), kvs_packed_row(w, jb + o), ng, xq, x16, P);
            const int p = tree16x8_pos[o];
            CA[p][0] = P[0][0];
            CA[p][1] = P[0][1];
            CB[p][0] = P[1][0];
            CB[p][1] = P[1][1];
        }
        tile_out8(c, ja, (const __m256(*)[2])CA, nt, xt, yrow);
        tile_out8(c, jb, (const __m256(*)[2])CB, nt, xt, yrow);
    }
    for (int j8 = j0 + 2 * half * KVS_PACK_TILE; j8 < j1; j8 += KVS_PACK_TILE) {
        const int n8 = j1 - j8 < KVS_PACK_TILE ? j1 - j8 : KVS_PACK_TILE;
        __m256 C[8][2];
        for (int o = 0; o < n8; o += 2) {
            const uint8_t *pa = kvs_packed_row(w, j8 + o);
            const uint8_t *pb = o + 1 < n8 ? kvs_packed_row(w, j8 + o + 1) : pa;
            __m256 P[2][2];
            m1_pair(type, pa, pb, ng, xq, x16, P);
            C[tree16x8_pos[o]][0] = P[0][0]; /* (o is even: o + 1 < 8) */
            C[tree16x8_pos[o]][1] = P[0][1];
            C[tree16x8_pos[o + 1]][0] = P[1][0];
            C[tree16x8_pos[o + 1]][1] = P[1][1];
        }
        if (n8 == KVS_PACK_TILE) {
            tile_out8(c, j8, (const __m256(*)[2])C, nt, xt, yrow);
            continue;
        }
        for (int o = 0; o < n8; o++) {
            const int p = tree16x8_pos[o];
            float y = tree16_2(C[p][0], C[p][1]);
            if (nt) y = tail_blocks(type, kvs_packed_row(w, j8 + o) + gbytes, nt, xt, y);
            yrow[j8 + o] = y;
        }
    }
}

/* tail_rows8 for four activation rows at once (x0..x3: their tail blocks,
 * y: their running outputs, updated): each weight pair vector of the tile
 * is loaded once for the four rows, 1.25 loads per vpmaddwd where one row
 * at a time took two (a load-bound loop: the tails, 2 blocks of 18 at k =
 * 576, took 12% of a Q4_0 prefill, twice their share of the blocks; perf,
 * Zen 3). Per row the same integer sums (exact) and float steps
 * (tail_step) as tail_rows8. */
AI void tail_rows8x4(int type, const __m256i *wt, const __m256 *wd, const __m256 *wm, int nt, const xtail *x0,
                     const xtail *x1, const xtail *x2, const xtail *x3, __m256 y[4]) {
    __m256 y0 = y[0], y1 = y[1], y2 = y[2], y3 = y[3];
    for (int t = 0; t < nt; t++) {
        const __m256i *w = wt + 16 * t;
        const int32_t *q0 = (const int32_t *)x0[t].q, *q1 = (const int32_t *)x1[t].q;
        const int32_t *q2 = (const int32_t *)x2[t].q, *q3 = (const int32_t *)x3[t].q;
        __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
                s31 = s00;
#pragma GCC unroll 8
        for (int v = 0; v < 16; v += 2) {
            __m256i wa = _mm256_load_si256(w + v), wb = _mm256_load_si256(w + v + 1);
            /* in registers: GCC folded each load into the four rows'
             * vpmaddwd (16 loads for 8 multiplies; one k = 576 matmul of 512
             * rows runs 1.02-1.06x faster with them in registers) */
            __asm__("" : "+x"(wa), "+x"(wb));
            s00 = _mm256_add_epi32(s00, _mm256_madd_epi16(wa, _mm256_set1_epi32(q0[v])));
            s01 = _mm256_add_epi32(s01, _mm256_madd_epi16(wb, _mm256_set1_epi32(q0[v + 1])));
            s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(wa, _mm256_set1_epi32(q1[v])));
            s11 = _mm256_add_epi32(s11, _mm256_madd_epi16(wb, _mm256_set1_epi32(q1[v + 1])));
            s20 = _mm256_add_epi32(s20, _mm256_madd_epi16(wa, _mm256_set1_epi32(q2[v])));
            s21 = _mm256_add_epi32(s21, _mm256_madd_epi16(wb, _mm256_set1_epi32(q2[v + 1])));
            s30 = _mm256_add_epi32(s30, _mm256_madd_epi16(wa, _mm256_set1_epi32(q3[v])));
            s31 = _mm256_add_epi32(s31, _mm256_madd_epi16(wb, _mm256_set1_epi32(q3[v + 1])));
            /* the order as written: otherwise GCC hoists the products of all
             * eight steps and spills them (and this loop ran 1.6x slower
             * than one row at a time) */
            __asm__("" : "+x"(s00), "+x"(s01), "+x"(s10), "+x"(s11), "+x"(s20), "+x"(s21), "+x"(s30), "+x"(s31));
        }
        y0 = tail_step(type, wd, wm, t, &x0[t], s00, s01, y0);
        y1 = tail_step(type, wd, wm, t, &x1[t], s10, s11, y1);
        y2 = tail_step(type, wd, wm, t, &x2[t], s20, s21, y2);
        y3 = tail_step(type, wd, wm, t, &x3[t], s30, s31, y3);
    }
    y[0] = y0, y[1] = y1, y[2] = y2, y[3] = y3;
}

/* The tile's tail blocks for the mr rows of a pass from i0 (type: a
 * constant where inlined), their tree results in ytile, into columns j8 ..
 * j8 + 7 of y: rows by fours (tail_rows8x4), the rest one by one
 * (tail_rows8). */
AI void tail_pass8_type(const kvs_mm_call *c, int type, const __m256i *wt, const __m256 *wd, const __m256 *wm, int nt,
                        int i0, int mr, float (*ytile)[8], int j8) {
    const size_t n = (size_t)c->w->n;
    int i = 0;
    for (; i + 4 <= mr; i += 4) {
        __m256 y[4] = {_mm256_load_ps(ytile[i]), _mm256_load_ps(ytile[i + 1]), _mm256_load_ps(ytile[i + 2]),
                       _mm256_load_ps(ytile[i + 3])};
        tail_rows8x4(type, wt, wd, wm, nt, row_tails(c, i0 + i), row_tails(c, i0 + i + 1), row_tails(c, i0 + i + 2),
                     row_tails(c, i0 + i + 3), y);
        for (int q = 0; q < 4; q++) _mm256_storeu_ps(c->y + (size_t)(i0 + i + q) * n + j8, y[q]);
    }
    for (; i < mr; i++)
        _mm256_storeu_ps(c->y + (size_t)(i0 + i) * n + j8,
                         tail_rows8(type, wt, wd, wm, nt, row_tails(c, i0 + i), _mm256_load_ps(ytile[i])));
}

/* tail_pass8_type by weight type. A function of its own: inlined in the
 * matmul's loop nest, each row's running y went through the stack between
 * the tail blocks and the store waited on it (a quarter of a k = 576
 * prefill went to its 2 tail blocks of 18). */
static __attribute__((noinline)) void tail_pass8(const kvs_mm_call *c, int type, const __m256i *wt, const __m256 *wd,
                                                 const __m256 *wm, int nt, int i0, int mr, float (*ytile)[8], int j8) {
    if (type == KVS_TYPE_Q4_0) tail_pass8_type(c, KVS_TYPE_Q4_0, wt, wd, wm, nt, i0, mr, ytile, j8);
    else if (type == KVS_TYPE_Q4_1) tail_pass8_type(c, KVS_TYPE_Q4_1, wt, wd, wm, nt, i0, mr, ytile, j8);
    else tail_pass8_type(c, KVS_TYPE_Q8_0, wt, wd, wm, nt, i0, mr, ytile, j8);
}

int kvs_avx2_matmul_packed(const kvs_mm_call *c, int j0, int j1) {
    const kvs_wmat *w = c->w;
    if (!w->packed || !c->xq || !c->xn) return 0;
    /* whole tiles only (kernels_impl.h: column chunks are multiples of 16) */
    if (j0 % KVS_PACK_TILE || (j1 % KVS_PACK_TILE && j1 != w->n)) return 0;
    const int type = w->type, ng = kvs_xq_groups(w->k), nt = kvs_xq_tail_blocks(w->k);
    float acc[4][ROWS][16] __attribute__((aligned(32)));
    if (c->m == 1) { /* decode: pairs of weight rows (measured: row passes are slower for m > 1) */
        matmul_row(c, 0, j0, j1, row_tails(c, 0));
        return 1;
    }
    /* several rows: passes of ROWS activation rows over tiles of 8 weight
     * rows; the tiles' tails met by every row of the pass (tail_rows8) */
    float ytile[ROWS][8] __attribute__((aligned(32)));
    __m256i wt[(KVS_XQ_GROUP - 1) * 16];
    __m256 wd[KVS_XQ_GROUP - 1], wm[KVS_XQ_GROUP - 1];
    const size_t gbytes = kvs_packed_groups_bytes(w);
    /* rows per pass: the pass's quantized rows stay in L1 (32 KiB) while
     * every weight row of the chunk meets them */
    const int rows = ng <= 1 ? ROWS : ROWS / 2; /* measured: k = 1536 (3 groups) 51 -> 64 GOPS at 8 rows, 61 at 4 */
    for (int i0 = 0; i0 < c->m; i0 += rows) {
        int mr = c->m - i0 < rows ? c->m - i0 : rows;
        const uint8_t *xq = c->xq + (size_t)i0 * c->xq_row;
        for (int j8 = j0; j8 < j1; j8 += 8) {
            const int n8 = j1 - j8 < 8 ? j1 - j8 : 8;
            for (int o = 0; o < n8;) {
                const int no = n8 - o < 4 ? n8 - o : 4; /* weight rows of this step (4, fewer at a tile's end) */
                const uint8_t *pw[4];
                for (int r = 0; r < 4; r++) /* a short step repeats its last row (computed, not stored) */
                    pw[r] = kvs_packed_row(w, j8 + o + (r < no ? r : no - 1));
                if (j8 + 2 * KVS_PACK_TILE <= w->n) { /* the stream ahead: this step's share of the next tile */
                    const uint8_t *pf = (const uint8_t *)w->packed + (size_t)(j8 + KVS_PACK_TILE + o) * w->row_bytes;
                    for (size_t b = 0; b < no * w->row_bytes; b += 64) _mm_prefetch((const char *)pf + b, _MM_HINT_T0);
                }
                if (ng == 0) /* else the first group's steps start from zero (q4_groups4): no clear */
                    for (int r = 0; r < 4; r++)
                        for (int i = 0; i < mr; i++) /* (a fixed-size clear: no memset call per row) */
                            for (int l = 0; l < 16; l++) acc[r][i][l] = 0.0f;
                if (type == KVS_TYPE_Q8_0)
                    q8_groups16x4(pw, ng, xq, c->xq_row, c->xn + (size_t)i0 * c->xn_row, c->xn_row, mr, acc);
                else
                    q4_groups4(pw, ng, type == KVS_TYPE_Q4_1, xq, c->xq_row, mr, acc);
                if (no == 4) /* the four rows' trees at once (kvs_tree16 per output was scalar code) */
                    for (int i = 0; i < mr; i++)
                        _mm_storeu_ps(ytile[i] + o, tree16x4(acc[0][i], acc[1][i], acc[2][i], acc[3][i]));
                else
                    for (int r = 0; r < no; r++)
                        for (int i = 0; i < mr; i++) ytile[i][o + r] = kvs_tree16(acc[r][i]);
                o += no;
            }
            if (nt && n8 == KVS_PACK_TILE) {
                tail_prep8(type, kvs_packed_tile_tail(w, j8), nt, wt, wd, wm);
                tail_pass8(c, type, wt, wd, wm, nt, i0, mr, ytile, j8);
                continue;
            }
            for (int i = 0; i < mr; i++)
                for (int o = 0; o < n8; o++) {
                    float y = ytile[i][o];
                    if (nt) y = tail_blocks(type, kvs_packed_row(w, j8 + o) + gbytes, nt, row_tails(c, i0 + i), y);
                    c->y[(size_t)(i0 + i) * w->n + j8 + o] = y;
                }
        }
    }
    return 1;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
