/*
 * The chunk tiers below RAM, on the real model: what a 95%-overlap prompt of
 * ~4K tokens costs when its cached prefix comes from RAM, the cache
 * directory, Redis (loopback) or a Redis Cluster (3 masters + 3 replicas on
 * loopback), against a cold run; and what the Redis value codecs cost.
 *
 *   codecs   the KV of the 4K prompt (real chunks), encoded and decoded by
 *            every value codec: ratio, encode and decode MB/s (of raw KV)
 *   get/set  the same chunks through the Redis tier: SET (async writer,
 *            until flushed) and GET (get_many of the whole chain) MB/s of
 *            raw KV, per codec
 *   budget   one pipelined read of those chunks: first byte and transfer
 *            ms, idle and with busy loops; chunks served with a fixed 50 ms
 *            timeout vs the default byte budget (tiers_budget.h)
 *   ttft     prompt A (N tokens) cached, prompt B shares its first 95%:
 *            cold (no cache) vs warm from each tier, each through a fresh
 *            cache (a new process's view: empty RAM; the Redis ones have no
 *            directory), with the default Redis timeout and budget. Medians
 *            of --reps runs, side by side in one process.
 *            overhead = lookup_ms (index walk + tier reads + checks + KV copy
 *            into the context) / TTFT.
 *            Every warm run's first logits are memcmp'd with the cold run's.
 *
 * Starts its own redis-server processes on free loopback ports (the test
 * helpers) and stops them. usage: tiers [-m MODEL] [--reps N] [--threads N]
 * [--tokens N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/test_redis_util.h"
#include "cache/cache.h"
#include "kv/redis_value.h"
#include "kv/tier_dir.h"
#include "kv/tier_redis.h"
#include "kvstitch.h"
#include "bench_util.h"

static void bench_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double bench_load1(void) {
    double load = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = 0;
        fclose(f);
    }
    return load;
}


/* Real prose tokens: the MuSiQue file's text from byte `from` (the JSON
 * punctuation does not matter for timing or compression). */
static int32_t *text_tokens(const kvs_model *m, size_t from, int n) {
    const char *shared = getenv("KVSTITCH_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/data/musique_dev.json", shared && *shared ? shared : "../shared");
    FILE *f = fopen(path, "rb");
    size_t want = (size_t)n * 8;
    char *text = calloc(1, want + 1);
    int32_t *ids = malloc(((size_t)n * 8 + 64) * sizeof *ids);
    int got = 0;
    if (f && text && fseek(f, (long)from, SEEK_SET) == 0) {
        size_t len = fread(text, 1, want, f);
        size_t s = 0;
        while (s < len && ((unsigned char)text[s] & 0xC0) == 0x80) s++;
        while (len > s && ((unsigned char)text[len - 1] & 0x80)) len--;
        if (kvs_tokenize(m, text + s, len - s, 0, ids, n * 8 + 64, &got) != KVS_OK) got = 0;
    }
    if (f) fclose(f);
    free(text);
    if (got < n) {
        fprintf(stderr, "tiers: %s not usable, pseudo-random token ids\n", path);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + (int64_t)from) % 40000 + 100);
    }
    return ids;
}

typedef struct chunk_list {
    kvs_chunk **c;
    int n;
    size_t raw_bytes;
} chunk_list;

static int grab(void *user, const kvs_chunk *c, int resident, int reachable) {
    chunk_list *l = user;
    if (resident) {
        l->c[l->n++] = kvs_chunk_ref((kvs_chunk *)c);
        l->raw_bytes += c->kv_bytes;
    }
    return l->n == 4096;
}

static int by_pos(const void *a, const void *b) {
    const kvs_chunk *x = *(kvs_chunk *const *)a, *y = *(kvs_chunk *const *)b;
    return (x->pos0 > y->pos0) - (x->pos0 < y->pos0);
}

typedef struct codec_case {
    kvs_rv_codec codec;
    int level;
} codec_case;

