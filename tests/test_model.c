/* Model loading: hparams and weight views of the real model, vocabulary-only
 * files, and errors that name the key / tensor / architecture (made by
 * patching bytes of the tiny random llama in ../shared/models). */
#include <math.h>
#include <fcntl.h>
#include <unistd.h>

#include "gguf_builder.h"
#include "harness.h"
#include "kvstitch.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "engine/context.h"
#include "model/model.h"

static const char *tiny_path(char *buf, size_t cap) {
    snprintf(buf, cap, "%s/models/llama-2-tiny-random.gguf", kt_shared_dir());
    return buf;
}

TEST(test_smollm2_hparams) {
    const char *path = kt_model_path();
    if (!path) return;
    kvs_model *m = NULL;
    int st = kvs_model_load(path, kvs_model_default_params(), &m);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return;
    kvs_model_info in;
    kvs_model_get_info(m, &in);
    CHECK(!strcmp(in.arch, "llama"));
    CHECK_EQ_INT(in.n_layer, 30);
    CHECK_EQ_INT(in.n_embd, 576);
    CHECK_EQ_INT(in.n_head, 9);
    CHECK_EQ_INT(in.n_head_kv, 3);
    CHECK_EQ_INT(in.head_dim, 64);
    CHECK_EQ_INT(in.n_ff, 1536);
    CHECK_EQ_INT(in.n_vocab, 49152);
    CHECK_EQ_INT(in.n_ctx_train, 8192);
    CHECK_EQ_INT(in.rope_dim, 64);
    CHECK_EQ_INT(in.rope_neox, 0);
    CHECK_NEAR(in.rope_freq_base, 100000.0, 1e-3);
    CHECK_NEAR(in.rope_freq_scale, 1.0, 0);
    CHECK_NEAR(in.norm_eps, 1e-5, 1e-9);
    CHECK_EQ_INT(in.tied_output, 1);
    CHECK_EQ_INT(in.n_tensors, 272);
    CHECK_EQ_INT(in.vocab_only, 0);
    CHECK_EQ_INT(in.gguf_version, 3);
    CHECK(!strcmp(in.tokenizer_model, "gpt2"));
    CHECK_EQ_INT(in.bos_id, 1);
    CHECK_EQ_INT(in.eos_id, 2);
    CHECK_EQ_INT(in.add_bos, 0);
    CHECK(in.n_params > 130000000 && in.n_params < 140000000);
    CHECK(in.weight_bytes > 90000000 && in.weight_bytes < 100000000);

    int counts[KVS_MAX_TENSOR_TYPES];
    kvs_model_tensor_type_counts(m, counts);
    CHECK_EQ_INT(counts[3], 210); /* Q4_1 */
    CHECK_EQ_INT(counts[0], 61);  /* F32 */
    CHECK_EQ_INT(counts[8], 1);   /* Q8_0: token_embd */
    CHECK(!strcmp(kvs_tensor_type_name(3), "Q4_1"));
    CHECK(!strcmp(kvs_tensor_type_name(8), "Q8_0"));
    CHECK(kvs_tensor_type_name(4) == NULL);
    CHECK(kvs_tensor_type_name(999) == NULL);

    /* Weight views point into the mapping with the GGUF shapes. */
    const kvs_hparams *hp = kvs_model_hparams(m);
    const kvs_layer_weights *w = kvs_model_layer(m, 29);
    CHECK_EQ_INT(w->wq.n, 576);
    CHECK_EQ_INT(w->wq.k, 576);
    CHECK_EQ_INT(w->wk.n, 192);
    CHECK_EQ_INT(w->w_down.n, 576);
    CHECK_EQ_INT(w->w_down.k, 1536);
    CHECK_EQ_INT(w->wq.type, 3);
    CHECK_EQ_INT((long long)w->wq.row_bytes, 576 / 32 * 20);
    CHECK(w->bq == NULL && w->bk == NULL && w->bv == NULL);
    /* tied: the head's rows are the token embeddings' (the same mapping) */
    const kvs_wmat *head = kvs_model_output(m), *emb = kvs_model_tok_embd(m);
    CHECK(head->type == emb->type && head->row_bytes == emb->row_bytes && head->n == emb->n);
    CHECK(head->data == emb->data || memcmp(head->data, emb->data, head->row_bytes * (size_t)head->n) == 0);
    CHECK_EQ_INT(hp->n_vocab, 49152);
    const char *base = kvs_gguf_base(kvs_model_gguf(m));
    size_t size = kvs_gguf_size(kvs_model_gguf(m));
    /* the rows (Q4_1 layers, the Q8_0 head) stay mapped; where the AMX
     * batch paths stream them, the arena holds their tiles
     * (kernels/pack.c) */
    const int wq_mapped = (const char *)w->wq.data > base && (const char *)w->wq.data < base + size;
    CHECK(wq_mapped);
    CHECK_EQ_INT(w->wq.tiles != NULL, kvs_wmat_rows_copy_bytes(&w->wq) != 0);
    const int head_mapped = (const char *)head->data >= base && (const char *)head->data < base + size;
    CHECK(head_mapped);
    CHECK_EQ_INT(head->tiles != NULL, kvs_wmat_rows_copy_bytes(head) != 0);
    kvs_model_free(m);
}

