/*
 * libFuzzer target for the cache entry codecs: a chunk's value in Redis
 * (kvs_rv_decode, kvs_rv_decode_header; redis_value.h) and the entry header
 * of the disk tier inside it (kvs_disk_header_parse_fixed / _rest; disk.h).
 * These are the bytes a hostile or damaged Redis or cache directory hands
 * the store; and the Redis tier's partial-chunk markers (kvs_rm_decode).
 *
 * Input: one mode byte, then the value. Mode bit 0 "fixes up" the value's
 * integrity fields before decoding (the raw payload's checksum, the keys
 * from the tokens, the header digest, the encoded payload's length and
 * checksum), so mutations get past the digests to what lies behind them:
 * the shape and size checks, the zstd frames, the byte-plane unshuffle.
 * Bits 1-7 pick how much of the value kvs_rv_decode_header sees. Every
 * value is also decoded by a keyed reader (the fuzzer's own cache key,
 * entry_mac.h); the fix-up recomputes the MAC of a raw value that has the
 * MAC flag, so keyed values get past it too. A keyed decode succeeds only
 * for a value with the flag.
 *
 * Checked (trap on violation): a decode that succeeds returns a resident
 * chunk whose sizes agree with its shape, whose bytes can all be read, and
 * which re-encodes (raw) and decodes to the same tokens and payload; a
 * decode that fails names a verdict and returns nothing.
 *
 * Built with -DKVS_FUZZ_SEEDGEN instead, this file is a small program that
 * writes valid values of every codec into a directory (scripts/run-fuzz.sh).
 */
#include "base/le.h"
#include "base/sha256.h"
#include "kv/checksum.h"
#include "kv/disk.h"
#include "kv/entry_mac.h"
#include "kv/keys.h"
#include "kv/redis_marker.h"
#include "kv/redis_value.h"
#include "fuzz_util.h"
#include "kvstitch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUE_BYTES ((size_t)16 << 20) /* the decoders' limit: no allocation beyond it */

/* The fuzzer's cache key. */
static const kvs_entry_mac *fuzz_mac(void) {
    static kvs_entry_mac *m;
    if (!m) FUZZ_CHECK(kvs_entry_mac_new("kvstitch fuzz cache key", 23, "fuzz", &m) == KVS_OK);
    return m;
}

/* The integrity fields of value v[0, len) recomputed from what they cover,
 * where the fields that locate them are in range (redis_value.h, disk.h). */
static void fix_up(uint8_t *v, size_t len) {
    const size_t pre = KVS_RV_PREFIX_BYTES;
    if (len < pre + KVS_DISK_FIXED_BYTES + 32) return;
    uint8_t *h = v + pre;
    const int32_t n_tok = (int32_t)kvs_get_le32(h + 160);
    if (n_tok <= 0 || (size_t)n_tok > (len - pre - KVS_DISK_FIXED_BYTES - 32) / 4) return;
    const size_t covered = KVS_DISK_FIXED_BYTES + 4 * (size_t)n_tok;
    size_t hb = kvs_get_le32(h + 8);
    if (hb < covered + 32 || hb > len - pre) hb = covered + 32;
    uint8_t *enc = h + hb;
    const size_t enc_bytes = len - pre - hb;
    if (kvs_get_le32(v + 8) == KVS_RV_CODEC_RAW) /* the payload as it is */
        kvs_put_le64(h + 184, kvs_checksum64(enc, enc_bytes, 0));
    int32_t *tokens = malloc(4 * (size_t)n_tok);
    if (!tokens) return;
    for (int32_t i = 0; i < n_tok; i++) tokens[i] = (int32_t)kvs_get_le32(h + KVS_DISK_FIXED_BYTES + 4 * (size_t)i);
    kvs_key fp, parent, k;
    memcpy(fp.b, h + 16, 32);
    memcpy(parent.b, h + 112, 32);
    kvs_key_prefix(&parent, tokens, n_tok, &k);
    memcpy(h + 48, k.b, 32);
    kvs_key_content(&fp, tokens, n_tok, &k);
    memcpy(h + 80, k.b, 32);
    free(tokens);
    kvs_sha256_digest(h, covered, h + covered);
    if ((kvs_get_le32(h + 12) & KVS_DISK_FLAG_MAC) && hb >= covered + 64 && kvs_get_le32(v + 8) == KVS_RV_CODEC_RAW) {
        kvs_entry_mac_state ms;
        FUZZ_CHECK(kvs_entry_mac_begin(fuzz_mac(), &ms) == KVS_OK);
        kvs_entry_mac_update(&ms, h, covered + 32);
        kvs_entry_mac_update(&ms, enc, enc_bytes);
        FUZZ_CHECK(kvs_entry_mac_end(&ms, h + covered + 32) == KVS_OK);
    }
    kvs_put_le64(v + 16, enc_bytes);
    kvs_put_le64(v + 24, kvs_checksum64(enc, enc_bytes, 0));
}

