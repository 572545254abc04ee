/*
 * Chat templates. Expected strings are what the reference Jinja templates
 * render (checked with Python jinja2: SmolLM2's template from its GGUF,
 * Meta's Llama-3 and Llama-2 chat templates), minus the leading BOS, which
 * kvs_chat_render leaves to the tokenizer (KVS_TOKENIZE_ADD_BOS).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "kvstitch.h"
#include "tokenizer/tokenizer.h"

/* tokenizer.chat_template of SmolLM2-135M-Instruct (as in its GGUF). */
static const char smol_tmpl[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char llama3_tmpl[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static const char llama2_tmpl[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% endif %}{% endfor %}";

static const kvs_chat_message user_only[] = {{"user", "Hello!"}};
static const kvs_chat_message sys_user[] = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
static const kvs_chat_message multi[] = {
    {"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", "Hello.  "}, {"user", "Bye"}};
static const kvs_chat_message user_asst[] = {{"user", "Hi"}, {"assistant", "Hello"}};

#define SMOL_SYS "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"

static void check_render(const char *tmpl, const char *family, const kvs_chat_message *m, int n, int gen,
                         const char *want) {
    char *out = NULL;
    int st = kvs_chat_render_template(tmpl, tmpl ? strlen(tmpl) : 0, family, m, n, gen, &out);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return;
    CHECK_MSG(strcmp(out, want) == 0, "rendered:\n%s\nexpected:\n%s", out, want);
    free(out);
}

TEST(detect_family) {
    CHECK(strcmp(kvs_chat_family_of_template(smol_tmpl, strlen(smol_tmpl)), "chatml") == 0);
    CHECK(strcmp(kvs_chat_family_of_template(llama3_tmpl, strlen(llama3_tmpl)), "llama3") == 0);
    CHECK(strcmp(kvs_chat_family_of_template(llama2_tmpl, strlen(llama2_tmpl)), "llama2") == 0);
    CHECK(kvs_chat_family_of_template("{{ messages }}", 14) == NULL);
    CHECK(kvs_chat_family_of_template(NULL, 0) == NULL);
}

TEST(chatml_smollm2) {
    check_render(smol_tmpl, NULL, user_only, 1, 1,
                 SMOL_SYS "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
    check_render(smol_tmpl, NULL, user_only, 1, 0, SMOL_SYS "<|im_start|>user\nHello!<|im_end|>\n");
    check_render(smol_tmpl, NULL, sys_user, 2, 1,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render(smol_tmpl, NULL, multi, 4, 1,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n"
                 "<|im_start|>assistant\nHello.  <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render(smol_tmpl, NULL, user_asst, 2, 0,
                 SMOL_SYS "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
    /* No messages: the loop never runs, so no default system message either. */
    check_render(smol_tmpl, NULL, NULL, 0, 1, "<|im_start|>assistant\n");
    /* Forced "chatml" over a template that is not ChatML: no default system. */
    check_render(llama3_tmpl, "chatml", user_only, 1, 1, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
    /* A template whose system text is concatenated with a message is not a default. */
    const char *concat = "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}";
    check_render(concat, NULL, user_only, 1, 0, "<|im_start|>user\nHello!<|im_end|>\n");
    /* A concatenated head, then a literal default after its end; and heads
     * before one end whose last text after a quote is literal (heads share
     * their end and its last quote, found once: a render had scanned to
     * the end again from every head, 44 s on a 2 MB template) */
    const char *later = "{% if x %}{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
                        "{% else %}{{ '<|im_start|>system\nDefault.<|im_end|>\n' }}{% endif %}";
    check_render(later, NULL, user_only, 1, 0,
                 "<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n");
    const char *shared = "{{ '<|im_start|>system\n' + a + '<|im_start|>system\n' + b + '<|im_start|>system\nLit<|im_end|>' }}";
    check_render(shared, NULL, user_only, 1, 0,
                 "<|im_start|>system\nLit<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n");
    /* Escaped newlines (\\n in the Jinja source) and quotes in the default. */
    const char *esc = "{{ '<|im_start|>system\\nYou\\'re \\\"kind\\\".<|im_end|>\\n' }}";
    check_render(esc, NULL, user_only, 1, 0,
                 "<|im_start|>system\nYou're \"kind\".<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n");
}

TEST(llama3) {
    check_render(llama3_tmpl, NULL, user_only, 1, 1,
                 "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(llama3_tmpl, NULL, multi, 4, 0,
                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
    check_render(NULL, "llama3", user_asst, 2, 1,
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(llama2) {
    check_render(llama2_tmpl, NULL, user_only, 1, 1, "[INST] Hello! [/INST]");
    check_render(llama2_tmpl, NULL, sys_user, 2, 1, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST]");
    check_render(llama2_tmpl, NULL, multi, 4, 1,
                 "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    check_render(NULL, "llama2", user_asst, 2, 0, "[INST] Hi [/INST] Hello </s>");
    char *out = NULL;
    const kvs_chat_message tool[] = {{"user", "a"}, {"tool", "b"}};
    CHECK_EQ_INT(kvs_chat_render_template(llama2_tmpl, strlen(llama2_tmpl), NULL, tool, 2, 1, &out),
                 KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "tool") != NULL);
}

/* Gemma 3 (its template's output for these messages, by hand from the
 * published Jinja: system text + "\n\n" opens the first user turn). */
TEST(gemma) {
    const char *tmpl = "{{ bos_token }}{%- for message in loop_messages -%}{{ '<start_of_turn>' + role + '\\n' }}";
    CHECK(strcmp(kvs_chat_family_of_template(tmpl, strlen(tmpl)), "gemma") == 0);
    check_render(tmpl, NULL, user_only, 1, 1, "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n");
    check_render(tmpl, NULL, multi, 4, 1,
                 "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                 "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    check_render(NULL, "gemma", user_asst, 2, 0,
                 "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n");
}

/* Qwen3: expected strings rendered with Python jinja2 from Qwen3's published
 * template (its tools-free branch), for these messages. */
TEST(qwen3) {
    const char *tmpl = "{%- set ns = namespace(multi_step_tool=true) %}{{- '<|im_start|>' + message.role + '\\n' }}"
                       "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{{- '\\n<think>\\n' }}";
    CHECK(strcmp(kvs_chat_family_of_template(tmpl, strlen(tmpl)), "qwen3") == 0);
    check_render(tmpl, NULL, user_only, 1, 1, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
    check_render(tmpl, NULL, multi, 4, 1,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n<|im_start|>assistant\n"
                 "Hello.  <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    /* reasoning of a turn before the last query is dropped */
    const kvs_chat_message hist[] = {{"user", "2+2?"}, {"assistant", "<think>\nadd them\n</think>\n\n4"}, {"user", "and 3+3?"}};
    check_render(tmpl, NULL, hist, 3, 1,
                 "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nand 3+3?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    /* ... and kept after it */
    check_render(tmpl, NULL, hist, 2, 0,
                 "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n");
    /* a tool response is not a query; a middle turn without reasoning keeps its newlines */
    const kvs_chat_message tr[] = {{"user", "q"}, {"assistant", "\n\nplain"}, {"user", "<tool_response>x</tool_response>"},
                                   {"assistant", "<think>r</think>ok"}};
    check_render(tmpl, NULL, tr, 4, 0,
                 "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n\n\nplain<|im_end|>\n<|im_start|>user\n"
                 "<tool_response>x</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\nok<|im_end|>\n");
    /* consecutive tool messages share one user turn; the last turn gets an empty think block */
    const kvs_chat_message tools[] = {{"user", "weather?"}, {"assistant", "calling"}, {"tool", "sunny"}, {"tool", "20C"},
                                      {"assistant", "\nIt is sunny."}};
    check_render(tmpl, NULL, tools, 5, 1,
                 "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\ncalling<|im_end|>\n<|im_start|>user\n"
                 "<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is sunny.<|im_end|>\n<|im_start|>assistant\n");
    char *out = NULL;
    const kvs_chat_message odd[] = {{"critic", "x"}};
    CHECK_EQ_INT(kvs_chat_render_template(tmpl, strlen(tmpl), NULL, odd, 1, 1, &out), KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "critic") != NULL);
}

TEST(errors) {
    char *out = (char *)"untouched";
    /* (gemma's <start_of_turn> was the example here until the gemma family
     * came; Zephyr's markers are still unknown) */
    const char *odd = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}</s>\n{% endfor %}";
    int st = kvs_chat_render_template(odd, strlen(odd), NULL, user_only, 1, 1, &out);
    CHECK_EQ_INT(st, KVS_ERR_UNSUPPORTED);
    CHECK(strstr(kvs_last_error(), "{% for m in messages %}<|{{ m.role }}|>") != NULL); /* names it */
    CHECK(strstr(kvs_last_error(), "family=") != NULL);                          /* says how to override */
    CHECK(strstr(kvs_last_error(), "--chat-template") != NULL);
    CHECK(strcmp(out, "untouched") == 0);
    /* The family argument overrides detection. */
    check_render(odd, "chatml", user_only, 1, 0, "<|im_start|>user\nHello!<|im_end|>\n");
    st = kvs_chat_render_template(NULL, 0, NULL, user_only, 1, 1, &out);
    CHECK_EQ_INT(st, KVS_ERR_UNSUPPORTED);
    CHECK(strstr(kvs_last_error(), "chat_template") != NULL);
    st = kvs_chat_render_template(smol_tmpl, strlen(smol_tmpl), "vicuna", user_only, 1, 1, &out);
    CHECK_EQ_INT(st, KVS_ERR_INVALID_ARG);
    CHECK(strstr(kvs_last_error(), "vicuna") != NULL);
    const kvs_chat_message bad[] = {{"user", NULL}};
    CHECK_EQ_INT(kvs_chat_render_template(smol_tmpl, strlen(smol_tmpl), NULL, bad, 1, 1, &out), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_chat_render_template(smol_tmpl, strlen(smol_tmpl), NULL, user_only, 1, 1, NULL),
                 KVS_ERR_INVALID_ARG);
}

/* A role the family does not know is refused, naming it and the known
 * ones, in every family (chatml, llama3 and gemma had written any role
 * into the prompt: "critic", or "user<|im_end|>" that opens a fake turn). */
TEST(unknown_role_refused) {
    static const char *const families[] = {"chatml", "qwen3", "llama3", "llama2", "gemma"};
    static const char *const roles[] = {"critic", "", "User", "user<|im_end|>"};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            const kvs_chat_message m[] = {{"user", "a"}, {roles[r], "b"}};
            char *out = (char *)"untouched";
            CHECK_EQ_INT(kvs_chat_render_template(NULL, 0, families[f], m, 2, 1, &out), KVS_ERR_INVALID_ARG);
            CHECK_MSG(strstr(kvs_last_error(), "message 1") && strstr(kvs_last_error(), "assistant"), "%s: %s",
                      families[f], kvs_last_error());
            if (roles[r][0]) CHECK_MSG(strstr(kvs_last_error(), roles[r]) != NULL, "%s", kvs_last_error());
            CHECK(strcmp(out, "untouched") == 0);
        }
    /* the tool role is qwen3's only */
    const kvs_chat_message tool[] = {{"user", "a"}, {"tool", "b"}};
    char *out = NULL;
    CHECK_EQ_INT(kvs_chat_render_template(NULL, 0, "chatml", tool, 2, 1, &out), KVS_ERR_INVALID_ARG);
    check_render(NULL, "qwen3", tool, 2, 0,
                 "<|im_start|>user\na<|im_end|>\n<|im_start|>user\n<tool_response>\nb\n</tool_response><|im_end|>\n");
}

/* The real model: the template is read from the GGUF, detected as ChatML,
 * and the rendered prompt tokenizes (PARSE_SPECIAL) to the ids the HF
 * tokenizer gives for the same text. */
TEST(smollm2_gguf) {
    const char *path = kt_model_path();
    if (!path) return;
    kvs_gguf *g = NULL;
    kvs_tokenizer *t = NULL;
    int st = kvs_gguf_open(path, &g);
    if (st == KVS_OK) st = kvs_tokenizer_new(g, &t);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) { kvs_gguf_close(g); return; }
    CHECK(strcmp(kvs_chat_detect_family(g), "chatml") == 0);
    char *out = NULL;
    st = kvs_chat_render_gguf(g, NULL, user_only, 1, 1, &out);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (out) {
        CHECK(strcmp(out, SMOL_SYS "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n") == 0);
        int32_t ids[128];
        int n = 0;
        st = kvs_tokenizer_encode(t, out, strlen(out), KVS_TOKENIZE_PARSE_SPECIAL, ids, 128, &n);
        /* tokenizers 0.23.3 on smollm2-tokenizer.json */
        static const int32_t want[] = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519,
                                       28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 19556, 17, 2,
                                       198, 1, 520, 9531, 198};
        CHECK_EQ_INT(n, (int)(sizeof want / sizeof want[0]));
        CHECK(st == KVS_OK && n == (int)(sizeof want / sizeof want[0]) && memcmp(ids, want, sizeof want) == 0);
        free(out);
    }
    kvs_tokenizer_free(t);
    kvs_gguf_close(g);
}

int main(void) {
    RUN(detect_family);
    RUN(chatml_smollm2);
    RUN(llama3);
    RUN(llama2);
    RUN(gemma);
    RUN(qwen3);
    RUN(errors);
    RUN(unknown_role_refused);
    RUN(smollm2_gguf);
    return kt_summary();
}
