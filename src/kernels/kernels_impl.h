/*
 * Internals shared by the kernel files: the per-ISA function table, the
 * scalar references, and the definition of the arithmetic every path must
 * reproduce bit for bit.
 *
 * The canonical arithmetic (all ISA paths produce the same bits as the scalar
 * reference; tests check memcmp equality):
 *
 *   quantized w:  x row -> blocks of 32, two-level 8-bit (quant.h):
 *                 amax = max|x|, d = amax / 127, id = d >= FLT_MIN ? 1/d : 0
 *                 (a block below ~1.5e-36 rounds to 0, 1/d would overflow),
 *                 v = x * id, hi = round_half_even(v),
 *                 lo = clamp(round_half_even(v * 256) - 256 hi, +-127),
 *                 Q = 256 hi + lo, dx = d / 256, sx = dx * sum Q.
 *                 i_b = exact integer dot of weight block b with Q (any ISA
 *                 may form it as 256 * dot(w, hi) + dot(w, lo): integers
 *                 are exact, so only the float steps below are ordered);
 *                 nf = 16 * (nb / 16).
 *                 blocks b < nf, c = b % 16:
 *                     acc[c] = fma((float)i_b, dw * dx, acc[c]);
 *                     Q4_1 only: acc[c] = fma(mw, sx, acc[c]);
 *                 y = kvs_tree16(acc);
 *                 tail blocks b = nf .. nb-1, in order:
 *                     y = fma((float)i_b, dw * dx, y); Q4_1: y = fma(mw, sx, y).
 *   float w:      acc[e % 16] = fma(x[e], w[e], acc[e % 16]) for e = 0..k-1,
 *                 y = kvs_tree16(acc).
 *   attention:    see attention_ref.c.
 */
#ifndef KVS_KERNELS_IMPL_H
#define KVS_KERNELS_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

/* Arguments of one matmul call, shared by its threads. */
typedef struct kvs_mm_call {
    const kvs_wmat *w;
    const float *x;    /* (m, k) */
    const uint8_t *xq; /* (m, xq_row) quantized x (full groups), NULL for float w */
    size_t xq_row;     /* bytes per quantized row */
    const uint8_t *xq_tail; /* ((m + 3) / 4, quad bytes) tail blocks by row quads */
    size_t xq_quad;    /* bytes per quad */
    /* The rows again in the form a path's kernels read, written by its
     * quantizer (kvs_xn_bytes(k) each, row i at xn + i * xn_row), else NULL:
     * AVX2, every m and quantized type: int16 Q (kvs_avx2_xn_row). */
    uint8_t *xn;
    size_t xn_row;
    int m;
    float *y;          /* (m, n) */
} kvs_mm_call;

typedef struct kvs_attn_call {
    float *out;            /* (m, n_head, head_dim) */
    const float *q;        /* (m, n_head, head_dim) */
    const int32_t *pos;    /* (m) */
    int m;
    const void *k, *v;     /* (n_kv_head, n_ctx, head_dim) */
    int kv_type;
    int n_head, n_kv_head, head_dim, n_ctx;
    float scale;
    int window;            /* 0: all slots 0..pos; else slots (pos - window, pos] */
    kvs_attn_recal recal;  /* hi <= lo: none */
    float *work;           /* per thread: kvs_attn_thread_floats(n_ctx) */
    int n_threads;         /* of the pool that runs the call's units */
    /* Q8 prefill: kv head staged_g's keys and values from slot staged_lo
     * (a multiple of 16) on, staged once for all of its units in the ISA's
     * layout (kvs_isa.attention_stage_q8) in the shared region after the
     * threads' scratch (staged: its start; kvs_attn_q8_staged_at); NULL:
     * none, each unit stages its own. */
    uint8_t *staged;
    int staged_g, staged_lo;
    kvs_attn_layout layout; /* data NULL: none */
} kvs_attn_call;

/* Bytes of one K / V element: kv_type 0 is F16, else F32 (the float types;
 * Q8 rows are kvs_kv_row_bytes). */
