/*
 * The attention KV of one sequence: every layer's keys and values, one slot
 * per absolute position. The forward pass writes slot = position in place and
 * attention reads slots 0..pos; the reuse layers copy, move and compare slots.
 *
 *   data: +----------- layer 0 ------------+----------- layer 1 ---- ...
 *         | K (n_kv_head, n_ctx, head_dim) | V (n_kv_head, n_ctx, head_dim) | K ...
 *         +--------------------------------+--------------------------------+
 *
 * A slot of one head is one KV row of kvs_kv_type (kernels.h: head_dim F16
 * or F32 elements, or Q8's head_dim levels and a scale), row_bytes long; a
 * head's slots are contiguous, so
 * a range of positions of one (layer, K/V, head) is one contiguous run.
 *
 * A Q8 buffer also keeps its rows' decode layout (kernels.h
 * kvs_attn_layout) where the kernels read one: a copy that decode steps
 * build per 16 final slots (kvs_kv_layout_for), so that each step does not
 * transpose again every row that did not change. Every writer of slots
 * calls kvs_kv_wrote, which marks the copy from there on not built.
 */
#ifndef KVS_MODEL_KV_BUFFER_H
#define KVS_MODEL_KV_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kvstitch.h"

/* The decode layout of a buffer's layers: data NULL until a decode step
 * needs it (as much memory as the rows, touched only as slots get built);
 * layer l's slots [base[l], built[l]) mirror its rows. A cache, updated through
 * the pointer of a const buffer by its readers (kvs_kv_layout_for) and its
 * writers (kvs_kv_wrote). */
typedef struct kvs_kv_layout {
    void *data;         /* (n_layer, n_kv_head) heads of kvs_attn_layout_head_bytes */
    void *raw;          /* data's allocation (data: raw aligned to 64 bytes) */
    size_t layer_bytes; /* n_kv_head heads */
    int *built, *base;  /* (n_layer) each: slots [base, built) built, multiples of 16 */
    int off;            /* allocation failed: decode reads the rows */
} kvs_kv_layout;

/* What a context's slots [0, len) hold exactly: the KV that a cold prefill
 * of tok[0..len) writes (kvs_decode in order from slot 0, a prefix lookup
 * into the buffer), so that kvs_cache_store_context stores nothing else
 * under those tokens' keys (slots never written, or holding moved or
 * repaired documents, had been stored as exact KV). Every write lowers len
 * to its first slot (kvs_kv_wrote); only those exact writers raise it
 * (kvs_kv_exact_extend). */
typedef struct kvs_kv_exact {
    int len;
    int32_t *tok; /* (n_ctx) */
} kvs_kv_exact;

/* Which slots of a context were ever written (a forward's store, a copy, a
 * move, a disk read), so that kvs_decode refuses a token that would attend
 * to a slot that never was: it held the buffer's zeros, and the output was
 * garbage without a word. Slots [0, filled) are all written; bits holds
 * every slot's flag. A written slot stays written (what it holds is the
 * caller's business: another sequence's KV is still KV). */
typedef struct kvs_kv_written {
    int filled;
    uint64_t bits[]; /* (n_ctx / 64 + 1) */
} kvs_kv_written;

typedef struct kvs_kv_buffer {
    int n_layer, n_kv_head, n_ctx, head_dim;
    kvs_kv_type type;
    size_t row_bytes;    /* one slot of one head: kvs_kv_row_bytes(type, head_dim) */
    size_t head_bytes;   /* bytes of one head's slots: n_ctx * row_bytes */
    size_t plane_bytes;  /* bytes of one layer's K (== its V): n_kv_head * head_bytes */
    void *data;          /* (n_layer, 2, n_kv_head, n_ctx, head_dim), zero-filled */
    /* Moved documents at slots [recal.lo, recal.hi) that later rows attend to
     * recalibrated (APE); set after the assembly of a request, ended by any
     * write before its end (kvs_kv_recal_end). Zero: none. */
    kvs_attn_recal recal;
    kvs_kv_layout *layout; /* NULL: the kernels read no layout of these rows */
    kvs_kv_exact *exact;   /* a context's (kvs_kv_buffer_track_exact); NULL: not tracked */
    kvs_kv_written *written; /* a context's (kvs_kv_buffer_track_written); NULL: not tracked */
} kvs_kv_buffer;

/* Allocates a zeroed buffer (pages are touched only as slots get written). */
int kvs_kv_buffer_init(kvs_kv_buffer *kv, int n_layer, int n_kv_head, int n_ctx, int head_dim,
                       kvs_kv_type type);
