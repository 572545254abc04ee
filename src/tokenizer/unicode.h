/*
 * UTF-8 decoding and the code point classes the pre-tokenizers need.
 * The class tables are generated (scripts/gen-unicode-tables.py) into
 * unicode_tables.c.
 */
#ifndef KVS_TOKENIZER_UNICODE_H
#define KVS_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    KVS_UC_LETTER = 1, /* \p{L}: general category L* */
    KVS_UC_NUMBER = 2, /* \p{N}: general category N* */
    KVS_UC_SPACE = 4,  /* \s: White_Space property */
};

typedef struct kvs_uc_range {
    uint32_t lo, hi; /* inclusive */
    uint32_t flags;
} kvs_uc_range;

extern const kvs_uc_range kvs_uc_ranges[];
extern const int kvs_uc_n_ranges;
extern const unsigned char kvs_uc_latin1[256];
extern const char kvs_uc_version[];

/* Class flags of a code point (0 for anything not L, N or White_Space). */
static inline unsigned kvs_uc_flags(uint32_t cp) {
    if (cp < 256) return kvs_uc_latin1[cp];
    int lo = 0, hi = kvs_uc_n_ranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (cp < kvs_uc_ranges[mid].lo) hi = mid - 1;
        else if (cp > kvs_uc_ranges[mid].hi) lo = mid + 1;
        else return kvs_uc_ranges[mid].flags;
    }
    return 0;
}

/* Decodes one strictly valid UTF-8 sequence at s[0..n) (no overlongs, no
 * surrogates, <= U+10FFFF). Returns its length 1..4 and stores the code
 * point, or returns 0 if the bytes there are not a valid sequence (including
 * a sequence cut short by n). */
int kvs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Byte offset of the first invalid sequence in s[0..n), or n if all valid. */
size_t kvs_utf8_validate(const char *s, size_t n);

/* Length a sequence starting with lead byte b claims (1..4), 0 if b cannot
 * start a sequence. */
int kvs_utf8_seq_len(unsigned char b);

/* s[0..n) made safe to print and to put in JSON: invalid sequences and
 * control characters (C0, DEL, C1) become U+FFFD, the rest is kept. Writes
 * at most cap - 1 bytes and a NUL (whole characters only); returns the
 * bytes written. cap >= 3 n + 1 always holds it all. */
size_t kvs_utf8_display(const char *s, size_t n, char *out, size_t cap);

/* Encodes cp (<= U+10FFFF) into out; returns the length 1..4. */
int kvs_utf8_encode(uint32_t cp, char out[4]);

#endif
