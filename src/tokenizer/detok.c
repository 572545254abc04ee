/*
 * Streaming detokenizer: token bytes are emitted only as complete UTF-8
 * characters. A multi-byte character split across tokens (byte-level BPE
 * and <0xXX> byte tokens do this for emoji and CJK) is held back until its
 * last byte arrives; bytes that can never form a valid character become
 * U+FFFD (one per maximal invalid subsequence), and so does a NUL byte (a
 * byte token's U+0000): the text goes out as C strings (kvs_generate's
 * result, the server's JSON), which a NUL ends, and everything after it had
 * been dropped.
 *
 * State: at most 3 held-back bytes. A push that does not fit the caller's
 * buffer changes nothing, so it can be retried with a larger one.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

struct kvs_detok {
    const kvs_tokenizer *t;
    int render_special;
    unsigned char pend[4]; /* incomplete character carried to the next push */
    int n_pend;
    unsigned char *work;   /* (work_cap) pend + the token's bytes */
    size_t work_cap;
};

int kvs_detok_new_tok(const kvs_tokenizer *t, int render_special, kvs_detok **out) {
    if (!t || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_detok_new: NULL argument");
    /* Decoding never makes a token longer than its text, so the longest
     * text bounds the work buffer: no allocation in push. */
    size_t max_len = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->text_len[i] > max_len) max_len = t->text_len[i];
    kvs_detok *d = calloc(1, sizeof *d);
    if (d) {
        d->work_cap = max_len + sizeof d->pend;
        d->work = malloc(d->work_cap);
    }
    if (!d || !d->work) {
        if (d) free(d->work);
        free(d);
        return kvs_error(KVS_ERR_NOMEM, "kvs_detok_new: out of memory");
    }
    d->t = t;
    d->render_special = render_special;
    *out = d;
    return KVS_OK;
}

void kvs_detok_free(kvs_detok *d) {
    if (!d) return;
    free(d->work);
    free(d);
}

/* Length of the longest prefix of s[0..n) (n < needed length) that some
 * valid sequence starts with; 0 if even s[0] cannot start one. */
static int valid_prefix_len(const unsigned char *s, int n) {
    int len = kvs_utf8_seq_len(s[0]);
    if (len == 0) return 0;
    int k = 1;
    for (; k < n && k < len; k++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1) {
            if (s[0] == 0xE0) lo = 0xA0;      /* overlong */
            else if (s[0] == 0xED) hi = 0x9F; /* surrogates */
            else if (s[0] == 0xF0) lo = 0x90; /* overlong */
            else if (s[0] == 0xF4) hi = 0x8F; /* > U+10FFFF */
        }
        if (s[k] < lo || s[k] > hi) break;
    }
    return k;
}

/* Scans s[0..n): writes complete characters (invalid ones as U+FFFD) to
 * out (if not NULL) and returns their byte count; *held = length of the
 * trailing incomplete-but-possible character (0 when flushing). */
static size_t scan(const unsigned char *s, size_t n, int flush, char *out, size_t *held) {
    static const char repl[3] = {'\xEF', '\xBF', '\xBD'};
    size_t i = 0, k = 0;
    *held = 0;
    while (i < n) {
        uint32_t cp;
        int l = kvs_utf8_decode(s + i, n - i, &cp);
        if (l > 0 && cp != 0) {
            if (out) memcpy(out + k, s + i, (size_t)l);
            k += (size_t)l;
            i += (size_t)l;
            continue;
        }
        int need = kvs_utf8_seq_len(s[i]);
        int p = valid_prefix_len(s + i, (int)(n - i < 4 ? n - i : 4));
        if (!flush && need > 0 && p == (int)(n - i) && p < need) {
            *held = n - i; /* cut short by the end of what we have so far */
            break;
        }
        if (out) memcpy(out + k, repl, 3);
        k += 3;
        i += (size_t)(p > 0 ? p : 1);
    }
    return k;
}

static int emit(kvs_detok *d, size_t n, int flush, char *buf, size_t cap, size_t *n_out) {
    size_t held;
    size_t k = scan(d->work, n, flush, NULL, &held);
    *n_out = k;
    if (!buf) /* (a NULL buf with a capacity had read "need a buffer of 2, have 16") */
        return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "kvs_detok: %zu bytes of text need a buffer of %zu, buf is NULL", k,
                         k + 1);
    if (cap < k + 1)
        return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "kvs_detok: %zu bytes of text need a buffer of %zu, have %zu", k,
                         k + 1, cap);
    scan(d->work, n, flush, buf, &held);
    buf[k] = 0;
    memcpy(d->pend, d->work + n - held, held);
    d->n_pend = (int)held;
    return KVS_OK;
}

int kvs_detok_push(kvs_detok *d, int32_t token, char *buf, size_t cap, size_t *n_out) {
    if (!d || !n_out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_detok_push: NULL argument");
    memcpy(d->work, d->pend, (size_t)d->n_pend);
    size_t m = 0;
    int st = kvs_tokenizer_token_bytes(d->t, token, d->render_special, (char *)d->work + d->n_pend,
                                       d->work_cap - (size_t)d->n_pend, &m);
    if (st) return st;
    return emit(d, (size_t)d->n_pend + m, 0, buf, cap, n_out);
}

int kvs_detok_flush(kvs_detok *d, char *buf, size_t cap, size_t *n_out) {
    if (!d || !n_out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_detok_flush: NULL argument");
    memcpy(d->work, d->pend, (size_t)d->n_pend);
    return emit(d, (size_t)d->n_pend, 1, buf, cap, n_out);
}
