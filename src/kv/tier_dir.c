/*
 * The directory tier (tier_dir.h): one row of kvs_tier_ops over disk.h's
 * entry files, within disk_budget.h's cross-process byte bound.
 */
#include "kv/tier_dir.h"

#include "base/error.h"
#include "kv/disk_budget.h"
#include "kv/keys.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Listing the directory after every write would cost a readdir + stats per
 * chunk; after this many writes (or when this process's estimate crosses
 * the bound) is enough, plus once at close. */
#define CHECK_EVERY_WRITES 16
/* Eviction goes below the bound so that it does not run on every write. */
#define LOW_WATER(max) ((max) / 10 * 9)

typedef struct dir_tier {
    char *dir;
    kvs_key fp;
    kvs_kv_shape shape;
    const kvs_entry_mac *mac; /* NULL: keyless */
    int fsync;
    uint64_t max_bytes;
    int default_bound; /* max_bytes is kvs_disk_default_max_bytes' (no --cache-max-bytes) */
    char unlisted[256]; /* "" or why the directory could not be listed at open (tier_dir.h:
                         * then nothing is indexed or written; reads by key go on) */
    pthread_mutex_t budget_mu;  /* one bound check at a time in this process */
    _Atomic uint64_t est_bytes; /* the dir's entry bytes at the last listing + our writes since */
    _Atomic uint64_t writes_since_check;
    pthread_mutex_t scan_mu;
    kvs_disk_counts last_scan;  /* scan_mu */
    _Atomic uint64_t gets, hits, misses, get_bytes, get_ns, puts, put_errors, put_bytes, bad, bad_mac, foreign, errors;
    _Atomic uint64_t evicted;
} dir_tier;

static const kvs_tier_ops dir_ops;

#define INC(f, v) atomic_fetch_add_explicit(&(f), (uint64_t)(v), memory_order_relaxed)
#define LD(f) atomic_load_explicit(&(f), memory_order_relaxed)

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Status of a failed read, counted; a damaged entry of ours is removed so
 * that no process tries it again (a foreign, newer-version or non-regular
 * file is left alone), if it is still the file read (seen). */
static int failed(dir_tier *d, const kvs_chunk *c, int rc, kvs_disk_verdict v, const kvs_disk_file_id *seen) {
    switch (v) {
    case KVS_DISK_MISSING: INC(d->misses, 1); return KVS_ERR_NOT_FOUND;
    case KVS_DISK_FOREIGN: INC(d->foreign, 1); return rc;
    case KVS_DISK_IO: INC(d->errors, 1); return KVS_ERR_IO;
    case KVS_DISK_NOT_REGULAR:
        /* left in place, but gone for the index: the next store renames a
         * good entry over a FIFO or symlink (as a transient failure, the
         * chunk had stayed indexed and was never stored again, capping
         * reuse there for the process's life) */
        INC(d->errors, 1);
        return KVS_ERR_NOT_FOUND;
    case KVS_DISK_BAD_VERSION: INC(d->bad, 1); return rc;
    case KVS_DISK_BAD_MAC:
        INC(d->bad, 1);
        INC(d->bad_mac, 1);
        kvs_disk_remove(d->dir, &c->prefix_key, seen);
        return KVS_TIER_ERR_BAD_MAC;
    default:
        INC(d->bad, 1);
        if (v != KVS_DISK_BAD_MAGIC) kvs_disk_remove(d->dir, &c->prefix_key, seen);
        return rc ? rc : KVS_ERR_CORRUPT;
    }
}

static void count_hit(dir_tier *d, const kvs_chunk *c, uint64_t t0) {
    INC(d->hits, 1);
    INC(d->get_bytes, c->kv_bytes);
    INC(d->get_ns, now_ns() - t0);
}

static int dir_load(kvs_tier *t, const kvs_chunk *c, void **payload) {
    dir_tier *d = t->impl;
    uint64_t t0 = now_ns();
    INC(d->gets, 1);
    kvs_disk_verdict v = KVS_DISK_OK;
    kvs_disk_file_id seen;
    int rc = kvs_disk_load_payload(d->dir, &d->fp, d->mac, c, payload, &v, &seen);
    if (rc) return failed(d, c, rc, v, &seen);
    count_hit(d, c, t0);
    return KVS_OK;
}

