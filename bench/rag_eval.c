/*
 * rag_eval: latency and quality of non-prefix reuse on RAG prompts.
 *
 * Data (../shared/data, from the CacheBlend authors' inputs/):
 *   MuSiQue dev   the first 6 passages of each item as docs, in their given
 *                 order and again shuffled (the docs then come from the cache
 *                 at other positions); gold answers for F1 / EM
 *   2WikiMQA dev  the given chunks as docs, the given query as the question
 * Every prompt is a chat: a system message with the instruction, the docs
 * and the question in the user turn (src/rag/segments.h); --plain lays the
 * same segments out as plain text (BOS, system, docs, question) for base
 * models without a chat template.
 *
 * Per strategy, against `full` (a cold prefill of the same tokens):
 *   latency   TTFT median with the docs cached (the system segment is an
 *             exact prefix hit); speedup over full; TTFT of a cold run
 *             (empty cache: the docs are computed and stored on the way)
 *             and the speedup of the cached run over it
 *   fidelity  KL(full || strategy) of the first-token distribution; top-1
 *             agreement over the first 32 tokens teacher-forced on full's
 *             greedy output; rate of greedy outputs identical to full's
 *   quality   answer F1 and exact match against the gold answers
 *             (MuSiQue; SQuAD normalisation), next to full's
 *
 * Usage: rag_eval [--standard] [--items N | --all] [--skip N] [--wiki N]
 *                 [--ratios LIST] [--sweep] [--configs LIST] [--tag NAME]
 *                 [--cold-items N] [--reps N] [--n-gen N] [--threads N]
 *                 [--out DIR] [--model PATH] [--data DIR]
 * Without arguments a quick smoke run (2 items, a few strategies: what
 * `make bench` runs); bench/rag_eval.sh runs --standard and draws the chart.
 * Writes DIR/rag_eval.md (table, machine, commit) and DIR/rag_eval.tsv.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/context.h"
#include "kvstitch.h"
#include "rag_data.h"
#include "cache/cache.h"
#include "rag/segment_gen.h"

#define MAX_CFG 32

/* ---------------------------------------------------------------------- */
/* answer scoring: SQuAD-style normalisation                               */

/* lower case, drop ASCII punctuation, drop the articles a/an/the, collapse
 * whitespace; writes words separated by single spaces. */
static void normalize(const char *s, char *out, size_t cap) {
    char *tmp = malloc(strlen(s) + 1);
    size_t k = 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 128 && ispunct(c)) continue;
        tmp[k++] = (char)(c < 128 ? tolower(c) : c);
    }
    tmp[k] = 0;
    size_t o = 0;
    char *save = NULL;
    for (char *w = strtok_r(tmp, " \t\n\r", &save); w; w = strtok_r(NULL, " \t\n\r", &save)) {
        if (!strcmp(w, "a") || !strcmp(w, "an") || !strcmp(w, "the")) continue;
        size_t wl = strlen(w);
        if (o + wl + 2 > cap) break;
        if (o) out[o++] = ' ';
        memcpy(out + o, w, wl);
        o += wl;
    }
    out[o] = 0;
    free(tmp);
}

static int split_words(char *s, char **w, int cap) {
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, " ", &save); t && n < cap; t = strtok_r(NULL, " ", &save)) w[n++] = t;
    return n;
}

/* Token-overlap F1 of two normalised strings (multiset intersection). */
static double f1_norm(const char *pred, const char *gold) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s", pred);
    snprintf(b, sizeof b, "%s", gold);
    char *wa[128], *wb[128];
    int na = split_words(a, wa, 128), nb = split_words(b, wb, 128);
    if (na == 0 || nb == 0) return na == nb ? 1.0 : 0.0;
    int used[128] = {0}, common = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (!used[j] && !strcmp(wa[i], wb[j])) {
                used[j] = 1;
                common++;
                break;
            }
    if (!common) return 0.0;
    double p = (double)common / na, r = (double)common / nb;
    return 2 * p * r / (p + r);
}

/* The answer part of a generation: the first non-empty line. */
static void answer_of(const char *text, char *out, size_t cap) {
    while (*text == '\n' || *text == ' ') text++;
    size_t n = strcspn(text, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, text, n);
    out[n] = 0;
}

/* "Answer found": the strategy's answer (first line, normalised) equals
 * full prefill's. On a 135M model the gold answer is often missed by full
 * itself, so agreement with full says whether reuse changed the answer. */
static int same_answer(const char *full_text, const char *text) {
    char a[512], b[512], na[1024], nb[1024];
    answer_of(full_text, a, sizeof a);
    answer_of(text, b, sizeof b);
    normalize(a, na, sizeof na);
    normalize(b, nb, sizeof nb);
    return !strcmp(na, nb);
}

static void score(const item *it, const char *text, double *f1, double *em) {
    char ans[512], np[1024], ng[1024];
    answer_of(text, ans, sizeof ans);
    normalize(ans, np, sizeof np);
    *f1 = *em = 0.0;
    for (int i = 0; i < it->n_answers; i++) {
        normalize(it->answers[i], ng, sizeof ng);
        double f = f1_norm(np, ng);
        if (f > *f1) *f1 = f;
        if (!strcmp(np, ng)) *em = 1.0;
    }
}

/* ---------------------------------------------------------------------- */
/* statistics                                                               */

typedef struct series {
    double *v;
    int n, cap;
} series;

static void push(series *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 32;
        s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const series *s) {
    if (!s->n) return NAN;
    double *t = malloc((size_t)s->n * sizeof *t);
    memcpy(t, s->v, (size_t)s->n * sizeof *t);
    qsort(t, (size_t)s->n, sizeof *t, cmp_d);
    double m = s->n % 2 ? t[s->n / 2] : 0.5 * (t[s->n / 2 - 1] + t[s->n / 2]);
    free(t);
    return m;
}

