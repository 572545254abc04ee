/* JSON body -> srv_request, validated field by field (see request.h). */
#include "request.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_error_set(srv_error *e, int http, const char *type, const char *code, const char *param, const char *fmt,
                   ...) {
    e->http = http;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    /* Messages quote the client's bytes (a path, a strategy name, a key cut
     * by %.40s): as valid UTF-8, whole characters, or the reply's JSON was
     * not (a raw 0xff, a lone 0xc3 where the cut halved a character). */
    char raw[sizeof e->message];
    snprintf(raw, sizeof raw, "%s", param ? param : "");
    kvs_utf8_repair(raw, strlen(raw), e->param, sizeof e->param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    kvs_utf8_repair(raw, strlen(raw), e->message, sizeof e->message);
}

static int bad(srv_error *e, const char *param, const char *fmt, const char *detail) {
    srv_error_set(e, 400, "invalid_request_error", "invalid_value", param, fmt, param, detail);
    return -1;
}

/* --- typed field readers: absent -> keep the default, wrong type -> error --- */

/* A field of o by its path from the request's root ("reuse.overlap"): its
 * last name is looked up in o, the whole path names it in errors. */
static const cJSON *field(const cJSON *o, const char *path) {
    const char *leaf = strrchr(path, '.');
    return cJSON_GetObjectItemCaseSensitive(o, leaf ? leaf + 1 : path);
}

static int get_number(const cJSON *o, const char *key, double lo, double hi, double *out, srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return bad(e, key, "'%s' must be a number%s", "");
    if (!isfinite(v->valuedouble)) /* 1e400: a number JSON allows, past a double's range */
        return bad(e, key, "'%s' is out of range%s", " (beyond a double's; a finite number is expected)");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_value", key, "'%s' is %g, outside [%g, %g]", key,
                      v->valuedouble, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

/* The largest seed every larger one of which a double tells apart (cJSON
 * reads a double; 2^53 - 1, JavaScript's largest safe integer): a larger
 * one had been rounded, 2^53 + 1 sampling as 2^53. */
#define SEED_EXACT 9007199254740991.0

static int get_int(const cJSON *o, const char *key, double lo, double hi, long long *out, srv_error *e) {
    double d;
    const cJSON *v = field(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return bad(e, key, "'%s' must be an integer%s", "");
    if (get_number(o, key, lo, hi, &d, e)) return -1;
    *out = (long long)d;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int *out, srv_error *e) {
    const cJSON *v = field(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return bad(e, key, "'%s' must be true or false%s", "");
    *out = cJSON_IsTrue(v);
    return 0;
}

static char *dup_string(const cJSON *v) { return strdup(v->valuestring); }

/* A message's content: a string, or OpenAI's array of parts
 * [{"type": "text", "text": "..."}] whose texts are concatenated. */
static char *content_text(const cJSON *c, int i, srv_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) return dup_string(c);
    if (cJSON_IsNull(c) || !c) return strdup("");
    if (!cJSON_IsArray(c)) {
        bad(e, param, "'%s' must be a string or an array of text parts%s", "");
        return NULL;
    }
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsString(t) || (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text")))) {
            bad(e, param, "'%s': only parts {\"type\": \"text\", \"text\": \"...\"} are supported%s", "");
            return NULL;
        }
        len += strlen(t->valuestring);
    }
    char *s = malloc(len + 1), *p = s;
    if (!s) return NULL;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(p, t, n);
        p += n;
    }
    *p = 0;
    return s;
}

static int parse_messages(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!m) return bad(e, "messages", "'%s' is required%s", "");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
        return bad(e, "messages", "'%s' must be a non-empty array of {\"role\", \"content\"}%s", "");
    int n = cJSON_GetArraySize(m);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return bad(e, "messages", "'%s': out of memory%s", "");
    static const char *const roles[] = {"system", "user", "assistant", "developer"};
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        int i = r->n_msgs;
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(it)) return bad(e, param, "'%s' must be an object {\"role\", \"content\"}%s", "");
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsString(role)) return bad(e, param, "'%s' must be a string%s", "");
        int known = -1;
        for (int k = 0; k < 4; k++)
            if (!strcmp(role->valuestring, roles[k])) known = k;
        if (known < 0) return bad(e, param, "'%s' must be system, user, assistant or developer%s", "");
        const cJSON *cv = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (known != 2 /* roles[2]: assistant */ &&
            (!cv || cJSON_IsNull(cv) || (cJSON_IsArray(cv) && !cJSON_GetArraySize(cv)))) {
            /* as OpenAI: only an assistant's turn may come without content (it had run as empty text) */
            snprintf(param, sizeof param, "messages[%d].content", i);
            return bad(e, param, "'%s' is required for a message of this role (a string or text parts)%s", "");
        }
        char *content = content_text(cv, i, e);
        if (!content) return -1;
        /* developer is OpenAI's newer name for the system role. */
        r->msgs[i].role = strdup(known == 3 ? "system" : roles[known]);
        r->msgs[i].content = content;
        r->n_msgs++;
        if (!r->msgs[i].role) return bad(e, param, "'%s': out of memory%s", "");
    }
    return 0;
}

