/*
 * Non-prefix reuse on the real model: moved doc chunks and the repair
 * strategies (src/reuse/repair.h, segment_gen.h).
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
 * Quality (first-token KL vs full): cacheblend at 0.5 is closer than none.
 * The context's batch is 128 rows, so the layer-major recompute runs in
 * several batches per layer. KVSTITCH_TEST_QUICK=1 uses shorter docs.
 */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "engine/context.h"
#include "harness.h"
#include "kvstitch.h"
#include "reuse/cache.h"
#include "reuse/segment_gen.h"

#define N_DOCS 3
#define N_GEN 4

static kvs_model *g_model;
static kvs_context *g_ctx;
static kvs_seg_layout g_lay, g_lay_rev;
static kvs_generate_result g_full; /* cold prefill of g_lay.tokens */
static char *g_docs[N_DOCS];

/* The ctx-th passage of MuSiQue item `item`, cut to at most max bytes at a
 * space (a crude JSON scan, enough for this file's "text" strings). */
static char *musique_passage(int item, int ctx, size_t max) {
    char path[512];
    snprintf(path, sizeof path, "%s/data/musique_dev.json", kt_shared_dir());
    char *all = kt_read_file(path, NULL);
    if (!all) return NULL;
    const char *p = all;
    int want = item * 10 + ctx;
    for (int i = 0; p && i <= want; i++) {
        p = strstr(p, "\"text\": \"");
        if (p && i < want) p += 9;
    }
    char *out = NULL;
    if (p) {
        p += 9;
        const char *e = p;
        while (*e && !(*e == '"' && e[-1] != '\\')) e++;
        out = malloc((size_t)(e - p) + 1);
        size_t k = 0;
        for (const char *c = p; c < e && k < max; c++) {
            if (*c == '\\' && c + 1 < e) { c++; out[k++] = *c == 'n' ? '\n' : *c; continue; }
            out[k++] = *c;
        }
        while (k > 0 && out[k - 1] != ' ') k--;
        out[k] = 0;
    }
    free(all);
    return out;
}

static kvs_generate_params greedy(void) {
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = N_GEN;
    gp.sampling.temperature = 0;
    return gp;
}

static kvs_cache *open_cache(const char *dir) {
    kvs_cache_params cp = kvs_cache_default_params();
    cp.cache_dir = dir;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(g_model, cp, &c);
    CHECK_MSG(st == KVS_OK, "cache open: %s", kvs_last_error());
    return c;
}

static int same(const kvs_generate_result *a, const kvs_generate_result *b) {
    return a->n_vocab == b->n_vocab && !memcmp(a->first_logits, b->first_logits, (size_t)a->n_vocab * sizeof(float)) &&
           a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
}

/* KL(p_ref || p) of the first-token distributions. */
static double kl_first(const kvs_generate_result *ref, const kvs_generate_result *r) {
    int n = ref->n_vocab;
    double mr = -INFINITY, m = -INFINITY, sr = 0, s = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        if (ref->first_logits[i] > mr) mr = ref->first_logits[i];
        if (r->first_logits[i] > m) m = r->first_logits[i];
    }
    for (int i = 0; i < n; i++) {
        sr += exp(ref->first_logits[i] - mr);
        s += exp(r->first_logits[i] - m);
    }
    double lr = mr + log(sr), l = m + log(s);
    for (int i = 0; i < n; i++) {
        double lp = ref->first_logits[i] - lr, lq = r->first_logits[i] - l;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

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
    kvs_generate_params gp = greedy();
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
    kvs_cache *c = open_cache(NULL);
    kvs_generate_result r;
    kvs_seg_report rep;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_FULL, 0), &r, &rep)) goto out;
    CHECK_MSG(same(&r, &g_full), "full differs from a cold prefill");
    CHECK_EQ_INT(rep.n_moved, 0);
    CHECK_EQ_INT(rep.n_recomputed, doc_tokens(&g_lay));
    CHECK_EQ_INT(rep.n_docs, 0); /* full reads no doc chunk */
    kvs_generate_result_free(&r);
out:
    kvs_cache_free(c);
}

