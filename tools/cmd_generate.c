/* kvstitch generate: prefill a prompt and generate, streaming text or one JSON object. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch generate -m MODEL (-p TEXT | -f FILE) [options]\n"
    "       kvstitch generate -m MODEL --cache-dir DIR [--chat] [--system TEXT] --doc FILE... (-p QUESTION)\n"
    "                         [--reuse none|selective|cacheblend|firstk|full] [repair options]\n"
    "  -m, --model PATH       GGUF file\n"
    "  -p, --prompt TEXT      prompt text\n"
    "  -f, --file PATH        read the prompt from a file\n"
    "  -n, --n-predict N      new tokens at most (default 128)\n"
    "  --temp T               temperature; 0 = greedy (default 0)\n"
    "  --top-k K              keep the K most likely tokens; 0 = off (default 40)\n"
    "  --top-p P              nucleus sampling mass; 1 = off (default 0.95)\n"
    "  --min-p P              drop tokens below P x the best probability; 0 = off (default 0.05)\n"
    "  --repeat-penalty R     penalty for the last 64 tokens; 1 = off (default 1)\n"
    "  --seed S               random seed for sampling (default 0)\n"
    "  --chat                 wrap the prompt in the model's chat template\n"
    "  --system TEXT          system message (with --chat)\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  --ctx N                context length (default: the model's, at most 8192)\n"
    "  --json                 print one JSON object instead of streaming text:\n"
    "                         prompt_tokens, tokens, text, ttft_ms, prefill_ms, prefill_tok_s,\n"
    "                         decode_tok_s, first_logits_sha256, first_top_logprobs\n"
    "                         (with --cache-dir also cached_tokens, live_tokens, cache_hit_ratio,\n"
    "                         reuse, assemble_ms, chunk_ends, stored_chunks; with --doc also\n"
    "                         moved_tokens, recomputed_tokens, recomputed_token_layers,\n"
    "                         docs_hit, docs_computed)\n"
    "Prompt KV cache:\n"
    "  --cache-dir DIR        reuse the KV of the longest cached prefix of the prompt from DIR\n"
    "                         (bit-identical output) and store the prompt's new chunks there\n"
    "  --reuse MODE           prefix (default with --cache-dir) or none (compute every token)\n"
    "  --no-store             do not store the prompt's chunks\n"
    "  --chunk-tokens N       chunk size for new chunks (default 64)\n"
    "  --cache-budget MIB     memory for cached chunks (default: 1/4 of RAM)\n"
    "  --cache-max-bytes N    bound on DIR's bytes (K/M/G suffixes; default: half the space free\n"
    "                         for the cache); least recently used entries are evicted\n"
    CLI_REDIS_USAGE
    "Documents (non-prefix reuse, RAG; with --cache-dir):\n"
    "  --doc FILE             a document (repeatable), laid out after the system message and before the\n"
    "                         question (-p / -f). Its KV is cached by content (computed on the fly if\n"
    "                         missing) and reused at any position: keys rotated to the new place, then\n"
    "                         repaired. The system segment still takes the exact, bit-identical path.\n"
    "  --reuse MODE           with --doc: the repair of moved documents: none (as they are), selective,\n"
    "                         cacheblend (default), firstk, full (recompute all: a cold run's bits;\n"
    "                         prefix means full)\n"
    "  --recompute-ratio R    cacheblend: share of document tokens recomputed (default 0.10)\n"
    "  --overlap R            selective: tokens recomputed before each seam (default 16)\n"
    "  --first-k K            firstk: tokens recomputed at the start of each document (default 16)\n"
    "  --check-layer L        cacheblend: layer where the KV deviation is measured (default 1)\n"
    "  --min-deviation D      cacheblend: recompute only tokens deviating more than D (default 0)\n"
    "  --deviation M          cacheblend: v-l2 (default) or k-cos\n"
    "  --seams, --no-seams    cacheblend: also recompute selective's tokens (--overlap before each seam),\n"
    "                         beyond the ratio (default: on; --no-seams is plain CacheBlend)\n"
    "  --narrow-from R        cacheblend: gradual narrowing: keep R of the document tokens at the check\n"
    "                         layer, re-rank them by their KV deviation in each of the next\n"
    "                         --narrow-layers layers and shrink the set to --recompute-ratio\n"
    "                         (R in [ratio, 1]; default 0 = off). recomputed_tokens counts the final set\n"
    "  --narrow-layers N      cacheblend: layers the narrowing takes (default 4)\n"
    "  --doc-prefix TEXT      the text documents are computed after (default: with --chat the\n"
    "                         template's text before the user's content, else nothing / BOS)\n"
    "Sampling order: repeat penalty, top-k, temperature, top-p, min-p.\n";

#define N_TOP_LOGPROBS 20
#define MAX_DOCS 256

static int stream_piece(void *user, int32_t token, const char *piece, size_t len) {
    (void)user;
    (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static void json_number(double v) {
    if (isfinite(v)) printf("%.9g", v);
    else printf("null");
}

typedef struct gen_opts {
    const char *model_path, *prompt, *file, *system, *cache_dir, *reuse;
    int n_predict, chat, json, n_threads, n_ctx, no_store, chunk_tokens, cache_budget_mib;
    unsigned long long cache_max_bytes;
    kvs_sampler_params sp;
    const char *docs[MAX_DOCS], *doc_prefix;
    int n_docs, repair_opts; /* repair_opts: a repair option was given */
    kvs_repair_params rp;
    cli_redis_opts redis;
} gen_opts;

