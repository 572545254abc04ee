/*
 * Golden tests: the C engine against the independent numpy reference
 * (tests/ref/ref_forward.py, float64), through the public API only.
 * Data: tests/data/golden/ (format in its README.md; regenerate with
 * scripts/gen-golden.sh). Every figure is printed, so a run documents how
 * close the engine is, not only whether it passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvstitch.h"

/* ---------------------------------------------------------------------------
 * Tolerances, and why.
 *
 * SmolLM2 Q4_1. Before every quantized matmul (the Q8_0 output head
 * included) the engine rounds activations per block of 32 to a 16-bit
 * integer held as two 8-bit levels (src/kernels/quant.h: x ~= (256 hi + lo)
 * * amax / 127 / 256, error <= amax / 32512), keeps K/V in float16 and
 * computes in float32; the reference computes in float64 on the dequantized
 * weights.
 *
 * Measured (engine, F16 K/V): last-position max|diff| 0.0074-0.0131, rms
 * <= 0.0028, cosine >= 0.99999995; teacher-forced top-1 agreement 532/532;
 * greedy 32/32 on every prompt. With F32 K/V: max|diff| <= 0.0066, so F16
 * K/V is about half of what is left. Emulations of the same rounding in
 * numpy (float32 and float64, F16 K/V) give last-position max|diff| up to
 * 0.0146, rms up to 0.0069, cosine >= 0.99999994, max|diff| 0.062 at the
 * worst teacher-forced position, and shift the gap between the exact top-1
 * and top-2 by at most 0.019. The bounds below are ~2.5x the worst of these,
 * so they hold for any faithful implementation of this rounding, not only
 * for today's bits.
 *
 * What they catch (numpy experiments): 8-bit activations (one level, as
 * llama.cpp's Q8_1 and this engine until then) give max|diff| 0.77-1.46,
 * rms 0.17-0.71, cosine 0.9989 and ~97% teacher-forced agreement; one
 * layer's ffn_down scaled by 1.02 gives max|diff| 0.12-0.29, rms 0.03-0.17,
 * cosine 0.99994; rope base 1e4 instead of 1e5 gives cosine 0.985. Still
 * invisible: eps 1e-6 instead of 1e-5 (max|diff| 0.022, as large as the
 * rounding itself). The tiny model's tight check covers the float paths
 * (norms, rope, attention, SwiGLU) separately.
 *
 * Teacher-forced: raw agreement >= 99.5% (the target of issue 3), and exact
 * agreement wherever the reference's top-1/top-2 margin is at least
 * SMOL_TIE (2.5x the largest gap shift above): there rounding cannot flip
 * the argmax. Every miss is printed with its margin.
 */
#define SMOL_MAX_ABS_TOL 0.04   /* max |logit - ref| at the last prompt position */
#define SMOL_RMS_TOL 0.015      /* rms(logit - ref) over the vocabulary, same position */
#define SMOL_COS_MIN 0.9999995  /* cosine(logits, ref), same position */
#define SMOL_TIE 0.05           /* reference margins below this are near ties (> 0.019 max shift) */
#define SMOL_N_GREEDY 32        /* greedy steps compared */
#define SMOL_TF_DECISIVE 1.0    /* top-1 agreement where the reference margin >= SMOL_TIE */
#define SMOL_TF_RAW 0.995       /* top-1 agreement at all positions (measured 100%) */
/* Tiny model: F16 weights, float activations (no 8-bit rounding), one layer,
 * logits of magnitude ~0.25. With F32 K/V only float32 rounding separates
 * the engine from the reference: measured max|diff| 3.0e-8. With F16 K/V the
 * engine differs by exactly the reference's own F16-K/V emulation (2.18e-6
 * max, 5.5e-7 rms on "hello"). The bounds must stay tight: the random
 * weights make attention nearly uniform, so the NeoX rope pairing moves the
 * logits by only 1.75e-5..3e-5 (rms 4e-6..7e-6) and no rope at all by 7.9e-6
 * (rms 1.8e-6); both fail the bounds below. Margins are ~1e-3, far above the
 * tolerance, so argmaxes must agree wherever the reference margin >= TINY_TIE. */
