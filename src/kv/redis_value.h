/*
 * The value of one chunk in Redis: self-describing, so that a value is valid
 * or rejected on its own (one key per chunk, no index key that could
 * disagree with it, no two-key race).
 *
 *   offset      size   field (integers little-endian)
 *   0           4      magic "KVSR"
 *   4           4 u32  version (KVS_RV_VERSION)
 *   8           4 u32  codec: 0 raw, 1 zstd, 2 byte-plane shuffle + zstd
 *   12          4 u32  reserved (0)
 *   16          8 u64  enc_bytes: bytes of the encoded payload
 *   24          8 u64  checksum of the encoded payload (kvs_checksum64, seed 0)
 *   32          hb     the entry header of disk.h: magic "KVSC", version,
 *                      flags, fingerprint, prefix / content / parent keys,
 *                      shape, n_tok, pos0, raw payload_bytes and its checksum,
 *                      the token ids, SHA-256 of all that (hb = header_bytes),
 *                      and, written with a cache key (flags bit
 *                      KVS_DISK_FLAG_MAC), the entry MAC: HMAC-SHA256 of the
 *                      entry header up to its digest's end || the RAW payload
 *                      (decoded: the codec and wrapper are not under it, what
 *                      is served is)
 *   32 + hb     enc    the payload, encoded by the codec
 *
 * The value's length must be exactly 32 + hb + enc_bytes.
 *
 * Checks (kvs_rv_decode), cheapest first, all before any large allocation:
 * length against the caller's limit, magic, version, codec, the entry
 * header (disk.h: digest, keys recomputed from the tokens), the Redis key
 * against the header's prefix key, fingerprint and shape (foreign), the
 * raw size against the limit, the encoded checksum, then decoding must give
 * exactly payload_bytes whose checksum is the header's, then (a keyed
 * reader, expect.mac: its own values must carry a MAC, disk.h "Keyed
 * readers") the MAC over the header and the decoded payload
 * (KVS_DISK_BAD_MAC). Nothing that fails is returned. A zstd frame is decompressed into a buffer of the size the
 * (verified) header states, never a size the frame claims.
 *
 * Byte-plane shuffle: an f16 payload is rewritten as all low bytes, then all
 * high bytes (f32: four planes). High bytes (sign, exponent, top mantissa
 * bits) of neighbouring KV values are alike, so the planes compress better
 * than the interleaved bytes. bench/tiers measures each codec's ratio and
 * speed; KVS_RV_CODEC_DEFAULT is chosen from those numbers.
 *
 * Pure functions, thread-safe, never print.
 */
#ifndef KVS_KV_REDIS_VALUE_H
#define KVS_KV_REDIS_VALUE_H

#include "kv/chunk.h"
#include "kv/disk.h"

#include <stddef.h>
#include <stdint.h>

#define KVS_RV_MAGIC "KVSR"
#define KVS_RV_VERSION 1u
#define KVS_RV_PREFIX_BYTES 32 /* the wrapper before the entry header */

typedef enum kvs_rv_codec {
    KVS_RV_CODEC_RAW = 0,
    KVS_RV_CODEC_ZSTD = 1,
    KVS_RV_CODEC_SHUFFLE_ZSTD = 2,
    KVS_RV_CODEC_COUNT
} kvs_rv_codec;

/* See bench/tiers and the README ("Redis tier") for the numbers behind it. */
#define KVS_RV_CODEC_DEFAULT KVS_RV_CODEC_RAW
#define KVS_RV_ZSTD_LEVEL_DEFAULT 1

const char *kvs_rv_codec_name(kvs_rv_codec codec);
/* "raw", "zstd", "shuffle-zstd" -> codec. KVS_ERR_INVALID_ARG naming the value. */
int kvs_rv_codec_parse(const char *name, kvs_rv_codec *out);

/* Encodes resident chunk c of the model with fingerprint fp. *out is a new
 * malloc'd buffer of *out_len bytes that the caller frees. level: zstd level
 * (ignored by raw). */
int kvs_rv_encode(const kvs_key *fingerprint, const kvs_chunk *c, kvs_rv_codec codec, int level,
                  const kvs_entry_mac *mac, uint8_t **out, size_t *out_len);

/* What the decoder expects. Any pointer may be NULL (= accept any). */
typedef struct kvs_rv_expect {
    const kvs_key *fingerprint;
    const kvs_kv_shape *shape;
    const kvs_key *prefix_key; /* the key the value was stored under */
    size_t max_bytes;          /* limit on the value and on the raw payload; 0 = none */
    const kvs_entry_mac *mac;  /* NULL, or the cache key the reader's own values must carry */
} kvs_rv_expect;

/* Checks value v[0, len) whole (see above) and returns a new resident chunk
 * (caller owns the reference). what names the value in messages. On failure
 * *out is untouched, *verdict says why, and the status is that of
 * kvs_disk_verdict_status. */
int kvs_rv_decode(const uint8_t *v, size_t len, const kvs_rv_expect *expect, const char *what, kvs_chunk **out,
                  kvs_disk_verdict *verdict);

/* Checks the wrapper and entry header of a value's first len bytes (a
 * prefix of the value is enough: total_len is the value's full length) and
 * returns a chunk without payload (for listing). No payload check (with
 * expect->mac, a value of its own without a MAC is KVS_DISK_BAD_MAC). */
int kvs_rv_decode_header(const uint8_t *v, size_t len, size_t total_len, const kvs_rv_expect *expect,
                         const char *what, kvs_chunk **out, kvs_key *value_fp, kvs_disk_verdict *verdict);

#endif
