/* kvstitch warm: compute and cache the KV of prompts without generating. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_util.h"

#define MAX_TEXTS 256

typedef struct warm_opts {
    const char *model_path, *cache_dir, *system, *kv_type, *chat_template;
    const char *texts[MAX_TEXTS];
    const char *docs[MAX_TEXTS], *doc_prefix;
    int n_docs;
    int is_file[MAX_TEXTS];
    int n_texts, chat, json, quiet, n_threads, n_batch, n_ctx, beyond_train, chunk_tokens;
    int bake_neighbours, doc_set;
    unsigned long long cache_max_bytes;
    cli_redis_opts redis;
} warm_opts;

static int set_max_bytes(void *opts, const char *v) {
    return cli_parse_bytes("--cache-max-bytes", v, &((warm_opts *)opts)->cache_max_bytes) != 0;
}

/* -f FILE and TEXT arguments, in the order given. */
static int add_text(warm_opts *o, const char *text, int is_file) {
    if (o->n_texts == MAX_TEXTS) return cli_usage_error("warm", "at most %d prompts per call", MAX_TEXTS);
    o->is_file[o->n_texts] = is_file;
    o->texts[o->n_texts++] = text;
    return 0;
}
static int add_positional(void *opts, const char *arg) { return add_text(opts, arg, 0); }
static int add_file(void *opts, const char *path) { return add_text(opts, path, 1); }

#define O warm_opts
static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", O, model_path, "PATH", "GGUF file"),
    CLI_DIR_OPT(NULL, "--cache-dir", O, cache_dir, "DIR", "the cache directory (created if missing)"),
    CLI_OPT(NULL, "--cache-max-bytes", CLI_STR, O, cache_max_bytes, "N",
            "bound on DIR's bytes (K/M/G/T suffixes; default: half the space free\n"
            "for the cache); least recently used entries are evicted",
            .set = set_max_bytes, .needs = "--cache-dir"),
    CLI_REDIS_ROWS(O, redis),
    /* -f keeps its place among the TEXT arguments: add_file appends it in order */
    {.short_name = "-f",
     .name = "--file",
     .kind = CLI_FILE,
     .metavar = "PATH",
     .help = "a prompt from a file (repeatable; a NUL byte in it is an error)",
     .repeatable = 1,
     .set = add_file},
    CLI_STR_OPT(NULL, "--chat-template", O, chat_template, "FAMILY",
                "the chat template family --chat lays out: chatml, qwen3, llama3,\n"
                "llama2, gemma (default: the one the file's template names)"),
    CLI_FLAG_OPT(NULL, "--chat", O, chat, 1,
                 "lay each text out as the user message of the chat template, up to\n"
                 "the end of the text (what `generate --chat` with a prompt that starts\n"
                 "with this text shares with it)"),
    CLI_STR_OPT(NULL, "--system", O, system, "TEXT", "system message (with --chat)"),
    {.name = "--doc",
     .kind = CLI_FILE,
     .offset = CLI_OFF(O, docs),
     .max_count = MAX_TEXTS,
     .count_offset = CLI_OFF(O, n_docs),
     .metavar = "FILE",
     .help = "a document for non-prefix reuse: its KV is computed after the doc\n"
             "prefix, cached by content, and reused at any position by\n"
             "`generate --doc` (give the same --chat / --doc-prefix there)"},
    CLI_OPT(NULL, "--doc-prefix", CLI_STR, O, doc_prefix, "TEXT",
            "the text documents are computed after (default: with --chat the\n"
            "template's text before the user's content, else nothing / BOS)",
            .needs = "--doc"),
    CLI_OPT(NULL, "--bake-with-neighbours", CLI_INT, O, bake_neighbours, "K",
                "cross-document baking: after warming the --doc documents, compute\n"
                "each one again after the cached KV of the K others most like it\n"
                "(shared tokens) and store that as its baked entry, which\n"
                "`generate --doc` moves instead of the plain one (closer to a full\n"
                "prefill when the documents come together; `cache ls`: baked/K)",
                .min = 1, .max = 255, .needs = "--doc"),
    CLI_OPT(NULL, "--doc-set", CLI_FLAG, O, doc_set, NULL,
            "bake every --doc document after all the others (documents that are\n"
            "retrieved together)", .flag_value = 1, .needs = "--doc"),
    CLI_INT_OPT(NULL, "--chunk-tokens", O, chunk_tokens, 1, KVS_MAX_CHUNK_TOKENS, "N", "chunk size (default 64)"),
    CLI_INT_OPT(NULL, "--threads", O, n_threads, 1, KVS_MAX_THREADS, "N", "worker threads (default: all cores)"),
    CLI_INT_OPT(NULL, "--batch", O, n_batch, 1, 1 << 16, "N", "tokens per forward chunk (default 512; same bits)"),
    CLI_INT_OPT(NULL, "--ctx", O, n_ctx, 1, 1 << 20, "N", "context length (default: the model's, at most 8192)"),
    CLI_FLAG_OPT(NULL, "--ctx-beyond-train", O, beyond_train, 1,
                 "allow --ctx beyond the model's trained context length (output degrades)"),
    CLI_KV_TYPE_OPT(O, kv_type),
    CLI_FLAG_OPT(NULL, "--json", O, json, 1, "one JSON object: {\"prompts\": [report...], totals}"),
    CLI_FLAG_OPT("-q", "--quiet", O, quiet, 1, "no progress on the terminal"),
};
#undef O

