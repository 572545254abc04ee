/*
 * The threaded matmul for Q5_0 / Q5_1 / K-quant weights (kquant.h): x rows
 * quantized once (each on its own: batch-invariant), then whole output
 * columns per chunk, so no output is reduced across threads. The ISA row
 * follows the dispatcher's choice: the scalar reference, AVX2, or on
 * AVX-512 (VNNI) kquant_avx512.c.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/kernels_impl.h" /* kvs_decode_cols */
#include "kernels/kquant.h"

static const kvs_kq_isa *kq_isa(void) {
#if defined(__x86_64__)
    const char *isa = kvs_kernels_isa();
    if (!strcmp(isa, "avx2")) return &kvs_kq_isa_avx2;
    if (strcmp(isa, "scalar") != 0) return &kvs_kq_isa_avx512; /* avx512vnni, amx */
#endif
    return &kvs_kq_isa_scalar;
}

size_t kvs_kq_work_size(const kvs_wmat *w, int m) {
    return 64 + (size_t)m * kvs_kq_xrow_bytes(w->k) + kvs_kq_quads_bytes(w->k, m);
}

typedef struct kq_task {
    const kvs_kq_isa *isa;
    const kvs_wmat *w;
    const float *x;
    uint8_t *xq;
    size_t xq_row;
    uint8_t *xt; /* the quads' tails (kvs_kq_isa.prep_quads), after the m rows */
    int m, cols;
    int rows; /* activation rows per chunk (kq_rows), 0: all */
    float *y;
} kq_task;

#define KQ_QUANT_ROWS 8

static void quant_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const kq_task *t = arg;
    const int i0 = chunk * KQ_QUANT_ROWS, i1 = i0 + KQ_QUANT_ROWS < t->m ? i0 + KQ_QUANT_ROWS : t->m;
    for (int i = i0; i < i1; i++)
        t->isa->quantize_row(t->x + (size_t)i * t->w->k, t->w->k, t->xq + (size_t)i * t->xq_row, t->m);
    if (t->isa->prep_quads) /* the chunk's whole quads (KQ_QUANT_ROWS: a multiple of 4) */
        t->isa->prep_quads(t->w->k, t->xq + (size_t)i0 * t->xq_row, t->xq_row, i1 - i0, t->m,
                           t->xt + (size_t)(i0 / 4) * kvs_kq_quads_bytes(t->w->k, 4));
}

/* Column chunk `chunk` of row block rb (rows: all of them). */
static void cols_chunk(const kq_task *t, int rb, int chunk) {
    int j0 = chunk * t->cols, j1 = j0 + t->cols < t->w->n ? j0 + t->cols : t->w->n;
    if (!t->rows) {
        t->isa->dot_cols(t->w, t->xq, t->xq_row, t->m, t->xt, t->y, j0, j1);
        return;
    }
    const int i0 = rb * t->rows, m = t->m - i0 < t->rows ? t->m - i0 : t->rows; /* i0: a multiple of 4 (kq_rows) */
    t->isa->dot_cols(t->w, t->xq + (size_t)i0 * t->xq_row, t->xq_row, m,
                     t->xt + (size_t)(i0 / 4) * kvs_kq_quads_bytes(t->w->k, 4), t->y + (size_t)i0 * t->w->n, j0, j1);
}

/* Rows per row block as dispatch.c's mm_rows (why: there): one block a
 * thread for prefill on several threads (kvs_prefill_row_blocks), and as
 * many more as keep a block's quantized rows in L2 (KQ_XQ_BLOCK_BYTES: the
 * chunks go block by block, so every column chunk of a block finds its rows
 * there; 512 rows of k = 576 are 1.3 MB, and each chunk of 16 columns had
 * streamed them all: SmolLM2 Q4_K_M prefill 1.04x at 1 thread, 6 paired
 * rounds), else 0. The quantized rows' layout depends on whether a call has one row or
 * several (kq_lanes), so no block may be a single row: with m >= 32 a
 * thread, the last has m / nth - 3 nth + 1 or more. Blocks start at a
 * multiple of 4, where a quad of the tails' operands does (prep_quads). */
