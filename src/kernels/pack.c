/*
 * Weight repacking at load (kvs_wmat_pack): the GGUF rows of a Q4_0 / Q4_1 /
 * Q8_0 matrix, permuted into the order the AVX2 kernels consume (and the
 * AVX-512 paths: a group's vector r is a zmm as it is), so that a
 * decode step streams each weight byte once with plain 32-byte loads instead
 * of gathering 2-byte-misaligned block fields (quant.h's blocks are 18, 20 and
 * 34 bytes). Only bytes move: the scales stay f16, the quants stay as they
 * are, the arithmetic is the scalar reference's (kernels_impl.h), so every
 * result is memcmp-equal to the unpacked path.
 *
 * A packed matrix has the GGUF matrix's size and every tile of 8 rows the
 * same bytes (row_bytes each; kernels_impl.h kvs_packed_row finds a row's
 * groups); each full group of 16 blocks (quant.h "full groups") of a row
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
 * (288, 320 and 544 bytes: 16 blocks each). Lane l of every vector is block
 * l, the lane order of the quantized activations' full groups.
 *
 * The tail blocks (nb % 16) of a whole tile of 8 rows (kernels_impl.h
 * kvs_packed_row: the tile's 8 rows' full groups come first, back to back)
 * are transposed, so that lane o of every vector is row o and the 8 rows'
 * tail dots are vertical like the groups' (a decode step paid ~20 cycles per
 * 32 tail bytes for horizontal sums and gathered scales, 4x a group's: 30%
 * of a k = 576 matrix's time for 11% of its bytes). Tail block t of the tile
 * (8 blocks' bytes):
 *
 *   Q4_0 / Q4_1:  qv[4][8][4]   vector v, lane o = qs dword v of row o
 *                 d[8] (f16)    then, Q4_1 only, m[8] (f16)
 *   Q8_0:         qp[16][8][2]  pair u, lane o = elements 2u, 2u + 1 of row o
 *                 d[8] (f16)    (one vpmovsxbw: the int16 pairs the dot takes)
 *
 * (144, 160 and 272 bytes). Rows past the last whole tile keep their tail
 * blocks after their full groups, in GGUF layout.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels_impl.h"

#define HUGE_PAGE ((size_t)2 << 20)

static int packable(int type) {
    return type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q8_0 || type == KVS_TYPE_Q5_0 ||
           type == KVS_TYPE_Q5_1;
}

/* Q5_0 / Q5_1 (kquant.h): each full octet of 8 blocks becomes
 *
 *   qs[4][32]   vector p, byte e = 4-bit part of element e of block 2p (low
 *               nibble) and of block 2p + 1 (high nibble)
 *   qh[32]      byte e, bit i = the 5th bit of element e of block i
 *   d[8] (f16)  then, Q5_1 only, m[8] (f16)
 *
 * (176 / 192 bytes: the octet's own size), so the AVX2 unpacking is a mask
 * and a shift per block (kquant_avx2_octet.h) instead of a bit expansion and a
 * gather of scales. A last half octet (4 blocks: the tail of gemma3's k = 640
 * rows, a fifth of them, whose GGUF blocks cost the AVX-512 decode as much
 * as a full octet) becomes
 *
 *   qs[2][32]   as above, blocks 0-3
 *   qh[16]      byte e, bit i = the 5th bit of element e of block i, bit
 *               4 + i that of element e + 16
 *   d[4] (f16)  then, Q5_1 only, m[4] (f16)
 *
 * (88 / 96 bytes); other partial octets stay in GGUF layout. */
