/*
 * Non-prefix reuse on the real model: moved doc chunks and the repair
 * strategies (src/rag/repair/repair.h, segment_gen.h).
 *
 * A chat prompt with a system message, three MuSiQue passages as docs and a
 * question. Exact invariants (memcmp of the first logits and the greedy
 * tokens, no tolerance):
 *   full == a cold prefill of the same tokens
 *   cacheblend ratio 1.0 == full (both deviation metrics)
 *   cacheblend ratio 0 == none
 *   docs computed on the spot == the same docs from the cache (memory, and a
 *   fresh cache opened on the directory)
 *   a request whose system segment hits the exact prefix cache == the same
 *   request computing it
 * Counts: recomputed_tokens per strategy, moved tokens, docs hit/computed.
 * A single doc computed after exactly the prompt's own prefix (delta 0) is
 * exact: none / selective / cacheblend give a cold prefill's bits.
 * Gradual narrowing: 1 -> 1 == full; r -> r == no narrowing; every
 * selected set is a subset of the one before, forced (seams) tokens stay,
 * the final set has the ratio's size; recomputed_tokens and the (token,
 * layer) count.
 * Quality (first-token KL vs full): cacheblend at 0.5 is closer than none.
 * The context's batch is 128 rows, so the layer-major recompute runs in
 * several batches per layer. KVSTITCH_TEST_QUICK=1 uses shorter docs.
 */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "engine/context.h"
#include "harness.h"
#include "test_stopper.h"
#include "test_docs_util.h"
#include "test_greedy.h"
#include "test_kl.h"
#include "test_kv_dir.h"
#include "test_musique.h"
#include "kvstitch.h"
#include "cache/cache.h"
#include "rag/segment_gen.h"
#include "rag/repair/blend.h"

#define N_DOCS 3
#define N_GEN 4

static const char *const k_sys = KT_DOCS_SYSTEM;
static const char *const k_question = KT_DOCS_QUESTION;

static kvs_model *g_model;
static kvs_context *g_ctx;
static kvs_seg_layout g_lay, g_lay_rev;
static kvs_generate_result g_full; /* cold prefill of g_lay.tokens */
static char *g_docs[N_DOCS];

static kvs_repair_params repair(kvs_repair_mode mode, float ratio) {
    kvs_repair_params rp = kvs_repair_default_params();
    rp.mode = mode;
    rp.recompute_ratio = ratio;
    rp.cacheblend_seams = 0; /* plain CacheBlend unless a test asks for the hybrid */
    return rp;
}

/* One request without the exact prefix path (isolates the doc path). */
static int run(kvs_cache *c, const kvs_seg_layout *lay, kvs_repair_params rp, kvs_generate_result *r,
               kvs_seg_report *rep) {
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_seg_options o = kvs_seg_default_options();
    o.use_exact = 0;
    o.store_prefix = 0;
    int st = kvs_seg_generate(g_ctx, c, lay, &gp, &rp, &o, r, rep);
    CHECK_MSG(st == KVS_OK, "%s: %s", kvs_repair_mode_name(rp.mode), kvs_last_error());
    return st;
}

static int doc_tokens(const kvs_seg_layout *lay) {
    int n = 0;
    for (int i = 0; i < lay->n_segs; i++)
        if (lay->segs[i].kind == KVS_SEG_DOC) n += lay->segs[i].end - lay->segs[i].start;
    return n;
}

TEST(full_equals_cold_prefill) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_generate_result r;
    kvs_seg_report rep;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_FULL, 0), &r, &rep)) goto out;
    CHECK_MSG(kt_same_result(&r, &g_full), "full differs from a cold prefill");
    CHECK_EQ_INT(rep.n_moved, 0);
    CHECK_EQ_INT(rep.n_recomputed, doc_tokens(&g_lay));
    CHECK_EQ_INT(rep.n_docs, 0); /* full reads no doc chunk */
    kvs_generate_result_free(&r);
out:
    kvs_cache_free(c);
}

TEST(cold_docs_equal_cached_docs) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &a, &ra)) goto out;
    CHECK_EQ_INT(ra.n_docs, N_DOCS);
    CHECK_EQ_INT(ra.n_docs_computed, N_DOCS);
    CHECK_EQ_INT(ra.n_docs_hit, 0);
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &b, &rb)) {
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_EQ_INT(rb.n_docs_computed, 0);
        CHECK_MSG(kt_same_result(&a, &b), "docs from the cache give other bits than docs computed on the spot");
        /* speed: bench/doc_reuse_ttft (never asserted in a test) */
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

TEST(invariants_ratio_one_and_zero) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_generate_result none, r0, r1, k1;
    kvs_seg_report rep;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &none, &rep)) goto out;
    CHECK_EQ_INT(rep.n_recomputed, 0);
    CHECK_EQ_INT(rep.n_moved, doc_tokens(&g_lay));
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.0f), &r0, &rep)) {
        CHECK_MSG(kt_same_result(&r0, &none), "cacheblend ratio 0 differs from none");
        CHECK_EQ_INT(rep.n_recomputed, 0);
        kvs_generate_result_free(&r0);
    }
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 1.0f), &r1, &rep)) {
        CHECK_MSG(kt_same_result(&r1, &g_full), "cacheblend ratio 1 differs from full");
        CHECK_EQ_INT(rep.n_recomputed, doc_tokens(&g_lay));
        CHECK_EQ_INT(rep.n_check, doc_tokens(&g_lay));
        kvs_generate_result_free(&r1);
    }
    kvs_repair_params kp = repair(KVS_REPAIR_CACHEBLEND, 1.0f);
    kp.deviation = KVS_DEVIATION_K_COS;
    kp.check_layer = 2;
    if (!run(c, &g_lay, kp, &k1, &rep)) {
        CHECK_MSG(kt_same_result(&k1, &g_full), "cacheblend (k-cos, check layer 2) ratio 1 differs from full");
        kvs_generate_result_free(&k1);
    }
    CHECK_MSG(!kt_same_result(&none, &g_full), "none equals full: the test prompt does not exercise the repair");
    kvs_generate_result_free(&none);
