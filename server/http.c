/*
 * The HTTP front end on libmicrohttpd: one thread per connection (a
 * handler may block while its request runs: the scheduler is elsewhere),
 * the body collected up to max_body (413 beyond), the API key checked, and
 * the route table below.
 *
 * A connection's life, and what bounds each part (slowloris: idle
 * connections had held their thread and one of the 512 places for 600 s):
 *
 *   accept           at most conns_per_ip from one address (else closed at once)
 *   headers, body    read_timeout_s of silence closes it; the headers alone
 *                    settle two Content-Length (400) and a Content-Length
 *                    over max_body (413) before any of the body is read
 *   handler, reply   reply_timeout_s (a queued request may wait minutes; the
 *                    handler blocks meanwhile, and a stream's reader waits
 *                    for its next token inside MHD's callback: MHD's clock
 *                    only runs while the client does not take the reply;
 *                    a stream closed so cancels its job)
 *   kept alive       read_timeout_s again until the next request
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include "server.h"

static const srv_route routes[] = {
    {"POST", "/v1/chat/completions", srv_chat_completions, 1, 1},
    {"POST", "/v1/completions", srv_completions, 1, 1},
    /* (503 while loading: the model's context length is set by the load;
     * it had answered 0 then, read unsynchronized) */
    {"GET", "/v1/models", srv_models, 1, 1},
    {"GET", "/v1/models/*", srv_model, 1, 1}, /* the openai client's models.retrieve */
    {"GET", "/health", srv_health, 0, 0},
    {"GET", "/metrics", srv_metrics_page, 0, 0},
    {"POST", "/tokenize", srv_tokenize, 1, 1},
    {"POST", "/detokenize", srv_detokenize, 1, 1},
    {"POST", "/v1/cache/warm", srv_cache_warm, 1, 1},
    {"GET", "/v1/cache/stats", srv_cache_stats, 1, 1},
    {"GET", "/", srv_page, 0, 0},
};

typedef struct conn_body {
    char *data;
    size_t len, cap;
    int too_large;
    size_t dropped;  /* body bytes read and dropped past the limit */
    int answered;   /* a reply is queued before the body was read: drop the rest */
} conn_body;

/* Response r queued with its headers, one more (name NULL: none), and
 * released; 0 if it could not be. */
static int queue_reply(struct MHD_Connection *c, int status, struct MHD_Response *r, const char *ctype,
                       const char *name, const char *value) {
    if (!r) return 0;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    if (name) MHD_add_response_header(r, name, value);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok == MHD_YES ? status : 0;
}

/* A reply, with one more header (name NULL: none). */
static int reply_with(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len,
                      const char *name, const char *value) {
    return queue_reply(c, status, MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY), ctype,
                       name, value);
}

int srv_reply(struct MHD_Connection *c, int status, const char *ctype, const char *body, size_t len) {
    return reply_with(c, status, ctype, body, len, NULL, NULL);
}

/* A JSON reply whose malloc'd text MHD takes over (no copy: a completion
 * with echoed logprobs can be tens of MB), with one more header (name
 * NULL: none); NULL text: out of memory. */
static int reply_json_text_with(struct MHD_Connection *c, int status, char *text, size_t len, const char *name,
                                const char *value) {
    if (!text) return srv_reply(c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) free(text);
    return queue_reply(c, status, r, "application/json", name, value);
}

int srv_reply_json_text(struct MHD_Connection *c, int status, char *text, size_t len) {
    return reply_json_text_with(c, status, text, len, NULL, NULL);
}

static int reply_json_with(struct MHD_Connection *c, int status, cJSON *json, const char *name, const char *value) {
    char *s = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    return reply_json_text_with(c, status, s, s ? strlen(s) : 0, name, value);
}

int srv_reply_json(struct MHD_Connection *c, int status, cJSON *json) {
    return reply_json_with(c, status, json, NULL, NULL);
}

cJSON *srv_error_json(const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type);
    if (*e->param) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (*e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    return root;
}

int srv_reply_error(struct MHD_Connection *c, const srv_error *e) { return srv_reply_json(c, e->http, srv_error_json(e)); }

void srv_reply_clock_restart(srv_server *s, struct MHD_Connection *c) {
    /* a timeout set after none (0) restarts MHD's timer (microhttpd.h) */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->reply_timeout_s);
}

