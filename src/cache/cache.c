/* The kvs_cache handle: open (fingerprint + store), stats, listing, clear,
 * and the helpers the request code shares (cache.h). */
#include "cache/cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/context.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "cache/fingerprint.h"

kvs_cache_params kvs_cache_default_params(void) {
    kvs_cache_params p;
    memset(&p, 0, sizeof p);
    p.chunk_tokens = KVS_CHUNK_TOKENS_DEFAULT;
    p.kv_type = KVS_KV_F16;
    return p;
}

/* The cache key of p (kvs_cache_params: mac_key or cache_key_file), *out
 * NULL without one. */
static int open_key(const kvs_cache_params *p, kvs_entry_mac **out) {
    *out = NULL;
    const int file = p->cache_key_file && *p->cache_key_file;
    if (file && p->mac_key)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_open: give mac_key or cache_key_file, not both");
    if (file) return kvs_entry_mac_from_file(p->cache_key_file, out);
    if (p->mac_key || p->mac_key_len) return kvs_entry_mac_new(p->mac_key, p->mac_key_len, "kvs_cache_params.mac_key", out);
    return KVS_OK;
}

static int cache_open_body(kvs_model *model, kvs_cache_params p, kvs_cache **out) {
    if (!model || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_open: model and out must not be NULL");
    if (p.chunk_tokens < 0 || p.chunk_tokens > KVS_MAX_CHUNK_TOKENS)
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_open: chunk_tokens must be in 0..%d (0: %d), got %d",
                         KVS_MAX_CHUNK_TOKENS, KVS_CHUNK_TOKENS_DEFAULT, p.chunk_tokens);
    if (!kvs_kv_type_name(p.kv_type))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_open: unknown kv_type %d", (int)p.kv_type);
    if (kvs_model_is_vocab_only(model))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: a vocabulary-only model has no KV to cache", kvs_model_path(model));
    kvs_cache *c = calloc(1, sizeof *c);
    if (!c) return kvs_error(KVS_ERR_NOMEM, "kvs_cache_open: out of memory");
    c->model = model;
    c->chunk_tokens = p.chunk_tokens ? p.chunk_tokens : KVS_CHUNK_TOKENS_DEFAULT;
    const kvs_hparams *hp = kvs_model_hparams(model);
    c->shape = (kvs_kv_shape){hp->n_layer, hp->n_head_kv, hp->head_dim, p.kv_type};
    int st = KVS_OK;
    if (p.cache_dir && *p.cache_dir) {
        if (!(c->dir = strdup(p.cache_dir))) st = kvs_error(KVS_ERR_NOMEM, "kvs_cache_open: out of memory");
        /* The directory first: the weights digest memo lives there. */
        if (!st) st = kvs_disk_init_dir(c->dir);
    }
    if (!st) st = open_key(&p, &c->mac);
    if (!st) st = kvs_fingerprint(model, p.kv_type, c->dir, &c->fp);
    if (!st && c->mac) kvs_fingerprint_keyed(&c->fp, kvs_entry_mac_key_id(c->mac), &c->fp);
    if (!st) {
        kvs_store_params sp = kvs_store_default_params();
        sp.budget_bytes = p.budget_bytes;
        sp.cache_dir = c->dir;
        sp.fsync = p.fsync;
        sp.cache_max_bytes = p.cache_max_bytes;
        sp.chunk_tokens = c->chunk_tokens;
        sp.mac = c->mac;
        st = kvs_store_open(&c->fp, &c->shape, sp, &c->store);
    }
    if (!st) st = kvs_cache_open_redis(c, &p); /* below RAM and the dir */
    if (st) {
        kvs_cache_free(c);
        return st;
    }
    *out = c;
    return KVS_OK;
}

int kvs_cache_open(kvs_model *model, kvs_cache_params p, kvs_cache **out) {
    KVS_ERROR_KEPT(cache_open_body(model, p, out));
}

void kvs_cache_free(kvs_cache *c) {
    if (!c) return;
    kvs_store_free(c->store);
    kvs_entry_mac_free(c->mac); /* after the store: its tiers point to it */
    free(c->dir);
    free(c);
}

