/* The Redis tier options shared by generate, warm and cache (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Keeps a copy of the URL for the library, then masks the password in argv
 * so that ps and /proc/PID/cmdline no longer show it (it may have been
 * visible for the instant before this ran: prefer the file or
 * $KVSTITCH_REDIS_PASSWORD). */
static void keep_url_mask_argv(cli_redis_opts *o, char *value) {
    free(o->url_copy);
    o->url_copy = strdup(value);
    o->url = o->url_copy ? o->url_copy : value;
    char *scheme = strstr(value, "://"), *at = strrchr(value, '@');
    char *colon = scheme && at ? memchr(scheme + 3, ':', (size_t)(at - scheme - 3)) : NULL;
    if (colon)
        for (char *p = colon + 1; p < at; p++) *p = '*';
}

int cli_redis_option(const char *cmd, const char *opt, char *value, cli_redis_opts *o) {
    int is_url = !strcmp(opt, "--redis"), is_cluster = !strcmp(opt, "--redis-cluster");
    int is_file = !strcmp(opt, "--redis-password-file"), is_timeout = !strcmp(opt, "--redis-timeout");
    int is_codec = !strcmp(opt, "--redis-codec"), is_key = !strcmp(opt, "--cache-key-file");
    if (!is_url && !is_cluster && !is_file && !is_timeout && !is_codec && !is_key) return 0;
    if (!value || !*value) {
        cli_usage_error(cmd, "%s needs a value", opt);
        return -1;
    }
    /* (the value of a repeated --redis is not echoed: it may hold a password) */
    if ((is_url && o->url) || (is_cluster && o->cluster) || (is_file && o->password_file) ||
        (is_timeout && o->timeout_ms) || (is_codec && o->codec) || (is_key && o->key_file)) {
        cli_usage_error(cmd, "%s given more than once (again with '%s'): it takes one value", opt,
                        is_url ? "..." : value);
        return -1;
    }
    if (is_timeout) { /* (a value that is no decimal integer is said once, not also as "must be > 0") */
        if (cli_parse_int(opt, value, &o->timeout_ms)) return -1;
        return o->timeout_ms <= 0 || o->timeout_ms > 60000 /* as the option tables' range */
                   ? (cli_usage_error(cmd, "--redis-timeout must be in [1, 60000] (ms), got '%s'", value), -1)
                   : 1;
    }
    if (is_file) {
        o->password_file = value;
        return 1;
    }
    if (is_key) {
        o->key_file = value;
        return 1;
    }
    if (is_codec) {
        if (strcmp(value, "raw") && strcmp(value, "zstd") && strcmp(value, "shuffle-zstd")) {
            cli_usage_error(cmd, "--redis-codec must be raw, zstd or shuffle-zstd, got '%s'", value);
            return -1;
        }
        o->codec = value;
        return 1;
    }
    if (is_cluster) {
        o->cluster = value;
        return 1;
    }
    keep_url_mask_argv(o, value);
    return 1;
}

int cli_redis_finish(const char *cmd, cli_redis_opts *o) {
    if (cli_redis_check(cmd, o)) return 2;
    /* o->url points into argv, which is writable */
    if (o->url && o->url != o->url_copy) keep_url_mask_argv(o, (char *)o->url);
    return -1;
}

int cli_redis_given(const cli_redis_opts *o) { return o->url || o->cluster; }

int cli_redis_check(const char *cmd, const cli_redis_opts *o) {
    if (o->url && o->cluster) {
        cli_usage_error(cmd, "give --redis or --redis-cluster, not both");
        return -1;
    }
    if ((o->password_file || o->timeout_ms || o->codec) && !cli_redis_given(o)) {
        cli_usage_error(cmd, "--redis-password-file, --redis-timeout and --redis-codec go with --redis or "
                             "--redis-cluster");
        return -1;
    }
    return 0;
}

void cli_redis_apply(const cli_redis_opts *o, kvs_cache_params *p) {
    p->redis_url = o->url;
    p->redis_cluster = o->cluster;
    p->redis_password_file = o->password_file;
    p->redis_timeout_ms = o->timeout_ms;
    p->redis_codec = o->codec;
    p->cache_key_file = o->key_file;
}

void cli_redis_free(cli_redis_opts *o) {
    if (o->url_copy) memset(o->url_copy, 0, strlen(o->url_copy));
    free(o->url_copy);
    memset(o, 0, sizeof *o);
}

void cli_redis_report(const char *cmd, kvs_cache *cache, uint64_t *errors, uint64_t *dropped) {
    if (errors) *errors = 0;
    if (dropped) *dropped = 0;
    if (!cache) return;
    int flushed = kvs_cache_flush(cache, 10000) == KVS_OK;
    kvs_cache_stats st;
    kvs_cache_get_stats(cache, &st);
    if (errors) *errors = st.redis_put_errors;
    if (dropped) *dropped = st.redis_put_dropped;
    if (!flushed)
        fprintf(stderr, "kvstitch %s: warning: chunks still queued for Redis after 10 s (not stored there)\n", cmd);
    if (st.redis_put_errors || st.redis_put_dropped > st.redis_put_too_large)
        fprintf(stderr,
                "kvstitch %s: warning: %llu of %llu chunks were not written to Redis (%llu failed, refused or "
                "unanswered in time: a node that answers late may still store them; %llu dropped: Redis down or "
                "the write queue full)\n",
                cmd, (unsigned long long)(st.redis_put_errors + st.redis_put_dropped - st.redis_put_too_large),
                (unsigned long long)st.redis_puts, (unsigned long long)st.redis_put_errors,
                (unsigned long long)(st.redis_put_dropped - st.redis_put_too_large));
    /* (these had been said to be dropped for Redis down or the queue full) */
    if (st.redis_put_too_large)
        fprintf(stderr,
                "kvstitch %s: warning: %llu of %llu chunks were not written to Redis: each would be a value over "
                "its limit of %llu MiB (a document is one chunk, however long; --kv-type q8 halves its bytes; the "
                "cache dir has no such limit)\n",
                cmd, (unsigned long long)st.redis_put_too_large, (unsigned long long)st.redis_puts,
                (unsigned long long)(st.redis_max_value_bytes >> 20));
    /* damage met on the way (it had been silent: only `cache stats` and the
     * server's metrics showed it) */
    if (st.redis_bad)
        fprintf(stderr,
                "kvstitch %s: warning: %llu damaged values met in Redis (counted per read; never served: computed "
                "instead; each removed where Redis lets this client delete it, a newer version's left)\n",
                cmd, (unsigned long long)st.redis_bad);
    /* why, in the server's words where it gave some (a wrong password, a
     * database index out of range had been said by `cache stats` only) */
    char why[512]; /* "redis HOST:PORT: why": a host may take 255 bytes */
    kvs_cache_redis_why_down(cache, why, sizeof why);
    if (why[0] && (st.redis_put_errors || st.redis_put_dropped || st.redis_errors))
        fprintf(stderr, "kvstitch %s: warning: %s\n", cmd, why);
}