static const codec_case cases[] = {
    {KVS_RV_CODEC_RAW, 0},  {KVS_RV_CODEC_ZSTD, 1},  {KVS_RV_CODEC_SHUFFLE_ZSTD, 1},
    {KVS_RV_CODEC_ZSTD, 3}, {KVS_RV_CODEC_SHUFFLE_ZSTD, 3},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void bench_codecs(const kvs_key *fp, const chunk_list *l, int reps) {
    printf("\nvalue codecs on %d real chunks (%.1f MB of f16 KV), medians of %d:\n", l->n, l->raw_bytes / 1e6, reps);
    printf("%-16s %7s %12s %12s\n", "codec", "ratio", "encode MB/s", "decode MB/s");
    double *te = malloc((size_t)reps * sizeof *te), *td = malloc((size_t)reps * sizeof *td);
    uint8_t **v = calloc((size_t)l->n, sizeof *v);
    size_t *len = calloc((size_t)l->n, sizeof *len);
    for (int k = 0; k < N_CASES; k++) {
        size_t enc = 0;
        int ok = 1;
        for (int r = 0; r < reps; r++) {
            enc = 0;
            double t0 = bench_now_ms();
            for (int i = 0; i < l->n; i++) {
                free(v[i]);
                v[i] = NULL;
                kvs_rv_encode(fp, l->c[i], cases[k].codec, cases[k].level, NULL, &v[i], &len[i]);
                enc += len[i];
            }
            te[r] = bench_now_ms() - t0;
            t0 = bench_now_ms();
            for (int i = 0; i < l->n; i++) {
                kvs_chunk *d = NULL;
                kvs_rv_expect x = {fp, &l->c[i]->shape, &l->c[i]->prefix_key, 0, NULL};
                ok &= kvs_rv_decode(v[i], len[i], &x, "bench", &d, NULL) == KVS_OK &&
                      !memcmp(d->kv, l->c[i]->kv, d->kv_bytes);
                kvs_chunk_unref(d);
            }
            td[r] = bench_now_ms() - t0;
        }
        char name[32];
        snprintf(name, sizeof name, "%s%s", kvs_rv_codec_name(cases[k].codec),
                 cases[k].codec == KVS_RV_CODEC_RAW ? "" : cases[k].level == 1 ? " -1" : " -3");
        printf("%-16s %6.3fx %12.0f %12.0f%s\n", name, (double)l->raw_bytes / (double)enc,
               l->raw_bytes / 1e3 / bench_median(te, reps), l->raw_bytes / 1e3 / bench_median(td, reps), ok ? "" : "  DECODE FAILED");
    }
    fflush(stdout);
    for (int i = 0; i < l->n; i++) free(v[i]);
    free(v);
    free(len);
    free(te);
    free(td);
}

static void bench_get_set(const kvs_key *fp, const chunk_list *l, int port, int reps) {
    printf("\nRedis tier on loopback (one redis-server), the same chunks, medians of %d:\n", reps);
    printf("%-16s %10s %10s %10s\n", "codec", "SET MB/s", "GET MB/s", "GET ms");
    kvs_key *keys = malloc((size_t)l->n * sizeof *keys);
    kvs_chunk **out = malloc((size_t)l->n * sizeof *out);
    for (int i = 0; i < l->n; i++) keys[i] = l->c[i]->prefix_key;
    double *ts = malloc((size_t)reps * sizeof *ts), *tg = malloc((size_t)reps * sizeof *tg);
    for (int k = 0; k < 3; k++) {
        char url[64];
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
        kvs_redis_tier_params p;
        kvs_redis_tier_default_params(&p);
        p.url = url;
        p.codec = cases[k].codec;
        p.level = cases[k].level;
        p.timeout_ms = 2000; /* measuring throughput, not outages */
        kvs_tier *t = NULL;
        if (kvs_redis_tier_open(&p, fp, &l->c[0]->shape, &t)) continue;
        int served = 0;
        for (int r = 0; r < reps; r++) {
            t->ops->clear(t, NULL);
            double t0 = bench_now_ms();
            for (int i = 0; i < l->n; i++) t->ops->put(t, l->c[i]);
            kvs_redis_tier_flush(t, 60000);
            ts[r] = bench_now_ms() - t0;
            t0 = bench_now_ms();
            t->ops->get_many(t, keys, l->n, out);
            tg[r] = bench_now_ms() - t0;
            served = 0;
            for (int i = 0; i < l->n; i++) {
                served += out[i] && !memcmp(out[i]->kv, l->c[i]->kv, l->c[i]->kv_bytes);
                kvs_chunk_unref(out[i]);
            }
        }
        double mts = bench_median(ts, reps), mtg = bench_median(tg, reps);
        printf("%-16s %10.0f %10.0f %10.1f%s\n", kvs_rv_codec_name(cases[k].codec), l->raw_bytes / 1e3 / mts,
               l->raw_bytes / 1e3 / mtg, mtg, served == l->n ? "" : "  NOT ALL SERVED");
        t->ops->clear(t, NULL);
        kvs_tier_close(t);
    }
    fflush(stdout);
    free(ts);
    free(tg);
    free(keys);
    free(out);
}

/* bench_budget, on the chunk_list above */
#include "tiers_budget.h"

typedef struct tier_case {
    const char *name;
    const char *dir, *url, *cluster;
} tier_case;

int main(int argc, char **argv) {
    const char *model_path = getenv("KVSTITCH_MODEL");
    int reps = 3, threads = 2, n = 4000;
    const char *env_threads = getenv("BENCH_THREADS"), *env_reps = getenv("BENCH_REPS");
    if (env_threads && atoi(env_threads) > 0) threads = atoi(env_threads);
    if (env_reps && atoi(env_reps) > 0) reps = atoi(env_reps);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: tiers [-m MODEL] [--reps N] [--threads N] [--tokens N]\n");
            return 2;
        }
    }
    if (!model_path || reps < 1 || threads < 1 || n < 128) {
        fprintf(stderr, "tiers: set KVSTITCH_MODEL or give -m\n");
        return 2;
    }
    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    if (kvs_model_load(model_path, kvs_model_default_params(), &model)) {
        fprintf(stderr, "tiers: %s\n", kvs_last_error());
        return 1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = n + 8;
    cp.n_threads = threads;
    if (kvs_context_new(model, cp, &ctx)) {
        fprintf(stderr, "tiers: %s\n", kvs_last_error());
        return 1;
    }
    printf("tiers: %ld cores, %d threads, load %.2f at start (a shared machine: compare within a run)\n",
           sysconf(_SC_NPROCESSORS_ONLN), threads, bench_load1());

    int32_t *a = text_tokens(model, 0, n), *b = malloc((size_t)n * sizeof *b);
    int32_t *other = text_tokens(model, 300000, n);
    int shared_n = n * 95 / 100;
    memcpy(b, a, (size_t)shared_n * sizeof *b);
    memcpy(b + shared_n, other, (size_t)(n - shared_n) * sizeof *b);
    if (b[shared_n] == a[shared_n]) b[shared_n] = (b[shared_n] + 1) % 40000;

    fflush(stdout);
    /* A's chunks, in memory: the real KV for the codec figures. */
    kvs_cache *mem = NULL;
    kvs_cache_params pm = kvs_cache_default_params();
    kvs_warm_report wr;
    if (kvs_cache_open(model, pm, &mem) || kvs_warm(ctx, mem, a, n, &wr)) {
        fprintf(stderr, "tiers: %s\n", kvs_last_error());
        return 1;
    }
    chunk_list l = {calloc(4096, sizeof(kvs_chunk *)), 0, 0};
    kvs_store_foreach(mem->store, grab, &l);
    qsort(l.c, (size_t)l.n, sizeof *l.c, by_pos);
    bench_codecs(&mem->fp, &l, reps);

    rt_redis single, cluster[RT_CLUSTER_N];
    if (rt_redis_start(&single, 0)) return 1;
    bench_get_set(&mem->fp, &l, single.port, reps);
    bench_budget(&mem->fp, &l, single.port, reps);
    int have_cluster = rt_cluster_start(cluster) == 0;

    /* TTFT: fill each tier with A's chunks, then serve B. The chunks computed
     * once above are written through each tier's put, as a kvs_warm through
     * a cache on that tier writes them (same bytes, same keys), rather than
     * computed again per tier (minutes of prefill on 2 cores). */
    char dir[] = "/tmp/kvs_tiers_XXXXXX", url[64], seeds[256] = "";
    if (!mkdtemp(dir)) return 1;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", single.port);
    if (have_cluster) rt_seed_list(cluster, 3, seeds, sizeof seeds);
    tier_case tc[] = {{"dir", dir, NULL, NULL}, {"redis", NULL, url, NULL}, {"cluster", NULL, NULL, seeds}};
    int n_tc = have_cluster ? 3 : 2;
    for (int k = 0; k < n_tc; k++) {
        kvs_tier *t = NULL;
        int rc;
        if (tc[k].dir) {
            kvs_tier_dir_params dp = {tc[k].dir, 0, 0, NULL};
            rc = kvs_tier_dir_open(&dp, &mem->fp, &l.c[0]->shape, &t);
        } else {
            kvs_redis_tier_params rp;
            kvs_redis_tier_default_params(&rp);
            rp.url = tc[k].url;
            rp.cluster = tc[k].cluster;
            rc = kvs_redis_tier_open(&rp, &mem->fp, &l.c[0]->shape, &t);
        }
        for (int i = 0; !rc && i < l.n; i++) rc = t->ops->put(t, l.c[i]);
        if (!rc && !tc[k].dir && !kvs_redis_tier_flush(t, 120000)) rc = KVS_ERR_IO;
        kvs_tier_stats ts;
        if (!rc) t->ops->stats(t, &ts);
        if (t) kvs_tier_close(t);
        if (rc || ts.put_errors || ts.put_dropped) {
            fprintf(stderr, "tiers: filling %s failed: %s\n", tc[k].name, rc ? kvs_last_error() : "writes lost");
            return 1;
        }
    }
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1;
    gp.sampling.temperature = 0;
    kvs_reuse_params nostore = kvs_reuse_default_params();
    nostore.store = 0;
    double *t_cold = malloc((size_t)reps * sizeof(double));
    double *t_w[4], *t_asm[4];
    int cached[4] = {0}, exact[4] = {1, 1, 1, 1};
    for (int k = 0; k < 4; k++) {
        t_w[k] = malloc((size_t)reps * sizeof(double));
        t_asm[k] = malloc((size_t)reps * sizeof(double));
    }
    float *cold_logits = NULL;
    for (int r = 0; r < reps; r++) {
        kvs_generate_result res;
        if (kvs_generate(ctx, b, n, &gp, &res)) return 1;
        t_cold[r] = res.ttft_ms;
        free(cold_logits);
        cold_logits = res.first_logits;
        res.first_logits = NULL;
        int n_vocab = res.n_vocab;
        kvs_generate_result_free(&res);
        for (int k = 0; k < 1 + n_tc; k++) {
            kvs_cache *c = mem;
            if (k > 0) { /* a fresh cache: what a new process sees */
                kvs_cache_params pp = kvs_cache_default_params();
                pp.cache_dir = tc[k - 1].dir;
                pp.redis_url = tc[k - 1].url;
                pp.redis_cluster = tc[k - 1].cluster;
                if (kvs_cache_open(model, pp, &c)) return 1;
            }
            if (kvs_generate_cached(ctx, c, b, n, &gp, &nostore, &res)) return 1;
            t_w[k][r] = res.ttft_ms;
            t_asm[k][r] = res.timings.lookup_ms;
            cached[k] = res.reuse ? res.reuse->n_cached : 0;
            exact[k] &= !memcmp(res.first_logits, cold_logits, (size_t)n_vocab * sizeof(float));
            kvs_generate_result_free(&res);
            if (k > 0) kvs_cache_free(c);
        }
    }
    double cold = bench_median(t_cold, reps);
    printf("\nTTFT of a %d-token prompt sharing its first %d tokens (95%%) with a cached one; medians of %d:\n", n,
           shared_n, reps);
    printf("%-10s %7s %10s %8s %12s %9s %6s\n", "source", "cached", "TTFT ms", "speedup", "lookup ms", "overhead",
           "exact");
    printf("%-10s %7d %10.1f %8s %12s %9s %6s\n", "cold", 0, cold, "1.0x", "-", "-", "-");
    const char *names[4] = {"RAM", "dir", "redis", "cluster"};
    int all_exact = 1;
    for (int k = 0; k < 1 + n_tc; k++) {
        double w = bench_median(t_w[k], reps), as = bench_median(t_asm[k], reps);
        printf("%-10s %7d %10.1f %7.1fx %12.1f %8.1f%% %6s\n", names[k], cached[k], w, cold / w, as, 100 * as / w,
               exact[k] ? "yes" : "NO");
        all_exact &= exact[k];
    }
    printf("(lookup = index walk + tier reads + checks + KV copy, inside the TTFT; overhead = lookup / TTFT;\n"
           " Redis: the default timeout and byte budget; load %.2f at the end)\n", bench_load1());

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "tiers: could not remove %s\n", dir);
    rt_redis_stop(&single);
    if (have_cluster) rt_cluster_stop(cluster);
    for (int i = 0; i < l.n; i++) kvs_chunk_unref(l.c[i]);
    free(l.c);
    kvs_cache_free(mem);
    kvs_context_free(ctx);
    kvs_model_free(model);
    free(a);
    free(b);
    free(other);
    free(cold_logits);
    free(t_cold);
    for (int k = 0; k < 4; k++) {
        free(t_w[k]);
        free(t_asm[k]);
    }
    if (!all_exact) {
        printf("tiers: FAILED: a warm run differs from its cold run\n");
        return 1;
    }
    return 0;
}
