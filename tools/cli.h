/* The kvstitch command-line tool: one file per command, shared option helpers. */
#ifndef KVS_CLI_H
#define KVS_CLI_H

#include <stdio.h>

#include "kvstitch.h"

/* Each command gets argv without the program name (argv[0] is the command). */
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_cache(int argc, char **argv);

/* Prints "kvstitch: <what>: <kvs_strerror>: <kvs_last_error>" to stderr, returns 1. */
int cli_fail(int status, const char *what);
/* Prints a usage error to stderr, returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option parsing helpers: return 0 on success, print an error and return -1 on a bad value. */
int cli_parse_int(const char *opt, const char *s, int *out);
int cli_parse_float(const char *opt, const char *s, float *out);
int cli_parse_u64(const char *opt, const char *s, unsigned long long *out);
/* A byte count: digits with an optional binary suffix K, M, G, T (KiB..., "B"
 * optional), at least 1 (tools/cmd_cache.c). */
int cli_parse_bytes(const char *opt, const char *s, unsigned long long *out);
/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL + message on error. */
char *cli_read_file(const char *path, size_t *len);
/* Tokenizes text into a malloc'd array; prints the error and returns NULL on failure. */
int32_t *cli_tokenize(const kvs_model *model, const char *text, size_t len, int flags, int *n_out);
/* Writes s as a JSON string literal (with quotes) to f. */
void cli_json_string(FILE *f, const char *s, size_t len);

/* The Redis tier options (cli_redis.c), taken by generate, warm and cache. */
#define CLI_REDIS_USAGE                                                                              \
    "Shared Redis tier (below RAM and --cache-dir; see README \"Redis tier\"):\n"                     \
    "  --redis URL            redis://[user[:password]@]host[:port][/db]\n"                           \
    "  --redis-cluster LIST   host:port[,host:port...] of a Redis Cluster\n"                          \
    "  --redis-password-file F  the password, first line of F (else $KVSTITCH_REDIS_PASSWORD;\n"     \
    "                         a password in the URL is masked in the process list)\n"              \
    "  --redis-timeout MS     per socket operation (default 50): a slow or dead Redis costs at\n"   \
    "                         most this, then the chunks are computed\n"
typedef struct cli_redis_opts {
    const char *url, *cluster, *password_file;
    int timeout_ms;
    char *url_copy; /* the URL with its password (argv's copy is masked) */
} cli_redis_opts;
/* 0: opt is not a Redis option; 1: taken (with value: the caller skips it);
 * -1: bad value (usage error printed). value may be masked in place. */
int cli_redis_option(const char *cmd, const char *opt, char *value, cli_redis_opts *o);
int cli_redis_given(const cli_redis_opts *o);
/* 0, or -1 after a usage error (both --redis and --redis-cluster, ...). */
int cli_redis_check(const char *cmd, const cli_redis_opts *o);
void cli_redis_apply(const cli_redis_opts *o, kvs_cache_params *p);
void cli_redis_free(cli_redis_opts *o);

#endif
