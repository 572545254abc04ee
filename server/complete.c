/*
 * POST /v1/chat/completions and /v1/completions: parse, queue, then either
 * wait and answer one JSON object, or stream Server-Sent Events:
 *
 *   data: {chunk: role}            (chat only)
 *   data: {chunk: text piece} ...  as the scheduler emits text
 *   data: {chunk: finish_reason}
 *   data: {chunk: choices [], usage}   with stream_options.include_usage
 *   data: [DONE]
 *
 * With n > 1 each chunk names its choice (index); the finish chunks come as
 * the choices end. A client that goes away cancels its request (the
 * scheduler frees the slot within one step).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define WAIT_SLICE_MS 50

/* The n jobs of one request, one per choice (n > 1: the same prompt, seed
 * + i for choice i; the first computes the prompt, the others share it in
 * flight: srv_slot_waits_for). */
typedef struct choices {
    srv_job *j[SRV_MAX_CHOICES];
    int n;
} choices;

/* The first choice of choice i's prompt: the one that computes the prompt's
 * echoed entries (srv_job_echo_logprobs). */
static int first_of_prompt(const choices *cs, int i) { return i - i % cs->j[i]->req.n; }

/* The completion's token ids of job j, as a JSON array in o. */
static void add_token_ids(cJSON *o, const srv_job *j) {
    cJSON *ids = cJSON_AddArrayToObject(o, "completion_token_ids");
    for (int i = 0; j->gen_tokens && i < j->usage.completion_tokens; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(j->gen_tokens[i]));
}

/* n > 1: what differs between the choices (their prompt is the first's). */
static void add_choices(cJSON *k, const choices *cs) {
    cJSON *arr = cJSON_AddArrayToObject(k, "choices");
    for (int i = 0; i < cs->n; i++) {
        const srv_job *j = cs->j[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        cJSON_AddNumberToObject(c, "completion_tokens", j->usage.completion_tokens);
        cJSON_AddNumberToObject(c, "decode_ms", j->usage.decode_ms);
        cJSON_AddNumberToObject(c, "total_ms", j->usage.total_ms);
        if (j->req.return_token_ids) add_token_ids(c, j);
        cJSON_AddItemToArray(arr, c);
    }
}

/* The prompt's bytes, token after token (control tokens rendered), and
 * where each token's start: off[t] (n_prompt + 1 offsets). NULL when out of
 * memory. */
static char *prompt_bytes(const srv_server *s, const srv_job *j, size_t *off) {
    size_t cap = 64 + 8 * (size_t)j->n_prompt, len = 0;
    char *all = malloc(cap);
    for (int t = 0; all && t < j->n_prompt; t++) {
        off[t] = len;
        size_t n = 0;
        int rc = kvs_token_to_bytes(s->model, j->prompt[t], 1, all + len, cap - len, &n);
        if (rc == KVS_ERR_BUFFER_TOO_SMALL) { /* n: the token's full length */
            cap = 2 * (len + n) + 64;
            char *grown = realloc(all, cap);
            if (!grown) {
                free(all);
                return NULL;
            }
            all = grown;
            rc = kvs_token_to_bytes(s->model, j->prompt[t], 1, all + len, cap - len, &n);
        }
        if (rc == KVS_OK) len += n;
    }
    if (all) off[j->n_prompt] = len;
    return all;
}

/* usage.kvstitch.prompt_sources: runs of prompt tokens by KV source, in
 * prompt order, with their text. A character whose bytes span two runs'
 * tokens (a byte-level BPE splits multi-byte characters) goes whole to the
 * run it starts in, and bytes that are no valid UTF-8 become U+FFFD: each
 * run's text had been its tokens' bytes alone, half characters included,
 * and a fixed 16 bytes a token had dropped longer tokens. */
static void add_prompt_sources(const srv_server *s, const srv_job *j, cJSON *k) {
    cJSON *runs = cJSON_AddArrayToObject(k, "prompt_sources");
    size_t *off = malloc(sizeof *off * ((size_t)j->n_prompt + 1));
    char *all = off ? prompt_bytes(s, j, off) : NULL;
    size_t from = 0; /* the run's first byte */
    for (int i = 0, at = 0; i < j->n_sources; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "source", srv_source_name(j->sources[i].src));
        cJSON_AddNumberToObject(r, "tokens", j->sources[i].n);
        at += j->sources[i].n;
        if (all) {
            const size_t len = off[j->n_prompt];
            size_t to = off[at < j->n_prompt ? at : j->n_prompt];
            while (to < len && (all[to] & 0xC0) == 0x80 && to > from) to++; /* past the character's continuation bytes */
            if (to < from) to = from;
            char *text = malloc(3 * (to - from) + 1);
            if (text) {
                kvs_utf8_repair(all + from, to - from, text, 3 * (to - from) + 1);
                cJSON_AddStringToObject(r, "text", text);
            }
            free(text);
            from = to;
        }
        cJSON_AddItemToArray(runs, r);
    }
    free(all);
    free(off);
}