/* Stops at the first miss (tier.h): files are read one by one, and the
 * chunks after a miss would not be used. */
static int dir_get_many(kvs_tier *t, const kvs_key *keys, int n, kvs_chunk **out) {
    dir_tier *d = t->impl;
    if (n < 0 || (n && (!keys || !out))) return kvs_error(KVS_ERR_INVALID_ARG, "dir tier: bad get_many arguments");
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n && (i == 0 || out[i - 1]); i++) {
        char path[4096];
        if (kvs_disk_path(d->dir, &keys[i], path, sizeof path)) continue;
        uint64_t t0 = now_ns();
        INC(d->gets, 1);
        kvs_chunk *c = NULL;
        kvs_disk_verdict v = KVS_DISK_OK;
        kvs_disk_file_id seen;
        int rc = kvs_disk_read_header(path, &d->fp, &d->shape, d->mac, &c, NULL, &v, &seen);
        if (rc) {
            kvs_chunk stub;
            memset(&stub, 0, sizeof stub);
            stub.prefix_key = keys[i];
            failed(d, &stub, rc, v, &seen);
            continue;
        }
        void *buf = NULL;
        rc = kvs_disk_load_payload(d->dir, &d->fp, d->mac, c, &buf, &v, &seen);
        if (rc) {
            failed(d, c, rc, v, &seen);
            kvs_chunk_unref(c);
            continue;
        }
        c->kv = buf;
        count_hit(d, c, t0);
        out[i] = c;
    }
    return KVS_OK;
}

static int dir_get_into(kvs_tier *t, const kvs_chunk *c, int off, int n, const kvs_kv_buffer *kv, int slot) {
    dir_tier *d = t->impl;
    uint64_t t0 = now_ns();
    INC(d->gets, 1);
    kvs_disk_verdict v = KVS_DISK_OK;
    kvs_disk_file_id seen;
    int rc = kvs_disk_read_into_kv(d->dir, &d->fp, d->mac, c, off, n, kv, slot, &v, &seen);
    if (rc) return v == KVS_DISK_IO && rc == KVS_ERR_INVALID_ARG ? rc : failed(d, c, rc, v, &seen);
    count_hit(d, c, t0);
    return KVS_OK;
}

/* Lists the directory and evicts down to the low-water mark when over,
 * never the entry just written (keep: its prefix key, or NULL): that entry
 * is at most the bound (dir_put), and a write reported as stored must leave
 * it on disk (an entry above the low-water mark had been evicted by its
 * own write's check). */
static int check_bound(dir_tier *d, const kvs_key *keep) {
    int keep_removed = 0;
    char keep_name[80] = "";
    if (keep) {
        kvs_key_to_hex(keep, keep_name);
        strcat(keep_name, KVS_DISK_EXT);
    }
    pthread_mutex_lock(&d->budget_mu);
    kvs_disk_usage u;
    if (kvs_disk_usage_get(d->dir, &u) == KVS_OK) {
        uint64_t bytes = u.bytes;
        if (bytes > d->max_bytes) {
            kvs_disk_prune_params p = {LOW_WATER(d->max_bytes), 0, 0, keep ? keep_name : NULL, d->max_bytes};
            kvs_disk_prune_report r;
            if (kvs_disk_prune(d->dir, &p, &r) == KVS_OK) {
                INC(d->evicted, r.removed);
                keep_removed = r.keep_removed;
                bytes = r.bytes - r.failed_bytes; /* entries it may not remove are no room to make: not rechecked every write */
            }
        }
        atomic_store(&d->est_bytes, bytes);
        atomic_store(&d->writes_since_check, 0);
    }
    pthread_mutex_unlock(&d->budget_mu);
    return keep_removed;
}

