/*
 * Compute kernels. Every kernel has a scalar reference (src/kernels/<name>_ref.c) and
 * SIMD versions (AVX2, AVX-512/VNNI) selected at run time. All paths perform
 * the same float operations per output (kernels_impl.h defines the order), so
 * they agree with the reference bit for bit; tests compare with memcmp.
 *
 * Batch invariance (a hard rule): the bits a kernel produces for one token row
 * never depend on how many other rows are in the call, where the call starts,
 * or the thread count. Reductions along K run in a fixed order per output
 * element, and work is split across threads by whole output elements.
 * Since the ISA levels agree as well, KVS_FORCE_SCALAR=1 changes speed only.
 *
 * Threading: kernels take chunks with kvs_pool_for, so a worker that the OS
 * has not scheduled never holds the caller up.
 *
 * Nothing here allocates: callers size scratch with *_work_size() once.
 */
#ifndef KVS_KERNELS_H
#define KVS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kvstitch.h"

/* A weight matrix as stored in GGUF: n rows (output features) of k elements
 * (input features), each row contiguous and quantized along k. */
typedef struct kvs_wmat {
    const void *data; /* (n, row_bytes) */
    int type;         /* kvs_ggml_type */
    int n;            /* rows = output features */
    int k;            /* columns = input features */
    size_t row_bytes;
    /* NULL, or the same rows repacked for the kernels (kvs_wmat_pack; same
     * size, same bits out); owned by whoever packed it. */
    const void *packed;
    /* 0, or how many rows ahead the decode kernels also fetch into L2: for
     * weights that stream from DRAM (kvs_far_prefetch_rows). Speed only. */
    int far_rows;
    /* NULL, or (Q8_0, Q4_0, Q4_1, Q5_0) the rows as the AMX tiles take them
     * (kvs_wmat_tiles_to); owned by whoever placed them. */
    const void *tiles;
} kvs_wmat;

/* A range of memory: the bytes of one streamed matrix. */
typedef struct kvs_mem_span {
    const void *p;
    size_t n;
} kvs_mem_span;

/* far_rows for the matrices of a model (their bytes: spans[0 .. n)): the
 * distance where a decode step reads them from DRAM, else 0 (the cache
 * holds much of them and the extra prefetches cost: SmolLM2 Q4_1, 98 MB,
 * lost 5% on a Xeon with a 260 MB L3; Q8_0, 145 MB, 0 to -7%). From DRAM:
 * where they exceed 3/4 of the last-level cache (gemma3, 253 MB against
 * that Xeon's 260 MB L3, decodes 10-12% faster with it), and where they
 * fit by the size the CPU reports but a second pass finds them out of the
 * cache (kvs_spans_stay_cached; models of 32 MB and more): a Xeon VM whose
 * L3 reads as 480 MB, SmolLM2 decode Q8_0 85-87 -> 104 tok/s at 1 thread,
 * 186-198 -> 234 at 2, F16 41 -> 49-51 and 82-85 -> 100-101.
 * KVS_FAR_PREFETCH=0 / 1 forces it off / on (no probe). */
int kvs_far_prefetch_rows(const kvs_mem_span *spans, int n);
/* Whether KVS_FAR_PREFETCH forces that choice (then nothing checks it). */
int kvs_far_prefetch_forced(void);

/* 1 if the caches keep the spans from one pass over them to the next: a
 * second pass reads them at >= 0.62 of the rate of re-reading its last 8
 * MiB (the best of 2 tries). Reads every byte 2-3 times (~20 ms for 145
 * MB, ~40 for 270: cache_probe.c). */
int kvs_spans_stay_cached(const kvs_mem_span *spans, int n);