static const cli_command k_cmd = {
    "warm",
    "usage: kvstitch warm -m MODEL (--cache-dir DIR | --redis URL | --redis-cluster LIST) [options]\n"
    "                     (-f FILE | TEXT | --doc FILE)...\n"
    "Caches the prompt KV of each text (each -f FILE or TEXT is one prompt, warmed on its own),\n"
    "so that a later `kvstitch generate --cache-dir DIR` whose prompt starts with it reuses it.\n",
    k_opts,
    (int)(sizeof k_opts / sizeof k_opts[0]),
    "Each report: tokens, chunks, stored, already cached, whether the end is chunk-aligned, the\n"
    "partial tail, and a warning when the end of the text may tokenize differently once more\n"
    "text follows (then a longer prompt reuses only stable_tokens of it).\n",
    add_positional,
};

static int parse(int argc, char **argv, warm_opts *o) {
    int rc = cli_parse(&k_cmd, argc, argv, o, NULL);
    if (rc >= 0) return rc;
    if (!o->model_path) return cli_usage_error("warm", "-m MODEL is required");
    if (cli_redis_finish("warm", &o->redis) != -1) return 2;
    if (!o->cache_dir && !cli_redis_given(&o->redis))
        return cli_usage_error("warm", "--cache-dir DIR is required (or --redis URL / --redis-cluster LIST)");
    if (o->n_texts == 0 && o->n_docs == 0)
        return cli_usage_error("warm", "give at least one prompt (-f FILE or TEXT) or document (--doc FILE)");
    if (o->system && !o->chat) return cli_usage_error("warm", "--system needs --chat");
    if (o->chat_template && !o->chat) return cli_usage_error("warm", "--chat-template needs --chat");
    if (o->chat_template && kvs_chat_family_check(o->chat_template))
        return cli_usage_error("warm", "--chat-template: %s", kvs_last_error());
    if (o->doc_set && o->bake_neighbours)
        return cli_usage_error("warm", "give --doc-set (all the others) or --bake-with-neighbours K, not both");
    return -1;
}

static const char *last_occurrence(const char *hay, const char *needle, size_t n) {
    const char *at = NULL;
    for (const char *p = hay; n && (p = memmem(p, strlen(p), needle, n)) != NULL; p++)
        at = p;
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
        while (tl && strchr(" \t\r\n", *t)) {
            t++;
            tl--;
        }
        while (tl && strchr(" \t\r\n", t[tl - 1]))
            tl--;
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
    if (w->aligned)
        printf("ends on the chunk grid");
    else
        printf("ends off the chunk grid: a %d-token partial chunk", w->partial_tail);
    printf("; %.1f ms\n", w->ms);
}

