/*
 * kvstitch: reuse the attention KV of repeated prompt chunks.
 *
 * This is the only public header. Tools and the server include nothing else.
 *
 * Conventions
 *   - Functions returning int return a kvs_status: 0 ok, negative error.
 *     On error, kvs_last_error() holds a message for users that names what is
 *     wrong (file, key, tensor, position). Out-parameters are left untouched
 *     unless stated otherwise.
 *   - Every constructor has a matching _free; _free(NULL) is a no-op.
 *   - Params structs are passed by value; get them from *_default_params()
 *     and change the fields you care about. "0 = from the model" is written
 *     next to each field where it applies.
 *   - Thread safety: a kvs_model is immutable after load and may be shared by
 *     any number of threads. A kvs_context is used by one thread at a time.
 */
#ifndef KVSTITCH_H
#define KVSTITCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum kvs_status {
    KVS_OK = 0,
    KVS_ERR_INVALID_ARG = -1,    /* a caller-supplied argument is out of range */
    KVS_ERR_IO = -2,             /* open/read/write/mmap failed */
    KVS_ERR_FORMAT = -3,         /* a file is malformed, truncated or hostile */
    KVS_ERR_UNSUPPORTED = -4,    /* well-formed, but a feature we do not handle */
    KVS_ERR_NOMEM = -5,          /* allocation failed */
    KVS_ERR_NOT_FOUND = -6,      /* a key, tensor or entry does not exist */
    KVS_ERR_CONTEXT_FULL = -7,   /* tokens do not fit the context window */
    KVS_ERR_UTF8 = -8,           /* input text is not valid UTF-8 */
    KVS_ERR_MODEL_MISMATCH = -9, /* cache data belongs to another model */
    KVS_ERR_CORRUPT = -10,       /* a cache entry failed its checksum */
    KVS_ERR_BUFFER_TOO_SMALL = -11, /* output buffer too small; size reported */
    KVS_ERR_INTERNAL = -12,
} kvs_status;

/* Short, static description of a status code. Never NULL. */
const char *kvs_strerror(int status);

/* Detail of the last error raised on the calling thread (thread-local).
 * Valid until the next failing call on this thread. Never NULL. */
const char *kvs_last_error(void);

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct kvs_model kvs_model;

typedef struct kvs_model_params {
    int vocab_only; /* 1: load metadata + tokenizer only (vocabulary GGUFs) */
} kvs_model_params;

kvs_model_params kvs_model_default_params(void);

/* Loads a GGUF file. Weights are mmapped read-only, never copied.
 * On failure *out is untouched and kvs_last_error() names the problem. */
int kvs_model_load(const char *path, kvs_model_params params, kvs_model **out);
void kvs_model_free(kvs_model *model);

typedef struct kvs_model_info {
    const char *path;
    const char *name;           /* general.name, or "" */
    const char *arch;           /* general.architecture */
    uint32_t gguf_version;
    int n_layer, n_embd, n_head, n_head_kv, n_ff, head_dim;
    int n_ctx_train;
    int n_vocab;
    float rope_freq_base;
    float rope_freq_scale;      /* 1 / linear scaling factor; 1 if none */
    int rope_dim;
    int rope_neox;              /* 1: NeoX pairing (i, i+d/2); 0: adjacent pairs */
    float norm_eps;
    int tied_output;            /* output head shares token_embd */
    const char *tokenizer_model; /* "gpt2" (byte-level BPE) or "llama" (SentencePiece) */
    const char *tokenizer_pre;   /* pre-tokenizer name, "" if absent */
    int32_t bos_id, eos_id, eot_id; /* -1 when absent */
    int add_bos;                /* tokenizer.ggml.add_bos_token */
    const char *chat_template_family; /* "chatml", "llama3", "llama2", or "" */
    int64_t n_params;
    uint64_t weight_bytes;
    int n_tensors;
    int vocab_only;
} kvs_model_info;

/* Fills *info; the strings point into the model and live as long as it. */
void kvs_model_get_info(const kvs_model *model, kvs_model_info *info);

/* Number of tensors of each GGUF tensor type (index = ggml type id), for
 * `kvstitch info`. counts[] must hold KVS_MAX_TENSOR_TYPES entries. */
#define KVS_MAX_TENSOR_TYPES 64
void kvs_model_tensor_type_counts(const kvs_model *model, int counts[KVS_MAX_TENSOR_TYPES]);
/* Name of a GGUF tensor type ("Q4_1"), or NULL if unknown. */
const char *kvs_tensor_type_name(int type);

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

enum {
    KVS_TOKENIZE_ADD_BOS = 1 << 0,       /* add BOS (and EOS) as the GGUF's add_bos_token /
                                          * add_eos_token flags ask; BPE vocabularies
                                          * like SmolLM2's ask for none */
    KVS_TOKENIZE_PARSE_SPECIAL = 1 << 1, /* recognise control tokens like <|im_start|> in text */
};

/* Tokenizes len bytes of UTF-8 text. Writes at most cap ids to out and the
 * full count to *n_out. Returns KVS_ERR_BUFFER_TOO_SMALL (with *n_out set to
 * the count needed) when cap is too small, KVS_ERR_UTF8 on invalid UTF-8. */
int kvs_tokenize(const kvs_model *model, const char *text, size_t len, int flags,
                 int32_t *out, int cap, int *n_out);

int kvs_vocab_size(const kvs_model *model);
/* The raw bytes a token stands for (after byte-level / sentencepiece
 * decoding). Control tokens give their text only if render_special. Writes
 * at most cap bytes; *n_out = full length. KVS_ERR_BUFFER_TOO_SMALL if cut. */
int kvs_token_to_bytes(const kvs_model *model, int32_t token, int render_special,
                       char *buf, size_t cap, size_t *n_out);
