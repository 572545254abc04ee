/*
 * Persistent worker threads. A run publishes (fn, arg) and bumps a generation
 * counter; workers spin on it for a while (decode issues ~200 runs per token,
 * a few microseconds apart) and then sleep on a futex. The caller runs share
 * 0 and waits for the workers' done counter the same way.
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

typedef struct kvs_worker {
    kvs_pool *pool;
    int ith;
    pthread_t thread;
} kvs_worker;

struct kvs_pool {
    int n;
    kvs_worker *workers; /* (n - 1) */
    kvs_pool_fn fn;
    void *arg;
    _Alignas(64) atomic_uint gen;     /* futex word: bumped once per run */
    atomic_int gen_sleepers;
    atomic_int stop;
    _Alignas(64) atomic_uint done;    /* futex word: workers finished this run */
    atomic_int done_sleeper;
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

/* Waits until *word != old: spin first, then sleep. */
static unsigned wait_change(atomic_uint *word, unsigned old, atomic_int *sleepers) {
    unsigned v;
    for (int round = 0;; round++) {
        uint64_t t0 = now_ns();
        for (;;) {
            for (int i = 0; i < 64; i++) {
                v = atomic_load_explicit(word, memory_order_acquire);
                if (v != old) return v;
                cpu_relax();
            }
            if (now_ns() - t0 > KVS_POOL_SPIN_NS) break;
        }
        atomic_fetch_add(sleepers, 1);
        v = atomic_load(word);
        if (v == old) futex_wait(word, old);
        atomic_fetch_sub(sleepers, 1);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old) return v;
    }
}

static void *worker_main(void *p) {
    kvs_worker *w = p;
    kvs_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_change(&pool->gen, seen, &pool->gen_sleepers);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        pool->fn(pool->arg, w->ith, pool->n);
        unsigned d = atomic_fetch_add(&pool->done, 1) + 1;
        if (d == (unsigned)(pool->n - 1) && atomic_load(&pool->done_sleeper))
            futex_wake(&pool->done, 1);
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
        if (!pool->workers) {
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
    atomic_fetch_add(&pool->gen, 1);
    futex_wake(&pool->gen, INT_MAX);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    free(pool->workers);
    free(pool);
}

int kvs_pool_size(const kvs_pool *pool) { return pool ? pool->n : 1; }

void kvs_pool_run(kvs_pool *pool, kvs_pool_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes fn/arg/done */
    if (atomic_load(&pool->gen_sleepers) > 0) futex_wake(&pool->gen, INT_MAX);
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
