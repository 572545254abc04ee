/* One Redis connection with deadlines, backoff and a circuit breaker (redis_conn.h). */
#include "kv/redis_conn.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void kvs_redis_policy_defaults(kvs_redis_policy *p) {
    memset(p, 0, sizeof *p);
    p->timeout_ms = 50;
    p->min_mb_per_s = 25;
    p->backoff_min_ms = 20;
    p->backoff_max_ms = 1000;
    p->breaker_failures = 3;
    p->breaker_open_ms = 2000;
}

int64_t kvs_redis_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kvs_redis_conn_init(kvs_redis_conn *c, const char *host, int port, const kvs_redis_policy *policy) {
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    c->policy = policy;
    c->backoff_ms = policy->backoff_min_ms;
    pthread_mutex_init(&c->mu, NULL);
}

void kvs_redis_conn_destroy(kvs_redis_conn *c) {
    if (c->ctx) redisFree(c->ctx);
    c->ctx = NULL;
    pthread_mutex_destroy(&c->mu);
}

static struct timeval ms_tv(int ms) {
    return (struct timeval){ms / 1000, (ms % 1000) * 1000};
}

/* Reply guards: what a server that is not Redis (or a damaged stream) may
 * announce must not cost more than the operation's budget. hiredis 0.14
 * takes an array's length as it comes: "*2147483647" had it reserve 2^31
 * slots and, the deadline passed, spend ~5 s freeing them (a 50 ms
 * budget; one generate took 49 s); and a bulk string announced at 4 GB
 * grew the read buffer until the deadline (0.6-1.25 GB). Arrays longer
 * than REPLY_MAX_ELEMENTS (a SCAN batch or CLUSTER SLOTS is far below it)
 * fail in the reader, and a reply buffer past policy->max_reply_bytes fails
 * the operation (reply_by). */
#define REPLY_MAX_ELEMENTS (1 << 20)

/* What the reply being parsed has made so far, against its bounds: hiredis
 * 0.14 discards the bytes it has parsed, so the unread-bytes bound never
 * saw a reply of nested arrays, whose objects grew unbounded (64 arrays of
 * 2^20 elements: 732 MB at the default timeout, 1.8 GB at 3 s). Objects
 * (each array's slots included) are bounded by REPLY_MAX_ELEMENTS, string
 * bytes by max_bytes (0: none). One reply is parsed by one thread (the
 * conn's holder) within one reply_by call, which resets it. */
typedef struct reply_tally {
    size_t objects, bytes, max_bytes;
    int over; /* 1: past the objects, 2: past the bytes */
} reply_tally;
static _Thread_local reply_tally g_tally;

static void tally_reset(size_t max_bytes) { g_tally = (reply_tally){0, 0, max_bytes, 0}; }

#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
/* (hiredis 1.x bounds each array; its object hooks, RESP3's included, are
 * not counted here: this project builds on Debian's 0.14) */
static void guard_reader(redisContext *ctx) { ctx->reader->maxelements = REPLY_MAX_ELEMENTS; }
#else
/* 1 if one more object of `slots` slots and `bytes` string bytes fits. */
static int tally_add(size_t slots, size_t bytes) {
    g_tally.objects += 1 + slots;
    g_tally.bytes += bytes;
    if (g_tally.objects > REPLY_MAX_ELEMENTS) g_tally.over = 1;
    else if (g_tally.max_bytes && g_tally.bytes > g_tally.max_bytes) g_tally.over = 2;
    return !g_tally.over; /* else the reader fails ("Out of memory"), and the operation with it */
}

static redisReplyObjectFunctions g_capped;
static redisReplyObjectFunctions *g_plain; /* hiredis' own (static in hiredis.c): taken from a reader */
static pthread_mutex_t g_guard_mu = PTHREAD_MUTEX_INITIALIZER;

static void *create_array_capped(const redisReadTask *task, int elements) {
    if (elements > REPLY_MAX_ELEMENTS || !tally_add(elements > 0 ? (size_t)elements : 0, 0)) return NULL;
    return g_plain->createArray(task, elements);
}
static void *create_string_capped(const redisReadTask *task, char *str, size_t len) {
    return tally_add(0, len) ? g_plain->createString(task, str, len) : NULL;
}
static void *create_integer_capped(const redisReadTask *task, long long v) {
    return tally_add(0, 0) ? g_plain->createInteger(task, v) : NULL;
}
static void *create_nil_capped(const redisReadTask *task) { return tally_add(0, 0) ? g_plain->createNil(task) : NULL; }

