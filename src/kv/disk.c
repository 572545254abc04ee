#include "kv/disk.h"

#include "base/error.h"
#include "base/file.h"
#include "base/le.h"
#include "base/sha256.h"
#include "kv/checksum.h"
#include "kv/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR_ALIGN 64

static const char *const verdict_names[KVS_DISK_VERDICT_COUNT] = {
    "ok", "missing", "bad magic", "bad version", "bad header", "truncated", "foreign", "bad payload",
    "not a regular file", "io error", "bad MAC",
};

const char *kvs_disk_verdict_name(kvs_disk_verdict v) {
    return (unsigned)v < KVS_DISK_VERDICT_COUNT ? verdict_names[v] : "?";
}


uint64_t kvs_disk_counts_damaged(const kvs_disk_counts *c) {
    return c->n[KVS_DISK_BAD_MAGIC] + c->n[KVS_DISK_BAD_VERSION] + c->n[KVS_DISK_BAD_HEADER] +
           c->n[KVS_DISK_TRUNCATED] + c->n[KVS_DISK_BAD_PAYLOAD] + c->n[KVS_DISK_BAD_MAC];
}

size_t kvs_disk_header_bytes(int n_tok, int with_mac) {
    size_t raw = KVS_DISK_FIXED_BYTES + (size_t)n_tok * 4 + 32 + (with_mac ? KVS_ENTRY_MAC_BYTES : 0);
    return (raw + HDR_ALIGN - 1) / HDR_ALIGN * HDR_ALIGN;
}

/* --- small I/O helpers ----------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes at off; returns bytes read (short at end of file) or -1. */
static ssize_t pread_all(int fd, void *buf, size_t n, off_t off) {
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Creates the directories above dir that are missing, as mkdir -p (a
 * cache dir of ~/.cache/kvs on a home without ~/.cache had failed): each
 * one's own failure shows when dir itself is made. */
static void make_parents(const char *dir) {
    char *p = strdup(dir);
    if (!p) return;
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        (void)mkdir(p, 0755);
        *s = '/';
    }
    free(p);
}

int kvs_disk_init_dir(const char *dir) {
    if (!dir || !*dir) return kvs_error(KVS_ERR_INVALID_ARG, "cache dir: empty path");
    int made = mkdir(dir, 0755) == 0 || errno == EEXIST;
    if (!made && errno == ENOENT) {
        make_parents(dir);
        made = mkdir(dir, 0755) == 0 || errno == EEXIST;
    }
    if (!made) return kvs_error(KVS_ERR_IO, "%s: cannot create cache dir: %s", dir, strerror(errno));
    struct stat st, lst;
    if (stat(dir, &st)) { /* a dangling link or a loop: mkdir saw the link, EEXIST */
        const int e = errno;
        const int link = lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode);
        return kvs_error(KVS_ERR_IO, "%s: cannot use as cache dir: %s%s", dir, strerror(e),
                         link ? " (a symbolic link whose target cannot be reached)" : "");
    }
    if (!S_ISDIR(st.st_mode)) return kvs_error(KVS_ERR_IO, "%s: not a directory", dir);
    return KVS_OK;
}

int kvs_disk_path(const char *dir, const kvs_key *k, char *buf, size_t cap) {
    char hex[65];
    kvs_key_to_hex(k, hex);
    int n = snprintf(buf, cap, "%s/%s%s", dir, hex, KVS_DISK_EXT);
    if (n < 0 || (size_t)n >= cap) return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "%s: path too long", dir);
    return KVS_OK;
}

/* --- writing ------------------------------------------------------------- */

