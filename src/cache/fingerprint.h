/*
 * The model fingerprint: the 32-byte root of every cache key (src/kv/keys.h).
 * It must change whenever the KV bytes a prompt produces could change, so
 * that cached KV is only ever served where a cold run would compute exactly
 * the same bytes:
 *
 *   fingerprint = SHA-256("kvstitch-fp-v2" ||
 *                         weights digest      SHA-256 of the GGUF tensor data section
 *                         tensor directory    name, type, shape, offset of every tensor
 *                         architecture        general.architecture
 *                         hparams             layers, widths, heads, vocab, RoPE
 *                                             (dim, NeoX pairing, base, scale), norm eps,
 *                                             attention scale, embedding scale, logit
 *                                             softcap, sliding window
 *                         layers              each layer's RoPE base, scale and
 *                                             frequency factors, attention window
 *                         metadata digest     SHA-256 of every byte before the tensor
 *                                             data (header, all metadata, directory)
 *                         KV dtype
 *                         numerics probe)     SHA-256 of the KV + logits of a fixed
 *                                             8-token forward pass in this process
 *
 * The probe sees only 8 tokens: a setting that matters only past them (a
 * sliding window, a long-context RoPE factor) must reach the hash through
 * the hparams, the layers and the metadata digest (v1 left the window out:
 * a model whose window was edited in its metadata was served the original's
 * entries).
 *
 * The numerics probe catches what the file cannot: a build whose kernels
 * round differently (another SIMD path, a changed kernel) computes other KV
 * bits for the same model, so its fingerprint differs and a cache directory
 * written by the other build is treated as foreign instead of being served
 * (which would break bit-exactness).
 *
 * Cost. Hashing the tensor data (98 MB for SmolLM2-135M Q4_1) takes 60-110
 * ms; the probe ~10-30 ms. Both are computed once per loaded model (memo
 * slots in the model). The weights digest is also remembered in the cache
 * directory (DIR/.weights-<id>.memo) keyed by the model file's identity
 * (device, inode, size, mtime and ctime in ns): a one-shot CLI process then
 * skips the 98 MB hash. ctime cannot be set by users, so a file changed in
 * place or replaced gets a new identity and is hashed again. The memo is
 * self-checked (magic, SHA-256); a bad or missing memo just means hashing.
 * The probe is never remembered across processes: it is what detects a
 * different build.
 *
 * A cache opened with a key (kvs_cache_params.mac_key / cache_key_file,
 * entry_mac.h) roots its keys in the keyed fingerprint
 *
 *   keyed = SHA-256("kvstitch-fp-keyed-v1" || fingerprint || key id)
 *
 * so its entries' names, content keys and fingerprint fields are disjoint
 * from a keyless cache's and from another key's: each sees the others'
 * entries as foreign (never served, never removed).
 *
 * Thread-safe.
 */
#ifndef KVS_REUSE_FINGERPRINT_H
#define KVS_REUSE_FINGERPRINT_H

#include "kv/chunk.h"
#include "kvstitch.h"

/* SHA-256 of the model's tensor data section. memo_dir (may be NULL): a
 * directory to read the memo from and write it to. *from_memo (may be NULL)
 * = 1 when it came from the process or directory memo. */
int kvs_weights_digest(const kvs_model *model, const char *memo_dir, uint8_t out[32], int *from_memo);

/* The fingerprint of (model, kv_type). memo_dir as above. */
int kvs_fingerprint(kvs_model *model, kvs_kv_type kv_type, const char *memo_dir, kvs_key *out);

/* The fingerprint of a cache keyed with key id key_id (above). */
void kvs_fingerprint_keyed(const kvs_key *fp, const uint8_t key_id[32], kvs_key *out);

/* Test-only: perturb one component's value before it is hashed, as another
 * model, file layout, build, ... would (tests/test_fingerprint.c checks that
 * entries written under the real fingerprint are then never served, i.e.
 * that each component really reaches the hash). A bit mask of the
 * components below, 0 = off (the default; nothing else ever sets it). While
 * a mask is set, fingerprints bypass the model's memo slots. Process-wide,
 * not thread-safe: set it before opening a cache. */
enum {
    KVS_FP_PERTURB_WEIGHTS = 1 << 0, /* weights digest: one bit flipped */
    KVS_FP_PERTURB_TENSORS = 1 << 1, /* tensor directory: the first tensor's offset + 1 */
    KVS_FP_PERTURB_HPARAMS = 1 << 2, /* n_embd + 1 (as hashed; the model is untouched) */
    KVS_FP_PERTURB_ROPE = 1 << 3,    /* RoPE base x 2 */
    KVS_FP_PERTURB_KV_TYPE = 1 << 4, /* the KV dtype's code + 16 */
    KVS_FP_PERTURB_PROBE = 1 << 5,   /* the probe's first logit one ulp off: a build that rounds differently */
    KVS_FP_PERTURB_ARCH = 1 << 6,    /* another architecture name */
    KVS_FP_PERTURB_LAYERS = 1 << 7,  /* layer 0's attention window + 1 (as hashed) */
    KVS_FP_PERTURB_METADATA = 1 << 8, /* metadata digest: one bit flipped */
};
void kvs_fingerprint_test_perturb(unsigned mask);

#endif
