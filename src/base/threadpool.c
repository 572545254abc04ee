/*
 * Persistent worker threads. A run publishes its job and bumps a generation
 * counter; workers spin on it for a while (decode issues ~200 runs per token,
 * a few microseconds apart) and then sleep on a futex.
 *
 *   gen   even = published, odd = the caller is writing the next job. Workers
 *         read the job between two equal even reads (a seqlock), so a late
 *         worker never acts on a half-written job.
 *   kvs_pool_run   every thread runs fn once; the caller waits for all
 *                  (done counter, spin then futex).
 *   kvs_pool_for   chunks are taken from an atomic counter. Workers join only
 *                  while the run is open (state bit) and are counted while
 *                  inside; the caller closes the run when no chunk is left and
 *                  waits only for workers that are inside.
 *   kvs_pool_for_spans  the same, with a counter per thread's span: a thread
 *                  drains its own span first, then the others' from their
 *                  counters, so a chunk is still taken exactly once.
 *
 * Sleep/wake handshake (no lost wake-ups): a sleeper first announces itself
 * (seq_cst increment), then futex-waits only while the word still has the
 * old value; the waker first changes the word (seq_cst), then reads the
 * announcement. One of the two always sees the other.
 */
#include "base/threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() atomic_signal_fence(memory_order_seq_cst)
#endif

/* How long a thread spins before sleeping (nanoseconds). */
#define KVS_POOL_SPIN_NS 200000

enum { MODE_ALL = 0, MODE_CHUNKS = 1, MODE_SPANS = 2 };
#define STATE_OPEN 1u /* kvs_pool_for: workers may join; count in bits 1.. */

typedef struct kvs_worker {
    kvs_pool *pool;
    int ith;
    pthread_t thread;
} kvs_worker;

struct kvs_pool {
    int n;
    kvs_worker *workers; /* (n - 1) */
    /* the job: written by the caller while gen is odd */
    _Atomic(kvs_pool_fn) fn;
    _Atomic(kvs_pool_chunk_fn) chunk_fn;
    _Atomic(void *) arg;
    atomic_int mode;
    atomic_int n_chunks;
    _Alignas(64) atomic_uint gen;     /* futex word */
    atomic_int gen_sleepers;
    atomic_int stop;
    _Alignas(64) atomic_uint done;    /* futex word: workers finished (MODE_ALL) */
    atomic_int done_sleeper;
    _Alignas(64) atomic_int next;     /* next chunk (MODE_CHUNKS) */
    _Alignas(64) atomic_uint state;   /* STATE_OPEN | 2 * workers inside */
    struct span_next *span;           /* next chunk of each span (MODE_SPANS), n of them */
};

/* A span's counter on a cache line of its own (its owner takes chunks from
 * it while the other spans' owners take theirs). */
struct span_next {
    _Alignas(64) atomic_int next;
};

static void futex_wait(atomic_uint *word, unsigned expected) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int n) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until gen is even and != old: spin first, then sleep. */
static unsigned wait_gen(kvs_pool *pool, unsigned old) {
    unsigned v;
    for (;;) {
        uint64_t t0 = now_ns();
        for (;;) {
            for (int i = 0; i < 64; i++) {
                v = atomic_load_explicit(&pool->gen, memory_order_acquire);
                if (v != old && !(v & 1)) return v;
                cpu_relax();
            }
            if (now_ns() - t0 > KVS_POOL_SPIN_NS) break;
        }
        atomic_fetch_add(&pool->gen_sleepers, 1);
        v = atomic_load(&pool->gen);
        if (v == old) futex_wait(&pool->gen, old);
        atomic_fetch_sub(&pool->gen_sleepers, 1);
    }
}

static void run_chunks(kvs_pool *pool, kvs_pool_chunk_fn fn, void *arg, int n, int ith) {
    for (;;) {
        int c = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (c >= n) break;
        fn(arg, c, ith);
    }
}

static int span_first(int t, int n, int nth) { return (int)((long long)t * n / nth); }

/* Thread ith's own span, then the others' (from ith + 1 on, wrapping). */
static void run_spans(kvs_pool *pool, kvs_pool_chunk_fn fn, void *arg, int n, int ith) {
    for (int i = 0; i < pool->n; i++) {
        const int s = (ith + i) % pool->n, end = span_first(s + 1, n, pool->n);
        for (;;) {
            int c = atomic_fetch_add_explicit(&pool->span[s].next, 1, memory_order_relaxed);
            if (c >= end) break;
            fn(arg, c, ith);
        }
    }
}

