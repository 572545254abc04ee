/*
 * JSON for the clients of kvstitch.h (the CLI, the benchmarks, the server),
 * on cJSON (Debian libcjson-dev): builders that turn the public result
 * structs into cJSON trees, one-line printing, and typed readers whose
 * errors name the field.
 *
 * Ownership: every builder returns a new tree the caller owns (cJSON_Delete,
 * or json_print_line, which consumes it); NULL means out of memory. Readers
 * return pointers into the tree they read: valid while the tree lives.
 *
 * Field names are the CLI's JSON contract (README, "JSON output"): change
 * them only together with the README and the tests.
 */
#ifndef KVS_TOOLS_JSON_UTIL_H
#define KVS_TOOLS_JSON_UTIL_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "kvstitch.h"

/* --- writing ------------------------------------------------------------- */

/* Prints v on one line followed by '\n' and deletes it. Returns 0, or -1
 * after a message on stderr when v is NULL or printing runs out of memory. */
/* obj[key] = text with invalid UTF-8 as U+FFFD (kvs_utf8_repair): a file
 * path, or other bytes that are not text, in JSON that must parse. NULL if
 * out of memory. */
cJSON *json_add_text(cJSON *obj, const char *key, const char *text);
/* A token's bytes b[n] as text a JSON string can carry (malloc'd, NULL if
 * out of memory): as they are when valid UTF-8 without NUL, else OpenAI's
 * "bytes:\xNN..." spelling (a token can hold part of a character). */
char *json_token_spelling(const char *b, size_t n);
int json_print_line(FILE *f, cJSON *v);

/* A number member, or null when v is not finite (JSON has no NaN). */
cJSON *json_add_number(cJSON *obj, const char *key, double v);
/* An array member of ints. */
cJSON *json_add_ints(cJSON *obj, const char *key, const int32_t *v, int n);

/* How a generate result is reported: the options that shape the object. */
typedef struct json_generate_opts {
    const char *reuse;  /* "prefix", "none", or a repair strategy name; used when r->reuse is set */
    int chunk_tokens;   /* prefill_tok_s is null for fewer prefilled tokens than this (0 = 64) */
} json_generate_opts;

/* The generate object, in the documented field order: prompt_tokens,
 * tokens, text, ttft_ms, prefill_ms, prefill_tok_s, decode_tok_s,
 * first_logits_sha256, first_top_logprobs, then (r->reuse) cached_tokens,
 * live_tokens, cache_hit_ratio, reuse, assemble_ms, chunk_ends,
 * stored_chunks, reused_tokens, then (r->docs) moved_tokens,
 * recomputed_tokens, recomputed_token_layers, docs_hit, docs_computed, then
 * stop_reason, prefilled_tokens and timings. */
cJSON *json_generate_result(const kvs_generate_result *r, const json_generate_opts *o);
/* {"tokenize_ms", "lookup_ms", "assemble_ms", "repair_ms", "prefill_ms", "first_token_ms", "decode_ms"} */
cJSON *json_timings(const kvs_timings *t);
/* Tokens per second over a duration; null (NaN) when n < min_n or ms <= 0. */
double json_rate(int n, double ms, int min_n);

/* One warmed prompt: source, tokens, chunk_tokens, chunks, chunks_stored, ... */
cJSON *json_warm_report(const char *source, const kvs_warm_report *w);
/* {"docs", "tokens", "cached", "computed", "ms"} */
cJSON *json_warm_docs_report(const kvs_warm_docs_report *r);

/* The model's metadata (kvstitch info --json); counts as from
 * kvs_model_tensor_type_counts (may be NULL). */
cJSON *json_model_info(const kvs_model_info *in, const int counts[KVS_MAX_TENSOR_TYPES]);

/* --- reading ------------------------------------------------------------- */

/* Where a reader error is written: "<what>: <field>: expected ..., got ...". */
typedef struct json_error {
    char msg[320];
} json_error;

/* Parses text[0..len) (one value, nothing but blanks after it). NULL with
 * e->msg = "<what>: byte N: ..." on malformed input. */
cJSON *json_parse(const char *text, size_t len, const char *what, json_error *e);
/* json_parse of a whole file; what = the path. */
cJSON *json_read_file(const char *path, json_error *e);

/* Typed members of an object. Each returns 0 and sets *out when the member
 * is present and valid; 1 when it is absent and not required (*out kept);
 * -1 with e->msg naming the field, the expected type or range and what was
 * found (a missing required member too). */
int json_get_string(const cJSON *obj, const char *key, int required, const char **out, json_error *e);
int json_get_int(const cJSON *obj, const char *key, int required, long lo, long hi, long *out, json_error *e);
int json_get_number(const cJSON *obj, const char *key, int required, double lo, double hi, double *out,
                    json_error *e);
int json_get_bool(const cJSON *obj, const char *key, int required, int *out, json_error *e);
/* An array member: *out points to it (cJSON_GetArraySize, cJSON_ArrayForEach). */
int json_get_array(const cJSON *obj, const char *key, int required, const cJSON **out, json_error *e);
/* An object member. */
int json_get_object(const cJSON *obj, const char *key, int required, const cJSON **out, json_error *e);

#endif
