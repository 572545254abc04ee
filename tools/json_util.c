/* JSON builders and typed readers on cJSON (json_util.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

/* --- writing ------------------------------------------------------------- */

int json_print_line(FILE *f, cJSON *v) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (!s) {
        fprintf(stderr, "kvstitch: out of memory while writing JSON\n");
        return -1;
    }
    fputs(s, f);
    fputc('\n', f);
    cJSON_free(s);
    return 0;
}

cJSON *json_add_number(cJSON *obj, const char *key, double v) {
    return isfinite(v) ? cJSON_AddNumberToObject(obj, key, v) : cJSON_AddNullToObject(obj, key);
}

cJSON *json_add_ints(cJSON *obj, const char *key, const int32_t *v, int n) {
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]))) return NULL;
    return a;
}

double json_rate(int n, double ms, int min_n) {
    return n >= min_n && n > 0 && ms > 0 ? n * 1000.0 / ms : NAN;
}

cJSON *json_timings(const kvs_timings *t) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    json_add_number(o, "tokenize_ms", t->tokenize_ms);
    json_add_number(o, "lookup_ms", t->lookup_ms);
    json_add_number(o, "assemble_ms", t->assemble_ms);
    json_add_number(o, "repair_ms", t->repair_ms);
    json_add_number(o, "prefill_ms", t->prefill_ms);
    json_add_number(o, "first_token_ms", t->first_token_ms);
    json_add_number(o, "decode_ms", t->decode_ms);
    return o;
}

static cJSON *top_logprobs(const kvs_generate_result *r) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < r->n_top; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(r->top_ids[i]));
        cJSON_AddItemToArray(pair, isfinite(r->top_logprobs[i]) ? cJSON_CreateNumber(r->top_logprobs[i])
                                                                 : cJSON_CreateNull());
        if (!pair || cJSON_GetArraySize(pair) != 2 || !cJSON_AddItemToArray(a, pair)) {
            cJSON_Delete(pair);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

cJSON *json_generate_result(const kvs_generate_result *r, const json_generate_opts *o) {
    const int chunk = o && o->chunk_tokens > 0 ? o->chunk_tokens : 64;
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    char sha[65];
    kvs_sha256_hex(r->first_logits, (size_t)r->n_vocab * sizeof(float), sha);
    cJSON_AddNumberToObject(j, "prompt_tokens", r->n_prompt);
    json_add_ints(j, "tokens", r->tokens, r->n_tokens);
    cJSON_AddStringToObject(j, "text", r->text ? r->text : "");
    json_add_number(j, "ttft_ms", r->ttft_ms);
    json_add_number(j, "prefill_ms", r->timings.prefill_ms);
    /* Rates over fewer tokens than a chunk measure overhead, not speed. */
    json_add_number(j, "prefill_tok_s", json_rate(r->n_prefilled, r->timings.prefill_ms, chunk));
    json_add_number(j, "decode_tok_s", r->n_tokens > 1 && r->timings.decode_ms > 0
                                           ? (r->n_tokens - 1) * 1000.0 / r->timings.decode_ms : 0.0);
    cJSON_AddStringToObject(j, "first_logits_sha256", sha);
    cJSON_AddItemToObject(j, "first_top_logprobs", top_logprobs(r));
    if (r->reuse) {
        const kvs_reuse_result *u = r->reuse;
        cJSON_AddNumberToObject(j, "cached_tokens", u->n_cached);
        cJSON_AddNumberToObject(j, "live_tokens", r->n_live);
        json_add_number(j, "cache_hit_ratio", u->cache_hit_ratio);
        cJSON_AddStringToObject(j, "reuse", o && o->reuse ? o->reuse : "prefix");
        json_add_number(j, "assemble_ms", r->timings.lookup_ms + r->timings.assemble_ms);
        json_add_ints(j, "chunk_ends", u->chunk_ends, u->n_chunks);
        cJSON_AddNumberToObject(j, "stored_chunks", u->n_chunks_stored);
        cJSON_AddNumberToObject(j, "write_errors", u->n_write_errors);
        if (u->n_write_errors) cJSON_AddStringToObject(j, "write_error", u->write_error);
        cJSON_AddNumberToObject(j, "reused_tokens", u->n_reused);
    }
    if (r->docs) {
        const kvs_docs_result *d = r->docs;
        cJSON_AddNumberToObject(j, "moved_tokens", d->n_moved);
        cJSON_AddNumberToObject(j, "recomputed_tokens", d->n_recomputed);
        cJSON_AddNumberToObject(j, "recomputed_token_layers", (double)d->n_token_layers);
        cJSON_AddNumberToObject(j, "docs_hit", d->n_docs_hit);
        cJSON_AddNumberToObject(j, "docs_baked", d->n_docs_baked);
        cJSON_AddNumberToObject(j, "docs_computed", d->n_docs_computed);
    }
    const char *why = kvs_stop_reason_name(r->stop_reason);
    cJSON_AddStringToObject(j, "stop_reason", why ? why : "unknown");
    cJSON_AddNumberToObject(j, "prefilled_tokens", r->n_prefilled);
    cJSON_AddItemToObject(j, "timings", json_timings(&r->timings));
    /* A member that failed to allocate is missing: report it as out of memory. */
    if (!cJSON_GetObjectItemCaseSensitive(j, "timings")) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *json_warm_report(const char *source, const kvs_warm_report *w) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "source", source);
    cJSON_AddNumberToObject(j, "tokens", w->n_tokens);
    cJSON_AddNumberToObject(j, "chunk_tokens", w->chunk_tokens);
    cJSON_AddNumberToObject(j, "chunks", w->n_chunks);
    cJSON_AddNumberToObject(j, "chunks_stored", w->n_stored);
    cJSON_AddNumberToObject(j, "chunks_existing", w->n_existing);
    cJSON_AddNumberToObject(j, "cached_tokens", w->n_cached);
    cJSON_AddNumberToObject(j, "computed_tokens", w->n_computed);
    cJSON_AddBoolToObject(j, "aligned", w->aligned);
    cJSON_AddNumberToObject(j, "partial_tail_tokens", w->partial_tail);
    cJSON_AddBoolToObject(j, "border_stable", w->border_stable);
    cJSON_AddNumberToObject(j, "stable_tokens", w->stable_tokens);
    if (w->warning[0]) cJSON_AddStringToObject(j, "warning", w->warning);
    else cJSON_AddNullToObject(j, "warning");
    json_add_number(j, "ms", w->ms);
    return j;
}

