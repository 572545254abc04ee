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
 *
 * Ownership and lifetime (every handle and every returned pointer)
 *   - Handles: kvs_model (kvs_model_load / kvs_model_free), kvs_context
 *     (kvs_context_new / kvs_context_free), kvs_detok (kvs_detok_new /
 *     kvs_detok_free), kvs_cache (kvs_cache_open / kvs_cache_free),
 *     kvs_docs_warmer (kvs_docs_warmer_new / kvs_docs_warmer_free). The caller
 *     owns each handle from its constructor until its _free. A context, a
 *     detokenizer and a cache borrow the model they were made from: free them
 *     before the model. A cache may outlive the contexts that used it. A
 *     warmer borrows its context and cache (free it first; it copies the
 *     segments it was given).
 *   - Memory the library allocates for the caller (kvs_chat_render's *out,
 *     kvs_segments_tokenize's *tokens) is released with kvs_free(), never
 *     with the caller's free(): the library may use another allocator (or C
 *     runtime) than its caller. kvs_generate_result's arrays are released
 *     together by kvs_generate_result_free().
 *   - const char * returned by a function (kvs_strerror, kvs_*_name,
 *     kvs_version, the strings of kvs_model_info) are owned by the library:
 *     static, or living as long as the model they came from (stated at each).
 *     kvs_last_error() is thread-local and valid until the next failing call
 *     on the same thread.
 *   - Pointers passed in (text, tokens, params, segments) are borrowed for the
 *     duration of the call only; nothing keeps them afterwards.
 *
 * Linking: `pkg-config --cflags --libs kvstitch` (installed by `make install
 * PREFIX=...`), against libkvstitch.so or, with --static, libkvstitch.a.
 * Only the declarations marked KVS_API are exported by the shared library.
 */
#ifndef KVSTITCH_H
#define KVSTITCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API. The library is built with -fvisibility=hidden, so
 * these declarations are the only symbols libkvstitch.so exports. */
#if defined(__GNUC__) || defined(__clang__)
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

/* ------------------------------------------------------------------------ */
/* Version and library-owned memory                                          */
/* ------------------------------------------------------------------------ */

/* The version of this header. While MAJOR is 0 a MINOR change may change the
 * ABI (the shared library's soname is libkvstitch.so.MAJOR.MINOR). */
#define KVS_VERSION_MAJOR 0
#define KVS_VERSION_MINOR 2
#define KVS_VERSION_PATCH 0

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH"
 * (static string). Compare with the KVS_VERSION_* macros to detect a header /
 * library mismatch. */
KVS_API const char *kvs_version(void);
/* Releases memory the library allocated for the caller (see "Ownership"
 * above). NULL is a no-op. */
KVS_API void kvs_free(void *p);

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
    KVS_ERR_INTERRUPTED = -13,   /* the context's should_stop callback stopped the call */
} kvs_status;

/* Short, static description of a status code. Never NULL. */
KVS_API const char *kvs_strerror(int status);

/* Detail of the last error raised on the calling thread (thread-local).
 * Valid until the next failing call on this thread. Never NULL. */
KVS_API const char *kvs_last_error(void);

/* The kernel paths this build can run on this CPU, best first, space-
 * separated: "amx avx512vnni avx2 scalar" at most. Static storage. */
KVS_API const char *kvs_isa_paths(void);

/* The path the kernels take now: "amx" (quantized matmuls of many rows, or
 * chosen per shape by speed: KVS_AMX), "avx512vnni", "avx2" or "scalar".
 * The best of kvs_isa_paths unless KVS_ISA in the environment caps it
 * (one of those names, or "best"; a name that is unknown or beyond this
 * CPU fails kvs_model_load with KVS_ERR_INVALID_ARG, and makes this ""
 * with kvs_last_error() saying why): how the AVX2 path of a whole model is
 * measured on an AVX-512 host. Every path gives the same bits. Static
 * storage. */
KVS_API const char *kvs_isa_in_use(void);

/* How fast the calling thread's core runs now: dependent register adds per
 * nanosecond of wall time (one cycle each on x86-64 and arm64 cores) over
 * about `seconds` (at least ~4 ms, at most 2 s); 0 where unknown (another CPU family).
 * On a quiet machine the core's clock in GHz; on a shared VM it drops when
 * the host's other tenants take the core, so `kvstitch bench` prints it
 * before and after its tests. */
KVS_API double kvs_core_clock_ghz(double seconds);

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct kvs_model kvs_model;

typedef struct kvs_model_params {
    int vocab_only; /* 1: load metadata + tokenizer only (vocabulary GGUFs) */
    /* The chat template family every chat layout of this model uses
     * (kvs_chat_render with family NULL, chat segments, the server's chat
     * requests): "chatml", "qwen3", "llama3", "llama2" or "gemma"; NULL or
     * "" = the one tokenizer.chat_template names. For a file without a
     * template (a base model) or with one not recognised. An unknown name
     * fails the load (KVS_ERR_INVALID_ARG). Not kept: copied at load. */
    const char *chat_template;
} kvs_model_params;

KVS_API kvs_model_params kvs_model_default_params(void);

/* Loads a GGUF file. Weights are mmapped read-only; on SIMD CPUs the
 * matrices a decode step streams are also laid out once, at load, in one
 * model-owned run of 2 MiB pages (repacked for the kernels, or copied as
 * they are where a path reads them so), and the mapped pages those copies
 * replace are given back (KVS_PACK=0: none of that).
 * On failure *out is untouched and kvs_last_error() names the problem.
 * The caller owns *out; release it with kvs_model_free after every context,
 * detokenizer and cache made from it has been freed. */
KVS_API int kvs_model_load(const char *path, kvs_model_params params, kvs_model **out);
KVS_API void kvs_model_free(kvs_model *model);

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
    const char *chat_template_family; /* the family chat layouts use: kvs_model_params.chat_template,
                                       * else the one tokenizer.chat_template names
                                       * ("chatml", "qwen3", "llama3", "llama2", "gemma"), or "" */
    int64_t n_params;
    uint64_t weight_bytes;
    int n_tensors;
    int vocab_only;
} kvs_model_info;

/* Fills *info; the strings point into the model and live as long as it
 * (kvs_model_free invalidates them). */
KVS_API void kvs_model_get_info(const kvs_model *model, kvs_model_info *info);

/* The far prefetch this model's decode steps use: weight rows that far
 * ahead are prefetched into L2 (0: off). Chosen at load by size against the
 * last-level cache and a read probe, then, where that turns it on, checked
 * by timing one decode step's matmuls without it and with it (kept only
 * where its best round was faster); ms, if not NULL, gets those best times
 * in milliseconds ({with, without}; 0 where not checked).
 * KVS_FAR_PREFETCH=0 / 1 forces it. Speed only: results are the same bits
 * either way. */
KVS_API int kvs_model_far_prefetch(const kvs_model *model, double ms[2]);

/* Number of tensors of each GGUF tensor type (index = ggml type id), for
 * `kvstitch info`. counts[] must hold KVS_MAX_TENSOR_TYPES entries. */
#define KVS_MAX_TENSOR_TYPES 64
KVS_API void kvs_model_tensor_type_counts(const kvs_model *model, int counts[KVS_MAX_TENSOR_TYPES]);
/* Name of a GGUF tensor type ("Q4_1"), or NULL if unknown. Static string. */
KVS_API const char *kvs_tensor_type_name(int type);
/* How the model's RoPE is scaled: "none", "linear", or "llama3 (...)" naming
 * where its frequency factors come from (static string). */
KVS_API const char *kvs_model_rope_scaling(const kvs_model *model);

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
KVS_API int kvs_tokenize(const kvs_model *model, const char *text, size_t len, int flags,
                         int32_t *out, int cap, int *n_out);
/* KVS_OK if len bytes of text are valid UTF-8, else KVS_ERR_UTF8 with the
 * first bad byte's offset and value in kvs_last_error(): the check
 * kvs_tokenize makes first, without the cost of tokenizing (a caller can
 * name the field or file at fault). */
KVS_API int kvs_utf8_check(const char *text, size_t len);
/* text[0..len) as valid UTF-8: each byte that starts no valid sequence
 * becomes U+FFFD (EF BF BD), everything else is kept (control characters
 * too). Writes at most cap - 1 bytes and a NUL into out (whole characters
 * only: a cut never halves one); returns the bytes written. cap >= 3 len +
 * 1 always holds it all. For text that reaches JSON or a terminal from
 * untrusted bytes (a token cut mid-character, a client's field echoed in an
 * error). */
