/* SHA-256 (FIPS 180-4): incremental and one-shot. Uses the x86 SHA extensions
 * when the CPU has them (checked once at run time), else portable C. */
#ifndef KVS_BASE_SHA256_H
#define KVS_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvs_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;   /* total bytes fed so far */
    uint8_t buf[64];    /* partial block */
    size_t buf_len;
} kvs_sha256;

void kvs_sha256_init(kvs_sha256 *s);
void kvs_sha256_update(kvs_sha256 *s, const void *data, size_t len);
/* Writes the 32-byte digest; the state must be re-initialised to be reused. */
void kvs_sha256_final(kvs_sha256 *s, uint8_t out[32]);

void kvs_sha256_digest(const void *data, size_t len, uint8_t out[32]);
/* Lower-case hex of a digest, NUL-terminated. */
void kvs_sha256_to_hex(const uint8_t digest[32], char hex[65]);

/* For tests and benchmarks: enable (1) or disable (0) the hardware path;
 * returns 1 if the hardware path is now in use (0 if the CPU lacks it). */
int kvs_sha256_use_hw(int enable);

#endif