static inline size_t kvs_attn_elem_bytes(const kvs_attn_call *c) { return c->kv_type == 0 ? 2 : 4; }

/* round_half_even(v) clamped to [-top, top] (top an integer), 0 for NaN:
 * the level of one element in the 8-bit KV rows (top 127) and the 16-bit
 * attention weights (top 32767, attention_q8_ref.c). Clamping before or
 * after the rounding is the same; before, no float is out of int range.
 * cvtps2dq rounds the same way. */
static inline int32_t kvs_level_of(float v, float top) {
    if (!(v == v)) return 0;
    return (int32_t)nearbyintf(v > top ? top : v < -top ? -top : v);
}

/* Q8 attention (attention_q8_ref.c): P.V block sums span this many absolute
 * slots. */
#define KVS_ATTN_Q8_PV_BLOCK 512
#define KVS_ATTN_Q8_MAX_DIM KVS_KV_Q8_MAX_HEAD_DIM
/* The scale d of a Q8 KV row (kernels.h: after its D levels). */
static inline float kvs_q8_row_scale(const int8_t *row, int D) {
    float d;
    memcpy(&d, row + D, sizeof d);
    return d;
}
void kvs_attention_unit_q8_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);
/* A Q8 attention row's bound on its weights w_j = e_j vd_j
 * (attention_q8_ref.c): its largest value scale vdmax, times the
 * recalibration's factor f where f > 1 (e_j <= 1, or <= f). */
static inline float kvs_attn_q8_weight_top(float vdmax, float f) { return f > 1.0f ? vdmax * f : vdmax; }
/* The largest of m and the value scales of slots [a, b) (slot j's the
 * float at vds + j * stride) by the reference's rule (a larger scale
 * replaces it, NaN and -0 never do: the maximum is order-free, so scans
 * chain and a SIMD one gives the same float). m >= +0. */
typedef float (*kvs_attn_q8_vd_scan_fn)(const uint8_t *vds, size_t stride, int a, int b, float m);
/* Each row r < rows's attention_q8_ref.c vdmax: the largest value scale
 * over its keys [lo[r], n[r]). One scan of the keys all rows see, then each
 * row's own ends, so a unit pays ~one scan of its keys, not one a row.
 * scan: a faster kvs_attn_q8_vd_scan_fn for this vds and stride, or NULL. */
void kvs_attn_q8_vd_max(const uint8_t *vds, size_t stride, const int *lo, const int *n, int rows, float *out,
                        kvs_attn_q8_vd_scan_fn scan);
#if defined(__x86_64__)
void kvs_attention_unit_q8_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work);
void kvs_attention_stage_q8_avx512(const kvs_attn_call *c, int j0, int j1);
void kvs_attention_layout_q8_avx512(const void *k, const void *v, int n_kv_head, int head_dim, int n_ctx, int from,
                                    int to, void *data);
