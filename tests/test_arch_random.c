/*
 * The llama (Llama 3 RoPE frequency factors), qwen3 and qwen2 rows of the
 * architecture table on small random-weight models, written at test time by
 * tests/ref/gen_random_model.py (the venv of scripts/setup-venv.sh) into a
 * temporary directory, with a float64 numpy reference (tests/ref/
 * ref_forward.py, weights dequantized by the gguf package):
 *
 *  - logits: every position of a 100-token sequence within TOL_* of the
 *    reference (relative to the reference's rms logit), top-1 equal where
 *    the reference's margin is clear; and far from a reference that gets one
 *    detail wrong (llama3: no frequency factors; qwen2/3: adjacent pairs), so
 *    the tolerance cannot hide that detail;
 *  - exact prefix reuse through the prompt cache: at split points on and off
 *    the 64-token chunk grid, the first logits and greedy tokens of a prompt
 *    sharing L tokens with a cached one are memcmp-equal to a cold run;
 *  - `kvstitch info` names the architecture, the quant mix, the RoPE scaling
 *    and the chat template family; files with scaling the engine does not run are refused
 *    with an error naming the key or tensor.
 *
 * Models (gen_random_model.py MODELS): llama3-q4km (Q4_K/Q5_K/Q6_K/Q8_0,
 * rope_freqs.weight), llama3-keys-f16 (rope.scaling.type llama3 + keys, tied
 * head), qwen3-q4km, qwen2-q4km (QKV biases), qwen3-f16 (head_dim 128:
 * n_head * head_dim != n_embd).
 * Without python and the venv every test is skipped, saying so.
 */
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "test_greedy.h"
#include "kvstitch.h"

/* max |logit - ref| / rms(ref) over all positions. The engine rounds
 * activations to ~15 bits before quantized matmuls and stores K/V as f16;
 * float weights keep more (measured figures: README, "Models"). */
#define TOL_QUANT 2e-3
#define TOL_FLOAT 2e-3
/* the wrong reference must be at least this many tolerances away */
#define WRONG_FACTOR 20.0

typedef struct model_case {
    const char *name, *arch, *family;
    int quantized;
    const char *types;  /* substring of `kvstitch info`'s tensors line */
    const char *rope;   /* its rope scaling line */
} model_case;

static const model_case k_models[] = {
    {"llama3-q4km", "llama", "llama3", 1, "(F32 x8, Q8_0 x1, Q4_K x15, Q5_K x3, Q6_K x4)", "llama3 (rope_freqs.weight)"},
    {"llama3-keys-f16", "llama", "llama3", 0, "(F32 x6, F16 x14)", "llama3 (rope.scaling.* keys)"},
    {"qwen3-q4km", "qwen3", "qwen3", 1, "(F32 x13, Q8_0 x1, Q4_K x15, Q5_K x3, Q6_K x4)", "none"},
    {"qwen2-q4km", "qwen2", "chatml", 1, "(F32 x16, Q8_0 x1, Q4_K x15, Q5_K x3, Q6_K x4)", "none"},
    {"qwen3-f16", "qwen3", "qwen3", 0, "(F32 x10, F16 x14)", "none"},
};
#define N_MODELS (int)(sizeof k_models / sizeof k_models[0])

static char g_dir[64];
static const char *g_skip; /* why nothing can run here, or NULL */
static int g_gen_ok;

