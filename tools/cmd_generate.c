/* kvstitch generate: prefill a prompt and generate, streaming text or one JSON object. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_util.h"

#define N_TOP_LOGPROBS 20
#define MAX_DOCS 256
#define MAX_STOPS 16
#define DEFAULT_CHUNK_TOKENS 64

typedef struct gen_opts {
    const char *model_path, *prompt, *file, *system, *cache_dir, *reuse, *deviation, *doc_prefix, *kv_type;
    const char *chat_template;
    int n_predict, chat, json, quiet, n_threads, n_batch, n_ctx, beyond_train, no_store, chunk_tokens, cache_budget_mib;
    kvs_sampler_params sp;
    const char *docs[MAX_DOCS], *stops[MAX_STOPS];
    int n_docs, n_stops;
    kvs_repair_params rp;
    int plain_docs;
    int recal_on;                /* --recal */
    kvs_recal_params recal;      /* --recal-temperature / --recal-scale (0: not given) */
    unsigned long long cache_max_bytes;
    cli_redis_opts redis;
} gen_opts;

static int set_max_bytes(void *opts, const char *v) {
    return cli_parse_bytes("--cache-max-bytes", v, &((gen_opts *)opts)->cache_max_bytes) != 0;
}

#define O gen_opts
static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", O, model_path, "PATH", "GGUF file"),
    CLI_STR_OPT("-p", "--prompt", O, prompt, "TEXT", "prompt text (with --doc: the question)"),
    CLI_FILE_OPT("-f", "--file", O, file, "PATH", "read the prompt from a file (a NUL byte in it is an error)"),
    CLI_INT_OPT("-n", "--n-predict", O, n_predict, 0, 1 << 20, "N", "new tokens at most (default 128)"),
    CLI_FLOAT_OPT(NULL, "--temp", O, sp.temperature, 0, 100, "T", "temperature; 0 = greedy (default 0)"),
    CLI_INT_OPT(NULL, "--top-k", O, sp.top_k, 0, 1 << 20, "K", "keep the K most likely tokens; 0 = off (default 40)"),
    CLI_OPT(NULL, "--top-p", CLI_FLOAT, O, sp.top_p, "P", "nucleus sampling mass; 1 = off (default 0.95)", .max = 1,
            .min_open = 1),
    CLI_FLOAT_OPT(NULL, "--min-p", O, sp.min_p, 0, 1, "P",
                  "drop tokens below P x the best probability; 0 = off (default 0.05)"),
    CLI_OPT(NULL, "--repeat-penalty", CLI_FLOAT, O, sp.repeat_penalty, "R",
            "penalty for the last 64 tokens; 1 = off (default 1)", .max = 10, .min_open = 1),
    CLI_FLOAT_OPT(NULL, "--presence-penalty", O, sp.presence_penalty, -2, 2, "X",
                  "subtract X from the logit of every token generated so far; 0 = off (default 0)"),
    CLI_FLOAT_OPT(NULL, "--frequency-penalty", O, sp.frequency_penalty, -2, 2, "X",
                  "subtract X x its count from the logit of every token generated so far; 0 = off (default 0)"),
    CLI_U64_OPT(NULL, "--seed", O, sp.seed, "S", "random seed for sampling (default 0)"),
    CLI_OPT(NULL, "--stop", CLI_STR, O, stops, "TEXT",
            "stop when the text contains TEXT (cut from the output; stop_reason \"stop\")", .max_count = MAX_STOPS,
            .count_offset = CLI_OFF(O, n_stops)),
    CLI_STR_OPT(NULL, "--chat-template", O, chat_template, "FAMILY",
                "the chat template family --chat lays out: chatml, qwen3, llama3,\n"
                "llama2, gemma (default: the one the file's template names)"),
    CLI_FLAG_OPT(NULL, "--chat", O, chat, 1, "wrap the prompt in the model's chat template"),
    CLI_STR_OPT(NULL, "--system", O, system, "TEXT", "system message (with --chat or --doc)"),
    CLI_INT_OPT(NULL, "--threads", O, n_threads, 1, KVS_MAX_THREADS, "N", "worker threads (default: all cores)"),
    CLI_INT_OPT(NULL, "--batch", O, n_batch, 1, 1 << 16, "N",
                "tokens per forward chunk in prefill (default 512; same bits)"),
    CLI_INT_OPT(NULL, "--ctx", O, n_ctx, 1, 1 << 20, "N",
                "context length (default: the model's trained length, at most 8192,\n"
                "raised up to the trained length when the prompt needs it)"),
    CLI_FLAG_OPT(NULL, "--ctx-beyond-train", O, beyond_train, 1,
                 "allow --ctx and prompts beyond the model's trained context length\n"
                 "(no RoPE scaling is applied: the output degrades)"),
    CLI_KV_TYPE_OPT(O, kv_type),
    CLI_FLAG_OPT(NULL, "--json", O, json, 1, "print one JSON object instead of streaming text (fields: README)"),
    CLI_FLAG_OPT("-q", "--quiet", O, quiet, 1, "no progress, no warnings, no stats line"),
    CLI_OPT(NULL, "--cache-dir", CLI_DIR, O, cache_dir, "DIR",
            "reuse the KV of the longest cached prefix of the prompt from DIR\n"
            "(bit-identical output) and store the prompt's new chunks there",
            .group = "Prompt KV cache:"),
    CLI_OPT(NULL, "--reuse", CLI_STR, O, reuse, "MODE",
            "prefix (default) or none (compute every token); with --doc the repair\n"
            "of moved documents: none, selective, cacheblend, firstk, query (default), full",
            .needs = CLI_CACHE_NEEDS),
    CLI_OPT(NULL, "--no-store", CLI_FLAG, O, no_store, NULL, "do not store the prompt's chunks", .flag_value = 1,
            .needs = CLI_CACHE_NEEDS),
    CLI_OPT(NULL, "--chunk-tokens", CLI_INT, O, chunk_tokens, "N", "chunk size for new chunks (default 64)", .min = 1,
            .max = KVS_MAX_CHUNK_TOKENS, .needs = CLI_CACHE_NEEDS),
    CLI_OPT(NULL, "--cache-max-bytes", CLI_STR, O, cache_max_bytes, "N",
            "bound on DIR's bytes (K/M/G/T suffixes; default: half the space free\n"
            "for the cache); least recently used entries are evicted",
            .needs = "--cache-dir", .set = set_max_bytes),
    CLI_OPT(NULL, "--cache-budget", CLI_INT, O, cache_budget_mib, "MIB",
            "memory for cached chunks (default: 1/4 of RAM)", .min = 1, .max = 1 << 24, .needs = CLI_CACHE_NEEDS),
    CLI_REDIS_ROWS(O, redis),
    CLI_OPT(NULL, "--doc", CLI_FILE, O, docs, "FILE",
            "a document, laid out after the system message and before the question\n"
            "(-p / -f); its KV is cached by content and reused at any position",
            .max_count = MAX_DOCS, .count_offset = CLI_OFF(O, n_docs), .needs = CLI_CACHE_NEEDS,
            .group = "Documents (non-prefix reuse, RAG; with --cache-dir or --redis):"),
    CLI_OPT(NULL, "--recompute-ratio", CLI_FLOAT, O, rp.recompute_ratio, "R",
            "cacheblend, query: share of document tokens recomputed (default 0.10)", .max = 1,
            .needs = "--doc"),
    CLI_OPT(NULL, "--query-seams", CLI_FLAG, O, rp.query_seams, NULL,
            "query: also recompute selective's tokens (--overlap before each seam)\n"
            "beyond the ratio (default off)", .flag_value = 1, .needs = "--doc"),
    CLI_OPT(NULL, "--overlap", CLI_INT, O, rp.overlap, "R",
            "selective: tokens recomputed before each seam (default 16)", .max = 1 << 16, .needs = "--doc"),
    CLI_OPT(NULL, "--first-k", CLI_INT, O, rp.first_k, "K",
            "firstk: tokens recomputed at the start of each document (default 16)", .max = 1 << 16, .needs = "--doc"),
    CLI_OPT(NULL, "--check-layer", CLI_INT, O, rp.check_layer, "L",
            "cacheblend: layer where the KV deviation is measured (default 1)", .max = 1024, .needs = "--doc"),
    CLI_OPT(NULL, "--min-deviation", CLI_FLOAT, O, rp.min_deviation, "D",
            "cacheblend: recompute only tokens deviating more than D (default 0)", .max = 1e30, .needs = "--doc"),
    CLI_OPT(NULL, "--deviation", CLI_CHOICE, O, deviation, "M", "cacheblend: the ranking metric (default v-l2)",
            .choices = "v-l2|k-cos", .needs = "--doc"),
    CLI_OPT(NULL, "--seams", CLI_FLAG, O, rp.cacheblend_seams, NULL,
            "cacheblend: also recompute selective's tokens beyond the ratio (default)", .flag_value = 1,
            .needs = "--doc"),
    CLI_OPT(NULL, "--no-seams", CLI_FLAG, O, rp.cacheblend_seams, NULL, "cacheblend: plain CacheBlend",
            .needs = "--doc"),
    CLI_OPT(NULL, "--narrow-from", CLI_FLOAT, O, rp.narrow_from, "R",
            "cacheblend: gradual narrowing from R of the document tokens down to\n"
            "--recompute-ratio over --narrow-layers layers (0 = off, else >= the ratio)",
            .max = 1, .needs = "--doc"),
    CLI_OPT(NULL, "--narrow-layers", CLI_INT, O, rp.narrow_layers, "N",
            "cacheblend: layers the narrowing takes (default 4)", .min = 1, .max = 1024, .needs = "--doc"),
    CLI_OPT(NULL, "--plain-docs", CLI_FLAG, O, plain_docs, NULL,
            "move the documents' plain KV even where a baked one is cached\n"
            "(`warm --bake-with-neighbours` / `--doc-set`)", .flag_value = 1, .needs = "--doc"),
    CLI_OPT(NULL, "--recal", CLI_FLAG, O, recal_on, NULL,
            "APE's attention recalibration: the question and the output attend\n"
            "to the moved documents at temperature T, their log-sum-exp times S\n"
            "(T = S = 0.9 unless given below)", .flag_value = 1, .needs = "--doc"),
    CLI_OPT(NULL, "--recal-temperature", CLI_FLOAT, O, recal.temperature, "T",
            "--recal's temperature (0.1..4, implies --recal)", .min = 0.1, .max = 4, .needs = "--doc"),
    CLI_OPT(NULL, "--recal-scale", CLI_FLOAT, O, recal.scale, "S",
            "--recal's log-sum-exp scale (0.1..4, implies --recal)", .min = 0.1, .max = 4, .needs = "--doc"),
    CLI_OPT(NULL, "--doc-prefix", CLI_STR, O, doc_prefix, "TEXT",
            "the text documents are computed after (default: with --chat the\n"
            "template's text before the user's content, else nothing / BOS)",
            .needs = "--doc"),
};
#undef O

