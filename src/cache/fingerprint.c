/* The model fingerprint (see fingerprint.h): weights digest with its memo, the
 * architecture and hyperparameters, the KV dtype, and the numerics probe. */
#include "cache/fingerprint.h"

#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sha256.h"
#include "engine/context.h"
#include "kv/disk.h"
#include "kv/disk_budget.h"
#include "kv/keys.h"
#include "model/model.h"

#define MEMO_MAGIC KVS_DISK_MEMO_MAGIC
#define MEMO_VERSION 1u
#define PROBE_TOKENS 8

/* --- weights digest memo ------------------------------------------------------- */

/* What identifies the bytes of a model file without reading them. */
typedef struct file_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} file_id;

/* On-disk memo, little-endian host layout (the memo is a local speed-up; a
 * host with another layout just misses it). */
typedef struct memo_rec {
    char magic[4];
    uint32_t version;
    file_id id;
    uint8_t digest[32];
    uint8_t check[32]; /* SHA-256 of every byte before it */
} memo_rec;

static int file_identity(const char *path, file_id *id) {
    struct stat st;
    if (stat(path, &st)) return -1;
    memset(id, 0, sizeof *id);
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    return 0;
}

static int memo_path(const char *dir, const file_id *id, char *buf, size_t cap) {
    uint8_t h[32];
    char hex[65];
    kvs_sha256_digest(id, sizeof *id, h);
    kvs_sha256_to_hex(h, hex);
    hex[16] = 0;
    return snprintf(buf, cap, "%s/" KVS_DISK_MEMO_PREFIX "%s" KVS_DISK_MEMO_SUFFIX, dir, hex) < (int)cap ? 0 : -1;
}

static int memo_read(const char *dir, const file_id *id, uint8_t out[32]) {
    char path[4096];
    if (memo_path(dir, id, path, sizeof path)) return -1;
    int fd = kvs_open_regular(path, NULL); /* a FIFO planted as the memo must not hang */
    if (fd < 0) return -1;
    memo_rec r;
    ssize_t got = read(fd, &r, sizeof r);
    close(fd);
    if (got != (ssize_t)sizeof r || memcmp(r.magic, MEMO_MAGIC, 4) || r.version != MEMO_VERSION ||
        memcmp(&r.id, id, sizeof *id))
        return -1;
    uint8_t check[32];
    kvs_sha256_digest(&r, offsetof(memo_rec, check), check);
    if (memcmp(check, r.check, 32)) return -1;
    memcpy(out, r.digest, 32);
    return 0;
}

/* Best effort: a failure only costs the next process a hash. Written to a
 * temporary name and renamed, so readers never see half a memo. */
static void memo_write(const char *dir, const file_id *id, const uint8_t digest[32]) {
    char path[4096], tmp[4200];
    if (memo_path(dir, id, path, sizeof path)) return;
    memo_rec r;
    memset(&r, 0, sizeof r);
    memcpy(r.magic, MEMO_MAGIC, 4);
    r.version = MEMO_VERSION;
    r.id = *id;
    memcpy(r.digest, digest, 32);
    kvs_sha256_digest(&r, offsetof(memo_rec, check), r.check);
    /* a name the cache's cleaner treats as a writer's temporary file (the
     * entries' own pattern: ".weights.<pid>.<address>.tmp" had not been, and
     * a writer killed before its rename left it for good) */
    kvs_key k;
    char hex[65];
    memcpy(k.b, digest, sizeof k.b);
    kvs_key_to_hex(&k, hex);
    if (kvs_disk_tmp_path(dir, hex, tmp, sizeof tmp)) return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    int ok = write(fd, &r, sizeof r) == (ssize_t)sizeof r;
    ok &= close(fd) == 0;
    if (!ok || rename(tmp, path)) unlink(tmp);
}

int kvs_weights_digest(const kvs_model *model, const char *memo_dir, uint8_t out[32], int *from_memo) {
    if (from_memo) *from_memo = 1;
    if (kvs_model_memo_get(model, KVS_MODEL_MEMO_WEIGHTS, out)) return KVS_OK;
    const kvs_gguf *g = kvs_model_gguf(model);
    file_id id;
    int have_id = memo_dir && *memo_dir && file_identity(kvs_model_path(model), &id) == 0;
    if (have_id && memo_read(memo_dir, &id, out) == 0) {
        kvs_model_memo_set(model, KVS_MODEL_MEMO_WEIGHTS, out);
        return KVS_OK;
    }
    if (from_memo) *from_memo = 0;
    size_t off = kvs_gguf_data_offset(g), size = kvs_gguf_size(g);
    if (off > size)
        return kvs_error(KVS_ERR_INTERNAL, "%s: tensor data offset %zu is past the end (%zu bytes)",
                         kvs_model_path(model), off, size);
    kvs_sha256_digest((const uint8_t *)kvs_gguf_base(g) + off, size - off, out);
    kvs_model_memo_set(model, KVS_MODEL_MEMO_WEIGHTS, out);
    if (have_id) memo_write(memo_dir, &id, out);
    return KVS_OK;
}

