/*
 * kvstitch perplexity: the text is cut into windows of --ctx tokens; each
 * window is run from position 0 and only its second half is scored (every
 * scored token then sees at least ctx/2 tokens of context), as llama.cpp's
 * perplexity tool does. PPL = exp(mean negative log-likelihood).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_util.h"

typedef struct ppl_opts {
    const char *model_path, *file, *kv_type;
    int n_ctx, max_chunks, n_threads, json, quiet, beyond_train;
} ppl_opts;

static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", ppl_opts, model_path, "PATH", "GGUF file"),
    CLI_FILE_OPT("-f", "--file", ppl_opts, file, "PATH", "text to score (a NUL byte in it is an error)"),
    CLI_INT_OPT(NULL, "--ctx", ppl_opts, n_ctx, 4, 1 << 20, "N",
                "window length in tokens (default 512); the second half of each is scored"),
    CLI_INT_OPT(NULL, "--chunks", ppl_opts, max_chunks, 0, 1 << 30, "N", "score at most N windows (default 0: all)"),
    CLI_INT_OPT(NULL, "--threads", ppl_opts, n_threads, 1, KVS_MAX_THREADS, "N", "worker threads (default: all cores)"),
    CLI_FLAG_OPT(NULL, "--ctx-beyond-train", ppl_opts, beyond_train, 1,
                 "allow --ctx beyond the model's trained context length (output degrades)"),
    CLI_KV_TYPE_OPT(ppl_opts, kv_type),
    CLI_FLAG_OPT(NULL, "--json", ppl_opts, json, 1, "one JSON object instead of text"),
    CLI_FLAG_OPT("-q", "--quiet", ppl_opts, quiet, 1, "no progress on the terminal"),
};
static const cli_command k_cmd = {
    "perplexity", "usage: kvstitch perplexity -m MODEL -f FILE [--ctx 512] [--chunks N] [--threads N] [--json]\n",
    k_opts, (int)(sizeof k_opts / sizeof k_opts[0]), NULL, NULL};

/* -log softmax(logits)[target], in double. */
static double nll(const float *logits, int n_vocab, int32_t target) {
    float max = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    return log(sum) - ((double)logits[target] - max);
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o = {.n_ctx = 512};
    int prc = cli_parse(&k_cmd, argc, argv, &o, NULL);
    if (prc >= 0) return prc;
    const char *model_path = o.model_path, *file = o.file;
    int n_ctx = o.n_ctx, max_chunks = o.max_chunks, n_threads = o.n_threads, json = o.json;
    if (!model_path || !file) return cli_usage_error("perplexity", "-m MODEL and -f FILE are required");

    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) return 1;
    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    int32_t *ids = NULL, *pos = NULL;
    float *logits = NULL;
    int rc = 1, n = 0;
    int st = kvs_model_load(model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) { cli_fail(st, model_path); goto done; }
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    /* The first token of every window is BOS for models that want one. */
    int add_bos = info.add_bos && info.bos_id >= 0;
    if (!(ids = cli_tokenize(model, text, len, add_bos ? KVS_TOKENIZE_ADD_BOS : 0, &n))) goto done;
    int n_chunks = n / n_ctx;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks == 0) {
        fprintf(stderr, "kvstitch perplexity: %s has %d tokens, fewer than one window of --ctx %d\n", file, n, n_ctx);
        goto done;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.allow_beyond_train = o.beyond_train;
    kvs_kv_type_parse(o.kv_type ? o.kv_type : "f16", &cp.kv_type); /* a listed choice: it parses */
    cli_progress_attach(&cp, "perplexity window", !o.quiet && !json);
    if ((st = kvs_context_new(model, cp, &ctx)) != KVS_OK) { cli_fail(st, "context"); goto done; }
    int first = n_ctx / 2, n_logits = n_ctx - first;
    int n_vocab = kvs_vocab_size(model);
    pos = malloc((size_t)n_ctx * sizeof *pos);
    logits = malloc((size_t)n_logits * (size_t)n_vocab * sizeof *logits);
    if (!pos || !logits) { fprintf(stderr, "kvstitch perplexity: out of memory\n"); goto done; }
    for (int i = 0; i < n_ctx; i++) pos[i] = i;

    double sum = 0.0, sum2 = 0.0;
    long long count = 0;
    if (!json) printf("%d tokens, %d windows of %d, scoring tokens %d..%d of each\n", n, n_chunks, n_ctx, first + 1, n_ctx - 1);
    for (int c = 0; c < n_chunks; c++) {
        int32_t *win = ids + (size_t)c * n_ctx;
        int32_t saved = win[0];
        if (add_bos) win[0] = info.bos_id;
        st = kvs_decode_logits(ctx, win, pos, n_ctx, logits, n_logits);
        win[0] = saved;
        if (st != KVS_OK) { cli_fail(st, "decode"); goto done; }
        /* Logit row j (window position first + j) predicts the token after it. */
        for (int j = 0; first + j + 1 < n_ctx; j++) {
            double v = nll(logits + (size_t)j * n_vocab, n_vocab, win[first + j + 1]);
            sum += v;
            sum2 += v * v;
            count++;
        }
        if (!json) {
            printf("[%d]%.4f%s", c + 1, exp(sum / count), c + 1 == n_chunks ? "\n" : ",");
            fflush(stdout);
        }
    }
    double mean = sum / count, var = sum2 / count - mean * mean;
    double ppl = exp(mean), err = count > 1 && var > 0 ? ppl * sqrt(var / (count - 1)) : 0.0;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        json_add_number(j, "ppl", ppl);
        json_add_number(j, "ppl_stderr", err);
        cJSON_AddNumberToObject(j, "tokens_scored", (double)count);
        cJSON_AddNumberToObject(j, "windows", n_chunks);
        cJSON_AddNumberToObject(j, "ctx", n_ctx);
        if (json_print_line(stdout, j)) goto done;
    } else
        printf("perplexity: %.4f +/- %.4f over %lld tokens\n", ppl, err, count);
    rc = 0;
done:
    free(text);
    free(ids);
    free(pos);
    free(logits);
    kvs_context_free(ctx);
    kvs_model_free(model);
    return rc;
}