int kvs_attention_split_units_q8_avx512(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_q8_avx512(const kvs_attn_call *c, int phase, int u, float *work);
void kvs_attention_unit_q8_avx2(const kvs_attn_call *c, int t0, int t1, int g, float *work);
int kvs_attention_split_units_q8_avx2(const kvs_attn_call *c, int phase);
void kvs_attention_split_unit_q8_avx2(const kvs_attn_call *c, int phase, int u, float *work);
#endif

/* Visible slots [lo, n) of a query at position pos (attention_ref.c). lo
 * rounded down to 16 is where the SIMD paths start their key loops. */
static inline int kvs_attn_n(const kvs_attn_call *c, int32_t pos) {
    int n = pos + 1;
    return n > c->n_ctx ? c->n_ctx : n < 1 ? 1 : n;
}
static inline int kvs_attn_lo(const kvs_attn_call *c, int n) {
    return c->window > 0 && n > c->window ? n - c->window : 0;
}

/* 1 if the query at pos is recalibrated (kvs_attn_recal). */
static inline int kvs_attn_recal_row(const kvs_attn_call *c, int32_t pos) {
    return c->recal.hi > c->recal.lo && pos >= c->recal.hi;
}
/* The factor f a recalibrated row multiplies its document weights by, from
 * its score maximum mx and the documents' summed weight pd (relative to mx):
 * f = e^((s - 1) (mx + ln pd)), so that f pd = (e^mx pd)^s / e^mx. One scalar
 * function for every path (attention_ref.c). */
float kvs_attn_recal_factor(float mx, float pd, float s);
/* The reference's softmax of one row's scores s[lo, n) with maximum mx, in
 * place (e_j = expf(s_j - mx), recalibrated when rc: the row's position >=
 * recal.hi); returns the sum S (attention_ref.c) and, where factor is not
 * NULL, the recalibration's factor f there (1 where none). Shared by the
 * float (kvs_expf_ref) and Q8 (kvs_exp_q8_ref) references. */
float kvs_attn_softmax_ref(const kvs_attn_call *c, float *s, int lo, int n, float mx, int rc, float (*exp_fn)(float),
                           float *factor);
/* The Q8 attention's exp of x <= 0 (attention_q8_ref.c): 2^y, y = x log2 e,
 * as 2^f (kvs_exp_q8_poly, f = y - floor(y)) times 2^floor(y); 0 for -inf,
 * NaN and y <= -300. */
float kvs_exp_q8_poly(float f);
float kvs_exp_q8_ref(float x);

/* Packed Q4_0 / Q4_1 / Q8_0 matrices (pack.c): the rows of each whole tile
 * of KVS_PACK_TILE rows (8a .. 8a + 7, all < n) hold the tile's rows' full
 * groups back to back, then the tile's tail blocks transposed (row o in lane
 * o); rows past the last whole tile keep their own full groups, then their
 * tail blocks in GGUF layout, at row j * row_bytes. A call of the packed
 * kernels covers whole tiles (column chunks are multiples of 16). */
#define KVS_PACK_TILE 8
static inline size_t kvs_packed_groups_bytes(const kvs_wmat *w) {
    return (size_t)kvs_xq_groups(w->k) * KVS_XQ_GROUP * (size_t)kvs_q_block_bytes(w->type);
}
static inline int kvs_packed_tiled(const kvs_wmat *w, int j) { return j < (w->n & ~(KVS_PACK_TILE - 1)); }
/* Row j's full groups. */
static inline const uint8_t *kvs_packed_row(const kvs_wmat *w, int j) {
    const uint8_t *p = (const uint8_t *)w->packed;
    if (!kvs_packed_tiled(w, j)) return p + (size_t)j * w->row_bytes;
    return p + (size_t)(j & ~(KVS_PACK_TILE - 1)) * w->row_bytes +
           (size_t)(j & (KVS_PACK_TILE - 1)) * kvs_packed_groups_bytes(w);
}
/* The transposed tail blocks of the whole tile that starts at row j8. */
static inline const uint8_t *kvs_packed_tile_tail(const kvs_wmat *w, int j8) {
    return (const uint8_t *)w->packed + (size_t)j8 * w->row_bytes + KVS_PACK_TILE * kvs_packed_groups_bytes(w);
}

/* Output columns per chunk of a decode step (m == 1) or of a few rows (a
 * batch of streams) of an n-column matrix on nth threads: one run of
 * columns per thread (a multiple of 16: whole tiles), so that each thread
 * streams its rows from start to end with its kernels' prefetch ahead and
 * the hardware prefetchers on them, and takes one chunk off the pool's
 * shared counter per matrix. About 8 chunks per thread before (each chunk
 * starting unprefetched, ~16 counter increments crossing cores per matrix):
 * SmolLM2 on 2 Xeon threads, old and new builds alternating, decode Q4_1
 * 384-385 -> 423-426 tok/s, Q4_0 416-418 -> 451-456, Q8_0 244-254 ->
 * 270-291, F16 98-109 -> 112-116; 8 streams F16 538-548 -> 584-590, Q4_1
 * 874-887 -> 893-901, Q8_0 743-747 -> 754-772; gemma3 8 streams 334-336 ->
 * 364-366; 1 thread unchanged. */
static inline int kvs_decode_cols(int n, int nth) {
    if (nth < 1) nth = 1;
    const int c = ((n + nth - 1) / nth + 15) & ~15;
    return c > 16 ? c : 16; /* never 0 (callers divide by it) */
}

/* Row blocks of a matmul of m activation rows on nth threads: one a thread
 * for prefill (m >= 32 rows a thread), else 1 (dispatch.c mm_rows says why;
 * kquant.c kq_rows follows it). */
static inline int kvs_prefill_row_blocks(int m, int nth) { return nth > 1 && m >= 32 * nth ? nth : 1; }

/* AVX2 needs 64 bytes per full-group block and 80 per tail block. */
static inline size_t kvs_xn_bytes(int k) { return (size_t)(k / KVS_QK) * 80; }

/* AMX matmul (matmul_amx.c): Q4_0 / Q4_1 / Q5_0 / Q4_K / Q8_0 weights, calls
 * of >= KVS_AMX_MIN_M rows and k <= KVS_AMX_MAX_K (the size of its per-thread
 * weight repack). Its activation layout "xa" replaces xq (xq_tail NULL): per
 * row, natural element order, the levels (kvs_xa_level_bytes a block: bf16
 * 256*hi[nb][32] then bf16 lo[nb][32]; Q8_0, whose tiles are int8, per
 * block int8 hi[32] then int8 lo[32]), float dx[nb] (the scale of Q), float
 * sx[nb] (dx * sum Q); rows padded to a multiple of 16 (zero) so every tile
 * load reads 16 rows. */
#define KVS_AMX_MIN_M 32 /* below, the per-call weight repack outweighs the gain (measured) */
#define KVS_AMX_MAX_K 2048
static inline int kvs_xa_int8(int type) { return type == KVS_TYPE_Q8_0; } /* else bf16 levels */
static inline size_t kvs_xa_level_bytes(int type) { return kvs_xa_int8(type) ? 64 : 128; }
static inline size_t kvs_xa_row_bytes(int type, int k) {
    return ((size_t)(k / KVS_QK) * (kvs_xa_level_bytes(type) + 8) + 63) & ~(size_t)63;
}
static inline size_t kvs_xa_bytes(int type, int k, int m) {
    return (size_t)((m + 15) & ~15) * kvs_xa_row_bytes(type, k);
}
static inline float *kvs_xa_dx(uint8_t *row, int type, int nb) {
    return (float *)(row + (size_t)nb * kvs_xa_level_bytes(type));
}
static inline float *kvs_xa_sx(uint8_t *row, int type, int nb) {
    return (float *)(row + (size_t)nb * (kvs_xa_level_bytes(type) + 4));
}

/* AMX for a batch of streams (matmul_amx_batch.c): Q8_0 weights, calls of
 * KVS_AMX_BATCH_MIN_M..KVS_AMX_BATCH_MAX_M rows and k <= KVS_AMX_MAX_K, on
 * the GGUF rows (w->data; a model's arena gives Q8_0 its tiles instead, for
 * matmul_amx_batch_nib.c). Its activation layout "xb" replaces xq (xq_row
 * 0, xq_tail NULL): per block b a B tile of KVS_XB_TILE bytes (8 rows of
 * 16 dwords: row r = elements 4r..4r+3, column i the hi level of row i,
 * column 8 + i its lo level; rows past m zero), then per block 16 floats
 * (dx of rows 0..7, twice). */
#ifndef KVS_AMX_BATCH_MIN_M
/* below, AVX-512's few_rows / many_rows are faster: the tiles and the float
 * steps of a panel cost the same at any m (AMX Xeon, tok/s AVX-512 / AMX
 * tiles, in passes: SmolLM2 Q8_0 4 streams 287 / 251 at 1 thread, 5
 * streams 285 / 305 and 507 / 534 at 2, 6 streams 321 / 351 and 589 / 616;
 * gemma3 5 streams 143 / 155 and 262 / 279, 6 streams 157 / 184 and 294 /
 * 335) */
#define KVS_AMX_BATCH_MIN_M 5
#endif
#ifndef KVS_AMX_BATCH_Q4_MIN_M
/* Q4_0 / Q4_1 (matmul_amx_batch_nib.c): many_rows on their packed rows
 * stays faster up to 6 rows (SmolLM2 Q4_1, its Q8_0 head on tiles in both:
 * 5 streams 349 / 329 tok/s at 1 thread, 631 / 568 at 2; 6 streams 384 /
 * 383, 684 / 667) */
#define KVS_AMX_BATCH_Q4_MIN_M 7
#endif
#define KVS_AMX_BATCH_MAX_M 8 /* hi and lo of 8 rows fill a tile's 16 columns */
#define KVS_XB_TILE 512
static inline size_t kvs_xb_bytes(int k) { return (size_t)(k / KVS_QK) * (KVS_XB_TILE + 64); }
static inline float *kvs_xb_dx(uint8_t *xb, int nb) { return (float *)(xb + (size_t)nb * KVS_XB_TILE); }

/* AMX for a batch of streams on Q4_0 / Q4_1 / Q5_0 / Q4_K
 * (matmul_amx_batch_nib.c), the same calls on the GGUF rows. Its activation
 * layout "xc" (kvs_xb_bytes long) replaces xq: per block b an A tile of
 * KVS_XB_TILE bytes (16 rows of 32 bytes, natural element order: row i the
 * hi level of activation row i, row 8 + i its lo level; rows past m zero),
 * then per block the 8 rows' dx, then per block their sx. */
static inline float *kvs_xc_dx(uint8_t *xc, int nb) { return (float *)(xc + (size_t)nb * KVS_XB_TILE); }
static inline float *kvs_xc_sx(uint8_t *xc, int nb) { return kvs_xc_dx(xc, nb) + (size_t)nb * KVS_AMX_BATCH_MAX_M; }

/* 1 for the weight types whose GGUF rows (kvs_wmat.data) the AMX prefill
 * path (matmul_amx.c) / the AMX batch paths (matmul_amx_batch.c: Q8_0,
 * matmul_amx_batch_nib.c: Q4_0, Q4_1, Q5_0, Q4_K) read:
 * dispatch.c's choice, and the model arena's (pack.c: those rows on 2 MiB
 * pages, and which source pages can go). */
int kvs_amx_prefill_type(int type);

/* Measured choice between two paths of the same bits (path_tuner.c). One
 * shape's record: calls, and of path 0 (AMX) and path 1 (AVX-512) the
 * samples, the last KVS_TUNE_WINDOW calls' costs (milliseconds per
 * multiply-add; call i at i % KVS_TUNE_WINDOW) and the cost, their lowest. */
#define KVS_TUNE_WINDOW 4
typedef struct kvs_tune_stats {
    double cost[2];
    double recent[2][KVS_TUNE_WINDOW];
    int samples[2];
    unsigned calls;
} kvs_tune_stats;
int kvs_tune_choose(const kvs_tune_stats *s);                  /* the path of the next call */
void kvs_tune_update(kvs_tune_stats *s, int path, double cost); /* after a call of that path */
/* The path for a call of m rows on nth threads on a matrix of this type and
 * shape (*slot: its record, -1 if the table is full: path 0), and the
 * call's time afterwards. */
int kvs_path_tune_pick(int type, int k, int n, int m, int nth, int *slot);
void kvs_path_tune_record(int slot, int path, double ms, double madds); /* ms: kvs_now_ms */
/* A copy of that shape's record (-1: none yet). */
int kvs_path_tune_stats_of(int type, int k, int n, int m, int nth, kvs_tune_stats *out);
int kvs_amx_batch_type(int type);

/* Query rows the attention kernels handle at once, and per-thread scratch. */
#define KVS_ATTN_ROWS 48
#define KVS_ATTN_F_TILE_FLOATS 16384 /* the float units' staged f32 K/V tile */
/* The stage area: the float units' tile, or the Q8 units' (whole PV blocks
 * of 2 D bytes a key at the largest head dim: the AVX2 unit's value pairs) */
#define KVS_ATTN_STAGE_FLOATS (KVS_ATTN_Q8_PV_BLOCK * 2 * KVS_ATTN_Q8_MAX_DIM / 4)
_Static_assert(KVS_ATTN_STAGE_FLOATS >= KVS_ATTN_F_TILE_FLOATS, "the stage area holds a float tile");
/* Keys per staged tile of the Q8 SIMD units: one PV block at every head
 * dim (the stage area holds a block of the AVX2 unit's value pairs, 2 D
 * bytes a key, at D = 256; AVX-512's 4-key value words take D, its staged
 * keys D rounded up to 64). More would not pay: the score pass gained
 * nothing past 512 keys a tile. */
static inline int kvs_attn_q8_tile_keys(int D) {
    (void)D;
    return KVS_ATTN_Q8_PV_BLOCK;
}
/* The Q8 SIMD units' walk over keys: the end of the P.V block (absolute
 * slots of KVS_ATTN_Q8_PV_BLOCK) holding key j, at most end; and the end of
 * the value tile from j0 (JT keys) as whole pairs, at most past maxall. */
static inline int kvs_attn_q8_block_end(int j, int end) {
    const int b = (j / KVS_ATTN_Q8_PV_BLOCK + 1) * KVS_ATTN_Q8_PV_BLOCK;
    return b < end ? b : end;
}
static inline int kvs_attn_q8_pairs_end(int j0, int JT, int maxall) {
    return (j0 + JT < maxall ? j0 + JT : maxall + 1) & ~1;
}
size_t kvs_attn_thread_floats(int n_ctx);
/* The shapes the Q8 SIMD units take (others go to the reference unit):
 * head_dim a multiple of 16 up to the Q8 limit, at most KVS_ATTN_ROWS rows.
 * AVX-512's lays units of KVS_ATTN_Q8_PREFILL_ROWS rows or more out as the
 * prefill (lane = row, reading a staged kv head where there is one), fewer
 * as the decode (lane = key / dim). */
#define KVS_ATTN_Q8_PREFILL_ROWS 8
static inline int kvs_attn_q8_simd_shape(int D, int rows) {
    return D % 16 == 0 && D <= KVS_ATTN_Q8_MAX_DIM && rows <= KVS_ATTN_ROWS;
}
/* The Q8 staged keys and values of one kv head (the region after the
 * threads' scratch): per slot, a key's levels rounded up to 64 bytes, then
 * a value's D, then the keys' scales and the values' scales as two float
 * arrays; slots up to n_ctx + 64 (a tile's round-up past n_ctx). One
 * head at a time: staging them all at once (3 MB at 8192 slots for SmolLM2)
 * was 0.91-0.99x one at a time (the scores' rows, 1.5 MB a unit there,
 * already fill the L2). The scales have arrays of their own because every
 * unit reads each slot's two: from the cache rows that was a line of its
 * own per key and scale (68-byte rows), the score pass's largest stall. */
static inline size_t kvs_attn_q8_staged_slots(int n_ctx) { return (size_t)n_ctx + 64; }
static inline size_t kvs_attn_q8_staged_bytes(int n_ctx) {
    return kvs_attn_q8_staged_slots(n_ctx) * (2 * KVS_ATTN_Q8_MAX_DIM + 2 * sizeof(float));
}
/* Bytes a slot of the staged keys: D rounded up to 64. */
static inline size_t kvs_attn_q8_staged_key_bytes(int D) { return (size_t)(D + 63) / 64 * 64; }
/* The staged keys (values 0) or values (1) in the call's region. */
static inline uint8_t *kvs_attn_q8_staged_at(const kvs_attn_call *c, int values) {
    return c->staged + (values ? kvs_attn_q8_staged_slots(c->n_ctx) * kvs_attn_q8_staged_key_bytes(c->head_dim) : 0);
}
/* The staged keys' (values 0) or values' (1) scales: slot j's at
 * [j - c->staged_lo]. */
static inline float *kvs_attn_q8_staged_scales(const kvs_attn_call *c, int values) {
    const size_t slots = kvs_attn_q8_staged_slots(c->n_ctx);
    return (float *)(c->staged + slots * 2 * KVS_ATTN_Q8_MAX_DIM) + (values ? slots : 0);
}
/* Floats per score row in a thread's scratch: n_ctx, at least 16 spare
 * (SIMD tails; the decode splits keep a row's 1 / sum, and on Q8 rows its pd
 * and flags, in the last 1 to 3), a multiple of 16. */
static inline size_t kvs_attn_score_stride(int n_ctx) { return (size_t)(n_ctx + 16 + 15) & ~(size_t)15; }

typedef struct kvs_isa {
    const char *name;
    /* Quantizes rows [i0, i1) of x into xq for weights of type wtype. */
    void (*quantize_rows)(const kvs_mm_call *c, int i0, int i1);
    /* y[0..m)[j0..j1) for all rows of the call. */
    void (*matmul_cols)(const kvs_mm_call *c, int j0, int j1);
    /* One unit of attention work: query tokens [t0, t1) of kv head g. */
    void (*attention_unit)(const kvs_attn_call *c, int t0, int t1, int g, float *work);
    /* The same for calls with recalibrated rows (a path without its own
     * takes another path's: the bits are the same). */
    void (*attention_unit_recal)(const kvs_attn_call *c, int t0, int t1, int g, float *work);
    /* The same on Q8 KV rows, recalibrated rows included (NULL: the scalar
     * reference's; the bits are the same). */
    void (*attention_unit_q8)(const kvs_attn_call *c, int t0, int t1, int g, float *work);
    /* Optional (NULL: units only): one decode token's attention in phases
     * 0, 1, 2 that split a kv head's keys, rows and dims across threads, for
     * calls whose units would leave threads idle (kvs_attention_window).
     * split_units: the units of a phase, 0 when the call does not suit;
     * split_unit runs unit u of a phase (work: the thread's scratch; the
     * phases share thread 0's score rows at c->work). The bits are the
     * units'. */
    int (*attention_split_units)(const kvs_attn_call *c, int phase);
    void (*attention_split_unit)(const kvs_attn_call *c, int phase, int u, float *work);
    /* Also split where the kv heads do not divide evenly among the threads
     * (not fewer), from this many keys on; 0: never. */
    int attention_split_uneven_keys;
    /* The same on Q8 KV rows (NULL: no split), where phase 2's count may
     * also be -1: the call runs its units instead (a weight level came out
     * negative: a damaged cache, which those rerun exactly). */
    int (*attention_split_units_q8)(const kvs_attn_call *c, int phase);
    void (*attention_split_unit_q8)(const kvs_attn_call *c, int phase, int u, float *work);
    int attention_split_uneven_keys_q8;
    /* Optional (NULL: each Q8 unit stages its own tiles): stages keys and
     * values [j0, j1) (j0 - c->staged_lo a multiple of 16) of kv head
     * c->staged_g at kvs_attn_q8_staged_at, so that a prefill's units,
     * which all read every key, skip their own staging. */
    void (*attention_stage_q8)(const kvs_attn_call *c, int j0, int j1);
    /* Optional (NULL: the Q8 units read no decode layout): builds slots
     * [from, to) of kvs_attn_layout from rows k, v (kvs_attn_layout_build);
     * the ISA's Q8 decode then reads the slots c->layout holds from it. */
    void (*attention_layout_q8)(const void *k, const void *v, int n_kv_head, int head_dim, int n_ctx, int from,
                                int to, void *data);
} kvs_isa;

/* 0 scalar, 1 AVX2 + FMA + F16C, 2 AVX-512 (F, BW, VL, DQ, VNNI, VBMI). */
int kvs_kernels_cpu_level(void);
/* 1 if the CPU has AMX (tile, bf16) and Linux granted this process tile
 * data (asked once); AMX then runs when the ISA cap allows it. */
int kvs_kernels_amx_available(void);
/* 0 while KVS_FORCE_SCALAR / kvs_kernels_force_scalar(1) is in effect. */
int kvs_kernels_simd_allowed(void);

extern const kvs_isa kvs_isa_scalar;
#if defined(__x86_64__)
extern const kvs_isa kvs_isa_avx2;
extern const kvs_isa kvs_isa_avx512;
extern const kvs_isa kvs_isa_amx; /* matmul only; used by dispatch.c per call */
extern const kvs_isa kvs_isa_amx_batch; /* likewise */
extern const kvs_isa kvs_isa_amx_batch_nib; /* likewise */
/* AVX-512's attention unit, which the AMX tables (matmul only) name too. */
void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work);
/* AVX2 on packed weights (matmul_avx2_packed.c): columns [j0, j1) of a call
 * whose w->packed is set; returns 0 (nothing done) otherwise. */
