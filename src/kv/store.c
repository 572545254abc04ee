/* The store: open/free, tier attach, insert, put_prefix, remove, clear,
 * tier sync, foreach (store.h; the other jobs are in store_*.c). */
#include "kv/store_impl.h"

#include "base/error.h"
#include "kv/chunking.h"
#include "kv/keys.h"
#include "kv/tier_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- open / free ------------------------------------------------------------------ */

kvs_store_params kvs_store_default_params(void) {
    kvs_store_params p;
    memset(&p, 0, sizeof p);
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
    if (params.chunk_tokens < 0)
        return kvs_error(KVS_ERR_INVALID_ARG, "store: chunk_tokens must be >= 0, got %d", params.chunk_tokens);
    kvs_store *s = calloc(1, sizeof *s);
    if (!s) return kvs_error(KVS_ERR_NOMEM, "store: out of memory");
    s->fp = *fp;
    s->shape = *shape;
    s->budget = params.budget_bytes ? params.budget_bytes : kvs_store_default_budget();
    s->chunk_tokens = params.chunk_tokens ? params.chunk_tokens : KVS_CHUNK_TOKENS_DEFAULT;
    s->stub_budget = params.stub_bytes ? params.stub_bytes : kvs_store_default_stub_budget(s->budget);
    /* Writer-preferring: a steady stream of lookups must not starve inserts.
     * (No code path takes the read lock recursively, which this forbids.) */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&s->lru_mu, NULL);
    pthread_mutex_init(&s->load_mu, NULL);
    if (kvs_chunk_map_init(&s->pmap, 0) || kvs_chunk_map_init(&s->cmap, 1) || kvs_radix_new(&s->radix)) {
        kvs_store_free(s);
        return kvs_error(KVS_ERR_NOMEM, "store: out of memory");
    }
    if (params.cache_dir && *params.cache_dir) {
        /* The directory is the first tier; its entries are indexed now. */
        kvs_tier_dir_params dp = {params.cache_dir, params.fsync, params.cache_max_bytes, params.mac};
        kvs_tier *t = NULL;
        rc = kvs_tier_dir_open(&dp, fp, shape, &t);
        if (!rc) rc = kvs_store_attach_tier(s, t);
        if (!rc) {
            s->dir_tier = t;
            rc = kvs_store_sync_disk(s, NULL);
        }
        if (rc) {
            kvs_store_free(s);
            return rc;
        }
    }
    *out = s;
    return KVS_OK;
}

int kvs_store_attach_tier(kvs_store *s, kvs_tier *t) {
    if (!s || !t || !t->ops) return kvs_error(KVS_ERR_INVALID_ARG, "store: attach of a NULL tier");
    if (s->n_tiers == KVS_STORE_MAX_TIERS) {
        kvs_tier_close(t);
        return kvs_error(KVS_ERR_INVALID_ARG, "store: at most %d tiers below RAM", KVS_STORE_MAX_TIERS);
    }
    pthread_rwlock_wrlock(&s->lock);
    s->tiers[s->n_tiers++] = t;
    pthread_rwlock_unlock(&s->lock);
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
                c->lru_flags = 0;
                kvs_chunk_unref(c);
                c = next;
            }
        }
    }
    kvs_chunk_map_release(&s->pmap);
    kvs_chunk_map_release(&s->cmap);
    kvs_radix_free(s->radix);
    for (int i = 0; i < s->n_tiers; i++) kvs_tier_close(s->tiers[i]);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->lru_mu);
    pthread_mutex_destroy(&s->load_mu);
    free(s);
}

const kvs_key *kvs_store_fingerprint(const kvs_store *s) { return &s->fp; }
const kvs_kv_shape *kvs_store_shape(const kvs_store *s) { return &s->shape; }

/* --- insert ------------------------------------------------------------------------ */

/* The tier of the chunk the store holds under k (-1: RAM only), or -2 when
 * it holds none. */
