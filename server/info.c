/* The small endpoints: models, health, metrics, tokenize, detokenize, cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

static int bad_request(struct MHD_Connection *c, const char *param, const char *msg) {
    srv_error e;
    srv_error_set(&e, 400, "invalid_request_error", "invalid_value", param, "%s", msg);
    return srv_reply_error(c, &e);
}

/* OpenAI's model object of the model served. */
static cJSON *model_json(const srv_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "kvstitch");
    cJSON_AddNumberToObject(m, "context_length", s->n_ctx);
    return m;
}

int srv_models(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, model_json(s));
    return srv_reply_json(c, 200, o);
}

/* GET /v1/models/{id} (the openai client's models.retrieve, which had been
 * a 404 no such endpoint): the id arrives percent-decoded (http.c's
 * unescape_url; the client encodes an alias's '/' and spaces). An id not
 * served is OpenAI's 404, naming it.
 *
 * No id at all ("/v1/models/") is a 404 saying so, not the list: whoever
 * sends it meant to retrieve one model (a trailing slash, an empty
 * variable), and a list object would reach them as a model without an id;
 * OpenAI answers an error there too. It had been model_not_found naming
 * '', as if '' were a model someone asked for. */
int srv_model(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    if (!strcmp(arg, s->model_id)) return srv_reply_json(c, 200, model_json(s));
    srv_error e;
    if (!*arg)
        srv_error_set(&e, 404, "invalid_request_error", "missing_required_parameter", "model",
                      "no model id after /v1/models/: GET /v1/models/{id} retrieves one (this server serves '%s'), "
                      "GET /v1/models lists them",
                      s->model_id);
    else
        srv_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%.200s' does not exist (this server serves '%s')", arg, s->model_id);
    return srv_reply_error(c, &e);
}

int srv_health(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    int ready = atomic_load(&s->ready);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", ready ? "ok" : "loading");
    return srv_reply_json(c, ready ? 200 : 503, o);
}

int srv_metrics_page(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    srv_load load = {0, 0, 0, 0};
    if (atomic_load(&s->ready)) load = srv_sched_load(s->sched);
    char *text = srv_metrics_render(&s->metrics, atomic_load(&s->ready) ? s->cache : NULL, load);
    if (!text) return srv_reply(c, 500, "text/plain", "out of memory\n", 14);
    int st = srv_reply(c, 200, "text/plain; version=0.0.4", text, strlen(text));
    free(text);
    return st;
}

/* {"content": "...", "add_special": false, "parse_special": true} -> {"tokens": [...]} */
int srv_tokenize(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    srv_error e;
    cJSON *in = srv_json_parse(body, len, &e);
    if (!in) return srv_reply_error(c, &e);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(in, "content");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(in, "add_special");
    const cJSON *parse = cJSON_GetObjectItemCaseSensitive(in, "parse_special");
    if (cJSON_IsNull(add)) add = NULL; /* null is absent, as in every request */
    if (cJSON_IsNull(parse)) parse = NULL;
    /* the field that is wrong named (a non-bool add_special had been named 'content') */
    const char *wrong = !cJSON_IsString(content) ? "content"
                        : add && !cJSON_IsBool(add) ? "add_special"
                        : parse && !cJSON_IsBool(parse) ? "parse_special"
                                                        : NULL;
    if (wrong) {
        cJSON_Delete(in);
        return bad_request(c, wrong, "expected {\"content\": string, \"add_special\": bool, \"parse_special\": bool}");
    }
    int flags = (cJSON_IsTrue(add) ? KVS_TOKENIZE_ADD_BOS : 0) | (!parse || cJSON_IsTrue(parse) ? KVS_TOKENIZE_PARSE_SPECIAL : 0);
    size_t n_bytes = strlen(content->valuestring);
    int cap = (int)(n_bytes < 1u << 26 ? n_bytes : 1u << 26) + 8, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int st = ids ? kvs_tokenize(s->model, content->valuestring, n_bytes, flags, ids, cap, &n) : KVS_ERR_NOMEM;
    cJSON_Delete(in);
    if (st) {
        free(ids);
        if (st != KVS_ERR_UTF8) return bad_request(c, "content", kvs_last_error());
        srv_error_set(&e, 400, "invalid_request_error", "invalid_utf8", "content", "'content': %s", kvs_last_error());
        return srv_reply_error(c, &e); /* the code the completions give the same bytes */
    }
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    free(ids);
    return srv_reply_json(c, 200, o);
}

