/*
 * Tokenizer unit tests: flags (BOS, special parsing), errors (invalid UTF-8
 * with its offset, small buffers, bad vocabularies), decoding, the streaming
 * detokenizer, the pre-tokenizer choice on synthetic vocabularies, and a
 * fuzz-style run of random inputs (no crash; valid text round-trips).
 * Uses the vocabulary-only GGUFs of ../shared/tokenizer-tests.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf_builder.h"
#include "harness.h"
#include "kvstitch.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

typedef struct vocab {
    kvs_gguf *g;
    kvs_tokenizer *t;
    gb_buf mem; /* backing buffer of an in-memory GGUF */
} vocab;

static vocab v_gpt2, v_spm;

static int open_shared(vocab *v, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer-tests/%s", kt_shared_dir(), name);
    int st = kvs_gguf_open(path, &v->g);
    if (st == KVS_OK) st = kvs_tokenizer_new(v->g, &v->t);
    CHECK_MSG(st == KVS_OK, "%s: %s", path, kvs_last_error());
    return st;
}

static void close_vocab(vocab *v) {
    kvs_tokenizer_free(v->t);
    kvs_gguf_close(v->g);
    gb_free(&v->mem);
    memset(v, 0, sizeof *v);
}

static int enc(const kvs_tokenizer *t, const char *s, int flags, int32_t *ids, int cap) {
    int n = -1;
    int st = kvs_tokenizer_encode(t, s, strlen(s), flags, ids, cap, &n);
    if (st) {
        fprintf(stderr, "  encode('%s') failed: %s\n", s, kvs_last_error());
        return -1;
    }
    return n;
}

static int ids_eq(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* ---- synthetic byte-level vocabularies ---------------------------------- */

static unsigned byte_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
    return 256 + n;
}

/* A GPT-2 style vocabulary: the 256 byte characters (id = byte), then
 * extra[] tokens (types given, 1 = normal), merges[] "A B"; pre may be
 * NULL (key absent); model may be overridden ("gpt2" by default). */
static int build_vocab(vocab *v, const char *model, const char *pre, const char *const *extra,
                       const int32_t *extra_type, int n_extra, const char *const *merges, int n_merges) {
    gb_buf *b = &v->mem;
    int n_kv = 3 + (pre != NULL) + (merges != NULL) + 1;
    gb_header(b, 3, 0, (uint64_t)n_kv);
    gb_key(b, "general.architecture", GB_STRING);
    gb_str(b, "gpt2");
    gb_key(b, "tokenizer.ggml.model", GB_STRING);
    gb_str(b, model ? model : "gpt2");
    if (pre) {
        gb_key(b, "tokenizer.ggml.pre", GB_STRING);
        gb_str(b, pre);
    }
    gb_key(b, "tokenizer.ggml.tokens", GB_ARRAY);
    gb_u32(b, GB_STRING);
    gb_u64(b, 256 + (uint64_t)n_extra);
    for (unsigned i = 0; i < 256; i++) {
        unsigned cp = byte_cp(i);
        char u[3] = {(char)cp, 0, 0};
        if (cp >= 0x80) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); }
        gb_str(b, u);
    }
    for (int i = 0; i < n_extra; i++) gb_str(b, extra[i]);
    gb_key(b, "tokenizer.ggml.token_type", GB_ARRAY);
    gb_u32(b, GB_I32);
    gb_u64(b, 256 + (uint64_t)n_extra);
    for (int i = 0; i < 256; i++) gb_u32(b, 1);
    for (int i = 0; i < n_extra; i++) gb_u32(b, (uint32_t)extra_type[i]);
    if (merges) {
        gb_key(b, "tokenizer.ggml.merges", GB_ARRAY);
        gb_u32(b, GB_STRING);
        gb_u64(b, (uint64_t)n_merges);
        for (int i = 0; i < n_merges; i++) gb_str(b, merges[i]);
    }
    gb_key(b, "tokenizer.ggml.eos_token_id", GB_U32);
    gb_u32(b, 256);
    gb_pad(b, 32);
    int st = kvs_gguf_open_memory(b->p, b->len, &v->g);
    if (st) return st;
    return kvs_tokenizer_new(v->g, &v->t);
}