/* usage, with the kvstitch object (README "Server" documents every field):
 * completion tokens of every choice, the rest of the first one's, and with
 * n > 1 each choice's own figures in kvstitch.choices. */
static cJSON *usage_json(const srv_server *s, const choices *cs) {
    const srv_job *j = cs->j[0];
    const srv_usage *u = &j->usage;
    /* every choice's completion; each prompt of a batch once (its first
     * choice's), and what of it was not computed: OpenAI's cached_tokens
     * (exact hits, and moved document tokens the repair left as they were) */
    int completion = 0, prompt = 0, cached = 0;
    for (int i = 0; i < cs->n; i++) {
        const srv_usage *v = &cs->j[i]->usage;
        completion += v->completion_tokens;
        if (i % j->req.n) continue;
        prompt += v->prompt_tokens;
        cached += v->cached_tokens + v->moved_tokens - v->recomputed_tokens;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(o, "completion_tokens", completion);
    cJSON_AddNumberToObject(o, "total_tokens", prompt + completion);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", cached);
    cJSON *k = cJSON_AddObjectToObject(o, "kvstitch");
    cJSON_AddNumberToObject(k, "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(k, "moved_tokens", u->moved_tokens);
    cJSON_AddNumberToObject(k, "recomputed_tokens", u->recomputed_tokens);
    cJSON_AddNumberToObject(k, "computed_tokens", u->computed_tokens); /* (set at its finish: srv_slot_finish) */
    cJSON_AddStringToObject(k, "strategy", u->strategy ? u->strategy : "prefix");
    if (j->segments && j->req.recal_temperature > 0) {
        cJSON *rc = cJSON_AddObjectToObject(k, "recalibrate");
        cJSON_AddNumberToObject(rc, "temperature", j->req.recal_temperature);
        cJSON_AddNumberToObject(rc, "scale", j->req.recal_scale);
    }
    cJSON_AddNumberToObject(k, "docs_hit", u->docs_hit);
    cJSON_AddNumberToObject(k, "docs_computed", u->docs_computed);
    cJSON_AddNumberToObject(k, "docs_baked", u->docs_baked);
    cJSON_AddNumberToObject(k, "chunks_stored", u->chunks_stored);
    cJSON_AddNumberToObject(k, "prefill_steps", u->prefill_steps);
    cJSON *t = cJSON_AddObjectToObject(k, "timings");
    cJSON_AddNumberToObject(t, "queue_ms", u->queue_ms);
    cJSON_AddNumberToObject(t, "ttft_ms", u->ttft_ms);
    cJSON_AddNumberToObject(t, "prefill_ms", u->prefill_ms);
    cJSON_AddNumberToObject(t, "decode_ms", u->decode_ms);
    cJSON_AddNumberToObject(t, "total_ms", u->total_ms);
    cJSON_AddStringToObject(k, "first_logits_sha256", u->first_logits_sha256);
    if (j->req.return_token_ids) add_token_ids(k, j);
    if (cs->n > 1) add_choices(k, cs);
    if (j->req.return_prompt_sources) add_prompt_sources(s, j, k);
    return o;
}

static cJSON *envelope(const srv_server *s, const srv_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "kvstitch");
    return o;
}

static const char *finish_reason(const srv_job *j) {
    return j->finish == SRV_FINISH_LENGTH ? "length" : "stop";
}

/* The first choice that failed or was cancelled, as the error to answer;
 * NULL when every one finished. */
static const srv_error *failure(const choices *cs, srv_error *buf) {
    for (int i = 0; i < cs->n; i++) {
        if (cs->j[i]->finish == SRV_FINISH_ERROR) return &cs->j[i]->err;
        if (cs->j[i]->finish == SRV_FINISH_CANCELLED) {
            srv_error_set(buf, 503, "server_error", "shutting_down", "", "the server is shutting down");
            return buf;
        }
    }
    return NULL;
}

/* A choice's logprobs object: with echo, the prompt's entries first (their
 * offsets in the prompt, the completion's moved past it), which pj, the
 * first choice of the same prompt, computed (srv_job_echo_logprobs). */
static cJSON *choice_logprobs(const srv_server *s, const srv_job *j, const srv_job *pj, const char *text, int echoed) {
    if (!echoed) return srv_logprobs_json(s->model, j->req.kind, j->lp, j->n_lp, text, 0, 0);
    const size_t plen = strlen(j->req.prompt);
    const int np = pj->n_prompt_lp, n = np + j->n_lp;
    srv_logprob *all = malloc(((size_t)n + 1) * sizeof *all);
    if (!all) return cJSON_CreateNull();
    if (np) memcpy(all, pj->prompt_lp, (size_t)np * sizeof *all);
    for (int i = 0; i < j->n_lp; i++) {
        all[np + i] = j->lp[i];
        all[np + i].offset += plen;
    }
    cJSON *o = srv_logprobs_json(s->model, j->req.kind, all, n, text, 0, 0);
    free(all);
    return o;
}

/* Choice i of the reply. */
static cJSON *choice_json(const srv_server *s, const choices *cs, int i, int chat) {
    const srv_job *j = cs->j[i];
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", j->text);
    }
    /* echo: the prompt as sent, then the completion */
    char *echoed = !chat && j->req.echo ? malloc(strlen(j->req.prompt) + strlen(j->text) + 1) : NULL;
    if (echoed) strcat(strcpy(echoed, j->req.prompt), j->text);
    const char *text = echoed ? echoed : j->text;
    if (!chat) cJSON_AddStringToObject(ch, "text", text);
    const srv_job *pj = cs->j[first_of_prompt(cs, i)];
    if (j->req.logprobs) cJSON_AddItemToObject(ch, "logprobs", choice_logprobs(s, j, pj, text, echoed != NULL));
    else cJSON_AddNullToObject(ch, "logprobs");
    free(echoed);
    cJSON_AddStringToObject(ch, "finish_reason", finish_reason(j));
    return ch;
}

