/* The cache directory's byte bound and file ownership (disk_budget.h). */
#include "kv/disk_budget.h"

#include "base/error.h"
#include "base/file.h"
#include "kv/disk.h"
#include "kv/keys.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* 64 lowercase hex digits: the only spelling writers use (kvs_key_to_hex),
 * so a name in capitals is another program's file, never removed. */
static int is_hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f')) return 0;
    return 1;
}

static int all_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* ".<64 hex>.<pid>.<n>.tmp" (disk.c's writers); *pid set. */
static int tmp_name(const char *name, long *pid) {
    size_t len = strlen(name);
    if (len < 1 + 64 + 1 + 1 + 1 + 1 + 4 || name[0] != '.' || !is_hex64(name + 1) || name[65] != '.' ||
        strcmp(name + len - 4, ".tmp"))
        return 0;
    const char *p = name + 66, *end = name + len - 4;
    const char *dot = memchr(p, '.', (size_t)(end - p));
    if (!dot || !all_digits(p, (size_t)(dot - p)) || !all_digits(dot + 1, (size_t)(end - dot - 1))) return 0;
    *pid = strtol(p, NULL, 10);
    return 1;
}

static int entry_name(const char *name) {
    return strlen(name) == 64 + strlen(KVS_DISK_EXT) && is_hex64(name) && !strcmp(name + 64, KVS_DISK_EXT);
}

/* 1 if the file starts with the entry magic (or, with tmp, is empty or a
 * weights memo being written), 0 if it was read and does not, -1 if it
 * could not be read (gone, refused, or no longer a regular file: a symlink
 * swapped in since the lstat is not followed). */
static int header_is_ours(const char *path, int tmp) {
    struct stat st;
    int fd = kvs_open_regular_nofollow(path, &st);
    if (fd < 0) return -1;
    char m[4];
    ssize_t got = pread(fd, m, 4, 0);
    close(fd);
    if (got < 0) return -1;
    if (got == 0 && st.st_size == 0) return tmp;
    return got == 4 && (!memcmp(m, KVS_DISK_MAGIC, 4) || (tmp && !memcmp(m, KVS_DISK_MEMO_MAGIC, 4)));
}

kvs_disk_file_kind kvs_disk_classify(const char *dir, const char *name, int check_header, struct stat *st) {
    struct stat local;
    if (!st) st = &local;
    long pid;
    int entry = entry_name(name), tmp = !entry && tmp_name(name, &pid);
    if (!entry && !tmp) return KVS_DISK_FILE_OTHER;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return KVS_DISK_FILE_OTHER;
    if (lstat(path, st) || !S_ISREG(st->st_mode)) return KVS_DISK_FILE_OTHER;
    const int ours = check_header ? header_is_ours(path, tmp) : 1;
    if (ours < 0 || (!ours && tmp)) return KVS_DISK_FILE_OTHER;
    return !ours ? KVS_DISK_FILE_JUNK : entry ? KVS_DISK_FILE_ENTRY : KVS_DISK_FILE_TMP;
}

int kvs_disk_is_stale(kvs_disk_file_kind k, const char *name, const struct stat *st) {
    long pid;
    if (k != KVS_DISK_FILE_TMP && k != KVS_DISK_FILE_JUNK) return 0;
    if (time(NULL) - st->st_mtime >= 3600) return 1;
    return k == KVS_DISK_FILE_TMP && tmp_name(name, &pid) && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* 1 if DIR/name no longer exists (removed since readdir). */
static int lstat_gone(const char *dir, const char *name) {
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 1;
    return lstat(path, &st) != 0;
}

/* One listed file. */
typedef struct listed {
    char name[256];
    uint64_t bytes;
    int64_t atime_ns;
    kvs_disk_file_kind kind;
    int stale;
    int32_t pos0;   /* an entry's, where its header was read (chain_order), else 0 */
    int has_parent; /* its parent key names an entry of the listing (chain_order) */
} listed;

int kvs_disk_is_memo(const char *name) {
    const size_t n = strlen(name), p = sizeof KVS_DISK_MEMO_PREFIX - 1, x = sizeof KVS_DISK_MEMO_SUFFIX - 1;
    return n > p + x && !strncmp(name, KVS_DISK_MEMO_PREFIX, p) && !strcmp(name + n - x, KVS_DISK_MEMO_SUFFIX);
}

static int list_dir(const char *dir, listed **out, size_t *n_out, kvs_disk_usage *u) {
    memset(u, 0, sizeof *u);
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return KVS_OK;
        u->list_errno = errno;
        return kvs_error(KVS_ERR_IO, "%s: cannot open cache dir: %s", dir, strerror(errno));
    }
    listed *v = NULL;
    size_t n = 0, cap = 0;
    int rc = KVS_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
        struct stat st;
        kvs_disk_file_kind k = kvs_disk_classify(dir, de->d_name, 0, &st);
        if (k == KVS_DISK_FILE_OTHER && kvs_disk_is_memo(de->d_name)) continue;
        if (k == KVS_DISK_FILE_OTHER) {
            /* an entry's name on a non-regular file is the scan's to count
             * (unreadable): counted as other too, it was counted twice */
            if (entry_name(de->d_name) && !lstat_gone(dir, de->d_name)) u->not_regular++;
            else u->other++;
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 256;
            listed *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = kvs_error(KVS_ERR_NOMEM, "%s: out of memory listing the cache dir", dir);
                break;
            }
            v = nv;
            cap = nc;
        }
        listed *e = &v[n++];
        snprintf(e->name, sizeof e->name, "%s", de->d_name);
        e->bytes = (uint64_t)st.st_size;
        e->atime_ns = (int64_t)st.st_atim.tv_sec * 1000000000 + st.st_atim.tv_nsec;
        e->kind = k;
        e->stale = kvs_disk_is_stale(k, de->d_name, &st);
        e->pos0 = 0;
        e->has_parent = 0;
        if (k == KVS_DISK_FILE_ENTRY) {
            u->entries++;
            u->bytes += e->bytes;
        } else {
            u->tmp++;
            u->tmp_bytes += e->bytes;
            u->stale_tmp += (uint64_t)e->stale;
        }
    }
    closedir(d);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *n_out = n;
    return KVS_OK;
}