static int dir_put(kvs_tier *t, const kvs_chunk *c) {
    dir_tier *d = t->impl;
    /* The bound is kept by listing the directory: where that fails, a write
     * would grow it without limit. Refused as a read-only directory refuses
     * it: a failed write, kept in memory, its reason in the caller's warning. */
    if (d->unlisted[0]) {
        INC(d->put_errors, 1);
        return kvs_error(KVS_ERR_IO, "%s (a directory it cannot list keeps no bound: not written)", d->unlisted);
    }
    /* An entry larger than the bound cannot stay: written, it would be
     * evicted at once with every other entry while reported stored. It is
     * not written, and the caller counts a failed write (kept in memory). */
    const uint64_t entry = kvs_disk_header_bytes(c->n_tok, d->mac != NULL) + (uint64_t)c->kv_bytes;
    if (entry > d->max_bytes) {
        INC(d->put_errors, 1);
        return kvs_error(KVS_ERR_IO,
                         "cache dir %s: an entry of %llu bytes (%d tokens) is larger than the bound of %llu bytes "
                         "(%s): not written",
                         d->dir, (unsigned long long)entry, c->n_tok, (unsigned long long)d->max_bytes,
                         d->default_bound ? "by default half the space its file system has free; --cache-max-bytes sets it"
                                          : "--cache-max-bytes");
    }
    int rc = kvs_disk_write(d->dir, &d->fp, c, d->fsync, d->mac);
    if (rc) {
        INC(d->put_errors, 1);
        return rc;
    }
    uint64_t est = atomic_fetch_add(&d->est_bytes, c->kv_bytes) + c->kv_bytes;
    uint64_t w = atomic_fetch_add(&d->writes_since_check, 1) + 1;
    if ((est > d->max_bytes || w >= CHECK_EVERY_WRITES) && check_bound(d, &c->prefix_key)) {
        /* the tail of a chain the bound cannot hold whole: not kept (its
         * chain's earlier entries are) */
        INC(d->put_errors, 1);
        return kvs_error(KVS_ERR_IO,
                         "cache dir %s: the bound of %llu bytes (%s) holds its chain's earlier entries, not this one "
                         "(position %d): not kept",
                         d->dir, (unsigned long long)d->max_bytes,
                         d->default_bound ? "by default half the space its file system has free; --cache-max-bytes sets it"
                                          : "--cache-max-bytes",
                         c->pos0);
    }
    INC(d->puts, 1);
    INC(d->put_bytes, c->kv_bytes);
    return KVS_OK;
}

static int dir_contains_many(kvs_tier *t, const kvs_key *keys, int n, uint8_t *present) {
    dir_tier *d = t->impl;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        if (kvs_disk_path(d->dir, &keys[i], path, sizeof path) != KVS_OK) present[i] = KVS_TIER_UNKNOWN;
        else if (lstat(path, &st) != 0) present[i] = errno == ENOENT ? KVS_TIER_ABSENT : KVS_TIER_UNKNOWN;
        else present[i] = S_ISREG(st.st_mode) ? KVS_TIER_HELD : KVS_TIER_ABSENT; /* a symlink is not an entry (disk.c never follows one) */
    }
    return KVS_OK;
}

static int dir_remove(kvs_tier *t, const kvs_key *key) { return kvs_disk_remove(((dir_tier *)t->impl)->dir, key, NULL); }

static int dir_scan(kvs_tier *t, kvs_tier_visit_fn fn, void *user) {
    dir_tier *d = t->impl;
    if (d->unlisted[0]) return KVS_OK; /* a tier that cannot list its entries, as Redis (tier.h) */
    kvs_disk_counts counts;
    int rc = kvs_disk_scan(d->dir, &d->fp, &d->shape, d->mac, NULL, fn, user, &counts);
    pthread_mutex_lock(&d->scan_mu);
    d->last_scan = counts;
    pthread_mutex_unlock(&d->scan_mu);
    return rc;
}

static int dir_clear(kvs_tier *t, uint64_t *n_removed) {
    dir_tier *d = t->impl;
    kvs_cache_clear_report r;
    int rc = kvs_disk_clear(d->dir, &r);
    if (n_removed) *n_removed = r.removed;
    atomic_store(&d->est_bytes, 0);
    return rc;
}

