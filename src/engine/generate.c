/*
 * kvs_generate: prefill the prompt, then sample / decode one token at a time,
 * streaming the completed text. Stop at an end-of-generation token, a stop
 * string, n_predict tokens, a full context, or when on_token asks.
 *
 * Streaming with stop strings: text that could still become the start of a
 * stop string is held back until it is decided, so a stop string is never
 * streamed, even partly. A stop string is cut from result.text too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "engine/sampler.h"

#define KVS_DETOK_BUF 65536

kvs_generate_params kvs_generate_default_params(void) {
    kvs_generate_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.sampling = kvs_sampler_default_params();
    return p;
}

const char *kvs_stop_reason_name(kvs_stop_reason reason) {
    static const char *const names[] = {"eos", "length", "stop", "context", "callback"};
    return (unsigned)reason < sizeof names / sizeof names[0] ? names[reason] : NULL;
}

void kvs_generate_result_free(kvs_generate_result *r) {
    if (!r) return;
    free(r->tokens);
    free(r->text);
    free(r->first_logits);
    free(r->top_ids);
    free(r->top_logprobs);
    if (r->reuse) free(r->reuse->chunk_ends);
    free(r->reuse);
    free(r->docs);
    memset(r, 0, sizeof *r);
}

typedef struct gen_text {
    char *s;
    size_t len, cap;
    size_t streamed; /* bytes already handed to on_token */
} gen_text;

static int text_append(gen_text *t, const char *p, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap * 2 > t->len + n + 1 ? t->cap * 2 : t->len + n + 1;
        char *s = realloc(t->s, cap);
        if (!s) return kvs_error(KVS_ERR_NOMEM, "generate: out of memory for the text");
        t->s = s;
        t->cap = cap;
    }
    memcpy(t->s + t->len, p, n);
    t->len += n;
    t->s[t->len] = 0;
    return KVS_OK;
}