#define TINY_MAX_ABS_TOL 6e-6        /* F16 K/V (the default) */
#define TINY_RMS_TOL 1.5e-6
#define TINY_F32KV_MAX_ABS_TOL 5e-7  /* F32 K/V */
#define TINY_F32KV_RMS_TOL 1e-7
#define TINY_COS_MIN 0.99999
#define TINY_TIE (2 * TINY_MAX_ABS_TOL)

/* ------------------------------------------------------------------------ */
/* Golden file (tests/data/golden/<name>.txt)                                */
/* ------------------------------------------------------------------------ */

#define G_MAX_CASES 16

typedef struct gcase {
    char name[64];
    int32_t *prompt;     /* (n_prompt) */
    int n_prompt;
    char logits_file[128];
    int32_t *greedy;     /* (n_greedy) reference greedy continuation */
    int n_greedy;
    float *greedy_margin; /* (n_greedy) top1 - top2 logit of the reference at each step */
    int n_greedy_margin;
    int32_t *tf_tokens;  /* (n_tf) teacher-forced text */
    int n_tf;
    int32_t *tf_argmax;  /* (n_tf) reference argmax after each position */
    int n_tf_argmax;
    float *tf_margin;    /* (n_tf) */
    int n_tf_margin;
} gcase;

typedef struct golden {
    char dir[512];
    char model[256];
    char sha256[65];
    int n_vocab;
    gcase cases[G_MAX_CASES];
    int n_cases;
} golden;

static int read_ints(FILE *f, int32_t **out, int *n) {
    if (fscanf(f, "%d", n) != 1 || *n < 0 || *n > 1000000) return -1;
    *out = malloc((size_t)(*n ? *n : 1) * sizeof **out);
    if (!*out) return -1;
    for (int i = 0; i < *n; i++)
        if (fscanf(f, "%d", &(*out)[i]) != 1) return -1;
    return 0;
}

static int read_floats(FILE *f, float **out, int *n) {
    if (fscanf(f, "%d", n) != 1 || *n < 0 || *n > 1000000) return -1;
    *out = malloc((size_t)(*n ? *n : 1) * sizeof **out);
    if (!*out) return -1;
    for (int i = 0; i < *n; i++)
        if (fscanf(f, "%f", &(*out)[i]) != 1) return -1;
    return 0;
}

static void golden_free(golden *g) {
    for (int i = 0; i < g->n_cases; i++) {
        gcase *c = &g->cases[i];
        free(c->prompt); free(c->greedy); free(c->greedy_margin);
        free(c->tf_tokens); free(c->tf_argmax); free(c->tf_margin);
    }
    memset(g, 0, sizeof *g);
}

/* Parses tests/data/golden/<name>.txt: whitespace-separated "key values",
 * '#' comments to the end of the line. Returns 0 or -1 (message printed). */