KVS_API size_t kvs_utf8_repair(const char *text, size_t len, char *out, size_t cap);

KVS_API int kvs_vocab_size(const kvs_model *model);
/* The raw bytes a token stands for (after byte-level / sentencepiece
 * decoding). Control tokens give their text only if render_special. Writes
 * at most cap bytes; *n_out = full length. KVS_ERR_BUFFER_TOO_SMALL if cut. */
KVS_API int kvs_token_to_bytes(const kvs_model *model, int32_t token, int render_special,
                               char *buf, size_t cap, size_t *n_out);
KVS_API int kvs_token_is_eog(const kvs_model *model, int32_t token); /* EOS, EOT, <|im_end|> ... */

/* Streaming detokenizer: pushes tokens, emits only complete UTF-8 sequences
 * (a partial multi-byte character is held back until it completes; bytes
 * that form no character, and NUL, come out as U+FFFD, so the text is a C
 * string).
 * kvs_detok_new gives the caller a handle that borrows the model (free it
 * with kvs_detok_free before the model). One thread at a time. */
typedef struct kvs_detok kvs_detok;
KVS_API int kvs_detok_new(const kvs_model *model, int render_special, kvs_detok **out);
KVS_API void kvs_detok_free(kvs_detok *d);
/* Appends the text that became complete to buf (NUL-terminated); *n_out = bytes. */
KVS_API int kvs_detok_push(kvs_detok *d, int32_t token, char *buf, size_t cap, size_t *n_out);
/* Flushes held-back bytes (invalid sequences become U+FFFD). */
KVS_API int kvs_detok_flush(kvs_detok *d, char *buf, size_t cap, size_t *n_out);

/* ------------------------------------------------------------------------ */
/* Chat templates                                                            */
/* ------------------------------------------------------------------------ */

typedef struct kvs_chat_message {
    const char *role;    /* "system", "user", "assistant"; qwen3 also "tool" */
    const char *content;
} kvs_chat_message;

/* Renders messages with a template family ("chatml", "qwen3", "llama3",
 * "llama2", "gemma") or, when family is NULL, the model's: the one its load
 * chose (kvs_model_params.chat_template), else the one detected from
 * tokenizer.chat_template.
 * An unknown family name gives KVS_ERR_INVALID_ARG naming it (as
 * kvs_chat_family_check); family NULL on a model whose template names no
 * family it renders, KVS_ERR_UNSUPPORTED; a role the
 * family does not know (exact, case-sensitive) KVS_ERR_INVALID_ARG naming
 * the message, the role and the known ones. *out is
 * NUL-terminated and allocated by the library: release it with kvs_free().
 * On failure *out is untouched. */
KVS_API int kvs_chat_render(const kvs_model *model, const char *family,
                            const kvs_chat_message *msgs, int n_msgs,
                            int add_generation_prompt, char **out);

/* KVS_OK if family is a template family kvstitch renders (the names above);
 * KVS_ERR_INVALID_ARG naming it and the known ones otherwise, NULL and ""
 * included. For a front end that checks its options before loading
 * (kvs_model_load gives the same error for a name it is handed). */
KVS_API int kvs_chat_family_check(const char *family);

/* ------------------------------------------------------------------------ */
/* Inference context                                                         */
/* ------------------------------------------------------------------------ */

/* How the KV cache holds keys and values. F16 is the default. Q8 keeps each
 * token's key (and value) of a head as head_dim 8-bit levels and one float
 * scale: half the bytes of F16, and attention on it runs as integer dot
 * products (scores 8-bit x 8-bit, P.V 16-bit x 8-bit), the fast choice for
 * long contexts. Every path gives the same bits for a type; the types give
 * different (close) results. */
typedef enum kvs_kv_type {
    KVS_KV_F16 = 0,
    KVS_KV_F32 = 1,
    KVS_KV_Q8 = 2,
} kvs_kv_type;
/* "f16", "f32", "q8"; NULL for a value not in the enum. */
KVS_API const char *kvs_kv_type_name(kvs_kv_type type);
/* The type of such a name; KVS_ERR_INVALID_ARG naming it otherwise (*out untouched). */
KVS_API int kvs_kv_type_parse(const char *name, kvs_kv_type *out);

typedef struct kvs_context kvs_context;

/* Progress of a long forward pass (a prefill, a warm, a document being
 * computed): reported after every n_batch tokens of a kvs_decode call that
 * spans more than one batch. done/total count the tokens of that call. */
typedef struct kvs_progress {
    int64_t done, total;  /* tokens processed / to process in this call */
    double elapsed_ms;    /* since the call started */
    double tok_s;         /* done / elapsed */
    double eta_ms;        /* remaining time at that rate */
} kvs_progress;

/* Called on the thread running the forward pass; keep it short (printing a
 * line is fine). The library never prints progress itself. */
typedef void (*kvs_progress_callback)(void *user, const kvs_progress *p);

/* A context's stop poll (kvs_context_set_should_stop): nonzero stops the
 * call running on the context. */
typedef int (*kvs_stop_callback)(void *user);

/* The most worker threads a context takes (the CLI's --threads bound): 1000
 * on a 2-core machine had made a 4-token generate take 55 s. */
#define KVS_MAX_THREADS 256

typedef struct kvs_context_params {
    int n_ctx;       /* context length in tokens; 0 = the model's trained length, capped at 8192 */
    int n_threads;   /* 0 = number of online cores; at most KVS_MAX_THREADS */
    int n_batch;     /* max tokens per forward chunk; 0 = 512 */
    kvs_kv_type kv_type;
    int allow_beyond_train; /* 0 (default): n_ctx above the model's trained context length
                             * (kvs_model_info.n_ctx_train) is refused with KVS_ERR_CONTEXT_FULL;
                             * 1: allowed (no RoPE scaling is applied: output degrades) */
    kvs_progress_callback on_progress; /* may be NULL */
    void *progress_user;
} kvs_context_params;

KVS_API kvs_context_params kvs_context_default_params(void);
/* A context holds one sequence's KV buffer (n_ctx tokens), scratch and a
 * thread pool of n_threads. The caller owns *out (kvs_context_free); it
 * borrows the model, which must outlive it. One thread at a time; several
 * contexts of one model may run concurrently. On failure *out is untouched. */
KVS_API int kvs_context_new(kvs_model *model, kvs_context_params params, kvs_context **out);
KVS_API void kvs_context_free(kvs_context *ctx);
KVS_API int kvs_context_n_ctx(const kvs_context *ctx);

/* Sets ctx's stop poll (fn NULL: none, the default), called with user on
 * the thread running a call on ctx: before each batch of n_batch tokens of
 * a prefill or warm, before each generated token, before each batch of a
 * document being computed, and between the layer passes of a repair.
 * Nonzero stops the call, which returns KVS_ERR_INTERRUPTED naming where.
 * What the call had finished stays valid: the batches already run keep
 * their KV (a kvs_decode may go on from there with the bits of an
 * uninterrupted one), and documents already computed are stored as usual;
 * the interrupted prompt's own chunks are not. kvs_decode_batch (the
 * serving step) is not polled. Set it between calls, not while one runs on
 * ctx; flip what it reads (kvs_stop_when_set) at any time. Keep it cheap:
 * it runs once a token while generating. */
KVS_API void kvs_context_set_should_stop(kvs_context *ctx, kvs_stop_callback fn, void *user);
/* A kvs_stop_callback that stops once the int at flag (user) is nonzero:
 * set it from another thread or a signal handler, no lock needed, with an
 * atomic store (kvs_stop_flag_set, or C11's atomic_store on an atomic_int):
 * a plain store racing the poll's atomic read is a data race in C's memory
 * model. The Python binding stops a closed stream's prefill with it. */
KVS_API int kvs_stop_when_set(void *flag);
/* Stores value into the int at flag atomically (NULL: nothing), for
 * kvs_stop_when_set to read: for callers without C11 atomics (the Python
 * binding's plain store had been a race that ThreadSanitizer reported). */
KVS_API void kvs_stop_flag_set(void *flag, int value);

