/* Builds a kvs_tokenizer from the GGUF tokenizer.* keys: vocabulary, hash
 * tables, merges, special tokens and flags. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* Text of tokens that end a turn in the common chat formats; such a token is
 * end-of-generation whatever the GGUF's eos/eot keys say. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
    "<|end_of_text|>", "<|eom_id|>", "</s>",
};

int32_t kvs_tok_lookup(const kvs_tokenizer *t, const char *s, size_t n) {
    uint32_t h = kvs_tok_hash(s, n) & t->tok_mask;
    for (;;) {
        int32_t id = t->tok_slots[h];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(t->text[id], s, n) == 0) return id;
        h = (h + 1) & t->tok_mask;
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* Optional token id key: absent -> *out = dflt; present but out of range -> error. */
static int get_id(const kvs_gguf *g, const char *key, int n_vocab, int32_t dflt, int32_t *out) {
    int64_t v;
    int st = kvs_gguf_get_i64(g, key, &v);
    if (st == KVS_ERR_NOT_FOUND) { *out = dflt; return KVS_OK; }
    if (st) return st;
    if (v < 0 || v >= n_vocab) {
        /* Some converters write -1 or a large sentinel for "none". */
        if (v == -1 || v == 0xFFFFFFFFll) { *out = -1; return KVS_OK; }
        return kvs_error(KVS_ERR_FORMAT, "key %s: token id %lld is outside the vocabulary (%d tokens)",
                         key, (long long)v, n_vocab);
    }
    *out = (int32_t)v;
    return KVS_OK;
}

static int get_flag(const kvs_gguf *g, const char *key, int dflt, int *out) {
    int st = kvs_gguf_get_bool(g, key, out);
    if (st == KVS_ERR_NOT_FOUND) { *out = dflt; return KVS_OK; }
    return st;
}

static int load_tokens(kvs_tokenizer *t, const kvs_gguf *g) {
    kvs_gguf_vtype et;
    uint64_t n;
    int st = kvs_gguf_get_arr(g, KEY_TOKENS, &et, &n);
    if (st == KVS_ERR_NOT_FOUND) return kvs_error(KVS_ERR_FORMAT, "key %s is missing: the file has no vocabulary", KEY_TOKENS);
    if (st) return st;
    if (et != KVS_GGUF_STRING)
        return kvs_error(KVS_ERR_FORMAT, "key %s: expected an array of strings", KEY_TOKENS);
    if (n == 0 || n > INT32_MAX / 4)
        return kvs_error(KVS_ERR_FORMAT, "key %s: %llu tokens is not a usable vocabulary size",
                         KEY_TOKENS, (unsigned long long)n);
    t->n_vocab = (int)n;
    t->text = malloc(n * sizeof *t->text);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->ttype = malloc(n);
    t->eog = calloc(n, 1);
    if (!t->text || !t->text_len || !t->ttype || !t->eog)
        return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for %llu tokens", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        kvs_gguf_str s;
        st = kvs_gguf_get_arr_str(g, KEY_TOKENS, i, &s);
        if (st) return st;
        if (s.len > UINT32_MAX / 2)
            return kvs_error(KVS_ERR_FORMAT, "key %s: token %llu is too long", KEY_TOKENS, (unsigned long long)i);
        t->text[i] = s.ptr;
        t->text_len[i] = (uint32_t)s.len;
        t->ttype[i] = KVS_TT_NORMAL;
    }

    /* token_type: an integer array of the same length (absent = all normal). */
    st = kvs_gguf_get_arr(g, KEY_TYPES, &et, &n);
    if (st == KVS_OK) {
        const void *data;
        if (n != (uint64_t)t->n_vocab)
            return kvs_error(KVS_ERR_FORMAT, "key %s: %llu entries for %d tokens", KEY_TYPES,
                             (unsigned long long)n, t->n_vocab);
        if (et != KVS_GGUF_I32 && et != KVS_GGUF_U32)
            return kvs_error(KVS_ERR_FORMAT, "key %s: expected an array of i32", KEY_TYPES);
        st = kvs_gguf_get_arr_data(g, KEY_TYPES, &data);
        if (st) return st;
        for (int i = 0; i < t->n_vocab; i++) {
            int32_t v;
            memcpy(&v, (const char *)data + 4 * (size_t)i, 4);
            /* Unknown values are treated as normal tokens rather than refused. */
            t->ttype[i] = (v >= KVS_TT_NORMAL && v <= KVS_TT_BYTE) ? (uint8_t)v : KVS_TT_NORMAL;
        }
    } else if (st != KVS_ERR_NOT_FOUND) {
        return st;
    }

    /* scores (SentencePiece): an f32 array of the same length (absent = 0). */
    st = kvs_gguf_get_arr(g, KEY_SCORES, &et, &n);
    if (st == KVS_OK) {
        const void *data;
        if (n != (uint64_t)t->n_vocab)
            return kvs_error(KVS_ERR_FORMAT, "key %s: %llu entries for %d tokens", KEY_SCORES,
                             (unsigned long long)n, t->n_vocab);
        if (et != KVS_GGUF_F32) return kvs_error(KVS_ERR_FORMAT, "key %s: expected an array of f32", KEY_SCORES);
        st = kvs_gguf_get_arr_data(g, KEY_SCORES, &data);
        if (st) return st;
        t->scores = malloc((size_t)t->n_vocab * sizeof *t->scores);
        if (!t->scores) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for scores");
        memcpy(t->scores, data, (size_t)t->n_vocab * sizeof *t->scores);
    } else if (st != KVS_ERR_NOT_FOUND) {
        return st;
    } else if (t->type == KVS_TOK_SPM) {
        t->scores = calloc((size_t)t->n_vocab, sizeof *t->scores);
        if (!t->scores) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for scores");
    }
    return KVS_OK;
}

