/*
 * Strategy "query": recompute the moved tokens the question attends to most
 * (query-guided selection, as in ProphetKV, arXiv 2602.02579, and the online
 * step of FusionRAG, arXiv 2601.12904).
 *
 * Why: on small models the stale cross-document attention is spread over most
 * moved tokens (bench/rag_anatomy), so ranking tokens by how far their own K/V
 * moved (CacheBlend) cannot find a small set that explains the error. What
 * reaches the answer, though, is only what the question reads: a token the
 * question never attends to changes the first logits only through other
 * tokens. So let the question itself say which tokens matter.
 *
 *   1. the question rows [end, n_tokens) run every layer over the stitched,
 *      moved KV (their K/V are written at their own slots; generation
 *      recomputes them after the repair, so nothing of this pass survives);
 *   2. in each layer, for every question row and query head, the softmax of
 *      its scaled dot products over all slots 0..pos (its group's keys, as the
 *      attention kernel sees them) is formed, and the probability that lands
 *      on each moved slot is added to that slot's score;
 *   3. the top recompute_ratio of moved tokens by score (ties to the earlier
 *      slot) are recomputed in every layer from layer 0, like full does for
 *      all of them; with query_seams, the last `overlap` tokens of each doc
 *      (selective's) too, beyond the ratio (the hybrid cacheblend_seams is
 *      for cacheblend).
 *
 * Deterministic: one thread, a fixed summation order (16 lanes, then a fixed
 * tree), explicit fmaf; the same bits on every ISA with FMA. Invariants:
 * ratio 1 selects every moved token from layer 0 (the bits of full); ratio 0
 * skips the pass (the bits of none); a prompt without question rows selects
 * nothing. Cost: question rows x n_layer for the pass, plus their attention
 * probabilities over the context, plus |S| x n_layer for the recompute.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "rag/repair/strategy.h"

enum { LANES = 16 };

static int check_query(const kvs_repair_params *p, int n_layer) {
    (void)n_layer;
    if (!(p->recompute_ratio >= 0.0f && p->recompute_ratio <= 1.0f))
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: recompute ratio must be in [0, 1], got %g",
                         (double)p->recompute_ratio);
    if (p->query_seams != 0 && p->query_seams != 1)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: query_seams must be 0 or 1, got %d", p->query_seams);
    if (p->query_seams && p->overlap < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "repair: overlap must be >= 0, got %d", p->overlap);
    return KVS_OK;
}

/* q . k over n (a multiple of LANES or not), in a fixed order. */
static float dot_fixed(const float *q, const float *k, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = fmaf(q[i + l], k[i + l], acc[l]);
    for (int l = 0; i < n; i++, l++) acc[l] = fmaf(q[i], k[i], acc[l]);
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* Layer l's keys of slots [0, n_slots) as float: kf (n_kv_head, n_slots, head_dim). */
static void keys_as_float(const kvs_kv_buffer *kv, int l, int n_slots, float *kf) {
    const size_t hd = (size_t)kv->head_dim;
    for (int h = 0; h < kv->n_kv_head; h++) {
        const void *src = kvs_kv_at(kv, l, 0, h, 0);
        float *dst = kf + (size_t)h * n_slots * hd;
        kvs_kv_rows_load(kv->type, src, dst, n_slots, (int)hd);
    }
}

/* Adds, for m question rows whose roped queries are in f->q, the attention
 * probability each moved slot [start, end) receives to score[slot - start]. */
static void add_attention(const kvs_fwd *f, const float *kf, int n_slots, const int32_t *pos, int m, int start,
                          int end, float *logit, double *ex, double *score) {
    const kvs_hparams *hp = f->hp;
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < m; r++) {
        const int n = pos[r] + 1; /* causal: slots 0..pos */
        for (int h = 0; h < hp->n_head; h++) {
            const float *q = f->q + ((size_t)r * hp->n_head + h) * hd;
            const float *kh = kf + (size_t)(h / group) * n_slots * hd;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                logit[j] = dot_fixed(q, kh + (size_t)j * hd, hd) * scale;
                if (logit[j] > mx) mx = logit[j];
            }
            /* Each exp once, kept for the moved slots' share (the same bits
             * as computing it again, half the exp calls). */
            double z = 0.0;
            for (int j = 0; j < n; j++) z += ex[j] = exp((double)logit[j] - mx);
            const int hi = end < n ? end : n;
            for (int j = start; j < hi; j++) score[j - start] += ex[j] / z;
        }
    }
}

typedef struct scored {
    double s;
    int slot;
} scored;

/* Higher score first; ties to the earlier slot (deterministic). */
static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

