/* One slot's request: prefill (with the cache), sampling, text, finish (slot.h). */
#include "slot.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void add_source(srv_job *j, srv_source src, int n);
static void store_progress(srv_slot *s, const srv_env *env);

int srv_slot_should_stop(void *slot) {
    const srv_slot *s = slot;
    return (s->job && atomic_load(&s->job->cancelled)) || (s->stop_all && atomic_load(s->stop_all));
}

/* The job fails at step what, for reason why: "what: why". */
static void fail_job_because(srv_slot *s, const srv_env *env, const char *what, const char *why) {
    if (srv_slot_should_stop(s)) /* the call stopped because the job was cancelled meanwhile */
        return srv_slot_finish(s, env, SRV_FINISH_CANCELLED);
    srv_error e;
    srv_error_set(&e, 500, "server_error", "", "", "%s: %s", what, why);
    s->job->err = e; /* read by the HTTP side only after finish */
    srv_slot_finish(s, env, SRV_FINISH_ERROR);
}

/* A library call failed at step what: kvs_last_error() says why. Only
 * then: it holds the last failing call's message on this thread, which for
 * a failure of the server's own (an allocation) is another request's (the
 * stream and the reply of one failing request had named different ones, as
 * the cancelled choices in between left theirs: a flaky
 * serve:test_api.py::test_echo_streamed_choices_when_the_first_fails). */
static void fail_job(srv_slot *s, const srv_env *env, const char *what) {
    fail_job_because(s, env, what, kvs_last_error());
}

/* An allocation of the server's own failed at step what. */
static void fail_job_nomem(srv_slot *s, const srv_env *env, const char *what) {
    fail_job_because(s, env, what, "out of memory");
}

/* Step what failed with status st of a helper that tells the two apart:
 * > 0 an allocation of the server's own, < 0 a library call. */
static void fail_job_status(srv_slot *s, const srv_env *env, const char *what, int st) {
    if (st > 0) fail_job_nomem(s, env, what);
    else fail_job(s, env, what);
}

/* A warm's document that does not fit the context: the client's to fix,
 * named by its index and id (the library's message counts documents). */
static void fail_job_too_long(srv_slot *s, const srv_env *env, int doc) {
    srv_error e;
    const srv_request *q = &s->job->req;
    if (doc >= 0 && doc < q->n_docs) {
        char param[48];
        snprintf(param, sizeof param, "documents[%d]", doc);
        const char *id = q->doc_ids && q->doc_ids[doc] && *q->doc_ids[doc] ? q->doc_ids[doc] : NULL;
        srv_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", param, "%s%s%.200s%s: %s", param,
                      id ? " (id \"" : "", id ? id : "", id ? "\")" : "", kvs_last_error());
    } else {
        srv_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", "documents", "%s",
                      kvs_last_error());
    }
    s->job->err = e;
    srv_slot_finish(s, env, SRV_FINISH_ERROR);
}

/* 1 if the prompt's first token is the BOS the tokenizer added to a text
 * prompt: its text is not in the echoed prompt (a "<bos>" the text spells
 * out is the token after it). */
static int added_bos(const srv_job *j, const srv_env *env) {
    kvs_model_info in;
    kvs_model_get_info(env->model, &in);
    return !j->req.prompt_ids && in.add_bos && j->n_prompt > 0 && j->prompt[0] == in.bos_id;
}

/* KVSTITCH_TEST_ECHO_NOMEM=1 (the serve tests' hook, as make test's
 * KVSTITCH_VERIFY_KV_LAYOUT): echo_start fails as out of memory. Only the
 * first choice of a prompt computes its echoed entries, so this fails it
 * alone, before its prefill, which no request can make happen on demand
 * (serve:test_api.py::test_echo_streamed_choices_when_the_first_fails). */
static int echo_nomem_injected(void) {
    const char *e = getenv("KVSTITCH_TEST_ECHO_NOMEM");
    return e && *e && strcmp(e, "0") != 0;
}

/* Echo with logprobs: the prompt's entries, their logprobs to come from
 * the prefill's logits (the first token has none: NaN). Offsets are where
 * each token's text starts in the echoed prompt, by the detokenizer with
 * control tokens rendered, as the prompt spells them ("<|im_start|>": they
 * had been given no text, and every offset after one fell short), but for
 * a BOS the tokenizer added. 0; 1 out of memory; -1 the detokenizer's
 * failure (kvs_last_error says why). */