/* Runs the model over n tokens at the given absolute positions, writing each
 * token's K/V into the context's KV buffer at slot = position. Each token
 * attends to slots 0..pos, all of which must have been written, by this call
 * or before it (a decode, a cache load, a document's move): a slot the
 * context never wrote is refused with KVS_ERR_INVALID_ARG naming it. What
 * a written slot holds is the caller's to know. If logits is
 * not NULL it receives the n_vocab logits of the last of the n tokens.
 * Batch-invariant: the bits written and returned do not depend on n, on how
 * a sequence is split into calls, or on the thread count. */
KVS_API int kvs_decode(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n, float *logits);
/* Like kvs_decode, but logits (n_logits, n_vocab) receives the logits of the
 * last n_logits of the n tokens (0 <= n_logits <= n; 0: none), for scoring a text
 * (perplexity, teacher forcing) without one call per token. Same bits as
 * kvs_decode would give for each of those tokens. */
KVS_API int kvs_decode_logits(kvs_context *ctx, const int32_t *tokens, const int32_t *pos, int n,
                              float *logits, int n_logits);

/* ------------------------------------------------------------------------ */
/* Sampling and generation                                                   */
/* ------------------------------------------------------------------------ */

/* Each field's accepted range is written on it; a value outside (NaN and
 * inf included) is refused with KVS_ERR_INVALID_ARG naming the field, by
 * kvs_sampler_new and by every kvs_generate* call before any work. */
typedef struct kvs_sampler_params {
    float temperature;    /* finite; <= 0 (or too small for 1 / T to be finite): greedy */
    int top_k;            /* >= 0; 0 = off */
    float top_p;          /* (0, 1]; 1 = off */
    float min_p;          /* [0, 1]; 0 = off */
    float repeat_penalty; /* finite, > 0; 1 = off */
    int repeat_last_n;    /* >= 0: tokens considered for the penalty */
    uint64_t seed;
    /* OpenAI's additive penalties over the tokens generated so far (not the
     * prompt): logit -= frequency_penalty * count + presence_penalty * (count > 0).
     * 0 = off; finite values only. */
    float presence_penalty;
    float frequency_penalty;
} kvs_sampler_params;

KVS_API kvs_sampler_params kvs_sampler_default_params(void);

/* Log-probabilities of raw logits: log-softmax over n_vocab values, summed
 * in double in index order (the same bits on every machine and thread
 * count). Writes the log-probability of token to *token_logprob when token
 * >= 0 (token_logprob may be NULL when token < 0), and the n_top best ids
 * (highest logit first, the lower id first on ties, NaN last) with theirs to
 * the caller's top_ids[n_top] and top_logprobs[n_top] (NULL when n_top is
 * 0). A -inf logit gives -inf; a NaN logit gives NaN and is left out of the
 * sum; +inf logits share the probability (-log of their count, the others
 * -inf); all -inf gives -inf. KVS_ERR_INVALID_ARG for n_vocab <= 0, n_top
 * outside 0..n_vocab, a token >= n_vocab or a missing array; allocates
 * nothing for n_top <= 64, else scratch of n_top ids. */
KVS_API int kvs_logprobs(const float *logits, int n_vocab, int32_t token, float *token_logprob, int n_top,
                         int32_t *top_ids, float *top_logprobs);

/* Return nonzero to stop generation. piece holds the newly completed text
 * (NUL-terminated, possibly empty while a partial UTF-8 character or a
 * possible stop-string start is held back). A final call with token -1
 * delivers text held back until the end. */
typedef int (*kvs_token_callback)(void *user, int32_t token, const char *piece, size_t len);

/* Out-of-range values (a negative count, a NULL stop string, a sampling
 * field outside its range) are refused with KVS_ERR_INVALID_ARG naming the
 * field, before anything is looked up, computed or stored. */
typedef struct kvs_generate_params {
    int n_predict;                 /* >= 0: max new tokens (0: the prompt only) */
    kvs_sampler_params sampling;
    const char *const *stop;       /* (n_stop) stop strings, none NULL; may be NULL when n_stop is 0; an empty
                                    * one stops nothing (as the server drops it) */
    int n_stop;                    /* >= 0 */
    kvs_token_callback on_token;   /* may be NULL */
    void *user;
    int n_top_logprobs;            /* >= 0 (past n_vocab: n_vocab): how many [id, logprob] pairs of the first position */
} kvs_generate_params;

KVS_API kvs_generate_params kvs_generate_default_params(void);

/* Why generation ended. */
typedef enum kvs_stop_reason {
    KVS_STOP_EOS = 0,      /* an end-of-generation token (kept in tokens, not in text) */
    KVS_STOP_LENGTH = 1,   /* n_predict tokens were generated */
    KVS_STOP_STRING = 2,   /* a stop string appeared (cut from text) */
    KVS_STOP_CONTEXT = 3,  /* the context window is full */
    KVS_STOP_CALLBACK = 4, /* on_token returned nonzero */
} kvs_stop_reason;

/* "eos", "length", "stop", "context", "callback"; NULL if unknown. */
KVS_API const char *kvs_stop_reason_name(kvs_stop_reason reason);

/* Where the time to first token went, in milliseconds. The phases are
 * consecutive: tokenize + lookup + assemble + repair + prefill + first_token
 * = ttft_ms (up to rounding). A phase a call does not have is 0. */
typedef struct kvs_timings {
    double tokenize_ms;    /* text to tokens (kvs_generate_segments; callers that tokenize
                            * themselves may add their own time here and to ttft_ms) */
    double lookup_ms;      /* finding cached KV: prefix index walk, entry reads and the copy of
                            * exact hits into the context (one pass in the store) */
    double assemble_ms;    /* documents: live prefix, document lookups (or computation of the
                            * missing ones) and moves into place */
    double repair_ms;      /* the repair strategy's recompute */
    double prefill_ms;     /* the forward pass over the rest of the prompt (n_prefilled tokens) */
    double first_token_ms; /* from the last prompt logits to the first token sampled */
    double decode_ms;      /* first to last token sampled (n_tokens - 1 steps; after ttft) */
} kvs_timings;

/* What prompt KV reuse did (kvs_generate_cached, kvs_generate_segments). */
typedef struct kvs_reuse_result {
    int n_cached;           /* prompt tokens served by an exact cached prefix (bit-identical) */
    int n_reused;           /* tokens whose KV came from the cache and was not recomputed:
                             * n_cached + moved document tokens not recomputed by the repair */
    double cache_hit_ratio; /* n_reused / n_prompt: the one definition for every path */
    int32_t *chunk_ends;    /* (n_chunks) end index of each chunk the prompt is cut into, ascending,
                             * the last = n_prompt (owned by the result) */
    int n_chunks;
    int n_chunks_stored;    /* chunks of the prompt newly stored by this request (with a cache dir:
                             * written to it; a failed write is not counted) */
    int n_write_errors;     /* chunks whose write to the cache dir failed (kept in memory only) */
    char write_error[200];  /* the first failed write's reason (e.g. the disk full), "" if none */
} kvs_reuse_result;

/* What non-prefix (document) reuse did (kvs_generate_segments). */
typedef struct kvs_docs_result {
    int n_moved;          /* document tokens whose KV was moved into place: from cached documents, or
                           * computed by this call at their own positions (n_docs_computed) */
    int n_recomputed;     /* moved tokens the repair strategy recomputed (full moves none: 0; n_token_layers
                           * counts the documents it computes) */
    int n_docs_hit;       /* documents found in the cache */
    int n_docs_computed;  /* documents computed (and stored) by this request */
    long n_token_layers;  /* (document token, layer) pairs whose K/V the repair computed afresh: the
                           * repair's cost (cacheblend: all tokens in the layers up to the check
                           * layer, then the selected ones; full: document tokens x layers) */
    int n_docs_baked;     /* of the hits, baked chunks (kvs_bake_docs) */
} kvs_docs_result;

/* One generation's output. Everything it points to is owned by the result
 * and freed by kvs_generate_result_free. A part that a call does not
 * produce is NULL, never zero-filled: reuse is set by kvs_generate_cached
 * and kvs_generate_segments, docs by kvs_generate_segments only. */