#define KQ_XQ_BLOCK_BYTES (256 * 1024) /* as matmul_avx512.c's XQ_BLOCK_BYTES */
static int kq_rows(int m, int nth, size_t xq_row) {
    int nrb = kvs_prefill_row_blocks(m, nth);
    const int l2 = (int)(((size_t)m * xq_row + KQ_XQ_BLOCK_BYTES - 1) / KQ_XQ_BLOCK_BYTES);
    nrb = (l2 + nrb - 1) / nrb * nrb; /* a multiple of the threads' blocks */
    if (nrb == 1) return 0;
    const int rows = ((m + nrb - 1) / nrb + 3) & ~3;
    return m - (nrb - 1) * rows >= 2 ? rows : 0;
}

/* t's activation rows quantized into t->xq (a few rows on this thread); by
 * spans, so that a thread quantizes the rows its own row block reads. */
static void quantize(kvs_pool *pool, kq_task *t) {
    const int nq = (t->m + KQ_QUANT_ROWS - 1) / KQ_QUANT_ROWS;
    if (t->m <= 2 * KQ_QUANT_ROWS) for (int c = 0; c < nq; c++) quant_chunk(t, c, 0);
    else kvs_pool_for_spans(pool, nq, quant_chunk, t);
}

/* Several matrices on one x (q / k / v, gate / up): kvs_kq_multi_ok says
 * whether kvs_kq_matmul_multi takes them (all of these types, one k). */
#define KQ_MULTI_MAX 8

int kvs_kq_multi_ok(int nw, const kvs_wmat *const *ws) {
    if (nw < 1 || nw > KQ_MULTI_MAX) return 0;
    for (int i = 0; i < nw; i++)
        if (!kvs_kq_handles(ws[i]->type) || ws[i]->k != ws[0]->k) return 0;
    return 1;
}

/* The chunks: per row block (one, or kq_rows'), every matrix's column
 * chunks, matrix 0's first; row blocks in order (rb-major, for
 * kvs_pool_for_spans). */
typedef struct kq_multi {
    kq_task t[KQ_MULTI_MAX];
    int first[KQ_MULTI_MAX + 1]; /* matrix i's chunks in a row block: [first[i], first[i + 1]) */
    int nw;
} kq_multi;

static void multi_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const kq_multi *mt = arg;
    const int per_rb = mt->first[mt->nw], rb = chunk / per_rb;
    chunk %= per_rb;
    int i = 0;
    while (chunk >= mt->first[i + 1]) i++;
    cols_chunk(&mt->t[i], rb, chunk - mt->first[i]);
}

/* The activations quantized once (they depend on k and m, not on the weight
 * type) and every matrix's column chunks in one parallel loop: per matrix
 * the bytes of its own kvs_kq_matmul. */
void kvs_kq_matmul_multi(kvs_pool *pool, int nw, const kvs_wmat *const *ws, const float *x, int m, float *const *ys,
                         void *work) {
    if (m <= 0) return;
    kq_multi mt;
    mt.first[0] = 0;
    mt.nw = nw;
    const int rows = kq_rows(m, kvs_pool_size(pool), kvs_kq_xrow_bytes(ws[0]->k));
    for (int i = 0; i < nw; i++) {
        const kvs_wmat *w = ws[i];
        /* a few rows (m < 16: batched decode) as decode (kvs_decode_cols) */
        const int cols = m < 16 ? kvs_decode_cols(w->n, kvs_pool_size(pool)) : 16;
        uint8_t *xq = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
        const size_t xq_row = kvs_kq_xrow_bytes(w->k);
        mt.t[i] = (kq_task){kq_isa(), w, x, xq, xq_row, xq + (size_t)m * xq_row, m, cols, rows, ys[i]};
        mt.first[i + 1] = mt.first[i] + (w->n + cols - 1) / cols;
    }
    quantize(pool, &mt.t[0]);
    const int nrb = rows ? (m + rows - 1) / rows : 1;
    if (rows) kvs_pool_for_spans(pool, nrb * mt.first[nw], multi_chunk, &mt);
    else kvs_pool_for(pool, mt.first[nw], multi_chunk, &mt);
}

void kvs_kq_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y, void *work) {
    if (w->n <= 0) return;
    kvs_kq_matmul_multi(pool, 1, &w, x, m, &y, work); /* the one-matrix case */
}
