/*
 * Partial-chunk markers of the Redis tier.
 *
 * A chunk's prefix key names all of its tokens, so a prompt that stops
 * inside a cached chunk (the same prompt again, whose last token is
 * computed, not looked up; or a prompt that leaves a cached one mid-chunk)
 * asks for a key no value is stored under. The RAM index and a scanned
 * directory find such a chunk by its token path; Redis is never scanned.
 * So with each chunk of n tokens the writer also stores up to KVS_RM_MAX
 * markers under the keys of the chunk's shorter lengths
 * (kvs_key_prefix(parent, tokens, len)): every length for a chunk of up to
 * KVS_RM_MAX + 1 tokens, every stride-th and n - 1 for a longer one. A
 * marker is a small value that names the chunk it is a prefix of:
 *
 *   offset  size  field (integers little-endian)
 *   0       4     magic "KVSM"
 *   4       4     u32 version (KVS_RM_VERSION)
 *   8       4     u32 n_named: the tokens the marker's own key names
 *   12      4     u32 n_target: the tokens of the chunk it points to
 *   16      32    model fingerprint
 *   48      32    the marker's own key (a prefix key of n_named tokens)
 *   80      32    the target chunk's prefix key
 *
 * The lookup's existing key probes (EXISTS for a partial's lengths) find a
 * marker as they find a chunk; a read that meets a marker reads its target
 * and keeps it only if the target is a valid chunk of n_target tokens under
 * that key (redis_value.h's checks) whose first n_named tokens, after its
 * parent key, hash to the marker's key: so a marker can only ever lead to
 * KV that extends the asked prefix. A marker is written by a script that
 * never overwrites a chunk but does overwrite an older marker: the newest
 * chunk under a prefix wins, so a marker whose chunk Redis evicted is
 * replaced by the next chunk stored after that prefix (with SET NX such a
 * marker, kept alive by the reads that met it, had blocked every later
 * one). A chunk written later overwrites a marker. A marker found where
 * its chunk should be (that chunk evicted, another's marker written there)
 * is a miss. Pure functions.
 */
#ifndef KVS_KV_REDIS_MARKER_H
#define KVS_KV_REDIS_MARKER_H

#include "kv/chunk.h"
#include "kv/disk.h"

#include <stddef.h>
#include <stdint.h>

#define KVS_RM_MAGIC "KVSM"
#define KVS_RM_VERSION 1u
#define KVS_RM_BYTES 112
#define KVS_RM_MAX 63 /* markers per chunk at most */

typedef struct kvs_rm_marker {
    int n_named, n_target;
    kvs_key named, target;
    kvs_key fp; /* the model's fingerprint */
} kvs_rm_marker;

/* 1 if the value's first len bytes start like a marker (magic only). */
int kvs_rm_is_marker(const uint8_t *v, size_t len);

/* The lengths a chunk of n_tok tokens gets markers at, ascending, into
 * lens[KVS_RM_MAX]: every length below n_tok for n_tok <= KVS_RM_MAX + 1,
 * else every stride-th and n_tok - 1 (the same prompt again). Returns how
 * many (0 for n_tok < 2). */
int kvs_rm_lengths(int n_tok, int lens[KVS_RM_MAX]);

void kvs_rm_encode(const kvs_rm_marker *m, uint8_t out[KVS_RM_BYTES]);

/* Checks a marker value whole: its length, magic, version, lengths
 * (1 <= n_named < n_target <= max_tokens), fingerprint (KVS_DISK_FOREIGN;
 * NULL: any), and that it is stored under named_key. On failure *verdict
 * says why. */
int kvs_rm_decode(const uint8_t *v, size_t len, const kvs_key *fingerprint, const kvs_key *named_key,
                  int max_tokens, kvs_rm_marker *out, kvs_disk_verdict *verdict);

/* 1 if chunk c (verified on its own, read under m's target key) is what
 * marker m points to: its prefix key is the target, it has n_target
 * tokens, and its first n_named tokens after its parent key hash to the
 * marker's key. */
int kvs_rm_target_fits(const kvs_rm_marker *m, const kvs_chunk *c);

#endif