static const char *const syn_extra[] = {"<|end|>", "<tool>", "ab", "bc", "abc", "12", "123", "Ġa"};
static const int32_t syn_types[] = {3, 4, 1, 1, 1, 1, 1, 1};
static const char *const syn_merges[] = {"b c", "a b", "1 2", "12 3", "Ġ a"};
#define SYN_N 8
enum { ID_END = 256, ID_TOOL, ID_AB, ID_BC, ID_ABC, ID_12, ID_123, ID_SPA };

TEST(synthetic_vocab_and_pre) {
    vocab v = {0};
    int32_t ids[64];
    int n;
    /* gpt-2 rules: "abc" -> merges: (b c) rank 0 first -> a, bc. */
    int st = build_vocab(&v, NULL, "gpt-2", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) { close_vocab(&v); return; }
    n = enc(v.t, "abc", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'a', ID_BC}, 2));
    n = enc(v.t, "12345", 0, ids, 64); /* \p{N}+ is one word; merges 1 2 -> 12, 12 3 -> 123 */
    CHECK(ids_eq(ids, n, (int32_t[]){ID_123, '4', '5'}, 3));
    CHECK(kvs_tokenizer_is_eog(v.t, ID_END)); /* eos and <|end|> */
    close_vocab(&v);

    /* llama-bpe: ignore_merges takes "abc" whole; digits in groups of 3. */
    st = build_vocab(&v, NULL, "llama-bpe", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        n = enc(v.t, "abc", 0, ids, 64);
        CHECK(ids_eq(ids, n, (int32_t[]){ID_ABC}, 1));
        n = enc(v.t, "12345", 0, ids, 64);
        CHECK(ids_eq(ids, n, (int32_t[]){ID_123, '4', '5'}, 3));
        n = enc(v.t, "1234", 0, ids, 64);
        CHECK(ids_eq(ids, n, (int32_t[]){ID_123, '4'}, 2));
        CHECK(strcmp(kvs_tokenizer_pre_name(v.t), "llama-bpe") == 0);
    }
    close_vocab(&v);

    /* qwen2: one digit per word, so "12" never merges. */
    st = build_vocab(&v, NULL, "qwen2", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        n = enc(v.t, "123", 0, ids, 64);
        CHECK(ids_eq(ids, n, (int32_t[]){'1', '2', '3'}, 3));
    }
    close_vocab(&v);

    /* smollm: digits isolated first, then GPT-2. */
    st = build_vocab(&v, NULL, "smollm", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        n = enc(v.t, "123 a", 0, ids, 64);
        CHECK(ids_eq(ids, n, (int32_t[]){'1', '2', '3', ID_SPA}, 4));
    }
    close_vocab(&v);

    /* Unknown and absent pre-tokenizer names fall back to the GPT-2 split. */
    const char *pres[] = {"some-future-pre", NULL};
    for (int k = 0; k < 2; k++) {
        st = build_vocab(&v, NULL, pres[k], syn_extra, syn_types, SYN_N, syn_merges, 5);
        CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
        if (!st) {
            n = enc(v.t, "12345 abc", 0, ids, 64);
            CHECK(ids_eq(ids, n, (int32_t[]){ID_123, '4', '5', ID_SPA, ID_BC}, 5));
            CHECK(strcmp(kvs_tokenizer_pre_name(v.t), pres[k] ? pres[k] : "") == 0);
        }
        close_vocab(&v);
    }
}

TEST(special_token_kinds) {
    vocab v = {0};
    int32_t ids[64];
    int st = build_vocab(&v, NULL, "gpt-2", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) { close_vocab(&v); return; }
    /* USER_DEFINED (<tool>) is always matched; CONTROL (<|end|>) only when asked. */
    int n = enc(v.t, "x<tool>y", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'x', ID_TOOL, 'y'}, 3));
    n = enc(v.t, "x<|end|>", KVS_TOKENIZE_PARSE_SPECIAL, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'x', ID_END}, 2));
    n = enc(v.t, "x<|end|>", 0, ids, 64);
    CHECK(n == 8 && ids[1] == '<');
    /* Decoding: control text only when rendered; user-defined always. */
    char buf[32];
    size_t m = 99;
    CHECK(kvs_tokenizer_token_bytes(v.t, ID_END, 0, buf, sizeof buf, &m) == KVS_OK && m == 0);
    CHECK(kvs_tokenizer_token_bytes(v.t, ID_END, 1, buf, sizeof buf, &m) == KVS_OK && m == 7 &&
          memcmp(buf, "<|end|>", 7) == 0);
    CHECK(kvs_tokenizer_token_bytes(v.t, ID_TOOL, 0, buf, sizeof buf, &m) == KVS_OK && m == 6);
    /* No BOS in this vocabulary: ADD_BOS adds nothing. */
    CHECK_EQ_INT(kvs_tokenizer_bos(v.t), -1);
    n = enc(v.t, "a", KVS_TOKENIZE_ADD_BOS, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'a'}, 1));
    close_vocab(&v);
}

