/* Weight views into the GGUF mapping, with type, shape and finiteness checks per tensor. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/core_clock.h"
#include "base/error.h"
#include "model/model_impl.h"

static const kvs_gguf_tensor *find(const kvs_model *m, const char *name) {
    return kvs_gguf_find_tensor(m->gguf, name);
}

static int shape_error(const kvs_model *m, const char *name, const kvs_gguf_tensor *t, int64_t e0, int64_t e1) {
    return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: shape (%lld, %lld, %lld) but the hyperparameters need (%lld, %lld)",
                     m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                     (long long)e0, (long long)e1);
}

/* A weight whose float field is inf or NaN (kvs_type_find_nonfinite: bad
 * is the first such block, or element of a float type, counted from the
 * tensor's start; k elements a row, 0 for a vector). */
static int nonfinite_error(const kvs_model *m, const char *name, int type, int64_t bad, int64_t k) {
    const kvs_type_traits *tr = kvs_type_traits_of(type);
    const int64_t per_row = k / tr->block_size;
    if (k == 0) /* a vector */
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: element %lld is not finite (inf or NaN): the file is damaged",
                         m->path, name, (long long)bad);
    if (tr->block_size == 1)
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: row %lld, column %lld is not finite (inf or NaN): the file is damaged",
                         m->path, name, (long long)(bad / per_row), (long long)(bad % per_row));
    return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: row %lld, block %lld (%s) has a scale that is not finite (inf or NaN): the file is damaged",
                     m->path, name, (long long)(bad / per_row), (long long)(bad % per_row), tr->name);
}

/* A matrix with ne = (k, n). */
static int bind_mat(const kvs_model *m, const char *name, int k, int n, kvs_wmat *w) {
    const kvs_gguf_tensor *t = find(m, name);
    if (!t) return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor %s is missing", m->path, name);
    if (t->ne[0] != k || t->ne[1] != n || t->ne[2] != 1 || t->ne[3] != 1) return shape_error(m, name, t, k, n);
    const kvs_type_traits *tr = kvs_type_traits_of(t->type);
    if (!tr || !tr->supported)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor %s: type %s (%d) is not supported", m->path, name,
                         tr ? tr->name : "unknown", t->type);
    size_t row = kvs_type_row_bytes(t->type, k);
    if (!row || row * (size_t)n > t->nbytes)
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor %s: %d columns do not fit type %s", m->path, name, k, tr->name);
    const int64_t bad = kvs_type_find_nonfinite(t->type, t->data, row * (size_t)n);
    if (bad >= 0) return nonfinite_error(m, name, t->type, bad, k);
    w->data = t->data;
    w->type = t->type;
    w->n = n;
    w->k = k;
    w->row_bytes = row;
    return KVS_OK;
}

static int misaligned(const void *p) { return (uintptr_t)p % _Alignof(float) != 0; }

const float *kvs_model_float_vector(kvs_model *m, const kvs_gguf_tensor *t, int n) {
    if (!misaligned(t->data)) return t->data;
    if (!m->vec_copies || m->vec_copies_cap - m->vec_copies_used < (size_t)n) return NULL;
    float *dst = m->vec_copies + m->vec_copies_used;
    memcpy(dst, t->data, (size_t)n * sizeof(float));
    m->vec_copies_used += (size_t)n;
    return dst;
}

/* Sizes m->vec_copies once for every F32 vector off the float grid (only a
 * file with general.alignment 1 or 2 has them: the reader checks each data
 * offset against the alignment, nothing more). */
static int alloc_vec_copies(kvs_model *m) {
    size_t need = 0;
    for (int64_t i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(m->gguf, i);
        if (t->type == KVS_TYPE_F32 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1 && misaligned(t->data))
            need += (size_t)t->ne[0];
    }
    if (!need) return KVS_OK;
    if (!(m->vec_copies = malloc(need * sizeof(float))))
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory for the aligned copies of float vectors", m->path);
    m->vec_copies_cap = need;
    return KVS_OK;
}

