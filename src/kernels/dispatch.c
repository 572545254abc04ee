/*
 * Run-time ISA selection and the threaded entry points (matmul, attention).
 * Threads split matmul by whole output columns and attention by (token tile,
 * kv head) units, so no output is ever reduced across threads.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "base/core_clock.h"
#include "base/error.h"
#include "kernels/kernels_impl.h"
#include "kernels/kquant.h"

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
        /* F16C is not probed: every AVX2 CPU has it (and clang's builtin
         * does not know the name). */
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("fma"))
            l = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
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

int kvs_kernels_cpu_level(void) { return cpu_level(); }

/* AMX: cpuid (leaf 7: EDX bit 24 amx-tile, 22 amx-bf16, 25 amx-int8) and Linux's
 * permission for tile data (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18
 * XTILEDATA; process-wide, so every pool thread may then use tiles). Asked
 * once; any failure leaves the AVX-512 path. */
static int amx_probe(void) {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    unsigned a, b, c, d;
    if (cpu_level() < 2 || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 24)) || !(d & (1u << 22)) || !(d & (1u << 25))) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    return 0;
#endif
}

int kvs_kernels_amx_available(void) {
    static atomic_int avail = -1;
    int v = atomic_load_explicit(&avail, memory_order_relaxed);
    if (v < 0) {
        v = amx_probe();
        atomic_store_explicit(&avail, v, memory_order_relaxed);
    }
    return v;
}

/* highest level allowed: -1 not decided yet (KVS_ISA env, read on first
 * use), else kvs_kernels_set_isa's or the env's choice */
static atomic_int g_isa_cap = -1;
/* AMX: -1 not decided yet (KVS_AMX env), 0 off, 1 on for every call it
 * covers, 2 (the default) a prefill's calls on AMX or AVX-512 by their
 * measured speed (path_tuner.c; the batch paths stay on AMX). */
static atomic_int g_amx = -1;

static int amx_default(void) {
    const char *e = getenv("KVS_AMX");
    if (!e || !*e || !strcmp(e, "auto")) return 2;
    return strcmp(e, "0") ? 1 : 0; /* as before the tuner: anything but 0 keeps AMX on */
}

static int amx_on(void) {
    int a = atomic_load_explicit(&g_amx, memory_order_relaxed);
    if (a < 0) {
        a = amx_default();
        int expected = -1;
        atomic_compare_exchange_strong(&g_amx, &expected, a);
        a = atomic_load(&g_amx);
    }
    return a && kvs_kernels_amx_available();
}

static int amx_tuned(void) { return amx_on() && atomic_load_explicit(&g_amx, memory_order_relaxed) == 2; }

/* The level cap and AMX mode that name asks (kvs_kernels_set_isa's
 * names; "best" the CPU's own level, so it holds on an AVX2-only CPU):
 * 0, or -1 unknown, -2 beyond this CPU. */
static int isa_choice(const char *name, int *cap, int *amx) {
    const int tiles = name && !strcmp(name, "amx");
    *cap = 2;
    *amx = tiles;
    if (name && !strcmp(name, "scalar")) *cap = 0;
    else if (name && !strcmp(name, "avx2")) *cap = 1;
    else if (name && !strcmp(name, "best")) *cap = cpu_level(), *amx = amx_default();
    else if (name && !tiles && strcmp(name, "avx512vnni")) return -1;
    if (*cap > cpu_level() || (tiles && !kvs_kernels_amx_available())) return -2;
    return 0;
}

int kvs_kernels_set_isa(const char *name) {
    int cap, amx;
    if (isa_choice(name, &cap, &amx)) return -1;
    atomic_store(&g_isa_cap, cap);
    atomic_store(&g_amx, amx);
    return 0;
}

/* KVS_ISA: a process's ISA cap without a call (kvstitch, the server, the
 * Python package alike: the AVX2 path of a whole model measured on an
 * AVX-512 host, say). Unset or "": the best the CPU has. */
static const char *isa_env(void) {
    const char *e = getenv("KVS_ISA");
    return e && *e ? e : NULL;
}

/* The cap, taking KVS_ISA's choice the first time if nothing chose before
 * (a name it cannot use leaves the best: kvs_kernels_check_env says why). */
static int isa_cap(void) {
    int cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
    if (cap >= 0) return cap;
    int want, amx;
    const char *e = isa_env();
    if (!e || isa_choice(e, &want, &amx)) isa_choice("best", &want, &amx);
    int expected = -1;
    if (atomic_compare_exchange_strong(&g_isa_cap, &expected, want)) atomic_store(&g_amx, amx);
    return atomic_load(&g_isa_cap);
}

int kvs_kernels_check_env(void) {
    const char *e = isa_env();
    int cap, amx;
    const int rc = e ? isa_choice(e, &cap, &amx) : 0;
    if (rc == -1)
        return kvs_error(KVS_ERR_INVALID_ARG, "KVS_ISA=%s: unknown (scalar, avx2, avx512vnni, amx or best)", e);
    if (rc == -2)
        return kvs_error(KVS_ERR_INVALID_ARG, "KVS_ISA=%s: this CPU lacks that path (`kvstitch --version` lists its paths)",
                         e);
    isa_cap(); /* decided now, before any kernel or layout choice reads it */
    return KVS_OK;
}

