/*
 * src/kv/ costs on the request path, no model needed:
 *   1. key hashing, ns per token (prefix-key chain and content keys; SHA-NI and portable),
 *      and a 64 MiB digest as the model fingerprint's weights digest takes it, MB/s
 *   2. prefix lookup of a 4096-token prompt in a radix tree holding many cached paths
 *   3. store lookup + copy-in of a 4096-token chunk chain into an engine-shaped KV buffer
 *      (SmolLM2-135M shapes: 30 layers, 3 KV heads, head_dim 64, f16 = 94 MB)
 *   4. the same from a cache directory in a fresh store (lazy load + checksum, page cache warm)
 *   5. lookups while pins hold the store over its budget (4096 chunks, every one pinned)
 * Medians over several runs. Usage: bench_kv [runs] (default 7).
 */
#include "base/sha256.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "kv/radix.h"
#include "kv/store.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void machine(void) {
    char line[256], model[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) snprintf(model, sizeof model, "%s", c + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    printf("machine: %s, %ld cores online\n", model, sysconf(_SC_NPROCESSORS_ONLN));
}

enum { NTOK = 4096, CHUNK = 64 };

static void bench_keys(int runs) {
    static int32_t t[NTOK];
    for (int i = 0; i < NTOK; i++) t[i] = (int32_t)(rnd() % 49152);
    kvs_key fp = {{1, 2, 3}};
    kvs_span spans[NTOK / CHUNK + 2];
    int n_spans;
    kvs_chunking_split(NTOK, 0, CHUNK, NULL, 0, spans, NTOK / CHUNK + 2, &n_spans);
    static kvs_key keys[NTOK / CHUNK + 2];
    for (int hw = 1; hw >= 0; hw--) {
        int on = kvs_sha256_use_hw(hw);
        if (hw && !on) continue;
        double tp[64], tc[64];
        for (int r = 0; r < runs; r++) {
            double t0 = now_s();
            for (int rep = 0; rep < 20; rep++) kvs_key_prefix_chain(&fp, t, spans, n_spans, keys);
            double t1 = now_s();
            for (int rep = 0; rep < 20; rep++)
                for (int i = 0; i < n_spans; i++)
                    kvs_key_content(&fp, t + spans[i].start, spans[i].end - spans[i].start, &keys[i]);
            double t2 = now_s();
            tp[r] = (t1 - t0) / (20.0 * NTOK) * 1e9;
            tc[r] = (t2 - t1) / (20.0 * NTOK) * 1e9;
        }
        printf("key hashing (%s SHA-256), %d-token chunks: prefix chain %.2f ns/token, content keys %.2f ns/token\n",
               on ? "SHA-NI" : "portable", CHUNK, median(tp, runs), median(tc, runs));
    }
    kvs_sha256_use_hw(1);
}

/* One large digest, as kvs_weights_digest hashes a model's tensor data (the
 * SHA-NI path had run at 10.6 MB/s there: sha256.c clean_upper_state). */
static void bench_digest(int runs) {
    const size_t n = (size_t)64 << 20;
    uint8_t *buf = malloc(n), d[32];
    if (!buf) return;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 131);
    for (int hw = 1; hw >= 0; hw--) {
        int on = kvs_sha256_use_hw(hw);
        if (hw && !on) continue;
        double mbs[64];
        for (int r = 0; r < runs; r++) {
            double t0 = now_s();
            kvs_sha256_digest(buf, n, d);
            mbs[r] = (double)n / (now_s() - t0) / 1e6;
        }
        printf("digest of 64 MiB (%s SHA-256): %.0f MB/s\n", on ? "SHA-NI" : "portable", median(mbs, runs));
    }
    kvs_sha256_use_hw(1);
    free(buf);
}

/* Many cached 4096-token paths that share prefixes of random lengths with
 * earlier ones (a tree with branches at every depth), 64-token chunks. */
static void bench_radix(int runs, int n_paths) {
    kvs_radix *r;
    kvs_radix_new(&r);
    int32_t *paths = malloc((size_t)n_paths * NTOK * sizeof(int32_t));
    static char items[1];
    double t0 = now_s();
    for (int p = 0; p < n_paths; p++) {
        int32_t *t = paths + (size_t)p * NTOK;
        int shared = p ? (int)(rnd() % NTOK) : 0;
        if (p) memcpy(t, paths + (size_t)(rnd() % (uint64_t)p) * NTOK, (size_t)shared * sizeof(int32_t));
        for (int i = shared; i < NTOK; i++) t[i] = (int32_t)(rnd() % 49152);
        for (int s = 0; s < NTOK; s += CHUNK) kvs_radix_insert(r, t, s + CHUNK, s, items, NULL);
    }
    double build = now_s() - t0;
    kvs_radix_stats st;
    kvs_radix_get_stats(r, &st);
    static kvs_radix_seg segs[NTOK + 1];
    double tl[64];
    int covered = 0;
    for (int k = 0; k < runs; k++) {
        const int32_t *q = paths + (size_t)(rnd() % (uint64_t)n_paths) * NTOK;
        kvs_radix_match m;
        double a = now_s();
        for (int rep = 0; rep < 100; rep++) kvs_radix_lookup(r, q, NTOK, segs, NTOK + 1, &m);
        tl[k] = (now_s() - a) / 100 * 1e6;
        covered = m.n_covered;
    }
    printf("radix: %d cached %d-token paths (%zu nodes, %zu items, %.1f MB), built in %.2f s; "
           "lookup of a %d-token prompt: %.1f us (covered %d)\n",
           n_paths, NTOK, st.n_nodes, st.n_items, (double)st.bytes / 1e6, build, NTOK, median(tl, runs), covered);
    kvs_radix_free(r);
    free(paths);
}