/* The question pass: score[i] for moved slot start + i. */
static int score_moved(const kvs_repair_job *job, double *score) {
    kvs_fwd *f = job->f;
    kvs_kv_buffer *kv = job->kv;
    const kvs_repair_region *rg = job->rg;
    const int nq = rg->n_tokens - rg->end, n_slots = rg->n_tokens, n_layer = f->hp->n_layer;
    kvs_rowset qs;
    int st = kvs_rowset_alloc(&qs, nq, f->hp->n_embd);
    if (st) return st;
    float *kf = malloc((size_t)kv->n_kv_head * n_slots * kv->head_dim * sizeof *kf);
    float *logit = malloc((size_t)n_slots * sizeof *logit);
    double *ex = malloc((size_t)n_slots * sizeof *ex);
    if (!kf || !logit || !ex) {
        free(kf);
        free(logit);
        free(ex);
        kvs_rowset_free(&qs);
        return kvs_error(KVS_ERR_NOMEM, "repair: query: out of memory for %d slots", n_slots);
    }
    for (int r = 0; r < nq; r++) {
        qs.pos[r] = rg->end + r;
        qs.tok[r] = rg->tokens[rg->end + r];
    }
    kvs_rowset_embed(f, &qs);
    const size_t d = (size_t)f->hp->n_embd;
    const int B = f->max_rows;
    for (int l = 0; !st && l < n_layer; l++) {
        if ((st = kvs_context_poll_stop(job->ctx, "a repair's question pass", l, n_layer, "layers"))) break;
        for (int b0 = 0; b0 < nq; b0 += B) {
            int m = nq - b0 < B ? nq - b0 : B;
            memcpy(f->x, qs.x + (size_t)b0 * d, (size_t)m * d * sizeof(float));
            kvs_fwd_layer_qkv(f, l, qs.pos + b0, m);
            kvs_fwd_layer_store_kv(f, l, qs.pos + b0, m, kv);
            /* keys after this batch's store: its rows see each other as the
             * attention kernel will */
            keys_as_float(kv, l, qs.pos[b0 + m - 1] + 1, kf);
            add_attention(f, kf, qs.pos[b0 + m - 1] + 1, qs.pos + b0, m, rg->start, rg->end, logit, ex, score);
            kvs_fwd_layer_attn_ffn(f, l, qs.pos + b0, m, kv);
            memcpy(qs.x + (size_t)b0 * d, f->x, (size_t)m * d * sizeof(float));
        }
        if (!st) st = kvs_fwd_overflow_status(f);
    }
    free(kf);
    free(logit);
    free(ex);
    kvs_rowset_free(&qs);
    return st;
}

static int select_query(const kvs_repair_job *job, kvs_rowset *rs, int *l0, kvs_repair_report *rep) {
    const kvs_repair_region *rg = job->rg;
    const int n_layer = job->f->hp->n_layer, n_moved = rg->end - rg->start, nq = rg->n_tokens - rg->end;
    int want = (int)(job->p->recompute_ratio * n_moved + 0.5);
    if (want > n_moved) want = n_moved;
    if (want <= 0 || nq <= 0) { /* nothing to recompute, or no question to ask */
        *l0 = n_layer;
        return kvs_rowset_alloc(rs, 0, job->f->hp->n_embd);
    }
    scored *sc = malloc((size_t)n_moved * sizeof *sc);
    double *score = calloc((size_t)n_moved, sizeof *score);
    int *slots = malloc((size_t)n_moved * sizeof *slots);
    unsigned char *pick = calloc((size_t)n_moved, 1);
    if (!sc || !score || !slots || !pick) {
        free(sc);
        free(score);
        free(slots);
        free(pick);
        return kvs_error(KVS_ERR_NOMEM, "repair: query: out of memory for %d tokens", n_moved);
    }
    int st = want < n_moved ? score_moved(job, score) : KVS_OK; /* all of them: no pass needed */
    int n_pick = 0;
    if (!st) {
        rep->n_check = want < n_moved ? nq : 0;
        rep->n_token_layers = (long)rep->n_check * n_layer;
        for (int i = 0; i < n_moved; i++) sc[i] = (scored){score[i], rg->start + i};
        qsort(sc, (size_t)n_moved, sizeof *sc, cmp_scored);
        for (int i = 0; i < want; i++) pick[sc[i].slot - rg->start] = 1;
        /* seams: the tokens just before each seam, beyond the ratio (as
         * cacheblend_seams does for cacheblend) */
        for (int i = 0; job->p->query_seams && i < rg->n_docs; i++) {
            const kvs_seg *s = &rg->docs[i];
            int lo, hi;
            kvs_repair_range_seam(job->p, s->end - s->start, &lo, &hi);
            for (int t = s->start + lo; t < s->start + hi; t++) pick[t - rg->start] = 1;
        }
        for (int i = 0; i < n_moved; i++) /* slots ascending */
            if (pick[i]) slots[n_pick++] = rg->start + i;
        st = kvs_rowset_alloc(rs, n_pick, job->f->hp->n_embd);
    }
    if (!st) {
        for (int r = 0; r < n_pick; r++) {
            rs->pos[r] = slots[r];
            rs->tok[r] = rg->tokens[slots[r]];
        }
        kvs_rowset_embed(job->f, rs);
        *l0 = 0;
    }
    free(sc);
    free(score);
    free(slots);
    free(pick);
    return st;
}

const kvs_repair_strategy kvs_repair_query = {KVS_REPAIR_QUERY, "query", check_query, select_query};
