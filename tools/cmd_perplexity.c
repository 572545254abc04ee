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

static const char *usage_text =
    "usage: kvstitch perplexity -m MODEL -f FILE [--ctx 512] [--chunks N] [--threads N] [--json]\n"
    "  -m, --model PATH   GGUF file\n"
    "  -f, --file PATH    text to score\n"
    "  --ctx N            window length in tokens (default 512); the second half of each is scored\n"
    "  --chunks N         score at most N windows (default: all)\n"
    "  --threads N        worker threads (default: all cores)\n"
    "  --json             one JSON object instead of text\n";

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
    const char *model_path = NULL, *file = NULL;
    int n_ctx = 512, max_chunks = 0, n_threads = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!v) return cli_usage_error("perplexity", "unknown option or missing value: %s", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = argv[++i];
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = argv[++i];
        else if (!strcmp(a, "--ctx")) bad = cli_parse_int(a, argv[++i], &n_ctx);
        else if (!strcmp(a, "--chunks")) bad = cli_parse_int(a, argv[++i], &max_chunks);
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(a, argv[++i], &n_threads);
        else return cli_usage_error("perplexity", "unknown option: %s", a);
        if (bad) return 2;
    }
    if (!model_path || !file) return cli_usage_error("perplexity", "-m MODEL and -f FILE are required");
    if (n_ctx < 4) return cli_usage_error("perplexity", "--ctx must be >= 4, got %d", n_ctx);
    if (max_chunks < 0 || n_threads < 0) return cli_usage_error("perplexity", "--chunks and --threads must be >= 0");

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
    if (json)
        printf("{\"ppl\": %.6f, \"ppl_stderr\": %.6f, \"tokens_scored\": %lld, \"windows\": %d, \"ctx\": %d}\n", ppl, err,
               count, n_chunks, n_ctx);
    else
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
