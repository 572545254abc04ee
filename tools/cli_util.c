/* Helpers shared by the CLI commands: errors, number parsing, files, progress. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_fail(int status, const char *what) {
    /* the library's messages name their file themselves: said once */
    const char *detail = kvs_last_error();
    const size_t n = strlen(what);
    if (n && !strncmp(detail, what, n) && !strncmp(detail + n, ": ", 2)) detail += n + 2;
    fprintf(stderr, "kvstitch: %s: %s: %s\n", what, kvs_strerror(status), detail);
    return 1;
}

int cli_parse_int(const char *opt, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    /* plain decimal, as the option table's numbers (strtol had taken "+5") */
    if (!s || !*s || isspace((unsigned char)*s) || *s == '+' || *end || errno || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, "kvstitch: %s expects a decimal integer, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_u64(const char *opt, const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || isspace((unsigned char)*s) || *end || errno || *s == '-' || *s == '+') {
        fprintf(stderr, "kvstitch: %s expects a non-negative decimal integer, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

char *cli_read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "kvstitch: cannot open %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "kvstitch: %s is not a regular file\n", path);
        close(fd);
        return NULL;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got < 0) {
                free(buf);
                buf = NULL;
            }
            break;
        }
        n += (size_t)got;
        if (n == cap) { /* the file grew while we read it */
            char *bigger = realloc(buf, cap * 2 + 1);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
            cap *= 2;
        }
    }
    int err = errno;
    close(fd);
    if (!buf) {
        fprintf(stderr, "kvstitch: cannot read %s: %s\n", path, strerror(err));
        return NULL;
    }
    buf[n] = 0;
    const char *nul = memchr(buf, 0, n);
    if (nul) {
        fprintf(stderr, "kvstitch: %s: byte %zu of %zu is a NUL byte; prompt and document files must be text\n",
                path, (size_t)(nul - buf), n);
        free(buf);
        return NULL;
    }
    if (cli_check_utf8(path, buf)) {
        free(buf);
        return NULL;
    }
    if (len) *len = n;
    return buf;
}

char *cli_read_doc(const char *path) {
    char *text = cli_read_file(path, NULL);
    if (text && !text[0]) { /* the library skips "": the document had been dropped without a word */
        fprintf(stderr, "kvstitch: --doc %s is empty (a document must have text)\n", path);
        free(text);
        return NULL;
    }
    return text;
}

int cli_check_utf8(const char *what, const char *text) {
    int st = kvs_utf8_check(text, strlen(text));
    return st ? cli_fail(st, what) : 0;
}

int32_t *cli_tokenize(const kvs_model *model, const char *text, size_t len, int flags, int *n_out) {
    int n = 0;
    int cap = (int)(len < (size_t)INT_MAX / 2 ? len : (size_t)INT_MAX / 2) + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "kvstitch: out of memory\n");
        return NULL;
    }
    int st = kvs_tokenize(model, text, len, flags, ids, cap, &n);
    if (st == KVS_ERR_BUFFER_TOO_SMALL) {
        int32_t *bigger = realloc(ids, (size_t)n * sizeof *ids);
        if (!bigger) { free(ids); fprintf(stderr, "kvstitch: out of memory\n"); return NULL; }
        ids = bigger;
        st = kvs_tokenize(model, text, len, flags, ids, n, &n);
    }
    if (st != KVS_OK) {
        cli_fail(st, "tokenize");
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

/* --- progress ---------------------------------------------------------------- */

typedef struct progress_state {
    const char *label;
    double last_ms; /* when the last line was printed */
    int shown;      /* a line is on the terminal */
} progress_state;

static progress_state g_progress;

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void on_progress(void *user, const kvs_progress *p) {
    progress_state *s = user;
    if (p->done >= p->total) { /* the pass ended: erase the line */
        if (s->shown) fputs("\r\033[K", stderr);
        s->shown = 0;
        s->last_ms = 0;
        return;
    }
    double now = cli_now_ms();
    if (s->shown && now - s->last_ms < 200.0) return; /* throttle: 5 lines a second */
    s->last_ms = now;
    s->shown = 1;
    fprintf(stderr, "\r\033[K[%s: %lld/%lld tokens (%.0f%%), %.0f tok/s, ETA %.1f s]", s->label, (long long)p->done,
            (long long)p->total, 100.0 * (double)p->done / (double)p->total, p->tok_s, p->eta_ms / 1000.0);
    fflush(stderr);
}

void cli_progress_attach(kvs_context_params *cp, const char *label, int enabled) {
    if (!enabled || !isatty(STDERR_FILENO)) return;
    g_progress.label = label;
    cp->on_progress = on_progress;
    cp->progress_user = &g_progress;
}