int kvs_disk_header_build(uint8_t *h, size_t hbytes, const kvs_key *fp, const kvs_chunk *c, uint64_t sum,
                          const kvs_entry_mac *mac) {
    memset(h, 0, hbytes);
    memcpy(h, KVS_DISK_MAGIC, 4);
    kvs_put_le32(h + 4, KVS_DISK_VERSION);
    kvs_put_le32(h + 8, (uint32_t)hbytes);
    kvs_put_le32(h + 12, c->origin | (mac ? KVS_DISK_FLAG_MAC : 0));
    memcpy(h + 16, fp->b, 32);
    memcpy(h + 48, c->prefix_key.b, 32);
    memcpy(h + 80, c->content_key.b, 32);
    memcpy(h + 112, c->parent_key.b, 32);
    kvs_put_le32(h + 144, (uint32_t)c->shape.dtype);
    kvs_put_le32(h + 148, (uint32_t)c->shape.n_layer);
    kvs_put_le32(h + 152, (uint32_t)c->shape.n_kv_head);
    kvs_put_le32(h + 156, (uint32_t)c->shape.head_dim);
    kvs_put_le32(h + 160, (uint32_t)c->n_tok);
    kvs_put_le32(h + 164, (uint32_t)c->pos0);
    kvs_put_le64(h + 168, (uint64_t)c->created_ns);
    kvs_put_le64(h + 176, (uint64_t)c->kv_bytes);
    kvs_put_le64(h + 184, sum);
    uint8_t *t = h + KVS_DISK_FIXED_BYTES;
    for (int i = 0; i < c->n_tok; i++) kvs_put_le32(t + 4 * (size_t)i, (uint32_t)c->tokens[i]);
    size_t covered = KVS_DISK_FIXED_BYTES + (size_t)c->n_tok * 4;
    kvs_sha256_digest(h, covered, h + covered);
    if (!mac) return KVS_OK;
    kvs_entry_mac_state s;
    int rc = kvs_entry_mac_begin(mac, &s);
    if (rc) return rc;
    kvs_entry_mac_update(&s, h, covered + 32);
    kvs_entry_mac_update(&s, c->kv, c->kv_bytes);
    return kvs_entry_mac_end(&s, h + covered + 32);
}

static atomic_uint tmp_counter;

int kvs_disk_tmp_path(const char *dir, const char *hex, char *buf, size_t cap) {
    return snprintf(buf, cap, "%s/.%.64s.%ld.%u.tmp", dir, hex, (long)getpid(), atomic_fetch_add(&tmp_counter, 1)) <
                   (int)cap
               ? KVS_OK
               : KVS_ERR_BUFFER_TOO_SMALL;
}

/* A path as a write failure shows it: its last PATH_SHOWN bytes at most
 * (after "..."), so the reason after it fits the 1 KiB message (a cache dir
 * of ~1,000 characters had cut "No space left on device" off). */
#define PATH_SHOWN 400
static const char *path_cut(const char *p) { return strlen(p) > PATH_SHOWN ? "..." : ""; }
static const char *path_tail(const char *p) {
    size_t n = strlen(p);
    return n > PATH_SHOWN ? p + n - PATH_SHOWN : p;
}

int kvs_disk_write(const char *dir, const kvs_key *fp, const kvs_chunk *c, int do_fsync, const kvs_entry_mac *mac) {
    if (!c->kv) return kvs_error(KVS_ERR_INVALID_ARG, "%s: chunk at pos %d has no payload to write", dir, c->pos0);
    char final[4096], tmp[4200], hex[65];
    int rc = kvs_disk_path(dir, &c->prefix_key, final, sizeof final);
    if (rc) return rc;
    kvs_key_to_hex(&c->prefix_key, hex);
    kvs_disk_tmp_path(dir, hex, tmp, sizeof tmp); /* fits: tmp is final's size and more */
    size_t hbytes = kvs_disk_header_bytes(c->n_tok, mac != NULL);
    uint8_t *h = malloc(hbytes);
    if (!h) return kvs_error(KVS_ERR_NOMEM, "%s: out of memory for a header", final);
    rc = kvs_disk_header_build(h, hbytes, fp, c, kvs_checksum64(c->kv, c->kv_bytes, 0), mac);
    if (rc) {
        free(h);
        return rc;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(h);
        return kvs_error(KVS_ERR_IO, "%s%s: cannot create: %s", path_cut(tmp), path_tail(tmp), strerror(errno));
    }
    int ok = write_all(fd, h, hbytes) == 0 && write_all(fd, c->kv, c->kv_bytes) == 0 &&
             (!do_fsync || fsync(fd) == 0);
    int err = errno;
    free(h);
    if (close(fd) && ok) {
        ok = 0;
        err = errno;
    }
    if (ok && rename(tmp, final)) {
        /* An empty directory in the entry's place (a stray mkdir) holds
         * nothing: it goes and the entry takes the name (it had blocked the
         * chain's storage for good). One with files in it stays, and the
         * write fails naming it. */
        err = errno;
        /* (another writer may have removed it first, or renamed its entry
         * in: the rename is tried again anyway) */
        if (err == EISDIR && (!rmdir(final) || errno == ENOENT || errno == ENOTDIR))
            err = rename(tmp, final) ? errno : 0;
        ok = !err;
    }
    if (!ok) {
        unlink(tmp);
        return kvs_error(KVS_ERR_IO, "%s%s: write failed: %s", path_cut(final), path_tail(final), strerror(err));
    }
    if (do_fsync) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    return KVS_OK;
}