/* A prompt given as token ids (OpenAI's [1, 2, 3]): integers >= 0 (the
 * vocabulary bound is job.c's: this file needs no model). */
static int parse_prompt_ids(const cJSON *p, srv_request *r, srv_error *e) {
    int n = cJSON_GetArraySize(p), k = 0;
    if (n > SRV_MAX_PROMPT_IDS) {
        char detail[48];
        snprintf(detail, sizeof detail, " (%d, at most %d)", n, SRV_MAX_PROMPT_IDS);
        return bad(e, "prompt", "'%s' holds more token ids than any context%s", detail);
    }
    if (!(r->prompt_ids = malloc(((size_t)n + 1) * sizeof *r->prompt_ids))) return bad(e, "prompt", "'%s': out of memory%s", "");
    const cJSON *it;
    cJSON_ArrayForEach(it, p) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble > 2147483647.0) {
            char param[48];
            if (r->prompt_batch) snprintf(param, sizeof param, "prompt[%d][%d]", r->prompt_index, k); /* a batch's */
            else snprintf(param, sizeof param, "prompt[%d]", k);
            return bad(e, param, "'%s' must be a token id, an integer >= 0%s", "");
        }
        r->prompt_ids[k++] = (int32_t)it->valuedouble;
    }
    r->n_prompt_ids = k;
    return 0;
}

static int is_id_array(const cJSON *p) {
    return cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && cJSON_IsNumber(cJSON_GetArrayItem(p, 0));
}

/* A batch: an array of prompts, each a string or an array of token ids. */
static int is_batch(const cJSON *p) {
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0) return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, p) if (!cJSON_IsString(it) && !is_id_array(it)) return 0;
    return 1;
}

static int parse_prompt(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return bad(e, "prompt", "'%s' is required%s", "");
    r->n_prompts = 1;
    if (is_batch(p)) { /* several prompts: this request's is prompt_index's (complete.c takes each) */
        r->n_prompts = cJSON_GetArraySize(p);
        r->prompt_batch = 1;
        if (r->n_prompts > SRV_MAX_CHOICES)
            return bad(e, "prompt", "'%s' holds more prompts than one request answers (16 choices in all)%s", "");
        p = cJSON_GetArrayItem(p, r->prompt_index < r->n_prompts ? r->prompt_index : 0);
    }
    if (is_id_array(p)) {
        if (parse_prompt_ids(p, r, e)) return -1;
    } else if (!cJSON_IsString(p)) {
        return bad(e, "prompt",
                   "'%s' must be a string, an array of token ids, or an array of those (a batch)%s", "");
    } else if (!(r->prompt = dup_string(p))) {
        return bad(e, "prompt", "'%s': out of memory%s", "");
    }
    /* Completions fields this server does not implement, refused where they
     * ask for something (they had been ignored without a word) */
    long long best_of = 1;
    if (get_bool(root, "echo", &r->echo, e) || get_int(root, "best_of", 1, 128, &best_of, e)) return -1;
    if (best_of > 1) return bad(e, "best_of", "'%s' above 1 is not supported (use n)%s", "");
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (suffix && !cJSON_IsNull(suffix) && !(cJSON_IsString(suffix) && !*suffix->valuestring))
        return bad(e, "suffix", "'%s' is not supported (no insertion)%s", "");
    return 0;
}

