/* srv_job: tokenize a request, and the text channel between the scheduler
 * and the HTTP thread (job.h). */
#include "job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int tokenize(const kvs_model *model, const char *text, int32_t **out, int *n, srv_error *err) {
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    int flags = KVS_TOKENIZE_PARSE_SPECIAL | (info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0);
    size_t len = strlen(text);
    int cap = (int)(len < 1u << 28 ? len : 1u << 28) + 8;
    *out = malloc((size_t)cap * sizeof **out);
    if (!*out) {
        srv_error_set(err, 500, "server_error", "", "", "out of memory for %d tokens", cap);
        return -1;
    }
    int st = kvs_tokenize(model, text, len, flags, *out, cap, n);
    if (st) {
        srv_error_set(err, 400, "invalid_request_error", st == KVS_ERR_UTF8 ? "invalid_utf8" : "invalid_value",
                      "", "cannot tokenize the prompt: %s", kvs_last_error());
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* An empty text is valid. */
int srv_utf8_valid(const char *text, size_t n) { return kvs_utf8_check(text, n) == KVS_OK; }

/* 0 if text is valid UTF-8, else -1 with err naming param (a 400). */
static int check_utf8(const char *text, const char *param, srv_error *err) {
    if (!text || srv_utf8_valid(text, strlen(text))) return 0;
    srv_error_set(err, 400, "invalid_request_error", "invalid_utf8", param, "'%s': %s", param, kvs_last_error());
    return -1;
}

/* Every text of the request must be valid UTF-8, checked field by field so
 * the error names the one at fault (the rendered prompt's tokenizer had
 * named no field; a document's error said 'documents'). Stop strings too:
 * one holding a lone byte (a raw 0xa9) had cut a character of the output in
 * half and made the response's JSON invalid. */
static int check_texts(const srv_request *r, srv_error *err) {
    char param[48];
    for (int i = 0; i < r->n_msgs; i++) {
        snprintf(param, sizeof param, "messages[%d].content", i);
        if (check_utf8(r->msgs[i].content, param, err)) return -1;
    }
    snprintf(param, sizeof param, r->prompt_batch ? "prompt[%d]" : "prompt", r->prompt_index); /* (a batch's had been 'prompt') */
    if (check_utf8(r->prompt, param, err)) return -1;
    for (int i = 0; i < r->n_docs; i++) {
        snprintf(param, sizeof param, "documents[%d].text", i);
        if (check_utf8(r->docs[i], param, err)) return -1;
        snprintf(param, sizeof param, "documents[%d].id", i); /* echoed in replies and logs */
        if (r->doc_ids && check_utf8(r->doc_ids[i], param, err)) return -1;
    }
    for (int i = 0; i < r->n_stop; i++) {
        if (r->stop_at[i] < 0) snprintf(param, sizeof param, "stop");
        else snprintf(param, sizeof param, "stop[%d]", r->stop_at[i]);
        if (check_utf8(r->stop[i], param, err)) return -1;
    }
    return 0;
}

/* A prompt given as token ids: each the model's; they run as given (no
 * BOS added: the client's ids are the sequence). Their text, for echo, is
 * what the detokenizer gives, control tokens spelled out. */
static int take_ids(const kvs_model *model, srv_request *r, srv_job *j, srv_error *err) {
    const int n_vocab = kvs_vocab_size(model);
    for (int i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= n_vocab) {
            char param[48];
            if (r->n_prompts > 1) snprintf(param, sizeof param, "prompt[%d][%d]", r->prompt_index, i); /* a batch's */
            else snprintf(param, sizeof param, "prompt[%d]", i);
            srv_error_set(err, 400, "invalid_request_error", "invalid_value", param,
                          "'%s' is token %d, but the model's vocabulary has %d (0..%d)", param, (int)r->prompt_ids[i],
                          n_vocab, n_vocab - 1);
            return -1;
        }
    size_t cap = 16 * (size_t)r->n_prompt_ids + 1, len = 0;
    kvs_detok *d = NULL;
    if (!(j->prompt = malloc(((size_t)r->n_prompt_ids + 1) * sizeof *j->prompt)) || !(r->prompt = malloc(cap)) ||
        kvs_detok_new(model, 1, &d)) { /* control tokens as their text, as echo's offsets count them */
        kvs_detok_free(d);
        srv_error_set(err, 500, "server_error", "", "", "out of memory for a prompt of %d token ids", r->n_prompt_ids);
        return -1;
    }
    memcpy(j->prompt, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *j->prompt);
    j->n_prompt = r->n_prompt_ids;
    for (int i = 0; i <= r->n_prompt_ids; i++) {
        char piece[256];
        size_t n = 0;
        int st = i < r->n_prompt_ids ? kvs_detok_push(d, r->prompt_ids[i], piece, sizeof piece, &n)
                                     : kvs_detok_flush(d, piece, sizeof piece, &n);
        if (st != KVS_OK) n = 0;
        if (len + n + 1 > cap) {
            char *g = realloc(r->prompt, 2 * (len + n + 1));
            if (!g) break;
            r->prompt = g;
            cap = 2 * (len + n + 1);
        }
        memcpy(r->prompt + len, piece, n);
        len += n;
    }
    r->prompt[len] = 0; /* (len + 1 <= cap: checked before each piece) */
    kvs_detok_free(d);
    return 0;
}

static int build_prompt(const kvs_model *model, srv_job *j, srv_error *err) {
    srv_request *r = &j->req;
    if (r->n_docs > 0) {
        const char *system, *question;
        if (srv_request_doc_layout(r, &system, &question, err)) return -1;
        j->segments = 1;
        j->seg.chat = r->kind == SRV_KIND_CHAT;
        j->seg.system = system;
        j->seg.docs = (const char *const *)r->docs;
        j->seg.n_docs = r->n_docs;
        j->seg.question = question;
        if (kvs_segments_tokenize(model, &j->seg, &j->prompt, &j->n_prompt)) {
            srv_error_set(err, 400, "invalid_request_error", "invalid_value", "documents",
                          "cannot lay out the documents: %s", kvs_last_error());
            return -1;
        }
        return 0;
    }
    if (r->prompt_ids) return take_ids(model, r, j, err);
    if (r->kind == SRV_KIND_COMPLETION) return tokenize(model, r->prompt, &j->prompt, &j->n_prompt, err);
    char *rendered = NULL;
    if (kvs_chat_render(model, NULL, r->msgs, r->n_msgs, 1, &rendered)) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "messages",
                      "cannot render the chat template: %s", kvs_last_error());
        return -1;
    }
    int st = tokenize(model, rendered, &j->prompt, &j->n_prompt, err);
    free(rendered);
    return st;
}