/* Repacks a Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 matrix into the layout the
 * AVX2 kernels stream (pack.c; the AVX-512 Q4_0 / Q4_1 / Q8_0 paths read it
 * too, and every SIMD CPU runs the AVX2 Q5 kernels) and sets w->packed;
 * results stay memcmp-equal to the unpacked path. Does nothing (returns 0,
 * packed stays NULL) for other types or, unless force, on the scalar path or
 * when the environment has KVS_PACK=0. Returns -1 if out of memory (w
 * unchanged). The copy doubles the matrix's memory (a model gives the GGUF
 * pages back where it can: kvs_wmat_arena_replaces_source);
 * kvs_wmat_unpack frees it. */
int kvs_wmat_pack(kvs_wmat *w, int force);
void kvs_wmat_unpack(kvs_wmat *w);
/* The same into memory the caller owns (one arena for a model's matrices:
 * its weights stream as one run of 2 MiB pages in the order a decode step
 * reads them): kvs_wmat_packed_bytes is the size kvs_wmat_pack would
 * allocate, 0 where it would not pack; kvs_wmat_pack_to fills dst (that
 * many bytes, 64-byte aligned) and points w->packed at it. The caller frees
 * dst (after setting packed to NULL), never kvs_wmat_unpack. */
size_t kvs_wmat_packed_bytes(const kvs_wmat *w, int force);
void kvs_wmat_pack_to(kvs_wmat *w, void *dst);
/* A model's arena (model/weights.c) holds, per streamed matrix, its packed
 * copy, or on the SIMD paths a plain copy of float weights (read as they
 * are, but then on 2 MiB pages in decode order): kvs_wmat_arena_bytes is
 * the size of that (0: the matrix stays where it is), kvs_wmat_arena_place
 * puts it at dst and points w->packed, or w->data for a copy, there. After
 * all of those, where AMX is on, a plain copy of the GGUF rows its batch
 * path streams (Q4_K; the packed copy stays for the other paths), for
 * Q8_0, Q4_0, Q4_1 and Q5_0 their tiles (kvs_wmat_tiles_to) instead:
 * kvs_wmat_rows_copy_bytes (0: none), kvs_wmat_rows_copy_place (points
 * w->data, or w->tiles, there). */
size_t kvs_wmat_arena_bytes(const kvs_wmat *w);
void kvs_wmat_arena_place(kvs_wmat *w, void *dst);
size_t kvs_wmat_rows_copy_bytes(const kvs_wmat *w);
void kvs_wmat_rows_copy_place(kvs_wmat *w, void *dst);
/* Q8_0 / Q4_0 / Q4_1 / Q5_0 rows as the AMX paths' B operand, which the
 * arena holds instead of a plain copy of the rows
 * (kvs_wmat_rows_copy_place). Slot s = panel p of 16 rows (the last one's
 * missing rows zero) x nb + block b. Its quants lie in q sequential streams
 * (Q8_0 8, Q4 4, Q5_0 5), stream r at 64 s: 16 dwords, dword n = qs[4r..4r+3]
 * of the panel's row n (Q8_0: row r of the slot's TDPBSSD B tile, so a tile
 * load strides across the streams; Q4 / Q5: low nibbles elements 4r..4r+3,
 * high 16+4r..; Q5_0's stream 4: dword n = row n's qh), and its
 * scales in one more stream at scale_bytes s: 16 f16 d, then (Q4_1) 16 f16
 * m. As many sequential streams as the GGUF rows give a panel's blocks (a
 * step keeps as many lines in flight), no gathers, the rows' bytes padded
 * to whole panels. kvs_wmat_tiles_bytes: the size (0 for other types);
 * kvs_wmat_tiles_to fills dst (64-byte aligned) and points w->tiles at it.
 * Same bits out (only bytes move). */
size_t kvs_wmat_tiles_bytes(const kvs_wmat *w);
void kvs_wmat_tiles_to(kvs_wmat *w, void *dst);
typedef struct kvs_wtiles {
    const uint8_t *base;
    size_t stride;   /* bytes from one stream to the next: slots x 64 */
    int q_streams;   /* 8 (Q8_0), 4 (Q4_0, Q4_1) or 5 (Q5_0) */
    int scale_bytes; /* a slot's in the scale stream: 32, Q4_1 64 */
} kvs_wtiles;
kvs_wtiles kvs_wtiles_of(const kvs_wmat *w);
/* Slot s's stream 0 (stream r at + r * stride) and its d[16] (Q4_1: m[16]
 * 32 bytes on). */