/* Keeps stop string s (an empty one stops nothing: dropped); at: its index
 * in the request's array, -1 for a lone string. */
static void add_stop(srv_request *r, const cJSON *s, int at) {
    if (!*s->valuestring) return;
    r->stop_at[r->n_stop] = at;
    r->stop[r->n_stop++] = dup_string(s);
}

static int parse_stop(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!s || cJSON_IsNull(s)) return 0;
    if (cJSON_IsString(s)) {
        add_stop(r, s, -1);
        return 0;
    }
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) > SRV_MAX_STOP)
        return bad(e, "stop", "'%s' must be a string or an array of at most 4 strings%s", "");
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, s) {
        char param[24];
        snprintf(param, sizeof param, "stop[%d]", k);
        if (!cJSON_IsString(it)) return bad(e, param, "'%s' must be a string%s", "");
        add_stop(r, it, k++);
    }
    return 0;
}

static int parse_documents(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "documents");
    if (!d || cJSON_IsNull(d)) return 0;
    if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) > SRV_MAX_DOCS)
        return bad(e, "documents", "'%s' must be an array of at most 64 {\"id\", \"text\"} objects or strings%s", "");
    int n = cJSON_GetArraySize(d);
    r->docs = calloc((size_t)n + 1, sizeof *r->docs);
    r->doc_ids = calloc((size_t)n + 1, sizeof *r->doc_ids);
    if (!r->docs || !r->doc_ids) return bad(e, "documents", "'%s': out of memory%s", "");
    const cJSON *it;
    cJSON_ArrayForEach(it, d) {
        char param[40];
        snprintf(param, sizeof param, "documents[%d]", r->n_docs);
        const cJSON *text = cJSON_IsString(it) ? it : cJSON_GetObjectItemCaseSensitive(it, "text");
        const cJSON *id = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "id") : NULL;
        if (!cJSON_IsString(text)) {
            if (cJSON_IsObject(it)) snprintf(param, sizeof param, "documents[%d].text", r->n_docs);
            return bad(e, param, "'%s' must be a string or an object with a string 'text'%s", "");
        }
        if (id && !cJSON_IsString(id)) {
            snprintf(param, sizeof param, "documents[%d].id", r->n_docs);
            return bad(e, param, "'%s' must be a string%s", "");
        }
        if (!*text->valuestring) /* as the CLI refuses an empty --doc (it had been dropped silently) */
            return bad(e, param, "'%s' is empty: a document needs text%s", "");
        r->docs[r->n_docs] = dup_string(text);
        r->doc_ids[r->n_docs] = strdup(id ? id->valuestring : "");
        r->n_docs++;
    }
    return 0;
}

/* reuse.recalibrate: a bool or {"temperature", "scale"} (each 0.1..4, 0.9 if
 * left out), the ranges of kvs_recal_params. */
static int parse_recalibrate(const cJSON *u, srv_request *r, srv_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(u, "recalibrate");
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    double t = 0.9, s = 0.9;
    if (cJSON_IsObject(v)) {
        if (get_number(v, "reuse.recalibrate.temperature", 0.1, 4, &t, e) ||
            get_number(v, "reuse.recalibrate.scale", 0.1, 4, &s, e))
            return -1;
    } else if (!cJSON_IsTrue(v)) {
        return bad(e, "reuse.recalibrate", "'%s' must be true, false or {\"temperature\", \"scale\"}%s", "");
    }
    r->recal_temperature = (float)t;
    r->recal_scale = (float)s;
    return 0;
}

