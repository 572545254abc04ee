/* Table-driven option parsing and --help (cli_opts.h). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_opts.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kvstitch %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see kvstitch %s --help)\n", cmd);
    return 2;
}

static const char *file_type(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

int cli_check_file(const char *cmd, const char *opt, const char *path) {
    struct stat st;
    if (!*path) {
        cli_usage_error(cmd, "%s: the path is empty", opt);
        return -1;
    }
    if (stat(path, &st) != 0) {
        cli_usage_error(cmd, "%s: %s: %s", opt, path, strerror(errno));
        return -1;
    }
    /* Opening a FIFO for reading blocks until a writer comes: refuse it. */
    if (!S_ISREG(st.st_mode)) {
        cli_usage_error(cmd, "%s: %s is %s, expected a regular file", opt, path, file_type(st.st_mode));
        return -1;
    }
    return 0;
}

static const char *row_name(const cli_opt *o) { return o->name ? o->name : o->short_name; }

/* What a row accepts, for --help and errors: "an integer in [1, 256]",
 * "a number in (0, 1]", "one of a, b, c"; "" for paths and strings. */
static void range_text(const cli_opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (o->kind == CLI_INT)
        snprintf(buf, cap, "an integer in [%.0f, %.0f]", o->min, o->max);
    else if (o->kind == CLI_FLOAT)
        snprintf(buf, cap, "a number in %c%g, %g]", o->min_open ? '(' : '[', o->min, o->max);
    else if (o->kind == CLI_U64)
        snprintf(buf, cap, "an integer in [0, %llu]", ULLONG_MAX);
    else if (o->kind == CLI_CHOICE) {
        size_t n = (size_t)snprintf(buf, cap, "one of ");
        for (const char *p = o->choices; *p && n + 3 < cap; p++) {
            if (*p == '|')
                n += (size_t)snprintf(buf + n, cap - n, ", ");
            else
                buf[n++] = *p, buf[n] = 0;
        }
    }
}