TEST(test_tiny_random_untied_f16) {
    char p[512];
    kvs_model *m = NULL;
    int st = kvs_model_load(tiny_path(p, sizeof p), kvs_model_default_params(), &m);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return;
    kvs_model_info in;
    kvs_model_get_info(m, &in);
    CHECK_EQ_INT(in.n_layer, 1);
    CHECK_EQ_INT(in.n_embd, 8);
    CHECK_EQ_INT(in.head_dim, 4);
    CHECK_EQ_INT(in.rope_dim, 4);
    CHECK_EQ_INT(in.tied_output, 0);
    CHECK_NEAR(in.rope_freq_base, 10000.0, 0); /* default when the key is absent */
    CHECK(kvs_model_output(m)->data != kvs_model_tok_embd(m)->data);
    CHECK_EQ_INT(kvs_model_output(m)->type, 1); /* F16 */

    /* It runs: a short decode gives finite logits. */
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    kvs_context *ctx = NULL;
    st = kvs_context_new(m, cp, &ctx);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) {
        CHECK_EQ_INT(kvs_context_n_ctx(ctx), 16);
        int32_t toks[4] = {1, 450, 4996, 17354}, pos[4] = {0, 1, 2, 3};
        float *logits = malloc(32000 * sizeof(float));
        CHECK_EQ_INT(kvs_decode(ctx, toks, pos, 4, logits), KVS_OK);
        int finite = 1;
        for (int i = 0; i < 32000; i++) finite &= isfinite(logits[i]);
        CHECK(finite);
        free(logits);
        kvs_context_free(ctx);
    }
    kvs_model_free(m);
}

TEST(test_vocab_only_files) {
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer-tests/ggml-vocab-gpt-2.gguf", kt_shared_dir());
    kvs_model *m = NULL;
    int st = kvs_model_load(p, kvs_model_default_params(), &m);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (st) return;
    kvs_model_info in;
    kvs_model_get_info(m, &in);
    CHECK_EQ_INT(in.vocab_only, 1);
    CHECK_EQ_INT(in.n_vocab, 50257);
    CHECK_EQ_INT(in.n_tensors, 0);
    kvs_context *ctx = NULL;
    st = kvs_context_new(m, kvs_context_default_params(), &ctx);
    CHECK_EQ_INT(st, KVS_ERR_INVALID_ARG);
    CHECK(ctx == NULL);
    CHECK_MSG(strstr(kvs_last_error(), "vocabulary") != NULL, "%s", kvs_last_error());
    kvs_model_free(m);

    /* vocab_only on a full model: tokenizer + metadata, no context. */
    kvs_model_params mp = kvs_model_default_params();
    mp.vocab_only = 1;
    st = kvs_model_load(tiny_path(p, sizeof p), mp, &m);
    CHECK_EQ_INT(st, KVS_OK);
    if (st) return;
    kvs_model_get_info(m, &in);
    CHECK_EQ_INT(in.vocab_only, 1);
    CHECK_EQ_INT(in.n_layer, 1);
    CHECK_EQ_INT(kvs_context_new(m, kvs_context_default_params(), &ctx), KVS_ERR_INVALID_ARG);
    kvs_model_free(m);
}

/* ---- malformed models: patched copies of the tiny random llama ---- */

static unsigned char *tiny_bytes(size_t *len) {
    char p[512];
    return (unsigned char *)kt_read_file(tiny_path(p, sizeof p), len);
}

static unsigned char *find_bytes(unsigned char *buf, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(buf + i, s, n)) return buf + i;
    return NULL;
}

/* Writes buf to a temp file and loads it into *m (the file is removed
 * once loaded: the model maps it); returns the load's status (message in
 * last error), -100 where the file could not be written. */
static int load_bytes(const unsigned char *buf, size_t len, kvs_model **m) {
    char path[] = "/tmp/kvs_test_model_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -100;
    int ok = write(fd, buf, len) == (ssize_t)len;
    close(fd);
    int st = ok ? kvs_model_load(path, kvs_model_default_params(), m) : -100;
    unlink(path);
    return st;
}

/* load_bytes, the model freed: the load's status. */
static int load_patched(const unsigned char *buf, size_t len) {
    kvs_model *m = NULL;
    int st = load_bytes(buf, len, &m);
    kvs_model_free(m);
    return st;
}

TEST(test_missing_tensor_named) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    CHECK(b != NULL);
    if (!b) return;
    unsigned char *name = find_bytes(b, len, "blk.0.attn_k.weight");
    CHECK(name != NULL);
    if (name) {
        memcpy(name, "blk.0.attn_k.wXight", 19);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_NOT_FOUND);
        CHECK_MSG(strstr(kvs_last_error(), "blk.0.attn_k.weight") != NULL, "%s", kvs_last_error());
    }
    free(b);
}

