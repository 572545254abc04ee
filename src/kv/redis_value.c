/* The Redis value codec (redis_value.h): one row per payload codec. */
#include "kv/redis_value.h"

#include "base/error.h"
#include "base/le.h"
#include "kv/checksum.h"
#include "kv/keys.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

/* --- byte planes ------------------------------------------------------------ */

/* dst = the esize byte planes of src's n elements (plane b = byte b of every element). */
static void shuffle_planes(uint8_t *dst, const uint8_t *src, size_t n, size_t esize) {
    for (size_t b = 0; b < esize; b++) {
        uint8_t *d = dst + b * n;
        for (size_t i = 0; i < n; i++) d[i] = src[i * esize + b];
    }
}
static void unshuffle_planes(uint8_t *dst, const uint8_t *src, size_t n, size_t esize) {
    for (size_t b = 0; b < esize; b++) {
        const uint8_t *s = src + b * n;
        for (size_t i = 0; i < n; i++) dst[i * esize + b] = s[i];
    }
}

/* --- codec rows --------------------------------------------------------------- */

/* encode: raw[raw_len] -> dst (capacity cap); returns bytes written or 0 on failure.
 * decode: enc[enc_len] -> raw[raw_len] exactly; returns 0 or -1. */
typedef struct codec_row {
    const char *name;
    size_t (*bound)(size_t raw_len);
    size_t (*encode)(uint8_t *dst, size_t cap, const uint8_t *raw, size_t raw_len, size_t esize, int level);
    int (*decode)(uint8_t *raw, size_t raw_len, const uint8_t *enc, size_t enc_len, size_t esize);
} codec_row;

static size_t raw_bound(size_t n) { return n; }
static size_t raw_encode(uint8_t *dst, size_t cap, const uint8_t *raw, size_t n, size_t esize, int level) {
    if (cap < n) return 0;
    memcpy(dst, raw, n);
    return n;
}
static int raw_decode(uint8_t *raw, size_t n, const uint8_t *enc, size_t enc_len, size_t esize) {
    if (enc_len != n) return -1;
    memcpy(raw, enc, n);
    return 0;
}

static size_t zstd_bound(size_t n) { return ZSTD_compressBound(n); }
static size_t zstd_encode(uint8_t *dst, size_t cap, const uint8_t *raw, size_t n, size_t esize, int level) {
    size_t r = ZSTD_compress(dst, cap, raw, n, level);
    return ZSTD_isError(r) ? 0 : r;
}
static int zstd_decode(uint8_t *raw, size_t n, const uint8_t *enc, size_t enc_len, size_t esize) {
    /* The frame's own size claim must agree with the verified header before
     * anything is written; the output buffer is the header's size. */
    unsigned long long claimed = ZSTD_getFrameContentSize(enc, enc_len);
    if (claimed != (unsigned long long)n) return -1;
    size_t r = ZSTD_decompress(raw, n, enc, enc_len);
    return ZSTD_isError(r) || r != n ? -1 : 0;
}

static size_t shuffle_zstd_encode(uint8_t *dst, size_t cap, const uint8_t *raw, size_t n, size_t esize, int level) {
    uint8_t *planes = malloc(n ? n : 1);
    if (!planes) return 0;
    shuffle_planes(planes, raw, n / esize, esize);
    size_t r = zstd_encode(dst, cap, planes, n, esize, level);
    free(planes);
    return r;
}
static int shuffle_zstd_decode(uint8_t *raw, size_t n, const uint8_t *enc, size_t enc_len, size_t esize) {
    uint8_t *planes = malloc(n ? n : 1);
    if (!planes) return -1;
    int r = zstd_decode(planes, n, enc, enc_len, esize);
    if (!r) unshuffle_planes(raw, planes, n / esize, esize);
    free(planes);
    return r;
}

static const codec_row codecs[KVS_RV_CODEC_COUNT] = {
    [KVS_RV_CODEC_RAW] = {"raw", raw_bound, raw_encode, raw_decode},
    [KVS_RV_CODEC_ZSTD] = {"zstd", zstd_bound, zstd_encode, zstd_decode},
    [KVS_RV_CODEC_SHUFFLE_ZSTD] = {"shuffle-zstd", zstd_bound, shuffle_zstd_encode, shuffle_zstd_decode},
};

const char *kvs_rv_codec_name(kvs_rv_codec codec) {
    return (unsigned)codec < KVS_RV_CODEC_COUNT ? codecs[codec].name : "?";
}

int kvs_rv_codec_parse(const char *name, kvs_rv_codec *out) {
    for (int i = 0; name && i < KVS_RV_CODEC_COUNT; i++)
        if (!strcmp(name, codecs[i].name)) {
            *out = (kvs_rv_codec)i;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown Redis value codec '%s' (raw, zstd, shuffle-zstd)",
                     name ? name : "");
}