out:
    kvs_cache_free(c);
}

TEST(recomputed_counts) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    int n_moved = doc_tokens(&g_lay), sel = 0, fk = 0;
    for (int i = 0; i < g_lay.n_segs; i++)
        if (g_lay.segs[i].kind == KVS_SEG_DOC) {
            int len = g_lay.segs[i].end - g_lay.segs[i].start;
            sel += len < 16 ? len : 16;
            fk += len < 8 ? len : 8;
        }
    kvs_generate_result r;
    kvs_seg_report rep;
    if (!run(c, &g_lay, repair(KVS_REPAIR_SELECTIVE, 0), &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, sel);
        CHECK_EQ_INT(rep.n_check, 0);
        kvs_generate_result_free(&r);
    }
    kvs_repair_params fp = repair(KVS_REPAIR_FIRSTK, 0);
    fp.first_k = 8;
    if (!run(c, &g_lay, fp, &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, fk);
        kvs_generate_result_free(&r);
    }
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, (int)(0.15 * n_moved + 0.5));
        CHECK_EQ_INT(rep.n_check, n_moved);
        CHECK_EQ_INT(rep.n_moved, n_moved);
        kvs_generate_result_free(&r);
    }
    /* The hybrid: selective's tokens on top of the ratio. */
    kvs_repair_params sp = repair(KVS_REPAIR_CACHEBLEND, 0.15f);
    sp.cacheblend_seams = 1;
    if (!run(c, &g_lay, sp, &r, &rep)) {
        CHECK(rep.n_recomputed > (int)(0.15 * n_moved + 0.5));
        CHECK(rep.n_recomputed <= (int)(0.15 * n_moved + 0.5) + sel);
        kvs_generate_result_free(&r);
    }
    /* The defaults: query-guided selection at 0.10, exactly the ratio's share
     * (no seams); ratio 0 is none with them too. With mode cacheblend they
     * give the hybrid at 0.10. */
    kvs_repair_params dp = kvs_repair_default_params();
    CHECK(dp.mode == KVS_REPAIR_QUERY && dp.query_seams == 0 && fabsf(dp.recompute_ratio - 0.10f) < 1e-7f);
    if (!run(c, &g_lay, dp, &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, (int)(dp.recompute_ratio * n_moved + 0.5));
        kvs_generate_result_free(&r);
    }
    dp.recompute_ratio = 0;
    if (!run(c, &g_lay, dp, &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, 0);
        CHECK_EQ_INT(rep.n_check, 0);
        kvs_generate_result_free(&r);
    }
    kvs_repair_params hb = kvs_repair_default_params();
    hb.mode = KVS_REPAIR_CACHEBLEND;
    CHECK(hb.cacheblend_seams == 1);
    if (!run(c, &g_lay, hb, &r, &rep)) {
        int want = (int)(hb.recompute_ratio * n_moved + 0.5);
        CHECK(rep.n_recomputed > want && rep.n_recomputed <= want + sel);
        kvs_generate_result_free(&r);
    }
    /* A deviation floor above everything: no token recomputed, but the
     * check layers ran (so this is not `none`). */
    kvs_repair_params hp = repair(KVS_REPAIR_CACHEBLEND, 0.5f);
    hp.min_deviation = 1e30f;
    if (!run(c, &g_lay, hp, &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, 0);
        CHECK_EQ_INT(rep.n_check, n_moved);
        kvs_generate_result_free(&r);
    }
    kvs_cache_free(c);
}

TEST(cacheblend_closer_than_none) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    static const struct { kvs_repair_mode m; float r; } cfg[] = {
        {KVS_REPAIR_NONE, 0}, {KVS_REPAIR_SELECTIVE, 0}, {KVS_REPAIR_FIRSTK, 0},
        {KVS_REPAIR_CACHEBLEND, 0.15f}, {KVS_REPAIR_CACHEBLEND, 0.5f}};
    double kl[5] = {0};
    for (int i = 0; i < 5; i++) {
        kvs_generate_result r;
        kvs_seg_report rep;
        if (run(c, &g_lay, repair(cfg[i].m, cfg[i].r), &r, &rep)) continue;
        kl[i] = kl_first(&g_full, &r);
        printf("  %-10s %.2f  recomputed %4d  first-token KL vs full %.5f\n", kvs_repair_mode_name(cfg[i].m),
               (double)cfg[i].r, rep.n_recomputed, kl[i]);
        kvs_generate_result_free(&r);
    }
    CHECK_MSG(kl[4] < kl[0], "cacheblend 0.5 (KL %.5f) is not closer to full than none (KL %.5f)", kl[4], kl[0]);
    CHECK(kl[0] > 0);
    kvs_cache_free(c);
}

TEST(shuffled_docs_hit) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_generate_result a, b, f;
    kvs_seg_report ra, rb, rf;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &a, &ra)) goto out;
    if (!run(c, &g_lay_rev, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &b, &rb)) {
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_EQ_INT(rb.n_docs_computed, 0);
        CHECK_EQ_INT(rb.n_moved, doc_tokens(&g_lay_rev));
        if (!run(c, &g_lay_rev, repair(KVS_REPAIR_FULL, 0), &f, &rf)) {
            printf("  reversed order: cacheblend 0.15 KL vs full %.5f\n", kl_first(&f, &b));
            kvs_generate_result_free(&f);
        }
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

TEST(exact_prefix_hit_on_system_segment) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_repair_params rp = repair(KVS_REPAIR_CACHEBLEND, 0.15f);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    int st = kvs_seg_generate(g_ctx, c, &g_lay, &gp, &rp, NULL, &a, &ra);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) goto out;
    CHECK_EQ_INT(ra.n_exact, 0);
    CHECK(ra.n_stored > 0);
    st = kvs_seg_generate(g_ctx, c, &g_lay, &gp, &rp, NULL, &b, &rb);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        CHECK_EQ_INT(rb.n_exact, g_lay.segs[1].start); /* the whole system segment, exact */
        CHECK_EQ_INT(b.reuse->n_cached, rb.n_exact);
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_MSG(kt_same_result(&a, &b), "an exact hit on the system segment changed the output");
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

