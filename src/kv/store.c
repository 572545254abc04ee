#include "kv/store.h"

#include "base/error.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "kv/radix.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* store_flags bits. SF_INDEXED changes under the write lock, SF_IN_LRU under
 * lru_mu. */
#define SF_INDEXED 1u
#define SF_IN_LRU 2u

/* Intrusive chained hash map over chunks, keyed by one of their keys. */
typedef struct cmap {
    kvs_chunk **b; /* (nb) bucket heads */
    size_t nb, n;
    int content;   /* 0: prefix_key / hnext_prefix, 1: content_key / hnext_content */
} cmap;

struct kvs_store {
    kvs_key fp;
    kvs_kv_shape shape;
    size_t budget;
    char *dir;              /* NULL: memory only */
    int fsync;

    pthread_rwlock_t lock;  /* indexes (maps, radix), SF_INDEXED, eviction */
    pthread_mutex_t lru_mu; /* LRU links, SF_IN_LRU */
    pthread_mutex_t load_mu;/* kv payload transitions of indexed chunks under the read lock */

    kvs_chunk *lru_head, *lru_tail; /* most recent first */
    cmap pmap, cmap_content;
    kvs_radix *radix;

    _Atomic uint64_t entries, resident, bytes, disk_meta_bytes;
    _Atomic uint64_t lookups, hits, misses, hit_tokens, lookup_tokens, lookup_ns;
    _Atomic uint64_t inserts, insert_exists, insert_too_big, evictions;
    _Atomic uint64_t disk_writes, disk_write_errors, disk_loads, disk_load_bytes, disk_load_ns;
    _Atomic uint64_t disk_bad, disk_foreign, disk_missing, disk_orphans;
    kvs_disk_counts last_scan; /* under the write lock */
};

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define ADD(field, v) atomic_fetch_add_explicit(&(field), (uint64_t)(v), memory_order_relaxed)
#define SUB(field, v) atomic_fetch_sub_explicit(&(field), (uint64_t)(v), memory_order_relaxed)
#define GET(field) atomic_load_explicit(&(field), memory_order_relaxed)

/* The budget counts resident chunks whole (struct, token ids, payload). A
 * disk-only chunk's struct and tokens count as index memory instead: the
 * budget could not be met by evicting them (their payload is gone already). */
static size_t meta_bytes(const kvs_chunk *c) { return sizeof *c + (size_t)c->n_tok * sizeof(int32_t); }
static size_t counted(const kvs_chunk *c) { return meta_bytes(c) + c->kv_bytes; }

/* --- hash maps ----------------------------------------------------------------- */

static const kvs_key *map_key(const cmap *m, const kvs_chunk *c) {
    return m->content ? &c->content_key : &c->prefix_key;
}
static kvs_chunk **map_next(const cmap *m, kvs_chunk *c) {
    return m->content ? &c->hnext_content : &c->hnext_prefix;
}

static int map_init(cmap *m, int content) {
    m->nb = 64;
    m->n = 0;
    m->content = content;
    m->b = calloc(m->nb, sizeof *m->b);
    return m->b ? 0 : -1;
}

static kvs_chunk *map_find(const cmap *m, const kvs_key *k) {
    kvs_chunk *c = m->b[kvs_key_hash(k) & (m->nb - 1)];
    while (c && !kvs_key_equal(map_key(m, c), k)) c = *map_next(m, c);
    return c;
}

/* Doubles the table when full; if that allocation fails the chains just get
 * longer, so adding never fails. */
static void map_add(cmap *m, kvs_chunk *c) {
    if (m->n >= m->nb) {
        size_t nb = m->nb * 2;
        kvs_chunk **b = calloc(nb, sizeof *b);
        if (b) {
            for (size_t i = 0; i < m->nb; i++) {
                kvs_chunk *x = m->b[i];
                while (x) {
                    kvs_chunk *next = *map_next(m, x);
                    size_t j = kvs_key_hash(map_key(m, x)) & (nb - 1);
                    *map_next(m, x) = b[j];
                    b[j] = x;
                    x = next;
                }
            }
            free(m->b);
            m->b = b;
            m->nb = nb;
        }
    }
    size_t j = kvs_key_hash(map_key(m, c)) & (m->nb - 1);
    *map_next(m, c) = m->b[j]; /* at the head: the newest is found first */
    m->b[j] = c;
    m->n++;
}

static void map_del(cmap *m, kvs_chunk *c) {
    kvs_chunk **pp = &m->b[kvs_key_hash(map_key(m, c)) & (m->nb - 1)];
    while (*pp && *pp != c) pp = map_next(m, *pp);
    if (*pp) {
        *pp = *map_next(m, c);
        *map_next(m, c) = NULL;
        m->n--;
    }
}

/* --- LRU ------------------------------------------------------------------------ */

