/*
 * rag_anatomy: where the error of moved doc KV comes from (no repair).
 *
 * On MuSiQue items (the same chat prompts as bench/rag_eval: system message,
 * the first k passages as docs, the question), the first-token KL of
 * `none` against a cold prefill of the same tokens (full), in controlled
 * settings:
 *
 *   real prefix   every doc's KV computed after exactly the prompt's own
 *                 prefix (BOS, system turn, user-turn header: the tokens
 *                 before the first doc). With one doc it sits where it was
 *                 computed (delta 0) and must be bit-identical to full (a
 *                 mismatch is a bug: exit 1). With k docs, doc 0 is exact
 *                 and the others miss only the docs before them.
 *   default       the library's default doc prefix (the template with an
 *                 empty system message): docs also miss the system message
 *                 and are moved by delta = slot - |default prefix|.
 *   round trip    full's exact KV, every doc token's K rotated by +d and
 *                 back by -d (two f16 roundings) before the question is
 *                 prefilled again: bounds the RoPE / rounding part of a move
 *                 (a real move rounds once). d = each doc's real delta in the
 *                 default setting, and d = 4096.
 *   shifted       the prompt before the question computed at virtual
 *                 positions 2048 + i (RoPE angles of position 2048 + i, K/V
 *                 stored at slot i; attention depends on relative positions
 *                 only, so this is the same computation at another offset,
 *                 as in tests/test_move.c), then every key moved by -2048:
 *                 "computed elsewhere, then moved", with the exact context.
 *
 * For k = 1, 2, 4, 6 docs. Means over items of KL(full || setting) and of
 * max |logit difference|.
 *
 * Usage: rag_anatomy [--items N] [--skip N] [--docs 1,2,4,6] [--threads N]
 *                    [--out DIR] [--model PATH] [--data DIR]
 * Without arguments 1 item (what `make bench` runs, ~1 min), written to
 * DIR/rag_eval_anatomy_quick.md; with --items to DIR/rag_eval_anatomy.md
 * (DIR default bench/results).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/context.h"
#include "engine/generate.h"
#include "kvstitch.h"
#include "rag_data.h"
#include "cache/cache.h"
#include "rag/move.h"
#include "rag/segment_gen.h"

#define MAX_K MUSIQUE_DOCS
#define MAX_ITEMS 64

static double max_abs_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m) m = d;
    }
    return m;
}

typedef struct acc {
    double kl, maxd;
    int n, identical;
} acc;

static void add(acc *a, const float *ref, const float *q, int n_vocab) {
    a->kl += kl_first(ref, q, n_vocab);
    a->maxd += max_abs_diff(ref, q, n_vocab);
    a->identical += !memcmp(ref, q, (size_t)n_vocab * sizeof(float));
    a->n++;
}

typedef struct env {
    kvs_model *model;
    kvs_context *ctx;
    kvs_cache *cache;
    int n_vocab;
} env;

static kvs_generate_params first_only(void) {
    kvs_generate_params gp = kvs_generate_default_params();
    gp.n_predict = 1;
    gp.sampling.temperature = 0;
    return gp;
}

/* `none` on lay with an empty cache (docs computed after lay->doc_prefix),
 * no exact-prefix path. out: the first logits. */
static int run_none(env *e, const kvs_seg_layout *lay, float *out) {
    kvs_cache_clear(e->cache, 0);
    kvs_repair_params rp = kvs_repair_default_params();
    rp.mode = KVS_REPAIR_NONE;
    kvs_seg_options o = kvs_seg_default_options();
    o.use_exact = 0;
    o.store_prefix = 0;
    kvs_generate_params gp = first_only();
    kvs_generate_result r;
    int st = kvs_seg_generate(e->ctx, e->cache, lay, &gp, &rp, &o, &r, NULL);
    if (st) {
        fprintf(stderr, "rag_anatomy: none: %s\n", kvs_last_error());
        return st;
    }
    memcpy(out, r.first_logits, (size_t)e->n_vocab * sizeof(float));
    kvs_generate_result_free(&r);
    return KVS_OK;
}

/* Full prefill of lay into the context; then every doc token's K rotated by
 * +d and back by -d in place (d = delta[i] for doc i, or d_all if > 0),
 * and the question prefilled again from that KV. out: the first logits. */