int kvs_disk_usage_get(const char *dir, kvs_disk_usage *u) {
    listed *v;
    size_t n;
    int rc = list_dir(dir, &v, &n, u);
    free(v);
    return rc;
}

uint64_t kvs_disk_default_max_bytes(const char *dir, uint64_t cache_bytes) {
    struct statvfs vfs;
    if (statvfs(dir, &vfs)) return cache_bytes + ((uint64_t)1 << 30); /* unknown: 1 GiB more */
    return (cache_bytes + (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize) / 2;
}

/* Junk first (kvs_disk_prune), then least recently accessed first; of the
 * same stamp, the later position first (a chain's tail before its head,
 * chain_order). */
static int by_atime(const void *a, const void *b) {
    const listed *x = a, *y = b;
    const int xj = x->kind == KVS_DISK_FILE_JUNK, yj = y->kind == KVS_DISK_FILE_JUNK;
    if (xj != yj) return yj - xj;
    if (x->atime_ns != y->atime_ns) return (x->atime_ns > y->atime_ns) - (x->atime_ns < y->atime_ns);
    return (x->pos0 < y->pos0) - (x->pos0 > y->pos0);
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(listed *const *)a)->name, (*(listed *const *)b)->name);
}

static int by_pos0_desc(const void *a, const void *b) {
    const listed *x = *(listed *const *)a, *y = *(listed *const *)b;
    return (x->pos0 < y->pos0) - (x->pos0 > y->pos0);
}

/* A chain is read head first, so its head had the oldest stamp: evicted
 * first, it left every later entry of the chain unreachable (a bound that
 * held four of its five entries kept none reachable). Each entry's stamp
 * becomes the newest of its own and its descendants' (parents named by the
 * headers' parent keys, read here: only when something is to be evicted),
 * and of one stamp the later position goes first, so a chain is evicted
 * from its tail. A parent must start before its child (a header saying
 * otherwise is not followed: no cycle). Entries whose header cannot be read
 * keep their own stamp. */
