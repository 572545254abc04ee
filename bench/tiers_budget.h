/*
 * bench/tiers, the figures behind the Redis read budget (redis_conn.h):
 * what one pipelined read of a whole prompt's chunks costs on loopback,
 * idle and with busy loops on the cores, and how many of those chunks a
 * fixed 50 ms per-operation timeout and the default byte budget serve.
 *
 *   first byte  Redis runs every GETRANGE of the pipeline before it writes
 *               a reply, so this wait grows with the bytes asked for
 *   transfer    until the last reply is in (raw hiredis, no decoding)
 *   served      chunks get_many returned (of n), per policy, over all reps
 *
 * Included by bench/tiers.c only.
 */
#ifndef KVS_BENCH_TIERS_BUDGET_H
#define KVS_BENCH_TIERS_BUDGET_H

#include <limits.h>
#include <poll.h>

#include "../tests/busy_loops.h"
#include "kv/redis_conn.h"

/* One raw pipelined read of keys: ms to the first reply byte and to the last reply. */
static int budget_raw_read(redisContext *ctx, char (*key)[96], int n, double *first, double *all) {
    double t0 = bench_now_ms();
    for (int i = 0; i < n; i++) redisAppendCommand(ctx, "GETRANGE %s 0 67108864", key[i]);
    if (kvs_redis_flush(ctx)) return -1;
    struct pollfd pf = {ctx->fd, POLLIN, 0};
    if (poll(&pf, 1, 60000) != 1) return -1;
    *first = bench_now_ms() - t0;
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK) return -1;
        freeReplyObject(r);
    }
    *all = bench_now_ms() - t0;
    return 0;
}

static kvs_tier *budget_tier(const kvs_key *fp, const kvs_kv_shape *shape, int port, int min_mb_per_s) {
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    kvs_redis_tier_params p;
    kvs_redis_tier_default_params(&p); /* the default 50 ms per operation */
    p.url = url;
    p.min_mb_per_s = min_mb_per_s;
    p.breaker_failures = INT_MAX; /* every read is tried: this counts what each policy serves */
    kvs_tier *t = NULL;
    return kvs_redis_tier_open(&p, fp, shape, &t) ? NULL : t;
}

static int budget_served(kvs_tier *t, const kvs_key *keys, int n, kvs_chunk **out) {
    t->ops->get_many(t, keys, n, out);
    int got = 0;
    for (int i = 0; i < n; i++) {
        got += out[i] != NULL;
        kvs_chunk_unref(out[i]);
    }
    return got;
}

static void bench_budget(const kvs_key *fp, const chunk_list *l, int port, int reps) {
    kvs_tier *fixed = budget_tier(fp, &l->c[0]->shape, port, INT_MAX); /* budget = 50 ms whatever the size */
    kvs_tier *sized = budget_tier(fp, &l->c[0]->shape, port, 0);      /* the default floor */
    redisContext *ctx = rt_connect(port);
    kvs_key *keys = malloc((size_t)l->n * sizeof *keys);
    kvs_chunk **out = malloc((size_t)l->n * sizeof *out);
    char (*key)[96] = malloc((size_t)l->n * sizeof *key);
    double *first = malloc((size_t)reps * sizeof *first), *all = malloc((size_t)reps * sizeof *all);
    if (!fixed || !sized || !ctx || !keys || !out || !key || !first || !all) {
        fprintf(stderr, "tiers: budget section skipped (setup failed)\n");
        goto done;
    }
    for (int i = 0; i < l->n; i++) {
        keys[i] = l->c[i]->prefix_key;
        kvs_redis_tier_key(sized, &keys[i], key[i]);
        sized->ops->put(sized, l->c[i]);
    }
    kvs_redis_tier_flush(sized, 60000);
    kvs_redis_policy pol;
    kvs_redis_policy_defaults(&pol);
    const double mb = l->raw_bytes / 1e6;
    const int budget = kvs_redis_budget_ms(&pol, l->raw_bytes);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("\nRedis read budget: one pipelined read of the %d chunks (%.1f MB), medians / maxima of %d,\n"
           "with 0, 1x and 2x as many busy loops as cores; default budget %d ms (50 ms + %.1f MB at %d MB/s):\n",
           l->n, mb, reps, budget, mb, pol.min_mb_per_s);
    printf("%5s %7s %15s %15s %11s %11s %10s\n", "busy", "load", "first byte ms", "transfer ms", "ms per MB",
           "fixed 50ms", "budget");
    const int busy_cases[] = {0, (int)cores, 2 * (int)cores};
    for (int b = 0; b < 3; b++) {
        pid_t kids[256];
        int n_busy = busy_loops_start(kids, busy_cases[b] < 256 ? busy_cases[b] : 256, 120);
        bench_sleep_ms(300);
        int ok = 1, got_fixed = 0, got_sized = 0;
        for (int r = 0; r < reps; r++) {
            ok &= budget_raw_read(ctx, key, l->n, &first[r], &all[r]) == 0;
            got_sized += budget_served(sized, keys, l->n, out);
            got_fixed += budget_served(fixed, keys, l->n, out);
            redisReply *pong = redisCommand(ctx, "PING"); /* Redis is done with a read abandoned by a timeout */
            if (pong) freeReplyObject(pong);
        }
        double load = bench_load1();
        busy_loops_stop(kids, n_busy);
        if (!ok) {
            printf("%5d  raw read failed\n", n_busy);
            continue;
        }
        double fmed = bench_median(first, reps), fmax = first[reps - 1];
        double amed = bench_median(all, reps), amax = all[reps - 1];
        printf("%5d %7.2f %7.0f / %5.0f %7.0f / %5.0f %11.1f %5d/%-5d %5d/%-5d\n", n_busy, load, fmed, fmax, amed,
               amax, amax / mb, got_fixed, reps * l->n, got_sized, reps * l->n);
        fflush(stdout);
    }
    printf("(fixed 50ms / budget: chunks served of those asked, a tier with the 50 ms timeout and no byte\n"
           " budget vs the default; ms per MB: the slowest transfer, what the budget's floor must cover)\n");
done:
    if (ctx) redisFree(ctx);
    if (sized) {
        sized->ops->clear(sized, NULL);
        kvs_tier_close(sized);
    }
    if (fixed) kvs_tier_close(fixed);
    free(keys);
    free(out);
    free(key);
    free(first);
    free(all);
}

#endif
