/* Prometheus text exposition of srv_metrics (metrics.h). */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every status the server answers (http.c's dispatch and headers checks,
 * the handlers' srv_error_set): 204 is the CORS preflight, 501 a transfer
 * coding other than chunked (both had gone uncounted), 415 a compressed
 * body. A status missing here is not counted at all. */
static const int status_codes[] = {200, 204, 400, 401, 404, 405, 413, 415, 429, 500, 501, 503};
_Static_assert(sizeof status_codes / sizeof status_codes[0] == SRV_STATUS_CODES, "SRV_STATUS_CODES: one per status");
/* Seconds: fine at the low end (TTFT of a cached prompt), coarse above. */
static const double buckets[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_status(srv_metrics *m, int http_status) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SRV_STATUS_CODES; i++)
        if (status_codes[i] == http_status) m->requests[i]++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(srv_hist *h, double v) {
    int b = 0;
    while (b < SRV_HIST_BUCKETS && v > buckets[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void srv_metrics_job(srv_metrics *m, const srv_job *j, srv_finish why) {
    const srv_usage *u = &j->usage;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens[SRV_SRC_CACHED] += (uint64_t)u->cached_tokens;
    m->prompt_tokens[SRV_SRC_MOVED] += (uint64_t)(u->moved_tokens - u->recomputed_tokens);
    m->prompt_tokens[SRV_SRC_RECOMPUTED] += (uint64_t)u->recomputed_tokens;
    m->prompt_tokens[SRV_SRC_COMPUTED] += (uint64_t)u->computed_tokens;
    if ((unsigned)why < 5) m->finished[why]++;
    if (u->completion_tokens > 0) hist_add(&m->ttft, u->ttft_ms / 1e3);
    hist_add(&m->e2e, u->total_ms / 1e3);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_token(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->decode_tokens++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_job_unstarted(srv_metrics *m, srv_finish why) {
    pthread_mutex_lock(&m->mu);
    if ((unsigned)why < 5) m->finished[why]++;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *t = realloc(b->s, cap);
        if (!t) return;
        b->s = t;
        b->cap = cap;
    }
}

static void put_hist(sbuf *b, const char *name, const char *help, const srv_hist *h) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[i], (unsigned long long)cum);
    }
    cum += h->counts[SRV_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

static void put_gauge(sbuf *b, const char *name, const char *type, const char *help, double v) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics_render(srv_metrics *m, kvs_cache *cache, srv_load load) {
    sbuf b = {0};
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP kvstitch_requests_total HTTP requests answered, by status code.\n"
            "# TYPE kvstitch_requests_total counter\n");
    for (int i = 0; i < SRV_STATUS_CODES; i++)
        put(&b, "kvstitch_requests_total{status=\"%d\"} %llu\n", status_codes[i], (unsigned long long)m->requests[i]);
    put(&b, "# HELP kvstitch_prompt_tokens_total Prompt tokens by where their KV came from.\n"
            "# TYPE kvstitch_prompt_tokens_total counter\n");
    for (int s = 0; s < 4; s++)
        put(&b, "kvstitch_prompt_tokens_total{source=\"%s\"} %llu\n", srv_source_name((srv_source)s),
            (unsigned long long)m->prompt_tokens[s]);
    put(&b, "# HELP kvstitch_generations_total Generations by finish reason.\n"
            "# TYPE kvstitch_generations_total counter\n");
    for (int f = 1; f < 5; f++)
        put(&b, "kvstitch_generations_total{finish_reason=\"%s\"} %llu\n", srv_finish_name((srv_finish)f),
            (unsigned long long)m->finished[f]);
    put_gauge(&b, "kvstitch_decode_tokens_total", "counter", "Tokens generated.", (double)m->decode_tokens);
    put_hist(&b, "kvstitch_ttft_seconds", "Time from request arrival to the first token.", &m->ttft);
    put_hist(&b, "kvstitch_request_duration_seconds", "Time from request arrival to the last token.", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    put_gauge(&b, "kvstitch_queue_depth", "gauge", "Requests waiting for a slot.", load.queued);
    put_gauge(&b, "kvstitch_active_slots", "gauge", "Slots running a request.", load.active);
    put_gauge(&b, "kvstitch_slots", "gauge", "Slots (sequences batched together at most).", load.slots);
    put_gauge(&b, "kvstitch_ready", "gauge", "1 once the model is loaded.", load.ready);
    if (cache) {
        kvs_cache_stats st;
        kvs_cache_get_stats(cache, &st);
        put(&b, "# HELP kvstitch_cache_bytes KV bytes held, by tier.\n# TYPE kvstitch_cache_bytes gauge\n"
                "kvstitch_cache_bytes{tier=\"ram\"} %llu\n", (unsigned long long)st.bytes);
        put(&b, "# HELP kvstitch_cache_entries Chunks indexed, by tier.\n# TYPE kvstitch_cache_entries gauge\n"
                "kvstitch_cache_entries{tier=\"ram\"} %llu\nkvstitch_cache_entries{tier=\"all\"} %llu\n",
            (unsigned long long)st.resident, (unsigned long long)st.entries);
        put(&b, "# HELP kvstitch_cache_hits_total Prefix lookups serving at least one token, by tier.\n"
                "# TYPE kvstitch_cache_hits_total counter\nkvstitch_cache_hits_total{tier=\"all\"} %llu\n",
            (unsigned long long)st.hits);
        put(&b, "# HELP kvstitch_cache_loads_total Chunks read from a lower tier, by tier.\n"
                "# TYPE kvstitch_cache_loads_total counter\nkvstitch_cache_loads_total{tier=\"disk\"} %llu\n"
                "kvstitch_cache_loads_total{tier=\"redis\"} %llu\n",
            (unsigned long long)st.disk_loads, (unsigned long long)st.redis_hits);
        put_gauge(&b, "kvstitch_cache_budget_bytes", "gauge", "RAM budget of the chunk store.", (double)st.budget_bytes);
        put_gauge(&b, "kvstitch_cache_lookups_total", "counter", "Cache lookups.", (double)st.lookups);
        put_gauge(&b, "kvstitch_cache_hit_tokens_total", "counter", "Prompt tokens served from the cache.",
                  (double)st.hit_tokens);
        put_gauge(&b, "kvstitch_cache_evictions_total", "counter", "Chunks evicted from RAM.", (double)st.evictions);
        put_gauge(&b, "kvstitch_cache_index_drops_total", "counter",
                  "Entries without KV in memory dropped from the RAM index by its bound (their tier keeps them).",
                  (double)st.index_drops);
        put_gauge(&b, "kvstitch_cache_disk_writes_total", "counter", "Entries written to the cache directory.",
                  (double)st.disk_writes);
        put_gauge(&b, "kvstitch_cache_disk_write_errors_total", "counter",
                  "Entries whose write to the cache directory failed (kept in RAM only: a full, read-only or "
                  "removed directory).",
                  (double)st.disk_write_errors);
        put_gauge(&b, "kvstitch_cache_damaged_total", "counter", "Damaged entries found (never served).",
                  (double)st.disk_bad);
        /* The Redis tier (--redis / --redis-cluster; all 0 without one) */
        put_gauge(&b, "kvstitch_cache_redis_writes_total", "counter", "Chunks handed to the Redis writer.",
                  (double)st.redis_puts);
        put_gauge(&b, "kvstitch_cache_redis_write_errors_total", "counter",
                  "Chunk writes Redis refused, failed or did not answer in time.", (double)st.redis_put_errors);
        put_gauge(&b, "kvstitch_cache_redis_dropped_total", "counter",
                  "Chunks not written to Redis by design: Redis down or the write queue full.",
                  (double)st.redis_put_dropped);
        put_gauge(&b, "kvstitch_cache_redis_errors_total", "counter",
                  "Redis lookups without an answer (down, timeout, garbage): those chunks are computed.",
                  (double)st.redis_errors);
        put_gauge(&b, "kvstitch_cache_redis_partial_hits_total", "counter",
                  "Chunks served from Redis to a prompt that stops inside them (through a partial-chunk marker).",
                  (double)st.redis_partial_hits);
        put(&b, "# HELP kvstitch_cache_redis_rejected_total Redis values never served, by reason.\n"
                "# TYPE kvstitch_cache_redis_rejected_total counter\n"
                "kvstitch_cache_redis_rejected_total{reason=\"damaged\"} %llu\n"
                "kvstitch_cache_redis_rejected_total{reason=\"foreign\"} %llu\n",
            (unsigned long long)st.redis_bad, (unsigned long long)st.redis_foreign);
        /* of the damaged above (both tiers'): a forgery, or written without the key */
        put(&b, "# HELP kvstitch_cache_bad_mac_total Entries refused by the MAC check of the cache key (also counted "
                "as damaged).\n"
                "# TYPE kvstitch_cache_bad_mac_total counter\n"
                "kvstitch_cache_bad_mac_total{tier=\"disk\"} %llu\n"
                "kvstitch_cache_bad_mac_total{tier=\"redis\"} %llu\n",
            (unsigned long long)st.disk_bad_mac, (unsigned long long)st.redis_bad_mac);
    }
    return b.s;
}
