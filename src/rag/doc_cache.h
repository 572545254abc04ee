/*
 * Doc chunks: the KV of one doc segment, computed once after the shared doc
 * prefix (segments.h) and kept in the chunk store for any later prompt that
 * contains the doc, wherever it sits.
 *
 *   chunk of doc D, doc prefix P (|P| = p tokens):
 *     tokens       D
 *     pos0         p                       (D computed at positions p .. p+|D|-1)
 *     content_key  SHA-256(fp || D)        (what non-prefix reuse looks up)
 *     parent_key   prefix key of P as one chunk at position 0
 *                  (the fingerprint when P is empty)
 *     prefix_key   SHA-256(parent_key || D): the exact history P + D, so the
 *                  chunk never claims an exactness it does not have
 *
 * Baked chunk of D (kvs_doc_compute_after with neighbour docs N1..Nk):
 *     tokens       D
 *     pos0         p + |N1| + ... + |Nk|   (D computed after P and the neighbours'
 *                                           cached KV, moved in after P)
 *     content_key  SHA-256(fp || D)        (as the plain chunk)
 *     parent_key   the baked parent: SHA-256(tag || parent key of P), the
 *                  same for every baking after P whatever the neighbours, so
 *                  a request finds "D baked after P" without knowing them
 *     prefix_key   SHA-256(baked parent || D)
 *     origin       KVS_CHUNK_DOC | KVS_CHUNK_BAKED | k << 8
 * No token history hashes to the baked parent, so a baked chunk can never be
 * taken for an exact prefix; the first baking of D after P is the one kept
 * (a later one finds the key taken: same key, same bytes, as everywhere in
 * the store).
 *
 * A doc chunk is inserted by content key only (no radix path); its prefix
 * key is still its identity in the store and on disk. A lookup takes the
 * content-key hit if it was computed after the same prefix P, else asks for
 * the exact prefix key (a chunk with the same tokens but another history,
 * e.g. a 64-token piece of some prompt, is not used: its context is
 * unknown).
 */
#ifndef KVS_REUSE_DOC_CACHE_H
#define KVS_REUSE_DOC_CACHE_H

#include "engine/context.h"
#include "kv/store.h"
#include "cache/cache.h"

/* The parent key of every doc chunk computed after prefix[0..n). */
void kvs_doc_parent_key(const kvs_key *fp, const int32_t *prefix, int n, kvs_key *out);

/* The cached chunk of doc[0..n) computed after prefix[0..n_prefix) (whose
 * key is parent): by content key in RAM, then by prefix key in RAM and the
 * tiers (Redis holds no content index). *out = a pinned, resident chunk
 * (unref it), or NULL on a miss (KVS_OK). Errors only for bad arguments. */
int kvs_doc_lookup(kvs_store *store, const kvs_key *fp, const kvs_key *parent, const int32_t *prefix, int n_prefix,
                   const int32_t *doc, int n, kvs_chunk **out);

/* The parent key of every baked chunk after the prefix whose key is parent. */
void kvs_doc_baked_parent_key(const kvs_key *parent, kvs_key *out);

/* The baked chunk of doc[0..n) after the prefix whose key is parent, as
 * kvs_doc_lookup (a miss: *out = NULL, KVS_OK). */
int kvs_doc_lookup_baked(kvs_store *store, const kvs_key *parent, const int32_t *doc, int n, kvs_chunk **out);

/* Computes doc chunks: a scratch KV buffer (not the context's) holding the
 * doc prefix's KV, so computing a doc leaves the request's KV untouched. */
typedef struct kvs_doc_computer {
    kvs_context *ctx;         /* its forward scratch and pool are used */
    const kvs_cache *cache;
    kvs_kv_buffer kv;         /* (n_layer, 2, n_kv_head, n_prefix + max_doc, head_dim) */
    kvs_key parent;
    const int32_t *prefix;
    int n_prefix, max_doc;    /* max_doc: the longest doc plus the context moved in before it */
    int prefix_done;          /* the prefix's KV is in kv (computed lazily, once) */
    int32_t *pos;             /* (n_prefix + max_doc) 0, 1, 2, ... */
} kvs_doc_computer;

int kvs_doc_computer_init(kvs_doc_computer *dc, kvs_context *ctx, const kvs_cache *cache, const int32_t *prefix,
                          int n_prefix, int max_doc);
void kvs_doc_computer_release(kvs_doc_computer *dc); /* safe on a zeroed one */

/* Computes doc[0..n) (n <= max_doc) after the prefix and returns a new chunk
 * with its keys, tokens and payload (one reference, the caller's). It is not
 * stored: see kvs_store_insert. */
int kvs_doc_compute(kvs_doc_computer *dc, const int32_t *doc, int n, kvs_chunk **out);

/* kvs_doc_compute a slice at a time (for a scheduler that interleaves other
 * work): computes doc[*done, *done + max_tokens) (at most to n) and advances
 * *done (start it at 0); the call that reaches n returns the chunk in *out
 * (else *out = NULL). The same bytes as kvs_doc_compute whatever the
 * slices. Between the slices of one doc the computer computes nothing else. */
int kvs_doc_compute_slice(kvs_doc_computer *dc, const int32_t *doc, int n, int *done, int max_tokens,
                          kvs_chunk **out);

/* Bakes doc[0..n): the resident chunks nb[0..n_nb) (plain doc chunks) are
 * moved in after the prefix, in order, and the doc is computed after them;
 * their tokens plus n must fit max_doc. Returns a new baked chunk (keys
 * above) as kvs_doc_compute. n_nb = 0 gives kvs_doc_compute's KV. */
int kvs_doc_compute_after(kvs_doc_computer *dc, kvs_chunk *const *nb, int n_nb, const int32_t *doc, int n,
                          kvs_chunk **out);

#endif
