/*
 * kvs_docs_warmer (rag/docs_warmer.c, kvs_doc_compute_slice) on the real
 * model: three MuSiQue passages as docs, a chat prompt.
 *
 * Exact invariants (memcmp, no tolerance):
 *   a document computed in slices of 1, 7 and 64 tokens == computed in one
 *   call (kvs_doc_compute), payload bytes
 *   a warmer's cache gives kvs_generate_segments the bits that a cache
 *   warmed by kvs_warm_docs gives (first logits and tokens)
 * Bookkeeping: steps of max_tokens compute no more than that many tokens
 * (so a cold set takes several steps), the prompt before the documents is
 * computed first and stored by prefix (the request then serves it exactly),
 * each document is stored when its last slice is done, the report counts
 * them, a second warmer finds everything cached at its first step, the
 * request after it computes no document, and bad arguments are refused by
 * name.
 */
#include <stdint.h>

#include "harness.h"
#include "test_stopper.h"
#include "test_docs_util.h"
#include "test_greedy.h"
#include "test_musique.h"
#include "kvstitch.h"
#include "cache/cache.h"
#include "kv/keys.h"
#include "rag/doc_cache.h"
#include "rag/segment_gen.h"

#define N_DOCS 3
#define N_GEN 4

static kvs_model *g_model;
static kvs_context *g_ctx;
static kvs_seg_layout g_lay;
static char *g_docs[N_DOCS];

static kvs_segments segments(void) { return kt_docs_segments(g_docs, N_DOCS); }

static const kvs_seg *doc_seg(int i) { return kt_doc_seg(&g_lay, i); }

static int doc_tokens(void) {
    int n = 0;
    for (int i = 0; i < N_DOCS; i++) n += doc_seg(i)->end - doc_seg(i)->start;
    return n;
}

/* Doc i computed in slices of `slice` tokens (0: one kvs_doc_compute). */
static kvs_chunk *compute_doc(kvs_cache *c, int i, int slice) {
    kvs_doc_computer dc;
    const kvs_seg *s = doc_seg(i);
    const int n = s->end - s->start;
    kvs_chunk *ch = NULL;
    if (kvs_doc_computer_init(&dc, g_ctx, c, g_lay.doc_prefix, g_lay.n_doc_prefix, n) != KVS_OK) {
        CHECK_MSG(0, "doc computer: %s", kvs_last_error());
        return NULL;
    }
    if (!slice) {
        CHECK(kvs_doc_compute(&dc, g_lay.tokens + s->start, n, &ch) == KVS_OK);
    } else {
        int done = 0, calls = 0;
        while (!ch && done < n) {
            int before = done;
            if (kvs_doc_compute_slice(&dc, g_lay.tokens + s->start, n, &done, slice, &ch) != KVS_OK) break;
            CHECK(done - before <= slice && done > before);
            calls++;
        }
        CHECK_EQ_INT(calls, (n + slice - 1) / slice);
        /* past the end: refused, nothing returned */
        kvs_chunk *again = NULL;
        CHECK(kvs_doc_compute_slice(&dc, g_lay.tokens + s->start, n, &done, slice, &again) != KVS_OK);
        CHECK(again == NULL);
    }
    kvs_doc_computer_release(&dc);
    CHECK(ch != NULL);
    return ch;
}

TEST(slices_give_the_one_call_bytes) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    const int slices[] = {1, 7, 64};
    for (int i = 0; i < N_DOCS; i++) {
        kvs_chunk *whole = compute_doc(c, i, 0);
        for (size_t k = 0; k < sizeof slices / sizeof slices[0] && whole; k++) {
            if (slices[k] == 1 && i > 0) continue; /* one token at a time: the first doc is enough */
            kvs_chunk *part = compute_doc(c, i, slices[k]);
            CHECK(part && part->kv_bytes == whole->kv_bytes && !memcmp(part->kv, whole->kv, whole->kv_bytes));
            CHECK(part && kvs_key_equal(&part->prefix_key, &whole->prefix_key) &&
                  kvs_key_equal(&part->content_key, &whole->content_key));
            kvs_chunk_unref(part);
        }
        kvs_chunk_unref(whole);
    }
    kvs_cache_free(c);
}