static const cli_command k_cmd = {
    "generate",
    "usage: kvstitch generate -m MODEL (-p TEXT | -f FILE) [options]\n"
    "       kvstitch generate -m MODEL --cache-dir DIR [--chat] [--system TEXT] --doc FILE... (-p QUESTION)\n",
    k_opts,
    (int)(sizeof k_opts / sizeof k_opts[0]),
    "Sampling order: repeat penalty, top-k, temperature, top-p, min-p.\n"
    "Generation stops at end-of-sequence, -n tokens, a --stop string or a full context (stop_reason).\n",
    NULL,
};

/* The repair strategies (--reuse with --doc) each option tunes: one given
 * for a strategy it does not tune is an error (it had been ignored without
 * a word: --first-k under query, --check-layer under selective). */
#define RM(m) (1u << (m))
static const struct {
    const char *name;
    unsigned modes;
} k_repair_opts[] = {
    {"--recompute-ratio", RM(KVS_REPAIR_CACHEBLEND) | RM(KVS_REPAIR_QUERY)},
    {"--query-seams", RM(KVS_REPAIR_QUERY)},
    {"--overlap", RM(KVS_REPAIR_SELECTIVE) | RM(KVS_REPAIR_CACHEBLEND) | RM(KVS_REPAIR_QUERY)}, /* the seams' */
    {"--first-k", RM(KVS_REPAIR_FIRSTK)},
    {"--check-layer", RM(KVS_REPAIR_CACHEBLEND)},
    {"--min-deviation", RM(KVS_REPAIR_CACHEBLEND)},
    {"--deviation", RM(KVS_REPAIR_CACHEBLEND)},
    {"--seams", RM(KVS_REPAIR_CACHEBLEND)},
    {"--no-seams", RM(KVS_REPAIR_CACHEBLEND)},
    {"--narrow-from", RM(KVS_REPAIR_CACHEBLEND)},
    {"--narrow-layers", RM(KVS_REPAIR_CACHEBLEND)},
    /* full moves nothing: nothing to recalibrate */
    {"--recal", ~RM(KVS_REPAIR_FULL)},
    {"--recal-temperature", ~RM(KVS_REPAIR_FULL)},
    {"--recal-scale", ~RM(KVS_REPAIR_FULL)},
};
#undef RM