static void guard_reader(redisContext *ctx) {
    pthread_mutex_lock(&g_guard_mu);
    if (!g_plain) {
        g_plain = ctx->reader->fn;
        g_capped = *g_plain;
        g_capped.createArray = create_array_capped;
        g_capped.createString = create_string_capped;
        g_capped.createInteger = create_integer_capped;
        g_capped.createNil = create_nil_capped;
    }
    pthread_mutex_unlock(&g_guard_mu);
    if (ctx->reader->fn == g_plain) ctx->reader->fn = &g_capped;
}
#endif

/* A reader failure the tally caused, named as such (hiredis says "Out of memory"). */
static int tally_failed(redisContext *ctx) {
    if (g_tally.over == 1)
        snprintf(ctx->errstr, sizeof ctx->errstr, "a reply of more than %d elements", REPLY_MAX_ELEMENTS);
    else if (g_tally.over == 2)
        snprintf(ctx->errstr, sizeof ctx->errstr, "a reply of more than %zu bytes", g_tally.max_bytes);
    if (g_tally.over) ctx->err = REDIS_ERR_PROTOCOL;
    return -1;
}

/* The next reply on ctx by due_ns (kvs_redis_reply_by); *socket_ms (may be
 * NULL) tracks the socket timeout in effect; max_bytes (0: none) bounds the
 * bytes a reply may hold unread. */
static int reply_by(redisContext *ctx, int *socket_ms, int64_t due_ns, size_t max_bytes, void **out) {
    *out = NULL;
    tally_reset(max_bytes);
    if (kvs_redis_flush(ctx)) return -1;
    if (redisGetReplyFromReader(ctx, out) != REDIS_OK) return tally_failed(ctx);
    int late = -1; /* past the deadline: the bytes the socket held then, which may still be read */
    while (!*out) {
        if (max_bytes && ctx->reader->len - ctx->reader->pos > max_bytes) {
            ctx->err = REDIS_ERR_PROTOCOL;
            snprintf(ctx->errstr, sizeof ctx->errstr, "a reply of more than %zu bytes", max_bytes);
            return -1;
        }
        const int64_t left_ms = (due_ns - kvs_redis_mono_ns() + 999999) / 1000000;
        if (left_ms <= 0) {
            /* Past the deadline, the bytes the socket held at that moment
             * are still read (no more: a server sending faster than we parse
             * would hold the call): a reply that came while this thread read
             * another node's, or sent to one that was not reading, is no
             * timeout. With one cluster node asleep, the healthy nodes'
             * answered writes had been counted as failed, and their
             * connections dropped. */
            if (late < 0 && ioctl(ctx->fd, FIONREAD, &late) != 0) late = 0;
            if (late <= 0) {
                ctx->err = REDIS_ERR_IO; /* as hiredis reports a socket timeout (counted as one at release) */
                snprintf(ctx->errstr, sizeof ctx->errstr, "%s", strerror(EAGAIN));
                return -1;
            }
            const size_t had = ctx->reader->len; /* the feed appends; only taking a reply compacts */
            if (redisBufferRead(ctx) != REDIS_OK) return -1;
            late -= (int)(ctx->reader->len - had);
            if (redisGetReplyFromReader(ctx, out) != REDIS_OK) return tally_failed(ctx);
            continue;
        } else {
            const int ms = left_ms < 600000 ? (int)left_ms : 600000;
            if (!socket_ms || *socket_ms != ms) {
                if (redisSetTimeout(ctx, ms_tv(ms)) != REDIS_OK) return -1;
                if (socket_ms) *socket_ms = ms;
            }
        }
        if (redisBufferRead(ctx) != REDIS_OK) return -1;
        if (redisGetReplyFromReader(ctx, out) != REDIS_OK) return tally_failed(ctx);
    }
    return 0;
}

int kvs_redis_reply_by(kvs_redis_conn *c, int64_t due_ns, redisReply **out) {
    return reply_by(c->ctx, &c->socket_ms, due_ns, c->policy->max_reply_bytes, (void **)out);
}

