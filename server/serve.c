/*
 * `kvstitch serve`: options, then
 *
 *   HTTP up first (GET /health says 503 "loading" meanwhile)
 *   model, cache (RAM budget + optional directory and Redis tier), scheduler
 *   with N slots
 *   ready: 200
 *   SIGTERM / SIGINT: stop admitting (503), let running requests finish for
 *   --drain-timeout seconds (a second signal: not a moment longer), cancel
 *   the rest, stop HTTP, close the cache
 *   (every stored entry is already on disk: the store writes through; the
 *   Redis writer's queue is flushed, 10 s and up to 10 s more as the cache
 *   closes, and what did not reach Redis is said)
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/cli.h"
#include "server.h"

/* After the scheduler's drain, how long the replies of finished or cancelled
 * jobs may take to be written before HTTP stops anyway (a client that never
 * reads its reply must not hold the exit up). */
#define DRAIN_REPLY_GRACE_MS 5000.0

/* How long a client may leave a reply it asked for unread by default (MHD's
 * clock does not run while a handler computes the reply or a stream waits
 * for its next token: only while the socket takes no byte). It had been
 * 600 s: a stream's client that stopped reading held its connection, its
 * thread and its job's text that long (and 64 such from one address every
 * place it may have). */
#define REPLY_TIMEOUT_S 60

typedef struct serve_opts {
    const char *model, *host, *cache_dir, *api_key_file, *alias, *kv_type_name, *chat_template;
    kvs_kv_type kv_type;
    int port, slots, threads, n_ctx, max_queue, prefill_chunk, max_tokens, read_timeout, reply_timeout, conns_per_ip;
    unsigned long long cache_max_bytes, cache_dir_max_bytes, max_body;
    double drain_s;
    cli_redis_opts redis; /* the shared Redis tier, as generate / warm / cache take it */
} serve_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvstitch serve -m MODEL [options]\n"
            "  OpenAI-compatible HTTP server; every request shares one chunk KV cache.\n"
            "  -m, --model F          GGUF model (required)\n"
            "  --host ADDR            IPv4 address to bind (127.0.0.1)\n"
            "  --port N               TCP port (8080; 0 = any free port, printed)\n"
            "  --slots N              sequences decoded together in one batched forward (4)\n"
            "  -t, --threads N        threads per forward pass (0 = all cores)\n"
            "  --ctx N                context window per slot (0 = the model's, at most 8192)\n"
            "  --kv-type T            KV cache type: f16 (default), f32, q8 (8-bit: half the memory,\n"
            "                         integer attention, faster at long context; the AVX-512\n"
            "                         decode keeps a second copy of the rows it reads)\n"
            "  --cache-dir DIR        persist the chunk cache in DIR (shared with the CLI)\n"
            "  --cache-max-bytes N    RAM budget of the chunk cache (0 = 1/4 of RAM)\n"
            "  --cache-dir-max-bytes N  bound on --cache-dir's bytes (0 = half the space free for it;\n"
            "                         what generate / warm call --cache-max-bytes)\n"
            "  --api-key-file F       require 'Authorization: Bearer KEY' (first line of F)\n"
            "  --max-queue N          queued requests beyond which new ones get 429 (64)\n"
            "  --max-body N           request body limit in bytes, 413 beyond (8388608; a larger\n"
            "                         Content-Length is answered before the body is read)\n"
            "  --read-timeout S       close a connection silent for S seconds before its request\n"
            "                         (headers, body) is complete, or between requests (10)\n"
            "  --reply-timeout S      close a connection whose reply (or stream) the client has taken\n"
            "                         no byte of for S seconds; a stream's generation stops (60)\n"
            "  --max-conns-per-ip N   open connections from one address, more are closed at once\n"
            "                         (64 of the 512 in all; 0 = no limit, e.g. behind a proxy)\n"
            "  --prefill-chunk N      prompt tokens per prefill step between decode steps (256)\n"
            "  --max-tokens N         default max_tokens of a request (256)\n"
            "  --drain-timeout S      on SIGTERM, seconds to let running requests finish (30; a second signal\n"
            "                         cancels them at once)\n"
            "  --alias NAME           model id listed by /v1/models (the file's base name)\n"
            "  --chat-template F      chat template family of chat requests: chatml, qwen3, llama3,\n"
            "                         llama2, gemma (default: the one the file's template names;\n"
            "                         for a file without one, or one not recognised)\n"
            CLI_REDIS_USAGE);
}

