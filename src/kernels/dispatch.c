/*
 * Run-time ISA selection and the threaded entry points (matmul, attention).
 * Threads split matmul by whole output columns and attention by (token tile,
 * kv head) units, so no output is ever reduced across threads.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"

static atomic_int g_force_scalar = -1; /* -1: not decided yet (read env) */

static int force_scalar(void) {
    int f = atomic_load_explicit(&g_force_scalar, memory_order_relaxed);
    if (f < 0) {
        const char *e = getenv("KVS_FORCE_SCALAR");
        f = (e && *e && *e != '0') ? 1 : 0;
        int expected = -1;
        atomic_compare_exchange_strong(&g_force_scalar, &expected, f);
        f = atomic_load(&g_force_scalar);
    }
    return f;
}

void kvs_kernels_force_scalar(int on) { atomic_store(&g_force_scalar, on ? 1 : 0); }

int kvs_kernels_simd_allowed(void) { return !force_scalar(); }

static int cpu_level(void) {
#if defined(__x86_64__)
    static atomic_int level = -1; /* cpu features never change: probe once */
    int l = atomic_load_explicit(&level, memory_order_relaxed);
    if (l < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c"))
            l = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                 __builtin_cpu_supports("f16c"))
            l = 1;
        else
            l = 0;
        atomic_store_explicit(&level, l, memory_order_relaxed);
    }
    return l;
#else
    return 0;
#endif
}

static atomic_int g_isa_cap = 2; /* highest level allowed (kvs_kernels_set_isa) */

int kvs_kernels_set_isa(const char *name) {
    int want = 2;
    if (name && !strcmp(name, "scalar")) want = 0;
    else if (name && !strcmp(name, "avx2")) want = 1;
    else if (name && strcmp(name, "avx512vnni") && strcmp(name, "best")) return -1;
    if (want > cpu_level()) return -1;
    atomic_store(&g_isa_cap, want);
    return 0;
}

static const kvs_isa *pick_isa(void) {
    if (force_scalar()) return &kvs_isa_scalar;
    int l = cpu_level(), cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
    if (l > cap) l = cap;
#if defined(__x86_64__)
    if (l == 2) return &kvs_isa_avx512;
    if (l == 1) return &kvs_isa_avx2;
#endif
    return &kvs_isa_scalar;
}

const char *kvs_kernels_isa(void) { return pick_isa()->name; }

/* ------------------------------------------------------------------------ */

static inline void *align64(void *p) {
    return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

size_t kvs_matmul_work_size(const kvs_wmat *w, int m) {
    if (!kvs_wtype_is_quant(w->type)) return 0;
    return 64 + kvs_xq_bytes(w->k, m);
}

typedef struct mm_task {
    kvs_mm_call call;
    const kvs_isa *isa;
} mm_task;

/* Column range of thread ith: multiples of 16 so tiles stay whole. */
static void split_cols(int n, int ith, int nth, int *j0, int *j1) {
    int units = (n + 15) / 16;
    *j0 = (int)((long)units * ith / nth) * 16;
    *j1 = (int)((long)units * (ith + 1) / nth) * 16;
    if (*j1 > n) *j1 = n;
    if (*j0 > n) *j0 = n;
}

static void mm_quant_worker(void *arg, int ith, int nth) {
    mm_task *t = arg;
    int m = t->call.m;
    int i0 = (int)((long)m * ith / nth), i1 = (int)((long)m * (ith + 1) / nth);
    if (i0 < i1) t->isa->quantize_rows(&t->call, i0, i1);
}

static void mm_worker(void *arg, int ith, int nth) {
    mm_task *t = arg;
    int j0, j1;
    split_cols(t->call.w->n, ith, nth, &j0, &j1);
    if (j0 < j1) t->isa->matmul_cols(&t->call, j0, j1);
}

void kvs_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y, void *work) {
    if (m <= 0 || w->n <= 0) return;
    mm_task t = {.isa = pick_isa()};
    t.call = (kvs_mm_call){.w = w, .x = x, .m = m, .y = y};
    if (kvs_wtype_is_quant(w->type)) {
        t.call.xq = align64(work);
        t.call.xq_row = kvs_xq_row_bytes(w->k);
        t.call.xq_tail = t.call.xq + (size_t)m * t.call.xq_row;
        t.call.xq_quad = kvs_xq_quad_bytes(w->k);
        if (m % 4) /* rows the last quad lacks stay zero (never stored, but defined) */
            memset((uint8_t *)t.call.xq_tail + (size_t)(m / 4) * t.call.xq_quad, 0, t.call.xq_quad);
        /* A few rows quantize faster on the caller than a pool round trip. */
        if (m <= 4 || !pool) t.isa->quantize_rows(&t.call, 0, m);
        else kvs_pool_run(pool, mm_quant_worker, &t);
    }
    kvs_pool_run(pool, mm_worker, &t);
}

/* ------------------------------------------------------------------------ */

size_t kvs_attention_work_size(int n_threads, int n_ctx) {
    if (n_threads < 1) n_threads = 1;
    return 64 + (size_t)n_threads * kvs_attn_thread_floats(n_ctx) * sizeof(float);
}

typedef struct attn_task {
    kvs_attn_call call;
    const kvs_isa *isa;
    int tile;          /* query tokens per unit */
    int n_tiles;
    atomic_int next;   /* next unit to take (dynamic balance; results do not
                          depend on which thread computes a unit) */
} attn_task;

static void attn_worker(void *arg, int ith, int nth) {
    attn_task *t = arg;
    const kvs_attn_call *c = &t->call;
    float *work = c->work + (size_t)ith * kvs_attn_thread_floats(c->n_ctx);
    int n_units = t->n_tiles * c->n_kv_head;
    for (;;) {
        int u = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (u >= n_units) break;
        /* Last tiles first: causal rows there are the longest. */
        int tile = t->n_tiles - 1 - u / c->n_kv_head, g = u % c->n_kv_head;
        int t0 = tile * t->tile, t1 = t0 + t->tile;
        if (t1 > c->m) t1 = c->m;
        t->isa->attention_unit(c, t0, t1, g, work);
    }
}

void kvs_attention(kvs_pool *pool, float *out, const float *q, const int32_t *pos, int m,
                   const void *k, const void *v, int kv_type, int n_head, int n_kv_head,
                   int head_dim, int n_ctx, float scale, void *work) {
    if (m <= 0) return;
    attn_task t = {.isa = pick_isa()};
    t.call = (kvs_attn_call){.out = out, .q = q, .pos = pos, .m = m, .k = k, .v = v,
                             .kv_type = kv_type, .n_head = n_head, .n_kv_head = n_kv_head,
                             .head_dim = head_dim, .n_ctx = n_ctx, .scale = scale,
                             .work = align64(work)};
    int group = n_head / n_kv_head;
    t.tile = KVS_ATTN_ROWS / group;
    if (t.tile < 1) t.tile = 1;
    t.n_tiles = (m + t.tile - 1) / t.tile;
    atomic_init(&t.next, 0);
    kvs_pool_run(pool, attn_worker, &t);
}
