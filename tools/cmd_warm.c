/* kvstitch warm: compute and cache the KV of prompts without generating. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch warm -m MODEL (--cache-dir DIR | --redis URL | --redis-cluster LIST) [options] (-f FILE | TEXT | --doc FILE)...\n"
    "Caches the prompt KV of each text (each -f FILE or TEXT is one prompt, warmed on its own),\n"
    "so that a later `kvstitch generate --cache-dir DIR` whose prompt starts with it reuses it.\n"
    "  -m, --model PATH       GGUF file\n"
    "  --cache-dir DIR        the cache directory (created if missing)\n"
    "  --cache-max-bytes N    bound on DIR's bytes (K/M/G suffixes; default: half the space free\n"
    "                         for the cache); least recently used entries are evicted\n"
    "  -f, --file PATH        a prompt from a file (repeatable)\n"
    "  --chat                 lay each text out as the user message of the chat template, up to\n"
    "                         the end of the text (what `generate --chat` with a prompt that starts\n"
    "                         with this text shares with it)\n"
    "  --system TEXT          system message (with --chat)\n"
    "  --doc FILE             a document for non-prefix reuse (repeatable): its KV is computed after\n"
    "                         the doc prefix, cached by content, and reused at any position by\n"
    "                         `generate --doc` (give the same --chat / --doc-prefix there)\n"
    "  --doc-prefix TEXT      the text documents are computed after (default: with --chat the\n"
    "                         template's text before the user's content, else nothing / BOS)\n"
    "  --chunk-tokens N       chunk size (default 64)\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --ctx N                context length (default: the model's, at most 8192)\n"
    "  --json                 one JSON object: {\"prompts\": [report...], totals}\n"
    CLI_REDIS_USAGE
    "Each report: tokens, chunks, stored, already cached, whether the end is chunk-aligned, the\n"
    "partial tail, and a warning when the end of the text may tokenize differently once more\n"
    "text follows (then a longer prompt reuses only stable_tokens of it).\n";

#define MAX_TEXTS 256

typedef struct warm_opts {
    const char *model_path, *cache_dir, *system;
    const char *texts[MAX_TEXTS];
    const char *docs[MAX_TEXTS], *doc_prefix;
    int n_docs;
    int is_file[MAX_TEXTS];
    int n_texts, chat, json, n_threads, n_ctx, chunk_tokens;
    unsigned long long cache_max_bytes;
    cli_redis_opts redis;
} warm_opts;

static int parse(int argc, char **argv, warm_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (a[0] != '-' || !strcmp(a, "-")) {
            if (o->n_texts == MAX_TEXTS) return cli_usage_error("warm", "at most %d prompts per call", MAX_TEXTS);
            o->is_file[o->n_texts] = 0;
            o->texts[o->n_texts++] = a;
        }
        else if ((bad = cli_redis_option("warm", a, i + 1 < argc ? argv[i + 1] : NULL, &o->redis)) != 0) {
            if (bad > 0) bad = 0, i++;
        }
        else if (!v) return cli_usage_error("warm", "unknown option or missing value: %s", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_path = argv[++i];
        else if (!strcmp(a, "--cache-dir")) o->cache_dir = argv[++i];
        else if (!strcmp(a, "--cache-max-bytes")) bad = cli_parse_bytes(a, argv[++i], &o->cache_max_bytes);
        else if (!strcmp(a, "--system")) o->system = argv[++i];
        else if (!strcmp(a, "--doc-prefix")) o->doc_prefix = argv[++i];
        else if (!strcmp(a, "--doc")) {
            if (o->n_docs == MAX_TEXTS) return cli_usage_error("warm", "at most %d documents per call", MAX_TEXTS);
            o->docs[o->n_docs++] = argv[++i];
        }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (o->n_texts == MAX_TEXTS) return cli_usage_error("warm", "at most %d prompts per call", MAX_TEXTS);
            o->is_file[o->n_texts] = 1;
            o->texts[o->n_texts++] = argv[++i];
        }
        else if (!strcmp(a, "--chunk-tokens")) bad = cli_parse_int(a, argv[++i], &o->chunk_tokens);
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(a, argv[++i], &o->n_threads);
        else if (!strcmp(a, "--ctx")) bad = cli_parse_int(a, argv[++i], &o->n_ctx);
        else return cli_usage_error("warm", "unknown option: %s", a);
        if (bad) return 2;
    }
    if (!o->model_path) return cli_usage_error("warm", "-m MODEL is required");
    if (cli_redis_check("warm", &o->redis)) return 2;
    if ((!o->cache_dir || !*o->cache_dir) && !cli_redis_given(&o->redis))
        return cli_usage_error("warm", "--cache-dir DIR or --redis URL is required");
    if (o->n_texts == 0 && o->n_docs == 0)
        return cli_usage_error("warm", "give at least one prompt (-f FILE or TEXT) or document (--doc FILE)");
    if (o->system && !o->chat) return cli_usage_error("warm", "--system needs --chat");
    if (o->chunk_tokens < 0 || o->n_threads < 0 || o->n_ctx < 0)
        return cli_usage_error("warm", "--chunk-tokens, --threads and --ctx must be >= 0");
    return -1;
}

static const char *last_occurrence(const char *hay, const char *needle, size_t n) {
    const char *at = NULL;
    for (const char *p = hay; n && (p = memmem(p, strlen(p), needle, n)) != NULL; p++) at = p;
    return at;
}

/* With --chat: the chat rendering of (system, user = text) up to the end of
 * the text, i.e. the part a full chat prompt whose user message starts with
 * the text shares with it. malloc'd, or NULL after printing an error. */