static const kvs_isa *pick_isa(void) {
    if (force_scalar()) return &kvs_isa_scalar;
    int l = cpu_level(), cap = isa_cap();
    if (l > cap) l = cap;
#if defined(__x86_64__)
    if (l == 2) return &kvs_isa_avx512;
    if (l == 1) return &kvs_isa_avx2;
#endif
    return &kvs_isa_scalar;
}

const char *kvs_kernels_isa(void) { return pick_isa()->name; }

int kvs_kernels_amx(void) {
#if defined(__x86_64__)
    return pick_isa() == &kvs_isa_avx512 && amx_on();
#else
    return 0;
#endif
}

int kvs_amx_prefill_type(int type) {
    return type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q5_0 || type == KVS_TYPE_Q4_K ||
           type == KVS_TYPE_Q8_0; /* why not Q5_1, Q5_K, Q6_K: matmul_amx.c */
}

/* A batch of streams on AMX, by weight type: Q8_0 (matmul_amx_batch.c on
 * its GGUF rows; where the model's arena holds its tiles, kvs_wmat_tiles_to,
 * matmul_amx_batch_nib.c: amx_batch_path), the 4- and 5-bit types Q4_0,
 * Q4_1, Q5_0, Q4_K (matmul_amx_batch_nib.c),
 * and the fewest rows where it beats AVX-512 (kernels_impl.h); NULL: none
 * (Q5_1, Q5_K, Q6_K keep kquant.c's batch kernels). */
static const kvs_isa *amx_batch_isa(int type, int *min_m) {
    *min_m = type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 ? KVS_AMX_BATCH_Q4_MIN_M : KVS_AMX_BATCH_MIN_M;
#if defined(__x86_64__)
    if (type == KVS_TYPE_Q8_0) return &kvs_isa_amx_batch;
    if (type == KVS_TYPE_Q4_0 || type == KVS_TYPE_Q4_1 || type == KVS_TYPE_Q5_0 || type == KVS_TYPE_Q4_K)
        return &kvs_isa_amx_batch_nib;
#endif
    return NULL;
}

int kvs_amx_batch_type(int type) {
    int min_m;
    return amx_batch_isa(type, &min_m) != NULL;
}

static int amx_applies(const kvs_wmat *w, int m) {
    return m >= KVS_AMX_MIN_M && w->k <= KVS_AMX_MAX_K && kvs_amx_prefill_type(w->type);
}

/* The AMX batch path of a call of m rows on w, NULL if none takes it. */
static const kvs_isa *amx_batch_path(const kvs_wmat *w, int m) {
    int min_m;
    const kvs_isa *isa = amx_batch_isa(w->type, &min_m);
#if defined(__x86_64__)
    if (isa == &kvs_isa_amx_batch && w->tiles) isa = &kvs_isa_amx_batch_nib; /* Q8_0 with its tiles */
#endif
    return isa && m >= min_m && m <= KVS_AMX_BATCH_MAX_M && w->k <= KVS_AMX_MAX_K && w->data ? isa : NULL;
}

/* The path of one matmul call: AMX replaces AVX-512 for calls it covers
 * (same bits, so the choice is only about speed). */
static const kvs_isa *mm_isa(const kvs_wmat *w, int m) {
    const kvs_isa *isa = pick_isa();
#if defined(__x86_64__)
    if (isa == &kvs_isa_avx512 && amx_applies(w, m) && amx_on()) return &kvs_isa_amx;
    const kvs_isa *batch = isa == &kvs_isa_avx512 ? amx_batch_path(w, m) : NULL;
    if (batch && amx_on()) return batch;
#endif
    return isa;
}

/* Whether a call on the AMX path (x86-64 only). */
static int is_amx(const kvs_isa *isa) {
#if defined(__x86_64__)
    return isa == &kvs_isa_amx;
#else
    (void)isa;
    return 0;
#endif
}

/* Whether a call on one of the AMX batch paths, whose activations are
 * quantized on the caller into one layout all rows share (x86-64 only). */
static int is_amx_batch(const kvs_isa *isa) {
#if defined(__x86_64__)
    return isa == &kvs_isa_amx_batch || isa == &kvs_isa_amx_batch_nib;
#else
    (void)isa;
    return 0;
#endif
}

/* Whether a call on w by path isa runs in this file (quantized x in work,
 * the ISA's matmul_cols) rather than in kquant.c: Q5_0 and Q4_K leave the
 * K-quant path for AMX, whose tiles compute their blocks exactly
 * (matmul_amx.c; their batches, matmul_amx_batch_nib.c). */
static int mm_here_on(const kvs_wmat *w, const kvs_isa *isa) {
    return !kvs_kq_handles(w->type) || is_amx(isa) || is_amx_batch(isa);
}

/* A call's path: mm_isa's, except that where it is AMX and AMX is tuned,
 * the tuner may send the call to AVX-512 (n: the columns of every matrix
 * of the call). tune_end records its time. */
typedef struct mm_tuning {
    int slot, path;
    double t0, madds;
} mm_tuning;