/* A successful decode's chunk (of the model with fingerprint fp): sizes
 * that agree, every byte readable, and a raw re-encoding that decodes to
 * the same chunk. */
static void check_chunk(const kvs_chunk *c, const kvs_key *fp) {
    FUZZ_CHECK(c->n_tok > 0 && kvs_kv_shape_check(&c->shape) == 0);
    FUZZ_CHECK(c->kv_bytes == kvs_kv_payload_bytes(&c->shape, c->n_tok));
    FUZZ_CHECK(c->kv != NULL);
    touch(c->tokens, 4 * (size_t)c->n_tok);
    touch(c->kv, c->kv_bytes);
    uint8_t *again = NULL;
    size_t again_len = 0;
    if (kvs_rv_encode(fp, c, KVS_RV_CODEC_RAW, 0, NULL, &again, &again_len) != KVS_OK) return; /* out of memory */
    const kvs_rv_expect x = {fp, &c->shape, &c->prefix_key, 0, NULL};
    kvs_chunk *d = NULL;
    kvs_disk_verdict verdict;
    FUZZ_CHECK(kvs_rv_decode(again, again_len, &x, "re-encoded", &d, &verdict) == KVS_OK);
    FUZZ_CHECK(d->n_tok == c->n_tok && d->pos0 == c->pos0 && d->origin == c->origin);
    FUZZ_CHECK(!memcmp(d->tokens, c->tokens, 4 * (size_t)c->n_tok));
    FUZZ_CHECK(!memcmp(d->kv, c->kv, c->kv_bytes));
    kvs_chunk_unref(d);
    free(again);
}

