/*
 * Command-line options as a table: one row per option with its kind, its
 * accepted range and its help line. The same rows drive parsing (every
 * value checked: numbers finite and in range, files existing and regular,
 * choices among the listed ones) and --help (the range is printed from
 * the row), so the two cannot drift apart.
 *
 * A usage error prints "kvstitch CMD: OPTION: VALUE ...: expected RANGE"
 * on stderr and makes the command exit with 2. Numbers are plain decimal
 * (an optional '-', digits, for CLI_FLOAT one '.' with digits on both
 * sides: 0.5, not .5 or 5.): refused with white space on either side, a
 * '+' sign, an exponent or hex; a valued option
 * given twice is refused unless its row is repeatable (max_count or
 * repeatable).
 *
 *   static const cli_opt opts[] = {
 *       CLI_INT_OPT("-n", "--n-predict", gen_opts, n_predict, 0, 1 << 20, "N", "new tokens at most (default 128)"),
 *       ...
 *   };
 */
#ifndef KVS_TOOLS_CLI_OPTS_H
#define KVS_TOOLS_CLI_OPTS_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

typedef enum cli_opt_kind {
    CLI_FLAG,   /* no value: stores flag_value into an int */
    CLI_STR,    /* any string (const char *) */
    CLI_FILE,   /* an existing regular file (const char *); FIFOs, devices, directories refused */
    CLI_DIR,    /* a directory (const char *), created later if missing; an existing non-directory refused */
    CLI_INT,    /* an integer in [min, max] (int) */
    CLI_FLOAT,  /* a finite number in [min, max] (float); min_open: > min */
    CLI_U64,    /* a non-negative integer (unsigned long long) */
    CLI_CHOICE, /* one of choices, "a|b|c" (const char *) */
} cli_opt_kind;

typedef struct cli_opt {
    const char *short_name; /* "-m" or NULL */
    const char *name;       /* "--model" */
    cli_opt_kind kind;
    size_t offset;          /* of the value in the command's options struct */
    double min, max;        /* CLI_INT, CLI_FLOAT: the accepted range, inclusive */
    int min_open;           /* CLI_FLOAT: min itself excluded */
    const char *choices;    /* CLI_CHOICE */
    int flag_value;         /* CLI_FLAG */
    int max_count;          /* > 0: repeatable, values appended to an array of max_count
                             * (const char *) at offset, its length an int at count_offset */
    size_t count_offset;
    int repeatable;         /* 1: may be given more than once (each value goes to set); a row
                             * without it or max_count is refused the second time */
    const char *needs;      /* another option's name that must be given with this one, or NULL */
    const char *metavar;    /* "N" in "--threads N" */
    const char *help;       /* one line (more with \n); the range is appended from the row */
    const char *group;      /* a heading printed before this row in --help, or NULL */
    /* Optional: receives the checked value instead of offset (options whose
     * order among other arguments matters). 0, or nonzero after an error. */
    int (*set)(void *opts, const char *value);
} cli_opt;

#define CLI_OFF(type, field) offsetof(type, field)
#define CLI_FLAG_OPT(s, n, type, field, value, h) \
    {.short_name = s, .name = n, .kind = CLI_FLAG, .offset = CLI_OFF(type, field), .flag_value = value, .help = h}
#define CLI_STR_OPT(s, n, type, field, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_STR, .offset = CLI_OFF(type, field), .metavar = meta, .help = h}
#define CLI_FILE_OPT(s, n, type, field, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_FILE, .offset = CLI_OFF(type, field), .metavar = meta, .help = h}
#define CLI_DIR_OPT(s, n, type, field, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_DIR, .offset = CLI_OFF(type, field), .metavar = meta, .help = h}
#define CLI_INT_OPT(s, n, type, field, lo, hi, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_INT, .offset = CLI_OFF(type, field), .min = lo, .max = hi, \
     .metavar = meta, .help = h}
#define CLI_FLOAT_OPT(s, n, type, field, lo, hi, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_FLOAT, .offset = CLI_OFF(type, field), .min = lo, .max = hi, \
     .metavar = meta, .help = h}
/* Any row: the common fields, then designated ones (.min = 0, .needs = "--doc", ...). */
#define CLI_OPT(s, n, k, type, field, meta, h, ...) \
    {.short_name = s, .name = n, .kind = k, .offset = CLI_OFF(type, field), .metavar = meta, .help = h, __VA_ARGS__}
/* --kv-type, the same row in every command that makes a context: the name
 * (const char *, NULL = f16) for kvs_kv_type_parse. */
#define CLI_KV_TYPE_OPT(type, field) \
    CLI_OPT(NULL, "--kv-type", CLI_CHOICE, type, field, "T", \
            "KV cache type: f16 (default), f32, or q8 (8-bit: half f16's memory,\n" \
            "integer attention, the faster choice at long context on AVX-512,\n" \
            "whose decode keeps a second copy of the rows it reads, and for\n" \
            "decode on AVX2 (1.4x f16's after 4096 tokens on a Zen 3);\n" \
            "results differ slightly)", \
            .choices = "f16|f32|q8")
#define CLI_U64_OPT(s, n, type, field, meta, h) \
    {.short_name = s, .name = n, .kind = CLI_U64, .offset = CLI_OFF(type, field), .metavar = meta, .help = h}

typedef struct cli_command {
    const char *name;       /* "generate" */
    const char *usage;      /* the usage line(s), printed first by --help */
    const cli_opt *opts;
    int n_opts;
    const char *footer;     /* printed after the options, or NULL */
    /* Non-option arguments (NULL: refused). Returns 0, or nonzero after
     * printing a usage error. */
    int (*positional)(void *opts, const char *arg);
} cli_command;

/* Parses argv[1..argc) into opts (already holding the defaults); given
 * (n_opts ints, may be NULL) receives how often each row was used. Returns
 * -1 to go on, 0 after printing --help, 2 after printing a usage error. */
int cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, int *given);
void cli_print_help(const cli_command *cmd, FILE *f);
/* 1 if the row named name was given (given as filled by cli_parse). */
int cli_given(const cli_command *cmd, const int *given, const char *name);

/* A usage error of cmd: "kvstitch CMD: <message> (see kvstitch CMD --help)"; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Checks that path can be read as a file: exists and is a regular file.
 * 0, or -1 after "kvstitch CMD: OPT: PATH: why" on stderr. */
int cli_check_file(const char *cmd, const char *opt, const char *path);

#endif