/* An exact hit that covers the system segment and the first docs (the
 * whole prompt was stored by a `full` request), and ends inside the third
 * doc: the hit is cut back to the start of the first doc (the covered docs
 * had been taken as exact, so that the answer depended on what an earlier
 * request stored: an_exact_prefix_over_the_documents_changes_nothing), and
 * every doc is moved. ratio 1 still gives the bits of a cold prefill. */
TEST(exact_prefix_hit_covering_docs) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_repair_params full = repair(KVS_REPAIR_FULL, 0), one = repair(KVS_REPAIR_CACHEBLEND, 1.0f);
    kvs_generate_result a, b, cold;
    kvs_seg_report ra, rb;
    int st = kvs_seg_generate(g_ctx, c, &g_lay, &gp, &full, NULL, &a, &ra);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) goto out;
    CHECK(kt_same_result(&a, &g_full));
    CHECK(ra.n_stored > 0);
    /* docs 0, 1 and the first part of doc 2 (a prefix of its text). */
    char *d2 = strdup(g_docs[2]);
    d2[strlen(d2) / 2] = 0;
    const char *docs[N_DOCS] = {g_docs[0], g_docs[1], d2};
    kvs_seg_input in = {1, "Answer the question from the passages, in a few words.", docs, NULL, N_DOCS,
                        "\n\nQuestion: Where was the author of Hannibal and Scipio educated?", NULL};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    free(d2);
    if (!lay.tokens) goto out_a;
    st = kvs_seg_generate(g_ctx, c, &lay, &gp, &one, NULL, &b, &rb);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        CHECK_EQ_INT(rb.n_exact, lay.segs[1].start);
        CHECK_EQ_INT(rb.n_moved, lay.segs[3].end - lay.segs[1].start);
        CHECK_EQ_INT(rb.n_docs, 3);
        if (kvs_generate(g_ctx, lay.tokens, lay.n_tokens, &gp, &cold) == KVS_OK) {
            CHECK_MSG(kt_same_result(&b, &cold), "exact docs + moved doc at ratio 1 differ from a cold prefill");
            kvs_generate_result_free(&cold);
        }
        kvs_generate_result_free(&b);
    }
    kvs_seg_layout_free(&lay);
out_a:
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

TEST(docs_persist_in_cache_dir) {
    char dir[] = "/tmp/kvs-test-repair-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    kvs_cache *c = kt_open_cache(g_model, dir);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_SELECTIVE, 0), &a, &ra)) goto out;
    kvs_cache_free(c);
    c = kt_open_cache(g_model, dir); /* a fresh store: the doc chunks come from their files */
    if (c && !run(c, &g_lay, repair(KVS_REPAIR_SELECTIVE, 0), &b, &rb)) {
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_MSG(kt_same_result(&a, &b), "docs read from the cache directory give other bits");
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
    kt_remove_dir(dir);
}

/* The public API: kvs_warm_docs, then kvs_generate_segments == the
 * internal request on the same layout. */
TEST(public_api) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    const char *fwd[N_DOCS] = {g_docs[0], g_docs[1], g_docs[2]};
    kvs_segments seg = {1, "Answer the question from the passages, in a few words.", fwd, NULL, N_DOCS,
                        "\n\nQuestion: Where was the author of Hannibal and Scipio educated?", NULL};
    kvs_warm_docs_report w;
    CHECK_EQ_INT(kvs_warm_docs(g_ctx, c, &seg, &w), KVS_OK);
    CHECK(w.n_docs == N_DOCS && w.n_computed == N_DOCS && w.n_cached == 0 && w.n_tokens == doc_tokens(&g_lay));
    CHECK_EQ_INT(kvs_warm_docs(g_ctx, c, &seg, &w), KVS_OK);
    CHECK(w.n_cached == N_DOCS && w.n_computed == 0);
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_repair_params rp = repair(KVS_REPAIR_CACHEBLEND, 0.15f);
    kvs_generate_result pub, in;
    kvs_seg_report rep;
    kvs_reuse_params reuse = kvs_reuse_default_params();
    reuse.repair = rp;
    int st = kvs_generate_segments(g_ctx, c, &seg, &gp, &reuse, &pub);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st && !run(c, &g_lay, rp, &in, &rep)) {
        CHECK_MSG(kt_same_result(&pub, &in), "kvs_generate_segments differs from the internal request");
        CHECK_EQ_INT(pub.docs->n_moved, rep.n_moved);
        CHECK_EQ_INT(pub.docs->n_recomputed, rep.n_recomputed);
        CHECK_EQ_INT(pub.docs->n_docs_hit, N_DOCS);
        CHECK_EQ_INT(pub.docs->n_docs_computed, 0);
        CHECK_EQ_INT(pub.n_prompt, g_lay.n_tokens);
        kvs_generate_result_free(&in);
    }
    if (!st) kvs_generate_result_free(&pub);
    kvs_cache_free(c);
}

/* One doc whose KV was computed after exactly the tokens that precede it in
 * the prompt, and placed where it was computed (delta 0): nothing is
 * approximate, so every strategy gives a cold prefill's bits (memcmp). The
 * doc prefix is given as text, the system turn of the chat template, which
 * must tokenize as the prompt's own prefix. */