static char *chat_prefix(const kvs_model *model, const char *system, const char *text) {
    kvs_chat_message msgs[2];
    int n = 0;
    if (system) msgs[n++] = (kvs_chat_message){"system", system};
    msgs[n++] = (kvs_chat_message){"user", text};
    char *r = NULL;
    int st = kvs_chat_render(model, NULL, msgs, n, 0, &r);
    if (st != KVS_OK) {
        cli_fail(st, "chat template");
        return NULL;
    }
    /* The user content is the last occurrence of the text; templates that
     * trim it (llama2) hold the trimmed text. */
    const char *t = text;
    size_t tl = strlen(t);
    const char *at = last_occurrence(r, t, tl);
    if (!at) {
        while (tl && strchr(" \t\r\n", *t)) { t++; tl--; }
        while (tl && strchr(" \t\r\n", t[tl - 1])) tl--;
        at = last_occurrence(r, t, tl);
    }
    if (!at) {
        fprintf(stderr, "kvstitch warm: cannot find the text in the chat template's output\n");
        free(r);
        return NULL;
    }
    size_t end = (size_t)(at - r) + tl;
    r[end] = 0;
    return r;
}

static void print_report_text(const char *src, const kvs_warm_report *w) {
    printf("%s: %d tokens, %d chunk%s of %d (%d stored, %d cached already); %d tokens computed, %d reused; ", src,
           w->n_tokens, w->n_chunks, w->n_chunks == 1 ? "" : "s", w->chunk_tokens, w->n_stored, w->n_existing,
           w->n_computed, w->n_cached);
    if (w->aligned) printf("ends on the chunk grid");
    else printf("ends off the chunk grid: a %d-token partial chunk", w->partial_tail);
    printf("; %.1f ms\n", w->ms);
    if (w->warning[0]) printf("  warning: %s\n", w->warning);
}

static void print_report_json(const char *src, const kvs_warm_report *w) {
    printf("{\"source\": ");
    cli_json_string(stdout, src, strlen(src));
    printf(", \"tokens\": %d, \"chunk_tokens\": %d, \"chunks\": %d, \"chunks_stored\": %d, \"chunks_existing\": %d, "
           "\"cached_tokens\": %d, \"computed_tokens\": %d, \"aligned\": %s, \"partial_tail_tokens\": %d, "
           "\"border_stable\": %s, \"stable_tokens\": %d, \"warning\": ",
           w->n_tokens, w->chunk_tokens, w->n_chunks, w->n_stored, w->n_existing, w->n_cached, w->n_computed,
           w->aligned ? "true" : "false", w->partial_tail, w->border_stable ? "true" : "false", w->stable_tokens);
    if (w->warning[0]) cli_json_string(stdout, w->warning, strlen(w->warning));
    else printf("null");
    printf(", \"ms\": %.3f}", w->ms);
}

/* --doc: caches the documents' KV (kvs_warm_docs). With --json it prints
 * the "docs" member of the object. Returns 0, or 1 after printing an error. */