static void chain_order(const char *dir, listed *v, size_t n) {
    listed **by = malloc(n * sizeof *by);
    char (*parent)[65] = malloc(n * sizeof *parent); /* entry i's parent key */
    listed **up = calloc(n, sizeof *up);               /* entry i's parent entry, or NULL */
    if (!by || !parent || !up) goto done; /* out of memory: the plain order */
    /* the headers' checks name what they refuse: the caller's last error is
     * kept (a write that succeeded had left "impossible header fields") */
    char kept_error[1024];
    snprintf(kept_error, sizeof kept_error, "%s", kvs_last_error());
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].kind != KVS_DISK_FILE_ENTRY) continue;
        char path[4096];
        uint8_t fixed[KVS_DISK_FIXED_BYTES];
        kvs_disk_header hd;
        kvs_disk_verdict verdict;
        if (snprintf(path, sizeof path, "%s/%s", dir, v[i].name) >= (int)sizeof path) continue;
        int fd = kvs_open_regular(path, NULL);
        if (fd < 0) continue;
        ssize_t got = pread(fd, fixed, sizeof fixed, 0);
        close(fd);
        if (got <= 0 || kvs_disk_header_parse_fixed(fixed, (size_t)got, path, &hd, &verdict)) continue;
        v[i].pos0 = hd.pos0;
        kvs_key_to_hex(&hd.parent, parent[i]);
        by[m++] = &v[i];
    }
    kvs_error(KVS_OK, "%s", kept_error);
    qsort(by, m, sizeof *by, by_name);
    for (size_t i = 0; i < m; i++) {
        listed *e = by[i], key;
        const size_t at = (size_t)(e - v);
        snprintf(key.name, sizeof key.name, "%s%s", parent[at], KVS_DISK_EXT);
        listed *kp = &key, **hit = bsearch(&kp, by, m, sizeof *by, by_name);
        if (hit && (*hit)->pos0 < e->pos0) {
            up[at] = *hit;
            e->has_parent = 1;
        }
    }
    qsort(by, m, sizeof *by, by_pos0_desc); /* children before their parents */
    for (size_t i = 0; i < m; i++) {
        listed *p = up[by[i] - v];
        if (p && p->atime_ns < by[i]->atime_ns) p->atime_ns = by[i]->atime_ns;
    }
done:
    free(by);
    free(parent);
    free(up);
}

enum { REMOVED = 1, GONE = 0, NOT_OURS = -1, REFUSED = -2 };

