/*
 * Payloads from the tiers below RAM: the one place where the store reads a
 * tier for a chunk it has indexed, counts what happened, and classifies a
 * failure (store_impl.h: kvs_fetch_fault). The tier verifies and drops
 * damaged entries itself (tier.h); the store drops its index entry.
 */
#include "kv/store_impl.h"

#include "base/error.h"
#include "kv/keys.h"

#include <stdlib.h>

kvs_fetch_fault kvs_store_fault_of(int rc) {
    if (rc == KVS_OK) return KVS_FETCH_OK;
    if (rc == KVS_ERR_NOT_FOUND) return KVS_FETCH_GONE;
    if (rc == KVS_ERR_IO || rc == KVS_ERR_NOMEM || rc == KVS_ERR_INVALID_ARG || rc == KVS_ERR_INTERNAL)
        return KVS_FETCH_TRANSIENT;
    return KVS_FETCH_DAMAGED;
}

void kvs_store_count_fetch(kvs_store *s, int tier, const kvs_chunk *c, int rc, uint64_t t0) {
    switch (kvs_store_fault_of(rc)) {
    case KVS_FETCH_OK:
        if (tier < 0 || tier >= KVS_STORE_MAX_TIERS) break;
        ADD(s->tier_loads[tier], 1);
        ADD(s->tier_load_bytes[tier], c->kv_bytes);
        ADD(s->tier_load_ns[tier], kvs_store_mono_ns() - t0);
        break;
    case KVS_FETCH_GONE: ADD(s->tier_missing, 1); break;
    case KVS_FETCH_DAMAGED:
        ADD(s->tier_bad, 1);
        if (rc == KVS_TIER_ERR_BAD_MAC) ADD(s->tier_bad_mac, 1); /* of tier_bad, as disk_bad_mac of disk_bad */
        break;
    default: break;
    }
}

static kvs_tier *tier_of(kvs_store *s, const kvs_chunk *c) {
    return c->tier >= 0 && c->tier < s->n_tiers ? s->tiers[c->tier] : NULL;
}

/* The payload of c from its tier, into a new buffer. */
static int load_payload(kvs_tier *t, const kvs_chunk *c, void **buf) {
    if (t->ops->load) return t->ops->load(t, c, buf);
    kvs_chunk *got = NULL;
    int rc = t->ops->get_many(t, &c->prefix_key, 1, &got);
    if (rc == KVS_OK) {
        /* the prefix key names tokens + history: the same chunk (a tier may
         * answer with a longer one that the key's tokens begin, tier.h) */
        if (got && got->kv && kvs_key_equal(&got->prefix_key, &c->prefix_key) && got->kv_bytes == c->kv_bytes &&
            got->n_tok == c->n_tok && got->pos0 == c->pos0) {
            *buf = got->kv;
            got->kv = NULL;
        } else {
            rc = KVS_ERR_NOT_FOUND;
        }
    }
    kvs_chunk_unref(got);
    return rc;
}

/* Makes a pinned, indexed chunk resident. Under the read lock, so that no
 * writer unindexes it meanwhile (the bytes it adds are the index's), and one
 * load at a time (load_mu): a payload appears whole or not at all. */
static kvs_fetch_fault make_resident(kvs_store *s, kvs_chunk *c) {
    kvs_fetch_fault f = KVS_FETCH_OK;
    pthread_rwlock_rdlock(&s->lock);
    pthread_mutex_lock(&s->load_mu);
    if (!c->kv && !(c->store_flags & SF_INDEXED)) {
        f = KVS_FETCH_TRANSIENT; /* dropped by another thread meanwhile */
    } else if (!c->kv) {
        kvs_tier *t = tier_of(s, c);
        if (!t) {
            kvs_error(KVS_ERR_INTERNAL, "store: chunk at pos %d has neither payload nor tier", c->pos0);
            f = KVS_FETCH_TRANSIENT;
        } else {
            uint64_t t0 = kvs_store_mono_ns();
            void *buf = NULL;
            const int rc = load_payload(t, c, &buf);
            f = kvs_store_fault_of(rc);
            kvs_store_count_fetch(s, c->tier, c, rc, t0);
            if (f == KVS_FETCH_OK) {
                c->kv = buf;
                ADD(s->bytes, kvs_store_counted(c));
                SUB(s->tier_meta_bytes, kvs_store_meta_bytes(c));
                ADD(s->resident, 1);
                kvs_store_lru_front(s, c);
            }
        }
    }
    pthread_mutex_unlock(&s->load_mu);
    pthread_rwlock_unlock(&s->lock);
    return f;
}

kvs_fetch_fault kvs_store_fetch(kvs_store *s, kvs_chunk *c, const kvs_kv_buffer *kv, int off, int n, int slot) {
    if (kv) {
        pthread_mutex_lock(&s->load_mu);
        int resident = c->kv != NULL; /* a pinned payload stays */
        pthread_mutex_unlock(&s->load_mu);
        kvs_tier *t = tier_of(s, c);
        if (!resident && t && t->ops->get_into) {
            /* straight from the tier into the buffer: no payload buffer */
            uint64_t t0 = kvs_store_mono_ns();
            const int rc = t->ops->get_into(t, c, off, n, kv, slot);
            kvs_store_count_fetch(s, c->tier, c, rc, t0);
            return kvs_store_fault_of(rc);
        }
    }
    kvs_fetch_fault f = make_resident(s, c);
    if (f == KVS_FETCH_OK && kv && kvs_chunk_copy_to_kv(c, off, n, kv, slot)) f = KVS_FETCH_TRANSIENT;
    return f;
}

kvs_fetch_fault kvs_store_verify(kvs_store *s, kvs_chunk *c) {
    pthread_mutex_lock(&s->load_mu);
    int resident = c->kv != NULL;
    pthread_mutex_unlock(&s->load_mu);
    kvs_tier *t = tier_of(s, c);
    if (resident || !t) return KVS_FETCH_OK;
    uint64_t t0 = kvs_store_mono_ns();
    void *buf = NULL;
    const int rc = load_payload(t, c, &buf);
    kvs_fetch_fault f = kvs_store_fault_of(rc);
    free(buf);
    if (f != KVS_FETCH_OK) kvs_store_count_fetch(s, c->tier, c, rc, t0); /* a good one was not served: no load counted */
    return f;
}

void kvs_store_drop(kvs_store *s, kvs_chunk **bad, int n) {
    if (!n) return;
    pthread_rwlock_wrlock(&s->lock);
    for (int i = 0; i < n; i++) kvs_store_index_remove(s, bad[i]);
    pthread_rwlock_unlock(&s->lock);
    for (int i = 0; i < n; i++) kvs_chunk_unref(bad[i]);
}