/* text -> id table. With duplicate texts the last id wins (as llama.cpp). */
static int build_text_table(kvs_tokenizer *t) {
    uint32_t cap = pow2_at_least((uint64_t)t->n_vocab * 2);
    t->tok_mask = cap - 1;
    t->tok_slots = malloc((size_t)cap * sizeof *t->tok_slots);
    if (!t->tok_slots) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for the vocabulary table");
    memset(t->tok_slots, 0xFF, (size_t)cap * sizeof *t->tok_slots);
    for (int id = 0; id < t->n_vocab; id++) {
        uint32_t h = kvs_tok_hash(t->text[id], t->text_len[id]) & t->tok_mask;
        for (;;) {
            int32_t o = t->tok_slots[h];
            if (o < 0) { t->tok_slots[h] = id; break; }
            if (t->text_len[o] == t->text_len[id] && memcmp(t->text[o], t->text[id], t->text_len[id]) == 0) {
                t->tok_slots[h] = id;
                break;
            }
            h = (h + 1) & t->tok_mask;
        }
    }
    return KVS_OK;
}

/* Merges "A B" -> (id(A), id(B)) -> (rank, id(AB)). A merge whose parts or
 * result are not in the vocabulary can never apply and is skipped. */
static int load_merges(kvs_tokenizer *t, const kvs_gguf *g) {
    kvs_gguf_vtype et;
    uint64_t n;
    int st = kvs_gguf_get_arr(g, KEY_MERGES, &et, &n);
    if (st == KVS_ERR_NOT_FOUND)
        return kvs_error(KVS_ERR_FORMAT, "key %s is missing (required by a byte-level BPE vocabulary)", KEY_MERGES);
    if (st) return st;
    if (et != KVS_GGUF_STRING) return kvs_error(KVS_ERR_FORMAT, "key %s: expected an array of strings", KEY_MERGES);
    if (n > INT32_MAX / 4) return kvs_error(KVS_ERR_FORMAT, "key %s: %llu merges is too many", KEY_MERGES, (unsigned long long)n);
    uint32_t cap = pow2_at_least(n * 2);
    t->merge_mask = cap - 1;
    t->merges = malloc((size_t)cap * sizeof *t->merges);
    if (!t->merges) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for %llu merges", (unsigned long long)n);
    for (uint32_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;

    char buf[512];
    for (uint64_t r = 0; r < n; r++) {
        kvs_gguf_str s;
        st = kvs_gguf_get_arr_str(g, KEY_MERGES, r, &s);
        if (st) return st;
        /* The separator is the first space after the first byte: byte-level
         * tokens never contain a raw space (it is U+0120). */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || s.len - 1 > sizeof buf) continue;
        size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
        int32_t a = kvs_tok_lookup(t, s.ptr, la), b = kvs_tok_lookup(t, sp + 1, lb);
        if (a < 0 || b < 0) continue;
        memcpy(buf, s.ptr, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t ab = kvs_tok_lookup(t, buf, la + lb);
        if (ab < 0) continue;
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        uint64_t h = kvs_merge_hash(key) & t->merge_mask;
        while (t->merges[h].key != UINT64_MAX && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
        if (t->merges[h].key == key) continue; /* a duplicate merge keeps its first (best) rank */
        t->merges[h].key = key;
        t->merges[h].rank = (int32_t)r;
        t->merges[h].id = ab;
        t->n_merges++;
    }
    return KVS_OK;
}

static void build_byte_tokens(kvs_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        int32_t id = -1;
        if (t->type == KVS_TOK_BPE) {
            int n = kvs_utf8_encode(kvs_byte_to_cp((unsigned)b), s);
            id = kvs_tok_lookup(t, s, (size_t)n);
        } else {
            static const char hex[] = "0123456789ABCDEF";
            memcpy(s, "<0x", 3);
            s[3] = hex[b >> 4];
            s[4] = hex[b & 15];
            s[5] = '>';
            id = kvs_tok_lookup(t, s, 6);
            if (id < 0) {
                s[0] = (char)b;
                id = kvs_tok_lookup(t, s, 1);
            }
        }
        t->byte_tok[b] = id;
    }
}

typedef struct special_key {
    unsigned char first;
    uint32_t len;
    int32_t id;
    const char *text;
} special_key;

static int build_byte_pairs(kvs_tokenizer *t) {
    t->byte_pairs = malloc(65536 * sizeof *t->byte_pairs);
    if (!t->byte_pairs) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < 65536; i++) {
        int32_t a = t->byte_tok[i >> 8], b = t->byte_tok[i & 255];
        const kvs_merge_slot *m = a >= 0 && b >= 0 ? kvs_tok_merge(t, a, b) : NULL;
        t->byte_pairs[i].rank = m ? m->rank : -1;
        t->byte_pairs[i].id = m ? m->id : -1;
    }
    return KVS_OK;
}