static const kvs_isa *mm_isa_tuned(const kvs_wmat *w, int n, int m, int nth, mm_tuning *tu) {
    const kvs_isa *isa = mm_isa(w, m);
    tu->slot = -1;
#if defined(__x86_64__)
    if (is_amx(isa) && amx_tuned()) {
        if (kvs_path_tune_pick(w->type, w->k, n, m, nth, &tu->slot)) isa = &kvs_isa_avx512;
        tu->path = !is_amx(isa); /* the path that runs, recorded as such */
        tu->madds = (double)m * n * w->k;
        tu->t0 = kvs_now_ms();
    }
#else
    (void)n;
    (void)nth;
#endif
    return isa;
}

static void tune_end(const mm_tuning *tu) {
    if (tu->slot >= 0) kvs_path_tune_record(tu->slot, tu->path, kvs_now_ms() - tu->t0, tu->madds);
}

/* ------------------------------------------------------------------------ */

static inline void *align64(void *p) {
    return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

size_t kvs_matmul_work_size(const kvs_wmat *w, int m) {
    /* whichever path runs (the ISA may change between sizing and the call) */
    size_t amx = 0;
    if (amx_applies(w, m)) amx = 64 + kvs_xa_bytes(w->type, w->k, m);
    else if (amx_batch_path(w, m)) amx = 64 + kvs_xb_bytes(w->k);
    if (kvs_kq_handles(w->type)) { /* Q5 / K-quants: kquant.c, or AMX */
        const size_t kq = kvs_kq_work_size(w, m);
        return kq > amx ? kq : amx;
    }
    if (!kvs_wtype_is_quant(w->type)) return 0;
    size_t s = kvs_xq_bytes(w->k, m) + 64 + (size_t)m * kvs_xn_bytes(w->k); /* xn: see kvs_mm_call */
    return 64 + s > amx ? 64 + s : amx;
}

typedef struct mm_task {
    kvs_mm_call call;
    const kvs_isa *isa;
    int cols;  /* output columns per chunk (a multiple of 16: whole tiles) */
    int rows;  /* activation rows per chunk (a multiple of 16; mm_rows), else 0: all */
} mm_task;

/* Whether the call quantizes x (every path but the float weights'). */
static int mm_quantized(const mm_task *t) {
    return kvs_wtype_is_quant(t->call.w->type) || is_amx(t->isa) || is_amx_batch(t->isa);
}

/* Activation rows quantized per pool chunk (a multiple of 4: a chunk owns
 * whole quads of the tail layout); a call of one chunk's rows quantizes on
 * the caller. 4, not 8: a step of 8 streams on 2 threads then quantizes on
 * both (with the forward pass's row ops split likewise, KVS_FWD_ROWS_PER_CHUNK:
 * SmolLM2 Q4_1, 8 streams, 2 Xeon threads, 864 -> 883 tok/s; either alone
 * measured nothing). */
#define MM_QUANT_ROWS 4

static void mm_quant_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    mm_task *t = arg;
    int i0 = chunk * MM_QUANT_ROWS, i1 = i0 + MM_QUANT_ROWS;
    if (i1 > t->call.m) i1 = t->call.m;
    t->isa->quantize_rows(&t->call, i0, i1);
}

/* Quantizes the call's m activation rows (one chunk's rows run on the
 * caller: kvs_pool_for takes a single chunk itself). By spans: a thread
 * quantizes the rows whose x its own row ops wrote (forward.c's run_rows)
 * and, on AMX, that its own row block reads (mm_rows). */
static void mm_quantize_all(kvs_pool *pool, mm_task *t, int m) {
    kvs_pool_for_spans(pool, (m + MM_QUANT_ROWS - 1) / MM_QUANT_ROWS, mm_quant_chunk, t);
}

/* A task's column chunks (per row block where it has row blocks) and row
 * blocks (1: all m rows at once); its chunks rb-major, nrb x nc. */
static int mm_ncols(const mm_task *t) { return (t->call.w->n + t->cols - 1) / t->cols; }
static int mm_nrb(const mm_task *t) { return t->rows ? (t->call.m + t->rows - 1) / t->rows : 1; }

/* Column chunk cc of row block rb. */
static void mm_block(const mm_task *t, int rb, int cc) {
    int j0 = cc * t->cols, j1 = j0 + t->cols;
    if (j1 > t->call.w->n) j1 = t->call.w->n;
    if (!t->rows) {
        t->isa->matmul_cols(&t->call, j0, j1);
        return;
    }
    /* a row block is a call of its own (rows are independent; xa rows
     * past m exist up to the next multiple of 16) */
    kvs_mm_call sub = t->call;
    int i0 = rb * t->rows;
    sub.m = t->call.m - i0 < t->rows ? t->call.m - i0 : t->rows;
    sub.x += (size_t)i0 * t->call.w->k;
    if (sub.xq) sub.xq += (size_t)i0 * t->call.xq_row;
    if (sub.xq_tail) sub.xq_tail += (size_t)(i0 / 4) * t->call.xq_quad; /* i0: a multiple of 16 */
    if (sub.xn) sub.xn += (size_t)i0 * t->call.xn_row;
    sub.y += (size_t)i0 * t->call.w->n;
    t->isa->matmul_cols(&sub, j0, j1);
}

static void mm_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const mm_task *t = arg;
    const int nc = mm_ncols(t);
    mm_block(t, chunk / nc, chunk % nc);
}

/* Prepares t->call for quantized weights: xq in work, x quantized (on the
 * caller for a few rows, else over the pool). */