static int parse_reuse(const cJSON *root, srv_request *r, srv_error *e) {
    r->recompute_ratio = -1;
    r->overlap = r->first_k = -1;
    r->use_baked = 1;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "reuse");
    if (!u || cJSON_IsNull(u)) return 0;
    if (!cJSON_IsObject(u)) return bad(e, "reuse", "'%s' must be an object {\"strategy\", \"recompute_ratio\"}%s", "");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(u, "strategy");
    if (s && !cJSON_IsNull(s)) {
        if (!cJSON_IsString(s)) return bad(e, "reuse.strategy", "'%s' must be a string%s", "");
        r->strategy = dup_string(s);
    }
    double ratio = -1;
    long long overlap = -1, first_k = -1;
    if (get_number(u, "reuse.recompute_ratio", 0, 1, &ratio, e) || get_int(u, "reuse.overlap", 0, 4096, &overlap, e) ||
        get_int(u, "reuse.first_k", 0, 4096, &first_k, e))
        return -1;
    if (get_bool(u, "reuse.baked", &r->use_baked, e) || parse_recalibrate(u, r, e)) return -1;
    r->recompute_ratio = (float)ratio;
    r->overlap = (int)overlap;
    r->first_k = (int)first_k;
    return 0;
}

static int parse_sampling(const cJSON *root, srv_request *r, srv_error *e) {
    double t = 1.0, p = 1.0, pres = 0, freq = 0, minp = 0;
    long long seed = 0, top_k = 0, max_tokens = -1, n = 1; /* -1: not given */
    if (get_number(root, "temperature", 0, 2, &t, e) || get_number(root, "top_p", 0, 1, &p, e) ||
        get_number(root, "min_p", 0, 1, &minp, e) || get_int(root, "top_k", 0, 1 << 20, &top_k, e) ||
        get_number(root, "presence_penalty", -2, 2, &pres, e) ||
        get_number(root, "frequency_penalty", -2, 2, &freq, e) ||
        get_int(root, "seed", -SEED_EXACT, SEED_EXACT, &seed, e) || get_int(root, "n", 1, SRV_MAX_CHOICES, &n, e))
        return -1;
    /* > 0 as the sampler's float: 1e-46 passed here and became 0 there (a 500) */
    if ((float)p <= 0) return bad(e, "top_p", "'%s' must be > 0 (at least 1.4e-45, a float's smallest)%s", "");
    /* both are checked, in this order: max_completion_tokens wins unless it
     * is absent or null (get_int leaves the value then; a null one had hidden
     * max_tokens, and max_tokens "garbage" had passed beside it) */
    if (get_int(root, "max_tokens", 0, SRV_MAX_TOKENS_LIMIT, &max_tokens, e) ||
        get_int(root, "max_completion_tokens", 0, SRV_MAX_TOKENS_LIMIT, &max_tokens, e))
        return -1;
    /* 0: nothing generated, what a client scoring a prompt asks with echo
     * (OpenAI's legacy completions take it so); useless without */
    if (max_tokens == 0 && !r->echo) {
        const cJSON *mct = cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens");
        return bad(e, mct && !cJSON_IsNull(mct) ? "max_completion_tokens" : "max_tokens",
                   r->kind == SRV_KIND_CHAT ? "'%s' must be >= 1%s"
                                            : "'%s' must be >= 1 (0, nothing generated, only with echo)%s",
                   "");
    }
    r->temperature = (float)t;
    r->top_p = (float)p;
    r->min_p = (float)minp;
    r->presence_penalty = (float)pres;
    r->frequency_penalty = (float)freq;
    r->top_k = (int)top_k;
    r->seed = (uint64_t)seed;
    r->max_tokens = max_tokens < 0 ? 0 : max_tokens == 0 ? -1 : (int)max_tokens;
    r->n = (int)n;
    return 0;
}

