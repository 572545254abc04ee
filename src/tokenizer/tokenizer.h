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
#include "kvstitch.h" /* kvs_detok, kvs_chat_message, KVS_TOKENIZE_* */

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


/* --- additions (tokenizer engineer) --- */

/* End-of-turn token (tokenizer.ggml.eot_token_id), -1 if none. */
int32_t kvs_tokenizer_eot(const kvs_tokenizer *t);

/* Streaming detokenizer over a tokenizer (kvs_detok_new wraps it). */
int kvs_detok_new_tok(const kvs_tokenizer *t, int render_special, kvs_detok **out);

/* Chat templates (chat.c). The family recognised from a template text:
 * one of KVS_CHAT_FAMILIES, or NULL if none of their markers occurs. */
const char *kvs_chat_family_of_template(const char *tmpl, size_t len);
/* The families chat.c renders, for messages that list them. */
#define KVS_CHAT_FAMILIES "chatml, qwen3, llama3, llama2, gemma"
/* The family called name (its static string), NULL if none is. */
const char *kvs_chat_family_named(const char *name);
/* Family of the GGUF's tokenizer.chat_template; "" if absent or unknown
 * (for kvs_model_info.chat_template_family). */
const char *kvs_chat_detect_family(const kvs_gguf *g);
/* kvs_chat_render over a template text (may be NULL) or a GGUF (may be
 * NULL); same contract as the public kvs_chat_render. */
int kvs_chat_render_template(const char *tmpl, size_t tmpl_len, const char *family,
                             const kvs_chat_message *msgs, int n_msgs, int add_generation_prompt,
                             char **out);
int kvs_chat_render_gguf(const kvs_gguf *g, const char *family, const kvs_chat_message *msgs,
                         int n_msgs, int add_generation_prompt, char **out);

#endif