static void mm_quantize(kvs_pool *pool, mm_task *t, void *work) {
    kvs_mm_call *c = &t->call;
    int m = c->m;
    c->xq = align64(work);
#if defined(__x86_64__)
    if (is_amx_batch(t->isa)) {
        c->xq_row = 0;
        c->xq_tail = NULL;
        c->xq_quad = 0;
        c->xn = NULL;
        memset((uint8_t *)c->xq, 0, kvs_xb_bytes(c->w->k)); /* rows past m stay zero */
        t->isa->quantize_rows(c, 0, m); /* on the caller: rows share every line of xb */
        return;
    }
    if (t->isa == &kvs_isa_amx) {
        c->xq_row = kvs_xa_row_bytes(c->w->type, c->w->k);
        c->xq_tail = NULL;
        c->xq_quad = 0;
        c->xn = NULL;
        int mp = (m + 15) & ~15; /* the last row tile reads whole tiles */
        memset((uint8_t *)c->xq + (size_t)m * c->xq_row, 0, (size_t)(mp - m) * c->xq_row);
        mm_quantize_all(pool, t, m);
        return;
    }
#endif
    c->xq_row = kvs_xq_row_bytes(c->w->k);
    c->xq_tail = c->xq + (size_t)m * c->xq_row;
    c->xq_quad = kvs_xq_quad_bytes(c->w->k);
    int xn = 0;
#if defined(__x86_64__)
    xn = t->isa == &kvs_isa_avx2; /* its packed kernels read int16 rows */
#endif
    c->xn = xn ? align64((uint8_t *)c->xq_tail + (size_t)((m + 3) / 4) * c->xq_quad) : NULL;
    c->xn_row = kvs_xn_bytes(c->w->k);
    if (m % 4) /* rows the last quad lacks stay zero (never stored, but defined) */
        memset((uint8_t *)c->xq_tail + (size_t)(m / 4) * c->xq_quad, 0, c->xq_quad);
    mm_quantize_all(pool, t, m);
}

/* Rows per chunk (multiples of 16; 0: every chunk all m rows). With
 * several threads and m >= 32 a thread (prefill), one row block per
 * thread, the chunks rb-major and taken by kvs_pool_for_spans: each thread
 * reads the activation rows it quantized (or, for float weights, that its
 * own row ops wrote: forward.c's run_rows, also by spans) in its own
 * core's cache, and writes the output rows its next row ops read; only
 * the weights are read by every thread. Column chunks over all rows had
 * each thread read the other half of the activations from the other core:
 * SmolLM2 pp512, 2 Xeon threads (AMX), Q4_0 1531-1588 -> 1682-1772 tok/s,
 * Q8_0 1190 -> 1367-1404, gemma3 1382-1417 -> 1577-1595; without AMX Q4_0
 * 1094-1109 -> 1189-1218, F16 684-713 -> 782-814; bench_kernels' AMX
 * shapes had run a fixed ~120-150 us a call slower on 2 threads than half
 * of one thread's time. AMX also splits a block whose bf16 activations
 * (twice the bytes of xq) would not stay in L2 while every column chunk
 * passes over it. */
#define MM_AMX_XA_BUDGET (1536 * 1024) /* of a 2 MiB L2; 768 KiB measured ~5% slower */
static int mm_rows(const kvs_isa *isa, const kvs_wmat *w, int m, int nth) {
    int nrb = kvs_prefill_row_blocks(m, nth);
#if defined(__x86_64__)
    if (isa == &kvs_isa_amx) {
        size_t bytes = (size_t)m * kvs_xa_row_bytes(w->type, w->k);
        int l2 = (int)((bytes + MM_AMX_XA_BUDGET - 1) / MM_AMX_XA_BUDGET);
        nrb = ((l2 + nrb - 1) / nrb) * nrb; /* a multiple of the threads' blocks */
    }
#endif
    (void)isa; (void)w;
    if (nrb == 1) return is_amx(isa) ? (m + 15) & ~15 : 0;
    int rows = (m + nrb - 1) / nrb;
    return (rows + 15) & ~15;
}

/* Small m: bigger chunks (less counter traffic); the work per chunk is what
 * matters, not its column count. Decode: kvs_decode_cols. */