/* Set by srv_client_left, cleared when the connection completes (one
 * thread per connection: the log lines of its close come on that thread). */
static _Thread_local int client_left;

void srv_client_left(void) { client_left = 1; }

static int starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* libmicrohttpd's log (its own default: the line as it is, on stderr),
 * less the error lines of a close the client caused. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[1024]; /* (formatted first: MHD passes such lines as "%s\n" and the text) */
    vsnprintf(line, sizeof line, fmt, ap);
    if (client_left && (starts_with(line, "Application reported internal error") ||
                        starts_with(line, "Closing connection (application error")))
        return;
    fputs(line, stderr);
}

int srv_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Constant time in the key's length: no early exit on the first mismatch.
 * got is m bytes (not NUL-terminated there). */
static int key_matches(const char *want, const char *got, size_t m) {
    size_t n = strlen(want);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

static int authorized(srv_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    /* the scheme is case-insensitive and spaces around the key are not
     * part of it (RFC 9110 11.4: "bearer KEY" and "Bearer  KEY " had been 401) */
    if (!h || strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return 0;
    const char *k = h + 6;
    while (*k == ' ' || *k == '\t') k++;
    size_t m = strlen(k);
    while (m && (k[m - 1] == ' ' || k[m - 1] == '\t')) m--;
    return key_matches(s->api_key, k, m);
}

/* The path of a request target: an absolute-form one ("http://host/v1/..."),
 * which a server must accept (RFC 9112 3.2.2), had been a 404. */
static const char *target_path(const char *url) {
    const char *p = !strncasecmp(url, "http://", 7) ? url + 7 : !strncasecmp(url, "https://", 8) ? url + 8 : NULL;
    if (!p) return url;
    const char *slash = strchr(p, '/');
    /* an authority, then the path: not an empty one, nor a fragment (no part
     * of a request target) anywhere: those stay unrouted (404) */
    if (slash == p || *p == '/' || !*p || strchr(url, '#')) return url;
    return slash ? slash : "/";
}

/* The rest of url after route path p ("" when p is exact), or NULL when
 * url is not p's. */
static const char *route_rest(const char *p, const char *url) {
    const size_t n = strlen(p);
    if (n && p[n - 1] == '*') return strncmp(url, p, n - 1) ? NULL : url + n - 1;
    return strcmp(url, p) ? NULL : url + n;
}

static int dispatch(srv_server *s, struct MHD_Connection *c, const char *url, const char *method, conn_body *b) {
    url = target_path(url);
    srv_error e;
    const srv_route *route = NULL;
    const char *arg = "";
    int path_known = 0;
    char allow[64] = "OPTIONS"; /* the path's methods, for a 405's Allow header */
    /* HEAD is GET without the body (libmicrohttpd sends none for it) */
    const char *as = strcmp(method, "HEAD") ? method : "GET";
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *rest = route_rest(routes[i].path, url);
        if (!rest) continue;
        path_known = 1;
        if (!strcmp(as, routes[i].method)) {
            route = &routes[i];
            arg = rest;
        }
        size_t at = strlen(allow);
        snprintf(allow + at, sizeof allow - at, strcmp(routes[i].method, "GET") ? ", %s" : ", %s, HEAD",
                 routes[i].method);
    }
    if (!strcmp(method, "OPTIONS") && path_known) {
        /* CORS preflight for browser clients. */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        return 204;
    }
    if (!route) {
        srv_error_set(&e, path_known ? 405 : 404, "invalid_request_error", path_known ? "method_not_allowed" : "not_found",
                      "", "%s %s: %s", method, url, path_known ? "method not allowed" : "no such endpoint");
        return reply_json_with(c, e.http, srv_error_json(&e), path_known ? "Allow" : NULL, allow);
    }
    if (route->auth && !authorized(s, c)) {
        srv_error_set(&e, 401, "authentication_error", "invalid_api_key", "",
                      "missing or wrong API key: send 'Authorization: Bearer KEY'");
        return srv_reply_error(c, &e);
    }
    if (b->too_large) {
        srv_error_set(&e, 413, "invalid_request_error", "request_too_large", "",
                      "the request body exceeds the server's limit of %zu bytes", s->max_body);
        return srv_reply_error(c, &e);
    }
    if (route->needs_model && !atomic_load(&s->ready)) {
        srv_error_set(&e, 503, "server_error", "model_loading", "", "the model is still loading");
        return srv_reply_error(c, &e);
    }
    return route->fn(s, c, arg, b->data ? b->data : "", b->len);
}

typedef struct framing {
    int content_length, transfer_encoding, host; /* how many of each header */
    char bad_name[48];                           /* the first name that is not a token, printable ("" none) */
} framing;

/* A field name is a token (RFC 9110 5.1, 5.6.2): libmicrohttpd 0.9.75 keeps
 * "Content-Length " (whitespace before the colon, which RFC 9112 5.1 says
 * to refuse with a 400) as a header of its own, so the body was read as
 * empty and sent on as the next request: smuggling behind a proxy that
 * trims the name. */
static int is_token(const char *name) {
    if (!*name) return 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              strchr("!#$%&'*+-.^_`|~", *p)))
            return 0;
    return 1;
}

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) f->content_length++;
    else if (!strcasecmp(key, "Transfer-Encoding")) f->transfer_encoding++;
    else if (!strcasecmp(key, "Host")) f->host++;
    if (!f->bad_name[0] && !is_token(key)) { /* printed with \xNN for what is not printable ASCII */
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)key; *p && o + 5 < sizeof f->bad_name; p++)
            o += (size_t)snprintf(f->bad_name + o, sizeof f->bad_name - o, *p > 32 && *p < 127 ? "%c" : "\\x%02x", *p);
        if (!o) snprintf(f->bad_name, sizeof f->bad_name, "(empty)");
    }
    return MHD_YES;
}

