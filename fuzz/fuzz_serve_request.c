/*
 * libFuzzer target for the server's request parser (server/request.c): any
 * bytes, as a chat and as a completion body. A parse either fails with an
 * OpenAI-shaped error (HTTP 400, a message) or yields a request whose
 * fields hold what request.h promises; then it is freed (ASan/LSan see
 * leaks and bad frees).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/request.h"

#define FUZZ_CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static void check(const srv_request *r, srv_kind kind) {
    FUZZ_CHECK(r->kind == kind);
    if (kind == SRV_KIND_CHAT) {
        FUZZ_CHECK(r->n_msgs > 0 && r->msgs);
        for (int i = 0; i < r->n_msgs; i++) {
            const char *role = r->msgs[i].role;
            FUZZ_CHECK(role && r->msgs[i].content);
            FUZZ_CHECK(!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant"));
        }
    } else { /* a text, or token ids (their text is job.c's) */
        FUZZ_CHECK((r->prompt != NULL) != (r->prompt_ids != NULL));
        FUZZ_CHECK(!r->prompt_ids || (r->n_prompt_ids > 0 && r->n_prompt_ids <= SRV_MAX_PROMPT_IDS));
        for (int i = 0; i < r->n_prompt_ids; i++) FUZZ_CHECK(r->prompt_ids[i] >= 0);
        FUZZ_CHECK(!r->echo || r->n_docs == 0);
        FUZZ_CHECK(r->n_prompts >= 1 && r->n_prompts <= SRV_MAX_CHOICES && r->prompt_index == 0);
    }
    FUZZ_CHECK(r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP);
    for (int i = 0; i < r->n_stop; i++) FUZZ_CHECK(r->stop[i] && r->stop[i][0]);
    FUZZ_CHECK(r->n_docs >= 0 && r->n_docs <= SRV_MAX_DOCS);
    for (int i = 0; i < r->n_docs; i++) FUZZ_CHECK(r->docs[i] && r->doc_ids[i]);
    FUZZ_CHECK(r->temperature >= 0 && r->temperature <= 2 && r->top_p > 0 && r->top_p <= 1);
    FUZZ_CHECK(r->max_tokens >= -1 && r->max_tokens <= SRV_MAX_TOKENS_LIMIT);
    FUZZ_CHECK(r->max_tokens != -1 || r->echo); /* (-1: given as 0, only with echo) */
    FUZZ_CHECK(r->recompute_ratio <= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int k = 0; k < 2; k++) {
        srv_kind kind = k ? SRV_KIND_COMPLETION : SRV_KIND_CHAT;
        srv_request r;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_request_parse((const char *)data, size, kind, &r, &e) == 0) {
            check(&r, kind);
            srv_request_free(&r);
        } else {
            FUZZ_CHECK(e.http == 400 && e.message[0]);
            FUZZ_CHECK(r.msgs == NULL && r.prompt == NULL && r.prompt_ids == NULL && r.docs == NULL);
        }
    }
    return 0;
}
