/* Helpers shared by the CLI commands: errors, number parsing, files, JSON. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fail(int status, const char *what) {
    fprintf(stderr, "kvstitch: %s: %s: %s\n", what, kvs_strerror(status), kvs_last_error());
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kvstitch %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see kvstitch %s --help)\n", cmd);
    return 2;
}

int cli_parse_int(const char *opt, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < INT_MIN || v > INT_MAX) {
        fprintf(stderr, "kvstitch: %s expects an integer, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = s ? strtof(s, &end) : 0;
    if (!s || !*s || *end || errno) {
        fprintf(stderr, "kvstitch: %s expects a number, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *opt, const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || *s == '-') {
        fprintf(stderr, "kvstitch: %s expects a non-negative integer, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvstitch: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2 + 1);
        if (!bigger) { free(buf); buf = NULL; break; }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "kvstitch: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
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
