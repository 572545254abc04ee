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
 * text would otherwise end there silently). Opens with O_NONBLOCK and reads
 * only regular files, so a FIFO cannot hang the command. */
char *cli_read_file(const char *path, size_t *len);
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

#endif