/* By their bytes, a text before its extensions (so by first byte too), the
 * same text by id: special_at narrows a range byte by byte. */
static int special_cmp(const void *pa, const void *pb) {
    const special_key *a = pa, *b = pb;
    const uint32_t n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->text, b->text, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

static int is_special_type(uint8_t ty) {
    return ty == KVS_TT_CONTROL || ty == KVS_TT_USER_DEFINED || ty == KVS_TT_UNKNOWN;
}

static int build_specials(kvs_tokenizer *t) {
    int n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->ttype[id]) && t->text_len[id] > 0) n++;
    special_key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!keys || !t->special) {
        free(keys);
        return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory for special tokens");
    }
    n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->ttype[id]) && t->text_len[id] > 0)
            keys[n++] = (special_key){(unsigned char)t->text[id][0], t->text_len[id], id, t->text[id]};
    qsort(keys, (size_t)n, sizeof *keys, special_cmp);
    for (int i = 0; i < n; i++) t->special[i] = keys[i].id;
    t->n_special = n;
    int j = 0;
    for (int b = 0; b < 256; b++) {
        t->special_start[b] = j;
        while (j < n && keys[j].first == b) j++;
    }
    t->special_start[256] = n;
    free(keys);
    return KVS_OK;
}

static void mark_eog(kvs_tokenizer *t) {
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = kvs_tok_lookup(t, eog_texts[i], strlen(eog_texts[i]));
        /* Only as a special token: a normal token with such text is plain text. */
        if (id >= 0 && t->ttype[id] != KVS_TT_NORMAL) t->eog[id] = 1;
    }
}