/* Text appended to a growing malloc'd buffer; 0 when out of memory (then
 * it stays as it was). */
typedef struct reply_text {
    char *s;
    size_t len, cap;
} reply_text;

static int put_text(reply_text *b, const char *t, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *g = realloc(b->s, cap);
        if (!g) return 0;
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->len, t, n);
    b->len += n;
    b->s[b->len] = 0;
    return 1;
}

/* cJSON o's text appended (o freed); 0 when out of memory. */
static int put_json(reply_text *b, cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int ok = t && put_text(b, t, strlen(t));
    free(t);
    return ok;
}

/* The reply is printed a choice at a time, each choice's tree freed once
 * printed, and its text handed to the connection as it is: one request for
 * 16 choices echoing a 3,000-token prompt with 20 top logprobs (a 26 MB
 * reply) had raised the server's peak memory by ~280 MB, the whole tree,
 * its text and a copy of it at once. */
static int reply_done(srv_server *s, struct MHD_Connection *c, const choices *cs) {
    srv_error buf;
    const srv_error *e = failure(cs, &buf);
    if (e) return srv_reply_error(c, e);
    int chat = cs->j[0]->req.kind == SRV_KIND_CHAT;
    reply_text b = {0};
    /* the envelope's object without its closing brace, then the choices and usage */
    int ok = put_json(&b, envelope(s, cs->j[0], chat ? "chat.completion" : "text_completion")) && b.len > 2 &&
             b.s[b.len - 1] == '}';
    if (ok) b.len--;
    ok = ok && put_text(&b, ",\"choices\":[", 12);
    const size_t head = b.len;
    for (int i = 0; ok && i < cs->n; i++) {
        ok = (!i || put_text(&b, ",", 1)) && put_json(&b, choice_json(s, cs, i, chat));
        if (ok && i == 0 && cs->n > 1) { /* room for the others, alike: no doubling copy of a large reply */
            const size_t want = b.len + (b.len - head + 1) * (size_t)(cs->n - 1) / 16 * 17 + 65536;
            char *g = want > b.cap ? realloc(b.s, want) : NULL;
            if (g) {
                b.s = g;
                b.cap = want;
            }
        }
    }
    ok = ok && put_text(&b, "],\"usage\":", 10) && put_json(&b, usage_json(s, cs)) && put_text(&b, "}", 1);
    if (!ok) {
        free(b.s);
        b.s = NULL;
    }
    return srv_reply_json_text(c, 200, b.s, b.len);
}