static int cache_sync_body(kvs_cache *c, int *n_new) {
    if (!c) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_sync: cache is NULL");
    return kvs_store_sync_disk(c->store, n_new);
}

int kvs_cache_sync(kvs_cache *c, int *n_new) {
    KVS_ERROR_KEPT(cache_sync_body(c, n_new));
}

static int cache_clear_body(kvs_cache *c, int and_disk) {
    if (!c) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_clear: cache is NULL");
    int st = kvs_store_clear(c->store, and_disk);
    /* memory only: the directory's entries stay, and stay listed (the index
     * had forgotten them: entries() empty, stats 0, files still there) */
    if (!st && !and_disk) st = kvs_store_sync_dir(c->store, NULL); /* (never a scan of Redis) */
    return st;
}

int kvs_cache_clear(kvs_cache *c, int and_disk) {
    KVS_ERROR_KEPT(cache_clear_body(c, and_disk));
}

void kvs_cache_fingerprint_hex(const kvs_cache *c, char hex[65]) {
    if (!hex) return;
    if (c) kvs_key_to_hex(&c->fp, hex);
    else hex[0] = 0; /* NULL cache: "" */
}

int kvs_model_fingerprint_hex(kvs_model *model, kvs_kv_type kv_type, char hex[65]) {
    if (!model || !hex) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_model_fingerprint_hex: model and hex must not be NULL");
    if (!kvs_kv_type_name(kv_type))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_model_fingerprint_hex: unknown kv_type %d", (int)kv_type);
    if (kvs_model_is_vocab_only(model))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: a vocabulary-only model has no KV to cache", kvs_model_path(model));
    kvs_key fp;
    int st = kvs_fingerprint(model, kv_type, NULL, &fp);
    if (!st) kvs_key_to_hex(&fp, hex);
    return st;
}

void kvs_cache_get_stats(kvs_cache *c, kvs_cache_stats *st) {
    if (!st) return;
    memset(st, 0, sizeof *st);
    if (!c) return;
    kvs_store_stats s;
    kvs_store_get_stats(c->store, &s);
    st->chunk_tokens = c->chunk_tokens;
    st->entries = s.entries;
    st->resident = s.resident;
    st->bytes = s.bytes;
    st->budget_bytes = s.budget_bytes;
    st->index_bytes = s.index_bytes;
    st->prefix_reachable = s.prefix_reachable;
    st->lookups = s.lookups;
    st->hits = s.hits;
    st->misses = s.misses;
    st->hit_tokens = s.hit_tokens;
    st->lookup_tokens = s.lookup_tokens;
    st->lookup_seconds = s.lookup_seconds;
    st->inserts = s.inserts;
    st->evictions = s.evictions;
    st->disk_writes = s.disk_writes;
    st->disk_write_errors = s.disk_write_errors;
    st->disk_loads = s.disk_loads;
    st->disk_load_bytes = s.disk_load_bytes;
    st->disk_load_seconds = s.disk_load_seconds;
    st->disk_bad = s.disk_bad;
    st->disk_bad_mac = s.disk_bad_mac;
    st->disk_foreign = s.disk_foreign;
    st->disk_missing = s.disk_missing;
    st->disk_orphans = s.disk_orphans;
    st->dir_max_bytes = s.dir_max_bytes;
    st->tier_key_hits = s.tier_key_hits;
    st->redis_partial_hits = s.tier_partial_hits; /* (only Redis serves chunks in part) */
    st->index_drops = s.stub_drops;
    kvs_cache_redis_stats(c, st);
}

/* --- listing ---------------------------------------------------------------------- */