cJSON *json_warm_docs_report(const kvs_warm_docs_report *r) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "docs", r->n_docs);
    cJSON_AddNumberToObject(j, "tokens", r->n_tokens);
    cJSON_AddNumberToObject(j, "cached", r->n_cached);
    cJSON_AddNumberToObject(j, "computed", r->n_computed);
    cJSON_AddNumberToObject(j, "baked", r->n_baked);
    cJSON_AddNumberToObject(j, "bake_cached", r->n_bake_cached);
    cJSON_AddNumberToObject(j, "unbaked", r->n_unbaked);
    cJSON_AddNumberToObject(j, "write_errors", r->n_write_errors);
    cJSON_AddNumberToObject(j, "prefix_computed", r->n_prefix_computed);
    json_add_number(j, "ms", r->ms);
    return j;
}

cJSON *json_add_text(cJSON *obj, const char *key, const char *text) {
    const size_t n = strlen(text);
    char *ok = malloc(3 * n + 1);
    if (!ok) return NULL;
    kvs_utf8_repair(text, n, ok, 3 * n + 1);
    cJSON *item = cJSON_AddStringToObject(obj, key, ok);
    free(ok);
    return item;
}

cJSON *json_model_info(const kvs_model_info *in, const int counts[KVS_MAX_TENSOR_TYPES]) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    json_add_text(j, "file", in->path); /* a path is bytes: a raw 0xFF had made the JSON invalid */
    cJSON_AddStringToObject(j, "name", in->name);
    cJSON_AddStringToObject(j, "architecture", in->arch);
    cJSON_AddNumberToObject(j, "gguf_version", in->gguf_version);
    cJSON_AddBoolToObject(j, "vocab_only", in->vocab_only);
    cJSON_AddNumberToObject(j, "n_layer", in->n_layer);
    cJSON_AddNumberToObject(j, "n_embd", in->n_embd);
    cJSON_AddNumberToObject(j, "n_ff", in->n_ff);
    cJSON_AddNumberToObject(j, "n_head", in->n_head);
    cJSON_AddNumberToObject(j, "n_head_kv", in->n_head_kv);
    cJSON_AddNumberToObject(j, "head_dim", in->head_dim);
    cJSON_AddNumberToObject(j, "n_ctx_train", in->n_ctx_train);
    json_add_number(j, "rope_freq_base", in->rope_freq_base);
    json_add_number(j, "rope_freq_scale", in->rope_freq_scale);
    cJSON_AddNumberToObject(j, "rope_dim", in->rope_dim);
    cJSON_AddBoolToObject(j, "rope_neox", in->rope_neox);
    json_add_number(j, "norm_eps", in->norm_eps);
    cJSON_AddBoolToObject(j, "tied_output", in->tied_output);
    cJSON_AddNumberToObject(j, "n_params", (double)in->n_params);
    cJSON_AddNumberToObject(j, "weight_bytes", (double)in->weight_bytes);
    cJSON_AddNumberToObject(j, "n_tensors", in->n_tensors);
    cJSON *types = cJSON_AddObjectToObject(j, "tensor_types");
    for (int t = 0; types && counts && t < KVS_MAX_TENSOR_TYPES; t++) {
        if (!counts[t]) continue;
        const char *name = kvs_tensor_type_name(t);
        cJSON_AddNumberToObject(types, name ? name : "?", counts[t]);
    }
    cJSON_AddNumberToObject(j, "n_vocab", in->n_vocab);
    cJSON_AddStringToObject(j, "tokenizer_model", in->tokenizer_model);
    cJSON_AddStringToObject(j, "tokenizer_pre", in->tokenizer_pre);
    cJSON_AddNumberToObject(j, "bos_id", in->bos_id);
    cJSON_AddNumberToObject(j, "eos_id", in->eos_id);
    cJSON_AddNumberToObject(j, "eot_id", in->eot_id);
    cJSON_AddBoolToObject(j, "add_bos", in->add_bos);
    cJSON_AddStringToObject(j, "chat_template_family", in->chat_template_family);
    return j;
}

