/*
 * The logprobs object of a choice, in OpenAI's two shapes:
 *
 *   chat:         {"content": [{"token", "logprob", "bytes",
 *                               "top_logprobs": [{"token", "logprob", "bytes"}]}],
 *                  "refusal": null}
 *   completions:  {"tokens": [...], "token_logprobs": [...],
 *                  "top_logprobs": [{token: logprob, ...}], "text_offset": [...]}
 *
 * A token's text is its bytes when they are valid UTF-8, else OpenAI's
 * "bytes:\xNN..." spelling (a token can hold part of a character; the
 * response must stay valid JSON). text_offset counts characters of the
 * completion text (with echo, of the prompt and the completion). A non-finite
 * log-probability (a -inf logit; NaN: the first token of an echoed prompt,
 * whose top_logprobs is null too) is null.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/json_util.h"
#include "server.h"

/* The token's bytes into a malloc'd buffer (NUL-terminated); NULL on failure. */
static char *token_bytes(const kvs_model *m, int32_t id, size_t *n) {
    char small[256];
    *n = 0;
    int st = kvs_token_to_bytes(m, id, 1, small, sizeof small, n);
    char *b = malloc(*n + 1);
    if (!b) return NULL;
    if (st == KVS_OK) memcpy(b, small, *n);
    else if (st != KVS_ERR_BUFFER_TOO_SMALL || kvs_token_to_bytes(m, id, 1, b, *n, n) != KVS_OK) *n = 0;
    b[*n] = 0;
    return b;
}

static cJSON *logprob_number(float lp) { return isfinite(lp) ? cJSON_CreateNumber(lp) : cJSON_CreateNull(); }

/* {"token", "logprob", "bytes"} of one id (chat). */
static cJSON *chat_entry(const kvs_model *m, int32_t id, float lp) {
    size_t n = 0;
    char *b = token_bytes(m, id, &n), *t = b ? json_token_spelling(b, n) : NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", t ? t : "");
    cJSON_AddItemToObject(o, "logprob", logprob_number(lp));
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; b && i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
    free(t);
    free(b);
    return o;
}

static char *token_string(const kvs_model *m, int32_t id) {
    size_t n = 0;
    char *b = token_bytes(m, id, &n), *t = b ? json_token_spelling(b, n) : NULL;
    free(b);
    return t ? t : strdup("");
}

size_t srv_utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* {token text: logprob} of a completion token's alternatives, and of the
 * token itself where they leave it out: "up to logprobs + 1 elements", as
 * OpenAI's legacy completions and vLLM answer (a sampled token outside the
 * top N had been missing, and logprobs 0 gave {}). */
static cJSON *completion_top(const kvs_model *m, const srv_logprob *lp) {
    cJSON *top = cJSON_CreateObject();
    for (int k = 0; k <= lp->n_top; k++) {
        const int32_t id = k < lp->n_top ? lp->top_ids[k] : lp->token;
        char *tk = token_string(m, id);
        /* two ids with the same text: the better one (first) stands */
        if (!cJSON_GetObjectItemCaseSensitive(top, tk))
            cJSON_AddItemToObject(top, tk, logprob_number(k < lp->n_top ? lp->top_logprobs[k] : lp->logprob));
        free(tk);
    }
    return top;
}

cJSON *srv_logprobs_json(const kvs_model *m, srv_kind kind, const srv_logprob *lp, int n, const char *text,
                         size_t text_base, size_t chars_base) {
    cJSON *o = cJSON_CreateObject();
    if (kind == SRV_KIND_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < n; i++) {
            cJSON *e = chat_entry(m, lp[i].token, lp[i].logprob);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < lp[i].n_top; k++)
                cJSON_AddItemToArray(top, chat_entry(m, lp[i].top_ids[k], lp[i].top_logprobs[k]));
            cJSON_AddItemToArray(content, e);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t at = 0, at_chars = chars_base; /* bytes of text counted so far, and their characters */
    for (int i = 0; i < n; i++) {
        char *t = token_string(m, lp[i].token);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t));
        free(t);
        cJSON_AddItemToArray(lps, logprob_number(lp[i].logprob));
        /* an echoed prompt's first token (NaN): nothing before it to predict it */
        cJSON_AddItemToArray(tops, isnan(lp[i].logprob) ? cJSON_CreateNull() : completion_top(m, &lp[i]));
        size_t off = lp[i].offset - text_base; /* within text: offsets grow, and start at or after text_base */
        at_chars += srv_utf8_chars(text + at, off - at);
        at = off;
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at_chars));
    }
    return o;
}