static int check_repair_opts(const gen_opts *o, const int *given) {
    for (size_t i = 0; i < sizeof k_repair_opts / sizeof k_repair_opts[0]; i++) {
        const unsigned modes = k_repair_opts[i].modes;
        if (!cli_given(&k_cmd, given, k_repair_opts[i].name) || modes >> o->rp.mode & 1u) continue;
        char tunes[128] = "";
        for (int m = 0; m < 32; m++) {
            const char *name = modes >> m & 1u ? kvs_repair_mode_name((kvs_repair_mode)m) : NULL;
            if (name) snprintf(tunes + strlen(tunes), sizeof tunes - strlen(tunes), "%s%s", tunes[0] ? ", " : "", name);
        }
        return cli_usage_error(k_cmd.name, "%s does not apply to --reuse %s%s (it tunes: %s)", k_repair_opts[i].name,
                               kvs_repair_mode_name(o->rp.mode), o->reuse ? "" : ", the default", tunes);
    }
    if (cli_given(&k_cmd, given, "--overlap") && o->rp.mode == KVS_REPAIR_QUERY && !o->rp.query_seams)
        return cli_usage_error(k_cmd.name, "--overlap under --reuse query needs --query-seams");
    if (cli_given(&k_cmd, given, "--overlap") && o->rp.mode == KVS_REPAIR_CACHEBLEND && !o->rp.cacheblend_seams)
        return cli_usage_error(k_cmd.name, "--overlap under --reuse cacheblend needs its seams (not --no-seams)");
    return -1;
}

