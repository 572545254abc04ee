/* The store's indexes: prefix map, content map, radix tree (store_impl.h). */
#include "kv/store_impl.h"

#include "kv/keys.h"

#include <stdlib.h>
#include <string.h>

void kvs_store_index_add(kvs_store *s, kvs_chunk *c) {
    kvs_chunk_ref(c);
    kvs_chunk_map_add(&s->pmap, c);
    kvs_chunk_map_add(&s->cmap, c);
    c->store_flags |= SF_INDEXED;
    ADD(s->entries, 1);
    if (c->kv) {
        ADD(s->bytes, kvs_store_counted(c));
        ADD(s->resident, 1);
        kvs_store_lru_front(s, c);
    } else {
        ADD(s->tier_meta_bytes, kvs_store_meta_bytes(c));
        kvs_store_lru_front(s, c);
        kvs_store_trim_stubs_locked(s, s->stub_budget);
    }
}

void kvs_store_index_remove(kvs_store *s, kvs_chunk *c) {
    if (!(c->store_flags & SF_INDEXED)) return;
    kvs_chunk_map_del(&s->pmap, c);
    kvs_chunk_map_del(&s->cmap, c);
    if (c->radix_node) {
        kvs_radix_remove_at(s->radix, c->radix_node, c);
        c->radix_node = NULL;
    }
    kvs_store_lru_unlink(s, c);
    c->store_flags &= ~SF_INDEXED;
    SUB(s->entries, 1);
    if (c->kv) {
        SUB(s->bytes, kvs_store_counted(c));
        SUB(s->resident, 1);
    } else {
        SUB(s->tier_meta_bytes, kvs_store_meta_bytes(c));
    }
    kvs_chunk_unref(c);
}

void kvs_store_index_from_tier(kvs_store *s, kvs_chunk *c, const int32_t *path, int tier) {
    if (c->kv && kvs_store_counted(c) > s->budget) return; /* serves this request only */
    pthread_rwlock_wrlock(&s->lock);
    if (!(c->store_flags & SF_INDEXED) && !kvs_chunk_map_find(&s->pmap, &c->prefix_key)) {
        kvs_radix_node *node = NULL; /* no path: by its keys only, as kvs_store_insert's */
        int rc = path ? kvs_radix_insert(s->radix, path, c->pos0 + c->n_tok, c->pos0, c, &node) : KVS_OK;
        if (rc == KVS_OK || rc == KVS_RADIX_EXISTS) {
            c->radix_node = node;
            c->tier = tier;
            kvs_store_index_add(s, c);
            kvs_store_evict_locked(s, s->budget);
        }
    }
    pthread_rwlock_unlock(&s->lock);
}

/* The path of a chunk is its ancestors' tokens followed by its own; every
 * link must join exactly (the parent ends where the child starts). */
void kvs_store_attach_paths(kvs_store *s) {
    int32_t *path = NULL;
    size_t cap = 0;
    uint64_t orphans = 0;
    for (size_t i = 0; i < s->pmap.nb; i++) {
        for (kvs_chunk *c = s->pmap.b[i]; c; c = c->hnext_prefix) {
            if (c->radix_node) continue;
            int ok = 1;
            const kvs_chunk *x = c;
            while (ok && x->pos0 > 0) {
                const kvs_chunk *p = kvs_chunk_map_find(&s->pmap, &x->parent_key);
                if (!p || p->pos0 + p->n_tok != x->pos0) ok = 0;
                x = p;
            }
            if (ok && !kvs_key_equal(&x->parent_key, &s->fp)) ok = 0;
            if (!ok) {
                orphans++;
                continue;
            }
            size_t n = (size_t)c->pos0 + (size_t)c->n_tok;
            if (n > cap) {
                int32_t *np = realloc(path, n * sizeof *np);
                if (!np) {
                    orphans++;
                    continue;
                }
                path = np;
                cap = n;
            }
            for (x = c;; x = kvs_chunk_map_find(&s->pmap, &x->parent_key)) {
                memcpy(path + x->pos0, x->tokens, (size_t)x->n_tok * sizeof(int32_t));
                if (x->pos0 == 0) break;
            }
            kvs_radix_node *node;
            int rc = kvs_radix_insert(s->radix, path, (int)n, c->pos0, c, &node);
            if (rc == KVS_OK || rc == KVS_RADIX_EXISTS) c->radix_node = node;
            else orphans++;
        }
    }
    free(path);
    atomic_store(&s->tier_orphans, orphans);
}