int kvs_disk_same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int kvs_disk_unlink_checked(const char *dir, const char *name, kvs_disk_file_kind k, const struct stat *st) {
    char path[4096], aside[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return errno = ENAMETOOLONG, -1;
    if (k != KVS_DISK_FILE_JUNK) return unlink(path);
    /* Junk bears an entry's name, and a writer may rename that entry into
     * place between the check and an unlink by name, which would remove
     * it (the writer having reported it stored). So the junk is moved
     * aside first, under a writer's temp name of this process (a stale
     * one is reclaimed if we stop here), and removed only if what moved
     * is the file that was checked; else that file goes back, unless the
     * name was taken again meanwhile (the same key's bytes). */
    if (kvs_disk_tmp_path(dir, name, aside, sizeof aside)) return errno = ENAMETOOLONG, -1;
    if (rename(path, aside)) return -1;
    struct stat moved;
    if (!lstat(aside, &moved) && kvs_disk_same_file(&moved, st)) return unlink(aside);
    if (link(aside, path) && errno != EEXIST) return -1; /* stays aside, as a stale temp file later */
    unlink(aside);
    return errno = EAGAIN, -1;
}

/* Unlinks DIR/name if it is still the cache's own file of kind k (a
 * leftover still stale): REMOVED, GONE already (another process), NOT_OURS
 * (left alone: replaced or written to since the listing), or REFUSED
 * (EACCES, EROFS, EBUSY...: the file stays, counted in r->failed with the
 * first one's name and errno). */
static int remove_owned(const char *dir, const char *name, kvs_disk_file_kind k, kvs_disk_prune_report *r) {
    struct stat st;
    if (kvs_disk_classify(dir, name, 1, &st) != k || (k != KVS_DISK_FILE_ENTRY && !kvs_disk_is_stale(k, name, &st)))
        return NOT_OURS;
    if (kvs_disk_unlink_checked(dir, name, k, &st) == 0) return REMOVED;
    if (errno == ENOENT) return GONE;
    if (errno == EAGAIN) return NOT_OURS;
    if (!r->failed++) {
        r->failed_errno = errno;
        snprintf(r->failed_name, sizeof r->failed_name, "%s", name);
    }
    return REFUSED;
}

int kvs_disk_prune(const char *dir, const kvs_disk_prune_params *p, kvs_disk_prune_report *r) {
    kvs_disk_prune_report local;
    if (!r) r = &local;
    memset(r, 0, sizeof *r);
    listed *v;
    size_t n;
    kvs_disk_usage u;
    int rc = list_dir(dir, &v, &n, &u);
    if (rc) return rc;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    /* older than the clock itself: nothing is (older_than_s * 1e9 had
     * overflowed for INT64_MAX, the cutoff landed in the future, and every
     * entry was removed) */
    int64_t cutoff = p->older_than_s > 0 && p->older_than_s < (int64_t)now.tv_sec
                         ? (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - p->older_than_s * (int64_t)1000000000
                         : INT64_MIN;
    uint64_t bytes = u.bytes, entries = u.entries;
    /* Over the bound (or pruning leftovers), the first bytes tell entries
     * from junk (the listing reads no file: headers are read only when
     * there is something to evict). Stale junk counts, and goes first
     * (by_atime), all of it: it never serves, an entry may (it had never
     * been removed nor counted, and leaked for good). Over the bound, a
     * file with an entry's name that is not removed, fresh junk (maybe
     * being written) or one that cannot be read, must not count, or every
     * entry would be evicted to make room that its bytes never give back
     * (a 60 MB such file under a 50 MB bound had emptied the cache after
     * every write); within it, it stays in what remains, as listed. */
    const int over_bound = p->max_bytes && bytes > p->max_bytes;
    for (size_t i = 0; (over_bound || p->leftovers) && i < n; i++) {
        struct stat st;
        kvs_disk_file_kind k;
        if (v[i].kind != KVS_DISK_FILE_ENTRY || (k = kvs_disk_classify(dir, v[i].name, 1, &st)) == KVS_DISK_FILE_ENTRY)
            continue;
        if (k == KVS_DISK_FILE_JUNK && kvs_disk_is_stale(k, v[i].name, &st)) {
            v[i].kind = k;
            continue;
        }
        if (!over_bound) continue;
        v[i].kind = KVS_DISK_FILE_OTHER;
        bytes -= v[i].bytes;
        entries--;
    }
    if (n && (over_bound || cutoff != INT64_MIN)) chain_order(dir, v, n); /* something may be evicted: whole chains */
    if (n) qsort(v, n, sizeof *v, by_atime); /* (v may be NULL when n is 0) */
    int64_t keep_stamp = INT64_MAX; /* keep's chain: as recent as keep (chain_order) */
    for (size_t i = 0; p->keep && p->keep_bound && i < n; i++)
        if (!strcmp(v[i].name, p->keep)) keep_stamp = v[i].atime_ns;
    for (size_t i = 0; i < n; i++) {
        listed *e = &v[i];
        if (e->kind == KVS_DISK_FILE_OTHER) continue;
        if (e->kind == KVS_DISK_FILE_TMP) {
            if (p->leftovers && e->stale && remove_owned(dir, e->name, e->kind, r) == REMOVED) r->tmp_removed++;
            continue;
        }
        const int junk = e->kind == KVS_DISK_FILE_JUNK; /* (stale: above) */
        /* entries this process may not remove stay in the figures but, like
         * files not the cache's, are no room to make: evicting the rest for
         * them would empty the cache and still leave it over the bound */
        const uint64_t limit = e->atime_ns >= keep_stamp ? p->keep_bound : p->max_bytes;
        int over = p->max_bytes && bytes - r->failed_bytes > limit, old = e->atime_ns < cutoff;
        if (!over && !old && !junk) continue;
        const int is_keep = p->keep && !strcmp(e->name, p->keep);
        if (is_keep && !e->has_parent) continue;
        switch (remove_owned(dir, e->name, e->kind, r)) {
        case REFUSED: r->failed_bytes += e->bytes; continue;
        case REMOVED:
            r->junk_removed += (uint64_t)junk;
            r->junk_bytes += junk ? e->bytes : 0;
            r->removed += (uint64_t)!junk;
            r->removed_bytes += junk ? 0 : e->bytes;
            r->keep_removed |= is_keep;
            break;
        default: break; /* gone (another process), or not ours (replaced since the listing): not the cache's bytes */
        }
        bytes -= e->bytes;
        entries--;
    }
    free(v);
    r->entries = entries;
    r->bytes = bytes;
    return KVS_OK;
}