/* --- SSE --------------------------------------------------------------------------- */

typedef struct sse {
    srv_server *s;
    struct MHD_Connection *c;
    choices cs;
    srv_job_cursor seen[SRV_MAX_CHOICES];
    size_t seen_chars[SRV_MAX_CHOICES]; /* characters of a choice's text before seen.text (text_offset) */
    int done[SRV_MAX_CHOICES];          /* its finish chunk was pushed */
    int echoed[SRV_MAX_CHOICES];        /* echo: its prompt chunk was pushed */
    int lp_sent[SRV_MAX_CHOICES];       /* a chunk of it carried a logprobs object */
    int role_sent, ended;
    char *out;         /* bytes ready to send */
    size_t out_len, out_off;
    uint64_t acked;    /* the client's side's acknowledged bytes at progress_ms */
    double progress_ms; /* when it last took bytes, or had none waiting */
} sse;

static void sse_push(sse *st, cJSON *o) {
    char *js = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    const char *payload = js ? js : "[DONE]";
    size_t n = strlen(payload) + 8, keep = st->out_len - st->out_off;
    char *buf = malloc(keep + n + 1);
    if (buf) {
        if (keep) memcpy(buf, st->out + st->out_off, keep); /* out is NULL before the first push */
        snprintf(buf + keep, n + 1, "data: %s\n\n", payload);
        free(st->out);
        st->out = buf;
        st->out_len = keep + strlen(buf + keep);
        st->out_off = 0;
    }
    free(js);
}

/* A chunk with choice i: delta (chat) or text (completions), and the
 * logprobs of the tokens whose text starts in it (NULL: null). */
static cJSON *sse_chunk(sse *st, int i, const char *role, const char *text, cJSON *logprobs, const char *finish) {
    int chat = st->cs.j[0]->req.kind == SRV_KIND_CHAT;
    cJSON *o = envelope(st->s, st->cs.j[0], chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices_json = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", role);
        if (text) cJSON_AddStringToObject(d, "content", text);
    } else {
        cJSON_AddStringToObject(ch, "text", text ? text : "");
    }
    if (logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs);
    else cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices_json, ch);
    return o;
}

/* After every choice's end: an error (one failed or was cancelled), or the
 * usage chunk (stream_options.include_usage); then [DONE]. */
static void sse_end(sse *st) {
    srv_error buf;
    const srv_error *e = failure(&st->cs, &buf);
    const srv_job *j = st->cs.j[0];
    if (e) {
        sse_push(st, srv_error_json(e)); /* (its own object had no param, and "" for a null code) */
    } else if (j->req.include_usage) {
        cJSON *o = envelope(st->s, j, j->req.kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_json(st->s, &st->cs));
        sse_push(st, o);
    }
    sse_push(st, NULL);
    st->ended = 1;
}