/* The tokens of a documents request's layout without its documents (the
 * system part and the question): which of the two overflows names the
 * field a context_length_exceeded error blames. -1 where that layout
 * cannot be tokenized (the documents are then blamed, as before). */
static int tokens_without_docs(const kvs_model *model, const srv_job *j) {
    kvs_segments seg = j->seg;
    seg.n_docs = 0;
    seg.docs = NULL;
    seg.doc_lens = NULL;
    int32_t *toks = NULL;
    int n = 0;
    if (kvs_segments_tokenize(model, &seg, &toks, &n) != KVS_OK) n = -1;
    kvs_free(toks);
    return n;
}

/* logit_bias ids must be the model's. */
static int check_bias(const kvs_model *model, const srv_request *r, srv_error *err) {
    int n_vocab = kvs_vocab_size(model);
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= n_vocab) {
            srv_error_set(err, 400, "invalid_request_error", "invalid_value", "logit_bias",
                          "'logit_bias' names token %d, but the model's vocabulary has %d (0..%d)", (int)r->bias_ids[i],
                          n_vocab, n_vocab - 1);
            return -1;
        }
    return 0;
}

/* The request's sampling and repair fields over the library's defaults. */
static int resolve_params(srv_job *j, srv_error *err) {
    const srv_request *r = &j->req;
    j->sampling = kvs_sampler_default_params();
    j->sampling.temperature = r->temperature;
    j->sampling.top_p = r->top_p;
    j->sampling.min_p = r->min_p;
    j->sampling.top_k = r->top_k;
    j->sampling.seed = r->seed;
    j->sampling.repeat_penalty = 1.0f;
    j->sampling.presence_penalty = r->presence_penalty;
    j->sampling.frequency_penalty = r->frequency_penalty;
    j->repair = kvs_repair_default_params();
    if (r->strategy && kvs_repair_mode_parse(r->strategy, &j->repair.mode)) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "reuse.strategy", "'reuse.strategy': %s",
                      kvs_last_error());
        return -1;
    }
    if (r->recompute_ratio >= 0) j->repair.recompute_ratio = r->recompute_ratio;
    if (r->overlap >= 0) j->repair.overlap = r->overlap;
    if (r->first_k >= 0) j->repair.first_k = r->first_k;
    return 0;
}