/* logit_bias: {"token id": bias}, ids as canonical decimal strings (so
 * "7" and "007" cannot name one token twice), biases -100..100. */
static int parse_logit_bias(const cJSON *root, srv_request *r, srv_error *e) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!b || cJSON_IsNull(b)) return 0;
    if (!cJSON_IsObject(b) || cJSON_GetArraySize(b) > SRV_MAX_LOGIT_BIAS)
        return bad(e, "logit_bias", "'%s' must be an object of at most 300 {\"token id\": bias} entries%s", "");
    int n = cJSON_GetArraySize(b);
    r->bias_ids = malloc((size_t)(n ? n : 1) * sizeof *r->bias_ids);
    r->bias_values = malloc((size_t)(n ? n : 1) * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values) return bad(e, "logit_bias", "'%s': out of memory%s", "");
    const cJSON *it;
    cJSON_ArrayForEach(it, b) {
        const char *k = it->string;
        size_t len = strlen(k);
        int canonical = len > 0 && len <= 10 && strspn(k, "0123456789") == len && (k[0] != '0' || len == 1);
        long long id = canonical ? strtoll(k, NULL, 10) : -1;
        if (id < 0 || id > INT32_MAX) {
            srv_error_set(e, 400, "invalid_request_error", "invalid_value", "logit_bias",
                          "'logit_bias' key \"%.40s\" is not a token id (a decimal integer)", k);
            return -1;
        }
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < -100 || it->valuedouble > 100) {
            srv_error_set(e, 400, "invalid_request_error", "invalid_value", "logit_bias",
                          "'logit_bias' of token %lld must be a number in [-100, 100]", id);
            return -1;
        }
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_values[r->n_bias++] = (float)it->valuedouble;
    }
    return 0;
}

/* Chat: logprobs (bool) and top_logprobs (0..20, only with logprobs true,
 * as OpenAI answers). Completions: logprobs N, the legacy integer (0..20:
 * the chosen token's log-probability and the N best). */
static int parse_logprobs(const cJSON *root, srv_request *r, srv_error *e) {
    long long top = 0;
    if (r->kind == SRV_KIND_COMPLETION) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (!v || cJSON_IsNull(v)) return 0;
        if (get_int(root, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, e)) return -1;
        r->logprobs = 1;
        r->top_logprobs = (int)top;
        return 0;
    }
    if (get_bool(root, "logprobs", &r->logprobs, e) ||
        get_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, e))
        return -1;
    if (top > 0 && !r->logprobs) return bad(e, "top_logprobs", "'%s' needs 'logprobs': true%s", "");
    r->top_logprobs = (int)top;
    return 0;
}

/* Fields that ask for what this server does not do, refused where they
 * ask for it: constrained output (response_format other than text) and
 * function calling (tools or the legacy functions, non-empty). A client
 * asking for JSON mode had got free text, and one offering tools a reply
 * that never calls them, without a word. */
static int refuse_unsupported(const cJSON *root, srv_error *e) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *type = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(type))
            return bad(e, "response_format", "'%s' must be an object with a string 'type'%s", "");
        if (strcmp(type->valuestring, "text"))
            return bad(e, "response_format", "'%s' other than {\"type\": \"text\"} is not supported (no constrained "
                                             "decoding: JSON mode and schemas are not enforced)%s", "");
    }
    static const char *const calls[] = {"tools", "functions"};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, calls[i]);
        if (t && !cJSON_IsNull(t) && !(cJSON_IsArray(t) && cJSON_GetArraySize(t) == 0))
            return bad(e, calls[i], "'%s' is not supported (no function calling: the model would never call them)%s", "");
    }
    return 0;
}

