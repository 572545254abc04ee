/* The CLI commands of the engine (generate, bench, perplexity) run as
 * processes: --help, the JSON contract of generate --json (checked against
 * the library computing the same request in-process), errors, bench and
 * perplexity output. The binary comes from $KVSTITCH_CLI (run-tests.sh). */
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kvstitch.h"

static const char *cli(void) {
    const char *c = getenv("KVSTITCH_CLI");
    return c && *c ? c : "build/kvstitch";
}

static char g_out[1 << 20], g_err[1 << 16];

/* Runs "CLI args" with stdout/stderr captured into g_out/g_err; returns the exit code. */
static int run_cli(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >/tmp/kvs_cli_out.$PPID 2>/tmp/kvs_cli_err.$PPID", cli(), args);
    int rc = system(cmd);
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvs_cli_out.%d", (int)getpid());
    char *o = kt_read_file(path, NULL);
    unlink(path);
    snprintf(path, sizeof path, "/tmp/kvs_cli_err.%d", (int)getpid());
    char *e = kt_read_file(path, NULL);
    unlink(path);
    snprintf(g_out, sizeof g_out, "%s", o ? o : "");
    snprintf(g_err, sizeof g_err, "%s", e ? e : "");
    free(o);
    free(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Value text after "key": in g_out, or NULL. */
static const char *json_val(const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(g_out, k);
    return p ? p + strlen(k) + (p[strlen(k)] == ' ') : NULL;
}

TEST(test_help_everywhere) {
    const char *cmds[3] = {"generate", "bench", "perplexity"};
    for (int i = 0; i < 3; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        CHECK_EQ_INT(run_cli(a), 0);
        CHECK_MSG(strstr(g_out, "usage: kvstitch") != NULL, "%s", g_out);
    }
    CHECK(strstr((run_cli("generate --help"), g_out), "--json") != NULL);
}

TEST(test_generate_json_contract) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "generate -m %s --chat -p 'What color is the sky on a clear day?' -n 24 --threads 2 --json",
             model);
    int rc = run_cli(args);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, g_err);
    if (rc) return;
    /* one object, one line, exactly the contract fields, in order (issue 10
     * added stop_reason, prefilled_tokens and timings at the end) */
    static const char *keys[12] = {"prompt_tokens", "tokens", "text", "ttft_ms", "prefill_ms", "prefill_tok_s",
                                   "decode_tok_s", "first_logits_sha256", "first_top_logprobs", "stop_reason",
                                   "prefilled_tokens", "timings"};
    const char *prev = g_out;
    for (int i = 0; i < 12; i++) {
        const char *v = json_val(keys[i]);
        CHECK_MSG(v != NULL && v > prev, "key %s", keys[i]);
        if (v) prev = v;
    }
    int n_keys = 0;
    for (const char *p = g_out; (p = strstr(p, "\":")) != NULL; p++) n_keys++;
    CHECK_EQ_INT(n_keys, 12 + 7); /* + the 7 phases inside timings */
    CHECK(g_out[0] == '{' && strchr(g_out, '\n') == g_out + strlen(g_out) - 1);
    const char *text = json_val("text");
    CHECK(text && strstr(text, "blue") != NULL);
    const char *sha = json_val("first_logits_sha256");
    char hex[65] = {0};
    if (sha && sha[0] == '"') memcpy(hex, sha + 1, 64);
    CHECK_EQ_INT(strspn(hex, "0123456789abcdef"), 64);
    const char *top = json_val("first_top_logprobs");
    int pairs = 0;
    for (const char *p = top ? top + 1 : ""; *p && *p != '\n'; p++) pairs += *p == '[';
    CHECK_EQ_INT(pairs, 20);
    /* fewer prompt tokens than a chunk (64): a rate would measure overhead */
    CHECK(json_val("prefill_tok_s") && !strncmp(json_val("prefill_tok_s"), "null", 4));

    /* The same request through the library gives the same logits bytes. */
    kvs_model *m = NULL;
    if (kvs_model_load(model, kvs_model_default_params(), &m)) { CHECK(0); return; }
    kvs_chat_message msg = {"user", "What color is the sky on a clear day?"};
    char *rendered = NULL;
    int32_t ids[256];
    int n = 0;
    CHECK_EQ_INT(kvs_chat_render(m, NULL, &msg, 1, 1, &rendered), KVS_OK);
    CHECK_EQ_INT(kvs_tokenize(m, rendered, strlen(rendered), KVS_TOKENIZE_PARSE_SPECIAL, ids, 256, &n), KVS_OK);
    CHECK_EQ_INT(atoi(json_val("prompt_tokens")), n);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_threads = 1; /* a different thread count: the bits must not care */
    cp.n_ctx = 512;
    kvs_context *ctx = NULL;
    CHECK_EQ_INT(kvs_context_new(m, cp, &ctx), KVS_OK);
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 24;
    kvs_generate_result r;
    if (ctx && kvs_generate(ctx, ids, n, &gp, &r) == KVS_OK) {
        char lib_hex[65];
        kvs_sha256_hex(r.first_logits, (size_t)r.n_vocab * sizeof(float), lib_hex);
        CHECK_MSG(!strcmp(lib_hex, hex), "cli %s lib %s", hex, lib_hex);
        char want[256];
        int len = snprintf(want, sizeof want, "[%d", r.tokens[0]);
        for (int i = 1; i < r.n_tokens && len < 200; i++) len += snprintf(want + len, sizeof want - len, ",%d", r.tokens[i]);
        snprintf(want + len, sizeof want - len, "]");
        CHECK_MSG(!strncmp(json_val("tokens"), want, strlen(want)), "cli %.60s lib %s", json_val("tokens"), want);
        kvs_generate_result_free(&r);
    } else {
        CHECK(0);
    }
    free(rendered);
    kvs_context_free(ctx);
    kvs_model_free(m);
}