/* --- reading --------------------------------------------------------------- */


int kvs_disk_verdict_status(kvs_disk_verdict v) {
    switch (v) {
    case KVS_DISK_OK: return KVS_OK;
    case KVS_DISK_MISSING: return KVS_ERR_NOT_FOUND;
    case KVS_DISK_BAD_MAGIC: return KVS_ERR_FORMAT;
    case KVS_DISK_BAD_VERSION: return KVS_ERR_UNSUPPORTED;
    case KVS_DISK_BAD_HEADER: return KVS_ERR_CORRUPT;
    case KVS_DISK_TRUNCATED: return KVS_ERR_CORRUPT;
    case KVS_DISK_FOREIGN: return KVS_ERR_MODEL_MISMATCH;
    case KVS_DISK_BAD_PAYLOAD: return KVS_ERR_CORRUPT;
    case KVS_DISK_BAD_MAC: return KVS_ERR_CORRUPT;
    default: return KVS_ERR_IO;
    }
}

#define FAIL(v, ...)                                    \
    do {                                                \
        *verdict = (v);                                 \
        kvs_error(kvs_disk_verdict_status(v), __VA_ARGS__);      \
        goto fail;                                      \
    } while (0)

int kvs_disk_header_parse_fixed(const uint8_t *fixed, size_t got, const char *what, kvs_disk_header *hd,
                                kvs_disk_verdict *verdict) {
    memset(hd, 0, sizeof *hd);
    if (got >= 4 && memcmp(fixed, KVS_DISK_MAGIC, 4)) FAIL(KVS_DISK_BAD_MAGIC, "%s: not a kvstitch cache entry (bad magic)", what);
    if (got < KVS_DISK_FIXED_BYTES) FAIL(KVS_DISK_TRUNCATED, "%s: truncated header (%zu bytes)", what, got);
    uint32_t version = kvs_get_le32(fixed + 4);
    if (version != KVS_DISK_VERSION)
        FAIL(KVS_DISK_BAD_VERSION, "%s: cache entry version %u, this build reads %u", what, version, KVS_DISK_VERSION);
    memcpy(hd->fp.b, fixed + 16, 32);
    memcpy(hd->prefix.b, fixed + 48, 32);
    memcpy(hd->content.b, fixed + 80, 32);
    memcpy(hd->parent.b, fixed + 112, 32);
    hd->shape.dtype = (kvs_kv_type)kvs_get_le32(fixed + 144);
    hd->shape.n_layer = (int32_t)kvs_get_le32(fixed + 148);
    hd->shape.n_kv_head = (int32_t)kvs_get_le32(fixed + 152);
    hd->shape.head_dim = (int32_t)kvs_get_le32(fixed + 156);
    hd->n_tok = (int32_t)kvs_get_le32(fixed + 160);
    hd->pos0 = (int32_t)kvs_get_le32(fixed + 164);
    hd->origin = kvs_get_le32(fixed + 12) & ~KVS_DISK_FLAG_MAC;
    hd->has_mac = (kvs_get_le32(fixed + 12) & KVS_DISK_FLAG_MAC) != 0;
    hd->created_ns = (int64_t)kvs_get_le64(fixed + 168);
    hd->payload_bytes = kvs_get_le64(fixed + 176);
    hd->payload_sum = kvs_get_le64(fixed + 184);
    hd->header_bytes = kvs_get_le32(fixed + 8);
    if (kvs_kv_shape_check(&hd->shape) || hd->n_tok <= 0 || hd->n_tok > KVS_DISK_MAX_TOKENS || hd->pos0 < 0 ||
        hd->pos0 > INT32_MAX - hd->n_tok || /* its end, pos0 + n_tok, is an int everywhere */
        hd->header_bytes != kvs_disk_header_bytes(hd->n_tok, hd->has_mac) ||
        hd->payload_bytes != kvs_kv_payload_bytes(&hd->shape, hd->n_tok) || (hd->origin & ~KVS_CHUNK_ORIGIN_MASK) ||
        ((hd->origin & KVS_CHUNK_BAKED) && !(hd->origin & KVS_CHUNK_DOC)) ||
        (!(hd->origin & KVS_CHUNK_BAKED) && kvs_chunk_neighbours(hd->origin)))
        FAIL(KVS_DISK_BAD_HEADER, "%s: impossible header fields", what);
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    return kvs_disk_verdict_status(*verdict);
}