static int tokenizer_init(kvs_tokenizer *t, const kvs_gguf *g) {
    kvs_gguf_str s;
    int st = kvs_gguf_get_str(g, KEY_MODEL, &s);
    if (st == KVS_ERR_NOT_FOUND) return kvs_error(KVS_ERR_FORMAT, "key %s is missing: the file has no tokenizer", KEY_MODEL);
    if (st) return st;
    if (kvs_gguf_str_eq(s, "gpt2")) t->type = KVS_TOK_BPE;
    else if (kvs_gguf_str_eq(s, "llama")) t->type = KVS_TOK_SPM;
    else
        return kvs_error(KVS_ERR_UNSUPPORTED, "key %s: tokenizer model '%.*s' is not supported (only gpt2, llama)",
                         KEY_MODEL, (int)(s.len > 40 ? 40 : s.len), s.ptr);
    strcpy(t->model_name, t->type == KVS_TOK_BPE ? "gpt2" : "llama");

    st = kvs_gguf_get_str(g, KEY_PRE, &s);
    if (st && st != KVS_ERR_NOT_FOUND) return st;
    if (st) s.len = 0;
    t->pre_name = malloc(s.len + 1);
    if (!t->pre_name) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory");
    if (s.len) memcpy(t->pre_name, s.ptr, s.len);
    t->pre_name[s.len] = 0;
    /* An absent or unknown pre-tokenizer falls back to the GPT-2 split (see
     * kvs_pretok_from_name): tokens may then differ from the model's
     * reference tokenizer, but every text still encodes. */
    t->pre = kvs_pretok_from_name(t->pre_name, NULL);
    /* Llama-3's tokenizer.json sets ignore_merges: a word that is a whole
     * token is taken as is, even when merges would split it differently. */
    t->ignore_merges = t->type == KVS_TOK_BPE && t->pre == KVS_PRETOK_LLAMA3;

    if ((st = load_tokens(t, g))) return st;
    if ((st = build_text_table(t))) return st;
    if (t->type == KVS_TOK_BPE && (st = load_merges(t, g))) return st;
    build_byte_tokens(t);
    if (t->type == KVS_TOK_BPE && (st = build_byte_pairs(t))) return st;
    if ((st = build_specials(t))) return st;

    int spm = t->type == KVS_TOK_SPM, n = t->n_vocab;
    /* Defaults where the keys are absent follow llama.cpp: SentencePiece
     * vocabularies use <unk>=0, <s>=1, </s>=2 and add BOS and a space prefix. */
    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", n, spm && n > 1 ? 1 : -1, &t->bos))) return st;
    if ((st = get_id(g, "tokenizer.ggml.eos_token_id", n, spm && n > 2 ? 2 : -1, &t->eos))) return st;
    if ((st = get_id(g, "tokenizer.ggml.eot_token_id", n, -1, &t->eot))) return st;
    if ((st = get_id(g, "tokenizer.ggml.eom_token_id", n, -1, &t->eom))) return st;
    if ((st = get_id(g, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1, &t->unk))) return st;
    if ((st = get_flag(g, "tokenizer.ggml.add_bos_token", spm || t->pre == KVS_PRETOK_LLAMA3, &t->add_bos))) return st;
    if ((st = get_flag(g, "tokenizer.ggml.add_eos_token", 0, &t->add_eos))) return st;
    if ((st = get_flag(g, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix))) return st;
    mark_eog(t);
    return KVS_OK;
}

int kvs_tokenizer_new(const kvs_gguf *g, kvs_tokenizer **out) {
    if (!g || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_tokenizer_new: NULL argument");
    kvs_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kvs_error(KVS_ERR_NOMEM, "tokenizer: out of memory");
    int st = tokenizer_init(t, g);
    if (st) {
        kvs_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KVS_OK;
}

void kvs_tokenizer_free(kvs_tokenizer *t) {
    if (!t) return;
    free(t->pre_name);
    free(t->text);
    free(t->text_len);
    free(t->scores);
    free(t->ttype);
    free(t->eog);
    free(t->tok_slots);
    free(t->merges);
    free(t->byte_pairs);
    free(t->special);
    free(t);
}

int kvs_tokenizer_n_vocab(const kvs_tokenizer *t) { return t->n_vocab; }
int32_t kvs_tokenizer_bos(const kvs_tokenizer *t) { return t->bos; }
int32_t kvs_tokenizer_eos(const kvs_tokenizer *t) { return t->eos; }
int32_t kvs_tokenizer_eot(const kvs_tokenizer *t) { return t->eot; }
int kvs_tokenizer_add_bos(const kvs_tokenizer *t) { return t->add_bos; }
const char *kvs_tokenizer_model_name(const kvs_tokenizer *t) { return t->model_name; }
const char *kvs_tokenizer_pre_name(const kvs_tokenizer *t) { return t->pre_name; }

int kvs_tokenizer_is_eog(const kvs_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int32_t kvs_tokenizer_find(const kvs_tokenizer *t, const char *text) {
    if (!text) return -1;
    return kvs_tok_lookup(t, text, strlen(text));
}