static int mm_cols(const kvs_isa *isa, const kvs_wmat *w, int m, int nth) {
    const int n = w->n;
#if defined(__x86_64__)
    if (isa == &kvs_isa_amx) return 32; /* one weight panel (two B tiles) */
    /* A few rows (batched decode): long runs of a thread's own columns, so
     * that the rows its kernels prefetch ahead are its own: AVX2 float
     * weights (blocked inside, matmul_cols_f) and every AVX-512 type (chunks
     * of 32 columns on 2 threads had each chunk start unprefetched: SmolLM2,
     * 2 Xeon threads, 8 streams: F16 337 -> 371-387 tok/s, Q4_1 616-620 ->
     * 667-670, Q4_0 623-636 -> 668-685, Q8_0 485-496 -> 510-541; 4 streams
     * F16 225-234 -> 278-293, Q4_1 504-510 -> 567-576) */
    if (m < 16 && (isa == &kvs_isa_avx512 || is_amx_batch(isa) ||
                   (isa == &kvs_isa_avx2 && !kvs_wtype_is_quant(w->type))))
        return kvs_decode_cols(n, nth);
    /* AVX2 float-weight prefill: 16 tiles of 3 weight rows (matmul_avx2.c's
     * ptile), in L2 while every activation row tile meets them; chunks of
     * 16 had ended in a tile of one row, and passed over the activations
     * three times as often (F16 576x576, m = 512, one Zen 3 core: 62 -> 74
     * GOPS with the FR x FC tiles, and ptile's 82 needs whole tiles) */
    if (isa == &kvs_isa_avx2 && !kvs_wtype_is_quant(w->type) && m >= 16) return 48;
    /* AVX2 packed Q4_0 / Q4_1 / Q8_0 prefill: a pass of 16 quantized
     * activation rows (L1) meets every weight row of its chunk, so each chunk
     * reads all m rows once more; at 1 thread 512 rows (~680 KiB for k = 576)
     * are past a Zen 3 core's 512 KiB L2, and chunks of 16 read them from L3
     * 36 times per 576 columns. Up to 128 (never past a thread's share: the
     * short prompts that have no row blocks keep both threads busy): pp512,
     * Zen 3, paired, 6 rounds: 1 thread Q4_0 1.078x, Q8_0 1.082x, Q4_1
     * 1.085x; 2 threads (row blocks of 256 rows, in L2 already) Q4_0 1.049x,
     * Q8_0 1.014x. */
    if (isa == &kvs_isa_avx2 && kvs_wtype_is_quant(w->type) && m >= 16) {
        const int share = kvs_decode_cols(n, nth);
        return share < 128 ? share : 128;
    }
#endif
    return m == 1 ? kvs_decode_cols(n, nth) : m < 16 ? 32 : 16;
}

void kvs_matmul(kvs_pool *pool, const kvs_wmat *w, const float *x, int m, float *y, void *work) {
    if (m <= 0 || w->n <= 0) return;
    mm_tuning tu;
    mm_task t = {.isa = mm_isa_tuned(w, w->n, m, kvs_pool_size(pool), &tu)};
    if (!mm_here_on(w, t.isa)) {
        kvs_kq_matmul(pool, w, x, m, y, work);
        tune_end(&tu);
        return;
    }
    t.call = (kvs_mm_call){.w = w, .x = x, .m = m, .y = y};
    if (mm_quantized(&t)) mm_quantize(pool, &t, work);
    t.cols = mm_cols(t.isa, w, m, kvs_pool_size(pool));
    t.rows = mm_rows(t.isa, w, m, kvs_pool_size(pool));
    if (t.rows) kvs_pool_for_spans(pool, mm_nrb(&t) * mm_ncols(&t), mm_chunk, &t);
    else kvs_pool_for(pool, mm_ncols(&t), mm_chunk, &t);
    tune_end(&tu);
}

#define MM_MULTI_MAX 8

/* Several matrices on one quantized x: the chunks of matrix 0, then of
 * matrix 1, ...; with row blocks (mm_rows: the same for all, one k, one
 * path) within each row block (rb-major, for kvs_pool_for_spans): row
 * block 0's column chunks of every matrix, then row block 1's, ... */
typedef struct mm_multi_task {
    mm_task t[MM_MULTI_MAX];
    int first[MM_MULTI_MAX + 1]; /* within a row block, the chunk where matrix i starts */
    int nw;
} mm_multi_task;

static void mm_multi_chunk(void *arg, int chunk, int ith) {
    (void)ith;
    const mm_multi_task *mt = arg;
    const int per_rb = mt->first[mt->nw], rb = chunk / per_rb;
    chunk %= per_rb;
    int i = 0;
    while (chunk >= mt->first[i + 1]) i++;
    mm_block(&mt->t[i], rb, chunk - mt->first[i]);
}

/* nw matrices of one type and one k. */
static int same_shape(int nw, const kvs_wmat *const *ws) {
    if (nw < 1 || nw > MM_MULTI_MAX) return 0;
    for (int i = 1; i < nw; i++)
        if (ws[i]->type != ws[0]->type || ws[i]->k != ws[0]->k) return 0;
    return 1;
}

size_t kvs_matmul_multi_work_size(int nw, const kvs_wmat *const *ws, int m) {
    size_t s = 0;
    for (int i = 0; i < nw; i++) {
        size_t si = kvs_matmul_work_size(ws[i], m);
        if (si > s) s = si;
    }
    return s;
}