TEST(real_prefix_one_doc_is_exact) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n", k_sys);
    const char *docs[1] = {g_docs[0]};
    kvs_seg_input in = {1, k_sys, docs, NULL, 1, k_question, prefix};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    if (!lay.tokens) return;
    int D = lay.segs[1].start;
    CHECK_EQ_INT(lay.n_doc_prefix, D);
    CHECK_MSG(lay.n_doc_prefix == D && !memcmp(lay.doc_prefix, lay.tokens, (size_t)D * sizeof(int32_t)),
              "the text doc prefix does not tokenize as the prompt's prefix");
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result cold, r;
    kvs_seg_report rep;
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c || kvs_generate(g_ctx, lay.tokens, lay.n_tokens, &gp, &cold) != KVS_OK) goto out;
    static const kvs_repair_mode modes[] = {KVS_REPAIR_NONE, KVS_REPAIR_SELECTIVE, KVS_REPAIR_CACHEBLEND};
    for (int i = 0; i < 3; i++) {
        kvs_repair_params rp = kvs_repair_default_params(); /* cacheblend: the hybrid at the default ratio */
        rp.cacheblend_seams = 1;
        rp.mode = modes[i];
        if (run(c, &lay, rp, &r, &rep)) continue;
        CHECK_EQ_INT(rep.n_moved, lay.segs[1].end - D);
        CHECK_MSG(kt_same_result(&r, &cold), "%s: a doc after its own prefix at delta 0 differs from a cold prefill (KL %.3g)",
                  kvs_repair_mode_name(rp.mode), kl_first(&cold, &r));
        kvs_generate_result_free(&r);
    }
    /* the public API with the same doc prefix, the system segment an exact hit */
    kvs_segments seg = {1, k_sys, docs, NULL, 1, k_question, prefix};
    for (int k = 0; k < 2; k++) {
        int st = kvs_generate_segments(g_ctx, c, &seg, &gp, NULL, &r);
        CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
        if (st) break;
        CHECK_MSG(kt_same_result(&r, &cold), "public API, run %d: differs from a cold prefill", k);
        /* served as a doc hit (run 0), then as part of the exact prefix that
         * run stored (the doc is exact there: segment_gen.c exact_first_doc) */
        CHECK_MSG(r.docs->n_docs_hit == 1 || r.reuse->n_cached >= lay.segs[1].end, "run %d: docs hit %d, exact %d", k,
                  r.docs->n_docs_hit, r.reuse->n_cached);
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&cold);
out:
    kvs_cache_free(c);
    kvs_seg_layout_free(&lay);
}

/* The first document right after its own prefix (no system text: the
 * documents' prefix is the prompt's), three documents and the question,
 * query repair: the first request on an empty cache directory and the same
 * request in a "new process" (another cache opened on the directory, whose
 * scan indexes the stored entries for the exact lookup) give the same bits.
 * The second had found the first document as an exact prefix while the
 * first had moved it by 0 and repaired it with the rest: different bits
 * (the CLI's second run differed from its first; a warm changed them). */
TEST(first_request_equals_later_ones) {
    char tmpl[] = "/tmp/kvs_first_later_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return;
    const char *docs[N_DOCS] = {g_docs[0], g_docs[1], g_docs[2]};
    kvs_segments seg = {0, NULL, docs, NULL, N_DOCS, k_question, NULL};
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result r[3];
    int done = 0;
    for (int k = 0; k < 3; k++) { /* cache 0 empty, then two caches opened on what it stored */
        kvs_cache *c = kt_open_cache(g_model, dir);
        if (!c) break;
        int st = kvs_generate_segments(g_ctx, c, &seg, &gp, NULL, &r[k]);
        CHECK_MSG(st == KVS_OK, "run %d: %s", k, kvs_last_error());
        kvs_cache_free(c);
        if (st) break;
        done++;
    }
    for (int k = 1; k < done; k++) CHECK_MSG(kt_same_result(&r[k], &r[0]), "run %d differs from the first", k);
    if (done == 3) CHECK(r[1].reuse->n_cached > 0); /* the later runs did take the stored prefix */
    for (int k = 0; k < done; k++) kvs_generate_result_free(&r[k]);
    kt_remove_dir(dir);
}

/* The same request twice in one process on a cache directory, the first
 * document right after its own prefix (no system text): the second
 * request keeps every file the first wrote and hits every document. Its
 * exact lookup had met the first document's file under its key (a
 * document after its prefix is keyed as that prefix's history), read the
 * header's origin (a document) as damage and deleted the file: the next
 * process computed the document again. */
TEST(second_request_keeps_the_doc_files) {
    char tmpl[] = "/tmp/kvs_second_keeps_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (!dir) return;
    /* short documents: the first one's tokens are the tail of the exact
     * lookup's spans (less than a chunk), so their key is the document's */
    const char *docs[N_DOCS] = {"The capital of France is Paris.", "Bananas are yellow.", "Snow is white."};
    kvs_segments seg = {0, NULL, docs, NULL, N_DOCS, "Q: What is the capital of France? A:", NULL};
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result r[2];
    int files[2] = {-1, -1}, done = 0;
    kvs_cache *c = kt_open_cache(g_model, dir);
    for (int k = 0; c && k < 2; k++) {
        CHECK(kvs_utf8_check("\xff", 1) != KVS_OK); /* a message the requests must leave alone */
        int st = kvs_generate_segments(g_ctx, c, &seg, &gp, NULL, &r[k]);
        CHECK_MSG(st == KVS_OK, "run %d: %s", k, kvs_last_error());
        if (st) break;
        /* (its cache misses had left "store: no usable chunk with content key ...") */
        CHECK_MSG(strstr(kvs_last_error(), "invalid UTF-8"), "run %d changed the last error: %s", k, kvs_last_error());
        kvs_cache_flush(c, 10000);
        files[k] = count_files(dir, ".kvc");
        done++;
    }
    /* an empty cache serves nothing: the first document computed by the
     * request had been reported as cached tokens */
    if (done >= 1) CHECK_MSG(r[0].reuse->n_cached == 0, "cached tokens on an empty cache: %d", r[0].reuse->n_cached);
    if (done == 2) {
        CHECK_MSG(files[0] >= N_DOCS && files[1] == files[0], "entry files: %d after the first request, %d after the second",
                  files[0], files[1]);
        CHECK_MSG(kt_same_result(&r[1], &r[0]), "the second request differs from the first");
    }
    for (int k = 0; k < done; k++) kvs_generate_result_free(&r[k]);
    kvs_cache_free(c);
    kvs_cache *fresh = kt_open_cache(g_model, dir); /* the next process finds every document */
    kvs_generate_result n;
    if (fresh && done == 2 && kvs_generate_segments(g_ctx, fresh, &seg, &gp, NULL, &n) == KVS_OK) {
        CHECK_MSG(n.docs->n_docs_computed == 0, "a new process computed %d documents again", n.docs->n_docs_computed);
        /* the first one, held by the exact hit, counts as found (it had not, from a file) */
        CHECK_MSG(n.docs->n_docs_hit == N_DOCS, "documents found: %d of %d", n.docs->n_docs_hit, N_DOCS);
        kvs_generate_result_free(&n);
    }
    kvs_cache_free(fresh);
    kt_remove_dir(dir);
}