/* {"tokens": [...]} -> {"content": "..."} */
int srv_detokenize(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    srv_error e;
    cJSON *in = srv_json_parse(body, len, &e);
    if (!in) return srv_reply_error(c, &e);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(in, "tokens"), *t;
    int n_vocab = kvs_vocab_size(s->model), i = 0;
    if (!cJSON_IsArray(toks)) {
        cJSON_Delete(in);
        return bad_request(c, "tokens", "expected {\"tokens\": [ids within the vocabulary]}");
    }
    cJSON_ArrayForEach(t, toks) { /* the first bad id named, as the completions' prompt ids are */
        if (!(cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble < n_vocab &&
              t->valuedouble == (int)t->valuedouble)) {
            char param[32];
            snprintf(param, sizeof param, "tokens[%d]", i);
            if (cJSON_IsNumber(t))
                srv_error_set(&e, 400, "invalid_request_error", "invalid_value", param,
                              "'%s' is %.17g: a token id is an integer in [0, %d)", param, t->valuedouble, n_vocab);
            else
                srv_error_set(&e, 400, "invalid_request_error", "invalid_value", param,
                              "'%s' must be a token id (an integer in [0, %d))", param, n_vocab);
            cJSON_Delete(in);
            return srv_reply_error(c, &e);
        }
        i++;
    }
    /* The streaming detokenizer's text (as a generation's): a character split
     * over tokens is joined, bytes that form none become U+FFFD (the byte
     * tokens' raw bytes had made the reply's JSON invalid UTF-8), NULs too
     * (the reply is built from C strings). The text is bounded like a
     * request body: a token's text can be ~80 bytes for its ~6 in the
     * request (8 MB of ids had made a 114 MB reply, 210 MB of memory). */
    size_t cap = 256, n = 0, piece_cap = 256;
    char *text = malloc(cap), *piece = malloc(piece_cap);
    kvs_detok *d = NULL;
    int too_long = 0, failed = kvs_detok_new(s->model, 1, &d) != KVS_OK;
    for (const cJSON *next = toks->child; !failed && !too_long && text && piece;) {
        size_t m = 0;
        int st = next ? kvs_detok_push(d, (int32_t)next->valuedouble, piece, piece_cap, &m)
                      : kvs_detok_flush(d, piece, piece_cap, &m);
        if (st == KVS_ERR_BUFFER_TOO_SMALL) { /* nothing changed: again with room */
            char *g = realloc(piece, piece_cap = m + 1);
            if (!g) free(piece);
            piece = g;
            continue;
        }
        if (st) {
            failed = 1;
            break;
        }
        if (n + m > s->max_body) too_long = 1;
        else if (n + m + 1 > cap) {
            char *g = realloc(text, cap = (n + m + 1) * 2);
            if (!g) free(text);
            text = g;
        }
        if (text && !too_long) {
            memcpy(text + n, piece, m);
            n += m;
        }
        if (!next) break;
        next = next->next;
    }
    kvs_detok_free(d);
    cJSON_Delete(in);
    const int oom = !text || !piece || failed;
    free(piece);
    if (oom || too_long) free(text);
    if (oom) return srv_reply(c, 500, "text/plain", "out of memory\n", 14);
    if (too_long) {
        srv_error_set(&e, 400, "invalid_request_error", "reply_too_large", "tokens",
                      "'tokens': their text exceeds the server's limit of %zu bytes (--max-body)", s->max_body);
        return srv_reply_error(c, &e);
    }
    text[n] = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    free(text);
    return srv_reply_json(c, 200, o);
}