void kvs_matmul_multi(kvs_pool *pool, int nw, const kvs_wmat *const *ws, const float *x, int m,
                      float *const *ys, void *work) {
    if (m <= 0 || nw <= 0) return;
    if (!same_shape(nw, ws)) {
        if (kvs_kq_multi_ok(nw, ws)) kvs_kq_matmul_multi(pool, nw, ws, x, m, ys, work); /* Q5 / K-quants */
        else
            for (int i = 0; i < nw; i++) kvs_matmul(pool, ws[i], x, m, ys[i], work);
        return;
    }
    int n = 0;
    for (int i = 0; i < nw; i++) n += ws[i]->n;
    mm_tuning tu;
    const kvs_isa *isa = mm_isa_tuned(ws[0], n, m, kvs_pool_size(pool), &tu); /* same type and k: one path */
    if (!mm_here_on(ws[0], isa)) { /* Q5 / K-quants of one type and k: kvs_kq_multi_ok holds */
        kvs_kq_matmul_multi(pool, nw, ws, x, m, ys, work);
        tune_end(&tu);
        return;
    }
    mm_multi_task mt;
    mt.nw = nw;
    mt.first[0] = 0;
    for (int i = 0; i < nw; i++) {
        mm_task *t = &mt.t[i];
        t->isa = isa;
        t->call = (kvs_mm_call){.w = ws[i], .x = x, .m = m, .y = ys[i]};
        t->cols = mm_cols(isa, ws[i], m, kvs_pool_size(pool));
        t->rows = mm_rows(isa, ws[i], m, kvs_pool_size(pool));
        if (mm_quantized(t)) {
            if (i == 0) mm_quantize(pool, t, work);
            else { /* same type and k: the same quantized x */
                t->call.xq = mt.t[0].call.xq;
                t->call.xq_row = mt.t[0].call.xq_row;
                t->call.xq_tail = mt.t[0].call.xq_tail;
                t->call.xq_quad = mt.t[0].call.xq_quad;
                t->call.xn = mt.t[0].call.xn;
                t->call.xn_row = mt.t[0].call.xn_row;
            }
        }
        mt.first[i + 1] = mt.first[i] + mm_ncols(t);
    }
    if (mt.t[0].rows) kvs_pool_for_spans(pool, mm_nrb(&mt.t[0]) * mt.first[nw], mm_multi_chunk, &mt);
    else kvs_pool_for(pool, mt.first[nw], mm_multi_chunk, &mt);
    tune_end(&tu);
}

/* ------------------------------------------------------------------------ */

size_t kvs_attention_work_size(int n_threads, int n_ctx) {
    if (n_threads < 1) n_threads = 1;
    return 64 + (size_t)n_threads * kvs_attn_thread_floats(n_ctx) * sizeof(float) + kvs_attn_q8_staged_bytes(n_ctx);
}

typedef struct attn_task {
    kvs_attn_call call;
    void (*unit)(const kvs_attn_call *c, int t0, int t1, int g, float *work);
    int tile;    /* query tokens per unit */
    int n_tiles;
} attn_task;

/* The unit of tile `tile` and kv head g on thread ith. */
static void attn_run_unit(const attn_task *t, int tile, int g, int ith) {
    const kvs_attn_call *c = &t->call;
    int t0 = tile * t->tile, t1 = t0 + t->tile;
    if (t1 > c->m) t1 = c->m;
    t->unit(c, t0, t1, g, c->work + (size_t)ith * kvs_attn_thread_floats(c->n_ctx));
}

/* Unit u: the last tiles first (causal rows there are the longest), each
 * tile once per kv head. */
static void attn_chunk(void *arg, int u, int ith) {
    const attn_task *t = arg;
    attn_run_unit(t, t->n_tiles - 1 - u / t->call.n_kv_head, u % t->call.n_kv_head, ith);
}

/* Unit u of kv head c->staged_g: as attn_chunk, the last tiles first. */
static void attn_staged_chunk(void *arg, int u, int ith) {
    const attn_task *t = arg;
    attn_run_unit(t, t->n_tiles - 1 - u, t->call.staged_g, ith);
}

/* Staging of kv head c->staged_g's Q8 keys and values: chunks of
 * ATTN_STAGE_KEYS slots from the call's staged_lo up to end. */
#define ATTN_STAGE_KEYS 256
typedef struct attn_stage_task {
    const kvs_isa *isa;
    const kvs_attn_call *call;
    int end;
} attn_stage_task;

static void attn_stage_chunk(void *arg, int u, int ith) {
    (void)ith;
    const attn_stage_task *t = arg;
    const int j0 = t->call->staged_lo + u * ATTN_STAGE_KEYS;
    t->isa->attention_stage_q8(t->call, j0, j0 + ATTN_STAGE_KEYS < t->end ? j0 + ATTN_STAGE_KEYS : t->end);
}

/* A Q8 prefill with more than one unit per kv head: every unit reads each
 * key of its rows' range, so each kv head's keys and values are staged
 * once (the threads splitting the slots), then its units run on them.
 * Staging per unit was 13% of the Q8 kernel's time in a 512-token prefill
 * after 7680 (32 units per kv head); staged once, one layer's attention
 * there takes 0.95-0.96x the time (paired, 1 and 2 threads: the staged keys
 * come from the L2 or L3, not a tile in the L1). Returns 0 when not taken. */
static int attention_staged_q8(kvs_pool *pool, const kvs_isa *isa, attn_task *t) {
    kvs_attn_call *c = &t->call;
    const int rows = t->tile * (c->n_head / c->n_kv_head);
    /* only units that read the staged copy: the prefill layout's */
    if (c->kv_type != KVS_KV_Q8 || !isa->attention_stage_q8 || t->n_tiles < 2 ||
        !kvs_attn_q8_simd_shape(c->head_dim, rows) || rows < KVS_ATTN_Q8_PREFILL_ROWS)
        return 0;
    int lo = c->n_ctx, hi = 0;
    for (int i = 0; i < c->m; i++) {
        const int n = kvs_attn_n(c, c->pos[i]), l = kvs_attn_lo(c, n);
        if (n > hi) hi = n;
        if (l < lo) lo = l;
    }
    if (hi <= lo) return 0;
    c->staged_lo = lo & ~63; /* 64: the AMX layout's parts of 64 slots (attention_q8_amx.c) */
    c->staged = (uint8_t *)(c->work + (size_t)c->n_threads * kvs_attn_thread_floats(c->n_ctx));
    attn_stage_task st = {.isa = isa, .call = c, .end = hi};
    for (c->staged_g = 0; c->staged_g < c->n_kv_head; c->staged_g++) {
        kvs_pool_for(pool, (hi - c->staged_lo + ATTN_STAGE_KEYS - 1) / ATTN_STAGE_KEYS, attn_stage_chunk, &st);
        kvs_pool_for(pool, t->n_tiles, attn_staged_chunk, t);
    }
    c->staged = NULL;
    return 1;
}