static void print_json(int n_prompt, const kvs_generate_result *r, const gen_opts *o) {
    double decode_tok_s = r->n_tokens > 1 && r->decode_ms > 0 ? (r->n_tokens - 1) * 1000.0 / r->decode_ms : 0.0;
    double prefill_tok_s = r->prefill_ms > 0 ? r->n_live * 1000.0 / r->prefill_ms : 0.0;
    char sha[65];
    kvs_sha256_hex(r->first_logits, (size_t)r->n_vocab * sizeof(float), sha);
    printf("{\"prompt_tokens\": %d, \"tokens\": [", n_prompt);
    for (int i = 0; i < r->n_tokens; i++) printf(i ? ", %d" : "%d", r->tokens[i]);
    printf("], \"text\": ");
    cli_json_string(stdout, r->text, strlen(r->text));
    printf(", \"ttft_ms\": ");
    json_number(r->ttft_ms);
    printf(", \"prefill_ms\": ");
    json_number(r->prefill_ms);
    printf(", \"prefill_tok_s\": ");
    json_number(prefill_tok_s);
    printf(", \"decode_tok_s\": ");
    json_number(decode_tok_s);
    printf(", \"first_logits_sha256\": \"%s\", \"first_top_logprobs\": [", sha);
    for (int i = 0; i < r->n_top; i++) {
        printf(i ? ", [%d, " : "[%d, ", r->top_ids[i]);
        json_number(r->top_logprobs[i]);
        printf("]");
    }
    printf("]");
    if (o->cache_dir || cli_redis_given(&o->redis)) {
        printf(", \"cached_tokens\": %d, \"live_tokens\": %d, \"cache_hit_ratio\": ", r->n_cached, r->n_live);
        json_number(r->cache_hit_ratio);
        printf(", \"reuse\": \"%s\", \"assemble_ms\": ",
               o->n_docs ? kvs_repair_mode_name(o->rp.mode) : o->reuse ? o->reuse : "prefix");
        json_number(r->assemble_ms);
        printf(", \"chunk_ends\": [");
        for (int i = 0; i < r->n_chunks; i++) printf(i ? ", %d" : "%d", r->chunk_ends[i]);
        printf("], \"stored_chunks\": %d, \"write_errors\": %d", r->n_chunks_stored, r->n_write_errors);
    }
    if (o->n_docs)
        printf(", \"moved_tokens\": %d, \"recomputed_tokens\": %d, \"recomputed_token_layers\": %ld, \"docs_hit\": %d, "
               "\"docs_computed\": %d",
               r->n_moved, r->n_recomputed, r->n_token_layers, r->n_docs_hit, r->n_docs_computed);
    printf("}\n");
}

