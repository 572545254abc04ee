/*
 * One connection to one Redis node, with the failure policy of the Redis
 * tiers: every operation has a deadline, a failed connection is dropped and
 * re-established later with exponential backoff, and after repeated
 * failures a circuit breaker keeps the node "open" (every operation skipped
 * at once, as a miss) for a while before one trial operation.
 *
 *   state:   connected --error--> down (retry at now + backoff, doubling)
 *            down --fails >= breaker_failures--> open (retry at now + breaker_open_ms)
 *            down/open --retry time reached--> one caller reconnects (half-open)
 *            any --success--> connected, fails = 0, backoff = min
 *
 * A conn is used by one thread at a time: kvs_redis_conn_acquire locks it
 * and returns the hiredis context (connected, authenticated, db selected,
 * timeouts set), or NULL when the node is down / the breaker is open / the
 * connect failed (the conn is then not held). kvs_redis_conn_release
 * unlocks it, ok = 0 when the operation failed (the context is dropped: a
 * pipeline cut in the middle cannot be resumed).
 *
 * While a conn is held, SIGPIPE is blocked in the holding thread and a
 * SIGPIPE raised by writing to a dead socket is consumed at release (a
 * library must not kill its process, nor change its signal handlers).
 *
 * Budgets. A pipeline of large values cannot answer within a small fixed
 * timeout: Redis runs every command of a pipeline before it writes the
 * first reply byte, so the wait for that byte grows with the bytes asked
 * for. bench/tiers, one read of a 4K-token prompt's 63 chunks (92 MB) on
 * the shared 2-core VM (bench/results/tiers.md): first byte 151 ms and
 * whole transfer 335 ms at load 8.7; with 2 more busy loops up to 1.2 s and
 * 1.8 s (19 ms per MB); a fixed 50 ms served none of those reads. So an
 * operation that moves B bytes gets a budget of timeout_ms +
 * B / min_mb_per_s (kvs_redis_budget_ms): small operations keep
 * timeout_ms; that 92 MB read gets 3.7 s at the default 25 MB/s floor (2x
 * the slowest transfer measured); a Redis that does not answer costs at
 * most the budget (then backoff and breaker as above), less than computing
 * the chunks it would have served even at the best prefill speed measured
 * on this VM (4,096 tokens at 884 tok/s: 4.6 s, README).
 *
 * The password is kept only in memory; it is never printed (messages name
 * host:port and user, never the password).
 */
#ifndef KVS_KV_REDIS_CONN_H
#define KVS_KV_REDIS_CONN_H

#include <hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

/* Room for "redis HOST:PORT: <why_down>" (a host of up to 255 bytes, a
 * reason of up to 191): at 256 a long but valid host name had cut the
 * reason off ("...a.a.b:6379: n"). */
#define KVS_REDIS_WHY_BYTES 512

/* How every connection of a tier behaves (owned by the tier, shared). */
typedef struct kvs_redis_policy {
    int timeout_ms;         /* per operation: connect, and each socket read/write of a reply (50) */
    int min_mb_per_s;       /* slowest transfer a large batch may have: its budget grows by 1/this per byte (25) */
    int backoff_min_ms;     /* first reconnect delay after a failure (20) */
    int backoff_max_ms;     /* cap of the doubling delay (1000) */
    int breaker_failures;   /* consecutive failures that open the breaker (3) */
    int breaker_open_ms;    /* how long an open breaker skips the node (2000) */
    const char *user;       /* NULL: AUTH with the password only (or no AUTH) */
    const char *password;   /* NULL: no AUTH */
    int db;                 /* SELECT (single node only; a cluster has db 0) */
    size_t max_reply_bytes; /* a reply whose unread bytes pass this fails at once (0: no bound) */
} kvs_redis_policy;

void kvs_redis_policy_defaults(kvs_redis_policy *p);

/* Counters of one conn (monotonic). */
typedef struct kvs_redis_conn_counters {
    _Atomic uint64_t connects;      /* successful connects (the first included) */
    _Atomic uint64_t connect_fails;
    _Atomic uint64_t op_fails;      /* operations that failed (I/O, timeout, protocol) */
    _Atomic uint64_t timeouts;      /* of those, timeouts */
    _Atomic uint64_t skipped;       /* operations skipped: node down (backoff) or breaker open */
    _Atomic uint64_t breaker_opens;
} kvs_redis_conn_counters;