void kvs_reuse_fill_entry(const kvs_chunk *c, const kvs_key *fp, kvs_cache_entry *e) {
    memset(e, 0, sizeof *e);
    kvs_key_to_hex(&c->prefix_key, e->prefix_key);
    kvs_key_to_hex(&c->parent_key, e->parent_key);
    kvs_key_to_hex(&c->content_key, e->content_key);
    kvs_key_to_hex(fp, e->fingerprint);
    e->pos0 = c->pos0;
    e->n_tok = c->n_tok;
    e->tokens = c->tokens;
    e->kv_type = c->shape.dtype;
    e->n_layer = c->shape.n_layer;
    e->n_kv_head = c->shape.n_kv_head;
    e->head_dim = c->shape.head_dim;
    e->kv_bytes = c->kv_bytes;
    e->created_ns = c->created_ns;
    e->last_access_ns = atomic_load_explicit(&c->last_access_ns, memory_order_relaxed);
    if (!e->last_access_ns) e->last_access_ns = c->created_ns;
    e->n_access = atomic_load_explicit(&c->n_access, memory_order_relaxed);
    e->on_disk = c->tier >= 0;
    e->origin = (c->origin & KVS_CHUNK_BAKED) ? "baked" : (c->origin & KVS_CHUNK_DOC) ? "doc" : "prefix";
    e->n_neighbours = kvs_chunk_neighbours(c->origin);
}

typedef struct ls_ctx {
    const kvs_cache *cache;
    kvs_cache_entry_fn fn;
    void *user;
} ls_ctx;

static int ls_visit(void *user, const kvs_chunk *c, int resident, int reachable) {
    ls_ctx *x = user;
    kvs_cache_entry e;
    kvs_reuse_fill_entry(c, &x->cache->fp, &e);
    e.resident = resident;
    e.prefix_reachable = reachable;
    return x->fn(x->user, &e);
}

int kvs_cache_ls(kvs_cache *c, kvs_cache_entry_fn fn, void *user) {
    if (!c || !fn) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_cache_ls: cache and fn must not be NULL");
    ls_ctx x = {c, fn, user};
    return kvs_store_foreach(c->store, ls_visit, &x);
}

/* --- shared helpers ------------------------------------------------------------------ */

int kvs_reuse_check_context(kvs_context *ctx, kvs_cache *c) {
    const kvs_kv_buffer *kv = kvs_context_kv(ctx);
    if (kv->type != c->shape.dtype)
        return kvs_error(KVS_ERR_MODEL_MISMATCH, "the context's KV dtype (%s) is not the cache's (%s)",
                         kvs_kv_type_name(kv->type), kvs_kv_type_name(c->shape.dtype));
    kvs_model *m = (kvs_model *)kvs_context_model(ctx);
    if (m == c->model) return KVS_OK;
    /* Another handle: fine if it is the same model (memoized per handle). */
    kvs_key fp;
    int st = kvs_fingerprint(m, c->shape.dtype, c->dir, &fp);
    if (st) return st;
    if (c->mac) kvs_fingerprint_keyed(&fp, kvs_entry_mac_key_id(c->mac), &fp);
    if (!kvs_key_equal(&fp, &c->fp))
        return kvs_error(KVS_ERR_MODEL_MISMATCH, "%s: the context's model is not the model of the cache (%s)",
                         kvs_model_path(m), kvs_model_path(c->model));
    return KVS_OK;
}

int kvs_reuse_check_tokens(const kvs_context *ctx, const int32_t *tokens, int n) {
    return kvs_cache_check_tokens(kvs_context_n_vocab(ctx), tokens, n);
}

int kvs_cache_check_tokens(int n_vocab, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return kvs_error(KVS_ERR_INVALID_ARG, "token %d of %d: id %d is outside the vocabulary (0..%d)", i, n,
                             (int)tokens[i], n_vocab - 1);
    return KVS_OK;
}

const char *kvs_reuse_mode_name(kvs_reuse_mode mode) {
    switch (mode) {
    case KVS_REUSE_PREFIX: return "prefix";
    case KVS_REUSE_NONE: return "none";
    }
    return NULL;
}

int kvs_reuse_mode_parse(const char *name, kvs_reuse_mode *out) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_reuse_mode_parse: NULL out");
    static const kvs_reuse_mode all[] = {KVS_REUSE_PREFIX, KVS_REUSE_NONE};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, kvs_reuse_mode_name(all[i]))) {
            *out = all[i];
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARG, "unknown reuse mode '%s' (prefix, none)", name ? name : "");
}

kvs_reuse_params kvs_reuse_default_params(void) {
    kvs_reuse_params p;
    memset(&p, 0, sizeof p);
    p.mode = KVS_REUSE_PREFIX;
    p.store = 1;
    p.repair = kvs_repair_default_params();
    p.use_baked = 1;
    return p;
}