/* The longest special at a position wins, among those the flags allow: a
 * CONTROL one nested in a USER_DEFINED one gives way to it without
 * PARSE_SPECIAL; of two with the same text, the first the flags allow
 * (specials are matched by narrowing a sorted range byte by byte: a scan
 * of every special of the first byte had made 1 MB of '<' take 11 s on
 * gemma3). */
TEST(special_longest_match) {
    static const char *const extra[] = {"<t>", "<t>x", "<t>xy", "<", "<d>", "<d>", "<t>xyz!"};
    static const int32_t types[] = {4, 3, 4, 4, 3, 4, 3};
    enum { T = 256, TX, TXY, LT, D_CTL, D_USR, TXYZ };
    static const char *const merges[] = {"x y"}; /* (a vocabulary needs some; "xy" is none of its tokens) */
    vocab v = {0};
    int32_t ids[64];
    int st = build_vocab(&v, NULL, "gpt-2", extra, types, 7, merges, 1);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) { close_vocab(&v); return; }
    int n = enc(v.t, "a<t>xyb", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'a', TXY, 'b'}, 3));
    n = enc(v.t, "a<t>xz", 0, ids, 64); /* <t>x is CONTROL: <t> */
    CHECK(ids_eq(ids, n, (int32_t[]){'a', T, 'x', 'z'}, 4));
    n = enc(v.t, "a<t>xz", KVS_TOKENIZE_PARSE_SPECIAL, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){'a', TX, 'z'}, 3));
    n = enc(v.t, "<t>xyz!<t>xyz", KVS_TOKENIZE_PARSE_SPECIAL, ids, 64); /* the longest, then one cut short */
    CHECK(ids_eq(ids, n, (int32_t[]){TXYZ, TXY, 'z'}, 3));
    n = enc(v.t, "<t>xyz!", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){TXY, 'z', '!'}, 3));
    n = enc(v.t, "<<t<", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){LT, LT, 't', LT}, 4));
    n = enc(v.t, "<d>", 0, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){D_USR}, 1));
    n = enc(v.t, "<d>", KVS_TOKENIZE_PARSE_SPECIAL, ids, 64);
    CHECK(ids_eq(ids, n, (int32_t[]){D_CTL}, 1));
    close_vocab(&v);
}

TEST(bad_vocabularies) {
    vocab v = {0};
    int st = build_vocab(&v, "bert", "gpt-2", syn_extra, syn_types, SYN_N, syn_merges, 5);
    CHECK_EQ_INT(st, KVS_ERR_UNSUPPORTED);
    CHECK(strstr(kvs_last_error(), "bert") != NULL);
    close_vocab(&v);
    st = build_vocab(&v, NULL, "gpt-2", syn_extra, syn_types, SYN_N, NULL, 0);
    CHECK_EQ_INT(st, KVS_ERR_FORMAT);
    CHECK(strstr(kvs_last_error(), "tokenizer.ggml.merges") != NULL);
    close_vocab(&v);
    /* Merges naming unknown tokens are skipped, not fatal. */
    const char *const odd[] = {"zz qq", "nospace", "a b"};
    st = build_vocab(&v, NULL, "gpt-2", syn_extra, syn_types, SYN_N, odd, 3);
    CHECK_EQ_INT(st, KVS_OK);
    close_vocab(&v);
    CHECK_EQ_INT(kvs_tokenizer_new(NULL, NULL), KVS_ERR_INVALID_ARG);
}

/* ---- the shared vocabularies ------------------------------------------- */