/* --- reading ------------------------------------------------------------- */

static int fail(json_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(json_error *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

cJSON *json_parse(const char *text, size_t len, const char *what, json_error *e) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!v) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        fail(e, "%s: malformed JSON at byte %zu", what, at);
        return NULL;
    }
    while (end && end < text + len && strchr(" \t\r\n", *end)) end++;
    if (end && end < text + len && *end) {
        fail(e, "%s: unexpected data after the JSON value at byte %zu", what, (size_t)(end - text));
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

cJSON *json_read_file(const char *path, json_error *e) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fail(e, "%s: %s", path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    cJSON *v = json_parse(buf, n, path, e);
    free(buf);
    return v;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* The member, or NULL: then the return value of the reader is in *rc. */
static const cJSON *member(const cJSON *obj, const char *key, int required, int *rc, json_error *e) {
    if (!cJSON_IsObject(obj)) {
        *rc = fail(e, "%s: expected an object holding it, got %s", key, obj ? type_name(obj) : "nothing");
        return NULL;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) *rc = required ? fail(e, "%s: required field missing", key) : 1;
    return v;
}

int json_get_string(const cJSON *obj, const char *key, int required, const char **out, json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsString(v)) return fail(e, "%s: expected a string, got %s", key, type_name(v));
    *out = v->valuestring;
    return 0;
}

int json_get_number(const cJSON *obj, const char *key, int required, double lo, double hi, double *out,
                    json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsNumber(v)) return fail(e, "%s: expected a number in [%g, %g], got %s", key, lo, hi, type_name(v));
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return fail(e, "%s: %g is out of range [%g, %g]", key, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

int json_get_int(const cJSON *obj, const char *key, int required, long lo, long hi, long *out, json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return fail(e, "%s: expected an integer in [%ld, %ld], got %s", key, lo, hi,
                    cJSON_IsNumber(v) ? "a fraction" : type_name(v));
    if (!(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return fail(e, "%s: %.0f is out of range [%ld, %ld]", key, v->valuedouble, lo, hi);
    *out = (long)v->valuedouble;
    return 0;
}

int json_get_bool(const cJSON *obj, const char *key, int required, int *out, json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsBool(v)) return fail(e, "%s: expected true or false, got %s", key, type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

int json_get_array(const cJSON *obj, const char *key, int required, const cJSON **out, json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsArray(v)) return fail(e, "%s: expected an array, got %s", key, type_name(v));
    *out = v;
    return 0;
}

int json_get_object(const cJSON *obj, const char *key, int required, const cJSON **out, json_error *e) {
    int rc = 0;
    const cJSON *v = member(obj, key, required, &rc, e);
    if (!v) return rc;
    if (!cJSON_IsObject(v)) return fail(e, "%s: expected an object, got %s", key, type_name(v));
    *out = v;
    return 0;
}

char *json_token_spelling(const char *b, size_t n) {
    if (!memchr(b, 0, n) && kvs_utf8_check(b, n) == KVS_OK) {
        char *t = malloc(n + 1);
        if (t) {
            memcpy(t, b, n);
            t[n] = 0;
        }
        return t;
    }
    char *t = malloc(6 + 4 * n + 1);
    if (!t) return NULL;
    int at = snprintf(t, 7, "bytes:");
    for (size_t i = 0; i < n; i++) at += snprintf(t + at, 5, "\\x%02x", (unsigned char)b[i]);
    return t;
}
