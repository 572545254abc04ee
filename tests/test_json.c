/* The JSON module of the clients (tools/json_util.h, on cJSON): builders
 * of the public result structs read back through the typed readers, reader
 * errors that name the field, and the RAG data loaders of the benchmarks
 * (bench/rag_data.h) on the shared MuSiQue file. No model needed. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "json_util.h"
#include "../bench/rag_data.h"

static kvs_generate_result sample_result(kvs_reuse_result *u, kvs_docs_result *d, int32_t *toks, float *logits,
                                         int32_t *ends, int32_t *top_ids, float *top_lp) {
    kvs_generate_result r;
    memset(&r, 0, sizeof r);
    r.n_prompt = 300;
    r.n_live = 40;
    r.n_prefilled = 30;
    toks[0] = 5, toks[1] = 7, toks[2] = 2;
    r.tokens = toks;
    r.n_tokens = 3;
    r.text = "Paris \"quoted\"\n";
    r.stop_reason = KVS_STOP_EOS;
    r.timings = (kvs_timings){0.5, 1.25, 10.0, 20.0, 30.0, 0.75, 12.0};
    r.ttft_ms = 0.5 + 1.25 + 10.0 + 20.0 + 30.0 + 0.75;
    for (int i = 0; i < 4; i++) logits[i] = (float)i;
    r.first_logits = logits;
    r.n_vocab = 4;
    top_ids[0] = 3, top_ids[1] = 2;
    top_lp[0] = -0.5f, top_lp[1] = NAN; /* not finite: must come out as null */
    r.top_ids = top_ids;
    r.top_logprobs = top_lp;
    r.n_top = 2;
    ends[0] = 64, ends[1] = 300;
    *u = (kvs_reuse_result){200, 230, 230.0 / 300, ends, 2, 1, 3, "No space left on device"};
    *d = (kvs_docs_result){100, 70, 2, 1, 2100, 1};
    r.reuse = u;
    r.docs = d;
    return r;
}

TEST(generate_result_round_trip) {
    kvs_reuse_result u;
    kvs_docs_result d;
    int32_t toks[3], ends[2], top_ids[2];
    float logits[4], top_lp[2];
    kvs_generate_result r = sample_result(&u, &d, toks, logits, ends, top_ids, top_lp);
    json_generate_opts o = {"cacheblend", 64};
    cJSON *j = json_generate_result(&r, &o);
    CHECK(j != NULL);
    if (!j) return;
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    json_error e;
    cJSON *back = json_parse(s, strlen(s), "generate", &e);
    cJSON_free(s);
    CHECK_MSG(back != NULL, "%s", e.msg);
    if (!back) return;
    long v = 0;
    double x = 0;
    const char *str = NULL;
    CHECK(json_get_int(back, "prompt_tokens", 1, 0, 1 << 20, &v, &e) == 0 && v == 300);
    CHECK(json_get_string(back, "text", 1, &str, &e) == 0 && !strcmp(str, "Paris \"quoted\"\n"));
    CHECK(json_get_string(back, "stop_reason", 1, &str, &e) == 0 && !strcmp(str, "eos"));
    CHECK(json_get_string(back, "reuse", 1, &str, &e) == 0 && !strcmp(str, "cacheblend"));
    /* 30 tokens prefilled, fewer than a chunk of 64: no rate */
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(back, "prefill_tok_s")));
    CHECK(json_get_number(back, "decode_tok_s", 1, 0, 1e9, &x, &e) == 0 && fabs(x - 2 * 1000.0 / 12.0) < 1e-9);
    CHECK(json_get_int(back, "cached_tokens", 1, 0, 1 << 20, &v, &e) == 0 && v == 200);
    CHECK(json_get_int(back, "reused_tokens", 1, 0, 1 << 20, &v, &e) == 0 && v == 230);
    CHECK(json_get_int(back, "write_errors", 1, 0, 1 << 20, &v, &e) == 0 && v == 3);
    const char *why = NULL;
    CHECK(json_get_string(back, "write_error", 1, &why, &e) == 0 && why && !strcmp(why, "No space left on device"));
    CHECK(json_get_number(back, "cache_hit_ratio", 1, 0, 1, &x, &e) == 0 && fabs(x - 230.0 / 300) < 1e-12);
    CHECK(json_get_int(back, "recomputed_token_layers", 1, 0, 1L << 40, &v, &e) == 0 && v == 2100);
    CHECK(json_get_int(back, "docs_baked", 1, 0, 1 << 20, &v, &e) == 0 && v == 1);
    CHECK(json_get_number(back, "assemble_ms", 1, 0, 1e9, &x, &e) == 0 && fabs(x - 11.25) < 1e-12);
    const cJSON *t = NULL, *a = NULL;
    CHECK(json_get_object(back, "timings", 1, &t, &e) == 0);
    double sum = 0;
    static const char *phases[] = {"tokenize_ms", "lookup_ms", "assemble_ms", "repair_ms", "prefill_ms",
                                   "first_token_ms"};
    for (int i = 0; t && i < 6; i++) {
        CHECK_MSG(json_get_number(t, phases[i], 1, 0, 1e9, &x, &e) == 0, "%s", e.msg);
        sum += x;
    }
    CHECK_NEAR(sum, r.ttft_ms, 1e-9);
    CHECK(json_get_array(back, "first_top_logprobs", 1, &a, &e) == 0 && cJSON_GetArraySize(a) == 2);
    if (a) CHECK(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetArrayItem(a, 1), 1)));
    CHECK(json_get_array(back, "chunk_ends", 1, &a, &e) == 0 && cJSON_GetArraySize(a) == 2);
    /* the field order of the contract: the nine first, then the cache fields */
    CHECK(!strcmp(back->child->string, "prompt_tokens"));
    const cJSON *ninth = cJSON_GetArrayItem(back, 9);
    CHECK(ninth && !strcmp(ninth->string, "cached_tokens"));
    cJSON_Delete(back);

    /* kvs_generate: no reuse or docs part, so none of their fields */
    r.reuse = NULL;
    r.docs = NULL;
    j = json_generate_result(&r, NULL);
    CHECK(j && cJSON_GetArraySize(j) == 12 && !cJSON_GetObjectItemCaseSensitive(j, "cached_tokens") &&
          !cJSON_GetObjectItemCaseSensitive(j, "moved_tokens"));
    cJSON_Delete(j);
}