TEST(load_shared_vocabs) {
    CHECK(open_shared(&v_gpt2, "ggml-vocab-gpt-2.gguf") == KVS_OK);
    CHECK(open_shared(&v_spm, "ggml-vocab-llama-spm.gguf") == KVS_OK);
    if (v_gpt2.t) {
        CHECK_EQ_INT(kvs_tokenizer_n_vocab(v_gpt2.t), 50257);
        CHECK_EQ_INT(kvs_tokenizer_add_bos(v_gpt2.t), 0);
        CHECK(kvs_tokenizer_is_eog(v_gpt2.t, 50256));
        CHECK(strcmp(kvs_tokenizer_pre_name(v_gpt2.t), "gpt-2") == 0);
    }
    if (v_spm.t) {
        CHECK_EQ_INT(kvs_tokenizer_n_vocab(v_spm.t), 32000);
        CHECK_EQ_INT(kvs_tokenizer_bos(v_spm.t), 1);
        CHECK_EQ_INT(kvs_tokenizer_eos(v_spm.t), 2);
        CHECK_EQ_INT(kvs_tokenizer_add_bos(v_spm.t), 1);
        CHECK(kvs_tokenizer_is_eog(v_spm.t, 2));
        CHECK(!kvs_tokenizer_is_eog(v_spm.t, 1));
        CHECK(strcmp(kvs_tokenizer_model_name(v_spm.t), "llama") == 0);
    }
}

TEST(spm_rules) {
    if (!v_spm.t) { CHECK(v_spm.t); return; }
    int32_t ids[64], ids2[64];
    /* BOS per flag; the leading space rule: "Hello" == " Hello" minus nothing. */
    int n = enc(v_spm.t, "Hello world", KVS_TOKENIZE_ADD_BOS, ids, 64);
    CHECK(n == 3 && ids[0] == 1);
    int n2 = enc(v_spm.t, "Hello world", 0, ids2, 64);
    CHECK(n2 == 2 && memcmp(ids + 1, ids2, 2 * sizeof *ids) == 0);
    /* "<s>" is BOS only with PARSE_SPECIAL; the text after it gets the space prefix. */
    n = enc(v_spm.t, "<s>Hello world", KVS_TOKENIZE_PARSE_SPECIAL, ids, 64);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == ids2[0] && ids[2] == ids2[1]);
    n = enc(v_spm.t, "<s>", 0, ids, 64);
    CHECK(n > 1 && ids[0] != 1);
    /* Byte fallback: a character outside the vocabulary becomes <0xXX> tokens
     * that decode back to its bytes. */
    const char *rare = "\xF0\x9F\xA6\x99"; /* llama emoji: not in the Llama-2 vocabulary */
    n = enc(v_spm.t, rare, 0, ids, 64);
    CHECK(n == 5);
    char buf[64];
    size_t k = 0, m;
    for (int i = 0; i < n; i++)
        if (kvs_tokenizer_token_bytes(v_spm.t, ids[i], 0, buf + k, sizeof buf - k, &m) == KVS_OK) k += m;
    CHECK(k == 5 && memcmp(buf, " \xF0\x9F\xA6\x99", 5) == 0);
    /* Empty text: no tokens (no lone space prefix), BOS only when asked. */
    n = enc(v_spm.t, "", 0, ids, 64);
    CHECK_EQ_INT(n, 0);
    n = enc(v_spm.t, "", KVS_TOKENIZE_ADD_BOS, ids, 64);
    CHECK(n == 1 && ids[0] == 1);
    /* Control tokens decode to nothing unless rendered. */
    CHECK(kvs_tokenizer_token_bytes(v_spm.t, 2, 0, buf, sizeof buf, &m) == KVS_OK && m == 0);
    CHECK(kvs_tokenizer_token_bytes(v_spm.t, 2, 1, buf, sizeof buf, &m) == KVS_OK && m == 4);
}

