/* UTF-8 decoding, validation and encoding (strict: RFC 3629). */
#include "tokenizer/unicode.h"

#include "base/error.h"
#include "kvstitch.h"

#include <string.h>

int kvs_utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0; /* continuation byte, or C0/C1 (always overlong) */
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

int kvs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char b0 = s[0];
    if (b0 < 0x80) { *cp = b0; return 1; }
    int len = kvs_utf8_seq_len(b0);
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t c;
    if (len == 2) {
        if ((s[1] & 0xC0) != 0x80) return 0;
        c = ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3F);
    } else if (len == 3) {
        if ((s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        c = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return 0; /* overlong / surrogate */
    } else {
        if ((s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        c = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
            ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (c < 0x10000 || c > 0x10FFFF) return 0;
    }
    *cp = c;
    return len;
}

size_t kvs_utf8_validate(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int len = kvs_utf8_decode(u + i, n - i, &cp);
        if (len == 0) return i;
        i += (size_t)len;
    }
    return n;
}

int kvs_utf8_check(const char *text, size_t len) {
    if (!text && len) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_utf8_check: NULL text");
    const size_t bad = kvs_utf8_validate(text, len);
    if (bad < len)
        return kvs_error(KVS_ERR_UTF8, "invalid UTF-8 at byte offset %zu (byte 0x%02X)", bad,
                         (unsigned)(unsigned char)text[bad]);
    return KVS_OK;
}

/* kvs_utf8_display and kvs_utf8_repair: invalid sequences (and, with
 * controls, C0, DEL and C1 characters) become U+FFFD, whole characters only. */
static size_t utf8_clean(const char *s, size_t n, char *out, size_t cap, int controls) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n && cap > 0;) {
        uint32_t cp;
        int len = kvs_utf8_decode(u + i, n - i, &cp);
        const char *src = s + i;
        if (len == 0 || (controls && (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)))) { /* U+FFFD */
            src = "\xEF\xBF\xBD";
            len = len ? len : 1;
            if (o + 3 >= cap) break;
            memcpy(out + o, src, 3);
            o += 3;
        } else {
            if (o + (size_t)len >= cap) break;
            memcpy(out + o, src, (size_t)len);
            o += (size_t)len;
        }
        i += (size_t)len;
    }
    if (cap > 0) out[o] = 0;
    return o;
}

size_t kvs_utf8_display(const char *s, size_t n, char *out, size_t cap) { return utf8_clean(s, n, out, cap, 1); }

size_t kvs_utf8_repair(const char *s, size_t n, char *out, size_t cap) {
    if (!s) n = 0;
    return utf8_clean(s, n, out, cap, 0);
}

int kvs_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
