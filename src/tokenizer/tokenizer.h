/*
 * Tokenizers built from a GGUF vocabulary:
 *   - byte-level BPE (tokenizer.ggml.model = "gpt2"), pre-tokenizer chosen by
 *     tokenizer.ggml.pre ("gpt-2", "smollm", "llama-bpe", "qwen2", ...),
 *     merges applied by rank;
 *   - SentencePiece-style (tokenizer.ggml.model = "llama") with scores, byte
 *     fallback and the leading-space rule.
 * Special/control tokens are recognised in text only when asked.
 */
#ifndef KVS_TOKENIZER_H
#define KVS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct kvs_tokenizer kvs_tokenizer;

/* Builds the tokenizer from the GGUF's tokenizer.* keys. The tokenizer keeps
 * pointers into the GGUF mapping: g must outlive it. */
int kvs_tokenizer_new(const kvs_gguf *g, kvs_tokenizer **out);
void kvs_tokenizer_free(kvs_tokenizer *t);

int kvs_tokenizer_n_vocab(const kvs_tokenizer *t);
int32_t kvs_tokenizer_bos(const kvs_tokenizer *t); /* -1 if none */
int32_t kvs_tokenizer_eos(const kvs_tokenizer *t);
int kvs_tokenizer_add_bos(const kvs_tokenizer *t); /* GGUF add_bos_token flag (default per model type) */
const char *kvs_tokenizer_model_name(const kvs_tokenizer *t); /* "gpt2" / "llama" */
const char *kvs_tokenizer_pre_name(const kvs_tokenizer *t);

/* Same contract as the public kvs_tokenize (flags KVS_TOKENIZE_*). */
int kvs_tokenizer_encode(const kvs_tokenizer *t, const char *text, size_t len, int flags,
                         int32_t *out, int cap, int *n_out);
/* Same contract as the public kvs_token_to_bytes. */
int kvs_tokenizer_token_bytes(const kvs_tokenizer *t, int32_t id, int render_special,
                              char *buf, size_t cap, size_t *n_out);
int kvs_tokenizer_is_eog(const kvs_tokenizer *t, int32_t id);
/* Id of a token given its exact text, -1 if absent (e.g. "<|im_end|>"). */
int32_t kvs_tokenizer_find(const kvs_tokenizer *t, const char *text);

#endif
