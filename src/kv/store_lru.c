/*
 * The store's LRU lists and eviction (store_impl.h). Indexed chunks form two
 * lists, most recent first: resident ones, and payload-less ones a tier
 * holds ("stubs"). When the bytes the resident ones count exceed the budget,
 * the least recently used chunks that nobody pins go: a chunk a tier holds
 * only drops its payload (it stays indexed as a stub and is fetched again on
 * the next hit), a memory-only chunk leaves every index. When the stubs'
 * struct and token bytes exceed their bound, the least recently used
 * unpinned ones leave the index: the tier still holds them, and a lookup
 * still finds their grid chunks there by key.
 */
#include "kv/store_impl.h"

#include <stdlib.h>
#include <time.h>

uint64_t kvs_store_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t kvs_store_default_stub_budget(size_t budget) {
    return budget / 8 > KVS_STORE_STUB_BYTES_MIN ? budget / 8 : KVS_STORE_STUB_BYTES_MIN;
}

/* Unlinks c from the list it is in (its flag says which). */
static void unlink_locked(kvs_store *s, kvs_chunk *c) {
    if (!(c->lru_flags & (SF_IN_LRU | SF_IN_STUBS))) return;
    struct kvs_lru_list *l = &s->lru[c->lru_flags & SF_IN_LRU ? KVS_LRU_RESIDENT : KVS_LRU_STUBS];
    if (c->lru_prev) c->lru_prev->lru_next = c->lru_next;
    else l->head = c->lru_next;
    if (c->lru_next) c->lru_next->lru_prev = c->lru_prev;
    else l->tail = c->lru_prev;
    c->lru_prev = c->lru_next = NULL;
    c->lru_flags &= ~(SF_IN_LRU | SF_IN_STUBS);
}

/* To the front of list k (KVS_LRU_*). */
static void front_locked(kvs_store *s, kvs_chunk *c, int k) {
    if (k == KVS_LRU_RESIDENT && !(c->lru_flags & SF_IN_LRU)) ADD(s->lru_adds, 1); /* (evict_stuck) */
    unlink_locked(s, c);
    struct kvs_lru_list *l = &s->lru[k];
    c->lru_next = l->head;
    if (l->head) l->head->lru_prev = c;
    l->head = c;
    if (!l->tail) l->tail = c;
    c->lru_flags |= k == KVS_LRU_RESIDENT ? SF_IN_LRU : SF_IN_STUBS;
}

/* The caller has just set or cleared c's payload (or indexed c), so c->kv
 * names the list. */
void kvs_store_lru_front(kvs_store *s, kvs_chunk *c) {
    int k = c->kv ? KVS_LRU_RESIDENT : KVS_LRU_STUBS;
    pthread_mutex_lock(&s->lru_mu);
    front_locked(s, c, k);
    pthread_mutex_unlock(&s->lru_mu);
}

void kvs_store_lru_unlink(kvs_store *s, kvs_chunk *c) {
    pthread_mutex_lock(&s->lru_mu);
    unlink_locked(s, c);
    pthread_mutex_unlock(&s->lru_mu);
}

void kvs_store_touch(kvs_store *s, kvs_chunk *c) {
    atomic_store_explicit(&c->last_access_ns, kvs_now_ns(), memory_order_relaxed);
    atomic_fetch_add_explicit(&c->n_access, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->lru_mu);
    /* the flag names the list: a payload loaded meanwhile (load_mu, not
     * held here) moves its chunk under lru_mu after it is set */
    if (c->lru_flags & SF_IN_LRU) front_locked(s, c, KVS_LRU_RESIDENT);
    else if (c->lru_flags & SF_IN_STUBS) front_locked(s, c, KVS_LRU_STUBS);
    pthread_mutex_unlock(&s->lru_mu);
}

/* The least recently used chunk of list k that only the store holds,
 * unlinked; NULL if none. No pin can appear meanwhile: pins are taken under
 * the read lock, which the caller's write lock excludes. */
static kvs_chunk *take_oldest_unpinned(kvs_store *s, int k) {
    pthread_mutex_lock(&s->lru_mu);
    kvs_chunk *v = s->lru[k].tail;
    while (v && atomic_load(&v->refs) > 1) v = v->lru_prev;
    if (v) unlink_locked(s, v);
    pthread_mutex_unlock(&s->lru_mu);
    return v;
}

size_t kvs_store_trim_stubs_locked(kvs_store *s, size_t target) {
    size_t n = 0;
    kvs_chunk *v;
    while (GET(s->tier_meta_bytes) > target && (v = take_oldest_unpinned(s, KVS_LRU_STUBS))) {
        kvs_store_index_remove(s, v);
        ADD(s->stub_drops, 1);
        n++;
    }
    return n;
}

/* Events after which a resident chunk may be evictable where none was: a
 * pin's last drop anywhere, a chunk joining the resident list. Read before
 * a walk, so that one during it makes the next check walk again. */
static uint64_t evictable_events(kvs_store *s) { return kvs_chunk_unpins() + atomic_load(&s->lru_adds); }

/* Whether the last walk found nothing to evict and nothing has happened
 * since that could change it. The memo first, then the counts (seq_cst),
 * so that no count read can be older than the memo it is compared with. */
static int eviction_stuck(kvs_store *s) {
    const uint64_t stuck = atomic_load(&s->evict_stuck);
    return stuck && stuck == evictable_events(s) + 1;
}

size_t kvs_store_evict_locked(kvs_store *s, size_t target) {
    size_t n = 0;
    kvs_chunk *v;
    if (GET(s->bytes) <= target || eviction_stuck(s)) return 0;
    const uint64_t seen = evictable_events(s);
    ADD(s->evict_walks, 1);
    while (GET(s->bytes) > target && (v = take_oldest_unpinned(s, KVS_LRU_RESIDENT))) {
        if (v->tier >= 0) {
            pthread_mutex_lock(&s->load_mu);
            free(v->kv);
            v->kv = NULL;
            pthread_mutex_unlock(&s->load_mu);
            SUB(s->bytes, kvs_store_counted(v));
            ADD(s->tier_meta_bytes, kvs_store_meta_bytes(v));
            SUB(s->resident, 1);
            kvs_store_lru_front(s, v); /* the newest stub */
        } else {
            kvs_store_index_remove(s, v);
        }
        ADD(s->evictions, 1);
        n++;
    }
    /* over the target still: every resident chunk was pinned */
    atomic_store(&s->evict_stuck, GET(s->bytes) > target ? seen + 1 : 0);
    if (n) kvs_store_trim_stubs_locked(s, s->stub_budget);
    return n;
}

void kvs_store_enforce_budget(kvs_store *s) {
    /* (stuck: no write lock either, which every lookup would have waited on) */
    if (GET(s->bytes) <= s->budget || eviction_stuck(s)) return;
    pthread_rwlock_wrlock(&s->lock);
    kvs_store_evict_locked(s, s->budget);
    pthread_rwlock_unlock(&s->lock);
}

size_t kvs_store_trim(kvs_store *s, size_t target) {
    pthread_rwlock_wrlock(&s->lock);
    size_t n = kvs_store_evict_locked(s, target);
    pthread_rwlock_unlock(&s->lock);
    return n;
}