static inline const uint8_t *kvs_wtiles_q(const kvs_wtiles *t, size_t s) { return t->base + 64 * s; }
static inline const uint8_t *kvs_wtiles_d(const kvs_wtiles *t, size_t s) {
    return t->base + (size_t)t->q_streams * t->stride + (size_t)t->scale_bytes * s;
}
/* 1 where the path the dispatcher picks reads, in a forward pass, none of
 * w's source rows once it is in the arena (packed, and its rows copied if
 * kvs_wmat_rows_copy_bytes): their pages can be given back. The AVX2 paths
 * read the GGUF rows, and with AMX on so do its prefill and batch paths for
 * their types (kvs_amx_prefill_type, kvs_amx_batch_type), unless the arena
 * holds a copy of the rows. */
int kvs_wmat_arena_replaces_source(const kvs_wmat *w);
/* bytes of memory (free() it) on 2 MiB pages where it is that large and the
 * kernel allows it, else 64-byte aligned; NULL if out of memory. */
void *kvs_huge_alloc(size_t bytes);

/* Bytes of scratch kvs_matmul needs for m activation rows against w
 * (0 for float weights: work may then be NULL). */
size_t kvs_matmul_work_size(const kvs_wmat *w, int m);

/* y(m, n) = x(m, k) . w(n, k)^T.  x row stride k, y row stride n.
 * For quantized w the rows of x are first quantized per block of 32 to 16-bit
 * integers held as two 8-bit levels (quant.h; each row on its own, so this
 * stays batch-invariant). Splits over the pool. */
void kvs_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y, void *work);

/* Several matrices against the same x (attention q/k/v, ffn gate/up):
 * ys[i] = x . ws[i]^T, exactly the bytes of separate kvs_matmul calls, but x
 * is quantized once and all outputs share one pool run. All ws[i] must have
 * the same k; if their types differ it falls back to separate calls.
 * work: kvs_matmul_multi_work_size. */
size_t kvs_matmul_multi_work_size(int nw, const kvs_wmat *const *ws, int m);
void kvs_matmul_multi(kvs_pool *pool, int nw, const kvs_wmat *const *ws, const float *x, int m,
                      float *const *ys, void *work);

/* Row i of a weight matrix as float (embedding lookup). dst holds w->k floats. */
void kvs_wmat_get_row(const kvs_wmat *w, int i, float *dst);

/* Dequantize k elements of a row of the given type. */
void kvs_dequantize_row(int type, const void *src, float *dst, int k);

/* y = x / rms(x) * w, one row of n (y may be x). */
void kvs_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* 1 if an element of x (n) is NaN or of magnitude limit or more (limit
 * positive and finite; an inf is past any), else 0: a max over the
 * magnitudes' bits, which order as the magnitudes do. */
int kvs_row_reaches(const float *x, int n, float limit);

/* kvs_row_reaches(x, n, 2^40): a model's activations have overflowed
 * (SmolLM2's and gemma3's stay below 1e6). Below it a row's sum of squares
 * cannot overflow, nor an attention score (any head size an int holds, a
 * scale of at most KVS_MAX_ATTN_SCALE: < 2^125). */
int kvs_row_overflows(const float *x, int n);
#define KVS_MAX_ATTN_SCALE 1e4f
/* The smallest magnitude an F16 KV slot stores as inf (65504 is the
 * largest finite half; from 65520 on, the rounding gives inf). */
#define KVS_F16_INF_FROM 65520.0f

/* Rotates one token's heads in place: x is (n_head, head_dim); the first
 * rope_dim dims of each head rotate. neox=0: pairs (2i, 2i+1); neox=1: pairs
 * (i, i + rope_dim/2). theta_i = pos * freq_scale * base^(-2i/rope_dim).
 * pos may be negative (rotating back by a position delta); fractional
 * positions are not supported. Angles and the rotation are evaluated in
 * double and rounded once, so +d then -d returns each value within ~1 ulp. */
