/*
 * The decode kernels' software prefetch of weight rows (one activation
 * row: AVX-512 matmul_avx512_m1.c, AVX2 matmul_avx2_packed.c): a decode
 * step streams each weight byte once from L3 or DRAM, and the hardware
 * prefetchers alone leave an m = 1 loop waiting on its misses. Hints only:
 * no bit of an output depends on them.
 */
#ifndef KVS_KERNELS_PREFETCH_ROWS_H
#define KVS_KERNELS_PREFETCH_ROWS_H

#if defined(__x86_64__)

#include <xmmintrin.h>

#include "kernels/kernels_impl.h"

/* How many rows ahead of the one a decode kernel takes it fetches into the
 * L1. Measured: AVX-512, +15% decode tokens/s at one thread (AMX Xeon);
 * AVX2 on that Xeon (KVS_ISA=avx2), SmolLM2 Q4_1 1.58x at 8 rows, 1.61x at
 * 16 (4 paired rounds); on Zen 3 the AVX2 kernel had measured no better with
 * it than without (1-8 rows, two streams), and no worse. */
#ifndef KVS_M1_PF_ROWS
#define KVS_M1_PF_ROWS 16
#endif

/* Prefetches the bytes of row j + KVS_M1_PF_ROWS, line by line: the
 * matrix's rows j * row_bytes on, packed or GGUF (a packed tile of 8 rows
 * holds the same bytes as its 8 GGUF rows, its tails after the groups, so
 * the rows' ranges in turn cover them; the groups' own addresses skipped
 * the tails, ~17% of gemma3's head). Weights from DRAM (far_rows,
 * kvs_far_prefetch_rows): row j + far_rows into the L2 as well. Past the
 * matrix these are harmless hints. */
static inline __attribute__((always_inline)) void kvs_prefetch_row_ahead(const kvs_wmat *w, int j) {
    const uint8_t *base = w->packed ? (const uint8_t *)w->packed : (const uint8_t *)w->data;
    const uintptr_t pf0 = (uintptr_t)base + (size_t)(j + KVS_M1_PF_ROWS) * w->row_bytes;
    for (uintptr_t a = pf0 & ~(uintptr_t)63; a < pf0 + w->row_bytes; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
    if (w->far_rows) {
        const uintptr_t pf1 = (uintptr_t)base + (size_t)(j + w->far_rows) * w->row_bytes;
        for (uintptr_t a = pf1 & ~(uintptr_t)63; a < pf1 + w->row_bytes; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T1);
    }
}

#endif /* __x86_64__ */

#endif