static int run_round_trip(env *e, const kvs_seg_layout *lay, const int *delta, int d_all, float *out) {
    kvs_generate_params gp = first_only();
    kvs_generate_result r;
    int st = kvs_generate(e->ctx, lay->tokens, lay->n_tokens, &gp, &r);
    if (st) return st;
    kvs_generate_result_free(&r);
    kvs_kv_buffer *kv = kvs_context_kv(e->ctx);
    kvs_rope_cfg rc = kvs_rope_cfg_of(kvs_model_hparams(e->model));
    int di = 0, Q = lay->segs[lay->n_segs - 1].start;
    for (int s = 0; s < lay->n_segs; s++) {
        const kvs_seg *g = &lay->segs[s];
        if (g->kind != KVS_SEG_DOC) continue;
        int d = d_all > 0 ? d_all : delta[di];
        di++;
        for (int l = 0; l < kv->n_layer; l++)
            for (int h = 0; h < kv->n_kv_head; h++) {
                void *k = kvs_kv_at(kv, l, 0, h, g->start);
                kvs_move_k_run_layer(&rc, l, kv->type, k, k, g->end - g->start, d);
                kvs_move_k_run_layer(&rc, l, kv->type, k, k, g->end - g->start, -d);
            }
    }
    st = kvs_generate_from(e->ctx, lay->tokens, lay->n_tokens, Q, &gp, kvs_now_ms(), &r);
    if (st) return st;
    memcpy(out, r.first_logits, (size_t)e->n_vocab * sizeof(float));
    kvs_generate_result_free(&r);
    return KVS_OK;
}

/* Slots [0, Q) (everything before the question) computed at virtual
 * positions shift + i into the context's KV, every key moved back by
 * -shift, then the question prefilled. out: the first logits. */
static int run_shifted(env *e, const kvs_seg_layout *lay, int shift, float *out) {
    kvs_fwd *f = kvs_context_fwd(e->ctx);
    kvs_kv_buffer *kv = kvs_context_kv(e->ctx);
    const int Q = lay->segs[lay->n_segs - 1].start;
    int32_t *slot = malloc((size_t)Q * sizeof *slot), *vpos = malloc((size_t)Q * sizeof *vpos);
    if (!slot || !vpos) {
        free(slot);
        free(vpos);
        return KVS_ERR_NOMEM;
    }
    for (int i = 0; i < Q; i++) {
        slot[i] = i;
        vpos[i] = shift + i;
    }
    for (int c0 = 0; c0 < Q; c0 += f->max_rows) {
        int m = Q - c0 < f->max_rows ? Q - c0 : f->max_rows;
        kvs_fwd_embed(f, lay->tokens + c0, m);
        for (int l = 0; l < f->hp->n_layer; l++) {
            kvs_fwd_layer_qkv(f, l, vpos + c0, m);         /* RoPE at the virtual positions */
            kvs_fwd_layer_store_kv(f, l, slot + c0, m, kv); /* stored at the real slots */
            kvs_fwd_layer_attn_ffn(f, l, slot + c0, m, kv);
        }
        const int ov = kvs_fwd_overflow_status(f); /* read here: left set, the next pass had reported it */
        if (ov) {
            free(slot);
            free(vpos);
            return ov;
        }
    }
    free(slot);
    free(vpos);
    kvs_rope_cfg rc = kvs_rope_cfg_of(kvs_model_hparams(e->model));
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_kv_head; h++) {
            void *k = kvs_kv_at(kv, l, 0, h, 0);
            kvs_move_k_run_layer(&rc, l, kv->type, k, k, Q, -shift);
        }
    kvs_generate_params gp = first_only();
    kvs_generate_result r;
    int st = kvs_generate_from(e->ctx, lay->tokens, lay->n_tokens, Q, &gp, kvs_now_ms(), &r);
    if (st) return st;
    memcpy(out, r.first_logits, (size_t)e->n_vocab * sizeof(float));
    kvs_generate_result_free(&r);
    return KVS_OK;
}

/* The layout's doc prefix replaced by its own tokens before the first doc. */
static int use_real_prefix(kvs_seg_layout *lay) {
    int D = lay->segs[kvs_seg_layout_first_doc(lay)].start;
    int32_t *p = malloc((size_t)D * sizeof *p);
    if (!p) return KVS_ERR_NOMEM;
    memcpy(p, lay->tokens, (size_t)D * sizeof *p);
    free(lay->doc_prefix);
    lay->doc_prefix = p;
    lay->n_doc_prefix = D;
    return KVS_OK;
}

enum { S_REAL, S_DEFAULT, S_TRIP_DELTA, S_TRIP_4096, S_SHIFTED, N_SETTINGS };
static const char *const k_setting[N_SETTINGS] = {
    "real prefix (only the docs before are missing)",
    "default doc prefix (system message missing too) + move",
    "full's KV, K rotated by the real deltas and back",
    "full's KV, K rotated by 4096 and back",
    "computed at virtual offset 2048, K moved back",
};