static void q5_nibbles_and_scales(int q51, const uint8_t *src, int nblk, uint8_t *out, size_t d_at,
                                  uint32_t *qh) {
    const int bs = q51 ? 24 : 22;
    uint8_t q[8][KVS_QK];
    for (int i = 0; i < nblk; i++) {
        const uint8_t *blk = src + (size_t)i * bs;
        const uint8_t *qs = blk + (q51 ? 8 : 6);
        memcpy(&qh[i], blk + (q51 ? 4 : 2), 4);
        for (int e = 0; e < 16; e++) {
            q[i][e] = qs[e] & 15;
            q[i][e + 16] = qs[e] >> 4;
        }
        memcpy(out + d_at + 2 * i, blk, 2);                            /* d */
        if (q51) memcpy(out + d_at + 2 * (size_t)nblk + 2 * i, blk + 2, 2); /* m */
    }
    for (int p = 0; p < nblk / 2; p++)
        for (int e = 0; e < KVS_QK; e++) out[32 * p + e] = (uint8_t)(q[2 * p][e] | q[2 * p + 1][e] << 4);
}

static void pack_row_q5(int q51, int k, const uint8_t *src, uint8_t *dst) {
    const int bs = q51 ? 24 : 22, nb = k / KVS_QK, no = nb / 8, rest = nb - 8 * no;
    uint32_t qh[8];
    for (int o = 0; o < no; o++) {
        uint8_t *out = dst + (size_t)o * 8 * bs;
        q5_nibbles_and_scales(q51, src + (size_t)o * 8 * bs, 8, out, 160, qh);
        for (int e = 0; e < KVS_QK; e++) {
            uint8_t bits = 0;
            for (int i = 0; i < 8; i++) bits |= (uint8_t)(((qh[i] >> e) & 1) << i);
            out[128 + e] = bits;
        }
    }
    uint8_t *out = dst + (size_t)no * 8 * bs;
    const uint8_t *tail = src + (size_t)no * 8 * bs;
    if (rest != 4) {
        memcpy(out, tail, (size_t)rest * bs);
        return;
    }
    q5_nibbles_and_scales(q51, tail, 4, out, 80, qh);
    for (int e = 0; e < 16; e++) {
        uint8_t bits = 0;
        for (int i = 0; i < 4; i++) bits |= (uint8_t)(((qh[i] >> e) & 1) << i | ((qh[i] >> (e + 16)) & 1) << (4 + i));
        out[64 + e] = bits;
    }
}

/* The full groups of one row from src into dst. */
static void pack_groups(int type, int k, const uint8_t *src, uint8_t *dst) {
    const int bs = kvs_q_block_bytes(type);
    const int qoff = type == KVS_TYPE_Q4_1 ? 4 : 2; /* qs after d (and m) */
    const int nvec = type == KVS_TYPE_Q8_0 ? 8 : 4;
    for (int g = 0; g < kvs_xq_groups(k); g++) {
        const uint8_t *blk0 = src + (size_t)g * 16 * bs;
        uint8_t *out = dst + (size_t)g * 16 * bs;
        for (int l = 0; l < 16; l++) {
            const uint8_t *blk = blk0 + (size_t)l * bs;
            for (int r = 0; r < nvec; r++) memcpy(out + 64 * r + 4 * l, blk + qoff + 4 * r, 4);
            memcpy(out + 64 * nvec + 2 * l, blk, 2); /* d */
            if (type == KVS_TYPE_Q4_1) memcpy(out + 64 * nvec + 32 + 2 * l, blk + 2, 2); /* m */
        }
    }
}

/* Packs one row past the last whole tile (row_bytes) from src into dst. */
static void pack_row(int type, int k, const uint8_t *src, uint8_t *dst) {
    const size_t gbytes = (size_t)kvs_xq_groups(k) * 16 * kvs_q_block_bytes(type);
    pack_groups(type, k, src, dst);
    memcpy(dst + gbytes, src + gbytes, (size_t)kvs_xq_tail_blocks(k) * kvs_q_block_bytes(type));
}

/* Packs a whole tile of KVS_PACK_TILE rows (src: GGUF rows rb bytes apart)
 * into dst (the tile's KVS_PACK_TILE * rb bytes). */