void kvs_rope(float *x, int n_head, int head_dim, int rope_dim, int32_t pos,
              float freq_base, float freq_scale, int neox);
/* The same with per-pair frequency factors (Llama 3 RoPE scaling):
 * theta_i = pos * freq_scale * base^(-2i/rope_dim) / freq_factors[i],
 * freq_factors (rope_dim/2) or NULL (= kvs_rope, same bits). */
void kvs_rope_ff(float *x, int n_head, int head_dim, int rope_dim, int32_t pos,
                 float freq_base, float freq_scale, int neox, const float *freq_factors);
/* kvs_rope_ff in two steps, for a caller that rotates one position many
 * times (every layer of a forward pass): the cos and sin of its angles
 * (c, s: rope_dim / 2 each), then the rotation by them; together the same
 * bits as kvs_rope_ff at that position. */
void kvs_rope_cos_sin(int rope_dim, int32_t pos, float freq_base, float freq_scale, const float *freq_factors,
                      double *c, double *s);
void kvs_rope_apply(float *x, int n_head, int head_dim, int rope_dim, int neox, const double *c, const double *s);

/* gate[i] = silu(gate[i]) * up[i]. */
void kvs_silu_mul(float *gate, const float *up, int n);

/* float <-> half conversion of a row (KV cache storage). */
void kvs_f32_to_f16_row(const float *src, uint16_t *dst, int n);
void kvs_f16_to_f32_row(const uint16_t *src, float *dst, int n);

/* One-level 8-bit quantization of n floats (Q8 KV rows, and the query rows
 * that attention on them multiplies):
 *   amax = max |x| (NaN ignored), d = amax / 127, id = d >= FLT_MIN ? 1 / d : 0,
 *   q[i] = round_half_even(x[i] * id), 0 where that is NaN      (|q| <= 127)
 * Returns d (x ~= q * d). An infinite x makes d infinite and every q 0. */
float kvs_q8_row(const float *x, int8_t *q, int n);

/* KV rows: one token of one kv head, head_dim values, as the cache holds them
 * (kv_type is a kvs_kv_type):
 *   KVS_KV_F16, KVS_KV_F32   head_dim elements
 *   KVS_KV_Q8                head_dim int8 levels, then float d (kvs_q8_row;
 *                            4 bytes, not aligned: read it with memcpy)
 * kvs_kv_row_bytes is 0 for an unknown type. A range of slots of one head is
 * one contiguous run of rows whatever the type. */
static inline size_t kvs_kv_row_bytes(int kv_type, int head_dim) {
    /* inline: the cache entry codecs size payloads with it and link no kernel */
    switch (kv_type) {
    case KVS_KV_F16: return (size_t)head_dim * 2;
    case KVS_KV_F32: return (size_t)head_dim * 4;
    case KVS_KV_Q8: return (size_t)head_dim + sizeof(float);
    default: return 0;
    }
}
/* Attention on Q8 rows takes heads of up to this many dims (a model with
 * more is refused a Q8 KV buffer). */
#define KVS_KV_Q8_MAX_HEAD_DIM 256
void kvs_kv_row_store(int kv_type, const float *x, void *dst, int head_dim);
void kvs_kv_row_load(int kv_type, const void *src, float *x, int head_dim);
/* n rows (n * head_dim floats) at once, e.g. a head's run of slots. */
void kvs_kv_rows_load(int kv_type, const void *src, float *x, int n, int head_dim);
void kvs_kv_rows_store(int kv_type, const float *x, void *dst, int n, int head_dim);

