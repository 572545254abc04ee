/*
 * Moving cached keys by a position delta (src/rag/move.h).
 *
 * Tolerances (stated per element x of a rotated pair (x_a, x_b)):
 *   round trip +d then -d   f32: |x' - x| <= 2^-22 |(x_a, x_b)|   (two roundings to float)
 *                           f16: |x' - x| <= 2^-10 |(x_a, x_b)|   (two roundings to half)
 *   rope(p) moved by d vs rope(p + d) computed directly, f32: <= 2^-22 |pair|
 * On the real model: a doc's chunk computed at position p and moved to
 * p + d, against the same doc computed at p + d in a prompt:
 *   layer 0 (context-free): V bit-identical; K within 2^-9 |pair| (f16)
 *   every layer, K cosine(moved, direct) >= 0.999 for the first doc token
 *   and >= 0.99 for every doc token ("direct" = the same doc prefix + doc
 *   run at virtual positions shifted by d: forward_shifted)
 */
#include <math.h>
#include <stdint.h>

#include "engine/context.h"
#include "harness.h"
#include "test_musique.h"
#include "kernels/kernels.h"
#include "kvstitch.h"
#include "cache/cache.h"
#include "rag/doc_cache.h"
#include "rag/move.h"
#include "rag/segments.h"

#define HD 64
#define NT 37

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 8.0 - 4.0);
}

/* Max over elements of |a - b| / |pair of ref|, pairs as the RoPE config pairs them. */
static double max_rel_pair_err(const kvs_rope_cfg *rc, const float *a, const float *ref, int n_tok) {
    double worst = 0.0;
    int half = rc->rope_dim / 2;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < HD; i++) {
            const float *r = ref + (size_t)t * HD;
            double norm;
            if (i < rc->rope_dim) {
                int pi = i % half, ia, ib;
                if (rc->neox) { ia = pi; ib = pi + half; }
                else { ia = (i / 2) * 2; ib = ia + 1; }
                norm = sqrt((double)r[ia] * r[ia] + (double)r[ib] * r[ib]);
            } else {
                norm = fabs(r[i]);
            }
            double e = fabs((double)a[(size_t)t * HD + i] - r[i]);
            double rel = norm > 0 ? e / norm : e;
            if (rel > worst) worst = rel;
        }
    return worst;
}

static void roundtrip(kvs_kv_type type, int neox, int rope_dim) {
    kvs_rope_cfg rc = {HD, rope_dim, neox, 100000.0f, 1.0f, NULL};
    static float src[NT * HD], back[NT * HD], orig[NT * HD];
    static uint16_t h_src[NT * HD], h_mid[NT * HD], h_back[NT * HD];
    static const int32_t deltas[] = {1, 7, 100, 4093, -3, -2500};
    for (int i = 0; i < NT * HD; i++) src[i] = frand();
    for (size_t di = 0; di < sizeof deltas / sizeof deltas[0]; di++) {
        int32_t d = deltas[di];
        double err;
        if (type == KVS_KV_F32) {
            static float mid[NT * HD];
            kvs_move_k_run(&rc, type, src, mid, NT, d);
            kvs_move_k_run(&rc, type, mid, back, NT, -d);
            err = max_rel_pair_err(&rc, back, src, NT);
            CHECK_MSG(err <= ldexp(1.0, -22), "f32 neox=%d rope_dim=%d d=%d: round-trip error %g", neox, rope_dim, d,
                      err);
            CHECK(memcmp(mid, src, sizeof mid) != 0); /* it did rotate */
        } else {
            kvs_f32_to_f16_row(src, h_src, NT * HD);
            kvs_f16_to_f32_row(h_src, orig, NT * HD);
            kvs_move_k_run(&rc, type, h_src, h_mid, NT, d);
            memcpy(h_back, h_mid, sizeof h_back);
            kvs_move_k_run(&rc, type, h_back, h_back, NT, -d); /* in place */
            kvs_f16_to_f32_row(h_back, back, NT * HD);
            err = max_rel_pair_err(&rc, back, orig, NT);
            CHECK_MSG(err <= ldexp(1.0, -10), "f16 neox=%d rope_dim=%d d=%d: round-trip error %g", neox, rope_dim, d,
                      err);
            int same = 0;
            for (int i = 0; i < NT * HD; i++) same += h_back[i] == h_src[i];
            /* Most elements come back bit-exact: the error is rare rounding. */
            CHECK_MSG(same >= NT * HD * 2 / 3, "f16 d=%d: only %d of %d elements exact after the round trip", d, same,
                      NT * HD);
        }
    }
}

/* A rotation keeps a pair's length, not its parts: an F16 key pair of
 * (60000, 60000) turned by one radian has a part of 82,800, past what a
 * half holds; the move says so (it had stored inf, which the attention
 * masks), and the same keys at a tenth move clean. */