static int held_tier(kvs_store *s, const kvs_key *k) {
    pthread_rwlock_rdlock(&s->lock);
    const kvs_chunk *c = kvs_chunk_map_find(&s->pmap, k);
    const int t = c ? c->tier : -2;
    pthread_rwlock_unlock(&s->lock);
    return t;
}

int kvs_store_contains(kvs_store *s, const kvs_key *prefix_key) { return held_tier(s, prefix_key) != -2; }

/* write_through to the tiers not in *skip (bit i: tier i takes no more of
 * a put's chunks: one failed, or one before it was not there, and what
 * follows would be unreachable there; counted as not written); a tier
 * whose write fails joins it. */
_Static_assert(KVS_STORE_MAX_TIERS < 32, "a put's skipped tiers fit an unsigned mask");
static int write_through_skipping(kvs_store *s, kvs_chunk *c, unsigned *skip) {
    int failed = 0;
    for (int i = 0; i < s->n_tiers; i++) {
        if (!(*skip >> i & 1) && kvs_tier_put(s->tiers[i], c) == KVS_OK) {
            ADD(s->tier_writes[i], 1);
            if (c->tier < 0) c->tier = i;
        } else {
            ADD(s->tier_write_errors[i], 1);
            *skip |= 1u << i;
            failed++;
        }
    }
    return failed;
}

/* Adds to *skip every tier that no longer holds the entry under parent
 * (the index says it does: another process's bound, or this one's, evicted
 * it since). A child written there would be an entry nothing reaches, and
 * newer than the chain's head, which a bound then evicted first: a server
 * storing a prompt a prefill step at a time on a small bound had been left
 * with tail entries only. A tier that cannot answer is not skipped here:
 * a Redis check that timed out (its EXISTS unanswered) had cut that tier
 * off the rest of the prompt and of every prompt extending it, without a
 * counter saying so. */
static void skip_tiers_lacking(kvs_store *s, const kvs_key *parent, unsigned *skip) {
    for (int t = 0; t < s->n_tiers; t++) {
        uint8_t present = KVS_TIER_UNKNOWN;
        if (!(*skip >> t & 1) && s->tiers[t]->ops->contains_many(s->tiers[t], parent, 1, &present) == KVS_OK &&
            present == KVS_TIER_ABSENT)
            *skip |= 1u << t;
    }
}

/* Writes c to every tier (outside the lock: the entry is complete before
 * anyone can find the chunk). c->tier = the first tier that took it.
 * Returns the number of tiers whose write failed. */
static int write_through(kvs_store *s, kvs_chunk *c) {
    unsigned skip = 0;
    return write_through_skipping(s, c, &skip);
}

/* Indexes a copy of c without its payload as held by tier c->tier (its
 * struct and tokens count as index memory), so that the RAM index finds
 * it as it finds what a tier served: any prefix of it, by its path. */
static void index_tier_only(kvs_store *s, const kvs_chunk *c, const int32_t *path) {
    kvs_chunk *stub = NULL;
    if (kvs_chunk_new(&c->shape, c->n_tok, 0, &stub)) return; /* (then found by key in the tiers) */
    stub->prefix_key = c->prefix_key;
    stub->parent_key = c->parent_key;
    stub->content_key = c->content_key;
    stub->pos0 = c->pos0;
    stub->origin = c->origin;
    memcpy(stub->tokens, c->tokens, (size_t)c->n_tok * sizeof(int32_t));
    kvs_store_index_from_tier(s, stub, path, c->tier);
    kvs_chunk_unref(stub);
}

/* What insert requires of c (and of path, where given). */
static int insert_check(const kvs_store *s, const kvs_chunk *c, const int32_t *path) {
    if (!kvs_kv_shape_equal(&c->shape, &s->shape))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk shape differs from the store's");
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk at pos %d has no payload", c->pos0);
    if (c->store_flags & SF_INDEXED) return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk is in a store already");
    if (c->pos0 == 0 && !kvs_key_equal(&c->parent_key, &s->fp))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: chunk at position 0 must have the fingerprint as parent key");
    if (path && memcmp(path + c->pos0, c->tokens, (size_t)c->n_tok * sizeof(int32_t)))
        return kvs_error(KVS_ERR_INVALID_ARG, "store insert: path tokens [%d, %d) differ from the chunk's", c->pos0,
                         c->pos0 + c->n_tok);
    return KVS_OK;
}