/* Runs a warmer to the end in steps of max_tokens; returns the steps. */
static int warm_in_steps(kvs_cache *c, int max_tokens, kvs_warm_docs_report *rep) {
    kvs_segments s = segments();
    kvs_docs_warmer *w = NULL;
    if (kvs_docs_warmer_new(g_ctx, c, &s, 1, &w) != KVS_OK) {
        CHECK_MSG(0, "warmer: %s", kvs_last_error());
        return -1;
    }
    int steps = 0, done = 0;
    while (!done && steps < 10000) {
        kvs_warm_docs_report before;
        kvs_docs_warmer_report(w, &before);
        if (kvs_docs_warmer_step(w, max_tokens, &done) != KVS_OK) {
            CHECK_MSG(0, "step: %s", kvs_last_error());
            break;
        }
        steps++;
    }
    kvs_docs_warmer_report(w, rep);
    kvs_docs_warmer_free(w);
    return steps;
}

static int generate(kvs_cache *c, kvs_generate_result *r) {
    kvs_segments s = segments();
    kvs_generate_params gp = kt_greedy(N_GEN);
    int st = kvs_generate_segments(g_ctx, c, &s, &gp, NULL, r);
    CHECK_MSG(st == KVS_OK, "generate: %s", kvs_last_error());
    return st;
}

TEST(warmer_steps_then_request_finds_them) {
    kvs_cache *a = kt_open_cache(g_model, NULL), *b = kt_open_cache(g_model, NULL);
    kvs_generate_result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    if (!a || !b) goto out;
    const int slice = 50, n_doc_tokens = doc_tokens(), n_prefix = doc_seg(0)->start;
    kvs_warm_docs_report rep;
    int steps = warm_in_steps(a, slice, &rep);
    /* at most `slice` tokens per step (the prefix before the documents, then
     * the documents): at least ceil(total / slice) steps */
    CHECK(steps >= (n_prefix + n_doc_tokens + slice - 1) / slice);
    CHECK(steps <= (n_prefix + n_doc_tokens) / slice + N_DOCS + 2);
    CHECK_EQ_INT(rep.n_docs, N_DOCS);
    CHECK_EQ_INT(rep.n_computed, N_DOCS);
    CHECK_EQ_INT(rep.n_cached, 0);
    CHECK_EQ_INT(rep.n_tokens, n_doc_tokens);
    CHECK_EQ_INT(rep.n_prefix_computed, n_prefix);
    /* a second warmer: all cached (prefix and documents), done at its first step */
    CHECK_EQ_INT(warm_in_steps(a, slice, &rep), 1);
    CHECK_EQ_INT(rep.n_cached, N_DOCS);
    CHECK_EQ_INT(rep.n_computed, 0);
    CHECK_EQ_INT(rep.n_prefix_computed, 0);
    /* the same cache contents as kvs_warm_docs: the same request bits */
    kvs_segments s = segments();
    CHECK(kvs_warm_docs(g_ctx, b, &s, NULL) == KVS_OK);
    if (generate(a, &ra) || generate(b, &rb)) goto out;
    CHECK(kt_same_result(&ra, &rb));
    /* the warmer's prefix is served exactly; kvs_warm_docs stores no prefix */
    CHECK(ra.reuse && ra.reuse->n_cached == n_prefix);
    CHECK(rb.reuse && rb.reuse->n_cached == 0);
    CHECK(ra.docs != NULL);
    if (ra.docs) {
        CHECK_EQ_INT(ra.docs->n_docs_hit, N_DOCS);
        CHECK_EQ_INT(ra.docs->n_docs_computed, 0);
    }
out:
    kvs_generate_result_free(&ra);
    kvs_generate_result_free(&rb);
    kvs_cache_free(a);
    kvs_cache_free(b);
}

/* The stop poll (kvs_context_set_should_stop) while documents are computed:
 * kvs_warm_docs stops at the poll that says so (inside the first document:
 * nothing stored; a document finished before a stop is stored), and the
 * same call on the same context afterwards stores what an uninterrupted
 * warm does (the requests from both caches give the same bits). A prefix
 * warm stopped likewise stores nothing. */
