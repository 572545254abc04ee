/* kvs_cache_verify: every entry of one cache's fingerprint in its cache
 * dir read whole and checked as a request would check it (`cache stats -m
 * --verify`). The directory-wide verify (cache_dir.c) has no model and no
 * key: it checks checksums, which a forger recomputes; only a reader with
 * the key can tell a forged entry, and only for its own fingerprint. */
#include <string.h>

#include "base/error.h"
#include "kv/disk.h"
#include "cache/cache.h"

typedef struct verify_ctx {
    const kvs_cache *cache;
    kvs_cache_verify_report *r;
} verify_ctx;

static int verify_visit(void *user, kvs_chunk *c) {
    verify_ctx *x = user;
    switch (kvs_cache_payload_verdict(x->cache->dir, &x->cache->fp, x->cache->mac, c)) {
    case KVS_DISK_OK: x->r->entries++; break;
    case KVS_DISK_BAD_MAC: x->r->bad_mac++; break;
    case KVS_DISK_MISSING:
    case KVS_DISK_IO: x->r->unreadable++; break;
    default: x->r->damaged++; break;
    }
    kvs_chunk_unref(c);
    return 0;
}

static int cache_verify_body(kvs_cache *cache, kvs_cache_verify_report *r) {
    if (!cache || !r) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_verify: cache and report are required");
    memset(r, 0, sizeof *r);
    if (!cache->dir)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_verify: the cache has no cache dir (kvs_cache_params.cache_dir)");
    r->macs_checked = cache->mac != NULL;
    verify_ctx x = {cache, r};
    kvs_disk_counts counts;
    int rc = kvs_disk_scan(cache->dir, &cache->fp, &cache->shape, cache->mac, NULL, verify_visit, &x, &counts);
    /* an entry of this fingerprint without a MAC is refused at its header
     * (a keyless write under the keyed name); other header damage names no
     * fingerprint: the directory-wide figures count it */
    r->bad_mac += counts.n[KVS_DISK_BAD_MAC];
    return rc;
}

int kvs_cache_verify(kvs_cache *cache, kvs_cache_verify_report *r) {
    KVS_ERROR_KEPT(cache_verify_body(cache, r));
}
