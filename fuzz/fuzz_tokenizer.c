/*
 * libFuzzer target for the tokenizers and the streaming detokenizer, on
 * the byte-level BPE (GPT-2) and SentencePiece (Llama) vocabularies of
 * ../shared/tokenizer-tests (KVS_FUZZ_VOCAB_DIR): the text a client sends
 * and the token ids the server streams back as text.
 *
 * Input: one mode byte (bit 0: the vocabulary, bits 1-2: KVS_TOKENIZE_*
 * flags, bit 3: what the rest is), then
 *   text    encoded: it must succeed exactly when the text is valid UTF-8
 *           (else KVS_ERR_UTF8), give ids in the vocabulary, and decode
 *           back to the text (SentencePiece: less its prefix space, after
 *           "<s>" where BOS was added; not checked where the text holds
 *           U+2581, SentencePiece's space mark, which decodes as a space,
 *           nor with control tokens parsed, after which SentencePiece
 *           text takes a prefix space of its own, as in llama.cpp); the
 *           streaming detokenizer, fed the ids one by one, must give the
 *           ids' bytes but for NULs, which it turns into U+FFFD (detok.c:
 *           its text goes out as C strings);
 *   ids     3 bytes each, any value: the detokenizer refuses ids outside
 *           the vocabulary, and what it streams is always valid UTF-8
 *           without NULs (a server puts it in JSON), and is the tokens'
 *           bytes (NULs as U+FFFD) whenever those are valid UTF-8.
 * The UTF-8 rules are checked here by a validator of its own, not the
 * library's.
 */
#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "kvstitch.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 4096
#define OUT_CAP (64 * MAX_IDS)

typedef struct vocab {
    kvs_gguf *g;
    kvs_tokenizer *t;
    int spm;
} vocab;

static vocab vocabs[2];

static void open_vocab(vocab *v, const char *name, int spm) {
    const char *dir = getenv("KVS_FUZZ_VOCAB_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "../shared/tokenizer-tests", name);
    if (kvs_gguf_open(path, &v->g) != KVS_OK || kvs_tokenizer_new(v->g, &v->t) != KVS_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, kvs_last_error());
        exit(2);
    }
    v->spm = spm;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    open_vocab(&vocabs[0], "ggml-vocab-gpt-2.gguf", 0);
    open_vocab(&vocabs[1], "ggml-vocab-llama-spm.gguf", 1);
    return 0;
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past
 * U+10FFFF. */
static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const uint8_t b = s[i];
        size_t len;
        uint32_t cp;
        if (b < 0x80) { i++; continue; }
        if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
        else if (b >= 0xE0 && b <= 0xEF) { len = 3; cp = b & 0x0F; }
        else if (b >= 0xF0 && b <= 0xF4) { len = 4; cp = b & 0x07; }
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* The tokens' bytes (rendering control tokens) into out; returns the length. */
static size_t token_bytes(const kvs_tokenizer *t, const int32_t *ids, int n, char *out) {
    size_t k = 0, m;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(kvs_tokenizer_token_bytes(t, ids[i], 1, out + k, OUT_CAP - k, &m) == KVS_OK);
        FUZZ_CHECK(m <= OUT_CAP - k);
        k += m;
    }
    return k;
}

/* The streaming detokenizer's text for ids (rendering control tokens) into
 * out; returns the length, or -1 where it refused an id. */
static long streamed(const kvs_tokenizer *t, const int32_t *ids, int n, char *out) {
    kvs_detok *d = NULL;
    FUZZ_CHECK(kvs_detok_new_tok(t, 1, &d) == KVS_OK);
    size_t k = 0, m = 0;
    long result = 0;
    for (int i = 0; i < n && result == 0; i++) {
        if (kvs_detok_push(d, ids[i], out + k, OUT_CAP - k, &m) != KVS_OK) result = -1;
        else k += m;
        FUZZ_CHECK(k < OUT_CAP);
    }
    if (result == 0) {
        FUZZ_CHECK(kvs_detok_flush(d, out + k, OUT_CAP - k, &m) == KVS_OK);
        k += m;
        FUZZ_CHECK(k < OUT_CAP);
        result = (long)k;
    }
    kvs_detok_free(d);
    return result;
}