static double mean(const series *s) {
    if (!s->n) return NAN;
    double a = 0;
    for (int i = 0; i < s->n; i++) a += s->v[i];
    return a / s->n;
}

typedef struct cfg {
    char name[48];
    kvs_repair_params rp;
    double param;            /* cacheblend: ratio; selective: overlap; firstk: k */
    int baked;               /* 1: moves the docs' baked chunks (--bake), 0: the plain ones */
    int recal;               /* 1: APE's recalibration of the question and output (--recal T,S) */
    series ttft, kl, top1, exact, same_answer, f1, em, frac, cost, ttft_full_pair;
    /* cold runs (empty cache) and, for the same prompts, the cached run and full */
    series ttft_cold, ttft_cold_cached, ttft_cold_full;
} cfg;

/* Pseudo modes for the configs: cacheblend with cacheblend_seams = 1, and
 * either with gradual narrowing from NARROW_X times the ratio. */
#define CFG_CB_SEAMS ((kvs_repair_mode)100)
#define CFG_CB_NARROW ((kvs_repair_mode)101)
#define CFG_CB_SEAMS_NARROW ((kvs_repair_mode)102)
#define CFG_QUERY_SEAMS ((kvs_repair_mode)103)
#define NARROW_X 3.0

static const char *cfg_strategy_base(const cfg *c) {
    if (c->rp.mode == KVS_REPAIR_QUERY) return c->rp.query_seams ? "query+seams" : "query";
    if (c->rp.mode != KVS_REPAIR_CACHEBLEND) return kvs_repair_mode_name(c->rp.mode);
    if (c->rp.narrow_from > 0) return c->rp.cacheblend_seams ? "cacheblend+seams+narrow" : "cacheblend+narrow";
    return c->rp.cacheblend_seams ? "cacheblend+seams" : "cacheblend";
}

/* The strategy's name for the chart's lines ("+recal" recalibrated, "+bake"
 * on baked docs). */
static const char *cfg_strategy(const cfg *c) {
    static char buf[8][64];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 64, "%s%s%s", cfg_strategy_base(c), c->recal ? "+recal" : "", c->baked ? "+bake" : "");
    return b;
}


/* ---------------------------------------------------------------------- */
/* measurements                                                             */

typedef struct ev {
    kvs_model *model;
    kvs_context *ctx;
    kvs_cache *cache;
    int n_gen, n_vocab, n_layer;
    int reps;                 /* TTFT = the fastest of this many identical runs (the outputs are the same bits) */
    int plain;                /* 1: no chat template (base models): system, docs, question as plain text */
    float *tf_logits;         /* (n_gen, n_vocab) teacher-forcing logits */
    int32_t *pos;
} ev;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Top-1 agreement with full's greedy tokens, teacher-forced: the prompt KV
 * the strategy built is still in the context (slots [0, n_prompt)); full's
 * tokens are fed after it and each position's argmax is compared with
 * full's next token. */
static double teacher_forced(ev *e, int n_prompt, const kvs_generate_result *full, const float *first_logits) {
    int m = full->n_tokens < e->n_gen ? full->n_tokens : e->n_gen;
    if (m <= 0) return NAN;
    int agree = argmax(first_logits, e->n_vocab) == full->tokens[0];
    if (m > 1) {
        for (int i = 0; i < m - 1; i++) e->pos[i] = n_prompt + i;
        if (kvs_decode_logits(e->ctx, full->tokens, e->pos, m - 1, e->tf_logits, m - 1) != KVS_OK) return NAN;
        for (int i = 1; i < m; i++)
            agree += argmax(e->tf_logits + (size_t)(i - 1) * e->n_vocab, e->n_vocab) == full->tokens[i];
    }
    return (double)agree / m;
}

static kvs_generate_params greedy(int n) {
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = n;
    gp.sampling.temperature = 0;
    return gp;
}

static kvs_recal_params g_recal = {0.9f, 0.9f}; /* --recal T,S */

static int seg_run_once(ev *e, const kvs_seg_layout *lay, const cfg *c, kvs_generate_result *r, kvs_seg_report *rep) {
    kvs_generate_params gp = greedy(e->n_gen);
    kvs_seg_options opt = kvs_seg_default_options();
    opt.use_baked = c->baked;
    if (c->recal) opt.recal = g_recal;
    int st = kvs_seg_generate(e->ctx, e->cache, lay, &gp, &c->rp, &opt, r, rep);
    if (st) fprintf(stderr, "rag_eval: %s: %s\n", c->name, kvs_last_error());
    return st;
}

/* e->reps runs (cold: each on an empty cache); r is the last one's (the
 * context's KV is its), with the fastest TTFT of all. */
static int seg_run(ev *e, const kvs_seg_layout *lay, const cfg *c, int cold, kvs_generate_result *r,
                   kvs_seg_report *rep) {
    double best = INFINITY;
    for (int k = 0; k < e->reps; k++) {
        if (cold) kvs_cache_clear(e->cache, 0);
        int st = seg_run_once(e, lay, c, r, rep);
        if (st) return st;
        if (r->ttft_ms < best) best = r->ttft_ms;
        if (k + 1 < e->reps) kvs_generate_result_free(r);
    }
    r->ttft_ms = best;
    return KVS_OK;
}

/* Deterministic shuffle that moves at least one doc. */
static void shuffle(const char **d, int n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    const char *orig[MAX_DOCS];
    memcpy(orig, d, (size_t)n * sizeof *d);
    for (int i = n - 1; i > 0; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int j = (int)(s % (uint64_t)(i + 1));
        const char *t = d[i];
        d[i] = d[j];
        d[j] = t;
    }
    if (n > 1 && !memcmp(orig, d, (size_t)n * sizeof *d)) {
        const char *t = d[0];
        memmove(d, d + 1, (size_t)(n - 1) * sizeof *d);
        d[n - 1] = t;
    }
}

