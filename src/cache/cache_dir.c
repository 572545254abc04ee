/* Directory-level cache access without a model: listing every entry of any
 * model, counting damage and unreachable entries, clearing and pruning
 * (`kvstitch cache ls|stats|clear|prune`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "kv/disk.h"
#include "kv/disk_budget.h"
#include "kv/keys.h"
#include "cache/cache.h"

/* What reachability needs of one valid entry. */
typedef struct node {
    kvs_key prefix, parent, fp;
    int32_t pos0, end;
    uint32_t origin;
    uint64_t bytes;
    int state; /* 0 unknown, 1 in progress, 2 reachable, 3 unreachable */
} node;

typedef struct dir_ctx {
    kvs_cache_entry_fn fn;
    void *user;
    const char *dir;
    kvs_cache_dir_stats *st;
    kvs_key *fps;         /* (n_fps) distinct fingerprints seen */
    size_t n_fps, cap_fps;
    node *nodes;          /* (n_nodes) every valid entry */
    size_t n_nodes, cap_nodes;
    int nomem;
    int verify;           /* read every payload: one that fails is damaged, not an entry */
    uint64_t bad_payloads;
} dir_ctx;

static void note_fp(dir_ctx *x, const kvs_key *fp) {
    for (size_t i = 0; i < x->n_fps; i++)
        if (!memcmp(x->fps[i].b, fp->b, 32)) return;
    if (x->n_fps == x->cap_fps) {
        size_t cap = x->cap_fps ? 2 * x->cap_fps : 8;
        kvs_key *f = realloc(x->fps, cap * sizeof *f);
        if (!f) return; /* the count of models is then a lower bound */
        x->fps = f;
        x->cap_fps = cap;
    }
    x->fps[x->n_fps++] = *fp;
}

static void note_node(dir_ctx *x, const kvs_chunk *c, const kvs_key *fp, uint64_t bytes) {
    if (x->n_nodes == x->cap_nodes) {
        size_t cap = x->cap_nodes ? 2 * x->cap_nodes : 256;
        node *v = realloc(x->nodes, cap * sizeof *v);
        if (!v) {
            x->nomem = 1;
            return;
        }
        x->nodes = v;
        x->cap_nodes = cap;
    }
    x->nodes[x->n_nodes++] = (node){c->prefix_key, c->parent_key, *fp, c->pos0, c->pos0 + c->n_tok, c->origin, bytes, 0};
}

kvs_disk_verdict kvs_cache_payload_verdict(const char *dir, const kvs_key *fp, const kvs_entry_mac *mac,
                                           const kvs_chunk *c) {
    void *payload = NULL;
    kvs_disk_verdict v = KVS_DISK_OK;
    if (kvs_disk_load_payload(dir, fp, mac, c, &payload, &v, NULL) == KVS_OK) {
        free(payload);
        return KVS_DISK_OK;
    }
    return v;
}

/* 1 if c's payload fails its checksum (read errors and vanished files are
 * not damage: the scan counts those). */
static int payload_damaged(const char *dir, kvs_chunk *c, const kvs_key *fp) {
    const kvs_disk_verdict v = kvs_cache_payload_verdict(dir, fp, NULL, c);
    return v != KVS_DISK_OK && v != KVS_DISK_MISSING && v != KVS_DISK_IO;
}

static int dir_visit(void *user, kvs_chunk *c, const kvs_key *fp) {
    dir_ctx *x = user;
    if (x->verify && payload_damaged(x->dir, c, fp)) {
        /* before it counts anywhere: its bytes, its model, reachability
         * (its children are then unreachable, as a header-damaged
         * parent's are) */
        x->bad_payloads++;
        kvs_chunk_unref(c);
        return 0;
    }
    char path[4096];
    struct stat sb;
    uint64_t bytes = 0;
    if (kvs_disk_path(x->dir, &c->prefix_key, path, sizeof path) == KVS_OK && stat(path, &sb) == 0)
        bytes = (uint64_t)sb.st_size;
    x->st->bytes += bytes;
    note_fp(x, fp);
    note_node(x, c, fp, bytes);
    int stop = 0;
    if (x->fn) {
        kvs_cache_entry e;
        kvs_reuse_fill_entry(c, fp, &e);
        e.on_disk = 1;
        stop = x->fn(x->user, &e);
    }
    kvs_chunk_unref(c);
    return stop;
}