static int echo_start(srv_job *j, const srv_env *env) {
    kvs_detok *d = NULL;
    if (echo_nomem_injected() || !(j->prompt_lp = calloc((size_t)j->n_prompt, sizeof *j->prompt_lp))) return 1;
    if (kvs_detok_new(env->model, 1, &d)) return -1;
    const size_t len = strlen(j->req.prompt);
    const int skip = added_bos(j, env);
    size_t at = 0;
    for (int i = 0; i < j->n_prompt; i++) {
        srv_logprob *e = &j->prompt_lp[i];
        e->token = j->prompt[i];
        e->offset = at < len ? at : len;
        e->logprob = NAN;
        char piece[256];
        size_t n = 0;
        if (i == 0 && skip) continue;
        if (kvs_detok_push(d, j->prompt[i], piece, sizeof piece, &n) == KVS_OK) at += n;
        else at += 256; /* (a piece that large: its text runs on, at most to the end) */
    }
    kvs_detok_free(d);
    j->n_prompt_lp = j->n_prompt;
    return 0;
}

/* Echo with logprobs: prompt token p + 1's entry from the logits at
 * position p (those of the last prompt token are the first sample's). */
static int echo_note(srv_job *j, const srv_env *env, int p, const float *logits) {
    if (p + 1 >= j->n_prompt) return 0;
    srv_logprob *e = &j->prompt_lp[p + 1];
    e->n_top = j->req.top_logprobs < env->n_vocab ? j->req.top_logprobs : env->n_vocab;
    return kvs_logprobs(logits, env->n_vocab, e->token, &e->logprob, e->n_top, e->top_ids, e->top_logprobs);
}

int srv_slot_start(srv_slot *s, const srv_env *env, srv_job *job) {
    s->job = job;
    s->n_hist = 0;
    s->n_kv = 0;
    s->n_stored = 0;
    s->n_gen = 0;
    s->gen_len = s->emitted = 0;
    s->n_lp = 0;
    s->stop_cut = 0;
    s->t_start = srv_now_ms();
    s->t_first = 0;
    s->warmer = NULL;
    s->docs_ready = 0;
    s->docs_computed = 0;
    s->docs_cached = 0;
    s->exact_computed = 0;
    s->src_at = 0;
    job->usage.queue_ms = s->t_start - job->t_submit;
    job->usage.prompt_tokens = job->n_prompt;
    job->usage.strategy = job->segments ? kvs_repair_mode_name(job->repair.mode) : "prefix";
    if (kvs_sampler_new(job->sampling, env->n_vocab, &s->sampler) || kvs_detok_new(env->model, 0, &s->detok)) {
        fail_job(s, env, "cannot start the request");
        return -1;
    }
    /* (a documents-only warm may lay out more than the context: each
     * document must fit, not all; it never reads the history) */
    s->n_hist = job->n_prompt < env->n_ctx ? job->n_prompt : env->n_ctx;
    memcpy(s->hist, job->prompt, (size_t)s->n_hist * sizeof *s->hist);
    /* The sampler sees the prompt's last repeat_last_n tokens, as in kvs_generate. */
    int last_n = job->sampling.repeat_last_n, from = job->n_prompt > last_n ? job->n_prompt - last_n : 0;
    for (int i = from; i < job->n_prompt; i++) kvs_sampler_accept_prompt(s->sampler, job->prompt[i]);
    s->state = SRV_SLOT_PREFILL;
    const int echo = srv_job_echo_logprobs(job) ? echo_start(job, env) : 0;
    if (echo) {
        fail_job_status(s, env, "echo", echo);
        return -1;
    }
    if (!job->segments && !srv_job_echo_logprobs(job)) {
        /* The longest cached prefix, now: a prompt cached up to its last
         * token then joins the next batched decode step as one more row. */
        int n_loaded = 0;
        if (job->req.cache_prompt && kvs_cache_load_prefix(s->ctx, env->cache, job->prompt, job->n_prompt - 1, &n_loaded)) {
            fail_job(s, env, "cache lookup");
            return -1;
        }
        s->n_kv = n_loaded;
        job->usage.cached_tokens = n_loaded; /* (its sources are added when the prefill ends: it may catch up) */
    }
    return 0;
}

/* --- text: stop strings are cut, never streamed, not even in part ------------------ */