static int build_layout(ev *e, const item *it, const char **docs, kvs_seg_layout *lay) {
    kvs_seg_input in = {!e->plain, k_system, docs, NULL, it->n_docs, it->question, NULL};
    int st = kvs_seg_layout_build(e->model, &in, lay);
    if (st) fprintf(stderr, "rag_eval: layout: %s\n", kvs_last_error());
    return st;
}

/* One prompt (one item in one doc order): full, then every config. */
static void eval_prompt(ev *e, const item *it, const kvs_seg_layout *lay, cfg *cfgs, int n_cfg, series *full_ttft,
                        series *full_f1, series *full_em, int *n_prompts, float *full_first) {
    kvs_generate_params gp = greedy(e->n_gen);
    kvs_generate_result full;
    double best = INFINITY;
    for (int k = 0; k < e->reps; k++) {
        if (kvs_generate(e->ctx, lay->tokens, lay->n_tokens, &gp, &full) != KVS_OK) {
            fprintf(stderr, "rag_eval: full: %s\n", kvs_last_error());
            return;
        }
        if (full.ttft_ms < best) best = full.ttft_ms;
        if (k + 1 < e->reps) kvs_generate_result_free(&full);
    }
    full.ttft_ms = best;
    push(full_ttft, full.ttft_ms);
    memcpy(full_first, full.first_logits, (size_t)e->n_vocab * sizeof(float));
    double f1 = 0, em = 0;
    if (it->n_answers) {
        score(it, full.text, &f1, &em);
        push(full_f1, f1);
        push(full_em, em);
    }
    (*n_prompts)++;
    for (int i = 0; i < n_cfg; i++) {
        cfg *c = &cfgs[i];
        kvs_generate_result r;
        kvs_seg_report rep;
        if (seg_run(e, lay, c, 0, &r, &rep)) continue;
        push(&c->ttft, r.ttft_ms);
        push(&c->ttft_full_pair, full.ttft_ms);
        push(&c->kl, kl_first(full.first_logits, r.first_logits, e->n_vocab));
        push(&c->exact, r.n_tokens == full.n_tokens &&
                            !memcmp(r.tokens, full.tokens, (size_t)full.n_tokens * sizeof(int32_t)));
        push(&c->same_answer, same_answer(full.text, r.text));
        push(&c->frac, rep.n_moved ? (double)rep.n_recomputed / rep.n_moved : 0.0);
        push(&c->cost, rep.n_moved ? (double)rep.n_token_layers / ((double)rep.n_moved * e->n_layer) : 0.0);
        if (c->ttft_cold.n > c->ttft_cold_cached.n) { /* this prompt had a cold run: pair it */
            push(&c->ttft_cold_cached, r.ttft_ms);
            push(&c->ttft_cold_full, full.ttft_ms);
        }
        if (it->n_answers) {
            score(it, r.text, &f1, &em);
            push(&c->f1, f1);
            push(&c->em, em);
        }
        double tf = teacher_forced(e, lay->n_tokens, &full, r.first_logits);
        if (!isnan(tf)) push(&c->top1, tf);
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&full);
}

/* Cold runs: an empty cache for each measured config (the docs are
 * computed and stored on the way). Leaves the cache warm. */
static void eval_cold(ev *e, const kvs_seg_layout *lay, cfg *cfgs, int n_cfg, int all) {
    for (int i = 0; i < n_cfg; i++) {
        cfg *c = &cfgs[i];
        if (!all && i != 0) continue; /* cfgs[0] is the default strategy */
        kvs_generate_result r;
        kvs_seg_report rep;
        if (seg_run(e, lay, c, 1, &r, &rep)) continue;
        push(&c->ttft_cold, r.ttft_ms);
        kvs_generate_result_free(&r);
    }
}

/* ---------------------------------------------------------------------- */
/* report                                                                   */

static void machine(char *out, size_t cap) {
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(model, sizeof model, "%s", p);
            }
            break;
        }
    if (f) fclose(f);
    snprintf(out, cap, "%s, %ld cores online", model, sysconf(_SC_NPROCESSORS_ONLN));
}

static void commit(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (p) {
        if (fgets(out, (int)cap, p)) out[strcspn(out, "\n")] = 0;
        pclose(p);
    }
    p = popen("git status --porcelain --untracked-files=no 2>/dev/null | head -n 1", "r");
    char line[256];
    if (p) {
        if (fgets(line, sizeof line, p) && strlen(out) + 7 < cap) strcat(out, "-dirty");
        pclose(p);
    }
}

static void fmt(char *b, size_t cap, const char *f, double v) {
    if (isnan(v)) snprintf(b, cap, "-");
    else snprintf(b, cap, f, v);
}