static int golden_load(const char *name, golden *g) {
    memset(g, 0, sizeof *g);
    const char *dir = getenv("KVSTITCH_GOLDEN");
    snprintf(g->dir, sizeof g->dir, "%s", dir && *dir ? dir : "tests/data/golden");
    char path[600];
    snprintf(path, sizeof path, "%s/%s.txt", g->dir, name);
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "  %s: cannot open (run from the repository root)\n", path); return -1; }
    char key[64];
    gcase *c = NULL;
    int st = 0, format = 0;
    while (st == 0 && fscanf(f, "%63s", key) == 1) {
        if (key[0] == '#') {
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
        } else if (!strcmp(key, "format")) {
            st = fscanf(f, "%d", &format) == 1 && format == 1 ? 0 : -1;
        } else if (!strcmp(key, "model")) {
            st = fscanf(f, "%255s", g->model) == 1 ? 0 : -1;
        } else if (!strcmp(key, "model_sha256")) {
            st = fscanf(f, "%64s", g->sha256) == 1 ? 0 : -1;
        } else if (!strcmp(key, "reference")) {
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
        } else if (!strcmp(key, "n_vocab")) {
            st = fscanf(f, "%d", &g->n_vocab) == 1 ? 0 : -1;
        } else if (!strcmp(key, "case")) {
            if (g->n_cases == G_MAX_CASES) { st = -1; break; }
            c = &g->cases[g->n_cases++];
            st = fscanf(f, "%63s", c->name) == 1 ? 0 : -1;
        } else if (!c) {
            st = -1; /* every other key belongs to a case */
        } else if (!strcmp(key, "prompt")) {
            st = read_ints(f, &c->prompt, &c->n_prompt);
        } else if (!strcmp(key, "logits")) {
            st = fscanf(f, "%127s", c->logits_file) == 1 ? 0 : -1;
        } else if (!strcmp(key, "greedy")) {
            st = read_ints(f, &c->greedy, &c->n_greedy);
        } else if (!strcmp(key, "greedy_margin")) {
            st = read_floats(f, &c->greedy_margin, &c->n_greedy_margin);
        } else if (!strcmp(key, "hidden")) {
            double a, b; /* hidden-state checksums: not exposed by the public API */
            int l;
            st = fscanf(f, "%d %lf %lf", &l, &a, &b) == 3 ? 0 : -1;
        } else if (!strcmp(key, "tf_tokens")) {
            st = read_ints(f, &c->tf_tokens, &c->n_tf);
        } else if (!strcmp(key, "tf_argmax")) {
            st = read_ints(f, &c->tf_argmax, &c->n_tf_argmax);
        } else if (!strcmp(key, "tf_margin")) {
            st = read_floats(f, &c->tf_margin, &c->n_tf_margin);
        } else if (!strcmp(key, "end")) {
            c = NULL;
        } else {
            fprintf(stderr, "  %s: unknown key '%s'\n", path, key);
            st = -1;
        }
    }
    fclose(f);
    for (int i = 0; st == 0 && i < g->n_cases; i++) {
        gcase *k = &g->cases[i];
        if (k->n_greedy != k->n_greedy_margin || k->n_tf != k->n_tf_argmax || k->n_tf != k->n_tf_margin)
            st = -1;
    }
    if (st || format != 1 || g->n_vocab <= 0 || g->n_cases == 0) {
        fprintf(stderr, "  %s: malformed golden file (near key '%s')\n", path, key);
        golden_free(g);
        return -1;
    }
    return 0;
}

static const gcase *golden_case(const golden *g, const char *name) {
    for (int i = 0; i < g->n_cases; i++)
        if (!strcmp(g->cases[i].name, name)) return &g->cases[i];
    return NULL;
}

