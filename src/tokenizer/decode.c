/*
 * Token -> bytes:
 *   byte-level BPE  each character of the token text maps back to one byte
 *                   (inverse GPT-2 mapping);
 *   SentencePiece   U+2581 -> space; <0xXX> byte tokens -> that byte;
 *   CONTROL / UNKNOWN tokens give their text only when render_special;
 *   USER_DEFINED tokens give their text (BPE: as stored; SPM: U+2581 -> space).
 */
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

static void put(char *buf, size_t cap, size_t *k, const char *p, size_t n) {
    if (*k < cap) memcpy(buf + *k, p, n <= cap - *k ? n : cap - *k);
    *k += n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int kvs_tokenizer_token_bytes(const kvs_tokenizer *t, int32_t id, int render_special, char *buf,
                              size_t cap, size_t *n_out) {
    if (!t || !n_out || (!buf && cap > 0))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_token_to_bytes: %s is NULL",
                         !t ? "the model" : !n_out ? "n_out" : "buf (with a capacity above 0)");
    if (id < 0 || id >= t->n_vocab)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_token_to_bytes: token id %d is outside the vocabulary (%d tokens)",
                         (int)id, t->n_vocab);
    const char *s = t->text[id];
    size_t n = t->text_len[id], k = 0;
    uint8_t ty = t->ttype[id];

    if (ty == KVS_TT_CONTROL || ty == KVS_TT_UNKNOWN) {
        if (render_special) put(buf, cap, &k, s, n);
    } else if (ty == KVS_TT_USER_DEFINED && t->type == KVS_TOK_BPE) {
        put(buf, cap, &k, s, n); /* stored as typed, not byte-level encoded */
    } else if (t->type == KVS_TOK_SPM) {
        int b0, b1;
        if (ty == KVS_TT_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
            (b0 = hexval(s[3])) >= 0 && (b1 = hexval(s[4])) >= 0) {
            char c = (char)(b0 * 16 + b1);
            put(buf, cap, &k, &c, 1);
        } else {
            for (size_t i = 0; i < n;) {
                if (n - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                    put(buf, cap, &k, " ", 1);
                    i += 3;
                } else {
                    put(buf, cap, &k, s + i, 1);
                    i++;
                }
            }
        }
    } else {
        const unsigned char *u = (const unsigned char *)s;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = kvs_utf8_decode(u + i, n - i, &cp);
            int b = l > 0 ? kvs_cp_to_byte(cp) : -1;
            if (b >= 0) {
                char c = (char)b;
                put(buf, cap, &k, &c, 1);
            } else {
                /* Not a byte-level character (a hand-added token): keep its
                 * UTF-8 as is. */
                if (l == 0) l = 1;
                put(buf, cap, &k, s + i, (size_t)l);
            }
            i += (size_t)l;
        }
    }
    *n_out = k;
    if (k > cap)
        return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "kvs_token_to_bytes: token %d needs %zu bytes, buffer has %zu",
                         (int)id, k, cap);
    return KVS_OK;
}