/* One table row per config; full first. */
static void table(FILE *o, cfg *cfgs, int n_cfg, const series *full_ttft, const series *full_f1,
                  const series *full_em) {
    fprintf(o, "| strategy | recomputed tokens | fresh KV | TTFT ms | speedup vs full | cold TTFT ms (n) | "
               "cold vs full | cached vs cold | first-token KL | top-1 agree | exact output | same answer | F1 | EM |\n");
    fprintf(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char f1[16], em[16];
    fmt(f1, sizeof f1, "%.3f", mean(full_f1));
    fmt(em, sizeof em, "%.3f", mean(full_em));
    fprintf(o, "| full (cold prefill) | 100%% | 100%% | %.0f | 1.00x | - | - | - | 0 | 1.000 | 1.000 | 1.000 | %s | %s |\n",
            median(full_ttft), f1, em);
    for (int i = 0; i < n_cfg; i++) {
        cfg *c = &cfgs[i];
        double t = median(&c->ttft), tc = median(&c->ttft_cold);
        char cold[32], cf[16], cs[16], kl[16], t1[16], ex[16], sa[16];
        if (c->ttft_cold.n) snprintf(cold, sizeof cold, "%.0f (%d)", tc, c->ttft_cold.n);
        else snprintf(cold, sizeof cold, "-");
        fmt(cf, sizeof cf, "%.2fx", median(&c->ttft_cold_full) / tc);
        fmt(cs, sizeof cs, "%.2fx", tc / median(&c->ttft_cold_cached));
        fmt(kl, sizeof kl, "%.4f", mean(&c->kl));
        fmt(t1, sizeof t1, "%.3f", mean(&c->top1));
        fmt(ex, sizeof ex, "%.3f", mean(&c->exact));
        fmt(sa, sizeof sa, "%.3f", mean(&c->same_answer));
        fmt(f1, sizeof f1, "%.3f", mean(&c->f1));
        fmt(em, sizeof em, "%.3f", mean(&c->em));
        fprintf(o, "| %s | %.1f%% | %.1f%% | %.0f | %.2fx | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                c->name, 100 * mean(&c->frac), 100 * mean(&c->cost), t, median(&c->ttft_full_pair) / t, cold, cf, cs,
                kl, t1, ex, sa, f1, em);
    }
}

/* One row per config, grouped by strategy and ordered by parameter (the
 * chart draws a line per strategy through its rows). */
static void tsv(FILE *o, cfg *cfgs, int n_cfg, const series *full_f1) {
    fprintf(o, "# strategy\tparam\trecomputed_frac\tttft_ms\tspeedup_vs_full\tkl\ttop1\texact\tf1\tem\tfull_f1"
               "\tfresh_kv_frac\tsame_answer\n");
    static const char *const groups[] = {"none", "selective", "firstk", "cacheblend", "cacheblend+seams",
                                         "cacheblend+narrow", "cacheblend+seams+narrow", "query", "query+seams",
                                         "full"};
    for (size_t g = 0; g < 4 * (sizeof groups / sizeof groups[0]); g++) {
        const char *group = groups[g / 4];
        /* each strategy on plain, then on baked docs; without, then with recalibration */
        int baked = (int)(g % 2), recal = (int)(g / 2 % 2);
        int done[MAX_CFG] = {0};
        for (;;) {
            int b = -1;
            for (int i = 0; i < n_cfg; i++)
                if (!strcmp(cfg_strategy_base(&cfgs[i]), group) && cfgs[i].baked == baked && cfgs[i].recal == recal &&
                    !done[i] &&
                    (b < 0 || cfgs[i].param < cfgs[b].param))
                    b = i;
            if (b < 0) break;
            done[b] = 1;
            cfg *c = &cfgs[b];
            double t = median(&c->ttft);
            fprintf(o, "%s\t%g\t%.4f\t%.1f\t%.3f\t%.5f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n",
                    cfg_strategy(c), c->param, mean(&c->frac), t, median(&c->ttft_full_pair) / t,
                    mean(&c->kl), mean(&c->top1), mean(&c->exact), c->f1.n ? mean(&c->f1) : NAN,
                    c->em.n ? mean(&c->em) : NAN, full_f1->n ? mean(full_f1) : NAN, mean(&c->cost),
                    mean(&c->same_answer));
        }
    }
}

/* ---------------------------------------------------------------------- */

typedef struct opts {
    const char *model, *data, *out;
    int items, wiki, threads, n_gen, cold_items, sweep, quick, skip, reps, plain;
    int bake;                /* neighbours per doc for the +bake configs (-1: all the prompt's other docs) */
    int bake_pool;           /* bake over the prompt's docs plus this many more of the item's passages */
    int bake_foreign;        /* control: bake each doc after this many passages of another MuSiQue item */
    const char *configs, *tag;
    double ratios[16];
    int n_ratios;
} opts;

static int parse_ratios(const char *s, opts *o) {
    o->n_ratios = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && o->n_ratios < 16; t = strtok_r(NULL, ",", &save)) {
        double r = atof(t);
        if (!(r > 0 && r <= 1)) return -1;
        o->ratios[o->n_ratios++] = r;
    }
    return o->n_ratios ? 0 : -1;
}

static int add_cfg(cfg *cfgs, int n, kvs_repair_mode m, double param) {
    if (n >= MAX_CFG) return n;
    cfg *c = &cfgs[n];
    memset(c, 0, sizeof *c);
    c->rp = kvs_repair_default_params();
    c->rp.mode = m;
    c->param = param;
    if (m == KVS_REPAIR_CACHEBLEND) {
        c->rp.recompute_ratio = (float)param;
        c->rp.cacheblend_seams = 0;
        snprintf(c->name, sizeof c->name, "cacheblend r=%.2f", param);
    } else if (m == CFG_CB_SEAMS) {
        c->rp.mode = KVS_REPAIR_CACHEBLEND;
        c->rp.cacheblend_seams = 1;
        c->rp.recompute_ratio = (float)param;
        kvs_repair_params d = kvs_repair_default_params();
        snprintf(c->name, sizeof c->name, "cacheblend+seams r=%.2f%s", param,
                 d.mode == KVS_REPAIR_CACHEBLEND && fabs(param - (double)d.recompute_ratio) < 1e-6 &&
                         d.cacheblend_seams && d.narrow_from == 0
                     ? " (default)" : "");
    } else if (m == CFG_CB_NARROW || m == CFG_CB_SEAMS_NARROW) {
        c->rp.mode = KVS_REPAIR_CACHEBLEND;
        c->rp.cacheblend_seams = m == CFG_CB_SEAMS_NARROW;
        c->rp.recompute_ratio = (float)param;
        c->rp.narrow_from = (float)(param * NARROW_X < 1 ? param * NARROW_X : 1);
        snprintf(c->name, sizeof c->name, "cacheblend%s narrow %.2f->%.2f", m == CFG_CB_SEAMS_NARROW ? "+seams" : "",
                 (double)c->rp.narrow_from, param);
    } else if (m == KVS_REPAIR_QUERY || m == CFG_QUERY_SEAMS) {
        c->rp.mode = KVS_REPAIR_QUERY;
        c->rp.query_seams = m == CFG_QUERY_SEAMS;
        c->rp.recompute_ratio = (float)param;
        kvs_repair_params d = kvs_repair_default_params();
        snprintf(c->name, sizeof c->name, "query%s r=%.2f%s", c->rp.query_seams ? "+seams" : "", param,
                 d.mode == KVS_REPAIR_QUERY && fabs(param - (double)d.recompute_ratio) < 1e-6 &&
                         c->rp.query_seams == d.query_seams
                     ? " (default)" : "");
    } else if (m == KVS_REPAIR_SELECTIVE) {
        c->rp.overlap = (int)param;
        snprintf(c->name, sizeof c->name, "selective R=%d", (int)param);
    } else if (m == KVS_REPAIR_FIRSTK) {
        c->rp.first_k = (int)param;
        snprintf(c->name, sizeof c->name, "firstk k=%d", (int)param);
    } else {
        snprintf(c->name, sizeof c->name, "%s", kvs_repair_mode_name(m));
    }
    return n + 1;
}