int kvs_disk_header_parse_rest(const uint8_t *h, const char *what, kvs_disk_header *hd, kvs_disk_verdict *verdict) {
    size_t covered = KVS_DISK_FIXED_BYTES + (size_t)hd->n_tok * 4;
    uint8_t digest[32];
    kvs_sha256_digest(h, covered, digest);
    if (memcmp(digest, h + covered, 32)) FAIL(KVS_DISK_BAD_HEADER, "%s: header checksum mismatch", what);
    /* The MAC, then the padding: not under the digest (the MAC is checked
     * with the payload); writers zero the padding, so anything else is damage. */
    const size_t pad = covered + 32 + (hd->has_mac ? KVS_ENTRY_MAC_BYTES : 0);
    if (hd->has_mac) memcpy(hd->mac, h + covered + 32, KVS_ENTRY_MAC_BYTES);
    for (size_t i = pad; i < hd->header_bytes; i++)
        if (h[i]) FAIL(KVS_DISK_BAD_HEADER, "%s: nonzero header padding at byte %zu", what, i);
    hd->tokens = malloc((size_t)hd->n_tok * sizeof(int32_t));
    if (!hd->tokens) FAIL(KVS_DISK_IO, "%s: out of memory", what);
    for (int i = 0; i < hd->n_tok; i++) hd->tokens[i] = (int32_t)kvs_get_le32(h + KVS_DISK_FIXED_BYTES + 4 * (size_t)i);
    /* The keys must be those of the tokens: a header that was rewritten by
     * hand, or damaged before its digest was computed, is caught here. */
    kvs_key k;
    kvs_key_prefix(&hd->parent, hd->tokens, hd->n_tok, &k);
    if (!kvs_key_equal(&k, &hd->prefix)) FAIL(KVS_DISK_BAD_HEADER, "%s: prefix key does not match the tokens", what);
    kvs_key_content(&hd->fp, hd->tokens, hd->n_tok, &k);
    if (!kvs_key_equal(&k, &hd->content)) FAIL(KVS_DISK_BAD_HEADER, "%s: content key does not match the tokens", what);
    if (hd->pos0 == 0 && !kvs_key_equal(&hd->parent, &hd->fp))
        FAIL(KVS_DISK_BAD_HEADER, "%s: chunk at position 0 is not rooted in its fingerprint", what);
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    free(hd->tokens);
    hd->tokens = NULL;
    return kvs_disk_verdict_status(*verdict);
}

int kvs_disk_header_to_chunk(const kvs_disk_header *hd, int with_payload, kvs_chunk **out) {
    kvs_chunk *c;
    int rc = kvs_chunk_new(&hd->shape, hd->n_tok, with_payload, &c);
    if (rc) return rc;
    c->prefix_key = hd->prefix;
    c->content_key = hd->content;
    c->parent_key = hd->parent;
    c->pos0 = hd->pos0;
    c->origin = hd->origin;
    c->created_ns = hd->created_ns;
    memcpy(c->tokens, hd->tokens, (size_t)hd->n_tok * sizeof(int32_t));
    *out = c;
    return KVS_OK;
}