typedef struct kvs_redis_conn {
    char host[256];
    int port;
    const kvs_redis_policy *policy;
    pthread_mutex_t mu;
    redisContext *ctx;     /* NULL while disconnected */
    int64_t retry_at_ns;   /* CLOCK_MONOTONIC: no connect before this */
    int fails;             /* consecutive failures */
    int backoff_ms;
    _Atomic int breaker_open;
    int socket_ms;         /* socket timeout in effect on ctx (timeout_ms unless a budget is set) */
    sigset_t saved_mask;   /* the holder's signal mask (SIGPIPE blocked while held) */
    int pipe_was_pending;
    char why_down[192];    /* the last connect's failure, the server's words where it gave some
                            * ("AUTH: WRONGPASS ...", "SELECT 99: ERR DB index is out of range"),
                            * "" after a connect that worked; under mu (kvs_redis_conn_why_down) */
    kvs_redis_conn_counters n;
} kvs_redis_conn;

void kvs_redis_conn_init(kvs_redis_conn *c, const char *host, int port, const kvs_redis_policy *policy);
void kvs_redis_conn_destroy(kvs_redis_conn *c);

/* See the state machine above. Returns NULL (not held) if the node is
 * skipped or cannot be reached. */
redisContext *kvs_redis_conn_acquire(kvs_redis_conn *c);
void kvs_redis_conn_release(kvs_redis_conn *c, int ok);
/* Why the node is down, for a message after acquire returned NULL (copied
 * under the lock: another thread may be connecting). */
void kvs_redis_conn_why_down(kvs_redis_conn *c, char *out, size_t cap);
/* The last connect's failure as kept ("" after one that worked). */
void kvs_redis_conn_last_failure(kvs_redis_conn *c, char *out, size_t cap);
/* 1 if a why_down text is this file's account of the transport (not
 * reachable, no answer in time, a connection that failed mid-command),
 * not the server's words (AUTH / SELECT refusals): those rank first. */
int kvs_redis_why_is_transport(const char *why);

/* The budget of an operation that moves `bytes` (request and reply):
 * timeout_ms + bytes / min_mb_per_s, in ms (capped at 10 minutes). */
int kvs_redis_budget_ms(const kvs_redis_policy *p, uint64_t bytes);

/* Sets the socket timeout of the held conn's context to ms (each later
 * socket read or write waits at most that long); release puts timeout_ms
 * back. 0 or -1. */
int kvs_redis_conn_set_timeout(kvs_redis_conn *c, int ms);

/* The next reply on the held conn, by due_ns (kvs_redis_mono_ns): pending
 * output is sent, then before each socket read the timeout is set to what
 * is left, so a whole reply takes at most until due_ns however the server
 * paces its bytes (redisGetReply's timeout bounds each read, not the reply:
 * a server sending one byte every 30 ms held a 50 ms budget for 92 s over
 * 3 KB). 0 and *out, or -1 with ctx->err set (a passed deadline reads as a
 * socket timeout); *out (NULL on -1) is the caller's to free. */
int kvs_redis_reply_by(kvs_redis_conn *c, int64_t due_ns, redisReply **out);

/* redisCommand on the held conn, its reply by due_ns: the reply or NULL. */
redisReply *kvs_redis_command_by(kvs_redis_conn *c, int64_t due_ns, const char *fmt, ...);

/* now + kvs_redis_budget_ms(p, bytes), in kvs_redis_mono_ns time. */
int64_t kvs_redis_due_ns(const kvs_redis_policy *p, uint64_t bytes);

/* Sends everything appended to ctx (redisAppendCommand*) without waiting
 * for replies, so that several nodes work on their pipelines at once.
 * 0 or -1 (ctx->err set). */
int kvs_redis_flush(redisContext *ctx);

/* CLOCK_MONOTONIC nanoseconds. */
int64_t kvs_redis_mono_ns(void);

/* Parses "host:port" (IPv4 name or address; "[v6]:port"). 0 or -1. */
int kvs_redis_parse_hostport(const char *s, size_t len, char *host, size_t host_cap, int *port);

#endif