/* Combinations the table cannot express. -1 to go on, else the exit code. */
static int check(gen_opts *o, const int *given) {
    const char *c = k_cmd.name;
    if (cli_redis_finish(c, &o->redis) != -1) return 2;
    if (!o->model_path) return cli_usage_error(c, "-m MODEL is required");
    if (!o->prompt == !o->file) return cli_usage_error(c, "give exactly one of -p TEXT or -f FILE");
    if (o->system && !o->chat && !o->n_docs) return cli_usage_error(c, "--system needs --chat (or --doc)");
    if (o->chat_template && !o->chat) return cli_usage_error(c, "--chat-template needs --chat");
    if (o->chat_template && kvs_chat_family_check(o->chat_template))
        return cli_usage_error(c, "--chat-template: %s", kvs_last_error());
    if (o->n_docs && o->no_store)
        return cli_usage_error(c, "--no-store does not apply to --doc (documents are always cached)");
    /* --reuse means the reuse mode without --doc, the repair strategy with it. */
    kvs_repair_mode repair;
    int is_repair = o->reuse && kvs_repair_mode_parse(o->reuse, &repair) == KVS_OK;
    if (o->reuse && !o->n_docs && strcmp(o->reuse, "prefix") && strcmp(o->reuse, "none"))
        return cli_usage_error(c, "--reuse must be prefix or none without --doc, got '%s'%s", o->reuse,
                               is_repair ? " (a repair strategy: it needs --doc)" : "");
    if (o->n_docs && o->reuse) {
        if (!strcmp(o->reuse, "prefix"))
            o->rp.mode = KVS_REPAIR_FULL;
        else if (is_repair)
            o->rp.mode = repair;
        else
            /* the accepted names come from the library's strategy table */
            return cli_usage_error(c, "--reuse must be a repair strategy with --doc (prefix = full): %s",
                                   kvs_last_error());
    }
    if (o->deviation) kvs_deviation_parse(o->deviation, &o->rp.deviation);
    if (o->rp.narrow_from != 0.0f && o->rp.narrow_from < o->rp.recompute_ratio)
        return cli_usage_error(c, "--narrow-from must be 0 (off) or a number in [--recompute-ratio %g, 1], got %g",
                               (double)o->rp.recompute_ratio, (double)o->rp.narrow_from);
    if (o->n_docs && check_repair_opts(o, given) != -1) return 2;
    return -1;
}