TEST(cold_docs_equal_cached_docs) {
    kvs_cache *c = open_cache(NULL);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &a, &ra)) goto out;
    CHECK_EQ_INT(ra.n_docs, N_DOCS);
    CHECK_EQ_INT(ra.n_docs_computed, N_DOCS);
    CHECK_EQ_INT(ra.n_docs_hit, 0);
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.15f), &b, &rb)) {
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_EQ_INT(rb.n_docs_computed, 0);
        CHECK_MSG(same(&a, &b), "docs from the cache give other bits than docs computed on the spot");
        CHECK_MSG(rb.assemble_ms + rb.repair_ms < ra.assemble_ms + ra.repair_ms,
                  "cached docs were not faster: %.1f vs %.1f ms", rb.assemble_ms + rb.repair_ms,
                  ra.assemble_ms + ra.repair_ms);
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

TEST(invariants_ratio_one_and_zero) {
    kvs_cache *c = open_cache(NULL);
    kvs_generate_result none, r0, r1, k1;
    kvs_seg_report rep;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_NONE, 0), &none, &rep)) goto out;
    CHECK_EQ_INT(rep.n_recomputed, 0);
    CHECK_EQ_INT(rep.n_moved, doc_tokens(&g_lay));
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 0.0f), &r0, &rep)) {
        CHECK_MSG(same(&r0, &none), "cacheblend ratio 0 differs from none");
        CHECK_EQ_INT(rep.n_recomputed, 0);
        kvs_generate_result_free(&r0);
    }
    if (!run(c, &g_lay, repair(KVS_REPAIR_CACHEBLEND, 1.0f), &r1, &rep)) {
        CHECK_MSG(same(&r1, &g_full), "cacheblend ratio 1 differs from full");
        CHECK_EQ_INT(rep.n_recomputed, doc_tokens(&g_lay));
        CHECK_EQ_INT(rep.n_check, doc_tokens(&g_lay));
        kvs_generate_result_free(&r1);
    }
    kvs_repair_params kp = repair(KVS_REPAIR_CACHEBLEND, 1.0f);
    kp.deviation = KVS_DEVIATION_K_COS;
    kp.check_layer = 2;
    if (!run(c, &g_lay, kp, &k1, &rep)) {
        CHECK_MSG(same(&k1, &g_full), "cacheblend (k-cos, check layer 2) ratio 1 differs from full");
        kvs_generate_result_free(&k1);
    }
    CHECK_MSG(!same(&none, &g_full), "none equals full: the test prompt does not exercise the repair");
    kvs_generate_result_free(&none);
out:
    kvs_cache_free(c);
}

TEST(recomputed_counts) {
    kvs_cache *c = open_cache(NULL);
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
    /* The defaults: the hybrid at 0.10; ratio 0 is none with them too. */
    kvs_repair_params dp = kvs_repair_default_params();
    CHECK(dp.mode == KVS_REPAIR_CACHEBLEND && dp.cacheblend_seams == 1);
    if (!run(c, &g_lay, dp, &r, &rep)) {
        int want = (int)(dp.recompute_ratio * n_moved + 0.5);
        CHECK(rep.n_recomputed > want && rep.n_recomputed <= want + sel);
        kvs_generate_result_free(&r);
    }
    dp.recompute_ratio = 0;
    if (!run(c, &g_lay, dp, &r, &rep)) {
        CHECK_EQ_INT(rep.n_recomputed, 0);
        CHECK_EQ_INT(rep.n_check, 0);
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
    kvs_cache *c = open_cache(NULL);
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
    kvs_cache *c = open_cache(NULL);
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
    kvs_cache *c = open_cache(NULL);
    if (!c) return;
    kvs_generate_params gp = greedy();
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
        CHECK_EQ_INT(b.n_cached, rb.n_exact);
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_MSG(same(&a, &b), "an exact hit on the system segment changed the output");
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
}

/* An exact hit that covers the system segment and the first docs (the
 * whole prompt was stored by a `full` request), and ends inside the third
 * doc: the covered docs are exact (not moved), the hit is cut back to the
 * start of the third doc, which is moved. ratio 1 still gives the bits of a
 * cold prefill. */
TEST(exact_prefix_hit_covering_docs) {
    kvs_cache *c = open_cache(NULL);
    if (!c) return;
    kvs_generate_params gp = greedy();
    kvs_repair_params full = repair(KVS_REPAIR_FULL, 0), one = repair(KVS_REPAIR_CACHEBLEND, 1.0f);
    kvs_generate_result a, b, cold;
    kvs_seg_report ra, rb;
    int st = kvs_seg_generate(g_ctx, c, &g_lay, &gp, &full, NULL, &a, &ra);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) goto out;
    CHECK(same(&a, &g_full));
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
        CHECK_EQ_INT(rb.n_exact, lay.segs[3].start);
        CHECK_EQ_INT(rb.n_moved, lay.segs[3].end - lay.segs[3].start);
        CHECK_EQ_INT(rb.n_docs, 1);
        if (kvs_generate(g_ctx, lay.tokens, lay.n_tokens, &gp, &cold) == KVS_OK) {
            CHECK_MSG(same(&b, &cold), "exact docs + moved doc at ratio 1 differ from a cold prefill");
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
    kvs_cache *c = open_cache(dir);
    kvs_generate_result a, b;
    kvs_seg_report ra, rb;
    if (!c || run(c, &g_lay, repair(KVS_REPAIR_SELECTIVE, 0), &a, &ra)) goto out;
    kvs_cache_free(c);
    c = open_cache(dir); /* a fresh store: the doc chunks come from their files */
    if (c && !run(c, &g_lay, repair(KVS_REPAIR_SELECTIVE, 0), &b, &rb)) {
        CHECK_EQ_INT(rb.n_docs_hit, N_DOCS);
        CHECK_MSG(same(&a, &b), "docs read from the cache directory give other bits");
        kvs_generate_result_free(&b);
    }
    kvs_generate_result_free(&a);
out:
    kvs_cache_free(c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "  cannot remove %s\n", dir);
}

/* The public API: kvs_warm_docs, then kvs_generate_segments == the
 * internal request on the same layout. */
TEST(public_api) {
    kvs_cache *c = open_cache(NULL);
    if (!c) return;
    const char *fwd[N_DOCS] = {g_docs[0], g_docs[1], g_docs[2]};
    kvs_segments seg = {1, "Answer the question from the passages, in a few words.", fwd, NULL, N_DOCS,
                        "\n\nQuestion: Where was the author of Hannibal and Scipio educated?", NULL};
    kvs_warm_docs_report w;
    CHECK_EQ_INT(kvs_warm_docs(g_ctx, c, &seg, &w), KVS_OK);
    CHECK(w.n_docs == N_DOCS && w.n_computed == N_DOCS && w.n_cached == 0 && w.n_tokens == doc_tokens(&g_lay));
    CHECK_EQ_INT(kvs_warm_docs(g_ctx, c, &seg, &w), KVS_OK);
    CHECK(w.n_cached == N_DOCS && w.n_computed == 0);
    kvs_generate_params gp = greedy();
    kvs_repair_params rp = repair(KVS_REPAIR_CACHEBLEND, 0.15f);
    kvs_generate_result pub, in;
    kvs_seg_report rep;
    int st = kvs_generate_segments(g_ctx, c, &seg, &gp, &rp, &pub);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st && !run(c, &g_lay, rp, &in, &rep)) {
        CHECK_MSG(same(&pub, &in), "kvs_generate_segments differs from the internal request");
        CHECK_EQ_INT(pub.n_moved, rep.n_moved);
        CHECK_EQ_INT(pub.n_recomputed, rep.n_recomputed);
        CHECK_EQ_INT(pub.n_docs_hit, N_DOCS);
        CHECK_EQ_INT(pub.n_docs_computed, 0);
        CHECK_EQ_INT(pub.n_prompt, g_lay.n_tokens);
        kvs_generate_result_free(&in);
    }
    if (!st) kvs_generate_result_free(&pub);
    kvs_cache_free(c);
}