TEST(test_generate_streams_text) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "generate -m %s --chat -p 'What is the capital of Germany?' -n 16",
             model);
    CHECK_EQ_INT(run_cli(args), 0);
    CHECK_MSG(strstr(g_out, "Berlin") != NULL && g_out[0] != '{', "%s", g_out);
    /* --system replaces the template's default system message */
    snprintf(args, sizeof args, "generate -m %s --chat -p 'Hi.' -n 1 --json", model);
    CHECK_EQ_INT(run_cli(args), 0);
    int n_default = json_val("prompt_tokens") ? atoi(json_val("prompt_tokens")) : -1;
    snprintf(args, sizeof args, "generate -m %s --chat --system 'Be terse.' -p 'Hi.' -n 1 --json", model);
    CHECK_EQ_INT(run_cli(args), 0);
    int n_system = json_val("prompt_tokens") ? atoi(json_val("prompt_tokens")) : -1;
    CHECK_MSG(n_default > 10 && n_system > 10 && n_system < n_default, "%d vs %d", n_system, n_default);
}

TEST(test_generate_errors) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "generate -m %s -p 'one two three four five six seven eight nine ten' --ctx 4", model);
    CHECK(run_cli(args) != 0);
    CHECK_MSG(strstr(g_err, "context") != NULL && strstr(g_err, "tokens") != NULL, "%s", g_err);
    CHECK_EQ_INT(run_cli("generate -p hi"), 2); /* no model */
    CHECK(strstr(g_err, "-m") != NULL);
    snprintf(args, sizeof args, "generate -m %s -p hi --temp abc", model);
    CHECK(run_cli(args) != 0);
    CHECK(strstr(g_err, "--temp") != NULL);
    CHECK(run_cli("generate -m /nonexistent.gguf -p hi") != 0);
    CHECK(strstr(g_err, "/nonexistent.gguf") != NULL);
    snprintf(args, sizeof args, "generate -m %s/tokenizer-tests/ggml-vocab-gpt-2.gguf -p hi", kt_shared_dir());
    CHECK(run_cli(args) != 0);
    CHECK_MSG(strstr(g_err, "vocabulary") != NULL, "%s", g_err);
}

TEST(test_bench_json) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "bench -m %s -p 32 -n 8 --reps 1 --threads 2 --json", model);
    /* KVS_PACK=0: on AVX2-only CPUs the kernels otherwise keep a repacked
     * (anonymous) copy of the streamed matrices (kernels/pack.c); the mapping
     * itself must still be what holds the weights. */
    setenv("KVS_PACK", "0", 1);
    int rc = run_cli(args);
    unsetenv("KVS_PACK");
    CHECK_MSG(rc == 0, "%s", g_err);
    if (rc) return;
    const char *pp = strstr(g_out, "\"pp\":{\"n\":32,\"tok_s\":");
    const char *tg = strstr(g_out, "\"tg\":{\"n\":8,\"tok_s\":");
    CHECK(pp && atof(pp + strlen("\"pp\":{\"n\":32,\"tok_s\":")) > 0);
    CHECK(tg && atof(tg + strlen("\"tg\":{\"n\":8,\"tok_s\":")) > 0);
    /* The weights are file-backed pages (mmap), not anonymous copies. */
    const char *f = json_val("rss_file_bytes"), *a = json_val("rss_anon_bytes");
    CHECK(f && a);
    if (f && a) CHECK_MSG(atof(f) > 60e6 && atof(a) < atof(f), "file %s anon %s", f, a);
}