void kvs_kv_buffer_release(kvs_kv_buffer *kv); /* safe on a zeroed struct */
/* Starts tracking which slots hold exact prefix KV (kvs_kv_exact). */
int kvs_kv_buffer_track_exact(kvs_kv_buffer *kv);
size_t kvs_kv_buffer_bytes(const kvs_kv_buffer *kv);
/* Starts tracking which slots were written (kvs_kv_written). */
int kvs_kv_buffer_track_written(kvs_kv_buffer *kv);
/* Every slot counts as never written again (a test's poisoned buffer: the
 * writers after it must mark what they write). */
static inline void kvs_kv_forget_written(kvs_kv_buffer *kv) {
    if (!kv->written) return;
    memset(kv->written->bits, 0, ((size_t)kv->n_ctx / 64 + 1) * sizeof(uint64_t));
    kv->written->filled = 0;
}
/* Slots [slot, slot + n) / the m slots at pos were written (in every layer). */
void kvs_kv_mark_run(const kvs_kv_buffer *kv, int slot, int n);
void kvs_kv_mark_slots(const kvs_kv_buffer *kv, const int32_t *pos, int m);
/* The first slot below hi that was never written, nor is among
 * pos[0..n_own) (the slots a call wrote before the tokens that attend to
 * them: its own chunk's and the chunks before); -1 when none (or not
 * tracked). */
int kvs_kv_first_unwritten(const kvs_kv_buffer *kv, const int32_t *pos, int n_own, int hi);

/* A write to slot pos (a forward, a copy, a move) starts another sequence
 * there when pos is before the recalibrated documents' end: they end too. */
static inline void kvs_kv_recal_end(kvs_kv_buffer *kv, int pos) {
    if (pos < kv->recal.hi) memset(&kv->recal, 0, sizeof kv->recal);
}

/* Slots from slot on of layer l (l < 0: of every layer) were written: the
 * decode layout holds them no longer. */
static inline void kvs_kv_wrote(const kvs_kv_buffer *kv, int l, int slot) {
    if (kv->exact && kv->exact->len > (slot < 0 ? 0 : slot)) kv->exact->len = slot < 0 ? 0 : slot;
    kvs_kv_layout *ly = kv->layout;
    if (!ly) return;
    const int lo = slot < 0 ? 0 : slot & ~15;
    for (int i = l < 0 ? 0 : l; i < (l < 0 ? kv->n_layer : l + 1); i++)
        if (ly->built[i] > lo) ly->built[i] = lo > ly->base[i] ? lo : ly->base[i];
}

/* An exact writer wrote tokens[0..n) at slots pos[0..n) (after
 * kvs_kv_wrote): they extend the exact slots when they run on from within
 * them in order, one slot each (other batches extend nothing). */
static inline void kvs_kv_exact_extend(const kvs_kv_buffer *kv, const int32_t *tokens, const int32_t *pos, int n) {
    kvs_kv_exact *e = kv->exact;
    if (!e || n <= 0 || pos[0] > e->len) return;
    for (int i = 1; i < n; i++)
        if (pos[i] != pos[0] + i) return;
    memcpy(e->tok + pos[0], tokens, (size_t)n * sizeof *tokens);
    e->len = pos[0] + n;
}

/* Of tokens[0..n), how many lead the exact slots. */
static inline int kvs_kv_exact_match(const kvs_kv_buffer *kv, const int32_t *tokens, int n) {
    const kvs_kv_exact *e = kv->exact;
    int k = 0;
    while (e && k < n && k < e->len && e->tok[k] == tokens[k]) k++;
    return k;
}

/* Layer l's decode layout with its slots up to n & ~15 built (slots [0, n)
 * being final: a decode step's, with group query heads a kv head), from
 * slot 0 on, or from the step's window on (window > 0), in *out;
 * NULL where the kernels read none
 * (or its memory could not be had: the decode reads the rows, the same
 * bits). With KVSTITCH_VERIFY_KV_LAYOUT=1 in the environment (the tests),
 * every call first checks the slots built before against the rows and
 * aborts on a difference: a writer that did not call kvs_kv_wrote. */
const kvs_attn_layout *kvs_kv_layout_for(const kvs_kv_buffer *kv, int l, int n, int group, int window,
                                         kvs_attn_layout *out);

/* Layer l's K or V plane: (n_kv_head, n_ctx) rows. */
static inline void *kvs_kv_k(const kvs_kv_buffer *kv, int l) {
    return (char *)kv->data + (size_t)l * 2 * kv->plane_bytes;
}
static inline void *kvs_kv_v(const kvs_kv_buffer *kv, int l) {
    return (char *)kv->data + ((size_t)l * 2 + 1) * kv->plane_bytes;
}
/* Address of (layer l, plane 0=K / 1=V, head h, slot pos). */
static inline void *kvs_kv_at(const kvs_kv_buffer *kv, int l, int plane, int h, int pos) {
    return (char *)kv->data + ((size_t)l * 2 + (size_t)plane) * kv->plane_bytes + (size_t)h * kv->head_bytes +
           (size_t)pos * kv->row_bytes;
}

#endif
