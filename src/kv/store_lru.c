/*
 * The store's LRU list and eviction (store_impl.h). Resident chunks form one
 * list, most recent first; when the bytes they count exceed the budget the
 * least recently used chunks that nobody pins go: a chunk a tier holds only
 * drops its payload (it stays indexed and is fetched again on the next hit),
 * a memory-only chunk leaves every index.
 */
#include "kv/store_impl.h"

#include <stdlib.h>
#include <time.h>

uint64_t kvs_store_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void unlink_locked(kvs_store *s, kvs_chunk *c) {
    if (!(c->store_flags & SF_IN_LRU)) return;
    if (c->lru_prev) c->lru_prev->lru_next = c->lru_next;
    else s->lru_head = c->lru_next;
    if (c->lru_next) c->lru_next->lru_prev = c->lru_prev;
    else s->lru_tail = c->lru_prev;
    c->lru_prev = c->lru_next = NULL;
    c->store_flags &= ~SF_IN_LRU;
}

static void front_locked(kvs_store *s, kvs_chunk *c) {
    unlink_locked(s, c);
    c->lru_next = s->lru_head;
    if (s->lru_head) s->lru_head->lru_prev = c;
    s->lru_head = c;
    if (!s->lru_tail) s->lru_tail = c;
    c->store_flags |= SF_IN_LRU;
}

void kvs_store_lru_front(kvs_store *s, kvs_chunk *c) {
    pthread_mutex_lock(&s->lru_mu);
    front_locked(s, c);
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
    if (c->store_flags & SF_IN_LRU) front_locked(s, c);
    pthread_mutex_unlock(&s->lru_mu);
}

size_t kvs_store_evict_locked(kvs_store *s, size_t target) {
    size_t n = 0;
    while (GET(s->bytes) > target) {
        pthread_mutex_lock(&s->lru_mu);
        kvs_chunk *v = s->lru_tail;
        /* refs == 1: only the store holds it. No pin can appear meanwhile:
         * pins are taken under the read lock, which we exclude. */
        while (v && atomic_load(&v->refs) > 1) v = v->lru_prev;
        if (v) unlink_locked(s, v);
        pthread_mutex_unlock(&s->lru_mu);
        if (!v) break;
        if (v->tier >= 0) {
            pthread_mutex_lock(&s->load_mu);
            free(v->kv);
            v->kv = NULL;
            pthread_mutex_unlock(&s->load_mu);
            SUB(s->bytes, kvs_store_counted(v));
            ADD(s->tier_meta_bytes, kvs_store_meta_bytes(v));
            SUB(s->resident, 1);
        } else {
            kvs_store_index_remove(s, v);
        }
        ADD(s->evictions, 1);
        n++;
    }
    return n;
}

void kvs_store_enforce_budget(kvs_store *s) {
    if (GET(s->bytes) <= s->budget) return;
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
