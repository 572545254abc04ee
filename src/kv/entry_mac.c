/* HMAC-SHA256 of cache entries on libcrypto (entry_mac.h). */
#include "kv/entry_mac.h"

#include "base/error.h"
#include "base/file.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

struct kvs_entry_mac {
    EVP_MAC *hmac;  /* the fetched algorithm (reference counted, thread-safe) */
    uint8_t *key;   /* (key_len) */
    size_t key_len;
    uint8_t key_id[KVS_ENTRY_MAC_BYTES];
};

static const char KEY_ID_LABEL[] = "kvstitch cache key id";

void kvs_entry_mac_free(kvs_entry_mac *m) {
    if (!m) return;
    if (m->key) OPENSSL_cleanse(m->key, m->key_len);
    free(m->key);
    EVP_MAC_free(m->hmac);
    free(m);
}

int kvs_entry_mac_begin(const kvs_entry_mac *m, kvs_entry_mac_state *s) {
    s->failed = 0;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(m->hmac);
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    if (!ctx || !EVP_MAC_init(ctx, m->key, m->key_len, params)) {
        EVP_MAC_CTX_free(ctx);
        s->ctx = NULL;
        s->failed = 1;
        return kvs_error(KVS_ERR_NOMEM, "cache key: HMAC-SHA256 could not be set up (libcrypto)");
    }
    s->ctx = ctx;
    return KVS_OK;
}

void kvs_entry_mac_update(kvs_entry_mac_state *s, const void *data, size_t n) {
    if (!s->failed && n && !EVP_MAC_update(s->ctx, data, n)) s->failed = 1;
}

int kvs_entry_mac_end(kvs_entry_mac_state *s, uint8_t out[KVS_ENTRY_MAC_BYTES]) {
    size_t len = 0;
    if (!s->failed && (!EVP_MAC_final(s->ctx, out, &len, KVS_ENTRY_MAC_BYTES) || len != KVS_ENTRY_MAC_BYTES))
        s->failed = 1;
    EVP_MAC_CTX_free(s->ctx);
    s->ctx = NULL;
    if (s->failed) {
        memset(out, 0, KVS_ENTRY_MAC_BYTES);
        return kvs_error(KVS_ERR_NOMEM, "cache key: HMAC-SHA256 failed (libcrypto)");
    }
    return KVS_OK;
}

void kvs_entry_mac_abort(kvs_entry_mac_state *s) {
    EVP_MAC_CTX_free(s->ctx);
    s->ctx = NULL;
}

int kvs_entry_mac_equal(const uint8_t a[KVS_ENTRY_MAC_BYTES], const uint8_t b[KVS_ENTRY_MAC_BYTES]) {
    return CRYPTO_memcmp(a, b, KVS_ENTRY_MAC_BYTES) == 0;
}

const uint8_t *kvs_entry_mac_key_id(const kvs_entry_mac *m) { return m->key_id; }

int kvs_entry_mac_new(const void *key, size_t len, const char *what, kvs_entry_mac **out) {
    if (!key)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the cache key is NULL (with a length of %zu)", what, len);
    if (len < KVS_ENTRY_MAC_MIN_KEY)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the cache key is %zu bytes, at least %d are needed", what, len,
                         KVS_ENTRY_MAC_MIN_KEY);
    kvs_entry_mac *m = calloc(1, sizeof *m);
    if (!m || !(m->key = malloc(len))) {
        free(m);
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", what);
    }
    memcpy(m->key, key, len);
    m->key_len = len;
    m->hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    kvs_entry_mac_state s;
    int rc = m->hmac ? kvs_entry_mac_begin(m, &s)
                     : kvs_error(KVS_ERR_UNSUPPORTED, "%s: libcrypto has no HMAC", what);
    if (!rc) {
        kvs_entry_mac_update(&s, KEY_ID_LABEL, sizeof KEY_ID_LABEL - 1);
        rc = kvs_entry_mac_end(&s, m->key_id);
    }
    if (rc) {
        kvs_entry_mac_free(m);
        return rc;
    }
    *out = m;
    return KVS_OK;
}

int kvs_entry_mac_from_file(const char *path, kvs_entry_mac **out) {
    if (!path || !*path) return kvs_error(KVS_ERR_INVALID_ARG, "cache key file: empty path");
    uint8_t buf[KVS_ENTRY_MAC_MAX_KEY];
    size_t n = 0;
    int more = 0;
    const int rc = kvs_read_regular_small(path, buf, sizeof buf, &n, &more);
    if (rc == KVS_OPEN_NOT_REGULAR)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the cache key file is not a regular file", path);
    if (rc < 0) return kvs_error(KVS_ERR_IO, "%s: cannot read the cache key file: %s", path, strerror(errno));
    int st;
    size_t a = 0, b = n;
    while (a < b && isspace(buf[a])) a++;
    while (b > a && isspace(buf[b - 1])) b--;
    if (more)
        st = kvs_error(KVS_ERR_INVALID_ARG, "%s: the cache key file is longer than %d bytes", path, KVS_ENTRY_MAC_MAX_KEY);
    else if (a == b)
        st = kvs_error(KVS_ERR_INVALID_ARG, "%s: the cache key file is empty", path);
    else
        st = kvs_entry_mac_new(buf + a, b - a, path, out);
    OPENSSL_cleanse(buf, sizeof buf);
    return st;
}
