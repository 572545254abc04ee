/*
 * llama.cpp's tokenizer test vectors (../shared/tokenizer-tests): every
 * string of <vocab>.inp must tokenize (no BOS, no special parsing) to the ids
 * on the same line of <vocab>.out. Exact match required, for both the
 * byte-level BPE (GPT-2) and the SentencePiece (Llama-2) vocabulary. Each
 * vector's ids are also decoded back and compared with the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "kvstitch.h"
#include "tokenizer/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"

static void run_vectors(const char *vocab, int expect_spm) {
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s/tokenizer-tests/%s", kt_shared_dir(), vocab);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    kvs_gguf *g = NULL;
    kvs_tokenizer *t = NULL;
    int st = kvs_gguf_open(path, &g);
    CHECK_MSG(st == KVS_OK, "%s: %s", path, kvs_last_error());
    if (st) return;
    st = kvs_tokenizer_new(g, &t);
    CHECK_MSG(st == KVS_OK, "%s: %s", path, kvs_last_error());
    if (st) { kvs_gguf_close(g); return; }
    CHECK(strcmp(kvs_tokenizer_model_name(t), expect_spm ? "llama" : "gpt2") == 0);

    size_t inp_len = 0, out_len = 0;
    char *inp = kt_read_file(inp_path, &inp_len), *outs = kt_read_file(out_path, &out_len);
    CHECK_MSG(inp && outs, "cannot read %s / %s", inp_path, out_path);
    int n_cases = 0, n_ok = 0, n_roundtrip = 0;
    char *p = inp, *line = outs;
    int32_t ids[4096];
    char dec[16384];
    while (inp && outs && p < inp + inp_len) {
        char *sep = strstr(p, SEP);
        if (!sep) break; /* the file ends with a separator */
        size_t len = (size_t)(sep - p);
        char *nl = strchr(line, '\n');
        if (!nl) { CHECK_MSG(0, "%s: fewer lines than strings", out_path); break; }
        *nl = 0;
        int32_t want[4096];
        int n_want = 0;
        for (char *q = line; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            want[n_want++] = (int32_t)v;
            q = e;
        }
        int n = -1;
        st = kvs_tokenizer_encode(t, p, len, 0, ids, 4096, &n);
        int same = st == KVS_OK && n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
        n_cases++;
        n_ok += same;
        if (!same) {
            fprintf(stderr, "  %s case %d %.*s\n    want:%s\n    got: ", vocab, n_cases, (int)len, p, line);
            for (int i = 0; i < n && i < 4096; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        /* Round trip: concatenated token bytes give the text back (SPM adds
         * the leading space of the prefix rule). */
        size_t k = 0;
        for (int i = 0; st == KVS_OK && i < n; i++) {
            size_t m;
            if (kvs_tokenizer_token_bytes(t, ids[i], 0, dec + k, sizeof dec - k, &m) == KVS_OK) k += m;
        }
        const char *d = dec;
        if (expect_spm && k > 0 && dec[0] == ' ') { d++; k--; }
        n_roundtrip += k == len && memcmp(d, p, len) == 0;
        p = sep + strlen(SEP);
        line = nl + 1;
    }
    printf("  %s: %d/%d vectors match, %d/%d round-trip\n", vocab, n_ok, n_cases, n_roundtrip, n_cases);
    CHECK(n_cases >= 40);
    CHECK_EQ_INT(n_ok, n_cases);
    CHECK_EQ_INT(n_roundtrip, n_cases);
    free(inp);
    free(outs);
    kvs_tokenizer_free(t);
    kvs_gguf_close(g);
}

TEST(vectors_gpt2) { run_vectors("ggml-vocab-gpt-2.gguf", 0); }
TEST(vectors_llama_spm) { run_vectors("ggml-vocab-llama-spm.gguf", 1); }

int main(void) {
    RUN(vectors_gpt2);
    RUN(vectors_llama_spm);
    return kt_summary();
}
