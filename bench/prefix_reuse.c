/*
 * Time to first token, cold vs warm (exact prefix reuse), on the real model.
 *
 * For prompts of 512, 1024, 2048 and 4096 tokens (real text: MuSiQue
 * passages) and overlaps of 50%, 90% and 95%: prompt A (N tokens) is cached,
 * then prompt B shares its first overlap*N tokens and continues with other
 * text to N tokens. Measured per point, medians of --reps runs, side by side
 * in one process:
 *   cold         kvs_generate(B), no cache: prefill N tokens + first token
 *   warm (mem)   kvs_generate_cached(B) with A's chunks in memory
 *   warm (disk)  the same from a fresh cache opened on the directory A was
 *                written to (what a new process sees; files in the page cache)
 *   lookup       the store's prefix lookup alone (radix walk + pins), mem
 *   copy         the KV copy into the context (assemble_ms - lookup)
 *   overhead     (lookup + copy) / warm TTFT
 * B is never stored (store = 0), so every warm run reuses exactly the
 * overlap. Each repetition runs the three back to back (load drift on a
 * shared machine then affects cold and warm alike). Every warm run is checked against the cold run's first logits
 * (memcmp): the benchmark fails if reuse is not bit-exact.
 *
 * usage: prefix_reuse [-m MODEL] [--reps N] [--threads N] [--sizes 512,1024,...]
 * MODEL defaults to $KVSTITCH_MODEL, then the fetch cache
 * (${KVSTITCH_CACHE:-~/.cache/kvstitch}/models/SmolLM2-135M-Instruct.Q4_1.gguf).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv/store.h"
#include "kvstitch.h"
#include "bench_util.h"
#include "cache/cache.h"

#define MAX_SIZES 8
#define N_OVERLAPS 3

static const int overlaps[N_OVERLAPS] = {50, 90, 95};


static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* Token ids of the JSON file's text (real prose; the JSON punctuation does
 * not matter for timing), from byte offset `from`; pseudo-random ids if the
 * file is missing. */
static int32_t *text_tokens(const kvs_model *m, const char *shared, size_t from, int n) {
    size_t cap = (size_t)n * 8 + 64; /* at most a token a byte */
    int32_t *ids = malloc(cap * sizeof *ids);
    char path[1024];
    snprintf(path, sizeof path, "%s/data/musique_dev.json", shared);
    char *text = read_file(path);
    int got = 0;
    if (text && strlen(text) > from) {
        char *t = text + from;
        while (((unsigned char)*t & 0xC0) == 0x80) t++;
        size_t len = strlen(t);
        if (len > (size_t)n * 8) len = (size_t)n * 8; /* ~4 bytes a token: plenty */
        while (len && ((unsigned char)t[len] & 0xC0) == 0x80) len--;
        if (kvs_tokenize(m, t, len, 0, ids, (int)cap, &got) != KVS_OK) got = 0;
    }
    free(text);
    if (got < n) {
        fprintf(stderr, "prefix_reuse: %s not usable, using pseudo-random token ids\n", path);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)(((int64_t)i * 7919 + from) % 40000 + 100);
    }
    return ids;
}