/* --- encode -------------------------------------------------------------------- */

int kvs_rv_encode(const kvs_key *fp, const kvs_chunk *c, kvs_rv_codec codec, int level, const kvs_entry_mac *mac,
                  uint8_t **out, size_t *out_len) {
    if ((unsigned)codec >= KVS_RV_CODEC_COUNT)
        return kvs_error(KVS_ERR_INVALID_ARG, "redis value: unknown codec %d", (int)codec);
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "redis value: chunk at pos %d has no payload", c->pos0);
    const codec_row *row = &codecs[codec];
    size_t hb = kvs_disk_header_bytes(c->n_tok, mac != NULL);
    size_t cap = KVS_RV_PREFIX_BYTES + hb + row->bound(c->kv_bytes);
    uint8_t *v = malloc(cap);
    if (!v) return kvs_error(KVS_ERR_NOMEM, "redis value: out of memory for %zu bytes", cap);
    uint8_t *enc = v + KVS_RV_PREFIX_BYTES + hb;
    size_t esize = kvs_kv_dtype_size(c->shape.dtype);
    size_t enc_len = row->encode(enc, cap - KVS_RV_PREFIX_BYTES - hb, c->kv, c->kv_bytes, esize, level);
    if (!enc_len) {
        free(v);
        return kvs_error(KVS_ERR_NOMEM, "redis value: %s encoding of %zu bytes failed", row->name, c->kv_bytes);
    }
    memcpy(v, KVS_RV_MAGIC, 4);
    kvs_put_le32(v + 4, KVS_RV_VERSION);
    kvs_put_le32(v + 8, (uint32_t)codec);
    kvs_put_le32(v + 12, 0);
    kvs_put_le64(v + 16, enc_len);
    kvs_put_le64(v + 24, kvs_checksum64(enc, enc_len, 0));
    int rc = kvs_disk_header_build(v + KVS_RV_PREFIX_BYTES, hb, fp, c, kvs_checksum64(c->kv, c->kv_bytes, 0), mac);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *out_len = KVS_RV_PREFIX_BYTES + hb + enc_len;
    return KVS_OK;
}

/* --- decode -------------------------------------------------------------------- */

#define FAIL(v, ...)                                           \
    do {                                                       \
        *verdict = (v);                                        \
        kvs_error(kvs_disk_verdict_status(v), __VA_ARGS__);    \
        goto fail;                                             \
    } while (0)

/* Wrapper + entry header of v[0, len) (total_len = the whole value's length).
 * On success hd->tokens is malloc'd (caller frees) and, with x->mac and ms,
 * *ms is begun over the header (the caller ends it). */
static int parse_header(const uint8_t *v, size_t len, size_t total_len, const kvs_rv_expect *x, const char *what,
                        kvs_disk_header *hd, kvs_entry_mac_state *ms, kvs_disk_verdict *verdict) {
    memset(hd, 0, sizeof *hd);
    if (x->max_bytes && total_len > x->max_bytes)
        FAIL(KVS_DISK_BAD_HEADER, "%s: %zu bytes, over the %zu-byte limit", what, total_len, x->max_bytes);
    if (len >= 4 && memcmp(v, KVS_RV_MAGIC, 4)) FAIL(KVS_DISK_BAD_MAGIC, "%s: not a kvstitch value (bad magic)", what);
    if (len < KVS_RV_PREFIX_BYTES) FAIL(KVS_DISK_TRUNCATED, "%s: truncated (%zu bytes)", what, len);
    if (kvs_get_le32(v + 4) != KVS_RV_VERSION)
        FAIL(KVS_DISK_BAD_VERSION, "%s: value version %u, this build reads %u", what, kvs_get_le32(v + 4), KVS_RV_VERSION);
    if (kvs_get_le32(v + 8) >= KVS_RV_CODEC_COUNT || kvs_get_le32(v + 12))
        FAIL(KVS_DISK_BAD_HEADER, "%s: unknown codec %u", what, kvs_get_le32(v + 8));
    int rc = kvs_disk_header_parse_fixed(v + KVS_RV_PREFIX_BYTES, len - KVS_RV_PREFIX_BYTES, what, hd, verdict);
    if (rc) return rc;
    uint64_t enc_bytes = kvs_get_le64(v + 16);
    if (total_len < KVS_RV_PREFIX_BYTES + hd->header_bytes ||
        enc_bytes != total_len - KVS_RV_PREFIX_BYTES - hd->header_bytes)
        FAIL(KVS_DISK_TRUNCATED, "%s: %zu bytes, its header says %llu", what, total_len,
             (unsigned long long)(KVS_RV_PREFIX_BYTES + hd->header_bytes + enc_bytes));
    if (len < KVS_RV_PREFIX_BYTES + hd->header_bytes)
        FAIL(KVS_DISK_TRUNCATED, "%s: header cut short (%zu of %zu bytes)", what, len,
             KVS_RV_PREFIX_BYTES + hd->header_bytes);
    rc = kvs_disk_header_parse_rest(v + KVS_RV_PREFIX_BYTES, what, hd, verdict);
    if (rc) return rc;
    rc = kvs_disk_header_check_owner(hd, x->fingerprint, x->shape, what, verdict);
    if (rc) goto fail_rc;
    if (x->prefix_key && !kvs_key_equal(x->prefix_key, &hd->prefix))
        FAIL(KVS_DISK_BAD_HEADER, "%s: value stored under another chunk's key", what);
    if (x->max_bytes && hd->payload_bytes > x->max_bytes)
        FAIL(KVS_DISK_BAD_HEADER, "%s: payload of %llu bytes, over the %zu-byte limit", what,
             (unsigned long long)hd->payload_bytes, x->max_bytes);
    if (x->mac && (rc = kvs_disk_header_mac_begin(v + KVS_RV_PREFIX_BYTES, hd, x->mac, ms, what, verdict))) goto fail_rc;
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    rc = kvs_disk_verdict_status(*verdict);
fail_rc:
    free(hd->tokens);
    hd->tokens = NULL;
    return rc;
}