static void pack_tile(int type, int k, size_t rb, const uint8_t *src, uint8_t *dst) {
    const int bs = kvs_q_block_bytes(type), ng = kvs_xq_groups(k), nt = kvs_xq_tail_blocks(k);
    const int qoff = type == KVS_TYPE_Q4_1 ? 4 : 2;
    const int nvec = type == KVS_TYPE_Q8_0 ? 8 : 4;
    const size_t gbytes = (size_t)ng * 16 * bs;
    for (int o = 0; o < KVS_PACK_TILE; o++) pack_groups(type, k, src + (size_t)o * rb, dst + (size_t)o * gbytes);
    for (int t = 0; t < nt; t++) {
        uint8_t *out = dst + KVS_PACK_TILE * gbytes + (size_t)t * KVS_PACK_TILE * bs;
        for (int o = 0; o < KVS_PACK_TILE; o++) {
            const uint8_t *blk = src + (size_t)o * rb + (size_t)(ng * 16 + t) * bs;
            if (type == KVS_TYPE_Q8_0) /* word pairs: vpmovsxbw gives the int16 pairs at once */
                for (int u = 0; u < 16; u++) memcpy(out + 16 * u + 2 * o, blk + qoff + 2 * u, 2);
            else
                for (int v = 0; v < nvec; v++) memcpy(out + 32 * v + 4 * o, blk + qoff + 4 * v, 4);
            memcpy(out + 32 * nvec + 2 * o, blk, 2); /* d */
            if (type == KVS_TYPE_Q4_1) memcpy(out + 32 * nvec + 16 + 2 * o, blk + 2, 2); /* m */
        }
    }
}

static int pack_off_by_env(void) {
    const char *env = getenv("KVS_PACK"); /* KVS_PACK=0: GGUF rows (side-by-side benchmarks) */
    return env && !strcmp(env, "0");
}

size_t kvs_wmat_packed_bytes(const kvs_wmat *w, int force) {
    if (w->packed || !packable(w->type) || w->k % KVS_QK || w->n <= 0) return 0;
    /* Only where a path reads the packed layout (every SIMD path does):
     * the AVX2 kernels (every type), the AVX2 K-quant kernels that AVX-512
     * CPUs run as well (Q5), the AVX-512 Q4_0 / Q4_1 / Q8_0 paths
     * (matmul_avx512_m1.c, the prepared tiles' groups: the groups' 16-lane
     * vectors without the permutes of the 18-, 20- and 34-byte blocks; a
     * cache-resident SmolLM2 layer, one thread: m = 1 Q4_0 1.45x, Q4_1
     * 1.28x, m = 8 1.1-1.15x). */
    if (!force && !(kvs_kernels_cpu_level() >= 1 && kvs_kernels_simd_allowed())) return 0;
    if (!force && pack_off_by_env()) return 0;
    return w->row_bytes * (size_t)w->n;
}

/* Float weights, which the AVX2 kernels stream as they are: a plain copy in
 * the arena still puts them on 2 MiB pages in decode order (SmolLM2 F16
 * decode ~1.08x at 1 thread on Zen 3; from the GGUF mapping they sit on
 * 4 KiB file pages). */
static int copied_in_arena(const kvs_wmat *w) {
    return (w->type == KVS_TYPE_F16 || w->type == KVS_TYPE_BF16 || w->type == KVS_TYPE_F32) && w->data &&
           w->n > 0 && kvs_kernels_cpu_level() >= 1 && kvs_kernels_simd_allowed() && !pack_off_by_env();
}

size_t kvs_wmat_arena_bytes(const kvs_wmat *w) {
    const size_t packed = kvs_wmat_packed_bytes(w, 0);
    if (packed || w->packed) return packed;
    return copied_in_arena(w) ? w->row_bytes * (size_t)w->n : 0;
}

void kvs_wmat_arena_place(kvs_wmat *w, void *dst) {
    if (kvs_wmat_packed_bytes(w, 0)) {
        kvs_wmat_pack_to(w, dst);
    } else if (copied_in_arena(w)) {
        memcpy(dst, w->data, w->row_bytes * (size_t)w->n);
        w->data = dst;
    }
}