TEST(readers_name_the_field) {
    const char *text = "{\"n\": 1.5, \"s\": 3, \"big\": 1e9, \"ok\": true, \"arr\": {}}";
    json_error e;
    cJSON *j = json_parse(text, strlen(text), "request", &e);
    CHECK(j != NULL);
    long v = 42;
    const char *s = NULL;
    CHECK_EQ_INT(json_get_int(j, "n", 1, 0, 10, &v, &e), -1);
    CHECK_MSG(strstr(e.msg, "n: expected an integer in [0, 10], got a fraction") != NULL, "%s", e.msg);
    CHECK_EQ_INT(json_get_string(j, "s", 1, &s, &e), -1);
    CHECK_MSG(strstr(e.msg, "s: expected a string, got a number") != NULL, "%s", e.msg);
    CHECK_EQ_INT(json_get_int(j, "big", 1, 0, 100, &v, &e), -1);
    CHECK_MSG(strstr(e.msg, "big: 1000000000 is out of range [0, 100]") != NULL, "%s", e.msg);
    CHECK_EQ_INT(json_get_int(j, "missing", 1, 0, 100, &v, &e), -1);
    CHECK_MSG(strstr(e.msg, "missing: required field missing") != NULL, "%s", e.msg);
    CHECK_EQ_INT(json_get_int(j, "missing", 0, 0, 100, &v, &e), 1); /* optional: absent, kept */
    CHECK_EQ_INT((int)v, 42);
    const cJSON *arr = NULL;
    CHECK_EQ_INT(json_get_array(j, "arr", 1, &arr, &e), -1);
    CHECK_MSG(strstr(e.msg, "arr: expected an array, got an object") != NULL, "%s", e.msg);
    int b = 0;
    CHECK(json_get_bool(j, "ok", 1, &b, &e) == 0 && b == 1);
    cJSON_Delete(j);
    /* malformed input names the byte, trailing data is refused */
    CHECK(json_parse("{\"a\": [1, 2}", 12, "body", &e) == NULL);
    CHECK_MSG(strstr(e.msg, "body: malformed JSON at byte") != NULL, "%s", e.msg);
    CHECK(json_parse("{} x", 4, "body", &e) == NULL);
    CHECK_MSG(strstr(e.msg, "unexpected data after the JSON value at byte 3") != NULL, "%s", e.msg);
    CHECK(json_read_file("/nonexistent/x.json", &e) == NULL);
    CHECK_MSG(strstr(e.msg, "/nonexistent/x.json: cannot open") != NULL, "%s", e.msg);
}

/* The benchmarks' MuSiQue / 2WikiMQA loaders, on the shared data. */
TEST(rag_data_loaders) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/data", kt_shared_dir());
    static item items[60];
    int n = load_musique(dir, 50, items);
    CHECK_MSG(n == 50, "%d MuSiQue items", n);
    for (int i = 0; i < n; i++) {
        CHECK(items[i].n_docs == MUSIQUE_DOCS && items[i].n_answers >= 1 &&
              !strncmp(items[i].question, "Question: ", 10));
        for (int k = 0; k < items[i].n_docs; k++) CHECK(strlen(items[i].docs[k]) > 20);
    }
    for (int i = 0; i < n; i++) item_free(&items[i]);
    (void)k_system; /* rag_data.h's prompt text, used by the benchmarks only */
    int w = load_wiki(dir, 3, items);
    CHECK_MSG(w == 3, "%d 2WikiMQA items", w);
    for (int i = 0; i < w; i++) {
        CHECK(items[i].n_docs >= 1 && strlen(items[i].question) > 5);
        item_free(&items[i]);
    }
}

int main(void) {
    RUN(generate_result_round_trip);
    RUN(readers_name_the_field);
    RUN(rag_data_loaders);
    return kt_summary();
}