static int by_prefix(const void *a, const void *b) { return memcmp(((const node *)a)->prefix.b, ((const node *)b)->prefix.b, 32); }

static node *find(node *v, size_t n, const kvs_key *k) {
    node key;
    key.prefix = *k;
    return bsearch(&key, v, n, sizeof *v, by_prefix);
}

/* Reachable: the chain of parents joins exactly down to position 0, rooted
 * in the entry's own fingerprint (iterative: chains can be long). A doc
 * chunk is a root of its own: it is found by its content, and its parent
 * (the doc prefix) is never stored as such. */
static int reachable(node *v, size_t n, node *e) {
    node *chain[64];
    int depth = 0;
    node *x = e;
    int verdict = 0;
    for (;;) {
        if (x->state >= 2) {
            verdict = x->state == 2;
            break;
        }
        if (x->origin & KVS_CHUNK_DOC) {
            verdict = 1;
            x->state = 2;
            break;
        }
        if (x->pos0 == 0) {
            verdict = kvs_key_equal(&x->parent, &x->fp);
            x->state = verdict ? 2 : 3;
            break;
        }
        node *p = find(v, n, &x->parent);
        if (!p || p->end != x->pos0 || !kvs_key_equal(&p->fp, &x->fp)) {
            x->state = 3;
            verdict = 0;
            break;
        }
        if (depth == 64) { /* x is as reachable as its parent: resolve the deep part on its own */
            verdict = reachable(v, n, p);
            x->state = verdict ? 2 : 3;
            break; /* (it had gone round again with x unchanged: cache stats hung on a chain of 65+) */
        }
        chain[depth++] = x;
        x = p;
    }
    while (depth > 0) chain[--depth]->state = verdict ? 2 : 3;
    return verdict;
}

static void count_unreachable(dir_ctx *x) {
    if (x->n_nodes) qsort(x->nodes, x->n_nodes, sizeof *x->nodes, by_prefix); /* nodes is NULL when empty */
    for (size_t i = 0; i < x->n_nodes; i++)
        if (!reachable(x->nodes, x->n_nodes, &x->nodes[i])) {
            x->st->unreachable++;
            x->st->unreachable_bytes += x->nodes[i].bytes;
        }
}

/* The scan behind stats, verify and prune; x->nodes is left for the caller. */
static int scan(const char *dir, kvs_cache_entry_fn fn, void *user, int verify, kvs_cache_dir_stats *st,
                dir_ctx *x) {
    memset(st, 0, sizeof *st);
    memset(x, 0, sizeof *x);
    if (!dir || !*dir) return kvs_error(KVS_ERR_INVALID_ARG, "cache dir: no directory given");
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) return kvs_error(KVS_ERR_INVALID_ARG, "%s: not a directory", dir);
    *x = (dir_ctx){fn, user, dir, st, NULL, 0, 0, NULL, 0, 0, 0, verify, 0};
    kvs_disk_counts counts;
    int rc = kvs_disk_scan_fp(dir, NULL, NULL, dir_visit, x, &counts);
    st->entries = counts.n[KVS_DISK_OK] >= x->bad_payloads ? counts.n[KVS_DISK_OK] - x->bad_payloads : 0;
    st->damaged = kvs_disk_counts_damaged(&counts) + x->bad_payloads;
    st->unreadable = counts.n[KVS_DISK_IO] + counts.n[KVS_DISK_NOT_REGULAR];
    st->models = x->n_fps;
    kvs_disk_usage u;
    if (!rc && !(rc = kvs_disk_usage_get(dir, &u))) {
        st->tmp = u.tmp;
        st->stale_tmp = u.stale_tmp;
        st->other_files = u.other;
    }
    if (!rc && x->nomem) rc = kvs_error(KVS_ERR_NOMEM, "%s: out of memory while scanning", dir);
    if (!rc) count_unreachable(x);
    free(x->fps);
    x->fps = NULL;
    return rc;
}

int kvs_cache_dir_scan(const char *dir, kvs_cache_entry_fn fn, void *user, kvs_cache_dir_stats *st) {
    kvs_cache_dir_stats local;
    dir_ctx x;
    int rc = scan(dir, fn, user, 0, st ? st : &local, &x);
    free(x.nodes);
    return rc;
}