typedef struct kvs_generate_result {
    int n_prompt;
    int n_live;           /* prompt tokens computed in full by this request (kvs_generate: n_prompt) */
    int n_prefilled;      /* of them, the ones run in the prefill phase (timings.prefill_ms) */
    int32_t *tokens;      /* (n_tokens) generated ids */
    int n_tokens;
    char *text;           /* generated text, NUL-terminated */
    kvs_stop_reason stop_reason;
    double ttft_ms;       /* request start to first token sampled (= the sum of the timings phases) */
    kvs_timings timings;
    float *first_logits;  /* (n_vocab) logits at the first generated position */
    int n_vocab;
    int32_t *top_ids;     /* (n_top) of the first position, by descending logprob */
    float *top_logprobs;  /* (n_top) */
    int n_top;
    kvs_reuse_result *reuse; /* NULL for kvs_generate */
    kvs_docs_result *docs;   /* NULL unless kvs_generate_segments */
} kvs_generate_result;

/* Prefills prompt[0..n_prompt) at positions 0.. and generates. Stops after
 * n_predict tokens, at an end-of-generation token (kept in tokens, not in
 * text), at a stop string (cut from text), when the context is full, or when
 * on_token returns nonzero (stop_reason says which). On failure *out is
 * untouched. */
KVS_API int kvs_generate(kvs_context *ctx, const int32_t *prompt, int n_prompt,
                         const kvs_generate_params *params, kvs_generate_result *out);
/* Frees what the result owns and zeroes it. NULL is a no-op. */
KVS_API void kvs_generate_result_free(kvs_generate_result *r);

/* ------------------------------------------------------------------------ */
/* Chunk cache                                                               */
/* ------------------------------------------------------------------------ */

/*
 * A cache of prompt KV, cut into chunks (64 tokens by default, aligned to
 * absolute positions; the tail that does not fill a chunk is kept too), held
 * in memory within a byte budget (LRU) and optionally persisted to a
 * directory. kvs_generate_cached() serves the longest cached prefix of a
 * prompt from it, computes only the rest, and stores the prompt's new chunks.
 *
 * Guarantee: exact (prefix) reuse is bit-identical to a cold run, at any
 * reuse length, on or off the chunk grid: same first logits bytes, same
 * tokens. The kernels are batch-invariant, so the KV of token t computed in
 * any earlier request equals the KV a cold run computes for it.
 *
 * Keys: every chunk is keyed by a model fingerprint (weights digest,
 * architecture, hyperparameters incl. RoPE, KV dtype, and a probe of the
 * engine's numerics) chained with the token ids, so another model, another
 * KV dtype or an engine that computes other bits never sees these chunks.
 * Damaged, truncated or foreign entries of a cache directory are detected,
 * counted in the stats and never served.
 *
 * Thread-safety: a kvs_cache may be shared by any number of threads, each
 * with its own kvs_context (every call below except _open and _free is safe
 * concurrently). Several processes may share one cache directory: entries
 * appear by atomic rename and every read is verified; a process sees other
 * processes' new entries when it opens the cache or calls kvs_cache_sync.
 */
typedef struct kvs_cache kvs_cache;

#define KVS_MAX_CHUNK_TOKENS 4096 /* largest chunk grid step (the CLI's and Python's bound too) */

typedef struct kvs_cache_params {
    size_t budget_bytes;   /* bytes of chunks kept in memory; 0 = 1/4 of physical RAM */
    const char *cache_dir; /* NULL or "": memory only; else chunks are written through to
                            * DIR/<prefix key>.kvc and loaded lazily (created if missing) */
    int chunk_tokens;      /* chunk grid step in tokens, 0..KVS_MAX_CHUNK_TOKENS; 0 = 64 */
    kvs_kv_type kv_type;   /* KV dtype; must equal the kv_type of the contexts used with
                            * this cache (default KVS_KV_F16) */
    int fsync;             /* 1: fsync every written entry (durable); 0 (default): page cache */
    uint64_t cache_max_bytes; /* bound on cache_dir's entry bytes, kept by every process that
                            * writes there (least recently used entries evicted); 0 = default:
                            * half of the space free for the cache at open ((its bytes +
                            * the file system's available bytes) / 2) */
    /* A shared tier on Redis below RAM and the cache dir (README "Redis tier"): chunks are
     * looked up there (one pipelined round trip per node) and written asynchronously
     * (bounded queue; dropped and counted when full). An unreachable, slow or broken Redis
     * costs at most redis_timeout_ms per socket operation, never a request. At most one
     * of redis_url and redis_cluster. Strings are copied. */
    const char *redis_url;           /* redis://[user[:password]@]host[:port][/db]; NULL: none */
    const char *redis_cluster;       /* host:port[,host:port...] of a Redis Cluster; NULL: none */
    const char *redis_password_file; /* the password: first line of this file (if the URL has
                                      * none); else $KVSTITCH_REDIS_PASSWORD if set */
    int redis_timeout_ms;            /* per socket operation; 0 = 50 */
    const char *redis_codec;         /* how this process writes values: "raw" (NULL or "": the
                                      * default), "zstd" or "shuffle-zstd" (byte planes + zstd:
                                      * ~15% smaller f16 values, slower reads; README "Redis
                                      * tier"); values of every codec are read */
    /* A cache key (README "Trust"): with one, every entry this cache writes (cache dir and
     * Redis) carries an HMAC-SHA256 under the key, and an entry is served only if its MAC
     * verifies ("bad MAC" otherwise: counted as damaged, never served, dropped): whoever
     * can write the directory or the Redis but lacks the key cannot make this process serve
     * KV of their choosing. A keyed cache names its entries apart (the key's id is folded
     * into the fingerprint): a keyless cache, or one with another key, sees them as another
     * model's (never served, never removed), and they see its entries so. A key has at least
     * 16 bytes; at most one of mac_key and cache_key_file. The key is copied at open (the
     * caller may wipe its buffer after) and never printed; an unreadable, empty or short
     * key fails the open with a message naming the file. */
    const void *mac_key;        /* the key's bytes (mac_key_len of them); NULL: no key */
    size_t mac_key_len;
    const char *cache_key_file; /* or: the key is this file's bytes, surrounding whitespace
                                 * (spaces, tabs, line ends) trimmed; NULL or "": none */
} kvs_cache_params;

KVS_API kvs_cache_params kvs_cache_default_params(void);

/* Opens a cache for one model: computes the model fingerprint (the weights
 * digest is computed once per model and remembered in the cache directory,
 * keyed by the file's identity, so later processes skip it), then indexes the
 * directory's entry headers (payloads are read only when used). The model
 * must outlive the cache. On failure *out is untouched. */
KVS_API int kvs_cache_open(kvs_model *model, kvs_cache_params params, kvs_cache **out);
/* Frees the cache; the files stay. No call on it may be running. NULL is a no-op. */
KVS_API void kvs_cache_free(kvs_cache *cache);
/* Indexes entries other processes wrote since open. *n_new (may be NULL) = entries added. */
KVS_API int kvs_cache_sync(kvs_cache *cache, int *n_new);
/* Waits until the writes queued for the shared Redis tier have been written
 * or have failed (writes go out on a background thread: a call that stores
 * chunks returns before Redis has them), at most timeout_ms: KVS_OK, or
 * KVS_ERR_IO when writes were still queued at the deadline. Then
 * kvs_cache_get_stats's redis_put_errors / redis_put_dropped count every
 * write of the calls before it. KVS_OK at once without a Redis tier. */
KVS_API int kvs_cache_flush(kvs_cache *cache, int timeout_ms);
/* Why the Redis tier could not be used, into out[cap]: "redis HOST:PORT:
 * AUTH: WRONGPASS ..." (the server's words where it gave some, else "not
 * reachable (...)") for the first node whose last connect failed; "" when
 * every node's last connect worked, or without a Redis tier. */
KVS_API void kvs_cache_redis_why_down(kvs_cache *cache, char *out, size_t cap);
/* Removes every chunk from memory; with and_disk also every entry file of the
 * cache directory (of any model). Without, the directory's entries stay
 * indexed (their payloads read again when used), as after kvs_cache_open. */
KVS_API int kvs_cache_clear(kvs_cache *cache, int and_disk);
/* The fingerprint as 64 hex digits + NUL. */
KVS_API void kvs_cache_fingerprint_hex(const kvs_cache *cache, char hex[65]);
/* The fingerprint a cache of model with KV dtype kv_type roots its keys in
 * (what kvs_cache_fingerprint_hex gives for such a cache), as 64 hex digits
 * + NUL, without opening one. The KV dtype is part of it: the same model's
 * entries in another KV dtype carry another fingerprint (`cache stats -m`
 * tells a model's KV types apart with it). Costs a short forward pass the
 * first time per KV dtype, and hashing the weights if no cache of this model
 * handle has done it; both are remembered in the handle. Thread-safe. On
 * failure hex is untouched. */
