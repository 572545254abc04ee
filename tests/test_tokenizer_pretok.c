/*
 * Pre-tokenizer matchers vs the regex engine of the HF `tokenizers`
 * library: for the first strings of the SmolLM2 corpus,
 * tests/data/tokenizer/pretok-{gpt2,llama3,qwen2}.out hold the length (in
 * code points) of every piece the reference regex split gives
 * (scripts/gen-tokenizer-corpus.py). Also unit cases for the Unicode
 * classes and the UTF-8 decoder.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tokenizer/pretok.h"
#include "kvstitch.h"
#include "tokenizer/unicode.h"

#define SEP "\n__ggml_vocab_test__\n"
#define DIR "tests/data/tokenizer/"

static void check_split(kvs_pretok_kind kind, const char *out_name) {
    size_t inp_len = 0;
    char *inp = kt_read_file(DIR "smollm2-corpus.inp", &inp_len);
    char path[256];
    snprintf(path, sizeof path, DIR "%s", out_name);
    char *outs = kt_read_file(path, NULL);
    CHECK_MSG(inp && outs, "cannot read the corpus files (run from the repo root)");
    if (!inp || !outs) { free(inp); free(outs); return; }
    uint32_t *cps = malloc((inp_len + 1) * sizeof *cps);
    uint8_t *fl = malloc(inp_len + 1);
    int32_t *ends = malloc((inp_len + 1) * sizeof *ends);
    int n_cases = 0, n_ok = 0;
    char *p = inp, *line = outs;
    for (char *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        *nl = 0;
        char *sep = strstr(p, SEP);
        if (!sep) break;
        int n = 0;
        for (const char *q = p; q < sep;) {
            int l = kvs_utf8_decode((const unsigned char *)q, (size_t)(sep - q), &cps[n]);
            if (l == 0) { l = 1; cps[n] = 0xFFFD; }
            fl[n] = (uint8_t)kvs_uc_flags(cps[n]);
            n++;
            q += l;
        }
        int nw = kvs_pretok_split(kind, cps, fl, n, ends);
        int same = 1, k = 0, prev = 0;
        for (char *q = line; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            q = e;
            if (k >= nw || ends[k] - prev != v) { same = 0; break; }
            prev = ends[k++];
        }
        same = same && k == nw;
        n_cases++;
        n_ok += same;
        if (!same && n_cases - n_ok <= 5) {
            fprintf(stderr, "  %s case %d '%.*s'\n    want %s\n    got ", out_name, n_cases, (int)(sep - p), p, line);
            for (int i = 0; i < nw; i++) fprintf(stderr, " %d", ends[i] - (i ? ends[i - 1] : 0));
            fprintf(stderr, "\n");
        }
        p = sep + strlen(SEP);
    }
    printf("  %s: %d/%d splits match\n", out_name, n_ok, n_cases);
    CHECK(n_cases >= 300);
    CHECK_EQ_INT(n_ok, n_cases);
    free(inp);
    free(outs);
    free(cps);
    free(fl);
    free(ends);
}

TEST(split_gpt2) { check_split(KVS_PRETOK_GPT2, "pretok-gpt2.out"); }
TEST(split_llama3) { check_split(KVS_PRETOK_LLAMA3, "pretok-llama3.out"); }
TEST(split_qwen2) { check_split(KVS_PRETOK_QWEN2, "pretok-qwen2.out"); }

TEST(pretok_names) {
    int known = -1;
    CHECK_EQ_INT(kvs_pretok_from_name("smollm", &known), KVS_PRETOK_SMOLLM);
    CHECK_EQ_INT(known, 1);
    CHECK_EQ_INT(kvs_pretok_from_name("llama-bpe", &known), KVS_PRETOK_LLAMA3);
    CHECK_EQ_INT(kvs_pretok_from_name("qwen2", &known), KVS_PRETOK_QWEN2);
    CHECK_EQ_INT(kvs_pretok_from_name("gpt-2", &known), KVS_PRETOK_GPT2);
    CHECK_EQ_INT(known, 1);
    CHECK_EQ_INT(kvs_pretok_from_name("no-such-pre", &known), KVS_PRETOK_GPT2);
    CHECK_EQ_INT(known, 0);
    CHECK_EQ_INT(kvs_pretok_from_name(NULL, &known), KVS_PRETOK_GPT2);
    CHECK_EQ_INT(known, 0);
}

TEST(unicode_classes) {
    CHECK(kvs_uc_flags('a') == KVS_UC_LETTER);
    CHECK(kvs_uc_flags('7') == KVS_UC_NUMBER);
    CHECK(kvs_uc_flags(' ') == KVS_UC_SPACE);
    CHECK(kvs_uc_flags('\n') == KVS_UC_SPACE);
    CHECK(kvs_uc_flags(0x85) == KVS_UC_SPACE);
    CHECK(kvs_uc_flags(0x1C) == 0);     /* not White_Space, though Python's isspace says so */
    CHECK(kvs_uc_flags(0x3000) == KVS_UC_SPACE);
    CHECK(kvs_uc_flags(0x200B) == 0);   /* zero width space is Cf */
    CHECK(kvs_uc_flags(0x4E2D) == KVS_UC_LETTER); /* 中 */
    CHECK(kvs_uc_flags(0x0660) == KVS_UC_NUMBER); /* Arabic-Indic zero */
    CHECK(kvs_uc_flags(0x216B) == KVS_UC_NUMBER); /* Roman numeral twelve (Nl) */
    CHECK(kvs_uc_flags(0x1D7D8) == KVS_UC_NUMBER); /* mathematical double-struck 0 */
    CHECK(kvs_uc_flags(0x1F999) == 0);  /* llama emoji */
    CHECK(kvs_uc_flags(0x0301) == 0);   /* combining acute (Mn) */
    CHECK(kvs_uc_flags(0x10FFFF) == 0);
}