/* echo: choice i's prompt, in a chunk of its own before its completion,
 * with the entries the first choice of its prompt computed (once its
 * prefill has run: sse_take). */
static void sse_echo(sse *st, int i) {
    const srv_job *j = st->cs.j[i], *pj = st->cs.j[first_of_prompt(&st->cs, i)];
    const char *prompt = j->req.prompt;
    cJSON *lp = j->req.logprobs
                    ? srv_logprobs_json(st->s->model, j->req.kind, pj->prompt_lp, pj->n_prompt_lp, prompt, 0, 0)
                    : NULL;
    sse_push(st, sse_chunk(st, i, NULL, prompt, lp, NULL));
    st->lp_sent[i] |= lp != NULL;
    st->seen_chars[i] += srv_utf8_chars(prompt, strlen(prompt));
    st->echoed[i] = 1;
}

/* Choice i, whose echo waits for the entries the first choice of its
 * prompt was to compute, when that one ended (failed, cancelled) before
 * they were complete (none: echo_start failed; some: the prefill failed):
 * i sends nothing and is cancelled; its text (done: it ended) is dropped,
 * and the stream ends in the first choice's error (sse_end: the first
 * failure in choice order), as the reply does. Its echo had gone out with
 * those entries, empty or partial, then its text, as if correct. Not the
 * entries computed by i instead: i ran the prompt from the cache, without
 * its logits (the point of sharing), so they would take a second prefill
 * of the whole prompt for a request that fails anyway. */
static void sse_drop(sse *st, int i, int done) {
    srv_job_cancel(st->cs.j[i]);
    st->done[i] = done; /* once the scheduler let it go: sse_end reads its finish */
}

/* Takes choice i's new text (waiting at most timeout_ms) into chunks, and
 * its finish chunk when it ended. Returns the bytes of text taken. */
static size_t sse_take(sse *st, int i, int timeout_ms) {
    srv_job *j = st->cs.j[i];
    /* Echoed entries: a choice waits for those of the first choice of its
     * prompt, complete once that one's echo went out (it is taken before
     * this one); the choices had each computed the prompt's logits again. */
    const int f = first_of_prompt(&st->cs, i);
    const int held = f != i && !st->echoed[i] && srv_job_echo_logprobs(st->cs.j[f]) && !st->echoed[f];
    if (held && !st->done[f]) return 0;
    size_t base = st->seen[i].text;
    srv_job_piece p;
    int done = srv_job_wait(j, &st->seen[i], &p, timeout_ms);
    if (held) { /* f ended without them: see sse_drop */
        srv_job_piece_free(&p);
        sse_drop(st, i, done);
        return 0;
    }
    if (j->req.echo && !st->echoed[i] && (p.text || p.n_lp || (done && j->finish != SRV_FINISH_ERROR &&
                                                                 j->finish != SRV_FINISH_CANCELLED)))
        sse_echo(st, i);
    if (p.text || p.n_lp) { /* (entries without text: tokens that have none, at the end) */
        const char *text = p.text ? p.text : "";
        cJSON *lp = j->req.logprobs
                        ? srv_logprobs_json(st->s->model, j->req.kind, p.lp, p.n_lp, text, base, st->seen_chars[i])
                        : NULL;
        sse_push(st, sse_chunk(st, i, NULL, text, lp, NULL));
        st->lp_sent[i] |= lp != NULL;
        st->seen_chars[i] += srv_utf8_chars(text, p.n);
    }
    size_t n = p.n;
    srv_job_piece_free(&p);
    if (done) {
        st->done[i] = 1;
        /* A choice that sent no entries (its first token began a stop
         * string) still gives an empty logprobs object, as the reply's. */
        cJSON *lp = j->req.logprobs && !st->lp_sent[i]
                        ? srv_logprobs_json(st->s->model, j->req.kind, NULL, 0, "", 0, 0)
                        : NULL;
        if (j->finish != SRV_FINISH_ERROR && j->finish != SRV_FINISH_CANCELLED)
            sse_push(st, sse_chunk(st, i, NULL, NULL, lp, finish_reason(j)));
        else cJSON_Delete(lp);
    }
    return n;
}