TEST(move_reports_f16_keys_past_the_range) {
    kvs_rope_cfg rc = {HD, HD, 0, 10000.0f, 1.0f, NULL};
    static float src[NT * HD];
    static uint16_t h[NT * HD], out[NT * HD];
    for (int scale = 0; scale < 2; scale++) {
        const float v = scale ? 6000.0f : 60000.0f;
        for (int i = 0; i < NT * HD; i++) src[i] = i % HD < 2 ? v : 1.0f; /* pair 0 turns by delta radians */
        kvs_f32_to_f16_row(src, h, NT * HD);
        CHECK_EQ_INT(kvs_move_k_run(&rc, KVS_KV_F16, h, out, NT, 1), scale ? 0 : 1);
        CHECK_EQ_INT(kvs_move_k_run(&rc, KVS_KV_F32, src, src, NT, 1), 0); /* F32 holds it */
    }
}

TEST(move_roundtrip_f32) {
    roundtrip(KVS_KV_F32, 0, HD);
    roundtrip(KVS_KV_F32, 1, HD);
    roundtrip(KVS_KV_F32, 0, HD / 2); /* partial rotary: the tail dims stay put */
}

TEST(move_roundtrip_f16) {
    roundtrip(KVS_KV_F16, 0, HD);
    roundtrip(KVS_KV_F16, 1, HD);
}

/* Q8 keys: a move dequantizes, rotates and quantizes again, so +d then -d
 * comes back within two roundings of a level (each at most half a scale
 * step; a rotated row's largest element, hence its scale, grows by at most
 * sqrt 2), in place and not, for every delta; and a move really rotates. */
TEST(move_roundtrip_q8) {
    kvs_rope_cfg rc = {HD, HD, 0, 100000.0f, 1.0f, NULL};
    const size_t rb = kvs_kv_row_bytes(KVS_KV_Q8, HD);
    static float src[NT * HD], orig[NT * HD], back[NT * HD];
    static uint8_t q_src[NT * (HD + 4)], q_mid[NT * (HD + 4)], q_back[NT * (HD + 4)];
    static const int32_t deltas[] = {1, 7, 100, 4093, -3, -2500};
    CHECK_EQ_INT((int)rb, HD + 4);
    for (int i = 0; i < NT * HD; i++) src[i] = frand();
    kvs_kv_rows_store(KVS_KV_Q8, src, q_src, NT, HD);
    kvs_kv_rows_load(KVS_KV_Q8, q_src, orig, NT, HD);
    for (size_t di = 0; di < sizeof deltas / sizeof deltas[0]; di++) {
        const int32_t d = deltas[di];
        kvs_move_k_run(&rc, KVS_KV_Q8, q_src, q_mid, NT, d);
        CHECK(memcmp(q_mid, q_src, sizeof q_mid) != 0);
        memcpy(q_back, q_mid, sizeof q_back);
        kvs_move_k_run(&rc, KVS_KV_Q8, q_back, q_back, NT, -d); /* in place */
        kvs_kv_rows_load(KVS_KV_Q8, q_back, back, NT, HD);
        double worst = 0;
        for (int t = 0; t < NT; t++) {
            float amax = 0;
            for (int i = 0; i < HD; i++) amax = fmaxf(amax, fabsf(orig[t * HD + i]));
            for (int i = 0; i < HD; i++) {
                const double e = fabs((double)back[t * HD + i] - orig[t * HD + i]) / (amax / 127.0);
                if (e > worst) worst = e;
            }
        }
        CHECK_MSG(worst <= 0.5 * 1.4143 + 0.5 * 1.4143 * 1.4143, "q8 d=%d: round trip off by %.3f scale steps", d,
                  worst);
    }
}

/* rope at p, then moved by d == rope at p + d (within a float rounding). */
TEST(move_composes_with_rope) {
    kvs_rope_cfg rc = {HD, HD, 0, 100000.0f, 1.0f, NULL};
    static float x[NT * HD], at_p[NT * HD], direct[NT * HD], moved[NT * HD];
    for (int i = 0; i < NT * HD; i++) x[i] = frand();
    const int32_t p = 123, d = 1789;
    for (int t = 0; t < NT; t++) {
        memcpy(at_p + t * HD, x + t * HD, HD * sizeof(float));
        kvs_rope(at_p + t * HD, 1, HD, HD, p + t, rc.freq_base, 1.0f, 0);
        memcpy(direct + t * HD, x + t * HD, HD * sizeof(float));
        kvs_rope(direct + t * HD, 1, HD, HD, p + d + t, rc.freq_base, 1.0f, 0);
    }
    kvs_move_k_run(&rc, KVS_KV_F32, at_p, moved, NT, d);
    double err = max_rel_pair_err(&rc, moved, direct, NT);
    CHECK_MSG(err <= ldexp(1.0, -22), "moved vs direct: %g", err);
    kvs_move_k_run(&rc, KVS_KV_F32, at_p, moved, NT, 0);
    CHECK(memcmp(moved, at_p, sizeof moved) == 0); /* delta 0 copies */
}