/* "kvstitch CMD: OPT must be RANGE, got 'V' (why)". Returns 2. */
static int bad_value(const char *cmd, const cli_opt *o, const char *v, const char *why) {
    char range[160];
    range_text(o, range, sizeof range);
    return cli_usage_error(cmd, "%s must be %s, got '%s' (%s)", row_name(o), range, v, why);
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* strtol / strtod / strtoull skip leading white space but stop at trailing
 * white space: a number must start with its first character (a sign or a
 * digit; "nan", "inf" are refused as not finite) so that " 1" and "1 " are
 * refused alike. */
static int number_start(const char *v) { return *v && !isspace((unsigned char)*v); }

/* NULL if v, which strto* took whole, is plain decimal: an optional '-',
 * digits and, where frac, one '.' between digits (serve's rule, and its
 * negative numbers); else why not. strtol had also taken "+5", strtod
 * "0x1" and "1e-1". */
static const char *not_plain_decimal(const char *v, int frac) {
    if (*v == '+') return "a '+' sign is not accepted";
    int digits = 0, dot = 0;
    for (const char *p = v + (*v == '-'); *p; p++) {
        if (isdigit((unsigned char)*p)) digits++;
        else if (*p == '.' && frac && !dot && digits && isdigit((unsigned char)p[1])) dot = 1;
        else return frac ? "not a plain decimal number: digits and one '.' between them, no exponent or hex"
                         : "not an integer";
    }
    return digits ? NULL : frac ? "not a number" : "not an integer";
}

/* Converts and checks v for row o, storing it into opts. 0 or 2. */
static int set_value(const cli_command *cmd, const cli_opt *o, const char *v, void *opts) {
    char *field = (char *)opts + o->offset, *end = NULL;
    const char *why;
    errno = 0;
    switch (o->kind) {
    case CLI_INT: {
        long x = strtol(v, &end, 10);
        if (!number_start(v) || *end) return bad_value(cmd->name, o, v, "not an integer");
        if ((why = not_plain_decimal(v, 0))) return bad_value(cmd->name, o, v, why);
        if (errno || x < o->min || x > o->max) return bad_value(cmd->name, o, v, "out of range");
        *(int *)field = (int)x;
        return 0;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (!number_start(v) || *end) return bad_value(cmd->name, o, v, "not a number");
        if (!isfinite(x)) return bad_value(cmd->name, o, v, "not a finite number");
        if ((why = not_plain_decimal(v, 1))) return bad_value(cmd->name, o, v, why);
        if (x < o->min || x > o->max || (o->min_open && x == o->min)) return bad_value(cmd->name, o, v, "out of range");
        *(float *)field = (float)x;
        return 0;
    }
    case CLI_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!number_start(v) || *end || *v == '-' || errno)
            return bad_value(cmd->name, o, v, "not a non-negative integer");
        if ((why = not_plain_decimal(v, 0))) return bad_value(cmd->name, o, v, why);
        *(unsigned long long *)field = x;
        return 0;
    }
    case CLI_CHOICE:
        if (!choice_ok(o->choices, v)) return bad_value(cmd->name, o, v, "unknown");
        break;
    case CLI_FILE:
        if (cli_check_file(cmd->name, row_name(o), v)) return 2;
        break;
    case CLI_DIR: {
        struct stat st, lst;
        if (!*v) return cli_usage_error(cmd->name, "%s: the path is empty", row_name(o));
        const int e = stat(v, &st) ? errno : 0;
        if (!e && !S_ISDIR(st.st_mode))
            return cli_usage_error(cmd->name, "%s: %s exists and is %s, expected a directory", row_name(o), v,
                                   S_ISREG(st.st_mode) ? "a file" : file_type(st.st_mode));
        /* missing is fine (it is created), but a link to nowhere or a loop
         * had been reported later as "not a directory" */
        if (e && (e != ENOENT || (lstat(v, &lst) == 0 && S_ISLNK(lst.st_mode))))
            return cli_usage_error(cmd->name, "%s: %s: %s", row_name(o), v,
                                   e == ENOENT ? "a symbolic link to a missing target" : strerror(e));
        break;
    }
    case CLI_STR:
    case CLI_FLAG:
        break;
    }
    if (o->set) return o->set(opts, v) ? 2 : 0;
    if (o->max_count > 0) {
        int *count = (int *)((char *)opts + o->count_offset);
        if (*count >= o->max_count)
            return cli_usage_error(cmd->name, "%s: at most %d values, got more", row_name(o), o->max_count);
        ((const char **)field)[(*count)++] = v;
    } else {
        *(const char **)field = v;
    }
    return 0;
}

static const cli_opt *find(const cli_command *cmd, const char *a, size_t len) {
    for (int k = 0; k < cmd->n_opts; k++) {
        const cli_opt *o = &cmd->opts[k];
        if ((o->name && strlen(o->name) == len && !strncmp(o->name, a, len)) ||
            (o->short_name && strlen(o->short_name) == len && !strncmp(o->short_name, a, len)))
            return o;
    }
    return NULL;
}

int cli_given(const cli_command *cmd, const int *given, const char *name) {
    for (int k = 0; k < cmd->n_opts; k++)
        if (cmd->opts[k].name && !strcmp(cmd->opts[k].name, name)) return given[k] > 0;
    return 0;
}

/* needs: one option name, or alternatives "--a|--b" (any one will do). */
static int needs_given(const cli_command *cmd, const int *seen, const char *needs) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", needs);
    char *save = NULL;
    for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
        if (cli_given(cmd, seen, t)) return 1;
    return 0;
}