/* Reads the case's float32 little-endian logits; malloc'd, NULL on error. */
static float *golden_logits(const golden *g, const gcase *c) {
    if (!c->logits_file[0]) return NULL;
    char path[700];
    snprintf(path, sizeof path, "%s/%s", g->dir, c->logits_file);
    size_t len = 0;
    char *buf = kt_read_file(path, &len);
    const uint32_t one = 1;
    if (!buf || len != (size_t)g->n_vocab * 4 || *(const uint8_t *)&one != 1) {
        fprintf(stderr, "  %s: missing, wrong size, or a big-endian host\n", path);
        free(buf);
        return NULL;
    }
    float *out = malloc(len);
    if (out) memcpy(out, buf, len);
    free(buf);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Engine helpers                                                             */
/* ------------------------------------------------------------------------ */

typedef struct engine {
    kvs_model *model;
    kvs_context *ctx;
    int n_vocab;
} engine;

static int engine_open(engine *e, const char *path, const golden *g, kvs_kv_type kv_type) {
    memset(e, 0, sizeof *e);
    if (!path) return -1;
    /* The golden data belongs to one exact file: refuse another. */
    size_t len = 0;
    char *bytes = kt_read_file(path, &len);
    if (!bytes) { fprintf(stderr, "  %s: cannot read\n", path); return -1; }
    char hex[65];
    kvs_sha256_hex(bytes, len, hex);
    free(bytes);
    if (strcmp(hex, g->sha256) != 0) {
        fprintf(stderr, "  %s: sha256 %s is not the golden model %s (%s)\n", path, hex, g->model, g->sha256);
        return -1;
    }
    int st = kvs_model_load(path, kvs_model_default_params(), &e->model);
    if (st) { fprintf(stderr, "  load %s: %s: %s\n", path, kvs_strerror(st), kvs_last_error()); return -1; }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 1024;
    cp.kv_type = kv_type;
    if ((st = kvs_context_new(e->model, cp, &e->ctx))) {
        fprintf(stderr, "  context: %s: %s\n", kvs_strerror(st), kvs_last_error());
        kvs_model_free(e->model);
        e->model = NULL;
        return -1;
    }
    e->n_vocab = kvs_vocab_size(e->model);
    if (e->n_vocab != g->n_vocab) {
        fprintf(stderr, "  n_vocab %d != golden %d\n", e->n_vocab, g->n_vocab);
        return -1;
    }
    return 0;
}

static void engine_close(engine *e) {
    kvs_context_free(e->ctx);
    kvs_model_free(e->model);
    memset(e, 0, sizeof *e);
}

/* Decodes n tokens at positions p0.. in one call; logits of the last one. */
static int run(engine *e, const int32_t *toks, int n, int p0, float *logits) {
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    if (!pos) return -1;
    for (int i = 0; i < n; i++) pos[i] = p0 + i;
    int st = kvs_decode(e->ctx, toks, pos, n, logits);
    if (st) fprintf(stderr, "  kvs_decode: %s: %s\n", kvs_strerror(st), kvs_last_error());
    free(pos);
    return st;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

typedef struct cmp { double max_abs, rms, cos; int at; } cmp;

static cmp compare(const float *a, const float *ref, int n) {
    cmp r = {0, 0, 0, 0};
    double ab = 0, aa = 0, bb = 0, dd = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (isnan(d)) d = INFINITY; /* a NaN logit must fail the bound */
        if (d > r.max_abs) { r.max_abs = d; r.at = i; }
        dd += d * d;
        ab += (double)a[i] * ref[i];
        aa += (double)a[i] * a[i];
        bb += (double)ref[i] * ref[i];
    }
    r.rms = sqrt(dd / n);
    r.cos = ab / (sqrt(aa) * sqrt(bb) + 1e-300);
    return r;
}

typedef struct tol {
    double max_abs, rms, cos_min; /* bounds on the last-position logits */
    double tie;                   /* reference margins below this are near ties */
    kvs_kv_type kv_type;          /* the context's KV type */
} tol;

/* ------------------------------------------------------------------------ */
/* Checks shared by both models                                              */
/* ------------------------------------------------------------------------ */

/* Last-position logits of every prompt case, the prompt fed in one call. */
static void check_logits(const char *gname, const char *model_path, tol t) {
    golden g;
    engine e;
    if (golden_load(gname, &g)) { kt_test_failed++; return; }
    if (engine_open(&e, model_path, &g, t.kv_type)) { kt_test_failed++; engine_close(&e); golden_free(&g); return; }
    float *lg = malloc((size_t)e.n_vocab * sizeof *lg);
    double worst = 0;
    for (int i = 0; lg && i < g.n_cases; i++) {
        const gcase *c = &g.cases[i];
        if (!c->n_prompt) continue;
        float *ref = golden_logits(&g, c);
        CHECK(ref != NULL);
        if (!ref) continue;
        if (run(&e, c->prompt, c->n_prompt, 0, lg) == 0) {
            cmp r = compare(lg, ref, e.n_vocab);
            int a = argmax(lg, e.n_vocab), ra = argmax(ref, e.n_vocab);
            double margin = c->n_greedy_margin ? c->greedy_margin[0] : 0.0; /* ref top1 - top2 here */
            printf("  %s/%s: %d prompt tokens, max|diff| %.3g (id %d: %.4f vs ref %.4f), rms %.3g, "
                   "cosine %.9f, top-1 %d (ref %d, ref margin %.4f%s)\n", gname, c->name, c->n_prompt, r.max_abs,
                   r.at, lg[r.at], ref[r.at], r.rms, r.cos, a, ra, margin,
                   a != ra ? (margin < t.tie ? ": differs at a near tie" : ": DIFFERS") : "");
            CHECK_MSG(r.max_abs <= t.max_abs, "%s: max|diff| %.3g > %g", c->name, r.max_abs, t.max_abs);
            CHECK_MSG(r.rms <= t.rms, "%s: rms diff %.3g > %g", c->name, r.rms, t.rms);
            CHECK_MSG(r.cos >= t.cos_min, "%s: cosine %.9f < %g", c->name, r.cos, t.cos_min);
            CHECK_MSG(a == ra || margin < t.tie, "%s: top-1 %d != ref %d at ref margin %.4f", c->name, a, ra,
                      margin);
            if (r.max_abs > worst) worst = r.max_abs;
        } else {
            kt_test_failed++;
        }
        free(ref);
    }
    printf("  %s: worst last-position max|diff| %.3g (tolerance %g)\n", gname, worst, t.max_abs);
    free(lg);
    engine_close(&e);
    golden_free(&g);
}

/* Greedy along the reference's path: feed the reference's greedy tokens one
 * by one (kvs_decode) and compare the engine's argmax with the reference's
 * next token at each of the first n_steps steps. Unlike a free-running
 * comparison, one near tie does not end the comparison: every step is
 * checked, and a miss is allowed only at a reference margin below t.tie. */
static void check_greedy(const char *gname, const char *model_path, int n_steps, tol t) {
    const double tie = t.tie;
    golden g;
    engine e;
    if (golden_load(gname, &g)) { kt_test_failed++; return; }
    if (engine_open(&e, model_path, &g, t.kv_type)) { kt_test_failed++; engine_close(&e); golden_free(&g); return; }
    float *lg = malloc((size_t)e.n_vocab * sizeof *lg);
    for (int i = 0; lg && i < g.n_cases; i++) {
        const gcase *c = &g.cases[i];
        if (!c->n_prompt || !c->n_greedy) continue;
        CHECK(c->n_greedy >= n_steps);
        if (run(&e, c->prompt, c->n_prompt, 0, lg)) { kt_test_failed++; continue; }
        int n_match = 0, n_tie = 0, n = n_steps < c->n_greedy ? n_steps : c->n_greedy;
        float min_margin = 1e30f;
        for (int k = 0; k < n; k++) {
            int a = argmax(lg, e.n_vocab);
            if (c->greedy_margin[k] < min_margin) min_margin = c->greedy_margin[k];
            if (a == c->greedy[k]) {
                n_match++;
            } else {
                int near = c->greedy_margin[k] < tie;
                n_tie += near;
                printf("  %s/%s: step %d: engine %d vs ref %d, ref margin %.4f%s\n", gname, c->name, k, a,
                       c->greedy[k], c->greedy_margin[k], near ? " (a near tie)" : " (DECISIVE)");
                CHECK_MSG(near, "%s: greedy step %d differs at ref margin %.4f >= %g", c->name, k,
                          c->greedy_margin[k], tie);
            }
            if (k + 1 < n && run(&e, &c->greedy[k], 1, c->n_prompt + k, lg)) { kt_test_failed++; break; }
        }
        printf("  %s/%s: on the reference's greedy path %d of %d steps agree, %d near-tie misses "
               "(smallest ref margin %.4f)\n", gname, c->name, n_match, n, n_tie, min_margin);
    }
    free(lg);
    engine_close(&e);
    golden_free(&g);
}

/* Teacher-forced texts, one token per kvs_decode call: argmax after every
 * position against the reference. min_raw: required agreement over all
 * positions; min_decisive: over the positions where the reference margin is
 * >= t.tie (where rounding cannot flip the argmax). */
static void check_teacher_forced(const char *gname, const char *model_path, double min_raw, double min_decisive,
                                 tol t) {
    const double tie = t.tie;
    golden g;
    engine e;
    if (golden_load(gname, &g)) { kt_test_failed++; return; }
    if (engine_open(&e, model_path, &g, t.kv_type)) { kt_test_failed++; engine_close(&e); golden_free(&g); return; }
    float *lg = malloc((size_t)e.n_vocab * sizeof *lg);
    int total = 0, agree = 0, n_decisive = 0, decisive_miss = 0, n_cases = 0;
    for (int i = 0; lg && i < g.n_cases; i++) {
        const gcase *c = &g.cases[i];
        if (!c->n_tf) continue;
        n_cases++;
        int n_agree = 0;
        for (int p = 0; p < c->n_tf; p++) {
            if (run(&e, &c->tf_tokens[p], 1, p, lg)) { kt_test_failed++; break; }
            int a = argmax(lg, e.n_vocab);
            if (a == c->tf_argmax[p]) {
                n_agree++;
            } else {
                printf("  %s/%s: position %d: top-1 %d vs ref %d, ref margin %.4f%s\n", gname, c->name, p, a,
                       c->tf_argmax[p], c->tf_margin[p], c->tf_margin[p] < tie ? " (near tie)" : "");
                if (c->tf_margin[p] >= tie) decisive_miss++;
            }
            n_decisive += c->tf_margin[p] >= tie;
        }
        printf("  %s/%s: top-1 agreement %d/%d = %.2f%%\n", gname, c->name, n_agree, c->n_tf,
               100.0 * n_agree / c->n_tf);
        total += c->n_tf;
        agree += n_agree;
    }
    CHECK(n_cases > 0 && total > 0);
    double raw = total ? (double)agree / total : 0;
    double dec = n_decisive ? (double)(n_decisive - decisive_miss) / n_decisive : 0;
    printf("  %s: teacher-forced top-1 agreement %d/%d = %.2f%% (required %.2f%%); where the ref margin >= %g: "
           "%d/%d = %.2f%% (required %.2f%%)\n", gname, agree, total, 100 * raw, 100 * min_raw, tie,
           n_decisive - decisive_miss, n_decisive, 100 * dec, 100 * min_decisive);
    CHECK_MSG(raw >= min_raw, "agreement %.4f < %.4f", raw, min_raw);
    CHECK_MSG(n_decisive > total / 4 && dec >= min_decisive, "decisive agreement %.4f < %.4f (of %d)", dec,
              min_decisive, n_decisive);
    free(lg);
    engine_close(&e);
    golden_free(&g);
}

/* kvs_generate, greedy and free-running (it follows its own tokens and
 * stops after an end-of-generation token): it must give the reference's
 * greedy tokens for n_steps tokens or up to the reference's first EOG,
 * unless it leaves the reference's path at a near tie (reported, with the
 * margin; the steps after such a divergence cannot be compared). Its
 * first_logits are the prompt's last-position logits. */
static void check_generate(const char *gname, const char *model_path, int n_steps, tol t) {
    golden g;
    engine e;
    if (golden_load(gname, &g)) { kt_test_failed++; return; }
    if (engine_open(&e, model_path, &g, t.kv_type)) { kt_test_failed++; engine_close(&e); golden_free(&g); return; }
    for (int i = 0; i < g.n_cases; i++) {
        const gcase *c = &g.cases[i];
        if (!c->n_prompt || !c->n_greedy) continue;
        int n_expect = 0; /* reference tokens up to n_steps or the first EOG, inclusive */
        while (n_expect < n_steps && n_expect < c->n_greedy && !kvs_token_is_eog(e.model, c->greedy[n_expect++])) {}
        kvs_generate_params gp = kvs_generate_default_params();
        gp.n_predict = n_steps;
        gp.sampling.temperature = 0.0f;
        gp.sampling.repeat_penalty = 1.0f;
        kvs_generate_result r;
        memset(&r, 0, sizeof r);
        int st = kvs_generate(e.ctx, c->prompt, c->n_prompt, &gp, &r);
        CHECK_MSG(st == 0, "kvs_generate: %s: %s", kvs_strerror(st), kvs_last_error());
        if (st) continue;
        int n_match = 0;
        while (n_match < r.n_tokens && n_match < n_expect && r.tokens[n_match] == c->greedy[n_match]) n_match++;
        if (n_match == n_expect) {
            printf("  %s/%s: kvs_generate matches the reference for all %d tokens%s\n", gname, c->name, n_match,
                   n_expect < n_steps ? " up to and including its EOG" : "");
            CHECK_EQ_INT(r.n_tokens, n_expect);
        } else if (n_match < r.n_tokens) {
            float m = c->greedy_margin[n_match];
            printf("  %s/%s: kvs_generate matches the reference for %d of %d tokens, then %d vs ref %d at a ref "
                   "margin of %.4f%s\n", gname, c->name, n_match, n_expect, r.tokens[n_match],
                   c->greedy[n_match], m, m < t.tie ? " (a near tie)" : " (DECISIVE)");
            CHECK_MSG(m < t.tie, "%s: generation leaves the reference at step %d, ref margin %.4f >= %g", c->name,
                      n_match, m, t.tie);
        } else {
            printf("  %s/%s: kvs_generate stopped after %d tokens; the reference expects %d\n", gname, c->name,
                   r.n_tokens, n_expect);
            kt_test_failed++;
        }
        float *ref = golden_logits(&g, c);
        CHECK(ref != NULL && r.first_logits != NULL && r.n_vocab == e.n_vocab);
        if (ref && r.first_logits) {
            cmp cr = compare(r.first_logits, ref, e.n_vocab);
            CHECK_MSG(cr.max_abs <= t.max_abs, "%s: first_logits max|diff| %.3g > %g", c->name, cr.max_abs,
                      t.max_abs);
        }
        free(ref);
        kvs_generate_result_free(&r);
    }
    engine_close(&e);
    golden_free(&g);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                      */
/* ------------------------------------------------------------------------ */

static char tiny_path[600];

static const char *tiny_model(void) {
    snprintf(tiny_path, sizeof tiny_path, "%s/models/llama-2-tiny-random.gguf", kt_shared_dir());
    return tiny_path;
}

TEST(golden_files_parse) {
    golden g;
    CHECK(golden_load("tiny", &g) == 0);
    CHECK(golden_case(&g, "hello") && golden_case(&g, "tf_random200"));
    golden_free(&g);
    CHECK(golden_load("smollm2", &g) == 0);
    const gcase *c = golden_case(&g, "chat_france");
    CHECK(c && c->n_prompt > 30 && c->n_greedy >= SMOL_N_GREEDY);
    CHECK(golden_case(&g, "tf_plain") && golden_case(&g, "musique"));
    if (c) {
        float *ref = golden_logits(&g, c);
        CHECK(ref != NULL);
        /* The reference answers "The capital of France is Paris." */
        if (ref) CHECK(c->greedy[0] == argmax(ref, g.n_vocab));
        free(ref);
    }
    golden_free(&g);
}

static const tol smol_tol = {SMOL_MAX_ABS_TOL, SMOL_RMS_TOL, SMOL_COS_MIN, SMOL_TIE, KVS_KV_F16};
static const tol tiny_tol = {TINY_MAX_ABS_TOL, TINY_RMS_TOL, TINY_COS_MIN, TINY_TIE, KVS_KV_F16};
static const tol tiny_f32kv_tol = {TINY_F32KV_MAX_ABS_TOL, TINY_F32KV_RMS_TOL, TINY_COS_MIN, TINY_TIE, KVS_KV_F32};

TEST(golden_tiny_logits) { check_logits("tiny", tiny_model(), tiny_tol); }
TEST(golden_tiny_logits_f32kv) { check_logits("tiny", tiny_model(), tiny_f32kv_tol); }
TEST(golden_tiny_greedy) { check_greedy("tiny", tiny_model(), 48, tiny_tol); }
TEST(golden_tiny_teacher_forced) { check_teacher_forced("tiny", tiny_model(), 0.95, 1.0, tiny_tol); }
TEST(golden_smollm2_logits) { check_logits("smollm2", kt_model_path(), smol_tol); }
TEST(golden_smollm2_greedy) { check_greedy("smollm2", kt_model_path(), SMOL_N_GREEDY, smol_tol); }
TEST(golden_smollm2_generate) { check_generate("smollm2", kt_model_path(), SMOL_N_GREEDY, smol_tol); }
TEST(golden_smollm2_teacher_forced) {
    check_teacher_forced("smollm2", kt_model_path(), SMOL_TF_RAW, SMOL_TF_DECISIVE, smol_tol);
}

/* Optional arguments: names of the tests to run (all when none). */
static int g_argc;
static char **g_argv;
static int wanted(const char *name) {
    if (g_argc < 2) return 1;
    for (int i = 1; i < g_argc; i++)
        if (!strcmp(g_argv[i], name)) return 1;
    return 0;
}
#define RUN_IF(name) do { if (wanted(#name)) RUN(name); } while (0)

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    RUN_IF(golden_files_parse);
    RUN_IF(golden_tiny_logits);
    RUN_IF(golden_tiny_logits_f32kv);
    RUN_IF(golden_tiny_greedy);
    RUN_IF(golden_tiny_teacher_forced);
    RUN_IF(golden_smollm2_logits);
    RUN_IF(golden_smollm2_greedy);
    RUN_IF(golden_smollm2_generate);
    RUN_IF(golden_smollm2_teacher_forced);
    return kt_summary();
}