/* Indexes c (and writes it through to the tiers first, unless written:
 * then put_prefix's first pass wrote it, c->tier and *write_failed say
 * how). */
static int insert(kvs_store *s, kvs_chunk *c, const int32_t *path, int written, int *write_failed) {
    if (!written) {
        *write_failed = 0;
        c->tier = -1;
    }
    int rc = insert_check(s, c, path);
    if (rc) return rc;
    if (kvs_store_counted(c) > s->budget) {
        /* Larger than RAM may hold: the tiers below keep it (the cache dir
         * and Redis have their own bounds), a lookup reads it from them by
         * key. It had been dropped before the write: with a budget below
         * one chunk (a large model, large chunks) nothing reached them. */
        ADD(s->insert_too_big, 1);
        if (s->n_tiers && kvs_store_contains(s, &c->prefix_key)) { /* indexed from a tier already */
            ADD(s->insert_exists, 1);
            return KVS_STORE_EXISTS;
        }
        if (s->n_tiers && !written) *write_failed = write_through(s, c) > 0;
        if (c->tier < 0) return KVS_STORE_TOO_BIG;
        index_tier_only(s, c, path);
        return KVS_STORE_TIER_ONLY;
    }
    if (s->n_tiers && !written && !kvs_store_contains(s, &c->prefix_key)) *write_failed = write_through(s, c) > 0;
    pthread_rwlock_wrlock(&s->lock);
    kvs_chunk *old = kvs_chunk_map_find(&s->pmap, &c->prefix_key);
    if (old) {
        kvs_store_touch(s, old);
        pthread_rwlock_unlock(&s->lock);
        ADD(s->insert_exists, 1);
        *write_failed = 0;
        return KVS_STORE_EXISTS;
    }
    if (path) {
        kvs_radix_node *node;
        rc = kvs_radix_insert(s->radix, path, c->pos0 + c->n_tok, c->pos0, c, &node);
        if (rc < 0) {
            pthread_rwlock_unlock(&s->lock);
            return rc;
        }
        c->radix_node = node;
    }
    kvs_store_index_add(s, c);
    ADD(s->inserts, 1);
    kvs_store_evict_locked(s, s->budget);
    pthread_rwlock_unlock(&s->lock);
    return KVS_OK;
}

int kvs_store_insert(kvs_store *s, kvs_chunk *c, const int32_t *path) {
    int write_failed;
    return insert(s, c, path, 0, &write_failed);
}

int kvs_store_insert_chain(kvs_store *s, kvs_chunk *const *chunks, int n, const int32_t *path, int *n_new) {
    int added = 0, rc = KVS_OK;
    for (int i = n - 1; i >= 0; i--) {
        int r = kvs_store_insert(s, chunks[i], path);
        if (r == KVS_OK || r == KVS_STORE_TIER_ONLY) added++;
        else if (r < 0 && rc == KVS_OK) rc = r;
    }
    if (n_new) *n_new = added;
    return rc;
}

/* Touches the chunk with this prefix key; 0 if there is none. */
static int touch_key(kvs_store *s, const kvs_key *k) {
    pthread_rwlock_rdlock(&s->lock);
    kvs_chunk *c = kvs_chunk_map_find(&s->pmap, k);
    if (c) kvs_store_touch(s, c);
    pthread_rwlock_unlock(&s->lock);
    return c != NULL;
}

/* Span sp of the sequence copied out of kv into a new chunk (*out), or
 * NULL with an error status (out of memory: the put stops) or KVS_OK (its
 * KV could not be copied: skipped). */