TEST(utf8_decoder) {
    uint32_t cp = 0;
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xC3\xA9", 2, &cp), 2);
    CHECK_EQ_INT(cp, 0xE9);
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xF0\x9F\xA6\x99", 4, &cp), 4);
    CHECK_EQ_INT(cp, 0x1F999);
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xF0\x9F\xA6", 3, &cp), 0); /* cut short */
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xC0\x80", 2, &cp), 0);     /* overlong NUL */
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xE0\x80\x80", 3, &cp), 0); /* overlong */
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xED\xA0\x80", 3, &cp), 0); /* surrogate */
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\xF4\x90\x80\x80", 4, &cp), 0); /* > U+10FFFF */
    CHECK_EQ_INT(kvs_utf8_decode((const unsigned char *)"\x80", 1, &cp), 0);
    CHECK_EQ_INT(kvs_utf8_validate("ab\xC3\xA9" "c\xFF", 6), 5);
    CHECK_EQ_INT(kvs_utf8_validate("ok", 2), 2);
    /* the public check: the same verdict, the offset and byte named */
    CHECK_EQ_INT(kvs_utf8_check("ab\xC3\xA9" "c\xFF", 6), KVS_ERR_UTF8);
    CHECK_MSG(strstr(kvs_last_error(), "byte offset 5 (byte 0xFF)") != NULL, "%s", kvs_last_error());
    CHECK_EQ_INT(kvs_utf8_check("ab\xC3", 3), KVS_ERR_UTF8); /* cut short at the end */
    CHECK_EQ_INT(kvs_utf8_check("ok \xC3\xA9", 5), KVS_OK);
    CHECK_EQ_INT(kvs_utf8_check(NULL, 0), KVS_OK);
    CHECK_EQ_INT(kvs_utf8_check(NULL, 1), KVS_ERR_INVALID_ARG);
    char buf[4];
    CHECK_EQ_INT(kvs_utf8_encode(0x2581, buf), 3);
    CHECK(memcmp(buf, "\xE2\x96\x81", 3) == 0);
}

int main(void) {
    RUN(split_gpt2);
    RUN(split_llama3);
    RUN(split_qwen2);
    RUN(pretok_names);
    RUN(unicode_classes);
    RUN(utf8_decoder);
    return kt_summary();
}