static int stream_piece(void *user, int32_t token, const char *piece, size_t len) {
    (void)user;
    (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* The prompt as token ids: plain text, or rendered through the chat template. */
static int32_t *prompt_tokens(const kvs_model *model, const gen_opts *o, const char *text, int *n) {
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    int flags = KVS_TOKENIZE_PARSE_SPECIAL | (info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0);
    if (!o->chat) return cli_tokenize(model, text, strlen(text), flags, n);
    kvs_chat_message msgs[2];
    int n_msgs = 0;
    if (o->system) msgs[n_msgs++] = (kvs_chat_message){"system", o->system};
    msgs[n_msgs++] = (kvs_chat_message){"user", text};
    char *rendered = NULL;
    int st = kvs_chat_render(model, NULL, msgs, n_msgs, 1, &rendered);
    if (st != KVS_OK) {
        cli_fail(st, "chat template");
        return NULL;
    }
    int32_t *ids = cli_tokenize(model, rendered, strlen(rendered), flags, n);
    free(rendered);
    return ids;
}

/* Tokens the prompt's layout takes around an empty text (BOS, the chat
 * template): no shortening of the text removes them. 0 with --doc (the
 * documents can be shortened too) or when it cannot be told. */
static int layout_tokens(const kvs_model *model, const gen_opts *o) {
    int n = 0;
    if (o->n_docs) return 0;
    int32_t *ids = prompt_tokens(model, o, "", &n);
    free(ids);
    return ids ? n : 0;
}

/* Context limits. The prompt must fit the model's trained length (a hard
 * limit unless --ctx-beyond-train) and the context; without --ctx the
 * context grows up to the trained length when the prompt needs it. Sets
 * *n_ctx (0 = the library's default). 0 to go on, 1 after an error. */
static int fit_context(const kvs_model *model, const kvs_model_info *info, const gen_opts *o, int n, int *n_ctx) {
    const int train = info->n_ctx_train > 0 ? info->n_ctx_train : 1 << 20;
    const int deflt = train < 8192 ? train : 8192, want = n + (o->n_predict > 0 ? o->n_predict : 1);
    *n_ctx = o->n_ctx;
    if (n > train && !o->beyond_train) {
        const char *name = info->name[0] ? info->name : "the model";
        const int layout = layout_tokens(model, o);
        /* A prompt of exactly the trained length fits (one token is then
         * generated). Advice that leaves no text (a model trained on a
         * context of 1 token had been told to shorten a 3-token prompt by 3)
         * is not given. */
        if (train <= layout)
            fprintf(stderr,
                    "kvstitch generate: the prompt has %d tokens but %s was trained on a context of only %d "
                    "token%s (%s.context_length), and the prompt's layout alone (BOS, chat template) takes %d: "
                    "no text fits (--ctx-beyond-train runs it anyway, with degraded output)\n",
                    n, name, train, train == 1 ? "" : "s", info->arch, layout);
        else
            fprintf(stderr,
                    "kvstitch generate: the prompt has %d tokens but %s was trained on at most %d "
                    "(%s.context_length): shorten it by at least %d tokens, to %d (raising --ctx cannot help; "
                    "--ctx-beyond-train runs it anyway, with degraded output)\n",
                    n, name, train, info->arch, n - train, train);
        return 1;
    }
    if (o->n_ctx && o->n_ctx > train && !o->beyond_train) {
        fprintf(stderr,
                "kvstitch generate: --ctx %d exceeds the %d tokens the model was trained on "
                "(%s.context_length); use at most %d, or add --ctx-beyond-train (degraded output)\n",
                o->n_ctx, train, info->arch, train);
        return 1;
    }
    if (o->n_ctx && n > o->n_ctx) {
        /* the last generated token is never stored: want - 1 positions hold
         * the prompt and every -n token (the advice had been one too high) */
        fprintf(stderr,
                "kvstitch generate: the prompt has %d tokens but the context (--ctx %d) holds only %d: raise "
                "--ctx to at least %d (the model's trained limit is %d)\n",
                n, o->n_ctx, o->n_ctx, want - 1 <= train ? want - 1 : n, train);
        return 1;
    }
    if (!o->n_ctx && want > deflt) *n_ctx = want < train || o->beyond_train ? want : train;
    int ctx = *n_ctx ? *n_ctx : deflt;
    if (!o->quiet && want > ctx + 1)
        fprintf(stderr,
                "kvstitch generate: warning: the context holds %d tokens and the prompt takes %d: at most %d "
                "of the -n %d tokens can be generated (stop_reason \"context\")\n",
                ctx, n, ctx - n + 1, o->n_predict);
    return 0;
}

static void print_stats(const kvs_generate_result *r) {
    double dec = r->n_tokens > 1 && r->timings.decode_ms > 0 ? (r->n_tokens - 1) * 1000.0 / r->timings.decode_ms : 0;
    double pre = json_rate(r->n_prefilled, r->timings.prefill_ms, DEFAULT_CHUNK_TOKENS);
    char pre_s[48] = "";
    if (pre == pre) snprintf(pre_s, sizeof pre_s, " (%.1f tok/s)", pre);
    fprintf(stderr, "[prompt %d tokens, prefill %.1f ms%s, %d tokens generated, decode %.1f tok/s, stop: %s]\n",
            r->n_prompt, r->timings.prefill_ms, pre_s, r->n_tokens, dec, kvs_stop_reason_name(r->stop_reason));
    if (r->reuse)
        fprintf(stderr,
                "[cache: %d of %d prompt tokens reused (%.1f%%), %d computed, %d chunks stored, "
                "ttft %.1f ms]\n",
                r->reuse->n_reused, r->n_prompt, 100.0 * r->reuse->cache_hit_ratio, r->n_live,
                r->reuse->n_chunks_stored, r->ttft_ms);
    if (r->docs)
        fprintf(stderr, "[documents: %d from the cache (%d baked), %d computed; %d tokens moved, %d recomputed]\n",
                r->docs->n_docs_hit, r->docs->n_docs_baked, r->docs->n_docs_computed, r->docs->n_moved,
                r->docs->n_recomputed);
}

typedef struct gen_run {
    kvs_model *model;
    kvs_context *ctx;
    kvs_cache *cache;
    char *texts[MAX_DOCS]; /* the documents' contents */
    int n_texts;
    int32_t *ids;
    int n;
} gen_run;

static void run_free(gen_run *g) {
    for (int i = 0; i < g->n_texts; i++)
        free(g->texts[i]);
    free(g->ids);
    kvs_cache_free(g->cache);
    kvs_context_free(g->ctx);
    kvs_model_free(g->model);
}

/* Tokenizes the prompt (plain, chat, or segments with --doc) into g->ids
 * and returns the tokenize time; -1 after an error. */
static double tokenize_prompt(gen_run *g, const gen_opts *o, const char *text, kvs_segments *seg) {
    double t0 = cli_now_ms();
    if (o->n_docs) {
        for (; g->n_texts < o->n_docs; g->n_texts++)
            if (!(g->texts[g->n_texts] = cli_read_doc(o->docs[g->n_texts]))) return -1;
        *seg = (kvs_segments){o->chat, o->system, (const char *const *)g->texts, NULL, o->n_docs, text, o->doc_prefix};
        int st = kvs_segments_tokenize(g->model, seg, &g->ids, &g->n);
        if (st != KVS_OK) return cli_fail(st, "segments"), -1;
    } else if (!(g->ids = prompt_tokens(g->model, o, text, &g->n))) {
        return -1;
    }
    if (g->n == 0) {
        fprintf(stderr, "kvstitch generate: the prompt is empty (no tokens)\n");
        return -1;
    }
    return cli_now_ms() - t0;
}

static int generate(gen_run *g, const gen_opts *o, const char *text) {
    kvs_model_params mp = kvs_model_default_params();
    mp.chat_template = o->chat_template;
    int st = kvs_model_load(o->model_path, mp, &g->model);
    if (st != KVS_OK) return cli_fail(st, o->model_path);
    kvs_model_info info;
    kvs_model_get_info(g->model, &info);
    kvs_segments seg;
    double tok_ms = tokenize_prompt(g, o, text, &seg);
    if (tok_ms < 0) return 1;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_batch = o->n_batch;
    cp.allow_beyond_train = o->beyond_train;
    kvs_kv_type_parse(o->kv_type ? o->kv_type : "f16", &cp.kv_type); /* a listed choice: it parses */
    if (fit_context(g->model, &info, o, g->n, &cp.n_ctx)) return 1;
    cli_progress_attach(&cp, "prefill", !o->quiet && !o->json);
    if ((st = kvs_context_new(g->model, cp, &g->ctx)) != KVS_OK) return cli_fail(st, "context");
    if (o->cache_dir || cli_redis_given(&o->redis)) {
        kvs_cache_params pp = kvs_cache_default_params();
        pp.cache_dir = o->cache_dir;
        cli_redis_apply(&o->redis, &pp);
        pp.chunk_tokens = o->chunk_tokens;
        pp.budget_bytes = (size_t)o->cache_budget_mib << 20;
        pp.cache_max_bytes = o->cache_max_bytes;
        pp.kv_type = cp.kv_type;
        if ((st = kvs_cache_open(g->model, pp, &g->cache)) != KVS_OK)
            return cli_fail(st, o->cache_dir ? o->cache_dir : "redis");
    }
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = o->n_predict;
    gp.sampling = o->sp;
    gp.n_top_logprobs = N_TOP_LOGPROBS;
    gp.stop = o->stops;
    gp.n_stop = o->n_stops;
    if (!o->json) gp.on_token = stream_piece;
    kvs_reuse_params rp = kvs_reuse_default_params();
    if (o->reuse && !o->n_docs) kvs_reuse_mode_parse(o->reuse, &rp.mode);
    rp.store = !o->no_store;
    rp.repair = o->rp;
    rp.use_baked = !o->plain_docs;
    if (o->recal_on || o->recal.temperature > 0 || o->recal.scale > 0) {
        rp.recal.temperature = o->recal.temperature > 0 ? o->recal.temperature : 0.9f;
        rp.recal.scale = o->recal.scale > 0 ? o->recal.scale : 0.9f;
    }
    kvs_generate_result r;
    if (o->n_docs)
        st = kvs_generate_segments(g->ctx, g->cache, &seg, &gp, &rp, &r);
    else if (g->cache)
        st = kvs_generate_cached(g->ctx, g->cache, g->ids, g->n, &gp, &rp, &r);
    else
        st = kvs_generate(g->ctx, g->ids, g->n, &gp, &r);
    if (st != KVS_OK) return cli_fail(st, "generate");
    if (!o->n_docs) { /* the library got tokens: our tokenization is part of the request */
        r.timings.tokenize_ms = tok_ms;
        r.ttft_ms += tok_ms;
    }
    int rc = 0;
    if (o->json) {
        json_generate_opts jo = {o->n_docs  ? kvs_repair_mode_name(o->rp.mode)
                                 : o->reuse ? o->reuse
                                            : "prefix",
                                 o->chunk_tokens ? o->chunk_tokens : DEFAULT_CHUNK_TOKENS};
        rc = json_print_line(stdout, json_generate_result(&r, &jo)) ? 1 : 0;
    } else {
        printf("\n");
        fflush(stdout); /* the text before the stats line on a terminal */
        if (!o->quiet) print_stats(&r);
    }
    if (r.reuse && r.reuse->n_write_errors) /* with --json and --quiet too: nothing stored silently */
        fprintf(stderr, "kvstitch: warning: %d chunks could not be written to the cache dir (not stored): %s\n",
                r.reuse->n_write_errors, r.reuse->write_error[0] ? r.reuse->write_error : "no reason recorded");
    if (cli_redis_given(&o->redis)) cli_redis_report("generate", g->cache, NULL, NULL); /* the same for Redis */
    kvs_generate_result_free(&r);
    return rc;
}

/* The text to generate from (the file's, owned, or -p's), checked; NULL
 * after a message. */
static const char *checked_text(const gen_opts *o, char **owned) {
    const char *text = o->prompt;
    if (o->file) {
        if (!(*owned = cli_read_file(o->file, NULL))) return NULL;
        text = *owned;
    } else if (cli_check_utf8("-p", text)) {
        return NULL;
    }
    if (o->system && cli_check_utf8("--system", o->system)) return NULL;
    for (int i = 0; i < o->n_stops; i++) /* a lone byte had cut a character of the output in half */
        if (cli_check_utf8("--stop", o->stops[i])) return NULL;
    return text;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    memset(&o, 0, sizeof o);
    o.n_predict = 128;
    o.sp = kvs_sampler_default_params();
    o.rp = kvs_repair_default_params();
    int given[sizeof k_opts / sizeof k_opts[0]] = {0};
    int rc = cli_parse(&k_cmd, argc, argv, &o, given);
    if (rc < 0) rc = check(&o, given);
    char *owned = NULL;
    const char *text = rc < 0 ? checked_text(&o, &owned) : NULL;
    if (rc < 0 && !text) rc = 1;
    if (rc < 0) { /* every way out frees the Redis options' URL copy */
        gen_run g;
        memset(&g, 0, sizeof g);
        rc = generate(&g, &o, text);
        run_free(&g);
    }
    free(owned);
    cli_redis_free(&o.redis);
    return rc;
}
