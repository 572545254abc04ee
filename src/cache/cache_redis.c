/* The Redis tier of a kvs_cache: opened from the public cache params and
 * attached to the store below RAM and the cache dir; its counters in the
 * cache stats; model-free listing and clearing (`kvstitch cache ... --redis`). */
#include "cache/cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kv/keys.h"
#include "kv/tier_redis.h"

static int has_redis(const kvs_cache_params *p) {
    return (p->redis_url && *p->redis_url) || (p->redis_cluster && *p->redis_cluster);
}

/* The tier's parameters from the cache's; KVS_ERR_INVALID_ARG naming an
 * unknown codec. */
static int tier_params(const kvs_cache_params *p, const kvs_entry_mac *mac, kvs_redis_tier_params *rp) {
    kvs_redis_tier_default_params(rp);
    rp->url = p->redis_url && *p->redis_url ? p->redis_url : NULL;
    rp->cluster = p->redis_cluster && *p->redis_cluster ? p->redis_cluster : NULL;
    rp->password_file = p->redis_password_file;
    rp->timeout_ms = p->redis_timeout_ms;
    rp->chunk_tokens = p->chunk_tokens; /* the grid: what a read expects per key */
    rp->mac = mac;
    return p->redis_codec && *p->redis_codec ? kvs_rv_codec_parse(p->redis_codec, &rp->codec) : KVS_OK;
}

int kvs_cache_open_redis(kvs_cache *c, const kvs_cache_params *p) {
    if (!has_redis(p)) return KVS_OK;
    if (p->redis_timeout_ms < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "redis_timeout_ms must be >= 0, got %d", p->redis_timeout_ms);
    kvs_redis_tier_params rp;
    kvs_tier *t = NULL;
    int st = tier_params(p, c->mac, &rp);
    if (!st) st = kvs_redis_tier_open(&rp, &c->fp, &c->shape, &t);
    if (st) return st;
    st = kvs_store_attach_tier(c->store, t); /* the store owns t from here, also on failure */
    if (!st) c->redis = t;
    return st;
}

static int cache_flush_body(kvs_cache *c, int timeout_ms) {
    if (!c) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_flush: cache is NULL");
    if (!c->redis || kvs_redis_tier_flush(c->redis, timeout_ms > 0 ? timeout_ms : 0)) return KVS_OK;
    return kvs_error(KVS_ERR_IO, "redis: writes still queued after %d ms", timeout_ms);
}

int kvs_cache_flush(kvs_cache *c, int timeout_ms) {
    KVS_ERROR_KEPT(cache_flush_body(c, timeout_ms));
}

void kvs_cache_redis_why_down(kvs_cache *c, char *out, size_t cap) {
    if (!out || !cap) return;
    out[0] = 0;
    if (c && c->redis) kvs_redis_tier_why_down(c->redis, out, cap);
}

void kvs_cache_redis_stats(kvs_cache *c, kvs_cache_stats *st) {
    if (!c->redis) return;
    kvs_tier_stats ts;
    c->redis->ops->stats(c->redis, &ts);
    kvs_redis_tier_stats rs;
    kvs_redis_tier_get_stats(c->redis, &rs);
    st->redis_gets = ts.gets;
    st->redis_hits = ts.hits;
    st->redis_get_bytes = ts.get_bytes;
    st->redis_puts = ts.puts;
    st->redis_put_bytes = ts.put_bytes;
    st->redis_put_dropped = ts.put_dropped;
    st->redis_put_too_large = rs.put_too_large;
    st->redis_max_value_bytes = rs.max_value_bytes;
    st->redis_put_errors = ts.put_errors;
    st->redis_bad = ts.bad;
    st->redis_bad_mac = ts.bad_mac;
    st->redis_foreign = ts.foreign;
    st->redis_errors = ts.errors;
    st->redis_timeouts = rs.timeouts;
    st->redis_breaker_opens = rs.breaker_opens;
    st->redis_connects = rs.connects;
    st->redis_moved = rs.moved + rs.ask;
}

/* --- without a model ------------------------------------------------------------ */

static int open_any(const kvs_cache_params *p, kvs_tier **t) {
    if (!p || !has_redis(p)) return kvs_error(KVS_ERR_INVALID_ARG, "no Redis given (redis_url or redis_cluster)");
    kvs_redis_tier_params rp;
    int st = tier_params(p, NULL, &rp);
    return st ? st : kvs_redis_tier_open(&rp, NULL, NULL, t);
}

typedef struct any_ctx {
    kvs_cache_entry_fn fn;
    void *user;
    kvs_cache_dir_stats *st;
    kvs_key *fps;
    size_t n_fps, cap_fps;
} any_ctx;

static int any_visit(void *user, kvs_chunk *c, const kvs_key *fp, uint64_t value_bytes) {
    any_ctx *x = user;
    x->st->entries++;
    x->st->bytes += value_bytes;
    size_t i = 0;
    while (i < x->n_fps && !kvs_key_equal(&x->fps[i], fp)) i++;
    if (i == x->n_fps) {
        if (x->n_fps == x->cap_fps) {
            size_t cap = x->cap_fps ? 2 * x->cap_fps : 8;
            kvs_key *f = realloc(x->fps, cap * sizeof *f);
            if (f) {
                x->fps = f;
                x->cap_fps = cap;
            }
        }
        if (x->n_fps < x->cap_fps) x->fps[x->n_fps++] = *fp;
    }
    int stop = 0;
    if (x->fn) {
        kvs_cache_entry e;
        kvs_reuse_fill_entry(c, fp, &e);
        stop = x->fn(x->user, &e);
    }
    kvs_chunk_unref(c);
    return stop;
}

static int cache_redis_scan_body(const kvs_cache_params *p, kvs_cache_entry_fn fn, void *user,
                                 kvs_cache_dir_stats *st) {
    kvs_cache_dir_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    kvs_tier *t = NULL;
    int rc = open_any(p, &t);
    if (rc) return rc;
    any_ctx x = {fn, user, st, NULL, 0, 0};
    rc = kvs_redis_tier_scan_fp(t, any_visit, &x, &st->damaged);
    st->models = x.n_fps;
    free(x.fps);
    kvs_tier_close(t);
    return rc;
}

/* (damaged values met are counted, their messages not left behind) */
int kvs_cache_redis_scan(const kvs_cache_params *p, kvs_cache_entry_fn fn, void *user, kvs_cache_dir_stats *st) {
    KVS_ERROR_KEPT(cache_redis_scan_body(p, fn, user, st));
}

static int cache_redis_clear_body(const kvs_cache_params *p, uint64_t *n_removed) {
    kvs_tier *t = NULL;
    int rc = open_any(p, &t);
    if (rc) return rc;
    rc = t->ops->clear(t, n_removed);
    kvs_tier_close(t);
    return rc;
}

int kvs_cache_redis_clear(const kvs_cache_params *p, uint64_t *n_removed) {
    KVS_ERROR_KEPT(cache_redis_clear_body(p, n_removed));
}