/* An F32 vector of n elements (norm weights, biases). optional: absent -> NULL. */
static int bind_vec(kvs_model *m, const char *name, int n, int optional, const float **out) {
    const kvs_gguf_tensor *t = find(m, name);
    if (!t) {
        if (optional) { *out = NULL; return KVS_OK; }
        return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor %s is missing", m->path, name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) return shape_error(m, name, t, n, 1);
    if (t->type != KVS_TYPE_F32)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: tensor %s: type %d, expected F32", m->path, name, t->type);
    const int64_t bad = kvs_type_find_nonfinite(t->type, t->data, (size_t)n * sizeof(float));
    if (bad >= 0) return nonfinite_error(m, name, t->type, bad, 0);
    /* The kernels index these as float * (kvs_rmsnorm's w[i], the bias
     * adds): the pointer must be float-aligned. The reader only checks the
     * data offset against general.alignment, which a file may set to 1, so
     * a vector off the float grid is read from an aligned copy (matrices
     * are read through memcpy / unaligned SIMD loads and stay mapped). */
    if (!(*out = kvs_model_float_vector(m, t, n)))
        return kvs_error(KVS_ERR_INTERNAL, "%s: tensor %s: no room left for its aligned copy", m->path, name);
    return KVS_OK;
}

/* The per-layer tensors: name suffix, matrix or vector, its dims, and the
 * KVS_ARCH_* bit that makes it required (0: always required; otherwise it is
 * optional for rows without the bit and bound if present). */
typedef enum dim { D_EMBD, D_Q, D_KV, D_FF, D_HEAD } dim;
typedef struct layer_slot {
    const char *name;  /* after "blk.N." */
    int is_mat;
    dim k, n;          /* matrix ne = (k, n); vector: k elements */
    unsigned need;
    size_t off;        /* offset of the kvs_wmat / const float * in kvs_layer_weights */
} layer_slot;

#define MAT(nm, k, n, f) {nm, 1, k, n, 0, offsetof(kvs_layer_weights, f)}
#define VEC(nm, k, need, f) {nm, 0, k, k, need, offsetof(kvs_layer_weights, f)}
static const layer_slot k_slots[] = {
    VEC("attn_norm.weight", D_EMBD, 0, attn_norm),
    MAT("attn_q.weight", D_EMBD, D_Q, wq),
    MAT("attn_k.weight", D_EMBD, D_KV, wk),
    MAT("attn_v.weight", D_EMBD, D_KV, wv),
    MAT("attn_output.weight", D_Q, D_EMBD, wo),
    VEC("attn_q.bias", D_Q, KVS_ARCH_QKV_BIAS, bq),
    VEC("attn_k.bias", D_KV, KVS_ARCH_QKV_BIAS, bk),
    VEC("attn_v.bias", D_KV, KVS_ARCH_QKV_BIAS, bv),
    VEC("attn_q_norm.weight", D_HEAD, KVS_ARCH_QK_NORM, q_norm),
    VEC("attn_k_norm.weight", D_HEAD, KVS_ARCH_QK_NORM, k_norm),
    VEC("post_attention_norm.weight", D_EMBD, KVS_ARCH_POST_NORM, attn_post_norm),
    VEC("ffn_norm.weight", D_EMBD, 0, ffn_norm),
    MAT("ffn_gate.weight", D_EMBD, D_FF, w_gate),
    MAT("ffn_up.weight", D_EMBD, D_FF, w_up),
    MAT("ffn_down.weight", D_FF, D_EMBD, w_down),
    VEC("post_ffw_norm.weight", D_EMBD, KVS_ARCH_POST_NORM, ffn_post_norm),
};
#undef MAT
#undef VEC

static int dim_of(const kvs_hparams *hp, dim d) {
    switch (d) {
    case D_EMBD: return hp->n_embd;
    case D_Q: return hp->n_head * hp->head_dim;
    case D_KV: return hp->n_head_kv * hp->head_dim;
    case D_FF: return hp->n_ff;
    case D_HEAD: return hp->head_dim;
    }
    return 0;
}

int kvs_model_bind_weights(kvs_model *m) {
    kvs_hparams *hp = &m->hp;
    int st = alloc_vec_copies(m);
    if (st) return st;
    const kvs_gguf_tensor *emb = find(m, "token_embd.weight");
    if (!emb) return kvs_error(KVS_ERR_NOT_FOUND, "%s: tensor token_embd.weight is missing", m->path);
    if (emb->ne[1] <= 0 || emb->ne[1] > (1 << 24))
        return kvs_error(KVS_ERR_FORMAT, "%s: tensor token_embd.weight: %lld rows", m->path, (long long)emb->ne[1]);
    hp->n_vocab = (int)emb->ne[1];
    if ((st = bind_mat(m, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd))) return st;
    if ((st = bind_vec(m, "output_norm.weight", hp->n_embd, 0, &m->output_norm))) return st;
    m->tied_output = find(m, "output.weight") == NULL;
    if (m->tied_output) m->output = m->tok_embd;
    else if ((st = bind_mat(m, "output.weight", hp->n_embd, hp->n_vocab, &m->output))) return st;

    for (int l = 0; l < hp->n_layer; l++) {
        char *w = (char *)&m->layers[l];
        for (size_t i = 0; i < sizeof k_slots / sizeof k_slots[0]; i++) {
            const layer_slot *sl = &k_slots[i];
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, sl->name);
            if (sl->is_mat) st = bind_mat(m, name, dim_of(hp, sl->k), dim_of(hp, sl->n), (kvs_wmat *)(w + sl->off));
            else st = bind_vec(m, name, dim_of(hp, sl->k), sl->need && !(hp->arch->tensors & sl->need),
                               (const float **)(w + sl->off));
            if (st) return st;
        }
    }
    return KVS_OK;
}