static void setup(void) {
    static char py[1024], reason[1024 + 80]; /* the message and all of py */
    FILE *f = popen("scripts/setup-venv.sh 2>/dev/null | tail -n 1", "r");
    if (f) {
        if (!fgets(py, sizeof py, f)) py[0] = 0;
        pclose(f);
    }
    py[strcspn(py, "\n")] = 0;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy, gguf' 2>/dev/null", py);
    if (!py[0] || access(py, X_OK) != 0 || system(cmd) != 0) {
        snprintf(reason, sizeof reason, "no python with numpy + gguf (scripts/setup-venv.sh gave '%s')", py);
        g_skip = reason;
        return;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/kvs_arch_XXXXXX");
    if (!mkdtemp(g_dir)) {
        g_dir[0] = 0;
        return;
    }
    snprintf(cmd, sizeof cmd, "'%s' tests/ref/gen_random_model.py '%s' >&2", py, g_dir);
    g_gen_ok = system(cmd) == 0;
}

static void teardown(void) {
    if (!g_dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", g_dir);
}

#define NEED_MODELS()                                                              \
    do {                                                                           \
        if (g_skip) SKIP("%s", g_skip);                                            \
        CHECK_MSG(g_gen_ok, "tests/ref/gen_random_model.py failed (output above)"); \
        if (!g_gen_ok) return;                                                     \
    } while (0)

static void path_of(const char *name, const char *ext, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s%s", g_dir, name, ext);
}

static kvs_model *load(const char *name) {
    char p[256];
    path_of(name, ".gguf", p, sizeof p);
    kvs_model *m = NULL;
    int st = kvs_model_load(p, kvs_model_default_params(), &m);
    CHECK_MSG(st == KVS_OK, "%s: %s", name, kvs_last_error());
    return st ? NULL : m;
}

static int read_ids(const char *name, int32_t *ids, int cap) {
    char p[256];
    path_of(name, ".ids", p, sizeof p);
    FILE *f = fopen(p, "r");
    int n = 0;
    while (f && n < cap && fscanf(f, "%d", &ids[n]) == 1) n++;
    if (f) fclose(f);
    return n;
}

static double *read_f64(const char *name, const char *ext, size_t count) {
    char p[256];
    path_of(name, ext, p, sizeof p);
    size_t len = 0;
    char *raw = kt_read_file(p, &len);
    if (!raw || len != count * sizeof(double)) {
        free(raw);
        return NULL;
    }
    return (double *)raw;
}

static kvs_context *new_ctx(kvs_model *m, int n_ctx) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = n_ctx;
    kvs_context *c = NULL;
    int st = kvs_context_new(m, cp, &c);
    CHECK_MSG(st == KVS_OK, "context: %s", kvs_last_error());
    return st ? NULL : c;
}

static void check_logits(const model_case *mc) {
    kvs_model *m = load(mc->name);
    if (!m) return;
    int32_t ids[256];
    int n = read_ids(mc->name, ids, 256);
    int nv = kvs_vocab_size(m);
    double *ref = read_f64(mc->name, ".ref.f64", (size_t)n * nv), *wrong = read_f64(mc->name, ".wrong.f64", (size_t)n * nv);
    CHECK_MSG(n >= 64 && ref && wrong, "%s: %d ids, reference files %s", mc->name, n, ref && wrong ? "ok" : "missing");
    kvs_context *c = n >= 64 && ref && wrong ? new_ctx(m, 256) : NULL;
    float *lg = malloc((size_t)n * nv * sizeof(float));
    int32_t pos[256];
    for (int i = 0; i < n; i++) pos[i] = i;
    if (c && lg) {
        int st = kvs_decode_logits(c, ids, pos, n, lg, n);
        CHECK_MSG(st == KVS_OK, "%s: %s", mc->name, kvs_last_error());
        double ss = 0, err = 0, werr = 0;
        int agree = 0, decisive = 0, decisive_agree = 0;
        for (size_t i = 0; i < (size_t)n * nv; i++) ss += ref[i] * ref[i];
        double rms = sqrt(ss / ((double)n * nv));
        for (int i = 0; !st && i < n; i++) {
            const float *e = lg + (size_t)i * nv;
            const double *r = ref + (size_t)i * nv, *wr = wrong + (size_t)i * nv;
            int t1 = 0, t2 = -1;
            for (int j = 0; j < nv; j++) {
                err = fmax(err, fabs(e[j] - r[j]));
                werr = fmax(werr, fabs(e[j] - wr[j]));
                if (r[j] > r[t1]) { t2 = t1; t1 = j; }
                else if (j != t1 && (t2 < 0 || r[j] > r[t2])) t2 = j;
            }
            int a = kt_argmax(e, nv) == t1;
            agree += a;
            if (r[t1] - r[t2] >= 0.05 * rms) { decisive++; decisive_agree += a; }
        }
        double tol = mc->quantized ? TOL_QUANT : TOL_FLOAT;
        printf("  %s: max |logit - ref| = %.2e x rms %.3f (tolerance %.0e); wrong-detail reference %.2e x rms "
               "(needs > %.0e); top-1 %d/%d, where clear %d/%d\n",
               mc->name, err / rms, rms, tol, werr / rms, WRONG_FACTOR * tol, agree, n, decisive_agree, decisive);
        CHECK(!st && err / rms <= tol);
        CHECK(!st && werr / rms > WRONG_FACTOR * tol);
        CHECK_EQ_INT(decisive_agree, decisive);
    }
    free(lg);
    free(ref);
    free(wrong);
    kvs_context_free(c);
    kvs_model_free(m);
}

TEST(arch_random_logits_match_reference) {
    NEED_MODELS();
    for (int i = 0; i < N_MODELS; i++) check_logits(&k_models[i]);
}

/* A = ids (cached by kvs_warm); B_L = ids[0..L) + a tail that differs from
 * ids[L]. B from the cache must equal B cold, bit for bit, with exactly L
 * cached tokens. */
static int check_prefix_reuse(const model_case *mc) {
    kvs_model *m = load(mc->name);
    if (!m) return 0;
    int32_t a[256], b[256];
    int na = read_ids(mc->name, a, 256), same = 0;
    kvs_context *c = new_ctx(m, 256);
    kvs_cache *cache = NULL;
    kvs_cache_params cp = kvs_cache_default_params();
    int st = c ? kvs_cache_open(m, cp, &cache) : KVS_ERR_INTERNAL;
    CHECK_MSG(st == KVS_OK, "%s: cache: %s", mc->name, kvs_last_error());
    kvs_warm_report rep;
    if (!st) st = kvs_warm(c, cache, a, na, &rep);
    CHECK_MSG(st == KVS_OK, "%s: warm: %s", mc->name, kvs_last_error());
    static const int grid[] = {1, 63, 64, 65, 90};
    const int n_grid = (int)(sizeof grid / sizeof grid[0]);
    for (int g = 0; !st && g < n_grid; g++) {
        int L = grid[g], nb = L + 5;
        memcpy(b, a, (size_t)L * sizeof *b);
        for (int i = 0; i < 5; i++) b[L + i] = (a[L] + 1 + 7 * i) % 256; /* byte tokens; b[L] != a[L] */
        kvs_generate_params gp = kt_greedy(3);
        kvs_reuse_params rp = kvs_reuse_default_params();
        rp.store = 0;
        kvs_generate_result warm, cold;
        memset(&warm, 0, sizeof warm);
        memset(&cold, 0, sizeof cold);
        int s1 = kvs_generate(c, b, nb, &gp, &cold);
        int s2 = kvs_generate_cached(c, cache, b, nb, &gp, &rp, &warm);
        CHECK_MSG(s1 == KVS_OK && s2 == KVS_OK, "%s L=%d: %s", mc->name, L, kvs_last_error());
        if (!s1 && !s2) {
            int ok = warm.reuse && warm.reuse->n_cached == L && warm.n_vocab == cold.n_vocab &&
                     !memcmp(warm.first_logits, cold.first_logits, (size_t)cold.n_vocab * sizeof(float)) &&
                     warm.n_tokens == cold.n_tokens &&
                     !memcmp(warm.tokens, cold.tokens, (size_t)cold.n_tokens * sizeof(int32_t));
            CHECK_MSG(ok, "%s L=%d: cached %d tokens; output %s the cold run", mc->name, L,
                      warm.reuse ? warm.reuse->n_cached : -1, ok ? "equals" : "differs from");
            same += ok;
        }
        kvs_generate_result_free(&warm);
        kvs_generate_result_free(&cold);
    }
    printf("  %s: %d/%d split points (1, 63, 64, 65, 90) bit-identical to cold\n", mc->name, same, n_grid);
    kvs_cache_free(cache);
    kvs_context_free(c);
    kvs_model_free(m);
    return same;
}

TEST(arch_random_prefix_reuse_bit_exact) {
    NEED_MODELS();
    for (int i = 0; i < N_MODELS; i++) check_prefix_reuse(&k_models[i]);
}

/* stdout + stderr of `kvstitch info -m FILE`; its exit status in *rc. */
static char *run_info(const char *file, int *rc) {
    const char *cli = getenv("KVSTITCH_CLI");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' info -m '%s' 2>&1", cli && *cli ? cli : "build/kvstitch", file);
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    while (out && n + 1 < cap) {
        size_t r = fread(out + n, 1, cap - 1 - n, f);
        if (!r) break;
        n += r;
    }
    int st = pclose(f);
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

TEST(arch_random_info_cli) {
    NEED_MODELS();
    for (int i = 0; i < N_MODELS; i++) {
        const model_case *mc = &k_models[i];
        char p[256], want[128];
        path_of(mc->name, ".gguf", p, sizeof p);
        int rc = -1;
        char *out = run_info(p, &rc);
        CHECK_MSG(out && rc == 0, "%s: kvstitch info exited %d: %s", mc->name, rc, out ? out : "");
        if (!out) continue;
        snprintf(want, sizeof want, "architecture:    %s\n", mc->arch);
        CHECK_MSG(strstr(out, want), "%s: no '%s' in:\n%s", mc->name, want, out);
        CHECK_MSG(strstr(out, mc->types), "%s: no '%s' in:\n%s", mc->name, mc->types, out);
        snprintf(want, sizeof want, "rope scaling:    %s\n", mc->rope);
        CHECK_MSG(strstr(out, want), "%s: no '%s' in:\n%s", mc->name, want, out);
        snprintf(want, sizeof want, "chat template:   %s\n", mc->family);
        CHECK_MSG(strstr(out, want), "%s: no '%s' in:\n%s", mc->name, want, out);
        free(out);
    }
}

TEST(arch_random_refusals_name_the_key) {
    NEED_MODELS();
    static const struct {
        const char *name, *says;
    } bad[] = {
        {"bad-yarn", "llama.rope.scaling.type = 'yarn' is not supported"},
        {"bad-llama3-no-low", "key llama.rope.scaling.low_freq_factor is missing"},
        {"bad-qwen3-rope-freqs", "tensor rope_freqs.weight (RoPE frequency factors) is not supported for architecture 'qwen3'"},
        {"bad-scaling-type-u32", "key llama.rope.scaling.type: type is u32, expected string"},
        {"bad-linear-tiny-factor", "key llama.rope.scaling.factor = 9.99995e-41 must be a positive number (with a "
                                   "finite reciprocal)"},
        {"bad-attn-scale", "llama.attention.scale 3e+38 (0 < scale <= 10000)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char p[256];
        path_of(bad[i].name, ".gguf", p, sizeof p);
        kvs_model *m = NULL;
        int st = kvs_model_load(p, kvs_model_default_params(), &m);
        CHECK_MSG(st != KVS_OK && strstr(kvs_last_error(), bad[i].says), "%s: status %d, error '%s'", bad[i].name, st,
                  st ? kvs_last_error() : "");
        kvs_model_free(m);
        int rc = -1;
        char *out = run_info(p, &rc);
        CHECK_MSG(out && rc == 1 && strstr(out, bad[i].says), "%s: kvstitch info exit %d: %s", bad[i].name, rc,
                  out ? out : "");
        free(out);
    }
}

int main(void) {
    setup();
    RUN(arch_random_logits_match_reference);
    RUN(arch_random_prefix_reuse_bit_exact);
    RUN(arch_random_info_cli);
    RUN(arch_random_refusals_name_the_key);
    teardown();
    return kt_summary();
}
