/*
 * Cache keys. Every key is a SHA-256 digest, rooted in a 32-byte model
 * fingerprint that the engine computes (weights digest + architecture + rope
 * config + KV dtype); src/kv/ only takes the 32 bytes.
 *
 *   prefix_key(chunk)  = SHA-256(parent_key || tokens as int32 little-endian)
 *                        parent_key = prefix key of the previous chunk, or the
 *                        fingerprint for the chunk at position 0
 *   content_key(chunk) = SHA-256(fingerprint || tokens as int32 little-endian)
 *
 * A prefix key therefore names the whole token history up to the chunk's end
 * (under one chunking of it) and the model: the same tokens after another
 * context, or under another model, never share a prefix key. A content key
 * names the tokens alone (position- and context-free), for non-prefix reuse.
 *
 * All functions are pure and thread-safe.
 */
#ifndef KVS_KV_KEYS_H
#define KVS_KV_KEYS_H

#include "kv/chunk.h"
#include "kv/chunking.h"

#include <stdint.h>

void kvs_key_prefix(const kvs_key *parent, const int32_t *tokens, int n, kvs_key *out);
/* out[k] = kvs_key_prefix(parent, tokens, lo + k) for lo + k = lo..hi
 * (1 <= lo <= hi), in one pass over the tokens (a copy of the hash state
 * per length, not a hash per length: a chunk's every tail length). */
void kvs_key_prefix_lengths(const kvs_key *parent, const int32_t *tokens, int lo, int hi, kvs_key *out);
/* out[i] = kvs_key_prefix(parent, tokens, lens[i]) for n ascending lengths
 * (1 <= lens[0] < lens[1] < ...), in one pass over the tokens. */
void kvs_key_prefix_at(const kvs_key *parent, const int32_t *tokens, const int *lens, int n, kvs_key *out);
void kvs_key_content(const kvs_key *fingerprint, const int32_t *tokens, int n, kvs_key *out);

/* Prefix keys of a whole chunking in one pass: spans[i] covers
 * tokens[spans[i].start, spans[i].end) and the spans must tile [0, n) in
 * order starting at 0. out[i] = prefix key of span i (its parent is out[i-1],
 * or the fingerprint for i = 0). */
int kvs_key_prefix_chain(const kvs_key *fingerprint, const int32_t *tokens,
                         const kvs_span *spans, int n_spans, kvs_key *out);

int kvs_key_equal(const kvs_key *a, const kvs_key *b);
/* Lower-case hex, NUL-terminated. */
void kvs_key_to_hex(const kvs_key *k, char hex[65]);
/* Parses 64 hex digits (either case). KVS_ERR_INVALID_ARG otherwise. */
int kvs_key_from_hex(const char *hex, kvs_key *out);
/* The first 8 bytes as an integer: a well-mixed hash for hash tables. */
uint64_t kvs_key_hash(const kvs_key *k);

#endif