/* Repacked copies of the matrices a forward pass streams (kernels/pack.c:
 * same bits, faster decode where the kernels read them; none where they do
 * not; on the AVX2 path plain copies of float weights), in one arena on 2 MiB pages in the order a decode step reads them
 * (each layer's q, k, v, o, gate, up, down, then the output head): the step
 * is one stream the hardware prefetchers follow from matrix to matrix, and
 * SmolLM2's matrices (0.2-0.6 MiB each) no longer sit on 4 KiB pages
 * (a TLB miss and a prefetcher restart every 4 KiB): 576x576 Q4_1 matrices
 * streamed one after another 1.13x faster (median of 6 paired runs, one Zen
 * 3 core). token_embd is only read a row at a time, so a tied output head
 * gets its own packed copy and tok_embd none. If the arena cannot be had,
 * each matrix is packed on its own; a failed allocation there leaves a
 * matrix unpacked, which only costs speed. */
#define STREAMED_PER_LAYER 7 /* the mats of for_each_streamed */

static void for_each_streamed(kvs_model *m, void (*fn)(kvs_wmat *, void *), void *arg) {
    for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
        kvs_layer_weights *w = &m->layers[l];
        kvs_wmat *mats[STREAMED_PER_LAYER] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) fn(mats[i], arg);
    }
    fn(&m->output, arg);
}

#define PACK_ALIGN 64

static size_t rounded(size_t bytes) { return (bytes + PACK_ALIGN - 1) & ~(size_t)(PACK_ALIGN - 1); }

static void add_bytes(kvs_wmat *w, void *arg) {
    *(size_t *)arg += rounded(kvs_wmat_arena_bytes(w)) + rounded(kvs_wmat_rows_copy_bytes(w));
}