int kvs_avx2_matmul_packed(const kvs_mm_call *c, int j0, int j1);
/* Writes row i of c->xn for the packed kernels (after quantizing row i). */
void kvs_avx2_xn_row(const kvs_mm_call *c, int i);
#endif

/* One block of 32 quantized (quant.h): hi and lo bytes + offset (128 for
 * Q8_0 weights, else 0) in natural order, sum Q; returns the scale of Q. */
typedef float (*kvs_xq_block_fn)(const float *xb, int offset, uint8_t hi[KVS_QK], uint8_t lo[KVS_QK], int32_t *sum);
/* Row x quantized block by block with quantize, laid out as quant.h says
 * (full groups at xq, tail blocks in quad at row sub): one layout for every
 * ISA's block quantizer. */
void kvs_quantize_row_layout(kvs_xq_block_fn quantize, const float *x, int k, int wtype, uint8_t *xq,
                             uint8_t *quad, int sub);
/* Rows [i0, i1) of a call's x into its xq (kvs_quantize_row_layout each). */
void kvs_quantize_rows_with(kvs_xq_block_fn quantize, const kvs_mm_call *c, int i0, int i1);

/* The SIMD paths' Q8_0 weight vector r (elements 4r..4r+3) pairs with xq
 * vec xq_of_q8[r]. */