static void lru_unlink_locked(kvs_store *s, kvs_chunk *c) {
    if (!(c->store_flags & SF_IN_LRU)) return;
    if (c->lru_prev) c->lru_prev->lru_next = c->lru_next;
    else s->lru_head = c->lru_next;
    if (c->lru_next) c->lru_next->lru_prev = c->lru_prev;
    else s->lru_tail = c->lru_prev;
    c->lru_prev = c->lru_next = NULL;
    c->store_flags &= ~SF_IN_LRU;
}

static void lru_front_locked(kvs_store *s, kvs_chunk *c) {
    lru_unlink_locked(s, c);
    c->lru_next = s->lru_head;
    if (s->lru_head) s->lru_head->lru_prev = c;
    s->lru_head = c;
    if (!s->lru_tail) s->lru_tail = c;
    c->store_flags |= SF_IN_LRU;
}

/* Marks a use: most recent in the LRU (if resident and indexed), bookkeeping. */
static void touch(kvs_store *s, kvs_chunk *c) {
    atomic_store_explicit(&c->last_access_ns, kvs_now_ns(), memory_order_relaxed);
    atomic_fetch_add_explicit(&c->n_access, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->lru_mu);
    if (c->store_flags & SF_IN_LRU) lru_front_locked(s, c);
    pthread_mutex_unlock(&s->lru_mu);
}

/* --- index ------------------------------------------------------------------------ */

/* Adds c to the maps and the LRU (write lock held; the store's reference is
 * taken here). */
static void index_add(kvs_store *s, kvs_chunk *c) {
    kvs_chunk_ref(c);
    map_add(&s->pmap, c);
    map_add(&s->cmap_content, c);
    c->store_flags |= SF_INDEXED;
    ADD(s->entries, 1);
    if (!c->kv) ADD(s->disk_meta_bytes, meta_bytes(c));
    if (c->kv) {
        ADD(s->bytes, counted(c));
        ADD(s->resident, 1);
        pthread_mutex_lock(&s->lru_mu);
        lru_front_locked(s, c);
        pthread_mutex_unlock(&s->lru_mu);
    }
}

/* Removes c from every index (write lock held) and drops the store's
 * reference. */
static void index_remove(kvs_store *s, kvs_chunk *c) {
    if (!(c->store_flags & SF_INDEXED)) return;
    map_del(&s->pmap, c);
    map_del(&s->cmap_content, c);
    if (c->radix_node) {
        kvs_radix_remove_at(s->radix, c->radix_node, c);
        c->radix_node = NULL;
    }
    pthread_mutex_lock(&s->lru_mu);
    lru_unlink_locked(s, c);
    pthread_mutex_unlock(&s->lru_mu);
    c->store_flags &= ~SF_INDEXED;
    SUB(s->entries, 1);
    if (c->kv) {
        SUB(s->bytes, counted(c));
        SUB(s->resident, 1);
    } else {
        SUB(s->disk_meta_bytes, meta_bytes(c));
    }
    kvs_chunk_unref(c);
}

/* Evicts LRU unpinned chunks until bytes <= target (write lock held). */
static size_t evict_locked(kvs_store *s, size_t target) {
    size_t n = 0;
    while (GET(s->bytes) > target) {
        pthread_mutex_lock(&s->lru_mu);
        kvs_chunk *v = s->lru_tail;
        /* refs == 1: only the store holds it. No pin can appear meanwhile:
         * pins are taken under the read lock, which we exclude. */
        while (v && atomic_load(&v->refs) > 1) v = v->lru_prev;
        if (v) lru_unlink_locked(s, v);
        pthread_mutex_unlock(&s->lru_mu);
        if (!v) break;
        if (v->on_disk) {
            pthread_mutex_lock(&s->load_mu);
            free(v->kv);
            v->kv = NULL;
            pthread_mutex_unlock(&s->load_mu);
            SUB(s->bytes, counted(v));
            ADD(s->disk_meta_bytes, meta_bytes(v));
            SUB(s->resident, 1);
        } else {
            index_remove(s, v);
        }
        ADD(s->evictions, 1);
        n++;
    }
    return n;
}

/* Makes a pinned, indexed chunk resident (read or write lock held).
 * *entry_bad = 1 when the failure is the entry's (damaged or vanished), as
 * opposed to a read error or lack of memory. */