static int setup(void) {
    const char *mp = kt_model_path();
    if (!mp) return -1;
    if (kvs_model_load(mp, kvs_model_default_params(), &g_model) != KVS_OK) {
        fprintf(stderr, "  %s: %s\n", mp, kvs_last_error());
        return -1;
    }
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 2048;
    cp.n_batch = 128;
    if (kvs_context_new(g_model, cp, &g_ctx) != KVS_OK) return -1;
    /* KVSTITCH_TEST_QUICK (sanitizer runs): shorter docs */
    const char *quick = getenv("KVSTITCH_TEST_QUICK");
    size_t doc_bytes = quick && *quick && strcmp(quick, "0") ? 400 : 1000;
    for (int i = 0; i < N_DOCS; i++)
        if (!(g_docs[i] = musique_passage(0, i, doc_bytes))) return -1;
    const char *fwd[N_DOCS] = {g_docs[0], g_docs[1], g_docs[2]}, *rev[N_DOCS] = {g_docs[2], g_docs[1], g_docs[0]};
    kvs_seg_input in = {1, "Answer the question from the passages, in a few words.", fwd, NULL, N_DOCS,
                        "\n\nQuestion: Where was the author of Hannibal and Scipio educated?", NULL};
    if (kvs_seg_layout_build(g_model, &in, &g_lay) != KVS_OK) return -1;
    in.docs = rev;
    if (kvs_seg_layout_build(g_model, &in, &g_lay_rev) != KVS_OK) return -1;
    kvs_generate_params gp = greedy();
    if (kvs_generate(g_ctx, g_lay.tokens, g_lay.n_tokens, &gp, &g_full) != KVS_OK) return -1;
    printf("  prompt %d tokens, %d in docs\n", g_lay.n_tokens, doc_tokens(&g_lay));
    return 0;
}

int main(void) {
    if (setup()) {
        fprintf(stderr, "  setup failed: %s\n", kvs_last_error());
        printf("FAIL setup\n");
        return 1;
    }
    RUN(full_equals_cold_prefill);
    RUN(cold_docs_equal_cached_docs);
    RUN(invariants_ratio_one_and_zero);
    RUN(recomputed_counts);
    RUN(cacheblend_closer_than_none);
    RUN(shuffled_docs_hit);
    RUN(exact_prefix_hit_on_system_segment);
    RUN(exact_prefix_hit_covering_docs);
    RUN(docs_persist_in_cache_dir);
    RUN(public_api);
    kvs_generate_result_free(&g_full);
    kvs_seg_layout_free(&g_lay);
    kvs_seg_layout_free(&g_lay_rev);
    for (int i = 0; i < N_DOCS; i++) free(g_docs[i]);
    kvs_context_free(g_ctx);
    kvs_model_free(g_model);
    return kt_summary();
}