static int parse_root(const cJSON *root, srv_kind kind, srv_request *r, srv_error *e) {
    if (!cJSON_IsObject(root)) {
        srv_error_set(e, 400, "invalid_request_error", "invalid_json", "", "the request body must be a JSON object");
        return -1;
    }
    r->kind = kind;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) return bad(e, "model", "'%s' must be a string%s", "");
        r->model = dup_string(model);
    }
    if (kind == SRV_KIND_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e)) return -1;
    if (refuse_unsupported(root, e)) return -1;
    if (parse_sampling(root, r, e) || parse_stop(root, r, e) || parse_documents(root, r, e) ||
        parse_reuse(root, r, e) || parse_logprobs(root, r, e) || parse_logit_bias(root, r, e))
        return -1;
    r->cache_prompt = 1;
    if (get_bool(root, "stream", &r->stream, e) || get_bool(root, "return_prompt_sources", &r->return_prompt_sources, e) ||
        get_bool(root, "return_token_ids", &r->return_token_ids, e) || get_bool(root, "cache_prompt", &r->cache_prompt, e))
        return -1;
    long long bake = 0;
    int doc_set = 0;
    if (get_int(root, "bake_with_neighbours", 1, 255, &bake, e) || get_bool(root, "doc_set", &doc_set, e)) return -1;
    if (bake && doc_set)
        return bad(e, "doc_set", "give '%s' (all the other documents) or 'bake_with_neighbours', not both%s", "");
    r->bake_neighbours = doc_set ? -1 : (int)bake;
    if (r->prompt_ids && r->n_docs)
        return bad(e, "prompt", "'%s' as token ids with documents is not supported (the question must be text)%s", "");
    if (r->echo && r->n_docs)
        return bad(e, "echo", "'%s' with documents is not supported (echo the prompt of a plain completion)%s", "");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(e, "stream_options", "'%s' must be an object%s", "");
        if (!r->stream) /* as OpenAI answers (it had been ignored) */
            return bad(e, "stream_options", "'%s' is only allowed when stream is true%s", "");
        if (get_bool(so, "stream_options.include_usage", &r->include_usage, e)) return -1;
    }
    return 0;
}

/* The first flaw cJSON lets pass in body[0..len): the escape \u0000 in a
 * string (any case; cJSON ends the string there) or a raw control byte, in
 * a string (RFC 8259 wants it escaped) or between tokens other than tab, LF
 * and CR (cJSON skips every byte up to 0x20 as white space). Its offset, or
 * -1; *nul says which. */
static long string_flaw(const char *body, size_t len, int *nul) {
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            if ((unsigned char)body[i] < 0x20 && body[i] != '\t' && body[i] != '\n' && body[i] != '\r') {
                *nul = 0;
                return (long)i;
            }
            in_str = body[i] == '"';
        } else if (body[i] == '"') {
            in_str = 0;
        } else if ((unsigned char)body[i] < 0x20) {
            *nul = 0;
            return (long)i;
        } else if (body[i] == '\\' && i + 1 < len) {
            if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) {
                *nul = 1;
                return (long)i;
            }
            i++; /* the escaped character (\" does not end the string) */
        }
    }
    return -1;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* A key twice in one object of the tree (cJSON keeps both, and lookups see
 * the first: a second, invalid value would pass unchecked), or NULL. Names
 * sorted per object: n log n, whatever a hostile body holds. */
static const char *duplicate_key(const cJSON *v) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, v) {
        const char *d = duplicate_key(c);
        if (d) return d;
        n++;
    }
    if (!cJSON_IsObject(v) || n < 2) return NULL;
    const cJSON **names = malloc((size_t)n * sizeof *names);
    if (!names) return "(out of memory)";
    int k = 0;
    cJSON_ArrayForEach(c, v) names[k++] = c;
    qsort(names, (size_t)n, sizeof *names, by_name);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (!strcmp(names[i - 1]->string, names[i]->string)) dup = names[i]->string;
    free(names);
    return dup;
}

/* How deep arrays and objects are open at byte `at` of a JSON text, the
 * bracket there included (strings skipped): cJSON gives up past
 * CJSON_NESTING_LIMIT, and its error then read as "not valid JSON". */