#ifndef KVS_FUZZ_SEEDGEN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    const size_t len = size - 1;
    uint8_t *v = malloc(len ? len : 1);
    if (!v) return 0;
    memcpy(v, data + 1, len);
    if (mode & 1) fix_up(v, len);

    const kvs_rv_expect x = {NULL, NULL, NULL, MAX_VALUE_BYTES, NULL};
    kvs_chunk *c = NULL;
    kvs_disk_verdict verdict = KVS_DISK_VERDICT_COUNT;
    if (kvs_rv_decode(v, len, &x, "fuzz", &c, &verdict) == KVS_OK) {
        FUZZ_CHECK(verdict == KVS_DISK_OK && c != NULL);
        kvs_key fp; /* the value's, in its entry header */
        memcpy(fp.b, v + KVS_RV_PREFIX_BYTES + 16, 32);
        check_chunk(c, &fp);
        kvs_chunk_unref(c);
    } else {
        FUZZ_CHECK(verdict != KVS_DISK_OK && verdict < KVS_DISK_VERDICT_COUNT && c == NULL);
    }

    /* a keyed reader: only a value with the MAC flag (and its MAC) decodes */
    const kvs_rv_expect xk = {NULL, NULL, NULL, MAX_VALUE_BYTES, fuzz_mac()};
    c = NULL;
    verdict = KVS_DISK_VERDICT_COUNT;
    if (kvs_rv_decode(v, len, &xk, "fuzz keyed", &c, &verdict) == KVS_OK) {
        FUZZ_CHECK(verdict == KVS_DISK_OK && c != NULL);
        FUZZ_CHECK(kvs_get_le32(v + KVS_RV_PREFIX_BYTES + 12) & KVS_DISK_FLAG_MAC);
        kvs_chunk_unref(c);
    } else {
        FUZZ_CHECK(verdict != KVS_DISK_OK && verdict < KVS_DISK_VERDICT_COUNT && c == NULL);
    }

    /* a partial-chunk marker (redis_marker.h), under the key it names or
     * another: decoded only where every field fits, round-trips */
    if (len >= 48 + 32) {
        kvs_key named, fp;
        memcpy(named.b, v + 48, 32);
        memcpy(fp.b, v + 16, 32);
        const kvs_key *under = mode & 2 ? &named : &fp;
        kvs_rm_marker m;
        verdict = KVS_DISK_VERDICT_COUNT;
        if (kvs_rm_decode(v, len, mode & 4 ? NULL : &fp, under, 1 << 20, &m, &verdict) == KVS_OK) {
            FUZZ_CHECK(verdict == KVS_DISK_OK && len == KVS_RM_BYTES && m.n_named >= 1 && m.n_named < m.n_target &&
                       m.n_target <= 1 << 20 && kvs_key_equal(&m.named, under));
            uint8_t again[KVS_RM_BYTES];
            kvs_rm_encode(&m, again);
            FUZZ_CHECK(!memcmp(again, v, KVS_RM_BYTES));
        } else {
            FUZZ_CHECK(verdict != KVS_DISK_OK && verdict < KVS_DISK_VERDICT_COUNT);
        }
    }

    /* the listing's reader on a prefix of the value */
    const size_t seen = len * (mode >> 1) / 127;
    kvs_key value_fp;
    verdict = KVS_DISK_VERDICT_COUNT;
    if (kvs_rv_decode_header(v, seen < len ? seen : len, len, &x, "fuzz", &c, &value_fp, &verdict) == KVS_OK) {
        FUZZ_CHECK(verdict == KVS_DISK_OK && c != NULL && c->kv == NULL);
        FUZZ_CHECK(c->n_tok > 0 && c->kv_bytes == kvs_kv_payload_bytes(&c->shape, c->n_tok));
        touch(c->tokens, 4 * (size_t)c->n_tok);
        kvs_chunk_unref(c);
    } else {
        FUZZ_CHECK(verdict != KVS_DISK_OK && verdict < KVS_DISK_VERDICT_COUNT);
    }

    /* the disk tier's header codec on the embedded entry header */
    if (len >= KVS_RV_PREFIX_BYTES) {
        const uint8_t *h = v + KVS_RV_PREFIX_BYTES;
        const size_t hlen = len - KVS_RV_PREFIX_BYTES;
        kvs_disk_header hd;
        if (kvs_disk_header_parse_fixed(h, hlen, "fuzz", &hd, &verdict) == KVS_OK) {
            FUZZ_CHECK(hd.n_tok > 0 && hd.header_bytes == kvs_disk_header_bytes(hd.n_tok, hd.has_mac));
            FUZZ_CHECK(hd.payload_bytes == kvs_kv_payload_bytes(&hd.shape, hd.n_tok));
            if (hd.header_bytes <= hlen && kvs_disk_header_parse_rest(h, "fuzz", &hd, &verdict) == KVS_OK) {
                FUZZ_CHECK(hd.tokens != NULL);
                touch(hd.tokens, 4 * (size_t)hd.n_tok);
                free(hd.tokens);
            }
        }
    }
    free(v);
    return 0;
}

#else /* KVS_FUZZ_SEEDGEN: valid values of every codec, fixed-up mode */

