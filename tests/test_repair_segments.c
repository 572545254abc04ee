/*
 * Segment layout (src/rag/segments.h) on the real model's vocabulary and
 * chat template: every segment tokenized on its own, laid out in the chat
 * template, the doc prefix, borders.
 */
#include <stdint.h>

#include "harness.h"
#include "kvstitch.h"
#include "rag/segments.h"

static kvs_model *g_model;

/* The bytes of tokens[0..n), special tokens rendered. malloc'd. */
static char *detok(const int32_t *t, int n) {
    size_t cap = 64 + (size_t)n * 32, len = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        if (kvs_token_to_bytes(g_model, t[i], 1, s + len, cap - len - 1, &k) != KVS_OK) {
            free(s);
            return NULL;
        }
        len += k;
    }
    s[len] = 0;
    return s;
}

static int tokenize(const char *text, int flags, int32_t *out, int cap) {
    int n = 0;
    CHECK_EQ_INT(kvs_tokenize(g_model, text, strlen(text), flags, out, cap, &n), KVS_OK);
    return n;
}

static const char *const docs[] = {"The Eiffel Tower is in Paris.", " It was built in 1889 for the World's Fair.",
                                   "\nGustave Eiffel's company built it."};

TEST(chat_layout_renders_the_template) {
    kvs_seg_input in = {1, "Be brief.", docs, NULL, 3, " When was it built?", NULL};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    if (!lay.tokens) return;
    CHECK_EQ_INT(lay.n_segs, 5);
    CHECK(lay.segs[0].kind == KVS_SEG_PREFIX && lay.segs[4].kind == KVS_SEG_QUESTION);
    for (int i = 1; i <= 3; i++) {
        CHECK(lay.segs[i].kind == KVS_SEG_DOC);
        CHECK_EQ_INT(lay.segs[i].doc, i - 1);
    }
    /* The whole sequence spells the rendered chat: system turn, user turn
     * with docs + question, generation prompt. */
    char user[512];
    snprintf(user, sizeof user, "%s%s%s%s", docs[0], docs[1], docs[2], in.question);
    kvs_chat_message msgs[2] = {{"system", in.system}, {"user", user}};
    char *want = NULL, *got = detok(lay.tokens, lay.n_tokens);
    CHECK_EQ_INT(kvs_chat_render(g_model, NULL, msgs, 2, 1, &want), KVS_OK);
    CHECK_MSG(got && want && !strcmp(got, want), "layout spells\n%s\nexpected\n%s", got, want);
    free(got);
    free(want);
    /* Each doc's tokens are its own tokenization, as plain text. */
    for (int i = 0; i < 3; i++) {
        int32_t t[64];
        int n = tokenize(docs[i], 0, t, 64);
        const kvs_seg *s = &lay.segs[i + 1];
        CHECK_EQ_INT(s->end - s->start, n);
        CHECK(n == s->end - s->start && !memcmp(lay.tokens + s->start, t, (size_t)n * sizeof *t));
    }
    /* Borders: every segment start but the first. */
    CHECK_EQ_INT(lay.n_borders, 4);
    for (int i = 0; i < lay.n_borders; i++) CHECK_EQ_INT(lay.borders[i], lay.segs[i + 1].start);
    /* The default doc prefix: the template before the docs, empty system. */
    char *dp = detok(lay.doc_prefix, lay.n_doc_prefix);
    CHECK_MSG(dp && !strcmp(dp, "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n"), "doc prefix '%s'", dp);
    free(dp);
    kvs_seg_layout_free(&lay);
}

TEST(doc_tokens_do_not_depend_on_neighbours) {
    const char *rev[] = {docs[2], docs[0], docs[1]};
    kvs_seg_input a = {1, NULL, docs, NULL, 3, "Q?", NULL}, b = {1, "Other system.", rev, NULL, 3, "Other?", NULL};
    kvs_seg_layout la, lb;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &a, &la), KVS_OK);
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &b, &lb), KVS_OK);
    if (!la.tokens || !lb.tokens) return;
    for (int i = 0; i < 3; i++) {
        const kvs_seg *sa = &la.segs[1 + i], *sb = NULL;
        for (int j = 0; j < lb.n_segs; j++)
            if (lb.segs[j].kind == KVS_SEG_DOC && rev[lb.segs[j].doc] == docs[i]) sb = &lb.segs[j];
        CHECK(sb != NULL);
        if (!sb) continue;
        CHECK_EQ_INT(sa->end - sa->start, sb->end - sb->start);
        CHECK(!memcmp(la.tokens + sa->start, lb.tokens + sb->start, (size_t)(sa->end - sa->start) * sizeof(int32_t)));
        CHECK(sa->start != sb->start || i == 1); /* they did move */
    }
    /* The doc prefix does not depend on the system message. */
    CHECK_EQ_INT(la.n_doc_prefix, lb.n_doc_prefix);
    CHECK(!memcmp(la.doc_prefix, lb.doc_prefix, (size_t)la.n_doc_prefix * sizeof(int32_t)));
    /* Without a system message the template's default one is there. */
    char *pa = detok(la.tokens, la.segs[0].end);
    CHECK_MSG(pa && strstr(pa, "You are a helpful AI assistant named SmolLM"), "prefix '%s'", pa);
    free(pa);
    kvs_seg_layout_free(&la);
    kvs_seg_layout_free(&lb);
}

