/*
 * A scheduler slot: one kvs_context and the request running in it.
 *
 *   FREE -> PREFILL (chunks of the uncached prompt, interleaved with other
 *           slots' decode steps; documents: uncached documents computed in
 *           slices of a chunk (kvs_docs_warmer), then one
 *           kvs_generate_segments call that finds them cached)
 *        -> DECODE  (one row of the batched step per scheduler iteration)
 *        -> FREE    (finish: text flushed, KV of prompt + generated tokens
 *                    stored for the next turn, usage filled, job released)
 *
 * Only the scheduler thread touches a slot.
 */
#ifndef KVS_SERVER_SLOT_H
#define KVS_SERVER_SLOT_H

#include "job.h"
#include "metrics.h"

typedef enum srv_slot_state { SRV_SLOT_FREE = 0, SRV_SLOT_PREFILL, SRV_SLOT_DECODE } srv_slot_state;

typedef struct srv_slot {
    kvs_context *ctx;
    srv_slot_state state;
    srv_job *job;
    kvs_sampler *sampler;
    kvs_detok *detok;
    int32_t *hist;        /* (n_ctx + 1) prompt + generated tokens */
    int n_hist;
    int n_kv;             /* tokens of hist whose KV the context holds */
    int n_stored;         /* prompt tokens stored to the cache during the prefill (whole chunks) */
    char *gen;            /* generated text, NUL-terminated */
    size_t gen_len, gen_cap, emitted;
    srv_logprob *lp;      /* (n_lp) logprobs of generated tokens whose text is not emitted yet */
    int n_lp, cap_lp;
    int stop_cut;         /* the text was cut at a stop string (its tokens' entries never go out) */
    float *biased;        /* (n_vocab) the logits plus logit_bias (allocated at first use) */
    int n_gen;
    double t_start, t_first;
    kvs_docs_warmer *warmer; /* documents: uncached ones being computed (NULL before and after) */
    int docs_ready;       /* documents: the warmer is done (or not needed) */
    int docs_computed;    /* documents the warmer computed */
    int docs_cached;      /* documents it found cached */
    int src_at;           /* prompt tokens whose sources runs are added (catch-up adds them as it goes) */
    int exact_computed;   /* exact-prefix tokens the warmer computed (then served as cached): those before
                           * the documents, and the first document where it sits right after them */
    const atomic_int *stop_all; /* the scheduler's: set when every job is cancelled (drain, shutdown) */
} srv_slot;

typedef struct srv_env {
    const kvs_model *model;
    kvs_cache *cache;
    srv_metrics *metrics;
    const int32_t *pos;   /* (n_ctx) 0, 1, 2, ... */
    int n_vocab, n_ctx;
    int prefill_chunk;    /* prompt tokens per prefill step */
    int chunk_tokens;     /* the cache's chunk grid */
} srv_env;

/* The stop poll of a slot's context (kvs_context_set_should_stop, user =
 * the slot): its job was cancelled (the client went away) or every job
 * was. It stops the calls that run in one scheduler step (a documents
 * warm, bake, or full-strategy assembly) between batches, documents and
 * layers; a job that fails so ends cancelled. */
int srv_slot_should_stop(void *slot);

/* Binds job to a free slot and copies its cached prefix in. Returns 0, or
 * -1 after failing the job. */
int srv_slot_start(srv_slot *s, const srv_env *env, srv_job *job);
/* One prefill step (chunk_tokens of the prompt, or the whole documents
 * path). On the last one the first token is sampled and the slot decodes. */
void srv_slot_prefill_step(srv_slot *s, const srv_env *env);
/* In-flight prefix sharing. 1 if f should not compute its next chunk now
 * because l, a prompt ahead of it (more tokens computed, or as many and
 * l_first), shares at least one more whole chunk with it that l is
 * computing or has stored: f then loads it from the cache instead of
 * computing it a second time. Documents prompts likewise wait while one
 * ahead (warming first, or l_first) warms a document they have too.
 * Prompts without the cache (cache_prompt false) neither wait nor lead. */
int srv_slot_waits_for(const srv_slot *f, const srv_slot *l, int l_first, const srv_env *env);
/* Loads the longest cached prefix of the prompt when it is longer than
 * what the slot holds (what a leader stored meanwhile). */
void srv_slot_catch_up(srv_slot *s, const srv_env *env);
/* Prompt tokens still to run (documents: all of them). */
int srv_slot_prefill_left(const srv_slot *s);
/* The prompt's last token ran (in a batched step): logits start generation. */
void srv_slot_prefill_done(srv_slot *s, const srv_env *env, const float *logits);
/* Takes the logits of the slot's last decoded position: samples, emits,
 * maybe finishes. */
void srv_slot_take_logits(srv_slot *s, const srv_env *env, const float *logits);
/* Ends the request (cancel, drain, error) and frees the slot. */
void srv_slot_finish(srv_slot *s, const srv_env *env, srv_finish why);

#endif
