/*
 * The public tokenizer API (kvstitch.h) end to end through kvs_model_load:
 * kvs_tokenize, kvs_vocab_size, kvs_token_to_bytes, kvs_token_is_eog,
 * kvs_detok_*, kvs_chat_render, on the real SmolLM2 model (vocab only) and
 * on a vocabulary-only GGUF; kvs_utf8_repair.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvstitch.h"

static kvs_model *smol;

TEST(load) {
    const char *path = kt_model_path();
    if (!path) return;
    kvs_model_params p = kvs_model_default_params();
    p.vocab_only = 1;
    int st = kvs_model_load(path, p, &smol);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (smol) CHECK_EQ_INT(kvs_vocab_size(smol), 49152);
}

TEST(tokenize_and_decode) {
    if (!smol) { CHECK(smol); return; }
    const char *text = "<|im_start|>user\nhi<|im_end|>";
    int32_t ids[32];
    int n = 0;
    int st = kvs_tokenize(smol, text, strlen(text), KVS_TOKENIZE_PARSE_SPECIAL, ids, 32, &n);
    CHECK_EQ_INT(st, KVS_OK);
    const int32_t want[] = {1, 4093, 198, 6004, 2};
    CHECK(n == 5 && memcmp(ids, want, sizeof want) == 0);
    CHECK(kvs_token_is_eog(smol, 2));
    CHECK(!kvs_token_is_eog(smol, 4093));
    char buf[64];
    size_t m = 0;
    CHECK(kvs_token_to_bytes(smol, 4093, 0, buf, sizeof buf, &m) == KVS_OK && m == 4 && memcmp(buf, "user", 4) == 0);
    CHECK(kvs_token_to_bytes(smol, 1, 0, buf, sizeof buf, &m) == KVS_OK && m == 0);
    CHECK(kvs_token_to_bytes(smol, 1, 1, buf, sizeof buf, &m) == KVS_OK && m == 12);
    n = 99;
    CHECK_EQ_INT(kvs_tokenize(smol, "a\xFF", 2, 0, ids, 32, &n), KVS_ERR_UTF8);
    CHECK(strstr(kvs_last_error(), "offset 1") != NULL);
    CHECK_EQ_INT(kvs_tokenize(NULL, "a", 1, 0, ids, 32, &n), KVS_ERR_INVALID_ARG);
    /* the argument at fault is named (it had said "NULL argument or negative capacity") */
    CHECK_EQ_INT(kvs_tokenize(smol, "a", 1, 0, NULL, 32, &n), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "out is NULL"), "%s", kvs_last_error());
    CHECK_EQ_INT(kvs_tokenize(smol, "a", 1, 0, ids, -1, &n), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "capacity is negative"), "%s", kvs_last_error());
    CHECK_EQ_INT(kvs_token_to_bytes(smol, 5, 0, NULL, 16, &m), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "buf (with a capacity above 0) is NULL"), "%s", kvs_last_error());

    /* Streaming: an emoji split over byte-level tokens comes out whole. */
    const char *emoji = "ok 🦙🦙 done";
    n = 0;
    CHECK(kvs_tokenize(smol, emoji, strlen(emoji), 0, ids, 32, &n) == KVS_OK);
    kvs_detok *d = NULL;
    CHECK(kvs_detok_new(smol, 0, &d) == KVS_OK);
    char out[128] = "";
    size_t k = 0;
    for (int i = 0; d && i < n; i++) {
        CHECK(kvs_detok_push(d, ids[i], out + k, sizeof out - k, &m) == KVS_OK);
        k += m;
    }
    if (d) CHECK(kvs_detok_flush(d, out + k, sizeof out - k, &m) == KVS_OK && m == 0);
    CHECK(strcmp(out, emoji) == 0);
    /* a NULL buf is named (with a capacity it had read "need a buffer of 2, have 16") */
    if (d) CHECK_EQ_INT(kvs_detok_push(d, ids[0], NULL, 16, &m), KVS_ERR_BUFFER_TOO_SMALL);
    CHECK_MSG(strstr(kvs_last_error(), "buf is NULL"), "%s", kvs_last_error());
    kvs_detok_free(d);
    kvs_detok_free(NULL);
}

