/*
 * Private state of a kvs_tokenizer, shared by the files of src/tokenizer/.
 *
 * Vocabulary lookups:
 *   text -> id     open-addressing table `tok_slots` (ids; -1 empty), keyed by
 *                  the token text bytes, which point into the GGUF mapping
 *   (a, b) -> rank byte-level BPE merges, open addressing on the id pair;
 *                  the value is (rank, id of the merged token); merges of two
 *                  single bytes are also in the dense `byte_pairs` table
 *
 * Everything here is immutable after kvs_tokenizer_new, so one tokenizer can
 * serve any number of threads; the encoders allocate their scratch (and a
 * word cache) per call.
 */
#ifndef KVS_TOKENIZER_TOK_IMPL_H
#define KVS_TOKENIZER_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    KVS_TT_UNDEFINED = 0,
    KVS_TT_NORMAL = 1,
    KVS_TT_UNKNOWN = 2,
    KVS_TT_CONTROL = 3,
    KVS_TT_USER_DEFINED = 4,
    KVS_TT_UNUSED = 5,
    KVS_TT_BYTE = 6,
};

typedef enum kvs_tok_type {
    KVS_TOK_BPE = 0, /* "gpt2": byte-level BPE */
    KVS_TOK_SPM = 1, /* "llama": SentencePiece-style */
} kvs_tok_type;

typedef struct kvs_merge_slot {
    uint64_t key; /* (a << 32) | b; UINT64_MAX = empty */
    int32_t rank;
    int32_t id;   /* merged token */
} kvs_merge_slot;

struct kvs_tokenizer {
    kvs_tok_type type;
    char model_name[16];
    char *pre_name;          /* as stored ("" if absent); malloc'd */
    kvs_pretok_kind pre;
    int ignore_merges;       /* llama-bpe: a word that is a whole token skips merges */

    int n_vocab;
    const char **text;       /* (n_vocab) token text, into the mapping, not NUL-terminated */
    uint32_t *text_len;      /* (n_vocab) */
    float *scores;           /* (n_vocab) SPM scores; NULL for BPE */
    uint8_t *ttype;          /* (n_vocab) KVS_TT_* */
    uint8_t *eog;            /* (n_vocab) 1 for end-of-generation tokens */

    int32_t *tok_slots;      /* (tok_mask + 1) */
    uint32_t tok_mask;

    kvs_merge_slot *merges;  /* (merge_mask + 1); BPE only */
    /* Merges of two single-byte tokens, dense by (byte1 << 8 | byte2): the
     * first merges of every word, without a hash probe. rank -1 = none. */
    struct { int32_t rank, id; } *byte_pairs; /* (65536); BPE only */
    uint32_t merge_mask;
    int n_merges;

    /* BPE: id of the byte-level character of each byte. SPM: id of the
     * <0xXX> token (or the one-byte token) of each byte. -1 if absent. */
    int32_t byte_tok[256];

    /* Tokens matched in text before the model's own algorithm runs
     * (CONTROL / UNKNOWN only with PARSE_SPECIAL; USER_DEFINED always),
     * sorted by their bytes (a text before its extensions; the same text
     * by id), so those of one first byte are a group. */
    int32_t *special;        /* (n_special) */
    int n_special;
    int32_t special_start[257]; /* group of first byte b: special[start[b] .. start[b+1]) */

    int32_t bos, eos, eot, eom, unk;
    int add_bos, add_eos, add_space_prefix;
};

/* FNV-1a, the hash of the text -> id table. */
static inline uint32_t kvs_tok_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Id of the token with exactly the bytes s[0..n), -1 if none. */
int32_t kvs_tok_lookup(const kvs_tokenizer *t, const char *s, size_t n);

static inline uint64_t kvs_merge_hash(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 29);
}

/* Merge of the adjacent tokens (a, b), NULL if they do not merge. */
static inline const kvs_merge_slot *kvs_tok_merge(const kvs_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = kvs_merge_hash(key) & t->merge_mask;
    for (;;) {
        const kvs_merge_slot *s = &t->merges[h];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        h = (h + 1) & t->merge_mask;
    }
}

/* Growable output of the encoders: ids past cap are counted, not stored. */
typedef struct kvs_tok_out {
    int32_t *ids;
    int cap;
    int n;
} kvs_tok_out;

static inline void kvs_tok_push(kvs_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Encodes one fragment of special-token-free, valid UTF-8 text.
 * Return 0 or KVS_ERR_NOMEM. */
int kvs_bpe_encode(const kvs_tokenizer *t, const char *text, size_t len, kvs_tok_out *o);
/* add_prefix: prepend the SentencePiece space (first fragment / after a special). */
int kvs_spm_encode(const kvs_tokenizer *t, const char *text, size_t len, int add_prefix,
                   kvs_tok_out *o);

/* GPT-2 byte <-> unicode mapping: printable Latin-1 bytes (33..126,
 * 161..172, 174..255) stand for themselves; the other 68 bytes, in order,
 * for U+0100..U+0143 (0..32 -> 256.., 127..160 -> 289.., 173 -> 323). */
static inline uint32_t kvs_byte_to_cp(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    if (b <= 32) return 256 + b;
    if (b <= 160) return b + 162;
    return 323; /* 173 */
}

/* Inverse of kvs_byte_to_cp; -1 if cp stands for no byte. */
static inline int kvs_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)cp - 256;
    if (cp >= 289 && cp <= 322) return (int)cp - 162;
    if (cp == 323) return 173;
    return -1;
}

#endif