static int ensure_resident(kvs_store *s, kvs_chunk *c, int *entry_bad) {
    int rc = KVS_OK;
    *entry_bad = 0;
    pthread_mutex_lock(&s->load_mu);
    if (!c->kv) {
        if (!s->dir || !c->on_disk) {
            rc = kvs_error(KVS_ERR_INTERNAL, "store: chunk at pos %d has neither payload nor file", c->pos0);
        } else {
            uint64_t t0 = mono_ns();
            void *buf;
            kvs_disk_verdict v;
            rc = kvs_disk_load_payload(s->dir, &s->fp, c, &buf, &v);
            if (rc == KVS_OK) {
                c->kv = buf;
                ADD(s->bytes, counted(c));
                SUB(s->disk_meta_bytes, meta_bytes(c));
                ADD(s->resident, 1);
                ADD(s->disk_loads, 1);
                ADD(s->disk_load_bytes, c->kv_bytes);
                ADD(s->disk_load_ns, mono_ns() - t0);
                pthread_mutex_lock(&s->lru_mu);
                if (c->store_flags & SF_INDEXED) lru_front_locked(s, c);
                pthread_mutex_unlock(&s->lru_mu);
            } else if (v == KVS_DISK_MISSING) {
                ADD(s->disk_missing, 1);
                *entry_bad = 1;
            } else if (v != KVS_DISK_IO) {
                ADD(s->disk_bad, 1);
                *entry_bad = 1;
            }
        }
    }
    pthread_mutex_unlock(&s->load_mu);
    return rc;
}

/* Drops chunks whose entries failed to load: out of the index, file removed
 * so no process tries it again. Takes the write lock; unrefs the pins. */