TEST(chat_render) {
    if (!smol) { CHECK(smol); return; }
    const kvs_chat_message msgs[] = {{"user", "Hello!"}};
    char *out = NULL;
    int st = kvs_chat_render(smol, NULL, msgs, 1, 1, &out);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (out) {
        CHECK(strcmp(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                          "Face<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n") == 0);
        free(out);
    }
    out = NULL;
    st = kvs_chat_render(smol, "llama3", msgs, 1, 0, &out);
    CHECK(st == KVS_OK && out && strcmp(out, "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>") == 0);
    free(out);
}

TEST(vocab_only_gguf_without_template) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer-tests/ggml-vocab-gpt-2.gguf", kt_shared_dir());
    kvs_model *m = NULL;
    kvs_model_params p = kvs_model_default_params();
    p.vocab_only = 1;
    int st = kvs_model_load(path, p, &m);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!m) return;
    CHECK_EQ_INT(kvs_vocab_size(m), 50257);
    int32_t ids[16];
    int n = 0;
    CHECK(kvs_tokenize(m, " Hello World!", 13, KVS_TOKENIZE_ADD_BOS, ids, 16, &n) == KVS_OK);
    CHECK(n == 3 && ids[0] == 18435 && ids[1] == 2159 && ids[2] == 0); /* llama.cpp vector; no BOS (add_bos false) */
    const kvs_chat_message msgs[] = {{"user", "x"}};
    char *out = NULL;
    st = kvs_chat_render(m, NULL, msgs, 1, 1, &out);
    CHECK_EQ_INT(st, KVS_ERR_UNSUPPORTED);
    CHECK(out == NULL);
    st = kvs_chat_render(m, "chatml", msgs, 1, 1, &out);
    CHECK(st == KVS_OK && out && strcmp(out, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n") == 0);
    free(out);
    kvs_model_free(m);
}

/* kvs_model_params.chat_template: the family every chat layout of the model
 * uses when the caller names none (a file without a template, the server's
 * --chat-template); an explicit family still wins; an unknown name fails the
 * load naming it; the info reports the choice. */
TEST(chat_template_chosen_at_load) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer-tests/ggml-vocab-gpt-2.gguf", kt_shared_dir());
    kvs_model_params p = kvs_model_default_params();
    p.vocab_only = 1;
    char family[] = "gemma";
    p.chat_template = family;
    kvs_model *m = NULL;
    int st = kvs_model_load(path, p, &m);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!m) return;
    memcpy(family, "xxxxx", 5); /* copied at load */
    kvs_model_info in;
    kvs_model_get_info(m, &in);
    CHECK(in.chat_template_family && strcmp(in.chat_template_family, "gemma") == 0);
    const kvs_chat_message msgs[] = {{"user", "x"}};
    char *out = NULL;
    st = kvs_chat_render(m, NULL, msgs, 1, 1, &out);
    CHECK_MSG(st == KVS_OK && out && strcmp(out, "<start_of_turn>user\nx<end_of_turn>\n<start_of_turn>model\n") == 0,
              "%s", out ? out : kvs_last_error());
    free(out);
    out = NULL;
    st = kvs_chat_render(m, "chatml", msgs, 1, 1, &out);
    CHECK(st == KVS_OK && out && strcmp(out, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n") == 0);
    free(out);
    kvs_model_free(m);

    kvs_model *bad = NULL;
    p.chat_template = "jinja";
    CHECK_EQ_INT(kvs_model_load(path, p, &bad), KVS_ERR_INVALID_ARG);
    CHECK(bad == NULL);
    CHECK(strstr(kvs_last_error(), "'jinja'") && strstr(kvs_last_error(), "chatml, qwen3, llama3, llama2, gemma"));
    p.chat_template = ""; /* "" = detect, as NULL */
    CHECK_EQ_INT(kvs_model_load(path, p, &bad), KVS_OK);
    if (bad) {
        kvs_model_get_info(bad, &in);
        CHECK(in.chat_template_family && in.chat_template_family[0] == 0);
        kvs_model_free(bad);
    }
}

/* A call that succeeds leaves kvs_last_error() as it was (the header: the
 * message holds until the next failing call): the optional keys a load
 * reads, and a template-less model's render with a family named, had left
 * "key ... not found" behind. */
TEST(success_keeps_the_last_error) {
    const char *want = "invalid UTF-8 at byte offset 0";
    CHECK(kvs_utf8_check("\xff", 1) != KVS_OK && strstr(kvs_last_error(), want));
    kvs_model *m = NULL;
    int st = kvs_model_load(kt_model_path(), kvs_model_default_params(), &m); /* a full load: hparams, rope */
    CHECK_MSG(st == KVS_OK && strstr(kvs_last_error(), want), "after the load: %s", kvs_last_error());
    kvs_model_free(m);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer-tests/ggml-vocab-gpt-2.gguf", kt_shared_dir());
    kvs_model_params p = kvs_model_default_params();
    p.vocab_only = 1;
    m = NULL;
    if (kvs_model_load(path, p, &m) != KVS_OK) return;
    const kvs_chat_message msgs[] = {{"user", "x"}};
    char *out = NULL;
    CHECK(kvs_utf8_check("\xff", 1) != KVS_OK);
    st = kvs_chat_render(m, "chatml", msgs, 1, 1, &out); /* no template in the file: the family named */
    CHECK_MSG(st == KVS_OK && strstr(kvs_last_error(), want), "after the render: %s", kvs_last_error());
    free(out);
    kvs_model_free(m);
}

/* Flags kvs_tokenize does not know are refused, naming them (they had
 * been ignored: a caller's typo went unseen). */
TEST(tokenize_unknown_flags) {
    int32_t ids[8];
    int n = 0;
    CHECK_EQ_INT(kvs_tokenize(smol, "hi", 2, 0x100, ids, 8, &n), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "unknown flags 0x100") != NULL);
    CHECK_EQ_INT(kvs_tokenize(smol, "hi", 2, -1, ids, 8, &n), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_tokenize(smol, "hi", 2, KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PARSE_SPECIAL, ids, 8, &n), KVS_OK);
}

