/*
 * kvstitch bench: prefill (pp) and decode (tg) tokens/s like llama-bench, the
 * median over repetitions after one warm-up, optionally at a depth (tests run
 * after a context of that many tokens, as llama-bench -d), plus resident
 * memory split into file-backed pages (the mmapped weights) and anonymous
 * pages (KV, scratch). --streams N: the decode test steps N contexts at once
 * (kvs_decode_batch, one forward pass per step, as the server's continuous
 * batching) and reports their aggregate tokens/s. The core clock (a chain of
 * dependent adds, kvs_core_clock_ghz) before and after the tests says what
 * state a shared machine was in while they ran.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json_util.h"

typedef struct bench_opts {
    const char *model_path, *kv_type;
    int n_pp, n_tg, n_depth, reps, n_threads, n_batch, n_streams, json;
} bench_opts;

static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", bench_opts, model_path, "PATH", "GGUF file"),
    CLI_INT_OPT("-p", NULL, bench_opts, n_pp, 0, 1 << 20, "N",
                "prompt tokens for the prefill test (0 = skip; default 512)"),
    CLI_INT_OPT("-n", NULL, bench_opts, n_tg, 0, 1 << 20, "N", "tokens for the decode test (0 = skip; default 128)"),
    CLI_INT_OPT("-d", "--depth", bench_opts, n_depth, 0, 1 << 20, "N",
                "tokens already in the context when each test starts (default 0)"),
    CLI_INT_OPT(NULL, "--reps", bench_opts, reps, 1, 1000, "N", "repetitions; the median is reported (default 3)"),
    CLI_INT_OPT(NULL, "--threads", bench_opts, n_threads, 1, KVS_MAX_THREADS, "N", "worker threads (default: all cores)"),
    CLI_INT_OPT(NULL, "--batch", bench_opts, n_batch, 1, 1 << 16, "N",
                "tokens per forward chunk in prefill (default 512)"),
    CLI_INT_OPT(NULL, "--streams", bench_opts, n_streams, 1, 64, "N",
                "decode N sequences at once, batched; aggregate tokens/s (default 1)"),
    CLI_KV_TYPE_OPT(bench_opts, kv_type),
    CLI_FLAG_OPT(NULL, "--json", bench_opts, json, 1, "one JSON object instead of a table"),
};
static const cli_command k_cmd = {
    "bench",
    "usage: kvstitch bench -m MODEL [-p 512] [-n 128] [-d 0] [--reps 3] [--threads N] [--streams N] [--kv-type T]\n"
    "                      [--json]\n",
    k_opts,
    (int)(sizeof k_opts / sizeof k_opts[0]),
    "Prompt tokens are pseudo-random ids; the tests start at position -d (0: an empty context).\n",
    NULL};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* kB values of VmRSS, RssAnon, RssFile from /proc/self/status (0 if absent). */
static void read_rss(long long kb[3]) {
    static const char *keys[3] = {"VmRSS:", "RssAnon:", "RssFile:"};
    kb[0] = kb[1] = kb[2] = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        for (int i = 0; i < 3; i++)
            if (!strncmp(line, keys[i], strlen(keys[i]))) kb[i] = atoll(line + strlen(keys[i]));
    fclose(f);
}

static void print_row(const char *kind, int n, int streams, int depth, double med, const double *runs, int reps) {
    char name[64], x[16] = "";
    if (streams > 1) snprintf(x, sizeof x, " x%d", streams);
    if (depth) snprintf(name, sizeof name, "%s%d%s @ d%d", kind, n, x, depth);
    else snprintf(name, sizeof name, "%s%d%s", kind, n, x);
    printf("%-8s %12.2f   [", name, med);
    for (int r = 0; r < reps; r++)
        printf(r ? ", %.1f" : "%.1f", runs[r]);
    printf("]\n");
}