/* Two empty caches and the layout of the three documents and the question
 * (no system text: the first document sits right after its own prefix). */
typedef struct two_caches {
    const char *docs[N_DOCS];
    kvs_segments seg;
    kvs_seg_layout lay;
    kvs_cache *a, *b;
} two_caches;

static int two_caches_open(two_caches *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < N_DOCS; i++) t->docs[i] = g_docs[i];
    t->seg = (kvs_segments){0, NULL, t->docs, NULL, N_DOCS, k_question, NULL};
    t->a = kt_open_cache(g_model, NULL);
    t->b = kt_open_cache(g_model, NULL);
    if (t->a && t->b && kvs_seg_layout_build(g_model, &t->seg, &t->lay) == KVS_OK) return 0;
    CHECK_MSG(0, "setup: %s", kvs_last_error());
    return -1;
}

static void two_caches_close(two_caches *t) {
    kvs_seg_layout_free(&t->lay);
    kvs_cache_free(t->a);
    kvs_cache_free(t->b);
}

/* The same request after an unrelated one whose prompt is a prefix of it
 * ending inside the first document (its chunks warmed: the exact hit now
 * stops 20 tokens into that document) gives the bits of the request on an
 * empty cache. The hit had been cut back to the document's start and the
 * document moved by 0 and repaired with the others (an attack found the
 * CLI and the server answering differently after such a request). */
TEST(a_prompt_ending_inside_the_first_doc_changes_nothing) {
    two_caches t;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result ref, r;
    if (two_caches_open(&t)) goto out;
    kvs_cache *a = t.a, *b = t.b;
    const kvs_segments seg = t.seg;
    const kvs_seg_layout lay = t.lay;
    const int D = lay.segs[0].kind == KVS_SEG_DOC ? lay.segs[0].start : lay.segs[1].start;
    CHECK_MSG(kvs_generate_segments(g_ctx, a, &seg, &gp, NULL, &ref) == KVS_OK, "%s", kvs_last_error());
    kvs_warm_report wr;
    CHECK_MSG(kvs_warm(g_ctx, b, lay.tokens, D + 20, &wr) == KVS_OK, "%s", kvs_last_error());
    if (kvs_generate_segments(g_ctx, b, &seg, &gp, NULL, &r) == KVS_OK) {
        CHECK_MSG(r.reuse && r.reuse->n_cached >= D + 20, "the exact hit: %d tokens", r.reuse ? r.reuse->n_cached : -1);
        CHECK_MSG(kt_same_result(&r, &ref), "after a prompt ending inside the first document: other bits");
        kvs_generate_result_free(&r);
    } else {
        CHECK_MSG(0, "%s", kvs_last_error());
    }
    kvs_generate_result_free(&ref);
out:
    two_caches_close(&t);
}

/* The exact KV of the whole layout in the cache (another request stored it:
 * a `full` one, or a plain prompt of the same text) changes nothing for a
 * request that moves its documents: it had taken the hit whole, so that the
 * same request answered otherwise after it (a determinism attack on the
 * server). The full strategy takes it, with the bits it computes anyway. */
TEST(an_exact_prefix_over_the_documents_changes_nothing) {
    two_caches t;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_generate_result ref, r, full_ref;
    if (two_caches_open(&t)) goto out;
    kvs_cache *a = t.a, *b = t.b;
    const kvs_segments seg = t.seg;
    const kvs_seg_layout lay = t.lay;
    CHECK_MSG(kvs_generate_segments(g_ctx, a, &seg, &gp, NULL, &ref) == KVS_OK, "%s", kvs_last_error());
    kvs_reuse_params full = kvs_reuse_default_params();
    full.repair.mode = KVS_REPAIR_FULL;
    CHECK_MSG(kvs_generate_segments(g_ctx, a, &seg, &gp, &full, &full_ref) == KVS_OK, "%s", kvs_last_error());
    kvs_warm_report wr;
    CHECK_MSG(kvs_warm(g_ctx, b, lay.tokens, lay.n_tokens, &wr) == KVS_OK, "%s", kvs_last_error());
    kvs_cache *both[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (kvs_generate_segments(g_ctx, both[i], &seg, &gp, NULL, &r) != KVS_OK) {
            CHECK_MSG(0, "%s", kvs_last_error());
            continue;
        }
        CHECK_MSG(kt_same_result(&r, &ref), "after the exact KV of the whole layout (%s): other bits",
                  i ? "a plain warm" : "a full request");
        kvs_generate_result_free(&r);
    }
    if (kvs_generate_segments(g_ctx, b, &seg, &gp, &full, &r) == KVS_OK) {
        CHECK_MSG(r.reuse && r.reuse->n_cached >= lay.n_tokens - 1, "full takes the hit: %d of %d",
                  r.reuse ? r.reuse->n_cached : -1, lay.n_tokens);
        CHECK_MSG(kt_same_result(&r, &full_ref), "full over an exact hit: other bits than computed");
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&ref);
    kvs_generate_result_free(&full_ref);
out:
    two_caches_close(&t);
}

/* The stop poll reaches the repair: counted over a whole request (documents
 * cached), the poll before the question's prefill and its N_GEN - 1 decode
 * steps is the repair's last layer; stopping there names the repair, and
 * the next run on the context gives the reference bits. */