static int make_span(kvs_store *s, const int32_t *tokens, const kvs_span *sp, const kvs_key *key,
                     const kvs_key *parent, const kvs_kv_buffer *kv, kvs_chunk **out) {
    *out = NULL;
    kvs_chunk *c;
    int rc = kvs_chunk_new(&s->shape, sp->end - sp->start, 1, &c);
    if (rc) return rc;
    c->prefix_key = *key;
    c->parent_key = *parent;
    kvs_key_content(&s->fp, tokens + sp->start, sp->end - sp->start, &c->content_key);
    c->pos0 = sp->start;
    memcpy(c->tokens, tokens + sp->start, (size_t)c->n_tok * sizeof(int32_t));
    if (kvs_chunk_copy_from_kv(c, 0, c->n_tok, kv, sp->start)) {
        kvs_chunk_unref(c);
        return KVS_OK;
    }
    *out = c;
    return KVS_OK;
}

/* msg into out[cap]; one too long keeps its start and its end (the reason
 * comes after the path: "...kvc: write f" had been all a 120-character
 * cache dir left of "No space left on device"), cut between characters. */
static void keep_ends(char *out, size_t cap, const char *msg) {
    const size_t n = strlen(msg);
    if (n < cap) {
        memcpy(out, msg, n + 1);
        return;
    }
    size_t head = cap / 3, tail = n - (cap - head - 6); /* "head ... tail" fits cap with its NUL */
    /* not inside a character (3 bytes back at most: bytes that are no UTF-8 stay as they are) */
    for (int k = 0; k < 3 && head && ((unsigned char)msg[head] & 0xC0) == 0x80; k++) head--;
    for (int k = 0; k < 3 && tail < n && ((unsigned char)msg[tail] & 0xC0) == 0x80; k++) tail++;
    snprintf(out, cap, "%.*s ... %s", (int)head, msg, msg + tail);
}

/* insert's outcome counted in r (the first write error's words kept). */
static void count_insert(int ins, int write_failed, kvs_put_report *r) {
    if ((ins == KVS_OK || ins == KVS_STORE_TIER_ONLY) && write_failed) {
        if (!r->n_write_errors++) keep_ends(r->write_error, sizeof r->write_error, kvs_last_error());
    } else if (ins == KVS_OK || ins == KVS_STORE_TIER_ONLY) {
        r->n_new++;
    } else if (ins == KVS_STORE_EXISTS) {
        r->n_existing++;
    } else {
        r->n_skipped++;
    }
}

int kvs_store_insert_counted(kvs_store *s, kvs_chunk *c, const int32_t *path, kvs_put_report *r) {
    int write_failed = 0;
    int ins = insert(s, c, path, 0, &write_failed);
    count_insert(ins, write_failed, r);
    return ins;
}