KVS_API int kvs_model_fingerprint_hex(kvs_model *model, kvs_kv_type kv_type, char hex[65]);

typedef struct kvs_cache_stats {
    int chunk_tokens;
    uint64_t entries;          /* chunks indexed (in memory or on disk only) */
    uint64_t resident;         /* chunks with their KV in memory */
    uint64_t bytes;            /* bytes counted against the budget (resident chunks) */
    uint64_t budget_bytes;
    uint64_t index_bytes;      /* radix tree, hash tables, disk-only chunk records */
    uint64_t prefix_reachable; /* chunks a prefix lookup can reach */
    uint64_t lookups, hits, misses;
    uint64_t hit_tokens;       /* prompt tokens served from the cache */
    uint64_t lookup_tokens;    /* prompt tokens looked up */
    double lookup_seconds;     /* time in lookups, disk reads included */
    uint64_t inserts, evictions;
    uint64_t disk_writes, disk_write_errors;
    uint64_t disk_loads, disk_load_bytes;
    double disk_load_seconds;
    uint64_t disk_bad;         /* damaged or truncated entries found: never served */
    uint64_t disk_foreign;     /* entries of another model / KV dtype: skipped */
    uint64_t disk_missing;     /* entries that vanished before they could be read */
    uint64_t disk_orphans;     /* entries whose parent chain is missing (not prefix-reachable) */
    uint64_t dir_max_bytes;    /* the cache dir's byte bound in force (0 without a dir) */
    uint64_t tier_key_hits;    /* chunks a tier served by key that were not indexed (another
                                * process wrote them since open) */
    /* The Redis tier (all 0 without one). */
    uint64_t redis_gets, redis_hits;      /* chunks asked of Redis, served by it */
    uint64_t redis_get_bytes;             /* KV bytes served */
    uint64_t redis_puts, redis_put_bytes; /* chunks handed to the writer, value bytes written */
    uint64_t redis_put_dropped;           /* not written by design: queue full, Redis down */
    uint64_t redis_put_errors;            /* writes Redis refused or that failed */
    uint64_t redis_bad, redis_foreign;    /* damaged / another model's values: never served */
    uint64_t redis_errors;                /* lookups without an answer (down, timeout, garbage) */
    uint64_t redis_timeouts, redis_breaker_opens, redis_connects; /* connection events */
    uint64_t redis_moved;                 /* cluster redirections followed (MOVED + ASK) */
    uint64_t redis_partial_hits;          /* chunks from Redis that served a prompt stopping inside
                                           * them (a partial-chunk marker led to them) */
    /* Entries without their KV in memory (a tier holds it) are bounded by
     * their records' bytes: budget_bytes / 8, at least 64 MiB. */
    uint64_t index_drops;                 /* such entries dropped from the index by that bound
                                           * (their tier keeps them; a lookup still finds their
                                           * grid chunks there by key) */
    uint64_t redis_put_too_large;         /* of redis_put_dropped: chunks whose value would pass
                                           * the tier's value limit (a long document, or long
                                           * chunks): never written */
    uint64_t redis_max_value_bytes;       /* that limit (0 without Redis) */
    /* Added in 0.2 (at the end: the layout before stays). Entries refused by
     * the MAC check of a keyed cache (kvs_cache_params.cache_key_file): a
     * forgery, or an entry written without the key under the keyed name. They
     * are damage too, so disk_bad / redis_bad include them (their meaning is
     * unchanged); these say how many of those were MAC failures. */
    uint64_t disk_bad_mac;                /* of disk_bad */
    uint64_t redis_bad_mac;               /* of redis_bad */
} kvs_cache_stats;

KVS_API void kvs_cache_get_stats(kvs_cache *cache, kvs_cache_stats *st);

/* One cached chunk, for listing. Strings are hex keys (NUL-terminated);
 * tokens points into the cache or a scan buffer and is valid only during the
 * callback. */
typedef struct kvs_cache_entry {
    char prefix_key[65];   /* SHA-256(parent key || tokens): names the whole history */
    char parent_key[65];   /* previous chunk's prefix key, or the fingerprint at pos0 = 0 */
    char content_key[65];  /* SHA-256(fingerprint || tokens): the tokens alone */
    char fingerprint[65];  /* the model fingerprint it belongs to */
    int pos0;              /* absolute position of its first token */
    int n_tok;
    const int32_t *tokens; /* (n_tok) */
    kvs_kv_type kv_type;
    int n_layer, n_kv_head, head_dim;
    uint64_t kv_bytes;     /* payload bytes */
    int64_t created_ns;    /* CLOCK_REALTIME ns */
    int64_t last_access_ns;/* this process; = created_ns if unused here */
    uint64_t n_access;     /* uses by this process */
    int resident;          /* KV in memory (kvs_cache_ls only) */
    int on_disk;           /* a file exists for it */
    int prefix_reachable;  /* a prefix lookup can reach it (kvs_cache_ls only) */
    const char *origin;    /* "prefix" (a piece of a prompt's exact history), "doc" (a document
                            * computed after the doc prefix, found by content) or "baked" (a
                            * document computed after other documents: kvs_bake_docs); static */
    int n_neighbours;      /* "baked": the documents it was computed after (at most 255) */
} kvs_cache_entry;

/* Return nonzero to stop the iteration. */
typedef int (*kvs_cache_entry_fn)(void *user, const kvs_cache_entry *e);

/* Calls fn for every chunk of the cache (in memory or on disk), in no
 * particular order. fn must not call into the cache. */
KVS_API int kvs_cache_ls(kvs_cache *cache, kvs_cache_entry_fn fn, void *user);

/* Directory-level access without a model (`kvstitch cache ls|stats|clear`). */
typedef struct kvs_cache_dir_stats {
    uint64_t entries;        /* valid entries (any model) */
    uint64_t bytes;          /* their file bytes */
    uint64_t models;         /* distinct fingerprints among them (a model's entries in another
                              * KV dtype have another: kvs_model_fingerprint_hex) */
    uint64_t damaged;        /* files that fail a check: bad magic/version/header, truncated */
    uint64_t unreadable;     /* read errors, and an entry's name on what is not a regular file
                              * (FIFO, directory, symlink...: counted here only, never read) */
    uint64_t tmp;            /* writers' temporary files */
    uint64_t stale_tmp;      /* of which stale: their writer is gone (cache prune removes them) */
    uint64_t unreachable;    /* valid entries whose parent chain is broken: no prompt reaches them
                              * until the missing chunk is stored again (cache prune removes them) */
    uint64_t unreachable_bytes;
    uint64_t other_files;    /* files that are not the cache's (never touched) */
} kvs_cache_dir_stats;

/* Checks every entry header of dir (payload checksums are verified on use,
 * not here) and calls fn (may be NULL) for each valid one, of any model.
 * A missing dir is an empty cache. When fn returns nonzero the scan stops
 * there and *st holds what it had seen (unreachable counts then partial). */
KVS_API int kvs_cache_dir_scan(const char *dir, kvs_cache_entry_fn fn, void *user, kvs_cache_dir_stats *st);
/* kvs_cache_dir_scan (without a callback) that also reads every payload and
 * verifies its checksum: damaged counts payload damage too. Reads all of dir. */
KVS_API int kvs_cache_dir_verify(const char *dir, kvs_cache_dir_stats *st);
/* Removes every entry file of dir (any model), stale temporary files and
 * stale junk (kvs_cache_prune_report): only the cache's own files. */
KVS_API int kvs_cache_dir_clear(const char *dir, uint64_t *n_removed);
/* Added in 0.2. What kvs_cache_dir_clear_report removed. */
typedef struct kvs_cache_clear_report {
    uint64_t removed, removed_bytes;   /* entry files */
    uint64_t tmp_removed;              /* stale temporary files of writers that died */
    uint64_t junk_removed, junk_bytes; /* stale junk (kvs_cache_prune_report) */
} kvs_cache_clear_report;
/* kvs_cache_dir_clear that also says what else it removed (`cache clear`
 * reports junk as `cache prune` does). r is filled even on KVS_ERR_IO (a
 * file it could not remove: the first one named). */