/* "strategy[:param],..." with strategy none, selective, firstk, cacheblend,
 * cacheblend+seams, cacheblend+narrow, cacheblend+seams+narrow, query,
 * query+seams (param:
 * tokens or ratio; narrow: from 3x the ratio over 4 layers, or
 * RATIO/FROM/LAYERS). Returns the count, -1 if bad. */
static int parse_configs(const char *list, cfg *cfgs) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(t, ':');
        double param = colon ? atof(colon + 1) : 0;
        if (colon) *colon = 0;
        size_t tl = strlen(t);
        int baked = tl > 5 && !strcmp(t + tl - 5, "+bake");
        if (baked) t[tl -= 5] = 0;
        int recal = tl > 6 && !strcmp(t + tl - 6, "+recal");
        if (recal) t[tl - 6] = 0;
        kvs_repair_mode m;
        if (!strcmp(t, "cacheblend+seams")) m = CFG_CB_SEAMS;
        else if (!strcmp(t, "cacheblend+narrow")) m = CFG_CB_NARROW;
        else if (!strcmp(t, "cacheblend+seams+narrow")) m = CFG_CB_SEAMS_NARROW;
        else if (!strcmp(t, "query+seams")) m = CFG_QUERY_SEAMS;
        else if (kvs_repair_mode_parse(t, &m) != KVS_OK) return -1;
        if (!colon && (m == KVS_REPAIR_CACHEBLEND || m == CFG_CB_NARROW || m == KVS_REPAIR_QUERY || m == CFG_QUERY_SEAMS))
            param = 0.15;
        if (!colon && (m == CFG_CB_SEAMS || m == CFG_CB_SEAMS_NARROW)) param = 0.10;
        if (!colon && (m == KVS_REPAIR_SELECTIVE || m == KVS_REPAIR_FIRSTK)) param = 16;
        if (m == KVS_REPAIR_FULL) return -1; /* full is the baseline row */
        n = add_cfg(cfgs, n, m, param);
        if (recal) {
            cfgs[n - 1].recal = 1;
            size_t nl = strlen(cfgs[n - 1].name);
            snprintf(cfgs[n - 1].name + nl, sizeof cfgs[n - 1].name - nl, " +recal");
        }
        if (baked) {
            cfgs[n - 1].baked = 1;
            size_t nl = strlen(cfgs[n - 1].name);
            snprintf(cfgs[n - 1].name + nl, sizeof cfgs[n - 1].name - nl, " +bake");
        }
        /* narrow: optional "/FROM/LAYERS" after the ratio */
        const char *sl = colon ? strchr(colon + 1, '/') : NULL;
        if (sl && (m == CFG_CB_NARROW || m == CFG_CB_SEAMS_NARROW)) {
            cfg *c = &cfgs[n - 1];
            c->rp.narrow_from = (float)atof(sl + 1);
            if ((sl = strchr(sl + 1, '/'))) c->rp.narrow_layers = atoi(sl + 1);
            if (kvs_repair_params_check(&c->rp, 30) != KVS_OK) return -1;
            snprintf(c->name, sizeof c->name, "cacheblend%s narrow %.2f->%.2f/%dL",
                     m == CFG_CB_SEAMS_NARROW ? "+seams" : "", (double)c->rp.narrow_from, param, c->rp.narrow_layers);
        }
    }
    return n;
}

static const char *usage =
    "usage: rag_eval [--standard] [--items N | --all] [--skip N] [--wiki N] [--ratios 0.05,0.15,...] [--sweep]\n"
    "                [--configs cacheblend:0.15,none,selective:16,cacheblend+seams:0.1,cacheblend+narrow:0.15,\n"
    "                 query:0.15,query+seams:0.1,query+bake:0.1,none+bake,...] [--bake K]\n"
    "                [--tag NAME] [--cold-items N] [--reps N] [--n-gen N] [--threads N] [--out DIR] [--model PATH]\n"
    "                [--data DIR] [--plain] [--recal T,S]\n"
    "  (no arguments: a quick smoke run; --standard: 6 MuSiQue items x 2 orders + 3 2WikiMQA, query (the\n"
    "   default) at 0.10, 0.15, 0.20, cacheblend at 0.05,0.1,0.15,0.3,0.5, the cacheblend+seams hybrid,\n"
    "   gradual narrowing from 3x the ratio, selective and\n"
    "   firstk at 16 and 64 tokens, cold runs of every strategy on the first 3 items, TTFT the fastest of\n"
    "   --reps 2 runs; ~25 min on 2 idle cores. --sweep: selective and firstk at each ratio's share of a\n"
    "   600-token doc too; --plain: no chat template, for base models without one, e.g. gemma3-270m;\n"
    "   STRATEGY+bake: the docs' baked chunks, each doc baked after the prompt's other docs, or its --bake K\n"
    "   nearest ones; --bake-pool N: bake among the prompt's docs and N more passages of the item;\n"
    "   --bake-foreign N: a control, each doc baked after N passages of another item;\n"
    "   STRATEGY+recal[+bake]: APE's attention recalibration of the question and output, --recal T,S\n"
    "   (default 0.9,0.9))\n";