int kvs_token_is_eog(const kvs_model *model, int32_t token); /* EOS, EOT, <|im_end|> ... */

/* Streaming detokenizer: pushes tokens, emits only complete UTF-8 sequences
 * (a partial multi-byte character is held back until it completes). */
typedef struct kvs_detok kvs_detok;
int kvs_detok_new(const kvs_model *model, int render_special, kvs_detok **out);
void kvs_detok_free(kvs_detok *d);
/* Appends the text that became complete to buf (NUL-terminated); *n_out = bytes. */
int kvs_detok_push(kvs_detok *d, int32_t token, char *buf, size_t cap, size_t *n_out);
/* Flushes held-back bytes (invalid sequences become U+FFFD). */
int kvs_detok_flush(kvs_detok *d, char *buf, size_t cap, size_t *n_out);

/* ------------------------------------------------------------------------ */
/* Chat templates                                                            */
/* ------------------------------------------------------------------------ */

typedef struct kvs_chat_message {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} kvs_chat_message;

/* Renders messages with a template family ("chatml", "llama3", "llama2") or,
 * when family is NULL, the family detected from tokenizer.chat_template.
 * An unknown template gives KVS_ERR_UNSUPPORTED naming it. *out is malloc'd
 * and NUL-terminated; the caller frees it. */
int kvs_chat_render(const kvs_model *model, const char *family,
                    const kvs_chat_message *msgs, int n_msgs,
                    int add_generation_prompt, char **out);

/* ------------------------------------------------------------------------ */
/* Inference context                                                         */
/* ------------------------------------------------------------------------ */

typedef enum kvs_kv_type {
    KVS_KV_F16 = 0,
    KVS_KV_F32 = 1,
} kvs_kv_type;

typedef struct kvs_context kvs_context;

typedef struct kvs_context_params {
    int n_ctx;       /* context length in tokens; 0 = from the model (capped at 8192) */
    int n_threads;   /* 0 = number of online cores */
    int n_batch;     /* max tokens per forward chunk; 0 = 512 */
    kvs_kv_type kv_type;
} kvs_context_params;

kvs_context_params kvs_context_default_params(void);
int kvs_context_new(kvs_model *model, kvs_context_params params, kvs_context **out);
void kvs_context_free(kvs_context *ctx);
int kvs_context_n_ctx(const kvs_context *ctx);

/* Runs the model over n tokens at the given absolute positions, writing each
 * token's K/V into the context's KV buffer at slot = position. Each token
 * attends to slots 0..pos (all of which must have been written). If logits is
 * not NULL it receives the n_vocab logits of the last of the n tokens.
 * Batch-invariant: the bits written and returned do not depend on n, on how
 * a sequence is split into calls, or on the thread count. */
int kvs_decode(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n, float *logits);
/* Like kvs_decode, but logits (n_logits, n_vocab) receives the logits of the
 * last n_logits of the n tokens (1 <= n_logits <= n), for scoring a text
 * (perplexity, teacher forcing) without one call per token. Same bits as
 * kvs_decode would give for each of those tokens. */
int kvs_decode_logits(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n,
                      float *logits, int n_logits);

/* ------------------------------------------------------------------------ */
/* Sampling and generation                                                   */
/* ------------------------------------------------------------------------ */

typedef struct kvs_sampler_params {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* 0 = off */
    float top_p;          /* 1 = off */
    float min_p;          /* 0 = off */
    float repeat_penalty; /* 1 = off */
    int repeat_last_n;    /* tokens considered for the penalty */
    uint64_t seed;
} kvs_sampler_params;

kvs_sampler_params kvs_sampler_default_params(void);

/* Return nonzero to stop generation. piece holds the newly completed text
 * (NUL-terminated, possibly empty while a partial UTF-8 character or a
 * possible stop-string start is held back). A final call with token -1
 * delivers text held back until the end. */
typedef int (*kvs_token_callback)(void *user, int32_t token, const char *piece, size_t len);

typedef struct kvs_generate_params {
    int n_predict;                 /* max new tokens */
    kvs_sampler_params sampling;
    const char *const *stop;       /* stop strings, may be NULL */
    int n_stop;
    kvs_token_callback on_token;   /* may be NULL */
    void *user;
    int n_top_logprobs;            /* how many [id, logprob] pairs of the first position */
} kvs_generate_params;

kvs_generate_params kvs_generate_default_params(void);

typedef struct kvs_generate_result {
    int n_prompt;
    int32_t *tokens;      /* generated ids (malloc'd) */
    int n_tokens;
    char *text;           /* generated text, NUL-terminated (malloc'd) */
    double ttft_ms;       /* request start to first token sampled */
    double prefill_ms;
    double decode_ms;
    float *first_logits;  /* n_vocab logits at the first generated position (malloc'd) */
    int n_vocab;
    int32_t *top_ids;     /* n_top of the first position, by descending logprob */
    float *top_logprobs;
    int n_top;
} kvs_generate_result;

/* Prefills prompt[0..n_prompt) at positions 0.. and generates. Stops after
 * n_predict tokens, at an end-of-generation token (kept in tokens, not in
 * text), at a stop string (cut from text), when the context is full, or when
 * on_token returns nonzero. decode_ms runs from the first to the last token
 * sampled (n_tokens - 1 decode steps). */
int kvs_generate(kvs_context *ctx, const int32_t *prompt, int n_prompt,
                 const kvs_generate_params *params, kvs_generate_result *out);
void kvs_generate_result_free(kvs_generate_result *r);

/* SHA-256 helper (hex output, 65 bytes incl. NUL). */
void kvs_sha256_hex(const void *data, size_t len, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif /* KVSTITCH_H */