/* The documents and the prompt before the first one (the system segment),
 * as a request's lookup will want them: the docs warmer, stepped to the
 * end (kvs_warm_docs caches the documents only: a --system given to warm
 * had been dropped without a word, and the request computed it). A layout
 * that does not fit goes to kvs_warm_docs, whose report names the document. */
static int warm_docs_and_prefix(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, kvs_warm_docs_report *r) {
    kvs_docs_warmer *w = NULL;
    int st = kvs_docs_warmer_new(ctx, cache, seg, 0, &w); /* plain KV, as kvs_warm_docs */
    if (st == KVS_ERR_CONTEXT_FULL) return kvs_warm_docs(ctx, cache, seg, r);
    int done = 0;
    while (!st && !done) st = kvs_docs_warmer_step(w, 1 << 30, &done);
    if (!st) kvs_docs_warmer_report(w, r);
    kvs_docs_warmer_free(w);
    return st;
}

/* --doc: caches the documents' KV and the prompt before them. With --json
 * (root not NULL) it adds the "docs" member. Returns 0, or 1 after printing
 * an error. */
static int warm_docs(kvs_context *ctx, kvs_cache *cache, const warm_opts *o, cJSON *root) {
    char *texts[MAX_TEXTS];
    int n = 0, rc = 1;
    for (; n < o->n_docs; n++)
        if (!(texts[n] = cli_read_doc(o->docs[n]))) goto out;
    kvs_segments seg = {o->chat, o->system, (const char *const *)texts, NULL, o->n_docs, NULL, o->doc_prefix};
    kvs_warm_docs_report r;
    int bake = o->doc_set ? -1 : o->bake_neighbours;
    int st = bake ? kvs_bake_docs(ctx, cache, &seg, bake, &r) : warm_docs_and_prefix(ctx, cache, &seg, &r);
    if (st == KVS_ERR_CONTEXT_FULL && r.too_long_doc >= 0 && r.too_long_doc < o->n_docs) {
        char what[600];
        snprintf(what, sizeof what, "warm documents: --doc %.500s", o->docs[r.too_long_doc]);
        cli_fail(st, what);
        goto out;
    }
    if (st != KVS_OK) {
        cli_fail(st, "warm documents");
        goto out;
    }
    if (root)
        cJSON_AddItemToObject(root, "docs", json_warm_docs_report(&r));
    else { /* a document not written is not called stored (it had been, beside the warning) */
        char stored[96] = "computed and stored";
        if (r.n_write_errors)
            snprintf(stored, sizeof stored, "computed, %d of them not written (not stored)", r.n_write_errors);
        if (bake)
            printf("documents: %d (%d tokens): %d cached already, %d %s; baked: %d now, %d already, %d left plain; "
                   "%.1f ms\n", r.n_docs, r.n_tokens, r.n_cached, r.n_computed, stored, r.n_baked, r.n_bake_cached,
                   r.n_unbaked, r.ms);
        else
            printf("documents: %d (%d tokens): %d cached already, %d %s; the prompt before them: %d tokens "
                   "computed; %.1f ms\n", r.n_docs, r.n_tokens, r.n_cached, r.n_computed, stored, r.n_prefix_computed,
                   r.ms);
    }
    if (r.n_write_errors) /* with --json and --quiet too, as for prompts */
        fprintf(stderr, "kvstitch warm: warning: %d documents could not be written to the cache dir (not stored)\n",
                r.n_write_errors);
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        free(texts[i]);
    return rc;
}