redisReply *kvs_redis_command_by(kvs_redis_conn *c, int64_t due_ns, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int ok = redisvAppendCommand(c->ctx, fmt, ap) == REDIS_OK;
    va_end(ap);
    redisReply *r = NULL;
    if (ok && kvs_redis_reply_by(c, due_ns, &r) && r) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

int64_t kvs_redis_due_ns(const kvs_redis_policy *p, uint64_t bytes) {
    return kvs_redis_mono_ns() + (int64_t)kvs_redis_budget_ms(p, bytes) * 1000000;
}

/* Why a command that must answer +OK did not (r its reply, if any): the
 * server's words name the command; a transport failure says so in the
 * transport's words (kvs_redis_why_is_transport): a SELECT that timed out
 * had read "SELECT 7: Resource temporarily unavailable", reported first as
 * the server's own refusal, and kept after Redis was back. */
static void why_not_ok(const redisContext *ctx, const redisReply *r, const char *what, char *why, size_t why_cap) {
    if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(why, why_cap, "%s: %.*s", what, (int)r->len, r->str);
    else if (ctx->err == REDIS_ERR_IO && !strcmp(ctx->errstr, strerror(EAGAIN)))
        snprintf(why, why_cap, "no answer in time: connected, but the server did not answer %s (stalled, paused or "
                 "overloaded)", what);
    else if (r) /* (the server's doing, not the transport's) */
        snprintf(why, why_cap, "%s: a reply of type %d where a status was due", what, r->type);
    else
        snprintf(why, why_cap, "the connection failed mid-command (%s: %s)", what,
                 ctx->errstr[0] ? ctx->errstr : "no answer");
}

/* A reply that must be +OK (AUTH, SELECT), within timeout_ms; on failure
 * why names the command (what, never its arguments: a password) and the
 * server's error or the connection's (why_not_ok). */
static int command_ok(redisContext *ctx, int timeout_ms, const char *what, int argc, const char **argv, char *why,
                      size_t why_cap) {
    redisReply *r = NULL;
    const int ok = redisAppendCommandArgv(ctx, argc, argv, NULL) == REDIS_OK &&
                   reply_by(ctx, NULL, kvs_redis_mono_ns() + (int64_t)timeout_ms * 1000000, 1 << 16, (void **)&r) == 0 &&
                   r->type == REDIS_REPLY_STATUS;
    if (!ok) why_not_ok(ctx, r, what, why, why_cap);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

static redisContext *connect_node(kvs_redis_conn *c) {
    const kvs_redis_policy *p = c->policy;
    redisContext *ctx = redisConnectWithTimeout(c->host, c->port, ms_tv(p->timeout_ms));
    if (!ctx) {
        snprintf(c->why_down, sizeof c->why_down, "not reachable (out of memory)");
        return NULL;
    }
    if (ctx->err || redisSetTimeout(ctx, ms_tv(p->timeout_ms)) != REDIS_OK) { /* the writes' */
        snprintf(c->why_down, sizeof c->why_down, "not reachable (%s)", ctx->errstr[0] ? ctx->errstr : "connect failed");
        goto fail;
    }
    guard_reader(ctx);
    if (p->password) {
        const char *argv[3] = {"AUTH", p->user ? p->user : p->password, p->password};
        if (command_ok(ctx, p->timeout_ms, "AUTH", p->user ? 3 : 2, argv, c->why_down, sizeof c->why_down)) goto fail;
    }
    if (p->db) {
        char db[16], what[24];
        snprintf(db, sizeof db, "%d", p->db);
        snprintf(what, sizeof what, "SELECT %d", p->db);
        const char *argv[2] = {"SELECT", db};
        if (command_ok(ctx, p->timeout_ms, what, 2, argv, c->why_down, sizeof c->why_down)) goto fail;
    }
    if (redisSetTimeout(ctx, ms_tv(p->timeout_ms)) != REDIS_OK) { /* acquire's socket_ms */
        snprintf(c->why_down, sizeof c->why_down, "not reachable (setting its timeout failed)");
        goto fail;
    }
    c->why_down[0] = 0;
    return ctx;
fail:
    redisFree(ctx);
    return NULL;
}

int kvs_redis_budget_ms(const kvs_redis_policy *p, uint64_t bytes) {
    const int64_t cap = 600000;
    int64_t ms = p->timeout_ms + (p->min_mb_per_s > 0 ? (int64_t)(bytes / (uint64_t)p->min_mb_per_s / 1000) : 0);
    return (int)(ms < cap ? ms : cap);
}

int kvs_redis_conn_set_timeout(kvs_redis_conn *c, int ms) {
    if (ms < 1) ms = 1;
    if (!c->ctx || ms == c->socket_ms) return 0;
    if (redisSetTimeout(c->ctx, ms_tv(ms)) != REDIS_OK) return -1;
    c->socket_ms = ms;
    return 0;
}

/* After a failure: back off, or open the breaker. Called with mu held. */
static void note_failure(kvs_redis_conn *c) {
    const kvs_redis_policy *p = c->policy;
    int64_t now = kvs_redis_mono_ns();
    c->fails++;
    if (c->fails >= p->breaker_failures) {
        c->retry_at_ns = now + (int64_t)p->breaker_open_ms * 1000000;
        if (!atomic_exchange(&c->breaker_open, 1)) atomic_fetch_add(&c->n.breaker_opens, 1);
    } else {
        c->retry_at_ns = now + (int64_t)c->backoff_ms * 1000000;
        c->backoff_ms = c->backoff_ms * 2 > p->backoff_max_ms ? p->backoff_max_ms : c->backoff_ms * 2;
    }
}

static void block_sigpipe(kvs_redis_conn *c) {
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &c->saved_mask);
    sigpending(&pending);
    c->pipe_was_pending = sigismember(&pending, SIGPIPE);
}

static void unblock_sigpipe(kvs_redis_conn *c) {
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigpending(&pending);
    if (!c->pipe_was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &c->saved_mask, NULL);
}

/* Gives up the conn without having used it. */
static redisContext *not_held(kvs_redis_conn *c) {
    unblock_sigpipe(c);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

redisContext *kvs_redis_conn_acquire(kvs_redis_conn *c) {
    pthread_mutex_lock(&c->mu);
    block_sigpipe(c);
    if (c->ctx) return c->ctx;
    if (kvs_redis_mono_ns() < c->retry_at_ns) {
        atomic_fetch_add(&c->n.skipped, 1);
        if (!c->why_down[0]) snprintf(c->why_down, sizeof c->why_down, "not reachable (skipped: it failed just before)");
        return not_held(c);
    }
    c->ctx = connect_node(c);
    if (!c->ctx) {
        atomic_fetch_add(&c->n.connect_fails, 1);
        note_failure(c);
        return not_held(c);
    }
    atomic_fetch_add(&c->n.connects, 1);
    c->socket_ms = c->policy->timeout_ms;
    return c->ctx;
}

void kvs_redis_conn_release(kvs_redis_conn *c, int ok) {
    if (ok && c->ctx && c->socket_ms != c->policy->timeout_ms && kvs_redis_conn_set_timeout(c, c->policy->timeout_ms))
        ok = 0; /* a context left with a budget's timeout would wait too long next time */
    if (ok) {
        c->fails = 0;
        c->backoff_ms = c->policy->backoff_min_ms;
        atomic_store(&c->breaker_open, 0);
    } else {
        atomic_fetch_add(&c->n.op_fails, 1);
        /* hiredis reports a socket timeout as an I/O error with strerror(EAGAIN).
         * Said so for why_down: a stalled server had been "not reachable"
         * (the reason a skip during the backoff wrote) */
        if (c->ctx && c->ctx->err == REDIS_ERR_IO && !strcmp(c->ctx->errstr, strerror(EAGAIN))) {
            atomic_fetch_add(&c->n.timeouts, 1);
            snprintf(c->why_down, sizeof c->why_down,
                     "no answer in time: connected, but the server did not reply (stalled, paused or overloaded)");
        } else if (c->ctx && c->ctx->err) {
            snprintf(c->why_down, sizeof c->why_down, "the connection failed mid-command (%s)", c->ctx->errstr);
        }
        if (c->ctx) redisFree(c->ctx);
        c->ctx = NULL;
        note_failure(c);
    }
    unblock_sigpipe(c);
    pthread_mutex_unlock(&c->mu);
}

void kvs_redis_conn_why_down(kvs_redis_conn *c, char *out, size_t cap) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, cap, "%s", c->why_down[0] ? c->why_down : "not reachable");
    pthread_mutex_unlock(&c->mu);
}