int main(int argc, char **argv) {
    opts o = {.out = "bench/results", .items = 2, .threads = 2, .n_gen = 32, .cold_items = 1, .quick = 1, .reps = 1,
              .ratios = {0.15}, .n_ratios = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--standard")) {
            o.quick = 0;
            o.items = 6;
            o.wiki = 3;
            o.cold_items = 3;
            o.reps = 2;
            parse_ratios("0.05,0.1,0.15,0.3,0.5", &o);
        } else if (!strcmp(a, "--all")) { o.quick = 0; o.items = 1000; }
        else if (!strcmp(a, "--sweep")) o.sweep = 1;
        else if (!strcmp(a, "--plain")) o.plain = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else if (!v) { fputs(usage, stderr); return 2; }
        else if (!strcmp(a, "--items")) { o.items = atoi(argv[++i]); o.quick = 0; }
        else if (!strcmp(a, "--wiki")) o.wiki = atoi(argv[++i]);
        else if (!strcmp(a, "--ratios")) { if (parse_ratios(argv[++i], &o)) { fputs(usage, stderr); return 2; } }
        else if (!strcmp(a, "--cold-items")) o.cold_items = atoi(argv[++i]);
        else if (!strcmp(a, "--reps")) o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--n-gen")) o.n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "--threads")) o.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--out")) o.out = argv[++i];
        else if (!strcmp(a, "--model")) o.model = argv[++i];
        else if (!strcmp(a, "--data")) o.data = argv[++i];
        else if (!strcmp(a, "--configs")) { o.configs = argv[++i]; o.quick = 0; }
        else if (!strcmp(a, "--skip")) o.skip = atoi(argv[++i]);
        else if (!strcmp(a, "--bake")) o.bake = atoi(argv[++i]);
        else if (!strcmp(a, "--recal")) {
            if (sscanf(argv[++i], "%f,%f", &g_recal.temperature, &g_recal.scale) != 2 ||
                kvs_recal_params_check(&g_recal) != KVS_OK) { fputs(usage, stderr); return 2; }
        }
        else if (!strcmp(a, "--bake-pool")) o.bake_pool = atoi(argv[++i]);
        else if (!strcmp(a, "--bake-foreign")) o.bake_foreign = atoi(argv[++i]);
        else if (!strcmp(a, "--tag")) o.tag = argv[++i];
        else { fputs(usage, stderr); return 2; }
    }
    if (o.n_gen < 1) o.n_gen = 1;
    if (!o.model) o.model = getenv("KVSTITCH_MODEL");
    char data[1024];
    if (!o.data) {
        const char *sh = getenv("KVSTITCH_SHARED");
        snprintf(data, sizeof data, "%s/data", sh && *sh ? sh : "../shared");
        o.data = data;
    }
    if (!o.model) {
        fprintf(stderr, "rag_eval: no model (--model PATH or KVSTITCH_MODEL; scripts/fetch-model.sh prints it)\n");
        return 1;
    }

    /* configs: the default first (it gets the cold runs of every item) */
    cfg *cfgs = calloc(MAX_CFG, sizeof *cfgs);
    int n_cfg = 0;
    if (o.configs) {
        if ((n_cfg = parse_configs(o.configs, cfgs)) <= 0) {
            fprintf(stderr, "rag_eval: bad --configs '%s'\n%s", o.configs, usage);
            return 2;
        }
        goto configured;
    }
    /* the library's default (kvs_repair_default_params: query at 0.10), the
     * hybrid at 0.10 (the default before), then plain CacheBlend at the
     * issue's 0.15 */
    n_cfg = add_cfg(cfgs, 0, KVS_REPAIR_QUERY, (double)kvs_repair_default_params().recompute_ratio);
    n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_SEAMS, 0.10);
    n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_CACHEBLEND, 0.15);
    n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_NONE, 0);
    n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_SELECTIVE, 16);
    n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_FIRSTK, 16);
    for (int i = 0; i < o.n_ratios; i++)
        if (fabs(o.ratios[i] - 0.15) > 1e-9) n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_CACHEBLEND, o.ratios[i]);
    if (!o.quick) { /* query and the hybrid at other ratios, and longer fixed sets */
        n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_QUERY, 0.15);
        n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_QUERY, 0.20);
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_SEAMS, 0.05);
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_SEAMS, 0.15);
        n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_SELECTIVE, 64);
        n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_FIRSTK, 64);
        /* gradual narrowing from 3x the ratio over 4 layers */
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_NARROW, 0.05);
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_NARROW, 0.10);
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_NARROW, 0.15);
        n_cfg = add_cfg(cfgs, n_cfg, CFG_CB_SEAMS_NARROW, 0.10);
    }
    if (o.sweep) /* the ratios' recompute fractions for the fixed-set strategies (docs ~600 tokens) */
        for (int i = 0; i < o.n_ratios; i++) {
            int k = (int)(o.ratios[i] * 600 + 0.5);
            if (k != 16 && k != 64) {
                n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_SELECTIVE, k);
                n_cfg = add_cfg(cfgs, n_cfg, KVS_REPAIR_FIRSTK, k);
            }
        }