TEST(test_bad_shape_named) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    unsigned char *name = find_bytes(b, len, "blk.0.ffn_gate.weight");
    CHECK(name != NULL);
    if (name) {
        /* name, then n_dims u32, then ne[0], ne[1] as u64: halve ne[1]. */
        unsigned char *ne1 = name + strlen("blk.0.ffn_gate.weight") + 4 + 8;
        uint64_t v;
        memcpy(&v, ne1, 8);
        CHECK_EQ_INT((long long)v, 32);
        v = 16;
        memcpy(ne1, &v, 8);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "blk.0.ffn_gate.weight") != NULL, "%s", kvs_last_error());
    }
    free(b);
}

TEST(test_missing_hparam_named) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    unsigned char *key = find_bytes(b, len, "llama.block_count");
    CHECK(key != NULL);
    if (key) {
        key[16] = 'X';
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_NOT_FOUND);
        CHECK_MSG(strstr(kvs_last_error(), "llama.block_count") != NULL, "%s", kvs_last_error());
    }
    free(b);
}

/* A block_count past the file's tensors is refused at once, naming it
 * (16,777,216 had allocated 8 GB of layer state over 15 s before a missing
 * tensor refused the file). */
TEST(test_block_count_past_the_tensors_refused) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    static const char key[] = "llama.block_count";
    unsigned char *k = find_bytes(b, len, key);
    CHECK(k != NULL);
    if (k) {
        uint32_t type;
        memcpy(&type, k + strlen(key), 4);
        CHECK_EQ_INT(type, 4); /* GGUF uint32 */
        const uint32_t huge = 1u << 24;
        memcpy(k + strlen(key) + 4, &huge, 4);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "block_count = 16777216") != NULL, "%s", kvs_last_error());
    }
    free(b);
}

/* A hyperparameter that is infinite or NaN is refused, naming it: an
 * infinite epsilon had made every logit 0 (an infinite attention scale or
 * softcap, every logit NaN), with no error. */
TEST(test_nonfinite_hparam_named) {
    static const float bad[] = {INFINITY, -INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        size_t len;
        unsigned char *b = tiny_bytes(&len);
        if (!b) { CHECK(0); return; }
        static const char key[] = "llama.attention.layer_norm_rms_epsilon";
        unsigned char *k = find_bytes(b, len, key);
        CHECK(k != NULL);
        if (k) {
            uint32_t type;
            memcpy(&type, k + strlen(key), 4);
            CHECK_EQ_INT(type, 6); /* GGUF float32 */
            memcpy(k + strlen(key) + 4, &bad[i], 4);
            CHECK_EQ_INT(load_patched(b, len), KVS_ERR_FORMAT);
            CHECK_MSG(strstr(kvs_last_error(), "epsilon") != NULL, "%s", kvs_last_error());
        }
        free(b);
    }
}

/* A hostile general.name (invalid UTF-8, ESC, a C0 and a C1 control) is
 * shown with U+FFFD in their place: `info` had printed the raw bytes to the
 * terminal and into JSON that no parser accepted. */
TEST(test_hostile_name_made_displayable) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    static const char key[] = "general.name";
    unsigned char *k = find_bytes(b, len, key);
    CHECK(k != NULL);
    if (k) {
        unsigned char *val = k + strlen(key) + 4 + 8;
        CHECK(!memcmp(val, "LLaMA v2", 8));
        memcpy(val, "L\xff\x1b[\xc2\x85\x01m", 8); /* same length: 8 bytes */
        kvs_model *m = NULL;
        CHECK_EQ_INT(load_bytes(b, len, &m), KVS_OK);
        if (m) {
            kvs_model_info in;
            kvs_model_get_info(m, &in);
            const char *want = "L\xef\xbf\xbd\xef\xbf\xbd[\xef\xbf\xbd\xef\xbf\xbdm";
            CHECK_MSG(!strcmp(in.name, want), "name shown as '%s'", in.name);
        }
        kvs_model_free(m);
    }
    free(b);
}

TEST(test_unsupported_arch_named) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    unsigned char *key = find_bytes(b, len, "general.architecture");
    CHECK(key != NULL);
    if (key) {
        unsigned char *val = key + strlen("general.architecture") + 4 + 8;
        CHECK(!memcmp(val, "llama", 5));
        memcpy(val, "mamba", 5);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_UNSUPPORTED);
        CHECK_MSG(strstr(kvs_last_error(), "mamba") != NULL, "%s", kvs_last_error());
    }
    free(b);
}

/* A key the loader reads as a string but stored with another type is named
 * as such: general.architecture as u32 had read "missing". */
TEST(test_arch_of_another_type_named) {
    gb_buf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.architecture", GB_U32);
    gb_u32(&b, 1);
    gb_pad(&b, 32);
    CHECK_EQ_INT(load_patched(b.p, b.len), KVS_ERR_FORMAT);
    CHECK_MSG(strstr(kvs_last_error(), "key general.architecture: type is u32, expected string") != NULL, "%s",
              kvs_last_error());
    gb_free(&b);
}

TEST(test_qwen2_needs_qkv_bias) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    /* Turn every "llama" into "qwen2" (same length): the arch and the key
     * prefixes; the SentencePiece model name "llama" is a value of
     * tokenizer.ggml.model and is restored. */
    for (unsigned char *p = b; (p = find_bytes(p, len - (size_t)(p - b), "llama")) != NULL; p += 5)
        memcpy(p, "qwen2", 5);
    unsigned char *tm = find_bytes(b, len, "tokenizer.ggml.model");
    if (tm) memcpy(tm + strlen("tokenizer.ggml.model") + 4 + 8, "llama", 5);
    CHECK_EQ_INT(load_patched(b, len), KVS_ERR_NOT_FOUND);
    CHECK_MSG(strstr(kvs_last_error(), "blk.0.attn_q.bias") != NULL, "%s", kvs_last_error());
    free(b);
}

