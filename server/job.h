/*
 * One request in flight, shared by the HTTP thread that waits on it and
 * the scheduler thread that runs it (refcounted: each side drops its ref).
 *
 *   HTTP thread                         scheduler thread
 *   srv_job_new (tokenize, check len)
 *   srv_sched_submit ------------------> queue -> slot: prefill, decode steps
 *   srv_job_wait (text so far) <-------- srv_job_emit (safe text: no partial
 *     ... until done                        UTF-8, no possible stop-string start)
 *   srv_job_cancel on disconnect ------> slot freed within one step
 *                                        srv_job_finish (usage, finish reason)
 */
#ifndef KVS_SERVER_JOB_H
#define KVS_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>

#include "request.h"

typedef enum srv_finish {
    SRV_FINISH_NONE = 0,
    SRV_FINISH_STOP,      /* end-of-generation token or a stop string */
    SRV_FINISH_LENGTH,    /* max_tokens or the context window */
    SRV_FINISH_CANCELLED, /* the client went away, or the server drains */
    SRV_FINISH_ERROR,
} srv_finish;

/* A run of prompt tokens whose KV came from one source (for the web page). */
typedef enum srv_source { SRV_SRC_CACHED = 0, SRV_SRC_MOVED, SRV_SRC_RECOMPUTED, SRV_SRC_COMPUTED } srv_source;

typedef struct srv_usage {
    int prompt_tokens, completion_tokens;
    int cached_tokens;      /* exact prefix hit: bit-identical KV, not recomputed */
    int moved_tokens;       /* document tokens from cached documents, moved into place */
    int recomputed_tokens;  /* tokens the repair recomputed */
    int docs_hit, docs_computed;
    int docs_baked;         /* documents whose baked KV was moved (or, warm: baked now) */
    int chunks_stored;
    int computed_tokens;    /* prompt tokens this request computed (metrics; a prefill stopped
                             * before its end counts what it ran, not the whole prompt) */
    int prefill_steps;      /* scheduler steps the prompt took (chunks; documents: slices of uncached ones, then the assembly) */
    const char *strategy;   /* "prefix" or a repair strategy name */
    double queue_ms, ttft_ms, prefill_ms, decode_ms, total_ms;
    char first_logits_sha256[65]; /* of the first generated position's n_vocab float logits */
} srv_usage;

/* One generated token's log-probabilities (requests with logprobs): of
 * the raw logits (kvs_logprobs), before any sampling setting. */
typedef struct srv_logprob {
    int32_t token;
    float logprob;
    size_t offset;            /* byte offset of its text in the generated text */
    int n_top;
    int32_t top_ids[SRV_MAX_TOP_LOGPROBS];
    float top_logprobs[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;

typedef struct srv_job {
    /* Input: immutable after srv_job_new. */
    srv_request req;          /* a choice's (req_owner set): a copy of the owner's, its strings the owner's */
    struct srv_job *req_owner; /* choice i > 0 of a prompt: the first, whose req and prompt it shares
                                * (and holds a reference to); NULL: this job owns them */
    int32_t *prompt;          /* (n_prompt) the tokens that run */
    int n_prompt;
    int max_tokens;           /* resolved */
    kvs_sampler_params sampling; /* resolved from req */
    kvs_repair_params repair;    /* resolved from req (documents) */
    int segments;             /* 1: documents (kvs_generate_segments path) */
    int warm_only;            /* POST /v1/cache/warm: prefill and store, no generation */
    kvs_segments seg;         /* points into req */
    int *seg_ends;            /* (n_seg_ends) end token of each segment (system, docs..., question) */
    int n_seg_ends;
    double t_submit;          /* ms, monotonic */
    char id[40];              /* "chatcmpl-..." / "cmpl-..." */
    long created;             /* unix seconds */

    /* Output, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;               /* emitted text, NUL-terminated */
    size_t len, cap;
    srv_logprob *lp;          /* (n_lp) of the tokens whose text starts in the emitted text */
    int n_lp, cap_lp;
    int done;
    srv_finish finish;
    srv_error err;
    srv_usage usage;
    int32_t *gen_tokens;      /* (usage.completion_tokens) the generated ids, set at finish */
    /* echo with logprobs: the prompt's tokens (offsets into req.prompt; the
     * first has no logprob: NaN), written by the prefill before the first
     * emit or the finish, read after either (srv_job_echo_logprobs) */
    srv_logprob *prompt_lp;
    int n_prompt_lp;
    int n_sources;            /* runs of prompt tokens by KV source */
    struct { srv_source src; int n; } sources[2 + 3 * SRV_MAX_DOCS];

    atomic_int cancelled;
    atomic_int refs;
} srv_job;

/* Milliseconds on the monotonic clock (the server's timings and deadlines). */
double srv_now_ms(void);

/* Tokenizes the request for model (chat template, or documents as
 * segments). req is taken (left zeroed) whatever happens. On failure
 * returns NULL with err set (400, e.g. context_length_exceeded when the
 * prompt does not fit n_ctx). The job starts with one reference, the
 * caller's. */
srv_job *srv_job_new(const kvs_model *model, srv_request *req, int n_ctx, int default_max_tokens, srv_error *err);
/* Choice i (1 <= i < n) of first's prompt: first's request, tokens and
 * resolved parameters, shared (never parsed, tokenized or checked again;
 * first's input is immutable, so the choices may run at once), with seed +
 * i. Takes a reference to first, dropped with the choice's last. NULL
 * (err: out of memory) on failure. */
srv_job *srv_job_new_choice(srv_job *first, int i, srv_error *err);
void srv_job_unref(srv_job *j);
/* 1 if the prefill must give every prompt position's logits: an echo with
 * logprobs (no cached prefix can serve it: the cache holds KV, not logits),
 * in the first choice of its prompt only (the others' replies and streams
 * take its entries). */
int srv_job_echo_logprobs(const srv_job *j);
void srv_job_cancel(srv_job *j);

/* Scheduler side. emit appends text and the log-probabilities of the
 * tokens whose text starts in it (n_lp may be 0), in one step for the
 * reader. */
void srv_job_emit(srv_job *j, const char *s, size_t n, const srv_logprob *lp, int n_lp);
void srv_job_finish(srv_job *j, srv_finish why);
void srv_job_fail(srv_job *j, const srv_error *err);

/* HTTP side: what the reader has taken so far, and what one wait hands
 * over (malloc'd copies, NULL / 0 when none: srv_job_piece_free). */
typedef struct srv_job_cursor {
    size_t text;
    int lp;
} srv_job_cursor;
typedef struct srv_job_piece {
    char *text;               /* NUL-terminated */
    size_t n;
    srv_logprob *lp;
    int n_lp;
} srv_job_piece;

/* Waits until text beyond seen exists or the job is done, at most
 * timeout_ms. Returns 1 when done (and everything emitted was seen after
 * this call's copy), else 0. Copies what is new into *out and advances
 * *seen. */
int srv_job_wait(srv_job *j, srv_job_cursor *seen, srv_job_piece *out, int timeout_ms);
void srv_job_piece_free(srv_job_piece *p);

/* 1 if text[0..n) is valid UTF-8 (kvs_last_error says why not). It had
 * tokenized the text to find out: a second tokenization of every field. */
int srv_utf8_valid(const char *text, size_t n);

const char *srv_finish_name(srv_finish f);
const char *srv_source_name(srv_source s);

#endif
