#include "kv/keys.h"

#include "base/error.h"
#include "base/sha256.h"

#include <string.h>

/* Token bytes are hashed as int32 little-endian so keys are the same on every
 * host; on a little-endian host that is the array as it is in memory. */
static void update_tokens(kvs_sha256 *s, const int32_t *tokens, int n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    kvs_sha256_update(s, tokens, (size_t)n * sizeof(int32_t));
#else
    uint8_t buf[256];
    int k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t t = (uint32_t)tokens[i];
        buf[k++] = (uint8_t)t; buf[k++] = (uint8_t)(t >> 8);
        buf[k++] = (uint8_t)(t >> 16); buf[k++] = (uint8_t)(t >> 24);
        if (k == (int)sizeof buf) { kvs_sha256_update(s, buf, (size_t)k); k = 0; }
    }
    if (k) kvs_sha256_update(s, buf, (size_t)k);
#endif
}

static void key_of(const kvs_key *root, const int32_t *tokens, int n, kvs_key *out) {
    kvs_sha256 s;
    kvs_sha256_init(&s);
    kvs_sha256_update(&s, root->b, sizeof root->b);
    update_tokens(&s, tokens, n);
    kvs_sha256_final(&s, out->b);
}

void kvs_key_prefix(const kvs_key *parent, const int32_t *tokens, int n, kvs_key *out) {
    key_of(parent, tokens, n, out);
}

void kvs_key_prefix_lengths(const kvs_key *parent, const int32_t *tokens, int lo, int hi, kvs_key *out) {
    kvs_sha256 s;
    kvs_sha256_init(&s);
    kvs_sha256_update(&s, parent->b, sizeof parent->b);
    update_tokens(&s, tokens, lo);
    for (int n = lo; n <= hi; n++) {
        kvs_sha256 end = s; /* the state after n tokens, finished apart */
        kvs_sha256_final(&end, out[n - lo].b);
        if (n < hi) update_tokens(&s, tokens + n, 1);
    }
}

void kvs_key_prefix_at(const kvs_key *parent, const int32_t *tokens, const int *lens, int n, kvs_key *out) {
    kvs_sha256 s;
    kvs_sha256_init(&s);
    kvs_sha256_update(&s, parent->b, sizeof parent->b);
    for (int i = 0, at = 0; i < n; at = lens[i++]) {
        update_tokens(&s, tokens + at, lens[i] - at);
        kvs_sha256 end = s;
        kvs_sha256_final(&end, out[i].b);
    }
}

void kvs_key_content(const kvs_key *fingerprint, const int32_t *tokens, int n, kvs_key *out) {
    key_of(fingerprint, tokens, n, out);
}

int kvs_key_prefix_chain(const kvs_key *fp, const int32_t *tokens, const kvs_span *spans, int n_spans,
                         kvs_key *out) {
    int at = 0;
    for (int i = 0; i < n_spans; i++) {
        if (spans[i].start != at || spans[i].end <= spans[i].start)
            return kvs_error(KVS_ERR_INVALID_ARG, "prefix key chain: span %d [%d, %d) does not follow %d", i,
                             spans[i].start, spans[i].end, at);
        key_of(i ? &out[i - 1] : fp, tokens + spans[i].start, spans[i].end - spans[i].start, &out[i]);
        at = spans[i].end;
    }
    return KVS_OK;
}

int kvs_key_equal(const kvs_key *a, const kvs_key *b) { return memcmp(a->b, b->b, sizeof a->b) == 0; }

void kvs_key_to_hex(const kvs_key *k, char hex[65]) { kvs_sha256_to_hex(k->b, hex); }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int kvs_key_from_hex(const char *hex, kvs_key *out) {
    kvs_key k;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return kvs_error(KVS_ERR_INVALID_ARG, "key: \"%.64s\" is not 64 hex digits", hex);
        k.b[i] = (uint8_t)(hi << 4 | lo);
    }
    *out = k;
    return KVS_OK;
}

uint64_t kvs_key_hash(const kvs_key *k) {
    uint64_t h;
    memcpy(&h, k->b, sizeof h);
    return h;
}