/* Byte offset of a tensor's element (row, col) in the tiny model's bytes. */
static size_t tiny_elem_offset(const unsigned char *b, size_t len, const char *name, int64_t row, int64_t col) {
    kvs_gguf *g = NULL;
    if (kvs_gguf_open_memory(b, len, &g) != KVS_OK) return 0;
    const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, name);
    size_t at = 0;
    if (t) {
        const size_t esize = kvs_type_traits_of(t->type)->type_size;
        at = (size_t)((const unsigned char *)t->data - (const unsigned char *)kvs_gguf_base(g)) +
             (size_t)(row * t->ne[0] + col) * esize;
    }
    kvs_gguf_close(g);
    return at;
}

/* Weights that are inf or NaN are refused at load, naming the tensor and
 * where (kvs_type_find_nonfinite; quantized types' scales in test_gguf). */
TEST(test_nonfinite_weights_named) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    static const uint16_t f16[] = {0x7c00 /* inf */, 0xfe00 /* -NaN */};
    for (int i = 0; i < 2; i++) { /* an F16 matrix: row 3, column 5 */
        size_t at = tiny_elem_offset(b, len, "blk.0.ffn_gate.weight", 3, 5);
        CHECK(at != 0);
        if (!at) break;
        uint16_t keep;
        memcpy(&keep, b + at, 2);
        memcpy(b + at, &f16[i], 2);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "blk.0.ffn_gate.weight: row 3, column 5 is not finite") != NULL, "%s",
                  kvs_last_error());
        memcpy(b + at, &keep, 2);
    }
    /* an F32 norm vector: element 6 */
    size_t at = tiny_elem_offset(b, len, "blk.0.ffn_norm.weight", 0, 6);
    CHECK(at != 0);
    if (at) {
        const float nan = __builtin_nanf("");
        memcpy(b + at, &nan, 4);
        CHECK_EQ_INT(load_patched(b, len), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "blk.0.ffn_norm.weight: element 6 is not finite") != NULL, "%s",
                  kvs_last_error());
    }
    free(b);
}

/* The model in b (len bytes) with every element of blk.0.attn_norm.weight
 * 3e38: finite, the load accepts it, the activations overflow, and a decode
 * must fail naming that (not return logits). */
static void check_overflow_fails_the_decode(unsigned char *b, size_t len, const char *what) {
    kvs_model *m = NULL;
    kvs_gguf *g = NULL;
    int n_embd = 0;
    if (kvs_gguf_open_memory(b, len, &g) == KVS_OK) {
        const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "blk.0.attn_norm.weight");
        if (t) n_embd = (int)t->ne[0];
        kvs_gguf_close(g);
    }
    CHECK_MSG(n_embd > 0, "%s: no blk.0.attn_norm.weight", what);
    const float huge = 3e38f;
    for (int i = 0; i < n_embd; i++) {
        size_t at = tiny_elem_offset(b, len, "blk.0.attn_norm.weight", 0, i);
        CHECK(at != 0);
        if (at) memcpy(b + at, &huge, 4);
    }
    CHECK_EQ_INT(load_bytes(b, len, &m), KVS_OK); /* finite: loads */
    kvs_context *ctx = NULL;
    if (m) CHECK_EQ_INT(kvs_context_new(m, kvs_context_default_params(), &ctx), KVS_OK);
    if (ctx) {
        const int32_t toks[2] = {1, 2}, pos[2] = {0, 1};
        float *logits = malloc(sizeof(float) * (size_t)kvs_vocab_size(m));
        CHECK_EQ_INT(kvs_decode(ctx, toks, pos, 2, logits), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "not finite") && strstr(kvs_last_error(), "overflow"), "%s: %s", what,
                  kvs_last_error());
        free(logits);
    }
    kvs_context_free(ctx);
    kvs_model_free(m);
}

/* Finite weights of extreme size overflow the activations: the decode
 * says so. The sampler had taken an all-NaN row as token 0, an end of
 * sequence, with no error; and a quantized model's matmuls take a NaN
 * activation as 0, so its logits came out finite and all equal (SmolLM2
 * Q4_0 with a norm patched: 16 tokens of garbage, exit 0, where its F16
 * twin failed). The tiny model's F16 matrices, then the real model's
 * quantized ones (KVSTITCH_MODEL, set by make test). */
TEST(test_overflowing_weights_fail_the_decode) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) { CHECK(0); return; }
    check_overflow_fails_the_decode(b, len, "tiny (F16)");
    free(b);
    const char *real = getenv("KVSTITCH_MODEL");
    if (!real || !*real) {
        fprintf(stderr, "  KVSTITCH_MODEL not set: the quantized model's case skipped\n");
        return;
    }
    b = (unsigned char *)kt_read_file(real, &len);
    CHECK_MSG(b != NULL, "cannot read %s", real);
    if (b) check_overflow_fails_the_decode(b, len, real);
    free(b);
}

