/*
 * The keyed MAC of cache entries (disk.h, redis_value.h): HMAC-SHA256 under
 * a secret key that the processes sharing a cache dir or a Redis hold and a
 * writer of the dir or the Redis may not. The payload checksum
 * (kvs_checksum64) and the header's SHA-256 detect damage, not malice:
 * anyone who can write an entry can recompute both. With a key, a reader
 * serves only entries whose MAC it verifies (README "Trust").
 *
 *   key id   = HMAC-SHA256(key, "kvstitch cache key id")   folded into the
 *              cache fingerprint (fingerprint.h): keyed caches name their
 *              entries apart from unkeyed ones and from other keys'
 *   entry    = HMAC-SHA256(key, header bytes [0, header digest end) || payload)
 *
 * OpenSSL's libcrypto computes it (EVP_MAC "HMAC" with SHA-256: SHA-NI where
 * the CPU has it); tags are compared in constant time (CRYPTO_memcmp).
 *
 * A kvs_entry_mac is immutable after kvs_entry_mac_new: any number of
 * threads may begin MACs under it at once (each state is its own).
 */
#ifndef KVS_KV_ENTRY_MAC_H
#define KVS_KV_ENTRY_MAC_H

#include <stddef.h>
#include <stdint.h>

#define KVS_ENTRY_MAC_BYTES 32
#define KVS_ENTRY_MAC_MIN_KEY 16   /* bytes: a shorter key is refused */
#define KVS_ENTRY_MAC_MAX_KEY 4096 /* bytes read from a key file at most */

typedef struct kvs_entry_mac kvs_entry_mac;

/* A key of len bytes (copied). what names its source in messages (a file,
 * "kvs_cache_params.mac_key"); the key itself is never printed.
 * KVS_ERR_INVALID_ARG when len < KVS_ENTRY_MAC_MIN_KEY. */
int kvs_entry_mac_new(const void *key, size_t len, const char *what, kvs_entry_mac **out);
/* The key in file path: its bytes, surrounding whitespace trimmed (as the
 * Redis password file and --api-key-file are read). An unreadable, empty,
 * non-regular or too short file is refused naming path. */
int kvs_entry_mac_from_file(const char *path, kvs_entry_mac **out);
/* Wipes the key. NULL is a no-op. */
void kvs_entry_mac_free(kvs_entry_mac *m);
/* HMAC-SHA256(key, "kvstitch cache key id"). */
const uint8_t *kvs_entry_mac_key_id(const kvs_entry_mac *m);

/* One MAC computation: begin, update any number of times, then end (always:
 * it frees the state). Errors inside libcrypto make end fail. */
typedef struct kvs_entry_mac_state {
    void *ctx; /* EVP_MAC_CTX */
    int failed;
} kvs_entry_mac_state;

int kvs_entry_mac_begin(const kvs_entry_mac *m, kvs_entry_mac_state *s);
void kvs_entry_mac_update(kvs_entry_mac_state *s, const void *data, size_t n);
/* The tag into out; KVS_OK or KVS_ERR_NOMEM (libcrypto failed). */
int kvs_entry_mac_end(kvs_entry_mac_state *s, uint8_t out[KVS_ENTRY_MAC_BYTES]);
/* Ends s without a tag (an entry rejected before its MAC was checked). */
void kvs_entry_mac_abort(kvs_entry_mac_state *s);
/* 1 if the tags are equal (constant time). */
int kvs_entry_mac_equal(const uint8_t a[KVS_ENTRY_MAC_BYTES], const uint8_t b[KVS_ENTRY_MAC_BYTES]);

#endif