typedef void (*attn_split_unit_fn)(const kvs_attn_call *c, int phase, int u, float *work);

typedef struct attn_split_task {
    attn_split_unit_fn unit;
    const kvs_attn_call *call;
    int phase;
} attn_split_task;

static void attn_split_chunk(void *arg, int u, int ith) {
    attn_split_task *t = arg;
    float *work = t->call->work + (size_t)ith * kvs_attn_thread_floats(t->call->n_ctx);
    t->unit(t->call, t->phase, u, work);
}

/* One decode token whose (token, kv head) units would leave threads idle
 * over enough keys to pay for two more pool runs: the ISA's split phases
 * instead (kvs_isa), the same bits. Fewer kv heads than threads (gemma3's
 * one on 2), measured (2 threads, gemma3's shape from DRAM): Zen 3 (AVX2)
 * 1.4x at 512 keys, 2.0x at 1024, 1.5x at 4096, no change at 256; Xeon
 * (AVX-512) 1.0x at 512, 1.6x at 1024, 1.8-2.0x at 4096; Q8 rows on Zen 3
 * (AVX2, session 90) 1.0x at 512, 1.1-1.4x at 1024, 1.6-1.8x at 4096.
 * Heads that do not divide among the threads (SmolLM2's 3 on 2: 2 : 1)
 * only where the ISA asks (attention_split_uneven_keys): on Zen 3 they
 * gained nothing split (memory-bound either way), and Q8 rows split there
 * took 1.14-1.17x the decode time after 1024-4096 keys. Q8 rows take the
 * ISA's Q8 split, whose last phase may decline (-1: a weight level came
 * out negative); the call's units then run as if it had not split.
 * Returns 0 when not taken. */
#define ATTN_SPLIT_MIN_KEYS 512
static int attention_split(kvs_pool *pool, const kvs_isa *isa, const kvs_attn_call *c) {
    const int nth = kvs_pool_size(pool), q8 = c->kv_type == KVS_KV_Q8;
    int (*units)(const kvs_attn_call *, int) = q8 ? isa->attention_split_units_q8 : isa->attention_split_units;
    if (c->m != 1 || !units || c->n_kv_head % nth == 0) return 0;
    const int n = kvs_attn_n(c, c->pos[0]), keys = n - kvs_attn_lo(c, n);
    const int uneven = q8 ? isa->attention_split_uneven_keys_q8 : isa->attention_split_uneven_keys;
    const int min_keys = c->n_kv_head < nth ? ATTN_SPLIT_MIN_KEYS : uneven;
    if (min_keys <= 0 || keys < min_keys || units(c, 0) <= 0) return 0;
    attn_split_task t = {.unit = q8 ? isa->attention_split_unit_q8 : isa->attention_split_unit, .call = c};
    for (t.phase = 0; t.phase < 3; t.phase++) {
        const int nu = units(c, t.phase);
        if (nu < 0) return 0;
        kvs_pool_for(pool, nu, attn_split_chunk, &t);
    }
    return 1;
}

void kvs_attention(kvs_pool *pool, float *out, const float *q, const int32_t *pos, int m,
                   const void *k, const void *v, int kv_type, int n_head, int n_kv_head,
                   int head_dim, int n_ctx, float scale, void *work) {
    kvs_attention_window(pool, out, q, pos, m, k, v, kv_type, n_head, n_kv_head, head_dim, n_ctx, scale, 0, NULL,
                         NULL, work);
}

/* The ISA's builder of a decode layout of such rows, or NULL. */
typedef void (*attn_layout_fn)(const void *, const void *, int, int, int, int, int, void *);
static attn_layout_fn layout_builder(int kv_type, int head_dim) {
    return kvs_attn_layout_fits(kv_type, head_dim) ? pick_isa()->attention_layout_q8 : NULL;
}

/* Read by the decode layout of the Q8 units (fewer rows than the prefill
 * layout's) and their split. */
int kvs_attn_layout_wanted(int kv_type, int head_dim, int group) {
    return layout_builder(kv_type, head_dim) && group >= 1 && group < KVS_ATTN_Q8_PREFILL_ROWS;
}

size_t kvs_attn_layout_head_bytes(int head_dim, int n_ctx) {
    return (size_t)(n_ctx + 15) / 16 * (32 * (size_t)head_dim + 128);
}

int kvs_attn_layout_build(int kv_type, const void *k, const void *v, int n_kv_head, int head_dim, int n_ctx,
                          int from, int to, void *data) {
    const attn_layout_fn build = layout_builder(kv_type, head_dim);
    if (!build) return -1;
    if (from < to) build(k, v, n_kv_head, head_dim, n_ctx, from, to, data);
    return 0;
}