/* The detokenizer's pieces hold no NUL (it gives U+FFFD: the replies are
 * built from C strings, and a NUL had cut the rest of the text off). */
static int gen_append(srv_slot *s, const char *p, size_t n) {
    if (s->gen_len + n + 1 > s->gen_cap) {
        size_t cap = (s->gen_len + n + 1) * 2;
        char *g = realloc(s->gen, cap);
        if (!g) return -1;
        s->gen = g;
        s->gen_cap = cap;
    }
    if (n) memcpy(s->gen + s->gen_len, p, n); /* an empty piece may come with p == NULL */
    s->gen_len += n;
    s->gen[s->gen_len] = 0;
    return 0;
}

/* Start of the first stop string in the unemitted text, or -1. Text before
 * `emitted` cannot hold the start of one: see keep_back. */
static long first_stop(const srv_slot *s) {
    const srv_request *r = &s->job->req;
    long best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(s->gen + s->emitted, s->gen_len - s->emitted, r->stop[i], strlen(r->stop[i]));
        if (hit && (best < 0 || hit - s->gen < best)) best = hit - s->gen;
    }
    return best;
}

/* Bytes at the end that could still grow into a stop string: held back. */
static size_t keep_back(const srv_slot *s) {
    const srv_request *r = &s->job->req;
    size_t keep = 0, avail = s->gen_len - s->emitted;
    for (int i = 0; i < r->n_stop; i++) {
        size_t k = strlen(r->stop[i]) - 1;
        if (k > avail) k = avail;
        for (; k > keep; k--)
            if (!memcmp(s->gen + s->gen_len - k, r->stop[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* Emits the text up to upto, with the log-probabilities of the tokens
 * whose text starts before it (a token that completes no character yet
 * starts where the next bytes will: it goes with them). Those of tokens
 * cut with a stop string are never emitted. */
static void emit_upto(srv_slot *s, size_t upto) {
    if (upto <= s->emitted) return;
    int n = 0;
    while (n < s->n_lp && s->lp[n].offset < upto) n++;
    srv_job_emit(s->job, s->gen + s->emitted, upto - s->emitted, s->lp, n);
    if (n > 0) { /* (no logprobs asked: s->lp is NULL) */
        memmove(s->lp, s->lp + n, (size_t)(s->n_lp - n) * sizeof *s->lp);
        s->n_lp -= n;
    }
    s->emitted = upto;
}

/* Requests with logprobs: the sampled token's, kept until its text goes
 * out. 0; 1 out of memory; -1 kvs_logprobs failed (kvs_last_error). */
static int note_logprob(srv_slot *s, const srv_env *env, const float *logits, int32_t tok) {
    if (s->n_lp == s->cap_lp) {
        int cap = s->cap_lp ? 2 * s->cap_lp : 16;
        srv_logprob *t = realloc(s->lp, (size_t)cap * sizeof *t);
        if (!t) return 1;
        s->lp = t;
        s->cap_lp = cap;
    }
    srv_logprob *e = &s->lp[s->n_lp];
    e->token = tok;
    e->offset = s->gen_len;
    e->n_top = s->job->req.top_logprobs < env->n_vocab ? s->job->req.top_logprobs : env->n_vocab;
    if (kvs_logprobs(logits, env->n_vocab, tok, &e->logprob, e->n_top, e->top_ids, e->top_logprobs)) return -1;
    s->n_lp++;
    return 0;
}

/* The logits the sampler sees: with logit_bias, a copy with the biases
 * added (OpenAI's order: before every sampling step); NULL without memory. */
static const float *biased_logits(srv_slot *s, const srv_env *env, const float *logits) {
    const srv_request *r = &s->job->req;
    if (r->n_bias == 0) return logits;
    if (!s->biased && !(s->biased = malloc((size_t)env->n_vocab * sizeof *s->biased))) return NULL;
    memcpy(s->biased, logits, (size_t)env->n_vocab * sizeof *s->biased);
    for (int i = 0; i < r->n_bias; i++) s->biased[r->bias_ids[i]] += r->bias_values[i];
    return s->biased;
}

/* Samples the next token from logits; emits its text or finishes. */
static void sample_next(srv_slot *s, const srv_env *env, const float *logits) {
    srv_job *j = s->job;
    const float *l = biased_logits(s, env, logits);
    if (!l) return fail_job_nomem(s, env, "logit_bias");
    int32_t tok = kvs_sampler_sample(s->sampler, l);
    kvs_sampler_accept(s->sampler, tok);
    if (s->n_gen == 0) s->t_first = srv_now_ms();
    s->hist[s->n_hist++] = tok;
    s->n_gen++;
    srv_metrics_token(env->metrics);
    if (kvs_token_is_eog(env->model, tok)) return srv_slot_finish(s, env, SRV_FINISH_STOP);
    const int noted = j->req.logprobs ? note_logprob(s, env, logits, tok) : 0;
    if (noted) return fail_job_status(s, env, "logprobs", noted);
    char piece[256];
    size_t n = 0;
    if (kvs_detok_push(s->detok, tok, piece, sizeof piece, &n)) return fail_job(s, env, "detokenize");
    if (gen_append(s, piece, n)) return fail_job_nomem(s, env, "detokenize");
    long cut = first_stop(s);
    if (cut >= 0) {
        emit_upto(s, (size_t)cut);
        s->stop_cut = 1;
        s->gen_len = (size_t)cut;
        s->gen[cut] = 0;
        s->emitted = s->gen_len;
        return srv_slot_finish(s, env, SRV_FINISH_STOP);
    }
    emit_upto(s, s->gen_len - keep_back(s));
    /* the last token sampled is never decoded: hist holds n_ctx + 1, as
     * kvs_generate's n_ctx - n_prompt + 1 (one had been left out) */
    if (s->n_gen >= j->max_tokens || s->n_hist > env->n_ctx) return srv_slot_finish(s, env, SRV_FINISH_LENGTH);
    s->state = SRV_SLOT_DECODE;
}

static void first_token(srv_slot *s, const srv_env *env, const float *logits) {
    kvs_sha256_hex(logits, (size_t)env->n_vocab * sizeof(float), s->job->usage.first_logits_sha256);
    s->job->usage.prefill_ms = srv_now_ms() - s->t_start;
    if (s->job->max_tokens == 0) return srv_slot_finish(s, env, SRV_FINISH_LENGTH); /* echo alone */
    sample_next(s, env, logits);
}

static void add_source(srv_job *j, srv_source src, int n) {
    if (n <= 0 || j->n_sources >= (int)(sizeof j->sources / sizeof j->sources[0])) return;
    j->sources[j->n_sources].src = src;
    j->sources[j->n_sources++].n = n;
}

/* The runs cut back to the prompt's first n tokens (a catch-up's short
 * load: what follows is computed again), cached_tokens with them. */
static void truncate_sources(srv_slot *s, int n) {
    srv_job *j = s->job;
    if (!s->src_at) {
        if (j->usage.cached_tokens > n) j->usage.cached_tokens = n;
        return;
    }
    int at = 0, cached = 0, k = 0;
    for (; k < j->n_sources && at < n; k++) {
        if (at + j->sources[k].n > n) j->sources[k].n = n - at;
        at += j->sources[k].n;
        if (j->sources[k].src == SRV_SRC_CACHED) cached += j->sources[k].n;
    }
    j->n_sources = k;
    j->usage.cached_tokens = cached;
    s->src_at = at;
}

static void prefill_segments(srv_slot *s, const srv_env *env) {
    srv_job *j = s->job;
    if (j->warm_only && s->docs_ready) { /* computed a slice a step (warm_docs_step) */
        j->usage.docs_hit = s->docs_cached;
        j->usage.docs_computed = s->docs_computed;
        return srv_slot_finish(s, env, SRV_FINISH_STOP);
    }
    if (j->warm_only) { /* baking, or a document too long (this call names it) */
        kvs_warm_docs_report rep;
        int k = j->req.bake_neighbours;
        int st = k ? kvs_bake_docs(s->ctx, env->cache, &j->seg, k, &rep) : kvs_warm_docs(s->ctx, env->cache, &j->seg, &rep);
        if (st == KVS_ERR_CONTEXT_FULL) return fail_job_too_long(s, env, rep.too_long_doc);
        if (st) return fail_job(s, env, "warm documents");
        j->usage.docs_hit = rep.n_cached;
        j->usage.docs_computed = rep.n_computed;
        j->usage.docs_baked = rep.n_baked;
        return srv_slot_finish(s, env, SRV_FINISH_STOP);
    }
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1; /* the prompt only: decode runs batched, sampled here */
    gp.sampling.temperature = 0;
    kvs_generate_result r;
    kvs_reuse_params rp = kvs_reuse_default_params();
    rp.repair = j->repair;
    rp.use_baked = j->req.use_baked;
    rp.recal = (kvs_recal_params){j->req.recal_temperature, j->req.recal_scale};
    if (!j->req.cache_prompt) { /* no lookup, no store: a cold run (segments: every token computed) */
        rp.mode = KVS_REUSE_NONE;
        rp.store = 0;
    }
    if (kvs_generate_segments(s->ctx, env->cache, &j->seg, &gp, &rp, &r)) return fail_job(s, env, "documents");
    if (r.n_prompt != j->n_prompt || !r.first_logits || !r.reuse || !r.docs) {
        kvs_generate_result_free(&r);
        return fail_job_because(s, env, "documents", "the prompt's layout changed");
    }
    const int n_moved = r.docs->n_moved, n_recomputed = r.docs->n_recomputed;
    /* The exact prefix the warmer computed in earlier steps is a cache hit
     * here: this request computed it. */
    const int n_warmed = s->exact_computed < r.reuse->n_cached ? s->exact_computed : r.reuse->n_cached;
    const int n_cached = r.reuse->n_cached - n_warmed;
    j->usage.cached_tokens = n_cached;
    j->usage.moved_tokens = n_moved;
    j->usage.recomputed_tokens = n_recomputed;
    /* Documents the warmer computed are hits here (unless evicted since:
     * then computed twice, counted once). */
    const int n_docs = r.docs->n_docs_hit + r.docs->n_docs_computed;
    int computed = r.docs->n_docs_computed + s->docs_computed;
    if (computed > n_docs) computed = n_docs;
    j->usage.docs_hit = n_docs - computed;
    j->usage.docs_computed = computed;
    j->usage.docs_baked = r.docs->n_docs_baked;
    /* Runs in prompt order: the exact prefix, the documents' region (moved
     * tokens, of which the repair recomputed some), then the rest. */
    add_source(j, SRV_SRC_CACHED, n_cached);
    add_source(j, SRV_SRC_COMPUTED, n_warmed);
    add_source(j, SRV_SRC_MOVED, n_moved - n_recomputed);
    add_source(j, SRV_SRC_RECOMPUTED, n_recomputed);
    add_source(j, SRV_SRC_COMPUTED, j->n_prompt - r.reuse->n_cached - n_moved);
    s->n_kv = j->n_prompt;
    first_token(s, env, r.first_logits);
    kvs_generate_result_free(&r);
}

/* The uncached prompt before the documents, then the documents not in the
 * cache, are computed a prefill chunk at a time, between the other slots'
 * decode steps (a cold document set is seconds of work; in one step it held
 * every stream up). Returns 1 while there is
 * more to do (or the job failed), 0 when the documents are ready. `full`
 * reads no document: nothing to warm. A documents-only warm is computed
 * so too (it had run whole in one step); one that bakes runs in one step
 * (kvs_bake_docs), stopped between documents if its client goes away
 * (srv_slot_should_stop). */
static int warm_docs_step(srv_slot *s, const srv_env *env) {
    srv_job *j = s->job;
    /* cache_prompt false: nothing is stored, and the warmer stores what it
     * computes (it had written the documents anyway): they are computed in
     * the assembly's one step instead */
    if (s->docs_ready || (j->warm_only && j->req.bake_neighbours) ||
        (!j->warm_only && (j->repair.mode == KVS_REPAIR_FULL || !j->req.cache_prompt)))
        return 0;
    int first = !s->warmer, done = 0;
    int st = first ? kvs_docs_warmer_new(s->ctx, env->cache, &j->seg, j->req.use_baked && !j->warm_only, &s->warmer)
                   : KVS_OK;
    if (st) {
        if (j->warm_only && st == KVS_ERR_CONTEXT_FULL) return 0; /* prefill_segments names the document */
        fail_job(s, env, "documents");
        return 1;
    }
    if (kvs_docs_warmer_step(s->warmer, env->prefill_chunk, &done)) {
        fail_job(s, env, "documents");
        return 1;
    }
    if (!done) return 1;
    kvs_warm_docs_report rep;
    kvs_docs_warmer_report(s->warmer, &rep);
    s->docs_computed = rep.n_computed;
    s->docs_cached = rep.n_cached;
    s->exact_computed = kvs_docs_warmer_exact_computed(s->warmer); /* the first document too, where the
                                                                     * request serves it exactly */
    kvs_docs_warmer_free(s->warmer);
    s->warmer = NULL;
    s->docs_ready = 1;
    /* All cached at the first look: the assembly runs now; after computing,
     * in the next step. */
    return !first || rep.n_computed > 0 || rep.n_prefix_computed > 0;
}

/* The next m prompt tokens with every position's logits, for the echoed
 * prompt's logprobs, ECHO_ROWS at a time (the kernels are batch-invariant:
 * the same bits as one call); the last one's into logits (NULL: none).
 * 0; 1 out of memory; else the library's failure (kvs_last_error). */
#define ECHO_ROWS 128
static int echo_prefill(srv_slot *s, const srv_env *env, int m, float *logits) {
    srv_job *j = s->job;
    float *rows = malloc((size_t)ECHO_ROWS * env->n_vocab * sizeof *rows);
    if (!rows) return 1;
    int st = KVS_OK;
    for (int a = 0; st == KVS_OK && a < m; a += ECHO_ROWS) {
        const int k = m - a < ECHO_ROWS ? m - a : ECHO_ROWS, p0 = s->n_kv + a;
        st = kvs_decode_logits(s->ctx, j->prompt + p0, env->pos + p0, k, rows, k);
        for (int r = 0; st == KVS_OK && r < k; r++) st = echo_note(j, env, p0 + r, rows + (size_t)r * env->n_vocab);
        if (st == KVS_OK && logits && a + k == m)
            memcpy(logits, rows + (size_t)(k - 1) * env->n_vocab, (size_t)env->n_vocab * sizeof *logits);
    }
    free(rows);
    return st;
}

void srv_slot_prefill_step(srv_slot *s, const srv_env *env) {
    srv_job *j = s->job;
    j->usage.prefill_steps++;
    if (j->segments) {
        if (warm_docs_step(s, env)) return;
        return prefill_segments(s, env);
    }
    int m = j->n_prompt - s->n_kv;
    if (m > env->prefill_chunk) m = env->prefill_chunk;
    int last = s->n_kv + m == j->n_prompt;
    float *logits = last ? malloc((size_t)env->n_vocab * sizeof *logits) : NULL;
    if (last && !logits) return fail_job_nomem(s, env, "prefill");
    const int st = srv_job_echo_logprobs(j) ? echo_prefill(s, env, m, logits)
                                            : kvs_decode(s->ctx, j->prompt + s->n_kv, env->pos + s->n_kv, m, logits);
    if (st) {
        free(logits);
        return fail_job_status(s, env, "prefill", st);
    }
    s->n_kv += m;
    store_progress(s, env);
    if (last) srv_slot_prefill_done(s, env, logits);
    free(logits);
}

static int uses_cache(const srv_slot *s) { return s->job && !s->job->segments && s->job->req.cache_prompt; }

/* The first failed cache-dir write is said on stderr, once per process
 * (a full or read-only directory had been silent: /metrics and
 * /v1/cache/stats only, where `generate` warns). Every failure counts in
 * kvstitch_cache_disk_write_errors_total. */
static void warn_write_errors(const srv_env *env) {
    static atomic_int said;
    if (atomic_load_explicit(&said, memory_order_relaxed)) return;
    kvs_cache_stats st;
    kvs_cache_get_stats(env->cache, &st);
    if (st.disk_write_errors && !atomic_exchange(&said, 1))
        fprintf(stderr,
                "kvstitch serve: warning: %llu chunks could not be written to the cache dir (full, read-only, "
                "or past its bound): kept in memory only; said once, counted in "
                "kvstitch_cache_disk_write_errors_total\n",
                (unsigned long long)st.disk_write_errors);
}

/* Tokens of n in whole chunks of the cache's grid. */
static int whole_chunks(int n, const srv_env *env) { return n / env->chunk_tokens * env->chunk_tokens; }

/* The whole chunks computed so far, stored now for prompts that follow
 * (srv_slot_waits_for); the end of the prefill stores the rest. */
static void store_progress(srv_slot *s, const srv_env *env) {
    int n = whole_chunks(s->n_kv, env), n_new = 0;
    if (!uses_cache(s) || n <= s->n_stored) return;
    if (kvs_cache_store_context(s->ctx, env->cache, s->job->prompt, n, &n_new) == KVS_OK) s->n_stored = n;
    warn_write_errors(env);
    s->job->usage.chunks_stored += n_new;
}

/* A documents prompt whose uncached documents the warmer computes a slice
 * per step (warm_docs_step), and stores one by one. */
static int warms_docs(const srv_slot *s) {
    const srv_job *j = s->job;
    return j && j->segments && j->req.cache_prompt && !j->warm_only && j->repair.mode != KVS_REPAIR_FULL &&
           !s->docs_ready;
}

/* Documents: f waits while l, ahead of it (warming already, or as far and
 * l_first), warms a document f has too; f's warmer then finds it cached. */
static int waits_for_docs(const srv_slot *f, const srv_slot *l, int l_first) {
    if (!warms_docs(f) || !warms_docs(l)) return 0;
    const int l_warming = l->warmer != NULL, f_warming = f->warmer != NULL;
    if (l_warming != f_warming ? !l_warming : !l_first) return 0; /* l is not ahead */
    const srv_request *a = &f->job->req, *b = &l->job->req;
    for (int i = 0; i < a->n_docs; i++)
        for (int k = 0; k < b->n_docs; k++)
            if (*a->docs[i] && !strcmp(a->docs[i], b->docs[k])) return 1;
    return 0;
}

int srv_slot_waits_for(const srv_slot *f, const srv_slot *l, int l_first, const srv_env *env) {
    if (f == l || f->state != SRV_SLOT_PREFILL || l->state != SRV_SLOT_PREFILL) return 0;
    if (waits_for_docs(f, l, l_first)) return 1;
    if (!uses_cache(f) || !uses_cache(l) || srv_job_echo_logprobs(f->job)) return 0; /* (f computes its prompt whole) */
    if (l->n_kv < f->n_kv || (l->n_kv == f->n_kv && !l_first)) return 0;
    /* f keeps its last prompt token for the logits, as at its start */
    const int32_t *a = f->job->prompt, *b = l->job->prompt;
    int n = f->job->n_prompt - 1 < l->job->n_prompt ? f->job->n_prompt - 1 : l->job->n_prompt, c = 0;
    while (c < n && a[c] == b[c]) c++;
    return whole_chunks(c, env) - f->n_kv >= env->chunk_tokens;
}

void srv_slot_catch_up(srv_slot *s, const srv_env *env) {
    srv_job *j = s->job;
    int hit = 0, n_loaded = 0;
    if (!uses_cache(s) || srv_job_echo_logprobs(j) || j->n_prompt - 1 <= s->n_kv) return;
    if (kvs_cache_peek_prefix(env->cache, j->prompt, j->n_prompt - 1, &hit) || hit <= s->n_kv) return;
    if (kvs_cache_load_prefix(s->ctx, env->cache, j->prompt, j->n_prompt - 1, &n_loaded)) {
        fail_job(s, env, "cache lookup");
        return;
    }
    if (n_loaded > s->n_kv) {
        /* Runs so far: cached at the start, computed by this slot (and
         * stored: the load brought those back too, not counted again), then
         * what other requests stored meanwhile. cached_tokens had become the
         * whole load, this slot's own tokens included (1408 of a prompt
         * whose head it had computed). */
        if (!s->src_at) {
            add_source(j, SRV_SRC_CACHED, j->usage.cached_tokens);
            s->src_at = j->usage.cached_tokens;
        }
        add_source(j, SRV_SRC_COMPUTED, s->n_kv - s->src_at);
        add_source(j, SRV_SRC_CACHED, n_loaded - s->n_kv);
        j->usage.cached_tokens += n_loaded - s->n_kv;
        s->src_at = s->n_kv = n_loaded;
    } else if (n_loaded < s->n_kv) {
        /* Evicted or damaged meanwhile: the load may have ended on a read
         * that wrote past n_loaded before its checksum failed, so what the
         * slot held there is computed again (it had been kept, and decoded
         * on and stored as exact KV). */
        s->n_kv = n_loaded;
        truncate_sources(s, n_loaded);
    }
}

int srv_slot_prefill_left(const srv_slot *s) {
    return s->state != SRV_SLOT_PREFILL ? 0 : s->job->segments ? s->job->n_prompt : s->job->n_prompt - s->n_kv;
}

void srv_slot_prefill_done(srv_slot *s, const srv_env *env, const float *logits) {
    srv_job *j = s->job;
    s->n_kv = j->n_prompt;
    if (!s->src_at) add_source(j, SRV_SRC_CACHED, j->usage.cached_tokens);
    add_source(j, SRV_SRC_COMPUTED, j->n_prompt - (s->src_at ? s->src_at : j->usage.cached_tokens));
    /* Stored now, so that requests arriving meanwhile share it. */
    int n_new = 0;
    if (j->req.cache_prompt) kvs_cache_store_context(s->ctx, env->cache, j->prompt, j->n_prompt, &n_new);
    if (j->req.cache_prompt) warn_write_errors(env);
    j->usage.chunks_stored += n_new;
    if (j->warm_only) srv_slot_finish(s, env, SRV_FINISH_STOP);
    else first_token(s, env, logits);
}

void srv_slot_take_logits(srv_slot *s, const srv_env *env, const float *logits) {
    s->n_kv = s->n_hist;
    sample_next(s, env, logits);
}

void srv_slot_finish(srv_slot *s, const srv_env *env, srv_finish why) {
    srv_job *j = s->job;
    if (!j) return;
    if (why == SRV_FINISH_LENGTH || (why == SRV_FINISH_STOP && s->emitted < s->gen_len)) {
        /* Held-back bytes: an unfinished UTF-8 sequence, or a suffix that
         * never completed a stop string. */
        char piece[64];
        size_t n = 0;
        if (!kvs_detok_flush(s->detok, piece, sizeof piece, &n)) gen_append(s, piece, n);
        long cut = first_stop(s);
        emit_upto(s, cut >= 0 ? (size_t)cut : s->gen_len);
        s->stop_cut |= cut >= 0;
    }
    /* Tokens with no text (a control token a logit_bias forced) at the
     * end: their entries go out with no text (they had been lost); those
     * of a stop string's cut tokens never do. */
    if ((why == SRV_FINISH_LENGTH || why == SRV_FINISH_STOP) && !s->stop_cut && s->n_lp > 0) {
        srv_job_emit(j, "", 0, s->lp, s->n_lp);
        s->n_lp = 0;
    }
    /* Multi-turn: the KV of the generated tokens is kept too (exact path
     * only: a documents prompt holds moved, approximate KV). */
    if (!j->segments && j->req.cache_prompt && why != SRV_FINISH_ERROR && s->n_kv > j->n_prompt) {
        int n_new = 0;
        kvs_cache_store_context(s->ctx, env->cache, s->hist, s->n_kv, &n_new);
        warn_write_errors(env);
        j->usage.chunks_stored += n_new;
    }
    double t = srv_now_ms();
    srv_usage *u = &j->usage;
    u->completion_tokens = s->n_gen;
    if (s->n_gen > 0 && (j->gen_tokens = malloc((size_t)s->n_gen * sizeof *j->gen_tokens)))
        memcpy(j->gen_tokens, s->hist + j->n_prompt, (size_t)s->n_gen * sizeof *j->gen_tokens);
    /* A prompt stopped before its first token (cancelled, failed) counts
     * what its prefill ran: the chunks up to n_kv (a documents prompt's
     * warm slices are not counted: an undercount, never a whole prompt it
     * did not compute). */
    const int whole = u->prompt_tokens - u->cached_tokens - u->moved_tokens;
    const int stopped = s->t_first <= 0 && (why == SRV_FINISH_CANCELLED || why == SRV_FINISH_ERROR);
    const int ran = !stopped ? whole : (!j->segments ? s->n_kv - u->cached_tokens : 0);
    u->computed_tokens = ran > 0 ? ran : 0;
    u->ttft_ms = s->t_first > 0 ? s->t_first - j->t_submit : 0;
    u->decode_ms = s->t_first > 0 ? t - s->t_first : 0;
    u->total_ms = t - j->t_submit;
    kvs_sampler_free(s->sampler);
    kvs_detok_free(s->detok);
    kvs_docs_warmer_free(s->warmer); /* cancelled while computing documents */
    s->sampler = NULL;
    s->detok = NULL;
    s->warmer = NULL;
    s->job = NULL;
    s->state = SRV_SLOT_FREE;
    srv_metrics_job(env->metrics, j, why);
    if (why == SRV_FINISH_ERROR) {
        srv_error e = j->err;
        srv_job_fail(j, &e);
    } else {
        srv_job_finish(j, why);
    }
    srv_job_unref(j);
}
