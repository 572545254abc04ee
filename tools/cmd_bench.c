/*
 * kvstitch bench: prefill (pp) and decode (tg) tokens/s like llama-bench, the
 * median over repetitions after one warm-up, plus resident memory split into
 * file-backed pages (the mmapped weights) and anonymous pages (KV, scratch).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch bench -m MODEL [-p 512] [-n 128] [--reps 3] [--threads N] [--json]\n"
    "  -m, --model PATH   GGUF file\n"
    "  -p N               prompt tokens for the prefill test (0 = skip; default 512)\n"
    "  -n N               tokens for the decode test (0 = skip; default 128)\n"
    "  --reps N           repetitions; the median is reported (default 3)\n"
    "  --threads N        worker threads (default: all cores)\n"
    "  --batch N          tokens per forward chunk in prefill (default 512)\n"
    "  --json             one JSON object instead of a table\n"
    "Prompt tokens are pseudo-random ids; the decode test starts from an empty context.\n";

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

static void print_row(const char *kind, int n, double med, const double *runs, int reps) {
    char name[32];
    snprintf(name, sizeof name, "%s%d", kind, n);
    printf("%-8s %12.2f   [", name, med);
    for (int r = 0; r < reps; r++) printf(r ? ", %.1f" : "%.1f", runs[r]);
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
        while (*c == ' ' || *c == '\t') c++;
        snprintf(buf, cap, "%s", c);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* One prefill of n tokens at positions 0..n-1; returns tokens/s. */
static int run_pp(kvs_context *ctx, const int32_t *toks, const int32_t *pos, int n, float *logits, double *tok_s) {
    double t = now_ms();
    int st = kvs_decode(ctx, toks, pos, n, logits);
    *tok_s = n * 1000.0 / (now_ms() - t);
    return st;
}

/* n single-token decodes at positions 0..n-1; returns tokens/s. */
static int run_tg(kvs_context *ctx, const int32_t *toks, int n, float *logits, double *tok_s) {
    double t = now_ms();
    for (int i = 0; i < n; i++) {
        int32_t p = i;
        int st = kvs_decode(ctx, &toks[i], &p, 1, logits);
        if (st) return st;
    }
    *tok_s = n * 1000.0 / (now_ms() - t);
    return KVS_OK;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL;
    int n_pp = 512, n_tg = 128, reps = 3, n_threads = 0, n_batch = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!v) return cli_usage_error("bench", "unknown option or missing value: %s", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = argv[++i];
        else if (!strcmp(a, "-p")) bad = cli_parse_int(a, argv[++i], &n_pp);
        else if (!strcmp(a, "-n")) bad = cli_parse_int(a, argv[++i], &n_tg);
        else if (!strcmp(a, "--reps")) bad = cli_parse_int(a, argv[++i], &reps);
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(a, argv[++i], &n_threads);
        else if (!strcmp(a, "--batch")) bad = cli_parse_int(a, argv[++i], &n_batch);
        else return cli_usage_error("bench", "unknown option: %s", a);
        if (bad) return 2;
    }
    if (!model_path) return cli_usage_error("bench", "-m MODEL is required");
    if (n_pp < 0 || n_tg < 0 || (n_pp == 0 && n_tg == 0)) return cli_usage_error("bench", "-p and -n must be >= 0, not both 0");
    if (reps < 1 || reps > 1000) return cli_usage_error("bench", "--reps must be in 1..1000, got %d", reps);
    if (n_threads < 0 || n_batch < 0) return cli_usage_error("bench", "--threads and --batch must be >= 0");

    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    int st = kvs_model_load(model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) return cli_fail(st, model_path);
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = n_pp > n_tg ? n_pp : n_tg;
    cp.n_threads = n_threads;
    cp.n_batch = n_batch;
    int rc = 1, n_max = cp.n_ctx;
    int32_t *toks = malloc((size_t)n_max * sizeof *toks), *pos = malloc((size_t)n_max * sizeof *pos);
    float *logits = malloc((size_t)kvs_vocab_size(model) * sizeof *logits);
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    if (!toks || !pos || !logits || !pp || !tg) { fprintf(stderr, "kvstitch bench: out of memory\n"); goto done; }
    if ((st = kvs_context_new(model, cp, &ctx)) != KVS_OK) { cli_fail(st, "context"); goto done; }

    /* A fixed LCG stream of ids: the same prompt every run, no tokenizer involved. */
    uint64_t x = 42;
    for (int i = 0; i < n_max; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)info.n_vocab);
        pos[i] = i;
    }
    double pp_med = 0, tg_med = 0, scratch;
    if (n_pp > 0) {
        if ((st = run_pp(ctx, toks, pos, n_pp, logits, &scratch))) { cli_fail(st, "prefill"); goto done; }
        for (int r = 0; r < reps; r++)
            if ((st = run_pp(ctx, toks, pos, n_pp, logits, &pp[r]))) { cli_fail(st, "prefill"); goto done; }
        pp_med = median(pp, reps);
    }
    if (n_tg > 0) {
        int warm = n_tg < 16 ? n_tg : 16;
        if ((st = run_tg(ctx, toks, warm, logits, &scratch))) { cli_fail(st, "decode"); goto done; }
        for (int r = 0; r < reps; r++)
            if ((st = run_tg(ctx, toks, n_tg, logits, &tg[r]))) { cli_fail(st, "decode"); goto done; }
        tg_med = median(tg, reps);
    }
    long long kb[3];
    read_rss(kb);
    if (!n_threads) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, model_path, strlen(model_path));
        printf(", \"cpu\": ");
        cli_json_string(stdout, cpu, strlen(cpu));
        printf(", \"threads\": %d, \"reps\": %d", n_threads, reps);
        if (n_pp > 0) {
            printf(", \"pp\": {\"n\": %d, \"tok_s\": %.2f, \"runs\": [", n_pp, pp_med);
            for (int r = 0; r < reps; r++) printf(r ? ", %.2f" : "%.2f", pp[r]);
            printf("]}");
        }
        if (n_tg > 0) {
            printf(", \"tg\": {\"n\": %d, \"tok_s\": %.2f, \"runs\": [", n_tg, tg_med);
            for (int r = 0; r < reps; r++) printf(r ? ", %.2f" : "%.2f", tg[r]);
            printf("]}");
        }
        printf(", \"weight_bytes\": %llu, \"rss_bytes\": %lld, \"rss_file_bytes\": %lld, \"rss_anon_bytes\": %lld}\n",
               (unsigned long long)info.weight_bytes, kb[0] * 1024, kb[2] * 1024, kb[1] * 1024);
    } else {
        printf("model:   %s (%s, %.1f MB of weights)\n", model_path, info.name, info.weight_bytes / 1e6);
        printf("machine: %s, %d threads\n", cpu, n_threads);
        printf("%-8s %12s   %s\n", "test", "tokens/s", "runs (median reported)");
        if (n_pp > 0) print_row("pp", n_pp, pp_med, pp, reps);
        if (n_tg > 0) print_row("tg", n_tg, tg_med, tg, reps);
        printf("memory:  RSS %.1f MB = %.1f MB file-backed (mmapped weights) + %.1f MB anonymous (KV, scratch)\n",
               kb[0] / 1024.0, kb[2] / 1024.0, kb[1] / 1024.0);
    }
    rc = 0;
done:
    free(toks);
    free(pos);
    free(logits);
    free(pp);
    free(tg);
    kvs_context_free(ctx);
    kvs_model_free(model);
    return rc;
}