TEST(errors) {
    if (!v_gpt2.t) { CHECK(v_gpt2.t); return; }
    int32_t ids[8];
    int n = 12345;
    /* Invalid UTF-8: error naming the byte offset; *n_out untouched. */
    const char bad[] = "ok \xC3\x28 more";
    int st = kvs_tokenizer_encode(v_gpt2.t, bad, sizeof bad - 1, 0, ids, 8, &n);
    CHECK_EQ_INT(st, KVS_ERR_UTF8);
    CHECK(strstr(kvs_last_error(), "offset 3") != NULL);
    CHECK_EQ_INT(n, 12345);
    st = kvs_tokenizer_encode(v_gpt2.t, "\xED\xA0\x80", 3, 0, ids, 8, &n); /* surrogate */
    CHECK_EQ_INT(st, KVS_ERR_UTF8);
    st = kvs_tokenizer_encode(v_gpt2.t, "ab\xF0\x9F\xA6", 5, 0, ids, 8, &n); /* truncated */
    CHECK_EQ_INT(st, KVS_ERR_UTF8);
    CHECK(strstr(kvs_last_error(), "offset 2") != NULL);
    /* Buffer too small: the count needed is reported, the prefix written. */
    const char *s = "Hello world, this is a sentence with many tokens.";
    st = kvs_tokenizer_encode(v_gpt2.t, s, strlen(s), 0, ids, 3, &n);
    CHECK_EQ_INT(st, KVS_ERR_BUFFER_TOO_SMALL);
    CHECK(n > 3);
    int32_t all[64];
    int n_all = enc(v_gpt2.t, s, 0, all, 64);
    CHECK_EQ_INT(n, n_all);
    CHECK(memcmp(ids, all, 3 * sizeof *ids) == 0);
    st = kvs_tokenizer_encode(v_gpt2.t, s, strlen(s), 0, NULL, 0, &n); /* count only */
    CHECK(st == KVS_ERR_BUFFER_TOO_SMALL && n == n_all);
    CHECK_EQ_INT(kvs_tokenizer_encode(v_gpt2.t, NULL, 3, 0, ids, 8, &n), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_tokenizer_encode(v_gpt2.t, "a", 1, 0, ids, -1, &n), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_tokenizer_encode(v_gpt2.t, NULL, 0, 0, NULL, 0, &n), KVS_OK);
    CHECK_EQ_INT(n, 0);
    /* token_to_bytes: bad ids, small buffers. */
    char buf[4];
    size_t m;
    CHECK_EQ_INT(kvs_tokenizer_token_bytes(v_gpt2.t, -1, 0, buf, 4, &m), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_tokenizer_token_bytes(v_gpt2.t, 50257, 0, buf, 4, &m), KVS_ERR_INVALID_ARG);
    int32_t long_tok = all[n_all - 2]; /* " tokens" */
    CHECK_EQ_INT(kvs_tokenizer_token_bytes(v_gpt2.t, long_tok, 0, buf, 4, &m), KVS_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(m, 7);
    CHECK(memcmp(buf, " tok", 4) == 0);
}

/* ---- streaming detokenizer --------------------------------------------- */

/* Pushes ids one by one; returns the concatenated output (malloc'd). */
static char *stream(const kvs_tokenizer *t, const int32_t *ids, int n, int *max_hold_ok) {
    kvs_detok *d = NULL;
    if (kvs_detok_new_tok(t, 1, &d) != KVS_OK) return NULL;
    size_t cap = 64 + 16 * (size_t)n, k = 0;
    char *out = malloc(cap);
    for (int i = 0; i < n; i++) {
        size_t m;
        int st = kvs_detok_push(d, ids[i], out + k, cap - k, &m);
        if (st) { fprintf(stderr, "  detok push: %s\n", kvs_last_error()); break; }
        /* Whatever is emitted is valid UTF-8 on its own. */
        uint32_t dummy;
        for (size_t j = 0; j < m;) {
            /* a decode of 0 means an invalid or partial sequence was emitted */
            int l = kvs_utf8_decode((const unsigned char *)out + k + j, m - j, &dummy);
            if (l == 0) { *max_hold_ok = 0; break; }
            j += (size_t)l;
        }
        k += m;
    }
    size_t m = 0;
    kvs_detok_flush(d, out + k, cap - k, &m);
    k += m;
    out[k] = 0;
    kvs_detok_free(d);
    return out;
}

TEST(detok_streaming) {
    if (!v_spm.t || !v_gpt2.t) { CHECK(0); return; }
    /* Byte tokens of an emoji arrive one at a time: nothing until the last. */
    kvs_detok *d = NULL;
    CHECK(kvs_detok_new_tok(v_spm.t, 0, &d) == KVS_OK);
    if (!d) return;
    int32_t bytes[4];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)"\xF0\x9F\xA6\x99"[i]);
        bytes[i] = kvs_tokenizer_find(v_spm.t, name);
        CHECK(bytes[i] >= 0);
    }
    char buf[32];
    size_t m = 99;
    for (int i = 0; i < 3; i++) {
        CHECK(kvs_detok_push(d, bytes[i], buf, sizeof buf, &m) == KVS_OK);
        CHECK_EQ_INT(m, 0);
        CHECK(buf[0] == 0);
    }
    /* Too small a buffer: error, state kept; then the full character. */
    CHECK_EQ_INT(kvs_detok_push(d, bytes[3], buf, 3, &m), KVS_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_INT(m, 4);
    CHECK(kvs_detok_push(d, bytes[3], buf, sizeof buf, &m) == KVS_OK);
    CHECK(m == 4 && strcmp(buf, "\xF0\x9F\xA6\x99") == 0);
    /* A dangling lead byte becomes U+FFFD at flush; an impossible one at once. */
    CHECK(kvs_detok_push(d, bytes[0], buf, sizeof buf, &m) == KVS_OK && m == 0);
    CHECK(kvs_detok_flush(d, buf, sizeof buf, &m) == KVS_OK);
    CHECK(m == 3 && strcmp(buf, "\xEF\xBF\xBD") == 0);
    CHECK(kvs_detok_flush(d, buf, sizeof buf, &m) == KVS_OK && m == 0);
    int32_t ff = kvs_tokenizer_find(v_spm.t, "<0xFF>");
    CHECK(kvs_detok_push(d, ff, buf, sizeof buf, &m) == KVS_OK);
    CHECK(m == 3 && strcmp(buf, "\xEF\xBF\xBD") == 0);
    /* Lead byte followed by a non-continuation: U+FFFD then the ASCII. */
    int32_t a = kvs_tokenizer_find(v_spm.t, "<0x41>");
    CHECK(kvs_detok_push(d, bytes[0], buf, sizeof buf, &m) == KVS_OK && m == 0);
    CHECK(kvs_detok_push(d, a, buf, sizeof buf, &m) == KVS_OK);
    CHECK(m == 4 && strcmp(buf, "\xEF\xBF\xBD" "A") == 0);
    /* A NUL byte (<0x00>) is U+FFFD too: the text is a C string, and the
     * server's replies and kvs_generate's text had ended at it. */
    int32_t nul = kvs_tokenizer_find(v_spm.t, "<0x00>");
    CHECK(nul >= 0);
    CHECK(kvs_detok_push(d, nul, buf, sizeof buf, &m) == KVS_OK);
    CHECK(m == 3 && memcmp(buf, "\xEF\xBF\xBD", 4) == 0);
    CHECK_EQ_INT(kvs_detok_push(d, -5, buf, sizeof buf, &m), KVS_ERR_INVALID_ARG);
    kvs_detok_free(d);

    /* Byte-level BPE splits CJK / emoji across tokens: the stream equals the
     * text and every chunk emitted is whole UTF-8. */
    const char *text = "Hello 🦙 世界! 😶‍🌫️ naïve — 我想在apple工作";
    int32_t ids[128];
    int n = enc(v_gpt2.t, text, 0, ids, 128);
    int ok = 1;
    char *out = stream(v_gpt2.t, ids, n, &ok);
    CHECK(out && strcmp(out, text) == 0);
    CHECK(ok);
    free(out);
}