int kvs_disk_header_check_owner(const kvs_disk_header *hd, const kvs_key *want_fp, const kvs_kv_shape *want_shape,
                                const char *what, kvs_disk_verdict *verdict) {
    if ((want_fp && !kvs_key_equal(want_fp, &hd->fp)) || (want_shape && !kvs_kv_shape_equal(want_shape, &hd->shape))) {
        *verdict = KVS_DISK_FOREIGN;
        return kvs_error(KVS_ERR_MODEL_MISMATCH, "%s: entry of another model or KV shape", what);
    }
    *verdict = KVS_DISK_OK;
    return KVS_OK;
}

int kvs_disk_header_mac_begin(const uint8_t *h, const kvs_disk_header *hd, const kvs_entry_mac *mac,
                              kvs_entry_mac_state *s, const char *what, kvs_disk_verdict *verdict) {
    if (!hd->has_mac) FAIL(KVS_DISK_BAD_MAC, "%s: entry without a MAC (the cache is opened with a key)", what);
    if (s) {
        if (kvs_entry_mac_begin(mac, s)) FAIL(KVS_DISK_IO, "%s: HMAC-SHA256 failed (libcrypto)", what);
        kvs_entry_mac_update(s, h, KVS_DISK_FIXED_BYTES + (size_t)hd->n_tok * 4 + 32);
    }
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    return kvs_disk_verdict_status(*verdict);
}

int kvs_disk_header_mac_check(const kvs_disk_header *hd, kvs_entry_mac_state *s, const char *what,
                              kvs_disk_verdict *verdict) {
    uint8_t tag[KVS_ENTRY_MAC_BYTES];
    if (kvs_entry_mac_end(s, tag)) FAIL(KVS_DISK_IO, "%s: HMAC-SHA256 failed (libcrypto)", what);
    if (!kvs_entry_mac_equal(tag, hd->mac))
        FAIL(KVS_DISK_BAD_MAC, "%s: MAC mismatch (written without this cache key, or damaged)", what);
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    return kvs_disk_verdict_status(*verdict);
}

/* Reads and checks the header of an open entry file (see disk.h). With mac,
 * the entry's MAC is required, and s (if not NULL) begun over the header. */