/* "model name" from /proc/cpuinfo, or the machine type. */
static void cpu_name(char *buf, size_t cap) {
    struct utsname u;
    snprintf(buf, cap, "%s", uname(&u) == 0 ? u.machine : "unknown cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        snprintf(buf, cap, "%s", c);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* {"n", ["streams",] "tok_s", "runs"} of one test, rounded to 0.01 tok/s as
 * the table. */
static void add_test(cJSON *j, const char *key, int n, int streams, double med, const double *runs, int reps) {
    cJSON *t = cJSON_AddObjectToObject(j, key);
    cJSON_AddNumberToObject(t, "n", n);
    if (streams > 1) cJSON_AddNumberToObject(t, "streams", streams);
    cJSON_AddNumberToObject(t, "tok_s", round(med * 100) / 100);
    cJSON *a = cJSON_AddArrayToObject(t, "runs");
    for (int r = 0; a && r < reps; r++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(round(runs[r] * 100) / 100));
}

/* One prefill of n tokens at positions 0..n-1; returns tokens/s. */
static int run_pp(kvs_context *ctx, const int32_t *toks, const int32_t *pos, int n, float *logits, double *tok_s) {
    double t = now_ms();
    int st = kvs_decode(ctx, toks, pos, n, logits);
    *tok_s = n * 1000.0 / (now_ms() - t);
    return st;
}

/* n single-token decodes at positions p0..p0+n-1; returns tokens/s. */
static int run_tg(kvs_context *ctx, const int32_t *toks, int p0, int n, float *logits, double *tok_s) {
    double t = now_ms();
    for (int i = 0; i < n; i++) {
        int32_t p = p0 + i;
        int st = kvs_decode(ctx, &toks[i], &p, 1, logits);
        if (st) return st;
    }
    *tok_s = n * 1000.0 / (now_ms() - t);
    return KVS_OK;
}

/* n batched steps of ns streams (ctxs), stream s's token i = toks[s + i],
 * all at positions p0..p0+n-1; returns the aggregate tokens/s. */
static int run_tg_streams(kvs_context *const *ctxs, int ns, const int32_t *toks, int p0, int n, float *logits,
                          double *tok_s) {
    int32_t bt[64], bp[64];
    double t = now_ms();
    for (int i = 0; i < n; i++) {
        for (int s = 0; s < ns; s++) {
            bt[s] = toks[s + i];
            bp[s] = p0 + i;
        }
        int st = kvs_decode_batch(ctxs, bt, bp, ns, logits);
        if (st) return st;
    }
    *tok_s = (double)n * ns * 1000.0 / (now_ms() - t);
    return KVS_OK;
}

/* The decode test: one context (kvs_decode) or ns (kvs_decode_batch). */
static int run_tg_test(kvs_context *const *ctxs, int ns, const int32_t *toks, int p0, int n, float *logits,
                       double *tok_s) {
    if (ns == 1) return run_tg(ctxs[0], toks, p0, n, logits, tok_s);
    return run_tg_streams(ctxs, ns, toks, p0, n, logits, tok_s);
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.n_pp = 512, .n_tg = 128, .reps = 3, .n_streams = 1};
    int prc = cli_parse(&k_cmd, argc, argv, &o, NULL);
    if (prc >= 0) return prc;
    const char *model_path = o.model_path;
    int n_pp = o.n_pp, n_tg = o.n_tg, depth = o.n_depth, reps = o.reps, n_threads = o.n_threads;
    int n_batch = o.n_batch, json = o.json, ns = o.n_streams;
    if (!model_path) return cli_usage_error("bench", "-m MODEL is required");
    if (n_pp == 0 && n_tg == 0) return cli_usage_error("bench", "-p and -n are both 0: nothing to measure");
    if (ns > 1 && n_tg == 0) return cli_usage_error("bench", "--streams %d needs the decode test (-n > 0)", ns);
    if (ns > 1 && n_batch > 0 && n_batch < ns)
        return cli_usage_error("bench", "--batch %d is less than --streams %d (one step takes a row per stream)",
                               n_batch, ns);

    kvs_model *model = NULL;
    kvs_context *ctxs[64] = {NULL}, *ctx = NULL;
    int st = kvs_model_load(model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) return cli_fail(st, model_path);
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = depth + (n_pp > n_tg ? n_pp : n_tg);
    if (cp.n_ctx < ns) cp.n_ctx = ns; /* n_batch is capped at n_ctx, and a step takes ns rows */
    if (info.n_ctx_train > 0 && cp.n_ctx > info.n_ctx_train) { /* named here: the context's error had advised an
                                                                * option bench does not have */
        kvs_model_free(model);
        return cli_usage_error("bench", "-d %d + max(-p %d, -n %d) = %d tokens exceeds the %d the model was trained on",
                               depth, n_pp, n_tg, cp.n_ctx, info.n_ctx_train);
    }
    cp.n_threads = n_threads;
    cp.n_batch = n_batch;
    kvs_kv_type_parse(o.kv_type ? o.kv_type : "f16", &cp.kv_type); /* a listed choice: it parses */
    int rc = 1, n_max = cp.n_ctx + ns; /* stream s reads its tokens from s on */
    int32_t *toks = malloc((size_t)n_max * sizeof *toks), *pos = malloc((size_t)n_max * sizeof *pos);
    float *logits = malloc((size_t)ns * kvs_vocab_size(model) * sizeof *logits);
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    if (!toks || !pos || !logits || !pp || !tg) {
        fprintf(stderr, "kvstitch bench: out of memory\n");
        goto done;
    }
    /* the batched step runs on context 0's scratch and threads; the others
     * hold their KV and need prefill scratch only for the depth */
    kvs_context_params cp_other = cp;
    if (cp_other.n_batch == 0 || cp_other.n_batch > 64) cp_other.n_batch = 64;
    for (int s = 0; s < ns; s++)
        if ((st = kvs_context_new(model, s ? cp_other : cp, &ctxs[s])) != KVS_OK) {
            cli_fail(st, "context");
            goto done;
        }
    ctx = ctxs[0];

    /* A fixed LCG stream of ids: the same prompt every run, no tokenizer involved. */
    uint64_t x = 42;
    for (int i = 0; i < n_max; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)info.n_vocab);
        pos[i] = i;
    }
    double pp_med = 0, tg_med = 0, scratch;
    const double clock_start = kvs_core_clock_ghz(0.02);
    /* slots 0..depth-1 once (every stream); every test then writes the slots after them */
    for (int s = 0; s < ns && depth > 0; s++)
        if ((st = run_pp(ctxs[s], toks + s, pos, depth, logits, &scratch))) {
            cli_fail(st, "prefill of the depth");
            goto done;
        }
    if (n_pp > 0) {
        if ((st = run_pp(ctx, toks + depth, pos + depth, n_pp, logits, &scratch))) {
            cli_fail(st, "prefill");
            goto done;
        }
        for (int r = 0; r < reps; r++)
            if ((st = run_pp(ctx, toks + depth, pos + depth, n_pp, logits, &pp[r]))) {
                cli_fail(st, "prefill");
                goto done;
            }
        pp_med = median(pp, reps);
    }
    if (n_tg > 0) {
        int warm = n_tg < 16 ? n_tg : 16;
        if ((st = run_tg_test(ctxs, ns, toks + depth, depth, warm, logits, &scratch))) {
            cli_fail(st, "decode");
            goto done;
        }
        for (int r = 0; r < reps; r++)
            if ((st = run_tg_test(ctxs, ns, toks + depth, depth, n_tg, logits, &tg[r]))) {
                cli_fail(st, "decode");
                goto done;
            }
        tg_med = median(tg, reps);
    }
    const double clock_end = kvs_core_clock_ghz(0.02);
    long long kb[3];
    read_rss(kb);
    if (!n_threads) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    double far_ms[2];
    const int far_rows = kvs_model_far_prefetch(model, far_ms);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        json_add_text(j, "model", model_path); /* (a path's raw bytes had made the JSON invalid) */
        cJSON_AddStringToObject(j, "cpu", cpu);
        cJSON_AddNumberToObject(j, "threads", n_threads);
        cJSON_AddNumberToObject(j, "reps", reps);
        cJSON_AddNumberToObject(j, "depth", depth);
        cJSON_AddStringToObject(j, "kv_type", kvs_kv_type_name(cp.kv_type));
        cJSON_AddStringToObject(j, "isa", kvs_isa_in_use());
        if (n_pp > 0) add_test(j, "pp", n_pp, 1, pp_med, pp, reps);
        if (n_tg > 0) add_test(j, "tg", n_tg, ns, tg_med, tg, reps);
        cJSON_AddNumberToObject(j, "weight_bytes", (double)info.weight_bytes);
        cJSON_AddNumberToObject(j, "rss_bytes", (double)kb[0] * 1024);
        cJSON_AddNumberToObject(j, "rss_file_bytes", (double)kb[2] * 1024);
        cJSON_AddNumberToObject(j, "rss_anon_bytes", (double)kb[1] * 1024);
        if (clock_start > 0 && clock_end > 0) {
            cJSON *ck = cJSON_AddObjectToObject(j, "core_clock_ghz");
            cJSON_AddNumberToObject(ck, "start", round(clock_start * 100) / 100);
            cJSON_AddNumberToObject(ck, "end", round(clock_end * 100) / 100);
        }
        cJSON *fp = cJSON_AddObjectToObject(j, "far_prefetch");
        cJSON_AddNumberToObject(fp, "rows", far_rows);
        if (far_ms[0] > 0) { /* the load's check: one step's matmuls, ms */
            cJSON_AddNumberToObject(fp, "ms_with", round(far_ms[0] * 1000) / 1000);
            cJSON_AddNumberToObject(fp, "ms_without", round(far_ms[1] * 1000) / 1000);
        }
        if (json_print_line(stdout, j)) goto done;
    } else {
        printf("model:   %s (%s, %.1f MB of weights)\n", model_path, info.name, info.weight_bytes / 1e6);
        printf("machine: %s, %d threads, %s KV, %s kernels\n", cpu, n_threads, kvs_kv_type_name(cp.kv_type),
               kvs_isa_in_use());
        if (clock_start > 0 && clock_end > 0) /* low or moving: a shared host was busy */
            printf("clock:   %.2f GHz before the tests, %.2f after (dependent adds on the main thread)\n",
                   clock_start, clock_end);
        if (far_ms[0] > 0)
            printf("far prefetch: %s (checked at load: a decode step's matmuls %.2f ms with it, %.2f without)\n",
                   far_rows ? "on" : "off", far_ms[0], far_ms[1]);
        else
            printf("far prefetch: %s\n", far_rows ? "on" : "off");
        printf("%-8s %12s   %s\n", "test", "tokens/s", "runs (median reported)");
        if (n_pp > 0) print_row("pp", n_pp, 1, depth, pp_med, pp, reps);
        if (n_tg > 0) print_row("tg", n_tg, ns, depth, tg_med, tg, reps);
        printf("memory:  RSS %.1f MB = %.1f MB file-backed (mmapped weights) + %.1f MB anonymous (KV, scratch%s)\n",
               kb[0] / 1024.0, kb[2] / 1024.0, kb[1] / 1024.0, ns > 1 ? "; every stream's context" : "");
    }
    rc = 0;
done:
    free(toks);
    free(pos);
    free(logits);
    free(pp);
    free(tg);
    for (int s = 0; s < ns; s++) kvs_context_free(ctxs[s]);
    kvs_model_free(model);
    return rc;
}