static int warm_docs(kvs_context *ctx, kvs_cache *cache, const warm_opts *o) {
    char *texts[MAX_TEXTS];
    int n = 0, rc = 1;
    for (; n < o->n_docs; n++)
        if (!(texts[n] = cli_read_file(o->docs[n], NULL))) goto out;
    kvs_segments seg = {o->chat, o->system, (const char *const *)texts, NULL, o->n_docs, NULL, o->doc_prefix};
    kvs_warm_docs_report r;
    int st = kvs_warm_docs(ctx, cache, &seg, &r);
    if (st != KVS_OK) {
        if (o->json) printf("}\n");
        fflush(stdout);
        cli_fail(st, "warm documents");
        goto out;
    }
    if (o->json)
        printf(", \"docs\": {\"docs\": %d, \"tokens\": %d, \"cached\": %d, \"computed\": %d, \"ms\": %.3f}", r.n_docs,
               r.n_tokens, r.n_cached, r.n_computed, r.ms);
    else
        printf("documents: %d (%d tokens): %d cached already, %d computed and stored; %.1f ms\n", r.n_docs, r.n_tokens,
               r.n_cached, r.n_computed, r.ms);
    rc = 0;
out:
    for (int i = 0; i < n; i++) free(texts[i]);
    return rc;
}

int cmd_warm(int argc, char **argv) {
    warm_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;

    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    kvs_cache *cache = NULL;
    rc = 1;
    int st = kvs_model_load(o.model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) return cli_fail(st, o.model_path);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = o.cache_dir;
    cli_redis_apply(&o.redis, &pp);
    pp.chunk_tokens = o.chunk_tokens;
    pp.cache_max_bytes = o.cache_max_bytes;
    pp.kv_type = cp.kv_type;
    if ((st = kvs_context_new(model, cp, &ctx)) != KVS_OK) { cli_fail(st, "context"); goto done; }
    if ((st = kvs_cache_open(model, pp, &cache)) != KVS_OK) { cli_fail(st, o.cache_dir ? o.cache_dir : "redis"); goto done; }
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    int flags = KVS_TOKENIZE_PARSE_SPECIAL | (info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0);

    int total_tokens = 0, total_stored = 0, total_warnings = 0, total_write_errors = 0;
    if (o.json) printf("{\"prompts\": [");
    for (int i = 0; i < o.n_texts; i++) {
        char *owned = NULL, *prompt = NULL;
        const char *text = o.texts[i];
        if (o.is_file[i]) {
            if (!(owned = cli_read_file(text, NULL))) goto done;
            text = owned;
        }
        if (o.chat) {
            prompt = chat_prefix(model, o.system, text);
            if (!prompt) { free(owned); goto done; }
            text = prompt;
        }
        kvs_warm_report w;
        st = kvs_warm_text(ctx, cache, text, strlen(text), flags, &w);
        free(prompt);
        free(owned);
        char src[64];
        snprintf(src, sizeof src, "%s", o.is_file[i] ? o.texts[i] : "text");
        if (!o.is_file[i] && o.n_texts > 1) snprintf(src, sizeof src, "text %d", i + 1);
        if (st != KVS_OK) {
            if (o.json) printf("]}\n");
            fflush(stdout);
            cli_fail(st, o.is_file[i] ? o.texts[i] : "warm");
            goto done;
        }
        total_tokens += w.n_tokens;
        total_stored += w.n_stored;
        total_write_errors += w.n_write_errors;
        total_warnings += w.warning[0] != 0;
        if (o.json) {
            if (i) printf(", ");
            print_report_json(o.is_file[i] ? o.texts[i] : src, &w);
        } else {
            print_report_text(src, &w);
        }
    }
    if (o.json) printf("]");
    if (o.n_docs && warm_docs(ctx, cache, &o)) goto done;
    if (o.json) {
        char fp[65];
        kvs_cache_fingerprint_hex(cache, fp);
        printf(", \"tokens\": %d, \"chunks_stored\": %d, \"write_errors\": %d, \"warnings\": %d, \"fingerprint\": \"%s\"}\n",
               total_tokens, total_stored, total_write_errors, total_warnings, fp);
    }
    rc = 0;
done:
    kvs_cache_free(cache); /* with Redis: waits (bounded) for the queued writes */
    kvs_context_free(ctx);
    kvs_model_free(model);
    cli_redis_free(&o.redis);
    return rc;
}