/* The GGUF rows that the AMX batch paths load their tiles from every step
 * (matmul_amx_batch_nib.c: a server's 5-8 streams; Q8_0, Q4_0, Q4_1 and
 * Q5_0 as their tiles): a
 * plain copy puts them on 2 MiB pages too (from the mapping, 4 KiB file
 * pages; paired runs on the AMX Xeon VM, 8 streams, gemma3 whose Q8_0 head
 * is half a step: 194-197 -> 202-212 tok/s at 1 thread, 364-366 -> 380-396
 * at 2; copying every streamed matrix gained no more). Their mapped pages
 * go back instead (kvs_wmat_arena_replaces_source), so the resident memory
 * stays the same. The copies follow all the packed ones:
 * interleaved with them, one-stream decode, which reads only the packed
 * run, lost 3-6% (SmolLM2 Q8_0). */
static int rows_copied_in_arena(const kvs_wmat *w) {
    return w->data && w->n > 0 && kvs_amx_batch_type(w->type) && kvs_kernels_amx() && kvs_kernels_simd_allowed() &&
           !pack_off_by_env();
}

static int tiled_type(int type) {
    return type == KVS_TYPE_Q8_0 || type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q5_0;
}

kvs_wtiles kvs_wtiles_of(const kvs_wmat *w) {
    const size_t slots = (size_t)((w->n + 15) / 16) * (size_t)(w->k / KVS_QK);
    const int q_streams = w->type == KVS_TYPE_Q8_0 ? 8 : w->type == KVS_TYPE_Q5_0 ? 5 : 4;
    return (kvs_wtiles){(const uint8_t *)w->tiles, slots * 64, q_streams, w->type == KVS_TYPE_Q4_1 ? 64 : 32};
}

size_t kvs_wmat_tiles_bytes(const kvs_wmat *w) {
    if (!tiled_type(w->type) || w->n <= 0 || w->k % KVS_QK) return 0;
    const kvs_wtiles t = kvs_wtiles_of(w);
    return t.stride / 64 * (size_t)(64 * t.q_streams + t.scale_bytes);
}

/* Block b of the GGUF rows: | f16 d | (Q4_1 f16 m, Q5_0 u32 qh) | qs |:
 * qs[4r..4r+3] of each row into stream r (Q5_0: qh into stream 4), d (and
 * m) into the scale stream. */
void kvs_wmat_tiles_to(kvs_wmat *w, void *dst) {
    const int nb = w->k / KVS_QK, np = (w->n + 15) / 16, bs = (int)(w->row_bytes / (size_t)nb);
    memset(dst, 0, kvs_wmat_tiles_bytes(w));
    w->tiles = dst;
    const kvs_wtiles t = kvs_wtiles_of(w);
    const int q5 = w->type == KVS_TYPE_Q5_0, q_at = w->type == KVS_TYPE_Q4_1 ? 4 : q5 ? 6 : 2; /* qs after d .. */
    const int qs_streams = q5 ? 4 : t.q_streams;
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            const size_t s = (size_t)p * nb + b;
            uint8_t *tq = (uint8_t *)kvs_wtiles_q(&t, s), *td = (uint8_t *)kvs_wtiles_d(&t, s);
            for (int n = 0; n < 16 && 16 * p + n < w->n; n++) {
                const uint8_t *blk = (const uint8_t *)w->data + (size_t)(16 * p + n) * w->row_bytes + (size_t)b * bs;
                memcpy(td + 2 * n, blk, 2); /* f16 d */
                if (w->type == KVS_TYPE_Q4_1) memcpy(td + 32 + 2 * n, blk + 2, 2); /* f16 m */
                if (q5) memcpy(tq + 4 * t.stride + 4 * n, blk + 2, 4); /* qh */
                for (int r = 0; r < qs_streams; r++) memcpy(tq + r * t.stride + 4 * n, blk + q_at + 4 * r, 4);
            }
        }
}

/* Q8_0, Q4_0, Q4_1 and Q5_0 get their tiles (kvs_wmat_tiles_to) in place
 * of the copy: the AMX batch and prefill paths read them with plain loads instead
 * of gathering the blocks of 16 rows (matmul_amx_batch_nib.c). */