int srv_cache_stats(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    kvs_cache_stats st;
    kvs_cache_get_stats(s->cache, &st);
    char fp[65];
    kvs_cache_fingerprint_hex(s->cache, fp);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "fingerprint", fp);
    const struct { const char *name; double v; } fields[] = {
        {"chunk_tokens", st.chunk_tokens}, {"entries", (double)st.entries}, {"resident", (double)st.resident},
        {"bytes", (double)st.bytes}, {"budget_bytes", (double)st.budget_bytes}, {"lookups", (double)st.lookups},
        {"hits", (double)st.hits}, {"misses", (double)st.misses}, {"hit_tokens", (double)st.hit_tokens},
        {"inserts", (double)st.inserts}, {"evictions", (double)st.evictions},
        {"index_bytes", (double)st.index_bytes}, {"index_drops", (double)st.index_drops},
        {"disk_writes", (double)st.disk_writes}, {"disk_write_errors", (double)st.disk_write_errors},
        {"dir_max_bytes", (double)st.dir_max_bytes},
        {"disk_loads", (double)st.disk_loads},
        {"disk_bad", (double)st.disk_bad}, {"disk_bad_mac", (double)st.disk_bad_mac},
        /* the Redis tier's (kvs_cache_stats' names; 0 without --redis) */
        {"redis_gets", (double)st.redis_gets}, {"redis_hits", (double)st.redis_hits},
        {"redis_get_bytes", (double)st.redis_get_bytes}, {"redis_puts", (double)st.redis_puts},
        {"redis_put_bytes", (double)st.redis_put_bytes}, {"redis_put_dropped", (double)st.redis_put_dropped},
        {"redis_put_too_large", (double)st.redis_put_too_large},
        {"redis_put_errors", (double)st.redis_put_errors}, {"redis_bad", (double)st.redis_bad},
        {"redis_bad_mac", (double)st.redis_bad_mac},
        {"redis_foreign", (double)st.redis_foreign}, {"redis_errors", (double)st.redis_errors},
        {"redis_timeouts", (double)st.redis_timeouts}, {"redis_breaker_opens", (double)st.redis_breaker_opens},
        {"redis_connects", (double)st.redis_connects}, {"redis_moved", (double)st.redis_moved},
        {"redis_partial_hits", (double)st.redis_partial_hits},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) cJSON_AddNumberToObject(o, fields[i].name, fields[i].v);
    /* why Redis could not be used, in its words ("" when it could): the
     * counters alone had said an outage happened, never why */
    char why[512];
    kvs_cache_redis_why_down(s->cache, why, sizeof why);
    cJSON_AddStringToObject(o, "redis_why_down", why);
    return srv_reply_json(c, 200, o);
}

/*
 * POST /v1/cache/warm: the body of a chat request ({"messages": [...]}: the
 * rendered prompt, generation prompt included, exactly what a chat request
 * with these messages runs) or of a completion ({"prompt": "..."}), with
 * optional "documents" (cached for any later order; with
 * "bake_with_neighbours": K or "doc_set": true also baked, kvs_bake_docs).
 * Runs in a slot like a request that generates nothing.
 */