/* Engine-shaped KV buffer: per layer K and V of (n_kv_head, n_ctx, head_dim). */
typedef struct kvbuf {
    kvs_kv_buffer view;
} kvbuf;

static void kvbuf_init(kvbuf *b, const kvs_kv_shape *s, int n_ctx, int fill) {
    if (kvs_kv_buffer_init(&b->view, s->n_layer, s->n_kv_head, n_ctx, s->head_dim, s->dtype)) abort();
    uint64_t *p = b->view.data;
    for (size_t i = 0; fill && i < kvs_kv_buffer_bytes(&b->view) / 8; i++) p[i] = rnd();
}

static void kvbuf_free(kvbuf *b, int n_layer) {
    (void)n_layer;
    kvs_kv_buffer_release(&b->view);
}

static int rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    return rmdir(dir);
}

static void bench_copy_and_disk(int runs) {
    const kvs_kv_shape smol = {30, 3, 64, KVS_KV_F16};
    size_t bytes = kvs_kv_payload_bytes(&smol, NTOK);
    static int32_t t[NTOK];
    for (int i = 0; i < NTOK; i++) t[i] = (int32_t)(rnd() % 49152);
    kvs_key fp = {{9, 8, 7}};
    kvbuf src, dst;
    kvbuf_init(&src, &smol, NTOK, 1);
    kvbuf_init(&dst, &smol, NTOK, 0);

    char dir[] = "/tmp/kvs_bench_XXXXXX";
    if (!mkdtemp(dir)) return;
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = (size_t)2 << 30;
    p.cache_dir = dir;
    kvs_store *s;
    if (kvs_store_open(&fp, &smol, p, &s)) return;
    double a = now_s();
    kvs_put_report rep;
    kvs_store_put_prefix(s, t, NTOK, CHUNK, NULL, 0, &src.view, &rep);
    double put_s = now_s() - a;
    printf("store put of %d tokens (%d chunks, %.1f MB, copy-out + write-through to %s): %.1f ms\n", NTOK, rep.n_new,
           (double)bytes / 1e6, dir, put_s * 1e3);

    double tl[64], tc[64], ti[64];
    for (int r = 0; r < runs; r++) {
        kvs_prefix_hit hit;
        double a0 = now_s();
        kvs_store_lookup_into(s, t, NTOK, &dst.view, &hit);
        ti[r] = (now_s() - a0) * 1e3;
        kvs_prefix_hit_release(&hit);
        double t0 = now_s();
        kvs_store_lookup_prefix(s, t, NTOK, &hit);
        double t1 = now_s();
        kvs_prefix_hit_copy_to_kv(&hit, &dst.view);
        double t2 = now_s();
        tl[r] = (t1 - t0) * 1e3;
        tc[r] = (t2 - t1) * 1e3;
        kvs_prefix_hit_release(&hit);
    }
    double ml = median(tl, runs), mc = median(tc, runs);
    printf("in memory, %d-token hit: lookup %.3f ms, copy-in %.2f ms (%.1f GB/s), total %.2f ms; "
           "lookup_into %.2f ms\n",
           NTOK, ml, mc, (double)bytes / (mc * 1e-3) / 1e9, ml + mc, median(ti, runs));
    /* the machine's plain memcpy of the same bytes, for scale */
    void *ma = malloc(bytes), *mb = malloc(bytes);
    memset(ma, 1, bytes);
    memset(mb, 2, bytes);
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        memcpy(mb, ma, bytes);
        tc[r] = (now_s() - t0) * 1e3;
    }
    printf("  (one plain memcpy of %.1f MB on this machine: %.2f ms)\n", (double)bytes / 1e6, median(tc, runs));
    free(ma);
    free(mb);
    kvs_store_free(s);

    double to[64], tld[64], tcd[64];
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        if (kvs_store_open(&fp, &smol, p, &s)) return;
        double t1 = now_s();
        kvs_prefix_hit hit;
        kvs_store_lookup_prefix(s, t, NTOK, &hit);
        double t2 = now_s();
        kvs_prefix_hit_copy_to_kv(&hit, &dst.view);
        double t3 = now_s();
        if (hit.n_cached != NTOK) printf("  disk hit served only %d tokens\n", hit.n_cached);
        kvs_prefix_hit_release(&hit);
        kvs_store_free(s);
        to[r] = (t1 - t0) * 1e3;
        tld[r] = (t2 - t1) * 1e3;
        tcd[r] = (t3 - t2) * 1e3;
    }
    double mo = median(to, runs), md = median(tld, runs), mcd = median(tcd, runs);
    printf("from disk, fresh store, lookup_prefix (load resident + verify) then copy-in: open (index %d headers) "
           "%.2f ms, lookup+load %.1f ms, copy-in %.2f ms, total %.1f ms\n",
           rep.n_new, mo, md, mcd, mo + md + mcd);
    /* the one-shot path: read straight into the KV buffer */
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        if (kvs_store_open(&fp, &smol, p, &s)) return;
        double t1 = now_s();
        kvs_prefix_hit hit;
        kvs_store_lookup_into(s, t, NTOK, &dst.view, &hit);
        double t2 = now_s();
        if (hit.n_cached != NTOK) printf("  disk hit served only %d tokens\n", hit.n_cached);
        kvs_prefix_hit_release(&hit);
        kvs_store_free(s);
        to[r] = (t1 - t0) * 1e3;
        tld[r] = (t2 - t1) * 1e3;
    }
    mo = median(to, runs);
    md = median(tld, runs);
    printf("from disk, fresh store, lookup_into (read straight into the KV buffer + verify): open %.2f ms, "
           "lookup+read %.1f ms (%.1f GB/s), total %.1f ms\n",
           mo, md, (double)bytes / (md * 1e-3) / 1e9, mo + md);
    rm_tree(dir);
    kvbuf_free(&src, smol.n_layer);
    kvbuf_free(&dst, smol.n_layer);
}