/* "--a|--b|--c" as "--a (or --b, --c)". */
static void needs_text(const char *needs, char *out, size_t cap) {
    const char *bar = strchr(needs, '|');
    if (!bar) {
        snprintf(out, cap, "%s", needs);
        return;
    }
    snprintf(out, cap, "%.*s (or ", (int)(bar - needs), needs);
    for (const char *p = bar + 1; *p && strlen(out) + 3 < cap; p++) {
        size_t n = strlen(out);
        if (*p == '|') snprintf(out + n, cap - n, ", ");
        else out[n] = *p, out[n + 1] = 0;
    }
    size_t n = strlen(out);
    snprintf(out + n, cap - n, ")");
}

int cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, int *given) {
    int local[64] = {0};
    int *seen = given ? given : local;
    if (!given && cmd->n_opts > 64) return cli_usage_error(cmd->name, "internal: too many options");
    memset(seen, 0, (size_t)cmd->n_opts * sizeof *seen);
    int options_end = 0; /* after "--": every argument is a TEXT ("-5" had no way in but -f) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!options_end && !strcmp(a, "--")) {
            options_end = 1;
            continue;
        }
        if (!options_end && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            cli_print_help(cmd, stdout);
            return 0;
        }
        if (options_end || a[0] != '-' || !a[1]) {
            if (!cmd->positional) return cli_usage_error(cmd->name, "unexpected argument '%s'", a);
            if (cmd->positional(opts, a)) return 2;
            continue;
        }
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        const cli_opt *o = find(cmd, a, eq ? (size_t)(eq - a) : strlen(a));
        if (!o) return cli_usage_error(cmd->name, "unknown option: %s", a);
        seen[o - cmd->opts]++;
        if (o->kind == CLI_FLAG) {
            if (eq) return cli_usage_error(cmd->name, "%s takes no value", row_name(o));
            *(int *)((char *)opts + o->offset) = o->flag_value;
            continue;
        }
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v) return cli_usage_error(cmd->name, "%s needs a value (%s)", row_name(o), o->metavar ? o->metavar : "");
        /* A single-valued option given again had silently replaced the first
         * value (-p a -p b ran "b"); repeatable rows append instead. */
        if (seen[o - cmd->opts] > 1 && !o->max_count && !o->repeatable)
            return cli_usage_error(cmd->name, "%.*s given more than once (again with '%s'): it takes one value",
                                   (int)(eq ? (size_t)(eq - a) : strlen(a)), a, v);
        int rc = set_value(cmd, o, v, opts);
        if (rc) return rc;
    }
    for (int k = 0; k < cmd->n_opts; k++)
        if (seen[k] && cmd->opts[k].needs && !needs_given(cmd, seen, cmd->opts[k].needs)) {
            char alt[128];
            needs_text(cmd->opts[k].needs, alt, sizeof alt);
            return cli_usage_error(cmd->name,
                                   "%s needs %s (it does nothing without it; the options of that kind need %s)",
                                   row_name(&cmd->opts[k]), alt, alt);
        }
    return -1;
}

void cli_print_help(const cli_command *cmd, FILE *f) {
    fputs(cmd->usage, f);
    for (int k = 0; k < cmd->n_opts; k++) {
        const cli_opt *o = &cmd->opts[k];
        if (o->group) fprintf(f, "%s\n", o->group);
        char head[64], range[160];
        snprintf(head, sizeof head, "%s%s%s%s%s", o->short_name ? o->short_name : "",
                 o->short_name && o->name ? ", " : "", o->name ? o->name : "", o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        range_text(o, range, sizeof range);
        fprintf(f, "  %-22s ", head);
        if (strlen(head) > 22) fprintf(f, "\n  %-22s ", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n') fprintf(f, "  %-22s ", "");
        }
        if (range[0] && o->kind != CLI_U64 && o->kind != CLI_CHOICE)
            fprintf(f, " %s", strpbrk(range, "[(") ? strpbrk(range, "[(") : range);
        if (o->max_count > 0) fprintf(f, " (repeatable, up to %d)", o->max_count);
        else if (o->repeatable && !strstr(o->help, "repeatable")) fprintf(f, " (repeatable)");
        fputc('\n', f);
    }
    if (cmd->footer) fputs(cmd->footer, f);
}
