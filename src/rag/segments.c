/* Segmented prompts: tokenize each segment on its own and lay them out (segments.h). */
#include "rag/segments.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Sentinel message contents: the rendered template is cut at them. Control
 * bytes cannot come from a template and survive llama3's trim. */
#define SENT_SYS "\x01kvs-system\x01"
#define SENT_USER "\x01kvs-user\x01"

/* Growing token list. */
typedef struct toks {
    int32_t *v;
    int n, cap;
} toks;

static int toks_reserve(toks *t, int extra) {
    if (t->n + extra <= t->cap) return KVS_OK;
    int cap = t->cap ? t->cap : 256;
    while (cap < t->n + extra) cap *= 2;
    int32_t *v = realloc(t->v, (size_t)cap * sizeof *v);
    if (!v) return kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
    t->v = v;
    t->cap = cap;
    return KVS_OK;
}

/* Appends the tokens of text[0..len). A text never has more tokens than
 * bytes plus BOS and EOS. */
static int toks_append_text(toks *t, const kvs_model *model, const char *text, size_t len, int flags,
                            const char *what) {
    if (len > (size_t)(1 << 28))
        return kvs_error(KVS_ERR_INVALID_ARG, "segments: %s is too long (%zu bytes)", what, len);
    int st = toks_reserve(t, (int)len + 2);
    if (st) return st;
    int n = 0;
    st = kvs_tokenize(model, text, len, flags, t->v + t->n, t->cap - t->n, &n);
    if (st) return kvs_error_prefix(st, "segments: %s", what);
    t->n += n;
    return KVS_OK;
}

/* The pieces of the chat template around the system and user contents:
 * head SYS mid USER tail (without a system message: head USER tail, and
 * mid = NULL). Pointers into *buf (malloc'd; the sentinels are cut out by
 * writing NULs). */
typedef struct tmpl_pieces {
    char *buf;
    const char *head, *mid, *tail;
} tmpl_pieces;

static int render_pieces(const kvs_model *model, const char *system, tmpl_pieces *p) {
    memset(p, 0, sizeof *p);
    kvs_chat_message msgs[2];
    int n = 0;
    if (system) msgs[n++] = (kvs_chat_message){"system", SENT_SYS};
    msgs[n++] = (kvs_chat_message){"user", SENT_USER};
    int st = kvs_chat_render(model, NULL, msgs, n, 1, &p->buf);
    if (st) return kvs_error_prefix(st, "segments: chat template");
    char *u = strstr(p->buf, SENT_USER);
    char *s = system ? strstr(p->buf, SENT_SYS) : NULL;
    if (!u || (system && (!s || s > u)))
        return kvs_error(KVS_ERR_UNSUPPORTED, "segments: the chat template does not place the system and user "
                         "messages in order; cannot lay out segments");
    p->head = p->buf;
    p->tail = u + strlen(SENT_USER);
    *u = 0;
    if (s) {
        p->mid = s + strlen(SENT_SYS);
        *s = 0;
    }
    return KVS_OK;
}

static int build_doc_prefix(const kvs_model *model, const kvs_seg_input *in, int bos_flag, toks *dp) {
    const int sp = KVS_TOKENIZE_PARSE_SPECIAL;
    if (in->doc_prefix)
        return toks_append_text(dp, model, in->doc_prefix, strlen(in->doc_prefix), bos_flag | sp, "doc prefix");
    if (!in->chat) return toks_append_text(dp, model, "", 0, bos_flag, "doc prefix"); /* BOS or nothing */
    /* The template text before the docs, with an empty system message. */
    tmpl_pieces p;
    int st = render_pieces(model, "", &p);
    if (!st) {
        size_t hl = strlen(p.head), ml = strlen(p.mid);
        char *s = malloc(hl + ml + 1);
        if (!s) st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
        if (!st) {
            memcpy(s, p.head, hl);
            memcpy(s + hl, p.mid, ml + 1);
            st = toks_append_text(dp, model, s, hl + ml, bos_flag | sp, "doc prefix");
            free(s);
        }
    }
    free(p.buf);
    return st;
}

static int add_seg(kvs_seg_layout *lay, int *cap, kvs_seg_kind kind, int start, int end, int doc) {
    if (end <= start) return KVS_OK;
    if (lay->n_segs == *cap) {
        int c = *cap ? *cap * 2 : 8;
        kvs_seg *s = realloc(lay->segs, (size_t)c * sizeof *s);
        if (!s) return kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
        lay->segs = s;
        *cap = c;
    }
    lay->segs[lay->n_segs++] = (kvs_seg){kind, start, end, doc};
    return KVS_OK;
}