/* Lookups while pins hold the store over its budget (a server whose
 * requests in flight pin more than the budget holds): n_pinned one-chunk
 * prompts, every one pinned, the budget half of them; then LOOKUPS pin +
 * release pairs of a pinned chunk a run. Every lookup ends with the budget's
 * enforcement, which had walked all n_pinned chunks under the write lock
 * each time to find none unpinned. */
static void bench_pinned_over_budget(int runs, int n_pinned) {
    const kvs_kv_shape tiny = {2, 2, 16, KVS_KV_F16};
    enum { T = 16, LOOKUPS = 20000 };
    kvs_key fp = {{3, 1, 4}};
    kvbuf src;
    kvbuf_init(&src, &tiny, T, 1);
    kvs_store_params p = kvs_store_default_params();
    const size_t one = sizeof(kvs_chunk) + T * sizeof(int32_t) + kvs_kv_payload_bytes(&tiny, T);
    p.budget_bytes = one * (size_t)n_pinned / 2;
    kvs_store *s;
    if (kvs_store_open(&fp, &tiny, p, &s)) return;
    kvs_chunk **pins = calloc((size_t)n_pinned, sizeof *pins);
    kvs_key *keys = calloc((size_t)n_pinned, sizeof *keys);
    int32_t t[T];
    for (int i = 0; i < n_pinned; i++) {
        for (int j = 0; j < T; j++) t[j] = (int32_t)(rnd() % 49152);
        kvs_put_report rep;
        kvs_store_put_prefix(s, t, T, T, NULL, 0, &src.view, &rep);
        kvs_key_prefix(&fp, t, T, &keys[i]);
        if (kvs_store_get(s, &keys[i], &pins[i])) pins[i] = NULL;
    }
    kvs_store_stats st0, st1;
    kvs_store_get_stats(s, &st0);
    double tl[64];
    for (int r = 0; r < runs; r++) {
        double a = now_s();
        for (int i = 0; i < LOOKUPS; i++) {
            kvs_chunk *c = NULL;
            if (!kvs_store_get(s, &keys[rnd() % (uint64_t)n_pinned], &c)) kvs_chunk_unref(c);
        }
        tl[r] = (now_s() - a) / LOOKUPS * 1e6;
    }
    kvs_store_get_stats(s, &st1);
    printf("store over budget, %d chunks pinned (%.1f MB, budget %.1f MB): lookup + release %.2f us "
           "(%.0f / s); eviction walks during the lookups: %llu\n",
           (int)st1.entries, (double)st1.bytes / 1e6, (double)st1.budget_bytes / 1e6, median(tl, runs),
           1e6 / median(tl, runs), (unsigned long long)(st1.evict_walks - st0.evict_walks));
    for (int i = 0; i < n_pinned; i++) kvs_chunk_unref(pins[i]);
    free(pins);
    free(keys);
    kvs_store_free(s);
    kvbuf_free(&src, tiny.n_layer);
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 7;
    if (runs < 1) runs = 1;
    if (runs > 64) runs = 64;
    machine();
    printf("(medians of %d runs; the machine is shared, so timings are noisy)\n", runs);
    bench_keys(runs);
    bench_digest(runs);
    bench_radix(runs, 1000);
    bench_copy_and_disk(runs);
    bench_pinned_over_budget(runs, 4096);
    return 0;
}