/* Where the matrices go (the arena, or NULL: each packed on its own) and
 * the mapping whose pages a copy replaced go back to the kernel (NULL:
 * they stay). Packing read them all, and resident they doubled the model's
 * memory (gemma3: 299 -> 471 MB with its Q8_0 head packed); a matrix's go
 * back only where the kernels read nothing of it but the copies
 * (kvs_wmat_arena_replaces_source), and once the last copy is made. Rows
 * read later (a tied head's token embeddings, the scalar reference) fault
 * their pages back in from the file. */
typedef struct pack_cursor {
    uint8_t *at;
    const kvs_gguf *gguf;
} pack_cursor;

static void release_source(const pack_cursor *pc, const kvs_wmat *w, const void *source) {
    if (pc->gguf && kvs_wmat_arena_replaces_source(w))
        kvs_gguf_release_pages(pc->gguf, source, w->row_bytes * (size_t)w->n);
}

/* The first run: each matrix packed (or its float weights copied). */
static void pack_one(kvs_wmat *w, void *arg) {
    pack_cursor *pc = arg;
    const void *source = w->data; /* a plain copy of float weights replaces data */
    /* rows the AMX batch path reads: given back by copy_rows_one once copied
     * (without an arena, never: it reads them from the mapping) */
    const int rows_read = kvs_wmat_rows_copy_bytes(w) != 0;
    if (pc->at) {
        const size_t bytes = rounded(kvs_wmat_arena_bytes(w));
        if (!bytes) return;
        kvs_wmat_arena_place(w, pc->at);
        pc->at += bytes;
    } else if (kvs_wmat_pack(w, 0) || !w->packed) {
        return;
    }
    if (!rows_read) release_source(pc, w, source);
}

/* The second run: the GGUF rows the AMX batch path streams. */
static void copy_rows_one(kvs_wmat *w, void *arg) {
    pack_cursor *pc = arg;
    const size_t bytes = rounded(kvs_wmat_rows_copy_bytes(w));
    if (!bytes) return;
    const void *source = w->data;
    kvs_wmat_rows_copy_place(w, pc->at);
    pc->at += bytes;
    release_source(pc, w, source);
}

static void forget_packed(kvs_wmat *w, void *arg) {
    (void)arg;
    w->packed = NULL; /* (a copied matrix's data goes with the model) */
    w->tiles = NULL;
}

static void unpack_alone(kvs_wmat *w, void *arg) {
    (void)arg;
    kvs_wmat_unpack(w);
}

typedef struct span_list {
    kvs_mem_span *s;
    int n;
} span_list;

static void add_source_span(kvs_wmat *w, void *arg) {
    span_list *l = arg;
    if (w->data) l->s[l->n++] = (kvs_mem_span){w->data, w->row_bytes * (size_t)w->n};
}

static void set_far_rows(kvs_wmat *w, void *arg) { w->far_rows = *(const int *)arg; }

/* Whether a decode step reads the streamed matrices from DRAM (all of
 * them together against the last-level cache, measured where they seem to
 * fit): their far prefetch. */
static void choose_far_prefetch(kvs_model *m) {
    span_list l = {malloc(sizeof(kvs_mem_span) * ((size_t)m->hp.n_layer * STREAMED_PER_LAYER + 1)), 0};
    int far = 0; /* without the list (no memory): off, as for a cached model */
    if (l.s) {
        for_each_streamed(m, add_source_span, &l);
        far = kvs_far_prefetch_rows(l.s, l.n);
        free(l.s);
    }
    m->far_rows = far;
    for_each_streamed(m, set_far_rows, &far);
}