/* Causal attention for m query tokens against one layer's KV cache.
 *   q    (m, n_head, head_dim)     already roped
 *   k, v (n_kv_head, n_ctx) rows of kvs_kv_row_bytes(kv_type, head_dim)
 *   pos  (m)  query token t attends to cache slots 0..pos[t] inclusive
 *   out  (m, n_head, head_dim)
 * Each (token, head) is computed independently, keys in ascending slot order,
 * so the result does not depend on m or on the thread count. Grouped-query:
 * head h reads kv head h / (n_head / n_kv_head). work: kvs_attention_work_size
 * with n_threads >= kvs_pool_size(pool) (each thread's score rows and tiles,
 * then 512 bytes a slot the threads share: a Q8 prefill's staged kv head). */
size_t kvs_attention_work_size(int n_threads, int n_ctx);
void kvs_attention(kvs_pool *pool, float *out, const float *q, const int32_t *pos, int m,
                   const void *k, const void *v, int kv_type, int n_head, int n_kv_head,
                   int head_dim, int n_ctx, float scale, void *work);

/* APE's attention recalibration (arXiv 2502.05431) for the rows after moved
 * documents: a query at a position >= hi sees the slots [lo, hi) (the
 * documents) with its scores times inv_t (a temperature T = 1 / inv_t), and
 * their summed weight raised to the power s (the segment's log-sum-exp times
 * s) before it is merged with the other keys' (attention_ref.c). Rows before
 * hi, and every row when hi <= lo, are computed as without it; inv_t = s = 1
 * gives the same bits as without it. */
typedef struct kvs_attn_recal {
    int lo, hi;
    float inv_t, s;
} kvs_attn_recal;

/* The decode layout of one layer's Q8 K and V rows: a copy, per 16 slots,
 * in the order the decode kernel reads them, so that a decode step does not
 * transpose and interleave again the rows that did not change (SmolLM2
 * after 8192 tokens: ~40% of its decode attention). Only the ISA paths
 * that read it build it (kvs_attn_layout_wanted); the bits are the same
 * with it or without it. Per kv head g, at data + g *
 * kvs_attn_layout_head_bytes(head_dim, n_ctx), over nb = ceil(n_ctx / 16)
 * blocks of 16 slots (D = head_dim, a multiple of 64):
 *   keys     nb x D / 4 32-bit words x 16 lanes: block b's word w lane k =
 *            levels 4w..4w+3 of slot 16b + k, each plus 128;
 *   kscales  nb x 16 floats: the keys' scales, by slot;
 *   values   nb x 4 groups of 4 slots x D words: group q's word at position
 *            d + 16i + 4L + e = the levels of dim d + 16L + 4i + e of its 4
 *            slots s, s+2, s+1, s+3 (bytes 0..3; d a multiple of 64);
 *   vscales  nb x 16 floats.
 * The owner (kv_buffer.c) builds slots [from, to) of a layer when they are
 * final (a sliding-window layer's only from its window on), and marks slots
 * after any write to them not built. */
typedef struct kvs_attn_layout {
    const void *data; /* 64-byte aligned */
    int n;            /* slots [lo, n) built, multiples of 16 */
    int lo;
} kvs_attn_layout;

/* 1 when rows of kv_type and head_dim have a decode layout (on some path). */
static inline int kvs_attn_layout_fits(int kv_type, int head_dim) {
    return kv_type == KVS_KV_Q8 && head_dim % 64 == 0 && head_dim <= KVS_KV_Q8_MAX_HEAD_DIM;
}
/* 1 when the ISA in use reads a decode layout of kv_type rows of head_dim
 * in one token's attention with group query heads a kv head. */
int kvs_attn_layout_wanted(int kv_type, int head_dim, int group);
size_t kvs_attn_layout_head_bytes(int head_dim, int n_ctx);
/* Builds slots [from, to) (multiples of 16, to <= n_ctx) of every kv head
 * from rows k, v; 0, or -1 when the ISA in use builds none (nothing
 * written). */
int kvs_attn_layout_build(int kv_type, const void *k, const void *v, int n_kv_head, int head_dim, int n_ctx,
                          int from, int to, void *data);