static void dir_stats(kvs_tier *t, kvs_tier_stats *st) {
    dir_tier *d = t->impl;
    memset(st, 0, sizeof *st);
    st->gets = LD(d->gets);
    st->hits = LD(d->hits);
    st->misses = LD(d->misses);
    st->get_bytes = LD(d->get_bytes);
    st->get_seconds = (double)LD(d->get_ns) * 1e-9;
    st->puts = LD(d->puts);
    st->put_errors = LD(d->put_errors);
    st->put_bytes = LD(d->put_bytes);
    st->bad = LD(d->bad);
    st->bad_mac = LD(d->bad_mac);
    st->foreign = LD(d->foreign);
    st->errors = LD(d->errors);
    st->bytes = LD(d->est_bytes);
}

static void dir_close(kvs_tier *t) {
    if (!t) return;
    dir_tier *d = t->impl;
    if (d) {
        /* the last writer to close leaves the directory within its bound */
        if (LD(d->writes_since_check)) check_bound(d, NULL);
        pthread_mutex_destroy(&d->budget_mu);
        pthread_mutex_destroy(&d->scan_mu);
        free(d->dir);
        free(d);
    }
    free(t);
}

static const kvs_tier_ops dir_ops = {
    .name = "dir",
    .get_many = dir_get_many,
    .get_into = dir_get_into,
    .load = dir_load,
    .put = dir_put,
    .contains_many = dir_contains_many,
    .remove = dir_remove,
    .scan = dir_scan,
    .clear = dir_clear,
    .stats = dir_stats,
    .close = dir_close,
};

int kvs_tier_dir_open(const kvs_tier_dir_params *p, const kvs_key *fp, const kvs_kv_shape *shape, kvs_tier **out) {
    if (!p || !p->dir || !*p->dir) return kvs_error(KVS_ERR_INVALID_ARG, "dir tier: no directory given");
    int rc = kvs_disk_init_dir(p->dir);
    if (rc) return rc;
    /* A directory this process may enter but not list (mode 0300 to it:
     * opendir fails with EACCES) costs the cache, not the request, as a
     * read-only one does: the tier opens without its listing (EACCES or
     * EPERM from opendir; any other failure still fails the open). */
    kvs_disk_usage u;
    const int unlisted = kvs_disk_usage_get(p->dir, &u);
    /* only a refusal: another failure (EMFILE, ENOMEM, EIO) may pass, and
     * degrading for the process's life on it would go unnoticed */
    if (unlisted && (unlisted != KVS_ERR_IO || (u.list_errno != EACCES && u.list_errno != EPERM))) return unlisted;
    kvs_tier *t = calloc(1, sizeof *t);
    dir_tier *d = calloc(1, sizeof *d);
    if (!t || !d || !(d->dir = strdup(p->dir))) {
        free(t);
        if (d) free(d->dir);
        free(d);
        return kvs_error(KVS_ERR_NOMEM, "dir tier: out of memory");
    }
    d->fp = *fp;
    d->shape = *shape;
    d->mac = p->mac;
    d->fsync = p->fsync;
    d->max_bytes = p->max_bytes ? p->max_bytes : kvs_disk_default_max_bytes(p->dir, u.bytes);
    d->default_bound = !p->max_bytes;
    if (unlisted) snprintf(d->unlisted, sizeof d->unlisted, "%s", kvs_last_error());
    atomic_init(&d->est_bytes, u.bytes);
    pthread_mutex_init(&d->budget_mu, NULL);
    pthread_mutex_init(&d->scan_mu, NULL);
    t->ops = &dir_ops;
    t->impl = d;
    *out = t;
    return KVS_OK;
}

int kvs_tier_is_dir(const kvs_tier *t) { return t && t->ops == &dir_ops; }

void kvs_tier_dir_last_scan(const kvs_tier *t, kvs_disk_counts *out) {
    memset(out, 0, sizeof *out);
    if (!kvs_tier_is_dir(t)) return;
    dir_tier *d = t->impl;
    pthread_mutex_lock(&d->scan_mu);
    *out = d->last_scan;
    pthread_mutex_unlock(&d->scan_mu);
}

uint64_t kvs_tier_dir_max_bytes(const kvs_tier *t) {
    return kvs_tier_is_dir(t) ? ((dir_tier *)t->impl)->max_bytes : 0;
}