size_t kvs_wmat_rows_copy_bytes(const kvs_wmat *w) {
    if (!rows_copied_in_arena(w)) return 0;
    return tiled_type(w->type) ? kvs_wmat_tiles_bytes(w) : w->row_bytes * (size_t)w->n;
}

void kvs_wmat_rows_copy_place(kvs_wmat *w, void *dst) {
    if (!rows_copied_in_arena(w)) return;
    if (tiled_type(w->type)) {
        kvs_wmat_tiles_to(w, dst);
        return;
    }
    memcpy(dst, w->data, w->row_bytes * (size_t)w->n);
    w->data = dst;
}

int kvs_wmat_arena_replaces_source(const kvs_wmat *w) {
    if (kvs_kernels_cpu_level() < 2 || !kvs_kernels_simd_allowed() || pack_off_by_env()) return 0;
    return !kvs_kernels_amx() || rows_copied_in_arena(w) ||
           (!kvs_amx_prefill_type(w->type) && !kvs_amx_batch_type(w->type));
}

void kvs_wmat_pack_to(kvs_wmat *w, void *dst) {
    uint8_t *p = dst;
    const int q5 = w->type == KVS_TYPE_Q5_0 || w->type == KVS_TYPE_Q5_1;
    const int tiled = q5 ? 0 : w->n & ~(KVS_PACK_TILE - 1); /* rows in whole tiles */
    for (int j = 0; j < tiled; j += KVS_PACK_TILE)
        pack_tile(w->type, w->k, w->row_bytes, (const uint8_t *)w->data + (size_t)j * w->row_bytes,
                  p + (size_t)j * w->row_bytes);
    for (int j = tiled; j < w->n; j++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)j * w->row_bytes;
        if (q5) pack_row_q5(w->type == KVS_TYPE_Q5_1, w->k, src, p + (size_t)j * w->row_bytes);
        else pack_row(w->type, w->k, src, p + (size_t)j * w->row_bytes);
    }
    w->packed = p;
}

void *kvs_huge_alloc(size_t bytes) {
    /* 2 MiB pages where the kernel allows it (THP "madvise" mode is common):
     * a decode step streams every byte once, and with 4 KiB pages each page
     * costs a TLB miss and stops the hardware prefetcher. */
    const size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 64, rounded = (bytes + align - 1) & ~(align - 1);
    void *p = aligned_alloc(align, rounded);
    if (p && align == HUGE_PAGE) (void)madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

#define FAR_PF_ROWS 48 /* gemma3 decode, one Xeon thread: 48 and 96 rows measured alike */

#define FAR_PROBE_MIN ((size_t)32 << 20) /* smaller: any last-level cache of an AVX-512 CPU holds it */

/* KVS_FAR_PREFETCH where set and not empty, else NULL. */
static const char *far_prefetch_env(void) {
    const char *e = getenv("KVS_FAR_PREFETCH");
    return e && *e ? e : NULL;
}

int kvs_far_prefetch_forced(void) { return far_prefetch_env() != NULL; }

int kvs_far_prefetch_rows(const kvs_mem_span *spans, int n) {
    const char *forced = far_prefetch_env();
    if (forced) return *forced == '0' ? 0 : FAR_PF_ROWS;
    size_t weight_bytes = 0;
    for (int i = 0; i < n; i++) weight_bytes += spans[i].n;
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE); /* 0 or -1 where the C library cannot tell */
    if (llc > 0 && weight_bytes > (size_t)llc / 4 * 3) return FAR_PF_ROWS;
    if (weight_bytes < FAR_PROBE_MIN) return 0;
    return kvs_spans_stay_cached(spans, n) ? 0 : FAR_PF_ROWS;
}

int kvs_wmat_pack(kvs_wmat *w, int force) {
    const size_t bytes = kvs_wmat_packed_bytes(w, force);
    if (!bytes) return 0;
    uint8_t *p = kvs_huge_alloc(bytes);
    if (!p) return -1;
    kvs_wmat_pack_to(w, p);
    return 0;
}

void kvs_wmat_unpack(kvs_wmat *w) {
    free((void *)w->packed);
    w->packed = NULL;
}