TEST(stop_poll_reaches_the_repair) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_generate_result ref, r;
    kvs_seg_report rep;
    kt_stopper st = {0, 0};
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.15f), &ref, &rep)) goto out;
    kvs_context_set_should_stop(g_ctx, kt_stop_at_poll, &st);
    if (!run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.15f), &r, &rep)) kvs_generate_result_free(&r);
    const int total = st.polls;
    CHECK_MSG(total > N_GEN + kvs_model_hparams(g_model)->n_layer, "%d polls", total);
    st.polls = 0;
    st.stop_at = total - N_GEN;
    kvs_generate_params gp = kt_greedy(N_GEN);
    kvs_seg_options o = kvs_seg_default_options();
    o.use_exact = 0;
    o.store_prefix = 0;
    kvs_repair_params rp = repair(KVS_REPAIR_QUERY, 0.15f);
    CHECK_EQ_INT(kvs_seg_generate(g_ctx, c, &g_lay, &gp, &rp, &o, &r, &rep), KVS_ERR_INTERRUPTED);
    CHECK_MSG(strstr(kvs_last_error(), "a repair stopped") != NULL, "%s", kvs_last_error());
    st.stop_at = 0;
    if (!run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.15f), &r, &rep)) {
        CHECK(kt_same_result(&r, &ref));
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&ref);
out:
    kvs_context_set_should_stop(g_ctx, NULL, NULL);
    kvs_cache_free(c);
}

static kvs_repair_params narrowing(float from, float ratio, int layers, int seams) {
    kvs_repair_params rp = repair(KVS_REPAIR_CACHEBLEND, ratio);
    rp.narrow_from = from;
    rp.narrow_layers = layers;
    rp.cacheblend_seams = seams;
    return rp;
}

TEST(narrowing_invariants) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    int n_moved = doc_tokens(&g_lay);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    /* 1 -> 1: every token in every layer, a cold prefill's bits */
    if (!run(c, &g_lay, narrowing(1.0f, 1.0f, 4, 0), &a, &ra)) {
        CHECK_MSG(kt_same_result(&a, &g_full), "narrowing 1 -> 1 differs from full");
        CHECK_EQ_INT(ra.n_recomputed, n_moved);
        CHECK(ra.n_token_layers == (long)n_moved * kvs_model_hparams(g_model)->n_layer);
        kvs_generate_result_free(&a);
    }
    /* r -> r == no narrowing, plain and with the seams */
    for (int seams = 0; seams < 2; seams++) {
        float r = seams ? 0.10f : 0.15f;
        if (run(c, &g_lay, narrowing(0, r, 4, seams), &a, &ra)) continue;
        if (!run(c, &g_lay, narrowing(r, r, 4, seams), &b, &rb)) {
            CHECK_MSG(kt_same_result(&a, &b), "narrowing %.2f -> %.2f (seams %d) differs from no narrowing", (double)r,
                      (double)r, seams);
            CHECK_EQ_INT(rb.n_recomputed, ra.n_recomputed);
            /* the same rows, but the narrowing layers' K/V counted for them too */
            CHECK(rb.n_token_layers == ra.n_token_layers);
            kvs_generate_result_free(&b);
        }
        kvs_generate_result_free(&a);
    }
    /* 0.5 -> 0.1: the final set has the ratio's size; closer to full than none */
    kvs_generate_result none;
    if (!run(c, &g_lay, narrowing(0.5f, 0.1f, 4, 0), &a, &ra)) {
        CHECK_EQ_INT(ra.n_recomputed, (int)(0.1 * n_moved + 0.5));
        CHECK_EQ_INT(ra.n_check, n_moved);
        if (!run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &none, &rb)) {
            printf("  narrowing 0.5 -> 0.1: KL vs full %.5f (none %.5f)\n", kl_first(&g_full, &a),
                   kl_first(&g_full, &none));
            CHECK(kl_first(&g_full, &a) < kl_first(&g_full, &none));
            kvs_generate_result_free(&none);
        }
        kvs_generate_result_free(&a);
    }
    kvs_cache_free(c);
}

/* The selections of one narrowing, as the trace reports them. */
#define MAX_TRACE 16
typedef struct trace_log {
    int n, layer[MAX_TRACE], size[MAX_TRACE];
    int32_t *pos[MAX_TRACE];
} trace_log;

static void on_select(void *ud, int layer, const kvs_rowset *rs) {
    trace_log *t = ud;
    if (t->n == MAX_TRACE) return;
    t->layer[t->n] = layer;
    t->size[t->n] = rs->n;
    t->pos[t->n] = malloc((rs->n > 0 ? (size_t)rs->n : 1) * sizeof(int32_t));
    memcpy(t->pos[t->n], rs->pos, (size_t)rs->n * sizeof(int32_t));
    t->n++;
}

/* a (na, ascending) is a subset of b (nb, ascending) */
static int subset(const int32_t *a, int na, const int32_t *b, int nb) {
    int j = 0;
    for (int i = 0; i < na; i++) {
        while (j < nb && b[j] < a[i]) j++;
        if (j == nb || b[j] != a[i]) return 0;
    }
    return 1;
}

static int contains(const int32_t *a, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return 1;
    return 0;
}

/* The repair run on the moved KV of a `none` request, traced: the set at
 * the check layer, then one per narrowing layer, each a subset of the one
 * before, shrinking to the ratio; the seams' tokens in every set. */