/* --- on the real model ---------------------------------------------------- */

static kvs_model *g_model;

static double cosine16(const uint16_t *a, const uint16_t *b, int n) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        float x, y;
        kvs_f16_to_f32_row(a + i, &x, 1);
        kvs_f16_to_f32_row(b + i, &y, 1);
        dot += (double)x * y;
        na += (double)x * x;
        nb += (double)y * y;
    }
    return dot / sqrt(na * nb);
}

/* Runs tokens[0..n) through the model at VIRTUAL positions shift + i while
 * storing row i at slot i of kv. RoPE makes attention depend on relative
 * positions only, so this is the same sequence computed at an offset:
 * the reference for "computed at p + d directly" with the same context. */
static void forward_shifted(kvs_context *ctx, kvs_kv_buffer *kv, const int32_t *tokens, int n, int shift) {
    kvs_fwd *f = kvs_context_fwd(ctx);
    int32_t *slot = malloc((size_t)n * sizeof *slot), *vpos = malloc((size_t)n * sizeof *vpos);
    for (int i = 0; i < n; i++) {
        slot[i] = i;
        vpos[i] = i + shift;
    }
    const int kvd = f->hp->n_head_kv * f->hp->head_dim, hd = f->hp->head_dim;
    kvs_fwd_embed(f, tokens, n); /* n <= max_rows */
    for (int l = 0; l < f->hp->n_layer; l++) {
        kvs_fwd_layer_qkv(f, l, vpos, n);
        for (int r = 0; r < n; r++)
            for (int h = 0; h < f->hp->n_head_kv; h++) {
                kvs_f32_to_f16_row(f->k + (size_t)r * kvd + (size_t)h * hd, kvs_kv_at(kv, l, 0, h, r), hd);
                kvs_f32_to_f16_row(f->v + (size_t)r * kvd + (size_t)h * hd, kvs_kv_at(kv, l, 1, h, r), hd);
            }
        kvs_fwd_layer_attn_ffn(f, l, slot, n, kv);
    }
    free(slot);
    free(vpos);
}