/* A job with its own state (output channel, id, clock, one reference) and
 * no input yet; NULL with err set when out of memory. */
static srv_job *job_alloc(srv_kind kind, srv_error *err) {
    srv_job *j = calloc(1, sizeof *j);
    char *text = calloc(1, 256);
    if (!j || !text) {
        free(j);
        free(text);
        srv_error_set(err, 500, "server_error", "", "", "out of memory");
        return NULL;
    }
    j->text = text;
    j->cap = 256;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancelled, 0);
    j->t_submit = srv_now_ms();
    j->created = (long)time(NULL);
    static atomic_ulong counter;
    snprintf(j->id, sizeof j->id, "%s-%lx%06lx", kind == SRV_KIND_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)j->created, atomic_fetch_add(&counter, 1) & 0xffffff);
    return j;
}

srv_job *srv_job_new(const kvs_model *model, srv_request *req, int n_ctx, int default_max_tokens, srv_error *err) {
    srv_job *j = job_alloc(req->kind, err);
    if (!j) {
        srv_request_free(req); /* (taken whatever happens: it had been left to leak) */
        return NULL;
    }
    j->req = *req; /* takes ownership */
    memset(req, 0, sizeof *req);
    if (resolve_params(j, err) || check_texts(&j->req, err) || check_bias(model, &j->req, err) ||
        build_prompt(model, j, err))
        goto fail;
    if (j->n_prompt == 0) {
        srv_error_set(err, 400, "invalid_request_error", "invalid_value", "prompt", "the prompt has no tokens");
        goto fail;
    }
    /* A documents-only warm computes each document after the prefix on its
     * own (kvs_warm_docs): each must fit, not all together, and the warm
     * names the one that does not (srv_slot: context_length_exceeded). */
    /* (a warm generates nothing: its prompt may fill the context, which had
     * been refused as "at least one token must be generated") */
    /* (nor does an echo with max_tokens 0: it only scores the prompt) */
    const int generates = !j->req.warm && j->req.max_tokens >= 0;
    if (j->n_prompt >= n_ctx + !generates && !j->req.docs_only) {
        /* documents in the prompt are named as what overflows with it (a
         * short message with long documents had named 'messages') */
        char docs[96] = "";
        const int rest = j->req.n_docs ? tokens_without_docs(model, j) : j->n_prompt;
        const int docs_overflow = j->req.n_docs && rest < n_ctx + !generates; /* (rest -1: as before) */
        if (docs_overflow)
            snprintf(docs, sizeof docs, " with its %d document%s", j->req.n_docs, j->req.n_docs > 1 ? "s" : "");
        else if (j->req.n_docs) /* the rest overflows without them: it is what the client must shorten */
            snprintf(docs, sizeof docs, " without its %d document%s has %d tokens; with them it", j->req.n_docs,
                     j->req.n_docs > 1 ? "s" : "", rest);
        srv_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                      docs_overflow ? "documents" : j->req.kind == SRV_KIND_CHAT ? "messages" : "prompt",
                      "this model's context holds %d tokens, but the prompt%s has %d%s", n_ctx, docs, j->n_prompt,
                      generates ? " (and at least one token must be generated)" : "");
        goto fail;
    }
    /* The last token sampled is never decoded: n_ctx - n_prompt + 1 fit. */
    int room = j->n_prompt < n_ctx ? n_ctx - j->n_prompt + 1 : 1;
    j->max_tokens = j->req.max_tokens > 0 ? j->req.max_tokens : j->req.max_tokens < 0 ? 0 : default_max_tokens;
    if (j->max_tokens > room) j->max_tokens = room;
    return j;
fail:
    srv_job_unref(j);
    return NULL;
}

/* The n choices of a request had each parsed the body again (and
 * tokenized and checked the prompt again): only the seed differs. */