int kvs_redis_why_is_transport(const char *why) {
    static const char *const ours[] = {"not reachable", "no answer in time", "the connection failed"};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        if (!strncmp(why, ours[i], strlen(ours[i]))) return 1;
    return 0;
}

void kvs_redis_conn_last_failure(kvs_redis_conn *c, char *out, size_t cap) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, cap, "%s", c->why_down);
    pthread_mutex_unlock(&c->mu);
}

int kvs_redis_flush(redisContext *ctx) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(ctx, &done) != REDIS_OK) return -1;
    return 0;
}

int kvs_redis_parse_hostport(const char *s, size_t len, char *host, size_t host_cap, int *port) {
    const char *colon = NULL;
    for (size_t i = len; i-- > 0;)
        if (s[i] == ':') {
            colon = s + i;
            break;
        }
    if (!colon || colon == s || colon + 1 == s + len) return -1;
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= host_cap) return -1;
    long p = 0;
    for (const char *q = colon + 1; q < s + len; q++) {
        if (*q < '0' || *q > '9') return -1;
        p = p * 10 + (*q - '0');
        if (p > 65535) return -1;
    }
    if (p <= 0) return -1;
    memcpy(host, h, hlen);
    host[hlen] = 0;
    *port = (int)p;
    return 0;
}