TEST(narrowing_sets_shrink) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    const int n_layer = kvs_model_hparams(g_model)->n_layer, n_moved = doc_tokens(&g_lay);
    kvs_seg docs[N_DOCS];
    int nd = 0;
    for (int i = 0; i < g_lay.n_segs && nd < N_DOCS; i++)
        if (g_lay.segs[i].kind == KVS_SEG_DOC) docs[nd++] = g_lay.segs[i];
    kvs_repair_region rg = {g_lay.tokens, docs[0].start, docs[nd - 1].end, docs, nd, g_lay.n_tokens};
    for (int seams = 0; seams < 2; seams++) {
        kvs_generate_result r;
        kvs_seg_report sr;
        if (run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &r, &sr)) break; /* the moved KV, in the context */
        kvs_generate_result_free(&r);
        kvs_repair_params rp = narrowing(0.5f, 0.1f, 4, seams);
        trace_log t;
        memset(&t, 0, sizeof t);
        kvs_repair_report rep;
        CHECK_EQ_INT(kvs_repair_run_traced(g_ctx, &rg, &rp, on_select, &t, &rep), KVS_OK);
        CHECK_EQ_INT(t.n, 5);
        int want0 = (int)(0.5 * n_moved + 0.5), want = (int)(0.1 * n_moved + 0.5);
        if (t.n == 5) {
            long tl = (long)n_moved * (rp.check_layer + 1);
            for (int k = 0; k < t.n; k++) {
                CHECK_EQ_INT(t.layer[k], rp.check_layer + k);
                if (k > 0) {
                    CHECK_MSG(subset(t.pos[k], t.size[k], t.pos[k - 1], t.size[k - 1]),
                              "seams %d: the set at layer %d is not a subset of the one before", seams, t.layer[k]);
                    CHECK(t.size[k] <= t.size[k - 1]);
                    tl += t.size[k - 1];
                }
                for (int i = 0; seams && i < nd; i++)
                    for (int p = docs[i].end - rp.overlap; p < docs[i].end; p++)
                        CHECK_MSG(contains(t.pos[k], t.size[k], p), "seam token %d dropped at layer %d", p,
                                  t.layer[k]);
            }
            tl += (long)t.size[4] * (n_layer - rp.check_layer - 4 - 1);
            CHECK_EQ_INT(rep.n_recomputed, t.size[4]);
            CHECK(rep.n_token_layers == tl);
            if (!seams) {
                CHECK_EQ_INT(t.size[0], want0);
                CHECK_EQ_INT(t.size[4], want);
            } else {
                CHECK(t.size[0] >= want0 && t.size[0] <= want0 + nd * rp.overlap);
                CHECK(t.size[4] >= want && t.size[4] <= want + nd * rp.overlap);
            }
            printf("  narrowing 0.5 -> 0.1 (seams %d): sets of %d %d %d %d %d tokens, %ld token-layers of %ld\n",
                   seams, t.size[0], t.size[1], t.size[2], t.size[3], t.size[4], rep.n_token_layers,
                   (long)n_moved * n_layer);
        }
        for (int k = 0; k < t.n; k++) free(t.pos[k]);
    }
    kvs_cache_free(c);
}

TEST(narrowing_params) {
    const int L = kvs_model_hparams(g_model)->n_layer;
    kvs_repair_params p = narrowing(0.5f, 0.1f, 4, 0);
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_OK);
    CHECK(fabs(kvs_blend_share(&p, 0, L) - 0.5) < 1e-6);
    CHECK(fabs(kvs_blend_share(&p, 4, L) - 0.1) < 1e-6);
    CHECK(fabs(kvs_blend_share(&p, 2, L) - sqrt(0.5 * 0.1)) < 1e-6); /* geometric */
    for (int j = 1; j <= 4; j++) CHECK(kvs_blend_share(&p, j, L) < kvs_blend_share(&p, j - 1, L));
    CHECK_EQ_INT(kvs_blend_narrow_len(&p, L), 4);
    p.check_layer = L - 2; /* room for one narrowing layer */
    CHECK_EQ_INT(kvs_blend_narrow_len(&p, L), 1);
    p = narrowing(0, 0.1f, 4, 0);
    CHECK_EQ_INT(kvs_blend_narrow_len(&p, L), 0);
    CHECK(fabs(kvs_blend_share(&p, 0, L) - 0.1) < 1e-6);
    p = narrowing(0.05f, 0.1f, 4, 0); /* below the ratio */
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_ERR_INVALID_ARG);
    p = narrowing(1.5f, 0.1f, 4, 0);
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_ERR_INVALID_ARG);
    p = narrowing(0.5f, 0.1f, 0, 0);
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_ERR_INVALID_ARG);
    kvs_repair_params d = kvs_repair_default_params();
    CHECK(d.narrow_from == 0.0f && d.narrow_layers == 4);
}

static int setup(void) {
    if (kt_docs_setup(1000, N_DOCS, g_docs, &g_model, &g_ctx)) return -1;
    const char *fwd[N_DOCS] = {g_docs[0], g_docs[1], g_docs[2]}, *rev[N_DOCS] = {g_docs[2], g_docs[1], g_docs[0]};
    kvs_seg_input in = {1, KT_DOCS_SYSTEM, fwd, NULL, N_DOCS, KT_DOCS_QUESTION, NULL};
    if (kvs_seg_layout_build(g_model, &in, &g_lay) != KVS_OK) return -1;
    in.docs = rev;
    if (kvs_seg_layout_build(g_model, &in, &g_lay_rev) != KVS_OK) return -1;
    kvs_generate_params gp = kt_greedy(N_GEN);
    if (kvs_generate(g_ctx, g_lay.tokens, g_lay.n_tokens, &gp, &g_full) != KVS_OK) return -1;
    printf("  prompt %d tokens, %d in docs\n", g_lay.n_tokens, doc_tokens(&g_lay));
    return 0;
}

/* Query-guided selection: ratio 0 is none, ratio 1 is full (bit-identical),
 * a ratio picks that many tokens, the same ones whatever the thread count,
 * and the question-guided set is closer to full than none. */