/* --- test-only perturbation (fingerprint.h) ------------------------------------------ */

static unsigned g_perturb;

void kvs_fingerprint_test_perturb(unsigned mask) { g_perturb = mask; }

static int perturbed(unsigned component) { return (g_perturb & component) != 0; }

/* --- numerics probe ------------------------------------------------------------- */

/* SHA-256 of the KV and last logits of a fixed token sequence run through
 * this process's engine: differs whenever the kernels compute other bits. */
static int numerics_probe(kvs_model *model, kvs_kv_type kv_type, uint8_t out[32]) {
    kvs_context_params cp = kvs_context_default_params();
    cp.n_ctx = PROBE_TOKENS;
    cp.n_batch = PROBE_TOKENS;
    cp.n_threads = 1; /* the bits do not depend on it; no pool to start */
    cp.kv_type = kv_type;
    kvs_context *ctx = NULL;
    int st = kvs_context_new(model, cp, &ctx);
    if (st) return kvs_error_prefix(st, "fingerprint probe");
    int n_vocab = kvs_context_n_vocab(ctx);
    int32_t toks[PROBE_TOKENS], pos[PROBE_TOKENS];
    for (int i = 0; i < PROBE_TOKENS; i++) {
        toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % n_vocab);
        pos[i] = i;
    }
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    st = logits ? kvs_decode(ctx, toks, pos, PROBE_TOKENS, logits)
                : kvs_error(KVS_ERR_NOMEM, "fingerprint probe: out of memory");
    if (st == KVS_OK) {
        const kvs_kv_buffer *kv = kvs_context_kv(ctx);
        if (perturbed(KVS_FP_PERTURB_PROBE)) logits[0] = nextafterf(logits[0], INFINITY);
        kvs_sha256 h;
        kvs_sha256_init(&h);
        kvs_sha256_update(&h, kv->data, kvs_kv_buffer_bytes(kv));
        kvs_sha256_update(&h, logits, (size_t)n_vocab * sizeof *logits);
        kvs_sha256_final(&h, out);
    }
    free(logits);
    kvs_context_free(ctx);
    return st;
}

/* --- fingerprint ------------------------------------------------------------------ */

static void put_u32(kvs_sha256 *h, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kvs_sha256_update(h, b, 4);
}
static void put_u64(kvs_sha256 *h, uint64_t v) {
    put_u32(h, (uint32_t)v);
    put_u32(h, (uint32_t)(v >> 32));
}
static void put_f32(kvs_sha256 *h, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(h, v);
}
static void put_str(kvs_sha256 *h, const char *s, size_t n) {
    put_u64(h, n);
    kvs_sha256_update(h, s, n);
}

/* What differs between layers (model.h: kvs_layer_hparams): each layer's
 * RoPE, its frequency factors and its attention window. A window only
 * matters past its length, beyond the probe's 8 tokens, so only the hash
 * can tell two windows apart. */
static void put_layers(kvs_sha256 *h, const kvs_hparams *hp) {
    for (int l = 0; l < hp->n_layer; l++) {
        const kvs_layer_hparams *lh = &hp->layer[l];
        put_f32(h, lh->rope_freq_base);
        put_f32(h, lh->rope_freq_scale);
        put_u32(h, (uint32_t)lh->window + (l == 0 && perturbed(KVS_FP_PERTURB_LAYERS)));
        put_u32(h, lh->rope_freq_factors != NULL);
        for (int i = 0; lh->rope_freq_factors && i < hp->rope_dim / 2; i++) put_f32(h, lh->rope_freq_factors[i]);
    }
}

/* Every byte of the file before the tensor data: the header, every metadata
 * key and value, the tensor directory. The hparams above are what this
 * build derives from them; this is what the file says, so a key that a
 * later build reads (or a default it changes) is covered too. A few MB
 * (mostly the vocabulary): ~1-5 ms, once per loaded model. */