int kvs_rv_decode_header(const uint8_t *v, size_t len, size_t total_len, const kvs_rv_expect *expect,
                         const char *what, kvs_chunk **out, kvs_key *value_fp, kvs_disk_verdict *verdict) {
    kvs_disk_verdict v_local;
    if (!verdict) verdict = &v_local;
    kvs_rv_expect none = {0};
    kvs_disk_header hd;
    int rc = parse_header(v, len, total_len, expect ? expect : &none, what, &hd, NULL, verdict);
    if (rc) return rc;
    rc = kvs_disk_header_to_chunk(&hd, 0, out);
    if (!rc && value_fp) *value_fp = hd.fp;
    free(hd.tokens);
    if (rc) *verdict = KVS_DISK_IO;
    return rc;
}

int kvs_rv_decode(const uint8_t *v, size_t len, const kvs_rv_expect *expect, const char *what, kvs_chunk **out,
                  kvs_disk_verdict *verdict) {
    kvs_disk_verdict v_local;
    if (!verdict) verdict = &v_local;
    kvs_rv_expect none = {0};
    kvs_disk_header hd;
    kvs_chunk *c = NULL;
    kvs_entry_mac_state ms = {0};
    const int keyed = expect && expect->mac;
    int rc = parse_header(v, len, len, expect ? expect : &none, what, &hd, &ms, verdict);
    if (rc) return rc;
    const uint8_t *enc = v + KVS_RV_PREFIX_BYTES + hd.header_bytes;
    size_t enc_len = len - KVS_RV_PREFIX_BYTES - hd.header_bytes;
    if (kvs_checksum64(enc, enc_len, 0) != kvs_get_le64(v + 24))
        FAIL(KVS_DISK_BAD_PAYLOAD, "%s: encoded payload checksum mismatch", what);
    if (kvs_disk_header_to_chunk(&hd, 1, &c)) FAIL(KVS_DISK_IO, "%s: out of memory for %llu bytes", what,
                                            (unsigned long long)hd.payload_bytes);
    const codec_row *row = &codecs[kvs_get_le32(v + 8)];
    if (row->decode(c->kv, c->kv_bytes, enc, enc_len, kvs_kv_dtype_size(hd.shape.dtype)))
        FAIL(KVS_DISK_BAD_PAYLOAD, "%s: %s payload does not decode to %llu bytes", what, row->name,
             (unsigned long long)hd.payload_bytes);
    /* raw: the payload is the encoded bytes, whose checksum (same function,
     * same seed) was verified above: comparing the sums spares a second pass */
    uint64_t sum = kvs_get_le32(v + 8) == KVS_RV_CODEC_RAW ? kvs_get_le64(v + 24) : kvs_checksum64(c->kv, c->kv_bytes, 0);
    if (sum != hd.payload_sum) FAIL(KVS_DISK_BAD_PAYLOAD, "%s: payload checksum mismatch", what);
    if (keyed) {
        kvs_entry_mac_update(&ms, c->kv, c->kv_bytes);
        if (kvs_disk_header_mac_check(&hd, &ms, what, verdict)) goto fail;
    }
    free(hd.tokens);
    *out = c;
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    if (keyed) kvs_entry_mac_abort(&ms);
    free(hd.tokens);
    kvs_chunk_unref(c);
    return kvs_disk_verdict_status(*verdict);
}