static void drop_damaged(kvs_store *s, kvs_chunk **bad, int n) {
    if (!n) return;
    pthread_rwlock_wrlock(&s->lock);
    for (int i = 0; i < n; i++) {
        kvs_chunk *c = bad[i];
        if (c->store_flags & SF_INDEXED) {
            if (s->dir && c->on_disk) kvs_disk_remove(s->dir, &c->prefix_key);
            c->on_disk = 0;
            index_remove(s, c);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    for (int i = 0; i < n; i++) kvs_chunk_unref(bad[i]);
}

/* Over budget after loads: evict under the write lock. */
static void enforce_budget(kvs_store *s) {
    if (GET(s->bytes) <= s->budget) return;
    pthread_rwlock_wrlock(&s->lock);
    evict_locked(s, s->budget);
    pthread_rwlock_unlock(&s->lock);
}

/* --- radix paths of disk entries ------------------------------------------------ */

/* Puts every indexed chunk that is not prefix-reachable, and whose parent
 * chain resolves to the fingerprint, into the radix tree (write lock held).
 * The path of a chunk is its ancestors' tokens followed by its own. */
static void attach_paths(kvs_store *s) {
    int32_t *path = NULL;
    size_t cap = 0;
    uint64_t orphans = 0;
    for (size_t i = 0; i < s->pmap.nb; i++) {
        for (kvs_chunk *c = s->pmap.b[i]; c; c = c->hnext_prefix) {
            if (c->radix_node) continue;
            /* walk up: every link must join exactly (parent ends at pos0) */
            int ok = 1;
            const kvs_chunk *x = c;
            while (ok && x->pos0 > 0) {
                const kvs_chunk *p = map_find(&s->pmap, &x->parent_key);
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
            for (x = c;; x = map_find(&s->pmap, &x->parent_key)) {
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
    atomic_store(&s->disk_orphans, orphans);
}

/* --- open / free ------------------------------------------------------------------ */

kvs_store_params kvs_store_default_params(void) {
    kvs_store_params p = {0, NULL, 0};
    return p;
}

size_t kvs_store_default_budget(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return (size_t)1 << 30;
    return (size_t)pages * (size_t)page / 4;
}

int kvs_store_open(const kvs_key *fp, const kvs_kv_shape *shape, kvs_store_params params, kvs_store **out) {
    int rc = kvs_kv_shape_check(shape);
    if (rc) return rc;
    kvs_store *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_NOMEM, "store: out of memory");
    s->fp = *fp;
    s->shape = *shape;
    s->budget = params.budget_bytes ? params.budget_bytes : kvs_store_default_budget();
    s->fsync = params.fsync;
    /* Writer-preferring: a steady stream of lookups must not starve inserts.
     * (No code path takes the read lock recursively, which this forbids.) */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&s->lru_mu, NULL);
    pthread_mutex_init(&s->load_mu, NULL);
    if (map_init(&s->pmap, 0) || map_init(&s->cmap_content, 1) || kvs_radix_new(&s->radix)) {
        kvs_store_free(s);
        return kvs_error(KVS_ERR_NOMEM, "store: out of memory");
    }
    if (params.cache_dir && *params.cache_dir) {
        s->dir = strdup(params.cache_dir);
        if (!s->dir) {
            kvs_store_free(s);
            return kvs_error(KVS_ERR_NOMEM, "store: out of memory");
        }
        rc = kvs_disk_init_dir(s->dir);
        if (!rc) rc = kvs_store_sync_disk(s, NULL);
        if (rc) {
            kvs_store_free(s);
            return rc;
        }
    }
    *out = s;
    return KVS_OK;
}

void kvs_store_free(kvs_store *s) {
    if (!s) return;
    if (s->pmap.b) {
        for (size_t i = 0; i < s->pmap.nb; i++) {
            kvs_chunk *c = s->pmap.b[i];
            while (c) {
                kvs_chunk *next = c->hnext_prefix;
                c->hnext_prefix = c->hnext_content = NULL;
                c->lru_prev = c->lru_next = NULL;
                c->radix_node = NULL;
                c->store_flags = 0;
                kvs_chunk_unref(c);
                c = next;
            }
        }
    }
    free(s->pmap.b);
    free(s->cmap_content.b);
    kvs_radix_free(s->radix);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->lru_mu);
    pthread_mutex_destroy(&s->load_mu);
    free(s->dir);
    free(s);
}

const kvs_key *kvs_store_fingerprint(const kvs_store *s) { return &s->fp; }
const kvs_kv_shape *kvs_store_shape(const kvs_store *s) { return &s->shape; }

/* --- insert ------------------------------------------------------------------------ */

int kvs_store_contains(kvs_store *s, const kvs_key *prefix_key) {
    pthread_rwlock_rdlock(&s->lock);
    int found = map_find(&s->pmap, prefix_key) != NULL;
    pthread_rwlock_unlock(&s->lock);
    return found;
}

int kvs_store_insert(kvs_store *s, kvs_chunk *c, const int32_t *path) {
    if (!kvs_kv_shape_equal(&c->shape, &s->shape))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk shape differs from the store's");
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk at pos %d has no payload", c->pos0);
    if (c->store_flags & SF_INDEXED) return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk is in a store already");
    if (c->pos0 == 0 && !kvs_key_equal(&c->parent_key, &s->fp))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk at position 0 must have the fingerprint as parent key");
    if (path && memcmp(path + c->pos0, c->tokens, (size_t)c->n_tok * sizeof(int32_t)))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: path tokens [%d, %d) differ from the chunk's", c->pos0,
                         c->pos0 + c->n_tok);
    if (counted(c) > s->budget) {
        ADD(s->insert_too_big, 1);
        return KVS_STORE_TOO_BIG;
    }
    /* Write-through, outside the lock: the file is complete before anyone can
     * find the chunk, and other threads keep working meanwhile. */
    int wrote = 0;
    if (s->dir && !kvs_store_contains(s, &c->prefix_key)) {
        if (kvs_disk_write(s->dir, &s->fp, c, s->fsync) == KVS_OK) {
            wrote = 1;
            ADD(s->disk_writes, 1);
        } else {
            ADD(s->disk_write_errors, 1);
        }
    }
    pthread_rwlock_wrlock(&s->lock);
    kvs_chunk *old = map_find(&s->pmap, &c->prefix_key);
    if (old) {
        touch(s, old);
        pthread_rwlock_unlock(&s->lock);
        ADD(s->insert_exists, 1);
        return KVS_STORE_EXISTS;
    }
    if (path) {
        kvs_radix_node *node;
        int rc = kvs_radix_insert(s->radix, path, c->pos0 + c->n_tok, c->pos0, c, &node);
        if (rc < 0) {
            pthread_rwlock_unlock(&s->lock);
            return rc;
        }
        c->radix_node = node;
    }
    c->on_disk = wrote;
    index_add(s, c);
    ADD(s->inserts, 1);
    evict_locked(s, s->budget);
    pthread_rwlock_unlock(&s->lock);
    return KVS_OK;
}

int kvs_store_insert_chain(kvs_store *s, kvs_chunk *const *chunks, int n, const int32_t *path, int *n_new) {
    int added = 0, rc = KVS_OK;
    for (int i = n - 1; i >= 0; i--) {
        int r = kvs_store_insert(s, chunks[i], path);
        if (r == KVS_OK) added++;
        else if (r < 0 && rc == KVS_OK) rc = r;
    }
    if (n_new) *n_new = added;
    return rc;
}

/* Touches the chunk with this prefix key; 0 if there is none. */
static int touch_key(kvs_store *s, const kvs_key *k) {
    pthread_rwlock_rdlock(&s->lock);
    kvs_chunk *c = map_find(&s->pmap, k);
    if (c) touch(s, c);
    pthread_rwlock_unlock(&s->lock);
    return c != NULL;
}

int kvs_store_put_prefix(kvs_store *s, const int32_t *tokens, int n, int chunk_tokens, const int *borders,
                         int n_borders, const kvs_kv_view *view, kvs_put_report *rep) {
    kvs_put_report r;
    memset(&r, 0, sizeof r);
    r.n_tokens = n;
    r.chunk_tokens = chunk_tokens > 0 ? chunk_tokens : KVS_CHUNK_TOKENS_DEFAULT;
    if (rep) *rep = r;
    if (n < 0 || (n && !tokens) || !view || !kvs_kv_shape_equal(&view->shape, &s->shape) || n > view->n_ctx)
        return kvs_error(KVS_ERR_INVALID_ARG, "store put: %d tokens, KV buffer of %d slots or another shape", n,
                         view ? view->n_ctx : 0);
    if (n == 0) return KVS_OK;
    int cap = kvs_chunking_max_spans(n, r.chunk_tokens, n_borders), n_spans;
    kvs_span *spans = malloc((size_t)cap * sizeof *spans);
    kvs_key *keys = malloc((size_t)cap * sizeof *keys);
    int rc = spans && keys ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "store put: out of memory");
    if (!rc) rc = kvs_chunking_split(n, 0, r.chunk_tokens, borders, n_borders, spans, cap, &n_spans);
    if (!rc) rc = kvs_key_prefix_chain(&s->fp, tokens, spans, n_spans, keys);
    if (!rc) {
        r.n_chunks = n_spans;
        if (spans[n_spans - 1].flags & KVS_SPAN_PARTIAL) r.partial_tail = spans[n_spans - 1].end - spans[n_spans - 1].start;
        /* Last to first, like kvs_store_insert_chain: the head of the
         * sequence ends up most recently used. */
        for (int i = n_spans - 1; i >= 0 && !rc; i--) {
            if (touch_key(s, &keys[i])) {
                r.n_existing++;
                continue;
            }
            const kvs_span *sp = &spans[i];
            kvs_chunk *c;
            rc = kvs_chunk_new(&s->shape, sp->end - sp->start, 1, &c);
            if (rc) break;
            c->prefix_key = keys[i];
            c->parent_key = i ? keys[i - 1] : s->fp;
            kvs_key_content(&s->fp, tokens + sp->start, sp->end - sp->start, &c->content_key);
            c->pos0 = sp->start;
            memcpy(c->tokens, tokens + sp->start, (size_t)c->n_tok * sizeof(int32_t));
            rc = kvs_chunk_copy_from_kv(c, 0, c->n_tok, view, sp->start);
            int ins = rc ? rc : kvs_store_insert(s, c, tokens);
            kvs_chunk_unref(c);
            if (ins == KVS_OK) r.n_new++;
            else if (ins == KVS_STORE_EXISTS) r.n_existing++;
            else r.n_skipped++;
            if (ins < 0) rc = ins;
        }
    }
    free(spans);
    free(keys);
    if (rep) *rep = r;
    return rc;
}

/* --- lookup ------------------------------------------------------------------------- */

int kvs_store_lookup_prefix(kvs_store *s, const int32_t *tokens, int n, kvs_prefix_hit *hit) {
    uint64_t t0 = mono_ns();
    memset(hit, 0, sizeof *hit);
    hit->n_tokens = n;
    if (n < 0 || (n && !tokens)) return kvs_error(KVS_ERR_INVALID_ARG, "store lookup: %d tokens", n);
    kvs_radix_seg local[64], *segs = local;
    kvs_radix_match m;
    kvs_chunk **bad = NULL;
    int n_bad = 0, rc;

    pthread_rwlock_rdlock(&s->lock);
    rc = kvs_radix_lookup(s->radix, tokens, n, segs, 64, &m);
    if (rc == KVS_ERR_BUFFER_TOO_SMALL) {
        segs = malloc((size_t)m.n_segs * sizeof *segs);
        rc = segs ? kvs_radix_lookup(s->radix, tokens, n, segs, m.n_segs, &m)
                  : kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    if (rc == KVS_OK && m.n_segs) {
        hit->segs = malloc((size_t)m.n_segs * sizeof *hit->segs);
        if (!hit->segs) rc = kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    if (rc == KVS_OK) {
        hit->n_matched = m.n_matched;
        for (int i = 0; i < m.n_segs; i++) {
            kvs_chunk *c = segs[i].item;
            hit->segs[i] = (kvs_hit_seg){kvs_chunk_ref(c), segs[i].from, segs[i].to};
        }
        hit->n_segs = m.n_segs;
        hit->n_cached = m.n_covered;
        /* Disk-backed payloads are loaded here, still under the read lock so
         * no writer changes the index meanwhile. The hit ends before the
         * first entry that fails. */
        for (int i = 0; i < hit->n_segs; i++) {
            int entry_bad;
            if (ensure_resident(s, hit->segs[i].chunk, &entry_bad) == KVS_OK) continue;
            bad = entry_bad ? malloc(sizeof *bad) : NULL;
            if (bad) bad[n_bad++] = hit->segs[i].chunk;
            else kvs_chunk_unref(hit->segs[i].chunk);
            for (int j = i + 1; j < hit->n_segs; j++) kvs_chunk_unref(hit->segs[j].chunk);
            hit->n_cached = hit->segs[i].from;
            hit->n_segs = i;
            break;
        }
        /* Last to first: the head of the chain ends up most recently used,
         * so eviction takes tails first and never cuts a chain short. */
        for (int i = hit->n_segs - 1; i >= 0; i--) touch(s, hit->segs[i].chunk);
    }
    pthread_rwlock_unlock(&s->lock);
    if (segs != local) free(segs);
    drop_damaged(s, bad, n_bad);
    free(bad);
    if (rc) {
        kvs_prefix_hit_release(hit);
        hit->n_tokens = n;
        return rc;
    }
    enforce_budget(s);
    ADD(s->lookups, 1);
    ADD(s->lookup_tokens, n);
    if (hit->n_cached > 0) {
        ADD(s->hits, 1);
        ADD(s->hit_tokens, hit->n_cached);
    } else {
        ADD(s->misses, 1);
    }
    ADD(s->lookup_ns, mono_ns() - t0);
    return KVS_OK;
}

int kvs_store_lookup_into(kvs_store *s, const int32_t *tokens, int n, const kvs_kv_view *view,
                          kvs_prefix_hit *hit) {
    uint64_t t0 = mono_ns();
    memset(hit, 0, sizeof *hit);
    hit->n_tokens = n;
    if (n < 0 || (n && !tokens) || !view || !kvs_kv_shape_equal(&view->shape, &s->shape) || view->n_ctx < n)
        return kvs_error(KVS_ERR_INVALID_ARG, "store lookup: %d tokens into a KV buffer of %d slots or another shape",
                         n, view ? view->n_ctx : 0);
    kvs_radix_seg local[64], *segs = local;
    char res_local[64], *resident = res_local;
    kvs_radix_match m;
    int rc;

    pthread_rwlock_rdlock(&s->lock);
    rc = kvs_radix_lookup(s->radix, tokens, n, segs, 64, &m);
    if (rc == KVS_ERR_BUFFER_TOO_SMALL) {
        segs = malloc((size_t)m.n_segs * sizeof *segs);
        rc = segs ? kvs_radix_lookup(s->radix, tokens, n, segs, m.n_segs, &m)
                  : kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    if (rc == KVS_OK && m.n_segs) {
        hit->segs = malloc((size_t)m.n_segs * sizeof *hit->segs);
        if (m.n_segs > 64) resident = malloc((size_t)m.n_segs);
        if (!hit->segs || !resident) rc = kvs_error(KVS_ERR_NOMEM, "store lookup: out of memory");
    }
    if (rc == KVS_OK) {
        hit->n_matched = m.n_matched;
        for (int i = 0; i < m.n_segs; i++) {
            kvs_chunk *c = segs[i].item;
            hit->segs[i] = (kvs_hit_seg){kvs_chunk_ref(c), segs[i].from, segs[i].to};
            pthread_mutex_lock(&s->load_mu);
            resident[i] = c->kv != NULL; /* a pinned payload stays */
            pthread_mutex_unlock(&s->load_mu);
        }
        hit->n_segs = m.n_segs;
        hit->n_cached = m.n_covered;
        for (int i = hit->n_segs - 1; i >= 0; i--) touch(s, hit->segs[i].chunk);
    }
    pthread_rwlock_unlock(&s->lock);
    if (segs != local) free(segs);
    if (rc) {
        if (resident != res_local) free(resident);
        kvs_prefix_hit_release(hit);
        hit->n_tokens = n;
        return rc;
    }
    /* Copies and disk reads run outside the lock: the chunks are pinned. */
    kvs_chunk *bad = NULL;
    kvs_disk_verdict v_last = KVS_DISK_IO;
    for (int i = 0; i < hit->n_segs; i++) {
        kvs_hit_seg *g = &hit->segs[i];
        kvs_chunk *c = g->chunk;
        int off = g->from - c->pos0, cnt = g->to - g->from;
        if (resident[i]) {
            rc = kvs_chunk_copy_to_kv(c, off, cnt, view, g->from);
        } else {
            uint64_t t1 = mono_ns();
            kvs_disk_verdict v = KVS_DISK_IO;
            rc = s->dir ? kvs_disk_read_into_kv(s->dir, &s->fp, c, off, cnt, view, g->from, &v)
                        : kvs_error(KVS_ERR_INTERNAL, "store: chunk at pos %d has no payload", c->pos0);
            v_last = v;
            if (rc == KVS_OK) {
                ADD(s->disk_loads, 1);
                ADD(s->disk_load_bytes, c->kv_bytes);
                ADD(s->disk_load_ns, mono_ns() - t1);
            } else if (s->dir && v == KVS_DISK_MISSING) {
                ADD(s->disk_missing, 1);
            } else if (s->dir && v != KVS_DISK_IO) {
                ADD(s->disk_bad, 1);
            }
        }
        if (rc == KVS_OK) continue;
        /* The hit ends before this chunk; a damaged or vanished entry is
         * dropped from the index (a read error or lack of memory is not the
         * entry's fault: it stays). */
        if (!resident[i] && s->dir && v_last != KVS_DISK_IO) bad = c;
        else kvs_chunk_unref(c);
        for (int j = i + 1; j < hit->n_segs; j++) kvs_chunk_unref(hit->segs[j].chunk);
        hit->n_cached = g->from;
        hit->n_segs = i;
        rc = KVS_OK;
        break;
    }
    if (resident != res_local) free(resident);
    if (bad) drop_damaged(s, &bad, 1);
    ADD(s->lookups, 1);
    ADD(s->lookup_tokens, n);
    if (hit->n_cached > 0) {
        ADD(s->hits, 1);
        ADD(s->hit_tokens, hit->n_cached);
    } else {
        ADD(s->misses, 1);
    }
    ADD(s->lookup_ns, mono_ns() - t0);
    return KVS_OK;
}

void kvs_prefix_hit_release(kvs_prefix_hit *hit) {
    if (!hit) return;
    for (int i = 0; i < hit->n_segs; i++) kvs_chunk_unref(hit->segs[i].chunk);
    free(hit->segs);
    memset(hit, 0, sizeof *hit);
}

int kvs_prefix_hit_copy_to_kv(const kvs_prefix_hit *hit, const kvs_kv_view *view) {
    for (int i = 0; i < hit->n_segs; i++) {
        const kvs_hit_seg *g = &hit->segs[i];
        int rc = kvs_chunk_copy_to_kv(g->chunk, g->from - g->chunk->pos0, g->to - g->from, view, g->from);
        if (rc) return rc;
    }
    return KVS_OK;
}

/* Shared by the two key lookups: find under the read lock, pin, load. */
static int lookup_key(kvs_store *s, const kvs_key *k, int content, kvs_chunk **out) {
    uint64_t t0 = mono_ns();
    pthread_rwlock_rdlock(&s->lock);
    kvs_chunk *c = map_find(content ? &s->cmap_content : &s->pmap, k);
    int rc = KVS_OK, entry_bad = 0;
    if (c) {
        kvs_chunk_ref(c);
        rc = ensure_resident(s, c, &entry_bad);
        if (rc == KVS_OK) touch(s, c);
    }
    pthread_rwlock_unlock(&s->lock);
    if (c && rc) {
        if (entry_bad) drop_damaged(s, &c, 1);
        else kvs_chunk_unref(c);
        c = NULL;
    }
    if (content) {
        ADD(s->lookups, 1);
        if (c) ADD(s->hits, 1);
        else ADD(s->misses, 1);
        ADD(s->lookup_ns, mono_ns() - t0);
    }
    if (!c) {
        char hex[65];
        kvs_key_to_hex(k, hex);
        return kvs_error(KVS_ERR_NOT_FOUND, "store: no usable chunk with %s key %s", content ? "content" : "prefix",
                         hex);
    }
    enforce_budget(s);
    *out = c;
    return KVS_OK;
}

int kvs_store_lookup_content(kvs_store *s, const kvs_key *content_key, kvs_chunk **out) {
    return lookup_key(s, content_key, 1, out);
}

int kvs_store_get(kvs_store *s, const kvs_key *prefix_key, kvs_chunk **out) {
    return lookup_key(s, prefix_key, 0, out);
}

/* --- maintenance ------------------------------------------------------------------- */

int kvs_store_remove(kvs_store *s, const kvs_key *prefix_key, int and_disk) {
    pthread_rwlock_wrlock(&s->lock);
    kvs_chunk *c = map_find(&s->pmap, prefix_key);
    if (c) {
        if (and_disk && s->dir && c->on_disk) kvs_disk_remove(s->dir, prefix_key);
        index_remove(s, c);
    }
    pthread_rwlock_unlock(&s->lock);
    if (!c) {
        char hex[65];
        kvs_key_to_hex(prefix_key, hex);
        return kvs_error(KVS_ERR_NOT_FOUND, "store: no chunk with prefix key %s", hex);
    }
    return KVS_OK;
}

int kvs_store_clear(kvs_store *s, int and_disk) {
    int rc = KVS_OK;
    pthread_rwlock_wrlock(&s->lock);
    for (size_t i = 0; i < s->pmap.nb; i++)
        while (s->pmap.b[i]) index_remove(s, s->pmap.b[i]);
    if (and_disk && s->dir) rc = kvs_disk_clear(s->dir, NULL);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

size_t kvs_store_trim(kvs_store *s, size_t target) {
    pthread_rwlock_wrlock(&s->lock);
    size_t n = evict_locked(s, target);
    pthread_rwlock_unlock(&s->lock);
    return n;
}

typedef struct scan_ctx {
    kvs_store *s;
    kvs_chunk **got;
    size_t n, cap;
    int nomem;
} scan_ctx;

static int scan_known(void *user, const kvs_key *k) {
    scan_ctx *x = user;
    return kvs_store_contains(x->s, k);
}

static int scan_add(void *user, kvs_chunk *c) {
    scan_ctx *x = user;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        kvs_chunk **g = realloc(x->got, cap * sizeof *g);
        if (!g) {
            kvs_chunk_unref(c);
            x->nomem = 1;
            return 1;
        }
        x->got = g;
        x->cap = cap;
    }
    x->got[x->n++] = c;
    return 0;
}

int kvs_store_sync_disk(kvs_store *s, int *n_new) {
    if (n_new) *n_new = 0;
    if (!s->dir) return KVS_OK;
    /* Headers are read without the lock (I/O), then indexed under it. */
    scan_ctx x = {s, NULL, 0, 0, 0};
    kvs_disk_counts counts;
    int rc = kvs_disk_scan(s->dir, &s->fp, &s->shape, scan_known, scan_add, &x, &counts);
    int added = 0;
    pthread_rwlock_wrlock(&s->lock);
    for (size_t i = 0; i < x.n; i++) {
        kvs_chunk *c = x.got[i];
        if (!map_find(&s->pmap, &c->prefix_key)) {
            index_add(s, c);
            added++;
        }
        kvs_chunk_unref(c); /* the scan's reference; index_add took the store's */
    }
    attach_paths(s);
    s->last_scan = counts;
    ADD(s->disk_bad, counts.n[KVS_DISK_BAD_MAGIC] + counts.n[KVS_DISK_BAD_VERSION] + counts.n[KVS_DISK_BAD_HEADER] +
                         counts.n[KVS_DISK_TRUNCATED] + counts.n[KVS_DISK_BAD_PAYLOAD]);
    ADD(s->disk_foreign, counts.n[KVS_DISK_FOREIGN]);
    pthread_rwlock_unlock(&s->lock);
    free(x.got);
    if (n_new) *n_new = added;
    if (rc == KVS_OK && x.nomem) rc = kvs_error(KVS_ERR_NOMEM, "%s: out of memory while indexing", s->dir);
    return rc;
}

/* --- iteration ------------------------------------------------------------------------ */

typedef struct visit_item {
    kvs_chunk *c;
    int resident, reachable;
} visit_item;

int kvs_store_foreach(kvs_store *s, kvs_store_visit_fn fn, void *user) {
    /* Snapshot under the read lock (pinning each chunk), visit outside it, so
     * fn runs without blocking writers and sees chunks that cannot go away. */
    pthread_rwlock_rdlock(&s->lock);
    size_t n = s->pmap.n, k = 0;
    visit_item *items = malloc((n ? n : 1) * sizeof *items);
    if (items) {
        pthread_mutex_lock(&s->load_mu);
        for (size_t i = 0; i < s->pmap.nb; i++)
            for (kvs_chunk *c = s->pmap.b[i]; c && k < n; c = c->hnext_prefix)
                items[k++] = (visit_item){kvs_chunk_ref(c), c->kv != NULL, c->radix_node != NULL};
        pthread_mutex_unlock(&s->load_mu);
    }
    pthread_rwlock_unlock(&s->lock);
    if (!items) return kvs_error(KVS_ERR_NOMEM, "store: out of memory listing %zu chunks", n);
    size_t i = 0;
    for (; i < k; i++) {
        int stop = fn(user, items[i].c, items[i].resident, items[i].reachable);
        kvs_chunk_unref(items[i].c);
        if (stop) {
            i++;
            break;
        }
    }
    for (; i < k; i++) kvs_chunk_unref(items[i].c);
    free(items);
    return KVS_OK;
}

/* --- statistics ---------------------------------------------------------------------- */

void kvs_store_get_stats(kvs_store *s, kvs_store_stats *st) {
    memset(st, 0, sizeof *st);
    pthread_rwlock_rdlock(&s->lock);
    kvs_radix_stats rs;
    kvs_radix_get_stats(s->radix, &rs);
    st->index_bytes = rs.bytes + (s->pmap.nb + s->cmap_content.nb) * sizeof(kvs_chunk *) + GET(s->disk_meta_bytes);
    st->prefix_reachable = rs.n_items;
    st->last_scan = s->last_scan;
    pthread_rwlock_unlock(&s->lock);
    st->entries = GET(s->entries);
    st->resident = GET(s->resident);
    st->bytes = GET(s->bytes);
    st->budget_bytes = s->budget;
    st->lookups = GET(s->lookups);
    st->hits = GET(s->hits);
    st->misses = GET(s->misses);
    st->hit_tokens = GET(s->hit_tokens);
    st->lookup_tokens = GET(s->lookup_tokens);
    st->lookup_seconds = (double)GET(s->lookup_ns) * 1e-9;
    st->lookups_per_s = st->lookup_seconds > 0 ? (double)st->lookups / st->lookup_seconds : 0;
    st->inserts = GET(s->inserts);
    st->insert_exists = GET(s->insert_exists);
    st->insert_too_big = GET(s->insert_too_big);
    st->evictions = GET(s->evictions);
    st->disk_writes = GET(s->disk_writes);
    st->disk_write_errors = GET(s->disk_write_errors);
    st->disk_loads = GET(s->disk_loads);
    st->disk_load_bytes = GET(s->disk_load_bytes);
    st->disk_load_seconds = (double)GET(s->disk_load_ns) * 1e-9;
    st->disk_bad = GET(s->disk_bad);
    st->disk_foreign = GET(s->disk_foreign);
    st->disk_missing = GET(s->disk_missing);
    st->disk_orphans = GET(s->disk_orphans);
}