/* The far prefetch, checked where the rules above turn it on: how it pays
 * depends on the machine's state as well as on the sizes (SmolLM2 and
 * gemma3 decode on a Xeon VM whose host was busy, 1 thread, paired runs:
 * 1.02-1.11x faster without it, where quiet Xeons gained 10-20% with it),
 * so the load times one decode step's matmuls (m = 1 over every streamed
 * matrix, packed as a step reads them) without it and with it, alternating,
 * and keeps it where its best round beat the best round without it. (It
 * had been kept unless slower in every round: on a Zen 5 VM, whose decode
 * loses with it, one round of two lost to a preempted pass now and then
 * and the step stayed on the slower way, e.g. 9.81 ms against 9.24, and
 * SmolLM2 Q4_0 decode at 169 tok/s against 200 the run before.) Speed
 * only: the bits are the same either way. */
#define FAR_CHECK_ROUNDS 3

typedef struct far_sweep {
    float *x, *y;
    void *work;
    int k, n;
    size_t work_bytes;
} far_sweep;

static void sweep_size(kvs_wmat *w, void *arg) {
    far_sweep *s = arg;
    if (w->k > s->k) s->k = w->k;
    if (w->n > s->n) s->n = w->n;
    const size_t b = kvs_matmul_work_size(w, 1);
    if (b > s->work_bytes) s->work_bytes = b;
}

static void sweep_one(kvs_wmat *w, void *arg) {
    far_sweep *s = arg;
    kvs_matmul(NULL, w, s->x, 1, s->y, s->work);
}

static double sweep_ms(kvs_model *m, far_sweep *s, int far) {
    for_each_streamed(m, set_far_rows, &far);
    const double t0 = kvs_now_ms();
    for_each_streamed(m, sweep_one, s);
    return kvs_now_ms() - t0;
}

static void check_far_prefetch(kvs_model *m) {
    const int far = m->far_rows;
    if (!far || kvs_far_prefetch_forced() || !strcmp(kvs_kernels_isa(), "scalar")) return;
    far_sweep s = {0};
    for_each_streamed(m, sweep_size, &s);
    s.x = malloc(sizeof(float) * (size_t)s.k);
    s.y = malloc(sizeof(float) * (size_t)s.n);
    s.work = malloc(s.work_bytes + 64);
    if (s.x && s.y && s.work) {
        for (int i = 0; i < s.k; i++) s.x[i] = (float)(i * 37 % 61 - 30) / 16.0f;
        (void)sweep_ms(m, &s, far); /* both start from the same place in the caches */
        double with = 0, without = 0; /* the best round of each */
        for (int r = 0; r < FAR_CHECK_ROUNDS; r++) {
            const double off = sweep_ms(m, &s, 0), on = sweep_ms(m, &s, far);
            if (!r || on < with) with = on;
            if (!r || off < without) without = off;
        }
        m->far_check_ms[0] = with;
        m->far_check_ms[1] = without;
        if (with >= without) m->far_rows = 0;
    }
    free(s.x);
    free(s.y);
    free(s.work);
    for_each_streamed(m, set_far_rows, &m->far_rows);
}

int kvs_model_far_prefetch(const kvs_model *m, double ms[2]) {
    if (ms) {
        ms[0] = m ? m->far_check_ms[0] : 0;
        ms[1] = m ? m->far_check_ms[1] : 0;
    }
    return m ? m->far_rows : 0;
}

void kvs_model_pack_weights(kvs_model *m) {
    choose_far_prefetch(m); /* whether or not anything is packed */
    size_t total = 0;
    for_each_streamed(m, add_bytes, &total);
    if (!total) return;
    m->pack_arena = kvs_huge_alloc(total);
    pack_cursor pc = {m->pack_arena, m->gguf};
    for_each_streamed(m, pack_one, &pc);
    if (pc.at) for_each_streamed(m, copy_rows_one, &pc);
    check_far_prefetch(m);
}

void kvs_model_unpack_weights(kvs_model *m) {
    if (!m->pack_arena) {
        for_each_streamed(m, unpack_alone, NULL);
        return;
    }
    for_each_streamed(m, forget_packed, NULL);
    free(m->pack_arena);
    m->pack_arena = NULL;
}