static int nesting_at(const char *body, size_t len, size_t at) {
    int depth = 0, in_string = 0;
    for (size_t i = 0; i <= at && i < len; i++) {
        const char ch = body[i];
        if (in_string) {
            if (ch == '\\') i++;
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '[' || ch == '{') {
            depth++;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return depth;
}

cJSON *srv_json_parse(const char *body, size_t len, srv_error *err) {
    const char *end = NULL;
    cJSON *root = body ? cJSON_ParseWithLengthOpts(body, len, &end, 0) : NULL;
    size_t at = root && end ? (size_t)(end - body) : 0;
    while (root && at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    if (root && at < len) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", "",
                      "the request body has more after its JSON value (at byte %zu)", at);
        cJSON_Delete(root);
        return NULL;
    }
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        long at_error = body && ep && ep >= body && ep <= body + len ? (long)(ep - body) : 0L;
        if (body && nesting_at(body, len, (size_t)at_error) > CJSON_NESTING_LIMIT)
            srv_error_set(err, 400, "invalid_request_error", "invalid_json", "",
                          "the request body nests arrays and objects deeper than %d levels (at byte %ld)",
                          CJSON_NESTING_LIMIT, at_error);
        else
            srv_error_set(err, 400, "invalid_request_error", "invalid_json", "",
                          "the request body is not valid JSON (near byte %ld)", at_error);
        return NULL;
    }
    int nul = 0;
    long at_flaw = string_flaw(body, len, &nul);
    const char *dup = at_flaw < 0 ? duplicate_key(root) : NULL;
    if (at_flaw >= 0 && nul)
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "",
                      "a string in the request holds \\u0000 (NUL), which is not accepted: the text would end there");
    else if (at_flaw >= 0)
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", "",
                      "the request holds a raw control byte (0x%02x at byte %ld): JSON wants it escaped in a string, "
                      "and only tab, LF and CR between tokens",
                      (unsigned char)body[at_flaw], at_flaw);
    else if (dup)
        srv_error_set(err, 400, "invalid_request_error", "invalid_json", dup, "the key \"%.60s\" appears twice in one object",
                      dup);
    if (at_flaw >= 0 || dup) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    cJSON *root = srv_json_parse(body, len, err);
    if (!root) return -1;
    int st = srv_request_from_json(root, kind, 0, out, err);
    cJSON_Delete(root);
    return st;
}

int srv_request_from_json(const cJSON *root, srv_kind kind, int k, srv_request *out, srv_error *err) {
    memset(out, 0, sizeof *out);
    out->prompt_index = k;
    int st = parse_root(root, kind, out, err);
    if (st) srv_request_free(out);
    return st;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_docs; i++) {
        free(r->docs[i]);
        free(r->doc_ids[i]);
    }
    free(r->docs);
    free(r->doc_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->strategy);
    free(r->bias_ids);
    free(r->bias_values);
    memset(r, 0, sizeof *r);
}

int srv_request_doc_layout(const srv_request *r, const char **system, const char **question, srv_error *err) {
    *system = NULL;
    *question = NULL;
    if (r->kind == SRV_KIND_COMPLETION) {
        *question = r->prompt;
        return 0;
    }
    int n_user = 0;
    for (int i = 0; i < r->n_msgs; i++) {
        const char *role = r->msgs[i].role;
        if (!strcmp(role, "system") && i == 0) *system = r->msgs[i].content;
        else if (!strcmp(role, "user")) {
            *question = r->msgs[i].content;
            n_user++;
        } else {
            srv_error_set(err, 400, "invalid_request_error", "invalid_value", "documents",
                          "'documents' go with a system message (first, optional) and one user message; "
                          "messages[%d] has role %s", i, role);
            return -1;
        }
    }
    if (n_user != 1) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "documents",
                      "'documents' go with exactly one user message (got %d)", n_user);
        return -1;
    }
    return 0;
}