/* The model in b (len bytes), written to a temp file and loaded: the
 * status of a 2-token decode with KV type kv (negative: it did not run). */
static int decode_two_tokens(const unsigned char *b, size_t len, kvs_kv_type kv) {
    int st = -101;
    kvs_model *m = NULL;
    kvs_context *ctx = NULL;
    kvs_context_params cp = kvs_context_default_params();
    cp.kv_type = kv;
    if (load_bytes(b, len, &m) == KVS_OK && kvs_context_new(m, cp, &ctx) == KVS_OK) {
        const int32_t toks[2] = {1, 2}, pos[2] = {0, 1};
        float *logits = malloc(sizeof(float) * (size_t)kvs_vocab_size(m));
        st = logits ? kvs_decode(ctx, toks, pos, 2, logits) : -102;
        free(logits);
    }
    kvs_context_free(ctx);
    kvs_model_free(m);
    return st;
}

/* The tiny model with every element of blk.0.attn_norm.weight set to
 * norm and row 0 of blk.0.attn_k.weight to 65504 (F16's largest): one key
 * per head of that magnitude times the norm's. The status of a 2-token
 * decode with KV type kv. */
static int decode_with_big_keys(float norm, kvs_kv_type kv) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) return -100;
    kvs_gguf *g = NULL;
    int64_t n_embd = 0;
    if (kvs_gguf_open_memory(b, len, &g) == KVS_OK) {
        const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "blk.0.attn_k.weight");
        if (t) n_embd = t->ne[0];
        kvs_gguf_close(g);
    }
    const uint16_t f16_max = 0x7bff;
    for (int64_t i = 0; i < n_embd; i++) {
        size_t at = tiny_elem_offset(b, len, "blk.0.attn_norm.weight", 0, i);
        if (at) memcpy(b + at, &norm, 4);
        at = tiny_elem_offset(b, len, "blk.0.attn_k.weight", 0, i);
        if (at) memcpy(b + at, &f16_max, 2);
    }
    const int st = decode_two_tokens(b, len, kv);
    free(b);
    CHECK_MSG(n_embd > 0, "no blk.0.attn_k.weight in the tiny model");
    return st;
}

/* The real model (KVSTITCH_MODEL: Q4_0, Q4_1 or Q8_0, whose blocks begin
 * with their f16 scale d) with every block scale of blk.0.attn_k.weight
 * 2048: keys of ~1.2e5 on SmolLM2 Q4_1. The status of a 2-token decode with
 * KV type kv; KVS_OK with a note if there is no such model. */
static int real_decode_with_big_keys(kvs_kv_type kv) {
    const char *real = getenv("KVSTITCH_MODEL");
    if (!real || !*real) {
        fprintf(stderr, "  KVSTITCH_MODEL not set: the quantized model's case skipped\n");
        return KVS_OK;
    }
    size_t len;
    unsigned char *b = (unsigned char *)kt_read_file(real, &len);
    CHECK_MSG(b != NULL, "cannot read %s", real);
    if (!b) return -100;
    kvs_gguf *g = NULL;
    int patched = 0;
    if (kvs_gguf_open_memory(b, len, &g) == KVS_OK) {
        const kvs_gguf_tensor *t = kvs_gguf_find_tensor(g, "blk.0.attn_k.weight");
        if (t && (t->type == KVS_TYPE_Q4_0 || t->type == KVS_TYPE_Q4_1 || t->type == KVS_TYPE_Q8_0)) {
            const kvs_type_traits *tr = kvs_type_traits_of(t->type);
            const size_t at = (size_t)((const unsigned char *)t->data - (const unsigned char *)kvs_gguf_base(g));
            const size_t n_blocks = (size_t)(t->ne[0] / tr->block_size * t->ne[1]);
            const uint16_t d = 0x6800; /* 2048 */
            for (size_t k = 0; k < n_blocks; k++) memcpy(b + at + k * tr->type_size, &d, 2);
            patched = 1;
        }
        kvs_gguf_close(g);
    }
    CHECK_MSG(patched, "%s: blk.0.attn_k.weight is not Q4_0, Q4_1 or Q8_0", real);
    const int st = patched ? decode_two_tokens(b, len, kv) : -101;
    free(b);
    return st;
}

/* Keys past what an F16 KV slot holds are stored as inf, which the
 * attention takes as NaN scores, masked: the decode fails as an overflow
 * (on SmolLM2 Q4_1 it had given other logits than F32 KV's, exit 0, the
 * slots marked exact); in F32 they are finite keys, the decode runs. Keys past 2^40 fail
 * in F32 too, at the attention's input (without that check the scores'
 * NaN had been masked and the logits come out finite). */
