/*
 * kvstitch serve: the process-wide state and the pieces the HTTP front end
 * (http.c) routes to.
 *
 *   http.c      libmicrohttpd daemon (a thread per connection), body limit,
 *               API key, the route table
 *   request.c   JSON -> srv_request (pure, fuzzed)
 *   job.c       a request in flight: tokens in, text out
 *   sched.c     slots, admission, chunked prefill, batched decode
 *   slot.c      one slot's request: prefill with the cache, sampling, text
 *   complete.c  POST /v1/chat/completions, /v1/completions (JSON and SSE)
 *   info.c      models, health, tokenize, detokenize, cache, metrics
 *   page.c      GET /: the chat page
 *   serve.c     `kvstitch serve`: options, start, SIGTERM drain
 */
#ifndef KVS_SERVER_SERVER_H
#define KVS_SERVER_SERVER_H

#include <cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>

#include "metrics.h"
#include "request.h"
#include "sched.h"

typedef struct srv_server {
    kvs_model *model;       /* NULL until loaded */
    kvs_cache *cache;
    srv_sched *sched;
    srv_metrics metrics;
    atomic_int ready;       /* 0 while loading: /health answers 503 */
    char model_id[128];     /* what /v1/models lists and /v1/models/{id} serves */
    char *api_key;          /* NULL: no auth */
    size_t max_body;        /* bytes; beyond: 413 (at once when Content-Length announces it) */
    /* Connections (http.c): a client silent for read_timeout_s before its
     * request is complete, or between requests, is closed; once a request
     * is in (its reply may take minutes to compute) reply_timeout_s applies.
     * At most conns_per_ip connections from one address (0: no limit). */
    unsigned read_timeout_s, reply_timeout_s, conns_per_ip;
    int n_ctx;
    int default_max_tokens;
    int max_queue;          /* --max-queue: a request's n choices must fit in it */
    struct MHD_Daemon *daemon;
    atomic_int in_flight;   /* requests from their first byte to their last reply byte (on_completed) */
} srv_server;

/* One route: a handler answers the request (queues a response) and returns
 * the HTTP status it sent (for the metrics), or 0 if the connection broke.
 * arg: the rest of the path after a route path ending in '*' (the id of
 * /v1/models/{id}, percent-decoded), "" for the other routes. */
typedef int (*srv_handler)(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);

typedef struct srv_route {
    const char *method;
    const char *path;    /* exact, or ending in an asterisk: every path the part before it begins */
    srv_handler fn;
    int auth;            /* needs the API key when one is set */
    int needs_model;     /* 503 while loading */
} srv_route;

#define SRV_MAX_CONNECTIONS 512  /* open connections at once (each holds a thread) */

int srv_http_start(srv_server *s, const char *host, int port);
/* Waits (at most timeout_ms) until no request is in flight: a request whose
 * job is done may still be writing its reply, and stopping the daemon would
 * cut that connection without an answer. */
void srv_http_wait_idle(srv_server *s, double timeout_ms);
void srv_http_stop(srv_server *s);

/* Responses. Each returns the status sent (0 if queuing failed). */
int srv_reply(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len);
int srv_reply_json(struct MHD_Connection *c, int status, cJSON *json); /* frees json */
/* A reply of JSON text, malloc'd, taken over (freed) whatever happens; NULL: a 500. */
int srv_reply_json_text(struct MHD_Connection *c, int status, char *text, size_t len);
int srv_reply_error(struct MHD_Connection *c, const srv_error *e);
/* {"error": {"message", "type", "param", "code"}} of e (empty param / code:
 * null), as a reply's body and a stream's error event. */
cJSON *srv_error_json(const srv_error *e);
/* Queues j; 0, or -1 with e set (429 queue_full, 503 shutting_down while
 * draining) and j released. */
int srv_submit(srv_server *s, srv_job *j, srv_error *e);
/* Marks the calling connection thread's close as the client's doing (it
 * left, or stopped reading): libmicrohttpd's error line for it ("Application
 * reported internal error", "application error generating response") is
 * not printed. Every ordinary disconnect had logged one, reading as a fault
 * of the server (the metrics count them as cancelled). */
void srv_client_left(void);
/* 1 if the peer closed its end of the connection. */
int srv_peer_gone(struct MHD_Connection *c);
/* The bytes of the connection's reply the client's side has acknowledged
 * so far (acked) and those sent or waiting that it has not (queued): 0, or
 * -1 where the socket cannot say (peer_acks.c). */
int srv_peer_acks(struct MHD_Connection *c, uint64_t *acked, int *queued);
/* Restarts the connection's reply clock: reply_timeout_s from now. MHD's
 * clock runs from the connection's last byte sent, also while a handler
 * or a stream's reader waits inside a callback (a stream queued for longer
 * than the timeout had been closed the moment its first token came), so
 * it is restarted whenever a reply or a stream's next bytes are ready.
 * From the connection's own thread only. */
void srv_reply_clock_restart(srv_server *s, struct MHD_Connection *c);

/* The logprobs object of a choice (logprobs.c) for lp[0..n), whose offsets
 * point into text, the generated text from byte text_base on (the stream's
 * piece; chars_base characters come before it). */
cJSON *srv_logprobs_json(const kvs_model *m, srv_kind kind, const srv_logprob *lp, int n, const char *text,
                         size_t text_base, size_t chars_base);

/* Characters in s[0..n) of UTF-8 (its lead bytes). */
size_t srv_utf8_chars(const char *s, size_t n);

/* Handlers. */
int srv_chat_completions(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_completions(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_models(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_model(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_health(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_metrics_page(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_tokenize(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_detokenize(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_cache_warm(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_cache_stats(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);
int srv_page(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len);

/* `kvstitch serve` (tools/main.c's command row). */
int cmd_serve(int argc, char **argv);

#endif