/* 1 once the client has taken none of the bytes waiting for it for
 * --reply-timeout: its side acknowledged nothing new while some were
 * queued (peer_acks.c: the kernel's send buffer, megabytes, had hidden a
 * client that stopped reading, and its stream decoded to max_tokens). A
 * socket that cannot say is never stalled here; libmicrohttpd's own clock
 * then closes it once the send buffer is full. */
static int sse_client_stalled(sse *st) {
    uint64_t acked = 0;
    int queued = 0;
    const double now = srv_now_ms();
    if (srv_peer_acks(st->c, &acked, &queued)) {
        st->progress_ms = now;
        return 0;
    }
    if (queued == 0 || acked != st->acked) {
        st->acked = acked;
        st->progress_ms = now;
        return 0;
    }
    return now - st->progress_ms > 1e3 * st->s->reply_timeout_s;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse *st = cls;
    for (;;) {
        if (!st->ended && sse_client_stalled(st)) return srv_client_left(), MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->out_off < st->out_len) {
            size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
            memcpy(buf, st->out + st->out_off, n);
            st->out_off += n;
            srv_reply_clock_restart(st->s, st->c); /* (the wait for them was the server's, not the client's) */
            return (ssize_t)n;
        }
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!st->role_sent) {
            st->role_sent = 1;
            for (int i = 0; st->cs.j[0]->req.kind == SRV_KIND_CHAT && i < st->cs.n; i++)
                sse_push(st, sse_chunk(st, i, "assistant", "", NULL, NULL));
            continue;
        }
        /* Every choice without waiting, then (nothing new) a wait on the
         * first one still running. */
        size_t n = 0;
        int first = -1, all_done = 1;
        for (int i = 0; i < st->cs.n; i++) {
            if (!st->done[i]) n += sse_take(st, i, 0);
            if (!st->done[i] && first < 0) first = i;
        }
        if (first >= 0 && !n && st->out_off == st->out_len) n = sse_take(st, first, WAIT_SLICE_MS);
        for (int i = 0; i < st->cs.n; i++) all_done &= st->done[i];
        if (all_done) sse_end(st);
        else if (!n && st->out_off == st->out_len && srv_peer_gone(st->c))
            return srv_client_left(), MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void choices_cancel_unref(choices *cs) {
    for (int i = 0; i < cs->n; i++) {
        srv_job_cancel(cs->j[i]);
        srv_job_unref(cs->j[i]);
    }
    cs->n = 0;
}

static void sse_free(void *cls) {
    sse *st = cls;
    /* A response torn down before the end: the client went away. */
    if (!st->ended)
        choices_cancel_unref(&st->cs);
    else
        for (int i = 0; i < st->cs.n; i++) srv_job_unref(st->cs.j[i]);
    free(st->out);
    free(st);
}

static int reply_stream(srv_server *s, struct MHD_Connection *c, choices *cs) {
    sse *st = calloc(1, sizeof *st);
    if (!st) {
        choices_cancel_unref(cs);
        return 0;
    }
    st->s = s;
    st->c = c;
    st->cs = *cs;
    st->progress_ms = srv_now_ms();
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, st, sse_free);
    if (!r) {
        sse_free(st);
        return 0;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok == MHD_YES ? 200 : 0;
}

/* --- the handlers ---------------------------------------------------------------- */

int srv_submit(srv_server *s, srv_job *j, srv_error *e) {
    int q = srv_sched_submit(s->sched, j);
    if (!q) return 0;
    srv_job_unref(j);
    if (q == -1) srv_error_set(e, 429, "rate_limit_error", "queue_full", "", "the request queue is full; retry later");
    else srv_error_set(e, 503, "server_error", "shutting_down", "", "the server is shutting down");
    return -1;
}

/* The jobs of a request: n choices for each of its prompts (a batch: the
 * choices of prompt p are p * n .. p * n + n - 1, as OpenAI numbers them).
 * The first choice of prompt p is its request (req for p = 0, taken; the
 * others from the body's tree root), the other n - 1 share it with seed + i
 * (srv_job_new_choice). 0, or -1 with e set and nothing left. */
