/*
 * Byte-level BPE: pre-tokenize into words, map each byte to its byte-level
 * token, then merge adjacent pairs by rank.
 *
 * Per word, the symbols form a doubly linked list over the word's byte
 * positions; candidate pairs sit in a binary min-heap ordered by (rank, left
 * position), so the lowest-ranked pair, leftmost among equals, merges first
 * (the order of the reference implementation). A merge adds at most two new
 * candidates; entries made stale by an earlier merge are recognised on pop
 * and dropped. O(n log n) per word instead of rescanning after each merge.
 * Words repeated within one call come from a per-call word cache.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

typedef struct bpe_cand {
    int32_t rank;
    int32_t left, right; /* symbol positions */
    int32_t a, b;        /* their ids when pushed (to detect staleness) */
    int32_t merged;
} bpe_cand;

typedef struct bpe_scratch {
    int32_t *id, *prev, *next; /* (max_word) per symbol; id -2 = merged away */
    bpe_cand *heap;            /* (3 * max_word) */
    int n_heap;
    char *bl;                  /* (2 * max_word) byte-level text, for ignore_merges */
} bpe_scratch;

static int cand_less(const bpe_cand *x, const bpe_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(bpe_scratch *s, bpe_cand c) {
    int i = s->n_heap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static bpe_cand heap_pop(bpe_scratch *s) {
    bpe_cand top = s->heap[0], last = s->heap[--s->n_heap];
    int n = s->n_heap, i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static void try_pair(const kvs_tokenizer *t, bpe_scratch *s, int left, int right) {
    if (left < 0 || right < 0) return;
    int32_t a = s->id[left], b = s->id[right];
    if (a < 0 || b < 0) return;
    const kvs_merge_slot *m = kvs_tok_merge(t, a, b);
    if (!m) return;
    heap_push(s, (bpe_cand){m->rank, left, right, a, b, m->id});
}

/* Byte-level-maps w[0..n) into s->bl; returns its length. */
static size_t byte_level(const unsigned char *w, int n, char *bl) {
    size_t k = 0;
    for (int i = 0; i < n; i++) k += (size_t)kvs_utf8_encode(kvs_byte_to_cp(w[i]), bl + k);
    return k;
}

/* BPE of one word w[0..n); writes its ids to res (room for n) and returns
 * their count. */
static int bpe_word(const kvs_tokenizer *t, bpe_scratch *s, const unsigned char *w, int n, int32_t *res) {
    if (n == 1) {
        if (t->byte_tok[w[0]] < 0) return 0;
        res[0] = t->byte_tok[w[0]];
        return 1;
    }
    if (t->ignore_merges) {
        int32_t id = kvs_tok_lookup(t, s->bl, byte_level(w, n, s->bl));
        if (id >= 0) {
            res[0] = id;
            return 1;
        }
    }
    for (int i = 0; i < n; i++) {
        s->id[i] = t->byte_tok[w[i]];
        s->prev[i] = i - 1;
        s->next[i] = i + 1 < n ? i + 1 : -1;
    }
    s->n_heap = 0;
    for (int i = 0; i + 1 < n; i++) {
        int k = (int)w[i] << 8 | w[i + 1];
        if (t->byte_pairs[k].rank >= 0)
            heap_push(s, (bpe_cand){t->byte_pairs[k].rank, i, i + 1, s->id[i], s->id[i + 1], t->byte_pairs[k].id});
    }
    while (s->n_heap > 0) {
        bpe_cand c = heap_pop(s);
        if (s->id[c.left] != c.a || s->next[c.left] != c.right || s->id[c.right] != c.b) continue;
        s->id[c.left] = c.merged;
        s->id[c.right] = -2;
        int nx = s->next[c.right];
        s->next[c.left] = nx;
        if (nx >= 0) s->prev[nx] = c.left;
        try_pair(t, s, s->prev[c.left], c.left);
        try_pair(t, s, c.left, nx);
    }
    /* A byte whose byte-level character is not in the vocabulary (never the
     * case for real byte-level vocabularies) has id -1 and is dropped. */
    int k = 0;
    for (int i = 0; i >= 0; i = s->next[i])
        if (s->id[i] >= 0) res[k++] = s->id[i];
    return k;
}

/* Per-call cache of the ids of words already seen in this text (a RAG
 * passage repeats ~40% of its word bytes). Open addressing keyed by the
 * word's bytes; the ids live in one array of at most len entries (a word
 * never has more tokens than bytes). */
typedef struct word_cache {
    struct { int32_t off, len, ids_off, n_ids; } *slot; /* off -1 = empty */
    uint32_t mask;
    int32_t *ids;
    int32_t n_ids;
} word_cache;

#define WC_MAX_WORD 64

static void encode_word(const kvs_tokenizer *t, bpe_scratch *s, word_cache *wc, const unsigned char *u,
                        int off, int n, kvs_tok_out *o) {
    const unsigned char *w = u + off;
    uint32_t h = 0;
    if (n >= 2 && n <= WC_MAX_WORD) {
        h = kvs_tok_hash((const char *)w, (size_t)n) & wc->mask;
        for (;; h = (h + 1) & wc->mask) {
            if (wc->slot[h].off < 0) break;
            if (wc->slot[h].len == n && memcmp(u + wc->slot[h].off, w, (size_t)n) == 0) {
                for (int i = 0; i < wc->slot[h].n_ids; i++) kvs_tok_push(o, wc->ids[wc->slot[h].ids_off + i]);
                return;
            }
        }
    }
    int32_t *res = wc->ids + wc->n_ids;
    int k = bpe_word(t, s, w, n, res);
    for (int i = 0; i < k; i++) kvs_tok_push(o, res[i]);
    if (n >= 2 && n <= WC_MAX_WORD) {
        wc->slot[h].off = off;
        wc->slot[h].len = n;
        wc->slot[h].ids_off = wc->n_ids;
        wc->slot[h].n_ids = k;
        wc->n_ids += k; /* keep them: the cache refers to them */
    }
}

int kvs_bpe_encode(const kvs_tokenizer *t, const char *text, size_t len, kvs_tok_out *o) {
    if (len == 0) return KVS_OK;
    /* Code points, their classes and byte offsets; the text is valid UTF-8
     * (checked by the caller), so there are at most len code points. */
    size_t ncap = len + 1;
    uint32_t *cps = malloc(ncap * sizeof *cps);
    uint8_t *fl = malloc(ncap);
    int32_t *offs = malloc(ncap * sizeof *offs);
    int32_t *ends = malloc(ncap * sizeof *ends);
    bpe_scratch s = {0};
    word_cache wc = {0};
    int st = KVS_OK;
    if (!cps || !fl || !offs || !ends) {
        st = kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    const unsigned char *u = (const unsigned char *)text;
    int n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = kvs_utf8_decode(u + i, len - i, &cp);
        if (l == 0) { cp = 0xFFFD; l = 1; } /* unreachable for validated text */
        cps[n] = cp;
        fl[n] = (uint8_t)kvs_uc_flags(cp);
        offs[n] = (int32_t)i;
        n++;
        i += (size_t)l;
    }
    offs[n] = (int32_t)len;
    int nw = kvs_pretok_split(t->pre, cps, fl, n, ends);

    int max_word = 1, start = 0;
    for (int k = 0; k < nw; k++) {
        int wl = offs[ends[k]] - offs[start];
        if (wl > max_word) max_word = wl;
        start = ends[k];
    }
    s.id = malloc((size_t)max_word * sizeof *s.id);
    s.prev = malloc((size_t)max_word * sizeof *s.prev);
    s.next = malloc((size_t)max_word * sizeof *s.next);
    s.heap = malloc((size_t)max_word * 3 * sizeof *s.heap);
    s.bl = malloc((size_t)max_word * 2);
    uint32_t wcap = 16;
    while (wcap < 2u * (uint32_t)nw) wcap <<= 1;
    wc.mask = wcap - 1;
    wc.slot = malloc((size_t)wcap * sizeof *wc.slot);
    wc.ids = malloc(ncap * sizeof *wc.ids);
    if (!s.id || !s.prev || !s.next || !s.heap || !s.bl || !wc.slot || !wc.ids) {
        st = kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    for (uint32_t i = 0; i < wcap; i++) wc.slot[i].off = -1;
    start = 0;
    for (int k = 0; k < nw; k++) {
        int b0 = offs[start], b1 = offs[ends[k]];
        encode_word(t, &s, &wc, u, b0, b1 - b0, o);
        start = ends[k];
    }
done:
    free(cps);
    free(fl);
    free(offs);
    free(ends);
    free(s.id);
    free(s.prev);
    free(s.next);
    free(s.heap);
    free(s.bl);
    free(wc.slot);
    free(wc.ids);
    return st;
}