/* Concatenates a, b, c (any may be NULL) into a malloc'd string. */
static char *concat3(const char *a, const char *b, const char *c, size_t *len) {
    size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0, lc = c ? strlen(c) : 0;
    char *s = malloc(la + lb + lc + 1);
    if (!s) return NULL;
    if (la) memcpy(s, a, la);
    if (lb) memcpy(s + la, b, lb);
    if (lc) memcpy(s + la + lb, c, lc);
    s[la + lb + lc] = 0;
    *len = la + lb + lc;
    return s;
}

static int build(const kvs_model *model, const kvs_seg_input *in, kvs_seg_layout *lay, toks *t, toks *dp) {
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    const int bos = info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0, sp = KVS_TOKENIZE_PARSE_SPECIAL;
    int seg_cap = 0, st;
    tmpl_pieces p;
    memset(&p, 0, sizeof p);
    char *s = NULL;
    size_t len = 0;

    /* prefix */
    if (in->chat) {
        if ((st = render_pieces(model, in->system, &p))) return st;
        if (!(s = concat3(p.head, in->system, p.mid, &len))) st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
    } else {
        if (!(s = concat3(in->system, NULL, NULL, &len))) st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
    }
    if (!s) goto out;
    if ((st = toks_append_text(t, model, s, len, bos | sp, "system segment"))) goto out;
    if ((st = add_seg(lay, &seg_cap, KVS_SEG_PREFIX, 0, t->n, -1))) goto out;

    /* docs: plain text */
    for (int i = 0; i < in->n_docs; i++) {
        if (!in->docs[i]) {
            st = kvs_error(KVS_ERR_INVALID_ARG, "segments: doc %d is NULL", i);
            goto out;
        }
        size_t dl = in->doc_lens ? in->doc_lens[i] : strlen(in->docs[i]);
        int start = t->n;
        char what[32];
        snprintf(what, sizeof what, "doc %d", i);
        if ((st = toks_append_text(t, model, in->docs[i], dl, 0, what))) goto out;
        if ((st = add_seg(lay, &seg_cap, KVS_SEG_DOC, start, t->n, i))) goto out;
    }

    /* question + template tail */
    free(s);
    if (!(s = concat3(in->question, in->chat ? p.tail : NULL, NULL, &len))) {
        st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
        goto out;
    }
    int qstart = t->n;
    if ((st = toks_append_text(t, model, s, len, sp, "question"))) goto out;
    if (t->n == qstart) {
        st = kvs_error(KVS_ERR_INVALID_ARG, "segments: the question is empty (it must give at least one token: "
                       "its last token yields the first logits)");
        goto out;
    }
    if ((st = add_seg(lay, &seg_cap, KVS_SEG_QUESTION, qstart, t->n, -1))) goto out;
    st = build_doc_prefix(model, in, bos, dp);
out:
    free(s);
    free(p.buf);
    return st;
}

int kvs_seg_layout_build(const kvs_model *model, const kvs_seg_input *in, kvs_seg_layout *out) {
    memset(out, 0, sizeof *out);
    if (!model || !in || in->n_docs < 0 || (in->n_docs > 0 && !in->docs))
        return kvs_error(KVS_ERR_INVALID_ARG, "segments: need a model and an input with n_docs >= 0 docs");
    kvs_seg_layout lay;
    memset(&lay, 0, sizeof lay);
    toks t = {0}, dp = {0};
    int st = build(model, in, &lay, &t, &dp);
    if (!st && lay.n_segs > 1) {
        if (!(lay.borders = malloc((size_t)(lay.n_segs - 1) * sizeof *lay.borders)))
            st = kvs_error(KVS_ERR_NOMEM, "segments: out of memory");
        for (int i = 1; !st && i < lay.n_segs; i++) lay.borders[lay.n_borders++] = lay.segs[i].start;
    }
    if (st) {
        free(t.v);
        free(dp.v);
        free(lay.segs);
        free(lay.borders);
        return st;
    }
    lay.tokens = t.v;
    lay.n_tokens = t.n;
    lay.doc_prefix = dp.v;
    lay.n_doc_prefix = dp.n;
    *out = lay;
    return KVS_OK;
}

void kvs_seg_layout_free(kvs_seg_layout *lay) {
    if (!lay) return;
    free(lay->tokens);
    free(lay->segs);
    free(lay->doc_prefix);
    free(lay->borders);
    memset(lay, 0, sizeof *lay);
}

int kvs_seg_doc_at_own_prefix(const kvs_seg_layout *lay, const kvs_seg *s) {
    return s->start == lay->n_doc_prefix &&
           (!lay->n_doc_prefix || !memcmp(lay->tokens, lay->doc_prefix, (size_t)lay->n_doc_prefix * sizeof *lay->tokens));
}

int kvs_seg_layout_first_doc(const kvs_seg_layout *lay) {
    for (int i = 0; i < lay->n_segs; i++)
        if (lay->segs[i].kind == KVS_SEG_DOC) return i;
    return -1;
}