TEST(should_stop_interrupts_documents_and_warm) {
    kt_stopper st = {0, 4};
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = kvs_context_n_ctx(g_ctx);
    cp.n_batch = 32; /* several polls a document */
    kvs_context *ctx = NULL;
    kvs_cache *a = kt_open_cache(g_model, NULL), *b = kt_open_cache(g_model, NULL);
    kvs_generate_result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    if (!a || !b || kvs_context_new(g_model, cp, &ctx) != KVS_OK) {
        CHECK_MSG(0, "setup: %s", kvs_last_error());
        goto out;
    }
    kvs_context_set_should_stop(ctx, kt_stop_at_poll, &st);
    kvs_segments s = segments();
    kvs_warm_docs_report rep;
    CHECK_EQ_INT(kvs_warm_docs(ctx, a, &s, &rep), KVS_ERR_INTERRUPTED);
    CHECK_EQ_INT(st.polls, 4);
    CHECK_MSG(strstr(kvs_last_error(), "should_stop") != NULL, "%s", kvs_last_error());
    kvs_cache_stats cs;
    kvs_cache_get_stats(a, &cs);
    CHECK_EQ_INT((int)cs.entries, 0);
    st.stop_at = 0;
    CHECK_EQ_INT(kvs_warm_docs(ctx, a, &s, &rep), KVS_OK);
    CHECK_EQ_INT(rep.n_computed, N_DOCS);
    CHECK_EQ_INT(kvs_warm_docs(g_ctx, b, &s, NULL), KVS_OK);
    if (generate(a, &ra) || generate(b, &rb)) goto out;
    CHECK(kt_same_result(&ra, &rb));

    /* a prefix warm of the prompt, stopped at its second batch */
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (c) {
        kvs_warm_report wr;
        st.polls = 0;
        st.stop_at = 2;
        CHECK_EQ_INT(kvs_warm(ctx, c, g_lay.tokens, g_lay.n_tokens, &wr), KVS_ERR_INTERRUPTED);
        kvs_cache_get_stats(c, &cs);
        CHECK_EQ_INT((int)cs.entries, 0);
        kvs_cache_free(c);
    }
out:
    kvs_generate_result_free(&ra);
    kvs_generate_result_free(&rb);
    kvs_context_free(ctx);
    kvs_cache_free(a);
    kvs_cache_free(b);
}

TEST(warmer_refuses_bad_arguments) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    kvs_segments s = segments();
    kvs_docs_warmer *w = (kvs_docs_warmer *)&s; /* a failure leaves *out as it was (it had been NULLed) */
    CHECK(kvs_docs_warmer_new(NULL, c, &s, 1, &w) == KVS_ERR_INVALID_ARG && w == (kvs_docs_warmer *)&s);
    w = NULL;
    CHECK(kvs_docs_warmer_new(g_ctx, c, &s, 1, NULL) == KVS_ERR_INVALID_ARG);
    if (kvs_docs_warmer_new(g_ctx, c, &s, 1, &w) == KVS_OK) {
        int done = 0;
        CHECK(kvs_docs_warmer_step(w, 0, &done) == KVS_ERR_INVALID_ARG);
        CHECK(strstr(kvs_last_error(), "max_tokens") != NULL);
        CHECK(kvs_docs_warmer_step(NULL, 8, &done) == KVS_ERR_INVALID_ARG);
        kvs_warm_docs_report rep;
        kvs_docs_warmer_report(w, &rep); /* nothing done yet */
        CHECK_EQ_INT(rep.n_docs, 0);
        kvs_docs_warmer_free(w);
    }
    kvs_docs_warmer_free(NULL);
    kvs_cache_free(c);
}

static int setup(void) {
    if (kt_docs_setup(800, N_DOCS, g_docs, &g_model, &g_ctx)) return -1;
    kvs_seg_input in = segments();
    if (kvs_seg_layout_build(g_model, &in, &g_lay) != KVS_OK) return -1;
    printf("  prompt %d tokens, documents %d\n", g_lay.n_tokens, doc_tokens());
    return 0;
}

int main(void) {
    if (setup()) return kt_setup_failed(kvs_last_error());
    RUN(slices_give_the_one_call_bytes);
    RUN(warmer_steps_then_request_finds_them);
    RUN(should_stop_interrupts_documents_and_warm);
    RUN(warmer_refuses_bad_arguments);
    kt_docs_teardown(&g_lay, g_docs, N_DOCS, g_ctx, g_model);
    return kt_summary();
}