static void *worker_main(void *p) {
    kvs_worker *w = p;
    kvs_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = wait_gen(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        int mode = atomic_load_explicit(&pool->mode, memory_order_relaxed);
        kvs_pool_fn fn = atomic_load_explicit(&pool->fn, memory_order_relaxed);
        kvs_pool_chunk_fn cfn = atomic_load_explicit(&pool->chunk_fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&pool->arg, memory_order_relaxed);
        int n_chunks = atomic_load_explicit(&pool->n_chunks, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        seen = g;
        /* A newer job is being written: ours was a chunk run that is over
         * (a MODE_ALL run cannot end before this worker reports done). */
        if (atomic_load_explicit(&pool->gen, memory_order_relaxed) != g) continue;
        if (mode == MODE_ALL) {
            fn(arg, w->ith, pool->n);
            unsigned d = atomic_fetch_add(&pool->done, 1) + 1;
            if (d == (unsigned)(pool->n - 1) && atomic_load(&pool->done_sleeper))
                futex_wake(&pool->done, 1);
            continue;
        }
        /* join the chunk run only while it is open */
        unsigned s = atomic_load(&pool->state);
        int joined = 0;
        while (s & STATE_OPEN) {
            if (atomic_compare_exchange_weak(&pool->state, &s, s + 2)) {
                joined = 1;
                break;
            }
        }
        if (!joined) continue;
        /* The open bit may belong to a newer run than the job we read; while
         * we are counted inside, the current run cannot end, so if gen is
         * still g the job is the current one. */
        if (atomic_load(&pool->gen) != g) {
            atomic_fetch_sub(&pool->state, 2);
            continue;
        }
        if (mode == MODE_SPANS) run_spans(pool, cfn, arg, n_chunks, w->ith);
        else run_chunks(pool, cfn, arg, n_chunks, w->ith);
        atomic_fetch_sub(&pool->state, 2);
    }
    return NULL;
}

kvs_pool *kvs_pool_new(int n_threads) {
    if (n_threads < 1) return NULL;
    kvs_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) return NULL;
    pool->n = n_threads;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof(kvs_worker));
        pool->span = aligned_alloc(64, (size_t)n_threads * sizeof(struct span_next));
        if (!pool->workers || !pool->span) {
            free(pool->workers);
            free(pool->span);
            free(pool);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        kvs_worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pool->n = i; /* only threads 1..i-1 exist: stop those */
            kvs_pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void kvs_pool_free(kvs_pool *pool) {
    if (!pool) return;
    atomic_store(&pool->stop, 1);
    atomic_fetch_add(&pool->gen, 2);
    futex_wake(&pool->gen, INT_MAX);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    free(pool->workers);
    free(pool->span);
    free(pool);
}

int kvs_pool_size(const kvs_pool *pool) { return pool ? pool->n : 1; }

/* Caller side of publishing a job: gen odd while writing, even after. */
static void publish_begin(kvs_pool *pool) { atomic_fetch_add(&pool->gen, 1); }

static void publish_end(kvs_pool *pool) {
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes the job */
    if (atomic_load(&pool->gen_sleepers) > 0) futex_wake(&pool->gen, INT_MAX);
}

void kvs_pool_run(kvs_pool *pool, kvs_pool_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    publish_begin(pool);
    atomic_store_explicit(&pool->mode, MODE_ALL, memory_order_relaxed);
    atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    publish_end(pool);
    fn(arg, 0, pool->n);
    unsigned target = (unsigned)(pool->n - 1);
    uint64_t t0 = 0;
    for (int i = 0;; i++) {
        unsigned d = atomic_load_explicit(&pool->done, memory_order_acquire);
        if (d == target) return;
        if ((i & 63) == 63) {
            uint64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > KVS_POOL_SPIN_NS) {
                atomic_store(&pool->done_sleeper, 1);
                d = atomic_load(&pool->done);
                if (d != target) futex_wait(&pool->done, d);
                atomic_store(&pool->done_sleeper, 0);
                continue;
            }
        }
        cpu_relax();
    }
}

/* kvs_pool_for and kvs_pool_for_spans: publish a chunk run of `mode`, take
 * chunks on the caller, close, wait for the workers inside. */
static void pool_chunks(kvs_pool *pool, int mode, int n_chunks, kvs_pool_chunk_fn fn, void *arg) {
    if (n_chunks <= 0) return;
    if (!pool || pool->n == 1 || n_chunks == 1) {
        for (int c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    publish_begin(pool);
    atomic_store_explicit(&pool->mode, mode, memory_order_relaxed);
    atomic_store_explicit(&pool->chunk_fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    for (int t = 0; t < pool->n; t++)
        atomic_store_explicit(&pool->span[t].next, span_first(t, n_chunks, pool->n), memory_order_relaxed);
    atomic_store_explicit(&pool->state, STATE_OPEN, memory_order_release);
    publish_end(pool);
    if (mode == MODE_SPANS) run_spans(pool, fn, arg, n_chunks, 0);
    else run_chunks(pool, fn, arg, n_chunks, 0);
    /* no chunk left: close, then wait for workers still inside */
    atomic_fetch_and(&pool->state, ~STATE_OPEN);
    while (atomic_load_explicit(&pool->state, memory_order_acquire) != 0) cpu_relax();
}

void kvs_pool_for(kvs_pool *pool, int n_chunks, kvs_pool_chunk_fn fn, void *arg) {
    pool_chunks(pool, MODE_CHUNKS, n_chunks, fn, arg);
}

void kvs_pool_for_spans(kvs_pool *pool, int n_chunks, kvs_pool_chunk_fn fn, void *arg) {
    pool_chunks(pool, MODE_SPANS, n_chunks, fn, arg);
}