int cmd_warm(int argc, char **argv) {
    warm_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc < 0 && o.system && cli_check_utf8("--system", o.system)) rc = 1;
    for (int i = 0; rc < 0 && i < o.n_texts; i++) {
        char what[32];
        snprintf(what, sizeof what, "text %d (an argument)", i + 1);
        if (!o.is_file[i] && cli_check_utf8(what, o.texts[i])) rc = 1;
    }
    if (rc >= 0) { /* a usage error: the Redis options' URL copy too */
        cli_redis_free(&o.redis);
        return rc;
    }

    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    kvs_cache *cache = NULL;
    cJSON *root = NULL, *prompts = NULL;
    rc = 1;
    kvs_model_params mp = kvs_model_default_params();
    mp.chat_template = o.chat_template;
    int st = kvs_model_load(o.model_path, mp, &model);
    if (st != KVS_OK) {
        rc = cli_fail(st, o.model_path);
        goto done;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    cp.n_batch = o.n_batch;
    cp.allow_beyond_train = o.beyond_train;
    kvs_kv_type_parse(o.kv_type ? o.kv_type : "f16", &cp.kv_type); /* a listed choice: it parses */
    cli_progress_attach(&cp, "warm", !o.quiet && !o.json);
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = o.cache_dir;
    cli_redis_apply(&o.redis, &pp);
    pp.chunk_tokens = o.chunk_tokens;
    pp.cache_max_bytes = o.cache_max_bytes;
    pp.kv_type = cp.kv_type;
    if ((st = kvs_context_new(model, cp, &ctx)) != KVS_OK) {
        cli_fail(st, "context");
        goto done;
    }
    if ((st = kvs_cache_open(model, pp, &cache)) != KVS_OK) {
        cli_fail(st, o.cache_dir ? o.cache_dir : "redis");
        goto done;
    }
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    int flags = KVS_TOKENIZE_PARSE_SPECIAL | (info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0);

    int total_tokens = 0, total_stored = 0, total_warnings = 0, total_write_errors = 0;
    if (o.json && (!(root = cJSON_CreateObject()) || !(prompts = cJSON_AddArrayToObject(root, "prompts")))) {
        fprintf(stderr, "kvstitch warm: out of memory\n");
        goto done;
    }
    for (int i = 0; i < o.n_texts; i++) {
        char *owned = NULL, *prompt = NULL;
        const char *text = o.texts[i];
        if (o.is_file[i]) {
            if (!(owned = cli_read_file(text, NULL))) goto done;
            text = owned;
        }
        if (o.chat) {
            prompt = chat_prefix(model, o.system, text);
            if (!prompt) {
                free(owned);
                goto done;
            }
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
            cli_fail(st, src); /* (the library says "warm: ...": not twice) */
            goto done;
        }
        total_tokens += w.n_tokens;
        total_stored += w.n_stored;
        total_write_errors += w.n_write_errors;
        total_warnings += w.warning[0] != 0;
        if (w.warning[0]) /* on stderr, with --json too (it had gone to stdout, and nowhere with --json) */
            fprintf(stderr, "kvstitch warm: warning: %s: %s\n", src, w.warning);
        if (prompts) {
            cJSON_AddItemToArray(prompts, json_warm_report(o.is_file[i] ? o.texts[i] : src, &w));
        } else {
            print_report_text(src, &w);
        }
    }
    if (o.n_docs && warm_docs(ctx, cache, &o, root)) goto done;
    uint64_t redis_errors = 0, redis_dropped = 0;
    if (cli_redis_given(&o.redis)) cli_redis_report("warm", cache, &redis_errors, &redis_dropped);
    if (root) {
        char fp[65];
        kvs_cache_fingerprint_hex(cache, fp);
        cJSON_AddNumberToObject(root, "tokens", total_tokens);
        cJSON_AddNumberToObject(root, "chunks_stored", total_stored);
        cJSON_AddNumberToObject(root, "write_errors", total_write_errors);
        if (cli_redis_given(&o.redis)) {
            cJSON_AddNumberToObject(root, "redis_write_errors", (double)redis_errors);
            cJSON_AddNumberToObject(root, "redis_dropped", (double)redis_dropped);
        }
        cJSON_AddNumberToObject(root, "warnings", total_warnings);
        cJSON_AddStringToObject(root, "fingerprint", fp);
        rc = json_print_line(stdout, root) ? 1 : 0;
        root = NULL;
    } else {
        rc = 0;
    }
done:
    cJSON_Delete(root);
    kvs_cache_free(cache);
    kvs_context_free(ctx);
    kvs_model_free(model);
    cli_redis_free(&o.redis);
    return rc;
}