static const char *default_model(char *buf, size_t cap) {
    const char *e = getenv("KVSTITCH_MODEL");
    if (e && *e) return e;
    const char *c = getenv("KVSTITCH_CACHE"), *h = getenv("HOME");
    if (c && *c) snprintf(buf, cap, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", c);
    else snprintf(buf, cap, "%s/.cache/kvstitch/models/SmolLM2-135M-Instruct.Q4_1.gguf", h ? h : "");
    return buf;
}

typedef struct point {
    int n, overlap, cached;
    double cold, warm, warm_disk, lookup, assemble, assemble_disk;
    int exact;
} point;

int main(int argc, char **argv) {
    char mbuf[1024];
    const char *model_path = default_model(mbuf, sizeof mbuf);
    int reps = 3, threads = 2, sizes[MAX_SIZES] = {512, 1024, 2048, 4096}, n_sizes = 4;
    const char *env_threads = getenv("BENCH_THREADS"), *env_reps = getenv("BENCH_REPS");
    if (env_threads && atoi(env_threads) > 0) threads = atoi(env_threads);
    if (env_reps && atoi(env_reps) > 0) reps = atoi(env_reps);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            n_sizes = 0;
            for (char *s = strtok(argv[++i], ","); s && n_sizes < MAX_SIZES; s = strtok(NULL, ",")) sizes[n_sizes++] = atoi(s);
        } else {
            fprintf(stderr, "usage: prefix_reuse [-m MODEL] [--reps N] [--threads N] [--sizes 512,1024,...]\n");
            return 2;
        }
    }
    if (reps < 1 || threads < 1 || n_sizes < 1) return 2;
    int max_n = 0;
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] < 16) return 2;
        if (sizes[i] > max_n) max_n = sizes[i];
    }

    kvs_model *model = NULL;
    if (kvs_model_load(model_path, kvs_model_default_params(), &model)) {
        fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
        return 1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = max_n + 8;
    cp.n_threads = threads;
    kvs_context *ctx = NULL;
    if (kvs_context_new(model, cp, &ctx)) {
        fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
        return 1;
    }
    const char *shared = getenv("KVSTITCH_SHARED");
    if (!shared || !*shared) shared = "../shared";
    int32_t *base = text_tokens(model, shared, 0, max_n);        /* A and B's shared part */
    int32_t *other = text_tokens(model, shared, 200000, max_n);  /* B's own continuation */
    char dir[] = "/tmp/kvs_prefix_reuse_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    double t_open = bench_now_ms();
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = dir;
    kvs_cache *mem = NULL;
    if (kvs_cache_open(model, pp, &mem)) {
        fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
        return 1;
    }
    t_open = bench_now_ms() - t_open;

    char cpu[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) snprintf(cpu, sizeof cpu, "%s", c + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    double load = 0;
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = 0;
        fclose(f);
    }
    printf("prefix_reuse: %s, %ld cores, %d threads, load %.2f (a shared machine: timings are noisy)\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), threads, load);
    printf("model %s; medians of %d runs; cache open (fingerprint) %.0f ms\n\n", model_path, reps, t_open);

    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1;
    gp.sampling.temperature = 0;
    gp.n_top_logprobs = 0;
    kvs_reuse_params nostore = kvs_reuse_default_params();
    nostore.store = 0;
    int32_t *b = malloc((size_t)max_n * sizeof *b);
    double *t = malloc((size_t)reps * sizeof *t), *t2 = malloc((size_t)reps * sizeof *t2);
    double *t3 = malloc((size_t)reps * sizeof *t3), *t4 = malloc((size_t)reps * sizeof *t4);
    double *t5 = malloc((size_t)reps * sizeof *t5), *t6 = malloc((size_t)reps * sizeof *t6);
    point pts[MAX_SIZES * N_OVERLAPS];
    int n_pts = 0, all_exact = 1;
    float *cold_logits = NULL;

    for (int si = 0; si < n_sizes; si++) {
        int n = sizes[si];
        /* A = base[0..n): cache it (a warm of its whole length) */
        kvs_cache_clear(mem, 1);
        kvs_warm_report wr;
        if (kvs_warm(ctx, mem, base, n, &wr)) {
            fprintf(stderr, "prefix_reuse: warm: %s\n", kvs_last_error());
            return 1;
        }
        for (int oi = 0; oi < N_OVERLAPS; oi++) {
            point *p = &pts[n_pts++];
            memset(p, 0, sizeof *p);
            p->n = n;
            p->overlap = overlaps[oi];
            int shared_n = (int)((long)n * overlaps[oi] / 100);
            memcpy(b, base, (size_t)shared_n * sizeof *b);
            memcpy(b + shared_n, other, (size_t)(n - shared_n) * sizeof *b);
            if (b[shared_n] == base[shared_n]) b[shared_n] = (b[shared_n] + 1) % 40000; /* diverge exactly there */
            /* Each rep runs cold, warm (memory) and warm (disk) back to back,
             * so that load changes on a shared machine hit all three alike. */
            p->exact = 1;
            kvs_generate_result r;
            for (int k = 0; k < reps; k++) {
                if (kvs_generate(ctx, b, n, &gp, &r)) {
                    fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
                    return 1;
                }
                t6[k] = r.ttft_ms;
                free(cold_logits);
                cold_logits = r.first_logits; /* B's reference bits */
                r.first_logits = NULL;
                kvs_generate_result_free(&r);
                /* warm from memory, and the lookup alone */
                kvs_prefix_hit hit;
                double l0 = bench_now_ms();
                kvs_store_lookup_prefix(mem->store, b, n - 1, &hit);
                t3[k] = bench_now_ms() - l0;
                kvs_prefix_hit_release(&hit);
                if (kvs_generate_cached(ctx, mem, b, n, &gp, &nostore, &r)) {
                    fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
                    return 1;
                }
                t[k] = r.ttft_ms;
                t4[k] = r.timings.lookup_ms;
                p->cached = r.reuse->n_cached;
                p->exact &= !memcmp(r.first_logits, cold_logits, (size_t)r.n_vocab * sizeof(float));
                kvs_generate_result_free(&r);
                /* warm from the directory, through a fresh cache */
                kvs_cache *fresh = NULL;
                if (kvs_cache_open(model, pp, &fresh) || kvs_generate_cached(ctx, fresh, b, n, &gp, &nostore, &r)) {
                    fprintf(stderr, "prefix_reuse: %s\n", kvs_last_error());
                    return 1;
                }
                t2[k] = r.ttft_ms;
                t5[k] = r.timings.lookup_ms;
                p->exact &= r.reuse->n_cached == p->cached &&
                            !memcmp(r.first_logits, cold_logits, (size_t)r.n_vocab * sizeof(float));
                kvs_generate_result_free(&r);
                kvs_cache_free(fresh);
            }
            p->cold = bench_median(t6, reps);
            p->warm = bench_median(t, reps);
            p->lookup = bench_median(t3, reps);
            p->assemble = bench_median(t4, reps);
            p->warm_disk = bench_median(t2, reps);
            p->assemble_disk = bench_median(t5, reps);
            all_exact &= p->exact;
            fprintf(stderr, "  %d tokens, %d%%: cold %.1f ms, warm %.1f ms\n", n, p->overlap, p->cold, p->warm);
        }
    }

    printf("%6s %7s %6s %5s | %9s | %9s %7s | %9s %7s | %8s %8s %8s | %s\n", "prompt", "overlap", "cached", "live",
           "cold ms", "warm ms", "speedup", "disk ms", "speedup", "lookup", "copy", "overhead", "exact");
    for (int i = 0; i < n_pts; i++) {
        point *p = &pts[i];
        double copy = p->assemble - p->lookup;
        if (copy < 0) copy = 0;
        printf("%6d %6d%% %6d %5d | %9.1f | %9.1f %6.1fx | %9.1f %6.1fx | %6.3fms %6.2fms %7.1f%% | %s\n", p->n,
               p->overlap, p->cached, p->n - p->cached, p->cold, p->warm, p->cold / p->warm, p->warm_disk,
               p->cold / p->warm_disk, p->lookup, copy, 100.0 * p->assemble / p->warm, p->exact ? "yes" : "NO");
    }
    printf("\nwarm ms = TTFT with the prefix served from the cache in memory (lookup + KV copy + prefill of the\n"
           "live tokens + first logits + sampling); disk ms = the same from a fresh cache on the directory\n"
           "(entries read straight into the context and checksummed; page cache warm); overhead = lookup +\n"
           "copy as a share of the warm TTFT; exact = first logits memcmp-equal to the cold run.\n");
    for (int i = 0; i < n_pts; i++)
        if (pts[i].overlap == 95 && (pts[i].n == 512 || pts[i].n == 4096))
            printf("target at %d tokens, 95%%: %s %.1fx (memory), %.1fx (disk)%s\n", pts[i].n,
                   pts[i].n == 512 ? ">= 6x:" : ">= 15x:", pts[i].cold / pts[i].warm, pts[i].cold / pts[i].warm_disk,
                   pts[i].n == 4096 ? "; overhead target < 5%" : "");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "prefix_reuse: could not remove %s\n", dir);
    free(cold_logits);
    free(t6);
    free(b);
    free(t);
    free(t2);
    free(t3);
    free(t4);
    free(t5);
    free(base);
    free(other);
    kvs_cache_free(mem);
    kvs_context_free(ctx);
    kvs_model_free(model);
    if (!all_exact) {
        printf("prefix_reuse: FAILED: a warm run differs from its cold run\n");
        return 1;
    }
    return 0;
}