static void write_seed(const char *dir, const char *name, uint8_t mode, const uint8_t *v, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "seedgen: cannot write %s\n", path);
        exit(1);
    }
    fputc(mode, f);
    fwrite(v, 1, len, f);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const kvs_kv_shape shapes[3] = {{2, 1, 8, KVS_KV_F16}, {1, 2, 4, KVS_KV_F32}, {1, 1, 16, KVS_KV_Q8}};
    const int n_toks[3] = {3, 1, 2};
    for (int s = 0; s < 3; s++) {
        kvs_chunk *c = NULL;
        if (kvs_chunk_new(&shapes[s], n_toks[s], 1, &c) != KVS_OK) return 1;
        kvs_key fp;
        for (int i = 0; i < 32; i++) fp.b[i] = (uint8_t)(7 * i + s);
        for (int i = 0; i < c->n_tok; i++) c->tokens[i] = 100 + 17 * i;
        c->pos0 = s ? 5 : 0;
        c->origin = s ? KVS_CHUNK_DOC : 0;
        for (int i = 0; i < 32; i++) c->parent_key.b[i] = s ? (uint8_t)(200 - i) : fp.b[i];
        kvs_key_prefix(&c->parent_key, c->tokens, c->n_tok, &c->prefix_key);
        kvs_key_content(&fp, c->tokens, c->n_tok, &c->content_key);
        uint8_t *kv = c->kv;
        for (size_t i = 0; i < c->kv_bytes; i++) kv[i] = (uint8_t)(i * 13 % 61); /* small: finite f16 / f32 */
        for (int codec = 0; codec < KVS_RV_CODEC_COUNT; codec++) {
            uint8_t *v = NULL;
            size_t len = 0;
            if (kvs_rv_encode(&fp, c, (kvs_rv_codec)codec, 1, NULL, &v, &len) != KVS_OK) {
                fprintf(stderr, "seedgen: encode: %s\n", kvs_last_error());
                return 1;
            }
            /* the harness's own parts on a valid value: the fix-up changes
             * nothing, the decode and its checks pass */
            uint8_t *fixed = malloc(len);
            FUZZ_CHECK(fixed != NULL);
            memcpy(fixed, v, len);
            fix_up(fixed, len);
            FUZZ_CHECK(!memcmp(fixed, v, len));
            free(fixed);
            const kvs_rv_expect x = {&fp, &shapes[s], &c->prefix_key, MAX_VALUE_BYTES, NULL};
            kvs_chunk *d = NULL;
            kvs_disk_verdict verdict;
            FUZZ_CHECK(kvs_rv_decode(v, len, &x, "seed", &d, &verdict) == KVS_OK);
            check_chunk(d, &fp);
            kvs_chunk_unref(d);
            char name[64];
            snprintf(name, sizeof name, "value-%d-%s", s, kvs_rv_codec_name((kvs_rv_codec)codec));
            write_seed(argv[1], name, 0xff, v, len); /* fixed up, the whole value to the header reader */
            snprintf(name, sizeof name, "value-%d-%s-as-is", s, kvs_rv_codec_name((kvs_rv_codec)codec));
            write_seed(argv[1], name, 0x80, v, len);
            free(v);
            if (codec != KVS_RV_CODEC_RAW) continue;
            /* the same value written with the fuzzer's key: fix-up is a no-op, the keyed decode passes */
            FUZZ_CHECK(kvs_rv_encode(&fp, c, KVS_RV_CODEC_RAW, 1, fuzz_mac(), &v, &len) == KVS_OK);
            fixed = malloc(len);
            FUZZ_CHECK(fixed != NULL);
            memcpy(fixed, v, len);
            fix_up(fixed, len);
            FUZZ_CHECK(!memcmp(fixed, v, len));
            free(fixed);
            const kvs_rv_expect xk = {&fp, &shapes[s], &c->prefix_key, MAX_VALUE_BYTES, fuzz_mac()};
            FUZZ_CHECK(kvs_rv_decode(v, len, &xk, "seed", &d, &verdict) == KVS_OK);
            kvs_chunk_unref(d);
            snprintf(name, sizeof name, "value-%d-raw-keyed", s);
            write_seed(argv[1], name, 0xff, v, len);
            free(v);
        }
        if (c->n_tok > 1) { /* a marker of the chunk's first token, valid under its own key (mode bit 1) */
            kvs_rm_marker m = {1, c->n_tok, {{0}}, c->prefix_key, fp};
            kvs_key_prefix(&c->parent_key, c->tokens, 1, &m.named);
            uint8_t mv[KVS_RM_BYTES];
            kvs_rm_encode(&m, mv);
            kvs_rm_marker back;
            kvs_disk_verdict verdict;
            FUZZ_CHECK(kvs_rm_decode(mv, sizeof mv, &fp, &m.named, 1 << 20, &back, &verdict) == KVS_OK);
            char name[64];
            snprintf(name, sizeof name, "marker-%d", s);
            write_seed(argv[1], name, 0x02, mv, sizeof mv);
        }
        kvs_chunk_unref(c);
    }
    return 0;
}

#endif
