/*
 * Pieces shared by the AMX matmul files (matmul_amx.c: prefill, bf16 tiles;
 * matmul_amx_batch.c, matmul_amx_batch_nib.c: a batch of streams, int8
 * tiles) and the roofline probe's tile ceilings (bench/roofline_probe.c).
 * Types, declarations and a macro only, so any file may include it; the
 * tile instructions themselves need an AMX target region.
 */
#ifndef KVS_KERNELS_AMX_UTIL_H
#define KVS_KERNELS_AMX_UTIL_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* The tile configuration (ldtilecfg's 64 bytes, palette 1). */
typedef struct amx_tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* A configuration of palette 1 with all 8 tiles 16 rows x 64 bytes (the
 * callers then narrow the tiles they use otherwise). */
static inline void amx_config_square(amx_tilecfg *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg->rows[t] = 16;
        cfg->colsb[t] = 64;
    }
}

/* ldtilecfg of cfg. Not _tile_loadconfig: GCC 12's builtin does not tell
 * the optimizer that it reads all 64 bytes, and where the configuring
 * function is inlined, dead-store elimination dropped the colsb stores (a
 * zero config: #GP, seen as SIGSEGV; llama.cpp builds with -fno-dse for the
 * same bug). The asm's memory operand is the whole struct, so every store
 * stays. */
static inline void amx_load_config(const amx_tilecfg *cfg) {
#if defined(__x86_64__)
    __asm__ __volatile__("ldtilecfg %0" : : "m"(*cfg));
#else
    (void)cfg;
#endif
}

/* Floats of a thread's AMX tile-result scratch: matmul_amx.c's two row-tile
 * buffers (16 rows x 2 halves x every block's 16 columns, plus 17 lines). */
#define KVS_AMX_CB_PAD (17 * 16)
#define KVS_AMX_CBUF_FLOATS (2 * (16 * 2 * (KVS_AMX_MAX_K / KVS_QK) * 16 + KVS_AMX_CB_PAD))

/* The calling thread's scratch of KVS_AMX_CBUF_FLOATS floats (64-byte
 * aligned; allocated on the thread's first AMX call, ~410 KB with the
 * prefill path's weight panel, freed when the thread exits), or NULL if it
 * cannot be allocated. */
float *kvs_amx_thread_cbuf(void);

/* A batch path's matmul_cols (name) running cols(c, j0, j1, scratch) on the
 * thread's scratch, or, only if that cannot be allocated, on `floats`
 * floats of stack (the activations are already in the path's layout, so
 * another ISA cannot take over). */
#define KVS_AMX_COLS_ON_SCRATCH(name, cols, floats)                                                  \
    _Static_assert((floats) <= KVS_AMX_CBUF_FLOATS, "the batch scratch fits the AMX thread scratch"); \
    __attribute__((noinline)) static void name##_on_stack(const kvs_mm_call *c, int j0, int j1) {    \
        float s[floats] __attribute__((aligned(64)));                                                \
        cols(c, j0, j1, s);                                                                          \
    }                                                                                                \
    static void name(const kvs_mm_call *c, int j0, int j1) {                                         \
        float *s = kvs_amx_thread_cbuf();                                                            \
        if (s) cols(c, j0, j1, s);                                                                   \
        else name##_on_stack(c, j0, j1);                                                             \
    }

#endif