int kvs_store_put_prefix(kvs_store *s, const int32_t *tokens, int n, int chunk_tokens, const int *borders,
                         int n_borders, const kvs_kv_buffer *kv, kvs_put_report *rep) {
    kvs_put_report r;
    memset(&r, 0, sizeof r);
    r.n_tokens = n;
    r.chunk_tokens = chunk_tokens > 0 ? chunk_tokens : KVS_CHUNK_TOKENS_DEFAULT;
    if (rep) *rep = r;
    kvs_kv_shape ks = kv ? kvs_kv_buffer_shape(kv) : s->shape;
    if (n < 0 || (n && !tokens) || !kv || !kvs_kv_shape_equal(&ks, &s->shape) || n > kv->n_ctx)
        return kvs_error(KVS_ERR_INVALID_ARG, "store put: %d tokens, KV buffer of %d slots or another shape", n,
                         kv ? kv->n_ctx : 0);
    if (n == 0) return KVS_OK;
    int cap = kvs_chunking_max_spans(n, r.chunk_tokens, n_borders), n_spans;
    struct {
        int done, failed, tier; /* first pass: written (to the tiers it could), with a failure, its c->tier */
        unsigned skip;          /* the tiers the chain had left before it (for a chunk made again) */
    } *written = NULL;
    kvs_span *spans = malloc((size_t)cap * sizeof *spans);
    kvs_key *keys = malloc((size_t)cap * sizeof *keys);
    int rc = spans && keys ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "store put: out of memory");
    if (!rc) rc = kvs_chunking_split(n, 0, r.chunk_tokens, borders, n_borders, spans, cap, &n_spans);
    if (!rc) rc = kvs_key_prefix_chain(&s->fp, tokens, spans, n_spans, keys);
    if (!rc) {
        r.n_chunks = n_spans;
        if (spans[n_spans - 1].flags & KVS_SPAN_PARTIAL) r.partial_tail = spans[n_spans - 1].end - spans[n_spans - 1].start;
        /* The tiers take the new chunks first to last, so that a chain on
         * disk (or in Redis) is whole from its head at every moment: the
         * directory's bound then sees each entry's parent (disk_budget.c
         * evicts a chain from its tail), and a write that fails (a full
         * disk) or a process that dies leaves a prefix that serves, not
         * tail entries no lookup can reach (written last to first, they
         * had been both); past a chunk a tier lacks, it takes none of the
         * rest. Each is made, written and let go (one chunk's KV at a time);
         * then RAM indexes them last to first, like kvs_store_insert_chain,
         * so the head of the sequence ends up most recently used, each made
         * again from kv (a copy, where a write is a file). Without tiers,
         * the second pass alone. */
        written = calloc((size_t)n_spans, sizeof *written);
        if (!written) rc = kvs_error(KVS_ERR_NOMEM, "store put: out of memory");
        const unsigned all = (1u << s->n_tiers) - 1;
        unsigned skip = 0;
        for (int i = 0; s->n_tiers && i < n_spans && !rc; i++) {
            const int held = held_tier(s, &keys[i]);
            written[i].skip = skip;
            if (held != -2) {
                if (held < 0) skip = all; /* in RAM only: no tier holds the chain past here */
                continue;
            }
            if (i && !written[i - 1].done) skip_tiers_lacking(s, &keys[i - 1], &skip); /* indexed, maybe evicted */
            kvs_chunk *c = NULL;
            rc = make_span(s, tokens, &spans[i], &keys[i], i ? &keys[i - 1] : &s->fp, kv, &c);
            if (!rc && (!c || insert_check(s, c, tokens))) skip = all; /* not made: the chain stops here too */
            else if (!rc) {
                c->tier = -1;
                written[i].failed = write_through_skipping(s, c, &skip) > 0;
                written[i].tier = c->tier;
                written[i].done = 1;
            }
            kvs_chunk_unref(c);
        }
        for (int i = n_spans - 1; i >= 0 && !rc; i--) {
            if (!written[i].done && touch_key(s, &keys[i])) {
                r.n_existing++;
                continue;
            }
            /* new, or held at the first pass and evicted since (made again,
             * as it would have been) */
            kvs_chunk *c = NULL;
            rc = make_span(s, tokens, &spans[i], &keys[i], i ? &keys[i - 1] : &s->fp, kv, &c);
            if (rc) break;
            if (!c) {
                r.n_skipped++;
                continue;
            }
            int write_failed = written[i].failed;
            if (written[i].done) {
                c->tier = written[i].tier;
            } else if (s->n_tiers) {
                /* made again: written as the first pass would have, only to
                 * the tiers its chain reaches there (an insert writes to
                 * every tier: past a chunk the disk lacked, a server's step
                 * stores had written orphans newer than the head, which the
                 * bound then evicted first) */
                unsigned sk = written[i].skip;
                if (i && !written[i - 1].done) skip_tiers_lacking(s, &keys[i - 1], &sk);
                c->tier = -1;
                write_failed = write_through_skipping(s, c, &sk) > 0;
            }
            const int ins = insert(s, c, tokens, written[i].done || s->n_tiers, &write_failed);
            count_insert(ins, write_failed, &r);
            if (ins < 0) rc = ins;
            kvs_chunk_unref(c);
        }
    }
    free(written);
    free(spans);
    free(keys);
    if (rep) *rep = r;
    return rc;
}

/* --- maintenance ------------------------------------------------------------------- */

