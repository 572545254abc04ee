/*
 * kvs_tokenizer_encode: validate UTF-8, add BOS, cut the text at special
 * tokens (leftmost, then longest match), and hand the plain fragments to
 * the model's algorithm (bpe.c / spm.c).
 *
 * Which special tokens are recognised in text (as llama.cpp and the HF
 * tokenizers do): USER_DEFINED tokens always; CONTROL and UNKNOWN tokens
 * only with KVS_TOKENIZE_PARSE_SPECIAL. Without it "<|im_start|>" is just
 * text and tokenizes into ordinary pieces.
 */
#include <limits.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

/* The first of special[lo, hi) (all longer than k bytes, sharing their
 * first k, so sorted by byte k) whose byte k is at least c. */
static int first_byte_at_least(const kvs_tokenizer *t, int lo, int hi, size_t k, unsigned char c) {
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((unsigned char)t->text[t->special[mid]][k] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Longest special token starting at text[i], -1 if none: the range of
 * specials whose first k bytes are the text's narrows byte by byte, those
 * of exactly k bytes first in it. O(its length x log(specials)) a
 * position: scanning every special of the first byte had made 1 MB of
 * '<' take 11 s on gemma3 (6,321 specials begin with '<'). */
static int32_t special_at(const kvs_tokenizer *t, const char *text, size_t len, size_t i,
                          int parse_special) {
    const unsigned char b = (unsigned char)text[i];
    int lo = t->special_start[b], hi = t->special_start[b + 1];
    int32_t best = -1;
    for (size_t k = 1; lo < hi; k++) {
        int found = 0;
        for (; lo < hi && t->text_len[t->special[lo]] == k; lo++) { /* the text's first k bytes exactly */
            const int32_t id = t->special[lo];
            if (!found && (parse_special || t->ttype[id] == KVS_TT_USER_DEFINED)) best = id, found = 1;
        }
        if (i + k >= len) break;
        const unsigned char c = (unsigned char)text[i + k];
        lo = first_byte_at_least(t, lo, hi, k, c);
        hi = c == 255 ? hi : first_byte_at_least(t, lo, hi, k, (unsigned char)(c + 1));
    }
    return best;
}

static int encode_fragment(const kvs_tokenizer *t, const char *text, size_t len, int after_special,
                           kvs_tok_out *o) {
    if (t->type == KVS_TOK_SPM) return kvs_spm_encode(t, text, len, t->add_space_prefix && after_special, o);
    return kvs_bpe_encode(t, text, len, o);
}

int kvs_tokenizer_encode(const kvs_tokenizer *t, const char *text, size_t len, int flags,
                         int32_t *out, int cap, int *n_out) {
    if (!t || !n_out || (!text && len > 0) || cap < 0 || (!out && cap > 0))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_tokenize: %s",
                         !t ? "the model is NULL" : !n_out ? "n_out is NULL" : !text && len > 0 ? "text is NULL (with a length above 0)"
                         : cap < 0 ? "the capacity is negative" : "out is NULL (with a capacity above 0)");
    /* Every token but BOS/EOS and the SentencePiece prefix covers at least one
     * byte, so counts fit an int when len does. */
    if (len > (size_t)INT_MAX - 16)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_tokenize: text of %zu bytes is too long", len);
    if (flags & ~(KVS_TOKENIZE_ADD_BOS | KVS_TOKENIZE_PARSE_SPECIAL)) /* (had been ignored) */
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_tokenize: unknown flags 0x%x (KVS_TOKENIZE_ADD_BOS, "
                         "KVS_TOKENIZE_PARSE_SPECIAL)", (unsigned)flags);
    if (kvs_utf8_check(text, len)) return kvs_error_prefix(KVS_ERR_UTF8, "kvs_tokenize");

    kvs_tok_out o = {out, cap, 0};
    int add_special = (flags & KVS_TOKENIZE_ADD_BOS) != 0;
    int parse_special = (flags & KVS_TOKENIZE_PARSE_SPECIAL) != 0;
    /* ADD_BOS follows the model: BOS only if it has one and its GGUF says
     * to add it (add_bos_token; SmolLM2 says no), EOS likewise (as
     * llama.cpp's add_special). */
    if (add_special && t->add_bos && t->bos >= 0) kvs_tok_push(&o, t->bos);

    int st = KVS_OK, after_special = 1;
    size_t frag = 0;
    for (size_t i = 0; i < len && t->n_special > 0;) {
        int32_t id = special_at(t, text, len, i, parse_special);
        if (id < 0) {
            i++;
            continue;
        }
        if (i > frag) {
            if ((st = encode_fragment(t, text + frag, i - frag, after_special, &o))) return st;
        }
        kvs_tok_push(&o, id);
        after_special = 1;
        i += t->text_len[id];
        frag = i;
    }
    if (len > frag) {
        if ((st = encode_fragment(t, text + frag, len - frag, after_special, &o))) return st;
    }
    if (add_special && t->add_eos && t->eos >= 0) kvs_tok_push(&o, t->eos);

    *n_out = o.n;
    if (o.n > cap)
        return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "kvs_tokenize: %d tokens do not fit in %d", o.n, cap);
    return KVS_OK;
}