KVS_API int kvs_cache_dir_clear_report(const char *dir, kvs_cache_clear_report *r);

/* Added in 0.2. What kvs_cache_verify found. */
typedef struct kvs_cache_verify_report {
    int macs_checked;  /* 1: the cache has a key and each entry's MAC was checked too; 0:
                        * keyless, checksums only (keyed entries carry another fingerprint:
                        * not this cache's, never read here) */
    uint64_t entries;  /* entries of the cache's fingerprint read whole that passed */
    uint64_t damaged;  /* failed the payload checksum, or truncated since the listing */
    uint64_t bad_mac;  /* failed the MAC check: forged (checksums recomputed without the key),
                        * or written without the key under the keyed name */
    uint64_t unreadable; /* read errors, or gone since the listing (not the entry's fault) */
} kvs_cache_verify_report;
/* Reads every entry of the cache's own fingerprint (its model, KV type and
 * key) in its cache dir whole and checks it as a request would: payload
 * checksum, and with a key the MAC. Removes nothing (a request that meets a
 * failing entry drops it). Other fingerprints' entries are not read
 * (kvs_cache_dir_verify checks every model's checksums). KVS_ERR_INVALID_ARG
 * for a cache without a cache dir. */
KVS_API int kvs_cache_verify(kvs_cache *cache, kvs_cache_verify_report *r);

/* The default byte bound of dir (see kvs_cache_params.cache_max_bytes). */
KVS_API uint64_t kvs_cache_dir_default_max_bytes(const char *dir);

typedef struct kvs_cache_prune_params {
    uint64_t max_bytes;    /* evict least recently used entries down to this; 0 = no bound */
    int64_t older_than_s;  /* remove entries not used for this many seconds; 0 = none */
    int keep_unreachable;  /* 1: keep entries whose parent chain is broken (default 0: removed) */
} kvs_cache_prune_params;

typedef struct kvs_cache_prune_report {
    uint64_t removed, removed_bytes; /* entries removed (by the bound, age or unreachable) */
    uint64_t unreachable_removed;
    uint64_t tmp_removed;            /* stale temporary files */
    uint64_t entries, bytes;         /* what remains */
    uint64_t junk_removed, junk_bytes; /* stale junk: files with an entry's name but not its
                                      * magic (empty, or another writer's bytes), untouched for
                                      * an hour (never served; counted toward the bound) */
} kvs_cache_prune_report;

/* Reclaims space in dir (any model): unreachable entries, stale temporary
 * files and stale junk, then entries older than older_than_s, then least
 * recently used ones down to max_bytes. Only the cache's own files are
 * touched (junk is the cache's by its name; a fresh one may be being
 * written, and stays). A file
 * that could not be removed (no write permission on dir, a read-only file
 * system) stays in r's figures and makes the call return KVS_ERR_IO naming
 * the first one, r still filled; entries it may not remove are left out of
 * the bound (no room to make), so the rest are not evicted for them. */
KVS_API int kvs_cache_dir_prune(const char *dir, const kvs_cache_prune_params *p, kvs_cache_prune_report *r);
/* The same on the Redis tier of params (redis_url or redis_cluster), without a
 * model: every kvstitch key ("kvs:*") of any model, found by SCAN on every
 * master (never KEYS, never FLUSHALL; other keys are never touched). scan:
 * headers only (payloads are verified on use); st->bytes = value bytes;
 * unreadable = keys that vanished or could not be read. */
KVS_API int kvs_cache_redis_scan(const kvs_cache_params *params, kvs_cache_entry_fn fn, void *user,
                                 kvs_cache_dir_stats *st);
KVS_API int kvs_cache_redis_clear(const kvs_cache_params *params, uint64_t *n_removed);

/* --- reuse in generation --- */

typedef enum kvs_reuse_mode {
    KVS_REUSE_PREFIX = 0, /* serve the longest cached exact prefix: bit-identical to cold */
    KVS_REUSE_NONE = 1,   /* read nothing from the cache: every prompt token is computed */
} kvs_reuse_mode;

/* "prefix", "none"; NULL for an unknown value. */
KVS_API const char *kvs_reuse_mode_name(kvs_reuse_mode mode);
/* Parses a name; KVS_ERR_INVALID_ARG naming the accepted values otherwise. */
KVS_API int kvs_reuse_mode_parse(const char *name, kvs_reuse_mode *out);



/* What kvs_warm stored. */
typedef struct kvs_warm_report {
    int n_tokens;        /* tokens of the text / sequence */
    int chunk_tokens;    /* grid step */
    int n_chunks;        /* chunks it was cut into */
    int n_stored;        /* chunks newly stored (with a cache dir: written to it) */
    int n_write_errors;  /* chunks whose write to the cache dir failed (not in n_stored) */
    int n_existing;      /* chunks already cached */
    int n_cached;        /* tokens whose KV came from the cache (not recomputed) */
    int n_computed;      /* tokens run through the model */
    int aligned;         /* 1: n_tokens is a multiple of chunk_tokens */
    int partial_tail;    /* tokens in the last, partial chunk (0 when aligned) */
    int border_stable;   /* 0: the tokenization of the text's end may change once more text
                          * follows (BPE merges across the border); always 1 for kvs_warm */
    int stable_tokens;   /* tokens a prompt that continues the text is sure to share with it:
                          * a later prompt reuses at most this many */
    char warning[256];   /* "" or a sentence for users */
    double ms;           /* wall time */
} kvs_warm_report;

/* Stores the KV of tokens[0..n) (positions 0..n-1) without generating:
 * reuses what is cached already and computes the rest. */
KVS_API int kvs_warm(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, kvs_warm_report *rep);
/* The same for a text (tokenized with flags, KVS_TOKENIZE_*), plus the border
 * check: the text is tokenized again followed by probe continuations (" x":
 * a word, "x": letters glued on, "\n": a newline) and the report says how
 * many leading tokens survive every one (stable_tokens), with a warning if
 * that is fewer than all. */
KVS_API int kvs_warm_text(kvs_context *ctx, kvs_cache *cache, const char *text, size_t len, int flags,
                          kvs_warm_report *rep);

/* --- non-prefix reuse: segmented prompts (RAG) --- */

/*
 * A prompt given as segments: a system message, documents, a question.
 * Every segment is tokenized on its own (a document has the same tokens
 * wherever it appears); with chat = 1 they are laid out in the model's chat
 * template (system turn; documents and question in the user turn;
 * generation prompt).
 *
 * A document's KV is computed once, after a fixed shared prefix (doc_prefix;
 * by default the chat template's text before the documents with an empty
 * system message, or BOS / nothing without chat), stored in the cache by its
 * content, and reused wherever the document appears in a later prompt, in
 * any order and combination: its keys are rotated to their new positions
 * (RoPE composes), its values copied. Such reuse is approximate (the
 * document's KV does not reflect the documents before it in the new
 * prompt); a repair strategy recomputes a chosen subset of tokens. The
 * leading system segment (and anything else matching a cached exact prefix)
 * takes the exact, bit-identical path. Warm and generate must agree on chat
 * and doc_prefix, or the documents are computed again.
 */
typedef struct kvs_segments {
    int chat;                 /* 1: lay the segments out in the chat template */
    const char *system;       /* system message, NULL = none (chat: the template's default, if any) */
    const char *const *docs;  /* (n_docs) documents, UTF-8 (tokenized as plain text); "" is skipped */
    const size_t *doc_lens;   /* (n_docs) byte lengths, or NULL: NUL-terminated */
    int n_docs;
    const char *question;     /* the live tail; may be NULL or "" only with chat */
    const char *doc_prefix;   /* NULL = the default above; else tokenized with special tokens */
} kvs_segments;

typedef enum kvs_repair_mode {
    KVS_REPAIR_NONE = 0,       /* moved documents as they are (fastest, lowest fidelity) */
    KVS_REPAIR_SELECTIVE = 1,  /* recompute the last `overlap` tokens before each seam */
    KVS_REPAIR_CACHEBLEND = 2, /* CacheBlend: recompute the tokens whose KV deviates most */
    KVS_REPAIR_FIRSTK = 3,     /* recompute the first `first_k` tokens of each moved document */
    KVS_REPAIR_FULL = 4,       /* recompute everything after the exact prefix: a cold prefill's bits */
    KVS_REPAIR_QUERY = 5,      /* recompute the top `recompute_ratio` of moved tokens the question attends to
                                * (default) */
} kvs_repair_mode;

