/*
 * Server metrics, rendered in Prometheus' text format by GET /metrics.
 * Counters and histograms are updated under one mutex (a few updates per
 * request: nothing per token).
 */
#ifndef KVS_SERVER_METRICS_H
#define KVS_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "job.h"
#include "kvstitch.h"

#define SRV_HIST_BUCKETS 12

typedef struct srv_hist {
    uint64_t counts[SRV_HIST_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t n;
} srv_hist;

#define SRV_STATUS_CODES 12 /* metrics.c's status_codes */

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[SRV_STATUS_CODES];   /* by HTTP status, see metrics.c's table */
    uint64_t prompt_tokens[4];             /* by srv_source: cached, moved, recomputed, computed */
    uint64_t decode_tokens;                /* counted as each is sampled (srv_metrics_token) */
    uint64_t finished[5];                  /* by srv_finish */
    srv_hist ttft, e2e;                    /* seconds */
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_status(srv_metrics *m, int http_status);
/* One token generated (as it is sampled: a long generation shows in
 * kvstitch_decode_tokens_total while it runs, not all at its end). */
void srv_metrics_token(srv_metrics *m);
/* A finished generation: tokens by KV source, TTFT, end-to-end. */
void srv_metrics_job(srv_metrics *m, const srv_job *j, srv_finish why);
/* A generation cancelled before any slot took it (its client left while it
 * was queued, or the server stopped): counted by its finish reason only,
 * since none of its tokens was computed. */
void srv_metrics_job_unstarted(srv_metrics *m, srv_finish why);

typedef struct srv_load {
    int queued, active, slots;
    int ready;
} srv_load;

/* The whole /metrics page, malloc'd. cache may be NULL. */
char *srv_metrics_render(srv_metrics *m, kvs_cache *cache, srv_load load);

#endif