static int parse(int argc, char **argv, gen_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        unsigned long long seed;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--seams")) o->rp.cacheblend_seams = 1;
        else if (!strcmp(a, "--no-seams")) o->rp.cacheblend_seams = 0;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--no-store")) o->no_store = 1;
        else if ((bad = cli_redis_option("generate", a, i + 1 < argc ? argv[i + 1] : NULL, &o->redis)) != 0) {
            if (bad > 0) bad = 0, i++;
        }
        else if (!v) return cli_usage_error("generate", "unknown option or missing value: %s", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_path = argv[++i];
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = argv[++i];
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = argv[++i];
        else if (!strcmp(a, "--system")) o->system = argv[++i];
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) bad = cli_parse_int(a, argv[++i], &o->n_predict);
        else if (!strcmp(a, "--temp")) bad = cli_parse_float(a, argv[++i], &o->sp.temperature);
        else if (!strcmp(a, "--top-k")) bad = cli_parse_int(a, argv[++i], &o->sp.top_k);
        else if (!strcmp(a, "--top-p")) bad = cli_parse_float(a, argv[++i], &o->sp.top_p);
        else if (!strcmp(a, "--min-p")) bad = cli_parse_float(a, argv[++i], &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty")) bad = cli_parse_float(a, argv[++i], &o->sp.repeat_penalty);
        else if (!strcmp(a, "--seed")) { bad = cli_parse_u64(a, argv[++i], &seed); o->sp.seed = seed; }
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(a, argv[++i], &o->n_threads);
        else if (!strcmp(a, "--ctx")) bad = cli_parse_int(a, argv[++i], &o->n_ctx);
        else if (!strcmp(a, "--cache-dir")) o->cache_dir = argv[++i];
        else if (!strcmp(a, "--reuse")) o->reuse = argv[++i];
        else if (!strcmp(a, "--chunk-tokens")) bad = cli_parse_int(a, argv[++i], &o->chunk_tokens);
        else if (!strcmp(a, "--cache-budget")) bad = cli_parse_int(a, argv[++i], &o->cache_budget_mib);
        else if (!strcmp(a, "--cache-max-bytes")) bad = cli_parse_bytes(a, argv[++i], &o->cache_max_bytes);
        else if (!strcmp(a, "--doc")) {
            if (o->n_docs == MAX_DOCS) return cli_usage_error("generate", "at most %d documents", MAX_DOCS);
            o->docs[o->n_docs++] = argv[++i];
        }
        else if (!strcmp(a, "--doc-prefix")) o->doc_prefix = argv[++i];
        else if (!strcmp(a, "--recompute-ratio")) bad = cli_parse_float(a, argv[++i], &o->rp.recompute_ratio);
        else if (!strcmp(a, "--overlap")) bad = cli_parse_int(a, argv[++i], &o->rp.overlap);
        else if (!strcmp(a, "--first-k")) bad = cli_parse_int(a, argv[++i], &o->rp.first_k);
        else if (!strcmp(a, "--check-layer")) bad = cli_parse_int(a, argv[++i], &o->rp.check_layer);
        else if (!strcmp(a, "--min-deviation")) bad = cli_parse_float(a, argv[++i], &o->rp.min_deviation);
        else if (!strcmp(a, "--narrow-from")) bad = cli_parse_float(a, argv[++i], &o->rp.narrow_from);
        else if (!strcmp(a, "--narrow-layers")) bad = cli_parse_int(a, argv[++i], &o->rp.narrow_layers);
        else if (!strcmp(a, "--deviation")) {
            if (kvs_deviation_parse(argv[++i], &o->rp.deviation) != KVS_OK)
                return cli_usage_error("generate", "--deviation must be v-l2 or k-cos, got '%s'", argv[i]);
        }
        else return cli_usage_error("generate", "unknown option: %s", a);
        if (bad) return 2;
        /* the document options, so that they can be refused without --doc */
        static const char *const doc_opts[] = {"--doc-prefix", "--recompute-ratio", "--overlap", "--first-k",
                                               "--check-layer", "--min-deviation", "--deviation", "--seams",
                                               "--no-seams", "--narrow-from", "--narrow-layers"};
        for (size_t k = 0; k < sizeof doc_opts / sizeof doc_opts[0]; k++) o->repair_opts |= !strcmp(a, doc_opts[k]);
    }
    if (!o->model_path) return cli_usage_error("generate", "-m MODEL is required");
    if (!o->prompt == !o->file) return cli_usage_error("generate", "give exactly one of -p TEXT or -f FILE");
    if (o->system && !o->chat && !o->n_docs) return cli_usage_error("generate", "--system needs --chat (or --doc)");
    if (cli_redis_check("generate", &o->redis)) return 2;
    if (o->n_docs && !o->cache_dir && !cli_redis_given(&o->redis))
        return cli_usage_error("generate", "--doc needs --cache-dir or --redis");
    if (o->n_docs && o->no_store)
        return cli_usage_error("generate", "--no-store does not apply to --doc (documents are always cached)");
    if (o->repair_opts && !o->n_docs)
        return cli_usage_error("generate", "--recompute-ratio, --overlap, --first-k, --check-layer, --min-deviation, "
                               "--deviation, --seams, --no-seams, --narrow-from, --narrow-layers and --doc-prefix "
                               "need --doc");
    if (o->n_docs && o->reuse) {
        if (!strcmp(o->reuse, "prefix")) o->rp.mode = KVS_REPAIR_FULL;
        else if (kvs_repair_mode_parse(o->reuse, &o->rp.mode) != KVS_OK)
            return cli_usage_error("generate", "with --doc, --reuse must be none, selective, cacheblend, firstk or "
                                   "full, got '%s'", o->reuse);
    }
    if (o->n_docs && !(o->rp.recompute_ratio >= 0.0f && o->rp.recompute_ratio <= 1.0f))
        return cli_usage_error("generate", "--recompute-ratio must be in [0, 1], got %g",
                               (double)o->rp.recompute_ratio);
    if (o->n_docs &&
        (o->rp.overlap < 0 || o->rp.first_k < 0 || o->rp.check_layer < 0 || !(o->rp.min_deviation >= 0.0f)))
        return cli_usage_error("generate", "--overlap, --first-k, --check-layer and --min-deviation must be >= 0");
    if (o->n_docs && o->rp.narrow_from != 0.0f &&
        !(o->rp.narrow_from >= o->rp.recompute_ratio && o->rp.narrow_from <= 1.0f))
        return cli_usage_error("generate", "--narrow-from must be 0 (off) or in [--recompute-ratio %g, 1], got %g",
                               (double)o->rp.recompute_ratio, (double)o->rp.narrow_from);
    if (o->n_docs && o->rp.narrow_layers < 1)
        return cli_usage_error("generate", "--narrow-layers must be >= 1, got %d", o->rp.narrow_layers);
    if (o->n_predict < 0) return cli_usage_error("generate", "-n must be >= 0, got %d", o->n_predict);
    if (o->n_threads < 0 || o->n_ctx < 0) return cli_usage_error("generate", "--threads and --ctx must be >= 0");
    if (!o->cache_dir && !cli_redis_given(&o->redis) && (o->reuse || o->no_store || o->chunk_tokens || o->cache_budget_mib))
        return cli_usage_error("generate", "--reuse, --no-store, --chunk-tokens and --cache-budget need --cache-dir "
                               "or --redis");
    if (o->cache_dir && !*o->cache_dir) return cli_usage_error("generate", "--cache-dir needs a directory");
    kvs_reuse_mode mode;
    if (!o->n_docs && o->reuse && kvs_reuse_mode_parse(o->reuse, &mode) != KVS_OK)
        return cli_usage_error("generate", "--reuse must be prefix or none, got '%s'", o->reuse);
    if (o->chunk_tokens < 0 || o->cache_budget_mib < 0)
        return cli_usage_error("generate", "--chunk-tokens and --cache-budget must be > 0");
    if (o->sp.top_k < 0) return cli_usage_error("generate", "--top-k must be >= 0, got %d", o->sp.top_k);
    if (!(o->sp.top_p > 0.0f && o->sp.top_p <= 1.0f))
        return cli_usage_error("generate", "--top-p must be in (0, 1], got %g", o->sp.top_p);
    if (!(o->sp.min_p >= 0.0f && o->sp.min_p <= 1.0f))
        return cli_usage_error("generate", "--min-p must be in [0, 1], got %g", o->sp.min_p);
    if (!(o->sp.repeat_penalty > 0.0f))
        return cli_usage_error("generate", "--repeat-penalty must be > 0, got %g", o->sp.repeat_penalty);
    return -1; /* go on */
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

static void print_stats(int n, const kvs_generate_result *r, int cached) {
    double dec = r->n_tokens > 1 && r->decode_ms > 0 ? (r->n_tokens - 1) * 1000.0 / r->decode_ms : 0.0;
    fprintf(stderr, "[prompt %d tokens, prefill %.1f ms (%.1f tok/s), %d tokens generated, decode %.1f tok/s]\n", n,
            r->prefill_ms, r->prefill_ms > 0 ? r->n_live * 1000.0 / r->prefill_ms : 0.0, r->n_tokens, dec);
    if (cached)
        fprintf(stderr, "[cache: %d of %d prompt tokens reused (%.1f%%), %d computed, %d chunks stored, "
                "ttft %.1f ms]\n", r->n_cached, n, 100.0 * r->cache_hit_ratio, r->n_live, r->n_chunks_stored,
                r->ttft_ms);
    if (cached && r->n_write_errors)
        fprintf(stderr, "kvstitch: warning: %d chunks could not be written to the cache dir (not stored)\n",
                r->n_write_errors);
}

/* --doc: the prompt as segments (system, documents, question), generated
 * with non-prefix reuse. Returns the exit code. */
static int generate_docs(kvs_context *ctx, kvs_cache *cache, const gen_opts *o, const char *question) {
    char *texts[MAX_DOCS];
    int n = 0, rc = 1;
    for (; n < o->n_docs; n++)
        if (!(texts[n] = cli_read_file(o->docs[n], NULL))) goto out;
    kvs_segments seg = {o->chat, o->system, (const char *const *)texts, NULL, o->n_docs, question, o->doc_prefix};
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = o->n_predict;
    gp.sampling = o->sp;
    gp.n_top_logprobs = N_TOP_LOGPROBS;
    if (!o->json) gp.on_token = stream_piece;
    kvs_generate_result r;
    int st = kvs_generate_segments(ctx, cache, &seg, &gp, &o->rp, &r);
    if (st != KVS_OK) {
        cli_fail(st, "generate");
        goto out;
    }
    if (o->json) {
        print_json(r.n_prompt, &r, o);
    } else {
        printf("\n");
        fflush(stdout);
        print_stats(r.n_prompt, &r, 1);
        fprintf(stderr, "[documents: %d from the cache, %d computed; %d tokens moved, %d recomputed (%s)]\n",
                r.n_docs_hit, r.n_docs_computed, r.n_moved, r.n_recomputed, kvs_repair_mode_name(o->rp.mode));
    }
    kvs_generate_result_free(&r);
    rc = 0;
out:
    for (int i = 0; i < n; i++) free(texts[i]);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {0};
    o.n_predict = 128;
    o.sp = kvs_sampler_default_params();
    o.rp = kvs_repair_default_params();
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;

    char *owned = NULL;
    const char *text = o.prompt;
    if (o.file) {
        if (!(owned = cli_read_file(o.file, NULL))) return 1;
        text = owned;
    }
    kvs_model *model = NULL;
    kvs_context *ctx = NULL;
    kvs_cache *cache = NULL;
    int32_t *ids = NULL;
    int n = 0;
    rc = 1;
    int st = kvs_model_load(o.model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) { cli_fail(st, o.model_path); goto done; }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    if ((st = kvs_context_new(model, cp, &ctx)) != KVS_OK) { cli_fail(st, "context"); goto done; }
    if (o.cache_dir || cli_redis_given(&o.redis)) {
        kvs_cache_params pp = kvs_cache_default_params();
        pp.cache_dir = o.cache_dir;
        cli_redis_apply(&o.redis, &pp);
        pp.chunk_tokens = o.chunk_tokens;
        pp.budget_bytes = (size_t)o.cache_budget_mib << 20;
        pp.cache_max_bytes = o.cache_max_bytes;
        pp.kv_type = cp.kv_type;
        if ((st = kvs_cache_open(model, pp, &cache)) != KVS_OK) { cli_fail(st, o.cache_dir ? o.cache_dir : "redis"); goto done; }
    }
    if (o.n_docs) {
        rc = generate_docs(ctx, cache, &o, text);
        goto done;
    }
    if (!(ids = prompt_tokens(model, &o, text, &n))) goto done;
    if (n == 0) {
        fprintf(stderr, "kvstitch generate: the prompt is empty (no tokens)\n");
        goto done;
    }
    if (n > kvs_context_n_ctx(ctx)) {
        fprintf(stderr, "kvstitch generate: the prompt has %d tokens but the context holds %d (raise --ctx)\n", n,
                kvs_context_n_ctx(ctx));
        goto done;
    }

    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = o.n_predict;
    gp.sampling = o.sp;
    gp.n_top_logprobs = N_TOP_LOGPROBS;
    if (!o.json) gp.on_token = stream_piece;
    kvs_generate_result r;
    if (cache) {
        kvs_reuse_params rp = kvs_reuse_default_params();
        if (o.reuse) kvs_reuse_mode_parse(o.reuse, &rp.mode);
        rp.store = !o.no_store;
        st = kvs_generate_cached(ctx, cache, ids, n, &gp, &rp, &r);
    } else {
        st = kvs_generate(ctx, ids, n, &gp, &r);
    }
    if (st != KVS_OK) { cli_fail(st, "generate"); goto done; }
    if (o.json) {
        print_json(n, &r, &o);
    } else {
        printf("\n");
        fflush(stdout); /* the text before the stats line on a terminal */
        double dec = r.n_tokens > 1 && r.decode_ms > 0 ? (r.n_tokens - 1) * 1000.0 / r.decode_ms : 0.0;
        fprintf(stderr, "[prompt %d tokens, prefill %.1f ms (%.1f tok/s), %d tokens generated, decode %.1f tok/s]\n", n,
                r.prefill_ms, r.prefill_ms > 0 ? r.n_live * 1000.0 / r.prefill_ms : 0.0, r.n_tokens, dec);
        if (cache)
            fprintf(stderr, "[cache: %d of %d prompt tokens reused (%.1f%%), %d computed, %d chunks stored, "
                    "ttft %.1f ms]\n", r.n_cached, n, 100.0 * r.cache_hit_ratio, r.n_live, r.n_chunks_stored,
                    r.ttft_ms);
        if (cache && r.n_write_errors)
            fprintf(stderr, "kvstitch: warning: %d chunks could not be written to the cache dir (not stored)\n",
                    r.n_write_errors);
    }
    kvs_generate_result_free(&r);
    rc = 0;
done:
    free(ids);
    free(owned);
    kvs_cache_free(cache);
    kvs_context_free(ctx);
    kvs_model_free(model);
    cli_redis_free(&o.redis);
    return rc;
}