/* ---- fuzz-style robustness ---------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Random valid UTF-8 drawn from ASCII, whitespace, Latin-1, CJK, emoji... */
static size_t random_utf8(char *s, size_t max) {
    static const uint32_t pools[][2] = {
        {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0xFF}, {0x400, 0x4FF}, {0x4E00, 0x4FFF},
        {0x1F300, 0x1F6FF}, {0x300, 0x36F}, {0x2000, 0x206F}, {0x0600, 0x06FF}, {0x30, 0x39},
    };
    size_t k = 0, n = rnd() % max;
    while (k + 4 < n) {
        const uint32_t *p = pools[rnd() % (sizeof pools / sizeof pools[0])];
        uint32_t cp = p[0] + rnd() % (p[1] - p[0] + 1);
        if (cp < 0x80) s[k++] = (char)cp;
        else if (cp < 0x800) { s[k++] = (char)(0xC0 | (cp >> 6)); s[k++] = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            s[k++] = (char)(0xE0 | (cp >> 12));
            s[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            s[k++] = (char)(0xF0 | (cp >> 18));
            s[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            s[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return k;
}

static void fuzz_vocab(const kvs_tokenizer *t, int spm, int iters, int *n_valid, int *n_rt) {
    char s[512], dec[4096];
    int32_t ids[1024];
    for (int it = 0; it < iters; it++) {
        size_t len;
        int kind = it % 3;
        if (kind == 0) { /* raw random bytes: mostly invalid UTF-8 */
            len = rnd() % 64;
            for (size_t i = 0; i < len; i++) s[i] = (char)rnd();
        } else {
            len = random_utf8(s, 256);
            if (kind == 2 && len > 0) s[rnd() % len] = (char)(0x80 | rnd()); /* one bad byte, maybe */
        }
        int flags = (int)(rnd() & 3);
        int n = -1;
        int st = kvs_tokenizer_encode(t, s, len, flags, ids, 1024, &n);
        CHECK(st == KVS_OK || st == KVS_ERR_UTF8);
        if (st != KVS_OK) continue;
        (*n_valid)++;
        size_t k = 0, m;
        for (int i = 0; i < n; i++) {
            CHECK(ids[i] >= 0 && ids[i] < kvs_tokenizer_n_vocab(t));
            if (kvs_tokenizer_token_bytes(t, ids[i], 1, dec + k, sizeof dec - k, &m) == KVS_OK) k += m;
        }
        const char *d = dec;
        if (spm && k > 0 && dec[0] == ' ' && !(flags & KVS_TOKENIZE_ADD_BOS)) { d++; k--; }
        if (spm && (flags & KVS_TOKENIZE_ADD_BOS)) {
            /* <s> rendered first, then the prefix space */
            if (k >= 4 && memcmp(dec, "<s> ", 4) == 0) { d += 4; k -= 4; }
            else if (k == 3 && len == 0) { d += 3; k = 0; }
        }
        *n_rt += k == len && memcmp(d, s, len) == 0;
    }
}

TEST(fuzz_random_inputs) {
    if (!v_spm.t || !v_gpt2.t) { CHECK(0); return; }
    int n_valid = 0, n_rt = 0;
    fuzz_vocab(v_gpt2.t, 0, 3000, &n_valid, &n_rt);
    printf("  gpt-2: 3000 inputs, %d valid UTF-8, %d round-trip\n", n_valid, n_rt);
    CHECK(n_valid > 1000);
    CHECK_EQ_INT(n_rt, n_valid);
    n_valid = n_rt = 0;
    fuzz_vocab(v_spm.t, 1, 3000, &n_valid, &n_rt);
    printf("  llama-spm: 3000 inputs, %d valid UTF-8, %d round-trip\n", n_valid, n_rt);
    CHECK(n_valid > 1000);
    CHECK_EQ_INT(n_rt, n_valid);
    /* The synthetic Llama-3 / Qwen2 vocabularies (no round trip: merges are few,
     * but every byte has a token, so it must still hold). */
    const char *pres[] = {"llama-bpe", "qwen2", "smollm"};
    for (int k = 0; k < 3; k++) {
        vocab v = {0};
        if (build_vocab(&v, NULL, pres[k], syn_extra, syn_types, SYN_N, syn_merges, 5) == KVS_OK) {
            n_valid = n_rt = 0;
            fuzz_vocab(v.t, 0, 1000, &n_valid, &n_rt);
            CHECK_EQ_INT(n_rt, n_valid);
        } else {
            CHECK_MSG(0, "%s", kvs_last_error());
        }
        close_vocab(&v);
    }
}

int main(void) {
    RUN(synthetic_vocab_and_pre);
    RUN(special_token_kinds);
    RUN(special_longest_match);
    RUN(bad_vocabularies);
    RUN(load_shared_vocabs);
    RUN(spm_rules);
    RUN(errors);
    RUN(detok_streaming);
    RUN(fuzz_random_inputs);
    close_vocab(&v_gpt2);
    close_vocab(&v_spm);
    return kt_summary();
}
