/*
 * The scheduler: N slots (contexts) sharing one model and one chunk cache,
 * run by one thread in steps:
 *
 *   admit    free slots take queued requests, the least uncached prompt
 *            first among the oldest few (a request passed over 4 times, or
 *            waiting 2 s, goes next: fairness)
 *   cancel   slots whose client went away are freed
 *   prefill  one chunk of one prefilling slot (round robin), so a long
 *            prompt does not stall the streams that are decoding
 *   decode   every decoding slot's next token through ONE batched forward
 *            (kvs_decode_batch: the weights are read once per step)
 *
 * Deterministic: a request's tokens and first logits do not depend on what
 * else runs (batch-invariant kernels, one sampler per request).
 */
#ifndef KVS_SERVER_SCHED_H
#define KVS_SERVER_SCHED_H

#include "job.h"
#include "metrics.h"

typedef struct srv_sched srv_sched;

typedef struct srv_sched_params {
    int n_slots;
    int n_threads;      /* per context */
    int n_ctx;
    int max_queue;      /* queued requests beyond which submit says 429 */
    int prefill_chunk;  /* prompt tokens per prefill step */
    kvs_kv_type kv_type; /* the slots' contexts' (the cache's) */
} srv_sched_params;

int srv_sched_start(kvs_model *model, kvs_cache *cache, srv_sched_params p, srv_metrics *m, srv_sched **out);
/* 0 queued (the scheduler takes a reference); -1 queue full; -2 draining. */
int srv_sched_submit(srv_sched *s, srv_job *j);
/* Stops admitting, lets queued and running requests finish for at most
 * timeout_ms, then cancels what is left. cut_short (if not NULL) is asked
 * every poll; a nonzero answer ends the wait at once (serve: a second
 * SIGTERM / SIGINT). */
void srv_sched_drain(srv_sched *s, double timeout_ms, int (*cut_short)(void *), void *arg);
/* Joins the thread and frees the slots (after drain). */
void srv_sched_free(srv_sched *s);
srv_load srv_sched_load(srv_sched *s);

#endif