/* A number option's value: decimal, no white space around it, an integer
 * unless frac, within [lo, hi] (strtod alone had taken " 1", 1.5 for a
 * count, nan and 1e300). 0, or -1 after saying what is wrong. */
/* Decimal digits, with one '.' between digits where frac: what the other
 * commands take (strtod had let "1e3" and "0x2" through, --port 1e3
 * listening on 1000). */
static int decimal(const char *v, int frac) {
    int digits = 0, dot = 0;
    for (const char *p = v; *p; p++) {
        if (*p >= '0' && *p <= '9') digits++;
        else if (*p == '.' && frac && !dot && digits && p[1] >= '0' && p[1] <= '9') dot = 1;
        else return 0;
    }
    return digits > 0;
}

static int opt_number(const char *opt, const char *v, double lo, double hi, int frac, double *out) {
    const double d = decimal(v, frac) ? strtod(v, NULL) : NAN;
    if (isnan(d) || d < lo || d > hi) {
        fprintf(stderr, "kvstitch serve: %s: '%s' is not %s in [%.*f, %.*f]\n", opt, v,
                frac ? "a decimal number" : "a decimal integer", 0, lo, 0, hi);
        return -1;
    }
    *out = d;
    return 0;
}

/* Marks the option field at offset off as given; -1 after saying so when it
 * was given before, under either spelling (-m / --model: the last had
 * silently won, as if the first were not there). */
static int given_once(const char *opt, size_t off, size_t *seen, int *n_seen) {
    for (int k = 0; k < *n_seen; k++)
        if (seen[k] == off) {
            fprintf(stderr, "kvstitch serve: %s given twice (each option at most once)\n", opt);
            return -1;
        }
    seen[(*n_seen)++] = off;
    return 0;
}

static int parse_opts(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->slots = 4;
    o->max_queue = 64;
    o->prefill_chunk = 256;
    o->max_tokens = 256;
    o->max_body = 8u << 20;
    o->drain_s = 30;
    o->read_timeout = 10;
    o->reply_timeout = REPLY_TIMEOUT_S;
    o->conns_per_ip = 64;
    size_t seen[64];
    int n_seen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { /* checked as every command's output is */
            usage(stdout);
            if (fflush(stdout) || ferror(stdout)) {
                fprintf(stderr, "kvstitch: cannot write the output: %s\n", strerror(errno));
                exit(1);
            }
            exit(0);
        }
        const int rc = cli_redis_option("serve", a, i + 1 < argc ? argv[i + 1] : NULL, &o->redis);
        if (rc < 0) return -1;
        if (rc > 0) {
            i++;
            continue;
        }
#define ONCE(field) if (given_once(a, offsetof(serve_opts, field), seen, &n_seen)) return -1;
#define STR(flag, field) if (!strcmp(a, flag)) { if (!v) goto missing; ONCE(field) o->field = v; i++; continue; }
#define NUM(flag, field, lo, hi, frac) if (!strcmp(a, flag)) { double d; \
        if (!v) goto missing; else if (opt_number(a, v, lo, hi, frac, &d)) return -1; ONCE(field) o->field = d; i++; \
        continue; }
        STR("-m", model) STR("--model", model) STR("--host", host) STR("--cache-dir", cache_dir)
        STR("--api-key-file", api_key_file) STR("--alias", alias) STR("--kv-type", kv_type_name)
        STR("--chat-template", chat_template)
        NUM("--port", port, 0, 65535, 0) NUM("--slots", slots, 1, 64, 0) NUM("-t", threads, 0, KVS_MAX_THREADS, 0)
        NUM("--threads", threads, 0, KVS_MAX_THREADS, 0) NUM("--ctx", n_ctx, 0, 1 << 24, 0)
        NUM("--max-queue", max_queue, 1, 1 << 20, 0) NUM("--prefill-chunk", prefill_chunk, 1, 1 << 20, 0)
        NUM("--max-tokens", max_tokens, 1, 1 << 24, 0) NUM("--cache-max-bytes", cache_max_bytes, 0, 9e18, 0)
        NUM("--cache-dir-max-bytes", cache_dir_max_bytes, 0, 9e18, 0)
        NUM("--max-body", max_body, 1024, 1e15, 0) NUM("--drain-timeout", drain_s, 0, 86400, 1)
        NUM("--read-timeout", read_timeout, 1, 86400, 0) NUM("--reply-timeout", reply_timeout, 1, 86400, 0) NUM("--max-conns-per-ip", conns_per_ip, 0, SRV_MAX_CONNECTIONS, 0)