static void put_metadata(kvs_sha256 *h, const kvs_gguf *g) {
    size_t off = kvs_gguf_data_offset(g), size = kvs_gguf_size(g);
    if (off > size) off = size; /* (refused at load; kvs_weights_digest names it) */
    uint8_t d[32];
    kvs_sha256_digest(kvs_gguf_base(g), off, d);
    if (perturbed(KVS_FP_PERTURB_METADATA)) d[0] ^= 1;
    kvs_sha256_update(h, d, 32);
}

void kvs_fingerprint_keyed(const kvs_key *fp, const uint8_t key_id[32], kvs_key *out) {
    kvs_sha256 h;
    kvs_sha256_init(&h);
    static const char tag[] = "kvstitch-fp-keyed-v1";
    kvs_sha256_update(&h, tag, sizeof tag);
    kvs_sha256_update(&h, fp->b, 32);
    kvs_sha256_update(&h, key_id, 32);
    kvs_sha256_final(&h, out->b);
}

int kvs_fingerprint(kvs_model *model, kvs_kv_type kv_type, const char *memo_dir, kvs_key *out) {
    if (!model || !out) return kvs_error(KVS_ERR_INVALID_ARG, "fingerprint: model and out must not be NULL");
    if (!kvs_kv_type_name(kv_type))
        return kvs_error(KVS_ERR_INVALID_ARG, "fingerprint: unknown kv_type %d", (int)kv_type);
    if (kvs_model_is_vocab_only(model))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: a vocabulary-only model has no KV to cache", kvs_model_path(model));
    int slot = kv_type == KVS_KV_F16 ? KVS_MODEL_MEMO_FP_F16 : kv_type == KVS_KV_F32 ? KVS_MODEL_MEMO_FP_F32 : KVS_MODEL_MEMO_FP_Q8;
    if (!g_perturb && kvs_model_memo_get(model, slot, out->b)) return KVS_OK;

    uint8_t wd[32], probe[32];
    int st = kvs_weights_digest(model, memo_dir, wd, NULL);
    if (!st) st = numerics_probe(model, kv_type, probe);
    if (st) return st;
    if (perturbed(KVS_FP_PERTURB_WEIGHTS)) wd[0] ^= 1;

    kvs_sha256 h;
    kvs_sha256_init(&h);
    static const char tag[] = "kvstitch-fp-v2";
    kvs_sha256_update(&h, tag, sizeof tag);
    kvs_sha256_update(&h, wd, 32);
    const kvs_gguf *g = kvs_model_gguf(model);
    put_u64(&h, (uint64_t)kvs_gguf_n_tensors(g));
    for (int64_t i = 0; i < kvs_gguf_n_tensors(g); i++) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(g, i);
        put_str(&h, t->name.ptr, t->name.len);
        put_u32(&h, (uint32_t)t->type);
        for (int d = 0; d < 4; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u64(&h, t->offset + (uint64_t)(i == 0 && perturbed(KVS_FP_PERTURB_TENSORS)));
    }
    kvs_model_info info;
    kvs_model_get_info(model, &info);
    const char *arch = perturbed(KVS_FP_PERTURB_ARCH) ? "perturbed-arch" : info.arch;
    put_str(&h, arch, strlen(arch));
    const kvs_hparams *hp = kvs_model_hparams(model);
    int ints[] = {hp->n_layer,  hp->n_embd + perturbed(KVS_FP_PERTURB_HPARAMS),
                  hp->n_head,   hp->n_head_kv,
                  hp->head_dim, hp->n_ff,
                  hp->n_vocab,  hp->n_ctx_train,
                  hp->rope_dim, hp->rope_neox,
                  hp->n_swa};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) put_u32(&h, (uint32_t)ints[i]);
    put_f32(&h, hp->rope_freq_base * (perturbed(KVS_FP_PERTURB_ROPE) ? 2.0f : 1.0f));
    put_f32(&h, hp->rope_freq_scale);
    put_f32(&h, hp->norm_eps);
    put_f32(&h, hp->attn_scale);
    put_f32(&h, hp->embd_scale);
    put_f32(&h, hp->logit_softcap);
    put_layers(&h, hp);
    put_metadata(&h, g);
    put_u32(&h, (uint32_t)kv_type + (perturbed(KVS_FP_PERTURB_KV_TYPE) ? 16u : 0u));
    kvs_sha256_update(&h, probe, 32);
    kvs_sha256_final(&h, out->b);
    if (!g_perturb) kvs_model_memo_set(model, slot, out->b);
    return KVS_OK;
}