static char out_tok[OUT_CAP], out_stream[OUT_CAP], out_want[3 * OUT_CAP];

/* What the detokenizer streams for valid UTF-8 bytes s[0, n): s with each
 * NUL as U+FFFD, in out_want; returns its length. */
static size_t without_nuls(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i]) out_want[k++] = s[i];
        else {
            memcpy(out_want + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
    }
    return k;
}
static int32_t ids[MAX_IDS];

static void fuzz_text(const vocab *v, int flags, const uint8_t *s, size_t len) {
    int n = -1;
    const int st = kvs_tokenizer_encode(v->t, (const char *)s, len, flags, ids, MAX_IDS, &n);
    if (st == KVS_ERR_BUFFER_TOO_SMALL) return; /* more ids than MAX_IDS */
    FUZZ_CHECK(st == (valid_utf8(s, len) ? KVS_OK : KVS_ERR_UTF8));
    if (st != KVS_OK) return;
    FUZZ_CHECK(n >= 0 && n <= MAX_IDS);
    for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < kvs_tokenizer_n_vocab(v->t));
    size_t k = token_bytes(v->t, ids, n, out_tok);
    const long ks = streamed(v->t, ids, n, out_stream);
    const size_t kw = without_nuls(out_tok, k);
    FUZZ_CHECK(ks == (long)kw && !memcmp(out_stream, out_want, kw));
    const char *d = out_tok;
    if (v->spm && (flags & KVS_TOKENIZE_ADD_BOS)) { /* <s> rendered first, then the prefix space */
        if (k >= 4 && !memcmp(d, "<s> ", 4)) { d += 4; k -= 4; }
        else if (k == 3 && len == 0) { d += 3; k = 0; }
    } else if (v->spm && k > 0 && d[0] == ' ') { d++; k--; }
    if (v->spm && ((flags & KVS_TOKENIZE_PARSE_SPECIAL) || memmem(s, len, "\xE2\x96\x81", 3))) return;
    FUZZ_CHECK(k == len && !memcmp(d, s, len));
}

static void fuzz_ids(const vocab *v, const uint8_t *s, size_t len) {
    int n = 0, outside = 0;
    const int n_vocab = kvs_tokenizer_n_vocab(v->t);
    for (size_t i = 0; i + 3 <= len && n < MAX_IDS; i += 3) {
        /* mostly in the vocabulary; the top bit of the third byte: any id */
        const uint32_t raw = (uint32_t)s[i] | (uint32_t)s[i + 1] << 8 | (uint32_t)s[i + 2] << 16;
        const int32_t id = s[i + 2] & 0x80 ? (int32_t)(raw << 8) >> 8 : (int32_t)(raw % (uint32_t)n_vocab);
        outside |= id < 0 || id >= n_vocab;
        ids[n++] = id;
    }
    const long ks = streamed(v->t, ids, n, out_stream);
    if (outside) {
        FUZZ_CHECK(ks < 0);
        return;
    }
    FUZZ_CHECK(ks >= 0 && valid_utf8((const uint8_t *)out_stream, (size_t)ks) && !memchr(out_stream, 0, (size_t)ks));
    const size_t k = token_bytes(v->t, ids, n, out_tok);
    if (valid_utf8((const uint8_t *)out_tok, k)) {
        const size_t kw = without_nuls(out_tok, k);
        FUZZ_CHECK((size_t)ks == kw && !memcmp(out_stream, out_want, kw));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const vocab *v = &vocabs[mode & 1];
    const int flags = (mode >> 1) & (KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PARSE_SPECIAL);
    if (mode & 8) fuzz_ids(v, data + 1, size - 1);
    else fuzz_text(v, flags, data + 1, size - 1);
    return 0;
}