#undef STR
#undef NUM
#undef ONCE
        fprintf(stderr, "kvstitch serve: unknown option '%s' (see --help)\n", a);
        return -1;
    missing:
        fprintf(stderr, "kvstitch serve: %s needs a value\n", a);
        return -1;
    }
    if (!o->model) {
        fprintf(stderr, "kvstitch serve: -m MODEL is required\n");
        return -1;
    }
    /* (refused here, before the port is taken; the library takes "" as none given: detected) */
    if (o->chat_template && kvs_chat_family_check(o->chat_template)) {
        fprintf(stderr, "kvstitch serve: --chat-template: %s\n", kvs_last_error());
        return -1;
    }
    if (o->alias && !o->alias[0]) { /* /v1/models had listed a model with no id */
        fprintf(stderr, "kvstitch serve: --alias is empty\n");
        return -1;
    }
    if (o->kv_type_name && kvs_kv_type_parse(o->kv_type_name, &o->kv_type)) {
        fprintf(stderr, "kvstitch serve: --kv-type: %s\n", kvs_last_error());
        return -1;
    }
    if (o->redis.key_file && !o->cache_dir && !cli_redis_given(&o->redis)) {
        fprintf(stderr, "kvstitch serve: --cache-key-file goes with --cache-dir or --redis / --redis-cluster\n");
        return -1;
    }
    return cli_redis_finish("serve", &o->redis) == -1 ? 0 : -1;
}

/* path opened for reading if it is a regular file (O_NONBLOCK: a FIFO
 * opens at once and is refused), else -1 after saying why, naming opt. */
static int open_regular(const char *opt, const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        fprintf(stderr, "kvstitch serve: %s %s: cannot open: %s\n", opt, path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "kvstitch serve: %s %s: not a regular file\n", opt, path);
        close(fd);
        return -1;
    }
    return fd;
}

/* What can be refused before the port is taken (exit 2, as every command's
 * bad arguments): a model or cache dir that cannot be one had been found
 * only after "listening on", with exit 1. */
