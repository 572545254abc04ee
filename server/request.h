/*
 * An OpenAI request, parsed: the pure function from a JSON body to a
 * validated srv_request (no model, no I/O: fuzz/fuzz_serve_request.c runs it
 * on arbitrary bytes), and the error in OpenAI's shape when it is not one.
 *
 *   POST /v1/chat/completions   messages[] -> chat template
 *   POST /v1/completions        prompt (a string, or an array of one string)
 *   either, kvstitch extension  documents[] ({"id", "text"} or strings) and
 *                               reuse {"strategy", "recompute_ratio", "overlap",
 *                               "first_k", "baked", "recalibrate"}: the RAG path
 *                               (kvs_generate_segments)
 *   POST /v1/cache/warm         also "bake_with_neighbours" K or "doc_set": true
 *                               (kvs_bake_docs)
 *
 * Unknown fields are ignored; known fields of the wrong type or out of range
 * are rejected, naming the field (err->param).
 */
#ifndef KVS_SERVER_REQUEST_H
#define KVS_SERVER_REQUEST_H

#include <cJSON.h>
#include <stddef.h>

#include <stdint.h>

#include "kvstitch.h"  /* kvs_chat_message, kvs_utf8_repair */

typedef enum srv_kind { SRV_KIND_CHAT = 0, SRV_KIND_COMPLETION = 1 } srv_kind;

/* An error for the client: HTTP status + OpenAI's {"error": {...}} fields. */
typedef struct srv_error {
    int http;          /* 400, 401, 404, 405, 413, 429, 500, 501, 503 (metrics.c counts each) */
    char type[40];     /* "invalid_request_error", "authentication_error", ... */
    char code[48];     /* "" or e.g. "context_length_exceeded" */
    char param[64];    /* "" or the offending field */
    char message[512];
} srv_error;

void srv_error_set(srv_error *e, int http, const char *type, const char *code, const char *param, const char *fmt,
                   ...) __attribute__((format(printf, 6, 7)));

#define SRV_MAX_STOP 4
#define SRV_MAX_DOCS 64
#define SRV_MAX_TOKENS_LIMIT 32768
#define SRV_MAX_TOP_LOGPROBS 20 /* OpenAI's bound for top_logprobs */
#define SRV_MAX_LOGIT_BIAS 300  /* entries of logit_bias (OpenAI's bound) */
#define SRV_MAX_CHOICES 16      /* choices of one request: n, times its prompts in a batch */
#define SRV_MAX_PROMPT_IDS (1 << 20) /* token ids of a prompt given so (more fit no context) */

typedef struct srv_request {
    srv_kind kind;
    char *model;                /* as sent, or NULL */
    kvs_chat_message *msgs;     /* (n_msgs) chat: role and content strings owned */
    int n_msgs;
    char *prompt;               /* completions: the text; given as token ids, set by job.c (their text) */
    int32_t *prompt_ids;        /* (n_prompt_ids) completions given token ids ([1, 2, 3] or [[1, 2, 3]]),
                                 * checked against the vocabulary in job.c; else NULL */
    int n_prompt_ids;
    int n_prompts;              /* completions: prompts the request gave (an array of several: a batch,
                                 * each its own n choices); this one is prompt_index's */
    int prompt_index;
    int prompt_batch;           /* the prompt was an array of prompts (of one, too): errors name
                                 * prompt[i] (and prompt[i][k]) */
    int choice_of_prompt;       /* i of choice prompt * n + i (set by complete.c; 0 for the first) */
    char **doc_ids;             /* (n_docs) "" when not given */
    char **docs;                /* (n_docs) texts */
    int n_docs;
    /* Documents: the repair strategy (resolved against the library's table
     * in job.c, so that this file needs nothing but cJSON: fuzzable alone). */
    char *strategy;             /* NULL = the library's default */
    float recompute_ratio;      /* < 0 = default */
    int overlap, first_k;       /* < 0 = default */
    int use_baked;              /* reuse.baked, default 1: a document's baked KV when cached */
    /* reuse.recalibrate: true (APE's 0.9, 0.9), false, or {"temperature",
     * "scale"} (kvs_recal_params); 0, 0 = off */
    float recal_temperature, recal_scale;
    int bake_neighbours;        /* warm: bake_with_neighbours K, -1 for doc_set, 0 = no baking */
    int docs_only;              /* warm: documents without messages or prompt (set by info.c, not
                                 * parsed: the empty user message is its own): errors name documents */
    int warm;                   /* /v1/cache/warm (set by info.c): nothing is generated */
    int max_tokens;             /* 0 = the server's default; -1 = none (given as 0: echo only) */
    int echo;                   /* completions: the reply's text (and logprobs) begin with the prompt */
    int n;                      /* choices, 1..SRV_MAX_CHOICES (each a job of its own sharing this
                                 * request: srv_job_new_choice) */
    /* Sampling, OpenAI's defaults: temperature 1, top_p 1. */
    float temperature, top_p, min_p;
    float presence_penalty, frequency_penalty; /* OpenAI's, -2..2 */
    int top_k;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int stop_at[SRV_MAX_STOP];  /* stop[i]'s index in the request's array, -1 when 'stop' was one string */
    int n_stop;
    int stream;
    int include_usage;          /* stream_options.include_usage */
    int return_prompt_sources;  /* kvstitch extension: per-token KV source runs in usage.kvstitch */
    int return_token_ids;       /* kvstitch extension: completion_token_ids in usage.kvstitch */
    int cache_prompt;           /* kvstitch extension (llama-server's name), default 1: 0 = no cache
                                 * lookup or store (prompts without documents): a cold run */
    int logprobs;               /* 1: each generated token's log-probability (chat: logprobs true;
                                 * completions: logprobs N, an integer) */
    int top_logprobs;           /* 0..SRV_MAX_TOP_LOGPROBS alternatives per token (completions: N) */
    int32_t *bias_ids;          /* (n_bias) logit_bias: token ids (checked against the vocabulary in job.c) */
    float *bias_values;         /* (n_bias) -100..100, added to those logits before sampling */
    int n_bias;
} srv_request;

/* Parses body[0..len) (need not be NUL-terminated). On failure *out is
 * left zeroed (nothing to free) and err says what is wrong (HTTP 400). */
int srv_request_parse(const char *body, size_t len, srv_kind kind, srv_request *out, srv_error *err);
/* The same from the body's tree (srv_json_parse; root is only read), taking
 * prompt k of a completion's batch of prompts (0 <= k < n_prompts of the
 * request taken with k = 0): a batch's prompts come from one parse. */
int srv_request_from_json(const cJSON *root, srv_kind kind, int k, srv_request *out, srv_error *err);

/* A request body as JSON, strictly: one value and nothing after it but
 * whitespace (cJSON alone accepted `{...}garbage` and two objects), and no
 * string holding U+0000 (cJSON ends its strings there: "abc\u0000def"
 * would be taken as "abc", a stop string cut to its first letters). NULL
 * with err set (400 invalid_json / invalid_value) otherwise. */
cJSON *srv_json_parse(const char *body, size_t len, srv_error *err);
void srv_request_free(srv_request *r);

/* The system message (or NULL) and the last user message of a chat
 * request that carries documents: documents go with one system message and
 * one user message. 0 ok, -1 with err set otherwise. */
int srv_request_doc_layout(const srv_request *r, const char **system, const char **question, srv_error *err);

#endif