static int make_choices(srv_server *s, const cJSON *root, srv_kind kind, srv_request *req, choices *cs, srv_error *e) {
    const int n = req->n, total = n * req->n_prompts;
    cs->n = 0;
    for (int k = 0; k < total; k++) {
        srv_request r;
        srv_job *j = NULL;
        if (k % n) j = srv_job_new_choice(cs->j[k - k % n], k % n, e);
        else if (k == 0 || !srv_request_from_json(root, kind, k / n, &r, e))
            j = srv_job_new(s->model, k ? &r : req, s->n_ctx, s->default_max_tokens, e); /* takes it */
        if (!j) break;
        cs->j[cs->n++] = j;
    }
    if (cs->n == total) return 0;
    for (int i = 0; i < cs->n; i++) srv_job_unref(cs->j[i]);
    cs->n = 0;
    return -1;
}

static int complete(srv_server *s, struct MHD_Connection *c, const char *body, size_t len, srv_kind kind) {
    srv_request req;
    srv_error e;
    choices cs = {{NULL}, 0};
    /* the body is parsed once: each prompt of a batch is taken from its tree */
    cJSON *root = srv_json_parse(body, len, &e);
    int st = !root || srv_request_from_json(root, kind, 0, &req, &e) ? -1 : 0;
    if (!st && req.bake_neighbours) { /* (a generating request had ignored it without a word) */
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value",
                      req.bake_neighbours < 0 ? "doc_set" : "bake_with_neighbours",
                      "'%s' is a warm's (POST /v1/cache/warm with documents): a request that generates reads "
                      "baked documents (reuse.baked), it does not bake them",
                      req.bake_neighbours < 0 ? "doc_set" : "bake_with_neighbours");
        srv_request_free(&req);
        st = -1;
    }
    if (!st && req.n_prompts < 1) req.n_prompts = 1; /* (chat) */
    if (!st && req.n * req.n_prompts > SRV_MAX_CHOICES) {
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "n",
                      "'n' (%d) times the prompts of the batch (%d) is more than one request answers (%d choices)",
                      req.n, req.n_prompts, SRV_MAX_CHOICES);
        srv_request_free(&req);
        st = -1;
    }
    if (!st && req.n * req.n_prompts > s->max_queue) { /* its choices queue together: a 429 had asked for a retry that never fits */
        srv_error_set(&e, 400, "invalid_request_error", "invalid_value", "n",
                      "'n' (%d) times the prompts (%d) is more than the server's queue holds (--max-queue %d)", req.n,
                      req.n_prompts, s->max_queue);
        srv_request_free(&req);
        st = -1;
    }
    if (!st) st = make_choices(s, root, kind, &req, &cs, &e);
    cJSON_Delete(root);
    if (st) return srv_reply_error(c, &e);
    for (int i = 0; i < cs.n; i++)
        if (srv_submit(s, cs.j[i], &e)) { /* (it released choice i) */
            for (int k = i + 1; k < cs.n; k++) srv_job_unref(cs.j[k]);
            cs.n = i;
            choices_cancel_unref(&cs);
            return srv_reply_error(c, &e);
        }
    if (cs.j[0]->req.stream) return reply_stream(s, c, &cs); /* the stream owns our references */
    for (int i = 0; i < cs.n; i++) {
        srv_job_cursor seen = {0, 0};
        for (;;) {
            srv_job_piece p;
            int done = srv_job_wait(cs.j[i], &seen, &p, WAIT_SLICE_MS);
            srv_job_piece_free(&p);
            if (done) break;
            if (srv_peer_gone(c)) {
                choices_cancel_unref(&cs);
                srv_client_left();
                return 0;
            }
        }
    }
    st = reply_done(s, c, &cs);
    for (int i = 0; i < cs.n; i++) srv_job_unref(cs.j[i]);
    return st;
}

int srv_chat_completions(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    return complete(s, c, body, len, SRV_KIND_CHAT);
}

int srv_completions(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    return complete(s, c, body, len, SRV_KIND_COMPLETION);
}
