/* The kvstitch command-line tool: one file per command, shared helpers. */
#ifndef KVS_CLI_H
#define KVS_CLI_H

#include <stdio.h>

#include "cli_opts.h"
#include "kvstitch.h"

/* Each command gets argv without the program name (argv[0] is the command). */
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_cache(int argc, char **argv);
/* kvstitch --version: library version, git describe, ISA paths. */
int cmd_version(int argc, char **argv);

/* Prints "kvstitch: <what>: <kvs_strerror>: <kvs_last_error>" to stderr, returns 1. */
int cli_fail(int status, const char *what);

/* Option parsing helpers of the commands not yet on the option table
 * (cmd_cache.c): 0 on success, -1 after printing an error on a bad value. */
int cli_parse_int(const char *opt, const char *s, int *out);
int cli_parse_u64(const char *opt, const char *s, unsigned long long *out);
/* A byte count: digits with an optional binary suffix K, M, G, T (KiB..., "B"
 * optional), at least 1. */
int cli_parse_bytes(const char *opt, const char *s, unsigned long long *out);

/* Reads a whole text file into a malloc'd NUL-terminated buffer; NULL after
 * a message on error. The one rule for NUL bytes in prompt and document
 * files, for every command: a NUL byte is an error naming its offset (the
 * text would otherwise end there silently); so is invalid UTF-8, naming the
 * file (a --doc's error had named "doc 1", the tokenizer's "tokenize").
 * Opens with O_NONBLOCK and reads only regular files, so a FIFO cannot hang
 * the command. */
char *cli_read_file(const char *path, size_t *len);
/* A --doc file as cli_read_file reads it, and refused (NULL, said) when empty. */
char *cli_read_doc(const char *path);
/* 0 if text (an option's value: -p, --system) is valid UTF-8, else prints
 * "kvstitch: <what>: ..." with the offset in it and returns 1 (--system's
 * error had given an offset into the rendered chat template). */
int cli_check_utf8(const char *what, const char *text);
/* Tokenizes text into a malloc'd array; prints the error and returns NULL on failure. */
int32_t *cli_tokenize(const kvs_model *model, const char *text, size_t len, int flags, int *n_out);
/* Writes s as a JSON string literal (with quotes) to f (cmd_cache.c). */
void cli_json_string(FILE *f, const char *s, size_t len);

/* Milliseconds on a monotonic clock. */
double cli_now_ms(void);

/* Progress of long forward passes on stderr: only when stderr is a
 * terminal and the command is neither --quiet nor --json; at most 5 lines
 * a second, each overwriting the last ("\r"), erased when the pass ends. */
void cli_progress_attach(kvs_context_params *cp, const char *label, int enabled);

/* The Redis tier options (cli_redis.c), taken by generate, warm and cache. */
#define CLI_REDIS_USAGE                                                                              \
    "Shared Redis tier (below RAM and --cache-dir; see README \"Redis tier\"):\n"                     \
    "  --redis URL            redis://[user[:password]@]host[:port][/db]\n"                           \
    "  --redis-cluster LIST   host:port[,host:port...] of a Redis Cluster\n"                          \
    "  --redis-password-file F  the password, first line of F (else $KVSTITCH_REDIS_PASSWORD;\n"     \
    "                         a password in the URL is masked in the process list)\n"              \
    "  --redis-timeout MS     per socket operation (default 50; a batch of values gets more for\n"  \
    "                         its bytes): past it the chunks are computed; a lookup is a few\n"   \
    "                         operations, so a slow Redis costs a request a few times this\n"  \
    "  --redis-codec C        how values are written: raw (default), zstd, shuffle-zstd (f16\n"  \
    "                         values 0.87x the size, slower reads); every codec is read\n"        \
    "Cache key (README \"Trust\"; with --cache-dir or --redis):\n"                                   \
    "  --cache-key-file F     a secret key (F's bytes, surrounding whitespace trimmed, >= 16):\n" \
    "                         entries are written with an HMAC under it and served only if it\n" \
    "                         verifies (keyed and keyless entries never mix)\n"
typedef struct cli_redis_opts {
    const char *url, *cluster, *password_file, *codec;
    const char *key_file; /* --cache-key-file: not Redis's own, taken here by every command
                           * that opens a cache (dir or Redis) */
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
/* The Redis rows of a table-driven command (cli_opts.h): type is the
 * command's options struct, field its cli_redis_opts member. Options that
 * need a cache name CLI_CACHE_NEEDS: a directory or Redis will do. */
#define CLI_CACHE_NEEDS "--cache-dir|--redis|--redis-cluster"
#define CLI_REDIS_ROWS(type, field)                                                                             \
    CLI_OPT(NULL, "--redis", CLI_STR, type, field.url, "URL",                                                   \
            "redis://[user[:password]@]host[:port][/db]; a password here is masked in\n"                        \
            "the process list (prefer --redis-password-file or $KVSTITCH_REDIS_PASSWORD)",                      \
            .group = "Shared Redis tier (below RAM and --cache-dir; README \"Redis tier\"):"),                  \
        CLI_STR_OPT(NULL, "--redis-cluster", type, field.cluster, "LIST", "host:port[,host:port...] of a Redis Cluster"), \
        CLI_OPT(NULL, "--redis-password-file", CLI_FILE, type, field.password_file, "FILE",                    \
                "the Redis password: the first line of FILE", .needs = "--redis|--redis-cluster"),              \
        CLI_OPT(NULL, "--redis-timeout", CLI_INT, type, field.timeout_ms, "MS",                                 \
                "per socket operation (default 50; a batch of values gets more for its\n"                      \
                "bytes): past it the chunks are computed; a lookup is a few operations, so a\n"               \
                "slow Redis costs a request a few times this",                                                  \
                .min = 1, .max = 60000, .needs = "--redis|--redis-cluster"),                                    \
        CLI_OPT(NULL, "--redis-codec", CLI_CHOICE, type, field.codec, "C",                                       \
                "how values are written (every codec is read): raw (default), zstd, or\n"                       \
                "shuffle-zstd (f16 values 0.87x the size, slower reads)",                                         \
                .choices = "raw|zstd|shuffle-zstd", .needs = "--redis|--redis-cluster"),                     \
        CLI_OPT(NULL, "--cache-key-file", CLI_FILE, type, field.key_file, "FILE",                                \
                "a secret key (FILE's bytes, surrounding whitespace trimmed, at least 16):\n"                   \
                "entries are written with an HMAC-SHA256 under it and served only if it\n"                     \
                "verifies; keyed and keyless entries never mix (README \"Trust\")",                             \
                .needs = CLI_CACHE_NEEDS, .group = "Cache key:")
/* After a command's writes: waits for the Redis writer (at most 10 s) and,
 * when some chunks did not reach Redis (refused, failed, dropped: Redis
 * down or the write queue full), says so on stderr (also with --json /
 * --quiet: nothing lost silently). *errors / *dropped (may be NULL) get the
 * counts. No-op without a Redis tier. */
void cli_redis_report(const char *cmd, kvs_cache *cache, uint64_t *errors, uint64_t *dropped);
/* After cli_parse of such a table: refuses --redis with --redis-cluster,
 * keeps a copy of the URL and masks its password in argv. -1 to go on, 2
 * after a usage error. */
int cli_redis_finish(const char *cmd, cli_redis_opts *o);

#endif