TEST(test_keys_past_the_kv_type_fail_the_decode) {
    CHECK_EQ_INT(decode_with_big_keys(1e-3f, KVS_KV_F16), KVS_OK); /* (keys of the patch that F16 holds) */
    CHECK_EQ_INT(decode_with_big_keys(100.0f, KVS_KV_F32), KVS_OK);
    CHECK_EQ_INT(decode_with_big_keys(100.0f, KVS_KV_F16), KVS_ERR_FORMAT);
    CHECK_MSG(strstr(kvs_last_error(), "activations of layer 0"), "%s", kvs_last_error());
    CHECK_EQ_INT(decode_with_big_keys(1e8f, KVS_KV_F32), KVS_ERR_FORMAT);
    CHECK_MSG(strstr(kvs_last_error(), "activations of layer 0"), "%s", kvs_last_error());
    /* quantized matmuls, whose wo takes the attention's NaN as 0: the F16
     * keys' inf had given other logits with exit 0 (the tiny model's F16
     * wo passes the NaN on, caught at the residual stream anyway) */
    if (getenv("KVSTITCH_MODEL") && *getenv("KVSTITCH_MODEL")) {
        CHECK_EQ_INT(real_decode_with_big_keys(KVS_KV_F32), KVS_OK);
        CHECK_EQ_INT(real_decode_with_big_keys(KVS_KV_F16), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "activations of layer 0"), "%s", kvs_last_error());
    } else {
        real_decode_with_big_keys(KVS_KV_F16); /* (says it is skipped) */
    }
}

/* The tiny model patched so that two tokens overflow, each alone: token 3
 * in the layers, token 4 only in the final norm. Columns 0 and 1 of tokens
 * 1 and 2's embeddings 0; token 3's column 0 and token 4's column 1 are 1;
 * element 0 of blk.0.attn_norm.weight and element 1 of output_norm.weight
 * 3e38 (0 * 3e38 is 0), and rows 0 and 1 of attn_output and ffn_down 0, so
 * that dims 0 and 1 of the residual stream stay the embedding's. */
static void patch_f16(unsigned char *b, size_t len, const char *name, int64_t row, int64_t col, uint16_t v) {
    const size_t at = tiny_elem_offset(b, len, name, row, col);
    CHECK_MSG(at != 0, "no %s", name);
    if (at) memcpy(b + at, &v, 2);
}

static void patch_f32(unsigned char *b, size_t len, const char *name, int64_t i, float v) {
    const size_t at = tiny_elem_offset(b, len, name, 0, i);
    CHECK_MSG(at != 0, "no %s", name);
    if (at) memcpy(b + at, &v, 4);
}

static int load_tiny_two_bad_tokens(kvs_model **m) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    if (!b) return -1;
    for (int tok = 1; tok <= 4; tok++)
        for (int col = 0; col < 2; col++)
            patch_f16(b, len, "token_embd.weight", tok, col, (tok == 3 && col == 0) || (tok == 4 && col == 1) ? 0x3c00 : 0);
    for (int row = 0; row < 2; row++)
        for (int col = 0; col < 8; col++) patch_f16(b, len, "blk.0.attn_output.weight", row, col, 0);
    for (int row = 0; row < 2; row++)
        for (int col = 0; col < 32; col++) patch_f16(b, len, "blk.0.ffn_down.weight", row, col, 0);
    patch_f32(b, len, "blk.0.attn_norm.weight", 0, 3e38f);
    patch_f32(b, len, "output_norm.weight", 1, 3e38f);
    const int st = load_bytes(b, len, m);
    free(b);
    return st;
}

/* One batched step of three streams: a good one at token 1 (after 1, 2),
 * one at token 3 and one at token 4 (each after 1), in rows good_row,
 * (good_row + 1) % 3 and (good_row + 2) % 3. The bad rows fail alone: one
 * row's overflow had failed every row of the step, and a server's step
 * ended every stream in it. The good row's logits are those of its decode
 * alone, bit for bit; the slots are exact where the layers ran clean (as
 * kvs_decode marks them), so token 4's is and token 3's is not. */