/* The same with a sliding window: query t sees only slots
 * (pos[t] - window, pos[t]] (window 0 = kvs_attention). The bits equal a
 * computation that skips the masked keys (attention_ref.c). recal and
 * layout may be NULL (none). */
void kvs_attention_window(kvs_pool *pool, float *out, const float *q, const int32_t *pos, int m,
                          const void *k, const void *v, int kv_type, int n_head, int n_kv_head,
                          int head_dim, int n_ctx, float scale, int window, const kvs_attn_recal *recal,
                          const kvs_attn_layout *layout, void *work);

/* One query token of kvs_attention_rows, against its own layer KV (n_ctx
 * slots of kv_type; recal may be NULL). */
typedef struct kvs_attn_row {
    float *out;
    const float *q;
    int32_t pos;
    const void *k, *v;
    int kv_type, n_ctx;
    const kvs_attn_recal *recal;
    const kvs_attn_layout *layout; /* NULL: none */
} kvs_attn_row;

/* kvs_attention_window for n rows of one token each, every row against its
 * own KV (batched decode over several sequences): one pool run over the
 * (row, kv head) units instead of a run per row (8 streams of SmolLM2 on 2
 * threads: 8 runs of 3 units, each 2 : 1 between the threads). Row r's
 * bits are those of its own call; one row is its own call. work:
 * kvs_attention_work_size with the largest n_ctx. */
void kvs_attention_rows(kvs_pool *pool, int n, const kvs_attn_row *rows, int n_head, int n_kv_head, int head_dim,
                        float scale, int window, void *work);

/* gate[i] = gelu_tanh(gate[i]) * up[i] (GeGLU), gelu_tanh(x) =
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = x / (1 + e^(-2u)),
 * with the attention's exp (act.c). */
void kvs_gelu_tanh_mul(float *gate, const float *up, int n);
/* y[i] = cap * tanh(y[i] / cap) (final logit soft-capping). */
void kvs_softcap_row(float *y, int n, float cap);

/* Which SIMD level the dispatcher chose ("avx512vnni", "avx2", "scalar"). */
const char *kvs_kernels_isa(void);
/* Forces the scalar path (tests, KVS_FORCE_SCALAR=1 env does the same). */
void kvs_kernels_force_scalar(int on);
/* Caps the dispatcher at one ISA level ("scalar", "avx2", "avx512vnni",
 * "amx" or "best"), for tests and benchmarks that compare paths. Returns -1
 * (and changes nothing) if the name is unknown or the CPU lacks that level.
 * "amx" is "avx512vnni" plus AMX tiles for every quantized matmul they
 * cover (Q4_0 / Q4_1 / Q5_0 / Q4_K / Q8_0 of many rows, batches of
 * streams; Linux must grant tile data; same bits), "avx512vnni" leaves AMX
 * out, "best" follows KVS_AMX: 0 leaves AMX out, auto (or unset) runs each
 * prefill shape's calls on AMX or AVX-512 by their measured speed
 * (path_tuner.c), any other value is "amx". */
int kvs_kernels_set_isa(const char *name);
/* KVS_ISA in the environment caps the dispatcher as kvs_kernels_set_isa
 * does, once, where no call chose first (unset or "": the best). Returns
 * KVS_OK, or KVS_ERR_INVALID_ARG naming the value where it is unknown or
 * beyond this CPU (the dispatcher then keeps the best): kvs_model_load
 * fails with it, so no run goes on silently on a path it was not asked. */
int kvs_kernels_check_env(void);
/* 1 if quantized matmuls may run on AMX (forced, or chosen per shape by
 * speed; kvs_kernels_isa then still names the vector level, "avx512vnni"). */
int kvs_kernels_amx(void);
/* The AVX-512 float decode (one activation row): 1 distant row pairs, 0
 * 4-row tiles, -1 the default (pairs; KVS_F_DECODE=tiles chooses the
 * tiles). Same bits either way; for tests of both. */
void kvs_kernels_set_f_decode_pairs(int pairs);

#endif
