/* Directory-level cache access without a model: listing every entry of any
 * model, counting damage, clearing (`kvstitch cache ls|stats|clear`). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "kv/disk.h"
#include "cache/cache.h"

typedef struct dir_ctx {
    kvs_cache_entry_fn fn;
    void *user;
    const char *dir;
    kvs_cache_dir_stats *st;
    kvs_key *fps;         /* (n_fps) distinct fingerprints seen */
    size_t n_fps, cap_fps;
    int stop;
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

static int dir_visit(void *user, kvs_chunk *c, const kvs_key *fp) {
    dir_ctx *x = user;
    char path[4096];
    struct stat sb;
    if (kvs_disk_path(x->dir, &c->prefix_key, path, sizeof path) == KVS_OK && stat(path, &sb) == 0)
        x->st->bytes += (uint64_t)sb.st_size;
    note_fp(x, fp);
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

int kvs_cache_dir_scan(const char *dir, kvs_cache_entry_fn fn, void *user, kvs_cache_dir_stats *st) {
    kvs_cache_dir_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (!dir || !*dir) return kvs_error(KVS_ERR_INVALID_ARG, "cache dir: no directory given");
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: not a directory", dir);
    dir_ctx x = {fn, user, dir, st, NULL, 0, 0, 0};
    kvs_disk_counts counts;
    int rc = kvs_disk_scan_fp(dir, NULL, NULL, dir_visit, &x, &counts);
    st->entries = counts.n[KVS_DISK_OK];
    st->damaged = counts.n[KVS_DISK_BAD_MAGIC] + counts.n[KVS_DISK_BAD_VERSION] + counts.n[KVS_DISK_BAD_HEADER] +
                  counts.n[KVS_DISK_TRUNCATED] + counts.n[KVS_DISK_BAD_PAYLOAD];
    st->unreadable = counts.n[KVS_DISK_IO];
    st->tmp = counts.tmp;
    st->models = x.n_fps;
    free(x.fps);
    return rc;
}

typedef struct verify_ctx {
    const char *dir;
    uint64_t bad;
} verify_ctx;

static int verify_visit(void *user, kvs_chunk *c, const kvs_key *fp) {
    verify_ctx *x = user;
    void *payload = NULL;
    kvs_disk_verdict v = KVS_DISK_OK;
    if (kvs_disk_load_payload(x->dir, fp, c, &payload, &v) == KVS_OK) free(payload);
    else if (v != KVS_DISK_MISSING && v != KVS_DISK_IO) x->bad++;
    kvs_chunk_unref(c);
    return 0;
}

int kvs_cache_dir_verify(const char *dir, kvs_cache_dir_stats *st) {
    kvs_cache_dir_stats local;
    if (!st) st = &local;
    int rc = kvs_cache_dir_scan(dir, NULL, NULL, st);
    if (rc) return rc;
    verify_ctx x = {dir, 0};
    kvs_disk_counts counts;
    rc = kvs_disk_scan_fp(dir, NULL, NULL, verify_visit, &x, &counts);
    /* entries whose payload fails move from valid to damaged */
    st->damaged += x.bad;
    st->entries = st->entries >= x.bad ? st->entries - x.bad : 0;
    return rc;
}

int kvs_cache_dir_clear(const char *dir, uint64_t *n_removed) {
    if (n_removed) *n_removed = 0;
    if (!dir || !*dir) return kvs_error(KVS_ERR_INVALID_ARG, "cache dir: no directory given");
    return kvs_disk_clear(dir, n_removed);
}