TEST(move_chunk_vs_direct) {
    const char *mp = kt_model_path(); /* fails the test when unset */
    /* asked to run (KVSTITCH_MODEL set): a model that does not load fails */
    CHECK_MSG(g_model != NULL, "KVSTITCH_MODEL=%s did not load", mp ? mp : "");
    if (!mp || !g_model) return;
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 2048; /* room to move the chunk to np + d */
    cp.n_threads = 2;
    kvs_context *ctx = NULL;
    kvs_cache *cache = NULL;
    char *text = kt_musique_passage(0, 1, 0);
    CHECK(text != NULL);
    if (!text) return;
    CHECK_EQ_INT(kvs_context_new(g_model, cp, &ctx), KVS_OK);
    kvs_cache_params pp = kvs_cache_default_params();
    CHECK_EQ_INT(kvs_cache_open(g_model, pp, &cache), KVS_OK);
    if (!ctx || !cache) goto out;

    /* The doc and the chat doc prefix. */
    const char *docs[1] = {text};
    kvs_seg_input in = {1, NULL, docs, NULL, 1, "Who?", NULL};
    kvs_seg_layout lay;
    CHECK_EQ_INT(kvs_seg_layout_build(g_model, &in, &lay), KVS_OK);
    const kvs_seg *ds = &lay.segs[1];
    const int nd = ds->end - ds->start > 200 ? 200 : ds->end - ds->start, np = lay.n_doc_prefix;
    const int32_t *doc = lay.tokens + ds->start;

    /* The chunk: computed after the doc prefix, at p = np. */
    kvs_doc_computer dc;
    kvs_chunk *c = NULL;
    CHECK_EQ_INT(kvs_doc_computer_init(&dc, ctx, cache, lay.doc_prefix, np, nd), KVS_OK);
    CHECK_EQ_INT(kvs_doc_compute(&dc, doc, nd, &c), KVS_OK);
    kvs_doc_computer_release(&dc);
    if (!c) goto out_lay;
    CHECK_EQ_INT(c->pos0, np);

    /* Direct: doc prefix + doc at virtual positions d, d+1, ... */
    const kvs_hparams *hp = kvs_model_hparams(g_model);
    const int L = hp->n_layer, H = hp->n_head_kv, hd = hp->head_dim, d = 1301, n = np + nd;
    kvs_kv_buffer ref;
    CHECK_EQ_INT(kvs_kv_buffer_init(&ref, L, H, n, hd, KVS_KV_F16), KVS_OK);
    int32_t *seq = malloc((size_t)n * sizeof *seq);
    memcpy(seq, lay.doc_prefix, (size_t)np * sizeof *seq);
    memcpy(seq + np, doc, (size_t)nd * sizeof *seq);
    forward_shifted(ctx, &ref, seq, n, d);

    /* The chunk's K moved by d, compared with the direct K, layer by layer. */
    kvs_rope_cfg rc = kvs_rope_cfg_of(hp);
    const size_t run = (size_t)nd * hd;
    uint16_t *moved = malloc(run * sizeof *moved);
    float *mk = malloc(run * sizeof *mk), *rk = malloc(run * sizeof *rk);
    double worst_first = 1.0, worst_all = 1.0, err0 = 0.0;
    int wl_first = -1;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            const uint16_t *ck = (const uint16_t *)kvs_chunk_layer_k(c, l) + (size_t)h * run;
            const uint16_t *cv = (const uint16_t *)kvs_chunk_layer_v(c, l) + (size_t)h * run;
            kvs_move_k_run(&rc, KVS_KV_F16, ck, moved, nd, d);
            const uint16_t *dk = kvs_kv_at(&ref, l, 0, h, np), *dv = kvs_kv_at(&ref, l, 1, h, np);
            if (l == 0) {
                /* Layer 0 sees no context: V bit-identical, K within rounding. */
                CHECK_MSG(memcmp(cv, dv, run * 2) == 0, "layer 0 head %d: V differs", h);
                kvs_f16_to_f32_row(moved, mk, (int)run);
                kvs_f16_to_f32_row(dk, rk, (int)run);
                double e = hd == HD ? max_rel_pair_err(&rc, mk, rk, nd) : 0.0;
                if (e > err0) err0 = e;
            }
            double cs = cosine16(moved, dk, hd);
            if (cs < worst_first) { worst_first = cs; wl_first = l; }
            for (int t = 0; t < nd; t++) {
                cs = cosine16(moved + (size_t)t * hd, dk + (size_t)t * hd, hd);
                if (cs < worst_all) worst_all = cs;
            }
        }
    printf("  moved by %d vs computed there: layer-0 K error %.3g |pair|; K cosine: first token >= %.6f "
           "(layer %d), any token >= %.6f\n", d, err0, worst_first, wl_first, worst_all);
    CHECK_MSG(err0 <= ldexp(1.0, -9), "layer 0: moved K vs direct K: %g", err0);
    CHECK_MSG(worst_first >= 0.999, "first doc token: K cosine %.6f at layer %d", worst_first, wl_first);
    CHECK_MSG(worst_all >= 0.99, "some doc token: K cosine %.6f", worst_all);

    /* Through kvs_move_chunk_to_kv: slot np + d of a context buffer gets the
     * same bits as the run-level move. */
    kvs_kv_buffer *kv = kvs_context_kv(ctx);
    CHECK_EQ_INT(kvs_move_chunk_to_kv(c, 0, nd, kv, np + d, &rc, NULL), KVS_OK);
    kvs_move_k_run(&rc, KVS_KV_F16, kvs_chunk_layer_k(c, 7), moved, nd, d);
    CHECK(memcmp(kvs_kv_at(kv, 7, 0, 0, np + d), moved, run * 2) == 0);
    CHECK(memcmp(kvs_kv_at(kv, 7, 1, 0, np + d), kvs_chunk_layer_v(c, 7), run * 2) == 0);
    CHECK(kvs_move_chunk_to_kv(c, 0, nd, kv, kv->n_ctx - nd + 1, &rc, NULL) == KVS_ERR_INVALID_ARG);

    free(moved);
    free(mk);
    free(rk);
    free(seq);
    kvs_kv_buffer_release(&ref);
    kvs_chunk_unref(c);
out_lay:
    kvs_seg_layout_free(&lay);
out:
    free(text);
    kvs_cache_free(cache);
    kvs_context_free(ctx);
}

int main(void) {
    RUN(move_reports_f16_keys_past_the_range);
    RUN(move_roundtrip_f32);
    RUN(move_roundtrip_f16);
    RUN(move_roundtrip_q8);
    RUN(move_composes_with_rope);
    const char *mp = getenv("KVSTITCH_MODEL");
    if (mp && *mp && kvs_model_load(mp, kvs_model_default_params(), &g_model) != KVS_OK)
        fprintf(stderr, "  %s: %s\n", mp, kvs_last_error());
    RUN(move_chunk_vs_direct); /* fails without the model */
    kvs_model_free(g_model);
    return kt_summary();
}