static int check_paths(const serve_opts *o) {
    int fd = open_regular("--model", o->model);
    if (fd < 0) return -1;
    close(fd);
    struct stat st;
    if (o->cache_dir && stat(o->cache_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kvstitch serve: --cache-dir %s: not a directory\n", o->cache_dir);
        return -1;
    }
    if (o->redis.password_file) { /* (a FIFO had held the start, SIGTERM masked already) */
        if ((fd = open_regular("--redis-password-file", o->redis.password_file)) < 0) return -1;
        close(fd);
    }
    return 0;
}

/* The API key: the first line of a regular file (a FIFO had blocked the
 * start, a directory had read as an empty key), whole: a key longer than
 * the buffer is refused, not cut (a cut one had been the key that worked).
 * Spaces and tabs around it are not part of it, as around the client's
 * (authorized): "secret " in the file had locked every client out. */
#define API_KEY_MAX 4096
static char *read_key(const char *path) {
    int fd = open_regular("--api-key-file", path);
    if (fd < 0) return NULL;
    char buf[API_KEY_MAX + 2];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t got = read(fd, buf + n, sizeof buf - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    size_t line = 0; /* up to the first line end among the n bytes (strcspn stops at a NUL, which must be seen) */
    while (line < n && buf[line] != '\r' && buf[line] != '\n') line++;
    if (line > API_KEY_MAX) {
        fprintf(stderr, "kvstitch serve: --api-key-file %s: the key (its first line) is longer than %d bytes\n", path,
                API_KEY_MAX);
        return NULL;
    }
    buf[line] = 0;
    if (memchr(buf, 0, line)) {
        fprintf(stderr, "kvstitch serve: --api-key-file %s: the first line (the key) holds a NUL byte\n", path);
        return NULL;
    }
    while (line && (buf[line - 1] == ' ' || buf[line - 1] == '\t')) buf[--line] = 0;
    const char *key = buf + strspn(buf, " \t");
    if (!*key) {
        fprintf(stderr, "kvstitch serve: --api-key-file %s: the first line (the key) is empty\n", path);
        return NULL;
    }
    return strdup(key);
}

/* A cache dir this process cannot list or write still opens (entries are
 * read by key), but nothing is stored there: each refused write only
 * counts in /metrics (kvstitch_cache_disk_write_errors_total). Said once
 * at start, where an operator looks (it had been silent). */
static void warn_unwritable_cache_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == EACCES || errno == EPERM)
            fprintf(stderr, "kvstitch serve: warning: --cache-dir %s cannot be listed (%s): its entries are read by key, "
                            "nothing is written to it\n", dir, strerror(errno));
        return;
    }
    closedir(d);
    if (faccessat(AT_FDCWD, dir, W_OK, AT_EACCESS))
        fprintf(stderr, "kvstitch serve: warning: --cache-dir %s is not writable (%s): its entries are read, nothing "
                        "is written to it\n", dir, strerror(errno));
}

static int load(srv_server *s, const serve_opts *o) {
    kvs_model_params mp = kvs_model_default_params();
    mp.chat_template = o->chat_template;
    int st = kvs_model_load(o->model, mp, &s->model);
    if (st) return fprintf(stderr, "kvstitch serve: %s: %s\n", o->model, kvs_last_error()), st;
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = o->cache_dir;
    cp.budget_bytes = o->cache_max_bytes;
    cp.cache_max_bytes = o->cache_dir_max_bytes; /* (the directory had no bound but the default) */
    cp.kv_type = o->kv_type;
    cli_redis_apply(&o->redis, &cp);
    if ((st = kvs_cache_open(s->model, cp, &s->cache)))
        return fprintf(stderr, "kvstitch serve: cache: %s\n", kvs_last_error()), st;
    if (o->cache_dir) warn_unwritable_cache_dir(o->cache_dir);
    kvs_model_info info;
    kvs_model_get_info(s->model, &info);
    s->n_ctx = o->n_ctx ? o->n_ctx : (info.n_ctx_train > 0 && info.n_ctx_train < 8192 ? info.n_ctx_train : 8192);
    srv_sched_params sp = {o->slots, o->threads, s->n_ctx, o->max_queue, o->prefill_chunk, o->kv_type};
    if ((st = srv_sched_start(s->model, s->cache, sp, &s->metrics, &s->sched)))
        return fprintf(stderr, "kvstitch serve: scheduler: %s\n", kvs_last_error()), st;
    return KVS_OK;
}

/* During the drain: 1 once a second SIGTERM / SIGINT is pending (the
 * signals stay blocked in every thread, so one that came waits here). A
 * second Ctrl-C had been ignored, the drain running its whole
 * --drain-timeout (30 s: past a service manager's grace, then SIGKILL). */