static void batch_with_bad_rows(kvs_model *m, int good_row) {
    kvs_context *c[3] = {NULL, NULL, NULL}, *alone = NULL;
    const int n_vocab = kvs_vocab_size(m);
    float *ref = malloc(sizeof(float) * (size_t)n_vocab), *lg = malloc(sizeof(float) * 3 * (size_t)n_vocab);
    const int32_t pre[2] = {1, 2}, pre_pos[2] = {0, 1}, one = 1, at2 = 2;
    int ok = ref && lg && kvs_context_new(m, kvs_context_default_params(), &alone) == KVS_OK &&
             kvs_decode(alone, pre, pre_pos, 2, NULL) == KVS_OK && kvs_decode(alone, &one, &at2, 1, ref) == KVS_OK;
    for (int i = 0; i < 3 && ok; i++)
        ok = kvs_context_new(m, kvs_context_default_params(), &c[i]) == KVS_OK &&
             kvs_decode(c[i], pre, pre_pos, i == 0 ? 2 : 1, NULL) == KVS_OK;
    CHECK_MSG(ok, "set-up: %s", kvs_last_error());
    if (ok) {
        kvs_context *ctxs[3];
        int32_t tok[3], pos[3];
        int status[3] = {-7, -7, -7}, row[3];
        for (int i = 0; i < 3; i++) { /* stream i: good, token 3, token 4 */
            row[i] = (good_row + i) % 3;
            ctxs[row[i]] = c[i], tok[row[i]] = i == 0 ? 1 : i + 2, pos[row[i]] = i == 0 ? 2 : 1;
        }
        CHECK_EQ_INT(kvs_decode_batch_rows(ctxs, tok, pos, 3, lg, status), KVS_ERR_FORMAT);
        char want[64];
        const int first = row[1] < row[2] ? row[1] : row[2];
        snprintf(want, sizeof want, "row %d of 3 (and others): %s", first,
                 first == row[1] ? "the activations of layer 0" : "the final hidden state");
        CHECK_MSG(strstr(kvs_last_error(), want), "want '%s': %s", want, kvs_last_error());
        CHECK_EQ_INT(status[row[0]], KVS_OK);
        CHECK_EQ_INT(status[row[1]], KVS_ERR_FORMAT);
        CHECK_EQ_INT(status[row[2]], KVS_ERR_FORMAT);
        CHECK_MSG(memcmp(lg + (size_t)row[0] * n_vocab, ref, sizeof(float) * (size_t)n_vocab) == 0,
                  "the good row's logits differ from its decode alone");
        CHECK_EQ_INT(c[0]->kv.exact->len, 3);
        CHECK_EQ_INT(c[1]->kv.exact->len, 1);
        CHECK_EQ_INT(c[2]->kv.exact->len, 2);
        /* the good stream goes on: its next token as alone */
        const int32_t at3 = 3;
        CHECK_EQ_INT(kvs_decode(alone, &one, &at3, 1, ref), KVS_OK);
        CHECK_EQ_INT(kvs_decode_batch(&c[0], &one, &at3, 1, lg), KVS_OK);
        CHECK(memcmp(lg, ref, sizeof(float) * (size_t)n_vocab) == 0);
    }
    for (int i = 0; i < 3; i++) kvs_context_free(c[i]);
    kvs_context_free(alone);
    free(ref);
    free(lg);
}

TEST(test_overflowing_row_fails_only_its_row) {
    kvs_model *m = NULL;
    CHECK_EQ_INT(load_tiny_two_bad_tokens(&m), KVS_OK);
    if (!m) return;
    for (int good_row = 0; good_row < 3; good_row++) batch_with_bad_rows(m, good_row);
    /* each bad token fails its decode alone too, and kvs_decode_batch
     * without statuses says so */
    kvs_context *a = NULL, *b = NULL;
    const int32_t pre = 1, at0 = 0, at1 = 1, t3 = 3, t4 = 4;
    float *lg = malloc(sizeof(float) * 2 * (size_t)kvs_vocab_size(m));
    if (lg && kvs_context_new(m, kvs_context_default_params(), &a) == KVS_OK &&
        kvs_context_new(m, kvs_context_default_params(), &b) == KVS_OK) {
        CHECK_EQ_INT(kvs_decode(a, &pre, &at0, 1, NULL), KVS_OK);
        CHECK_EQ_INT(kvs_decode(b, &pre, &at0, 1, NULL), KVS_OK);
        CHECK_EQ_INT(kvs_decode(a, &t3, &at1, 1, lg), KVS_ERR_FORMAT);
        CHECK_EQ_INT(kvs_decode(b, &t4, &at1, 1, lg), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "final hidden state"), "%s", kvs_last_error());
        kvs_context *both[2] = {a, b};
        const int32_t tk[2] = {t3, t4}, ps[2] = {1, 1};
        CHECK_EQ_INT(kvs_decode_batch(both, tk, ps, 2, lg), KVS_ERR_FORMAT);
        CHECK_MSG(strstr(kvs_last_error(), "row 0 of 2 (and others)"), "%s", kvs_last_error());
    } else {
        CHECK_MSG(0, "set-up: %s", kvs_last_error());
    }
    kvs_context_free(a);
    kvs_context_free(b);
    free(lg);
    kvs_model_free(m);
}

TEST(test_missing_file_named) {
    kvs_model *m = NULL;
    int st = kvs_model_load("/nonexistent/dir/model.gguf", kvs_model_default_params(), &m);
    CHECK(st != KVS_OK);
    CHECK(m == NULL);
    CHECK_MSG(strstr(kvs_last_error(), "/nonexistent/dir/model.gguf") != NULL, "%s", kvs_last_error());
    CHECK_EQ_INT(kvs_model_load(NULL, kvs_model_default_params(), &m), KVS_ERR_INVALID_ARG);
    kvs_model_free(NULL);
}