/* Longest suffix of s[from..len) that is a proper prefix of a stop string. */
static size_t stop_holdback(const gen_text *t, const kvs_generate_params *p) {
    size_t best = 0, avail = t->len - t->streamed;
    for (int i = 0; i < p->n_stop; i++) {
        size_t sl = strlen(p->stop[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > best; k--)
            if (k <= avail && memcmp(t->s + t->len - k, p->stop[i], k) == 0) { best = k; break; }
    }
    return best;
}

/* Earliest start >= streamed of any stop string, or -1. */
static long stop_find(const gen_text *t, const kvs_generate_params *p) {
    long found = -1;
    for (int i = 0; i < p->n_stop; i++) {
        size_t sl = strlen(p->stop[i]);
        if (sl == 0) continue;
        const char *hit = memmem(t->s + t->streamed, t->len - t->streamed, p->stop[i], sl);
        if (hit && (found < 0 || hit - t->s < found)) found = hit - t->s;
    }
    return found;
}

/* Hands s[streamed..upto) to on_token. Returns nonzero if the callback asks to stop. */
static int stream(gen_text *t, size_t upto, int32_t token, const kvs_generate_params *p) {
    if (upto < t->streamed) upto = t->streamed;
    size_t n = upto - t->streamed;
    int stop = 0;
    if (p->on_token) {
        /* NUL-terminate the piece in place for the callback, then restore. */
        char saved = t->s[upto];
        t->s[upto] = 0;
        stop = p->on_token(p->user, token, t->s + t->streamed, n);
        t->s[upto] = saved;
    }
    t->streamed = upto;
    return stop;
}

/* result->top_* : the n_top best [id, log-softmax] of raw logits. */
static int top_logprobs(const float *logits, int n_vocab, int n_top, kvs_generate_result *r) {
    if (n_top > n_vocab) n_top = n_vocab;
    if (n_top <= 0) return KVS_OK;
    r->top_ids = malloc((size_t)n_top * sizeof *r->top_ids);
    r->top_logprobs = malloc((size_t)n_top * sizeof *r->top_logprobs);
    if (!r->top_ids || !r->top_logprobs) return kvs_error(KVS_ERR_NOMEM, "generate: out of memory");
    int st = kvs_logprobs(logits, n_vocab, -1, NULL, n_top, r->top_ids, r->top_logprobs);
    if (st == KVS_OK) r->n_top = n_top;
    return st;
}

typedef struct gen_state {
    kvs_sampler *sampler;
    kvs_detok *detok;
    int32_t *pos;
    char *piece;
    gen_text text;
} gen_state;

static int run(kvs_context *ctx, const int32_t *prompt, int n_prompt, int n_ready, const kvs_generate_params *p,
               kvs_generate_result *r, gen_state *g, double t0) {
    const double t_in = kvs_now_ms(); /* the caller's phases (lookup, assemble, repair) end here */
    const kvs_model *model = ctx->model;
    const int n_vocab = kvs_context_n_vocab(ctx), n_ctx = ctx->params.n_ctx;
    int st;
    if ((st = kvs_sampler_new(p->sampling, n_vocab, &g->sampler))) return st;
    if ((st = kvs_detok_new(model, 0, &g->detok))) return st;
    /* The last token sampled is never decoded, so the window fits
     * n_ctx - n_prompt + 1 new tokens. */
    int n_max = p->n_predict < n_ctx - n_prompt + 1 ? p->n_predict : n_ctx - n_prompt + 1;
    if (n_max < 0) n_max = 0;
    g->pos = malloc((size_t)n_prompt * sizeof *g->pos);
    g->piece = malloc(KVS_DETOK_BUF);
    r->tokens = malloc(((size_t)n_max + 1) * sizeof *r->tokens);
    r->first_logits = malloc((size_t)n_vocab * sizeof *r->first_logits);
    if (!g->pos || !g->piece || !r->tokens || !r->first_logits)
        return kvs_error(KVS_ERR_NOMEM, "generate: out of memory");
    if ((st = text_append(&g->text, "", 0))) return st;
    r->n_vocab = n_vocab;
    r->n_prompt = n_prompt;
    r->n_live = n_prompt - n_ready;
    r->n_prefilled = n_prompt - n_ready;

    for (int i = 0; i < n_prompt; i++) g->pos[i] = i;
    int first_hist = n_prompt > p->sampling.repeat_last_n ? n_prompt - p->sampling.repeat_last_n : 0;
    for (int i = first_hist; i < n_prompt; i++) kvs_sampler_accept_prompt(g->sampler, prompt[i]);

    /* Slots [0, n_ready) already hold the KV of prompt[0..n_ready) (a cache
     * hit): only the rest runs, at its absolute positions. */
    if ((st = kvs_decode(ctx, prompt + n_ready, g->pos + n_ready, n_prompt - n_ready, ctx->logits))) return st;
    double t_prefill = kvs_now_ms();
    /* Sampler and buffer set-up are counted with the prefill: the phases
     * stay consecutive, so they add up to ttft_ms. */
    r->timings.prefill_ms = t_prefill - t_in;
    memcpy(r->first_logits, ctx->logits, (size_t)n_vocab * sizeof(float));
    if ((st = top_logprobs(ctx->logits, n_vocab, p->n_top_logprobs, r))) return st;

    double t_first = t_prefill, t_last = t_prefill;
    int stopped = 0, stop_hit = 0; /* on_token asked to stop / a stop string was cut */
    /* Running out of n_max without another reason: the user's limit, or the
     * context when it is the smaller one. */
    r->stop_reason = n_max < p->n_predict ? KVS_STOP_CONTEXT : KVS_STOP_LENGTH;
    for (int i = 0; i < n_max && !stopped; i++) {
        int32_t tok = kvs_sampler_sample(g->sampler, ctx->logits);
        kvs_sampler_accept(g->sampler, tok);
        t_last = kvs_now_ms();
        if (i == 0) {
            t_first = t_last;
            r->ttft_ms = t_first - t0;
        }
        r->tokens[r->n_tokens++] = tok;
        if (kvs_token_is_eog(model, tok)) {
            r->stop_reason = KVS_STOP_EOS;
            break;
        }

        size_t n_piece = 0;
        if ((st = kvs_detok_push(g->detok, tok, g->piece, KVS_DETOK_BUF, &n_piece))) return st;
        if ((st = text_append(&g->text, g->piece, n_piece))) return st;
        long cut = stop_find(&g->text, p);
        if (cut >= 0) {
            g->text.len = (size_t)cut;
            stream(&g->text, (size_t)cut, tok, p);
            g->text.s[cut] = 0;
            stop_hit = 1;
            r->stop_reason = KVS_STOP_STRING;
            break;
        }
        stopped = stream(&g->text, g->text.len - stop_holdback(&g->text, p), tok, p);
        if (stopped) r->stop_reason = KVS_STOP_CALLBACK;
        if (stopped || i + 1 == n_max) break;

        int32_t pos = n_prompt + i;
        if ((st = kvs_decode(ctx, &tok, &pos, 1, ctx->logits))) return st;
    }
    if (r->n_tokens == 0) r->ttft_ms = t_first - t0; /* n_predict = 0: up to the prompt's logits */
    r->timings.first_token_ms = t_first - t_prefill;
    r->timings.decode_ms = t_last - t_first;

    /* Bytes still held back: an unfinished UTF-8 sequence (flushed as
     * U+FFFD) or a suffix that never completed a stop string. */
    if (!stop_hit && !stopped) {
        size_t n_piece = 0;
        if ((st = kvs_detok_flush(g->detok, g->piece, KVS_DETOK_BUF, &n_piece))) return st;
        if ((st = text_append(&g->text, g->piece, n_piece))) return st;
        long cut = stop_find(&g->text, p);
        if (cut >= 0) {
            g->text.len = (size_t)cut;
            g->text.s[cut] = 0;
            r->stop_reason = KVS_STOP_STRING;
        }
        if (g->text.len > g->text.streamed) stream(&g->text, g->text.len, -1, p);
    }
    return KVS_OK;
}

int kvs_generate_params_check(const kvs_generate_params *p, const char *who) {
    if (!p) return kvs_error(KVS_ERR_INVALID_ARG, "%s: params is NULL", who);
    if (p->n_predict < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: n_predict (new tokens at most) must be >= 0, got %d", who,
                         p->n_predict);
    if (p->n_top_logprobs < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: n_top_logprobs must be >= 0, got %d", who, p->n_top_logprobs);
    if (p->n_stop < 0) return kvs_error(KVS_ERR_INVALID_ARG, "%s: n_stop must be >= 0, got %d", who, p->n_stop);
    if (p->n_stop > 0 && !p->stop)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: n_stop = %d but stop is NULL", who, p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i]) return kvs_error(KVS_ERR_INVALID_ARG, "%s: stop[%d] is NULL", who, i);
    char field[64];
    snprintf(field, sizeof field, "%s: sampling.", who);
    return kvs_sampler_params_check(&p->sampling, field);
}

int kvs_generate(kvs_context *ctx, const int32_t *prompt, int n_prompt, const kvs_generate_params *params,
                 kvs_generate_result *out) {
    return kvs_generate_from(ctx, prompt, n_prompt, 0, params, kvs_now_ms(), out);
}

int kvs_generate_from(kvs_context *ctx, const int32_t *prompt, int n_prompt, int n_ready,
                      const kvs_generate_params *params, double t0, kvs_generate_result *out) {
    if (!ctx || !prompt || !params || !out || n_prompt <= 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_generate: need a context, a prompt of at least one token (got %d), "
                         "params and a result", n_prompt);
    int st = kvs_generate_params_check(params, "kvs_generate");
    if (st) return st;
    if (n_prompt > ctx->params.n_ctx)
        return kvs_error(KVS_ERR_CONTEXT_FULL, "the prompt has %d tokens but the context holds %d", n_prompt,
                         ctx->params.n_ctx);
    if (n_ready < 0 || n_ready >= n_prompt)
        return kvs_error(KVS_ERR_INVALID_ARG, "generate: %d of %d prompt tokens are ready; at least the last one must "
                         "be computed", n_ready, n_prompt);
    kvs_generate_result r;
    memset(&r, 0, sizeof r);
    gen_state g;
    memset(&g, 0, sizeof g);
    st = run(ctx, prompt, n_prompt, n_ready, params, &r, &g, t0);
    kvs_sampler_free(g.sampler);
    kvs_detok_free(g.detok);
    free(g.pos);
    free(g.piece);
    if (st) {
        free(g.text.s);
        kvs_generate_result_free(&r);
        return st;
    }
    r.text = g.text.s;
    *out = r;
    return KVS_OK;
}
