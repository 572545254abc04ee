/*
 * A small JSON reader for the RAG evaluation data (bench/rag_eval.c):
 * parses a whole document into a tree of nodes. Strings are unescaped to
 * UTF-8 (\uXXXX with surrogate pairs). Enough for trusted input files; a
 * malformed file gives NULL and a message.
 *
 *   rj_node: kind, and for strings s/len, numbers num, arrays and objects
 *            n children in kids[] (objects: keys[] too)
 */
#ifndef KVS_BENCH_RAG_JSON_H
#define KVS_BENCH_RAG_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RJ_NULL, RJ_BOOL, RJ_NUM, RJ_STR, RJ_ARR, RJ_OBJ } rj_kind;

typedef struct rj_node {
    rj_kind kind;
    double num;
    char *s;               /* RJ_STR: NUL-terminated UTF-8 */
    size_t len;
    int n;                 /* RJ_ARR / RJ_OBJ: children */
    struct rj_node **kids; /* (n) */
    char **keys;           /* (n) RJ_OBJ only */
} rj_node;

typedef struct rj_parser {
    const char *p, *end;
    const char *err;
} rj_parser;

static void rj_free(rj_node *n) {
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
        rj_free(n->kids[i]);
        if (n->keys) free(n->keys[i]);
    }
    free(n->kids);
    free(n->keys);
    free(n->s);
    free(n);
}

static void rj_ws(rj_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int rj_hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t rj_utf8(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at ps->p (on the opening quote) into a malloc'd buffer. */
static char *rj_string(rj_parser *ps, size_t *len) {
    const char *p = ps->p + 1;
    /* Unescaped output is never longer than the escaped input. */
    const char *q = p;
    while (q < ps->end && *q != '"') q += (*q == '\\') ? 2 : 1;
    if (q >= ps->end) { ps->err = "unterminated string"; return NULL; }
    char *out = malloc((size_t)(q - p) + 1);
    size_t k = 0;
    while (p < q) {
        if (*p != '\\') { out[k++] = *p++; continue; }
        p++;
        switch (*p) {
        case 'n': out[k++] = '\n'; p++; break;
        case 't': out[k++] = '\t'; p++; break;
        case 'r': out[k++] = '\r'; p++; break;
        case 'b': out[k++] = '\b'; p++; break;
        case 'f': out[k++] = '\f'; p++; break;
        case 'u': {
            unsigned cp, lo;
            if (q - p < 5 || rj_hex4(p + 1, &cp)) { free(out); ps->err = "bad \\u escape"; return NULL; }
            p += 5;
            if (cp >= 0xD800 && cp < 0xDC00 && q - p >= 6 && p[0] == '\\' && p[1] == 'u' && !rj_hex4(p + 2, &lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            k += rj_utf8(cp, out + k);
            break;
        }
        default: out[k++] = *p++; break; /* \" \\ \/ */
        }
    }
    out[k] = 0;
    *len = k;
    ps->p = q + 1;
    return out;
}

static rj_node *rj_value(rj_parser *ps, int depth);

static rj_node *rj_container(rj_parser *ps, int obj, int depth) {
    rj_node *n = calloc(1, sizeof *n);
    n->kind = obj ? RJ_OBJ : RJ_ARR;
    int cap = 0;
    ps->p++;
    rj_ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) { ps->p++; return n; }
    for (;;) {
        char *key = NULL;
        rj_ws(ps);
        if (obj) {
            size_t kl;
            if (ps->p >= ps->end || *ps->p != '"' || !(key = rj_string(ps, &kl))) {
                if (!ps->err) ps->err = "expected a key";
                rj_free(n);
                return NULL;
            }
            rj_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { free(key); rj_free(n); ps->err = "expected ':'"; return NULL; }
            ps->p++;
        }
        rj_node *v = rj_value(ps, depth + 1);
        if (!v) { free(key); rj_free(n); return NULL; }
        if (n->n == cap) {
            cap = cap ? cap * 2 : 8;
            n->kids = realloc(n->kids, (size_t)cap * sizeof *n->kids);
            if (obj) n->keys = realloc(n->keys, (size_t)cap * sizeof *n->keys);
        }
        n->kids[n->n] = v;
        if (obj) n->keys[n->n] = key;
        n->n++;
        rj_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) { ps->p++; return n; }
        ps->err = "expected ',' or a closing bracket";
        rj_free(n);
        return NULL;
    }
}

static rj_node *rj_value(rj_parser *ps, int depth) {
    rj_ws(ps);
    if (ps->p >= ps->end) { ps->err = "unexpected end"; return NULL; }
    if (depth > 64) { ps->err = "nested too deeply"; return NULL; }
    char c = *ps->p;
    if (c == '{' || c == '[') return rj_container(ps, c == '{', depth);
    rj_node *n = calloc(1, sizeof *n);
    if (c == '"') {
        n->kind = RJ_STR;
        if (!(n->s = rj_string(ps, &n->len))) { free(n); return NULL; }
    } else if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        n->kind = RJ_BOOL;
        n->num = c == 't';
        ps->p += c == 't' ? 4 : 5;
    } else if (!strncmp(ps->p, "null", 4)) {
        n->kind = RJ_NULL;
        ps->p += 4;
    } else {
        char *e;
        n->kind = RJ_NUM;
        n->num = strtod(ps->p, &e);
        if (e == ps->p) { free(n); ps->err = "unexpected character"; return NULL; }
        ps->p = e;
    }
    return n;
}

/* Parses buf[0..len). NULL and *err on failure. */
static rj_node *rj_parse(const char *buf, size_t len, const char **err) {
    rj_parser ps = {buf, buf + len, NULL};
    rj_node *n = rj_value(&ps, 0);
    if (!n && err) *err = ps.err ? ps.err : "parse error";
    return n;
}

/* Member of an object by key, NULL if absent or not an object. */
static rj_node *rj_get(const rj_node *o, const char *key) {
    if (!o || o->kind != RJ_OBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return o->kids[i];
    return NULL;
}

#endif