static const int xq_of_q8[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* Scalar pieces reused by the SIMD paths for tails and unusual shapes. */
/* Row i of the call: its full groups at xq, its tail in quad at sub = i % 4. */
void kvs_quantize_row_ref(const float *x, int k, int wtype, uint8_t *xq, uint8_t *quad, int sub);
float kvs_dot_q_ref(const kvs_wmat *w, int j, const uint8_t *xq, const uint8_t *quad, int sub);
float kvs_dot_f_ref(const kvs_wmat *w, int j, const float *x);
int kvs_wtype_is_quant(int type);

/* Deterministic exp used by attention in every path: the same sequence of
 * float operations in scalar and SIMD code, ~1 ulp on [-87, 0]. */
float kvs_expf_ref(float x);

/* Activation row kernels: the scalar loops (the definition) and their AVX2
 * versions (act_avx2.c, the same bits). gelu_tanh(x) = x * sigmoid(2u),
 * 2u = x (K0 + K1 x^2): K0 = 2 sqrt(2/pi), K1 = 2 sqrt(2/pi) * 0.044715. */
#define KVS_GELU_K0 1.5957691216057308f
#define KVS_GELU_K1 0.0713548162726009f
void kvs_silu_mul_ref(float *gate, const float *up, int n);
void kvs_gelu_tanh_mul_ref(float *gate, const float *up, int n);
void kvs_silu_mul_avx2(float *gate, const float *up, int n);
void kvs_gelu_tanh_mul_avx2(float *gate, const float *up, int n);

#endif