TEST(query_invariants) {
    kvs_cache *c = kt_open_cache(g_model, NULL);
    kvs_context *one = NULL;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_threads = 1;
    if (!c || kvs_context_new(g_model, cp, &one) != KVS_OK) goto out;
    const int n_moved = doc_tokens(&g_lay);
    kvs_generate_result none, q0, q1, qa, qb;
    kvs_seg_report rep;
    if (run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &none, &rep)) goto out;
    if (!run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.0f), &q0, &rep)) {
        CHECK_MSG(kt_same_result(&q0, &none), "query ratio 0 differs from none");
        CHECK_EQ_INT(rep.n_recomputed, 0);
        kvs_generate_result_free(&q0);
    }
    if (!run(c, &g_lay, repair(KVS_REPAIR_QUERY, 1.0f), &q1, &rep)) {
        CHECK_MSG(kt_same_result(&q1, &g_full), "query ratio 1 differs from full");
        CHECK_EQ_INT(rep.n_recomputed, n_moved);
        kvs_generate_result_free(&q1);
    }
    if (!run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.3f), &qa, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, (int)(0.3 * n_moved + 0.5));
        CHECK(rep.n_check > 0); /* the question rows ran the scoring pass */
        kvs_generate_params gp = kt_greedy(N_GEN);
        kvs_seg_options o = kvs_seg_default_options();
        o.use_exact = 0;
        o.store_prefix = 0;
        kvs_repair_params rp = repair(KVS_REPAIR_QUERY, 0.3f);
        int st = kvs_seg_generate(one, c, &g_lay, &gp, &rp, &o, &qb, &rep);
        CHECK_MSG(st == KVS_OK, "query on 1 thread: %s", kvs_last_error());
        if (st == KVS_OK) {
            CHECK_MSG(kt_same_result(&qa, &qb), "query 0.3 gives other bits on 1 thread");
            kvs_generate_result_free(&qb);
        }
        double kl_q = kl_first(&g_full, &qa), kl_n = kl_first(&g_full, &none);
        printf("  query 0.30: first-token KL vs full %.5f (none %.5f)\n", kl_q, kl_n);
        CHECK_MSG(kl_q < kl_n, "query 0.3 (KL %.5f) is not closer to full than none (KL %.5f)", kl_q, kl_n);
        kvs_generate_result_free(&qa);
    }
    kvs_generate_result_free(&none);
out:
    kvs_context_free(one);
    kvs_cache_free(c);
}

/* query + seams: selective's tokens beyond the ratio, like cacheblend_seams;
 * nothing at ratio 0 (the bits of none), every token at ratio 1 (the bits
 * of full); with overlap 0 the seams add nothing (the bits of plain query);
 * the flag is validated. */
TEST(query_seams) {
    const int L = kvs_model_hparams(g_model)->n_layer;
    kvs_repair_params p = repair(KVS_REPAIR_QUERY, 0.2f);
    CHECK_EQ_INT(kvs_repair_default_params().query_seams, 0);
    p.query_seams = 2;
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_ERR_INVALID_ARG);
    p.query_seams = 1;
    p.overlap = -1;
    CHECK_EQ_INT(kvs_repair_params_check(&p, L), KVS_ERR_INVALID_ARG);
    kvs_cache *c = kt_open_cache(g_model, NULL);
    if (!c) return;
    const int n_moved = doc_tokens(&g_lay), want = (int)(0.2 * n_moved + 0.5);
    int sel = 0;
    for (int i = 0; i < g_lay.n_segs; i++)
        if (g_lay.segs[i].kind == KVS_SEG_DOC) {
            int len = g_lay.segs[i].end - g_lay.segs[i].start;
            sel += len < 16 ? len : 16;
        }
    kvs_generate_result none, r, plain;
    kvs_seg_report rep;
    if (run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &none, &rep)) goto out;
    kvs_repair_params sp = repair(KVS_REPAIR_QUERY, 0.0f);
    sp.query_seams = 1;
    if (!run(c, &g_lay, sp, &r, &rep)) {
        CHECK_MSG(kt_same_result(&r, &none), "query+seams ratio 0 differs from none");
        kvs_generate_result_free(&r);
    }
    sp.recompute_ratio = 1.0f;
    if (!run(c, &g_lay, sp, &r, &rep)) {
        CHECK_MSG(kt_same_result(&r, &g_full), "query+seams ratio 1 differs from full");
        CHECK_EQ_INT(rep.n_recomputed, n_moved);
        kvs_generate_result_free(&r);
    }
    sp.recompute_ratio = 0.2f;
    if (!run(c, &g_lay, sp, &r, &rep)) {
        CHECK_MSG(rep.n_recomputed > want && rep.n_recomputed <= want + sel,
                  "query+seams 0.2 recomputed %d (ratio %d, seams %d)", rep.n_recomputed, want, sel);
        kvs_generate_result_free(&r);
    }
    sp.overlap = 0;
    if (!run(c, &g_lay, sp, &r, &rep) && !run(c, &g_lay, repair(KVS_REPAIR_QUERY, 0.2f), &plain, &rep)) {
        CHECK_MSG(kt_same_result(&r, &plain), "query+seams with overlap 0 differs from query");
        kvs_generate_result_free(&plain);
        kvs_generate_result_free(&r);
    }
    kvs_generate_result_free(&none);
out:
    kvs_cache_free(c);
}

int main(void) {
    if (setup()) return kt_setup_failed(kvs_last_error());
    RUN(full_equals_cold_prefill);
    RUN(cold_docs_equal_cached_docs);
    RUN(invariants_ratio_one_and_zero);
    RUN(recomputed_counts);
    RUN(cacheblend_closer_than_none);
    RUN(shuffled_docs_hit);
    RUN(exact_prefix_hit_on_system_segment);
    RUN(exact_prefix_hit_covering_docs);
    RUN(docs_persist_in_cache_dir);
    RUN(second_request_keeps_the_doc_files);
    RUN(public_api);
    RUN(real_prefix_one_doc_is_exact);
    RUN(first_request_equals_later_ones);
    RUN(a_prompt_ending_inside_the_first_doc_changes_nothing);
    RUN(an_exact_prefix_over_the_documents_changes_nothing);
    RUN(stop_poll_reaches_the_repair);
    RUN(narrowing_params);
    RUN(narrowing_invariants);
    RUN(narrowing_sets_shrink);
    RUN(query_invariants);
    RUN(query_seams);
    kvs_generate_result_free(&g_full);
    kvs_seg_layout_free(&g_lay);
    kvs_seg_layout_free(&g_lay_rev);
    for (int i = 0; i < N_DOCS; i++) free(g_docs[i]);
    kvs_context_free(g_ctx);
    kvs_model_free(g_model);
    return kt_summary();
}