int main(int argc, char **argv) {
    const char *model = getenv("KVSTITCH_MODEL"), *out_dir = "bench/results", *data_arg = NULL;
    int n_items = 1, skip = 0, threads = 2, ks[MAX_K] = {1, 2, 4, 6}, n_k = 4, quick = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--items")) {
            n_items = atoi(v);
            quick = 0;
        }
        else if (!strcmp(a, "--skip")) skip = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--out")) out_dir = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--data")) data_arg = v;
        else if (!strcmp(a, "--docs")) {
            n_k = 0;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t && n_k < MAX_K; t = strtok_r(NULL, ",", &save)) {
                int k = atoi(t);
                if (k < 1 || k > 6) goto usage;
                ks[n_k++] = k;
            }
            if (!n_k) goto usage;
        } else goto usage;
        i++;
    }
    if (n_items < 1 || n_items > MAX_ITEMS) n_items = n_items < 1 ? 1 : MAX_ITEMS;
    if (!model) {
        fprintf(stderr, "rag_anatomy: no model (--model PATH or KVSTITCH_MODEL)\n");
        return 1;
    }
    char data[1024];
    const char *sh = getenv("KVSTITCH_SHARED");
    snprintf(data, sizeof data, "%s", data_arg ? data_arg : "");
    if (!data_arg) snprintf(data, sizeof data, "%s/data", sh && *sh ? sh : "../shared");
    item *items = calloc((size_t)skip + MAX_ITEMS, sizeof *items);
    n_items = load_musique_range(data, skip, n_items, items);
    if (n_items <= 0) return 1;

    env e;
    memset(&e, 0, sizeof e);
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 8192;
    cp.n_threads = threads;
    kvs_cache_params pp = kvs_cache_default_params();
    pp.budget_bytes = (size_t)1 << 30;
    if (kvs_model_load(model, kvs_model_default_params(), &e.model) != KVS_OK ||
        kvs_context_new(e.model, cp, &e.ctx) != KVS_OK || kvs_cache_open(e.model, pp, &e.cache) != KVS_OK) {
        fprintf(stderr, "rag_anatomy: %s\n", kvs_last_error());
        return 1;
    }
    e.n_vocab = kvs_vocab_size(e.model);
    float *full = malloc((size_t)e.n_vocab * sizeof(float)), *got = malloc((size_t)e.n_vocab * sizeof(float));
    acc res[MAX_K][N_SETTINGS];
    memset(res, 0, sizeof res);
    double doc_tok[MAX_K] = {0}, delta_sum[MAX_K] = {0};
    int n_delta[MAX_K] = {0}, bug = 0, text_prefix_same = 1;
    double t_start = kvs_now_ms();

    for (int i = 0; i < n_items; i++) {
        for (int ki = 0; ki < n_k; ki++) {
            int k = ks[ki] < items[i].n_docs ? ks[ki] : items[i].n_docs;
            const char *docs[MAX_K];
            for (int j = 0; j < k; j++) docs[j] = items[i].docs[j];
            kvs_seg_input in = {1, k_system, docs, NULL, k, items[i].question, NULL};
            kvs_seg_layout lay, real;
            if (kvs_seg_layout_build(e.model, &in, &lay) || kvs_seg_layout_build(e.model, &in, &real) ||
                use_real_prefix(&real)) {
                fprintf(stderr, "rag_anatomy: layout: %s\n", kvs_last_error());
                return 1;
            }
            /* The public text path gives the same doc prefix tokens: the
             * system turn's text with special tokens. */
            if (ki == 0) {
                char *txt = cat("<|im_start|>system\n", k_system, "<|im_end|>\n<|im_start|>user\n");
                in.doc_prefix = txt;
                kvs_seg_layout tl;
                if (kvs_seg_layout_build(e.model, &in, &tl) == KVS_OK) {
                    text_prefix_same &= tl.n_doc_prefix == real.n_doc_prefix &&
                                        !memcmp(tl.doc_prefix, real.doc_prefix,
                                                (size_t)tl.n_doc_prefix * sizeof(int32_t));
                    kvs_seg_layout_free(&tl);
                }
                in.doc_prefix = NULL;
                free(txt);
            }
            int delta[MAX_K], di = 0;
            for (int s = 0; s < lay.n_segs; s++)
                if (lay.segs[s].kind == KVS_SEG_DOC) {
                    delta[di] = lay.segs[s].start - lay.n_doc_prefix;
                    delta_sum[ki] += delta[di++];
                    n_delta[ki]++;
                    doc_tok[ki] += lay.segs[s].end - lay.segs[s].start;
                }
            kvs_generate_params gp = first_only();
            kvs_generate_result fr;
            if (kvs_generate(e.ctx, lay.tokens, lay.n_tokens, &gp, &fr) != KVS_OK) {
                fprintf(stderr, "rag_anatomy: full: %s\n", kvs_last_error());
                return 1;
            }
            memcpy(full, fr.first_logits, (size_t)e.n_vocab * sizeof(float));
            kvs_generate_result_free(&fr);

            if (run_none(&e, &real, got)) return 1;
            add(&res[ki][S_REAL], full, got, e.n_vocab);
            if (k == 1 && memcmp(full, got, (size_t)e.n_vocab * sizeof(float))) {
                fprintf(stderr, "rag_anatomy: BUG: item %d, one doc after its own prefix (delta 0) is not "
                        "bit-identical to full (KL %.3g)\n", i, kl_first(full, got, e.n_vocab));
                bug = 1;
            }
            if (run_none(&e, &lay, got)) return 1;
            add(&res[ki][S_DEFAULT], full, got, e.n_vocab);
            if (run_round_trip(&e, &lay, delta, 0, got)) return 1;
            add(&res[ki][S_TRIP_DELTA], full, got, e.n_vocab);
            if (run_round_trip(&e, &lay, delta, 4096, got)) return 1;
            add(&res[ki][S_TRIP_4096], full, got, e.n_vocab);
            if (run_shifted(&e, &lay, 2048, got)) return 1;
            add(&res[ki][S_SHIFTED], full, got, e.n_vocab);
            kvs_seg_layout_free(&lay);
            kvs_seg_layout_free(&real);
        }
        fprintf(stderr, "  item %d/%d done, %.0f s\n", i + 1, n_items, (kvs_now_ms() - t_start) / 1000);
    }

    char tbl[8192];
    size_t o = 0;
    o += (size_t)snprintf(tbl + o, sizeof tbl - o, "| docs | doc tokens | mean delta |");
    for (int s = 0; s < N_SETTINGS; s++) o += (size_t)snprintf(tbl + o, sizeof tbl - o, " %s: KL / max dlogit |",
                                                               k_setting[s]);
    o += (size_t)snprintf(tbl + o, sizeof tbl - o, "\n|---:|---:|---:|");
    for (int s = 0; s < N_SETTINGS; s++) o += (size_t)snprintf(tbl + o, sizeof tbl - o, "---:|");
    o += (size_t)snprintf(tbl + o, sizeof tbl - o, "\n");
    for (int ki = 0; ki < n_k; ki++) {
        acc *r = res[ki];
        o += (size_t)snprintf(tbl + o, sizeof tbl - o, "| %d | %.0f | %.0f |", ks[ki], doc_tok[ki] / n_items,
                              n_delta[ki] ? delta_sum[ki] / n_delta[ki] : 0);
        for (int s = 0; s < N_SETTINGS; s++) {
            if (r[s].identical == r[s].n)
                o += (size_t)snprintf(tbl + o, sizeof tbl - o, " 0 (bit-identical, %d/%d) |", r[s].identical, r[s].n);
            else
                o += (size_t)snprintf(tbl + o, sizeof tbl - o, " %.2e / %.3f |", r[s].kl / r[s].n, r[s].maxd / r[s].n);
        }
        o += (size_t)snprintf(tbl + o, sizeof tbl - o, "\n");
    }
    char hdr[1024];
    snprintf(hdr, sizeof hdr,
             "%d MuSiQue items from #%d; `none` (no repair) vs a cold prefill of the same tokens; first-token KL "
             "and max |logit difference|, means over items. Text doc prefix tokenizes as the real prefix: %s. "
             "Wall time %.0f s.\n",
             n_items, skip, text_prefix_same ? "yes" : "NO", (kvs_now_ms() - t_start) / 1000);
    printf("\n%s\n%s", hdr, tbl);
    mkdir(out_dir, 0755);
    char path[1100];
    snprintf(path, sizeof path, "%s/rag_eval_anatomy%s.md", out_dir, quick ? "_quick" : "");
    FILE *f = fopen(path, "w");
    if (f) {
        time_t now = time(NULL);
        char date[64];
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        fprintf(f, "# rag_anatomy (%s)\n\n%s\n%s", date, hdr, tbl);
        fclose(f);
        printf("\nwritten: %s\n", path);
    }
    for (int i = 0; i < n_items; i++) item_free(&items[i]);
    free(items);
    free(full);
    free(got);
    kvs_cache_free(e.cache);
    kvs_context_free(e.ctx);
    kvs_model_free(e.model);
    if (bug) fprintf(stderr, "rag_anatomy: FAILED: a delta-0 doc is not bit-identical to full\n");
    return bug;
usage:
    fprintf(stderr, "usage: rag_anatomy [--items N] [--skip N] [--docs 1,2,4,6] [--threads N] [--out DIR] "
                    "[--model PATH] [--data DIR]\n");
    return 2;
}
