/*
 * SentencePiece-style tokenization, compatible with llama.cpp's SPM
 * tokenizer (which matches the reference tokenizers on its test vectors):
 *
 *   1. spaces become U+2581 ("▁"); a "▁" is prepended when asked (the
 *      leading-space rule, per tokenizer.ggml.add_space_prefix);
 *   2. the text is split into UTF-8 characters, the initial symbols;
 *   3. every adjacent pair whose concatenation is a vocabulary token is a
 *      candidate, scored by that token's score; the best (ties: leftmost)
 *      merges first, and new candidates with its neighbours are added;
 *   4. a final symbol that is not a token (a character outside the
 *      vocabulary) falls back to its bytes as <0xXX> tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

typedef struct spm_sym {
    int32_t off, n;   /* bytes of the escaped text; n = 0: merged away */
    int32_t prev, next;
} spm_sym;

typedef struct spm_cand {
    float score;
    int32_t left, right;
    int32_t size;     /* bytes of the pair when pushed (detects stale entries) */
} spm_cand;

/* Max-heap on score; ties go to the smaller left position. */
static int cand_before(const spm_cand *x, const spm_cand *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

typedef struct spm_state {
    const kvs_tokenizer *t;
    const char *text;
    spm_sym *sym;
    spm_cand *heap;
    int n_heap;
} spm_state;

static void heap_push(spm_state *s, spm_cand c) {
    int i = s->n_heap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_before(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static spm_cand heap_pop(spm_state *s) {
    spm_cand top = s->heap[0], last = s->heap[--s->n_heap];
    int n = s->n_heap, i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static void try_bigram(spm_state *s, int left, int right) {
    if (left < 0 || right < 0) return;
    int32_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = kvs_tok_lookup(s->t, s->text + s->sym[left].off, (size_t)size);
    if (id < 0) return;
    heap_push(s, (spm_cand){s->t->scores[id], left, right, size});
}

static void emit_symbol(const kvs_tokenizer *t, const char *p, int n, kvs_tok_out *o) {
    int32_t id = kvs_tok_lookup(t, p, (size_t)n);
    if (id >= 0) {
        kvs_tok_push(o, id);
        return;
    }
    for (int j = 0; j < n; j++) {
        int32_t b = t->byte_tok[(unsigned char)p[j]];
        /* No byte token either: <unk> if there is one, else nothing. */
        if (b < 0) b = t->unk;
        if (b >= 0) kvs_tok_push(o, b);
    }
}

int kvs_spm_encode(const kvs_tokenizer *t, const char *text, size_t len, int add_prefix,
                   kvs_tok_out *o) {
    static const char ws[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */
    size_t n_sp = add_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) n_sp += text[i] == ' ';
    size_t elen = len + 2 * n_sp + (add_prefix ? 1 : 0);
    char *esc = malloc(elen ? elen : 1);
    spm_sym *sym = malloc((elen ? elen : 1) * sizeof *sym);
    spm_cand *heap = malloc((elen ? 3 * elen : 1) * sizeof *heap);
    int st = KVS_OK;
    if (!esc || !sym || !heap) {
        st = kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t k = 0;
    if (add_prefix) { memcpy(esc, ws, 3); k = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(esc + k, ws, 3); k += 3; }
        else esc[k++] = text[i];
    }

    /* One symbol per UTF-8 character (the text is valid UTF-8). */
    int n = 0;
    for (size_t i = 0; i < elen;) {
        int l = kvs_utf8_seq_len((unsigned char)esc[i]);
        if (l == 0 || (size_t)l > elen - i) l = 1;
        sym[n] = (spm_sym){(int32_t)i, l, n - 1, i + (size_t)l < elen ? n + 1 : -1};
        n++;
        i += (size_t)l;
    }
    spm_state s = {t, esc, sym, heap, 0};
    for (int i = 1; i < n; i++) try_bigram(&s, i - 1, i);
    while (s.n_heap > 0) {
        spm_cand c = heap_pop(&s);
        spm_sym *l = &sym[c.left], *r = &sym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        try_bigram(&s, l->prev, c.left);
        try_bigram(&s, c.left, l->next);
    }
    for (int i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) emit_symbol(t, esc + sym[i].off, sym[i].n, o);
done:
    free(esc);
    free(sym);
    free(heap);
    return st;
}