srv_job *srv_job_new_choice(srv_job *first, int i, srv_error *err) {
    srv_job *j = job_alloc(first->req.kind, err);
    if (!j) return NULL;
    atomic_fetch_add(&first->refs, 1);
    j->req_owner = first;
    j->req = first->req;
    j->req.seed += (uint64_t)i;
    j->req.choice_of_prompt = i;
    j->prompt = first->prompt;
    j->n_prompt = first->n_prompt;
    j->max_tokens = first->max_tokens;
    j->sampling = first->sampling;
    j->sampling.seed = j->req.seed;
    j->repair = first->repair;
    j->segments = first->segments;
    j->seg = first->seg;
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    if (j->req_owner) {
        srv_job_unref(j->req_owner);
    } else {
        srv_request_free(&j->req);
        free(j->prompt);
    }
    free(j->seg_ends);
    free(j->gen_tokens);
    free(j->text);
    free(j->lp);
    free(j->prompt_lp);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_cancel(srv_job *j) { atomic_store(&j->cancelled, 1); }

int srv_job_echo_logprobs(const srv_job *j) {
    /* A reply or a stream takes a prompt's entries from its first choice
     * for every choice: the others run their prompt as any prompt, from the
     * cache (each had computed every position's logits: n = 16 took 16
     * times the work). A stream holds a choice's echo back until the
     * first's entries are computed (complete.c's sse_take). */
    return j->req.echo && j->req.logprobs && !j->segments && !j->req.warm /* (a warm echoes nothing) */ &&
           j->req.choice_of_prompt == 0;
}

/* Grows *buf (of *cap elements of size elem) to hold need; 0 or -1. */
static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap * 2 > need ? *cap * 2 : need;
    void *t = realloc(*buf, c * elem);
    if (!t) return -1;
    *buf = t;
    *cap = c;
    return 0;
}

void srv_job_emit(srv_job *j, const char *s, size_t n, const srv_logprob *lp, int n_lp) {
    if (n == 0 && n_lp == 0) return;
    pthread_mutex_lock(&j->mu);
    void *text = j->text, *lps = j->lp;
    size_t cap_lp = (size_t)j->cap_lp;
    /* the text is cut if memory runs out; the finish reason still arrives */
    if (!grow(&text, &j->cap, j->len + n + 1, 1)) {
        j->text = text;
        memcpy(j->text + j->len, s, n);
        j->len += n;
        j->text[j->len] = 0;
        if (n_lp > 0 && !grow(&lps, &cap_lp, (size_t)j->n_lp + (size_t)n_lp, sizeof *lp)) {
            j->lp = lps;
            j->cap_lp = (int)cap_lp;
            memcpy(j->lp + j->n_lp, lp, (size_t)n_lp * sizeof *lp);
            j->n_lp += n_lp;
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_finish(srv_job *j, srv_finish why) {
    pthread_mutex_lock(&j->mu);
    j->finish = why;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(srv_job *j, const srv_error *err) {
    pthread_mutex_lock(&j->mu);
    j->err = *err;
    pthread_mutex_unlock(&j->mu);
    srv_job_finish(j, SRV_FINISH_ERROR);
}

int srv_job_wait(srv_job *j, srv_job_cursor *seen, srv_job_piece *out, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&j->mu);
    while (!j->done && j->len == seen->text)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT) break;
    if (j->len > seen->text && (out->text = malloc(j->len - seen->text + 1))) {
        out->n = j->len - seen->text;
        memcpy(out->text, j->text + seen->text, out->n);
        out->text[out->n] = 0;
        seen->text = j->len;
    }
    if (j->n_lp > seen->lp && (out->lp = malloc((size_t)(j->n_lp - seen->lp) * sizeof *out->lp))) {
        out->n_lp = j->n_lp - seen->lp;
        memcpy(out->lp, j->lp + seen->lp, (size_t)out->n_lp * sizeof *out->lp);
        seen->lp = j->n_lp;
    }
    int done = j->done && seen->text == j->len;
    pthread_mutex_unlock(&j->mu);
    return done;
}

void srv_job_piece_free(srv_job_piece *p) {
    free(p->text);
    free(p->lp);
    memset(p, 0, sizeof *p);
}

const char *srv_finish_name(srv_finish f) {
    switch (f) {
    case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_CANCELLED: return "cancelled";
    case SRV_FINISH_ERROR: return "error";
    default: return "none";
    }
}

const char *srv_source_name(srv_source s) {
    static const char *const names[] = {"cached", "moved", "recomputed", "computed"};
    return (unsigned)s < 4 ? names[s] : "?";
}