int kvs_store_remove(kvs_store *s, const kvs_key *prefix_key, int and_disk) {
    pthread_rwlock_wrlock(&s->lock);
    kvs_chunk *c = kvs_chunk_map_find(&s->pmap, prefix_key);
    if (c) {
        for (int i = 0; and_disk && i < s->n_tiers; i++) s->tiers[i]->ops->remove(s->tiers[i], prefix_key);
        kvs_store_index_remove(s, c);
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
        while (s->pmap.b[i]) kvs_store_index_remove(s, s->pmap.b[i]);
    for (int i = 0; and_disk && i < s->n_tiers; i++) {
        int r = s->tiers[i]->ops->clear(s->tiers[i], NULL);
        if (r && !rc) rc = r;
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* --- tier sync ----------------------------------------------------------------------- */

typedef struct scan_ctx {
    kvs_store *s;
    kvs_chunk **got;
    size_t n, cap;
    int nomem;
} scan_ctx;

static int scan_add(void *user, kvs_chunk *c) {
    scan_ctx *x = user;
    if (kvs_store_contains(x->s, &c->prefix_key)) {
        kvs_chunk_unref(c);
        return 0;
    }
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

/* Deepest first (pos0 descending). */
static int deeper_first(const void *a, const void *b) {
    const kvs_chunk *x = *(kvs_chunk *const *)a, *y = *(kvs_chunk *const *)b;
    return (x->pos0 < y->pos0) - (x->pos0 > y->pos0);
}

/* Indexes what tier ti's scan lists (headers read without the lock). The
 * deepest chunks are indexed first, so that they are the oldest records:
 * where the listing exceeds the records' bound, the bound drops them before
 * their parents and keeps no child whose parent it dropped (in readdir
 * order it had kept children of dropped heads: counted, unreachable). */
static int sync_tier(kvs_store *s, int ti, int *added) {
    kvs_tier *t = s->tiers[ti];
    if (!t->ops->scan) return KVS_OK;
    scan_ctx x = {s, NULL, 0, 0, 0};
    int rc = t->ops->scan(t, scan_add, &x);
    if (x.n > 1) qsort(x.got, x.n, sizeof *x.got, deeper_first);
    pthread_rwlock_wrlock(&s->lock);
    uint64_t drops0 = GET(s->stub_drops);
    int indexed = 0;
    for (size_t i = 0; i < x.n; i++) {
        kvs_chunk *c = x.got[i];
        if (!kvs_chunk_map_find(&s->pmap, &c->prefix_key)) {
            c->tier = ti;
            kvs_store_index_add(s, c);
            indexed++;
        }
        kvs_chunk_unref(c); /* the scan's reference; index_add took the store's */
    }
    int dropped = (int)(GET(s->stub_drops) - drops0);
    *added += indexed > dropped ? indexed - dropped : 0; /* (what the bound kept) */
    if (t == s->dir_tier) {
        kvs_disk_counts counts;
        kvs_tier_dir_last_scan(t, &counts);
        ADD(s->tier_bad, kvs_disk_counts_damaged(&counts));
        ADD(s->tier_bad_mac, counts.n[KVS_DISK_BAD_MAC]);
        ADD(s->tier_foreign, counts.n[KVS_DISK_FOREIGN]);
    }
    pthread_rwlock_unlock(&s->lock);
    free(x.got);
    if (rc == KVS_OK && x.nomem) rc = kvs_error(KVS_ERR_NOMEM, "store: out of memory while indexing a tier");
    return rc;
}

static int sync_tiers(kvs_store *s, int dir_only, int *n_new) {
    int added = 0, rc = KVS_OK;
    for (int i = 0; i < s->n_tiers && !rc; i++)
        if (!dir_only || s->tiers[i] == s->dir_tier) rc = sync_tier(s, i, &added);
    pthread_rwlock_wrlock(&s->lock);
    kvs_store_attach_paths(s);
    pthread_rwlock_unlock(&s->lock);
    if (n_new) *n_new = added;
    return rc;
}

int kvs_store_sync_disk(kvs_store *s, int *n_new) { return sync_tiers(s, 0, n_new); }

int kvs_store_sync_dir(kvs_store *s, int *n_new) { return sync_tiers(s, 1, n_new); }

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