/* kvs_chat_family_check: the front ends' check before a load, with the
 * load's message; every family the renderer knows passes. */
TEST(chat_family_check) {
    const char *known[] = {"chatml", "qwen3", "llama3", "llama2", "gemma"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) CHECK_EQ_INT(kvs_chat_family_check(known[i]), KVS_OK);
    CHECK_EQ_INT(kvs_chat_family_check("jinja"), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "'jinja' is not one kvstitch renders (chatml, qwen3, llama3, llama2, gemma)"));
    CHECK_EQ_INT(kvs_chat_family_check("ChatML"), KVS_ERR_INVALID_ARG); /* exact, as the roles */
    CHECK_EQ_INT(kvs_chat_family_check(""), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "is empty"));
    CHECK_EQ_INT(kvs_chat_family_check(NULL), KVS_ERR_INVALID_ARG);
}

/* kvs_utf8_repair: every byte that starts no valid sequence becomes U+FFFD,
 * control characters stay (prompt text keeps its newlines), and a buffer too
 * small cuts between characters, never inside one. */
TEST(utf8_repair) {
    char out[64];
    /* a lone continuation byte, a cut 3-byte sequence, an overlong, 0xff; a
     * newline and a valid 2-byte character kept */
    const char in[] = "a\x80" "b\xe2\x82\n" "c\xc0\xaf" "d\xff\xc3\xa9";
    size_t n = kvs_utf8_repair(in, sizeof in - 1, out, sizeof out);
    const char want[] = "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\n" "c\xef\xbf\xbd\xef\xbf\xbd" "d\xef\xbf\xbd\xc3\xa9";
    CHECK_EQ_INT((int)n, (int)sizeof want - 1);
    CHECK(memcmp(out, want, sizeof want) == 0);
    CHECK(kvs_utf8_check(out, n) == KVS_OK);
    /* cap 3: "a" and the NUL; U+FFFD does not fit whole */
    CHECK_EQ_INT((int)kvs_utf8_repair(in, sizeof in - 1, out, 3), 1);
    CHECK(strcmp(out, "a") == 0);
    /* a 4-byte character is kept or dropped whole */
    const char emoji[] = "x\xf0\x9f\x9c\x80";
    CHECK_EQ_INT((int)kvs_utf8_repair(emoji, 5, out, 5), 1);
    CHECK_EQ_INT((int)kvs_utf8_repair(emoji, 5, out, 6), 5);
    CHECK(memcmp(out, emoji, 6) == 0);
    CHECK_EQ_INT((int)kvs_utf8_repair(NULL, 0, out, sizeof out), 0);
    CHECK(out[0] == 0);
}

int main(void) {
    RUN(load);
    RUN(tokenize_and_decode);
    RUN(chat_render);
    RUN(vocab_only_gguf_without_template);
    RUN(chat_template_chosen_at_load);
    RUN(chat_family_check);
    RUN(tokenize_unknown_flags);
    RUN(success_keeps_the_last_error);
    RUN(utf8_repair);
    kvs_model_free(smol);
    return kt_summary();
}
