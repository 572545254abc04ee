/*
 * Weight repacking at load (kvs_wmat_pack): the GGUF rows of a Q4_0 / Q4_1 /
 * Q8_0 matrix, permuted into the order the AVX2 kernels consume, so that a
 * decode step streams each weight byte once with plain 32-byte loads instead
 * of gathering 2-byte-misaligned block fields (quant.h's blocks are 18, 20 and
 * 34 bytes). Only bytes move: the scales stay f16, the quants stay as they
 * are, the arithmetic is the scalar reference's (kernels_impl.h), so every
 * result is memcmp-equal to the unpacked path.
 *
 * A packed row has the row's byte count (row_bytes) and the same place in
 * the matrix; inside it, each full group of 16 blocks (quant.h "full groups")
 * becomes
 *
 *   Q4_0 / Q4_1:  qv[4][16][4]  vector r, lane l = qs dword r of block l
 *                               (low nibbles: elements 4r..4r+3, high:
 *                               16+4r..19+4r: xq vecs 2r and 2r+1)
 *                 d[16] (f16)   then, Q4_1 only, m[16] (f16)
 *   Q8_0:         qv[8][16][4]  vector r, lane l = qs dword r of block l
 *                               (elements 4r..4r+3: xq vec xq_of_q8[r])
 *                 d[16] (f16)
 *
 * (288, 320 and 544 bytes: 16 blocks each), and the tail blocks (nb % 16)
 * follow unchanged in GGUF layout. Lane l of every vector is block l, the
 * lane order of the quantized activations' full groups.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels_impl.h"

#define HUGE_PAGE ((size_t)2 << 20)

static int packable(int type) {
    return type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q8_0;
}

/* Packs one row (row_bytes) from src into dst. */
static void pack_row(int type, int k, const uint8_t *src, uint8_t *dst) {
    const int bs = type == KVS_TYPE_Q4_0 ? 18 : type == KVS_TYPE_Q4_1 ? 20 : 34;
    const int qoff = type == KVS_TYPE_Q4_1 ? 4 : 2; /* qs after d (and m) */
    const int nvec = type == KVS_TYPE_Q8_0 ? 8 : 4;
    const int ng = kvs_xq_groups(k), nb = k / KVS_QK;
    for (int g = 0; g < ng; g++) {
        const uint8_t *blk0 = src + (size_t)g * 16 * bs;
        uint8_t *out = dst + (size_t)g * 16 * bs;
        for (int l = 0; l < 16; l++) {
            const uint8_t *blk = blk0 + (size_t)l * bs;
            for (int r = 0; r < nvec; r++) memcpy(out + 64 * r + 4 * l, blk + qoff + 4 * r, 4);
            memcpy(out + 64 * nvec + 2 * l, blk, 2); /* d */
            if (type == KVS_TYPE_Q4_1) memcpy(out + 64 * nvec + 32 + 2 * l, blk + 2, 2); /* m */
        }
    }
    memcpy(dst + (size_t)ng * 16 * bs, src + (size_t)ng * 16 * bs, (size_t)(nb - ng * 16) * bs);
}

int kvs_wmat_pack(kvs_wmat *w, int force) {
    if (w->packed || !packable(w->type) || w->k % KVS_QK || w->n <= 0) return 0;
    /* Only the AVX2 kernels read the packed layout; elsewhere it would be
     * memory for nothing. */
    if (!force && !(kvs_kernels_cpu_level() == 1 && kvs_kernels_simd_allowed())) return 0;
    const char *env = getenv("KVS_PACK"); /* KVS_PACK=0: GGUF rows (side-by-side benchmarks) */
    if (!force && env && !strcmp(env, "0")) return 0;
    size_t bytes = w->row_bytes * (size_t)w->n;
    /* Large copies on 2 MiB pages where the kernel allows it (THP "madvise"
     * mode is common): a decode step streams every byte once, and with 4 KiB
     * pages each page costs a TLB miss and stops the hardware prefetcher. */
    size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 64;
    uint8_t *p = aligned_alloc(align, (bytes + align - 1) & ~(align - 1));
    if (!p) return -1;
    if (align == HUGE_PAGE) (void)madvise(p, (bytes + align - 1) & ~(align - 1), MADV_HUGEPAGE);
    for (int j = 0; j < w->n; j++)
        pack_row(w->type, w->k, (const uint8_t *)w->data + (size_t)j * w->row_bytes, p + (size_t)j * w->row_bytes);
    w->packed = p;
    return 0;
}

void kvs_wmat_unpack(kvs_wmat *w) {
    free((void *)w->packed);
    w->packed = NULL;
}
