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

#endif