static int read_header_fd(int fd, const char *path, const kvs_key *want_fp, const kvs_kv_shape *want_shape,
                          const kvs_entry_mac *mac, kvs_entry_mac_state *s, kvs_disk_header *hd,
                          kvs_disk_verdict *verdict, kvs_disk_file_id *seen) {
    uint8_t fixed[KVS_DISK_FIXED_BYTES];
    uint8_t *rest = NULL;
    memset(hd, 0, sizeof *hd);
    struct stat st;
    if (fstat(fd, &st)) FAIL(KVS_DISK_IO, "%s: stat: %s", path, strerror(errno));
    if (seen)
        *seen = (kvs_disk_file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino, (int64_t)st.st_size,
                                   (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
    ssize_t got = pread_all(fd, fixed, sizeof fixed, 0);
    if (got < 0) FAIL(KVS_DISK_IO, "%s: read: %s", path, strerror(errno));
    int rc = kvs_disk_header_parse_fixed(fixed, (size_t)got, path, hd, verdict);
    if (rc) return rc;
    if ((uint64_t)st.st_size < hd->header_bytes)
        FAIL(KVS_DISK_TRUNCATED, "%s: truncated (%lld bytes, header alone is %zu)", path, (long long)st.st_size,
             hd->header_bytes);
    rest = malloc(hd->header_bytes);
    if (!rest) FAIL(KVS_DISK_IO, "%s: out of memory", path);
    if (pread_all(fd, rest, hd->header_bytes, 0) != (ssize_t)hd->header_bytes)
        FAIL(KVS_DISK_IO, "%s: read: %s", path, strerror(errno));
    rc = kvs_disk_header_parse_rest(rest, path, hd, verdict);
    if (rc) {
        free(rest);
        return rc;
    }
    if ((uint64_t)st.st_size != hd->header_bytes + hd->payload_bytes)
        FAIL(KVS_DISK_TRUNCATED, "%s: %lld bytes, header says %llu", path, (long long)st.st_size,
             (unsigned long long)(hd->header_bytes + hd->payload_bytes));
    /* The name must be the prefix key (a file renamed by hand is not trusted). */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char hex[65];
    kvs_key_to_hex(&hd->prefix, hex);
    if (strncmp(base, hex, 64) || strcmp(base + 64, KVS_DISK_EXT))
        FAIL(KVS_DISK_BAD_HEADER, "%s: file name is not its prefix key", path);
    rc = kvs_disk_header_check_owner(hd, want_fp, want_shape, path, verdict);
    if (!rc && mac) rc = kvs_disk_header_mac_begin(rest, hd, mac, s, path, verdict);
    if (rc) goto fail_rc;
    free(rest);
    return KVS_OK;
fail:
    rc = kvs_disk_verdict_status(*verdict);
fail_rc:
    free(rest);
    free(hd->tokens);
    hd->tokens = NULL;
    return rc;
}

/* Non-blocking open + regular-file check: a FIFO in an entry's place must
 * not hang the reader (base/file.h); a symlink is not an entry either. */
static int open_entry(const char *path, kvs_disk_verdict *verdict, kvs_disk_file_id *seen) {
    int fd = kvs_open_regular_nofollow(path, NULL);
    if (seen) *seen = (kvs_disk_file_id){0}; /* (read_header_fd says which file it read) */
    if (fd == KVS_OPEN_NOT_REGULAR) {
        *verdict = KVS_DISK_NOT_REGULAR;
        kvs_error(kvs_disk_verdict_status(*verdict), "%s: not a regular file (left alone)", path);
    } else if (fd < 0) {
        *verdict = errno == ENOENT ? KVS_DISK_MISSING : KVS_DISK_IO;
        kvs_error(kvs_disk_verdict_status(*verdict), "%s: %s", path, strerror(errno));
    }
    return fd;
}

/* The access stamp of the cross-process LRU (disk_budget.h): the entry's
 * atime, set explicitly (relatime would not). Best effort. */
static void touch_atime(int fd) {
    struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    futimens(fd, ts);
}

int kvs_disk_read_header(const char *path, const kvs_key *fp, const kvs_kv_shape *shape, const kvs_entry_mac *mac,
                         kvs_chunk **out, kvs_key *file_fp, kvs_disk_verdict *verdict, kvs_disk_file_id *seen) {
    kvs_disk_verdict v_local;
    if (!verdict) verdict = &v_local;
    int fd = open_entry(path, verdict, seen);
    if (fd < 0) return kvs_disk_verdict_status(*verdict);
    kvs_disk_header hd;
    int rc = read_header_fd(fd, path, fp, shape, mac, NULL, &hd, verdict, seen);
    close(fd);
    if (rc) return rc;
    kvs_chunk *c;
    rc = kvs_disk_header_to_chunk(&hd, 0, &c);
    free(hd.tokens);
    if (rc) {
        *verdict = KVS_DISK_IO;
        return rc;
    }
    if (file_fp) *file_fp = hd.fp;
    *out = c;
    return KVS_OK;
}

/* Opens the entry of indexed chunk c in dir (its name into path, of
 * path_size bytes) for a payload read: its header read and checked (fingerprint,
 * shape) and still describing c (tokens, position, origin, parent). On
 * KVS_OK *fd is open and hd holds the payload's offset and checksum (its
 * tokens freed), and with mac *s is begun over the header (the caller
 * ends it); else nothing is open and *verdict says why. */
static int open_indexed_entry(const char *dir, const kvs_key *fp, const kvs_entry_mac *mac, const kvs_chunk *c,
                              char *path, size_t path_size, int *fd, kvs_disk_header *hd, kvs_entry_mac_state *s,
                              kvs_disk_verdict *verdict, kvs_disk_file_id *seen) {
    if (seen) *seen = (kvs_disk_file_id){0};
    int rc = kvs_disk_path(dir, &c->prefix_key, path, path_size);
    if (rc) {
        *verdict = KVS_DISK_IO;
        return rc;
    }
    *fd = open_entry(path, verdict, seen);
    if (*fd < 0) return kvs_disk_verdict_status(*verdict);
    rc = read_header_fd(*fd, path, fp, &c->shape, mac, s, hd, verdict, seen);
    if (rc) goto fail_rc;
    /* The document bit aside: a document computed right after its prefix
     * is that prefix's exact history, keyed as such (the same parent and
     * tokens, the same bits), so the exact lookup meets its entry by key;
     * a baked one has a parent of its own. Taken as damage, the document's
     * file had been deleted by the next request for it. */
    int same = hd->n_tok == c->n_tok && hd->pos0 == c->pos0 && !((hd->origin ^ c->origin) & ~KVS_CHUNK_DOC) &&
               kvs_key_equal(&hd->parent, &c->parent_key) &&
               !memcmp(hd->tokens, c->tokens, (size_t)c->n_tok * sizeof(int32_t));
    free(hd->tokens);
    hd->tokens = NULL;
    if (!same) {
        if (mac) kvs_entry_mac_abort(s);
        FAIL(KVS_DISK_BAD_HEADER, "%s: entry no longer describes the indexed chunk", path);
    }
    return KVS_OK;
fail:
    rc = kvs_disk_verdict_status(*verdict);
fail_rc:
    close(*fd);
    *fd = -1;
    return rc;
}

int kvs_disk_load_payload(const char *dir, const kvs_key *fp, const kvs_entry_mac *mac, const kvs_chunk *c,
                          void **payload, kvs_disk_verdict *verdict, kvs_disk_file_id *seen) {
    kvs_disk_verdict v_local;
    if (!verdict) verdict = &v_local;
    char path[4096];
    int fd;
    kvs_disk_header hd;
    kvs_entry_mac_state ms = {0};
    int rc = open_indexed_entry(dir, fp, mac, c, path, sizeof path, &fd, &hd, &ms, verdict, seen);
    if (rc) return rc;
    uint8_t *buf = NULL;
    size_t alloc = (c->kv_bytes + 63) / 64 * 64;
    buf = aligned_alloc(64, alloc);
    if (!buf) FAIL(KVS_DISK_IO, "%s: out of memory for a %zu-byte payload", path, alloc);
    /* 256 KB at a time, checksummed while still in cache. */
    kvs_checksum_state cs;
    kvs_checksum64_init(&cs, 0);
    for (size_t at = 0; at < c->kv_bytes;) {
        size_t want = c->kv_bytes - at < ((size_t)256 << 10) ? c->kv_bytes - at : ((size_t)256 << 10);
        ssize_t got = pread_all(fd, buf + at, want, (off_t)(hd.header_bytes + at));
        if (got < 0) FAIL(KVS_DISK_IO, "%s: read: %s", path, strerror(errno));
        if ((size_t)got != want) FAIL(KVS_DISK_TRUNCATED, "%s: payload cut short", path);
        kvs_checksum64_update(&cs, buf + at, want);
        if (mac) kvs_entry_mac_update(&ms, buf + at, want);
        at += want;
    }
    if (kvs_checksum64_final(&cs) != hd.payload_sum)
        FAIL(KVS_DISK_BAD_PAYLOAD, "%s: payload checksum mismatch", path);
    if (mac && (rc = kvs_disk_header_mac_check(&hd, &ms, path, verdict))) goto fail;
    touch_atime(fd);
    close(fd);
    *payload = buf;
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    if (mac) kvs_entry_mac_abort(&ms);
    close(fd);
    free(buf);
    return kvs_disk_verdict_status(*verdict);
}

/* preadv of every iovec, advancing over short reads. Returns 0, or -1 with
 * errno, or 1 at end of file. */
static int preadv_all(int fd, struct iovec *iov, int n_iov, off_t off) {
    while (n_iov > 0) {
        int batch = n_iov < IOV_MAX ? n_iov : IOV_MAX;
        ssize_t r = preadv(fd, iov, batch, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) return 1;
        off += r;
        while (n_iov > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            n_iov--;
        }
        if (n_iov > 0 && r > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

int kvs_disk_read_into_kv(const char *dir, const kvs_key *fp, const kvs_entry_mac *mac, const kvs_chunk *c, int off,
                          int n, const kvs_kv_buffer *kv, int slot, kvs_disk_verdict *verdict,
                          kvs_disk_file_id *seen) {
    kvs_disk_verdict v_local;
    if (!verdict) verdict = &v_local;
    *verdict = KVS_DISK_IO;
    if (seen) *seen = (kvs_disk_file_id){0};
    kvs_kv_shape kv_shape = kvs_kv_buffer_shape(kv);
    if (!kvs_kv_shape_equal(&c->shape, &kv_shape) || off < 0 || n <= 0 || off > c->n_tok - n || slot < 0 ||
        slot > kv->n_ctx - n)
        return kvs_error(KVS_ERR_INVALID_ARG, "disk read: tokens [%d, %d) of %d into slots [%d, %d) of %d", off,
                         off + n, c->n_tok, slot, slot + n, kv->n_ctx);
    kvs_kv_wrote(kv, -1, slot); /* before: a failed read may leave some rows written */
    char path[4096];
    int fd;
    kvs_disk_header hd;
    kvs_entry_mac_state ms = {0};
    int rc = open_indexed_entry(dir, fp, mac, c, path, sizeof path, &fd, &hd, &ms, verdict, seen);
    if (rc) return rc;
    struct iovec *iov = NULL, *work = NULL;
    uint8_t *sink = NULL;
    const kvs_kv_shape *s = &c->shape;
    const size_t row = kvs_kv_shape_row_bytes(s);
    const int before = off, after = c->n_tok - off - n;
    const int per_run = 1 + (before > 0) + (after > 0);
    const int n_runs = s->n_layer * 2 * s->n_kv_head;
    iov = malloc((size_t)n_runs * (size_t)per_run * sizeof *iov);
    work = malloc((size_t)n_runs * (size_t)per_run * sizeof *work);
    if (before || after) sink = malloc((size_t)n_runs * (size_t)(before + after) * row);
    if (!iov || !work || ((before || after) && !sink)) FAIL(KVS_DISK_IO, "%s: out of memory", path);
    /* File order: layer, K|V, head, token. Each head run of the chunk lands
     * at slot..slot+n of that head in the buffer. */
    int k = 0;
    uint8_t *sp = sink;
    for (int l = 0; l < s->n_layer; l++)
        for (int half = 0; half < 2; half++)
            for (int h = 0; h < s->n_kv_head; h++) {
                uint8_t *dst = kvs_kv_at(kv, l, half, h, slot);
                if (before) {
                    iov[k++] = (struct iovec){sp, (size_t)before * row};
                    sp += (size_t)before * row;
                }
                iov[k++] = (struct iovec){dst, (size_t)n * row};
                if (after) {
                    iov[k++] = (struct iovec){sp, (size_t)after * row};
                    sp += (size_t)after * row;
                }
            }
    /* Read in batches of about 256 KB and checksum each batch right away,
     * while it is still in cache: one pass over memory instead of two. */
    memcpy(work, iov, (size_t)k * sizeof *iov); /* preadv_all advances its copy */
    kvs_checksum_state cs;
    kvs_checksum64_init(&cs, 0);
    off_t at = (off_t)hd.header_bytes;
    for (int i = 0; i < k;) {
        int j = i;
        size_t batch = 0;
        while (j < k && (j == i || batch + iov[j].iov_len <= ((size_t)256 << 10))) batch += iov[j++].iov_len;
        int r = preadv_all(fd, work + i, j - i, at);
        if (r < 0) FAIL(KVS_DISK_IO, "%s: read: %s", path, strerror(errno));
        if (r > 0) FAIL(KVS_DISK_TRUNCATED, "%s: payload cut short", path);
        for (; i < j; i++) {
            kvs_checksum64_update(&cs, iov[i].iov_base, iov[i].iov_len);
            if (mac) kvs_entry_mac_update(&ms, iov[i].iov_base, iov[i].iov_len);
        }
        at += (off_t)batch;
    }
    if (kvs_checksum64_final(&cs) != hd.payload_sum) FAIL(KVS_DISK_BAD_PAYLOAD, "%s: payload checksum mismatch", path);
    if (mac && (rc = kvs_disk_header_mac_check(&hd, &ms, path, verdict))) goto fail;
    kvs_kv_mark_run(kv, slot, n);
    touch_atime(fd);
    close(fd);
    free(iov);
    free(work);
    free(sink);
    *verdict = KVS_DISK_OK;
    return KVS_OK;
fail:
    if (mac) kvs_entry_mac_abort(&ms);
    close(fd);
    free(iov);
    free(work);
    free(sink);
    return kvs_disk_verdict_status(*verdict);
}