static int second_signal(void *sigs) {
    const struct timespec now = {0, 0};
    const int sig = sigtimedwait(sigs, NULL, &now);
    if (sig < 0) return 0;
    fprintf(stderr, "kvstitch serve: %s again: cancelling the running requests now\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    return 1;
}

/* The server's life once its options are read: 0, 1 (could not start), 2
 * (a bad path or key file). */
static int serve(const serve_opts *opts) {
    const serve_opts o = *opts;
    srv_server s;
    memset(&s, 0, sizeof s);
    srv_metrics_init(&s.metrics);
    s.max_body = (size_t)o.max_body;
    s.read_timeout_s = (unsigned)o.read_timeout;
    s.reply_timeout_s = (unsigned)o.reply_timeout;
    s.conns_per_ip = (unsigned)o.conns_per_ip;
    s.default_max_tokens = o.max_tokens;
    s.max_queue = o.max_queue;
    const char *base = strrchr(o.model, '/');
    snprintf(s.model_id, sizeof s.model_id, "%s", o.alias ? o.alias : base ? base + 1 : o.model);
    if (check_paths(&o)) return 2;
    if (o.api_key_file && !(s.api_key = read_key(o.api_key_file))) return 2;

    /* Signals are taken by sigwait below; every thread started from here
     * on inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (srv_http_start(&s, o.host, o.port)) {
        fprintf(stderr, "kvstitch serve: cannot listen on %s:%d (address in use or invalid?)\n", o.host, o.port);
        free(s.api_key);
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s.daemon, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : o.port;
    fprintf(stderr, "kvstitch serve: listening on http://%s:%d (loading %s)\n", o.host, port, o.model);
    int st = load(&s, &o);
    if (st) {
        srv_http_stop(&s);
        kvs_cache_free(s.cache);
        kvs_model_free(s.model);
        free(s.api_key);
        return 1;
    }
    atomic_store(&s.ready, 1);
    fprintf(stderr, "kvstitch serve: ready on http://%s:%d (%d slots, context %d)\n", o.host, port, o.slots, s.n_ctx);
    fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kvstitch serve: %s: draining (at most %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", o.drain_s);
    /* Drain: new requests get 503 from here on; then the connections still
     * waiting on their (finished or cancelled) requests send their replies
     * (a job is done before its handler has written the reply: stopping
     * HTTP at once cut such a connection without an answer, now and then);
     * then the slots go. */
    srv_sched_drain(s.sched, o.drain_s * 1e3, second_signal, &sigs);
    srv_http_wait_idle(&s, DRAIN_REPLY_GRACE_MS);
    srv_http_stop(&s);
    atomic_store(&s.ready, 0);
    srv_sched_free(s.sched);
    s.sched = NULL;
    cli_redis_report("serve", s.cache, NULL, NULL); /* no-op without Redis */
    kvs_cache_stats cs;
    kvs_cache_get_stats(s.cache, &cs);
    fprintf(stderr, "kvstitch serve: stopped; cache: %llu chunks, %llu bytes in RAM, %llu written to disk",
            (unsigned long long)cs.entries, (unsigned long long)cs.bytes, (unsigned long long)cs.disk_writes);
    if (cli_redis_given(&o.redis)) /* (written: handed to the writer, less what failed or was dropped) */
        fprintf(stderr, ", %llu written to Redis",
                (unsigned long long)(cs.redis_puts - cs.redis_put_errors - cs.redis_put_dropped));
    fputc('\n', stderr);
    kvs_cache_free(s.cache);
    kvs_model_free(s.model);
    srv_metrics_destroy(&s.metrics);
    free(s.api_key);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    const int rc = parse_opts(argc, argv, &o) ? 2 : serve(&o);
    cli_redis_free(&o.redis); /* (its URL copy, password zeroed) */
    return rc;
}