/* How CacheBlend ranks tokens at the check layer. */
typedef enum kvs_deviation {
    KVS_DEVIATION_V_L2 = 0,  /* L2 norm of (fresh V - cached V) (CacheBlend's code) */
    KVS_DEVIATION_K_COS = 1, /* 1 - cosine(fresh K, cached K) (KVBoost) */
} kvs_deviation;

typedef struct kvs_repair_params {
    kvs_repair_mode mode;   /* default KVS_REPAIR_QUERY (bench/results/rag_eval_query.md says why) */
    float recompute_ratio;  /* cacheblend, query: fraction of moved tokens recomputed (0.10); 0 = none,
                             * 1 = full */
    float min_deviation;    /* cacheblend: recompute only tokens deviating more than this (0) */
    int check_layer;        /* cacheblend: layer where the deviation is measured (1); layers
                             * before it run for every moved token (checked against the
                             * model's layers only when cacheblend runs) */
    kvs_deviation deviation;/* cacheblend: the ranking metric (V L2) */
    int overlap;            /* selective: tokens before each seam (16) */
    int first_k;            /* firstk: tokens at the start of each moved document (16) */
    int cacheblend_seams;   /* cacheblend: 1 (default) = with a ratio > 0, also recompute selective's
                             * tokens (the last `overlap` before each seam) beyond the ratio.
                             * Defaults chosen with bench/rag_eval: see bench/results/rag_eval.md */
    float narrow_from;      /* cacheblend: gradual narrowing (CacheBlend's gradual filtering); 0 = off
                             * (default). Else the share kept at the check layer, in
                             * [recompute_ratio, 1]; over the next narrow_layers layers the kept
                             * tokens are re-ranked by the deviation of their fresh K/V and shrink
                             * geometrically to recompute_ratio. recomputed_tokens counts the
                             * final set (the tokens recomputed through the last layer) */
    int narrow_layers;      /* cacheblend: layers the narrowing takes (4) */
    int query_seams;        /* query: 1 = with a ratio > 0, also recompute selective's tokens (the
                             * last `overlap` before each seam) beyond the ratio; 0 (default) = off */
} kvs_repair_params;

KVS_API kvs_repair_params kvs_repair_default_params(void);
/* "none", "selective", "cacheblend", "firstk", "full", "query"; NULL if unknown. */
KVS_API const char *kvs_repair_mode_name(kvs_repair_mode mode);
/* Parses a name; KVS_ERR_INVALID_ARG naming the accepted values otherwise. */
KVS_API int kvs_repair_mode_parse(const char *name, kvs_repair_mode *out);
/* "v-l2", "k-cos"; NULL if unknown. */
KVS_API const char *kvs_deviation_name(kvs_deviation d);
KVS_API int kvs_deviation_parse(const char *name, kvs_deviation *out);

/* The one set of reuse parameters, for kvs_generate_cached and
 * kvs_generate_segments. */
/* APE's attention recalibration (arXiv 2502.05431) for kvs_generate_segments:
 * the question's and the generated tokens' attention over the moved documents
 * uses the temperature T, and the documents' share of it is weighed by their
 * log-sum-exp times S before it is merged with the rest of the prompt. Zero
 * extra work; the prompt's KV is not changed, only what later tokens read
 * from it. {0, 0} = off (default); else both in [0.1, 4] (the paper: 0.9,
 * 0.9). It lasts until the context's KV is rewritten before the question. */
typedef struct kvs_recal_params {
    float temperature;
    float scale;
} kvs_recal_params;

typedef struct kvs_reuse_params {
    kvs_reuse_mode mode;  /* KVS_REUSE_PREFIX (default): serve what is cached; KVS_REUSE_NONE: read
                           * nothing from the cache (every prompt token is computed: a cold run) */
    int store;            /* 1 (default): after the request, store the prompt's chunks that are
                           * not cached yet (generated tokens are not stored); segments: also the
                           * documents computed on the way */
    const int *borders;   /* kvs_generate_cached: segment borders (token indices, ascending) that
                           * no chunk may span; may be NULL. Segments take theirs from the layout */
    int n_borders;
    kvs_repair_params repair; /* kvs_generate_segments: how moved documents are repaired
                               * (kvs_repair_default_params) */
    int use_baked;        /* kvs_generate_segments: 1 (default) = a document's baked KV
                           * (kvs_bake_docs) when there is one, else its plain KV; 0 = plain only */
    kvs_recal_params recal; /* kvs_generate_segments: {0, 0} (default) = none */
} kvs_reuse_params;

KVS_API kvs_reuse_params kvs_reuse_default_params(void);

/* kvs_generate with the cache: finds the longest cached prefix of the prompt
 * (at most n_prompt - 1 tokens, so the first logits are always computed),
 * copies its KV into the context (no recompute), prefills the remaining
 * tokens at their absolute positions, generates as kvs_generate does, then
 * stores the prompt's new chunks. The chunks used stay pinned (never
 * evicted) during the request. The result's reuse part is set (n_cached,
 * cache_hit_ratio, chunk boundaries); ttft_ms counts from the call, lookup
 * and copy included. A damaged cache entry ends the reuse before it
 * (counted in the stats); the output is the cold output anyway. reuse may be
 * NULL (defaults; its repair part does not apply here). The context's
 * kv_type must be the cache's. */
KVS_API int kvs_generate_cached(kvs_context *ctx, kvs_cache *cache, const int32_t *prompt, int n_prompt,
                                const kvs_generate_params *params, const kvs_reuse_params *reuse,
                                kvs_generate_result *out);

/* The token sequence kvs_generate_segments runs for seg (the full-prefill
 * baseline is kvs_generate over exactly these tokens). *tokens is allocated
 * by the library: release it with kvs_free(). */
KVS_API int kvs_segments_tokenize(const kvs_model *model, const kvs_segments *seg, int32_t **tokens, int *n_tokens);

/* Generates from a segmented prompt with the cache: the longest exact
 * prefix is served bit-exactly (as kvs_generate_cached); every document
 * after it is taken from the cache (or computed after the doc prefix and
 * stored), moved into place, and repaired with reuse->repair; then the
 * question is prefilled and generation runs as kvs_generate. ttft_ms counts
 * from the call (tokenization, lookups, document computation, moves and
 * repair included). The result's reuse part (n_cached = exact prefix
 * tokens) and docs part are set. Afterwards the exact part of the prompt
 * (the system segment; everything for `full`) is stored by prefix. reuse
 * may be NULL (defaults); with mode KVS_REUSE_NONE nothing is read from the
 * cache and every token is computed (repair is then `full`). */
KVS_API int kvs_generate_segments(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg,
                                  const kvs_generate_params *params, const kvs_reuse_params *reuse,
                                  kvs_generate_result *out);

/* What kvs_warm_docs did. */
typedef struct kvs_warm_docs_report {
    int n_docs;          /* documents (non-empty) */
    int n_cached;        /* already cached (after the same doc prefix) */
    int n_computed;      /* computed and stored now */
    int n_tokens;        /* tokens of all documents */
    double ms;           /* wall time */
    int n_baked;         /* kvs_bake_docs: documents baked and stored now */
    int n_bake_cached;   /* kvs_bake_docs: documents that had a baked entry already (kept) */
    int n_unbaked;       /* kvs_bake_docs: documents left plain (no other document, or none fits) */
    int n_prefix_computed; /* kvs_docs_warmer: tokens before the first document it computed (and stored) */
    int n_write_errors;  /* documents computed but kept in memory only: their cache-dir write failed */
    int too_long_doc;    /* -1; after KVS_ERR_CONTEXT_FULL from kvs_warm_docs / kvs_bake_docs (the
                          * report's only field then): the index in seg->docs of the first document
                          * that does not fit the context after the doc prefix */
} kvs_warm_docs_report;

/* Caches the KV of seg's documents (computing the missing ones after the
 * doc prefix) without generating; the system and question are ignored
 * except for the layout (chat, doc_prefix). Each document must fit the
 * context after the doc prefix; all of them together need not (a corpus
 * can be warmed in one call). rep may be NULL. */
KVS_API int kvs_warm_docs(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, kvs_warm_docs_report *rep);