TEST(plain_layout) {
    kvs_seg_input in = {0, "System text.", docs, NULL, 2, " Question?", NULL};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    if (!lay.tokens) return;
    char *got = detok(lay.tokens, lay.n_tokens);
    char want[256];
    snprintf(want, sizeof want, "System text.%s%s Question?", docs[0], docs[1]);
    CHECK_MSG(got && !strcmp(got, want), "'%s'", got);
    free(got);
    CHECK_EQ_INT(lay.n_segs, 4);
    CHECK_EQ_INT(lay.n_doc_prefix, 0); /* SmolLM2 adds no BOS */
    kvs_seg_layout_free(&lay);

    /* No system: no prefix segment. A custom doc prefix. */
    kvs_seg_input in2 = {0, NULL, docs, NULL, 1, "?", "Passage:"};
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in2, &lay), KVS_OK);
    if (!lay.tokens) return;
    CHECK_EQ_INT(lay.n_segs, 2);
    CHECK(lay.segs[0].kind == KVS_SEG_DOC);
    int32_t t[16];
    int n = tokenize("Passage:", KVS_TOKENIZE_PARSE_SPECIAL, t, 16);
    CHECK_EQ_INT(lay.n_doc_prefix, n);
    CHECK(!memcmp(lay.doc_prefix, t, (size_t)n * sizeof *t));
    kvs_seg_layout_free(&lay);
}

TEST(question_required) {
    kvs_seg_input in = {0, NULL, docs, NULL, 1, "", NULL};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_ERR_INVALID_ARG);
    CHECK(lay.tokens == NULL);
    /* With chat the generation prompt is the live tail. */
    in.chat = 1;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    CHECK(lay.n_segs == 3 && lay.segs[2].kind == KVS_SEG_QUESTION);
    kvs_seg_layout_free(&lay);
    /* An empty doc is no segment. */
    const char *two[] = {"", docs[1]};
    kvs_seg_input e = {1, NULL, two, NULL, 2, "Q", NULL};
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &e, &lay), KVS_OK);
    CHECK_EQ_INT(lay.n_segs, 3);
    CHECK(lay.n_segs == 3 && lay.segs[1].doc == 1);
    kvs_seg_layout_free(&lay);
}

/* The public kvs_segments_tokenize gives the layout's tokens (the baseline
 * a full prefill runs). */
TEST(public_tokenize_matches_layout) {
    kvs_segments seg = {1, "Be brief.", docs, NULL, 3, "When?", NULL};
    kvs_seg_layout lay;
    int32_t *t = NULL;
    int n = 0;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &seg, &lay), KVS_OK);
    CHECK_EQ_INT(kvs_segments_tokenize(g_model, &seg, &t, &n), KVS_OK);
    CHECK_EQ_INT(n, lay.n_tokens);
    CHECK(t && n == lay.n_tokens && !memcmp(t, lay.tokens, (size_t)n * sizeof *t));
    free(t);
    kvs_seg_layout_free(&lay);
    seg.chat = 0;
    seg.question = NULL;
    CHECK_EQ_INT(kvs_segments_tokenize(g_model, &seg, &t, &n), KVS_ERR_INVALID_ARG);
}

int main(void) {
    const char *mp = kt_model_path();
    kvs_model_params mp_ = kvs_model_default_params();
    mp_.vocab_only = 1; /* the layout needs the tokenizer and template only */
    if (!mp || kvs_model_load(mp, mp_, &g_model) != KVS_OK) {
        fprintf(stderr, "  cannot load the model: %s\n", kvs_last_error());
        printf("FAIL setup\n");
        return 1;
    }
    RUN(chat_layout_renders_the_template);
    RUN(doc_tokens_do_not_depend_on_neighbours);
    RUN(plain_layout);
    RUN(question_required);
    RUN(public_tokenize_matches_layout);
    kvs_model_free(g_model);
    return kt_summary();
}