typedef void (*attn_unit_fn)(const kvs_attn_call *c, int t0, int t1, int g, float *work);

/* The call of kvs_attention_window's arguments and the unit its rows take:
 * the ISA's recalibrated unit where a row is recalibrated (else the call
 * carries no recalibration: inv_t = s = 1 gives the same bits). */
static kvs_attn_call attn_call_of(const kvs_isa *isa, kvs_pool *pool, float *out, const float *q,
                                  const int32_t *pos, int m, const void *k, const void *v, int kv_type, int n_head,
                                  int n_kv_head, int head_dim, int n_ctx, float scale, int window,
                                  const kvs_attn_recal *recal, const kvs_attn_layout *layout, void *work,
                                  attn_unit_fn *unit) {
    kvs_attn_call c = {.out = out, .q = q, .pos = pos, .m = m, .k = k, .v = v, .kv_type = kv_type,
                       .n_head = n_head, .n_kv_head = n_kv_head, .head_dim = head_dim, .n_ctx = n_ctx,
                       .scale = scale, .window = window > 0 ? window : 0, .work = align64(work),
                       .n_threads = kvs_pool_size(pool)};
    if (layout && layout->data && layout->n > layout->lo) c.layout = *layout;
    *unit = isa->attention_unit;
    if (kv_type == KVS_KV_Q8) *unit = isa->attention_unit_q8 ? isa->attention_unit_q8 : kvs_attention_unit_q8_ref;
    if (recal && recal->hi > recal->lo) {
        c.recal = *recal;
        int any = 0;
        for (int i = 0; i < m && !any; i++) any = kvs_attn_recal_row(&c, pos[i]);
        if (!any) c.recal = (kvs_attn_recal){0, 0, 1.0f, 1.0f};
        else if (kv_type != KVS_KV_Q8) *unit = isa->attention_unit_recal; /* Q8 units take both */
    }
    return c;
}

void kvs_attention_window(kvs_pool *pool, float *out, const float *q, const int32_t *pos, int m,
                          const void *k, const void *v, int kv_type, int n_head, int n_kv_head,
                          int head_dim, int n_ctx, float scale, int window, const kvs_attn_recal *recal,
                          const kvs_attn_layout *layout, void *work) {
    if (m <= 0) return;
    const kvs_isa *isa = pick_isa();
    attn_task t;
    t.call = attn_call_of(isa, pool, out, q, pos, m, k, v, kv_type, n_head, n_kv_head, head_dim, n_ctx, scale,
                          window, recal, layout, work, &t.unit);
    if (attention_split(pool, isa, &t.call)) return;
    int group = n_head / n_kv_head;
    t.tile = KVS_ATTN_ROWS / group;
    if (t.tile < 1) t.tile = 1;
    t.n_tiles = (m + t.tile - 1) / t.tile;
    if (attention_staged_q8(pool, isa, &t)) return;
    kvs_pool_for(pool, t.n_tiles * n_kv_head, attn_chunk, &t);
}

/* Rows of kvs_attention_rows per pool run (the calls live on the stack). */
#define ATTN_ROWS_RUN 64

typedef struct attn_rows_task {
    kvs_attn_call call[ATTN_ROWS_RUN];
    attn_unit_fn unit[ATTN_ROWS_RUN];
    float *work;
    size_t thread_floats; /* per thread, for the largest n_ctx */
    int n_kv_head;
} attn_rows_task;

static void attn_rows_chunk(void *arg, int u, int ith) {
    attn_rows_task *t = arg;
    const int r = u / t->n_kv_head, g = u % t->n_kv_head;
    t->unit[r](&t->call[r], 0, 1, g, t->work + (size_t)ith * t->thread_floats);
}

void kvs_attention_rows(kvs_pool *pool, int n, const kvs_attn_row *rows, int n_head, int n_kv_head, int head_dim,
                        float scale, int window, void *work) {
    if (n <= 0) return;
    const kvs_isa *isa = pick_isa();
    if (n == 1) { /* one row: its own call, which may split across threads */
        const kvs_attn_row *r = &rows[0];
        kvs_attention_window(pool, r->out, r->q, &r->pos, 1, r->k, r->v, r->kv_type, n_head, n_kv_head, head_dim,
                             r->n_ctx, scale, window, r->recal, r->layout, work);
        return;
    }
    attn_rows_task t;
    int max_ctx = 0;
    for (int r = 0; r < n; r++) if (rows[r].n_ctx > max_ctx) max_ctx = rows[r].n_ctx;
    t.work = align64(work);
    t.thread_floats = kvs_attn_thread_floats(max_ctx);
    t.n_kv_head = n_kv_head;
    for (int r0 = 0; r0 < n; r0 += ATTN_ROWS_RUN) {
        const int nr = n - r0 < ATTN_ROWS_RUN ? n - r0 : ATTN_ROWS_RUN;
        for (int i = 0; i < nr; i++) {
            const kvs_attn_row *row = &rows[r0 + i];
            t.call[i] = attn_call_of(isa, pool, row->out, row->q, &row->pos, 1, row->k, row->v, row->kv_type, n_head,
                                     n_kv_head, head_dim, row->n_ctx, scale, window, row->recal, row->layout, work,
                                     &t.unit[i]);
        }
        kvs_pool_for(pool, nr * n_kv_head, attn_rows_chunk, &t);
    }
}
