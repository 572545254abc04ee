/* Hand-written pre-tokenizer matchers; see pretok.h for the regexes. */
#include "tokenizer/pretok.h"

#include <string.h>

#include "tokenizer/unicode.h"

#define IS_L(i) (fl[i] & KVS_UC_LETTER)
#define IS_N(i) (fl[i] & KVS_UC_NUMBER)
#define IS_S(i) (fl[i] & KVS_UC_SPACE)
/* [^\s\p{L}\p{N}] */
#define IS_P(i) (!(fl[i] & (KVS_UC_LETTER | KVS_UC_NUMBER | KVS_UC_SPACE)))
#define IS_CRLF(i) (cps[i] == '\r' || cps[i] == '\n')

static const struct { const char *name; kvs_pretok_kind kind; } pretok_names[] = {
    {"gpt-2", KVS_PRETOK_GPT2},       {"phi-2", KVS_PRETOK_GPT2},
    {"roberta-bpe", KVS_PRETOK_GPT2}, {"smollm", KVS_PRETOK_SMOLLM},
    {"llama-bpe", KVS_PRETOK_LLAMA3}, {"llama3", KVS_PRETOK_LLAMA3},
    {"llama-v3", KVS_PRETOK_LLAMA3},  {"qwen2", KVS_PRETOK_QWEN2},
    {"deepseek-r1-qwen", KVS_PRETOK_QWEN2},
};

kvs_pretok_kind kvs_pretok_from_name(const char *name, int *known) {
    if (known) *known = 0;
    if (!name) return KVS_PRETOK_GPT2;
    for (size_t i = 0; i < sizeof pretok_names / sizeof pretok_names[0]; i++) {
        if (strcmp(name, pretok_names[i].name) == 0) {
            if (known) *known = 1;
            return pretok_names[i].kind;
        }
    }
    return KVS_PRETOK_GPT2;
}

static uint32_t ascii_lower(uint32_t c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i (ci: ASCII case-insensitive); 0 if none. */
static int match_contraction(const uint32_t *cps, int i, int e, int ci) {
    if (cps[i] != '\'' || i + 1 >= e) return 0;
    uint32_t c1 = ci ? ascii_lower(cps[i + 1]) : cps[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= e) return 0;
    uint32_t c2 = ci ? ascii_lower(cps[i + 2]) : cps[i + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* ` ?[^\s\p{L}\p{N}]+`; 0 if no match. */
static int match_punct(const uint32_t *cps, const uint8_t *fl, int i, int e) {
    int j = i;
    if (cps[j] == ' ' && j + 1 < e && IS_P(j + 1)) j++;
    if (!IS_P(j)) return 0;
    while (j < e && IS_P(j)) j++;
    return j - i;
}

/* `\s+(?!\S)|\s+` at a whitespace code point i. The lookahead makes a run
 * followed by a non-space give back its last code point (which then starts
 * the next word, e.g. " word"), unless the run is a single code point. */
static int match_spaces(const uint8_t *fl, int i, int e) {
    int r = i;
    while (r < e && IS_S(r)) r++;
    if (r == e || r - i < 2) return r - i;
    return r - i - 1;
}

/* One GPT-2 word at i within [i, e); e acts as end of text. */
static int gpt2_word(const uint32_t *cps, const uint8_t *fl, int i, int e) {
    int m = match_contraction(cps, i, e, 0);
    if (m) return m;
    int j = i;
    if (cps[j] == ' ' && j + 1 < e && (IS_L(j + 1) || IS_N(j + 1))) j++;
    if (IS_L(j)) { /* ` ?\p{L}+` */
        while (j < e && IS_L(j)) j++;
        return j - i;
    }
    if (IS_N(j)) { /* ` ?\p{N}+` */
        while (j < e && IS_N(j)) j++;
        return j - i;
    }
    m = match_punct(cps, fl, i, e);
    if (m) return m;
    if (IS_S(i)) return match_spaces(fl, i, e);
    return 1; /* unreachable: every code point is L, N, \s or the punct class */
}

/* One Llama-3 (max_digits = 3) or Qwen2 (max_digits = 1) word at i. */
static int llama3_word(const uint32_t *cps, const uint8_t *fl, int i, int e, int max_digits) {
    int m = match_contraction(cps, i, e, 1);
    if (m) return m;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    int j = i;
    if (!IS_CRLF(i) && !IS_L(i) && !IS_N(i) && i + 1 < e && IS_L(i + 1)) j++;
    if (IS_L(j)) {
        while (j < e && IS_L(j)) j++;
        return j - i;
    }
    if (IS_N(i)) { /* \p{N}{1,max} */
        j = i;
        while (j < e && j - i < max_digits && IS_N(j)) j++;
        return j - i;
    }
    m = match_punct(cps, fl, i, e); /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    if (m) {
        j = i + m;
        while (j < e && IS_CRLF(j)) j++;
        return j - i;
    }
    if (IS_S(i)) {
        /* \s*[\r\n]+ : backtracking stops at the last CR/LF of the run. */
        int r = i, last = -1;
        while (r < e && IS_S(r)) {
            if (IS_CRLF(r)) last = r;
            r++;
        }
        if (last >= 0) return last + 1 - i;
        return match_spaces(fl, i, e);
    }
    return 1;
}

int kvs_pretok_split(kvs_pretok_kind kind, const uint32_t *cps, const uint8_t *fl, int n,
                     int32_t *ends) {
    int nw = 0, i = 0;
    switch (kind) {
    case KVS_PRETOK_SMOLLM:
        while (i < n) {
            if (IS_N(i)) { ends[nw++] = ++i; continue; }
            int e = i;
            while (e < n && !IS_N(e)) e++;
            while (i < e) {
                i += gpt2_word(cps, fl, i, e);
                ends[nw++] = i;
            }
        }
        break;
    case KVS_PRETOK_LLAMA3:
    case KVS_PRETOK_QWEN2: {
        int max_digits = kind == KVS_PRETOK_LLAMA3 ? 3 : 1;
        while (i < n) {
            i += llama3_word(cps, fl, i, n, max_digits);
            ends[nw++] = i;
        }
        break;
    }
    case KVS_PRETOK_GPT2:
    default:
        while (i < n) {
            i += gpt2_word(cps, fl, i, n);
            ends[nw++] = i;
        }
        break;
    }
    return nw;
}
