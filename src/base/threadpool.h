/*
 * A fixed pool of worker threads owned by a context. kvs_pool_run() runs
 * fn(arg, ith, nth) on every thread (the caller is thread 0) and returns when
 * all have finished. Kernels split their work by (ith, nth) so that each
 * output element is computed by exactly one thread with the same arithmetic
 * whatever nth is (determinism across thread counts).
 * Not reentrant: one kvs_pool_run at a time per pool.
 */
#ifndef KVS_BASE_THREADPOOL_H
#define KVS_BASE_THREADPOOL_H

typedef struct kvs_pool kvs_pool;
typedef void (*kvs_pool_fn)(void *arg, int ith, int nth);

kvs_pool *kvs_pool_new(int n_threads); /* NULL on failure; n_threads >= 1 */
void kvs_pool_free(kvs_pool *pool);
int kvs_pool_size(const kvs_pool *pool);
/* pool may be NULL: then fn(arg, 0, 1) runs on the caller. */
void kvs_pool_run(kvs_pool *pool, kvs_pool_fn fn, void *arg);

/* Runs fn(arg, chunk, ith) once for every chunk in 0..n_chunks-1 on whichever
 * threads are running: the caller takes chunks itself and never waits for a
 * worker that has not started (on a loaded machine a descheduled worker just
 * does not take part); it returns when every chunk is done. ith (0..size-1)
 * names the executing thread, for per-thread scratch. The result must not
 * depend on which thread runs a chunk. pool may be NULL. */
typedef void (*kvs_pool_chunk_fn)(void *arg, int chunk, int ith);
void kvs_pool_for(kvs_pool *pool, int n_chunks, kvs_pool_chunk_fn fn, void *arg);

/* kvs_pool_for with an owner per chunk: the chunks are cut into size
 * contiguous spans, span t = [t * n_chunks / size, (t + 1) * n_chunks /
 * size), and thread t takes its own span's chunks first, in order, before
 * it helps with the others' (from where their owners are). For work whose
 * chunk c touches the same memory from one call to the next (rows of
 * activations, op after op): each thread keeps its rows in its own core's
 * cache. Every chunk still runs exactly once, whoever runs it; a thread
 * that does not take part leaves its span to the others. */
void kvs_pool_for_spans(kvs_pool *pool, int n_chunks, kvs_pool_chunk_fn fn, void *arg);

#endif