/* What the headers alone settle, before any of the body is read. Framing
 * that two readers could take differently (request smuggling behind a
 * proxy: libmicrohttpd 0.9.75 took the first of two Content-Length headers,
 * and the chunked body beside a Content-Length) is a 400; a Content-Length
 * over max_body is answered at once (404 / 401 / 413 in dispatch's order:
 * the body had been read and dropped to its end first, so 10^15 bytes
 * announced held the connection as long as the client liked). 0: read the
 * body; else the status sent, -1 if none could be. */
static int answer_from_headers(srv_server *s, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, conn_body *b) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.bad_name[0]) {
        srv_error e;
        srv_error_set(&e, 400, "invalid_request_error", "invalid_header", "",
                      "header name '%s' is not a token: no whitespace before the colon, only letters, digits and "
                      "!#$%%&'*+-.^_`|~",
                      f.bad_name);
        b->answered = 1;
        return srv_reply_error(c, &e) ? 400 : -1;
    }
    /* RFC 9112 3.2: an HTTP/1.1 request without a Host, or with two, is a 400
     * (two readers could route it differently) */
    if (f.host > 1 || (!f.host && version && !strcmp(version, MHD_HTTP_VERSION_1_1))) {
        srv_error e;
        if (f.host)
            srv_error_set(&e, 400, "invalid_request_error", "invalid_header", "",
                          "the request has %d Host headers: send one", f.host);
        else
            srv_error_set(&e, 400, "invalid_request_error", "invalid_header", "",
                          "an HTTP/1.1 request needs a Host header");
        b->answered = 1;
        return srv_reply_error(c, &e) ? 400 : -1;
    }
    if (f.content_length > 1 || f.transfer_encoding > 1 || (f.content_length && f.transfer_encoding)) {
        srv_error e;
        if (f.content_length > 1 || f.transfer_encoding > 1) /* ("chunked" then "gzip" had read as chunked) */
            srv_error_set(&e, 400, "invalid_request_error", "invalid_header", "",
                          "the request has %d %s headers: send one", f.content_length > 1 ? f.content_length :
                          f.transfer_encoding, f.content_length > 1 ? "Content-Length" : "Transfer-Encoding");
        else
            srv_error_set(&e, 400, "invalid_request_error", "invalid_header", "",
                          "the request has both Content-Length and Transfer-Encoding headers: send one of them");
        b->answered = 1;
        return srv_reply_error(c, &e) ? 400 : -1;
    }
    /* A transfer coding other than chunked (gzip, ...): libmicrohttpd cannot
     * find the body's end, and the connection sat until the read timeout */
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    if (te && strcasecmp(te, "chunked")) {
        srv_error e;
        srv_error_set(&e, 501, "invalid_request_error", "invalid_header", "",
                      "Transfer-Encoding '%s' is not supported: send the body with Content-Length or chunked", te);
        b->answered = 1;
        return srv_reply_error(c, &e) ? 501 : -1;
    }
    /* A compressed body: said so (it had been parsed as JSON, "invalid JSON
     * near byte 1") */
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
    if (ce && *ce && strcasecmp(ce, "identity")) {
        srv_error e;
        srv_error_set(&e, 415, "invalid_request_error", "unsupported_media_type", "",
                      "Content-Encoding '%.40s' is not supported: send the body uncompressed", ce);
        b->answered = 1;
        return srv_reply_error(c, &e) ? 415 : -1;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (!cl) return 0;
    errno = 0;
    unsigned long long n = strtoull(cl, NULL, 10);
    if (errno != ERANGE && n <= s->max_body) return 0;
    b->too_large = b->answered = 1;
    int st = dispatch(s, c, url, method, b);
    return st ? st : -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *s = cls;
    conn_body *b = *con_cls;
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return MHD_NO;
        *con_cls = b;
        atomic_fetch_add(&s->in_flight, 1); /* until on_completed */
        int st = answer_from_headers(s, c, url, method, version, b);
        if (st > 0) srv_metrics_status(&s->metrics, st);
        return st >= 0 ? MHD_YES : MHD_NO;
    }
    if (b->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        /* Past the limit (a chunked body: nothing announced its size) the
         * rest is read and dropped, then answered 413 (libmicrohttpd 0.9.75
         * cannot queue a reply while a body is coming in); past twice the
         * limit the connection is closed without one (an endless body had
         * held it as long as it kept coming). */
        if (b->too_large && (b->dropped += *upload_size) > s->max_body) return MHD_NO;
        if (!b->too_large && b->len + *upload_size > s->max_body) {
            b->too_large = 1;
            free(b->data);
            b->data = NULL;
            b->len = b->cap = 0;
        }
        if (!b->too_large) {
            if (b->len + *upload_size + 1 > b->cap) {
                size_t cap = (b->len + *upload_size + 1) * 2;
                char *d = realloc(b->data, cap);
                if (!d) return MHD_NO;
                b->data = d;
                b->cap = cap;
            }
            memcpy(b->data + b->len, upload, *upload_size);
            b->len += *upload_size;
            b->data[b->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* The request is in: its reply may wait for a slot and a long prefill. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->reply_timeout_s);
    int status = dispatch(s, c, url, method, b);
    srv_reply_clock_restart(s, c); /* the reply is ready (or a stream begins): its clock starts now */
    if (status) srv_metrics_status(&s->metrics, status);
    return status ? MHD_YES : MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    client_left = 0;
    conn_body *b = *con_cls;
    if (!b) return;
    /* Kept alive for the next request: silence is bounded again. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->read_timeout_s);
    free(b->data);
    free(b);
    *con_cls = NULL;
    atomic_fetch_sub(&s->in_flight, 1);
}

/* Percent-decoding of the URL as libmicrohttpd's own, except that one which
 * would decode to a NUL byte stays as sent: the routes compare C strings,
 * and "/health%00evil" had been served as "/health" (a proxy allowing or
 * denying by path would see another path than the one routed). */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *uri) {
    if (strstr(uri, "%00")) return strlen(uri);
    return MHD_http_unescape(uri);
}

int srv_http_start(srv_server *s, const char *host, int port) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return -1;
    s->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                                     MHD_USE_ERROR_LOG,
                                 (uint16_t)port, NULL, NULL, on_request, s,
                                 /* first: options before it log through MHD's own logger */
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                                 s->read_timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)SRV_MAX_CONNECTIONS,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->conns_per_ip, MHD_OPTION_UNESCAPE_CALLBACK,
                                 unescape_url, NULL, MHD_OPTION_END);
    return s->daemon ? 0 : -1;
}

void srv_http_wait_idle(srv_server *s, double timeout_ms) {
    for (double waited = 0; atomic_load(&s->in_flight) > 0 && waited < timeout_ms; waited += 10)
        poll(NULL, 0, 10);
}

void srv_http_stop(srv_server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