/* The tiny llama rewritten with general.alignment 1 and its data section at
 * an offset of 1 mod 4: every tensor sits at an address that is not a
 * multiple of 4. Float matrices are read with unaligned loads (memcpy,
 * loadu); the float vectors the kernels index as float * (norm weights)
 * must be float-aligned: they are copied out of the mapping (they had
 * pointed into it: misaligned float loads, undefined behaviour that
 * UBSan's alignment check reports). The logits equal the original's bit
 * for bit. */
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static unsigned char *tiny_alignment_1(size_t *out_len) {
    size_t len;
    unsigned char *b = tiny_bytes(&len);
    kvs_gguf *g = NULL;
    if (!b || kvs_gguf_open_memory(b, len, &g) != KVS_OK) { free(b); return NULL; }
    size_t hdr_end = 0; /* end of the last tensor info: name, n_dims, ne[n_dims], type, offset */
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(g, i);
        size_t e = (size_t)((const unsigned char *)t->name.ptr - b) + t->name.len + 4 + 8 * (size_t)t->n_dims + 4 + 8;
        if (e > hdr_end) hdr_end = e;
    }
    const size_t data = kvs_gguf_data_offset(g);
    const uint64_t n_kv = (uint64_t)kvs_gguf_n_kv(g);
    kvs_gguf_close(g);
    /* two keys after the 24-byte header: general.alignment = 1 (u32) and a
     * string whose length puts the data section at 1 mod 4 */
    static const char k_align[] = "general.alignment", k_pad[] = "kvstitch.test.pad";
    const size_t kv_align = 8 + 17 + 4 + 4, kv_pad0 = 8 + 17 + 4 + 8;
    size_t pad = 0;
    while ((hdr_end + kv_align + kv_pad0 + pad) % 4 != 1) pad++;
    const size_t n = hdr_end + kv_align + kv_pad0 + pad + (len - data);
    unsigned char *o = calloc(1, n), *w = o;
    memcpy(w, b, 16); /* magic, version, n_tensors */
    put_u64(w + 16, n_kv + 2);
    w += 24;
    put_u64(w, 17), memcpy(w + 8, k_align, 17), put_u32(w + 25, 4 /* u32 */), put_u32(w + 29, 1);
    w += kv_align;
    put_u64(w, 17), memcpy(w + 8, k_pad, 17), put_u32(w + 25, 8 /* string */), put_u64(w + 29, pad);
    memset(w + 37, 'x', pad);
    w += kv_pad0 + pad;
    memcpy(w, b + 24, hdr_end - 24); /* the original keys and tensor infos (offsets are relative) */
    w += hdr_end - 24;
    memcpy(w, b + data, len - data);
    free(b);
    *out_len = n;
    return o;
}

static float *tiny_logits(kvs_model *m) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    kvs_context *ctx = NULL;
    float *logits = malloc(32000 * sizeof(float));
    int32_t toks[4] = {1, 450, 4996, 17354}, pos[4] = {0, 1, 2, 3};
    int st = kvs_context_new(m, cp, &ctx);
    if (!st) st = kvs_decode(ctx, toks, pos, 4, logits);
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    kvs_context_free(ctx);
    if (st) { free(logits); return NULL; }
    return logits;
}

TEST(test_alignment_1_misaligned_floats) {
    size_t len = 0;
    unsigned char *b = tiny_alignment_1(&len);
    CHECK(b != NULL);
    if (!b) return;
    char path[] = "/tmp/kvs_test_align1_XXXXXX", p[512];
    int fd = mkstemp(path);
    int ok = fd >= 0 && write(fd, b, len) == (ssize_t)len;
    if (fd >= 0) close(fd);
    free(b);
    kvs_model *m = NULL, *ref = NULL;
    int st = ok ? kvs_model_load(path, kvs_model_default_params(), &m) : -100;
    CHECK_MSG(st == KVS_OK, "%s", kvs_last_error());
    if (!st) st = kvs_model_load(tiny_path(p, sizeof p), kvs_model_default_params(), &ref);
    if (!st) {
        CHECK_EQ_INT(kvs_gguf_alignment(kvs_model_gguf(m)), 1);
        const kvs_gguf_tensor *t = kvs_gguf_find_tensor(kvs_model_gguf(m), "output_norm.weight");
        CHECK(t && (uintptr_t)t->data % 4 != 0); /* the file really places it off the float grid */
        const kvs_layer_weights *w = kvs_model_layer(m, 0);
        CHECK((uintptr_t)kvs_model_output_norm(m) % _Alignof(float) == 0);
        CHECK((uintptr_t)w->attn_norm % _Alignof(float) == 0);
        CHECK((uintptr_t)w->ffn_norm % _Alignof(float) == 0);
        CHECK(memcmp(kvs_model_output_norm(m), kvs_model_output_norm(ref), 8 * sizeof(float)) == 0);
        float *a = tiny_logits(m), *r = tiny_logits(ref);
        CHECK(a && r && memcmp(a, r, 32000 * sizeof(float)) == 0);
        free(a);
        free(r);
    }
    kvs_model_free(m);
    kvs_model_free(ref);
    unlink(path);
}

int main(void) {
    RUN(test_smollm2_hparams);
    RUN(test_tiny_random_untied_f16);
    RUN(test_vocab_only_files);
    RUN(test_missing_tensor_named);
    RUN(test_bad_shape_named);
    RUN(test_missing_hparam_named);
    RUN(test_block_count_past_the_tensors_refused);
    RUN(test_nonfinite_hparam_named);
    RUN(test_hostile_name_made_displayable);
    RUN(test_unsupported_arch_named);
    RUN(test_arch_of_another_type_named);
    RUN(test_qwen2_needs_qkv_bias);
    RUN(test_nonfinite_weights_named);
    RUN(test_overflowing_weights_fail_the_decode);
    RUN(test_keys_past_the_kv_type_fail_the_decode);
    RUN(test_overflowing_row_fails_only_its_row);
    RUN(test_missing_file_named);
    RUN(test_alignment_1_misaligned_floats);
    return kt_summary();
}