int kvs_cache_dir_verify(const char *dir, kvs_cache_dir_stats *st) {
    kvs_cache_dir_stats local;
    dir_ctx x;
    int rc = scan(dir, NULL, NULL, 1, st ? st : &local, &x);
    free(x.nodes);
    return rc;
}

int kvs_cache_dir_clear_report(const char *dir, kvs_cache_clear_report *r) {
    kvs_cache_clear_report local;
    if (!r) r = &local;
    memset(r, 0, sizeof *r);
    if (!dir || !*dir) return kvs_error(KVS_ERR_INVALID_ARG, "cache dir: no directory given");
    return kvs_disk_clear(dir, r);
}

int kvs_cache_dir_clear(const char *dir, uint64_t *n_removed) {
    kvs_cache_clear_report r;
    int rc = kvs_cache_dir_clear_report(dir, &r);
    if (n_removed) *n_removed = r.removed;
    return rc;
}

uint64_t kvs_cache_dir_default_max_bytes(const char *dir) {
    kvs_disk_usage u;
    if (!dir || kvs_disk_usage_get(dir, &u)) return 0;
    return kvs_disk_default_max_bytes(dir, u.bytes);
}

int kvs_cache_dir_prune(const char *dir, const kvs_cache_prune_params *p, kvs_cache_prune_report *r) {
    kvs_cache_prune_report local;
    if (!r) r = &local;
    memset(r, 0, sizeof *r);
    if (!p) return kvs_error(KVS_ERR_INVALID_ARG, "cache prune: no parameters");
    if (p->older_than_s < 0) return kvs_error(KVS_ERR_INVALID_ARG, "cache prune: older_than_s must be >= 0");
    kvs_cache_dir_stats st;
    dir_ctx x;
    uint64_t refused = 0; /* files that stayed (unlink failed other than with ENOENT) */
    char first[512] = "";  /* the first one's error */
    int rc = scan(dir, NULL, NULL, 0, &st, &x);
    /* Unreachable first: no prompt can use them (until their missing
     * parent is stored again, which the LRU would outlive anyway). */
    for (size_t i = 0; !rc && !p->keep_unreachable && i < x.n_nodes; i++) {
        if (x.nodes[i].state != 3) continue;
        char hex[65], name[80];
        kvs_key_to_hex(&x.nodes[i].prefix, hex);
        snprintf(name, sizeof name, "%s%s", hex, KVS_DISK_EXT);
        if (kvs_disk_classify(dir, name, 1, NULL) != KVS_DISK_FILE_ENTRY) continue;
        const int rm = kvs_disk_remove(dir, &x.nodes[i].prefix, NULL);
        if (rm == KVS_OK) {
            r->unreachable_removed++;
            r->removed_bytes += x.nodes[i].bytes;
        } else if (rm != KVS_ERR_NOT_FOUND && !refused++) {
            snprintf(first, sizeof first, "%s", kvs_last_error());
        }
    }
    free(x.nodes);
    if (rc) return rc;
    kvs_disk_prune_params dp = {p->max_bytes, p->older_than_s, 1, NULL, 0};
    kvs_disk_prune_report dr;
    if ((rc = kvs_disk_prune(dir, &dp, &dr))) return rc;
    r->removed = r->unreachable_removed + dr.removed;
    r->removed_bytes += dr.removed_bytes;
    r->tmp_removed = dr.tmp_removed;
    r->junk_removed = dr.junk_removed;
    r->junk_bytes = dr.junk_bytes;
    r->entries = dr.entries;
    r->bytes = dr.bytes;
    /* the report holds what happened; a file that stayed is still an error */
    if (dr.failed && !refused)
        snprintf(first, sizeof first, "%s/%s: cannot remove: %s", dir, dr.failed_name, strerror(dr.failed_errno));
    refused += dr.failed;
    if (refused)
        return kvs_error(KVS_ERR_IO, "cache prune: %llu removal%s refused (an entry tried as unreachable and again "
                         "for the bound counts twice; first: %s)",
                         (unsigned long long)refused, refused == 1 ? " was" : "s were", first);
    return KVS_OK;
}