configured:;
    item *items = calloc((size_t)o.items + (size_t)o.skip + (size_t)o.wiki + 1, sizeof *items);
    int n_mu = load_musique_range(o.data, o.skip, o.items, items);
    int n_wi = o.wiki > 0 ? load_wiki(o.data, o.wiki, items + (n_mu > 0 ? n_mu : 0)) : 0;
    if (n_mu < 0 || n_mu + n_wi == 0) {
        fprintf(stderr, "rag_eval: no items in %s\n", o.data);
        return 1;
    }

    ev e;
    memset(&e, 0, sizeof e);
    e.n_gen = o.n_gen;
    e.reps = o.reps > 0 ? o.reps : 1;
    e.plain = o.plain;
    if (kvs_model_load(o.model, kvs_model_default_params(), &e.model) != KVS_OK) {
        fprintf(stderr, "rag_eval: %s: %s\n", o.model, kvs_last_error());
        return 1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 8192;
    cp.n_threads = o.threads;
    kvs_cache_params pp = kvs_cache_default_params();
    pp.budget_bytes = (size_t)2 << 30;
    if (kvs_context_new(e.model, cp, &e.ctx) != KVS_OK || kvs_cache_open(e.model, pp, &e.cache) != KVS_OK) {
        fprintf(stderr, "rag_eval: %s\n", kvs_last_error());
        return 1;
    }
    e.n_vocab = kvs_vocab_size(e.model);
    e.n_layer = kvs_model_hparams(e.model)->n_layer;
    e.tf_logits = malloc((size_t)o.n_gen * e.n_vocab * sizeof(float));
    e.pos = malloc((size_t)o.n_gen * sizeof *e.pos);

    char mach[512], com[64];
    machine(mach, sizeof mach);
    commit(com, sizeof com);
    printf("rag_eval: %d MuSiQue items x 2 orders + %d 2WikiMQA items, %d strategies, %d threads, %d new tokens\n",
           n_mu, n_wi, n_cfg, o.threads, o.n_gen);
    double load0[3] = {0};
    getloadavg(load0, 3);
    printf("machine: %s; load %.2f (a shared machine: timings are noisy); commit %s\n", mach, load0[0], com);

    series full_ttft = {0}, full_f1 = {0}, full_em = {0}, prompt_len = {0}, doc_len = {0};
    series order_kl = {0}; /* KL(full, given order || full, shuffled): how much the order alone moves it */
    float *first_given = malloc((size_t)e.n_vocab * sizeof(float));
    float *first_shuf = malloc((size_t)e.n_vocab * sizeof(float));
    int n_prompts = 0, any_baked = 0, n_baked = 0;
    series bake_ms = {0};
    for (int i = 0; i < n_cfg; i++) any_baked |= cfgs[i].baked;
    double t_start = kvs_now_ms();
    for (int i = 0; i < n_mu + n_wi; i++) {
        item *it = &items[i];
        const char *docs[MAX_DOCS];
        memcpy(docs, it->docs, (size_t)it->n_docs * sizeof *docs);
        int n_orders = !strcmp(it->dataset, "musique") ? 2 : 1;
        for (int ord = 0; ord < n_orders; ord++) {
            if (ord == 1) shuffle(docs, it->n_docs, (uint64_t)i + 1);
            kvs_seg_layout lay;
            if (build_layout(&e, it, docs, &lay)) continue;
            push(&prompt_len, lay.n_tokens);
            for (int s = 0; ord == 0 && s < lay.n_segs; s++)
                if (lay.segs[s].kind == KVS_SEG_DOC) push(&doc_len, lay.segs[s].end - lay.segs[s].start);
            if (ord == 0) eval_cold(&e, &lay, cfgs, n_cfg, i < o.cold_items);
            if (ord == 0 && any_baked) { /* after the cold runs: they empty the cache */
                kvs_seg_bake_report br;
                kvs_seg_layout pool_lay;
                const kvs_seg_layout *bl = &lay;
                if (o.bake_pool > 0 && it->n_pool > 0) { /* the prompt's docs among more of the item's passages */
                    const char *all[MAX_DOCS + MAX_POOL];
                    int na = 0;
                    for (int k = 0; k < it->n_docs; k++) all[na++] = it->docs[k];
                    for (int k = 0; k < it->n_pool && k < o.bake_pool; k++) all[na++] = it->pool[k];
                    kvs_seg_input in = {!e.plain, k_system, all, NULL, na, it->question, NULL};
                    if (kvs_seg_layout_build(e.model, &in, &pool_lay) != KVS_OK) {
                        fprintf(stderr, "rag_eval: bake pool: %s\n", kvs_last_error());
                        return 1;
                    }
                    bl = &pool_lay;
                }
                int bst = KVS_OK;
                if (o.bake_foreign > 0 && n_mu > 0) {
                    /* the control: each doc after passages of another item (unrelated text) */
                    const item *fi = &items[(i + 1) % n_mu];
                    br.n_baked = 0;
                    br.bake_ms = 0;
                    for (int k = 0; k < it->n_docs && bst == KVS_OK; k++) {
                        const char *all[MAX_POOL + 1];
                        int na = 0;
                        for (int f = 0; f < fi->n_pool && f < o.bake_foreign; f++) all[na++] = fi->pool[f];
                        all[na++] = it->docs[k];
                        kvs_seg_input in = {!e.plain, k_system, all, NULL, na, it->question, NULL};
                        kvs_seg_bake_report one;
                        if ((bst = kvs_seg_layout_build(e.model, &in, &pool_lay)) != KVS_OK) break;
                        bst = kvs_seg_bake_docs(e.ctx, e.cache, &pool_lay, -1, &one);
                        kvs_seg_layout_free(&pool_lay);
                        br.n_baked += one.n_baked;
                        br.bake_ms += one.bake_ms;
                    }
                } else {
                    bst = kvs_seg_bake_docs(e.ctx, e.cache, bl, o.bake ? o.bake : -1, &br);
                }
                if (bl != &lay) kvs_seg_layout_free(&pool_lay);
                if (bst != KVS_OK) {
                    fprintf(stderr, "rag_eval: bake: %s\n", kvs_last_error());
                    return 1;
                }
                push(&bake_ms, br.bake_ms);
                n_baked += br.n_baked;
            }
            eval_prompt(&e, it, &lay, cfgs, n_cfg, &full_ttft, &full_f1, &full_em, &n_prompts,
                        ord == 0 ? first_given : first_shuf);
            if (ord == 1) push(&order_kl, kl_first(first_given, first_shuf, e.n_vocab));
            kvs_seg_layout_free(&lay);
        }
        fprintf(stderr, "  item %d/%d (%s) done, %.0f s\n", i + 1, n_mu + n_wi, it->dataset,
                (kvs_now_ms() - t_start) / 1000);
    }

    double la[3] = {0};
    getloadavg(la, 3);
    char hdr[2048];
    snprintf(hdr, sizeof hdr,
             "%d prompts (%d MuSiQue items from #%d x 2 doc orders, %d 2WikiMQA items), median %.0f prompt tokens, "
             "docs of median %.0f tokens; %s%s, f16 KV, %d threads, greedy, %d new tokens.\n"
             "Machine: %s; load average %.2f at the end (shared: timings are noisy). Commit %s. Wall time %.0f s.\n"
             "For scale: the first-token KL between full on the given and on the shuffled doc order (the order "
             "alone) is %.4f (mean).\n",
             n_prompts, n_mu, o.skip, n_wi, median(&prompt_len), median(&doc_len),
             strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model, o.plain ? " (plain text, no chat template)" : "",
             o.threads, o.n_gen, mach, la[0], com,
             (kvs_now_ms() - t_start) / 1000, mean(&order_kl));
    if (any_baked) {
        char bake_how[160];
        if (o.bake_foreign > 0)
            snprintf(bake_how, sizeof bake_how, "%d passages of another MuSiQue item (a control: unrelated text; the "
                     "passages are baked too)", o.bake_foreign);
        else if (o.bake_pool > 0)
            snprintf(bake_how, sizeof bake_how, "its %d nearest among the prompt's docs and %d more passages of the "
                     "item (MuSiQue; 2WikiMQA: the prompt's docs)", o.bake > 0 ? o.bake : -1, o.bake_pool);
        else if (o.bake > 0)
            snprintf(bake_how, sizeof bake_how, "its %d nearest docs of the prompt", o.bake);
        else
            snprintf(bake_how, sizeof bake_how, "all the prompt's other docs");
        size_t hl = strlen(hdr);
        snprintf(hdr + hl, sizeof hdr - hl,
                 "Baking (+bake rows): before the runs of an item, each of its docs computed again after the cached KV "
                 "of %s (kvs_bake_docs, the most similar closest); %d docs baked, median %.0f ms per item "
                 "(offline: not in any TTFT). The shuffled order moves the same baked chunks.\n",
                 bake_how, n_baked,
                 median(&bake_ms));
    }
    printf("\n%s\n", hdr);
    table(stdout, cfgs, n_cfg, &full_ttft, &full_f1, &full_em);

    mkdir(o.out, 0755);
    char path[1100];
    char suffix[80];
    snprintf(suffix, sizeof suffix, "%s%s%s", o.quick ? "_quick" : "", o.tag ? "_" : "", o.tag ? o.tag : "");
    snprintf(path, sizeof path, "%s/rag_eval%s.md", o.out, suffix);
    FILE *f = fopen(path, "w");
    if (f) {
        time_t now = time(NULL);
        char date[64];
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        fprintf(f, "# rag_eval (%s)\n\n%s\n", date, hdr);
        fprintf(f, "Columns. Recomputed tokens: moved doc tokens the strategy recomputed through the last layer "
                   "(cacheblend with narrowing: the final set). Fresh KV: the (token, layer) pairs whose K/V the "
                   "repair wrote, as a share of all doc tokens x layers (the cost: cacheblend's check layers run "
                   "every token; narrowing pays for the wider sets of its first layers). TTFT: per prompt the "
                   "fastest of %d identical runs, then the median over prompts, docs cached (the system segment an "
                   "exact hit); speedup vs full: ratio of the medians (full = a cold prefill of the same tokens, no "
                   "cache, timed the same way). Cold TTFT: the same strategy with an empty cache "
                   "(the docs are computed and stored on the way), median over n prompts (the given order of the "
                   "first items; the default strategy on every item); cold vs full and cached vs cold: ratios of "
                   "the medians over those same prompts. KL (first token, full || strategy), top-1 agreement (32 "
                   "tokens teacher-forced on full's output), exact output rate, same answer (the first line of the "
                   "output, normalised, equals full's: the answer found by full is found again): means over "
                   "prompts. F1 / EM: "
                   "MuSiQue only, SQuAD normalisation, first line of the answer.\n\n",
                e.reps);
        table(f, cfgs, n_cfg, &full_ttft, &full_f1, &full_em);
        fclose(f);
        printf("\nwritten: %s\n", path);
    }
    snprintf(path, sizeof path, "%s/rag_eval%s.tsv", o.out, suffix);
    if ((f = fopen(path, "w"))) {
        tsv(f, cfgs, n_cfg, &full_f1);
        fclose(f);
        printf("written: %s\n", path);
    }
    if (o.quick) printf("(quick run: bench/rag_eval.sh runs the standard evaluation and draws the chart)\n");

    for (int i = 0; i < n_mu + n_wi; i++) item_free(&items[i]);
    free(items);
    free(cfgs); /* series memory goes with the process */
    free(first_given);
    free(first_shuf);
    free(e.tf_logits);
    free(e.pos);
    kvs_cache_free(e.cache);
    kvs_context_free(e.ctx);
    kvs_model_free(e.model);
    return 0;
}