int srv_cache_warm(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    srv_error e;
    cJSON *in = srv_json_parse(body, len, &e);
    if (!in) return srv_reply_error(c, &e);
    /* null is absent, as in every request ({"documents": [...], "messages":
     * null} had been a 400 asking for messages) */
    static const char *const parts[] = {"messages", "prompt", "documents"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(in, parts[i])))
            cJSON_DeleteItemFromObjectCaseSensitive(in, parts[i]);
    if (!cJSON_GetObjectItemCaseSensitive(in, "messages") && !cJSON_GetObjectItemCaseSensitive(in, "prompt") &&
        !cJSON_GetObjectItemCaseSensitive(in, "documents") && cJSON_IsObject(in)) { /* (it had said "'prompt' is required") */
        cJSON_Delete(in);
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "messages",
                      "a warm takes 'messages', 'prompt' or 'documents' (none was given)");
        return srv_reply_error(c, &e);
    }
    if (cJSON_GetObjectItemCaseSensitive(in, "messages") && cJSON_GetObjectItemCaseSensitive(in, "prompt")) {
        cJSON_Delete(in); /* (the prompt had been dropped without a word, the messages warmed) */
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "prompt",
                      "a warm takes 'messages' or 'prompt', not both");
        return srv_reply_error(c, &e);
    }
    int chat = cJSON_GetObjectItemCaseSensitive(in, "messages") != NULL;
    /* Documents alone: lay them out as a chat request's documents would be. */
    const int docs_only = !chat && !cJSON_GetObjectItemCaseSensitive(in, "prompt") &&
                          cJSON_GetObjectItemCaseSensitive(in, "documents");
    if (docs_only) {
        cJSON *msgs = cJSON_AddArrayToObject(in, "messages"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", "");
        cJSON_AddItemToArray(msgs, m);
        chat = 1;
    }
    char *norm = in ? cJSON_PrintUnformatted(in) : NULL;
    cJSON_Delete(in);
    srv_request req;
    int st = srv_request_parse(norm ? norm : body, norm ? strlen(norm) : len, chat ? SRV_KIND_CHAT : SRV_KIND_COMPLETION,
                               &req, &e);
    free(norm);
    if (!st && docs_only && req.n_docs == 0) { /* it had warmed the chat template's prefix alone */
        srv_request_free(&req);
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "documents",
                      "'documents' is empty: give documents to warm, or messages / a prompt");
        st = -1;
    }
    if (!st && !req.cache_prompt) { /* (a prompt had been computed and dropped, documents stored anyway) */
        srv_request_free(&req);
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "cache_prompt",
                      "'cache_prompt' is false: a warm computes KV only to store it");
        st = -1;
    }
    if (!st && req.bake_neighbours && !req.n_docs) { /* (it had warmed the prompt and baked nothing) */
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value",
                      req.bake_neighbours < 0 ? "doc_set" : "bake_with_neighbours",
                      "'%s' bakes documents: give 'documents'", req.bake_neighbours < 0 ? "doc_set" : "bake_with_neighbours");
        srv_request_free(&req);
        st = -1;
    }
    if (!st && req.n_prompts > 1) { /* (only the first had been warmed) */
        srv_request_free(&req);
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "prompt",
                      "'prompt' is a batch: a warm takes one prompt");
        st = -1;
    }
    if (st) return srv_reply_error(c, &e);
    req.docs_only = docs_only;
    req.warm = 1;
    srv_job *j = srv_job_new(s->model, &req, s->n_ctx, 1, &e);
    if (!j) return srv_reply_error(c, &e);
    j->warm_only = 1;
    if (srv_submit(s, j, &e)) return srv_reply_error(c, &e); /* (a drain is 503, not 429) */
    srv_job_cursor seen = {0, 0};
    for (;;) {
        srv_job_piece p;
        int done = srv_job_wait(j, &seen, &p, 50);
        srv_job_piece_free(&p);
        if (done) break;
        if (srv_peer_gone(c)) { /* nobody waits for it: its slot or queue place goes to others */
            srv_job_cancel(j);
            srv_job_unref(j);
            return 0;
        }
    }
    if (j->finish == SRV_FINISH_ERROR) {
        st = srv_reply_error(c, &j->err);
    } else if (j->finish == SRV_FINISH_CANCELLED) { /* by the drain: nothing was warmed (it had answered 200) */
        srv_error_set(&e, 503, "server_error", "shutting_down", "", "the server is shutting down");
        st = srv_reply_error(c, &e);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "tokens", j->n_prompt);
        cJSON_AddNumberToObject(o, "cached_tokens", j->usage.cached_tokens);
        cJSON_AddNumberToObject(o, "chunks_stored", j->usage.chunks_stored);
        cJSON_AddNumberToObject(o, "docs_cached", j->usage.docs_hit);
        cJSON_AddNumberToObject(o, "docs_computed", j->usage.docs_computed);
        cJSON_AddNumberToObject(o, "docs_baked", j->usage.docs_baked);
        cJSON_AddNumberToObject(o, "prefill_steps", j->usage.prefill_steps); /* scheduler steps it took */
        cJSON_AddNumberToObject(o, "ms", j->usage.total_ms);
        st = srv_reply_json(c, 200, o);
    }
    srv_job_unref(j);
    return st;
}