/* -d: the tests run after a context of that many tokens (llama-bench -d);
 * a depth past the model's context is an error naming it. */
TEST(test_bench_depth) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "bench -m %s -p 16 -n 4 -d 40 --reps 1 --threads 2 --json", model);
    int rc = run_cli(args);
    CHECK_MSG(rc == 0, "%s", g_err);
    if (rc) return;
    const char *d = json_val("depth");
    CHECK(d && atoi(d) == 40);
    CHECK(strstr(g_out, "\"pp\":{\"n\":16,\"tok_s\":") != NULL);
    CHECK(strstr(g_out, "\"tg\":{\"n\":4,\"tok_s\":") != NULL);
    snprintf(args, sizeof args, "bench -m %s -p 0 -n 8 -d 1000000 --reps 1", model);
    CHECK(run_cli(args) != 0);
    CHECK_MSG(strstr(g_err, "-d 1000000") && strstr(g_err, "trained on"), "%s", g_err); /* named, not the context's */
}

/* --streams N: the decode test steps N contexts together (kvs_decode_batch)
 * and reports their aggregate tokens/s, after the depth in every stream. */
TEST(test_bench_streams) {
    const char *model = kt_model_path();
    if (!model) return;
    char args[1024];
    snprintf(args, sizeof args, "bench -m %s -p 0 -n 4 -d 20 --streams 3 --reps 1 --threads 2 --json", model);
    int rc = run_cli(args);
    CHECK_MSG(rc == 0, "%s", g_err);
    if (rc) return;
    const char *tg = strstr(g_out, "\"tg\":{\"n\":4,\"streams\":3,\"tok_s\":");
    CHECK_MSG(tg && atof(tg + strlen("\"tg\":{\"n\":4,\"streams\":3,\"tok_s\":")) > 0, "%s", g_out);
    CHECK(strstr(g_out, "\"pp\"") == NULL);
    snprintf(args, sizeof args, "bench -m %s -p 0 -n 4 --streams 2 --reps 1", model);
    rc = run_cli(args);
    CHECK_MSG(rc == 0, "%s", g_err);
    CHECK_MSG(strstr(g_out, "tg4 x2") != NULL, "%s", g_out);
    /* more streams than decode tokens: the context still takes a row per stream */
    snprintf(args, sizeof args, "bench -m %s -p 0 -n 2 --streams 5 --reps 1 --json", model);
    rc = run_cli(args);
    CHECK_MSG(rc == 0, "%s", g_err);
    CHECK_MSG(strstr(g_out, "\"tg\":{\"n\":2,\"streams\":5,\"tok_s\":") != NULL, "%s", g_out);
}

TEST(test_perplexity) {
    const char *model = kt_model_path();
    if (!model) return;
    const char *path = "/tmp/kvs_ppl_test.txt";
    FILE *fp = fopen(path, "w");
    if (!fp) { CHECK(0); return; }
    for (int i = 0; i < 6; i++)
        fputs("The cat sat on the mat. It was a sunny day, and the children were playing in the garden. "
              "Their mother called them in for lunch, and they ran to the house. ", fp);
    fclose(fp);
    char args[1024];
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 64 --threads 2 --json", model, path);
    int rc = run_cli(args);
    CHECK_MSG(rc == 0, "%s", g_err);
    const char *v = json_val("ppl");
    CHECK(v != NULL);
    /* repeated simple English: low perplexity */
    if (v) CHECK_MSG(atof(v) > 1.0 && atof(v) < 20.0, "ppl %s", v);
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx 4096", model, path);
    CHECK(run_cli(args) != 0);
    CHECK(strstr(g_err, "window") != NULL);
    unlink(path);
}

int main(void) {
    RUN(test_help_everywhere);
    RUN(test_generate_json_contract);
    RUN(test_generate_streams_text);
    RUN(test_generate_errors);
    RUN(test_bench_json);
    RUN(test_bench_depth);
    RUN(test_bench_streams);
    RUN(test_perplexity);
    return kt_summary();
}