/* Cross-document baking (FusionRAG's offline step), for documents that are
 * retrieved together: warms seg's documents as kvs_warm_docs, then computes
 * each one again after the cached KV of up to n_neighbours of the others
 * (< 0: all of them; the most similar by shared tokens closest to it;
 * neighbours that do not fit the context are dropped, least similar first)
 * and stores that as the document's baked entry (`cache ls`: "baked", with
 * the number of neighbours). A request with use_baked (the default) moves
 * a document's baked KV instead of its plain KV: the repair then starts
 * from KV that has seen other documents. The first baking of a document
 * (after the same doc prefix) is kept; a document baked already is left as
 * it is (n_bake_cached). Baked KV is never served as an exact prefix.
 * bench/results/rag_eval_bake.md measures it. rep may be NULL. */
KVS_API int kvs_bake_docs(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, int n_neighbours,
                          kvs_warm_docs_report *rep);

/* Stepwise kvs_warm_docs, for a scheduler that interleaves other work
 * (kvstitch serve: a request whose documents are not cached computes them a
 * slice at a time between the decode steps of the other streams, then
 * kvs_generate_segments finds them cached). new: lays out seg (not used
 * after the call; ctx and cache must outlive the warmer, and only it uses
 * ctx until the last step). step: computes at most max_tokens (>= 1)
 * tokens: first the prompt before the first document (the system segment),
 * after its cached part, in ctx's KV, stored by prefix when complete as
 * kvs_generate_segments stores it (so the request serves it exactly); then
 * documents in order, the first uncached one a slice at a time, each
 * stored when its last slice is done; *done = 1 once every document is
 * cached (or was computed and offered to the store: with a RAM budget too
 * small for the request's documents, kvs_generate_segments computes the
 * evicted ones again). With use_baked, a document that has a baked entry is
 * not computed (such a request moves its baked KV). The bytes stored are
 * kvs_warm_docs' whatever max_tokens is. report: as kvs_warm_docs' (ms:
 * time inside the steps). Each returns KVS_OK or an error code. */
typedef struct kvs_docs_warmer kvs_docs_warmer;
KVS_API int kvs_docs_warmer_new(kvs_context *ctx, kvs_cache *cache, const kvs_segments *seg, int use_baked,
                                kvs_docs_warmer **out);
KVS_API int kvs_docs_warmer_step(kvs_docs_warmer *w, int max_tokens, int *done);
KVS_API void kvs_docs_warmer_report(const kvs_docs_warmer *w, kvs_warm_docs_report *rep);
/* Tokens of the prompt's exact prefix w computed: the report's
 * n_prefix_computed, plus the first document's where it sits right after
 * them (its entry is then that prefix's exact history, which the request's
 * lookup serves as cached: a server counts them computed, not cached).
 * 0 for NULL. (A function, not a report field: the report's layout stays.) */
KVS_API int kvs_docs_warmer_exact_computed(const kvs_docs_warmer *w);
KVS_API void kvs_docs_warmer_free(kvs_docs_warmer *w); /* NULL is fine */

/* ------------------------------------------------------------------------ */
/* Step-level serving (kvstitch serve: continuous batching)                  */
/* ------------------------------------------------------------------------ */

/*
 * What a scheduler needs to drive many sequences itself, one forward pass at
 * a time, instead of handing a whole request to kvs_generate*: a sampler,
 * one decode step over several contexts, and the cache in steps. (Exported
 * from the shared library too: they had been in this header but not in
 * libkvstitch.so.)
 */

/* Token sampler (repetition penalty -> presence/frequency -> top-k -> temperature -> top-p ->
 * min-p -> draw; xoshiro256** from params.seed). Same params, history and
 * logits give the same token on any machine. Owned by the caller; one
 * thread at a time. */
typedef struct kvs_sampler kvs_sampler;
KVS_API int kvs_sampler_new(kvs_sampler_params params, int n_vocab, kvs_sampler **out);
KVS_API void kvs_sampler_free(kvs_sampler *s);
/* Adds a generated token to the history: the repetition penalty's window
 * and the presence/frequency counts (kvs_generate accepts every sampled
 * token here, after the last repeat_last_n prompt tokens through
 * kvs_sampler_accept_prompt, which feeds the window only). */
KVS_API void kvs_sampler_accept(kvs_sampler *s, int32_t token);
KVS_API void kvs_sampler_accept_prompt(kvs_sampler *s, int32_t token);
/* Picks a token from n_vocab logits (not modified). Does not accept it.
 * -1 (kvs_last_error says why) when s or logits is NULL. */
KVS_API int32_t kvs_sampler_sample(kvs_sampler *s, const float *logits);

/* One decode step for n sequences in n distinct contexts of one model:
 * tokens[r] at position pos[r] runs in ctxs[r] (its K/V are written into
 * ctxs[r]'s buffer, it attends to ctxs[r]'s slots 0..pos[r]), all rows
 * stacked into ONE forward pass (each weight matrix is read once for all of
 * them). logits (n, n_vocab) receives every row's logits. Uses the scratch
 * and threads of ctxs[0]: n <= its n_batch, no other context's n_ctx may
 * exceed its own; no other thread may use any of the contexts meanwhile.
 * Batch-invariant: row r's bits (KV and logits) equal those of
 * kvs_decode(ctxs[r], &tokens[r], &pos[r], 1, ...), and a row is refused
 * as that call would refuse it (a slot never written, say), naming the row:
 * then nothing runs. A row whose activations overflow (finite weights of
 * extreme size) fails alone, as that call would: the step returns its
 * KVS_ERR_FORMAT, naming the first such row; the other rows' KV and logits
 * are written and exact all the same (kvs_decode_batch_rows says which). */
KVS_API int kvs_decode_batch(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n, float *logits);
/* kvs_decode_batch with each row's status in row_status (n ints; NULL: as
 * kvs_decode_batch): KVS_OK where row r's KV and logits are written and
 * exact, else why it failed (a refused call: every row its status; an
 * overflow: that row's KVS_ERR_FORMAT, its logits undefined, its slot
 * exact only where the overflow came after the layers, as kvs_decode's).
 * Returns KVS_OK only when every row is; a server's step ends only the
 * streams whose rows failed. */
KVS_API int kvs_decode_batch_rows(kvs_context *const *ctxs, const int32_t *tokens, const int32_t *pos, int n,
                                  float *logits, int *row_status);

/* Tokens a prefix lookup of tokens[0..n) would serve now (*n_hit), without
 * copying anything: chunks the cache indexes count as they stand (one it
 * evicted to its directory or Redis as last seen there, not read again:
 * the load verifies it), and what it lacks is read from the directory or
 * Redis once (then indexed). The load may serve fewer (a damaged entry). */
KVS_API int kvs_cache_peek_prefix(kvs_cache *cache, const int32_t *tokens, int n, int *n_hit);
/* Copies the KV of the longest cached prefix of tokens[0..n) into ctx at
 * slots 0..*n_loaded-1 (positions = slots). Pass n_prompt - 1 to keep the
 * last prompt token for the logits. The bytes are those a cold prefill
 * writes; the caller computes tokens [*n_loaded, n_prompt) with kvs_decode. */
KVS_API int kvs_cache_load_prefix(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_loaded);
/* Stores ctx's KV of tokens[0..n) (slots 0..n-1, all written) by prefix,
 * the chunks not cached yet. For a conversation, pass prompt + generated
 * tokens whose KV was written (not the last sampled one), so that the next
 * turn, whose prompt repeats them, computes only what is new.
 * *n_new (may be NULL) = chunks stored. KVS_ERR_INVALID_ARG, naming the
 * first slot, unless slots 0..n-1 hold the exact KV of these tokens: what
 * kvs_decode / kvs_decode_logits / kvs_decode_batch wrote in order from
 * slot 0 (positions = slots), or a cache load (kvs_cache_load_prefix, a
 * generate call's lookup); a later write to a slot ends it there (a
 * document's moved KV is never stored by prefix). */
KVS_API int kvs_cache_store_context(kvs_context *ctx, kvs_cache *cache, const int32_t *tokens, int n, int *n_new);

/* SHA-256 helper (hex output, 65 bytes incl. NUL). */
KVS_API void kvs_sha256_hex(const void *data, size_t len, char hex[65]);

#ifdef __cplusplus
}
#endif
#endif /* KVSTITCH_H */
