/* One Redis connection with deadlines, backoff and a circuit breaker (redis_conn.h). */
#include "kv/redis_conn.h"

#include <errno.h>
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

/* The next reply on ctx by due_ns (kvs_redis_reply_by); *socket_ms (may be
 * NULL) tracks the socket timeout in effect. */
static int reply_by(redisContext *ctx, int *socket_ms, int64_t due_ns, void **out) {
    *out = NULL;
    if (kvs_redis_flush(ctx) || redisGetReplyFromReader(ctx, out) != REDIS_OK) return -1;
    while (!*out) {
        const int64_t left_ms = (due_ns - kvs_redis_mono_ns() + 999999) / 1000000;
        if (left_ms <= 0) { /* as hiredis reports a socket timeout (counted as one at release) */
            ctx->err = REDIS_ERR_IO;
            snprintf(ctx->errstr, sizeof ctx->errstr, "%s", strerror(EAGAIN));
            return -1;
        }
        const int ms = left_ms < 600000 ? (int)left_ms : 600000;
        if (!socket_ms || *socket_ms != ms) {
            if (redisSetTimeout(ctx, ms_tv(ms)) != REDIS_OK) return -1;
            if (socket_ms) *socket_ms = ms;
        }
        if (redisBufferRead(ctx) != REDIS_OK || redisGetReplyFromReader(ctx, out) != REDIS_OK) return -1;
    }
    return 0;
}

int kvs_redis_reply_by(kvs_redis_conn *c, int64_t due_ns, redisReply **out) {
    return reply_by(c->ctx, &c->socket_ms, due_ns, (void **)out);
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

/* A reply that must be +OK (AUTH, SELECT), within timeout_ms. */
static int command_ok(redisContext *ctx, int timeout_ms, int argc, const char **argv) {
    redisReply *r = NULL;
    int ok = redisAppendCommandArgv(ctx, argc, argv, NULL) == REDIS_OK &&
             reply_by(ctx, NULL, kvs_redis_mono_ns() + (int64_t)timeout_ms * 1000000, (void **)&r) == 0 &&
             r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

static redisContext *connect_node(kvs_redis_conn *c) {
    const kvs_redis_policy *p = c->policy;
    redisContext *ctx = redisConnectWithTimeout(c->host, c->port, ms_tv(p->timeout_ms));
    if (!ctx) return NULL;
    if (ctx->err || redisSetTimeout(ctx, ms_tv(p->timeout_ms)) != REDIS_OK) goto fail; /* the writes' */
    if (p->password) {
        const char *argv[3] = {"AUTH", p->user ? p->user : p->password, p->password};
        if (command_ok(ctx, p->timeout_ms, p->user ? 3 : 2, argv)) goto fail;
    }
    if (p->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", p->db);
        const char *argv[2] = {"SELECT", db};
        if (command_ok(ctx, p->timeout_ms, 2, argv)) goto fail;
    }
    if (redisSetTimeout(ctx, ms_tv(p->timeout_ms)) != REDIS_OK) goto fail; /* acquire's socket_ms */
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
        /* hiredis reports a socket timeout as an I/O error with strerror(EAGAIN) */
        if (c->ctx && c->ctx->err == REDIS_ERR_IO && !strcmp(c->ctx->errstr, strerror(EAGAIN)))
            atomic_fetch_add(&c->n.timeouts, 1);
        if (c->ctx) redisFree(c->ctx);
        c->ctx = NULL;
        note_failure(c);
    }
    unblock_sigpipe(c);
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
