/* The cache directory as a whole (disk.h): scanning every entry, removing
 * one, clearing the cache's own files. The entry format is disk.c's. */
#include "kv/disk.h"

#include "base/error.h"
#include "kv/disk_budget.h"
#include "kv/keys.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "<64 hex>.kvc" -> key; 0 if the name is not an entry name. */
static int entry_name_key(const char *name, kvs_key *k) {
    size_t len = strlen(name);
    if (len != 64 + strlen(KVS_DISK_EXT) || strcmp(name + 64, KVS_DISK_EXT)) return 0;
    return kvs_key_from_hex(name, k) == KVS_OK;
}

static int is_tmp_name(const char *name) {
    size_t len = strlen(name);
    return name[0] == '.' && len > 4 && !strcmp(name + len - 4, ".tmp");
}

static int scan_impl(const char *dir, const kvs_key *fp, const kvs_kv_shape *shape, const kvs_entry_mac *mac,
                     int (*known)(void *user, const kvs_key *prefix_key), int (*fn)(void *user, kvs_chunk *chunk),
                     kvs_disk_scan_fp_fn fn_fp, void *user, kvs_disk_counts *counts) {
    kvs_disk_counts local;
    if (!counts) counts = &local;
    memset(counts, 0, sizeof *counts);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return KVS_OK;
        return kvs_error(KVS_ERR_IO, "%s: cannot open cache dir: %s", dir, strerror(errno));
    }
    struct dirent *de;
    char path[4096];
    int rc = KVS_OK;
    while ((de = readdir(d))) {
        kvs_key k;
        if (is_tmp_name(de->d_name)) {
            counts->tmp++;
            continue;
        }
        if (!entry_name_key(de->d_name, &k)) continue;
        if (known && known(user, &k)) {
            counts->known++;
            continue;
        }
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        kvs_chunk *c;
        kvs_disk_verdict v;
        kvs_key file_fp;
        if (kvs_disk_read_header(path, fp, shape, mac, &c, &file_fp, &v, NULL) == KVS_OK) {
            counts->n[KVS_DISK_OK]++;
            if (fn_fp) {
                if (fn_fp(user, c, &file_fp)) break;
            } else if (fn) {
                if (fn(user, c)) break;
            } else {
                kvs_chunk_unref(c);
            }
        } else {
            counts->n[v]++;
        }
    }
    closedir(d);
    return rc;
}

int kvs_disk_scan(const char *dir, const kvs_key *fp, const kvs_kv_shape *shape, const kvs_entry_mac *mac,
                  int (*known)(void *user, const kvs_key *prefix_key), int (*fn)(void *user, kvs_chunk *chunk),
                  void *user, kvs_disk_counts *counts) {
    return scan_impl(dir, fp, shape, mac, known, fn, NULL, user, counts);
}

int kvs_disk_scan_fp(const char *dir, const kvs_key *fp, const kvs_kv_shape *shape, kvs_disk_scan_fp_fn fn,
                     void *user, kvs_disk_counts *counts) {
    return scan_impl(dir, fp, shape, NULL, NULL, NULL, fn, user, counts);
}

int kvs_disk_remove(const char *dir, const kvs_key *k, const kvs_disk_file_id *seen) {
    char path[4096];
    int rc = kvs_disk_path(dir, k, path, sizeof path);
    if (rc) return rc;
    if (seen && (seen->dev || seen->ino)) {
        /* A reader found the file it opened damaged; a good one another
         * process renamed onto the name since must stay (the unlink by
         * name had removed it). */
        struct stat st = {0};
        st.st_dev = (dev_t)seen->dev;
        st.st_ino = (ino_t)seen->ino;
        st.st_size = (off_t)seen->size;
        st.st_mtim.tv_sec = (time_t)seen->mtime_s;
        st.st_mtim.tv_nsec = (long)seen->mtime_ns;
        if (!kvs_disk_unlink_checked(dir, strrchr(path, '/') + 1, KVS_DISK_FILE_JUNK, &st)) return KVS_OK;
        if (errno == ENOENT || errno == EAGAIN)
            return kvs_error(KVS_ERR_NOT_FOUND, "%s: no such entry (or another file now)", path);
        return kvs_error(KVS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    if (unlink(path)) {
        if (errno == ENOENT) return kvs_error(KVS_ERR_NOT_FOUND, "%s: no such entry", path);
        return kvs_error(KVS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    return KVS_OK;
}

int kvs_disk_clear(const char *dir, kvs_cache_clear_report *r) {
    kvs_cache_clear_report local;
    if (!r) r = &local;
    memset(r, 0, sizeof *r);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return KVS_OK;
        return kvs_error(KVS_ERR_IO, "%s: cannot open cache dir: %s", dir, strerror(errno));
    }
    struct dirent *de;
    char path[4096];
    int rc = KVS_OK;
    while ((de = readdir(d))) {
        /* only the cache's own files, by name, type and header
         * (disk_budget.h); a live writer's temp file and fresh junk stay */
        struct stat st;
        kvs_disk_file_kind k = kvs_disk_classify(dir, de->d_name, 1, &st);
        if (k == KVS_DISK_FILE_OTHER || (k != KVS_DISK_FILE_ENTRY && !kvs_disk_is_stale(k, de->d_name, &st))) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        if (kvs_disk_unlink_checked(dir, de->d_name, k, &st) == 0) {
            const uint64_t bytes = (uint64_t)st.st_size;
            if (k == KVS_DISK_FILE_ENTRY) r->removed++, r->removed_bytes += bytes;
            else if (k == KVS_DISK_FILE_JUNK) r->junk_removed++, r->junk_bytes += bytes;
            else r->tmp_removed++;
        } else if (errno != ENOENT && errno != EAGAIN) {
            rc = kvs_error(KVS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
        }
    }
    closedir(d);
    return rc;
}
